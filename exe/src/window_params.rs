//! The parameters of a window vertex (`Conv`, `MaxPool`: [`crate::codelets::Codelet`]):
//! which pass a convolution partial computes, the PopLibs vertex it stands for, the
//! geometry of the window, and the channel and row ranges of the tile's operand blocks.
//! A vertex holds its tile's block shared with the other workers' vertices
//! ([`WindowVertex`]): a large CNN has millions of window vertices, six per block.

use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Which product a [`Codelet::Conv`](crate::codelets::Codelet::Conv) vertex computes.
/// Operand blocks hold the channel and row ranges of [`WindowParams`], each in its channel
/// group ([`crate::layout`]): a block of
/// `nb` batch elements, `cb` channels, `r` rows of width `w` grouped by `g` is
/// `[nb][cb/g][r][w][g]` (with `g` = 1, `[nb][cb][r][w]`); the weights are OIHW, row-major.
///
/// | pass | operand 0 (group `in_group`) | operand 1 | output (group `out_group`) |
/// |---|---|---|---|
/// | `Forward` | `x[nb, C/g, in_rows, in_cols]` | `w[ob, C/g, KH, KW]` | `y[nb, ob, out_rows, out_cols]`; reduction `(kh, kw, c)` |
/// | `InputGrad` | `dy[nb, O/g, in_rows, in_cols]` | `w[O/g, cb, KH, KW]` | `dx[nb, cb, out_rows, out_cols]`; reduction `(kh, kw, o)` |
/// | `WeightGrad` | `x[nb, cb, in_rows, in_cols]` | `dy[nb, ob, out_rows, out_cols]` (group `aux_group`) | `dw[ob, cb, KH, KW]` row-major: the partial over the block's batch, rows and columns of the field; reduction `(n, oh, ow)` |
///
/// Units are `(batch element, channel)` pairs of the output in block order (`WeightGrad`:
/// output channels); the output operand is the whole block and each vertex writes the
/// elements of its units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WindowPass {
    /// The convolution.
    Forward,
    /// The gradient of its input.
    InputGrad,
    /// The gradient of its weights.
    WeightGrad,
}

/// The PopLibs vertex method of a convolution partial (`poplin::Plan::Method`), chosen per
/// layer by the planner as PopLibs' `getConvVertexTypeCandidates` offers them and its cost
/// model picks them: the candidate of fewest estimated cycles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConvMethod {
    /// The AMP vertices (`ConvPartialnx1`, `ConvPartial1x1Out`): passes of the AMP's input
    /// channels.
    #[default]
    Amp,
    /// `ConvPartialHorizontalMac`: per kernel position a dot product along the block's input
    /// channels in the vector unit (PopLibs' candidate for few channels per group, where the
    /// AMP's passes would be mostly padding); its pass is that dot product.
    Hmac,
    /// `ConvPartial1xNSLIC`: half activations, the SLIC instructions' 1×4 kernel window over
    /// at most 4 input channels (PopLibs' candidate for small-channel and grouped
    /// convolutions on Mk2). The kernel width is padded with zero weights to a multiple of
    /// 4, as PopLibs pads it (`ConvModel.cpp`, "SLIC pads the kernel width dimension"), so
    /// its pass is one 1×4 sub-kernel: 4 kernel columns × the block's channels.
    Slic,
}

impl ConvMethod {
    /// The default (serde skips it).
    pub fn is_amp(&self) -> bool {
        *self == ConvMethod::Amp
    }

    /// PopLibs' vertex name for a pass.
    pub fn vertex_name(self, pass: WindowPass) -> &'static str {
        match (self, pass) {
            (ConvMethod::Hmac, _) => "ConvPartialHorizontalMac",
            (ConvMethod::Slic, _) => "ConvPartial1xNSLIC",
            (ConvMethod::Amp, WindowPass::WeightGrad) => "ConvPartial1x1Out",
            (ConvMethod::Amp, _) => "ConvPartialnx1",
        }
    }
}

/// The whole convolution or pooling a window vertex is part of (the `ipusim_ir::conv`
/// geometry; pools have one channel per group and a `1 × 1` channel block).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowGeometry {
    /// Batch, input channels, input height and width.
    pub n: u32,
    /// Input channels.
    pub c: u32,
    /// Input height.
    pub h: u32,
    /// Input width.
    pub w: u32,
    /// Output channels.
    pub o: u32,
    /// Kernel height and width.
    pub kh: u32,
    /// Kernel width.
    pub kw: u32,
    /// Stride `[height, width]`.
    pub stride: [u32; 2],
    /// Padding `[top, left, bottom, right]`.
    pub padding: [u32; 4],
    /// Kernel dilation `[height, width]`.
    pub dilation: [u32; 2],
    /// Convolution groups.
    pub groups: u32,
    /// Output height.
    pub oh: u32,
    /// Output width.
    pub ow: u32,
}

impl WindowGeometry {
    /// The input row read by output row `oh` at kernel row `kh` (`None`: padding).
    pub fn input_row(&self, oh: u32, kh: u32) -> Option<u32> {
        (oh * self.stride[0] + kh * self.dilation[0])
            .checked_sub(self.padding[0])
            .filter(|&r| r < self.h)
    }

    /// The input column read by output column `ow` at kernel column `kw` (`None`: padding).
    pub fn input_col(&self, ow: u32, kw: u32) -> Option<u32> {
        (ow * self.stride[1] + kw * self.dilation[1])
            .checked_sub(self.padding[1])
            .filter(|&c| c < self.w)
    }

    /// The output row reading input row `h` at kernel row `kh`, if any.
    pub fn output_row(&self, h: u32, kh: u32) -> Option<u32> {
        let p = (h + self.padding[0]).checked_sub(kh * self.dilation[0])?;
        (p % self.stride[0] == 0 && p / self.stride[0] < self.oh).then_some(p / self.stride[0])
    }

    /// The output column reading input column `w` at kernel column `kw`, if any.
    pub fn output_col(&self, w: u32, kw: u32) -> Option<u32> {
        let p = (w + self.padding[1]).checked_sub(kw * self.dilation[1])?;
        (p % self.stride[1] == 0 && p / self.stride[1] < self.ow).then_some(p / self.stride[1])
    }

    /// Input channels per group.
    pub fn c_per_group(&self) -> u32 {
        self.c / self.groups.max(1)
    }

    /// Output channels per group.
    pub fn o_per_group(&self) -> u32 {
        self.o / self.groups.max(1)
    }
}

/// Parameters of a window vertex: the geometry, the tile's block, the rows its spatial
/// operands hold, their channel groups, and the vertex's units.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowParams {
    /// The whole convolution or pooling.
    pub geometry: WindowGeometry,
    /// The convolution group of the block (pools: 0).
    pub group: u32,
    /// Batch range `[begin, end)` of the block (`WeightGrad`: a part of the reduction).
    pub batch: (u32, u32),
    /// Channel range of the output, within the group: `o` (`Forward`, `WeightGrad`), `c`
    /// (`InputGrad`), the plane channel (pools).
    pub out_channels: (u32, u32),
    /// The reduction's part the block sums over, within the group: input channels
    /// (`Forward`), output channels (`InputGrad`); `WeightGrad`: the input-channel range of
    /// the block's output; unused by pools (`(0, 0)`).
    pub in_channels: (u32, u32),
    /// Output rows of the block: `oh` (`Forward`, `MaxPool`), `h` (`InputGrad`,
    /// `MaxPoolGrad`); `WeightGrad`: the rows `oh` of the field the block sums over (a part
    /// of the reduction).
    pub out_rows: (u32, u32),
    /// Rows held by operand 0 (of `x`, or of `dy` for `InputGrad`).
    pub in_rows: (u32, u32),
    /// Rows held by `dy` for `MaxPoolGrad` (else unused).
    pub aux_rows: (u32, u32),
    /// Output columns of the block: `ow` (`Forward`, `MaxPool`), `w` (`InputGrad`,
    /// `MaxPoolGrad`); `WeightGrad`: the columns `ow` of the field the block sums over.
    pub out_cols: (u32, u32),
    /// Columns held by operand 0 (of `x`, or of `dy` for `InputGrad`); `dy` of
    /// `WeightGrad` holds `out_cols`, of `MaxPoolGrad` every column.
    pub in_cols: (u32, u32),
    /// The vertex's units `[begin, end)` in block order (`(batch, channel)` pairs, or output
    /// channels for `WeightGrad`); it writes exactly their elements of the output block. In
    /// a [`WindowVertex`]'s shared block: every unit of the block.
    pub units: (u32, u32),
    /// AMP input channels per pass (`Conv`; 1 for pools).
    pub input_channels: u32,
    /// Channel group of operand 0's block (1: NCHW rows).
    #[serde(default = "one")]
    pub in_group: u32,
    /// Channel group of operand 1's block when it is a feature map (`dy` of `WeightGrad` and
    /// `MaxPoolGrad`); 1 otherwise.
    #[serde(default = "one")]
    pub aux_group: u32,
    /// Channel group of the output block (1 for `WeightGrad`, whose output is OIHW).
    #[serde(default = "one")]
    pub out_group: u32,
    /// The order of a `Forward` block's weights ([`WindowParams::forward_weight_at`]): 0,
    /// `[o][c][kh][kw]` over the block; `k > 0`, in chunks of the group's input channels
    /// `[j·k, (j+1)·k)`, each chunk's `[o][c][kh][kw]` in turn (weights laid out in the
    /// input-gradient pass's blocks, one chunk of input channels per block). Unused by the
    /// other passes.
    #[serde(default)]
    pub weight_chunk: u32,
}

fn one() -> u32 {
    1
}

impl WindowParams {
    /// Channels of the block's output channel range.
    pub fn out_channel_count(&self) -> u64 {
        u64::from(self.out_channels.1.saturating_sub(self.out_channels.0))
    }

    /// Batch elements of the block.
    pub fn batch_count(&self) -> u64 {
        u64::from(self.batch.1.saturating_sub(self.batch.0))
    }

    /// The position of weight `[o][c][0][0]` (`o` and `c` relative to the block's output
    /// channels and its part of the reduction) in a `Forward` block's weight operand, in the
    /// order [`WindowParams::weight_chunk`] gives; the kernel's taps follow it.
    pub fn forward_weight_at(&self, o: usize, c: usize) -> usize {
        let taps = self.geometry.kh as usize * self.geometry.kw as usize;
        let (r0, r1) = (self.in_channels.0 as usize, self.in_channels.1 as usize);
        let k = self.weight_chunk as usize;
        if k == 0 {
            return (o * r1.saturating_sub(r0) + c) * taps;
        }
        // The chunk of channel `c`: its part of the block, the chunks before it whole.
        let abs = r0 + c;
        let begin = r0.max(abs / k * k);
        let end = r1.min((abs / k + 1) * k);
        let outs = self.out_channel_count() as usize;
        ((begin - r0) * outs + o * (end - begin) + (abs - begin)) * taps
    }

    /// The channels from block-relative input channel `c` to the end of its weight chunk
    /// (to the end of the block's part of the reduction when the weights are row-major).
    pub fn weight_chunk_rest(&self, c: usize) -> usize {
        let (r0, r1) = (self.in_channels.0 as usize, self.in_channels.1 as usize);
        let end = match (r0 + c).checked_div(self.weight_chunk as usize) {
            Some(j) => r1.min((j + 1) * self.weight_chunk as usize),
            None => r1,
        };
        end.saturating_sub(r0 + c)
    }

    /// The `(batch element, channel)` of unit `u` (block-relative, `u` in block order).
    pub fn unit(&self, u: u32) -> (u32, u32) {
        let per = self
            .out_channels
            .1
            .saturating_sub(self.out_channels.0)
            .max(1);
        (self.batch.0 + u / per, self.out_channels.0 + u % per)
    }

    /// The position in the output block of element `(row, col)` (block-relative) of unit
    /// `u`'s plane (not `WeightGrad`).
    pub fn out_position(&self, u: u32, row: u64, col: u64) -> u64 {
        let (n, ch) = self.unit(u);
        let rows = u64::from(self.out_rows.1.saturating_sub(self.out_rows.0));
        let width = u64::from(self.out_cols.1.saturating_sub(self.out_cols.0));
        let nl = u64::from(n - self.batch.0);
        let cl = u64::from(ch - self.out_channels.0);
        crate::layout::Grouped {
            batch: self.batch_count(),
            channels: self.out_channel_count(),
            spatial: rows * width,
            group: u64::from(self.out_group),
        }
        .index(nl, cl, row * width + col)
    }
}

/// A window vertex's parameters as the executable holds them: its tile's block, shared by
/// the vertices of the tile's group (one per worker), and the worker's units of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowVertex {
    /// The block (its `units` are all of the block's).
    pub block: Arc<WindowParams>,
    /// The vertex's units `[begin, end)` (see [`WindowParams::units`]).
    pub units: (u32, u32),
}

impl WindowVertex {
    /// The vertex's own parameters: the block's, with the vertex's units.
    pub fn params(&self) -> WindowParams {
        WindowParams {
            units: self.units,
            ..(*self.block).clone()
        }
    }
}

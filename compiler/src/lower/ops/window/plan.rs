//! The convolution planner: how a window pass's output and reduction are partitioned over
//! tiles, the blocks a partition gives, the element ranges each block reads and writes in
//! its operands' channel-grouped layouts, and the planner's cost of a partition.
//!
//! In the spirit of PopLibs' convolution planner (ipu-hardware.md §8): the output is
//! partitioned into blocks over convolution groups (every group its own blocks), batch,
//! output channels and output rows (the input gradient: input channels and input rows; the
//! weight gradient: output and input channels), and the reduction is split too: input
//! channels for the forward pass, output channels for the input gradient, the batch and the
//! rows of the output field for the weight gradient (PopLibs plans the weight-update pass as
//! a convolution whose input channels are the field, which its partition splits). Channel
//! splits fall on whole channel groups of the operands they cut, so that a block's part of a
//! feature map is a few contiguous regions (`[C/g][rows][W][g]` runs).
//!
//! The plan of fewest estimated cycles is kept among those whose per-tile operand and output
//! bytes fit in the op's memory proportion (`CompileOptions::memory_proportion`: its own
//! entry, else the program's `available_memory_proportion`); when none fits, the one of
//! fewest bytes (the memory plan then reports the out-of-memory tiles). A candidate's cost is
//! the registry's estimate of its first (largest) block's vertex group
//! (`ipusim_exe::cycles::window`, the function that charges the built vertices) plus its
//! operand bytes at the exchange rate, [`REGION_CYCLES`] per exchange region its operands
//! need, and for a split reduction the partials' exchange and sum (our proxy).

use crate::codelets::{Codelet, ConvMethod, WindowGeometry, WindowParams, WindowPass};
use crate::lower::core::Lowerer;
use crate::target::Target;
use ipusim_exe::cycles::conv::SLIC_WINDOW_WIDTH;
use ipusim_exe::cycles::conv_reduce::multi_stage_reduce_plan;
use ipusim_exe::cycles::window::{window_group_cycles, SLIC_CHANNELS};
use ipusim_ir::{DType, NodeId};

/// `(begin, len)` element ranges of a tensor.
pub(super) type Ranges = Vec<(u64, u64)>;

/// An output block: group, batch, channel and row ranges.
pub(super) type OutputKey = (u32, (u32, u32), (u32, u32), (u32, u32), (u32, u32));

/// Which op of the family a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Conv(WindowPass),
    Pool { grad: bool },
}

/// The channel groups ([`ipusim_exe::layout`]) of a pass's feature maps: operand 0, operand
/// 1 when it is a feature map (`dy` of the weight gradient and of the pooling gradient),
/// and the output. 1 is the plain NCHW layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Groups {
    pub x: u32,
    pub aux: u32,
    pub out: u32,
}

impl Groups {
    /// The granularity of the splits of (output channels, rows, reduction): a split of a
    /// dimension that indexes a grouped feature map's channels falls on whole groups.
    pub fn granularity(&self, kind: Kind) -> (u32, u32, u32) {
        match kind {
            Kind::Conv(WindowPass::Forward | WindowPass::InputGrad) => (self.out, 1, self.x),
            // Output channels index dy, the "rows" (input channels) index x.
            Kind::Conv(WindowPass::WeightGrad) => (self.aux, self.x, 1),
            Kind::Pool { grad } => {
                let aux = if grad { self.aux } else { 1 };
                // Powers of two: the largest is their least common multiple.
                (self.x.max(self.out).max(aux), 1, 1)
            }
        }
    }
}

/// One tile's block: the group, and the ranges of the partitioned dimensions.
#[derive(Clone, Copy, Debug)]
pub(super) struct Block {
    pub group: u32,
    /// Batch range (weight gradient: a part of the reduction).
    pub batch: (u32, u32),
    /// Output channel range within the group (pools: plane channels).
    pub channels: (u32, u32),
    /// Output rows (weight gradient: the input-channel range).
    pub rows: (u32, u32),
    /// Output columns (weight gradient: the field's columns, a part of the reduction; pools:
    /// every column).
    pub cols: (u32, u32),
    /// The part of the reduction: input channels (`Forward`) or output channels
    /// (`InputGrad`) within the group, the rows of the output field (`WeightGrad`); unused
    /// (`(0, 0)`) by pools.
    pub red: (u32, u32),
}

impl Block {
    /// The output block this block computes (a part of, when the reduction is split).
    pub fn output_key(&self, kind: Kind) -> OutputKey {
        match kind {
            Kind::Conv(WindowPass::WeightGrad) => {
                (self.group, (0, 0), self.channels, self.rows, (0, 0))
            }
            _ => (self.group, self.batch, self.channels, self.rows, self.cols),
        }
    }
}

/// Splits of the partitioned dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Split {
    pub batch: u32,
    pub channels: u32,
    pub rows: u32,
    /// Splits of the output columns (the weight gradient: of the field's columns, a part of
    /// its reduction; 1 for pools).
    pub cols: u32,
    /// Splits of the reduction (`Forward`, `InputGrad`: channels; `WeightGrad`: field rows;
    /// 1 for pools).
    pub red: u32,
    /// The vertex of every block (pools and the weight gradient: the AMP's, unused).
    pub method: ConvMethod,
}

impl Split {
    /// True when partial results of several blocks are summed into each output block.
    pub fn reduces(&self, kind: Kind) -> bool {
        match kind {
            Kind::Conv(WindowPass::WeightGrad) => self.batch > 1 || self.red > 1 || self.cols > 1,
            Kind::Conv(_) => self.red > 1,
            Kind::Pool { .. } => false,
        }
    }
}

/// The vertex methods the planner weighs for a pass, as PopLibs'
/// `getConvVertexTypeCandidates` offers AMP, SLIC and HMAC candidates for every convolution
/// (its cost model then keeps the cheapest). The weight gradient keeps the AMP's 1x1-output
/// product (see `ipusim_exe::cycles::window`); VMAC is not modelled. Our pruning of the
/// search: the HMAC and the SLIC are weighed only when the reduction has fewer channels per
/// group than one AMP pass takes (`amp`), where the AMP's passes are part padding; with full
/// passes the AMP does at least twice the SLIC's and 16 times the HMAC's multiply-accumulates
/// per cycle. The SLIC is offered for the forward pass of half activations on a target that
/// has it, with an undilated kernel and an innermost stride of 1 or 2 (the vertex's
/// `outStride`, PopLibs' `getConvPartialSlicInnerLoopCycles`); its blocks also need at most
/// [`SLIC_CHANNELS`] reduction channels ([`method_fits`]). The input gradient is not offered
/// the SLIC: its stride-dilated input is what the vertex cannot read (PopLibs would dilate
/// it explicitly first, a transform we do not model).
fn methods(target: &Target, pr: &Problem, reduction_channels: u32, amp: u32) -> Vec<ConvMethod> {
    let mut out = vec![ConvMethod::Amp];
    let few = reduction_channels < amp;
    let g = pr.geometry;
    match pr.kind {
        Kind::Conv(WindowPass::Forward) if few => {
            if target.slic && pr.input == DType::F16 && g.dilation == [1, 1] && g.stride[1] <= 2 {
                out.push(ConvMethod::Slic);
            }
            out.push(ConvMethod::Hmac);
        }
        Kind::Conv(WindowPass::InputGrad) if few => out.push(ConvMethod::Hmac),
        _ => {}
    }
    out
}

/// True when `method`'s vertex can compute the blocks of `red_splits` splits of the
/// reduction (`extent` channels in units of `gran`): a SLIC vertex takes at most
/// [`SLIC_CHANNELS`] input channels (PopLibs' planner gives a SLIC tile one input-channel
/// group, `ConvModel.cpp`); the first block is the largest.
fn method_fits(method: ConvMethod, extent: u32, red_splits: u32, gran: u32) -> bool {
    method != ConvMethod::Slic || span(first_range(extent, red_splits, gran)) <= SLIC_CHANNELS
}

/// The reduction elements of one pass of `method`'s vertex over a block whose reduction
/// channels are `red`: the AMP's input channels, the HMAC's dot product along all of the
/// block's channels (one input-channel group), or the SLIC's 1×4 sub-kernel over them.
pub(super) fn pass_channels(method: ConvMethod, amp: u32, red: (u32, u32)) -> u32 {
    match method {
        ConvMethod::Amp => amp,
        ConvMethod::Hmac => span(red).max(1),
        ConvMethod::Slic => SLIC_WINDOW_WIDTH * span(red).max(1),
    }
}

pub(super) fn span(r: (u32, u32)) -> u32 {
    r.1.saturating_sub(r.0)
}

/// The sizes of the three partitioned output dimensions: batch, channels, rows (the weight
/// gradient: batch — a split of the reduction —, output channels, input channels).
pub(super) fn extents(kind: Kind, g: &WindowGeometry) -> (u32, u32, u32) {
    match kind {
        Kind::Conv(WindowPass::Forward) => (g.n, g.o_per_group(), g.oh),
        Kind::Conv(WindowPass::InputGrad) => (g.n, g.c_per_group(), g.h),
        Kind::Conv(WindowPass::WeightGrad) => (g.n, g.o_per_group(), g.c_per_group()),
        Kind::Pool { grad: false } => (g.n, g.c, g.oh),
        Kind::Pool { grad: true } => (g.n, g.c, g.h),
    }
}

/// The columns a split may divide: the output's (the weight gradient: the field's); 0 for
/// pools, whose blocks hold whole rows.
pub(super) fn col_extent(kind: Kind, g: &WindowGeometry) -> u32 {
    match kind {
        Kind::Conv(WindowPass::Forward | WindowPass::WeightGrad) => g.ow,
        Kind::Conv(WindowPass::InputGrad) => g.w,
        Kind::Pool { .. } => 0,
    }
}

/// The size of the reduction split besides the batch (0 for pools): input channels
/// (`Forward`), output channels (`InputGrad`), rows of the output field (`WeightGrad`).
pub(super) fn reduction_extent(kind: Kind, g: &WindowGeometry) -> u32 {
    match kind {
        Kind::Conv(WindowPass::Forward) => g.c_per_group(),
        Kind::Conv(WindowPass::InputGrad) => g.o_per_group(),
        Kind::Conv(WindowPass::WeightGrad) => g.oh,
        Kind::Pool { .. } => 0,
    }
}

/// The splits `s` of an extent `d` (in units of `gran` elements) that give distinct block
/// sizes, each the fewest splits for its block size.
fn candidates(d: u32, gran: u32) -> Vec<u32> {
    let d = d.div_ceil(gran.max(1));
    let mut out = Vec::new();
    let mut s = 1u32;
    while s <= d.max(1) {
        out.push(s);
        let block = d.div_ceil(s);
        if block <= 1 {
            break;
        }
        // The next block size down, and the fewest splits that give it.
        s = d.div_ceil(block - 1);
    }
    out
}

/// `n` ranges splitting `[0, d)` in blocks of whole units of `gran`, empty ones dropped.
fn ranges(d: u32, n: u32, gran: u32) -> Vec<(u32, u32)> {
    let gran = gran.max(1);
    let b = d.div_ceil(gran).div_ceil(n.max(1)).max(1) * gran;
    (0..n.max(1))
        .map(|i| ((i * b).min(d), ((i + 1) * b).min(d)))
        .filter(|r| r.0 < r.1)
        .collect()
}

/// The first (largest) of the `n` ranges of [`ranges`].
fn first_range(d: u32, n: u32, gran: u32) -> (u32, u32) {
    ranges(d, n, gran).first().copied().unwrap_or((0, 0))
}

/// The blocks of a split, in block order (group, batch, channels, rows, columns,
/// reduction).
pub(super) fn blocks(
    groups: u32,
    (kind, gr): (Kind, Groups),
    g: &WindowGeometry,
    e: (u32, u32, u32),
    s: Split,
) -> Vec<Block> {
    let (gc, gro, gred) = gr.granularity(kind);
    let red = reduction_extent(kind, g);
    let cols = match col_extent(kind, g) {
        0 => vec![(0, pool_width(kind, g))],
        w => ranges(w, s.cols, 1),
    };
    let parts = if red == 0 {
        vec![(0, 0)]
    } else {
        ranges(red, s.red, gred)
    };
    let mut out = Vec::new();
    for group in 0..groups {
        for &batch in &ranges(e.0, s.batch, 1) {
            for &channels in &ranges(e.1, s.channels, gc) {
                for &rows in &ranges(e.2, s.rows, gro) {
                    for &cols in &cols {
                        for &red in &parts {
                            out.push(Block {
                                group,
                                batch,
                                channels,
                                rows,
                                cols,
                                red,
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

/// The output width of a pool (its blocks hold whole rows).
fn pool_width(kind: Kind, g: &WindowGeometry) -> u32 {
    match kind {
        Kind::Pool { grad: true } => g.w,
        _ => g.ow,
    }
}

/// The input rows `[lo, hi)` output rows `rows` read (forward windows), at least one row.
pub(super) fn input_rows(g: &WindowGeometry, rows: (u32, u32)) -> (u32, u32) {
    let lo = (rows.0 * g.stride[0]).saturating_sub(g.padding[0]);
    let hi = ((rows.1.saturating_sub(1)) * g.stride[0] + (g.kh - 1) * g.dilation[0] + 1)
        .saturating_sub(g.padding[0])
        .min(g.h);
    clamp_rows(lo, hi, g.h)
}

/// The input columns `[lo, hi)` output columns `cols` read, at least one column.
fn input_cols(g: &WindowGeometry, cols: (u32, u32)) -> (u32, u32) {
    let lo = (cols.0 * g.stride[1]).saturating_sub(g.padding[1]);
    let hi = ((cols.1.saturating_sub(1)) * g.stride[1] + (g.kw - 1) * g.dilation[1] + 1)
        .saturating_sub(g.padding[1])
        .min(g.w);
    clamp_rows(lo, hi, g.w)
}

/// The output columns `[lo, hi)` whose windows reach input columns `cols`.
fn output_cols_of(g: &WindowGeometry, cols: (u32, u32)) -> (u32, u32) {
    let reach = (g.kw - 1) * g.dilation[1];
    let lo = (cols.0 + g.padding[1])
        .saturating_sub(reach)
        .div_ceil(g.stride[1]);
    let hi = ((cols.1.saturating_sub(1) + g.padding[1]) / g.stride[1] + 1).min(g.ow);
    clamp_rows(lo.min(hi), hi, g.ow)
}

/// The output rows `[lo, hi)` whose windows reach input rows `rows`.
fn output_rows_of(g: &WindowGeometry, rows: (u32, u32)) -> (u32, u32) {
    let reach = (g.kh - 1) * g.dilation[0];
    let lo = (rows.0 + g.padding[0])
        .saturating_sub(reach)
        .div_ceil(g.stride[0]);
    let hi = ((rows.1.saturating_sub(1) + g.padding[0]) / g.stride[0] + 1).min(g.oh);
    clamp_rows(lo.min(hi), hi, g.oh)
}

/// A non-empty row range inside `[0, n)`.
fn clamp_rows(lo: u32, hi: u32, n: u32) -> (u32, u32) {
    let lo = lo.min(n.saturating_sub(1));
    (lo, hi.max(lo + 1).min(n.max(1)))
}

/// The vertex parameters of a block (the units are set per vertex).
pub(super) fn block_params(
    kind: Kind,
    g: &WindowGeometry,
    b: &Block,
    amp: u32,
    gr: Groups,
) -> WindowParams {
    let mut p = WindowParams {
        geometry: *g,
        group: b.group,
        batch: b.batch,
        out_channels: b.channels,
        in_channels: (0, 0),
        out_rows: b.rows,
        in_rows: (0, 0),
        aux_rows: (0, 0),
        out_cols: b.cols,
        in_cols: (0, g.w),
        units: (0, 0),
        input_channels: amp,
        in_group: gr.x,
        aux_group: 1,
        out_group: gr.out,
    };
    match kind {
        Kind::Conv(WindowPass::Forward) => {
            p.in_rows = input_rows(g, b.rows);
            p.in_cols = input_cols(g, b.cols);
            p.in_channels = b.red;
        }
        Kind::Pool { grad: false } => {
            p.in_rows = input_rows(g, b.rows);
        }
        Kind::Conv(WindowPass::InputGrad) => {
            p.in_rows = output_rows_of(g, b.rows);
            p.in_cols = output_cols_of(g, b.cols);
            p.in_channels = b.red;
        }
        Kind::Conv(WindowPass::WeightGrad) => {
            p.in_channels = b.rows;
            p.out_rows = b.red;
            p.in_rows = input_rows(g, b.red);
            p.in_cols = input_cols(g, b.cols);
            p.aux_group = gr.aux;
            p.out_group = 1;
        }
        Kind::Pool { grad: true } => {
            let dy = output_rows_of(g, b.rows);
            let reach = input_rows(g, dy);
            p.aux_rows = dy;
            p.in_rows = (reach.0.min(b.rows.0), reach.1.max(b.rows.1));
            p.aux_group = gr.aux;
        }
    }
    if matches!(kind, Kind::Pool { .. }) {
        p.group = 0;
    }
    p
}

/// Merges touching `(begin, len)` ranges.
fn coalesce(ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (b, l) in ranges {
        match out.last_mut() {
            Some(last) if last.0 + last.1 == b => last.1 += l,
            _ => out.push((b, l)),
        }
    }
    out
}

/// Rows `rows` and columns `cols` of the planes `(n, channel)` for `n` in `batch`,
/// `channel` in `channels` (absolute channel indices, on whole groups of `group`) of a
/// feature map of `n_all` batch elements, `chans` channels, `h` rows and `w` columns held
/// grouped by `group` (`[C/g, N, H, W, g]`; row-major NCHW for a group of 1), in storage
/// order: one run of `rows × w × group` elements per channel group and batch element when
/// the columns are all of them (the batch elements of a group merge when the rows are all of
/// them too), else one run of `cols × group` per row.
fn plane_rect(
    (batch, channels): ((u32, u32), (u32, u32)),
    (rows, cols): ((u32, u32), (u32, u32)),
    (n_all, chans, h, w): (u32, u32, u32, u32),
    group: u32,
) -> Ranges {
    let g = u64::from(group.max(1));
    let (h64, w64) = (u64::from(h), u64::from(w));
    let groups = u64::from(chans) / g;
    let whole = cols.0 == 0 && cols.1 >= w;
    let mut out = Vec::new();
    // The runs of the plane whose first row is storage row `plane`.
    let mut push = |plane: u64| {
        if whole {
            out.push((
                (plane + u64::from(rows.0)) * w64 * g,
                u64::from(span(rows)) * w64 * g,
            ));
            return;
        }
        for r in rows.0..rows.1 {
            out.push((
                ((plane + u64::from(r)) * w64 + u64::from(cols.0)) * g,
                u64::from(span(cols)) * g,
            ));
        }
    };
    let (n0, n1) = (u64::from(batch.0), u64::from(batch.1));
    let (cg0, cg1) = (u64::from(channels.0) / g, u64::from(channels.1).div_ceil(g));
    if g > 1 {
        for cg in cg0..cg1 {
            for n in n0..n1 {
                push((cg * u64::from(n_all) + n) * h64);
            }
        }
    } else {
        for n in n0..n1 {
            for c in cg0..cg1 {
                push((n * groups + c) * h64);
            }
        }
    }
    coalesce(out)
}

/// The element ranges of the OIHW weights `[o, c, :, :]` for `o` in `outs` (absolute) and
/// `c` in `ins` (within the group), in order.
fn weight_block(g: &WindowGeometry, outs: (u32, u32), ins: (u32, u32)) -> Ranges {
    let kernel = u64::from(g.kh) * u64::from(g.kw);
    let cg = u64::from(g.c_per_group());
    coalesce(
        (outs.0..outs.1)
            .map(|o| {
                (
                    (u64::from(o) * cg + u64::from(ins.0)) * kernel,
                    u64::from(span(ins)) * kernel,
                )
            })
            .collect(),
    )
}

/// The element ranges of the block's output, in the block's order.
pub(super) fn output_ranges(kind: Kind, g: &WindowGeometry, b: &Block, gr: Groups) -> Ranges {
    let (o0, c0) = (b.group * g.o_per_group(), b.group * g.c_per_group());
    match kind {
        Kind::Conv(WindowPass::Forward) => plane_rect(
            (b.batch, (o0 + b.channels.0, o0 + b.channels.1)),
            (b.rows, b.cols),
            (g.n, g.o, g.oh, g.ow),
            gr.out,
        ),
        Kind::Conv(WindowPass::InputGrad) => plane_rect(
            (b.batch, (c0 + b.channels.0, c0 + b.channels.1)),
            (b.rows, b.cols),
            (g.n, g.c, g.h, g.w),
            gr.out,
        ),
        Kind::Conv(WindowPass::WeightGrad) => {
            weight_block(g, (o0 + b.channels.0, o0 + b.channels.1), b.rows)
        }
        Kind::Pool { grad: false } => plane_rect(
            (b.batch, b.channels),
            (b.rows, b.cols),
            (g.n, g.c, g.oh, g.ow),
            gr.out,
        ),
        Kind::Pool { grad: true } => plane_rect(
            (b.batch, b.channels),
            (b.rows, b.cols),
            (g.n, g.c, g.h, g.w),
            gr.out,
        ),
    }
}

/// The element ranges of the block's two input operands, in the order the vertex reads them.
pub(super) fn operand_ranges(
    kind: Kind,
    g: &WindowGeometry,
    b: &Block,
    p: &WindowParams,
    gr: Groups,
) -> (Ranges, Ranges) {
    let (o0, c0) = (b.group * g.o_per_group(), b.group * g.c_per_group());
    match kind {
        Kind::Conv(WindowPass::Forward) => {
            let x = plane_rect(
                (b.batch, (c0 + b.red.0, c0 + b.red.1)),
                (p.in_rows, p.in_cols),
                (g.n, g.c, g.h, g.w),
                gr.x,
            );
            let w = weight_block(g, (o0 + b.channels.0, o0 + b.channels.1), b.red);
            (x, w)
        }
        Kind::Conv(WindowPass::InputGrad) => {
            let dy = plane_rect(
                (b.batch, (o0 + b.red.0, o0 + b.red.1)),
                (p.in_rows, p.in_cols),
                (g.n, g.o, g.oh, g.ow),
                gr.x,
            );
            let w = weight_block(g, (o0 + b.red.0, o0 + b.red.1), b.channels);
            (dy, w)
        }
        Kind::Conv(WindowPass::WeightGrad) => {
            let x = plane_rect(
                (b.batch, (c0 + b.rows.0, c0 + b.rows.1)),
                (p.in_rows, p.in_cols),
                (g.n, g.c, g.h, g.w),
                gr.x,
            );
            let dy = plane_rect(
                (b.batch, (o0 + b.channels.0, o0 + b.channels.1)),
                (p.out_rows, p.out_cols),
                (g.n, g.o, g.oh, g.ow),
                gr.aux,
            );
            (x, dy)
        }
        Kind::Pool { grad } => {
            let x = plane_rect(
                (b.batch, b.channels),
                (p.in_rows, (0, g.w)),
                (g.n, g.c, g.h, g.w),
                gr.x,
            );
            let dy = if grad {
                plane_rect(
                    (b.batch, b.channels),
                    (p.aux_rows, (0, g.ow)),
                    (g.n, g.c, g.oh, g.ow),
                    gr.aux,
                )
            } else {
                Vec::new()
            };
            (x, dy)
        }
    }
}

/// Cycles our planner charges per exchange region (one contiguous range a tile sends or
/// receives): the two instructions of its set-up — the 8 bytes of exchange code per endpoint
/// that the memory plan charges — at one instruction per cycle. Our own proxy (PopLibs'
/// planner has no per-region term: its channel-grouped layouts keep regions large, as ours
/// do when a feature map's channels are grouped).
const REGION_CYCLES: u64 = 2;

/// What the planner plans: the pass, its codelet (for the estimate), the geometry, the
/// channel groups, the dtypes and the extents.
pub(super) struct Problem<'a> {
    pub kind: Kind,
    pub codelet: &'a Codelet,
    pub geometry: &'a WindowGeometry,
    pub groups: Groups,
    pub input: DType,
    pub partials: DType,
    pub extents: (u32, u32, u32),
}

/// The split of fewest estimated cycles that fits the memory budget (else of fewest bytes),
/// using at most `tiles` blocks per group.
pub(super) fn plan(lw: &Lowerer, id: NodeId, pr: &Problem, tiles: u32) -> Split {
    let proportion = lw.options().memory_proportion(&lw.graph().node(id).name);
    let budget = (proportion * lw.target().bytes_per_tile as f64) as u64;
    // The search reads only the problem, the tiles, the budget and the target.
    let key = format!(
        "window-plan {:?} {:?} {:?} {:?} {:?} {:?} {:?} {tiles} {budget}",
        pr.kind, pr.codelet, pr.geometry, pr.groups, pr.input, pr.partials, pr.extents
    );
    lw.memoized(key, || search(lw.target(), pr, tiles, budget))
}

/// [`plan`]'s search over the candidate splits.
fn search(target: &Target, pr: &Problem, tiles: u32, budget: u64) -> Split {
    let (kind, g, e) = (pr.kind, pr.geometry, pr.extents);
    let (gc, gro, gred) = pr.groups.granularity(kind);
    let red_extent = reduction_extent(kind, g);
    let amp = target.amp(pr.input, pr.partials).input_channels;
    let methods = methods(target, pr, red_extent, amp);
    let mut best: Option<(bool, u64, u64, Split)> = None;
    for sb in candidates(e.0, 1) {
        for sc in candidates(e.1, gc) {
            if u64::from(sb) * u64::from(sc) > u64::from(tiles) {
                break;
            }
            for sr in candidates(e.2, gro) {
                if u64::from(sb) * u64::from(sc) * u64::from(sr) > u64::from(tiles) {
                    break;
                }
                let reds = if red_extent == 0 {
                    vec![1]
                } else {
                    candidates(red_extent, gred)
                };
                // Columns are split only once every block is one row (our pruning of the
                // search: whole rows are fewer exchange regions).
                let one_row = e.2.div_ceil(sr.max(1)) <= 1;
                let cols = match col_extent(kind, g) {
                    c if c > 1 && one_row => candidates(c, 1),
                    _ => vec![1],
                };
                let shapes = reds.iter().flat_map(|&r| cols.iter().map(move |&c| (r, c)));
                for ((sred, scol), &method) in
                    shapes.flat_map(|rc| methods.iter().map(move |m| (rc, m)))
                {
                    if !method_fits(method, red_extent, sred, gred) {
                        continue;
                    }
                    let used = u64::from(sb)
                        * u64::from(sc)
                        * u64::from(sr)
                        * u64::from(sred)
                        * u64::from(scol);
                    if used > u64::from(tiles) {
                        continue;
                    }
                    let split = Split {
                        batch: sb,
                        channels: sc,
                        rows: sr,
                        cols: scol,
                        red: sred,
                        method,
                    };
                    let (cycles, bytes) = cost(target, pr, split);
                    let fits = bytes <= budget;
                    let better = match &best {
                        None => true,
                        Some((bf, bc, bbytes, _)) => match (fits, *bf) {
                            (true, false) => true,
                            (false, true) => false,
                            (true, true) => cycles < *bc,
                            (false, false) => bytes < *bbytes,
                        },
                    };
                    if better {
                        best = Some((fits, cycles, bytes, split));
                    }
                }
            }
        }
    }
    best.map_or(
        Split {
            batch: 1,
            channels: 1,
            rows: 1,
            cols: 1,
            red: 1,
            method: ConvMethod::Amp,
        },
        |b| b.3,
    )
}

/// The planner's cost of a split: its cycles (the registry's estimate of the first,
/// largest block's vertex group, plus the proxy's exchange of its operand bytes, the
/// exchange regions its operands and output are cut into, and for a split reduction the
/// partials' exchange and sum) and the first block's operand and output bytes.
fn cost(target: &Target, pr: &Problem, s: Split) -> (u64, u64) {
    let (kind, g, gr) = (pr.kind, pr.geometry, pr.groups);
    let es = pr.input.size_bytes() as u64;
    let ps = pr.partials.size_bytes() as u64;
    let xbw = u64::from(target.exchange_bytes_per_cycle.max(1));
    let (gc, gro, gred) = gr.granularity(kind);
    let e = pr.extents;
    let cols = match col_extent(kind, g) {
        0 => (0, pool_width(kind, g)),
        w => first_range(w, s.cols, 1),
    };
    let first = Block {
        group: 0,
        batch: first_range(e.0, s.batch, 1),
        channels: first_range(e.1, s.channels, gc),
        rows: first_range(e.2, s.rows, gro),
        cols,
        red: first_range(reduction_extent(kind, g), s.red.max(1), gred),
    };
    let amp = target.amp(pr.input, pr.partials);
    let pass = pass_channels(s.method, amp.input_channels, first.red);
    let mut params = block_params(kind, g, &first, pass, gr);
    params.units = match kind {
        Kind::Conv(WindowPass::WeightGrad) => (0, span(first.channels)),
        _ => (0, span(first.batch) * span(first.channels)),
    };
    let lens = params.operand_lens(pr.codelet).unwrap_or_default();
    let reduce = s.reduces(kind);
    let input_bytes: u64 = lens.iter().rev().skip(1).map(|&l| l * es).sum();
    let out_elems = lens.last().copied().unwrap_or(0);
    let out_bytes = out_elems * if reduce { ps } else { es };
    // The exchange regions of the block: its operands' runs and its output's.
    let (ra, rb) = operand_ranges(kind, g, &first, &params, gr);
    let regions = (ra.len() + rb.len() + output_ranges(kind, g, &first, gr).len()) as u64;
    // The summation of split partials: they cross the exchange and are summed (our proxy).
    let parts = match kind {
        Kind::Conv(WindowPass::WeightGrad) => {
            u64::from(s.batch) * u64::from(s.red.max(1)) * u64::from(s.cols.max(1))
        }
        Kind::Conv(_) => u64::from(s.red.max(1)),
        Kind::Pool { .. } => 1,
    };
    let sum = split_sum_cycles(out_elems, parts, ps, xbw);
    let vertex = window_group_cycles(target, &pr.codelet.with_conv_method(s.method), &params);
    let cycles = vertex
        .saturating_add(input_bytes / xbw)
        .saturating_add(sum)
        .saturating_add(regions.saturating_mul(REGION_CYCLES));
    (cycles, input_bytes + out_bytes * (1 + u64::from(reduce)))
}

/// The proxy's cycles of summing `parts` partial blocks of `out_elems` elements of `ps`
/// bytes on the `parts` tiles that hold them, in the stages of PopLibs'
/// [`multi_stage_reduce_plan`] (its default `enableMultiStageReduce`): per stage a reducing
/// tile receives its chunk of each partial of its section (the bytes at the exchange rate
/// and [`REGION_CYCLES`] per message), sums them (half a cycle per element) and syncs (100
/// cycles).
fn split_sum_cycles(out_elems: u64, parts: u64, ps: u64, xbw: u64) -> u64 {
    if parts <= 1 {
        return 0;
    }
    let mut depth = parts;
    let mut cycles = 0u64;
    // PopLibs' default `enableMultiStageReduce`.
    let stages = multi_stage_reduce_plan(u32::try_from(parts).unwrap_or(u32::MAX), true);
    for d in stages.into_iter().map(u64::from).chain([1]) {
        let sources = depth.div_ceil(d);
        let chunk = out_elems.div_ceil((parts / d).max(1));
        let elems = chunk * sources;
        cycles += elems * ps / xbw + elems / 2 + 100 + sources * REGION_CYCLES;
        depth = d;
    }
    cycles
}

#[cfg(test)]
mod tests {
    use crate::codelets::{Codelet, ConvMethod, WindowGeometry, WindowPass};
    use crate::lower::ops::window::plan::{
        block_params, candidates, pass_channels, plane_rect, ranges, Block, Groups, Kind,
    };
    use crate::target::Target;
    use ipusim_exe::cycles::window::window_group_cycles;
    use ipusim_ir::DType;

    /// The estimate of one group's whole block of a 3x3 convolution (padding 1, `f`x`f`
    /// field, batch 1) of `c` input and `o` output channels in `groups` groups, FP16 with
    /// FP32 partials on mk2, by the vertex `method`.
    fn whole_block_cycles(f: u32, c: u32, o: u32, groups: u32, method: ConvMethod) -> u64 {
        let g = WindowGeometry {
            n: 1,
            c,
            h: f,
            w: f,
            o,
            kh: 3,
            kw: 3,
            stride: [1, 1],
            padding: [1; 4],
            dilation: [1, 1],
            groups,
            oh: f,
            ow: f,
        };
        let block = Block {
            group: 0,
            batch: (0, 1),
            channels: (0, o / groups),
            rows: (0, f),
            cols: (0, f),
            red: (0, c / groups),
        };
        let target = Target::mk2();
        let amp = target.amp(DType::F16, DType::F32).input_channels;
        let gr = Groups {
            x: 1,
            aux: 1,
            out: 1,
        };
        let kind = Kind::Conv(WindowPass::Forward);
        let mut p = block_params(kind, &g, &block, pass_channels(method, amp, block.red), gr);
        p.units = (0, o / groups);
        let codelet = Codelet::Conv {
            pass: WindowPass::Forward,
            input: DType::F16,
            partials: DType::F32,
            output: DType::F16,
            method,
        };
        window_group_cycles(&target, &codelet, &p)
    }

    #[test]
    fn the_hmac_vertex_wins_on_few_channels_per_group_and_the_amp_on_many() {
        // A depthwise group (1 channel in, 1 out) on a small block (one output position): 15
        // of the AMP's 16 input channels of every pass are padding and its overheads
        // dominate; the HMAC's nine one-channel dot products are cheaper.
        let (amp, hmac) = (
            whole_block_cycles(1, 32, 32, 32, ConvMethod::Amp),
            whole_block_cycles(1, 32, 32, 32, ConvMethod::Hmac),
        );
        assert!(hmac < amp, "depthwise: HMAC {hmac} vs AMP {amp}");
        // On a 16x16 block the AMP's one pass per position wins even with the padding.
        assert!(
            whole_block_cycles(16, 32, 32, 32, ConvMethod::Amp)
                < whole_block_cycles(16, 32, 32, 32, ConvMethod::Hmac)
        );
        // A dense 64-channel layer: the AMP's passes are full.
        let (amp, hmac) = (
            whole_block_cycles(16, 64, 64, 1, ConvMethod::Amp),
            whole_block_cycles(16, 64, 64, 1, ConvMethod::Hmac),
        );
        assert!(amp < hmac, "dense: AMP {amp} vs HMAC {hmac}");
        // The HMAC's pass is the block's channels; the AMP's its input channels.
        assert_eq!(pass_channels(ConvMethod::Hmac, 16, (4, 7)), 3);
        assert_eq!(pass_channels(ConvMethod::Amp, 16, (4, 7)), 16);
    }

    #[test]
    fn plane_rects_of_a_grouped_map_are_one_run_per_channel_group_and_row() {
        // 2 channel groups of 16 (channels 16..48 of 64), rows 2..4 of 8, width 5, image 0
        // of 1.
        let r = plane_rect(((0, 1), (16, 48)), ((2, 4), (0, 5)), (1, 64, 8, 5), 16);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0], ((8 + 2) * 5 * 16, 2 * 5 * 16));
        assert_eq!(r[1], ((2 * 8 + 2) * 5 * 16, 2 * 5 * 16));
        // Ungrouped: one run per channel.
        assert_eq!(
            plane_rect(((0, 1), (16, 48)), ((2, 4), (0, 5)), (1, 64, 8, 5), 1).len(),
            32
        );
        // Whole planes of consecutive groups merge.
        assert_eq!(
            plane_rect(((0, 1), (0, 32)), ((0, 8), (0, 5)), (1, 64, 8, 5), 16).len(),
            1
        );
        // A range of columns: one run per row and channel group.
        let r = plane_rect(((0, 1), (0, 16)), ((1, 3), (2, 4)), (1, 64, 8, 5), 16);
        assert_eq!(r, vec![((5 + 2) * 16, 2 * 16), ((2 * 5 + 2) * 16, 2 * 16)]);
    }

    #[test]
    fn the_batch_of_a_channel_group_is_one_run() {
        // 4 images of 64 channels, 2x2 maps, grouped by 8: storage [8, 4, 2, 2, 8].
        let plane = 2 * 2 * 8;
        // All 4 images of channels 16..32 (groups 2 and 3): one run of both groups.
        let r = plane_rect(((0, 4), (16, 32)), ((0, 2), (0, 2)), (4, 64, 2, 2), 8);
        assert_eq!(r, vec![(2 * 4 * plane, 2 * 4 * plane)]);
        // Images 1..3 of the same channels: one run per group, group-major.
        let r = plane_rect(((1, 3), (16, 32)), ((0, 2), (0, 2)), (4, 64, 2, 2), 8);
        assert_eq!(
            r,
            vec![
                ((2 * 4 + 1) * plane, 2 * plane),
                ((3 * 4 + 1) * plane, 2 * plane)
            ]
        );
        // Row-major (group 1): one run per image and channel, image-major.
        let r = plane_rect(((0, 2), (1, 3)), ((0, 2), (0, 2)), (4, 64, 2, 2), 1);
        assert_eq!(r, vec![(4, 8), ((64 + 1) * 4, 8)]);
    }

    #[test]
    fn splits_fall_on_whole_groups() {
        assert_eq!(ranges(64, 3, 16), vec![(0, 32), (32, 64)]);
        assert_eq!(
            ranges(64, 4, 16),
            vec![(0, 16), (16, 32), (32, 48), (48, 64)]
        );
        assert_eq!(ranges(10, 3, 1), vec![(0, 4), (4, 8), (8, 10)]);
        assert_eq!(candidates(64, 16), vec![1, 2, 4]);
    }
}

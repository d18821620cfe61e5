//! The blocks of a convolution or pooling pass's partition ([`super::plan`] chooses the
//! split): the op kind, the channel groups of its feature maps, the blocks of a split in
//! block order, each block's vertex parameters, and the element ranges each block reads and
//! writes in its operands' channel-grouped layouts (`[C/g][rows][W][g]` runs).

pub(super) use super::regions::{span, Ranges, Region};
use crate::codelets::{ConvMethod, WindowGeometry, WindowParams, WindowPass};

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
    /// Serial phases over the output channels (PopLibs' `outChanSplit.serial`): the pass runs
    /// as this many compute sets one after the other, each computing a range of the output
    /// channels split `channels` ways over the same tiles, so that a phase's temporaries are
    /// dead before the next phase's are made. 1 for pools.
    pub serial: u32,
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

/// `n` ranges splitting `[0, d)` in blocks of whole units of `gran`, empty ones dropped.
pub(super) fn ranges(d: u32, n: u32, gran: u32) -> Vec<(u32, u32)> {
    let gran = gran.max(1);
    let b = d.div_ceil(gran).div_ceil(n.max(1)).max(1) * gran;
    (0..n.max(1))
        .map(|i| ((i * b).min(d), ((i + 1) * b).min(d)))
        .filter(|r| r.0 < r.1)
        .collect()
}

/// The first (largest) of the `n` ranges of [`ranges`].
pub(super) fn first_range(d: u32, n: u32, gran: u32) -> (u32, u32) {
    ranges(d, n, gran).first().copied().unwrap_or((0, 0))
}

/// The output-channel ranges of a split's serial phases ([`Split::serial`]).
pub(super) fn phases(kind: Kind, gr: Groups, e: (u32, u32, u32), s: Split) -> Vec<(u32, u32)> {
    ranges(e.1, s.serial, gr.granularity(kind).0)
}

/// The blocks of each serial phase of a split ([`Split::serial`]), each phase's in block
/// order (group, batch, channels, rows, columns, reduction): a phase's output channels are split `s.channels` ways within its range.
pub(super) fn phase_blocks(
    groups: u32,
    (kind, gr): (Kind, Groups),
    g: &WindowGeometry,
    e: (u32, u32, u32),
    s: Split,
) -> Vec<Vec<Block>> {
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
    for phase in phases(kind, gr, e, s) {
        let mut blocks = Vec::new();
        for group in 0..groups {
            for &batch in &ranges(e.0, s.batch, 1) {
                for &(c0, c1) in &ranges(span(phase), s.channels, gc) {
                    let channels = (phase.0 + c0, phase.0 + c1);
                    for &rows in &ranges(e.2, s.rows, gro) {
                        for &cols in &cols {
                            for &red in &parts {
                                blocks.push(Block {
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
        out.push(blocks);
    }
    out
}

/// The output width of a pool (its blocks hold whole rows).
pub(super) fn pool_width(kind: Kind, g: &WindowGeometry) -> u32 {
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
        weight_chunk: 0,
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

/// The element ranges of the block's output, in the block's order.
pub(super) fn output_ranges(kind: Kind, g: &WindowGeometry, b: &Block, gr: Groups) -> Ranges {
    output_region(kind, g, b, gr).ranges()
}

/// The block's output ([`output_ranges`]) as a [`Region`].
pub(super) fn output_region(kind: Kind, g: &WindowGeometry, b: &Block, gr: Groups) -> Region {
    let (o0, c0) = (b.group * g.o_per_group(), b.group * g.c_per_group());
    match kind {
        Kind::Conv(WindowPass::Forward) => Region::Plane {
            planes: (b.batch, (o0 + b.channels.0, o0 + b.channels.1)),
            rect: (b.rows, b.cols),
            dims: (g.n, g.o, g.oh, g.ow),
            group: gr.out,
        },
        Kind::Conv(WindowPass::InputGrad) => Region::Plane {
            planes: (b.batch, (c0 + b.channels.0, c0 + b.channels.1)),
            rect: (b.rows, b.cols),
            dims: (g.n, g.c, g.h, g.w),
            group: gr.out,
        },
        Kind::Conv(WindowPass::WeightGrad) => {
            Region::weights(g, (o0 + b.channels.0, o0 + b.channels.1), b.rows, 0)
        }
        Kind::Pool { grad: false } => Region::Plane {
            planes: (b.batch, b.channels),
            rect: (b.rows, b.cols),
            dims: (g.n, g.c, g.oh, g.ow),
            group: gr.out,
        },
        Kind::Pool { grad: true } => Region::Plane {
            planes: (b.batch, b.channels),
            rect: (b.rows, b.cols),
            dims: (g.n, g.c, g.h, g.w),
            group: gr.out,
        },
    }
}

/// The weight elements a forward pass's block reads (the second of its
/// [`operand_ranges`]): its output channels' weights over its part of the reduction, in the
/// order of weight chunk `chunk` ([`WindowParams::weight_chunk`]: 0 row-major, else chunk by
/// chunk of `chunk` input channels).
pub(super) fn forward_weight_ranges(g: &WindowGeometry, b: &Block, chunk: u32) -> Ranges {
    forward_weights(g, b, chunk).ranges()
}

fn forward_weights(g: &WindowGeometry, b: &Block, chunk: u32) -> Region {
    let o0 = b.group * g.o_per_group();
    Region::weights(g, (o0 + b.channels.0, o0 + b.channels.1), b.red, chunk)
}

/// The weight elements an input-gradient pass's block reads (the second of its
/// [`operand_ranges`]): its part of the reduction's (output channels') weights over its
/// input channels, row-major.
pub(super) fn input_grad_weight_ranges(g: &WindowGeometry, b: &Block) -> Ranges {
    input_grad_weights(g, b).ranges()
}

fn input_grad_weights(g: &WindowGeometry, b: &Block) -> Region {
    let o0 = b.group * g.o_per_group();
    Region::weights(g, (o0 + b.red.0, o0 + b.red.1), b.channels, 0)
}

/// The element ranges of the block's two input operands, in the order the vertex reads them.
pub(super) fn operand_ranges(
    kind: Kind,
    g: &WindowGeometry,
    b: &Block,
    p: &WindowParams,
    gr: Groups,
) -> (Ranges, Ranges) {
    let (x, y) = operand_regions(kind, g, b, p, gr);
    (x.ranges(), y.ranges())
}

/// The block's two input operands ([`operand_ranges`]) as [`Region`]s.
pub(super) fn operand_regions(
    kind: Kind,
    g: &WindowGeometry,
    b: &Block,
    p: &WindowParams,
    gr: Groups,
) -> (Region, Region) {
    let (o0, c0) = (b.group * g.o_per_group(), b.group * g.c_per_group());
    match kind {
        Kind::Conv(WindowPass::Forward) => {
            let x = Region::Plane {
                planes: (b.batch, (c0 + b.red.0, c0 + b.red.1)),
                rect: (p.in_rows, p.in_cols),
                dims: (g.n, g.c, g.h, g.w),
                group: gr.x,
            };
            (x, forward_weights(g, b, p.weight_chunk))
        }
        Kind::Conv(WindowPass::InputGrad) => {
            let dy = Region::Plane {
                planes: (b.batch, (o0 + b.red.0, o0 + b.red.1)),
                rect: (p.in_rows, p.in_cols),
                dims: (g.n, g.o, g.oh, g.ow),
                group: gr.x,
            };
            (dy, input_grad_weights(g, b))
        }
        Kind::Conv(WindowPass::WeightGrad) => {
            let x = Region::Plane {
                planes: (b.batch, (c0 + b.rows.0, c0 + b.rows.1)),
                rect: (p.in_rows, p.in_cols),
                dims: (g.n, g.c, g.h, g.w),
                group: gr.x,
            };
            let dy = Region::Plane {
                planes: (b.batch, (o0 + b.channels.0, o0 + b.channels.1)),
                rect: (p.out_rows, p.out_cols),
                dims: (g.n, g.o, g.oh, g.ow),
                group: gr.aux,
            };
            (x, dy)
        }
        Kind::Pool { grad } => {
            let x = Region::Plane {
                planes: (b.batch, b.channels),
                rect: (p.in_rows, (0, g.w)),
                dims: (g.n, g.c, g.h, g.w),
                group: gr.x,
            };
            let dy = if grad {
                Region::Plane {
                    planes: (b.batch, b.channels),
                    rect: (p.aux_rows, (0, g.ow)),
                    dims: (g.n, g.c, g.oh, g.ow),
                    group: gr.aux,
                }
            } else {
                Region::Empty
            };
            (x, dy)
        }
    }
}

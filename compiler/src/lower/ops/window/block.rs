//! The blocks of a convolution or pooling pass's partition ([`super::plan`] chooses the
//! split): the op kind, the channel groups of its feature maps, the blocks of a split in
//! block order, each block's vertex parameters, and the element ranges each block reads and
//! writes in its operands' channel-grouped layouts (`[C/g][rows][W][g]` runs).

use crate::codelets::{ConvMethod, WindowGeometry, WindowParams, WindowPass};

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
pub(super) fn plane_rect(
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

/// The weight elements a forward pass's block reads (the second of its
/// [`operand_ranges`]): its output channels' weights over its part of the reduction, in the
/// order of weight chunk `chunk` ([`WindowParams::weight_chunk`]: 0 row-major, else chunk by
/// chunk of `chunk` input channels).
pub(super) fn forward_weight_ranges(g: &WindowGeometry, b: &Block, chunk: u32) -> Ranges {
    let o0 = b.group * g.o_per_group();
    let outs = (o0 + b.channels.0, o0 + b.channels.1);
    if chunk == 0 {
        return weight_block(g, outs, b.red);
    }
    // Chunk by chunk, each chunk's rows `[o][c..end][kh][kw]`, touching ones merged.
    let kernel = u64::from(g.kh) * u64::from(g.kw);
    let cg = u64::from(g.c_per_group());
    let mut out: Ranges = Vec::new();
    let mut c = b.red.0;
    while c < b.red.1 {
        let end = b.red.1.min((c / chunk + 1) * chunk);
        let len = u64::from(end - c) * kernel;
        for o in outs.0..outs.1 {
            let begin = (u64::from(o) * cg + u64::from(c)) * kernel;
            match out.last_mut() {
                Some(last) if last.0 + last.1 == begin => last.1 += len,
                _ => out.push((begin, len)),
            }
        }
        c = end;
    }
    out
}

/// The weight elements an input-gradient pass's block reads (the second of its
/// [`operand_ranges`]): its part of the reduction's (output channels') weights over its
/// input channels, row-major.
pub(super) fn input_grad_weight_ranges(g: &WindowGeometry, b: &Block) -> Ranges {
    let o0 = b.group * g.o_per_group();
    weight_block(g, (o0 + b.red.0, o0 + b.red.1), b.channels)
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
            (x, forward_weight_ranges(g, b, p.weight_chunk))
        }
        Kind::Conv(WindowPass::InputGrad) => {
            let dy = plane_rect(
                (b.batch, (o0 + b.red.0, o0 + b.red.1)),
                (p.in_rows, p.in_cols),
                (g.n, g.o, g.oh, g.ow),
                gr.x,
            );
            (dy, input_grad_weight_ranges(g, b))
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

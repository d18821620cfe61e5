//! Lowering of the convolution family (`Conv2d`, `Conv2dInputGrad`, `Conv2dWeightGrad`,
//! `MaxPool2d`, `MaxPool2dGrad`): a plan that partitions the output over tiles, the exchange
//! of each tile's input rows (with their halo) and weights, and one window vertex group per
//! tile (`Codelet::Conv` or `Codelet::MaxPool`).
//!
//! # The plan
//!
//! In the spirit of PopLibs' convolution planner (ipu-hardware.md §8): the output is
//! partitioned into blocks over convolution groups (every group its own blocks), batch,
//! output channels and output rows (the input gradient: input channels and input rows; the
//! weight gradient: output and input channels), and the reduction is split too: input
//! channels for the forward pass, output channels for the input gradient, the batch for the
//! weight gradient. Each block is one tile; the blocks of a split reduction write partials
//! that `Reduce` vertices sum on the output block's tiles, in ascending block order.
//!
//! The plan of fewest estimated cycles is kept among those whose per-tile operand and output
//! bytes fit in the op's memory proportion (`CompileOptions::memory_proportion`: its own
//! entry, else the program's `available_memory_proportion`); when none fits, the one of
//! fewest bytes (the memory plan then reports the out-of-memory tiles). A candidate's cost is
//! the registry's estimate of its first (largest) block's vertex group
//! (`ipusim_exe::cycles::window`, the function that charges the built vertices) plus its
//! operand bytes at the exchange rate, [`REGION_CYCLES`] per exchange region its NCHW
//! operands need, and for a split reduction the partials' exchange and sum (our proxy).
//!
//! Not yet done (the closing note of the CNN issue lists them): channel-grouped layouts,
//! serial splits, PopLibs' transforms (`expandDims` for the 3-channel stem), SLIC and
//! MAC-loop vertices; more convolution groups than tiles is refused.

use crate::codelets::{Codelet, ReduceOp, VertexParams, WindowGeometry, WindowParams, WindowPass};
use crate::error::CompileError;
use crate::executable::{Operand, Operands, TensorKind, TileWork, Vertex, VertexGroup};
use crate::lower::core::Lowerer;
use crate::lower::kit::mapping::{worker_slices, Mapping};
use crate::lower::kit::permute::materialized;
use crate::lower::kit::reduction::block_vertices;
use crate::lower::kit::stage::{ExchangeBuilder, Staging, TileScratch};
use ipusim_exe::cycles::window::window_group_cycles;
use ipusim_ir::conv::{ConvGeometry, Pool, Window};
use ipusim_ir::{DType, NodeId, Op};

/// The blocks of each output block of a split reduction, keyed by the output block (group,
/// batch, channels, rows), in reduction order.
type Reduction = std::collections::BTreeMap<OutputKey, Vec<usize>>;

/// An output block: group, batch, channel and row ranges.
type OutputKey = (u32, (u32, u32), (u32, u32), (u32, u32));

/// `(begin, len)` element ranges of a tensor.
type Ranges = Vec<(u64, u64)>;

/// Which op of the family a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Conv(WindowPass),
    Pool { grad: bool },
}

/// One tile's block: the group, and the ranges of the three partitioned dimensions.
#[derive(Clone, Copy, Debug)]
struct Block {
    group: u32,
    /// Batch range (weight gradient: all).
    batch: (u32, u32),
    /// Output channel range within the group (pools: plane channels).
    channels: (u32, u32),
    /// Output rows (weight gradient: the input-channel range).
    rows: (u32, u32),
    /// The part of the reduction: input channels (`Forward`) or output channels
    /// (`InputGrad`) within the group; unused (`(0, 0)`) by the weight gradient, whose
    /// reduction split is the batch, and by pools.
    red: (u32, u32),
}

impl Block {
    /// The output block this block computes (a part of, when the reduction is split).
    fn output_key(&self, kind: Kind) -> OutputKey {
        let batch = match kind {
            Kind::Conv(WindowPass::WeightGrad) => (0, 0),
            _ => self.batch,
        };
        (self.group, batch, self.channels, self.rows)
    }
}

/// Splits of the three partitioned dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Split {
    batch: u32,
    channels: u32,
    rows: u32,
    /// Splits of the reduction (`Forward`, `InputGrad`; 1 otherwise).
    red: u32,
}

impl Split {
    /// True when partial results of several blocks are summed into each output block.
    fn reduces(&self, kind: Kind) -> bool {
        match kind {
            Kind::Conv(WindowPass::WeightGrad) => self.batch > 1,
            Kind::Conv(_) => self.red > 1,
            Kind::Pool { .. } => false,
        }
    }
}

/// Lowers a node of the family.
pub(crate) fn lower(lw: &mut Lowerer, id: NodeId) -> Result<(), CompileError> {
    let node = lw.graph().node(id);
    let op = node.op.clone();
    let kind = match op {
        Op::Conv2d { .. } => Kind::Conv(WindowPass::Forward),
        Op::Conv2dInputGrad { .. } => Kind::Conv(WindowPass::InputGrad),
        Op::Conv2dWeightGrad { .. } => Kind::Conv(WindowPass::WeightGrad),
        Op::MaxPool2d { .. } => Kind::Pool { grad: false },
        Op::MaxPool2dGrad { .. } => Kind::Pool { grad: true },
        _ => return Err(lw.unsupported(id, "not an op of the convolution family")),
    };
    let inputs = node.inputs.clone();
    let dims = |i: usize| lw.graph().node(inputs[i]).ty.shape.dims().to_vec();
    let out_dims = node.ty.shape.dims().to_vec();
    let geometry = match kind {
        Kind::Conv(pass) => {
            let window = match Window::of(&op) {
                Some(Ok(w)) => w,
                _ => return Err(lw.unsupported(id, "its window attributes do not check")),
            };
            let (x, w) = match pass {
                WindowPass::Forward => (dims(0), dims(1)),
                WindowPass::InputGrad => (out_dims.clone(), dims(1)),
                WindowPass::WeightGrad => (dims(0), out_dims.clone()),
            };
            window.geometry(&x, &w)
        }
        Kind::Pool { .. } => match Pool::of(&op) {
            Some(Ok(p)) => p.geometry(&dims(0)),
            _ => return Err(lw.unsupported(id, "its pooling window does not check")),
        },
    }
    .map_err(|f| lw.unsupported(id, format!("{f:?}")))?;
    let g = window_geometry(&geometry);
    let (a, b) = (
        materialized(lw, inputs[0])?,
        materialized(lw, inputs[1 % inputs.len()])?,
    );
    let input = lw.tensor(a).dtype;
    let output = node.ty.dtype;
    let partials = match kind {
        Kind::Conv(_) => lw.options().partials_type.accumulator_for(input),
        Kind::Pool { .. } => input,
    };
    let extents = extents(kind, &g);
    let tiles = lw.target().tiles;
    let groups = if matches!(kind, Kind::Pool { .. }) {
        1
    } else {
        g.groups
    };
    if groups > tiles {
        return Err(lw.unsupported(
            id,
            format!("{groups} convolution groups on {tiles} tiles (more groups than tiles)"),
        ));
    }
    let estimate_codelet = match kind {
        Kind::Conv(pass) => Codelet::Conv {
            pass,
            input,
            partials,
            output,
        },
        Kind::Pool { grad } => Codelet::MaxPool { grad, dtype: input },
    };
    let split = plan(
        lw,
        id,
        (kind, &estimate_codelet),
        &g,
        (input, partials),
        extents,
        tiles / groups,
    );
    let codelet = match kind {
        Kind::Conv(pass) => Codelet::Conv {
            pass,
            input,
            partials,
            output: if split.reduces(kind) {
                partials
            } else {
                output
            },
        },
        Kind::Pool { grad } => Codelet::MaxPool { grad, dtype: input },
    };
    let name = node.name.clone();
    let total: u64 = out_dims.iter().map(|&d| d as u64).product();
    let blocks = blocks(groups, extents, reduction_extent(kind, &g), split);
    let start = lw.rotate_start(blocks.len() as u32);
    let tile_of = |i: usize| (start + i as u32) % tiles;
    // A split reduction (input channels, output channels for the input gradient, the batch
    // for the weight gradient): each tile's partial block is summed on the output block's
    // tiles, each summing one chunk of the block's elements.
    let reduce = split.reduces(kind);
    let mut reduction = Reduction::default();
    if reduce {
        for (i, blk) in blocks.iter().enumerate() {
            reduction.entry(blk.output_key(kind)).or_default().push(i);
        }
    }
    // The output, each block on its tile (split reductions: in chunks over the block's tiles).
    let mut pieces = Vec::new();
    if reduce {
        for members in reduction.values() {
            let ranges = output_ranges(kind, &g, &blocks[members[0]]);
            let e: u64 = ranges.iter().map(|r| r.1).sum();
            let chunk = e.div_ceil(members.len() as u64);
            for (j, &i) in members.iter().enumerate() {
                let (c0, c1) = ((j as u64 * chunk).min(e), ((j as u64 + 1) * chunk).min(e));
                for (b, l) in sub_ranges(&ranges, c0, c1) {
                    pieces.push((tile_of(i), b, b + l));
                }
            }
        }
    } else {
        for (i, blk) in blocks.iter().enumerate() {
            for (begin, len) in output_ranges(kind, &g, blk) {
                pieces.push((tile_of(i), begin, begin + len));
            }
        }
    }
    let mapping = if total == 0 {
        Mapping::default()
    } else {
        Mapping::from_pieces(pieces)
    };
    let out = lw.new_tensor(
        name.clone(),
        Some(id),
        TensorKind::Activation,
        output,
        lw.graph().node(id).ty.shape.clone(),
        mapping,
    );
    let nw = lw.target().worker_contexts;
    let amp = lw.target().amp(input, partials).input_channels;
    let mut eb = ExchangeBuilder::default();
    let mut sa = Staging::new(a, format!("{name}/in"), Some(id));
    let mut sb = Staging::new(b, format!("{name}/{}", second_name(kind)), Some(id));
    let mut work = Vec::with_capacity(blocks.len());
    let mut scratch =
        reduce.then(|| TileScratch::new(lw, format!("{name}/partials"), Some(id), partials));
    let mut partial_at = vec![0u64; blocks.len()];
    for (i, blk) in blocks.iter().enumerate() {
        let tile = tile_of(i);
        let params = block_params(kind, &g, blk, amp);
        let (ra, rb) = operand_ranges(kind, &g, blk, &params);
        let op_a = sa.operand(lw, &mut eb, tile, &ra);
        let op_b = (inputs.len() > 1).then(|| sb.operand(lw, &mut eb, tile, &rb));
        let units = match kind {
            Kind::Conv(WindowPass::WeightGrad) => span(blk.channels),
            _ => span(blk.batch) * span(blk.channels),
        };
        let whole = WindowParams {
            units: (0, units),
            ..params.clone()
        };
        let per_unit = whole
            .operand_lens(&codelet)
            .and_then(|l| l.last().copied())
            .unwrap_or(0)
            / u64::from(units.max(1));
        let (dst, out_pos, es) = match scratch.as_mut() {
            Some(sc) => {
                let p = sc.alloc(tile, u64::from(units) * per_unit);
                partial_at[i] = p;
                (sc.tensor, p, partials.size_bytes() as u64)
            }
            None => {
                let first = output_ranges(kind, &g, blk).first().map_or(0, |r| r.0);
                (out, lw.position(out, first), output.size_bytes() as u64)
            }
        };
        let vertices = worker_slices(u64::from(units), 1, nw)
            .into_iter()
            .enumerate()
            .map(|(w, (u0, u1))| {
                let mut operands = Operands::from_iter([op_a]);
                operands.extend(op_b);
                operands.push(Operand {
                    tensor: dst,
                    offset: ((out_pos + u0 * per_unit) * es) as u32,
                    len: ((u1 - u0) * per_unit) as u32,
                });
                Vertex {
                    worker: w as u8,
                    operands,
                    params: VertexParams::Window(Box::new(WindowParams {
                        units: (u0 as u32, u1 as u32),
                        ..params.clone()
                    })),
                }
            })
            .collect();
        work.push(TileWork {
            tile: lw.tile_id(tile),
            groups: vec![VertexGroup {
                codelet: codelet.clone(),
                vertices,
            }],
            cycles: 0,
        });
    }
    sa.finish(lw);
    sb.finish(lw);
    let ptensor = scratch.as_ref().map(|sc| sc.tensor);
    if let Some(sc) = scratch {
        sc.finish(lw);
    }
    let step = if reduce {
        format!("{name}/partials")
    } else {
        name.clone()
    };
    lw.superstep(&step, Some(id), eb.finish(), work);
    if let Some(ptensor) = ptensor {
        let sources = Sources {
            tensor: ptensor,
            at: &partial_at,
            tile_of: &tile_of,
        };
        reduce_partials(
            lw,
            (id, kind),
            &name,
            (&g, &blocks, &reduction),
            sources,
            (out, partials, output),
        );
    }
    lw.set_value(id, out);
    Ok(())
}

/// Where the partial blocks of a split reduction are.
struct Sources<'a> {
    tensor: crate::executable::TensorId,
    /// Each block's partials position on its tile.
    at: &'a [u64],
    tile_of: &'a dyn Fn(usize) -> u32,
}

/// The element ranges `[c0, c1)` of a block whose elements are `ranges` (in order).
fn sub_ranges(ranges: &[(u64, u64)], c0: u64, c1: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = 0u64;
    for &(b, l) in ranges {
        let (lo, hi) = (c0.max(at), c1.min(at + l));
        if lo < hi {
            out.push((b + lo - at, hi - lo));
        }
        at += l;
    }
    out
}

/// Sums the partial blocks of a split reduction: chunk `j` of every output block's elements
/// is gathered from the block's partial tiles onto its `j`-th tile and summed by a `Reduce`
/// vertex in ascending reduction-block order, in the partials type, then written in the
/// output type (the order the matmul's split reductions use).
fn reduce_partials(
    lw: &mut Lowerer,
    (id, kind): (NodeId, Kind),
    name: &str,
    (g, blocks, reduction): (&WindowGeometry, &[Block], &Reduction),
    src: Sources,
    (out, partials, output): (crate::executable::TensorId, DType, DType),
) {
    let mut eb = ExchangeBuilder::default();
    let mut inbox = TileScratch::new(lw, format!("{name}/reduce_in"), Some(id), partials);
    let mut tiles = Vec::new();
    for members in reduction.values() {
        let ranges = output_ranges(kind, g, &blocks[members[0]]);
        let e: u64 = ranges.iter().map(|r| r.1).sum();
        let count = members.len() as u64;
        let chunk = e.div_ceil(count);
        for (j, &rj) in members.iter().enumerate() {
            let (c0, c1) = ((j as u64 * chunk).min(e), ((j as u64 + 1) * chunk).min(e));
            if c0 == c1 {
                continue;
            }
            let width = c1 - c0;
            let rt = (src.tile_of)(rj);
            let at = inbox.alloc(rt, width * count);
            for (k, &i) in members.iter().enumerate() {
                let st = (src.tile_of)(i);
                let from = lw.slice_begin(src.tensor, st) + src.at[i] + c0;
                eb.copy_elems(
                    lw,
                    src.tensor,
                    from,
                    width,
                    inbox.tensor,
                    rt,
                    at + k as u64 * width,
                );
            }
            let first = sub_ranges(&ranges, c0, c1).first().map_or(0, |r| r.0);
            let out_pos = lw.position(out, first);
            let vertices = block_vertices(
                lw,
                (inbox.tensor, at),
                (out, out_pos),
                (1, count, width),
                1.0,
            );
            let sum = Codelet::Reduce {
                op: ReduceOp::Sum,
                input: partials,
                acc: partials,
                output,
            };
            tiles.push(TileWork::one_group(lw.tile_id(rt), sum, vertices));
        }
    }
    inbox.finish(lw);
    lw.superstep(&format!("{name}/reduce"), Some(id), eb.finish(), tiles);
}

fn second_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Conv(WindowPass::WeightGrad) | Kind::Pool { grad: true } => "dy",
        _ => "weights",
    }
}

fn span(r: (u32, u32)) -> u32 {
    r.1.saturating_sub(r.0)
}

fn window_geometry(c: &ConvGeometry) -> WindowGeometry {
    let u = |v: usize| v as u32;
    WindowGeometry {
        n: u(c.n),
        c: u(c.c),
        h: u(c.h),
        w: u(c.w),
        o: u(c.o),
        kh: u(c.kh),
        kw: u(c.kw),
        stride: c.stride.map(u),
        padding: c.padding.map(u),
        dilation: c.dilation.map(u),
        groups: u(c.groups),
        oh: u(c.oh),
        ow: u(c.ow),
    }
}

/// The sizes of the three partitioned dimensions: batch, channels, rows (the weight
/// gradient: batch — a split of the reduction —, output channels, input channels).
fn extents(kind: Kind, g: &WindowGeometry) -> (u32, u32, u32) {
    match kind {
        Kind::Conv(WindowPass::Forward) => (g.n, g.o_per_group(), g.oh),
        Kind::Conv(WindowPass::InputGrad) => (g.n, g.c_per_group(), g.h),
        Kind::Conv(WindowPass::WeightGrad) => (g.n, g.o_per_group(), g.c_per_group()),
        Kind::Pool { grad: false } => (g.n, g.c, g.oh),
        Kind::Pool { grad: true } => (g.n, g.c, g.h),
    }
}

/// The splits `s` of an extent `d` that give distinct block sizes, each the fewest splits
/// for its block size.
fn candidates(d: u32) -> Vec<u32> {
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

/// The size of the reduction a `Forward` or `InputGrad` split may divide (0 otherwise).
fn reduction_extent(kind: Kind, g: &WindowGeometry) -> u32 {
    match kind {
        Kind::Conv(WindowPass::Forward) => g.c_per_group(),
        Kind::Conv(WindowPass::InputGrad) => g.o_per_group(),
        _ => 0,
    }
}

/// The blocks of a split, in block order (group, batch, channels, rows, reduction).
fn blocks(groups: u32, e: (u32, u32, u32), red: u32, s: Split) -> Vec<Block> {
    let ranges = |d: u32, n: u32| -> Vec<(u32, u32)> {
        let b = d.div_ceil(n.max(1)).max(1);
        (0..n)
            .map(|i| ((i * b).min(d), ((i + 1) * b).min(d)))
            .filter(|r| r.0 < r.1)
            .collect()
    };
    let mut out = Vec::new();
    for group in 0..groups {
        for &batch in &ranges(e.0, s.batch) {
            for &channels in &ranges(e.1, s.channels) {
                for &rows in &ranges(e.2, s.rows) {
                    let parts = if red == 0 {
                        vec![(0, 0)]
                    } else {
                        ranges(red, s.red)
                    };
                    for red in parts {
                        out.push(Block {
                            group,
                            batch,
                            channels,
                            rows,
                            red,
                        });
                    }
                }
            }
        }
    }
    out
}

/// The input rows `[lo, hi)` output rows `rows` read (forward windows), at least one row.
fn input_rows(g: &WindowGeometry, rows: (u32, u32)) -> (u32, u32) {
    let lo = (rows.0 * g.stride[0]).saturating_sub(g.padding[0]);
    let hi = ((rows.1.saturating_sub(1)) * g.stride[0] + (g.kh - 1) * g.dilation[0] + 1)
        .saturating_sub(g.padding[0])
        .min(g.h);
    clamp_rows(lo, hi, g.h)
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
fn block_params(kind: Kind, g: &WindowGeometry, b: &Block, amp: u32) -> WindowParams {
    let mut p = WindowParams {
        geometry: *g,
        group: b.group,
        batch: b.batch,
        out_channels: b.channels,
        in_channels: (0, 0),
        out_rows: b.rows,
        in_rows: (0, 0),
        aux_rows: (0, 0),
        units: (0, 0),
        input_channels: amp,
    };
    match kind {
        Kind::Conv(WindowPass::Forward) => {
            p.in_rows = input_rows(g, b.rows);
            p.in_channels = b.red;
        }
        Kind::Pool { grad: false } => {
            p.in_rows = input_rows(g, b.rows);
        }
        Kind::Conv(WindowPass::InputGrad) => {
            p.in_rows = output_rows_of(g, b.rows);
            p.in_channels = b.red;
        }
        Kind::Conv(WindowPass::WeightGrad) => {
            p.in_channels = b.rows;
            p.out_rows = (0, 0);
        }
        Kind::Pool { grad: true } => {
            let dy = output_rows_of(g, b.rows);
            let reach = input_rows(g, dy);
            p.aux_rows = dy;
            p.in_rows = (reach.0.min(b.rows.0), reach.1.max(b.rows.1));
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

/// Rows `rows` of the planes `(n, channel)` for `n` in `batch`, `channel` in `channels`
/// (absolute channel indices) of an NCHW tensor with `chans` channels, `h` rows, `w` columns.
fn plane_rows(
    batch: (u32, u32),
    channels: (u32, u32),
    rows: (u32, u32),
    (chans, h, w): (u32, u32, u32),
) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for n in batch.0..batch.1 {
        for c in channels.0..channels.1 {
            let plane = (u64::from(n) * u64::from(chans) + u64::from(c)) * u64::from(h);
            out.push((
                (plane + u64::from(rows.0)) * u64::from(w),
                u64::from(span(rows)) * u64::from(w),
            ));
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

/// The element ranges of the block's output, in order.
fn output_ranges(kind: Kind, g: &WindowGeometry, b: &Block) -> Vec<(u64, u64)> {
    match kind {
        Kind::Conv(WindowPass::Forward) => {
            let o0 = b.group * g.o_per_group();
            plane_rows(
                b.batch,
                (o0 + b.channels.0, o0 + b.channels.1),
                b.rows,
                (g.o, g.oh, g.ow),
            )
        }
        Kind::Conv(WindowPass::InputGrad) => {
            let c0 = b.group * g.c_per_group();
            plane_rows(
                b.batch,
                (c0 + b.channels.0, c0 + b.channels.1),
                b.rows,
                (g.c, g.h, g.w),
            )
        }
        Kind::Conv(WindowPass::WeightGrad) => {
            let o0 = b.group * g.o_per_group();
            weight_block(g, (o0 + b.channels.0, o0 + b.channels.1), b.rows)
        }
        Kind::Pool { grad: false } => plane_rows(b.batch, b.channels, b.rows, (g.c, g.oh, g.ow)),
        Kind::Pool { grad: true } => plane_rows(b.batch, b.channels, b.rows, (g.c, g.h, g.w)),
    }
}

/// The element ranges of the block's two input operands, in the order the vertex reads them.
fn operand_ranges(kind: Kind, g: &WindowGeometry, b: &Block, p: &WindowParams) -> (Ranges, Ranges) {
    let (cg, og) = (g.c_per_group(), g.o_per_group());
    match kind {
        Kind::Conv(WindowPass::Forward) => {
            let c0 = b.group * cg;
            let x = plane_rows(
                b.batch,
                (c0 + b.red.0, c0 + b.red.1),
                p.in_rows,
                (g.c, g.h, g.w),
            );
            let o0 = b.group * og;
            let w = weight_block(g, (o0 + b.channels.0, o0 + b.channels.1), b.red);
            (x, w)
        }
        Kind::Conv(WindowPass::InputGrad) => {
            let o0 = b.group * og;
            let dy = plane_rows(
                b.batch,
                (o0 + b.red.0, o0 + b.red.1),
                p.in_rows,
                (g.o, g.oh, g.ow),
            );
            let w = weight_block(g, (o0 + b.red.0, o0 + b.red.1), b.channels);
            (dy, w)
        }
        Kind::Conv(WindowPass::WeightGrad) => {
            let c0 = b.group * cg;
            let x = plane_rows(
                b.batch,
                (c0 + b.rows.0, c0 + b.rows.1),
                (0, g.h),
                (g.c, g.h, g.w),
            );
            let o0 = b.group * og;
            let dy = plane_rows(
                b.batch,
                (o0 + b.channels.0, o0 + b.channels.1),
                (0, g.oh),
                (g.o, g.oh, g.ow),
            );
            (x, dy)
        }
        Kind::Pool { grad } => {
            let x = plane_rows(b.batch, b.channels, p.in_rows, (g.c, g.h, g.w));
            let dy = if grad {
                plane_rows(b.batch, b.channels, p.aux_rows, (g.c, g.oh, g.ow))
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
/// planner has no per-region term because its channel-grouped layouts keep regions large;
/// ours are NCHW, where splitting rows fragments every channel plane).
const REGION_CYCLES: u64 = 2;

/// Exchange regions of `n` batch elements × `c` channel planes: one per plane when the
/// planes are cut into rows, else one per batch element, else one.
fn plane_regions(n: u64, c: u64, whole_rows: bool, all_channels: bool) -> u64 {
    match (whole_rows, all_channels) {
        (false, _) => n * c,
        (true, false) => n,
        (true, true) => 1,
    }
}

/// The split of fewest estimated cycles that fits the memory budget (else of fewest bytes),
/// using at most `tiles` blocks per group.
fn plan(
    lw: &Lowerer,
    id: NodeId,
    (kind, codelet): (Kind, &Codelet),
    g: &WindowGeometry,
    (input, partials): (DType, DType),
    e: (u32, u32, u32),
    tiles: u32,
) -> Split {
    let target = lw.target();
    let proportion = lw.options().memory_proportion(&lw.graph().node(id).name);
    let budget = (proportion * target.bytes_per_tile as f64) as u64;
    let amp = target.amp(input, partials);
    let es = input.size_bytes() as u64;
    let ps = partials.size_bytes() as u64;
    let xbw = u64::from(target.exchange_bytes_per_cycle.max(1));
    let kernel = u64::from(g.kh) * u64::from(g.kw);
    let red_extent = reduction_extent(kind, g);
    let one_group = g.groups <= 1 || matches!(kind, Kind::Pool { .. });
    let mut best: Option<(bool, u64, u64, Split)> = None;
    for sb in candidates(e.0) {
        for sc in candidates(e.1) {
            if u64::from(sb) * u64::from(sc) > u64::from(tiles) {
                break;
            }
            for sr in candidates(e.2) {
                if u64::from(sb) * u64::from(sc) * u64::from(sr) > u64::from(tiles) {
                    break;
                }
                let reds = if red_extent == 0 {
                    vec![1]
                } else {
                    candidates(red_extent)
                };
                for sred in reds {
                    let used = u64::from(sb) * u64::from(sc) * u64::from(sr) * u64::from(sred);
                    if used > u64::from(tiles) {
                        break;
                    }
                    let split = Split {
                        batch: sb,
                        channels: sc,
                        rows: sr,
                        red: sred,
                    };
                    let (cycles, bytes) = cost(
                        (kind, codelet),
                        (g, e, split),
                        (es, ps, xbw, kernel, one_group),
                        target,
                        amp.input_channels,
                    );
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
            red: 1,
        },
        |b| b.3,
    )
}

/// The planner's cost of a split: its cycles (the registry's
/// estimate of the first, largest block's vertex group plus the proxy's exchange, region
/// and reduction terms) and the first block's operand and output bytes.
fn cost(
    (kind, codelet): (Kind, &Codelet),
    (g, e, s): (&WindowGeometry, (u32, u32, u32), Split),
    (es, ps, xbw, kernel, one_group): (u64, u64, u64, u64, bool),
    target: &crate::target::Target,
    amp_channels: u32,
) -> (u64, u64) {
    let (nb, cb, rb) = (
        u64::from(e.0.div_ceil(s.batch)),
        u64::from(e.1.div_ceil(s.channels)),
        u64::from(e.2.div_ceil(s.rows)),
    );
    let red_extent = reduction_extent(kind, g);
    let red = u64::from(red_extent.div_ceil(s.red.max(1)));
    let rows = (rb as u32).min(e.2);
    // The summation of split partials: they cross the exchange and are summed (our proxy).
    let sum = |elems: u64, parts: u64| -> u64 {
        if parts > 1 {
            let per = elems.div_ceil(parts);
            per * parts * ps / xbw + per * parts / 2 + 100
        } else {
            0
        }
    };
    let whole_batch = nb == u64::from(e.0);
    let (bytes, cycles, regions) = match kind {
        Kind::Conv(pass @ (WindowPass::Forward | WindowPass::InputGrad)) => {
            let (width, in_w, in_h, in_all, out_all) = match pass {
                WindowPass::Forward => (g.ow, g.w, g.h, g.c, g.o),
                _ => (g.w, g.ow, g.oh, g.o, g.c),
            };
            let in_rows = u64::from(span(input_rows(g, (0, rows))));
            let x = nb * red * in_rows * u64::from(in_w) * es;
            let w = cb * red * kernel * es;
            let elems = nb * cb * rb * u64::from(width);
            let out = elems * if s.red > 1 { ps } else { es };
            let all_red = one_group && red == u64::from(in_all);
            let all_out = one_group && cb == u64::from(out_all);
            let regions =
                plane_regions(nb, red, in_rows >= u64::from(in_h), all_red && whole_batch)
                    + if red == u64::from(red_extent) { 1 } else { cb }
                    + plane_regions(nb, cb, rows >= e.2, all_out && whole_batch)
                    + if s.red > 1 { u64::from(s.red) } else { 0 };
            (
                x + w + out,
                (x + w) / xbw + sum(elems, u64::from(s.red)),
                regions,
            )
        }
        Kind::Conv(WindowPass::WeightGrad) => {
            let field = nb * u64::from(g.oh) * u64::from(g.ow);
            let x = rb * nb * u64::from(g.h) * u64::from(g.w) * es;
            let dy = cb * field * es;
            let out = cb * rb * kernel * 4;
            let regions = plane_regions(
                nb,
                rb,
                true,
                one_group && rb == u64::from(g.c) && whole_batch,
            ) + plane_regions(
                nb,
                cb,
                true,
                one_group && cb == u64::from(g.o) && whole_batch,
            ) + if rb == u64::from(e.2) { 1 } else { cb }
                + if s.batch > 1 { u64::from(s.batch) } else { 0 };
            (
                x + dy + out * 2,
                (x + dy) / xbw + sum(cb * rb * kernel, u64::from(s.batch)),
                regions,
            )
        }
        Kind::Pool { grad } => {
            let in_rows = u64::from(span(input_rows(g, (0, rows)))) + rb;
            let x = nb * cb * in_rows * u64::from(g.w) * es;
            let out = nb * cb * rb * u64::from(if grad { g.w } else { g.ow }) * es;
            let all = cb == u64::from(e.1) && whole_batch;
            let regions = plane_regions(nb, cb, in_rows >= u64::from(g.h), all)
                * (1 + u64::from(grad))
                + plane_regions(nb, cb, rows >= e.2, all);
            (x + 2 * out, x / xbw, regions)
        }
    };
    let first = Block {
        group: 0,
        batch: (0, nb as u32),
        channels: (0, cb as u32),
        rows: (0, rb as u32),
        red: (0, red as u32),
    };
    let mut params = block_params(kind, g, &first, amp_channels);
    params.units = match kind {
        Kind::Conv(WindowPass::WeightGrad) => (0, cb as u32),
        _ => (0, (nb * cb) as u32),
    };
    let vertex = window_group_cycles(target, codelet, &params);
    let cycles = vertex
        .saturating_add(cycles)
        .saturating_add(regions.saturating_mul(REGION_CYCLES));
    (cycles, bytes)
}

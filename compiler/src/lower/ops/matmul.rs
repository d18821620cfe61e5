//! Lowering of `MatMul`: plan (see [`super::planner`]), map the output by the plan's blocks,
//! then per serial chunk: gather each tile's A and B blocks (a folded transpose is read in
//! its stored layout), run AMP matmul-partial vertices, and when the reduction is split,
//! exchange the partials and sum them on the tiles of each block.
//!
//! Cross-tile reduction order: the partials of block `(g, m, n)` from its `sk` reduction
//! tiles are summed by a `Reduce` vertex in ascending reduction-split index (ascending `k`
//! ranges), sequentially in the partials type; reducer `j` of the block sums chunk `j` of
//! the block's elements in block order (group, row, column).

use crate::codelets::{AmpParams, Codelet, MatrixLayout, VertexParams};
use crate::error::CompileError;
use crate::executable::{Operand, Operands, TensorId, TensorKind, TileWork, Vertex, VertexGroup};
use crate::lower::core::{is_swap_last, Lowerer};
use crate::lower::kit::mapping::{worker_slices, Mapping};
use crate::lower::kit::permute;
use crate::lower::kit::planner::{plan, Home, Plan, Problem};
use crate::lower::kit::split_sum::{chunk_of, sum_split, SplitBlock};
use crate::lower::kit::stage::{ExchangeBuilder, Staging, TileScratch};
use ipusim_ir::{DType, NodeId};

/// The shape of one matmul as lowered: `g` groups of `m × k × n`, the stored layouts of A
/// and B, and the tensors holding them.
struct Geometry {
    d: Dims,
    a: TensorId,
    b: TensorId,
}

/// A matmul's dimensions given the stored layouts of its operands (no tensors needed).
struct Dims {
    g: u64,
    m: u64,
    k: u64,
    n: u64,
    /// Element offsets of each group's A and B matrices in their stored tensors.
    bases: Vec<(u64, u64)>,
    a_layout: MatrixLayout,
    b_layout: MatrixLayout,
}

fn layout(transposed: bool) -> MatrixLayout {
    if transposed {
        MatrixLayout::Transposed
    } else {
        MatrixLayout::RowMajor
    }
}

/// Lowers the `MatMul` node `id`.
pub(crate) fn lower(lw: &mut Lowerer, id: NodeId) -> Result<(), CompileError> {
    let node = lw.graph().node(id);
    let name = node.name.clone();
    let out_ty = node.ty.clone();
    let geo = geometry(lw, id)?;
    let input = lw.tensor(geo.a).dtype;
    let partials = lw.options().partials_type.accumulator_for(input);
    let output = out_ty.dtype;
    let n_out = out_ty.num_elements() as u64;
    let output_tensor = |lw: &mut Lowerer, mapping| {
        lw.new_tensor(
            name.clone(),
            Some(id),
            TensorKind::Activation,
            output,
            out_ty.shape.clone(),
            mapping,
        )
    };
    if n_out == 0 || geo.d.k == 0 {
        let m = if n_out == 0 {
            Mapping::default()
        } else {
            lw.fresh_mapping(n_out, output)
        };
        let c = output_tensor(lw, m);
        let tiles = crate::lower::kit::fill::fill_work(lw, &[(c, 0.0)]);
        lw.superstep(&name, Some(id), Vec::new(), tiles);
        lw.set_value(id, c);
        return Ok(());
    }
    let home = home_tile(lw, &geo);
    let layouts = (
        geo.d.a_layout == MatrixLayout::Transposed,
        geo.d.b_layout == MatrixLayout::Transposed,
    );
    let plan = plan_for(lw, id, layouts.0, layouts.1, home);
    let c_map = output_mapping(lw, &geo, &plan);
    let c = output_tensor(lw, c_map);
    for s in 0..plan.serial {
        let prefix = if plan.serial > 1 {
            format!("{name}/serial{s}")
        } else {
            name.clone()
        };
        let ch = Chunk {
            id,
            prefix,
            geo: &geo,
            plan: &plan,
            s,
            c,
            types: (input, partials, output),
        };
        chunk(lw, &ch);
    }
    lw.set_value(id, c);
    Ok(())
}

/// Shapes, groups, and the stored layouts and tensors of A and B.
fn geometry(lw: &mut Lowerer, id: NodeId) -> Result<Geometry, CompileError> {
    let node = lw.graph().node(id);
    let (a_id, b_id) = (node.inputs[0], node.inputs[1]);
    let va = permute::row_major_view(lw, a_id)?;
    let vb = permute::row_major_view(lw, b_id)?;
    Ok(Geometry {
        d: dims(lw, id, va.transposed, vb.transposed),
        a: va.tensor,
        b: vb.tensor,
    })
}

/// The dimensions of matmul `id` when A and B are stored transposed or not. Groups: A's
/// batch is folded into its rows when B is shared by every group and A is row-major.
fn dims(lw: &Lowerer, id: NodeId, a_t: bool, b_t: bool) -> Dims {
    let node = lw.graph().node(id);
    let (a_id, b_id) = (node.inputs[0], node.inputs[1]);
    let ad = lw.graph().node(a_id).ty.shape.dims().to_vec();
    let bd = lw.graph().node(b_id).ty.shape.dims().to_vec();
    let od = node.ty.shape.dims().to_vec();
    let (ra, rb, ro) = (ad.len(), bd.len(), od.len());
    let (m, k, n) = (ad[ra - 2] as u64, ad[ra - 1] as u64, bd[rb - 1] as u64);
    let a_batch = &ad[..ra - 2];
    let b_batch = &bd[..rb - 2];
    let o_batch = &od[..ro - 2];
    let g: u64 = o_batch.iter().map(|&d| d as u64).product();
    let (a_layout, b_layout) = (layout(a_t), layout(b_t));
    if b_batch.iter().all(|&d| d == 1) && !a_t {
        return Dims {
            g: 1,
            m: g * m,
            k,
            n,
            bases: vec![(0, 0)],
            a_layout,
            b_layout,
        };
    }
    let index_in = |batch: &[usize], coords: &[u64]| -> u64 {
        let off = coords.len() - batch.len();
        let mut idx = 0u64;
        for (d, &size) in batch.iter().enumerate() {
            let c = if size == 1 { 0 } else { coords[off + d] };
            idx = idx * size as u64 + c;
        }
        idx
    };
    let mut bases = Vec::with_capacity(g as usize);
    let mut coords = vec![0u64; o_batch.len()];
    for _ in 0..g {
        bases.push((
            index_in(a_batch, &coords) * m * k,
            index_in(b_batch, &coords) * k * n,
        ));
        for d in (0..coords.len()).rev() {
            coords[d] += 1;
            if coords[d] < o_batch[d] as u64 {
                break;
            }
            coords[d] = 0;
        }
    }
    Dims {
        g,
        m,
        k,
        n,
        bases,
        a_layout,
        b_layout,
    }
}

/// True when `id`'s value is its source seen with the last two dims swapped an odd number of
/// times (a chain of folded transposes), as the lowering will see it.
fn transposed_view(lw: &Lowerer, mut id: NodeId) -> bool {
    let mut t = false;
    loop {
        if let Ok(v) = lw.value_of(id) {
            return t ^ v.transposed;
        }
        let node = lw.graph().node(id);
        if !is_swap_last(&node.op) {
            return t;
        }
        t = !t;
        id = node.inputs[0];
    }
}

/// The plan of matmul `id` for the given stored layouts: cached, so that a plan chosen early
/// (to lay out a variable the matmul reads) is the plan the matmul is lowered with.
fn plan_for(lw: &mut Lowerer, id: NodeId, a_t: bool, b_t: bool, home: Option<Home>) -> Plan {
    if let Some((p, layouts)) = lw.plan(id) {
        if *layouts == (a_t, b_t) {
            return p.clone();
        }
    }
    let d = dims(lw, id, a_t, b_t);
    let node = lw.graph().node(id);
    let input = node.ty.dtype;
    let problem = Problem {
        g: d.g,
        m: d.m,
        k: d.k,
        n: d.n,
        input,
        partials: lw.options().partials_type.accumulator_for(input),
        output: node.ty.dtype,
        a_layout: d.a_layout,
        b_layout: d.b_layout,
    };
    let proportion = lw.options().memory_proportion(&lw.graph().node(id).name);
    let mut plan = plan(lw.target(), proportion, &problem, home);
    // The plan uses consecutive tiles from its start; spread partial plans over the chip.
    if !plan.home && plan.tiles() < lw.target().tiles as u64 {
        plan.start_tile = lw.rotate_start(plan.tiles() as u32);
    }
    lw.set_plan(id, plan.clone(), (a_t, b_t));
    plan
}

/// The layout PopLibs would create operand `which` (0: A, 1: B) of matmul `id` with
/// (`createMatMulInputLHS/RHS`): each block's elements on one of the tiles that read it, so
/// the block is read in place there and broadcast to the others. Element indices are those
/// of the tensor the operand is stored in (through folded transposes and casts).
pub(crate) fn operand_mapping(lw: &mut Lowerer, id: NodeId, which: usize) -> Option<Mapping> {
    let node = lw.graph().node(id);
    let (a_t, b_t) = (
        transposed_view(lw, node.inputs[0]),
        transposed_view(lw, node.inputs[1]),
    );
    if node.ty.num_elements() == 0 {
        return None;
    }
    let d = dims(lw, id, a_t, b_t);
    if d.k == 0 {
        return None;
    }
    // The one-tile candidate: operands not lowered yet will be placed there.
    let mut home = Home {
        tile: lw.peek_start(),
        remote_bytes: 0,
        remote_rows: 0,
    };
    for (i, rows) in [(0usize, d.g * d.m), (1, d.g * d.k)] {
        let input = node.inputs[i];
        if lw.has_value(input) {
            home.remote_bytes += lw.graph().node(input).ty.size_bytes() as u64;
            home.remote_rows += rows;
        }
    }
    let plan = plan_for(lw, id, a_t, b_t, Some(home));
    // Only when each block is read by one tile (A not split by columns, B not by rows): a
    // block read by several tiles must be broadcast anyway, and owning it on one of them
    // would only pile memory there.
    let readers = if which == 0 { plan.sn } else { plan.sm };
    if readers > 1 {
        return None;
    }
    let mut pieces = Vec::new();
    let mut claimed = 0u64;
    let serials = if which == 0 { plan.serial } else { 1 };
    for s in 0..serials {
        for_blocks_of(&d, &plan, s, |[gi, mi, ni, ki], gr, mr, nr| {
            let (k0, k1) = range(ki, plan.bk, d.k);
            let tile = plan.tile(lw.target(), gi, mi, ni, ki);
            for g in gr.0..gr.1 {
                let block = if which == 0 {
                    a_block(&d, g, mr, (k0, k1))
                } else {
                    b_block(&d, g, (k0, k1), nr)
                };
                // Whole rows are one piece: `from_pieces` joins adjacent pieces of a tile
                // anyway, and the pieces are disjoint whenever the mapping is kept (each
                // element claimed once), so the mapping is the same as row by row.
                for (b, l) in block.runs() {
                    pieces.push((tile, b, b + l));
                    claimed += l;
                }
            }
        });
    }
    let stored = lw.graph().node(node.inputs[which]).ty.num_elements() as u64;
    // Groups sharing a broadcast operand claim it twice: keep the default layout then.
    (claimed == stored).then(|| Mapping::from_pieces(pieces))
}

/// The sub-block `rows × cols` of a row-major matrix with rows of `row_len` elements
/// starting at element `base`: `count` ranges of `len` elements, `stride` apart. Kept in
/// this form so that a block of many rows costs no host memory per row until a caller needs
/// its rows one by one (an exchange copies each row on its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SubBlock {
    first: u64,
    count: u64,
    len: u64,
    stride: u64,
}

impl SubBlock {
    fn new(base: u64, rows: (u64, u64), cols: (u64, u64), row_len: u64) -> SubBlock {
        SubBlock {
            first: base + rows.0 * row_len + cols.0,
            count: rows.1 - rows.0,
            len: cols.1 - cols.0,
            stride: row_len,
        }
    }

    /// The element ranges `(begin, len)`, row by row.
    fn rows(&self) -> Vec<(u64, u64)> {
        (0..self.count)
            .map(|r| (self.first + r * self.stride, self.len))
            .collect()
    }

    /// The same elements, in the same order, as maximal contiguous ranges: one range when
    /// the block spans whole rows.
    fn runs(&self) -> Vec<(u64, u64)> {
        if self.len == self.stride {
            vec![(self.first, self.count * self.len)]
        } else {
            self.rows()
        }
    }
}

/// Group `g`'s A block (rows `mr`, channels `kr`) in the stored A (`m × k`, or `k × m` when
/// transposed), in block order.
fn a_block(d: &Dims, g: u64, mr: (u64, u64), kr: (u64, u64)) -> SubBlock {
    let base = d.bases[g as usize].0;
    match d.a_layout {
        MatrixLayout::RowMajor => SubBlock::new(base, mr, kr, d.k),
        MatrixLayout::Transposed => SubBlock::new(base, kr, mr, d.m),
    }
}

/// Group `g`'s B block (channels `kr`, columns `nr`) in the stored B (`k × n`, or `n × k`
/// when transposed).
fn b_block(d: &Dims, g: u64, kr: (u64, u64), nr: (u64, u64)) -> SubBlock {
    let base = d.bases[g as usize].1;
    match d.b_layout {
        MatrixLayout::RowMajor => SubBlock::new(base, kr, nr, d.n),
        MatrixLayout::Transposed => SubBlock::new(base, nr, kr, d.k),
    }
}

/// The tile holding most bytes of A and B, with the bytes and rows (messages) of those not
/// entirely on it (for the one-tile plan).
fn home_tile(lw: &Lowerer, geo: &Geometry) -> Option<Home> {
    let mut per: std::collections::BTreeMap<u32, u64> = Default::default();
    for t in [geo.a, geo.b] {
        let tensor = &lw.tensor(t);
        let es = tensor.dtype.size_bytes() as u64;
        for s in &tensor.slices {
            *per.entry(s.tile.tile()).or_default() += s.num_elements() * es;
        }
    }
    let (tile, _) = per
        .into_iter()
        .max_by_key(|&(t, b)| (b, std::cmp::Reverse(t)))?;
    let mut home = Home {
        tile,
        remote_bytes: 0,
        remote_rows: 0,
    };
    for (t, rows) in [(geo.a, geo.d.g * geo.d.m), (geo.b, geo.d.g * geo.d.k)] {
        let tensor = &lw.tensor(t);
        let local = tensor
            .slice_on(lw.tile_id(tile))
            .map_or(0, |s| s.num_elements());
        let remote = tensor.num_elements() - local;
        if remote > 0 {
            home.remote_bytes += remote * tensor.dtype.size_bytes() as u64;
            home.remote_rows += rows;
        }
    }
    Some(home)
}

/// Block ranges of split index `i` of `extent` in blocks of `block`.
fn range(i: u64, block: u64, extent: u64) -> (u64, u64) {
    ((i * block).min(extent), ((i + 1) * block).min(extent))
}

/// Rows `[m0, m1)` of serial chunk `s` and row split `mi`.
fn rows(plan: &Plan, m: u64, s: u64, mi: u64) -> (u64, u64) {
    let mc = m.div_ceil(plan.serial);
    let (c0, c1) = range(s, mc, m);
    let (r0, r1) = range(mi, plan.bm, c1 - c0);
    (c0 + r0, c0 + r1)
}

/// Calls `f([gi, mi, ni, ki], (g0, g1), (m0, m1), (n0, n1))` for every non-empty block of
/// serial chunk `s`.
fn for_blocks_of(
    d: &Dims,
    plan: &Plan,
    s: u64,
    mut f: impl FnMut([u64; 4], (u64, u64), (u64, u64), (u64, u64)),
) {
    for gi in 0..plan.sg {
        let gr = range(gi, plan.bg, d.g);
        for mi in 0..plan.sm {
            let mr = rows(plan, d.m, s, mi);
            for ni in 0..plan.sn {
                let nr = range(ni, plan.bn, d.n);
                if gr.0 == gr.1 || mr.0 == mr.1 || nr.0 == nr.1 {
                    continue;
                }
                for ki in 0..plan.sk {
                    f([gi, mi, ni, ki], gr, mr, nr);
                }
            }
        }
    }
}

/// Calls `f(tile, [gi, mi, ni, ki], (g0, g1), (m0, m1), (n0, n1))` for every non-empty block
/// of serial chunk `s`.
fn for_blocks(
    lw: &Lowerer,
    geo: &Geometry,
    plan: &Plan,
    s: u64,
    mut f: impl FnMut(u32, [u64; 4], (u64, u64), (u64, u64), (u64, u64)),
) {
    for_blocks_of(&geo.d, plan, s, |[gi, mi, ni, ki], gr, mr, nr| {
        f(
            plan.tile(lw.target(), gi, mi, ni, ki),
            [gi, mi, ni, ki],
            gr,
            mr,
            nr,
        )
    });
}

/// The output mapping: each block's elements on its tile, or split in `sk` chunks over the
/// block's reduction tiles.
fn output_mapping(lw: &Lowerer, geo: &Geometry, plan: &Plan) -> Mapping {
    let mut pieces = Vec::new();
    for s in 0..plan.serial {
        for_blocks(lw, geo, plan, s, |tile, [.., ki], gr, mr, nr| {
            let bn = nr.1 - nr.0;
            let bm = mr.1 - mr.0;
            let e = (gr.1 - gr.0) * bm * bn;
            let (c0, c1) = chunk_of(ki, plan.sk, e, MATMUL_GRAIN);
            // A block of whole rows is contiguous within each group: one piece per group
            // (the pieces are disjoint, so `from_pieces` makes the same mapping as row by
            // row), else one piece per row.
            let whole_rows = bn == geo.d.n;
            let mut p = c0;
            while p < c1 {
                let (gg, rem) = (p / (bm * bn), p % (bm * bn));
                let (r, col) = (rem / bn, rem % bn);
                let run = if whole_rows { bm * bn - rem } else { bn - col };
                let take = run.min(c1 - p);
                let flat = (gr.0 + gg) * geo.d.m * geo.d.n + (mr.0 + r) * geo.d.n + nr.0 + col;
                pieces.push((tile, flat, flat + take));
                p += take;
            }
        });
    }
    Mapping::from_pieces(pieces)
}

/// One serial chunk of a matmul being lowered.
struct Chunk<'a> {
    /// The matmul node.
    id: NodeId,
    /// Prefix of its compute-set names.
    prefix: String,
    geo: &'a Geometry,
    plan: &'a Plan,
    /// Its index.
    s: u64,
    /// The output tensor.
    c: TensorId,
    /// Input, partials and output types.
    types: (DType, DType, DType),
}

/// Lowers one serial chunk: input exchange + AMP partials, then the reduction if split.
fn chunk(lw: &mut Lowerer, ch: &Chunk) {
    let Chunk {
        id,
        ref prefix,
        geo,
        plan,
        s,
        c,
        types: (input, partials, output),
    } = *ch;
    let nw = lw.target().worker_contexts;
    let amp = *lw.target().amp(input, partials);
    let amp_out = if plan.sk == 1 { output } else { partials };
    let mut eb = ExchangeBuilder::default();
    let mut sa = Staging::new(geo.a, format!("{prefix}/lhs"), Some(id));
    let mut sb = Staging::new(geo.b, format!("{prefix}/rhs"), Some(id));
    let mut scratch = (plan.sk > 1)
        .then(|| TileScratch::new(lw, format!("{prefix}/partials"), Some(id), partials));
    let mut blocks = Vec::new();
    for_blocks(lw, geo, plan, s, |tile, idx, gr, mr, nr| {
        blocks.push((tile, idx, gr, mr, nr));
    });
    let mut tiles = Vec::with_capacity(blocks.len());
    // Per block: the tile, its block index, and where its partials went (for the reduction).
    let mut partial_at: Vec<(u32, [u64; 4], u64)> = Vec::new();
    for &(tile, idx, gr, mr, nr) in &blocks {
        let ki = idx[3];
        let (k0, k1) = range(ki, plan.bk, geo.d.k);
        if k0 == k1 && plan.sk > 1 {
            continue;
        }
        let (bm, bk, bn) = (mr.1 - mr.0, k1 - k0, nr.1 - nr.0);
        let mut groups = Vec::new();
        let mut first_partial = None;
        for g in gr.0..gr.1 {
            let a = a_block(&geo.d, g, mr, (k0, k1));
            let b = b_block(&geo.d, g, (k0, k1), nr);
            let a_op = sa.operand_with(lw, &mut eb, tile, &a.runs(), || a.rows());
            let b_op = sb.operand_with(lw, &mut eb, tile, &b.runs(), || b.rows());
            let (out_t, out_pos) = match scratch.as_mut() {
                Some(sc) => {
                    let p = sc.alloc(tile, bm * bn);
                    first_partial.get_or_insert(p);
                    (sc.tensor, p)
                }
                None => (
                    c,
                    lw.position(c, g * geo.d.m * geo.d.n + mr.0 * geo.d.n + nr.0),
                ),
            };
            let es = amp_out.size_bytes() as u64;
            let vertices = worker_slices(bm, 1, nw)
                .into_iter()
                .enumerate()
                .map(|(w, (r0, r1))| Vertex {
                    worker: w as u8,
                    operands: Operands::from_iter([
                        a_op,
                        b_op,
                        Operand {
                            tensor: out_t,
                            offset: ((out_pos + r0 * bn) * es) as u32,
                            len: ((r1 - r0) * bn) as u32,
                        },
                    ]),
                    params: VertexParams::Amp(AmpParams {
                        a_layout: geo.d.a_layout,
                        b_layout: geo.d.b_layout,
                        m: bm as u32,
                        k: bk as u32,
                        n: bn as u32,
                        row_begin: r0 as u32,
                        rows: (r1 - r0) as u32,
                        input_channels: amp.input_channels,
                        output_channels: amp.output_channels,
                    }),
                })
                .collect();
            groups.push(VertexGroup {
                codelet: Codelet::AmpMatMul {
                    input,
                    partials,
                    output: amp_out,
                },
                vertices,
            });
        }
        if let Some(p) = first_partial {
            partial_at.push((tile, idx, p));
        }
        tiles.push(TileWork {
            tile: lw.tile_id(tile),
            groups,
            cycles: 0,
        });
    }
    sa.finish(lw);
    sb.finish(lw);
    lw.superstep(&format!("{prefix}/partials"), Some(id), eb.finish(), tiles);
    if let Some(sc) = scratch {
        let ptensor = sc.tensor;
        sc.finish(lw);
        reduce_partials(lw, ch, ptensor, &partial_at);
    }
}

/// The grain of a matmul's split-reduction chunks: one element (not yet PopLibs'
/// `partialGroupedReduce` grain, which convolutions take, `split_sum::reduce_grain`).
const MATMUL_GRAIN: u64 = 1;

/// Sums the `sk` partial blocks (in `ptensor`, each block's start on its tile in
/// `partial_at`) of every output block on the block's reduction tiles.
fn reduce_partials(
    lw: &mut Lowerer,
    ch: &Chunk,
    ptensor: TensorId,
    partial_at: &[(u32, [u64; 4], u64)],
) {
    let (geo, plan, c) = (ch.geo, ch.plan, ch.c);
    let (_, partials, output) = ch.types;
    let mut blocks = Vec::new();
    for_blocks(lw, geo, plan, ch.s, |tile, idx, gr, mr, nr| {
        if idx[3] == 0 {
            blocks.push((tile, idx, gr, mr, nr));
        }
    });
    let mut split = Vec::with_capacity(blocks.len());
    for (_, idx, gr, mr, nr) in blocks {
        let e = (gr.1 - gr.0) * (mr.1 - mr.0) * (nr.1 - nr.0);
        let sources: Vec<(u32, u64)> = (0..plan.sk)
            .filter_map(|ki| {
                partial_at
                    .iter()
                    .find(|(_, bi, _)| bi[..3] == idx[..3] && bi[3] == ki)
                    .map(|&(t, _, p)| (t, p))
            })
            .collect();
        let tiles = (0..plan.sk)
            .map(|j| plan.tile(lw.target(), idx[0], idx[1], idx[2], j))
            .collect();
        // The output position of each chunk's first element.
        let (bm, bn) = (mr.1 - mr.0, nr.1 - nr.0);
        let out_pos = (0..plan.sk)
            .map(|j| {
                let c0 = chunk_of(j, plan.sk, e, MATMUL_GRAIN).0;
                if c0 >= e {
                    return 0; // an empty chunk: nothing is written
                }
                let (gg, rem) = (c0 / (bm * bn), c0 % (bm * bn));
                let flat =
                    (gr.0 + gg) * geo.d.m * geo.d.n + (mr.0 + rem / bn) * geo.d.n + nr.0 + rem % bn;
                lw.position(c, flat)
            })
            .collect();
        split.push(SplitBlock {
            sources,
            elems: e,
            grain: MATMUL_GRAIN,
            tiles,
            out_pos,
        });
    }
    sum_split(
        lw,
        (ch.id, &ch.prefix),
        ptensor,
        (partials, output),
        c,
        &split,
    );
}

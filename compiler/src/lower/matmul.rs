//! Lowering of `MatMul`: plan (see [`super::planner`]), map the output by the plan's blocks,
//! then per serial chunk: gather each tile's A and B blocks (a folded transpose is read in
//! its stored layout), run AMP matmul-partial vertices, and when the reduction is split,
//! exchange the partials and sum them on the tiles of each block.
//!
//! Cross-tile reduction order: the partials of block `(g, m, n)` from its `sk` reduction
//! tiles are summed by a `Reduce` vertex in ascending reduction-split index (ascending `k`
//! ranges), sequentially in the partials type; reducer `j` of the block sums chunk `j` of
//! the block's elements in block order (group, row, column).

use super::mapping::{worker_slices, Mapping};
use super::planner::{plan, Plan, Problem};
use super::stage::{ExchangeBuilder, Staging, TileScratch};
use super::{Lowerer, Value};
use crate::codelets::{AmpParams, BlockParams, Codelet, MatrixLayout, ReduceOp, VertexParams};
use crate::error::CompileError;
use crate::executable::{Operand, TensorId, TensorKind, TileWork, Vertex, VertexGroup};
use ipusim_ir::{DType, NodeId};

/// The geometry of one lowered matmul.
struct Geometry {
    g: u64,
    m: u64,
    k: u64,
    n: u64,
    /// Element offsets of each group's A and B matrices in their tensors.
    bases: Vec<(u64, u64)>,
    a: (TensorId, MatrixLayout),
    b: (TensorId, MatrixLayout),
}

/// Lowers the `MatMul` node `id`.
pub(crate) fn lower(lw: &mut Lowerer, id: NodeId) -> Result<(), CompileError> {
    let node = lw.g.node(id);
    let name = node.name.clone();
    let out_ty = node.ty.clone();
    let geo = geometry(lw, id)?;
    let input = lw.tensors[geo.a.0 .0 as usize].dtype;
    let partials = lw.options.partials_type.accumulator_for(input);
    let output = out_ty.dtype;
    let n_out = out_ty.num_elements() as u64;
    if n_out == 0 || geo.k == 0 {
        let m = if n_out == 0 {
            Mapping::default()
        } else {
            lw.fresh_mapping(n_out, output)
        };
        let c = lw.new_tensor(name.clone(), Some(id), TensorKind::Activation, output, out_ty.shape, m);
        let tiles = super::elementwise::fill_work(lw, &[(c, 0.0)]);
        lw.superstep(&name, Some(id), Vec::new(), tiles);
        lw.values.insert(id, Value { tensor: c, transposed: false });
        return Ok(());
    }
    let problem = Problem {
        g: geo.g,
        m: geo.m,
        k: geo.k,
        n: geo.n,
        input,
        partials,
        output,
        a_layout: geo.a.1,
        b_layout: geo.b.1,
    };
    let home = home_tile(lw, &[geo.a.0, geo.b.0]);
    let mut plan = plan(lw.target, lw.options, &problem, home);
    // The plan uses consecutive tiles from its start; spread partial plans over the chip.
    if !plan.home && plan.tiles() < lw.target.tiles as u64 {
        plan.start_tile = lw.rotate_start(plan.tiles() as u32);
    }
    let c_map = output_mapping(lw, &geo, &plan);
    let c = lw.new_tensor(name.clone(), Some(id), TensorKind::Activation, output, out_ty.shape, c_map);
    for s in 0..plan.serial {
        let prefix = if plan.serial > 1 {
            format!("{name}/serial{s}")
        } else {
            name.clone()
        };
        chunk(lw, id, &prefix, &geo, &plan, s, c, (input, partials, output));
    }
    lw.values.insert(id, Value { tensor: c, transposed: false });
    Ok(())
}

/// Shapes, groups, and the stored layouts of A and B.
fn geometry(lw: &Lowerer, id: NodeId) -> Result<Geometry, CompileError> {
    let node = lw.g.node(id);
    let (a_id, b_id) = (node.inputs[0], node.inputs[1]);
    let va = lw.value_of(a_id)?;
    let vb = lw.value_of(b_id)?;
    let ad = lw.g.node(a_id).ty.shape.dims().to_vec();
    let bd = lw.g.node(b_id).ty.shape.dims().to_vec();
    let od = node.ty.shape.dims().to_vec();
    let (ra, rb, ro) = (ad.len(), bd.len(), od.len());
    let (m, k, n) = (ad[ra - 2] as u64, ad[ra - 1] as u64, bd[rb - 1] as u64);
    let a_batch = &ad[..ra - 2];
    let b_batch = &bd[..rb - 2];
    let o_batch = &od[..ro - 2];
    let g: u64 = o_batch.iter().map(|&d| d as u64).product();
    let a_layout = if va.transposed {
        MatrixLayout::Transposed
    } else {
        MatrixLayout::RowMajor
    };
    let b_layout = if vb.transposed {
        MatrixLayout::Transposed
    } else {
        MatrixLayout::RowMajor
    };
    // Fold A's batch into its rows when B is shared by every group and A is row-major.
    if b_batch.iter().all(|&d| d == 1) && !va.transposed {
        return Ok(Geometry {
            g: 1,
            m: g * m,
            k,
            n,
            bases: vec![(0, 0)],
            a: (va.tensor, a_layout),
            b: (vb.tensor, b_layout),
        });
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
    Ok(Geometry {
        g,
        m,
        k,
        n,
        bases,
        a: (va.tensor, a_layout),
        b: (vb.tensor, b_layout),
    })
}

/// The tile holding most bytes of `tensors`, and the bytes elsewhere (for the one-tile plan).
fn home_tile(lw: &Lowerer, tensors: &[TensorId]) -> Option<(u32, u64)> {
    let mut per: std::collections::BTreeMap<u32, u64> = Default::default();
    let mut total = 0u64;
    for &t in tensors {
        let tensor = &lw.tensors[t.0 as usize];
        let es = tensor.dtype.size_bytes() as u64;
        for s in &tensor.slices {
            let b = s.num_elements() * es;
            *per.entry(s.tile).or_default() += b;
            total += b;
        }
    }
    per.into_iter()
        .max_by_key(|&(t, b)| (b, std::cmp::Reverse(t)))
        .map(|(t, b)| (t, total - b))
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

/// Calls `f(tile, gi, mi, ni, ki, (g0, g1), (m0, m1), (n0, n1))` for every non-empty block of
/// serial chunk `s`.
fn for_blocks(
    lw: &Lowerer,
    geo: &Geometry,
    plan: &Plan,
    s: u64,
    mut f: impl FnMut(u32, [u64; 4], (u64, u64), (u64, u64), (u64, u64)),
) {
    for gi in 0..plan.sg {
        let gr = range(gi, plan.bg, geo.g);
        for mi in 0..plan.sm {
            let mr = rows(plan, geo.m, s, mi);
            for ni in 0..plan.sn {
                let nr = range(ni, plan.bn, geo.n);
                if gr.0 == gr.1 || mr.0 == mr.1 || nr.0 == nr.1 {
                    continue;
                }
                for ki in 0..plan.sk {
                    let tile = plan.tile(lw.target, gi, mi, ni, ki);
                    f(tile, [gi, mi, ni, ki], gr, mr, nr);
                }
            }
        }
    }
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
            let (c0, c1) = if plan.sk == 1 {
                (0, e)
            } else {
                range(ki, e.div_ceil(plan.sk), e)
            };
            let mut p = c0;
            while p < c1 {
                let (gg, rem) = (p / (bm * bn), p % (bm * bn));
                let (r, col) = (rem / bn, rem % bn);
                let take = (bn - col).min(c1 - p);
                let flat = (gr.0 + gg) * geo.m * geo.n + (mr.0 + r) * geo.n + nr.0 + col;
                pieces.push((tile, flat, flat + take));
                p += take;
            }
        });
    }
    Mapping::from_pieces(pieces)
}


/// Lowers serial chunk `s`: input exchange + AMP partials, then the reduction if split.
#[allow(clippy::too_many_arguments)]
fn chunk(
    lw: &mut Lowerer,
    id: NodeId,
    prefix: &str,
    geo: &Geometry,
    plan: &Plan,
    s: u64,
    c: TensorId,
    (input, partials, output): (DType, DType, DType),
) {
    let nw = lw.target.worker_contexts;
    let amp = *lw.target.amp(input, partials);
    let amp_out = if plan.sk == 1 { output } else { partials };
    let mut eb = ExchangeBuilder::default();
    let mut sa = Staging::new(geo.a.0, format!("{prefix}/lhs"), Some(id));
    let mut sb = Staging::new(geo.b.0, format!("{prefix}/rhs"), Some(id));
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
        let (k0, k1) = range(ki, plan.bk, geo.k);
        if k0 == k1 && plan.sk > 1 {
            continue;
        }
        let (bm, bk, bn) = (mr.1 - mr.0, k1 - k0, nr.1 - nr.0);
        let mut groups = Vec::new();
        let mut first_partial = None;
        for g in gr.0..gr.1 {
            let (abase, bbase) = geo.bases[g as usize];
            let a_ranges: Vec<(u64, u64)> = match geo.a.1 {
                MatrixLayout::RowMajor => (mr.0..mr.1).map(|r| (abase + r * geo.k + k0, bk)).collect(),
                MatrixLayout::Transposed => (k0..k1).map(|kk| (abase + kk * geo.m + mr.0, bm)).collect(),
            };
            let b_ranges: Vec<(u64, u64)> = match geo.b.1 {
                MatrixLayout::RowMajor => (k0..k1).map(|kk| (bbase + kk * geo.n + nr.0, bn)).collect(),
                MatrixLayout::Transposed => (nr.0..nr.1).map(|c| (bbase + c * geo.k + k0, bk)).collect(),
            };
            let a_op = sa.operand(lw, &mut eb, tile, &a_ranges);
            let b_op = sb.operand(lw, &mut eb, tile, &b_ranges);
            let (out_t, out_pos) = match scratch.as_mut() {
                Some(sc) => {
                    let p = sc.alloc(tile, bm * bn);
                    first_partial.get_or_insert(p);
                    (sc.tensor, p)
                }
                None => (c, lw.position(c, g * geo.m * geo.n + mr.0 * geo.n + nr.0)),
            };
            let es = amp_out.size_bytes() as u64;
            let vertices = worker_slices(bm, 1, nw)
                .into_iter()
                .enumerate()
                .map(|(w, (r0, r1))| Vertex {
                    worker: w as u8,
                    operands: vec![
                        a_op,
                        b_op,
                        Operand {
                            tensor: out_t,
                            offset: ((out_pos + r0 * bn) * es) as u32,
                            len: ((r1 - r0) * bn) as u32,
                        },
                    ],
                    params: VertexParams::Amp(AmpParams {
                        a_layout: geo.a.1,
                        b_layout: geo.b.1,
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
        tiles.push(TileWork { tile, groups, cycles: 0 });
    }
    sa.finish(lw);
    sb.finish(lw);
    lw.superstep(&format!("{prefix}/partials"), Some(id), eb.finish(), tiles);
    if let Some(sc) = scratch {
        let ptensor = sc.tensor;
        sc.finish(lw);
        reduce_partials(lw, id, prefix, geo, plan, s, c, ptensor, &partial_at, (partials, output));
    }
}

/// Sums the `sk` partial blocks of every output block on the block's reduction tiles.
#[allow(clippy::too_many_arguments)]
fn reduce_partials(
    lw: &mut Lowerer,
    id: NodeId,
    prefix: &str,
    geo: &Geometry,
    plan: &Plan,
    s: u64,
    c: TensorId,
    ptensor: TensorId,
    partial_at: &[(u32, [u64; 4], u64)],
    (partials, output): (DType, DType),
) {
    let nw = lw.target.worker_contexts;
    let vw = lw.target.vector_width(partials);
    let ps = partials.size_bytes() as u64;
    let os = output.size_bytes() as u64;
    let mut eb = ExchangeBuilder::default();
    let mut inbox = TileScratch::new(lw, format!("{prefix}/reduce_in"), Some(id), partials);
    let mut tiles = Vec::new();
    let mut blocks = Vec::new();
    for_blocks(lw, geo, plan, s, |tile, idx, gr, mr, nr| {
        if idx[3] == 0 {
            blocks.push((tile, idx, gr, mr, nr));
        }
    });
    for (_, idx, gr, mr, nr) in blocks {
        let e = (gr.1 - gr.0) * (mr.1 - mr.0) * (nr.1 - nr.0);
        let chunk = e.div_ceil(plan.sk);
        let sources: Vec<(u32, u64)> = (0..plan.sk)
            .filter_map(|ki| {
                partial_at
                    .iter()
                    .find(|(_, bi, _)| bi[..3] == idx[..3] && bi[3] == ki)
                    .map(|&(t, _, p)| (t, p))
            })
            .collect();
        let count = sources.len() as u64;
        for j in 0..plan.sk {
            let (c0, c1) = range(j, chunk, e);
            if c0 == c1 {
                continue;
            }
            let width = c1 - c0;
            let rt = plan.tile(lw.target, idx[0], idx[1], idx[2], j);
            let at = inbox.alloc(rt, width * count);
            for (i, &(st, sp)) in sources.iter().enumerate() {
                let src = lw.slice_begin(ptensor, st) + sp + c0;
                eb.copy_elems(lw, ptensor, src, width, inbox.tensor, rt, at + i as u64 * width);
            }
            // The output position of block element c0.
            let (bm, bn) = (mr.1 - mr.0, nr.1 - nr.0);
            let (gg, rem) = (c0 / (bm * bn), c0 % (bm * bn));
            let flat = (gr.0 + gg) * geo.m * geo.n + (mr.0 + rem / bn) * geo.n + nr.0 + rem % bn;
            let out_pos = lw.position(c, flat);
            let vertices = worker_slices(width, vw, nw)
                .into_iter()
                .enumerate()
                .map(|(w, (a, b))| Vertex {
                    worker: w as u8,
                    operands: vec![
                        Operand {
                            tensor: inbox.tensor,
                            offset: (at * ps) as u32,
                            len: (width * count) as u32,
                        },
                        Operand {
                            tensor: c,
                            offset: ((out_pos + a) * os) as u32,
                            len: (b - a) as u32,
                        },
                    ],
                    params: VertexParams::Block(BlockParams {
                        groups: 1,
                        count: count as u32,
                        width: width as u32,
                        col_begin: a as u32,
                        cols: (b - a) as u32,
                        scale: 1.0,
                    }),
                })
                .collect();
            tiles.push(TileWork {
                tile: rt,
                groups: vec![VertexGroup {
                    codelet: Codelet::Reduce {
                        op: ReduceOp::Sum,
                        input: partials,
                        acc: partials,
                        output,
                    },
                    vertices,
                }],
                cycles: 0,
            });
        }
    }
    inbox.finish(lw);
    merge_tiles(&mut tiles);
    lw.superstep(&format!("{prefix}/reduce"), Some(id), eb.finish(), tiles);
}

/// Merges work entries of the same tile (their groups run one after the other).
pub(crate) fn merge_tiles(tiles: &mut Vec<TileWork>) {
    tiles.sort_by_key(|t| t.tile);
    let mut out: Vec<TileWork> = Vec::with_capacity(tiles.len());
    for t in tiles.drain(..) {
        match out.last_mut() {
            Some(last) if last.tile == t.tile => last.groups.extend(t.groups),
            _ => out.push(t),
        }
    }
    *tiles = out;
}

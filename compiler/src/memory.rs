//! The memory plan: byte offsets of every tensor slice in its tile's memory, bytes per tile by
//! category, liveness over program steps, and the out-of-memory verdict.
//!
//! Layout of a tile's data region (from byte 0, every allocation aligned to 8 bytes for
//! 64-bit loads): variables, constants and host-stream buffers (always live, never shared),
//! then temporaries: a temporary is live from the first to the last step that touches it
//! (steps in program order, a `Repeat` body counted once), and two share bytes only when
//! their live ranges are disjoint; [`place`] gives each its offset, by the lower top of a
//! linear scan over program steps and a packing of the long-lived and large first. Vertex
//! state and code (codelets, control code, exchange code: [`exchange_code`]) are accounted
//! after the data region; the simulator does not materialise them.
//!
//! Out of memory is a result, not an error: the plan marks `oom`, lists the tiles over
//! capacity, and names the worst tiles with their largest tensors and the temporaries live
//! at the step where their temporaries reach their top.

use crate::codelets::Codelet;
use crate::error::CompileError;
use crate::executable::{ComputeSet, Exchange, ProgramStep, Tensor, TensorId, TensorKind};
use crate::target::Target;
use crate::vertex_state::{vertex_state_bytes, REDUCE_VERTEX_STATE_BYTES};
pub use ipusim_exe::memory::{MemoryPlan, TensorBytes, TileMemory, TilePeak, Usage, WorstTile};
use ipusim_exe::slices::{find_tile, SliceLookup};
use ipusim_exe::system::System;
use ipusim_exe::system::TileId;
use ipusim_exe::workers;
use rayon::prelude::*;
use std::collections::BTreeSet;

mod exchange_code;
mod place;

use place::{align, place_temporaries, Request};

/// Control code per compute set on a tile (a call and a sync; not found, chosen).
const CONTROL_CODE_BYTES: u64 = 24;

/// The codelets and vertex state of one compute set: its distinct codelets' code keys and
/// bytes, and each tile's vertex state and codelets (indices into them).
struct SetCode {
    keys: Vec<std::borrow::Cow<'static, str>>,
    bytes: Vec<u64>,
    tiles: Vec<(u64, Vec<usize>)>,
}

/// Vertex state of one tile's vertex group. A codelet whose PopLibs vertex is one per tile
/// ([`crate::codelets::Codelet::is_multi_vertex`]) holds one vertex's state plus, for every
/// further operand region, a 4-byte pointer per operand and the region's 4-byte length (a 2D
/// vertex's region lists: lib/popops/codelets/asm/binaryOps2D.S holds pointers to the lists
/// of `in1`, `in2` and `out` regions, `out`'s with their lengths);
/// a worker's vertex whose operands continue the previous one's (the next elements, the
/// same shared operand, or an overlapping or adjacent part of it, as workers read a staged
/// broadcast input) is the same region, split among the workers by the vertex itself.
/// Other codelets hold the state of each vertex, and a block vertex its workers split
/// ([`ipusim_exe::workers::worker_parts`]) the state of a vertex per worker's part, as
/// PopLibs gives each worker's part of a reduction its own vertex; a `Reduce` vertex is
/// PopLibs' strided reduce ([`REDUCE_VERTEX_STATE_BYTES`]).
fn group_state_bytes(
    target: &Target,
    tensors: &[Tensor],
    g: &crate::executable::VertexGroup,
) -> u64 {
    let each = |v: &crate::executable::Vertex| vertex_state_bytes(v.operands.len(), &v.params);
    if !g.codelet.is_multi_vertex() {
        return g
            .vertices
            .iter()
            .map(|v| {
                let state = match g.codelet {
                    Codelet::Reduce { .. } => REDUCE_VERTEX_STATE_BYTES,
                    _ => u64::from(each(v)),
                };
                workers::worker_parts(target, &g.codelet, v) * state
            })
            .sum();
    }
    let continues = |prev: &crate::executable::Operand, op: &crate::executable::Operand| {
        let es = tensors
            .get(op.tensor.0 as usize)
            .map_or(0, |t| t.dtype.size_bytes() as u64);
        let prev_end = u64::from(prev.offset) + u64::from(prev.len) * es;
        op.tensor == prev.tensor
            && u64::from(op.offset) >= u64::from(prev.offset)
            && u64::from(op.offset) <= prev_end
    };
    let mut bytes = g.vertices.iter().map(each).max().map_or(0, u64::from);
    for w in g.vertices.windows(2) {
        let same_region = w[0].operands.len() == w[1].operands.len()
            && w[0]
                .operands
                .iter()
                .zip(&w[1].operands)
                .all(|(a, b)| continues(a, b));
        if !same_region {
            bytes += 4 * w[1].operands.len() as u64 + 4;
        }
    }
    bytes
}

/// One tile's allocations ([`plan`]): its bytes by category and the offset of every slice
/// on it.
#[derive(Default)]
struct TilePlacement {
    variables: u64,
    constants: u64,
    exchange_buffers: u64,
    temporaries: u64,
    always_live: u64,
    /// The step whose temporary last raised the temporaries' top.
    peak_step: Option<u32>,
    /// (flat slice index, offset), the offset [`OFF_TOP`] when it is 4 GiB or more.
    offsets: Vec<(u32, u32)>,
}

/// A slice offset that does not fit a 32-bit tile address (never a real offset: offsets are
/// aligned).
const OFF_TOP: u32 = u32::MAX;

/// Tensor indices in order of first step (a tensor never used counts as step 0, as its
/// requests do), ties by index.
fn by_first_step(usage: &[Usage], steps: usize) -> Vec<usize> {
    ipusim_exe::radix::order_by_small_key(usage.len(), |ti| {
        (usage[ti].first.unwrap_or(0) as usize).min(steps)
    })
}

/// Plans the memory of the lowered program: assigns every slice's and interval's byte offset
/// and returns the plan.
pub(crate) fn plan(
    target: &Target,
    system: &System,
    tensors: &mut [Tensor],
    usage: &[Usage],
    compute_sets: &[ComputeSet],
    exchanges: &[Exchange],
    program_steps: &[ProgramStep],
) -> Result<MemoryPlan, CompileError> {
    let steps = program_steps.len();
    // Per-tile tables over every IPU's tiles, indexed by `TileId::dense`.
    let ntiles = target.tiles as usize * system.ipus as usize;
    let tile_id = |i: usize| {
        TileId::new(
            (i / target.tiles as usize) as u32,
            (i % target.tiles as usize) as u32,
        )
    };
    let dense = |t: TileId| t.dense(target.tiles);
    let mut mem: Vec<TileMemory> = (0..ntiles)
        .map(|t| TileMemory {
            tile: tile_id(t),
            ..TileMemory::default()
        })
        .collect();
    // Each tile's requests counted first, so that its lists are allocated once at their
    // size (a large CNN has millions of slices).
    let (mut n_persistent, mut n_temps) = (vec![0usize; ntiles], vec![0usize; ntiles]);
    for t in tensors.iter() {
        let counts = if t.kind.always_live() {
            &mut n_persistent
        } else {
            &mut n_temps
        };
        for s in &t.slices {
            let Some(c) = counts.get_mut(dense(s.tile)) else {
                return Err(CompileError::Verify {
                    pass: "memory plan",
                    message: format!(
                        "tensor '{}' is mapped to tile {} of {}",
                        t.name, s.tile, ntiles
                    ),
                });
            };
            *c += 1;
        }
    }
    let mut persistent: Vec<Vec<(u32, u32, u64)>> =
        n_persistent.into_iter().map(Vec::with_capacity).collect();
    let mut temps: Vec<Vec<Request>> = n_temps.into_iter().map(Vec::with_capacity).collect();
    let mut liveness = vec![0i128; steps + 1];
    // Tensors visited by first step, then index, so that each tile's requests are listed in
    // the order its placement takes them (by first use, tensor and slice) and need no sort.
    for ti in by_first_step(&usage[..tensors.len()], steps) {
        let t = &tensors[ti];
        let es = t.dtype.size_bytes() as u64;
        let always = t.kind.always_live();
        let u = usage[ti];
        let (first, last) = (u.first.unwrap_or(0), u.last.unwrap_or(0));
        let mut total = 0u64;
        for (si, s) in t.slices.iter().enumerate() {
            let size = s.num_elements() * es;
            total += size;
            let tile = dense(s.tile);
            if always {
                persistent[tile].push((ti as u32, si as u32, size));
            } else {
                temps[tile].push(Request {
                    tensor: ti as u32,
                    slice: si as u32,
                    size,
                    first,
                    last,
                });
            }
        }
        if !always && total > 0 && steps > 0 {
            let (a, b) = (first as usize, (last as usize).min(steps - 1));
            liveness[a] += total as i128;
            liveness[b + 1] -= total as i128;
        }
    }
    // Every slice's index in one flat table: its tensor's first slice's index plus its own.
    let mut first_slice = Vec::with_capacity(tensors.len());
    let mut n_slices = 0usize;
    for t in tensors.iter() {
        first_slice.push(n_slices as u32);
        n_slices += t.slices.len();
    }
    if n_slices >= u32::MAX as usize {
        return Err(CompileError::Verify {
            pass: "memory plan",
            message: format!("{n_slices} tensor slices: more than 2^32"),
        });
    }
    let flat = |ti: u32, si: u32| first_slice[ti as usize] + si;
    let at32 = |off: u64| u32::try_from(off).unwrap_or(OFF_TOP);
    // Each tile's allocations on the host's cores: its persistent tensors packed from
    // address 0, then a linear scan of its temporaries above them.
    let tensors_ro: &[Tensor] = tensors;
    let placed: Vec<TilePlacement> = persistent
        .into_par_iter()
        .zip(temps.into_par_iter())
        .map(|(mut persistent, mut reqs)| {
            let mut p = TilePlacement {
                offsets: Vec::with_capacity(persistent.len() + reqs.len()),
                ..TilePlacement::default()
            };
            let mut at = 0u64;
            persistent.sort_by_key(|&(ti, _, _)| {
                let order = match tensors_ro[ti as usize].kind {
                    TensorKind::Variable => 0,
                    TensorKind::Constant => 1,
                    _ => 2,
                };
                (order, ti)
            });
            for &(ti, si, size) in &persistent {
                p.offsets.push((flat(ti, si), at32(at)));
                // Alignment padding counts with the allocation it follows.
                let padded = align(at + size) - at;
                match tensors_ro[ti as usize].kind {
                    TensorKind::Variable => p.variables += padded,
                    TensorKind::Constant => p.constants += padded,
                    _ => p.exchange_buffers += padded,
                }
                at += padded;
            }
            let base = at;
            p.always_live = base;
            let (offsets, top, peak) = place_temporaries(&mut reqs, base);
            p.peak_step = peak;
            for (r, off) in reqs.iter().zip(offsets) {
                p.offsets.push((flat(r.tensor, r.slice), at32(off)));
            }
            p.temporaries = top - base;
            p
        })
        .collect();
    // Every slice's offset at its flat index (every slice is placed exactly once, on its
    // tile).
    let mut offsets = vec![0u32; n_slices];
    let mut always_live = 0u64;
    let mut peaks = Vec::with_capacity(ntiles);
    for (m, p) in mem.iter_mut().zip(placed) {
        peaks.push(p.peak_step);
        m.variables = p.variables;
        m.constants = p.constants;
        m.exchange_buffers = p.exchange_buffers;
        m.temporaries = p.temporaries;
        always_live += p.always_live;
        for (i, off) in p.offsets {
            offsets[i as usize] = off;
        }
    }
    // Assign offsets, each tensor's slices in slice (= tile) order.
    for (ti, t) in tensors.iter_mut().enumerate() {
        let es = t.dtype.size_bytes() as u64;
        let first = first_slice[ti] as usize;
        let offs = &offsets[first..first + t.slices.len()];
        for (s, &off) in t.slices.iter_mut().zip(offs) {
            let end = u64::from(off) + s.num_elements() * es;
            if off == OFF_TOP || end > u32::MAX as u64 {
                let need = if off == OFF_TOP {
                    "more than 2^32".to_string()
                } else {
                    end.to_string()
                };
                return Err(CompileError::TooLarge {
                    node: t.name.clone(),
                    what: format!(
                        "tile {} would need {need} bytes, beyond 32-bit tile addresses",
                        s.tile
                    ),
                });
            }
            s.offset = off;
            let mut pos = u64::from(off);
            for iv in &mut s.intervals {
                iv.offset = pos as u32;
                pos += u64::from(iv.len) * es;
            }
        }
    }
    // Vertex state, code. A recomputed node's compute sets and exchanges (named
    // `recompute/...`) are charged only the control code of a call: they run the forward's
    // vertices and exchange code again, as Poplar's RecomputeThenBackpropagate calls the
    // forward's program (TF-IPU guide §6.6); their tensors are temporaries planned above.
    let recomputed = |name: &str| name.starts_with(ipusim_ir::recompute::PREFIX);
    // Each tile's vertex state and codelets in each compute set, on the host's cores (a
    // recomputed compute set has none of its own). A compute set's distinct codelets are
    // named once (a fused codelet's name is its whole expression), each tile's by index.
    let tensors_ro: &[Tensor] = tensors;
    let per_cs: Vec<SetCode> = compute_sets
        .par_iter()
        .map(|cs| {
            let mut distinct: Vec<&Codelet> = Vec::new();
            let mut tiles = Vec::new();
            if !recomputed(&cs.name) {
                for tw in &cs.tiles {
                    let state = tw
                        .groups
                        .iter()
                        .map(|g| group_state_bytes(target, tensors_ro, g))
                        .sum();
                    let used = tw
                        .groups
                        .iter()
                        .map(|g| match distinct.iter().position(|&c| *c == g.codelet) {
                            Some(i) => i,
                            None => {
                                distinct.push(&g.codelet);
                                distinct.len() - 1
                            }
                        })
                        .collect();
                    tiles.push((state, used));
                }
            }
            SetCode {
                keys: distinct.iter().map(|c| c.code_key()).collect(),
                bytes: distinct
                    .iter()
                    .map(|c| c.info().code_bytes as u64)
                    .collect(),
                tiles,
            }
        })
        .collect();
    // Code of each codelet once per tile: keys numbered over the program.
    let mut key_ids: std::collections::HashMap<std::borrow::Cow<'static, str>, usize> =
        std::collections::HashMap::new();
    let mut codelets: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); ntiles];
    for (cs, code) in compute_sets.iter().zip(per_cs) {
        let ids: Vec<usize> = code
            .keys
            .into_iter()
            .map(|k| {
                let next = key_ids.len();
                *key_ids.entry(k).or_insert(next)
            })
            .collect();
        for (ti, tw) in cs.tiles.iter().enumerate() {
            let tile = dense(tw.tile);
            if tile >= ntiles {
                continue;
            }
            mem[tile].control_code += CONTROL_CODE_BYTES;
            let Some((state, used)) = code.tiles.get(ti) else {
                continue;
            };
            for &u in used {
                if codelets[tile].insert(ids[u]) {
                    mem[tile].vertex_code += code.bytes[u];
                }
            }
            mem[tile].vertex_state += state;
        }
    }
    // Exchange code: each tile's instructions in the exchanges ([`exchange_code`]).
    let instructions = exchange_code::instructions(exchanges, target.tiles, ntiles, recomputed);
    for (m, (internal, global)) in mem.iter_mut().zip(instructions) {
        m.internal_exchange_code += internal * exchange_code::INSTRUCTION_BYTES;
        m.global_exchange_code += global * exchange_code::INSTRUCTION_BYTES;
    }
    let capacity = target.bytes_per_tile as u64;
    let mut oom_tiles = Vec::new();
    for m in &mut mem {
        m.code = m.code_types_sum();
        m.total = m.variables
            + m.constants
            + m.exchange_buffers
            + m.temporaries
            + m.vertex_state
            + m.code;
        if m.total > capacity {
            oom_tiles.push(m.tile);
        }
    }
    let mut order: Vec<usize> = (0..ntiles).collect();
    order.sort_by_key(|&t| (std::cmp::Reverse(mem[t].total), t));
    let worst_tiles = order
        .iter()
        .take(5)
        .filter(|&&t| mem[t].total > 0)
        .map(|&t| {
            let mut largest: Vec<TensorBytes> = tensors
                .iter()
                .enumerate()
                .filter_map(|(ti, x)| {
                    x.slice_on(tile_id(t)).map(|s| TensorBytes {
                        tensor: TensorId(ti as u32),
                        name: x.name.clone(),
                        bytes: s.num_elements() * x.dtype.size_bytes() as u64,
                    })
                })
                .collect();
            let peak = peaks[t].map(|step| {
                // The temporaries live at the peak step, their bytes on this tile.
                let mut live: Vec<TensorBytes> = largest
                    .iter()
                    .filter(|b| {
                        let u = usage[b.tensor.0 as usize];
                        !tensors[b.tensor.0 as usize].kind.always_live()
                            && u.first.is_some_and(|f| f <= step)
                            && u.last.is_some_and(|l| l >= step)
                    })
                    .cloned()
                    .collect();
                live.sort_by_key(|b| (std::cmp::Reverse(b.bytes), b.tensor));
                let live_bytes = live.iter().map(|b| b.bytes).sum();
                live.truncate(5);
                TilePeak {
                    step,
                    name: program_steps
                        .get(step as usize)
                        .map_or_else(String::new, |s| s.name.clone()),
                    live_bytes,
                    live,
                }
            });
            largest.sort_by_key(|b| (std::cmp::Reverse(b.bytes), b.tensor));
            largest.truncate(5);
            WorstTile {
                tile: tile_id(t),
                bytes: mem[t].total,
                largest,
                categories: mem[t].clone(),
                peak,
            }
        })
        .collect();
    let mut live = Vec::with_capacity(steps);
    let mut run = 0i128;
    for d in liveness.iter().take(steps) {
        run += d;
        live.push(run.max(0) as u64);
    }
    Ok(MemoryPlan {
        bytes_per_tile_capacity: capacity,
        max_tile_bytes: mem.iter().map(|m| m.total).max().unwrap_or(0),
        total_bytes: mem.iter().map(|m| m.total).sum(),
        oom: !oom_tiles.is_empty(),
        oom_tiles,
        worst_tiles,
        always_live_bytes: always_live,
        liveness: live,
        tiles: mem,
    })
}

/// Turns slice-relative operand and copy offsets into absolute tile addresses, each range
/// checked against its slice's bytes as it is moved (so that the compiler's final check,
/// `verify::executable_resolved`, need not walk them again: an operand or copy endpoint
/// outside its slice is an error here, naming the compute set or exchange).
pub(crate) fn resolve_offsets(
    tensors: &[Tensor],
    compute_sets: &mut [ComputeSet],
    exchanges: &mut [Exchange],
) -> Result<(), CompileError> {
    // (tile, byte offset, bytes) of every slice, dense, for the searches below.
    let slices: Vec<Vec<(TileId, u64, u64)>> = tensors
        .par_iter()
        .map(|t| {
            let es = t.dtype.size_bytes() as u64;
            let at = |s: &ipusim_exe::executable::TileSlice| {
                (s.tile, s.offset as u64, s.num_elements() * es)
            };
            t.slices.iter().map(at).collect()
        })
        .collect();
    let fail = |message: String| CompileError::Verify {
        pass: "offset resolution",
        message,
    };
    // Relative bytes `[off, off + bytes)` of tensor `t`'s slice on `tile`, made absolute.
    let resolve = |lookup: &mut SliceLookup,
                   (t, tile): (TensorId, TileId),
                   (off, bytes): (u32, u64),
                   what: &str|
     -> Result<u32, CompileError> {
        let name = || tensors.get(t.0 as usize).map_or("?", |t| t.name.as_str());
        let list = slices
            .get(t.0 as usize)
            .ok_or_else(|| fail(format!("{what}: names tensor {} of {}", t.0, tensors.len())))?;
        let (_, base, size) = lookup
            .find(t, tile, || find_tile(list, tile, |s| s.0))
            .map(|i| list[i])
            .ok_or_else(|| {
                fail(format!(
                    "{what}: tensor '{}' has no slice on tile {tile}",
                    name()
                ))
            })?;
        if u64::from(off) + bytes > size {
            return Err(fail(format!(
                "{what}: bytes [{off}, {}) of tensor '{}' on tile {tile} are outside its \
                 {size}-byte slice",
                u64::from(off) + bytes,
                name()
            )));
        }
        u32::try_from(u64::from(off) + base).map_err(|_| CompileError::TooLarge {
            node: what.to_string(),
            what: "an address beyond 32-bit tile addresses".into(),
        })
    };
    // Compute sets and exchanges on the host's cores; the first failure in program order is
    // reported.
    let resolved: Vec<Result<(), CompileError>> = compute_sets
        .par_iter_mut()
        .map(|cs| {
            let mut lookup = SliceLookup::new();
            for tw in &mut cs.tiles {
                for g in &mut tw.groups {
                    for v in &mut g.vertices {
                        for o in &mut v.operands {
                            let es = tensors
                                .get(o.tensor.0 as usize)
                                .map_or(0, |t| t.dtype.size_bytes() as u64);
                            let bytes = u64::from(o.len) * es;
                            o.offset = resolve(
                                &mut lookup,
                                (o.tensor, tw.tile),
                                (o.offset, bytes),
                                &cs.name,
                            )?;
                        }
                    }
                }
            }
            Ok(())
        })
        .collect();
    resolved.into_iter().collect::<Result<(), _>>()?;
    let resolved: Vec<Result<(), CompileError>> = exchanges
        .par_iter_mut()
        .map(|ex| {
            let mut lookup = SliceLookup::new();
            for c in &mut ex.copies {
                let bytes = u64::from(c.bytes);
                c.src_offset = resolve(
                    &mut lookup,
                    (c.src_tensor, c.src_tile),
                    (c.src_offset, bytes),
                    &ex.name,
                )?;
                for d in &mut c.dsts {
                    d.offset = resolve(
                        &mut lookup,
                        (c.dst_tensor, d.tile),
                        (d.offset, bytes),
                        &ex.name,
                    )?;
                }
            }
            Ok(())
        })
        .collect();
    resolved.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codelets::{Access, BlockParams, MapParams, ReduceOp, VertexParams};
    use crate::executable::{Operand, Operands, TensorKind, Vertex, VertexGroup};
    use ipusim_ir::{BinaryOp, DType, Shape};

    fn tensor(dtype: DType) -> Tensor {
        Tensor {
            name: "t".into(),
            node: None,
            kind: TensorKind::Activation,
            dtype,
            shape: Shape(vec![1024]),
            slices: Vec::new(),
        }
    }

    fn operand(tensor: u32, offset: u32, len: u32) -> Operand {
        Operand {
            tensor: TensorId(tensor),
            offset,
            len,
        }
    }

    /// Tensors come in order of first step (unused ones at step 0, a step past the end
    /// with the last), ties by index, as a stable sort would give them.
    #[test]
    fn tensors_are_visited_by_first_step_then_index() {
        let firsts = [
            Some(3),
            None,
            Some(0),
            Some(3),
            Some(9),
            Some(1),
            Some(0),
            Some(2),
        ];
        let usage: Vec<Usage> = firsts
            .iter()
            .map(|&first| Usage { first, last: first })
            .collect();
        let steps = 5;
        let mut want: Vec<usize> = (0..usage.len()).collect();
        want.sort_by_key(|&ti| firsts[ti].unwrap_or(0).min(steps as u32));
        assert_eq!(by_first_step(&usage, steps), want);
        assert_eq!(by_first_step(&usage, steps), [1, 2, 6, 5, 7, 0, 3, 4]);
    }

    /// The offset resolution moves each operand and copy endpoint by its slice's base and
    /// refuses one outside its slice (the compiler's final check relies on it), naming the
    /// compute set or exchange and the tensor.
    #[test]
    fn offsets_resolve_by_the_slice_base_and_stay_inside_the_slice() {
        use crate::executable::{ByteCopy, CopyDst, TileWork};
        use ipusim_exe::executable::{Interval, TileSlice};
        // Two f32 tensors of 16 elements, 8 on each of tiles 0 and 1, at bytes 64 and 128.
        let t = |name: &str| {
            let mut t = tensor(DType::F32);
            t.name = name.into();
            t.shape = Shape(vec![16]);
            t.slices = (0..2u64)
                .map(|k| TileSlice {
                    tile: TileId::on_first_ipu(k as u32),
                    offset: 64 * (k as u32 + 1),
                    intervals: [Interval::new(8 * k, 8 * k + 8, 0)].into_iter().collect(),
                })
                .collect();
            t
        };
        let tensors = vec![t("a"), t("b")];
        let vertex = |len: u32| Vertex {
            worker: 0,
            operands: Operands::from_iter([operand(0, 4, len), operand(1, 0, 8)]),
            params: VertexParams::Block(BlockParams::new(1, 4, 4, (0, 4))),
        };
        let cs = |len: u32| ComputeSet {
            name: "cs".into(),
            node: None,
            tiles: vec![TileWork {
                tile: TileId::on_first_ipu(1),
                groups: vec![VertexGroup {
                    codelet: Codelet::Reduce {
                        op: ReduceOp::Sum,
                        input: DType::F32,
                        acc: DType::F32,
                        output: DType::F32,
                    },
                    vertices: vec![vertex(len)],
                }],
                cycles: 0,
            }],
            cycles: 0,
        };
        let ex = |bytes: u32| Exchange {
            name: "ex".into(),
            node: None,
            copies: vec![ByteCopy {
                src_tensor: TensorId(0),
                src_tile: TileId::on_first_ipu(0),
                src_offset: 8,
                dst_tensor: TensorId(1),
                bytes,
                dsts: [CopyDst {
                    tile: TileId::on_first_ipu(1),
                    offset: 16,
                }]
                .into_iter()
                .collect(),
            }],
            cycles: 0,
        };
        // Inside: each offset moved by its slice's base (tile 1's 128, tile 0's 64).
        let (mut sets, mut exs) = (vec![cs(7)], vec![ex(16)]);
        resolve_offsets(&tensors, &mut sets, &mut exs).unwrap();
        let ops = &sets[0].tiles[0].groups[0].vertices[0].operands;
        assert_eq!((ops[0].offset, ops[1].offset), (132, 128));
        assert_eq!(exs[0].copies[0].src_offset, 72);
        assert_eq!(exs[0].copies[0].dsts[0].offset, 144);
        // An operand one element past its 32-byte slice, and a copy one byte past.
        let e = resolve_offsets(&tensors, &mut [cs(8)], &mut []).unwrap_err();
        assert!(
            e.to_string()
                .contains("cs: bytes [4, 36) of tensor 'a' on tile"),
            "{e}"
        );
        let e = resolve_offsets(&tensors, &mut [], &mut [ex(17)]).unwrap_err();
        assert!(
            e.to_string().contains("ex: bytes [16, 33) of tensor 'b'"),
            "{e}"
        );
    }

    #[test]
    fn a_reduce_vertex_holds_strided_reduce_state() {
        let tensors = vec![tensor(DType::F32), tensor(DType::F32)];
        let vertex = |w: u8| Vertex {
            worker: w,
            operands: Operands::from_iter([operand(0, 64 * w as u32, 16), operand(1, 0, 4)]),
            params: VertexParams::Block(BlockParams::new(1, 4, 4, (0, 4))),
        };
        let g = VertexGroup {
            codelet: Codelet::Reduce {
                op: ReduceOp::Sum,
                input: DType::F32,
                acc: DType::F32,
                output: DType::F32,
            },
            vertices: (0..3).map(vertex).collect(),
        };
        assert_eq!(group_state_bytes(&Target::mk2(), &tensors, &g), 3 * 22);
        // A vertex its workers split holds the state of a vertex per worker's part: 4
        // columns of f32 in whole vectors of 2 are two parts.
        let split = VertexGroup {
            vertices: vec![vertex(ipusim_exe::workers::ALL_WORKERS)],
            ..g
        };
        assert_eq!(group_state_bytes(&Target::mk2(), &tensors, &split), 2 * 22);
    }

    #[test]
    fn a_multi_vertex_charges_each_further_region() {
        let tensors = vec![tensor(DType::F16); 3];
        let map = || {
            VertexParams::Map(MapParams {
                out_begin: None,
                inputs: [Access::Aligned, Access::Aligned].into_iter().collect(),
                scale: 1.0,
            })
        };
        // Two workers on the consecutive elements of one region, then a separate region.
        let v = |w: u8, off: u32| Vertex {
            worker: w,
            operands: Operands::from_iter([
                operand(0, off, 8),
                operand(1, off, 8),
                operand(2, off, 8),
            ]),
            params: map(),
        };
        let g = VertexGroup {
            codelet: Codelet::Binary {
                op: BinaryOp::Add,
                dtype: DType::F16,
            },
            vertices: vec![v(0, 0), v(1, 16), v(2, 512)],
        };
        // One binaryOps1D vertex (16 bytes) and one further region: a pointer per operand and
        // its length.
        assert_eq!(
            group_state_bytes(&Target::mk2(), &tensors, &g),
            16 + 3 * 4 + 4
        );
    }
}

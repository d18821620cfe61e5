//! The checks the compiler runs between its passes (cranelift's idea), on what is not yet a
//! finished executable: the lowered program (operand offsets still slice-relative) and the
//! memory plan. Each failure names the tensor, tile, vertex or step at fault.
//!
//! After lowering:
//! 1. every tensor is mapped: its intervals are ascending, disjoint, on existing tiles, and
//!    together cover `[0, elements)` exactly once;
//! 2. every vertex runs on a worker context of the target, and every operand and copy names a
//!    tensor of the table (that their bytes lie inside their tensors' slices is checked where
//!    the offsets are resolved, after the memory plan);
//! 3. in program order, every tensor is written (or is a variable or constant) before a
//!    vertex, an exchange or an outfeed reads it.
//!
//! After the memory plan:
//! 4. every slice fits in 32-bit tile addresses and temporaries whose live ranges overlap do
//!    not overlap in bytes;
//! 5. per tile, the categories add up to the total, and the data region is within the total.

use super::overlap::{first_conflict, Alloc, ALWAYS};
use crate::error::CompileError;
use crate::executable::{Executable, StepKind, Tensor, TensorId, TensorKind, TileSlice};
use crate::memory::Usage;
use rayon::prelude::*;

fn fail(pass: &'static str, message: String) -> CompileError {
    CompileError::Verify { pass, message }
}

/// Checks 1-3 on the lowered program (offsets still slice-relative).
pub fn lowered(low: &Executable) -> Result<(), CompileError> {
    const PASS: &str = "lowering";
    // Check 1 is the verifier's invariant 2, written once in `super`.
    if let Some(e) = super::mapping_errors(low).into_iter().next() {
        return Err(fail(PASS, e.to_string()));
    }
    // Every compute set and exchange checked on the host's cores, beside the walk of check
    // 3 (one thread's work); the first violation in program order is reported, and a
    // violation of check 2 before one of check 3.
    let (named, order) = rayon::join(|| workers_and_tensors(low), || written_before_read(low));
    named.and(order)
}

/// Check 2: every vertex on a worker of the target, and every operand and copy naming a
/// tensor of the table. Their bytes are checked against their slices where the offsets are
/// resolved after the memory plan (the compiler's `resolve_offsets`, which runs whether or
/// not the verifier does): the same slice lookups here would be a second pass over every
/// operand and every copy destination (tens of millions on a large CNN), and nothing between
/// the two reads an operand's or a copy's bytes.
fn workers_and_tensors(low: &Executable) -> Result<(), CompileError> {
    const PASS: &str = "lowering";
    let target = &low.target;
    let n = low.tensors.len();
    let unknown = |t: TensorId| format!("unknown tensor {} of {n}", t.0);
    let vertex_error = low.compute_sets.par_iter().find_map_first(|cs| {
        for tw in &cs.tiles {
            for g in &tw.groups {
                for (vi, v) in g.vertices.iter().enumerate() {
                    let at = || format!("compute set '{}', tile {}, vertex {vi}", cs.name, tw.tile);
                    if !crate::workers::may_run_on(&g.codelet, v, target.worker_contexts) {
                        return Some(fail(
                            PASS,
                            format!(
                                "{}: worker {} of {}",
                                at(),
                                v.worker,
                                target.worker_contexts
                            ),
                        ));
                    }
                    if let Some(o) = v.operands.iter().find(|o| o.tensor.0 as usize >= n) {
                        return Some(fail(
                            PASS,
                            format!(
                                "{} ({}): {}",
                                at(),
                                g.codelet.full_name(),
                                unknown(o.tensor)
                            ),
                        ));
                    }
                }
            }
        }
        None
    });
    if let Some(e) = vertex_error {
        return Err(e);
    }
    let copy_error = low.exchanges.par_iter().find_map_first(|ex| {
        ex.copies.iter().find_map(|c| {
            [c.src_tensor, c.dst_tensor]
                .into_iter()
                .find(|t| t.0 as usize >= n)
                .map(|t| fail(PASS, format!("exchange '{}': {}", ex.name, unknown(t))))
        })
    });
    match copy_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Check 3: walk the program steps in order.
fn written_before_read(low: &Executable) -> Result<(), CompileError> {
    const PASS: &str = "lowering";
    let mut written: Vec<bool> = low
        .tensors
        .iter()
        .map(|t| {
            matches!(t.kind, TensorKind::Variable | TensorKind::Constant) || t.num_elements() == 0
        })
        .collect();
    // A tensor id outside the table is check 2's to report (it runs beside this walk):
    // here it counts as written.
    let seen = |w: &[bool], t: TensorId| w.get(t.0 as usize).copied().unwrap_or(true);
    let mark = |w: &mut [bool], t: TensorId| {
        if let Some(x) = w.get_mut(t.0 as usize) {
            *x = true;
        }
    };
    let name = |t: TensorId| low.tensors[t.0 as usize].name.clone();
    for step in &low.steps {
        match step.kind {
            StepKind::StreamCopy(s) => {
                let stream = &low.streams[s.0 as usize];
                let t = stream.tensor;
                match stream.direction {
                    crate::executable::StreamDirection::HostToDevice => mark(&mut written, t),
                    crate::executable::StreamDirection::DeviceToHost => {
                        if !seen(&written, t) {
                            return Err(fail(
                                PASS,
                                format!(
                                    "outfeed '{}' reads tensor '{}' before it is written",
                                    stream.name,
                                    name(t)
                                ),
                            ));
                        }
                    }
                }
            }
            StepKind::RemoteCopy { tensor, store } => {
                // A load writes the tile copy; a store reads it.
                if !store {
                    mark(&mut written, tensor);
                } else if !seen(&written, tensor) {
                    return Err(fail(
                        PASS,
                        format!(
                            "a remote-buffer store reads tensor '{}' before it is written",
                            name(tensor)
                        ),
                    ));
                }
            }
            StepKind::CrossReplica(t) | StepKind::CrossReplicaTo { src: t, .. } => {
                if let StepKind::CrossReplicaTo { dst, .. } = step.kind {
                    mark(&mut written, dst);
                }
                if !seen(&written, t) {
                    return Err(fail(
                        PASS,
                        format!(
                            "a cross-replica collective reads tensor '{}' before it is written",
                            name(t)
                        ),
                    ));
                }
            }
            StepKind::Exchange(e) | StepKind::IpuCopy(e) => {
                let ex = &low.exchanges[e.0 as usize];
                for c in &ex.copies {
                    if !seen(&written, c.src_tensor) {
                        return Err(fail(
                            PASS,
                            format!(
                                "exchange '{}' reads tensor '{}' (tile {}) before it is written",
                                ex.name,
                                name(c.src_tensor),
                                c.src_tile
                            ),
                        ));
                    }
                }
                for c in &ex.copies {
                    mark(&mut written, c.dst_tensor);
                }
            }
            StepKind::Execute(c) => {
                let cs = &low.compute_sets[c.0 as usize];
                for tw in &cs.tiles {
                    for g in &tw.groups {
                        for v in &g.vertices {
                            let (out, ins) = match v.operands.split_last() {
                                Some(x) => x,
                                None => continue,
                            };
                            for o in ins {
                                if !seen(&written, o.tensor) && o.tensor != out.tensor {
                                    return Err(fail(PASS, format!("compute set '{}' on tile {} reads tensor '{}' before it is written", cs.name, tw.tile, name(o.tensor))));
                                }
                            }
                        }
                    }
                }
                for tw in &cs.tiles {
                    for g in &tw.groups {
                        for v in &g.vertices {
                            if let Some(out) = v.operands.last() {
                                mark(&mut written, out.tensor);
                            }
                        }
                    }
                }
            }
        }
    }
    // The program tree lists exactly the steps.
    let leaves = low.program.leaves().len();
    if leaves != low.steps.len() {
        return Err(fail(
            PASS,
            format!(
                "program has {leaves} leaves but {} steps are listed",
                low.steps.len()
            ),
        ));
    }
    Ok(())
}

/// Tensor indices by the first step they are live (0 for the always-live and the unused),
/// ties by index.
fn by_first_live_step(exe: &Executable, usage: &[Usage]) -> Vec<usize> {
    crate::radix::order_by_small_key(exe.tensors.len(), |ti| {
        if exe.tensors[ti].kind.always_live() {
            0
        } else {
            usage[ti].first.unwrap_or(0) as usize
        }
    })
}

/// Checks 4-5 on the planned executable.
pub fn planned(exe: &Executable, usage: &[Usage]) -> Result<(), CompileError> {
    const PASS: &str = "memory plan";
    let ntiles = exe.num_tiles();
    // Allocations per tile, in one flat table of per-tile runs (the plan of a large CNN has
    // millions of slices, and this pass runs last, at the compile's peak of host memory).
    let sized = |t: &Tensor, s: &TileSlice| s.num_elements() * t.dtype.size_bytes() as u64;
    let mut starts = vec![0usize; ntiles + 1];
    for t in &exe.tensors {
        for s in t.slices.iter().filter(|s| sized(t, s) > 0) {
            starts[exe.tile_index(s.tile) + 1] += 1;
        }
    }
    for i in 0..ntiles {
        starts[i + 1] += starts[i];
    }
    if exe.tensors.len() >= ALWAYS as usize {
        return Err(fail(
            PASS,
            format!("{} tensors: more than 2^31", exe.tensors.len()),
        ));
    }
    let mut table: Vec<Alloc> = vec![(0, 0, 0, 0, 0); starts[ntiles]];
    let mut fill = starts.clone();
    // Tensors visited in the order the overlap check takes them (the always-live ones at
    // step 0, the others by first step; ties by index), so that each tile's run is already
    // in that order.
    for ti in by_first_live_step(exe, usage) {
        let t = &exe.tensors[ti];
        let tag = if t.kind.always_live() { ALWAYS } else { 0 } | ti as u32;
        let u = usage[ti];
        for s in &t.slices {
            let size = sized(t, s);
            if size == 0 {
                continue;
            }
            let at = &mut fill[exe.tile_index(s.tile)];
            table[*at] = (
                s.offset,
                u64::from(s.offset) + size,
                u.first.unwrap_or(0),
                u.last.unwrap_or(0),
                tag,
            );
            *at += 1;
        }
    }
    // Every tile checked on the host's cores; the first violation in tile order is reported.
    let check_tile = |tile: usize| -> Option<CompileError> {
        let allocs: &[Alloc] = &table[starts[tile]..starts[tile + 1]];
        if let Some((a, b)) = first_conflict(allocs) {
            return Some(fail(
                PASS,
                format!(
                    "tile {tile}: tensors '{}' and '{}' share bytes while both live",
                    exe.tensors[(a & !ALWAYS) as usize].name,
                    exe.tensors[(b & !ALWAYS) as usize].name
                ),
            ));
        }
        let m = &exe.memory.tiles[tile];
        let sum = m.variables
            + m.constants
            + m.exchange_buffers
            + m.temporaries
            + m.vertex_state
            + m.code;
        if sum != m.total {
            return Some(fail(
                PASS,
                format!(
                    "tile {tile}: categories add up to {sum}, total says {}",
                    m.total
                ),
            ));
        }
        let code = m.code_types_sum();
        if code != m.code {
            return Some(fail(
                PASS,
                format!(
                    "tile {tile}: code types add up to {code}, code says {}",
                    m.code
                ),
            ));
        }
        let data_end = allocs.iter().map(|a| a.1).max().unwrap_or(0);
        if data_end > m.variables + m.constants + m.exchange_buffers + m.temporaries {
            return Some(fail(
                PASS,
                format!(
                    "tile {tile}: data ends at byte {data_end}, beyond the accounted data bytes"
                ),
            ));
        }
        None
    };
    match (0..ntiles).into_par_iter().find_map_first(check_tile) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

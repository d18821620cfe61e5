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

/// One allocation of a tile in [`planned`]'s table: (offset, end, first step, last step,
/// always live << 31 | tensor).
type Alloc = (u32, u64, u32, u32, u32);

/// The always-live bit of an [`Alloc`]'s tag.
const ALWAYS: u32 = 1 << 31;

/// The tags of two allocations of one tile that share bytes while both are live, if any:
/// an always-live allocation is live at every step, a transient one from its first step to
/// its last (inclusive). A sweep over first steps keeps the live allocations by offset,
/// retiring those whose last step has passed; each new allocation need only be checked
/// against its neighbours there, since the live ones never overlap (each was checked when
/// it joined). O(n log n) searches where the pairwise check was quadratic in the
/// temporaries that reuse one address range at different steps (thousands on a tile of a
/// large CNN); the live list is a sorted vector, as a tile has a few hundred live at once
/// (its insertions and removals move a few hundred bytes, cheaper than a tree's nodes).
fn first_conflict(allocs: &mut [Alloc]) -> Option<(u32, u32)> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let life = |a: &Alloc| {
        if a.4 & ALWAYS != 0 {
            (0, u32::MAX)
        } else {
            (a.2, a.3)
        }
    };
    allocs.sort_unstable_by_key(|a| (life(a).0, a.0, a.4));
    // Live allocations (offset, end, tag) by offset (distinct: they do not overlap and
    // none is empty); and their last steps, soonest first.
    let mut live: Vec<(u32, u64, u32)> = Vec::new();
    let mut retire: BinaryHeap<Reverse<(u32, u32)>> = BinaryHeap::new();
    for a in allocs.iter() {
        let (first, last) = life(a);
        while let Some(&Reverse((l, off))) = retire.peek() {
            if l >= first {
                break;
            }
            retire.pop();
            if let Ok(k) = live.binary_search_by_key(&off, |x| x.0) {
                live.remove(k);
            }
        }
        let pos = live.partition_point(|x| x.0 <= a.0);
        if let Some(&(_, end, tag)) = pos.checked_sub(1).map(|k| &live[k]) {
            if end > u64::from(a.0) {
                return Some((a.4, tag));
            }
        }
        if let Some(&(off, _, tag)) = live.get(pos) {
            if u64::from(off) < a.1 {
                return Some((a.4, tag));
            }
        }
        live.insert(pos, (a.0, a.1, a.4));
        retire.push(Reverse((last, a.0)));
    }
    None
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
    for (ti, t) in exe.tensors.iter().enumerate() {
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
    let mut per: Vec<&mut [Alloc]> = Vec::with_capacity(ntiles);
    let mut rest = table.as_mut_slice();
    for i in 0..ntiles {
        let (run, tail) = rest.split_at_mut(starts[i + 1] - starts[i]);
        per.push(run);
        rest = tail;
    }
    // Every tile checked on the host's cores; the first violation in tile order is reported.
    let check_tile = |(tile, allocs): (usize, &mut &mut [Alloc])| -> Option<CompileError> {
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
    match per.par_iter_mut().enumerate().find_map_first(check_tile) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pairwise definition: two allocations conflict when their bytes overlap and
    /// neither is a transient whose steps end before the other's begin.
    fn conflicts(a: &Alloc, b: &Alloc) -> bool {
        let bytes = u64::from(a.0) < b.1 && u64::from(b.0) < a.1;
        let transient = |x: &Alloc| x.4 & ALWAYS == 0;
        let disjoint_life = transient(a) && transient(b) && (a.3 < b.2 || b.3 < a.2);
        bytes && !disjoint_life
    }

    #[test]
    fn the_sweep_finds_a_conflict_exactly_when_a_pair_conflicts() {
        // A small linear congruential generator: the cases are the same on every run.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) % m
        };
        let (mut with, mut without) = (0, 0);
        for case in 0..4_000 {
            let n = 1 + next(12) as usize;
            let mut allocs: Vec<Alloc> = (0..n)
                .map(|i| {
                    let off = next(64) as u32 * 8;
                    let size = 8 * (1 + next(6));
                    let first = next(20) as u32;
                    let last = first + next(6) as u32;
                    let always = if next(8) == 0 { ALWAYS } else { 0 };
                    (off, u64::from(off) + size, first, last, always | i as u32)
                })
                .collect();
            let want = allocs
                .iter()
                .enumerate()
                .any(|(i, a)| allocs[i + 1..].iter().any(|b| conflicts(a, b)));
            let found = first_conflict(&mut allocs);
            assert_eq!(found.is_some(), want, "case {case}: {allocs:?}");
            if let Some((a, b)) = found {
                let by_tag = |t: u32| allocs.iter().find(|x| x.4 == t).unwrap();
                assert!(
                    conflicts(by_tag(a), by_tag(b)),
                    "case {case}: reported a non-conflict"
                );
                with += 1;
            } else {
                without += 1;
            }
        }
        // Both outcomes are exercised.
        assert!(
            with > 500 && without > 500,
            "{with} with, {without} without"
        );
    }
}

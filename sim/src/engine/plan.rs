//! What the engine works out once, when it is built: the executable checked against every
//! assumption the execution makes (so that running it never panics), and the per-step
//! figures that do not depend on values — each compute set's tiles and cycles per tile
//! (from `ipusim_compiler::cycles` on its vertices), each exchange's cycles per tile and
//! whether its copies may go straight from source to destination, each stream copy's
//! cycles.

use super::error::EngineError;
use super::memory::{check_tensor, TileIndex};
use crate::codelets::{amp, block, map, operands};
use ipusim_compiler::codelets::{Codelet, VertexParams};
use ipusim_compiler::cycles;
use ipusim_compiler::executable::{Executable, StreamDirection};
use ipusim_ir::DType;

/// A compute set, ready to run.
#[derive(Clone, Debug)]
pub(crate) struct ComputeSetPlan {
    /// Dense tile index of each `TileWork`, ascending.
    pub dense: Vec<usize>,
    /// Cycles of each `TileWork` ([`cycles::tile_work_cycles`]).
    pub tile_cycles: Vec<u64>,
    /// The slowest tile's cycles ([`cycles::compute_set_cycles`]).
    pub cycles: u64,
}

/// An exchange, ready to run.
#[derive(Clone, Debug)]
pub(crate) struct ExchangePlan {
    /// [`cycles::exchange_cycles`].
    pub cycles: u64,
    /// [`cycles::exchange_tile_cycles`].
    pub tile_cycles: Vec<(u32, u64)>,
    /// Bytes moved (every destination counted).
    pub bytes: u64,
    /// Bytes of all sources (the staging buffer when copies cannot go direct).
    pub source_bytes: usize,
    /// No destination overlaps a source of the same exchange: copies may go straight from
    /// source to destination (the result is the same as reading all sources first).
    pub direct: bool,
}

/// The whole plan.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub compute_sets: Vec<ComputeSetPlan>,
    pub exchanges: Vec<ExchangePlan>,
    /// Cycles of one stream copy of each stream.
    pub stream_cycles: Vec<u64>,
}

impl Plan {
    /// Checks `exe` and plans it. `sizes` are the bytes of each dense tile.
    pub fn new(exe: &Executable, index: &TileIndex, sizes: &[usize]) -> Result<Plan, EngineError> {
        for t in &exe.tensors {
            check_tensor(t, index, sizes)?;
        }
        let compute_sets = exe
            .compute_sets
            .iter()
            .map(|cs| plan_compute_set(exe, cs, index, sizes))
            .collect::<Result<_, _>>()?;
        let exchanges = exe
            .exchanges
            .iter()
            .map(|ex| plan_exchange(exe, ex, index, sizes))
            .collect::<Result<_, _>>()?;
        let mut stream_cycles = Vec::with_capacity(exe.streams.len());
        for s in &exe.streams {
            let t = exe.tensors.get(s.tensor.0 as usize).ok_or_else(|| {
                EngineError::invalid(format!("stream '{}' names tensor {}", s.name, s.tensor.0))
            })?;
            if t.size_bytes() != s.bytes_per_micro_batch || t.dtype != s.dtype {
                return Err(EngineError::invalid(format!(
                    "stream '{}' moves {} bytes of {}, its tensor '{}' holds {} bytes of {}",
                    s.name,
                    s.bytes_per_micro_batch,
                    s.dtype,
                    t.name,
                    t.size_bytes(),
                    t.dtype
                )));
            }
            if s.direction == StreamDirection::HostToDevice
                && t.slices.is_empty()
                && t.num_elements() > 0
            {
                return Err(EngineError::invalid(format!(
                    "infeed '{}' lands on no tile",
                    s.name
                )));
            }
            stream_cycles.push(cycles::stream_copy_cycles(
                &exe.target,
                s.bytes_per_micro_batch,
            ));
        }
        for iv in &exe.initial_values {
            if exe.tensors.get(iv.tensor.0 as usize).is_none() {
                return Err(EngineError::invalid(format!(
                    "an initial value names tensor {}",
                    iv.tensor.0
                )));
            }
        }
        Ok(Plan {
            compute_sets,
            exchanges,
            stream_cycles,
        })
    }
}

fn plan_compute_set(
    exe: &Executable,
    cs: &ipusim_compiler::executable::ComputeSet,
    index: &TileIndex,
    sizes: &[usize],
) -> Result<ComputeSetPlan, EngineError> {
    let nw = exe.target.worker_contexts;
    let mut dense = Vec::with_capacity(cs.tiles.len());
    let mut tile_cycles = Vec::with_capacity(cs.tiles.len());
    for work in &cs.tiles {
        let d = index.require(work.tile, &|| format!("compute set '{}' has work", cs.name))?;
        if dense.last().is_some_and(|&last| last >= d) {
            return Err(EngineError::invalid(format!(
                "compute set '{}' lists tile {} out of order or twice",
                cs.name, work.tile
            )));
        }
        dense.push(d);
        let mut vertex = 0usize;
        for group in &work.groups {
            for v in &group.vertices {
                let at = || {
                    format!(
                        "compute set '{}', tile {}, vertex {vertex} ({})",
                        cs.name,
                        work.tile,
                        group.codelet.full_name()
                    )
                };
                if u32::from(v.worker) >= nw {
                    return Err(EngineError::invalid(format!(
                        "{}: worker {} of {nw}",
                        at(),
                        v.worker
                    )));
                }
                check_vertex(&group.codelet, v, &exe.tensors, sizes[d])
                    .map_err(|m| EngineError::invalid(format!("{}: {m}", at())))?;
                vertex += 1;
            }
        }
        tile_cycles.push(cycles::tile_work_cycles(&exe.target, work));
    }
    Ok(ComputeSetPlan {
        cycles: cycles::compute_set_cycles(&exe.target, cs),
        dense,
        tile_cycles,
    })
}

/// Checks one vertex: its operands against the tile memory, then its codelet's contract.
fn check_vertex(
    codelet: &Codelet,
    v: &ipusim_compiler::executable::Vertex,
    tensors: &[ipusim_compiler::executable::Tensor],
    mem_len: usize,
) -> Result<(), String> {
    let elementwise = matches!(v.params, VertexParams::Map(_));
    operands::check(v, tensors, mem_len, elementwise)?;
    match (codelet, &v.params) {
        (Codelet::AmpMatMul { .. }, VertexParams::Amp(p)) => amp::check(codelet, p, v, tensors),
        (
            Codelet::Reduce { .. }
            | Codelet::ArgMax { .. }
            | Codelet::Softmax { .. }
            | Codelet::SoftmaxCrossEntropy { .. },
            VertexParams::Block(p),
        ) => block::check(codelet, p, v, tensors),
        (_, VertexParams::Map(_) | VertexParams::Fill { .. }) => map::check(codelet, v, tensors),
        (_, p) => Err(format!(
            "has {} parameters",
            crate::codelets::params_name(p)
        )),
    }
}

fn plan_exchange(
    exe: &Executable,
    ex: &ipusim_compiler::executable::Exchange,
    index: &TileIndex,
    sizes: &[usize],
) -> Result<ExchangePlan, EngineError> {
    // Byte ranges read and written, per dense tile.
    let mut reads: Vec<(usize, u64, u64)> = Vec::new();
    let mut writes: Vec<(usize, u64, u64)> = Vec::new();
    let mut source_bytes = 0usize;
    for (i, c) in ex.copies.iter().enumerate() {
        let what = || format!("exchange '{}', copy {i}", ex.name);
        let bytes = u64::from(c.bytes);
        let s = index.require(c.src_tile, &what)?;
        let (so, se) = (u64::from(c.src_offset), u64::from(c.src_offset) + bytes);
        if se as usize > sizes[s] {
            return Err(EngineError::invalid(format!(
                "{}: source bytes [{so}, {se}) outside tile {}",
                what(),
                c.src_tile
            )));
        }
        reads.push((s, so, se));
        source_bytes += c.bytes as usize;
        for d in &c.dsts {
            let t = index.require(d.tile, &what)?;
            let (o, e) = (u64::from(d.offset), u64::from(d.offset) + bytes);
            if e as usize > sizes[t] {
                return Err(EngineError::invalid(format!(
                    "{}: destination bytes [{o}, {e}) outside tile {}",
                    what(),
                    d.tile
                )));
            }
            writes.push((t, o, e));
        }
    }
    reads.sort_unstable();
    writes.sort_unstable();
    let direct = !overlap(&reads, &writes);
    Ok(ExchangePlan {
        cycles: cycles::exchange_cycles(&exe.target, ex),
        tile_cycles: cycles::exchange_tile_cycles(&exe.target, ex),
        bytes: ex.total_bytes(),
        source_bytes,
        direct,
    })
}

/// Whether any range of `a` overlaps a range of `b` on the same tile (both sorted).
fn overlap(a: &[(usize, u64, u64)], b: &[(usize, u64, u64)]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (x, y) = (a[i], b[j]);
        if x.0 == y.0 && x.1 < y.2 && y.1 < x.2 && x.1 < x.2 && y.1 < y.2 {
            return true;
        }
        // Advance the range that ends first on the lower tile.
        if (x.0, x.2) <= (y.0, y.2) {
            i += 1;
        } else {
            j += 1;
        }
    }
    false
}

/// The condition tensor of an `If` must be a Bool with element 0 on some tile.
pub(crate) fn check_condition(
    exe: &Executable,
    t: ipusim_compiler::executable::TensorId,
) -> Result<(), EngineError> {
    let tensor = exe
        .tensors
        .get(t.0 as usize)
        .ok_or_else(|| EngineError::invalid(format!("an If names tensor {}", t.0)))?;
    let has_first = tensor
        .slices
        .iter()
        .any(|s| s.intervals.iter().any(|iv| iv.begin == 0 && iv.end > 0));
    if tensor.dtype != DType::Bool || !has_first {
        return Err(EngineError::invalid(format!(
            "the condition '{}' of an If must be a Bool tensor with its first element on a tile",
            tensor.name
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_of_sorted_ranges() {
        assert!(!overlap(&[(0, 0, 8)], &[(0, 8, 16)]));
        assert!(overlap(&[(0, 0, 8)], &[(0, 4, 12)]));
        assert!(!overlap(&[(0, 0, 8)], &[(1, 0, 8)]));
        assert!(overlap(
            &[(0, 0, 4), (1, 0, 64)],
            &[(0, 8, 12), (1, 60, 70)]
        ));
        assert!(!overlap(&[(0, 0, 4), (0, 16, 20)], &[(0, 4, 16)]));
    }
}

//! What the engine works out once, when it is built: the executable checked against every
//! assumption the execution makes (so that running it never panics), and the per-step
//! figures that do not depend on values — each compute set's tiles and cycles per tile
//! (from `ipusim_exe::cycles` on its vertices), each exchange's moves and cycles
//! ([`super::exchange`]), each stream copy's cycles.

use super::error::EngineError;
use super::exchange::ExchangePlan;
use super::memory::{check_tensor, TileIndex};
use crate::codelets::{amp, block, map, operands};
use ipusim_exe::codelets::{Codelet, VertexParams};
use ipusim_exe::cycles;
use ipusim_exe::executable::{Executable, StreamDirection};
use ipusim_ir::DType;
use rayon::prelude::*;

/// A compute set, ready to run.
#[derive(Clone, Debug)]
pub(crate) struct ComputeSetPlan {
    /// Dense tile index of each `TileWork`, ascending.
    pub dense: Vec<usize>,
    /// Cycles of each `TileWork` ([`cycles::tile_work_cycles`]).
    pub tile_cycles: Vec<u64>,
    /// The slowest tile's cycles ([`cycles::compute_set_cycles`]).
    pub cycles: u64,
    /// How much host work the compute set is, in tile-cycles, to decide whether handing its
    /// tiles to a pool pays: the sum of `tile_cycles` plus [`VERTEX_HOST_WORK`] per vertex
    /// (per worker part of a vertex its workers split, [`ipusim_exe::workers::worker_parts`]:
    /// an upper bound when such a vertex runs as one pass, `codelets::one_pass`, which the
    /// control register of the moment decides, not the plan).
    pub work: u64,
}

/// The host cost of running one vertex beyond its simulated cycles (cutting its operands
/// out of tile memory, dispatching its codelet, its outcome), in tile-cycles of host time.
/// Our own measurement, not a source's: the engine simulates about a billion tile-cycles per
/// host second and spends about 125 ns per vertex on the flagship (README, "Why the
/// flagship target is not met"). Without it, a compute set of thousands of short vertices
/// (a CNN's batch norm over 1,408 tiles, 8,448 vertices, 300,000 tile-cycles) looked as
/// cheap as the flagship's one-vertex-per-tile sets and ran on one thread.
pub(crate) const VERTEX_HOST_WORK: u64 = 125;

/// Compute sets of at least this much host work (`ComputeSetPlan::work`) run their tiles in
/// parallel; smaller ones run on the calling thread. The engine simulates about a billion
/// tile-cycles per host second, so this is about a millisecond of work: below it, waking
/// the pool and moving tiles' memory between cores' caches cost more than they save
/// (measured on the flagship, whose compute sets are all smaller: 2 threads were slower
/// than 1 with a threshold of 50,000 tile-cycles and no vertex cost). Our own choice,
/// measured.
const PARALLEL_TILE_CYCLES: u64 = 1_000_000;

impl ComputeSetPlan {
    /// Whether the compute set runs its tiles on the host threads' pool.
    pub fn on_pool(&self) -> bool {
        self.work >= PARALLEL_TILE_CYCLES
    }
}

/// The whole plan.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub compute_sets: Vec<ComputeSetPlan>,
    pub exchanges: Vec<ExchangePlan>,
    /// Cycles of one stream copy of each stream.
    pub stream_cycles: Vec<u64>,
    /// Every tensor's element type ([`operands::dtypes`]).
    pub dtypes: Vec<DType>,
}

impl Plan {
    /// Checks `exe` and plans it. `sizes` are the bytes of each dense tile.
    pub fn new(
        exe: &Executable,
        index: &TileIndex,
        sizes: &[usize],
        parallel: bool,
    ) -> Result<Plan, EngineError> {
        for t in &exe.tensors {
            check_tensor(t, index, sizes)?;
        }
        let compute_sets = in_order(&exe.compute_sets, parallel, |cs| {
            plan_compute_set(exe, cs, index, sizes)
        })?;
        let exchanges = in_order(&exe.exchanges, parallel, |ex| {
            ExchangePlan::new(exe, ex, index, sizes)
        })?;
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
            dtypes: operands::dtypes(&exe.tensors),
        })
    }
}

/// `f` of every item, on the calling thread or on the current pool's threads; the first
/// error in item order either way (so that a broken executable gives the same message on
/// any number of host threads).
fn in_order<T: Sync, R: Send>(
    items: &[T],
    parallel: bool,
    f: impl Fn(&T) -> Result<R, EngineError> + Sync + Send,
) -> Result<Vec<R>, EngineError> {
    if !parallel {
        return items.iter().map(f).collect();
    }
    let all: Vec<Result<R, EngineError>> = items.par_iter().map(f).collect();
    all.into_iter().collect()
}

fn plan_compute_set(
    exe: &Executable,
    cs: &ipusim_exe::executable::ComputeSet,
    index: &TileIndex,
    sizes: &[usize],
) -> Result<ComputeSetPlan, EngineError> {
    let nw = exe.target.worker_contexts;
    let mut dense = Vec::with_capacity(cs.tiles.len());
    let mut tile_cycles = Vec::with_capacity(cs.tiles.len());
    let mut parts = 0u64;
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
                if !ipusim_exe::workers::may_run_on(&group.codelet, v, nw) {
                    return Err(EngineError::invalid(format!(
                        "{}: worker {} of {nw}",
                        at(),
                        v.worker
                    )));
                }
                check_vertex(&group.codelet, v, &exe.tensors, sizes[d])
                    .map_err(|m| EngineError::invalid(format!("{}: {m}", at())))?;
                vertex += 1;
                // A split vertex runs as a part per worker, each a vertex's host work.
                parts += ipusim_exe::workers::worker_parts(&exe.target, &group.codelet, v);
            }
        }
        tile_cycles.push(cycles::tile_work_cycles(&exe.target, work));
    }
    let work = tile_cycles
        .iter()
        .fold(0u64, |a, &c| a.saturating_add(c))
        .saturating_add(parts.saturating_mul(VERTEX_HOST_WORK));
    Ok(ComputeSetPlan {
        // The slowest tile: `cycles::compute_set_cycles`, from the tile cycles above.
        cycles: tile_cycles.iter().copied().max().unwrap_or(0),
        work,
        dense,
        tile_cycles,
    })
}

/// Checks one vertex: its operands against the tile memory, then its codelet's contract.
fn check_vertex(
    codelet: &Codelet,
    v: &ipusim_exe::executable::Vertex,
    tensors: &[ipusim_exe::executable::Tensor],
    mem_len: usize,
) -> Result<(), String> {
    let elementwise = matches!(v.params, VertexParams::Map(_));
    operands::check(v, tensors, mem_len, elementwise)?;
    match (codelet, &v.params) {
        (Codelet::AmpMatMul { .. }, VertexParams::Amp(p)) => amp::check(codelet, p, v, tensors),
        (Codelet::ReduceAdd { partials, output }, VertexParams::Block(p)) => {
            let sum = Codelet::summing(*partials, *output);
            block::check(&sum, p, v, tensors)
        }
        (
            Codelet::Reduce { .. }
            | Codelet::ArgMax { .. }
            | Codelet::Softmax { .. }
            | Codelet::SoftmaxCrossEntropy { .. }
            | Codelet::SoftmaxStage { .. },
            VertexParams::Block(p),
        ) => block::check(codelet, p, v, tensors),
        (_, VertexParams::Map(_) | VertexParams::Fill { .. }) => map::check(codelet, v, tensors),
        (Codelet::Conv { .. } | Codelet::MaxPool { .. }, VertexParams::Window(p)) => {
            crate::codelets::window::check(codelet, &p.params(), v, tensors)
        }
        (_, p) => Err(format!(
            "has {} parameters",
            crate::codelets::params_name(p)
        )),
    }
}

/// The condition tensor of an `If` must be a Bool with element 0 on some tile.
pub(crate) fn check_condition(
    exe: &Executable,
    t: ipusim_exe::executable::TensorId,
) -> Result<(), EngineError> {
    let tensor = exe
        .tensors
        .get(t.0 as usize)
        .ok_or_else(|| EngineError::invalid(format!("an If names tensor {}", t.0)))?;
    let has_first = tensor
        .slices
        .iter()
        .any(|s| s.intervals.iter().any(|iv| iv.begin == 0 && iv.end() > 0));
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
    use ipusim_compiler::{compile, CompileOptions, Target};
    use ipusim_ir::{GraphBuilder, Init};

    /// A vertex its workers split is the host work of a vertex per worker part: a ReLU
    /// over 16 tiles, one split vertex per tile of at least six vectors, counts six parts
    /// per tile, as the vertex per worker it replaced did.
    #[test]
    fn a_split_vertex_is_the_host_work_of_its_worker_parts() {
        let mut b = GraphBuilder::new();
        let init = Init::Uniform {
            low: -1.0,
            high: 1.0,
            seed: 3,
        };
        let x = b.variable("x", DType::F16, [64, 96], init).unwrap();
        let r = b.relu(x).unwrap();
        b.outfeed("r", r).unwrap();
        let mut target = Target::mk2();
        target.tiles = 16;
        let exe = compile(&b.finish(), &target, &CompileOptions::default()).unwrap();
        let (index, sizes) = TileIndex::new(&exe).unwrap();
        let plan = Plan::new(&exe, &index, &sizes, true).unwrap();
        let (cs, p) = exe
            .compute_sets
            .iter()
            .zip(&plan.compute_sets)
            .find(|(cs, _)| {
                cs.tiles.iter().any(|t| {
                    t.groups
                        .iter()
                        .any(|g| matches!(g.codelet, Codelet::Unary { .. }))
                })
            })
            .expect("the ReLU's compute set");
        let vertices: Vec<_> = cs
            .tiles
            .iter()
            .flat_map(|t| t.groups.iter().flat_map(|g| &g.vertices))
            .collect();
        assert_eq!(vertices.len(), 16, "one vertex per tile");
        assert!(vertices.iter().all(|v| ipusim_exe::workers::is_split(v)));
        let nw = u64::from(target.worker_contexts);
        let simulated: u64 = p.tile_cycles.iter().sum();
        assert_eq!(p.work - simulated, 16 * nw * VERTEX_HOST_WORK);
    }
}

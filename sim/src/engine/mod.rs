//! The BSP engine: executes an [`Executable`]'s program tree with exact values, cycle
//! accounting, `$FP_STS` flags and traps, and optional traces.
//!
//! # Model
//!
//! - **State.** Every tile that holds a tensor has its real bytes at the executable's
//!   offsets (module `memory`); variables and constants start from the values of
//!   [`crate::init`] (bit-identical to the reference interpreter's), everything else from
//!   zero. State persists across runs: one device run is one [`Engine::run`].
//! - **Program.** The tree is walked by a resumable cursor ([`program`]): `Sequence` in
//!   order, `Repeat` `count` times, `If` on the first element of its Bool condition (after a
//!   sync that broadcasts it), and the leaves: `Execute` runs a compute set (tiles in
//!   parallel on the host, [`rayon`]), `Exchange` copies bytes between tiles (all sources
//!   read before any destination is written), `StreamCopy` asks the [`HostIo`] for an
//!   infeed micro-batch or hands it an outfeed entry, `Sync` syncs. The debugger stops and
//!   resumes the same machine ([`Engine::settle`], [`Engine::step`]); [`Engine::run`] is
//!   "continue until the end".
//! - **Cycles.** Each step is charged with the functions of `ipusim_exe::cycles` on the
//!   vertices and copies it executes (computed once, when the engine is built): compute
//!   sets in OnTileExecute (the slowest tile; each tile's own cycles per tile), exchanges in
//!   DoExchange, syncs (and `If` conditions) in Sync, stream copies in StreamCopy. Without
//!   data-dependent control flow a run's cycles equal the compiler's static estimate.
//! - **Floating point.** `FpConfig` gives every worker's `$FP_CTL`; a worker's `$FP_STS`
//!   is reset when it starts a vertex and ORed into its tile's sticky flags. FP16 results
//!   round to nearest even, or stochastically (ESR) with bits from the worker's own stream
//!   `SrRng::new(seed, tile, worker)`, whose position depends only on the work that worker
//!   has done: results never depend on the host thread count. `ReplicaIdenticalOnly`
//!   behaves as `On`: the simulator runs one replica, so every region is replica-identical.
//!   With an exception enabled, a vertex that raises it stops its tile; the engine reports
//!   the lowest-numbered tile that trapped ([`FpExceptionDump`]) and the run stops.
//!   The faulting vertex's outputs are written in full.
//!
//! After an error (a trap, a host failure) the cursor stays where the run stopped, for
//! inspection; the next `run`, `settle` or `step` starts a new run from the top.

pub mod error;
mod exchange;
mod machine;
pub(crate) mod memory;
pub(crate) mod plan;
pub mod program;
mod steps;
mod summary;

pub use error::{DumpValue, EngineError, FpExceptionDump};
pub use machine::Stepped;
pub use program::Place;
pub use summary::{CategoryCycles, Leaf, NextStep, RunSummary, Settled, StepReport, TileCycles};

use crate::host::HostIo;
use crate::init;
use crate::numerics::{FpConfig, FpCtl, FpSts, SrRng};
use crate::tensor::{Data, Tensor};
use crate::trace::{Event, Trace};
use exchange::direct::Direct;
use ipusim_exe::executable::{
    ComputeSetId, ExchangeId, Executable, InitialValue, SourceValue, TensorId, TensorKind,
};
use ipusim_exe::system::TileId;
use ipusim_ir::TensorType;
use memory::{gather, scatter, TileIndex, TileMem};
use plan::Plan;
use program::{Frame, Tree};
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;

/// Where [`Engine::run_to_collective`] stopped.
#[derive(Clone, Debug, PartialEq)]
pub enum Collective {
    /// Before the cross-replica collective of this tensor (the next step).
    At(TensorId),
    /// The run finished (its summary).
    Finished(Box<RunSummary>),
}

/// How an engine runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineOptions {
    /// Floating-point behaviour (exceptions, stochastic rounding, NaN on overflow).
    pub fp: FpConfig,
    /// The program seed: every worker's stochastic-rounding stream derives from it.
    pub seed: u64,
    /// Host threads: `None` uses rayon's global pool, `Some(1)` the calling thread alone,
    /// `Some(n)` a dedicated pool of `n`.
    pub threads: Option<usize>,
    /// Record trace events ([`Engine::take_trace`]); nothing is allocated otherwise.
    pub record_trace: bool,
}

/// One tile: its memory, its workers' random streams, its sticky `$FP_STS`.
#[derive(Debug)]
pub(crate) struct TileState {
    pub mem: TileMem,
    pub rngs: Vec<SrRng>,
    pub sts: FpSts,
}

impl AsRef<TileMem> for TileState {
    fn as_ref(&self) -> &TileMem {
        &self.mem
    }
}

impl AsMut<TileMem> for TileState {
    fn as_mut(&mut self) -> &mut TileMem {
        &mut self.mem
    }
}

/// Mutable references to the tiles at the (ascending) dense indices `dense` (in time
/// proportional to `dense`, not to the chip).
pub(crate) fn select_mut<'t>(
    mut tiles: &'t mut [TileState],
    dense: &[usize],
) -> Vec<&'t mut TileState> {
    let mut out = Vec::with_capacity(dense.len());
    let mut base = 0;
    for &d in dense {
        let Some(rest) = std::mem::take(&mut tiles).get_mut(d.saturating_sub(base)..) else {
            break;
        };
        let Some((t, rest)) = rest.split_first_mut() else {
            break;
        };
        out.push(t);
        tiles = rest;
        base = d + 1;
    }
    out
}

/// Where the machine is between calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No run in progress: the next step starts one.
    Idle,
    /// A run in progress.
    Running,
    /// A run stopped on an error; the cursor is kept for inspection.
    Stopped,
}

/// Where the tiles of a step run.
#[derive(Debug)]
enum Workers {
    /// Rayon's global pool.
    Global,
    /// A dedicated pool.
    Pool(rayon::ThreadPool),
    /// The calling thread, tile after tile (one host thread: no hand-off to a pool).
    Caller,
}

impl Workers {
    /// `f(true)` on these workers' threads (inside the dedicated pool, when there is one)
    /// when `parallel` and there are several, else `f(false)` on the calling thread, with no
    /// hand-off to a pool.
    fn install<R: Send>(&self, parallel: bool, f: impl FnOnce(bool) -> R + Send) -> R {
        match self {
            Workers::Pool(pool) if parallel => pool.install(|| f(true)),
            Workers::Global if parallel => f(true),
            _ => f(false),
        }
    }
}

/// The BSP engine (see the module docs).
pub struct Engine {
    exe: Arc<Executable>,
    options: EngineOptions,
    ctl: FpCtl,
    workers: Workers,
    index: TileIndex,
    tiles: Vec<TileState>,
    plan: Plan,
    tree: Tree,
    stack: Vec<Frame>,
    phase: Phase,
    cycle: u64,
    runs: u64,
    current: RunSummary,
    staging: Vec<u8>,
    /// An exchange whose writes wait for the compute set that follows it (module
    /// `exchange`): moved directly from the source tiles when it is direct (module
    /// `exchange::direct`), else from its sources in `staging`; only inside [`Engine::run`]
    /// and [`Engine::run_to_collective`], never between calls.
    pending: Option<ExchangeId>,
    /// On one host thread, each exchange's direct moves, where it defers, its moves are
    /// large and no destination overlaps a source (module `exchange::direct`); empty on
    /// several.
    direct: Vec<Option<Direct>>,
    /// Whether a direct exchange's writes may wait for a compute set's vertices (none
    /// writes a byte it reads: [`Direct::conflicts`]), by pair, as found.
    direct_waits: HashMap<(ExchangeId, ComputeSetId), bool>,
    /// The exchange that last followed each compute set directly, if one did, and whether
    /// the compute set gathers its sources ([`Engine::gathers_after`]): inside
    /// [`Engine::run`], tile by tile as its vertices finish ([`Engine::run_compute_set`],
    /// module `exchange`).
    follows: Vec<Option<(ExchangeId, bool)>>,
    /// The compute set whose step ran last, if the last step was one.
    last_compute_set: Option<ComputeSetId>,
    /// A buffer the size of `staging` that a compute set fills early for the exchange
    /// expected next, and that exchange's id with the compute set's, until the next step.
    early: (Vec<u8>, Option<(ExchangeId, ComputeSetId)>),
    step_flags: Vec<(TileId, FpSts)>,
    last_step: Option<NextStep>,
    trace: Option<Vec<Event>>,
    /// The clock of the pipeline tick in progress.
    tick: Option<machine::TickClock>,
    /// The remote buffers of offloaded variables (`TensorKind::RemoteVariable`), by tensor.
    remote: Vec<Option<Vec<u8>>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("tiles", &self.tiles.len())
            .field("cycle", &self.cycle)
            .field("runs", &self.runs)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine for `exe`: checks it, allocates the memory of every used tile and
    /// materialises variables and constants. An executable that does not fit in tile memory
    /// is an error ([`EngineError::OutOfMemory`]).
    pub fn new(exe: Arc<Executable>, options: EngineOptions) -> Result<Engine, EngineError> {
        if exe.memory.oom {
            let worst = exe.memory.worst_tiles.first();
            return Err(EngineError::OutOfMemory {
                tiles: exe.memory.oom_tiles.clone(),
                max_tile_bytes: exe.memory.max_tile_bytes,
                worst_tile: worst.map_or(TileId::default(), |w| w.tile),
                capacity: exe.memory.bytes_per_tile_capacity,
            });
        }
        // The one verifier of the executable contract, then the engine's own checks of what
        // it allocates.
        let errors = ipusim_exe::verify::executable(&exe);
        if !errors.is_empty() {
            return Err(EngineError::Verify(errors));
        }
        let (index, sizes) = TileIndex::new(&exe)?;
        let workers = match options.threads {
            Some(1) => Workers::Caller,
            Some(n) => Workers::Pool(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .build()
                    .map_err(|e| EngineError::ThreadPool {
                        threads: n,
                        message: e.to_string(),
                    })?,
            ),
            None => Workers::Global,
        };
        // The plans of the compute sets and exchanges are independent: made on the host
        // threads the engine runs on.
        let plan = workers.install(true, |parallel| Plan::new(&exe, &index, &sizes, parallel))?;
        // On one host thread, the exchanges of large moves go direct (module
        // `exchange::direct`).
        let direct = match workers {
            Workers::Caller => (plan.exchanges.iter())
                .map(|x| x.gathers_early().then(|| Direct::new(x)).flatten())
                .collect(),
            _ => Vec::new(),
        };
        let tree = Tree::new(&exe.program, &exe.steps);
        tree.check(&exe)?;
        let contexts = exe.target.worker_contexts.max(1);
        let tiles = sizes
            .iter()
            .enumerate()
            .map(|(d, &size)| {
                let tile = index.tile(d);
                TileState {
                    mem: TileMem::zeroed(size),
                    rngs: (0..contexts)
                        .map(|w| SrRng::new(options.seed, exe.tile_index(tile) as u32, w))
                        .collect(),
                    sts: FpSts::empty(),
                }
            })
            .collect();
        let mut engine = Engine {
            ctl: options.fp.ctl(true),
            options,
            workers,
            index,
            tiles,
            plan,
            tree,
            stack: Vec::new(),
            phase: Phase::Idle,
            cycle: 0,
            runs: 0,
            current: RunSummary::default(),
            staging: Vec::new(),
            pending: None,
            direct,
            direct_waits: HashMap::new(),
            follows: vec![None; exe.compute_sets.len()],
            last_compute_set: None,
            early: (Vec::new(), None),
            step_flags: Vec::new(),
            last_step: None,
            tick: None,
            remote: Vec::new(),
            trace: options.record_trace.then(Vec::new),
            exe,
        };
        engine.materialise()?;
        Ok(engine)
    }

    /// Writes the initial value of every variable and constant into tile memory.
    ///
    /// Each value is a function of its initialiser alone (`init`), so a batch of them is
    /// computed on the host threads (ResNet-50's 25.6 M random weights were most of a second
    /// on one) and written in the executable's order; the first error in that order is
    /// reported, as one at a time would.
    fn materialise(&mut self) -> Result<(), EngineError> {
        let exe = Arc::clone(&self.exe);
        let mut done = vec![false; exe.tensors.len()];
        let value = |iv: &InitialValue| {
            let t = exe.tensor(iv.tensor);
            let ty = TensorType::new(t.dtype, t.shape.clone());
            match &iv.source {
                SourceValue::Init(init) => init::variable_tensor(init, &ty),
                SourceValue::Literal(lit) => init::constant_tensor(lit, &ty),
            }
            .map(|v| v.to_bytes())
            .map_err(|source| EngineError::Init {
                tensor: t.name.clone(),
                source,
            })
        };
        let mut rest = &exe.initial_values[..];
        while !rest.is_empty() {
            let (batch, after) = rest.split_at(values_batch(&exe, rest, VALUES_BATCH_BYTES));
            rest = after;
            let values: Vec<Result<Vec<u8>, EngineError>> =
                self.workers.install(batch.len() > 1, |parallel| {
                    if parallel {
                        batch.par_iter().map(value).collect()
                    } else {
                        batch.iter().map(value).collect()
                    }
                });
            for (iv, bytes) in batch.iter().zip(values) {
                let bytes = bytes?;
                let t = exe.tensor(iv.tensor);
                if t.kind == TensorKind::RemoteVariable {
                    // Offloaded: the initial value waits in its remote buffer.
                    self.remote.resize(exe.tensors.len(), None);
                    self.remote[iv.tensor.0 as usize] = Some(bytes);
                } else {
                    scatter(t, &self.index, &mut self.tiles, &bytes);
                }
                done[iv.tensor.0 as usize] = true;
            }
        }
        for (t, done) in exe.tensors.iter().zip(done) {
            if matches!(
                t.kind,
                TensorKind::Variable | TensorKind::RemoteVariable | TensorKind::Constant
            ) && !done
                && t.num_elements() > 0
            {
                return Err(EngineError::invalid(format!(
                    "{} '{}' has no initial value",
                    if t.kind != TensorKind::Constant {
                        "variable"
                    } else {
                        "constant"
                    },
                    t.name
                )));
            }
        }
        Ok(())
    }

    /// The executable.
    pub fn executable(&self) -> &Arc<Executable> {
        &self.exe
    }

    /// The options.
    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// Every worker's `$FP_CTL`.
    pub fn fp_ctl(&self) -> FpCtl {
        self.ctl
    }

    /// The device cycle counter (cycles executed since the engine was built).
    pub fn cycle(&self) -> u64 {
        self.cycle
    }

    /// Runs started so far.
    pub fn runs(&self) -> u64 {
        self.runs
    }

    /// True while a run is in progress (stopped between steps by the debugger).
    pub fn in_run(&self) -> bool {
        self.phase == Phase::Running
    }

    /// The summary of the run in progress (or of the last one).
    pub fn current_run(&self) -> &RunSummary {
        &self.current
    }

    /// Where the cursor is: the enclosing program nodes, outermost first, ending at the next
    /// (or stopped) program step. Empty between runs.
    pub fn places(&self) -> Vec<Place> {
        self.tree.places(&self.stack)
    }

    /// The value of the IR node (or compiler tensor) named `name`, gathered from its tiles,
    /// in the node's dtype and shape. `None` for an unknown name or a value folded into its
    /// consumers (a transpose read directly by a matmul).
    pub fn read_tensor(&self, name: &str) -> Option<Tensor> {
        match self.exe.value(name) {
            Some(v) => {
                let id = v.tensor?;
                let t = self.exe.tensor(id);
                if t.num_elements() as usize != v.shape.num_elements() || t.dtype != v.dtype {
                    return None;
                }
                if v.group <= 1 {
                    return self.gather_as(id, &v.shape);
                }
                // A channel-grouped feature map: its storage order, shown in logical order.
                let mut bytes = vec![0u8; t.size_bytes() as usize];
                gather(t, &self.index, &self.tiles, &mut bytes);
                let es = t.dtype.size_bytes();
                let logical = ipusim_exe::layout::ungroup(&bytes, es, v.shape.dims(), v.group);
                Tensor::from_bytes(t.dtype, v.shape.clone(), &logical).ok()
            }
            None => {
                let (id, t) = self.exe.tensor_by_name(name)?;
                self.gather_as(id, &t.shape)
            }
        }
    }

    /// The tensor `id`, gathered from its tiles.
    pub fn read_tensor_id(&self, id: TensorId) -> Option<Tensor> {
        let t = self.exe.tensors.get(id.0 as usize)?;
        self.gather_as(id, &t.shape)
    }

    fn gather_as(&self, id: TensorId, shape: &ipusim_ir::Shape) -> Option<Tensor> {
        let t = self.exe.tensors.get(id.0 as usize)?;
        if t.kind == TensorKind::RemoteVariable {
            // An offloaded variable's value is its remote buffer's.
            let bytes = self.remote.get(id.0 as usize)?.as_ref()?;
            return Tensor::from_bytes(t.dtype, shape.clone(), bytes).ok();
        }
        let mut bytes = vec![0u8; t.size_bytes() as usize];
        gather(t, &self.index, &self.tiles, &mut bytes);
        Tensor::from_bytes(t.dtype, shape.clone(), &bytes).ok()
    }

    /// Overwrites the variable `name` (its dtype and shape must match; exact-mode `f64`
    /// values are rounded to nearest even).
    pub fn write_variable(&mut self, name: &str, value: &Tensor) -> Result<(), EngineError> {
        let exe = Arc::clone(&self.exe);
        let (i, t) = exe
            .tensors
            .iter()
            .enumerate()
            .find(|(_, t)| is_variable(&t.kind) && t.name == name)
            .ok_or_else(|| EngineError::UnknownVariable(name.to_string()))?;
        if value.dtype() != t.dtype
            || value.shape() != &t.shape
            || matches!(value.data(), Data::F64(_)) && !t.dtype.is_float()
        {
            return Err(EngineError::VariableType {
                name: name.to_string(),
                expected: TensorType::new(t.dtype, t.shape.clone()),
                found: value.ty(),
            });
        }
        if t.kind == TensorKind::RemoteVariable {
            if let Some(slot) = self.remote.get_mut(i) {
                *slot = Some(value.to_bytes());
            }
        } else {
            scatter(t, &self.index, &mut self.tiles, &value.to_bytes());
            // Sources gathered early no longer match the tiles (`advance` drops them too).
            self.early.1 = None;
        }
        Ok(())
    }

    /// Overwrites the bytes of tensor `id` (its whole row-major contents; the length must be
    /// the tensor's).
    pub fn write_tensor_bytes(&mut self, id: TensorId, bytes: &[u8]) -> Result<(), EngineError> {
        let exe = Arc::clone(&self.exe);
        let t = exe
            .tensors
            .get(id.0 as usize)
            .filter(|t| t.size_bytes() as usize == bytes.len())
            .ok_or_else(|| EngineError::internal("a tensor write of the wrong size"))?;
        scatter(t, &self.index, &mut self.tiles, bytes);
        // Sources gathered early no longer match the tiles (`advance` drops them too).
        self.early.1 = None;
        Ok(())
    }

    /// Runs until the next program step is a cross-replica collective (returning its tensor,
    /// not executed yet) or the run finishes: what a host that drives several replicas in
    /// lockstep runs between collectives.
    pub fn run_to_collective(&mut self, host: &mut dyn HostIo) -> Result<Collective, EngineError> {
        loop {
            let settled = self.settle();
            if !matches!(settled, Ok(Settled::Step(_))) {
                // The run finished or stopped: the tiles whole.
                self.flush_pending();
            }
            match settled? {
                Settled::Finished(summary) => return Ok(Collective::Finished(summary)),
                Settled::Step(NextStep {
                    leaf: Leaf::CrossReplica { tensor, .. },
                    ..
                }) => {
                    // The host reads the tensor next: the tiles whole.
                    self.flush_pending();
                    return Ok(Collective::At(tensor));
                }
                Settled::Step(_) => {
                    if let Stepped::Finished(summary) = self.advance(host, true)? {
                        return Ok(Collective::Finished(summary));
                    }
                }
            }
        }
    }

    /// Every variable (model weights and optimizer state), by name with its type, in tensor
    /// order.
    pub fn variables(&self) -> Vec<(String, TensorType)> {
        self.exe
            .tensors
            .iter()
            .filter(|t| is_variable(&t.kind))
            .map(|t| (t.name.clone(), TensorType::new(t.dtype, t.shape.clone())))
            .collect()
    }

    /// The OR of every tile's `$FP_STS` since the engine was built or the flags were last
    /// cleared.
    pub fn flags(&self) -> FpSts {
        self.tiles.iter().fold(FpSts::empty(), |a, t| a | t.sts)
    }

    /// The sticky flags of every tile that raised some, by tile.
    pub fn tile_flags(&self) -> Vec<(TileId, FpSts)> {
        self.tiles
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.sts.is_empty())
            .map(|(d, t)| (self.index.tile(d), t.sts))
            .collect()
    }

    /// The program step executed last in the current run (`None` before its first).
    pub fn last_step(&self) -> Option<NextStep> {
        self.last_step
    }

    /// The flags raised on each tile by the last program step executed.
    pub fn last_step_flags(&self) -> &[(TileId, FpSts)] {
        &self.step_flags
    }

    /// Clears every tile's sticky flags.
    pub fn clear_flags(&mut self) {
        for t in &mut self.tiles {
            t.sts = FpSts::empty();
        }
    }

    /// Bytes of tile memory the engine holds for `tile` (`None`: the tile holds nothing).
    pub fn tile_bytes(&self, tile: TileId) -> Option<usize> {
        self.index.get(tile).map(|d| self.tiles[d].mem.len())
    }

    /// Bytes of tile memory held over all tiles.
    pub fn memory_bytes(&self) -> usize {
        self.tiles.iter().map(|t| t.mem.len()).sum()
    }

    /// The events recorded since the last call (empty when traces are not recorded).
    pub fn take_trace(&mut self) -> Trace {
        Trace {
            events: self.trace.as_mut().map(std::mem::take).unwrap_or_default(),
        }
    }

    /// Runs the program once (or, when the debugger stopped a run, to its end) and returns
    /// the run's summary.
    pub fn run(&mut self, host: &mut dyn HostIo) -> Result<RunSummary, EngineError> {
        loop {
            if let Stepped::Finished(summary) = self.advance(host, true)? {
                return Ok(*summary);
            }
        }
    }

    /// Records an event when traces are on (the closure is not called otherwise).
    fn record(&mut self, event: impl FnOnce() -> Event) {
        if let Some(t) = &mut self.trace {
            t.push(event());
        }
    }
}

/// True for a model variable, on chip or offloaded.
fn is_variable(kind: &TensorKind) -> bool {
    matches!(kind, TensorKind::Variable | TensorKind::RemoteVariable)
}

/// Bytes of initial values computed at once by [`Engine::materialise`] (our choice: enough
/// for a model's many tensors to spread over the host threads, while the values held beside
/// tile memory stay bounded whatever the model's size).
const VALUES_BATCH_BYTES: u64 = 64 << 20;

/// How many of `values` (at least one) the next batch of [`Engine::materialise`] takes:
/// those whose bytes sum to at most `budget`.
fn values_batch(exe: &Executable, values: &[InitialValue], budget: u64) -> usize {
    let mut bytes = 0u64;
    let mut taken = 0;
    for iv in values {
        bytes = bytes.saturating_add(exe.tensor(iv.tensor).size_bytes());
        if taken > 0 && bytes > budget {
            break;
        }
        taken += 1;
    }
    taken.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipusim_compiler::{compile, CompileOptions, Target};
    use ipusim_ir::{DType, GraphBuilder, Init};

    /// Initial values are computed a batch at a time (at least one value, at most the
    /// budget's bytes), on several threads or one, and every variable reads back as its
    /// initialiser makes it.
    #[test]
    fn initial_values_are_batched_and_read_back_on_any_thread_count() {
        let mut b = GraphBuilder::new();
        let shapes = [[48, 32], [8, 8], [64, 40], [1, 3]];
        let inits = [
            Init::Normal {
                mean: 0.5,
                std: 2.0,
                seed: 7,
            },
            Init::Constant(0.1),
            Init::Uniform {
                low: -1.0,
                high: 3.0,
                seed: 9,
            },
            Init::Zeros,
        ];
        let mut sum = None;
        for (i, (shape, init)) in shapes.iter().zip(&inits).enumerate() {
            let v = b
                .variable(&format!("v{i}"), DType::F16, *shape, init.clone())
                .unwrap();
            let r = b.reduce_sum(v, &[0, 1], false).unwrap();
            sum = Some(match sum {
                None => r,
                Some(s) => b.add(s, r).unwrap(),
            });
        }
        b.outfeed("sum", sum.unwrap()).unwrap();
        let mut target = Target::mk2();
        target.tiles = 16;
        let exe = Arc::new(compile(&b.finish(), &target, &CompileOptions::default()).unwrap());
        let values = &exe.initial_values;
        assert_eq!(values.len(), 4);
        let bytes: Vec<u64> = values
            .iter()
            .map(|iv| exe.tensor(iv.tensor).size_bytes())
            .collect();
        assert_eq!(values_batch(&exe, values, 0), 1, "at least one value");
        assert_eq!(values_batch(&exe, values, bytes[0] + bytes[1]), 2);
        assert_eq!(values_batch(&exe, values, bytes[0] + bytes[1] - 1), 1);
        assert_eq!(values_batch(&exe, values, u64::MAX), 4);
        for threads in [Some(1), Some(2)] {
            let options = EngineOptions {
                threads,
                ..EngineOptions::default()
            };
            let engine = Engine::new(Arc::clone(&exe), options).unwrap();
            for (i, (shape, init)) in shapes.iter().zip(&inits).enumerate() {
                let ty = TensorType::new(DType::F16, *shape);
                assert_eq!(
                    engine.read_tensor(&format!("v{i}")),
                    Some(init::variable_tensor(init, &ty).unwrap()),
                    "v{i} on {threads:?} threads"
                );
            }
        }
    }
}

//! Executing the three kinds of data-moving program steps: a compute set (every tile's
//! vertex groups, tiles in parallel on the host), an exchange (byte copies between tile
//! memories), a host stream copy.

use super::error::FpExceptionDump;
use super::exchange::{write_tile, EarlyGather, Piece};
use super::memory::{gather, scatter};
use super::{select_mut, Engine, EngineError, TileState};
use crate::codelets::{self, Scratch, VertexError, Worker};
use crate::host::HostIo;
use crate::numerics::{FpCtl, FpSts};
use crate::trace::{Event, TileCycle};
use ipusim_exe::cycles::groups_cycles;
use ipusim_exe::executable::{
    CollectiveOp, ComputeSet, ComputeSetId, ExchangeId, StreamDirection, StreamId, TensorId,
    TileWork,
};
use ipusim_exe::target::Target;
use ipusim_exe::workers;
use ipusim_ir::DType;
use rayon::prelude::*;
use std::cell::RefCell;
use std::sync::Arc;

thread_local! {
    /// Scratch buffers of the host thread running a tile (one set per thread, not per tile).
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// How one tile's part of a compute set ended (16 bytes: one per tile per compute set is
/// collected, so the rare stop is boxed).
struct TileOutcome {
    /// Flags its vertices raised.
    flags: FpSts,
    /// Why the tile stopped early, if it did.
    stop: Option<Box<Stop>>,
}

/// Why a tile stopped before its last vertex.
enum Stop {
    /// The first trapping vertex: its group, its index on the tile, its worker, the fault.
    Fault(usize, usize, u8, Box<codelets::Fault>),
    /// An engine error.
    Error(EngineError),
}

/// A tile's writes of a pending exchange (module `exchange`; none when empty) and the
/// exchange's staged sources.
type Writes<'a> = (&'a [Piece], &'a [u8]);

/// A tile's sources of the exchange expected after its compute set (indices of its moves),
/// and that exchange's staging buffer (module `exchange`).
type Early<'a> = Option<(&'a EarlyGather<'a>, &'a [u32])>;

/// The early gathers of a compute set's tiles: the staging buffer and each tile's moves, in
/// tile order (none when no exchange is expected).
type EarlyGathers<'a> = Option<(EarlyGather<'a>, Vec<Option<&'a [u32]>>)>;

/// Tile `i`'s part of `gathers`.
fn early_of<'a>(gathers: &'a EarlyGathers<'a>, i: usize) -> Early<'a> {
    let (gather, moves) = gathers.as_ref()?;
    Some((gather, moves.get(i).copied().flatten()?))
}

/// Runs one tile's vertex groups in order, a pending exchange's writes to it first; stops
/// at the first trapping vertex (for a vertex split among the workers, its first trapping
/// slice). When all have run, the tile's `early` sources are gathered.
fn run_tile(
    run: &TileRun,
    work: &TileWork,
    (pieces, staging): Writes,
    st: &mut TileState,
    early: Early,
) -> TileOutcome {
    let outcome = run_vertices(run, work, (pieces, staging), st);
    if let (None, Some((gather, moves))) = (&outcome.stop, early) {
        gather.tile(moves, st.mem.bytes());
    }
    outcome
}

/// [`run_tile`] but the early gather.
fn run_vertices(
    run: &TileRun,
    work: &TileWork,
    (pieces, staging): Writes,
    st: &mut TileState,
) -> TileOutcome {
    write_tile(st.mem.bytes_mut(), pieces, staging);
    let TileRun {
        dtypes,
        ctl,
        target,
    } = *run;
    SCRATCH.with(|cell| {
        let mut scratch = cell.borrow_mut();
        let nw = st.rngs.len().max(1);
        let mut flags = FpSts::empty();
        let mut vertex = 0usize;
        for (gi, group) in work.groups.iter().enumerate() {
            scratch.new_group();
            // The grain of the group's split vertices (their worker slices).
            let grain = workers::split_grain(target, &group.codelet);
            for v in &group.vertices {
                let outcome = if workers::is_split(v) {
                    codelets::execute_split(
                        &group.codelet,
                        v,
                        dtypes,
                        st.mem.bytes_mut(),
                        &mut scratch,
                        (ctl, &mut st.rngs),
                        grain,
                    )
                    .map_err(|(w, before, e)| (w as u8, before, e))
                } else {
                    // The plan checked `worker < nw`: no division on the hot path.
                    let w = usize::from(v.worker);
                    let worker = Worker {
                        ctl,
                        rng: &mut st.rngs[if w < nw { w } else { w % nw }],
                    };
                    codelets::execute(
                        &group.codelet,
                        v,
                        dtypes,
                        st.mem.bytes_mut(),
                        &mut scratch,
                        worker,
                    )
                    .map_err(|e| (v.worker, FpSts::empty(), e))
                };
                let stop = match outcome {
                    Ok(f) => {
                        flags |= f;
                        None
                    }
                    Err((worker, before, VertexError::Fault(f))) => {
                        flags |= before | f.sts;
                        Some(Stop::Fault(gi, vertex, worker, f))
                    }
                    Err((_, before, VertexError::Engine(e))) => {
                        flags |= before;
                        Some(Stop::Error(e))
                    }
                };
                if let Some(stop) = stop {
                    st.sts |= flags;
                    return TileOutcome {
                        flags,
                        stop: Some(Box::new(stop)),
                    };
                }
                vertex += 1;
            }
        }
        st.sts |= flags;
        TileOutcome { flags, stop: None }
    })
}

/// What every tile of a compute set runs with: the tensors' element types, `$FP_CTL`, the
/// target (a split vertex's slices).
#[derive(Clone, Copy)]
struct TileRun<'a> {
    dtypes: &'a [DType],
    ctl: FpCtl,
    target: &'a Target,
}

/// [`run_tile`] for every tile of `cs` on the current rayon pool (with its `writes`),
/// outcomes in tile order.
fn par_run(
    run: &TileRun,
    cs: &ComputeSet,
    (writes, staging): (&[&[Piece]], &[u8]),
    states: Vec<&mut TileState>,
    gathers: &EarlyGathers,
) -> Vec<TileOutcome> {
    cs.tiles
        .par_iter()
        .zip(states.into_par_iter())
        .enumerate()
        .map(|(i, (w, st))| {
            let pieces = writes.get(i).copied().unwrap_or(&[]);
            run_tile(run, w, (pieces, staging), st, early_of(gathers, i))
        })
        .collect()
}

impl Engine {
    /// How many of the executable's exchanges are large enough for [`Engine::run`] to leave
    /// their writes to the compute set that follows them (module `exchange`).
    pub fn deferring_exchanges(&self) -> usize {
        self.plan.exchanges.iter().filter(|x| x.defers()).count()
    }

    /// How many of those exchanges move their bytes straight from the source tiles inside
    /// [`Engine::run`], on an engine of one host thread (module `exchange::direct`).
    pub fn direct_exchanges(&self) -> usize {
        self.direct.iter().filter(|d| d.is_some()).count()
    }

    /// Whether exchange `x` moves its bytes straight from the source tiles inside
    /// [`Engine::run`] (module `exchange::direct`).
    fn is_direct(&self, x: ExchangeId) -> bool {
        self.direct.get(x.0 as usize).is_some_and(Option::is_some)
    }

    /// How many of those exchanges a compute set just before them gathers early, tile by
    /// tile, inside [`Engine::run`] (module `exchange`), where they do not go direct.
    pub fn early_gathering_exchanges(&self) -> usize {
        (self.plan.exchanges.iter().enumerate())
            .filter(|&(i, x)| x.gathers_early() && !self.is_direct(ExchangeId(i as u32)))
            .count()
    }

    /// Whether compute set `c`, run just before exchange `x`, gathers `x`'s sources early:
    /// when `x` gathers early at all ([`ExchangePlan::gathers_early`]) and `c` writes the
    /// tensors of at least half its source bytes — a reduction's partials, in the host's
    /// cache when the tile's vertices are done. Sources written long before are no cheaper
    /// to read then than in the exchange, and ResNet-50's step measured a few percent
    /// slower with every large-move exchange gathered early.
    /// A direct exchange (module `exchange::direct`) gathers nothing.
    pub(super) fn gathers_after(&self, c: ComputeSetId, x: ExchangeId) -> bool {
        if self.is_direct(x) || !self.plan.exchanges[x.0 as usize].gathers_early() {
            return false;
        }
        // A vertex's output is its last operand.
        let written: std::collections::HashSet<TensorId> = (self.exe.compute_set(c).tiles.iter())
            .flat_map(|t| &t.groups)
            .flat_map(|g| &g.vertices)
            .filter_map(|v| v.operands.last().map(|o| o.tensor))
            .collect();
        let (mut hot, mut all) = (0u64, 0u64);
        for copy in &self.exe.exchange(x).copies {
            all += u64::from(copy.bytes);
            if written.contains(&copy.src_tensor) {
                hot += u64::from(copy.bytes);
            }
        }
        2 * hot >= all
    }

    /// How many of the executable's compute sets run their tiles on the host threads' pool
    /// (those of enough host work, `ComputeSetPlan::on_pool`); the others run on the
    /// calling thread.
    pub fn parallel_compute_sets(&self) -> usize {
        self.plan
            .compute_sets
            .iter()
            .filter(|p| p.on_pool())
            .count()
    }

    /// Runs compute set `id` (started at device cycle `start`); returns its cycles.
    pub(super) fn run_compute_set(
        &mut self,
        step: Option<u32>,
        id: ComputeSetId,
        start: u64,
        early: bool,
    ) -> Result<u64, EngineError> {
        let exe = Arc::clone(&self.exe);
        let cs = exe.compute_set(id);
        let plan = &self.plan.compute_sets[id.0 as usize];
        let run = TileRun {
            dtypes: &self.plan.dtypes,
            ctl: self.ctl,
            target: &exe.target,
        };
        // A pending exchange's writes: each tile's just before its vertices, the other
        // destinations' after them (module `exchange`); a direct one's all at once first
        // where a vertex here writes a byte it reads.
        let (pending, direct) = match self.pending.take() {
            Some(x) => match self.direct.get(x.0 as usize).and_then(Option::as_ref) {
                Some(d) => {
                    let waits = *(self.direct_waits.entry((x, id)))
                        .or_insert_with(|| !d.conflicts(&exe, cs, &plan.dense));
                    if !waits {
                        d.scatter(&mut self.tiles);
                    }
                    (None, waits.then_some(d))
                }
                None => (Some(&self.plan.exchanges[x.0 as usize]), None),
            },
            None => (None, None),
        };
        let writes = pending.map_or_else(Vec::new, |x| x.writes_along(&plan.dense));
        // The exchange that followed this compute set last time, if it defers: each tile
        // gathers its sources for it as soon as its vertices are done.
        let next = (self.follows[id.0 as usize])
            .filter(|&(_, gathers)| early && gathers)
            .map(|(x, _)| (x, &self.plan.exchanges[x.0 as usize]));
        let (buffer, expected) = &mut self.early;
        *expected = None;
        let gathers: EarlyGathers = next.map(|(_, x)| {
            if buffer.len() < x.source_bytes() {
                buffer.resize(x.source_bytes(), 0);
            }
            (x.early_gather(buffer), x.early_moves(&plan.dense))
        });
        let staging = &self.staging[..];
        let outcomes: Vec<TileOutcome> = if let Some(d) = direct {
            // One host thread: each tile's writes read the other tiles' memories.
            let along = d.along(&plan.dense);
            (cs.tiles.iter().zip(&plan.dense).zip(along).enumerate())
                .map(|(i, ((w, &t), k))| {
                    if let Some(k) = k {
                        d.write(&mut self.tiles, k);
                    }
                    let st = &mut self.tiles[t];
                    run_tile(&run, w, (&[], staging), st, early_of(&gathers, i))
                })
                .collect()
        } else {
            let states = select_mut(&mut self.tiles, &plan.dense);
            self.workers.install(plan.on_pool(), |parallel| {
                if parallel {
                    par_run(&run, cs, (&writes, staging), states, &gathers)
                } else {
                    (cs.tiles.iter().zip(states).enumerate())
                        .map(|(i, (w, st))| {
                            let pieces = writes.get(i).copied().unwrap_or(&[]);
                            run_tile(&run, w, (pieces, staging), st, early_of(&gathers, i))
                        })
                        .collect()
                }
            })
        };
        if let Some(d) = direct {
            d.scatter_except(&mut self.tiles, &plan.dense);
        }
        if let Some((x, _)) = next {
            if outcomes.iter().all(|o| o.stop.is_none()) {
                *expected = Some((x, id));
            }
        }
        if let Some(x) = pending {
            x.scatter_except(&mut self.tiles, staging, &plan.dense);
        }
        let mut fault = None;
        for (i, o) in outcomes.into_iter().enumerate() {
            let tile = cs.tiles[i].tile;
            if !o.flags.is_empty() {
                self.step_flags.push((tile, o.flags));
            }
            match o.stop.map(|stop| *stop) {
                Some(Stop::Error(e)) => return Err(e),
                Some(Stop::Fault(group, vertex, worker, f)) if fault.is_none() => {
                    fault = Some((i, (group, vertex, worker, f)))
                }
                _ => {}
            }
        }
        if let Some((i, (group, vertex, worker, f))) = fault {
            let work = &cs.tiles[i];
            let before = groups_cycles(&exe.target, &work.groups[..group]);
            let dump = FpExceptionDump {
                tile: work.tile,
                worker,
                vertex,
                group,
                codelet: work.groups[group].codelet.full_name(),
                compute_set: cs.name.clone(),
                compute_set_id: id.0,
                fp_sts: f.sts,
                fp_ctl: run.ctl,
                trapped: run.ctl.trapping(f.sts),
                element: f.element,
                operands: f.operands,
                cycle: start + before,
                compute_set_cycle: start,
            };
            for &(_, f) in &self.step_flags {
                self.current.flags |= f;
            }
            self.record_flags(&cs.name, start);
            let (tile, trapped, cycle) = (dump.tile, dump.trapped, dump.cycle);
            self.record(|| Event::FpException {
                compute_set: cs.name.clone(),
                tile,
                vertex,
                flags: trapped,
                cycle,
            });
            return Err(EngineError::FpException(Box::new(dump)));
        }
        let plan = &self.plan.compute_sets[id.0 as usize];
        for (&d, &c) in plan.dense.iter().zip(&plan.tile_cycles) {
            self.current.tiles[d].on_tile_execute += c;
        }
        self.current.compute_set_executions[id.0 as usize] += 1;
        let cycles = plan.cycles;
        if self.trace.is_some() {
            let tiles = cs
                .tiles
                .iter()
                .zip(&plan.tile_cycles)
                .map(|(w, &cycles)| TileCycle {
                    tile: w.tile,
                    cycles,
                })
                .collect();
            self.record(|| Event::ComputeSet {
                step,
                id: id.0,
                name: cs.name.clone(),
                cycle: start,
                cycles,
                tiles,
            });
            self.record_flags(&cs.name, start);
        }
        Ok(cycles)
    }

    /// Records a [`Event::FlagsRaised`] for every tile of the last step that raised flags.
    fn record_flags(&mut self, compute_set: &str, cycle: u64) {
        if let Some(trace) = &mut self.trace {
            for &(tile, flags) in &self.step_flags {
                trace.push(Event::FlagsRaised {
                    compute_set: compute_set.to_string(),
                    tile,
                    flags,
                    cycle,
                });
            }
        }
    }

    /// Applies the pending exchange's writes, if one waits (module `exchange`).
    pub(super) fn flush_pending(&mut self) {
        if let Some(x) = self.pending.take() {
            match self.direct.get(x.0 as usize).and_then(Option::as_ref) {
                Some(d) => d.scatter(&mut self.tiles),
                None => {
                    let plan = &self.plan.exchanges[x.0 as usize];
                    plan.scatter(&mut self.tiles, &self.staging, &self.workers);
                }
            }
        }
    }

    /// Runs exchange `id` (with `defer`, a large one leaves its writes pending: module
    /// `exchange`); returns its cycles and bytes moved.
    pub(super) fn run_exchange(
        &mut self,
        step: Option<u32>,
        id: ExchangeId,
        start: u64,
        defer: bool,
    ) -> Result<(u64, u64), EngineError> {
        let exe = Arc::clone(&self.exe);
        let ex = exe.exchange(id);
        let plan = &self.plan.exchanges[id.0 as usize];
        if defer && self.is_direct(id) {
            // Nothing to gather: the writes read the sources where they are.
            self.early.1 = None;
            self.pending = Some(id);
        } else if defer && plan.defers() {
            let (buffer, expected) = &mut self.early;
            match expected.take() {
                // The compute set just run gathered its tiles' sources: the others' now.
                Some((x, cs)) if x == id => {
                    let done = &self.plan.compute_sets[cs.0 as usize].dense;
                    plan.gather_except(&self.tiles, buffer, done);
                    std::mem::swap(&mut self.staging, buffer);
                }
                _ => plan.gather(&self.tiles, &mut self.staging, &self.workers),
            }
            self.pending = Some(id);
        } else {
            plan.apply(&mut self.tiles, &mut self.staging, &self.workers);
        }
        for &(tile, c) in &plan.tile_cycles {
            if let Some(d) = self.index.get(tile) {
                self.current.tiles[d].do_exchange += c;
            }
        }
        self.current.exchange_executions[id.0 as usize] += 1;
        let (cycles, bytes, copies) = (plan.cycles, plan.bytes, ex.copies.len() as u32);
        self.record(|| Event::Exchange {
            step,
            id: id.0,
            name: ex.name.clone(),
            cycle: start,
            cycles,
            bytes,
            copies,
        });
        Ok((cycles, bytes))
    }

    /// Runs the remote-buffer load or store of an offloaded variable; returns its cycles and
    /// bytes (recorded as a stream copy named `TENSOR/load` or `TENSOR/store`).
    pub(super) fn run_remote_copy(
        &mut self,
        step: Option<u32>,
        tensor: TensorId,
        store: bool,
        start: u64,
    ) -> Result<(u64, u64), EngineError> {
        let exe = Arc::clone(&self.exe);
        let t = exe.tensor(tensor);
        let n = t.size_bytes() as usize;
        let slot = self
            .remote
            .get_mut(tensor.0 as usize)
            .ok_or_else(|| EngineError::invalid(format!("'{}' has no remote buffer", t.name)))?;
        if store {
            let mut bytes = vec![0u8; n];
            gather(t, &self.index, &self.tiles, &mut bytes);
            *slot = Some(bytes);
        } else {
            let bytes = slot.as_ref().ok_or_else(|| {
                EngineError::invalid(format!("'{}' has no remote buffer", t.name))
            })?;
            scatter(t, &self.index, &mut self.tiles, bytes);
        }
        let cycles = ipusim_exe::cycles::remote_copy_cycles(&exe.target, n as u64);
        let (direction, what) = if store {
            (StreamDirection::DeviceToHost, "store")
        } else {
            (StreamDirection::HostToDevice, "load")
        };
        self.record(|| Event::StreamCopy {
            step,
            stream: format!("{}/{what}", t.name),
            direction,
            bytes: n as u64,
            cycle: start,
            cycles,
        });
        Ok((cycles, n as u64))
    }

    /// Runs a cross-replica collective as this engine alone sees it: with a `dst`, `tensor`'s
    /// bytes are copied into it, truncated or zero-padded to its size (one replica's
    /// reduce-scatter and all-gather); in place, nothing changes. A host driving several
    /// replicas writes the collective's result over this ([`Engine::write_tensor_bytes`]).
    /// Returns its cycles.
    pub(super) fn run_cross_replica(
        &mut self,
        op: CollectiveOp,
        tensor: TensorId,
        dst: Option<TensorId>,
    ) -> u64 {
        let exe = Arc::clone(&self.exe);
        if let Some(d) = dst {
            let (s, t) = (exe.tensor(tensor), exe.tensor(d));
            let mut bytes = vec![0u8; s.size_bytes() as usize];
            gather(s, &self.index, &self.tiles, &mut bytes);
            bytes.resize(t.size_bytes() as usize, 0);
            scatter(t, &self.index, &mut self.tiles, &bytes);
        }
        ipusim_exe::cycles::cross_replica_cycles(&exe, op, tensor, dst)
    }

    /// Runs one host stream copy; returns its cycles and bytes.
    pub(super) fn run_stream_copy(
        &mut self,
        step: Option<u32>,
        stream: StreamId,
        direction: StreamDirection,
        tensor: TensorId,
        host: &mut dyn HostIo,
        start: u64,
    ) -> Result<(u64, u64), EngineError> {
        let exe = Arc::clone(&self.exe);
        let s = &exe.streams[stream.0 as usize];
        let t = exe.tensor(tensor);
        let n = s.bytes_per_micro_batch as usize;
        // Grown only: shrinking it would make the next large exchange's gather zero-fill
        // the buffer again (a memset of its size per step).
        if self.staging.len() < n {
            self.staging.resize(n, 0);
        }
        match direction {
            StreamDirection::HostToDevice => {
                host.infeed(s, &mut self.staging[..n])?;
                scatter(t, &self.index, &mut self.tiles, &self.staging[..n]);
                self.current.stream_bytes_in += n as u64;
            }
            StreamDirection::DeviceToHost => {
                gather(t, &self.index, &self.tiles, &mut self.staging[..n]);
                host.outfeed(s, &self.staging[..n])?;
                self.current.stream_bytes_out += n as u64;
            }
        }
        let cycles = self.plan.stream_cycles[stream.0 as usize];
        self.record(|| Event::StreamCopy {
            step,
            stream: s.name.clone(),
            direction,
            bytes: n as u64,
            cycle: start,
            cycles,
        });
        Ok((cycles, n as u64))
    }
}

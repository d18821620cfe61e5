//! The resumable machine: [`Engine::settle`] moves the cursor through control nodes to the
//! next program step (starting a run when none is in progress, finishing it when the tree is
//! done), [`Engine::step`] executes that step. `run` and the debugger are loops over these.

use super::program::{Action, Frame, Node};
use super::summary::{Category, Leaf, NextStep, RunSummary, Settled, StepReport, TileCycles};
use super::{Engine, EngineError, Phase};
use crate::category::CategoryCycles;
use crate::host::HostIo;
use crate::trace::{Control, Event};
use ipusim_exe::cycles;
use ipusim_exe::executable::TensorId;
use ipusim_exe::system::SyncScope;

/// What [`Engine::step`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum Stepped {
    /// It executed a program step.
    Step(StepReport),
    /// The run had no step left: it finished (the summary of the run).
    Finished(Box<RunSummary>),
}

impl Engine {
    /// Starts a run: the cursor at the root, a fresh summary.
    fn start_run(&mut self) {
        self.runs += 1;
        self.stack.clear();
        self.stack.push(Frame { node: 0, pos: 0 });
        self.tick = None;
        self.phase = Phase::Running;
        self.last_step = None;
        let exe = &self.exe;
        self.current = RunSummary {
            run: self.runs,
            start_cycle: self.cycle,
            compute_set_executions: vec![0; exe.compute_sets.len()],
            exchange_executions: vec![0; exe.exchanges.len()],
            tiles: (0..self.index.len())
                .map(|d| TileCycles {
                    tile: self.index.tile(d),
                    ..TileCycles::default()
                })
                .collect(),
            ..RunSummary::default()
        };
        let (run, cycle) = (self.runs, self.cycle);
        self.record(|| Event::RunStarted { run, cycle });
    }

    /// Moves the cursor to the next program step, through `Sequence`, `Repeat` and `If`
    /// nodes (an `If` reads its condition and charges its sync here), and returns it; or
    /// finishes the run when none is left. Starts a run when none is in progress (also after
    /// a run stopped on an error). Settling twice without stepping returns the same step.
    pub fn settle(&mut self) -> Result<Settled, EngineError> {
        if self.phase != Phase::Running {
            self.start_run();
        }
        loop {
            let Some(top) = self.stack.last().copied() else {
                self.phase = Phase::Idle;
                let (run, cycle, cycles) = (self.runs, self.cycle, self.current.cycles);
                self.record(|| Event::RunFinished { run, cycle, cycles });
                return Ok(Settled::Finished(Box::new(self.current.clone())));
            };
            let cycle = self.cycle;
            match self.tree.nodes[top.node as usize] {
                Node::Leaf { leaf, step } => {
                    return Ok(Settled::Step(NextStep {
                        node: top.node,
                        step,
                        leaf,
                    }))
                }
                Node::Sequence { first, len } => {
                    match (top.pos < len).then(|| self.tree.children[(first + top.pos) as usize]) {
                        Some(child) => {
                            self.bump();
                            self.stack.push(Frame {
                                node: child,
                                pos: 0,
                            });
                        }
                        None => {
                            self.stack.pop();
                        }
                    }
                }
                Node::Repeat { count, body } => {
                    let node = top.node;
                    if top.pos > 0 {
                        let program = Control::Repeat {
                            iteration: top.pos,
                            count,
                        };
                        self.record(|| Event::Left {
                            node,
                            program,
                            cycle,
                        });
                    }
                    if top.pos < count {
                        self.bump();
                        let program = Control::Repeat {
                            iteration: top.pos + 1,
                            count,
                        };
                        self.record(|| Event::Entered {
                            node,
                            program,
                            cycle,
                        });
                        self.stack.push(Frame { node: body, pos: 0 });
                    } else {
                        self.stack.pop();
                    }
                }
                Node::Pipeline { schedule, .. } => {
                    let action = self.tree.schedules[schedule as usize]
                        .get(top.pos as usize)
                        .copied();
                    match action {
                        None => {
                            self.tick = None;
                            self.stack.pop();
                        }
                        Some(a) => {
                            self.bump();
                            self.pipeline_action(a);
                        }
                    }
                }
                Node::If {
                    condition,
                    then,
                    otherwise,
                } => {
                    let node = top.node;
                    if top.pos == 0 {
                        // The condition may be a pending exchange's destination.
                        self.flush_pending();
                        let taken = self.condition(condition)?;
                        let sync = cycles::sync_cycles(&self.exe.target);
                        self.cycle += sync;
                        self.current.cycles.add(Category::Sync, sync);
                        if let Some(f) = self.stack.last_mut() {
                            f.pos = if taken { 1 } else { 2 };
                        }
                        let program = Control::If { taken };
                        self.record(|| Event::Sync {
                            cycle,
                            cycles: sync,
                            ipu: None,
                        });
                        let cycle = cycle + sync;
                        self.record(|| Event::Entered {
                            node,
                            program,
                            cycle,
                        });
                        self.stack.push(Frame {
                            node: if taken { then } else { otherwise },
                            pos: 0,
                        });
                    } else {
                        let program = Control::If {
                            taken: top.pos == 1,
                        };
                        self.record(|| Event::Left {
                            node,
                            program,
                            cycle,
                        });
                        self.stack.pop();
                    }
                }
            }
        }
    }

    /// Takes one action of a pipeline's schedule: the IPUs of a tick start together (the
    /// clock and the run's categories rewound to the tick's start for each), and the tick's
    /// compute ends with its busiest IPU's (the first of the busiest, in IPU order, as the
    /// static estimate counts it).
    fn pipeline_action(&mut self, action: Action) {
        match action {
            Action::TickStart(_) => {
                self.tick = Some(TickClock {
                    start: self.cycle,
                    base: self.current.cycles,
                    busiest: None,
                    ipu: None,
                });
            }
            Action::IpuStart(ipu) => {
                if let Some(t) = self.tick.as_mut() {
                    t.end_ipu(self.current.cycles);
                    t.ipu = Some(ipu);
                    self.cycle = t.start;
                    self.current.cycles = t.base;
                }
            }
            Action::Run(node) => self.stack.push(Frame { node, pos: 0 }),
            Action::ComputeEnd => {
                if let Some(t) = self.tick.as_mut() {
                    t.end_ipu(self.current.cycles);
                    t.ipu = None;
                    let busiest = t.busiest.unwrap_or(t.base);
                    self.cycle = t.start + busiest.total.saturating_sub(t.base.total);
                    self.current.cycles = busiest;
                }
            }
        }
    }

    /// The IPU whose part of a pipeline tick is running, if any.
    pub(super) fn tick_ipu(&self) -> Option<u32> {
        self.tick.as_ref().and_then(|t| t.ipu)
    }

    /// Advances the top frame's position.
    fn bump(&mut self) {
        if let Some(f) = self.stack.last_mut() {
            f.pos += 1;
        }
    }

    /// The first element of a Bool condition tensor.
    fn condition(&self, t: TensorId) -> Result<bool, EngineError> {
        let tensor = self.exe.tensor(t);
        for s in &tensor.slices {
            for iv in &s.intervals {
                if iv.begin == 0 && iv.end() > 0 {
                    let d = self
                        .index
                        .get(s.tile)
                        .ok_or_else(|| EngineError::internal("condition tile"))?;
                    return Ok(self.tiles[d].mem.bytes()[iv.offset as usize] != 0);
                }
            }
        }
        Err(EngineError::internal(format!(
            "condition '{}' has no first element",
            tensor.name
        )))
    }

    /// Executes the next program step ([`Engine::settle`] first), or finishes the run. On an
    /// error the run stops where it is (see the module docs).
    pub fn step(&mut self, host: &mut dyn HostIo) -> Result<Stepped, EngineError> {
        self.advance(host, false)
    }

    /// [`Engine::step`]; with `defer`, a large exchange may leave its writes to the compute
    /// set that follows it (module `exchange`). Pending writes are applied before any other
    /// step, when the run finishes and when it stops on an error, so that no caller sees
    /// them pending.
    pub(super) fn advance(
        &mut self,
        host: &mut dyn HostIo,
        defer: bool,
    ) -> Result<Stepped, EngineError> {
        // Sources gathered early by the compute set just run serve only an exchange directly
        // after it in the same run; which exchange followed is remembered for the next time.
        let expected = self.early.1.take();
        let next = match self.settle() {
            Ok(Settled::Step(next)) => next,
            Ok(Settled::Finished(summary)) => {
                self.flush_pending();
                return Ok(Stepped::Finished(summary));
            }
            Err(e) => {
                self.flush_pending();
                return Err(e);
            }
        };
        if !matches!(next.leaf, Leaf::Execute { .. }) {
            self.flush_pending();
        }
        // A sync between them changes no memory.
        if matches!(next.leaf, Leaf::Sync | Leaf::ExternalSync) {
            self.early.1 = expected;
        } else if let Some(c) = self.last_compute_set.take() {
            let x = match next.leaf {
                Leaf::Exchange { exchange } => Some(exchange),
                _ => None,
            };
            if self.follows[c.0 as usize].map(|f| f.0) != x {
                self.follows[c.0 as usize] = x.map(|x| (x, self.gathers_after(c, x)));
            }
        }
        let start = self.cycle;
        self.step_flags.clear();
        let result = match next.leaf {
            Leaf::Execute { compute_set } => {
                self.last_compute_set = Some(compute_set);
                self.run_compute_set(next.step, compute_set, start, defer)
                    .map(|c| (c, 0, Category::OnTileExecute))
            }
            Leaf::Exchange { exchange } => {
                self.early.1 = expected;
                self.run_exchange(next.step, exchange, start, defer)
                    .map(|(c, b)| (c, b, Category::DoExchange))
            }
            Leaf::StreamCopy {
                stream,
                direction,
                tensor,
            } => self
                .run_stream_copy(next.step, stream, direction, tensor, host, start)
                .map(|(c, b)| (c, b, Category::StreamCopy)),
            Leaf::CrossReplica { op, tensor, dst } => Ok((
                self.run_cross_replica(op, tensor, dst),
                0,
                Category::DoExchange,
            )),
            Leaf::RemoteCopy { tensor, store } => self
                .run_remote_copy(next.step, tensor, store, start)
                .map(|(c, b)| (c, b, Category::StreamCopy)),
            Leaf::Sync | Leaf::ExternalSync => {
                let scope = match next.leaf {
                    Leaf::ExternalSync => SyncScope::External,
                    _ => SyncScope::Internal,
                };
                let cycles = self.exe.system.sync_cycles(&self.exe.target, scope);
                let ipu = self.tick_ipu();
                self.record(|| Event::Sync {
                    cycle: start,
                    cycles,
                    ipu,
                });
                Ok((cycles, 0, Category::Sync))
            }
        };
        let (cycles, bytes, category) = match result {
            Ok(r) => r,
            Err(e) => {
                self.flush_pending();
                self.phase = Phase::Stopped;
                return Err(e);
            }
        };
        self.cycle += cycles;
        self.current.cycles.add(category, cycles);
        self.current.program_steps += 1;
        self.last_step = Some(next);
        self.stack.pop();
        let flags = self
            .step_flags
            .iter()
            .fold(Default::default(), |a, (_, f)| a | *f);
        self.current.flags |= flags;
        Ok(Stepped::Step(StepReport {
            next,
            cycle: start,
            cycles,
            flags,
            bytes,
        }))
    }
}

/// The clock of a pipeline tick while its IPUs' parts run one after the other on the host.
#[derive(Clone, Copy, Debug)]
pub(super) struct TickClock {
    /// The cycle the tick started at.
    start: u64,
    /// The run's categories at the tick's start.
    base: CategoryCycles,
    /// The run's categories at the end of the busiest IPU's parts so far.
    busiest: Option<CategoryCycles>,
    /// The IPU whose parts run now.
    ipu: Option<u32>,
}

impl TickClock {
    /// Ends the running IPU's parts, whose end state is `now`.
    fn end_ipu(&mut self, now: CategoryCycles) {
        if self.ipu.is_none() {
            return;
        }
        if self.busiest.is_none_or(|b| now.total > b.total) {
            self.busiest = Some(now);
        }
    }
}

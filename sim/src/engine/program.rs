//! The program tree as the engine walks it: the executable's `Program` flattened into
//! numbered nodes (pre-order), and the cursor — a stack of frames with each `Sequence`'s
//! next child, each `Repeat`'s iteration and each `If`'s branch — that makes the engine a
//! resumable machine: it can stop before any program step and continue later, which is all
//! the debugger needs.

use super::error::EngineError;
use super::summary::Leaf;
use ipusim_exe::executable::{Program, ProgramStep, StepKind, SyncScope, TensorId};
use serde::{Deserialize, Serialize};

/// A node of the flattened tree (a sequence's children are `Tree::children[first..first +
/// len]`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Node {
    Sequence {
        first: u32,
        len: u32,
    },
    Repeat {
        count: u32,
        body: u32,
    },
    If {
        condition: TensorId,
        then: u32,
        otherwise: u32,
    },
    Leaf {
        leaf: Leaf,
        step: Option<u32>,
    },
    /// A pipeline: its tick-by-tick schedule is `Tree::schedules[schedule]`.
    Pipeline {
        schedule: u32,
        ticks: u32,
    },
}

/// One action of a pipeline's schedule, in the order the engine takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Tick `t` begins: the IPUs start together.
    TickStart(u32),
    /// The parts of IPU `ipu` follow (they start at the tick's start).
    IpuStart(u32),
    /// Run the subtree at this node.
    Run(u32),
    /// The tick's compute ends when its busiest IPU's does; its sends follow.
    ComputeEnd,
}

/// The flattened program.
#[derive(Clone, Debug)]
pub(crate) struct Tree {
    pub nodes: Vec<Node>,
    pub children: Vec<u32>,
    pub schedules: Vec<Vec<Action>>,
}

impl Tree {
    /// Flattens `program`; leaves other than syncs are matched, in order, with `steps`.
    pub fn new(program: &Program, steps: &[ProgramStep]) -> Tree {
        let mut tree = Tree {
            nodes: Vec::new(),
            children: Vec::new(),
            schedules: Vec::new(),
        };
        let mut next_step = 0u32;
        tree.add(program, steps, &mut next_step);
        tree
    }

    fn add(&mut self, p: &Program, steps: &[ProgramStep], next_step: &mut u32) -> u32 {
        let id = self.nodes.len() as u32;
        self.nodes.push(Node::Sequence { first: 0, len: 0 });
        let node = match p {
            Program::Sequence(children) => {
                let ids: Vec<u32> = children
                    .iter()
                    .map(|c| self.add(c, steps, next_step))
                    .collect();
                let first = self.children.len() as u32;
                self.children.extend(&ids);
                Node::Sequence {
                    first,
                    len: ids.len() as u32,
                }
            }
            Program::Repeat { count, body } => Node::Repeat {
                count: *count,
                body: self.add(body, steps, next_step),
            },
            Program::Pipeline(pl) => self.add_pipeline(pl, steps, next_step),
            Program::If {
                condition,
                then,
                otherwise,
            } => {
                let then = self.add(then, steps, next_step);
                let otherwise = self.add(otherwise, steps, next_step);
                Node::If {
                    condition: *condition,
                    then,
                    otherwise,
                }
            }
            Program::Execute(cs) => Node::Leaf {
                leaf: Leaf::Execute { compute_set: *cs },
                step: step_index(steps, next_step, StepKind::Execute(*cs)),
            },
            Program::Exchange(ex) => Node::Leaf {
                leaf: Leaf::Exchange { exchange: *ex },
                step: step_index(steps, next_step, StepKind::Exchange(*ex)),
            },
            Program::StreamCopy {
                stream,
                direction,
                tensor,
            } => Node::Leaf {
                leaf: Leaf::StreamCopy {
                    stream: *stream,
                    direction: *direction,
                    tensor: *tensor,
                },
                step: step_index(steps, next_step, StepKind::StreamCopy(*stream)),
            },
            Program::Sync(SyncScope::Internal) => Node::Leaf {
                leaf: Leaf::Sync,
                step: None,
            },
            Program::Sync(SyncScope::External) => Node::Leaf {
                leaf: Leaf::ExternalSync,
                step: None,
            },
            // An inter-IPU copy runs as an exchange whose plan is charged at the IPU-Links'
            // rate (`ExchangePlan::new`).
            Program::IpuCopy(ex) => Node::Leaf {
                leaf: Leaf::Exchange { exchange: *ex },
                step: step_index(steps, next_step, StepKind::IpuCopy(*ex)),
            },
            Program::CrossReplica { op, tensor, dst } => Node::Leaf {
                leaf: Leaf::CrossReplica {
                    op: *op,
                    tensor: *tensor,
                    dst: *dst,
                },
                step: step_index(steps, next_step, StepKind::cross_replica(*tensor, *dst)),
            },
            Program::RemoteCopy { tensor, store } => Node::Leaf {
                leaf: Leaf::RemoteCopy {
                    tensor: *tensor,
                    store: *store,
                },
                step: step_index(
                    steps,
                    next_step,
                    StepKind::RemoteCopy {
                        tensor: *tensor,
                        store: *store,
                    },
                ),
            },
        };
        self.nodes[id as usize] = node;
        id
    }

    /// A pipeline: its parts flattened in program order, and its schedule
    /// ([`ipusim_exe::executable::Pipeline::tick`]) as actions.
    fn add_pipeline(
        &mut self,
        pl: &ipusim_exe::executable::Pipeline,
        steps: &[ProgramStep],
        next_step: &mut u32,
    ) -> Node {
        use ipusim_exe::executable::SegmentPart;
        // Node ids per segment: restores, body, saves, send.
        let mut ids: Vec<(Vec<u32>, u32, Vec<u32>, u32)> = Vec::new();
        for s in &pl.segments {
            let restore = s
                .restore
                .iter()
                .map(|p| self.add(p, steps, next_step))
                .collect();
            let body = self.add(&s.body, steps, next_step);
            let save = s
                .save
                .iter()
                .map(|p| self.add(p, steps, next_step))
                .collect();
            let send = self.add(&s.send, steps, next_step);
            ids.push((restore, body, save, send));
        }
        let mut actions = Vec::new();
        for t in 0..pl.ticks() {
            let tick = pl.tick(t);
            actions.push(Action::TickStart(t));
            for (ipu, parts) in &tick.ipus {
                actions.push(Action::IpuStart(*ipu));
                for &p in parts {
                    actions.push(Action::Run(match p {
                        SegmentPart::Restore { segment, slot } => ids[segment].0[slot],
                        SegmentPart::Body { segment } => ids[segment].1,
                        SegmentPart::Save { segment, slot } => ids[segment].2[slot],
                    }));
                }
            }
            actions.push(Action::ComputeEnd);
            for &s in &tick.sends {
                actions.push(Action::Run(ids[s].3));
            }
        }
        self.schedules.push(actions);
        Node::Pipeline {
            schedule: self.schedules.len() as u32 - 1,
            ticks: pl.ticks(),
        }
    }

    /// The tick of a pipeline frame at `pos` (the last tick started before it).
    pub fn tick_of(&self, schedule: u32, pos: u32) -> u32 {
        self.schedules[schedule as usize]
            [..(pos as usize).min(self.schedules[schedule as usize].len())]
            .iter()
            .rev()
            .find_map(|a| match a {
                Action::TickStart(t) => Some(*t),
                _ => None,
            })
            .unwrap_or(0)
    }

    /// Checks every id the tree names against the executable's tables.
    pub fn check(&self, exe: &ipusim_exe::Executable) -> Result<(), EngineError> {
        for n in &self.nodes {
            let ok = match n {
                Node::Leaf {
                    leaf: Leaf::Execute { compute_set },
                    ..
                } => (compute_set.0 as usize) < exe.compute_sets.len(),
                Node::Leaf {
                    leaf: Leaf::Exchange { exchange },
                    ..
                } => (exchange.0 as usize) < exe.exchanges.len(),
                Node::Leaf {
                    leaf:
                        Leaf::StreamCopy {
                            stream,
                            direction,
                            tensor,
                        },
                    ..
                } => exe
                    .streams
                    .get(stream.0 as usize)
                    .is_some_and(|s| s.direction == *direction && s.tensor == *tensor),
                Node::If { condition, .. } => {
                    super::plan::check_condition(exe, *condition)?;
                    true
                }
                _ => true,
            };
            if !ok {
                return Err(EngineError::invalid(format!(
                    "program node {n:?} names something the executable does not have"
                )));
            }
        }
        Ok(())
    }
}

/// The index of the next leaf in `steps` if it is of `kind` (leaves are numbered in
/// pre-order, syncs excluded).
fn step_index(steps: &[ProgramStep], next_step: &mut u32, kind: StepKind) -> Option<u32> {
    let k = *next_step;
    *next_step += 1;
    steps.get(k as usize).filter(|s| s.kind == kind).map(|_| k)
}

/// One frame of the cursor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    /// The node.
    pub node: u32,
    /// Sequence: children started; Repeat: iterations started; If: 0 before the branch is
    /// chosen, 1 + branch (0 then, 1 otherwise) after.
    pub pos: u32,
}

/// Where the cursor is, one entry per enclosing program node (outermost first), as the
/// debugger's `where` prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Place {
    /// Inside child `child` (1-based) of a sequence of `children`.
    Sequence {
        /// Node.
        node: u32,
        /// The current child (1-based).
        child: u32,
        /// Children.
        children: u32,
    },
    /// In iteration `iteration` (1-based) of a repeat of `count`.
    Repeat {
        /// Node.
        node: u32,
        /// The iteration.
        iteration: u32,
        /// The count.
        count: u32,
    },
    /// In tick `tick` (1-based) of a pipeline of `ticks`.
    Pipeline {
        /// Node.
        node: u32,
        /// The tick.
        tick: u32,
        /// The ticks.
        ticks: u32,
    },
    /// In the `then` (true) or `otherwise` branch of an if.
    If {
        /// Node.
        node: u32,
        /// The branch.
        then: bool,
    },
    /// At a program step (about to run, or stopped in it).
    Step {
        /// Node.
        node: u32,
        /// Index in `Executable::steps`.
        step: Option<u32>,
        /// What it does.
        leaf: Leaf,
    },
}

impl Tree {
    /// The places of a cursor stack.
    pub fn places(&self, stack: &[Frame]) -> Vec<Place> {
        stack
            .iter()
            .map(|f| match self.nodes[f.node as usize] {
                Node::Sequence { len, .. } => Place::Sequence {
                    node: f.node,
                    child: f.pos,
                    children: len,
                },
                Node::Repeat { count, .. } => Place::Repeat {
                    node: f.node,
                    iteration: f.pos,
                    count,
                },
                Node::If { .. } => Place::If {
                    node: f.node,
                    then: f.pos == 1,
                },
                Node::Pipeline { schedule, ticks } => Place::Pipeline {
                    node: f.node,
                    tick: self.tick_of(schedule, f.pos) + 1,
                    ticks,
                },
                Node::Leaf { leaf, step } => Place::Step {
                    node: f.node,
                    step,
                    leaf,
                },
            })
            .collect()
    }
}

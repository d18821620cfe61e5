//! The control program of an executable ([`Program`]): its tree of compute sets, exchanges,
//! stream and inter-IPU copies, syncs, repeats and cross-replica collectives; the pipeline's
//! tick schedule ([`Pipeline`]); and the program steps, the tree's leaves in program order
//! ([`StepKind`], [`ProgramStep`]), over which liveness and the memory plan are expressed.
//! Re-exported by [`crate::executable`], whose [`crate::executable::Executable`] holds it.

use crate::ids::{ComputeSetId, ExchangeId, StreamId, TensorId};
use crate::system::SyncScope;
use ipusim_ir::pipeline::Schedule;
use serde::{Deserialize, Serialize};

/// Direction of a host stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StreamDirection {
    /// Infeed: host to device.
    HostToDevice,
    /// Outfeed: device to host.
    DeviceToHost,
}

/// The control program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Program {
    /// Children in order.
    Sequence(Vec<Program>),
    /// Run a compute set.
    Execute(ComputeSetId),
    /// Run an exchange.
    Exchange(ExchangeId),
    /// Run `body` `count` times.
    Repeat { count: u32, body: Box<Program> },
    /// Move one micro-batch of a stream between the host and `tensor`.
    StreamCopy {
        stream: StreamId,
        direction: StreamDirection,
        tensor: TensorId,
    },
    /// Sync of all tiles of one IPU ([`SyncScope::Internal`]) or of every IPU of the system
    /// ([`SyncScope::External`]).
    Sync(SyncScope),
    /// Moves a [`crate::executable::TensorKind::RemoteVariable`] between its remote buffer
    /// and its tiles: a load (`store` false) before its reads, a store after its writes.
    /// Charged as a stream copy of its bytes ([`crate::cycles::remote_copy_cycles`]).
    RemoteCopy { tensor: TensorId, store: bool },
    /// An inter-IPU copy: the exchange's copies move bytes between tiles of different IPUs
    /// over the IPU-Links (all sources are read before any destination is written): a value
    /// crossing into another pipeline stage's IPU.
    IpuCopy(ExchangeId),
    /// A collective across the replicas of the program (in replica order). Without `dst`,
    /// in place: every replica's `tensor` becomes `op` of all replicas' `tensor` (an
    /// all-reduce). With `dst`, `tensor` is read and `dst` written: a reduce-scatter (each
    /// replica's shard of the reduced `tensor`) or an all-gather (every replica's `tensor`
    /// concatenated), the elements in row-major order ([`CollectiveOp`]). With one replica
    /// it leaves the tensor as it is (copies it to `dst`).
    CrossReplica {
        op: CollectiveOp,
        tensor: TensorId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dst: Option<TensorId>,
    },
    /// Micro-batches through the stages of a pipeline, the IPUs working on different
    /// micro-batches at once ([`Pipeline`]).
    Pipeline(Box<Pipeline>),
    /// Run `then` if the first element of `condition` (Bool, on one tile) is non-zero, else
    /// `otherwise`. Not produced by the current lowering (the IR has no control flow); the
    /// static estimate charges a sync plus the slower branch.
    If {
        condition: TensorId,
        then: Box<Program>,
        otherwise: Box<Program>,
    },
}

/// A pipeline ([`Program::Pipeline`]): PopTorch's pipelined execution (the TF-IPU training
/// guide §6.5), where the stages of a model on different IPUs work on different
/// micro-batches at once.
///
/// Micro-batch `m` (`0..micro_batches`) runs segment `s` in tick `s.offset + m·k`, where `k`
/// is the schedule's ticks per micro-batch ([`Pipeline::stride`]: 1 for `Grouped`, where
/// every IPU runs its forward and its backward segment in each tick; 2 for `Interleaved`,
/// where an IPU alternates between a forward tick and a backward one); there are
/// `k·(micro_batches − 1) + max offset + 1` ticks ([`Pipeline::ticks`], [`Pipeline::tick`]). In a tick,
/// every IPU runs its due segments at the same time as the other IPUs, each segment as
/// `restore[m % restore.len()]` (the stash pop of micro-batch `m`, when it has a stash),
/// `body`, `save[m % save.len()]` (its stash push); an IPU runs its segments in the order
/// they are listed, and the tick's compute lasts as long as its busiest IPU. Then the
/// `send`s (inter-IPU copies, each after an external sync) of the segments that ran, in the
/// order listed: what one stage sends in a tick, the next stage reads in the next.
///
/// The pipeline's leaves, in program order, are each segment's restores, body, saves and
/// send, segment by segment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pipeline {
    /// The schedule (`Grouped` or `Interleaved`; absent in older files: `Grouped`).
    #[serde(default = "grouped")]
    pub schedule: Schedule,
    /// Micro-batches (the gradient accumulation count).
    pub micro_batches: u32,
    /// The segments.
    pub segments: Vec<Segment>,
}

/// One stage's forward or backward part on its IPU ([`Pipeline`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    /// Its name (`stage 0 forward`).
    pub name: String,
    /// The IPU it runs on.
    pub ipu: u32,
    /// The tick in which micro-batch 0 runs it.
    pub offset: u32,
    /// Stash pops, one per stash slot (empty: no stash).
    pub restore: Vec<Program>,
    /// The segment's work for one micro-batch.
    pub body: Program,
    /// Stash pushes, one per stash slot (empty: no stash).
    pub save: Vec<Program>,
    /// Its inter-IPU copies, run at the end of a tick in which it ran.
    pub send: Program,
}

/// One part of a segment in a tick ([`Pipeline::tick`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentPart {
    /// `restore[slot]` of segment `segment`.
    Restore { segment: usize, slot: usize },
    /// The body of segment `segment`.
    Body { segment: usize },
    /// `save[slot]` of segment `segment`.
    Save { segment: usize, slot: usize },
}

/// What runs in one tick of a [`Pipeline`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tick {
    /// Per IPU (ascending), its parts in order.
    pub ipus: Vec<(u32, Vec<SegmentPart>)>,
    /// The segments whose sends run after the compute, in order.
    pub sends: Vec<usize>,
}

fn grouped() -> Schedule {
    Schedule::Grouped
}

impl Pipeline {
    /// Ticks between a segment's runs of consecutive micro-batches: 2 for `Interleaved`
    /// (an IPU's forward and backward segments take turns), 1 otherwise.
    pub fn stride(&self) -> u32 {
        match self.schedule {
            Schedule::Interleaved => 2,
            Schedule::Grouped | Schedule::Sequential => 1,
        }
    }

    /// Ticks from a segment's first micro-batch to its last, both included.
    pub fn span(&self) -> u32 {
        match self.micro_batches {
            0 => 0,
            m => (m - 1).saturating_mul(self.stride()).saturating_add(1),
        }
    }

    /// Ticks of the pipeline: a segment's span plus the largest offset (none without
    /// micro-batches).
    pub fn ticks(&self) -> u32 {
        if self.micro_batches == 0 {
            return 0;
        }
        let depth = self.segments.iter().map(|s| s.offset).max().unwrap_or(0);
        self.span().saturating_add(depth)
    }

    /// The micro-batch segment `s` runs in tick `t`, if any.
    pub fn micro_batch(&self, s: &Segment, t: u32) -> Option<u32> {
        let d = t.checked_sub(s.offset)?;
        let k = self.stride();
        (d % k == 0 && d / k < self.micro_batches).then_some(d / k)
    }

    /// What runs in tick `t`.
    pub fn tick(&self, t: u32) -> Tick {
        let mut tick = Tick::default();
        for (i, s) in self.segments.iter().enumerate() {
            let Some(m) = self.micro_batch(s, t) else {
                continue;
            };
            let mut parts = Vec::with_capacity(3);
            if !s.restore.is_empty() {
                parts.push(SegmentPart::Restore {
                    segment: i,
                    slot: m as usize % s.restore.len(),
                });
            }
            parts.push(SegmentPart::Body { segment: i });
            if !s.save.is_empty() {
                parts.push(SegmentPart::Save {
                    segment: i,
                    slot: m as usize % s.save.len(),
                });
            }
            match tick.ipus.iter_mut().find(|(ipu, _)| *ipu == s.ipu) {
                Some((_, p)) => p.extend(parts),
                None => tick.ipus.push((s.ipu, parts)),
            }
            if !matches!(&s.send, Program::Sequence(c) if c.is_empty()) {
                tick.sends.push(i);
            }
        }
        tick.ipus.sort_by_key(|(ipu, _)| *ipu);
        tick
    }

    /// The program of a part.
    pub fn part(&self, p: SegmentPart) -> &Program {
        match p {
            SegmentPart::Restore { segment, slot } => &self.segments[segment].restore[slot],
            SegmentPart::Body { segment } => &self.segments[segment].body,
            SegmentPart::Save { segment, slot } => &self.segments[segment].save[slot],
        }
    }

    /// The pipeline's subprograms in program order (restores, body, saves and send of each
    /// segment).
    pub fn children(&self) -> impl Iterator<Item = &Program> {
        self.segments.iter().flat_map(|s| {
            s.restore
                .iter()
                .chain(std::iter::once(&s.body))
                .chain(s.save.iter())
                .chain(std::iter::once(&s.send))
        })
    }
}

/// The operation of a [`Program::CrossReplica`] collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CollectiveOp {
    /// Element-wise sum over replicas (gradients of data-parallel training).
    AllReduceSum,
    /// Element-wise mean over replicas.
    AllReduceMean,
    /// Replica `r`'s `dst` (`k` elements) is elements `[r k, (r + 1) k)` of the element-wise
    /// mean over replicas of `tensor`, zero-padded to `R k` elements (replicated tensor
    /// sharding's gradient reduction).
    ReduceScatterMean,
    /// Every replica's `dst` is the first `dst`-size elements of the replicas' `tensor`s
    /// concatenated in replica order (the sharded update's result broadcast back).
    AllGather,
}

/// What a program step (a leaf of the program tree) does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StepKind {
    /// `Execute`.
    Execute(ComputeSetId),
    /// `Exchange`.
    Exchange(ExchangeId),
    /// `StreamCopy`.
    StreamCopy(StreamId),
    /// `IpuCopy`.
    IpuCopy(ExchangeId),
    /// `CrossReplica` of a tensor, in place.
    CrossReplica(TensorId),
    /// `CrossReplica` from tensor `src` into tensor `dst`.
    CrossReplicaTo { src: TensorId, dst: TensorId },
    /// `RemoteCopy` of a tensor (a load, or a store).
    RemoteCopy { tensor: TensorId, store: bool },
}

impl StepKind {
    /// The step of a `CrossReplica` of `tensor` (into `dst`, if any).
    pub fn cross_replica(tensor: TensorId, dst: Option<TensorId>) -> StepKind {
        match dst {
            None => StepKind::CrossReplica(tensor),
            Some(dst) => StepKind::CrossReplicaTo { src: tensor, dst },
        }
    }
}

/// One leaf of the program in program order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgramStep {
    /// What it runs.
    pub kind: StepKind,
    /// Its name (the compute set's, exchange's or stream's).
    pub name: String,
}

impl Program {
    /// The program steps of the tree in program order: its leaves (syncs aside), a
    /// `Repeat` body and each pipeline segment's parts listed once.
    pub fn leaves(&self) -> Vec<StepKind> {
        let mut out = Vec::new();
        self.visit_leaves(&mut |p| match p {
            Program::Execute(c) => out.push(StepKind::Execute(*c)),
            Program::Exchange(e) => out.push(StepKind::Exchange(*e)),
            Program::IpuCopy(e) => out.push(StepKind::IpuCopy(*e)),
            Program::StreamCopy { stream, .. } => out.push(StepKind::StreamCopy(*stream)),
            Program::CrossReplica { tensor, dst, .. } => {
                out.push(StepKind::cross_replica(*tensor, *dst))
            }
            Program::RemoteCopy { tensor, store } => out.push(StepKind::RemoteCopy {
                tensor: *tensor,
                store: *store,
            }),
            _ => {}
        });
        out
    }

    /// Every cross-replica collective of the tree in program order: its op, the tensor it
    /// reads and its destination (`None`: in place).
    pub fn collectives(&self) -> Vec<(CollectiveOp, TensorId, Option<TensorId>)> {
        let mut out = Vec::new();
        self.visit_leaves(&mut |p| {
            if let Program::CrossReplica { op, tensor, dst } = p {
                out.push((*op, *tensor, *dst));
            }
        });
        out
    }

    /// Calls `f` on every leaf of the tree (syncs included) in program order, a `Repeat`
    /// body and each pipeline segment's parts once.
    fn visit_leaves(&self, f: &mut impl FnMut(&Program)) {
        match self {
            Program::Sequence(c) => c.iter().for_each(|x| x.visit_leaves(f)),
            Program::Repeat { body, .. } => body.visit_leaves(f),
            Program::Pipeline(pl) => pl.children().for_each(|x| x.visit_leaves(f)),
            Program::If {
                then, otherwise, ..
            } => {
                then.visit_leaves(f);
                otherwise.visit_leaves(f);
            }
            leaf => f(leaf),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(name: &str, ipu: u32, offset: u32, slots: usize) -> Segment {
        let empty = || Program::Sequence(Vec::new());
        Segment {
            name: name.into(),
            ipu,
            offset,
            restore: vec![empty(); slots],
            body: Program::Execute(ComputeSetId(0)),
            save: vec![empty(); slots],
            send: Program::Sequence(vec![Program::IpuCopy(ExchangeId(0))]),
        }
    }

    #[test]
    fn a_two_stage_pipeline_ramps_up_and_down_and_rotates_its_stash() {
        // Grouped, 2 stages: F0 at m, F1 and B1 at m + 1, B0 at m + 2 (3 stash slots).
        let pl = Pipeline {
            schedule: Schedule::Grouped,
            micro_batches: 4,
            segments: vec![
                segment("f0", 0, 0, 3),
                segment("f1", 1, 1, 0),
                segment("b1", 1, 1, 0),
                segment("b0", 0, 2, 0),
            ],
        };
        assert_eq!(pl.ticks(), 6);
        // Tick 0: stage 0's forward alone, saving micro-batch 0 in slot 0.
        let t0 = pl.tick(0);
        assert_eq!(
            t0.ipus,
            vec![(
                0,
                vec![
                    SegmentPart::Restore {
                        segment: 0,
                        slot: 0
                    },
                    SegmentPart::Body { segment: 0 },
                    SegmentPart::Save {
                        segment: 0,
                        slot: 0
                    }
                ]
            )]
        );
        assert_eq!(t0.sends, vec![0]);
        // Tick 3: every segment; stage 0 saves micro-batch 3 in slot 0 again.
        let t3 = pl.tick(3);
        assert_eq!(t3.ipus.len(), 2);
        assert_eq!(t3.ipus[0].1.len(), 4);
        assert!(t3.ipus[0].1.contains(&SegmentPart::Save {
            segment: 0,
            slot: 0
        }));
        assert_eq!(t3.sends, vec![0, 1, 2, 3]);
        // The last tick: stage 0's backward of the last micro-batch only.
        let t5 = pl.tick(5);
        assert_eq!(t5.ipus, vec![(0, vec![SegmentPart::Body { segment: 3 }])]);
        assert_eq!(pl.tick(6), Tick::default());
        // Leaves in program order: each segment's restores, body, saves and send.
        assert_eq!(pl.children().count(), (3 + 1 + 3 + 1) + 3 * 2);
    }

    #[test]
    fn an_interleaved_pipeline_alternates_forward_and_backward_ticks() {
        // Interleaved, 2 stages: F0 at 2m, F1 at 2m + 1, B1 at 2m + 2, B0 at 2m + 3 (2 stash
        // slots): each IPU alternates, never running two segments in one tick.
        let pl = Pipeline {
            schedule: Schedule::Interleaved,
            micro_batches: 3,
            segments: vec![
                segment("f0", 0, 0, 2),
                segment("f1", 1, 1, 0),
                segment("b1", 1, 2, 0),
                segment("b0", 0, 3, 0),
            ],
        };
        assert_eq!((pl.stride(), pl.span(), pl.ticks()), (2, 5, 8));
        let runs: Vec<Vec<(usize, u32)>> = (0..pl.ticks())
            .map(|t| {
                pl.segments
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| pl.micro_batch(s, t).map(|m| (i, m)))
                    .collect()
            })
            .collect();
        assert_eq!(
            runs,
            vec![
                vec![(0, 0)],
                vec![(1, 0)],
                vec![(0, 1), (2, 0)],
                vec![(1, 1), (3, 0)],
                vec![(0, 2), (2, 1)],
                vec![(1, 2), (3, 1)],
                vec![(2, 2)],
                vec![(3, 2)],
            ]
        );
        // Every IPU runs at most one segment per tick; stage 0 saves micro-batch 2 in slot 0.
        for t in 0..pl.ticks() {
            assert!(pl.tick(t).ipus.iter().all(|(_, parts)| parts
                .iter()
                .filter(|p| matches!(p, SegmentPart::Body { .. }))
                .count()
                == 1));
        }
        assert!(pl.tick(4).ipus[0].1.contains(&SegmentPart::Save {
            segment: 0,
            slot: 0
        }));
    }
}

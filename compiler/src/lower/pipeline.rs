//! Pipelined schedules (the TF-IPU training guide §6.5–6.7): the Step phase of a program
//! whose stages run on different IPUs becomes a [`Pipeline`] in which the IPUs work on
//! different micro-batches at once.
//!
//! `Grouped` (PopTorch's default for training): every stage has a forward segment and, in
//! training, a backward one (the nodes named `bwd/…` or `recompute/…` after a stage's
//! nodes). With `S` stages, micro-batch `m` runs the forward of stage `i` in tick `m + i` and
//! its backward in tick `m + 2S − 2 − i`, so the last stage runs both in one tick and the
//! ticks ramp up over `2S − 2` ticks and down over as many: `micro_batches + 2S − 2` ticks.
//! In each tick an IPU runs its forward segment, then its backward one.
//!
//! What a stage's backward reads of its forward's values — what the forward writes, and what
//! the previous stage sent it for that micro-batch — lives on for `2S − 1 − 2i` micro-batches
//! in flight: it is **stashed** (PopTorch's stash FIFO) in as many slots, the forward saving
//! micro-batch `m`'s values in slot `m mod D` and the backward restoring them before it runs;
//! the slots are memory of their own, live for the whole program (in the plan and the
//! report). A stashed value the forward also sends on is put back after the backward ran
//! (`stash_reload`): the send reads it at the end of the tick, after the backward restored
//! an older micro-batch's value into it. Values that cross IPUs move at the end of the tick
//! of the segment that produced them (an external sync and an `IpuCopy`) and are read by
//! the next stage in the next tick; their buffers on both IPUs are live for the whole
//! program too, since each IPU's other work of the tick runs in between.
//!
//! `Interleaved` (the TF-IPU `PipelineSchedule.Interleaved`: "schedules the backward passes
//! whenever the forward passes have just generated some activations"): an IPU alternates
//! between a tick of its forward segment and a tick of its backward one. Micro-batch `m`
//! runs the forward of stage `i` in tick `2m + i` and its backward in tick `2m + 2S − 1 − i`
//! (the last stage's backward in the tick after its forward); the forward and backward
//! ticks of an IPU differ in parity, so no IPU runs two segments in one tick, and a tick
//! lasts as long as its busiest IPU, whether that one runs a forward or a backward segment
//! (hence "slower": different segments wait for each other). The stash of stage `i` holds
//! `S − i` micro-batches instead of Grouped's `2S − 1 − 2i` ("fewer activations"). The
//! ticks number `2(micro_batches − 1) + 2S`.
//!
//! A value that would have to wait more than one tick to be read on another IPU (a skip
//! connection over a stage) is refused with an error naming it.

use super::core::{push_new, Lowerer, Part};
use super::kit::stage::ExchangeBuilder;
use super::ops::elementwise::mapping_of;
use crate::error::CompileError;
use crate::executable::{Pipeline, Program, Segment, TensorId, TensorKind};
use ipusim_ir::pipeline::{Placement, Schedule};
use ipusim_ir::{Graph, NodeId, Op, Phase};
use std::collections::{BTreeSet, HashMap};

/// The segments of a pipelined Step phase.
pub(crate) struct Segments {
    /// `Grouped` or `Interleaved`.
    schedule: Schedule,
    /// Stages.
    stages: u32,
    /// True when the phase has backward segments (training).
    training: bool,
}

impl Segments {
    /// The segments of `g`'s Step phase under `placement`, when its schedule overlaps
    /// stages (`Grouped` or `Interleaved` with more than one stage); `None` otherwise. Every node gets its
    /// segment (`node_segment`, indexed by node id).
    pub fn of(
        g: &Graph,
        placement: &Placement,
    ) -> Result<Option<(Segments, Vec<u32>)>, CompileError> {
        let stages = placement.stages();
        if stages <= 1 || placement.schedule == Schedule::Sequential {
            return Ok(None);
        }
        if placement.shares_an_ipu() {
            return Err(CompileError::Unsupported {
                node: "pipeline".into(),
                op: "Pipeline",
                reason: format!(
                    "the {} schedule runs each of its {stages} stages on an IPU of its own; \
                     pipeline.ipus {:?} puts two on one IPU",
                    placement.schedule, placement.stage_ipus
                ),
            });
        }
        let n = g.ids().map(|i| i.as_usize() + 1).max().unwrap_or(0);
        let mut node_segment = vec![0u32; n];
        let mut training = false;
        for id in g.ids() {
            let stage = placement.stage_of(id).min(stages - 1);
            let backward = is_backward(g, id);
            training |= backward;
            node_segment[id.as_usize()] = if backward {
                stages + (stages - 1 - stage)
            } else {
                stage
            };
        }
        let segments = Segments {
            schedule: placement.schedule,
            stages,
            training,
        };
        Ok(Some((segments, node_segment)))
    }

    /// Segments: the forward ones of stages `0..S`, then (training) the backward ones of
    /// stages `S − 1` down to 0.
    fn count(&self) -> u32 {
        if self.training {
            2 * self.stages
        } else {
            self.stages
        }
    }

    /// The stage of segment `s`.
    fn stage(&self, s: u32) -> u32 {
        if s < self.stages {
            s
        } else {
            2 * self.stages - 1 - s
        }
    }

    /// True for a backward segment.
    fn backward(&self, s: u32) -> bool {
        s >= self.stages
    }

    /// The tick in which micro-batch 0 runs segment `s`.
    fn offset(&self, s: u32) -> u32 {
        let stage = self.stage(s);
        match (self.backward(s), self.schedule) {
            (false, _) => stage,
            (true, Schedule::Interleaved) => 2 * self.stages - 1 - stage,
            (true, _) => 2 * self.stages - 2 - stage,
        }
    }

    /// Micro-batches a forward segment's values wait for their backward (its stash slots):
    /// those whose forward runs from the tick of `m`'s forward until `m`'s backward.
    fn in_flight(&self, stage: u32) -> u32 {
        match (self.training, self.schedule) {
            (false, _) => 1,
            (true, Schedule::Interleaved) => self.stages - stage,
            (true, _) => 2 * self.stages - 1 - 2 * stage,
        }
    }

    /// Ticks between a segment's consecutive micro-batches (`Pipeline::stride`).
    fn stride(&self) -> u32 {
        if self.schedule == Schedule::Interleaved {
            2
        } else {
            1
        }
    }

    fn name(&self, s: u32) -> String {
        let dir = if self.backward(s) {
            "backward"
        } else {
            "forward"
        };
        format!("stage {} {dir}", self.stage(s))
    }
}

/// True for a Step-phase node of the backward pass.
fn is_backward(g: &Graph, id: NodeId) -> bool {
    let node = g.node(id);
    node.phase == Phase::Step
        && (node.name.starts_with("bwd/") || node.name.starts_with(ipusim_ir::recompute::PREFIX))
}

/// The tensors a program reads and writes.
fn accesses(
    lw: &Lowerer,
    p: &Program,
    reads: &mut BTreeSet<TensorId>,
    writes: &mut BTreeSet<TensorId>,
) {
    match p {
        Program::Sequence(c) => c.iter().for_each(|x| accesses(lw, x, reads, writes)),
        Program::Repeat { body, .. } => accesses(lw, body, reads, writes),
        Program::Execute(cs) => {
            // A compute set's vertices name a few tensors millions of times: gathered
            // first, each set filled once per tensor.
            let (mut r, mut w) = (Vec::new(), Vec::new());
            for tw in &lw.compute_set(*cs).tiles {
                for v in tw.groups.iter().flat_map(|g| &g.vertices) {
                    if let Some((out, ins)) = v.operands.split_last() {
                        push_new(&mut w, out.tensor);
                        ins.iter().for_each(|o| push_new(&mut r, o.tensor));
                    }
                }
            }
            extend_distinct(reads, r);
            extend_distinct(writes, w);
        }
        Program::Exchange(ex) | Program::IpuCopy(ex) => {
            let (mut r, mut w) = (Vec::new(), Vec::new());
            for c in &lw.exchange(*ex).copies {
                push_new(&mut r, c.src_tensor);
                push_new(&mut w, c.dst_tensor);
            }
            extend_distinct(reads, r);
            extend_distinct(writes, w);
        }
        Program::StreamCopy {
            tensor, direction, ..
        } => {
            if *direction == crate::executable::StreamDirection::HostToDevice {
                writes.insert(*tensor);
            } else {
                reads.insert(*tensor);
            }
        }
        Program::CrossReplica { tensor, dst, .. } => {
            reads.insert(*tensor);
            writes.insert(dst.unwrap_or(*tensor));
        }
        Program::RemoteCopy { tensor, store } => {
            if *store {
                reads.insert(*tensor);
            } else {
                writes.insert(*tensor);
            }
        }
        Program::If {
            then, otherwise, ..
        } => {
            accesses(lw, then, reads, writes);
            accesses(lw, otherwise, reads, writes);
        }
        Program::Pipeline(pl) => pl.children().for_each(|x| accesses(lw, x, reads, writes)),
        Program::Sync(_) => {}
    }
}

/// Adds the tensors of `list` to `set`, each once.
fn extend_distinct(set: &mut BTreeSet<TensorId>, mut list: Vec<TensorId>) {
    list.sort_unstable();
    list.dedup();
    set.extend(list);
}

/// The pipeline of the Step phase lowered as `parts` over `micro_batches`; returns it and
/// the tensors that must stay live for the whole program (stash slots, inter-IPU copies'
/// sources and destinations).
pub(crate) fn build(
    lw: &mut Lowerer,
    segs: &Segments,
    parts: Vec<(Part, Program)>,
    micro_batches: u32,
) -> Result<(Program, Vec<TensorId>), CompileError> {
    // The stashes are found from what the parts' exchanges read and write.
    lw.settle();
    let n = segs.count() as usize;
    let mut bodies: Vec<Vec<Program>> = vec![Vec::new(); n];
    let mut sends: Vec<Vec<Program>> = vec![Vec::new(); n];
    for (part, p) in parts {
        match part {
            Part::Body(s) => bodies[(s as usize).min(n - 1)].push(p),
            Part::Send(s) => sends[(s as usize).min(n - 1)].push(p),
        }
    }
    check_crossings(lw, segs)?;
    let mut persistent: Vec<TensorId> = Vec::new();
    for send in &sends {
        let (mut r, mut w) = (BTreeSet::new(), BTreeSet::new());
        accesses(lw, &Program::Sequence(send.clone()), &mut r, &mut w);
        persistent.extend(r);
        persistent.extend(w);
    }
    let mut segments: Vec<Segment> = (0..n as u32)
        .map(|s| Segment {
            name: segs.name(s),
            ipu: lw.stage_ipu(segs.stage(s)),
            offset: segs.offset(s),
            restore: Vec::new(),
            body: Program::Sequence(std::mem::take(&mut bodies[s as usize])),
            save: Vec::new(),
            send: Program::Sequence(std::mem::take(&mut sends[s as usize])),
        })
        .collect();
    // Stashes: what a stage's forward writes and its backward reads, for every micro-batch
    // in flight.
    if segs.training {
        for stage in 0..segs.stages {
            let slots = segs.in_flight(stage);
            if slots <= 1 {
                continue;
            }
            let (f, b) = (stage as usize, (2 * segs.stages - 1 - stage) as usize);
            let (mut fr, mut fw) = (BTreeSet::new(), BTreeSet::new());
            accesses(lw, &segments[f].body, &mut fr, &mut fw);
            // What the segments one tick ahead sent to this stage's IPU for the micro-batch.
            let ipu = segments[f].ipu;
            for s in 0..n {
                if segments[s].offset + 1 == segments[f].offset {
                    let (mut sr, mut sw) = (BTreeSet::new(), BTreeSet::new());
                    accesses(lw, &segments[s].send, &mut sr, &mut sw);
                    fw.extend(sw.into_iter().filter(|&t| lw.tensor_ipu(t) == ipu));
                }
            }
            let (mut br, mut bw) = (BTreeSet::new(), BTreeSet::new());
            accesses(lw, &segments[b].body, &mut br, &mut bw);
            let stashed: Vec<TensorId> = fw
                .intersection(&br)
                .copied()
                .filter(|&t| {
                    !matches!(
                        lw.tensor(t).kind,
                        TensorKind::Variable | TensorKind::Constant
                    )
                })
                .collect();
            if stashed.is_empty() {
                continue;
            }
            // A stashed value the forward also sends to the next stage (a stage's output its
            // own backward reads, as a ReLU's gradient reads its output) is sent at the end
            // of the tick, after the backward restored an older micro-batch's value into it:
            // the backward puts the value of the forward's micro-batch back once it has run
            // (from the slot the forward saved it to in the same tick, `delta` micro-batches
            // ahead), so that the send reads what the forward wrote.
            let (mut sr, mut sw) = (BTreeSet::new(), BTreeSet::new());
            accesses(lw, &segments[f].send, &mut sr, &mut sw);
            let sent: Vec<TensorId> = stashed.iter().copied().filter(|t| sr.contains(t)).collect();
            let ahead = segments[b].offset - segments[f].offset;
            let delta = ahead
                .is_multiple_of(segs.stride())
                .then(|| ahead / segs.stride());
            let (save, restore, slot_tensors) =
                stash(lw, &segments[f].name.clone(), &stashed, slots);
            let reload = match delta {
                Some(d) if !sent.is_empty() => reload(
                    lw,
                    &segments[b].name.clone(),
                    &stashed,
                    &slot_tensors,
                    &sent,
                    d,
                ),
                _ => Vec::new(),
            };
            segments[f].save = save;
            segments[b].restore = restore;
            segments[b].save = reload;
            persistent.extend(slot_tensors);
        }
    }
    let pipeline = Pipeline {
        schedule: segs.schedule,
        micro_batches,
        segments,
    };
    Ok((Program::Pipeline(Box::new(pipeline)), persistent))
}

/// The stash of `tensors` in `slots` slots: per slot, the save (tensors to slot) and the
/// restore (slot to tensors) programs, and the slot tensors. A slot of a tensor is laid out
/// like it, so both are on-tile copies.
fn stash(
    lw: &mut Lowerer,
    segment: &str,
    tensors: &[TensorId],
    slots: u32,
) -> (Vec<Program>, Vec<Program>, Vec<TensorId>) {
    let mut slot_tensors: Vec<Vec<TensorId>> = Vec::new();
    for &t in tensors {
        let (name, node, dtype, shape) = {
            let x = lw.tensor(t);
            (x.name.clone(), x.node, x.dtype, x.shape.clone())
        };
        let mapping = mapping_of(lw, t);
        let ipu = lw.tensor_ipu(t);
        slot_tensors.push(
            (0..slots)
                .map(|s| {
                    lw.new_tensor_on(
                        ipu,
                        format!("{name}/stash{s}"),
                        node,
                        TensorKind::Activation,
                        dtype,
                        shape.clone(),
                        mapping.clone(),
                    )
                })
                .collect(),
        );
    }
    let mut save = Vec::new();
    let mut restore = Vec::new();
    for s in 0..slots as usize {
        let pairs: Vec<(TensorId, TensorId)> = tensors
            .iter()
            .zip(&slot_tensors)
            .map(|(&t, slot)| (t, slot[s]))
            .collect();
        let mut eb = ExchangeBuilder::default();
        for &(t, slot) in &pairs {
            copy_tensor(lw, t, slot, &mut eb);
        }
        save.push(lw.exchange_program(format!("{segment}/stash_save{s}"), eb.finish()));
        let mut eb = ExchangeBuilder::default();
        for &(t, slot) in &pairs {
            copy_tensor(lw, slot, t, &mut eb);
        }
        restore.push(lw.exchange_program(format!("{segment}/stash_restore{s}"), eb.finish()));
    }
    (save, restore, slot_tensors.into_iter().flatten().collect())
}

/// The programs that put the stashed `sent` (among `tensors`, whose slots are `slot_tensors`,
/// `slots` per tensor in order) back from the slot `delta` micro-batches ahead of the one
/// restored: per slot `s` of the segment's micro-batch, slot `(s + delta) mod slots` to the
/// tensor.
fn reload(
    lw: &mut Lowerer,
    segment: &str,
    tensors: &[TensorId],
    slot_tensors: &[TensorId],
    sent: &[TensorId],
    delta: u32,
) -> Vec<Program> {
    let slots = slot_tensors.len() / tensors.len().max(1);
    (0..slots)
        .map(|s| {
            let from_slot = (s + delta as usize) % slots;
            let mut eb = ExchangeBuilder::default();
            for (i, &t) in tensors.iter().enumerate() {
                if sent.contains(&t) {
                    copy_tensor(lw, slot_tensors[i * slots + from_slot], t, &mut eb);
                }
            }
            lw.exchange_program(format!("{segment}/stash_reload{s}"), eb.finish())
        })
        .collect()
}

/// On-tile copies of every element of `from` into `to`, laid out alike.
fn copy_tensor(lw: &mut Lowerer, from: TensorId, to: TensorId, eb: &mut ExchangeBuilder) {
    let slices = lw.tensor(from).slices.clone();
    for s in &slices {
        for iv in &s.intervals {
            let at = lw.position(to, iv.begin);
            let len = u64::from(iv.len);
            eb.copy_elems(lw, from, iv.begin, len, to, s.tile.tile(), at);
        }
    }
}

/// Every value read on another IPU is read one tick after the segment that produced it ran,
/// or by the backward of a stage whose forward runs that tick (from the stage's stash);
/// variables and constants, which the Step phase does not change between reads, at any
/// time.
fn check_crossings(lw: &Lowerer, segs: &Segments) -> Result<(), CompileError> {
    let mut seen: HashMap<(NodeId, u32), ()> = HashMap::new();
    for &(id, reader) in lw.crossings() {
        if seen.insert((id, reader), ()).is_some() {
            continue;
        }
        let node = lw.graph().node(id);
        if matches!(node.op, Op::Variable { .. } | Op::Constant { .. }) {
            continue;
        }
        let producer = lw.segment_of(id);
        let tick = |offset: u32| match segs.stride() {
            1 => format!("m + {offset}"),
            k => format!("{k}m + {offset}"),
        };
        let (a, b) = (segs.offset(producer), segs.offset(reader));
        let stashed = segs.backward(reader) && segs.offset(segs.stage(reader)) == a + 1;
        if b != a + 1 && !stashed {
            return Err(CompileError::Unsupported {
                node: node.name.clone(),
                op: node.op.name(),
                reason: format!(
                    "its value crosses from {} (tick {}) to {} (tick {}); the {} schedule \
                     passes a value to the next stage in the next tick only (choose split \
                     points that no value skips)",
                    segs.name(producer),
                    tick(a),
                    segs.name(reader),
                    tick(b),
                    segs.schedule,
                ),
            });
        }
    }
    Ok(())
}

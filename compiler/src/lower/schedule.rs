//! The order the driver lowers a graph's nodes in.
//!
//! The base order is topological ([`topological`]): the Step-phase nodes, then the
//! Update-phase nodes — every weight update after the whole step, every gradient held until
//! then, as PopART schedules it by default (`SessionOptions::delayVarUpdates = true` gives
//! its `VarUpdateOp`s the lowest schedule priority). With `early_weight_update`
//! (`--early-weight-update`, PopART's `delayVarUpdates = false`), when a weight update
//! follows every micro-batch on one IPU — one micro-batch per update, one replica, no
//! pipeline, the optimizer state on chip — [`update_early`] moves each weight's update up to
//! just after the gradient it reads and the step's last read of the weight, so the update
//! frees its gradient there and the step's peak of temporaries no longer holds every
//! gradient of the model. The values do not change: every update still reads the weight's
//! old value (it runs after every read of it in the step), and an assignment not done in
//! place still takes effect at the end of the iteration ([`super`]'s in-place rule decides).

use super::core::Lowerer;
use super::ops;
use crate::error::CompileError;
use ipusim_ir::{Graph, NodeId, Op, Phase};
use std::collections::{HashMap, HashSet};

/// Node ids in a topological order: ascending ids when that is one (graphs built by adding
/// inputs first), else petgraph's order.
pub(super) fn topological(g: &Graph) -> Result<Vec<NodeId>, CompileError> {
    let ids: Vec<NodeId> = g.ids().collect();
    if ids
        .iter()
        .all(|&id| g.node(id).inputs.iter().all(|&i| i < id))
    {
        Ok(ids)
    } else {
        Ok(g.topo_order()?)
    }
}

/// Whether the Update phase may run inside the Step phase's body: one micro-batch per
/// update and replica, no pipeline, no offloaded optimizer state, and no variable whose
/// Step-phase assignment the update would have to see (or that both phases assign).
pub(super) fn can_update_early(lw: &Lowerer, pipelined: bool, live: &[bool]) -> bool {
    let options = lw.options();
    if !options.early_weight_update
        || pipelined
        || options.gradient_accumulation != 1
        || lw.replicas() != 1
        || options.offload_optimizer_state
    {
        return false;
    }
    let g = lw.graph();
    let assigned = |phase: Phase| -> HashSet<NodeId> {
        g.nodes()
            .filter(|(id, n)| n.phase == phase && matches!(n.op, Op::Assign) && live[id.as_usize()])
            .map(|(_, n)| n.inputs[0])
            .collect()
    };
    let in_step = assigned(Phase::Step);
    let in_update = assigned(Phase::Update);
    let update_reads_step_state = g.nodes().any(|(id, n)| {
        n.phase == Phase::Update
            && live[id.as_usize()]
            && n.inputs.iter().any(|i| in_step.contains(i))
    });
    !in_update.is_empty() && !update_reads_step_state && in_step.is_disjoint(&in_update)
}

/// `order` with each Update-phase node moved up to just after the last Step-phase node it
/// must follow: its Step-phase inputs other than sources (a sum reduction that waits for a
/// later one of its batch counts at that one, [`ops::reduce::batches`]), the places of its
/// Update-phase inputs, and every Step-phase read of a variable it reads — directly, through
/// a node that may share or defer reading its storage, or in a fused group whose root runs
/// later. Ties keep `order`'s order, so the result is topological. Update nodes that follow
/// no Step node come first.
pub(super) fn update_early(lw: &Lowerer, order: &[NodeId], live: &[bool]) -> Vec<NodeId> {
    let g = lw.graph();
    let is_live = |id: NodeId| live[id.as_usize()];
    let step: Vec<NodeId> = order
        .iter()
        .copied()
        .filter(|&id| g.node(id).phase == Phase::Step)
        .collect();
    let mut pos: HashMap<NodeId, usize> = step.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    // A reduction lowered with a later member of its batch exists from that member on.
    let live_step: Vec<NodeId> = step.iter().copied().filter(|&id| is_live(id)).collect();
    for (&trigger, members) in &ops::reduce::batches(lw, &live_step).by_trigger {
        let at = pos[&trigger];
        for m in members {
            pos.insert(*m, at);
        }
    }
    // Where a Step node reads its inputs: a fused member when its group's root runs.
    let reads_at = |c: NodeId| pos.get(&lw.fused_into(c).unwrap_or(c)).copied();
    // The variable whose storage a Step node may share or defer reading (a reshape, a
    // folded transpose or broadcast, a cast a reduction absorbs, an empty reduction).
    let mut storage: HashMap<NodeId, NodeId> = HashMap::new();
    let mut last_read: HashMap<NodeId, usize> = HashMap::new();
    for &s in &step {
        let n = g.node(s);
        if matches!(n.op, Op::Variable { .. }) {
            storage.insert(s, s);
            continue;
        }
        if !is_live(s) {
            continue;
        }
        for &input in &n.inputs {
            if let (Some(&v), Some(at)) = (storage.get(&input), reads_at(s)) {
                let e = last_read.entry(v).or_insert(at);
                *e = (*e).max(at);
            }
        }
        let view = matches!(
            n.op,
            Op::Reshape { .. }
                | Op::Transpose { .. }
                | Op::Broadcast { .. }
                | Op::Cast { .. }
                | Op::ReduceSum { .. }
                | Op::ReduceMean { .. }
        );
        if let (true, Some(&v)) = (view, n.inputs.first().and_then(|i| storage.get(i))) {
            storage.insert(s, v);
        }
    }
    // The Step position each Update node follows (None: before every Step node).
    let mut after: HashMap<NodeId, Option<usize>> = HashMap::new();
    let mut placed: Vec<(Option<usize>, NodeId)> = Vec::new();
    for &u in order {
        if g.node(u).phase != Phase::Update {
            continue;
        }
        let mut at: Option<usize> = None;
        for &i in &g.node(u).inputs {
            // A source is there from the start (the lowering places it when first read).
            let follows = match g.node(i).phase {
                _ if g.node(i).op.is_source() => None,
                Phase::Step => pos.get(&i).copied(),
                Phase::Update => after.get(&i).copied().flatten(),
            };
            at = at.max(follows).max(last_read.get(&i).copied());
        }
        after.insert(u, at);
        placed.push((at, u));
    }
    // Stable: nodes after the same Step position keep `order`'s order.
    placed.sort_by_key(|&(at, _)| at.map_or(0, |p| p + 1));
    let mut out = Vec::with_capacity(order.len());
    let mut next = placed.iter().peekable();
    while let Some(&&(None, u)) = next.peek() {
        out.push(u);
        next.next();
    }
    for (i, &s) in step.iter().enumerate() {
        out.push(s);
        while let Some(&&(Some(p), u)) = next.peek() {
            if p != i {
                break;
            }
            out.push(u);
            next.next();
        }
    }
    out
}

//! Lowering of a graph to tensors on tiles, vertices, compute sets, exchanges and the program
//! tree: the driver. It schedules the nodes, lowers sources, streams and assignments itself,
//! and reaches every other op through the per-op table of [`ops`].
//!
//! Modules, and which may use which (no circles):
//!
//! | module | owns | uses |
//! |---|---|---|
//! | [`core`] | the lowering context ([`core::Lowerer`]) behind typed accessors; placing tensors, emitting supersteps (their exchanges' copies built on a thread of their own) and stream copies | `kit::mapping`, `kit::planner` (data only) |
//! | [`kit`] | shared building blocks: tile mapping, staging and exchanges, the matmul planner, fills, permutations, row ops, the cross-tile reduction | `core` |
//! | [`ops`] | one module per op family and the per-op table | `core`, `kit` |
//! | [`fusion`] | which chains of element-wise nodes one fused vertex computes | `core`, `ops` (the element-wise codelets) |
//! | [`absorb`] | which widening casts (and their squares) a sum reduction reads itself | `core` |
//! | [`schedule`] | the order nodes are lowered in: topological, or each weight update moved up to its gradient (`early_weight_update`) | `core`, `ops` (reduction batches) |
//! | this driver | phases, in-place assignment, inputs, outfeeds, assigns | `core`, `kit`, `ops`, `fusion`, `absorb`, `schedule` |
//!
//! Op modules never call each other; what two families share lives in `kit`.
//!
//! Schedule: the Step-phase nodes in topological order, then the Update-phase nodes; with
//! `early_weight_update` and one micro-batch per update on one IPU, the Update-phase nodes
//! join the Step phase's body, each weight's update just after its gradient
//! ([`schedule::update_early`]). Each phase body starts with the host-to-device stream
//! copies of its `Input`s and ends with its `Assign`s (variables take their new values at
//! the end of the phase). An `Assign` whose
//! value is an element-wise op reading the variable itself (directly, or as a leaf of the
//! fused group the value is the root of), computed after every other read of the variable in
//! that phase, is done in place: the op writes straight into the variable (PopLibs'
//! `scaledAddTo`, and PopART's in-place optimizer updates such as `AdamVarUpdate`). A
//! composite op's sum reductions are lowered together, by the last of each batch
//! ([`ops::reduce::batches`]), their supersteps shared as PopLibs' `reduceMany` shares them.
//! Each op becomes one or more BSP supersteps: `Sync`, an optional `Exchange` that gathers
//! its operands onto the tiles that need them, and an `Execute`.
//! Dead nodes (that reach no `Outfeed` or `Assign`) are not lowered.

pub(crate) mod absorb;
pub(crate) mod core;
pub(crate) mod fusion;
pub(crate) mod kit;
pub(crate) mod ops;
pub(crate) mod pipeline;
mod schedule;

use crate::error::CompileError;
use crate::executable::{Program, StreamDirection, TensorId, TensorKind};
use crate::options::CompileOptions;
use crate::target::Target;
pub(crate) use core::Lowered;
use core::{Hooks, Lowerer};
use ipusim_ir::pipeline::Placement;
use ipusim_ir::{Graph, NodeId, Op, Phase};
use kit::fill;
use kit::permute;
use kit::stage::ExchangeBuilder;
use std::collections::HashMap;

/// Lowers `g` for `target`, each node on the IPU `placement` gives it.
pub(crate) fn lower(
    g: &Graph,
    target: &Target,
    options: &CompileOptions,
    placement: &Placement,
) -> Result<Lowered, CompileError> {
    let order = schedule::topological(g)?;
    let live = live_nodes(g);
    check_phases(g, &order, &live)?;
    let hooks = Hooks {
        operand_layout: ops::operand_layout,
    };
    let mut lw = Lowerer::new(g, target, options, hooks, placement);
    let segments = match pipeline::Segments::of(g, placement)? {
        Some((segs, node_segment)) => {
            lw.set_segments(node_segment);
            Some(segs)
        }
        None => None,
    };
    let reduce_inputs = absorb::plan(&lw, &order, &live);
    if options.elementwise_fusion {
        let groups = fusion::plan(&lw, &order, &live, &reduce_inputs);
        lw.set_fused(groups);
    }
    lw.set_reduce_inputs(reduce_inputs);
    // One micro-batch per update on one IPU: each weight's update right after its gradient
    // (fused groups and absorbed casts never mix phases, so they hold in either order).
    let early = schedule::can_update_early(&lw, segments.is_some(), &live);
    let order = if early {
        schedule::update_early(&lw, &order, &live)
    } else {
        order
    };
    // The phase whose body lowers a node's phase.
    let body = move |p: Phase| if early { Phase::Step } else { p };
    plan_inplace(&mut lw, &order, &live, body);
    let mut phases = Vec::new();
    let mut pipelined = None;
    for phase in [Phase::Step, Phase::Update] {
        let nodes: Vec<NodeId> = order
            .iter()
            .copied()
            .filter(|&id| body(g.node(id).phase) == phase && live[id.as_usize()])
            .collect();
        for &id in &nodes {
            if let Op::Input { .. } = g.node(id).op {
                check_fits(g, target, id)?;
                lw.set_ipu_of(id);
                lower_input(&mut lw, id)?;
            }
        }
        if phase == Phase::Update && lw.replicas() > 1 {
            all_reduce_gradients(&mut lw, &nodes)?;
        }
        let mut assigns = Vec::new();
        // A composite's sums in the same compute sets (PopLibs' `reduceMany`): each batch
        // is lowered by its last member.
        let batches = ops::reduce::batches(&lw, &nodes);
        let waiting: std::collections::HashSet<NodeId> = batches
            .by_trigger
            .values()
            .flat_map(|m| m[..m.len() - 1].iter().copied())
            .collect();
        for &id in &nodes {
            let node = g.node(id);
            // (a sum reduction may have been lowered already, with an earlier batch; a
            // batch's trigger still lowers the members waiting for it)
            let sum = matches!(node.op, Op::ReduceSum { .. } | Op::ReduceMean { .. });
            let done = sum && !batches.by_trigger.contains_key(&id) && lw.value_of(id).is_ok();
            if lw.fused_into(id).is_some() || waiting.contains(&id) || done {
                continue;
            }
            check_fits(g, target, id)?;
            lw.set_ipu_of(id);
            match &node.op {
                Op::Input { .. } | Op::Variable { .. } | Op::Constant { .. } => {}
                Op::Assign => assigns.push(id),
                Op::Outfeed { stream } => lower_outfeed(&mut lw, id, stream.clone())?,
                Op::ReduceSum { .. } | Op::ReduceMean { .. } => {
                    let one = [id];
                    let members = batches.by_trigger.get(&id).map_or(&one[..], Vec::as_slice);
                    ops::reduce::lower_batch(&mut lw, members, batches.later(id))?;
                }
                op => (ops::lowering(op).lower)(&mut lw, id)?,
            }
            lw.forget_indexes();
        }
        // The assigns of each IPU, IPU by IPU (each is one superstep on its IPU; in a
        // pipeline, one per segment of the values assigned).
        let mut by_ipu: Vec<(u32, u32, NodeId)> = assigns
            .iter()
            .map(|&a| {
                let n = g.node(a);
                (placement.ipu_of(n.inputs[0]), lw.segment_of(n.inputs[1]), a)
            })
            .collect();
        by_ipu.sort_by_key(|&(ipu, seg, _)| (ipu, seg));
        for chunk in by_ipu.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1)) {
            let ids: Vec<NodeId> = chunk.iter().map(|&(_, _, a)| a).collect();
            lw.set_ipu_of(g.node(ids[0]).inputs[0]);
            lw.set_segment(chunk[0].1);
            lower_assigns(&mut lw, phase, &ids)?;
        }
        // Offloaded optimizer state back to its remote buffers once the update wrote it.
        lw.store_remote();
        match (&segments, phase) {
            (Some(segs), Phase::Step) => {
                let parts = lw.take_parts();
                pipelined = Some(pipeline::build(
                    &mut lw,
                    segs,
                    parts,
                    options.gradient_accumulation,
                )?);
                phases.push(Vec::new());
            }
            _ => phases.push(lw.take_body()),
        }
    }
    // Variables no op read still hold model state: place them too.
    for &id in &order {
        if matches!(g.node(id).op, Op::Variable { .. }) {
            lw.set_ipu_of(id);
            lw.value(id)?;
        }
    }
    let update = phases.pop().unwrap_or_default();
    let step = phases.pop().unwrap_or_default();
    let mut iteration = match &pipelined {
        Some((p, _)) => vec![p.clone()],
        None => vec![Program::Repeat {
            count: options.gradient_accumulation,
            body: Box::new(Program::Sequence(step)),
        }],
    };
    if !update.is_empty() {
        iteration.push(Program::Sequence(update));
    }
    let program = Program::Sequence(vec![Program::Repeat {
        count: options.device_iterations,
        body: Box::new(Program::Sequence(iteration)),
    }]);
    // Every tensor's usage over the steps in the order they run (a pipeline's reorder first).
    let persistent = match &pipelined {
        Some((_, persistent)) => {
            lw.rebuild_steps(program.leaves());
            persistent.as_slice()
        }
        None => &[],
    };
    lw.settle_usage(persistent);
    let values = lw.node_values(
        order
            .iter()
            .copied()
            .filter(|&id| live[id.as_usize()] || matches!(g.node(id).op, Op::Variable { .. })),
    );
    Ok(lw.into_lowered(program, values))
}

/// Refuses a value of the step (an activation, an infeed, a constant) that alone needs more
/// bytes than one IPU's tile memory ([`CompileError::OutOfMemory`]): no layout of it fits,
/// and laying it out would cost the host memory in proportion to its elements (a broadcast
/// or a pad to a huge shape, an image size or batch far beyond the chip). Variables and the
/// update's values are left to the memory plan: optimizer state may be sharded over the
/// replicas or kept in streaming memory.
fn check_fits(g: &Graph, target: &Target, id: NodeId) -> Result<(), CompileError> {
    let node = g.node(id);
    if node.phase != Phase::Step
        || matches!(
            node.op,
            Op::Variable { .. } | Op::Assign | Op::Outfeed { .. }
        )
    {
        return Ok(());
    }
    let bytes = (node.ty.num_elements() as u64).saturating_mul(node.ty.dtype.size_bytes() as u64);
    let capacity = u64::from(target.tiles) * u64::from(target.bytes_per_tile);
    if bytes <= capacity {
        return Ok(());
    }
    Err(CompileError::OutOfMemory {
        node: node.name.clone(),
        ty: node.ty.to_string(),
        bytes,
        capacity,
        tiles: target.tiles,
        per_tile: target.bytes_per_tile,
    })
}

/// Nodes whose value reaches an `Outfeed` or `Assign` (indexed by id).
fn live_nodes(g: &Graph) -> Vec<bool> {
    let n = g.ids().map(|i| i.as_usize() + 1).max().unwrap_or(0);
    let mut live = vec![false; n];
    let mut stack: Vec<NodeId> = g.ids().filter(|&i| g.node(i).op.is_sink()).collect();
    while let Some(id) = stack.pop() {
        if std::mem::replace(&mut live[id.as_usize()], true) {
            continue;
        }
        stack.extend(g.node(id).inputs.iter().copied());
    }
    // Infeeds are consumed from the host whether or not their values are used.
    for id in g.ids() {
        if matches!(g.node(id).op, Op::Input { .. }) {
            live[id.as_usize()] = true;
        }
    }
    live
}

fn phase_name(p: Phase) -> &'static str {
    match p {
        Phase::Step => "Step",
        Phase::Update => "Update",
    }
}

/// Step nodes may read Update values only through Variables; one Assign per variable and
/// phase.
fn check_phases(g: &Graph, order: &[NodeId], live: &[bool]) -> Result<(), CompileError> {
    let mut assigned: HashMap<(NodeId, Phase), NodeId> = HashMap::new();
    for &id in order {
        let node = g.node(id);
        if !live[id.as_usize()] {
            continue;
        }
        if node.phase == Phase::Step {
            for &i in &node.inputs {
                let input = g.node(i);
                if input.phase == Phase::Update && !input.op.is_source() {
                    return Err(CompileError::PhaseOrder {
                        node: node.name.clone(),
                        input: input.name.clone(),
                    });
                }
            }
        }
        if let Op::Assign = node.op {
            let var = node.inputs[0];
            if !matches!(g.node(var).op, Op::Variable { .. }) {
                return Err(CompileError::Unsupported {
                    node: node.name.clone(),
                    op: "Assign",
                    reason: format!("'{}' is not a Variable", g.node(var).name),
                });
            }
            if let Some(first) = assigned.insert((var, node.phase), id) {
                return Err(CompileError::DuplicateAssign {
                    variable: g.node(var).name.clone(),
                    phase: phase_name(node.phase),
                    first: g.node(first).name.clone(),
                    second: node.name.clone(),
                });
            }
        }
    }
    Ok(())
}

/// Decides which Assigns are done in place (see the module docs).
fn plan_inplace(lw: &mut Lowerer, order: &[NodeId], live: &[bool], body: impl Fn(Phase) -> Phase) {
    let pos: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    for &a in order {
        let node = lw.graph().node(a);
        if !matches!(node.op, Op::Assign) || !live[a.as_usize()] {
            continue;
        }
        let (var, value) = (node.inputs[0], node.inputs[1]);
        let v = lw.graph().node(value);
        let elementwise = v.op.unary().is_some()
            || v.op.binary().is_some_and(|b| !b.is_comparison())
            || matches!(
                v.op,
                Op::ScaledAdd { .. } | Op::ActivationGrad { .. } | Op::Select
            );
        // The variable is read element for element (same type as the value), so the op
        // may write over it: each output element is written after its inputs are read.
        // A fused root reads its group's leaves element for element (the variable has the
        // value's type, so it is no broadcast): its vertex reads every leaf of an element
        // before it writes the element, as the value's own op does.
        let reads_var = match lw.fused(value) {
            Some(group) => group.leaves.contains(&var),
            None => v.inputs.contains(&var),
        };
        if !elementwise
            || body(v.phase) != body(node.phase)
            || lw.ipu_of(value) != lw.ipu_of(var)
            || !reads_var
            || v.ty != lw.graph().node(var).ty
            || lw.inplace_target(value).is_some()
        {
            continue;
        }
        // Readers of the variable in other phase bodies see the assigned value either way
        // (earlier bodies run before, later ones after the end of this one); readers in
        // this body must all run before the value is computed. A fused node reads when
        // its root runs; the value's own group reads each element before writing it.
        let vp = pos[&value];
        let runs_at = |c: NodeId| lw.fused_into(c).unwrap_or(c);
        let others_first = lw
            .graph()
            .consumers(var)
            .into_iter()
            .filter(|&c| runs_at(c) != value && c != a && live[c.as_usize()])
            .filter(|&c| body(lw.graph().node(c).phase) == body(node.phase))
            .all(|c| pos[&runs_at(c)] < vp);
        if others_first {
            lw.set_inplace(value, var);
        }
    }
}

/// With replicas, the values the Update phase reads from the Step phase — the gradients, or
/// their accumulators — are averaged over the replicas before any update reads them
/// (PopTorch's default mean reduction over replicas), each on its own IPU. A value that a
/// `ReplicatedReduceScatter` reads (replicated tensor sharding, `ipusim_ir::sharding`) is
/// reduced by it instead, and then no other update node may read it.
fn all_reduce_gradients(lw: &mut Lowerer, update: &[NodeId]) -> Result<(), CompileError> {
    let g = lw.graph();
    let assigned_in_step: std::collections::HashSet<NodeId> = g
        .nodes()
        .filter(|(_, n)| n.phase == Phase::Step && matches!(n.op, Op::Assign))
        .map(|(_, n)| n.inputs[0])
        .collect();
    let scattered: std::collections::HashSet<NodeId> = update
        .iter()
        .filter(|&&u| g.node(u).op.is_collective())
        .flat_map(|&u| g.node(u).inputs.iter().copied())
        .collect();
    let mut reads: Vec<NodeId> = update
        .iter()
        .filter(|&&u| !g.node(u).op.is_collective())
        .flat_map(|&u| g.node(u).inputs.iter().copied())
        .filter(|&i| {
            let n = g.node(i);
            (n.phase == Phase::Step && !n.op.is_source() && !matches!(n.op, Op::Assign))
                || (matches!(n.op, Op::Variable { .. })
                    && assigned_in_step.contains(&i)
                    && n.ty.dtype.is_float())
        })
        .collect();
    reads.sort_unstable();
    reads.dedup();
    // An assignment's target is written, not read (the accumulators' reset).
    let read_whole = |&id: &NodeId| {
        update.iter().any(|&u| {
            let n = g.node(u);
            !n.op.is_collective()
                && n.inputs
                    .iter()
                    .enumerate()
                    .any(|(k, &i)| i == id && !(k == 0 && matches!(n.op, Op::Assign)))
        })
    };
    if let Some(&both) = reads
        .iter()
        .find(|&r| scattered.contains(r) && read_whole(r))
    {
        return Err(lw.unsupported(
            both,
            "the weight update reads this value both reduce-scattered and whole",
        ));
    }
    reads.retain(|r| !scattered.contains(r));
    for id in reads {
        lw.set_ipu_of(id);
        let t = permute::materialized(lw, id)?;
        lw.all_reduce_mean(id, t);
    }
    Ok(())
}

fn lower_input(lw: &mut Lowerer, id: NodeId) -> Result<(), CompileError> {
    let node = lw.graph().node(id);
    let Op::Input { stream, .. } = &node.op else {
        return Ok(());
    };
    let ty = node.ty.clone();
    let sid = lw.next_stream_id();
    let m = match lw.layout_hint(id, 0) {
        Some(m) => m,
        None => lw.fresh_mapping(ty.num_elements() as u64, ty.dtype),
    };
    let kind = TensorKind::StreamBuffer { stream: sid };
    let t = lw.new_tensor(node.name.clone(), Some(id), kind, ty.dtype, ty.shape, m);
    lw.add_stream(id, stream.clone(), StreamDirection::HostToDevice, t);
    Ok(())
}

fn lower_outfeed(lw: &mut Lowerer, id: NodeId, stream: String) -> Result<(), CompileError> {
    let t = permute::materialized(lw, lw.graph().node(id).inputs[0])?;
    lw.add_stream(id, stream, StreamDirection::DeviceToHost, t);
    Ok(())
}

/// Lowers the Assigns of a phase: in-place ones are done; Splat constants become `Fill`
/// vertices on the variable's tiles; the others copy the value into the variable.
fn lower_assigns(lw: &mut Lowerer, phase: Phase, assigns: &[NodeId]) -> Result<(), CompileError> {
    let mut eb = ExchangeBuilder::default();
    let mut fills: Vec<(TensorId, f64)> = Vec::new();
    for &a in assigns {
        let node = lw.graph().node(a);
        let (var, value) = (node.inputs[0], node.inputs[1]);
        let var_t = lw.value(var)?.tensor;
        lw.set_value(a, var_t);
        if lw.inplace_target(value) == Some(var) {
            continue;
        }
        if let Op::Constant {
            value: ipusim_ir::Literal::Splat(s),
            ..
        } = &lw.graph().node(value).op
        {
            fills.push((var_t, *s));
            continue;
        }
        let val_t = permute::materialized(lw, value)?;
        if val_t == var_t {
            continue;
        }
        let var_map = lw.tensor(var_t).slices.clone();
        for slice in &var_map {
            let mut pos = 0u64;
            for iv in &slice.intervals {
                eb.copy_elems(
                    lw,
                    val_t,
                    iv.begin,
                    u64::from(iv.len),
                    var_t,
                    slice.tile.tile(),
                    pos,
                );
                pos += u64::from(iv.len);
            }
        }
    }
    let tiles = fill::fill_work(lw, &fills);
    let name = match phase {
        Phase::Step => "step/assign",
        Phase::Update => "update/assign",
    };
    lw.superstep(name, None, eb.finish(), tiles);
    Ok(())
}

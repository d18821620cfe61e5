//! Element-wise fusion: which chains of element-wise nodes one vertex per tile computes
//! without storing the intermediate values (PopLibs' generated map-expression codelets,
//! `popops::map` with `enableGenerateCodelet`, its default; the frameworks hand it their
//! fused element-wise expressions).
//!
//! A group is a root and the members it absorbs: a member is a node whose op is a single-op
//! element-wise codelet (`Unary`, `Binary`, `ScaledAdd` with its scale, `Cast` to another
//! type, `ActivationGrad`), whose one live consumer (counting every use) is already in the
//! group, with the root's shape (so the root reads it element for element), in the same
//! phase, on the same IPU and pipeline segment. Nodes are taken roots first (reverse
//! schedule order), each root absorbing its inputs depth first while the group has at most
//! [`MAX_FUSED_LEAVES`](crate::codelets::MAX_FUSED_LEAVES) leaves and
//! [`MAX_FUSED_STEPS`](crate::codelets::MAX_FUSED_STEPS) steps; a group of one node stays
//! unfused. Leaves may be broadcast (a per-channel statistic): the fused vertex reads them
//! through a broadcast access, where PopLibs' map expressions would take only same-shape or
//! scalar inputs and leave the per-channel step to its channel-op vertices (`AddToChannel`,
//! `ChannelMul`) — our model, documented as such in the estimator.
//!
//! An optimizer's update of a variable (an Update-phase root assigned to a Variable) does
//! not absorb an updater term: an input that does not read the variable and whose chain
//! reads two or more full-size values (Adam's moments). That term is a group of its own,
//! computed where the moments are, and the update moves its one result (PopART's
//! `AdamUpdaterOp` and `AdamVarUpdateOp`).
//!
//! Values are unchanged: each step is the unfused op's codelet with its own rounding (see
//! [`crate::codelets::Codelet::Fused`]). A fused optimizer update whose leaves include the
//! variable it assigns is then done in place (`plan_inplace` in the lowering driver).

use super::core::{FusedGroup, Lowerer, ReduceInput};
use super::ops;
use crate::codelets::{Codelet, FusedArg, FusedLeaf, FusedStep, MAX_FUSED_LEAVES, MAX_FUSED_STEPS};
use ipusim_ir::{NodeId, Op};
use std::collections::{HashMap, HashSet};

/// The codelet of node `id` and its scale (`ScaledAdd`; else 1) when it can be a fused step.
fn step_codelet(lw: &Lowerer, id: NodeId) -> Option<(Codelet, f64)> {
    let node = lw.graph().node(id);
    if let Op::Cast { dtype } = node.op {
        if lw.graph().node(node.inputs[0]).ty.dtype == dtype {
            return None;
        }
    }
    let (codelet, scale) = ops::elementwise::codelet_of(lw, id).ok()?;
    codelet.is_fusible_step().then_some((codelet, scale))
}

/// The fused groups of the live nodes of `order`, by root.
/// Nodes a reduction absorbed ([`super::absorb`]) are neither roots nor members.
pub(crate) fn plan(
    lw: &Lowerer,
    order: &[NodeId],
    live: &[bool],
    absorbed: &HashMap<NodeId, ReduceInput>,
) -> HashMap<NodeId, FusedGroup> {
    let g = lw.graph();
    let is_live = |id: NodeId| live.get(id.as_usize()).copied().unwrap_or(false);
    // Each live node's distinct live consumers.
    let mut consumers: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
    for &id in order.iter().filter(|&&id| is_live(id)) {
        for &i in &g.node(id).inputs {
            let c = consumers.entry(i).or_default();
            if !c.contains(&id) {
                c.push(id);
            }
        }
    }
    let leaf_of = |i: NodeId| ops::folded_broadcast(g, i).unwrap_or(i);
    let mut taken: HashSet<NodeId> = absorbed
        .values()
        .flat_map(|a| a.members.iter().flatten().copied())
        .collect();
    let mut groups = HashMap::new();
    for &root in order.iter().rev() {
        if !is_live(root) || taken.contains(&root) {
            continue;
        }
        let Some(root_codelet) = step_codelet(lw, root) else {
            continue;
        };
        let rn = g.node(root);
        // An optimizer's update of a variable takes in only what reads the variable, or
        // what reads at most one full-size value of its own (see `updater`).
        let target = (rn.phase == ipusim_ir::Phase::Update)
            .then(|| assigned_variable(g, &consumers, root))
            .flatten();
        let mut members: Vec<NodeId> = vec![root];
        let mut codelets: HashMap<NodeId, (Codelet, f64)> = HashMap::from([(root, root_codelet)]);
        // Depth first over the inputs of the members.
        let mut stack: Vec<NodeId> = rn.inputs.iter().rev().copied().collect();
        while let Some(i) = stack.pop() {
            if members.contains(&i) || taken.contains(&i) || !is_live(i) {
                continue;
            }
            let n = g.node(i);
            let joins = consumers
                .get(&i)
                .is_some_and(|c| c.len() == 1 && members.contains(&c[0]))
                && n.ty.shape == rn.ty.shape
                && n.phase == rn.phase
                && lw.ipu_of(i) == lw.ipu_of(root)
                && lw.segment_of(i) == lw.segment_of(root)
                && members.len() < MAX_FUSED_STEPS;
            if !joins || target.is_some_and(|w| updater(lw, &consumers, i, w)) {
                continue;
            }
            let Some(c) = step_codelet(lw, i) else {
                continue;
            };
            members.push(i);
            if leaves(g, &members, leaf_of).len() > MAX_FUSED_LEAVES {
                members.pop();
                continue;
            }
            codelets.insert(i, c);
            stack.extend(n.inputs.iter().rev().copied());
        }
        // Every member joined within the leaf limit (checked as it joined).
        if members.len() < 2 {
            continue;
        }
        taken.extend(members.iter().copied());
        groups.insert(root, group(lw, root, &members, &codelets, leaf_of));
    }
    groups
}

/// The variable `root`'s value is assigned to, if any (an optimizer's update of a weight).
fn assigned_variable(
    g: &ipusim_ir::Graph,
    consumers: &HashMap<NodeId, Vec<NodeId>>,
    root: NodeId,
) -> Option<NodeId> {
    consumers.get(&root)?.iter().find_map(|&c| {
        let n = g.node(c);
        let var = *n.inputs.first()?;
        (matches!(n.op, Op::Assign)
            && n.inputs.get(1) == Some(&root)
            && matches!(g.node(var).op, Op::Variable { .. }))
        .then_some(var)
    })
}

/// True when `id`, an input of an update of variable `w`, is an updater term: it does not
/// read `w`, and the fusible chain it heads reads two or more full-size values (an Adam's
/// moments). PopART computes such a term where its inputs are (`AdamUpdaterOp`, in the
/// optimizer state's layout, which follows the gradient's) and moves the one result to the
/// weight (`AdamVarUpdateOp`); fused into the weight's update, each of its inputs would move
/// to the weight's tiles instead. A term of one full-size value (SGD's `lr * g`, a
/// momentum's velocity) stays fused: moving it or its input costs the same.
fn updater(lw: &Lowerer, consumers: &HashMap<NodeId, Vec<NodeId>>, id: NodeId, w: NodeId) -> bool {
    let g = lw.graph();
    let shape = &g.node(id).ty.shape;
    let mut stack = vec![id];
    let mut seen = HashSet::new();
    let mut full_leaves = 0;
    while let Some(n) = stack.pop() {
        if n == w {
            return false;
        }
        if !seen.insert(n) || g.node(n).ty.shape != *shape {
            continue;
        }
        let single = consumers.get(&n).is_some_and(|c| c.len() == 1);
        if n == id || (single && step_codelet(lw, n).is_some()) {
            stack.extend(g.node(n).inputs.iter().copied());
        } else {
            full_leaves += 1;
        }
    }
    full_leaves >= 2
}

/// The leaves of `members`: their inputs outside the group, in first-use order of a depth-first
/// walk from the root (`members[0]`), folded broadcasts replaced by their inputs.
fn leaves(
    g: &ipusim_ir::Graph,
    members: &[NodeId],
    leaf_of: impl Fn(NodeId) -> NodeId,
) -> Vec<NodeId> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    walk(g, members, members[0], &mut seen, &mut |id, is_member| {
        if !is_member {
            let l = leaf_of(id);
            if !out.contains(&l) {
                out.push(l);
            }
        }
    });
    out
}

/// Post-order walk from `id` over the group: `f(node, is_member)` for every input reached,
/// members after their inputs.
fn walk(
    g: &ipusim_ir::Graph,
    members: &[NodeId],
    id: NodeId,
    seen: &mut HashSet<NodeId>,
    f: &mut impl FnMut(NodeId, bool),
) {
    if !members.contains(&id) {
        f(id, false);
        return;
    }
    if !seen.insert(id) {
        return;
    }
    for &i in &g.node(id).inputs {
        walk(g, members, i, seen, f);
    }
    f(id, true);
}

/// The group of `members` (the root first) as a fused codelet: steps in post order (each
/// member after its inputs, the root last).
fn group(
    lw: &Lowerer,
    root: NodeId,
    members: &[NodeId],
    codelets: &HashMap<NodeId, (Codelet, f64)>,
    leaf_of: impl Fn(NodeId) -> NodeId + Copy,
) -> FusedGroup {
    let g = lw.graph();
    let leaves = leaves(g, members, leaf_of);
    let mut order = Vec::new();
    let mut seen = HashSet::new();
    walk(g, members, root, &mut seen, &mut |id, is_member| {
        if is_member {
            order.push(id);
        }
    });
    let steps: Vec<FusedStep> = order
        .iter()
        .map(|&m| {
            let (codelet, scale) = codelets[&m].clone();
            let args = g
                .node(m)
                .inputs
                .iter()
                .map(|&i| match order.iter().position(|&o| o == i) {
                    Some(k) => FusedArg::Step(k as u8),
                    None => FusedArg::Leaf(
                        leaves.iter().position(|&l| l == leaf_of(i)).unwrap_or(0) as u8,
                    ),
                })
                .collect();
            FusedStep::new(codelet, args, scale)
        })
        .collect();
    let leaf_info: Vec<FusedLeaf> = leaves
        .iter()
        .map(|&l| FusedLeaf {
            dtype: g.node(l).ty.dtype,
            scalar: g.node(l).ty.num_elements() == 1,
        })
        .collect();
    FusedGroup {
        leaves,
        members: order,
        codelet: Codelet::fused(leaf_info, steps),
    }
}

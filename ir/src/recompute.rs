//! Recomputation (the TF-IPU training guide §6.6, PopTorch's recomputation): the backward pass
//! recomputes the forward activations it reads from the nearest checkpoints instead of keeping
//! them alive from the forward pass. Less memory, more cycles.
//!
//! In a training-step graph, the forward nodes are the Step-phase nodes not named `bwd/…`; a
//! forward node is a **checkpoint** when it is a source (variable, constant, infeed), named by
//! the caller (explicit checkpoints, and the values that cross into a later pipeline stage:
//! each stage is an implicit checkpoint), or not a computation (an `Assign`, an `Outfeed`).
//! Every other forward node a backward node reads is recomputed: a clone `recompute/NAME` of
//! the node, fed by clones of its own non-checkpoint inputs, is inserted just before the first
//! backward node that needs it, and the backward nodes read the clone. The forward originals
//! are then dead after their last forward reader, and the clones live only through the
//! backward pass of their segment (RecomputeThenBackpropagate).
//!
//! The clones compute the same ops on the same inputs: without stochastic rounding the values
//! are the same bit for bit; with it, the recomputed activations round with other random bits.

use crate::error::IrError;
use crate::graph::{Graph, NodeId, Phase};
use crate::pipeline::Placement;
use std::collections::HashSet;

/// The prefix of a recomputed node's name.
pub const PREFIX: &str = "recompute/";

/// True for a forward node of a training-step graph.
pub fn is_forward(g: &Graph, id: NodeId) -> bool {
    let n = g.node(id);
    n.phase == Phase::Step && !n.name.starts_with("bwd/") && !n.name.starts_with(PREFIX)
}

/// The checkpoints of a training-step graph: the forward nodes named in `names` (a name no
/// node of `step` has is returned as the error), and the forward values a forward node of a
/// later stage reads (each pipeline stage is an implicit checkpoint).
pub fn checkpoints(
    step: &Graph,
    placement: &Placement,
    names: &[String],
) -> Result<HashSet<NodeId>, String> {
    let mut out = HashSet::new();
    for name in names {
        out.insert(step.find(name).ok_or_else(|| name.clone())?);
    }
    for (id, node) in step.nodes() {
        if !is_forward(step, id) {
            continue;
        }
        for &i in &node.inputs {
            if is_forward(step, i) && placement.stage_of(i) < placement.stage_of(id) {
                out.insert(i);
            }
        }
    }
    Ok(out)
}

/// The step graph `step` with the backward pass reading recomputed activations; `checkpoints`
/// are the forward nodes kept from the forward pass (besides sources and effects). Returns the
/// graph and the number of recomputed nodes.
pub fn recompute(step: &Graph, checkpoints: &HashSet<NodeId>) -> Result<(Graph, usize), IrError> {
    let order = step.program_order();
    let n = step.ids().map(|i| i.as_usize() + 1).max().unwrap_or(0);
    let recomputed = |id: NodeId| {
        let node = step.node(id);
        is_forward(step, id)
            && !node.op.is_source()
            && !node.op.is_sink()
            && !checkpoints.contains(&id)
    };
    let mut out = Graph::with_capacity(step.len() + step.len() / 2, 0);
    let mut new_id: Vec<Option<NodeId>> = vec![None; n];
    let mut clone_id: Vec<Option<NodeId>> = vec![None; n];
    let mut clones = 0usize;
    for &id in &order {
        let node = step.node(id);
        let backward = node.phase == Phase::Step && node.name.starts_with("bwd/");
        let mut inputs = Vec::with_capacity(node.inputs.len());
        for &i in &node.inputs {
            if backward && recomputed(i) {
                inputs.push(clone_of(
                    step,
                    i,
                    &recomputed,
                    &mut out,
                    &new_id,
                    &mut clone_id,
                    &mut clones,
                )?);
            } else {
                inputs.push(mapped(&new_id, i, &node.name)?);
            }
        }
        let nid = out.add_node_in(node.phase, node.name.clone(), node.op.clone(), &inputs)?;
        new_id[id.as_usize()] = Some(nid);
    }
    Ok((out, clones))
}

/// The new graph's id of old node `i`.
fn mapped(new_id: &[Option<NodeId>], i: NodeId, reader: &str) -> Result<NodeId, IrError> {
    new_id[i.as_usize()].ok_or_else(|| IrError::UnknownInput {
        node: reader.to_string(),
        input: i.to_string(),
    })
}

/// The clone of forward node `id` in `out`, adding it (and the clones it reads) first.
fn clone_of(
    step: &Graph,
    id: NodeId,
    recomputed: &dyn Fn(NodeId) -> bool,
    out: &mut Graph,
    new_id: &[Option<NodeId>],
    clone_id: &mut [Option<NodeId>],
    clones: &mut usize,
) -> Result<NodeId, IrError> {
    if let Some(c) = clone_id[id.as_usize()] {
        return Ok(c);
    }
    // Depth-first with an explicit stack: a long chain of layers must not overflow ours.
    let mut stack = vec![(id, false)];
    while let Some((x, expanded)) = stack.pop() {
        if clone_id[x.as_usize()].is_some() {
            continue;
        }
        let node = step.node(x);
        if !expanded {
            stack.push((x, true));
            for &i in &node.inputs {
                if recomputed(i) && clone_id[i.as_usize()].is_none() {
                    stack.push((i, false));
                }
            }
            continue;
        }
        let mut inputs = Vec::with_capacity(node.inputs.len());
        for &i in &node.inputs {
            inputs.push(match clone_id[i.as_usize()] {
                Some(c) if recomputed(i) => c,
                _ => mapped(new_id, i, &node.name)?,
            });
        }
        let c = out.add_node_in(
            Phase::Step,
            format!("{PREFIX}{}", node.name),
            node.op.clone(),
            &inputs,
        )?;
        clone_id[x.as_usize()] = Some(c);
        *clones += 1;
    }
    clone_id[id.as_usize()].ok_or_else(|| IrError::UnknownInput {
        node: format!("{PREFIX}{}", step.node(id).name),
        input: id.to_string(),
    })
}

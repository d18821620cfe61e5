//! Recomputation (the TF-IPU training guide §6.6, PopTorch's recomputation): the backward pass
//! recomputes the forward activations it reads from the nearest checkpoints instead of keeping
//! them alive from the forward pass. Less memory, more cycles.
//!
//! In a training-step graph, the forward nodes are the Step-phase nodes not named `bwd/…`; a
//! forward node is a **checkpoint** when it is a source (variable, constant, infeed), named by
//! the caller (explicit checkpoints), or not a computation (an `Assign`, an `Outfeed`). A value
//! that crosses into a later pipeline stage is that stage's checkpoint (each stage is an
//! implicit checkpoint at its inputs): the later stages read it as kept, while the backward
//! pass of the stage that computed it recomputes it with the rest of that stage, as PopART
//! stashes a stage's inputs and recomputes everything after them.
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
use crate::rewrite::Rewrite;
use std::collections::HashSet;

/// The prefix of a recomputed node's name.
pub const PREFIX: &str = "recompute/";

/// True for a forward node of a training-step graph.
pub fn is_forward(g: &Graph, id: NodeId) -> bool {
    let n = g.node(id);
    n.phase == Phase::Step && !n.name.starts_with("bwd/") && !n.name.starts_with(PREFIX)
}

/// The forward nodes a training step keeps from its forward pass (besides sources and
/// effects), for the readers they are kept for.
#[derive(Clone, Debug, Default)]
pub struct Checkpoints {
    /// Kept for every reader: the explicit checkpoints, and with several stages every forward
    /// value of the last stage (its backward runs right after its forward, so nothing waits
    /// to be recomputed: RecomputeThenBackpropagate recomputes the stages whose activations
    /// would wait in the stash).
    pub kept: HashSet<NodeId>,
    /// The values a later pipeline stage reads: kept for the readers on later stages,
    /// recomputed for those on the stage that computed them.
    pub crossing: HashSet<NodeId>,
}

impl Checkpoints {
    /// Whether forward node `id` is kept for a reader on stage `reader` under `placement`.
    pub fn keeps(&self, id: NodeId, reader: u32, placement: &Placement) -> bool {
        self.kept.contains(&id) || (self.crossing.contains(&id) && placement.stage_of(id) < reader)
    }
}

/// The checkpoints of a training-step graph: the forward nodes named in `names` (a name no
/// node of `step` has is returned as the error), the forward values a forward node of a
/// later stage reads (each pipeline stage is an implicit checkpoint), and with several
/// stages every forward value of the last stage ([`Checkpoints`]).
pub fn checkpoints(
    step: &Graph,
    placement: &Placement,
    names: &[String],
) -> Result<Checkpoints, String> {
    let mut out = Checkpoints::default();
    for name in names {
        out.kept
            .insert(step.find(name).ok_or_else(|| name.clone())?);
    }
    let last = placement.stages().saturating_sub(1);
    for (id, node) in step.nodes() {
        if !is_forward(step, id) {
            continue;
        }
        if last > 0 && placement.stage_of(id) == last {
            out.kept.insert(id);
        }
        for &i in &node.inputs {
            if is_forward(step, i) && placement.stage_of(i) < placement.stage_of(id) {
                out.crossing.insert(i);
            }
        }
    }
    Ok(out)
}

/// The step graph `step` with the backward pass reading recomputed activations; `checkpoints`
/// are the forward nodes kept from the forward pass (besides sources and effects), for the
/// readers on the stages of `placement` (`step`'s). Returns the graph and the number of
/// recomputed nodes.
pub fn recompute(
    step: &Graph,
    checkpoints: &Checkpoints,
    placement: &Placement,
) -> Result<(Graph, usize), IrError> {
    let n = step.ids().map(|i| i.as_usize() + 1).max().unwrap_or(0);
    let mut r = Recomputer {
        rw: Rewrite::new(step),
        checkpoints,
        placement,
        clone_id: vec![None; n],
        clones: 0,
    };
    for id in step.program_order() {
        let node = step.node(id);
        let backward = node.phase == Phase::Step && node.name.starts_with("bwd/");
        let stage = placement.stage_of(id);
        let mut inputs = Vec::with_capacity(node.inputs.len());
        for &i in &node.inputs {
            inputs.push(if backward && r.recomputed(i, stage) {
                r.clone_of(i)?
            } else {
                r.rw.use_of(i)?
            });
        }
        let nid =
            r.rw.dst
                .add_node_in(node.phase, node.name.clone(), node.op.clone(), &inputs)?;
        r.rw.set(id, nid);
    }
    Ok((r.rw.dst, r.clones))
}

/// The rewrite in progress: the originals copied so far, and the clones.
struct Recomputer<'a> {
    rw: Rewrite<'a>,
    checkpoints: &'a Checkpoints,
    placement: &'a Placement,
    /// The clone of each recomputed node, once added.
    clone_id: Vec<Option<NodeId>>,
    clones: usize,
}

impl Recomputer<'_> {
    /// True for a forward node that a backward node (or a clone) on stage `reader` reads
    /// recomputed.
    fn recomputed(&self, id: NodeId, reader: u32) -> bool {
        let node = self.rw.src.node(id);
        is_forward(self.rw.src, id)
            && !node.op.is_source()
            && !node.op.is_sink()
            && !self.checkpoints.keeps(id, reader, self.placement)
    }

    /// The clone of forward node `id`, adding it (and the clones it reads) first.
    fn clone_of(&mut self, id: NodeId) -> Result<NodeId, IrError> {
        let src = self.rw.src;
        // Depth-first with an explicit stack: a long chain of layers must not overflow ours.
        let mut stack = vec![(id, false)];
        while let Some((x, expanded)) = stack.pop() {
            if self.clone_id[x.as_usize()].is_some() {
                continue;
            }
            let node = src.node(x);
            let stage = self.placement.stage_of(x);
            if !expanded {
                stack.push((x, true));
                for &i in &node.inputs {
                    if self.recomputed(i, stage) && self.clone_id[i.as_usize()].is_none() {
                        stack.push((i, false));
                    }
                }
                continue;
            }
            let mut inputs = Vec::with_capacity(node.inputs.len());
            for &i in &node.inputs {
                inputs.push(match self.clone_id[i.as_usize()] {
                    Some(c) if self.recomputed(i, stage) => c,
                    _ => self.rw.use_of(i)?,
                });
            }
            let c = self.rw.dst.add_node_in(
                Phase::Step,
                format!("{PREFIX}{}", node.name),
                node.op.clone(),
                &inputs,
            )?;
            self.clone_id[x.as_usize()] = Some(c);
            self.clones += 1;
        }
        self.clone_id[id.as_usize()].ok_or_else(|| IrError::UnknownInput {
            node: format!("{PREFIX}{}", src.node(id).name),
            input: id.to_string(),
        })
    }
}

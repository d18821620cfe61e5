//! Reverse-mode automatic differentiation of a graph: the gradient of a scalar loss with
//! respect to chosen nodes, built as new nodes of the same graph.
//!
//! [`gradients`] adds the backward pass to a [`GraphBuilder`]: starting from a *seed* (the
//! gradient of the loss, usually a constant equal to the static loss-scaling factor), it visits
//! the nodes between the `wrt` nodes and the loss in reverse topological order and applies
//! each op's vector-Jacobian product (the rules live in `autodiff/rules.rs`).
//!
//! # Which nodes get gradients
//!
//! A node is *active* when it lies on a path from a `wrt` node to the loss along which every
//! tensor is floating point. Gradients only flow through active nodes; everything else is
//! left alone, so the backward pass contains no dead nodes. Consequences:
//! - **Non-differentiable ops stop gradients**: `ArgMax`, `Equal`, `Greater`, `Less` (integer
//!   or Bool results), `OneHot` (integer input), `Cast` to or from an integer or Bool type,
//!   the condition of `Select`, the labels of `SparseSoftmaxCrossEntropy`, and the sources
//!   `Input`, `Constant` (they have no inputs; a `wrt` entry may still name them, e.g. an
//!   input whose gradient is wanted).
//! - **Ops without a gradient rule are errors when active**: `ActivationGrad` (second-order
//!   gradients are not supported: it only appears in backward passes) and `Assign` (a state
//!   update, like TensorFlow's assign ops). An error names the node.
//! - A `wrt` node the loss does not depend on (or only through stopped paths) gets `None`.
//!
//! # Dtypes and naming
//!
//! The gradient of a tensor has its type (dtype and shape): an FP16 forward pass has an FP16
//! backward pass, and a `Cast` between float types casts the gradient back. Gradient nodes are
//! added in the builder's current phase and named under `bwd/<forward node>/…` (for example
//! `bwd/dense1/matmul/grad_b`); when a tensor feeds several consumers its gradient
//! contributions are summed left to right by `Add` nodes named `bwd/<node>/grad_sum`, in
//! the order of the consumers' topological positions, last consumer first (deterministic).
//!
//! A composite op with a backward pass of its own (a training batch norm's, PopLibs') is
//! differentiated by it when [`gradients_with`] is given its rule
//! ([`crate::decompose::decompose_with_rules`]): the gradient of the node carrying the
//! composite's name flows straight to the composite's inputs, and the primitives in between
//! get none.
//!
//! Fusions follow PopLibs: `Relu`/`Sigmoid`/`Tanh`/`Gelu` use one `ActivationGrad` node
//! (popnn's non-linearity gradient; ReLU's reads the forward output, as PopLibs' does, the
//! others the forward input); the gradient of `SparseSoftmaxCrossEntropy` is
//! `(softmax(logits) - onehot(labels)) * dy` (divided by the batch size for the mean), never a
//! differentiated log of a softmax.

mod rules;

use crate::builder::GraphBuilder;
use crate::error::IrError;
use crate::graph::{Graph, NodeId};
use crate::norm::NormParts;
use crate::op::Op;
use std::collections::{HashMap, HashSet};

/// A composite op's backward pass of its own, used in place of the rules of the primitives
/// it was decomposed into ([`crate::decompose::decompose_with_rules`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Composite {
    /// A training batch norm or a group norm ([`crate::norm::grad`]).
    Norm(NormParts),
}

impl Composite {
    /// The nodes the composite's gradient flows to (its inputs).
    fn inputs(&self) -> Vec<NodeId> {
        match self {
            Composite::Norm(p) => vec![p.x, p.scale, p.shift],
        }
    }
}

/// The composites' gradient rules, keyed by the node that carries a composite's name (its
/// output). Autodiff differentiates such a node by its rule: the gradient flows from it to
/// the composite's inputs, and the primitives in between get none.
#[derive(Clone, Debug, Default)]
pub struct GradientRules(HashMap<NodeId, Composite>);

impl GradientRules {
    /// Differentiates `output` by `rule`.
    pub fn insert(&mut self, output: NodeId, rule: Composite) {
        self.0.insert(output, rule);
    }

    /// The rule of `output`, if any.
    pub fn get(&self, output: NodeId) -> Option<&Composite> {
        self.0.get(&output)
    }
}

/// Adds the backward pass of `loss` to `builder` and returns, for each node of `wrt`, the node
/// holding `d loss / d wrt[i]` scaled by `seed` (or `None` when the loss does not depend on
/// it through differentiable, floating-point paths).
///
/// - `loss`: a floating-point node (normally a scalar; any shape works, `seed` then carries
///   the upstream gradient of every element).
/// - `seed`: the gradient of the loss, a node of exactly the loss's type. A scalar constant
///   equal to the loss-scaling factor gives loss-scaled gradients.
/// - `wrt`: floating-point nodes (variables, inputs, or any intermediate tensor).
///
/// Errors: an unknown id, a non-float loss, a seed of another type, or an active node whose
/// op has no gradient rule (`ActivationGrad`, `Assign`).
pub fn gradients(
    builder: &mut GraphBuilder,
    loss: NodeId,
    seed: NodeId,
    wrt: &[NodeId],
) -> Result<Vec<Option<NodeId>>, IrError> {
    gradients_with(builder, loss, seed, wrt, &GradientRules::default())
}

/// [`gradients`], differentiating the nodes of `rules` by their composites' own rules.
pub fn gradients_with(
    builder: &mut GraphBuilder,
    loss: NodeId,
    seed: NodeId,
    wrt: &[NodeId],
    rules: &GradientRules,
) -> Result<Vec<Option<NodeId>>, IrError> {
    check_arguments(builder.graph(), loss, seed, wrt)?;
    let active = active_nodes(builder.graph(), loss, wrt)?;

    // Gradient contributions per active node, in the order they were produced.
    let mut contributions: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
    contributions.insert(loss, vec![seed]);
    let mut totals: HashMap<NodeId, NodeId> = HashMap::new();

    for &node in active.order.iter().rev() {
        let Some(parts) = contributions.remove(&node) else {
            // Active but every consumer stopped the gradient: the gradient is zero.
            continue;
        };
        let name = builder.graph().node(node).name.clone();
        builder.push_scope("bwd");
        builder.push_scope(name);
        let result = sum_and_propagate(
            builder,
            node,
            &parts,
            (&active.set, rules),
            &mut contributions,
        );
        builder.pop_scope();
        builder.pop_scope();
        totals.insert(node, result?);
    }
    Ok(wrt.iter().map(|w| totals.get(w).copied()).collect())
}

/// Sums `parts` into the gradient of `node`, then adds the contributions of `node` to the
/// gradients of its active inputs. Returns the gradient of `node`.
fn sum_and_propagate(
    builder: &mut GraphBuilder,
    node: NodeId,
    parts: &[NodeId],
    (active, composites): (&HashSet<NodeId>, &GradientRules),
    contributions: &mut HashMap<NodeId, Vec<NodeId>>,
) -> Result<NodeId, IrError> {
    let mut dy = parts[0];
    for &p in &parts[1..] {
        dy = builder.op("grad_sum", Op::Add, &[dy, p])?;
    }
    let n = builder.graph().node(node).clone();
    let (inputs, grads): (Vec<NodeId>, Vec<Option<NodeId>>) = match composites.get(node) {
        Some(rule) => {
            let inputs = rule.inputs();
            if !inputs.iter().any(|i| active.contains(i)) {
                return Ok(dy);
            }
            let grads = match rule {
                Composite::Norm(p) => {
                    crate::norm::grad::norm(builder, p, dy, |i| active.contains(&i))?
                }
            };
            grads.into_iter().map(|(i, g)| (i, Some(g))).unzip()
        }
        None => {
            let wanted: Vec<bool> = n.inputs.iter().map(|i| active.contains(i)).collect();
            if !wanted.iter().any(|&w| w) {
                return Ok(dy);
            }
            let grads = rules::vjp(builder, node, &n, dy, &wanted)?;
            (n.inputs.clone(), grads)
        }
    };
    for (&input, grad) in inputs.iter().zip(grads) {
        let Some(grad) = grad else { continue };
        if !active.contains(&input) {
            continue;
        }
        let (want, got) = (builder.graph().node(input), builder.graph().node(grad));
        if want.ty != got.ty {
            return Err(IrError::Invalid {
                node: n.name.clone(),
                op: n.op.name(),
                message: format!(
                    "internal autodiff error: gradient of input '{}' has type {}, expected {}",
                    want.name, got.ty, want.ty
                ),
            });
        }
        contributions.entry(input).or_default().push(grad);
    }
    Ok(dy)
}

fn check_arguments(g: &Graph, loss: NodeId, seed: NodeId, wrt: &[NodeId]) -> Result<(), IrError> {
    let exists = |id: NodeId, what: &str| {
        g.get(id)
            .map(|_| ())
            .ok_or_else(|| IrError::Program(format!("autodiff: {what} {id} is not in the graph")))
    };
    exists(loss, "loss")?;
    exists(seed, "seed")?;
    for &w in wrt {
        exists(w, "wrt node")?;
    }
    let (l, s) = (g.node(loss), g.node(seed));
    if !l.ty.dtype.is_float() {
        return Err(IrError::Program(format!(
            "autodiff: loss '{}' has type {}, expected a floating-point tensor",
            l.name, l.ty
        )));
    }
    if l.ty != s.ty {
        return Err(IrError::Program(format!(
            "autodiff: seed '{}' has type {}, expected the type {} of loss '{}'",
            s.name, s.ty, l.ty, l.name
        )));
    }
    Ok(())
}

/// The active nodes: on a floating-point path from a `wrt` node to the loss.
struct Active {
    /// Active nodes in topological order.
    order: Vec<NodeId>,
    set: HashSet<NodeId>,
}

fn active_nodes(g: &Graph, loss: NodeId, wrt: &[NodeId]) -> Result<Active, IrError> {
    let topo = g.topo_order()?;
    let is_float = |id: NodeId| g.node(id).ty.dtype.is_float();
    // Forward: reachable from a wrt node through float tensors.
    let mut forward: HashSet<NodeId> = wrt.iter().copied().filter(|&w| is_float(w)).collect();
    for &id in &topo {
        let n = g.node(id);
        if is_float(id) && n.inputs.iter().any(|i| forward.contains(i)) {
            forward.insert(id);
        }
    }
    // Backward: the loss and its ancestors.
    let mut backward: HashSet<NodeId> = HashSet::from([loss]);
    for &id in topo.iter().rev() {
        if backward.contains(&id) {
            backward.extend(g.node(id).inputs.iter().copied());
        }
    }
    let order: Vec<NodeId> = topo
        .into_iter()
        .filter(|id| forward.contains(id) && backward.contains(id))
        .collect();
    let set = order.iter().copied().collect();
    Ok(Active { order, set })
}

#[cfg(test)]
mod tests;

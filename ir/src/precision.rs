//! The precision policy (`16.16`, `16.32`, `32.32`) applied to a forward graph.
//!
//! Forward graphs write their float tensors as `F32`, meaning "float, policy-controlled";
//! [`apply`] maps them to the policy's types, as Graphcore's examples do with a dtype switch
//! and an FP32-parameter custom getter (seed 000, "Method 2") and Keras does with a dtype
//! policy (seed 002):
//!
//! | node                            | becomes                                             |
//! |---------------------------------|-----------------------------------------------------|
//! | `Input` F32                     | compute dtype (the host stream carries it)          |
//! | `Constant` F32, `OneHot` F32    | compute dtype                                       |
//! | `Cast { F32 }`                  | `Cast { compute }`                                  |
//! | `Variable` F32                  | weight dtype; when weight != compute, every reader  |
//! |                                 | reads `<var>/cast_<compute>` (FP32 master weights)  |
//! | `SparseSoftmaxCrossEntropy`     | computed in FP32: F16 logits are cast to F32 by     |
//! |                                 | `<loss>/logits_f32`; the loss is F32                |
//! | anything written `F16`          | unchanged                                           |
//!
//! Types downstream follow by re-inference. Where that makes the inputs of one op disagree
//! (an FP32 loss meeting an FP16 value, e.g. a regulariser added to the loss), the FP16 input
//! is widened by `<node>/in<i>_f32`: the policy never narrows a tensor the model chose to
//! keep in FP32. An `Assign` keeps its variable and casts its value to the variable's dtype
//! (`<node>/value_<dtype>`). Node names are preserved, so streams and the loss still resolve.
//! `32.32` is the identity on a graph written in F32.

use crate::dtype::DType;
use crate::error::IrError;
use crate::graph::{Graph, Phase};
use crate::op::Op;
use crate::program::Precision;
use crate::rewrite::Rewrite;

/// The forward graph `graph` with `policy` applied (see the module docs).
pub fn apply(graph: &Graph, policy: Precision) -> Result<Graph, IrError> {
    let compute = policy.compute();
    let weights = policy.weights();
    let mut rw = Rewrite::new(graph);
    for old in rw.order()? {
        let n = graph.node(old);
        let op = map_op(&n.op, compute, weights);
        let mut inputs = n
            .inputs
            .iter()
            .map(|&i| rw.use_of(i))
            .collect::<Result<Vec<_>, _>>()?;
        match &op {
            Op::Assign => {
                // The target is the variable itself, not the cast its readers see.
                inputs[0] = rw.def(n.inputs[0])?;
                let target = rw.dst.node(inputs[0]).ty.dtype;
                inputs[1] = cast_to(&mut rw, n.phase, &n.name, "value", inputs[1], target)?;
            }
            Op::SparseSoftmaxCrossEntropy { .. } => {
                // TF-IPU computes the loss internals in FP32 (seed 000, "Unstable operations");
                // Keras keeps the softmax and loss in float32 (seed 002).
                let base = format!("{}/logits_f32", n.name);
                if rw.dst.node(inputs[0]).ty.dtype != DType::F32 {
                    inputs[0] = rw.add_new(
                        n.phase,
                        &base,
                        Op::Cast { dtype: DType::F32 },
                        &inputs[0..1],
                    )?;
                }
            }
            Op::BatchNorm { .. } => {
                // The running statistics are state the decomposition assigns: the variables
                // themselves, not the casts their other readers see.
                for i in [3, 4] {
                    inputs[i] = rw.def(n.inputs[i])?;
                }
            }
            _ => widen_mismatched(&mut rw, &op, n.phase, &n.name, &mut inputs)?,
        }
        let id = rw.dst.add_node_in(n.phase, n.name.clone(), op, &inputs)?;
        rw.set(old, id);
        if let Op::Variable { dtype, .. } = rw.dst.node(id).op {
            if dtype.is_float() && dtype != compute && was_policy_float(&n.op) {
                let base = format!("{}/cast_{}", n.name, compute.name());
                let cast = rw.add_new(n.phase, &base, Op::Cast { dtype: compute }, &[id])?;
                rw.set_use(old, cast);
            }
        }
    }
    Ok(rw.dst)
}

/// True when the op's own dtype attribute is the policy-controlled F32.
fn was_policy_float(op: &Op) -> bool {
    matches!(
        op,
        Op::Input {
            dtype: DType::F32,
            ..
        } | Op::Variable {
            dtype: DType::F32,
            ..
        } | Op::Constant {
            dtype: DType::F32,
            ..
        } | Op::Cast { dtype: DType::F32 }
            | Op::OneHot {
                dtype: DType::F32,
                ..
            }
    )
}

/// The op with its policy-controlled dtype attribute mapped.
fn map_op(op: &Op, compute: DType, weights: DType) -> Op {
    let map = |d: DType, to: DType| if d == DType::F32 { to } else { d };
    let mut op = op.clone();
    match &mut op {
        Op::Input { dtype, .. } | Op::Constant { dtype, .. } => *dtype = map(*dtype, compute),
        Op::Cast { dtype } | Op::OneHot { dtype, .. } => *dtype = map(*dtype, compute),
        Op::Variable { dtype, .. } => *dtype = map(*dtype, weights),
        _ => {}
    }
    op
}

/// `x` cast to `dtype` by a new node `<node>/<what>_<dtype>` (no node when it already is).
fn cast_to(
    rw: &mut Rewrite<'_>,
    phase: Phase,
    node: &str,
    what: &str,
    x: crate::graph::NodeId,
    dtype: DType,
) -> Result<crate::graph::NodeId, IrError> {
    if rw.dst.node(x).ty.dtype == dtype {
        return Ok(x);
    }
    let base = format!("{node}/{what}_{}", dtype.name());
    rw.add_new(phase, &base, Op::Cast { dtype }, &[x])
}

/// For ops whose float inputs must share a dtype: casts F16 inputs to F32 when the inputs
/// disagree after the policy.
fn widen_mismatched(
    rw: &mut Rewrite<'_>,
    op: &Op,
    phase: Phase,
    node: &str,
    inputs: &mut [crate::graph::NodeId],
) -> Result<(), IrError> {
    let Some(first) = op.shared_dtype_from() else {
        return Ok(());
    };
    let dtypes: Vec<DType> = inputs[first..]
        .iter()
        .map(|&i| rw.dst.node(i).ty.dtype)
        .collect();
    let mixed = dtypes.contains(&DType::F16) && dtypes.contains(&DType::F32);
    if !mixed {
        return Ok(());
    }
    for (slot, input) in inputs.iter_mut().enumerate().skip(first) {
        let what = format!("in{slot}");
        *input = cast_to(rw, phase, node, &what, *input, DType::F32)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;

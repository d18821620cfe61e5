//! The vector-Jacobian product of every op: given the gradient `dy` of a node's output, the
//! gradient contribution of each of its inputs.
//!
//! Every rule returns gradients of exactly the input's type; broadcast inputs get the
//! gradient summed over their broadcast axes ([`unbroadcast`]). Nodes are added in the
//! caller's scope (`bwd/<forward node>/`). Where a rule needs the forward output (Exp,
//! Sqrt, Softmax, LogSoftmax, ReduceMax, Div) it reads the forward node rather than
//! recomputing it.

use crate::builder::GraphBuilder;
use crate::dtype::{Shape, TensorType};
use crate::error::IrError;
use crate::graph::{Node, NodeId};
use crate::op::{Activation, LossReduction, Op};

type R = Result<NodeId, IrError>;
type Grads = Result<Vec<Option<NodeId>>, IrError>;

/// The gradient contributions of the inputs of node `id` (= `n`) given `dy`; entries whose
/// `wanted` flag is false may be `None`.
pub(super) fn vjp(
    b: &mut GraphBuilder,
    id: NodeId,
    n: &Node,
    dy: NodeId,
    wanted: &[bool],
) -> Grads {
    let input = |i: usize| n.inputs[i];
    let one = |g: R| g.map(|g| vec![Some(g)]);
    if let Some(family) = crate::conv::rules::vjp(b, n, dy, wanted) {
        return family;
    }
    match &n.op {
        Op::Input { .. } | Op::Variable { .. } | Op::Constant { .. } => Ok(vec![]),
        Op::MatMul => matmul(b, input(0), input(1), dy, wanted),
        Op::Add => binary(b, n, dy, wanted, |_, dy, _| Ok(dy), |_, dy, _| Ok(dy)),
        Op::Sub => binary(
            b,
            n,
            dy,
            wanted,
            |_, dy, _| Ok(dy),
            |b, dy, shape| {
                let g = unbroadcast(b, dy, shape)?;
                b.op("neg", Op::Neg, &[g])
            },
        ),
        Op::Mul => binary(
            b,
            n,
            dy,
            wanted,
            |b, dy, _| b.op("grad_a", Op::Mul, &[dy, input(1)]),
            |b, dy, _| b.op("grad_b", Op::Mul, &[dy, input(0)]),
        ),
        Op::Div => div(b, id, n, dy, wanted),
        Op::Max | Op::Min => {
            // TensorFlow's rule: ties go to `a` (Max: a >= b; Min: a <= b).
            let loses_a = if matches!(n.op, Op::Max) {
                Op::Less
            } else {
                Op::Greater
            };
            let a_loses = b.op("a_loses", loses_a, &[input(0), input(1)])?;
            let dtype = ty(b, dy).dtype;
            let zero = b.scalar("zero", dtype, 0.0)?;
            binary(
                b,
                n,
                dy,
                wanted,
                |b, dy, _| b.op("grad_a", Op::Select, &[a_loses, zero, dy]),
                |b, dy, _| b.op("grad_b", Op::Select, &[a_loses, dy, zero]),
            )
        }
        Op::ScaledAdd { scale } => {
            let ga = dy;
            let gb = if wanted[1] {
                let g = unbroadcast(b, dy, &ty(b, input(1)).shape)?;
                Some(scale_by(b, g, *scale)?)
            } else {
                None
            };
            Ok(vec![Some(ga), gb])
        }
        Op::Select => {
            let cond = input(0);
            let dtype = ty(b, dy).dtype;
            let zero = b.scalar("zero", dtype, 0.0)?;
            let mut out = vec![None];
            for (slot, picks_dy) in [(1usize, true), (2, false)] {
                out.push(if wanted[slot] {
                    let sel = if picks_dy { [cond, dy, zero] } else { [cond, zero, dy] };
                    let g = b.op(&format!("grad_{slot}"), Op::Select, &sel)?;
                    Some(unbroadcast(b, g, &ty(b, input(slot)).shape)?)
                } else {
                    None
                });
            }
            Ok(out)
        }
        Op::Neg => one(b.op("grad", Op::Neg, &[dy])),
        Op::Abs => {
            // d|x| = sign(x) dy, with sign(0) = 0 as in TensorFlow.
            let x = input(0);
            let dtype = ty(b, x).dtype;
            let zero = b.scalar("zero", dtype, 0.0)?;
            let neg = b.op("neg", Op::Neg, &[dy])?;
            let is_neg = b.op("is_neg", Op::Less, &[x, zero])?;
            let is_pos = b.op("is_pos", Op::Greater, &[x, zero])?;
            let pos_or_zero = b.op("pos_or_zero", Op::Select, &[is_pos, dy, zero])?;
            one(b.op("grad", Op::Select, &[is_neg, neg, pos_or_zero]))
        }
        Op::Exp => one(b.op("grad", Op::Mul, &[dy, id])),
        Op::Log => one(b.op("grad", Op::Div, &[dy, input(0)])),
        Op::Sqrt => {
            // d sqrt(x) = dy / (2 sqrt(x)) = (dy / y) * 0.5.
            let q = b.op("div", Op::Div, &[dy, id])?;
            one(scale_by(b, q, 0.5))
        }
        // From the forward output, as PopLibs' `nonLinearityInputGradient` and PopART's
        // `ReluGradOp` read it: `relu(x) > 0` exactly when `x > 0` (a NaN stays NaN and
        // raises INV either way), so the values and flags are those of the input's rule,
        // and the backward pass keeps the ReLU's output (which the next layer's weight
        // gradient reads anyway) instead of its input too.
        Op::Relu => one(activation(b, Activation::Relu, id, dy)),
        // Composite ops are decomposed before autodiff (`crate::decompose`); their primitive
        // ops carry the gradient.
        Op::Clip { .. }
        | Op::AvgPool2d { .. }
        | Op::GlobalAvgPool
        | Op::Flatten { .. }
        | Op::BatchNorm { .. }
        | Op::GroupNorm { .. } => Err(IrError::Invalid {
            node: n.name.clone(),
            op: n.op.name(),
            message: "a composite op reached autodiff; decompose the graph first".into(),
        }),
        Op::Sigmoid => one(activation(b, Activation::Sigmoid, input(0), dy)),
        Op::Tanh => one(activation(b, Activation::Tanh, input(0), dy)),
        Op::Gelu => one(activation(b, Activation::Gelu, input(0), dy)),
        Op::Softmax { axis } => {
            // dx = y * (dy - sum(dy * y, axis)).
            let p = b.op("dy_y", Op::Mul, &[dy, id])?;
            let s = reduce_keep(b, "sum", p, *axis)?;
            let d = b.op("centred", Op::Sub, &[dy, s])?;
            one(b.op("grad", Op::Mul, &[id, d]))
        }
        Op::LogSoftmax { axis } => {
            // dx = dy - softmax(x) * sum(dy, axis), with softmax(x) = exp(y).
            let p = b.op("softmax", Op::Exp, &[id])?;
            let s = reduce_keep(b, "sum", dy, *axis)?;
            let ps = b.op("softmax_sum", Op::Mul, &[p, s])?;
            one(b.op("grad", Op::Sub, &[dy, ps]))
        }
        Op::SparseSoftmaxCrossEntropy { reduction } => {
            sparse_softmax_cross_entropy(b, input(0), input(1), *reduction, dy)
        }
        Op::ReduceSum { axes, keep_dims } => {
            let x = ty(b, input(0));
            one(expand_reduced(b, dy, &x.shape, axes, *keep_dims))
        }
        Op::ReduceMean { axes, keep_dims } => {
            let x = ty(b, input(0));
            let count: usize = axes.iter().map(|&a| x.shape.dims()[a]).product();
            let c = b.scalar("count", x.dtype, count as f64)?;
            let q = b.op("mean", Op::Div, &[dy, c])?;
            one(expand_reduced(b, q, &x.shape, axes, *keep_dims))
        }
        Op::ReduceMax { axes, .. } => {
            // TensorFlow's rule: the gradient is shared equally between tied maxima.
            let x = ty(b, input(0));
            let kept = kept_shape(&x.shape, axes);
            let y = reshape_to(b, id, &kept)?;
            let dyk = reshape_to(b, dy, &kept)?;
            let hit = b.op("is_max", Op::Equal, &[input(0), y])?;
            let mask = b.op("mask", Op::Cast { dtype: x.dtype }, &[hit])?;
            let count = b.op(
                "ties",
                Op::ReduceSum {
                    axes: axes.clone(),
                    keep_dims: true,
                },
                &[mask],
            )?;
            let share = b.op("share", Op::Div, &[dyk, count])?;
            one(b.op("grad", Op::Mul, &[mask, share]))
        }
        Op::Reshape { .. } => {
            let shape = ty(b, input(0)).shape;
            one(reshape_to(b, dy, &shape))
        }
        Op::Transpose { perm } => {
            let mut inverse = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inverse[p] = i;
            }
            one(b.op("grad", Op::Transpose { perm: inverse }, &[dy]))
        }
        Op::Broadcast { .. } => {
            let shape = ty(b, input(0)).shape;
            one(unbroadcast(b, dy, &shape))
        }
        Op::Slice { begin, end } => {
            let dims = ty(b, input(0)).shape.0;
            let after = dims.iter().zip(end).map(|(&d, &e)| d - e).collect();
            let op = Op::Pad {
                before: begin.clone(),
                after,
            };
            one(b.op("grad", op, &[dy]))
        }
        Op::Pad { before, .. } => {
            let dims = ty(b, input(0)).shape.0;
            let end = dims.iter().zip(before).map(|(&d, &p)| p + d).collect();
            let op = Op::Slice {
                begin: before.clone(),
                end,
            };
            one(b.op("grad", op, &[dy]))
        }
        Op::Concat { axis } => {
            let out = ty(b, dy).shape.0;
            let mut offset = 0;
            let mut grads = Vec::with_capacity(n.inputs.len());
            for (slot, &inp) in n.inputs.iter().enumerate() {
                let len = ty(b, inp).shape.dims()[*axis];
                grads.push(if wanted[slot] {
                    let mut begin = vec![0; out.len()];
                    let mut end = out.clone();
                    begin[*axis] = offset;
                    end[*axis] = offset + len;
                    let op = Op::Slice { begin, end };
                    Some(b.op(&format!("grad_{slot}"), op, &[dy])?)
                } else {
                    None
                });
                offset += len;
            }
            Ok(grads)
        }
        Op::Cast { .. } => {
            // Only float -> float casts are on active paths: the gradient is cast back.
            let from = ty(b, input(0)).dtype;
            if ty(b, dy).dtype == from {
                return Ok(vec![Some(dy)]);
            }
            one(b.op("grad", Op::Cast { dtype: from }, &[dy]))
        }
        Op::Outfeed { .. } => Ok(vec![Some(dy)]),
        Op::Equal | Op::Greater | Op::Less | Op::ArgMax { .. } | Op::OneHot { .. } => {
            // Bool/integer outputs or inputs: never active (see the module docs).
            Ok(vec![None; n.inputs.len()])
        }
        // The convolution family's rules are in `crate::conv` (handled above).
        Op::Conv2d { .. }
        | Op::Conv2dInputGrad { .. }
        | Op::Conv2dWeightGrad { .. }
        | Op::MaxPool2d { .. }
        | Op::MaxPool2dGrad { .. } => Err(IrError::Program(format!(
            "autodiff: the rule of {} is in the convolution family",
            n.op.name()
        ))),
        Op::ActivationGrad { .. }
        | Op::Assign
        | Op::ReplicatedReduceScatter { .. }
        | Op::ReplicatedAllGather { .. } => Err(IrError::Invalid {
            node: n.name.clone(),
            op: n.op.name(),
            message: match n.op {
                Op::Assign => "no gradient is defined for a variable assignment; the loss must not depend on it".into(),
                Op::ReplicatedReduceScatter { .. } | Op::ReplicatedAllGather { .. } => "no gradient is defined for a cross-replica collective (replicated tensor sharding makes them in the weight update, after autodiff)".into(),
                _ => "no gradient is defined for ActivationGrad (second-order gradients are not supported)".into(),
            },
        }),
    }
}

fn ty(b: &GraphBuilder, id: NodeId) -> TensorType {
    b.graph().node(id).ty.clone()
}

/// `g * s` (no node when `s` is 1).
fn scale_by(b: &mut GraphBuilder, g: NodeId, s: f64) -> R {
    if s == 1.0 {
        return Ok(g);
    }
    let dtype = ty(b, g).dtype;
    let c = b.scalar("scale", dtype, s)?;
    b.op("scaled", Op::Mul, &[g, c])
}

/// `g` reshaped to `shape` (no node when it already has it).
fn reshape_to(b: &mut GraphBuilder, g: NodeId, shape: &Shape) -> R {
    if &ty(b, g).shape == shape {
        return Ok(g);
    }
    b.op(
        "reshape",
        Op::Reshape {
            shape: shape.clone(),
        },
        &[g],
    )
}

/// Sums a gradient of a broadcast result back to the shape of the operand that was
/// broadcast: over the leading dimensions the operand lacks and over its size-1 dimensions
/// that were stretched.
pub(super) fn unbroadcast(b: &mut GraphBuilder, g: NodeId, target: &Shape) -> R {
    let gshape = ty(b, g).shape;
    if &gshape == target {
        return Ok(g);
    }
    let lead = gshape.rank() - target.rank();
    let mut axes: Vec<usize> = (0..lead).collect();
    for (i, &d) in target.dims().iter().enumerate() {
        if d == 1 && gshape.dims()[lead + i] != 1 {
            axes.push(lead + i);
        }
    }
    let summed = if axes.is_empty() {
        g
    } else {
        let op = Op::ReduceSum {
            axes,
            keep_dims: false,
        };
        b.op("unbroadcast", op, &[g])?
    };
    reshape_to(b, summed, target)
}

/// The shape of a reduction's result with the reduced axes kept as size 1.
fn kept_shape(x: &Shape, axes: &[usize]) -> Shape {
    let mut dims = x.0.clone();
    for &a in axes {
        dims[a] = 1;
    }
    Shape(dims)
}

/// Broadcasts the gradient of a reduction over `axes` back to the input shape.
fn expand_reduced(
    b: &mut GraphBuilder,
    g: NodeId,
    x: &Shape,
    axes: &[usize],
    keep_dims: bool,
) -> R {
    let g = if keep_dims {
        g
    } else {
        reshape_to(b, g, &kept_shape(x, axes))?
    };
    if &ty(b, g).shape == x {
        return Ok(g);
    }
    b.op("grad", Op::Broadcast { shape: x.clone() }, &[g])
}

/// Sum over one axis, keeping it.
fn reduce_keep(b: &mut GraphBuilder, base: &str, x: NodeId, axis: usize) -> R {
    let op = Op::ReduceSum {
        axes: vec![axis],
        keep_dims: true,
    };
    b.op(base, op, &[x])
}

fn activation(b: &mut GraphBuilder, activation: Activation, x: NodeId, dy: NodeId) -> R {
    b.op("grad", Op::ActivationGrad { activation }, &[x, dy])
}

/// A broadcasting binary op: each wanted input's rule, summed back to its shape.
fn binary(
    b: &mut GraphBuilder,
    n: &Node,
    dy: NodeId,
    wanted: &[bool],
    rule_a: impl FnOnce(&mut GraphBuilder, NodeId, &Shape) -> R,
    rule_b: impl FnOnce(&mut GraphBuilder, NodeId, &Shape) -> R,
) -> Grads {
    let sa = ty(b, n.inputs[0]).shape;
    let sb = ty(b, n.inputs[1]).shape;
    let ga = if wanted[0] {
        let g = rule_a(b, dy, &sa)?;
        Some(unbroadcast(b, g, &sa)?)
    } else {
        None
    };
    let gb = if wanted[1] {
        let g = rule_b(b, dy, &sb)?;
        Some(unbroadcast(b, g, &sb)?)
    } else {
        None
    };
    Ok(vec![ga, gb])
}

/// `y = a / b`: `da = dy / b`, `db = -(dy / b) * y` (= `-dy a / b^2`, reusing `y`).
fn div(b: &mut GraphBuilder, id: NodeId, n: &Node, dy: NodeId, wanted: &[bool]) -> Grads {
    let (sa, sb) = (ty(b, n.inputs[0]).shape, ty(b, n.inputs[1]).shape);
    let q = b.op("dy_over_b", Op::Div, &[dy, n.inputs[1]])?;
    let ga = if wanted[0] {
        Some(unbroadcast(b, q, &sa)?)
    } else {
        None
    };
    let gb = if wanted[1] {
        let qy = b.op("dy_y_over_b", Op::Mul, &[q, id])?;
        let g = unbroadcast(b, qy, &sb)?;
        Some(b.op("grad_b", Op::Neg, &[g])?)
    } else {
        None
    };
    Ok(vec![ga, gb])
}

/// Swaps the last two dimensions.
fn transpose_last2(b: &mut GraphBuilder, base: &str, x: NodeId) -> R {
    let r = ty(b, x).shape.rank();
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    b.op(base, Op::Transpose { perm }, &[x])
}

/// `y[..., m, n] = a[..., m, k] @ b[..., k, n]` with broadcast batch dimensions:
/// `da = dy @ b^T`, `db = a^T @ dy`, each summed over the batch dimensions its operand was
/// broadcast along. When `b` is a plain matrix shared by a batch of `a` (a dense layer applied
/// to a batched activation), `db` is one matmul over the flattened batch, `[k, B*m] @ [B*m,
/// n]`, as PopLibs plans it, so the batch sum happens inside the matmul's partials.
fn matmul(b: &mut GraphBuilder, a: NodeId, w: NodeId, dy: NodeId, wanted: &[bool]) -> Grads {
    let (ta, tw) = (ty(b, a), ty(b, w));
    let ga = if wanted[0] {
        let wt = transpose_last2(b, "transpose_b", w)?;
        let g = b.op("grad_a", Op::MatMul, &[dy, wt])?;
        Some(unbroadcast(b, g, &ta.shape)?)
    } else {
        None
    };
    let gb = if !wanted[1] {
        None
    } else if tw.shape.rank() == 2 && ta.shape.rank() > 2 {
        let (k, n) = (tw.shape.dims()[0], tw.shape.dims()[1]);
        let rows = ta.num_elements() / k.max(1);
        let a2 = reshape_to(b, a, &Shape::new([rows, k]))?;
        let dy2 = reshape_to(b, dy, &Shape::new([rows, n]))?;
        let at = transpose_last2(b, "transpose_a", a2)?;
        Some(b.op("grad_b", Op::MatMul, &[at, dy2])?)
    } else {
        let at = transpose_last2(b, "transpose_a", a)?;
        let g = b.op("grad_b", Op::MatMul, &[at, dy])?;
        Some(unbroadcast(b, g, &tw.shape)?)
    };
    Ok(vec![ga, gb])
}

/// `loss = reduce(-log softmax(logits)[label])`: `dlogits = (softmax(logits) - onehot) * dy`,
/// divided by the batch size for the mean (PopLibs/TF fuse it the same way).
fn sparse_softmax_cross_entropy(
    b: &mut GraphBuilder,
    logits: NodeId,
    labels: NodeId,
    reduction: LossReduction,
    dy: NodeId,
) -> Grads {
    let t = ty(b, logits);
    let (rows, classes) = (t.shape.dims()[0], t.shape.dims()[1]);
    let p = b.op("softmax", Op::Softmax { axis: 1 }, &[logits])?;
    let onehot = b.op(
        "onehot",
        Op::OneHot {
            depth: classes,
            dtype: t.dtype,
        },
        &[labels],
    )?;
    let diff = b.op("softmax_minus_onehot", Op::Sub, &[p, onehot])?;
    let scale = match reduction {
        LossReduction::Sum => dy,
        LossReduction::Mean => {
            let c = b.scalar("batch", t.dtype, rows as f64)?;
            b.op("dy_over_batch", Op::Div, &[dy, c])?
        }
    };
    let g = b.op("grad", Op::Mul, &[diff, scale])?;
    Ok(vec![Some(g), None])
}

//! Structural tests of the gradient rules: types, shapes, names and fusions. Values are
//! checked against finite differences in the simulator crate (`sim/tests`).

use super::*;
use crate::dtype::{DType, Shape, TensorType};
use crate::graph::Phase;
use crate::op::{Activation, Init, LossReduction};

/// A graph with variables of the given shapes, the node `f(vars)` and a scalar loss = sum of
/// its output; returns the builder, the loss and the variables.
fn setup(
    dtype: DType,
    shapes: &[&[usize]],
    f: impl FnOnce(&mut GraphBuilder, &[NodeId]) -> Result<NodeId, IrError>,
) -> (GraphBuilder, NodeId, Vec<NodeId>) {
    let mut b = GraphBuilder::new();
    let vars: Vec<NodeId> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            b.variable(&format!("v{i}"), dtype, s.to_vec(), Init::Zeros)
                .unwrap()
        })
        .collect();
    let y = f(&mut b, &vars).unwrap();
    let rank = b.graph().node(y).ty.shape.rank();
    let axes: Vec<usize> = (0..rank).collect();
    let loss = b.reduce_sum(y, &axes, false).unwrap();
    (b, loss, vars)
}

fn grads_of(b: &mut GraphBuilder, loss: NodeId, wrt: &[NodeId]) -> Vec<Option<NodeId>> {
    let dtype = b.graph().node(loss).ty.dtype;
    let seed = b.scalar("seed", dtype, 1.0).unwrap();
    gradients(b, loss, seed, wrt).unwrap()
}

/// Every gradient exists and has its variable's type; every new node is under `bwd/`.
fn check_types(dtype: DType, shapes: &[&[usize]], op: Op) {
    let arity = shapes.len();
    let (mut b, loss, vars) = setup(dtype, shapes, |b, v| b.op("f", op.clone(), &v[..arity]));
    let before = b.graph().len();
    let grads = grads_of(&mut b, loss, &vars);
    let g = b.graph();
    for (v, d) in vars.iter().zip(&grads) {
        let d = d.unwrap_or_else(|| panic!("{op:?}: no gradient for {}", g.node(*v).name));
        assert_eq!(g.node(d).ty, g.node(*v).ty, "{op:?}");
    }
    for (id, n) in g.nodes() {
        if id.as_usize() >= before && n.name != "seed" {
            assert!(
                n.name.starts_with("bwd/"),
                "{op:?}: node {} not in bwd/",
                n.name
            );
            assert_eq!(n.phase, Phase::Step);
        }
    }
}

#[test]
fn every_differentiable_op_has_typed_gradients() {
    for dtype in [DType::F32, DType::F16] {
        check_types(dtype, &[&[2, 3], &[3, 4]], Op::MatMul);
        check_types(dtype, &[&[5, 2, 3], &[3, 4]], Op::MatMul);
        check_types(dtype, &[&[2, 3], &[5, 3, 4]], Op::MatMul);
        check_types(dtype, &[&[5, 1, 2, 3], &[4, 3, 2]], Op::MatMul);
        for op in [Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Max, Op::Min] {
            check_types(dtype, &[&[2, 3], &[2, 3]], op.clone());
            check_types(dtype, &[&[4, 1, 3], &[2, 1]], op.clone());
            check_types(dtype, &[&[], &[2, 3]], op);
        }
        check_types(dtype, &[&[2, 3], &[3]], Op::ScaledAdd { scale: -0.5 });
        for op in [
            Op::Neg,
            Op::Abs,
            Op::Exp,
            Op::Log,
            Op::Sqrt,
            Op::Relu,
            Op::Sigmoid,
            Op::Tanh,
            Op::Gelu,
            Op::Softmax { axis: 1 },
            Op::LogSoftmax { axis: 0 },
            Op::ReduceSum {
                axes: vec![0, 2],
                keep_dims: false,
            },
            Op::ReduceMean {
                axes: vec![1],
                keep_dims: true,
            },
            Op::ReduceMax {
                axes: vec![2],
                keep_dims: false,
            },
            Op::Reshape {
                shape: Shape::new([6, 4]),
            },
            Op::Transpose {
                perm: vec![2, 0, 1],
            },
            Op::Broadcast {
                shape: Shape::new([5, 2, 3, 4]),
            },
            Op::Slice {
                begin: vec![0, 1, 1],
                end: vec![2, 3, 3],
            },
            Op::Pad {
                before: vec![1, 0, 2],
                after: vec![0, 1, 0],
            },
            Op::Cast { dtype: DType::F32 },
            Op::Cast { dtype: DType::F16 },
            Op::Outfeed { stream: "s".into() },
        ] {
            check_types(dtype, &[&[2, 3, 4]], op);
        }
        check_types(dtype, &[&[2, 3], &[2, 1], &[2, 4]], Op::Concat { axis: 1 });
    }
}

#[test]
fn select_gradients_skip_the_condition() {
    let (mut b, loss, vars) = setup(DType::F32, &[&[3], &[2, 3]], |b, v| {
        let c = b.splat("c", DType::F32, [3], 0.0)?;
        let cond = b.op("cond", Op::Greater, &[v[0], c])?;
        b.op("sel", Op::Select, &[cond, v[0], v[1]])
    });
    let grads = grads_of(&mut b, loss, &vars);
    let g = b.graph();
    assert_eq!(g.node(grads[0].unwrap()).ty.shape, Shape::new([3]));
    assert_eq!(g.node(grads[1].unwrap()).ty.shape, Shape::new([2, 3]));
}

#[test]
fn sparse_softmax_cross_entropy_is_fused() {
    for reduction in [LossReduction::Mean, LossReduction::Sum] {
        let mut b = GraphBuilder::new();
        let logits = b
            .variable("logits", DType::F32, [4, 10], Init::Zeros)
            .unwrap();
        let labels = b.input("labels", DType::I32, [4]).unwrap();
        let loss = b
            .sparse_softmax_cross_entropy(logits, labels, reduction)
            .unwrap();
        let grads = grads_of(&mut b, loss, &[logits, labels]);
        assert!(grads[1].is_none(), "integer labels have no gradient");
        let g = b.graph();
        let d = g.node(grads[0].unwrap());
        assert_eq!(d.name, "bwd/loss/grad");
        assert_eq!(d.ty, TensorType::new(DType::F32, [4, 10]));
        let ops: Vec<&str> = g
            .nodes()
            .filter(|(_, n)| n.name.starts_with("bwd/loss/"))
            .map(|(_, n)| n.op.name())
            .collect();
        assert!(
            ops.contains(&"OneHot") && ops.contains(&"Softmax"),
            "{ops:?}"
        );
        assert!(
            !ops.contains(&"Log") && !ops.contains(&"LogSoftmax"),
            "{ops:?}"
        );
        assert_eq!(ops.contains(&"Div"), reduction == LossReduction::Mean);
    }
}

#[test]
fn activations_use_one_fused_gradient_node() {
    for (op, act) in [
        (Op::Relu, Activation::Relu),
        (Op::Sigmoid, Activation::Sigmoid),
        (Op::Tanh, Activation::Tanh),
        (Op::Gelu, Activation::Gelu),
    ] {
        let (mut b, loss, vars) = setup(DType::F16, &[&[8]], |b, v| b.unary(op.clone(), v[0]));
        let grads = grads_of(&mut b, loss, &vars);
        let g = b.graph();
        let d = g.node(grads[0].unwrap());
        assert_eq!(d.op, Op::ActivationGrad { activation: act });
        // ReLU's from its forward output (PopLibs' and PopART's), the others' from the
        // forward input.
        let from = g.node(d.inputs[0]);
        if act == Activation::Relu {
            assert_eq!(from.op, Op::Relu, "fused from the forward output");
        } else {
            assert_eq!(from.name, "v0", "fused from the forward input");
        }
    }
}

#[test]
fn shared_weight_batch_matmul_reduces_inside_one_matmul() {
    let (mut b, loss, vars) = setup(DType::F32, &[&[5, 2, 3], &[3, 4]], |b, v| {
        b.matmul(v[0], v[1])
    });
    let grads = grads_of(&mut b, loss, &vars);
    let g = b.graph();
    let dw = g.node(grads[1].unwrap());
    assert_eq!(dw.op, Op::MatMul);
    let a = g.node(dw.inputs[0]);
    assert_eq!(a.ty.shape, Shape::new([3, 10]), "[k, B*m]");
}

#[test]
fn non_differentiable_paths_stop_gradients() {
    // loss = sum(cast(argmax(x))) + sum(onehot(argmax(x))): no path is differentiable.
    let mut b = GraphBuilder::new();
    let x = b.variable("x", DType::F32, [3, 4], Init::Zeros).unwrap();
    let am = b.argmax(x, 1).unwrap();
    let f = b.cast(am, DType::F32).unwrap();
    let oh = b
        .op(
            "onehot",
            Op::OneHot {
                depth: 4,
                dtype: DType::F32,
            },
            &[am],
        )
        .unwrap();
    let s1 = b.reduce_sum(f, &[0], false).unwrap();
    let s2 = b.reduce_sum(oh, &[0, 1], false).unwrap();
    let loss = b.add(s1, s2).unwrap();
    let unrelated = b
        .variable("unrelated", DType::F32, [2], Init::Zeros)
        .unwrap();
    let before = b.graph().len();
    let grads = grads_of(&mut b, loss, &[x, unrelated]);
    assert_eq!(grads, vec![None, None]);
    assert_eq!(b.graph().len(), before + 1, "only the seed was added");
}

#[test]
fn fan_out_sums_contributions_and_wrt_loss_is_seed() {
    let (mut b, loss, vars) = setup(DType::F32, &[&[4]], |b, v| b.mul(v[0], v[0]));
    let dtype = DType::F32;
    let seed = b.scalar("seed", dtype, 2.0).unwrap();
    let grads = gradients(&mut b, loss, seed, &[vars[0], loss]).unwrap();
    let g = b.graph();
    let d = g.node(grads[0].unwrap());
    assert_eq!(d.name, "bwd/v0/grad_sum");
    assert_eq!(d.op, Op::Add);
    assert_eq!(grads[1], Some(seed));
}

#[test]
fn errors_name_the_fault() {
    let (mut b, loss, vars) = setup(DType::F32, &[&[4], &[4]], |b, v| {
        b.activation_grad(Activation::Relu, v[0], v[1])
    });
    let seed = b.scalar("seed", DType::F32, 1.0).unwrap();
    let err = gradients(&mut b, loss, seed, &vars)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("activation_grad") && err.contains("second-order"),
        "{err}"
    );

    let bad_seed = b.scalar("bad_seed", DType::F16, 1.0).unwrap();
    let err = gradients(&mut b, loss, bad_seed, &vars)
        .unwrap_err()
        .to_string();
    assert!(err.contains("seed 'bad_seed' has type f16[]"), "{err}");

    let am = b.argmax(vars[0], 0).unwrap();
    let seed_i = b.scalar("seed_i", DType::I32, 1.0).unwrap();
    let err = gradients(&mut b, am, seed_i, &vars)
        .unwrap_err()
        .to_string();
    assert!(err.contains("expected a floating-point tensor"), "{err}");
}

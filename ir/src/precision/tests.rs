//! Unit tests of the precision policies: an MLP under each policy, explicit FP16 left alone,
//! an FP32 loss widening what meets it, and fresh names that never collide with user names.

use super::*;
use crate::builder::GraphBuilder;
use crate::models::{mlp, MlpSpec};
use crate::op::{Init, LossReduction};

fn mlp_graph() -> Graph {
    mlp(&MlpSpec {
        input_dtype: DType::U8,
        input_scale: 0.25,
        seed: 1,
        ..MlpSpec::new(4, &[6, 5, 3])
    })
    .unwrap()
    .graph
}

fn dtype_of(g: &Graph, name: &str) -> DType {
    g.node(g.find(name).unwrap_or_else(|| panic!("no node {name}")))
        .ty
        .dtype
}

#[test]
fn mlp_under_each_policy() {
    let fwd = mlp_graph();
    for p in Precision::ALL {
        let g = apply(&fwd, p).unwrap();
        crate::validate::validate_graph(&g).unwrap();
        for (_, n) in fwd.nodes() {
            assert!(g.find(&n.name).is_some(), "{p}: lost node {}", n.name);
        }
        assert_eq!(
            dtype_of(&g, "features"),
            DType::U8,
            "integer streams untouched"
        );
        assert_eq!(dtype_of(&g, "labels"), DType::I32);
        assert_eq!(dtype_of(&g, "dense1/weights"), p.weights());
        assert_eq!(dtype_of(&g, "dense1/matmul"), p.compute());
        assert_eq!(dtype_of(&g, "input_scale"), p.compute());
        assert_eq!(
            dtype_of(&g, "loss"),
            DType::F32,
            "loss in FP32 in every policy"
        );
        let master_cast = g.find("dense1/weights/cast_f16");
        assert_eq!(master_cast.is_some(), p == Precision::P16_32, "{p}");
        if let Some(c) = master_cast {
            // Every reader of the master weight reads the cast.
            let w = g.find("dense1/weights").unwrap();
            assert_eq!(g.consumers(w), vec![c]);
        }
        let logits_cast = g.find("loss/logits_f32");
        assert_eq!(logits_cast.is_some(), p.compute() == DType::F16, "{p}");
    }
    assert_eq!(
        apply(&fwd, Precision::P32_32).unwrap(),
        fwd,
        "32.32 is the identity"
    );
}

#[test]
fn explicit_f16_is_never_changed() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [4]).unwrap();
    let h = b.cast(x, DType::F16).unwrap();
    let e = b.splat("e", DType::F16, [4], 0.5).unwrap();
    let w = b.variable("w16", DType::F16, [4], Init::Zeros).unwrap();
    let y = b.add(h, e).unwrap();
    b.mul(y, w).unwrap();
    let fwd = b.finish();
    let g = apply(&fwd, Precision::P32_32).unwrap();
    assert_eq!(g, fwd);
    let g = apply(&fwd, Precision::P16_32).unwrap();
    assert_eq!(dtype_of(&g, "w16"), DType::F16);
    assert!(g.find("w16/cast_f16").is_none());
    assert_eq!(dtype_of(&g, "x"), DType::F16);
}

#[test]
fn fp32_loss_widens_what_meets_it_and_assigns_cast_their_value() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [2, 3]).unwrap();
    let labels = b.input("labels", DType::I32, [2]).unwrap();
    let loss = b
        .sparse_softmax_cross_entropy(x, labels, LossReduction::Mean)
        .unwrap();
    let c = b.scalar("reg", DType::F32, 0.1).unwrap();
    b.named("total", Op::Add, &[loss, c]).unwrap();
    let state = b.variable("count", DType::F32, [], Init::Zeros).unwrap();
    let one = b.scalar("one", DType::F32, 1.0).unwrap();
    let next = b.add(state, one).unwrap();
    b.named("count_assign", Op::Assign, &[state, next]).unwrap();
    let fwd = b.finish();

    let g = apply(&fwd, Precision::P16_32).unwrap();
    assert_eq!(dtype_of(&g, "total"), DType::F32);
    assert_eq!(dtype_of(&g, "total/in1_f32"), DType::F32);
    assert_eq!(dtype_of(&g, "reg"), DType::F16);
    let assign = g.node(g.find("count_assign").unwrap());
    assert_eq!(
        g.node(assign.inputs[0]).name,
        "count",
        "target stays the variable"
    );
    assert_eq!(g.node(assign.inputs[1]).name, "count_assign/value_f32");

    let g = apply(&fwd, Precision::P16_16).unwrap();
    assert_eq!(dtype_of(&g, "count"), DType::F16);
    assert!(
        g.find("count_assign/value_f16").is_none(),
        "no cast when dtypes agree"
    );
}

#[test]
fn fresh_names_never_collide_with_user_names() {
    let mut b = GraphBuilder::new();
    let w = b.variable("w", DType::F32, [2], Init::Zeros).unwrap();
    b.named("w/cast_f16", Op::Neg, &[w]).unwrap();
    let g = apply(&b.finish(), Precision::P16_32).unwrap();
    let user = g.node(g.find("w/cast_f16").unwrap());
    assert_eq!(user.op, Op::Neg);
    assert_eq!(g.node(user.inputs[0]).name, "w/cast_f16_1");
}

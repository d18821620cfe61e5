//! Unit tests of the training transform: optimizer steps, loss scaling, gradient
//! accumulation, optimizer state dtypes, training against inference in `prepare`, and the
//! errors bad training specs raise.

use super::*;
use crate::models::{mlp, MlpSpec};
use crate::program::Optimizer;

fn program(spec: TrainingSpec) -> Program {
    let mut p = mlp(&MlpSpec {
        seed: 1,
        ..MlpSpec::new(4, &[6, 5, 3])
    })
    .unwrap();
    p.training = Some(spec);
    p.device_iterations = 7;
    p
}

fn spec(optimizer: Optimizer, precision: Precision, ls: f64, ga: u32) -> TrainingSpec {
    TrainingSpec {
        loss: "loss".into(),
        optimizer,
        loss_scaling: ls,
        precision,
        gradient_accumulation: ga,
        accumulation_dtype: None,
        stable_norm: false,
    }
}

const SGD: Optimizer = Optimizer::Sgd { learning_rate: 0.1 };
const VARS: [&str; 4] = [
    "dense1/weights",
    "dense1/bias",
    "dense2/weights",
    "dense2/bias",
];

fn node<'g>(g: &'g Graph, name: &str) -> &'g crate::graph::Node {
    g.node(g.find(name).unwrap_or_else(|| panic!("no node {name}")))
}

/// Phase invariants every training step satisfies: Step nodes never read Update nodes, and
/// every Assign writes a Variable with a value of its type.
fn check_phases(g: &Graph) {
    if let Err(e) = crate::validate::validate_graph(g) {
        panic!("the training step does not validate: {e}");
    }
    for (_, n) in g.nodes() {
        if n.phase == Phase::Step {
            for &i in &n.inputs {
                assert_eq!(
                    g.node(i).phase,
                    Phase::Step,
                    "{} reads Update {}",
                    n.name,
                    g.node(i).name
                );
            }
        }
        if matches!(n.op, Op::Assign) {
            assert!(
                matches!(g.node(n.inputs[0]).op, Op::Variable { .. }),
                "{}",
                n.name
            );
        }
    }
}

#[test]
fn sgd_step_without_accumulation() {
    for p in Precision::ALL {
        let g = training_step(&program(spec(SGD, p, 1.0, 1)), &spec(SGD, p, 1.0, 1)).unwrap();
        check_phases(&g);
        for v in VARS {
            let assign = node(&g, &format!("update/{v}/assign"));
            assert_eq!(assign.phase, Phase::Update);
            let new = g.node(assign.inputs[1]);
            assert_eq!(new.op, Op::ScaledAdd { scale: -0.1 });
            assert_eq!(new.ty.dtype, p.weights());
            // N = 1 and no loss scaling: the update reads the Step-phase gradient directly.
            let grad = g.node(new.inputs[1]);
            assert_eq!(grad.phase, Phase::Step, "{p} {v}: {}", grad.name);
            assert!(grad.name.starts_with("bwd/"), "{}", grad.name);
            assert!(g.find(&format!("{v}/grad_accum")).is_none());
        }
        assert!(
            g.find("update/dense1/weights/unscale").is_none(),
            "ls = 1: no unscale"
        );
        let seed = node(&g, "bwd/loss_scaling");
        assert_eq!(seed.ty.dtype, DType::F32);
    }
}

#[test]
fn loss_scaling_unscales_in_fp32_for_fp32_weights() {
    for (p, unscale_dtype) in [
        (Precision::P16_32, DType::F32),
        (Precision::P16_16, DType::F16),
        (Precision::P32_32, DType::F32),
    ] {
        let s = spec(SGD, p, 128.0, 1);
        let g = training_step(&program(s.clone()), &s).unwrap();
        check_phases(&g);
        let unscale = node(&g, "update/dense1/weights/unscale");
        assert_eq!(unscale.ty.dtype, unscale_dtype, "{p}");
        assert_eq!(unscale.op, Op::Div);
        let divisor = g.node(unscale.inputs[1]);
        assert_eq!(
            divisor.op,
            Op::Constant {
                dtype: unscale_dtype,
                shape: crate::dtype::Shape::scalar(),
                value: crate::op::Literal::Splat(128.0)
            }
        );
        // In 16.32 the FP16 backward pass meets the FP32 master weight at the cast.
        if p == Precision::P16_32 {
            assert_eq!(node(&g, "bwd/dense1/matmul/grad_b").ty.dtype, DType::F16);
            assert_eq!(
                node(&g, "bwd/dense1/weights/cast_f16/grad").ty.dtype,
                DType::F32
            );
        }
    }
}

#[test]
fn gradient_accumulation_structure() {
    let mut s = spec(SGD, Precision::P16_16, 64.0, 4);
    s.accumulation_dtype = Some(DType::F32);
    let g = training_step(&program(s.clone()), &s).unwrap();
    check_phases(&g);
    for v in VARS {
        let acc = node(&g, &format!("{v}/grad_accum"));
        assert!(matches!(
            acc.op,
            Op::Variable {
                dtype: DType::F32,
                init: Init::Zeros,
                ..
            }
        ));
        let step_assign = node(&g, &format!("bwd/{v}/grad_accum/assign"));
        assert_eq!(step_assign.phase, Phase::Step);
        let add = g.node(step_assign.inputs[1]);
        assert_eq!(add.op, Op::Add);
        assert_eq!(
            g.node(add.inputs[1]).name,
            format!("bwd/{v}/grad_accum/cast")
        );
        let reset = node(&g, &format!("update/{v}/grad_accum_reset"));
        assert_eq!(reset.phase, Phase::Update);
        assert_eq!(g.node(reset.inputs[0]).name, format!("{v}/grad_accum"));
        // Mean over 4 micro-batches and unscale by 64, in FP32, then cast to FP16 weights.
        let unscale = node(&g, &format!("update/{v}/unscale"));
        assert_eq!(unscale.ty.dtype, DType::F32);
        assert_eq!(g.node(unscale.inputs[0]).name, format!("{v}/grad_accum"));
        let divisor = g.node(unscale.inputs[1]);
        assert!(
            matches!(divisor.op, Op::Constant { value: crate::op::Literal::Splat(d), .. } if d == 256.0)
        );
        assert_eq!(
            node(&g, &format!("update/{v}/grad_weight_dtype")).ty.dtype,
            DType::F16
        );
    }
    // Default accumulator dtype = weight dtype.
    let s = spec(SGD, Precision::P16_16, 1.0, 2);
    let g = training_step(&program(s.clone()), &s).unwrap();
    assert_eq!(node(&g, "dense1/weights/grad_accum").ty.dtype, DType::F16);
}

#[test]
fn optimizer_state_in_weight_dtype() {
    let momentum = Optimizer::Momentum {
        learning_rate: 0.1,
        momentum: 0.9,
    };
    let adam = Optimizer::Adam {
        learning_rate: 0.01,
        beta1: 0.9,
        beta2: 0.999,
        epsilon: 1e-4,
    };
    for p in Precision::ALL {
        let s = spec(momentum.clone(), p, 1.0, 1);
        let g = training_step(&program(s.clone()), &s).unwrap();
        check_phases(&g);
        for v in VARS {
            assert_eq!(node(&g, &format!("{v}/momentum")).ty.dtype, p.weights());
            assert_eq!(
                node(&g, &format!("update/{v}/momentum_assign")).phase,
                Phase::Update
            );
            let new = node(&g, &format!("update/{v}/new"));
            assert_eq!(new.op, Op::ScaledAdd { scale: -0.1 });
            assert_eq!(
                g.node(new.inputs[1]).name,
                format!("update/{v}/momentum_new")
            );
        }
        let s = spec(adam.clone(), p, 1.0, 1);
        let g = training_step(&program(s.clone()), &s).unwrap();
        check_phases(&g);
        for v in VARS {
            assert_eq!(node(&g, &format!("{v}/adam_m")).ty.dtype, p.weights());
            assert_eq!(node(&g, &format!("{v}/adam_v")).ty.dtype, p.weights());
        }
        assert_eq!(node(&g, "adam/beta1_power").ty.dtype, DType::F32);
        assert!(
            matches!(node(&g, "adam/beta2_power").op, Op::Variable { init: Init::Constant(b), .. } if b == 0.999)
        );
        assert_eq!(
            node(&g, "update/adam/beta1_power_assign").phase,
            Phase::Update
        );
        assert_eq!(
            g.find("update/adam/lr_t_f16").is_some(),
            p.weights() == DType::F16
        );
    }
}

#[test]
fn prepare_selects_training_or_inference() {
    let p = program(spec(SGD, Precision::P16_32, 1.0, 3));
    let step = prepare(&p, None, false).unwrap();
    assert_eq!(step.gradient_accumulation, 3);
    assert_eq!(step.device_iterations, 7);
    assert_eq!(step.precision, Some(Precision::P16_32));
    assert!(step.graph.nodes().any(|(_, n)| n.phase == Phase::Update));

    let over = prepare(&p, Some(Precision::P32_32), false).unwrap();
    assert_eq!(
        node(&over.graph, "dense1/weights/grad_accum").ty.dtype,
        DType::F32
    );
    assert_eq!(node(&over.graph, "dense1/matmul").ty.dtype, DType::F32);

    let inf = prepare(&p, None, true).unwrap();
    crate::validate::validate_graph(&inf.graph).unwrap();
    assert_eq!(inf.gradient_accumulation, 1);
    assert_eq!(inf.precision, Some(Precision::P16_32));
    assert!(inf
        .graph
        .nodes()
        .all(|(_, n)| !matches!(n.op, Op::Assign) && n.phase == Phase::Step));
    assert!(
        inf.graph.find("outfeed_loss").is_some() && inf.graph.find("outfeed_accuracy").is_some()
    );
    assert_eq!(node(&inf.graph, "dense1/matmul").ty.dtype, DType::F16);

    let mut fwd = p.clone();
    fwd.training = None;
    let plain = prepare(&fwd, None, false).unwrap();
    assert_eq!(plain.graph, fwd.graph);
    assert_eq!(plain.precision, None);
}

#[test]
fn inference_drops_user_assigns() {
    let mut b = GraphBuilder::new();
    let c = b.variable("count", DType::F32, [], Init::Zeros).unwrap();
    let one = b.scalar("one", DType::F32, 1.0).unwrap();
    let next = b.add(c, one).unwrap();
    let a = b.assign(c, next).unwrap();
    b.outfeed("count", a).unwrap();
    let p = Program::new("counter", b.finish());
    let g = prepare(&p, None, true).unwrap().graph;
    let out = node(&g, "outfeed_count");
    assert_eq!(
        g.node(out.inputs[0]).name,
        "add",
        "reads the assigned value"
    );
    assert!(g.find("assign").is_none());
    assert_eq!(prepare(&p, None, false).unwrap().graph, p.graph);
}

#[test]
fn bad_specs_are_named_errors() {
    let cases: Vec<(TrainingSpec, &str)> = vec![
        (
            spec(SGD, Precision::P32_32, 1.0, 0),
            "gradient_accumulation must be at least 1",
        ),
        (
            spec(SGD, Precision::P32_32, -2.0, 1),
            "loss_scaling must be a positive",
        ),
        (
            spec(
                Optimizer::Sgd {
                    learning_rate: f64::NAN,
                },
                Precision::P32_32,
                1.0,
                1,
            ),
            "learning_rate",
        ),
        (
            spec(
                Optimizer::Adam {
                    learning_rate: 0.1,
                    beta1: 1.0,
                    beta2: 0.9,
                    epsilon: 1e-3,
                },
                Precision::P32_32,
                1.0,
                1,
            ),
            "beta1 must be in [0, 1)",
        ),
        (spec(SGD, Precision::P16_16, 40000.0, 2), "overflows f16"),
        (
            TrainingSpec {
                loss: "nope".into(),
                ..spec(SGD, Precision::P32_32, 1.0, 1)
            },
            "loss node 'nope' is not in the graph",
        ),
        (
            TrainingSpec {
                loss: "dense1/matmul".into(),
                ..spec(SGD, Precision::P32_32, 1.0, 1)
            },
            "expected a floating-point scalar",
        ),
        (
            TrainingSpec {
                accumulation_dtype: Some(DType::I32),
                ..spec(SGD, Precision::P32_32, 1.0, 2)
            },
            "accumulation_dtype must be f16 or f32",
        ),
    ];
    for (s, want) in cases {
        let err = training_step(&program(s.clone()), &s)
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{err} does not contain {want}");
    }
    // A loss that depends on no variable trains nothing.
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [3]).unwrap();
    b.reduce_sum(x, &[0], false).unwrap();
    let mut p = Program::new("nothing", b.finish());
    let s = TrainingSpec {
        loss: "reduce_sum".into(),
        ..spec(SGD, Precision::P32_32, 1.0, 1)
    };
    p.training = Some(s.clone());
    let err = training_step(&p, &s).unwrap_err().to_string();
    assert!(err.contains("depends on no trainable variable"), "{err}");
}

/// A training batch norm is differentiated by its own backward pass (PopLibs'): per batch
/// norm four per-channel reductions, every full-size gradient in the activation type, and
/// nothing of the forward read but the whitened activations and per-channel values — never
/// the FP32 deviations or the centred activations the primitives' rules would read.
#[test]
fn batch_norm_backward_is_poplibs_own() {
    let model = crate::resnet::Model::named("resnet8").unwrap();
    let p = crate::resnet::resnet(&crate::resnet::ResNetSpec {
        batch: 2,
        image_size: 8,
        ..model.default_spec()
    })
    .unwrap();
    let spec = p.training.clone().unwrap();
    let g = training_step(&p, &spec).unwrap();
    let bwd = |id: NodeId| g.node(id).name.starts_with("bwd/");
    let bn = "layer1.0.bn1";
    let reductions = g
        .nodes()
        .filter(|(_, n)| n.name.starts_with(&format!("bwd/{bn}/")))
        .filter(|(_, n)| matches!(n.op, Op::ReduceSum { .. } | Op::ReduceMean { .. }))
        .count();
    assert_eq!(reductions, 4, "backward reductions of {bn}");
    for (id, n) in g.nodes().filter(|&(id, _)| bwd(id)) {
        for &i in &n.inputs {
            let read = &g.node(i).name;
            assert!(
                bwd(i) || !(read.ends_with("/deviation") || read.ends_with("/centred")),
                "{} reads {read}",
                n.name
            );
            if n.ty.shape.rank() == 4 && n.ty.dtype.is_float() {
                assert_eq!(n.ty.dtype, DType::F16, "{} ({id:?})", n.name);
            }
        }
    }
}

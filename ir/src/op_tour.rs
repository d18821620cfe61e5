//! A program that uses every op, every initialiser, every data source and every outfeed mode
//! once: the fixture for round-trip tests of the text format, and a broad smoke test for any
//! pass that must handle every op (a test keeps it in sync with [`Op::NAMES`]).
//!
//! Values are meaningless; only structure matters.

use crate::builder::GraphBuilder;
use crate::dtype::{DType, Shape};
use crate::error::IrError;
use crate::graph::Phase;
use crate::op::{Activation, Init, LossReduction, Op};
use crate::program::{
    Columns, DataSource, InfeedSpec, Optimizer, OutfeedMode, OutfeedSpec, Precision, Program,
    TrainingSpec,
};

/// The op tour: a valid training program that contains every op of [`Op::NAMES`].
pub fn op_tour() -> Result<Program, IrError> {
    let mut b = GraphBuilder::new();
    let f = DType::F32;
    let input = |stream: &str, dtype: DType, shape: &[usize]| Op::Input {
        stream: stream.into(),
        dtype,
        shape: Shape::from(shape),
    };
    let var = |shape: &[usize], init: Init| Op::Variable {
        dtype: f,
        shape: Shape::from(shape),
        init,
    };
    let x = b.named("x", input("x", f, &[4, 3]), &[])?;
    let labels = b.named("labels", input("labels", DType::I32, &[4]), &[])?;
    let noise = b.named("noise", input("noise", f, &[4, 5]), &[])?;
    let offset = b.named("offset", input("offset", f, &[5]), &[])?;
    let scale = b.named("scale", input("scale", f, &[]), &[])?;
    let w = b.named("w", var(&[3, 5], Init::GlorotUniform { seed: 7 }), &[])?;
    let bias = b.named(
        "bias",
        var(
            &[5],
            Init::Uniform {
                low: -0.1,
                high: 0.1,
                seed: 8,
            },
        ),
        &[],
    )?;
    let gain = b.named(
        "gain",
        var(
            &[5],
            Init::Normal {
                mean: 1.0,
                std: 0.01,
                seed: 9,
            },
        ),
        &[],
    )?;
    let denom = b.named("denom", var(&[5], Init::Constant(0.5)), &[])?;
    let steps = b.named("steps", var(&[], Init::Zeros), &[])?;
    let k = b.constant("k", f, [5], vec![0.0, 0.25, -0.5, 1.0, 1e-3])?;
    let floor = b.splat("floor", f, Shape::scalar(), -1.0)?;

    let mm = b.named("mm", Op::MatMul, &[x, w])?;
    let add = b.named("add", Op::Add, &[mm, bias])?;
    let noisy = b.named("noisy", Op::Add, &[add, noise])?;
    let shifted = b.named("shifted", Op::Add, &[noisy, offset])?;
    let scaled = b.named("scaled", Op::Mul, &[shifted, scale])?;
    let sub = b.named("sub", Op::Sub, &[scaled, k])?;
    let mul = b.named("mul", Op::Mul, &[sub, gain])?;
    let div = b.named("div", Op::Div, &[mul, denom])?;
    let max = b.named("max", Op::Max, &[div, floor])?;
    let min = b.named("min", Op::Min, &[max, add])?;
    let sa = b.named("scaled_add", Op::ScaledAdd { scale: 0.5 }, &[min, bias])?;
    let eq = b.named("equal", Op::Equal, &[sa, min])?;
    let gt = b.named("greater", Op::Greater, &[sa, min])?;
    b.named("less", Op::Less, &[sa, min])?;
    let sel = b.named("select", Op::Select, &[gt, sa, min])?;
    let neg = b.named("neg", Op::Neg, &[sel])?;
    let abs = b.named("abs", Op::Abs, &[neg])?;
    let exp = b.named("exp", Op::Exp, &[neg])?;
    let log = b.named("log", Op::Log, &[exp])?;
    let sqrt = b.named("sqrt", Op::Sqrt, &[abs])?;
    let relu = b.named("relu", Op::Relu, &[log])?;
    let relu6 = b.named("relu6", Op::Clip { min: 0.0, max: 6.0 }, &[relu])?;
    let sig = b.named("sigmoid", Op::Sigmoid, &[relu6])?;
    let tanh = b.named("tanh", Op::Tanh, &[sqrt])?;
    let gelu = b.named("gelu", Op::Gelu, &[sig])?;
    let grad = b.named(
        "activation_grad",
        Op::ActivationGrad {
            activation: Activation::Gelu,
        },
        &[tanh, gelu],
    )?;
    let sm = b.named("softmax", Op::Softmax { axis: 1 }, &[grad])?;
    let lsm = b.named("log_softmax", Op::LogSoftmax { axis: 1 }, &[sm])?;
    let loss = b.named(
        "loss",
        Op::SparseSoftmaxCrossEntropy {
            reduction: LossReduction::Sum,
        },
        &[lsm, labels],
    )?;
    let onehot = b.named(
        "one_hot",
        Op::OneHot {
            depth: 5,
            dtype: DType::F16,
        },
        &[labels],
    )?;
    b.named(
        "reduce_sum",
        Op::ReduceSum {
            axes: vec![1],
            keep_dims: true,
        },
        &[onehot],
    )?;
    b.named(
        "reduce_mean",
        Op::ReduceMean {
            axes: vec![0, 1],
            keep_dims: false,
        },
        &[lsm],
    )?;
    let rmax = b.named(
        "reduce_max",
        Op::ReduceMax {
            axes: vec![0],
            keep_dims: false,
        },
        &[sm],
    )?;
    let argmax = b.named("argmax", Op::ArgMax { axis: 1 }, &[sm])?;
    let reshape = b.named(
        "reshape",
        Op::Reshape {
            shape: Shape::new([2, 10]),
        },
        &[sm],
    )?;
    b.named("transpose", Op::Transpose { perm: vec![1, 0] }, &[reshape])?;
    let bc = b.named(
        "broadcast",
        Op::Broadcast {
            shape: Shape::new([4, 5]),
        },
        &[rmax],
    )?;
    let slice = b.named(
        "slice",
        Op::Slice {
            begin: vec![0, 1],
            end: vec![4, 3],
        },
        &[bc],
    )?;
    let pad = b.named(
        "pad",
        Op::Pad {
            before: vec![0, 1],
            after: vec![0, 2],
        },
        &[slice],
    )?;
    let cat = b.named("concat", Op::Concat { axis: 0 }, &[pad, bc, sm])?;
    let half = b.named("half", Op::Cast { dtype: DType::F16 }, &[cat])?;
    // The collectives of replicated tensor sharding, on one replica: a flattening and back.
    let shard = b.named(
        "shard",
        Op::ReplicatedReduceScatter { replicas: 1 },
        &[half],
    )?;
    let half_shape = b.graph().node(half).ty.shape.clone();
    let gathered = b.named(
        "gathered",
        Op::ReplicatedAllGather {
            replicas: 1,
            shape: half_shape,
        },
        &[shard],
    )?;
    let outfeed = |stream: &str| Op::Outfeed {
        stream: stream.into(),
    };
    b.named("loss_out", outfeed("loss"), &[loss])?;
    b.named("argmax_out", outfeed("argmax"), &[argmax])?;
    b.named("half_out", outfeed("half"), &[gathered])?;
    b.named("equal_out", outfeed("equal"), &[eq])?;

    b.set_phase(Phase::Update);
    let one = b.splat("one", f, Shape::scalar(), 1.0)?;
    let next = b.named("steps_next", Op::Add, &[steps, one])?;
    b.named("steps_assign", Op::Assign, &[steps, next])?;

    let mut program = Program::new("op_tour", b.finish());
    program.description = "every op, initialiser, data source and outfeed mode once".into();
    program.device_iterations = 3;
    let csv = |columns| DataSource::Csv {
        path: "tour.csv".into(),
        columns,
        header: false,
    };
    program.infeeds = vec![
        InfeedSpec {
            stream: "x".into(),
            source: csv(Columns::Range(0, 3)),
        },
        InfeedSpec {
            stream: "labels".into(),
            source: csv(Columns::Names(vec!["label".into()])),
        },
        InfeedSpec {
            stream: "noise".into(),
            source: DataSource::Uniform {
                low: -1.0,
                high: 1.0,
                seed: 3,
            },
        },
        InfeedSpec {
            stream: "offset".into(),
            source: DataSource::Sequence {
                start: 0.0,
                step: 0.125,
            },
        },
        InfeedSpec {
            stream: "scale".into(),
            source: DataSource::Constant(2.0),
        },
    ];
    let mode = |stream: &str, mode| OutfeedSpec {
        stream: stream.into(),
        mode,
    };
    program.outfeeds = vec![
        mode("loss", OutfeedMode::All),
        mode("argmax", OutfeedMode::Last),
        mode("half", OutfeedMode::Sum),
        mode("equal", OutfeedMode::Every(2)),
    ];
    program.training = Some(TrainingSpec {
        loss: "loss".into(),
        optimizer: Optimizer::Adam {
            learning_rate: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-4,
        },
        loss_scaling: 64.0,
        precision: Precision::P16_16,
        gradient_accumulation: 4,
        accumulation_dtype: Some(DType::F32),
        stable_norm: false,
    });
    Ok(program)
}

/// The ops [`op_tour`] leaves to [`cnn_tour`]: the convolution, pooling and normalisation
/// families, which came after the op tour's outputs were recorded (`tests/golden`), so they
/// have a tour of their own. Their gradient ops appear in `cnn_tour`'s training step.
pub const CNN_OPS: &[&str] = &[
    "Conv2d",
    "Conv2dInputGrad",
    "Conv2dWeightGrad",
    "MaxPool2d",
    "MaxPool2dGrad",
    "AvgPool2d",
    "GlobalAvgPool",
    "Flatten",
    "BatchNorm",
    "GroupNorm",
];

/// A small CNN training program that uses every op of [`CNN_OPS`] (the gradient ops through
/// its training step): a 3×3 stem with batch norm, a max pool, a grouped and dilated
/// convolution with group norm, an average pool without the padding counted, global average
/// pooling and a dense classifier; the features are also sent out flattened.
pub fn cnn_tour() -> Result<Program, IrError> {
    let mut b = GraphBuilder::new();
    let f = DType::F32;
    let x = b.named(
        "x",
        Op::Input {
            stream: "x".into(),
            dtype: f,
            shape: Shape::from([2, 3, 8, 8]),
        },
        &[],
    )?;
    let labels = b.named(
        "labels",
        Op::Input {
            stream: "labels".into(),
            dtype: DType::I32,
            shape: Shape::from([2]),
        },
        &[],
    )?;
    let var = |b: &mut GraphBuilder, name: &str, shape: &[usize], init: Init| {
        b.named(
            name,
            Op::Variable {
                dtype: f,
                shape: Shape::from(shape),
                init,
            },
            &[],
        )
    };
    let w1 = var(
        &mut b,
        "conv1.weight",
        &[8, 3, 3, 3],
        Init::GlorotUniform { seed: 1 },
    )?;
    let c1 = b.named(
        "conv1",
        Op::Conv2d {
            stride: vec![],
            padding: vec![1, 1, 1, 1],
            dilation: vec![],
            groups: 1,
        },
        &[x, w1],
    )?;
    let gamma = var(&mut b, "bn1.weight", &[8], Init::Constant(1.0))?;
    let beta = var(&mut b, "bn1.bias", &[8], Init::Zeros)?;
    let rm = var(&mut b, "bn1.running_mean", &[8], Init::Zeros)?;
    let rv = var(&mut b, "bn1.running_var", &[8], Init::Constant(1.0))?;
    let bn = b.named(
        "bn1",
        Op::BatchNorm {
            epsilon: 1e-5,
            momentum: 0.1,
        },
        &[c1, gamma, beta, rm, rv],
    )?;
    let r1 = b.named("relu1", Op::Relu, &[bn])?;
    let p1 = b.named(
        "maxpool",
        Op::MaxPool2d {
            kernel: vec![2, 2],
            stride: vec![],
            padding: vec![],
        },
        &[r1],
    )?;
    let w2 = var(
        &mut b,
        "conv2.weight",
        &[8, 4, 3, 3],
        Init::GlorotUniform { seed: 2 },
    )?;
    let c2 = b.named(
        "conv2",
        Op::Conv2d {
            stride: vec![1, 1],
            padding: vec![2, 2, 2, 2],
            dilation: vec![2, 2],
            groups: 2,
        },
        &[p1, w2],
    )?;
    let g2 = var(&mut b, "gn2.weight", &[8], Init::Constant(1.0))?;
    let b2 = var(&mut b, "gn2.bias", &[8], Init::Zeros)?;
    let gn = b.named(
        "gn2",
        Op::GroupNorm {
            groups: 2,
            epsilon: 1e-5,
        },
        &[c2, g2, b2],
    )?;
    let ap = b.named(
        "avgpool",
        Op::AvgPool2d {
            kernel: vec![3, 3],
            stride: vec![2, 2],
            padding: vec![1, 1, 1, 1],
            count_include_pad: false,
        },
        &[gn],
    )?;
    let flat = b.named("flatten", Op::Flatten { axis: 1 }, &[ap])?;
    b.named(
        "features",
        Op::Outfeed {
            stream: "features".into(),
        },
        &[flat],
    )?;
    let gap = b.named("gap", Op::GlobalAvgPool, &[ap])?;
    let wf = var(
        &mut b,
        "fc.weight",
        &[8, 10],
        Init::GlorotUniform { seed: 3 },
    )?;
    let logits = b.named("fc", Op::MatMul, &[gap, wf])?;
    let loss = b.named(
        "loss",
        Op::SparseSoftmaxCrossEntropy {
            reduction: LossReduction::Mean,
        },
        &[logits, labels],
    )?;
    b.named(
        "loss_out",
        Op::Outfeed {
            stream: "loss".into(),
        },
        &[loss],
    )?;
    let mut program = Program::new("cnn_tour", b.finish());
    program.description = "every convolution, pooling and normalisation op once".into();
    program.infeeds = vec![
        InfeedSpec {
            stream: "x".into(),
            source: DataSource::Uniform {
                low: -1.0,
                high: 1.0,
                seed: 5,
            },
        },
        InfeedSpec {
            stream: "labels".into(),
            source: DataSource::Uniform {
                low: 0.0,
                high: 10.0,
                seed: 6,
            },
        },
    ];
    program.training = Some(TrainingSpec {
        loss: "loss".into(),
        optimizer: Optimizer::Sgd { learning_rate: 0.1 },
        loss_scaling: 1.0,
        precision: Precision::P32_32,
        gradient_accumulation: 1,
        accumulation_dtype: None,
        stable_norm: false,
    });
    Ok(program)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::validate_program;
    use std::collections::BTreeSet;

    #[test]
    fn the_tour_is_valid_and_uses_every_op() {
        let p = op_tour().unwrap();
        validate_program(&p).unwrap();
        let used: BTreeSet<&str> = p.graph.nodes().map(|(_, n)| n.op.name()).collect();
        let cnn: BTreeSet<&str> = CNN_OPS.iter().copied().collect();
        let all: BTreeSet<&str> = Op::NAMES.iter().copied().collect();
        let rest: BTreeSet<&str> = all.difference(&cnn).copied().collect();
        assert_eq!(
            used, rest,
            "op_tour must use every op in Op::NAMES but CNN_OPS"
        );
        // cnn_tour's forward graph and training step cover CNN_OPS.
        let c = cnn_tour().unwrap();
        validate_program(&c).unwrap();
        let step = crate::training::training_step(&c, c.training.as_ref().unwrap()).unwrap();
        let used: BTreeSet<&str> = c
            .graph
            .nodes()
            .chain(step.nodes())
            .map(|(_, n)| n.op.name())
            .filter(|n| cnn.contains(n))
            .collect();
        assert_eq!(used, cnn, "cnn_tour must use every op of CNN_OPS");
    }
}

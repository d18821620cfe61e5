//! Gradients built by `ipusim_ir::autodiff` agree with central finite differences.
//!
//! Every case is evaluated by the reference interpreter in exact mode (`f64` tensors, no
//! rounding), so the finite differences are limited only by `f64`:
//! - step `H = 1e-5`; central differences have truncation error `H²/6 · |f'''|`, about
//!   `2e-11` for the smooth functions here (inputs of size ≤ 2, `|f'''|` ≤ ~10), and
//!   round-off error about `ε · |L| / H ≈ 2.2e-16 · 50 / 1e-5 ≈ 1e-9` (losses below 50);
//! - so `|autodiff − fd| ≤ 1e-6 · (1 + |autodiff|)` leaves a margin of about 1000 while any
//!   wrong rule (a missing term, a wrong axis, a wrong broadcast sum) is off by O(1).
//!   Non-smooth ops (Relu, Abs, Max, Min, ReduceMax) are sampled at random points, which are
//!   farther than `H` from a kink with probability ≈ 1 (a fixed seed keeps it so).
//!
//! The same gradient graphs are also evaluated with IPU FP32 numerics and must agree with the
//! exact gradients to `1e-4` relative (FP32 has 24 bits; these graphs are a few ops deep).

use ipusim_ir::autodiff::gradients_with;
use ipusim_ir::decompose::{decompose_with_rules, Statistics};
use ipusim_ir::{DType, Graph, GraphBuilder, IrError, LossReduction, NodeId, Op, Shape};
use ipusim_sim::interp::{Interpreter, Streams};
use ipusim_sim::numerics::FpConfig;
use ipusim_sim::tensor::{Data, Tensor};
use rand_core::{RngCore, SeedableRng};
use rand_pcg::Pcg32;

const H: f64 = 1e-5;
const TOL: f64 = 1e-6;

/// A random value in `[lo, hi)`, exactly representable in FP32.
fn draw(rng: &mut Pcg32, lo: f64, hi: f64) -> f64 {
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    f64::from((lo + (hi - lo) * u) as f32)
}

type Build = dyn Fn(&mut GraphBuilder, &[NodeId]) -> Result<NodeId, IrError>;

struct Case {
    name: &'static str,
    shapes: Vec<Vec<usize>>,
    /// Range of the inputs' values.
    domain: (f64, f64),
    build: Box<Build>,
}

fn case(
    name: &'static str,
    shapes: &[&[usize]],
    domain: (f64, f64),
    build: impl Fn(&mut GraphBuilder, &[NodeId]) -> Result<NodeId, IrError> + 'static,
) -> Case {
    Case {
        name,
        shapes: shapes.iter().map(|s| s.to_vec()).collect(),
        domain,
        build: Box::new(build),
    }
}

fn op_case(name: &'static str, shapes: &[&[usize]], domain: (f64, f64), op: Op) -> Case {
    let arity = shapes.len();
    case(name, shapes, domain, move |b, x| {
        b.op("f", op.clone(), &x[..arity])
    })
}

/// The graph `loss = sum(f(x) * r)` (a random `r` makes every output element matter) with
/// the gradients of the loss w.r.t. every `x`; returns it with the gradient ids.
fn gradient_graph(c: &Case, rng: &mut Pcg32) -> (Graph, Vec<NodeId>) {
    let mut b = GraphBuilder::new();
    let xs: Vec<NodeId> = c
        .shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            b.variable(
                &format!("x{i}"),
                DType::F32,
                s.clone(),
                ipusim_ir::Init::Zeros,
            )
            .unwrap()
        })
        .collect();
    let y = (c.build)(&mut b, &xs).unwrap();
    let shape = b.graph().node(y).ty.shape.clone();
    // Multiples of 1/64: exact in FP16 too, so casts to FP16 do not perturb the FP32 check.
    let r: Vec<f64> = (0..shape.num_elements())
        .map(|_| draw(rng, -64.0, 64.0).round() / 64.0)
        .collect();
    let r = b.constant("r", DType::F32, shape.clone(), r).unwrap();
    let weighted = b.mul(y, r).unwrap();
    let axes: Vec<usize> = (0..shape.rank()).collect();
    let loss = b
        .named(
            "objective",
            Op::ReduceSum {
                axes,
                keep_dims: false,
            },
            &[weighted],
        )
        .unwrap();
    // Composite ops (pooling, normalisation) are decomposed before autodiff, as a training
    // step does, and those with a backward pass of their own (batch norm) are differentiated
    // by it; every other graph comes back node for node.
    let names: Vec<String> = xs.iter().map(|&x| b.graph().node(x).name.clone()).collect();
    let loss_name = b.graph().node(loss).name.clone();
    let (g, rules) =
        decompose_with_rules(&b.finish(), Statistics::Batch { stable: false }).unwrap();
    let find = |g: &Graph, n: &str| g.find(n).unwrap();
    let xs: Vec<NodeId> = names.iter().map(|n| find(&g, n)).collect();
    let loss = find(&g, &loss_name);
    let mut b = GraphBuilder::from_graph(g);
    let seed = b.scalar("seed", DType::F32, 1.0).unwrap();
    let grads = gradients_with(&mut b, loss, seed, &xs, &rules).unwrap();
    let grads = grads
        .into_iter()
        .map(|g| g.unwrap_or_else(|| panic!("{}: no gradient", c.name)))
        .collect();
    (b.finish(), grads)
}

fn set(it: &mut Interpreter, name: &str, shape: &[usize], v: &[f64]) {
    let t = Tensor::new(
        DType::F32,
        Shape::new(shape.to_vec()),
        Data::F64(v.to_vec()),
    )
    .unwrap();
    it.set_variable(name, t).unwrap();
}

fn loss_at(it: &mut Interpreter) -> f64 {
    it.micro_batch(&Streams::new()).unwrap();
    it.value("objective").unwrap().to_f64_vec()[0]
}

fn check(c: &Case, seed: u64) {
    let mut rng = Pcg32::seed_from_u64(seed);
    let (g, grads) = gradient_graph(c, &mut rng);
    let inputs: Vec<Vec<f64>> = c
        .shapes
        .iter()
        .map(|s| {
            (0..s.iter().product())
                .map(|_| draw(&mut rng, c.domain.0, c.domain.1))
                .collect()
        })
        .collect();
    let mut exact = Interpreter::new_exact(&g, 0).unwrap();
    let mut fp32 = Interpreter::new(&g, FpConfig::default(), 0).unwrap();
    for (i, (s, v)) in c.shapes.iter().zip(&inputs).enumerate() {
        set(&mut exact, &format!("x{i}"), s, v);
        let t = Tensor::f32(Shape::new(s.clone()), v.iter().map(|&x| x as f32).collect()).unwrap();
        fp32.set_variable(&format!("x{i}"), t).unwrap();
    }
    exact.micro_batch(&Streams::new()).unwrap();
    fp32.micro_batch(&Streams::new()).unwrap();
    let value = |it: &Interpreter, g: &NodeId| it.value_of(*g).unwrap().to_f64_vec();
    let ads: Vec<Vec<f64>> = grads.iter().map(|g| value(&exact, g)).collect();
    let ads32: Vec<Vec<f64>> = grads.iter().map(|g| value(&fp32, g)).collect();
    for (i, (s, v)) in c.shapes.iter().zip(&inputs).enumerate() {
        let (ad, ad32) = (&ads[i], &ads32[i]);
        for j in 0..v.len() {
            let mut p = v.clone();
            p[j] = v[j] + H;
            set(&mut exact, &format!("x{i}"), s, &p);
            let up = loss_at(&mut exact);
            p[j] = v[j] - H;
            set(&mut exact, &format!("x{i}"), s, &p);
            let down = loss_at(&mut exact);
            let fd = (up - down) / (2.0 * H);
            assert!(
                (ad[j] - fd).abs() <= TOL * (1.0 + ad[j].abs()),
                "{}: d/dx{i}[{j}]: autodiff {} vs finite difference {fd}",
                c.name,
                ad[j]
            );
            assert!(
                (ad32[j] - ad[j]).abs() <= 1e-4 * (1.0 + ad[j].abs()),
                "{}: d/dx{i}[{j}]: FP32 {} vs exact {}",
                c.name,
                ad32[j],
                ad[j]
            );
        }
        set(&mut exact, &format!("x{i}"), s, v);
    }
}

const ANY: (f64, f64) = (-2.0, 2.0);
const POSITIVE: (f64, f64) = (0.5, 2.0);

fn conv(stride: &[usize], padding: &[usize], dilation: &[usize], groups: usize) -> Op {
    Op::Conv2d {
        stride: stride.to_vec(),
        padding: padding.to_vec(),
        dilation: dilation.to_vec(),
        groups,
    }
}

fn cases() -> Vec<Case> {
    let mut v = vec![
        op_case("matmul", &[&[2, 3], &[3, 4]], ANY, Op::MatMul),
        op_case(
            "matmul batched, shared b",
            &[&[5, 2, 3], &[3, 4]],
            ANY,
            Op::MatMul,
        ),
        op_case(
            "matmul batched, shared a",
            &[&[2, 3], &[5, 3, 4]],
            ANY,
            Op::MatMul,
        ),
        op_case(
            "matmul both broadcast",
            &[&[5, 1, 2, 3], &[4, 3, 2]],
            ANY,
            Op::MatMul,
        ),
        op_case(
            "scaled_add",
            &[&[2, 3], &[3]],
            ANY,
            Op::ScaledAdd { scale: -0.7 },
        ),
        op_case("div", &[&[4, 1, 3], &[2, 1]], POSITIVE, Op::Div),
        op_case("div scalar", &[&[], &[2, 3]], POSITIVE, Op::Div),
        op_case("log", &[&[2, 3, 4]], POSITIVE, Op::Log),
        op_case("sqrt", &[&[2, 3, 4]], POSITIVE, Op::Sqrt),
        op_case("softmax", &[&[2, 3, 4]], ANY, Op::Softmax { axis: 1 }),
        op_case(
            "log_softmax",
            &[&[2, 3, 4]],
            ANY,
            Op::LogSoftmax { axis: 0 },
        ),
        op_case(
            "reduce_sum",
            &[&[2, 3, 4]],
            ANY,
            Op::ReduceSum {
                axes: vec![0, 2],
                keep_dims: false,
            },
        ),
        op_case(
            "reduce_mean",
            &[&[2, 3, 4]],
            ANY,
            Op::ReduceMean {
                axes: vec![1],
                keep_dims: true,
            },
        ),
        op_case(
            "reduce_max",
            &[&[2, 3, 4]],
            ANY,
            Op::ReduceMax {
                axes: vec![2],
                keep_dims: false,
            },
        ),
        op_case(
            "reduce_max keep",
            &[&[2, 3, 4]],
            ANY,
            Op::ReduceMax {
                axes: vec![0, 1],
                keep_dims: true,
            },
        ),
        op_case(
            "reshape",
            &[&[2, 3, 4]],
            ANY,
            Op::Reshape {
                shape: Shape::new([4, 6]),
            },
        ),
        op_case(
            "transpose",
            &[&[2, 3, 4]],
            ANY,
            Op::Transpose {
                perm: vec![2, 0, 1],
            },
        ),
        op_case(
            "broadcast",
            &[&[3, 1]],
            ANY,
            Op::Broadcast {
                shape: Shape::new([2, 3, 4]),
            },
        ),
        op_case(
            "slice",
            &[&[3, 4, 5]],
            ANY,
            Op::Slice {
                begin: vec![1, 0, 2],
                end: vec![3, 3, 5],
            },
        ),
        op_case(
            "pad",
            &[&[2, 3]],
            ANY,
            Op::Pad {
                before: vec![1, 0],
                after: vec![2, 3],
            },
        ),
        op_case(
            "concat",
            &[&[2, 3], &[2, 1], &[2, 4]],
            ANY,
            Op::Concat { axis: 1 },
        ),
        op_case("outfeed", &[&[3]], ANY, Op::Outfeed { stream: "s".into() }),
        op_case(
            "conv2d 3x3 padded",
            &[&[2, 3, 5, 5], &[4, 3, 3, 3]],
            ANY,
            conv(&[], &[1, 1, 1, 1], &[], 1),
        ),
        op_case(
            "conv2d strided, dilated, asymmetric padding",
            &[&[1, 2, 7, 6], &[3, 2, 2, 3]],
            ANY,
            conv(&[2, 1], &[1, 0, 0, 2], &[2, 1], 1),
        ),
        op_case(
            "conv2d grouped, stride 2",
            &[&[1, 4, 5, 5], &[6, 2, 3, 3]],
            ANY,
            conv(&[2, 2], &[1, 1, 1, 1], &[], 2),
        ),
        op_case(
            "conv2d depthwise",
            &[&[2, 3, 4, 4], &[3, 1, 3, 3]],
            ANY,
            conv(&[], &[1, 1, 1, 1], &[], 3),
        ),
        op_case(
            "max pool 3x3 stride 2 padded",
            &[&[2, 2, 5, 5]],
            ANY,
            Op::MaxPool2d {
                kernel: vec![3, 3],
                stride: vec![2, 2],
                padding: vec![1, 1, 1, 1],
            },
        ),
        op_case(
            "avg pool counting padding",
            &[&[1, 2, 5, 5]],
            ANY,
            Op::AvgPool2d {
                kernel: vec![3, 3],
                stride: vec![2, 2],
                padding: vec![1, 1, 1, 1],
                count_include_pad: true,
            },
        ),
        op_case(
            "avg pool not counting padding",
            &[&[1, 2, 5, 4]],
            ANY,
            Op::AvgPool2d {
                kernel: vec![2, 3],
                stride: vec![],
                padding: vec![1, 1, 0, 1],
                count_include_pad: false,
            },
        ),
        op_case("global avg pool", &[&[2, 3, 2, 3]], ANY, Op::GlobalAvgPool),
        op_case("flatten", &[&[2, 3, 2]], ANY, Op::Flatten { axis: 1 }),
        case(
            "batch norm (batch statistics)",
            &[&[3, 2, 2, 2], &[2], &[2]],
            ANY,
            |b, x| {
                let rm = b.variable("rm", DType::F32, [2], ipusim_ir::Init::Zeros)?;
                let rv = b.variable("rv", DType::F32, [2], ipusim_ir::Init::Constant(1.0))?;
                let op = Op::BatchNorm {
                    epsilon: 1e-3,
                    momentum: 0.1,
                };
                b.op("bn", op, &[x[0], x[1], x[2], rm, rv])
            },
        ),
        op_case(
            "group norm",
            &[&[2, 4, 3, 3], &[4], &[4]],
            ANY,
            Op::GroupNorm {
                groups: 2,
                epsilon: 1e-3,
            },
        ),
        case("cast f32 -> f16 -> f32", &[&[2, 3]], ANY, |b, x| {
            let h = b.cast(x[0], DType::F16)?;
            b.cast(h, DType::F32)
        }),
        case("select", &[&[2, 3], &[3]], ANY, |b, x| {
            let zero = b.scalar("zero", DType::F32, 0.0)?;
            let cond = b.op("cond", Op::Greater, &[x[0], zero])?;
            b.op("select", Op::Select, &[cond, x[0], x[1]])
        }),
        case("fan-out x * x + exp(x)", &[&[4]], ANY, |b, x| {
            let sq = b.mul(x[0], x[0])?;
            let e = b.unary(Op::Exp, x[0])?;
            b.add(sq, e)
        }),
        case("argmax stops nothing else", &[&[3, 4]], ANY, |b, x| {
            // loss depends on x through tanh and (not differentiably) through argmax.
            let am = b.argmax(x[0], 1)?;
            let f = b.cast(am, DType::F32)?;
            let t = b.unary(Op::Tanh, x[0])?;
            let s = b.reduce_sum(t, &[1], false)?;
            b.add(s, f)
        }),
    ];
    for (name, op) in [
        ("add", Op::Add),
        ("sub", Op::Sub),
        ("mul", Op::Mul),
        ("max", Op::Max),
        ("min", Op::Min),
    ] {
        v.push(op_case(name, &[&[4, 1, 3], &[2, 1]], ANY, op.clone()));
        v.push(op_case(name, &[&[], &[2, 3]], ANY, op));
    }
    for (name, op) in [
        ("neg", Op::Neg),
        ("abs", Op::Abs),
        ("exp", Op::Exp),
        ("relu", Op::Relu),
        ("sigmoid", Op::Sigmoid),
        ("tanh", Op::Tanh),
        ("gelu", Op::Gelu),
    ] {
        v.push(op_case(name, &[&[2, 3, 4]], ANY, op));
    }
    for reduction in [LossReduction::Mean, LossReduction::Sum] {
        v.push(case(
            "sparse softmax cross-entropy",
            &[&[4, 5]],
            ANY,
            move |b, x| {
                let labels = b.constant("labels", DType::I32, [4], vec![0.0, 4.0, 2.0, 2.0])?;
                b.sparse_softmax_cross_entropy(x[0], labels, reduction)
            },
        ));
    }
    v
}

#[test]
fn every_differentiable_op_matches_finite_differences() {
    for (i, c) in cases().iter().enumerate() {
        check(c, 1000 + i as u64);
    }
}

//! Batch norm's batch statistics in one sweep (PopLibs' default, `E[x²] − E[x]²`) or in two
//! passes (the training spec's `stable_norm`, PopTorch's `enableStableNorm(True)`), through
//! the compiler and the engine: activations with a large mean against their spread, where
//! the single sweep cancels and the two passes do not.
//!
//! `x = 4096 + d` in FP32 with `d` multiples of 1/64 in `[−2, 2)`: every `x` is exact, its
//! square (about 2^24, spacing 2) is not, and the sum of 32 squares (about 2^29, spacing 64)
//! loses far more than the variance (about 1.3) is worth. The two passes sum `x` (about
//! 2^17, spacing 2^-6: the mean is within 32 · 2^-7 / 32 = 2^-7 of exact) and the squared
//! deviations (about 2^5): the variance is within a few 2^-7 · |d| of exact, below 0.05.
//! The variance is read back from the updated running variance,
//! `0.9 · 1 + 0.1 · var · n / (n − 1)`.

use ipusim_compiler::build::{compile_step, step_graph, BuildOptions};
use ipusim_ir::TrainingSpec;
use ipusim_ir::{DType, GraphBuilder, Init, Op, Optimizer, Precision, Program, Shape};
use ipusim_sim::host::QueueHost;
use ipusim_sim::tensor::Tensor;
use ipusim_sim::Engine;

const DIMS: [usize; 4] = [8, 2, 2, 2];

/// The values of `x`: channel `c` of element `i` is `4096 + d`.
fn xs() -> Vec<f32> {
    let n: usize = DIMS.iter().product();
    (0..n)
        .map(|i| 4096.0 + ((i * 37 % 256) as f32 - 128.0) / 64.0)
        .collect()
}

/// The unbiased per-channel variances of [`xs`], in f64.
fn exact_unbiased() -> Vec<f64> {
    let x = xs();
    let per = DIMS[2] * DIMS[3];
    (0..DIMS[1])
        .map(|c| {
            let v: Vec<f64> = (0..DIMS[0])
                .flat_map(|n| (0..per).map(move |k| (n * DIMS[1] + c) * per + k))
                .map(|i| f64::from(x[i]))
                .collect();
            let m = v.iter().sum::<f64>() / v.len() as f64;
            v.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / (v.len() - 1) as f64
        })
        .collect()
}

/// The unbiased variance each channel's running variance was updated with after one
/// training step, with the training spec's `stable_norm` or the `--stable-norm` option.
fn trained_variance(spec_stable: bool, option_stable: bool) -> Vec<f64> {
    let mut b = GraphBuilder::new();
    let x = b.variable("x", DType::F32, DIMS, Init::Zeros).unwrap();
    let scale = b
        .variable("scale", DType::F32, [2], Init::Constant(1.0))
        .unwrap();
    let shift = b.variable("shift", DType::F32, [2], Init::Zeros).unwrap();
    let rm = b.variable("rm", DType::F32, [2], Init::Zeros).unwrap();
    let rv = b
        .variable("rv", DType::F32, [2], Init::Constant(1.0))
        .unwrap();
    let op = Op::BatchNorm {
        epsilon: 1e-5,
        momentum: 0.1,
    };
    let y = b.named("bn", op, &[x, scale, shift, rm, rv]).unwrap();
    let t = b.unary(Op::Tanh, y).unwrap();
    let loss = Op::ReduceSum {
        axes: vec![0, 1, 2, 3],
        keep_dims: false,
    };
    b.named("loss", loss, &[t]).unwrap();
    let mut p = Program::new("bn", b.finish());
    p.training = Some(TrainingSpec {
        loss: "loss".into(),
        optimizer: Optimizer::Sgd {
            learning_rate: 0.01,
        },
        loss_scaling: 1.0,
        precision: Precision::P32_32,
        gradient_accumulation: 1,
        accumulation_dtype: None,
        stable_norm: spec_stable,
    });
    let options = BuildOptions {
        stable_norm: option_stable,
        ..BuildOptions::default()
    };
    let exe = compile_step(&step_graph(&p, &options).unwrap(), &options).unwrap();
    let mut engine = Engine::new(std::sync::Arc::new(exe), Default::default()).unwrap();
    let t = Tensor::f32(Shape::new(DIMS.to_vec()), xs()).unwrap();
    engine.write_variable("x", &t).unwrap();
    engine.run(&mut QueueHost::new()).unwrap();
    let rv = engine.read_tensor("rv").unwrap().to_f64_vec();
    rv.iter().map(|v| (v - 0.9) / 0.1).collect()
}

#[test]
fn stable_statistics_do_not_cancel_where_the_single_sweep_does() {
    let exact = exact_unbiased();
    let single = trained_variance(false, false);
    let stable = trained_variance(true, false);
    let err = |got: &[f64]| -> f64 {
        got.iter()
            .zip(&exact)
            .map(|(g, e)| (g - e).abs())
            .fold(0.0, f64::max)
    };
    eprintln!("exact {exact:?}\nsingle sweep {single:?}\ntwo passes {stable:?}");
    // Two passes: within the bound of the module docs (plus the running variance's own
    // FP32 roundings, read back through a division by 0.1: about 1e-6).
    assert!(err(&stable) < 0.05, "two passes: {stable:?} vs {exact:?}");
    // The single sweep loses the variance to cancellation.
    assert!(
        err(&single) > 10.0 * err(&stable).max(1e-3),
        "single sweep {single:?}, two passes {stable:?}, exact {exact:?}"
    );
    // `--stable-norm` is the training spec's option from the command line.
    assert_eq!(trained_variance(false, true), stable);
}

//! Training-step graphs (`ipusim_ir::training`) evaluated by the reference interpreter:
//! gradients of a whole MLP against finite differences, the optimizers' arithmetic, the loss
//! going down in every precision policy, and the FP16 gradient underflow that loss scaling
//! fixes (seed 000, "Underflowing gradients and loss scaling").

use ipusim_ir::models::{mlp, MlpSpec};
use ipusim_ir::training::{prepare, training_step};
use ipusim_ir::{Graph, Op, Optimizer, Precision, Program, TensorType, TrainingSpec};
use ipusim_sim::init::tensor_from_f64;
use ipusim_sim::interp::{Interpreter, Streams};
use ipusim_sim::numerics::{FpConfig, StochasticRounding};
use ipusim_sim::tensor::{Data, Tensor};
use rand_core::{RngCore, SeedableRng};
use rand_pcg::Pcg32;

fn unit(rng: &mut Pcg32) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

fn program(widths: &[usize], batch: usize, activation: Op, spec: TrainingSpec) -> Program {
    let mut p = mlp(&MlpSpec {
        activation,
        seed: 11,
        ..MlpSpec::new(batch, widths)
    })
    .unwrap();
    p.training = Some(spec);
    p
}

fn spec(optimizer: Optimizer, precision: Precision, loss_scaling: f64, ga: u32) -> TrainingSpec {
    TrainingSpec {
        loss: "loss".into(),
        optimizer,
        loss_scaling,
        precision,
        gradient_accumulation: ga,
        accumulation_dtype: None,
        stable_norm: false,
    }
}

/// One micro-batch: features uniform in `[-scale, scale)` and labels, as tensors of the
/// stream types the interpreter expects (rounded to nearest even into FP16 streams).
fn batch(it: &Interpreter, rng: &mut Pcg32, scale: f64, classes: usize) -> Streams {
    let types: Vec<(String, TensorType)> = it
        .infeeds()
        .map(|(s, t)| (s.to_string(), t.clone()))
        .collect();
    types
        .into_iter()
        .map(|(s, ty)| {
            let n = ty.num_elements();
            let v: Vec<f64> = if s == "labels" {
                (0..n)
                    .map(|_| (unit(rng) * classes as f64).floor())
                    .collect()
            } else {
                (0..n)
                    .map(|_| f64::from((scale * (2.0 * unit(rng) - 1.0)) as f32))
                    .collect()
            };
            (s, tensor_from_f64(&ty, &v).unwrap())
        })
        .collect()
}

/// The Step-phase gradient node of `var` in a training graph with N = 1 and no loss
/// scaling: the gradient the SGD update reads.
fn gradient_node(g: &Graph, var: &str) -> String {
    let new = g.node(g.find(&format!("update/{var}/new")).unwrap());
    g.node(new.inputs[1]).name.clone()
}

fn loss(it: &mut Interpreter, feeds: &Streams) -> f64 {
    it.micro_batch(feeds).unwrap();
    it.value("loss").unwrap().to_f64_vec()[0]
}

/// Central finite differences of the loss of `feeds` w.r.t. every element of `var`.
fn finite_differences(it: &mut Interpreter, var: &str, feeds: &Streams) -> Vec<f64> {
    const H: f64 = 1e-5;
    let t = it.variable(var).unwrap().clone();
    let v = t.to_f64_vec();
    let mut out = Vec::with_capacity(v.len());
    for j in 0..v.len() {
        let mut p = v.clone();
        let mut at = |x: f64, it: &mut Interpreter| {
            p[j] = x;
            let pt = Tensor::new(t.dtype(), t.shape().clone(), Data::F64(p.clone())).unwrap();
            it.set_variable(var, pt).unwrap();
            loss(it, feeds)
        };
        let up = at(v[j] + H, it);
        let down = at(v[j] - H, it);
        out.push((up - down) / (2.0 * H));
    }
    it.set_variable(var, t).unwrap();
    out
}

const VARS: [&str; 4] = [
    "dense1/weights",
    "dense1/bias",
    "dense2/weights",
    "dense2/bias",
];

/// The whole training graph of an MLP with softmax cross-entropy: every weight gradient
/// agrees with finite differences of the loss (exact mode; tolerance as in
/// `tests/gradients.rs`: round-off ≈ 1e-10, truncation ≈ 1e-10, bound 1e-6). In every
/// precision policy: exact mode evaluates the casts the policy inserts as identities, so
/// this checks the gradient structure of the 16.x graphs too.
#[test]
fn mlp_training_graph_gradients_match_finite_differences() {
    for precision in Precision::ALL {
        for activation in [Op::Tanh, Op::Gelu, Op::Sigmoid] {
            let s = spec(Optimizer::Sgd { learning_rate: 0.1 }, precision, 1.0, 1);
            let p = program(&[6, 5, 3], 8, activation.clone(), s.clone());
            let g = training_step(&p, &s).unwrap();
            let mut it = Interpreter::new_exact(&g, 0).unwrap();
            let mut rng = Pcg32::seed_from_u64(5);
            let feeds = batch(&it, &mut rng, 1.0, 3);
            it.micro_batch(&feeds).unwrap();
            let grads: Vec<(String, Vec<f64>)> = VARS
                .iter()
                .map(|v| {
                    (
                        v.to_string(),
                        it.value(&gradient_node(&g, v)).unwrap().to_f64_vec(),
                    )
                })
                .collect();
            for (var, ad) in grads {
                let fd = finite_differences(&mut it, &var, &feeds);
                for (j, (a, f)) in ad.iter().zip(&fd).enumerate() {
                    assert!(
                        (a - f).abs() <= 1e-6 * (1.0 + a.abs()),
                        "{precision} {activation:?} {var}[{j}]: {a} vs {f}"
                    );
                }
                assert!(
                    ad.iter().any(|a| a.abs() > 1e-3),
                    "{var}: a non-trivial gradient"
                );
            }
        }
    }
}

/// Initial values of a graph's trainable variables (the same in every interpreter).
fn weights(it: &Interpreter, g: &Graph) -> Vec<(String, Vec<f64>)> {
    // The training graph assigns every weight, so they are found by name (the forward
    // graph's trainable variables), each checked to be a Variable of the graph.
    VARS.iter()
        .map(|&name| {
            let id = g.find(name).unwrap_or_else(|| panic!("no node {name}"));
            assert!(matches!(g.node(id).op, Op::Variable { .. }), "{name}");
            (name.to_string(), it.variable(name).unwrap().to_f64_vec())
        })
        .collect()
}

/// Exact gradients of the forward graph's loss for each micro-batch, by finite differences.
fn reference_gradients(p: &Program, micro_batches: &[Streams]) -> Vec<Vec<Vec<f64>>> {
    let fwd = prepare(p, Some(Precision::P32_32), true).unwrap().graph;
    let mut it = Interpreter::new_exact(&fwd, 0).unwrap();
    micro_batches
        .iter()
        .map(|mb| {
            VARS.iter()
                .map(|v| finite_differences(&mut it, v, mb))
                .collect()
        })
        .collect()
}

fn close(a: f64, b: f64, what: &str) {
    assert!(
        (a - b).abs() <= 1e-7 * (1.0 + b.abs()),
        "{what}: {a} vs {b}"
    );
}

/// SGD with loss scaling 8 and gradient accumulation 2 applies the mean of the two
/// micro-batches' unscaled gradients: `w' = w - lr (g1 + g2) / 2`.
#[test]
fn sgd_step_applies_the_mean_unscaled_gradient() {
    let lr = 0.1;
    let s = spec(
        Optimizer::Sgd { learning_rate: lr },
        Precision::P32_32,
        8.0,
        2,
    );
    let p = program(&[4, 3, 2], 5, Op::Tanh, s.clone());
    let g = training_step(&p, &s).unwrap();
    let mut it = Interpreter::new_exact(&g, 0).unwrap();
    let mut rng = Pcg32::seed_from_u64(8);
    let mbs = [batch(&it, &mut rng, 1.0, 2), batch(&it, &mut rng, 1.0, 2)];
    let grads = reference_gradients(&p, &mbs);
    let before = weights(&it, &g);
    it.step(&mbs).unwrap();
    for (k, (name, w0)) in before.iter().enumerate() {
        let w1 = it.variable(name).unwrap().to_f64_vec();
        for j in 0..w0.len() {
            let mean = (grads[0][k][j] + grads[1][k][j]) / 2.0;
            close(w1[j], w0[j] - lr * mean, &format!("{name}[{j}]"));
        }
        let acc = it
            .variable(&format!("{name}/grad_accum"))
            .unwrap()
            .to_f64_vec();
        assert!(acc.iter().all(|&a| a == 0.0), "accumulator reset");
    }
}

/// A small MLP under `spec` after one step on its first micro-batch, on the exact interpreter.
struct FirstStep {
    p: Program,
    g: Graph,
    it: Interpreter,
    rng: Pcg32,
    /// The weights before the step.
    w0: Vec<(String, Vec<f64>)>,
    /// The micro-batch.
    mb1: Streams,
    /// Its reference gradients.
    g1: Vec<Vec<f64>>,
}

fn first_step(spec: &TrainingSpec, seed: u64) -> FirstStep {
    let p = program(&[4, 3, 2], 5, Op::Tanh, spec.clone());
    let g = training_step(&p, spec).unwrap();
    let mut it = Interpreter::new_exact(&g, 0).unwrap();
    let mut rng = Pcg32::seed_from_u64(seed);
    let w0 = weights(&it, &g);
    let mb1 = batch(&it, &mut rng, 1.0, 2);
    let g1 = reference_gradients(&p, std::slice::from_ref(&mb1)).remove(0);
    it.step(std::slice::from_ref(&mb1)).unwrap();
    FirstStep {
        p,
        g,
        it,
        rng,
        w0,
        mb1,
        g1,
    }
}

/// Finite-difference gradients of every variable of [`VARS`] at weights `w` on `feeds`, from
/// an exact forward interpreter of `p` holding `w`.
fn gradients_at(p: &Program, w: &[(String, Vec<f64>)], feeds: &Streams) -> Vec<Vec<f64>> {
    let fwd = prepare(p, Some(Precision::P32_32), true).unwrap().graph;
    let mut f = Interpreter::new_exact(&fwd, 0).unwrap();
    for (name, v) in w {
        let t = f.variable(name).unwrap().clone();
        f.set_variable(
            name,
            Tensor::new(t.dtype(), t.shape().clone(), Data::F64(v.clone())).unwrap(),
        )
        .unwrap();
    }
    VARS.iter()
        .map(|v| finite_differences(&mut f, v, feeds))
        .collect()
}

/// Momentum over two steps and one Adam step, against the formulas of TensorFlow's
/// MomentumOptimizer and (TF1) AdamOptimizer evaluated on finite-difference gradients.
#[test]
fn momentum_and_adam_follow_their_formulas() {
    let (lr, m) = (0.05, 0.9);
    let s = spec(
        Optimizer::Momentum {
            learning_rate: lr,
            momentum: m,
        },
        Precision::P32_32,
        1.0,
        1,
    );
    let FirstStep {
        p,
        g,
        mut it,
        mut rng,
        w0,
        mb1,
        g1,
    } = first_step(&s, 9);
    let w1 = weights(&it, &g);
    let mb2 = batch(&it, &mut rng, 1.0, 2);
    // Gradients at the updated weights.
    let g2 = gradients_at(&p, &w1, &mb2);
    it.step(std::slice::from_ref(&mb2)).unwrap();
    for (k, (name, a)) in w0.iter().enumerate() {
        let w2 = it.variable(name).unwrap().to_f64_vec();
        for j in 0..a.len() {
            let v1 = g1[k][j];
            close(
                w1[k].1[j],
                a[j] - lr * v1,
                &format!("momentum step 1 {name}[{j}]"),
            );
            let v2 = m * v1 + g2[k][j];
            close(
                w2[j],
                w1[k].1[j] - lr * v2,
                &format!("momentum step 2 {name}[{j}]"),
            );
        }
    }

    let (lr, b1, b2, eps) = (0.01, 0.9, 0.999, 1e-3);
    let s = spec(
        Optimizer::Adam {
            learning_rate: lr,
            beta1: b1,
            beta2: b2,
            epsilon: eps,
        },
        Precision::P32_32,
        1.0,
        1,
    );
    let p = program(&[4, 3, 2], 5, Op::Tanh, s.clone());
    let g = training_step(&p, &s).unwrap();
    let mut it = Interpreter::new_exact(&g, 0).unwrap();
    let w0 = weights(&it, &g);
    let grads = reference_gradients(&p, std::slice::from_ref(&mb1)).remove(0);
    it.step(std::slice::from_ref(&mb1)).unwrap();
    // Constants are rounded to FP32 (the graph's dtype) before exact evaluation.
    let r = |x: f64| f64::from(x as f32);
    let lr_t = r(lr) * (1.0 - r(b2)).sqrt() / (1.0 - r(b1));
    for (k, (name, a)) in w0.iter().enumerate() {
        let w1 = it.variable(name).unwrap().to_f64_vec();
        for j in 0..a.len() {
            let gk = grads[k][j];
            let mt = r(1.0 - b1) * gk;
            let vt = r(1.0 - b2) * gk * gk;
            let want = a[j] - lr_t * mt / (vt.sqrt() + r(eps));
            assert!(
                (w1[j] - want).abs() <= 1e-6 * lr,
                "adam {name}[{j}]: {} vs {want}",
                w1[j]
            );
        }
    }
    assert_eq!(
        it.variable("adam/beta1_power").unwrap().to_f64_vec(),
        vec![r(b1) * r(b1)]
    );
}

/// Two AdamW steps (the second exercises the bias corrections at t = 2 and the state carried
/// over), against PyTorch's `torch.optim.AdamW` formula evaluated on the reference gradients,
/// with the FP32 constants the graph rounds to.
#[test]
fn adamw_follows_pytorch() {
    let (lr, b1, b2, eps, wd) = (0.01, 0.9, 0.999, 1e-3, 0.1);
    let s = spec(
        Optimizer::AdamW {
            learning_rate: lr,
            beta1: b1,
            beta2: b2,
            epsilon: eps,
            weight_decay: wd,
            accum_type: None,
            first_order_momentum_accum_type: None,
            second_order_momentum_accum_type: None,
        },
        Precision::P32_32,
        1.0,
        1,
    );
    let FirstStep {
        p,
        g,
        mut it,
        mut rng,
        w0,
        mb1: _,
        g1,
    } = first_step(&s, 11);
    let r = |x: f64| f64::from(x as f32);
    let w1 = weights(&it, &g);
    // The second step's gradients at w1.
    let mb2 = batch(&it, &mut rng, 1.0, 2);
    let g2 = gradients_at(&p, &w1, &mb2);
    it.step(std::slice::from_ref(&mb2)).unwrap();
    let (c1, c2) = (r(1.0 - b1), r(1.0 - b2));
    let keep = r(1.0 - lr * wd);
    for (k, (name, a)) in w0.iter().enumerate() {
        let w2 = it.variable(name).unwrap().to_f64_vec();
        for j in 0..a.len() {
            // t = 1
            let (m1, v1) = (c1 * g1[k][j], c2 * g1[k][j] * g1[k][j]);
            let (p1, q1) = (r(b1), r(b2));
            let step1 = r(lr) / (1.0 - p1);
            let want1 = a[j] * keep - step1 * m1 / (v1.sqrt() / (1.0 - q1).sqrt() + r(eps));
            close(w1[k].1[j], want1, &format!("adamw step 1 {name}[{j}]"));
            // t = 2
            let gj = g2[k][j];
            let (m2, v2) = (r(b1) * m1 + c1 * gj, r(b2) * v1 + c2 * gj * gj);
            let (p2, q2) = (p1 * r(b1), q1 * r(b2));
            let step2 = r(lr) / (1.0 - p2);
            let want2 = w1[k].1[j] * keep - step2 * m2 / (v2.sqrt() / (1.0 - q2).sqrt() + r(eps));
            close(w2[j], want2, &format!("adamw step 2 {name}[{j}]"));
        }
    }
    // The moments live in the requested dtypes.
    let s16 = spec(
        Optimizer::AdamW {
            learning_rate: lr,
            beta1: b1,
            beta2: b2,
            epsilon: eps,
            weight_decay: wd,
            accum_type: Some(ipusim_ir::DType::F16),
            first_order_momentum_accum_type: Some(ipusim_ir::DType::F16),
            second_order_momentum_accum_type: Some(ipusim_ir::DType::F32),
        },
        Precision::P32_32,
        1.0,
        2,
    );
    let g16 = training_step(&program(&[4, 3, 2], 5, Op::Tanh, s16.clone()), &s16).unwrap();
    let dtype = |name: &str| g16.node(g16.find(name).unwrap()).ty.dtype;
    let var = VARS[0];
    assert_eq!(dtype(&format!("{var}/adam_m")), ipusim_ir::DType::F16);
    assert_eq!(dtype(&format!("{var}/adam_v")), ipusim_ir::DType::F32);
    assert_eq!(dtype(&format!("{var}/grad_accum")), ipusim_ir::DType::F16);
}

/// AdamW with the hands-on day's state dtypes (FP16 first moment, FP32 second) and
/// PyTorch's default epsilon (1e-8, below FP16's smallest subnormal): a weight whose gradient
/// is zero (its input feature is zero in every sample) has zero moments, and its ratio is
/// divided in the second moment's FP32, where `0 / (0 + 1e-8)` is zero. Divided in FP16, the
/// epsilon flushed to zero and the ratio was 0/0: NaN weights after the first update.
#[test]
fn adamw_keeps_weights_with_zero_gradients_finite() {
    let s = spec(
        Optimizer::AdamW {
            learning_rate: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
            weight_decay: 0.01,
            accum_type: Some(ipusim_ir::DType::F16),
            first_order_momentum_accum_type: Some(ipusim_ir::DType::F16),
            second_order_momentum_accum_type: Some(ipusim_ir::DType::F32),
        },
        Precision::P16_16,
        1000.0,
        1,
    );
    let p = program(&[4, 3, 2], 5, Op::Tanh, s.clone());
    let g = training_step(&p, &s).unwrap();
    // The IPU's arithmetic (FP16 rounding), not the exact mode's identities.
    let mut it = Interpreter::new(&g, FpConfig::default(), 0).unwrap();
    let mut rng = Pcg32::seed_from_u64(3);
    let w0 = weights(&it, &g);
    for step in 0..2 {
        // Feature 0 is zero in every sample: the first layer's weights reading it get a
        // zero gradient.
        let mut mb = batch(&it, &mut rng, 1.0, 2);
        for (name, t) in mb.iter_mut() {
            if name != "labels" {
                let mut v = t.to_f64_vec();
                let n = v.len() / 4;
                for row in v.chunks_mut(4).take(n) {
                    row[0] = 0.0;
                }
                *t = tensor_from_f64(&t.ty(), &v).unwrap();
            }
        }
        it.step(std::slice::from_ref(&mb)).unwrap();
        for (name, w) in weights(&it, &g) {
            assert!(
                w.iter().all(|x| x.is_finite()),
                "step {step}: {name} holds a non-finite weight: {w:?}"
            );
        }
    }
    // The first layer's weights of feature 0 (row 0 of `[4, 3]`) only decayed, by `1 - lr *
    // wd` = 0.9999, which is 1 in FP16: unchanged. The others trained.
    let (name, first) = &w0[0];
    assert_eq!(name, VARS[0]);
    let after = it.variable(name).unwrap().to_f64_vec();
    assert_eq!(after[..3], first[..3], "{name}'s zero-gradient row moved");
    assert!(
        after[3..].iter().zip(&first[3..]).any(|(a, b)| a != b),
        "{name}'s other rows did not train"
    );
}

/// Mean loss over `steps` steps of SGD on a teacher-labelled problem, first and last fifth.
/// Trains for `steps` steps; returns the mean loss of the first and last fifth of the steps
/// and the loss of the first batch before and after the first step.
fn train(precision: Precision, config: FpConfig, steps: usize) -> ((f64, f64), (f64, f64)) {
    let (d, hidden, classes, n) = (16, 32, 4, 32);
    let s = spec(
        Optimizer::Momentum {
            learning_rate: 0.05,
            momentum: 0.9,
        },
        precision,
        1.0,
        1,
    );
    let p = program(&[d, hidden, classes], n, Op::Relu, s.clone());
    let g = training_step(&p, &s).unwrap();
    let mut it = Interpreter::new(&g, config, 7).unwrap();
    // Labels from a fixed random linear teacher: learnable, not memorised.
    let mut rng = Pcg32::seed_from_u64(21);
    let teacher: Vec<f64> = (0..d * classes)
        .map(|_| 2.0 * unit(&mut rng) - 1.0)
        .collect();
    let types: Vec<(String, TensorType)> = it
        .infeeds()
        .map(|(s, t)| (s.to_string(), t.clone()))
        .collect();
    let mut losses = Vec::with_capacity(steps);
    let mut first_batch = (0.0, 0.0);
    for step in 0..steps {
        let x: Vec<f64> = (0..n * d)
            .map(|_| f64::from((2.0 * unit(&mut rng) - 1.0) as f32))
            .collect();
        let labels: Vec<f64> = (0..n)
            .map(|r| {
                let score = |c: usize| {
                    (0..d)
                        .map(|k| x[r * d + k] * teacher[k * classes + c])
                        .sum::<f64>()
                };
                (0..classes)
                    .max_by(|&a, &b| score(a).total_cmp(&score(b)))
                    .unwrap_or(0) as f64
            })
            .collect();
        let feeds: Streams = types
            .iter()
            .map(|(s, ty)| {
                let v = if s == "labels" { &labels } else { &x };
                (s.clone(), tensor_from_f64(ty, v).unwrap())
            })
            .collect();
        let out = it.step(std::slice::from_ref(&feeds)).unwrap();
        losses.push(out[0]["loss"].to_f64_vec()[0]);
        if step == 0 {
            // Without accumulation the Step phase assigns nothing: a micro-batch alone
            // evaluates the loss at the updated weights.
            let again = it.micro_batch(&feeds).unwrap();
            first_batch = (losses[0], again["loss"].to_f64_vec()[0]);
        }
    }
    let fifth = steps / 5;
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    let trend = (mean(&losses[..fifth]), mean(&losses[steps - fifth..]));
    (trend, first_batch)
}

/// A small MLP trained by the reference interpreter lowers its loss in 32.32, 16.32 and
/// 16.16 (with stochastic rounding, as Graphcore recommends for FP16 weights).
#[test]
fn training_lowers_the_loss_in_every_precision_policy() {
    let sr = FpConfig {
        esr: StochasticRounding::On,
        ..FpConfig::default()
    };
    for (precision, config) in [
        (Precision::P32_32, FpConfig::default()),
        (Precision::P16_32, FpConfig::default()),
        (Precision::P16_16, sr),
    ] {
        let ((first, last), (before, after)) = train(precision, config, 100);
        assert!(
            after < before,
            "{precision}: one step: {before:.5} -> {after:.5}"
        );
        // ln 4 = 1.386 at chance; a learnable teacher problem gets well below it.
        assert!(
            last < 0.6 * first,
            "{precision}: loss {first:.4} -> {last:.4}"
        );
    }
}

/// The case of seed 000, "Underflowing gradients and loss scaling", built on purpose: a
/// 16.16 MLP whose output weights are tiny (2^-22), so the backpropagated activation
/// gradients `d_logits @ W2^T` (about 1e-8) are below half the smallest FP16 subnormal
/// (2^-25) and round to zero. Without loss scaling the first layer's gradient is exactly
/// zero and its weights do not move, although the true gradient is not zero. A loss scale of
/// 2^15 lifts those gradients into FP16's normal range (about 2e-4); the first layer then
/// moves, in the direction of the true gradient.
struct UnderflowStep {
    before: Vec<f64>,
    after: Vec<f64>,
    /// The FP16 gradient of W1 the update applied (unscaled).
    applied: Vec<f64>,
    /// The exact gradient of W1.
    true_grad: Vec<f64>,
    w2_moved: bool,
}

fn underflow_step(loss_scaling: f64) -> UnderflowStep {
    let (d, hidden, classes, n) = (16, 16, 4, 32);
    let s = spec(
        Optimizer::Sgd { learning_rate: 1.0 },
        Precision::P16_16,
        loss_scaling,
        1,
    );
    let p = program(&[d, hidden, classes], n, Op::Tanh, s.clone());
    let g = training_step(&p, &s).unwrap();
    let mut it = Interpreter::new(&g, FpConfig::default(), 3).unwrap();
    let mut rng = Pcg32::seed_from_u64(4);
    // W1 entries ±2^-12 .. 2^-11, W2 entries ±2^-22 (exact FP16 values).
    let signed = |rng: &mut Pcg32, mag: f64| if unit(rng) < 0.5 { -mag } else { mag };
    let w1: Vec<f64> = (0..d * hidden)
        .map(|_| {
            let mag = 2f64.powi(-12) * (1.0 + (unit(&mut rng) * 8.0).floor() / 8.0);
            signed(&mut rng, mag)
        })
        .collect();
    let w2: Vec<f64> = (0..hidden * classes)
        .map(|_| signed(&mut rng, 2f64.powi(-22)))
        .collect();
    let ty = |name: &str| it.variable(name).unwrap().ty();
    let (t1, t2) = (ty("dense1/weights"), ty("dense2/weights"));
    it.set_variable("dense1/weights", tensor_from_f64(&t1, &w1).unwrap())
        .unwrap();
    it.set_variable("dense2/weights", tensor_from_f64(&t2, &w2).unwrap())
        .unwrap();
    let feeds = batch(&it, &mut rng, 32.0, classes);

    // The true gradient of W1 at the same (FP16-exact) point, in exact arithmetic.
    let reference = spec(
        Optimizer::Sgd { learning_rate: 1.0 },
        Precision::P16_16,
        1.0,
        1,
    );
    let rg = training_step(&p, &reference).unwrap();
    let mut exact = Interpreter::new_exact(&rg, 0).unwrap();
    exact
        .set_variable("dense1/weights", tensor_from_f64(&t1, &w1).unwrap())
        .unwrap();
    exact
        .set_variable("dense2/weights", tensor_from_f64(&t2, &w2).unwrap())
        .unwrap();
    exact.micro_batch(&feeds).unwrap();
    let true_grad = exact
        .value(&gradient_node(&rg, "dense1/weights"))
        .unwrap()
        .to_f64_vec();

    it.step(&[feeds]).unwrap();
    let after = it.variable("dense1/weights").unwrap().to_f64_vec();
    let applied = it
        .value(&gradient_node(&g, "dense1/weights"))
        .unwrap()
        .to_f64_vec();
    let w2_after = it.variable("dense2/weights").unwrap().to_f64_vec();
    UnderflowStep {
        w2_moved: w2_after != tensor_from_f64(&t2, &w2).unwrap().to_f64_vec(),
        before: w1,
        after,
        applied,
        true_grad,
    }
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

#[test]
fn fp16_gradients_underflow_without_loss_scaling_and_loss_scaling_fixes_it() {
    let plain = underflow_step(1.0);
    let true_norm = plain.true_grad.iter().map(|g| g * g).sum::<f64>().sqrt();
    assert!(
        true_norm > 1e-6,
        "the true gradient is not zero: {true_norm}"
    );
    assert!(
        plain.applied.iter().all(|&g| g == 0.0),
        "the FP16 gradient underflowed to zero"
    );
    assert_eq!(
        plain.after, plain.before,
        "16.16 without loss scaling: W1 does not move"
    );
    assert!(plain.w2_moved, "the output layer still trains");

    let scaled = underflow_step(32768.0);
    assert_eq!(scaled.true_grad, plain.true_grad);
    let nonzero = scaled.applied.iter().filter(|&&g| g != 0.0).count();
    assert!(
        nonzero > scaled.applied.len() * 3 / 4,
        "{nonzero} non-zero gradients"
    );
    let delta: Vec<f64> = scaled
        .after
        .iter()
        .zip(&scaled.before)
        .map(|(a, b)| a - b)
        .collect();
    let moved = delta.iter().filter(|&&x| x != 0.0).count();
    assert!(
        moved > delta.len() / 2,
        "with loss scaling W1 moves: {moved} of {}",
        delta.len()
    );
    let descent: Vec<f64> = scaled.true_grad.iter().map(|g| -g).collect();
    let c = cosine(&delta, &descent);
    assert!(c > 0.9, "the update follows the true gradient: cosine {c}");
}

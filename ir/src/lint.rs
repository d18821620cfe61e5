//! Numerical lint: warnings (never errors) for the FP16 traps of the seed documents (seed 000,
//! "Avoiding numerical issues"; seed 002, "keep the softmax in FP32").
//!
//! Each finding is a [`LintWarning`] with a stable `code`:
//!
//! | code | level | when |
//! |---|---|---|
//! | `lr-underflow` | warning | weights are FP16 and the learning rate rounds to 0 in FP16 or is below 2^-24 |
//! | `scaled-lr-underflow` | warning | weights are FP16, loss scaling is on, and `learning_rate / loss_scaling` (the folded SGD step of seed 000) rounds to 0 or is below 2^-24 in FP16 |
//! | `epsilon-underflow` | warning | weights are FP16 and Adam's epsilon rounds to 0 or is below 2^-24 in FP16 |
//! | `beta-rounds-to-one` | warning | weights are FP16 and momentum, `beta1` or `beta2` rounds to 1.0 in FP16 (the average never decays, or `1 - beta2` is 0) |
//! | `scale-underflow` | warning | a `ScaledAdd` computes in FP16 and its scale rounds to 0 or is below 2^-24 |
//! | `fp16-softmax` | warning | a `Softmax`, `LogSoftmax` or `SparseSoftmaxCrossEntropy` computes in FP16 |
//! | `loss-scale-overflow` | warning | `loss_scaling × B > 65504`, `B` a bound on the gradient the loss sends into an FP16 tensor |
//! | `loss-scale-no-effect` | info | loss scaling with precision 32.32 and no FP16 tensor |
//! | `fp16-unscale` | info | loss scaling with FP16 weights: gradients are unscaled in FP16 |
//! | `constant-overflow` | warning | an FP16 constant (or variable initial value) above 65504 in magnitude |
//! | `constant-underflow` | warning | an FP16 constant (or initial value) that rounds to 0 or is below 2^-24 |
//!
//! Dtypes are those of the program under its precision policy ([`crate::effective`]), so an
//! `F32` softmax in a 16.32 program warns, while `SparseSoftmaxCrossEntropy` (kept in FP32 by
//! the policy) does not. "Weights are FP16" means precision 16.16, or a `Variable` written
//! `F16` (explicit F16 is never changed, so its optimizer step runs in FP16).
//!
//! The loss-scale bound `B`: for the gradient of the loss `L` with respect to its first input
//! `z`, `|dL/dz|` per element is at most `|softmax(z) - onehot| / n <= 1/n` for a mean
//! `SparseSoftmaxCrossEntropy` over a batch of `n` (1 for a sum), `1/N` for a `ReduceMean` of
//! `N` elements, and 1 for a `ReduceSum`; for any other loss op, the bound is the seed
//! gradient `dL/dL = 1` at the loss itself. Scaled by `loss_scaling`, a gradient that exceeds
//! 65504 overflows as soon as it is written in FP16. This is a necessary condition only:
//! gradients deeper in the network can be larger.

use crate::dtype::DType;
use crate::effective::effective_dtypes;
use crate::graph::{Node, NodeId};
use crate::op::{Init, Literal, LossReduction, Op};
use crate::program::{Precision, Program, TrainingSpec};
use serde::Serialize;
use std::collections::HashMap;

/// Largest finite FP16 value, `(2 - 2^-10) * 2^15` (`reference/numerics.md`, `f16::MAX`).
pub const FP16_MAX: f64 = 65504.0;
/// Smallest positive FP16 subnormal, 2^-24 (`reference/numerics.md`, `0x0001`). Half of it,
/// 2^-25, is a tie that rounds to even, i.e. to 0.
pub const FP16_MIN_SUBNORMAL: f64 = 1.0 / 16_777_216.0;

/// How serious a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LintLevel {
    /// Likely to break training or give wrong values.
    Warning,
    /// Worth knowing; not harmful by itself.
    Info,
}

/// One finding of the lint.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LintWarning {
    /// The node at fault, when there is one.
    pub node: Option<String>,
    /// Stable identifier of the check (see the module documentation).
    pub code: &'static str,
    /// What is wrong, with the numbers.
    pub message: String,
    /// Warning or info.
    pub level: LintLevel,
}

impl std::fmt::Display for LintWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let level = match self.level {
            LintLevel::Warning => "warning",
            LintLevel::Info => "info",
        };
        write!(f, "{level}[{}]", self.code)?;
        if let Some(node) = &self.node {
            write!(f, " node '{node}'")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// `v` rounded to FP16 (round to nearest, ties to even), exactly: ±inf when it overflows.
/// The scaling by a power of two and `round_ties_even` are exact in f64, so this is a single
/// rounding from the f64 value (no double rounding through f32).
pub fn round_to_f16(v: f64) -> f64 {
    if !v.is_finite() || v == 0.0 {
        return v;
    }
    let a = v.abs();
    // Unbiased exponent of `a` (f64 subnormals are far below FP16's range; they round to 0).
    let e = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    // FP16 has 10 fraction bits; below 2^-14 the quantum stays 2^-24 (subnormals).
    let q_exp = e.max(-14) - 10;
    let quantum = f64::from_bits(((q_exp + 1023) as u64) << 52);
    let r = (a / quantum).round_ties_even() * quantum;
    let r = if r > FP16_MAX { f64::INFINITY } else { r };
    r.copysign(v)
}

/// How an FP16 rounding loses a small positive value, if it does.
fn small_value_loss(v: f64) -> Option<String> {
    let r = round_to_f16(v);
    if v != 0.0 && r == 0.0 {
        Some(format!(
            "{v:e} rounds to 0 in FP16 (values up to 2^-25 = {:e} underflow)",
            FP16_MIN_SUBNORMAL / 2.0
        ))
    } else if v != 0.0 && v.abs() < FP16_MIN_SUBNORMAL {
        Some(format!(
            "{v:e} is below the smallest FP16 subnormal 2^-24 = {FP16_MIN_SUBNORMAL:e} and rounds to {r:e}, losing all precision"
        ))
    } else {
        None
    }
}

/// Runs every check; findings are ordered by check, then by node id.
pub fn lint_program(program: &Program) -> Vec<LintWarning> {
    let eff = effective_dtypes(program);
    let mut out = Vec::new();
    let weights_f16 = fp16_weights(program);
    if let Some(spec) = &program.training {
        if let Some(why) = &weights_f16 {
            optimizer_in_fp16(spec, why, &mut out);
        }
        loss_scaling(program, spec, &eff, weights_f16.is_some(), &mut out);
    }
    for (id, node) in program.graph.nodes() {
        let dtype = eff.get(&id).copied().unwrap_or(node.ty.dtype);
        node_checks(node, dtype, &mut out);
    }
    out
}

/// Why the weights are FP16, if they are.
fn fp16_weights(program: &Program) -> Option<String> {
    let spec = program.training.as_ref()?;
    if spec.precision == Precision::P16_16 {
        return Some("the weights are FP16 (precision 16.16)".into());
    }
    program.graph.nodes().find_map(|(_, n)| match n.op {
        Op::Variable {
            dtype: DType::F16, ..
        } => Some(format!("variable '{}' is written F16", n.name)),
        _ => None,
    })
}

fn warn(out: &mut Vec<LintWarning>, node: Option<&str>, code: &'static str, message: String) {
    out.push(LintWarning {
        node: node.map(str::to_string),
        code,
        message,
        level: LintLevel::Warning,
    });
}

fn info(out: &mut Vec<LintWarning>, code: &'static str, message: String) {
    out.push(LintWarning {
        node: None,
        code,
        message,
        level: LintLevel::Info,
    });
}

fn optimizer_in_fp16(spec: &TrainingSpec, why: &str, out: &mut Vec<LintWarning>) {
    let hyper = spec.optimizer.hyperparameters();
    let lr = spec.optimizer.learning_rate();
    let epsilon = hyper.iter().find(|(k, _)| *k == "epsilon").map(|&(_, v)| v);
    let betas = hyper
        .iter()
        .filter(|(k, _)| matches!(*k, "momentum" | "beta1" | "beta2"));
    if let Some(loss) = small_value_loss(lr) {
        warn(
            out,
            None,
            "lr-underflow",
            format!("{why}, and the learning rate {loss}"),
        );
    }
    if spec.loss_scaling != 1.0 {
        let folded = lr / spec.loss_scaling;
        if let Some(loss) = small_value_loss(folded) {
            warn(
                out,
                None,
                "scaled-lr-underflow",
                format!(
                    "{why}; learning_rate / loss_scaling = {lr} / {} = {loss} (dividing the learning rate by the loss scale, as seed 000 does for SGD, makes the update vanish)",
                    spec.loss_scaling
                ),
            );
        }
    }
    if let Some(loss) = epsilon.and_then(small_value_loss) {
        warn(
            out,
            None,
            "epsilon-underflow",
            format!("{why}, and Adam's epsilon {loss}; use at least 1e-4 in FP16 (seed 000)"),
        );
    }
    for &(name, beta) in betas {
        if beta != 1.0 && round_to_f16(beta) == 1.0 {
            warn(
                out,
                None,
                "beta-rounds-to-one",
                format!(
                    "{why}, and {name} = {beta} rounds to 1.0 in FP16 (values above 1 - 2^-12 do), so the moving average never forgets{}",
                    if name == "beta2" { " and 1 - beta2 is 0" } else { "" }
                ),
            );
        }
    }
}

fn loss_scaling(
    program: &Program,
    spec: &TrainingSpec,
    eff: &HashMap<NodeId, DType>,
    weights_f16: bool,
    out: &mut Vec<LintWarning>,
) {
    let ls = spec.loss_scaling;
    if ls == 1.0 {
        return;
    }
    let any_f16 = eff.values().any(|&d| d == DType::F16);
    if !any_f16 {
        info(
            out,
            "loss-scale-no-effect",
            format!(
                "loss scaling {ls} has no effect with precision {} and no FP16 tensor: FP32 gradients do not underflow at these scales",
                spec.precision
            ),
        );
        return;
    }
    if weights_f16 {
        info(
            out,
            "fp16-unscale",
            format!(
                "with FP16 weights the gradients are divided by the loss scale {ls} in FP16, where small gradients can underflow again (seed 000: unscaling is only completely safe with FP32 weights)"
            ),
        );
    }
    let g = &program.graph;
    let Some(loss_id) = g.find(&spec.loss) else {
        return;
    };
    let loss = g.node(loss_id);
    // The tensor that first receives the scaled gradient, and the bound on it.
    let (target, bound, why) = match (&loss.op, loss.inputs.first()) {
        (Op::SparseSoftmaxCrossEntropy { reduction }, Some(&logits)) => {
            let n = g.node(logits).ty.shape.dims().first().copied().unwrap_or(1);
            match reduction {
                LossReduction::Mean => (
                    logits,
                    1.0 / n as f64,
                    format!("|softmax - onehot| / {n} <= 1/{n} for a mean cross-entropy over a batch of {n}"),
                ),
                LossReduction::Sum => (
                    logits,
                    1.0,
                    "|softmax - onehot| <= 1 for a summed cross-entropy".to_string(),
                ),
            }
        }
        (Op::ReduceMean { .. }, Some(&x)) => {
            let n = g.node(x).ty.num_elements() / loss.ty.num_elements().max(1);
            (
                x,
                1.0 / n as f64,
                format!("1/{n} for a mean of {n} elements"),
            )
        }
        (Op::ReduceSum { .. }, Some(&x)) => (x, 1.0, "1 for a sum".to_string()),
        _ => (loss_id, 1.0, "1 (dL/dL) at the loss itself".to_string()),
    };
    if eff.get(&target) != Some(&DType::F16) {
        return;
    }
    if ls * bound > FP16_MAX {
        warn(
            out,
            Some(&g.node(target).name),
            "loss-scale-overflow",
            format!(
                "loss scaling {ls} times the gradient bound {bound:e} ({why}) is {:e} > 65504: the FP16 gradient of '{}' can overflow (use at most {:e})",
                ls * bound,
                g.node(target).name,
                FP16_MAX / bound
            ),
        );
    }
}

fn node_checks(node: &Node, dtype: DType, out: &mut Vec<LintWarning>) {
    let name = Some(node.name.as_str());
    let written = node.ty.dtype;
    let as_written = if written == dtype {
        String::new()
    } else {
        format!(" ({written} as written, {dtype} under the precision policy)")
    };
    match &node.op {
        // The output dtype is the compute dtype (the policy keeps the loss in FP32).
        Op::Softmax { .. } | Op::LogSoftmax { .. } | Op::SparseSoftmaxCrossEntropy { .. }
            if dtype == DType::F16 =>
        {
            warn(
                out,
                name,
                "fp16-softmax",
                format!(
                    "{} computes in FP16{as_written}: probabilities below 2^-25 underflow to 0 (their logs to -inf) and the rest keep 11 significant bits; keep the output softmax and the loss in FP32 (seed 002), e.g. compute the loss with SparseSoftmaxCrossEntropy on the logits, which the precision policy keeps in FP32",
                    node.op.name()
                ),
            );
        }
        Op::Constant { value, .. } if dtype == DType::F16 => {
            let values: &[f64] = match value {
                Literal::Splat(v) => std::slice::from_ref(v),
                Literal::Values(v) => v,
            };
            fp16_values(name, "constant", values, &as_written, out);
        }
        Op::Variable {
            init: Init::Constant(v),
            ..
        } if dtype == DType::F16 => {
            fp16_values(
                name,
                "initial value",
                std::slice::from_ref(v),
                &as_written,
                out,
            );
        }
        Op::ScaledAdd { scale } if dtype == DType::F16 => {
            if let Some(loss) = small_value_loss(scale.abs()) {
                warn(
                    out,
                    name,
                    "scale-underflow",
                    format!("ScaledAdd computes in FP16{as_written} and its scale {loss}"),
                );
            }
        }
        _ => {}
    }
}

/// Overflow and underflow of values stored in FP16.
fn fp16_values(
    node: Option<&str>,
    what: &str,
    values: &[f64],
    as_written: &str,
    out: &mut Vec<LintWarning>,
) {
    let big: Vec<f64> = values
        .iter()
        .copied()
        .filter(|v| v.is_finite() && v.abs() > FP16_MAX)
        .collect();
    if let Some(&v) = big.first() {
        let fate = if round_to_f16(v).is_infinite() {
            "rounds to infinity (at or above 65520), or saturates to 65504 with nanoo off"
        } else {
            "rounds down to 65504"
        };
        warn(
            out,
            node,
            "constant-overflow",
            format!(
                "FP16 {what}{as_written}: {} value(s) exceed the FP16 maximum 65504; the first, {v}, {fate}",
                big.len()
            ),
        );
    }
    let small: Vec<(f64, String)> = values
        .iter()
        .filter_map(|&v| small_value_loss(v.abs()).map(|l| (v, l)))
        .collect();
    if let Some((_, loss)) = small.first() {
        warn(
            out,
            node,
            "constant-underflow",
            format!(
                "FP16 {what}{as_written}: {} value(s) underflow; the first, {loss}",
                small.len()
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::GraphBuilder;
    use crate::models::{mlp, MlpSpec};
    use crate::program::Optimizer;

    fn codes(p: &Program) -> Vec<&'static str> {
        lint_program(p).iter().map(|w| w.code).collect()
    }

    fn program(precision: Precision, optimizer: Optimizer, loss_scaling: f64) -> Program {
        let mut p = mlp(&MlpSpec::new(16, &[8, 4, 3])).unwrap();
        p.training = Some(TrainingSpec {
            loss: "loss".into(),
            optimizer,
            loss_scaling,
            precision,
            gradient_accumulation: 1,
            accumulation_dtype: None,
            stable_norm: false,
        });
        p
    }

    fn sgd(learning_rate: f64) -> Optimizer {
        Optimizer::Sgd { learning_rate }
    }

    #[test]
    fn fp16_rounding_is_exact_at_the_thresholds() {
        // reference/numerics.md test vectors.
        assert_eq!(round_to_f16(65504.0 + 15.0), 65504.0);
        assert_eq!(
            round_to_f16(65520.0),
            f64::INFINITY,
            "a tie that rounds to even, 2^16"
        );
        assert_eq!(round_to_f16(-65520.0), f64::NEG_INFINITY);
        assert_eq!(
            round_to_f16(FP16_MIN_SUBNORMAL / 2.0),
            0.0,
            "2^-25 is a tie to 0"
        );
        let just_above = FP16_MIN_SUBNORMAL / 2.0 * (1.0 + f64::EPSILON);
        assert_eq!(round_to_f16(just_above), FP16_MIN_SUBNORMAL);
        assert_eq!(
            round_to_f16(3.0 * FP16_MIN_SUBNORMAL / 4.0),
            FP16_MIN_SUBNORMAL
        );
        assert_eq!(
            round_to_f16(2f64.powi(-14) - 2f64.powi(-25)),
            2f64.powi(-14)
        );
        assert_eq!(round_to_f16(0.1), 0.0999755859375);
        assert_eq!(round_to_f16(1.0 + 2f64.powi(-11)), 1.0, "tie to even");
        assert_eq!(round_to_f16(0.9999), 1.0);
        assert_eq!(round_to_f16(0.999), 0.9990234375);
    }

    #[test]
    fn clean_programs_are_quiet() {
        let p = program(Precision::P16_32, sgd(0.01), 128.0);
        assert_eq!(codes(&p), Vec::<&str>::new());
        let p = program(Precision::P32_32, sgd(1e-9), 1.0);
        assert_eq!(
            codes(&p),
            Vec::<&str>::new(),
            "FP32 weights do not underflow"
        );
    }

    #[test]
    fn hyperparameters_underflow_with_fp16_weights() {
        let p = program(Precision::P16_16, sgd(1e-8), 1.0);
        assert_eq!(codes(&p), ["lr-underflow"]);
        let msg = &lint_program(&p)[0].message;
        assert!(msg.contains("1e-8 rounds to 0 in FP16"), "{msg}");

        let p = program(Precision::P16_16, sgd(4e-8), 1.0);
        let msg = &lint_program(&p)[0].message;
        assert!(msg.contains("losing all precision"), "{msg}");

        let p = program(Precision::P16_16, sgd(1e-4), 4096.0);
        assert_eq!(codes(&p), ["scaled-lr-underflow", "fp16-unscale"]);

        let adam = Optimizer::Adam {
            learning_rate: 1e-3,
            beta1: 0.9,
            beta2: 0.9999,
            epsilon: 1e-8,
        };
        let p = program(Precision::P16_16, adam.clone(), 1.0);
        assert_eq!(codes(&p), ["epsilon-underflow", "beta-rounds-to-one"]);
        let p = program(Precision::P16_32, adam, 1.0);
        assert_eq!(codes(&p), Vec::<&str>::new(), "FP32 master weights");
    }

    #[test]
    fn explicit_f16_variables_make_the_weights_fp16() {
        let mut p = program(Precision::P16_32, sgd(1e-8), 1.0);
        let mut b = GraphBuilder::from_graph(p.graph.clone());
        b.variable("w16", DType::F16, [2], Init::Zeros).unwrap();
        p.graph = b.finish();
        let w = lint_program(&p);
        assert_eq!(w[0].code, "lr-underflow");
        assert!(w[0].message.contains("variable 'w16' is written F16"));
    }

    #[test]
    fn softmax_in_fp16_after_the_policy() {
        let mut p = program(Precision::P16_32, sgd(0.01), 1.0);
        let mut b = GraphBuilder::from_graph(p.graph.clone());
        let logits = b.graph().find("dense2/add").unwrap();
        b.softmax(logits, 1).unwrap();
        p.graph = b.finish();
        let w = lint_program(&p);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].code, "fp16-softmax");
        assert_eq!(w[0].node.as_deref(), Some("softmax"));
        assert!(w[0]
            .message
            .contains("f32 as written, f16 under the precision policy"));
        p.training.as_mut().unwrap().precision = Precision::P32_32;
        assert_eq!(codes(&p), Vec::<&str>::new());
        // Without a training spec, the graph runs as written: an F16 loss warns.
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F16, [4, 3]).unwrap();
        let y = b.input("y", DType::I32, [4]).unwrap();
        b.sparse_softmax_cross_entropy(x, y, LossReduction::Mean)
            .unwrap();
        assert_eq!(codes(&Program::new("p", b.finish())), ["fp16-softmax"]);
    }

    #[test]
    fn loss_scale_bounds() {
        // Mean cross-entropy over a batch of 16: bound 1/16, limit 65504 * 16.
        let p = program(Precision::P16_32, sgd(0.01), 65504.0 * 16.0);
        assert_eq!(codes(&p), Vec::<&str>::new());
        let p = program(Precision::P16_32, sgd(0.01), 65504.0 * 16.0 * 2.0);
        let w = lint_program(&p);
        assert_eq!(codes(&p), ["loss-scale-overflow"]);
        assert_eq!(w[0].node.as_deref(), Some("dense2/add"));
        assert!(w[0].message.contains("1/16"), "{}", w[0].message);
        let p = program(Precision::P32_32, sgd(0.01), 1e9);
        assert_eq!(codes(&p), ["loss-scale-no-effect"]);
        assert_eq!(lint_program(&p)[0].level, LintLevel::Info);
    }

    #[test]
    fn fp16_constants() {
        let mut b = GraphBuilder::new();
        b.constant("big", DType::F16, [3], vec![1.0, 70000.0, 65510.0])
            .unwrap();
        b.splat("tiny", DType::F16, [2], 1e-8).unwrap();
        b.splat("fine", DType::F32, [2], 1e-8).unwrap();
        let w = lint_program(&Program::new("c", b.finish()));
        assert_eq!(w.len(), 2, "{w:?}");
        assert_eq!(w[0].code, "constant-overflow");
        assert!(w[0].message.contains("2 value(s)"), "{}", w[0].message);
        assert!(
            w[0].message.contains("rounds to infinity"),
            "{}",
            w[0].message
        );
        assert_eq!(w[1].code, "constant-underflow");
        assert_eq!(w[1].node.as_deref(), Some("tiny"));
        // Under 16.x an F32 constant becomes FP16.
        let mut p = program(Precision::P16_32, sgd(0.01), 1.0);
        let mut b = GraphBuilder::from_graph(p.graph.clone());
        b.splat("eps", DType::F32, [], 1e-9).unwrap();
        p.graph = b.finish();
        assert_eq!(codes(&p), ["constant-underflow"]);
    }
}

//! The normalisation family in one place: `BatchNorm` and `GroupNorm`, their shape inference,
//! their decomposition into primitive ops (they need no codelet and no interpreter
//! evaluation of their own) and batch norm's backward pass.
//!
//! # Gradients
//!
//! A training batch norm has a backward pass of its own, PopLibs' ([`grad`]): autodiff uses
//! it in place of the rules of the primitives it is decomposed into, so the backward pass
//! reads the whitened activations (in the activation type), not the FP32 deviations, and
//! sums four reductions, not five. Group norm takes the same backward pass with its
//! statistics' means per image over each group's channels.
//!
//! # Precision rule
//!
//! The statistics are computed in FP32 under every precision policy, as PopLibs computes
//! them with float partials. A batch norm's batch statistics (and a group norm's, per image
//! over each group's channels: PopLibs' `groupNormStatistics` has the same `stableAlgo`
//! default) take one sweep over the
//! activations, PopLibs' default (`normStatisticsImpl` with `stableAlgo = false`, the default
//! of PopTorch's and PopART's `enableStableNorm`): `mean = E[x]` and `power = E[x²]`, two
//! FP32 `ReduceMean`s of the activations read through their cast (and square) by the
//! compiler's reduction, then `var = max(power − mean², 0)` (PopLibs' `InverseStdDeviation`
//! clamps the estimate). The estimate loses precision when `|mean|` is large against the
//! standard deviation, as PopLibs' does. With the training spec's `stable_norm` (PopTorch's
//! `enableStableNorm(True)`, PopLibs' `stableAlgo`) the statistics take two
//! passes instead: the mean of the activations cast to FP32,
//! then the `ReduceMean` of the squared deviations from it (the FP32 deviations are
//! stored; no cancellation). Then
//! `inv_std = 1 / sqrt(var + epsilon)` in FP32. The mean and `inv_std`
//! are then rounded to the activation type, and the normalisation
//! `((x − mean) · inv_std) · scale + shift` runs in the activation type, as PopLibs' whitening
//! of the activations does.
//!
//! # Batch norm's two modes
//!
//! A training step ([`Statistics::Batch`]) normalises over the batch and spatial dimensions of
//! the micro-batch and updates the running statistics, as PyTorch's `BatchNorm2d` does:
//! `running = (1 − momentum) · running + momentum · stat` (in FP32, then rounded to the
//! variable's type), with the unbiased variance (`var · n / (n − 1)`, `n` the number of
//! elements per channel; the biased one when `n = 1`). An inference run
//! ([`Statistics::Running`]) normalises with the running statistics and updates nothing.

pub(crate) mod decompose;
pub mod grad;
pub(crate) mod groups;

pub use grad::NormParts;

use crate::dtype::TensorType;
use crate::fault::InferFault;
use crate::op::Op;

/// Which statistics a batch norm uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Statistics {
    /// The micro-batch's (a training step); the running statistics are updated. `stable`:
    /// in two passes (the mean, then the mean of the squared deviations: PopLibs'
    /// `stableAlgo`, PopTorch's `enableStableNorm(True)`), else in PopLibs' default single
    /// sweep.
    Batch { stable: bool },
    /// The running statistics (inference).
    Running,
}

/// The output type of a normalisation op, or `None` for other ops.
pub(crate) fn infer(op: &Op, inputs: &[&TensorType]) -> Option<Result<TensorType, InferFault>> {
    let names = ["the input", "scale", "shift", "running_mean", "running_var"];
    let check = |n_params: usize| -> Result<usize, InferFault> {
        let x = inputs[0];
        if !x.dtype.is_float() {
            return Err(InferFault::BadDType {
                input: 0,
                expected: "a float tensor",
            });
        }
        if x.shape.rank() < 2 {
            return Err(InferFault::Invalid(format!(
                "the input must have rank 2 or more ([N, C, ...]), got {}",
                x.shape
            )));
        }
        let c = x.shape.dims()[1];
        for i in 1..=n_params {
            if !inputs[i].dtype.is_float() {
                return Err(InferFault::BadDType {
                    input: i,
                    expected: "a float tensor",
                });
            }
            if inputs[i].shape.dims() != [c] {
                return Err(InferFault::ShapeMismatch {
                    a: 0,
                    b: i,
                    why: format!(
                        "{} has shape {} where the input's {c} channels (dimension 1 of {}) \
                         need [{c}]",
                        names[i], inputs[i].shape, x.shape
                    ),
                });
            }
        }
        Ok(c)
    };
    let result = match op {
        Op::BatchNorm { epsilon, momentum } => (|| {
            check(4)?;
            if !(epsilon.is_finite() && *epsilon > 0.0) {
                return Err(InferFault::Invalid(format!(
                    "epsilon must be a positive finite number, got {epsilon}"
                )));
            }
            if !(0.0..=1.0).contains(momentum) {
                return Err(InferFault::Invalid(format!(
                    "momentum must be in [0, 1], got {momentum}"
                )));
            }
            Ok(inputs[0].clone())
        })(),
        Op::GroupNorm { groups, epsilon } => (|| {
            let c = check(2)?;
            if !(epsilon.is_finite() && *epsilon > 0.0) {
                return Err(InferFault::Invalid(format!(
                    "epsilon must be a positive finite number, got {epsilon}"
                )));
            }
            if *groups == 0 || c % groups != 0 {
                return Err(InferFault::Invalid(format!(
                    "groups {groups} does not divide the input's {c} channels (dimension 1 of {})",
                    inputs[0].shape
                )));
            }
            let size = inputs[0].shape.dims()[2..].iter().product::<usize>() * (c / groups);
            if size == 0 {
                return Err(InferFault::Invalid(format!(
                    "each of the {groups} groups of {} is empty: there is nothing to normalise",
                    inputs[0].shape
                )));
            }
            Ok(inputs[0].clone())
        })(),
        _ => return None,
    };
    Some(result)
}

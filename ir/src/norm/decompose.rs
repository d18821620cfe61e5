//! `BatchNorm` and `GroupNorm` rewritten into primitive ops (called by [`crate::decompose`]),
//! with the precision rule and the two statistics modes of [`super`].

use super::grad::NormParts;
use super::groups::{self, group_sums};
use super::Statistics;
use crate::dtype::{DType, Shape};
use crate::error::IrError;
use crate::graph::NodeId;
use crate::op::Op;
use crate::rewrite::Emitter;

/// `ReduceMean(x)` over `axes`, kept as size-1 dimensions.
fn mean_over(
    e: &mut Emitter<'_, '_>,
    part: &str,
    x: NodeId,
    axes: &[usize],
) -> Result<NodeId, IrError> {
    let op = Op::ReduceMean {
        axes: axes.to_vec(),
        keep_dims: true,
    };
    e.node(part, op, &[x])
}

/// The FP32 statistics of `xs` (an FP32 node) over `axes`, kept as size-1 dimensions:
/// `(mean, var)`.
fn moments(
    e: &mut Emitter<'_, '_>,
    xs: NodeId,
    axes: Vec<usize>,
) -> Result<(NodeId, NodeId), IrError> {
    let mean = mean_over(e, "mean", xs, &axes)?;
    let d = e.node("deviation", Op::Sub, &[xs, mean])?;
    let sq = e.node("squared_deviation", Op::Mul, &[d, d])?;
    let var = mean_over(e, "var", sq, &axes)?;
    Ok((mean, var))
}

/// The FP32 statistics of `x` over `axes` in one sweep, kept as size-1 dimensions:
/// `(mean, var)` with `mean = E[x]`, `var = max(E[x²] − mean², 0)`. This is PopLibs' default
/// (lib/poplin/Norms.cpp `normStatisticsImpl` with `stableAlgo = false`, PopTorch's and
/// PopART's default: `reduceMany` of `ADD` and `SQUARE_ADD` over the activations, then
/// `InverseStdDeviation`, which clamps a negative estimate to 0). Each statistic reads its
/// own cast of `x`, which the compiler's reduction reads through (no FP32 copy is stored).
fn moments_one_sweep(
    e: &mut Emitter<'_, '_>,
    x: NodeId,
    axes: Vec<usize>,
) -> Result<(NodeId, NodeId), IrError> {
    let mean_in = e.cast("input_f32", x, DType::F32)?;
    let mean = mean_over(e, "mean", mean_in, &axes)?;
    let power_in = e.cast("power_input_f32", x, DType::F32)?;
    let sq = e.node("square", Op::Mul, &[power_in, power_in])?;
    let power = mean_over(e, "power", sq, &axes)?;
    let m2 = e.node("mean_squared", Op::Mul, &[mean, mean])?;
    let d = e.node("power_minus_mean_squared", Op::Sub, &[power, m2])?;
    let zero = e.splat("zero", DType::F32, Shape::scalar(), 0.0)?;
    let var = e.node("var", Op::Max, &[d, zero])?;
    Ok((mean, var))
}

/// `1 / sqrt(var + epsilon)` in FP32.
fn inv_std(e: &mut Emitter<'_, '_>, var: NodeId, epsilon: f64) -> Result<NodeId, IrError> {
    let eps = e.splat("epsilon", DType::F32, Shape::scalar(), epsilon)?;
    let ve = e.node("var_plus_epsilon", Op::Add, &[var, eps])?;
    let sd = e.node("std", Op::Sqrt, &[ve])?;
    let one = e.splat("one", DType::F32, Shape::scalar(), 1.0)?;
    e.node("inv_std", Op::Div, &[one, sd])
}

/// `(x − mean) · inv` in `x`'s type, the statistics rounded to it: `(whitened, inv in x's
/// type)`.
fn whiten(
    e: &mut Emitter<'_, '_>,
    x: NodeId,
    mean: NodeId,
    inv: NodeId,
) -> Result<(NodeId, NodeId), IrError> {
    let t = e.ty(x).dtype;
    let mean_t = e.cast("mean_cast", mean, t)?;
    let inv_t = e.cast("inv_std_cast", inv, t)?;
    let xc = e.node("centred", Op::Sub, &[x, mean_t])?;
    Ok((e.node("whitened", Op::Mul, &[xc, inv_t])?, inv_t))
}

/// `xn · scale + shift` with the per-channel parameters broadcast over `[N, C, ...]`; the
/// last node takes the composite's name. Returns it with the broadcast scale.
fn affine(
    e: &mut Emitter<'_, '_>,
    xn: NodeId,
    scale: NodeId,
    shift: NodeId,
) -> Result<(NodeId, NodeId), IrError> {
    let dims = e.ty(xn).shape.dims().to_vec();
    let mut per_channel = vec![1; dims.len()];
    per_channel[1] = dims[1];
    let t = e.ty(xn).dtype;
    let g = e.cast("scale_cast", scale, t)?;
    let g = e.reshape("scale_b", g, per_channel.clone())?;
    let b = e.cast("shift_cast", shift, t)?;
    let b = e.reshape("shift_b", b, per_channel)?;
    let scaled = e.node("scaled", Op::Mul, &[xn, g])?;
    Ok((e.last(Op::Add, &[scaled, b])?, g))
}

/// `running ← (1 − momentum) · running + momentum · stat` (FP32, rounded to the variable).
fn update_running(
    e: &mut Emitter<'_, '_>,
    what: &str,
    running: NodeId,
    stat: NodeId,
    momentum: f64,
) -> Result<(), IrError> {
    let c = e.ty(running).shape.dims().to_vec();
    let dtype = e.ty(running).dtype;
    let stat = e.reshape(&format!("{what}_per_channel"), stat, c)?;
    let old = e.cast(&format!("{what}_f32"), running, DType::F32)?;
    let keep = e.splat(
        &format!("{what}_keep"),
        DType::F32,
        Shape::scalar(),
        1.0 - momentum,
    )?;
    let take = e.splat(
        &format!("{what}_momentum"),
        DType::F32,
        Shape::scalar(),
        momentum,
    )?;
    let a = e.node(&format!("{what}_decayed"), Op::Mul, &[old, keep])?;
    let b = e.node(&format!("{what}_new_part"), Op::Mul, &[stat, take])?;
    let new = e.node(&format!("{what}_updated"), Op::Add, &[a, b])?;
    let new = e.cast(&format!("{what}_updated_cast"), new, dtype)?;
    e.node(&format!("{what}_assign"), Op::Assign, &[running, new])?;
    Ok(())
}

/// `BatchNorm`'s primitives; `inputs` are `(x, scale, shift, running_mean, running_var)`.
/// Returns the output node and, with batch statistics, the nodes its own backward pass
/// reads ([`super::grad`]).
pub(crate) fn batch_norm(
    e: &mut Emitter<'_, '_>,
    inputs: &[NodeId],
    epsilon: f64,
    momentum: f64,
    statistics: Statistics,
) -> Result<(NodeId, Option<NormParts>), IrError> {
    let (x, scale, shift, rm, rv) = (inputs[0], inputs[1], inputs[2], inputs[3], inputs[4]);
    for (i, what) in [(3, "running_mean"), (4, "running_var")] {
        if !matches!(e.rw.dst.node(inputs[i]).op, Op::Variable { .. }) {
            return Err(IrError::Invalid {
                node: e.name.clone(),
                op: "BatchNorm",
                message: format!(
                    "input {i} ({what}) must be a Variable node, the state the running \
                     statistics are kept in; it is '{}'",
                    e.rw.dst.node(inputs[i]).name
                ),
            });
        }
    }
    let dims = e.ty(x).shape.dims().to_vec();
    let mut per_channel = vec![1; dims.len()];
    per_channel[1] = dims[1];
    let (mean, var) = match statistics {
        Statistics::Batch { stable } => {
            let axes: Vec<usize> = (0..dims.len()).filter(|&a| a != 1).collect();
            let (mean, var) = if stable {
                let xs = e.cast("input_f32", x, DType::F32)?;
                moments(e, xs, axes)?
            } else {
                moments_one_sweep(e, x, axes)?
            };
            let n: usize = dims
                .iter()
                .enumerate()
                .filter(|&(a, _)| a != 1)
                .map(|(_, &d)| d)
                .product();
            update_running(e, "running_mean", rm, mean, momentum)?;
            let unbiased = if n > 1 {
                let k = e.splat(
                    "bessel",
                    DType::F32,
                    Shape::scalar(),
                    n as f64 / (n - 1) as f64,
                )?;
                e.node("var_unbiased", Op::Mul, &[var, k])?
            } else {
                var
            };
            update_running(e, "running_var", rv, unbiased, momentum)?;
            (mean, var)
        }
        Statistics::Running => {
            let m = e.cast("running_mean_f32", rm, DType::F32)?;
            let m = e.reshape("running_mean_b", m, per_channel.clone())?;
            let v = e.cast("running_var_f32", rv, DType::F32)?;
            let v = e.reshape("running_var_b", v, per_channel)?;
            (m, v)
        }
    };
    let inv = inv_std(e, var, epsilon)?;
    let (whitened, inv_std) = whiten(e, x, mean, inv)?;
    let (out, scale_b) = affine(e, whitened, scale, shift)?;
    let parts = matches!(statistics, Statistics::Batch { .. }).then_some(NormParts {
        x,
        scale,
        shift,
        whitened,
        scale_b,
        inv_std,
        groups: None,
    });
    Ok((out, parts))
}

/// `GroupNorm`'s primitives; `inputs` are `(x, scale, shift)`; `stable` as for a batch
/// norm's batch statistics ([`Statistics::Batch`]).
///
/// The statistics are sums per image and channel over the spatial dimensions (FP32,
/// `[N, C, 1…]`), summed again over each group's channels (`[N, G, 1]`) and divided by the
/// group's element count: in one sweep by default (`E[x]` and `E[x²]`, `var = max(E[x²] −
/// E[x]², 0)`: PopLibs' `groupNormStatistics` with its default `stableAlgo = false`, which
/// PopART passes from `enableStableNorm`), or in two passes with `stable` (the mean, then the
/// mean of the squared FP32 deviations from it). The activations are never reshaped: every
/// full-size op reads them as `[N, C, …]` with per-image, per-channel statistics broadcast
/// over the spatial dimensions, so a channel-grouped feature map (the compiler's
/// convolution layout) is read in its own order — where a reshape to `[N, G, C/G · H · W]`
/// needed a row-major copy of every activation and of its gradient. Only the `[N, C]`
/// statistics are reshaped to `[N, G, C/G]` and back.
pub(crate) fn group_norm(
    e: &mut Emitter<'_, '_>,
    inputs: &[NodeId],
    groups: usize,
    epsilon: f64,
    stable: bool,
) -> Result<(NodeId, NormParts), IrError> {
    let (x, scale, shift) = (inputs[0], inputs[1], inputs[2]);
    let dims = e.ty(x).shape.dims().to_vec();
    let per_group = dims[1..].iter().product::<usize>() / groups;
    let count = e.splat("count", DType::F32, Shape::scalar(), per_group as f64)?;
    // The mean over each image's group of `v` (FP32, `[N, C, …]`): `[N, G, 1]`.
    let group_mean = |e: &mut Emitter<'_, '_>, what: &str, v: NodeId| {
        let sum = group_sums(&mut |p, op, i| e.node(p, op, i), what, v, &dims, groups)?;
        e.node(what, Op::Div, &[sum, count])
    };
    // A `[N, G, 1]` statistic for every channel of its group: `[N, C, 1…]`.
    let per_channel = |e: &mut Emitter<'_, '_>, what: &str, v: NodeId| {
        let name = format!("{what}_per_channel");
        let add = &mut |p: &str, op, i: &[NodeId]| e.node(p, op, i);
        groups::per_channel(add, (what, &name), v, &dims, groups)
    };
    let (mean, var_g) = if stable {
        let xs = e.cast("input_f32", x, DType::F32)?;
        let mean_g = group_mean(e, "mean", xs)?;
        let mean = per_channel(e, "mean", mean_g)?;
        let d = e.node("deviation", Op::Sub, &[xs, mean])?;
        let sq = e.node("squared_deviation", Op::Mul, &[d, d])?;
        (mean, group_mean(e, "var", sq)?)
    } else {
        // Each statistic reads its own cast of `x`, which the compiler's reduction reads
        // through (no FP32 copy is stored), as a batch norm's single sweep does.
        let mean_in = e.cast("input_f32", x, DType::F32)?;
        let mean_g = group_mean(e, "mean", mean_in)?;
        let power_in = e.cast("power_input_f32", x, DType::F32)?;
        let sq = e.node("square", Op::Mul, &[power_in, power_in])?;
        let power_g = group_mean(e, "power", sq)?;
        let m2 = e.node("mean_squared", Op::Mul, &[mean_g, mean_g])?;
        let d = e.node("power_minus_mean_squared", Op::Sub, &[power_g, m2])?;
        let zero = e.splat("zero", DType::F32, Shape::scalar(), 0.0)?;
        let var_g = e.node("var", Op::Max, &[d, zero])?;
        (per_channel(e, "mean", mean_g)?, var_g)
    };
    let inv_g = inv_std(e, var_g, epsilon)?;
    let inv = per_channel(e, "inv_std", inv_g)?;
    let (whitened, inv_std) = whiten(e, x, mean, inv)?;
    let (out, scale_b) = affine(e, whitened, scale, shift)?;
    let parts = NormParts {
        x,
        scale,
        shift,
        whitened,
        scale_b,
        inv_std,
        groups: Some(groups),
    };
    Ok((out, parts))
}

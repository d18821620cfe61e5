//! Batch norm's and group norm's own backward pass, as PopLibs builds it (PopART's `BatchNormGradOpx` calls
//! `popnn::bn::batchNormParamGradients` and `popnn::bn::batchNormGradients`,
//! `lib/popnn/BatchNorm.cpp`, which call `poplin::normParamGradients`, `normGradients` and
//! `normStatisticsGradients`, `lib/poplin/Norms.cpp`). Autodiff uses it in place of the
//! vector-Jacobian products of the primitives a training batch norm is decomposed into
//! ([`super::decompose`]), which would read the FP32 deviations and the centred
//! activations and sum five reductions; this rule reads only the whitened activations, the
//! broadcast scale and `inv_std`, and sums four.
//!
//! With `x̂` the whitened activations, `γ` the scale, `dy` the gradient of the output and the
//! means taken over every dimension but the channels (`M` elements per channel):
//!
//! | PopLibs | here |
//! |---|---|
//! | `normParamGradients`: `Re{x̂ · dy}`, `Re{dy}` | `scale_grad = Σ x̂·dy`, `shift_grad = Σ dy` |
//! | `normGradients`: `dy · Br{γ}` | `whitened_grad = dy · γ` |
//! | `normStatisticsGradients`: `varDelta = −Re{x̂ · dx̂}/M`, `meanDelta = −Re{dx̂}/M` | `var_delta = mean(x̂ · dx̂)`, `mean_delta = mean(dx̂)` |
//! | `(dx̂ + Br{meanDelta} + x̂ · Br{varDelta}) · Br{invStdDev}` | `grad = ((dx̂ − mean_delta) − x̂ · var_delta) · inv_std` |
//!
//! (`dx = inv_std · (dx̂ − mean(dx̂) − x̂ · mean(x̂ · dx̂))`, the gradient of the normalisation
//! with the biased variance it uses.)
//!
//! A group norm takes the same pass (PopART's `GroupNormGradOpx` calls
//! `popnn::gn::groupNormParamGradients` and `groupNormGradients`, `lib/popnn/GroupNorm.cpp`,
//! which call the same `poplin` norm functions) with its statistics' means taken per image
//! over each group's channels ([`NormParts::groups`]): the FP32 sums per image and channel
//! over the spatial dimensions, summed over the group's channels, so the activations are
//! read in their own channel grouping; the scale and shift gradients are the batch norm's. Every full-size tensor is in the activation type; each
//! reduction accumulates in FP32 and rounds once to the activation type, as PopLibs reduces
//! with float partials into the gradient's type. One difference, our choice: PopLibs folds
//! `1/M` into the two statistics reductions as `M^(−3/4)` and the rest into a `scaledAddTo`
//! (to keep half intermediates in range); here each statistic is a `ReduceMean`, which
//! applies `1/M` to the FP32 sum before its one rounding, so its intermediates are in range
//! too.

use super::groups::{group_sums, per_channel};
use crate::builder::GraphBuilder;
use crate::dtype::{DType, Shape};
use crate::error::IrError;
use crate::graph::NodeId;
use crate::op::Op;

/// The nodes of one decomposed training batch norm or group norm that its backward pass
/// reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NormParts {
    /// The input `[N, C, ...]`.
    pub x: NodeId,
    /// The scale `[C]`.
    pub scale: NodeId,
    /// The shift `[C]`.
    pub shift: NodeId,
    /// The whitened activations `(x − mean) · inv_std` (the activation type).
    pub whitened: NodeId,
    /// The scale in the activation type, `[1, C, 1, ...]`.
    pub scale_b: NodeId,
    /// `inv_std` in the activation type, `[1, C, 1, ...]` (group norm: `[N, C, 1, ...]`).
    pub inv_std: NodeId,
    /// `None` for a batch norm (statistics over every dimension but the channels); the
    /// groups of a group norm (statistics per image over each group's channels).
    pub groups: Option<usize>,
}

/// The gradient contributions `(input, gradient)` of the inputs of `p` for which `wanted`
/// holds, given the gradient `dy` of the batch norm's output; nodes are added in the
/// builder's scope (`bwd/<batch norm>/`).
pub(crate) fn norm(
    b: &mut GraphBuilder,
    p: &NormParts,
    dy: NodeId,
    wanted: impl Fn(NodeId) -> bool,
) -> Result<Vec<(NodeId, NodeId)>, IrError> {
    let rank = b.graph().node(p.x).ty.shape.rank();
    let axes: Vec<usize> = (0..rank).filter(|&a| a != 1).collect();
    let sum = |keep_dims| Op::ReduceSum {
        axes: axes.clone(),
        keep_dims,
    };
    let mean = || Op::ReduceMean {
        axes: axes.clone(),
        keep_dims: true,
    };
    let mut out = Vec::new();
    // A per-channel sum `[C]` in the activation type, as the gradient of `param`.
    let param_grad = |b: &mut GraphBuilder, name: &str, g: NodeId, param: NodeId| {
        let ty = b.graph().node(param).ty.clone();
        let g = if ty.dtype == b.graph().node(g).ty.dtype {
            g
        } else {
            b.op(&format!("{name}_cast"), Op::Cast { dtype: ty.dtype }, &[g])?
        };
        if b.graph().node(g).ty.shape == ty.shape {
            Ok(g)
        } else {
            let op = Op::Reshape {
                shape: Shape(ty.shape.dims().to_vec()),
            };
            b.op(&format!("{name}_reshape"), op, &[g])
        }
    };
    if wanted(p.scale) {
        let prod = b.op("dy_whitened", Op::Mul, &[p.whitened, dy])?;
        let g = b.op("scale_grad", sum(false), &[prod])?;
        out.push((p.scale, param_grad(b, "scale_grad", g, p.scale)?));
    }
    if wanted(p.shift) {
        let g = b.op("shift_grad", sum(false), &[dy])?;
        out.push((p.shift, param_grad(b, "shift_grad", g, p.shift)?));
    }
    if wanted(p.x) {
        let dxh = b.op("whitened_grad", Op::Mul, &[dy, p.scale_b])?;
        let prod = b.op("whitened_grad_whitened", Op::Mul, &[p.whitened, dxh])?;
        let (var_delta, mean_delta) = match p.groups {
            None => (
                b.op("var_delta", mean(), &[prod])?,
                b.op("mean_delta", mean(), &[dxh])?,
            ),
            Some(groups) => (
                group_mean(b, "var_delta", prod, groups)?,
                group_mean(b, "mean_delta", dxh, groups)?,
            ),
        };
        let centred = b.op("mean_grads", Op::Sub, &[dxh, mean_delta])?;
        let var_grads = b.op("var_grads", Op::Mul, &[p.whitened, var_delta])?;
        let g = b.op("add_grads", Op::Sub, &[centred, var_grads])?;
        out.push((p.x, b.op("grad", Op::Mul, &[g, p.inv_std])?));
    }
    Ok(out)
}

/// Group norm's mean of `v` (`[N, C, …]`, the activation type) over each image's group of
/// channels, for every channel (`[N, C, 1…]`): the FP32 sums per image and channel over the
/// spatial dimensions (the reduction reads `v` through its cast), summed over the group's
/// channels, divided by the group's element count and rounded once to the activation type,
/// as the batch norm's `ReduceMean`s accumulate in FP32 and round once.
fn group_mean(
    b: &mut GraphBuilder,
    name: &str,
    v: NodeId,
    groups: usize,
) -> Result<NodeId, IrError> {
    let ty = b.graph().node(v).ty.clone();
    let dims = ty.shape.dims().to_vec();
    let count = (dims[1..].iter().product::<usize>() / groups) as f64;
    let v32 = b.op(&format!("{name}_f32"), Op::Cast { dtype: DType::F32 }, &[v])?;
    let sum = group_sums(&mut |p, op, i| b.op(p, op, i), name, v32, &dims, groups)?;
    let k = b.scalar(&format!("{name}_count"), DType::F32, count)?;
    let mean = b.op(&format!("{name}_mean"), Op::Div, &[sum, k])?;
    let mean = b.op(
        &format!("{name}_cast"),
        Op::Cast { dtype: ty.dtype },
        &[mean],
    )?;
    per_channel(
        &mut |p, op, i| b.op(p, op, i),
        (name, name),
        mean,
        &dims,
        groups,
    )
}

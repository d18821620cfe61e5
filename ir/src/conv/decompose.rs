//! The convolution family's composite ops rewritten into primitives (called by
//! [`crate::decompose`]): `AvgPool2d`, `GlobalAvgPool`, `Flatten`.

use super::Pool;
use crate::dtype::Shape;
use crate::error::IrError;
use crate::graph::NodeId;
use crate::op::{Literal, Op};
use crate::rewrite::Emitter;

/// `AvgPool2d`'s primitives: a depthwise `Conv2d` of `x` with a window of ones (the window
/// sums, accumulated as every convolution is), times `1 / kernel size` (`count_include_pad`)
/// or a constant map of `1 / (input elements in the window)` per output position. Both
/// factors are constants of `x`'s type, so the division is exact only where the factor is (a
/// 2×2 window's 0.25).
pub(crate) fn avg_pool(e: &mut Emitter<'_, '_>, x: NodeId, op: &Op) -> Result<NodeId, IrError> {
    let Op::AvgPool2d {
        count_include_pad, ..
    } = op
    else {
        unreachable_op(e, op)?
    };
    let pool = match Pool::of(op) {
        Some(Ok(p)) => p,
        _ => return unreachable_op(e, op),
    };
    let t = e.ty(x).clone();
    let g = pool
        .geometry(t.shape.dims())
        .map_err(|f| IrError::Invalid {
            node: e.name.clone(),
            op: "AvgPool2d",
            message: format!("{f:?}"),
        })?;
    let window = e.splat("window", t.dtype, Shape(vec![g.c, 1, g.kh, g.kw]), 1.0)?;
    let conv = Op::Conv2d {
        stride: pool.stride.to_vec(),
        padding: pool.padding.to_vec(),
        dilation: vec![],
        groups: g.c,
    };
    let sum = e.node("window_sum", conv, &[x, window])?;
    let factor = if *count_include_pad {
        e.splat(
            "inv_count",
            t.dtype,
            Shape::scalar(),
            1.0 / (g.kh * g.kw) as f64,
        )?
    } else {
        let mut values = Vec::with_capacity(g.oh * g.ow);
        for oh in 0..g.oh {
            for ow in 0..g.ow {
                let rows = (0..g.kh).filter(|&k| g.input_row(oh, k).is_some()).count();
                let cols = (0..g.kw).filter(|&k| g.input_col(ow, k).is_some()).count();
                values.push(1.0 / (rows * cols).max(1) as f64);
            }
        }
        let op = Op::Constant {
            dtype: t.dtype,
            shape: Shape(vec![1, 1, g.oh, g.ow]),
            value: Literal::Values(values),
        };
        e.node("inv_count", op, &[])?
    };
    e.last(Op::Mul, &[sum, factor])
}

/// `GlobalAvgPool`'s primitive: `ReduceMean` over the spatial axes.
pub(crate) fn global_avg_pool(e: &mut Emitter<'_, '_>, x: NodeId) -> Result<NodeId, IrError> {
    e.last(
        Op::ReduceMean {
            axes: vec![2, 3],
            keep_dims: false,
        },
        &[x],
    )
}

/// `Flatten`'s primitive: a `Reshape`.
pub(crate) fn flatten(e: &mut Emitter<'_, '_>, x: NodeId, axis: usize) -> Result<NodeId, IrError> {
    let dims = e.ty(x).shape.dims().to_vec();
    let axis = axis.min(dims.len());
    let shape = Shape(vec![
        dims[..axis].iter().product(),
        dims[axis..].iter().product(),
    ]);
    e.last(Op::Reshape { shape }, &[x])
}

fn unreachable_op<T>(e: &Emitter<'_, '_>, op: &Op) -> Result<T, IrError> {
    Err(IrError::Invalid {
        node: e.name.clone(),
        op: op.name(),
        message: "its attributes were not checked by inference".into(),
    })
}

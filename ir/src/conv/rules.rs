//! The convolution family's gradient rules: a convolution's gradients are convolutions (its
//! input gradient `Conv2dInputGrad(dy, w)`, its weight gradient `Conv2dWeightGrad(x, dy)`), as
//! PopLibs plans them; a max pool's is `MaxPool2dGrad(x, dy)`.

use crate::builder::GraphBuilder;
use crate::error::IrError;
use crate::graph::{Node, NodeId};
use crate::op::Op;

/// The gradient rules of the family's primitives (`None` for other ops): a convolution's
/// input gradient is `Conv2dInputGrad(dy, w)` and its weight gradient `Conv2dWeightGrad(x,
/// dy)`; a max pool's is `MaxPool2dGrad(x, dy)`.
pub(crate) fn vjp(
    b: &mut GraphBuilder,
    n: &Node,
    dy: NodeId,
    wanted: &[bool],
) -> Option<Result<Vec<Option<NodeId>>, IrError>> {
    let input = |i: usize| n.inputs[i];
    let result = match &n.op {
        Op::Conv2d {
            stride,
            padding,
            dilation,
            groups,
        } => (|| {
            let x = b.graph().node(input(0)).ty.shape.dims().to_vec();
            let w = b.graph().node(input(1)).ty.shape.dims().to_vec();
            let dx = if wanted[0] {
                let op = Op::Conv2dInputGrad {
                    stride: stride.clone(),
                    padding: padding.clone(),
                    dilation: dilation.clone(),
                    groups: *groups,
                    input_size: x[2..].to_vec(),
                };
                Some(b.op("input_grad", op, &[dy, input(1)])?)
            } else {
                None
            };
            let dw = if wanted[1] {
                let op = Op::Conv2dWeightGrad {
                    stride: stride.clone(),
                    padding: padding.clone(),
                    dilation: dilation.clone(),
                    groups: *groups,
                    kernel_size: w[2..].to_vec(),
                };
                Some(b.op("weight_grad", op, &[input(0), dy])?)
            } else {
                None
            };
            Ok(vec![dx, dw])
        })(),
        Op::MaxPool2d {
            kernel,
            stride,
            padding,
        } => (|| {
            let op = Op::MaxPool2dGrad {
                kernel: kernel.clone(),
                stride: stride.clone(),
                padding: padding.clone(),
            };
            Ok(vec![Some(b.op("pool_grad", op, &[input(0), dy])?)])
        })(),
        Op::Conv2dInputGrad { .. } | Op::Conv2dWeightGrad { .. } | Op::MaxPool2dGrad { .. } => {
            Err(IrError::Invalid {
                node: n.name.clone(),
                op: n.op.name(),
                message: format!(
                    "no gradient is defined for {} (second-order gradients are not supported)",
                    n.op.name()
                ),
            })
        }
        _ => return None,
    };
    Some(result)
}

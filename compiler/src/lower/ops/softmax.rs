//! `Softmax`, `LogSoftmax` and `SparseSoftmaxCrossEntropy` along the last axis, with the
//! row operations of [`crate::lower::kit::rows`] (rows of [`SPLIT_ROW`] elements or more
//! split over tiles and workers by [`crate::lower::kit::split_rows`]); along another axis,
//! a permutation to the last axis, the row op, and the permutation back.

use crate::codelets::Codelet;
use crate::error::CompileError;
use crate::executable::{TensorId, TensorKind};
use crate::lower::core::Lowerer;
use crate::lower::kit::permute;
use crate::lower::kit::reduction::{self as reduce, Kind, Spec};
use crate::lower::kit::rows::{row_op, RowOp};
use crate::lower::kit::split_rows::{SplitRows, SPLIT_ROW};
use ipusim_ir::{DType, LossReduction, NodeId, Op, Shape};

/// Lowers `Softmax`, `LogSoftmax` and `SparseSoftmaxCrossEntropy`.
pub(crate) fn lower(lw: &mut Lowerer, id: NodeId) -> Result<(), CompileError> {
    let node = lw.graph().node(id);
    let name = node.name.clone();
    let x = node.inputs[0];
    let xt = lw.graph().node(x).ty.clone();
    let dims = xt.shape.dims().to_vec();
    match node.op.clone() {
        Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            let log = matches!(node.op, Op::LogSoftmax { .. });
            let input = permute::materialized(lw, x)?;
            let last = dims.len() - 1;
            let out = if axis == last {
                softmax_rows(lw, id, &name, input, &xt.shape, log)
            } else {
                // Move the axis last, softmax the rows, move it back.
                let mut perm: Vec<usize> = (0..dims.len()).filter(|&d| d != axis).collect();
                perm.push(axis);
                let moved = crate::lower::kit::permute::permute(
                    lw,
                    id,
                    &format!("{name}/to_last"),
                    input,
                    &xt.shape,
                    &perm,
                );
                let moved_shape = Shape::new(perm.iter().map(|&p| dims[p]).collect::<Vec<_>>());
                let sm = softmax_rows(lw, id, &format!("{name}/rows"), moved, &moved_shape, log);
                let mut inverse = vec![0; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inverse[p] = i;
                }
                crate::lower::kit::permute::permute(lw, id, &name, sm, &moved_shape, &inverse)
            };
            lw.set_value(id, out);
            Ok(())
        }
        Op::SparseSoftmaxCrossEntropy { reduction } => {
            let logits = permute::materialized(lw, x)?;
            let labels = permute::materialized(lw, node.inputs[1])?;
            let (n, c) = (dims[0] as u64, dims[1] as u64);
            let rows_name = format!("{name}/rows");
            let split = SplitRows {
                node: id,
                name: &rows_name,
                input: logits,
                p: n,
                r: c,
            };
            let losses = if c >= SPLIT_ROW {
                split.cross_entropy(lw, labels)
            } else {
                row_op(
                    lw,
                    RowOp {
                        node: id,
                        name: &rows_name,
                        input: logits,
                        per_row: vec![(labels, "labels")],
                        p: n,
                        r: c,
                        codelet: Codelet::SoftmaxCrossEntropy { dtype: xt.dtype },
                        out: (
                            TensorKind::Partials,
                            DType::F32,
                            Shape::new([n as usize]),
                            1,
                        ),
                    },
                )
            };
            let scale = match reduction {
                LossReduction::Mean => 1.0 / n.max(1) as f64,
                LossReduction::Sum => 1.0,
            };
            let spec = Spec {
                node: id,
                name: name.clone(),
                p: 1,
                outer: 1,
                r: n,
                q: 1,
                kind: Kind::Sum,
                input: DType::F32,
                acc: DType::F32,
                output: node.ty.dtype,
                scale,
                shape: node.ty.shape.clone(),
            };
            let out = reduce::reduce(lw, &spec, losses);
            lw.set_value(id, out);
            Ok(())
        }
        _ => Err(lw.unsupported(id, "not a row op")),
    }
}

/// Softmax (or log-softmax) of the rows of `input` (last axis of `shape`).
fn softmax_rows(
    lw: &mut Lowerer,
    id: NodeId,
    name: &str,
    input: TensorId,
    shape: &Shape,
    log: bool,
) -> TensorId {
    let r = *shape.dims().last().unwrap_or(&1) as u64;
    let p = shape.num_elements() as u64 / r.max(1);
    if r >= SPLIT_ROW {
        let split = SplitRows {
            node: id,
            name,
            input,
            p,
            r,
        };
        return split.softmax(lw, log, shape);
    }
    let dtype = lw.tensor(input).dtype;
    row_op(
        lw,
        RowOp {
            node: id,
            name,
            input,
            per_row: Vec::new(),
            p,
            r,
            codelet: Codelet::Softmax { log, dtype },
            out: (TensorKind::Activation, dtype, shape.clone(), r),
        },
    )
}

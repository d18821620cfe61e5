//! Shape and dtype inference for every op.
//!
//! [`infer`] computes the output type of an op from its input types, or says exactly what is
//! wrong as an [`InferFault`]. The graph turns a fault into an [`crate::IrError`] that names
//! the node, the op and the types involved. Binary ops demand equal dtypes: as in TensorFlow,
//! mixing f16 and f32 needs an explicit `Cast`.

use crate::dtype::{DType, Shape, TensorType};
use crate::op::Op;

pub use crate::fault::InferFault;

type R = Result<TensorType, InferFault>;

/// The output type of `op` applied to inputs of types `inputs`.
pub fn infer(op: &Op, inputs: &[&TensorType]) -> R {
    if !op.arity().accepts(inputs.len()) {
        return Err(InferFault::Arity {
            expected: op.arity().to_string(),
            found: inputs.len(),
        });
    }
    if let Some(family) = crate::conv::infer(op, inputs) {
        return family;
    }
    if let Some(family) = crate::norm::infer(op, inputs) {
        return family;
    }
    match op {
        Op::Input { dtype, shape, .. }
        | Op::Variable { dtype, shape, .. }
        | Op::Constant { dtype, shape, .. } => {
            let (what, values) = match op {
                Op::Constant {
                    value: crate::op::Literal::Values(v),
                    ..
                } => ("constant", Some(v)),
                Op::Variable {
                    init: crate::op::Init::Values(v),
                    ..
                } => ("variable", Some(v)),
                _ => ("", None),
            };
            if let Some(v) = values {
                if v.len() != shape.num_elements() {
                    return Err(InferFault::Invalid(format!(
                        "{what} has {} values but shape {} holds {}",
                        v.len(),
                        shape,
                        shape.num_elements()
                    )));
                }
            }
            check_shape_size(shape)?;
            Ok(TensorType::new(*dtype, shape.clone()))
        }
        Op::MatMul => matmul(inputs[0], inputs[1]),
        Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Max | Op::Min => {
            numeric(inputs, 0)?;
            let shape = broadcast2(inputs, 0, 1)?;
            Ok(TensorType::new(inputs[0].dtype, shape))
        }
        Op::ScaledAdd { .. } => {
            float(inputs, 0)?;
            same_dtype(inputs, 0, 1)?;
            if !inputs[1].shape.broadcasts_to(&inputs[0].shape) {
                return Err(InferFault::ShapeMismatch {
                    a: 0,
                    b: 1,
                    why: format!(
                        "{} does not broadcast to {}",
                        inputs[1].shape, inputs[0].shape
                    ),
                });
            }
            Ok(inputs[0].clone())
        }
        Op::Equal | Op::Greater | Op::Less => {
            same_dtype(inputs, 0, 1)?;
            let shape = broadcast2(inputs, 0, 1)?;
            Ok(TensorType::new(DType::Bool, shape))
        }
        Op::Select => {
            if inputs[0].dtype != DType::Bool {
                return Err(InferFault::BadDType {
                    input: 0,
                    expected: "bool",
                });
            }
            same_dtype(inputs, 1, 2)?;
            let ab = broadcast2(inputs, 1, 2)?;
            let shape =
                inputs[0]
                    .shape
                    .broadcast(&ab)
                    .ok_or_else(|| InferFault::ShapeMismatch {
                        a: 0,
                        b: 1,
                        why: format!(
                            "condition {} does not broadcast with {}",
                            inputs[0].shape, ab
                        ),
                    })?;
            Ok(TensorType::new(inputs[1].dtype, shape))
        }
        Op::Neg | Op::Abs | Op::Relu => {
            numeric(inputs, 0)?;
            if inputs[0].dtype == DType::U8 && matches!(op, Op::Neg) {
                return Err(InferFault::BadDType {
                    input: 0,
                    expected: "a signed type (f16, f32, i32)",
                });
            }
            Ok(inputs[0].clone())
        }
        Op::Clip { min, max } => {
            float(inputs, 0)?;
            if min.is_nan() || max.is_nan() || min > max {
                return Err(InferFault::Invalid(format!(
                    "needs min <= max, got min {min} and max {max}"
                )));
            }
            Ok(inputs[0].clone())
        }
        Op::Exp | Op::Log | Op::Sqrt | Op::Sigmoid | Op::Tanh | Op::Gelu => {
            float(inputs, 0)?;
            Ok(inputs[0].clone())
        }
        Op::ActivationGrad { .. } => {
            float(inputs, 0)?;
            same_dtype(inputs, 0, 1)?;
            same_shape(inputs, 0, 1)?;
            Ok(inputs[0].clone())
        }
        Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            float(inputs, 0)?;
            check_axis(*axis, &inputs[0].shape)?;
            Ok(inputs[0].clone())
        }
        Op::SparseSoftmaxCrossEntropy { .. } => {
            float(inputs, 0)?;
            let logits = &inputs[0].shape;
            let labels = &inputs[1].shape;
            if inputs[1].dtype != DType::I32 {
                return Err(InferFault::BadDType {
                    input: 1,
                    expected: "i32 labels",
                });
            }
            if logits.rank() != 2 || labels.rank() != 1 || labels.dims()[0] != logits.dims()[0] {
                return Err(InferFault::ShapeMismatch {
                    a: 0,
                    b: 1,
                    why: format!(
                        "expected logits [n, c] and labels [n], got {logits} and {labels}"
                    ),
                });
            }
            if logits.dims()[1] == 0 {
                return Err(InferFault::Invalid("logits need at least one class".into()));
            }
            Ok(TensorType::new(inputs[0].dtype, Shape::scalar()))
        }
        Op::OneHot { depth, dtype } => {
            if inputs[0].dtype != DType::I32 {
                return Err(InferFault::BadDType {
                    input: 0,
                    expected: "i32 indices",
                });
            }
            let mut dims = inputs[0].shape.dims().to_vec();
            dims.push(*depth);
            let shape = Shape(dims);
            check_shape_size(&shape)?;
            Ok(TensorType::new(*dtype, shape))
        }
        Op::ReduceSum { axes, keep_dims } | Op::ReduceMean { axes, keep_dims } => {
            numeric(inputs, 0)?;
            if matches!(op, Op::ReduceMean { .. }) {
                float(inputs, 0)?;
            }
            reduce(inputs[0], axes, *keep_dims)
        }
        Op::ReduceMax { axes, keep_dims } => {
            numeric(inputs, 0)?;
            reduce(inputs[0], axes, *keep_dims)
        }
        Op::ArgMax { axis } => {
            numeric(inputs, 0)?;
            check_axis(*axis, &inputs[0].shape)?;
            let mut t = reduce(inputs[0], &[*axis], false)?;
            t.dtype = DType::I32;
            Ok(t)
        }
        Op::Reshape { shape } => {
            if shape.num_elements() != inputs[0].num_elements() {
                // A product past usize::MAX saturates: say so rather than print the bound.
                let count = |s: &Shape| match s.num_elements() {
                    usize::MAX => "more than 2^64 - 1".to_string(),
                    n => n.to_string(),
                };
                return Err(InferFault::Invalid(format!(
                    "cannot reshape {} ({} elements) to {} ({} elements)",
                    inputs[0].shape,
                    count(&inputs[0].shape),
                    shape,
                    count(shape)
                )));
            }
            Ok(TensorType::new(inputs[0].dtype, shape.clone()))
        }
        Op::Transpose { perm } => {
            let rank = inputs[0].shape.rank();
            let mut seen = vec![false; rank];
            if perm.len() != rank
                || perm
                    .iter()
                    .any(|&p| p >= rank || std::mem::replace(&mut seen[p], true))
            {
                return Err(InferFault::Invalid(format!(
                    "perm {perm:?} is not a permutation of the {rank} dimensions of {}",
                    inputs[0].shape
                )));
            }
            let dims = perm.iter().map(|&p| inputs[0].shape.dims()[p]).collect();
            Ok(TensorType::new(inputs[0].dtype, Shape(dims)))
        }
        Op::Broadcast { shape } => {
            if !inputs[0].shape.broadcasts_to(shape) {
                return Err(InferFault::Invalid(format!(
                    "{} does not broadcast to {}",
                    inputs[0].shape, shape
                )));
            }
            check_shape_size(shape)?;
            Ok(TensorType::new(inputs[0].dtype, shape.clone()))
        }
        Op::Slice { begin, end } => {
            let dims = inputs[0].shape.dims();
            if begin.len() != dims.len() || end.len() != dims.len() {
                return Err(InferFault::Invalid(format!(
                    "slice begin {begin:?} and end {end:?} need one entry per dimension of {}",
                    inputs[0].shape
                )));
            }
            let mut out = Vec::with_capacity(dims.len());
            for i in 0..dims.len() {
                if begin[i] > end[i] || end[i] > dims[i] {
                    return Err(InferFault::Invalid(format!(
                        "slice [{}, {}) is out of range for dimension {i} of size {}",
                        begin[i], end[i], dims[i]
                    )));
                }
                out.push(end[i] - begin[i]);
            }
            Ok(TensorType::new(inputs[0].dtype, Shape(out)))
        }
        Op::Pad { before, after } => {
            let dims = inputs[0].shape.dims();
            if before.len() != dims.len() || after.len() != dims.len() {
                return Err(InferFault::Invalid(format!(
                    "pad before {before:?} and after {after:?} need one entry per dimension of {}",
                    inputs[0].shape
                )));
            }
            let out: Vec<usize> = (0..dims.len())
                .map(|i| dims[i].saturating_add(before[i]).saturating_add(after[i]))
                .collect();
            let shape = Shape(out);
            check_shape_size(&shape)?;
            Ok(TensorType::new(inputs[0].dtype, shape))
        }
        Op::Concat { axis } => {
            let first = inputs[0];
            check_axis(*axis, &first.shape)?;
            let mut dims = first.shape.dims().to_vec();
            for (i, t) in inputs.iter().enumerate().skip(1) {
                same_dtype(inputs, 0, i)?;
                let ok = t.shape.rank() == first.shape.rank()
                    && (0..dims.len())
                        .all(|d| d == *axis || t.shape.dims()[d] == first.shape.dims()[d]);
                if !ok {
                    return Err(InferFault::ShapeMismatch {
                        a: 0,
                        b: i,
                        why: format!(
                            "{} and {} differ outside the concatenation axis {axis}",
                            first.shape, t.shape
                        ),
                    });
                }
                dims[*axis] = dims[*axis].saturating_add(t.shape.dims()[*axis]);
            }
            Ok(TensorType::new(first.dtype, Shape(dims)))
        }
        Op::Cast { dtype } => Ok(TensorType::new(*dtype, inputs[0].shape.clone())),
        Op::ReplicatedReduceScatter { replicas } => {
            float(inputs, 0)?;
            let k = shard_len(inputs[0].num_elements(), *replicas)?;
            Ok(TensorType::new(inputs[0].dtype, Shape(vec![k])))
        }
        Op::ReplicatedAllGather { replicas, shape } => {
            float(inputs, 0)?;
            check_shape_size(shape)?;
            let k = shard_len(shape.num_elements(), *replicas)?;
            if inputs[0].shape.dims() != [k] {
                return Err(InferFault::Invalid(format!(
                    "gathering {shape} over {replicas} replicas needs a shard of shape [{k}], \
                     got {}",
                    inputs[0].shape
                )));
            }
            Ok(TensorType::new(inputs[0].dtype, shape.clone()))
        }
        // Handled by their families above (`crate::conv`, `crate::norm`).
        Op::Conv2d { .. }
        | Op::Conv2dInputGrad { .. }
        | Op::Conv2dWeightGrad { .. }
        | Op::MaxPool2d { .. }
        | Op::MaxPool2dGrad { .. }
        | Op::AvgPool2d { .. }
        | Op::GlobalAvgPool
        | Op::Flatten { .. }
        | Op::BatchNorm { .. }
        | Op::GroupNorm { .. } => Err(InferFault::Invalid(format!(
            "{} is inferred by its family",
            op.name()
        ))),
        Op::Outfeed { .. } => Ok(inputs[0].clone()),
        Op::Assign => {
            same_dtype(inputs, 0, 1)?;
            same_shape(inputs, 0, 1)?;
            Ok(inputs[0].clone())
        }
    }
}

/// Elements per replica of a tensor of `n` elements sharded over `replicas` replicas.
fn shard_len(n: usize, replicas: u32) -> Result<usize, InferFault> {
    if replicas == 0 {
        return Err(InferFault::Invalid(
            "replicas must be at least 1, got 0".into(),
        ));
    }
    Ok(n.div_ceil(replicas as usize))
}

/// Largest tensor we accept: 2^40 elements is far beyond any chip, and keeps byte counts
/// (elements x 4) well inside `usize` on 64-bit hosts.
pub const MAX_ELEMENTS: usize = 1 << 40;

fn check_shape_size(shape: &Shape) -> Result<(), InferFault> {
    let mut n: u128 = 1;
    for &d in shape.dims() {
        n = n.saturating_mul(d as u128);
    }
    if n > MAX_ELEMENTS as u128 {
        return Err(InferFault::Invalid(format!(
            "shape {shape} has more than 2^40 elements"
        )));
    }
    Ok(())
}

fn check_axis(axis: usize, shape: &Shape) -> Result<(), InferFault> {
    if axis >= shape.rank() {
        return Err(InferFault::Invalid(format!(
            "axis {axis} is out of range for shape {shape} of rank {}",
            shape.rank()
        )));
    }
    Ok(())
}

fn numeric(inputs: &[&TensorType], i: usize) -> Result<(), InferFault> {
    if inputs[i].dtype == DType::Bool {
        return Err(InferFault::BadDType {
            input: i,
            expected: "a numeric type (f16, f32, i32, u8)",
        });
    }
    Ok(())
}

fn float(inputs: &[&TensorType], i: usize) -> Result<(), InferFault> {
    if !inputs[i].dtype.is_float() {
        return Err(InferFault::BadDType {
            input: i,
            expected: "a floating-point type (f16, f32)",
        });
    }
    Ok(())
}

fn same_dtype(inputs: &[&TensorType], a: usize, b: usize) -> Result<(), InferFault> {
    if inputs[a].dtype != inputs[b].dtype {
        return Err(InferFault::DTypeMismatch { a, b });
    }
    Ok(())
}

fn same_shape(inputs: &[&TensorType], a: usize, b: usize) -> Result<(), InferFault> {
    if inputs[a].shape != inputs[b].shape {
        return Err(InferFault::ShapeMismatch {
            a,
            b,
            why: format!("{} and {} must be equal", inputs[a].shape, inputs[b].shape),
        });
    }
    Ok(())
}

fn broadcast2(inputs: &[&TensorType], a: usize, b: usize) -> Result<Shape, InferFault> {
    same_dtype(inputs, a, b)?;
    inputs[a]
        .shape
        .broadcast(&inputs[b].shape)
        .ok_or_else(|| InferFault::ShapeMismatch {
            a,
            b,
            why: format!(
                "{} and {} do not broadcast",
                inputs[a].shape, inputs[b].shape
            ),
        })
}

fn matmul(a: &TensorType, b: &TensorType) -> R {
    if !a.dtype.is_float() {
        return Err(InferFault::BadDType {
            input: 0,
            expected: "a floating-point type (f16, f32)",
        });
    }
    if a.dtype != b.dtype {
        return Err(InferFault::DTypeMismatch { a: 0, b: 1 });
    }
    let (ad, bd) = (a.shape.dims(), b.shape.dims());
    if ad.len() < 2 || bd.len() < 2 {
        return Err(InferFault::ShapeMismatch {
            a: 0,
            b: 1,
            why: format!(
                "matmul needs inputs of rank >= 2, got {} and {}",
                a.shape, b.shape
            ),
        });
    }
    let (m, k) = (ad[ad.len() - 2], ad[ad.len() - 1]);
    let (k2, n) = (bd[bd.len() - 2], bd[bd.len() - 1]);
    if k != k2 {
        return Err(InferFault::ShapeMismatch {
            a: 0,
            b: 1,
            why: format!(
                "inner dimensions differ: {} has k = {k}, {} has k = {k2}",
                a.shape, b.shape
            ),
        });
    }
    let batch_a = Shape(ad[..ad.len() - 2].to_vec());
    let batch_b = Shape(bd[..bd.len() - 2].to_vec());
    let batch = batch_a
        .broadcast(&batch_b)
        .ok_or_else(|| InferFault::ShapeMismatch {
            a: 0,
            b: 1,
            why: format!("batch dimensions {batch_a} and {batch_b} do not broadcast"),
        })?;
    let mut dims = batch.0;
    dims.push(m);
    dims.push(n);
    Ok(TensorType::new(a.dtype, Shape(dims)))
}

fn reduce(t: &TensorType, axes: &[usize], keep_dims: bool) -> R {
    let rank = t.shape.rank();
    let mut seen = vec![false; rank];
    for &a in axes {
        if a >= rank {
            return Err(InferFault::Invalid(format!(
                "axis {a} is out of range for shape {} of rank {rank}",
                t.shape
            )));
        }
        if std::mem::replace(&mut seen[a], true) {
            return Err(InferFault::Invalid(format!("axis {a} is listed twice")));
        }
    }
    let dims = t
        .shape
        .dims()
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| match (seen[i], keep_dims) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    Ok(TensorType::new(t.dtype, Shape(dims)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(d: DType, s: &[usize]) -> TensorType {
        TensorType::new(d, s.to_vec())
    }

    #[test]
    fn binary_ops_demand_equal_dtypes() {
        let a = t(DType::F16, &[4]);
        let b = t(DType::F32, &[4]);
        assert_eq!(
            infer(&Op::Add, &[&a, &b]),
            Err(InferFault::DTypeMismatch { a: 0, b: 1 })
        );
    }

    /// A reshape to a shape of more than 2^64 - 1 elements says so, not the saturated count.
    #[test]
    fn a_reshape_past_2_64_elements_names_no_wrapped_count() {
        let x = t(DType::F32, &[2, 3, 8, 8]);
        let shape = Shape::new([1usize << 63, 2, 384]);
        assert_eq!(
            infer(&Op::Reshape { shape }, &[&x]),
            Err(InferFault::Invalid(
                "cannot reshape [2, 3, 8, 8] (384 elements) to [9223372036854775808, 2, 384] \
                 (more than 2^64 - 1 elements)"
                    .into()
            ))
        );
    }

    #[test]
    fn matmul_shapes() {
        let a = t(DType::F32, &[2, 3, 4]);
        let b = t(DType::F32, &[4, 5]);
        assert_eq!(
            infer(&Op::MatMul, &[&a, &b]).map(|x| x.shape),
            Ok(Shape::new([2, 3, 5]))
        );
        let c = t(DType::F32, &[5, 5]);
        assert!(matches!(
            infer(&Op::MatMul, &[&a, &c]),
            Err(InferFault::ShapeMismatch { .. })
        ));
    }

    #[test]
    fn reductions_and_argmax() {
        let x = t(DType::F32, &[8, 10]);
        let r = infer(
            &Op::ReduceSum {
                axes: vec![1],
                keep_dims: true,
            },
            &[&x],
        );
        assert_eq!(r.map(|x| x.shape), Ok(Shape::new([8, 1])));
        assert_eq!(
            infer(&Op::ArgMax { axis: 1 }, &[&x]),
            Ok(t(DType::I32, &[8]))
        );
    }

    #[test]
    fn loss_needs_i32_labels() {
        let logits = t(DType::F32, &[8, 10]);
        let labels = t(DType::I32, &[8]);
        let op = Op::SparseSoftmaxCrossEntropy {
            reduction: Default::default(),
        };
        assert_eq!(infer(&op, &[&logits, &labels]), Ok(t(DType::F32, &[])));
        let bad = t(DType::F32, &[8]);
        assert!(matches!(
            infer(&op, &[&logits, &bad]),
            Err(InferFault::BadDType { input: 1, .. })
        ));
    }

    #[test]
    fn slices_pads_transposes() {
        let x = t(DType::F16, &[4, 6]);
        let s = Op::Slice {
            begin: vec![1, 2],
            end: vec![3, 6],
        };
        assert_eq!(infer(&s, &[&x]).map(|x| x.shape), Ok(Shape::new([2, 4])));
        let p = Op::Pad {
            before: vec![1, 0],
            after: vec![0, 2],
        };
        assert_eq!(infer(&p, &[&x]).map(|x| x.shape), Ok(Shape::new([5, 8])));
        let tr = Op::Transpose { perm: vec![1, 1] };
        assert!(infer(&tr, &[&x]).is_err());
    }
}

//! Evaluation of one op on tensor values: dispatch on the storage of the inputs to the
//! float kernels ([`super::float`]), the integer kernels below, data movement
//! ([`super::layout`]) and casts.
//!
//! Integer semantics (our choices, documented because the IPU's integer vertices are not
//! part of the numerics model): `I32`/`U8` arithmetic wraps; integer division truncates
//! toward zero, and division by zero gives 0 and raises DIV0; integer sums wrap.
//!
//! Casts: f16↔f32, float→i32 (truncation toward zero; NaN and out-of-range values saturate
//! and raise INV), i32/u8→float, all by the numerics core (f32→f16 and i32→f16 round with
//! the run's rounding). float→u8 truncates like float→i32, then saturates to `0..=255`
//! raising INV when out of range; i32→u8 keeps the low byte (like TensorFlow's cast);
//! anything→Bool is `x != 0` (NaN is true); Bool→numeric is 0 or 1. In exact mode float
//! tensors stay `f64` through float casts.

use super::real::{Cx, Elem, Real};
use super::{conv, float};
use crate::numerics::int::IntArith;
use crate::numerics::{cast, ArithOp, CompareOp, FpSts, NumericsError};
use crate::tensor::{Data, Tensor};
use half::f16;
use ipusim_ir::conv::{Pool, Window};
use ipusim_ir::{DType, LossReduction, Op, TensorType};

/// Why an op could not be evaluated.
#[derive(Debug)]
pub(crate) enum EvalFault {
    /// A numerics kernel rejected its arguments.
    Numerics(NumericsError),
    /// The inputs' storage does not fit the op (only reachable for graphs that bypassed
    /// inference).
    Storage(String),
}

impl From<NumericsError> for EvalFault {
    fn from(e: NumericsError) -> EvalFault {
        EvalFault::Numerics(e)
    }
}

type R<T> = Result<T, EvalFault>;

/// The elements of `t` as `T`.
fn arg<T: Elem>(t: &Tensor) -> R<&[T]> {
    T::get(t.data()).ok_or_else(|| {
        EvalFault::Storage(format!(
            "unexpected {} storage for a {} tensor",
            t.data().kind(),
            t.dtype()
        ))
    })
}

/// Calls `$f::<T>(args)` for the element type `T` stored in `$data`.
macro_rules! by_elem {
    ($data:expr, $f:ident($($arg:expr),*)) => {
        match $data {
            Data::F16(_) => $f::<f16>($($arg),*),
            Data::F32(_) => $f::<f32>($($arg),*),
            Data::F64(_) => $f::<f64>($($arg),*),
            Data::I32(_) => $f::<i32>($($arg),*),
            Data::U8(_) => $f::<u8>($($arg),*),
            Data::Bool(_) => $f::<bool>($($arg),*),
        }
    };
}

/// The output data of `op` on `inputs` (output type `ty`). Sources are not evaluated here.
pub(crate) fn eval(op: &Op, inputs: &[&Tensor], ty: &TensorType, cx: &mut Cx) -> R<Data> {
    match op {
        Op::Reshape { .. } | Op::Outfeed { .. } => Ok(inputs[0].data().clone()),
        // One replica: the flattened input, or the shard reshaped. The interpreter runs one
        // program instance; the replicas' values meet only in a replicated simulation.
        Op::ReplicatedReduceScatter { replicas: 1 }
        | Op::ReplicatedAllGather { replicas: 1, .. } => Ok(inputs[0].data().clone()),
        Op::ReplicatedReduceScatter { replicas } | Op::ReplicatedAllGather { replicas, .. } => {
            Err(EvalFault::Storage(format!(
                "{} over {replicas} replicas needs the other replicas' values: the reference \
                 interpreter runs one replica (run the program in the simulator)",
                op.name()
            )))
        }
        Op::Assign => Ok(inputs[1].data().clone()),
        Op::Transpose { .. }
        | Op::Broadcast { .. }
        | Op::Slice { .. }
        | Op::Pad { .. }
        | Op::Concat { .. } => by_elem!(inputs[0].data(), movement(op, inputs, ty)),
        Op::Select => by_elem!(inputs[1].data(), select(inputs, ty)),
        Op::Cast { dtype } => cast_data(inputs[0], *dtype, cx),
        Op::OneHot { depth, dtype } => one_hot(arg::<i32>(inputs[0])?, *depth, *dtype, cx),
        _ => match inputs[0].data() {
            Data::F16(_) => float_op::<f16>(op, inputs, ty, cx),
            Data::F32(_) => float_op::<f32>(op, inputs, ty, cx),
            Data::F64(_) => float_op::<f64>(op, inputs, ty, cx),
            Data::I32(_) => int_op::<i32>(op, inputs, ty, cx),
            Data::U8(_) => int_op::<u8>(op, inputs, ty, cx),
            Data::Bool(_) => bool_op(op, inputs, ty),
        },
    }
}

/// A convolution whose geometry does not check (only reachable for graphs that bypassed
/// inference).
fn geometry_fault(op: &Op, what: &str) -> EvalFault {
    EvalFault::Storage(format!("{}: {what} do not fit its operands", op.name()))
}

fn unsupported(op: &Op, t: &Tensor) -> EvalFault {
    EvalFault::Storage(format!(
        "{} is not defined on {} tensors",
        op.name(),
        t.dtype()
    ))
}

/// The numerics core's arithmetic op of an IR op.
fn arithmetic(op: &Op) -> Option<ArithOp> {
    ArithOp::try_from(op.binary()?).ok()
}

/// The numerics core's comparison of an IR op.
fn comparison(op: &Op) -> Option<CompareOp> {
    ArithOp::try_from(op.binary()?).err()
}

fn float_op<E: Real>(op: &Op, inputs: &[&Tensor], ty: &TensorType, cx: &mut Cx) -> R<Data> {
    let x =
        |i: usize| -> R<(&[E], &[usize])> { Ok((arg::<E>(inputs[i])?, inputs[i].shape().dims())) };
    let out = ty.shape.dims();
    if let Some(o) = arithmetic(op) {
        return Ok(E::wrap(float::binary(o, x(0)?, x(1)?, out, cx)));
    }
    if let Some(o) = comparison(op) {
        return Ok(Data::Bool(float::compare(o, x(0)?, x(1)?, out, cx)));
    }
    if let Some(o) = op.unary() {
        return Ok(E::wrap(float::unary(o, x(0)?.0, cx)));
    }
    match op {
        Op::MatMul => Ok(E::wrap(float::matmul(x(0)?, x(1)?, out, cx)?)),
        Op::ScaledAdd { scale } => Ok(E::wrap(float::scaled_add(x(0)?, x(1)?, *scale, cx))),
        Op::ActivationGrad { activation } => Ok(E::wrap(float::activation_grad(
            *activation,
            x(0)?.0,
            x(1)?.0,
            cx,
        ))),
        Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            let (v, dims) = x(0)?;
            let log = matches!(op, Op::LogSoftmax { .. });
            Ok(E::wrap(float::softmax(v, dims, *axis, log, cx)))
        }
        Op::SparseSoftmaxCrossEntropy { reduction } => {
            let (v, dims) = x(0)?;
            let labels = arg::<i32>(inputs[1])?;
            let mean = *reduction == LossReduction::Mean;
            Ok(E::wrap(vec![float::sparse_softmax_cross_entropy(
                v, dims, labels, mean, cx,
            )]))
        }
        Op::ReduceSum { axes, .. } | Op::ReduceMean { axes, .. } => {
            let (v, dims) = x(0)?;
            let mean = matches!(op, Op::ReduceMean { .. });
            Ok(E::wrap(float::reduce_sum(v, dims, axes, mean, cx)))
        }
        Op::ReduceMax { axes, .. } => {
            let (v, dims) = x(0)?;
            Ok(E::wrap(float::reduce_max(v, dims, axes, cx)))
        }
        Op::ArgMax { axis } => {
            let (v, dims) = x(0)?;
            Ok(Data::I32(float::argmax(v, dims, *axis)))
        }
        Op::Conv2d { .. } | Op::Conv2dInputGrad { .. } | Op::Conv2dWeightGrad { .. } => {
            let window = match Window::of(op) {
                Some(Ok(w)) => w,
                _ => return Err(geometry_fault(op, "its attributes")),
            };
            let (a, b) = (x(0)?, x(1)?);
            let (xd, wd) = match op {
                Op::Conv2d { .. } => (a.1, b.1),
                Op::Conv2dInputGrad { .. } => (out, b.1),
                _ => (a.1, out),
            };
            let g = window
                .geometry(xd, wd)
                .map_err(|f| geometry_fault(op, &format!("{f:?}")))?;
            Ok(E::wrap(match op {
                Op::Conv2d { .. } => conv::conv2d(a.0, b.0, &g, cx)?,
                Op::Conv2dInputGrad { .. } => conv::conv2d_input_grad(a.0, b.0, &g, cx)?,
                _ => conv::conv2d_weight_grad(a.0, b.0, &g, cx)?,
            }))
        }
        Op::MaxPool2d { .. } | Op::MaxPool2dGrad { .. } => {
            let (v, dims) = x(0)?;
            let g = match Pool::of(op).map(|p| p.and_then(|p| p.geometry(dims))) {
                Some(Ok(g)) => g,
                _ => return Err(geometry_fault(op, "its window")),
            };
            Ok(E::wrap(match op {
                Op::MaxPool2d { .. } => conv::max_pool(v, &g, cx),
                _ => conv::max_pool_grad(v, x(1)?.0, &g, cx),
            }))
        }
        _ => Err(unsupported(op, inputs[0])),
    }
}

fn int_op<T: IntArith + Elem>(
    op: &Op,
    inputs: &[&Tensor],
    ty: &TensorType,
    cx: &mut Cx,
) -> R<Data> {
    use super::layout::{broadcast, ReducePlan};
    let out = ty.shape.dims();
    let x = |i: usize| -> R<Vec<T>> {
        Ok(broadcast(
            arg::<T>(inputs[i])?,
            inputs[i].shape().dims(),
            out,
        ))
    };
    let reduce = |axes: &[usize], f: &mut dyn FnMut(T, T) -> T| -> R<Vec<T>> {
        let v = arg::<T>(inputs[0])?;
        let plan = ReducePlan::new(inputs[0].shape().dims(), axes);
        Ok(plan
            .outer
            .iter()
            .map(|&o| {
                let mut it = plan.inner.iter().map(|&r| v[o + r]);
                let first = it.next().unwrap_or_default();
                it.fold(first, &mut *f)
            })
            .collect())
    };
    if let Some(o) = arithmetic(op) {
        let (a, b) = (x(0)?, x(1)?);
        return Ok(T::wrap(
            a.into_iter()
                .zip(b)
                .map(|(a, b)| keep(cx, T::arith(o, a, b)))
                .collect(),
        ));
    }
    if let Some(o) = comparison(op) {
        let (a, b) = (x(0)?, x(1)?);
        return Ok(Data::Bool(
            a.into_iter()
                .zip(b)
                .map(|(a, b)| T::compare(o, a, b))
                .collect(),
        ));
    }
    let data = match op {
        Op::Neg => T::wrap(arg::<T>(inputs[0])?.iter().map(|&a| T::neg(a)).collect()),
        Op::Abs => T::wrap(arg::<T>(inputs[0])?.iter().map(|&a| T::abs(a)).collect()),
        Op::Relu => T::wrap(arg::<T>(inputs[0])?.iter().map(|&a| T::relu(a)).collect()),
        Op::ReduceSum { axes, .. } => T::wrap(reduce(axes, &mut |a, b| {
            keep(cx, T::arith(ArithOp::Add, a, b))
        })?),
        Op::ReduceMax { axes, .. } => T::wrap(reduce(axes, &mut |a, b| a.max(b))?),
        Op::ArgMax { axis } => {
            let v = arg::<T>(inputs[0])?;
            let plan = ReducePlan::new(inputs[0].shape().dims(), &[*axis]);
            Data::I32(
                plan.outer
                    .iter()
                    .map(|&o| {
                        let mut best = 0usize;
                        for (i, &r) in plan.inner.iter().enumerate() {
                            if v[o + r] > v[o + plan.inner[best]] {
                                best = i;
                            }
                        }
                        best as i32
                    })
                    .collect(),
            )
        }
        _ => return Err(unsupported(op, inputs[0])),
    };
    Ok(data)
}

fn bool_op(op: &Op, inputs: &[&Tensor], ty: &TensorType) -> R<Data> {
    let out = ty.shape.dims();
    match op {
        Op::Equal => {
            let a =
                super::layout::broadcast(arg::<bool>(inputs[0])?, inputs[0].shape().dims(), out);
            let b =
                super::layout::broadcast(arg::<bool>(inputs[1])?, inputs[1].shape().dims(), out);
            Ok(Data::Bool(
                a.into_iter().zip(b).map(|(a, b)| a == b).collect(),
            ))
        }
        _ => Err(unsupported(op, inputs[0])),
    }
}

fn movement<T: Elem>(op: &Op, inputs: &[&Tensor], ty: &TensorType) -> R<Data> {
    use super::layout;
    let x = arg::<T>(inputs[0])?;
    let dims = inputs[0].shape().dims();
    let v = match op {
        Op::Transpose { perm } => layout::transpose(x, dims, perm),
        Op::Broadcast { shape } => layout::broadcast(x, dims, shape.dims()),
        Op::Slice { begin, end } => layout::slice(x, dims, begin, end),
        Op::Pad { before, after } => layout::pad(x, dims, before, after, T::default()),
        Op::Concat { axis } => {
            let parts = inputs
                .iter()
                .map(|t| Ok((arg::<T>(t)?, t.shape().dims())))
                .collect::<R<Vec<_>>>()?;
            layout::concat(&parts, *axis, T::default())
        }
        _ => return Err(unsupported(op, inputs[0])),
    };
    debug_assert_eq!(v.len(), ty.num_elements());
    Ok(T::wrap(v))
}

fn select<T: Elem>(inputs: &[&Tensor], ty: &TensorType) -> R<Data> {
    use super::layout::broadcast;
    let out = ty.shape.dims();
    let c = broadcast(arg::<bool>(inputs[0])?, inputs[0].shape().dims(), out);
    let a = broadcast(arg::<T>(inputs[1])?, inputs[1].shape().dims(), out);
    let b = broadcast(arg::<T>(inputs[2])?, inputs[2].shape().dims(), out);
    Ok(T::wrap(
        c.into_iter()
            .zip(a.into_iter().zip(b))
            .map(|(c, (a, b))| if c { a } else { b })
            .collect(),
    ))
}

fn one_hot(indices: &[i32], depth: usize, dtype: DType, cx: &mut Cx) -> R<Data> {
    let mut hot = vec![false; indices.len() * depth];
    for (row, &i) in indices.iter().enumerate() {
        if let Some(i) = usize::try_from(i).ok().filter(|&i| i < depth) {
            hot[row * depth + i] = true;
        }
    }
    let t = Tensor::bool([hot.len()], hot).map_err(|e| EvalFault::Storage(e.to_string()))?;
    cast_data(&t, dtype, cx)
}

/// Float values as `dtype` (`f64` storage stays `f64` for float targets: exact mode).
fn cast_data(t: &Tensor, to: DType, cx: &mut Cx) -> R<Data> {
    let data = match (t.data(), to) {
        (d, to) if d.holds(to) => d.clone(),
        // Exact mode: every float tensor is f64.
        (_, DType::F16 | DType::F32) if cx.exact => Data::F64(t.to_f64_vec()),
        (Data::F16(v), DType::F32) => {
            Data::F32(v.iter().map(|&x| keep(cx, cast::f16_to_f32(x))).collect())
        }
        (Data::F32(v), DType::F16) => Data::F16(v.iter().map(|&x| f16::narrow(x, cx)).collect()),
        (Data::F16(v), DType::I32 | DType::U8) => {
            ints(v.iter().map(|&x| cast::f16_to_i32(x)), to, cx)
        }
        (Data::F32(v), DType::I32 | DType::U8) => {
            ints(v.iter().map(|&x| cast::f32_to_i32(x)), to, cx)
        }
        (Data::F64(v), DType::I32 | DType::U8) => {
            ints(v.iter().map(|&x| cast::f64_to_i32(x)), to, cx)
        }
        (Data::I32(v), DType::U8) => Data::U8(v.iter().map(|&x| x as u8).collect()),
        (Data::U8(v), DType::I32) => Data::I32(v.iter().map(|&x| i32::from(x)).collect()),
        (Data::Bool(v), DType::I32) => Data::I32(v.iter().map(|&x| i32::from(x)).collect()),
        (Data::Bool(v), DType::U8) => Data::U8(v.iter().map(|&x| u8::from(x)).collect()),
        (_, DType::Bool) => Data::Bool(t.to_f64_vec().into_iter().map(|x| x != 0.0).collect()),
        (Data::I32(v), DType::F16) => Data::F16(
            v.iter()
                .map(|&x| {
                    let r = cast::i32_to_f16(x, &mut cx.rounding());
                    keep(cx, r)
                })
                .collect(),
        ),
        (Data::I32(v), DType::F32) => {
            Data::F32(v.iter().map(|&x| keep(cx, cast::i32_to_f32(x))).collect())
        }
        (Data::U8(v), DType::F16) => {
            Data::F16(v.iter().map(|&x| keep(cx, cast::u8_to_f16(x))).collect())
        }
        (Data::U8(v), DType::F32) => {
            Data::F32(v.iter().map(|&x| keep(cx, cast::u8_to_f32(x))).collect())
        }
        (Data::Bool(v), DType::F16) => Data::F16(
            v.iter()
                .map(|&x| if x { f16::ONE } else { f16::ZERO })
                .collect(),
        ),
        (Data::Bool(v), DType::F32) => {
            Data::F32(v.iter().map(|&x| f32::from(u8::from(x))).collect())
        }
        (d, to) => {
            return Err(EvalFault::Storage(format!(
                "no cast from {} storage to {to}",
                d.kind()
            )))
        }
    };
    Ok(data)
}

fn keep<T>(cx: &mut Cx, (v, f): (T, FpSts)) -> T {
    cx.raise(f);
    v
}

/// Truncated values as I32, or saturated to `0..=255` (INV when out of range) as U8.
fn ints(v: impl Iterator<Item = (i32, FpSts)>, to: DType, cx: &mut Cx) -> Data {
    let v: Vec<i32> = v.map(|r| keep(cx, r)).collect();
    if to == DType::I32 {
        return Data::I32(v);
    }
    Data::U8(
        v.into_iter()
            .map(|x| keep(cx, cast::i32_to_u8_saturating(x)))
            .collect(),
    )
}

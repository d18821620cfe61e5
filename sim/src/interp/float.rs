//! The float kernels of the reference interpreter, written once over [`Real`] and
//! instantiated for FP16, FP32 and exact `f64`.
//!
//! # Evaluation order (the contract the tiled engine is compared against)
//!
//! - Element-wise ops visit output elements in row-major order; each FP16 result is
//!   rounded once (and, under stochastic rounding, takes one draw, in that order).
//! - **Reductions** (`ReduceSum`, `ReduceMean`): for each output element (row-major over the
//!   kept dimensions) the reduced elements are added sequentially in row-major order over
//!   the reduced dimensions, in the accumulation type (FP32 for FP16 data: PopLibs reduces
//!   half data with float partials), starting from the first element; the mean multiplies
//!   the sum by `s` = `1/n` rounded to f32 (PopLibs' `reduceMean` is a reduction with a
//!   scale), and one rounding of the exact product gives the output. `ReduceMax` is the
//!   IEEE 754-2019 `maximum` (NaN propagates, `max(-0, +0) = +0`), in the data type.
//! - **MatMul**: every batch matrix (row-major over the broadcast batch dimensions) is one
//!   call of the numerics core's AMP kernel: FP16 inputs with FP32 partials in chunks of
//!   `AMP_CHUNK` = 16 along `k`, sequential across chunks, then each result rounded once to
//!   FP16; FP32 inputs with FP32 partials in the same order (see `numerics::kernels::amp`).
//! - **Softmax / LogSoftmax / SparseSoftmaxCrossEntropy** are computed in the accumulation
//!   type, as TF-IPU computes their internals in FP32 (seed 000, "Unstable operations"):
//!   per row along the axis, `m` = the maximum (sequential), `e_i = exp(x_i - m)`,
//!   `s = sum e_i` sequentially; softmax `e_i / s`, log-softmax `(x_i - m) - log s`; the
//!   loss of row `r` is `log s - (x_label - m)`, the rows' losses are summed sequentially
//!   and the mean multiplies by `1/n` rounded to f32; one rounding to the output type at the
//!   end. Softmax and log-softmax round each output **once** from the FP32 internals (the
//!   exact quotient `e_i / s`, the exact difference `(x_i - m) - log s`). A label outside
//!   `[0, classes)` contributes a loss of 0 (PopLibs encodes labels one-hot, and an
//!   out-of-range label has an all-zero row), without a flag.
//! - **ScaledAdd** `a + s*b`: `s` is `scale` rounded to f32 and the exact value is rounded
//!   once (PopLibs' `scaledAdd` with a float scale; the compiler's `ScaledAdd` codelet).
//! - **ActivationGrad** `dy * f'(x)` is fused: computed in `f64` from `x` and `dy` and rounded
//!   once (ReLU's is exact: `dy` where `x > 0`, else 0); the numerics core's
//!   `activation_grad`, shared with the engine.

use super::layout::{broadcast_offsets, broadcast_strides, view_offsets, ReducePlan};
use super::real::{Cx, Real};
use crate::numerics::kernels::amp::MatMulShape;
use crate::numerics::{ArithOp, CompareOp, NumericsError, UnaryOp};
use ipusim_ir::Activation;

/// Offsets of an operand of shape `from` broadcast to `to` (identity when equal).
fn offsets(from: &[usize], to: &[usize]) -> Vec<usize> {
    if from == to {
        (0..to.iter().product()).collect()
    } else {
        broadcast_offsets(from, to)
    }
}

/// Element-wise `op` with broadcasting to `out`.
pub(crate) fn binary<E: Real>(
    op: ArithOp,
    (a, sa): (&[E], &[usize]),
    (b, sb): (&[E], &[usize]),
    out: &[usize],
    cx: &mut Cx,
) -> Vec<E> {
    let (ia, ib) = (offsets(sa, out), offsets(sb, out));
    ia.iter()
        .zip(&ib)
        .map(|(&i, &j)| E::binary(op, a[i], b[j], cx))
        .collect()
}

/// Element-wise comparison with broadcasting to `out`.
pub(crate) fn compare<E: Real>(
    op: CompareOp,
    (a, sa): (&[E], &[usize]),
    (b, sb): (&[E], &[usize]),
    out: &[usize],
    cx: &mut Cx,
) -> Vec<bool> {
    let (ia, ib) = (offsets(sa, out), offsets(sb, out));
    ia.iter()
        .zip(&ib)
        .map(|(&i, &j)| E::compare(op, a[i], b[j], cx))
        .collect()
}

/// Element-wise unary `op`.
pub(crate) fn unary<E: Real>(op: UnaryOp, x: &[E], cx: &mut Cx) -> Vec<E> {
    x.iter().map(|&v| E::unary(op, v, cx)).collect()
}

/// `a + scale * b` with `b` broadcast to `a`'s shape.
pub(crate) fn scaled_add<E: Real>(
    (a, sa): (&[E], &[usize]),
    (b, sb): (&[E], &[usize]),
    scale: f64,
    cx: &mut Cx,
) -> Vec<E> {
    let ib = offsets(sb, sa);
    a.iter()
        .zip(&ib)
        .map(|(&x, &j)| E::scaled_add(x, scale, b[j], cx))
        .collect()
}

/// The fused activation gradient `dy * f'(x)`.
pub(crate) fn activation_grad<E: Real>(act: Activation, x: &[E], dy: &[E], cx: &mut Cx) -> Vec<E> {
    x.iter()
        .zip(dy)
        .map(|(&x, &g)| E::activation_grad(act, x, g, cx))
        .collect()
}

/// Sum (or mean, when `mean`) over `axes` of `x` with shape `dims`.
pub(crate) fn reduce_sum<E: Real>(
    x: &[E],
    dims: &[usize],
    axes: &[usize],
    mean: bool,
    cx: &mut Cx,
) -> Vec<E> {
    let plan = ReducePlan::new(dims, axes);
    let count = plan.inner.len();
    plan.outer
        .iter()
        .map(|&o| {
            let mut acc = <E::Acc as Real>::ZERO;
            for (i, &r) in plan.inner.iter().enumerate() {
                let v = x[o + r].widen();
                acc = if i == 0 {
                    v
                } else {
                    <E::Acc as Real>::binary(ArithOp::Add, acc, v, cx)
                };
            }
            if mean {
                E::scale_narrow(acc, 1.0 / count as f64, cx)
            } else {
                E::narrow(acc, cx)
            }
        })
        .collect()
}

/// Maximum over `axes` of `x` with shape `dims`, in the data type.
pub(crate) fn reduce_max<E: Real>(x: &[E], dims: &[usize], axes: &[usize], cx: &mut Cx) -> Vec<E> {
    let plan = ReducePlan::new(dims, axes);
    plan.outer
        .iter()
        .map(|&o| {
            let Some(&first) = plan.inner.first() else {
                // The maximum of nothing, as TensorFlow defines it.
                return E::round(f64::NEG_INFINITY, cx);
            };
            let mut m = x[o + first];
            for &r in &plan.inner[1..] {
                m = E::binary(ArithOp::Max, m, x[o + r], cx);
            }
            m
        })
        .collect()
}

/// Index of the first maximum along `axis` (NaN never compares greater).
pub(crate) fn argmax<E: Real>(x: &[E], dims: &[usize], axis: usize) -> Vec<i32> {
    let plan = ReducePlan::new(dims, &[axis]);
    plan.outer
        .iter()
        .map(|&o| {
            let mut best = 0usize;
            for (i, &r) in plan.inner.iter().enumerate().skip(1) {
                if x[o + r] > x[o + plan.inner[best]] {
                    best = i;
                }
            }
            best as i32
        })
        .collect()
}

/// Per row along `axis`: the maximum `m`, `e_i = exp(x_i - m)` and `s = sum e_i`, in the
/// accumulation type. Calls `f(offsets, x_minus_m, e, s)` for each row.
fn softmax_rows<E: Real>(
    x: &[E],
    dims: &[usize],
    axis: usize,
    cx: &mut Cx,
    mut f: impl FnMut(&[usize], &[E::Acc], &[E::Acc], E::Acc, &mut Cx),
) {
    let plan = ReducePlan::new(dims, &[axis]);
    let mut offs = Vec::with_capacity(plan.inner.len());
    if plan.inner.is_empty() {
        return;
    }
    for &o in &plan.outer {
        offs.clear();
        offs.extend(plan.inner.iter().map(|&r| o + r));
        let (centred, e, s) = softmax_row::<E>(offs.iter().map(|&i| x[i].widen()), cx);
        f(&offs, &centred, &e, s, cx);
    }
}

/// `(x - m, exp(x - m), sum exp(x - m))` of one row, in the accumulation type `A`.
fn softmax_row<E: Real>(
    row: impl Iterator<Item = E::Acc>,
    cx: &mut Cx,
) -> (Vec<E::Acc>, Vec<E::Acc>, E::Acc) {
    type A<E> = <E as Real>::Acc;
    let row: Vec<E::Acc> = row.collect();
    let mut m = row[0];
    for &v in &row[1..] {
        m = A::<E>::binary(ArithOp::Max, m, v, cx);
    }
    let centred: Vec<E::Acc> = row
        .iter()
        .map(|&v| A::<E>::binary(ArithOp::Sub, v, m, cx))
        .collect();
    let e: Vec<E::Acc> = centred
        .iter()
        .map(|&v| A::<E>::unary(UnaryOp::Exp, v, cx))
        .collect();
    let mut s = e[0];
    for &v in &e[1..] {
        s = A::<E>::binary(ArithOp::Add, s, v, cx);
    }
    (centred, e, s)
}

/// Softmax (or log-softmax when `log`) along `axis`.
pub(crate) fn softmax<E: Real>(
    x: &[E],
    dims: &[usize],
    axis: usize,
    log: bool,
    cx: &mut Cx,
) -> Vec<E> {
    type A<E> = <E as Real>::Acc;
    let mut out = vec![E::ZERO; x.len()];
    softmax_rows::<E>(x, dims, axis, cx, |offs, centred, e, s, cx| {
        let log_s = log.then(|| A::<E>::unary(UnaryOp::Log, s, cx));
        for (i, &o) in offs.iter().enumerate() {
            out[o] = match log_s {
                Some(ls) => E::difference(centred[i], ls, cx),
                None => E::quotient(e[i], s, cx),
            };
        }
    });
    out
}

/// Sparse softmax cross-entropy of `logits[n, c]` against `labels[n]`.
pub(crate) fn sparse_softmax_cross_entropy<E: Real>(
    logits: &[E],
    dims: &[usize],
    labels: &[i32],
    mean: bool,
    cx: &mut Cx,
) -> E {
    type A<E> = <E as Real>::Acc;
    let classes = dims[1];
    let mut total: Option<E::Acc> = None;
    let mut row = 0usize;
    softmax_rows::<E>(logits, dims, 1, cx, |_, centred, _, s, cx| {
        let label = labels[row];
        row += 1;
        let loss = match usize::try_from(label).ok().filter(|&l| l < classes) {
            Some(l) => {
                let log_s = A::<E>::unary(UnaryOp::Log, s, cx);
                A::<E>::binary(ArithOp::Sub, log_s, centred[l], cx)
            }
            None => A::<E>::ZERO,
        };
        total = Some(match total {
            None => loss,
            Some(t) => A::<E>::binary(ArithOp::Add, t, loss, cx),
        });
    });
    let total = total.unwrap_or(<E::Acc as Real>::ZERO);
    if mean {
        E::scale_narrow(total, 1.0 / dims[0] as f64, cx)
    } else {
        E::narrow(total, cx)
    }
}

/// `a[..., m, k] @ b[..., k, n]` with broadcast batch dimensions, into `out` dims.
pub(crate) fn matmul<E: Real>(
    (a, sa): (&[E], &[usize]),
    (b, sb): (&[E], &[usize]),
    out: &[usize],
    cx: &mut Cx,
) -> Result<Vec<E>, NumericsError> {
    let r = out.len();
    let (m, n) = (out[r - 2], out[r - 1]);
    let k = sa[sa.len() - 1];
    let batch = &out[..r - 2];
    // Offsets (in matrices) of each operand's batch matrix for every output batch index.
    let matrices = |s: &[usize]| -> Vec<usize> {
        let own = &s[..s.len() - 2];
        let st = broadcast_strides(own, batch);
        view_offsets(0, batch, &st)
    };
    let (ba, bb) = (matrices(sa), matrices(sb));
    let shape = MatMulShape { m, k, n };
    let mut y = Vec::with_capacity(out.iter().product());
    for (&ia, &ib) in ba.iter().zip(&bb) {
        let am = &a[ia * m * k..(ia + 1) * m * k];
        let bm = &b[ib * k * n..(ib + 1) * k * n];
        y.extend(E::matmul(shape, am, bm, cx)?);
    }
    Ok(y)
}

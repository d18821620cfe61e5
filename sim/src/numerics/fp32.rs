//! FP32 scalar arithmetic with IPU flags. Results are IEEE 754 binary32 rounded to nearest
//! even (Rust's `f32` operations are correctly rounded, with gradual underflow), returned
//! with the [`FpSts`] flags the operation raised.
//!
//! Choices where the IPU is undocumented (numerics.md §2.2, §2.4, §6):
//! - FP32 results are never stochastically rounded (every documented SR site produces FP16).
//! - Overflow of a finite computation gives ±inf and OFLO ("FP32 overflow value: not
//!   found"; IEEE default). `nanoo` applies to half precision only \[S13\].
//! - A finite non-zero number divided by zero gives ±inf and DIV0 (IEEE); FP16 gives NaN.
//! - Subnormals are kept (FP32 denormal handling on the IPU: not found).
//!
//! Invalid operations (`inf − inf`, `0 × inf`, `0/0`, `inf/inf`, `sqrt(x < 0)`, `log(x < 0)`,
//! any NaN operand) give the canonical NaN `0x7fc00000` and INV. Elementary functions are
//! computed in `f64` and rounded once (module `transcendental`).

use ipusim_ir::Activation;

use super::exact;
use super::flags::FpSts;
use super::ops::{ArithOp, CompareOp, UnaryOp};
use super::round::{round_f32, F32_NAN};
use super::transcendental;

/// Flags of an IEEE result `v` computed from `operands`: NaN operand or NaN result → INV
/// (and the canonical NaN); infinite result from finite operands → OFLO.
#[inline]
fn flagged(v: f32, operands: &[f32]) -> (f32, FpSts) {
    if v.is_nan() {
        (F32_NAN, FpSts::INV)
    } else if v.is_infinite() && operands.iter().all(|x| x.is_finite()) {
        (v, FpSts::OFLO)
    } else {
        (v, FpSts::empty())
    }
}

/// `a + b`.
#[inline]
pub fn add(a: f32, b: f32) -> (f32, FpSts) {
    flagged(a + b, &[a, b])
}

/// `a - b`.
#[inline]
pub fn sub(a: f32, b: f32) -> (f32, FpSts) {
    flagged(a - b, &[a, b])
}

/// `a * b`.
#[inline]
pub fn mul(a: f32, b: f32) -> (f32, FpSts) {
    flagged(a * b, &[a, b])
}

/// `a * b + c` with one rounding (fused multiply-add).
#[inline]
pub fn fma(a: f32, b: f32, c: f32) -> (f32, FpSts) {
    flagged(a.mul_add(b, c), &[a, b, c])
}

/// `a + s·b` with one rounding (a fused multiply-add; PopLibs' `scaledAdd`).
#[inline]
pub fn scaled_add(a: f32, s: f32, b: f32) -> (f32, FpSts) {
    fma(s, b, a)
}

/// The activation gradient `dy · f'(x)`: ReLU passes `dy` where `x > 0` and gives `+0`
/// elsewhere (INV when `x` is NaN); the others evaluate `dy · f'(x)` in `f64` and round it
/// once to FP32 (INV for a NaN operand).
#[inline]
pub fn activation_grad(act: Activation, x: f32, dy: f32) -> (f32, FpSts) {
    if act == Activation::Relu {
        let (positive, flags) = compare(CompareOp::Gt, x, 0.0);
        return (if positive { dy } else { 0.0 }, flags);
    }
    let (xv, gv) = (f64::from(x), f64::from(dy));
    let nan = if xv.is_nan() || gv.is_nan() {
        FpSts::INV
    } else {
        FpSts::empty()
    };
    let (v, f) = round_f32(gv * transcendental::activation_derivative(act, xv));
    (v, f | nan)
}

/// `a / b`; a finite non-zero `a` over zero gives ±inf with DIV0.
#[inline]
pub fn div(a: f32, b: f32) -> (f32, FpSts) {
    if b == 0.0 && a.is_finite() && a != 0.0 {
        return (a / b, FpSts::DIV0);
    }
    flagged(a / b, &[a, b])
}

/// `√a` (`sqrt(-0) = -0`).
#[inline]
pub fn sqrt(a: f32) -> (f32, FpSts) {
    flagged(a.sqrt(), &[a])
}

#[inline]
fn rounded_unary(op: UnaryOp, a: f32) -> (f32, FpSts) {
    let (y, flags) = transcendental::eval(op, f64::from(a));
    let (v, f) = round_f32(y);
    (v, f | flags)
}

/// `e^a`.
#[inline]
pub fn exp(a: f32) -> (f32, FpSts) {
    rounded_unary(UnaryOp::Exp, a)
}

/// `ln a`; `log(±0) = -inf` with DIV0.
#[inline]
pub fn log(a: f32) -> (f32, FpSts) {
    rounded_unary(UnaryOp::Log, a)
}

/// `tanh a`.
#[inline]
pub fn tanh(a: f32) -> (f32, FpSts) {
    rounded_unary(UnaryOp::Tanh, a)
}

/// `1 / (1 + e^-a)`.
#[inline]
pub fn sigmoid(a: f32) -> (f32, FpSts) {
    rounded_unary(UnaryOp::Sigmoid, a)
}

/// GELU (tanh approximation, [`UnaryOp::Gelu`]).
#[inline]
pub fn gelu(a: f32) -> (f32, FpSts) {
    rounded_unary(UnaryOp::Gelu, a)
}

/// `-a`.
#[inline]
pub fn neg(a: f32) -> (f32, FpSts) {
    exact::neg(a)
}

/// `|a|`.
#[inline]
pub fn abs(a: f32) -> (f32, FpSts) {
    exact::abs(a)
}

/// `max(a, 0)`.
#[inline]
pub fn relu(a: f32) -> (f32, FpSts) {
    exact::relu(a)
}

/// The smaller operand (`min(-0, +0) = -0`).
#[inline]
pub fn min(a: f32, b: f32) -> (f32, FpSts) {
    exact::min(a, b)
}

/// The larger operand (`max(-0, +0) = +0`).
#[inline]
pub fn max(a: f32, b: f32) -> (f32, FpSts) {
    exact::max(a, b)
}

/// Applies `op` to `a` and `b`.
pub fn binary(op: ArithOp, a: f32, b: f32) -> (f32, FpSts) {
    match op {
        ArithOp::Add => add(a, b),
        ArithOp::Sub => sub(a, b),
        ArithOp::Mul => mul(a, b),
        ArithOp::Div => div(a, b),
        ArithOp::Min => min(a, b),
        ArithOp::Max => max(a, b),
    }
}

/// Applies `op` to `a`.
pub fn unary(op: UnaryOp, a: f32) -> (f32, FpSts) {
    match op {
        UnaryOp::Neg => neg(a),
        UnaryOp::Abs => abs(a),
        UnaryOp::Relu => relu(a),
        UnaryOp::Sqrt => sqrt(a),
        UnaryOp::Exp | UnaryOp::Log | UnaryOp::Tanh | UnaryOp::Sigmoid | UnaryOp::Gelu => {
            rounded_unary(op, a)
        }
    }
}

/// Compares `a` and `b`: false with a NaN operand (true for `Ne`), raising INV.
pub fn compare(op: CompareOp, a: f32, b: f32) -> (bool, FpSts) {
    exact::compare(op, a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ieee_with_ipu_flags() {
        assert_eq!(mul(1e30, 1e30), (f32::INFINITY, FpSts::OFLO));
        assert_eq!(add(f32::INFINITY, 1.0), (f32::INFINITY, FpSts::empty()));
        assert_eq!(sub(f32::INFINITY, f32::INFINITY).1, FpSts::INV);
        assert_eq!(div(-1.0, 0.0), (f32::NEG_INFINITY, FpSts::DIV0));
        assert_eq!(div(0.0, 0.0).0.to_bits(), 0x7fc0_0000);
        assert_eq!(div(1e30, 1e-30), (f32::INFINITY, FpSts::OFLO));
        assert_eq!(sqrt(-1.0).1, FpSts::INV);
        assert_eq!(log(0.0), (f32::NEG_INFINITY, FpSts::DIV0));
        assert_eq!(exp(89.0), (f32::INFINITY, FpSts::OFLO));
        assert_eq!(fma(f32::INFINITY, 0.0, 1.0).1, FpSts::INV);
        assert_eq!(add(1.0, 2f32.powi(-24)), (1.0, FpSts::empty()));
    }
}

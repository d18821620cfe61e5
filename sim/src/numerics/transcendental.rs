//! The elementary functions (`exp`, `log`, `tanh`, `sigmoid`, `gelu`) evaluated in `f64`,
//! with their IEEE special cases and flags, for both FP16 and FP32 results.
//!
//! How the IPU's codelets compute these is not public. ipusim evaluates each function in
//! `f64` with Rust's `std` (the platform libm, accurate to about one `f64` ulp) and rounds
//! that value **once** to the destination type ([`super::round`]). Because `f64` carries 42
//! more bits than FP16 and 29 more than FP32, the result is the correctly rounded value
//! except when the true result lies within ~2^-52 (relative) of a rounding boundary.
//!
//! A finite argument whose result exceeds the destination range overflows (OFLO, and the
//! FP16 `nanoo` policy), even when it also exceeds `f64` (`exp(1000)`).
//!
//! Special cases (IEEE 754-2019 §9.2): a NaN operand gives NaN and INV; `log` of a negative
//! number gives NaN and INV; `log(±0) = -inf` with DIV0; `exp(+inf) = +inf`,
//! `exp(-inf) = +0`, `tanh(±inf) = ±1`, `sigmoid(+inf) = 1`, `sigmoid(-inf) = +0`,
//! `gelu(+inf) = +inf`, `gelu(-inf) = -0`, all without flags.

use ipusim_ir::Activation;

use super::flags::FpSts;
use super::ops::UnaryOp;

/// `√(2/π)`, the GELU tanh-approximation constant (Hendrycks & Gimpel 2016, eq. for GELU).
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
/// The cubic coefficient of the tanh-approximated GELU (Hendrycks & Gimpel 2016), the
/// approximation PopLibs implements.
const GELU_CUBIC: f64 = 0.044_715;

/// `f'(x)` of an activation, in `f64` (the derivative of the forward function as defined
/// here; the activation gradients of the interpreter and the engine both use it).
pub(crate) fn activation_derivative(act: Activation, x: f64) -> f64 {
    match act {
        Activation::Relu => f64::from(u8::from(x > 0.0)),
        Activation::Sigmoid => {
            let s = 1.0 / (1.0 + (-x).exp());
            s * (1.0 - s)
        }
        Activation::Tanh => {
            let t = x.tanh();
            1.0 - t * t
        }
        Activation::Gelu => {
            let u = SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
            let t = u.tanh();
            let du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_CUBIC * x * x);
            0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du
        }
    }
}

/// Evaluates the unary operation `op` at `x` in `f64`. Returns the `f64` value (NaN for an
/// invalid operation) and the flags the operation itself raised. FP16 square roots do not
/// come here: they need the exact residual ([`super::fp16`]).
pub(crate) fn eval(op: UnaryOp, x: f64) -> (f64, FpSts) {
    if x.is_nan() {
        return (f64::NAN, FpSts::INV);
    }
    let (y, flags) = eval_f64(op, x);
    if y.is_infinite() && x.is_finite() && flags.is_empty() {
        // A finite argument whose result overflows even f64 (exp(1000)): hand the rounding
        // a finite value beyond every format's range, so that it reports the overflow.
        return (f64::MAX.copysign(y), flags);
    }
    (y, flags)
}

fn eval_f64(op: UnaryOp, x: f64) -> (f64, FpSts) {
    match op {
        UnaryOp::Neg => (-x, FpSts::empty()),
        UnaryOp::Abs => (x.abs(), FpSts::empty()),
        UnaryOp::Relu => (if x > 0.0 { x } else { 0.0 }, FpSts::empty()),
        UnaryOp::Sqrt => {
            if x < 0.0 {
                (f64::NAN, FpSts::INV)
            } else {
                (x.sqrt(), FpSts::empty())
            }
        }
        UnaryOp::Exp => (x.exp(), FpSts::empty()),
        UnaryOp::Log => {
            if x == 0.0 {
                (f64::NEG_INFINITY, FpSts::DIV0)
            } else if x < 0.0 {
                (f64::NAN, FpSts::INV)
            } else {
                (x.ln(), FpSts::empty())
            }
        }
        UnaryOp::Tanh => (x.tanh(), FpSts::empty()),
        UnaryOp::Sigmoid => (sigmoid(x), FpSts::empty()),
        UnaryOp::Gelu => (gelu(x), FpSts::empty()),
    }
}

fn sigmoid(x: f64) -> f64 {
    // For x < 0 use e^x/(1+e^x) so that tiny results keep their precision.
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

fn gelu(x: f64) -> f64 {
    if x.is_infinite() {
        return if x > 0.0 { x } else { -0.0 };
    }
    let u = SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
    if x < 0.0 {
        // u < 0 and 1 + tanh(u) cancels; use 1 + tanh(u) = 2e^{2u} / (1 + e^{2u}) instead.
        let e = (2.0 * u).exp();
        x * e / (1.0 + e)
    } else {
        0.5 * x * (1.0 + u.tanh())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_cases() {
        assert_eq!(eval(UnaryOp::Log, 0.0), (f64::NEG_INFINITY, FpSts::DIV0));
        assert_eq!(eval(UnaryOp::Log, -0.0), (f64::NEG_INFINITY, FpSts::DIV0));
        assert!(eval(UnaryOp::Log, -1.0).0.is_nan());
        assert_eq!(eval(UnaryOp::Log, -1.0).1, FpSts::INV);
        assert_eq!(eval(UnaryOp::Exp, f64::NEG_INFINITY), (0.0, FpSts::empty()));
        assert_eq!(
            eval(UnaryOp::Tanh, f64::NEG_INFINITY),
            (-1.0, FpSts::empty())
        );
        assert_eq!(
            eval(UnaryOp::Sigmoid, f64::NEG_INFINITY),
            (0.0, FpSts::empty())
        );
        assert_eq!(eval(UnaryOp::Sigmoid, f64::INFINITY), (1.0, FpSts::empty()));
        assert_eq!(
            eval(UnaryOp::Gelu, f64::INFINITY),
            (f64::INFINITY, FpSts::empty())
        );
        let g = eval(UnaryOp::Gelu, f64::NEG_INFINITY).0;
        assert!(g == 0.0 && g.is_sign_negative());
        assert_eq!(eval(UnaryOp::Exp, f64::NAN).1, FpSts::INV);
        assert_eq!(eval(UnaryOp::Exp, 1000.0), (f64::MAX, FpSts::empty()));
        assert_eq!(
            eval(UnaryOp::Exp, f64::INFINITY),
            (f64::INFINITY, FpSts::empty())
        );
    }

    #[test]
    fn gelu_matches_the_formula_and_keeps_tiny_negative_results() {
        let formula =
            |x: f64| 0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044_715 * x.powi(3))).tanh());
        for x in [-3.0, -1.0, -0.25, 0.0, 0.5, 1.0, 4.0] {
            assert!(
                (gelu(x) - formula(x)).abs() <= 4.0 * f64::EPSILON * x.abs(),
                "{x}"
            );
        }
        let tiny = gelu(-20.0);
        assert!(tiny < 0.0 && tiny > -1e-200, "{tiny}");
        assert_eq!(sigmoid(-800.0), 0.0);
        assert!(sigmoid(-700.0) > 0.0);
    }
}

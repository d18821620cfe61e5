//! FP16 scalar arithmetic with IPU semantics: every result is rounded once from the exact
//! value (nearest even or stochastic, [`super::round`]) and returned with the [`FpSts`]
//! flags the operation raised.
//!
//! How each exact value is obtained:
//! - `add`, `sub`: exact in `f64` (an FP16 sum spans at most 2^16 down to 2^-24: 41 bits);
//!   under round to nearest, rounded to f32 first, which double rounding leaves exact
//!   ([`add`]);
//! - `mul`: exact in `f64` (an 11×11-bit product has at most 22 bits; numerics.md §5.1);
//!   under round to nearest, exact in f32 ([`mul`]);
//! - `scaled_add` (`a + s·b`): `s·b` exact in `f64`, the sum exact with TwoSum;
//! - `div`, `sqrt`: the `f64` result plus the sign of its exact residual `a − q·b` or
//!   `a − s²`, computed exactly with an FMA (the residual of a correctly rounded quotient or
//!   square root is representable), so ties and stochastic thresholds are decided exactly;
//! - `exp`, `log`, `tanh`, `sigmoid`, `gelu`: computed in `f64` and rounded once
//!   (module `transcendental`).
//!
//! Special cases: a NaN operand gives NaN and INV; `inf − inf`, `0 × inf`, `0/0`,
//! `inf/inf`, `sqrt(x < 0)` give NaN and INV; a finite non-zero number divided by zero gives
//! **NaN** with DIV0 — Graphcore's hardware test of FP16 `10000/0` returns NaN
//! (numerics.md §2.3 \[S18\]); `inf/0` is ±inf. Infinite operands otherwise propagate without
//! flags; overflow follows the `nanoo` policy of [`Rounding`].
//!
//! Every operation that rounds consumes one stochastic-rounding draw (when SR is on), even
//! for special operands; `neg`, `abs`, `relu`, `min`, `max` and comparisons do not round.

use half::f16;
use ipusim_ir::Activation;

use super::exact;
use super::flags::FpSts;
use super::ops::{ArithOp, CompareOp, UnaryOp};
use super::round::{two_sum, Rounding, Tail, F16_NAN};
use super::transcendental;

/// `a + b`.
///
/// Round to nearest takes a fast path: the sum is rounded to f32 and then to FP16, and
/// rounding twice to nearest gives the once-rounded result whenever the first format has at
/// least `2p + 2` significant bits for a second of `p` (Figueroa, "When is double rounding
/// innocuous?", SIGNUM Newsletter 30(3), 1995, for `+ − × ÷ √`): f32's 24 bits against
/// FP16's 11. A test holds the two paths to the same bits and flags.
#[inline]
pub fn add(a: f16, b: f16, r: &mut Rounding) -> (f16, FpSts) {
    let draw = r.draw();
    if draw.is_none() {
        return nearest_from_f32(a.to_f32() + b.to_f32(), r);
    }
    r.round_f16_with(a.to_f64() + b.to_f64(), Tail::Exact, draw)
}

/// `a - b`, with the fast path of [`add`] under round to nearest.
#[inline]
pub fn sub(a: f16, b: f16, r: &mut Rounding) -> (f16, FpSts) {
    let draw = r.draw();
    if draw.is_none() {
        return nearest_from_f32(a.to_f32() - b.to_f32(), r);
    }
    r.round_f16_with(a.to_f64() - b.to_f64(), Tail::Exact, draw)
}

/// `a * b`.
///
/// Round to nearest takes a fast path: the product of two FP16 values is exact in f32 (22
/// significant bits, exponents from 2^-48 to 2^32), and `half`'s f32-to-f16 conversion
/// rounds it once to nearest even, as [`Rounding::round_f16_with`] does (a test holds the
/// two paths to the same bits and flags).
#[inline]
pub fn mul(a: f16, b: f16, r: &mut Rounding) -> (f16, FpSts) {
    let draw = r.draw();
    if draw.is_none() {
        return nearest_from_f32(a.to_f32() * b.to_f32(), r);
    }
    r.round_f16_with(a.to_f64() * b.to_f64(), Tail::Exact, draw)
}

/// The FP16 result and flags, under round to nearest, of an f32 value `p` that rounds to
/// FP16 as the exact result does (see [`add`] and [`mul`]): `half`'s conversion rounds to
/// nearest even; NaN raises INV; a finite value beyond FP16's range overflows by the
/// `nanoo` policy; an infinite `p` (from an infinite operand) passes without flags.
#[inline]
fn nearest_from_f32(p: f32, r: &Rounding) -> (f16, FpSts) {
    if p.is_nan() {
        return (F16_NAN, FpSts::INV);
    }
    let q = f16::from_f32(p);
    if q.is_infinite() && p.is_finite() {
        return r.overflow_f16(p < 0.0);
    }
    (q, FpSts::empty())
}

/// `a / b`; a finite non-zero `a` over zero gives NaN with DIV0 (see the module docs).
#[inline]
pub fn div(a: f16, b: f16, r: &mut Rounding) -> (f16, FpSts) {
    div_wide(a.to_f64(), b.to_f64(), r)
}

/// `x / y` rounded once to FP16, for `x` and `y` that are FP16 or FP32 values (any `f64`
/// with at most 53 significant bits whose quotient does not underflow `f64`): the quotient
/// of the FP32 results of a softmax, for instance. Same special cases as [`div`].
#[inline]
pub fn div_wide(x: f64, y: f64, r: &mut Rounding) -> (f16, FpSts) {
    let draw = r.draw();
    div_wide_with(x, y, r, draw)
}

/// [`div`] with the stochastic-rounding draw given (`None` for nearest), for the block
/// kernels that generate their draws in bulk.
#[inline]
pub(crate) fn div_with(a: f16, b: f16, r: &Rounding, draw: Option<u32>) -> (f16, FpSts) {
    div_wide_with(a.to_f64(), b.to_f64(), r, draw)
}

#[inline]
fn div_wide_with(x: f64, y: f64, r: &Rounding, draw: Option<u32>) -> (f16, FpSts) {
    if y == 0.0 && x.is_finite() && x != 0.0 {
        return (F16_NAN, FpSts::DIV0);
    }
    let (q, side) = quotient(x, y);
    let tail = if q.is_finite() && q != 0.0 {
        Tail::of(side)
    } else {
        Tail::Exact
    };
    r.round_f16_with(q, tail, draw)
}

/// `x / y` in f64 and a value whose sign is the side of the exact quotient from it: the
/// residual `x − q·y` is exact through an FMA, and the exact quotient is `q + residual/y`.
#[inline(always)]
pub(crate) fn quotient(x: f64, y: f64) -> (f64, f64) {
    let q = x / y;
    (q, (-q).mul_add(y, x) * y.signum())
}

/// `x + y` rounded once to FP16, for any finite or infinite `f64` values (the exact sum is
/// formed with TwoSum): the difference of two FP32 values in a log-softmax, or an FP16
/// value plus an exact product in [`scaled_add`]. A NaN operand or `inf − inf` gives NaN
/// and INV.
#[inline]
pub fn add_wide(x: f64, y: f64, r: &mut Rounding) -> (f16, FpSts) {
    let draw = r.draw();
    let (hi, lo) = two_sum(x, y);
    let tail = if hi.is_finite() {
        Tail::of(lo)
    } else {
        Tail::Exact
    };
    r.round_f16_with(hi, tail, draw)
}

/// `a + s·b` with one rounding of the exact value (PopLibs' `scaledAdd` with a float scale
/// `s`): `s·b` is exact in `f64` (24 × 11 bits) and the sum is exact through TwoSum.
/// Flags: INV (NaN operands, `inf − inf`, `0 × inf`), OFLO.
#[inline]
pub fn scaled_add(a: f16, s: f32, b: f16, r: &mut Rounding) -> (f16, FpSts) {
    let draw = r.draw();
    scaled_add_with(a, s, b, r, draw)
}

/// [`scaled_add`] with the stochastic-rounding draw given (`None` for nearest), for the
/// block kernels that generate their draws in bulk.
#[inline]
pub(crate) fn scaled_add_with(
    a: f16,
    s: f32,
    b: f16,
    r: &Rounding,
    draw: Option<u32>,
) -> (f16, FpSts) {
    let (hi, lo) = two_sum(a.to_f64(), f64::from(s) * b.to_f64());
    let tail = if hi.is_finite() {
        Tail::of(lo)
    } else {
        Tail::Exact
    };
    r.round_f16_with(hi, tail, draw)
}

/// The activation gradient `dy · f'(x)`: ReLU passes `dy` where `x > 0` and gives `+0`
/// elsewhere (no rounding, INV when `x` is NaN); the others evaluate `dy · f'(x)` in `f64`
/// (`transcendental::activation_derivative`) and round it once (INV for a NaN operand).
#[inline]
pub fn activation_grad(act: Activation, x: f16, dy: f16, r: &mut Rounding) -> (f16, FpSts) {
    if act == Activation::Relu {
        let (positive, flags) = compare(CompareOp::Gt, x, f16::ZERO);
        return (if positive { dy } else { f16::ZERO }, flags);
    }
    let (xv, gv) = (x.to_f64(), dy.to_f64());
    let nan = if xv.is_nan() || gv.is_nan() {
        FpSts::INV
    } else {
        FpSts::empty()
    };
    let (v, f) = r.round_f16(
        gv * transcendental::activation_derivative(act, xv),
        Tail::Exact,
    );
    (v, f | nan)
}

/// `√a`, correctly rounded; `sqrt(-0) = -0`.
#[inline]
pub fn sqrt(a: f16, r: &mut Rounding) -> (f16, FpSts) {
    let draw = r.draw();
    let x = a.to_f64();
    if x < 0.0 {
        return (F16_NAN, FpSts::INV);
    }
    let s = x.sqrt();
    let tail = if s.is_finite() && s != 0.0 {
        Tail::of((-s).mul_add(s, x))
    } else {
        Tail::Exact
    };
    r.round_f16_with(s, tail, draw)
}

/// `e^a`.
#[inline]
pub fn exp(a: f16, r: &mut Rounding) -> (f16, FpSts) {
    rounded_unary(UnaryOp::Exp, a, r)
}

/// `ln a`; `log(±0) = -inf` with DIV0.
#[inline]
pub fn log(a: f16, r: &mut Rounding) -> (f16, FpSts) {
    rounded_unary(UnaryOp::Log, a, r)
}

/// `tanh a`.
#[inline]
pub fn tanh(a: f16, r: &mut Rounding) -> (f16, FpSts) {
    rounded_unary(UnaryOp::Tanh, a, r)
}

/// `1 / (1 + e^-a)`.
#[inline]
pub fn sigmoid(a: f16, r: &mut Rounding) -> (f16, FpSts) {
    rounded_unary(UnaryOp::Sigmoid, a, r)
}

/// GELU (tanh approximation, [`UnaryOp::Gelu`]).
#[inline]
pub fn gelu(a: f16, r: &mut Rounding) -> (f16, FpSts) {
    rounded_unary(UnaryOp::Gelu, a, r)
}

#[inline]
fn rounded_unary(op: UnaryOp, a: f16, r: &mut Rounding) -> (f16, FpSts) {
    let draw = r.draw();
    let (y, flags) = transcendental::eval(op, a.to_f64());
    let (v, f) = r.round_f16_with(y, Tail::Exact, draw);
    (v, f | flags)
}

/// `-a`.
#[inline]
pub fn neg(a: f16) -> (f16, FpSts) {
    exact::neg(a)
}

/// `|a|`.
#[inline]
pub fn abs(a: f16) -> (f16, FpSts) {
    exact::abs(a)
}

/// `max(a, 0)`.
#[inline]
pub fn relu(a: f16) -> (f16, FpSts) {
    exact::relu(a)
}

/// The smaller operand (`min(-0, +0) = -0`).
#[inline]
pub fn min(a: f16, b: f16) -> (f16, FpSts) {
    exact::min(a, b)
}

/// The larger operand (`max(-0, +0) = +0`).
#[inline]
pub fn max(a: f16, b: f16) -> (f16, FpSts) {
    exact::max(a, b)
}

/// Applies `op` to `a` and `b`.
pub fn binary(op: ArithOp, a: f16, b: f16, r: &mut Rounding) -> (f16, FpSts) {
    match op {
        ArithOp::Add => add(a, b, r),
        ArithOp::Sub => sub(a, b, r),
        ArithOp::Mul => mul(a, b, r),
        ArithOp::Div => div(a, b, r),
        ArithOp::Min => min(a, b),
        ArithOp::Max => max(a, b),
    }
}

/// Applies `op` to `a`.
pub fn unary(op: UnaryOp, a: f16, r: &mut Rounding) -> (f16, FpSts) {
    match op {
        UnaryOp::Neg => neg(a),
        UnaryOp::Abs => abs(a),
        UnaryOp::Relu => relu(a),
        UnaryOp::Sqrt => sqrt(a, r),
        UnaryOp::Exp | UnaryOp::Log | UnaryOp::Tanh | UnaryOp::Sigmoid | UnaryOp::Gelu => {
            rounded_unary(op, a, r)
        }
    }
}

/// Compares `a` and `b`: false with a NaN operand (true for `Ne`), raising INV.
pub fn compare(op: CompareOp, a: f16, b: f16) -> (bool, FpSts) {
    exact::compare(op, a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit pattern and flags (NaN != NaN, so compare bits).
    fn b((v, f): (f16, FpSts)) -> (u16, FpSts) {
        (v.to_bits(), f)
    }

    fn h(x: f64) -> f16 {
        Rounding::nearest(false).round_f16(x, Tail::Exact).0
    }

    #[test]
    fn specials_and_flags() {
        let mut r = Rounding::nearest(false);
        assert_eq!(
            b(add(f16::INFINITY, f16::NEG_INFINITY, &mut r)),
            (F16_NAN.to_bits(), FpSts::INV)
        );
        assert_eq!(
            b(mul(f16::ZERO, f16::INFINITY, &mut r)),
            (F16_NAN.to_bits(), FpSts::INV)
        );
        assert_eq!(
            b(div(h(10000.0), f16::ZERO, &mut r)),
            (F16_NAN.to_bits(), FpSts::DIV0)
        );
        assert_eq!(
            b(div(f16::ZERO, f16::ZERO, &mut r)),
            (F16_NAN.to_bits(), FpSts::INV)
        );
        assert_eq!(
            b(div(f16::NEG_INFINITY, f16::ZERO, &mut r)),
            (f16::NEG_INFINITY.to_bits(), FpSts::empty())
        );
        assert_eq!(
            b(div(f16::INFINITY, f16::INFINITY, &mut r)),
            (F16_NAN.to_bits(), FpSts::INV)
        );
        assert_eq!(
            b(add(f16::INFINITY, f16::ONE, &mut r)),
            (f16::INFINITY.to_bits(), FpSts::empty())
        );
        assert_eq!(
            b(sqrt(f16::NEG_ONE, &mut r)),
            (F16_NAN.to_bits(), FpSts::INV)
        );
        assert_eq!(sqrt(f16::NEG_ZERO, &mut r).0.to_bits(), 0x8000);
        assert_eq!(log(f16::ZERO, &mut r), (f16::NEG_INFINITY, FpSts::DIV0));
        assert_eq!(
            b(add(f16::NAN, f16::ONE, &mut r)),
            (F16_NAN.to_bits(), FpSts::INV)
        );
        // Cancellation gives +0 under round to nearest.
        assert_eq!(sub(f16::ONE, f16::ONE, &mut r).0.to_bits(), 0);
    }

    /// The round-to-nearest fast path of `mul` gives the bits and flags of the general
    /// rounding of the exact product, for every FP16 `a` against a spread of `b` (every
    /// exponent, both signs, subnormals, zeros, infinities and NaNs), with both overflow
    /// policies.
    #[test]
    fn mul_fast_path_equals_the_exact_rounding() {
        let bs: Vec<u16> = (0..=0xffffu32)
            .step_by(97)
            .map(|x| x as u16)
            .chain([
                0, 0x8000, 1, 0x8001, 0x03ff, 0x0400, 0x7bff, 0x7c00, 0xfc00, 0x7e00,
            ])
            .collect();
        fast_path_equals_the_exact_rounding(&bs, "x", mul, |x, y| x * y);
    }

    /// `fast(a, b)` under round to nearest against the rounding of `exact(a, b)` in `f64`,
    /// for every FP16 `a` and every `b` of `bs` (bits), with both overflow policies.
    fn fast_path_equals_the_exact_rounding(
        bs: &[u16],
        what: &str,
        fast: fn(f16, f16, &mut Rounding) -> (f16, FpSts),
        exact: fn(f64, f64) -> f64,
    ) {
        for nanoo in [false, true] {
            let mut r = Rounding::nearest(nanoo);
            for a in 0..=0xffffu16 {
                let a = f16::from_bits(a);
                for &bb in bs {
                    let bb = f16::from_bits(bb);
                    let want = r.round_f16_with(exact(a.to_f64(), bb.to_f64()), Tail::Exact, None);
                    assert_eq!(b(fast(a, bb, &mut r)), b(want), "{a:?} {what} {bb:?}");
                }
            }
        }
    }

    /// The round-to-nearest fast paths of `add` and `sub` (double rounding through f32)
    /// give the bits and flags of the general rounding of the exact sum, for every FP16 `a`
    /// against a spread of `b` and against the neighbours of every power of two, where a sum
    /// lands on FP16's half-way points (both signs, subnormals, zeros, infinities, NaNs).
    #[test]
    fn sum_fast_paths_equal_the_exact_rounding() {
        let bs: Vec<u16> = (0..=0xffffu32)
            .step_by(61)
            .map(|x| x as u16)
            .chain((0..31u16).flat_map(|e| {
                let p = e << 10;
                [p, p + 1, p.saturating_sub(1), p | 0x8000, (p + 1) | 0x8000]
            }))
            .chain([0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x03ff, 0x83ff])
            .collect();
        fast_path_equals_the_exact_rounding(&bs, "+", add, |x, y| x + y);
        fast_path_equals_the_exact_rounding(&bs, "-", sub, |x, y| x - y);
    }

    #[test]
    fn overflow_saturates_or_nans() {
        let big = h(10000.0);
        assert_eq!(
            b(mul(big, big, &mut Rounding::nearest(false))),
            (0x7bff, FpSts::OFLO)
        );
        let (v, f) = mul(big, big, &mut Rounding::nearest(true));
        assert!(v.is_nan());
        assert_eq!(f, FpSts::OFLO | FpSts::INV);
        assert_eq!(exp(h(12.0), &mut Rounding::nearest(false)).1, FpSts::OFLO);
    }

    #[test]
    fn quotients_and_roots_round_once() {
        let mut r = Rounding::nearest(false);
        // 1/3 = 0x3555 (0.33325195), 2/3 = 0x3955.
        assert_eq!(div(f16::ONE, h(3.0), &mut r).0.to_bits(), 0x3555);
        assert_eq!(div(h(2.0), h(3.0), &mut r).0.to_bits(), 0x3955);
        assert_eq!(sqrt(h(2.0), &mut r).0.to_bits(), 0x3da8);
        assert_eq!(sqrt(h(0.25), &mut r).0.to_bits(), 0x3800);
    }
}

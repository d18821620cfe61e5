//! Type conversions between the IPU's numeric types: f32↔f16, f16/f32→i32, u8/i32→f16/f32.
//!
//! - f32→f16 and i32→f16 round once (nearest even or stochastic, [`Rounding`]) with the
//!   FP16 overflow policy; they consume one stochastic-rounding draw each.
//! - f16→f32, u8→f16 and u8→f32 are exact; i32→f32 rounds to nearest even.
//! - f16/f32→i32 truncate toward zero (like TensorFlow's casts). NaN gives `i32::MIN`
//!   (−2147483648) and INV, as Graphcore's hardware test shows for FP16 (numerics.md §2.3
//!   \[S18\]); values outside the `i32` range (±inf included) saturate to `i32::MIN`/`MAX`
//!   and raise INV. Float→u8 truncates to i32 that way, then saturates to `0..=255`, raising
//!   INV when out of range ([`i32_to_u8_saturating`]).
//! - A NaN input of a float→float cast gives the canonical NaN and INV.

use half::f16;

use super::flags::FpSts;
use super::round::{round_f32, Rounding, Tail, F32_NAN};

/// f32 → f16, rounded once.
#[inline]
pub fn f32_to_f16(x: f32, r: &mut Rounding) -> (f16, FpSts) {
    r.round_f16(f64::from(x), Tail::Exact)
}

/// f16 → f32 (exact).
#[inline]
pub fn f16_to_f32(x: f16) -> (f32, FpSts) {
    if x.is_nan() {
        (F32_NAN, FpSts::INV)
    } else {
        (x.to_f32(), FpSts::empty())
    }
}

/// Truncates an `f64` toward zero into `i32` (NaN and out-of-range values saturate with INV,
/// as above). The float→int casts of every width, including the interpreter's exact mode.
#[inline]
pub fn f64_to_i32(x: f64) -> (i32, FpSts) {
    if x.is_nan() {
        return (i32::MIN, FpSts::INV);
    }
    let t = x.trunc();
    if t < f64::from(i32::MIN) {
        (i32::MIN, FpSts::INV)
    } else if t > f64::from(i32::MAX) {
        (i32::MAX, FpSts::INV)
    } else {
        (t as i32, FpSts::empty())
    }
}

/// i32 → u8 saturating to `0..=255` (INV when out of range): the last step of a float→u8
/// cast, after truncation to i32 (so NaN, which truncates to `i32::MIN`, gives 0).
#[inline]
pub fn i32_to_u8_saturating(x: i32) -> (u8, FpSts) {
    if (0..=255).contains(&x) {
        (x as u8, FpSts::empty())
    } else {
        (x.clamp(0, 255) as u8, FpSts::INV)
    }
}

/// f16 → i32, truncating toward zero.
#[inline]
pub fn f16_to_i32(x: f16) -> (i32, FpSts) {
    f64_to_i32(x.to_f64())
}

/// f32 → i32, truncating toward zero.
#[inline]
pub fn f32_to_i32(x: f32) -> (i32, FpSts) {
    f64_to_i32(f64::from(x))
}

/// i32 → f16, rounded once (|x| ≥ 65520 overflows under nearest even).
#[inline]
pub fn i32_to_f16(x: i32, r: &mut Rounding) -> (f16, FpSts) {
    r.round_f16(f64::from(x), Tail::Exact)
}

/// i32 → f32, rounded to nearest even.
#[inline]
pub fn i32_to_f32(x: i32) -> (f32, FpSts) {
    round_f32(f64::from(x))
}

/// u8 → f16 (exact).
#[inline]
pub fn u8_to_f16(x: u8) -> (f16, FpSts) {
    (f16::from_f32(f32::from(x)), FpSts::empty())
}

/// u8 → f32 (exact).
#[inline]
pub fn u8_to_f32(x: u8) -> (f32, FpSts) {
    (f32::from(x), FpSts::empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_to_int() {
        assert_eq!(f16_to_i32(f16::NAN), (i32::MIN, FpSts::INV));
        assert_eq!(f16_to_i32(f16::from_f32(-2.75)), (-2, FpSts::empty()));
        assert_eq!(f16_to_i32(f16::NEG_INFINITY), (i32::MIN, FpSts::INV));
        assert_eq!(f16_to_i32(f16::MAX), (65504, FpSts::empty()));
        assert_eq!(f32_to_i32(2147483648.0), (i32::MAX, FpSts::INV));
        assert_eq!(f32_to_i32(-2147483648.0), (i32::MIN, FpSts::empty()));
        assert_eq!(f32_to_i32(-0.9), (0, FpSts::empty()));
    }

    #[test]
    fn int_to_float() {
        let mut r = Rounding::nearest(false);
        assert_eq!(i32_to_f16(2049, &mut r).0, f16::from_f32(2048.0));
        assert_eq!(i32_to_f16(65519, &mut r).0, f16::MAX);
        assert_eq!(i32_to_f16(-70000, &mut r), (f16::MIN, FpSts::OFLO));
        assert_eq!(i32_to_f32(16777217), (16777216.0, FpSts::empty()));
        assert_eq!(u8_to_f16(255).0, f16::from_f32(255.0));
        let (v, f) = f16_to_f32(f16::from_bits(0x7c01));
        assert_eq!((v.to_bits(), f), (F32_NAN.to_bits(), FpSts::INV));
        let (v, f) = f32_to_f16(f32::from_bits(0x7f80_0001), &mut r);
        assert_eq!((v.to_bits(), f), (0x7e00, FpSts::INV));
    }
}

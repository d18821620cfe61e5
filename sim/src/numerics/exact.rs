//! Operations that never round, shared by FP16 and FP32: sign changes (`neg`, `abs`),
//! `relu`, `min`/`max` and comparisons. Their result is an operand, zero, or a truth value;
//! a NaN operand gives the canonical NaN (or `false`, except for `ne`) and INV, as every
//! operation with a NaN operand does on the IPU (numerics.md §2.2 \[S13\]).

use half::f16;

use super::flags::FpSts;
use super::ops::CompareOp;
use super::round::{F16_NAN, F32_NAN};

/// The two IPU floating-point formats, seen as sign-magnitude bit patterns.
pub(crate) trait IpuFloat: Copy {
    /// The canonical NaN.
    const NAN: Self;
    /// The sign bit.
    const SIGN: u32;
    fn bits(self) -> u32;
    fn from_bits(bits: u32) -> Self;
    /// The exact value (every FP16 and FP32 value is an `f64` value).
    fn wide(self) -> f64;
    fn is_nan(self) -> bool {
        self.wide().is_nan()
    }
}

impl IpuFloat for f16 {
    const NAN: f16 = F16_NAN;
    const SIGN: u32 = 0x8000;
    #[inline]
    fn bits(self) -> u32 {
        u32::from(self.to_bits())
    }
    #[inline]
    fn from_bits(bits: u32) -> f16 {
        f16::from_bits(bits as u16)
    }
    #[inline]
    fn wide(self) -> f64 {
        self.to_f64()
    }
    #[inline]
    fn is_nan(self) -> bool {
        self.to_bits() & 0x7fff > 0x7c00
    }
}

impl IpuFloat for f32 {
    const NAN: f32 = F32_NAN;
    const SIGN: u32 = 0x8000_0000;
    #[inline]
    fn bits(self) -> u32 {
        self.to_bits()
    }
    #[inline]
    fn from_bits(bits: u32) -> f32 {
        f32::from_bits(bits)
    }
    #[inline]
    fn wide(self) -> f64 {
        f64::from(self)
    }
    #[inline]
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
}

#[inline]
pub(crate) fn neg<T: IpuFloat>(a: T) -> (T, FpSts) {
    if a.is_nan() {
        return (T::NAN, FpSts::INV);
    }
    (T::from_bits(a.bits() ^ T::SIGN), FpSts::empty())
}

#[inline]
pub(crate) fn abs<T: IpuFloat>(a: T) -> (T, FpSts) {
    if a.is_nan() {
        return (T::NAN, FpSts::INV);
    }
    (T::from_bits(a.bits() & !T::SIGN), FpSts::empty())
}

/// `max(a, 0)`; `relu(-0) = +0`.
#[inline]
pub(crate) fn relu<T: IpuFloat>(a: T) -> (T, FpSts) {
    if a.is_nan() {
        return (T::NAN, FpSts::INV);
    }
    if a.wide() > 0.0 {
        (a, FpSts::empty())
    } else {
        (T::from_bits(0), FpSts::empty())
    }
}

/// IEEE 754-2019 `minimum`: `min(-0, +0) = -0`; NaN operands give NaN and INV.
#[inline]
pub(crate) fn min<T: IpuFloat>(a: T, b: T) -> (T, FpSts) {
    min_max(a, b, true)
}

/// IEEE 754-2019 `maximum`: `max(-0, +0) = +0`; NaN operands give NaN and INV.
#[inline]
pub(crate) fn max<T: IpuFloat>(a: T, b: T) -> (T, FpSts) {
    min_max(a, b, false)
}

#[inline]
fn min_max<T: IpuFloat>(a: T, b: T, min: bool) -> (T, FpSts) {
    if a.is_nan() || b.is_nan() {
        return (T::NAN, FpSts::INV);
    }
    let (x, y) = (a.wide(), b.wide());
    let v = if x < y {
        if min {
            a
        } else {
            b
        }
    } else if y < x {
        if min {
            b
        } else {
            a
        }
    } else if min {
        // Equal: identical bits, or ±0 where the sign decides.
        T::from_bits(a.bits() | b.bits())
    } else {
        T::from_bits(a.bits() & b.bits())
    };
    (v, FpSts::empty())
}

#[inline]
pub(crate) fn compare<T: IpuFloat>(op: CompareOp, a: T, b: T) -> (bool, FpSts) {
    let flags = if a.is_nan() || b.is_nan() {
        FpSts::INV
    } else {
        FpSts::empty()
    };
    (op.holds(a.wide(), b.wide()), flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_zeros_and_nans() {
        let (pz, nz) = (0.0f32, -0.0f32);
        assert_eq!(min(pz, nz).0.to_bits(), nz.to_bits());
        assert_eq!(min(nz, pz).0.to_bits(), nz.to_bits());
        assert_eq!(max(nz, pz).0.to_bits(), pz.to_bits());
        assert_eq!(relu(nz).0.to_bits(), 0);
        let (v, f) = min(1.0f32, f32::NAN);
        assert_eq!((v.to_bits(), f), (F32_NAN.to_bits(), FpSts::INV));
        assert_eq!(neg(f16::from_bits(0xfe01)).0.to_bits(), 0x7e00);
        assert_eq!(neg(f16::ONE).0, f16::NEG_ONE);
        assert_eq!(abs(f16::NEG_INFINITY).0, f16::INFINITY);
        assert_eq!(compare(CompareOp::Ne, f32::NAN, 1.0), (true, FpSts::INV));
        assert_eq!(
            compare(CompareOp::Le, f16::NAN, f16::NAN),
            (false, FpSts::INV)
        );
        assert_eq!(compare(CompareOp::Eq, -0.0f32, 0.0), (true, FpSts::empty()));
    }
}

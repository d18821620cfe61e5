//! Branch-free per-lane FP16 rounding on raw bit patterns, for the vectorised kernels.
//!
//! Each function rounds one value the way [`crate::numerics::round`]'s scalar core does —
//! nearest even, or stochastically with the decision `draw < ⌊f·2^32⌋` — using only integer
//! operations the compiler can vectorise (shifts by per-lane amounts, compares, selects).
//! It returns the FP16 bits and whether the lane is outside the range it handles (then the
//! caller re-rounds that lane through the scalar core, which also applies the overflow
//! policy and the NaN rules). Handled: every finite value whose FP16 result is below the
//! overflow range and which is zero or not tiny (f32 inputs ≥ 2^-32, f64 inputs ≥ 2^-35).
//!
//! With `e` the value's unbiased exponent, the FP16 result counts units of `2^(max(e,-14)-10)`:
//! - normal results (`e ≥ -14`): keep the exponent bits, drop 13 (f32) or 42 (f64) bits and
//!   re-bias — a carry out of the significand moves into the exponent, as it must;
//! - subnormal results: shift the full significand right so that one unit is `2^-24`.
//!
//! The dropped bits `rem` (`k` of them) give the rounding: nearest even compares them with
//! `2^(k-1)`; stochastic rounding compares the draw with `⌊rem·2^32/2^k⌋`.
//!
//! Beside them, the branch-free finiteness folds the kernels share ([`all_finite`],
//! [`all_finite_f16`]).

use half::f16;

/// Whether every f32 value is finite: a branch-free fold per block of 256, which
/// vectorises inside the callers' dispatched kernels (an early exit per value would not).
#[inline(always)]
pub(crate) fn all_finite(x: &[f32]) -> bool {
    x.chunks(256)
        .all(|c| c.iter().fold(true, |ok, v| ok & v.is_finite()))
}

/// Whether every FP16 value is finite (its exponent field not all ones): [`all_finite`]'s
/// fold on the bit patterns.
#[inline(always)]
pub(crate) fn all_finite_f16(x: &[f16]) -> bool {
    x.chunks(256).all(|c| {
        c.iter()
            .fold(true, |ok, v| ok & (v.to_bits() & 0x7c00 != 0x7c00))
    })
}

/// f32: rounds the bit pattern `bits` to FP16. `draw`: `None` for nearest even.
/// Returns `(fp16 bits, slow)`.
#[inline(always)]
pub(crate) fn f16_from_f32(bits: u32, draw: Option<u32>) -> (u16, bool) {
    let mag = bits & 0x7fff_ffff;
    let sign = (bits >> 16) & 0x8000;
    let exp = mag >> 23;
    let normal = exp >= 127 - 14;
    // Significand with the implicit bit (none for zero and f32 subnormals).
    let sig = if normal {
        mag
    } else {
        (mag & 0x7f_ffff) | (u32::from(exp != 0) << 23)
    };
    // Dropped bits: 13 for normal results; 126 − exp (14..=31) for subnormal results.
    let k = if normal {
        13
    } else {
        126u32.saturating_sub(exp).min(31)
    };
    let q = sig >> k;
    let rem = sig & ((1 << k) - 1);
    let up = match draw {
        None => {
            let half = 1 << (k - 1);
            (rem > half) | ((rem == half) & (q & 1 == 1))
        }
        Some(r) => (r >> (32 - k)) < rem,
    };
    let out = if normal {
        q.wrapping_sub((127 - 15) << 10)
    } else {
        q
    } + u32::from(up);
    // Slow: NaN, inf, results that may overflow (> 65504), and tiny non-zero inputs.
    let slow = (mag > 0x477f_e000) | ((mag != 0) & (exp < 95));
    ((out | sign) as u16, slow)
}

/// f64: rounds the exact value `hi + lo` (`lo` the exact error term of `hi`, see
/// [`crate::numerics::round::Tail`]) to FP16. `draw`: `None` for nearest even.
/// Returns `(fp16 bits, slow)`.
#[inline(always)]
pub(crate) fn f16_from_f64(hi: f64, lo: f64, draw: Option<u64>) -> (u16, bool) {
    let bits = hi.to_bits();
    let negative = bits >> 63 == 1;
    let sign = ((bits >> 48) & 0x8000) as u16;
    // The tail in the magnitude's direction.
    let above = if negative { lo < 0.0 } else { lo > 0.0 };
    let below = if negative { lo > 0.0 } else { lo < 0.0 };
    let mut mag = bits & 0x7fff_ffff_ffff_ffff;
    // Stochastic rounding of a value just below `mag` rounds its f64 predecessor (same cell,
    // same thresholds; see `round`).
    if draw.is_some() {
        mag -= u64::from(below & (mag != 0));
    }
    let exp = mag >> 52;
    let normal = exp >= 1023 - 14;
    let sig = if normal {
        mag
    } else {
        (mag & 0xf_ffff_ffff_ffff) | (u64::from(exp != 0) << 52)
    };
    // Dropped bits: 42 for normal results; 1051 − exp (43..=63) for subnormal results.
    let k = if normal {
        42
    } else {
        1051u64.saturating_sub(exp).min(63)
    };
    let q = sig >> k;
    let rem = sig & ((1 << k) - 1);
    let up = match draw {
        None => {
            let half = 1 << (k - 1);
            (rem > half) | ((rem == half) & (above | (!below & (q & 1 == 1))))
        }
        Some(r) => r < (rem >> (k - 32)),
    };
    let out = if normal {
        q.wrapping_sub((1023 - 15) << 10)
    } else {
        q
    } + u64::from(up);
    // Slow: NaN, inf, values beyond 65504 (which may overflow), tiny values.
    let slow = (mag > 0x40ef_fc00_0000_0000) | ((mag != 0) & (exp < 1051 - 63));
    (out as u16 | sign, slow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numerics::round::{Rounding, Tail};

    fn scalar(x: f64, tail: Tail, draw: Option<u32>) -> u16 {
        Rounding::nearest(false)
            .round_f16_with(x, tail, draw)
            .0
            .to_bits()
    }

    fn values() -> Vec<u32> {
        let mut v: Vec<u32> = (0..=0xffffu32)
            .map(|h| f32::from(half::f16::from_bits(h as u16)).to_bits())
            .collect();
        let mut x = 0x9e37_79b9u32;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            v.push(x);
            v.push((x & 0x8fff_ffff) | 0x3000_0000);
            v.push((x & 0x80ff_ffff) | 0x3300_0000);
        }
        v
    }

    #[test]
    fn f32_lanes_equal_the_scalar_core() {
        let mut d = 0x1234_5678u32;
        for bits in values() {
            d = d.wrapping_mul(747_796_405).wrapping_add(2_891_336_453);
            let x = f64::from(f32::from_bits(bits));
            for draw in [None, Some(d), Some(0), Some(u32::MAX)] {
                let (h, slow) = f16_from_f32(bits, draw);
                if !slow {
                    assert_eq!(h, scalar(x, Tail::Exact, draw), "0x{bits:08x} {draw:?}");
                }
            }
        }
    }

    #[test]
    fn f64_lanes_equal_the_scalar_core() {
        let mut d = 0x1234_5678u32;
        for bits in values() {
            d = d.wrapping_mul(747_796_405).wrapping_add(2_891_336_453);
            let x = f64::from(f32::from_bits(bits));
            // Exact values, and values with a tail below/above (x ± a tiny term).
            for (lo, tail) in [
                (0.0, Tail::Exact),
                (x * 1e-20, Tail::Above),
                (-x * 1e-20, Tail::Below),
            ] {
                let tail = if x < 0.0 && tail != Tail::Exact {
                    if tail == Tail::Above {
                        Tail::Below
                    } else {
                        Tail::Above
                    }
                } else {
                    tail
                };
                for draw in [None, Some(d), Some(0), Some(u32::MAX)] {
                    let (h, slow) = f16_from_f64(x, lo, draw.map(u64::from));
                    if !slow && x != 0.0 {
                        assert_eq!(h, scalar(x, tail, draw), "{x:e} {tail:?} {draw:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn fast_range_covers_typical_values() {
        for x in [
            1.0f32,
            -3.5,
            65504.0,
            1e-5,
            2f32.powi(-24),
            2f32.powi(-30),
            0.0,
            -0.0,
        ] {
            assert!(!f16_from_f32(x.to_bits(), None).1, "{x}");
            assert!(!f16_from_f64(f64::from(x), 0.0, None).1, "{x}");
        }
        for x in [65505.0f32, f32::INFINITY, f32::NAN, 1e-12] {
            assert!(f16_from_f32(x.to_bits(), None).1, "{x}");
            assert!(f16_from_f64(f64::from(x), 0.0, None).1, "{x}");
        }
    }
}

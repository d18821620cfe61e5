//! Bulk f32→f16 conversion (round to nearest even or stochastic, with the IPU overflow
//! policy) and exact f16→f32 widening.
//!
//! Nearest even: `half`'s `convert_from_f32_slice` (F16C `vcvtps2ph` when available; exact
//! IEEE RNE from f32, numerics.md §0.1) converts a block, then a vectorised scan finds the
//! lanes that came out infinite or NaN and re-rounds only those through the scalar core to
//! apply the IPU rules (saturation or NaN on overflow, canonical NaN, flags).
//!
//! Stochastic: each block of [`BLOCK`] elements takes [`BLOCK`] consecutive draws from the
//! stream (generated in bulk by [`SrRng::fill`]'s vector lanes); element `i` uses draw `i`,
//! exactly like [`super::super::cast::f32_to_f16`] would. Values whose result is a normal
//! FP16 number below the overflow range take a branch-free integer path: with 13 discarded
//! bits `d`, the result rounds up iff `draw >> 19 < d` — the same decision as the scalar
//! rule `draw < ⌊f·2^32⌋` with `f = d/2^13`. All other lanes (subnormal results, overflow,
//! NaN, inf) go through the scalar core with their draw.

use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::numerics::error::{check_len, NumericsError};
use crate::numerics::flags::FpSts;
use crate::numerics::rng::SrRng;
use crate::numerics::round::{Rounding, Tail, F32_NAN};
use crate::numerics::simd::simd_dispatch;

/// Elements converted per block (and draws generated per block).
pub const BLOCK: usize = 256;

/// Converts `src` to FP16 into `dst` with the rounding `r` (nearest even or stochastic,
/// `nanoo` policy on overflow). Returns the OR of the flags raised: OFLO on overflow (and
/// INV with `nanoo`), INV for NaN inputs. Stochastic rounding consumes `src.len()` draws.
pub fn f32_to_f16_slice(
    src: &[f32],
    dst: &mut [f16],
    r: &mut Rounding,
) -> Result<FpSts, NumericsError> {
    check_len("f32_to_f16_slice", "dst", src.len(), dst.len())?;
    let nanoo = r.nanoo();
    Ok(match r.rng() {
        Some(rng) => sr_dispatch(src, dst, rng, nanoo),
        None => rne(src, dst, nanoo),
    })
}

/// Widens `src` to FP32 into `dst` (exact); NaN inputs give the canonical NaN and INV.
pub fn f16_to_f32_slice(src: &[f16], dst: &mut [f32]) -> Result<FpSts, NumericsError> {
    check_len("f16_to_f32_slice", "dst", src.len(), dst.len())?;
    src.convert_to_f32_slice(dst);
    let nans = src.iter().filter(|h| h.to_bits() & 0x7fff > 0x7c00).count();
    if nans == 0 {
        return Ok(FpSts::empty());
    }
    for (h, x) in src.iter().zip(dst.iter_mut()) {
        if h.is_nan() {
            *x = F32_NAN;
        }
    }
    Ok(FpSts::INV)
}

fn rne(src: &[f32], dst: &mut [f16], nanoo: bool) -> FpSts {
    let policy = Rounding::nearest(nanoo);
    let mut flags = FpSts::empty();
    for (s, d) in src.chunks(BLOCK).zip(dst.chunks_mut(BLOCK)) {
        d.convert_from_f32_slice(s);
        let specials = d.iter().filter(|h| h.to_bits() & 0x7c00 == 0x7c00).count();
        if specials != 0 {
            for (x, h) in s.iter().zip(d.iter_mut()) {
                if h.to_bits() & 0x7c00 == 0x7c00 {
                    let (v, f) = policy.round_f16_with(f64::from(*x), Tail::Exact, None);
                    *h = v;
                    flags |= f;
                }
            }
        }
    }
    flags
}

/// f32 bits of 2^-14, the smallest normal FP16 value.
const FAST_LO: u32 = 0x3880_0000;
/// f32 bits of 65504, the largest FP16 value (nothing at or below it can overflow).
const FAST_HI: u32 = 0x477f_e000;
/// `(127 - 15) << 10`: the exponent re-bias from f32 to f16 in the shifted bits.
const REBIAS: u32 = (127 - 15) << 10;

simd_dispatch! {
    fn sr_dispatch(src: &[f32], dst: &mut [f16], rng: &mut SrRng, nanoo: bool) -> FpSts => sr_body
}

#[inline(always)]
fn sr_body(src: &[f32], dst: &mut [f16], rng: &mut SrRng, nanoo: bool) -> FpSts {
    let policy = Rounding::nearest(nanoo);
    let mut flags = FpSts::empty();
    let mut draws = [0u32; BLOCK];
    for (s, d) in src.chunks(BLOCK).zip(dst.chunks_mut(BLOCK)) {
        let draws = &mut draws[..s.len()];
        rng.fill_inline(draws);
        let mut slow = 0u32;
        for ((x, h), r) in s.iter().zip(d.iter_mut()).zip(draws.iter()) {
            let bits = x.to_bits();
            let mag = bits & 0x7fff_ffff;
            slow |= u32::from(mag.wrapping_sub(FAST_LO) > FAST_HI - FAST_LO);
            let up = u32::from((r >> 19) < (mag & 0x1fff));
            let m = (mag >> 13).wrapping_sub(REBIAS).wrapping_add(up);
            *h = f16::from_bits((m | ((bits >> 16) & 0x8000)) as u16);
        }
        if slow != 0 {
            for ((x, h), r) in s.iter().zip(d.iter_mut()).zip(draws.iter()) {
                let mag = x.to_bits() & 0x7fff_ffff;
                if mag.wrapping_sub(FAST_LO) > FAST_HI - FAST_LO {
                    let (v, f) = policy.round_f16_with(f64::from(*x), Tail::Exact, Some(*r));
                    *h = v;
                    flags |= f;
                }
            }
        }
    }
    flags
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numerics::cast::f32_to_f16;

    /// Inputs covering every class and the fast/slow boundaries.
    fn inputs() -> Vec<f32> {
        let mut v: Vec<f32> = vec![
            0.0, -0.0, 1.0, 65504.0, 65519.996, 65520.0, 1e9, f32::MAX, f32::INFINITY,
            f32::NEG_INFINITY, f32::NAN, 2f32.powi(-14), 2f32.powi(-15), 2f32.powi(-24),
            2f32.powi(-25), 3.0 * 2f32.powi(-26), 1e-30, f32::from_bits(1),
        ];
        for bits in [FAST_LO - 1, FAST_LO, FAST_HI, FAST_HI + 1, 0x477f_efff, 0x387f_e000] {
            v.push(f32::from_bits(bits));
        }
        let mut x = 0x1234_5678u32;
        for _ in 0..5000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            v.push(f32::from_bits(x));
            v.push(f32::from_bits((x & 0x07ff_ffff) | 0x3800_0000)); // mostly in the FP16 range
        }
        let negated: Vec<f32> = v.iter().map(|x| -x).collect();
        v.extend(negated);
        v
    }

    #[test]
    fn slices_equal_scalar_casts_in_both_modes() {
        let src = inputs();
        for nanoo in [false, true] {
            for sr in [false, true] {
                let mut rng_slice = SrRng::new(3, 1, 2);
                let mut rng_scalar = rng_slice.clone();
                let mut dst = vec![f16::ZERO; src.len()];
                let flags = f32_to_f16_slice(&src, &mut dst, &mut Rounding::new(sr, nanoo, &mut rng_slice)).unwrap();
                let mut r = Rounding::new(sr, nanoo, &mut rng_scalar);
                let mut expect_flags = FpSts::empty();
                for (x, h) in src.iter().zip(&dst) {
                    let (v, f) = f32_to_f16(*x, &mut r);
                    assert_eq!(h.to_bits(), v.to_bits(), "{x:e} sr={sr} nanoo={nanoo}");
                    expect_flags |= f;
                }
                assert_eq!(flags, expect_flags);
                assert_eq!(rng_slice, rng_scalar, "draws consumed");
            }
        }
    }

    #[test]
    fn widening_is_exact_and_flags_nans() {
        let src: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let mut dst = vec![0f32; src.len()];
        assert_eq!(f16_to_f32_slice(&src, &mut dst), Ok(FpSts::INV));
        for (h, x) in src.iter().zip(&dst) {
            if h.is_nan() {
                assert_eq!(x.to_bits(), 0x7fc0_0000);
            } else {
                assert_eq!(f64::from(*x), h.to_f64());
            }
        }
    }

    #[test]
    fn length_mismatch_is_an_error() {
        let err = f32_to_f16_slice(&[1.0; 3], &mut [f16::ZERO; 2], &mut Rounding::nearest(false));
        assert_eq!(
            err,
            Err(NumericsError::Length { kernel: "f32_to_f16_slice", operand: "dst", expected: 3, found: 2 })
        );
    }
}

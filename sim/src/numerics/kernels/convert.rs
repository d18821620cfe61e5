//! Bulk f32→f16 conversion (round to nearest even or stochastic, with the IPU overflow
//! policy) and exact f16→f32 widening, and FP16 `+ − ×` as one fused widen, operate and
//! round pass where the CPU has AVX-512 ([`sums_products_rne`]).
//!
//! Both roundings work in blocks of [`BLOCK`] elements, first with a pass that is exact for
//! values with normal FP16 results and notes whether the block holds any other value:
//! nearest even uses F16C's `vcvtps2ph` where the CPU has it (IEEE nearest even from f32,
//! as `half` uses it, numerics.md §0.1) or a short integer path; stochastic rounding a
//! short branch-free integer path vectorised by the compiler (AVX-512/AVX2 via runtime
//! dispatch). Blocks with other values go through the general lane rounding of
//! `kernels::lanes` (subnormal results too). Stochastic rounding takes
//! [`BLOCK`] consecutive draws per block from the stream (generated in bulk by its vector
//! lanes, like [`SrRng::fill`]); element `i` uses draw `i`, exactly as
//! [`super::super::cast::f32_to_f16`] would.
//!
//! A block that holds a value the lanes do not handle (NaN, inf, beyond 65504, non-zero
//! below 2^-32) re-rounds just those lanes through the scalar core ([`Rounding`]), with
//! their draws, which applies the IPU rules (saturation or NaN on overflow, canonical NaN,
//! flags).

use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::numerics::error::{check_len, NumericsError};
use crate::numerics::flags::FpSts;
use crate::numerics::ops::ArithOp;
use crate::numerics::rng::{SrRng, LANES};
use crate::numerics::round::{Rounding, Tail, F32_NAN};
use crate::numerics::simd::simd_dispatch;

use super::lanes;

/// Elements converted per block (and draws generated per block).
pub const BLOCK: usize = 1024;

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

/// [`widen`] of rows of `run` consecutive FP16 values: row `r` of `src` (at `src[r · run ..]`)
/// to `dst[r · ld ..][..run]`, eight values at a time with F16C where the CPU has it (the
/// runs of a channel-grouped block put position-major, `codelets::window_layout`). `run`
/// positive and at most `ld`; `dst` must hold every row (the caller checks).
pub fn widen_rows(src: &[f16], run: usize, dst: &mut [f32], ld: usize) {
    debug_assert!(run > 0 && run <= ld);
    #[cfg(target_arch = "x86_64")]
    {
        if run.is_multiple_of(8)
            && std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("f16c")
        {
            // SAFETY: the CPU supports every feature `widen_rows_f16c` was compiled for.
            return unsafe { x86::widen_rows_f16c(src, run, dst, ld) };
        }
    }
    for (r, row) in src.chunks_exact(run).enumerate() {
        row.convert_to_f32_slice(&mut dst[r * ld..r * ld + run]);
    }
}

/// Widens `src` to FP32 into `dst` (exact, as `half`'s conversion: NaNs stay NaN, quieted),
/// with `vcvtph2ps` 16 (AVX-512F) or 8 (F16C) lanes at a time where the CPU has it: the
/// hot widening of the AMP and window operands and the FP16 block kernels. Lengths must
/// match (the shorter one bounds the conversion).
pub fn widen(src: &[f16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports every feature `widen_avx512` was compiled for.
            return unsafe { x86::widen_avx512(src, dst) };
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c") {
            // SAFETY: the CPU supports every feature `widen_f16c` was compiled for.
            return unsafe { x86::widen_f16c(src, dst) };
        }
    }
    src.convert_to_f32_slice(dst);
}

/// [`widen`], returning whether every value is finite (no exponent field all ones): one
/// pass over the FP16 values where [`widen`] and a check of its output would take two (the
/// AMP codelet's operands, whose finiteness decides the product's path).
pub fn widen_finite(src: &[f16], dst: &mut [f32]) -> bool {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports every feature `widen_finite_avx512` was compiled for.
            return unsafe { x86::widen_finite_avx512(src, dst) };
        }
    }
    widen(src, dst);
    lanes::all_finite_f16(src)
}

/// Widens `src` to FP32 into `dst` (exact); NaN inputs give the canonical NaN and INV.
pub fn f16_to_f32_slice(src: &[f16], dst: &mut [f32]) -> Result<FpSts, NumericsError> {
    check_len("f16_to_f32_slice", "dst", src.len(), dst.len())?;
    widen(src, dst);
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

/// `dst[j] = a[j] op b[j]`, widened to f32, computed in f32 and rounded to FP16 by nearest
/// even, in one pass of 16 lanes where the CPU has AVX-512 (load, `vcvtph2ps`, the
/// operation, `vcvtps2ph`: the same operations as widening, computing over whole slices
/// and [`f32_to_f16_slice`], without the f32 values going through memory). Returns how
/// many leading elements it wrote (a multiple of 16, 0 without AVX-512), or `None` when a
/// result is not zero and outside the normal FP16 range (NaN, infinite, overflowing or
/// below 2^-14): the caller then rounds the slice the general way, which applies the IPU
/// rules and raises the flags. Any other operation than `+ − ×` writes nothing (`Some(0)`).
pub(crate) fn sums_products_rne(
    op: ArithOp,
    a: &[f16],
    b: &[f16],
    dst: &mut [f16],
) -> Option<usize> {
    if !matches!(op, ArithOp::Add | ArithOp::Sub | ArithOp::Mul) {
        return Some(0);
    }
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl")
        {
            // SAFETY: the CPU supports every feature `sums_products_avx512` was compiled for.
            let (done, outside) = unsafe { x86::sums_products_avx512(op, a, b, dst) };
            return (!outside).then_some(done);
        }
    }
    let _ = (op, a, b, dst);
    Some(0)
}

/// `(127 - 15) << 10`: the exponent re-bias from f32 to f16 in the shifted bits.
const REBIAS: u32 = (127 - 15) << 10;

/// Nearest-even conversion, with F16C's `vcvtps2ph` for the normal-range pass where the
/// CPU has it (AVX-512F: 16 lanes; F16C + AVX2: 8 lanes), else the portable integer pass.
fn rne(src: &[f32], dst: &mut [f16], nanoo: bool) -> FpSts {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl")
        {
            // SAFETY: the CPU supports every feature `rne_avx512` was compiled for.
            return unsafe { x86::rne_avx512(src, dst, nanoo) };
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c") {
            // SAFETY: the CPU supports every feature `rne_f16c` was compiled for.
            return unsafe { x86::rne_f16c(src, dst, nanoo) };
        }
    }
    blocks_rne(src, dst, nanoo, normal_pass_rne)
}

simd_dispatch! {
    fn sr_dispatch(src: &[f32], dst: &mut [f16], rng: &mut SrRng, nanoo: bool) -> FpSts => sr_body
}

/// Runs `pass` (the normal-range rounding of a block; true if any value is outside the
/// normal range) over every block, finishing the blocks that need it.
#[inline(always)]
fn blocks_rne(
    src: &[f32],
    dst: &mut [f16],
    nanoo: bool,
    pass: impl Fn(&[f32], &mut [f16]) -> bool,
) -> FpSts {
    let mut flags = FpSts::empty();
    for (s, d) in src.chunks(BLOCK).zip(dst.chunks_mut(BLOCK)) {
        if pass(s, d) {
            flags |= finish_block(s, d, None, nanoo);
        }
    }
    flags
}

#[inline(always)]
fn sr_body(src: &[f32], dst: &mut [f16], rng: &mut SrRng, nanoo: bool) -> FpSts {
    let mut flags = FpSts::empty();
    let mut draws = [0u32; BLOCK];
    // One bulk generator for the whole call; only the last block can be partial, and its
    // draws beyond a multiple of `LANES` come from the scalar stream.
    let mut lanes = rng.lanes();
    for (s, d) in src.chunks(BLOCK).zip(dst.chunks_mut(BLOCK)) {
        let draws = &mut draws[..s.len()];
        let bulk = s.len() - s.len() % LANES;
        lanes.fill(&mut draws[..bulk]);
        rng.resume(&lanes);
        for r in &mut draws[bulk..] {
            *r = rng.next_u32();
        }
        if normal_pass_sr(s, d, draws) {
            flags |= finish_block(s, d, Some(draws), nanoo);
        }
    }
    flags
}

/// f32 bits of 2^-14 and of 65504: values in between give normal FP16 results that
/// cannot overflow, the case of nearly all real data. Zeros (a ReLU's outputs and
/// gradients, padding) convert exactly too, and the passes below take them as well.
const NORMAL_LO: u32 = 0x3880_0000;
const NORMAL_HI: u32 = 0x477f_e000;

/// Whether the f32 `x` is neither zero nor in `[2^-14, 65504]` in magnitude: the values
/// the normal passes leave to [`finish_block`].
#[inline(always)]
fn outside_normal(x: f32) -> bool {
    let mag = x.to_bits() & 0x7fff_ffff;
    (mag.wrapping_sub(NORMAL_LO) > NORMAL_HI - NORMAL_LO) & (mag != 0)
}

/// The FP16 bits of a normal pass's rounded magnitude `m` (in f32 exponent bias) with the
/// sign of `x`: the re-biased value, or a signed zero for a zero.
#[inline(always)]
fn normal_bits(x: f32, m: u32) -> u16 {
    let mag = if x.to_bits() & 0x7fff_ffff == 0 {
        0
    } else {
        m.wrapping_sub(REBIAS)
    };
    (mag | ((x.to_bits() >> 16) & 0x8000)) as u16
}

/// Nearest even for normal results: add `0xfff` plus the lowest kept bit to the 13 dropped
/// bits and truncate (a carry moves into the exponent). Returns whether any value is
/// outside the normal range (its lane holds garbage until [`finish_block`]).
#[inline(always)]
fn normal_pass_rne(s: &[f32], d: &mut [f16]) -> bool {
    let mut outside = false;
    for (x, h) in s.iter().zip(d.iter_mut()) {
        let mag = x.to_bits() & 0x7fff_ffff;
        let m = (mag + 0x0fff + ((mag >> 13) & 1)) >> 13;
        *h = f16::from_bits(normal_bits(*x, m));
        outside |= outside_normal(*x);
    }
    outside
}

/// Stochastic rounding for normal results: up iff `draw < ⌊f·2^32⌋` with
/// `f = (dropped bits)/2^13`, i.e. iff `draw >> 19 < dropped bits`.
#[inline(always)]
fn normal_pass_sr(s: &[f32], d: &mut [f16], draws: &[u32]) -> bool {
    let mut outside = false;
    for ((x, h), r) in s.iter().zip(d.iter_mut()).zip(draws) {
        let mag = x.to_bits() & 0x7fff_ffff;
        let m = (mag >> 13) + u32::from((r >> 19) < (mag & 0x1fff));
        *h = f16::from_bits(normal_bits(*x, m));
        outside |= outside_normal(*x);
    }
    outside
}

/// Lanes re-rounded together when a block holds values outside the normal range.
const SUB: usize = 32;

/// Re-rounds the parts of a block that hold values outside the normal range: each group of
/// [`SUB`] lanes with such a value goes through the vectorised general lane rounding of
/// [`lanes`] (subnormal results too), then the scalar core for the lanes that one does not
/// handle (NaN, inf, overflow, tiny values), which applies the IPU rules.
#[inline(always)]
fn finish_block(s: &[f32], d: &mut [f16], draws: Option<&[u32]>, nanoo: bool) -> FpSts {
    let mut flags = FpSts::empty();
    for (k, (s, d)) in s.chunks(SUB).zip(d.chunks_mut(SUB)).enumerate() {
        if s.iter().fold(false, |o, x| o | outside_normal(*x)) {
            let draws = draws.map(|r| &r[k * SUB..k * SUB + s.len()]);
            flags |= general_lanes(s, d, draws, nanoo);
        }
    }
    flags
}

#[inline(always)]
fn general_lanes(s: &[f32], d: &mut [f16], draws: Option<&[u32]>, nanoo: bool) -> FpSts {
    let mut slow = false;
    match draws {
        None => {
            for (x, h) in s.iter().zip(d.iter_mut()) {
                let (bits, lane_slow) = lanes::f16_from_f32(x.to_bits(), None);
                *h = f16::from_bits(bits);
                slow |= lane_slow;
            }
        }
        Some(draws) => {
            for ((x, h), r) in s.iter().zip(d.iter_mut()).zip(draws) {
                let (bits, lane_slow) = lanes::f16_from_f32(x.to_bits(), Some(*r));
                *h = f16::from_bits(bits);
                slow |= lane_slow;
            }
        }
    }
    if !slow {
        return FpSts::empty();
    }
    let policy = Rounding::nearest(nanoo);
    let mut flags = FpSts::empty();
    for (i, (x, h)) in s.iter().zip(d.iter_mut()).enumerate() {
        if lanes::f16_from_f32(x.to_bits(), None).1 {
            let (v, f) = policy.round_f16_with(f64::from(*x), Tail::Exact, draws.map(|r| r[i]));
            *h = v;
            flags |= f;
        }
    }
    flags
}

/// The F16C normal-range passes (the only `std::arch` code of the kernels).
#[cfg(target_arch = "x86_64")]
mod x86 {
    use half::f16;
    use std::arch::x86_64::*;

    use super::{blocks_rne, normal_pass_rne, ArithOp, FpSts, NORMAL_HI, NORMAL_LO};

    /// IEEE nearest even (`vcvtps2ph` rounding control; the MXCSR flags it may set are
    /// never read).
    const RNE: i32 = _MM_FROUND_TO_NEAREST_INT;

    /// [`widen_avx512`], with whether every value is finite: the exponent fields all ones
    /// found by a compare per 16 values, OR-ed together.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn widen_finite_avx512(src: &[f16], dst: &mut [f32]) -> bool {
        let exponent = _mm256_set1_epi16(0x7c00);
        let mut ones = _mm256_setzero_si256();
        let mut s = src.chunks_exact(16);
        let mut d = dst.chunks_exact_mut(16);
        for (h, x) in (&mut s).zip(&mut d) {
            // SAFETY: `h` holds 16 f16 (32 bytes) and `x` 16 f32 (64 bytes); both accesses
            // are unaligned-tolerant.
            unsafe {
                let v = _mm256_loadu_si256(h.as_ptr().cast());
                let e = _mm256_and_si256(v, exponent);
                ones = _mm256_or_si256(ones, _mm256_cmpeq_epi16(e, exponent));
                _mm512_storeu_ps(x.as_mut_ptr(), _mm512_cvtph_ps(v));
            }
        }
        let rest = s.remainder();
        half::slice::HalfFloatSliceExt::convert_to_f32_slice(rest, d.into_remainder());
        _mm256_testz_si256(ones, ones) == 1 && super::lanes::all_finite_f16(rest)
    }

    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn widen_avx512(src: &[f16], dst: &mut [f32]) {
        let mut s = src.chunks_exact(16);
        let mut d = dst.chunks_exact_mut(16);
        for (h, x) in (&mut s).zip(&mut d) {
            // SAFETY: `h` holds 16 f16 (32 bytes) and `x` 16 f32 (64 bytes); both accesses
            // are unaligned-tolerant.
            unsafe {
                let v = _mm256_loadu_si256(h.as_ptr().cast());
                _mm512_storeu_ps(x.as_mut_ptr(), _mm512_cvtph_ps(v));
            }
        }
        half::slice::HalfFloatSliceExt::convert_to_f32_slice(s.remainder(), d.into_remainder());
    }

    /// [`super::widen_rows`] for runs of a multiple of 8 values.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn widen_rows_f16c(src: &[f16], run: usize, dst: &mut [f32], ld: usize) {
        for (r, row) in src.chunks_exact(run).enumerate() {
            let out = &mut dst[r * ld..r * ld + run];
            for (h, x) in row.chunks_exact(8).zip(out.chunks_exact_mut(8)) {
                // SAFETY: `h` holds 8 f16 (16 bytes) and `x` 8 f32 (32 bytes); both
                // accesses are unaligned-tolerant.
                unsafe {
                    let v = _mm_loadu_si128(h.as_ptr().cast());
                    _mm256_storeu_ps(x.as_mut_ptr(), _mm256_cvtph_ps(v));
                }
            }
        }
    }

    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn widen_f16c(src: &[f16], dst: &mut [f32]) {
        let mut s = src.chunks_exact(8);
        let mut d = dst.chunks_exact_mut(8);
        for (h, x) in (&mut s).zip(&mut d) {
            // SAFETY: `h` holds 8 f16 (16 bytes) and `x` 8 f32 (32 bytes); both accesses are
            // unaligned-tolerant.
            unsafe {
                let v = _mm_loadu_si128(h.as_ptr().cast());
                _mm256_storeu_ps(x.as_mut_ptr(), _mm256_cvtph_ps(v));
            }
        }
        half::slice::HalfFloatSliceExt::convert_to_f32_slice(s.remainder(), d.into_remainder());
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    pub(super) unsafe fn rne_avx512(src: &[f32], dst: &mut [f16], nanoo: bool) -> FpSts {
        // SAFETY (closure): this function only runs on CPUs with AVX-512F.
        blocks_rne(src, dst, nanoo, |s, d| unsafe { pass_avx512(s, d) })
    }

    #[target_feature(enable = "avx2,f16c,fma")]
    pub(super) unsafe fn rne_f16c(src: &[f32], dst: &mut [f16], nanoo: bool) -> FpSts {
        // SAFETY (closure): this function only runs on CPUs with AVX2 and F16C.
        blocks_rne(src, dst, nanoo, |s, d| unsafe { pass_f16c(s, d) })
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    unsafe fn pass_avx512(s: &[f32], d: &mut [f16]) -> bool {
        let abs = _mm512_set1_epi32(0x7fff_ffff);
        let lo = _mm512_set1_epi32(NORMAL_LO as i32);
        let span = _mm512_set1_epi32((NORMAL_HI - NORMAL_LO) as i32);
        let mut outside: u16 = 0;
        let mut src = s.chunks_exact(16);
        let mut dst = d.chunks_exact_mut(16);
        for (x, h) in (&mut src).zip(&mut dst) {
            // SAFETY: `x` holds 16 f32 (64 bytes) and `h` 16 f16 (32 bytes); both accesses
            // are unaligned-tolerant.
            let v = unsafe { _mm512_loadu_ps(x.as_ptr()) };
            let packed = _mm512_cvtps_ph::<RNE>(v);
            unsafe { _mm256_storeu_si256(h.as_mut_ptr().cast(), packed) };
            let mag = _mm512_and_si512(_mm512_castps_si512(v), abs);
            // Zeros convert exactly (to a signed zero), as in `outside_normal`.
            let nonzero = _mm512_test_epi32_mask(mag, mag);
            outside |= _mm512_mask_cmpgt_epu32_mask(nonzero, _mm512_sub_epi32(mag, lo), span);
        }
        normal_pass_rne(src.remainder(), dst.into_remainder()) | (outside != 0)
    }

    /// [`super::sums_products_rne`] over the whole 16-lane groups: (elements written,
    /// whether any result is non-zero and outside the normal range).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    pub(super) unsafe fn sums_products_avx512(
        op: ArithOp,
        a: &[f16],
        b: &[f16],
        d: &mut [f16],
    ) -> (usize, bool) {
        let abs = _mm512_set1_epi32(0x7fff_ffff);
        let lo = _mm512_set1_epi32(NORMAL_LO as i32);
        let span = _mm512_set1_epi32((NORMAL_HI - NORMAL_LO) as i32);
        let mut outside: u16 = 0;
        let groups = a.chunks_exact(16).zip(b.chunks_exact(16));
        let n = groups.len().min(d.len() / 16) * 16;
        for ((x, y), h) in groups.zip(d.chunks_exact_mut(16)) {
            // SAFETY: `x` and `y` hold 16 f16 (32 bytes) each and `h` 16 f16; the accesses
            // are unaligned-tolerant.
            let (x, y) = unsafe {
                (
                    _mm512_cvtph_ps(_mm256_loadu_si256(x.as_ptr().cast())),
                    _mm512_cvtph_ps(_mm256_loadu_si256(y.as_ptr().cast())),
                )
            };
            // The same operation for every group: a branch the CPU predicts.
            let v = match op {
                ArithOp::Add => _mm512_add_ps(x, y),
                ArithOp::Sub => _mm512_sub_ps(x, y),
                // `Mul`, the only other operation the caller lets in.
                _ => _mm512_mul_ps(x, y),
            };
            let packed = _mm512_cvtps_ph::<RNE>(v);
            // SAFETY: as above.
            unsafe { _mm256_storeu_si256(h.as_mut_ptr().cast(), packed) };
            let mag = _mm512_and_si512(_mm512_castps_si512(v), abs);
            let nonzero = _mm512_test_epi32_mask(mag, mag);
            outside |= _mm512_mask_cmpgt_epu32_mask(nonzero, _mm512_sub_epi32(mag, lo), span);
        }
        (n, outside != 0)
    }

    #[target_feature(enable = "avx2,f16c,fma")]
    unsafe fn pass_f16c(s: &[f32], d: &mut [f16]) -> bool {
        let abs = _mm256_set1_epi32(0x7fff_ffff);
        let lo = _mm256_set1_epi32(NORMAL_LO as i32);
        let hi = _mm256_set1_epi32(NORMAL_HI as i32);
        let mut outside = _mm256_setzero_si256();
        let mut src = s.chunks_exact(8);
        let mut dst = d.chunks_exact_mut(8);
        for (x, h) in (&mut src).zip(&mut dst) {
            // SAFETY: `x` holds 8 f32 (32 bytes) and `h` 8 f16 (16 bytes); both accesses
            // are unaligned-tolerant.
            let v = unsafe { _mm256_loadu_ps(x.as_ptr()) };
            let packed = _mm256_cvtps_ph::<RNE>(v);
            unsafe { _mm_storeu_si128(h.as_mut_ptr().cast(), packed) };
            // Magnitudes are non-negative as i32, so signed compares order them.
            let mag = _mm256_and_si256(_mm256_castps_si256(v), abs);
            let out = _mm256_or_si256(_mm256_cmpgt_epi32(lo, mag), _mm256_cmpgt_epi32(mag, hi));
            // Zeros convert exactly (to a signed zero), as in `outside_normal`.
            let zero = _mm256_cmpeq_epi32(mag, _mm256_setzero_si256());
            outside = _mm256_or_si256(outside, _mm256_andnot_si256(zero, out));
        }
        normal_pass_rne(src.remainder(), dst.into_remainder())
            | (_mm256_movemask_epi8(outside) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numerics::cast::f32_to_f16;

    /// Inputs covering every class and the fast/slow boundaries.
    fn inputs() -> Vec<f32> {
        let mut v: Vec<f32> = vec![
            0.0,
            -0.0,
            1.0,
            65504.0,
            65519.996,
            65520.0,
            1e9,
            f32::MAX,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            2f32.powi(-14),
            2f32.powi(-15),
            2f32.powi(-24),
            2f32.powi(-25),
            3.0 * 2f32.powi(-26),
            1e-30,
            f32::from_bits(1),
        ];
        // Around 2^-14, 65504 (the lanes' limit), 2^-32 (the tiny limit) and the overflow tie.
        for bits in [
            0x387f_ffff,
            0x3880_0000,
            0x477f_e000,
            0x477f_e001,
            0x477f_efff,
            0x387f_e000,
            0x2f7f_ffff,
            0x2f80_0000,
        ] {
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

    /// Blocks of normal values and signed zeros only (a ReLU's output): the normal passes
    /// convert them without `finish_block`, to the scalar casts' bits.
    #[test]
    fn zeros_among_normal_values_equal_scalar_casts() {
        let src: Vec<f32> = (0..3 * BLOCK + 21)
            .map(|i| match i % 5 {
                0 => 0.0,
                3 => -0.0,
                _ => (i as f32 * 0.37).sin() * 300.0 + 1.5,
            })
            .collect();
        for nanoo in [false, true] {
            for sr in [false, true] {
                let mut rng_slice = SrRng::new(5, 1, 2);
                let mut rng_scalar = rng_slice.clone();
                let mut dst = vec![f16::from_bits(0x7bff); src.len()];
                let flags = f32_to_f16_slice(
                    &src,
                    &mut dst,
                    &mut Rounding::new(sr, nanoo, &mut rng_slice),
                )
                .unwrap();
                assert_eq!(flags, FpSts::empty());
                let mut r = Rounding::new(sr, nanoo, &mut rng_scalar);
                for (x, h) in src.iter().zip(&dst) {
                    let (v, _) = f32_to_f16(*x, &mut r);
                    assert_eq!(h.to_bits(), v.to_bits(), "{x:e} sr={sr} nanoo={nanoo}");
                }
                assert_eq!(rng_slice, rng_scalar, "draws consumed");
            }
        }
    }

    #[test]
    fn slices_equal_scalar_casts_in_both_modes() {
        let src = inputs();
        for nanoo in [false, true] {
            for sr in [false, true] {
                let mut rng_slice = SrRng::new(3, 1, 2);
                let mut rng_scalar = rng_slice.clone();
                let mut dst = vec![f16::ZERO; src.len()];
                let flags = f32_to_f16_slice(
                    &src,
                    &mut dst,
                    &mut Rounding::new(sr, nanoo, &mut rng_slice),
                )
                .unwrap();
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
    fn every_nearest_even_implementation_agrees() {
        let src = inputs();
        for nanoo in [false, true] {
            let mut expect = vec![f16::ZERO; src.len()];
            let expect_flags = blocks_rne(&src, &mut expect, nanoo, normal_pass_rne);
            let mut got = vec![f16::ZERO; src.len()];
            let mut run = |name: &str, f: &dyn Fn(&[f32], &mut [f16]) -> FpSts| {
                let flags = f(&src, &mut got);
                assert_eq!(flags, expect_flags, "{name}");
                assert!(
                    got.iter()
                        .zip(&expect)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{name}"
                );
            };
            run("dispatched", &|s, d| rne(s, d, nanoo));
            #[cfg(target_arch = "x86_64")]
            {
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c") {
                    // SAFETY: the features were just detected.
                    run("f16c", &|s, d| unsafe { x86::rne_f16c(s, d, nanoo) });
                }
                if std::is_x86_feature_detected!("avx512f")
                    && std::is_x86_feature_detected!("avx512bw")
                    && std::is_x86_feature_detected!("avx512vl")
                {
                    // SAFETY: the features were just detected.
                    run("avx512", &|s, d| unsafe { x86::rne_avx512(s, d, nanoo) });
                }
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

    /// The vector widening gives `half`'s conversion bit for bit for every FP16 pattern,
    /// at every offset into the vector lanes (remainders of 0 to 16 elements).
    #[test]
    fn bulk_widening_equals_half_for_every_pattern() {
        let src: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        for skip in [0, 1, 7, 9, 15] {
            let src = &src[skip..];
            let mut got = vec![0f32; src.len()];
            widen(src, &mut got);
            for (h, x) in src.iter().zip(&got) {
                assert_eq!(x.to_bits(), h.to_f32().to_bits(), "{:#06x}", h.to_bits());
            }
        }
    }

    /// Widening with the finiteness check gives the widening's bits and says whether any
    /// value is an infinity or a NaN, one at every position of a vector and of the
    /// remainder, over every FP16 pattern of the finite ones.
    #[test]
    fn widening_finds_every_non_finite_value() {
        let finite: Vec<f16> = (0..=u16::MAX)
            .map(f16::from_bits)
            .filter(|h| h.is_finite())
            .collect();
        let mut got = vec![0f32; finite.len()];
        assert!(widen_finite(&finite, &mut got));
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let mut want = vec![0f32; finite.len()];
        widen(&finite, &mut want);
        assert_eq!(bits(&got), bits(&want));
        for bad in [
            f16::INFINITY,
            f16::NEG_INFINITY,
            f16::NAN,
            f16::from_bits(0xfc01),
        ] {
            for len in [16, 37] {
                for at in 0..len {
                    let mut src = finite[1000..1000 + len].to_vec();
                    src[at] = bad;
                    let mut got = vec![0f32; len];
                    assert!(!widen_finite(&src, &mut got), "{bad} at {at} of {len}");
                    let mut want = vec![0f32; len];
                    widen(&src, &mut want);
                    assert_eq!(bits(&got), bits(&want));
                }
            }
        }
    }

    #[test]
    fn length_mismatch_is_an_error() {
        let err = f32_to_f16_slice(
            &[1.0; 3],
            &mut [f16::ZERO; 2],
            &mut Rounding::nearest(false),
        );
        assert_eq!(
            err,
            Err(NumericsError::Length {
                kernel: "f32_to_f16_slice",
                operand: "dst",
                expected: 3,
                found: 2
            })
        );
    }
}

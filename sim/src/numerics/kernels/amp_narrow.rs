//! The FP32-partials kernel of [`super`] (`amp.rs`) for narrow products — many rows, at
//! most [`NARROW`] columns, as a convolution computed position-major has (its rows the
//! output positions, its columns a few output channels) — written with AVX-512 intrinsics:
//! eight rows at a time against one 16-lane vector of columns (masked for the last), so that
//! each loaded vector of `b` serves eight independent FMA chains, with the chunk sums and
//! partials in registers. The generic kernel (`amp_blocks.rs`) keeps four rows in its
//! blocks; with eight, the compiler spills them.
//!
//! Every element's operations and their order are the module docs': for each chunk, `s =
//! a[c0]·b[c0]`, `s = fma(a[kk], b[kk], s)` down the chunk, then `P = P + s`, each an IEEE
//! f32 operation rounded to nearest even (the instructions used round as the scalar ones
//! do; masked-off lanes are computed on zeros and never stored).

/// The widest product the kernel takes.
pub(super) const NARROW: usize = 32;

/// `out += a · b` (`a` `m × k`, `b` `k × n`, `out` `m × n`, all row-major, `0 < n ≤`
/// [`NARROW`], finite operands) with the FP32-partials kernel's operations; returns false,
/// computing nothing, where the CPU lacks AVX-512 or `n` is too wide (the caller then runs
/// the generic kernel).
pub(super) fn f32_partials(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    (k, n): (usize, usize),
    chunk: usize,
) -> bool {
    n <= NARROW && f32_partials_strided((a, k, 1), b, out, (k, n), chunk)
}

/// [`f32_partials`] with `a`'s element `(i, kk)` at `a[i · row + kk · step]` (a column-major
/// `a`: `row` 1, `step` its column length), any positive width `n`, from zero partials or
/// not; returns false, computing nothing, where the CPU lacks AVX-512 or an operand is too
/// short.
pub(super) fn f32_partials_strided(
    (a, row, step): (&[f32], usize, usize),
    b: &[f32],
    out: &mut [f32],
    (k, n): (usize, usize),
    chunk: usize,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if n > 0 && k > 0 && chunk > 0 && std::is_x86_feature_detected!("avx512f") {
            let m = out.len() / n;
            let last = (m.saturating_sub(1) * row).saturating_add((k - 1) * step);
            if m == 0 || a.len() <= last || b.len() < k * n {
                return m == 0;
            }
            // SAFETY: the CPU supports AVX-512F; the lengths were checked above.
            unsafe { x86::f32_partials((a, row, step), b, out, (m, k, n), chunk) };
            return true;
        }
    }
    let _ = (a, row, step, b, out, k, n, chunk);
    false
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// [`super::f32_partials_strided`]: blocks of 8, 4, 2 and 1 rows, each over vectors of
    /// 16 columns; `a`'s element `(i, kk)` at `i · row + kk · step`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn f32_partials(
        a: (&[f32], usize, usize),
        b: &[f32],
        out: &mut [f32],
        (m, k, n): (usize, usize, usize),
        chunk: usize,
    ) {
        let mut i = 0;
        while i + 8 <= m {
            // SAFETY (each call): rows `i .. i + R` of `a` and `out` and every row of `b`
            // are in bounds (the callers check `a` for its last element, `b.len() ≥ k·n`
            // and `out.len() ≥ m·n`).
            unsafe { rows::<8>(a, b, out, (i, k, n), chunk) };
            i += 8;
        }
        if i + 4 <= m {
            unsafe { rows::<4>(a, b, out, (i, k, n), chunk) };
            i += 4;
        }
        if i + 2 <= m {
            unsafe { rows::<2>(a, b, out, (i, k, n), chunk) };
            i += 2;
        }
        if i < m {
            unsafe { rows::<1>(a, b, out, (i, k, n), chunk) };
        }
    }

    /// Rows `[i, i + R)` of `out`, 16 columns at a time (the last vector masked to the
    /// columns left).
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn rows<const R: usize>(
        (a, row, step): (&[f32], usize, usize),
        b: &[f32],
        out: &mut [f32],
        (i, k, n): (usize, usize, usize),
        chunk: usize,
    ) {
        let (a, b, out) = (a.as_ptr(), b.as_ptr(), out.as_mut_ptr());
        let at = |r: usize, kk: usize| (i + r) * row + kk * step;
        let mut j = 0;
        while j < n {
            let lanes = (n - j).min(16);
            let mask: __mmask16 = if lanes == 16 {
                0xffff
            } else {
                (1u16 << lanes) - 1
            };
            // SAFETY: every access below is to row `i + r < m` of `out` or row `kk < k` of
            // `b`, at columns `j .. j + lanes` (masked), or to element `(i + r, kk)` of `a`.
            unsafe {
                let mut p = [_mm512_setzero_ps(); R];
                for (r, pr) in p.iter_mut().enumerate() {
                    *pr = _mm512_maskz_loadu_ps(mask, out.add((i + r) * n + j));
                }
                let mut c0 = 0;
                while c0 < k {
                    let c1 = (c0 + chunk).min(k);
                    let bv = _mm512_maskz_loadu_ps(mask, b.add(c0 * n + j));
                    let mut s = [_mm512_setzero_ps(); R];
                    for (r, sr) in s.iter_mut().enumerate() {
                        *sr = _mm512_mul_ps(_mm512_set1_ps(*a.add(at(r, c0))), bv);
                    }
                    for kk in c0 + 1..c1 {
                        let bv = _mm512_maskz_loadu_ps(mask, b.add(kk * n + j));
                        for (r, sr) in s.iter_mut().enumerate() {
                            let av = _mm512_set1_ps(*a.add(at(r, kk)));
                            *sr = _mm512_fmadd_ps(av, bv, *sr);
                        }
                    }
                    for (pr, sr) in p.iter_mut().zip(s) {
                        *pr = _mm512_add_ps(*pr, sr);
                    }
                    c0 = c1;
                }
                for (r, pr) in p.iter().enumerate() {
                    _mm512_mask_storeu_ps(out.add((i + r) * n + j), mask, *pr);
                }
            }
            j += 16;
        }
    }
}

//! The FP32-partials kernel of [`super`] (`amp.rs`) written with AVX-512 intrinsics, for
//! every finite product it computes where the CPU has AVX-512: the columns in groups of up
//! to three 16-lane vectors (the last masked), each group's rows in blocks whose chunk sums
//! and partials all stay in registers — 8 rows of one vector, 6 of two, 4 of three (24
//! accumulators; the 32 registers also hold `b`'s vectors and a broadcast) — so that each
//! loaded vector of `b` serves up to 12 independent FMA chains. The generic kernel
//! (`amp_blocks.rs`, the CPUs without AVX-512 and `b` read through a table) keeps four rows
//! of up to 32 columns and leaves a last 8 columns to 256-bit vectors whose four FMA chains
//! wait on their latency; with more rows, the compiler spills them. The partials stay in
//! registers between chunks: kept in `out` instead, each chunk's masked store stalls the
//! next chunk's load of it (a masked store does not forward to a load), slower than the
//! generic kernel on the 1024³ matmul.
//!
//! Every element's operations and their order are the module docs': for each chunk, `s =
//! a[c0]·b[c0]`, `s = fma(a[kk], b[kk], s)` down the chunk, then `P = P + s`, each an IEEE
//! f32 operation rounded to nearest even (the instructions used round as the scalar ones
//! do; masked-off lanes are computed on zeros and never stored).

/// `out += a · b` (`a` `m × k`, `b` `k × n`, `out` `m × n`, all row-major, `n > 0`, finite
/// operands) with the FP32-partials kernel's operations; returns false, computing nothing,
/// where the CPU lacks AVX-512 (the caller then runs the generic kernel).
pub(super) fn f32_partials(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    (k, n): (usize, usize),
    chunk: usize,
) -> bool {
    f32_partials_strided((a, k, 1), b, out, (k, n), chunk)
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

    /// [`super::f32_partials_strided`]: the columns in groups of three 16-column vectors
    /// (the last group one to three, its last vector masked), each group's rows in blocks
    /// as many as keep the block's chunk sums and partials in registers; `a`'s element
    /// `(i, kk)` at `i · row + kk · step`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn f32_partials(
        a: (&[f32], usize, usize),
        b: &[f32],
        out: &mut [f32],
        (m, k, n): (usize, usize, usize),
        chunk: usize,
    ) {
        let mut j = 0;
        while j < n {
            let at = (j, m, k, n);
            // SAFETY (each call): the group's columns `j .. min(j + 16·V, n)` and every
            // row of `a`, `b` and `out` are in bounds (the callers check `a` for its last
            // element, `b.len() ≥ k·n` and `out.len() ≥ m·n`).
            unsafe {
                match n - j {
                    0..=16 => column_group::<1, 8>(a, b, out, at, chunk),
                    17..=32 => column_group::<2, 6>(a, b, out, at, chunk),
                    _ => column_group::<3, 4>(a, b, out, at, chunk),
                }
            }
            j += 48;
        }
    }

    /// The `V` vectors of columns from `j`, `R` rows at a time, the rows left in blocks of
    /// 4, 2 and 1.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn column_group<const V: usize, const R: usize>(
        a: (&[f32], usize, usize),
        b: &[f32],
        out: &mut [f32],
        (j, m, k, n): (usize, usize, usize, usize),
        chunk: usize,
    ) {
        let mut i = 0;
        // SAFETY (each call): rows `i .. i + rows ≤ m`, columns as the caller's.
        unsafe {
            while i + R <= m {
                block::<R, V>(a, b, out, (i, j, k, n), chunk);
                i += R;
            }
            if i + 4 <= m {
                block::<4, V>(a, b, out, (i, j, k, n), chunk);
                i += 4;
            }
            if i + 2 <= m {
                block::<2, V>(a, b, out, (i, j, k, n), chunk);
                i += 2;
            }
            if i < m {
                block::<1, V>(a, b, out, (i, j, k, n), chunk);
            }
        }
    }

    /// The lanes of the vector whose first column is `j` (`j < n`) that are columns.
    #[inline]
    fn lanes(n: usize, j: usize) -> __mmask16 {
        match n.saturating_sub(j) {
            16.. => 0xffff,
            left => (1u16 << left) - 1,
        }
    }

    /// The `R × 16·V` block of `out` at `(i, j)` (columns from `n` on masked off), its
    /// chunk sums and partials in registers for the whole reduction.
    #[allow(clippy::needless_range_loop)]
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn block<const R: usize, const V: usize>(
        (a, row, step): (&[f32], usize, usize),
        b: &[f32],
        out: &mut [f32],
        (i, j, k, n): (usize, usize, usize, usize),
        chunk: usize,
    ) {
        let (a, b, out) = (a.as_ptr(), b.as_ptr(), out.as_mut_ptr());
        let at = |r: usize, kk: usize| (i + r) * row + kk * step;
        let mut mask = [0xffff as __mmask16; V];
        for v in 0..V {
            mask[v] = lanes(n, j + 16 * v);
        }
        // SAFETY: every access below is to row `i + r < m` of `out` or row `kk < k` of `b`,
        // at columns `j + 16·v ..` masked to those below `n`, or to element `(i + r, kk)`
        // of `a`.
        unsafe {
            let mut p = [[_mm512_setzero_ps(); V]; R];
            for r in 0..R {
                for v in 0..V {
                    p[r][v] = _mm512_maskz_loadu_ps(mask[v], out.add((i + r) * n + j + 16 * v));
                }
            }
            let mut c0 = 0;
            while c0 < k {
                let c1 = (c0 + chunk).min(k);
                let mut s = [[_mm512_setzero_ps(); V]; R];
                let mut bv = [_mm512_setzero_ps(); V];
                for v in 0..V {
                    bv[v] = _mm512_maskz_loadu_ps(mask[v], b.add(c0 * n + j + 16 * v));
                }
                for r in 0..R {
                    let av = _mm512_set1_ps(*a.add(at(r, c0)));
                    for v in 0..V {
                        s[r][v] = _mm512_mul_ps(av, bv[v]);
                    }
                }
                for kk in c0 + 1..c1 {
                    for v in 0..V {
                        bv[v] = _mm512_maskz_loadu_ps(mask[v], b.add(kk * n + j + 16 * v));
                    }
                    for r in 0..R {
                        let av = _mm512_set1_ps(*a.add(at(r, kk)));
                        for v in 0..V {
                            s[r][v] = _mm512_fmadd_ps(av, bv[v], s[r][v]);
                        }
                    }
                }
                for r in 0..R {
                    for v in 0..V {
                        p[r][v] = _mm512_add_ps(p[r][v], s[r][v]);
                    }
                }
                c0 = c1;
            }
            for r in 0..R {
                for v in 0..V {
                    _mm512_mask_storeu_ps(out.add((i + r) * n + j + 16 * v), mask[v], p[r][v]);
                }
            }
        }
    }
}

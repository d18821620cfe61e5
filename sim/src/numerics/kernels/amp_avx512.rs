//! The FP32-partials kernel of [`super`] (`amp.rs`) written with AVX-512 intrinsics, for
//! every finite product it computes where the CPU has AVX-512, `b` row-major or read row by
//! row through a table (a convolution's padded feature map): the columns in groups of up to
//! three 16-lane vectors (the last masked; a group's last 8 columns or fewer in a 256-bit
//! vector, which costs half a 512-bit operation where the CPU splits those in two, as AMD's
//! Zen 4 does: the 1024³ matmul's 40-column products 7% faster there), each group's rows in
//! blocks whose chunk sums and partials all stay in registers — 8 rows of one vector, 6 of
//! two, 4 of three (24 accumulators; the 32 registers also hold `b`'s vectors and a
//! broadcast) — so that each loaded vector of `b` serves up to 12 independent FMA chains; a
//! product of one to three
//! rows (a convolution's few output channels against its output positions) takes them
//! together over up to 8 vectors (one row) or 4 (two or three). The generic kernel
//! (`amp_blocks.rs`, for the CPUs without AVX-512) keeps four rows of up to 32 columns and
//! leaves a last 8 columns to 256-bit vectors whose four FMA chains wait on their latency;
//! with more rows, the compiler spills them. The partials stay in registers between chunks:
//! kept in `out` instead, each chunk's masked store stalls the next chunk's load of it (a
//! masked store does not forward to a load), slower than the generic kernel on the 1024³
//! matmul.
//!
//! Every element's operations and their order are the module docs': for each chunk, `s =
//! a[c0]·b[c0]`, `s = fma(a[kk], b[kk], s)` down the chunk, then `P = P + s`, each an IEEE
//! f32 operation rounded to nearest even (the instructions used round as the scalar ones
//! do; masked-off lanes are computed on zeros and never stored).

/// `out += a · b` (`a` `m × k`, `b` `k × n`, `out` `m × n`, all row-major, `n > 0`, finite
/// operands) with the FP32-partials kernel's operations — with `zero`, `out = (+0) + a · b`
/// whatever `out` held, its partials starting from +0 in registers instead of loaded (the
/// same values as from zeroed partials, without a pass that zeroes them); returns false,
/// computing nothing, where the CPU lacks AVX-512 (the caller then runs the generic kernel).
pub(super) fn f32_partials(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    (k, n): (usize, usize),
    (chunk, zero): (usize, bool),
) -> bool {
    strided((a, k, 1), b, out, (k, n), (chunk, zero))
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
    strided((a, row, step), b, out, (k, n), (chunk, false))
}

/// [`f32_partials_strided`], from zero partials with `zero` ([`f32_partials`]).
fn strided(
    (a, row, step): (&[f32], usize, usize),
    b: &[f32],
    out: &mut [f32],
    (k, n): (usize, usize),
    (chunk, zero): (usize, bool),
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if n > 0 && k > 0 && chunk > 0 && features() {
            let m = out.len() / n;
            let last = (m.saturating_sub(1).saturating_mul(row))
                .saturating_add((k - 1).saturating_mul(step));
            if m == 0 || a.len() <= last || b.len() < k.saturating_mul(n) {
                return m == 0;
            }
            let product = x86::Product {
                a: (a.as_ptr(), row, step),
                b: x86::Dense(b.as_ptr(), n),
                out: (out.as_mut_ptr(), n),
                dims: (m, k, n),
                chunk,
                zero,
            };
            // SAFETY: the CPU has the kernel's features (`features`); the lengths were
            // checked above.
            unsafe { x86::f32_partials(product) };
            return true;
        }
    }
    let _ = (a, row, step, b, out, k, n, chunk, zero);
    false
}

/// [`f32_partials`] with row `kk` of `b` (its `n` columns) at `base[rows[kk] ..]` and row
/// `i` of `out` at `out[i · ldo ..]` (`a` row-major, `m × rows.len()`), from zero partials
/// with `zero`; returns false, computing nothing, where the CPU lacks AVX-512 or an operand
/// is too short.
pub(super) fn f32_partials_rows(
    a: &[f32],
    (base, rows): (&[f32], &[usize]),
    (out, ldo): (&mut [f32], usize),
    (m, n): (usize, usize),
    (chunk, zero): (usize, bool),
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let k = rows.len();
        if n > 0 && k > 0 && m > 0 && chunk > 0 && features() {
            let short = a.len() < m.saturating_mul(k)
                || ldo < n
                || out.len() < (m - 1).saturating_mul(ldo).saturating_add(n)
                || rows.iter().any(|&r| r.saturating_add(n) > base.len());
            if short {
                return false;
            }
            let product = x86::Product {
                a: (a.as_ptr(), k, 1),
                b: x86::Table(base.as_ptr(), rows.as_ptr()),
                out: (out.as_mut_ptr(), ldo),
                dims: (m, k, n),
                chunk,
                zero,
            };
            // SAFETY: the CPU has the kernel's features (`features`); the lengths were
            // checked above.
            unsafe { x86::f32_partials(product) };
            return true;
        }
    }
    let _ = (a, base, rows, out, ldo, m, n, chunk, zero);
    false
}

/// Whether the CPU has what the kernel is compiled for: AVX-512F, its 256-bit forms
/// (AVX-512VL) and FMA.
#[cfg(target_arch = "x86_64")]
fn features() -> bool {
    std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512vl")
        && std::is_x86_feature_detected!("fma")
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// How the kernel finds row `kk` of `b`: a pointer to its first column.
    pub(super) trait Rows: Copy {
        /// # Safety
        /// `kk` is below the product's `k`.
        unsafe fn row(self, kk: usize) -> *const f32;
    }

    /// `b` row-major: its start and row length.
    #[derive(Clone, Copy)]
    pub(super) struct Dense(pub *const f32, pub usize);

    impl Rows for Dense {
        #[inline(always)]
        unsafe fn row(self, kk: usize) -> *const f32 {
            // SAFETY: row `kk < k` of a `k × n` buffer.
            unsafe { self.0.add(kk * self.1) }
        }
    }

    /// `b`'s rows in another buffer: its start and the row offsets.
    #[derive(Clone, Copy)]
    pub(super) struct Table(pub *const f32, pub *const usize);

    impl Rows for Table {
        #[inline(always)]
        unsafe fn row(self, kk: usize) -> *const f32 {
            // SAFETY: entry `kk < k` of the table, an offset the caller checked.
            unsafe { self.0.add(*self.1.add(kk)) }
        }
    }

    /// One product's operands, checked by the caller: `a`'s element `(i, kk)` at `a.0 +
    /// i · a.1 + kk · a.2`, `b`'s rows, `out`'s row `i` at `out.0 + i · out.1`, `dims`
    /// `(m, k, n)`, the reduction chunk, and whether the partials start from +0 (`out` not
    /// read).
    #[derive(Clone, Copy)]
    pub(super) struct Product<B> {
        pub a: (*const f32, usize, usize),
        pub b: B,
        pub out: (*mut f32, usize),
        pub dims: (usize, usize, usize),
        pub chunk: usize,
        pub zero: bool,
    }

    /// [`super::f32_partials_strided`] and [`super::f32_partials_rows`]: one to three rows
    /// (a convolution's output channels against its output positions) as one block over
    /// vectors enough for 8 to 12 FMA chains (8 for a single row, 4 for two or three);
    /// otherwise the columns in groups of up to three vectors, each group's rows in blocks
    /// of 8, 6 or 4 as it is one, two or three vectors wide, a group's last 8 columns or
    /// fewer in a 256-bit vector (where a 512-bit operation costs two 256-bit ones, as on
    /// AMD's Zen 4, a 40-column product's FMAs take 5 halves instead of 6).
    #[target_feature(enable = "avx512f,avx512vl,fma")]
    pub(super) unsafe fn f32_partials<B: Rows>(p: Product<B>) {
        let (m, _, n) = p.dims;
        // SAFETY (each call): the rows and columns computed are those of the product.
        unsafe {
            match m {
                1 => few_rows::<1, B>(p),
                2 => few_rows::<2, B>(p),
                3 => few_rows::<3, B>(p),
                _ => {
                    let mut j = 0;
                    while j < n {
                        match n - j {
                            0..=8 => column_group::<0, 1, 8, B>(p, j),
                            9..=16 => column_group::<1, 0, 8, B>(p, j),
                            17..=24 => column_group::<1, 1, 6, B>(p, j),
                            25..=32 => column_group::<2, 0, 6, B>(p, j),
                            33..=40 => column_group::<2, 1, 4, B>(p, j),
                            _ => column_group::<3, 0, 4, B>(p, j),
                        }
                        j += 48;
                    }
                }
            }
        }
    }

    /// All `R` rows (1 to 3) of the product, column block by column block: up to 8 vectors
    /// for a single row, up to 4 for two or three.
    #[inline]
    #[target_feature(enable = "avx512f,avx512vl,fma")]
    unsafe fn few_rows<const R: usize, B: Rows>(p: Product<B>) {
        let n = p.dims.2;
        let mut j = 0;
        while j < n {
            // SAFETY: the block's columns start below `n` (the last vector masked).
            let vectors = unsafe {
                match (n - j).div_ceil(16) {
                    1 => block::<R, 1, 0, B>(p, 0, j),
                    2 => block::<R, 2, 0, B>(p, 0, j),
                    3 => block::<R, 3, 0, B>(p, 0, j),
                    8.. if R == 1 => block::<R, 8, 0, B>(p, 0, j),
                    _ => block::<R, 4, 0, B>(p, 0, j),
                }
            };
            j += 16 * vectors;
        }
    }

    /// The `V` vectors and `T` (0 or 1) half vectors of columns from `j`, `R` rows at a
    /// time, the rows left in blocks of 4, 2 and 1.
    #[inline]
    #[target_feature(enable = "avx512f,avx512vl,fma")]
    unsafe fn column_group<const V: usize, const T: usize, const R: usize, B: Rows>(
        p: Product<B>,
        j: usize,
    ) {
        let m = p.dims.0;
        let mut i = 0;
        // SAFETY (each call): rows `i .. i + rows ≤ m`, columns as the caller's.
        unsafe {
            while i + R <= m {
                block::<R, V, T, B>(p, i, j);
                i += R;
            }
            if i + 4 <= m {
                block::<4, V, T, B>(p, i, j);
                i += 4;
            }
            if i + 2 <= m {
                block::<2, V, T, B>(p, i, j);
                i += 2;
            }
            if i < m {
                block::<1, V, T, B>(p, i, j);
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

    /// The lanes of the half vector whose first column is `j` that are columns.
    #[inline]
    fn half_lanes(n: usize, j: usize) -> __mmask8 {
        match n.saturating_sub(j) {
            8.. => 0xff,
            left => (1u8 << left) - 1,
        }
    }

    /// The `R × (16·V + 8·T)` block of `out` at `(i, j)` (columns from `n` on masked off):
    /// `V` 512-bit vectors of columns, then `T` (0 or 1) 256-bit ones; its chunk sums and
    /// partials in registers for the whole reduction; returns `V`. The half vector's lanes
    /// see the same operations as the others'.
    #[allow(clippy::needless_range_loop)]
    #[inline]
    #[target_feature(enable = "avx512f,avx512vl,fma")]
    unsafe fn block<const R: usize, const V: usize, const T: usize, B: Rows>(
        p: Product<B>,
        i: usize,
        j: usize,
    ) -> usize {
        let ((a, row, step), (out, ldo), (_, k, n)) = (p.a, p.out, p.dims);
        let at = |r: usize, kk: usize| (i + r) * row + kk * step;
        let mut mask = [0xffff as __mmask16; V];
        for v in 0..V {
            mask[v] = lanes(n, j + 16 * v);
        }
        // The half vector's first column and lanes.
        let jt = j + 16 * V;
        let tmask = half_lanes(n, jt);
        // SAFETY: every access below is to row `i + r < m` of `out` or row `kk < k` of `b`,
        // at columns `j + 16·v ..` (or `jt ..`) masked to those below `n`, or to element
        // `(i + r, kk)` of `a`; the callers give only vectors that start below `n`.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); V]; R];
            let mut acc_t = [[_mm256_setzero_ps(); T]; R];
            for r in (0..R).filter(|_| !p.zero) {
                let o = out.add((i + r) * ldo);
                for v in 0..V {
                    acc[r][v] = _mm512_maskz_loadu_ps(mask[v], o.add(j + 16 * v));
                }
                for t in 0..T {
                    acc_t[r][t] = _mm256_maskz_loadu_ps(tmask, o.add(jt));
                }
            }
            let mut c0 = 0;
            while c0 < k {
                let c1 = (c0 + p.chunk).min(k);
                let mut s = [[_mm512_setzero_ps(); V]; R];
                let mut s_t = [[_mm256_setzero_ps(); T]; R];
                let mut bv = [_mm512_setzero_ps(); V];
                let mut bt = [_mm256_setzero_ps(); T];
                let b0 = p.b.row(c0);
                for v in 0..V {
                    bv[v] = _mm512_maskz_loadu_ps(mask[v], b0.add(j + 16 * v));
                }
                for t in 0..T {
                    bt[t] = _mm256_maskz_loadu_ps(tmask, b0.add(jt));
                }
                for r in 0..R {
                    let x = *a.add(at(r, c0));
                    let av = _mm512_set1_ps(x);
                    for v in 0..V {
                        s[r][v] = _mm512_mul_ps(av, bv[v]);
                    }
                    for t in 0..T {
                        s_t[r][t] = _mm256_mul_ps(_mm256_set1_ps(x), bt[t]);
                    }
                }
                for kk in c0 + 1..c1 {
                    let bk = p.b.row(kk);
                    for v in 0..V {
                        bv[v] = _mm512_maskz_loadu_ps(mask[v], bk.add(j + 16 * v));
                    }
                    for t in 0..T {
                        bt[t] = _mm256_maskz_loadu_ps(tmask, bk.add(jt));
                    }
                    for r in 0..R {
                        let x = *a.add(at(r, kk));
                        let av = _mm512_set1_ps(x);
                        for v in 0..V {
                            s[r][v] = _mm512_fmadd_ps(av, bv[v], s[r][v]);
                        }
                        for t in 0..T {
                            s_t[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(x), bt[t], s_t[r][t]);
                        }
                    }
                }
                for r in 0..R {
                    for v in 0..V {
                        acc[r][v] = _mm512_add_ps(acc[r][v], s[r][v]);
                    }
                    for t in 0..T {
                        acc_t[r][t] = _mm256_add_ps(acc_t[r][t], s_t[r][t]);
                    }
                }
                c0 = c1;
            }
            for r in 0..R {
                let o = out.add((i + r) * ldo);
                for v in 0..V {
                    _mm512_mask_storeu_ps(o.add(j + 16 * v), mask[v], acc[r][v]);
                }
                for t in 0..T {
                    _mm256_mask_storeu_ps(o.add(jt), tmask, acc_t[r][t]);
                }
            }
        }
        V
    }
}

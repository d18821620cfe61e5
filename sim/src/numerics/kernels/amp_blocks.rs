//! The register-blocked FP32 kernel of [`super`] (`amp.rs`), kept beside it in its own
//! file: blocks of rows × up to 64 columns that keep their chunk sums and partials in
//! registers for the whole reduction, generic over how `b` is read — row-major ([`Dense`])
//! or row by row through a table into another buffer ([`Table`], a convolution's padded
//! feature map) — with every element's operations and their order the module docs'. Where
//! the CPU has AVX-512, `amp_avx512.rs` computes these products instead; this kernel serves
//! the other CPUs, and its blocks of chunk sums the FP16-partials kernel.

/// Rows of `out` the FP32-partials kernel computes together (each loaded vector of `b`
/// serves all of them).
pub(super) const ROWS: usize = 4;

/// How the kernels read `W` consecutive elements of row `kk` of `b` from column `j`.
pub(super) trait BRows: Copy {
    fn at<const W: usize>(&self, kk: usize, j: usize) -> &[f32; W];
}

/// `b` row-major, `n` columns.
#[derive(Clone, Copy)]
pub(super) struct Dense<'a> {
    pub(super) b: &'a [f32],
    pub(super) n: usize,
}

impl BRows for Dense<'_> {
    #[inline(always)]
    fn at<const W: usize>(&self, kk: usize, j: usize) -> &[f32; W] {
        self.b[kk * self.n + j..][..W]
            .try_into()
            .unwrap_or(&[0.0; W])
    }
}

/// Each row of `b` where a table says in another buffer.
#[derive(Clone, Copy)]
pub(super) struct Table<'a> {
    pub(super) base: &'a [f32],
    pub(super) rows: &'a [usize],
}

impl BRows for Table<'_> {
    #[inline(always)]
    fn at<const W: usize>(&self, kk: usize, j: usize) -> &[f32; W] {
        self.base[self.rows[kk] + j..][..W]
            .try_into()
            .unwrap_or(&[0.0; W])
    }
}

/// `m` rows of `out` (row `i` at `out[i · ldo ..]`, `n` columns) `+= a · b`, `a` `m × k`.
#[inline(always)]
pub(super) fn f32_partials_any<B: BRows>(
    a: &[f32],
    b: B,
    (out, ldo): (&mut [f32], usize),
    (m, k, n): (usize, usize, usize),
    chunk: usize,
) {
    let mut i = 0;
    while i + ROWS <= m {
        f32_partials_cols::<ROWS, B>(a, b, (out, ldo), i, k, n, chunk);
        i += ROWS;
    }
    // The last rows in one block too: a convolution's vertex often has fewer rows than
    // `ROWS` (ResNet-50's 1 to 3 output channels per unit run), and a row at a time loads
    // each vector of `b` for one row's FMAs. Each element's operations are the same.
    match m - i {
        3 => f32_partials_cols::<3, B>(a, b, (out, ldo), i, k, n, chunk),
        2 => f32_partials_cols::<2, B>(a, b, (out, ldo), i, k, n, chunk),
        1 => f32_partials_cols::<1, B>(a, b, (out, ldo), i, k, n, chunk),
        _ => {}
    }
}

/// Runs `body` for the column blocks of `n` columns, in order: for a single row (`$r` 1)
/// blocks of 64 first, then blocks of 32, 16, 8 and single columns, with `j` the block's
/// first column and `W` its width (a const). A single row's 64 columns are four vector
/// sums down the chunk where 32 are two: twice the independent FMA chains to hide their
/// latency.
macro_rules! column_blocks {
    ($r:expr, $n:expr, |$j:ident, $w:ident| $body:expr) => {{
        let n = $n;
        let mut $j = 0;
        if $r == 1 {
            while $j + 64 <= n {
                const $w: usize = 64;
                $body;
                $j += 64;
            }
        }
        while $j + 32 <= n {
            const $w: usize = 32;
            $body;
            $j += 32;
        }
        while $j + 16 <= n {
            const $w: usize = 16;
            $body;
            $j += 16;
        }
        while $j + 8 <= n {
            const $w: usize = 8;
            $body;
            $j += 8;
        }
        while $j < n {
            const $w: usize = 1;
            $body;
            $j += 1;
        }
    }};
}
pub(super) use column_blocks;

/// Rows `[i, i + R)` of `out`, column block by column block (32, 16, 8 and single columns).
#[inline(always)]
fn f32_partials_cols<const R: usize, B: BRows>(
    a: &[f32],
    b: B,
    (out, ldo): (&mut [f32], usize),
    i: usize,
    k: usize,
    n: usize,
    chunk: usize,
) {
    column_blocks!(R, n, |j, W| f32_partials_block::<R, W, B>(
        a,
        b,
        (&mut *out, ldo),
        (i, j),
        k,
        chunk
    ));
}

/// Writes into `s` the chunk sums of the `R × W` block at column `j` over the reduction rows
/// `[c0, c1)`: `s = a[c0]·b[c0]`, then `s = fma(a[kk], b[kk], s)` down the chunk. Plain index
/// loops over constant-size rows, so that each row of `s` stays in vector registers and
/// each element of `a` is one broadcast.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
pub(super) fn chunk_block<const R: usize, const W: usize, B: BRows>(
    rows: &[&[f32]; R],
    b: B,
    j: usize,
    (c0, c1): (usize, usize),
    s: &mut [[f32; W]; R],
) {
    let b0: &[f32; W] = b.at::<W>(c0, j);
    for r in 0..R {
        let av = rows[r][c0];
        for w in 0..W {
            s[r][w] = av * b0[w];
        }
    }
    for kk in c0 + 1..c1 {
        let bk: &[f32; W] = b.at::<W>(kk, j);
        for r in 0..R {
            let av = rows[r][kk];
            for w in 0..W {
                s[r][w] = av.mul_add(bk[w], s[r][w]);
            }
        }
    }
}

/// The `R × W` block of `out` at `(i, j)`: for every chunk, its chunk sums
/// ([`chunk_block`]), then `P += s` (the module docs' order, per element).
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn f32_partials_block<const R: usize, const W: usize, B: BRows>(
    a: &[f32],
    b: B,
    (out, ldo): (&mut [f32], usize),
    (i, j): (usize, usize),
    k: usize,
    chunk: usize,
) {
    let mut p = [[0f32; W]; R];
    for r in 0..R {
        p[r].copy_from_slice(&out[(i + r) * ldo + j..][..W]);
    }
    let rows: [&[f32]; R] = std::array::from_fn(|r| &a[(i + r) * k..(i + r + 1) * k]);
    let mut c0 = 0;
    while c0 < k {
        let c1 = (c0 + chunk).min(k);
        let mut s = [[0f32; W]; R];
        chunk_block::<R, W, B>(&rows, b, j, (c0, c1), &mut s);
        for r in 0..R {
            for w in 0..W {
                p[r][w] += s[r][w];
            }
        }
        c0 = c1;
    }
    for r in 0..R {
        out[(i + r) * ldo + j..][..W].copy_from_slice(&p[r]);
    }
}

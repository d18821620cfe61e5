//! AMP-style dot products and matrix products: FP16 inputs with FP32 or FP16 partials
//! (the IPU's `f16v4sisoamp` / `f16v4hihoamp`, numerics.md §2.5), and FP32 inputs with FP32
//! partials (`f32sisoamp`), in one documented, fixed order.
//!
//! ## The order
//!
//! The AMP's internal summation order and width are not public (numerics.md §2.5, §6), so
//! the order is a parameter: the reduction dimension is cut into chunks of `chunk` elements
//! ([`AMP_CHUNK`] = 16 by default: one AMP pass over 16 input channels, as in the
//! `f16v4sisoamp` 8×1×1×16 example \[S25\]). For every output element with partial `P`:
//!
//! ```text
//! for each chunk [c0, c1) of 0..k, in order:
//!     s = RN32(a[c0] * b[c0])
//!     for kk in c0+1 .. c1:  s = RN32(a[kk] * b[kk] + s)      // fused multiply-add
//!     P = round_P(P + s)
//! ```
//!
//! - Products of FP16 values are exact in f32 (11+11 bits ≤ 24; numerics.md §5.1), so for
//!   FP16 inputs the fused multiply-add equals a separate multiply and add; FP32 inputs are
//!   genuinely fused (one rounding per step).
//! - FP32 partials: `round_P` is the IEEE f32 addition (nearest even).
//! - FP16 partials: each partial write widens `P` to f32, adds the chunk sum and rounds back
//!   to FP16 (Graphcore's AI-Float white paper \[S29\]). ipusim forms the sum **exactly**
//!   (TwoSum in f64) and rounds it **once** — nearest even, or stochastically with one draw
//!   per write — so a partial is never double-rounded. Draws are taken in the order
//!   (row, chunk, column).
//!
//! numerics.md §3.1's `dot([2048,1,1,1,1], [1;5])` separates the cases: chunk 1 with FP16
//! partials gives 2048 (each `2048 + 1` is a tie to even), FP32 partials give 2052, and
//! chunk 16 gives 2052 with either partials type (the chunk sum 2052 is an FP16 value).
//!
//! ## Flags
//!
//! The flags are those of the scalar operations the order above performs: INV for NaN
//! operands, `0 × inf` and `inf − inf`; OFLO when a finite computation overflows (FP32
//! partials: to ±inf; FP16 partials: the `nanoo` policy of the [`Rounding`]).
//!
//! ## Speed
//!
//! With finite inputs (checked once per call) the work is vectorised across output columns
//! (each column keeps its own sequential order), compiled for AVX-512/AVX2 when the CPU has
//! them. FP32 partials: blocks of rows × columns keep their chunk sums and partials in
//! registers for the whole reduction, so each loaded vector of `b` serves several rows —
//! with AVX-512 intrinsics up to 8 rows of 16 columns, 6 of 32 or 4 of 48 (`amp_avx512.rs`),
//! otherwise 4 rows × up to 32 columns (`amp_blocks.rs`). FP16 partials: the chunk sums of a
//! row, then its partial writes rounded with the vectorised lane rounding of
//! `kernels::lanes` (TwoSum in f64, draws generated in bulk, in the (row, chunk, column)
//! order). Any non-finite input sends the call through the scalar
//! reference path, and an FP32 output row that overflowed is recomputed there, so flags are
//! exact.

use half::f16;

use crate::numerics::error::{check_len, NumericsError};
use crate::numerics::flags::FpSts;
use crate::numerics::fp32;
use crate::numerics::round::{two_sum, Rounding, Tail};
use crate::numerics::simd::simd_dispatch;

use super::lanes;
use blocks::{chunk_block, column_blocks, f32_partials_any, Dense, Table, ROWS};

#[path = "amp_avx512.rs"]
mod avx512;
#[path = "amp_blocks.rs"]
mod blocks;

/// The default reduction chunk: one AMP pass of 16 input channels.
pub const AMP_CHUNK: usize = 16;

/// The shape of `out[m×n] += a[m×k] · b[k×n]`, all row-major.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatMulShape {
    /// Rows of `a` and `out`.
    pub m: usize,
    /// The reduction dimension: columns of `a`, rows of `b`.
    pub k: usize,
    /// Columns of `b` and `out`.
    pub n: usize,
}

impl MatMulShape {
    /// Floating-point operations of one product (a multiply and an add per MAC).
    pub fn flops(&self) -> u64 {
        2 * self.m as u64 * self.k as u64 * self.n as u64
    }

    fn check(
        &self,
        kernel: &'static str,
        a: usize,
        b: usize,
        out: usize,
        chunk: usize,
    ) -> Result<(), NumericsError> {
        if chunk == 0 {
            return Err(NumericsError::ZeroChunk { kernel });
        }
        check_len(kernel, "a", self.m * self.k, a)?;
        check_len(kernel, "b", self.k * self.n, b)?;
        check_len(kernel, "out", self.m * self.n, out)
    }
}

/// `out += a · b` with FP16 inputs and FP32 partials (`f16v4sisoamp`), in chunks of `chunk`.
pub fn amp_matmul_f32_partials(
    shape: MatMulShape,
    a: &[f16],
    b: &[f16],
    out: &mut [f32],
    chunk: usize,
) -> Result<FpSts, NumericsError> {
    amp_matmul(
        "amp_matmul_f32_partials",
        shape,
        a,
        b,
        Partials::F32(out),
        chunk,
    )
}

/// `out += a · b` with FP16 inputs and FP16 partials (`f16v4hihoamp`): every partial write
/// is rounded once to FP16 with `r`.
pub fn amp_matmul_f16_partials(
    shape: MatMulShape,
    a: &[f16],
    b: &[f16],
    out: &mut [f16],
    chunk: usize,
    r: &mut Rounding,
) -> Result<FpSts, NumericsError> {
    amp_matmul(
        "amp_matmul_f16_partials",
        shape,
        a,
        b,
        Partials::F16(out, r),
        chunk,
    )
}

/// What the caller of a product already knows of its operands, so that the kernel does not
/// check it again: a vertex's product starts from partials it zeroed, and the vertices of a
/// group share one widened `b`, checked once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Known {
    /// The product starts from +0 partials (a fresh product), whatever the output holds: it
    /// is not read, and the kernel zeroes it only where it adds to it in memory.
    pub zero_partials: bool,
    /// Whether every element of `b` is finite ([`finite`]), when the caller checked it.
    pub b_finite: Option<bool>,
    /// Whether every element of `a` is finite ([`finite`]), when the caller checked it.
    pub a_finite: Option<bool>,
    /// Every element of `a` and `b` is an FP16 value (widened exactly) or zero, so that a
    /// product of finite operands from zero partials cannot overflow its FP32 partials
    /// ([`fp16_sums_stay_finite`]) and its outputs need no check.
    pub half_operands: bool,
}

/// Whether FP32 partials that start at zero stay finite in a product of finite FP16
/// operands over a reduction of `k`: each product is at most `65504² < 2³²` in magnitude,
/// and a partial is a sum of `k` of them in which each term passes through at most `k`
/// roundings of relative error `u = 2⁻²⁴`, so its magnitude is at most
/// `k · 2³² · (1 + u)^k` (the classical bound of recursive summation, the chunk sums
/// included). For `k ≤ 2²²`, `(1 + u)^k ≤ e^{1/4}`, and the bound is below `2⁵⁵`, far below
/// the largest FP32 value (`≈ 2¹²⁸`); no partial overflows, so none is infinite or NaN.
/// (Larger reductions are checked as any other.)
pub fn fp16_sums_stay_finite(k: usize) -> bool {
    k <= 1 << 22
}

/// Whether every value of `x` is finite: what [`Known::b_finite`] holds.
pub fn finite(x: &[f32]) -> bool {
    all_finite(x)
}

/// Whether every FP16 value of `x` is finite (its exponent field not all ones): what its
/// widened values' [`finite`] says, without widening them.
pub fn finite_f16(x: &[f16]) -> bool {
    all_finite_f16(x)
}

/// [`amp_matmul_f16_partials`] with the FP16 inputs already widened (exactly) to f32, for
/// callers that widen an operand once and reuse it, and with what they know of the
/// operands (`known`: a wrong claim gives wrong values and flags).
pub fn amp_matmul_f16_partials_widened(
    shape: MatMulShape,
    a: &[f32],
    b: &[f32],
    out: &mut [f16],
    chunk: usize,
    r: &mut Rounding,
    known: Known,
) -> Result<FpSts, NumericsError> {
    shape.check(
        "amp_matmul_f16_partials_widened",
        a.len(),
        b.len(),
        out.len(),
        chunk,
    )?;
    Ok(matmul(shape, a, b, Partials::F16(out, r), chunk, known))
}

/// Checks the arguments, widens the FP16 inputs (exactly) and runs the product.
fn amp_matmul(
    kernel: &'static str,
    shape: MatMulShape,
    a: &[f16],
    b: &[f16],
    partials: Partials,
    chunk: usize,
) -> Result<FpSts, NumericsError> {
    shape.check(kernel, a.len(), b.len(), partials.len(), chunk)?;
    Ok(matmul(
        shape,
        &widen(a),
        &widen(b),
        partials,
        chunk,
        Known::default(),
    ))
}

/// `out += a · b` with FP32 inputs and FP32 partials (`f32sisoamp`).
pub fn matmul_f32(
    shape: MatMulShape,
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    chunk: usize,
) -> Result<FpSts, NumericsError> {
    matmul_f32_known(shape, a, b, out, chunk, Known::default())
}

/// [`matmul_f32`] with what the caller knows of the operands (`known`: a wrong claim gives
/// wrong values and flags).
pub fn matmul_f32_known(
    shape: MatMulShape,
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    chunk: usize,
    known: Known,
) -> Result<FpSts, NumericsError> {
    shape.check("matmul_f32", a.len(), b.len(), out.len(), chunk)?;
    Ok(matmul(shape, a, b, Partials::F32(out), chunk, known))
}

/// `out += a · b` with FP32 partials for finite operands, where row `kk` of `b` (its `n`
/// columns) is `base[rows[kk] ..]` and row `i` of `out` starts at `out[i · ldo]`: the
/// FP32-partials kernel of [`matmul_f32_known`], the same operations in the same order, for
/// a `b` whose rows are parts of another buffer (a convolution's padded feature map rows).
/// The caller checks that `a` and every row are finite; it gets whether every output written
/// is finite (an FP32 overflow), and when one is not, redoes the product with
/// [`matmul_f32_known`] for the exact flags. With `half_operands` (every element of `a` and
/// of `b`'s rows an FP16 value, widened, or zero, and the product from +0 partials, whatever
/// the outputs held: the claims of [`Known::half_operands`] and [`Known::zero_partials`])
/// no output can overflow ([`fp16_sums_stay_finite`]), and the outputs are neither read nor
/// checked.
pub fn matmul_f32_rows(
    a: &[f32],
    (base, rows): (&[f32], &[usize]),
    (out, ldo): (&mut [f32], usize),
    n: usize,
    (chunk, half_operands): (usize, bool),
) -> Result<bool, NumericsError> {
    const KERNEL: &str = "matmul_f32_rows";
    if chunk == 0 {
        return Err(NumericsError::ZeroChunk { kernel: KERNEL });
    }
    let k = rows.len();
    if k == 0 || n == 0 {
        return Ok(true);
    }
    let m = a.len() / k;
    check_len(KERNEL, "a", m * k, a.len())?;
    if let Some(&far) = rows.iter().find(|&&r| r.saturating_add(n) > base.len()) {
        check_len(KERNEL, "b's rows", far.saturating_add(n), base.len())?;
    }
    if m == 0 {
        return Ok(true);
    }
    if ldo < n {
        check_len(KERNEL, "out's row stride", n, ldo)?;
    }
    let needed = (m - 1) * ldo + n;
    if out.len() < needed {
        check_len(KERNEL, "out", needed, out.len())?;
    }
    if !avx512::f32_partials_rows(a, (base, rows), (out, ldo), (m, n), (chunk, half_operands)) {
        if half_operands {
            for i in 0..m {
                out[i * ldo..i * ldo + n].fill(0.0);
            }
        }
        f32_partials_rows(a, base, rows, out, (ldo, m, n), chunk);
    }
    if half_operands && fp16_sums_stay_finite(k) {
        return Ok(true);
    }
    Ok((0..m).all(|i| all_finite(&out[i * ldo..i * ldo + n])))
}

/// `out += a · b` with FP32 partials, the kernel of [`matmul_f32_known`] (the same
/// operations in the same order), for an `a` read in place with strides: its element
/// `(i, kk)` at `a[i · row + kk · step]` (a column-major `a` has `row` 1), `b` `k × n` and
/// `out` `m × n` row-major, `m = out.len() / n`. Only for operands the caller knows to be
/// finite FP16 values (widened) with zero partials, whose sums cannot overflow
/// ([`fp16_sums_stay_finite`]): nothing is checked, and no flag can be raised. Returns
/// false, computing nothing, where the CPU has no AVX-512 or the reduction is too long for
/// that claim (the caller then takes its general way).
pub fn matmul_f32_strided(
    (a, row, step): (&[f32], usize, usize),
    b: &[f32],
    out: &mut [f32],
    (k, n): (usize, usize),
    chunk: usize,
) -> Result<bool, NumericsError> {
    const KERNEL: &str = "matmul_f32_strided";
    if chunk == 0 {
        return Err(NumericsError::ZeroChunk { kernel: KERNEL });
    }
    if k == 0 || n == 0 || out.is_empty() {
        return Ok(true);
    }
    let m = out.len() / n;
    check_len(KERNEL, "out", m * n, out.len())?;
    check_len(KERNEL, "b", k * n, b.len())?;
    let last = (m.saturating_sub(1) * row).saturating_add((k - 1) * step);
    if a.len() <= last {
        check_len(KERNEL, "a", last + 1, a.len())?;
    }
    if !fp16_sums_stay_finite(k) {
        return Ok(false);
    }
    Ok(avx512::f32_partials_strided(
        (a, row, step),
        b,
        out,
        (k, n),
        chunk,
    ))
}

/// `acc + a · b` with FP16 inputs and an FP32 partial.
pub fn amp_dot_f32_partials(
    a: &[f16],
    b: &[f16],
    acc: f32,
    chunk: usize,
) -> Result<(f32, FpSts), NumericsError> {
    as_dot(a.len(), acc, |s, out| {
        amp_matmul_f32_partials(s, a, b, out, chunk)
    })
}

/// `acc + a · b` with FP16 inputs and an FP16 partial rounded with `r` at every write.
pub fn amp_dot_f16_partials(
    a: &[f16],
    b: &[f16],
    acc: f16,
    chunk: usize,
    r: &mut Rounding,
) -> Result<(f16, FpSts), NumericsError> {
    as_dot(a.len(), acc, |s, out| {
        amp_matmul_f16_partials(s, a, b, out, chunk, r)
    })
}

/// `acc + a · b` with FP32 inputs and partial.
pub fn dot_f32(
    a: &[f32],
    b: &[f32],
    acc: f32,
    chunk: usize,
) -> Result<(f32, FpSts), NumericsError> {
    as_dot(a.len(), acc, |s, out| matmul_f32(s, a, b, out, chunk))
}

/// A dot product of length `k` as the matmul `(1×k)·(k×1)` onto the one partial `acc`.
fn as_dot<T: Copy>(
    k: usize,
    acc: T,
    matmul: impl FnOnce(MatMulShape, &mut [T]) -> Result<FpSts, NumericsError>,
) -> Result<(T, FpSts), NumericsError> {
    let mut out = [acc];
    let flags = matmul(MatMulShape { m: 1, k, n: 1 }, &mut out)?;
    Ok((out[0], flags))
}

/// Exact f16 → f32 widening of a whole operand (NaNs stay NaN).
fn widen(x: &[f16]) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    super::convert::widen(x, &mut out);
    out
}

/// Where the partials live.
enum Partials<'o, 'x, 'r> {
    F32(&'o mut [f32]),
    F16(&'o mut [f16], &'x mut Rounding<'r>),
}

impl Partials<'_, '_, '_> {
    fn len(&self) -> usize {
        match self {
            Partials::F32(out) => out.len(),
            Partials::F16(out, _) => out.len(),
        }
    }
}

simd_dispatch! {
    /// Whether every value is finite ([`lanes::all_finite`], vectorised).
    fn all_finite(x: &[f32]) -> bool => lanes::all_finite
}

simd_dispatch! {
    /// [`finite_f16`] ([`lanes::all_finite_f16`], vectorised).
    fn all_finite_f16(x: &[f16]) -> bool => lanes::all_finite_f16
}

fn matmul(
    shape: MatMulShape,
    a: &[f32],
    b: &[f32],
    partials: Partials,
    chunk: usize,
    known: Known,
) -> FpSts {
    let MatMulShape { m, k, n } = shape;
    if k == 0 || n == 0 {
        return FpSts::empty();
    }
    let partials_finite = known.zero_partials
        || match &partials {
            Partials::F32(out) => all_finite(out),
            Partials::F16(out, _) => out.iter().all(|h| h.is_finite()),
        };
    let b_finite = known.b_finite.unwrap_or_else(|| all_finite(b));
    let a_finite = known.a_finite.unwrap_or_else(|| all_finite(a));
    let zero = known.zero_partials;
    if !(a_finite && b_finite && partials_finite) {
        let partials = match partials {
            Partials::F32(out) if zero => {
                out.fill(0.0);
                Partials::F32(out)
            }
            Partials::F16(out, r) if zero => {
                out.fill(f16::ZERO);
                Partials::F16(out, r)
            }
            partials => partials,
        };
        return reference(shape, a, b, partials, chunk, 0..m, FpSts::empty()).0;
    }
    let mut flags = FpSts::empty();
    let (out, r) = match partials {
        Partials::F32(out) => {
            // Finite FP16 operands from zero partials: no output can overflow, none is
            // checked.
            let checked = !(zero && known.half_operands && fp16_sums_stay_finite(k));
            // The partials before the product, to redo a row from (zeros need no copy).
            let saved = (!zero).then(|| out.to_vec());
            let (a, b) = (&a[..m * k], &b[..k * n]);
            // The AVX-512 kernel starts from +0 in its registers; the generic one adds to
            // `out`, zeroed first.
            if !avx512::f32_partials(a, b, out, (k, n), (chunk, zero)) {
                if zero {
                    out.fill(0.0);
                }
                f32_partials(a, b, out, k, n, chunk);
            }
            for i in (0..m).filter(|_| checked) {
                let row = &mut out[i * n..(i + 1) * n];
                if !all_finite(row) {
                    // Overflow (possible with FP32 inputs): redo the row with exact flags.
                    match &saved {
                        Some(saved) => row.copy_from_slice(&saved[i * n..(i + 1) * n]),
                        None => row.fill(0.0),
                    }
                    flags |= reference(
                        shape,
                        a,
                        b,
                        Partials::F32(out),
                        chunk,
                        i..i + 1,
                        FpSts::empty(),
                    )
                    .0;
                }
            }
            return flags;
        }
        Partials::F16(out, r) => {
            if zero {
                out.fill(f16::ZERO);
            }
            (out, r)
        }
    };
    // The chunk sums of a block of rows first (they do not depend on the partials), then
    // the partial writes in (row, chunk, column) order.
    let chunks = k.div_ceil(chunk);
    let mut sums = vec![0f32; ROWS.min(m) * chunks * n];
    let mut scratch = RowScratch::default();
    let mut i = 0;
    while i < m {
        let rows = ROWS.min(m - i);
        let block = &mut sums[..rows * chunks * n];
        chunk_sums(&a[i * k..(i + rows) * k], &b[..k * n], block, k, n, chunk);
        for (row, row_sums) in block.chunks_exact(chunks * n).enumerate() {
            let p = &mut out[(i + row) * n..(i + row + 1) * n];
            for s in row_sums.chunks_exact(n) {
                flags |= write_f16_row(p, s, r, &mut scratch);
            }
        }
        i += rows;
    }
    flags
}

simd_dispatch! {
    /// `out += a · b` with FP32 partials for finite operands (`a` is `m × k`, `b` is `k × n`,
    /// `out` is `m × n`, `k, n > 0`), in the order of the module docs: blocks of [`ROWS`] rows
    /// and up to 32 columns keep their chunk sums and partials in registers for the whole
    /// reduction; every element still sees exactly the scalar sequence of operations.
    fn f32_partials(a: &[f32], b: &[f32], out: &mut [f32], k: usize, n: usize, chunk: usize) -> () => f32_partials_body
}

#[inline(always)]
fn f32_partials_body(a: &[f32], b: &[f32], out: &mut [f32], k: usize, n: usize, chunk: usize) {
    let m = out.len() / n;
    f32_partials_any(a, Dense { b, n }, (out, n), (m, k, n), chunk);
}

simd_dispatch! {
    /// [`f32_partials`] with row `kk` of `b` (restricted to the `n` columns computed) at
    /// `base[rows[kk] ..]`, and row `i` of `m` of `out` at `out[i · ldo ..]` (`dims` is
    /// `(ldo, m, n)`): the same operations in the same order for every element.
    fn f32_partials_rows(a: &[f32], base: &[f32], rows: &[usize], out: &mut [f32], dims: (usize, usize, usize), chunk: usize) -> () => f32_partials_rows_body
}

#[inline(always)]
fn f32_partials_rows_body(
    a: &[f32],
    base: &[f32],
    rows: &[usize],
    out: &mut [f32],
    (ldo, m, n): (usize, usize, usize),
    chunk: usize,
) {
    f32_partials_any(
        a,
        Table { base, rows },
        (out, ldo),
        (m, rows.len(), n),
        chunk,
    );
}

simd_dispatch! {
    /// The chunk sums of the rows of `a` (at most [`ROWS`] rows of `k`) against `b` (`k × n`):
    /// `sums[(r · chunks + c) · n + j]` is `a[r][c0]·b[c0][j]` followed by
    /// `fma(a[r][kk], b[kk][j], ·)` down chunk `c` (the module docs' `s`), computed in
    /// register blocks as the FP32-partials kernel computes them.
    fn chunk_sums(a: &[f32], b: &[f32], sums: &mut [f32], k: usize, n: usize, chunk: usize) -> () => chunk_sums_body
}

#[inline(always)]
fn chunk_sums_body(a: &[f32], b: &[f32], sums: &mut [f32], k: usize, n: usize, chunk: usize) {
    // Blocks of fewer rows than `ROWS` in one block too, as the FP32-partials kernel.
    match a.len() / k {
        ROWS => chunk_sums_cols::<ROWS>(a, b, sums, k, n, chunk),
        3 => chunk_sums_cols::<3>(a, b, sums, k, n, chunk),
        2 => chunk_sums_cols::<2>(a, b, sums, k, n, chunk),
        1 => chunk_sums_cols::<1>(a, b, sums, k, n, chunk),
        _ => {}
    }
}

/// [`chunk_sums`] of `R` rows, column block by column block (32, 16, 8 and single columns).
#[inline(always)]
fn chunk_sums_cols<const R: usize>(
    a: &[f32],
    b: &[f32],
    sums: &mut [f32],
    k: usize,
    n: usize,
    chunk: usize,
) {
    column_blocks!(R, n, |j, W| chunk_sums_block::<R, W>(
        a, b, sums, j, k, n, chunk
    ));
}

/// The chunk sums of the `R × W` block at column `j`, chunk by chunk.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn chunk_sums_block<const R: usize, const W: usize>(
    a: &[f32],
    b: &[f32],
    sums: &mut [f32],
    j: usize,
    k: usize,
    n: usize,
    chunk: usize,
) {
    let chunks = k.div_ceil(chunk);
    let rows: [&[f32]; R] = std::array::from_fn(|r| &a[r * k..(r + 1) * k]);
    let mut c0 = 0;
    let mut c = 0;
    while c0 < k {
        let c1 = (c0 + chunk).min(k);
        let mut s = [[0f32; W]; R];
        chunk_block::<R, W, Dense>(&rows, Dense { b, n }, j, (c0, c1), &mut s);
        for r in 0..R {
            sums[(r * chunks + c) * n + j..][..W].copy_from_slice(&s[r]);
        }
        c0 = c1;
        c += 1;
    }
}

/// One FP16 partial write: the exact value `p + s`, rounded once to FP16 (one draw).
#[inline]
fn write_f16(p: f16, s: f32, r: &mut Rounding) -> (f16, FpSts) {
    let draw = r.draw();
    write_f16_with(p.to_f64(), f64::from(s), r, draw)
}

#[inline]
fn write_f16_with(x: f64, y: f64, r: &Rounding, draw: Option<u32>) -> (f16, FpSts) {
    let (hi, lo) = two_sum(x, y);
    if !hi.is_finite() {
        return r.round_f16_with(hi, Tail::Exact, draw);
    }
    r.round_f16_with(hi, Tail::of(lo), draw)
}

/// Buffers reused across the partial writes of one call.
#[derive(Default)]
struct RowScratch {
    old: Vec<f32>,
    draws: Vec<u32>,
}

/// Writes `p[j] = round16(p[j] + s[j])` for a whole output row: the vectorised lane
/// rounding, then the scalar core for lanes it does not handle. Draws are taken in column
/// order, one per write, exactly as [`write_f16`] would take them.
fn write_f16_row(p: &mut [f16], s: &[f32], r: &mut Rounding, scratch: &mut RowScratch) -> FpSts {
    let n = p.len();
    scratch.old.resize(n, 0.0);
    super::convert::widen(p, &mut scratch.old);
    let draws = match r.rng() {
        Some(rng) => {
            scratch.draws.resize(n, 0);
            rng.fill(&mut scratch.draws);
            Some(scratch.draws.as_slice())
        }
        None => None,
    };
    if !write_row(p, &scratch.old, s, draws) {
        return FpSts::empty();
    }
    let mut flags = FpSts::empty();
    for (j, h) in p.iter_mut().enumerate() {
        let (x, y) = (f64::from(scratch.old[j]), f64::from(s[j]));
        let (hi, lo) = two_sum(x, y);
        if lanes::f16_from_f64(hi, lo, None).1 {
            let (v, f) = write_f16_with(x, y, r, draws.map(|d| d[j]));
            *h = v;
            flags |= f;
        }
    }
    flags
}

simd_dispatch! {
    /// The lane part of [`write_f16_row`]; returns whether any lane needs the scalar core.
    fn write_row(p: &mut [f16], old: &[f32], s: &[f32], draws: Option<&[u32]>) -> bool => write_row_body
}

#[inline(always)]
fn write_row_body(p: &mut [f16], old: &[f32], s: &[f32], draws: Option<&[u32]>) -> bool {
    let mut slow = false;
    let lanes = p.iter_mut().zip(old).zip(s);
    match draws {
        None => {
            for ((h, x), y) in lanes {
                let (hi, lo) = two_sum(f64::from(*x), f64::from(*y));
                let (bits, lane_slow) = lanes::f16_from_f64(hi, lo, None);
                *h = f16::from_bits(bits);
                slow |= lane_slow;
            }
        }
        Some(draws) => {
            for (((h, x), y), r) in lanes.zip(draws) {
                let (hi, lo) = two_sum(f64::from(*x), f64::from(*y));
                let (bits, lane_slow) = lanes::f16_from_f64(hi, lo, Some(u64::from(*r)));
                *h = f16::from_bits(bits);
                slow |= lane_slow;
            }
        }
    }
    slow
}

/// The first operation of an AMP product that raised a flag of a mask: where it happened
/// and the values involved (see [`first_fault_f32_partials`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AmpFault {
    /// Output row.
    pub row: usize,
    /// Output column.
    pub col: usize,
    /// The reduction channel of the product or multiply-add that raised it, or `None` when
    /// the partial write (`P + s`) raised it.
    pub channel: Option<usize>,
    /// `a[row, channel]` (or of the chunk's last channel for a partial write).
    pub a: f32,
    /// `b[channel, col]` (idem).
    pub b: f32,
    /// The chunk sum `s` before the operation (the chunk sum written, for a partial write).
    pub chunk_sum: f32,
    /// The partial `P` before the operation.
    pub partial: f64,
    /// The operation's result.
    pub result: f64,
    /// The flags it raised.
    pub flags: FpSts,
}

/// Replays `out += a · b` (FP32 inputs, FP32 partials) in the order of the module docs and
/// stops at the first operation that raises a flag in `mask`, returning it; `out` holds the
/// partials computed up to there. For explaining a floating-point exception.
pub fn first_fault_f32_partials(
    shape: MatMulShape,
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    chunk: usize,
    mask: FpSts,
) -> Result<Option<AmpFault>, NumericsError> {
    shape.check(
        "first_fault_f32_partials",
        a.len(),
        b.len(),
        out.len(),
        chunk,
    )?;
    Ok(reference(shape, a, b, Partials::F32(out), chunk, 0..shape.m, mask).1)
}

/// [`first_fault_f32_partials`] with FP16 partials rounded with `r` (inputs widened to f32).
pub fn first_fault_f16_partials(
    shape: MatMulShape,
    a: &[f32],
    b: &[f32],
    out: &mut [f16],
    chunk: usize,
    r: &mut Rounding,
    mask: FpSts,
) -> Result<Option<AmpFault>, NumericsError> {
    shape.check(
        "first_fault_f16_partials",
        a.len(),
        b.len(),
        out.len(),
        chunk,
    )?;
    Ok(reference(shape, a, b, Partials::F16(out, r), chunk, 0..shape.m, mask).1)
}

/// The scalar reference of the order in the module docs, with every operation's flags, for
/// the rows `rows`; stops at the first operation raising a flag in `mask` (never, for an
/// empty mask) and returns it.
fn reference(
    shape: MatMulShape,
    a: &[f32],
    b: &[f32],
    mut partials: Partials,
    chunk: usize,
    rows: std::ops::Range<usize>,
    mask: FpSts,
) -> (FpSts, Option<AmpFault>) {
    let MatMulShape { k, n, .. } = shape;
    let mut flags = FpSts::empty();
    for i in rows {
        for c0 in (0..k).step_by(chunk) {
            let c1 = (c0 + chunk).min(k);
            for j in 0..n {
                let partial = match &partials {
                    Partials::F32(out) => f64::from(out[i * n + j]),
                    Partials::F16(out, _) => out[i * n + j].to_f64(),
                };
                let fault = |channel, s: f32, result: f64, f: FpSts| AmpFault {
                    row: i,
                    col: j,
                    channel,
                    a: a[i * k + channel.unwrap_or(c1 - 1)],
                    b: b[channel.unwrap_or(c1 - 1) * n + j],
                    chunk_sum: s,
                    partial,
                    result,
                    flags: f,
                };
                let (mut s, f) = fp32::mul(a[i * k + c0], b[c0 * n + j]);
                flags |= f;
                if f.intersects(mask) {
                    return (flags, Some(fault(Some(c0), 0.0, f64::from(s), f)));
                }
                for kk in c0 + 1..c1 {
                    let (v, f) = fp32::fma(a[i * k + kk], b[kk * n + j], s);
                    flags |= f;
                    if f.intersects(mask) {
                        return (flags, Some(fault(Some(kk), s, f64::from(v), f)));
                    }
                    s = v;
                }
                let (result, f) = match &mut partials {
                    Partials::F32(out) => {
                        let (v, f) = fp32::add(out[i * n + j], s);
                        out[i * n + j] = v;
                        (f64::from(v), f)
                    }
                    Partials::F16(out, r) => {
                        let (v, f) = write_f16(out[i * n + j], s, r);
                        out[i * n + j] = v;
                        (v.to_f64(), f)
                    }
                };
                flags |= f;
                if f.intersects(mask) {
                    return (flags, Some(fault(None, s, result, f)));
                }
            }
        }
    }
    (flags, None)
}

#[cfg(test)]
#[path = "amp_tests.rs"]
mod tests;

//! Element-wise slice kernels: unary and binary arithmetic, comparisons, the fused
//! `a + s·b` and activation gradients over whole slices, and the element loops ([`each`],
//! [`each2`], [`each3`]) every other element-wise conversion of the simulator runs through.
//!
//! Each kernel computes exactly what the scalar operation of [`super::super::fp16`],
//! [`super::super::fp32`] or [`super::super::cast`] computes for every element, in
//! ascending element order, and so consumes stochastic-rounding draws element by element
//! exactly as the scalar operations do (one per rounded FP16 result). The operation is
//! chosen once per call, outside the element loop, so the loop body is the inlined scalar
//! operation: no dynamic dispatch and no allocation. Because every element is independent
//! and draws are taken in order, running a kernel on `src[j..j + 1]` after running it on
//! `src[..j]` gives the same element `j` and the same draws as one call over the whole
//! slice: the simulator relies on this to find the first element that raised a trapping
//! flag.

use half::f16;
use ipusim_ir::Activation;

use crate::numerics::error::{check_len, NumericsError};
use crate::numerics::flags::FpSts;
use crate::numerics::ops::{ArithOp, CompareOp, UnaryOp};
use crate::numerics::round::{two_sum, Rounding, F16_NAN};
use crate::numerics::simd::simd_dispatch;
use crate::numerics::{fp16, fp32};

use super::lanes;

/// `dst[j] = f(src[j])` for every `j`; returns the OR of the flags.
#[inline(always)]
pub fn each<A: Copy, O>(src: &[A], dst: &mut [O], mut f: impl FnMut(A) -> (O, FpSts)) -> FpSts {
    let mut flags = FpSts::empty();
    for (s, d) in src.iter().zip(dst.iter_mut()) {
        let (v, fl) = f(*s);
        *d = v;
        flags |= fl;
    }
    flags
}

/// `dst[j] = f(a[j], b[j])` for every `j`; returns the OR of the flags.
#[inline(always)]
pub fn each2<A: Copy, B: Copy, O>(
    a: &[A],
    b: &[B],
    dst: &mut [O],
    mut f: impl FnMut(A, B) -> (O, FpSts),
) -> FpSts {
    let mut flags = FpSts::empty();
    for ((x, y), d) in a.iter().zip(b).zip(dst.iter_mut()) {
        let (v, fl) = f(*x, *y);
        *d = v;
        flags |= fl;
    }
    flags
}

/// `dst[j] = f(a[j], b[j], c[j])` for every `j`; returns the OR of the flags.
#[inline(always)]
pub fn each3<A: Copy, B: Copy, C: Copy, O>(
    a: &[A],
    b: &[B],
    c: &[C],
    dst: &mut [O],
    mut f: impl FnMut(A, B, C) -> (O, FpSts),
) -> FpSts {
    let mut flags = FpSts::empty();
    for (((x, y), z), d) in a.iter().zip(b).zip(c).zip(dst.iter_mut()) {
        let (v, fl) = f(*x, *y, *z);
        *d = v;
        flags |= fl;
    }
    flags
}

/// Checks that every operand has `dst`'s length.
fn lengths(
    kernel: &'static str,
    inputs: &[(&'static str, usize)],
    dst: usize,
) -> Result<(), NumericsError> {
    for &(name, len) in inputs {
        check_len(kernel, name, dst, len)?;
    }
    Ok(())
}

/// `dst[j] = op(src[j])` in FP16 with the rounding `r`.
pub fn unary_f16(
    op: UnaryOp,
    src: &[f16],
    dst: &mut [f16],
    r: &mut Rounding,
) -> Result<FpSts, NumericsError> {
    lengths("unary_f16", &[("src", src.len())], dst.len())?;
    Ok(match op {
        UnaryOp::Neg => each(src, dst, fp16::neg),
        UnaryOp::Abs => each(src, dst, fp16::abs),
        UnaryOp::Relu => relu_bits(src, dst),
        UnaryOp::Sqrt => each(src, dst, |x| fp16::sqrt(x, r)),
        UnaryOp::Exp => each(src, dst, |x| fp16::exp(x, r)),
        UnaryOp::Log => each(src, dst, |x| fp16::log(x, r)),
        UnaryOp::Tanh => each(src, dst, |x| fp16::tanh(x, r)),
        UnaryOp::Sigmoid => each(src, dst, |x| fp16::sigmoid(x, r)),
        UnaryOp::Gelu => each(src, dst, |x| fp16::gelu(x, r)),
    })
}

/// `dst[j] = op(src[j])` in FP32.
pub fn unary_f32(op: UnaryOp, src: &[f32], dst: &mut [f32]) -> Result<FpSts, NumericsError> {
    lengths("unary_f32", &[("src", src.len())], dst.len())?;
    Ok(match op {
        UnaryOp::Neg => each(src, dst, fp32::neg),
        UnaryOp::Abs => each(src, dst, fp32::abs),
        UnaryOp::Relu => each(src, dst, fp32::relu),
        UnaryOp::Sqrt => each(src, dst, fp32::sqrt),
        UnaryOp::Exp => each(src, dst, fp32::exp),
        UnaryOp::Log => each(src, dst, fp32::log),
        UnaryOp::Tanh => each(src, dst, fp32::tanh),
        UnaryOp::Sigmoid => each(src, dst, fp32::sigmoid),
        UnaryOp::Gelu => each(src, dst, fp32::gelu),
    })
}

/// `dst[j] = a[j] op b[j]` in FP16 with the rounding `r`.
pub fn binary_f16(
    op: ArithOp,
    a: &[f16],
    b: &[f16],
    dst: &mut [f16],
    r: &mut Rounding,
) -> Result<FpSts, NumericsError> {
    lengths("binary_f16", &[("a", a.len()), ("b", b.len())], dst.len())?;
    if r.rng().is_none() && matches!(op, ArithOp::Add | ArithOp::Sub | ArithOp::Mul) {
        return nearest_sums_products(op, a, b, dst, r);
    }
    Ok(match op {
        ArithOp::Add => each2(a, b, dst, |x, y| fp16::add(x, y, r)),
        ArithOp::Sub => each2(a, b, dst, |x, y| fp16::sub(x, y, r)),
        ArithOp::Mul => each2(a, b, dst, |x, y| fp16::mul(x, y, r)),
        ArithOp::Div => exact_f16(ExactOp::Quotient, a, b, dst, r),
        ArithOp::Min => each2(a, b, dst, fp16::min),
        ArithOp::Max => each2(a, b, dst, fp16::max),
    })
}

/// The FP16 operations [`exact_f16`] runs a block at a time: each gives, from two widened
/// operands, an `f64` value `hi` and a value whose sign is the side of the exact result
/// from it (`hi` is the exact result when that is 0).
#[derive(Clone, Copy, Debug)]
enum ExactOp {
    /// `x + s·y` ([`fp16::scaled_add`]): `s·y` is exact in f64, TwoSum gives the pair.
    ScaledAdd(f32),
    /// `x / y` ([`fp16::div`]): the quotient and the side of the exact one
    /// ([`fp16::quotient`]).
    Quotient,
}

impl ExactOp {
    #[inline(always)]
    fn pair(self, x: f64, y: f64) -> (f64, f64) {
        match self {
            ExactOp::ScaledAdd(s) => two_sum(x, f64::from(s) * y),
            ExactOp::Quotient => fp16::quotient(x, y),
        }
    }

    /// The scalar operation on one element, with its draw given.
    fn scalar(self, a: f16, b: f16, r: &Rounding, draw: Option<u32>) -> (f16, FpSts) {
        match self {
            ExactOp::ScaledAdd(s) => fp16::scaled_add_with(a, s, b, r, draw),
            ExactOp::Quotient => fp16::div_with(a, b, r, draw),
        }
    }
}

/// `dst[j] = op(a[j], b[j])` rounded once to FP16 ([`ExactOp`]), equal element by element,
/// flag by flag and draw by draw to the scalar operation: the operands widened (exact),
/// draws generated in bulk in element order, each lane rounded branch-free from its exact
/// pair (`kernels::lanes`), and the lanes the branch-free rounding does not handle (NaN,
/// infinities, overflow, tiny results, division by zero) through the scalar operation with
/// their own draw.
fn exact_f16(op: ExactOp, a: &[f16], b: &[f16], dst: &mut [f16], r: &mut Rounding) -> FpSts {
    const CHUNK: usize = 256;
    let (mut x, mut y, mut draws) = ([0f32; CHUNK], [0f32; CHUNK], [0u32; CHUNK]);
    let mut flags = FpSts::empty();
    for ((a, b), d) in a
        .chunks(CHUNK)
        .zip(b.chunks(CHUNK))
        .zip(dst.chunks_mut(CHUNK))
    {
        let n = a.len();
        let (x, y) = (&mut x[..n], &mut y[..n]);
        super::convert::widen(a, x);
        super::convert::widen(b, y);
        let draws = r.rng().map(|rng| {
            rng.fill(&mut draws[..n]);
            &draws[..n]
        });
        if exact_lanes(op, x, y, draws, d) {
            for j in 0..n {
                let (hi, side) = op.pair(f64::from(x[j]), f64::from(y[j]));
                if lanes::f16_from_f64(hi, side, None).1 {
                    let (v, f) = op.scalar(a[j], b[j], r, draws.map(|d| d[j]));
                    d[j] = v;
                    flags |= f;
                }
            }
        }
    }
    flags
}

simd_dispatch! {
    /// The lanes of [`exact_f16`]; returns whether any lane needs the scalar operation.
    fn exact_lanes(op: ExactOp, x: &[f32], y: &[f32], draws: Option<&[u32]>, d: &mut [f16]) -> bool => exact_lanes_body
}

#[inline(always)]
fn exact_lanes_body(
    op: ExactOp,
    x: &[f32],
    y: &[f32],
    draws: Option<&[u32]>,
    d: &mut [f16],
) -> bool {
    #[inline(always)]
    fn run(
        pair: impl Fn(f64, f64) -> (f64, f64),
        x: &[f32],
        y: &[f32],
        draws: Option<&[u32]>,
        d: &mut [f16],
    ) -> bool {
        let mut slow = false;
        let lanes = d.iter_mut().zip(x).zip(y);
        match draws {
            None => {
                for ((h, &x), &y) in lanes {
                    let (hi, side) = pair(f64::from(x), f64::from(y));
                    let (bits, lane_slow) = lanes::f16_from_f64(hi, side, None);
                    *h = f16::from_bits(bits);
                    slow |= lane_slow;
                }
            }
            Some(draws) => {
                for (((h, &x), &y), &r) in lanes.zip(draws) {
                    let (hi, side) = pair(f64::from(x), f64::from(y));
                    let (bits, lane_slow) = lanes::f16_from_f64(hi, side, Some(u64::from(r)));
                    *h = f16::from_bits(bits);
                    slow |= lane_slow;
                }
            }
        }
        slow
    }
    // One loop per operation, the operation fixed inside it.
    match op {
        ExactOp::ScaledAdd(s) => run(|x, y| ExactOp::ScaledAdd(s).pair(x, y), x, y, draws, d),
        ExactOp::Quotient => run(|x, y| ExactOp::Quotient.pair(x, y), x, y, draws, d),
    }
}

/// FP16 `+`, `−`, `×` under round to nearest, a block at a time: the operands widened to
/// f32 (exact), the operation in f32 and the results rounded to FP16 by the bulk
/// conversion, which applies the IPU's NaN and overflow rules with their flags. This is the
/// fast path of [`fp16::add`], [`fp16::sub`] and [`fp16::mul`] (a product of two FP16
/// values is exact in f32, and a sum rounded through f32 rounds to FP16 as the exact sum
/// does), so every element and the flags equal the scalar operation's.
fn nearest_sums_products(
    op: ArithOp,
    a: &[f16],
    b: &[f16],
    dst: &mut [f16],
    r: &mut Rounding,
) -> Result<FpSts, NumericsError> {
    // One fused pass where the CPU has it; every result normal (or zero) raises no flag.
    let done = super::convert::sums_products_rne(op, a, b, dst).unwrap_or(0);
    let (a, b, dst) = (&a[done..], &b[done..], &mut dst[done..]);
    // Small: the buffers are zeroed on every call, and a vertex has few elements.
    const CHUNK: usize = 64;
    let (mut x, mut y) = ([0f32; CHUNK], [0f32; CHUNK]);
    let mut flags = FpSts::empty();
    for ((a, b), d) in a
        .chunks(CHUNK)
        .zip(b.chunks(CHUNK))
        .zip(dst.chunks_mut(CHUNK))
    {
        let (x, y) = (&mut x[..a.len()], &mut y[..a.len()]);
        super::convert::widen(a, x);
        super::convert::widen(b, y);
        match op {
            ArithOp::Add => x.iter_mut().zip(&*y).for_each(|(p, q)| *p += q),
            ArithOp::Sub => x.iter_mut().zip(&*y).for_each(|(p, q)| *p -= q),
            _ => x.iter_mut().zip(&*y).for_each(|(p, q)| *p *= q),
        }
        flags |= super::convert::f32_to_f16_slice(x, d, r)?;
    }
    Ok(flags)
}

/// `dst[j] = a[j] op b[j]` in FP32.
pub fn binary_f32(
    op: ArithOp,
    a: &[f32],
    b: &[f32],
    dst: &mut [f32],
) -> Result<FpSts, NumericsError> {
    lengths("binary_f32", &[("a", a.len()), ("b", b.len())], dst.len())?;
    Ok(match op {
        ArithOp::Add => finite_blocks(a, b, dst, |x, y| x + y, fp32::add),
        ArithOp::Sub => finite_blocks(a, b, dst, |x, y| x - y, fp32::sub),
        ArithOp::Mul => finite_blocks(a, b, dst, |x, y| x * y, fp32::mul),
        ArithOp::Div => each2(a, b, dst, fp32::div),
        ArithOp::Min => each2(a, b, dst, fp32::min),
        ArithOp::Max => each2(a, b, dst, fp32::max),
    })
}

/// `dst[j] = (a[j] op b[j]) as u8` (a Bool byte, 1 or 0) for FP16 operands; INV for NaN.
pub fn compare_f16(
    op: CompareOp,
    a: &[f16],
    b: &[f16],
    dst: &mut [u8],
) -> Result<FpSts, NumericsError> {
    lengths("compare_f16", &[("a", a.len()), ("b", b.len())], dst.len())?;
    Ok(each2(a, b, dst, |x, y| {
        let (t, f) = fp16::compare(op, x, y);
        (u8::from(t), f)
    }))
}

/// `dst[j] = (a[j] op b[j]) as u8` (a Bool byte, 1 or 0) for FP32 operands; INV for NaN.
pub fn compare_f32(
    op: CompareOp,
    a: &[f32],
    b: &[f32],
    dst: &mut [u8],
) -> Result<FpSts, NumericsError> {
    lengths("compare_f32", &[("a", a.len()), ("b", b.len())], dst.len())?;
    Ok(each2(a, b, dst, |x, y| {
        let (t, f) = fp32::compare(op, x, y);
        (u8::from(t), f)
    }))
}

/// `dst[j] = a[j] + s·b[j]` in FP16, one rounding of the exact value ([`fp16::scaled_add`]),
/// a block at a time ([`exact_f16`]).
pub fn scaled_add_f16(
    a: &[f16],
    b: &[f16],
    s: f32,
    dst: &mut [f16],
    r: &mut Rounding,
) -> Result<FpSts, NumericsError> {
    lengths(
        "scaled_add_f16",
        &[("a", a.len()), ("b", b.len())],
        dst.len(),
    )?;
    Ok(exact_f16(ExactOp::ScaledAdd(s), a, b, dst, r))
}

/// `dst[j] = a[j] + s·b[j]` in FP32, one rounding (a fused multiply-add).
pub fn scaled_add_f32(
    a: &[f32],
    b: &[f32],
    s: f32,
    dst: &mut [f32],
) -> Result<FpSts, NumericsError> {
    lengths(
        "scaled_add_f32",
        &[("a", a.len()), ("b", b.len())],
        dst.len(),
    )?;
    Ok(each2(a, b, dst, |x, y| fp32::scaled_add(x, s, y)))
}

/// `dst[j] = dy[j] · f'(x[j])` in FP16 ([`fp16::activation_grad`]).
pub fn activation_grad_f16(
    act: Activation,
    x: &[f16],
    dy: &[f16],
    dst: &mut [f16],
    r: &mut Rounding,
) -> Result<FpSts, NumericsError> {
    lengths(
        "activation_grad_f16",
        &[("x", x.len()), ("dy", dy.len())],
        dst.len(),
    )?;
    if act == Activation::Relu {
        return Ok(relu_grad_bits(x, dy, dst));
    }
    Ok(each2(x, dy, dst, |x, g| {
        fp16::activation_grad(act, x, g, r)
    }))
}

/// Whether the FP16 bits `x` are a value above zero (`+0` excluded, `+inf` included): the
/// bits `1..=0x7c00`.
#[inline(always)]
fn above_zero(x: u16) -> bool {
    x.wrapping_sub(1) < 0x7c00
}

/// Whether the FP16 bits `x` are a NaN.
#[inline(always)]
fn is_nan(x: u16) -> bool {
    x & 0x7fff > 0x7c00
}

simd_dispatch! {
    /// [`fp16::relu`] on every element, on the bits (branch-free, vectorised): the value
    /// when above zero, `+0` otherwise (`-0` included), the canonical NaN and INV for a NaN.
    fn relu_bits(src: &[f16], dst: &mut [f16]) -> FpSts => relu_bits_body
}

#[inline(always)]
fn relu_bits_body(src: &[f16], dst: &mut [f16]) -> FpSts {
    let mut nan = false;
    for (s, d) in src.iter().zip(dst.iter_mut()) {
        let x = s.to_bits();
        let v = if above_zero(x) { x } else { 0 };
        let x_nan = is_nan(x);
        *d = f16::from_bits(if x_nan { F16_NAN.to_bits() } else { v });
        nan |= x_nan;
    }
    inv_if(nan)
}

simd_dispatch! {
    /// [`fp16::activation_grad`] of ReLU on every element, on the bits (branch-free,
    /// vectorised): `dy` where `x > 0`, `+0` elsewhere, INV when an `x` is a NaN (the
    /// comparison's flag; a NaN `dy` passes through where `x > 0`, as the scalar does).
    fn relu_grad_bits(x: &[f16], dy: &[f16], dst: &mut [f16]) -> FpSts => relu_grad_bits_body
}

#[inline(always)]
fn relu_grad_bits_body(x: &[f16], dy: &[f16], dst: &mut [f16]) -> FpSts {
    let mut nan = false;
    for ((x, g), d) in x.iter().zip(dy).zip(dst.iter_mut()) {
        let x = x.to_bits();
        *d = f16::from_bits(if above_zero(x) { g.to_bits() } else { 0 });
        nan |= is_nan(x);
    }
    inv_if(nan)
}

/// INV when a NaN was met, else no flag.
#[inline(always)]
fn inv_if(nan: bool) -> FpSts {
    if nan {
        FpSts::INV
    } else {
        FpSts::empty()
    }
}

/// `dst[j] = dy[j] · f'(x[j])` in FP32 ([`fp32::activation_grad`]).
pub fn activation_grad_f32(
    act: Activation,
    x: &[f32],
    dy: &[f32],
    dst: &mut [f32],
) -> Result<FpSts, NumericsError> {
    lengths(
        "activation_grad_f32",
        &[("x", x.len()), ("dy", dy.len())],
        dst.len(),
    )?;
    Ok(each2(x, dy, dst, |x, g| fp32::activation_grad(act, x, g)))
}

/// Elements per block of [`finite_blocks`].
const F32_BLOCK: usize = 64;

/// `dst[j] = op(a[j], b[j])` a block at a time, for an FP32 operation whose IEEE result
/// `op` is the value of `scalar` and raises no flag when it is finite: each block is
/// computed without branches and checked for a non-finite result, and a block that has one
/// is recomputed by `scalar` (canonical NaN, INV, OFLO), so values and flags are the
/// scalar operation's.
#[inline(always)]
fn finite_blocks(
    a: &[f32],
    b: &[f32],
    dst: &mut [f32],
    op: impl Fn(f32, f32) -> f32,
    scalar: impl Fn(f32, f32) -> (f32, FpSts),
) -> FpSts {
    let mut flags = FpSts::empty();
    for ((a, b), d) in a
        .chunks(F32_BLOCK)
        .zip(b.chunks(F32_BLOCK))
        .zip(dst.chunks_mut(F32_BLOCK))
    {
        let mut finite = true;
        for ((x, y), o) in a.iter().zip(b).zip(d.iter_mut()) {
            *o = op(*x, *y);
            finite &= o.is_finite();
        }
        if !finite {
            flags |= each2(a, b, d, &scalar);
        }
    }
    flags
}

simd_dispatch! {
    /// `acc[j] += row[j]` in FP32 (nearest even) for each `acc.len()`-wide row of `rows` in
    /// turn, returning whether every sum is finite: then no flag was raised (a sum of finite
    /// values raises one only when it overflows). Not finite is for good (an infinity plus
    /// anything is infinite or NaN, and a NaN stays), so the sums are tested once, after the
    /// last row. When it returns false, `acc` holds the sums as computed and the caller sums
    /// again with [`accumulate_f32`], which gives the flags.
    pub fn add_rows_in_place_finite(acc: &mut [f32], rows: &[f32]) -> bool => add_rows_in_place_finite_body
}

/// [`add_rows_in_place_finite`]: IEEE f32 adds (never contracted), then the branch-free fold
/// of the sums' finiteness ([`lanes::all_finite`]), so that both vectorise.
#[inline(always)]
fn add_rows_in_place_finite_body(acc: &mut [f32], rows: &[f32]) -> bool {
    for row in rows.chunks_exact(acc.len().max(1)) {
        for (a, v) in acc.iter_mut().zip(row) {
            *a += *v;
        }
    }
    lanes::all_finite(acc)
}

/// `acc[j] = acc[j] op x[j]` in FP32 for `op` Add or Max (the step of a column-wise
/// reduction; other operations are treated as Add).
pub fn accumulate_f32(op: ArithOp, acc: &mut [f32], x: &[f32]) -> Result<FpSts, NumericsError> {
    lengths("accumulate_f32", &[("x", x.len())], acc.len())?;
    #[inline(always)]
    fn run(acc: &mut [f32], x: &[f32], step: impl Fn(f32, f32) -> (f32, FpSts)) -> FpSts {
        let mut flags = FpSts::empty();
        for (a, v) in acc.iter_mut().zip(x) {
            let (r, f) = step(*a, *v);
            *a = r;
            flags |= f;
        }
        flags
    }
    if op == ArithOp::Max {
        return Ok(run(acc, x, fp32::max));
    }
    // Sums a block at a time into a buffer, kept when all are finite, else the block
    // summed by the scalar operation (see [`finite_blocks`]).
    let mut sums = [0f32; F32_BLOCK];
    let mut flags = FpSts::empty();
    for (acc, x) in acc.chunks_mut(F32_BLOCK).zip(x.chunks(F32_BLOCK)) {
        let sums = &mut sums[..acc.len()];
        let mut finite = true;
        for ((s, a), v) in sums.iter_mut().zip(&*acc).zip(x) {
            *s = a + v;
            finite &= s.is_finite();
        }
        if finite {
            acc.copy_from_slice(sums);
        } else {
            flags |= run(acc, x, fp32::add);
        }
    }
    Ok(flags)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numerics::rng::SrRng;

    fn halves() -> Vec<f16> {
        let mut rng = SrRng::new(11, 0, 0);
        (0..4000)
            .map(|_| f16::from_bits(rng.next_u32() as u16))
            .collect()
    }

    /// `a + s·b` in FP16, in blocks, equals the scalar operation element by element and draw
    /// by draw: random bit patterns (NaN, infinities, subnormals), scales whose products
    /// overflow, vanish below FP16's range or need the exact tail, both overflow policies.
    #[test]
    fn slices_equal_scalar_operations_draw_by_draw() {
        let x = halves();
        let y: Vec<f16> = x.iter().rev().copied().collect();
        for (sr, nanoo) in [(false, false), (true, false), (false, true), (true, true)] {
            for s in [0.3f32, -1.0e-3, 6.0e4, 1.0e-30, -0.1] {
                let mut ks = SrRng::new(5, 1, 2);
                let mut ss = ks.clone();
                let mut out = vec![f16::ZERO; x.len()];
                let flags =
                    scaled_add_f16(&x, &y, s, &mut out, &mut Rounding::new(sr, nanoo, &mut ks))
                        .unwrap();
                let mut r = Rounding::new(sr, nanoo, &mut ss);
                let mut expect = FpSts::empty();
                for j in 0..x.len() {
                    let (v, f) = fp16::scaled_add(x[j], s, y[j], &mut r);
                    assert_eq!(
                        out[j].to_bits(),
                        v.to_bits(),
                        "{j}: {} + {s} * {}",
                        x[j],
                        y[j]
                    );
                    expect |= f;
                }
                assert_eq!(flags, expect, "sr {sr} nanoo {nanoo} s {s}");
                assert!(expect.contains(FpSts::INV), "NaN operands");
                assert_eq!(ks, ss);
            }
        }
    }

    /// FP16 division in blocks equals the scalar division element by element and draw by
    /// draw: random bit patterns (zeros, NaN, infinities, subnormals, overflowing and
    /// vanishing quotients), nearest and stochastic, both overflow policies.
    #[test]
    fn quotients_equal_the_scalar_division_draw_by_draw() {
        let x = halves();
        let mut y: Vec<f16> = x.iter().rev().copied().collect();
        y[17] = f16::ZERO;
        y[18] = f16::NEG_ZERO;
        for (sr, nanoo) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut ks = SrRng::new(9, 3, 1);
            let mut ss = ks.clone();
            let mut out = vec![f16::ZERO; x.len()];
            let flags = binary_f16(
                ArithOp::Div,
                &x,
                &y,
                &mut out,
                &mut Rounding::new(sr, nanoo, &mut ks),
            )
            .unwrap();
            let mut r = Rounding::new(sr, nanoo, &mut ss);
            let mut expect = FpSts::empty();
            for j in 0..x.len() {
                let (v, f) = fp16::div(x[j], y[j], &mut r);
                assert_eq!(out[j].to_bits(), v.to_bits(), "{j}: {} / {}", x[j], y[j]);
                expect |= f;
            }
            assert_eq!(flags, expect, "sr {sr} nanoo {nanoo}");
            assert!(expect.contains(FpSts::DIV0 | FpSts::INV | FpSts::OFLO));
            assert_eq!(ks, ss);
        }
    }

    /// The round-to-nearest block path of FP16 `+`, `−`, `×` gives every element and the
    /// flags of the scalar operations, over random bit patterns (NaNs, infinities,
    /// subnormals, overflowing products and sums), with both overflow policies.
    #[test]
    fn nearest_sums_and_products_equal_the_scalar_operations() {
        let x = halves();
        let y: Vec<f16> = x.iter().rev().copied().collect();
        for nanoo in [false, true] {
            for op in [ArithOp::Add, ArithOp::Sub, ArithOp::Mul] {
                let mut out = vec![f16::ZERO; x.len()];
                let flags = binary_f16(op, &x, &y, &mut out, &mut Rounding::nearest(nanoo));
                let mut r = Rounding::nearest(nanoo);
                let mut expect = FpSts::empty();
                for j in 0..x.len() {
                    let (v, f) = fp16::binary(op, x[j], y[j], &mut r);
                    assert_eq!(
                        out[j].to_bits(),
                        v.to_bits(),
                        "{op:?} {:?} {:?}",
                        x[j],
                        y[j]
                    );
                    expect |= f;
                }
                assert_eq!(flags.unwrap(), expect, "{op:?}");
                assert!(expect.contains(FpSts::OFLO) && expect.contains(FpSts::INV));
            }
        }
    }

    /// The fused pass of FP16 `+`, `−`, `×` (normal results and zeros, as a CNN's maps
    /// have them), its tail, and its fall-back when a result overflows in a group or in
    /// the tail: every element and the flags of the scalar operations.
    #[test]
    fn fused_sums_and_products_equal_the_scalar_operations() {
        let normal = |i: usize| match i % 7 {
            0 => f16::ZERO,
            4 => f16::NEG_ZERO,
            _ => f16::from_f32(((i as f32) * 0.71).sin() * 40.0 + 0.25),
        };
        for len in [0usize, 5, 16, 17, 100, 1000] {
            for overflow in [None, Some(0), Some(len / 2), Some(len.saturating_sub(1))] {
                if overflow.is_some() && len == 0 {
                    continue;
                }
                let mut x: Vec<f16> = (0..len).map(normal).collect();
                let y: Vec<f16> = (0..len).map(|i| normal(i * 3 + 1)).collect();
                if let Some(k) = overflow {
                    x[k] = f16::MAX;
                }
                for nanoo in [false, true] {
                    for op in [ArithOp::Add, ArithOp::Sub, ArithOp::Mul] {
                        let mut out = vec![f16::from_bits(0x7bff); len];
                        let flags = binary_f16(op, &x, &y, &mut out, &mut Rounding::nearest(nanoo))
                            .unwrap();
                        let mut r = Rounding::nearest(nanoo);
                        let mut expect = FpSts::empty();
                        for j in 0..len {
                            let (v, f) = fp16::binary(op, x[j], y[j], &mut r);
                            assert_eq!(out[j].to_bits(), v.to_bits(), "{op:?} {len} {j}");
                            expect |= f;
                        }
                        assert_eq!(flags, expect, "{op:?} len {len} overflow {overflow:?}");
                    }
                }
            }
        }
    }

    /// FP16 ReLU and its gradient on the bits equal the scalar operations on every FP16
    /// value (the gradient against gradients of each class, NaN among them), flags too.
    #[test]
    fn relu_and_its_gradient_on_the_bits_equal_the_scalar_operations() {
        let all: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let mut out = vec![f16::ZERO; all.len()];
        let flags = unary_f16(UnaryOp::Relu, &all, &mut out, &mut Rounding::nearest(false));
        let mut expect = FpSts::empty();
        for (x, o) in all.iter().zip(&out) {
            let (v, f) = fp16::relu(*x);
            assert_eq!(o.to_bits(), v.to_bits(), "relu {:#x}", x.to_bits());
            expect |= f;
        }
        assert_eq!(flags.unwrap(), expect);
        for g in [0x3c00u16, 0x8000, 0x0000, 0x7c00, 0x7e00, 0xfe01, 0x0001] {
            let dy = vec![f16::from_bits(g); all.len()];
            let mut r = Rounding::nearest(false);
            let flags = activation_grad_f16(Activation::Relu, &all, &dy, &mut out, &mut r);
            let mut expect = FpSts::empty();
            for (x, o) in all.iter().zip(&out) {
                let (v, f) = fp16::activation_grad(Activation::Relu, *x, dy[0], &mut r);
                assert_eq!(o.to_bits(), v.to_bits(), "grad {:#x} {g:#x}", x.to_bits());
                expect |= f;
            }
            assert_eq!(flags.unwrap(), expect, "dy {g:#x}");
            // Without NaN inputs, no flag.
            let finite = &all[..0x7c00];
            let flags = activation_grad_f16(
                Activation::Relu,
                finite,
                &dy[..0x7c00],
                &mut out[..0x7c00],
                &mut r,
            );
            assert_eq!(flags.unwrap(), FpSts::empty());
        }
    }

    /// FP32 `+ − ×` and the accumulation of a reduction, a block at a time, give every
    /// element and the flags of the scalar operations over random bit patterns (NaN,
    /// infinities, overflowing sums and products in some blocks, none in others).
    #[test]
    fn f32_blocks_equal_the_scalar_operations() {
        let mut rng = SrRng::new(12, 0, 0);
        let mut x: Vec<f32> = (0..4096).map(|_| f32::from_bits(rng.next_u32())).collect();
        // A run of blocks of small finite values: the branch-free path alone.
        for (j, v) in x[1024..3072].iter_mut().enumerate() {
            *v = j as f32 * 0.37 - 300.0;
        }
        // Overflowing sums and differences (`y` is `x` reversed), and a NaN.
        x[5] = f32::MAX;
        x[4090] = f32::MAX;
        x[7] = f32::MAX;
        x[4088] = -f32::MAX;
        x[9] = f32::NAN;
        let y: Vec<f32> = x.iter().rev().copied().collect();
        for op in [ArithOp::Add, ArithOp::Sub, ArithOp::Mul] {
            let mut out = vec![0f32; x.len()];
            let flags = binary_f32(op, &x, &y, &mut out).unwrap();
            let mut expect = FpSts::empty();
            for j in 0..x.len() {
                let (v, f) = fp32::binary(op, x[j], y[j]);
                assert_eq!(out[j].to_bits(), v.to_bits(), "{op:?} {} {}", x[j], y[j]);
                expect |= f;
            }
            assert_eq!(flags, expect, "{op:?}");
            assert!(expect.contains(FpSts::OFLO) && expect.contains(FpSts::INV));
        }
        let mut acc = x.clone();
        let flags = accumulate_f32(ArithOp::Add, &mut acc, &y).unwrap();
        let mut expect = FpSts::empty();
        for j in 0..x.len() {
            let (v, f) = fp32::add(x[j], y[j]);
            assert_eq!(acc[j].to_bits(), v.to_bits(), "{} + {}", x[j], y[j]);
            expect |= f;
        }
        assert_eq!(flags, expect);
    }

    /// Row sums in place equal the flagged row-by-row sums, say finite exactly when every
    /// flagged sum is finite, and then no flag was raised: a NaN or an infinity read, an
    /// overflow mid-way, one that later rows of the other sign cannot undo, a last-row one.
    #[test]
    fn row_sums_in_place_are_the_flagged_sums_and_finite_only_without_flags() {
        let mut rng = SrRng::new(5, 0, 0);
        let big = f32::MAX / 2.0;
        // One vector's width, and widths past a block of the finiteness fold (256).
        for (width, case) in [16, 300]
            .into_iter()
            .flat_map(|w| (0..6).map(move |c| (w, c)))
        {
            let count = 9;
            let mut rows: Vec<f32> = (0..width * count)
                .map(|_| (rng.next_u32() % 2001) as f32 - 1000.0)
                .collect();
            match case {
                1 => rows[3 * width + width - 3] = f32::NAN,
                2 => rows[8 * width] = f32::INFINITY,
                3 => (1..4).for_each(|r| rows[r * width + 2] = big),
                4 => {
                    (1..4).for_each(|r| rows[r * width + 2] = big);
                    (4..8).for_each(|r| rows[r * width + 2] = -big);
                }
                5 => (7..9).for_each(|r| rows[r * width + 7] = f32::MAX),
                _ => {}
            }
            let (first, rest) = rows.split_at(width);
            let mut fast = first.to_vec();
            let finite = add_rows_in_place_finite(&mut fast, rest);
            let mut flagged = first.to_vec();
            let mut flags = FpSts::empty();
            for row in rest.chunks_exact(width) {
                flags |= accumulate_f32(ArithOp::Add, &mut flagged, row).unwrap();
            }
            for (a, b) in fast.iter().zip(&flagged) {
                assert!(
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                    "case {case}"
                );
            }
            assert_eq!(finite, flagged.iter().all(|v| v.is_finite()), "case {case}");
            assert!(!finite || flags.is_empty(), "case {case}: {flags:?}");
            assert_eq!(finite, case == 0, "case {case}");
        }
    }

    #[test]
    fn element_by_element_calls_equal_one_call() {
        let x = halves();
        let mut whole_rng = SrRng::new(3, 0, 1);
        let mut split_rng = whole_rng.clone();
        let mut whole = vec![f16::ZERO; x.len()];
        unary_f16(
            UnaryOp::Exp,
            &x,
            &mut whole,
            &mut Rounding::new(true, false, &mut whole_rng),
        )
        .unwrap();
        let mut one = [f16::ZERO];
        for (j, v) in x.iter().enumerate() {
            unary_f16(
                UnaryOp::Exp,
                std::slice::from_ref(v),
                &mut one,
                &mut Rounding::new(true, false, &mut split_rng),
            )
            .unwrap();
            assert_eq!(one[0].to_bits(), whole[j].to_bits());
        }
        assert_eq!(whole_rng, split_rng);
    }

    #[test]
    fn scaled_add_rounds_once() {
        // 1 + 2^-11 + 2^-24·(0.5): a double rounding (s·b to f16, then the sum) would give
        // the tie's even neighbour 1; the exact value is just above the tie.
        let a = f16::ONE;
        let b = f16::from_f32(2f32.powi(-11));
        let s = 1.0 + 2f32.powi(-13);
        let (v, _) = fp16::scaled_add(a, s, b, &mut Rounding::nearest(false));
        assert_eq!(v.to_bits(), 0x3c01);
        let mut out = [0f32];
        scaled_add_f32(&[1.0], &[3.0], 1.0 / 3.0, &mut out).unwrap();
        assert_eq!(out[0], (1.0f32 / 3.0).mul_add(3.0, 1.0));
    }

    #[test]
    fn lengths_are_checked() {
        let err = binary_f32(ArithOp::Add, &[1.0; 2], &[1.0; 3], &mut [0.0; 2]);
        assert!(matches!(
            err,
            Err(NumericsError::Length { operand: "b", .. })
        ));
    }
}

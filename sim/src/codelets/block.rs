//! The block codelets: `Reduce`, `ArgMax`, `Softmax` (and log-softmax),
//! `SoftmaxCrossEntropy`, over a `groups × count × width` input block of which the vertex
//! handles columns `[col_begin, col_begin + cols)` (see `ipusim_exe::codelets`).
//!
//! - `Reduce` with f32 (or integer) accumulation runs row by row over the vertex's columns
//!   (each column still sums sequentially in ascending `i`, so the order is the contract's)
//!   with the numerics core's accumulation kernel; the FP16 conversion of a group's outputs
//!   draws in ascending output order. With f16 accumulation (half partials) every add is an
//!   FP16 rounding and runs per output element, so draws follow the output order.
//! - `Softmax` and `SoftmaxCrossEntropy` compute each row's internals in f32 (maximum,
//!   `x − m`, `exp`, a sequential sum) and round each output once.
//!
//! When exceptions are enabled the loops check every operation's flags and stop at the
//! first one that traps, reporting it with its operands.

use super::operands::{Operands, MAX_INPUTS};
use super::{dump_value, Fault, Scratch, VertexError, Worker};
use crate::display::element_with_bits;
use crate::engine::error::{DumpValue, EngineError};
use crate::engine::memory::{typed, typed_mut};
use crate::numerics::int::IntArith;
use crate::numerics::kernels::{amp, convert, map as k};
use crate::numerics::{cast, fp16, fp32, round, ArithOp, FpCtl, FpSts, Rounding, SrRng, Tail};
use bytemuck::Pod;
use half::f16;
use ipusim_exe::codelets::{BlockParams, Codelet, ReduceOp, SoftmaxStage};
use ipusim_exe::executable::{Tensor, Vertex};
use ipusim_ir::DType;

/// Checks a block vertex: operand types and lengths, the column range.
pub(crate) fn check(
    codelet: &Codelet,
    p: &BlockParams,
    v: &Vertex,
    tensors: &[Tensor],
) -> Result<(), String> {
    use DType::*;
    let (g, c, w, cols) = (
        p.groups as u64,
        p.count as u64,
        p.width as u64,
        p.cols as u64,
    );
    if p.col_begin as u64 + cols > w {
        return Err(format!(
            "columns [{}, {}) of a {w}-wide block",
            p.col_begin,
            p.col_begin as u64 + cols
        ));
    }
    if c == 0 {
        return Err("reduces a block of 0 rows".into());
    }
    let repeated = p.outer != 1;
    if repeated && !matches!(codelet, Codelet::Reduce { .. }) {
        return Err(format!(
            "repeats its block {} times: only a Reduce repeats",
            p.outer
        ));
    }
    if p.outer == 0 || (repeated && u64::from(p.outer_stride) < g * c * w) {
        return Err(format!(
            "repeats a {}-element block {} times {} elements apart",
            g * c * w,
            p.outer,
            p.outer_stride
        ));
    }
    let rows = || -> Result<(), String> {
        if w != 1 || cols != 1 || p.col_begin != 0 {
            return Err("a row codelet needs width = cols = 1".into());
        }
        Ok(())
    };
    let want: Vec<(DType, u64)> = match *codelet {
        Codelet::Reduce {
            op,
            input,
            acc,
            output,
        } => {
            let ok = match (op, input) {
                (_, Bool) => false,
                (ReduceOp::Max, _) => acc == input && output == input,
                (ReduceOp::SquareAdd, F16 | F32) => acc == F32 && output.is_float(),
                (ReduceOp::SquareAdd, _) => false,
                (ReduceOp::Sum, F16) => acc.is_float() && output.is_float(),
                (ReduceOp::Sum, F32) => acc == F32 && output.is_float(),
                (ReduceOp::Sum, _) => acc == input && output == input && p.scale == 1.0,
            };
            if !ok {
                return Err(format!("{} is not supported", codelet.full_name()));
            }
            vec![(input, p.span()), (output, g * cols)]
        }
        Codelet::ArgMax { dtype } => vec![(dtype, g * c * w), (I32, g * cols)],
        Codelet::Softmax { dtype, .. } => {
            rows()?;
            if !dtype.is_float() {
                return Err("softmax of a non-float type".into());
            }
            vec![(dtype, g * c), (dtype, g * c)]
        }
        Codelet::SoftmaxCrossEntropy { dtype } => {
            rows()?;
            if !dtype.is_float() {
                return Err("cross-entropy of non-float logits".into());
            }
            vec![(dtype, g * c), (I32, g), (F32, g)]
        }
        Codelet::SoftmaxStage { stage, dtype } => {
            rows()?;
            if !dtype.is_float() {
                return Err("softmax of a non-float type".into());
            }
            match stage {
                SoftmaxStage::Exp => vec![(dtype, g * c), (dtype, g), (F32, g * c)],
                SoftmaxStage::Div => vec![(F32, g * c), (F32, g), (dtype, g * c)],
                SoftmaxStage::LogSub => {
                    vec![(dtype, g * c), (dtype, g), (F32, g), (dtype, g * c)]
                }
                SoftmaxStage::Loss => {
                    vec![(dtype, g * c), (I32, g), (dtype, g), (F32, g), (F32, g)]
                }
            }
        }
        _ => return Err("is not a block codelet".into()),
    };
    if v.operands.len() != want.len() {
        return Err(format!(
            "has {} operands, expected {}",
            v.operands.len(),
            want.len()
        ));
    }
    for (i, (o, (dtype, len))) in v.operands.iter().zip(want).enumerate() {
        let t = &tensors[o.tensor.0 as usize];
        if t.dtype != dtype || o.len as u64 != len {
            return Err(format!(
                "operand {i} is {} elements of {}, expected {len} of {dtype}",
                o.len, t.dtype
            ));
        }
    }
    Ok(())
}

/// Runs a block vertex.
pub(crate) fn run(
    codelet: &Codelet,
    p: &BlockParams,
    ops: Operands,
    scratch: &mut Scratch,
    mut worker: Worker,
) -> Result<FpSts, VertexError> {
    let mask = worker.mask();
    let mut cx = Cx {
        mask,
        sts: FpSts::empty(),
    };
    match *codelet {
        Codelet::Reduce {
            op,
            input,
            acc,
            output,
        } => {
            let square = op == ReduceOp::SquareAdd;
            let op = match op {
                ReduceOp::Sum | ReduceOp::SquareAdd => ArithOp::Add,
                ReduceOp::Max => ArithOp::Max,
            };
            match acc {
                DType::F32 => {
                    let types = (input, output, square);
                    reduce_f32(op, types, p, ops, scratch, &mut worker, &mut cx)?
                }
                DType::F16 => reduce_f16(op, output, p, ops, &mut worker, &mut cx)?,
                DType::I32 => reduce_int::<i32>(op, p, ops)?,
                _ => reduce_int::<u8>(op, p, ops)?,
            }
        }
        Codelet::ArgMax { dtype } => match dtype {
            DType::F16 => argmax::<f16>(p, ops)?,
            DType::F32 => argmax::<f32>(p, ops)?,
            DType::I32 => argmax::<i32>(p, ops)?,
            _ => argmax::<u8>(p, ops)?,
        },
        Codelet::Softmax { log, dtype } => {
            softmax(log, dtype, p, ops, scratch, &mut worker, &mut cx)?
        }
        Codelet::SoftmaxCrossEntropy { dtype } => cross_entropy(dtype, p, ops, scratch, &mut cx)?,
        Codelet::SoftmaxStage { stage, dtype } => {
            softmax_stage(stage, dtype, p, ops, scratch, &mut worker, &mut cx)?
        }
        _ => return Err(EngineError::internal("not a block codelet").into()),
    }
    Ok(cx.sts)
}

/// Runs a block vertex its workers split ([`ipusim_exe::workers::block_slices`], columns in
/// whole vectors of `grain`): each worker's part of the block with that worker's stream of
/// `rngs`, in worker order, exactly as the vertex per worker it stands for. Stops at the
/// first part that traps: its worker, the flags of the parts before it, and the fault, its
/// element counted from the vertex's first output.
pub(crate) fn run_parts(
    codelet: &Codelet,
    p: &BlockParams,
    ops: Operands,
    scratch: &mut Scratch,
    grain: u64,
    (ctl, rngs): (FpCtl, &mut [SrRng]),
) -> Result<FpSts, (usize, FpSts, VertexError)> {
    let Operands {
        inputs,
        aliased,
        in_dtypes,
        n_inputs,
        output,
        out_dtype,
        ..
    } = ops;
    let mut flags = FpSts::empty();
    let bad = |w: usize, flags: FpSts, m: &str| Err((w, flags, EngineError::internal(m).into()));
    if n_inputs != 1 || aliased[0] {
        return bad(
            0,
            flags,
            "a split block vertex reads one input that is not its output",
        );
    }
    let (ies, oes) = (in_dtypes[0].size_bytes(), out_dtype.size_bytes());
    let parts = ipusim_exe::workers::block_slices(p, grain, rngs.len() as u32);
    for (w, (part, rng)) in parts.into_iter().zip(rngs.iter_mut()).enumerate() {
        let (i0, il) = (part.input.0 as usize, part.input.1 as usize);
        let (o0, ol) = (part.output.0 as usize, part.output.1 as usize);
        let (Some(input), Some(out)) = (
            inputs[0].get(i0 * ies..(i0 + il) * ies),
            output.get_mut(o0 * oes..(o0 + ol) * oes),
        ) else {
            return bad(
                w,
                flags,
                "a worker's part outside its block vertex's operands",
            );
        };
        let mut part_inputs: [&[u8]; MAX_INPUTS] = [&[]; MAX_INPUTS];
        part_inputs[0] = input;
        let mut in_lens = [0; MAX_INPUTS];
        in_lens[0] = il;
        let ops = Operands {
            inputs: part_inputs,
            aliased: [false; MAX_INPUTS],
            in_dtypes,
            in_lens,
            n_inputs,
            output: out,
            out_dtype,
        };
        match run(codelet, &part.params, ops, scratch, Worker { ctl, rng }) {
            Ok(f) => flags |= f,
            Err(VertexError::Fault(mut f)) => {
                f.element = f.element.map(|e| e + o0 as u64);
                return Err((w, flags, VertexError::Fault(f)));
            }
            Err(e) => return Err((w, flags, e)),
        }
    }
    Ok(flags)
}

/// The flags raised so far and the mask of trapping ones.
struct Cx {
    mask: FpSts,
    sts: FpSts,
}

impl Cx {
    /// Records the flags `f` of the operation on output `element`; a trapping flag stops the
    /// vertex with the values `operands()` describes.
    fn raise(
        &mut self,
        f: FpSts,
        element: usize,
        operands: impl FnOnce() -> Vec<DumpValue>,
    ) -> Result<(), VertexError> {
        self.sts |= f;
        if f.intersects(self.mask) {
            return Err(VertexError::Fault(Box::new(Fault {
                sts: self.sts,
                element: Some(element as u64),
                operands: operands(),
            })));
        }
        Ok(())
    }

    fn checking(&self) -> bool {
        !self.mask.is_empty()
    }
}

fn f32v(x: f32) -> String {
    element_with_bits(DType::F32, &x.to_le_bytes())
}

fn f16v(x: f16) -> String {
    element_with_bits(DType::F16, &x.to_bits().to_le_bytes())
}

/// A value written, kept as it is and formatted only for a fault dump (formatting on
/// every write cost more than the arithmetic).
#[derive(Clone, Copy)]
enum Written {
    F16(f16),
    F32(f32),
}

impl Written {
    fn show(self) -> String {
        match self {
            Written::F16(v) => f16v(v),
            Written::F32(v) => f32v(v),
        }
    }
}

/// Writes `round_output(acc · s)` to output element `e` (`acc · s` is exact in f64: f32 ×
/// f32): one rounding to the output type, none when `s = 1` and the accumulator already
/// has the output type (`acc16`: the f16 accumulator that `acc` widens). Returns the flags
/// and the value written, for a dump.
fn store(
    out: &mut [u8],
    output: DType,
    e: usize,
    acc: f32,
    acc16: Option<f16>,
    s: f32,
    r: &mut Rounding,
) -> Result<(FpSts, Written), EngineError> {
    let exact = f64::from(acc) * f64::from(s);
    if output == DType::F16 {
        let (v, f) = match (s == 1.0, acc16) {
            (true, Some(a)) => (a, FpSts::empty()),
            (true, None) => cast::f32_to_f16(acc, r),
            _ => r.round_f16(exact, Tail::Exact),
        };
        typed_mut::<f16>(out)?[e] = v;
        Ok((f, Written::F16(v)))
    } else {
        let (v, f) = if s == 1.0 {
            (acc, FpSts::empty())
        } else {
            round::round_f32(exact)
        };
        typed_mut::<f32>(out)?[e] = v;
        Ok((f, Written::F32(v)))
    }
}

/// The values of a scaled output write, for a dump.
fn scaled_dump(acc: String, s: f32, result: Written) -> Vec<DumpValue> {
    vec![
        dump_value("acc", acc),
        dump_value("scale", f32v(s)),
        dump_value("result", result.show()),
    ]
}

/// The elements of the rows a block vertex loads (widens, squares) at a time when its rows
/// are whole (our choice: 16 KiB of f32, within a host core's L1 cache with the sums).
const ROWS_LOADED: usize = 4096;

#[allow(clippy::too_many_arguments)]
fn reduce_f32(
    op: ArithOp,
    (input, output, square): (DType, DType, bool),
    p: &BlockParams,
    ops: Operands,
    scratch: &mut Scratch,
    worker: &mut Worker,
    cx: &mut Cx,
) -> Result<(), VertexError> {
    let (count, width, c0, cols) = extent(p);
    let s = round::round_f32(p.scale).0;
    let acc = scratch.p.take::<f32>(cols);
    let (x16, x32): (&[f16], &[f32]) = match input {
        DType::F16 => (typed(ops.inputs[0])?, &[]),
        _ => (&[], typed(ops.inputs[0])?),
    };
    // The elements from `at` on, as many as `dst` holds.
    let load = |at: usize, dst: &mut [f32]| {
        if input == DType::F16 {
            convert::widen(&x16[at..at + dst.len()], dst);
        } else {
            dst.copy_from_slice(&x32[at..at + dst.len()]);
        }
    };
    // `SquareAdd` squares each loaded row first (f32 `x · x`, RNE; exact for f16 inputs).
    let squared = |dst: &mut [f32], element: usize, cx: &mut Cx| -> Result<(), VertexError> {
        for (c, x) in dst.iter_mut().enumerate() {
            let (v, f) = fp32::mul(*x, *x);
            let a = *x;
            cx.raise(f, element + c, || {
                vec![dump_value("in", f32v(a)), dump_value("square", f32v(v))]
            })?;
            *x = v;
        }
        Ok(())
    };
    let out = ops.output;
    // The sums of a group (at output element `o`) scaled and written.
    let mut store_row = |acc: &[f32], o: usize, cx: &mut Cx, worker: &mut Worker| {
        if output == DType::F16 && !cx.checking() && s == 1.0 {
            let dst = &mut typed_mut::<f16>(out)?[o..o + cols];
            cx.sts |= convert::f32_to_f16_slice(acc, dst, &mut worker.rounding())?;
        } else if output == DType::F32 && !cx.checking() && acc.iter().all(|a| (a * s).is_finite())
        {
            // The f32 product `a · s` is the exact product rounded once, as `store` rounds
            // it; finite, it raises no flag.
            let dst = &mut typed_mut::<f32>(out)?[o..o + cols];
            for (d, a) in dst.iter_mut().zip(acc) {
                *d = a * s;
            }
        } else {
            for (c, &a) in acc.iter().enumerate() {
                let (f, result) = store(out, output, o + c, a, None, s, &mut worker.rounding())?;
                cx.raise(f, o + c, || scaled_dump(f32v(a), s, result))?;
            }
        }
        Ok::<(), VertexError>(())
    };
    // Sums of rows that stay finite raise no flag: tried first in place, row after row, and
    // the group summed again by the flag-checking path when a value is not finite.
    let passes: &[bool] = if !cx.checking() && op != ArithOp::Max {
        &[true, false]
    } else {
        &[false]
    };
    // Rows in summation order as runs of consecutive rows (whole rows of an outer repeat
    // lie one after the other), loaded a run at a time; one row at a time when checking
    // for traps, so the first fault is the first in the codelet's order.
    let run_rows = match cols == width && !cx.checking() {
        true => (ROWS_LOADED / cols.max(1)).max(1),
        false => 1,
    };
    let rows = scratch.q.take::<f32>(run_rows * cols);
    for g in 0..p.groups as usize {
        let at = |offset: usize| g * count * width + offset + c0;
        for &in_place in passes {
            let mut finite = in_place;
            let mut i = 0usize;
            'rows: for (offset, n) in p.row_runs(run_rows) {
                // An FP32 run that is not squared is read where it lies.
                let run: &[f32] = if input == DType::F32 && !square {
                    &x32[at(offset)..at(offset) + n * cols]
                } else {
                    let run = &mut rows[..n * cols];
                    load(at(offset), run);
                    if square {
                        for row in run.chunks_exact_mut(cols.max(1)) {
                            squared(row, g * cols, cx)?;
                        }
                    }
                    run
                };
                // `i`: the row of the group's sum `run` begins with (the first only starts it).
                let mut run = run;
                if i == 0 {
                    acc.copy_from_slice(&run[..cols]);
                    finite = in_place && amp::finite(acc);
                    run = &run[cols..];
                    i = 1;
                }
                if in_place {
                    if !finite {
                        break 'rows;
                    }
                    finite = k::add_rows_in_place_finite(acc, run);
                    i += run.len() / cols.max(1);
                    continue;
                }
                for row in run.chunks_exact(cols.max(1)) {
                    if cx.checking() {
                        for c in 0..cols {
                            let (v, f) = if op == ArithOp::Max {
                                fp32::max(acc[c], row[c])
                            } else {
                                fp32::add(acc[c], row[c])
                            };
                            let (a, x) = (acc[c], row[c]);
                            cx.raise(f, g * cols + c, || {
                                vec![
                                    dump_value("acc", f32v(a)),
                                    dump_value(format!("in[{i}]"), f32v(x)),
                                    dump_value("result", f32v(v)),
                                ]
                            })?;
                            acc[c] = v;
                        }
                    } else {
                        cx.sts |= k::accumulate_f32(op, acc, row)?;
                    }
                    i += 1;
                }
            }
            if !in_place || finite {
                break;
            }
        }
        store_row(acc, g * cols, cx, worker)?;
    }
    Ok(())
}

fn reduce_f16(
    op: ArithOp,
    output: DType,
    p: &BlockParams,
    ops: Operands,
    worker: &mut Worker,
    cx: &mut Cx,
) -> Result<(), VertexError> {
    let s = round::round_f32(p.scale).0;
    let x = typed::<f16>(ops.inputs[0])?;
    let out = ops.output;
    for (e, base) in columns(p) {
        let mut acc = x[base];
        for (i, offset) in p.row_offsets().enumerate().skip(1) {
            let xi = x[base + offset];
            let (v, f) = if op == ArithOp::Max {
                fp16::max(acc, xi)
            } else {
                fp16::add(acc, xi, &mut worker.rounding())
            };
            cx.raise(f, e, || {
                vec![
                    dump_value("acc", f16v(acc)),
                    dump_value(format!("in[{i}]"), f16v(xi)),
                    dump_value("result", f16v(v)),
                ]
            })?;
            acc = v;
        }
        let (f, result) = store(
            out,
            output,
            e,
            acc.to_f32(),
            Some(acc),
            s,
            &mut worker.rounding(),
        )?;
        cx.raise(f, e, || scaled_dump(f16v(acc), s, result))?;
    }
    Ok(())
}

/// `(count, width, col_begin, cols)` of a block vertex, as indices.
fn extent(p: &BlockParams) -> (usize, usize, usize, usize) {
    (
        p.count as usize,
        p.width as usize,
        p.col_begin as usize,
        p.cols as usize,
    )
}

/// The columns a block vertex handles, in output order: `(e, base)` for output element
/// `e = g·cols + c`, whose input elements are `base + i·width` for `i < count`.
fn columns(p: &BlockParams) -> impl Iterator<Item = (usize, usize)> {
    let (count, width, c0, cols) = extent(p);
    (0..p.groups as usize)
        .flat_map(move |g| (0..cols).map(move |c| (g * cols + c, g * count * width + c0 + c)))
}

fn reduce_int<T: IntArith + Pod>(
    op: ArithOp,
    p: &BlockParams,
    ops: Operands,
) -> Result<(), VertexError> {
    let x = typed::<T>(ops.inputs[0])?;
    let out = typed_mut::<T>(ops.output)?;
    for (e, base) in columns(p) {
        let mut acc = x[base];
        for offset in p.row_offsets().skip(1) {
            let xi = x[base + offset];
            acc = if op == ArithOp::Max {
                acc.max(xi)
            } else {
                T::arith(op, acc, xi).0
            };
        }
        out[e] = acc;
    }
    Ok(())
}

fn argmax<T: Pod + PartialOrd>(p: &BlockParams, ops: Operands) -> Result<(), VertexError> {
    let (count, width) = (p.count as usize, p.width as usize);
    let x = typed::<T>(ops.inputs[0])?;
    let out = typed_mut::<i32>(ops.output)?;
    for (e, base) in columns(p) {
        let mut best = 0usize;
        for i in 1..count {
            if x[base + i * width] > x[base + best * width] {
                best = i;
            }
        }
        out[e] = best as i32;
    }
    Ok(())
}

/// The f32 internals of one softmax row `x` (widened in `t`): on return `t[i] = x_i − m`,
/// `e[i] = exp(t_i)`, and the sum `s = Σ e_i` (sequential, ascending `i`) is returned.
fn row_internals(
    t: &mut [f32],
    e: &mut [f32],
    first: usize,
    cx: &mut Cx,
) -> Result<f32, VertexError> {
    let m = fold_row(t, fp32::max, ("max", "x"), first, cx)?;
    exp_row(t, e, m, first, cx)?;
    fold_row(e, fp32::add, ("sum", "exp"), first, cx)
}

/// `t[i] ← rne32(t_i − m)` and `e[i] ← exp32(t_i)` along a row (or a piece of one), the
/// flags of element `i` raised on `first + i`.
fn exp_row(
    t: &mut [f32],
    e: &mut [f32],
    m: f32,
    first: usize,
    cx: &mut Cx,
) -> Result<(), VertexError> {
    for (i, (ti, ei)) in t.iter_mut().zip(e.iter_mut()).enumerate() {
        let d = centred(*ti, m, first + i, cx)?;
        let (v, f) = fp32::exp(d);
        cx.raise(f, first + i, || {
            vec![dump_value("x - max", f32v(d)), dump_value("exp", f32v(v))]
        })?;
        *ti = d;
        *ei = v;
    }
    Ok(())
}

/// `rne32(x − m)`, its flags raised on `element`.
fn centred(x: f32, m: f32, element: usize, cx: &mut Cx) -> Result<f32, VertexError> {
    let (d, f) = fp32::sub(x, m);
    cx.raise(f, element, || {
        vec![dump_value("x", f32v(x)), dump_value("max", f32v(m))]
    })?;
    Ok(d)
}

/// `ln32(s)`, its flags raised on `element`.
fn log_sum(s: f32, element: usize, cx: &mut Cx) -> Result<f32, VertexError> {
    let (v, f) = fp32::log(s);
    cx.raise(f, element, || vec![dump_value("sum", f32v(s))])?;
    Ok(v)
}

/// `op` folded over a row sequentially in ascending order from its first value, each
/// step's flags raised on element `first + i` with the operands named `acc` and
/// `{elem}[i]`.
fn fold_row(
    row: &[f32],
    op: fn(f32, f32) -> (f32, FpSts),
    (acc, elem): (&str, &str),
    first: usize,
    cx: &mut Cx,
) -> Result<f32, VertexError> {
    let mut a = row[0];
    for (i, &x) in row.iter().enumerate().skip(1) {
        let (v, f) = op(a, x);
        cx.raise(f, first + i, || {
            vec![
                dump_value(acc, f32v(a)),
                dump_value(format!("{elem}[{i}]"), f32v(x)),
            ]
        })?;
        a = v;
    }
    Ok(a)
}

/// Widens one row of `dtype` values into `dst`.
fn widen_row(dtype: DType, bytes: &[u8], at: usize, dst: &mut [f32]) -> Result<(), EngineError> {
    let n = dst.len();
    if dtype == DType::F16 {
        convert::widen(&typed::<f16>(bytes)?[at..at + n], dst);
    } else {
        dst.copy_from_slice(&typed::<f32>(bytes)?[at..at + n]);
    }
    Ok(())
}

/// Element `at` of a `dtype` operand, widened to f32.
fn widen_one(dtype: DType, bytes: &[u8], at: usize) -> Result<f32, EngineError> {
    Ok(if dtype == DType::F16 {
        typed::<f16>(bytes)?[at].to_f32()
    } else {
        typed::<f32>(bytes)?[at]
    })
}

/// Output element `at` of a softmax row, `round(v / w)` with `v = e_i`, `w = s`, or of a
/// log-softmax row, `round(v − w)` with `v = t_i`, `w = ln s`: one rounding of the exact
/// result to `dtype`.
#[allow(clippy::too_many_arguments)]
fn row_output(
    log: bool,
    dtype: DType,
    (v, w): (f32, f32),
    out: &mut [u8],
    at: usize,
    worker: &mut Worker,
    cx: &mut Cx,
) -> Result<(), VertexError> {
    let (bytes, f) = match (dtype, log) {
        (DType::F16, true) => {
            let (r, f) = fp16::add_wide(f64::from(v), -f64::from(w), &mut worker.rounding());
            typed_mut::<f16>(out)?[at] = r;
            (Written::F16(r), f)
        }
        (DType::F16, false) => {
            let (r, f) = fp16::div_wide(f64::from(v), f64::from(w), &mut worker.rounding());
            typed_mut::<f16>(out)?[at] = r;
            (Written::F16(r), f)
        }
        (_, true) => {
            let (r, f) = fp32::sub(v, w);
            typed_mut::<f32>(out)?[at] = r;
            (Written::F32(r), f)
        }
        (_, false) => {
            let (r, f) = fp32::div(v, w);
            typed_mut::<f32>(out)?[at] = r;
            (Written::F32(r), f)
        }
    };
    cx.raise(f, at, || {
        let (a, b) = if log {
            ("x - max", "log sum")
        } else {
            ("exp", "sum")
        };
        vec![
            dump_value(a, f32v(v)),
            dump_value(b, f32v(w)),
            dump_value("result", bytes.show()),
        ]
    })
}

fn softmax(
    log: bool,
    dtype: DType,
    p: &BlockParams,
    ops: Operands,
    scratch: &mut Scratch,
    worker: &mut Worker,
    cx: &mut Cx,
) -> Result<(), VertexError> {
    let count = p.count as usize;
    let t = scratch.p.take::<f32>(count);
    let e = scratch.q.take::<f32>(count);
    for g in 0..p.groups as usize {
        let first = g * count;
        widen_row(dtype, ops.inputs[0], first, t)?;
        let s = row_internals(t, e, first, cx)?;
        let w = if log { log_sum(s, first, cx)? } else { s };
        for i in 0..count {
            let v = if log { t[i] } else { e[i] };
            row_output(log, dtype, (v, w), ops.output, first + i, worker, cx)?;
        }
    }
    Ok(())
}

/// One stage of a split softmax ([`SoftmaxStage`]), `groups` pieces of `count` elements.
fn softmax_stage(
    stage: SoftmaxStage,
    dtype: DType,
    p: &BlockParams,
    ops: Operands,
    scratch: &mut Scratch,
    worker: &mut Worker,
    cx: &mut Cx,
) -> Result<(), VertexError> {
    let count = p.count as usize;
    let t = scratch.p.take::<f32>(count);
    for g in 0..p.groups as usize {
        let first = g * count;
        match stage {
            SoftmaxStage::Exp => {
                widen_row(dtype, ops.inputs[0], first, t)?;
                let m = widen_one(dtype, ops.inputs[1], g)?;
                let e = &mut typed_mut::<f32>(ops.output)?[first..first + count];
                exp_row(t, e, m, first, cx)?;
            }
            SoftmaxStage::Div => {
                let s = typed::<f32>(ops.inputs[1])?[g];
                let e = &typed::<f32>(ops.inputs[0])?[first..first + count];
                for (i, &ei) in e.iter().enumerate() {
                    row_output(false, dtype, (ei, s), ops.output, first + i, worker, cx)?;
                }
            }
            SoftmaxStage::LogSub => {
                widen_row(dtype, ops.inputs[0], first, t)?;
                let m = widen_one(dtype, ops.inputs[1], g)?;
                let ln_s = log_sum(typed::<f32>(ops.inputs[2])?[g], first, cx)?;
                for (i, &x) in t.iter().enumerate() {
                    let d = centred(x, m, first + i, cx)?;
                    row_output(true, dtype, (d, ln_s), ops.output, first + i, worker, cx)?;
                }
            }
            SoftmaxStage::Loss => {
                let label = typed::<i32>(ops.inputs[1])?[g];
                typed_mut::<f32>(ops.output)?[g] =
                    match usize::try_from(label).ok().filter(|&l| l < count) {
                        Some(l) => {
                            let m = widen_one(dtype, ops.inputs[2], g)?;
                            let tl =
                                centred(widen_one(dtype, ops.inputs[0], first + l)?, m, g, cx)?;
                            let ln_s = log_sum(typed::<f32>(ops.inputs[3])?[g], g, cx)?;
                            loss(ln_s, tl, l, g, cx)?
                        }
                        None => 0.0,
                    };
            }
        }
    }
    Ok(())
}

/// A row's cross-entropy `rne32(ln s − t_label)`, its flags raised on `element`.
fn loss(ln_s: f32, tl: f32, label: usize, element: usize, cx: &mut Cx) -> Result<f32, VertexError> {
    let (v, f) = fp32::sub(ln_s, tl);
    cx.raise(f, element, || {
        vec![
            dump_value("log sum", f32v(ln_s)),
            dump_value(format!("x[{label}] - max"), f32v(tl)),
            dump_value("result", f32v(v)),
        ]
    })?;
    Ok(v)
}

fn cross_entropy(
    dtype: DType,
    p: &BlockParams,
    ops: Operands,
    scratch: &mut Scratch,
    cx: &mut Cx,
) -> Result<(), VertexError> {
    let count = p.count as usize;
    let t = scratch.p.take::<f32>(count);
    let e = scratch.q.take::<f32>(count);
    let labels = typed::<i32>(ops.inputs[1])?;
    let out = typed_mut::<f32>(ops.output)?;
    for g in 0..p.groups as usize {
        widen_row(dtype, ops.inputs[0], g * count, t)?;
        let s = row_internals(t, e, g, cx)?;
        let label = labels[g];
        out[g] = match usize::try_from(label).ok().filter(|&l| l < count) {
            Some(l) => loss(log_sum(s, g, cx)?, t[l], l, g, cx)?,
            None => 0.0,
        };
    }
    Ok(())
}

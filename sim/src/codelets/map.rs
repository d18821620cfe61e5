//! The element-wise codelets (`Fill`, `Unary`, `Binary`, `ScaledAdd`, `Select`, `Cast`,
//! `ActivationGrad`, `OneHot`): inputs are made contiguous and aligned with the output
//! (broadcast inputs gathered into scratch, in-place inputs copied), then one slice kernel of
//! the numerics core computes the whole vertex.
//!
//! When the vertex raised a flag whose exception is enabled, the vertex is replayed element
//! by element from the worker's random-stream position before it ran (the kernels compute
//! element `j` identically whether called on the whole slice or on `[j, j+1)`), and the
//! first element whose flags trap is reported with its operands.

use super::operands::{Operands, MAX_INPUTS};
use super::{dump_value, Fault, Scratch, VertexError, Worker};
use crate::display::element_with_bits;
use crate::engine::error::EngineError;
use crate::engine::memory::{typed, typed_mut};
use crate::numerics::int::IntArith;
use crate::numerics::kernels::convert;
use crate::numerics::kernels::map::{self as k, each, each2, each3};
use crate::numerics::{cast, round, ArithOp, CompareOp, FpSts, Rounding, Tail, UnaryOp};
use bytemuck::Pod;
use half::f16;
use ipusim_exe::codelets::{
    pattern_index, Access, BroadcastAccess, Codelet, FusedArg, FusedLeaf, FusedStep, MapParams,
    VertexParams, MAX_FUSED_LEAVES, MAX_FUSED_STEPS,
};
use ipusim_exe::executable::{Tensor, Vertex};
use ipusim_ir::DType;

/// Runs an element-wise vertex.
pub(crate) fn run(
    codelet: &Codelet,
    params: &VertexParams,
    ops: Operands,
    scratch: &mut Scratch,
    worker: Worker,
) -> Result<FpSts, VertexError> {
    let n = ops.out_len() as u64;
    run_slices(
        codelet,
        params,
        ops,
        scratch,
        &[(0, n)],
        (worker.ctl, std::slice::from_mut(worker.rng)),
    )
    .map_err(|(_, _, e)| e)
}

/// Runs an element-wise vertex slice by slice: outputs `[a, b)` of slice `w` of `slices`
/// (ascending, disjoint, covering the outputs) on worker `w`, with `$FP_CTL` `ctl` and the
/// random stream `rngs[w]`, in order, as that many vertices of one worker each would run
/// (a vertex split among the workers, [`ipusim_exe::workers`]). Stops at the first slice
/// that traps: its worker, the flags the slices before it raised, and the fault (the
/// element counted from the vertex's first).
pub(crate) fn run_slices(
    codelet: &Codelet,
    params: &VertexParams,
    ops: Operands,
    scratch: &mut Scratch,
    slices: &[(u64, u64)],
    (ctl, rngs): (crate::numerics::FpCtl, &mut [crate::numerics::rng::SrRng]),
) -> Result<FpSts, (usize, FpSts, VertexError)> {
    let n = ops.out_len();
    let Operands {
        inputs,
        aliased,
        in_dtypes,
        n_inputs,
        output,
        out_dtype,
        ..
    } = ops;
    let accesses: &[Access] = match params {
        VertexParams::Map(m) => &m.inputs,
        _ => &[],
    };
    let mut ins: [&[u8]; MAX_INPUTS] = [&[]; MAX_INPUTS];
    for (i, buf) in scratch.ins.iter_mut().enumerate().take(n_inputs) {
        let es = in_dtypes[i].size_bytes();
        ins[i] = match (accesses.get(i), aliased[i]) {
            (Some(Access::Broadcast(b)), false) => {
                let dst = buf.bytes(n * es);
                gather(b, inputs[i], es, dst);
                dst
            }
            (Some(Access::Broadcast(_)), true) => {
                return Err((
                    0,
                    FpSts::empty(),
                    EngineError::internal("a broadcast input aliases the output").into(),
                ))
            }
            (_, true) => {
                let dst = buf.bytes(output.len());
                dst.copy_from_slice(output);
                dst
            }
            (_, false) => inputs[i],
        };
    }
    let eo = out_dtype.size_bytes();
    let mut flags = FpSts::empty();
    for (w, &(a, b)) in slices.iter().enumerate() {
        let (a, b) = (a as usize, b as usize);
        let mut sub: [&[u8]; MAX_INPUTS] = [&[]; MAX_INPUTS];
        for i in 0..n_inputs {
            let es = in_dtypes[i].size_bytes();
            sub[i] = ins[i].get(a * es..b * es).ok_or_else(|| {
                (
                    w,
                    flags,
                    EngineError::internal("an element-wise input shorter than its output").into(),
                )
            })?;
        }
        let out = output.get_mut(a * eo..b * eo).ok_or_else(|| {
            (
                w,
                flags,
                EngineError::internal("a worker's slice outside the output").into(),
            )
        })?;
        let Some(rng) = rngs.get_mut(w) else {
            return Err((
                w,
                flags,
                EngineError::internal("a slice without a worker").into(),
            ));
        };
        let mut worker = Worker { ctl, rng };
        let f = run_slice(
            codelet,
            params,
            (&sub, &in_dtypes[..n_inputs], out_dtype),
            out,
            (&mut scratch.steps, &mut scratch.one),
            &mut worker,
        )
        .map_err(|mut e| {
            if let VertexError::Fault(fault) = &mut e {
                if let Some(el) = &mut fault.element {
                    *el += a as u64;
                }
            }
            (w, flags, e)
        })?;
        flags |= f;
    }
    Ok(flags)
}

/// One worker's outputs of an element-wise vertex from its inputs `ins` (each aligned with
/// `out`): the codelet's kernel (a fused codelet's steps in turn), replayed element by
/// element when it traps.
fn run_slice(
    codelet: &Codelet,
    params: &VertexParams,
    (ins, in_dtypes, out_dtype): (&[&[u8]; MAX_INPUTS], &[DType], DType),
    output: &mut [u8],
    (bufs, one): (
        &mut Vec<crate::engine::memory::Buf>,
        &mut crate::engine::memory::Buf,
    ),
    worker: &mut Worker,
) -> Result<FpSts, VertexError> {
    if let Codelet::Fused { program } = codelet {
        return fused(&program.steps, ins, output, bufs, one, worker);
    }
    let n = output.len() / out_dtype.size_bytes().max(1);
    let saved = (!worker.mask().is_empty()).then(|| worker.rng.clone());
    let flags = kernel(codelet, params, ins, output, &mut worker.rounding())?;
    if worker.ctl.trapping(flags).is_empty() {
        return Ok(flags);
    }
    let Some(rng) = saved else {
        return Ok(flags);
    };
    let info = codelet.info();
    let names: Vec<&str> = (0..in_dtypes.len())
        .map(|i| info.operands.get(i).copied().unwrap_or("in"))
        .collect();
    Err(replay(
        codelet,
        params,
        ins,
        in_dtypes,
        out_dtype,
        &names,
        n,
        FpSts::empty(),
        one,
        worker,
        rng,
    ))
}

/// The fault of a vertex (or fused step) whose flags trapped: replays it element by element
/// from the worker's random-stream position `rng` before it ran (the kernels compute element
/// `j` identically whether called on the whole slice or on `[j, j+1)`) and reports the first
/// element whose flags trap, with its operands (`names`), on top of the flags `before` the
/// codelet raised earlier in the vertex.
#[allow(clippy::too_many_arguments)]
fn replay(
    codelet: &Codelet,
    params: &VertexParams,
    ins: &[&[u8]; MAX_INPUTS],
    in_dtypes: &[DType],
    out_dtype: DType,
    names: &[&str],
    n: usize,
    before: FpSts,
    one: &mut crate::engine::memory::Buf,
    worker: &Worker,
    mut rng: crate::numerics::rng::SrRng,
) -> VertexError {
    let mut sts = before;
    let es_out = out_dtype.size_bytes();
    for j in 0..n {
        let mut sub: [&[u8]; MAX_INPUTS] = [&[]; MAX_INPUTS];
        for (i, dtype) in in_dtypes.iter().enumerate() {
            let es = dtype.size_bytes();
            sub[i] = &ins[i][j * es..(j + 1) * es];
        }
        let one = one.bytes(es_out);
        let f = match kernel(
            codelet,
            params,
            &sub,
            one,
            &mut Rounding::from_ctl(worker.ctl, &mut rng),
        ) {
            Ok(f) => f,
            Err(e) => return e.into(),
        };
        sts |= f;
        if !worker.ctl.trapping(f).is_empty() {
            let mut operands: Vec<_> = in_dtypes
                .iter()
                .enumerate()
                .map(|(i, &dtype)| {
                    let name = names.get(i).copied().unwrap_or("in");
                    dump_value(name, element_with_bits(dtype, sub[i]))
                })
                .collect();
            operands.push(dump_value("result", element_with_bits(out_dtype, one)));
            return VertexError::Fault(Box::new(Fault {
                sts,
                element: Some(j as u64),
                operands,
            }));
        }
    }
    EngineError::internal(format!(
        "{} trapped but no element reproduces it",
        codelet.full_name()
    ))
    .into()
}

/// Runs a fused vertex over its gathered leaves `ins` (each aligned with `out`): each step
/// over the whole slice in turn, into `bufs` (the last one into `out`), with the step
/// codelet's own kernel, so every element is what the unfused vertices would compute.
fn fused(
    steps: &[FusedStep],
    ins: &[&[u8]; MAX_INPUTS],
    out: &mut [u8],
    bufs: &mut Vec<crate::engine::memory::Buf>,
    one: &mut crate::engine::memory::Buf,
    worker: &mut Worker,
) -> Result<FpSts, VertexError> {
    let Some(last) = steps.last() else {
        return Err(EngineError::internal("a fused vertex without steps").into());
    };
    let n = out.len() / last.dtype().size_bytes();
    if bufs.len() < steps.len() {
        bufs.resize_with(steps.len(), Default::default);
    }
    let mut flags = FpSts::empty();
    for (k, step) in steps.iter().enumerate() {
        // A step's parameters: its inputs read element for element, its scale (`ScaledAdd`).
        let params = VertexParams::Map(MapParams {
            out_begin: None,
            inputs: Default::default(),
            scale: step.scale(),
        });
        let (earlier, rest) = bufs.split_at_mut(k);
        let mut args: [&[u8]; MAX_INPUTS] = [&[]; MAX_INPUTS];
        for (slot, arg) in step.args.iter().enumerate().take(MAX_INPUTS) {
            let bytes = match *arg {
                FusedArg::Leaf(i) => ins.get(i as usize).copied(),
                FusedArg::Step(j) => steps.get(j as usize).and_then(|s| {
                    earlier
                        .get(j as usize)
                        .and_then(|b| b.held(n * s.dtype().size_bytes()))
                }),
            };
            args[slot] = bytes.ok_or_else(|| {
                EngineError::internal(format!("fused step {k} reads a value it cannot"))
            })?;
        }
        let dtype = step.dtype();
        let dst: &mut [u8] = if k + 1 == steps.len() {
            &mut *out
        } else {
            rest[0].bytes(n * dtype.size_bytes())
        };
        let saved = (!worker.mask().is_empty()).then(|| worker.rng.clone());
        let f = kernel(&step.codelet, &params, &args, dst, &mut worker.rounding())?;
        if !worker.ctl.trapping(f).is_empty() {
            if let Some(rng) = saved {
                let info = step.codelet.info();
                let names: Vec<String> = (0..step.args.len())
                    .map(|i| {
                        format!(
                            "step {k} {}: {}",
                            step.codelet.full_name(),
                            info.operands.get(i).copied().unwrap_or("in")
                        )
                    })
                    .collect();
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                // The element dtypes of the step's inputs, as its signature has them.
                let (in_dtypes, _) = signature(&step.codelet).map_err(EngineError::internal)?;
                return Err(replay(
                    &step.codelet,
                    &params,
                    &args,
                    &in_dtypes,
                    dtype,
                    &names,
                    n,
                    flags,
                    one,
                    worker,
                    rng,
                ));
            }
        }
        flags |= f;
    }
    Ok(flags)
}

/// Calls `f(first, stride, count)` for the runs of operand indices (relative to the
/// operand's element 0) that outputs `0..n` of a broadcast access read: output `x` of a run
/// reads `first + stride·x`.
fn runs(b: &BroadcastAccess, n: usize, f: impl FnMut(i64, u64, u64)) {
    runs_from(b, (b.start, n as u64), f)
}

/// [`runs`] for the outputs at positions `x0 .. x0 + n` of the access's `dims`.
fn runs_from(b: &BroadcastAccess, (x0, n): (u64, u64), mut f: impl FnMut(i64, u64, u64)) {
    let (dims, strides): (&[u64], &[u64]) = (&b.pattern.dims, &b.pattern.strides);
    let (inner, stride) = match dims.len().checked_sub(1) {
        Some(l) => (dims[l].max(1), strides.get(l).copied().unwrap_or(0)),
        None => (u64::MAX, 0),
    };
    let (end, base) = (x0 + n, b.base as i64);
    let mut x = x0;
    while x < end {
        let count = (inner - x % inner).min(end - x);
        f(pattern_index(dims, strides, x) as i64 - base, stride, count);
        x += count;
    }
}

/// The smallest and largest operand index a broadcast access reads for `n` outputs.
pub(crate) fn broadcast_bounds(b: &BroadcastAccess, n: usize) -> Option<(i64, i64)> {
    let mut bounds: Option<(i64, i64)> = None;
    runs(b, n, |first, stride, count| {
        let last = first + (stride * (count - 1)) as i64;
        bounds = Some(match bounds {
            None => (first, last),
            Some((lo, hi)) => (lo.min(first), hi.max(last)),
        });
    });
    bounds
}

/// Gathers the elements (of `es` bytes) that outputs `0..dst.len()/es` read from `src`.
///
/// When the dimension outside the innermost is broadcast (a per-channel operand of a
/// channel-grouped feature map: `[C/g, N·S, g]` with strides `[g, 0, 1]`), the outputs of
/// each block of that dimension repeat the innermost run's reads: one period is gathered and
/// the block filled by doubling copies.
fn gather(b: &BroadcastAccess, src: &[u8], es: usize, dst: &mut [u8]) {
    let n = (dst.len() / es) as u64;
    let (dims, strides) = (&b.pattern.dims, &b.pattern.strides);
    let l = dims.len();
    if l < 2 || strides.get(l - 2) != Some(&0) || dims[l - 2] < 2 {
        return gather_from(b, (b.start, n), src, es, dst);
    }
    let inner = dims[l - 1].max(1);
    let block = inner * dims[l - 2];
    let (mut x, mut at) = (b.start, 0usize);
    while x < b.start + n {
        let seg = (block - x % block).min(b.start + n - x);
        let out = &mut dst[at * es..(at + seg as usize) * es];
        let period = inner.min(seg);
        gather_from(b, (x, period), src, es, &mut out[..period as usize * es]);
        repeat(out, period as usize * es);
        x += seg;
        at += seg as usize;
    }
}

/// Fills `out` with copies of its first `filled` bytes, doubling the copied part each time.
fn repeat(out: &mut [u8], mut filled: usize) {
    while filled > 0 && filled < out.len() {
        let c = filled.min(out.len() - filled);
        out.copy_within(0..c, filled);
        filled += c;
    }
}

/// Gathers the reads of the outputs at positions `x0 .. x0 + n` of the access's `dims`.
fn gather_from(b: &BroadcastAccess, (x0, n): (u64, u64), src: &[u8], es: usize, dst: &mut [u8]) {
    let mut at = 0usize;
    runs_from(b, (x0, n), |first, stride, count| {
        let (first, count) = (first as usize, count as usize);
        let out = &mut dst[at * es..(at + count) * es];
        match stride {
            1 => out.copy_from_slice(&src[first * es..(first + count) * es]),
            0 => {
                out[..es].copy_from_slice(&src[first * es..(first + 1) * es]);
                repeat(out, es);
            }
            s => {
                for (i, o) in out.chunks_exact_mut(es).enumerate() {
                    let p = first + i * s as usize;
                    o.copy_from_slice(&src[p * es..(p + 1) * es]);
                }
            }
        }
        at += count;
    });
}

/// The codelet's operand dtypes (inputs, output), or why the codelet is not element-wise.
fn signature(codelet: &Codelet) -> Result<(Vec<DType>, DType), String> {
    use DType::*;
    Ok(match *codelet {
        Codelet::Fill { dtype } => (vec![], dtype),
        Codelet::Unary { op, dtype } => {
            let int_ok = matches!(op, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu);
            if dtype == Bool || (!dtype.is_float() && !int_ok) {
                return Err(format!("{op:?} is not defined on {dtype}"));
            }
            (vec![dtype], dtype)
        }
        Codelet::Binary { op, dtype } => match ArithOp::try_from(op) {
            Ok(_) if dtype == Bool => return Err(format!("{op:?} is not defined on bool")),
            Ok(_) => (vec![dtype, dtype], dtype),
            Err(_) => (vec![dtype, dtype], Bool),
        },
        Codelet::ScaledAdd { dtype } | Codelet::ActivationGrad { dtype, .. } => {
            if !dtype.is_float() {
                return Err(format!("needs a float type, has {dtype}"));
            }
            (vec![dtype, dtype], dtype)
        }
        Codelet::Select { dtype } => (vec![Bool, dtype, dtype], dtype),
        Codelet::Cast { from, to } => (vec![from], to),
        Codelet::OneHot { dtype, depth } => {
            if depth == 0 {
                return Err("has depth 0".into());
            }
            (vec![I32], dtype)
        }
        Codelet::Fused { ref program } => {
            let (leaves, steps) = (&program.leaves, &program.steps);
            check_fused(leaves, steps)?;
            let out = steps.last().map_or(U8, FusedStep::dtype);
            (leaves.iter().map(|l| l.dtype).collect(), out)
        }
        _ => return Err("is not an element-wise codelet".into()),
    })
}

/// A fused codelet's steps: single-op element-wise codelets, each reading leaves or earlier
/// steps of its signature's types, within the limits of the registry.
fn check_fused(leaves: &[FusedLeaf], steps: &[FusedStep]) -> Result<(), String> {
    if leaves.len() > MAX_FUSED_LEAVES || steps.is_empty() || steps.len() > MAX_FUSED_STEPS {
        return Err(format!(
            "has {} leaves and {} steps (1 to {MAX_FUSED_STEPS} steps, at most \
             {MAX_FUSED_LEAVES} leaves)",
            leaves.len(),
            steps.len()
        ));
    }
    for (k, step) in steps.iter().enumerate() {
        if !step.codelet.is_fusible_step() {
            return Err(format!(
                "step {k} is {}, not a single-op element-wise codelet",
                step.codelet.full_name()
            ));
        }
        let (ins, _) = signature(&step.codelet).map_err(|e| format!("step {k}: {e}"))?;
        if ins.len() != step.args.len() {
            return Err(format!(
                "step {k} ({}) has {} inputs, expected {}",
                step.codelet.full_name(),
                step.args.len(),
                ins.len()
            ));
        }
        for (a, (arg, want)) in step.args.iter().zip(&ins).enumerate() {
            let has = match *arg {
                FusedArg::Leaf(i) => leaves.get(i as usize).map(|l| l.dtype),
                FusedArg::Step(j) if (j as usize) < k => Some(steps[j as usize].dtype()),
                FusedArg::Step(_) => None,
            };
            match has {
                Some(d) if d == *want => {}
                Some(d) => return Err(format!("step {k} input {a} is {d}, expected {want}")),
                None => {
                    return Err(format!(
                        "step {k} input {a} ({arg:?}) is not a leaf or an earlier step"
                    ))
                }
            }
        }
    }
    Ok(())
}

/// Checks an element-wise vertex: operand count and types, input lengths, broadcast
/// accesses inside their operands, aliased inputs only where read aligned.
pub(crate) fn check(codelet: &Codelet, v: &Vertex, tensors: &[Tensor]) -> Result<(), String> {
    let (ins, out) = signature(codelet)?;
    if v.operands.len() != ins.len() + 1 {
        return Err(format!(
            "has {} operands, expected {}",
            v.operands.len(),
            ins.len() + 1
        ));
    }
    let dtype = |i: usize| tensors[v.operands[i].tensor.0 as usize].dtype;
    for (i, &want) in ins.iter().chain(std::iter::once(&out)).enumerate() {
        if dtype(i) != want {
            return Err(format!("operand {i} is {}, expected {want}", dtype(i)));
        }
    }
    let n = v.operands[ins.len()].len as usize;
    let accesses: &[Access] = match &v.params {
        VertexParams::Map(m) => &m.inputs,
        VertexParams::Fill { .. } if ins.is_empty() => &[],
        p => return Err(format!("has {} parameters", super::params_name(p))),
    };
    if accesses.len() != ins.len() {
        return Err(format!(
            "lists {} input accesses for {} inputs",
            accesses.len(),
            ins.len()
        ));
    }
    let out_op = v.operands[ins.len()];
    for (i, a) in accesses.iter().enumerate() {
        let op = v.operands[i];
        match a {
            Access::Aligned => {
                if op.len as usize != n {
                    return Err(format!(
                        "aligned input {i} has {} elements for {n} outputs",
                        op.len
                    ));
                }
            }
            Access::Broadcast(b) => {
                if b.pattern.strides.len() != b.pattern.dims.len() {
                    return Err(format!(
                        "broadcast input {i} has {} strides for {} dims",
                        b.pattern.strides.len(),
                        b.pattern.dims.len()
                    ));
                }
                if (op.offset, op.len) == (out_op.offset, out_op.len) && op.tensor == out_op.tensor
                {
                    return Err(format!("broadcast input {i} is the output"));
                }
                if let Some((lo, hi)) = broadcast_bounds(b, n) {
                    if lo < 0 || hi >= op.len as i64 {
                        return Err(format!(
                            "broadcast input {i} reads elements [{lo}, {hi}] of an operand of {}",
                            op.len
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Computes the whole vertex: `ins` are contiguous inputs aligned with `out`.
fn kernel(
    codelet: &Codelet,
    params: &VertexParams,
    ins: &[&[u8]; MAX_INPUTS],
    out: &mut [u8],
    r: &mut Rounding,
) -> Result<FpSts, EngineError> {
    use DType::*;
    let (x, y, z) = (ins[0], ins[1], ins[2]);
    let scale = match params {
        VertexParams::Map(m) => m.scale,
        _ => 1.0,
    };
    let unsupported = || EngineError::internal(format!("{} is not supported", codelet.full_name()));
    Ok(match *codelet {
        Codelet::Fill { dtype } => {
            let value = match params {
                VertexParams::Fill { value } => *value,
                _ => 0.0,
            };
            fill(dtype, value, out)?;
            FpSts::empty()
        }
        Codelet::Unary { op, dtype } => match dtype {
            F16 => k::unary_f16(op, typed(x)?, typed_mut(out)?, r)?,
            F32 => k::unary_f32(op, typed(x)?, typed_mut(out)?)?,
            I32 => int_unary::<i32>(op, typed(x)?, typed_mut(out)?)?,
            U8 => int_unary::<u8>(op, x, out)?,
            Bool => return Err(unsupported()),
        },
        Codelet::Binary { op, dtype } => match (ArithOp::try_from(op), dtype) {
            (Ok(a), F16) => k::binary_f16(a, typed(x)?, typed(y)?, typed_mut(out)?, r)?,
            (Ok(a), F32) => k::binary_f32(a, typed(x)?, typed(y)?, typed_mut(out)?)?,
            (Ok(a), I32) => each2(typed::<i32>(x)?, typed(y)?, typed_mut(out)?, |p, q| {
                i32::arith(a, p, q)
            }),
            (Ok(a), U8) => each2(x, y, out, |p, q| u8::arith(a, p, q)),
            (Ok(_), Bool) => return Err(unsupported()),
            (Err(c), F16) => k::compare_f16(c, typed(x)?, typed(y)?, out)?,
            (Err(c), F32) => k::compare_f32(c, typed(x)?, typed(y)?, out)?,
            (Err(c), I32) => each2(typed::<i32>(x)?, typed(y)?, out, |p, q| int_truth(c, p, q)),
            (Err(c), U8) => each2(x, y, out, |p, q| int_truth(c, p, q)),
            (Err(c), Bool) => each2(x, y, out, |p, q| {
                int_truth(c, u8::from(p != 0), u8::from(q != 0))
            }),
        },
        Codelet::ScaledAdd { dtype } => {
            let s = round::round_f32(scale).0;
            match dtype {
                F16 => k::scaled_add_f16(typed(x)?, typed(y)?, s, typed_mut(out)?, r)?,
                F32 => k::scaled_add_f32(typed(x)?, typed(y)?, s, typed_mut(out)?)?,
                _ => return Err(unsupported()),
            }
        }
        Codelet::Select { dtype } => match dtype.size_bytes() {
            1 => select::<u8>(x, y, z, out)?,
            2 => select::<u16>(x, y, z, out)?,
            _ => select::<u32>(x, y, z, out)?,
        },
        Codelet::Cast { from, to } => convert_slice(from, to, x, out, r)?,
        Codelet::ActivationGrad { activation, dtype } => match dtype {
            F16 => k::activation_grad_f16(activation, typed(x)?, typed(y)?, typed_mut(out)?, r)?,
            F32 => k::activation_grad_f32(activation, typed(x)?, typed(y)?, typed_mut(out)?)?,
            _ => return Err(unsupported()),
        },
        Codelet::OneHot { dtype, depth } => {
            let begin = match params {
                VertexParams::Map(m) => m.out_begin.unwrap_or(0),
                _ => 0,
            };
            one_hot(dtype, u64::from(depth), begin, typed(x)?, out)?;
            FpSts::empty()
        }
        _ => return Err(unsupported()),
    })
}

/// A comparison of integers as a Bool byte (integers raise no flags).
fn int_truth<T: IntArith>(c: CompareOp, p: T, q: T) -> (u8, FpSts) {
    (u8::from(T::compare(c, p, q)), FpSts::empty())
}

fn int_unary<T: IntArith + Pod>(
    op: UnaryOp,
    src: &[T],
    dst: &mut [T],
) -> Result<FpSts, EngineError> {
    let none = FpSts::empty();
    Ok(match op {
        UnaryOp::Neg => each(src, dst, |v| (T::neg(v), none)),
        UnaryOp::Abs => each(src, dst, |v| (T::abs(v), none)),
        UnaryOp::Relu => each(src, dst, |v| (T::relu(v), none)),
        _ => return Err(EngineError::internal(format!("integer {op:?}"))),
    })
}

fn select<T: Pod>(cond: &[u8], a: &[u8], b: &[u8], out: &mut [u8]) -> Result<FpSts, EngineError> {
    Ok(each3(
        cond,
        typed::<T>(a)?,
        typed::<T>(b)?,
        typed_mut::<T>(out)?,
        |c, p, q| (if c != 0 { p } else { q }, FpSts::empty()),
    ))
}

/// `Fill`: every element := `value` converted to `dtype` (RNE for floats, truncation toward
/// zero for integers, `value ≠ 0` for Bool).
fn fill(dtype: DType, value: f64, out: &mut [u8]) -> Result<(), EngineError> {
    match dtype {
        DType::F16 => {
            let v = Rounding::nearest(false).round_f16(value, Tail::Exact).0;
            typed_mut::<f16>(out)?.fill(v);
        }
        DType::F32 => typed_mut::<f32>(out)?.fill(round::round_f32(value).0),
        DType::I32 => typed_mut::<i32>(out)?.fill(value as i32),
        DType::U8 => out.fill(value as u8),
        DType::Bool => out.fill(u8::from(value != 0.0)),
    }
    Ok(())
}

/// `OneHot`: `out[j] = (indices[j] == (begin + j) mod depth) ? 1 : 0` in `dtype`.
fn one_hot(
    dtype: DType,
    depth: u64,
    begin: u64,
    indices: &[i32],
    out: &mut [u8],
) -> Result<(), EngineError> {
    let hot = |j: usize| i64::from(indices[j]) == ((begin + j as u64) % depth) as i64;
    match dtype {
        DType::F16 => {
            for (j, o) in typed_mut::<f16>(out)?.iter_mut().enumerate() {
                *o = if hot(j) { f16::ONE } else { f16::ZERO };
            }
        }
        DType::F32 => {
            for (j, o) in typed_mut::<f32>(out)?.iter_mut().enumerate() {
                *o = f32::from(u8::from(hot(j)));
            }
        }
        DType::I32 => {
            for (j, o) in typed_mut::<i32>(out)?.iter_mut().enumerate() {
                *o = i32::from(hot(j));
            }
        }
        DType::U8 | DType::Bool => {
            for (j, o) in out.iter_mut().enumerate() {
                *o = u8::from(hot(j));
            }
        }
    }
    Ok(())
}

/// `Cast` from `from` to `to` (the conversions of the numerics core; see the codelet
/// contract).
fn convert_slice(
    from: DType,
    to: DType,
    x: &[u8],
    out: &mut [u8],
    r: &mut Rounding,
) -> Result<FpSts, EngineError> {
    use DType::*;
    let none = FpSts::empty();
    Ok(match (from, to) {
        _ if from == to => {
            out.copy_from_slice(x);
            none
        }
        (F32, F16) => convert::f32_to_f16_slice(typed(x)?, typed_mut(out)?, r)?,
        (F16, F32) => convert::f16_to_f32_slice(typed(x)?, typed_mut(out)?)?,
        (F16, I32) => each(typed::<f16>(x)?, typed_mut(out)?, cast::f16_to_i32),
        (F32, I32) => each(typed::<f32>(x)?, typed_mut(out)?, cast::f32_to_i32),
        (F16, U8) => each(typed::<f16>(x)?, out, |v| to_u8(cast::f16_to_i32(v))),
        (F32, U8) => each(typed::<f32>(x)?, out, |v| to_u8(cast::f32_to_i32(v))),
        (I32, U8) => each(typed::<i32>(x)?, out, |v| (v as u8, none)),
        (U8, I32) => each(x, typed_mut(out)?, |v| (i32::from(v), none)),
        (Bool, I32) => each(x, typed_mut(out)?, |v| (i32::from(v != 0), none)),
        (Bool, U8) => each(x, out, |v| (u8::from(v != 0), none)),
        (F16, Bool) => each(typed::<f16>(x)?, out, |v| {
            (u8::from(v.to_f64() != 0.0), none)
        }),
        (F32, Bool) => each(typed::<f32>(x)?, out, |v| (u8::from(v != 0.0), none)),
        (I32, Bool) => each(typed::<i32>(x)?, out, |v| (u8::from(v != 0), none)),
        (U8, Bool) => each(x, out, |v| (u8::from(v != 0), none)),
        (I32, F16) => each(typed::<i32>(x)?, typed_mut(out)?, |v| {
            cast::i32_to_f16(v, r)
        }),
        (I32, F32) => each(typed::<i32>(x)?, typed_mut(out)?, cast::i32_to_f32),
        (U8, F16) => each(x, typed_mut(out)?, cast::u8_to_f16),
        (U8, F32) => each(x, typed_mut(out)?, cast::u8_to_f32),
        (Bool, F16) => each(x, typed_mut(out)?, |v| {
            (if v != 0 { f16::ONE } else { f16::ZERO }, none)
        }),
        (Bool, F32) => each(x, typed_mut(out)?, |v| (f32::from(u8::from(v != 0)), none)),
        _ => {
            return Err(EngineError::internal(format!(
                "no cast from {from} to {to}"
            )))
        }
    })
}

/// The last step of a float→u8 cast.
fn to_u8((v, f): (i32, FpSts)) -> (u8, FpSts) {
    let (u, g) = cast::i32_to_u8_saturating(v);
    (u, f | g)
}

#[cfg(test)]
mod tests {
    use super::{gather, BroadcastAccess};

    /// The gathered operand is, output by output, the element `BroadcastAccess::index`
    /// names: plain runs, broadcast runs, strided runs and periodic blocks (a per-channel
    /// operand of a channel-grouped map), from any first output, of 2- and 4-byte elements.
    #[test]
    fn gather_reads_the_indexed_element_of_every_output() {
        let cases: [(&[u64], &[u64]); 6] = [
            (&[3, 10, 4], &[4, 0, 1]),
            (&[2, 5, 16], &[16, 0, 1]),
            (&[6, 7], &[1, 0]),
            (&[4, 5], &[0, 3]),
            (&[9], &[1]),
            (&[3, 2, 2, 5], &[10, 0, 5, 1]),
        ];
        for (dims, strides) in cases {
            let total: u64 = dims.iter().product();
            let reads = dims
                .iter()
                .zip(strides)
                .map(|(d, s)| (d - 1) * s)
                .sum::<u64>()
                + 1;
            for es in [2usize, 4] {
                let src: Vec<u8> = (0..reads as usize * es)
                    .map(|i| (i * 7 + 3) as u8)
                    .collect();
                for (start, n) in [(0, total), (1, total - 1), (total / 3, total / 2), (5, 1)] {
                    let b = BroadcastAccess::new(dims, strides, start, 0);
                    let mut got = vec![0u8; n as usize * es];
                    gather(&b, &src, es, &mut got);
                    let want: Vec<u8> = (start..start + n)
                        .flat_map(|x| {
                            let i = b.index(x) as usize * es;
                            src[i..i + es].to_vec()
                        })
                        .collect();
                    assert_eq!(
                        got, want,
                        "dims {dims:?} strides {strides:?} start {start} n {n}"
                    );
                }
            }
        }
    }
}

//! `AmpMatMul`: the AMP matmul partial of one vertex, by the numerics core's AMP kernels in
//! the codelet's documented order (passes of `input_channels` channels, one partial write
//! per pass, partials in f32 or f16), then one conversion to the output type.
//!
//! The vertex's rows of `A` and the whole `B` are made row-major f32 in scratch (FP16 values
//! widen exactly, a stored transpose is read transposed); `B` is prepared once per vertex
//! group when the group's vertices share it (they normally do: one block of `B` per tile).
//! A trapped exception replays the product with the scalar reference of the kernel from the
//! worker's random-stream position before the vertex, and reports the first faulting
//! multiply-add or partial write (or output conversion) with its values.

use super::operands::Operands;
use super::{dump_value, Fault, Scratch, VertexError, Worker};
use crate::display::element_with_bits;
use crate::engine::error::EngineError;
use crate::engine::memory::{typed, typed_mut, Buf};
use crate::numerics::kernels::amp::{self, AmpFault, MatMulShape};
use crate::numerics::kernels::convert;
use crate::numerics::{cast, FpSts, Rounding, Tail};
use half::f16;
use ipusim_exe::codelets::{AmpParams, Codelet, MatrixLayout};
use ipusim_exe::executable::{Tensor, Vertex};
use ipusim_ir::DType;

/// The input, partials and output types of an `AmpMatMul` codelet.
fn types(codelet: &Codelet) -> Option<(DType, DType, DType)> {
    match *codelet {
        Codelet::AmpMatMul {
            input,
            partials,
            output,
        } => Some((input, partials, output)),
        _ => None,
    }
}

/// Checks an `AmpMatMul` vertex: operand types, block sizes, row range.
pub(crate) fn check(
    codelet: &Codelet,
    p: &AmpParams,
    v: &Vertex,
    tensors: &[Tensor],
) -> Result<(), String> {
    let (input, partials, output) = types(codelet).ok_or("is not an AmpMatMul")?;
    if !input.is_float() || !partials.is_float() || !output.is_float() {
        return Err("AMP types must be float".into());
    }
    if input == DType::F32 && partials == DType::F16 {
        return Err("f32 inputs with f16 partials".into());
    }
    if v.operands.len() != 3 {
        return Err(format!("has {} operands, expected 3", v.operands.len()));
    }
    let (m, k, n) = (p.m as u64, p.k as u64, p.n as u64);
    let want = [
        (input, m * k, "a"),
        (input, k * n, "b"),
        (output, p.rows as u64 * n, "out"),
    ];
    for (o, (dtype, len, name)) in v.operands.iter().zip(want) {
        let t = &tensors[o.tensor.0 as usize];
        if t.dtype != dtype || o.len as u64 != len {
            return Err(format!(
                "operand {name} is {} elements of {}, expected {len} of {dtype}",
                o.len, t.dtype
            ));
        }
    }
    if p.row_begin as u64 + p.rows as u64 > m {
        return Err(format!(
            "rows [{}, {}) of a {m}-row block",
            p.row_begin,
            p.row_begin + p.rows
        ));
    }
    Ok(())
}

/// Runs an `AmpMatMul` vertex.
pub(crate) fn run(
    codelet: &Codelet,
    p: &AmpParams,
    ops: Operands,
    scratch: &mut Scratch,
    worker: Worker,
) -> Result<FpSts, VertexError> {
    let (input, partials, output) =
        types(codelet).ok_or_else(|| EngineError::internal("not an AmpMatMul"))?;
    let (m, k, n) = (p.m as usize, p.k as usize, p.n as usize);
    let rows = p.rows as usize;
    let chunk = p.input_channels.max(1) as usize;
    let shape = MatMulShape { m: rows, k, n };
    let Scratch {
        a: abuf,
        b: bbuf,
        p: pbuf,
        q: qbuf,
        b_key,
        b_finite,
        ..
    } = scratch;
    let a = abuf.take::<f32>(rows * k);
    let a_finite = widen_block(
        input,
        p.a_layout,
        ops.inputs[0],
        m,
        p.row_begin as usize,
        rows,
        k,
        a,
    )?;
    let a: &[f32] = a;
    let key = (
        ops.inputs[1].as_ptr() as usize,
        ops.inputs[1].len(),
        p.b_layout,
    );
    if *b_key != Some(key) {
        let b = bbuf.take::<f32>(k * n);
        let finite = widen_block(input, p.b_layout, ops.inputs[1], k, 0, k, n, b)?;
        *b_finite = finite.unwrap_or_else(|| amp::finite(b));
        *b_key = Some(key);
    }
    let b: &[f32] = bbuf.take::<f32>(k * n);
    let types = (input, partials, output);
    let b = (b, *b_finite);
    product(
        types,
        shape,
        (a, a_finite),
        b,
        chunk,
        ops.output,
        (pbuf, qbuf),
        worker,
    )
}

/// `out = a · b` of row-major f32 blocks (values of `input`, widened exactly) with the AMP
/// accumulation of the codelet contract: passes of `chunk` reduction elements, partials of
/// `partials`, one conversion to `output`. A trapped exception is explained from the
/// worker's random stream before the product. `b` comes with whether its every element is
/// finite ([`amp::finite`]): the vertices of a group share one `b`, checked once; `a` with
/// the same when the caller knows it. Shared by `AmpMatMul` and the `Conv` window codelet.
#[allow(clippy::too_many_arguments)]
pub(crate) fn product(
    (input, partials, output): (DType, DType, DType),
    shape: MatMulShape,
    (a, a_finite): (&[f32], Option<bool>),
    (b, b_finite): (&[f32], bool),
    chunk: usize,
    out: &mut [u8],
    (pbuf, qbuf): (&mut Buf, &mut Buf),
    mut worker: Worker,
) -> Result<FpSts, VertexError> {
    let (rows, n) = (shape.m, shape.n);
    // The partials start at +0 (the kernel's part); FP16 inputs are widened exactly.
    let known = amp::Known {
        zero_partials: true,
        b_finite: Some(b_finite),
        a_finite,
        half_operands: input == DType::F16,
    };
    let saved = (!worker.mask().is_empty()).then(|| worker.rng.clone());
    let flags = match (partials, output) {
        (DType::F32, DType::F32) => {
            let o = typed_mut::<f32>(out)?;
            amp::matmul_f32_known(shape, a, b, o, chunk, known)?
        }
        (DType::F32, _) => {
            let pp = pbuf.take::<f32>(rows * n);
            let f = amp::matmul_f32_known(shape, a, b, pp, chunk, known)?;
            f | convert::f32_to_f16_slice(pp, typed_mut(out)?, &mut worker.rounding())?
        }
        (_, DType::F16) => {
            let o = typed_mut::<f16>(out)?;
            amp::amp_matmul_f16_partials_widened(
                shape,
                a,
                b,
                o,
                chunk,
                &mut worker.rounding(),
                known,
            )?
        }
        _ => {
            let pp = pbuf.take::<f16>(rows * n);
            let f = amp::amp_matmul_f16_partials_widened(
                shape,
                a,
                b,
                pp,
                chunk,
                &mut worker.rounding(),
                known,
            )?;
            f | convert::f16_to_f32_slice(pp, typed_mut(out)?)?
        }
    };
    let mask = worker.mask();
    match saved {
        Some(mut rng) if !worker.ctl.trapping(flags).is_empty() => {
            let mut r = Rounding::from_ctl(worker.ctl, &mut rng);
            Err(explain(
                input, partials, output, shape, a, b, chunk, &mut r, mask, qbuf,
            ))
        }
        _ => Ok(flags),
    }
}

/// Rows `[first, first + rows)` of a matrix with `cols` columns as row-major f32 in `dst`:
/// stored row-major, or as its transpose (`layout` Transposed: element `(i, j)` at
/// `j·stride + i`, `stride` the stored row length). For `A`'s rows of a vertex (`m × k`,
/// stride `m`) and for the whole `B` (`k × n`, stride `k`). FP16 values widen exactly.
/// Returns whether every value is finite where the widening found it on the way (FP16
/// row-major), else `None`.
#[allow(clippy::too_many_arguments)]
fn widen_block(
    input: DType,
    layout: MatrixLayout,
    bytes: &[u8],
    stride: usize,
    first: usize,
    rows: usize,
    cols: usize,
    dst: &mut [f32],
) -> Result<Option<bool>, EngineError> {
    let range = first * cols..(first + rows) * cols;
    match (input, layout) {
        (DType::F16, MatrixLayout::RowMajor) => {
            let finite = convert::widen_finite(&typed::<f16>(bytes)?[range], dst);
            return Ok(Some(finite));
        }
        (_, MatrixLayout::RowMajor) => dst.copy_from_slice(&typed::<f32>(bytes)?[range]),
        (DType::F16, MatrixLayout::Transposed) => {
            // Column `j` of the block is a run of `rows` values in source row `j`: widened a
            // run at a time by the bulk conversion, then placed down the column.
            const RUN: usize = 256;
            let src = typed::<f16>(bytes)?;
            let mut wide = [0f32; RUN];
            for j in 0..cols {
                let run = &src[j * stride + first..][..rows];
                for (c, part) in run.chunks(RUN).enumerate() {
                    let wide = &mut wide[..part.len()];
                    convert::widen(part, wide);
                    let i0 = c * RUN;
                    for (i, &v) in wide.iter().enumerate() {
                        dst[(i0 + i) * cols + j] = v;
                    }
                }
            }
        }
        (_, MatrixLayout::Transposed) => {
            let src = typed::<f32>(bytes)?;
            for (i, row) in dst.chunks_exact_mut(cols.max(1)).enumerate() {
                for (j, d) in row.iter_mut().enumerate() {
                    *d = src[j * stride + first + i];
                }
            }
        }
    }
    Ok(None)
}

/// An FP16 value held exactly as `f64`, back as FP16.
fn exact_f16(v: f64) -> f16 {
    Rounding::nearest(false).round_f16(v, Tail::Exact).0
}

/// A value of `dtype` (f16 or f32) held as `f64`, with its bits.
fn show(dtype: DType, v: f64) -> String {
    match dtype {
        DType::F16 => element_with_bits(dtype, &exact_f16(v).to_bits().to_le_bytes()),
        _ => element_with_bits(DType::F32, &(v as f32).to_bits().to_le_bytes()),
    }
}

/// The fault of a product that trapped: replays it (from the random-stream position before
/// the vertex, in `r`) with the kernel's scalar reference.
#[allow(clippy::too_many_arguments)]
fn explain(
    input: DType,
    partials: DType,
    output: DType,
    shape: MatMulShape,
    a: &[f32],
    b: &[f32],
    chunk: usize,
    r: &mut Rounding,
    mask: FpSts,
    buf: &mut Buf,
) -> VertexError {
    let n = shape.m * shape.n;
    let fault = match partials {
        DType::F32 => {
            let pp = buf.take::<f32>(n);
            pp.fill(0.0);
            match amp::first_fault_f32_partials(shape, a, b, pp, chunk, mask) {
                Ok(Some(f)) => Some(f),
                Ok(None) => {
                    return conversion_fault(
                        pp.iter().map(|&x| f64::from(x)),
                        partials,
                        output,
                        r,
                        mask,
                    )
                }
                Err(e) => return VertexError::from(e),
            }
        }
        _ => {
            let pp = buf.take::<f16>(n);
            pp.fill(f16::ZERO);
            match amp::first_fault_f16_partials(shape, a, b, pp, chunk, r, mask) {
                Ok(Some(f)) => Some(f),
                Ok(None) => {
                    return conversion_fault(
                        pp.iter().map(|x| x.to_f64()),
                        partials,
                        output,
                        r,
                        mask,
                    )
                }
                Err(e) => return VertexError::from(e),
            }
        }
    };
    let Some(AmpFault {
        row,
        col,
        channel,
        a: av,
        b: bv,
        chunk_sum,
        partial,
        result,
        flags,
    }) = fault
    else {
        return EngineError::internal("AmpMatMul trapped but the replay does not").into();
    };
    let kk = channel.map_or_else(|| "last".to_string(), |c| c.to_string());
    let operands = vec![
        dump_value(format!("a[{row},{kk}]"), show(input, f64::from(av))),
        dump_value(format!("b[{kk},{col}]"), show(input, f64::from(bv))),
        dump_value("chunk sum", show(DType::F32, f64::from(chunk_sum))),
        dump_value("partial", show(partials, partial)),
        dump_value(
            if channel.is_some() {
                "chunk sum'"
            } else {
                "partial'"
            },
            show(
                if channel.is_some() {
                    DType::F32
                } else {
                    partials
                },
                result,
            ),
        ),
    ];
    VertexError::Fault(Box::new(Fault {
        sts: flags,
        element: Some((row * shape.n + col) as u64),
        operands,
    }))
}

/// The first output conversion (partial → output type) that traps.
fn conversion_fault(
    partials_values: impl Iterator<Item = f64>,
    partials: DType,
    output: DType,
    r: &mut Rounding,
    mask: FpSts,
) -> VertexError {
    let mut sts = FpSts::empty();
    for (j, p) in partials_values.enumerate() {
        let (bytes, f) = match (partials, output) {
            (DType::F32, DType::F16) => {
                let (v, f) = cast::f32_to_f16(p as f32, r);
                (v.to_bits().to_le_bytes().to_vec(), f)
            }
            _ => {
                let (v, f) = cast::f16_to_f32(exact_f16(p));
                (v.to_bits().to_le_bytes().to_vec(), f)
            }
        };
        sts |= f;
        if f.intersects(mask) {
            return VertexError::Fault(Box::new(Fault {
                sts,
                element: Some(j as u64),
                operands: vec![
                    dump_value("partial", show(partials, p)),
                    dump_value("result", element_with_bits(output, &bytes)),
                ],
            }));
        }
    }
    EngineError::internal("AmpMatMul trapped but no operation reproduces it").into()
}

//! The operand bytes of one vertex: its inputs (read-only) and its output (writable), cut
//! out of the tile's memory without copying.
//!
//! The output must not overlap an input, except that an input may be *exactly* the output's
//! bytes (an in-place update, `m := g + μ·m`); such an input is marked `aliased` and handed
//! out empty, and the codelet reads it from a copy of the output bytes taken before it
//! writes. [`check`] verifies all of this once, when the engine is built, so that
//! [`split`] cannot fail on a validated executable.

use crate::engine::error::EngineError;
use ipusim_exe::executable::{Operand, Tensor, Vertex};
use ipusim_ir::DType;

/// The most inputs a codelet has: a fused vertex's leaves (`Select` has three).
pub(crate) const MAX_INPUTS: usize = ipusim_exe::codelets::MAX_FUSED_LEAVES;
const _: () = assert!(MAX_INPUTS >= 3);

/// A vertex's operands.
pub(crate) struct Operands<'m> {
    /// Input bytes (empty for an aliased input or a missing one).
    pub inputs: [&'m [u8]; MAX_INPUTS],
    /// Inputs that are the output's bytes.
    pub aliased: [bool; MAX_INPUTS],
    /// Element type of each input.
    pub in_dtypes: [DType; MAX_INPUTS],
    /// Elements of each input.
    pub in_lens: [usize; MAX_INPUTS],
    /// Number of inputs.
    pub n_inputs: usize,
    /// The output bytes.
    pub output: &'m mut [u8],
    /// The output's element type.
    pub out_dtype: DType,
}

impl Operands<'_> {
    /// The same operands, borrowed again for a shorter while (a split vertex's slices each
    /// run on them in turn).
    pub fn reborrow(&mut self) -> Operands<'_> {
        Operands {
            inputs: self.inputs,
            aliased: self.aliased,
            in_dtypes: self.in_dtypes,
            in_lens: self.in_lens,
            n_inputs: self.n_inputs,
            output: self.output,
            out_dtype: self.out_dtype,
        }
    }

    /// Elements of the output.
    pub fn out_len(&self) -> usize {
        // Element sizes are powers of two: a shift, not a division, on the hot path.
        self.output.len() >> self.out_dtype.size_bytes().trailing_zeros()
    }
}

/// The element type of every tensor, by id: the one fact of a tensor a running vertex
/// needs, kept compact (a byte per tensor) so that looking it up stays in cache.
pub(crate) fn dtypes(tensors: &[Tensor]) -> Vec<DType> {
    tensors.iter().map(|t| t.dtype).collect()
}

fn region(o: &Operand, tensors: &[Tensor]) -> (usize, usize, DType) {
    let dtype = tensors
        .get(o.tensor.0 as usize)
        .map_or(DType::U8, |t| t.dtype);
    span(o, dtype)
}

/// The bytes `[start, end)` of an operand of `dtype`.
fn span(o: &Operand, dtype: DType) -> (usize, usize, DType) {
    let start = o.offset as usize;
    (start, start + o.len as usize * dtype.size_bytes(), dtype)
}

/// Checks a vertex's operands against its tile's memory of `mem_len` bytes: every operand
/// names a tensor, lies inside the memory, is aligned for its type; at most
/// [`MAX_INPUTS`] inputs; the output overlaps no input except one with exactly its bytes
/// (only where `in_place_ok`). Returns a message naming the operand at fault.
pub(crate) fn check(
    v: &Vertex,
    tensors: &[Tensor],
    mem_len: usize,
    in_place_ok: bool,
) -> Result<(), String> {
    let Some((out, inputs)) = v.operands.split_last() else {
        return Err("has no operands".into());
    };
    if inputs.len() > MAX_INPUTS {
        return Err(format!("has {} inputs, at most {MAX_INPUTS}", inputs.len()));
    }
    for (i, o) in v.operands.iter().enumerate() {
        if tensors.get(o.tensor.0 as usize).is_none() {
            return Err(format!(
                "operand {i} names tensor {} of {}",
                o.tensor.0,
                tensors.len()
            ));
        }
        let (s, e, dtype) = region(o, tensors);
        if e > mem_len || s % dtype.size_bytes() != 0 {
            return Err(format!(
                "operand {i} (bytes [{s}, {e}) of '{}') is misaligned or outside the tile's {mem_len} bytes",
                tensors[o.tensor.0 as usize].name
            ));
        }
    }
    let (os, oe, _) = region(out, tensors);
    for (i, o) in inputs.iter().enumerate() {
        let (s, e, _) = region(o, tensors);
        let disjoint = e <= os || s >= oe || s == e;
        let same = (s, e) == (os, oe);
        if !(disjoint || same && in_place_ok) {
            return Err(format!(
                "input {i} (bytes [{s}, {e})) overlaps the output (bytes [{os}, {oe}))"
            ));
        }
    }
    Ok(())
}

/// Cuts the operands of `v` out of `mem` (see the module docs); `dtypes` from [`dtypes`].
/// Inlined into its callers: returned through a `Result`, the operands (some 200 bytes)
/// were copied once more for every vertex (2.9% of a ResNet-20 step's host time).
#[inline(always)]
pub(crate) fn split<'m>(
    mem: &'m mut [u8],
    v: &Vertex,
    dtypes: &[DType],
) -> Result<Operands<'m>, EngineError> {
    let region = |o: &Operand| {
        span(
            o,
            dtypes
                .get(o.tensor.0 as usize)
                .copied()
                .unwrap_or(DType::U8),
        )
    };
    let bad = |m: &str| EngineError::internal(format!("vertex operands: {m}"));
    let (out, inputs) = v.operands.split_last().ok_or_else(|| bad("no operands"))?;
    if inputs.len() > MAX_INPUTS {
        return Err(bad("too many inputs"));
    }
    let (os, oe, out_dtype) = region(out);
    if oe > mem.len() {
        return Err(bad("output outside memory"));
    }
    let (before, rest) = mem.split_at_mut(os);
    let (output, after) = rest.split_at_mut(oe - os);
    let (before, after): (&'m [u8], &'m [u8]) = (before, after);
    let mut ops = Operands {
        inputs: [&[]; MAX_INPUTS],
        aliased: [false; MAX_INPUTS],
        in_dtypes: [DType::U8; MAX_INPUTS],
        in_lens: [0; MAX_INPUTS],
        n_inputs: inputs.len(),
        output,
        out_dtype,
    };
    for (i, o) in inputs.iter().enumerate() {
        let (s, e, dtype) = region(o);
        ops.in_dtypes[i] = dtype;
        ops.in_lens[i] = o.len as usize;
        ops.inputs[i] = if s == e {
            &[]
        } else if e <= os {
            &before[s..e]
        } else if s >= oe {
            after
                .get(s - oe..e - oe)
                .ok_or_else(|| bad("input outside memory"))?
        } else if (s, e) == (os, oe) {
            ops.aliased[i] = true;
            &[]
        } else {
            return Err(bad("an input overlaps the output"));
        };
    }
    Ok(ops)
}

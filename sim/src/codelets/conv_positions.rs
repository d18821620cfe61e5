//! 1×1, stride-1, unpadded convolution blocks whose feature maps are stored in channel
//! groups ([`super::window_layout`]), computed position-major — most of a ResNet's
//! convolution vertices (its bottlenecks' 1×1 convolutions in all three passes).
//!
//! A block of such a layout is, per channel group and image, a `positions × g` row-major
//! matrix: put side by side, the groups are the feature map as `[position][channel]`, which
//! [`BlockLayout::widen_position_major`] widens without transposing anything. So:
//!
//! - `Forward` and `InputGrad` compute the transposed product, `out[s][o] = Σ_c x[s][c] ·
//!   w[c][o]` (rows: the output positions; columns: the output channels), whose rows are
//!   placed straight back into the output block's groups
//!   ([`BlockLayout::place_position_major`]). `InputGrad`'s weights `[o][c]` are already the
//!   `b` it needs; `Forward`'s are gathered once as `[c][o]`.
//! - `WeightGrad`'s `b` (`[(n, oh, ow)][c]` for a 1×1 kernel) *is* the position-major map
//!   ([`weight_grad_inputs`]).
//!
//! Every output element is the same sum as in the general path ([`super::window`]): the
//! same products, added in the same order (the reduction's channels in order, in chunks of
//! the vertex's `input_channels`), starting from zero partials. The product's `a · b` is
//! commutative, so reading `x` as `a` and the weights as `b` changes no bit. The path runs
//! only where nothing can raise a flag: finite FP16 operands with FP32 partials, whose sums
//! cannot overflow ([`amp::fp16_sums_stay_finite`]), and FP32 outputs; a block with a
//! non-finite operand is declined, writing nothing, and goes the general way.

use super::window_layout::BlockLayout;
use super::VertexError;
use crate::engine::memory::{typed, typed_mut, Buf};
use crate::numerics::kernels::amp::{self, Known, MatMulShape};
use crate::numerics::kernels::convert;
use crate::numerics::FpSts;
use half::f16;
use ipusim_exe::codelets::{WindowParams, WindowPass};
use ipusim_ir::DType;

fn len(r: (u32, u32)) -> usize {
    r.1.saturating_sub(r.0) as usize
}

/// Whether block `p`'s positions are the same in its input map and its output (a 1×1,
/// stride-1, unpadded kernel over the rows and columns the block holds), and its feature map
/// operand is FP16 in channel groups.
fn positions_match(input: DType, p: &WindowParams, kwp: u32) -> bool {
    let g = &p.geometry;
    input == DType::F16
        && (g.kh, g.kw, kwp) == (1, 1, 1)
        && g.stride == [1, 1]
        && g.padding == [0; 4]
        && p.in_rows == p.out_rows
        && p.in_cols == p.out_cols
        && p.in_group >= 2
}

/// Whether a `Forward` or `InputGrad` vertex of block `p` (kernel width `kwp` in its
/// reduction order) with `types` (input, partials, output) runs position-major: FP16
/// feature maps in channel groups in and out, FP32 partials and outputs.
pub(super) fn eligible(
    pass: WindowPass,
    types: (DType, DType, DType),
    p: &WindowParams,
    kwp: u32,
) -> bool {
    matches!(pass, WindowPass::Forward | WindowPass::InputGrad)
        && positions_match(types.0, p, kwp)
        && (types.1, types.2) == (DType::F32, DType::F32)
        && p.out_group >= 2
}

/// Whether a `WeightGrad` vertex of block `p` gathers its `b` position-major from the FP16
/// feature map `x` of `x_len` elements ([`weight_grad_inputs`]): a whole block of `x`.
pub(super) fn weight_grad_eligible(input: DType, p: &WindowParams, x_len: usize) -> bool {
    let plane = len(p.out_rows) * len(p.out_cols);
    let red = len(p.in_channels);
    positions_match(input, p, 1)
        && red.is_multiple_of(p.in_group as usize)
        && x_len == p.batch_count() as usize * red * plane
}

/// `WeightGrad`'s `b` (`[(n, oh, ow)][c]`) of an eligible block: its FP16 feature map `x`
/// widened position-major. Returns false, writing nothing, when `x` is not the whole block.
pub(super) fn weight_grad_inputs(p: &WindowParams, x: &[f16], b: &mut [f32]) -> bool {
    let plane = len(p.out_rows) * len(p.out_cols);
    let layout = BlockLayout::new(
        p.in_group,
        p.batch_count(),
        len(p.in_channels) as u64,
        plane as u64,
    );
    layout.widen_position_major(x, b)
}

/// The partials of an eligible `Forward` or `InputGrad` vertex of block `p` (`chunk`: its
/// input channels per pass) from its operand bytes (`x`, or `dy`; the weights) into the
/// output block `out`; `None`, having written nothing, when an operand is not finite or the
/// feature map is not the whole block (the general path then runs).
pub(super) fn product(
    pass: WindowPass,
    p: &WindowParams,
    (x, w): (&[u8], &[u8]),
    out: &mut [u8],
    chunk: usize,
    (xbuf, wbuf, obuf): (&mut Buf, &mut Buf, &mut Buf),
) -> Result<Option<FpSts>, VertexError> {
    let (x, w) = (typed::<f16>(x)?, typed::<f16>(w)?);
    let plane = len(p.out_rows) * len(p.out_cols);
    let (red, outs) = (len(p.in_channels), p.out_channel_count() as usize);
    let nb = p.batch_count() as usize;
    if w.len() != red * outs || !(amp::finite_f16(x) && amp::finite_f16(w)) {
        return Ok(None);
    }
    let xd = xbuf.take::<f32>(x.len());
    let in_layout = BlockLayout::new(p.in_group, nb as u64, red as u64, plane as u64);
    if !in_layout.widen_position_major(x, xd) {
        return Ok(None);
    }
    // `b`: the weights as `[reduction channel][output channel]`.
    let b = wbuf.take::<f32>(red * outs);
    match pass {
        // `w[o][c]` over the block's `o` (the reduction) and `c` (its output).
        WindowPass::InputGrad => convert::widen(w, b),
        _ => {
            let wide = obuf.take::<f32>(w.len());
            convert::widen(w, wide);
            for o in 0..outs {
                let mut c = 0;
                while c < red {
                    let at = p.forward_weight_at(o, c);
                    let run = p.weight_chunk_rest(c).min(red - c).max(1);
                    for (i, &v) in wide[at..at + run].iter().enumerate() {
                        b[(c + i) * outs + o] = v;
                    }
                    c += run;
                }
            }
        }
    }
    let out = typed_mut::<f32>(out)?;
    let out_layout = BlockLayout::new(p.out_group, nb as u64, outs as u64, plane as u64);
    // Finite FP16 operands from zero partials: nothing to check, no flag raised.
    let known = Known {
        zero_partials: true,
        a_finite: Some(true),
        b_finite: Some(true),
        half_operands: true,
    };
    let shape = MatMulShape {
        m: plane,
        k: red,
        n: outs,
    };
    // Runs of units with one batch element; every channel of the block computed, the run's
    // placed.
    let mut u = p.units.0;
    while u < p.units.1 {
        let (n, ch) = p.unit(u);
        let mut end = u + 1;
        while end < p.units.1 && p.unit(end).0 == n {
            end += 1;
        }
        let nl = (n - p.batch.0) as usize;
        let c0 = (ch - p.out_channels.0) as usize;
        let rows = obuf.take::<f32>(plane * outs);
        rows.fill(0.0);
        let a = &xd[nl * plane * red..(nl + 1) * plane * red];
        amp::matmul_f32_known(shape, a, b, rows, chunk, known)?;
        let cols = (c0, c0 + (end - u) as usize);
        if !out_layout.place_position_major((rows, outs), nl, cols, out) {
            return Err(crate::engine::error::EngineError::invalid(
                "window units outside the output block",
            )
            .into());
        }
        u = end;
    }
    Ok(Some(FpSts::empty()))
}

#[cfg(test)]
#[path = "conv_positions_tests.rs"]
mod tests;

//! Convolution blocks whose feature maps are stored in channel groups
//! ([`super::window_layout`]), computed position-major: ResNet's 1×1 convolutions in all
//! three passes, and the strided convolutions' `Forward` and `InputGrad`.
//!
//! A block of such a layout is, per channel group and image, a `positions × g` row-major
//! matrix: put side by side, the groups are the feature map as `[position][channel]`, which
//! [`BlockLayout::widen_position_major`] widens without transposing anything. So:
//!
//! - `Forward` and `InputGrad` compute the transposed product, `out[s][o] = Σ a[s][(kh, kw,
//!   c)] · b[(kh, kw, c)][o]` (rows: the output positions; columns: the output channels),
//!   whose rows are placed straight back into the output block's groups
//!   ([`BlockLayout::place_position_major`]). For a 1×1, stride-1 block `a` is the
//!   position-major map itself; for a strided one, each row is the runs of channels its taps
//!   read ([`conv_matrices::position_major_inputs`]), copies where the general path gathers
//!   `b` element by element. `b` is the weights, gathered once ([`weight_matrix`]; a 1×1
//!   `InputGrad`'s `[o][c]` as they are).
//! - A 1×1 `WeightGrad` reads `dy` position-major in place as its column-major `a`, and its
//!   `b` (`[(n, oh, ow)][c]`) *is* the position-major `x` ([`weight_grad_inputs`]).
//!
//! Every output element is the same sum as in the general path ([`super::window`]): the
//! same products, added in the same order (the reduction's taps and channels in order, in
//! chunks of the vertex's `input_channels`), starting from zero partials. The product's
//! `a · b` is commutative, so reading the map as `a` and the weights as `b` changes no bit.
//! The path runs only where nothing can raise a flag: finite FP16 operands with FP32
//! partials, whose sums cannot overflow ([`amp::fp16_sums_stay_finite`]), and FP32 outputs;
//! a block with a non-finite operand is declined and goes the general way.

use super::conv_matrices::{self, Taps};
use super::window_layout::BlockLayout;
use super::VertexError;
use crate::engine::error::EngineError;
use crate::engine::memory::{typed, typed_mut, Buf};
use crate::numerics::kernels::amp::{self, Known, MatMulShape};
use crate::numerics::kernels::{convert, transpose};
use crate::numerics::FpSts;
use half::f16;
use ipusim_exe::codelets::{WindowParams, WindowPass};
use ipusim_ir::DType;

fn len(r: (u32, u32)) -> usize {
    r.1.saturating_sub(r.0) as usize
}

/// Whether block `p`'s positions are the same in its input map and its output (a 1×1,
/// stride-1, unpadded kernel over the rows and columns the block holds), and its feature map
/// operand is FP16 in channel groups: its position-major map is then `a` itself.
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
/// feature maps in channel groups in and out, FP32 partials and outputs, a reduction over
/// the kernel's own width (not a SLIC vertex's padded one), and a 1×1 stride-1 block or a
/// stride along the width. (Other blocks read runs of the padded map in the general path,
/// whose products run along the positions; position-major, their products would run along
/// a few output channels, a 3×3 block's often 8: measured on ResNet-50, slower.)
fn eligible(pass: WindowPass, types: (DType, DType, DType), p: &WindowParams, kwp: u32) -> bool {
    matches!(pass, WindowPass::Forward | WindowPass::InputGrad)
        && types == (DType::F16, DType::F32, DType::F32)
        && kwp == p.geometry.kw
        && p.in_group >= 2
        && p.out_group >= 2
        && (positions_match(types.0, p, kwp) || p.geometry.stride[1] > 1)
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

/// The partials of a 1×1 `WeightGrad` vertex of block `p` with FP16 maps in channel groups
/// (`x` and `dy`), FP32 partials and outputs: both maps widened position-major, `dy`'s read
/// in place as the column-major `a` (`a[o][(n, s)]` at `(n, s) · outs + o`) and `x`'s as `b`
/// ([`weight_grad_inputs`]), into the vertex's rows of `out` (`[o][c]`). `None`, the general
/// path to run, when the vertex is not such, an operand is not finite or the CPU has no
/// kernel for the strided `a` ([`amp::matmul_f32_strided`]).
fn weight_grad_product(
    p: &WindowParams,
    types: (DType, DType, DType),
    (x, dy): (&[u8], &[u8]),
    out: &mut [u8],
    chunk: usize,
    (xbuf, dbuf): (&mut Buf, &mut Buf),
) -> Result<Option<FpSts>, VertexError> {
    if types != (DType::F16, DType::F32, DType::F32) || p.aux_group < 2 {
        return Ok(None);
    }
    let (x, dy) = (typed::<f16>(x)?, typed::<f16>(dy)?);
    let plane = len(p.out_rows) * len(p.out_cols);
    let (red, outs) = (len(p.in_channels), p.out_channel_count() as usize);
    let nb = p.batch_count() as usize;
    let whole = weight_grad_eligible(DType::F16, p, x.len())
        && dy.len() == nb * outs * plane
        && outs.is_multiple_of(p.aux_group as usize);
    if !(whole && amp::finite_f16(x) && amp::finite_f16(dy)) {
        return Ok(None);
    }
    let b = xbuf.take::<f32>(x.len());
    let d = dbuf.take::<f32>(dy.len());
    let dy_layout = BlockLayout::new(p.aux_group, nb as u64, outs as u64, plane as u64);
    if !(weight_grad_inputs(p, x, b) && dy_layout.widen_position_major(dy, d)) {
        return Ok(None);
    }
    let (u0, u1) = (p.units.0 as usize, p.units.1 as usize);
    let rows = typed_mut::<f32>(out)?
        .get_mut(u0 * red..u1 * red)
        .ok_or_else(|| EngineError::invalid("window units outside the output block"))?;
    rows.fill(0.0);
    let a = (d.get(u0..).unwrap_or_default(), 1, outs);
    match amp::matmul_f32_strided(a, b, rows, (nb * plane, red), chunk)? {
        true => Ok(Some(FpSts::empty())),
        false => Ok(None),
    }
}

/// The weights of block `p` (`wide`: widened, as the block holds them) as the product's
/// `b`: `b[(kh, kw, c)][o]` for `Forward` (`c` the reduction's input channels, `o` the
/// output's, in the order [`WindowParams::forward_weight_at`] gives), `b[(kh, kw, o)][c]`
/// for `InputGrad` (the block's weights `[o][c][kh][kw]`, `o` the reduction).
fn weight_matrix(pass: WindowPass, p: &WindowParams, wide: &[f32], b: &mut [f32]) {
    let taps = (p.geometry.kh * p.geometry.kw) as usize;
    let (red, outs) = (len(p.in_channels), p.out_channel_count() as usize);
    match pass {
        WindowPass::InputGrad => {
            for (o, per_o) in wide.chunks_exact(outs * taps).enumerate() {
                for (c, per_c) in per_o.chunks_exact(taps).enumerate() {
                    for (t, &v) in per_c.iter().enumerate() {
                        b[(t * red + o) * outs + c] = v;
                    }
                }
            }
        }
        // A 1×1 kernel's chunks of channels are each `[o][c]` row-major: transposed whole.
        _ if taps == 1 => {
            let mut c = 0;
            while c < red {
                let run = p.weight_chunk_rest(c).min(red - c).max(1);
                let at = p.forward_weight_at(0, c);
                let chunk = &wide[at..at + outs * run];
                let planes = &mut b[c * outs..(c + run) * outs];
                transpose::columns_to_planes(chunk, run, planes, outs, 0);
                c += run;
            }
        }
        _ => {
            for o in 0..outs {
                let mut c = 0;
                while c < red {
                    let at = p.forward_weight_at(o, c);
                    let run = p.weight_chunk_rest(c).min(red - c).max(1);
                    for (i, per_c) in wide[at..at + run * taps].chunks_exact(taps).enumerate() {
                        for (t, &v) in per_c.iter().enumerate() {
                            b[(t * red + c + i) * outs + o] = v;
                        }
                    }
                    c += run;
                }
            }
        }
    }
}

/// The partials of a conv vertex of block `p` in `pass` with `types` (input, partials,
/// output) and kernel width `kwp` in its reduction order (`taps`: the block's; `chunk`: its
/// input channels per pass), position-major where it can be ([`eligible`], a 1×1
/// `WeightGrad`), from its operand bytes into the output block `out`; `None` where it cannot,
/// or declines (the general path then runs, and computes every unit of the vertex again).
/// The caller runs it only with no exception enabled.
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    (pass, kwp): (WindowPass, u32),
    types: (DType, DType, DType),
    p: &WindowParams,
    taps: &Taps,
    operands: (&[u8], &[u8]),
    out: &mut [u8],
    chunk: usize,
    (b0, b1, b2, b3): (&mut Buf, &mut Buf, &mut Buf, &mut Buf),
) -> Result<Option<FpSts>, VertexError> {
    match pass {
        WindowPass::WeightGrad => weight_grad_product(p, types, operands, out, chunk, (b0, b1)),
        _ if eligible(pass, types, p, kwp) => {
            product(pass, p, taps, operands, out, chunk, (b0, b1, b2, b3))
        }
        _ => Ok(None),
    }
}

/// The partials of an eligible `Forward` or `InputGrad` vertex of block `p` (its `taps`;
/// `chunk`: its input channels per pass) from its operand bytes (`x`, or `dy`; the
/// weights) into the output block `out`; `None` when an operand is not finite or a block is
/// not whole.
#[allow(clippy::too_many_arguments)]
fn product(
    pass: WindowPass,
    p: &WindowParams,
    taps: &Taps,
    (x, w): (&[u8], &[u8]),
    out: &mut [u8],
    chunk: usize,
    (xbuf, abuf, wbuf, obuf): (&mut Buf, &mut Buf, &mut Buf, &mut Buf),
) -> Result<Option<FpSts>, VertexError> {
    let (x, w) = (typed::<f16>(x)?, typed::<f16>(w)?);
    let g = &p.geometry;
    let in_plane = len(p.in_rows) * len(p.in_cols);
    let plane = len(p.out_rows) * len(p.out_cols);
    let (red, outs) = (len(p.in_channels), p.out_channel_count() as usize);
    let k = (g.kh * g.kw) as usize * red;
    let nb = p.batch_count() as usize;
    if w.len() != k * outs || !(amp::finite_f16(x) && amp::finite_f16(w)) {
        return Ok(None);
    }
    let xd = xbuf.take::<f32>(x.len());
    let in_layout = BlockLayout::new(p.in_group, nb as u64, red as u64, in_plane as u64);
    if !in_layout.widen_position_major(x, xd) {
        return Ok(None);
    }
    let b = wbuf.take::<f32>(k * outs);
    if pass == WindowPass::InputGrad && k == red {
        // A 1×1 kernel's `w[o][c]` is `b` as it is.
        convert::widen(w, b);
    } else {
        let wide = obuf.take::<f32>(w.len());
        convert::widen(w, wide);
        weight_matrix(pass, p, wide, b);
    }
    // A 1×1, stride-1 block reads the map itself; any other gathers its `a` per image.
    let same = positions_match(DType::F16, p, g.kw);
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
        k,
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
        let a: &[f32] = match same {
            true => &xd[nl * plane * k..(nl + 1) * plane * k],
            false => {
                let a = abuf.take::<f32>(plane * k);
                if !conv_matrices::position_major_inputs((p, taps), nl, xd, a) {
                    return Ok(None);
                }
                a
            }
        };
        let rows = obuf.take::<f32>(plane * outs);
        amp::matmul_f32_known(shape, a, b, rows, chunk, known)?;
        let c0 = (ch - p.out_channels.0) as usize;
        let cols = (c0, c0 + (end - u) as usize);
        if !out_layout.place_position_major((rows, outs), nl, cols, out) {
            return Err(EngineError::invalid("window units outside the output block").into());
        }
        u = end;
    }
    Ok(Some(FpSts::empty()))
}

#[cfg(test)]
#[path = "conv_positions_tests.rs"]
mod tests;

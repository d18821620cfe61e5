//! The `MaxPool` window codelet and its gradient: each output the IEEE `maximum` of its
//! window (row-major window order, padding skipped); each input's gradient the FP32 sum of
//! the output gradients of every window whose maximum it equals (tied inputs all receive
//! it), converted once to the output type; with the flags of every operation.

use super::operands::Operands;
use super::window_layout::BlockLayout;
use super::{VertexError, Worker};
use crate::engine::error::EngineError;
use crate::engine::memory::{typed, typed_mut};
use crate::numerics::{cast, fp16, fp32, FpSts};
use half::f16;
use ipusim_exe::codelets::{WindowGeometry, WindowParams};
use ipusim_ir::DType;

/// Runs a `MaxPool` vertex (its gradient when `grad`).
pub(super) fn run(
    grad: bool,
    dtype: DType,
    p: &WindowParams,
    ops: Operands,
    mut worker: Worker,
) -> Result<FpSts, VertexError> {
    match dtype {
        DType::F16 => {
            let x = typed::<f16>(ops.inputs[0])?;
            let dy = if grad {
                typed::<f16>(ops.inputs[1])?
            } else {
                &[][..]
            };
            let out = typed_mut::<f16>(ops.output)?;
            let mut r = worker.rounding();
            pool_typed(
                grad,
                p,
                (x, dy),
                out,
                fp16::max,
                |v| v.to_f32(),
                |acc| cast::f32_to_f16(acc, &mut r),
            )
        }
        _ => {
            let x = typed::<f32>(ops.inputs[0])?;
            let dy = if grad {
                typed::<f32>(ops.inputs[1])?
            } else {
                &[][..]
            };
            let out = typed_mut::<f32>(ops.output)?;
            pool_typed(
                grad,
                p,
                (x, dy),
                out,
                fp32::max,
                |v| v,
                |acc| (acc, FpSts::empty()),
            )
        }
    }
}

/// The window maximum of output `(oh, ow)` of a plane (block-relative) of a block of rows
/// from `row0`, the plane's element `s` at `x[base + s · step]` (IEEE `maximum`, row-major
/// window order, padding skipped), with its flags.
fn window_max<T: Copy>(
    g: &WindowGeometry,
    (x, base, step): (&[T], usize, usize),
    row0: u32,
    (oh, ow): (u32, u32),
    max: fn(T, T) -> (T, FpSts),
) -> (Option<T>, FpSts) {
    let mut m: Option<T> = None;
    let mut flags = FpSts::empty();
    for khi in 0..g.kh {
        let Some(r) = g.input_row(oh, khi) else {
            continue;
        };
        for kwi in 0..g.kw {
            if let Some(col) = g.input_col(ow, kwi) {
                let s = (r - row0) as usize * g.w as usize + col as usize;
                let v = x[base + s * step];
                m = Some(match m {
                    None => v,
                    Some(m) => {
                        let (v, f) = max(m, v);
                        flags |= f;
                        v
                    }
                });
            }
        }
    }
    (m, flags)
}

/// The outputs `[lo, hi]` along one axis whose windows contain input index `i`, ascending.
fn windows_of(i: u32, k: u32, out: u32, stride: u32, pad: u32) -> std::ops::Range<u32> {
    // Window `o` covers inputs [o·s − pad, o·s − pad + k).
    let first = (i + pad + 1).saturating_sub(k).div_ceil(stride);
    let last = ((i + pad) / stride + 1).min(out);
    first.min(last)..last
}

fn pool_typed<T: Copy + PartialEq>(
    grad: bool,
    p: &WindowParams,
    (x, dy): (&[T], &[T]),
    out: &mut [T],
    max: fn(T, T) -> (T, FpSts),
    widen: impl Fn(T) -> f32,
    mut narrow: impl FnMut(f32) -> (T, FpSts),
) -> Result<FpSts, VertexError> {
    let g = &p.geometry;
    let ob = p.out_channel_count();
    let plane = |r: (u32, u32), w: u32| u64::from(r.1.saturating_sub(r.0)) * u64::from(w);
    let x_layout = BlockLayout::new(p.in_group, p.batch_count(), ob, plane(p.in_rows, g.w));
    let dy_layout = BlockLayout::new(p.aux_group, p.batch_count(), ob, plane(p.aux_rows, g.ow));
    let mut flags = FpSts::empty();
    let inside = || EngineError::invalid("a pooling window inside the padding");
    let outside = || EngineError::invalid("pooling units outside the output block");
    // The gradient's window maxima, each computed when an input first needs it and kept
    // for the unit: the same windows, values and flags as computing it for every input
    // it covers (a flag is raised once or many times alike).
    let mut maxima: Vec<Option<(Option<T>, FpSts)>> = Vec::new();
    for u in p.units.0..p.units.1 {
        let (n, ch) = p.unit(u);
        let nc = (u64::from(n - p.batch.0), u64::from(ch - p.out_channels.0));
        let (xb, xs) = x_layout.plane_at(nc.0, nc.1);
        let xp = (x, xb, xs);
        if !grad {
            for oh in p.out_rows.0..p.out_rows.1 {
                for ow in 0..g.ow {
                    let (m, f) = window_max(g, xp, p.in_rows.0, (oh, ow), max);
                    flags |= f;
                    let at = p.out_position(u, u64::from(oh - p.out_rows.0), u64::from(ow));
                    *out.get_mut(at as usize).ok_or_else(outside)? = m.ok_or_else(inside)?;
                }
            }
            continue;
        }
        let (db, ds) = dy_layout.plane_at(nc.0, nc.1);
        // The output rows whose windows meet the block's rows.
        let oh0 = match p.out_rows.0 < p.out_rows.1 {
            true => windows_of(p.out_rows.0, g.kh, g.oh, g.stride[0], g.padding[0]).start,
            false => 0,
        };
        let ow_count = g.ow as usize;
        maxima.clear();
        for h in p.out_rows.0..p.out_rows.1 {
            let ohs = windows_of(h, g.kh, g.oh, g.stride[0], g.padding[0]);
            for wc in 0..g.w {
                let s = (h - p.in_rows.0) as usize * g.w as usize + wc as usize;
                let xv = x[xb + s * xs];
                let ows = windows_of(wc, g.kw, g.ow, g.stride[1], g.padding[1]);
                let mut acc = 0f32;
                for oh in ohs.clone() {
                    for ow in ows.clone() {
                        let slot = (oh - oh0) as usize * ow_count + ow as usize;
                        if maxima.len() <= slot {
                            maxima.resize(slot + 1, None);
                        }
                        let (m, f) = *maxima[slot]
                            .get_or_insert_with(|| window_max(g, xp, p.in_rows.0, (oh, ow), max));
                        flags |= f;
                        if m == Some(xv) {
                            let d = (oh - p.aux_rows.0) as usize * ow_count + ow as usize;
                            let (s, f) = fp32::add(acc, widen(dy[db + d * ds]));
                            acc = s;
                            flags |= f;
                        }
                    }
                }
                let (v, f) = narrow(acc);
                flags |= f;
                let at = p.out_position(u, u64::from(h - p.out_rows.0), u64::from(wc));
                *out.get_mut(at as usize).ok_or_else(outside)? = v;
            }
        }
    }
    Ok(flags)
}

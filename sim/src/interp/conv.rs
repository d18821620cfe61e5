//! The convolution family's kernels of the reference interpreter (`ipusim_ir::conv`), written
//! once over [`Real`].
//!
//! # Evaluation order
//!
//! Every convolution is a set of matrix products evaluated by the numerics core's AMP kernel
//! ([`Real::matmul`]: FP32 partials in chunks of 16 along the reduction, sequential across
//! chunks, one rounding per output), one product per batch element and group, with the
//! reduction dimension ordered as follows (a padded position contributes an explicit zero
//! product, as a zero-padded input does):
//!
//! | op | product | reduction order |
//! |---|---|---|
//! | `Conv2d` | `[OH·OW, KH·KW·C/g] × [KH·KW·C/g, O/g]` | kernel row, kernel column, input channel (PopLibs' nx1 vertex walks kernel positions, AMP over input channels) |
//! | `Conv2dInputGrad` | `[H·W, KH·KW·O/g] × [KH·KW·O/g, C/g]` | kernel row, kernel column, output channel |
//! | `Conv2dWeightGrad` | `[O/g, N·OH·OW] × [N·OH·OW, C/g·KH·KW]` per group | batch, output row, output column |
//!
//! `MaxPool2d` takes the IEEE 754-2019 `maximum` of the window's input elements in row-major
//! window order (padded positions are skipped, so they never win). `MaxPool2dGrad` gives
//! each input element the sum of `dy` over the windows (row-major) whose maximum it equals,
//! accumulated in the accumulation type from zero and rounded once.

use super::real::{Cx, Real};
use crate::numerics::kernels::amp::MatMulShape;
use crate::numerics::{ArithOp, NumericsError};
use ipusim_ir::conv::ConvGeometry;

/// `Conv2d` of `x[N, C, H, W]` with `w[O, C/g, KH, KW]`.
pub(crate) fn conv2d<E: Real>(
    x: &[E],
    w: &[E],
    g: &ConvGeometry,
    cx: &mut Cx,
) -> Result<Vec<E>, NumericsError> {
    let (cg, og) = (g.c_per_group(), g.o_per_group());
    let (positions, k) = (g.oh * g.ow, g.kh * g.kw * cg);
    let mut y = vec![E::ZERO; g.n * g.o * positions];
    for gi in 0..g.groups {
        // The weight as [KH·KW·C/g, O/g].
        let mut b = Vec::with_capacity(k * og);
        for kh in 0..g.kh {
            for kw in 0..g.kw {
                for ic in 0..cg {
                    b.extend(
                        (0..og).map(|oc| w[(((gi * og + oc) * cg + ic) * g.kh + kh) * g.kw + kw]),
                    );
                }
            }
        }
        for n in 0..g.n {
            let mut a = Vec::with_capacity(positions * k);
            for oh in 0..g.oh {
                for ow in 0..g.ow {
                    for kh in 0..g.kh {
                        for kw in 0..g.kw {
                            let at = g.input_row(oh, kh).zip(g.input_col(ow, kw));
                            a.extend((0..cg).map(|ic| match at {
                                Some((r, c)) => x[((n * g.c + gi * cg + ic) * g.h + r) * g.w + c],
                                None => E::ZERO,
                            }));
                        }
                    }
                }
            }
            let shape = MatMulShape {
                m: positions,
                k,
                n: og,
            };
            let c = E::matmul(shape, &a, &b, cx)?;
            for p in 0..positions {
                for oc in 0..og {
                    y[(n * g.o + gi * og + oc) * positions + p] = c[p * og + oc];
                }
            }
        }
    }
    Ok(y)
}

/// `Conv2dInputGrad` of `dy[N, O, OH, OW]` with `w[O, C/g, KH, KW]`: `dx[N, C, H, W]`.
pub(crate) fn conv2d_input_grad<E: Real>(
    dy: &[E],
    w: &[E],
    g: &ConvGeometry,
    cx: &mut Cx,
) -> Result<Vec<E>, NumericsError> {
    let (cg, og) = (g.c_per_group(), g.o_per_group());
    let (pixels, k) = (g.h * g.w, g.kh * g.kw * og);
    // The output position that reads input index `i` at kernel index `kk` along one axis.
    let source = |i: usize, kk: usize, axis: usize, size: usize| -> Option<usize> {
        let p = (i + g.padding[axis]).checked_sub(kk * g.dilation[axis])?;
        (p % g.stride[axis] == 0 && p / g.stride[axis] < size).then_some(p / g.stride[axis])
    };
    let mut dx = vec![E::ZERO; g.n * g.c * pixels];
    for gi in 0..g.groups {
        let mut b = Vec::with_capacity(k * cg);
        for kh in 0..g.kh {
            for kw in 0..g.kw {
                for oc in 0..og {
                    b.extend(
                        (0..cg).map(|ic| w[(((gi * og + oc) * cg + ic) * g.kh + kh) * g.kw + kw]),
                    );
                }
            }
        }
        for n in 0..g.n {
            let mut a = Vec::with_capacity(pixels * k);
            for h in 0..g.h {
                for wc in 0..g.w {
                    for kh in 0..g.kh {
                        for kw in 0..g.kw {
                            let at = source(h, kh, 0, g.oh).zip(source(wc, kw, 1, g.ow));
                            a.extend((0..og).map(|oc| match at {
                                Some((r, c)) => {
                                    dy[((n * g.o + gi * og + oc) * g.oh + r) * g.ow + c]
                                }
                                None => E::ZERO,
                            }));
                        }
                    }
                }
            }
            let shape = MatMulShape {
                m: pixels,
                k,
                n: cg,
            };
            let c = E::matmul(shape, &a, &b, cx)?;
            for p in 0..pixels {
                for ic in 0..cg {
                    dx[(n * g.c + gi * cg + ic) * pixels + p] = c[p * cg + ic];
                }
            }
        }
    }
    Ok(dx)
}

/// `Conv2dWeightGrad` of `x[N, C, H, W]` and `dy[N, O, OH, OW]`: `dw[O, C/g, KH, KW]`.
pub(crate) fn conv2d_weight_grad<E: Real>(
    x: &[E],
    dy: &[E],
    g: &ConvGeometry,
    cx: &mut Cx,
) -> Result<Vec<E>, NumericsError> {
    let (cg, og) = (g.c_per_group(), g.o_per_group());
    let positions = g.oh * g.ow;
    let k = g.n * positions;
    let cols = cg * g.kh * g.kw;
    let mut dw = Vec::with_capacity(g.o * cols);
    for gi in 0..g.groups {
        let mut a = Vec::with_capacity(og * k);
        for oc in 0..og {
            for n in 0..g.n {
                let base = (n * g.o + gi * og + oc) * positions;
                a.extend_from_slice(&dy[base..base + positions]);
            }
        }
        let mut b = Vec::with_capacity(k * cols);
        for n in 0..g.n {
            for oh in 0..g.oh {
                for ow in 0..g.ow {
                    for ic in 0..cg {
                        for kh in 0..g.kh {
                            for kw in 0..g.kw {
                                b.push(match g.input_row(oh, kh).zip(g.input_col(ow, kw)) {
                                    Some((r, c)) => {
                                        x[((n * g.c + gi * cg + ic) * g.h + r) * g.w + c]
                                    }
                                    None => E::ZERO,
                                });
                            }
                        }
                    }
                }
            }
        }
        let shape = MatMulShape { m: og, k, n: cols };
        dw.extend(E::matmul(shape, &a, &b, cx)?);
    }
    Ok(dw)
}

/// The window maxima of `x[N, C, H, W]` (a pooling geometry: one channel per group).
pub(crate) fn max_pool<E: Real>(x: &[E], g: &ConvGeometry, cx: &mut Cx) -> Vec<E> {
    let mut y = Vec::with_capacity(g.n * g.c * g.oh * g.ow);
    for plane in 0..g.n * g.c {
        let xp = &x[plane * g.h * g.w..(plane + 1) * g.h * g.w];
        for oh in 0..g.oh {
            for ow in 0..g.ow {
                let mut m: Option<E> = None;
                for kh in 0..g.kh {
                    for kw in 0..g.kw {
                        if let Some((r, c)) = g.input_row(oh, kh).zip(g.input_col(ow, kw)) {
                            let v = xp[r * g.w + c];
                            m = Some(match m {
                                None => v,
                                Some(m) => E::binary(ArithOp::Max, m, v, cx),
                            });
                        }
                    }
                }
                y.push(m.unwrap_or_else(|| E::round(f64::NEG_INFINITY, cx)));
            }
        }
    }
    y
}

/// The gradient of [`max_pool`]: `dy` of each window to every element equal to its maximum.
pub(crate) fn max_pool_grad<E: Real>(x: &[E], dy: &[E], g: &ConvGeometry, cx: &mut Cx) -> Vec<E> {
    let y = max_pool(x, g, cx);
    let pixels = g.h * g.w;
    let mut acc: Vec<E::Acc> = vec![<E::Acc as Real>::ZERO; g.n * g.c * pixels];
    for plane in 0..g.n * g.c {
        for oh in 0..g.oh {
            for ow in 0..g.ow {
                let o = (plane * g.oh + oh) * g.ow + ow;
                for kh in 0..g.kh {
                    for kw in 0..g.kw {
                        if let Some((r, c)) = g.input_row(oh, kh).zip(g.input_col(ow, kw)) {
                            let i = plane * pixels + r * g.w + c;
                            if x[i] == y[o] {
                                acc[i] = <E::Acc as Real>::binary(
                                    ArithOp::Add,
                                    acc[i],
                                    dy[o].widen(),
                                    cx,
                                );
                            }
                        }
                    }
                }
            }
        }
    }
    acc.into_iter().map(|a| E::narrow(a, cx)).collect()
}

//! The position-major 1×1 convolutions against the documented order computed element by
//! element in the test ([`super`]'s module docs; `numerics::kernels::amp`'s order), and
//! against the general path of the same vertex.

use super::super::conv_matrices::Taps;
use super::super::operands::{Operands, MAX_INPUTS};
use super::super::{window, Scratch, Worker};
use crate::engine::memory::Buf;
use crate::numerics::{FpCtl, SrRng};
use half::f16;
use ipusim_exe::codelets::{Codelet, ConvMethod, WindowGeometry, WindowParams, WindowPass};
use ipusim_exe::layout::Grouped;
use ipusim_ir::DType;

/// A kernel: `(kh, kw)`, stride, padding (top, left, bottom, right).
type Kernel = ((u32, u32), u32, [u32; 4]);

/// The 1×1, stride-1, unpadded kernel.
const ONE: Kernel = ((1, 1), 1, [0; 4]);

/// A block of a convolution with kernel `kernel` over `n` images of `h × w` (the input map
/// of `Forward`, the output of `InputGrad`): `red` channels of the reduction (grouped by
/// `in_group`) and `outs` output channels (grouped by `out_group`), the reduction chunked
/// by `chunk`; `Forward`'s weights in chunks of `weight_chunk` channels.
#[allow(clippy::too_many_arguments)]
fn block_with(
    pass: WindowPass,
    kernel: Kernel,
    (n, h, w): (u32, u32, u32),
    (red, outs): (u32, u32),
    (in_group, out_group): (u32, u32),
    chunk: u32,
    weight_chunk: u32,
) -> WindowParams {
    let ((kh, kw), stride, padding) = kernel;
    let (c, o) = match pass {
        WindowPass::InputGrad => (outs, red),
        _ => (red, outs),
    };
    let oh = (h + padding[0] + padding[2] - kh) / stride + 1;
    let ow = (w + padding[1] + padding[3] - kw) / stride + 1;
    // The rows and columns of the block's output, and of its operand 0.
    let (out_rc, in_rc) = match pass {
        WindowPass::InputGrad => ((h, w), (oh, ow)),
        _ => ((oh, ow), (h, w)),
    };
    WindowParams {
        geometry: WindowGeometry {
            n,
            c,
            h,
            w,
            o,
            kh,
            kw,
            stride: [stride; 2],
            padding,
            dilation: [1, 1],
            groups: 1,
            oh,
            ow,
        },
        group: 0,
        batch: (0, n),
        out_channels: (0, outs),
        in_channels: (0, red),
        out_rows: (0, out_rc.0),
        in_rows: (0, in_rc.0),
        aux_rows: (0, 0),
        out_cols: (0, out_rc.1),
        in_cols: (0, in_rc.1),
        units: match pass {
            WindowPass::WeightGrad => (0, outs),
            _ => (0, n * outs),
        },
        input_channels: chunk,
        in_group,
        aux_group: if pass == WindowPass::WeightGrad {
            out_group
        } else {
            1
        },
        out_group: if pass == WindowPass::WeightGrad {
            1
        } else {
            out_group
        },
        weight_chunk,
    }
}

/// [`block_with`] a 1×1, stride-1, unpadded kernel.
fn block(
    pass: WindowPass,
    dims: (u32, u32, u32),
    channels: (u32, u32),
    groups: (u32, u32),
    chunk: u32,
    weight_chunk: u32,
) -> WindowParams {
    block_with(pass, ONE, dims, channels, groups, chunk, weight_chunk)
}

/// FP16 values whose products and sums round: random signs, exponents from 2⁻⁴ to 2³ and
/// full mantissas (a Weyl sequence, so the test needs no generator).
fn values(len: usize, seed: u32) -> Vec<f16> {
    (0..len as u32)
        .map(|i| {
            let r = i
                .wrapping_mul(0x9e37_79b9)
                .wrapping_add(seed.wrapping_mul(0x85eb_ca6b));
            let r = r ^ (r >> 15);
            let exp = 11 + (r >> 10) % 8;
            f16::from_bits((((r >> 20) & 1) << 15) as u16 | (exp << 10) as u16 | (r & 0x3ff) as u16)
        })
        .collect()
}

/// The documented order of one output element: for each chunk of the reduction, `s` from
/// its first product then fused multiply-adds, `P = P + s`, from `P = 0`.
fn ordered(terms: &[(f32, f32)], chunk: usize) -> f32 {
    let mut p = 0f32;
    for c in terms.chunks(chunk) {
        let mut s = c[0].0 * c[0].1;
        for &(a, b) in &c[1..] {
            s = a.mul_add(b, s);
        }
        p += s;
    }
    p
}

/// Runs the vertex of block `p` on `inputs` into an output of `out_len` f32, with the
/// exception enables of `ctl`.
fn run(
    pass: WindowPass,
    p: &WindowParams,
    inputs: [&[f16]; 2],
    out_len: usize,
    ctl: FpCtl,
) -> Vec<f32> {
    let codelet = Codelet::Conv {
        pass,
        input: DType::F16,
        partials: DType::F32,
        output: DType::F32,
        method: ConvMethod::Amp,
    };
    let mut out = vec![0u8; out_len * 4];
    let mut ins: [&[u8]; MAX_INPUTS] = [&[]; MAX_INPUTS];
    ins[0] = bytemuck::cast_slice(inputs[0]);
    ins[1] = bytemuck::cast_slice(inputs[1]);
    let mut in_lens = [0; MAX_INPUTS];
    in_lens[0] = inputs[0].len();
    in_lens[1] = inputs[1].len();
    let ops = Operands {
        inputs: ins,
        aliased: [false; MAX_INPUTS],
        in_dtypes: [DType::F16; MAX_INPUTS],
        in_lens,
        n_inputs: 2,
        output: &mut out,
        out_dtype: DType::F32,
    };
    let mut scratch = Scratch::default();
    let mut rng = SrRng::new(1, 0, 0);
    let worker = Worker { ctl, rng: &mut rng };
    let flags = window::run(&codelet, p, ops, &mut scratch, worker).expect("the vertex runs");
    assert!(flags.is_empty(), "{flags:?}");
    bytemuck::cast_slice(&out).to_vec()
}

fn wide(x: &[f16]) -> Vec<f32> {
    x.iter().map(|h| h.to_f32()).collect()
}

/// Every output element of each pass equals the documented order's, computed here from the
/// grouped layout's definition (`ipusim_exe::layout::Grouped`) and the textbook taps, and
/// the general path's (the same vertex with exceptions enabled, which the position-major
/// path leaves to it): reductions of 12 to 40 channels in chunks of 8 and 16, 8 to 40
/// output channels, groups of 4, 8 and 16, planes of 15 and 24 positions over two images, weights in
/// chunks; 1×1 kernels in every pass, and for `Forward` and `InputGrad` 3×3 kernels with
/// padding at strides 1 and 2, a 1×1 kernel at stride 2 and a 3×1 kernel padded along the
/// height only.
#[test]
fn position_major_outputs_follow_the_documented_order() {
    let traps = FpCtl::INV | FpCtl::OFLO;
    let cases = [
        ((2, 3, 5), (16, 8), (8, 8), 16, 0),
        ((2, 3, 5), (24, 40), (8, 8), 8, 0),
        ((1, 4, 6), (32, 16), (16, 8), 16, 0),
        ((2, 4, 6), (40, 24), (8, 8), 16, 8),
        ((1, 3, 5), (32, 24), (8, 8), 16, 16),
        ((1, 3, 5), (12, 8), (4, 8), 16, 0),
    ];
    let kernels: [Kernel; 5] = [
        ONE,
        ((3, 3), 1, [1; 4]),
        ((3, 3), 2, [1; 4]),
        ((1, 1), 2, [0; 4]),
        ((3, 1), 1, [1, 0, 1, 0]),
    ];
    for (dims, (red, outs), groups, chunk, weight_chunk) in cases {
        for (pass, kernel) in [WindowPass::Forward, WindowPass::InputGrad]
            .into_iter()
            .flat_map(|pass| kernels.map(|k| (pass, k)))
            .chain([(WindowPass::WeightGrad, ONE)])
        {
            let wc = if pass == WindowPass::Forward {
                weight_chunk
            } else {
                0
            };
            let p = block_with(pass, kernel, dims, (red, outs), groups, chunk, wc);
            let case = format!(
                "{pass:?} {kernel:?} {dims:?} red {red} outs {outs} {groups:?} chunk {chunk} wc {wc}"
            );
            let (want, out_len) = documented(pass, &p, groups, chunk as usize);
            let (map, second) = operands(pass, &p);
            let fast = run(pass, &p, [&map, &second], out_len, FpCtl::empty());
            let general = run(pass, &p, [&map, &second], out_len, traps);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fast), bits(&want), "{case}");
            assert_eq!(bits(&general), bits(&want), "{case}");
        }
    }
}

fn len(r: (u32, u32)) -> usize {
    (r.1 - r.0) as usize
}

/// The vertex's operands: its feature map of the reduction's channels (`x`; `dy`), grouped,
/// and its weights (`WeightGrad`: `dy`, grouped).
fn operands(pass: WindowPass, p: &WindowParams) -> (Vec<f16>, Vec<f16>) {
    let g = &p.geometry;
    let nb = p.batch_count() as usize;
    let (red, outs) = (len(p.in_channels), p.out_channel_count() as usize);
    let map = values(nb * red * len(p.in_rows) * len(p.in_cols), 1);
    let second = match pass {
        WindowPass::WeightGrad => values(nb * outs * len(p.out_rows) * len(p.out_cols), 2),
        _ => values(red * outs * (g.kh * g.kw) as usize, 2),
    };
    (map, second)
}

/// The output block of the vertex of block `p` by the documented order, element by element
/// (a tap on padding contributes its weight times zero, as the reduction order has it), and
/// its length.
fn documented(
    pass: WindowPass,
    p: &WindowParams,
    (in_group, out_group): (u32, u32),
    chunk: usize,
) -> (Vec<f32>, usize) {
    let g = &p.geometry;
    let nb = p.batch_count() as usize;
    let (red, outs) = (len(p.in_channels), p.out_channel_count() as usize);
    let (in_w, out_w) = (len(p.in_cols), len(p.out_cols));
    let (in_plane, plane) = (len(p.in_rows) * in_w, len(p.out_rows) * out_w);
    let (map, second) = operands(pass, p);
    let (mw, sw) = (wide(&map), wide(&second));
    let grouped = |group: u32, channels: usize, spatial: usize| Grouped {
        batch: nb as u64,
        channels: channels as u64,
        spatial: spatial as u64,
        group: u64::from(group),
    };
    let map_at = |i: usize, c: usize, s: usize| {
        grouped(in_group, red, in_plane).index(i as u64, c as u64, s as u64) as usize
    };
    if pass == WindowPass::WeightGrad {
        // out[o][c] = Σ over (image, position) of dy[o] · x[c].
        let mut want = vec![0f32; outs * red];
        let dy = grouped(out_group, outs, plane);
        for o in 0..outs {
            for c in 0..red {
                let terms: Vec<(f32, f32)> = (0..nb)
                    .flat_map(|i| (0..plane).map(move |s| (i, s)))
                    .map(|(i, s)| {
                        let at = dy.index(i as u64, o as u64, s as u64) as usize;
                        (sw[at], mw[map_at(i, c, s)])
                    })
                    .collect();
                want[o * red + c] = ordered(&terms, chunk);
            }
        }
        return (want, outs * red);
    }
    let (kh, kw) = (g.kh as usize, g.kw as usize);
    let (s, pt, pl) = (
        g.stride[0] as usize,
        g.padding[0] as usize,
        g.padding[1] as usize,
    );
    // The operand-0 position tap `(a, b)` reads for output position `(r, q)`.
    let tap = |r: usize, q: usize, a: usize, b: usize| -> Option<usize> {
        let (row, col) = match pass {
            WindowPass::Forward => (
                (r * s + a)
                    .checked_sub(pt)
                    .filter(|&x| x < len(p.in_rows))?,
                (q * s + b).checked_sub(pl).filter(|&x| x < in_w)?,
            ),
            _ => {
                let (y, x) = ((r + pt).checked_sub(a)?, (q + pl).checked_sub(b)?);
                if y % s != 0 || x % s != 0 || y / s >= len(p.in_rows) || x / s >= in_w {
                    return None;
                }
                (y / s, x / s)
            }
        };
        Some(row * in_w + col)
    };
    let out = grouped(out_group, outs, plane);
    let mut want = vec![0f32; nb * outs * plane];
    for i in 0..nb {
        for o in 0..outs {
            for (r, q) in (0..len(p.out_rows)).flat_map(|r| (0..out_w).map(move |q| (r, q))) {
                let mut terms = Vec::new();
                for (a, b) in (0..kh).flat_map(|a| (0..kw).map(move |b| (a, b))) {
                    for c in 0..red {
                        let weight = match pass {
                            WindowPass::Forward => p.forward_weight_at(o, c) + a * kw + b,
                            _ => (c * outs + o) * kh * kw + a * kw + b,
                        };
                        let x = tap(r, q, a, b).map_or(0.0, |at| mw[map_at(i, c, at)]);
                        terms.push((sw[weight], x));
                    }
                }
                let at = out.index(i as u64, o as u64, (r * out_w + q) as u64) as usize;
                want[at] = ordered(&terms, chunk);
            }
        }
    }
    (want, nb * outs * plane)
}

/// A block with a non-finite operand is declined, writing nothing: the general path gives
/// its values and flags.
#[test]
fn non_finite_operands_go_the_general_way() {
    let p = block(WindowPass::Forward, (1, 2, 4), (16, 8), (8, 8), 16, 0);
    let mut map = values(16 * 8, 3);
    map[5] = f16::INFINITY;
    let weights = values(16 * 8, 4);
    let mut out = vec![0u8; 8 * 8 * 4];
    let mut bufs: [Buf; 4] = Default::default();
    let [b0, b1, b2, b3] = &mut bufs;
    let mut taps = Taps::default();
    taps.fill(WindowPass::Forward, &p);
    let declined = super::product(
        WindowPass::Forward,
        &p,
        &taps,
        (bytemuck::cast_slice(&map), bytemuck::cast_slice(&weights)),
        &mut out,
        16,
        (b0, b1, b2, b3),
    );
    assert!(matches!(declined, Ok(None)));
    assert!(out.iter().all(|&b| b == 0));
}

/// A vertex with a part of the block's units (starting and ending inside channel groups,
/// over two images) writes exactly those units' elements, the full block's values there.
#[test]
fn a_vertex_writes_only_its_units() {
    for pass in [WindowPass::Forward, WindowPass::InputGrad] {
        let whole = block(pass, (2, 3, 5), (16, 24), (8, 8), 16, 0);
        let map = values(2 * 16 * 15, 5);
        let weights = values(16 * 24, 6);
        let len = 2 * 24 * 15;
        let full = run(pass, &whole, [&map, &weights], len, FpCtl::empty());
        let part = WindowParams {
            units: (13, 30),
            ..whole.clone()
        };
        let got = run(pass, &part, [&map, &weights], len, FpCtl::empty());
        let layout = Grouped {
            batch: 2,
            channels: 24,
            spatial: 15,
            group: 8,
        };
        for u in 0..48u32 {
            let (n, o) = (u64::from(u / 24), u64::from(u % 24));
            for s in 0..15 {
                let at = layout.index(n, o, s) as usize;
                let want = if (13..30).contains(&u) { full[at] } else { 0.0 };
                assert_eq!(
                    got[at].to_bits(),
                    want.to_bits(),
                    "{pass:?} unit {u} position {s}"
                );
            }
        }
    }
}

/// A weight-gradient vertex with a part of the block's output channels writes exactly their
/// rows, the full block's values there.
#[test]
fn a_weight_gradient_vertex_writes_only_its_channels() {
    let pass = WindowPass::WeightGrad;
    let whole = block(pass, (2, 3, 5), (16, 24), (8, 8), 16, 0);
    let (x, dy) = operands(pass, &whole);
    let len = 24 * 16;
    let full = run(pass, &whole, [&x, &dy], len, FpCtl::empty());
    let part = WindowParams {
        units: (5, 19),
        ..whole.clone()
    };
    let got = run(pass, &part, [&x, &dy], len, FpCtl::empty());
    for (i, (g, f)) in got.iter().zip(&full).enumerate() {
        let want = if (5 * 16..19 * 16).contains(&i) {
            *f
        } else {
            0.0
        };
        assert_eq!(g.to_bits(), want.to_bits(), "element {i}");
    }
}

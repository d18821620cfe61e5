//! The position-major 1×1 convolutions against the documented order computed element by
//! element in the test ([`super`]'s module docs; `numerics::kernels::amp`'s order), and
//! against the general path of the same vertex.

use super::super::operands::{Operands, MAX_INPUTS};
use super::super::{window, Scratch, Worker};
use crate::numerics::{FpCtl, SrRng};
use half::f16;
use ipusim_exe::codelets::{Codelet, ConvMethod, WindowGeometry, WindowParams, WindowPass};
use ipusim_exe::layout::Grouped;
use ipusim_ir::DType;

/// A block of a 1×1 convolution over `n` images of `h × w`: `red` channels of the reduction
/// (grouped by `in_group`) and `outs` output channels (grouped by `out_group`), the
/// reduction chunked by `chunk`; `Forward`'s weights in chunks of `weight_chunk` channels.
#[allow(clippy::too_many_arguments)]
fn block(
    pass: WindowPass,
    (n, h, w): (u32, u32, u32),
    (red, outs): (u32, u32),
    (in_group, out_group): (u32, u32),
    chunk: u32,
    weight_chunk: u32,
) -> WindowParams {
    let (c, o) = match pass {
        WindowPass::InputGrad => (outs, red),
        _ => (red, outs),
    };
    WindowParams {
        geometry: WindowGeometry {
            n,
            c,
            h,
            w,
            o,
            kh: 1,
            kw: 1,
            stride: [1, 1],
            padding: [0; 4],
            dilation: [1, 1],
            groups: 1,
            oh: h,
            ow: w,
        },
        group: 0,
        batch: (0, n),
        out_channels: (0, outs),
        in_channels: (0, red),
        out_rows: (0, h),
        in_rows: (0, h),
        aux_rows: (0, 0),
        out_cols: (0, w),
        in_cols: (0, w),
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
/// grouped layout's definition (`ipusim_exe::layout::Grouped`), and the general path's (the
/// same vertex with exceptions enabled, which the position-major path leaves to it):
/// reductions of 16 to 40 channels in chunks of 8 and 16, 8 to 40 output channels, groups
/// of 8 and 16, planes of 15 and 24 positions over two images, weights in chunks.
#[test]
fn position_major_outputs_follow_the_documented_order() {
    let traps = FpCtl::INV | FpCtl::OFLO;
    let cases = [
        ((2, 3, 5), (16, 8), (8, 8), 16, 0),
        ((2, 3, 5), (24, 40), (8, 8), 8, 0),
        ((1, 4, 6), (32, 16), (16, 8), 16, 0),
        ((2, 4, 6), (40, 24), (8, 8), 16, 8),
        ((1, 3, 5), (32, 24), (8, 8), 16, 16),
    ];
    for (dims, (red, outs), groups, chunk, weight_chunk) in cases {
        let (n, h, w) = dims;
        let plane = (h * w) as usize;
        let (nb, red_u, outs_u) = (n as usize, red as usize, outs as usize);
        for pass in [
            WindowPass::Forward,
            WindowPass::InputGrad,
            WindowPass::WeightGrad,
        ] {
            let wc = if pass == WindowPass::Forward {
                weight_chunk
            } else {
                0
            };
            let p = block(pass, dims, (red, outs), groups, chunk, wc);
            let case =
                format!("{pass:?} {dims:?} red {red} outs {outs} {groups:?} chunk {chunk} wc {wc}");
            let grouped = |g: u32, channels: usize| Grouped {
                batch: nb as u64,
                channels: channels as u64,
                spatial: plane as u64,
                group: u64::from(g),
            };
            // Operand 0: the feature map of the reduction's channels (x; dy), grouped.
            let map = values(nb * red_u * plane, 1);
            let map_at = |i: usize, c: usize, s: usize| {
                grouped(groups.0, red_u).index(i as u64, c as u64, s as u64) as usize
            };
            let (second, out_len) = match pass {
                WindowPass::WeightGrad => (values(nb * outs_u * plane, 2), outs_u * red_u),
                _ => (values(red_u * outs_u, 2), nb * outs_u * plane),
            };
            let (mw, sw) = (wide(&map), wide(&second));
            let mut want = vec![0f32; out_len];
            match pass {
                WindowPass::WeightGrad => {
                    // out[o][c] = Σ over (image, position) of dy[o] · x[c].
                    let dy_at = |i: usize, o: usize, s: usize| {
                        grouped(groups.1, outs_u).index(i as u64, o as u64, s as u64) as usize
                    };
                    for o in 0..outs_u {
                        for c in 0..red_u {
                            let terms: Vec<(f32, f32)> = (0..nb)
                                .flat_map(|i| (0..plane).map(move |s| (i, s)))
                                .map(|(i, s)| (sw[dy_at(i, o, s)], mw[map_at(i, c, s)]))
                                .collect();
                            want[o * red_u + c] = ordered(&terms, chunk as usize);
                        }
                    }
                }
                _ => {
                    for i in 0..nb {
                        for o in 0..outs_u {
                            for s in 0..plane {
                                let terms: Vec<(f32, f32)> = (0..red_u)
                                    .map(|c| {
                                        let weight = match pass {
                                            WindowPass::Forward => p.forward_weight_at(o, c),
                                            _ => c * outs_u + o,
                                        };
                                        (sw[weight], mw[map_at(i, c, s)])
                                    })
                                    .collect();
                                let at =
                                    grouped(groups.1, outs_u).index(i as u64, o as u64, s as u64);
                                want[at as usize] = ordered(&terms, chunk as usize);
                            }
                        }
                    }
                }
            }
            let fast = run(pass, &p, [&map, &second], out_len, FpCtl::empty());
            let general = run(pass, &p, [&map, &second], out_len, traps);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fast), bits(&want), "{case}");
            assert_eq!(bits(&general), bits(&want), "{case}");
        }
    }
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
    let mut bufs = (Default::default(), Default::default(), Default::default());
    let declined = super::product(
        WindowPass::Forward,
        &p,
        (bytemuck::cast_slice(&map), bytemuck::cast_slice(&weights)),
        &mut out,
        16,
        (&mut bufs.0, &mut bufs.1, &mut bufs.2),
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

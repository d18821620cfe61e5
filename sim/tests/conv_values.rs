//! The interpreter's convolution and pooling values against independent direct loops.
//!
//! Inputs are small integers, so every product and partial sum is an integer well below
//! 2^24 and every summation order gives the same exact value: the convolution (evaluated as
//! im2col products through the AMP kernel, in FP32 and in exact mode) must equal the textbook
//! definition `y[n, o, i, j] = Σ_{c, p, q} x[n, g·C/g + c, i·s − pad + p·d, …] · w[o, c, p, q]`
//! element for element.

use ipusim_ir::{DType, GraphBuilder, Init, Op, Shape};
use ipusim_sim::interp::{Interpreter, Streams};
use ipusim_sim::numerics::FpConfig;
use ipusim_sim::tensor::Tensor;
use rand_core::{RngCore, SeedableRng};
use rand_pcg::Pcg32;

struct Geometry {
    x: [usize; 4],
    w: [usize; 4],
    stride: [usize; 2],
    padding: [usize; 4],
    dilation: [usize; 2],
    groups: usize,
}

fn small_ints(rng: &mut Pcg32, n: usize) -> Vec<f32> {
    (0..n).map(|_| (rng.next_u32() % 9) as f32 - 4.0).collect()
}

/// The textbook convolution.
fn direct(g: &Geometry, x: &[f32], w: &[f32]) -> (Vec<usize>, Vec<f64>) {
    let [n, c, h, wd] = g.x;
    let [o, cg, kh, kw] = g.w;
    let og = o / g.groups;
    let oh = (h + g.padding[0] + g.padding[2] - g.dilation[0] * (kh - 1) - 1) / g.stride[0] + 1;
    let ow = (wd + g.padding[1] + g.padding[3] - g.dilation[1] * (kw - 1) - 1) / g.stride[1] + 1;
    let mut y = Vec::new();
    for b in 0..n {
        for oc in 0..o {
            let grp = oc / og;
            for i in 0..oh {
                for j in 0..ow {
                    let mut s = 0.0f64;
                    for ic in 0..cg {
                        for p in 0..kh {
                            for q in 0..kw {
                                let r = (i * g.stride[0] + p * g.dilation[0]) as isize
                                    - g.padding[0] as isize;
                                let col = (j * g.stride[1] + q * g.dilation[1]) as isize
                                    - g.padding[1] as isize;
                                if r < 0 || col < 0 || r >= h as isize || col >= wd as isize {
                                    continue;
                                }
                                let xi =
                                    ((b * c + grp * cg + ic) * h + r as usize) * wd + col as usize;
                                let wi = ((oc * cg + ic) * kh + p) * kw + q;
                                s += f64::from(x[xi]) * f64::from(w[wi]);
                            }
                        }
                    }
                    y.push(s);
                }
            }
        }
    }
    (vec![n, o, oh, ow], y)
}

/// A graph of `op` (named `y`) over F32 variables `x0, x1, ...` of the inputs' shapes.
fn one_op(op: Op, inputs: &[(&[usize], &[f32])]) -> (GraphBuilder, ipusim_ir::NodeId) {
    let mut b = GraphBuilder::new();
    let ids: Vec<_> = inputs
        .iter()
        .enumerate()
        .map(|(i, (s, _))| {
            b.variable(&format!("x{i}"), DType::F32, s.to_vec(), Init::Zeros)
                .unwrap()
        })
        .collect();
    let y = b.named("y", op, &ids).unwrap();
    (b, y)
}

fn run(op: Op, inputs: &[(&[usize], &[f32])], exact: bool) -> (Vec<usize>, Vec<f64>) {
    let (b, y) = one_op(op, inputs);
    let g = b.finish();
    let mut it = if exact {
        Interpreter::new_exact(&g, 0).unwrap()
    } else {
        Interpreter::new(&g, FpConfig::default(), 0).unwrap()
    };
    for (i, (s, v)) in inputs.iter().enumerate() {
        let t = Tensor::f32(Shape::new(s.to_vec()), v.to_vec()).unwrap();
        it.set_variable(&format!("x{i}"), t).unwrap();
    }
    it.micro_batch(&Streams::new()).unwrap();
    let v = it.value_of(y).unwrap();
    (v.shape().dims().to_vec(), v.to_f64_vec())
}

#[test]
fn convolutions_equal_the_textbook_definition() {
    let cases = [
        Geometry {
            x: [2, 3, 6, 5],
            w: [4, 3, 3, 3],
            stride: [1, 1],
            padding: [1, 1, 1, 1],
            dilation: [1, 1],
            groups: 1,
        },
        Geometry {
            x: [1, 3, 11, 11],
            w: [8, 3, 7, 7],
            stride: [2, 2],
            padding: [3, 3, 3, 3],
            dilation: [1, 1],
            groups: 1,
        },
        Geometry {
            x: [1, 20, 5, 5],
            w: [17, 20, 1, 1],
            stride: [2, 2],
            padding: [0, 0, 0, 0],
            dilation: [1, 1],
            groups: 1,
        },
        Geometry {
            x: [2, 6, 7, 6],
            w: [9, 2, 3, 2],
            stride: [2, 1],
            padding: [2, 0, 1, 1],
            dilation: [2, 1],
            groups: 3,
        },
        Geometry {
            x: [1, 4, 5, 5],
            w: [4, 1, 3, 3],
            stride: [1, 1],
            padding: [1, 1, 1, 1],
            dilation: [1, 1],
            groups: 4,
        },
    ];
    let mut rng = Pcg32::seed_from_u64(7);
    for g in &cases {
        let x = small_ints(&mut rng, g.x.iter().product());
        let w = small_ints(&mut rng, g.w.iter().product());
        let op = Op::Conv2d {
            stride: g.stride.to_vec(),
            padding: g.padding.to_vec(),
            dilation: g.dilation.to_vec(),
            groups: g.groups,
        };
        let expected = direct(g, &x, &w);
        for exact in [true, false] {
            let got = run(op.clone(), &[(&g.x, &x), (&g.w, &w)], exact);
            assert_eq!(got, expected, "x {:?} w {:?} exact {exact}", g.x, g.w);
        }
    }
}

#[test]
fn max_pool_takes_the_window_maximum_and_skips_padding() {
    let mut rng = Pcg32::seed_from_u64(9);
    let dims = [2usize, 3, 7, 6];
    let x: Vec<f32> = small_ints(&mut rng, dims.iter().product())
        .into_iter()
        .map(|v| v - 10.0) // all negative: a padded zero would win if padding took part
        .collect();
    let op = Op::MaxPool2d {
        kernel: vec![3, 3],
        stride: vec![2, 2],
        padding: vec![1, 1, 1, 1],
    };
    let (shape, y) = run(op, &[(&dims, &x)], false);
    assert_eq!(shape, [2, 3, 4, 3]);
    let mut k = 0;
    for plane in 0..6 {
        for i in 0..4isize {
            for j in 0..3isize {
                let mut m = f64::NEG_INFINITY;
                for p in 0..3isize {
                    for q in 0..3isize {
                        let (r, c) = (2 * i - 1 + p, 2 * j - 1 + q);
                        if (0..7).contains(&r) && (0..6).contains(&c) {
                            m = m.max(f64::from(x[plane * 42 + (r * 6 + c) as usize]));
                        }
                    }
                }
                assert_eq!(y[k], m, "plane {plane} ({i}, {j})");
                k += 1;
            }
        }
    }
}

/// A 3x3 convolution (stride 1, padding 1) of `x` into `o` output channels with small
/// integer operands: its geometry, operands, op and textbook values.
fn padded_3x3(
    rng: &mut Pcg32,
    x: [usize; 4],
    o: usize,
) -> (Geometry, Vec<f32>, Vec<f32>, Op, Vec<f64>) {
    let g = Geometry {
        x,
        w: [o, x[1], 3, 3],
        stride: [1, 1],
        padding: [1, 1, 1, 1],
        dilation: [1, 1],
        groups: 1,
    };
    let xs = small_ints(rng, g.x.iter().product());
    let w = small_ints(rng, g.w.iter().product());
    let op = Op::Conv2d {
        stride: vec![],
        padding: g.padding.to_vec(),
        dilation: vec![],
        groups: 1,
    };
    let (_, expected) = direct(&g, &xs, &w);
    (g, xs, w, op, expected)
}

/// Compiles `op` over variables of `inputs` for an Mk2 of `tiles` tiles, runs it on the
/// engine and returns its value and the reduction splits of its convolution rows.
fn run_on_engine(op: Op, inputs: &[(&[usize], &[f32])], tiles: u32) -> (Vec<f64>, Vec<u32>) {
    let (values, rows) = run_on_engine_with(op, inputs, tiles, None);
    (values, rows.iter().map(|c| c.reduction_split).collect())
}

/// [`run_on_engine`] with the op's memory proportion if given: its value and its
/// convolution rows, the engine's executed cycles checked against the static estimate.
fn run_on_engine_with(
    op: Op,
    inputs: &[(&[usize], &[f32])],
    tiles: u32,
    proportion: Option<f64>,
) -> (Vec<f64>, Vec<ipusim_compiler::conv_report::ConvLayerReport>) {
    let (values, rows, _) = engine_run(op, inputs, tiles, proportion);
    (values, rows)
}

/// [`run_on_engine_with`], and the flags the engine raised.
fn engine_run(
    op: Op,
    inputs: &[(&[usize], &[f32])],
    tiles: u32,
    proportion: Option<f64>,
) -> (
    Vec<f64>,
    Vec<ipusim_compiler::conv_report::ConvLayerReport>,
    ipusim_sim::numerics::FpSts,
) {
    use ipusim_compiler::{compile, CompileOptions, CompileReport, Target};
    use ipusim_sim::host::QueueHost;
    use ipusim_sim::Engine;
    let (mut b, y) = one_op(op, inputs);
    b.outfeed("y", y).unwrap();
    let g = b.finish();
    let mut target = Target::mk2();
    target.tiles = tiles;
    let mut options = CompileOptions::default();
    if let Some(p) = proportion {
        options.memory_proportions.insert("y".into(), p);
    }
    let exe = compile(&g, &target, &options).unwrap();
    let report = CompileReport::new("split", None, &exe);
    let splits = report.convolutions.clone();
    let estimate = exe.estimate.total_cycles;
    let mut engine = Engine::new(std::sync::Arc::new(exe), Default::default()).unwrap();
    for (i, (s, v)) in inputs.iter().enumerate() {
        let t = Tensor::f32(Shape::new(s.to_vec()), v.to_vec()).unwrap();
        engine.write_variable(&format!("x{i}"), &t).unwrap();
    }
    let mut host = QueueHost::new();
    engine.run(&mut host).unwrap();
    assert_eq!(
        engine.cycle(),
        estimate,
        "executed cycles against the static estimate"
    );
    let bytes = &host.outfeeds["y"][0];
    let values = bytes
        .chunks(4)
        .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        .collect();
    (values, splits, engine.flags())
}

/// The compiled forward and input-gradient passes whose reduction (input channels; output
/// channels) the planner splits over tiles — partials summed across tiles afterwards — give
/// the textbook values exactly (small integers: every order of summation is exact).
#[test]
fn split_reductions_on_the_engine_equal_the_textbook_definition() {
    let mut rng = Pcg32::seed_from_u64(11);
    // Forward: 96 input channels into 2 outputs of 2x2.
    let (g, x, w, op, expected) = padded_3x3(&mut rng, [1, 96, 2, 2], 2);
    let (got, splits) = run_on_engine(op, &[(&g.x, &x), (&g.w, &w)], 64);
    assert!(
        splits[0] > 1,
        "the forward reduction was not split: {splits:?}"
    );
    assert_eq!(got, expected);
    // Input gradient of a 1x1 convolution from 2 to 96 channels: dx[c] = Σ_o w[o, c] dy[o].
    let (n, c, o, hw) = (1usize, 2usize, 96usize, 4usize);
    let dy = small_ints(&mut rng, n * o * hw);
    let w = small_ints(&mut rng, o * c);
    let mut expected = vec![0.0f64; n * c * hw];
    for ci in 0..c {
        for p in 0..hw {
            expected[ci * hw + p] = (0..o)
                .map(|oi| f64::from(w[oi * c + ci]) * f64::from(dy[oi * hw + p]))
                .sum();
        }
    }
    let op = Op::Conv2dInputGrad {
        stride: vec![],
        padding: vec![],
        dilation: vec![],
        groups: 1,
        input_size: vec![2, 2],
    };
    let (got, splits) = run_on_engine(op, &[(&[n, o, 2, 2], &dy), (&[o, c, 1, 1], &w)], 64);
    assert!(
        splits[0] > 1,
        "the input-gradient reduction was not split: {splits:?}"
    );
    assert_eq!(got, expected);
}

/// A convolution given too little memory for any parallel split runs in serial phases over
/// its output channels (PopLibs' `outChanSplit.serial`): the forward pass and the weight
/// gradient so planned give the textbook values exactly (small integers) and run the
/// cycles the compiler estimated.
#[test]
fn serial_splits_on_the_engine_equal_the_textbook_definition() {
    let mut rng = Pcg32::seed_from_u64(12);
    // Forward: 32 input channels into 64 outputs of 3x3 (3x3 kernel, padding 1) on 16
    // tiles, with 0.2% of a tile (1,277 bytes) for the op.
    let (g, x, w, op, expected) = padded_3x3(&mut rng, [1, 32, 3, 3], 64);
    let inputs: [(&[usize], &[f32]); 2] = [(&g.x, &x), (&g.w, &w)];
    let (got, rows) = run_on_engine_with(op.clone(), &inputs, 16, Some(0.002));
    assert!(rows[0].serial_split > 1, "{rows:?}");
    assert_eq!(got, expected);
    // With the default proportion the same pass is one phase.
    let (got, rows) = run_on_engine_with(op, &inputs, 16, None);
    assert_eq!(rows[0].serial_split, 1, "{rows:?}");
    assert_eq!(got, expected);
    // Weight gradient of the same convolution: dw[o, c, p, q] = sum over the field of
    // dy[o, i, j] x[c, i + p - 1, j + q - 1].
    let dy = small_ints(&mut rng, 64 * 9);
    let mut expected = Vec::with_capacity(64 * 32 * 9);
    for o in 0..64 {
        for c in 0..32 {
            for p in 0..3i32 {
                for q in 0..3i32 {
                    let mut sum = 0.0f64;
                    for i in 0..3i32 {
                        for j in 0..3i32 {
                            let (r, col) = (i + p - 1, j + q - 1);
                            if (0..3).contains(&r) && (0..3).contains(&col) {
                                sum += f64::from(dy[o * 9 + (i * 3 + j) as usize])
                                    * f64::from(x[c * 9 + (r * 3 + col) as usize]);
                            }
                        }
                    }
                    expected.push(sum);
                }
            }
        }
    }
    let op = Op::Conv2dWeightGrad {
        stride: vec![],
        padding: g.padding.to_vec(),
        dilation: vec![],
        groups: 1,
        kernel_size: vec![3, 3],
    };
    let (got, rows) = run_on_engine_with(op, &[(&g.x, &x), (&[1, 64, 3, 3], &dy)], 16, Some(0.002));
    assert!(rows[0].serial_split > 1, "{rows:?}");
    assert_eq!(got, expected);
}

/// `y` of a stride-1 convolution of `x[1, C, H, W]` with `w[O, C, KH, KW]` (padding `pad`
/// on every side) accumulated as the AMP kernels do with FP16 partials: the reduction in
/// the order (kernel row, kernel column over `kwp` columns, the columns past `KW` being zero
/// weights, channel) is cut into passes of `pass` elements, each pass summed exactly (small
/// integers) and added to an FP16 partial rounded at every write.
fn f16_partials_order(
    (x, xd): (&[f32], [usize; 4]),
    (w, wd): (&[f32], [usize; 4]),
    pad: usize,
    kwp: usize,
    pass: usize,
) -> Vec<half::f16> {
    let ([_, c, h, wdt], [o, _, kh, kw]) = (xd, wd);
    let (oh, ow) = (h + 2 * pad + 1 - kh, wdt + 2 * pad + 1 - kw);
    let mut y = Vec::new();
    for oc in 0..o {
        for i in 0..oh {
            for j in 0..ow {
                let mut terms = Vec::new();
                for p in 0..kh {
                    for q in 0..kwp {
                        for ic in 0..c {
                            let (r, col) = (
                                (i + p) as isize - pad as isize,
                                (j + q) as isize - pad as isize,
                            );
                            let inside = q < kw
                                && r >= 0
                                && col >= 0
                                && (r as usize) < h
                                && (col as usize) < wdt;
                            terms.push(if inside {
                                f64::from(x[(ic * h + r as usize) * wdt + col as usize])
                                    * f64::from(w[((oc * c + ic) * kh + p) * kw + q])
                            } else {
                                0.0
                            });
                        }
                    }
                }
                let mut partial = half::f16::ZERO;
                for chunk in terms.chunks(pass) {
                    let s: f64 = chunk.iter().sum();
                    partial = half::f16::from_f64(partial.to_f64() + s);
                }
                y.push(partial);
            }
        }
    }
    y
}

/// The SLIC vertex (a 3-channel 5x5 convolution in 16.16 on Mk2, where the planner takes
/// `ConvPartial1xNSLIC`) sums each 1x4 sub-kernel of the zero-padded kernel width over the
/// block's channels before each FP16 partial write: its outputs equal that order's model bit
/// for bit, an order the AMP's 16-element passes do not give on the same data.
#[test]
fn the_slic_vertex_writes_a_partial_per_1x4_sub_kernel() {
    use half::f16;
    use ipusim_compiler::{compile, CompileOptions, CompileReport, PartialsType, Target};
    use ipusim_sim::host::QueueHost;
    use ipusim_sim::Engine;
    let (xd, wd, pad) = ([1, 3, 16, 16], [8, 3, 5, 5], 2);
    let mut rng = Pcg32::seed_from_u64(5);
    // Integers up to 16 in magnitude: exact in FP16 and in every pass sum, while the partial
    // sums pass 2048, where FP16 rounds.
    let mut ints = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| (rng.next_u32() % 33) as f32 - 16.0)
            .collect()
    };
    let x = ints(xd.iter().product());
    let w = ints(wd.iter().product());
    let mut b = GraphBuilder::new();
    let xi = b
        .variable("x", DType::F16, xd.to_vec(), Init::Zeros)
        .unwrap();
    let wi = b
        .variable("w", DType::F16, wd.to_vec(), Init::Zeros)
        .unwrap();
    let op = Op::Conv2d {
        stride: vec![],
        padding: vec![pad; 4],
        dilation: vec![],
        groups: 1,
    };
    let y = b.named("y", op, &[xi, wi]).unwrap();
    b.outfeed("y", y).unwrap();
    let g = b.finish();
    let mut target = Target::mk2();
    target.tiles = 16;
    let options = CompileOptions {
        partials_type: PartialsType::Half,
        ..CompileOptions::default()
    };
    let exe = compile(&g, &target, &options).unwrap();
    let report = CompileReport::new("slic", None, &exe);
    assert_eq!(report.convolutions[0].vertex, "ConvPartial1xNSLIC");
    let mut engine = Engine::new(std::sync::Arc::new(exe), Default::default()).unwrap();
    for (name, v, d) in [("x", &x, xd), ("w", &w, wd)] {
        let halves = v.iter().map(|&f| f16::from_f32(f)).collect();
        let t = Tensor::f16(Shape::new(d.to_vec()), halves).unwrap();
        engine.write_variable(name, &t).unwrap();
    }
    let mut host = QueueHost::new();
    engine.run(&mut host).unwrap();
    let got: Vec<f16> = host.outfeeds["y"][0]
        .chunks(2)
        .map(|c| f16::from_le_bytes([c[0], c[1]]))
        .collect();
    // Passes of 4 kernel columns x 3 channels over the width padded to 8.
    let slic = f16_partials_order((&x, xd), (&w, wd), pad, 8, 12);
    assert_eq!(got, slic);
    let amp = f16_partials_order((&x, xd), (&w, wd), pad, 5, 16);
    assert_ne!(slic, amp, "the data does not tell the two orders apart");
}

/// The max-pool gradient on the engine, with overlapping windows and many ties (each input
/// that equals its window's maximum takes that window's gradient, as PopLibs'
/// `MaxPoolingGrad` does), equals the textbook sum, on one tile and with the rows split
/// over several (a block whose first row is not the tensor's).
#[test]
fn max_pool_gradient_on_the_engine_takes_every_tied_window() {
    let mut rng = Pcg32::seed_from_u64(21);
    let dims = [2usize, 3, 9, 7];
    let x: Vec<f32> = (0..dims.iter().product::<usize>())
        .map(|_| (rng.next_u32() % 3) as f32) // three values: ties in most windows
        .collect();
    let (oh, ow) = (5usize, 4usize);
    let dy = small_ints(&mut rng, 2 * 3 * oh * ow);
    let mut expected = vec![0.0f64; x.len()];
    for plane in 0..6 {
        for i in 0..oh as isize {
            for j in 0..ow as isize {
                let taps: Vec<usize> = (0..3isize)
                    .flat_map(|p| (0..3isize).map(move |q| (2 * i - 1 + p, 2 * j - 1 + q)))
                    .filter(|&(r, c)| (0..9).contains(&r) && (0..7).contains(&c))
                    .map(|(r, c)| plane * 63 + (r * 7 + c) as usize)
                    .collect();
                let m = taps.iter().map(|&t| x[t]).fold(f32::NEG_INFINITY, f32::max);
                for &t in taps.iter().filter(|&&t| x[t] == m) {
                    expected[t] += f64::from(dy[(plane * oh + i as usize) * ow + j as usize]);
                }
            }
        }
    }
    let op = Op::MaxPool2dGrad {
        kernel: vec![3, 3],
        stride: vec![2, 2],
        padding: vec![1, 1, 1, 1],
    };
    for tiles in [1, 16] {
        let dy_dims = [2usize, 3, oh, ow];
        let (got, _) = run_on_engine(op.clone(), &[(&dims, &x), (&dy_dims, &dy)], tiles);
        assert_eq!(got, expected, "{tiles} tiles");
    }
}

/// A convolution reading infinities and a NaN on the engine gives the interpreter's values
/// and flags: the windows that read them are infinite or NaN (an infinity times a zero
/// weight is invalid), the others exact, on one tile and on many.
#[test]
fn non_finite_inputs_give_the_interpreters_values_and_flags() {
    let mut rng = Pcg32::seed_from_u64(13);
    let (g, mut x, mut w, op, _) = padded_3x3(&mut rng, [2, 4, 5, 5], 3);
    x[7] = f32::INFINITY;
    x[60] = f32::NEG_INFINITY;
    x[140] = f32::NAN;
    w[4] = 0.0;
    let inputs: [(&[usize], &[f32]); 2] = [(&g.x, &x), (&g.w, &w)];
    let (want, want_flags) = interpreted(op.clone(), &inputs);
    assert!(want.iter().any(|v| v.is_nan()) && want.iter().any(|v| v.is_infinite()));
    assert!(want.iter().any(|v| v.is_finite()));
    for tiles in [1, 16] {
        let (got, _, flags) = engine_run(op.clone(), &inputs, tiles, None);
        assert_eq!(got.len(), want.len());
        for (j, (a, e)) in got.iter().zip(&want).enumerate() {
            assert!(
                a == e || (a.is_nan() && e.is_nan()),
                "{tiles} tiles, y[{j}]: {a} vs {e}"
            );
        }
        assert_eq!(flags, want_flags, "{tiles} tiles");
    }
}

/// The interpreter's value of `op` over `inputs` (FP32 variables), and its flags.
fn interpreted(op: Op, inputs: &[(&[usize], &[f32])]) -> (Vec<f64>, ipusim_sim::numerics::FpSts) {
    let (b, y) = one_op(op, inputs);
    let graph = b.finish();
    let mut it = Interpreter::new(&graph, FpConfig::default(), 0).unwrap();
    for (i, (s, v)) in inputs.iter().enumerate() {
        let t = Tensor::f32(Shape::new(s.to_vec()), v.to_vec()).unwrap();
        it.set_variable(&format!("x{i}"), t).unwrap();
    }
    it.micro_batch(&Streams::new()).unwrap();
    (it.value_of(y).unwrap().to_f64_vec(), it.flags())
}

/// Convolutions whose output rows are whole vector blocks (widths of 8, 16 and 24), which
/// the engine computes from the padded feature map's rows instead of a gathered `b`: the
/// forward and input-gradient passes give the textbook values exactly (small integers) with
/// symmetric and one-sided padding, kernels of 1, 3 and 5, blocks split over 1, 16 and 64
/// tiles (and so along the width).
#[test]
fn convolutions_with_whole_vector_rows_on_the_engine_equal_the_textbook_definition() {
    textbook_forward_and_input_grad(
        17,
        &[
            ([2, 8, 6, 16], [6, 8, 3, 3], [1, 1, 1, 1]),
            ([1, 4, 5, 20], [3, 4, 5, 5], [2, 0, 2, 0]),
            ([1, 16, 4, 8], [16, 16, 1, 1], [0, 0, 0, 0]),
            ([2, 3, 7, 16], [4, 3, 3, 3], [1, 2, 1, 0]),
            ([1, 5, 3, 24], [7, 5, 3, 5], [1, 2, 1, 2]),
        ],
        true,
    );
}

/// Convolutions whose output rows are not whole vector blocks (ResNet-50's widths of 7, 14
/// and 28, and 3, 9), which the engine computes over the spans of all output rows of the
/// padded feature map, dropping the columns between and after the rows: the textbook
/// values exactly, with padding above only, a kernel taller than the map, one-sided padding,
/// blocks split over 1, 16 and 64 tiles.
#[test]
fn convolutions_over_spans_of_output_rows_on_the_engine_equal_the_textbook_definition() {
    textbook_forward_and_input_grad(
        23,
        &[
            ([2, 8, 6, 14], [6, 8, 3, 3], [1, 1, 1, 1]),
            ([1, 4, 5, 7], [3, 4, 5, 5], [2, 0, 2, 0]),
            ([1, 3, 7, 28], [4, 3, 3, 3], [1, 2, 1, 0]),
            ([1, 2, 6, 7], [3, 2, 7, 7], [3, 3, 3, 3]),
            ([2, 5, 3, 9], [7, 5, 3, 5], [2, 2, 0, 2]),
        ],
        false,
    );
}

/// Each convolution `(x, w, padding)` (stride and dilation 1, FP32) and its input gradient
/// on 1, 16 and 64 tiles equal the textbook values; `whole_rows`: whether the output rows
/// are whole vector blocks (checked).
fn textbook_forward_and_input_grad(
    seed: u64,
    cases: &[([usize; 4], [usize; 4], [usize; 4])],
    whole_rows: bool,
) {
    let mut rng = Pcg32::seed_from_u64(seed);
    for &(xd, wd, padding) in cases {
        let g = Geometry {
            x: xd,
            w: wd,
            stride: [1, 1],
            padding,
            dilation: [1, 1],
            groups: 1,
        };
        let x = small_ints(&mut rng, xd.iter().product());
        let w = small_ints(&mut rng, wd.iter().product());
        let (out_dims, expected) = direct(&g, &x, &w);
        assert_eq!(
            out_dims[3] % 8 == 0,
            whole_rows,
            "{xd:?}: rows of whole vector blocks"
        );
        let forward = Op::Conv2d {
            stride: vec![],
            padding: padding.to_vec(),
            dilation: vec![],
            groups: 1,
        };
        // The input gradient of the same convolution, from a `dy` of its output's shape:
        // dx[n, c, h, v] = Σ w[o, c, p, q] dy[n, o, h + pad_t − p, v + pad_l − q].
        let dy_dims = [out_dims[0], out_dims[1], out_dims[2], out_dims[3]];
        let dy = small_ints(&mut rng, dy_dims.iter().product());
        let [n, c, h, wdt] = xd;
        let [o, _, kh, kw] = wd;
        let (oh, ow) = (dy_dims[2] as isize, dy_dims[3] as isize);
        let mut dx = vec![0.0f64; n * c * h * wdt];
        for b in 0..n {
            for ci in 0..c {
                for hi in 0..h {
                    for vi in 0..wdt {
                        let mut s = 0.0;
                        for oi in 0..o {
                            for p in 0..kh {
                                for q in 0..kw {
                                    let i = hi as isize + padding[0] as isize - p as isize;
                                    let j = vi as isize + padding[1] as isize - q as isize;
                                    if (0..oh).contains(&i) && (0..ow).contains(&j) {
                                        s += f64::from(w[((oi * c + ci) * kh + p) * kw + q])
                                            * f64::from(
                                                dy[((b * o + oi) * oh as usize + i as usize)
                                                    * ow as usize
                                                    + j as usize],
                                            );
                                    }
                                }
                            }
                        }
                        dx[((b * c + ci) * h + hi) * wdt + vi] = s;
                    }
                }
            }
        }
        let input_grad = Op::Conv2dInputGrad {
            stride: vec![],
            padding: padding.to_vec(),
            dilation: vec![],
            groups: 1,
            input_size: vec![h, wdt],
        };
        for tiles in [1, 16, 64] {
            let (got, _) = run_on_engine(forward.clone(), &[(&g.x, &x), (&g.w, &w)], tiles);
            assert_eq!(got, expected, "forward {xd:?} {wd:?} on {tiles} tiles");
            let (got, _) = run_on_engine(input_grad.clone(), &[(&dy_dims, &dy), (&g.w, &w)], tiles);
            assert_eq!(got, dx, "input gradient {xd:?} {wd:?} on {tiles} tiles");
        }
    }
}

/// An FP32 convolution whose partials overflow, with output rows of whole vector blocks:
/// the engine gives the interpreter's infinities and flags (the product redone from a
/// gathered `b` where the padded rows' partials overflowed).
#[test]
fn an_overflowing_fp32_convolution_gives_the_interpreters_values_and_flags() {
    let mut rng = Pcg32::seed_from_u64(19);
    let (g, mut x, mut w, op, _) = padded_3x3(&mut rng, [1, 4, 3, 16], 2);
    // Positive weights of 1 to 5, and one input near the largest FP32 value: every output
    // whose window reads it overflows to +inf, the others stay finite.
    for v in w.iter_mut() {
        *v = v.abs() + 1.0;
    }
    x[2 * 16 + 7] = 3e38;
    let inputs: [(&[usize], &[f32]); 2] = [(&g.x, &x), (&g.w, &w)];
    let (want, want_flags) = interpreted(op.clone(), &inputs);
    assert!(want.iter().any(|v| v.is_infinite()) && want.iter().any(|v| v.is_finite()));
    for tiles in [1, 16] {
        let (got, _, flags) = engine_run(op.clone(), &inputs, tiles, None);
        assert_eq!(got, want, "{tiles} tiles");
        assert_eq!(flags, want_flags, "{tiles} tiles");
    }
}

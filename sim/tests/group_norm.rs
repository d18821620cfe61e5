//! Group norm through the compiler and the engine, fed by a convolution (so it reads a
//! channel-grouped feature map, the layout its statistics are summed in without a row-major
//! copy), against the textbook definition in f64.
//!
//! `y = Conv2d(x, w)` of small integers is exact in FP32. Group norm of `y` over `G` groups
//! of `k = C/G · H · W` elements: per image and group `m = Σy / k`, `v = Σ(y − m)² / k`,
//! `out = (y − m) / sqrt(v + ε) · γ + β`. In FP32 the sums of `k` terms are within
//! `k · u · Σ|·|` of exact (`u = 2^-24`), and the square root, division and the affine add
//! a few `u` more, so with the two-pass statistics every output is within
//! `(2k + 16) · u · (1 + |out|)` of the textbook value (with `|y − m| · inv_std` at most
//! `sqrt(k)` the bound also covers the propagated error of the statistics). The default
//! single sweep (`v = E[y²] − m²`) loses up to `(k + 4) · u · E[y²]` of the variance to
//! cancellation, a relative error of `(k + 4) · u · E[y²] / v` that `inv_std` carries half
//! of: the bound is multiplied by `1 + E[y²] / v`.

use ipusim_compiler::{compile, CompileOptions, Target};
use ipusim_ir::norm::Statistics;
use ipusim_ir::Shape;
use ipusim_ir::{DType, GraphBuilder, Init, Op};
use ipusim_sim::host::QueueHost;
use ipusim_sim::tensor::Tensor;
use ipusim_sim::Engine;

const X: [usize; 4] = [2, 8, 3, 3];
const O: usize = 32;
const GROUPS: usize = 4;
const EPS: f64 = 1e-5;

/// Small integers from a fixed pattern.
fn ints(n: usize, salt: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7 + salt * 13) % 9) as f32 - 4.0)
        .collect()
}

/// `Conv2d(x, w)` (3x3, padding 1) of [`X`] into [`O`] channels, exact in f64.
fn conv3x3(x: &[f32], w: &[f32]) -> Vec<f64> {
    let [n, c, h, wd] = X;
    let mut y = vec![0.0f64; n * O * h * wd];
    for b in 0..n {
        for o in 0..O {
            for i in 0..h {
                for j in 0..wd {
                    let mut s = 0.0f64;
                    for ci in 0..c {
                        for p in 0..3 {
                            for q in 0..3 {
                                let (r, col) = (i + p, j + q);
                                if (1..=h).contains(&r) && (1..=wd).contains(&col) {
                                    s += f64::from(x[((b * c + ci) * h + r - 1) * wd + col - 1])
                                        * f64::from(w[((o * c + ci) * 3 + p) * 3 + q]);
                                }
                            }
                        }
                    }
                    y[((b * O + o) * h + i) * wd + j] = s;
                }
            }
        }
    }
    y
}

#[test]
fn group_norm_of_a_grouped_feature_map_equals_the_textbook_definition() {
    let (x, w) = (ints(X.iter().product(), 1), ints(O * X[1] * 9, 2));
    let gamma: Vec<f32> = (0..O).map(|c| 0.5 + c as f32 / 16.0).collect();
    let beta: Vec<f32> = (0..O).map(|c| c as f32 / 8.0 - 1.0).collect();
    let mut b = GraphBuilder::new();
    let xv = b.variable("x", DType::F32, X, Init::Zeros).unwrap();
    let wv = b
        .variable("w", DType::F32, [O, X[1], 3, 3], Init::Zeros)
        .unwrap();
    let gv = b.variable("gamma", DType::F32, [O], Init::Zeros).unwrap();
    let bv = b.variable("beta", DType::F32, [O], Init::Zeros).unwrap();
    let conv = Op::Conv2d {
        stride: vec![],
        padding: vec![1, 1, 1, 1],
        dilation: vec![],
        groups: 1,
    };
    let y = b.named("conv", conv, &[xv, wv]).unwrap();
    let gn = Op::GroupNorm {
        groups: GROUPS,
        epsilon: EPS,
    };
    let out = b.named("gn", gn, &[y, gv, bv]).unwrap();
    b.outfeed("out", out).unwrap();
    let mut target = Target::mk2();
    target.tiles = 16;
    let graph = ipusim_ir::decompose::decompose(&b.finish(), Statistics::Running).unwrap();
    let exe = compile(&graph, &target, &CompileOptions::default()).unwrap();
    // The convolution's output is not copied to row-major for the statistics (the host's
    // outfeed of the result is).
    let row_major: Vec<&String> = exe
        .tensors
        .iter()
        .filter(|t| t.name.ends_with("/row_major"))
        .map(|t| &t.name)
        .collect();
    assert_eq!(row_major, ["gn/row_major"]);
    let mut engine = Engine::new(std::sync::Arc::new(exe), Default::default()).unwrap();
    for (name, dims, v) in [
        ("x", X.to_vec(), &x),
        ("w", vec![O, X[1], 3, 3], &w),
        ("gamma", vec![O], &gamma),
        ("beta", vec![O], &beta),
    ] {
        let t = Tensor::f32(Shape::new(dims), v.clone()).unwrap();
        engine.write_variable(name, &t).unwrap();
    }
    let mut host = QueueHost::new();
    engine.run(&mut host).unwrap();
    let read = |s: &str| -> Vec<f64> {
        host.outfeeds[s][0]
            .chunks(4)
            .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect()
    };
    let got = read("out");
    let plane = X[2] * X[3];
    let y = conv3x3(&x, &w);
    let per = O / GROUPS;
    let k = (per * plane) as f64;
    let u = f64::powi(2.0, -24);
    for n in 0..X[0] {
        for g in 0..GROUPS {
            let at = |c: usize, s: usize| (n * O + c) * plane + s;
            let idx: Vec<usize> = (g * per..(g + 1) * per)
                .flat_map(|c| (0..plane).map(move |s| at(c, s)))
                .collect();
            let m = idx.iter().map(|&i| y[i]).sum::<f64>() / k;
            let v = idx.iter().map(|&i| (y[i] - m) * (y[i] - m)).sum::<f64>() / k;
            let inv = 1.0 / (v + EPS).sqrt();
            let power = idx.iter().map(|&i| y[i] * y[i]).sum::<f64>() / k;
            let cancellation = 1.0 + power / v;
            for &i in &idx {
                let c = (i / plane) % O;
                let want = (y[i] - m) * inv * f64::from(gamma[c]) + f64::from(beta[c]);
                let bound = (2.0 * k + 16.0) * u * (1.0 + want.abs()) * cancellation;
                assert!(
                    (got[i] - want).abs() <= bound,
                    "image {n} group {g} element {i}: {} against {want} (bound {bound:e})",
                    got[i]
                );
            }
        }
    }
}

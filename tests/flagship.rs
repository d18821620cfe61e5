//! The flagship, `programs/mlp_digits.ron`: it trains to at least 90% accuracy over its
//! training file in 32.32, 16.32 and 16.16 (with stochastic rounding) through the CLI, and
//! its 32.32 loss curve on the engine matches the reference interpreter's within a bound
//! derived from the FP32 summation orders.

use ipusim_compiler::BuildOptions;
use ipusim_ir::text::load_program;
use ipusim_ir::Precision;
use ipusim_runtime::session::Session;
use ipusim_runtime::{ReferenceSession, SessionOptions};
use ipusim_sim::tensor::Tensor;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn ipusim(args: &[&str]) -> Value {
    let o = Command::new(env!("CARGO_BIN_EXE_ipusim"))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_str(&out).unwrap()
}

fn mean(v: &Value) -> f64 {
    let a = v.as_array().unwrap();
    a.iter().map(|x| x.as_f64().unwrap()).sum::<f64>() / a.len() as f64
}

#[test]
fn trains_to_90_percent_in_every_precision() {
    let dir = std::env::temp_dir().join(format!("ipusim-flagship-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (precision, sr) in [("32.32", "off"), ("16.32", "off"), ("16.16", "on")] {
        let ckpt = dir.join(format!("{precision}.json"));
        let c = ckpt.to_str().unwrap();
        let train = ipusim(&[
            "run",
            "programs/mlp_digits.ron",
            "--json",
            "--precision",
            precision,
            "--sr",
            sr,
            "--save-variables",
            c,
        ]);
        let loss = train["outfeeds"]["loss"].as_array().unwrap();
        assert_eq!(loss.len(), 300, "one loss per step");
        assert_eq!(train["outfeeds"]["accuracy"].as_array().unwrap().len(), 300);
        // Training accuracy: the trained weights over the whole training file (one pass,
        // 30 micro-batches of 50).
        let eval = ipusim(&[
            "run",
            "programs/mlp_digits.ron",
            "--json",
            "--precision",
            precision,
            "--inference",
            "--load-variables",
            c,
        ]);
        let acc = &eval["outfeeds"]["accuracy"];
        assert_eq!(acc.as_array().unwrap().len(), 30);
        assert!(mean(acc) >= 0.9, "{precision}: accuracy {}", mean(acc));
        assert_eq!(eval["report"]["mode"], "inference");
        // u8 pixels on the link: 50 x 64 bytes per micro-batch.
        assert_eq!(
            eval["report"]["stream_bytes"]["rx"],
            30 * (50 * 64 + 50 * 4)
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `γ_k = k·u / (1 − k·u)`, u = 2^-24: the bound on the relative error of a sum of k terms in
/// FP32 in any order (Higham, Accuracy and Stability of Numerical Algorithms, §3.1).
fn gamma(k: usize) -> f64 {
    let ku = k as f64 * 2f64.powi(-24);
    ku / (1.0 - ku)
}

fn values(r: &ReferenceSession, name: &str) -> Vec<f64> {
    r.interpreter().value(name).unwrap().to_f64_vec()
}

/// `|a| @ |b|` for row-major `a[m, k]`, `b[k, n]`.
fn abs_matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            for j in 0..n {
                out[i * n + j] += a[i * k + p].abs() * b[p * n + j].abs();
            }
        }
    }
    out
}

/// The bound on |engine loss − interpreter loss| for one step of the flagship in 32.32
/// when both start from the same weights `w1`, `w2`: the two compute the same operations
/// with the same roundings except for the order of the FP32 sums (matmuls split across
/// tiles and reduced in stages on the engine, sequential in the interpreter). First order
/// in u, with both orders within γ_K of the exact sum:
/// - `x·0.0625` is exact (a power of two times a small integer);
/// - `h1_mm = x @ w1` (K = 64): |Δ| ≤ 2γ_64 (|x| @ |w1|); `+ b1` adds 2u|h1_pre|; ReLU is
///   1-Lipschitz, so |Δh1| ≤ that;
/// - `logits = h1 @ w2 + b2` (K = 32): |Δz| ≤ |Δh1| @ |w2| + 2γ_32 (|h1| @ |w2|) + 2u|z|;
/// - the mean cross-entropy is Lipschitz in the logits with Σ_j |∂L/∂z_ij| ≤ 2/n, so
///   |ΔL| ≤ (2/n) Σ_i max_j |Δz_ij|; its own sums (10 classes, 50 rows, in any order, of
///   terms bounded by 3·max_j|z_ij| + 2·ln 10) add 2γ_64 of those terms.
fn step_bound(r: &ReferenceSession, w1: &[f64], w2: &[f64]) -> f64 {
    let u = 2f64.powi(-24);
    let (n, k, h, c) = (50, 64, 32, 10);
    let x = values(r, "x_scaled");
    let h1_pre = values(r, "h1_pre");
    let h1 = values(r, "h1");
    let z = values(r, "logits");
    let a = abs_matmul(&x, w1, n, k, h);
    let dh: Vec<f64> = a
        .iter()
        .zip(&h1_pre)
        .map(|(a, p)| 2.0 * gamma(k) * a + 2.0 * u * p.abs())
        .collect();
    let prop = abs_matmul(&dh, w2, n, h, c);
    let b = abs_matmul(&h1, w2, n, h, c);
    let mut total = 0.0;
    let mut terms = 0.0;
    for i in 0..n {
        let mut worst: f64 = 0.0;
        let mut zmax: f64 = 0.0;
        for j in 0..c {
            let e = i * c + j;
            worst = worst.max(prop[e] + 2.0 * gamma(h) * b[e] + 2.0 * u * z[e].abs());
            zmax = zmax.max(z[e].abs());
        }
        total += worst;
        terms += 3.0 * zmax + 2.0 * (c as f64).ln();
    }
    2.0 * total / n as f64 + 2.0 * gamma(n + c + 4) * terms / n as f64
}

fn tensors(r: &ReferenceSession) -> Vec<(String, Tensor)> {
    r.interpreter()
        .variables()
        .into_iter()
        .map(|(n, t)| (n.to_string(), t.clone()))
        .collect()
}

#[test]
fn loss_curve_in_32_32_matches_the_reference_interpreter() {
    let path = root().join("programs/mlp_digits.ron");
    let program = load_program(&path).unwrap();
    let base = path.parent().unwrap_or(Path::new(""));
    let options = SessionOptions {
        build: BuildOptions {
            precision: Some(Precision::P32_32),
            device_iterations: Some(1),
            ..BuildOptions::default()
        },
        ..SessionOptions::default()
    };
    let mut reference = ReferenceSession::new(&program, base, &options).unwrap();
    let mut engine = Session::new(&program, base, options.clone()).unwrap();
    let mut worst_ratio: f64 = 0.0;
    for step in 0..300 {
        // Teacher forcing: both start the step from the interpreter's weights and momenta.
        let state = tensors(&reference);
        for (name, t) in &state {
            engine.write_variable(name, t).unwrap();
        }
        let get = |n: &str| state.iter().find(|(m, _)| m == n).unwrap().1.to_f64_vec();
        let (w1, w2) = (get("w1"), get("w2"));
        let want = reference.run().unwrap()["loss"].scalars()[0];
        let got = engine.run().unwrap().outfeeds["loss"].scalars()[0];
        let bound = step_bound(&reference, &w1, &w2);
        assert!(
            (got - want).abs() <= bound,
            "step {step}: engine {got}, interpreter {want}, |diff| {} > bound {bound}",
            (got - want).abs()
        );
        worst_ratio = worst_ratio.max((got - want).abs() / bound);
    }
    eprintln!("largest |diff| / bound over 300 steps: {worst_ratio:.3}");
}

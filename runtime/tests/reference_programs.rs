//! The programs of `programs/` on the reference interpreter: the numbers each one shows.

use ipusim_compiler::BuildOptions;
use ipusim_ir::text::load_program;
use ipusim_runtime::{ReferenceSession, SessionOptions};
use ipusim_sim::numerics::{FpConfig, StochasticRounding};
use std::path::{Path, PathBuf};

fn programs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../programs")
}

fn session(name: &str, fp: FpConfig, seed: u64) -> ReferenceSession {
    let path = programs().join(name);
    let program = load_program(&path).unwrap();
    let options = SessionOptions {
        fp,
        seed,
        ..SessionOptions::default()
    };
    ReferenceSession::new(&program, &programs(), &options).unwrap()
}

#[test]
fn feeds_repeat_outfeeds_ten_entries() {
    let mut s = session("feeds_repeat.ron", FpConfig::default(), 0);
    let out = s.run().unwrap();
    let d1 = out["d1"].rows();
    assert_eq!(d1.len(), 10);
    assert!(d1
        .iter()
        .all(|r| r.len() == 800 && r.iter().all(|&v| v == 2.0)));
    assert!(out["d2"].rows().iter().flatten().all(|&v| v == 0.0));
    assert_eq!(out["counter"].scalars(), vec![10.0]);
    let out = s.run().unwrap();
    assert_eq!(
        out["counter"].scalars(),
        vec![20.0],
        "state persists across runs"
    );
}

#[test]
fn fp16_swamping_shows_the_tutorial_numbers() {
    let mut s = session("fp16_swamping.ron", FpConfig::default(), 0);
    let out = s.run().unwrap();
    assert_eq!(
        out["back"].rows()[0],
        vec![
            2f64.powi(-11),
            0.199951171875,
            0.02001953125,
            0.001953125,
            0.000244140625,
            0.0
        ]
    );
    let pct: Vec<String> = out["relative_error"].rows()[0]
        .iter()
        .map(|e| format!("{:+.1}%", 100.0 * e))
        .collect();
    assert_eq!(
        pct,
        ["+22.1%", "-0.0%", "+0.1%", "-2.3%", "+22.1%", "-100.0%"]
    );
    assert_eq!(out["running_sum"].rows()[0], vec![0.25; 20]);
    assert_eq!(out["running_sum_mean"].scalars(), vec![0.25]);
    assert_eq!(out["running_sum_f32"].scalars(), vec![1.0001659393310547]);
    let sr = FpConfig {
        esr: StochasticRounding::On,
        ..FpConfig::default()
    };
    let out = session("fp16_swamping.ron", sr, 1).run().unwrap();
    let mean = out["running_sum_mean"].scalars()[0];
    // numerics.md §3.2: one SR lane has mean 1.000166 and sd 0.0152; the mean of 20 lanes
    // has sd 0.0152 / sqrt(20) = 0.0034. Five sd: 0.017.
    assert!((mean - 1.000166).abs() < 0.017, "{mean}");
}

#[test]
fn fp_exceptions_saturates_or_gives_nan() {
    let out = session("fp_exceptions.ron", FpConfig::default(), 0)
        .run()
        .unwrap();
    assert_eq!(out["product"].scalars(), vec![65504.0]);
    assert_eq!(out["product_f32"].scalars(), vec![1e8]);
    let nanoo = FpConfig {
        nanoo: true,
        ..FpConfig::default()
    };
    let out = session("fp_exceptions.ron", nanoo, 0).run().unwrap();
    assert!(out["product"].scalars()[0].is_nan());
    let trap = FpConfig {
        oflo: true,
        ..FpConfig::default()
    };
    let e = session("fp_exceptions.ron", trap, 0).run().unwrap_err();
    assert!(e.to_string().contains("OFLO"), "{e}");
}

/// The flagship trains to >= 90% accuracy over its training file in each precision (16.16
/// with stochastic rounding), evaluated by an inference pass with the trained weights.
#[test]
fn flagship_learns_in_every_precision() {
    use ipusim_ir::Precision;
    let program = load_program(&programs().join("mlp_digits.ron")).unwrap();
    for (p, esr) in [
        (Precision::P32_32, StochasticRounding::Off),
        (Precision::P16_32, StochasticRounding::Off),
        (Precision::P16_16, StochasticRounding::On),
    ] {
        let options = SessionOptions {
            build: BuildOptions {
                precision: Some(p),
                ..BuildOptions::default()
            },
            fp: FpConfig {
                esr,
                ..FpConfig::default()
            },
            ..SessionOptions::default()
        };
        let mut train = ReferenceSession::new(&program, &programs(), &options).unwrap();
        let out = train.run().unwrap();
        let loss = out["loss"].scalars();
        assert_eq!(loss.len(), 300);
        let first: f64 = loss[..10].iter().sum::<f64>() / 10.0;
        let last: f64 = loss[290..].iter().sum::<f64>() / 10.0;
        assert!(last < first / 4.0, "{p}: loss {first} -> {last}");
        // One pass over the 1,500 rows: 30 micro-batches of 50.
        let mut eval = ReferenceSession::new(
            &program,
            &programs(),
            &SessionOptions {
                build: BuildOptions {
                    device_iterations: Some(30),
                    ..options.build.clone()
                },
                ..options.clone()
            }
            .inference(),
        )
        .unwrap();
        let names: Vec<String> = eval
            .interpreter()
            .variables()
            .keys()
            .map(|n| n.to_string())
            .collect();
        for n in names {
            let t = train.interpreter().variable(&n).unwrap().clone();
            eval.set_variable(&n, t).unwrap();
        }
        let acc = eval.run().unwrap()["accuracy"].scalars();
        assert_eq!(acc.len(), 30);
        let acc = acc.iter().sum::<f64>() / 30.0;
        assert!(acc >= 0.9, "{p}: accuracy over the file {acc}");
        // The file is read once in inference: another pass needs rows it does not have.
        let e = eval.run().unwrap_err();
        assert!(e.to_string().contains("shorter than the run needs"), "{e}");
    }
}

/// Gradient accumulation and every outfeed mode against hand-computed values
/// (tests/programs/run/ga_sgd.ron: loss = w·x, x = 1, 2, 3, ..., SGD lr 0.5 on the mean of 3
/// micro-batches, two updates per run).
#[test]
fn gradient_accumulation_and_outfeed_modes_by_hand() {
    use ipusim_ir::OutfeedMode;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/programs/run");
    let program = load_program(&dir.join("ga_sgd.ron")).unwrap();
    // w: 1 -> 1 - 0.5·2 = 0 -> 0 - 0.5·5 = -2.5 -> -2.5 - 0.5·8 = -6.5 -> -6.5 - 0.5·11 = -12.
    let all = [
        1.0, 2.0, 3.0, 0.0, 0.0, 0.0, -17.5, -20.0, -22.5, -65.0, -71.5, -78.0,
    ];
    for (mode, expected) in [
        (OutfeedMode::All, all.to_vec()),
        (OutfeedMode::Last, vec![0.0, -78.0]),
        (OutfeedMode::Sum, vec![6.0, -274.5]),
        (OutfeedMode::Every(4), vec![0.0, -65.0]),
        (OutfeedMode::Every(7), vec![]),
    ] {
        let mut options = SessionOptions::default();
        options.streams.outfeed_modes.insert("loss".into(), mode);
        let mut s = ReferenceSession::new(&program, &dir, &options).unwrap();
        let mut got = Vec::new();
        for _ in 0..2 {
            let out = s.run().unwrap();
            assert_eq!(out["loss"].received, 6);
            assert_eq!(out["x_seen"].rows().len(), 6, "x_seen stays in mode all");
            got.extend(out["loss"].scalars());
        }
        assert_eq!(got, expected, "{mode}");
        assert_eq!(
            s.interpreter().variable("w").unwrap().to_f64_vec(),
            vec![-12.0]
        );
    }
}

//! The Session API: feeds from a Rust iterator, state across runs, outfeed modes changed
//! between runs, checkpoints, the report over all runs, and the engine against the
//! reference interpreter on the same host.

use ipusim_ir::text::load_program;
use ipusim_ir::OutfeedMode;
use ipusim_runtime::feeds::IteratorFeed;
use ipusim_runtime::{ReferenceSession, Session, SessionOptions};
use ipusim_sim::tensor::Tensor;
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/programs/run")
}

fn ga_sgd() -> Session {
    let program = load_program(&dir().join("ga_sgd.ron")).unwrap();
    Session::new(&program, &dir(), SessionOptions::default()).unwrap()
}

#[test]
fn iterator_feeds_and_state_across_runs() {
    let mut s = ga_sgd();
    assert_eq!((s.steps_per_run(), s.micro_batches_per_run()), (2, 6));
    // x = 10, 20, 30, ... from a Rust iterator instead of the program's sequence.
    let items = (1..).map(|k| Tensor::f32([1], vec![10.0 * k as f32]).unwrap());
    s.set_infeed("x", Box::new(IteratorFeed::new(items)))
        .unwrap();
    let out = s.run().unwrap();
    // w = 1 for the first 3 micro-batches, then 1 - 0.5·20 = -9.
    assert_eq!(
        out.outfeeds["loss"].scalars(),
        vec![10.0, 20.0, 30.0, -360.0, -450.0, -540.0]
    );
    assert_eq!(s.read_tensor("w").unwrap().to_f64_vec(), vec![-34.0]);
    s.set_outfeed_mode("loss", OutfeedMode::Sum).unwrap();
    let out = s.run().unwrap();
    assert_eq!(out.run, 2);
    // w = -34 on x = 70, 80, 90, then -34 - 0.5·80 = -74 on x = 100, 110, 120.
    assert_eq!(
        out.outfeeds["loss"].scalars(),
        vec![-34.0 * 240.0 - 74.0 * 330.0]
    );
    let r = s.report();
    assert_eq!((r.runs, r.steps, r.micro_batches), (2, 4, 12));
    assert_eq!(r.executed.cycles_per_run.len(), 2);
    assert_eq!(r.executed.total_cycles, 2 * r.compile.total_cycles);
    assert_eq!(r.executed.stream_bytes.rx, 2 * r.stream_bytes.rx);
    assert!(s
        .set_infeed("nope", Box::new(IteratorFeed::new(std::iter::empty())))
        .is_err());
}

#[test]
fn checkpoints_restore_bit_identical_state() {
    let path = std::env::temp_dir().join(format!("ipusim-session-{}.json", std::process::id()));
    let mut a = ga_sgd();
    a.run().unwrap();
    a.save_variables(&path).unwrap();
    // The file is the document and a newline, written through a buffer.
    let text = serde_json::to_string(&a.checkpoint()).unwrap() + "\n";
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    let mut b = ga_sgd();
    assert_eq!(b.load_variables(&path).unwrap(), a.variables().len());
    assert_eq!(b.variables(), a.variables());
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn engine_and_reference_agree_on_every_outfeed_entry() {
    let program = load_program(&dir().join("ga_sgd.ron")).unwrap();
    let options = SessionOptions::default();
    let mut engine = Session::new(&program, &dir(), options.clone()).unwrap();
    let mut reference = ReferenceSession::new(&program, &dir(), &options).unwrap();
    for _ in 0..3 {
        let e = engine.run().unwrap().outfeeds;
        let r = reference.run().unwrap();
        for (name, data) in &r {
            assert_eq!(e[name].rows(), data.rows(), "{name}");
        }
    }
}

/// A library user matches on the error's type, not its text.
#[test]
fn errors_are_typed() {
    use ipusim_runtime::feeds::IteratorFeed;
    use ipusim_runtime::{OptionsError, RuntimeError, StreamError};
    let mut s = ga_sgd();
    let items = std::iter::empty::<Tensor>();
    match s.set_infeed("nope", Box::new(IteratorFeed::new(items))) {
        Err(RuntimeError::Stream(StreamError::Unknown { kind, name, .. })) => {
            assert_eq!((kind, name.as_str()), ("infeed", "nope"));
        }
        other => panic!("expected an unknown-stream error, got {other:?}"),
    }
    match Session::open(
        &dir().join("no-such-program.ron"),
        SessionOptions::default(),
    ) {
        Err(RuntimeError::Program(e)) => assert!(e.to_string().contains("no-such-program.ron")),
        other => panic!("expected a program error, got {:?}", other.err()),
    }
    let program = load_program(&dir().join("ga_sgd.ron")).unwrap();
    let mut options = SessionOptions::default();
    options
        .streams
        .outfeed_modes
        .insert("missing".into(), OutfeedMode::All);
    match Session::new(&program, &dir(), options) {
        Err(RuntimeError::Options(OptionsError::UnknownStream { flag, name, .. })) => {
            assert_eq!((flag, name.as_str()), ("--outfeed-mode", "missing"));
        }
        other => panic!("expected an options error, got {:?}", other.err()),
    }
}

/// The CNN families train in the simulator and in the reference interpreter: with every
/// label 3 the classifier learns to predict class 3, so the loss falls over SGD steps, in
/// every precision; the engine's losses follow the interpreter's (FP32 partials summed in
/// the AMP's passes on both sides; the passes are 8 channels on the engine's FP32 AMP and
/// 16 in the interpreter, so FP32 agrees to rounding, not bit for bit).
#[test]
fn the_cnn_tour_trains_in_the_simulator_and_the_reference() {
    use ipusim_ir::op_tour::cnn_tour;
    let mut program = cnn_tour().unwrap();
    // Images from a sequence (different each step), labels all 3.
    program.infeeds[0].source = ipusim_ir::DataSource::Sequence {
        start: -1.0,
        step: 1.0 / 192.0,
    };
    program.infeeds[1].source = ipusim_ir::DataSource::Constant(3.0);
    for precision in ipusim_ir::Precision::ALL {
        let mut options = SessionOptions::default();
        options.build.precision = Some(precision);
        let mut reference = ReferenceSession::new(&program, &dir(), &options).unwrap();
        let mut engine = Session::new(&program, &dir(), options.clone()).unwrap();
        let (mut losses, mut engine_losses) = (Vec::new(), Vec::new());
        for _ in 0..6 {
            losses.push(reference.run().unwrap()["loss"].rows()[0][0]);
            engine_losses.push(engine.run().unwrap().outfeeds["loss"].rows()[0][0]);
        }
        assert!(
            losses.iter().all(|l| l.is_finite()) && losses[5] < losses[0],
            "{precision}: reference losses {losses:?}"
        );
        assert!(
            engine_losses[5] < engine_losses[0],
            "{precision}: engine losses {engine_losses:?}"
        );
        let tol = if precision == ipusim_ir::Precision::P32_32 {
            1e-4
        } else {
            2e-2
        };
        for (e, r) in engine_losses.iter().zip(&losses) {
            assert!(
                (e - r).abs() <= tol * r.abs().max(1.0),
                "{precision}: engine {engine_losses:?} vs reference {losses:?}"
            );
        }
    }
}

/// Runs `program` three times with the default schedule and with `early_weight_update`:
/// the outfeeds and variables must be the same bit for bit, and only the second may run an
/// update (a program step `is_update` names) before the step's last other program step.
fn early_and_late_agree(
    program: &ipusim_ir::Program,
    dir: &Path,
    options: SessionOptions,
    is_update: fn(&str) -> bool,
    what: &str,
) {
    let session = |early: bool| {
        let mut options = options.clone();
        options.build.early_weight_update = early;
        Session::new(program, dir, options).unwrap()
    };
    let (mut late, mut early) = (session(false), session(true));
    // Whether an update runs before the last program step that is not an update.
    let update_inside_step = |s: &Session| {
        let names: Vec<&str> = s
            .executable()
            .steps
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        let first = names.iter().position(|n| is_update(n));
        let last = names
            .iter()
            .rposition(|n| !is_update(n) && !n.contains("assign"));
        first.zip(last).is_some_and(|(u, b)| u < b)
    };
    assert!(!update_inside_step(&late), "{what}");
    assert!(update_inside_step(&early), "{what}");
    let bits = |o: &ipusim_runtime::OutfeedData| -> Vec<u64> {
        o.rows().iter().flatten().map(|v| v.to_bits()).collect()
    };
    let vars = |s: &Session| -> std::collections::BTreeMap<String, Vec<u8>> {
        s.variables()
            .into_iter()
            .map(|(n, t)| (n, t.to_bytes()))
            .collect()
    };
    for run in 0..3 {
        let (a, b) = (late.run().unwrap(), early.run().unwrap());
        for (stream, t) in &a.outfeeds {
            assert!(
                bits(t) == bits(&b.outfeeds[stream]),
                "{what}: run {run}: outfeed '{stream}' differs"
            );
        }
        let (x, y) = (vars(&late), vars(&early));
        assert_eq!(x.keys().collect::<Vec<_>>(), y.keys().collect::<Vec<_>>());
        for (n, v) in &x {
            assert!(*v == y[n], "{what}: run {run}: variable '{n}' differs");
        }
    }
}

/// `early_weight_update` (`--early-weight-update`) moves each weight's update up to just after
/// its gradient and the step's last read of the weight, and changes no value: training
/// steps of convolutions, both norms, matmuls, SGD, momentum and AdamW in every precision
/// give the default schedule's outfeeds and variables bit for bit.
#[test]
fn early_weight_updates_keep_every_value() {
    let sim = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/programs/sim");
    for name in ["cnn_tour", "bn_stable", "train_mlp", "adamw_mlp"] {
        let program = load_program(&sim.join(format!("{name}.ron"))).unwrap();
        for precision in ipusim_ir::Precision::ALL {
            let mut options = SessionOptions::default();
            options.build.precision = Some(precision);
            options.build.gradient_accumulation = Some(1);
            options.build.device_iterations = Some(2);
            early_and_late_agree(
                &program,
                &sim,
                options,
                |n| n.starts_with("update/"),
                &format!("{name} in {precision}"),
            );
        }
    }
}

/// An update waits for every late read of its variable: through a transpose, a reshape, a
/// broadcast, a cast a reduction absorbs, and a fused group whose root runs after the
/// gradient (`tests/programs/run/early_update_views.ron`).
#[test]
fn an_early_update_waits_for_reads_through_views_and_fused_groups() {
    let program = load_program(&dir().join("early_update_views.ron")).unwrap();
    early_and_late_agree(
        &program,
        &dir(),
        SessionOptions::default(),
        |n| n.contains("_new") || n.starts_with("g_rows") || n.starts_with("g_half"),
        "early_update_views",
    );
}

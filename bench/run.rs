//! The flagship training step simulated with exact values, against a native f32 step.
//!
//! `programs/mlp_digits.ron` as shipped (MLP 64-32-10 on batches of 50 digits over all 1,472
//! tiles of mk2: forward, backward and momentum update, the batch's loss and accuracy
//! outfed) runs in a `Session` for device runs of 30 steps (compile outside the
//! measurement; runs continue training from run to run, as `ipusim run --steps` does), in
//! 16.32 (the default) and 32.32, on all cores and on one thread. The baseline is
//! [`native::MlpStep`]: the same step in plain f32 on one host thread. The ratio is the
//! simulator's overhead; the target is 3x.
//!
//! Run: `cargo bench --bench run`.

#[path = "common.rs"]
mod common;
#[path = "native.rs"]
mod native;

use common::{duration, load_average, median_secs};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ipusim::compiler::BuildOptions;
use ipusim::ir::Precision;
use ipusim::runtime::{Session, SessionOptions};
use ipusim::sim::numerics::{FpConfig, StochasticRounding};
use native::{Digits, MlpStep};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Steps per device run.
const STEPS: u32 = 30;
/// The overhead target of the issue (simulated step time / native f32 step time).
const TARGET: f64 = 3.0;

fn program() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/mlp_digits.ron")
}

fn session(precision: Precision, esr: StochasticRounding, threads: Option<usize>) -> Session {
    let options = SessionOptions {
        build: BuildOptions {
            precision: Some(precision),
            device_iterations: Some(STEPS),
            ..BuildOptions::default()
        },
        fp: FpConfig {
            esr,
            ..FpConfig::default()
        },
        threads,
        ..SessionOptions::default()
    };
    Session::open(&program(), options).unwrap()
}

/// Host seconds of one native step (the next batch each call).
fn native_step_secs(data: &Digits) -> f64 {
    let mut net = MlpStep::new();
    let mut i = 0;
    median_secs(9, 0.2, || {
        let (x, y) = data.batch(i);
        i += 1;
        net.step(x, y)
    })
}

/// The printed comparison: every configuration against the native step, in one run.
fn compare(data: &Digits) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let native = native_step_secs(data);
    let probe = session(Precision::P16_32, StochasticRounding::Off, None);
    let exe = probe.executable();
    println!(
        "flagship step: mlp_digits 64-32-10, batch {}, mk2, {} vertices on {} tiles per step (load average {})",
        native::BATCH,
        exe.num_vertices(),
        exe.memory.tiles.iter().filter(|t| t.total > 0).count(),
        load_average()
    );
    println!("  native f32 step (1 thread): {}", duration(native));
    drop(probe);
    for precision in [Precision::P16_32, Precision::P32_32] {
        for (threads, label) in [
            (None, format!("{cores} threads")),
            (Some(1), "1 thread".into()),
        ] {
            let mut s = session(precision, StochasticRounding::Off, threads);
            let step = median_secs(5, 0.3, || s.run().unwrap().summary.cycles.total) / STEPS as f64;
            let ratio = step / native;
            println!(
                "flagship step {precision} ({label}): sim {}, native f32 {}, overhead {ratio:.0}x (target {TARGET}x): {}",
                duration(step),
                duration(native),
                if ratio <= TARGET { "met" } else { "not met" }
            );
        }
    }
    // The loss still falls in the baseline (it computes the real step).
    let mut net = MlpStep::new();
    let first = net.step(data.batch(0).0, data.batch(0).1).0;
    let mut last = first;
    for i in 1..300 {
        last = net.step(data.batch(i).0, data.batch(i).1).0;
    }
    println!("  native f32 baseline: loss {first:.3} at step 1, {last:.3} at step 300");
}

fn flagship(c: &mut Criterion) {
    let data =
        Digits::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/data/digits_train.csv"));
    compare(&data);
    let mut group = c.benchmark_group("run");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(STEPS.into()));
    for (precision, esr) in [
        (Precision::P16_32, StochasticRounding::Off),
        (Precision::P32_32, StochasticRounding::Off),
        (Precision::P16_16, StochasticRounding::On),
    ] {
        let mut s = session(precision, esr, None);
        group.bench_function(format!("mlp_digits_{STEPS}_steps/{precision}"), |b| {
            b.iter(|| s.run().unwrap().summary.cycles.total)
        });
    }
    group.throughput(Throughput::Elements(1));
    let mut net = MlpStep::new();
    let mut i = 0;
    group.bench_function("native_f32_step", |b| {
        b.iter(|| {
            let (x, y) = data.batch(i);
            i += 1;
            net.step(x, y)
        })
    });
    group.finish();
}

criterion_group!(benches, flagship);
criterion_main!(benches);

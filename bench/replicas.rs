//! Simulating replicas (the many-IPU issue's target): a run of two replicas of
//! `programs/resnet_digits.ron` on two host threads against a run of one replica on one
//! thread. Each replica trains on its own micro-batches, so the two-replica run does twice
//! the work in the same number of device iterations: with the replicas side by side on two
//! threads its time should stay within 1.2× of the one-replica run (the target), the rest
//! being the lockstep at each gradient all-reduce.
//!
//! Run: `cargo bench --bench replicas`.

#[path = "common.rs"]
mod common;

use common::{duration, load_average, median_secs};
use criterion::{criterion_group, criterion_main, Criterion};
use ipusim::compiler::BuildOptions;
use ipusim::runtime::{Session, SessionOptions};
use std::path::Path;
use std::time::Duration;

/// Device iterations (weight updates) per run.
const STEPS: u32 = 4;
/// The target: two replicas on two threads within this factor of one on one.
const TARGET: f64 = 1.2;

fn session(replicas: u32, threads: usize) -> Session {
    let options = SessionOptions {
        build: BuildOptions {
            device_iterations: Some(STEPS),
            replicas: Some(replicas),
            ..BuildOptions::default()
        },
        threads: Some(threads),
        ..SessionOptions::default()
    };
    Session::open(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/resnet_digits.ron"),
        options,
    )
    .unwrap()
}

fn replicas(c: &mut Criterion) {
    let mut one = session(1, 1);
    let mut two = session(2, 2);
    let t1 = median_secs(5, 1.0, || one.run().unwrap().summary.cycles.total);
    let t2 = median_secs(5, 1.0, || two.run().unwrap().summary.cycles.total);
    println!(
        "replicas: resnet_digits, {STEPS} device iterations per run (load average {})",
        load_average()
    );
    println!("  1 replica on 1 thread:   {} per run", duration(t1));
    println!(
        "  2 replicas on 2 threads: {} per run ({:.2}x; target within {TARGET}x: {})",
        duration(t2),
        t2 / t1,
        if t2 / t1 <= TARGET { "met" } else { "not met" }
    );
    let mut group = c.benchmark_group("replicas");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function("resnet_digits/1_replica_1_thread", |b| {
        b.iter(|| one.run().unwrap().summary.cycles.total)
    });
    group.bench_function("resnet_digits/2_replicas_2_threads", |b| {
        b.iter(|| two.run().unwrap().summary.cycles.total)
    });
    group.finish();
}

criterion_group!(benches, replicas);
criterion_main!(benches);

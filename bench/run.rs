//! Simulation throughput of `ipusim run`: the flagship (`programs/mlp_digits.ron`, MLP
//! 64-32-10 on batches of 50 digits) executed on the BSP engine, per device run of 30 steps
//! (one epoch: 30 weight updates, each a forward pass, backward pass and momentum update over
//! all 1,472 tiles of mk2), in each precision. The compile is outside the measurement; runs
//! continue training from run to run, as `ipusim run --steps` does.
//!
//! Run: `cargo bench --bench run`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ipusim::ir::Precision;
use ipusim::runtime::{Session, SessionOptions};
use ipusim::sim::numerics::{FpConfig, StochasticRounding};
use std::path::Path;
use std::time::Duration;

fn flagship_epoch(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/mlp_digits.ron");
    let mut group = c.benchmark_group("run");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.throughput(Throughput::Elements(30));
    for (precision, esr) in [
        (Precision::P32_32, StochasticRounding::Off),
        (Precision::P16_32, StochasticRounding::Off),
        (Precision::P16_16, StochasticRounding::On),
    ] {
        let options = SessionOptions {
            precision: Some(precision),
            fp: FpConfig {
                esr,
                ..FpConfig::default()
            },
            device_iterations: Some(30),
            ..SessionOptions::default()
        };
        let mut session = Session::open(&path, options).unwrap();
        group.bench_function(format!("mlp_digits_30_steps/{precision}"), |b| {
            b.iter(|| session.run().unwrap().summary.cycles.total)
        });
    }
    group.finish();
}

criterion_group!(benches, flagship_epoch);
criterion_main!(benches);

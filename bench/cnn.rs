//! A CNN training step simulated with exact values, against a native f32 step.
//!
//! The model zoo's CIFAR ResNet-20 (`ipusim_ir::resnet`, batch norm, 32×32×3 images, batch
//! 32) runs one training step per device run in a `Session` on synthetic data (compile
//! outside the measurement), in 16.16 and 32.32, on all cores and on one thread. The zoo's
//! ResNet-50 (224×224×3, batch 1, 16.16) follows, one step on all cores against one native
//! step printed, on one mk2 (`programs/resnet50.ron` fits it); criterion then measures
//! ResNet-20's step in 16.16 and 32.32 on all cores and on one thread (the ratio of the
//! means is the 1 -> 2 threads figure) and ResNet-50's, each beside its native step.
//!
//! The baseline (`native_step.rs`) is the same program's step graph in 32.32 run op by op
//! in plain f32 on one host thread: every convolution pass (forward, input gradient,
//! weight gradient) and matmul as im2col/col2im and `matrixmultiply`'s optimised sgemm,
//! the batch norms, ReLUs, pooling, loss and momentum update as vectorised loops, one
//! pass per op as an eager framework runs them (no fusion), each step from the initial
//! variables. The printed lines also give the ratio to the convolutions and matmuls alone
//! (the baseline before 2026-12-02). The CNN issue's target is 3×.
//!
//! Run: `cargo bench --bench cnn`.

#[path = "common.rs"]
mod common;
// Shared with tests/native_step.rs, which uses parts this benchmark does not.
#[allow(dead_code)]
#[path = "native_step.rs"]
mod native_step;

use common::{duration, load_average, median_secs};
use criterion::{criterion_group, criterion_main, Criterion};
use ipusim::compiler::build::step_graph;
use ipusim::compiler::{BuildOptions, Target};
use ipusim::ir::resnet::{resnet, Model};
use ipusim::ir::{Precision, Program};
use ipusim::runtime::{Session, SessionOptions};
use native_step::NativeStep;
use std::path::Path;
use std::time::{Duration, Instant};

/// The overhead target of the issue (simulated step time / native f32 step time).
const TARGET: f64 = 3.0;
/// Images per step of ResNet-20.
const BATCH: usize = 32;

/// The zoo's `name` at `batch` images per step (its default image size and classes).
fn program(name: &str, batch: usize) -> Program {
    let model = Model::named(name).expect("the model is in the zoo");
    let mut spec = model.default_spec();
    spec.batch = batch;
    resnet(&spec).expect("the zoo's ResNets build")
}

fn session(p: &Program, precision: Precision, threads: Option<usize>, target: Target) -> Session {
    let mut options = SessionOptions {
        build: BuildOptions {
            target,
            precision: Some(precision),
            device_iterations: Some(1),
            ..BuildOptions::default()
        },
        threads,
        ..SessionOptions::default()
    };
    options.streams.synthetic_data = true;
    Session::new(p, Path::new(""), options).expect("the ResNet compiles and fits")
}

/// The native f32 step of `p` (its 32.32 step graph, `native_step`), on synthetic data.
fn native(p: &Program) -> NativeStep {
    let options = BuildOptions {
        precision: Some(Precision::P32_32),
        ..BuildOptions::default()
    };
    let graph = step_graph(p, &options)
        .expect("the ResNet's step graph builds")
        .graph;
    let mut step = NativeStep::new(&graph).expect("a ResNet's step runs natively");
    let loss = graph.node(graph.find("loss").expect("the zoo's loss node"));
    let classes = graph.node(loss.inputs[0]).ty.shape.dims()[1];
    step.synthetic_infeeds(classes);
    step
}

/// Host seconds of one native step from the initial variables (restored before it, outside
/// the time: `NativeStep::reset`).
fn timed_step(step: &mut NativeStep) -> (f64, f64) {
    step.reset();
    let t = Instant::now();
    let conv = step.step();
    (t.elapsed().as_secs_f64(), conv)
}

/// Host seconds of one native step and of its convolutions (the median step's, after a
/// warm-up step).
fn native_secs(step: &mut NativeStep, samples: usize) -> (f64, f64) {
    let mut runs: Vec<(f64, f64)> = (0..samples.max(1) + 1)
        .map(|_| timed_step(step))
        .skip(1)
        .collect();
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    runs[runs.len() / 2]
}

/// The native step's line: its time, its convolutions' and their rate.
fn native_line(step: &NativeStep, (secs, conv): (f64, f64)) -> String {
    format!(
        "native f32 step (1 thread): {} ({} of it convolutions and matmuls, {:.1} GFLOP/s)",
        duration(secs),
        duration(conv),
        2.0 * step.macs() as f64 / conv / 1e9
    )
}

/// A simulated step's ratio to the native step, and to its convolutions alone.
fn ratio_line(step: f64, (secs, conv): (f64, f64)) -> String {
    let ratio = step / secs;
    format!(
        "{ratio:.1}x the native step (target {TARGET}x): {}; {:.1}x its convolutions alone",
        if ratio <= TARGET { "met" } else { "not met" },
        step / conv
    )
}

fn compare(p: &Program, native_step: &mut NativeStep) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let native = native_secs(native_step, 5);
    println!(
        "cnn step: ResNet-20, batch {BATCH}, 32x32x3 (load average {})",
        load_average()
    );
    println!("  {}", native_line(native_step, native));
    for precision in [Precision::P16_16, Precision::P32_32] {
        let mut times = Vec::new();
        for (threads, label) in [
            (None, format!("{cores} threads")),
            (Some(1), "1 thread".to_string()),
        ] {
            let mut s = session(p, precision, threads, Target::mk2());
            let step = median_secs(3, 0.0, || s.run().unwrap().summary.cycles.total);
            times.push(step);
            println!(
                "  simulated step {precision} ({label}): {}, {}",
                duration(step),
                ratio_line(step, native)
            );
        }
        println!(
            "  {precision}: 1 -> {cores} host threads: {:.2}x (target 1.7x)",
            times[1] / times[0]
        );
    }
}

/// ResNet-50 at batch 1 in 16.16 on all cores against its native step: one sample each
/// (after a warm-up run), printed.
fn compare_resnet50() {
    let p = program("resnet50", 1);
    let mut native_step = native(&p);
    let native = native_secs(&mut native_step, 1);
    let mut s = session(&p, Precision::P16_16, None, Target::mk2());
    let step = median_secs(1, 0.0, || s.run().unwrap().summary.cycles.total);
    println!(
        "cnn step: ResNet-50, batch 1, 224x224x3, 16.16 on mk2 (load average {})",
        load_average()
    );
    println!("  {}", native_line(&native_step, native));
    println!(
        "  simulated step (all cores): {}, {}",
        duration(step),
        ratio_line(step, native)
    );
}

/// The time of `iters` native steps, each from the initial variables.
fn native_iters(step: &mut NativeStep, iters: u64) -> Duration {
    (0..iters)
        .map(|_| Duration::from_secs_f64(timed_step(step).0))
        .sum()
}

fn cnn(c: &mut Criterion) {
    let p = program("resnet20", BATCH);
    let mut native20 = native(&p);
    compare(&p, &mut native20);
    compare_resnet50();
    let mut group = c.benchmark_group("cnn");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    // ResNet-20's step on all cores and on one thread, in both precisions: the ratio of
    // their means is the 1 -> 2 threads figure (the printed one is three one-shot steps).
    for precision in [Precision::P16_16, Precision::P32_32] {
        for (threads, name) in [
            (None, "resnet20_b32_step"),
            (Some(1), "resnet20_b32_step_one_thread"),
        ] {
            let mut s = session(&p, precision, threads, Target::mk2());
            group.bench_function(format!("{name}/{precision}"), |b| {
                b.iter(|| s.run().unwrap().summary.cycles.total)
            });
        }
    }
    group.bench_function("native_f32_step", |b| {
        b.iter_custom(|iters| native_iters(&mut native20, iters))
    });
    // ResNet-50 at batch 1 (16.16, all cores) and its native step (one thread).
    let p50 = program("resnet50", 1);
    let mut native50 = native(&p50);
    let mut s50 = session(&p50, Precision::P16_16, None, Target::mk2());
    group.bench_function("resnet50_b1_step/16.16", |b| {
        b.iter(|| s50.run().unwrap().summary.cycles.total)
    });
    group.bench_function("resnet50_native_f32_step", |b| {
        b.iter_custom(|iters| native_iters(&mut native50, iters))
    });
    group.finish();
}

criterion_group!(benches, cnn);
criterion_main!(benches);

//! Compile-time benchmarks: compiling a graph to an Executable plus its static cycle report.
//! Each graph's compile time and report time are also printed separately, with the
//! million-vertex target (compile + static report < 5 s).
//!
//! - `mlp4096_training_step`: the training step (`ipusim_ir::training::prepare`: forward,
//!   backward, momentum update) of an MLP 4096-4096-4096-10 on batch 256 in 16.32, on mk2.
//! - `million_vertices`: a chain of 680 element-wise ops over a 2048 x 2048 variable spread
//!   over all 1,472 tiles of mk2, a vertex per op and tile (its workers split it among
//!   them): 1,000,960 vertices, compiled without element-wise fusion (which would compute
//!   the chain in vertices of 16 fused ops: the target is the compiler's throughput on a
//!   million vertices).
//! - `resnet50_b1`: `programs/resnet50.ron` as the model zoo writes it (224×224, batch 1,
//!   16.16, one mk2): the whole build (training transform, compile) and the static report,
//!   what `ipusim compile programs/resnet50.ron` does, with the CNN issue's target
//!   (under 5 s); and `resnet50_b1_fresh_process`, that command itself.
//! - `hands_on_step2_fresh_process`: the hands-on day's step 2, `ipusim compile
//!   programs/hands_on_resnet101.ron --gradient-accumulation 3`, in a fresh process, against
//!   the many-IPU issue's target (each of the day's five compiles under 10 s); the five are
//!   also printed once each.
//!
//! The benchmark allocates through the `ipusim` binary's allocator ([`ipusim::allocator`]).
//! That allocator keeps freed memory for reuse, so the repeated compiles of one process
//! fault their memory in only once, where every `ipusim compile` is a fresh process whose
//! kernel clears the pages it touches. The ResNet-50 line is therefore also measured as the
//! command itself: the `ipusim` binary run on `programs/resnet50.ron` (median of 3).
//!
//! Run: `cargo bench --bench compile`.

#[path = "common.rs"]
mod common;

use common::{duration, load_average, median_secs};
use criterion::{criterion_group, criterion_main, Criterion};
use ipusim::compiler::{build, compile, BuildOptions, CompileOptions, CompileReport, Target};
use ipusim::ir::models::{mlp, MlpSpec};
use ipusim::ir::resnet::{resnet, Model};
use ipusim::ir::training::prepare;
use ipusim::ir::{DType, Graph, GraphBuilder, Init, Optimizer, Precision, Program, TrainingSpec};
use std::time::Duration;

#[global_allocator]
static ALLOCATOR: ipusim::allocator::Allocator = ipusim::allocator::Allocator;

fn mlp4096_training_step() -> Graph {
    let mut p = mlp(&MlpSpec {
        seed: 1,
        ..MlpSpec::new(256, &[4096, 4096, 4096, 10])
    })
    .unwrap();
    p.training = Some(TrainingSpec {
        loss: "loss".into(),
        optimizer: Optimizer::Momentum {
            learning_rate: 0.01,
            momentum: 0.9,
        },
        loss_scaling: 128.0,
        precision: Precision::P16_32,
        gradient_accumulation: 1,
        accumulation_dtype: None,
        stable_norm: false,
    });
    prepare(&p, None, false).unwrap().graph
}

fn million_vertex_graph() -> Graph {
    let mut b = GraphBuilder::new();
    let v = b
        .variable("v", DType::F32, [2048, 2048], Init::Zeros)
        .unwrap();
    let mut h = v;
    for i in 0..680 {
        h = if i % 2 == 0 {
            b.relu(h).unwrap()
        } else {
            b.mul(h, h).unwrap()
        };
    }
    b.assign(v, h).unwrap();
    b.finish()
}

fn compile_and_report(g: &Graph, target: &Target, opts: &CompileOptions) -> u64 {
    let exe = compile(g, target, opts).unwrap();
    let report = CompileReport::new("bench", Some(ipusim::ir::Precision::P16_32), &exe);
    report.total_cycles + exe.num_vertices() as u64
}

/// The model zoo's ResNet-50 at batch 1 (`programs/resnet50.ron`).
fn resnet50_b1() -> Program {
    let model = Model::named("resnet50").expect("the zoo has ResNet-50");
    let mut spec = model.default_spec();
    spec.batch = 1;
    resnet(&spec).expect("the zoo's ResNet-50 builds")
}

/// `ipusim compile`'s work on a program: build (training transform and compile) and the
/// static report.
fn build_and_report(p: &Program) -> u64 {
    let built = build(p, &BuildOptions::default()).unwrap();
    let report = ipusim::compiler::build::report(&p.name, &built.step, &built.executable);
    report.total_cycles + built.executable.num_vertices() as u64
}

/// `ipusim compile ARGS` as a user runs it: the binary in a process of its own (its report
/// goes to a pipe and is dropped), from the repository's root; `exit` is the exit code it
/// must give (2: out of memory).
fn fresh_compile(args: &[&str], exit: i32) -> u64 {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ipusim"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("compile")
        .args(args)
        .output()
        .expect("the ipusim binary runs");
    assert_eq!(
        out.status.code(),
        Some(exit),
        "ipusim compile {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout.len() as u64
}

/// `ipusim compile programs/resnet50.ron`.
fn fresh_compile_resnet50() -> u64 {
    fresh_compile(&["programs/resnet50.ron"], 0)
}

/// The hands-on day's five compiles (`docs/hands-on.md`): each step's options and the exit
/// code it gives (step 1 is out of memory).
const HANDS_ON: [(&str, &[&str], i32); 5] = [
    (
        "step 1 (32.32, accumulation 3)",
        &["--precision", "32.32", "--gradient-accumulation", "3"],
        2,
    ),
    (
        "step 2 (accumulation 3)",
        &["--gradient-accumulation", "3"],
        0,
    ),
    (
        "step 3 (accumulation 8)",
        &["--gradient-accumulation", "8"],
        0,
    ),
    (
        "step 4 (4 device iterations)",
        &["--gradient-accumulation", "8", "--device-iterations", "4"],
        0,
    ),
    (
        "step 5 (8-bit I/O)",
        &[
            "--gradient-accumulation",
            "8",
            "--device-iterations",
            "4",
            "--eight-bit-io",
        ],
        0,
    ),
];

/// The many-IPU issue's target for each of the hands-on day's compiles.
const HANDS_ON_TARGET_SECS: f64 = 10.0;

/// `ipusim compile programs/hands_on_resnet101.ron` with hands-on step `step`'s options.
fn fresh_compile_hands_on(step: usize) -> u64 {
    let (_, options, exit) = HANDS_ON[step];
    let mut args = vec!["programs/hands_on_resnet101.ron"];
    args.extend_from_slice(options);
    fresh_compile(&args, exit)
}

/// Target of the issues for the million-vertex graph and for ResNet-50 b1: compile plus
/// static report.
const TARGET_SECS: f64 = 5.0;

/// Prints the compile time and the static-report time of `g` (medians of 3).
fn print_times(name: &str, g: &Graph, target: &Target, opts: &CompileOptions) -> f64 {
    let exe = compile(g, target, opts).unwrap();
    let compile_secs = median_secs(3, 0.0, || compile(g, target, opts).unwrap().num_vertices());
    let report_secs = median_secs(3, 0.0, || {
        CompileReport::new("bench", Some(ipusim::ir::Precision::P16_32), &exe).total_cycles
    });
    let copies: usize = exe.exchanges.iter().map(|e| e.copies.len()).sum();
    println!(
        "compile {name}: {} nodes, {} vertices, {copies} exchange copies: compile {}, static report {}, total {} (load average {})",
        g.len(),
        exe.num_vertices(),
        duration(compile_secs),
        duration(report_secs),
        duration(compile_secs + report_secs),
        load_average()
    );
    compile_secs + report_secs
}

/// The verdict of a compile-plus-report time against [`TARGET_SECS`].
fn verdict(secs: f64) -> &'static str {
    if secs < TARGET_SECS {
        "met"
    } else {
        "not met"
    }
}

fn bench(c: &mut Criterion) {
    ipusim::allocator::configure();
    let target = Target::mk2();
    let opts = CompileOptions::default();
    let mlp = mlp4096_training_step();
    print_times("mlp4096_training_step", &mlp, &target, &opts);
    let chain = million_vertex_graph();
    let unfused = CompileOptions {
        elementwise_fusion: false,
        ..opts.clone()
    };
    let total = print_times("million_vertices", &chain, &target, &unfused);
    println!(
        "million-vertex compile + static report: {} (target < {TARGET_SECS} s): {}",
        duration(total),
        verdict(total)
    );
    let r50 = resnet50_b1();
    let r50_secs = median_secs(3, 0.0, || build_and_report(&r50));
    println!(
        "resnet50_b1 build + static report, in this process: {} (target < {TARGET_SECS} s): {} (load average {})",
        duration(r50_secs),
        verdict(r50_secs),
        load_average()
    );
    let fresh = median_secs(3, 0.0, fresh_compile_resnet50);
    println!(
        "resnet50_b1 as a fresh `ipusim compile programs/resnet50.ron`: {} (target < {TARGET_SECS} s): {} (load average {})",
        duration(fresh),
        verdict(fresh),
        load_average()
    );
    for (step, (name, _, _)) in HANDS_ON.iter().enumerate() {
        let secs = median_secs(1, 0.0, || fresh_compile_hands_on(step));
        println!(
            "hands-on {name} as a fresh `ipusim compile programs/hands_on_resnet101.ron`: {} (target < {HANDS_ON_TARGET_SECS} s): {} (load average {})",
            duration(secs),
            if secs < HANDS_ON_TARGET_SECS { "met" } else { "not met" },
            load_average()
        );
    }
    let mut group = c.benchmark_group("compile");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(30));
    group.bench_function("mlp4096_training_step", |b| {
        b.iter(|| compile_and_report(&mlp, &target, &opts))
    });
    let vertices = compile(&chain, &target, &unfused).unwrap().num_vertices();
    assert!(vertices >= 1_000_000, "only {vertices} vertices");
    group.bench_function("million_vertices", |b| {
        b.iter(|| compile_and_report(&chain, &target, &unfused))
    });
    group.measurement_time(Duration::from_secs(120));
    group.bench_function("resnet50_b1", |b| b.iter(|| build_and_report(&r50)));
    group.bench_function("resnet50_b1_fresh_process", |b| {
        b.iter(fresh_compile_resnet50)
    });
    group.measurement_time(Duration::from_secs(150));
    group.bench_function("hands_on_step2_fresh_process", |b| {
        b.iter(|| fresh_compile_hands_on(1))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

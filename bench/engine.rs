//! Simulation throughput and host-thread scaling of the BSP engine (exact values, cycle
//! accounting):
//!
//! - `matmul_1024`: one 1024 x 1024 x 1024 matmul in 16.32 (FP16 operands, FP32 partials,
//!   FP16 result) on all 1,472 tiles of mk2: the operands are variables, the result is
//!   outfed. Printed: simulated FLOPs and tile-cycles (device cycles x tiles) per host
//!   second on 1 and on 2 host threads, the speed-up from 1 to 2 threads (target 1.7x), and
//!   the native f32 matmul of the same size on one thread ([`native::matmul`]) as the
//!   baseline, and the ratio to `matrixmultiply`'s optimised sgemm on one thread (goal 0.5x).
//! - `train_mlp_step`: one device run (2 iterations x 2 micro-batches) of
//!   `tests/programs/sim/train_mlp.ron` on a 16-tile mk2.
//!
//! Run: `cargo bench --bench engine`.

#[path = "common.rs"]
mod common;
#[path = "native.rs"]
mod native;

use common::{duration, load_average, matmul_executable, median_secs, MATMUL_N as N};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ipusim::compiler::{BuildOptions, Executable, Target};
use ipusim::runtime::launch::{launch, LaunchOptions};
use ipusim::sim::engine::{Engine, EngineOptions};
use ipusim::sim::host::QueueHost;
use std::sync::Arc;
use std::time::Duration;

/// The thread-scaling target of the issue.
const TARGET_SPEEDUP: f64 = 1.7;

fn engine(exe: &Arc<Executable>, threads: usize) -> Engine {
    let options = EngineOptions {
        threads: Some(threads),
        ..EngineOptions::default()
    };
    Engine::new(Arc::clone(exe), options).unwrap()
}

/// One device run (the outfed result dropped afterwards); returns its device cycles.
fn run(engine: &mut Engine, host: &mut QueueHost) -> u64 {
    let cycles = engine.run(host).unwrap().cycles.total;
    host.outfeeds.clear();
    cycles
}

fn matmul(c: &mut Criterion) {
    let exe = matmul_executable();
    let flops = 2.0 * (N * N * N) as f64;
    let tiles = f64::from(exe.target.tiles);
    let a: Vec<f32> = (0..N * N).map(|i| (i % 7) as f32 * 0.25 - 0.75).collect();
    let bm: Vec<f32> = (0..N * N).map(|i| (i % 5) as f32 * 0.25 - 0.5).collect();
    let mut cm = vec![0f32; N * N];
    let native = median_secs(5, 0.5, || native::matmul(N, &a, &bm, &mut cm));
    // The optimised sgemm of a well-kept crate (one thread), the measure of what the
    // host can do.
    let sgemm = median_secs(5, 0.5, || {
        // SAFETY: three N x N row-major matrices, `cm` distinct from `a` and `bm`.
        unsafe {
            matrixmultiply::sgemm(
                N,
                N,
                N,
                1.0,
                a.as_ptr(),
                N as isize,
                1,
                bm.as_ptr(),
                N as isize,
                1,
                0.0,
                cm.as_mut_ptr(),
                N as isize,
                1,
            )
        };
        cm[0]
    });
    println!(
        "matmul {N}x{N}x{N} 16.32 on mk2 ({} vertices; load average {})",
        exe.num_vertices(),
        load_average()
    );
    println!(
        "  native f32 matmul (1 thread): {}, {:.1} GFLOP/s",
        duration(native),
        flops / native / 1e9
    );
    println!(
        "  matrixmultiply sgemm (1 thread): {}, {:.1} GFLOP/s",
        duration(sgemm),
        flops / sgemm / 1e9
    );
    let mut secs = Vec::new();
    for threads in [1, 2] {
        let mut e = engine(&exe, threads);
        let mut host = QueueHost::new();
        let cycles = run(&mut e, &mut host);
        let t = median_secs(5, 1.0, || run(&mut e, &mut host));
        println!(
            "matmul {N}^3 sim, {threads} thread(s): {} per run ({cycles} device cycles): {:.2} simulated GFLOP/s, {:.2} G simulated tile-cycles/s; native f32 {:.1} GFLOP/s, sim/native time {:.1}x",
            duration(t),
            flops / t / 1e9,
            cycles as f64 * tiles / t / 1e9,
            flops / native / 1e9,
            t / native
        );
        println!(
            "matmul {N}^3 sim, {threads} thread(s) against the optimised sgemm on 1 thread: {:.2}x its speed (goal 0.5x): {}",
            sgemm / t,
            if sgemm / t >= 0.5 { "met" } else { "not met" }
        );
        secs.push(t);
    }
    let speedup = secs[0] / secs[1];
    println!(
        "matmul {N}^3 threads: 1 thread {}, 2 threads {}, speed-up {speedup:.2}x (target {TARGET_SPEEDUP}x): {}",
        duration(secs[0]),
        duration(secs[1]),
        if speedup >= TARGET_SPEEDUP { "met" } else { "not met" }
    );
    let mut group = c.benchmark_group("engine");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10))
        .throughput(Throughput::Elements(flops as u64));
    for threads in [1, 2] {
        let mut e = engine(&exe, threads);
        let mut host = QueueHost::new();
        group.bench_function(format!("matmul_{N}_threads_{threads}"), |bench| {
            bench.iter(|| run(&mut e, &mut host))
        });
    }
    group.bench_function(format!("native_f32_matmul_{N}"), |bench| {
        bench.iter(|| native::matmul(N, &a, &bm, &mut cm))
    });
    group.finish();
}

fn train_mlp(c: &mut Criterion) {
    let mut target = Target::mk2();
    target.tiles = 16;
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/programs/sim/train_mlp.ron"
    );
    let mut l = launch(
        std::path::Path::new(path),
        &LaunchOptions {
            build: BuildOptions {
                target,
                ..BuildOptions::default()
            },
            engine: EngineOptions::default(),
        },
    )
    .unwrap();
    c.bench_function("engine/train_mlp_step", |bench| {
        bench.iter(|| l.engine.run(&mut l.host).unwrap().cycles.total)
    });
}

criterion_group!(benches, matmul, train_mlp);
criterion_main!(benches);

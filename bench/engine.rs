//! Simulation benchmarks of the BSP engine (exact values, cycle accounting):
//!
//! - `matmul_512`: one 512 x 512 x 512 FP16 matmul with FP32 partials on all 1,472 tiles of
//!   mk2 (variables in, result outfed), on 1 and 2 host threads; prints simulated FLOPs and
//!   tile-cycles per host second.
//! - `train_mlp_step`: one device run (2 iterations x 2 micro-batches) of
//!   `tests/programs/sim/train_mlp.ron` on a 16-tile mk2.
//!
//! Run: `cargo bench --bench engine`.

use criterion::{criterion_group, criterion_main, Criterion};
use ipusim::compiler::{compile, CompileOptions, Target};
use ipusim::ir::{DType, GraphBuilder, Init};
use ipusim::sim::engine::{Engine, EngineOptions};
use ipusim::sim::host::QueueHost;
use ipusim::sim::launch::{launch, LaunchOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};

const N: usize = 512;

fn matmul_engine(threads: usize) -> Engine {
    let mut b = GraphBuilder::new();
    let x = b
        .variable(
            "x",
            DType::F16,
            [N, N],
            Init::Uniform {
                low: -1.0,
                high: 1.0,
                seed: 1,
            },
        )
        .unwrap();
    let w = b
        .variable(
            "w",
            DType::F16,
            [N, N],
            Init::Uniform {
                low: -1.0,
                high: 1.0,
                seed: 2,
            },
        )
        .unwrap();
    let y = b.matmul(x, w).unwrap();
    b.outfeed("y", y).unwrap();
    let exe = compile(&b.finish(), &Target::mk2(), &CompileOptions::default()).unwrap();
    Engine::new(
        Arc::new(exe),
        EngineOptions {
            threads: Some(threads),
            ..EngineOptions::default()
        },
    )
    .unwrap()
}

fn matmul(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    for threads in [1, 2] {
        let mut engine = matmul_engine(threads);
        let mut host = QueueHost::new();
        // Figures of one run, printed with the benchmark.
        let start = Instant::now();
        let s = engine.run(&mut host).unwrap();
        let secs = start.elapsed().as_secs_f64();
        let tile_cycles: u64 = s
            .tiles
            .iter()
            .map(|t| t.on_tile_execute + t.do_exchange)
            .sum();
        println!(
            "matmul {N}^3 on mk2, {threads} thread(s): {:.2} simulated GFLOP/s, {:.2} G tile-cycles/s ({} cycles)",
            2.0 * (N * N * N) as f64 / secs / 1e9,
            tile_cycles as f64 / secs / 1e9,
            s.cycles.total
        );
        group.bench_function(format!("matmul_{N}_threads_{threads}"), |bench| {
            bench.iter(|| engine.run(&mut host).unwrap().cycles.total)
        });
    }
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
            target,
            precision: None,
            partials: Default::default(),
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

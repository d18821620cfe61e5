//! Helpers shared by the benchmark binaries (included with `#[path = "common.rs"] mod
//! common;`): a robust timer for the figures each benchmark prints next to its baseline,
//! the rendering of those lines, and the large matmul several benchmarks simulate.
//!
//! Criterion measures every benchmark too; these figures exist so that one run prints the
//! simulator's figure and the baseline it is held against side by side, measured the same way
//! a few seconds apart (the development machine is shared: medians of several samples, each
//! long enough to swamp timer noise).

#![allow(dead_code)]

use ipusim::compiler::{compile, CompileOptions, Executable, Target};
use ipusim::ir::{DType, GraphBuilder, Init};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

/// The median host time of one call of `f`, in seconds: `samples` samples of as many calls as
/// fill `sample_secs` (at least one call each; one untimed warm-up call first).
pub fn median_secs<R>(samples: usize, sample_secs: f64, mut f: impl FnMut() -> R) -> f64 {
    let start = Instant::now();
    black_box(f());
    let once = start.elapsed().as_secs_f64().max(1e-9);
    let calls = ((sample_secs / once).ceil() as usize).max(1);
    let mut times: Vec<f64> = (0..samples.max(1))
        .map(|_| {
            let start = Instant::now();
            for _ in 0..calls {
                black_box(f());
            }
            start.elapsed().as_secs_f64() / calls as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// A duration in the unit that reads best (`1.23 s`, `4.56 ms`, `7.89 µs`).
pub fn duration(secs: f64) -> String {
    if secs >= 1.0 {
        format!("{secs:.2} s")
    } else if secs >= 1e-3 {
        format!("{:.2} ms", secs * 1e3)
    } else {
        format!("{:.2} µs", secs * 1e6)
    }
}

/// The current load average of the machine (first figure of `/proc/loadavg`), printed with
/// every measurement: figures taken under load are not comparable.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// Side of the large matmul.
pub const MATMUL_N: usize = 1024;

/// `y = x · w` for `MATMUL_N × MATMUL_N` FP16 variables (uniform in [-1, 1]), `y` outfed,
/// compiled for mk2 with the default options (16.32: FP32 partials).
pub fn matmul_executable() -> Arc<Executable> {
    const N: usize = MATMUL_N;
    let mut b = GraphBuilder::new();
    let uniform = |seed| Init::Uniform {
        low: -1.0,
        high: 1.0,
        seed,
    };
    let x = b.variable("x", DType::F16, [N, N], uniform(1)).unwrap();
    let w = b.variable("w", DType::F16, [N, N], uniform(2)).unwrap();
    let y = b.matmul(x, w).unwrap();
    b.outfeed("y", y).unwrap();
    Arc::new(compile(&b.finish(), &Target::mk2(), &CompileOptions::default()).unwrap())
}

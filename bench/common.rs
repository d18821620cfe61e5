//! Helpers shared by the benchmark binaries (included with `#[path = "common.rs"] mod
//! common;`): a robust timer for the figures each benchmark prints next to its baseline, and
//! the rendering of those lines.
//!
//! Criterion measures every benchmark too; these figures exist so that one run prints the
//! simulator's figure and the baseline it is held against side by side, measured the same way
//! a few seconds apart (the development machine is shared: medians of several samples, each
//! long enough to swamp timer noise).

#![allow(dead_code)]

use std::hint::black_box;
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

/// Calls `body` compiled for AVX-512 or AVX2+FMA when the CPU has them (the native
/// baselines get the same vector width as the simulator's own kernels), else as built.
#[macro_export]
macro_rules! native_dispatch {
    ($(#[$meta:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty => $body:path) => {
        $(#[$meta])*
        fn $name($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx512bw,avx2,fma")]
                unsafe fn avx512($($arg: $ty),*) -> $ret {
                    $body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) -> $ret {
                    $body($($arg),*)
                }
                if std::is_x86_feature_detected!("avx512f")
                    && std::is_x86_feature_detected!("avx512dq")
                    && std::is_x86_feature_detected!("avx512vl")
                    && std::is_x86_feature_detected!("avx512bw")
                {
                    // SAFETY: the CPU supports every feature `avx512` was compiled for.
                    return unsafe { avx512($($arg),*) };
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: the CPU supports every feature `avx2` was compiled for.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
}

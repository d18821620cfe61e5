//! Peak memory of a simulation, measured with a counting global allocator (live heap bytes
//! and their peak, exact), against the simulated chip's used bytes (the memory plan's total:
//! data, vertex state and code over all tiles) plus the host's data (the stream bytes of the
//! run, in and out). Target: within 1.5x.
//!
//! - the flagship (`programs/mlp_digits.ron`, 16.32, one device run of 300 steps) in a
//!   `Session`;
//! - the 1024 x 1024 x 1024 matmul of `bench/engine.rs` (16.32 on mk2) on an `Engine`.
//!
//! Each is measured in two phases: compiling and building the engine (the peak printed for
//! information), then running, whose peak counts everything live at the time — the
//! executable, the engine's tile memory and plans, the host's buffers (for the matmul the
//! engine build is in the second phase).
//!
//! Run: `cargo bench --bench memory`.

#[path = "common.rs"]
mod common;

use common::load_average;
use ipusim::compiler::Executable;
use ipusim::runtime::{Session, SessionOptions};
use ipusim::sim::engine::{Engine, EngineOptions};
use ipusim::sim::host::QueueHost;
use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// The system allocator, counting live bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            grow(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            grow(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        LIVE.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Relaxed);
            grow(new_size);
        }
        p
    }
}

fn grow(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Relaxed) + bytes;
    PEAK.fetch_max(live, Relaxed);
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> usize {
    LIVE.load(Relaxed)
}

/// Starts a new phase: the peak restarts from the live bytes now.
fn reset_peak() -> usize {
    let now = live();
    PEAK.store(now, Relaxed);
    now
}

fn mib(bytes: usize) -> String {
    format!("{:.2} MiB", bytes as f64 / (1 << 20) as f64)
}

/// Prints one workload's figures against the target.
fn report(name: &str, exe: &Executable, sim_peak: usize, host: u64) {
    let chip = exe.memory.total_bytes;
    let budget = chip + host;
    let ratio = sim_peak as f64 / budget as f64;
    println!(
        "{name}: peak {} (live heap: executable, engine and host buffers) vs chip used {} + host data {} = {}: {ratio:.2}x (target 1.5x): {}",
        mib(sim_peak),
        mib(chip as usize),
        mib(host as usize),
        mib(budget as usize),
        if ratio <= 1.5 { "met" } else { "not met" }
    );
}

fn flagship() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/mlp_digits.ron");
    let base = reset_peak();
    let mut session = Session::open(&path, SessionOptions::default()).unwrap();
    let open_peak = PEAK.load(Relaxed) - base;
    let opened = reset_peak() - base;
    let out = session.run().unwrap();
    let run_peak = PEAK.load(Relaxed) - base;
    let host = out.summary.stream_bytes_in + out.summary.stream_bytes_out;
    println!(
        "flagship: Session::open (compile + engine) peak {}, live after open {}",
        mib(open_peak),
        mib(opened)
    );
    report(
        "flagship mlp_digits 16.32, one run of 300 steps (Session::run)",
        session.executable(),
        run_peak,
        host,
    );
}

fn matmul() {
    const N: usize = common::MATMUL_N;
    let base = reset_peak();
    let exe = common::matmul_executable();
    let compile_peak = PEAK.load(Relaxed) - base;
    let exe_bytes = reset_peak() - base;
    let mut engine = Engine::new(Arc::clone(&exe), EngineOptions::default()).unwrap();
    let engine_bytes = live() - base - exe_bytes;
    let mut host = QueueHost::new();
    let s = engine.run(&mut host).unwrap();
    let sim_peak = PEAK.load(Relaxed) - base;
    let host_bytes = s.stream_bytes_in + s.stream_bytes_out;
    println!(
        "matmul {N}^3: compile peak {}, executable {}, engine after build {} (tile memory {})",
        mib(compile_peak),
        mib(exe_bytes),
        mib(engine_bytes),
        mib(engine.memory_bytes())
    );
    report(
        &format!("matmul {N}^3 16.32 (Engine)"),
        &exe,
        sim_peak,
        host_bytes,
    );
}

fn main() {
    // `cargo bench` passes harness arguments (`--bench`); this binary takes none.
    println!("peak memory (load average {})", load_average());
    flagship();
    matmul();
}

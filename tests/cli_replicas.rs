//! Replicas simulated (`--replicas R`, `replication_factor`): each replica an engine of its
//! own, fed its slice of the data (global micro-batch `k·R + r`), run side by side on host
//! threads up to each gradient all-reduce, whose mean (in replica order) every replica then
//! holds. A run of `R` replicas covers the same global batch as one IPU accumulating `R`
//! times as many micro-batches, and gives its weights (bit for bit here: two replicas of
//! FP16 gradients average exactly in f32, as the accumulation adds them); results do not
//! depend on the host thread count.

use std::path::Path;

mod common;
use common::{ipusim, json, run_saving, scratch, stderr};

const MLP: &str = "tests/programs/sim/train_mlp.ron";
const SHARDED: &str = "tests/programs/sim/sharded_mlp.ron";
const RESNET: &str = "programs/resnet_digits.ron";

/// `ipusim run PROGRAM ... ARGS` (see [`run_saving`]): the JSON output and the saved model
/// weights (the variables that are not gradient accumulators, which hold one replica's own
/// micro-batches).
fn run(program: &str, dir: &Path, tag: &str, args: &[&str]) -> (serde_json::Value, String) {
    let (out, saved) = run_saving(program, dir, tag, args);
    let weights: Vec<&serde_json::Value> = saved
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| !v["name"].as_str().unwrap().contains("grad_accum"))
        .collect();
    (out, serde_json::to_string(&weights).unwrap())
}

#[test]
fn replicas_give_the_weights_of_one_ipu_over_the_same_global_batch() {
    let dir = scratch("replicas-values");
    // Two replicas of one micro-batch each against one IPU accumulating two: the same
    // micro-batches per weight update, the same losses in the same order, the same weights.
    let (one, one_w) = run(
        MLP,
        &dir,
        "one",
        &["--steps", "4", "--gradient-accumulation", "2"],
    );
    let (two, two_w) = run(
        MLP,
        &dir,
        "two",
        &[
            "--steps",
            "4",
            "--gradient-accumulation",
            "1",
            "--replicas",
            "2",
        ],
    );
    assert_eq!(one["outfeeds"], two["outfeeds"]);
    assert_eq!(one_w, two_w);
    // The same with a pipeline of three IPUs in each replica (six IPUs).
    let (p1, p1_w) = run(
        SHARDED,
        &dir,
        "p1",
        &["--steps", "2", "--gradient-accumulation", "2"],
    );
    let (p2, p2_w) = run(
        SHARDED,
        &dir,
        "p2",
        &[
            "--steps",
            "2",
            "--gradient-accumulation",
            "1",
            "--replicas",
            "2",
        ],
    );
    assert_eq!(p1["outfeeds"], p2["outfeeds"]);
    assert_eq!(p1_w, p2_w);
    // A replica's run costs its own cycles plus the all-reduce: as the compile report says.
    let report = json(&ipusim(&[
        "compile",
        MLP,
        "--json",
        "--gradient-accumulation",
        "1",
        "--replicas",
        "2",
    ]));
    let runs = two["report"]["runs"].as_u64().unwrap();
    assert_eq!(
        two["report"]["executed"]["total_cycles"].as_u64(),
        Some(runs * report["total_cycles"].as_u64().unwrap())
    );
}

#[test]
fn replicated_results_do_not_depend_on_host_threads() {
    let dir = scratch("replicas-threads");
    let args = |threads: &'static str| {
        [
            "--device-iterations",
            "2",
            "--steps",
            "2",
            "--replicas",
            "2",
            "--sr",
            "on",
            "--threads",
            threads,
        ]
    };
    let (a, a_w) = run(RESNET, &dir, "t1", &args("1"));
    let (b, b_w) = run(RESNET, &dir, "t2", &args("2"));
    assert_eq!(a["outfeeds"], b["outfeeds"]);
    assert_eq!(a_w, b_w);
}

#[test]
fn replicas_the_debugger_or_the_data_cannot_take_are_errors() {
    let o = ipusim(&["step", MLP, "--replicas", "2"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("`ipusim step` steps one replica"),
        "{}",
        stderr(&o)
    );
}

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

/// The saved variables of a run, by name (their order follows the executable's tensors,
/// which sharding changes).
fn by_name(saved: &serde_json::Value) -> std::collections::BTreeMap<String, serde_json::Value> {
    saved
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap().to_string(), v.clone()))
        .collect()
}

/// True for the name of an optimizer state variable.
fn is_state(name: &str) -> bool {
    ["/momentum", "/adam_m", "/adam_v"]
        .iter()
        .any(|s| name.ends_with(s))
}

/// Bytes replicated tensor sharding saves per replica on the optimizer state of `saved`:
/// each state tensor of `n >= replicas` elements keeps `ceil(n / replicas)` of them.
fn state_bytes_saved(saved: &serde_json::Value, replicas: usize) -> u64 {
    saved
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| is_state(v["name"].as_str().unwrap()))
        .map(|v| {
            let n: u64 = v["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .product();
            let es = if v["dtype"] == "f16" { 2 } else { 4 };
            if n < replicas as u64 {
                0
            } else {
                (n - n.div_ceil(replicas as u64)) * es
            }
        })
        .sum()
}

#[test]
fn sharding_the_optimizer_state_keeps_every_value_and_saves_its_memory() {
    let dir = scratch("replicas-sharded-state");
    const ADAMW: &str = "tests/programs/sim/adamw_mlp.ron";
    const RTS: &str = "--replicated-optimizer-state-sharding";
    // Momentum on 2 replicas; AdamW (m in FP16, v in FP32) pipelined over 2 IPUs in each of
    // 3 replicas, so that the last shards are padded.
    for (program, replicas) in [(MLP, 2usize), (ADAMW, 3)] {
        let r = replicas.to_string();
        let base = ["--steps", "4", "--replicas", r.as_str()];
        let (plain, plain_vars) = run_saving(program, &dir, "plain", &base);
        let (sharded, sharded_vars) =
            run_saving(program, &dir, "sharded", &[&base[..], &[RTS]].concat());
        // The same losses, weights and optimizer state (gathered from the shards), bit for
        // bit: the reduce-scatter's mean is the all-reduce's, element by element.
        assert_eq!(plain["outfeeds"], sharded["outfeeds"]);
        assert_eq!(by_name(&plain_vars), by_name(&sharded_vars), "{program}");
        // Each replica keeps 1/R of the state.
        let compile = |extra: &[&str]| {
            let mut a = vec!["compile", program, "--json", "--replicas", r.as_str()];
            a.extend_from_slice(extra);
            json(&ipusim(&a))
        };
        let (p, s) = (compile(&[]), compile(&[RTS]));
        let vars = |x: &serde_json::Value| x["memory"]["categories"]["variables"].as_u64().unwrap();
        let saved = state_bytes_saved(&plain_vars, replicas);
        assert!(saved > 0);
        // The variables fall by the state beyond one shard, plus at most the alignment
        // padding (under 8 bytes a slice) of the full state's slices on the used tiles.
        let states = by_name(&plain_vars).keys().filter(|n| is_state(n)).count() as u64;
        let tiles = p["used_tiles"].as_u64().unwrap();
        let fell = vars(&p) - vars(&s);
        assert!(
            (saved..saved + 7 * states * tiles).contains(&fell),
            "{program}: {fell} bytes fewer, {saved} bytes of state beyond a shard"
        );
        // The gradients of the sharded state are reduce-scattered instead of all-reduced,
        // and each update's result all-gathered.
        let count = |x: &serde_json::Value, kind: &str| x["collectives"][kind]["count"].as_u64();
        assert_eq!(count(&p, "reduce_scatter"), Some(0));
        let scattered = count(&s, "reduce_scatter").unwrap();
        assert!(scattered > 0);
        assert_eq!(count(&s, "all_gather"), Some(scattered));
        assert_eq!(
            count(&s, "all_reduce").unwrap() + scattered,
            count(&p, "all_reduce").unwrap()
        );
        let text = common::stdout(&ipusim(&[
            "compile",
            program,
            "--replicas",
            r.as_str(),
            RTS,
        ]));
        assert!(text.contains("replicated tensor sharding"), "{text}");
        // Executed cycles are the estimate's.
        let runs = sharded["report"]["runs"].as_u64().unwrap();
        assert_eq!(
            sharded["report"]["executed"]["total_cycles"].as_u64(),
            Some(runs * s["total_cycles"].as_u64().unwrap())
        );
        // Checkpoints hold whole tensors either way: one saved without sharding continues
        // under sharding as it would without.
        let ckpt = dir.join("plain.json");
        let load = [&base[..], &["--load-variables", ckpt.to_str().unwrap()]].concat();
        let (_, go_on) = run_saving(program, &dir, "go-on", &load);
        let load_sharded = [&load[..], &[RTS]].concat();
        let (_, go_on_sharded) = run_saving(program, &dir, "go-on-sharded", &load_sharded);
        assert_eq!(by_name(&go_on), by_name(&go_on_sharded), "{program}");
    }
    // The program field does what the flag does.
    let text = std::fs::read_to_string(ADAMW).unwrap().replacen(
        "device_iterations: 2,",
        "device_iterations: 2,\n    replication_factor: 3,\n    \
             replicated_optimizer_state_sharding: true,",
        1,
    );
    let file = dir.join("adamw_rts.ron");
    std::fs::write(&file, text).unwrap();
    let field = json(&ipusim(&["compile", file.to_str().unwrap(), "--json"]));
    let flag = json(&ipusim(&[
        "compile",
        ADAMW,
        "--json",
        "--replicas",
        "3",
        RTS,
    ]));
    assert_eq!(field["collectives"], flag["collectives"]);
    assert_eq!(field["memory"]["categories"], flag["memory"]["categories"]);
}

#[test]
fn collectives_written_for_another_replica_count_are_errors() {
    let dir = scratch("replicas-bad-collectives");
    let tour = std::fs::read_to_string("tests/programs/sim/op_tour.ron").unwrap();
    let write = |name: &str, text: String| {
        let f = dir.join(name);
        std::fs::write(&f, text).unwrap();
        f
    };
    // A shard whose size is not the gathered shape's over the replicas: the node and line.
    let shape = write(
        "shape.ron",
        tour.replace(
            "ReplicatedReduceScatter(replicas: 1)",
            "ReplicatedReduceScatter(replicas: 2)",
        ),
    );
    let o = ipusim(&["compile", shape.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(":64:")
            && stderr(&o).contains("node 'gathered' (ReplicatedAllGather)")
            && stderr(&o).contains("needs a shard of shape [60], got [30]"),
        "{}",
        stderr(&o)
    );
    // Collectives made for 2 replicas in a program compiled for 1.
    let count = write("count.ron", tour.replace("(replicas: 1", "(replicas: 2"));
    let o = ipusim(&["compile", count.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("node 'shard' (ReplicatedReduceScatter)")
            && stderr(&o).contains("made for 2 replicas, but the program is compiled for 1"),
        "{}",
        stderr(&o)
    );
}

//! Programs over several IPUs and the hands-on day's options through the built binary: split
//! points from the program or `--pipeline-splits`, the per-IPU report rows, the batch
//! arithmetic, the values of a sharded run against the one-IPU run, recomputation, 8-bit I/O,
//! and the errors of bad placements.

use std::path::Path;
use std::process::Output;

mod common;
use common::{ipusim, json, run_saving, scratch, stderr, stdout, tiny_resnet};

const SHARDED: &str = "tests/programs/sim/sharded_mlp.ron";
const SINGLE: &str = "tests/programs/sim/train_mlp.ron";

/// Asserts that `o` is an error (exit 1) whose message contains `text`.
fn fails(o: &Output, text: &str) {
    assert_eq!(o.status.code(), Some(1), "{}", stderr(o));
    assert!(stderr(o).contains(text), "{}", stderr(o));
}

/// `ipusim run PROGRAM --steps 4 ... ARGS` (see [`run_saving`]): the JSON output and the
/// saved variables as text.
fn run(program: &str, dir: &Path, tag: &str, args: &[&str]) -> (serde_json::Value, String) {
    let (out, saved) = run_saving(program, dir, tag, &[&["--steps", "4"], args].concat());
    (out, saved.to_string())
}

#[test]
fn a_sharded_training_run_gives_the_one_ipu_values_bit_for_bit() {
    let dir = scratch("pipeline-values");
    // Sequential sharding keeps every op's summation order: the same values, not just close.
    let (one, one_vars) = run(SINGLE, &dir, "one", &[]);
    let (three, three_vars) = run(SHARDED, &dir, "three", &[]);
    assert_eq!(one["outfeeds"], three["outfeeds"]);
    assert_eq!(one_vars, three_vars);
    // The same split from the command line, on the one-IPU program.
    let (cli, cli_vars) = run(SINGLE, &dir, "cli", &["--pipeline-splits", "h,logits"]);
    assert_eq!(one["outfeeds"], cli["outfeeds"]);
    assert_eq!(one_vars, cli_vars);
    // The crossings cost link time and external syncs: more cycles than on one IPU.
    let cycles = |v: &serde_json::Value| v["report"]["total_cycles"].as_u64().unwrap();
    assert!(
        cycles(&three) > cycles(&one),
        "{} vs {}",
        cycles(&three),
        cycles(&one)
    );
    // Executed cycles equal the static report's (two runs of two device iterations).
    let report = json(&ipusim(&["compile", SHARDED, "--json"]));
    assert_eq!(
        three["report"]["executed"]["total_cycles"].as_u64(),
        Some(2 * report["total_cycles"].as_u64().unwrap()),
        "executed vs static"
    );
}

#[test]
fn the_report_has_a_row_per_ipu_with_the_labels_on_the_loss_ipu() {
    let r = json(&ipusim(&["compile", SHARDED, "--json"]));
    let ipus = r["ipus"].as_array().unwrap();
    assert_eq!(ipus.len(), 3);
    let field = |i: usize, f: &str| ipus[i][f].as_u64().unwrap();
    // Stage 2 (the loss) is on IPU 1: the labels, i32 [8] per micro-batch, 4 micro-batches
    // per run, land there; the loss, accuracy and peak outfeeds leave from there.
    assert_eq!(field(1, "stream_bytes_host_to_device"), 8 * 4 * 4);
    assert_eq!(field(0, "stream_bytes_device_to_host"), 0);
    assert!(field(1, "stream_bytes_device_to_host") > 0);
    assert_eq!(
        (0..3)
            .map(|i| field(i, "stream_bytes_host_to_device"))
            .sum::<u64>(),
        r["stream_bytes_host_to_device"].as_u64().unwrap()
    );
    // Every IPU has work, and the per-IPU execute cycles add up to OnTileExecute.
    for i in 0..3 {
        assert!(
            field(i, "used_tiles") > 0 && field(i, "execute_cycles") > 0,
            "IPU {i}"
        );
        assert!(field(i, "free_bytes") > 0);
    }
    assert_eq!(
        (0..3).map(|i| field(i, "execute_cycles")).sum::<u64>(),
        r["categories"]["OnTileExecute"].as_u64().unwrap()
    );
    // Each IPU's memory is its own tiles': the rows add up to the total, the fullest row is
    // the fullest tile, and each IPU's free bytes are its capacity less what it holds.
    let memory = |f: &str| r["memory"][f].as_u64().unwrap();
    assert_eq!(
        (0..3).map(|i| field(i, "memory_bytes")).sum::<u64>(),
        memory("total_bytes")
    );
    assert_eq!(
        (0..3).map(|i| field(i, "max_tile_bytes")).max(),
        Some(memory("max_tile_bytes"))
    );
    for i in 0..3 {
        let capacity = field(i, "tiles") * memory("bytes_per_tile_capacity");
        assert!(field(i, "memory_bytes") > 0, "IPU {i}");
        assert_eq!(
            field(i, "free_bytes"),
            capacity - field(i, "memory_bytes"),
            "IPU {i}"
        );
    }
    // The copies between the stages' IPUs are global exchange code, the code's fourth part.
    let k = &r["memory"]["categories"];
    let code = |f: &str| k[f].as_u64().unwrap_or_else(|| panic!("{f}: {k}"));
    assert!(code("global_exchange_code") > 0, "{k}");
    assert_eq!(
        [
            "control_code",
            "vertex_code",
            "internal_exchange_code",
            "global_exchange_code"
        ]
        .map(code)
        .iter()
        .sum::<u64>(),
        code("code")
    );
    // The batch arithmetic.
    let b = &r["batch"];
    assert_eq!(
        (b["micro_batch"].as_u64(), b["global_batch"].as_u64()),
        (Some(8), Some(16))
    );
    assert_eq!(b["samples_per_run"].as_u64(), Some(32));
    let text = stdout(&ipusim(&["compile", SHARDED]));
    assert!(
        text.contains(
            "batch: micro-batch 8 x replicas 1 x gradient accumulation 2 = 16 samples per weight \
             update; x device iterations 2 = 32 samples per run"
        ),
        "{text}"
    );
}

#[test]
fn gradient_accumulation_and_device_iterations_are_overridden_from_the_command_line() {
    let r = json(&ipusim(&[
        "compile",
        SHARDED,
        "--json",
        "--gradient-accumulation",
        "3",
        "--device-iterations",
        "5",
    ]));
    assert_eq!(r["gradient_accumulation"].as_u64(), Some(3));
    assert_eq!(r["device_iterations"].as_u64(), Some(5));
    assert_eq!(r["batch"]["samples_per_run"].as_u64(), Some(8 * 3 * 5));
    // Labels: 32 bytes per micro-batch, 15 micro-batches per run.
    assert_eq!(
        r["ipus"][1]["stream_bytes_host_to_device"].as_u64(),
        Some(32 * 15)
    );
    fails(
        &ipusim(&["compile", SHARDED, "--gradient-accumulation", "0"]),
        "--gradient-accumulation",
    );
}

#[test]
fn bad_placements_name_the_option_and_the_value() {
    fails(
        &ipusim(&["compile", SINGLE, "--pipeline-splits", "layer3.8"]),
        "--pipeline-splits: split point 'layer3.8' names no node",
    );
    fails(
        &ipusim(&["compile", SINGLE, "--pipeline-splits", "logits,h"]),
        "split point 'h' begins at node 'h', which comes before split point 'logits'",
    );
    // The program puts stage 1 on IPU 2: a system of 2 IPUs cannot hold it.
    fails(
        &ipusim(&["compile", SHARDED, "--ipus", "2"]),
        "--ipus 2: stage 1 is placed on IPU 2",
    );
    fails(&ipusim(&["compile", SHARDED, "--ipus", "0"]), "--ipus");
    // A program file's split that names no node is reported at its line.
    let dir = scratch("pipeline-errors");
    let text = std::fs::read_to_string(SHARDED).unwrap();
    let bad = dir.join("bad_split.ron");
    std::fs::write(&bad, text.replace("\"logits\"]", "\"logitz\"]")).unwrap();
    let o = ipusim(&["check", bad.to_str().unwrap()]);
    fails(&o, "split point 'logitz' names no node");
    let line = text.lines().position(|l| l.contains("pipeline:")).unwrap() + 1;
    assert!(
        stderr(&o).contains(&format!("bad_split.ron:{line}:")),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("did you mean 'logits'?"),
        "{}",
        stderr(&o)
    );
    let grouped = dir.join("grouped.ron");
    std::fs::write(&grouped, text.replace("Sequential", "Grouped")).unwrap();
    let interleaved = dir.join("interleaved.ron");
    std::fs::write(&interleaved, text.replace("Sequential", "Interleaved")).unwrap();
    // Three stages keep 5 micro-batches in flight: a depth of 2 (the program's) cannot fill
    // the pipeline; the error names where the depth was set, and `check` finds it too.
    fails(
        &ipusim(&["compile", grouped.to_str().unwrap()]),
        "training.gradient_accumulation 2: a 3-stage Grouped pipeline keeps 5 micro-batches in flight",
    );
    fails(
        &ipusim(&["check", grouped.to_str().unwrap()]),
        "training.gradient_accumulation 2: a 3-stage Grouped pipeline",
    );
    fails(
        &ipusim(&[
            "compile",
            interleaved.to_str().unwrap(),
            "--gradient-accumulation",
            "4",
        ]),
        "--gradient-accumulation 4: a 3-stage Interleaved pipeline keeps 5 micro-batches",
    );
    // An overlapping schedule gives each stage an IPU of its own: `check` refuses two
    // stages on one, as `compile` does.
    let shared = dir.join("shared.ron");
    std::fs::write(
        &shared,
        text.replace("Sequential", "Grouped")
            .replace("ipus: [0, 2, 1]", "ipus: [0, 0, 1]"),
    )
    .unwrap();
    for cmd in ["check", "compile"] {
        fails(
            &ipusim(&[cmd, shared.to_str().unwrap()]),
            "pipeline.ipus [0, 0, 1]: the Grouped schedule runs each of its 3 stages on an IPU of its own",
        );
    }
    let short = dir.join("short.ron");
    std::fs::write(&short, text.replace("ipus: [0, 2, 1]", "ipus: [0, 1]")).unwrap();
    fails(
        &ipusim(&["check", short.to_str().unwrap()]),
        "pipeline.ipus: 2 IPUs given for 3 stages",
    );
}

#[test]
fn recomputation_lowers_peak_live_memory_raises_cycles_and_keeps_the_values() {
    // Each stage is an implicit checkpoint: the backward pass of a stage recomputes the
    // stage's activations from its input instead of keeping them through the forward pass.
    let report = |args: &[&str]| {
        let mut all = vec![
            "compile",
            "programs/resnet_digits.ron",
            "--pipeline-splits",
            "layer2",
            "--json",
        ];
        all.extend_from_slice(args);
        json(&ipusim(&all))
    };
    let (kept, recomputed) = (report(&[]), report(&["--recompute"]));
    let peak = |r: &serde_json::Value| r["memory"]["peak_live_bytes"].as_u64().unwrap();
    let cycles = |r: &serde_json::Value| r["total_cycles"].as_u64().unwrap();
    // At least 5% lower (measured: 2,216,052 against 2,439,204 bytes; batch norm's own
    // backward pass reads only its whitened activations of the forward, so keeping the
    // forward costs less than when the backward read the FP32 deviations too).
    assert!(
        peak(&recomputed) < peak(&kept) * 19 / 20,
        "{} vs {}",
        peak(&recomputed),
        peak(&kept)
    );
    assert!(cycles(&recomputed) > cycles(&kept));
    // The recomputed nodes run the forward's code, with vertices of their own, while a
    // forward node whose other reader was a backward node now has one reader (the
    // recomputation reads its own copy) and fuses into it: vertex state moves by little
    // either way (measured: 8,684,056 bytes against 8,682,392 kept, with an element-wise
    // vertex per tile; 9,363,096 against 9,368,536 with one per worker).
    let state = |r: &serde_json::Value| r["memory"]["categories"]["vertex_state"].as_u64().unwrap();
    assert!(
        state(&recomputed) <= state(&kept) + state(&kept) / 100,
        "{} vs {}",
        state(&recomputed),
        state(&kept)
    );
    // Without stochastic rounding the recomputed activations are the same values.
    let dir = scratch("pipeline-recompute");
    let (one, one_vars) = run(SINGLE, &dir, "one", &[]);
    let (rec, rec_vars) = run(SHARDED, &dir, "rec", &["--recompute"]);
    assert_eq!(one["outfeeds"], rec["outfeeds"]);
    assert_eq!(one_vars, rec_vars);
}

#[test]
fn eight_bit_io_halves_the_fp16_image_bytes_and_runs() {
    let program = tiny_resnet(&scratch("pipeline-eight-bit"), &[]);
    let p = program.to_str().unwrap();
    let rx = |args: &[&str]| {
        let mut all = vec!["compile", p, "--json", "--precision", "16.16"];
        all.extend_from_slice(args);
        json(&ipusim(&all))["ipus"][0]["stream_bytes_host_to_device"]
            .as_u64()
            .unwrap()
    };
    // Images 2 x 3 x 8 x 8 in FP16, labels 2 x i32: 768 + 8 bytes per micro-batch; as u8
    // the images take 384.
    assert_eq!(rx(&[]), 2 * 3 * 8 * 8 * 2 + 8);
    assert_eq!(rx(&["--eight-bit-io"]), 2 * 3 * 8 * 8 + 8);
    assert_eq!(
        rx(&[
            "--eight-bit-io",
            "--gradient-accumulation",
            "8",
            "--device-iterations",
            "4"
        ]),
        32 * (2 * 3 * 8 * 8 + 8)
    );
    // The synthetic images become bytes; the step runs to a finite loss.
    let out = json(&ipusim(&["run", p, "--eight-bit-io", "--json"]));
    let loss = out["outfeeds"]["loss"][0].as_f64().unwrap();
    assert!(loss.is_finite() && loss > 0.0, "{loss}");
    fails(
        &ipusim(&["compile", SINGLE, "--eight-bit-io"]),
        "--eight-bit-io: the program has no image infeed",
    );
}

#[test]
fn replicas_add_an_all_reduce_whose_cost_per_sample_falls_with_gradient_accumulation() {
    let report = |replicas: &str, ga: &str| {
        json(&ipusim(&[
            "compile",
            SHARDED,
            "--json",
            "--replicas",
            replicas,
            "--gradient-accumulation",
            ga,
        ]))
    };
    let cycles = |r: &serde_json::Value| r["total_cycles"].as_u64().unwrap();
    let exchange = |r: &serde_json::Value| r["categories"]["DoExchange"].as_u64().unwrap();
    let mut per_sample = Vec::new();
    for ga in ["2", "8"] {
        let one = report("1", ga);
        let (two, four) = (report("2", ga), report("4", ga));
        // The all-reduce is exchange over the links: the only cycles replicas add.
        let added = |r: &serde_json::Value| cycles(r) - cycles(&one);
        assert!(added(&two) > 0 && added(&four) > added(&two), "GA {ga}");
        assert_eq!(
            added(&two),
            exchange(&two) - exchange(&one) + sync_added(&one, &two)
        );
        assert_eq!(two["batch"]["replicas"].as_u64(), Some(2));
        assert_eq!(
            two["batch"]["global_batch"].as_u64(),
            Some(2 * one["batch"]["global_batch"].as_u64().unwrap())
        );
        per_sample.push(added(&two) as f64 / two["batch"]["samples_per_run"].as_f64().unwrap());
    }
    // One all-reduce per weight update, amortised over more micro-batches.
    assert!(per_sample[1] < per_sample[0] / 2.0, "{per_sample:?}");
    fails(
        &ipusim(&["step", SHARDED, "--replicas", "2"]),
        "--replicas 2: `ipusim step` steps one replica",
    );
    let dir = scratch("pipeline-replicas");
    let bad = dir.join("zero_replicas.ron");
    let text = std::fs::read_to_string(SHARDED).unwrap();
    std::fs::write(
        &bad,
        text.replacen(
            "    pipeline:",
            "    replication_factor: 0,\n    pipeline:",
            1,
        ),
    )
    .unwrap();
    fails(
        &ipusim(&["check", bad.to_str().unwrap()]),
        "replication_factor 0 is not in 1..=4096",
    );
}

/// The Sync cycles replicas add (the external syncs inside the all-reduce are charged with it,
/// in DoExchange; the sync before each collective is a Sync).
fn sync_added(one: &serde_json::Value, more: &serde_json::Value) -> u64 {
    more["categories"]["Sync"].as_u64().unwrap() - one["categories"]["Sync"].as_u64().unwrap()
}

#[test]
fn batch_from_the_command_line_resizes_every_infeed() {
    let report = |args: &[&str]| {
        let mut all = vec!["compile", "programs/resnet_digits.ron", "--json"];
        all.extend_from_slice(args);
        json(&ipusim(&all))
    };
    let (fifty, ten) = (report(&[]), report(&["--batch", "10"]));
    assert_eq!(ten["batch"]["micro_batch"].as_u64(), Some(10));
    // The u8 features [N, 64] and the i32 labels [N] scale with the batch.
    let rx = |r: &serde_json::Value| r["stream_bytes_host_to_device"].as_u64().unwrap();
    assert_eq!(rx(&fifty) * 10, rx(&ten) * 50);
    assert!(ten["total_cycles"].as_u64() < fifty["total_cycles"].as_u64());
    // The image Reshape [50, 1, 8, 8] follows the batch; a run trains.
    let out = json(&ipusim(&[
        "run",
        "programs/resnet_digits.ron",
        "--batch",
        "10",
        "--json",
    ]));
    assert!(out["outfeeds"]["loss"][0].as_f64().unwrap().is_finite());
    // An op that fixes the old batch is named.
    fails(
        &ipusim(&["compile", "tests/programs/sim/op_tour.ron", "--batch", "3"]),
        "--batch 3: node 'shifted' (Add)",
    );
}

#[test]
fn the_chrome_trace_has_a_process_per_ipu() {
    let dir = scratch("pipeline-chrome");
    let path = dir.join("trace.json");
    let o = ipusim(&[
        "run",
        SHARDED,
        "--steps",
        "2",
        "--chrome-trace",
        path.to_str().unwrap(),
        "-o",
        dir.join("out.txt").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let names: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["IPU 0 (mk2)", "IPU 1 (mk2)", "IPU 2 (mk2)"]);
    for pid in 0..3 {
        assert!(
            events
                .iter()
                .any(|e| e["ph"] == "X" && e["pid"] == pid && e["cat"] == "OnTileExecute"),
            "IPU {pid} has no compute slice"
        );
    }
    // The labels land on IPU 1, where the loss is.
    assert!(events
        .iter()
        .any(|e| e["name"] == "labels" && e["cat"] == "StreamCopy" && e["pid"] == 1));
}

#[test]
fn report_diff_compares_configurations_per_ipu_and_by_batch() {
    let dir = scratch("pipeline-diff");
    let write = |name: &str, ga: &str| {
        let path = dir.join(name);
        let o = ipusim(&[
            "compile",
            SHARDED,
            "--json",
            "--gradient-accumulation",
            ga,
            "-o",
            path.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        path
    };
    let (a, b) = (write("ga2.json", "2"), write("ga8.json", "8"));
    let o = ipusim(&["report", "diff", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let row = |field: &str| {
        text.lines()
            .find(|l| l.starts_with(field))
            .unwrap_or_else(|| panic!("no {field} row in\n{text}"))
            .split_whitespace()
            .skip(1)
            .take(2)
            .collect::<Vec<_>>()
    };
    assert_eq!(row("batch.global_batch "), ["16", "64"]);
    // The labels land on IPU 1: 32 bytes per micro-batch, 4 or 16 micro-batches per run.
    assert_eq!(row("ipus[1].stream_bytes_host_to_device "), ["128", "512"]);
}

#[test]
fn offloading_optimizer_state_lowers_memory_adds_stream_copies_and_keeps_the_values() {
    let report = |args: &[&str]| {
        let mut all = vec!["compile", "programs/resnet_digits.ron", "--json"];
        all.extend_from_slice(args);
        json(&ipusim(&all))
    };
    let (on_chip, offloaded) = (report(&[]), report(&["--offload-optimizer-state"]));
    let mem = |r: &serde_json::Value, f: &str| r["memory"][f].as_u64().unwrap();
    let cat = |r: &serde_json::Value, f: &str| r["categories"][f].as_u64().unwrap();
    // The momentum lives in streaming memory: no longer always live on the tiles, and the
    // chip holds fewer bytes in all.
    assert!(mem(&offloaded, "always_live_bytes") < mem(&on_chip, "always_live_bytes"));
    assert!(mem(&offloaded, "total_bytes") < mem(&on_chip, "total_bytes"));
    // Loaded before each weight update and stored after it: StreamCopy, nothing else.
    assert!(cat(&offloaded, "StreamCopy") > cat(&on_chip, "StreamCopy"));
    for c in ["OnTileExecute", "DoExchange", "Sync"] {
        assert_eq!(cat(&offloaded, c), cat(&on_chip, c), "{c}");
    }
    // The same values, the momentum read back from its remote buffer; executed cycles equal
    // the report's.
    let dir = scratch("pipeline-offload");
    let (a, a_vars) = run(SINGLE, &dir, "on-chip", &[]);
    let (b, b_vars) = run(SINGLE, &dir, "offloaded", &["--offload-optimizer-state"]);
    assert_eq!(a["outfeeds"], b["outfeeds"]);
    assert_eq!(a_vars, b_vars);
    assert!(b_vars.contains("w1/momentum"), "{b_vars}");
    let r = json(&ipusim(&[
        "compile",
        SINGLE,
        "--json",
        "--offload-optimizer-state",
    ]));
    assert_eq!(
        b["report"]["executed"]["total_cycles"].as_u64(),
        Some(2 * r["total_cycles"].as_u64().unwrap())
    );
}

/// `ipu: N` on nodes (PopTorch's `ipu_id`, TensorFlow's `ipu_shard`) places the program as
/// split points do: the sharded MLP with `ipu: 2` on `h` and `ipu: 1` on `logits` compiles to
/// the report of its `pipeline: (splits: ["h", "logits"], ipus: [0, 2, 1])`. Both ways at
/// once, or an IPU beyond the largest system, is an error naming the node and its line.
#[test]
fn ipu_attributes_place_nodes_as_split_points_do() {
    let dir = scratch("ipu-attributes");
    let text = std::fs::read_to_string(SHARDED).unwrap();
    let pipeline_line = text
        .lines()
        .find(|l| l.trim_start().starts_with("pipeline:"))
        .unwrap();
    let attributed = text
        .replace(pipeline_line, "")
        .replace(r#"inputs: ["h_pre"])"#, r#"inputs: ["h_pre"], ipu: 2)"#)
        .replace(
            r#"op: MatMul, inputs: ["h", "w2"])"#,
            r#"op: MatMul, inputs: ["h", "w2"], ipu: 1)"#,
        );
    let file = dir.join("attributed.ron");
    std::fs::write(&file, &attributed).unwrap();
    let f = file.to_str().unwrap();
    let (a, b) = (
        json(&ipusim(&["compile", SHARDED, "--json"])),
        json(&ipusim(&["compile", f, "--json"])),
    );
    assert_eq!(a["total_cycles"], b["total_cycles"]);
    assert_eq!(a["ipus"], b["ipus"]);
    assert_eq!(b["ipus"].as_array().unwrap().len(), 3);
    // Both ways at once.
    let both = dir.join("both.ron");
    std::fs::write(
        &both,
        attributed.replace("\n)", &format!("\n{pipeline_line}\n)")),
    )
    .unwrap();
    let o = ipusim(&["compile", both.to_str().unwrap()]);
    fails(
        &o,
        "node 'h' has ipu: 2, and the program has a pipeline field",
    );
    assert!(stderr(&o).contains("both.ron:"), "{}", stderr(&o));
    // An IPU beyond the largest system.
    let far = dir.join("far.ron");
    std::fs::write(&far, attributed.replace("ipu: 2)", "ipu: 100000)")).unwrap();
    fails(
        &ipusim(&["compile", far.to_str().unwrap()]),
        "node 'h': ipu 100000 is beyond the largest system",
    );
}

#[test]
fn out_of_memory_over_several_ipus_counts_the_tiles_of_every_ipu() {
    let dir = scratch("pipeline-oom");
    let target = dir.join("small.ron");
    std::fs::write(&target, "(base: \"mk2\", tiles: 4, bytes_per_tile: 1024)").unwrap();
    let t = target.to_str().unwrap();
    let o = ipusim(&["compile", SHARDED, "--target", t]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // Three IPUs of 4 tiles: the OOM count is out of 12, never more than the whole.
    let msg = stderr(&o);
    let (n, of) = msg
        .split("out of memory on ")
        .nth(1)
        .and_then(|s| s.split(" tiles").next())
        .and_then(|s| s.split_once(" of "))
        .unwrap_or_else(|| panic!("{msg}"));
    assert_eq!(of, "12", "{msg}");
    let n: u64 = n.parse().unwrap();
    assert!((1..=12).contains(&n), "{msg}");
    let o = ipusim(&["run", SHARDED, "--target", t, "--steps", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("out of memory on {n} of 12 tiles")),
        "{}",
        stderr(&o)
    );
}

//! The Grouped pipeline schedule (the TF-IPU training guide §6.5–6.7) through the built
//! binary: the same values as the Sequential schedule with fewer cycles, executed cycles
//! equal to the static report, the pipeline laws (the ramp's share falls with more
//! micro-batches; more micro-batches in flight stash more; Sequential has no overlap), the
//! report's pipeline section and timeline, and the errors of splits it cannot run.

use std::path::Path;

mod common;
use common::{ipusim, json, run_saving, scratch, stderr, stdout};

const SHARDED: &str = "tests/programs/sim/sharded_mlp.ron";
const RESNET: &str = "programs/resnet_digits.ron";
/// `resnet_digits` split in two at `layer2`, 3 micro-batches per update, 2 per run.
const CNN_SPLIT: [&str; 6] = [
    "--pipeline-splits",
    "layer2",
    "--gradient-accumulation",
    "3",
    "--device-iterations",
    "2",
];

fn compile(program: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["compile", program, "--json"];
    all.extend_from_slice(args);
    json(&ipusim(&all))
}

/// `ipusim run PROGRAM --steps 2 ... ARGS` (two device iterations, see [`run_saving`]): the
/// JSON output and the saved variables as text.
fn run(program: &str, dir: &Path, tag: &str, args: &[&str]) -> (serde_json::Value, String) {
    let (out, saved) = run_saving(program, dir, tag, &[&["--steps", "2"], args].concat());
    (out, saved.to_string())
}

fn cycles(r: &serde_json::Value) -> u64 {
    r["total_cycles"].as_u64().unwrap()
}

#[test]
fn grouped_gives_the_sequential_values_in_fewer_cycles_as_estimated() {
    let dir = scratch("grouped-values");
    // Three stages need 2 × 3 − 1 = 5 micro-batches in flight.
    let common = ["--gradient-accumulation", "5"];
    let grouped_args = [&common[..], &["--pipeline-schedule", "Grouped"]].concat();
    let (seq, seq_vars) = run(SHARDED, &dir, "seq", &common);
    let (grp, grp_vars) = run(SHARDED, &dir, "grp", &grouped_args);
    // Every micro-batch meets every op in the same order: the same bits.
    assert_eq!(seq["outfeeds"], grp["outfeeds"]);
    assert_eq!(seq_vars, grp_vars);
    let (s, g) = (compile(SHARDED, &common), compile(SHARDED, &grouped_args));
    assert!(cycles(&g) < cycles(&s), "{} vs {}", cycles(&g), cycles(&s));
    // Executed cycles equal the static report's (one run of its two device iterations).
    assert_eq!(
        grp["report"]["executed"]["total_cycles"].as_u64(),
        Some(cycles(&g)),
        "executed vs static"
    );
    // A tick of the pipeline lasts its busiest IPU: the run is shorter than every IPU's own
    // work added up.
    let own: u64 = g["ipus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["execute_cycles"].as_u64().unwrap())
        .sum();
    assert!(g["categories"]["OnTileExecute"].as_u64().unwrap() < own);
    // The same on the CNN, split in two.
    let cnn = CNN_SPLIT;
    let (a, a_vars) = run(RESNET, &dir, "cnn-seq", &cnn);
    let (b, b_vars) = run(
        RESNET,
        &dir,
        "cnn-grp",
        &[&cnn[..], &["--pipeline-schedule", "Grouped"]].concat(),
    );
    assert_eq!(a["outfeeds"], b["outfeeds"]);
    assert_eq!(a_vars, b_vars);
}

/// A stage whose last op's gradient reads that op's output (`Exp`: `dy · exp(x)`): the value is
/// both stashed for the stage's backward and sent to the next stage at the end of the tick,
/// after the backward restored an older micro-batch's value into it. The Grouped schedule
/// puts the forward's value back before the send (`stash_reload`), so the next stage
/// computes on its own micro-batch and the values are the Sequential schedule's bit for bit.
#[test]
fn a_stashed_value_sent_to_the_next_stage_is_sent_for_its_own_micro_batch() {
    let dir = scratch("stash-reload");
    let program = dir.join("exp_stage.ron");
    std::fs::write(
        &program,
        r#"Program(
    name: "exp_stage",
    device_iterations: 2,
    nodes: [
        (name: "x", op: Input(stream: "x", dtype: F32, shape: [4, 6])),
        (name: "labels", op: Input(stream: "labels", dtype: I32, shape: [4])),
        (name: "w1", op: Variable(dtype: F32, shape: [6, 5], init: GlorotUniform(seed: 1))),
        (name: "h_mm", op: MatMul, inputs: ["x", "w1"]),
        (name: "h", op: Exp, inputs: ["h_mm"]),
        (name: "w2", op: Variable(dtype: F32, shape: [5, 3], init: GlorotUniform(seed: 2))),
        (name: "logits", op: MatMul, inputs: ["h", "w2"]),
        (name: "loss", op: SparseSoftmaxCrossEntropy(reduction: Mean), inputs: ["logits", "labels"]),
        (name: "loss_out", op: Outfeed(stream: "loss"), inputs: ["loss"]),
        (name: "logits_out", op: Outfeed(stream: "logits"), inputs: ["logits"]),
    ],
    infeeds: [
        (stream: "x", source: Uniform(low: -1.0, high: 1.0, seed: 5)),
        (stream: "labels", source: Uniform(low: 0.0, high: 3.0, seed: 6)),
    ],
    training: (
        loss: "loss",
        optimizer: Sgd(learning_rate: 0.05),
        precision: "32.32",
        gradient_accumulation: 3,
    ),
    pipeline: (splits: ["logits"], schedule: Sequential),
)
"#,
    )
    .unwrap();
    let program = program.to_str().unwrap();
    let (seq, seq_vars) = run(program, &dir, "seq", &[]);
    let (grp, grp_vars) = run(program, &dir, "grp", &["--pipeline-schedule", "Grouped"]);
    assert_eq!(seq["outfeeds"], grp["outfeeds"]);
    assert_eq!(seq_vars, grp_vars);
    // The micro-batches' logits differ from one another (the check can fail).
    let logits = seq["outfeeds"]["logits"].as_array().unwrap();
    assert!(logits.windows(2).all(|w| w[0] != w[1]), "{logits:?}");
    // Stage 0 stashes `exp(x·w1)` (its gradient reads it) and sends it: the reload is there.
    let c = compile(program, &["--pipeline-schedule", "Grouped"]);
    let stash = c["pipeline"]["segments"][0]["stash_bytes"]
        .as_u64()
        .unwrap();
    assert!(stash > 0, "{c}");
}

/// The Interleaved schedule (TF-IPU's `PipelineSchedule.Interleaved`): each IPU alternates
/// between its forward and its backward segment, so it stashes fewer micro-batches than
/// Grouped (`S − i` slots against `2S − 1 − 2i`) and takes more cycles (a tick waits for the
/// busiest IPU, whichever segment it runs), still fewer than Sequential; the values are the
/// other schedules' bit for bit and the executed cycles equal the report's.
#[test]
fn interleaved_stashes_less_than_grouped_in_more_cycles_with_the_same_values() {
    let dir = scratch("interleaved");
    let cnn = CNN_SPLIT;
    let with = |schedule: &'static str| [&cnn[..], &["--pipeline-schedule", schedule]].concat();
    let (seq, seq_vars) = run(RESNET, &dir, "seq", &cnn);
    let (il, il_vars) = run(RESNET, &dir, "il", &with("Interleaved"));
    assert_eq!(seq["outfeeds"], il["outfeeds"]);
    assert_eq!(seq_vars, il_vars);
    let (s, g, i) = (
        compile(RESNET, &cnn),
        compile(RESNET, &with("Grouped")),
        compile(RESNET, &with("Interleaved")),
    );
    assert_eq!(
        il["report"]["executed"]["total_cycles"].as_u64(),
        Some(cycles(&i)),
        "executed vs static"
    );
    assert!(cycles(&g) < cycles(&i) && cycles(&i) < cycles(&s));
    let p = &i["pipeline"];
    assert_eq!(p["schedule"], "Interleaved");
    assert_eq!(p["ticks_per_micro_batch"], 2);
    // 2 stages, 3 micro-batches: 2·(3 − 1) + 2·2 ticks; stage 0 stashes 2 micro-batches
    // (Grouped: 3), stage 1 none.
    assert_eq!(p["ticks"], 8);
    let slots: Vec<u64> = p["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stash_slots"].as_u64().unwrap())
        .collect();
    assert_eq!(slots, vec![2, 0, 0, 0]);
    let stash = |r: &serde_json::Value| r["pipeline"]["stash_bytes"].as_u64().unwrap();
    assert!(stash(&i) < stash(&g), "{} vs {}", stash(&i), stash(&g));
    // The text timeline: every IPU alternates, one segment per tick.
    let o = ipusim(&[&["compile", RESNET][..], &with("Interleaved")].concat());
    let text = stdout(&o);
    for row in [
        ("stage 0 forward", "0 . 1 . 2 . . ."),
        ("stage 1 forward", ". 0 . 1 . 2 . ."),
        ("stage 1 backward", ". . 0 . 1 . 2 ."),
        ("stage 0 backward", ". . . 0 . 1 . 2"),
    ] {
        let line = text.lines().find(|l| l.starts_with(row.0)).unwrap();
        assert!(line.ends_with(row.1), "{line}");
    }
}

#[test]
fn pipeline_laws_hold() {
    let grouped = |args: &[&str]| {
        compile(
            RESNET,
            &[
                args,
                &["--pipeline-schedule", "Grouped", "--device-iterations", "1"],
            ]
            .concat(),
        )
    };
    let ramp_share = |r: &serde_json::Value| {
        let p = &r["pipeline"];
        let ramp = p["ramp_cycles"].as_f64().unwrap();
        ramp / (ramp + p["steady_cycles"].as_f64().unwrap())
    };
    let per_sample =
        |r: &serde_json::Value| cycles(r) as f64 / r["batch"]["samples_per_run"].as_f64().unwrap();
    // More micro-batches through the same pipeline: the ramp-up and ramp-down are a smaller
    // share of the cycles, and a sample costs less.
    let (three, eight) = (
        grouped(&[
            "--pipeline-splits",
            "layer2",
            "--gradient-accumulation",
            "3",
        ]),
        grouped(&[
            "--pipeline-splits",
            "layer2",
            "--gradient-accumulation",
            "8",
        ]),
    );
    assert!(ramp_share(&eight) < ramp_share(&three));
    assert!(per_sample(&eight) < per_sample(&three));
    assert_eq!(three["pipeline"]["ticks"].as_u64(), Some(3 + 2));
    assert_eq!(eight["pipeline"]["ticks"].as_u64(), Some(8 + 2));
    // A deeper pipeline keeps more micro-batches of its first stage in flight (2S − 1
    // slots): with the same first stage, its stash grows by 5/3.
    let two = grouped(&[
        "--pipeline-splits",
        "layer2",
        "--gradient-accumulation",
        "5",
    ]);
    let three_stages = grouped(&[
        "--pipeline-splits",
        "layer2,fc_mm",
        "--gradient-accumulation",
        "5",
    ]);
    let first = |r: &serde_json::Value| r["pipeline"]["segments"][0].clone();
    assert_eq!(first(&two)["stash_slots"].as_u64(), Some(3));
    assert_eq!(first(&three_stages)["stash_slots"].as_u64(), Some(5));
    let bytes = |r: &serde_json::Value| first(r)["stash_bytes"].as_u64().unwrap();
    assert!(bytes(&two) > 0);
    assert_eq!(bytes(&three_stages) * 3, bytes(&two) * 5);
    // The stash is memory of the plan: the first IPU holds it.
    let ipu0 = |r: &serde_json::Value| r["ipus"][0]["memory_bytes"].as_u64().unwrap();
    assert!(ipu0(&three_stages) >= ipu0(&two) + bytes(&three_stages) - bytes(&two));
    // Sequential has no overlap (and no pipeline section): every stage waits for the others.
    let seq = compile(
        RESNET,
        &[
            "--pipeline-splits",
            "layer2",
            "--gradient-accumulation",
            "8",
            "--device-iterations",
            "1",
        ],
    );
    assert!(seq.get("pipeline").is_none());
    assert!(cycles(&seq) > cycles(&eight));
}

#[test]
fn the_text_report_shows_the_pipeline_timeline() {
    let o = ipusim(&[
        "compile",
        RESNET,
        "--pipeline-splits",
        "layer2",
        "--gradient-accumulation",
        "3",
        "--pipeline-schedule",
        "Grouped",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("Pipeline (Grouped): 2 stages, 3 micro-batches in 5 ticks"),
        "{text}"
    );
    // Each segment's row: the micro-batch it runs in each tick.
    for row in [
        ("stage 0 forward", "0 1 2 . ."),
        ("stage 1 forward", ". 0 1 2 ."),
        ("stage 1 backward", ". 0 1 2 ."),
        ("stage 0 backward", ". . 0 1 2"),
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with(row.0))
            .unwrap_or_else(|| panic!("no row for {}: {text}", row.0));
        assert!(line.ends_with(row.1), "{line}");
    }
}

#[test]
fn splits_the_grouped_schedule_cannot_run_are_errors() {
    // The residual add of layer1.0 is two stages after the ReLU it reads: the value would
    // have to wait a tick on the way.
    let o = ipusim(&[
        "compile",
        RESNET,
        "--pipeline-splits",
        "layer1.0.conv2,layer1.0.add",
        "--gradient-accumulation",
        "5",
        "--pipeline-schedule",
        "Grouped",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("passes a value to the next stage in the next tick only"),
        "{}",
        stderr(&o)
    );
    // Too few micro-batches for the stages name the option.
    let shallow = ipusim(&[
        "compile",
        RESNET,
        "--pipeline-splits",
        "layer2",
        "--gradient-accumulation",
        "2",
        "--pipeline-schedule",
        "Grouped",
    ]);
    assert_eq!(shallow.status.code(), Some(1), "{}", stderr(&shallow));
    assert!(
        stderr(&shallow).contains("--gradient-accumulation"),
        "{}",
        stderr(&shallow)
    );
    let bad = ipusim(&["compile", RESNET, "--pipeline-schedule", "Staggered"]);
    assert_eq!(bad.status.code(), Some(1), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("Staggered"), "{}", stderr(&bad));
}

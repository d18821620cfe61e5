//! `ipusim step` through the built binary: scripted debugger sessions piped on stdin,
//! snapshot-tested (breaking on a compute set, printing tensors, stepping, the flags after
//! an overflow, a trapped exception), the data its infeeds read, and its errors.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn step(args: &[&str], commands: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ipusim"))
        .arg("step")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(commands.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const TARGET: &str = "tests/programs/targets/mk2_16.ron";

#[test]
fn break_print_step_and_flags_after_an_overflow() {
    // Unfused, so that the intermediate `y` is a compute set to break on and a tensor.
    let o = step(
        &[
            "tests/programs/sim/overflow.ron",
            "--target",
            TARGET,
            "--no-elementwise-fusion",
        ],
        "break y\ncontinue\nwhere\nprint x\nstep\nflags\nprint y\nbreak\ndelete 1\ncontinue\nquit\n",
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    insta::assert_snapshot!(text(&o));
}

#[test]
fn a_trapped_overflow_stops_with_the_state_dump() {
    let o = step(
        &[
            "tests/programs/sim/overflow.ron",
            "--target",
            TARGET,
            "--fp-exceptions",
            "oflo",
        ],
        "continue\nwhere\nflags\ntile 0\n",
    );
    assert_eq!(o.status.code(), Some(0));
    insta::assert_snapshot!(text(&o));
}

#[test]
fn stepping_a_training_step() {
    let o = step(
        &["tests/programs/sim/train_mlp.ron", "--target", TARGET, "--sr", "on", "--seed", "7"],
        "break logits*\nc\nprint w2\nnext\nprint logits\nbreak tile 3\nc\nsuperstep 2\nbreak cycle 20000\ndelete 2\nc\nwhere\nstep 3\n",
    );
    assert_eq!(o.status.code(), Some(0));
    insta::assert_snapshot!(text(&o));
}

#[test]
fn bad_commands_and_bad_input_are_errors() {
    let o = step(
        &["tests/programs/sim/overflow.ron", "--target", TARGET],
        "frobnicate\nprint nothing\nbreak tile x\nstep -1\ntile 99\ndelete 4\nbreak flag INF\n",
    );
    assert_eq!(o.status.code(), Some(0));
    insta::assert_snapshot!(text(&o));
    let o = step(&["tests/programs/sim/missing.ron"], "");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("missing.ron"),
        "{o:?}"
    );
    let o = step(
        &["tests/programs/sim/overflow.ron", "--fp-exceptions", "ofl"],
        "",
    );
    assert_ne!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown exception 'ofl'"));
    let o = step(
        &["tests/programs/sim/overflow.ron", "--target", "nowhere.ron"],
        "",
    );
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn infeeds_come_from_the_files_a_run_reads() {
    let dir = std::env::temp_dir().join(format!("ipusim-cli-step-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let labels = dir.join("labels.csv");
    let rows: Vec<String> = (0..16i32)
        .map(|i| (9 - i).rem_euclid(10).to_string())
        .collect();
    std::fs::write(&labels, format!("label\n{}\n", rows.join("\n"))).unwrap();
    let feed = format!("labels={}", labels.display());
    let o = step(
        &[
            "tests/programs/sim/train_mlp.ron",
            "--target",
            TARGET,
            "--infeed",
            &feed,
        ],
        "break logits*\nc\nprint labels\n",
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains(&format!("infeed  'labels' i32 [8]: {}", labels.display())),
        "{out}"
    );
    assert!(out.contains("[9, 8, 7, 6, 5, 4, 3, 2]"), "{out}");
    // The program's own source without `--infeed`; an infeed without any source is an
    // error, as in `ipusim run`.
    let no_source = dir.join("no_source.ron");
    let program = std::fs::read_to_string("tests/programs/sim/train_mlp.ron").unwrap();
    let program = program.replace(
        "(stream: \"labels\", source: Uniform(low: 0.0, high: 10.0, seed: 6)),",
        "",
    );
    std::fs::write(&no_source, program).unwrap();
    let o = step(&[no_source.to_str().unwrap(), "--target", TARGET], "");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("infeed 'labels' (i32[8]) has no data source"),
        "{o:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn breaking_on_an_ipu_stops_at_its_stage() {
    let o = step(
        &["tests/programs/sim/sharded_mlp.ron"],
        "break ipu 2\ncontinue\nnext\nprint h\nbreak tile ipu1:3\nbreak ipu 5\nbreak tile ipu9:0\nquit\n",
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let t = text(&o);
    // Stage 1 (from the ReLU) is on IPU 2: its first step copies its input there.
    assert!(
        t.contains("breakpoint 1 (ipu 2): before exchange 'h_pre/ipu2/ipu_copy'"),
        "{t}"
    );
    assert!(t.contains("breakpoint 2: tile ipu1:3"), "{t}");
    assert!(
        t.contains("error: IPU 5 does not exist (the system has 3 IPU(s): 0 to 2)"),
        "{t}"
    );
    assert!(t.contains("error: IPU 9 does not exist"), "{t}");
}

/// A node fused into another's vertices has no tensor: `print` says which node computes it
/// and how to keep it; with `--no-elementwise-fusion` it prints.
#[test]
fn printing_a_fused_node_names_the_node_that_computes_it() {
    let program = "tests/programs/sim/elementwise.ron";
    let o = step(
        &[program, "--target", TARGET],
        "break e\ncontinue\nprint sum\nquit\n",
    );
    let all = format!("{}{}", text(&o), String::from_utf8_lossy(&o.stderr));
    assert!(
        all.contains("'sum' is computed inside the fused vertices of 'e' and never stored"),
        "{all}"
    );
    assert!(all.contains("--no-elementwise-fusion"), "{all}");
    let o = step(
        &[program, "--target", TARGET, "--no-elementwise-fusion"],
        "break e\ncontinue\nprint sum\nquit\n",
    );
    let all = format!("{}{}", text(&o), String::from_utf8_lossy(&o.stderr));
    assert!(all.contains("sum: f16"), "{all}");
}

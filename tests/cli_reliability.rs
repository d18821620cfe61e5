//! Regression tests of issue 12 through the CLI, one group per class of failure: panics,
//! aborts on allocation, corrupt figures, lost output, partial output, validation gaps and
//! unhelpful errors. Each checks the exit code, the message (with its location) and that no
//! file is left behind.

mod common;

use common::{ipusim, scratch, stderr, stdout};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Runs `ipusim ARGS` with stdout sent to `/dev/full`.
fn to_dev_full(args: &[&str]) -> Output {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    Command::new(env!("CARGO_BIN_EXE_ipusim"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::from(full))
        .output()
        .unwrap()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The files in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn fails_with(o: &Output, code: i32, needle: &str) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        stdout(o),
        stderr(o)
    );
    assert!(
        stderr(o).contains(needle),
        "stderr lacks {needle:?}:\n{}",
        stderr(o)
    );
    assert!(!stderr(o).contains("panicked"), "{}", stderr(o));
}

/// A one-constant program with an outfeed named `stream`.
fn constant_program(stream: &str, dtype: &str, value: &str) -> String {
    format!(
        "Program(\n    name: \"k\",\n    nodes: [\n        (name: \"k\", op: Constant(dtype: {dtype}, shape: [2], value: Splat({value}))),\n        (name: \"o\", op: Outfeed(stream: \"{stream}\"), inputs: [\"k\"]),\n    ],\n    outfeeds: [(stream: \"{stream}\", mode: \"all\")],\n)\n"
    )
}

// Class 1: panics.

#[test]
fn a_stream_name_longer_than_a_format_width_does_not_panic() {
    let dir = scratch("rel-long");
    let name = "s".repeat(65_536);
    let p = write(&dir, "long.ron", &constant_program(&name, "F32", "1.0"));
    let o = ipusim(&["run", s(&p)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains(&name));
    let o = ipusim(&["check", s(&p)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn fp_and_help_report_a_full_stdout() {
    fails_with(&to_dev_full(&["fp", "1 + 1"]), 1, "cannot write to stdout");
    fails_with(&to_dev_full(&["--help"]), 1, "cannot write to stdout");
}

// Class 4: lost output.

#[test]
fn every_command_reports_a_full_stdout() {
    let dir = scratch("rel-full");
    let r = dir.join("r.json");
    let o = ipusim(&[
        "compile",
        "programs/feeds_repeat.ron",
        "--json",
        "-o",
        s(&r),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for args in [
        vec!["check", "programs/feeds_repeat.ron"],
        vec!["check", "programs/feeds_repeat.ron", "--json"],
        vec!["compile", "programs/feeds_repeat.ron"],
        vec!["run", "programs/feeds_repeat.ron"],
        vec!["run", "programs/feeds_repeat.ron", "--json"],
        vec!["report", "diff", s(&r), s(&r)],
    ] {
        let o = to_dev_full(&args);
        fails_with(
            &o,
            1,
            "error: cannot write to stdout: No space left on device",
        );
    }
}

#[test]
fn a_closed_pipe_ends_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ipusim"))
        .args(["compile", "programs/mlp_digits.ron"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
}

// Class 5: partial output.

#[test]
fn a_bad_output_path_fails_before_the_run_and_writes_nothing() {
    let dir = scratch("rel-partial");
    let w = dir.join("w.json");
    let r = dir.join("r.txt");
    let bad = dir.join("no/such/t.json");
    let o = ipusim(&[
        "run",
        "programs/feeds_repeat.ron",
        "--save-variables",
        s(&w),
        "--trace",
        s(&bad),
        "-o",
        s(&r),
    ]);
    fails_with(&o, 1, "t.json: error: --trace: the directory");
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    assert!(listing(&dir).is_empty(), "{:?}", listing(&dir));
    // Two outputs naming one file.
    let o = ipusim(&[
        "run",
        "programs/feeds_repeat.ron",
        "-o",
        s(&r),
        "--trace",
        s(&r),
    ]);
    fails_with(&o, 1, "-o and --trace name the same file");
    // A directory as the output.
    let o = ipusim(&["compile", "programs/feeds_repeat.ron", "-o", s(&dir)]);
    fails_with(&o, 1, "-o names a directory");
    assert!(listing(&dir).is_empty(), "{:?}", listing(&dir));
}

#[test]
fn a_failing_special_file_leaves_no_other_output() {
    let dir = scratch("rel-special");
    let w = dir.join("w.json");
    let o = ipusim(&[
        "run",
        "programs/feeds_repeat.ron",
        "--save-variables",
        s(&w),
        "--trace",
        "/dev/full",
    ]);
    fails_with(&o, 1, "/dev/full: error: cannot write (--trace)");
    assert!(stdout(&o).is_empty(), "all or none: {}", stdout(&o));
    assert!(listing(&dir).is_empty(), "{:?}", listing(&dir));
}

#[test]
fn symlinks_and_fifos_are_written_through() {
    let dir = scratch("rel-links");
    let real = write(&dir, "real.json", "old");
    let link = dir.join("link.json");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink("real.json", &link).unwrap();
    let o = ipusim(&[
        "compile",
        "programs/feeds_repeat.ron",
        "--json",
        "-o",
        s(&link),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(std::fs::read_to_string(&real)
        .unwrap()
        .contains("total_cycles"));
    assert_eq!(listing(&dir), ["link.json", "real.json"]);

    let fifo = dir.join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        return;
    }
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    let o = ipusim(&["run", "programs/feeds_repeat.ron", "--json", "-o", s(&fifo)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = reader.join().unwrap();
    assert!(text.contains("\"outfeeds\""), "{text}");
    let ft = std::fs::symlink_metadata(&fifo).unwrap().file_type();
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&ft), "still a FIFO");
}

// Class 6: validation gaps.

#[test]
fn check_refuses_what_run_would_refuse_at_the_node() {
    let dir = scratch("rel-values");
    let p = write(&dir, "u8.ron", &constant_program("o", "U8", "300.0"));
    let o = ipusim(&["check", s(&p)]);
    fails_with(
        &o,
        1,
        "u8.ron:4:25: error: node 'k' (Constant): constant value 300 is not representable in u8",
    );
    let o = ipusim(&["run", s(&p)]);
    fails_with(&o, 1, "u8.ron:4:25:");
    let p = write(&dir, "f16.ron", &constant_program("o", "F16", "70000.0"));
    fails_with(
        &ipusim(&["check", s(&p)]),
        1,
        "constant value 70000 overflows f16",
    );
    // A variable whose initial value the precision policy turns into f16.
    let text = "Program(\n    name: \"v\",\n    nodes: [\n        (name: \"x\", op: Input(stream: \"x\", dtype: F32, shape: [2])),\n        (name: \"w\", op: Variable(dtype: F32, shape: [2], init: Constant(100000.0))),\n        (name: \"y\", op: Mul, inputs: [\"x\", \"w\"]),\n        (name: \"loss\", op: ReduceSum(axes: [0]), inputs: [\"y\"]),\n    ],\n    training: (loss: \"loss\", optimizer: Sgd(learning_rate: 0.1), precision: \"16.16\"),\n    infeeds: [(stream: \"x\", source: Constant(1.0))],\n)\n";
    let p = write(&dir, "policy.ron", text);
    let o = ipusim(&["check", s(&p)]);
    fails_with(&o, 1, "policy.ron:5:");
    assert!(
        stderr(&o).contains("initial value: value 100000 overflows f16 (written f32, f16 under the precision policy 16.16)"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn flags_are_range_checked() {
    let o = ipusim(&["run", "programs/feeds_repeat.ron", "--threads", "0"]);
    fails_with(
        &o,
        1,
        "expected a number of threads from 1 to 1024, got '0'",
    );
    let o = ipusim(&["run", "programs/feeds_repeat.ron", "--threads", "100000"]);
    fails_with(&o, 1, "from 1 to 1024");
}

// Class 7: unhelpful errors.

#[test]
fn a_byte_order_mark_is_skipped_and_odd_files_are_refused_by_name() {
    let dir = scratch("rel-bom");
    let text = std::fs::read_to_string("programs/feeds_repeat.ron").unwrap();
    let p = write(&dir, "bom.ron", &format!("\u{feff}{text}"));
    let o = ipusim(&["check", s(&p)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Line and column stay those an editor shows.
    let p = write(&dir, "bombad.ron", "\u{feff}Program(name: 3)");
    fails_with(&ipusim(&["check", s(&p)]), 1, "bombad.ron:1:15:");
    fails_with(
        &ipusim(&["check", s(&dir)]),
        1,
        "cannot read the program: it is a directory",
    );
    fails_with(
        &ipusim(&["check", "/dev/zero"]),
        1,
        "/dev/zero: error: the program is larger than 268435456 bytes",
    );
    let p = dir.join("latin1.ron");
    std::fs::write(&p, b"Program(\n name: \"caf\xe9\")").unwrap();
    fails_with(&ipusim(&["check", s(&p)]), 1, "not UTF-8 text (line 2");
}

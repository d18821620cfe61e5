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

#[test]
fn a_mistyped_preset_is_not_only_a_missing_file() {
    let o = ipusim(&["compile", "programs/feeds_repeat.ron", "--target", "mk3"]);
    fails_with(
        &o,
        1,
        "error: --target mk3: unknown target preset or missing file",
    );
    let o = ipusim(&["run", "programs/feeds_repeat.ron", "--target", "mk3"]);
    fails_with(&o, 1, "unknown target preset or missing file");
    assert!(!stderr(&o).contains("error: error"), "{}", stderr(&o));
}

#[test]
fn an_outfeed_huge_per_element_is_refused_by_check_and_run_without_aborting() {
    let dir = scratch("rel-onehot");
    let program = |depth: &str| {
        format!(
            "Program(\n    name: \"oh\",\n    nodes: [\n        (name: \"i\", op: Input(stream: \"i\", dtype: I32, shape: [4])),\n        (name: \"h\", op: OneHot(depth: {depth}, dtype: F32), inputs: [\"i\"]),\n        (name: \"o\", op: Outfeed(stream: \"h\"), inputs: [\"h\"]),\n    ],\n    infeeds: [(stream: \"i\", source: Constant(1.0))],\n    outfeeds: [(stream: \"h\", mode: \"all\")],\n)\n"
        )
    };
    // Class 2: `run` allocated a host buffer per outfeed element before compiling.
    let p = write(&dir, "deep.ron", &program("100000000000"));
    for cmd in ["check", "run"] {
        let o = ipusim(&[cmd, s(&p)]);
        fails_with(
            &o,
            1,
            "deep.ron:5:25: error: node 'h' (OneHot): depth 100000000000 exceeds 4294967295",
        );
    }
    // Outfeeds that would exceed the host-memory limit are refused before the first run,
    // with the arithmetic.
    let p = write(&dir, "wide.ron", &program("1000000"));
    let o = ipusim(&["run", s(&p), "--steps", "300"]);
    fails_with(&o, 1, "oh: error: the outfeeds would keep 9,600,000,000 bytes of values on the host over 300 runs, more than the limit of 4,294,967,296 bytes");
    assert!(
        stderr(&o).contains("outfeed 'h' (all): 300 entries kept x 4,000,000 elements x 8 bytes = 9,600,000,000 bytes"),
        "{}",
        stderr(&o)
    );
    // Fewer runs keep less: within the limit, the run goes ahead.
    let o = ipusim(&["run", s(&p), "--steps", "3"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("3 entries of f32[4, 1000000]"),
        "{}",
        stdout(&o)
    );
}

/// Runs `ipusim ARGS` in the workspace root with its address space limited to `mib` MiB
/// and its CPU time to `cpu_seconds` (`ulimit -v` / `-t`), so that a command that allocates
/// or loops per element aborts instead of passing slowly.
fn bounded(mib: u64, cpu_seconds: u64, args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {} && ulimit -t {cpu_seconds} && exec \"$0\" \"$@\"",
            mib * 1024
        ))
        .arg(env!("CARGO_BIN_EXE_ipusim"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap()
}

#[test]
fn a_matmul_of_2_28_rows_is_out_of_memory_without_host_memory_per_row() {
    // The lowering laid out the 2^28-row input and output a range per row (about 6 GB of
    // host memory and a minute before printing the verdict). Its input alone is more than
    // an IPU holds: the verdict now names it before anything is laid out.
    let p = "tests/programs/oom/matmul_2p28_rows.ron";
    let o = bounded(1024, 60, &["compile", p]);
    fails_with(
        &o,
        2,
        "matmul_2p28_rows.ron: error: cannot compile for target 'mk2': node 'x': out of memory: \
         its value (f16[268435456, 4]) needs 2147483648 bytes, more than the 940572672 bytes of \
         tile memory of one IPU (1472 tiles of 638976 bytes)",
    );
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    let o = bounded(1024, 60, &["run", p]);
    fails_with(
        &o,
        2,
        "matmul_2p28_rows: error: cannot compile for target 'mk2': node 'x': out of memory",
    );
    // `check` does not compile: the program is valid, its streams are summarised.
    let o = bounded(1024, 60, &["check", p]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("x       f16    [268435456, 4]  2,147,483,648"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_value_larger_than_an_ipu_is_out_of_memory_before_it_is_laid_out() {
    // Each of these laid its value out element by element or row by row until the host's
    // allocator aborted (exit 134): a broadcast to 1.6 GB, a pad to 3.8 GB, and the digits
    // MLP at a batch of ten million. Each is now the out-of-memory verdict (exit 2) at the
    // node, in a few MB of host memory (the MLP's u8 input, 640 MB, fits; its normalised
    // FP16 pixels do not).
    let dir = scratch("rel-too-large");
    let program = |op: &str| {
        format!(
            "Program(\n    name: \"big\",\n    nodes: [\n        (name: \"x\", op: Input(stream: \"x\", dtype: F32, shape: [2, 3, 8, 8])),\n        (name: \"y\", op: {op}, inputs: [\"x\"]),\n        (name: \"o\", op: Outfeed(stream: \"o\"), inputs: [\"y\"]),\n    ],\n    infeeds: [(stream: \"x\", source: Constant(1.0))],\n)\n"
        )
    };
    let cases = [
        (
            "broadcast.ron",
            "Broadcast(shape: [1048576, 2, 3, 8, 8])",
            "node 'y': out of memory: its value (f32[1048576, 2, 3, 8, 8]) needs 1610612736 bytes",
        ),
        (
            "pad.ron",
            "Pad(before: [5000000, 0, 0, 0], after: [0, 0, 0, 0])",
            "node 'y': out of memory: its value (f32[5000002, 3, 8, 8]) needs 3840001536 bytes",
        ),
    ];
    for (name, op, needle) in cases {
        let p = write(&dir, name, &program(op));
        for cmd in ["compile", "run", "step"] {
            let o = bounded(1024, 60, &[cmd, s(&p)]);
            fails_with(&o, 2, needle);
        }
    }
    let o = bounded(
        1024,
        60,
        &["compile", "programs/mlp_digits.ron", "--batch", "10000000"],
    );
    fails_with(
        &o,
        2,
        "node 'x_scaled': out of memory: its value (f16[10000000, 64]) needs 1280000000 bytes",
    );
}

// Class 3: corrupt figures.

#[test]
fn extreme_targets_are_bounded_and_totals_never_wrap() {
    let dir = scratch("rel-extreme");
    let t = write(&dir, "ext.ron", "(base: \"mk2\", sync_cycles: 4294967295)");
    let o = ipusim(&["compile", "programs/feeds_repeat.ron", "--target", s(&t)]);
    fails_with(
        &o,
        1,
        "field 'sync_cycles': must be at most 16777216 (2^24)",
    );
    let t = write(
        &dir,
        "clock.ron",
        "(base: \"mk2\", clock_hz: 18446744073709551615)",
    );
    let o = ipusim(&["compile", "programs/feeds_repeat.ron", "--target", s(&t)]);
    fails_with(
        &o,
        1,
        "field 'clock_hz': must be between 1 and 1099511627776 (2^40)",
    );
    // The largest figures accepted: every category is a count, the total their sum.
    let t = write(
        &dir,
        "max.ron",
        "(base: \"mk2\", sync_cycles: 16777216, exchange_latency_cycles: 16777216, \
         exchange_message_cycles: 16777216, stream_copy_latency_cycles: 16777216, \
         clock_hz: 1099511627776, host_link_bytes_per_second: 1024, exchange_bytes_per_cycle: 1)",
    );
    let o = ipusim(&[
        "compile",
        "programs/feeds_repeat.ron",
        "--target",
        s(&t),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let c = &r["categories"];
    let sum: u128 = ["OnTileExecute", "DoExchange", "Sync", "StreamCopy"]
        .iter()
        .map(|k| c[k].as_u64().unwrap() as u128)
        .sum();
    assert_eq!(sum, r["total_cycles"].as_u64().unwrap() as u128);
    // Loops that multiply past 2^64 cycles are an error, not a wrapped figure.
    let p = write(
        &dir,
        "sat.ron",
        "Program(\n    name: \"sat\",\n    device_iterations: 4294967295,\n    nodes: [\n        (name: \"x\", op: Input(stream: \"x\", dtype: F32, shape: [262144])),\n        (name: \"y\", op: Relu, inputs: [\"x\"]),\n        (name: \"o\", op: Outfeed(stream: \"y\"), inputs: [\"y\"]),\n    ],\n    infeeds: [(stream: \"x\", source: Constant(1.0))],\n    outfeeds: [(stream: \"y\", mode: \"last\")],\n)\n",
    );
    for cmd in ["compile", "run"] {
        let o = ipusim(&[cmd, s(&p), "--target", s(&t)]);
        fails_with(
            &o,
            1,
            "sat.ron: error: a cycle or byte figure exceeds 18446744073709551615",
        );
        assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    }
}

#[test]
fn huge_fields_are_clipped_in_messages() {
    let dir = scratch("rel-clip");
    let field = "x".repeat(100_000);
    write(&dir, "d.csv", &format!("a\n{field}\n"));
    let p = write(
        &dir,
        "c.ron",
        "Program(\n    name: \"c\",\n    nodes: [\n        (name: \"x\", op: Input(stream: \"x\", dtype: F32, shape: [1, 1])),\n        (name: \"o\", op: Outfeed(stream: \"y\"), inputs: [\"x\"]),\n    ],\n    infeeds: [(stream: \"x\", source: Csv(path: \"d.csv\", columns: Range(0, 1)))],\n)\n",
    );
    let o = ipusim(&["run", s(&p)]);
    fails_with(&o, 1, "d.csv:2: error: column 1 'a': value 'xxxx");
    assert!(stderr(&o).contains("... (100000 bytes)"), "{}", stderr(&o));
    assert!(stderr(&o).len() < 1000, "{}", stderr(&o).len());
}

#[test]
fn check_refuses_what_the_step_graph_refuses_and_stays_readable() {
    let dir = scratch("rel-check-step");
    let digits = std::fs::read_to_string("programs/mlp_digits.ron").unwrap();
    // A loss scaling FP16 cannot hold: `compile` refused it and `check` passed it.
    let p = write(
        &dir,
        "scaling.ron",
        &digits
            .replace("loss_scaling: 128.0", "loss_scaling: 1e6")
            .replace("precision: \"16.32\"", "precision: \"16.16\""),
    );
    for cmd in ["check", "compile"] {
        fails_with(
            &ipusim(&[cmd, s(&p)]),
            1,
            "scaling.ron: error: cannot build the step graph: training spec: \
             gradient_accumulation x loss_scaling = 1000000 overflows f16",
        );
    }
    // AdamW's weight decay may be 0 (Adam), as the format documents.
    let p = write(
        &dir,
        "adam.ron",
        &digits.replace(
            "Momentum(learning_rate: 0.02, momentum: 0.9)",
            "AdamW(learning_rate: 0.001, weight_decay: 0.0)",
        ),
    );
    let o = ipusim(&["check", s(&p)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // A pool window of 2^64 - 1 with as much padding: the padding rule's arithmetic wrapped
    // and let it through.
    let max = u64::MAX;
    let p = write(
        &dir,
        "pool.ron",
        &format!(
            "Program(\n    name: \"pool\",\n    nodes: [\n        (name: \"x\", op: Input(stream: \"x\", dtype: F32, shape: [2, 3, 8, 8])),\n        (name: \"y\", op: MaxPool2d(kernel: [{max}, {max}], padding: [{max}, {max}, {max}, {max}]), inputs: [\"x\"]),\n        (name: \"o\", op: Outfeed(stream: \"o\"), inputs: [\"y\"]),\n    ],\n    infeeds: [(stream: \"x\", source: Constant(1.0))],\n)\n"
        ),
    );
    fails_with(
        &ipusim(&["check", s(&p)]),
        1,
        &format!("the top padding {max} is more than half the kernel's height ({max})"),
    );
    // Control characters in a stream name would reach the terminal raw.
    let p = write(
        &dir,
        "ctl.ron",
        &constant_program("o\\u{1b}[31m", "F32", "1.0"),
    );
    fails_with(
        &ipusim(&["check", s(&p)]),
        1,
        "holds the control character '\\u{1b}'",
    );
    // A fault on a one-line program of megabytes shows the line around it, not all of it.
    let nodes: String = (0..20_000)
        .map(|i| {
            format!("(name: \"c{i}\", op: Constant(dtype: F32, shape: [1], value: Splat(1.0))), ")
        })
        .collect();
    let p = write(
        &dir,
        "oneline.ron",
        &format!(
            "Program(name: \"l\", nodes: [{nodes}(name: \"z\", op: Softmx, inputs: [\"c0\"])])\n"
        ),
    );
    let o = ipusim(&["check", s(&p)]);
    fails_with(&o, 1, "oneline.ron:1:");
    assert!(stderr(&o).contains("Softmx"), "{}", stderr(&o));
    assert!(stderr(&o).len() < 2000, "{} bytes", stderr(&o).len());
}

#[test]
fn a_system_of_millions_of_tiles_is_refused_before_it_is_built() {
    // `--ipus 4096` ran for minutes, `--replicas 4096` and a million-tile target over 64
    // IPUs aborted on allocation: the per-tile figures of millions of tiles.
    let dir = scratch("rel-system-tiles");
    let target = write(&dir, "wide.ron", "(base: \"mk2\", tiles: 1048576)");
    let needle = "tiles, more than the 2097152 this simulator models";
    let cases: [&[&str]; 3] = [
        &["compile", "programs/mlp_digits.ron", "--ipus", "2000"],
        &[
            "compile",
            "programs/mlp_digits.ron",
            "--ipus",
            "4",
            "--target",
            s(&target),
        ],
        &[
            "run",
            "programs/mlp_digits.ron",
            "--device-iterations",
            "1",
            "--replicas",
            "2048",
        ],
    ];
    for args in cases {
        let o = bounded(1024, 60, args);
        fails_with(&o, 1, needle);
    }
    let o = ipusim(&["compile", "programs/mlp_digits.ron", "--ipus", "2000"]);
    fails_with(
        &o,
        1,
        "2000 IPU(s) x 1 replica(s) x 1472 tiles = 2944000 tiles",
    );
}

#[test]
fn a_checkpoint_is_read_only_as_far_as_the_sessions_variables_can_take() {
    // `--load-variables /dev/zero` read 4 GB before failing: a session now reads at most
    // what a checkpoint of its variables can take.
    let o = bounded(
        1024,
        60,
        &[
            "run",
            "programs/mlp_digits.ron",
            "--device-iterations",
            "1",
            "--load-variables",
            "/dev/zero",
        ],
    );
    fails_with(&o, 1, "/dev/zero: error: the checkpoint is larger than");
}

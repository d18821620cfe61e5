//! `ipusim run` through the built binary: the programs of `programs/` and their numbers, the
//! JSON contract, outfeed modes and gradient accumulation by hand, Rx bytes, checkpoints,
//! traces, exit codes 0 / 1 / 3, and bad input (never a panic, never a partial file).

use serde_json::Value;
use std::path::Path;
use std::process::Output;

mod common;
use common::{ipusim, scratch, stderr, stdout};

fn json(o: &Output) -> Value {
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(o), stderr(o));
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

fn numbers(v: &Value) -> Vec<f64> {
    match v {
        Value::Array(a) => a.iter().flat_map(numbers).collect(),
        Value::Number(n) => vec![n.as_f64().unwrap()],
        Value::String(s) if s == "NaN" => vec![f64::NAN],
        other => panic!("not a number: {other}"),
    }
}

fn entries(doc: &Value, stream: &str) -> Vec<Value> {
    doc["outfeeds"][stream]
        .as_array()
        .unwrap_or_else(|| panic!("no outfeed {stream}: {doc}"))
        .clone()
}

#[test]
fn feeds_repeat_outfeeds_ten_entries_of_d1_and_d2() {
    let doc = json(&ipusim(&["run", "programs/feeds_repeat.ron", "--json"]));
    let d1 = entries(&doc, "d1");
    let d2 = entries(&doc, "d2");
    assert_eq!((d1.len(), d2.len()), (10, 10));
    for (a, b) in d1.iter().zip(&d2) {
        assert_eq!(numbers(a), vec![2.0; 800]);
        assert_eq!(numbers(b), vec![0.0; 800]);
    }
    assert_eq!(numbers(&doc["outfeeds"]["counter"]), vec![10.0]);
    let r = &doc["report"];
    assert_eq!(r["runs"], 1);
    // Rx: two f32[800] infeeds x 10 iterations; Tx: d1, d2 and the i32 counter x 10.
    assert_eq!(r["stream_bytes"]["rx"], 2 * 3200 * 10);
    assert_eq!(r["stream_bytes"]["tx"], (3200 + 3200 + 4) * 10);
    assert_eq!(
        doc["flags"],
        serde_json::json!({"OFLO": false, "DIV0": false, "INV": false})
    );
    // The compile report's contract is inside the run report.
    for field in [
        "program",
        "target",
        "total_cycles",
        "categories",
        "compute_sets",
        "memory",
    ] {
        assert!(r.get(field).is_some(), "report.{field} missing");
    }
    assert_eq!(
        r["executed"]["total_cycles"], r["total_cycles"],
        "executed cycles equal the static estimate"
    );
    // Two runs: 20 entries, the counter continues.
    let doc = json(&ipusim(&[
        "run",
        "programs/feeds_repeat.ron",
        "--json",
        "--steps",
        "20",
    ]));
    assert_eq!(entries(&doc, "d1").len(), 20);
    assert_eq!(numbers(&doc["outfeeds"]["counter"]), vec![10.0, 20.0]);
    assert_eq!(doc["report"]["runs"], 2);
}

#[test]
fn fp16_swamping_prints_the_tutorial_numbers() {
    let o = ipusim(&["run", "programs/fp16_swamping.ron"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    // 0.0004 + 0.25 - 0.25 = 2^-11 (the tutorial's "0.0004833" is a typo), the table, and
    // the swamped 0.0001.
    assert!(
        out.contains(
            "[0.00048828125, 0.199951171875, 0.02001953125, 0.001953125, 0.000244140625, 0]"
        ),
        "{out}"
    );
    let doc = json(&ipusim(&["run", "programs/fp16_swamping.ron", "--json"]));
    let pct: Vec<String> = numbers(&doc["outfeeds"]["relative_error"])
        .iter()
        .map(|e| format!("{:+.1}%", 100.0 * e))
        .collect();
    assert_eq!(
        pct,
        ["+22.1%", "-0.0%", "+0.1%", "-2.3%", "+22.1%", "-100.0%"]
    );
    assert_eq!(numbers(&doc["outfeeds"]["running_sum"]), vec![0.25; 20]);
    assert_eq!(
        numbers(&doc["outfeeds"]["running_sum_f32"]),
        vec![1.0001659393310547]
    );
    let doc = json(&ipusim(&[
        "run",
        "programs/fp16_swamping.ron",
        "--json",
        "--sr",
        "on",
        "--seed",
        "7",
    ]));
    let lanes = numbers(&doc["outfeeds"]["running_sum"]);
    let mean = lanes.iter().sum::<f64>() / 20.0;
    // numerics.md §3.2: one SR lane has mean 1.000166 and sd 0.0152; the mean of 20
    // independent lanes has sd 0.0034. Five sd: 0.017.
    assert!((mean - 1.000166).abs() < 0.017, "{mean} {lanes:?}");
    assert!(lanes.iter().all(|&l| (l - 1.0).abs() < 0.1), "{lanes:?}");
}

#[test]
fn fp_exceptions_saturate_give_nan_or_trap() {
    let doc = json(&ipusim(&["run", "programs/fp_exceptions.ron", "--json"]));
    assert_eq!(numbers(&doc["outfeeds"]["product"]), vec![65504.0]);
    assert_eq!(numbers(&doc["outfeeds"]["product_f32"]), vec![1e8]);
    assert_eq!(doc["flags"]["OFLO"], true);
    assert_eq!(doc["flags"]["INV"], false);
    let doc = json(&ipusim(&[
        "run",
        "programs/fp_exceptions.ron",
        "--json",
        "--nanoo",
    ]));
    assert_eq!(doc["outfeeds"]["product"], serde_json::json!(["NaN"]));
    assert_eq!(doc["flags"]["INV"], true);
    let o = ipusim(&[
        "run",
        "programs/fp_exceptions.ron",
        "--fp-exceptions",
        "oflo",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let err = stderr(&o);
    for part in ["floating-point exception", "OFLO", "tile", "product"] {
        assert!(err.contains(part), "{part}: {err}");
    }
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
}

#[test]
fn gradient_accumulation_and_outfeed_modes_by_hand() {
    // tests/programs/run/ga_sgd.ron: loss = w·x, x = 1, 2, ...; SGD lr 0.5 on the mean of 3
    // micro-batches, 2 updates per run: w = 1, 0, -2.5, -6.5, -12.
    let p = "tests/programs/run/ga_sgd.ron";
    let all = vec![
        1.0, 2.0, 3.0, 0.0, 0.0, 0.0, -17.5, -20.0, -22.5, -65.0, -71.5, -78.0,
    ];
    for (mode, expected) in [
        ("all", all),
        ("last", vec![0.0, -78.0]),
        ("sum", vec![6.0, -274.5]),
        ("every:4", vec![0.0, -65.0]),
    ] {
        let flag = format!("loss={mode}");
        let doc = json(&ipusim(&[
            "run",
            p,
            "--json",
            "--steps",
            "4",
            "--outfeed-mode",
            &flag,
        ]));
        assert_eq!(numbers(&doc["outfeeds"]["loss"]), expected, "{mode}");
        assert_eq!(entries(&doc, "x_seen").len(), 12);
        let r = &doc["report"];
        assert_eq!(
            (r["runs"].clone(), r["micro_batches"].clone()),
            (2.into(), 12.into())
        );
        assert_eq!(r["stream_bytes"]["rx"], 6 * 4, "one f32 per micro-batch");
    }
}

#[test]
fn rx_bytes_are_elements_times_dtype_bytes_times_micro_batches() {
    let images = 64 * 3 * 64 * 64;
    let labels = 64 * 4 * 3;
    let f16 = json(&ipusim(&[
        "run",
        "tests/programs/run/seed_io_f16.ron",
        "--json",
    ]));
    let u8 = json(&ipusim(&[
        "run",
        "tests/programs/run/seed_io_u8.ron",
        "--json",
    ]));
    assert_eq!(f16["report"]["stream_bytes"]["rx"], images * 2 * 3 + labels);
    assert_eq!(u8["report"]["stream_bytes"]["rx"], images * 3 + labels);
    assert_eq!(
        f16["report"]["executed"]["stream_bytes"]["rx"], f16["report"]["stream_bytes"]["rx"],
        "executed bytes equal the model"
    );
    let o = ipusim(&["run", "tests/programs/run/seed_io_f16.ron"]);
    assert!(stdout(&o).contains("4.5 MB"), "{}", stdout(&o));
}

#[test]
fn checkpoints_resume_and_reject_mismatches() {
    let dir = scratch("ckpt");
    let ckpt = dir.join("w.json");
    let c = ckpt.to_str().unwrap();
    let p = "tests/programs/run/ga_sgd.ron";
    json(&ipusim(&["run", p, "--json", "--save-variables", c]));
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&ckpt).unwrap()).unwrap();
    assert_eq!(saved["format"], "ipusim-variables");
    let w = saved["variables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "w")
        .unwrap();
    assert_eq!(
        (w["dtype"].clone(), numbers(&w["values"])),
        ("f32".into(), vec![-2.5])
    );
    // Resume: the second run starts from w = -2.5, as the second of two runs does.
    let doc = json(&ipusim(&["run", p, "--json", "--load-variables", c]));
    assert_eq!(numbers(&doc["outfeeds"]["loss"])[..3], [-2.5, -5.0, -7.5]);
    // A checkpoint of another precision is rejected, naming the variable.
    let o = ipusim(&["run", p, "--precision", "16.16", "--load-variables", c]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("variable 'w': is f32[1] in the checkpoint"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn traces_are_written() {
    let dir = scratch("trace");
    let t = dir.join("t.json");
    let c = dir.join("c.json");
    let o = ipusim(&[
        "run",
        "programs/feeds_repeat.ron",
        "--trace",
        t.to_str().unwrap(),
        "--chrome-trace",
        c.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&t).unwrap()).unwrap();
    assert!(!trace["events"].as_array().unwrap().is_empty());
    let chrome: Value = serde_json::from_str(&std::fs::read_to_string(&c).unwrap()).unwrap();
    let events = chrome["traceEvents"].as_array().unwrap();
    let tracks: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        tracks,
        [
            "Program",
            "OnTileExecute",
            "DoExchange",
            "Sync",
            "StreamCopy"
        ]
    );
    let copies = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "StreamCopy" && e["name"] == "d1")
        .count();
    assert_eq!(copies, 10, "one slice per stream copy of d1");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writes `text` as a CSV in `dir`.
fn csv(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

/// The digits file with `edit` applied to data row `row` (0-based).
fn digits_with(row: usize, edit: impl Fn(&str) -> String) -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/data/digits_train.csv"),
    )
    .unwrap();
    text.lines()
        .enumerate()
        .map(|(i, l)| if i == row + 1 { edit(l) } else { l.to_string() })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn bad_input_is_a_clear_error_and_leaves_no_file() {
    let dir = scratch("bad");
    let out = dir.join("report.json");
    let ckpt = dir.join("ckpt.json");
    let flagship = "programs/mlp_digits.ron";
    let files = [
        "-o",
        out.to_str().unwrap(),
        "--save-variables",
        ckpt.to_str().unwrap(),
    ];
    let run = |extra: &[&str]| {
        let mut args = vec!["run", flagship];
        args.extend_from_slice(extra);
        args.extend_from_slice(&files);
        ipusim(&args)
    };
    let bad_value = csv(
        &dir,
        "bad_value.csv",
        &digits_with(3, |l| l.replacen("0,", "x,", 1)),
    );
    let bad_width = csv(
        &dir,
        "bad_width.csv",
        &digits_with(7, |l| l[2..].to_string()),
    );
    let too_big = csv(
        &dir,
        "too_big.csv",
        &digits_with(0, |l| l.replacen("0,", "300,", 1)),
    );
    let ten_rows: Vec<String> = digits_with(0, |l| l.to_string())
        .lines()
        .take(11)
        .map(str::to_string)
        .collect();
    let short = csv(&dir, "short.csv", &ten_rows.join("\n"));
    let cases: Vec<(Vec<String>, String)> = vec![
        (vec!["--infeed".into(), "features=/no/such/file.csv".into()], "/no/such/file.csv: error: cannot read".into()),
        (vec!["--infeed".into(), format!("features={bad_value}")], format!("{bad_value}:5: error: column 1 'p0': value 'x' is not a number")),
        (vec!["--infeed".into(), format!("features={bad_width}")], format!("{bad_width}:9: error: the row has 64 fields, the header (line 1) has 65")),
        (vec!["--infeed".into(), format!("features={too_big}")], format!("{too_big}:2: error: column 1 'p0': value '300' does not fit u8")),
        (vec!["--infeed".into(), format!("features={short}")], format!("{short}: error: 10 data rows, but one micro-batch of stream 'features' (u8[50, 64]) needs 50")),
        (vec!["--inference".into(), "--steps".into(), "31".into()], "infeed 'features' is shorter than the run needs".into()),
        (vec!["--infeed".into(), "pixels=a.csv".into()], "the program has no infeed stream 'pixels' (its infeeds: features, labels)".into()),
        (vec!["--steps".into(), "100".into()], "--steps 100 is not a multiple of the program's device_iterations (300)".into()),
        (vec!["--load-variables".into(), "/no/such/ckpt.json".into()], "/no/such/ckpt.json: error: cannot read".into()),
        (vec!["--bogus".into()], "unexpected argument '--bogus'".into()),
        (vec!["--sr".into(), "maybe".into()], "invalid value 'maybe'".into()),
    ];
    for (extra, message) in cases {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let o = run(&extra);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {err}");
        assert!(
            err.contains(&message),
            "{extra:?}: expected '{message}' in:\n{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        assert!(!out.exists() && !ckpt.exists(), "{extra:?} left a file");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains("ipusim-tmp"))
            .collect();
        assert!(left.is_empty(), "{extra:?} left {left:?}");
    }
    let o = ipusim(&["run", "no/such/program.ron"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no/such/program.ron"), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn out_of_memory_exits_2_with_the_report() {
    let dir = scratch("oom");
    let target = dir.join("tiny.ron");
    std::fs::write(&target, "(base: \"mk1\", tiles: 2, bytes_per_tile: 4096)").unwrap();
    let t = target.to_str().unwrap();
    let o = ipusim(&["run", "programs/mlp_digits.ron", "--target", t, "--json"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("out of memory on"), "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["report"]["memory"]["oom"], true);
    assert_eq!(doc["report"]["runs"], 0);
    assert_eq!(
        doc["report"]["stream_bytes"]["rx"],
        300 * (50 * 64 + 50 * 4)
    );
    let o = ipusim(&["run", "programs/mlp_digits.ron", "--target", t]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stdout(&o).contains("OUT OF MEMORY"), "{}", stdout(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn results_do_not_depend_on_host_threads() {
    let run = |threads: &str| {
        let doc = json(&ipusim(&[
            "run",
            "programs/mlp_digits.ron",
            "--json",
            "--precision",
            "16.16",
            "--sr",
            "on",
            "--seed",
            "3",
            "--threads",
            threads,
        ]));
        (
            doc["outfeeds"].clone(),
            doc["report"]["executed"]["total_cycles"].clone(),
        )
    };
    assert_eq!(run("1"), run("2"));
}

/// `--synthetic-data` feeds every infeed from a generator of its shape and dtype: a program
/// whose CSV data is missing runs with it (and fails without it), deterministically, and the
/// flag cannot be combined with `--infeed`.
#[test]
fn synthetic_data_replaces_every_source() {
    let dir = scratch("synthetic");
    // The op tour reads `tour.csv`, which is not next to this copy.
    let text = std::fs::read_to_string("tests/programs/sim/op_tour.ron").unwrap();
    let program = dir.join("op_tour.ron");
    std::fs::write(&program, text).unwrap();
    let p = program.to_str().unwrap();
    let without = ipusim(&["run", p]);
    assert_eq!(without.status.code(), Some(1), "{}", stderr(&without));
    assert!(
        stderr(&without).contains("tour.csv"),
        "{}",
        stderr(&without)
    );
    let a = json(&ipusim(&["run", p, "--synthetic-data", "--json"]));
    let b = json(&ipusim(&["run", p, "--synthetic-data", "--json"]));
    assert_eq!(a["outfeeds"], b["outfeeds"]);
    assert!(numbers(&a["outfeeds"]["loss"])
        .iter()
        .all(|l| l.is_finite()));
    let both = ipusim(&["run", p, "--synthetic-data", "--infeed", "x=x.csv"]);
    assert_eq!(both.status.code(), Some(1), "{}", stderr(&both));
    assert!(
        stderr(&both).contains("--synthetic-data"),
        "{}",
        stderr(&both)
    );
}

/// Labels outside the loss's classes train as on the IPU (an all-zero one-hot row) but are
/// reported: a warning on standard error and in the report naming the stream, the loss,
/// the classes, the count and the first with its file and line; a clean run has no
/// `warnings` in its JSON.
#[test]
fn labels_outside_the_classes_are_reported() {
    let dir = scratch("labels");
    let last_field_to =
        |label: &'static str| move |l: &str| format!("{},{label}", &l[..l.rfind(',').unwrap()]);
    let one_out = csv(&dir, "one_out.csv", &digits_with(3, last_field_to("10")));
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "programs/mlp_digits.ron", "--json"];
        args.extend_from_slice(extra);
        ipusim(&args)
    };
    let infeed = format!("labels={one_out}");
    let o = run(&["--infeed", &infeed]);
    let doc = json(&o);
    let warnings = doc["report"]["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let w = warnings[0].as_str().unwrap();
    // 300 steps of 50 rows: ten passes over the 1,500 rows, the edited one in each.
    // The edited row is data row 3, line 5 of the file (after the header).
    let expected = format!("infeed 'labels': 10 of 15,000 labels fed are outside [0, 10), the classes of 'loss' (the first: 10, sample 3 of micro-batch 0, {one_out}:5)");
    assert!(w.starts_with(&expected), "{w}");
    assert!(
        stderr(&o).contains(&format!("warning: {w}")),
        "{}",
        stderr(&o)
    );
    let clean = json(&run(&[]));
    assert!(
        clean["report"].get("warnings").is_none(),
        "{}",
        clean["report"]
    );
}

//! `ipusim check` through the built binary: exit codes, the text summary, `--json`, errors.

use std::path::{Path, PathBuf};

mod common;
use common::{ipusim, stderr, stdout};

/// The worked example of docs/program-format.md, written to a fresh directory.
fn docs_example(tag: &str) -> PathBuf {
    let doc = include_str!("../docs/program-format.md");
    let body = &doc[doc.find("```ron example").unwrap()..];
    let body = &body[body.find('\n').unwrap() + 1..];
    let example = &body[..body.find("```").unwrap()];
    let dir = std::env::temp_dir().join(format!("ipusim-check-{tag}-{}", std::process::id()));
    // A directory left by an earlier run under the same process id may hold its data file.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mlp_digits.ron");
    std::fs::write(&path, example).unwrap();
    path
}

#[test]
fn valid_program_prints_a_summary() {
    let path = docs_example("text");
    let o = ipusim(&["check", path.to_str().unwrap()]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    assert!(out.starts_with("program: mlp_digits ("), "{out}");
    assert!(out.contains("\nnodes: 21\n"), "{out}");
    assert!(out.contains("MatMul 2"), "{out}");
    // w1 64x32 + b1 32 + w2 32x10 + b2 10 = 2,410 FP32 master weights.
    assert!(
        out.contains("parameters: 4 variables, 2,410 elements, 9,640 bytes"),
        "{out}"
    );
    assert!(out.contains("features  u8     [16, 64]  1,024"), "{out}");
    // 10 device iterations x 2 micro-batches, (1,024 + 64) bytes each.
    assert!(
        out.contains("= 20 micro-batches; host link 21,760 bytes in"),
        "{out}"
    );
    assert!(out.contains("accuracy  f16 (f32 as written)"), "{out}");
    assert!(
        out.contains("precision 16.32 (compute f16, weights f32)"),
        "{out}"
    );
    // The CSV file is not next to the copy: a warning, not an error.
    assert!(
        out.contains("warning[missing-data-file]: infeed 'features'"),
        "{out}"
    );
    assert!(out.ends_with("ok: 'mlp_digits' is valid\n"), "{out}");

    std::fs::create_dir_all(path.parent().unwrap().join("data")).unwrap();
    std::fs::write(
        path.parent().unwrap().join("data/digits_train.csv"),
        "label\n",
    )
    .unwrap();
    let out = stdout(&ipusim(&["check", path.to_str().unwrap()]));
    assert!(out.contains("lint: 0 warnings, 0 infos"), "{out}");
}

#[test]
fn json_summary() {
    let path = docs_example("json");
    let o = ipusim(&["check", path.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["valid"], true);
    let s = &v["summary"];
    assert_eq!(s["name"], "mlp_digits");
    assert_eq!(s["nodes"], 21);
    assert_eq!(s["ops"]["Variable"], 4);
    assert_eq!(s["parameters"]["by_dtype"]["f32"]["elements"], 2410);
    assert_eq!(s["infeeds"][0]["stream"], "features");
    assert_eq!(s["infeeds"][0]["dtype"], "u8");
    assert_eq!(s["infeeds"][0]["bytes_per_micro_batch"], 1024);
    assert_eq!(s["outfeeds"][1]["mode"], "every:5");
    assert_eq!(s["micro_batches_per_run"], 20);
    assert_eq!(s["training"]["optimizer"], "momentum");
    assert_eq!(s["training"]["compute_dtype"], "f16");
    assert_eq!(s["warnings"][0]["code"], "missing-data-file");
}

#[test]
fn lint_warnings_do_not_fail_the_check() {
    let o = ipusim(&["check", "tests/programs/check/fp16_traps.ron"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    for code in [
        "warning[epsilon-underflow]",
        "warning[beta-rounds-to-one]",
        "warning[fp16-softmax] node 'probs'",
        "warning[constant-overflow] node 'big'",
    ] {
        assert!(out.contains(code), "{code} missing:\n{out}");
    }
    assert!(out.contains("lint: 4 warnings, 0 infos"), "{out}");
}

#[test]
fn invalid_program_fails_with_the_rendered_error() {
    let o = ipusim(&["check", "tests/programs/broken/missing_input.ron"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o), "");
    let err = stderr(&o);
    assert!(
        err.starts_with("tests/programs/broken/missing_input.ron:7:46: error: node 'd1' (Add): missing input 'x3'"),
        "{err}"
    );
    assert!(err.contains("^^^^"), "{err}");
}

#[test]
fn invalid_program_json() {
    let o = ipusim(&["check", "tests/programs/broken/cycle.ron", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["valid"], false);
    assert_eq!(v["error"]["line"], 6);
    assert_eq!(v["error"]["column"], 44);
    assert_eq!(v["error"]["kind"], "Cycle");
    assert!(stderr(&o).contains("nodes form a cycle"));
}

#[test]
fn unreadable_files_and_bad_arguments() {
    let o = ipusim(&["check", "no/such/program.ron"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).starts_with("no/such/program.ron: error: cannot read the program"),
        "{}",
        stderr(&o)
    );
    let o = ipusim(&["check"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("<PROGRAM>"));
    // Not UTF-8, a directory: errors, never panics.
    let dir = std::env::temp_dir().join(format!("ipusim-check-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("bin.ron");
    std::fs::write(&bin, [0xff, 0xfe, 0x00]).unwrap();
    for p in [bin.as_path(), dir.as_path(), Path::new("")] {
        let o = ipusim(&["check", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    }
}

/// `available_memory_proportion` and per-op `memory_proportions`: out-of-range values and
/// names of no node are errors at their line; valid ones are accepted and the CLI flag
/// overrides them (and is range-checked itself).
#[test]
fn memory_proportions_are_checked_where_they_are_written() {
    let dir = std::env::temp_dir().join(format!("ipusim-check-amp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/sim/conv_reduction.ron"),
    )
    .unwrap();
    let with = |fields: &str| -> PathBuf {
        let text = base.replacen(
            "    device_iterations: 1,\n",
            &format!("    device_iterations: 1,\n{fields}"),
            1,
        );
        let p = dir.join("p.ron");
        std::fs::write(&p, text).unwrap();
        p
    };
    let cases = [
        (
            "    available_memory_proportion: Some(1.5),\n",
            "p.ron:5:34: error: available_memory_proportion 1.5 is not in (0, 1]",
        ),
        (
            "    memory_proportions: {\"conv2x\": 0.1},\n",
            "p.ron:5:25: error: memory_proportions: no node is named 'conv2x'",
        ),
        (
            "    memory_proportions: {\"conv2\": 0.0},\n",
            "p.ron:5:25: error: memory_proportions: 'conv2': 0 is not in (0, 1]",
        ),
    ];
    for (fields, want) in cases {
        let p = with(fields);
        let o = ipusim(&["check", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{fields}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{fields}: {}", stderr(&o));
    }
    let p = with(
        "    available_memory_proportion: Some(0.3),\n    memory_proportions: {\"conv2\": 0.1},\n",
    );
    let o = ipusim(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = ipusim(&[
        "compile",
        p.to_str().unwrap(),
        "--available-memory-proportion",
        "0.5",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = ipusim(&[
        "compile",
        p.to_str().unwrap(),
        "--available-memory-proportion",
        "0",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("0 is not a number in (0, 1]"),
        "{}",
        stderr(&o)
    );
}

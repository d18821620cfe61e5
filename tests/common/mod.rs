//! Helpers shared by the CLI tests: run the built `ipusim` binary from the workspace root,
//! read its output, make a scratch directory.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs `ipusim ARGS` in the workspace root.
pub fn ipusim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ipusim"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap()
}

/// Standard output as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Standard error as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Writes a small CIFAR ResNet-8 (batch 2, 8x8 images) to `dir/resnet8.ron` with `ipusim model`
/// and extra flags; returns its path.
pub fn tiny_resnet(dir: &std::path::Path, extra: &[&str]) -> PathBuf {
    let path = dir.join("resnet8.ron");
    let mut args = vec!["model", "resnet8", "--batch", "2", "--image-size", "8"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["-o", path.to_str().unwrap()]);
    let o = ipusim(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    path
}

/// A fresh directory for one test (`tag` keeps tests apart; the process id keeps runs apart).
pub fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ipusim-test-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The JSON on standard output of a run that succeeded (exit 0).
pub fn json(o: &Output) -> serde_json::Value {
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(o), stderr(o));
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

/// `ipusim run PROGRAM --json --save-variables DIR/TAG.json ARGS`: the JSON output and the
/// saved variables (the file's `variables` array).
pub fn run_saving(
    program: &str,
    dir: &std::path::Path,
    tag: &str,
    args: &[&str],
) -> (serde_json::Value, serde_json::Value) {
    let vars = dir.join(format!("{tag}.json"));
    let mut all = vec![
        "run",
        program,
        "--json",
        "--save-variables",
        vars.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    let out = json(&ipusim(&all));
    let mut saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(vars).unwrap()).unwrap();
    (out, saved["variables"].take())
}

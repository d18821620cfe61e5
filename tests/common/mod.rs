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

/// A fresh directory for one test (`tag` keeps tests apart; the process id keeps runs apart).
pub fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ipusim-test-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

//! The stable fuzz smoke: every harness of `ipusim::fuzzing` (the functions the `cargo fuzz`
//! targets of `fuzz/` call) over its seed corpus, the inputs that once crashed a harness
//! (`tests/fuzz_regressions/TARGET-*`), and a few thousand inputs the deterministic mutator
//! derives from the seeds. A panic anywhere fails the test with the target, the input's
//! number and (for short inputs) the input itself. Set `IPUSIM_WRITE_CORPUS=DIR` to write the
//! seeds to `DIR/TARGET/` for the fuzzer.

use ipusim::fuzzing::{run, seeds, Depth, Mutator, TARGETS};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

/// Mutated inputs per target (fewer for the targets that compile or run a program per input).
fn budget(target: &str) -> usize {
    match target {
        "compile" => 3000,
        "debugger" => 2000,
        _ => 4000,
    }
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn check(target: &str, what: &str, data: &[u8]) -> Depth {
    let result = catch_unwind(AssertUnwindSafe(|| run(target, data)));
    match result {
        Ok(Some(depth)) => depth,
        Ok(None) => panic!("unknown target {target}"),
        Err(_) => {
            let shown = if data.len() <= 2000 {
                format!("{:?}", String::from_utf8_lossy(data))
            } else {
                format!("{} bytes", data.len())
            };
            panic!("fuzz target '{target}' panicked on {what}: {shown}");
        }
    }
}

fn regressions(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = repo().join("tests/fuzz_regressions");
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{target}-"))
        })
        .filter_map(|e| {
            Some((
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).ok()?,
            ))
        })
        .collect();
    v.sort();
    v
}

fn smoke(target: &str) {
    let seeds = seeds(target, repo());
    assert!(!seeds.is_empty(), "no seeds for {target}");
    if let Ok(dir) = std::env::var("IPUSIM_WRITE_CORPUS") {
        let dir = Path::new(&dir).join(target);
        std::fs::create_dir_all(&dir).unwrap();
        for (i, s) in seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:03}")), s).unwrap();
        }
    }
    for (i, s) in seeds.iter().enumerate() {
        check(target, &format!("seed {i}"), s);
    }
    for (name, data) in regressions(target) {
        check(target, &name, &data);
    }
    let mut m = Mutator::new(0x1b5e_ed00 ^ target.len() as u64);
    let mut depths = [0usize; 3];
    for i in 0..budget(target) {
        let input = m.mutate(&seeds[i % seeds.len()]);
        depths[check(target, &format!("mutant {i}"), &input) as usize] += 1;
    }
    // The mutants must exercise the readers' error paths and get through them too: a
    // harness (or mutator) that stopped reaching its code fails here.
    let n = budget(target);
    println!("{target}: {n} mutants, refused/accepted/through = {depths:?}");
    assert!(
        depths[0] >= n / 100,
        "{target}: too few refused: {depths:?}"
    );
    assert!(
        depths[2] >= n / 100,
        "{target}: too few got through: {depths:?}"
    );
}

#[test]
fn every_target_has_a_smoke() {
    assert_eq!(TARGETS.len(), 8);
}

#[test]
fn program_parser_and_validator() {
    smoke("program");
}

#[test]
fn compiler_on_valid_programs() {
    smoke("compile");
}

#[test]
fn csv_infeed_reader() {
    smoke("csv");
}

#[test]
fn checkpoint_reader() {
    smoke("checkpoint");
}

#[test]
fn report_reader() {
    smoke("report");
}

#[test]
fn fp_expression_parser() {
    smoke("fp");
}

#[test]
fn debugger_command_parser() {
    smoke("debugger");
}

#[test]
fn onnx_importer() {
    smoke("onnx");
}

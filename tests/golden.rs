//! Before/after guard for refactors that must change no result: the `compile --json`,
//! `compile --dump program`, `compile --dump tiles` and `run --json` outputs (with exit code
//! and standard error) of every shipped and test program, on mk2, mk1 and a 16-tile target,
//! in every precision, are digested and held against `tests/golden/digests.txt`, recorded
//! from the code before the refactor. Host timings (`wall_seconds`) are left out; nothing
//! else is.
//!
//! A change that is meant to change results re-records the file with
//! `IPUSIM_BLESS_GOLDEN=1 cargo test --release --test golden` and says why in its commit.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// The programs: shipped ones and the valid test programs.
fn programs() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for dir in [
        "programs",
        "tests/programs/check",
        "tests/programs/run",
        "tests/programs/sim",
    ] {
        let mut names: Vec<String> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".ron"))
            .collect();
        names.sort();
        out.extend(
            names
                .into_iter()
                .map(|n| format!("{dir}/{n}"))
                .filter(|p| !NOT_SWEPT.contains(&p.as_str())),
        );
    }
    out
}

/// Programs left out of the sweep: a 224×224 ResNet-50 takes about 20 s and 4 GB of host memory
/// per compile and the hands-on day's ResNet101 over two minutes and 18 GB, so their 27 cases
/// would take hours. `tests/cli_model.rs` holds the ResNet-50's report on mk2 at 16.16 (its
/// total cycles, convolutions and memory verdict); `docs/hands-on.md` the ResNet101's.
const NOT_SWEPT: &[&str] = &["programs/resnet50.ron", "programs/hands_on_resnet101.ron"];

const TARGETS: [&str; 3] = ["mk2", "mk1", "tests/programs/targets/mk2_16.ron"];
const PRECISIONS: [&str; 3] = ["16.16", "16.32", "32.32"];

/// FNV-1a, 64 bits: a stable digest (std's hashers may change between Rust versions).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Drops every `wall_seconds` field (host time) from a JSON value.
fn drop_host_time(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            m.remove("wall_seconds");
            m.values_mut().for_each(drop_host_time);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(drop_host_time),
        _ => {}
    }
}

/// One case's digest: exit code, standard output (host time dropped from JSON), standard
/// error, the trace file when the case writes one, and the output's length.
fn digest(args: &[&str]) -> String {
    let trace = args
        .iter()
        .position(|&a| a == "--trace")
        .map(|i| std::path::PathBuf::from(args[i + 1]));
    let out = Command::new(env!("CARGO_BIN_EXE_ipusim"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let stdout = match serde_json::from_slice::<serde_json::Value>(&out.stdout) {
        Ok(mut v) if args.contains(&"--json") => {
            drop_host_time(&mut v);
            serde_json::to_vec(&v).unwrap()
        }
        _ => out.stdout.clone(),
    };
    let mut all = stdout.clone();
    all.extend_from_slice(b"\n--stderr--\n");
    all.extend_from_slice(&out.stderr);
    if let Some(trace) = trace {
        all.extend_from_slice(b"\n--trace--\n");
        all.extend_from_slice(&std::fs::read(&trace).unwrap_or_default());
        let _ = std::fs::remove_file(trace);
    }
    format!(
        "exit {} bytes {} fnv {:016x}",
        out.status.code().unwrap_or(-1),
        stdout.len(),
        fnv1a(&all)
    )
}

/// Every case: its key and its arguments.
/// Programs whose run is a long training (150 CNN steps on 1,472 tiles take about 20 s per
/// run): their compile outputs are recorded, their runs are checked by `tests/cnn_flagship.rs`
/// (accuracy) and the simulator's differential tests (node by node on `cnn_tour`).
const COMPILE_ONLY: &[&str] = &["programs/resnet_digits.ron"];

fn cases() -> Vec<(String, Vec<String>)> {
    let traces = std::env::temp_dir().join(format!("ipusim-golden-{}", std::process::id()));
    std::fs::create_dir_all(&traces).unwrap();
    let mut out = Vec::new();
    for program in programs() {
        for target in TARGETS {
            let tname = Path::new(target).file_stem().unwrap().to_string_lossy();
            for precision in PRECISIONS {
                let base = [
                    program.clone(),
                    "--target".into(),
                    target.into(),
                    "--precision".into(),
                    precision.into(),
                ];
                let key = |what: &str| format!("{program} {tname} {precision} {what}");
                let with = |cmd: &str, extra: &[&str]| -> Vec<String> {
                    let mut v = vec![cmd.to_string()];
                    v.extend(base.iter().cloned());
                    v.extend(extra.iter().map(|s| s.to_string()));
                    v
                };
                out.push((key("compile-json"), with("compile", &["--json"])));
                out.push((key("dump-program"), with("compile", &["--dump", "program"])));
                out.push((key("dump-tiles"), with("compile", &["--dump", "tiles"])));
                if COMPILE_ONLY.contains(&program.as_str()) {
                    continue;
                }
                let trace = traces.join(format!("{}.json", out.len()));
                let trace = trace.to_string_lossy();
                out.push((
                    key("run-json"),
                    with("run", &["--json", "--threads", "1", "--trace", &trace]),
                ));
            }
        }
    }
    out
}

#[test]
fn outputs_equal_the_recorded_digests() {
    let cases = cases();
    // Two host threads: the machine's cores; each case is a process.
    let results: BTreeMap<String, String> = std::thread::scope(|s| {
        let chunks: Vec<_> = cases.chunks(cases.len().div_ceil(2)).collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|(key, args)| {
                            let args: Vec<&str> = args.iter().map(String::as_str).collect();
                            (key.clone(), digest(&args))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let text: String = results
        .iter()
        .map(|(k, v)| format!("{k} => {v}\n"))
        .collect();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/digests.txt");
    if std::env::var_os("IPUSIM_BLESS_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let recorded = std::fs::read_to_string(&path).expect("tests/golden/digests.txt");
    let recorded: BTreeMap<&str, &str> = recorded
        .lines()
        .filter_map(|l| l.split_once(" => "))
        .collect();
    let mut differ = Vec::new();
    for (k, v) in &results {
        match recorded.get(k.as_str()) {
            Some(r) if r == v => {}
            Some(r) => differ.push(format!("{k}: recorded {r}, now {v}")),
            None => differ.push(format!("{k}: not recorded (now {v})")),
        }
    }
    for k in recorded.keys() {
        if !results.contains_key(*k) {
            differ.push(format!("{k}: recorded but no longer produced"));
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {} outputs differ from the recording:\n{}",
        differ.len(),
        results.len(),
        differ.join("\n")
    );
}

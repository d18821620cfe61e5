//! `ipusim compile` through the built binary: the text and JSON reports, the JSON contract's
//! field names, targets, dumps, and the exit codes 0 / 2 (out of memory, full report) / 1.

use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::{ipusim, scratch, stderr, stdout};

/// The worked example of docs/program-format.md (the digits MLP, 16.32).
fn docs_example(dir: &Path) -> PathBuf {
    let doc = include_str!("../docs/program-format.md");
    let body = &doc[doc.find("```ron example").unwrap()..];
    let body = &body[body.find('\n').unwrap() + 1..];
    let example = &body[..body.find("```").unwrap()];
    let path = dir.join("mlp_digits.ron");
    std::fs::write(&path, example).unwrap();
    path
}

/// `ipusim compile PROGRAM ARGS`.
fn compile(program: &Path, args: &[&str]) -> Output {
    let mut all = vec!["compile", program.to_str().unwrap()];
    all.extend_from_slice(args);
    ipusim(&all)
}

/// Asserts that `o` is an error (exit 1) whose message contains `text`.
fn fails(o: &Output, text: &str) {
    assert_eq!(o.status.code(), Some(1), "{}", stderr(o));
    assert!(stderr(o).contains(text), "{}", stderr(o));
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

#[test]
fn text_report_has_units_and_categories() {
    let dir = scratch("text");
    let p = docs_example(&dir);
    let o = compile(&p, &[]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    assert!(
        out.contains("ipusim compile: mlp_digits on mk2 (1472 tiles"),
        "{out}"
    );
    assert!(out.contains("precision 16.32"), "{out}");
    assert!(out.contains("Total: "), "{out}");
    for header in [
        "cycles",
        "share (%)",
        "cycles (total)",
        "bytes (all tiles)",
        "Memory (bytes)",
    ] {
        assert!(out.contains(header), "missing header '{header}': {out}");
    }
    for category in ["OnTileExecute", "DoExchange", "Sync", "StreamCopy"] {
        assert!(out.contains(category), "{out}");
    }
    assert!(out.contains("Fits in memory."), "{out}");
}

#[test]
fn json_contract_fields_and_sums() {
    let dir = scratch("json");
    let p = docs_example(&dir);
    for target in ["mk2", "mk1"] {
        for precision in ["16.16", "16.32", "32.32"] {
            let o = compile(
                &p,
                &["--json", "--target", target, "--precision", precision],
            );
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
            let v = json(&o);
            assert_eq!(v["program"], "mlp_digits");
            assert_eq!(v["precision"], precision);
            assert_eq!(v["target"]["name"], target);
            for f in ["tiles", "bytes_per_tile", "clock_hz"] {
                assert!(v["target"][f].as_u64().unwrap() > 0, "target.{f}");
            }
            let c = &v["categories"];
            let sum: u64 = ["OnTileExecute", "DoExchange", "Sync", "StreamCopy"]
                .iter()
                .map(|k| c[k].as_u64().unwrap())
                .sum();
            assert_eq!(sum, v["total_cycles"].as_u64().unwrap());
            let sets = v["compute_sets"].as_array().unwrap();
            assert!(!sets.is_empty());
            for cs in sets {
                assert!(
                    cs["name"].is_string() && cs["cycles"].is_u64() && cs["tiles_used"].is_u64()
                );
            }
            let b = v["tile_balance"].as_f64().unwrap();
            assert!(b > 0.0 && b <= 1.0);
            let m = &v["memory"];
            for f in ["bytes_per_tile_capacity", "max_tile_bytes", "total_bytes"] {
                assert!(m[f].as_u64().unwrap() > 0, "memory.{f}");
            }
            assert_eq!(m["oom"], false);
            assert!(m["oom_tiles"].as_array().unwrap().is_empty());
            // PopVision's memory types: the code's parts add up to it; one IPU has no
            // global exchange.
            let k = &m["categories"];
            let parts = code_parts(k);
            assert_eq!(parts.iter().sum::<u64>(), k["code"].as_u64().unwrap());
            assert!(parts[..3].iter().all(|&b| b > 0), "{k}");
            assert_eq!(parts[3], 0, "{k}");
            let worst = &m["worst_tiles"][0];
            assert_eq!(worst["categories"]["total"], worst["bytes"]);
        }
    }
}

/// `memory.categories`' control, vertex, internal and global exchange code.
fn code_parts(k: &serde_json::Value) -> [u64; 4] {
    [
        "control_code",
        "vertex_code",
        "internal_exchange_code",
        "global_exchange_code",
    ]
    .map(|f| {
        k[f].as_u64()
            .unwrap_or_else(|| panic!("memory.categories.{f}: {k}"))
    })
}

#[test]
fn out_of_memory_exits_2_with_a_full_report() {
    let dir = scratch("oom");
    let p = docs_example(&dir);
    let t = dir.join("tiny.ron");
    std::fs::write(&t, "(base: \"mk1\", tiles: 2, bytes_per_tile: 4096)").unwrap();
    let report = dir.join("report.json");
    let o = compile(
        &p,
        &[
            "--target",
            t.to_str().unwrap(),
            "--json",
            "-o",
            report.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("out of memory"), "{}", stderr(&o));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["memory"]["oom"], true);
    assert!(!v["memory"]["oom_tiles"].as_array().unwrap().is_empty());
    assert!(!v["memory"]["worst_tiles"].as_array().unwrap().is_empty());
    assert!(v["total_cycles"].as_u64().unwrap() > 0);
    assert_eq!(v["target"]["tiles"], 2);
    // The text report says so too.
    let o = compile(&p, &["--target", t.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stdout(&o).contains("OUT OF MEMORY on 2 tile(s)"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn dumps_print_each_stage() {
    let dir = scratch("dump");
    let p = docs_example(&dir);
    let o = compile(
        &p,
        &["--dump", "ir", "--dump", "tiles", "--dump", "program"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for stage in [
        "== ir ==",
        "== tiles ==",
        "== program ==",
        "Repeat x",
        "Execute '",
        "MatMul(",
    ] {
        assert!(out.contains(stage), "missing '{stage}'");
    }
    // With JSON on stdout the dumps go to stderr.
    let o = compile(&p, &["--json", "--dump", "program"]);
    assert!(stderr(&o).contains("== program =="));
    json(&o);
}

#[test]
fn errors_exit_1_with_one_message() {
    let dir = scratch("errors");
    let p = docs_example(&dir);
    let o = ipusim(&["compile", "no/such/program.ron"]);
    fails(&o, "no/such/program.ron");
    let o = ipusim(&["compile", "tests/programs/broken/type_mismatch.ron"]);
    fails(&o, "type_mismatch.ron:");
    let bad = dir.join("bad_target.ron");
    std::fs::write(&bad, "(base: \"mk2\",\n tiles: 0)").unwrap();
    let o = compile(&p, &["--target", bad.to_str().unwrap()]);
    fails(&o, "'tiles'");
    let typo = dir.join("typo.ron");
    std::fs::write(&typo, "(base: \"mk2\",\n  tilez: 4)").unwrap();
    let o = compile(&p, &["--target", typo.to_str().unwrap()]);
    fails(&o, "typo.ron:2:");
    let o = compile(&p, &["--precision", "16.8"]);
    assert_eq!(o.status.code(), Some(1));
    let o = compile(&p, &["--partials", "double"]);
    assert_eq!(o.status.code(), Some(1));
    // An unwritable report path is an error that leaves nothing behind.
    let o = compile(&p, &["-o", dir.join("missing/dir/r.txt").to_str().unwrap()]);
    fails(&o, "r.txt: error: -o: the directory");
}

#[test]
fn small_targets_and_partials() {
    let dir = scratch("small");
    let p = docs_example(&dir);
    let t = dir.join("t4.ron");
    std::fs::write(&t, "(base: \"mk2\", tiles: 4)").unwrap();
    let o = compile(
        &p,
        &[
            "--target",
            t.to_str().unwrap(),
            "--json",
            "--partials",
            "half",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["target"]["tiles"], 4);
    assert_eq!(v["partials"], "half");
    assert!(v["used_tiles"].as_u64().unwrap() <= 4);
}

#[test]
fn each_convolution_takes_the_cheaper_of_the_amp_and_hmac_vertices_and_runs_at_its_estimate() {
    let tour = Path::new("tests/programs/sim/cnn_tour.ron");
    let r = json(&compile(tour, &["--json"]));
    let rows = r["convolutions"].as_array().unwrap();
    let vertex = |name: &str| {
        rows.iter()
            .find(|c| c["name"] == name)
            .map(|c| c["vertex"].as_str().unwrap().to_string())
            .unwrap_or_else(|| panic!("no row {name}"))
    };
    // The dense 3x3 layer keeps the AMP; the grouped layer's small blocks take the HMAC.
    assert_eq!(vertex("conv1/partials"), "ConvPartialnx1");
    assert_eq!(vertex("conv2"), "ConvPartialHorizontalMac");
    assert_eq!(vertex("bwd/conv2/input_grad"), "ConvPartialHorizontalMac");
    // The weight gradient stays the AMP's 1x1-output product.
    assert_eq!(
        vertex("bwd/conv2/weight_grad/partials"),
        "ConvPartial1x1Out"
    );
    // Executed cycles of a run equal the static estimate with the HMAC vertices in it.
    let o = ipusim(&[
        "run",
        "tests/programs/sim/cnn_tour.ron",
        "--json",
        "--steps",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let run: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let steps = run["report"]["steps"].as_u64().unwrap();
    let per_run = run["report"]["executed"]["total_cycles"].as_u64().unwrap();
    assert_eq!(
        per_run,
        steps / r["device_iterations"].as_u64().unwrap().max(1)
            * r["total_cycles"].as_u64().unwrap()
    );
}

/// Element-wise fusion: a chain of element-wise ops is one compute set of `Fused` vertices
/// (fewer compute sets, fewer cycles, the same stored values); `--no-elementwise-fusion`
/// gives every op its own compute set back.
#[test]
fn element_wise_chains_are_fused_into_one_vertex_per_tile_with_the_same_values() {
    let program = Path::new("tests/programs/sim/elementwise.ron");
    let fused = json(&compile(program, &["--json"]));
    let plain = json(&compile(program, &["--json", "--no-elementwise-fusion"]));
    let names = |r: &serde_json::Value| -> Vec<String> {
        r["compute_sets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (f, p) = (names(&fused), names(&plain));
    // `sum -> prod -> quot -> act -> scaled -> wide -> e` is one group (each value read
    // only by the next; `scaled` a ScaledAdd step with its scale); `pick` (a Select, which
    // is no step) and the comparison it reads stay on their own.
    for gone in ["sum", "prod", "quot", "act", "scaled", "wide"] {
        assert!(p.contains(&gone.to_string()), "{p:?}");
        assert!(!f.contains(&gone.to_string()), "{f:?}");
    }
    for kept in ["e", "bigger", "pick"] {
        assert!(f.contains(&kept.to_string()), "{f:?}");
    }
    assert!(f.len() < p.len());
    assert!(fused["total_cycles"].as_u64() < plain["total_cycles"].as_u64());
    // The dump names the fused codelet with its steps.
    let dump = stdout(&compile(program, &["--dump", "program"]));
    assert!(
        dump.contains("Fused<Binary<Add,f16>(in0,in1);Binary<Mul,f16>(t0,in2);"),
        "{dump}"
    );
    assert!(dump.contains("ScaledAdd<f16>(t3,in0,0.1)"), "{dump}");
    // Element-wise ops only: the outfeeds are bit for bit the unfused ones.
    let dir = scratch("fusion_values");
    let (a, _) = common::run_saving(program.to_str().unwrap(), &dir, "fused", &[]);
    let (b, _) = common::run_saving(
        program.to_str().unwrap(),
        &dir,
        "plain",
        &["--no-elementwise-fusion"],
    );
    assert_eq!(a["outfeeds"], b["outfeeds"]);
    assert!(
        a["outfeeds"].as_object().is_some_and(|o| !o.is_empty()),
        "{a}"
    );
}

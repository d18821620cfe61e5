//! ONNX through the built binary: torchvision-shaped ResNet-18 and ResNet-50 graphs (written
//! by `ipusim export` from the model zoo, with PyTorch's node names, `Gemm(transB)` and
//! `GlobalAveragePool` + `Flatten`) import, validate, compile to the zoo program's cycles
//! and memory, and train bit for bit like it; `import --check` lists coverage; bad files
//! are clear errors.

use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::{ipusim, scratch, stderr, stdout};

fn ok(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    stdout(o)
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_str(&ok(o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

/// The zoo program `name` (32x32 images, 10 classes, batch 2) and its ONNX export with a
/// symbolic batch.
fn zoo(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let ron = dir.join(format!("{name}.ron"));
    let onnx = dir.join(format!("{name}.onnx"));
    let (r, o) = (ron.to_str().unwrap(), onnx.to_str().unwrap());
    ok(&ipusim(&[
        "model",
        name,
        "--image-size",
        "32",
        "--classes",
        "10",
        "--batch",
        "2",
        "-o",
        r,
    ]));
    ok(&ipusim(&["export", r, "-o", o, "--symbolic-batch"]));
    (ron, onnx)
}

const TRAIN: &[&str] = &["--input-shape", "image=2x3x32x32", "--training"];

#[test]
fn resnet18_and_resnet50_imports_compile_to_the_zoo_programs_figures() {
    let dir = scratch("onnx-zoo");
    for name in ["resnet18", "resnet50"] {
        let (ron, onnx) = zoo(&dir, name);
        let check = ok(&ipusim(&["import", "--check", onnx.to_str().unwrap()]));
        assert!(check.contains("8 of 8 op types supported"), "{check}");
        assert!(
            check.contains("Gemm") && check.contains("GlobalAveragePool"),
            "{check}"
        );
        let a = json(&ipusim(&["compile", ron.to_str().unwrap(), "--json"]));
        let mut args = vec!["compile", onnx.to_str().unwrap(), "--json"];
        args.extend_from_slice(TRAIN);
        let b = json(&ipusim(&args));
        for key in [
            "total_cycles",
            "vertices",
            "exchange_bytes",
            "used_tiles",
            "convolution_flops",
        ] {
            assert_eq!(a[key], b[key], "{name}: {key}");
        }
        for key in ["total_bytes", "max_tile_bytes", "categories", "oom"] {
            assert_eq!(a["memory"][key], b["memory"][key], "{name}: memory.{key}");
        }
        // PyTorch's scope names come back as module paths, so a split names a block.
        let names: Vec<&str> = b["convolutions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        for module in ["layer2.0.conv1/Conv", "layer2.0.downsample.0/Conv"] {
            assert!(
                names.iter().any(|n| n.starts_with(module)),
                "{module}: {names:?}"
            );
        }
    }
}

#[test]
fn an_imported_resnet18_trains_like_the_zoo_program_bit_for_bit() {
    let dir = scratch("onnx-train");
    let (ron, onnx) = zoo(&dir, "resnet18");
    // FP32: the file's FP32 weights are the zoo's materialised ones exactly. (At 16.16 the
    // zoo rounds its initialisers from f64 to FP16 once, the file holds them in FP32: the
    // runs differ by that double rounding, as they would with a real exported model.)
    let run = |program: &Path, tag: &str, extra: &[&str]| {
        let vars = dir.join(format!("{tag}.json"));
        let mut args = vec![
            "run",
            program.to_str().unwrap(),
            "--steps",
            "2",
            "--json",
            "--precision",
            "32.32",
            "--save-variables",
            vars.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = json(&ipusim(&args));
        let saved: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(vars).unwrap()).unwrap();
        (out["outfeeds"].clone(), saved["variables"].clone())
    };
    let (a_out, a_vars) = run(&ron, "zoo", &[]);
    let (b_out, b_vars) = run(&onnx, "onnx", TRAIN);
    assert_eq!(a_out, b_out);
    assert_eq!(a_vars, b_vars);
    assert_eq!(a_out["loss"].as_array().unwrap().len(), 2);
}

#[test]
fn import_writes_a_program_that_reparses_and_check_reads_onnx() {
    let dir = scratch("onnx-ron");
    let (_, onnx) = zoo_small(&dir, false);
    let out = dir.join("imported.ron");
    ok(&ipusim(&[
        "import",
        onnx.to_str().unwrap(),
        "--training",
        "-o",
        out.to_str().unwrap(),
    ]));
    let text = std::fs::read_to_string(&out).unwrap();
    // Large weights go beside the program, small ones (biases, scales) stay inline.
    assert!(
        text.contains("init: File(path: \"imported.weights.bin\", offset: 0, encoding: F32)"),
        "{text}"
    );
    assert!(text.contains("init: Values(["), "{text}");
    let weights = dir.join("imported.weights.bin");
    assert!(std::fs::metadata(&weights).unwrap().len() > 0);
    let check = json(&ipusim(&["check", out.to_str().unwrap(), "--json"]));
    assert_eq!(check["valid"], true);
    let direct = json(&ipusim(&[
        "check",
        onnx.to_str().unwrap(),
        "--training",
        "--json",
    ]));
    assert_eq!(check["summary"], direct["summary"]);
    // `--frozen`: no trainable parameters left.
    let frozen = json(&ipusim(&[
        "check",
        onnx.to_str().unwrap(),
        "--frozen",
        "--json",
    ]));
    assert_eq!(frozen["valid"], true);
    assert_ne!(frozen["summary"], direct["summary"]);
    // `--inline-weights` keeps everything in the program, which checks the same.
    let inline = dir.join("inline.ron");
    ok(&ipusim(&[
        "import",
        onnx.to_str().unwrap(),
        "--training",
        "--inline-weights",
        "-o",
        inline.to_str().unwrap(),
    ]));
    assert!(!std::fs::read_to_string(&inline).unwrap().contains("File("));
    assert!(!dir.join("inline.weights.bin").exists());
    assert_eq!(
        json(&ipusim(&["check", inline.to_str().unwrap(), "--json"]))["summary"],
        direct["summary"]
    );
    // A weights file that is short or missing is an error at the variable's line.
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &bytes[..bytes.len() - 4]).unwrap();
    let o = ipusim(&["check", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("imported.ron:") && stderr(&o).contains("are needed from offset"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_file(&weights).unwrap();
    let o = ipusim(&["check", out.to_str().unwrap()]);
    assert!(
        stderr(&o).contains("cannot open weights file"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bad_models_are_named_errors() {
    let dir = scratch("onnx-bad");
    let (_, onnx) = zoo_small(&dir, true);
    let bytes = std::fs::read(&onnx).unwrap();
    let fails = |path: &Path, extra: &[&str], text: &str| {
        let mut args = vec!["compile", path.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = ipusim(&args);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains(text), "expected '{text}' in: {e}");
        assert!(!e.contains("panicked"), "{e}");
    };
    let truncated = dir.join("truncated.onnx");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    fails(&truncated, &[], "not an ONNX model");
    let random = dir.join("random.onnx");
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&random, noise).unwrap();
    fails(&random, &[], "random.onnx: error:");
    fails(
        &onnx,
        &[],
        "symbolic ('batch_size'); bind it with --input-shape image=",
    );
    fails(
        &onnx,
        &["--input-shape", "picture=2x3x8x8"],
        "'picture', which is not an input",
    );
    fails(&dir.join("missing.onnx"), &[], "cannot read the model");
    let bound = ["--input-shape", "image=2x3x8x8", "--training"];
    fails(
        &onnx,
        &[&bound[..], &["--loss-scaling", "0"]].concat(),
        "loss_scaling",
    );
    fails(
        &onnx,
        &[&bound[..], &["--loss-output", "probs"]].concat(),
        "--loss-output 'probs' is not an output",
    );
    fails(
        &onnx,
        &[&bound[..], &["--trainable", "nothing"]].concat(),
        "--trainable names 'nothing'",
    );
    // The same options train a step.
    let out = json(&ipusim(
        &[
            &["run", onnx.to_str().unwrap(), "--json"],
            &bound[..],
            &["--loss-scaling", "64"],
        ]
        .concat(),
    ));
    assert!(out["outfeeds"]["loss"][0].as_f64().unwrap().is_finite());
}

/// A small ONNX ResNet-8 (8x8 images, batch 2), its batch symbolic when `symbolic`.
fn zoo_small(dir: &Path, symbolic: bool) -> (PathBuf, PathBuf) {
    let ron = dir.join("r8.ron");
    let onnx = dir.join("r8.onnx");
    let (r, o) = (ron.to_str().unwrap(), onnx.to_str().unwrap());
    ok(&ipusim(&[
        "model",
        "resnet8",
        "--batch",
        "2",
        "--image-size",
        "8",
        "-o",
        r,
    ]));
    let mut export = vec!["export", r, "-o", o];
    if symbolic {
        export.push("--symbolic-batch");
    }
    ok(&ipusim(&export));
    (ron, onnx)
}

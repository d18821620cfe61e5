//! `ipusim model`: the model zoo through the built binary — the list with torchvision's
//! parameter counts, a generated ResNet that checks, compiles and trains one step on
//! synthetic data, and bad flags named in the error (exit 1, never a panic).

use std::process::Output;

mod common;
use common::{ipusim, scratch, stderr, stdout, tiny_resnet};

fn ok(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(o), stderr(o));
    stdout(o)
}

#[test]
fn list_shows_every_model_with_its_parameters() {
    let text = ok(&ipusim(&["model", "list"]));
    for (name, count) in [
        ("resnet20", "272,474"),
        ("resnet18", "11,689,512"),
        ("resnet50", "25,557,032"),
        ("resnet152", "60,192,808"),
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing from\n{text}"));
        assert!(line.ends_with(count), "{line}");
    }
}

#[test]
fn a_generated_resnet18_checks_compiles_and_trains_a_step_on_synthetic_data() {
    let dir = scratch("model");
    let f = dir.join("resnet18.ron");
    let p = f.to_str().unwrap();
    ok(&ipusim(&[
        "model",
        "resnet18",
        "--image-size",
        "32",
        "-o",
        p,
    ]));
    let check = ok(&ipusim(&["check", p]));
    assert!(check.contains("ok: 'resnet18' is valid"), "{check}");
    let run = ok(&ipusim(&["run", p, "--synthetic-data", "--json"]));
    let doc: serde_json::Value = serde_json::from_str(&run).unwrap();
    let loss = doc["outfeeds"]["loss"][0].as_f64().unwrap();
    // An untrained 1000-class classifier: close to ln(1000) = 6.91.
    assert!((loss - 1000f64.ln()).abs() < 1.0, "loss {loss}");
    let convs = doc["report"]["convolutions"].as_array().unwrap();
    // 20 convolutions (stem, 16 in blocks, 3 downsamples) x 3 passes (the stem has no
    // input gradient) and the max pool and its gradient.
    assert_eq!(convs.len(), 20 * 3 - 1 + 2, "{convs:?}");
}

#[test]
fn bad_flags_are_named() {
    for (args, needle) in [
        (&["model", "resnet51"][..], "did you mean 'resnet50'"),
        (
            &["model", "resnet18", "--image-size", "8"],
            "8x8 is smaller than the 32x32",
        ),
        (&["model", "resnet20", "--batch", "0"], "batch (0)"),
        (
            &["model", "resnet50", "--norm", "group", "--groups", "3"],
            "3 groups",
        ),
        (&["model", "resnet50", "--norm", "layer"], "--norm"),
    ] {
        let o = ipusim(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
        assert!(stdout(&o).is_empty(), "{args:?}: nothing on stdout");
    }
}

#[test]
fn the_hands_on_optimizer_is_adamw_with_its_dtypes() {
    let path = tiny_resnet(&scratch("model-adamw"), &["--optimizer", "adamw"]);
    let p = path.to_str().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("optimizer: AdamW(learning_rate: 0.001"),
        "{text}"
    );
    assert!(
        text.contains("first_order_momentum_accum_type: Some(F16)"),
        "{text}"
    );
    assert!(
        text.contains("second_order_momentum_accum_type: Some(F32)"),
        "{text}"
    );
    assert!(text.contains("loss_scaling: 1000.0"), "{text}");
    // It trains a step.
    ok(&ipusim(&["run", p]));
    let o = ipusim(&["model", "resnet8", "--optimizer", "lamb"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("'lamb'"), "{}", stderr(&o));
}

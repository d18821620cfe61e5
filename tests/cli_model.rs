//! `ipusim model`: the model zoo through the built binary — the list with torchvision's
//! parameter counts, a generated ResNet that checks, compiles and trains one step on
//! synthetic data, the shipped ResNet-50 and the CNN README's two-IPU configurations of it,
//! and bad flags named in the error (exit 1, never a panic).

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

/// `programs/resnet50.ron` is the zoo's ResNet-50 (224×224, batch 1, 16.16, synthetic data)
/// exactly as `ipusim model` writes it, and compiles to the cycle report the README quotes:
/// 53 convolutions, each with its weight gradient and all but the stem with its input
/// gradient; it fits one mk2.
#[test]
fn the_shipped_resnet50_is_the_zoos_and_compiles_to_its_cycle_report() {
    let dir = scratch("model-resnet50");
    let f = dir.join("resnet50.ron");
    let p = f.to_str().unwrap();
    let args = [
        "--batch",
        "1",
        "--image-size",
        "224",
        "--precision",
        "16.16",
    ];
    ok(&ipusim(
        &[&["model", "resnet50"][..], &args, &["-o", p]].concat(),
    ));
    assert!(
        std::fs::read(&f).unwrap() == std::fs::read("programs/resnet50.ron").unwrap(),
        "programs/resnet50.ron differs from `ipusim model resnet50`: regenerate it"
    );
    let o = ipusim(&["compile", "programs/resnet50.ron", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(r["total_cycles"], 2_573_361);
    assert_eq!(r["memory"]["oom"], false);
    let rows = r["convolutions"].as_array().unwrap();
    // The 3-channel stem takes the SLIC vertex in 16.16 on Mk2; the wide layers the AMP's.
    let vertex = |name: &str| {
        rows.iter()
            .find(|c| c["name"] == name)
            .map(|c| c["vertex"].as_str().unwrap().to_string())
    };
    assert_eq!(vertex("conv1").as_deref(), Some("ConvPartial1xNSLIC"));
    assert_eq!(
        vertex("layer4.2.conv3/partials").as_deref(),
        Some("ConvPartialnx1")
    );
    let passes = |name: &str| rows.iter().filter(|c| c["pass"] == name).count();
    assert_eq!(
        (passes("Forward"), passes("WeightGrad"), passes("InputGrad")),
        (53, 53, 52)
    );
}

/// The same ResNet-50 at a batch that cannot fit one mk2 is reported out of memory: exit 2,
/// the report still printed, naming the fullest tiles and the tensors on them. (Batch 2
/// fits, at 54.3% of the fullest tile, batch 4 at 68.1%, batch 6 at 83.1% and batch 8 at
/// 96.8%; batch 9 needs 102.8% on one tile, 221 over.)
#[test]
fn the_shipped_resnet50_at_batch_9_is_out_of_memory_with_its_fullest_tiles_named() {
    let o = ipusim(&["compile", "programs/resnet50.ron", "--batch", "9", "--json"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("out of memory"), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let m = &r["memory"];
    assert_eq!(m["oom"], true);
    let capacity = m["bytes_per_tile_capacity"].as_u64().unwrap();
    let worst = m["worst_tiles"].as_array().unwrap();
    assert!(!worst.is_empty());
    for t in worst {
        assert!(t["bytes"].as_u64().unwrap() > capacity, "{t}");
        let largest = t["largest"].as_array().unwrap();
        assert!(!largest.is_empty(), "{t}");
        assert!(largest
            .iter()
            .all(|x| !x["name"].as_str().unwrap().is_empty()));
    }
}

/// The CNN README's single-IPU configuration (seed 003: "The model will fit on a single IPU
/// with a batch size of 1", `--model-size 50 --batch-size 1 --available-memory-proportion
/// 0.1`, on the Mk1 IPUs it was written for, with its ImageNet defaults: group norm and
/// plain SGD) fits one mk1, each weight updated as soon as its gradient is ready (the
/// schedule a memory-minimising scheduler gives a step without momentum or accumulation).
#[test]
fn the_cnn_readmes_resnet50_at_batch_1_fits_one_mk1_at_proportion_0_1() {
    let dir = scratch("model_mk1");
    let f = dir.join("resnet50_gn.ron");
    let p = f.to_str().unwrap();
    ok(&ipusim(&[
        "model",
        "resnet50",
        "--batch",
        "1",
        "--norm",
        "group",
        "--optimizer",
        "sgd",
        "-o",
        p,
    ]));
    let o = ipusim(&[
        "compile",
        p,
        "--json",
        "--target",
        "mk1",
        "--available-memory-proportion",
        "0.1",
        "--early-weight-update",
    ]);
    let r: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    let m = &r["memory"];
    assert_eq!(m["oom"], false);
    assert_eq!(m["bytes_per_tile_capacity"], 262_144);
    assert!(
        m["max_tile_bytes"].as_u64().unwrap() <= 262_144,
        "{}",
        m["max_tile_bytes"]
    );
}

/// The CNN README's multi-IPU ResNet-50 configurations (seed 003) fit, in our names:
/// `--batch-size 2 --xla-recompute --shards 2 --pipeline-depth 256 --pipeline-splits b3/1/relu
/// --available-memory-proportion 0.1` (the split after block 1 of stage 3 is where
/// `layer3.2` begins), and four replicas of `--pipeline-depth 128 --pipeline-splits b3/0/relu
/// --pipeline-schedule Grouped --available-memory-proportion 0.4 --xla-recompute` on 8 IPUs.
/// Both pipelined with the Grouped schedule: no tile of either IPU is out of memory.
#[test]
fn the_cnn_readmes_two_ipu_resnet50_configurations_fit() {
    for (split, proportion, depth, replicas) in
        [("layer3.2", "0.1", 256, 1), ("layer3.1", "0.4", 128, 4)]
    {
        let (depth_s, replicas_s) = (depth.to_string(), replicas.to_string());
        let o = ipusim(&[
            "compile",
            "programs/resnet50.ron",
            "--json",
            "--batch",
            "2",
            "--ipus",
            "2",
            "--recompute",
            "--pipeline-schedule",
            "Grouped",
            "--pipeline-splits",
            split,
            "--available-memory-proportion",
            proportion,
            "--gradient-accumulation",
            &depth_s,
            "--replicas",
            &replicas_s,
        ]);
        let r: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
        assert_eq!(r["memory"]["oom"], false, "{split}");
        let ipus = r["ipus"].as_array().unwrap();
        assert_eq!(ipus.len(), 2, "{split}");
        for ipu in ipus {
            assert_eq!(ipu["oom_tiles"], 0, "{split}: {ipu}");
            assert!(ipu["used_tiles"].as_u64().unwrap() > 1000, "{split}: {ipu}");
        }
        assert_eq!(r["batch"]["global_batch"], 2 * depth * replicas, "{split}");
        assert_eq!(r["pipeline"]["micro_batches"], depth, "{split}");
    }
}

/// `--early-weight-update` on the shipped ResNet-50 (one micro-batch per update): the same
/// compute sets with the same cycles, each weight's update moved up to its gradient, so the
/// step no longer holds every gradient at its peak — the peak of live temporaries and the
/// fullest tile fall. With gradient accumulation the updates wait for the last micro-batch
/// either way, and the flag changes nothing.
#[test]
fn early_weight_updates_lower_resnet50s_peak_and_keep_its_compute_sets() {
    let compile = |extra: &[&str]| -> serde_json::Value {
        let o = ipusim(&[&["compile", "programs/resnet50.ron", "--json"][..], extra].concat());
        assert!(matches!(o.status.code(), Some(0 | 2)), "{}", stderr(&o));
        let mut r: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        r.as_object_mut().unwrap().remove("seconds");
        r
    };
    let (late, early) = (compile(&[]), compile(&["--early-weight-update"]));
    let sets = |r: &serde_json::Value| {
        let mut v: Vec<String> = r["compute_sets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(sets(&late), sets(&early));
    let peak = |r: &serde_json::Value| {
        let l = r["memory"]["liveness"].as_array().unwrap();
        l.iter().map(|b| b.as_u64().unwrap()).max().unwrap()
    };
    let fullest = |r: &serde_json::Value| r["memory"]["max_tile_bytes"].as_u64().unwrap();
    // Measured 2026-11-28: 112,194,640 → 76,539,520 bytes live at the peak, the fullest tile
    // 372,174 → 354,702 bytes.
    assert!(
        peak(&early) * 10 < peak(&late) * 8,
        "{} {}",
        peak(&early),
        peak(&late)
    );
    assert!(fullest(&early) < fullest(&late));
    let accumulated = ["--gradient-accumulation", "2"];
    assert_eq!(
        compile(&accumulated),
        compile(&[&accumulated[..], &["--early-weight-update"]].concat())
    );
}

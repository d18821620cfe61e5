//! The importer against independent computations and bad files.
//!
//! Models are built in code with `ipusim_onnx::write` (no Python, no network). The first
//! exercises convolution with bias, ReLU, average pooling without padded positions, the
//! exporters' shape subgraph (`Shape` → `Gather` → `Unsqueeze` → `Concat` → `Reshape`),
//! `Gemm` with `alpha`, `beta` and `transB`, softmax, `Tanh`, `Sigmoid`, `Mul`, `Clip` and
//! `ReduceMean`; the reference interpreter's outputs on the imported program are checked
//! against a direct `f64` computation of the same model written here.

use ipusim_ir::program::{DataSource, InfeedSpec};
use ipusim_ir::text::{parse_program, to_ron};
use ipusim_onnx::proto::{data_type as dt, GraphProto, ModelProto, StringStringEntryProto};
use ipusim_onnx::write::{attr_float, attr_int, attr_ints, initializer, model, node, value_info};
use ipusim_onnx::{import, Options};
use ipusim_runtime::reference::ReferenceSession;
use ipusim_runtime::SessionOptions;
use std::path::{Path, PathBuf};

fn weights(n: usize, k: usize) -> Vec<f64> {
    (0..n).map(|i| ((i * k % 17) as f64 - 8.0) / 16.0).collect()
}

/// The test model and its weights.
fn cnn() -> (ModelProto, Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let (w, b, w2, b2) = (
        weights(4 * 3 * 9, 5),
        weights(4, 3),
        weights(5 * 36, 7),
        weights(5, 11),
    );
    let g = GraphProto {
        name: "cnn".into(),
        node: vec![
            node(
                "Conv",
                "/conv/Conv",
                &["x", "w", "b"],
                &["c"],
                vec![
                    attr_ints("pads", &[1, 1, 1, 1]),
                    attr_ints("strides", &[2, 2]),
                ],
            ),
            node("Relu", "", &["c"], &["r"], vec![]),
            node(
                "AveragePool",
                "",
                &["r"],
                &["a"],
                vec![
                    attr_ints("kernel_shape", &[2, 2]),
                    attr_ints("strides", &[1, 1]),
                    attr_ints("pads", &[0, 0, 1, 1]),
                ],
            ),
            node("Shape", "", &["x"], &["s"], vec![]),
            node(
                "Gather",
                "",
                &["s", "zero"],
                &["n"],
                vec![attr_int("axis", 0)],
            ),
            node("Unsqueeze", "", &["n", "axes0"], &["n1"], vec![]),
            node(
                "Concat",
                "",
                &["n1", "minus1"],
                &["spec"],
                vec![attr_int("axis", 0)],
            ),
            node("Reshape", "", &["a", "spec"], &["f"], vec![]),
            node(
                "Gemm",
                "/fc/Gemm",
                &["f", "w2", "b2"],
                &["g"],
                vec![
                    attr_float("alpha", 0.5),
                    attr_float("beta", 2.0),
                    attr_int("transB", 1),
                ],
            ),
            node(
                "Softmax",
                "",
                &["g"],
                &["probs"],
                vec![attr_int("axis", -1)],
            ),
            node("Tanh", "", &["g"], &["t"], vec![]),
            node("Sigmoid", "", &["g"], &["sg"], vec![]),
            node("Mul", "", &["t", "sg"], &["m"], vec![]),
            node("Clip", "", &["m", "lo", "hi"], &["cl"], vec![]),
            node(
                "ReduceMean",
                "",
                &["cl"],
                &["mean"],
                vec![attr_ints("axes", &[1]), attr_int("keepdims", 0)],
            ),
        ],
        initializer: vec![
            initializer("w", dt::FLOAT, &[4, 3, 3, 3], &w),
            initializer("b", dt::FLOAT, &[4], &b),
            initializer("w2", dt::FLOAT, &[5, 36], &w2),
            initializer("b2", dt::FLOAT, &[5], &b2),
            initializer("zero", dt::INT64, &[], &[0.0]),
            initializer("axes0", dt::INT64, &[1], &[0.0]),
            initializer("minus1", dt::INT64, &[1], &[-1.0]),
            initializer("lo", dt::FLOAT, &[], &[-0.1]),
            initializer("hi", dt::FLOAT, &[], &[0.1]),
        ],
        input: vec![value_info(
            "x",
            dt::FLOAT,
            &[None, Some(3), Some(6), Some(6)],
        )],
        output: vec![
            value_info("probs", dt::FLOAT, &[None, Some(5)]),
            value_info("mean", dt::FLOAT, &[None]),
        ],
        ..Default::default()
    };
    (model(g, 13), w, b, w2, b2)
}

fn options() -> Options {
    Options {
        input_shapes: vec![("x".into(), vec![2, 3, 6, 6])],
        ..Options::default()
    }
}

/// The same model computed directly in `f64` from the input `x` [2, 3, 6, 6].
fn direct(x: &[f64], w: &[f64], b: &[f64], w2: &[f64], b2: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let f32r = |v: f64| v as f32 as f64;
    let mut probs = Vec::new();
    let mut means = Vec::new();
    for n in 0..2 {
        // Conv 3x3, stride 2, pad 1: 6x6 -> 3x3; bias; ReLU.
        let mut r = vec![0.0; 4 * 9];
        for o in 0..4 {
            for oy in 0..3 {
                for ox in 0..3 {
                    let mut s = b[o];
                    for c in 0..3 {
                        for ky in 0..3 {
                            for kx in 0..3 {
                                let (y, xx) = ((oy * 2 + ky) as i64 - 1, (ox * 2 + kx) as i64 - 1);
                                if (0..6).contains(&y) && (0..6).contains(&xx) {
                                    s += x[((n * 3 + c) * 6 + y as usize) * 6 + xx as usize]
                                        * w[((o * 3 + c) * 3 + ky) * 3 + kx];
                                }
                            }
                        }
                    }
                    r[(o * 3 + oy) * 3 + ox] = s.max(0.0);
                }
            }
        }
        // AveragePool 2x2, stride 1, pads bottom/right 1, padded positions not counted.
        let mut a = vec![0.0; 36];
        for o in 0..4 {
            for y in 0..3 {
                for xx in 0..3 {
                    let (mut s, mut k) = (0.0, 0.0);
                    for dy in 0..2 {
                        for dx in 0..2 {
                            if y + dy < 3 && xx + dx < 3 {
                                s += r[(o * 3 + y + dy) * 3 + xx + dx];
                                k += 1.0;
                            }
                        }
                    }
                    a[(o * 3 + y) * 3 + xx] = s / k;
                }
            }
        }
        // Gemm: 0.5 · a · w2ᵀ + 2 · b2.
        let g: Vec<f64> = (0..5)
            .map(|j| 0.5 * (0..36).map(|i| a[i] * w2[j * 36 + i]).sum::<f64>() + 2.0 * b2[j])
            .collect();
        let top = g.iter().cloned().fold(f64::MIN, f64::max);
        let z: f64 = g.iter().map(|v| (v - top).exp()).sum();
        probs.extend(g.iter().map(|v| (v - top).exp() / z));
        let m: f64 = g
            .iter()
            .map(|&v| (v.tanh() / (1.0 + (-v).exp())).clamp(f32r(-0.1), f32r(0.1)))
            .sum::<f64>()
            / 5.0;
        means.push(m);
    }
    (probs, means)
}

#[test]
fn the_interpreter_on_an_imported_model_matches_a_direct_computation() {
    let (m, w, b, w2, b2) = cnn();
    let mut program = import(&m, "cnn.onnx", Path::new("."), "cnn", &options()).unwrap();
    // Known inputs: x = -1, -0.99, ... (the Sequence source), as the direct side computes.
    program.infeeds = vec![InfeedSpec {
        stream: "x".into(),
        source: DataSource::Sequence {
            start: -1.0,
            step: 0.01,
        },
    }];
    let x: Vec<f64> = (0..216)
        .map(|i| (-1.0 + 0.01 * i as f64) as f32 as f64)
        .collect();
    let f32s = |v: &[f64]| v.iter().map(|&v| v as f32 as f64).collect::<Vec<_>>();
    let (probs, means) = direct(&x, &f32s(&w), &f32s(&b), &f32s(&w2), &f32s(&b2));
    let mut session =
        ReferenceSession::new(&program, Path::new("."), &SessionOptions::default()).unwrap();
    let out = session.run().unwrap();
    let got_probs = &out["probs"].rows()[0];
    let got_means = &out["mean"].rows()[0];
    let close = |a: &[f64], b: &[f64]| {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            // FP32 arithmetic against f64: a few ulps of accumulated rounding.
            assert!(
                (x - y).abs() <= 1e-5 * y.abs().max(1e-2),
                "element {i}: {x} vs {y}"
            );
        }
    };
    close(got_probs, &probs);
    close(got_means, &means);
    // The shape subgraph folded away: no Shape, Gather or Concat ops remain.
    assert!(program
        .graph
        .nodes()
        .all(|(_, n)| !matches!(n.op, ipusim_ir::Op::Concat { .. })));
}

#[test]
fn an_imported_program_round_trips_through_ron() {
    let (m, ..) = cnn();
    let program = import(&m, "cnn.onnx", Path::new("."), "cnn", &options()).unwrap();
    let back = parse_program(&to_ron(&program), "cnn.ron").unwrap();
    assert_eq!(back, program);
    // With the weights in a file beside the program.
    let dir = scratch("ron");
    let (text, bytes) = ipusim_ir::text::to_ron_with_weights(&program, "cnn.weights.bin");
    assert!(text.contains("File(path: \"cnn.weights.bin\""), "{text}");
    std::fs::write(dir.join("cnn.ron"), text).unwrap();
    std::fs::write(dir.join("cnn.weights.bin"), bytes).unwrap();
    let back = ipusim_ir::text::load_program(&dir.join("cnn.ron")).unwrap();
    assert_eq!(back, program);
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ipusim-onnx-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn err(m: &ModelProto, dir: &Path) -> String {
    import(m, "bad.onnx", dir, "bad", &options())
        .unwrap_err()
        .to_string()
}

fn graph_mut(m: &mut ModelProto) -> &mut GraphProto {
    m.graph.as_mut().unwrap()
}

#[test]
fn bad_graphs_are_errors_that_name_the_node_or_value() {
    let dir = Path::new(".");
    let (base, ..) = cnn();
    // A cycle: the ReLU reads the pooling's output, which comes after it.
    let mut m = base.clone();
    graph_mut(&mut m).node[1].input[0] = "a".into();
    let e = err(&m, dir);
    assert!(e.contains("node 'r' (Relu)") && e.contains("cycle"), "{e}");
    // An input nothing produces.
    let mut m = base.clone();
    graph_mut(&mut m).node[1].input[0] = "ghost".into();
    let e = err(&m, dir);
    assert!(e.contains("'ghost' is never produced"), "{e}");
    // An initializer whose data disagrees with its shape.
    let mut m = base.clone();
    graph_mut(&mut m).initializer[1].dims = vec![5];
    let e = err(&m, dir);
    assert!(
        e.contains("initializer 'b'") && e.contains("raw_data holds 16 bytes"),
        "{e}"
    );
    // An unknown opset, and a domain nobody imports.
    let mut m = base.clone();
    m.opset_import[0].version = 99;
    assert!(err(&m, dir).contains("opset 99 of the standard domain is not supported"));
    // An unsupported op names the node, its type, the opset and the list.
    let mut m = base.clone();
    graph_mut(&mut m).node[1].op_type = "Elu".into();
    let e = err(&m, dir);
    assert!(
        e.contains(
            "node 'r' (Elu): op type 'Elu' (opset 13) is not supported; supported: Abs, Add"
        ),
        "{e}"
    );
    let c = ipusim_onnx::coverage(&m);
    assert!(c
        .iter()
        .any(|c| c.op_type == "Elu" && !c.supported && c.count == 1));
    // An attribute the converter would misread.
    let mut m = base.clone();
    graph_mut(&mut m).node[2]
        .attribute
        .push(attr_int("ceil_mode", 1));
    graph_mut(&mut m).node[2]
        .attribute
        .push(attr_ints("dilations", &[2, 2]));
    assert!(err(&m, dir).contains("dilated pooling"));
}

#[test]
fn external_data_is_read_and_a_missing_or_short_file_is_an_error() {
    let dir = scratch("external");
    let (mut m, ..) = cnn();
    let inline = import(&m, "cnn.onnx", &dir, "cnn", &options()).unwrap();
    // Move w2 (720 bytes) into weights.bin at offset 64.
    let t = &mut graph_mut(&mut m).initializer[2];
    let mut file = vec![0u8; 64];
    file.extend_from_slice(&t.raw_data);
    std::fs::write(dir.join("weights.bin"), &file).unwrap();
    t.raw_data.clear();
    t.data_location = ipusim_onnx::proto::DATA_LOCATION_EXTERNAL;
    let kv = |k: &str, v: &str| StringStringEntryProto {
        key: k.into(),
        value: v.into(),
    };
    t.external_data = vec![
        kv("location", "weights.bin"),
        kv("offset", "64"),
        kv("length", "720"),
    ];
    let external = import(&m, "cnn.onnx", &dir, "cnn", &options()).unwrap();
    assert_eq!(external, inline);
    std::fs::write(dir.join("weights.bin"), &file[..500]).unwrap();
    let e = err(&m, &dir);
    assert!(
        e.contains("initializer 'w2'") && e.contains("holds 500 bytes"),
        "{e}"
    );
    std::fs::remove_file(dir.join("weights.bin")).unwrap();
    assert!(err(&m, &dir).contains("cannot open external data file"));
    graph_mut(&mut m).initializer[2].external_data[0].value = "../escape.bin".into();
    assert!(err(&m, &dir).contains("inside the model's directory"));
}

#[test]
fn random_and_truncated_bytes_never_panic() {
    use prost::Message;
    let (m, ..) = cnn();
    let bytes = ipusim_onnx::write::to_bytes(&m);
    let dir = scratch("fuzz");
    // Every prefix length in steps, and byte flips: an error or a valid import, never a panic.
    for cut in (0..bytes.len()).step_by(97) {
        if let Ok(m) = ModelProto::decode(&bytes[..cut]) {
            let _ = import(&m, "cut.onnx", &dir, "cut", &options());
        }
    }
    for i in (0..bytes.len()).step_by(31) {
        let mut b = bytes.clone();
        b[i] ^= 0x5a;
        if let Ok(m) = ModelProto::decode(b.as_slice()) {
            let _ = import(&m, "flip.onnx", &dir, "flip", &options());
        }
    }
}

//! The CNN benchmark's native f32 step (`bench/native_step.rs`) computes the step it is
//! held against: on a small ResNet's 32.32 step graph, its loss and every variable after
//! one step (weights, momentum, batch-norm running statistics) equal the reference
//! interpreter's on the same inputs, within what f32 arithmetic in another order allows.

// Shared with bench/cnn.rs, which uses parts this test does not.
#[allow(dead_code)]
#[path = "../bench/native_step.rs"]
mod native_step;

use ipusim::compiler::build::step_graph;
use ipusim::compiler::BuildOptions;
use ipusim::ir::resnet::{resnet, Model};
use ipusim::ir::Precision;
use ipusim::sim::interp::{Interpreter, Streams};
use ipusim::sim::numerics::FpConfig;
use ipusim::sim::tensor::Tensor;
use native_step::NativeStep;

/// The zoo's `name` at batch 4 on 3×`size`×`size` images: one step natively and on the
/// interpreter, compared.
fn check(name: &str, size: usize) {
    let model = Model::named(name).unwrap();
    let mut spec = model.default_spec();
    spec.batch = 4;
    spec.image_size = size;
    spec.classes = 10;
    let program = resnet(&spec).unwrap();
    let options = BuildOptions {
        precision: Some(Precision::P32_32),
        ..BuildOptions::default()
    };
    let graph = step_graph(&program, &options).unwrap().graph;

    let mut native = NativeStep::new(&graph).unwrap();
    let image: Vec<f32> = (0..4 * 3 * size * size)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
        .collect();
    let labels: Vec<i32> = vec![3, 7, 0, 9];
    native.set_infeed("image", &image);
    native.set_infeed(
        "labels",
        &labels.iter().map(|&l| l as f32).collect::<Vec<_>>(),
    );
    let mut interp = Interpreter::new(&graph, FpConfig::default(), 1).unwrap();
    // Both start from the same initial values (the simulator's `init`).
    let initial: std::collections::HashMap<String, Vec<f64>> = interp
        .variables()
        .into_iter()
        .map(|(name, t)| (name.to_string(), t.to_f64_vec()))
        .collect();
    for (name, v) in &initial {
        let native: Vec<f64> = native
            .variable(name)
            .unwrap()
            .iter()
            .map(|&x| x.into())
            .collect();
        assert_eq!(&native, v, "{name}'s initial value");
    }
    native.step();

    let mut feeds = Streams::new();
    feeds.insert(
        "image".into(),
        Tensor::f32([4, 3, size, size], image.clone()).unwrap(),
    );
    feeds.insert("labels".into(), Tensor::i32([4], labels).unwrap());
    let out = interp.step(&[feeds]).unwrap();

    let loss = out[0]["loss"].to_f64_vec()[0];
    let native_loss = f64::from(native.outfeed("loss").unwrap()[0]);
    assert!(
        (loss - native_loss).abs() <= 1e-5 * loss.abs(),
        "loss {native_loss} against {loss}"
    );
    // Every variable's change (the update, the running statistics' step), against the
    // interpreter's: within 2e-3 of the largest change of the variable, which the order
    // of f32 sums over a few thousand terms stays well inside (about 2e-4 seen) and an
    // update off by a percent does not.
    let variables = interp.variables();
    assert!(variables.len() > 20);
    for (name, t) in variables {
        let want = t.to_f64_vec();
        let got = native.variable(name).unwrap();
        let start = &initial[name];
        assert_eq!(got.len(), want.len(), "{name}");
        let delta = |v: f64, i: usize| v - start[i];
        let scale = (0..want.len()).fold(0.0f64, |m, i| m.max(delta(want[i], i).abs()));
        assert!(scale > 0.0, "{name} did not change");
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (delta(f64::from(g), i) - delta(w, i)).abs() <= 2e-3 * scale,
                "{name}[{i}]: native {g}, interpreter {w}, from {} (largest change {scale})",
                start[i]
            );
        }
    }
}

#[test]
fn native_step_equals_the_interpreter_on_a_cifar_resnet() {
    check("resnet8", 8);
}

/// The ImageNet-style stem (7×7 stride-2 convolution, 3×3 stride-2 max pool) and basic
/// blocks with strided 1×1 downsampling.
#[test]
fn native_step_equals_the_interpreter_on_an_imagenet_resnet() {
    check("resnet18", 32);
}

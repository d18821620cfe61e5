//! The sum of a split reduction's partials across tiles (PopLibs' `poplin::ReduceAdd`)
//! accumulates in f32 even when the partials are half, as ReduceAdd.cpp's `float sum`
//! does, and converts once to the output.

use half::f16;
use ipusim_compiler::{compile, CompileOptions, CompileReport, PartialsType, Target};
use ipusim_ir::{DType, GraphBuilder, Init, Op, Shape};
use ipusim_sim::host::QueueHost;
use ipusim_sim::tensor::Tensor;
use ipusim_sim::Engine;

#[test]
fn half_partials_are_summed_across_tiles_in_f32() {
    // y = Σ_c x[c] · w[c] over 2048 channels of a 1x1 field: all of the work is the
    // reduction, which the planner splits over the tiles.
    let c = 2048usize;
    let mut b = GraphBuilder::new();
    let x = b
        .variable("x", DType::F16, [1, c, 1, 1], Init::Zeros)
        .unwrap();
    let w = b
        .variable("w", DType::F16, [1, c, 1, 1], Init::Zeros)
        .unwrap();
    let op = Op::Conv2d {
        stride: vec![],
        padding: vec![],
        dilation: vec![],
        groups: 1,
    };
    let y = b.named("y", op, &[x, w]).unwrap();
    b.outfeed("y", y).unwrap();
    let g = b.finish();
    let mut target = Target::mk2();
    target.tiles = 8;
    let options = CompileOptions {
        partials_type: PartialsType::Half,
        ..CompileOptions::default()
    };
    let exe = compile(&g, &target, &options).unwrap();
    let report = CompileReport::new("split", None, &exe);
    let red = report.convolutions[0].reduction_split;
    // Three partial blocks or more (channel 0, the middle one and the last in different
    // blocks), fewer than 16 (one stage: no intermediate partial rounded to half).
    assert!((3..16).contains(&red), "reduction split {red}");
    // Partials 2048 (channel 0), 1 (channel c/2) and 1 (channel c − 1), the rest 0: in f32
    // the sum is 2050, a half; summed in half, 2048 + 1 ties to 2048 twice.
    let mut wv = vec![0.0f32; c];
    wv[0] = 2048.0;
    wv[c / 2] = 1.0;
    wv[c - 1] = 1.0;
    let mut engine = Engine::new(std::sync::Arc::new(exe), Default::default()).unwrap();
    for (name, v) in [("x", vec![1.0f32; c]), ("w", wv)] {
        let halves = v.iter().map(|&f| f16::from_f32(f)).collect();
        let t = Tensor::f16(Shape::new(vec![1, c, 1, 1]), halves).unwrap();
        engine.write_variable(name, &t).unwrap();
    }
    let mut host = QueueHost::new();
    engine.run(&mut host).unwrap();
    let got = &host.outfeeds["y"][0];
    assert_eq!(f16::from_le_bytes([got[0], got[1]]).to_f32(), 2050.0);
}

//! PopLibs' convolution transforms as the planner applies them: the input gradient of a
//! strided convolution whose kernel is one element wide and unpadded in a dimension runs on
//! the undilated field and is dilated into the gradient afterwards (`dilatePostConv`,
//! `lib/poplin/ConvPlan.cpp` `getDilatePostConvDims`), so its partials cover only the
//! positions the stride reaches.

use ipusim_compiler::codelets::VertexParams;
use ipusim_compiler::{compile, CompileOptions, CompileReport, Executable, Target};
use ipusim_ir::{DType, GraphBuilder, Init, Op};
use std::collections::BTreeSet;

/// `dx = Conv2dInputGrad(dy, w)` of a `k`x`k` convolution of `x[8, 64, f, f]` into 128
/// channels at `stride`, unpadded, FP16.
fn input_grad(k: usize, stride: usize, f: usize) -> Executable {
    let out = (f - k) / stride + 1;
    let mut b = GraphBuilder::new();
    let dy = b
        .variable("dy", DType::F16, [8, 128, out, out], Init::Zeros)
        .unwrap();
    let w = b
        .variable("w", DType::F16, [128, 64, k, k], Init::Zeros)
        .unwrap();
    let grad = Op::Conv2dInputGrad {
        stride: vec![stride, stride],
        padding: vec![0; 4],
        dilation: vec![1, 1],
        groups: 1,
        input_size: vec![f, f],
    };
    let dx = b.named("dx", grad, &[dy, w]).unwrap();
    b.outfeed("dx", dx).unwrap();
    compile(&b.finish(), &Target::mk2(), &CompileOptions::default()).unwrap()
}

/// The field `(h, w)` and strides of the window vertices of the steps named `dx` or `dx/…`.
fn pass_fields(exe: &Executable) -> BTreeSet<(u32, u32, [u32; 2])> {
    exe.compute_sets
        .iter()
        .filter(|cs| cs.name == "dx" || cs.name.starts_with("dx/"))
        .flat_map(|cs| &cs.tiles)
        .flat_map(|tw| &tw.groups)
        .flat_map(|g| &g.vertices)
        .filter_map(|v| match &v.params {
            VertexParams::Window(p) => {
                let g = &p.block.geometry;
                Some((g.h, g.w, g.stride))
            }
            _ => None,
        })
        .collect()
}

fn elements(exe: &Executable, name: &str) -> Option<usize> {
    exe.tensors
        .iter()
        .find(|t| t.name == name)
        .map(|t| t.shape.num_elements())
}

#[test]
fn a_strided_1x1_input_gradient_runs_on_the_undilated_field() {
    // ResNet's downsample: 1x1 at stride 2, 8x8 into 4x4.
    let exe = input_grad(1, 2, 8);
    assert_eq!(pass_fields(&exe), BTreeSet::from([(4, 4, [1, 1])]));
    assert_eq!(elements(&exe, "dx/undilated"), Some(8 * 64 * 4 * 4));
    assert_eq!(elements(&exe, "dx"), Some(8 * 64 * 8 * 8));
    assert!(
        exe.compute_sets.iter().any(|cs| cs.name == "dx/dilate"),
        "the zeros of the skipped positions are written by a step of their own"
    );
    // Each partial sum of the split reduction covers the undilated field: a quarter of the
    // partials the dilated pass held.
    let report = CompileReport::new("dx", None, &exe);
    let row = report.convolutions.iter().find(|c| c.pass == "InputGrad");
    let split = row.expect("an input-gradient row").reduction_split as usize;
    assert!(split > 1, "the case needs a split reduction");
    assert_eq!(elements(&exe, "dx/partials"), Some(split * 8 * 64 * 4 * 4));
}

#[test]
fn a_wider_kernel_keeps_its_dilated_input_gradient() {
    // A 3x3 kernel at stride 2 reaches every input position: nothing to defer.
    let exe = input_grad(3, 2, 9);
    assert_eq!(pass_fields(&exe), BTreeSet::from([(9, 9, [2, 2])]));
    assert_eq!(elements(&exe, "dx/undilated"), None);
    assert!(!exe.compute_sets.iter().any(|cs| cs.name == "dx/dilate"));
}

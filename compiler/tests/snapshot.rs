//! Snapshots of the compiled-program summary (compute sets, vertices per codelet, exchange
//! bytes, memory per category) of small programs: any change in the lowering is a reviewed
//! diff.

mod common;

use ipusim_compiler::summary::ProgramSummary;
use ipusim_compiler::{compile, CompileOptions, Target};
use ipusim_ir::models::{mlp, MlpSpec};
use ipusim_ir::DType;

fn small_target() -> Target {
    Target::parse("(base: \"mk2\", tiles: 16)", "mk2-16.ron").unwrap()
}

#[test]
fn mlp_forward_summary() {
    let p = mlp(&MlpSpec {
        input_dtype: DType::U8,
        input_scale: 1.0 / 16.0,
        seed: 3,
        ..MlpSpec::new(32, &[64, 128, 10])
    })
    .unwrap();
    let exe = compile(&p.graph, &small_target(), &CompileOptions::default()).unwrap();
    insta::assert_yaml_snapshot!(ProgramSummary::new(&exe));
}

#[test]
fn mlp_training_step_summary() {
    let g = common::mlp_training_step(16, &[32, 64, 10], DType::F16, DType::F32);
    let opts = CompileOptions {
        gradient_accumulation: 2,
        ..CompileOptions::default()
    };
    let exe = compile(&g, &small_target(), &opts).unwrap();
    insta::assert_yaml_snapshot!(ProgramSummary::new(&exe));
}

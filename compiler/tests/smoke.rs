mod common;
use ipusim_compiler::{compile, CompileOptions, Target};
use ipusim_ir::DType;

#[test]
fn smoke_training() {
    let g = common::mlp_training_step(32, &[64, 128, 10], DType::F16, DType::F32);
    for target in [Target::mk2(), Target::parse("(tiles: 4)", "t4").unwrap()] {
        let opts = CompileOptions {
            gradient_accumulation: 4,
            ..Default::default()
        };
        let exe = compile(&g, &target, &opts).unwrap();
        println!("{}", ipusim_compiler::dump::program(&exe));
        let r = ipusim_compiler::CompileReport::new("mlp", "16.32", &exe);
        println!("{}", r.to_text());
    }
}

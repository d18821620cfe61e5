//! Laws of a compiled convolution's cycles (the CNN issue's "must show"): on mk2 a large
//! convolution in FP16 with half partials takes about a quarter of the compute cycles of the
//! same convolution in FP32 (the AMP's 64 against 16 multiply-accumulates per cycle per
//! tile, ipu-hardware.md §3), and the cycles never fall as the batch grows.

use ipusim_compiler::{compile, CompileOptions, CompileReport, PartialsType, Target};
use ipusim_ir::{DType, GraphBuilder, Init, Op};

/// The compute cycles (one execution) of the convolution `x[n, c, h, w] * w[o, c, 3, 3]`
/// (padding 1) compiled for mk2.
fn conv_cycles(
    dtype: DType,
    partials: PartialsType,
    n: usize,
    (c, o, hw): (usize, usize, usize),
) -> u64 {
    let mut b = GraphBuilder::new();
    let x = b.variable("x", dtype, [n, c, hw, hw], Init::Zeros).unwrap();
    let w = b.variable("w", dtype, [o, c, 3, 3], Init::Zeros).unwrap();
    let op = Op::Conv2d {
        stride: vec![],
        padding: vec![1, 1, 1, 1],
        dilation: vec![],
        groups: 1,
    };
    let y = b.named("y", op, &[x, w]).unwrap();
    b.outfeed("y", y).unwrap();
    let g = b.finish();
    let options = CompileOptions {
        partials_type: partials,
        ..CompileOptions::default()
    };
    let exe = compile(&g, &Target::mk2(), &options).unwrap();
    let report = CompileReport::new("conv", None, &exe);
    report.convolutions.iter().map(|c| c.cycles).sum()
}

#[test]
fn half_with_half_partials_is_about_four_times_faster_than_float() {
    let size = (256, 256, 28);
    let half = conv_cycles(DType::F16, PartialsType::Half, 1, size);
    let float = conv_cycles(DType::F32, PartialsType::Float, 1, size);
    let ratio = float as f64 / half as f64;
    eprintln!("32.32 {float} cycles, 16.16 {half}: ratio {ratio:.2}");
    assert!(
        (3.0..=5.0).contains(&ratio),
        "32.32 {float} cycles, 16.16 {half}: ratio {ratio:.2}, not about 4"
    );
}

#[test]
fn cycles_never_fall_as_the_batch_grows() {
    let mut last = 0;
    for n in [1, 2, 3, 4, 8, 16] {
        let cycles = conv_cycles(DType::F16, PartialsType::Float, n, (64, 64, 14));
        eprintln!("batch {n}: {cycles} cycles");
        assert!(cycles >= last, "batch {n}: {cycles} cycles after {last}");
        last = cycles;
    }
}

/// A report's convolution row: name, `partition`, reduction and column splits.
type PlanRow = (String, [u32; 4], u32, u32);

/// `x[8, 128, 32, 32] * w[128, 128, 3, 3]` (padding 1), one convolution per name in `names`
/// (each with its own weights `NAME.weight`, into an outfeed of its name), compiled for mk2
/// with the per-op memory `proportions`: the report's convolution rows (name, `partition`,
/// reduction and column splits) and the fullest tile's bytes.
fn equal_convs(names: &[&str], proportions: &[(&str, f64)]) -> (Vec<PlanRow>, u64) {
    let mut b = GraphBuilder::new();
    let x = b
        .variable("x", DType::F16, [8, 128, 32, 32], Init::Zeros)
        .unwrap();
    for &y in names {
        let w = b
            .variable(
                &format!("{y}.weight"),
                DType::F16,
                [128, 128, 3, 3],
                Init::Zeros,
            )
            .unwrap();
        let op = Op::Conv2d {
            stride: vec![],
            padding: vec![1, 1, 1, 1],
            dilation: vec![],
            groups: 1,
        };
        let out = b.named(y, op, &[x, w]).unwrap();
        b.outfeed(y, out).unwrap();
    }
    let mut options = CompileOptions::default();
    for &(name, p) in proportions {
        options.memory_proportions.insert(name.into(), p);
    }
    let exe = compile(&b.finish(), &Target::mk2(), &options).unwrap();
    let report = CompileReport::new("convs", None, &exe);
    let rows = report
        .convolutions
        .iter()
        .map(|c| {
            (
                c.name.clone(),
                c.partition,
                c.reduction_split,
                c.column_split,
            )
        })
        .collect();
    (rows, report.memory.max_tile_bytes)
}

/// The plan (`partition`, reduction and column splits) of one such convolution `y`, with a
/// per-op memory proportion if given, and the fullest tile's bytes.
fn conv_plan(proportion: Option<f64>) -> (Vec<([u32; 4], u32, u32)>, u64) {
    let proportions: Vec<(&str, f64)> = proportion.map(|p| ("y", p)).into_iter().collect();
    let (rows, bytes) = equal_convs(&["y"], &proportions);
    (rows.into_iter().map(|r| (r.1, r.2, r.3)).collect(), bytes)
}

#[test]
fn a_smaller_memory_proportion_for_an_op_gives_it_smaller_blocks() {
    let (default, default_bytes) = conv_plan(None);
    let (small, small_bytes) = conv_plan(Some(0.02));
    eprintln!("default {default:?} ({default_bytes} B), 0.02: {small:?} ({small_bytes} B)");
    // Another partition, whose blocks take less of the fullest tile.
    assert_ne!(small, default);
    assert!(
        small_bytes < default_bytes,
        "0.02 of a tile: {small:?} ({small_bytes} B), default: {default:?} ({default_bytes} B)"
    );
}

/// The vertex the planner takes for the stem-like convolution `x[2, 3, 32, 32] * w[16, 3,
/// kernel, kernel]` (padding `kernel / 2`, `stride` and `dilation` in both dimensions) of
/// `dtype` on `target`.
fn stem_vertex(
    target: &Target,
    dtype: DType,
    kernel: usize,
    (stride, dilation): (usize, usize),
) -> String {
    let mut b = GraphBuilder::new();
    let x = b.variable("x", dtype, [2, 3, 32, 32], Init::Zeros).unwrap();
    let w = b
        .variable("w", dtype, [16, 3, kernel, kernel], Init::Zeros)
        .unwrap();
    let pad = dilation * (kernel / 2);
    let op = Op::Conv2d {
        stride: vec![stride; 2],
        padding: vec![pad; 4],
        dilation: vec![dilation; 2],
        groups: 1,
    };
    let y = b.named("y", op, &[x, w]).unwrap();
    b.outfeed("y", y).unwrap();
    let exe = compile(&b.finish(), target, &CompileOptions::default()).unwrap();
    let report = CompileReport::new("stem", None, &exe);
    report.convolutions[0].vertex.clone()
}

/// The SLIC vertex is a candidate where PopLibs offers it and its vertex can run: half
/// activations, a target with the SLIC instructions, an undilated kernel and an innermost
/// stride of at most 2. Elsewhere the planner keeps to the AMP and HMAC vertices.
#[test]
fn the_slic_vertex_is_offered_only_where_it_can_run() {
    const SLIC: &str = "ConvPartial1xNSLIC";
    let mk2 = Target::mk2();
    assert_eq!(stem_vertex(&mk2, DType::F16, 7, (2, 1)), SLIC);
    assert_eq!(stem_vertex(&mk2, DType::F16, 3, (1, 1)), SLIC);
    for (why, target, dtype, kernel, sd) in [
        ("float activations", mk2.clone(), DType::F32, 7, (2, 1)),
        ("mk1 has no SLIC", Target::mk1(), DType::F16, 7, (2, 1)),
        (
            "a target file without it",
            Target::parse("(base: \"mk2\", slic: false)", "no_slic.ron").unwrap(),
            DType::F16,
            7,
            (2, 1),
        ),
        ("stride 3", mk2.clone(), DType::F16, 7, (3, 1)),
        ("a dilated kernel", mk2.clone(), DType::F16, 3, (1, 2)),
    ] {
        let vertex = stem_vertex(&target, dtype, kernel, sd);
        assert_ne!(vertex, SLIC, "{why}");
        assert!(
            vertex.starts_with("ConvPartial"),
            "{why}: {vertex} is not a convolution vertex"
        );
    }
}

#[test]
fn equal_convolutions_share_a_plan_unless_their_memory_proportions_differ() {
    // Plans are computed once per problem (the lowering memoizes them): equal layers get
    // the same plan, and a per-op proportion is part of the problem.
    let same = equal_convs(&["y1", "y2"], &[]).0;
    assert_eq!(same.len(), 2, "{same:?}");
    let plan = |r: &PlanRow| (r.1, r.2, r.3);
    assert_eq!(plan(&same[0]), plan(&same[1]), "{same:?}");
    let apart = equal_convs(&["y1", "y2"], &[("y2", 0.02)]).0;
    assert_eq!(plan(&apart[0]), plan(&same[0]), "{apart:?}");
    assert_ne!(plan(&apart[1]), plan(&same[1]), "{apart:?}");
}

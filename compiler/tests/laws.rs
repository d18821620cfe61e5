//! The laws of the machine the cycle model must obey (issue 4, "Must show"), through the
//! public API.

mod common;

use ipusim_compiler::{compile, CompileOptions, Executable, PartialsType, Target};
use ipusim_ir::{DType, Graph, GraphBuilder, Init};

/// One `m × k × n` matmul of two variables, outfed.
fn matmul_graph(m: usize, k: usize, n: usize, dtype: DType) -> Graph {
    let mut b = GraphBuilder::new();
    let a = b.variable("a", dtype, [m, k], Init::Zeros).unwrap();
    let w = b.variable("w", dtype, [k, n], Init::Zeros).unwrap();
    let c = b.matmul(a, w).unwrap();
    b.outfeed("c", c).unwrap();
    b.finish()
}

/// Cycles of the AMP compute sets (one execution each).
fn amp_cycles(exe: &Executable) -> u64 {
    exe.estimate
        .compute_sets
        .iter()
        .filter(|c| c.name.ends_with("/partials"))
        .map(|c| c.cycles)
        .sum()
}

fn compile_matmul(
    target: &Target,
    m: usize,
    k: usize,
    n: usize,
    dtype: DType,
    partials: PartialsType,
) -> Executable {
    let opts = CompileOptions {
        partials_type: partials,
        ..CompileOptions::default()
    };
    compile(&matmul_graph(m, k, n, dtype), target, &opts).unwrap()
}

#[test]
fn amp_precision_ratios_on_mk2() {
    let t = Target::mk2();
    let (m, k, n) = (2048, 2048, 2048);
    let h16 = amp_cycles(&compile_matmul(&t, m, k, n, DType::F16, PartialsType::Half)) as f64;
    let h32 = amp_cycles(&compile_matmul(
        &t,
        m,
        k,
        n,
        DType::F16,
        PartialsType::Float,
    )) as f64;
    let f32 = amp_cycles(&compile_matmul(
        &t,
        m,
        k,
        n,
        DType::F32,
        PartialsType::Float,
    )) as f64;
    let (r16, r32) = (f32 / h16, f32 / h32);
    assert!((3.4..=4.6).contains(&r16), "32.32 / 16.16 = {r16:.2}");
    assert!((1.7..=2.3).contains(&r32), "32.32 / 16.32 = {r32:.2}");
}

#[test]
fn amp_precision_ratios_on_mk1() {
    // mk1 has 8 conv units for either partials type: the same AMP throughput. With one AMP
    // input-channel group of reduction no plan splits it, so both partials types get the
    // same plan and the AMP cycles must be equal; fp32 is 4x slower.
    let t = Target::mk1();
    let (m, k, n) = (4096, 16, 4096);
    let h16 = amp_cycles(&compile_matmul(&t, m, k, n, DType::F16, PartialsType::Half));
    let h32 = amp_cycles(&compile_matmul(
        &t,
        m,
        k,
        n,
        DType::F16,
        PartialsType::Float,
    ));
    assert_eq!(h16, h32, "16.16 and 16.32 on mk1");
    // At the estimator level the same holds for any block.
    use ipusim_compiler::cycles::vertex::amp_block_cycles;
    for (bm, bk, bn) in [(384, 256, 64), (600, 1024, 48)] {
        let a = amp_block_cycles(&t, DType::F16, DType::F16, bm, bk, bn);
        let b = amp_block_cycles(&t, DType::F16, DType::F32, bm, bk, bn);
        let f = amp_block_cycles(&t, DType::F32, DType::F32, bm, bk, bn) as f64;
        assert_eq!(a, b);
        assert!(
            (3.4..=4.6).contains(&(f / a as f64)),
            "fp32 / fp16 = {}",
            f / a as f64
        );
    }
    let (m, k, n) = (2048, 2048, 2048);
    let h = amp_cycles(&compile_matmul(
        &t,
        m,
        k,
        n,
        DType::F16,
        PartialsType::Float,
    )) as f64;
    let f = amp_cycles(&compile_matmul(
        &t,
        m,
        k,
        n,
        DType::F32,
        PartialsType::Float,
    )) as f64;
    assert!(
        (3.4..=4.6).contains(&(f / h)),
        "32.32 / 16.32 = {:.2}",
        f / h
    );
}

#[test]
fn large_fp16_matmul_is_near_the_amp_peak() {
    let t = Target::mk2();
    let s = 4096usize;
    let exe = compile_matmul(&t, s, s, s, DType::F16, PartialsType::Half);
    let macs = (s * s * s) as f64;
    let bound = macs / (t.tiles as f64 * t.amp(DType::F16, DType::F16).macs_per_cycle() as f64);
    let ote = exe.estimate.on_tile_execute as f64;
    assert!(ote >= bound, "below the peak bound: {ote} < {bound}");
    assert!(
        ote <= 1.5 * bound,
        "OnTileExecute {ote} is {:.2}x the peak-AMP bound {bound}",
        ote / bound
    );
    assert!(
        !exe.memory.oom,
        "4096^3 fp16 must fit: max tile {}",
        exe.memory.max_tile_bytes
    );
}

#[test]
fn cycles_and_memory_grow_with_batch() {
    let t = Target::mk2();
    let mut last: Option<(u64, u64)> = None;
    for batch in [8, 16, 32, 64, 128, 256] {
        let g = common::mlp_training_step(batch, &[256, 512, 512, 10], DType::F16, DType::F32);
        let exe = compile(&g, &t, &CompileOptions::default()).unwrap();
        let now = (exe.estimate.total_cycles, exe.memory.total_bytes);
        if let Some(prev) = last {
            assert!(
                now.0 > prev.0,
                "batch {batch}: cycles {} <= {}",
                now.0,
                prev.0
            );
            assert!(
                now.1 >= prev.1,
                "batch {batch}: memory {} < {}",
                now.1,
                prev.1
            );
        }
        last = Some(now);
    }
}

#[test]
fn tiny_ops_stay_on_few_tiles() {
    let t = Target::mk2();
    let exe = compile_matmul(&t, 4, 4, 4, DType::F32, PartialsType::Float);
    for cs in &exe.compute_sets {
        assert!(
            cs.tiles.len() <= 2,
            "'{}' uses {} tiles",
            cs.name,
            cs.tiles.len()
        );
    }
}

#[test]
fn a_model_too_large_reports_oom_with_a_full_report() {
    let t = Target::mk1();
    let exe = compile_matmul(&t, 64, 16384, 16384, DType::F32, PartialsType::Float);
    let m = &exe.memory;
    assert!(m.oom);
    assert!(!m.oom_tiles.is_empty());
    assert!(m.max_tile_bytes > m.bytes_per_tile_capacity);
    assert!(!m.worst_tiles.is_empty() && !m.worst_tiles[0].largest.is_empty());
    assert!(exe.estimate.total_cycles > 0);
}

/// Each fullest tile names the step at which its temporaries reach their top and the
/// temporaries live there: at most the tile's temporaries (the rest is the packing's gaps),
/// each a temporary of the tile touched at that step, largest first.
#[test]
fn the_fullest_tiles_name_what_is_live_at_their_peak() {
    let g = common::mlp_training_step(64, &[256, 512, 512, 10], DType::F16, DType::F32);
    let exe = compile(&g, &Target::mk2(), &CompileOptions::default()).unwrap();
    let m = &exe.memory;
    assert!(m.worst_tiles.iter().any(|w| w.peak.is_some()));
    for w in &m.worst_tiles {
        let c = &w.categories;
        let Some(p) = &w.peak else {
            assert_eq!(c.temporaries, 0, "tile {}: temporaries but no peak", w.tile);
            continue;
        };
        assert!(
            p.live_bytes > 0 && p.live_bytes <= c.temporaries,
            "tile {}: {} live of {} temporaries",
            w.tile,
            p.live_bytes,
            c.temporaries
        );
        assert!(!p.live.is_empty() && p.live.len() <= 5);
        assert!(p.live.windows(2).all(|w| w[0].bytes >= w[1].bytes));
        assert!(p.live.iter().map(|b| b.bytes).sum::<u64>() <= p.live_bytes);
        assert_eq!(p.name, exe.steps[p.step as usize].name);
        for b in &p.live {
            let t = &exe.tensors[b.tensor.0 as usize];
            assert_eq!(t.name, b.name);
            assert!(!t.kind.always_live(), "{} is not a temporary", b.name);
            assert!(
                t.slice_on(w.tile).is_some(),
                "{} is not on tile {}",
                b.name,
                w.tile
            );
        }
    }
}

#[test]
fn categories_sum_and_balance_is_a_fraction() {
    for target in [
        Target::mk2(),
        Target::mk1(),
        Target::parse("(tiles: 4)", "t4").unwrap(),
    ] {
        let g = common::mlp_training_step(32, &[64, 128, 10], DType::F16, DType::F32);
        let opts = CompileOptions {
            gradient_accumulation: 3,
            device_iterations: 2,
            ..CompileOptions::default()
        };
        let exe = compile(&g, &target, &opts).unwrap();
        let e = &exe.estimate;
        assert_eq!(
            e.on_tile_execute + e.do_exchange + e.sync + e.stream_copy,
            e.total_cycles
        );
        let cs_sum: u64 = e.compute_sets.iter().map(|c| c.cycles).sum();
        assert_eq!(cs_sum, e.on_tile_execute);
        assert!(
            e.tile_balance > 0.0 && e.tile_balance <= 1.0,
            "{}",
            e.tile_balance
        );
        // Update-phase compute sets run once per GA cycle, Step-phase ones GA times.
        let step = e
            .compute_sets
            .iter()
            .find(|c| c.name == "dense1/relu")
            .unwrap();
        let update = e
            .compute_sets
            .iter()
            .find(|c| c.name.starts_with("update/"))
            .unwrap();
        assert_eq!(step.executions, 6);
        assert_eq!(update.executions, 2);
    }
}

/// `reduce_sum` of an F32 variable `x` of `shape` over `axes`, compiled for `t`.
fn compiled_sum(t: &Target, shape: [usize; 2], axes: &[usize]) -> Executable {
    let mut b = GraphBuilder::new();
    let x = b.variable("x", DType::F32, shape, Init::Zeros).unwrap();
    let s = b.reduce_sum(x, axes, false).unwrap();
    b.outfeed("s", s).unwrap();
    compile(&b.finish(), t, &CompileOptions::default()).unwrap()
}

#[test]
fn reductions_over_the_chip_are_multi_stage() {
    let t = Target::mk2();
    let exe = compiled_sum(&t, [1024, 1024], &[0, 1]);
    let names: Vec<&str> = exe.compute_sets.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "reduce_sum/local",
            "reduce_sum/local/second",
            "reduce_sum/combine",
            "reduce_sum"
        ],
        "{names:?}"
    );
    // A tile's ~712 elements are one reduction with one output: as PopLibs'
    // `splitTwoStageReductionsBetweenWorkers` does, its rows are cut into six runs (an
    // estimate of 30 + 712 / 4 cycles whole, 60 + 178 / 6 in six), one per worker, and a
    // second compute set adds the six partial sums.
    for t in &exe.compute_sets[0].tiles {
        let workers: Vec<u8> = t.groups[0].vertices.iter().map(|v| v.worker).collect();
        assert_eq!(workers, [0, 1, 2, 3, 4, 5], "tile {:?}", t.tile);
    }
    for t in &exe.compute_sets[1].tiles {
        let counts: Vec<u32> = t.groups[0]
            .vertices
            .iter()
            .map(|v| match &v.params {
                ipusim_compiler::VertexParams::Block(p) => p.count,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(counts, [6], "tile {:?}", t.tile);
    }
    // Stage 1 runs on every tile holding x; the final sum on one tile from ~sqrt(1472)
    // partials instead of 1472.
    let last = exe.compute_sets.last().unwrap();
    assert_eq!(last.tiles.len(), 1);
    let count = match &last.tiles[0].groups[0].vertices[0].params {
        ipusim_compiler::VertexParams::Block(p) => p.count,
        other => panic!("{other:?}"),
    };
    assert!((20..=60).contains(&count), "{count}");
    // Two gather stages are cheaper than one over 1,472 partials.
    let single = 1472 * (t.exchange_message_cycles as u64 + 1);
    let gathered: u64 = exe.estimate.exchanges.iter().map(|e| e.cycles).sum();
    assert!(gathered < single, "{gathered} >= {single}");
}

#[test]
fn a_reductions_output_tiles_each_sum_at_least_four_vectors() {
    // 256 column sums of a [2048, 256] matrix: every tile holds a block of rows and
    // contributes to every output. PopLibs maps the output of a reduction's last stage with
    // at least four vectors of the summing vertex's input type per tile
    // (`minElementsPerTile`, `intermediateToOutput`): eight f32 sums, so at most 32 tiles
    // receive partials, where spreading by work alone took one tile per grain of two.
    let t = Target::mk2();
    let exe = compiled_sum(&t, [2048, 256], &[0]);
    let last = exe.compute_sets.last().unwrap();
    assert_eq!(last.name, "reduce_sum");
    let out = exe
        .values
        .iter()
        .find(|v| v.name == "reduce_sum")
        .and_then(|v| v.tensor)
        .unwrap();
    let slices = &exe.tensors[out.0 as usize].slices;
    let share = 4 * t.vector_width(DType::F32);
    assert!(slices.len() as u64 <= 256 / share, "{}", slices.len());
    for s in slices {
        assert!(s.num_elements() >= share, "{:?}", s.tile);
    }
    assert_eq!(last.tiles.len(), slices.len());
}

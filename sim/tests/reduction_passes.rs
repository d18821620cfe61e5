//! How reductions are lowered. A reduction whose reduced axes are a leading run and an inner
//! run with only kept axes ahead of the inner one (a batch norm's statistics over `N`, `H`,
//! `W` of `[N, C, H, W]`) is lowered as one pass, as PopLibs reduces it; other separated
//! reductions take one pass per run of reduced axes, through an intermediate `…/pass1`
//! tensor. Both sum every element: the inputs are small integers, so every order gives the
//! exact sum. An intermediate stage spreads its sums over tiles by their work.

mod common;

use common::programs;
use ipusim_compiler::{compile, CompileOptions, Executable, Target};
use ipusim_exe::cycles::{tile_work_cycles, vertex::group_cycles};
use ipusim_ir::{DType, GraphBuilder, Init, Op, Shape};
use ipusim_sim::host::QueueHost;
use ipusim_sim::tensor::Tensor;
use ipusim_sim::Engine;

const DIMS: [usize; 4] = [4, 8, 6, 5];

/// `ReduceSum(x, axes)` of an F32 `x` of shape [`DIMS`], compiled for mk2.
fn reduction(axes: &[usize]) -> Executable {
    reduction_of(
        &DIMS,
        Op::ReduceSum {
            axes: axes.to_vec(),
            keep_dims: false,
        },
    )
}

/// The reduction `op` of an F32 variable `x` of shape `dims` into outfeed `y`, compiled for
/// mk2.
fn reduction_of(dims: &[usize], op: Op) -> Executable {
    let mut b = GraphBuilder::new();
    let x = b
        .variable("x", DType::F32, dims.to_vec(), Init::Zeros)
        .unwrap();
    let y = b.named("y", op, &[x]).unwrap();
    b.outfeed("y", y).unwrap();
    compile(&b.finish(), &Target::mk2(), &CompileOptions::default()).unwrap()
}

/// Runs `exe` on `x[i] = i mod 7 − 3` and returns `y` next to its exact value.
fn run_and_expect(exe: Executable, axes: &[usize]) -> (Vec<f32>, Vec<f32>) {
    let n: usize = DIMS.iter().product();
    let xs: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
    let kept: Vec<usize> = (0..4).filter(|a| !axes.contains(a)).collect();
    let out_len: usize = kept.iter().map(|&a| DIMS[a]).product();
    let mut want = vec![0.0f32; out_len];
    for (i, &v) in xs.iter().enumerate() {
        let idx = [
            i / (DIMS[1] * DIMS[2] * DIMS[3]),
            (i / (DIMS[2] * DIMS[3])) % DIMS[1],
            (i / DIMS[3]) % DIMS[2],
            i % DIMS[3],
        ];
        let o = kept.iter().fold(0, |acc, &a| acc * DIMS[a] + idx[a]);
        want[o] += v;
    }
    let mut engine = Engine::new(std::sync::Arc::new(exe), Default::default()).unwrap();
    let t = Tensor::f32(Shape::new(DIMS.to_vec()), xs).unwrap();
    engine.write_variable("x", &t).unwrap();
    let mut host = QueueHost::new();
    engine.run(&mut host).unwrap();
    let got = host.outfeeds["y"][0]
        .chunks(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    (got, want)
}

fn has_pass(exe: &Executable) -> bool {
    exe.tensors.iter().any(|t| t.name.contains("/pass1"))
}

#[test]
fn a_leading_and_an_inner_reduced_run_are_one_pass() {
    // [N, C, H, W] over N and H (W kept inside, C between): one pass.
    let exe = reduction(&[0, 2]);
    assert!(!has_pass(&exe), "an intermediate pass tensor was made");
    let (got, want) = run_and_expect(exe, &[0, 2]);
    assert_eq!(got, want);
}

#[test]
fn a_kept_axis_ahead_of_the_reduced_runs_takes_two_passes() {
    // Over C and W: N is kept ahead of C, so W is reduced first, then C.
    let exe = reduction(&[1, 3]);
    assert!(has_pass(&exe), "expected an intermediate pass tensor");
    let (got, want) = run_and_expect(exe, &[1, 3]);
    assert_eq!(got, want);
}

#[test]
fn the_intermediate_stage_spreads_its_sums_by_their_work() {
    // A batch norm's statistics of [64, 64, 8, 8]: each channel's sum gathers contributions
    // from 64 samples on many tiles, so a group of tiles sums far more elements than it has
    // outputs; its sums spread over as many tiles as that work is worth, not over one tile
    // per group's few outputs.
    let op = Op::ReduceMean {
        axes: vec![0, 2, 3],
        keep_dims: false,
    };
    let exe = reduction_of(&[64, 64, 8, 8], op);
    let combine = exe
        .compute_sets
        .iter()
        .find(|c| c.name == "y/combine")
        .expect("an intermediate stage");
    // About √64 groups of tiles: one summing tile per group would be fewer than 16 (59 now).
    assert!(
        combine.tiles.len() > 16,
        "the intermediate sums run on {} tiles",
        combine.tiles.len()
    );
}

#[test]
fn a_sum_reads_a_widening_cast_and_its_square_itself() {
    // `ReduceSum(Cast(x)²)` and `ReduceSum(Cast(x))` of an F16 `x`, as a batch norm's
    // statistics are spelled: the reductions read `x` (PopLibs' reduce to an F32 result, with
    // SQUARE_ADD), so no F32 copy or square of `x` is stored, and the sums are exact.
    let axes = [0usize, 2];
    let mut b = GraphBuilder::new();
    let x = b.variable("x", DType::F16, DIMS, Init::Zeros).unwrap();
    let c = b.named("c", Op::Cast { dtype: DType::F32 }, &[x]).unwrap();
    let sq = b.named("sq", Op::Mul, &[c, c]).unwrap();
    let sum = |axes: &[usize]| Op::ReduceSum {
        axes: axes.to_vec(),
        keep_dims: false,
    };
    let y = b.named("y", sum(&axes), &[sq]).unwrap();
    let c2 = b.named("c2", Op::Cast { dtype: DType::F32 }, &[x]).unwrap();
    let z = b.named("z", sum(&axes), &[c2]).unwrap();
    b.outfeed("y", y).unwrap();
    b.outfeed("z", z).unwrap();
    let exe = compile(&b.finish(), &Target::mk2(), &CompileOptions::default()).unwrap();
    for absorbed in ["c", "sq", "c2"] {
        assert!(
            exe.tensors.iter().all(|t| t.name != absorbed),
            "{absorbed} was stored"
        );
    }
    let reads_f16 = |op| {
        exe.compute_sets.iter().any(|cs| {
            cs.tiles.iter().any(|t| {
                t.groups.iter().any(|g| {
                    g.codelet
                        == ipusim_compiler::codelets::Codelet::Reduce {
                            op,
                            input: DType::F16,
                            acc: DType::F32,
                            output: DType::F32,
                        }
                })
            })
        })
    };
    use ipusim_compiler::codelets::ReduceOp;
    assert!(
        reads_f16(ReduceOp::SquareAdd),
        "no SquareAdd of the F16 input"
    );
    assert!(reads_f16(ReduceOp::Sum), "no Sum of the F16 input");

    let n: usize = DIMS.iter().product();
    let xs: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
    let out_len = DIMS[1] * DIMS[3];
    let (mut want_y, mut want_z) = (vec![0.0f32; out_len], vec![0.0f32; out_len]);
    for (i, &v) in xs.iter().enumerate() {
        let o = ((i / (DIMS[2] * DIMS[3])) % DIMS[1]) * DIMS[3] + i % DIMS[3];
        want_y[o] += v * v;
        want_z[o] += v;
    }
    let mut engine = Engine::new(std::sync::Arc::new(exe), Default::default()).unwrap();
    let halves = xs.iter().map(|&v| half::f16::from_f32(v)).collect();
    let t = Tensor::f16(Shape::new(DIMS.to_vec()), halves).unwrap();
    engine.write_variable("x", &t).unwrap();
    let mut host = QueueHost::new();
    engine.run(&mut host).unwrap();
    let got = |name: &str| -> Vec<f32> {
        host.outfeeds[name][0]
            .chunks(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    };
    assert_eq!(got("y"), want_y);
    assert_eq!(got("z"), want_z);
}

/// The statistics of an F16 `x` as a batch norm spells them, with the reductions named
/// `{parent}mean` and `{parent}power`: compiled, and run on `x[i] = i mod 7 − 3`.
fn statistics(parent: &str) -> (usize, Vec<Vec<u8>>) {
    let mut b = GraphBuilder::new();
    let x = b.variable("x", DType::F16, DIMS, Init::Zeros).unwrap();
    let cast = |b: &mut GraphBuilder, name: &str| {
        b.named(name, Op::Cast { dtype: DType::F32 }, &[x]).unwrap()
    };
    let mean_op = Op::ReduceMean {
        axes: vec![0, 2, 3],
        keep_dims: false,
    };
    let c = cast(&mut b, &format!("{parent}input_f32"));
    let mean = b
        .named(&format!("{parent}mean"), mean_op.clone(), &[c])
        .unwrap();
    let c2 = cast(&mut b, &format!("{parent}power_input_f32"));
    let sq = b
        .named(&format!("{parent}square"), Op::Mul, &[c2, c2])
        .unwrap();
    let power = b.named(&format!("{parent}power"), mean_op, &[sq]).unwrap();
    b.outfeed("mean", mean).unwrap();
    b.outfeed("power", power).unwrap();
    let exe = compile(&b.finish(), &Target::mk2(), &CompileOptions::default()).unwrap();
    let sets = exe.compute_sets.len();
    let n: usize = DIMS.iter().product();
    let xs = (0..n)
        .map(|i| half::f16::from_f32((i % 7) as f32 - 3.0))
        .collect();
    let mut engine = Engine::new(std::sync::Arc::new(exe), Default::default()).unwrap();
    let t = Tensor::f16(Shape::new(DIMS.to_vec()), xs).unwrap();
    engine.write_variable("x", &t).unwrap();
    let mut host = QueueHost::new();
    engine.run(&mut host).unwrap();
    let outs = ["mean", "power"].map(|s| host.outfeeds[s][0].clone());
    (sets, outs.to_vec())
}

#[test]
fn a_composites_sums_share_their_compute_sets() {
    // PopLibs' reduceMany: the mean and the power of one batch norm (`bn/mean`, `bn/power`)
    // run in the same compute sets, with the same values as when they run apart.
    let (together, values) = statistics("bn/");
    let (apart, values_apart) = statistics("");
    assert!(
        together < apart,
        "{together} compute sets together, {apart} apart"
    );
    assert_eq!(values, values_apart);
}

/// `bn/a = Σ x`, `bn/b = Σ (x · a)` (which waits for `a`) and `bn/c = Σ x`, in that order,
/// with `parent` for `bn/`: the number of `Reduce` vertices and the outfeeds.
fn three_sums(parent: &str) -> (usize, Vec<Vec<u8>>) {
    let mut b = GraphBuilder::new();
    let x = b.variable("x", DType::F32, DIMS, Init::Zeros).unwrap();
    let sum = || Op::ReduceSum {
        axes: vec![0, 2, 3],
        keep_dims: true,
    };
    let a = b.named(&format!("{parent}a"), sum(), &[x]).unwrap();
    let w = b.named("w", Op::Mul, &[x, a]).unwrap();
    let s = b.named(&format!("{parent}b"), sum(), &[w]).unwrap();
    let c = b.named(&format!("{parent}c"), sum(), &[x]).unwrap();
    for (name, v) in [("a", a), ("b", s), ("c", c)] {
        b.outfeed(name, v).unwrap();
    }
    let exe = compile(&b.finish(), &Target::mk2(), &CompileOptions::default()).unwrap();
    let reduce_vertices = exe
        .compute_sets
        .iter()
        .flat_map(|cs| &cs.tiles)
        .flat_map(|t| &t.groups)
        .filter(|g| matches!(g.codelet, ipusim_compiler::Codelet::Reduce { .. }))
        .map(|g| g.vertices.len())
        .sum();
    let n: usize = DIMS.iter().product();
    let xs = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
    let mut engine = Engine::new(std::sync::Arc::new(exe), Default::default()).unwrap();
    engine
        .write_variable("x", &Tensor::f32(Shape::new(DIMS.to_vec()), xs).unwrap())
        .unwrap();
    let mut host = QueueHost::new();
    engine.run(&mut host).unwrap();
    let outs = ["a", "b", "c"].map(|s| host.outfeeds[s][0].clone());
    (reduce_vertices, outs.to_vec())
}

#[test]
fn a_sum_lowered_with_an_earlier_partner_is_not_lowered_again() {
    // `bn/c` is ready with `bn/a` and runs with it; `bn/b` waits for `a`, and must not take
    // `bn/c` as a partner again: the same vertices as when nothing is shared.
    let (together, values) = three_sums("bn/");
    let (apart, values_apart) = three_sums("");
    assert_eq!(together, apart, "Reduce vertices together and apart");
    assert_eq!(values, values_apart);
}

/// Every `Reduce` vertex of `exe` with its parameters.
fn reduce_params(exe: &Executable) -> Vec<ipusim_compiler::codelets::BlockParams> {
    use ipusim_compiler::codelets::{Codelet, VertexParams};
    exe.compute_sets
        .iter()
        .flat_map(|cs| &cs.tiles)
        .flat_map(|t| &t.groups)
        .filter(|g| matches!(g.codelet, Codelet::Reduce { .. }))
        .flat_map(|g| &g.vertices)
        .filter_map(|v| match &v.params {
            VertexParams::Block(b) => Some(b.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_tiles_images_of_the_same_channels_are_one_vertexs_repeats() {
    // Statistics over N, H, W of [N, C, H, W] with many small images: a tile holds several
    // whole images, and sums all of them per channel in one vertex (PopLibs' strided reduce
    // with outer strides), not one contribution per image.
    let dims = [48usize, 4, 2, 4];
    let op = Op::ReduceSum {
        axes: vec![0, 2, 3],
        keep_dims: false,
    };
    let exe = reduction_of(&dims, op);
    let params = reduce_params(&exe);
    let repeated: Vec<_> = params.iter().filter(|p| p.outer > 1).collect();
    assert!(
        !repeated.is_empty(),
        "no vertex repeats its block: {params:?}"
    );
    let image = (dims[1] * dims[2] * dims[3]) as u32;
    for p in &repeated {
        // A worker's channels of one image, repeated image after image (the tile holds
        // whole images, so the stride is one image).
        assert_eq!(p.outer_stride, image, "{p:?}");
    }
    // Every element is still summed once: the exact sums of small integers.
    let n: usize = dims.iter().product();
    let xs: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
    let mut want = vec![0.0f32; dims[1]];
    for (i, &v) in xs.iter().enumerate() {
        want[(i / (dims[2] * dims[3])) % dims[1]] += v;
    }
    let mut engine = Engine::new(std::sync::Arc::new(exe), Default::default()).unwrap();
    let t = Tensor::f32(Shape::new(dims.to_vec()), xs).unwrap();
    engine.write_variable("x", &t).unwrap();
    let mut host = QueueHost::new();
    engine.run(&mut host).unwrap();
    let got: Vec<f32> = host.outfeeds["y"][0]
        .chunks(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn the_sum_of_a_variables_squares_is_compiled() {
    // `ReduceSum(Mul(x, x))` of a variable (an L2 penalty): the reduction reads the square
    // of a node without inputs through `SquareAdd`. It used to panic the compiler.
    let mut b = GraphBuilder::new();
    let x = b.variable("x", DType::F32, [64, 8], Init::Zeros).unwrap();
    let sq = b.mul(x, x).unwrap();
    let op = Op::ReduceSum {
        axes: vec![0, 1],
        keep_dims: false,
    };
    let y = b.named("y", op, &[sq]).unwrap();
    b.outfeed("y", y).unwrap();
    let exe = compile(&b.finish(), &Target::mk2(), &CompileOptions::default()).unwrap();
    let xs: Vec<f32> = (0..512).map(|i| (i % 7) as f32 - 3.0).collect();
    let want: f32 = xs.iter().map(|v| v * v).sum();
    let mut engine = Engine::new(std::sync::Arc::new(exe), Default::default()).unwrap();
    let t = Tensor::f32(Shape::new(vec![64, 8]), xs).unwrap();
    engine.write_variable("x", &t).unwrap();
    let mut host = QueueHost::new();
    engine.run(&mut host).unwrap();
    let got = f32::from_le_bytes(host.outfeeds["y"][0][..4].try_into().unwrap());
    assert_eq!(got, want);
}

#[test]
fn a_tile_of_many_reductions_shares_them_whole_between_its_workers() {
    // The shipped CNN on 16 tiles: a tile of its first batch norm's statistics holds ten
    // blocks of the mean and ten of the power (one per image of the micro-batch, channel
    // groups of 8). The two reductions share the compute set as PopLibs' `reduceMany` does,
    // each planned for its quota of ⌈6 / 2⌉ = 3 workers (`ReduceManyInfo::assignWorkers`):
    // the mean's blocks whole on workers 0–2, the power's on 3–5, equal blocks in
    // consecutive runs (4, 3, 3), as PopLibs' single-stage path deals them, and the two
    // groups' vertices side by side on the six workers: the tile costs its busiest worker
    // once, not the two groups one after the other. (The differential tests hold the
    // values to the interpreter's.)
    let l = programs::launch_with(
        &programs::root().join("programs/resnet_digits.ron"),
        &programs::mk2(16),
        Default::default(),
    );
    let target = &l.executable.target;
    let cs = l
        .executable
        .compute_sets
        .iter()
        .find(|c| c.name == "bn1/mean/local+power/local")
        .expect("the first batch norm's local statistics");
    let mut shared = 0;
    for t in &cs.tiles {
        let [mean, power] = &t.groups[..] else {
            panic!("tile {:?}: {} groups", t.tile, t.groups.len());
        };
        if mean.vertices.len() < 6 {
            continue;
        }
        shared += 1;
        for (g, first) in [(mean, 0u8), (power, 3)] {
            let workers: Vec<u8> = g.vertices.iter().map(|v| v.worker).collect();
            let per: Vec<usize> = (first..first + 3)
                .map(|w| workers.iter().filter(|&&x| x == w).count())
                .collect();
            assert!(
                workers.windows(2).all(|w| w[0] <= w[1])
                    && per.iter().sum::<usize>() == workers.len()
                    && per.iter().max().unwrap() - per.iter().min().unwrap() <= 1,
                "tile {:?}: workers {workers:?}",
                t.tile
            );
        }
        let apart = group_cycles(target, mean).total + group_cycles(target, power).total;
        let together = tile_work_cycles(target, t);
        assert!(together < apart, "tile {:?}: {together} >= {apart}", t.tile);
    }
    // Every tile but the last (which holds fewer channels) holds ten blocks of each.
    assert!(
        shared >= 15 && shared + 1 >= cs.tiles.len(),
        "{shared} of {} tiles of six blocks or more",
        cs.tiles.len()
    );
}

#[test]
fn a_tiles_one_long_reduction_is_cut_into_runs_summed_in_a_second_stage() {
    // The sum of 1,000 f32 values on one tile: one reduction with one output, so PopLibs'
    // two-stage path cuts its rows into six runs (an estimate of 30 + 1000 / 4 cycles
    // whole, 60 + 250 / 6 in six), in grains of the f32 vector width (two) with the
    // remainder on the first runs: 168, 168, 166, 166, 166, 166. Each run is summed in
    // ascending order on a worker of its own, and a second compute set adds the six sums in
    // order: the result is that order's, bit for bit, not the sequential sum's.
    let mut b = GraphBuilder::new();
    let x = b.variable("x", DType::F32, [1000], Init::Zeros).unwrap();
    let y = b.reduce_sum(x, &[0], false).unwrap();
    b.outfeed("y", y).unwrap();
    let exe = compile(&b.finish(), &programs::mk2(1), &CompileOptions::default()).unwrap();
    let names: Vec<&str> = exe.compute_sets.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["reduce_sum", "reduce_sum/second"]);
    // Values over six decades, so that the order of the sum shows in its rounding.
    let xs: Vec<f32> = (0..1000u32)
        .map(|i| ((i * 7919) % 1000) as f32 * 10f32.powi((i % 6) as i32 - 3) - 40.0)
        .collect();
    let mut runs = Vec::new();
    let mut at = 0;
    for len in [168, 168, 166, 166, 166, 166] {
        runs.push(xs[at..at + len].iter().fold(0f32, |s, &v| s + v));
        at += len;
    }
    let want = runs.iter().fold(0f32, |s, &v| s + v);
    let sequential = xs.iter().fold(0f32, |s, &v| s + v);
    assert_ne!(
        want.to_bits(),
        sequential.to_bits(),
        "the data must tell the orders apart"
    );
    let mut engine = Engine::new(std::sync::Arc::new(exe), Default::default()).unwrap();
    engine
        .write_variable("x", &Tensor::f32(Shape::new(vec![1000]), xs).unwrap())
        .unwrap();
    let mut host = QueueHost::new();
    engine.run(&mut host).unwrap();
    let got = f32::from_le_bytes(host.outfeeds["y"][0][..4].try_into().unwrap());
    assert_eq!(got.to_bits(), want.to_bits(), "{got} against {want}");
}

/// `op` of a 1,000-element variable of `dtype` holding `xs`, on one tile: its outfeed's bytes
/// and its compute sets' names.
fn one_tile(op: Op, dtype: DType, xs: &[f32]) -> (Vec<u8>, Vec<String>) {
    let n = xs.len();
    let mut b = GraphBuilder::new();
    let x = b.variable("x", dtype, [n], Init::Zeros).unwrap();
    let y = b.named("y", op, &[x]).unwrap();
    b.outfeed("y", y).unwrap();
    let exe = compile(&b.finish(), &programs::mk2(1), &CompileOptions::default()).unwrap();
    let names = exe.compute_sets.iter().map(|c| c.name.clone()).collect();
    let t = match dtype {
        DType::F16 => Tensor::f16(
            Shape::new(vec![n]),
            xs.iter().map(|&v| half::f16::from_f32(v)).collect(),
        ),
        _ => Tensor::f32(Shape::new(vec![n]), xs.to_vec()),
    };
    let mut engine = Engine::new(std::sync::Arc::new(exe), Default::default()).unwrap();
    engine.write_variable("x", &t.unwrap()).unwrap();
    let mut host = QueueHost::new();
    engine.run(&mut host).unwrap();
    (host.outfeeds["y"][0].clone(), names)
}

#[test]
fn a_cut_max_takes_the_runs_max_and_a_cut_half_mean_scales_in_the_second_stage() {
    // The same one-tile cut as above for a max (the second stage takes the max of the runs'
    // maxima) and for the mean of half values (f32 partials; the second stage adds them,
    // scales by 1/1000 and rounds once to half).
    let xs: Vec<f32> = (0..1000u32)
        .map(|i| ((i * 7919) % 1000) as f32 * 0.01 - 3.0)
        .collect();
    let max = Op::ReduceMax {
        axes: vec![0],
        keep_dims: false,
    };
    let (y, names) = one_tile(max, DType::F32, &xs);
    assert_eq!(names, ["y", "y/second"]);
    let want = xs.iter().copied().fold(f32::MIN, f32::max);
    assert_eq!(f32::from_le_bytes(y[..4].try_into().unwrap()), want);
    let mean = Op::ReduceMean {
        axes: vec![0],
        keep_dims: false,
    };
    let (y, names) = one_tile(mean, DType::F16, &xs);
    assert_eq!(names, ["y", "y/second"]);
    let got = half::f16::from_le_bytes([y[0], y[1]]).to_f64();
    let halves: Vec<f64> = xs
        .iter()
        .map(|&v| half::f16::from_f32(v).to_f64())
        .collect();
    let exact = halves.iter().sum::<f64>() / 1000.0;
    // The f32 sums' error (at most 1000 · 2⁻²⁴ · Σ|x| ≈ 0.18, 1.8 · 10⁻⁴ after the scale)
    // is a fifth of an ulp of half below 2 (2⁻¹⁰): the result is within one ulp of the
    // exact mean of the half values.
    assert!(
        (got - exact).abs() <= 2f64.powi(-10),
        "{got} against {exact}"
    );
}

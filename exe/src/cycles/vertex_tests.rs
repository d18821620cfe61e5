//! Tests of [`super`] (`vertex.rs`): kept beside it, in their own file.
use super::*;
use crate::codelets::FusedArg;

fn scaled_add(dtype: DType, n: u64) -> u64 {
    elementwise_cycles(&Target::mk2(), dtype, n)
}

#[test]
fn scaled_add_reproduces_poplibs_reference_values() {
    // ipu-hardware.md §5.4 worked values of P1 getScaledArithmeticSupervisorCycleEstimate.
    assert_eq!(scaled_add(DType::F16, 1024), 945);
    assert_eq!(scaled_add(DType::F32, 1024), 1719);
    assert_eq!(scaled_add(DType::F16, 4096), 3249);
    assert_eq!(scaled_add(DType::F16, 24), 207);
}

#[test]
fn amp_throughput_per_pass_matches_the_target() {
    // A large block approaches the target's MACs per cycle from below.
    for (target, input, partials, macs) in [
        (Target::mk2(), DType::F16, DType::F16, 64.0),
        (Target::mk2(), DType::F16, DType::F32, 32.0),
        (Target::mk2(), DType::F32, DType::F32, 16.0),
        (Target::mk1(), DType::F16, DType::F32, 32.0),
        (Target::mk1(), DType::F32, DType::F32, 8.0),
    ] {
        let (m, k, n) = (6 * 512, 256, 128);
        let c = amp_block_cycles(&target, input, partials, m, k, n) as f64;
        let rate = (m * k * n) as f64 / c;
        assert!(
            rate < macs && rate > 0.9 * macs,
            "{} {rate} vs {macs}",
            target.name
        );
    }
}

#[test]
fn cast_estimates_follow_poplibs_paths() {
    let t = Target::mk2();
    // half -> float: 2 elements per cycle after a 19-cycle prologue.
    assert_eq!(cast_worker(&t, DType::F16, DType::F32, 8), 19 + 4 + 1);
    // float -> half: 4 elements per 2 cycles.
    assert_eq!(cast_worker(&t, DType::F32, DType::F16, 8), 19 + 4 + 2);
}

#[test]
fn a_reduces_outer_strides_cost_their_rows_and_a_restart_each() {
    // Repeats sum `outer × count` rows, plus PopLibs' 3 cycles per further inner-loop
    // start (getCyclesEstimateForStridedReduce: numOuterStrides × (3 + …)).
    let t = Target::mk2();
    let once = BlockParams::new(2, 16, 8, (0, 8));
    let flat = BlockParams::new(2, 48, 8, (0, 8));
    let repeated = BlockParams {
        outer: 3,
        outer_stride: 2 * 16 * 8,
        ..once.clone()
    };
    let cost = |b: &BlockParams| reduce_worker(&t, ReduceOp::Sum, DType::F16, DType::F32, b);
    let vectors = 8u64.div_ceil(t.vector_width(DType::F16));
    assert_eq!(cost(&repeated), cost(&flat) + 2 * vectors * 3 * 2);
    assert!(cost(&repeated) < 3 * cost(&once));
}

/// An element-wise vertex split among the workers costs what its workers' slices cost
/// as a vertex each: the same supervisor and worker cycles.
#[test]
fn a_split_vertex_costs_its_worker_slices() {
    use crate::codelets::{FusedArg, FusedLeaf, MapParams};
    use crate::executable::{Operand, Vertex};
    use crate::ids::TensorId;
    use crate::workers::{split_grain, worker_slices, ALL_WORKERS};
    use ipusim_ir::BinaryOp;
    let t = Target::mk2();
    let vertex = |worker: u8, inputs: usize, len: u64| Vertex {
        worker,
        operands: (0..=inputs)
            .map(|k| Operand {
                tensor: TensorId(k as u32),
                offset: 0,
                len: len as u32,
            })
            .collect(),
        params: VertexParams::Map(MapParams {
            out_begin: None,
            inputs: (0..inputs).map(|_| Access::Aligned).collect(),
            scale: 1.0,
        }),
    };
    let cast_then_add = Codelet::fused(
        vec![
            FusedLeaf {
                dtype: DType::F16,
                scalar: false,
            },
            FusedLeaf {
                dtype: DType::F32,
                scalar: false,
            },
        ],
        vec![
            step(
                Codelet::Cast {
                    from: DType::F16,
                    to: DType::F32,
                },
                &[FusedArg::Leaf(0)],
            ),
            step(
                Codelet::Binary {
                    op: BinaryOp::Add,
                    dtype: DType::F32,
                },
                &[FusedArg::Step(0), FusedArg::Leaf(1)],
            ),
        ],
    );
    let codelets = [
        (
            Codelet::Binary {
                op: BinaryOp::Mul,
                dtype: DType::F16,
            },
            2,
        ),
        (
            Codelet::Unary {
                op: UnaryOp::Relu,
                dtype: DType::F32,
            },
            1,
        ),
        (
            Codelet::Cast {
                from: DType::F32,
                to: DType::F16,
            },
            1,
        ),
        (cast_then_add, 2),
    ];
    for (codelet, inputs) in codelets {
        let grain = split_grain(&t, &codelet);
        for n in [1u64, 7, 30, 1000, 4099] {
            let split = VertexGroup {
                codelet: codelet.clone(),
                vertices: vec![vertex(ALL_WORKERS, inputs, n)],
            };
            let per_worker = VertexGroup {
                codelet: codelet.clone(),
                vertices: worker_slices(n, grain, t.worker_contexts)
                    .into_iter()
                    .enumerate()
                    .map(|(w, (a, b))| vertex(w as u8, inputs, b - a))
                    .collect(),
            };
            assert_eq!(
                group_cycles(&t, &split),
                group_cycles(&t, &per_worker),
                "{} over {n}",
                codelet.full_name()
            );
        }
    }
    // A `Fill` (its own parameters, no inputs) splits the same way.
    let fill = Codelet::Fill { dtype: DType::F16 };
    let grain = split_grain(&t, &fill);
    let fill_vertex = |worker: u8, len: u64| Vertex {
        worker,
        operands: [Operand {
            tensor: TensorId(0),
            offset: 0,
            len: len as u32,
        }]
        .into_iter()
        .collect(),
        params: VertexParams::Fill { value: 0.0 },
    };
    for n in [1u64, 7, 30, 1000, 4099] {
        let per_worker: Vec<Vertex> = worker_slices(n, grain, t.worker_contexts)
            .into_iter()
            .enumerate()
            .map(|(w, (a, b))| fill_vertex(w as u8, b - a))
            .collect();
        let group = |vertices| VertexGroup {
            codelet: fill.clone(),
            vertices,
        };
        assert_eq!(
            group_cycles(&t, &group(vec![fill_vertex(ALL_WORKERS, n)])),
            group_cycles(&t, &group(per_worker)),
            "Fill over {n}"
        );
    }
}

/// A block vertex split among the workers costs what a vertex per worker's part costs:
/// whole groups, or with one group whole vectors of its columns, the repeats in each part.
#[test]
fn a_split_block_vertex_costs_a_vertex_per_worker_part() {
    use crate::executable::{Operand, Vertex};
    use crate::ids::TensorId;
    use crate::workers::{split_grain, worker_slices, ALL_WORKERS};
    let t = Target::mk2();
    let vertex = |worker: u8, p: BlockParams| Vertex {
        worker,
        operands: [0u32, 1]
            .into_iter()
            .map(|k| Operand {
                tensor: TensorId(k),
                offset: 0,
                len: if k == 0 {
                    p.span() as u32
                } else {
                    p.groups * p.cols
                },
            })
            .collect(),
        params: VertexParams::Block(p),
    };
    let codelets = [
        Codelet::Reduce {
            op: ReduceOp::Sum,
            input: DType::F16,
            acc: DType::F32,
            output: DType::F16,
        },
        Codelet::Reduce {
            op: ReduceOp::Max,
            input: DType::F32,
            acc: DType::F32,
            output: DType::F32,
        },
        Codelet::ArgMax { dtype: DType::F16 },
    ];
    for codelet in codelets {
        let grain = split_grain(&t, &codelet);
        for (groups, count, width, outer) in [
            (1u32, 9u32, 50u32, 2u32),
            (1, 3, 5, 1),
            (7, 4, 6, 1),
            (40, 2, 3, 3),
        ] {
            let with = |g: u64, (a, b): (u64, u64)| BlockParams {
                outer,
                outer_stride: if outer > 1 { 1000 } else { 0 },
                ..BlockParams::new(g as u32, count, width, (a as u32, (b - a) as u32))
            };
            let whole = with(u64::from(groups), (0, u64::from(width)));
            let split = VertexGroup {
                codelet: codelet.clone(),
                vertices: vec![vertex(ALL_WORKERS, whole)],
            };
            let parts: Vec<BlockParams> = if groups > 1 {
                worker_slices(u64::from(groups), 1, t.worker_contexts)
                    .into_iter()
                    .map(|(g0, g1)| with(g1 - g0, (0, u64::from(width))))
                    .collect()
            } else {
                worker_slices(u64::from(width), grain, t.worker_contexts)
                    .into_iter()
                    .map(|cs| with(1, cs))
                    .collect()
            };
            let per_worker = VertexGroup {
                codelet: codelet.clone(),
                vertices: parts
                    .into_iter()
                    .enumerate()
                    .map(|(w, p)| vertex(w as u8, p))
                    .collect(),
            };
            assert_eq!(
                group_cycles(&t, &split),
                group_cycles(&t, &per_worker),
                "{} over {groups}x{count}x{width}",
                codelet.full_name()
            );
        }
    }
}

/// A group of fused vertices of `lens` outputs each (one per worker).
fn fused_group(leaves: Vec<FusedLeaf>, steps: Vec<FusedStep>, lens: &[u32]) -> VertexGroup {
    use crate::codelets::MapParams;
    use crate::executable::{Operand, Vertex};
    use crate::ids::TensorId;
    let n_leaves = leaves.len();
    VertexGroup {
        codelet: Codelet::fused(leaves, steps),
        vertices: lens
            .iter()
            .enumerate()
            .map(|(w, &len)| Vertex {
                worker: w as u8,
                operands: (0..=n_leaves)
                    .map(|k| Operand {
                        tensor: TensorId(k as u32),
                        offset: 0,
                        len,
                    })
                    .collect(),
                params: VertexParams::Map(MapParams {
                    out_begin: None,
                    inputs: Default::default(),
                    scale: 1.0,
                }),
            })
            .collect(),
    }
}

fn step(codelet: Codelet, args: &[FusedArg]) -> FusedStep {
    FusedStep::new(codelet, args.to_vec(), 1.0)
}

#[test]
fn fused_vertices_follow_poplibs_generated_codelet_estimate() {
    use crate::codelets::FusedArg::{Leaf, Step};
    use ipusim_ir::BinaryOp;
    let t = Target::mk2();
    let half = |scalar| FusedLeaf {
        dtype: DType::F16,
        scalar,
    };
    let bin = |op| Codelet::Binary {
        op,
        dtype: DType::F16,
    };
    // (x - y) * s + y over 1000 half outputs on a tile: a vectorised expression, so the
    // MultiVertex (ExpressionGenerator.cpp executeCodelet): 20 + per input
    // (n / 4 + n % 4) x 3 fused ops, the scalar input counting one element:
    // 20 + 750 + 750 + 3 = 1523, rounded up to a multiple of 6 workers: 1524.
    let steps = vec![
        step(bin(BinaryOp::Sub), &[Leaf(0), Leaf(1)]),
        step(bin(BinaryOp::Mul), &[Step(0), Leaf(2)]),
        step(bin(BinaryOp::Add), &[Step(1), Leaf(1)]),
    ];
    let leaves = vec![half(false), half(false), half(true)];
    let g = fused_group(
        leaves.clone(),
        steps.clone(),
        &[168, 168, 168, 168, 168, 160],
    );
    assert_eq!(group_cycles(&t, &g).total, 1524);
    // Four outputs (one vector) are not worth a MultiVertex: one 13-cycle vertex,
    // 13 + (1 + 1 + 1) x 3 = 22, on one worker: 6 x 22.
    let g = fused_group(leaves, steps, &[4]);
    assert_eq!(group_cycles(&t, &g).total, 6 * 22);
    // A cast makes the expression scalar (not vectorised); its half output is narrower
    // than the atomic store, so there is no MultiVertex: per-worker vertices of
    // 13 + (n / 2 + n % 2) x 1 (the cast is not a fused op; float input, 2 per vector).
    let steps = vec![
        step(
            Codelet::Unary {
                op: ipusim_ir::UnaryOp::Exp,
                dtype: DType::F32,
            },
            &[Leaf(0)],
        ),
        step(
            Codelet::Cast {
                from: DType::F32,
                to: DType::F16,
            },
            &[Step(0)],
        ),
    ];
    let leaves = vec![FusedLeaf {
        dtype: DType::F32,
        scalar: false,
    }];
    let g = fused_group(leaves, steps, &[100, 100, 101]);
    assert_eq!(group_cycles(&t, &g).total, 6 * (13 + 50 + 1));
    // Adam's first moment, m * beta1 + 0.1 * g, over 1200 float outputs: the ScaledAdd
    // is Add(a, Mul(b, Const)), two fused ops beside the multiply: 3 ops, so
    // 20 + (600 + 600 + 1) x 3 = 3623, rounded up to a multiple of 6 workers: 3624.
    let float = |scalar| FusedLeaf {
        dtype: DType::F32,
        scalar,
    };
    let steps = vec![
        step(
            Codelet::Binary {
                op: BinaryOp::Mul,
                dtype: DType::F32,
            },
            &[Leaf(0), Leaf(1)],
        ),
        FusedStep::new(
            Codelet::ScaledAdd { dtype: DType::F32 },
            vec![Step(0), Leaf(2)],
            0.1,
        ),
    ];
    assert_eq!(steps[1].scale_bits, 0.1f32.to_bits());
    let g = fused_group(
        vec![float(false), float(true), float(false)],
        steps,
        &[200; 6],
    );
    assert_eq!(group_cycles(&t, &g).total, 3624);
}

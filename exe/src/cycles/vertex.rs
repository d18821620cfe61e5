//! Cycle estimators of the codelets: one function per codelet, all in one place.
//!
//! A [`VertexGroup`] (one codelet instance on one tile, a PopLibs MultiVertex) costs
//! `supervisor + worker_contexts × max_w(worker_w)` cycles (ipu-hardware.md §3.4: every
//! worker issues once per six tile cycles, so even a lone worker's cycles are multiplied by
//! six; P1 `lib/popops/PerformanceEstimation.cpp` L627). A worker's cycles are the sum over
//! its vertices. Constants cite PopLibs (ipu-hardware.md §5.4 and the PopLibs sources named);
//! where PopLibs has no estimator for the same vertex the model is ours and says so.

use crate::codelets::{
    Access, AmpParams, BlockParams, Codelet, FusedLeaf, FusedStep, MapParams, ReduceOp,
    SoftmaxStage, VertexParams,
};
use crate::executable::{Vertex, VertexGroup};
use crate::target::Target;
use crate::workers;
use ipusim_ir::{Activation, BinaryOp, DType, UnaryOp};
use serde::{Deserialize, Serialize};

/// The cycles of one vertex group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupCycles {
    /// Supervisor cycles.
    pub supervisor: u64,
    /// Cycles of each worker context.
    pub workers: Vec<u64>,
    /// `supervisor + worker_contexts × max(workers)`.
    pub total: u64,
}

/// Cycles of a vertex group on `target`.
pub fn group_cycles(target: &Target, group: &VertexGroup) -> GroupCycles {
    let mut workers = vec![0u64; target.worker_contexts.max(1) as usize];
    let supervisor = costs(target, group, &mut workers);
    let total = total(supervisor, &workers);
    GroupCycles {
        supervisor,
        workers,
        total,
    }
}

/// [`group_cycles`]'s total alone, its workers' cycles kept on the stack (the estimate of a
/// large CNN's compute sets asks it for millions of groups).
pub fn group_total(target: &Target, group: &VertexGroup) -> u64 {
    let mut workers =
        smallvec::SmallVec::<[u64; 8]>::from_elem(0, target.worker_contexts.max(1) as usize);
    let supervisor = costs(target, group, &mut workers);
    total(supervisor, &workers)
}

/// Whether `group` is reduction worker vertices (`Reduce`, `ArgMax`) each on a worker of its
/// own, which share a tile's worker contexts with its other such groups in a compute set
/// ([`super::groups_cycles`]; PopLibs' reductions are worker vertices, not supervisor ones).
pub fn shares_workers(group: &VertexGroup) -> bool {
    matches!(
        group.codelet,
        Codelet::Reduce { .. } | Codelet::ArgMax { .. }
    ) && !group.vertices.iter().any(workers::is_split)
}

/// Adds the cycles of each worker of `group` into `workers` (one slot per worker context);
/// returns the group's supervisor cycles.
pub fn add_worker_cycles(target: &Target, group: &VertexGroup, workers: &mut [u64]) -> u64 {
    costs(target, group, workers)
}

/// `supervisor + workers × max(workers)`.
fn total(supervisor: u64, workers: &[u64]) -> u64 {
    let max = workers.iter().copied().max().unwrap_or(0);
    supervisor + workers.len() as u64 * max
}

/// The supervisor cycles of `group`, its workers' cycles added into `workers` (one slot per
/// worker context, zero on entry).
fn costs(target: &Target, group: &VertexGroup, workers: &mut [u64]) -> u64 {
    let nw = workers.len();
    match &group.codelet {
        Codelet::ScaledAdd { dtype } if all_aligned(group) => {
            let n: u64 = group
                .vertices
                .iter()
                .map(|v| v.operands.last().map_or(0, |o| o.len as u64))
                .sum();
            let (sup, w) = scaled_add_supervisor(target, *dtype, n);
            for (slot, c) in workers.iter_mut().zip(w) {
                *slot = c;
            }
            sup
        }
        Codelet::AmpMatMul {
            input, partials, ..
        } => {
            let Some(p) = group.vertices.iter().find_map(|v| match &v.params {
                VertexParams::Amp(p) => Some(p),
                _ => None,
            }) else {
                return 0;
            };
            for v in &group.vertices {
                if let VertexParams::Amp(p) = &v.params {
                    workers[worker_slot(v.worker, nw)] += amp_worker(target, *input, *partials, p);
                }
            }
            amp_supervisor(target, *input, *partials, p)
        }
        Codelet::Conv { .. } | Codelet::MaxPool { .. } => {
            // The group is costed as the one PopLibs vertex over the tile's block.
            match group.vertices.first().map(|v| &v.params) {
                Some(VertexParams::Window(p)) => {
                    super::window::window_group_cycles(target, &group.codelet, &p.params())
                }
                _ => 0,
            }
        }
        Codelet::ReduceAdd { partials, output } => {
            // The group is costed as the one PopLibs vertex over the tile's chunk.
            let (mut out_elems, mut depth) = (0u64, 0u32);
            for v in &group.vertices {
                if let VertexParams::Block(b) = &v.params {
                    out_elems += u64::from(b.groups) * u64::from(b.cols);
                    depth = depth.max(b.count);
                }
            }
            let out_elems = u32::try_from(out_elems).unwrap_or(u32::MAX);
            // PopLibs' default: `enableFastReduce` off.
            super::conv_reduce::reduce_add_vertex_cycles(
                target,
                (out_elems, depth),
                (*partials, *output),
                false,
            )
        }
        Codelet::Fused { program } => {
            let (leaves, steps) = (&program.leaves, &program.steps);
            let len = |v: &Vertex| v.operands.last().map_or(0, |o| o.len as u64);
            let n: u64 = group.vertices.iter().map(len).sum();
            let vw = leaves
                .first()
                .map_or(1, |l| target.vector_width(l.dtype))
                .max(1);
            if fused_multi_vertex(leaves, steps, n, vw) {
                let e = fused_vertex_cycles(leaves, steps, n, vw, true);
                workers.fill(e.div_ceil(nw as u64));
                return 0;
            }
            for v in &group.vertices {
                each_worker(target, &group.codelet, v, len(v), |w, len, _| {
                    workers[w] += fused_vertex_cycles(leaves, steps, len, vw, false);
                });
            }
            0
        }
        codelet => {
            for v in &group.vertices {
                let n = v.operands.last().map_or(0, |o| o.len as u64);
                each_worker(target, codelet, v, n, |w, len, params| {
                    workers[w] += vertex_worker(target, codelet, params, len);
                });
            }
            supervisor_overhead(codelet)
        }
    }
}

fn worker_slot(worker: u8, nw: usize) -> usize {
    (worker as usize).min(nw - 1)
}

/// Calls `f(worker slot, outputs, parameters)` for the work of vertex `v` of `n` outputs:
/// when it is split among the workers ([`workers::is_split`]) each worker's slice of its
/// outputs, or for a block vertex each worker's part of the block with its own parameters
/// ([`workers::block_slices`]); else all of it on its own worker.
fn each_worker(
    target: &Target,
    codelet: &Codelet,
    v: &Vertex,
    n: u64,
    mut f: impl FnMut(usize, u64, &VertexParams),
) {
    let nw = target.worker_contexts.max(1);
    if !workers::is_split(v) {
        f(worker_slot(v.worker, nw as usize), n, &v.params);
        return;
    }
    let grain = workers::split_grain(target, codelet);
    if let VertexParams::Block(b) = &v.params {
        for (w, part) in workers::block_slices_iter(b, grain, nw).enumerate() {
            f(w, part.output.1, &VertexParams::Block(part.params));
        }
        return;
    }
    for (w, (a, b)) in workers::worker_slices_iter(n, grain, nw).enumerate() {
        f(w, b - a, &v.params);
    }
}

fn all_aligned(group: &VertexGroup) -> bool {
    group.vertices.iter().all(|v| match &v.params {
        VertexParams::Map(m) => m.inputs.iter().all(|a| matches!(a, Access::Aligned)),
        _ => false,
    })
}

/// Supervisor cycles of the MultiVertex codelets other than ScaledAdd and AMP.
fn supervisor_overhead(codelet: &Codelet) -> u64 {
    // P1 lib/popops/PerformanceEstimation.cpp `basicOpSupervisorOverhead`: 11 cycles; the
    // unary MultiVertex adds 9 (P1 popopsCycleEstimators.cpp UnaryOp1D: `+ 9`); the cast
    // MultiVertex has 12 (P1 PerformanceEstimation.cpp getCast1DCycleEstimate).
    match codelet {
        Codelet::Unary { .. } => 11 + 9,
        Codelet::Cast { .. } => 12,
        _ => 11,
    }
}

/// PopLibs' ScaledAdd supervisor estimate for `n` elements (ipu-hardware.md §5.4, P1
/// `lib/popops/PerformanceEstimation.cpp` getScaledArithmeticSupervisorCycleEstimate, the
/// (half, half) / (float, float) path, tensor scale, not memory-constrained, not
/// interleaved). Returns the supervisor cycles and each worker's cycles. As in PopLibs, every
/// worker is charged `vectors / workers` vectors (the code adds `remainingVectors < 0` to an
/// unsigned count, so leftover whole vectors are never charged); the worker numbered
/// `remainingVectors` also handles the trailing elements.
pub fn scaled_add_supervisor(target: &Target, dtype: DType, n: u64) -> (u64, Vec<u64>) {
    let nw = target.worker_contexts.max(1) as u64;
    let vw = target.vector_width(dtype);
    let total_vectors = n / vw;
    let rem_elems = n % vw;
    let vectors_per_worker = total_vectors / nw;
    let rem_vectors = total_vectors % nw;
    // perTypeSupervisorOverhead 21 + basicOpSupervisorOverhead 11 + (rem ? 13 : 7) + 12,
    // + 6 for a tensor (non-constant) scale.
    let supervisor = 21 + 11 + if rem_elems == 0 { 7 } else { 13 } + 12 + 6;
    let inner = 3; // not memory constrained, data and scale of one type
    let workers = (0..nw)
        .map(|wid| {
            let mut c = 15;
            if vectors_per_worker != 0 {
                c += 6 + inner * (vectors_per_worker - 1);
            }
            c += 2;
            if wid == rem_vectors {
                c += 1;
                if rem_elems != 0 {
                    if dtype == DType::F32 {
                        c += 8;
                    } else {
                        c += 5;
                        if rem_elems >= 2 {
                            c += 7;
                            if rem_elems == 3 {
                                c += 6;
                            }
                        }
                    }
                }
            }
            c + 1
        })
        .collect();
    (supervisor, workers)
}

/// Inner-loop cost of an element-wise op: `(cycles per loop, natural vector, unroll)` as in
/// PopLibs' `OpPerformanceInfo` (P1 lib/popops/popopsCycleEstimators.hpp).
#[derive(Clone, Copy)]
struct LoopCost {
    cycles: u64,
    natural_vector: bool,
    unroll: u64,
}

const fn lc(cycles: u64, natural_vector: bool, unroll: u64) -> LoopCost {
    LoopCost {
        cycles,
        natural_vector,
        unroll,
    }
}

/// P1 popopsCycleEstimators.hpp `unaryOpPerfInfo`. GELU has no entry there (PopLibs runs it
/// as a NonLinearity): chosen as twice tanh. Relu on integers: chosen (compare + select).
fn unary_cost(op: UnaryOp, dtype: DType) -> LoopCost {
    let f16 = dtype == DType::F16;
    match (op, dtype.is_float()) {
        (UnaryOp::Abs, true) => lc(1, false, 0),
        (UnaryOp::Neg, true) => lc(2, false, if f16 { 4 } else { 2 }),
        (UnaryOp::Abs | UnaryOp::Neg, false) => lc(2, false, 0),
        (UnaryOp::Exp, _) => {
            if f16 {
                lc(4, false, 4)
            } else {
                lc(6, false, 2)
            }
        }
        (UnaryOp::Log, _) => {
            if f16 {
                lc(4, false, 4)
            } else {
                lc(12, false, 2)
            }
        }
        (UnaryOp::Sqrt, _) => {
            if f16 {
                lc(23, false, 4)
            } else {
                lc(10, false, 2)
            }
        }
        (UnaryOp::Relu, true) => lc(3, false, if f16 { 4 } else { 2 }),
        (UnaryOp::Relu, false) => lc(3, false, 0),
        (UnaryOp::Sigmoid, _) => {
            if f16 {
                lc(6, false, 4)
            } else {
                lc(12, false, 2)
            }
        }
        (UnaryOp::Tanh, _) => {
            if f16 {
                lc(4, false, 4)
            } else {
                lc(12, false, 2)
            }
        }
        (UnaryOp::Gelu, _) => {
            if f16 {
                lc(8, false, 4)
            } else {
                lc(24, false, 2)
            }
        }
    }
}

/// P1 popopsCycleEstimators.hpp `binaryOpPerfInfo` (u8 and Bool arithmetic use the INT
/// entries; Bool comparisons the BOOL entries).
fn binary_cost(op: BinaryOp, dtype: DType) -> LoopCost {
    let (f16, f32) = (dtype == DType::F16, dtype == DType::F32);
    match op {
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul if f16 || f32 => lc(1, true, 0),
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul => lc(7, false, 1),
        BinaryOp::Div if f16 => lc(21, false, 4),
        BinaryOp::Div if f32 => lc(10, false, 2),
        BinaryOp::Div => lc(277, false, 1),
        BinaryOp::Max | BinaryOp::Min if f16 => lc(4, false, 4),
        BinaryOp::Max | BinaryOp::Min if f32 => lc(4, false, 2),
        BinaryOp::Max | BinaryOp::Min => lc(7, false, 1),
        BinaryOp::Equal | BinaryOp::Greater | BinaryOp::Less => match dtype {
            DType::F16 => lc(9, false, 4),
            DType::F32 => lc(14, false, 4),
            DType::Bool => lc(if op == BinaryOp::Equal { 6 } else { 31 }, false, 4),
            _ => lc(22, false, 4),
        },
    }
}

/// Inner-loop cycles for `n` elements (P1 popopsCycleEstimators.cpp `unaryOpInnerLoopCycles`
/// and `binaryOpInnerLoopCycles`: `extra` is 4 for unary ops, 2 for the binary ops with an
/// assembly codelet, 5 for the other binary ops).
fn loop_cycles(target: &Target, dtype: DType, cost: LoopCost, n: u64, extra: u64) -> u64 {
    if !cost.natural_vector && cost.unroll > 0 {
        return n.div_ceil(cost.unroll) * cost.cycles;
    }
    let vw = if cost.natural_vector {
        target.vector_width(dtype)
    } else {
        1
    };
    n.div_ceil(vw) * (cost.cycles + extra)
}

/// Extra worker cycles for broadcast inputs: one pointer reload per row of the innermost
/// output dimension (our model of PopLibs' BroadcastVectorInner outer loop; chosen).
fn broadcast_extra(map: &MapParams, n: u64) -> u64 {
    map.inputs
        .iter()
        .map(|a| match a {
            Access::Aligned => 0,
            Access::Broadcast(b) => {
                let row = b.pattern.dims.last().copied().unwrap_or(1).max(1);
                if b.pattern.strides.iter().all(|&s| s == 0) {
                    4
                } else {
                    10 * (n.div_ceil(row) + 1)
                }
            }
        })
        .sum()
}

/// Whether PopLibs runs a generated map-expression codelet over `n` outputs on a tile as its
/// MultiVertex (`lib/popops/ExpressionGenerator.cpp` `generateAndExecuteMappedOperations`
/// and `executeCodelet`): the tile's output is one contiguous region (ours always is: a
/// tensor's slice on a tile is contiguous) of more than one vector, and the MultiVertex
/// exists — the expression is vectorised (no cast; inputs of half, float or bool), or it is
/// not and each output element is at least the 4-byte atomic store.
pub fn fused_multi_vertex(leaves: &[FusedLeaf], steps: &[FusedStep], n: u64, vw: u64) -> bool {
    let vectorised = steps
        .iter()
        .all(|s| !matches!(s.codelet, Codelet::Cast { .. }))
        && leaves
            .iter()
            .all(|l| matches!(l.dtype, DType::F16 | DType::F32 | DType::Bool));
    let out_bytes = steps.last().map_or(0, |s| s.dtype().size_bytes());
    n > vw && (vectorised || out_bytes >= 4)
}

/// PopLibs' estimate of one generated map-expression vertex over `n` outputs
/// (`lib/popops/ExpressionGenerator.cpp` `executeCodelet`): 20 for the MultiVertex, 13 for a
/// single-worker vertex, plus for every input `(m / vectorWidth + m % vectorWidth) ·
/// numFusedOps`, `m` the elements it reads (`n`, or 1 for a scalar) and `vectorWidth` that of
/// the first input's type; the MultiVertex figure is rounded up to a multiple of the worker
/// contexts by the caller. Casts are not fused ops (`traverseExpressionTree` counts the
/// unary, binary and ternary ops); a `ScaledAdd` step is two (`Add(a, Mul(b, Const))`).
pub fn fused_vertex_cycles(
    leaves: &[FusedLeaf],
    steps: &[FusedStep],
    n: u64,
    vw: u64,
    multi_vertex: bool,
) -> u64 {
    let ops: u64 = steps
        .iter()
        .map(|s| match s.codelet {
            Codelet::Cast { .. } => 0,
            // `a + scale·b`: a multiply by a constant and an add in the expression tree.
            Codelet::ScaledAdd { .. } => 2,
            _ => 1,
        })
        .sum();
    let reads: u64 = leaves
        .iter()
        .map(|l| {
            let m = if l.scalar { 1 } else { n };
            (m / vw + m % vw) * ops
        })
        .sum();
    (if multi_vertex { 20 } else { 13 }) + reads
}

/// Cycles of one vertex on its worker, for the codelets priced per vertex.
fn vertex_worker(target: &Target, codelet: &Codelet, params: &VertexParams, n: u64) -> u64 {
    let bcast = match params {
        VertexParams::Map(m) => broadcast_extra(m, n),
        _ => 0,
    };
    match codelet {
        // P1 PerformanceEstimation.cpp `_fillCycleEstimate`.
        Codelet::Fill { dtype } => match dtype.size_bytes() {
            1 => {
                if n < 64 {
                    28 + n / 4
                } else {
                    39 + n / 8
                }
            }
            2 => match n {
                0 | 1 => 15,
                2 => 21,
                _ => 26 + n / 4,
            },
            _ => {
                let w = target.vector_width(*dtype);
                16 + n / w + 6 + u64::from(n % w == 1) + 1
            }
        },
        // P1 UnaryOp1D: worker overhead 17 (33 for exp) + inner loop.
        Codelet::Unary { op, dtype } => {
            let base = if *op == UnaryOp::Exp { 33 } else { 17 };
            base + loop_cycles(target, *dtype, unary_cost(*op, *dtype), n, 4)
        }
        // P1 BinaryOp1D: worker overhead 29 (float) / 26 + inner loop.
        Codelet::Binary { op, dtype } => {
            let base = if *dtype == DType::F32 { 29 } else { 26 };
            let cost = binary_cost(*op, *dtype);
            let extra = if cost.natural_vector && dtype.is_float() {
                2
            } else {
                5
            };
            base + loop_cycles(target, *dtype, cost, n, extra) + bcast
        }
        // A broadcast ScaledAdd: a multiply and an add per natural vector, like BinaryOp1D
        // (our model; PopLibs' estimator covers same-shape operands only).
        Codelet::ScaledAdd { dtype } => {
            let base = if *dtype == DType::F32 { 29 } else { 26 };
            base + loop_cycles(target, *dtype, lc(2, true, 0), n, 2) + bcast
        }
        // P1 popopsCycleEstimators.cpp `selectCycles`: 6 + 5 per element, +5 per vertex.
        Codelet::Select { .. } => 5 + 6 + 5 * n + bcast,
        // P1 getCast1DCycleEstimate: per worker `castWorkerCycles + 18`.
        Codelet::Cast { from, to } => 18 + cast_worker(target, *from, *to, n),
        // NonLinearityGrad: not found; chosen from the forward op: one multiply plus the
        // derivative (Relu: a compare-select per natural vector).
        Codelet::ActivationGrad { activation, dtype } => {
            let per = match activation {
                Activation::Relu => 2,
                Activation::Sigmoid | Activation::Tanh => 4,
                Activation::Gelu => 16,
            };
            let unit = if *dtype == DType::F16 { 4 } else { 2 };
            26 + n.div_ceil(unit) * per + bcast
        }
        // encodeOneHot: not found; chosen: a fill of the row plus one compare-store per
        // element at one natural vector per cycle.
        Codelet::OneHot { dtype, depth } => {
            let rows = n.div_ceil((*depth).max(1) as u64) + 1;
            16 + n.div_ceil(target.vector_width(*dtype)) + 6 * rows
        }
        Codelet::Reduce { op, input, acc, .. } => match params {
            VertexParams::Block(b) => reduce_worker(target, *op, *input, *acc, b),
            _ => 0,
        },
        Codelet::ArgMax { .. } => match params {
            VertexParams::Block(b) => {
                // Our model: compare, select value, select index per element.
                20 + b.groups as u64 * (10 + b.cols as u64 * b.count as u64 * 3)
            }
            _ => 0,
        },
        Codelet::Softmax { log, .. } => match params {
            VertexParams::Block(b) => {
                // Our model, in f32: max (1), subtract (1), exp (3: P1 EXPONENT FLOAT {6, 2}),
                // sum (1), then divide (5: P1 DIVIDE FLOAT {10, 2}) or subtract (1) plus one
                // ln (6) per row.
                let per = if *log {
                    1 + 1 + 3 + 1 + 1
                } else {
                    1 + 1 + 3 + 1 + 5
                };
                let rows = b.groups as u64 * b.cols as u64;
                20 + rows * (30 + if *log { 6 } else { 0 } + b.count as u64 * per)
            }
            _ => 0,
        },
        Codelet::SoftmaxCrossEntropy { .. } => match params {
            VertexParams::Block(b) => {
                let rows = b.groups as u64 * b.cols as u64;
                20 + rows * (40 + 6 + b.count as u64 * (1 + 1 + 3 + 1))
            }
            _ => 0,
        },
        Codelet::SoftmaxStage { stage, .. } => match params {
            VertexParams::Block(b) => {
                // Our model, the one-vertex softmax's per-element costs above split by
                // stage (subtract 1, exp 3, divide 5, ln 6 per row), with our choice of 10
                // cycles of set-up per piece of row (the whole row's set-up is 30 there).
                let (per_piece, per_element) = match stage {
                    SoftmaxStage::Exp => (10, 1 + 3),
                    SoftmaxStage::Div => (10, 5),
                    SoftmaxStage::LogSub => (10 + 6, 1 + 1),
                    SoftmaxStage::Loss => (40 + 6, 0),
                };
                20 + b.groups as u64 * (per_piece + b.count as u64 * per_element)
            }
            _ => 0,
        },
        Codelet::AmpMatMul { .. }
        | Codelet::ReduceAdd { .. }
        | Codelet::Conv { .. }
        | Codelet::MaxPool { .. }
        | Codelet::Fused { .. } => 0,
    }
}

/// P1 PerformanceEstimation.cpp `castWorkerCycles` for the casts of the IR.
fn cast_worker(target: &Target, from: DType, to: DType, n: u64) -> u64 {
    let work = |atom: u64, fill: u64, per_loop: u64, rems: [u64; 3]| {
        let mut c = 0;
        let atoms = n / atom;
        if atoms > 0 {
            c += fill + (atoms - 1) * per_loop;
        }
        c + match n % atom {
            0 => 2,
            r => rems[(r - 1) as usize],
        }
    };
    if from == DType::U8 && to == DType::F16 {
        return 4 + work(4, 14, 9, [12, 14, 22]);
    }
    if from == DType::F16 && to == DType::U8 {
        return 4 + 3 + work(4, 19, 16, [14, 21, 29]);
    }
    let path = target.vector_bytes as u64;
    let from_load = path / from.size_bytes() as u64;
    let to_store = path / to.size_bytes() as u64;
    let aux = from.is_float() && to.is_float();
    let op_width = if aux {
        (from_load * 2).min(to_store).max(1)
    } else {
        1
    };
    let load = op_width / op_width.min(from_load).max(1);
    let store = op_width / op_width.min(to_store).max(1);
    let per_vector = load.max(store) + u64::from(!aux);
    let mut cycles = 19 + per_vector * (n / op_width);
    let rem = n % op_width;
    let bits = 64 - (op_width.max(1) - 1).leading_zeros() as u64;
    for i in 0..bits {
        cycles += 1;
        if rem & (1 << i) != 0 {
            cycles += 2;
        }
    }
    cycles
}

/// Reduce worker cycles (our model of PopLibs' reduction vertices, P1
/// lib/popops/reduction/CycleEstimationFunctions.cpp: an outer loop per output region and an
/// inner loop of one 64-bit load per cycle, ipu-hardware.md §1): per group 10 cycles; column
/// reductions cost `4 + count × c` per natural vector of columns, row reductions (`cols = 1`,
/// `width = 1`) `c` per natural vector of the row plus 6 for the horizontal add; `c` is 1,
/// or 2 when half data accumulates in float (convert + add).
fn reduce_worker(target: &Target, op: ReduceOp, input: DType, acc: DType, b: &BlockParams) -> u64 {
    let vw = target.vector_width(input);
    // PopLibs estimates SQUARE_ADD as ADD (lib/popops/reduction/CycleEstimationFunctions.cpp,
    // `isAccumOp`, `vectorisedOp`).
    let c = if matches!(op, ReduceOp::Sum | ReduceOp::SquareAdd) && input != acc {
        2
    } else {
        1
    };
    // Each outer stride after the first restarts the inner loop: PopLibs charges
    // `numOuterStrides × (3 + cyclesPerOp × (numPartials − 1))` per output vector
    // (lib/popops/reduction/CycleEstimationFunctions.cpp,
    // getCyclesEstimateForStridedReduce), so 3 cycles per further repeat.
    let restarts = 3 * u64::from(b.outer.max(1) - 1);
    let per_group = if b.width == 1 && b.cols == 1 {
        10 + b.rows().div_ceil(vw) * c + 6 + restarts
    } else {
        10 + (b.cols as u64).div_ceil(vw) * (4 + b.rows() * c + restarts)
    };
    let scale = if b.scale != 1.0 { b.cols as u64 } else { 0 };
    20 + b.groups as u64 * (per_group + scale)
}

/// Weight-load cycles of one AMP pass: the conv units' coefficients at
/// `amp_weight_load_bytes_per_cycle` (ipu-hardware.md §3.3, P1 poplinCycleEstimators.cpp
/// L558-571).
fn amp_weight_load(target: &Target, input: DType, partials: DType) -> u64 {
    let amp = target.amp(input, partials);
    (amp.output_channels as u64 * amp.input_channels as u64 * input.size_bytes() as u64)
        .div_ceil(target.amp_weight_load_bytes_per_cycle as u64)
}

fn amp_passes(p: &AmpParams) -> u64 {
    (p.k as u64).div_ceil(p.input_channels.max(1) as u64)
        * (p.n as u64).div_ceil(p.output_channels.max(1) as u64)
}

/// AMP supervisor cycles for a tile block (P1 lib/poplin/PerformanceEstimation.hpp
/// ConvPartial1x1Out outer loop: `50 + ... OG(19 + P(6 + L + inner))`): 50 + per pass
/// `19 + 6 + L`.
fn amp_supervisor(target: &Target, input: DType, partials: DType, p: &AmpParams) -> u64 {
    50 + amp_passes(p) * (19 + 6 + amp_weight_load(target, input, partials))
}

/// AMP worker cycles of one vertex: per pass, the PopLibs ConvPartial1x1Out worker
/// `(zeroing ? 37 : 38) + (n − 3)·4 − 7 = 4n + 18` for half activations and
/// `46 + (n − 3)·8 = 8n + 22` for float (ipu-hardware.md §5.4, P1 PerformanceEstimation.hpp
/// L397-491), with the target's worker cycles per position for the per-row term. Results
/// leave the accumulators in the output type at the same cost either way (`f16v2gina`
/// reads them as half, ipu-hardware.md §3.1), so the output type costs nothing extra.
fn amp_worker(target: &Target, input: DType, partials: DType, p: &AmpParams) -> u64 {
    if p.rows == 0 {
        return 0;
    }
    let amp = target.amp(input, partials);
    let overhead = if input == DType::F16 { 18 } else { 22 };
    let per_pass = overhead + amp.worker_cycles_per_position as u64 * p.rows as u64;
    amp_passes(p) * per_pass
}

/// Estimated cycles of an AMP block of `m × k × n` split over the tile's workers, as the
/// planner sees it (the same functions as [`group_cycles`]).
pub fn amp_block_cycles(
    target: &Target,
    input: DType,
    partials: DType,
    m: u64,
    k: u64,
    n: u64,
) -> u64 {
    let amp = target.amp(input, partials);
    let nw = target.worker_contexts.max(1) as u64;
    let p = AmpParams {
        a_layout: crate::codelets::MatrixLayout::RowMajor,
        b_layout: crate::codelets::MatrixLayout::RowMajor,
        m: m as u32,
        k: k as u32,
        n: n as u32,
        row_begin: 0,
        rows: m.div_ceil(nw) as u32,
        input_channels: amp.input_channels,
        output_channels: amp.output_channels,
    };
    amp_supervisor(target, input, partials, &p) + nw * amp_worker(target, input, partials, &p)
}

/// Cycles of a reduce vertex group of `count` partial rows of `width` columns split over the
/// workers by columns, as the planner sees it.
pub fn reduce_block_cycles(
    target: &Target,
    input: DType,
    acc: DType,
    count: u64,
    width: u64,
) -> u64 {
    let nw = target.worker_contexts.max(1) as u64;
    let b = BlockParams::new(
        1,
        count as u32,
        width as u32,
        (0, width.div_ceil(nw) as u32),
    );
    11 + nw * reduce_worker(target, ReduceOp::Sum, input, acc, &b)
}

/// Cycles of an element-wise ScaledAdd of `n` elements on one tile (the planner's reference
/// element-wise cost).
pub fn elementwise_cycles(target: &Target, dtype: DType, n: u64) -> u64 {
    let dtype = if dtype.is_float() { dtype } else { DType::F32 };
    let (sup, w) = scaled_add_supervisor(target, dtype, n);
    sup + target.worker_contexts.max(1) as u64 * w.into_iter().max().unwrap_or(0)
}

#[cfg(test)]
#[path = "vertex_tests.rs"]
mod tests;

//! How a vertex's work is split among a tile's worker contexts.
//!
//! An element-wise vertex whose `worker` is [`ALL_WORKERS`] is its group's whole work on
//! the tile, as PopLibs' element-wise MultiVertex is one vertex per tile whose workers each
//! take a part of its region (P1 `lib/popops/codelets/*MultiVertex*`: the region split in
//! whole vectors): worker `w` computes outputs `[a, b)`, the `w`-th slice of
//! [`worker_slices`]`(n, grain, workers)`, `n` the vertex's output elements and `grain`
//! [`split_grain`]. The estimator costs each worker's slice, the simulator runs each
//! slice on its worker (with its random stream), and both split exactly as the compiler
//! would have split the vertex into one vertex per worker. A split window vertex (`Conv`,
//! `MaxPool`) holds all its block's units, and worker `w` runs the `w`-th slice of
//! [`worker_slices`]`(units, 1, workers)` of them (its group is costed as one PopLibs
//! vertex over the block either way). A split block vertex (`Reduce`, `ReduceAdd`,
//! `ArgMax`) holds its whole block, and worker `w` takes the `w`-th of its
//! [`block_slices`]: whole groups, or with one group whole vectors of its columns.

use crate::codelets::{BlockParams, Codelet, VertexParams};
use crate::executable::Vertex;
use crate::target::Target;

/// The `worker` of a vertex split among all the worker contexts by the vertex itself.
pub const ALL_WORKERS: u8 = u8::MAX;

/// Whether vertex `v` is split among the worker contexts ([`ALL_WORKERS`]).
pub fn is_split(v: &Vertex) -> bool {
    v.worker == ALL_WORKERS
}

/// Whether a vertex of `codelet` with `params` may be split among the workers: an
/// element-wise vertex (its outputs independent of one another) other than `OneHot`, whose
/// outputs are indexed by position, or a window vertex (`Conv`, `MaxPool`: PopLibs'
/// supervisor vertices, their workers each taking a part of the block's units).
pub fn can_split(codelet: &Codelet, params: &VertexParams) -> bool {
    match params {
        VertexParams::Map(_) => {
            codelet.map_output_dtype().is_some() && !matches!(codelet, Codelet::OneHot { .. })
        }
        VertexParams::Fill { .. } => matches!(codelet, Codelet::Fill { .. }),
        VertexParams::Window(_) => {
            matches!(codelet, Codelet::Conv { .. } | Codelet::MaxPool { .. })
        }
        VertexParams::Block(p) => {
            p.col_begin == 0
                && p.cols == p.width
                && matches!(
                    codelet,
                    Codelet::Reduce { .. } | Codelet::ReduceAdd { .. } | Codelet::ArgMax { .. }
                )
        }
        _ => false,
    }
}

/// Whether vertex `v` of `codelet` runs on a tile of `workers` worker contexts: on one of
/// them, or split among them all where the codelet allows it ([`can_split`]).
pub fn may_run_on(codelet: &Codelet, v: &Vertex, workers: u32) -> bool {
    u32::from(v.worker) < workers || (is_split(v) && can_split(codelet, &v.params))
}

/// The elements a split vertex of `codelet` gives its workers in whole multiples of: the
/// vector width of its output type on `target` for an element-wise codelet, of its input
/// type for a block codelet's columns, else 1.
pub fn split_grain(target: &Target, codelet: &Codelet) -> u64 {
    let dtype = match *codelet {
        Codelet::Reduce { input, .. } => Some(input),
        Codelet::ReduceAdd { partials, .. } => Some(partials),
        Codelet::ArgMax { dtype } => Some(dtype),
        _ => codelet.map_output_dtype(),
    };
    dtype.map_or(1, |d| target.vector_width(d)).max(1)
}

/// How many worker parts vertex `v` of `codelet` runs as on `target`: 1 for a vertex on
/// one worker; for a split vertex ([`is_split`]) as many as its workers take a non-empty
/// part of (what [`worker_slices`] or [`block_slices`] give, counted without building them).
pub fn worker_parts(target: &Target, codelet: &Codelet, v: &Vertex) -> u64 {
    if !is_split(v) {
        return 1;
    }
    let nw = u64::from(target.worker_contexts.max(1));
    let grain = split_grain(target, codelet);
    let pieces = match &v.params {
        VertexParams::Window(wv) => u64::from(wv.units.1.saturating_sub(wv.units.0)),
        VertexParams::Block(b) if b.groups > 1 => u64::from(b.groups),
        VertexParams::Block(b) => u64::from(b.width).div_ceil(grain),
        _ => v
            .operands
            .last()
            .map_or(0, |o| u64::from(o.len))
            .div_ceil(grain),
    };
    pieces.min(nw)
}

/// One worker's part of a block vertex ([`block_slices`]).
#[derive(Clone, Debug, PartialEq)]
pub struct BlockSlice {
    /// The part's block parameters.
    pub params: BlockParams,
    /// Its input elements, `(first, count)` from the vertex's input's first.
    pub input: (u64, u64),
    /// Its output elements, `(first, count)` from the vertex's output's first.
    pub output: (u64, u64),
}

/// The workers' parts of a block vertex over all of the columns of `p`'s block (its
/// outputs `groups × width`): whole groups, [`worker_slices`]`(groups, 1, workers)`, when
/// there are several; with one group its columns in whole vectors of `grain` elements,
/// [`worker_slices`]`(width, grain, workers)`, each reading the whole block. A part keeps
/// the block's scale and repeats (`outer`, `outer_stride`). This is how the compiler cuts a
/// reduction's work among the workers (ours, chosen: PopLibs' reduction planner splits its
/// outputs among the workers too, P1 lib/popops/reduction/ `splitOutputRegionsForWorkers`).
pub fn block_slices(p: &BlockParams, grain: u64, workers: u32) -> Vec<BlockSlice> {
    block_slices_iter(p, grain, workers).collect()
}

/// [`block_slices`] one part at a time, without collecting them (the cycle estimate walks
/// the parts of millions of vertices).
pub fn block_slices_iter(
    p: &BlockParams,
    grain: u64,
    workers: u32,
) -> impl Iterator<Item = BlockSlice> + '_ {
    let (groups, count, width) = (u64::from(p.groups), u64::from(p.count), u64::from(p.width));
    let repeats = u64::from(p.outer.saturating_sub(1)) * u64::from(p.outer_stride);
    let part = move |groups: u64, (a, b): (u64, u64)| BlockParams {
        groups: groups as u32,
        col_begin: a as u32,
        cols: (b - a) as u32,
        ..p.clone()
    };
    let by_groups = groups > 1;
    let (n, grain) = if by_groups {
        (groups, 1)
    } else {
        (width, grain)
    };
    worker_slices_iter(n, grain, workers).map(move |(a, b)| {
        if by_groups {
            BlockSlice {
                params: part(b - a, (0, width)),
                input: (a * count * width, repeats + (b - a) * count * width),
                output: (a * width, (b - a) * width),
            }
        } else {
            BlockSlice {
                params: part(groups, (a, b)),
                input: (0, repeats + groups * count * width),
                output: (a, b - a),
            }
        }
    })
}

/// Splits `n` elements into at most `workers` contiguous slices of whole vectors of `vw`
/// elements, the first workers taking one more vector when they do not divide evenly.
pub fn worker_slices(n: u64, vw: u64, workers: u32) -> Vec<(u64, u64)> {
    worker_slices_iter(n, vw, workers).collect()
}

/// [`worker_slices`] one slice at a time, without collecting them.
pub fn worker_slices_iter(n: u64, vw: u64, workers: u32) -> impl Iterator<Item = (u64, u64)> {
    let vw = vw.max(1);
    let vectors = n.div_ceil(vw);
    let w = workers.max(1) as u64;
    let per = vectors / w;
    let extra = vectors % w;
    let mut at = 0;
    (0..w).filter_map(move |i| {
        let start = at;
        let end = ((start / vw + per + u64::from(i < extra)) * vw).min(n);
        at = end;
        (end > start).then_some((start, end))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_are_whole_vectors_first_workers_longer() {
        // 8 vectors over 6 workers: the first two take two.
        assert_eq!(
            worker_slices(30, 4, 6),
            vec![(0, 8), (8, 16), (16, 20), (20, 24), (24, 28), (28, 30)]
        );
        assert_eq!(worker_slices(3, 4, 6), vec![(0, 3)]);
        assert_eq!(worker_slices(0, 4, 6), vec![]);
    }

    #[test]
    fn a_block_splits_by_groups_or_by_whole_vectors_of_columns() {
        // 8 groups of 3 rows of 5 over 6 workers: the first two take two groups, and a
        // part's input starts at its first group's first row.
        let p = BlockParams::new(8, 3, 5, (0, 5));
        let parts = block_slices(&p, 4, 6);
        assert_eq!(parts.len(), 6);
        assert_eq!(parts[1].params, BlockParams::new(2, 3, 5, (0, 5)));
        assert_eq!(parts[1].input, (2 * 15, 2 * 15));
        assert_eq!(parts[1].output, (10, 10));
        assert_eq!(parts[5].output, (35, 5));
        // One group of 30 columns, repeated twice 100 elements apart: whole vectors of 4
        // columns, each part reading the whole block.
        let p = BlockParams {
            outer: 2,
            outer_stride: 100,
            scale: 0.5,
            ..BlockParams::new(1, 3, 30, (0, 30))
        };
        let parts = block_slices(&p, 4, 6);
        let cols: Vec<(u32, u32)> = parts
            .iter()
            .map(|s| (s.params.col_begin, s.params.cols))
            .collect();
        assert_eq!(
            cols,
            vec![(0, 8), (8, 8), (16, 4), (20, 4), (24, 4), (28, 2)]
        );
        assert!(parts.iter().all(|s| s.input == (0, 100 + 90)));
        assert!(parts
            .iter()
            .all(|s| s.params.outer == 2 && s.params.scale == 0.5));
        assert_eq!(parts[2].output, (16, 4));
    }

    #[test]
    fn a_split_vertex_counts_the_parts_its_workers_take() {
        use crate::executable::{Operand, Operands};
        use crate::ids::TensorId;
        let t = Target::mk2();
        let reduce = Codelet::Reduce {
            op: crate::codelets::ReduceOp::Sum,
            input: ipusim_ir::DType::F16,
            acc: ipusim_ir::DType::F32,
            output: ipusim_ir::DType::F16,
        };
        let vertex = |worker: u8, p: BlockParams| Vertex {
            worker,
            operands: Operands::from_iter([Operand {
                tensor: TensorId(0),
                offset: 0,
                len: p.groups * p.cols,
            }]),
            params: VertexParams::Block(p),
        };
        for p in [
            BlockParams::new(8, 3, 5, (0, 5)),
            BlockParams::new(2, 3, 5, (0, 5)),
            BlockParams::new(1, 3, 30, (0, 30)),
            BlockParams::new(1, 3, 6, (0, 6)),
        ] {
            let parts = block_slices(&p, split_grain(&t, &reduce), t.worker_contexts);
            let counted = worker_parts(&t, &reduce, &vertex(ALL_WORKERS, p.clone()));
            assert_eq!(counted, parts.len() as u64, "{p:?}");
            assert_eq!(worker_parts(&t, &reduce, &vertex(2, p)), 1);
        }
    }
}

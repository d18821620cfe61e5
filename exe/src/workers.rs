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
//! vertex over the block either way).

use crate::codelets::{Codelet, VertexParams};
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
        VertexParams::Window(_) => {
            matches!(codelet, Codelet::Conv { .. } | Codelet::MaxPool { .. })
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
/// vector width of its output type on `target` (1 when the codelet is not element-wise).
pub fn split_grain(target: &Target, codelet: &Codelet) -> u64 {
    codelet
        .map_output_dtype()
        .map_or(1, |d| target.vector_width(d))
        .max(1)
}

/// Splits `n` elements into at most `workers` contiguous slices of whole vectors of `vw`
/// elements, the first workers taking one more vector when they do not divide evenly.
pub fn worker_slices(n: u64, vw: u64, workers: u32) -> Vec<(u64, u64)> {
    let vectors = n.div_ceil(vw.max(1));
    let w = workers.max(1) as u64;
    let per = vectors / w;
    let extra = vectors % w;
    let mut out = Vec::new();
    let mut at = 0;
    for i in 0..w {
        let end = ((at / vw.max(1) + per + u64::from(i < extra)) * vw.max(1)).min(n);
        if end > at {
            out.push((at, end));
        }
        at = end;
    }
    out
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
}

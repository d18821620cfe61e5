//! Block vertices (`Reduce`, `ArgMax`, `ReduceAdd`): a `groups × count × width` block of a
//! tile's memory summed (or maxed) over its `count` rows, optionally repeated at an outer
//! stride, on one worker or split among the workers. The reduction passes and the staged
//! sums of split reductions build their vertices here.

use crate::codelets::{BlockParams, VertexParams};
use crate::executable::{Operand, Operands, TensorId, Vertex};
use crate::lower::core::Lowerer;
use ipusim_exe::workers::ALL_WORKERS;

/// The block vertex (`Reduce`, `ArgMax`, `ReduceAdd`) of a block `groups × count × width`
/// read at slice position `in_pos` of `input`, repeated `outer.0` times `outer.1` elements
/// apart (every repeat summed into the same outputs), and written at `out_pos` of `out`: one
/// vertex its workers split among them, by groups (several groups) or by columns in whole
/// vectors (one group), as [`ipusim_exe::workers::block_slices`] cuts it.
pub(crate) fn block_vertices(
    lw: &Lowerer,
    (input, in_pos): (TensorId, u64),
    out: (TensorId, u64),
    (groups, count, width): (u64, u64, u64),
    outer: (u64, u64),
    scale: f64,
) -> Vec<Vertex> {
    vec![block_vertex(
        lw,
        ALL_WORKERS,
        (input, in_pos, block_len((groups, count, width), outer)),
        out,
        (groups, count, width),
        outer,
        (0, width),
        scale,
    )]
}

/// The elements a block vertex reads: a `groups × count × width` block repeated `outer.0`
/// times `outer.1` elements apart, the gaps between the repeats included.
pub(crate) fn block_len((groups, count, width): (u64, u64, u64), outer: (u64, u64)) -> u64 {
    outer.0.saturating_sub(1) * outer.1 + groups * count * width
}

/// A block vertex (`Reduce`, `ArgMax`) on `worker`: it reads `len` elements of `input` from
/// slice position `pos` holding a `groups × count × width` block (repeated `outer.0` times
/// `outer.1` elements apart), handles columns `[a, b)`, and writes `groups × (b − a)`
/// outputs from slice position `out_pos` of `out`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn block_vertex(
    lw: &Lowerer,
    worker: u8,
    (input, pos, len): (TensorId, u64, u64),
    (out, out_pos): (TensorId, u64),
    (groups, count, width): (u64, u64, u64),
    (outer, outer_stride): (u64, u64),
    (a, b): (u64, u64),
    scale: f64,
) -> Vertex {
    let ies = lw.tensor(input).dtype.size_bytes() as u64;
    let oes = lw.tensor(out).dtype.size_bytes() as u64;
    Vertex {
        worker,
        operands: Operands::from_iter([
            Operand {
                tensor: input,
                offset: (pos * ies) as u32,
                len: len as u32,
            },
            Operand {
                tensor: out,
                offset: (out_pos * oes) as u32,
                len: (groups * (b - a)) as u32,
            },
        ]),
        params: VertexParams::Block(BlockParams {
            scale,
            outer: outer as u32,
            outer_stride: if outer > 1 { outer_stride as u32 } else { 0 },
            ..BlockParams::new(
                groups as u32,
                count as u32,
                width as u32,
                (a as u32, (b - a) as u32),
            )
        }),
    }
}

//! Vertex state: the bytes of tile memory a vertex's fields take, as PopLibs' Mk2 vertices
//! lay them out where their assembly gives the offsets, and a chosen 4 bytes a field where
//! it does not. The memory plan charges it per vertex group (`compiler::memory`).

use crate::codelets::{Access, VertexParams};

/// Vertex state of one `Reduce` vertex. Our block vertex (`groups` groups of `count` rows of
/// `width`, columns `cols` of them reduced, the block repeated `outer` times into the same
/// outputs) is PopLibs' `STRIDED_REDUCE` specialisation of `Reduce`/`ScaledReduce`
/// (ReduceCodelets.hpp, ReductionVertexDefs.hpp): `numOutputs = cols`, `numPartials =
/// count`, `partialsWidth = width`, `numOuterStrides = outer`, `outerStride = outer_stride`
/// (our several groups in one vertex are our choice: PopLibs would give each its own
/// strided reduce; the state is counted once). Its Mk2 state
/// (lib/popops/codelets/asm/ReductionSpecial3.S, the `VECTOR_AVAIL_SCALED_PTR32` layout) is
/// the `out` and `partials` scaled pointers (2 bytes each), the `countsAndStrides` pointer
/// (4) and the scale's scaled pointer (2), 12 bytes in 4-byte-aligned state, plus the five
/// 16-bit counts and strides it points at (10).
pub const REDUCE_VERTEX_STATE_BYTES: u64 = 12 + 10;

/// Bytes of vertex state of one vertex.
///
/// - Element-wise vertices hold PopLibs' 1D layout on Mk2 (lib/popops/codelets/asm/
///   binaryOps1D.S: `in1`, `in2`, `out` 4-byte pointers at offsets 0, 4, 8 and the count
///   at 12; unaryOps1D.S: `in`, `out`, count at 0, 4, 8): a 4-byte pointer per operand and a
///   4-byte count, with `ScaledAdd`'s scale (a 4-byte field) when it is not 1. A broadcast
///   input's index description (`2 + 2 × dims` words) is ours, chosen: PopLibs' broadcast
///   vertices hold a block length and count of their own.
/// - `Fill` holds its output pointer, count and value (PopLibs' `Fill`: `out`, `in`).
/// - The partials, window and block vertices (`Amp`, `Window`, `Block`) hold a header, a
///   pointer and a length per operand and their scalar parameters, 4 bytes a field (their
///   exact PopLibs layouts are not modelled, chosen; `Reduce`'s is
///   [`REDUCE_VERTEX_STATE_BYTES`]).
pub fn vertex_state_bytes(operands: usize, params: &VertexParams) -> u32 {
    let pointers = 4 * operands as u32;
    match params {
        VertexParams::Fill { .. } => pointers + 4 + 4,
        VertexParams::Map(m) => {
            let broadcast: usize = m
                .inputs
                .iter()
                .map(|a| match a {
                    Access::Aligned => 0,
                    Access::Broadcast(b) => 2 + 2 * b.pattern.dims.len(),
                })
                .sum();
            let scale = if m.scale != 1.0 { 1 } else { 0 };
            pointers + 4 + 4 * (broadcast + scale) as u32
        }
        VertexParams::Amp(_) => 8 + 2 * pointers + 4 * 9,
        VertexParams::Block(_) => 8 + 2 * pointers + 4 * 6,
        // Geometry (20 words) and the block and vertex ranges (13).
        VertexParams::Window(_) => 8 + 2 * pointers + 4 * 33,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codelets::MapParams;

    fn map(inputs: usize, scale: f64) -> VertexParams {
        VertexParams::Map(MapParams {
            out_begin: None,
            inputs: (0..inputs).map(|_| Access::Aligned).collect(),
            scale,
        })
    }

    #[test]
    fn element_wise_state_is_popops_1d_layout() {
        // binaryOps1D.S: in1, in2, out pointers at 0, 4, 8 and the count at 12.
        assert_eq!(vertex_state_bytes(3, &map(2, 1.0)), 12 + 4);
        // unaryOps1D.S: in, out at 0, 4 and the count at 8.
        assert_eq!(vertex_state_bytes(2, &map(1, 1.0)), 8 + 4);
        // A ScaledAdd's scale is one more field.
        assert_eq!(vertex_state_bytes(3, &map(2, 0.5)), 20);
        assert_eq!(
            vertex_state_bytes(1, &VertexParams::Fill { value: 0.0 }),
            12
        );
    }
}

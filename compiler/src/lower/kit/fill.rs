//! `Fill` vertices: constant values written over a tensor's slices (zeroed accumulators, a
//! `Splat` assigned to a variable).

use crate::codelets::{Codelet, VertexParams};
use crate::executable::VertexGroup;
use crate::executable::{Operand, Operands, TensorId, TileWork, Vertex};
use crate::lower::core::Lowerer;
use crate::lower::kit::mapping::worker_slices;
use ipusim_ir::DType;
use std::collections::BTreeMap;

/// `Fill` vertices writing `value` over every element of each tensor, grouped by tile.
pub(crate) fn fill_work(lw: &Lowerer, fills: &[(TensorId, f64)]) -> Vec<TileWork> {
    let mut by_tile: BTreeMap<u32, TileWork> = BTreeMap::new();
    for &(t, value) in fills {
        let tensor = &lw.tensor(t);
        let dtype: DType = tensor.dtype;
        let es = dtype.size_bytes() as u64;
        for slice in &tensor.slices {
            let n = slice.num_elements();
            let vertices = worker_slices(
                n,
                lw.target().vector_width(dtype),
                lw.target().worker_contexts,
            )
            .into_iter()
            .enumerate()
            .map(|(w, (a, b))| Vertex {
                worker: w as u8,
                operands: Operands::from_iter([Operand {
                    tensor: t,
                    offset: (a * es) as u32,
                    len: (b - a) as u32,
                }]),
                params: VertexParams::Fill { value },
            })
            .collect();
            by_tile
                .entry(slice.tile.tile())
                .or_insert_with(|| TileWork {
                    tile: slice.tile,
                    groups: Vec::new(),
                    cycles: 0,
                })
                .groups
                .push(VertexGroup {
                    codelet: Codelet::Fill { dtype },
                    vertices,
                });
        }
    }
    by_tile.into_values().collect()
}

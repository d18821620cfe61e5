//! `Fill` vertices: constant values written over a tensor's slices (zeroed accumulators, a
//! `Splat` assigned to a variable), a vertex per slice that its workers split.

use crate::codelets::{Codelet, VertexParams};
use crate::executable::VertexGroup;
use crate::executable::{Operand, Operands, TensorId, TileWork, Vertex};
use crate::lower::core::Lowerer;
use ipusim_exe::workers::ALL_WORKERS;
use ipusim_ir::DType;
use std::collections::BTreeMap;

/// `Fill` vertices writing `value` over every element of each tensor, grouped by tile.
pub(crate) fn fill_work(lw: &Lowerer, fills: &[(TensorId, f64)]) -> Vec<TileWork> {
    let mut by_tile: BTreeMap<u32, TileWork> = BTreeMap::new();
    for &(t, value) in fills {
        let tensor = &lw.tensor(t);
        let dtype: DType = tensor.dtype;
        for slice in &tensor.slices {
            let n = slice.num_elements();
            // One vertex its workers split, in whole vectors (`workers::split_grain`); none
            // for an empty slice.
            let vertices = (n > 0)
                .then(|| Vertex {
                    worker: ALL_WORKERS,
                    operands: Operands::from_iter([Operand {
                        tensor: t,
                        offset: 0,
                        len: n as u32,
                    }]),
                    params: VertexParams::Fill { value },
                })
                .into_iter()
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

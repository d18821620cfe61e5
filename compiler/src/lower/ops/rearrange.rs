//! `Broadcast`, `Slice`, `Pad`, `Concat` and general `Transpose`: element moves of
//! [`crate::lower::kit::permute`].

use crate::error::CompileError;
use crate::lower::core::{is_swap_last, Lowerer, Value};
use crate::lower::kit::permute::{self, emit, strides, Map};
use ipusim_ir::{NodeId, Op};

/// Lowers a data-movement node: a `Reshape` shares its input's tensor; a `Transpose` of the
/// last two dimensions is folded into its consumers (a matmul reads it transposed) until one
/// needs it materialised; everything else moves elements.
pub(crate) fn lower(lw: &mut Lowerer, id: NodeId) -> Result<(), CompileError> {
    let node = lw.graph().node(id);
    match &node.op {
        Op::Reshape { .. } => return permute::alias(lw, id, node.inputs[0]),
        Op::Broadcast { .. } if super::folded_broadcast(lw.graph(), id).is_some() => {
            return Ok(());
        }
        op if is_swap_last(op) => {
            let input = permute::row_major_view(lw, node.inputs[0])?;
            lw.set_view(
                id,
                Value {
                    tensor: input.tensor,
                    transposed: !input.transposed,
                    group: 1,
                },
            );
            return Ok(());
        }
        _ => {}
    }
    let name = node.name.clone();
    let dims_of = |n: NodeId| -> Vec<u64> {
        lw.graph()
            .node(n)
            .ty
            .shape
            .dims()
            .iter()
            .map(|&d| d as u64)
            .collect()
    };
    let in0 = dims_of(node.inputs[0]);
    let map = match &node.op {
        Op::Transpose { perm } => Map::Permute {
            perm: perm.clone(),
            in_strides: strides(&in0),
        },
        Op::Slice { begin, .. } => Map::Slice {
            begin: begin.iter().map(|&b| b as u64).collect(),
            in_strides: strides(&in0),
        },
        Op::Pad { before, .. } => Map::Pad {
            before: before.iter().map(|&b| b as u64).collect(),
            in_strides: strides(&in0),
            in_dims: in0,
        },
        Op::Concat { axis } => {
            let mut offsets = vec![0u64];
            let mut in_strides = Vec::new();
            for &i in &node.inputs {
                let d = dims_of(i);
                offsets.push(offsets.last().copied().unwrap_or(0) + d[*axis]);
                in_strides.push(strides(&d));
            }
            Map::Concat {
                axis: *axis,
                offsets,
                in_strides,
            }
        }
        Op::Broadcast { .. } => Map::Broadcast {
            in_strides: strides(&in0),
            in_dims: in0,
        },
        _ => return Err(lw.unsupported(id, "not a data-movement op")),
    };
    let mut inputs = Vec::new();
    for &i in &node.inputs.clone() {
        inputs.push(permute::materialized(lw, i)?);
    }
    let shape = node.ty.shape.clone();
    let out = emit(lw, id, &name, &inputs, &shape, &map);
    lw.set_value(id, out);
    Ok(())
}

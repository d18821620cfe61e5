//! `ReplicatedReduceScatter` and `ReplicatedAllGather`: a cross-replica collective from the
//! input's row-major tensor into a new tensor (`Program::CrossReplica` with a `dst`, after an
//! external sync), whose elements the simulator's replicas exchange over the links.

use crate::error::CompileError;
use crate::executable::{CollectiveOp, TensorKind};
use crate::lower::core::Lowerer;
use crate::lower::kit::permute;
use ipusim_ir::{NodeId, Op};

/// Lowers a collective node.
pub(crate) fn lower(lw: &mut Lowerer, id: NodeId) -> Result<(), CompileError> {
    let node = lw.graph().node(id);
    let op = match node.op {
        Op::ReplicatedReduceScatter { replicas } => {
            check_replicas(lw, id, replicas)?;
            CollectiveOp::ReduceScatterMean
        }
        Op::ReplicatedAllGather { replicas, .. } => {
            check_replicas(lw, id, replicas)?;
            CollectiveOp::AllGather
        }
        _ => return Err(lw.unsupported(id, "not a cross-replica collective")),
    };
    let src = permute::materialized(lw, node.inputs[0])?;
    let ty = node.ty.clone();
    let mapping = lw.fresh_mapping(ty.num_elements() as u64, ty.dtype);
    let dst = lw.new_tensor(
        node.name.clone(),
        Some(id),
        TensorKind::Activation,
        ty.dtype,
        ty.shape,
        mapping,
    );
    lw.cross_replica_to(id, op, src, dst);
    lw.set_value(id, dst);
    Ok(())
}

/// A collective made for `replicas` replicas compiles only for that many.
fn check_replicas(lw: &Lowerer, id: NodeId, replicas: u32) -> Result<(), CompileError> {
    if replicas == lw.replicas() {
        return Ok(());
    }
    Err(lw.unsupported(
        id,
        format!(
            "made for {replicas} replicas, but the program is compiled for {}",
            lw.replicas()
        ),
    ))
}

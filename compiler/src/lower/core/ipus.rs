//! The lowering context's multi-IPU side ([`Lowerer`]'s methods for systems of IPUs): the
//! IPU and pipeline segment a node lowers on, the copies of values onto another IPU (an
//! external sync and an `IpuCopy`), the replicas' all-reduce, the remote buffers of
//! offloaded optimizer state, and the rebuild of the step list after a pipeline reorders
//! the program.

use super::{Lowerer, Part};
use crate::executable::{
    ByteCopy, CollectiveOp, CopyDst, CopyDsts, Exchange, ExchangeId, Program, ProgramStep,
    StepKind, TensorId, TensorKind,
};
use crate::lower::kit::mapping::Mapping;
use ipusim_exe::system::{SyncScope, TileId};
use ipusim_ir::{DType, NodeId, Shape};
use std::collections::HashMap;

impl Lowerer<'_> {
    /// Lowers what follows on the IPU node `id` is placed on (and, when the program is
    /// pipelined, as part of its segment).
    pub fn set_ipu_of(&mut self, id: NodeId) {
        self.ipu = self.placement.ipu_of(id);
        self.segment = self.segment_of(id);
    }

    /// Gives every node its pipeline segment (indexed by node id): the body's program nodes
    /// are then tagged with their [`Part`].
    pub fn set_segments(&mut self, segments: Vec<u32>) {
        self.node_segment = segments;
    }

    /// Lowers what follows as part of pipeline segment `segment`.
    pub fn set_segment(&mut self, segment: u32) {
        self.segment = segment;
    }

    /// The pipeline segment of node `id` (0 when not pipelined).
    pub fn segment_of(&self, id: NodeId) -> u32 {
        self.node_segment.get(id.as_usize()).copied().unwrap_or(0)
    }

    /// The IPU of pipeline stage `stage`.
    pub fn stage_ipu(&self, stage: u32) -> u32 {
        self.placement
            .stage_ipus
            .get(stage as usize)
            .copied()
            .unwrap_or(0)
    }

    /// A tensor on IPU `ipu` (see [`Lowerer::new_tensor`]).
    #[allow(clippy::too_many_arguments)]
    pub fn new_tensor_on(
        &mut self,
        ipu: u32,
        name: String,
        node: Option<NodeId>,
        kind: TensorKind,
        dtype: DType,
        shape: Shape,
        mapping: Mapping,
    ) -> TensorId {
        let here = std::mem::replace(&mut self.ipu, ipu);
        let t = self.new_tensor(name, node, kind, dtype, shape, mapping);
        self.ipu = here;
        t
    }

    /// Lists the steps again as `kinds`, the leaves of a program that runs every step lowered
    /// so far in another order (a pipeline's); [`Lowerer::settle_usage`] then finds the
    /// tensors' usage over them.
    pub fn rebuild_steps(&mut self, kinds: Vec<StepKind>) {
        let names: HashMap<StepKind, String> =
            self.steps.drain(..).map(|s| (s.kind, s.name)).collect();
        self.steps = kinds
            .into_iter()
            .map(|kind| ProgramStep {
                name: names.get(&kind).cloned().unwrap_or_default(),
                kind,
            })
            .collect();
    }

    /// The values read on another IPU than their own, each with the segment that read it
    /// (pipelined programs only).
    pub fn crossings(&self) -> &[(NodeId, u32)] {
        &self.crossings
    }

    /// The program nodes emitted since the last call, each with its [`Part`] (see
    /// [`Lowerer::take_body`]).
    pub fn take_parts(&mut self) -> Vec<(Part, Program)> {
        let parts = std::mem::take(&mut self.parts);
        self.take_body()
            .into_iter()
            .zip(parts)
            .map(|(p, b)| (b, p))
            .collect()
    }

    /// Appends a program node to the body, as part `part`.
    pub(super) fn push_body(&mut self, program: Program, part: Part) {
        self.body.push(program);
        if !self.node_segment.is_empty() {
            self.parts.push(part);
        }
    }

    /// Replicas of the program.
    pub fn replicas(&self) -> u32 {
        self.placement.replicas
    }

    /// Averages tensor `t` over the replicas in place (a `CrossReplica` all-reduce after an
    /// external sync), as node `id`'s value.
    pub fn all_reduce_mean(&mut self, id: NodeId, t: TensorId) {
        self.push_body(Program::Sync(SyncScope::External), Part::Body(self.segment));
        let name = format!("{}/all_reduce", self.g.node(id).name);
        self.push_step(
            StepKind::CrossReplica(t),
            name,
            Program::CrossReplica {
                op: CollectiveOp::AllReduceMean,
                tensor: t,
                dst: None,
            },
        );
    }

    /// The collective `op` from tensor `src` into tensor `dst` (a reduce-scatter or an
    /// all-gather, `CrossReplica` with a `dst`) after an external sync, as node `id`'s value.
    pub fn cross_replica_to(&mut self, id: NodeId, op: CollectiveOp, src: TensorId, dst: TensorId) {
        self.push_body(Program::Sync(SyncScope::External), Part::Body(self.segment));
        self.push_step(
            StepKind::CrossReplicaTo { src, dst },
            self.g.node(id).name.clone(),
            Program::CrossReplica {
                op,
                tensor: src,
                dst: Some(dst),
            },
        );
    }

    /// The IPU node `id` is placed on.
    pub fn ipu_of(&self, id: NodeId) -> u32 {
        self.placement.ipu_of(id)
    }

    /// The IPU tensor `t` lives on (the IPU being lowered for, for a tensor not mapped yet).
    pub fn tensor_ipu(&self, t: TensorId) -> u32 {
        self.tensors[t.0 as usize].ipu().unwrap_or(self.ipu)
    }

    /// A copy of tensor `src` (node `id`'s value) on the IPU being lowered for, with the same
    /// tile mapping (as Poplar's inter-IPU copies keep it): an `IpuCopy` after an external
    /// sync.
    pub(super) fn copy_to_ipu(&mut self, id: NodeId, src: TensorId) -> TensorId {
        if let Some(&t) = self.ipu_copies.get(&(src, self.ipu)) {
            return t;
        }
        let s = &self.tensors[src.0 as usize];
        let pieces: Vec<(u32, u64, u64)> = s
            .slices
            .iter()
            .flat_map(|sl| {
                sl.intervals
                    .iter()
                    .map(|iv| (sl.tile.tile(), iv.begin, iv.end()))
            })
            .collect();
        let (name, dtype, shape) = (
            format!("{}/ipu{}", s.name, self.ipu),
            s.dtype,
            s.shape.clone(),
        );
        let copy = self.new_tensor(
            name.clone(),
            Some(id),
            TensorKind::Activation,
            dtype,
            shape,
            Mapping::from_pieces(pieces),
        );
        let es = dtype.size_bytes() as u64;
        // Our choice: chunks of at most 1 GiB keep every copy's byte count in its u32.
        const CHUNK: u64 = 1 << 30;
        let mut copies = Vec::new();
        for sl in &self.tensors[src.0 as usize].slices {
            for iv in &sl.intervals {
                let mut at = iv.begin;
                while at < iv.end() {
                    let len = (iv.end() - at).min(CHUNK / es.max(1));
                    copies.push(ByteCopy {
                        src_tile: sl.tile,
                        src_offset: iv.offset + ((at - iv.begin) * es) as u32,
                        bytes: (len * es) as u32,
                        src_tensor: src,
                        dst_tensor: copy,
                        dsts: CopyDsts::from_slice(&[CopyDst {
                            tile: TileId::new(self.ipu, sl.tile.tile()),
                            offset: (self.position(copy, at) * es) as u32,
                        }]),
                    });
                    at += len;
                }
            }
        }
        let send = Part::Send(self.segment_of(id));
        self.push_body(Program::Sync(SyncScope::External), send);
        let ex = ExchangeId(self.exchanges.len() as u32);
        let ex_name = format!("{name}/ipu_copy");
        self.exchanges.push(Exchange {
            name: ex_name.clone(),
            node: Some(id),
            copies,
            cycles: 0,
        });
        self.steps.push(ProgramStep {
            kind: StepKind::IpuCopy(ex),
            name: ex_name,
        });
        self.push_body(Program::IpuCopy(ex), send);
        self.ipu_copies.insert((src, self.ipu), copy);
        copy
    }

    /// True for optimizer state: a variable that only the weight update reads (and writes).
    pub(super) fn is_update_state(&self, id: NodeId) -> bool {
        let readers = self.g.consumers(id);
        !readers.is_empty()
            && readers
                .iter()
                .all(|&c| self.g.node(c).phase == ipusim_ir::Phase::Update)
    }

    /// A remote-buffer load or store of tensor `t`, in the body being lowered.
    pub(super) fn remote_copy(&mut self, t: TensorId, store: bool) {
        let name = format!(
            "{}/{}",
            self.tensors[t.0 as usize].name,
            if store { "store" } else { "load" }
        );
        self.push_step(
            StepKind::RemoteCopy { tensor: t, store },
            name,
            Program::RemoteCopy { tensor: t, store },
        );
    }

    /// Stores every offloaded variable placed so far back in its remote buffer (after the
    /// weight update that writes it).
    pub fn store_remote(&mut self) {
        for t in std::mem::take(&mut self.remote) {
            let ipu = self.tensor_ipu(t);
            let here = std::mem::replace(&mut self.ipu, ipu);
            self.remote_copy(t, true);
            self.ipu = here;
        }
    }
}

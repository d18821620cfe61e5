//! Every tensor's usage over the program steps (the first and last step that reads or
//! writes it, from which the memory plan finds what is live when), found once the steps are
//! final: after the lowering, in the order the program runs them (a pipeline's reorder
//! included).
//!
//! A step's tensors follow from the step alone — a compute set's operands, an exchange's
//! copies, a stream's, a collective's or a remote buffer's tensor — so each step's are
//! gathered on the host's cores, then every tensor's usage taken from them in step order.
//! (They were recorded as each step was emitted, which walked the exchanges' requests a
//! second time, and again after a pipeline's reorder.)

use super::Lowerer;
use crate::executable::{ComputeSet, Exchange, HostStream, StepKind, TensorId};
use ipusim_exe::memory::Usage;
use rayon::prelude::*;

impl Lowerer<'_> {
    /// Finds every tensor's usage over the steps as now listed (their copies and cycle
    /// estimates settled first); the tensors of `persistent` are live over every step.
    pub fn settle_usage(&mut self, persistent: &[TensorId]) {
        self.settle();
        let (compute_sets, exchanges, streams) =
            (&self.compute_sets, &self.exchanges, &self.streams);
        let per_step: Vec<Vec<TensorId>> = self
            .steps
            .par_iter()
            .map(|s| step_tensors(s.kind, compute_sets, exchanges, streams))
            .collect();
        for u in &mut self.usage {
            *u = Usage::default();
        }
        for (k, tensors) in per_step.into_iter().enumerate() {
            for t in tensors {
                self.touch(t, k as u32);
            }
        }
        let last = self.steps.len().saturating_sub(1) as u32;
        for &t in persistent {
            if let Some(u) = self.usage.get_mut(t.0 as usize) {
                *u = Usage {
                    first: Some(0),
                    last: Some(last),
                };
            }
        }
    }

    /// Tensor `t` is used at `step` (and the value a row-major copy was made of, wherever the
    /// copy is).
    fn touch(&mut self, t: TensorId, step: u32) {
        let u = &mut self.usage[t.0 as usize];
        u.first = Some(u.first.map_or(step, |f| f.min(step)));
        u.last = Some(u.last.map_or(step, |l| l.max(step)));
        if let Some(&source) = self.copy_of.get(&t) {
            let u = &mut self.usage[source.0 as usize];
            u.last = Some(u.last.map_or(step, |l| l.max(step)));
        }
    }
}

/// The tensors step `kind` reads or writes, each once, in ascending order.
fn step_tensors(
    kind: StepKind,
    compute_sets: &[ComputeSet],
    exchanges: &[Exchange],
    streams: &[HostStream],
) -> Vec<TensorId> {
    let mut ts = Vec::new();
    match kind {
        StepKind::Execute(cs) => compute_sets[cs.0 as usize]
            .tiles
            .iter()
            .flat_map(|t| &t.groups)
            .flat_map(|g| &g.vertices)
            .flat_map(|v| &v.operands)
            .for_each(|o| super::push_new(&mut ts, o.tensor)),
        StepKind::Exchange(ex) | StepKind::IpuCopy(ex) => {
            exchanges[ex.0 as usize].copies.iter().for_each(|c| {
                super::push_new(&mut ts, c.src_tensor);
                super::push_new(&mut ts, c.dst_tensor);
            })
        }
        StepKind::StreamCopy(s) => ts.push(streams[s.0 as usize].tensor),
        StepKind::CrossReplica(t) => ts.push(t),
        StepKind::CrossReplicaTo { src, dst } => ts.extend([src, dst]),
        StepKind::RemoteCopy { tensor, .. } => ts.push(tensor),
    }
    ts.sort_unstable();
    ts.dedup();
    ts
}

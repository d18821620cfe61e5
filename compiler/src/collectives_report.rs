//! The compile report's cross-replica collectives (absent with one replica): how many
//! all-reduces, reduce-scatters and all-gathers one weight update runs, the bytes of the
//! whole tensors they cover and their cycles, so that a user comparing replicated tensor
//! sharding with plain replication sees what the sharding costs on the links beside what it
//! saves in memory.

use crate::executable::{CollectiveOp, Executable};
use ipusim_exe::cycles::cross_replica_cycles;
use serde::{Deserialize, Serialize};

/// One kind of collective.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectiveCount {
    /// Collectives of this kind in the program (each runs once per pass over its part).
    pub count: u64,
    /// Bytes of the whole tensors they reduce or gather (one replica's view).
    pub bytes: u64,
    /// Their cycles, one run of each.
    pub cycles: u64,
}

/// The collectives of a replicated program.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectivesReport {
    /// In-place all-reduces (the gradients of plain replication).
    pub all_reduce: CollectiveCount,
    /// Reduce-scatters (replicated tensor sharding's gradients).
    pub reduce_scatter: CollectiveCount,
    /// All-gathers (replicated tensor sharding's updates).
    pub all_gather: CollectiveCount,
}

impl CollectivesReport {
    /// The collectives of `exe`, or `None` for a program of one replica or without any.
    pub fn of(exe: &Executable) -> Option<CollectivesReport> {
        if exe.system.replicas <= 1 {
            return None;
        }
        let all = exe.program.collectives();
        if all.is_empty() {
            return None;
        }
        let mut r = CollectivesReport::default();
        for (op, tensor, dst) in all {
            let (row, whole) = match op {
                CollectiveOp::AllReduceSum | CollectiveOp::AllReduceMean => {
                    (&mut r.all_reduce, tensor)
                }
                CollectiveOp::ReduceScatterMean => (&mut r.reduce_scatter, tensor),
                CollectiveOp::AllGather => (&mut r.all_gather, dst.unwrap_or(tensor)),
            };
            row.count += 1;
            row.bytes = row.bytes.saturating_add(exe.tensor(whole).size_bytes());
            row.cycles = row
                .cycles
                .saturating_add(cross_replica_cycles(exe, op, tensor, dst));
        }
        Some(r)
    }

    /// True when the program shards optimizer state (it reduce-scatters).
    pub fn sharded(&self) -> bool {
        self.reduce_scatter.count > 0
    }

    /// The text report's line, figures written by `g` (the report's digit grouping).
    pub fn line(&self, g: fn(u64) -> String) -> String {
        let row = |name: &str, c: &CollectiveCount| {
            format!(
                "{} {name} ({} bytes, {} cycles)",
                c.count,
                g(c.bytes),
                g(c.cycles)
            )
        };
        let mut s = format!(
            "Collectives: {}; {}; {}",
            row("all-reduces", &self.all_reduce),
            row("reduce-scatters", &self.reduce_scatter),
            row("all-gathers", &self.all_gather)
        );
        if self.sharded() {
            s.push_str(
                "\n  optimizer state sharded over the replicas (replicated tensor sharding): \
                 each replica holds and updates one shard of it",
            );
        }
        s
    }
}

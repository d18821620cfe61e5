//! The compiled program at a glance, for snapshot tests: per compute set its tiles, cycles
//! and vertices per codelet, per exchange its copies, bytes and cycles, and the report's
//! memory categories and totals. What a reviewer reads in a snapshot diff when the lowering
//! changes.

use crate::executable::Executable;
use crate::report::{Categories, CompileReport, MemoryCategories};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A compute set in the summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComputeSetSummary {
    pub name: String,
    pub tiles: usize,
    pub cycles: u64,
    /// Vertices per codelet (full name with type parameters).
    pub vertices: BTreeMap<String, usize>,
}

/// An exchange in the summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExchangeSummary {
    pub name: String,
    pub copies: usize,
    pub bytes: u64,
    pub cycles: u64,
}

/// The compiled program at a glance: what a reviewer reads in a snapshot diff when the
/// lowering changes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgramSummary {
    pub compute_sets: Vec<ComputeSetSummary>,
    pub exchanges: Vec<ExchangeSummary>,
    pub memory: MemoryCategories,
    pub max_tile_bytes: u64,
    pub total_cycles: u64,
    pub categories: Categories,
}

impl ProgramSummary {
    /// The summary of `exe`.
    pub fn new(exe: &Executable) -> ProgramSummary {
        let r = CompileReport::new("", None, exe);
        ProgramSummary {
            compute_sets: exe
                .compute_sets
                .iter()
                .map(|cs| {
                    let mut vertices = BTreeMap::new();
                    for g in cs.tiles.iter().flat_map(|t| &t.groups) {
                        *vertices.entry(g.codelet.full_name()).or_insert(0) += g.vertices.len();
                    }
                    ComputeSetSummary {
                        name: cs.name.clone(),
                        tiles: cs.tiles.len(),
                        cycles: cs.cycles,
                        vertices,
                    }
                })
                .collect(),
            exchanges: exe
                .exchanges
                .iter()
                .map(|x| ExchangeSummary {
                    name: x.name.clone(),
                    copies: x.copies.len(),
                    bytes: x.total_bytes(),
                    cycles: x.cycles,
                })
                .collect(),
            memory: r.memory.categories,
            max_tile_bytes: r.memory.max_tile_bytes,
            total_cycles: r.total_cycles,
            categories: r.categories,
        }
    }
}

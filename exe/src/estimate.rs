//! The static cycle estimate's data: totals by PopVision category, per compute set and per
//! exchange, stream bytes and tile balance of one program run. [`crate::cycles::estimate`]
//! fills it in.

use serde::{Deserialize, Serialize};

/// Cycles of one compute set over the whole program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComputeSetCycles {
    /// Compute-set name.
    pub name: String,
    /// Cycles of one execution.
    pub cycles_per_execution: u64,
    /// Executions per program run (repeat counts multiplied).
    pub executions: u64,
    /// `cycles_per_execution × executions`.
    pub cycles: u64,
    /// Tiles with vertices.
    pub tiles_used: u32,
}

/// Cycles of one exchange over the whole program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExchangeCycles {
    /// Exchange name.
    pub name: String,
    /// Cycles of one execution.
    pub cycles_per_execution: u64,
    /// Executions per program run.
    pub executions: u64,
    /// `cycles_per_execution × executions`.
    pub cycles: u64,
    /// Bytes moved per execution (remote and on-tile destinations).
    pub bytes: u64,
}

/// The static cycle estimate of one program run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CycleEstimate {
    /// Sum of the four categories.
    pub total_cycles: u64,
    /// Compute phases.
    pub on_tile_execute: u64,
    /// Exchange phases.
    pub do_exchange: u64,
    /// Syncs.
    pub sync: u64,
    /// Host stream copies.
    pub stream_copy: u64,
    /// Per compute set, in id order.
    pub compute_sets: Vec<ComputeSetCycles>,
    /// Per exchange, in id order.
    pub exchanges: Vec<ExchangeCycles>,
    /// Bytes moved over host streams per run: host to device.
    pub stream_bytes_in: u64,
    /// Bytes moved over host streams per run: device to host.
    pub stream_bytes_out: u64,
    /// Tile balance: `Σ_cs executions × Σ_tiles cycles(cs, tile)` divided by
    /// `used_tiles × on_tile_execute`, where `used_tiles` are the tiles with vertices in at
    /// least one compute set. It is the mean, over used tiles, of the fraction of
    /// OnTileExecute time the tile computes; 1.0 means every used tile is busy for the whole
    /// of every compute phase (0.0 when nothing computes).
    pub tile_balance: f64,
    /// Tiles with vertices in at least one compute set.
    pub used_tiles: u32,
    /// Per IPU of the system, in IPU order (PopVision's per-IPU summary).
    pub ipus: Vec<IpuCycles>,
}

/// The estimate's figures of one IPU.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IpuCycles {
    /// The IPU.
    pub ipu: u32,
    /// Its tiles with vertices in at least one compute set.
    pub used_tiles: u32,
    /// [`CycleEstimate::tile_balance`] over this IPU's used tiles.
    pub tile_balance: f64,
    /// Bytes its host streams move per run, host to device (PopVision's StreamCopy Rx).
    pub stream_bytes_in: u64,
    /// Bytes its host streams move per run, device to host (StreamCopy Tx).
    pub stream_bytes_out: u64,
    /// Cycles of the compute sets with work on this IPU, per run (each: its slowest tile on
    /// this IPU, times its executions). With one IPU, the OnTileExecute total.
    #[serde(default)]
    pub execute_cycles: u64,
    /// Cycles of the exchanges into this IPU's tiles, per run (inter-IPU copies count on
    /// the receiving IPU), and of the cross-replica collectives of its tensors.
    #[serde(default)]
    pub exchange_cycles: u64,
}

impl CycleEstimate {
    /// Whether a figure reached `u64::MAX` (a sum or product saturated): the figures are
    /// then bounds, not counts.
    pub fn saturated(&self) -> bool {
        [
            self.total_cycles,
            self.stream_bytes_in,
            self.stream_bytes_out,
        ]
        .contains(&u64::MAX)
    }
}

//! What a run (and each executed program step) reports: executed cycles by PopVision
//! category, per tile, flags raised, host-stream bytes.

use crate::numerics::FpSts;
use ipusim_exe::executable::{
    CollectiveOp, ComputeSetId, ExchangeId, StreamDirection, StreamId, TensorId,
};
use ipusim_exe::system::TileId;
use serde::{Deserialize, Serialize};

pub use crate::category::{Category, CategoryCycles};

/// One tile's busy cycles in a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TileCycles {
    /// The tile.
    pub tile: TileId,
    /// Cycles it computed (the sum over compute sets of its vertex groups' cycles).
    pub on_tile_execute: u64,
    /// Cycles it sent, received or copied in exchanges.
    pub do_exchange: u64,
}

/// The outcome of one program run (`Engine::run`, or a run the debugger stepped through).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// The run's number (1 for the engine's first run).
    pub run: u64,
    /// The device cycle at which the run started.
    pub start_cycle: u64,
    /// Executed cycles by category. For a program without data-dependent control flow they
    /// equal the compiler's static estimate.
    pub cycles: CategoryCycles,
    /// Flags raised during the run (OR over tiles and steps).
    pub flags: FpSts,
    /// Bytes moved host → device.
    pub stream_bytes_in: u64,
    /// Bytes moved device → host.
    pub stream_bytes_out: u64,
    /// Program steps (leaves of the program tree: compute sets, exchanges, syncs, stream
    /// copies) executed.
    pub program_steps: u64,
    /// Executions of each compute set, by id.
    pub compute_set_executions: Vec<u64>,
    /// Executions of each exchange, by id.
    pub exchange_executions: Vec<u64>,
    /// Busy cycles of every tile with memory, by tile.
    pub tiles: Vec<TileCycles>,
}

/// A leaf of the program tree: what one program step does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Leaf {
    /// Run a compute set.
    Execute {
        /// The compute set.
        compute_set: ComputeSetId,
    },
    /// Run an exchange.
    Exchange {
        /// The exchange.
        exchange: ExchangeId,
    },
    /// Move one micro-batch of a host stream.
    StreamCopy {
        /// The stream.
        stream: StreamId,
        /// Its direction.
        direction: StreamDirection,
        /// The tensor written or read.
        tensor: TensorId,
    },
    /// Sync all tiles of the IPU.
    Sync,
    /// Sync all tiles of every IPU of the system.
    ExternalSync,
    /// A collective across replicas of `tensor`: the identity with one replica.
    CrossReplica {
        /// The collective.
        op: CollectiveOp,
        /// The tensor read (and, without `dst`, written).
        tensor: TensorId,
        /// The tensor written, if not `tensor`.
        dst: Option<TensorId>,
    },
    /// A remote-buffer load (or store) of an offloaded variable.
    RemoteCopy {
        /// The tensor.
        tensor: TensorId,
        /// True for a store.
        store: bool,
    },
}

/// The program step the engine will execute next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextStep {
    /// The program-tree node (pre-order index).
    pub node: u32,
    /// Its index in `Executable::steps` (syncs have none).
    pub step: Option<u32>,
    /// What it does.
    pub leaf: Leaf,
}

/// What one executed program step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepReport {
    /// The step.
    pub next: NextStep,
    /// Device cycle at its start.
    pub cycle: u64,
    /// Its cycles.
    pub cycles: u64,
    /// Flags raised by it (OR over tiles; tile by tile in `Engine::last_step_flags`).
    pub flags: FpSts,
    /// Bytes it moved (exchange or stream copy).
    pub bytes: u64,
}

/// What settling the cursor found.
#[derive(Clone, Debug, PartialEq)]
pub enum Settled {
    /// A program step is next.
    Step(NextStep),
    /// The run just finished.
    Finished(Box<RunSummary>),
}

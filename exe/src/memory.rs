//! The memory plan's data: bytes per tile by category, the fullest tiles with their largest
//! tensors and the temporaries live at their peak, liveness over program steps, and the out-of-memory verdict; and the usage of each
//! tensor over program steps that liveness is computed from. The planner that fills it is
//! `ipusim_compiler::memory`.

use crate::ids::TensorId;
use crate::system::TileId;
use serde::{Deserialize, Serialize};

/// The first and last program step touching a tensor (indices of `Executable::steps`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// The first step.
    pub first: Option<u32>,
    /// The last step.
    pub last: Option<u32>,
}

/// Bytes of one tile by category.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TileMemory {
    /// The tile.
    pub tile: TileId,
    /// Variables (model state).
    pub variables: u64,
    /// Constants.
    pub constants: u64,
    /// Host-stream landing buffers.
    pub exchange_buffers: u64,
    /// Peak bytes of temporaries (activations, staging, partials), including alignment gaps.
    pub temporaries: u64,
    /// Vertex state.
    pub vertex_state: u64,
    /// Code: codelets used on the tile, control code, exchange code (the sum of the four
    /// parts below, PopVision's code types).
    pub code: u64,
    /// Of `code`: control code, the call and sync of each compute set on the tile
    /// (PopVision's "Control Code").
    #[serde(default)]
    pub control_code: u64,
    /// Of `code`: each codelet used on the tile, once ("Vertex Code").
    #[serde(default)]
    pub vertex_code: u64,
    /// Of `code`: the tile's exchange instructions with tiles of its IPU ("Internal Exchange
    /// Code"): a switch to each sender it hears and a send per run of bytes it sends, in
    /// each exchange.
    #[serde(default)]
    pub internal_exchange_code: u64,
    /// Of `code`: the tile's exchange instructions with tiles of other IPUs ("Global
    /// Exchange Code"), counted as the internal ones.
    #[serde(default)]
    pub global_exchange_code: u64,
    /// Sum of the categories.
    pub total: u64,
}

impl TileMemory {
    /// The sum of the code types, which `code` holds.
    pub fn code_types_sum(&self) -> u64 {
        self.control_code
            + self.vertex_code
            + self.internal_exchange_code
            + self.global_exchange_code
    }
}

/// A tensor's bytes on one tile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorBytes {
    /// The tensor.
    pub tensor: TensorId,
    /// Its name.
    pub name: String,
    /// Bytes on the tile.
    pub bytes: u64,
}

/// One of the fullest tiles, with its largest tensors.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorstTile {
    /// The tile.
    pub tile: TileId,
    /// Its total bytes.
    pub bytes: u64,
    /// Its largest tensors, largest first.
    pub largest: Vec<TensorBytes>,
    /// Its bytes by category.
    #[serde(default)]
    pub categories: TileMemory,
    /// Its temporaries at their top: what the memory left for them was spent on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak: Option<TilePeak>,
}

/// The program step at which a tile's temporaries reach their top (the step whose first
/// temporary raised it last) and the temporaries live on the tile there (PopVision's
/// liveness view of one tile). `live_bytes` is at most the tile's `temporaries`: the rest
/// is the packing's gaps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TilePeak {
    /// The step's index in `Executable::steps`.
    pub step: u32,
    /// The step's name (its compute set's, exchange's or stream's).
    pub name: String,
    /// Bytes of the temporaries live on the tile at that step.
    pub live_bytes: u64,
    /// The largest of them, largest first.
    pub live: Vec<TensorBytes>,
}

/// The memory plan of an executable.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryPlan {
    /// Bytes per tile of the target.
    pub bytes_per_tile_capacity: u64,
    /// Every tile of the target, in tile order.
    pub tiles: Vec<TileMemory>,
    /// The fullest tile's bytes.
    pub max_tile_bytes: u64,
    /// Bytes over all tiles.
    pub total_bytes: u64,
    /// True when some tile exceeds its capacity.
    pub oom: bool,
    /// Tiles over capacity, ascending.
    pub oom_tiles: Vec<TileId>,
    /// The five fullest tiles with their five largest tensors.
    pub worst_tiles: Vec<WorstTile>,
    /// Bytes of always-live data (variables, constants, stream buffers) over all tiles.
    pub always_live_bytes: u64,
    /// Per program step (indices of `Executable::steps`): bytes of temporaries live over all
    /// tiles.
    pub liveness: Vec<u64>,
}

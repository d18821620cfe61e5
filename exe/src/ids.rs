//! The ids of an executable's entities (indices into its tables), at the bottom so that every
//! data module can name them.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Index of a tensor in [`crate::Executable::tensors`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TensorId(pub u32);

/// Index of a compute set in [`crate::Executable::compute_sets`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ComputeSetId(pub u32);

/// Index of an exchange in [`crate::Executable::exchanges`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ExchangeId(pub u32);

/// Index of a host stream in [`crate::Executable::streams`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StreamId(pub u32);

/// Bits of a [`TileId`] that hold the tile's number on its IPU (our choice: 2^20 tiles per
/// IPU, 700 times a GC200's 1,472; the IPU number takes the 12 bits above, 4,096 IPUs).
const TILE_BITS: u32 = 20;

/// The most tiles one IPU of a target may have ([`TileId`]'s tile field).
pub const MAX_TILES_PER_IPU: u32 = 1 << TILE_BITS;

/// The most IPUs a system may have ([`TileId`]'s IPU field).
pub const MAX_IPUS: u32 = 1 << (32 - TILE_BITS);

/// A tile of a system: its IPU and its number on that IPU. Ordered by IPU, then tile.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct TileId(u32);

impl TileId {
    /// Tile `tile` of IPU `ipu`. `tile` must be below [`MAX_TILES_PER_IPU`] and `ipu` below
    /// [`MAX_IPUS`] (targets and systems are validated against both).
    pub const fn new(ipu: u32, tile: u32) -> TileId {
        TileId((ipu << TILE_BITS) | (tile & (MAX_TILES_PER_IPU - 1)))
    }

    /// Tile `tile` of IPU `ipu`, or `None` when either is beyond what a tile id holds (for
    /// numbers a user typed).
    pub fn checked(ipu: u32, tile: u32) -> Option<TileId> {
        (ipu < MAX_IPUS && tile < MAX_TILES_PER_IPU).then(|| TileId::new(ipu, tile))
    }

    /// Tile `tile` of IPU 0 (every tile of a one-IPU program).
    pub const fn on_first_ipu(tile: u32) -> TileId {
        TileId::new(0, tile)
    }

    /// The IPU the tile is on.
    pub const fn ipu(self) -> u32 {
        self.0 >> TILE_BITS
    }

    /// The tile's number on its IPU.
    pub const fn tile(self) -> u32 {
        self.0 & (MAX_TILES_PER_IPU - 1)
    }

    /// The tile's index in a system of IPUs of `tiles_per_ipu` tiles each, counted over all
    /// IPUs (IPU 0's tiles first): the index of per-tile tables.
    pub fn dense(self, tiles_per_ipu: u32) -> usize {
        self.ipu() as usize * tiles_per_ipu as usize + self.tile() as usize
    }
}

impl fmt::Display for TileId {
    /// `N` on IPU 0 (as one-IPU reports always printed it), `ipuI:N` on the others.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Width, fill and alignment apply as they do to the number.
        match self.ipu() {
            0 => fmt::Display::fmt(&self.tile(), f),
            ipu => f.pad(&format!("ipu{ipu}:{}", self.tile())),
        }
    }
}

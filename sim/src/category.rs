//! Cycles by PopVision category (OnTileExecute, DoExchange, Sync, StreamCopy): what the engine
//! adds up as it runs and what its trace records.

use serde::{Deserialize, Serialize};

/// Cycles by PopVision category.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CategoryCycles {
    /// Sum of the four categories.
    pub total: u64,
    /// Compute phases.
    pub on_tile_execute: u64,
    /// Exchange phases.
    pub do_exchange: u64,
    /// Internal syncs (and the syncs of `If` conditions).
    pub sync: u64,
    /// Host stream copies.
    pub stream_copy: u64,
}

impl CategoryCycles {
    /// Adds `cycles` to `category` and to the total.
    pub fn add(&mut self, category: Category, cycles: u64) {
        self.total = self.total.saturating_add(cycles);
        match category {
            Category::OnTileExecute => {
                self.on_tile_execute = self.on_tile_execute.saturating_add(cycles)
            }
            Category::DoExchange => self.do_exchange = self.do_exchange.saturating_add(cycles),
            Category::Sync => self.sync = self.sync.saturating_add(cycles),
            Category::StreamCopy => self.stream_copy = self.stream_copy.saturating_add(cycles),
        }
    }
}

/// A PopVision cycle category.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Category {
    /// A compute set.
    OnTileExecute,
    /// An exchange.
    DoExchange,
    /// A sync.
    Sync,
    /// A host stream copy.
    StreamCopy,
}

//! Finding a tensor's slice on a tile: the search the verifier and the memory plan's offset
//! resolution make for every operand and copy endpoint, millions of times for a large
//! model, and the lowering's and the debugger's lookups (`Tensor::slice_on`).

use crate::ids::{TensorId, TileId};

/// The index of the item on `tile` among `items` sorted by tile (a tensor's slices): first
/// where it would be if they covered consecutive tiles of one IPU (most tensors do), else by
/// binary search.
pub fn find_tile<T>(items: &[T], tile: TileId, key: impl Fn(&T) -> TileId) -> Option<usize> {
    let first = key(items.first()?);
    if first.ipu() == tile.ipu() {
        if let Some(i) = tile.tile().checked_sub(first.tile()) {
            if items.get(i as usize).map(&key) == Some(tile) {
                return Some(i as usize);
            }
        }
    }
    items.binary_search_by_key(&tile, key).ok()
}

/// Finds a tensor's slice on a tile, remembering the last answers in a small direct-mapped
/// table: a tile's vertices and an exchange's copies ask for the same few (tensor, tile)
/// pairs again and again, and a binary search over a tensor's slices for each of millions
/// of operands was most of the verifier's time. The table's size is our choice.
pub struct SliceLookup {
    entries: Vec<(TensorId, TileId, Option<usize>)>,
}

impl SliceLookup {
    const SLOTS: usize = 256;

    /// An empty table.
    pub fn new() -> SliceLookup {
        SliceLookup {
            // Tensor ids of the empty slots name no tensor of a real executable.
            entries: vec![(TensorId(u32::MAX), TileId::new(0, 0), None); Self::SLOTS],
        }
    }

    /// The index of tensor `t`'s slice on `tile` (`search` finds it on a miss).
    pub fn find(
        &mut self,
        t: TensorId,
        tile: TileId,
        search: impl FnOnce() -> Option<usize>,
    ) -> Option<usize> {
        let key = (t.0 as usize).wrapping_mul(0x9e37_79b9)
            ^ (tile.ipu() as usize).wrapping_mul(0x85eb_ca6b)
            ^ tile.tile() as usize;
        let slot = &mut self.entries[(key ^ (key >> 7)) % Self::SLOTS];
        if slot.0 == t && slot.1 == tile {
            return slot.2;
        }
        let found = search();
        *slot = (t, tile, found);
        found
    }
}

impl Default for SliceLookup {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_slices_on_consecutive_and_scattered_tiles() {
        let consecutive: Vec<TileId> = (3..10).map(|t| TileId::new(0, t)).collect();
        assert_eq!(find_tile(&consecutive, TileId::new(0, 5), |&t| t), Some(2));
        assert_eq!(find_tile(&consecutive, TileId::new(0, 2), |&t| t), None);
        assert_eq!(find_tile(&consecutive, TileId::new(1, 5), |&t| t), None);
        let scattered = [TileId::new(0, 1), TileId::new(0, 7), TileId::new(1, 0)];
        assert_eq!(find_tile(&scattered, TileId::new(0, 7), |&t| t), Some(1));
        assert_eq!(find_tile(&scattered, TileId::new(1, 0), |&t| t), Some(2));
        assert_eq!(find_tile(&scattered, TileId::new(0, 2), |&t| t), None);
        assert_eq!(find_tile::<TileId>(&[], TileId::new(0, 0), |&t| t), None);
    }

    #[test]
    fn the_lookup_answers_as_the_search_does() {
        let tiles: Vec<TileId> = [0, 2, 3, 9].map(|t| TileId::new(0, t)).to_vec();
        let mut lookup = SliceLookup::new();
        let mut searches = 0;
        for round in 0..3 {
            for t in 0..12 {
                for tensor in 0..100 {
                    let tile = TileId::new(0, t);
                    let got = lookup.find(TensorId(tensor), tile, || {
                        searches += 1;
                        find_tile(&tiles, tile, |&x| x)
                    });
                    assert_eq!(got, find_tile(&tiles, tile, |&x| x), "round {round}");
                }
            }
        }
        // Repeated questions are answered from the table at least some of the time.
        assert!(searches < 3 * 12 * 100);
    }
}

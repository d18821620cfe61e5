//! Exchange code: the instructions each tile runs in the program's exchanges, counted per
//! tile as internal (within its IPU) or global (across IPUs), and their bytes.
//!
//! The IPU's exchange is compiled ahead of time: a sending tile's `send` instructions put
//! packets on the exchange with no destination, and a receiving tile's switch-control
//! instructions (`setmux`, `$INCOMING_MUX`) connect it to the sender it listens to at each
//! moment (`ipu-hardware.md` §5.1, from the patent and the ISA's exchange registers). The
//! model, per exchange:
//!
//! - a receiving tile runs one instruction per tile it receives from, as PopLibs' planners
//!   count it ("the indices must be received from a set of tiles, so a number of setmux
//!   instructions are required": `lib/popops/DynamicSlice.cpp` L4324–4332, one per source
//!   tile in `mIndicesExchangeInstrs0PerGroup`);
//! - a sending tile runs one instruction per run of contiguous (or overlapping) bytes it
//!   sends, however many tiles take them (a broadcast is one send that several tiles listen
//!   to): our choice, the least code a send can take, where PopLibs' planners charge the
//!   sender nothing;
//! - each instruction is [`INSTRUCTION_BYTES`].
//!
//! A receiving tile's instruction is global when its sender is on another IPU; a sending
//! run's when any of its copies has a destination on another IPU.

use crate::executable::Exchange;
use ipusim_exe::system::TileId;
use rayon::prelude::*;

/// Bytes of one exchange instruction: PopLibs' planners cost exchange code at 4 bytes an
/// instruction (`lib/popops/DynamicSlice.cpp` L4500–4505 and L4769–4772, `exchangeCodeBytes`
/// as a product with `m.addConstant(4u)`).
pub(super) const INSTRUCTION_BYTES: u64 = 4;

/// Each tile's (internal, global) exchange instructions over `exchanges` (the ones `skip`
/// names left out), indexed by [`TileId::dense`] in a system of `ntiles` tiles,
/// `tiles_per_ipu` on each IPU. The exchanges are counted on the host's cores (tens of
/// millions of copy endpoints on a large CNN) and the counts summed.
pub(super) fn instructions(
    exchanges: &[Exchange],
    tiles_per_ipu: u32,
    ntiles: usize,
    skip: impl Fn(&str) -> bool + Sync,
) -> Vec<(u64, u64)> {
    exchanges
        .par_iter()
        .filter(|ex| !skip(&ex.name))
        .fold(
            || Counter::new(ntiles),
            |mut counter, ex| {
                counter.add(ex, tiles_per_ipu);
                counter
            },
        )
        .map(|c| c.counts)
        .reduce_with(|mut a, b| {
            for (x, y) in a.iter_mut().zip(b) {
                x.0 += y.0;
                x.1 += y.1;
            }
            a
        })
        .unwrap_or_else(|| vec![(0, 0); ntiles])
}

/// One host thread's counts and scratch tables.
struct Counter {
    /// (internal, global) instructions per dense tile.
    counts: Vec<(u64, u64)>,
    /// Per dense tile, the mark of the last source group it was counted as receiving from.
    heard: Vec<u64>,
    /// The current source group's mark (distinct for every group this thread sees).
    mark: u64,
    /// The exchange's copies as (source tile and offset, copy index), sorted.
    order: Vec<(u64, u32)>,
}

impl Counter {
    fn new(ntiles: usize) -> Counter {
        Counter {
            counts: vec![(0, 0); ntiles],
            heard: vec![0; ntiles],
            mark: 0,
            order: Vec::new(),
        }
    }

    fn bump(&mut self, tile: TileId, tiles_per_ipu: u32, global: bool) {
        if let Some(c) = self.counts.get_mut(tile.dense(tiles_per_ipu)) {
            if global {
                c.1 += 1;
            } else {
                c.0 += 1;
            }
        }
    }

    /// Counts one exchange: its copies taken by source tile and offset, each source tile's
    /// runs of sent bytes, and for each destination the distinct sources it hears from.
    fn add(&mut self, ex: &Exchange, tiles_per_ipu: u32) {
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        order.extend(ex.copies.iter().enumerate().map(|(i, c)| {
            let src = c.src_tile.dense(tiles_per_ipu) as u64;
            ((src << 32) | u64::from(c.src_offset), i as u32)
        }));
        order.sort_unstable();
        let mut i = 0;
        while i < order.len() {
            let src_tile = ex.copies[order[i].1 as usize].src_tile;
            let group_end = order[i..]
                .iter()
                .position(|&(key, _)| key >> 32 != order[i].0 >> 32)
                .map_or(order.len(), |n| i + n);
            self.mark += 1;
            // The source's runs of contiguous or overlapping bytes.
            let mut run: Option<(u64, bool)> = None;
            for &(_, ci) in &order[i..group_end] {
                let c = &ex.copies[ci as usize];
                let crosses = c.dsts.iter().any(|d| d.tile.ipu() != src_tile.ipu());
                let begin = u64::from(c.src_offset);
                let end = begin + u64::from(c.bytes);
                run = match run {
                    Some((run_end, global)) if begin <= run_end => {
                        Some((run_end.max(end), global || crosses))
                    }
                    Some((_, global)) => {
                        self.bump(src_tile, tiles_per_ipu, global);
                        Some((end, crosses))
                    }
                    None => Some((end, crosses)),
                };
                // Each destination tile hears this source once.
                for d in &c.dsts {
                    let Some(heard) = self.heard.get_mut(d.tile.dense(tiles_per_ipu)) else {
                        continue;
                    };
                    if *heard != self.mark {
                        *heard = self.mark;
                        self.bump(d.tile, tiles_per_ipu, d.tile.ipu() != src_tile.ipu());
                    }
                }
            }
            if let Some((_, global)) = run {
                self.bump(src_tile, tiles_per_ipu, global);
            }
            i = group_end;
        }
        self.order = order;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executable::{ByteCopy, CopyDst, TensorId};

    fn copy(src: TileId, offset: u32, bytes: u32, dsts: &[TileId]) -> ByteCopy {
        ByteCopy {
            src_tile: src,
            src_offset: offset,
            bytes,
            src_tensor: TensorId(0),
            dst_tensor: TensorId(1),
            dsts: dsts
                .iter()
                .map(|&tile| CopyDst { tile, offset: 0 })
                .collect(),
        }
    }

    fn exchange(name: &str, copies: Vec<ByteCopy>) -> Exchange {
        Exchange {
            name: name.into(),
            node: None,
            copies,
            cycles: 0,
        }
    }

    /// Counts by brute force: every (destination, source) pair once, and each source's
    /// sent bytes as a set of byte addresses whose maximal runs are counted.
    fn brute(exchanges: &[Exchange], tiles_per_ipu: u32, ntiles: usize) -> Vec<(u64, u64)> {
        let mut counts = vec![(0u64, 0u64); ntiles];
        for ex in exchanges {
            let mut pairs = std::collections::BTreeSet::new();
            let mut bytes: std::collections::BTreeMap<usize, Vec<(u64, bool)>> = Default::default();
            for c in &ex.copies {
                let crosses = c.dsts.iter().any(|d| d.tile.ipu() != c.src_tile.ipu());
                for b in c.src_offset..c.src_offset + c.bytes {
                    bytes
                        .entry(c.src_tile.dense(tiles_per_ipu))
                        .or_default()
                        .push((u64::from(b), crosses));
                }
                for d in &c.dsts {
                    pairs.insert((d.tile, c.src_tile));
                }
            }
            for (d, s) in pairs {
                let c = &mut counts[d.dense(tiles_per_ipu)];
                if d.ipu() != s.ipu() {
                    c.1 += 1;
                } else {
                    c.0 += 1;
                }
            }
            for (tile, mut addrs) in bytes {
                addrs.sort_unstable();
                let mut runs: Vec<(u64, bool)> = Vec::new();
                for (a, crosses) in addrs {
                    match runs.last_mut() {
                        Some((end, g)) if a <= *end => {
                            *end = (*end).max(a + 1);
                            *g |= crosses;
                        }
                        _ => runs.push((a + 1, crosses)),
                    }
                }
                for (_, g) in runs {
                    if g {
                        counts[tile].1 += 1;
                    } else {
                        counts[tile].0 += 1;
                    }
                }
            }
        }
        counts
    }

    #[test]
    fn counts_one_instruction_per_source_heard_and_per_run_sent() {
        let t = |ipu, tile| TileId::new(ipu, tile);
        // Tile 0 sends two adjacent regions and a separate one; the first two reach tile 1
        // (one source heard, whatever the regions), the third tiles 1 and 2 (a broadcast,
        // one send). Tile 3 sends to tile 1 too: tile 1 hears two sources.
        let ex = exchange(
            "a",
            vec![
                copy(t(0, 0), 16, 8, &[t(0, 1)]),
                copy(t(0, 3), 0, 4, &[t(0, 1)]),
                copy(t(0, 0), 0, 16, &[t(0, 1)]),
                copy(t(0, 0), 64, 4, &[t(0, 1), t(0, 2)]),
            ],
        );
        let counts = instructions(std::slice::from_ref(&ex), 4, 8, |_| false);
        assert_eq!(counts[0], (2, 0), "two runs sent: [0, 24) and [64, 68)");
        assert_eq!(counts[1], (2, 0), "two sources heard");
        assert_eq!(counts[2], (1, 0));
        assert_eq!(counts[3], (1, 0));
        // Across IPUs: tile 0 of IPU 1 hears IPU 0's tile 0 (global) and its own IPU's tile 1.
        let ex = exchange(
            "b",
            vec![
                copy(t(0, 0), 0, 4, &[t(1, 0), t(0, 1)]),
                copy(t(1, 1), 0, 4, &[t(1, 0)]),
            ],
        );
        let counts = instructions(std::slice::from_ref(&ex), 4, 8, |_| false);
        assert_eq!(counts[0], (0, 1), "a run with a destination on another IPU");
        assert_eq!(counts[1], (1, 0));
        assert_eq!(counts[4], (1, 1));
        assert_eq!(counts[5], (1, 0));
        // Skipped exchanges count nothing.
        let counts = instructions(&[ex], 4, 8, |name| name == "b");
        assert!(counts.iter().all(|&c| c == (0, 0)));
    }

    #[test]
    fn counts_equal_a_brute_force_count_over_shuffled_overlapping_copies() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let tiles_per_ipu = 6;
        let ntiles = 12;
        let tile = |i: u64| TileId::new((i / 6) as u32, (i % 6) as u32);
        let exchanges: Vec<Exchange> = (0..40)
            .map(|e| {
                let copies = (0..next(30) + 1)
                    .map(|_| {
                        let dsts: Vec<TileId> = (0..next(3) + 1).map(|_| tile(next(12))).collect();
                        copy(tile(next(12)), next(40) as u32, next(12) as u32 + 1, &dsts)
                    })
                    .collect();
                exchange(&format!("x{e}"), copies)
            })
            .collect();
        assert_eq!(
            instructions(&exchanges, tiles_per_ipu, ntiles, |_| false),
            brute(&exchanges, tiles_per_ipu, ntiles)
        );
    }
}

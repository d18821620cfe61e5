//! Direct exchanges, for an engine on one host thread: a deferring exchange of large moves
//! (those a compute set would gather early, [`super::ExchangePlan::gathers_early`]) whose
//! destinations overlap none of its sources moves each destination tile's bytes straight
//! from the source tiles' memories, just before that tile's vertices run, instead of
//! through the staging buffer.
//!
//! An exchange means: every source read, then every destination written. When no
//! destination byte is a source byte (on any tile), the sources are the same at the end of
//! the exchange as at its start, and the writes may read them in any order, at any time
//! until something else writes them. Left to the compute set that follows
//! ([`super::ExchangePlan::writes_along`]), they may still be read while its tiles run, one
//! after the other, if none of its vertices writes a source byte (a vertex writes only its
//! output, its last operand: [`conflicts`]); otherwise, and before any other step, every
//! destination is written at once ([`Direct::scatter`]). Each destination tile's writes keep
//! their copy order, so every tile sees the bytes the staged exchange gives it, at the same
//! point of its work.
//!
//! What it saves: the staging buffer's writes and reads, where a reduction's partials (the
//! 1024³ matmul's 34 MB per run) went from the tiles to the staging buffer and back out:
//! that matmul's run 4–5% faster on one host thread. Exchanges of small moves keep the
//! staged path (our choice, measured): a broadcast reads its sources again and again, and
//! reads them faster from the compact staging buffer than from the tiles' memories (the
//! same matmul's operand exchange, direct, made the run slower). Several host threads keep
//! it too: a tile's writes would read other tiles' memories while their vertices run on
//! other threads.

use super::super::TileState;
use super::{ExchangePlan, Piece};
use ipusim_exe::executable::{ComputeSet, Executable};
use std::ops::Range;

/// One contiguous move from a source tile's memory to a destination tile's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DirectPiece {
    /// The dense source tile.
    pub src: usize,
    /// Offset read in the source tile, offset written in the destination, bytes.
    pub piece: Piece,
}

/// An exchange's moves without the staging buffer (module docs).
#[derive(Clone, Debug, Default)]
pub(crate) struct Direct {
    /// Dense destination tiles, ascending (the plan's).
    dst_tiles: Vec<usize>,
    /// For each of `dst_tiles`, its moves in copy order.
    pieces: Vec<Vec<DirectPiece>>,
    /// Each source tile's bytes read, as sorted disjoint ranges: (dense tile, ranges),
    /// ascending by tile.
    sources: Vec<(usize, Vec<Range<usize>>)>,
}

impl Direct {
    /// The direct moves of `plan`, or `None` when a destination overlaps a source on some
    /// tile (the bytes read must then all be read before any is written: staged).
    pub fn new(plan: &ExchangePlan) -> Option<Direct> {
        let mut by_tile: Vec<(usize, Range<usize>)> = (plan.gather.iter())
            .map(|&(t, p)| (t, p.from..p.from + p.len))
            .collect();
        by_tile.sort_unstable_by_key(|(t, r)| (*t, r.start));
        let mut sources: Vec<(usize, Vec<Range<usize>>)> = Vec::new();
        for (t, r) in by_tile {
            match sources.last_mut() {
                Some((last, ranges)) if *last == t => match ranges.last_mut() {
                    Some(prev) if r.start <= prev.end => prev.end = prev.end.max(r.end),
                    _ => ranges.push(r),
                },
                _ => sources.push((t, vec![r])),
            }
        }
        let direct = Direct {
            dst_tiles: plan.dst_tiles.clone(),
            pieces: Vec::new(),
            sources,
        };
        for (&d, writes) in plan.dst_tiles.iter().zip(&plan.scatter) {
            if writes.iter().any(|p| direct.reads(d, p.to..p.to + p.len)) {
                return None;
            }
        }
        let pieces = (plan.scatter.iter())
            .map(|writes| {
                let mut out: Vec<DirectPiece> = Vec::with_capacity(writes.len());
                for w in writes {
                    from_staging(&plan.gather, *w, &mut out);
                }
                out
            })
            .collect();
        Some(Direct { pieces, ..direct })
    }

    /// Whether the exchange reads any byte of `bytes` on dense tile `d`.
    fn reads(&self, d: usize, bytes: Range<usize>) -> bool {
        let Ok(i) = self.sources.binary_search_by_key(&d, |(t, _)| *t) else {
            return false;
        };
        let ranges = &self.sources[i].1;
        // The first range ending after `bytes` starts is the only one that can overlap it
        // first.
        let j = ranges.partition_point(|r| r.end <= bytes.start);
        ranges.get(j).is_some_and(|r| r.start < bytes.end)
    }

    /// Whether a vertex of `cs` (on the dense tiles `dense`) writes a byte this exchange
    /// reads: its writes may then not wait for the vertices of `cs`.
    pub fn conflicts(&self, exe: &Executable, cs: &ComputeSet, dense: &[usize]) -> bool {
        (cs.tiles.iter().zip(dense)).any(|(work, &d)| {
            (work.groups.iter())
                .flat_map(|g| &g.vertices)
                .filter_map(|v| v.operands.last())
                .any(|o| {
                    let size = exe.tensor(o.tensor).dtype.size_bytes();
                    let start = o.offset as usize;
                    let end = start.saturating_add((o.len as usize).saturating_mul(size));
                    start < end && self.reads(d, start..end)
                })
        })
    }

    /// For the dense tiles `dense` (ascending), each one's index in the destination tiles,
    /// if it is one.
    pub fn along(&self, dense: &[usize]) -> Vec<Option<usize>> {
        let mut at = 0;
        (dense.iter())
            .map(|&d| {
                at += self.dst_tiles[at..].partition_point(|&t| t < d);
                (self.dst_tiles.get(at) == Some(&d)).then_some(at)
            })
            .collect()
    }

    /// Destination tile number `k` (of `dst_tiles`) takes its writes from the sources in
    /// `tiles`.
    pub fn write(&self, tiles: &mut [TileState], k: usize) {
        let d = self.dst_tiles[k];
        for m in &self.pieces[k] {
            let p = m.piece;
            if m.src == d {
                tiles[d]
                    .mem
                    .bytes_mut()
                    .copy_within(p.from..p.from + p.len, p.to);
            } else {
                let (dst, src) = pair_mut(tiles, d, m.src);
                let bytes = &src.mem.bytes()[p.from..p.from + p.len];
                dst.mem.bytes_mut()[p.to..p.to + p.len].copy_from_slice(bytes);
            }
        }
    }

    /// Every destination tile not in `done` (dense, ascending) takes its writes.
    pub fn scatter_except(&self, tiles: &mut [TileState], done: &[usize]) {
        let mut rest = done.iter().peekable();
        for (k, &d) in self.dst_tiles.iter().enumerate() {
            while rest.next_if(|&&t| t < d).is_some() {}
            if rest.peek() != Some(&&d) {
                self.write(tiles, k);
            }
        }
    }

    /// Every destination tile takes its writes.
    pub fn scatter(&self, tiles: &mut [TileState]) {
        for k in 0..self.dst_tiles.len() {
            self.write(tiles, k);
        }
    }
}

/// The write `w` (staging offset `w.from` → destination offset `w.to`) as moves from the
/// source tiles: the staging bytes it reads come from one or more of `gather`'s moves, in
/// staging order (their staging ranges ascending and back to back).
fn from_staging(gather: &[(usize, Piece)], w: Piece, out: &mut Vec<DirectPiece>) {
    let mut i = gather.partition_point(|(_, g)| g.to + g.len <= w.from);
    let (mut at, end) = (w.from, w.from + w.len);
    while at < end {
        let (src, g) = gather[i];
        let skip = at - g.to;
        let len = (g.len - skip).min(end - at);
        let piece = Piece::new(g.from + skip, w.to + (at - w.from), len);
        match out.last_mut() {
            Some(last) if last.src == src && last.piece.continued_by(&piece) => {
                last.piece.len += len
            }
            _ => out.push(DirectPiece { src, piece }),
        }
        at += len;
        i += 1;
    }
}

/// Tile `d` mutably and tile `s` (another) shared.
fn pair_mut(tiles: &mut [TileState], d: usize, s: usize) -> (&mut TileState, &TileState) {
    if d < s {
        let (low, high) = tiles.split_at_mut(s);
        (&mut low[d], &high[0])
    } else {
        let (low, high) = tiles.split_at_mut(d);
        (&mut high[0], &low[s])
    }
}

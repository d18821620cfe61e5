//! Exchanges: how the byte copies of an `ipusim_compiler` exchange are planned once, when
//! the engine is built, and applied at every execution.
//!
//! An exchange means: every source is read, then every destination is written in copy
//! order. The plan gathers every copy's source into a staging buffer in copy order, then
//! applies each destination tile's writes from it, their order within the tile kept;
//! adjacent moves (contiguous in both memories) are merged into one, so that the many
//! small copies of a broadcast or of a row-by-row layout cost a few `memcpy`s. Destination
//! tiles are disjoint, so a large exchange writes them in parallel. (Moving bytes straight
//! from source tiles, when no destination overlaps a source, measured slower on the
//! flagship: the staged reads are cache-hot and merge better.)
//!
//! A large exchange ([`ExchangePlan::defers`]) run by [`super::Engine::run`] may leave its
//! writes pending after the gather ([`ExchangePlan::gather`]): when the next step is a
//! compute set, each of its tiles takes its own writes ([`ExchangePlan::writes_along`]) just
//! before its vertices run, on the thread that runs them, and the tiles without work there
//! take theirs after it ([`ExchangePlan::scatter_except`]); any other next step applies
//! them all first ([`ExchangePlan::scatter`]). A vertex reads and writes only its own
//! tile's memory, so every tile sees the same bytes at the same point of its work as when
//! the exchange wrote everything at once; what changes is that a tile's operands are
//! written while its vertices are about to read them, in the host's cache, instead of
//! megabytes earlier (the 1024³ matmul's step one fifth faster on one host thread).
//!
//! The sources of a deferring exchange can be gathered earlier still, by the compute set
//! before it: each of its tiles copies its own moves' bytes into the staging buffer as soon
//! as its vertices are done, and the exchange gathers only the other tiles'
//! ([`ExchangePlan::early_moves`], [`ExchangePlan::gather_except`]). The engine does so
//! where the compute set wrote the sources and the moves are large
//! (`Engine::gathers_after`, [`EARLY_MOVE_BYTES`]): a reduction's partials are read while
//! in the host's cache instead of from memory (the 1024³ matmul's step a quarter faster on
//! two host threads).
//!
//! On one host thread, an exchange of such large moves whose destinations overlap none of
//! its sources skips the staging buffer: each tile's writes read the source tiles directly
//! ([`direct`]).
//!
//! The cycles, bytes and trace of an exchange come from the executable's copies, not from
//! these moves.

pub(super) mod direct;

use super::error::EngineError;
use super::memory::TileIndex;
use super::{TileState, Workers};
use ipusim_exe::cycles;
use ipusim_exe::executable::{Exchange, Executable};
use ipusim_exe::system::TileId;
use rayon::prelude::*;

/// Exchanges moving at least this many bytes write their destination tiles in parallel
/// (below it, handing the work to a pool costs more than the copies), and may leave their
/// writes to the compute set that follows (below it, the writes stay in the host's cache
/// anyway, and finding each tile's own costs more than it saves: the flagship MLP's step
/// was 20% slower with every exchange deferred). Our choice.
const PARALLEL_BYTES: u64 = 256 << 10;

/// A deferring exchange whose moves are this many bytes or more on average is gathered
/// early, tile by tile, by the compute set before it (module docs). Our choice, measured:
/// a reduction's partials (kilobytes per move) gathered right after the vertices that wrote
/// them made the 1024³ matmul's step a quarter faster on two host threads, while the hundreds
/// of bytes per move of a convolution network's exchanges, from adjacent bytes of the
/// staging buffer written by different threads, made ResNet-50's slower.
const EARLY_MOVE_BYTES: usize = 1024;

/// An exchange, ready to run.
#[derive(Clone, Debug)]
pub(crate) struct ExchangePlan {
    /// [`cycles::exchange_cycles`].
    pub cycles: u64,
    /// [`cycles::exchange_tile_cycles`].
    pub tile_cycles: Vec<(TileId, u64)>,
    /// Bytes moved (every destination counted).
    pub bytes: u64,
    /// Bytes of all sources.
    source_bytes: usize,
    /// (dense source tile, source offset → staging offset), in copy order: the staging
    /// ranges of the moves are disjoint.
    gather: Vec<SourceMove>,
    /// For a deferring exchange, the indices of `gather` by source tile (ascending), in copy
    /// order within each: a compute set just before the exchange gathers a tile's sources
    /// as soon as its vertices are done ([`ExchangePlan::early_moves`]).
    by_tile: Vec<u32>,
    /// Each source tile's run of `by_tile`: (dense tile, range), ascending.
    segments: Vec<(usize, std::ops::Range<usize>)>,
    /// Dense destination tiles, ascending.
    dst_tiles: Vec<usize>,
    /// For each of `dst_tiles`, its writes (staging offset → tile offset) in copy order.
    scatter: Vec<Vec<Piece>>,
}

/// A move from a source tile: (dense source tile, source offset → staging offset).
pub(super) type SourceMove = (usize, Piece);

/// One contiguous byte move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    /// Offset read from.
    pub from: usize,
    /// Offset written to.
    pub to: usize,
    /// Bytes.
    pub len: usize,
}

impl Piece {
    fn new(from: usize, to: usize, len: usize) -> Piece {
        Piece { from, to, len }
    }

    /// Whether `p` starts where `self` ends in both memories (one move does both, with the
    /// same bytes landing in the same places in the same order).
    fn continued_by(&self, p: &Piece) -> bool {
        self.from + self.len == p.from && self.to + self.len == p.to
    }
}

/// Appends `p` to `pieces`, extending the last piece when `p` continues it.
fn push(pieces: &mut Vec<Piece>, p: Piece) {
    match pieces.last_mut() {
        Some(last) if last.continued_by(&p) => last.len += p.len,
        _ => pieces.push(p),
    }
}

impl ExchangePlan {
    /// Checks every copy of `ex` against the tile memories (`sizes` per dense tile) and
    /// plans its moves.
    pub fn new(
        exe: &Executable,
        ex: &Exchange,
        index: &TileIndex,
        sizes: &[usize],
    ) -> Result<ExchangePlan, EngineError> {
        let mut gather: Vec<SourceMove> = Vec::new();
        // Per dense destination tile, its writes (staging offset → tile offset) in copy
        // order: filled copy by copy, so no sort is needed.
        let mut per_tile: Vec<Vec<Piece>> = vec![Vec::new(); sizes.len()];
        let mut source_bytes = 0usize;
        for (i, c) in ex.copies.iter().enumerate() {
            let what = || format!("exchange '{}', copy {i}", ex.name);
            let len = c.bytes as usize;
            // The dense index of `tile`, whose bytes `[at, at + len)` must exist.
            let place = |which: &str, tile: TileId, at: usize| -> Result<usize, EngineError> {
                let d = index.require(tile, &what)?;
                if at + len > sizes[d] {
                    return Err(EngineError::invalid(format!(
                        "{}: {which} bytes [{at}, {}) outside tile {tile}",
                        what(),
                        at + len
                    )));
                }
                Ok(d)
            };
            let so = c.src_offset as usize;
            let s = place("source", c.src_tile, so)?;
            let read = Piece::new(so, source_bytes, len);
            match gather.last_mut() {
                Some((tile, last)) if *tile == s && last.continued_by(&read) => last.len += len,
                _ => gather.push((s, read)),
            }
            for d in &c.dsts {
                let o = d.offset as usize;
                let t = place("destination", d.tile, o)?;
                push(&mut per_tile[t], Piece::new(source_bytes, o, len));
            }
            source_bytes += len;
        }
        let bytes = ex.total_bytes();
        // A deferring exchange's moves by source tile (ascending), in copy order within each,
        // when they are large ([`EARLY_MOVE_BYTES`]).
        let (by_tile, segments) =
            if bytes >= PARALLEL_BYTES && source_bytes >= EARLY_MOVE_BYTES * gather.len() {
                by_source_tile(&gather)
            } else {
                (Vec::new(), Vec::new())
            };
        let (mut dst_tiles, mut scatter) = (Vec::new(), Vec::<Vec<Piece>>::new());
        for (t, pieces) in per_tile.into_iter().enumerate() {
            if !pieces.is_empty() {
                dst_tiles.push(t);
                scatter.push(pieces);
            }
        }
        Ok(ExchangePlan {
            cycles: if ex.crosses_ipus() {
                cycles::ipu_copy_cycles(&exe.target, &exe.system, ex)
            } else {
                cycles::exchange_cycles(&exe.target, ex)
            },
            tile_cycles: cycles::exchange_tile_cycles(&exe.target, ex),
            bytes,
            source_bytes,
            gather,
            by_tile,
            segments,
            dst_tiles,
            scatter,
        })
    }

    /// Applies the moves to the tiles (`staging`: a reusable buffer, kept at the largest
    /// size any exchange needed; `workers`: where a large exchange's sources are gathered
    /// and its destination tiles written).
    pub(super) fn apply(&self, tiles: &mut [TileState], staging: &mut Vec<u8>, workers: &Workers) {
        self.gather(tiles, staging, workers);
        self.scatter(tiles, staging, workers);
    }

    /// Whether a compute set just before it gathers its sources early (a deferring exchange
    /// of large moves, [`EARLY_MOVE_BYTES`]).
    pub(super) fn gathers_early(&self) -> bool {
        !self.segments.is_empty()
    }

    /// The bytes its sources take in the staging buffer.
    pub(super) fn source_bytes(&self) -> usize {
        self.source_bytes
    }

    /// For a compute set on the dense tiles `dense` (ascending) just before this exchange,
    /// each of its tiles' moves here (indices of the exchange's moves; `None` for a tile
    /// that sends nothing, and for every tile of an exchange that does not defer), in
    /// `dense` order: the tile's sources, gathered as soon as its vertices are done
    /// ([`EarlyGather::tile`]) while they are in the host's cache.
    pub(super) fn early_moves(&self, dense: &[usize]) -> Vec<Option<&[u32]>> {
        let mut seg = self.segments.iter().peekable();
        (dense.iter())
            .map(|&d| {
                while seg.next_if(|(t, _)| *t < d).is_some() {}
                match seg.peek() {
                    Some((t, r)) if *t == d => Some(&self.by_tile[r.clone()]),
                    _ => None,
                }
            })
            .collect()
    }

    /// The sources of the tiles not in `done` (dense, ascending: the compute set before
    /// the exchange, whose tiles gathered theirs early) into `staging`.
    pub(super) fn gather_except(&self, tiles: &[TileState], staging: &mut [u8], done: &[usize]) {
        let mut rest = done.iter().peekable();
        for (d, r) in &self.segments {
            while rest.next_if(|&&t| t < *d).is_some() {}
            if rest.peek() != Some(&d) {
                let mem = tiles[*d].mem.bytes();
                for &i in &self.by_tile[r.clone()] {
                    let p = self.gather[i as usize].1;
                    staging[p.to..p.to + p.len].copy_from_slice(&mem[p.from..p.from + p.len]);
                }
            }
        }
    }

    /// The staging buffer `staging` (at least [`ExchangePlan::source_bytes`] long) open to
    /// the tiles' early gathers.
    pub(super) fn early_gather<'a>(&'a self, staging: &'a mut [u8]) -> EarlyGather<'a> {
        assert!(staging.len() >= self.source_bytes);
        EarlyGather {
            moves: &self.gather,
            staging: staging.as_mut_ptr(),
            _buffer: std::marker::PhantomData,
        }
    }

    /// Whether the engine may leave this exchange's writes to the compute set that follows
    /// it (see the module docs).
    pub(super) fn defers(&self) -> bool {
        self.bytes >= PARALLEL_BYTES
    }

    /// The first half of [`ExchangePlan::apply`]: every source read into `staging` (grown
    /// to the exchange's size when smaller).
    pub(super) fn gather(&self, tiles: &[TileState], staging: &mut Vec<u8>, workers: &Workers) {
        if staging.len() < self.source_bytes {
            staging.resize(self.source_bytes, 0);
        }
        let staging = &mut staging[..self.source_bytes];
        let large = self.bytes >= PARALLEL_BYTES;
        workers.install(large, |parallel| {
            if parallel {
                gather_parallel(&self.gather, tiles, staging)
            } else {
                gather(&self.gather, tiles, staging)
            }
        });
    }

    /// The second half of [`ExchangePlan::apply`]: every destination tile's writes from
    /// `staging` (filled by [`ExchangePlan::gather`]).
    pub(super) fn scatter(&self, tiles: &mut [TileState], staging: &[u8], workers: &Workers) {
        let write = |(st, pieces): (&mut TileState, &Vec<Piece>)| {
            write_tile(st.mem.bytes_mut(), pieces, staging)
        };
        let targets = super::select_mut(tiles, &self.dst_tiles);
        workers.install(self.bytes >= PARALLEL_BYTES, |parallel| {
            if parallel {
                targets.into_par_iter().zip(&self.scatter).for_each(write)
            } else {
                targets.into_iter().zip(&self.scatter).for_each(write)
            }
        });
    }

    /// The writes of each of the dense tiles `dense` (ascending; none for a tile that is not
    /// a destination), for [`write_tile`]: found in one walk along both lists.
    pub(super) fn writes_along(&self, dense: &[usize]) -> Vec<&[Piece]> {
        let mut dst = self.dst_tiles.iter().zip(&self.scatter).peekable();
        (dense.iter())
            .map(|&d| {
                while dst.next_if(|&(&t, _)| t < d).is_some() {}
                match dst.peek() {
                    Some(&(&t, pieces)) if t == d => pieces.as_slice(),
                    _ => &[],
                }
            })
            .collect()
    }

    /// [`ExchangePlan::scatter`] on the destination tiles not in `done` (dense, ascending:
    /// the tiles that took their writes with [`ExchangePlan::writes_along`]).
    pub(super) fn scatter_except(&self, tiles: &mut [TileState], staging: &[u8], done: &[usize]) {
        let mut rest = done.iter().peekable();
        for (&d, pieces) in self.dst_tiles.iter().zip(&self.scatter) {
            while rest.next_if(|&&t| t < d).is_some() {}
            if rest.peek() != Some(&&d) {
                write_tile(tiles[d].mem.bytes_mut(), pieces, staging);
            }
        }
    }
}

/// Applies one destination tile's writes (its pieces of [`ExchangePlan::writes_along`]) from
/// the staging buffer to its memory, in their order.
pub(super) fn write_tile(mem: &mut [u8], pieces: &[Piece], staging: &[u8]) {
    for p in pieces {
        mem[p.to..p.to + p.len].copy_from_slice(&staging[p.from..p.from + p.len]);
    }
}

/// The indices of `gather` by source tile (ascending), in copy order within each, and each
/// tile's run of them.
fn by_source_tile(gather: &[SourceMove]) -> (Vec<u32>, Vec<(usize, std::ops::Range<usize>)>) {
    let mut order: Vec<u32> = (0..gather.len() as u32).collect();
    order.sort_by_key(|&i| gather[i as usize].0);
    let mut segments = Vec::new();
    let mut at = 0;
    for run in order.chunk_by(|&a, &b| gather[a as usize].0 == gather[b as usize].0) {
        segments.push((gather[run[0] as usize].0, at..at + run.len()));
        at += run.len();
    }
    (order, segments)
}

/// A staging buffer the tiles of a compute set fill at once, each with its own moves of
/// the exchange that follows ([`ExchangePlan::early_gather`]). The moves' staging ranges
/// are disjoint (each is one run of copies, placed one after the other in
/// [`ExchangePlan::new`]) and each move belongs to one tile, so no two tiles write the
/// same byte; the buffer is reached only through this pointer while the tiles run (it is
/// borrowed mutably for `'a`).
pub(super) struct EarlyGather<'a> {
    moves: &'a [SourceMove],
    staging: *mut u8,
    _buffer: std::marker::PhantomData<&'a mut [u8]>,
}

// SAFETY: the tiles write disjoint bytes of the buffer (see the type's docs), which nothing
// else reads or writes while they run.
unsafe impl Send for EarlyGather<'_> {}
// SAFETY: as for `Send`.
unsafe impl Sync for EarlyGather<'_> {}

impl EarlyGather<'_> {
    /// Gathers the moves `which` (one tile's, from [`ExchangePlan::early_moves`]) from that
    /// tile's memory `mem`.
    pub(super) fn tile(&self, which: &[u32], mem: &[u8]) {
        for &i in which {
            let p = self.moves[i as usize].1;
            let from = &mem[p.from..p.from + p.len];
            // SAFETY: `p.to + p.len` is within the buffer (the plan's staging size, which
            // `early_gather` checked), and no other tile writes these bytes (type docs).
            unsafe {
                std::ptr::copy_nonoverlapping(from.as_ptr(), self.staging.add(p.to), p.len);
            }
        }
    }
}

/// Copies the sources of `pieces` into `out`, which begins at the first piece's staging
/// offset (the pieces are in staging order, each starting where the one before ends).
fn gather(pieces: &[SourceMove], tiles: &[TileState], out: &mut [u8]) {
    let base = pieces.first().map_or(0, |(_, p)| p.to);
    for &(s, p) in pieces {
        out[p.to - base..p.to - base + p.len]
            .copy_from_slice(&tiles[s].mem.bytes()[p.from..p.from + p.len]);
    }
}

/// [`gather`] on the host threads: the pieces cut into runs of about equal bytes, each run
/// filling its own range of the staging buffer.
fn gather_parallel(pieces: &[SourceMove], tiles: &[TileState], staging: &mut [u8]) {
    let runs = 4 * rayon::current_num_threads();
    let share = staging.len().div_ceil(runs).max(1);
    let mut jobs: Vec<(&[SourceMove], &mut [u8])> = Vec::with_capacity(runs);
    let (mut rest, mut out, mut at) = (pieces, staging, 0usize);
    while !rest.is_empty() {
        // The run ends at the first piece that starts `share` bytes or more past its start.
        let end = rest
            .iter()
            .position(|(_, p)| p.to >= at + share)
            .unwrap_or(rest.len())
            .max(1);
        let bytes = rest.get(end).map_or(out.len(), |(_, p)| p.to - at);
        let (run, tail) = rest.split_at(end);
        let (dst, more) = std::mem::take(&mut out).split_at_mut(bytes);
        jobs.push((run, dst));
        (rest, out, at) = (tail, more, at + bytes);
    }
    jobs.into_par_iter()
        .for_each(|(run, dst)| gather(run, tiles, dst));
}

#[cfg(test)]
mod tests;

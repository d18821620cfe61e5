//! Tile mappings: which element intervals of a tensor live on which tile, the linear
//! mapping of fresh tensors (grain sizes that respect vector widths), and the interval index
//! used to find where an element lives.

use crate::cycles::vertex::elementwise_cycles;
use crate::executable::{Interval, TileSlice};
use crate::target::Target;
use ipusim_exe::radix;
use ipusim_exe::system::TileId;
use ipusim_ir::DType;

/// A tensor's mapping while lowering: per tile (ascending), ascending disjoint element
/// intervals `[begin, end)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mapping {
    /// `(tile, intervals)`, sorted by tile, no empty entries.
    pub tiles: Vec<(u32, Vec<(u64, u64)>)>,
}

impl Mapping {
    /// Builds a mapping from unordered `(tile, begin, end)` pieces.
    pub fn from_pieces(mut pieces: Vec<(u32, u64, u64)>) -> Mapping {
        pieces.retain(|p| p.2 > p.1);
        sort_pieces(&mut pieces);
        let mut tiles: Vec<(u32, Vec<(u64, u64)>)> = Vec::new();
        for (tile, b, e) in pieces {
            match tiles.last_mut() {
                Some((t, iv)) if *t == tile => match iv.last_mut() {
                    Some(last) if last.1 == b => last.1 = e,
                    _ => iv.push((b, e)),
                },
                _ => tiles.push((tile, vec![(b, e)])),
            }
        }
        Mapping { tiles }
    }

    /// Total elements mapped.
    #[cfg(test)]
    pub fn num_elements(&self) -> u64 {
        self.tiles
            .iter()
            .flat_map(|(_, iv)| iv)
            .map(|(b, e)| e - b)
            .sum()
    }

    /// The intervals on `tile`.
    #[cfg(test)]
    pub fn on(&self, tile: u32) -> &[(u64, u64)] {
        match self.tiles.binary_search_by_key(&tile, |(t, _)| *t) {
            Ok(i) => &self.tiles[i].1,
            Err(_) => &[],
        }
    }
}

/// Bits of a piece's first element in [`sort_pieces`]' radix key (its tile above them).
const PIECE_BEGIN_BITS: u32 = 40;

/// Sorts `(tile, begin, end)` pieces as `sort_unstable` does: by a radix sort of
/// `tile << 40 | begin` when every piece's key fits (a mapping's pieces are disjoint, so
/// the keys order them all), else, or when two pieces share a key, by comparisons.
fn sort_pieces(pieces: &mut [(u32, u64, u64)]) {
    let fits = pieces
        .iter()
        .all(|p| p.0 < 1 << (u64::BITS - PIECE_BEGIN_BITS) && p.1 < 1 << PIECE_BEGIN_BITS);
    if !fits {
        pieces.sort_unstable();
        return;
    }
    let key = |p: &(u32, u64, u64)| u64::from(p.0) << PIECE_BEGIN_BITS | p.1;
    radix::sort_by_key(pieces, key);
    if pieces.windows(2).any(|w| key(&w[0]) == key(&w[1])) {
        pieces.sort_unstable();
    }
}

/// One interval of a tensor in its index: elements `[begin, end)` on `tile`, starting at
/// element position `pos` of the tensor's slice on that tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seg {
    pub begin: u64,
    pub end: u64,
    pub tile: u32,
    pub pos: u64,
}

/// The interval index of a mapping: its segments sorted by `begin`, with their ends in a
/// dense array of their own so that the binary search of [`locate`] touches few cache lines.
#[derive(Clone, Debug, Default)]
pub struct Index {
    segs: Vec<Seg>,
    ends: Vec<u64>,
}

impl std::ops::Deref for Index {
    type Target = [Seg];
    fn deref(&self) -> &[Seg] {
        &self.segs
    }
}

/// The interval index of a mapping (also the tests' reference for [`slices_index`]).
pub fn build_index(mapping: &Mapping) -> Index {
    let mut segs = Vec::new();
    for (tile, iv) in &mapping.tiles {
        let mut pos = 0;
        for &(b, e) in iv {
            segs.push(Seg {
                begin: b,
                end: e,
                tile: *tile,
                pos,
            });
            pos += e - b;
        }
    }
    segs.sort_unstable_by_key(|s| s.begin);
    let ends = segs.iter().map(|s| s.end).collect();
    Index { segs, ends }
}

/// Bits of a segment's position in [`sorted_by_begin`]'s packed keys.
const POSITION_BITS: u32 = 24;

/// `segs` sorted by their first elements (distinct in a mapping). A feature map's
/// segments interleave over its tiles, and the hands-on day's step 2 builds 24 M of them
/// into its indexes: they are sorted as packed keys (first element above the segment's
/// position; a radix sort by the first elements, the positions ascending already), eight
/// bytes moved where a segment is 32, and gathered once; a segment list whose keys do not
/// fit is sorted as it is.
fn sorted_by_begin(segs: Vec<Seg>) -> Vec<Seg> {
    let n = segs.len();
    if segs.windows(2).all(|w| w[0].begin <= w[1].begin) {
        return segs;
    }
    let fits = n < 1 << POSITION_BITS
        && segs
            .iter()
            .all(|s| s.begin < 1 << (u64::BITS - POSITION_BITS));
    if !fits {
        let mut segs = segs;
        segs.sort_unstable_by_key(|s| s.begin);
        return segs;
    }
    let mut keys: Vec<u64> = segs
        .iter()
        .enumerate()
        .map(|(i, s)| s.begin << POSITION_BITS | i as u64)
        .collect();
    radix::sort_words_above(&mut keys, POSITION_BITS);
    let mask = (1u64 << POSITION_BITS) - 1;
    keys.iter().map(|&k| segs[(k & mask) as usize]).collect()
}

/// Slices of a mapping on IPU `ipu`, with interval offsets relative to the slice start.
pub fn tile_slices(mapping: &Mapping, dtype: DType, ipu: u32) -> Vec<TileSlice> {
    let es = dtype.size_bytes() as u64;
    mapping
        .tiles
        .iter()
        .map(|(tile, iv)| {
            let mut pos = 0u64;
            let mut intervals = crate::executable::Intervals::with_capacity(iv.len());
            for &(b, e) in iv {
                let offset = pos.wrapping_mul(es);
                pos += e - b;
                match u32::try_from(e - b) {
                    Ok(len) => intervals.push(Interval {
                        begin: b,
                        len,
                        offset: offset as u32,
                    }),
                    Err(_) => intervals.extend(Interval::pieces(b, e, offset, es)),
                }
            }
            TileSlice {
                tile: TileId::new(ipu, *tile),
                offset: 0,
                intervals,
            }
        })
        .collect()
}

/// The interval index of a tensor built from its slices (before the memory plan, when an
/// interval's byte offset is still its slice-relative position times the element size):
/// the index [`build_index`] gives the mapping the slices were built from.
pub fn slices_index(t: &crate::executable::Tensor) -> Index {
    let es = t.dtype.size_bytes().max(1) as u64;
    let count = t.slices.iter().map(|s| s.intervals.len()).sum();
    let mut segs: Vec<Seg> = Vec::with_capacity(count);
    segs.extend(t.slices.iter().flat_map(|s| {
        s.intervals.iter().map(|iv| Seg {
            begin: iv.begin,
            end: iv.end(),
            tile: s.tile.tile(),
            pos: u64::from(iv.offset) / es,
        })
    }));
    let segs = sorted_by_begin(segs);
    let ends = segs.iter().map(|s| s.end).collect();
    Index { segs, ends }
}

/// The index of the segment holding element `elem`.
pub fn locate(index: &Index, elem: u64) -> Option<usize> {
    let i = index.ends.partition_point(|&e| e <= elem);
    (i < index.segs.len() && index.segs[i].begin <= elem).then_some(i)
}

/// A hint for [`locate_from`] before any answer: the search bisects the whole index (a
/// gallop from the first segment would take twice the probes).
pub const NO_HINT: usize = usize::MAX;

/// [`locate`] for element `elem` of a search that went through segment `hint` last. Ranges
/// mostly ascend, though often past other tiles' segments (a feature map's rows): from a
/// `hint` at or before `elem` the search gallops forward (`hint`, +1, +2, +4, …) and then
/// bisects what it stepped over, a few probes near the last answer where bisecting the
/// whole index takes many, far apart.
pub fn locate_from(index: &Index, hint: usize, elem: u64) -> Option<usize> {
    let n = index.len();
    if hint >= n || index.segs[hint].begin > elem {
        return locate(index, elem);
    }
    // Every segment before `hint` ends at or before `hint`'s begin (they are disjoint and
    // sorted), so the answer is at or after it; every one before `lo` ends by `elem`.
    let ends = &index.ends;
    let (mut lo, mut hi, mut step) = (hint, hint, 1usize);
    while hi < n && ends[hi] <= elem {
        lo = hi + 1;
        hi = hint.saturating_add(step);
        step = step.saturating_mul(2);
    }
    let hi = hi.min(n);
    let i = lo + ends[lo..hi].partition_point(|&e| e <= elem);
    (i < n && index.segs[i].begin <= elem).then_some(i)
}

/// The position in a tensor's slice on one tile (`slice`, elements of `es` bytes, offsets
/// still slice-relative) where the elements of `ranges` (taken in order) sit contiguously,
/// if they do: the operand can then be read in place. It reads the tile's own intervals
/// (ascending, stored one after the other), not the tensor's element index: a tensor read
/// in place on every tile needs no index (one per tensor and node, 24 M segments sorted on
/// the hands-on day's step 2).
pub fn slice_run(slice: &TileSlice, es: u64, ranges: &[(u64, u64)]) -> Option<u64> {
    let ivs = &slice.intervals;
    let es = es.max(1);
    let mut start: Option<u64> = None;
    let mut expect = 0u64;
    let mut i = 0usize;
    for &(b, len) in ranges {
        let (mut at, end) = (b, b + len);
        while at < end {
            let holds = |j: usize| ivs.get(j).is_some_and(|iv| iv.begin <= at && at < iv.end());
            // Ranges mostly ascend through the tile's intervals: the last one or the next,
            // else a bisection.
            if !holds(i) {
                if holds(i + 1) {
                    i += 1;
                } else {
                    i = ivs.partition_point(|iv| iv.end() <= at);
                    if !holds(i) {
                        return None;
                    }
                }
            }
            let iv = ivs[i];
            let pos = u64::from(iv.offset) / es + (at - iv.begin);
            match start {
                None => {
                    start = Some(pos);
                    expect = pos;
                }
                Some(_) if pos != expect => return None,
                Some(_) => {}
            }
            let take = end.min(iv.end()) - at;
            expect += take;
            at += take;
        }
    }
    start.or(Some(0))
}

/// The messages that gather the elements of `ranges`, in order, from the layout `index`
/// describes: the runs of them that sit one after the other in one tile's memory (as
/// `ExchangeBuilder` merges its copies).
pub fn messages(index: &Index, ranges: &[(u64, u64)]) -> u64 {
    let mut n = 0;
    let mut next: Option<(u32, u64)> = None;
    // No answer yet: the first search bisects the whole index.
    let mut hint = NO_HINT;
    for &(b, len) in ranges {
        let (mut at, end) = (b, b + len);
        while at < end {
            let Some(i) = locate_from(index, hint, at) else {
                return n;
            };
            hint = i;
            let s = index[i];
            let pos = s.pos + (at - s.begin);
            if next != Some((s.tile, pos)) {
                n += 1;
            }
            let take = end.min(s.end) - at;
            next = Some((s.tile, pos + take));
            at += take;
        }
    }
    n
}

/// Elements per grain of `dtype`: one 8-byte atom (4 halves, 2 floats, 8 bytes), so that
/// every tile's first element is aligned for 64-bit vector loads.
pub fn grain(dtype: DType) -> u64 {
    (8 / dtype.size_bytes() as u64).max(1)
}

/// The number of tiles a fresh tensor of `n` elements is spread over. The cost model decides:
/// a tile gets at least as many elements as make the reference element-wise vertex (ScaledAdd)
/// spend as many cycles on work as on its fixed overhead; below that, spreading further no
/// longer shortens compute phases while every extra tile adds exchange messages.
pub fn choose_tiles(target: &Target, n: u64, dtype: DType) -> u32 {
    let min = min_elements_per_tile(target, dtype);
    (n.div_ceil(min).max(1)).min(target.tiles as u64) as u32
}

/// The smallest per-tile element count (a multiple of the grain) at which the reference
/// element-wise vertex costs twice its cost for one grain.
pub fn min_elements_per_tile(target: &Target, dtype: DType) -> u64 {
    let g = grain(dtype);
    let cost_dtype = if dtype.size_bytes() >= 4 {
        DType::F32
    } else {
        DType::F16
    };
    let base = elementwise_cycles(target, cost_dtype, g);
    let mut n = g;
    while elementwise_cycles(target, cost_dtype, n) < 2 * base && n < (1 << 30) {
        n += g;
    }
    n
}

/// A linear mapping of `n` elements over `tiles` consecutive tiles (wrapping) from `start`,
/// in whole grains, as balanced as possible.
pub fn linear(target: &Target, n: u64, dtype: DType, tiles: u32, start: u32) -> Mapping {
    let g = grain(dtype);
    let grains = n.div_ceil(g);
    let t = (tiles as u64).clamp(1, grains.max(1));
    let per = grains / t;
    let extra = grains % t;
    let mut pieces = Vec::with_capacity(t as usize);
    let mut at = 0u64;
    for i in 0..t {
        let take = (per + u64::from(i < extra)) * g;
        let end = (at + take).min(n);
        let tile = ((start as u64 + i) % target.tiles as u64) as u32;
        if end > at {
            pieces.push((tile, at, end));
        }
        at = end;
    }
    Mapping::from_pieces(pieces)
}

pub use ipusim_exe::workers::worker_slices;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_numbers::numbers;

    #[test]
    fn linear_mapping_respects_grains_and_tiles() {
        let t = Target::mk2();
        let m = linear(&t, 1000, DType::F16, 7, 1470);
        assert_eq!(m.num_elements(), 1000);
        assert_eq!(m.tiles.len(), 7);
        for (_, iv) in &m.tiles {
            assert_eq!(iv[0].0 % 4, 0);
        }
        assert!(m.on(0).len() == 1 && m.on(1470).len() == 1);
    }

    #[test]
    fn index_locates() {
        let m = Mapping::from_pieces(vec![(3, 0, 4), (5, 4, 8), (3, 8, 12)]);
        let idx = build_index(&m);
        assert_eq!(idx[locate(&idx, 9).unwrap()].tile, 3);
        assert_eq!(idx[locate(&idx, 4).unwrap()].tile, 5);
        assert_eq!(locate(&idx, 12), None);
    }

    /// A tile's slice of `m` as the lowering builds it: its intervals in order, each stored
    /// after the one before, elements of `es` bytes.
    fn slice_of(m: &Mapping, tile: u32, es: u64) -> TileSlice {
        let mut pos = 0;
        let intervals = m
            .on(tile)
            .iter()
            .map(|&(b, e)| {
                let offset = (pos * es) as u32;
                pos += e - b;
                crate::executable::Interval::new(b, e, offset)
            })
            .collect();
        TileSlice {
            tile: ipusim_exe::system::TileId::new(0, tile),
            offset: 0,
            intervals,
        }
    }

    /// The in-place position by definition: every element of the ranges, in order, is on
    /// `tile`, each at the position after the one before.
    fn run_by_elements(m: &Mapping, tile: u32, ranges: &[(u64, u64)]) -> Option<u64> {
        let position = |x: u64| {
            let mut pos = 0;
            for &(b, e) in m.on(tile) {
                if (b..e).contains(&x) {
                    return Some(pos + x - b);
                }
                pos += e - b;
            }
            None
        };
        let mut elems = ranges.iter().flat_map(|&(b, l)| b..b + l);
        let Some(first) = elems.next() else {
            return Some(0);
        };
        let start = position(first)?;
        for (expect, x) in (start + 1..).zip(elems) {
            if position(x)? != expect {
                return None;
            }
        }
        Some(start)
    }

    #[test]
    fn a_slice_run_is_where_the_elements_sit_one_after_another() {
        let m = Mapping::from_pieces(vec![(3, 0, 4), (5, 4, 8), (3, 8, 12)]);
        let s3 = slice_of(&m, 3, 2);
        assert_eq!(slice_run(&s3, 2, &[(2, 2), (8, 3)]), Some(2));
        assert_eq!(slice_run(&s3, 2, &[(2, 3)]), None);
        assert_eq!(slice_run(&slice_of(&m, 5, 2), 2, &[(4, 4)]), Some(0));
        // Pseudo-random mappings of 60 elements over 3 tiles, and ranges over them
        // (ascending, descending, repeated, past the end).
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        for _ in 0..300 {
            let mut pieces = Vec::new();
            let mut at = 0;
            while at < 60 {
                let len = 1 + next(6);
                pieces.push((next(3) as u32, at, (at + len).min(60)));
                at += len;
            }
            let m = Mapping::from_pieces(pieces);
            for _ in 0..20 {
                let ranges: Vec<(u64, u64)> =
                    (0..1 + next(4)).map(|_| (next(64), next(9))).collect();
                for tile in 0..3 {
                    let want = run_by_elements(&m, tile, &ranges);
                    let es = 1 + next(4);
                    assert_eq!(
                        slice_run(&slice_of(&m, tile, es), es, &ranges),
                        want,
                        "tile {tile}, ranges {ranges:?}, mapping {m:?}"
                    );
                }
            }
        }
    }

    /// The galloping search from any hint finds what bisecting the whole index finds, for
    /// every element (in segments, in gaps between them, past the last) and every hint.
    #[test]
    fn locating_from_a_hint_finds_what_locating_finds() {
        // 40 segments of 1-5 elements with gaps of 0-2 between them.
        let mut segs = Vec::new();
        let mut at = 3u64;
        for k in 0..40u64 {
            let len = 1 + k * 7 % 5;
            segs.push(Seg {
                begin: at,
                end: at + len,
                tile: (k % 3) as u32,
                pos: 0,
            });
            at += len + k * 5 % 3;
        }
        let ends = segs.iter().map(|s| s.end).collect();
        let idx = Index { segs, ends };
        for elem in 0..at + 3 {
            for hint in 0..=idx.len() + 1 {
                assert_eq!(
                    locate_from(&idx, hint, elem),
                    locate(&idx, elem),
                    "element {elem}, hint {hint}"
                );
            }
        }
    }

    #[test]
    fn tiny_tensors_stay_on_few_tiles() {
        let t = Target::mk2();
        assert_eq!(choose_tiles(&t, 10, DType::F32), 1);
        assert!(choose_tiles(&t, 1 << 24, DType::F16) == 1472);
        let min = min_elements_per_tile(&t, DType::F16);
        assert!((64..=1024).contains(&min), "{min}");
        let w = worker_slices(1026, 4, 6);
        assert_eq!(w.len(), 6);
        assert_eq!(w.last().unwrap().1, 1026);
    }

    /// A mapping's pieces sort as tuples on the radix path and on both comparison paths.
    #[test]
    fn pieces_sort_as_tuples_on_every_path() {
        let mut next = numbers(0x2545_f491_4f6c_dd1d);
        // Disjoint pieces over 40 tiles (the radix path above 256 pieces), tiles past the
        // key's 24 bits and first elements past its 40 (the comparison path), and two pieces
        // of one tile starting at one element (a broken list, still sorted as tuples).
        for (count, tile_scale, scale, twin) in [
            (5u64, 1u32, 1u64, false),
            (3000, 1, 1, false),
            (3000, 1, 1 << 38, false),
            (600, 1 << 20, 1, false),
            (600, 1, 1 << 41, false),
            (600, 1, 1, true),
        ] {
            let mut pieces: Vec<(u32, u64, u64)> = (0..count)
                .map(|k| {
                    (
                        (k % 40) as u32 * tile_scale,
                        4 * k * scale,
                        (4 * k + 3) * scale,
                    )
                })
                .collect();
            if twin {
                pieces.push((pieces[7].0, pieces[7].1, pieces[7].2 + 1));
            }
            for i in (1..pieces.len()).rev() {
                pieces.swap(i, next(i as u64 + 1) as usize);
            }
            let mut want = pieces.clone();
            want.sort_unstable();
            sort_pieces(&mut pieces);
            assert_eq!(
                pieces, want,
                "{count} pieces, tiles x{tile_scale}, scale {scale}"
            );
        }
    }

    /// The packed-key sort orders segments as sorting them by first element does: shuffled
    /// interleaved segments (the packed path), already sorted ones, and first elements too
    /// large to pack (the plain path).
    #[test]
    fn segments_sort_by_first_element_on_every_path() {
        let mut next = numbers(0x9e37_79b9_7f4a_7c15);
        for (count, scale) in [
            (0, 1),
            (1, 1),
            (7, 1),
            (1000, 1),
            (5000, 1 << 30),
            (300, 1 << 45),
        ] {
            // Disjoint segments [4k, 4k + 3) * scale spread over 16 tiles, then shuffled.
            let mut segs: Vec<Seg> = (0..count as u64)
                .map(|k| Seg {
                    begin: 4 * k * scale,
                    end: (4 * k + 3) * scale,
                    tile: (k % 16) as u32,
                    pos: k,
                })
                .collect();
            let sorted = sorted_by_begin(segs.clone());
            assert_eq!(sorted, segs, "{count} segments in order stay as they are");
            for i in (1..segs.len()).rev() {
                segs.swap(i, next(i as u64 + 1) as usize);
            }
            let mut want = segs.clone();
            want.sort_unstable_by_key(|s| s.begin);
            assert_eq!(
                sorted_by_begin(segs),
                want,
                "{count} segments, scale {scale}"
            );
        }
    }
}

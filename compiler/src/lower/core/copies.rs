//! The copies of an exchange: recorded as requests while an op is lowered, built into byte
//! copies (broadcasts merged, contiguous runs joined) apart from the lowering.
//!
//! Building a large graph's copies is a third of its lowering (the hands-on ResNet101: 10.7 M
//! copies, each source element found in its tensor's index and deduplicated by hash), and
//! nothing the lowering decides depends on them beyond whether an exchange has any. So
//! an op records its requests in a [`Copies`] — what it needs is known when it asks: the
//! source's element index, element size and IPU, and the destination's — and the lowerer
//! hands them to its side thread ([`super::side`]) that builds them while it lowers the next ops. Each
//! exchange is built from its own requests in their order, so the copies are the same
//! whichever thread builds them and whenever. An exchange as a program node of its own is
//! here too; handing its copies to the side thread, and settling them before they are read,
//! is the side thread's ([`super::side`]).

use super::Lowerer;
use crate::executable::{
    ByteCopy, CopyDst, CopyDsts, Exchange, ExchangeId, Program, ProgramStep, StepKind, TensorId,
};
use crate::lower::kit::mapping::{locate, locate_from, Index, NO_HINT};
use ipusim_exe::system::TileId;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// A fast non-cryptographic hasher for the copy dedup keys (the FxHash mixing step); the
/// keys are compiler-generated integers, so no DoS resistance is needed.
#[derive(Default)]
pub(crate) struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// A tensor copies read from: its element index, element size in bytes and IPU.
#[derive(Clone)]
pub(crate) struct Source {
    pub tensor: TensorId,
    pub index: Arc<Index>,
    pub es: u64,
    pub ipu: u32,
}

/// Where requested elements go: element position `pos` of `tensor`'s slice on `tile` (of
/// IPU `ipu`); positions are slice-relative until the memory plan.
#[derive(Clone, Copy)]
pub(crate) struct Dest {
    pub tensor: TensorId,
    pub ipu: u32,
    pub tile: u32,
    pub pos: u64,
}

/// One recorded request: the ranges `(begin, len)` of a source, in order, to a destination;
/// `whole` when it was asked as one operand (a later request for the same ranges into the
/// same tensor joins its copies, [`CopyBuilder::copy_ranges`]).
struct Request {
    source: u32,
    ranges: std::ops::Range<usize>,
    dst: Dest,
    whole: bool,
}

/// The requests of one exchange (or one part of it), in order.
#[derive(Default)]
pub(crate) struct Recorded {
    sources: Vec<Source>,
    source_of: FxMap<TensorId, u32>,
    ranges: Vec<(u64, u64)>,
    requests: Vec<Request>,
}

impl Recorded {
    /// Records a request for the elements of `ranges` of source tensor `src_tensor`, in
    /// order, to `dst`: `index` is the source's element index now, and `src` gives the
    /// source when this exchange has not recorded it with that index (a tensor mapped again
    /// since is recorded again, so each request is built as it would have been when made).
    pub fn request(
        &mut self,
        (src_tensor, index): (TensorId, &Index),
        src: impl FnOnce() -> Source,
        ranges: &[(u64, u64)],
        dst: Dest,
        whole: bool,
    ) {
        let known = self
            .source_of
            .get(&src_tensor)
            .copied()
            .filter(|&i| std::ptr::eq(&*self.sources[i as usize].index, index));
        let source = match known {
            Some(i) => i,
            None => {
                self.sources.push(src());
                let i = self.sources.len() as u32 - 1;
                self.source_of.insert(src_tensor, i);
                i
            }
        };
        let r0 = self.ranges.len();
        self.ranges.extend_from_slice(ranges);
        self.requests.push(Request {
            source,
            ranges: r0..self.ranges.len(),
            dst,
            whole,
        });
    }

    /// Forgets the requests, keeping the lists' room.
    fn clear(&mut self) {
        self.sources.clear();
        self.source_of.clear();
        self.ranges.clear();
        self.requests.clear();
    }

    /// Whether nothing was recorded and the lists have no room yet (a fresh list, which an
    /// emptied one may replace).
    pub fn is_fresh(&self) -> bool {
        self.requests.capacity() == 0 && self.ranges.capacity() == 0
    }

    /// Whether some request makes or joins a copy: one of its ranges is not empty and starts
    /// at an element its source maps.
    fn makes_copies(&self) -> bool {
        self.requests.iter().any(|r| {
            let s = &self.sources[r.source as usize];
            self.ranges[r.ranges.clone()]
                .iter()
                .any(|&(b, len)| len > 0 && locate(&s.index, b).is_some())
        })
    }

    /// The copies, built in request order.
    fn build(&self) -> Vec<ByteCopy> {
        let mut b = CopyBuilder::default();
        // Every recorded range not joined to an earlier request's copies makes at least one
        // piece, and every new piece a copy and its dedup entry: room for one of each per
        // range spares the map its doublings (each rehashes every entry so far) and the list
        // its (each moves every copy so far). A request joined whole to an earlier one's
        // makes none, so the room is at most the ranges' count, which the recorded ranges
        // already hold in memory; the list gives back what it did not use when its runs
        // merge ([`merge_runs`]).
        b.dedup.reserve(self.ranges.len());
        b.copies.reserve(self.ranges.len());
        // Requests of each source mostly walk it in order: each search starts from the
        // source's last answer.
        let mut cursors = vec![NO_HINT; self.sources.len()];
        for r in &self.requests {
            let s = &self.sources[r.source as usize];
            let cursor = &mut cursors[r.source as usize];
            let ranges = &self.ranges[r.ranges.clone()];
            if r.whole {
                b.copy_ranges(s, cursor, ranges, r.dst);
            } else {
                let mut at = r.dst.pos;
                for &range in ranges {
                    b.copy_pieces(s, cursor, range, Dest { pos: at, ..r.dst }, None);
                    at += range.1;
                }
            }
        }
        b.finish()
    }
}

/// One part of an exchange's copies: built already, or recorded requests.
enum Part {
    Built(Vec<ByteCopy>),
    Recorded(Recorded),
}

/// An exchange's copies, in parts whose copies follow one another (the supersteps of lanes
/// emitted as one exchange keep each lane's copies apart, as they were built apart).
#[derive(Default)]
pub(crate) struct Copies {
    parts: Vec<Part>,
}

impl From<Vec<ByteCopy>> for Copies {
    fn from(copies: Vec<ByteCopy>) -> Copies {
        Copies {
            parts: vec![Part::Built(copies)],
        }
    }
}

impl From<Recorded> for Copies {
    fn from(r: Recorded) -> Copies {
        Copies {
            parts: vec![Part::Recorded(r)],
        }
    }
}

impl Copies {
    /// `other`'s copies after these.
    pub fn append(&mut self, other: Copies) {
        self.parts.extend(other.parts);
    }

    /// Whether there are no copies: no part built with copies, and no recorded request
    /// that makes or joins one.
    pub fn is_empty(&self) -> bool {
        self.parts.iter().all(|p| match p {
            Part::Built(c) => c.is_empty(),
            Part::Recorded(r) => !r.makes_copies(),
        })
    }

    /// Whether some part is still to be built.
    pub fn recorded(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Recorded(_)))
    }

    /// The copies, part after part.
    pub fn build(self) -> Vec<ByteCopy> {
        self.build_recycling(|_| {})
    }

    /// The copies, part after part, each recorded part handed to `spare` emptied once
    /// built (its lists keep their room for another exchange's requests).
    pub fn build_recycling(self, mut spare: impl FnMut(Recorded)) -> Vec<ByteCopy> {
        let mut out = Vec::new();
        for p in self.parts {
            match p {
                Part::Built(c) if out.is_empty() => out = c,
                Part::Built(c) => out.extend(c),
                Part::Recorded(mut r) => {
                    let built = r.build();
                    if out.is_empty() {
                        out = built;
                    } else {
                        out.extend(built);
                    }
                    r.clear();
                    spare(r);
                }
            }
        }
        out
    }
}

/// Builds the copies of one exchange, merging copies of the same source bytes into one
/// broadcast copy.
#[derive(Default)]
struct CopyBuilder {
    copies: Vec<ByteCopy>,
    dedup: FxMap<(TensorId, u64, u64, TensorId), usize>,
    /// The requests of [`CopyBuilder::copy_ranges`] made so far, by a fingerprint of
    /// (source, destination tensor, ranges).
    requests: FxMap<u64, Joined>,
    /// The ranges of the recorded requests, end to end.
    request_ranges: Vec<(u64, u64)>,
    /// The pieces of the recorded requests, end to end: the copy each piece made or joined,
    /// and its destination offset relative to the request's first byte.
    request_pieces: Vec<(usize, u32)>,
}

/// A request of [`CopyBuilder::copy_ranges`]: what it asked for and the pieces it became.
struct Joined {
    src: TensorId,
    dst: TensorId,
    ranges: std::ops::Range<usize>,
    pieces: std::ops::Range<usize>,
}

/// The fingerprint of a request (the FxHash of its source, destination tensor and ranges).
fn request_fingerprint(src: TensorId, dst: TensorId, ranges: &[(u64, u64)]) -> u64 {
    let mut h = FxHasher::default();
    h.write_u32(src.0);
    h.write_u32(dst.0);
    for &(b, len) in ranges {
        h.write_u64(b);
        h.write_u64(len);
    }
    h.finish()
}

impl CopyBuilder {
    /// Copies the elements of `ranges` (`(begin, len)` of `src`, in order) to element
    /// positions `dst.pos`, `dst.pos + len₀`, … of `dst`: exactly the copies of
    /// [`CopyBuilder::copy_pieces`] over the ranges one by one. A request for the same ranges
    /// of the same source into the same tensor as an earlier one (another tile's operand of
    /// a broadcast) joins the copies that request made or joined, as the range-by-range path
    /// would find them one lookup at a time, without those lookups.
    fn copy_ranges(&mut self, src: &Source, cursor: &mut usize, ranges: &[(u64, u64)], dst: Dest) {
        let fingerprint = request_fingerprint(src.tensor, dst.tensor, ranges);
        let base = (dst.pos * src.es) as u32;
        if let Some(r) = self.requests.get(&fingerprint) {
            if r.src == src.tensor
                && r.dst == dst.tensor
                && self.request_ranges[r.ranges.clone()] == *ranges
            {
                let tile = TileId::new(dst.ipu, dst.tile);
                for &(c, rel) in &self.request_pieces[r.pieces.clone()] {
                    self.copies[c].dsts.push(CopyDst {
                        tile,
                        offset: base.wrapping_add(rel),
                    });
                }
                return;
            }
        }
        let first_piece = self.request_pieces.len();
        let mut at = dst.pos;
        for &(b, len) in ranges {
            self.copy_pieces(src, cursor, (b, len), Dest { pos: at, ..dst }, Some(base));
            at += len;
        }
        // A fingerprint already taken by another request keeps its first owner; this one
        // stays on the range-by-range path.
        if let Entry::Vacant(v) = self.requests.entry(fingerprint) {
            let r0 = self.request_ranges.len();
            self.request_ranges.extend_from_slice(ranges);
            v.insert(Joined {
                src: src.tensor,
                dst: dst.tensor,
                ranges: r0..self.request_ranges.len(),
                pieces: first_piece..self.request_pieces.len(),
            });
        } else {
            self.request_pieces.truncate(first_piece);
        }
    }

    /// Copies elements `[begin, begin + len)` of `src` to `dst`, the search for `begin` in
    /// the source's index starting from `cursor` (left at the last segment it copies from);
    /// with `record`, the byte offset of the request's first destination byte, also notes
    /// each piece's copy in `request_pieces`.
    fn copy_pieces(
        &mut self,
        src: &Source,
        cursor: &mut usize,
        (begin, len): (u64, u64),
        dst: Dest,
        record: Option<u32>,
    ) {
        let (index, es) = (&*src.index, src.es);
        let end = begin + len;
        let mut at = begin;
        let Some(mut i) = locate_from(index, *cursor, at) else {
            return;
        };
        while at < end && i < index.len() {
            let s = index[i];
            let take = end.min(s.end) - at;
            let src_pos = s.pos + (at - s.begin);
            let dst_off = ((dst.pos + (at - begin)) * es) as u32;
            let key = (src.tensor, at, take, dst.tensor);
            let d = CopyDst {
                tile: TileId::new(dst.ipu, dst.tile),
                offset: dst_off,
            };
            let c = match self.dedup.entry(key) {
                Entry::Occupied(c) => {
                    let c = *c.get();
                    self.copies[c].dsts.push(d);
                    c
                }
                Entry::Vacant(v) => {
                    v.insert(self.copies.len());
                    self.copies.push(ByteCopy {
                        src_tile: TileId::new(src.ipu, s.tile),
                        src_offset: (src_pos * es) as u32,
                        bytes: (take * es) as u32,
                        src_tensor: src.tensor,
                        dst_tensor: dst.tensor,
                        dsts: CopyDsts::from_slice(&[d]),
                    });
                    self.copies.len() - 1
                }
            };
            if let Some(base) = record {
                self.request_pieces.push((c, dst_off.wrapping_sub(base)));
            }
            at += take;
            i += 1;
        }
        *cursor = i.saturating_sub(1);
    }

    /// The copies, each run of copies that continue one another merged into one copy (one
    /// message): a contiguous region moves as one, as Poplar's exchange moves a tensor's
    /// contiguous region, where the requests came element range by element range (a
    /// window's rows, a vertex's operands). Only copies made one after the other merge, so
    /// the order of the copies, and every byte each destination receives, stay the same.
    fn finish(self) -> Vec<ByteCopy> {
        merge_runs(self.copies)
    }
}

/// `copies` with each copy that continues the one before it ([`continues`]) merged into it,
/// in place.
fn merge_runs(mut copies: Vec<ByteCopy>) -> Vec<ByteCopy> {
    let mut kept = 0;
    for i in 0..copies.len() {
        if kept > 0 && continues(&copies[kept - 1], &copies[i]) {
            let bytes = copies[i].bytes;
            copies[kept - 1].bytes += bytes;
        } else {
            copies.swap(kept, i);
            kept += 1;
        }
    }
    copies.truncate(kept);
    // The merged copies are kept to the end of the compile: their list gives back the room
    // the unmerged ones took.
    copies.shrink_to_fit();
    copies
}

/// Whether copy `c` continues `p`: the same source tile and tensors, the source bytes right
/// after `p`'s, and as many destinations, each on the tile of `p`'s and right after its
/// bytes there.
fn continues(p: &ByteCopy, c: &ByteCopy) -> bool {
    p.src_tile == c.src_tile
        && p.src_tensor == c.src_tensor
        && p.dst_tensor == c.dst_tensor
        && p.src_offset.checked_add(p.bytes) == Some(c.src_offset)
        && p.bytes.checked_add(c.bytes).is_some()
        && p.dsts.len() == c.dsts.len()
        && p.dsts
            .iter()
            .zip(&c.dsts)
            .all(|(a, b)| a.tile == b.tile && a.offset.checked_add(p.bytes) == Some(b.offset))
}

impl Lowerer<'_> {
    /// An exchange of `copies` named `name`, as a program node of its own (not in the body
    /// being lowered; its step is listed last until [`Lowerer::rebuild_steps`]).
    pub fn exchange_program(&mut self, name: String, copies: impl Into<Copies>) -> Program {
        let id = ExchangeId(self.exchanges.len() as u32);
        self.exchanges.push(Exchange {
            name: name.clone(),
            node: None,
            copies: Vec::new(),
            cycles: 0,
        });
        self.build_copies(id, copies.into());
        self.steps.push(ProgramStep {
            kind: StepKind::Exchange(id),
            name,
        });
        Program::Exchange(id)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    fn copy(src: (u32, u32), bytes: u32, dsts: &[(u32, u32)], dst_tensor: u32) -> ByteCopy {
        ByteCopy {
            src_tile: TileId::new(0, src.0),
            src_offset: src.1,
            bytes,
            src_tensor: TensorId(1),
            dst_tensor: TensorId(dst_tensor),
            dsts: dsts
                .iter()
                .map(|&(tile, offset)| CopyDst {
                    tile: TileId::new(0, tile),
                    offset,
                })
                .collect(),
        }
    }

    /// A source of 64 half elements spread unevenly over four tiles, one tile holding two
    /// intervals.
    fn source() -> Source {
        use crate::lower::kit::mapping::{build_index, Mapping};
        let pieces = vec![
            (3, 0, 10),
            (7, 10, 13),
            (3, 13, 40),
            (9, 40, 41),
            (12, 41, 64),
        ];
        Source {
            tensor: TensorId(0),
            index: Arc::new(build_index(&Mapping::from_pieces(pieces))),
            es: 2,
            ipu: 0,
        }
    }

    fn dest(tile: u32, pos: u64) -> Dest {
        Dest {
            tensor: TensorId(1),
            ipu: 0,
            tile,
            pos,
        }
    }

    /// A request of the tests: (tile, position, ranges).
    pub(in crate::lower::core) type Req = (u32, u64, Vec<(u64, u64)>);

    /// (tile, position, ranges): `a` repeated on other tiles and positions, `b` overlapping
    /// a's second range, `a` within one request twice, and `a` repeated again after `b`.
    pub(in crate::lower::core) fn requests() -> Vec<Req> {
        let a: Vec<(u64, u64)> = vec![(0, 12), (20, 4), (38, 5)];
        let b: Vec<(u64, u64)> = vec![(20, 4), (50, 14)];
        vec![
            (100, 0, a.clone()),
            (101, 7, a.clone()),
            (102, 3, b.clone()),
            (103, 0, [a.clone(), a.clone()].concat()),
            (104, 40, a.clone()),
            (105, 2, b.clone()),
            (3, 1, a.clone()),
        ]
    }

    /// Requests of whole operands (`copy_ranges`) give exactly the copies of their ranges
    /// requested one by one (`copy_pieces`), when later requests repeat earlier ones on other
    /// tiles (broadcasts replayed), overlap them in part, or are new.
    #[test]
    fn a_replayed_request_gives_the_copies_of_its_ranges_one_by_one() {
        let src = source();
        let (mut whole, mut by_range) = (CopyBuilder::default(), CopyBuilder::default());
        // The searches start from the last answer on one side and from nothing on the
        // other: the hint never changes what is found.
        let mut cursor = NO_HINT;
        for (tile, pos, ranges) in &requests() {
            whole.copy_ranges(&src, &mut cursor, ranges, dest(*tile, *pos));
            let mut at = *pos;
            for &range in ranges {
                let mut fresh = NO_HINT;
                by_range.copy_pieces(&src, &mut fresh, range, dest(*tile, at), None);
                at += range.1;
            }
        }
        // Three distinct requests were recorded; the other four were replayed.
        assert_eq!(whole.requests.len(), 3);
        let (whole, by_range) = (whole.finish(), by_range.finish());
        assert_eq!(whole, by_range);
        // The sample has broadcasts: a's first range reaches all five tiles that asked.
        assert!(whole.iter().any(|c| c.dsts.len() >= 5));
    }

    /// An exchange's request lists, built and handed back emptied, then filled with
    /// another exchange's requests, give that exchange's copies as new lists do.
    #[test]
    fn emptied_request_lists_record_the_next_exchange_as_new_ones() {
        let reqs = requests();
        for (first, second, whole) in [(0, 2, true), (3, 1, false), (1, 0, true)] {
            let mut spare = None;
            let built =
                Copies::from(recorded(&reqs[first..], whole)).build_recycling(|r| spare = Some(r));
            assert_eq!(built, recorded(&reqs[first..], whole).build());
            let spare = spare.expect("the recorded part is handed back");
            assert!(!spare.is_fresh() && !spare.makes_copies());
            // Emptied of all it held (the sources' indexes too), keeping its room.
            assert!(spare.sources.is_empty() && spare.source_of.is_empty());
            assert!(spare.ranges.is_empty() && spare.requests.is_empty());
            let again = fill(spare, &reqs[second..], !whole);
            assert_eq!(again.build(), recorded(&reqs[second..], !whole).build());
        }
    }

    /// The requests `reqs` recorded, as whole operands or not.
    pub(in crate::lower::core) fn recorded(reqs: &[Req], whole: bool) -> Recorded {
        fill(Recorded::default(), reqs, whole)
    }

    /// `r` with the requests `reqs` recorded after its own.
    fn fill(mut r: Recorded, reqs: &[Req], whole: bool) -> Recorded {
        let src = source();
        for (tile, pos, ranges) in reqs {
            r.request(
                (TensorId(0), &src.index),
                || src.clone(),
                ranges,
                dest(*tile, *pos),
                whole,
            );
        }
        r
    }

    /// Exchange `k` of the side thread's test: recorded requests in several parts with
    /// built copies between them.
    pub(in crate::lower::core) fn exchange(k: usize) -> Copies {
        let reqs = requests();
        let mut c = Copies::from(recorded(&reqs[k..], k.is_multiple_of(2)));
        c.append(Copies::from(vec![ByteCopy {
            src_tensor: TensorId(5),
            ..copy((1, 0), 4, &[(2, 0)], 6)
        }]));
        c.append(Copies::from(recorded(&reqs[..k], true)));
        c
    }

    /// Recorded copies are said to be empty exactly when building them gives no copy: when
    /// every request is empty or outside the source, and only then.
    #[test]
    fn recorded_copies_are_empty_exactly_when_they_build_none() {
        for k in 0..requests().len() {
            let want = exchange(k);
            let empty = want.is_empty();
            assert_eq!(empty, want.build().is_empty(), "exchange {k}");
        }
        let outside = || {
            recorded(
                &[(4, 0, vec![(3, 0)]), (5, 0, vec![(64, 2), (70, 0)])],
                true,
            )
        };
        let empty = Copies::from(outside());
        assert!(empty.is_empty());
        assert!(empty.build().is_empty());
        // One request that makes a copy after those that make none.
        let mut some = outside();
        let src = source();
        some.request(
            (TensorId(0), &src.index),
            || src.clone(),
            &[(63, 1)],
            dest(6, 0),
            true,
        );
        let some = Copies::from(some);
        assert!(!some.is_empty());
        assert_eq!(some.build().len(), 1);
    }

    /// A source mapped again between two requests of one exchange (a new element index) is
    /// recorded again: each request is built from the mapping it was made with.
    #[test]
    fn a_source_mapped_again_is_built_from_its_new_mapping() {
        use crate::lower::kit::mapping::{build_index, Mapping};
        let (before, after) = (source(), source());
        let moved = Source {
            index: Arc::new(build_index(&Mapping::from_pieces(vec![(40, 0, 64)]))),
            ..after
        };
        let mut r = Recorded::default();
        for (src, begin, tile) in [(&before, 0, 1), (&before, 0, 2), (&moved, 8, 3)] {
            let ranges = [(begin, 4)];
            r.request(
                (TensorId(0), &src.index),
                || src.clone(),
                &ranges,
                dest(tile, 0),
                false,
            );
        }
        assert_eq!(r.sources.len(), 2);
        let copies = r.build();
        // Elements 0-3 from tile 3 to tiles 1 and 2 (one broadcast), 8-11 from tile 40 (on
        // tile 3 before the source was mapped again).
        assert_eq!(copies.len(), 2);
        assert_eq!((copies[0].src_tile.tile(), copies[0].dsts.len()), (3, 2));
        assert_eq!((copies[1].src_tile.tile(), copies[1].src_offset), (40, 16));
    }

    #[test]
    fn contiguous_runs_merge_into_one_message() {
        // Three rows of 16 bytes, tile 3 to tile 5, then a broadcast pair to tiles 5 and 6.
        let merged = merge_runs(vec![
            copy((3, 0), 16, &[(5, 64)], 2),
            copy((3, 16), 16, &[(5, 80)], 2),
            copy((3, 32), 16, &[(5, 96)], 2),
            copy((3, 100), 8, &[(5, 0), (6, 8)], 2),
            copy((3, 108), 8, &[(5, 8), (6, 16)], 2),
        ]);
        assert_eq!(merged.len(), 2);
        assert_eq!((merged[0].src_offset, merged[0].bytes), (0, 48));
        assert_eq!(merged[0].dsts[0].offset, 64);
        assert_eq!((merged[1].src_offset, merged[1].bytes), (100, 16));
        assert_eq!(merged[1].dsts.len(), 2);
    }

    #[test]
    fn copies_that_do_not_continue_stay_apart() {
        for next in [
            copy((3, 16), 16, &[(6, 16)], 2),         // another destination tile
            copy((3, 16), 16, &[(5, 32)], 2),         // a gap at the destination
            copy((3, 24), 16, &[(5, 16)], 2),         // a gap at the source
            copy((4, 16), 16, &[(5, 16)], 2),         // another source tile
            copy((3, 16), 16, &[(5, 16)], 7),         // another destination tensor
            copy((3, 16), 16, &[(5, 16), (6, 0)], 2), // a broadcast after a single copy
        ] {
            let merged = merge_runs(vec![copy((3, 0), 16, &[(5, 0)], 2), next.clone()]);
            assert_eq!(merged.len(), 2, "{next:?}");
        }
        // Sizes that would overflow a copy's 32-bit byte count stay apart.
        let big = merge_runs(vec![
            copy((3, 0), u32::MAX - 8, &[(5, 0)], 2),
            copy((3, u32::MAX - 8), 16, &[(5, u32::MAX - 8)], 2),
        ]);
        assert_eq!(big.len(), 2);
    }
}

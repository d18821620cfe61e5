//! Gathering operands onto the tiles that need them: exchange copies (with broadcasts
//! merged) and staging tensors that receive them.
//!
//! A vertex reads only its own tile's memory. When the elements it needs already sit
//! contiguously on its tile they are read in place; otherwise they are copied into a
//! staging tensor on that tile by the exchange that precedes the compute set (an on-tile
//! source becomes an on-tile memcpy).

use crate::executable::{ByteCopy, CopyDst, CopyDsts, Operand, TensorId, TensorKind};
use crate::lower::core::Lowerer;
use crate::lower::kit::mapping::{local_run, locate, Mapping};
use ipusim_exe::system::TileId;
use ipusim_ir::{NodeId, Shape};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

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

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// Collects the copies of one exchange, merging copies of the same source bytes into one
/// broadcast copy.
#[derive(Default)]
pub(crate) struct ExchangeBuilder {
    copies: Vec<ByteCopy>,
    dedup: FxMap<(TensorId, u64, u64, TensorId), usize>,
    cursor: FxMap<TensorId, usize>,
    /// The requests of [`ExchangeBuilder::copy_ranges`] made so far, by a fingerprint of
    /// (source, destination tensor, ranges).
    requests: FxMap<u64, Request>,
    /// The ranges of the recorded requests, end to end.
    request_ranges: Vec<(u64, u64)>,
    /// The pieces of the recorded requests, end to end: the copy each piece made or joined,
    /// and its destination offset relative to the request's first byte.
    request_pieces: Vec<(usize, u32)>,
}

/// A recorded request: what it asked for and the pieces it became.
struct Request {
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

impl ExchangeBuilder {
    /// Copies elements `[begin, begin + len)` of `src` to element position `dst_pos` of
    /// `dst`'s slice on `dst_tile` (positions are slice-relative until the memory plan).
    #[allow(clippy::too_many_arguments)]
    pub fn copy_elems(
        &mut self,
        lw: &Lowerer,
        src: TensorId,
        begin: u64,
        len: u64,
        dst: TensorId,
        dst_tile: u32,
        dst_pos: u64,
    ) {
        self.copy_pieces(lw, src, (begin, len), dst, dst_tile, dst_pos, None);
    }

    /// Copies the elements of `ranges` (`(begin, len)` of `src`, in order) to element
    /// positions `dst_pos`, `dst_pos + len₀`, … of `dst`'s slice on `dst_tile`: exactly the
    /// copies of [`ExchangeBuilder::copy_elems`] over the ranges one by one. A request for
    /// the same ranges of the same source into the same tensor as an earlier one (another
    /// tile's operand of a broadcast) joins the copies that request made or joined, as the
    /// range-by-range path would find them one lookup at a time, without those lookups.
    #[allow(clippy::too_many_arguments)]
    pub fn copy_ranges(
        &mut self,
        lw: &Lowerer,
        src: TensorId,
        ranges: &[(u64, u64)],
        dst: TensorId,
        dst_tile: u32,
        dst_pos: u64,
    ) {
        let es = lw.tensor(src).dtype.size_bytes() as u64;
        let fingerprint = request_fingerprint(src, dst, ranges);
        let base = (dst_pos * es) as u32;
        if let Some(r) = self.requests.get(&fingerprint) {
            if r.src == src && r.dst == dst && self.request_ranges[r.ranges.clone()] == *ranges {
                let tile = TileId::new(lw.tensor_ipu(dst), dst_tile);
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
        let mut at = dst_pos;
        for &(b, len) in ranges {
            self.copy_pieces(lw, src, (b, len), dst, dst_tile, at, Some(base));
            at += len;
        }
        // A fingerprint already taken by another request keeps its first owner; this one
        // stays on the range-by-range path.
        if let Entry::Vacant(v) = self.requests.entry(fingerprint) {
            let r0 = self.request_ranges.len();
            self.request_ranges.extend_from_slice(ranges);
            v.insert(Request {
                src,
                dst,
                ranges: r0..self.request_ranges.len(),
                pieces: first_piece..self.request_pieces.len(),
            });
        } else {
            self.request_pieces.truncate(first_piece);
        }
    }

    /// [`ExchangeBuilder::copy_elems`]; with `record`, the byte offset of the request's
    /// first destination byte, also notes each piece's copy in `request_pieces`.
    #[allow(clippy::too_many_arguments)]
    fn copy_pieces(
        &mut self,
        lw: &Lowerer,
        src: TensorId,
        (begin, len): (u64, u64),
        dst: TensorId,
        dst_tile: u32,
        dst_pos: u64,
        record: Option<u32>,
    ) {
        let index = lw.index(src);
        let es = lw.tensor(src).dtype.size_bytes() as u64;
        let (src_ipu, dst_ipu) = (lw.tensor_ipu(src), lw.tensor_ipu(dst));
        let end = begin + len;
        let mut at = begin;
        // Requests mostly walk a tensor in order: try the segment after the last one first.
        let hint = self.cursor.get(&src).copied().unwrap_or(0);
        let mut i = match index.get(hint) {
            Some(s) if s.begin <= at && at < s.end => hint,
            _ => match index.get(hint + 1) {
                Some(s) if s.begin <= at && at < s.end => hint + 1,
                _ => match locate(index, at) {
                    Some(i) => i,
                    None => return,
                },
            },
        };
        while at < end && i < index.len() {
            let s = index[i];
            let take = end.min(s.end) - at;
            let src_pos = s.pos + (at - s.begin);
            let dst_off = ((dst_pos + (at - begin)) * es) as u32;
            let key = (src, at, take, dst);
            let d = CopyDst {
                tile: TileId::new(dst_ipu, dst_tile),
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
                        src_tile: TileId::new(src_ipu, s.tile),
                        src_offset: (src_pos * es) as u32,
                        bytes: (take * es) as u32,
                        src_tensor: src,
                        dst_tensor: dst,
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
        self.cursor.insert(src, i.saturating_sub(1));
    }

    /// The copies, each run of copies that continue one another merged into one copy (one
    /// message): a contiguous region moves as one, as Poplar's exchange moves a tensor's
    /// contiguous region, where the requests came element range by element range (a
    /// window's rows, a vertex's operands). Only copies made one after the other merge, so
    /// the order of the copies, and every byte each destination receives, stay the same.
    pub fn finish(self) -> Vec<ByteCopy> {
        merge_runs(self.copies)
    }
}

/// `copies` with each copy that continues the one before it ([`continues`]) merged into it.
fn merge_runs(copies: Vec<ByteCopy>) -> Vec<ByteCopy> {
    let mut out: Vec<ByteCopy> = Vec::with_capacity(copies.len());
    for c in copies {
        if let Some(p) = out.last_mut() {
            if continues(p, &c) {
                p.bytes += c.bytes;
                continue;
            }
        }
        out.push(c);
    }
    out
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

/// A staging tensor being filled: per tile, the number of elements requested so far.
pub(crate) struct Staging {
    source: TensorId,
    name: String,
    node: Option<NodeId>,
    tensor: Option<TensorId>,
    sizes: TileSizes,
}

impl Staging {
    /// A staging area for elements of `source`, named `name`.
    pub fn new(source: TensorId, name: String, node: Option<NodeId>) -> Staging {
        Staging {
            source,
            name,
            node,
            tensor: None,
            sizes: TileSizes::default(),
        }
    }

    /// An operand on `tile` holding the elements of `ranges` (`(begin, len)` of the source,
    /// in order): in place when they already sit contiguously on the tile, else staged.
    pub fn operand(
        &mut self,
        lw: &mut Lowerer,
        eb: &mut ExchangeBuilder,
        tile: u32,
        ranges: &[(u64, u64)],
    ) -> Operand {
        self.operand_with(lw, eb, tile, ranges, || ranges.to_vec())
    }

    /// [`Staging::operand`] for elements given twice, in the same order: as `runs` (any
    /// ranges, e.g. maximal contiguous ones, to test reading in place without a range per
    /// row) and, only when they must be staged, as the `ranges` the exchange copies one by
    /// one (each becomes its own copies).
    pub fn operand_with(
        &mut self,
        lw: &mut Lowerer,
        eb: &mut ExchangeBuilder,
        tile: u32,
        runs: &[(u64, u64)],
        ranges: impl FnOnce() -> Vec<(u64, u64)>,
    ) -> Operand {
        let total: u64 = runs.iter().map(|r| r.1).sum();
        let src_t = &lw.tensor(self.source);
        let es = src_t.dtype.size_bytes() as u64;
        let on_tile = src_t.slice_on(lw.tile_id(tile)).is_some();
        if let Some(pos) = on_tile
            .then(|| local_run(lw.index(self.source), tile, runs))
            .flatten()
        {
            return Operand {
                tensor: self.source,
                offset: (pos * es) as u32,
                len: total as u32,
            };
        }
        let ranges = ranges();
        let dtype = src_t.dtype;
        let tensor = match self.tensor {
            Some(t) => t,
            None => {
                let t = lw.new_tensor(
                    self.name.clone(),
                    self.node,
                    TensorKind::Staging {
                        source: self.source,
                    },
                    dtype,
                    Shape::new([0]),
                    Mapping::default(),
                );
                self.tensor = Some(t);
                t
            }
        };
        let pos = self.sizes.alloc(tile, ranges.iter().map(|r| r.1).sum());
        eb.copy_ranges(lw, self.source, &ranges, tensor, tile, pos);
        Operand {
            tensor,
            offset: (pos * es) as u32,
            len: total as u32,
        }
    }

    /// Gives the staging tensor its final shape and mapping (one interval per tile).
    pub fn finish(self, lw: &mut Lowerer) {
        if let Some(t) = self.tensor {
            one_interval_per_tile(lw, t, self.sizes.sizes);
        }
    }
}

/// A tensor local to each tile that uses it, filled by vertices (partials): per tile a
/// growing region.
pub(crate) struct TileScratch {
    pub tensor: TensorId,
    sizes: TileSizes,
}

impl TileScratch {
    /// A new scratch tensor of `dtype` named `name`.
    pub fn new(
        lw: &mut Lowerer,
        name: String,
        node: Option<NodeId>,
        dtype: ipusim_ir::DType,
    ) -> TileScratch {
        let tensor = lw.new_tensor(
            name,
            node,
            TensorKind::Partials,
            dtype,
            Shape::new([0]),
            Mapping::default(),
        );
        TileScratch {
            tensor,
            sizes: TileSizes::default(),
        }
    }

    /// Reserves `len` elements on `tile`; returns their slice-relative element position.
    pub fn alloc(&mut self, tile: u32, len: u64) -> u64 {
        self.sizes.alloc(tile, len)
    }

    /// Gives the tensor its final mapping.
    pub fn finish(self, lw: &mut Lowerer) {
        one_interval_per_tile(lw, self.tensor, self.sizes.sizes);
    }
}

/// Elements reserved so far per tile of a tensor that grows on each tile (in the order the
/// tiles were first asked for), found by tile in constant time: a tensor on every tile of a
/// chip is asked for tile by tile, and a search of the list per request was quadratic.
#[derive(Default)]
struct TileSizes {
    sizes: Vec<(u32, u64)>,
    slots: FxMap<u32, usize>,
}

impl TileSizes {
    /// Reserves `len` elements on `tile`; returns their position in the tile's region.
    fn alloc(&mut self, tile: u32, len: u64) -> u64 {
        let slot = match self.sizes.last() {
            Some(&(t, _)) if t == tile => self.sizes.len() - 1,
            _ => *self.slots.entry(tile).or_insert_with(|| {
                self.sizes.push((tile, 0));
                self.sizes.len() - 1
            }),
        };
        let at = self.sizes[slot].1;
        self.sizes[slot].1 += len;
        at
    }
}

/// Maps the 1-D tensor `t` as one interval per tile of the given sizes, in tile order.
fn one_interval_per_tile(lw: &mut Lowerer, t: TensorId, mut sizes: Vec<(u32, u64)>) {
    sizes.sort_unstable();
    let mut pieces = Vec::with_capacity(sizes.len());
    let mut at = 0u64;
    for (tile, n) in sizes {
        pieces.push((tile, at, at + n));
        at += n;
    }
    lw.set_mapping(t, Shape::new([at as usize]), Mapping::from_pieces(pieces));
}

#[cfg(test)]
mod tests {
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

    /// Requests of whole operands (`copy_ranges`) give exactly the copies of their ranges
    /// requested one by one (`copy_elems`), when later requests repeat earlier ones on other
    /// tiles (broadcasts replayed), overlap them in part, or are new.
    #[test]
    fn a_replayed_request_gives_the_copies_of_its_ranges_one_by_one() {
        use crate::lower::core::Hooks;
        use crate::options::CompileOptions;
        use crate::target::Target;
        use ipusim_ir::pipeline::Placement;
        use ipusim_ir::{DType, Graph};
        let (g, target, options) = (Graph::new(), Target::mk2(), CompileOptions::default());
        let placement = Placement::single();
        let hooks = Hooks {
            operand_layout: |_, _, _| None,
        };
        let mut lw = Lowerer::new(&g, &target, &options, hooks, &placement);
        // A source spread unevenly over four tiles, one tile holding two intervals.
        let pieces = vec![
            (3, 0, 10),
            (7, 10, 13),
            (3, 13, 40),
            (9, 40, 41),
            (12, 41, 64),
        ];
        let src = lw.new_tensor(
            "src".into(),
            None,
            TensorKind::Activation,
            DType::F16,
            Shape::new([64]),
            Mapping::from_pieces(pieces),
        );
        let dst = lw.new_tensor(
            "dst".into(),
            None,
            TensorKind::Staging { source: src },
            DType::F16,
            Shape::new([0]),
            Mapping::default(),
        );
        let a: Vec<(u64, u64)> = vec![(0, 12), (20, 4), (38, 5)];
        let b: Vec<(u64, u64)> = vec![(20, 4), (50, 14)];
        // (tile, position, ranges): a repeated on other tiles and positions, b overlapping
        // a's second range, a within one request twice, and a repeated again after b.
        let requests = [
            (100, 0, a.clone()),
            (101, 7, a.clone()),
            (102, 3, b.clone()),
            (103, 0, [a.clone(), a.clone()].concat()),
            (104, 40, a.clone()),
            (105, 2, b.clone()),
            (3, 1, a.clone()),
        ];
        let (mut whole, mut by_range) = (ExchangeBuilder::default(), ExchangeBuilder::default());
        for (tile, pos, ranges) in &requests {
            whole.copy_ranges(&lw, src, ranges, dst, *tile, *pos);
            let mut at = *pos;
            for &(begin, len) in ranges {
                by_range.copy_elems(&lw, src, begin, len, dst, *tile, at);
                at += len;
            }
        }
        // Three distinct requests were recorded; the other four were replayed.
        assert_eq!(whole.requests.len(), 3);
        let (whole, by_range) = (whole.finish(), by_range.finish());
        assert_eq!(whole, by_range);
        // The sample has broadcasts: a's first range reaches all five tiles that asked.
        assert!(whole.iter().any(|c| c.dsts.len() >= 5));
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

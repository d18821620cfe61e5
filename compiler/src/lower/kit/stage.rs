//! Gathering operands onto the tiles that need them: exchange copies (with broadcasts
//! merged) and staging tensors that receive them.
//!
//! A vertex reads only its own tile's memory. When the elements it needs already sit
//! contiguously on its tile they are read in place; otherwise they are copied into a
//! staging tensor on that tile by the exchange that precedes the compute set (an on-tile
//! source becomes an on-tile memcpy).

use crate::executable::{Operand, TensorId, TensorKind};
use crate::lower::core::copies::{Copies, Dest, FxMap, Recorded, Source};
use crate::lower::core::Lowerer;
use crate::lower::kit::mapping::{slice_run, Mapping};
use ipusim_ir::{NodeId, Shape};

/// Collects the copies of one exchange as requests ([`crate::lower::core::copies`]: built on
/// another thread, copies of the same source bytes merged into one broadcast copy).
#[derive(Default)]
pub(crate) struct ExchangeBuilder {
    recorded: Recorded,
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
        self.record(lw, src, &[(begin, len)], (dst, dst_tile, dst_pos), false);
    }

    /// Copies the elements of `ranges` (`(begin, len)` of `src`, in order) to element
    /// positions `dst_pos`, `dst_pos + len₀`, … of `dst`'s slice on `dst_tile`: exactly the
    /// copies of [`ExchangeBuilder::copy_elems`] over the ranges one by one, a request
    /// repeating an earlier one (another tile's operand of a broadcast) joining its copies
    /// without looking its elements up again.
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
        self.record(lw, src, ranges, (dst, dst_tile, dst_pos), true);
    }

    fn record(
        &mut self,
        lw: &Lowerer,
        src: TensorId,
        ranges: &[(u64, u64)],
        (dst, tile, pos): (TensorId, u32, u64),
        whole: bool,
    ) {
        let source = || Source {
            tensor: src,
            index: lw.shared_index(src),
            es: lw.tensor(src).dtype.size_bytes() as u64,
            ipu: lw.tensor_ipu(src),
        };
        let dest = Dest {
            tensor: dst,
            ipu: lw.tensor_ipu(dst),
            tile,
            pos,
        };
        if self.recorded.is_fresh() {
            self.recorded = lw.fresh_recorded();
        }
        self.recorded
            .request((src, lw.index(src)), source, ranges, dest, whole);
    }

    /// The exchange's copies, to be built.
    pub fn finish(self) -> Copies {
        self.recorded.into()
    }
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
        if let Some(pos) = src_t
            .slice_on(lw.tile_id(tile))
            .and_then(|s| slice_run(s, es, runs))
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

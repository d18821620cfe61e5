//! Tile memory: the real bytes of every used tile, at the executable's byte offsets, and
//! the moves of whole tensors between tile memory and host buffers.
//!
//! Only tiles that hold some tensor get memory, and each gets exactly the bytes up to the
//! end of its highest slice (the data region of the memory plan; vertex state and code are
//! accounted by the plan but never materialised). Memory is kept as 64-bit words so that
//! every allocation (8-byte aligned by the memory plan) can be viewed as a typed slice
//! (`f16`, `f32`, `i32`) without copying.
//!
//! A tensor's bytes on the host are its elements in row-major order, little-endian, f16 as
//! its bit pattern, Bool as one byte 0/1 — exactly what the tile memory holds, so gathering
//! a tensor is a sequence of `memcpy`s of its intervals.

use super::error::EngineError;
use bytemuck::Pod;
use ipusim_exe::executable::{Executable, Tensor, TileId};

/// The bytes of one tile.
#[derive(Clone, Debug)]
pub(crate) struct TileMem {
    words: Vec<u64>,
    len: usize,
}

impl TileMem {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> TileMem {
        TileMem {
            words: vec![0; len.div_ceil(8)],
            len,
        }
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// All bytes.
    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }

    /// All bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }
}

/// A growable 8-byte-aligned scratch buffer, viewed as any element type.
#[derive(Debug, Default)]
pub(crate) struct Buf(Vec<u64>);

impl Buf {
    /// The first `n` elements of type `T` (contents unspecified; grown as needed).
    pub fn take<T: Pod>(&mut self, n: usize) -> &mut [T] {
        let bytes = n * std::mem::size_of::<T>();
        let words = bytes.div_ceil(8);
        if self.0.len() < words {
            self.0.resize(words, 0);
        }
        &mut bytemuck::cast_slice_mut(&mut self.0[..words])[..n]
    }

    /// The first `n` bytes.
    pub fn bytes(&mut self, n: usize) -> &mut [u8] {
        self.take::<u8>(n)
    }

    /// The first `n` bytes as they are (`None` when the buffer holds fewer).
    pub fn held(&self, n: usize) -> Option<&[u8]> {
        bytemuck::cast_slice(&self.0).get(..n)
    }
}

/// `bytes` as a slice of `T` (the executable was validated, so a misaligned or ragged
/// region is an internal error, never a panic).
pub(crate) fn typed<T: Pod>(bytes: &[u8]) -> Result<&[T], EngineError> {
    bytemuck::try_cast_slice(bytes).map_err(|e| EngineError::internal(format!("typed view: {e}")))
}

/// `bytes` as a writable slice of `T`.
pub(crate) fn typed_mut<T: Pod>(bytes: &mut [u8]) -> Result<&mut [T], EngineError> {
    bytemuck::try_cast_slice_mut(bytes)
        .map_err(|e| EngineError::internal(format!("typed view: {e}")))
}

/// Which tiles have memory, and where their state lives.
#[derive(Clone, Debug)]
pub(crate) struct TileIndex {
    /// Tiles per IPU (system tiles are numbered by `TileId::dense`).
    tiles_per_ipu: u32,
    /// Per system tile: its dense index, or `u32::MAX` when the tile holds nothing.
    dense: Vec<u32>,
    /// Per dense index: the tile.
    tiles: Vec<TileId>,
}

impl TileIndex {
    /// The tiles holding some tensor slice of `exe`, and the bytes each needs.
    pub fn new(exe: &Executable) -> Result<(TileIndex, Vec<usize>), EngineError> {
        let ntiles = exe.num_tiles();
        let mut end = vec![0usize; ntiles];
        let mut used = vec![false; ntiles];
        for t in &exe.tensors {
            let es = t.dtype.size_bytes();
            for s in &t.slices {
                let tile = exe.tile_index(s.tile);
                if tile >= ntiles || s.tile.tile() >= exe.target.tiles {
                    return Err(EngineError::invalid(format!(
                        "tensor '{}' has a slice on tile {}, the system has {ntiles} tiles",
                        t.name, s.tile
                    )));
                }
                used[tile] = true;
                for iv in &s.intervals {
                    let bytes = iv.len as usize * es;
                    end[tile] = end[tile].max(iv.offset as usize + bytes);
                }
            }
        }
        let mut dense = vec![u32::MAX; ntiles];
        let mut tiles = Vec::new();
        let mut sizes = Vec::new();
        for tile in 0..ntiles {
            if used[tile] {
                dense[tile] = tiles.len() as u32;
                let per = exe.target.tiles as usize;
                tiles.push(TileId::new((tile / per) as u32, (tile % per) as u32));
                sizes.push(end[tile].div_ceil(8) * 8);
            }
        }
        let tiles_per_ipu = exe.target.tiles;
        Ok((
            TileIndex {
                tiles_per_ipu,
                dense,
                tiles,
            },
            sizes,
        ))
    }

    /// The dense index of `tile`, if it has memory.
    pub fn get(&self, tile: TileId) -> Option<usize> {
        if tile.tile() >= self.tiles_per_ipu {
            return None;
        }
        match self.dense.get(tile.dense(self.tiles_per_ipu)) {
            Some(&d) if d != u32::MAX => Some(d as usize),
            _ => None,
        }
    }

    /// The dense index of `tile`, or an error naming `what` needs it.
    pub fn require(&self, tile: TileId, what: &dyn Fn() -> String) -> Result<usize, EngineError> {
        self.get(tile).ok_or_else(|| {
            EngineError::invalid(format!("{} on tile {tile}, which holds no tensor", what()))
        })
    }

    /// The tile of a dense index.
    pub fn tile(&self, dense: usize) -> TileId {
        self.tiles[dense]
    }

    /// Number of tiles with memory.
    pub fn len(&self) -> usize {
        self.tiles.len()
    }
}

/// Checks that every interval of `t` lies inside its tile's memory and is aligned for its
/// element type.
pub(crate) fn check_tensor(
    t: &Tensor,
    index: &TileIndex,
    sizes: &[usize],
) -> Result<(), EngineError> {
    let es = t.dtype.size_bytes();
    for s in &t.slices {
        let d = index.require(s.tile, &|| format!("tensor '{}'", t.name))?;
        for iv in &s.intervals {
            let bytes = iv.len as usize * es;
            if iv.end() > t.num_elements() {
                return Err(EngineError::invalid(format!(
                    "tensor '{}' has elements [{}, {}) on tile {}, it holds {}",
                    t.name,
                    iv.begin,
                    iv.end(),
                    s.tile,
                    t.num_elements()
                )));
            }
            if !(iv.offset as usize).is_multiple_of(es) || iv.offset as usize + bytes > sizes[d] {
                return Err(EngineError::invalid(format!(
                    "tensor '{}' on tile {}: bytes [{}, {}) are misaligned or outside the tile's memory",
                    t.name,
                    s.tile,
                    iv.offset,
                    iv.offset as usize + bytes
                )));
            }
        }
    }
    Ok(())
}

/// Copies the bytes of tensor `t` (row-major) out of tile memory into `out`.
pub(crate) fn gather<M: AsRef<TileMem>>(t: &Tensor, index: &TileIndex, mems: &[M], out: &mut [u8]) {
    let es = t.dtype.size_bytes();
    for s in &t.slices {
        let Some(d) = index.get(s.tile) else { continue };
        let mem = mems[d].as_ref().bytes();
        for iv in &s.intervals {
            let n = iv.len as usize * es;
            let (h, o) = (iv.begin as usize * es, iv.offset as usize);
            out[h..h + n].copy_from_slice(&mem[o..o + n]);
        }
    }
}

/// Copies the row-major bytes `src` of tensor `t` into tile memory.
pub(crate) fn scatter<M: AsMut<TileMem>>(
    t: &Tensor,
    index: &TileIndex,
    mems: &mut [M],
    src: &[u8],
) {
    let es = t.dtype.size_bytes();
    for s in &t.slices {
        let Some(d) = index.get(s.tile) else { continue };
        let mem = mems[d].as_mut().bytes_mut();
        for iv in &s.intervals {
            let n = iv.len as usize * es;
            let (h, o) = (iv.begin as usize * es, iv.offset as usize);
            mem[o..o + n].copy_from_slice(&src[h..h + n]);
        }
    }
}

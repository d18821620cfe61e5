//! The sum of a split reduction's partials across tiles (a matmul's or a window pass's
//! partial blocks, one per reduction split): in the stages of PopLibs'
//! `getMultiStageReducePlan`, each sum on PopLibs' `ReduceAdd` vertex.

use crate::codelets::Codelet;
use crate::executable::{TensorId, TileWork};
use crate::lower::core::Lowerer;
use crate::lower::kit::block::block_vertices;
use crate::lower::kit::stage::{ExchangeBuilder, TileScratch};
use ipusim_exe::cycles::conv_reduce::multi_stage_reduce_plan;
use ipusim_ir::{DType, NodeId};

/// Where elements `[begin, end)` of a partial block are: from slice position `pos` of
/// `tensor` on `tile`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PartialPiece {
    pub tensor: TensorId,
    pub tile: u32,
    pub pos: u64,
    pub begin: u64,
    pub end: u64,
}

/// One output block of a split reduction (a matmul's or a window pass's): its partial
/// blocks in reduction order (`(tile, slice position of the block)` in the partials
/// tensor), its number of elements, the grain of its chunks, the tiles that sum it (the
/// `j`-th sums chunk `j`, [`chunk_of`]; an intermediate stage's sections take consecutive
/// runs of them) and, per chunk, where its sum goes in the output (slice position of its
/// first element on its tile).
pub(crate) struct SplitBlock {
    pub sources: Vec<(u32, u64)>,
    pub elems: u64,
    pub grain: u64,
    pub tiles: Vec<u32>,
    pub out_pos: Vec<u64>,
}

/// Chunk `j` of `n` of `elems` elements cut on multiples of `grain`: the part of a split
/// reduction's output block that its `j`-th tile sums (the output's mapping and
/// [`sum_split`] both cut blocks so), `⌈elems / n⌉` rounded up to the grain, so that the
/// last tiles may have nothing to sum.
pub(crate) fn chunk_of(j: u64, n: u64, elems: u64, grain: u64) -> (u64, u64) {
    let g = grain.max(1);
    let chunk = elems.div_ceil(n.max(1)).div_ceil(g) * g;
    ((j * chunk).min(elems), ((j + 1) * chunk).min(elems))
}

/// The grain a convolution's partials are summed in: PopLibs' `partialGroupedReduce`
/// (`lib/poplin/ConvReduce.cpp`) splits a tile group's output regions over its tiles in
/// multiples of `max(partialChansPerGroup, vectorWidth(resultType))` rounded up to the
/// vector width. Ours takes the output's type for every stage (PopLibs each stage's result
/// type: the partials' for an intermediate one).
pub(crate) fn reduce_grain(
    target: &ipusim_exe::Target,
    result: DType,
    chans_per_group: u64,
) -> u64 {
    let vw = target.vector_width(result);
    chans_per_group.max(vw).div_ceil(vw) * vw
}

/// Sums the partial blocks of a split reduction's output `blocks`, stored in `partials`
/// (type `types.0`), into `out` (type `types.1`), in the stages of PopLibs'
/// [`multi_stage_reduce_plan`] (its default `enableMultiStageReduce`, which PopLibs keeps
/// to cut exchange code: single-stage, every reducing tile hears from every partial). Each
/// intermediate stage of depth `d` cuts a block's current partials into `d` consecutive
/// sections, each summed over its run of the block's tiles into an intermediate partial
/// (in the partials type); the last stage sums the remaining partials of chunk `j` on
/// tile `j`. Every sum is a `ReduceAdd` vertex's: in ascending partial order in an f32
/// accumulator, rounded once to its output (an intermediate partial to the partials type),
/// so an output element is the sum of its sections' rounded sums in section order (the
/// order an error bound is derived from; one level for fewer than 16 partials). One
/// superstep per stage: `{name}/reduce_stage{s}`, then `{name}/reduce`.
pub(crate) fn sum_split(
    lw: &mut Lowerer,
    (id, name): (NodeId, &str),
    partials: TensorId,
    types: (DType, DType),
    out: TensorId,
    blocks: &[SplitBlock],
) {
    let (partial_type, _) = types;
    // Each block's current partials, as pieces.
    let mut current: Vec<Vec<Vec<PartialPiece>>> = blocks
        .iter()
        .map(|b| {
            b.sources
                .iter()
                .map(|&(tile, pos)| {
                    vec![PartialPiece {
                        tensor: partials,
                        tile,
                        pos,
                        begin: 0,
                        end: b.elems,
                    }]
                })
                .collect()
        })
        .collect();
    let plans: Vec<Vec<u32>> = blocks
        .iter()
        .map(|b| multi_stage_reduce_plan(b.sources.len() as u32, true))
        .collect();
    let stages = plans.iter().map(Vec::len).max().unwrap_or(0);
    for s in 0..stages {
        let mut eb = ExchangeBuilder::default();
        let mut inbox = TileScratch::new(
            lw,
            format!("{name}/reduce_stage{s}_in"),
            Some(id),
            partial_type,
        );
        let mut mid = TileScratch::new(
            lw,
            format!("{name}/reduce_stage{s}"),
            Some(id),
            partial_type,
        );
        let mut tiles = Vec::new();
        for (bi, b) in blocks.iter().enumerate() {
            if let Some(&d) = plans[bi].get(s) {
                let st = Stage {
                    eb: &mut eb,
                    inbox: &mut inbox,
                    mid: &mut mid,
                    partial_type,
                };
                current[bi] = sum_sections(lw, st, b, &current[bi], u64::from(d), &mut tiles);
            }
        }
        inbox.finish(lw);
        mid.finish(lw);
        lw.superstep(
            &format!("{name}/reduce_stage{s}"),
            Some(id),
            eb.finish(),
            tiles,
        );
    }
    let mut eb = ExchangeBuilder::default();
    let mut inbox = TileScratch::new(lw, format!("{name}/reduce_in"), Some(id), partial_type);
    let mut tiles = Vec::new();
    for (bi, b) in blocks.iter().enumerate() {
        let n = b.tiles.len() as u64;
        for j in 0..n {
            let (c0, c1) = chunk_of(j, n, b.elems, b.grain);
            if c0 == c1 {
                continue;
            }
            tiles.push(sum_pieces(
                lw,
                &mut eb,
                &mut inbox,
                &current[bi],
                (c0, c1 - c0),
                b.tiles[j as usize],
                (out, b.out_pos[j as usize]),
                types,
            ));
        }
    }
    inbox.finish(lw);
    lw.superstep(&format!("{name}/reduce"), Some(id), eb.finish(), tiles);
}

/// The exchange and scratch tensors of one intermediate stage of [`sum_split`].
struct Stage<'a> {
    eb: &'a mut ExchangeBuilder,
    inbox: &'a mut TileScratch,
    mid: &'a mut TileScratch,
    partial_type: DType,
}

/// One intermediate stage of block `b`: its `current` partials cut into `d` consecutive
/// sections, section `i` summed over the `i`-th run of the block's tiles (chunk by chunk)
/// into one intermediate partial in `st.mid`. Pushes the stage's work to `tiles`; returns
/// the `d` intermediate partials as pieces.
fn sum_sections(
    lw: &mut Lowerer,
    st: Stage,
    b: &SplitBlock,
    current: &[Vec<PartialPiece>],
    d: u64,
    tiles: &mut Vec<TileWork>,
) -> Vec<Vec<PartialPiece>> {
    let (p, r) = (current.len() as u64, b.tiles.len() as u64);
    (0..d)
        .map(|i| {
            let sources = &current[(i * p / d) as usize..((i + 1) * p / d) as usize];
            let t0 = i * r / d;
            let n = ((i + 1) * r / d).max(t0 + 1) - t0;
            let mut pieces = Vec::new();
            for j in 0..n {
                let (c0, c1) = chunk_of(j, n, b.elems, b.grain);
                if c0 == c1 {
                    continue;
                }
                let rt = b.tiles[(t0 + j) as usize];
                let pos = st.mid.alloc(rt, c1 - c0);
                tiles.push(sum_pieces(
                    lw,
                    st.eb,
                    st.inbox,
                    sources,
                    (c0, c1 - c0),
                    rt,
                    (st.mid.tensor, pos),
                    (st.partial_type, st.partial_type),
                ));
                pieces.push(PartialPiece {
                    tensor: st.mid.tensor,
                    tile: rt,
                    pos,
                    begin: c0,
                    end: c1,
                });
            }
            pieces
        })
        .collect()
}

/// One chunk of a split reduction's sum: elements `[c0, c0 + width)` of each source's
/// partial block (its pieces, in reduction order) are gathered into `inbox` on tile `rt`
/// and summed there by PopLibs' `ReduceAdd` vertex (f32 accumulator) into `out` at slice
/// position `out_pos` in the output type.
#[allow(clippy::too_many_arguments)]
fn sum_pieces(
    lw: &mut Lowerer,
    eb: &mut ExchangeBuilder,
    inbox: &mut TileScratch,
    sources: &[Vec<PartialPiece>],
    (c0, width): (u64, u64),
    rt: u32,
    (out, out_pos): (TensorId, u64),
    (partial_type, output_type): (DType, DType),
) -> TileWork {
    let count = sources.len() as u64;
    let at = inbox.alloc(rt, width * count);
    for (k, pieces) in sources.iter().enumerate() {
        for p in pieces {
            let (lo, hi) = (c0.max(p.begin), (c0 + width).min(p.end));
            if lo >= hi {
                continue;
            }
            let from = lw.slice_begin(p.tensor, p.tile) + p.pos + (lo - p.begin);
            let to = at + k as u64 * width + (lo - c0);
            eb.copy_elems(lw, p.tensor, from, hi - lo, inbox.tensor, rt, to);
        }
    }
    let vertices = block_vertices(
        lw,
        (inbox.tensor, at),
        (out, out_pos),
        (1, count, width),
        (1, 0),
        1.0,
    );
    let sum = Codelet::ReduceAdd {
        partials: partial_type,
        output: output_type,
    };
    TileWork::one_group(lw.tile_id(rt), sum, vertices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_fall_on_the_grain_and_the_last_tiles_may_have_none() {
        // 100 elements over 16 tiles in a grain of 16: ⌈100 / 16⌉ = 7 rounded up to 16.
        let chunks: Vec<(u64, u64)> = (0..16).map(|j| chunk_of(j, 16, 100, 16)).collect();
        assert_eq!(chunks[0], (0, 16));
        assert_eq!(chunks[5], (80, 96));
        assert_eq!(chunks[6], (96, 100));
        assert!(chunks[7..].iter().all(|&(a, b)| a == b));
        // A grain of one cuts ⌈elems / n⌉ as before.
        assert_eq!(chunk_of(1, 16, 100, 1), (7, 14));
    }

    #[test]
    fn the_grain_is_poplibs_rounded_partial_channel_group() {
        // `max(partialChansPerGroup, vectorWidth)` rounded up to the vector width
        // (`ConvReduce.cpp`), on Mk2's 64-bit vectors: 4 halves, 2 floats.
        let t = ipusim_exe::Target::mk2();
        assert_eq!(reduce_grain(&t, DType::F16, 16), 16);
        assert_eq!(reduce_grain(&t, DType::F16, 1), 4);
        assert_eq!(reduce_grain(&t, DType::F16, 6), 8);
        assert_eq!(reduce_grain(&t, DType::F32, 1), 2);
        assert_eq!(reduce_grain(&t, DType::F32, 3), 4);
    }
}

//! Reductions across tiles (`ReduceSum`, `ReduceMean`, `ReduceMax`, `ArgMax`).
//!
//! A reduction over contiguous axes is seen as `[P, R, Q]` (kept dims before, the reduced
//! dims, kept dims after). A reduction whose other reduced axes lead, with nothing kept ahead
//! of them (`[O, K, R, Q]` reduced over `O` and `R`: a batch norm's statistics over `N` and
//! the spatial axes), is one such pass with `P = O × K` ([`Spec::outer`]), as PopLibs reduces
//! it in one; other reductions over separated axes run as several passes, the innermost
//! first, through intermediate tensors in the accumulation type.
//!
//! # Order of accumulation (what an error bound is derived from)
//!
//! 1. **On each tile** (stage 1), every run of consecutive input rows `r` it holds for one
//!    `p` is summed by a `Reduce` vertex sequentially in ascending `r` (a run of one row is
//!    passed on as is); the runs of the same rows and outputs for consecutive outer indices,
//!    at one stride in the tile's memory, are one vertex's repeats (PopLibs' strided reduce
//!    with outer strides), summed on in ascending `o`, then `r`. Each run (with its repeats)
//!    is a *contribution* to the outputs it covers, keyed by its first `(o, r)` as
//!    `o · R + r` (`o` the outer index, 0 without one): the order of the sum is ascending
//!    key. A tile that holds fewer reductions than workers may cut one by rows, as PopLibs'
//!    two-stage path does ([`super::share`]; a block with repeats is not cut): each of its
//!    runs of consecutive rows is summed the same way into a partial in the accumulation
//!    type, and a second compute set adds the runs' partials in ascending order.
//! 2. **Optionally** (when an output has many contributions and a second superstep is
//!    cheaper than gathering them all on one tile), the contributing tiles are split into
//!    `K ≈ √C` groups of consecutive tile numbers; each group's contributions are summed on a
//!    tile of the group in ascending key, giving one contribution per group keyed by the
//!    group's index.
//! 3. **On the output's tile**, the contributions of each output element are summed
//!    sequentially in ascending key by a `Reduce` vertex, which applies the mean's scale and
//!    rounds once to the output type.
//!
//! So every output is a sum tree with at most four levels, each level a sequential sum in
//! the accumulation type (f32 for half data unless partials are half). For `n` summands the
//! error of any such tree with `n − 1` additions is bounded by `(n − 1)·u·Σ|x_i|` to first
//! order (`u` the unit roundoff of the accumulation type), plus one final rounding.
//! When every output has a single contribution (whole rows on one tile), stage 1 writes the
//! output directly.

use crate::executable::{TensorId, TensorKind, TileWork, VertexGroup};
use crate::lower::core::Lowerer;
use crate::lower::kit::block::block_vertex;
use crate::lower::kit::first_stage::{codelet, local_work, scratch, LocalBlock};
pub(crate) use crate::lower::kit::first_stage::{Kind, Spec};
use crate::lower::kit::mapping::{
    choose_tiles, grain, min_elements_per_tile, worker_slices, Mapping,
};
use crate::lower::kit::stage::{ExchangeBuilder, TileScratch};
use ipusim_ir::DType;
use std::collections::BTreeMap;

/// Values for outputs `[o_begin, o_begin + len)`, stored at element `elem` of `tensor` on
/// `tile` (consecutive), summed in ascending `key`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Contribution {
    pub tile: u32,
    pub tensor: TensorId,
    pub elem: u64,
    pub o_begin: u64,
    pub len: u64,
    pub key: u64,
}

/// A destination range of outputs: `[o_begin, o_end)` at slice position `pos` of `tensor`
/// on `tile`.
#[derive(Clone, Copy, Debug)]
struct Dest {
    o_begin: u64,
    o_end: u64,
    tile: u32,
    tensor: TensorId,
    pos: u64,
}

/// Elements of one tile in memory order: `groups × count × width` elements from slice
/// position `pos`, rows `r..r + count` of `p` (and the next `groups − 1` values of `p`),
/// columns `q0..q0 + width`.
struct Piece {
    tile: u32,
    pos: u64,
    p: u64,
    r: u64,
    count: u64,
    groups: u64,
    q0: u64,
    width: u64,
}

/// The output tensor of the pass, mapped by `mapping`.
fn output_tensor(lw: &mut Lowerer, spec: &Spec, mapping: Mapping) -> TensorId {
    lw.new_tensor(
        spec.name.clone(),
        Some(spec.node),
        TensorKind::Activation,
        spec.output,
        spec.shape.clone(),
        mapping,
    )
}

/// The contributions `(tile, pos, o_begin, len, key)` stored at slice position `pos` of
/// `tensor` on `tile`.
fn stored(
    lw: &Lowerer,
    tensor: TensorId,
    placed: Vec<(u32, u64, u64, u64, u64)>,
) -> Vec<Contribution> {
    placed
        .into_iter()
        .map(|(tile, pos, o_begin, len, key)| Contribution {
            tile,
            tensor,
            elem: lw.slice_begin(tensor, tile) + pos,
            o_begin,
            len,
            key,
        })
        .collect()
}

/// Reduces `input` by `spec`; returns the output tensor.
pub(crate) fn reduce(lw: &mut Lowerer, spec: &Spec, input: TensorId) -> TensorId {
    let (p, r, q) = (spec.p, spec.r, spec.q);
    // Rows `p` of one outer index `p / kept` feed outputs `(p % kept) · q ..`, summed in the
    // order of the key `(p / kept) · r + r'`.
    let kept = p / spec.outer;
    let n_out = kept * q;
    let local = spec.kind != Kind::ArgMax;
    // Stage 1 decomposition: each tile's elements in memory order, as row pieces
    // `(p, r.., q0..q0 + width)`; consecutive pieces of one column range and consecutive rows
    // are one block in memory (a matmul output split by columns holds such blocks).
    let mut blocks: Vec<LocalBlock> = Vec::new();
    let mut raws: Vec<Contribution> = Vec::new();
    let mut pieces: Vec<Piece> = Vec::new();
    for slice in &lw.tensor(input).slices {
        let mut pos = 0u64;
        for iv in &slice.intervals {
            let mut i = iv.begin;
            while i < iv.end() {
                let (pp, rr, qq) = (i / (r * q), (i / q) % r, i % q);
                let left = iv.end() - i;
                let piece = if qq != 0 || left < q {
                    Piece {
                        tile: slice.tile.tile(),
                        pos,
                        p: pp,
                        r: rr,
                        count: 1,
                        groups: 1,
                        q0: qq,
                        width: (q - qq).min(left),
                    }
                } else if rr == 0 && left >= r * q {
                    // Whole rows of consecutive `p`, within one outer index (their outputs
                    // are consecutive).
                    Piece {
                        tile: slice.tile.tile(),
                        pos,
                        p: pp,
                        r: 0,
                        count: r,
                        groups: (left / (r * q)).min(kept - pp % kept),
                        q0: 0,
                        width: q,
                    }
                } else {
                    Piece {
                        tile: slice.tile.tile(),
                        pos,
                        p: pp,
                        r: rr,
                        count: (r - rr).min(left / q),
                        groups: 1,
                        q0: 0,
                        width: q,
                    }
                };
                let size = piece.groups * piece.count * piece.width;
                i += size;
                pos += size;
                match pieces.last_mut() {
                    Some(last)
                        if last.tile == piece.tile
                            && last.groups == 1
                            && piece.groups == 1
                            && (last.p, last.q0, last.width)
                                == (piece.p, piece.q0, piece.width)
                            && last.r + last.count == piece.r
                            && last.pos + last.count * last.width == piece.pos =>
                    {
                        last.count += piece.count;
                    }
                    _ => pieces.push(piece),
                }
            }
        }
    }
    for pc in pieces {
        let o_begin = (pc.p % kept) * q + pc.q0;
        let key0 = (pc.p / kept) * r + pc.r;
        if local && pc.count >= 2 {
            let block = LocalBlock {
                tile: pc.tile,
                pos: pc.pos,
                groups: pc.groups,
                count: pc.count,
                width: pc.width,
                outer: 1,
                stride: 0,
                o_begin,
                key: key0,
            };
            if !blocks.last_mut().is_some_and(|last| last.absorb(&block, r)) {
                blocks.push(block);
            }
            continue;
        }
        for g in 0..pc.groups {
            for j in 0..pc.count {
                let elem = (pc.p + g) * r * q + (pc.r + j) * q + pc.q0;
                raws.push(Contribution {
                    tile: pc.tile,
                    tensor: input,
                    elem,
                    o_begin: o_begin + g * q,
                    len: pc.width,
                    key: key0 + j,
                });
            }
        }
    }
    // Contributions are exchanged as bytes, so they must all be in the accumulation type:
    // when the input is not, single rows are converted by a one-row Reduce on their tile
    // (which also squares them for a sum of squares).
    if spec.input != spec.acc || spec.kind == Kind::SumSquares {
        for c in std::mem::take(&mut raws) {
            let pos = lw.position(input, c.elem);
            blocks.push(LocalBlock {
                tile: c.tile,
                pos,
                groups: 1,
                count: 1,
                width: c.len,
                outer: 1,
                stride: 0,
                o_begin: c.o_begin,
                key: c.key,
            });
        }
    }
    // Contributions per output element.
    let mut diff = vec![0i64; n_out as usize + 1];
    for b in &blocks {
        diff[b.o_begin as usize] += 1;
        diff[(b.o_begin + b.groups * b.width) as usize] -= 1;
    }
    for c in &raws {
        diff[c.o_begin as usize] += 1;
        diff[(c.o_begin + c.len) as usize] -= 1;
    }
    let mut max_count = 0i64;
    let mut run = 0i64;
    for d in &diff[..n_out as usize] {
        run += d;
        max_count = max_count.max(run);
    }
    if raws.is_empty() && max_count == 1 {
        // Every output is computed on one tile: write it directly.
        let pieces = blocks
            .iter()
            .map(|b| (b.tile, b.o_begin, b.o_begin + b.groups * b.width))
            .collect();
        let out = output_tensor(lw, spec, Mapping::from_pieces(pieces));
        let output = (spec.output, spec.scale);
        let work = local_work(lw, spec, input, &blocks, output, |lw, b| {
            (out, lw.position(out, b.o_begin))
        });
        work.emit(lw, &spec.name, spec.node);
        return out;
    }
    // Stage 1 into partials.
    let mut contribs = raws;
    if !blocks.is_empty() {
        let mut partials = scratch(lw, spec, "partials");
        let mut placed = Vec::new();
        let work = local_work(lw, spec, input, &blocks, (spec.acc, 1.0), |_, b| {
            let at = partials.alloc(b.tile, b.groups * b.width);
            placed.push((b.tile, at, b.o_begin, b.groups * b.width, b.key));
            (partials.tensor, at)
        });
        let st = partials.tensor;
        partials.finish(lw);
        work.emit(lw, &format!("{}/local", spec.name), spec.node);
        contribs.extend(stored(lw, st, placed));
    }
    // From here on every contribution is in the accumulation type (and squared already).
    let gspec = Spec {
        input: spec.acc,
        kind: spec.kind.of_partials(),
        ..spec.clone()
    };
    let c = max_count as u64;
    let msg = lw.target().exchange_message_cycles as u64 + 1;
    let root = (c as f64).sqrt().ceil() as u64;
    let two_stage = spec.kind != Kind::ArgMax
        && c > 16
        && 2 * root * msg
            + lw.target().sync_cycles as u64
            + lw.target().exchange_latency_cycles as u64
            + 30
            < c * msg;
    if two_stage {
        contribs = intermediate(lw, &gspec, contribs, root);
    }
    // Final stage: the output mapped linearly over tiles chosen by the gathered work, each
    // with at least PopLibs' smallest share of a reduction's output, four vectors of the
    // summing vertex's input type (`intermediateToOutput`,
    // `lib/popops/reduction/ReductionStages.cpp`: `minElementsPerTile = 4 *
    // target.getVectorWidth(inVertexType)` for its linear mapping of the output): every
    // contribution then reaches a few tiles in messages of whole vectors, not one tile per
    // output grain.
    let work: u64 = contribs.iter().map(|c| c.len).sum();
    let tiles_out = choose_tiles(lw.target(), work, spec.acc)
        .min(n_out.div_ceil(grain(spec.output)).max(1) as u32)
        .min(n_out.div_ceil(min_share(lw, spec.acc)).max(1) as u32);
    let m = lw.mapping_over(n_out, spec.output, tiles_out);
    let out = output_tensor(lw, spec, m);
    let dests: Vec<Dest> = lw
        .index(out)
        .iter()
        .map(|s| Dest {
            o_begin: s.begin,
            o_end: s.end,
            tile: s.tile,
            tensor: out,
            pos: s.pos,
        })
        .collect();
    let mut eb = ExchangeBuilder::default();
    let mut inbox = scratch(lw, spec, "gather");
    let mut tiles = Vec::new();
    gather(
        lw,
        &mut eb,
        &mut inbox,
        &mut tiles,
        &contribs,
        &dests,
        &gspec,
        spec.output,
        spec.scale,
    );
    inbox.finish(lw);
    lw.superstep(&spec.name, Some(spec.node), eb.finish(), tiles);
    out
}

/// The fewest outputs a tile sums in a gathering stage: four vectors of the summing vertex's
/// input type `acc` (PopLibs' `minElementsPerTile` of a reduction's output).
fn min_share(lw: &Lowerer, acc: DType) -> u64 {
    4 * lw.target().vector_width(acc)
}

/// The intermediate stage: contributing tiles in `k` groups, each group's contributions
/// summed on the group's tiles.
fn intermediate(
    lw: &mut Lowerer,
    spec: &Spec,
    contribs: Vec<Contribution>,
    k: u64,
) -> Vec<Contribution> {
    let mut src_tiles: Vec<u32> = contribs.iter().map(|c| c.tile).collect();
    src_tiles.sort_unstable();
    src_tiles.dedup();
    let per = (src_tiles.len() as u64).div_ceil(k.max(1)).max(1) as usize;
    let group_of = |tile: u32| src_tiles.binary_search(&tile).unwrap_or(0) / per;
    let groups = src_tiles.len().div_ceil(per);
    let mut by_group: Vec<Vec<Contribution>> = vec![Vec::new(); groups];
    for c in contribs {
        by_group[group_of(c.tile)].push(c);
    }
    let mut eb = ExchangeBuilder::default();
    let mut inbox = scratch(lw, spec, "gather1");
    let mut out = scratch(lw, spec, "partials1");
    let mut tiles = Vec::new();
    let mut produced = Vec::new();
    for (j, list) in by_group.iter().enumerate() {
        let gt = &src_tiles[j * per..((j + 1) * per).min(src_tiles.len())];
        // Output ranges the group touches, spread over the group's tiles.
        let mut ranges: Vec<(u64, u64)> = list
            .iter()
            .map(|c| (c.o_begin, c.o_begin + c.len))
            .collect();
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (b, e) in ranges {
            match merged.last_mut() {
                Some(l) if b <= l.1 => l.1 = l.1.max(e),
                _ => merged.push((b, e)),
            }
        }
        let total: u64 = merged.iter().map(|r| r.1 - r.0).sum();
        // As many of the group's tiles as its work (the elements it receives and sums) is
        // worth, at the cost model's smallest useful share per tile as for a fresh mapping,
        // and at least the final stage's share of outputs each (four vectors, PopLibs'
        // `minElementsPerTile`; our choice for this stage, which PopLibs plans otherwise):
        // a few outputs stay on one tile instead of splitting every contribution into
        // one-element messages, and many contributions to each output spread over as many
        // tiles as their sum is worth.
        let min = min_elements_per_tile(lw.target(), spec.acc);
        let work: u64 = list.iter().map(|c| c.len).sum();
        let dest_tiles = work
            .div_ceil(min)
            .min(total.div_ceil(min_share(lw, spec.acc)))
            .clamp(1, gt.len() as u64);
        let chunk = total.div_ceil(dest_tiles).max(1);
        // The receiving tiles spread over the group, starting where the rotation of the chip
        // stands, so that reductions do not all gather on the first tile of each group.
        let stride = (gt.len() as u64 / dest_tiles).max(1) as usize;
        let first = lw.peek_start() as usize % stride;
        let mut dests = Vec::new();
        let mut done = 0u64;
        for (b, e) in merged {
            let mut at = b;
            while at < e {
                let ti = (done / chunk) as usize;
                let take = (e - at).min(chunk - done % chunk);
                let tile = gt[(first + ti * stride).min(gt.len() - 1)];
                let pos = out.alloc(tile, take);
                dests.push(Dest {
                    o_begin: at,
                    o_end: at + take,
                    tile,
                    tensor: out.tensor,
                    pos,
                });
                at += take;
                done += take;
            }
        }
        gather(
            lw, &mut eb, &mut inbox, &mut tiles, list, &dests, spec, spec.acc, 1.0,
        );
        for d in dests {
            produced.push((d.tile, d.pos, d.o_begin, d.o_end - d.o_begin, j as u64));
        }
    }
    inbox.finish(lw);
    let ot = out.tensor;
    out.finish(lw);
    lw.superstep(
        &format!("{}/combine", spec.name),
        Some(spec.node),
        eb.finish(),
        tiles,
    );
    stored(lw, ot, produced)
}

/// Gathers `contribs` onto the tiles of `dests` and sums them per output segment.
#[allow(clippy::too_many_arguments)]
fn gather(
    lw: &mut Lowerer,
    eb: &mut ExchangeBuilder,
    inbox: &mut TileScratch,
    tiles: &mut Vec<TileWork>,
    contribs: &[Contribution],
    dests: &[Dest],
    spec: &Spec,
    output: DType,
    scale: f64,
) {
    // Split contributions by destination.
    let mut per_dest: BTreeMap<usize, Vec<(u64, u64, usize)>> = BTreeMap::new();
    for (ci, c) in contribs.iter().enumerate() {
        let end = c.o_begin + c.len;
        let mut d = dests.partition_point(|d| d.o_end <= c.o_begin);
        while d < dests.len() && dests[d].o_begin < end {
            let (b, e) = (c.o_begin.max(dests[d].o_begin), end.min(dests[d].o_end));
            if b < e {
                per_dest.entry(d).or_default().push((b, e, ci));
            }
            d += 1;
        }
    }
    let nw = lw.reduction_workers() as u32;
    let vw = lw.target().vector_width(spec.acc);
    for (di, pieces) in per_dest {
        let dest = dests[di];
        let mut cuts: Vec<u64> = pieces.iter().flat_map(|&(b, e, _)| [b, e]).collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut segs: Vec<Vec<usize>> = vec![Vec::new(); cuts.len().saturating_sub(1)];
        for (pi, &(b, e, _)) in pieces.iter().enumerate() {
            let s0 = cuts.partition_point(|&c| c < b);
            let s1 = cuts.partition_point(|&c| c < e);
            for seg in segs.iter_mut().take(s1).skip(s0) {
                seg.push(pi);
            }
        }
        let mut load = vec![0u64; nw as usize];
        let mut group = VertexGroup {
            codelet: codelet(spec, output),
            vertices: Vec::new(),
        };
        for (si, list) in segs.iter_mut().enumerate() {
            if list.is_empty() {
                continue;
            }
            list.sort_by_key(|&pi| {
                let c = &contribs[pieces[pi].2];
                (c.key, c.tile, c.elem)
            });
            let (o0, o1) = (cuts[si], cuts[si + 1]);
            let width = o1 - o0;
            let count = list.len() as u64;
            let at = inbox.alloc(dest.tile, width * count);
            for (i, &pi) in list.iter().enumerate() {
                let c = &contribs[pieces[pi].2];
                let src = c.elem + (o0 - c.o_begin);
                eb.copy_elems(
                    lw,
                    c.tensor,
                    src,
                    width,
                    inbox.tensor,
                    dest.tile,
                    at + i as u64 * width,
                );
            }
            let out_pos = dest.pos + (o0 - dest.o_begin);
            let parts = if width >= nw as u64 * vw * 4 {
                worker_slices(width, vw, nw)
            } else {
                vec![(0, width)]
            };
            for (a, b) in parts {
                let w = (0..nw as usize).min_by_key(|&w| (load[w], w)).unwrap_or(0);
                load[w] += 10 + count * (b - a);
                group.vertices.push(block_vertex(
                    lw,
                    w as u8,
                    (inbox.tensor, at, width * count),
                    (dest.tensor, out_pos + a),
                    (1, count, width),
                    (1, 0),
                    (a, b),
                    scale,
                ));
            }
        }
        if !group.vertices.is_empty() {
            tiles.push(TileWork {
                tile: lw.tile_id(dest.tile),
                groups: vec![group],
                cycles: 0,
            });
        }
    }
}

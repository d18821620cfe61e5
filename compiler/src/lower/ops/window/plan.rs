//! The convolution planner: how a window pass's output and reduction are partitioned over
//! tiles (the vertex methods weighed, the candidate splits) and the planner's cost of a
//! partition. The blocks a partition gives and the element ranges each reads and writes are
//! [`super::block`]'s.
//!
//! In the spirit of PopLibs' convolution planner (ipu-hardware.md §8): the output is
//! partitioned into blocks over convolution groups (every group its own blocks), batch,
//! output channels and output rows (the input gradient: input channels and input rows; the
//! weight gradient: output and input channels), and the reduction is split too: input
//! channels for the forward pass, output channels for the input gradient, the batch and the
//! rows of the output field for the weight gradient (PopLibs plans the weight-update pass as
//! a convolution whose input channels are the field, which its partition splits). Channel
//! splits fall on whole channel groups of the operands they cut, so that a block's part of a
//! feature map is a few contiguous regions (`[C/g][rows][W][g]` runs).
//!
//! The plan of fewest estimated cycles is kept among those whose per-tile peak bytes (a
//! block's operands and output, or a split reduction's partials and the partials it receives
//! to sum) fit in the op's memory proportion (`CompileOptions::memory_proportion`: its own
//! entry, else the program's `available_memory_proportion`); when none fits, the one of
//! fewest bytes (the memory plan then reports the out-of-memory tiles). A candidate's cost is
//! its slowest block's (the compute set waits for its slowest tile; a block at the edge of a
//! padded field skips taps): the registry's estimate of the block's vertex group
//! (`ipusim_exe::cycles::window`, the function that charges the built vertices) plus its
//! operand bytes at the exchange rate, [`REGION_CYCLES`] per exchange region its operands
//! need, and for a split reduction the partials' exchange and sum (our proxy).

use super::block::{
    block_params, col_extent, first_range, operand_regions, output_region, pool_width, ranges,
    reduction_extent, span, Block, Groups, Kind, Split,
};
use crate::codelets::{Codelet, ConvMethod, WindowGeometry, WindowPass};
use crate::lower::core::Lowerer;
use crate::target::Target;
use ipusim_exe::cycles::conv::SLIC_WINDOW_WIDTH;
use ipusim_exe::cycles::conv_reduce::multi_stage_reduce_plan;
use ipusim_exe::cycles::window::{window_group_cycles, SLIC_CHANNELS};
use ipusim_ir::{DType, NodeId};
use rayon::prelude::*;

/// The vertex methods the planner weighs for a pass, as PopLibs'
/// `getConvVertexTypeCandidates` offers AMP, SLIC and HMAC candidates for every convolution
/// (its cost model then keeps the cheapest). The weight gradient keeps the AMP's 1x1-output
/// product (see `ipusim_exe::cycles::window`); VMAC is not modelled. Our pruning of the
/// search: the HMAC and the SLIC are weighed only when the reduction has fewer channels per
/// group than one AMP pass takes (`amp`), where the AMP's passes are part padding; with full
/// passes the AMP does at least twice the SLIC's and 16 times the HMAC's multiply-accumulates
/// per cycle. The SLIC is offered for the forward pass of half activations on a target that
/// has it, with an undilated kernel and an innermost stride of 1 or 2 (the vertex's
/// `outStride`, PopLibs' `getConvPartialSlicInnerLoopCycles`); its blocks also need at most
/// [`SLIC_CHANNELS`] reduction channels ([`method_fits`]). The input gradient is not offered
/// the SLIC: its stride-dilated input is what the vertex cannot read (PopLibs would dilate
/// it explicitly first, a transform we do not model).
fn methods(target: &Target, pr: &Problem, reduction_channels: u32, amp: u32) -> Vec<ConvMethod> {
    let mut out = vec![ConvMethod::Amp];
    let few = reduction_channels < amp;
    let g = pr.geometry;
    match pr.kind {
        Kind::Conv(WindowPass::Forward) if few => {
            if target.slic && pr.input == DType::F16 && g.dilation == [1, 1] && g.stride[1] <= 2 {
                out.push(ConvMethod::Slic);
            }
            out.push(ConvMethod::Hmac);
        }
        Kind::Conv(WindowPass::InputGrad) if few => out.push(ConvMethod::Hmac),
        _ => {}
    }
    out
}

/// True when `method`'s vertex can compute the blocks of `red_splits` splits of the
/// reduction (`extent` channels in units of `gran`): a SLIC vertex takes at most
/// [`SLIC_CHANNELS`] input channels (PopLibs' planner gives a SLIC tile one input-channel
/// group, `ConvModel.cpp`); the first block is the largest.
fn method_fits(method: ConvMethod, extent: u32, red_splits: u32, gran: u32) -> bool {
    method != ConvMethod::Slic || span(first_range(extent, red_splits, gran)) <= SLIC_CHANNELS
}

/// The reduction elements of one pass of `method`'s vertex over a block whose reduction
/// channels are `red`: the AMP's input channels, the HMAC's dot product along all of the
/// block's channels (one input-channel group), or the SLIC's 1×4 sub-kernel over them.
pub(super) fn pass_channels(method: ConvMethod, amp: u32, red: (u32, u32)) -> u32 {
    match method {
        ConvMethod::Amp => amp,
        ConvMethod::Hmac => span(red).max(1),
        ConvMethod::Slic => SLIC_WINDOW_WIDTH * span(red).max(1),
    }
}
/// The splits `s` of an extent `d` (in units of `gran` elements) that give distinct block
/// sizes, each the fewest splits for its block size.
fn candidates(d: u32, gran: u32) -> Vec<u32> {
    let d = d.div_ceil(gran.max(1));
    let mut out = Vec::new();
    let mut s = 1u32;
    while s <= d.max(1) {
        out.push(s);
        let block = d.div_ceil(s);
        if block <= 1 {
            break;
        }
        // The next block size down, and the fewest splits that give it.
        s = d.div_ceil(block - 1);
    }
    out
}

/// Cycles our planner charges per exchange region (one contiguous range a tile sends or
/// receives): two instructions — the send on its source and the receiver's switch to that
/// source, the instructions the memory plan counts as exchange code — at one instruction
/// per cycle. Our own proxy (PopLibs' planner has no per-region term: its channel-grouped
/// layouts keep regions large, as ours do when a feature map's channels are grouped).
const REGION_CYCLES: u64 = 2;

/// What the planner plans: the pass, its codelet (for the estimate), the geometry, the
/// channel groups, the dtypes and the extents.
pub(super) struct Problem<'a> {
    pub kind: Kind,
    pub codelet: &'a Codelet,
    pub geometry: &'a WindowGeometry,
    pub groups: Groups,
    pub input: DType,
    pub partials: DType,
    pub extents: (u32, u32, u32),
}

/// The split of fewest estimated cycles that fits the memory budget (else of fewest bytes),
/// using at most `tiles` blocks per group.
pub(super) fn plan(lw: &Lowerer, id: NodeId, pr: &Problem, tiles: u32) -> Split {
    let proportion = lw.options().memory_proportion(&lw.graph().node(id).name);
    let budget = (proportion * lw.target().bytes_per_tile as f64) as u64;
    // The search reads only the problem, the tiles, the budget and the target.
    let key = format!(
        "window-plan {:?} {:?} {:?} {:?} {:?} {:?} {:?} {tiles} {budget}",
        pr.kind, pr.codelet, pr.geometry, pr.groups, pr.input, pr.partials, pr.extents
    );
    lw.memoized(key, || search(lw.target(), pr, tiles, budget))
}

/// [`plan`]'s search over the candidate splits: the parallel splits first, and only when
/// none fits the budget, serial phases over the output channels (PopLibs'
/// `outChanSplit.serial`) in increasing number, each with the parallel splits of its phase,
/// until one fits or more phases stop shrinking the bytes (by a tenth: as the matmul
/// planner's serial chunks). A serial split costs its phases' cycles one after the other,
/// so where a parallel split fits, it is faster than the same split run in phases (our
/// pruning of the search: PopLibs weighs every serial split with the parallel ones).
fn search(target: &Target, pr: &Problem, tiles: u32, budget: u64) -> Split {
    let (gc, _, _) = pr.groups.granularity(pr.kind);
    let serials = match pr.kind {
        Kind::Conv(_) => candidates(pr.extents.1, gc),
        Kind::Pool { .. } => vec![1],
    };
    // The choice so far, and its bytes when it does not fit.
    let mut best: Option<(u64, Split)> = None;
    let mut last_bytes = u64::MAX;
    for serial in serials {
        let splits = parallel_splits(target, pr, tiles, serial);
        let known = match fastest_fitting(target, pr, &splits, budget) {
            // A split that fits beats every earlier phase count's (none of theirs fitted).
            Ok((i, _)) => {
                best = Some((0, splits[i]));
                break;
            }
            Err(known) => known,
        };
        // None fits: every candidate costed (on the host's cores) and weighed in candidate
        // order, so the choice is the same on any number of threads.
        let costs: Vec<(u64, u64)> = splits
            .par_iter()
            .zip(known)
            .map(|(&s, k)| k.unwrap_or_else(|| cost(target, pr, s)))
            .collect();
        for (&split, &(_, bytes)) in splits.iter().zip(&costs) {
            if best.is_none_or(|b| bytes < b.0) {
                best = Some((bytes, split));
            }
        }
        let least = costs.iter().map(|c| c.1).min().unwrap_or(u64::MAX);
        if best.is_none() || least as f64 >= 0.9 * last_bytes as f64 {
            break;
        }
        last_bytes = least;
    }
    best.map_or(
        Split {
            batch: 1,
            channels: 1,
            rows: 1,
            cols: 1,
            red: 1,
            method: ConvMethod::Amp,
            serial: 1,
        },
        |b| b.1,
    )
}

/// Candidates costed at once by [`fastest_fitting`] (a few per host thread).
const COST_BATCH: usize = 8;

/// The index and cost of the split of fewest cycles among `splits` that fits `budget` (the
/// first of equals, as weighing them all in order finds it), or, when none fits, the costs
/// known so far. Every candidate's first block is costed (a lower bound of its cycles and
/// bytes: [`weighed`]); those whose bound fits are then costed in full in increasing order
/// of their bound, a batch at a time on the host's cores, until the bound exceeds the
/// fastest fitting split's cycles — no later candidate can be faster. Our pruning of the
/// search: a padded pass weighs up to nine blocks per candidate (the hands-on ResNet101's
/// 7x7 stem over a batch of 64 took 0.58 s).
#[allow(clippy::type_complexity)]
fn fastest_fitting(
    target: &Target,
    pr: &Problem,
    splits: &[Split],
    budget: u64,
) -> Result<(usize, (u64, u64)), Vec<Option<(u64, u64)>>> {
    let firsts: Vec<((u64, u64), bool)> = splits
        .par_iter()
        .map(|&s| weighed(target, pr, s, true))
        .collect();
    let mut known: Vec<Option<(u64, u64)>> =
        firsts.iter().map(|&(c, only)| only.then_some(c)).collect();
    let mut order: Vec<usize> = (0..splits.len())
        .filter(|&i| firsts[i].0 .1 <= budget)
        .collect();
    order.sort_by_key(|&i| (firsts[i].0 .0, i));
    let mut best: Option<(u64, usize)> = None;
    let mut k = 0;
    while k < order.len() {
        if best.is_some_and(|(cycles, _)| firsts[order[k]].0 .0 > cycles) {
            break;
        }
        let batch = &order[k..(k + COST_BATCH).min(order.len())];
        let costs: Vec<(u64, u64)> = batch
            .par_iter()
            .map(|&i| known[i].unwrap_or_else(|| cost(target, pr, splits[i])))
            .collect();
        for (&i, &c) in batch.iter().zip(&costs) {
            known[i] = Some(c);
            if c.1 <= budget && best.is_none_or(|b| (c.0, i) < b) {
                best = Some((c.0, i));
            }
        }
        k += batch.len();
    }
    match best {
        Some((_, i)) => Ok((i, known[i].unwrap_or_default())),
        None => Err(known),
    }
}

/// The candidate splits of `serial` phases: every phase's output channels (its range of the
/// `serial` ranges, the first the largest) split with the batch, rows, columns and
/// reduction over at most `tiles` blocks.
fn parallel_splits(target: &Target, pr: &Problem, tiles: u32, serial: u32) -> Vec<Split> {
    let (kind, g, e) = (pr.kind, pr.geometry, pr.extents);
    let (gc, gro, gred) = pr.groups.granularity(kind);
    let red_extent = reduction_extent(kind, g);
    let amp = target.amp(pr.input, pr.partials).input_channels;
    let methods = methods(target, pr, red_extent, amp);
    let phase_channels = span(first_range(e.1, serial, gc));
    let mut splits = Vec::new();
    for sb in candidates(e.0, 1) {
        for sc in candidates(phase_channels, gc) {
            if u64::from(sb) * u64::from(sc) > u64::from(tiles) {
                break;
            }
            for sr in candidates(e.2, gro) {
                if u64::from(sb) * u64::from(sc) * u64::from(sr) > u64::from(tiles) {
                    break;
                }
                let reds = if red_extent == 0 {
                    vec![1]
                } else {
                    candidates(red_extent, gred)
                };
                // Columns are split only once every block is one row (our pruning of the
                // search: whole rows are fewer exchange regions).
                let one_row = e.2.div_ceil(sr.max(1)) <= 1;
                let cols = match col_extent(kind, g) {
                    c if c > 1 && one_row => candidates(c, 1),
                    _ => vec![1],
                };
                let shapes = reds.iter().flat_map(|&r| cols.iter().map(move |&c| (r, c)));
                for ((sred, scol), &method) in
                    shapes.flat_map(|rc| methods.iter().map(move |m| (rc, m)))
                {
                    if !method_fits(method, red_extent, sred, gred) {
                        continue;
                    }
                    let used = u64::from(sb)
                        * u64::from(sc)
                        * u64::from(sr)
                        * u64::from(sred)
                        * u64::from(scol);
                    if used > u64::from(tiles) {
                        continue;
                    }
                    splits.push(Split {
                        batch: sb,
                        channels: sc,
                        rows: sr,
                        cols: scol,
                        red: sred,
                        method,
                        serial,
                    });
                }
            }
        }
    }
    splits
}

/// The planner's cost of a split: the cycles of its slowest block (the registry's estimate
/// of the block's vertex group, plus the proxy's exchange of its operand bytes, the exchange
/// regions its operands and output are cut into, and for a split reduction the partials'
/// exchange and sum) and the most bytes a block needs at its peak. A compute set
/// takes as long as its slowest tile, and a block at the edge of a padded field skips the
/// kernel taps that fall in the padding: the blocks weighed are the first, the middle and
/// the last along each spatial dimension the split cuts (an interior block reads every tap;
/// the last may be smaller), with the first (largest) range of every other dimension. A
/// block's bytes are its peak: its operands and output while its vertices run, or for a
/// split reduction its partials and the partials it receives to sum, whichever is more.
fn cost(target: &Target, pr: &Problem, s: Split) -> (u64, u64) {
    weighed(target, pr, s, false).0
}

/// [`cost`]'s maximum over the blocks it weighs, or with `first_only` over the first (the
/// first range of every dimension) alone: a lower bound of both figures. With it, whether
/// that block is the only one weighed (the bound is then the cost).
fn weighed(target: &Target, pr: &Problem, s: Split, first_only: bool) -> ((u64, u64), bool) {
    let (kind, g, gr) = (pr.kind, pr.geometry, pr.groups);
    let (gc, gro, gred) = gr.granularity(kind);
    let e = pr.extents;
    // Blocks of a valid (unpadded) forward pass, weight gradient or pool read every tap
    // wherever they are, so the first (largest) is the slowest; a gradient's transposed
    // window reads fewer taps near the field's edges whatever the padding.
    let edges = g.padding != [0; 4]
        || !matches!(
            kind,
            Kind::Conv(WindowPass::Forward | WindowPass::WeightGrad) | Kind::Pool { grad: false }
        );
    // First, middle and last of the `n` ranges of `d` (distinct; the first alone without
    // edges).
    let picks = |d: u32, n: u32, gran: u32| {
        let r = ranges(d, n, gran);
        let at: &[usize] = if edges {
            &[0, r.len() / 2, r.len().saturating_sub(1)]
        } else {
            &[0]
        };
        let mut out: Vec<(u32, u32)> = at.iter().filter_map(|&i| r.get(i).copied()).collect();
        out.dedup();
        if out.is_empty() {
            out.push((0, 0));
        }
        out
    };
    let cols = match col_extent(kind, g) {
        0 => vec![(0, pool_width(kind, g))],
        w => picks(w, s.cols, 1),
    };
    let red_extent = reduction_extent(kind, g);
    // The weight gradient's field rows are its reduction; the other passes' are `rows`.
    let (rows, reds) = match kind {
        Kind::Conv(WindowPass::WeightGrad) => (
            vec![first_range(e.2, s.rows, gro)],
            picks(red_extent, s.red.max(1), gred),
        ),
        _ => (
            picks(e.2, s.rows, gro),
            vec![first_range(red_extent, s.red.max(1), gred)],
        ),
    };
    // The first (largest) serial phase's channels.
    let (batch, channels) = (
        first_range(e.0, s.batch, 1),
        first_range(span(first_range(e.1, s.serial, gc)), s.channels, gc),
    );
    // A serial split's phases run one after the other on the same tiles, and a phase's
    // output stays there as the next phase's temporaries are made (PopLibs multiplies a
    // serial plan's cycles by its serial splits, `ConvModel.cpp`).
    let serial = u64::from(s.serial.max(1));
    let only = rows.len() * cols.len() * reds.len() == 1;
    let (rows, cols, reds) = if first_only {
        (&rows[..1], &cols[..1], &reds[..1])
    } else {
        (&rows[..], &cols[..], &reds[..])
    };
    let mut worst = (0u64, 0u64);
    for &r in rows {
        for &c in cols {
            for &red in reds {
                let b = Block {
                    group: 0,
                    batch,
                    channels,
                    rows: r,
                    cols: c,
                    red,
                };
                let c = block_cost(target, pr, s, &b);
                let cycles = c.cycles.saturating_mul(serial);
                let bytes = c.peak + c.output * (serial - 1);
                worst = (worst.0.max(cycles), worst.1.max(bytes));
            }
        }
    }
    (worst, only)
}

/// One block's [`block_cost`].
struct BlockCost {
    cycles: u64,
    /// Its peak bytes.
    peak: u64,
    /// Its output bytes when they are the pass's result (0 for a split reduction's partials).
    output: u64,
}

/// [`cost`] of one block of split `s`: its cycles, its peak bytes and its output's bytes.
fn block_cost(target: &Target, pr: &Problem, s: Split, block: &Block) -> BlockCost {
    let (kind, g, gr) = (pr.kind, pr.geometry, pr.groups);
    let es = pr.input.size_bytes() as u64;
    let ps = pr.partials.size_bytes() as u64;
    let xbw = u64::from(target.exchange_bytes_per_cycle.max(1));
    let amp = target.amp(pr.input, pr.partials);
    let pass = pass_channels(s.method, amp.input_channels, block.red);
    let mut params = block_params(kind, g, block, pass, gr);
    params.units = match kind {
        Kind::Conv(WindowPass::WeightGrad) => (0, span(block.channels)),
        _ => (0, span(block.batch) * span(block.channels)),
    };
    let lens = params.operand_lens(pr.codelet).unwrap_or_default();
    let reduce = s.reduces(kind);
    let input_bytes: u64 = lens.iter().rev().skip(1).map(|&l| l * es).sum();
    let out_elems = lens.last().copied().unwrap_or(0);
    let out_bytes = out_elems * if reduce { ps } else { es };
    // The exchange regions of the block: its operands' runs and its output's.
    let (ra, rb) = operand_regions(kind, g, block, &params, gr);
    let regions = ra.count() + rb.count() + output_region(kind, g, block, gr).count();
    // The summation of split partials: they cross the exchange and are summed (our proxy).
    let parts = match kind {
        Kind::Conv(WindowPass::WeightGrad) => {
            u64::from(s.batch) * u64::from(s.red.max(1)) * u64::from(s.cols.max(1))
        }
        Kind::Conv(_) => u64::from(s.red.max(1)),
        Kind::Pool { .. } => 1,
    };
    let sum = split_sum_cycles(out_elems, parts, ps, xbw);
    let vertex = window_group_cycles(target, &pr.codelet.with_conv_method(s.method), &params);
    let cycles = vertex
        .saturating_add(input_bytes / xbw)
        .saturating_add(sum)
        .saturating_add(regions.saturating_mul(REGION_CYCLES));
    // The block's peak bytes: its operands and its output while the vertex runs; a split
    // reduction's partials then meet the chunks sent to be summed with them (about as many
    // bytes), once the operands are dead. PopLibs' `ConvModel.cpp` sums the temporaries
    // alive at the same time, the maximum of the convolution's and the reduction's
    // (`e.totalTempBytes`).
    let peak = (input_bytes + out_bytes).max(if reduce { 2 * out_bytes } else { 0 });
    BlockCost {
        cycles,
        peak,
        output: if reduce { 0 } else { out_bytes },
    }
}

/// The proxy's cycles of summing `parts` partial blocks of `out_elems` elements of `ps`
/// bytes on the `parts` tiles that hold them, in the stages of PopLibs'
/// [`multi_stage_reduce_plan`] (its default `enableMultiStageReduce`): per stage a reducing
/// tile receives its chunk of each partial of its section (the bytes at the exchange rate
/// and [`REGION_CYCLES`] per message), sums them (half a cycle per element) and syncs (100
/// cycles).
fn split_sum_cycles(out_elems: u64, parts: u64, ps: u64, xbw: u64) -> u64 {
    if parts <= 1 {
        return 0;
    }
    let mut depth = parts;
    let mut cycles = 0u64;
    // PopLibs' default `enableMultiStageReduce`.
    let stages = multi_stage_reduce_plan(u32::try_from(parts).unwrap_or(u32::MAX), true);
    for d in stages.into_iter().map(u64::from).chain([1]) {
        let sources = depth.div_ceil(d);
        let chunk = out_elems.div_ceil((parts / d).max(1));
        let elems = chunk * sources;
        cycles += elems * ps / xbw + elems / 2 + 100 + sources * REGION_CYCLES;
        depth = d;
    }
    cycles
}

#[cfg(test)]
mod tests;

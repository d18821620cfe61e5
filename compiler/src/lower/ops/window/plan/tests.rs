//! Tests of the convolution planner: its costing, its search and its layouts.

use crate::codelets::{Codelet, ConvMethod, WindowGeometry, WindowPass};
use crate::lower::ops::window::block::{
    block_params, extents, forward_weight_ranges, phase_blocks, ranges, Block, Groups, Kind, Split,
};
use crate::lower::ops::window::plan::{
    block_cost, candidates, cost, parallel_splits, pass_channels, search, weighed, Problem,
};
use crate::lower::ops::window::regions::{plane_rect, span, Region};
use crate::target::Target;
use ipusim_exe::cycles::window::window_group_cycles;
use ipusim_ir::DType;

/// A convolution of `n` images of `c` channels on an `f`x`f` field into `o` channels in
/// `groups` groups, a `k`x`k` kernel at `stride` with `pad` on every side, undilated.
fn square(
    n: u32,
    (c, o, groups): (u32, u32, u32),
    f: u32,
    (k, stride, pad): (u32, u32, u32),
) -> WindowGeometry {
    let out = (f + 2 * pad - k) / stride + 1;
    WindowGeometry {
        n,
        c,
        h: f,
        w: f,
        o,
        kh: k,
        kw: k,
        stride: [stride; 2],
        padding: [pad; 4],
        dilation: [1, 1],
        groups,
        oh: out,
        ow: out,
    }
}

#[test]
fn a_forward_block_reads_its_weights_in_the_order_its_vertex_indexes_them() {
    // Group 1 of a grouped 3x3 convolution: output channels 2..5 of the group over
    // input channels 3..13, read row-major and in chunks of 4 input channels (3, 4..8,
    // 8..12, 12; the first and last cut by the block). Element `[o][c][kh][kw]` of the
    // block is where `WindowParams::forward_weight_at` says the vertex finds it, and the
    // channels `weight_chunk_rest` counts after it follow it.
    let g = square(2, (32, 16, 2), 6, (3, 1, 1));
    let block = Block {
        group: 1,
        batch: (0, 2),
        channels: (2, 5),
        rows: (0, 6),
        cols: (0, 6),
        red: (3, 13),
    };
    let gr = Groups {
        x: 1,
        aux: 1,
        out: 1,
    };
    let (cg, taps) = (16usize, 9usize);
    for chunk in [0, 4, 16] {
        let mut p = block_params(Kind::Conv(WindowPass::Forward), &g, &block, 4, gr);
        p.weight_chunk = chunk;
        let read: Vec<u64> = forward_weight_ranges(&g, &block, chunk)
            .iter()
            .flat_map(|&(b, l)| b..b + l)
            .collect();
        assert_eq!(read.len(), 3 * 10 * taps);
        for o in 0..3 {
            for c in 0..10 {
                for t in 0..taps {
                    // OIHW: output channel 8 + 2 + o (group 1 has 8 of them).
                    let want = (((8 + 2 + o) * cg + 3 + c) * taps + t) as u64;
                    assert_eq!(read[p.forward_weight_at(o, c) + t], want, "{chunk} {o} {c}");
                }
                // The rest of a chunk's channels follow it `taps` apart.
                let rest = p.weight_chunk_rest(c);
                assert!(rest >= 1 && c + rest <= 10, "{chunk} {c} {rest}");
                for i in 0..rest {
                    let at = p.forward_weight_at(o, c) + i * taps;
                    assert_eq!(p.forward_weight_at(o, c + i), at, "{chunk} {o} {c} {i}");
                }
            }
        }
    }
}

/// The estimate of one group's whole block of a 3x3 convolution (padding 1, `f`x`f`
/// field, batch 1) of `c` input and `o` output channels in `groups` groups, FP16 with
/// FP32 partials on mk2, by the vertex `method`.
fn whole_block_cycles(f: u32, c: u32, o: u32, groups: u32, method: ConvMethod) -> u64 {
    let g = square(1, (c, o, groups), f, (3, 1, 1));
    let block = Block {
        group: 0,
        batch: (0, 1),
        channels: (0, o / groups),
        rows: (0, f),
        cols: (0, f),
        red: (0, c / groups),
    };
    let target = Target::mk2();
    let amp = target.amp(DType::F16, DType::F32).input_channels;
    let gr = Groups {
        x: 1,
        aux: 1,
        out: 1,
    };
    let kind = Kind::Conv(WindowPass::Forward);
    let mut p = block_params(kind, &g, &block, pass_channels(method, amp, block.red), gr);
    p.units = (0, o / groups);
    let codelet = Codelet::Conv {
        pass: WindowPass::Forward,
        input: DType::F16,
        partials: DType::F32,
        output: DType::F16,
        method,
    };
    window_group_cycles(&target, &codelet, &p)
}

#[test]
fn the_hmac_vertex_wins_on_few_channels_per_group_and_the_amp_on_many() {
    // A depthwise group (1 channel in, 1 out) on a small block (one output position): 15
    // of the AMP's 16 input channels of every pass are padding and its overheads
    // dominate; the HMAC's nine one-channel dot products are cheaper.
    let (amp, hmac) = (
        whole_block_cycles(1, 32, 32, 32, ConvMethod::Amp),
        whole_block_cycles(1, 32, 32, 32, ConvMethod::Hmac),
    );
    assert!(hmac < amp, "depthwise: HMAC {hmac} vs AMP {amp}");
    // On a 16x16 block the AMP's one pass per position wins even with the padding.
    assert!(
        whole_block_cycles(16, 32, 32, 32, ConvMethod::Amp)
            < whole_block_cycles(16, 32, 32, 32, ConvMethod::Hmac)
    );
    // A dense 64-channel layer: the AMP's passes are full.
    let (amp, hmac) = (
        whole_block_cycles(16, 64, 64, 1, ConvMethod::Amp),
        whole_block_cycles(16, 64, 64, 1, ConvMethod::Hmac),
    );
    assert!(amp < hmac, "dense: AMP {amp} vs HMAC {hmac}");
    // The HMAC's pass is the block's channels; the AMP's its input channels.
    assert_eq!(pass_channels(ConvMethod::Hmac, 16, (4, 7)), 3);
    assert_eq!(pass_channels(ConvMethod::Amp, 16, (4, 7)), 16);
}

#[test]
fn plane_rects_of_a_grouped_map_are_one_run_per_channel_group_and_row() {
    // 2 channel groups of 16 (channels 16..48 of 64), rows 2..4 of 8, width 5, image 0
    // of 1.
    let r = plane_rect(((0, 1), (16, 48)), ((2, 4), (0, 5)), (1, 64, 8, 5), 16);
    assert_eq!(r.len(), 2);
    assert_eq!(r[0], ((8 + 2) * 5 * 16, 2 * 5 * 16));
    assert_eq!(r[1], ((2 * 8 + 2) * 5 * 16, 2 * 5 * 16));
    // Ungrouped: one run per channel.
    assert_eq!(
        plane_rect(((0, 1), (16, 48)), ((2, 4), (0, 5)), (1, 64, 8, 5), 1).len(),
        32
    );
    // Whole planes of consecutive groups merge.
    assert_eq!(
        plane_rect(((0, 1), (0, 32)), ((0, 8), (0, 5)), (1, 64, 8, 5), 16).len(),
        1
    );
    // A range of columns: one run per row and channel group.
    let r = plane_rect(((0, 1), (0, 16)), ((1, 3), (2, 4)), (1, 64, 8, 5), 16);
    assert_eq!(r, vec![((5 + 2) * 16, 2 * 16), ((2 * 5 + 2) * 16, 2 * 16)]);
}

#[test]
fn the_batch_of_a_channel_group_is_one_run() {
    // 4 images of 64 channels, 2x2 maps, grouped by 8: storage [8, 4, 2, 2, 8].
    let plane = 2 * 2 * 8;
    // All 4 images of channels 16..32 (groups 2 and 3): one run of both groups.
    let r = plane_rect(((0, 4), (16, 32)), ((0, 2), (0, 2)), (4, 64, 2, 2), 8);
    assert_eq!(r, vec![(2 * 4 * plane, 2 * 4 * plane)]);
    // Images 1..3 of the same channels: one run per group, group-major.
    let r = plane_rect(((1, 3), (16, 32)), ((0, 2), (0, 2)), (4, 64, 2, 2), 8);
    assert_eq!(
        r,
        vec![
            ((2 * 4 + 1) * plane, 2 * plane),
            ((3 * 4 + 1) * plane, 2 * plane)
        ]
    );
    // Row-major (group 1): one run per image and channel, image-major.
    let r = plane_rect(((0, 2), (1, 3)), ((0, 2), (0, 2)), (4, 64, 2, 2), 1);
    assert_eq!(r, vec![(4, 8), ((64 + 1) * 4, 8)]);
}

/// The AMP codelet of `pass` on `input` activations and outputs, FP32 partials.
fn amp_codelet(pass: WindowPass, input: DType) -> Codelet {
    Codelet::Conv {
        pass,
        input,
        partials: DType::F32,
        output: input,
        method: ConvMethod::Amp,
    }
}

/// The planner's problem of `kind` with `codelet`'s types over geometry `g`.
fn problem<'a>(kind: Kind, codelet: &'a Codelet, g: &'a WindowGeometry, gr: Groups) -> Problem<'a> {
    let Codelet::Conv {
        input, partials, ..
    } = *codelet
    else {
        unreachable!("a convolution codelet")
    };
    Problem {
        kind,
        codelet,
        geometry: g,
        groups: gr,
        input,
        partials,
        extents: extents(kind, g),
    }
}

#[test]
fn a_split_costs_as_its_slowest_block() {
    // Padded fields whose edge blocks skip the taps in the padding: a 3x3 stride-2
    // convolution of a 4x4 field (ResNet's layer4 at 64x64 images) cut in two row
    // blocks, the 7x7 stride-2 stem cut in four, and the weight gradient of the first
    // with its field rows (its reduction) cut in two. Each pass's cost is its slowest
    // block's, never less: the plan is weighed by the tile that holds up the compute set.
    let target = Target::mk2();
    let geometry = |c, f, o, k, pad| square(4, (c, o, 1), f, (k, 2, pad));
    let (layer4, stem) = (geometry(64, 4, 64, 3, 1), geometry(16, 32, 16, 7, 3));
    // Unpadded (valid) windows, where only the first block is costed: a 1x1 stride-2
    // downsample cut in two row blocks, a 3x3 weight gradient with its 5 field rows cut
    // in three (blocks of 2, 2 and 1 rows).
    let (downsample, valid) = (geometry(64, 4, 64, 1, 0), geometry(16, 11, 16, 3, 0));
    let cases = [
        (layer4, WindowPass::Forward, (1, 1, 2, 1, 1)),
        (stem, WindowPass::Forward, (1, 1, 4, 1, 1)),
        (stem, WindowPass::InputGrad, (1, 1, 4, 1, 1)),
        (layer4, WindowPass::WeightGrad, (1, 1, 1, 1, 2)),
        (downsample, WindowPass::Forward, (1, 1, 2, 1, 1)),
        (valid, WindowPass::WeightGrad, (1, 1, 1, 1, 3)),
    ];
    let gr = Groups {
        x: 8,
        aux: 8,
        out: 8,
    };
    let mut edge_lighter = false;
    for (g, pass, (batch, channels, rows, cols, red)) in cases {
        let kind = Kind::Conv(pass);
        let codelet = amp_codelet(pass, DType::F16);
        let pr = problem(kind, &codelet, &g, gr);
        let s = Split {
            batch,
            channels,
            rows,
            cols,
            red,
            method: ConvMethod::Amp,
            serial: 1,
        };
        let all: Vec<(u64, u64)> = phase_blocks(1, (kind, gr), &g, pr.extents, s)
            .concat()
            .iter()
            .map(|b| block_cost(&target, &pr, s, b))
            .map(|c| (c.cycles, c.peak))
            .collect();
        let slowest = all.iter().map(|c| c.0).max().unwrap();
        let fullest = all.iter().map(|c| c.1).max().unwrap();
        assert_eq!(cost(&target, &pr, s), (slowest, fullest), "{pass:?} {g:?}");
        edge_lighter |= all[0].0 < slowest;
    }
    // The first block is not always the slowest (the reason the costing looks further).
    assert!(edge_lighter);
}

#[test]
fn memory_short_passes_run_in_serial_phases() {
    // 256 input channels into 512 outputs of a 2x2 field (3x3 kernel, padding 1), FP32:
    // 4.7 MB of weights over at most 1472 tiles, so no parallel split's blocks are below
    // a few kilobytes; serial phases over the output channels cut each phase's weights.
    let target = Target::mk2();
    let g = square(1, (256, 512, 1), 2, (3, 1, 1));
    let gr = Groups {
        x: 8,
        aux: 8,
        out: 8,
    };
    for pass in [WindowPass::Forward, WindowPass::WeightGrad] {
        let kind = Kind::Conv(pass);
        let codelet = amp_codelet(pass, DType::F32);
        let pr = problem(kind, &codelet, &g, gr);
        let tiles = target.tiles;
        // Ample memory: one phase.
        let free = search(&target, &pr, tiles, u64::MAX);
        assert_eq!(free.serial, 1, "{pass:?}");
        let least = |serial| {
            parallel_splits(&target, &pr, tiles, serial)
                .into_iter()
                .map(|s| cost(&target, &pr, s).1)
                .min()
                .unwrap()
        };
        // Two phases take fewer bytes than any parallel split.
        let budget = least(2);
        assert!(budget < least(1), "{pass:?}: {budget} B");
        // A budget below every parallel split's bytes: serial phases that fit it, slower.
        let free_cycles = cost(&target, &pr, free).0;
        let short = search(&target, &pr, tiles, budget);
        let (cycles, bytes) = cost(&target, &pr, short);
        assert!(short.serial > 1, "{pass:?}: {short:?}");
        assert!(bytes <= budget, "{pass:?}: {short:?} {bytes} B of {budget}");
        assert!(cycles > free_cycles, "{pass:?}: {cycles} <= {free_cycles}");
        // The phases cover the output channels, each split over the same tiles.
        let phases = phase_blocks(1, (kind, gr), &g, pr.extents, short);
        assert_eq!(phases.len(), short.serial as usize);
        let mut channels: Vec<(u32, u32)> = phases
            .iter()
            .flat_map(|p| p.iter().map(|b| b.channels))
            .collect();
        channels.dedup();
        assert_eq!(channels.first().map(|c| c.0), Some(0));
        assert!(channels
            .windows(2)
            .all(|w| w[0].1 == w[1].0 || w[0] == w[1]));
        assert_eq!(channels.last().map(|c| c.1), Some(512));
        // Nothing fits: the fewest bytes found, the phases stopping once they no longer
        // shrink them.
        let none = search(&target, &pr, tiles, 0);
        assert!(cost(&target, &pr, none).1 <= bytes, "{pass:?}: {none:?}");
    }
}

/// [`search`] as it was before [`fastest_fitting`] pruned it: every candidate of every
/// phase count costed in full and weighed in order.
fn exhaustive(target: &Target, pr: &Problem, tiles: u32, budget: u64) -> Split {
    let (gc, _, _) = pr.groups.granularity(pr.kind);
    let mut best: Option<(bool, u64, u64, Split)> = None;
    let mut last_bytes = u64::MAX;
    for serial in candidates(pr.extents.1, gc) {
        let splits = parallel_splits(target, pr, tiles, serial);
        let costs: Vec<(u64, u64)> = splits.iter().map(|&s| cost(target, pr, s)).collect();
        for (&split, &(cycles, bytes)) in splits.iter().zip(&costs) {
            let fits = bytes <= budget;
            let better = match &best {
                None => true,
                Some((bf, bc, bb, _)) => match (fits, *bf) {
                    (true, false) => true,
                    (false, true) => false,
                    (true, true) => cycles < *bc,
                    (false, false) => bytes < *bb,
                },
            };
            if better {
                best = Some((fits, cycles, bytes, split));
            }
        }
        let least = costs.iter().map(|c| c.1).min().unwrap_or(u64::MAX);
        if best.as_ref().is_none_or(|b| b.0) || least as f64 >= 0.9 * last_bytes as f64 {
            break;
        }
        last_bytes = least;
    }
    best.expect("a candidate").3
}

#[test]
fn the_pruned_search_chooses_what_weighing_every_candidate_chooses() {
    // Padded and valid windows, strided and not, the stem's 7x7 over a batch, every pass,
    // in FP16 and FP32, on a whole chip and on 64 tiles, with ample memory, a budget
    // between the candidates' bytes and none: the same split as the exhaustive search.
    let target = Target::mk2();
    let gr = Groups {
        x: 8,
        aux: 8,
        out: 8,
    };
    let geometries = [
        square(8, (3, 64, 1), 32, (7, 2, 3)),
        square(4, (64, 64, 1), 8, (3, 1, 1)),
        square(4, (64, 128, 1), 8, (1, 2, 0)),
        square(2, (256, 512, 1), 2, (3, 1, 1)),
        square(16, (16, 16, 1), 11, (3, 1, 0)),
    ];
    for g in &geometries {
        for pass in [
            WindowPass::Forward,
            WindowPass::InputGrad,
            WindowPass::WeightGrad,
        ] {
            for dtype in [DType::F16, DType::F32] {
                let kind = Kind::Conv(pass);
                let codelet = amp_codelet(pass, dtype);
                let pr = problem(kind, &codelet, g, gr);
                for tiles in [1472, 64] {
                    let bytes: Vec<u64> = parallel_splits(&target, &pr, tiles, 1)
                        .into_iter()
                        .map(|s| cost(&target, &pr, s).1)
                        .collect();
                    let mid = {
                        let mut b = bytes.clone();
                        b.sort_unstable();
                        b[b.len() / 2]
                    };
                    for budget in [u64::MAX, mid, 0] {
                        let want = exhaustive(&target, &pr, tiles, budget);
                        let got = search(&target, &pr, tiles, budget);
                        assert_eq!(got, want, "{pass:?} {dtype:?} {g:?} {tiles} {budget}");
                    }
                }
            }
        }
    }
    // The stem's forward pass with ample memory: most candidates' first block is
    // already slower than the chosen split, so they are never costed in full.
    let codelet = amp_codelet(WindowPass::Forward, DType::F16);
    let pr = problem(
        Kind::Conv(WindowPass::Forward),
        &codelet,
        &geometries[0],
        gr,
    );
    let splits = parallel_splits(&target, &pr, 1472, 1);
    let chosen = cost(&target, &pr, search(&target, &pr, 1472, u64::MAX)).0;
    let costed = splits
        .iter()
        .filter(|&&s| weighed(&target, &pr, s, true).0 .0 <= chosen)
        .count();
    assert!(costed * 2 < splits.len(), "{costed} of {}", splits.len());
}

#[test]
fn splits_fall_on_whole_groups() {
    assert_eq!(ranges(64, 3, 16), vec![(0, 32), (32, 64)]);
    assert_eq!(
        ranges(64, 4, 16),
        vec![(0, 16), (16, 32), (32, 48), (48, 64)]
    );
    assert_eq!(ranges(10, 3, 1), vec![(0, 4), (4, 8), (8, 10)]);
    assert_eq!(candidates(64, 16), vec![1, 2, 4]);
}

/// A deterministic sequence of numbers below `n` (xorshift from `seed`).
fn region_numbers(mut state: u64) -> impl FnMut(u32) -> u32 {
    move |n| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % u64::from(n.max(1))) as u32
    }
}

/// A range within `0..=extent` (sometimes empty, often all of it).
fn any_range(next: &mut impl FnMut(u32) -> u32, extent: u32) -> (u32, u32) {
    match next(6) {
        0 | 2 => (0, extent),
        1 => {
            let a = next(extent + 1);
            (a, a)
        }
        _ => {
            let a = next(extent + 1);
            (a, a + next(extent - a + 1))
        }
    }
}

/// The count of every region equals the number of runs made, over random feature maps
/// (grouped and not, whole and partial rows and columns, empty ranges) and weights
/// (row-major and chunked).
#[test]
fn a_regions_count_is_the_number_of_its_runs() {
    let mut next = region_numbers(0x2545_f491_4f6c_dd1d);
    let mut merged = 0;
    for case in 0..20_000 {
        let group = [1, 1, 2, 4, 8, 16][next(6) as usize];
        let n_all = 1 + next(5);
        let chans = group * (1 + next(6));
        let (h, w) = (1 + next(6), 1 + next(6));
        let planes = (any_range(&mut next, n_all), any_range(&mut next, chans));
        // Columns now and then past the field's edge (a run as wide as a row then starts
        // inside one row and ends in the next).
        let past = next(3);
        let rect = (any_range(&mut next, h), any_range(&mut next, w + past));
        let region = Region::Plane {
            planes,
            rect,
            dims: (n_all, chans, h, w),
            group,
        };
        let runs = region.ranges();
        assert_eq!(region.count(), runs.len() as u64, "case {case}: {region:?}");
        // A run longer than one plane's (whole columns) or one row's is a merge.
        let whole = rect.1 .0 == 0 && rect.1 .1 >= w;
        let one = if whole {
            span(rect.0) * w
        } else {
            span(rect.1)
        } * group;
        merged += u64::from(runs.iter().any(|r| r.1 > u64::from(one)));
        let (kh, kw) = (1 + next(3), 1 + next(3));
        let per_group = 1 + next(20);
        let region = Region::Weights {
            kernel: u64::from(kh * kw),
            per_group: u64::from(per_group),
            outs: any_range(&mut next, 6),
            ins: any_range(&mut next, per_group),
            chunk: [0, 0, 1, 4, 8, 16][next(6) as usize],
        };
        assert_eq!(
            region.count(),
            region.ranges().len() as u64,
            "case {case}: {region:?}"
        );
    }
    // The cases exercise the merges, not only runs that stay apart.
    assert!(merged > 500, "{merged} cases merged runs");
    assert_eq!(Region::Empty.count(), 0);
}

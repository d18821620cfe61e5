//! Cycle estimators of summing convolution partials across tiles, as PopLibs does it: the
//! `poplin::ReduceAdd` vertex (`getReduceCycleEstimate`), the variant PopLibs' conv
//! reduction builds, the stages of a multi-stage reduction (`getMultiStageReducePlan`) and
//! the planner's whole reduction (`estimateConvReduceCycles`).
//!
//! Sources and conventions as in [`super::conv`] (`graphcore/poplibs` @ `7eac0f26`:
//! `lib/poplin/PerformanceEstimation.hpp` "PE.hpp", `poplinCycleEstimators.cpp` "CE.cpp"
//! L660–680, `ConvReduce.cpp`, `ConvReducePlan.{hpp,cpp}`); figures are tile cycles with
//! saturating arithmetic.

use super::saturating::{cy, flag, workers, Cy};
use crate::target::Target;
use ipusim_ir::DType;
use serde::{Deserialize, Serialize};

/// Which `poplin::ReduceAdd` codelet sums the partials.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReduceAddVariant {
    /// The general vertex: every partial row through its own pointer (PopLibs
    /// `singleInput = false`).
    MultiInput,
    /// The tile's own partial row apart and the exchanged rows in one contiguous block
    /// (`singleInput = true`); `constrain_partials` (PopLibs' "fast reduce") puts that block in
    /// interleaved memory and doubles the load rate.
    SingleInput {
        /// Partials in interleaved memory (PopLibs `constrainPartials`).
        constrain_partials: bool,
    },
}

/// A `poplin::ReduceAdd` vertex.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReduceAddParams {
    /// Output elements (`numElems`, the size of `out`).
    pub out_elems: u32,
    /// The vertex's `numPartials`: every partial row for [`ReduceAddVariant::MultiInput`];
    /// the exchanged rows only, i.e. reduction depth − 1, for
    /// [`ReduceAddVariant::SingleInput`] (ConvReduce.cpp L108, L115).
    pub num_partials: u32,
    /// Output type.
    pub out: DType,
    /// Partials type.
    pub partials: DType,
    /// The codelet.
    pub variant: ReduceAddVariant,
}

/// PopLibs `getReduceCycleEstimate` (PE.hpp L1560–1637), the `ReduceAdd` vertex estimate
/// (CE.cpp L660–680). With `acc` = 8 halves or 4 floats per accumulator op and `d` partials
/// per 64-bit load:
///
/// - single input: `W·(20 + (c·N + o)·ceil(⌊out / acc⌋ / W)) + 33`, c = `acc / min(acc,
///   d·(1 + constrain))`, o = 7/8 (float partials, half/float out) or 9/10 (half partials);
/// - multi input: `W·(32 + tail + (c·N + o)·loops_per_worker)`, c = `acc / min(acc, d) + 1`
///   (a pointer load per row), loops = `⌊out / acc⌋ +` one per set bit of `out mod acc`;
///   o = 6/7 (float partials, half/float out) or 8/9; a remainder of loops that is not a
///   whole vector costs `tail = 2N + 13 | 11` once instead of a loop.
///
/// The multi-input vertex reads each row through a pointer and cannot use interleaved loads,
/// so it is the slower one: 7–29% (ipu-hardware.md §8). PopLibs' conv reduction uses the
/// single-input one only when the output is a multiple of 8 halves / 4 floats and the
/// exchanged partials fit in 1/16 of tile memory (or fast reduce is on), see
/// [`reduce_add_variant`]; on a 256 KiB Mk1 tile that size test never passes, so the
/// multi-input vertex is the default there.
pub fn reduce_add_cycles(target: &Target, p: &ReduceAddParams) -> u64 {
    let fp = p.partials != DType::F16;
    let fo = p.out != DType::F16;
    let nw = workers(target);
    let acc: u64 = if fp { 4 } else { 8 };
    let per_load = target.vector_width(p.partials);
    let out = p.out_elems as u64;
    let n = cy(p.num_partials);
    match p.variant {
        ReduceAddVariant::SingleInput { constrain_partials } => {
            let load = per_load * (1 + flag(constrain_partials));
            let per_loop = acc / acc.min(load).max(1);
            let loops_per_worker = (out / acc).div_ceil(nw);
            let outer = match (fp, fo) {
                (true, true) => 8,
                (true, false) => 7,
                (false, true) => 10,
                (false, false) => 9,
            };
            let c = 20 + (per_loop * n + outer) * loops_per_worker;
            (nw * c + 33).0
        }
        ReduceAddVariant::MultiInput => {
            let per_loop = acc / acc.min(per_load).max(1) + 1;
            let mut loops = out / acc;
            // One extra loop per set bit below the accumulator width (PE.hpp L1611–1615).
            loops += (out % acc).count_ones() as u64;
            let mut c = Cy(32);
            let mut loops_per_worker = loops / nw;
            if !loops.is_multiple_of(nw) {
                if !out.is_multiple_of(acc) {
                    c = c + 2 * n + if fp { 13 } else { 11 };
                } else {
                    loops_per_worker += 1;
                }
            }
            let outer = match (fo, fp) {
                (true, true) => 7,
                (true, false) => 9,
                (false, true) => 6,
                (false, false) => 8,
            };
            c = c + (per_loop * n + outer) * loops_per_worker;
            (nw * c).0
        }
    }
}

/// Bytes of one tile memory element (C1 `TMEM_ELEMSIZE = 0x10` KiB, an ipu1 value; the Mk2
/// value is not found), for PopLibs' single-input size test.
pub const MEMORY_ELEMENT_BYTES: u64 = 16 * 1024;

/// PopLibs `checkPartialsSizeForSingleInputReduce` (ConvReducePlan.hpp L16–31): the exchanged
/// partials, rounded up to whole memory elements, take less than 1/16 of tile memory (we take
/// the tile's bytes for PopLibs' span of memory element offsets).
pub fn partials_fit_single_input_reduce(target: &Target, partials_bytes: u64) -> bool {
    let occupied = partials_bytes.div_ceil(MEMORY_ELEMENT_BYTES);
    occupied.saturating_mul(MEMORY_ELEMENT_BYTES) < target.bytes_per_tile as u64 / 16
}

/// The `ReduceAdd` variant PopLibs' conv reduction builds for a tile reducing `out_elems`
/// outputs from `depth` partial rows (ConvReduce.cpp L76–90): single input when `out_elems`
/// is a multiple of 8 halves / 4 floats and either `enable_fast_reduce` (option
/// `enableFastReduce`, default false) or the `depth − 1` exchanged rows fit
/// ([`partials_fit_single_input_reduce`]); the partials are constrained to interleaved memory
/// only with fast reduce.
pub fn reduce_add_variant(
    target: &Target,
    out_elems: u32,
    depth: u32,
    partials: DType,
    enable_fast_reduce: bool,
) -> ReduceAddVariant {
    let grain = if partials == DType::F16 { 8 } else { 4 };
    let possible = out_elems.is_multiple_of(grain);
    let bytes = (out_elems as u64)
        .saturating_mul(depth.saturating_sub(1) as u64)
        .saturating_mul(partials.size_bytes() as u64);
    if possible && (enable_fast_reduce || partials_fit_single_input_reduce(target, bytes)) {
        ReduceAddVariant::SingleInput {
            constrain_partials: enable_fast_reduce,
        }
    } else {
        ReduceAddVariant::MultiInput
    }
}

/// The cycles of the `ReduceAdd` vertex PopLibs' conv reduction builds on a tile that sums
/// `out_elems` outputs from `depth` partial rows (ConvReduce.cpp): the variant
/// [`reduce_add_variant`] picks, with one partial row fewer through the exchanged block
/// when it is the single-input one.
pub fn reduce_add_vertex_cycles(
    target: &Target,
    (out_elems, depth): (u32, u32),
    (partials, out): (DType, DType),
    enable_fast_reduce: bool,
) -> u64 {
    let variant = reduce_add_variant(target, out_elems, depth, partials, enable_fast_reduce);
    let single = matches!(variant, ReduceAddVariant::SingleInput { .. });
    reduce_add_cycles(
        target,
        &ReduceAddParams {
            out_elems,
            num_partials: depth.saturating_sub(u32::from(single)),
            out,
            partials,
            variant,
        },
    )
}

/// PopLibs `getMultiStageReducePlan` (ConvReducePlan.cpp L10–65): the depths of the
/// intermediate stages of a reduction of `depth` partials (empty: one stage). Multi-stage
/// reduction (option `enableMultiStageReduce`, default true) uses 2 stages from depth 16 and
/// 3 from 125, each stage's depth chosen as `⌊depth^((s−1)/s)⌋` or one more, whichever gives
/// fewer messages per tile.
pub fn multi_stage_reduce_plan(depth: u32, enable_multi_stage_reduce: bool) -> Vec<u32> {
    let stages = if !enable_multi_stage_reduce {
        1
    } else if depth >= 125 {
        3
    } else if depth >= 16 {
        2
    } else {
        1
    };
    reduce_plan_and_cost(depth, stages).0
}

fn reduce_plan_and_cost(depth: u32, stages: u32) -> (Vec<u32>, f32) {
    if stages <= 1 {
        return (Vec::new(), depth as f32);
    }
    let exponent = (stages as f64 - 1.0) / stages as f64;
    let down = ((depth as f64).powf(exponent) as u32).max(1);
    let up = down.saturating_add(1);
    let (mut down_plan, mut down_cost) = reduce_plan_and_cost(down, stages - 1);
    down_cost += depth as f32 / down as f32;
    let (mut up_plan, mut up_cost) = reduce_plan_and_cost(up, stages - 1);
    up_cost += depth as f32 / up as f32;
    if down_cost < up_cost {
        down_plan.insert(0, down);
        (down_plan, down_cost)
    } else {
        up_plan.insert(0, up);
        (up_plan, up_cost)
    }
}

/// PopLibs `estimateCastCycles` (PE.hpp L1822–1833): casting `out_elems` partials to the
/// output type, `W·(max(ceil(n_w / partials vw), ceil(n_w / out vw)) + 26)` with `n_w =
/// ceil(out_elems / W)`.
pub fn reduce_cast_cycles(target: &Target, out_elems: u32, partials: DType, out: DType) -> u64 {
    let nw = workers(target);
    let per_worker = cy(out_elems).div_ceil(nw);
    let load = per_worker.div_ceil(target.vector_width(partials));
    let store = per_worker.div_ceil(target.vector_width(out));
    (nw * (load.max(store) + 26)).0
}

/// The planner's reduction of conv partials on one tile, PopLibs `estimateConvReduceCycles`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConvReduceParams {
    /// Outputs the tile produces (`outputSize`).
    pub out_elems: u32,
    /// Partial rows reduced (`reductionDepth`, the input-channel split across tiles).
    pub depth: u32,
    /// The input-channel serial split (casting waits for the last serial split).
    pub in_chan_serial_split: u32,
    /// Output type.
    pub out: DType,
    /// Partials type.
    pub partials: DType,
    /// Option `enableMultiStageReduce` (PopLibs default true).
    pub enable_multi_stage_reduce: bool,
    /// Option `enableFastReduce` (PopLibs default false).
    pub enable_fast_reduce: bool,
}

/// PopLibs `estimateConvReduceCycles` (PE.hpp L1835–1910): nothing for depth 0; for depth 1 a
/// cast when the types differ and there is no serial split ([`reduce_cast_cycles`]); else one
/// [`reduce_add_cycles`] per stage of [`multi_stage_reduce_plan`] plus the last, each with
/// the variant [`reduce_add_variant`] picks (its `numPartials` one less when single input) and
/// the output type of the last stage only.
pub fn conv_reduce_cycles(target: &Target, p: &ConvReduceParams) -> u64 {
    let fp = p.partials != DType::F16;
    let float_out = p.out != DType::F16;
    if p.depth == 0 {
        return 0;
    }
    if p.depth == 1 {
        return if float_out == fp || p.in_chan_serial_split > 1 {
            0
        } else {
            reduce_cast_cycles(target, p.out_elems, p.partials, p.out)
        };
    }
    let stage = |out_elems: u32, depth: u32, out: DType| {
        reduce_add_vertex_cycles(
            target,
            (out_elems, depth),
            (p.partials, out),
            p.enable_fast_reduce,
        )
    };
    let mut cycles = Cy(0);
    let mut remaining = p.depth;
    let mut out_this_stage = p.out_elems.saturating_mul(p.depth);
    for d in multi_stage_reduce_plan(p.depth, p.enable_multi_stage_reduce) {
        let depth_this_stage = remaining.div_ceil(d.max(1)).max(1);
        remaining = remaining.div_ceil(depth_this_stage);
        let out_type = if remaining == 1 { p.out } else { p.partials };
        out_this_stage = out_this_stage.div_ceil(depth_this_stage);
        cycles = cycles + stage(out_this_stage, depth_this_stage, out_type);
    }
    if remaining > 1 {
        out_this_stage = out_this_stage.div_ceil(remaining);
        cycles = cycles + stage(out_this_stage, remaining, p.out);
    }
    cycles.0
}

#[cfg(test)]
mod tests {
    //! Expected figures are worked by hand from the PopLibs formulas cited above (the
    //! arithmetic is in the comments), not produced by running this code. Mk2: 6 workers,
    //! 2 floats / 4 halves per 64-bit load.
    use super::*;
    use DType::{F16, F32};

    fn mk2() -> Target {
        Target::mk2()
    }
    fn mk1() -> Target {
        Target::mk1()
    }

    fn reduce(
        out_elems: u32,
        n: u32,
        out: DType,
        partials: DType,
        variant: ReduceAddVariant,
    ) -> u64 {
        reduce_add_cycles(
            &mk2(),
            &ReduceAddParams {
                out_elems,
                num_partials: n,
                out,
                partials,
                variant,
            },
        )
    }

    #[test]
    fn reduce_add_multi_and_single_input() {
        use ReduceAddVariant::{MultiInput, SingleInput};
        // Multi, float/float, 100 outputs, 4 rows: 3 cycles per loop (2 loads + pointer);
        // 25 loops: 4 per worker + 1 (remainder of whole vectors); 32 + (3·4 + 7)·5 = 127 → 762.
        assert_eq!(reduce(100, 4, F32, F32, MultiInput), 762);
        // Single, the same depth (3 exchanged rows): 2 per loop, ceil(25/6) = 5;
        // 6·(20 + (2·3 + 8)·5) + 33 = 573.
        let single = SingleInput {
            constrain_partials: false,
        };
        assert_eq!(reduce(100, 3, F32, F32, single), 573);
        // Multi, half/half, 30 outputs: 3 loops + 2 set bits of 30 mod 8 = 5 loops, 0 per
        // worker, tail 2·3 + 11: 6·(32 + 17) = 294.
        assert_eq!(reduce(30, 3, F16, F16, MultiInput), 294);
        // Single, half partials, float out, 96 outputs, 5 rows: 12 loops → 2 per worker.
        // Interleaved: 8 halves per cycle, 1 per loop: 6·(20 + (5 + 10)·2) + 33 = 333;
        // not: 2 per loop: 6·(20 + 20·2) + 33 = 393.
        let fast = SingleInput {
            constrain_partials: true,
        };
        assert_eq!(reduce(96, 5, F32, F16, fast), 333);
        assert_eq!(reduce(96, 5, F32, F16, single), 393);
    }

    #[test]
    fn reduce_add_variant_follows_conv_reduce() {
        use ReduceAddVariant::{MultiInput, SingleInput};
        let single = SingleInput {
            constrain_partials: false,
        };
        // Mk2: 624 KiB / 16 = 39936 B; 96·4·2 = 768 B → one 16 KiB element: fits.
        assert_eq!(reduce_add_variant(&mk2(), 96, 5, F16, false), single);
        // 96·399·2 = 76608 B → 5 elements = 81920 B: too big.
        assert_eq!(reduce_add_variant(&mk2(), 96, 400, F16, false), MultiInput);
        // Not a multiple of 8 halves.
        assert_eq!(reduce_add_variant(&mk2(), 30, 2, F16, true), MultiInput);
        // Mk1: 256 KiB / 16 = 16 KiB, and one element is not below it: multi-input.
        assert_eq!(reduce_add_variant(&mk1(), 96, 5, F16, false), MultiInput);
        // Fast reduce: single input with interleaved partials whenever the grain allows.
        assert_eq!(
            reduce_add_variant(&mk1(), 96, 5, F16, true),
            SingleInput {
                constrain_partials: true
            }
        );
    }

    #[test]
    fn conv_reduce_stages() {
        assert_eq!(multi_stage_reduce_plan(10, true), Vec::<u32>::new());
        assert_eq!(multi_stage_reduce_plan(64, false), Vec::<u32>::new());
        // 16: floor(√16) = 4 costs 4 + 16/4 = 8, 5 costs 5 + 3.2 = 8.2 → [4].
        assert_eq!(multi_stage_reduce_plan(16, true), vec![4]);
        // 20: 4 + 5 = 9 against 5 + 4 = 9: not cheaper, so round up → [5].
        assert_eq!(multi_stage_reduce_plan(20, true), vec![5]);
        // 448, three stages: 58 then 8 costs 15.25 + 448/58 = 22.974 messages, 59 then 8
        // costs 15.375 + 448/59 = 22.968 → [59, 8].
        assert_eq!(multi_stage_reduce_plan(448, true), vec![59, 8]);
        let params = ConvReduceParams {
            out_elems: 60,
            depth: 1,
            in_chan_serial_split: 1,
            out: F16,
            partials: F32,
            enable_multi_stage_reduce: true,
            enable_fast_reduce: false,
        };
        // Depth 1, float partials to half: a cast, ceil(60/6) = 10 per worker,
        // max(ceil(10/2), ceil(10/4)) + 26 = 31, ×6 = 186.
        assert_eq!(conv_reduce_cycles(&mk2(), &params), 186);
        let serial = ConvReduceParams {
            in_chan_serial_split: 2,
            ..params.clone()
        };
        assert_eq!(conv_reduce_cycles(&mk2(), &serial), 0);
        // Depth 16, two stages [4]: stage 1 reduces 96·16/4 = 384 float outputs from 4 rows,
        // single input (384·3·4 B fits): 6·(20 + (2·3 + 8)·16) + 33 = 1497; stage 2, 96
        // half outputs from 4 rows: 6·(20 + (2·3 + 7)·4) + 33 = 465. 1497 + 465 = 1962.
        let deep = ConvReduceParams {
            out_elems: 96,
            depth: 16,
            ..params
        };
        assert_eq!(conv_reduce_cycles(&mk2(), &deep), 1962);
    }
}

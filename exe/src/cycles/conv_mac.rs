//! Cycle estimators of PopLibs' MAC-loop convolution vertices for few channels per group:
//! `ConvPartialHorizontalMac` (and its 1x1 specialisation) and `ConvPartialVerticalMac`.
//! The citations and conventions are those of [`super::conv`], which registers these
//! estimators in [`super::conv::ConvVertex`] and re-exports them.

use super::conv_amp::{
    float_acts, float_partials, slowest_fastest, zero_partials_cycles, zero_partials_even,
    zero_retention_saving, Worklists,
};
use super::saturating::{cy, flag, workers, Cy};
use crate::target::Target;
use ipusim_ir::DType;
use serde::{Deserialize, Serialize};

/// A `ConvPartialHorizontalMac` vertex (or `ConvPartialHorizontalMac1x1` with `one_by_one`):
/// dot products along the input channels, for convolutions with few channels per group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HmacParams {
    /// Activation type: F16 or F32.
    pub input: DType,
    /// Partials type.
    pub partials: DType,
    /// Conv groups (`numConvGroupsM1 + 1`).
    pub conv_groups: u32,
    /// Input-channel groups (`numInGroups`); 0 means no input (zeroing only).
    pub in_groups: u32,
    /// Output-channel groups (`numOutGroupsM1 + 1`).
    pub out_groups: u32,
    /// Input channels per group (`inChansPerGroup`): the dot-product length.
    pub in_chans_per_group: u32,
    /// Output channels per group (`outChansPerGroup`).
    pub out_chans_per_group: u32,
    /// Kernel positions (`kernelSizeM1 + 1`); 1 for the 1x1 vertex.
    pub kernel_size: u32,
    /// Partial elements to zero per (conv group, out group) (`zerosInfo`).
    pub zeros_info: u32,
    /// The 1x1 specialisation (PopLibs has it for half activations with float partials
    /// only, PE.hpp L30–33; CE.cpp L1117).
    pub one_by_one: bool,
    /// `worklists.list(worker, k)`: output positions of each entry for kernel position `k`
    /// (PopLibs `ceil(worklist[3i + 1] / outStride)`, CE.cpp L281–282, L357).
    pub worklists: Worklists,
}

/// PE.hpp L25–28 `convHorizontalMacOverhead`.
fn hmac_overhead(float_acts: bool, one_by_one: bool) -> u64 {
    (if float_acts { 58 } else { 65 }) - 10 * flag(one_by_one)
}

/// PE.hpp L35–42 `convHzmacWorkerRetentionSavings`.
fn hmac_retention(float_acts: bool, one_by_one: bool) -> u64 {
    if one_by_one {
        15
    } else if float_acts {
        0
    } else {
        6
    }
}

/// Cycles of one dot product of `size` input channels, PopLibs `getDenseDotProductCycles`
/// (PE.hpp L79–119): the widest power-of-two width up to the activation vector width that
/// divides `size` sets the loop (1 cycle per step when it fills 64 bits, else 2 and one
/// warm-up cycle per output channel), plus `3·outs + (half/half) + 3 + 1` around it, less 1
/// for half activations. Half/half processes 2 output channels at once.
pub fn hmac_dot_product_cycles(target: &Target, input: DType, partials: DType, size: u32) -> u64 {
    let fa = float_acts(input);
    let fp = float_partials(input, partials);
    let half_half = !fa && !fp;
    let outs = if half_half { 2 } else { 1 };
    let acts_per_64 = if fa { 2 } else { 4 };
    let around = Cy((1 + 2) * outs + flag(half_half) + 3 + 1);
    // PopLibs starts at 2^ceil(log2(vector width)); the natural widths are powers of two.
    let mut width = target.vector_width(input).max(1).next_power_of_two();
    while width > 1 && !(size as u64).is_multiple_of(width) {
        width /= 2;
    }
    let per_step = if width >= acts_per_64 { 1 } else { 2 };
    let warm_up = if width < acts_per_64 { outs } else { 0 };
    (around + warm_up + (cy(size).div(width)) * per_step - flag(!fa)).0
}

/// One worker's cycles over one kernel position of an HMAC vertex, PopLibs
/// `getConvPartialHorizontalMacCycleEstimate` (PE.hpp L133–163):
/// `16 − retention + Σ_entries (0 positions: 7; else 19 (13 for 1x1) + n·(7 + outs·dot))`,
/// where half partials pair the output channels (`outs = ceil(out/2)`) and the 1x1 vertex with
/// one output channel has its own loop `1 + n·(2 + dot)`.
pub fn hmac_worker_cycles(target: &Target, p: &HmacParams, worklist: &[u32]) -> u64 {
    let fa = float_acts(p.input);
    let fp = float_partials(p.input, p.partials);
    let mut outs = cy(p.out_chans_per_group);
    if !fp {
        outs = outs.div_ceil(2);
    }
    let dot = Cy(hmac_dot_product_cycles(
        target,
        p.input,
        p.partials,
        p.in_chans_per_group,
    ));
    let mut c = Cy(16) - hmac_retention(fa, p.one_by_one);
    for &n in worklist {
        if n == 0 {
            c = c + 7;
            continue;
        }
        c = c + if p.one_by_one { 13 } else { 19 };
        c = c + if p.one_by_one && outs == Cy(1) {
            1 + cy(n) * (2 + dot)
        } else {
            cy(n) * (7 + outs * dot)
        };
    }
    c.0
}

/// The HMAC inner loop, PopLibs `getConvPartialHorizontalMacSupervisorInnerLoopCycleEstimate`
/// (PE.hpp L182–212): the slowest worker's `Σ_k worker + 16`, × W.
pub fn hmac_inner_loop_cycles(target: &Target, p: &HmacParams) -> u64 {
    let per_worker = (0..p.worklists.workers()).map(|w| {
        let mut c = Cy(16); // workerNonLoopOverhead
        for k in 0..p.kernel_size as usize {
            c = c + hmac_worker_cycles(target, p, p.worklists.list(w, k));
        }
        c
    });
    let (slowest, fastest) = slowest_fastest(per_worker, workers(target));
    slowest.max(fastest).0
}

/// The `ConvPartialHorizontalMac` / `…1x1` vertex estimate (CE.cpp L222–373): zeroing plus
/// PopLibs `getConvPartialHorizontalMacSupervisorCycleEstimate` (PE.hpp L214–244):
///
/// `(58 float | 65 half) − 10·1x1 + W·(9 | 10) + W·retention + CG·(23 + IG·(15 + OG·(10 +
/// inner)))`
///
/// PopLibs passes `floatPartials` where the retention function expects `floatActivations`
/// (PE.hpp L222–223); we keep that so the figures match. The zeroing is skipped when
/// `zeros_info` is 0 on the general vertex only (CE.cpp L260–264 vs L336–338); without input
/// the estimate is zeroing plus the overhead.
pub fn hmac_cycles(target: &Target, p: &HmacParams) -> u64 {
    let fa = float_acts(p.input);
    let fp = float_partials(p.input, p.partials);
    let nw = workers(target);
    let groups = p.out_groups.saturating_mul(p.conv_groups);
    let zero_type = if fp { DType::F32 } else { DType::F16 };
    let zero = if p.zeros_info == 0 && !p.one_by_one {
        0
    } else {
        zero_partials_cycles(
            target,
            &zero_partials_even(target, p.zeros_info, groups, zero_type),
        )
    };
    let overhead = hmac_overhead(fa, p.one_by_one);
    if p.in_groups == 0 || p.in_chans_per_group == 0 {
        return zero.saturating_add(overhead);
    }
    let inner = Cy(hmac_inner_loop_cycles(target, p));
    let (cg, ig, og) = (cy(p.conv_groups), cy(p.in_groups), cy(p.out_groups));
    let supervisor = overhead
        + nw * zero_retention_saving(fp)
        + nw * hmac_retention(fp, p.one_by_one)
        + cg * (23 + ig * (15 + og * (10 + inner)));
    (zero + supervisor).0
}

// ---------------------------------------------------------------------------------------------
// VMAC: ConvPartialVerticalMac.

/// A `ConvPartialVerticalMac` vertex: half activations, one input and one output channel per
/// group, 4, 8 or 16 conv groups per group accumulated along the kernel; every worker keeps
/// its own partials, summed at the end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmacParams {
    /// Partials type (activations are half).
    pub partials: DType,
    /// Conv groups per group: 4, 8 or 16 (CE.cpp L1119–1144).
    pub conv_groups_per_group: u32,
    /// Groups of conv groups (`numConvGroupsM1 + 1`).
    pub conv_groups: u32,
    /// Input groups (`numInGroups`).
    pub in_groups: u32,
    /// Output elements (`zerosInfo`): zeroed by every worker, then reduced across workers.
    pub out_elems: u32,
    /// `worklists[worker]`: the convolution size of each entry (PopLibs' `convSize`; the
    /// dot product runs `size − 1` steps, a size of 0 counts as 1).
    pub worklists: Vec<Vec<u32>>,
}

/// PE.hpp L246–258 `getVerticalMacDotProductCycles`.
fn vmac_dot(size: u32, channels: u32) -> Cy {
    let steps = cy(size) - 1;
    if channels >= 8 {
        3 + 3 * steps * cy(channels / 8)
    } else {
        3 + 2 * steps * cy(channels / 4)
    }
}

/// One VMAC worker, PopLibs `getConvPartialVerticalMacCycleEstimate` (PE.hpp L260–304).
pub fn vmac_worker_cycles(p: &VmacParams, worklist: &[u32]) -> u64 {
    let fp = p.partials != DType::F16;
    let g = p.conv_groups_per_group;
    if g >= 8 && !fp {
        let per8: Cy = worklist
            .iter()
            .map(|&n| 7 + 15 + vmac_dot(n, 8))
            .fold(Cy(0), |a, b| a + b);
        let per8 = per8 * if g == 8 { 1 } else { 2 };
        (Cy(if g == 8 { 13 } else { 25 }) + per8).0
    } else {
        let store_reload = if fp { 5 } else { 3 };
        worklist
            .iter()
            .map(|&n| 7 + store_reload + vmac_dot(n, g))
            .fold(Cy(if fp { 19 } else { 18 }), |a, b| a + b)
            .0
    }
}

/// The `ConvPartialVerticalMac` vertex estimate (CE.cpp L375–429), PopLibs
/// `getConvPartialVerticalMacSupervisorCycleEstimate` (PE.hpp L306–395):
///
/// `61 + 14 + 25 + float + CG·(zero + 32 + IG·(24 + W·slowest) + reduce)`
///
/// zero = `4 + ceil(out / (2 float | 4 half))`, reduce = `10 − float + (7 + 2·float +
/// (2|1)·(W − 1))·ceil(out / W) / groups_per_group`.
pub fn vmac_cycles(target: &Target, p: &VmacParams) -> u64 {
    let fp = p.partials != DType::F16;
    let nw = workers(target);
    let per_worker = p.worklists.iter().map(|w| Cy(vmac_worker_cycles(p, w)));
    let (slowest, fastest) = slowest_fastest(per_worker, nw);
    let inner = slowest.max(fastest);
    let out = cy(p.out_elems);
    let zero = 4 + out.div_ceil(if fp { 2 } else { 4 });
    let per_worker_elems = out.div_ceil(nw);
    let per_rpt = if fp { 2 } else { 1 };
    let reduce = (10 - flag(fp))
        + ((7 + 2 * flag(fp) + per_rpt * (nw - 1)) * per_worker_elems)
            .div(p.conv_groups_per_group as u64);
    let (cg, ig) = (cy(p.conv_groups), cy(p.in_groups));
    let outer = 32 + ig * (24 + inner);
    (Cy(61 + 14 + 25 + flag(fp)) + (zero + outer + reduce) * cg).0
}

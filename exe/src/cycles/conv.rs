//! Cycle estimators of PopLibs' convolution vertices: the AMP partial vertices
//! (`ConvPartial1x1Out`, `ConvPartialnx1`), SLIC (`ConvPartial1xNSLIC`), the MAC-loop vertices
//! for few channels (`ConvPartialHorizontalMac`, `ConvPartialVerticalMac`) and the zeroing of
//! partials, each a pure function of the parameters PopLibs' own estimator reads; the
//! `poplin::ReduceAdd` that sums partials across tiles is in [`super::conv_reduce`], and the
//! registry ([`ConvVertex`]) names them all.
//!
//! Our reading of `graphcore/poplibs` @ `7eac0f26` (ipu-hardware.md source P1): the model is
//! PopLibs', the code and names are ours. Line numbers below are of that commit:
//! - `lib/poplin/PerformanceEstimation.hpp` ("PE.hpp"): the formulas;
//! - `lib/poplin/poplinCycleEstimators.cpp` ("CE.cpp"): how each vertex's fields become the
//!   formulas' arguments (L62–220 AMP, L222–429 MAC loops, L432–509 SLIC, L660–680
//!   ReduceAdd) and which (type, conv units, input elements) instances exist (L1106–1316);
//! - `lib/poplin/ConvModel.cpp` ("CM.cpp"): how the planner calls the same formulas
//!   (L283–570);
//! - `lib/poplin/ConvReduce.cpp`, `lib/poplin/ConvReducePlan.{hpp,cpp}`: which `ReduceAdd`
//!   variant the reduction of partials uses and its stages.
//!
//! Conventions, as in PopLibs' supervisor estimators (ipu-hardware.md §3.4): every figure is in
//! tile cycles; a worker's cycles count `worker_contexts` times (one issue per six tile
//! cycles), so the estimators below already contain the ×6 and are totals for the vertex.
//! Every figure is computed with saturating arithmetic, like the rest of `exe::cycles`.
//!
//! The chip enters through [`Target`]: the number of conv units is the output channels of
//! [`Target::amp`] for the (input, partials) pair (Mk2: 16 for half/half and float/float, 8 for
//! half/float; Mk1: 8 throughout), the weights per conv unit its input channels (PopLibs
//! `convChainLength × convInputLoadElems`, CE.cpp L200–203), the coefficient load rate
//! [`Target::amp_weight_load_bytes_per_cycle`] (already the 64-bit-load rate that PopLibs
//! gets by halving `getConvUnitCoeffLoadBytesPerCycle` when `use128BitConvUnitLoad` is off,
//! CE.cpp L204–208), the vector widths [`Target::vector_width`] (PopLibs `dataPathWidth /
//! typeBits`). Activations are half when the input type is F16 and float otherwise; float
//! activations always accumulate in float (PopLibs has no float/half AMP or MAC vertex and
//! upgrades the partials type, ConvVertexType.cpp L480–482). The QUARTER (fp8) variants are
//! not modelled: the IR has no 8-bit float.

use super::saturating::{cy, flag, workers, Cy};
use crate::target::Target;
use ipusim_ir::DType;
use serde::{Deserialize, Serialize};

use super::conv_reduce::reduce_add_cycles;
pub use super::conv_reduce::ReduceAddParams;

/// PopLibs' `floatActivations`: anything but half is float.
fn float_acts(input: DType) -> bool {
    input != DType::F16
}

/// PopLibs' `floatPartials`; float activations always accumulate in float.
fn float_partials(input: DType, partials: DType) -> bool {
    partials != DType::F16 || float_acts(input)
}

/// The slowest and fastest worker of a supervisor vertex, each in tile cycles
/// (`worker_contexts × worker cycles`). As in PopLibs, the fastest is 0 when fewer than
/// `worker_contexts` workers have a worklist (PE.hpp L406–410, L478–485 and every other
/// `minWorkerCycles`).
fn slowest_fastest(per_worker: impl IntoIterator<Item = Cy>, nw: u64) -> (Cy, Cy) {
    let (mut max, mut min, mut used) = (Cy(0), Cy(u64::MAX), 0u64);
    for c in per_worker {
        let t = nw * c;
        max = max.max(t);
        min = min.min(t);
        used += 1;
    }
    if used < nw {
        min = Cy(0);
    }
    (max, min)
}

// ---------------------------------------------------------------------------------------------
// AMP geometry.

/// Conv units (AMP output channels per pass) PopLibs uses for `input` activations
/// accumulating in `partials` (PE.hpp L1668–1676 `getNumConvUnits`): [`Target::amp`]'s output
/// channels.
pub fn amp_conv_units(target: &Target, input: DType, partials: DType) -> u32 {
    let partials = if float_acts(input) {
        DType::F32
    } else {
        partials
    };
    target.amp(input, partials).output_channels.max(1)
}

/// Supervisor cycles to load one pass's weights into the conv units, PopLibs
/// `getConvPartialAmpSupervisorWeightLoadCycleEstimate` (PE.hpp L558–572):
/// `conv_units × weight_bytes_per_conv_unit / coeff_load_bytes_per_cycle` (integer division
/// as there). `filter_height` is the nx1 vertex's AMP kernel height: at 4 the vertex cannot
/// use 128-bit loads, so a rate above 8 bytes per cycle is halved (PE.hpp L562–568); the 1x1
/// vertex passes 1.
pub fn amp_weight_load_cycles(
    target: &Target,
    input: DType,
    partials: DType,
    filter_height: u32,
) -> u64 {
    let partials = if float_acts(input) {
        DType::F32
    } else {
        partials
    };
    let amp = target.amp(input, partials);
    let weight_bytes_per_unit = amp.input_channels as u64 * input.size_bytes() as u64;
    let mut rate = target.amp_weight_load_bytes_per_cycle.max(1) as u64;
    if filter_height == 4 && rate > 8 {
        rate /= 2;
    }
    (amp.output_channels as u64).saturating_mul(weight_bytes_per_unit) / rate
}

// ---------------------------------------------------------------------------------------------
// Zeroing of partials.

/// Zeroing partials with PopLibs' supervisor zero loop (`getZeroSupervisorVertexCycleEstimate`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZeroParams {
    /// Type of the partials zeroed (the vector width: 4 halves or 2 floats per 64 bits).
    pub partials: DType,
    /// Times the whole zero loop runs (PopLibs `numGroups`: out groups × conv groups).
    pub groups: u32,
    /// Elements each worker zeroes per group, one entry per worker context.
    pub per_worker: Vec<u32>,
}

/// PopLibs `getZeroSupervisorVertexCycleEstimate` (PE.hpp L165–180):
/// `workers × groups × max_w(ceil(n_w / vw) + (float ? 14 : 15) − (float ? 9 : 10))`, the last
/// term being the state-retention saving (`zeroPartialsRetentionSavings`, PE.hpp L73–75) —
/// so `ceil(n_w / vw) + 5` for either type. No worker: 0.
pub fn zero_partials_cycles(target: &Target, p: &ZeroParams) -> u64 {
    let float = p.partials != DType::F16;
    let vw = target.vector_width(p.partials);
    let fixed = Cy(if float { 14 } else { 15 }) - zero_retention_saving(float);
    let slowest = p
        .per_worker
        .iter()
        .map(|&n| cy(n).div_ceil(vw) + fixed)
        .max()
        .unwrap_or(Cy(0));
    (slowest * workers(target) * cy(p.groups)).0
}

/// Zeroing `elems` partials per group spread evenly: each worker context gets
/// `ceil(elems / workers)`, as the nx1 and HMAC vertex estimators build their zero worklist
/// from the vertex's `zerosInfo` (CE.cpp L101–110, L252–264).
pub fn zero_partials_even(target: &Target, elems: u32, groups: u32, partials: DType) -> ZeroParams {
    let nw = workers(target);
    let each = (elems as u64).div_ceil(nw).min(u32::MAX as u64) as u32;
    ZeroParams {
        partials,
        groups,
        per_worker: vec![each; nw as usize],
    }
}

/// PE.hpp L73–75 `zeroPartialsRetentionSavings`.
fn zero_retention_saving(float_partials: bool) -> u64 {
    if float_partials {
        9
    } else {
        10
    }
}

// ---------------------------------------------------------------------------------------------
// ConvPartial1x1Out.

/// A `ConvPartial1x1Out` vertex: AMP over a 1x1 kernel, one worklist entry per worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conv1x1OutParams {
    /// Activation and weight type (PopLibs `fpType`): F16 or F32.
    pub input: DType,
    /// Partials type (PopLibs `accumType`).
    pub partials: DType,
    /// Conv groups the vertex processes (vertex field `numConvGroupsM1 + 1`).
    pub conv_groups: u32,
    /// Input-channel groups (`numInGroups`), each the AMP's input channels; the first zeroes
    /// the partials, the others accumulate.
    pub in_groups: u32,
    /// Output-channel groups (`numOutGroupsM1 + 1`).
    pub out_groups: u32,
    /// Output channels per group (`outChansPerGroup`): `ceil(/ conv units)` passes per group.
    pub out_chans_per_group: u32,
    /// Per worker context: the output positions of its one worklist entry (`worklist[1] +
    /// 3`), or `None` for a worker without an entry (PopLibs' planner leaves those out; a
    /// worker given an entry of 0 positions still runs its preamble).
    pub worklists: Vec<Option<u32>>,
}

/// PE.hpp L46–58 `conv1x1WorkerRetentionSavings`: (per worker, per in-group) cycles saved by
/// state retention, 7 and 3 on the half-activation paths with float partials or 16 units.
fn conv1x1_retention(float_acts: bool, float_partials: bool, conv_units: u32) -> (u64, u64) {
    if !float_acts && (float_partials || conv_units == 16) {
        (7, 3)
    } else {
        (0, 0)
    }
}

/// One worker's cycles for one pass of a `ConvPartial1x1Out` over `positions` output
/// positions, PopLibs `getConvPartial1x1SupervisorInnerLoopCycleEstimateHalfFloat` (PE.hpp
/// L397–479), after the retention saving. `zeroing` is the first input group's pass, which
/// writes the partials instead of accumulating them.
///
/// Three code paths: float activations; the "common" half path (half activations with float
/// partials, or with 16 conv units — Mk2 half/half); and the Mk1-style half/half 8-unit path,
/// which zeroes separately at `2 + 2·n` cycles (PE.hpp L471–474).
pub fn conv1x1_worker_cycles(
    target: &Target,
    input: DType,
    partials: DType,
    positions: u32,
    zeroing: bool,
) -> u64 {
    let fa = float_acts(input);
    let fp = float_partials(input, partials);
    let units = amp_conv_units(target, input, partials);
    let core = if fa { 8 } else { 4 };
    // Cycles per output position to zero the accumulators (PE.hpp L413–415).
    let zero_per_pos = if fa && units == 16 {
        8
    } else if fp {
        4
    } else {
        2
    };
    let common = (!fa && units == 16) || fp;
    let z = flag(zeroing);
    let n = cy(positions);
    // The common half path costs 1 cycle less when zeroing (PE.hpp L433, L444, L455, L470).
    let common_tail = if zeroing { 1 } else { 2 };
    let c = match positions {
        0 if !fa && common => Cy(20 + common_tail),
        0 => Cy(24),
        1 if fa => Cy(47) + (2 + zero_per_pos) * z,
        1 if common => Cy(31 + common_tail),
        1 => Cy(39) + (2 + zero_per_pos) * z,
        2 if fa => Cy(46) + (2 + zero_per_pos * 2) * z,
        2 if common => Cy(40 + common_tail),
        2 => Cy(40) + (2 + zero_per_pos * 2) * z,
        _ if fa => Cy(46) + (2 + zero_per_pos * n) * z + (n - 3) * core,
        _ if common => Cy(37 + 1 - z) + (n - 3) * core,
        _ => Cy(41) + (2 + zero_per_pos * n) * z + (n - 3) * core,
    };
    (c - conv1x1_retention(fa, fp, units).0).0
}

/// The inner loop of a `ConvPartial1x1Out` pass: the slowest worker, but at least the
/// fastest plus 14 ("tag cost to worker with min cycles"), PE.hpp L481–490.
pub fn conv1x1_inner_loop_cycles(
    target: &Target,
    input: DType,
    partials: DType,
    worklists: &[Option<u32>],
    zeroing: bool,
) -> u64 {
    let per_worker = worklists.iter().map(|w| match w {
        Some(n) => Cy(conv1x1_worker_cycles(target, input, partials, *n, zeroing)),
        None => Cy(0),
    });
    let (slowest, fastest) = slowest_fastest(per_worker, workers(target));
    slowest.max(fastest + 14).0
}

/// PopLibs `getConvPartial1x1SupervisorCycleEstimate` (PE.hpp L672–692) with the half/float
/// outer loop `getConvPartial1x1SupervisorOuterLoopCycleEstimateHalfFloat` (L574–615), as the
/// vertex estimator calls it (CE.cpp L160–220):
///
/// `50 + W·(r₁ + r₂·(IG·CG − 1)) + CG·(12 + c + (IG − 1)·(15 − c + 1 + OG·(19 + P·(6 + L +
/// inner))) + 10 + 1 + OG·(19 − c + P·(7 + L + innerZeroing)))`
///
/// with W workers, (r₁, r₂) the retention savings, c = 1 on the common half path, P =
/// `ceil(out_chans_per_group / conv_units)` passes, L the weight load
/// ([`amp_weight_load_cycles`]) and the inner loops of [`conv1x1_inner_loop_cycles`].
/// `in_groups` and `conv_groups` of 0 count as 1 (PopLibs' unsigned `IG − 1` would wrap).
pub fn conv1x1_out_cycles(target: &Target, p: &Conv1x1OutParams) -> u64 {
    let (input, partials) = (p.input, p.partials);
    let fa = float_acts(input);
    let fp = float_partials(input, partials);
    let units = amp_conv_units(target, input, partials);
    let nw = workers(target);
    let inner_zero = conv1x1_inner_loop_cycles(target, input, partials, &p.worklists, true);
    let inner = conv1x1_inner_loop_cycles(target, input, partials, &p.worklists, false);
    let passes = cy(p.out_chans_per_group).div_ceil(units as u64);
    let (r1, r2) = conv1x1_retention(fa, fp, units);
    let load = amp_weight_load_cycles(target, input, partials, 1);
    let c = flag((!fa && units == 16) || fp);
    let (cg, ig, og) = (cy(p.conv_groups), cy(p.in_groups), cy(p.out_groups));
    // Per later input group: 15 − c + 1 (excess in-chan overhead) + OG·(19 + P·(6 + L + inner)).
    let later_in_group = (15 - c + 1) + og * (19 + passes * (6 + load + Cy(inner)));
    // The zeroing input group: 10 + 1 + OG·(19 − c + P·(7 + L + innerZeroing)).
    let first_in_group = Cy(10 + 1) + og * ((19 - c) + passes * (7 + load + Cy(inner_zero)));
    let per_conv_group = (12 + c) + (ig - 1) * later_in_group + first_in_group;
    (50 + nw * (r1 + r2 * (ig * cg - 1)) + cg * per_conv_group).0
}

// ---------------------------------------------------------------------------------------------
// ConvPartialnx1.

/// A `ConvPartialnx1` vertex: AMP over kernel positions, a worklist per worker per position.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConvNx1Params {
    /// Activation and weight type: F16 or F32.
    pub input: DType,
    /// Partials type.
    pub partials: DType,
    /// Conv groups (`numConvGroupsM1 + 1`).
    pub conv_groups: u32,
    /// Input-channel groups (`numInGroups`); 0 means no input (zeroing only).
    pub in_groups: u32,
    /// Output-channel groups (`numOutGroupsM1 + 1`).
    pub out_groups: u32,
    /// Input channels per group (`inChansPerGroup`); 0 means no input.
    pub in_chans_per_group: u32,
    /// Output channels per group (`outChansPerGroup`): `out_chans_per_group / conv_units`
    /// passes per kernel position (integer division, PE.hpp L962; PopLibs only builds the
    /// vertex for multiples of the conv units, ConvVertexType.cpp L63).
    pub out_chans_per_group: u32,
    /// Kernel positions in the outer (height) dimension (`kernelOuterSizeM1 + 1`), each
    /// `amp_kernel_height` rows of the kernel.
    pub kernel_outer: u32,
    /// Kernel positions in the inner dimensions (`kernelInnerElementsM1 + 1`).
    pub kernel_inner: u32,
    /// Kernel rows one AMP pass covers (`ampKernelHeightM1 + 1`, PopLibs `filterHeight`):
    /// 1, 2 or 4.
    pub amp_kernel_height: u32,
    /// Partial elements to zero per (conv group, out group) before accumulating
    /// (`zerosInfo`), spread over the workers ([`zero_partials_even`]).
    pub zeros_info: u32,
    /// `worklists[worker][k]`: the output positions of each entry of that worker's worklist
    /// for kernel position `k = ky · kernel_inner + kx` (entries `worklist[3i + 1] + 3`). A
    /// missing position counts as an empty worklist.
    pub worklists: Vec<Vec<Vec<u32>>>,
}

/// One worker's cycles for one kernel position of a `ConvPartialnx1`, PopLibs
/// `getConvPartialnx1WorkerCycles` (PE.hpp L757–798) with the retention saving of 9 per entry
/// (`convnx1WorkerRetentionSavings`, L65–69): `17 (+1 half partials) + Σ_entries (3 + body −
/// 9)`, body 17 for 0 positions, 29 (33 float) for 1, 33 (+1 on the half/half 16-unit and
/// half/float 8-unit vertices; 44 float) for 2, and `34 + 4(n − 3)` (`45 + 8(n − 3)` float)
/// beyond.
pub fn convnx1_worker_cycles(
    target: &Target,
    input: DType,
    partials: DType,
    worklist: &[u32],
) -> u64 {
    let fa = float_acts(input);
    let fp = float_partials(input, partials);
    let units = amp_conv_units(target, input, partials);
    let core = if fa { 8 } else { 4 };
    let hh16 = !fa && !fp && units == 16;
    let hf8 = !fa && fp && units == 8;
    let extra_stride = flag(hh16 || hf8);
    let retention = 9;
    let mut c = Cy(17 + flag(!fp));
    for &n in worklist {
        let body = match n {
            0 => Cy(17),
            1 => Cy(if fa { 33 } else { 29 }),
            2 => Cy(if fa { 44 } else { 33 + extra_stride }),
            _ if fa => 45 + (cy(n) - 3) * core,
            _ => 34 + (cy(n) - 3) * core,
        };
        c = c + 3 + body - retention;
    }
    c.0
}

/// The supervisor inner loop of a `ConvPartialnx1`, PopLibs
/// `getConvPartialnx1SupervisorInnerLoopCycleEstimateHalfFloat` (PE.hpp L955–1003) with the
/// per-kernel-position worker loop (L835–866):
///
/// `KO·(14 + KI·(17 − 5 + P·(L + h + 3))) + Σ_k max(slowest_k, fastest_k + 9)·P`
///
/// with h = 15, 46, 60 or `20·height` for AMP kernel heights 1, 2, 4 or other.
pub fn convnx1_inner_loop_cycles(target: &Target, p: &ConvNx1Params) -> u64 {
    let (input, partials) = (p.input, p.partials);
    let units = amp_conv_units(target, input, partials);
    let nw = workers(target);
    let passes = cy(p.out_chans_per_group).div(units as u64);
    let height_load = match p.amp_kernel_height {
        4 => Cy(60),
        2 => Cy(46),
        1 => Cy(15),
        h => 20 * cy(h),
    };
    let innermost =
        amp_weight_load_cycles(target, input, partials, p.amp_kernel_height) + height_load + 3;
    let (ko, ki) = (cy(p.kernel_outer), cy(p.kernel_inner));
    let supervisor = ko * (14 + ki * ((17 - 5) + passes * innermost));
    let positions = (p.kernel_outer as u64).saturating_mul(p.kernel_inner as u64);
    let mut kernel_loop = Cy(0);
    for k in 0..positions {
        let per_worker = p.worklists.iter().map(|w| {
            let list = w.get(k as usize).map_or(&[][..], |l| &l[..]);
            Cy(convnx1_worker_cycles(target, input, partials, list))
        });
        let (slowest, fastest) = slowest_fastest(per_worker, nw);
        kernel_loop = kernel_loop + slowest.max(fastest + 9) * passes;
    }
    (supervisor + kernel_loop).0
}

/// Supervisor cycles of a `ConvPartialnx1` around its inner loop, PopLibs
/// `getConvPartialnx1SupervisorOuterLoopCycleEstimateHalfFloat` (PE.hpp L694–713):
///
/// `109 + W·9 + W·(9 float | 10 half partials) + CG·(17·OG + 6·(OG − 1) + 1) + 6·(CG − 1) + 1
/// + CG·(16 + IG·(14 + OG·(14 + inner)))`
///
/// (109 = `convNx1Overhead`; the `6·(n − 1) + 1` terms are brnzdec loops, which stall 6
/// cycles on all but the last iteration).
pub fn convnx1_outer_loop_cycles(target: &Target, p: &ConvNx1Params, inner: u64) -> u64 {
    let fp = float_partials(p.input, p.partials);
    let nw = workers(target);
    let (cg, ig, og) = (cy(p.conv_groups), cy(p.in_groups), cy(p.out_groups));
    let zero_loop = cg * (og * 17 + (og - 1) * 6 + 1) + (cg - 1) * 6 + 1;
    let group_loop = cg * (16 + ig * (14 + og * (14 + Cy(inner))));
    (CONV_NX1_OVERHEAD + nw * 9 + nw * zero_retention_saving(fp) + zero_loop + group_loop).0
}

/// PE.hpp L44 `convNx1Overhead`.
const CONV_NX1_OVERHEAD: u64 = 109;

/// The `ConvPartialnx1` vertex estimate (CE.cpp L62–158): the zeroing of `zeros_info`
/// partials per (out group, conv group) ([`zero_partials_cycles`]) plus, when the vertex has
/// input, PopLibs `getConvPartialnx1SupervisorCycleEstimate` (PE.hpp L1066–1083); without
/// input, `109 +` the zeroing.
pub fn convnx1_cycles(target: &Target, p: &ConvNx1Params) -> u64 {
    let fp = float_partials(p.input, p.partials);
    let groups = p.out_groups.saturating_mul(p.conv_groups);
    let zero_type = if fp { DType::F32 } else { DType::F16 };
    let zero = zero_partials_cycles(
        target,
        &zero_partials_even(target, p.zeros_info, groups, zero_type),
    );
    if p.in_groups == 0 || p.in_chans_per_group == 0 {
        return CONV_NX1_OVERHEAD.saturating_add(zero);
    }
    let inner = convnx1_inner_loop_cycles(target, p);
    zero.saturating_add(convnx1_outer_loop_cycles(target, p, inner))
}

// ---------------------------------------------------------------------------------------------
// SLIC: ConvPartial1xNSLIC.

/// The SLIC kernel window: 1×4 (PopLibs only implements width 4, PE.hpp L1088, L1133–1135).
pub const SLIC_WINDOW_WIDTH: u32 = 4;

/// A `ConvPartial1xNSLIC` vertex: half activations, a 1×4 kernel window, grouped channels.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlicParams {
    /// Partials type (activations are half).
    pub partials: DType,
    /// Conv-unit chains the vertex uses: 2 (8 units) or 4 (16 units; half partials on Mk2).
    /// [`slic_conv_chains`] gives the most the target has.
    pub conv_chains: u32,
    /// Conv groups per group: 1, 2 or 4, and 8 or 16 with 16 conv units and half partials
    /// (ConvVertexType.cpp L544–555; the vertex template's value `>> chansPerGroupLog2`,
    /// CE.cpp L455–457).
    pub conv_groups_per_group: u32,
    /// Input (= output) channels per group: 4 with 1 conv group per group, 2 with 2, else 1.
    pub chans_per_group: u32,
    /// Groups of conv groups (`numConvGroupGroupsM1 + 1`).
    pub conv_group_groups: u32,
    /// Sub-kernels: 1×4 slices of the kernel (`numSubKernelsM1 + 1`); the first zeroes the
    /// partials implicitly.
    pub sub_kernels: u32,
    /// Output stride in the innermost field dimension: 1 or 2.
    pub out_stride: u32,
    /// `worklists[worker]`: the field elements of each worklist entry (`worklist[3i + 2]`),
    /// the same for every sub-kernel (PopLibs asserts it, CE.cpp L470–481).
    pub worklists: Vec<Vec<u32>>,
}

/// Conv-unit chains of the widest SLIC vertex the target has for half activations and
/// `partials`: float partials use 2 chains, half partials 4 with 16 conv units, else 2
/// (ConvVertexType.cpp L486–498).
pub fn slic_conv_chains(target: &Target, partials: DType) -> u32 {
    if partials != DType::F16 {
        2
    } else if amp_conv_units(target, DType::F16, DType::F16) == 16 {
        4
    } else {
        2
    }
}

/// Supervisor cycles to load one sub-kernel's SLIC weights, PopLibs
/// `getConvPartialSlicSupervisorWeightLoadCycleEstimate` (PE.hpp L1085–1124): `18 + 16`
/// with 4 channels per group; otherwise the workers rearrange the weights first:
/// `9 + 6 + W·(12 for 2 groups, else 10; +1 beyond 4 groups) + 6 + 16`.
pub fn slic_weight_load_cycles(target: &Target, conv_groups_per_group: u32, chans: u32) -> u64 {
    let load_cs = Cy(16); // 16 × ld64putcs
    if chans == 4 {
        return (Cy(6 + 6 + 6) + load_cs).0; // brnzdec, put CCCSLOAD, bri
    }
    let mut rearrange = if conv_groups_per_group == 2 {
        10 + 2
    } else {
        10
    };
    if conv_groups_per_group > 4 {
        rearrange += 1;
    }
    (Cy(9 + 6) + workers(target) * rearrange + 6 + load_cs).0
}

/// All workers' cycles for one sub-kernel of a SLIC vertex, PopLibs
/// `getConvPartialSlicSupervisorInnerLoopCycleEstimateHalfFloat` (PE.hpp L1261–1364): the
/// slowest worker × W, plus on the 8-unit half-partials vertex the merging copy of the two
/// outputs on the implicitly zeroing pass (`2 + 2·Σ field elements`, summed over all workers
/// as in PopLibs).
pub fn slic_inner_loop_cycles(target: &Target, p: &SlicParams, implicit_zeroing: bool) -> u64 {
    let fp = p.partials != DType::F16;
    let passes = if p.conv_chains == 4 { 1 } else { 2 };
    let half8 = p.conv_chains == 2 && !fp;
    let threshold = if half8 { 6 } else { 5 };
    let iz = implicit_zeroing;
    // Worker ID 2, output pointers 2|3, input 1, DeltaN 2 + 4 + 2, divide by 3 2, zero flag 1,
    // zero decision 0|1 (PE.hpp L1279–1288): 17 either way; +4 beyond 4 groups.
    let mut preamble = Cy(2 + if half8 { 2 } else { 3 } + 1 + 2 + 4 + 2 + 2 + 1 + flag(half8));
    if p.conv_groups_per_group > 4 {
        preamble = preamble + 4;
    }
    let mut slowest = Cy(0);
    let mut all_elems = Cy(0);
    for worker in &p.worklists {
        let mut c = preamble;
        for &n in worker {
            c = c + if half8 { 9 } else { 10 } + flag(iz);
            let n64 = cy(n);
            let mut row = if p.out_stride == 1 {
                if n < threshold {
                    if iz {
                        Cy(10 + 3) + if n > 1 { n64 } else { Cy(0) }
                    } else if n == 1 {
                        Cy(7 + 6)
                    } else {
                        // PopLibs: 1 + (n − 1) + 2 + (4 − n) + 2 + (3 − (4 − n)) + 3 = 10 + n
                        // (in unsigned arithmetic, also for n = 0 and 5).
                        7 + (10 + n64)
                    }
                } else {
                    Cy(15) + (n64 - 5) + if !iz && half8 { 3 } else { 0 }
                }
            } else if n < 3 {
                Cy(7 + if n == 1 { 3 } else { 5 } + 3)
            } else {
                15 + 2 * (n64 - 3)
            };
            if fp {
                // A dummy dual load increments the pointers.
                row = row - 1;
            }
            c = c + if fp { 3 } else { 0 } + row * passes;
            all_elems = all_elems + n64;
        }
        c = c + if half8 { 2 } else { 0 };
        slowest = slowest.max(c);
    }
    let copy = if half8 && iz {
        2 + 2 * all_elems
    } else {
        Cy(0)
    };
    (slowest * workers(target) + copy).0
}

/// The `ConvPartial1xNSLIC` vertex estimate (CE.cpp L432–509): PopLibs
/// `getConvPartialSlicSupervisorOuterLoopCycleEstimateHalfFloat` (PE.hpp L1126–1207) over the
/// inner loops and weight load above:
///
/// `pre + (body_CGG·CGG + b(CGG)) + (body_SK·SK + b(SK)) + CGG·innerZeroing + CGG·(SK − 1)·inner`
///
/// with b(n) = `6(n − 1) + 1` (brnzdec), pre 25 (8-unit half partials) or 28, body_CGG 12 or 15
/// (+8 beyond 4 groups, where the worker loop also runs `groups / 4` times per sub-kernel).
/// As in PopLibs, the sub-kernel loop's supervisor cycles are counted once, not per group of
/// conv groups, and beyond 4 groups only the non-zeroing inner loop is multiplied by the
/// group strides.
pub fn slic_cycles(target: &Target, p: &SlicParams) -> u64 {
    let half8 = p.conv_chains == 2 && p.partials == DType::F16;
    let brnzdec = |n: Cy| 6 * (n - 1) + 1;
    let weights = Cy(slic_weight_load_cycles(
        target,
        p.conv_groups_per_group,
        p.chans_per_group,
    ));
    let inner_zero = Cy(slic_inner_loop_cycles(target, p, true));
    let mut inner = Cy(slic_inner_loop_cycles(target, p, false));
    let pre = Cy(if half8 { 25 } else { 28 });
    let mut cgg_body = Cy(if half8 { 12 } else { 15 });
    let sk_body = if p.conv_groups_per_group <= 4 {
        // Output-pointer swap 3|0, worklist pointer 2, implicit zero/stride 1|0, runall 6,
        // 1, sync 6, next weights pointer 1.
        let swap_and_flags = if half8 { 0 } else { 3 + 1 };
        weights + swap_and_flags + 2 + 6 + 1 + 6 + 1
    } else {
        let strides = cy(p.conv_groups_per_group / 4);
        // runall 6, 1 + sync 6, weights pointer update 2 + 6.
        let stride_body = weights + 6 + 1 + 6 + 2 + 6;
        let stride_loop = stride_body * strides + brnzdec(strides);
        // The group counter lives on the stack: st + ld and a load-use stall.
        cgg_body = cgg_body + 2 + 6;
        inner = inner * strides;
        // Output-pointer swap 2, implicit zero/stride 2 + 6, weights pointer 3, worklist 2.
        stride_loop + 2 + 2 + 6 + 3 + 2
    };
    let (cgg, sk) = (cy(p.conv_group_groups), cy(p.sub_kernels));
    let sk_loop = sk_body * sk + brnzdec(sk);
    let cgg_loop = cgg_body * cgg + brnzdec(cgg);
    (pre + cgg_loop + sk_loop + cgg * inner_zero + cgg * (sk - 1) * inner).0
}

// ---------------------------------------------------------------------------------------------
// HMAC: ConvPartialHorizontalMac (and its 1x1 specialisation).

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
    /// `worklists[worker][k]`: output positions of each entry for kernel position `k`
    /// (PopLibs `ceil(worklist[3i + 1] / outStride)`, CE.cpp L281–282, L357); a missing
    /// position counts as an empty worklist.
    pub worklists: Vec<Vec<Vec<u32>>>,
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
    let per_worker = p.worklists.iter().map(|w| {
        let mut c = Cy(16); // workerNonLoopOverhead
        for k in 0..p.kernel_size as usize {
            let list = w.get(k).map_or(&[][..], |l| &l[..]);
            c = c + hmac_worker_cycles(target, p, list);
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

// ---------------------------------------------------------------------------------------------
// The registry.

/// A convolution vertex with its parameters: the registry of this module's estimators (the
/// PopLibs `CYCLE_ESTIMATOR_ENTRY` idea, CE.cpp L1106–1316).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConvVertex {
    /// `poplin::ConvPartial1x1Out`.
    Partial1x1Out(Conv1x1OutParams),
    /// `poplin::ConvPartialnx1`.
    Partialnx1(ConvNx1Params),
    /// `poplin::ConvPartial1xNSLIC`.
    Slic(SlicParams),
    /// `poplin::ConvPartialHorizontalMac` / `ConvPartialHorizontalMac1x1`.
    HorizontalMac(HmacParams),
    /// `poplin::ConvPartialVerticalMac`.
    VerticalMac(VmacParams),
    /// Zeroing partials with the supervisor zero loop.
    ZeroPartials(ZeroParams),
    /// `poplin::ReduceAdd`.
    ReduceAdd(ReduceAddParams),
}

impl ConvVertex {
    /// Estimated tile cycles of the vertex on `target`.
    pub fn cycles(&self, target: &Target) -> u64 {
        match self {
            ConvVertex::Partial1x1Out(p) => conv1x1_out_cycles(target, p),
            ConvVertex::Partialnx1(p) => convnx1_cycles(target, p),
            ConvVertex::Slic(p) => slic_cycles(target, p),
            ConvVertex::HorizontalMac(p) => hmac_cycles(target, p),
            ConvVertex::VerticalMac(p) => vmac_cycles(target, p),
            ConvVertex::ZeroPartials(p) => zero_partials_cycles(target, p),
            ConvVertex::ReduceAdd(p) => reduce_add_cycles(target, p),
        }
    }

    /// The PopLibs estimator the figure follows.
    pub fn poplibs_estimator(&self) -> &'static str {
        match self {
            ConvVertex::Partial1x1Out(_) => "getConvPartial1x1SupervisorCycleEstimate",
            ConvVertex::Partialnx1(_) => "getConvPartialnx1SupervisorCycleEstimate",
            ConvVertex::Slic(_) => "getConvPartialSlicSupervisorOuterLoopCycleEstimate",
            ConvVertex::HorizontalMac(_) => "getConvPartialHorizontalMacSupervisorCycleEstimate",
            ConvVertex::VerticalMac(_) => "getConvPartialVerticalMacSupervisorCycleEstimate",
            ConvVertex::ZeroPartials(_) => "getZeroSupervisorVertexCycleEstimate",
            ConvVertex::ReduceAdd(_) => "getReduceCycleEstimate",
        }
    }
}

#[cfg(test)]
mod tests {
    //! Expected figures are worked by hand from the PopLibs formulas cited above (the
    //! arithmetic is in the comments), not produced by running this code. Mk2: 6 workers,
    //! 4 halves / 2 floats per 64 bits, 16 conv units for half/half and float/float and 8 for
    //! half/float, weight loads 16·32/8 = 64 (hh), 8·32/8 = 32 (hf), 16·32/8 = 64 (ff)
    //! cycles; Mk1: 8 conv units throughout, weight loads 32 cycles.
    use super::*;
    use crate::cycles::conv_reduce::ReduceAddVariant;
    use DType::{F16, F32};

    fn mk2() -> Target {
        Target::mk2()
    }
    fn mk1() -> Target {
        Target::mk1()
    }

    fn one_by_one(
        input: DType,
        partials: DType,
        groups: (u32, u32, u32),
        out_chans: u32,
        w: Vec<Option<u32>>,
    ) -> Conv1x1OutParams {
        Conv1x1OutParams {
            input,
            partials,
            conv_groups: groups.0,
            in_groups: groups.1,
            out_groups: groups.2,
            out_chans_per_group: out_chans,
            worklists: w,
        }
    }

    #[test]
    fn weight_loads_follow_the_target() {
        assert_eq!(amp_weight_load_cycles(&mk2(), F16, F16, 1), 64);
        assert_eq!(amp_weight_load_cycles(&mk2(), F16, F32, 1), 32);
        assert_eq!(amp_weight_load_cycles(&mk2(), F32, F32, 1), 64);
        assert_eq!(amp_weight_load_cycles(&mk1(), F16, F16, 1), 32);
        assert_eq!(amp_weight_load_cycles(&mk1(), F32, F32, 1), 32);
        // 128-bit loads (16 B/cycle): halved back to 8 B/cycle for AMP kernel height 4.
        let mut t = mk2();
        t.amp_weight_load_bytes_per_cycle = 16;
        assert_eq!(amp_weight_load_cycles(&t, F16, F16, 1), 512 / 16);
        assert_eq!(amp_weight_load_cycles(&t, F16, F16, 4), 512 / 8);
        assert_eq!(amp_conv_units(&mk2(), F16, F16), 16);
        assert_eq!(amp_conv_units(&mk2(), F16, F32), 8);
        assert_eq!(amp_conv_units(&mk1(), F16, F16), 8);
        // Float activations with half partials accumulate in float.
        assert_eq!(amp_conv_units(&mk2(), F32, F16), 16);
    }

    #[test]
    fn zeroing_partials() {
        // Half: ceil(10/4) + 15 − 10 = 8 per worker; 6 · 2 groups · 8 = 96.
        let p = ZeroParams {
            partials: F16,
            groups: 2,
            per_worker: vec![10, 3, 0],
        };
        assert_eq!(zero_partials_cycles(&mk2(), &p), 96);
        // Float, even split of 100: ceil(100/6) = 17 per worker, ceil(17/2) + 14 − 9 = 14;
        // 6 · 1 · 14 = 84.
        let p = zero_partials_even(&mk2(), 100, 1, F32);
        assert_eq!(p.per_worker, vec![17; 6]);
        assert_eq!(zero_partials_cycles(&mk2(), &p), 84);
        // No worker, nothing to zero.
        let p = ZeroParams {
            partials: F32,
            groups: 3,
            per_worker: vec![],
        };
        assert_eq!(zero_partials_cycles(&mk2(), &p), 0);
    }

    #[test]
    fn conv1x1_mk2_half_half_balanced() {
        // 16 units, common path, retention (7, 3). n = 10:
        // zeroing 37 + 7·4 − 7 = 58, ×6 = 348, max(348, 348 + 14) = 362;
        // accumulating 38 + 28 − 7 = 59, ×6 = 354 → 368. L = 64, P = ceil(16/16) = 1, c = 1.
        // 50 + 6·(7 + 3·(2·1 − 1)) + 1·(12 + 1 + (2 − 1)·(15 − 1 + 1 + 1·(19 + 1·(6 + 64 + 368)))
        //   + 10 + 1 + 1·(19 − 1 + 1·(7 + 64 + 362)))
        // = 50 + 60 + (13 + 472 + 462) = 1057.
        let p = one_by_one(F16, F16, (1, 2, 1), 16, vec![Some(10); 6]);
        assert_eq!(conv1x1_worker_cycles(&mk2(), F16, F16, 10, true), 58);
        assert_eq!(
            conv1x1_inner_loop_cycles(&mk2(), F16, F16, &p.worklists, true),
            362
        );
        assert_eq!(
            conv1x1_inner_loop_cycles(&mk2(), F16, F16, &p.worklists, false),
            368
        );
        assert_eq!(conv1x1_out_cycles(&mk2(), &p), 1057);
        assert_eq!(ConvVertex::Partial1x1Out(p).cycles(&mk2()), 1057);
    }

    #[test]
    fn conv1x1_mk1_half_half_zeroes_in_the_loop() {
        // 8 units, half partials: the separate path, no retention, 2 cycles/position zeroing.
        // Zeroing 41 + (2 + 2·10) + 7·4 = 91, ×6 = 546 → 560; accumulating 41 + 28 = 69 →
        // 414 → 428. L = 32, P = ceil(8/8) = 1, c = 0.
        // 50 + 0 + (12 + 0 + 1·(15 + 1 + 19 + 6 + 32 + 428) + 10 + 1 + 19 + 7 + 32 + 560)
        // = 50 + 12 + 501 + 629 = 1192.
        let p = one_by_one(F16, F16, (1, 2, 1), 8, vec![Some(10); 6]);
        assert_eq!(conv1x1_worker_cycles(&mk1(), F16, F16, 10, true), 91);
        assert_eq!(conv1x1_out_cycles(&mk1(), &p), 1192);
    }

    #[test]
    fn conv1x1_mk2_half_float_imbalanced() {
        // 8 units, float partials: common path, retention (7, 3). Workers 8, 8, 5 and three
        // without an entry (0 cycles, so the fastest is 0 and the +14 floor does not bind).
        // n = 8: zeroing 37 + 20 − 7 = 50, accumulating 51; n = 5: 38, 39.
        // Inner: 6·50 = 300, 6·51 = 306. L = 32, P = ceil(16/8) = 2, c = 1. CG 2, IG 3, OG 2.
        // later in-group: 15 − 1 + 1 + 2·(19 + 2·(6 + 32 + 306)) = 15 + 1414 = 1429;
        // first: 11 + 2·(19 − 1 + 2·(7 + 32 + 300)) = 11 + 1392 = 1403;
        // per conv group: 13 + 2·1429 + 1403 = 4274; retention 6·(7 + 3·(3·2 − 1)) = 132;
        // 50 + 132 + 2·4274 = 8730.
        let w = vec![Some(8), Some(8), Some(5), None, None, None];
        let p = one_by_one(F16, F32, (2, 3, 2), 16, w);
        assert_eq!(
            conv1x1_inner_loop_cycles(&mk2(), F16, F32, &p.worklists, true),
            300
        );
        assert_eq!(conv1x1_out_cycles(&mk2(), &p), 8730);
    }

    #[test]
    fn conv1x1_float_mk2_and_mk1() {
        // Mk2 float: 16 units, 8 cycles/position zeroing, core 8, no retention, c = 1.
        // n = 4: 46 + (2 + 8·4) + 1·8 = 88, ×6 = 528 → 542. L = 64, P = 1, IG = 1:
        // 50 + 1·(12 + 1 + 0 + 10 + 1 + 1·(19 − 1 + 1·(7 + 64 + 542))) = 50 + 655 = 705.
        let p = one_by_one(F32, F32, (1, 1, 1), 16, vec![Some(4); 6]);
        assert_eq!(conv1x1_out_cycles(&mk2(), &p), 705);
        // Mk1 float: 8 units, 4 cycles/position zeroing: 46 + 18 + 8 = 72, ×6 = 432 → 446.
        // L = 32, P = ceil(16/8) = 2: 50 + 13 + 11 + 18 + 2·(7 + 32 + 446) = 1062.
        assert_eq!(conv1x1_out_cycles(&mk1(), &p), 1062);
    }

    fn nx1(
        input: DType,
        partials: DType,
        groups: (u32, u32, u32),
        chans: (u32, u32),
        kernel: (u32, u32, u32),
        zeros: u32,
        w: Vec<Vec<Vec<u32>>>,
    ) -> ConvNx1Params {
        ConvNx1Params {
            input,
            partials,
            conv_groups: groups.0,
            in_groups: groups.1,
            out_groups: groups.2,
            in_chans_per_group: chans.0,
            out_chans_per_group: chans.1,
            kernel_outer: kernel.0,
            kernel_inner: kernel.1,
            amp_kernel_height: kernel.2,
            zeros_info: zeros,
            worklists: w,
        }
    }

    #[test]
    fn convnx1_mk2_half_float_3x1() {
        // Worker per position: 17 (float partials) + 3 + 34 + 1·4 − 9 = 49, ×6 = 294 →
        // max(294, 294 + 9) = 303, P = 8/8 = 1, three positions: 909.
        // Supervisor inner: 3·(14 + 1·(17 − 5 + 1·(32 + 15 + 3))) = 3·76 = 228 → 1137.
        // Outer: 109 + 6·9 + 6·9 + 1·(17 + 0 + 1) + 0 + 1 + 1·(16 + 1·(14 + 1·(14 + 1137)))
        // = 217 + 18 + 1 + 1181 = 1417. Zeroing: ceil(96/6) = 16, ceil(16/2) + 5 = 13, ×6 = 78.
        // 78 + 1417 = 1495.
        let p = nx1(
            F16,
            F32,
            (1, 1, 1),
            (16, 8),
            (3, 1, 1),
            96,
            vec![vec![vec![4]; 3]; 6],
        );
        assert_eq!(convnx1_worker_cycles(&mk2(), F16, F32, &[4]), 49);
        assert_eq!(convnx1_inner_loop_cycles(&mk2(), &p), 1137);
        assert_eq!(convnx1_cycles(&mk2(), &p), 1495);
    }

    #[test]
    fn convnx1_mk2_half_half_uneven_worklists() {
        // hh16: +1 stride cycle for 2 positions. Half partials: base 17 + 1 = 18; entries
        // n=2: 3 + 33 + 1 − 9 = 28; n=5: 3 + 34 + 8 − 9 = 36; n=1: 23; n=0: 11; n=6: 40.
        // k0: 18+28+36 = 82, 18+36 = 54, 18, 18+11 = 29 → 6·82 = 492 (4 workers: fastest 0);
        // k1: 18+28 = 46, 54, 18+23 = 41, 18+40 = 58 → 348. Kernel loop 492 + 348 = 840.
        // Height 4 at 8 B/cycle (no halving): 64 + 60 + 3 = 127; 1·(14 + 2·(12 + 127)) = 292.
        // Inner 1132. Outer: 109 + 54 + 60 + 2·(17 + 0 + 1) + 6 + 1 + 2·(16 + 2·(14 + 14 +
        // 1132)) = 266 + 4672 = 4938. Zeroing: ceil(64/6) = 11, ceil(11/4) + 5 = 8, ×6×2 = 96.
        // 96 + 4938 = 5034.
        let w = vec![
            vec![vec![2, 5], vec![2]],
            vec![vec![5], vec![5]],
            vec![vec![], vec![1]],
            vec![vec![0], vec![6]],
        ];
        let p = nx1(F16, F16, (2, 2, 1), (16, 16), (1, 2, 4), 64, w);
        assert_eq!(convnx1_inner_loop_cycles(&mk2(), &p), 1132);
        assert_eq!(convnx1_cycles(&mk2(), &p), 5034);
    }

    #[test]
    fn convnx1_mk1_and_mk2_differ_in_units_and_stride_cycle() {
        // Mk1 half/half (8 units, no extra stride cycle): worker 18 + 3 + 33 − 9 = 45, ×6 =
        // 270 → 279; inner 1·(14 + 12 + 32 + 15 + 3) + 279 = 355; outer 109 + 54 + 60 + 18
        // + 1 + (16 + 14 + 14 + 355) = 641; zeroing of 0 elements still costs 5·6 = 30 → 671.
        let p = nx1(
            F16,
            F16,
            (1, 1, 1),
            (16, 8),
            (1, 1, 1),
            0,
            vec![vec![vec![2]]; 6],
        );
        assert_eq!(convnx1_cycles(&mk1(), &p), 671);
        // Mk2 half/half (16 units, +1 stride cycle) with 16 output channels: worker 46 → 276
        // → 285; inner 14 + 12 + 64 + 15 + 3 + 285 = 393; outer 242 + (44 + 393) = 679; +30.
        let p = ConvNx1Params {
            out_chans_per_group: 16,
            ..p
        };
        assert_eq!(convnx1_cycles(&mk2(), &p), 709);
        // No input: 109 + zeroing.
        let p = ConvNx1Params { in_groups: 0, ..p };
        assert_eq!(convnx1_cycles(&mk2(), &p), 109 + 30);
    }

    fn slic(
        partials: DType,
        chains: u32,
        grouping: (u32, u32),
        cgg: u32,
        sk: u32,
        stride: u32,
        w: Vec<Vec<u32>>,
    ) -> SlicParams {
        SlicParams {
            partials,
            conv_chains: chains,
            conv_groups_per_group: grouping.0,
            chans_per_group: grouping.1,
            conv_group_groups: cgg,
            sub_kernels: sk,
            out_stride: stride,
            worklists: w,
        }
    }

    #[test]
    fn slic_mk2_four_chains() {
        // 4 chains, half partials, 4 groups × 1 channel. Preamble 17; n = 8 ≥ 5:
        // zeroing pass 17 + 10 + 1 + 15 + 3 = 46, ×6 = 276; later passes 17 + 10 + 18 = 45 →
        // 270. Weights 9 + 6 + 6·10 + 6 + 16 = 97. Sub-kernel body 97 + 3 + 2 + 1 + 6 + 1 + 6
        // + 1 = 117; loop 117·3 + 13 = 364; CGG loop 15·2 + 7 = 37.
        // 28 + 37 + 364 + 2·276 + 2·2·270 = 2061.
        let p = slic(F16, 4, (4, 1), 2, 3, 1, vec![vec![8]; 6]);
        assert_eq!(slic_weight_load_cycles(&mk2(), 4, 1), 97);
        assert_eq!(slic_inner_loop_cycles(&mk2(), &p, true), 276);
        assert_eq!(slic_inner_loop_cycles(&mk2(), &p, false), 270);
        assert_eq!(slic_cycles(&mk2(), &p), 2061);
    }

    #[test]
    fn slic_two_chains_half_partials_merges_outputs() {
        // half8: 2 input passes, threshold 6. Zeroing pass: worker 0 = 17 + (9 + 1 + 2·(13 +
        // 3)) + (9 + 1 + 2·(15 + 2)) + 2 = 105; worker 1 = 17 + (10 + 2·13) + 2 = 55; idle
        // workers 19. 6·105 + copy (2 + 2·(3 + 7 + 1)) = 630 + 24 = 654.
        // Later pass: worker 0 = 17 + (9 + 2·(7 + 10 + 3)) + (9 + 2·(15 + 2 + 3)) + 2 = 117
        // → 702. Weights (4 channels) 18 + 16 = 34; body 34 + 2 + 6 + 1 + 6 + 1 = 50;
        // 25 + (12 + 1) + (50·2 + 7) + 654 + 702 = 1501.
        let mut w = vec![vec![3, 7], vec![1]];
        w.resize(6, vec![]);
        let p = slic(F16, 2, (1, 4), 1, 2, 1, w);
        assert_eq!(slic_inner_loop_cycles(&mk2(), &p, true), 654);
        assert_eq!(slic_inner_loop_cycles(&mk2(), &p, false), 702);
        assert_eq!(slic_cycles(&mk2(), &p), 1501);
    }

    #[test]
    fn slic_float_partials_stride_two() {
        // 2 chains, float partials, 2 groups × 2 channels, stride 2, n = 4:
        // row 15 + 2 − 1 (dummy load) = 16; zeroing 17 + 11 + 3 + 2·16 = 63 → 378.
        // Weights 9 + 6 + 6·12 + 6 + 16 = 109; body 109 + 4 + 2 + 6 + 1 + 6 + 1 = 129.
        // 28 + (15 + 1) + (129 + 1) + 378 + 0 = 552.
        let p = slic(F32, 2, (2, 2), 1, 1, 2, vec![vec![4]; 6]);
        assert_eq!(slic_cycles(&mk2(), &p), 552);
    }

    #[test]
    fn slic_sixteen_groups() {
        // 16 groups: preamble 21; zeroing 21 + 11 + 15 = 47 → 282; later 46 → 276, ×4
        // strides = 1104. Weights 9 + 6 + 6·11 + 6 + 16 = 103; stride body 103 + 21 = 124,
        // loop 124·4 + 19 = 515; sub-kernel body 515 + 15 = 530, loop 530·2 + 7 = 1067;
        // CGG body 15 + 8 = 23, loop 24. 28 + 24 + 1067 + 282 + 1104 = 2505.
        let p = slic(F16, 4, (16, 1), 1, 2, 1, vec![vec![5]; 6]);
        assert_eq!(slic_cycles(&mk2(), &p), 2505);
        assert_eq!(slic_conv_chains(&mk2(), F16), 4);
        assert_eq!(slic_conv_chains(&mk2(), F32), 2);
        assert_eq!(slic_conv_chains(&mk1(), F16), 2);
    }

    fn hmac(
        input: DType,
        partials: DType,
        groups: (u32, u32, u32),
        chans: (u32, u32),
        kernel: u32,
        zeros: u32,
        w: Vec<Vec<Vec<u32>>>,
    ) -> HmacParams {
        HmacParams {
            input,
            partials,
            conv_groups: groups.0,
            in_groups: groups.1,
            out_groups: groups.2,
            in_chans_per_group: chans.0,
            out_chans_per_group: chans.1,
            kernel_size: kernel,
            zeros_info: zeros,
            one_by_one: false,
            worklists: w,
        }
    }

    #[test]
    fn hmac_half_float_odd_channels() {
        // dot(3): width 1 divides 3: 7 + 1 (warm-up) + 3·2 − 1 = 13.
        // Worker: 16 − 6 = 10; k0 [5]: 10 + 19 + 5·(7 + 2·13) = 194; k1 [5, 0]: 194 + 7 = 201;
        // 16 + 194 + 201 = 411, ×6 = 2466. Zeroing: ceil(24/6) = 4 → 2 + 5 = 7, ×6 = 42.
        // 65 + 6·9 + 6·0 (retention looked up with float partials) + (23 + 15 + 10 + 2466)
        // = 119 + 2514 = 2633; + 42 = 2675.
        let p = hmac(
            F16,
            F32,
            (1, 1, 1),
            (3, 2),
            2,
            24,
            vec![vec![vec![5], vec![5, 0]]; 6],
        );
        assert_eq!(hmac_dot_product_cycles(&mk2(), F16, F32, 3), 13);
        assert_eq!(hmac_inner_loop_cycles(&mk2(), &p), 2466);
        assert_eq!(hmac_cycles(&mk2(), &p), 2675);
        // The same on Mk1: nothing in HMAC depends on the conv units.
        assert_eq!(hmac_cycles(&mk1(), &p), 2675);
    }

    #[test]
    fn hmac_half_half_pairs_output_channels() {
        // dot(8), half/half: 3·2 + 1 + 3 + 1 = 11 around, width 4 (1 cycle/step): 11 + 2 − 1 =
        // 12. Outs ceil(3/2) = 2. Worker 10 + 19 + 4·(7 + 2·12) = 153; 16 + 153 = 169 → 1014.
        // No zeroing (zerosInfo 0). 65 + 6·10 + 6·6 + 2·(23 + 15 + 2·(10 + 1014)) = 161 + 4172
        // = 4333.
        let p = hmac(F16, F16, (2, 1, 2), (8, 3), 1, 0, vec![vec![vec![4]]; 6]);
        assert_eq!(hmac_dot_product_cycles(&mk2(), F16, F16, 8), 12);
        assert_eq!(hmac_cycles(&mk2(), &p), 4333);
    }

    #[test]
    fn hmac_float_and_one_by_one() {
        // Float: dot(4) width 2 (fills 64 bits): 7 + 4/2 = 9. Worker 16 + 19 + 2·(7 + 9) = 67;
        // 16 + 67 = 83 → 498 (3 workers). Zeroing ceil(12/6) = 2 → 1 + 5 = 6, ×6 = 36.
        // 58 + 54 + 0 + (23 + 15 + 10 + 498) = 658; + 36 = 694.
        let p = hmac(F32, F32, (1, 1, 1), (4, 1), 1, 12, vec![vec![vec![2]]; 3]);
        assert_eq!(hmac_cycles(&mk2(), &p), 694);
        // 1x1, half/float, one output channel: dot(4) = 7 + 1 − 1 = 7; worker 16 − 15 + 13 +
        // 1 + 3·(2 + 7) = 42; 16 + 42 = 58 → 348. Zeroing runs even for 0 elements: 30.
        // 55 + 54 + 6·15 + (23 + 15 + 10 + 348) = 595; + 30 = 625.
        let p = HmacParams {
            one_by_one: true,
            ..hmac(F16, F32, (1, 1, 1), (4, 1), 1, 0, vec![vec![vec![3]]; 6])
        };
        assert_eq!(hmac_cycles(&mk2(), &p), 625);
    }

    #[test]
    fn vmac_estimates() {
        // Half, 4 groups: worker 18 + 2·(7 + 3 + 3 + 2·2·1) = 52 → 312. Zero 4 + 40/4 = 14;
        // reduce 10 + (7 + 5)·ceil(40/6)/4 = 10 + 84/4 = 31; outer 32 + 2·(24 + 312) = 704.
        // 100 + 14 + 704 + 31 = 849.
        let p = VmacParams {
            partials: F16,
            conv_groups_per_group: 4,
            conv_groups: 1,
            in_groups: 2,
            out_elems: 40,
            worklists: vec![vec![3, 3]; 6],
        };
        assert_eq!(vmac_cycles(&mk2(), &p), 849);
        // Float, 8 groups (float partials take the 4-group loop): worker 19 + 7 + 5 + 3 +
        // 3·2·1 = 40 → 240 (2 workers). Zero 4 + 8 = 12; reduce 9 + (7 + 2 + 2·5)·3/8 = 16;
        // outer 32 + 24 + 240 = 296. 101 + 2·(12 + 296 + 16) = 749.
        let p = VmacParams {
            partials: F32,
            conv_groups_per_group: 8,
            conv_groups: 2,
            in_groups: 1,
            out_elems: 16,
            worklists: vec![vec![3]; 2],
        };
        assert_eq!(vmac_cycles(&mk2(), &p), 749);
        // Half, 16 groups: 25 + 2·(7 + 15 + 3 + 3·3·1) = 93 → 558. Zero 4 + 6 = 10; reduce
        // 10 + 12·4/16 = 13; outer 32 + 24 + 558 = 614. 100 + 10 + 614 + 13 = 737.
        let p = VmacParams {
            partials: F16,
            conv_groups_per_group: 16,
            conv_groups: 1,
            in_groups: 1,
            out_elems: 24,
            worklists: vec![vec![4]; 6],
        };
        assert_eq!(vmac_cycles(&mk2(), &p), 737);
    }

    #[test]
    fn small_worklists_take_the_unrolled_paths() {
        let w = |t: &Target, i, p, n, z| conv1x1_worker_cycles(t, i, p, n, z);
        // Mk2 half/half (common path, retention 7): 0 positions zeroing 20 + 1 − 7 = 14;
        // 1 position accumulating 31 + 2 − 7 = 26.
        assert_eq!(w(&mk2(), F16, F16, 0, true), 14);
        assert_eq!(w(&mk2(), F16, F16, 1, false), 26);
        // Mk1 half/half (8 units, 2 cycles/position zeroing): 39 + (2 + 2) = 43;
        // 40 + (2 + 2·2) = 46; nothing to do: 24.
        assert_eq!(w(&mk1(), F16, F16, 1, true), 43);
        assert_eq!(w(&mk1(), F16, F16, 2, true), 46);
        assert_eq!(w(&mk1(), F16, F16, 0, true), 24);
        // Mk2 float (8 cycles/position zeroing): 47 + (2 + 8) = 57; 46 + (2 + 16) = 64; 24.
        assert_eq!(w(&mk2(), F32, F32, 1, true), 57);
        assert_eq!(w(&mk2(), F32, F32, 2, true), 64);
        assert_eq!(w(&mk2(), F32, F32, 0, false), 24);
        // A vertex with one idle-but-running worker (0 positions) and five of 6: zeroing
        // 14 and 37 + 12 − 7 = 42 → max(6·42, 6·14 + 14) = 252.
        // 50 + 6·(7 + 3·0) + (12 + 1 + 0 + 10 + 1 + (19 − 1 + (7 + 64 + 252))) = 457.
        let mut wl = vec![Some(6); 6];
        wl[0] = Some(0);
        let p = one_by_one(F16, F16, (1, 1, 1), 16, wl);
        assert_eq!(conv1x1_out_cycles(&mk2(), &p), 457);
        // SLIC (4 chains, half partials), one busy worker, the rest at the 17-cycle preamble.
        // Stride 1, accumulating: 0 elements 17 + 10 + 7 + 10 = 44; 1: 17 + 10 + 13 = 40;
        // 2: 17 + 10 + 7 + 12 = 46. Stride 2, zeroing: 1: 17 + 11 + 13 = 41; 2: 17 + 11 + 15
        // = 43. Each × 6.
        let row = |n, stride| {
            let mut w = vec![vec![]; 6];
            w[0] = vec![n];
            slic(F16, 4, (4, 1), 1, 1, stride, w)
        };
        assert_eq!(slic_inner_loop_cycles(&mk2(), &row(0, 1), false), 6 * 44);
        assert_eq!(slic_inner_loop_cycles(&mk2(), &row(1, 1), false), 6 * 40);
        assert_eq!(slic_inner_loop_cycles(&mk2(), &row(2, 1), false), 6 * 46);
        assert_eq!(slic_inner_loop_cycles(&mk2(), &row(1, 2), true), 6 * 41);
        assert_eq!(slic_inner_loop_cycles(&mk2(), &row(2, 2), true), 6 * 43);
    }

    #[test]
    fn poplibs_is_not_monotone_at_small_sizes() {
        // Pinned so that "fixing" it is a deliberate departure from PopLibs: its unrolled
        // 2-position 1x1 case costs more than the 3-position loop (PE.hpp L455 vs L470) …
        assert_eq!(conv1x1_worker_cycles(&mk2(), F16, F16, 2, true), 41 - 7);
        assert_eq!(conv1x1_worker_cycles(&mk2(), F16, F16, 3, true), 37 - 7);
        // … float activations without zeroing charge 47 for 1 position and 46 for 2 …
        assert_eq!(conv1x1_worker_cycles(&mk2(), F32, F32, 1, false), 47);
        assert_eq!(conv1x1_worker_cycles(&mk2(), F32, F32, 2, false), 46);
        // … and SLIC's unrolled 4-element row (13 + 4) costs more than the 5-element loop (15).
        let row = |n| slic(F16, 4, (4, 1), 1, 1, 1, vec![vec![n]; 6]);
        assert_eq!(
            slic_inner_loop_cycles(&mk2(), &row(4), true),
            6 * (17 + 11 + 17)
        );
        assert_eq!(
            slic_inner_loop_cycles(&mk2(), &row(5), true),
            6 * (17 + 11 + 15)
        );
    }

    /// A small deterministic generator (64-bit LCG) for the property tests.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, lo: u32, hi: u32) -> u32 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + ((self.0 >> 33) % (hi - lo + 1) as u64) as u32
        }
    }

    const PAIRS: [(DType, DType); 3] = [(F16, F16), (F16, F32), (F32, F32)];

    #[test]
    fn cycles_grow_with_output_positions() {
        // Monotone wherever PopLibs' loop formula applies: from 3 positions for the AMP
        // vertices, from the loop threshold (6) for SLIC, everywhere for HMAC and VMAC.
        let mut rng = Lcg(7);
        for target in [mk2(), mk1()] {
            for _ in 0..200 {
                let w = rng.next(0, 5) as usize;
                let base: Vec<u32> = (0..6).map(|_| rng.next(3, 120)).collect();
                let mut more = base.clone();
                more[w] += rng.next(1, 9);
                for (input, partials) in PAIRS {
                    let a = one_by_one(
                        input,
                        partials,
                        (1, 2, 2),
                        16,
                        base.iter().map(|&n| Some(n)).collect(),
                    );
                    let b = one_by_one(
                        input,
                        partials,
                        (1, 2, 2),
                        16,
                        more.iter().map(|&n| Some(n)).collect(),
                    );
                    assert!(conv1x1_out_cycles(&target, &b) >= conv1x1_out_cycles(&target, &a));
                    let wl = |v: &[u32]| v.iter().map(|&n| vec![vec![n, 4]; 2]).collect();
                    let a = nx1(
                        input,
                        partials,
                        (1, 2, 1),
                        (16, 16),
                        (2, 1, 1),
                        64,
                        wl(&base),
                    );
                    let b = nx1(
                        input,
                        partials,
                        (1, 2, 1),
                        (16, 16),
                        (2, 1, 1),
                        64,
                        wl(&more),
                    );
                    assert!(convnx1_cycles(&target, &b) >= convnx1_cycles(&target, &a));
                    let a = hmac(input, partials, (1, 2, 1), (3, 2), 2, 8, wl(&base));
                    let b = hmac(input, partials, (1, 2, 1), (3, 2), 2, 8, wl(&more));
                    assert!(hmac_cycles(&target, &b) >= hmac_cycles(&target, &a));
                }
                for (partials, chains, grouping) in
                    [(F16, 4, (4, 1)), (F16, 2, (2, 2)), (F32, 2, (1, 4))]
                {
                    let rows = |v: &[u32]| v.iter().map(|&n| vec![n + 3, 6]).collect();
                    let a = slic(partials, chains, grouping, 1, 2, 1, rows(&base));
                    let b = slic(partials, chains, grouping, 1, 2, 1, rows(&more));
                    assert!(slic_cycles(&target, &b) >= slic_cycles(&target, &a));
                    let a = slic(partials, chains, grouping, 1, 2, 2, rows(&base));
                    let b = slic(partials, chains, grouping, 1, 2, 2, rows(&more));
                    assert!(slic_cycles(&target, &b) >= slic_cycles(&target, &a));
                }
                let vmac = |v: &[u32], partials| VmacParams {
                    partials,
                    conv_groups_per_group: 8,
                    conv_groups: 1,
                    in_groups: 2,
                    out_elems: 48,
                    worklists: v.iter().map(|&n| vec![n]).collect(),
                };
                for partials in [F16, F32] {
                    assert!(
                        vmac_cycles(&target, &vmac(&more, partials))
                            >= vmac_cycles(&target, &vmac(&base, partials))
                    );
                }
            }
        }
    }

    #[test]
    fn cycles_grow_with_input_channel_groups() {
        let mut rng = Lcg(11);
        for target in [mk2(), mk1()] {
            for _ in 0..50 {
                let w: Vec<u32> = (0..6).map(|_| rng.next(0, 80)).collect();
                let (cg, og) = (rng.next(1, 3), rng.next(1, 3));
                for (input, partials) in PAIRS {
                    let mut last = [0u64; 3];
                    for ig in 1..10 {
                        let p = one_by_one(
                            input,
                            partials,
                            (cg, ig, og),
                            16,
                            w.iter().map(|&n| Some(n)).collect(),
                        );
                        let wl: Vec<Vec<Vec<u32>>> = w.iter().map(|&n| vec![vec![n]; 3]).collect();
                        let q = nx1(
                            input,
                            partials,
                            (cg, ig, og),
                            (16, 16),
                            (3, 1, 2),
                            32,
                            wl.clone(),
                        );
                        let h = hmac(input, partials, (cg, ig, og), (4, 4), 3, 32, wl);
                        let now = [
                            conv1x1_out_cycles(&target, &p),
                            convnx1_cycles(&target, &q),
                            hmac_cycles(&target, &h),
                        ];
                        for (n, l) in now.iter().zip(&last) {
                            assert!(n > l, "{} ig={ig}: {now:?} after {last:?}", target.name);
                        }
                        last = now;
                    }
                }
                let mut last = 0;
                for ig in 1..10 {
                    let v = VmacParams {
                        partials: F32,
                        conv_groups_per_group: 4,
                        conv_groups: cg,
                        in_groups: ig,
                        out_elems: 24,
                        worklists: w.iter().map(|&n| vec![n + 1]).collect(),
                    };
                    let now = vmac_cycles(&target, &v);
                    assert!(now > last);
                    last = now;
                }
            }
        }
    }

    #[test]
    fn huge_figures_saturate() {
        let p = one_by_one(
            F16,
            F16,
            (u32::MAX, u32::MAX, u32::MAX),
            u32::MAX,
            vec![Some(u32::MAX); 6],
        );
        assert_eq!(conv1x1_out_cycles(&mk2(), &p), u64::MAX);
        let p = nx1(
            F32,
            F32,
            (u32::MAX, u32::MAX, u32::MAX),
            (1, u32::MAX),
            (2, 2, 7),
            u32::MAX,
            vec![vec![vec![u32::MAX]; 4]; 6],
        );
        assert_eq!(convnx1_cycles(&mk2(), &p), u64::MAX);
        let v = ConvVertex::ReduceAdd(ReduceAddParams {
            out_elems: u32::MAX,
            num_partials: u32::MAX,
            out: F16,
            partials: F16,
            variant: ReduceAddVariant::MultiInput,
        });
        assert!(v.cycles(&mk2()) > u32::MAX as u64);
        assert_eq!(v.poplibs_estimator(), "getReduceCycleEstimate");
    }
}

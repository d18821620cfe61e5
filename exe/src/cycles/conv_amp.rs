//! Cycle estimators of PopLibs' AMP convolution vertices (`ConvPartial1x1Out`,
//! `ConvPartialnx1`), SLIC (`ConvPartial1xNSLIC`) and the zeroing of partials, with the
//! helpers the MAC-loop estimators of [`super::conv_mac`] share. The citations and
//! conventions are those of [`super::conv`], which registers these estimators and re-exports
//! them.

use super::saturating::{cy, flag, workers, Cy};
use crate::target::Target;
use ipusim_ir::DType;
use serde::{Deserialize, Serialize};

/// PopLibs' `floatActivations`: anything but half is float.
pub(super) fn float_acts(input: DType) -> bool {
    input != DType::F16
}

/// PopLibs' `floatPartials`; float activations always accumulate in float.
pub(super) fn float_partials(input: DType, partials: DType) -> bool {
    partials != DType::F16 || float_acts(input)
}

/// The slowest and fastest worker of a supervisor vertex, each in tile cycles
/// (`worker_contexts × worker cycles`). As in PopLibs, the fastest is 0 when fewer than
/// `worker_contexts` workers have a worklist (PE.hpp L406–410, L478–485 and every other
/// `minWorkerCycles`).
pub(super) fn slowest_fastest(per_worker: impl IntoIterator<Item = Cy>, nw: u64) -> (Cy, Cy) {
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
pub(super) fn zero_retention_saving(float_partials: bool) -> u64 {
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
    /// `worklists.list(worker, k)`: the output positions of each entry of that worker's
    /// worklist for kernel position `k = ky · kernel_inner + kx` (entries
    /// `worklist[3i + 1] + 3`).
    pub worklists: Worklists,
}

/// Each worker's worklists by kernel position, kept in one list end to end (the estimate
/// builds them for every block the planner weighs and every vertex group it costs: hundreds
/// of thousands of blocks of dozens of lists on a large CNN). `From` a list per worker of
/// lists per position, where a missing position counts as an empty worklist.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worklists {
    /// The entries of every list, worker by worker, position by position.
    entries: Vec<u32>,
    /// Where each (worker, position) list ends in `entries`, in the same order.
    ends: Vec<usize>,
    /// Kernel positions per worker.
    positions: usize,
}

impl Worklists {
    /// Empty worklists of `positions` kernel positions per worker, to be filled with
    /// [`Worklists::push`] and closed with [`Worklists::end_list`].
    pub fn new(positions: usize) -> Worklists {
        Worklists {
            positions,
            ..Worklists::default()
        }
    }

    /// Room for `entries` entries in all.
    pub fn reserve(&mut self, entries: usize) {
        self.entries.reserve(entries);
    }

    /// Adds an entry to the list being filled.
    pub fn push(&mut self, entry: u32) {
        self.entries.push(entry);
    }

    /// Closes the list being filled (the next position's, or the next worker's first).
    pub fn end_list(&mut self) {
        self.ends.push(self.entries.len());
    }

    /// The workers that have lists.
    pub fn workers(&self) -> usize {
        self.ends.len().checked_div(self.positions).unwrap_or(0)
    }

    /// Worker `w`'s list for kernel position `k` (empty when it has none).
    pub fn list(&self, w: usize, k: usize) -> &[u32] {
        if k >= self.positions {
            return &[];
        }
        let i = w * self.positions + k;
        match self.ends.get(i) {
            Some(&end) => {
                let begin = if i == 0 { 0 } else { self.ends[i - 1] };
                &self.entries[begin..end]
            }
            None => &[],
        }
    }
}

impl From<Vec<Vec<Vec<u32>>>> for Worklists {
    fn from(lists: Vec<Vec<Vec<u32>>>) -> Worklists {
        let positions = lists.iter().map(Vec::len).max().unwrap_or(0);
        let mut w = Worklists::new(positions);
        for worker in &lists {
            for k in 0..positions {
                for &e in worker.get(k).map_or(&[][..], |l| &l[..]) {
                    w.push(e);
                }
                w.end_list();
            }
        }
        w
    }
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
        let per_worker = (0..p.worklists.workers()).map(|w| {
            Cy(convnx1_worker_cycles(
                target,
                input,
                partials,
                p.worklists.list(w, k as usize),
            ))
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

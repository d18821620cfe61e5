//! Cycle estimators of PopLibs' convolution vertices: the AMP partial vertices
//! (`ConvPartial1x1Out`, `ConvPartialnx1`), SLIC (`ConvPartial1xNSLIC`), the MAC-loop vertices
//! for few channels (`ConvPartialHorizontalMac`, `ConvPartialVerticalMac`) and the zeroing of
//! partials, each a pure function of the parameters PopLibs' own estimator reads. This module
//! is their registry ([`ConvVertex`]) and their public face: the AMP, SLIC and zeroing
//! estimators are in `conv_amp`, the MAC loops in `conv_mac`, the `poplin::ReduceAdd` that
//! sums partials across tiles in [`super::conv_reduce`], and all are re-exported here. The
//! sources and conventions below hold for all of them.
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

use crate::target::Target;
use serde::{Deserialize, Serialize};

pub use super::conv_amp::{
    amp_conv_units, amp_weight_load_cycles, conv1x1_inner_loop_cycles, conv1x1_out_cycles,
    conv1x1_worker_cycles, convnx1_cycles, convnx1_inner_loop_cycles, convnx1_outer_loop_cycles,
    convnx1_worker_cycles, slic_conv_chains, slic_cycles, slic_inner_loop_cycles,
    slic_weight_load_cycles, zero_partials_cycles, zero_partials_even, Conv1x1OutParams,
    ConvNx1Params, SlicParams, Worklists, ZeroParams, SLIC_WINDOW_WIDTH,
};
pub use super::conv_mac::{
    hmac_cycles, hmac_dot_product_cycles, hmac_inner_loop_cycles, hmac_worker_cycles, vmac_cycles,
    vmac_worker_cycles, HmacParams, VmacParams,
};
use super::conv_reduce::reduce_add_cycles;
pub use super::conv_reduce::ReduceAddParams;

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
#[path = "conv_tests.rs"]
mod tests;

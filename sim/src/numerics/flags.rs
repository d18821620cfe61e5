//! The IPU's floating-point control and status registers (`$FP_CTL`, `$FP_STS`) and the
//! user-facing floating-point configuration ([`FpConfig`]).
//!
//! This module owns the register *layouts* and the mapping from the configuration a user
//! writes (TensorFlow's `IPUConfig.floating_point_behaviour`, PopTorch/PopART options) to
//! the control bits the simulator runs with. Arithmetic never lives here: every operation
//! in [`super::fp16`], [`super::fp32`] and [`super::cast`] returns the [`FpSts`] bits it
//! raised, and the engine ORs them into a worker's `$FP_STS` and asks [`FpConfig::trapping`]
//! whether any of them must stop the program.
//!
//! Bit positions: INV bit 0, DIV0 bit 1, OFLO bit 2, ESR bit 19, NANOO bit 20
//! (`reference/ipu-hardware.md`, `$FP_CTL`/`$FP_STS` in Graphcore's
//! `ipu_assembly_support` ISA hover docs, numerics.md \[S25\]).

use bitflags::bitflags;
use serde::{Deserialize, Serialize};

bitflags! {
    /// `$FP_STS`: the sticky floating-point status bits a worker raised.
    ///
    /// `1` in a bit means the condition occurred (numerics.md §2.2 \[S20\]). Only three
    /// conditions exist on the IPU: there are no underflow or inexact flags.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub struct FpSts: u32 {
        /// Invalid operation: inf−inf, 0/0, inf/inf, 0×inf, sqrt/log of a negative number,
        /// any NaN operand, a comparison with NaN, NaN produced by `nanoo` on overflow,
        /// an out-of-range float→int cast (numerics.md §2.2 \[S13\]\[S18\]).
        const INV = 1 << 0;
        /// Division of a finite non-zero number by zero (and `log(±0)`).
        const DIV0 = 1 << 1;
        /// A finite computation overflowed the destination format.
        const OFLO = 1 << 2;
    }
}

bitflags! {
    /// `$FP_CTL`: per-worker floating-point control bits.
    ///
    /// The exception-enable bits share the positions of the [`FpSts`] bits they enable.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub struct FpCtl: u32 {
        /// Trap on [`FpSts::INV`].
        const INV = 1 << 0;
        /// Trap on [`FpSts::DIV0`].
        const DIV0 = 1 << 1;
        /// Trap on [`FpSts::OFLO`].
        const OFLO = 1 << 2;
        /// Enable stochastic rounding of FP16 results.
        const ESR = 1 << 19;
        /// FP16 overflow produces NaN (and INV) instead of saturating to ±65504.
        const NANOO = 1 << 20;
    }
}

impl FpCtl {
    /// The exception-enable bits of `self` that are set in `raised`: the flags that trap.
    pub fn trapping(self, raised: FpSts) -> FpSts {
        FpSts::from_bits_truncate(self.bits()) & raised
    }
}

impl FpSts {
    /// The names of the raised flags in bit order (`"INV"`, `"DIV0"`, `"OFLO"`), as the
    /// `ipusim fp --json` `flags` array and trace events print them.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        self.iter_names().map(|(name, _)| name)
    }
}

/// Stochastic-rounding behaviour, as TensorFlow's `StochasticRoundingBehaviour`
/// (numerics.md §2.1 \[S17\]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StochasticRounding {
    /// FP16 results are rounded to nearest, ties to even.
    #[default]
    Off,
    /// FP16 results are rounded stochastically everywhere.
    On,
    /// Stochastic rounding only where the graph is proven replica-identical; the engine
    /// decides per region and asks [`StochasticRounding::applies`].
    ReplicaIdenticalOnly,
}

impl StochasticRounding {
    /// Whether stochastic rounding applies in a region that is (`true`) or is not
    /// (`false`) replica-identical.
    pub fn applies(self, replica_identical_region: bool) -> bool {
        match self {
            Self::Off => false,
            Self::On => true,
            Self::ReplicaIdenticalOnly => replica_identical_region,
        }
    }
}

/// The floating-point configuration of a run, as TensorFlow's
/// `IPUConfig.floating_point_behaviour`: `inv`, `div0`, `oflo` enable exceptions, `esr`
/// selects stochastic rounding, `nanoo` selects NaN-on-overflow for FP16.
///
/// The default is all off, like TensorFlow's `IPUConfig` (numerics.md §2.1 \[S17\]); note that
/// Poplar's own `FloatingPointBehaviour{}` defaults to all on \[S15\].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FpConfig {
    /// Trap on invalid operations.
    pub inv: bool,
    /// Trap on division by zero.
    pub div0: bool,
    /// Trap on overflow.
    pub oflo: bool,
    /// Stochastic rounding of FP16 results.
    pub esr: StochasticRounding,
    /// FP16 overflow gives NaN (and INV) instead of saturating to ±65504.
    pub nanoo: bool,
}

impl FpConfig {
    /// Every exception enabled, NaN on overflow, stochastic rounding on: Poplar's
    /// `FloatingPointBehaviour{}` defaults and TF's `set_all=True` (numerics.md §2.1).
    pub const ALL: FpConfig = FpConfig {
        inv: true,
        div0: true,
        oflo: true,
        esr: StochasticRounding::On,
        nanoo: true,
    };

    /// The `$FP_CTL` a worker runs with in a region that is (or is not) replica-identical.
    pub fn ctl(&self, replica_identical_region: bool) -> FpCtl {
        let mut ctl = FpCtl::empty();
        ctl.set(FpCtl::INV, self.inv);
        ctl.set(FpCtl::DIV0, self.div0);
        ctl.set(FpCtl::OFLO, self.oflo);
        ctl.set(FpCtl::ESR, self.esr.applies(replica_identical_region));
        ctl.set(FpCtl::NANOO, self.nanoo);
        ctl
    }

    /// The flags among `raised` that trap under this configuration.
    pub fn trapping(&self, raised: FpSts) -> FpSts {
        self.ctl(true).trapping(raised)
    }
}

impl From<FpConfig> for FpCtl {
    /// The control bits of `config`; `ReplicaIdenticalOnly` sets ESR (the engine clears it
    /// in regions that are not replica-identical, see [`FpConfig::ctl`]).
    fn from(config: FpConfig) -> FpCtl {
        config.ctl(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_layout_matches_the_isa() {
        assert_eq!(FpSts::INV.bits(), 1);
        assert_eq!(FpSts::DIV0.bits(), 2);
        assert_eq!(FpSts::OFLO.bits(), 4);
        assert_eq!(FpCtl::ESR.bits(), 1 << 19);
        assert_eq!(FpCtl::NANOO.bits(), 1 << 20);
    }

    #[test]
    fn default_config_is_all_off_and_traps_nothing() {
        let c = FpConfig::default();
        assert_eq!(FpCtl::from(c), FpCtl::empty());
        assert_eq!(c.trapping(FpSts::all()), FpSts::empty());
    }

    #[test]
    fn config_maps_to_ctl_and_traps_only_enabled_flags() {
        let c = FpConfig {
            div0: true,
            esr: StochasticRounding::ReplicaIdenticalOnly,
            ..FpConfig::default()
        };
        assert_eq!(c.ctl(true), FpCtl::DIV0 | FpCtl::ESR);
        assert_eq!(c.ctl(false), FpCtl::DIV0);
        assert_eq!(c.trapping(FpSts::DIV0 | FpSts::INV), FpSts::DIV0);
        assert_eq!(FpCtl::from(FpConfig::ALL), FpCtl::all());
    }

    #[test]
    fn config_serde_is_snake_case_with_defaults() {
        let c: FpConfig =
            serde_json::from_str(r#"{"oflo": true, "esr": "replica_identical_only"}"#).unwrap();
        assert!(c.oflo && !c.inv && !c.nanoo);
        assert_eq!(c.esr, StochasticRounding::ReplicaIdenticalOnly);
        assert!(serde_json::from_str::<FpConfig>(r#"{"nan_oo": true}"#).is_err());
        let text = serde_json::to_string(&FpConfig::ALL).unwrap();
        assert_eq!(
            text,
            r#"{"inv":true,"div0":true,"oflo":true,"esr":"on","nanoo":true}"#
        );
    }

    #[test]
    fn sts_names_in_bit_order() {
        let names: Vec<_> = (FpSts::OFLO | FpSts::INV).names().collect();
        assert_eq!(names, ["INV", "OFLO"]);
    }
}

//! A system of IPUs: `ipus` chips of one kind (the executable's [`Target`]) joined by
//! IPU-Links, with their host links, and the ids that name a tile of such a system.
//!
//! - [`TileId`]: a tile and the IPU it is on. With one IPU a tile id is the tile's number on
//!   the chip, and serialises as that number, as it always has.
//! - [`System`]: how many IPUs, their IPU-Links (bandwidth, latency), how their host links
//!   are shared, and the cost of an external sync across them.
//! - [`SyncScope`]: whether a sync is internal to one IPU or external across IPUs.
//!
//! What is sourced (`reference/ipu-hardware.md` §9, §6 item 9) and what is our choice is said
//! at each figure.

pub use crate::ids::{TileId, MAX_IPUS, MAX_TILES_PER_IPU};

use crate::error::CompileError;
use crate::target::Target;
use serde::{Deserialize, Serialize};

/// The most tiles a system may have over all its IPUs and replicas ([`System::check_tiles`]):
/// our choice, 2^21 = 2,097,152, over five times an IPU-POD256's 376,832 (256 GC200s). The
/// compiler's per-tile figures took about 270 bytes a tile (4.5 GB for the digits MLP on 16
/// IPUs of a million-tile target), so the bound keeps them under a gigabyte.
pub const MAX_SYSTEM_TILES: u64 = 1 << 21;

/// Where a sync reaches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SyncScope {
    /// All tiles of one IPU (Poplar's internal sync).
    #[default]
    Internal,
    /// All tiles of every IPU of the system (an external sync over the IPU-Links / GW-Links).
    External,
}

/// The IPU-Links of each IPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IpuLinks {
    /// Links per IPU (Mk2: 10, `ipu-hardware.md` §1).
    pub links_per_ipu: u32,
    /// Usable bytes per second of one link in one direction: 128 Gibit/s at 0.85 efficiency,
    /// the model of Graphcore's test harness (`ipu-hardware.md` §6 item 9, `poplibs_test/
    /// Util.cpp`).
    pub bytes_per_second_per_link: u64,
    /// Fixed cycles of one inter-IPU copy before its bytes arrive: 15 ns per hop at the
    /// chip's clock, one hop between neighbours (the same harness's per-hop figure; the
    /// single hop is our choice for neighbouring IPUs).
    pub latency_cycles: u32,
}

/// A system of IPUs of one kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct System {
    /// Number of IPUs (1 for a single chip).
    pub ipus: u32,
    /// The IPU-Links.
    pub links: IpuLinks,
    /// IPUs that share one host link (1 for PCIe cards, each with its own link; 4 for an
    /// IPU-M2000, whose four IPUs share one 100 GbE link, `ipu-hardware.md` §9).
    pub ipus_per_host_link: u32,
    /// Replicas of the program (data parallelism): `ipus` IPUs each, `ipus × replicas` in
    /// all. The executable is one replica's; cross-replica collectives are costed over all.
    #[serde(default = "one")]
    pub replicas: u32,
}

fn one() -> u32 {
    1
}

/// 128 Gibit/s × 0.85 in bytes per second (`ipu-hardware.md` §6 item 9).
const LINK_BYTES_PER_SECOND: u64 = (128u64 << 30) / 8 * 85 / 100;

/// One hop of 15 ns (`ipu-hardware.md` §6 item 9).
const HOP_SECONDS: f64 = 15e-9;

impl System {
    /// One IPU of `target`: no IPU-Link traffic, no external syncs.
    pub fn single(target: &Target) -> System {
        System::of(target, 1)
    }

    /// `ipus` IPUs of `target`, each with its own host link.
    pub fn of(target: &Target, ipus: u32) -> System {
        System {
            ipus,
            links: IpuLinks {
                links_per_ipu: 10,
                bytes_per_second_per_link: LINK_BYTES_PER_SECOND,
                latency_cycles: (HOP_SECONDS * target.clock_hz as f64).ceil() as u32,
            },
            ipus_per_host_link: 1,
            replicas: 1,
        }
    }

    /// `replicas` replicas of `ipus` IPUs of `target`.
    pub fn replicated(target: &Target, ipus: u32, replicas: u32) -> System {
        System {
            replicas,
            ..System::of(target, ipus)
        }
    }

    /// Cycles of an all-reduce of `bytes` (one replica's tensor) across the replicas: a ring
    /// all-reduce (Patarasuk & Yuan 2009, the bandwidth-optimal collective GCL's rings
    /// follow), `2 (R - 1)` steps — a reduce-scatter, then an all-gather — each sending
    /// `ceil(bytes / R)` to the ring's next replica over one IPU-Link
    /// ([`System::link_copy_cycles`]) and ending in an external sync over the whole system.
    /// The on-tile additions of the reduce-scatter are not charged (our simplification: a
    /// link moves 11 bytes per cycle, a tile adds far more). 0 with one replica.
    pub fn all_reduce_cycles(&self, target: &Target, bytes: u64) -> u64 {
        self.ring_cycles(target, bytes, 2)
    }

    /// Cycles of a reduce-scatter or an all-gather of a tensor of `bytes` (the whole tensor,
    /// not one shard): one half of [`System::all_reduce_cycles`]' ring, `R - 1` steps of
    /// `ceil(bytes / R)`. 0 with one replica.
    pub fn reduce_scatter_cycles(&self, target: &Target, bytes: u64) -> u64 {
        self.ring_cycles(target, bytes, 1)
    }

    /// `passes × (R - 1)` ring steps over `bytes`.
    fn ring_cycles(&self, target: &Target, bytes: u64, passes: u64) -> u64 {
        if self.replicas <= 1 {
            return 0;
        }
        let r = u64::from(self.replicas);
        let whole = System {
            ipus: self.ipus.saturating_mul(self.replicas),
            ..self.clone()
        };
        let step = self
            .link_copy_cycles(target, bytes.div_ceil(r))
            .saturating_add(whole.external_sync_cycles(target));
        step.saturating_mul(passes * (r - 1))
    }

    /// Cycles of one external sync across the system's IPUs: `ceil(15 ns × f × hops × 2)`
    /// with `hops = 1 + (n/2)/2` (`ipu-hardware.md` §9, `poplibs_test/Util.cpp`); an internal
    /// sync's cycles with one IPU.
    pub fn external_sync_cycles(&self, target: &Target) -> u64 {
        if self.ipus <= 1 {
            return target.sync_cycles as u64;
        }
        let hops = 1 + (self.ipus / 2) / 2;
        (HOP_SECONDS * target.clock_hz as f64 * hops as f64 * 2.0).ceil() as u64
    }

    /// Cycles of a sync of `scope`.
    pub fn sync_cycles(&self, target: &Target, scope: SyncScope) -> u64 {
        match scope {
            SyncScope::Internal => target.sync_cycles as u64,
            SyncScope::External => self.external_sync_cycles(target),
        }
    }

    /// Cycles to move `bytes` from one IPU to another over one IPU-Link: the latency plus
    /// the bytes at the link's rate, at the chip's clock.
    pub fn link_copy_cycles(&self, target: &Target, bytes: u64) -> u64 {
        let rate = self.links.bytes_per_second_per_link.max(1) as u128;
        let transfer = (bytes as u128 * target.clock_hz as u128).div_ceil(rate);
        (self.links.latency_cycles as u64).saturating_add(transfer.min(u64::MAX as u128) as u64)
    }

    /// Checks that the system's tiles, over all its IPUs and replicas, are at most
    /// [`MAX_SYSTEM_TILES`] with `target`'s tiles per IPU: the compiler and the simulator keep
    /// figures per tile, so a system of millions of tiles costs the host gigabytes before
    /// any of the program's data.
    pub fn check_tiles(&self, target: &Target) -> Result<(), CompileError> {
        let tiles = u64::from(target.tiles)
            .saturating_mul(u64::from(self.ipus))
            .saturating_mul(u64::from(self.replicas));
        if tiles <= MAX_SYSTEM_TILES {
            return Ok(());
        }
        Err(CompileError::Target {
            source_name: Some("system".into()),
            field: "ipus".into(),
            message: format!(
                "{} IPU(s) x {} replica(s) x {} tiles = {tiles} tiles, more than the \
                 {MAX_SYSTEM_TILES} this simulator models (lower --ipus or --replicas, or the \
                 target's tiles)",
                self.ipus, self.replicas, target.tiles
            ),
        })
    }

    /// Checks the system's figures.
    pub fn validate(&self) -> Result<(), CompileError> {
        let bad = |field: &str, message: String| CompileError::Target {
            source_name: Some("system".into()),
            field: field.into(),
            message,
        };
        if self.ipus == 0 || self.ipus > MAX_IPUS {
            return Err(bad(
                "ipus",
                format!("{} is not in 1..={MAX_IPUS}", self.ipus),
            ));
        }
        if self.links.bytes_per_second_per_link == 0 {
            return Err(bad(
                "links.bytes_per_second_per_link",
                "must be at least 1".into(),
            ));
        }
        if self.ipus_per_host_link == 0 {
            return Err(bad("ipus_per_host_link", "must be at least 1".into()));
        }
        if self.replicas == 0
            || self
                .ipus
                .checked_mul(self.replicas)
                .is_none_or(|n| n > MAX_IPUS)
        {
            return Err(bad(
                "replicas",
                format!(
                    "{} replicas of {} IPUs are not in 1..={MAX_IPUS} IPUs",
                    self.replicas, self.ipus
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tile_id_knows_its_ipu_and_serialises_as_the_tile_on_ipu_0() {
        let t = TileId::new(3, 1471);
        assert_eq!((t.ipu(), t.tile()), (3, 1471));
        assert_eq!(t.dense(1472), 3 * 1472 + 1471);
        assert_eq!(t.to_string(), "ipu3:1471");
        let t0 = TileId::on_first_ipu(17);
        assert_eq!(t0.to_string(), "17");
        assert_eq!(format!("{t0:<4}|{t:>10}"), "17  | ipu3:1471");
        assert_eq!(serde_json::to_string(&t0).unwrap(), "17");
        assert!(TileId::new(0, 1471) < TileId::new(1, 0));
    }

    #[test]
    fn external_sync_follows_the_harness_formula() {
        let mk2 = Target::mk2();
        // ipu-hardware.md §9: 40 cycles for 2 IPUs, 199 for 16 at 1.325 GHz.
        assert_eq!(System::of(&mk2, 2).external_sync_cycles(&mk2), 40);
        assert_eq!(System::of(&mk2, 16).external_sync_cycles(&mk2), 199);
        assert_eq!(
            System::single(&mk2).sync_cycles(&mk2, SyncScope::External),
            mk2.sync_cycles as u64
        );
    }

    #[test]
    fn link_copies_cost_latency_plus_bytes_at_the_link_rate() {
        let mk2 = Target::mk2();
        let s = System::of(&mk2, 2);
        assert_eq!(s.links.latency_cycles, 20); // ceil(15 ns × 1.325 GHz)
        let c = s.link_copy_cycles(&mk2, 1 << 20);
        // 1 MiB at 14.6 GB/s ≈ 71.8 µs ≈ 95,144 cycles at 1.325 GHz, plus the latency.
        assert_eq!(c, 95_144 + 20);
        assert!(System::of(&mk2, 0).validate().is_err());
    }

    #[test]
    fn an_all_reduce_is_a_ring_of_link_copies_and_syncs() {
        let mk2 = Target::mk2();
        assert_eq!(System::of(&mk2, 2).all_reduce_cycles(&mk2, 1 << 20), 0);
        let s = System::replicated(&mk2, 1, 4);
        // 3 reduce-scatter and 3 all-gather steps of 256 KiB, each a link copy and an
        // external sync over 4 IPUs.
        let step =
            s.link_copy_cycles(&mk2, 1 << 18) + System::of(&mk2, 4).external_sync_cycles(&mk2);
        assert_eq!(s.all_reduce_cycles(&mk2, 1 << 20), 6 * step);
        // A reduce-scatter (or an all-gather) is either half of that ring.
        assert_eq!(s.reduce_scatter_cycles(&mk2, 1 << 20), 3 * step);
        assert_eq!(System::of(&mk2, 2).reduce_scatter_cycles(&mk2, 1 << 20), 0);
        assert!(System::replicated(&mk2, 2, 0).validate().is_err());
    }
}

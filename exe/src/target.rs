//! The chip description the compiler plans for: tile count and memory, clock, worker
//! contexts, AMP geometry, exchange, sync and host-link costs.
//!
//! Two presets ([`Target::mk2`], [`Target::mk1`]) carry the figures of
//! `reference/ipu-hardware.md` with the source of every constant. A target can also be read
//! from a RON file that names a preset as its base and overrides any field, like the knobs of
//! Poplar's `IPUModel` (`tilesPerIPU`, `memoryBytesPerTile`, `exchangeBytesPerCycle`, ...):
//!
//! ```ron
//! (base: "mk2", tiles: 16, bytes_per_tile: 65536)
//! ```

use crate::error::CompileError;
use ipusim_ir::DType;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The AMP (accumulating matrix product) geometry for one input/partials type pair.
///
/// One *pass* of an AMP worker over an output position consumes `input_channels` input
/// channels and produces `output_channels` partial sums (one per conv unit). The tile's AMP
/// throughput is therefore `input_channels * output_channels / worker_cycles_per_position`
/// MACs per tile cycle: six workers each issue one AMP instruction every six tile cycles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Amp {
    /// Input channels consumed per pass (the AMP input-channel group).
    pub input_channels: u32,
    /// Output channels produced per pass (the number of conv units).
    pub output_channels: u32,
    /// Worker cycles per output position per pass (PopLibs `coreCycles`: 4 for half
    /// activations, 8 for float; ipu-hardware.md §3.3, P1 `poplin/PerformanceEstimation.hpp`
    /// L402/L764).
    pub worker_cycles_per_position: u32,
}

impl Amp {
    /// MACs per tile per cycle at full occupancy.
    pub fn macs_per_cycle(&self) -> u32 {
        self.input_channels * self.output_channels / self.worker_cycles_per_position.max(1)
    }
}

/// A chip the compiler plans for. Every field can be overridden in a target file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// Display name (`mk2`, `mk1`, or a custom name).
    pub name: String,
    /// Tiles per IPU.
    pub tiles: u32,
    /// SRAM bytes per tile.
    pub bytes_per_tile: u32,
    /// Tile clock in Hz.
    pub clock_hz: u64,
    /// Worker contexts per tile (vertices are assigned to worker `0..worker_contexts`).
    pub worker_contexts: u32,
    /// Bytes per load of the data path: the natural vector is 4 halves or 2 floats.
    pub vector_bytes: u32,
    /// AMP geometry for half inputs with half partials (FP16.16).
    pub amp_fp16_fp16: Amp,
    /// AMP geometry for half inputs with float partials (FP16.32).
    pub amp_fp16_fp32: Amp,
    /// AMP geometry for float inputs and partials (FP32).
    pub amp_fp32_fp32: Amp,
    /// Bytes of AMP weights (coefficients) loaded per cycle at the start of a pass.
    pub amp_weight_load_bytes_per_cycle: u32,
    /// Exchange bytes a tile sends or receives per cycle.
    pub exchange_bytes_per_cycle: u32,
    /// Fixed latency of one exchange phase, in cycles.
    pub exchange_latency_cycles: u32,
    /// Cycles of exchange code per message (one contiguous copy) on a tile.
    pub exchange_message_cycles: u32,
    /// Bytes per cycle of an on-tile copy (IPUModel `memcpyBytesPerCycle`).
    pub memcpy_bytes_per_cycle: u32,
    /// Cycles of one internal sync across all tiles.
    pub sync_cycles: u32,
    /// Host link bandwidth per direction, bytes per second.
    pub host_link_bytes_per_second: u64,
    /// Fixed cycles of one host stream copy (host handshake and DMA set-up).
    pub stream_copy_latency_cycles: u32,
    /// The SLIC ("slim convolution") instructions (`f16v4sisoslic`, …) and with them
    /// PopLibs' `ConvPartial1xNSLIC` vertex, which the convolution planner then offers.
    #[serde(default)]
    pub slic: bool,
}

impl Target {
    /// The Mk2 IPU (Colossus GC200).
    pub fn mk2() -> Target {
        Target {
            name: "mk2".into(),
            // ipu-hardware.md §1: 1472 tiles (S2, S3).
            tiles: 1472,
            // ipu-hardware.md §1: "≈624 KiB"; 624 is not found in a primary source (S2 gives
            // "600KB (1sf)", the PopVision summary shows 624 kB); 1472 x 624 KiB = 897 MiB
            // matches the quoted "900MB".
            bytes_per_tile: 624 * 1024,
            // ipu-hardware.md §1: 1.325 GHz (S1).
            clock_hz: 1_325_000_000,
            // ipu-hardware.md §1, §3.4: 6 workers + 1 supervisor (C1 CTXT_WORKERS=6).
            worker_contexts: 6,
            // ipu-hardware.md §1: 64-bit data path (P1 reduction estimators, A1 ld64).
            vector_bytes: 8,
            // ipu-hardware.md §1, §3.3: 16 conv units for half/half on ipu2 (P1
            // conv_partial_1x1_half_float_8_and_half_half_h16.S), 16 input channels per pass
            // ("AMP would like 16 input channels per group", P1 ConvPlan.hpp), 4 worker cycles
            // per position: 16 x 16 / 4 = 64 MACs per tile cycle, 1472 x 1.325 GHz x 2 x 64
            // = 250 TFLOPS (matches S3).
            amp_fp16_fp16: Amp {
                input_channels: 16,
                output_channels: 16,
                worker_cycles_per_position: 4,
            },
            // ipu-hardware.md §1: 8 conv units for half inputs with float partials on ipu2
            // (P1 poplinCycleEstimators.cpp L1164-1196): 16 x 8 / 4 = 32 MACs per cycle.
            amp_fp16_fp32: Amp {
                input_channels: 16,
                output_channels: 8,
                worker_cycles_per_position: 4,
            },
            // ipu-hardware.md §1: fp32 is 16 MACs per tile cycle (62.5 TFLOPS, S3): 16 conv
            // units (P1 FLOAT/FLOAT 16 units), 8 input channels, 8 worker cycles per position.
            amp_fp32_fp32: Amp {
                input_channels: 8,
                output_channels: 16,
                worker_cycles_per_position: 8,
            },
            // ipu-hardware.md §3.3: coefficients load at 8 bytes per cycle with 64-bit loads
            // (use128BitConvUnitLoad defaults to false, P1 MatMul.hpp L50).
            amp_weight_load_bytes_per_cycle: 8,
            // ipu-hardware.md §1: 32 bits per cycle per tile (C1 TEXCH_DATA_WIDTH, Mk1); the
            // Mk2 value is not found, 4 B/cycle x 1472 x 1.325 GHz = 7.8 TB/s matches "8 TB/s"
            // (S2).
            exchange_bytes_per_cycle: 4,
            // [derived] from the exchange network delays of ipu-hardware.md §1 (C1):
            // BNET_SENDTOEXCHOUTDLY 8 + OPPOSIDE2COLBASEDLY 19 + COLBASE2OPPOSIDEDLY 17 +
            // MINEXCHIN2LDDLY 2 = 46 cycles for the longest path.
            exchange_latency_cycles: 46,
            // Not found: per-message exchange code cost. Chosen: 3 cycles (set the incoming
            // mux, post the send/receive pointer, loop decision).
            exchange_message_cycles: 3,
            // Not found (IPUModel `memcpyBytesPerCycle` default unknown). Chosen: one 64-bit
            // store per cycle (A1 ld2xst64pace: one 64-bit store per bundle).
            memcpy_bytes_per_cycle: 8,
            // ipu-hardware.md §5.3: PopLibs planners use `syncCycles = 90` (P1
            // popnn/CTCLossPlan.cpp L351); the measured sync latency is not found.
            sync_cycles: 90,
            // ipu-hardware.md §1: PCIe Gen4 x16 "64 GB/s" (S2), i.e. 32 GB/s per direction
            // [derived].
            host_link_bytes_per_second: 32_000_000_000,
            // Not found: host round trip of a stream copy. Chosen: 1,000 cycles (~0.75 us at
            // 1.325 GHz, a typical PCIe doorbell + DMA descriptor round trip).
            stream_copy_latency_cycles: 1000,
            // ipu-hardware.md §3.3 lists the SLIC instructions and §8 the SLIC vertex "on
            // Mk2" (PopLibs' SLIC kernels need the Mk2's 4-deep conv-unit chains,
            // `getConvVertexSLICCandidates`); the CNN issue asks for "SLIC for suitable FP16
            // cases on Mk2".
            slic: true,
        }
    }

    /// The Mk1 IPU (Colossus GC2).
    pub fn mk1() -> Target {
        let fp16 = Amp {
            input_channels: 16,
            output_channels: 8,
            worker_cycles_per_position: 4,
        };
        Target {
            name: "mk1".into(),
            // ipu-hardware.md §1: 1216 tiles (J2, C1 IPU_TILE_INSTANCES_WITH_REPAIR = 0x4c0).
            tiles: 1216,
            // ipu-hardware.md §1: 256 KiB (J2, C1 TMEM_SIZE_WORDS = 0x10000 words).
            bytes_per_tile: 256 * 1024,
            // ipu-hardware.md §1: 1.6 GHz, implied by 124.5 TF = 1216 x 1.6 GHz x 64 flop.
            clock_hz: 1_600_000_000,
            // ipu-hardware.md §1: 6 workers (C1 CTXT_WORKERS=6).
            worker_contexts: 6,
            // ipu-hardware.md §1: 8 AMP units per set, 1 set (C1): 8 conv units; 16 input
            // channels, 4 worker cycles: 32 MACs per cycle for fp16 with either partials type
            // (124.5 TFLOPS, J2).
            amp_fp16_fp16: fp16,
            amp_fp16_fp32: fp16,
            // ipu-hardware.md §1: fp32 8 MACs per cycle (31.1 TFLOPS, J2): 8 conv units, 8
            // input channels, 8 worker cycles per position.
            amp_fp32_fp32: Amp {
                input_channels: 8,
                output_channels: 8,
                worker_cycles_per_position: 8,
            },
            // ipu-hardware.md §1: the C2 card's PCIe bandwidth is not found. Chosen: PCIe
            // Gen3 x16, 16 GB/s per direction.
            host_link_bytes_per_second: 16_000_000_000,
            // The SLIC vertex is the Mk2's (see mk2); Mk1 convolutions use the AMP and MAC
            // vertices.
            slic: false,
            // The rest as mk2, from the same sources: the 64-bit data path, 8 B/cycle weight
            // loads, TEXCH_DATA_WIDTH = 32 bits (C1, an ipu1 value), the exchange latency
            // derived from the same C1 (ipu1) network delays, and the chosen message,
            // memcpy, sync and stream-copy costs.
            ..Target::mk2()
        }
    }

    /// A preset by name (`mk2`, `mk1`).
    pub fn preset(name: &str) -> Option<Target> {
        match name {
            "mk2" => Some(Target::mk2()),
            "mk1" => Some(Target::mk1()),
            _ => None,
        }
    }

    /// A preset name or the path of a target RON file.
    pub fn from_name_or_file(spec: &str) -> Result<Target, CompileError> {
        match Target::preset(spec) {
            Some(t) => Ok(t),
            None => Target::load(Path::new(spec)),
        }
    }

    /// Reads a target file: a preset `base` (default `mk2`) with any field overridden.
    pub fn load(path: &Path) -> Result<Target, CompileError> {
        let text = std::fs::read_to_string(path).map_err(|e| CompileError::TargetFile {
            path: path.display().to_string(),
            line: 0,
            column: 0,
            message: format!("cannot read target file: {e}"),
        })?;
        Target::parse(&text, &path.display().to_string())
    }

    /// Parses target RON text; `source` names it in errors.
    pub fn parse(text: &str, source: &str) -> Result<Target, CompileError> {
        let options = ron::Options::default()
            .with_default_extension(ron::extensions::Extensions::IMPLICIT_SOME);
        let file: TargetFile = options
            .from_str(text)
            .map_err(|e: ron::error::SpannedError| CompileError::TargetFile {
                path: source.to_string(),
                line: e.span.start.line,
                column: e.span.start.col,
                message: e.code.to_string(),
            })?;
        file.into_target(source)
    }

    /// Checks that every figure is usable; errors name the field.
    ///
    /// Every figure is bounded so that no cycle, byte or time figure computed from it can
    /// overflow a `u64` on its own (the sums over a program are saturating, and a saturated
    /// total is an error): tiles `1..=2^20`; bytes per tile `1024..=2^30`; clock
    /// `1..=2^40` Hz; AMP channels `1..=2^12` and worker cycles per position `1..=2^16`;
    /// bytes per cycle `1..=2^20`; latencies, message and sync cycles `0..=2^24`; host link
    /// `2^10..=2^50` bytes per second.
    pub fn validate(&self) -> Result<(), CompileError> {
        let bad = |field: &str, message: &str| {
            Err(CompileError::Target {
                source_name: Some(self.name.clone()),
                field: field.to_string(),
                message: message.to_string(),
            })
        };
        if self.tiles == 0 || self.tiles > 1 << 20 {
            return bad("tiles", "must be between 1 and 1048576");
        }
        if self.bytes_per_tile < 1024 || self.bytes_per_tile > 1 << 30 {
            return bad(
                "bytes_per_tile",
                "must be between 1024 and 1073741824 (2^30)",
            );
        }
        if self.clock_hz == 0 || self.clock_hz > 1 << 40 {
            return bad("clock_hz", "must be between 1 and 1099511627776 (2^40)");
        }
        if self.worker_contexts == 0 || self.worker_contexts > 16 {
            return bad("worker_contexts", "must be between 1 and 16");
        }
        if !matches!(self.vector_bytes, 4 | 8 | 16) {
            return bad("vector_bytes", "must be 4, 8 or 16");
        }
        for (field, amp) in [
            ("amp_fp16_fp16", &self.amp_fp16_fp16),
            ("amp_fp16_fp32", &self.amp_fp16_fp32),
            ("amp_fp32_fp32", &self.amp_fp32_fp32),
        ] {
            if amp.input_channels == 0
                || amp.output_channels == 0
                || amp.worker_cycles_per_position == 0
            {
                return bad(field, "channels and cycles must be positive");
            }
            if amp.input_channels > 1 << 12
                || amp.output_channels > 1 << 12
                || amp.worker_cycles_per_position > 1 << 16
            {
                return bad(
                    field,
                    "channels must be at most 4096 (2^12) and cycles at most 65536 (2^16)",
                );
            }
        }
        for (field, v) in [
            (
                "amp_weight_load_bytes_per_cycle",
                self.amp_weight_load_bytes_per_cycle,
            ),
            ("exchange_bytes_per_cycle", self.exchange_bytes_per_cycle),
            ("memcpy_bytes_per_cycle", self.memcpy_bytes_per_cycle),
        ] {
            if v == 0 {
                return bad(field, "must be positive");
            }
            if v > 1 << 20 {
                return bad(field, "must be at most 1048576 (2^20)");
            }
        }
        for (field, v) in [
            ("exchange_latency_cycles", self.exchange_latency_cycles),
            ("exchange_message_cycles", self.exchange_message_cycles),
            ("sync_cycles", self.sync_cycles),
            (
                "stream_copy_latency_cycles",
                self.stream_copy_latency_cycles,
            ),
        ] {
            if v > 1 << 24 {
                return bad(field, "must be at most 16777216 (2^24)");
            }
        }
        if self.host_link_bytes_per_second < 1 << 10 || self.host_link_bytes_per_second > 1 << 50 {
            return bad(
                "host_link_bytes_per_second",
                "must be between 1024 (2^10) and 1125899906842624 (2^50)",
            );
        }
        Ok(())
    }

    /// The AMP geometry for inputs of `input` type accumulating in `partials`.
    pub fn amp(&self, input: DType, partials: DType) -> &Amp {
        match (input, partials) {
            (DType::F16, DType::F16) => &self.amp_fp16_fp16,
            (DType::F16, _) => &self.amp_fp16_fp32,
            _ => &self.amp_fp32_fp32,
        }
    }

    /// Elements of `dtype` in one natural vector (4 halves, 2 floats on a 64-bit path).
    pub fn vector_width(&self, dtype: DType) -> u64 {
        (self.vector_bytes as u64 / dtype.size_bytes() as u64).max(1)
    }

    /// Total SRAM of the chip in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.tiles as u64 * self.bytes_per_tile as u64
    }

    /// Cycles to move `bytes` over the host link (without the fixed latency).
    pub fn host_transfer_cycles(&self, bytes: u64) -> u64 {
        let num = bytes as u128 * self.clock_hz as u128;
        let den = self.host_link_bytes_per_second.max(1) as u128;
        u64::try_from(num.div_ceil(den)).unwrap_or(u64::MAX)
    }
}

/// A target file: a base preset and overrides of any field.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetFile {
    base: Option<String>,
    name: Option<String>,
    tiles: Option<u32>,
    bytes_per_tile: Option<u32>,
    clock_hz: Option<u64>,
    worker_contexts: Option<u32>,
    vector_bytes: Option<u32>,
    amp_fp16_fp16: Option<Amp>,
    amp_fp16_fp32: Option<Amp>,
    amp_fp32_fp32: Option<Amp>,
    amp_weight_load_bytes_per_cycle: Option<u32>,
    exchange_bytes_per_cycle: Option<u32>,
    exchange_latency_cycles: Option<u32>,
    exchange_message_cycles: Option<u32>,
    memcpy_bytes_per_cycle: Option<u32>,
    sync_cycles: Option<u32>,
    host_link_bytes_per_second: Option<u64>,
    stream_copy_latency_cycles: Option<u32>,
    slic: Option<bool>,
}

impl TargetFile {
    fn into_target(self, source: &str) -> Result<Target, CompileError> {
        let base_name = self.base.clone().unwrap_or_else(|| "mk2".to_string());
        let mut t = Target::preset(&base_name).ok_or_else(|| CompileError::Target {
            source_name: Some(source.to_string()),
            field: "base".into(),
            message: format!("unknown preset '{base_name}' (expected mk2 or mk1)"),
        })?;
        t.name = self.name.unwrap_or_else(|| {
            let stem = Path::new(source)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "custom".into());
            format!("{base_name}:{stem}")
        });
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = self.$f { t.$f = v; } )* };
        }
        set!(
            tiles,
            bytes_per_tile,
            clock_hz,
            worker_contexts,
            vector_bytes,
            amp_fp16_fp16,
            amp_fp16_fp32,
            amp_fp32_fp32,
            amp_weight_load_bytes_per_cycle,
            exchange_bytes_per_cycle,
            exchange_latency_cycles,
            exchange_message_cycles,
            memcpy_bytes_per_cycle,
            sync_cycles,
            host_link_bytes_per_second,
            stream_copy_latency_cycles,
            slic
        );
        t.validate().map_err(|e| match e {
            CompileError::Target { field, message, .. } => CompileError::Target {
                source_name: Some(source.to_string()),
                field,
                message,
            },
            other => other,
        })?;
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preset_amp_throughput_matches_the_chip_figures() {
        // ipu-hardware.md §1: mk2 64/32/16, mk1 32/32/8 MACs per tile per cycle.
        let mk2 = Target::mk2();
        assert_eq!(mk2.amp(DType::F16, DType::F16).macs_per_cycle(), 64);
        assert_eq!(mk2.amp(DType::F16, DType::F32).macs_per_cycle(), 32);
        assert_eq!(mk2.amp(DType::F32, DType::F32).macs_per_cycle(), 16);
        let mk1 = Target::mk1();
        assert_eq!(mk1.amp(DType::F16, DType::F16).macs_per_cycle(), 32);
        assert_eq!(mk1.amp(DType::F16, DType::F32).macs_per_cycle(), 32);
        assert_eq!(mk1.amp(DType::F32, DType::F32).macs_per_cycle(), 8);
        // Peak check formula of ipu-hardware.md §1: tiles x f x 2 x MACs.
        let peak = mk2.tiles as f64 * mk2.clock_hz as f64 * 2.0 * 64.0;
        assert!((peak / 1e12 - 249.65).abs() < 0.1);
        mk2.validate().unwrap();
        mk1.validate().unwrap();
    }

    #[test]
    fn target_file_overrides_any_field() {
        let t = Target::parse("(base: \"mk1\", tiles: 4, sync_cycles: 10)", "small.ron").unwrap();
        assert_eq!(t.tiles, 4);
        assert_eq!(t.sync_cycles, 10);
        assert_eq!(t.bytes_per_tile, 256 * 1024);
        assert_eq!(t.name, "mk1:small");
        let t = Target::parse(
            "(tiles: 16, amp_fp16_fp16: (input_channels: 16, output_channels: 8, worker_cycles_per_position: 4))",
            "x.ron",
        )
        .unwrap();
        assert_eq!(t.clock_hz, 1_325_000_000);
        assert_eq!(t.amp_fp16_fp16.macs_per_cycle(), 32);
        // The SLIC follows the base preset unless the file sets it.
        assert!(t.slic);
        assert!(!Target::parse("(base: \"mk1\")", "x.ron").unwrap().slic);
        assert!(!Target::parse("(slic: false)", "x.ron").unwrap().slic);
    }

    #[test]
    fn target_file_errors_name_line_and_field() {
        let e = Target::parse("(tiles: 4,\n  tilez: 5)", "t.ron").unwrap_err();
        match e {
            CompileError::TargetFile { line, .. } => assert_eq!(line, 2),
            other => panic!("unexpected {other:?}"),
        }
        let e = Target::parse("(tiles: 0)", "t.ron").unwrap_err();
        assert!(e.to_string().contains("'tiles'"), "{e}");
        let e = Target::parse("(base: \"mk3\")", "t.ron").unwrap_err();
        assert!(e.to_string().contains("mk3"), "{e}");
        // The SLIC flag is a boolean, reported at its line.
        let e = Target::parse("(base: \"mk2\",\n  slic: 3)", "t.ron").unwrap_err();
        match e {
            CompileError::TargetFile { line, message, .. } => {
                assert_eq!(line, 2);
                assert!(message.contains("boolean"), "{message}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

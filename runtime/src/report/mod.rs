//! The run report: the compile report's JSON contract extended with what executing the
//! program measured, its readable text form, and the comparison of two reports ([`diff`]).
//!
//! # The JSON contract (`ipusim run --json`, field `report`)
//!
//! Every field of [`CompileReport`] (one run's static estimate: `total_cycles`,
//! `categories`, `compute_sets`, `memory`, ...; names are a contract — extend, never rename),
//! plus:
//!
//! | field | meaning |
//! |---|---|
//! | `runs` | device runs executed (one run = the program tree once: `device_iterations` loop iterations) |
//! | `stream_bytes` | `{"rx": int, "tx": int}`: host-to-device and device-to-host bytes **per run**, as PopVision's "StreamCopy (Rx/Tx)" |
//! | `mode` | `"training"` (the training step), `"inference"` (the forward graph of a training program, `--inference`) or `"forward"` (a program without a training spec, run as written) |
//! | `steps` | loop iterations executed over all runs (weight updates when training) |
//! | `micro_batches` | micro-batches executed over all runs (`steps × gradient_accumulation`) |
//! | `seed`, `fp` | the run seed and floating-point configuration (`sr`, `nanoo`, `exceptions`) |
//! | `flags` | `{"OFLO", "DIV0", "INV"}`: flags raised on any tile during any run |
//! | `host_io` | the host I/O model: per stream `bytes_per_micro_batch`, `copies_per_run`, `bytes_per_run`, `cycles_per_run`, `host_buffer_bytes`; per IPU `rx`/`tx`; `prefetch_depth` |
//! | `executed` | measured over all runs: `total_cycles`, `categories`, `cycles_per_run` (one entry per run), `seconds` at the target clock, `stream_bytes` (all runs) |
//! | `infeeds` | each infeed stream and its source |
//! | `outfeeds` | each outfeed stream, its mode and the entries it sent |
//! | `wall_seconds` | host time spent running (not deterministic; everything else is) |

pub mod diff;
pub mod html;
mod text;

use crate::io_model::HostIoModel;
use ipusim_compiler::report::Categories;
use ipusim_compiler::CompileReport;
use serde::{Deserialize, Serialize};

/// Bytes over the host link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamBytes {
    /// Host to device.
    pub rx: u64,
    /// Device to host.
    pub tx: u64,
}

/// Floating-point flags as the JSON contract names them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flags {
    /// Overflow.
    #[serde(rename = "OFLO")]
    pub oflo: bool,
    /// Division by zero.
    #[serde(rename = "DIV0")]
    pub div0: bool,
    /// Invalid operation.
    #[serde(rename = "INV")]
    pub inv: bool,
}

/// The floating-point configuration of the runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FpReport {
    /// `off`, `on` or `replica-identical`.
    pub sr: String,
    /// NaN on FP16 overflow.
    pub nanoo: bool,
    /// Exceptions that trap (`inv`, `div0`, `oflo`).
    pub exceptions: Vec<String>,
}

/// What executing measured, over all runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Executed {
    /// Cycles of all runs.
    pub total_cycles: u64,
    /// Cycles per PopVision category over all runs.
    pub categories: Categories,
    /// Cycles of each run.
    pub cycles_per_run: Vec<u64>,
    /// `total_cycles` at the target's clock.
    pub seconds: f64,
    /// Bytes over the host link in all runs.
    pub stream_bytes: StreamBytes,
}

impl Default for Executed {
    fn default() -> Executed {
        Executed {
            total_cycles: 0,
            categories: Categories {
                on_tile_execute: 0,
                do_exchange: 0,
                sync: 0,
                stream_copy: 0,
            },
            cycles_per_run: Vec::new(),
            seconds: 0.0,
            stream_bytes: StreamBytes::default(),
        }
    }
}

/// An infeed stream and its source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InfeedReport {
    /// Stream name.
    pub stream: String,
    /// Where its data comes from.
    pub source: String,
}

/// An outfeed stream, its mode and its traffic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutfeedReport {
    /// Stream name.
    pub stream: String,
    /// `all`, `last`, `sum` or `every:N`.
    pub mode: String,
    /// Entries the device sent over all runs.
    pub entries: u64,
}

/// The run report (see the module docs for the contract).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// The compile report of the program run (one run's static estimate).
    #[serde(flatten)]
    pub compile: CompileReport,
    /// Device runs executed.
    pub runs: u64,
    /// Rx/Tx bytes per run.
    pub stream_bytes: StreamBytes,
    /// `training`, `inference` or `forward`.
    pub mode: String,
    /// Loop iterations executed (weight updates when training).
    pub steps: u64,
    /// Micro-batches executed.
    pub micro_batches: u64,
    /// The run seed.
    pub seed: u64,
    /// The floating-point configuration.
    pub fp: FpReport,
    /// Flags raised during the runs.
    pub flags: Flags,
    /// The host I/O model.
    pub host_io: HostIoModel,
    /// Measured over all runs.
    pub executed: Executed,
    /// Infeed sources.
    pub infeeds: Vec<InfeedReport>,
    /// Outfeed modes and traffic.
    pub outfeeds: Vec<OutfeedReport>,
    /// What the host found wrong with the data fed, a sentence each: labels outside their
    /// loss's classes ([`crate::labels`]). Absent when there is nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Host time spent running, in seconds (not deterministic).
    pub wall_seconds: f64,
}

impl RunReport {
    /// The readable report: the compile report, then the run and host I/O sections.
    pub fn to_text(&self) -> String {
        text::render(self)
    }
}

/// `bytes` in PopVision's units (`4.5 MB`, `768 B`, `51.8 kB`): binary multiples, as the
/// seed's figures are (64×3×64×64×2×3 bytes = 4.5 MB).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["kB", "MB", "GB", "TB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if v >= 100.0 {
        format!("{v:.0} {}", UNITS[unit])
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_print_as_popvision_does() {
        // reference/user-features.md §5: 4.5 MB, 12.0 MB, 768 B, 2.0 kB, 24.0 MB.
        assert_eq!(human_bytes(64 * 3 * 64 * 64 * 2 * 3), "4.5 MB");
        assert_eq!(human_bytes(64 * 3 * 64 * 64 * 2 * 8), "12.0 MB");
        assert_eq!(human_bytes(64 * 4 * 3), "768 B");
        assert_eq!(human_bytes(64 * 4 * 8), "2.0 kB");
        assert_eq!(human_bytes(64 * 3 * 64 * 64 * 32), "24.0 MB");
        assert_eq!(human_bytes(141 * 1024), "141 kB");
    }
}

//! What can stop the engine: a trapped floating-point exception (with the state dump an IPU
//! user reads), a host-side stream failure, an executable that does not fit or is
//! malformed, bad variable writes.

use crate::host::HostError;
use crate::init::InitError;
use crate::numerics::{FpCtl, FpSts};
use ipusim_exe::system::TileId;
use ipusim_ir::TensorType;
use serde::{Deserialize, Serialize};
use std::fmt;
use thiserror::Error;

/// An error of the engine.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum EngineError {
    /// A floating-point exception trapped (its exception was enabled in the `FpConfig`).
    #[error("{0}")]
    FpException(Box<FpExceptionDump>),
    /// The host side of a stream copy failed.
    #[error("{0}")]
    Host(#[from] HostError),
    /// The executable does not fit in tile memory (its memory plan says so).
    #[error(
        "the program does not fit in tile memory: {} tile(s) over the {capacity} bytes per tile (largest {max_tile_bytes} bytes, on tile {worst_tile})",
        tiles.len()
    )]
    OutOfMemory {
        /// Tiles over capacity.
        tiles: Vec<TileId>,
        /// The fullest tile's bytes.
        max_tile_bytes: u64,
        /// The fullest tile.
        worst_tile: TileId,
        /// Bytes per tile.
        capacity: u64,
    },
    /// The executable breaks the contract the engine relies on (a compiler bug or a
    /// hand-edited executable); the message names the compute set, tile, vertex or tensor.
    #[error("invalid executable: {0}")]
    Invalid(String),
    /// The executable breaks invariants of `ipusim_exe::verify` (every violation, each with
    /// its location).
    #[error("invalid executable: {} invariant(s) broken:\n{}", .0.len(), ipusim_exe::verify::render(.0))]
    Verify(Vec<ipusim_exe::verify::VerifierError>),
    /// A variable or constant could not be materialised.
    #[error("cannot materialise the initial value of '{tensor}': {source}")]
    Init {
        /// The tensor.
        tensor: String,
        /// Why.
        source: InitError,
    },
    /// No variable of that name.
    #[error("no variable named '{0}'")]
    UnknownVariable(String),
    /// A value of the wrong type for a variable.
    #[error("variable '{name}' is {expected}, the value written is {found}")]
    VariableType {
        /// The variable.
        name: String,
        /// Its type.
        expected: TensorType,
        /// The value's type.
        found: TensorType,
    },
    /// The host thread pool could not be built.
    #[error("cannot build a pool of {threads} host threads: {message}")]
    ThreadPool {
        /// Threads asked for.
        threads: usize,
        /// Why it failed.
        message: String,
    },
    /// An internal inconsistency (a bug in ipusim); never caused by user input that passed
    /// validation.
    #[error("internal error: {0}")]
    Internal(String),
}

impl EngineError {
    pub(crate) fn invalid(message: impl Into<String>) -> EngineError {
        EngineError::Invalid(message.into())
    }

    pub(crate) fn internal(message: impl Into<String>) -> EngineError {
        EngineError::Internal(message.into())
    }
}

impl From<crate::numerics::NumericsError> for EngineError {
    fn from(e: crate::numerics::NumericsError) -> EngineError {
        EngineError::internal(e.to_string())
    }
}

/// One value involved in a faulting operation, as the dump prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpValue {
    /// What it is (`a`, `b[3]`, `partial`, `result`, ...).
    pub name: String,
    /// The value and its bit pattern, e.g. `10000 (f16 0x70e2)`.
    pub value: String,
}

/// The state of a tile whose worker trapped a floating-point exception: what Poplar prints
/// when "tiles are in excepted state", with the vertex, codelet, compute set, `$FP_STS`,
/// the operands of the first faulting operation, and the cycle.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FpExceptionDump {
    /// The tile (the lowest-numbered tile that trapped in the compute set).
    pub tile: TileId,
    /// The worker context that ran the vertex.
    pub worker: u8,
    /// Index of the vertex in the tile's work of the compute set (groups in order, vertices
    /// in order).
    pub vertex: usize,
    /// Index of the vertex group (one codelet instance) on the tile.
    pub group: usize,
    /// The codelet with its type parameters, e.g. `Binary<Mul,f16>`.
    pub codelet: String,
    /// The compute set's name.
    pub compute_set: String,
    /// The compute set's id.
    pub compute_set_id: u32,
    /// The worker's `$FP_STS` at the fault (reset when the vertex started).
    pub fp_sts: FpSts,
    /// The worker's `$FP_CTL`.
    pub fp_ctl: FpCtl,
    /// The flags that trapped (`fp_sts` masked by the enabled exceptions).
    pub trapped: FpSts,
    /// The element of the vertex's output being computed (its index in the output operand),
    /// when known.
    pub element: Option<u64>,
    /// The values of the faulting operation: its inputs, then `result`.
    pub operands: Vec<DumpValue>,
    /// The device cycle at which the faulting vertex group started on the tile.
    pub cycle: u64,
    /// The device cycle at which the compute set started.
    pub compute_set_cycle: u64,
}

/// `OFLO=0x1 DIV0=0x0` style fields of a register, in the order given.
fn fields(f: &mut fmt::Formatter<'_>, bits: &[(&str, bool)]) -> fmt::Result {
    for (i, (name, set)) in bits.iter().enumerate() {
        if i > 0 {
            f.write_str(" ")?;
        }
        write!(f, "{name}=0x{}", u8::from(*set))?;
    }
    Ok(())
}

impl fmt::Display for FpExceptionDump {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.trapped.names().collect();
        writeln!(
            f,
            "floating-point exception ({}): tiles in excepted state [ IPU:0 Tile:{} ]",
            names.join(", "),
            self.tile
        )?;
        writeln!(
            f,
            "  compute set:  '{}' (id {}), started at cycle {}",
            self.compute_set, self.compute_set_id, self.compute_set_cycle
        )?;
        writeln!(
            f,
            "  vertex:       {} (group {}) {} on worker {}",
            self.vertex, self.group, self.codelet, self.worker
        )?;
        writeln!(f, "  cycle:        {}", self.cycle)?;
        f.write_str("  $FP_STS:      ")?;
        let s = self.fp_sts;
        fields(
            f,
            &[
                ("OFLO", s.contains(FpSts::OFLO)),
                ("DIV0", s.contains(FpSts::DIV0)),
                ("INV", s.contains(FpSts::INV)),
            ],
        )?;
        f.write_str("\n  $FP_CTL:      ")?;
        let c = self.fp_ctl;
        fields(
            f,
            &[
                ("OFLO", c.contains(FpCtl::OFLO)),
                ("DIV0", c.contains(FpCtl::DIV0)),
                ("INV", c.contains(FpCtl::INV)),
                ("ESR", c.contains(FpCtl::ESR)),
                ("NANOO", c.contains(FpCtl::NANOO)),
            ],
        )?;
        f.write_str("\n")?;
        if let Some(e) = self.element {
            writeln!(f, "  element:      out[{e}]")?;
        }
        for v in &self.operands {
            writeln!(f, "  {:<13} {}", format!("{}:", v.name), v.value)?;
        }
        Ok(())
    }
}

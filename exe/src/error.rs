//! Errors of the compiler: every variant names the node, op, tile, tensor or file at fault.
//!
//! Running out of tile memory is *not* an error: the memory plan of the returned
//! [`crate::Executable`] carries `oom`, the worst tiles and the largest tensors on them.

use crate::ids::TileId;
use std::fmt;
use thiserror::Error;

/// An error compiling a graph or loading a target.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum CompileError {
    /// The graph is not well formed (a cycle, an unknown input).
    #[error("invalid graph: {0}")]
    Graph(#[from] ipusim_ir::IrError),
    /// This compiler cannot lower an op in this form.
    #[error("node '{node}' ({op}): cannot be lowered: {reason}")]
    Unsupported {
        node: String,
        op: &'static str,
        reason: String,
    },
    /// A Step-phase node reads a value produced in the Update phase (only Variables may carry
    /// values from one phase to the other).
    #[error("node '{node}' (phase Step) reads '{input}' (phase Update): only Variables may carry values from the Update phase back into the Step phase")]
    PhaseOrder { node: String, input: String },
    /// Two Assigns of the same phase write one variable.
    #[error("variable '{variable}' is assigned twice in the {phase} phase (by '{first}' and '{second}')")]
    DuplicateAssign {
        variable: String,
        phase: &'static str,
        first: String,
        second: String,
    },
    /// A tensor does not fit the compiler's index types (2^32 bytes per tile).
    #[error("node '{node}': {what}")]
    TooLarge { node: String, what: String },
    /// A node's value alone needs more bytes than the tile memory of a whole IPU: it cannot
    /// fit however it is laid out. The compile stops at the node, before laying out a value
    /// whose layout the host would hold piece by piece (out of memory, without a memory
    /// plan to report).
    #[error(
        "node '{node}': out of memory: its value ({ty}) needs {bytes} bytes, more than the \
         {capacity} bytes of tile memory of one IPU ({tiles} tiles of {per_tile} bytes)"
    )]
    OutOfMemory {
        node: String,
        ty: String,
        bytes: u64,
        capacity: u64,
        tiles: u32,
        per_tile: u32,
    },
    /// An option is out of range.
    #[error("invalid compile option {option}: {message}")]
    Option {
        option: &'static str,
        message: String,
    },
    /// A target description is invalid.
    #[error("invalid target{}: field '{field}': {message}", .source_name.as_deref().map(|s| format!(" '{s}'")).unwrap_or_default())]
    Target {
        source_name: Option<String>,
        field: String,
        message: String,
    },
    /// A target file could not be read or parsed.
    #[error("{path}:{line}:{column}: {message}")]
    TargetFile {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// The verifier found a broken invariant between two passes (a compiler bug, reported
    /// with the tensor/tile/step at fault rather than a panic).
    #[error("verifier after {pass}: {message}")]
    Verify { pass: &'static str, message: String },
    /// The finished executable breaks invariants of `crate::verify` (every violation).
    #[error("the executable breaks {} invariant(s):\n{}", .0.len(), render(.0))]
    Invalid(Vec<VerifierError>),
}

impl CompileError {
    /// Whether the program cannot fit in tile memory: a value larger than an IPU's memory
    /// ([`CompileError::OutOfMemory`]) or a tile's share of one beyond 32-bit tile addresses
    /// ([`CompileError::TooLarge`], more than any tile holds). The command line exits with its
    /// out-of-memory code for these, as for a memory plan that does not fit.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(
            self,
            CompileError::OutOfMemory { .. } | CompileError::TooLarge { .. }
        )
    }
}

/// Where a violation is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// The executable as a whole.
    Executable,
    /// A tensor.
    Tensor { tensor: String },
    /// A vertex: its compute set, tile, group and index in the group.
    Vertex {
        compute_set: String,
        tile: TileId,
        group: usize,
        vertex: usize,
    },
    /// A copy of an exchange.
    Copy { exchange: String, copy: usize },
    /// A host stream.
    Stream { stream: String },
    /// A program step (index into `Executable::steps`) or node of the program tree.
    Step { step: usize },
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Executable => write!(f, "executable"),
            Location::Tensor { tensor } => write!(f, "tensor '{tensor}'"),
            Location::Vertex {
                compute_set,
                tile,
                group,
                vertex,
            } => write!(
                f,
                "compute set '{compute_set}', tile {tile}, group {group}, vertex {vertex}"
            ),
            Location::Copy { exchange, copy } => write!(f, "exchange '{exchange}', copy {copy}"),
            Location::Stream { stream } => write!(f, "stream '{stream}'"),
            Location::Step { step } => write!(f, "program step {step}"),
        }
    }
}

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifierError {
    /// The invariant's number in the module docs.
    pub invariant: u8,
    /// Where.
    pub location: Location,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for VerifierError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} (invariant {})",
            self.location, self.message, self.invariant
        )
    }
}

/// The violations as one message, one per line (for error types that carry text).
pub fn render(errors: &[VerifierError]) -> String {
    errors
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

//! Errors of the compiler: every variant names the node, op, tile, tensor or file at fault.
//!
//! Running out of tile memory is *not* an error: the memory plan of the returned
//! [`crate::Executable`] carries `oom`, the worst tiles and the largest tensors on them.

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
}

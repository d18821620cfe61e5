//! Errors of the reference interpreter: each names the node, stream or variable at fault.

use crate::init::InitError;
use crate::numerics::FpSts;
use crate::tensor::TensorError;
use ipusim_ir::{IrError, TensorType};
use thiserror::Error;

/// The names of raised flags, `INV|OFLO` style.
pub fn flag_names(flags: FpSts) -> String {
    let names: Vec<&str> = flags.names().collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join("|")
    }
}

/// An error building or running the reference interpreter.
#[derive(Debug, Error)]
pub enum InterpError {
    /// The graph breaks a rule of step execution (phases, assignments, streams).
    #[error("graph cannot be executed: {0}")]
    Graph(String),
    /// The graph itself is invalid.
    #[error(transparent)]
    Ir(#[from] IrError),
    /// A variable's or constant's initial value cannot be materialised.
    #[error("node '{node}': {source}")]
    Init {
        node: String,
        #[source]
        source: InitError,
    },
    /// A stream of the graph has no infeed tensor.
    #[error("missing infeed for stream '{stream}' (node '{node}')")]
    MissingInfeed { stream: String, node: String },
    /// An infeed tensor names no stream of the graph.
    #[error("unknown infeed stream '{stream}' (the graph's streams: {known})")]
    UnknownInfeed { stream: String, known: String },
    /// An infeed tensor has the wrong type.
    #[error("infeed '{stream}': expected {expected}, got {found}")]
    InfeedType {
        stream: String,
        expected: TensorType,
        found: TensorType,
    },
    /// An op raised a flag whose exception is enabled: execution stopped at this node.
    #[error("floating-point exception at node '{node}' ({op}): {} raised ($FP_STS = {:#x})", flag_names(*.flags), .flags.bits())]
    FpException {
        node: String,
        op: &'static str,
        flags: FpSts,
    },
    /// An op could not be evaluated on its inputs.
    #[error("node '{node}' ({op}): {message}")]
    Eval {
        node: String,
        op: &'static str,
        message: String,
    },
    /// No variable has this name.
    #[error("no variable named '{0}'")]
    UnknownVariable(String),
    /// A value for a variable has the wrong type.
    #[error("variable '{name}': expected {expected}, got {found}")]
    VariableType {
        name: String,
        expected: TensorType,
        found: TensorType,
    },
    /// A malformed tensor was supplied.
    #[error(transparent)]
    Tensor(#[from] TensorError),
    /// A step needs at least one micro-batch.
    #[error("a step needs at least one micro-batch of infeeds, got none")]
    NoMicroBatches,
}

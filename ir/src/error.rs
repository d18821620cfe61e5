//! Errors of the graph IR: every variant names the node, the op and the types or shapes at
//! fault, so a message can be acted on without a debugger.

use crate::dtype::TensorType;
use thiserror::Error;

/// One input of a node, as named in an error: its position, its node's name, its type.
#[derive(Clone, Debug, PartialEq)]
pub struct Operand {
    /// Input slot.
    pub index: usize,
    /// Name of the node that produces it.
    pub name: String,
    /// Its type.
    pub ty: TensorType,
}

/// An error building, validating or transforming a graph.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum IrError {
    /// TensorFlow-style dtype mismatch between two inputs of one op.
    #[error("node '{node}' ({op}): input {} '{}' has type {} that does not match type {} of input {} '{}' (insert an explicit Cast)", .b.index, .b.name, .b.ty, .a.ty, .a.index, .a.name)]
    DTypeMismatch {
        node: String,
        op: &'static str,
        a: Box<Operand>,
        b: Box<Operand>,
    },
    /// An input's dtype is not accepted by the op.
    #[error("node '{node}' ({op}): input {} '{}' has type {}, expected {expected}", .input.index, .input.name, .input.ty)]
    BadDType {
        node: String,
        op: &'static str,
        input: Box<Operand>,
        expected: &'static str,
    },
    /// Two inputs' shapes do not fit together.
    #[error("node '{node}' ({op}): shapes of input {} '{}' {} and input {} '{}' {} are incompatible: {why}", .a.index, .a.name, .a.ty, .b.index, .b.name, .b.ty)]
    ShapeMismatch {
        node: String,
        op: &'static str,
        a: Box<Operand>,
        b: Box<Operand>,
        why: String,
    },
    /// Wrong number of inputs.
    #[error("node '{node}' ({op}) takes {expected} inputs, got {found}")]
    Arity {
        node: String,
        op: &'static str,
        expected: String,
        found: usize,
    },
    /// Any other invalid use of an op (bad attribute, bad input shape).
    #[error("node '{node}' ({op}): {message}")]
    Invalid {
        node: String,
        op: &'static str,
        message: String,
    },
    /// Two nodes share a name.
    #[error("duplicate node name '{0}'")]
    DuplicateName(String),
    /// A node refers to an input that does not exist.
    #[error("node '{node}' refers to unknown input '{input}'")]
    UnknownInput { node: String, input: String },
    /// Two streams share a name.
    #[error("duplicate stream '{stream}': used by nodes '{first}' and '{second}'")]
    DuplicateStream {
        stream: String,
        first: String,
        second: String,
    },
    /// The graph has a cycle through these nodes.
    #[error("cycle through nodes {}", .0.join(" -> "))]
    Cycle(Vec<String>),
    /// A program-level fault (training spec, feeds) that is not tied to one op.
    #[error("{0}")]
    Program(String),
    /// A program-level fault at one field of the program, named by its path as written in
    /// the text format (`training.optimizer.learning_rate`, `infeeds[1].source.columns`,
    /// `device_iterations`), so that the text layer can point at the line that holds it.
    #[error("{field}: {message}")]
    Field { field: String, message: String },
}

/// A word that is not one of the values an option takes (a precision policy, an outfeed
/// mode, a partials type): what was given and what is accepted.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("unknown {what} '{value}' (expected {expected})")]
pub struct UnknownValue {
    /// What the word names (`precision`, `outfeed mode`, ...).
    pub what: &'static str,
    /// The word given.
    pub value: String,
    /// The values accepted, in words.
    pub expected: &'static str,
}

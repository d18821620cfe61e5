//! [`InferFault`]: why an op cannot be applied to its inputs — the one error type of shape
//! and dtype inference, shared by [`crate::infer`] and the op families' own inference
//! ([`crate::conv`], [`crate::norm`]) without either importing the other.

/// Why an op cannot be applied to its inputs.
#[derive(Clone, Debug, PartialEq)]
pub enum InferFault {
    /// Wrong number of inputs.
    Arity { expected: String, found: usize },
    /// Inputs `a` and `b` must have the same dtype.
    DTypeMismatch { a: usize, b: usize },
    /// Input `input` has a dtype the op does not accept; `expected` describes what it accepts.
    BadDType {
        input: usize,
        expected: &'static str,
    },
    /// Inputs `a` and `b` have shapes that do not fit together.
    ShapeMismatch { a: usize, b: usize, why: String },
    /// An input's shape or an attribute is invalid for this op.
    Invalid(String),
}

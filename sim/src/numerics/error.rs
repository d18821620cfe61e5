//! Errors of the numerics layer: kernel arguments that do not fit together, and malformed
//! calculator expressions ([`super::expr::ExprError`]).

use thiserror::Error;

use super::expr::ExprError;

/// An error from a numerics kernel or the expression calculator.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum NumericsError {
    /// A slice argument of a kernel has the wrong number of elements.
    #[error("{kernel}: `{operand}` has {found} elements, expected {expected}")]
    Length {
        /// The kernel called.
        kernel: &'static str,
        /// The argument at fault.
        operand: &'static str,
        /// The length the other arguments imply.
        expected: usize,
        /// The length passed.
        found: usize,
    },
    /// An AMP kernel was asked for chunks of zero elements.
    #[error("{kernel}: the reduction chunk must be at least 1 element")]
    ZeroChunk {
        /// The kernel called.
        kernel: &'static str,
    },
    /// A malformed calculator expression.
    #[error(transparent)]
    Expr(#[from] ExprError),
}

/// Checks that `operand` of `kernel` has `expected` elements.
pub(crate) fn check_len(
    kernel: &'static str,
    operand: &'static str,
    expected: usize,
    found: usize,
) -> Result<(), NumericsError> {
    if expected == found {
        Ok(())
    } else {
        Err(NumericsError::Length {
            kernel,
            operand,
            expected,
            found,
        })
    }
}

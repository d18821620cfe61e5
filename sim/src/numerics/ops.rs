//! The operation vocabulary of the scalar arithmetic: the IR's [`UnaryOp`] (re-exported:
//! the same nine elementwise functions), and for two operands [`ArithOp`] (value results)
//! and [`CompareOp`] (truth results) — the IR's `BinaryOp` mixes the two, so it converts
//! into one or the other.

use ipusim_ir::BinaryOp;
use serde::{Deserialize, Serialize};

pub use ipusim_ir::UnaryOp;

/// The lower-case name of a unary operation (`"sqrt"`), as the calculator spells it.
pub fn unary_name(op: UnaryOp) -> &'static str {
    match op {
        UnaryOp::Neg => "neg",
        UnaryOp::Abs => "abs",
        UnaryOp::Exp => "exp",
        UnaryOp::Log => "log",
        UnaryOp::Sqrt => "sqrt",
        UnaryOp::Relu => "relu",
        UnaryOp::Sigmoid => "sigmoid",
        UnaryOp::Tanh => "tanh",
        UnaryOp::Gelu => "gelu",
    }
}

/// Every unary operation.
pub const UNARY_OPS: [UnaryOp; 9] = [
    UnaryOp::Neg,
    UnaryOp::Abs,
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sqrt,
    UnaryOp::Relu,
    UnaryOp::Sigmoid,
    UnaryOp::Tanh,
    UnaryOp::Gelu,
];

/// The unary operation called `name` (lower case).
pub fn unary_from_name(name: &str) -> Option<UnaryOp> {
    UNARY_OPS.into_iter().find(|op| unary_name(*op) == name)
}

/// Elementwise binary operations with a value result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArithOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
    /// The smaller operand (exact; `min(-0, +0) = -0`).
    Min,
    /// The larger operand (exact; `max(-0, +0) = +0`).
    Max,
}

impl ArithOp {
    /// Every binary operation, in declaration order.
    pub const ALL: [ArithOp; 6] = [
        ArithOp::Add,
        ArithOp::Sub,
        ArithOp::Mul,
        ArithOp::Div,
        ArithOp::Min,
        ArithOp::Max,
    ];

    /// The operation's lower-case name (`"add"`).
    pub fn name(self) -> &'static str {
        match self {
            ArithOp::Add => "add",
            ArithOp::Sub => "sub",
            ArithOp::Mul => "mul",
            ArithOp::Div => "div",
            ArithOp::Min => "min",
            ArithOp::Max => "max",
        }
    }

    /// The operation called `name`.
    pub fn from_name(name: &str) -> Option<ArithOp> {
        ArithOp::ALL.into_iter().find(|op| op.name() == name)
    }
}

impl TryFrom<BinaryOp> for ArithOp {
    /// The IR comparison that is not arithmetic.
    type Error = CompareOp;

    fn try_from(op: BinaryOp) -> Result<ArithOp, CompareOp> {
        match op {
            BinaryOp::Add => Ok(ArithOp::Add),
            BinaryOp::Sub => Ok(ArithOp::Sub),
            BinaryOp::Mul => Ok(ArithOp::Mul),
            BinaryOp::Div => Ok(ArithOp::Div),
            BinaryOp::Min => Ok(ArithOp::Min),
            BinaryOp::Max => Ok(ArithOp::Max),
            BinaryOp::Equal => Err(CompareOp::Eq),
            BinaryOp::Greater => Err(CompareOp::Gt),
            BinaryOp::Less => Err(CompareOp::Lt),
        }
    }
}

/// Comparisons. With a NaN operand every comparison is false except `Ne`, and raises INV
/// (Poplar `FloatingPointBehaviour`: "comparisons with NaN", numerics.md §2.2 \[S13\]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompareOp {
    /// `a == b` (`-0 == +0`).
    Eq,
    /// `a != b`.
    Ne,
    /// `a < b`.
    Lt,
    /// `a <= b`.
    Le,
    /// `a > b`.
    Gt,
    /// `a >= b`.
    Ge,
}

impl CompareOp {
    /// Every comparison, in declaration order.
    pub const ALL: [CompareOp; 6] = [
        CompareOp::Eq,
        CompareOp::Ne,
        CompareOp::Lt,
        CompareOp::Le,
        CompareOp::Gt,
        CompareOp::Ge,
    ];

    /// The comparison's lower-case name (`"lt"`).
    pub fn name(self) -> &'static str {
        match self {
            CompareOp::Eq => "eq",
            CompareOp::Ne => "ne",
            CompareOp::Lt => "lt",
            CompareOp::Le => "le",
            CompareOp::Gt => "gt",
            CompareOp::Ge => "ge",
        }
    }

    /// The comparison called `name`.
    pub fn from_name(name: &str) -> Option<CompareOp> {
        CompareOp::ALL.into_iter().find(|op| op.name() == name)
    }

    /// Applies the comparison (for floats, IEEE semantics: false with a NaN operand, except
    /// `Ne`).
    pub(crate) fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CompareOp::Eq => a == b,
            CompareOp::Ne => a != b,
            CompareOp::Lt => a < b,
            CompareOp::Le => a <= b,
            CompareOp::Gt => a > b,
            CompareOp::Ge => a >= b,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for op in UNARY_OPS {
            assert_eq!(unary_from_name(unary_name(op)), Some(op));
        }
        for op in ArithOp::ALL {
            assert_eq!(ArithOp::from_name(op.name()), Some(op));
        }
        for op in CompareOp::ALL {
            assert_eq!(CompareOp::from_name(op.name()), Some(op));
        }
        assert_eq!(unary_from_name("sqr"), None);
    }

    #[test]
    fn ir_binary_ops_split_into_arithmetic_and_comparisons() {
        assert_eq!(ArithOp::try_from(BinaryOp::Max), Ok(ArithOp::Max));
        assert_eq!(ArithOp::try_from(BinaryOp::Less), Err(CompareOp::Lt));
    }
}

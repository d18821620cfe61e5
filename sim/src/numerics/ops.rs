//! The operation vocabulary shared by the FP16 and FP32 scalar arithmetic, the expression
//! calculator and (later) the reference interpreter and codelets: one enum per arity, with
//! the lower-case names the calculator and the IR use.

use serde::{Deserialize, Serialize};

/// Elementwise unary operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnaryOp {
    /// `-x` (exact; sign flip).
    Neg,
    /// `|x|` (exact).
    Abs,
    /// `max(x, 0)` (exact).
    Relu,
    /// Square root, correctly rounded.
    Sqrt,
    /// `e^x`, computed in f64 and rounded once.
    Exp,
    /// Natural logarithm, computed in f64 and rounded once.
    Log,
    /// Hyperbolic tangent, computed in f64 and rounded once.
    Tanh,
    /// `1 / (1 + e^-x)`, computed in f64 and rounded once.
    Sigmoid,
    /// GELU, tanh approximation `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`
    /// (Hendrycks & Gimpel 2016), computed in f64 and rounded once.
    Gelu,
}

impl UnaryOp {
    /// Every unary operation, in declaration order.
    pub const ALL: [UnaryOp; 9] = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Relu,
        UnaryOp::Sqrt,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Gelu,
    ];

    /// The operation's lower-case name (`"sqrt"`).
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Relu => "relu",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Gelu => "gelu",
        }
    }

    /// The operation called `name`.
    pub fn from_name(name: &str) -> Option<UnaryOp> {
        UnaryOp::ALL.into_iter().find(|op| op.name() == name)
    }

    /// Whether the result is a rounded value (and so consumes a stochastic-rounding draw
    /// in FP16): everything except the exact sign and clamp operations.
    pub fn rounds(self) -> bool {
        !matches!(self, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu)
    }
}

/// Elementwise binary operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BinaryOp {
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

impl BinaryOp {
    /// Every binary operation, in declaration order.
    pub const ALL: [BinaryOp; 6] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Min,
        BinaryOp::Max,
    ];

    /// The operation's lower-case name (`"add"`).
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Min => "min",
            BinaryOp::Max => "max",
        }
    }

    /// The operation called `name`.
    pub fn from_name(name: &str) -> Option<BinaryOp> {
        BinaryOp::ALL.into_iter().find(|op| op.name() == name)
    }
}

/// Comparisons. With a NaN operand every comparison is false except `Ne`, and raises INV
/// (Poplar `FloatingPointBehaviour`: "comparisons with NaN", numerics.md §2.2 [S13]).
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

    /// Applies the comparison to two values exactly representable in `f64` (IEEE
    /// semantics: false with a NaN operand, except `Ne`).
    pub(crate) fn holds(self, a: f64, b: f64) -> bool {
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
        for op in UnaryOp::ALL {
            assert_eq!(UnaryOp::from_name(op.name()), Some(op));
        }
        for op in BinaryOp::ALL {
            assert_eq!(BinaryOp::from_name(op.name()), Some(op));
        }
        for op in CompareOp::ALL {
            assert_eq!(CompareOp::from_name(op.name()), Some(op));
        }
        assert_eq!(UnaryOp::from_name("sqr"), None);
    }
}

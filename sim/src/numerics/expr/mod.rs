//! The `ipusim fp` calculator: infix expressions over FP16/FP32 values evaluated with IPU
//! arithmetic, one operation at a time.
//!
//! ```text
//! expr    := term (('+' | '-') term)*
//! term    := unary (('*' | '/') unary)*
//! unary   := '-' unary | '+' unary | primary
//! primary := NUMBER | TYPED | 'inf' | 'nan' | NAME '(' expr (',' expr)* ')' | '(' expr ')'
//! NUMBER  := decimal literal, e.g. 0.0004, 1e-3, .5      (the --dtype type)
//! TYPED   := f16:0xHHHH | f32:0xHHHHHHHH                  (exact bit patterns)
//!          | i32:[-]DIGITS | u8:DIGITS                     (integers, for the casts)
//! NAME    := sqrt exp log tanh sigmoid gelu relu abs neg   (one argument)
//!          | min max                                       (two, same float type)
//!          | eq ne lt le gt ge                             (two; the result is a bool)
//!          | cast_f16 cast_f32 cast_i32                    (one)
//! ```
//!
//! Semantics:
//! - A decimal literal is rounded to nearest even into the `--dtype` type first, correctly
//!   from the decimal string ([`super::decimal`]); overflow follows the IPU policy.
//! - Every operation is rounded in its type (FP16: nearest even or stochastic; FP32:
//!   nearest even), left to right: operands are evaluated before their operator, function
//!   arguments in order. Stochastic draws are taken in that order from the stream of
//!   `(seed, tile 0, worker 0)`, continuing from one expression to the next.
//! - Types are strict, as in TensorFlow: both operands of an operator have the same float
//!   type; mixing f16 and f32 is an error that names the column — convert with the casts.
//! - The flags reported are the OR of the flags of every operation, literal rounding
//!   included (like `$FP_STS`).
//!
//! Parsing compiles an expression to a postfix program in buffers the [`Calculator`]
//! reuses, so evaluating a million lines does not allocate per line, and a malformed
//! expression is rejected before any draw is taken.

mod eval;
mod format;
mod parse;

use half::f16;
use ipusim_ir::DType;
use thiserror::Error;

use super::flags::FpSts;
use super::rng::SrRng;

pub use format::{write_error_json, write_human, write_json};

/// A calculator value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// An FP16 value.
    F16(f16),
    /// An FP32 value.
    F32(f32),
    /// An `i32`.
    I32(i32),
    /// A `u8`.
    U8(u8),
    /// A truth value.
    Bool(bool),
}

impl Value {
    /// The value's type.
    pub fn ty(&self) -> DType {
        match self {
            Value::F16(_) => DType::F16,
            Value::F32(_) => DType::F32,
            Value::I32(_) => DType::I32,
            Value::U8(_) => DType::U8,
            Value::Bool(_) => DType::Bool,
        }
    }

    /// The value's bit pattern.
    pub fn bits(&self) -> u32 {
        match *self {
            Value::F16(v) => u32::from(v.to_bits()),
            Value::F32(v) => v.to_bits(),
            Value::I32(v) => v as u32,
            Value::U8(v) => u32::from(v),
            Value::Bool(v) => u32::from(v),
        }
    }
}

/// The result of one expression: its value and the flags raised evaluating it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outcome {
    /// The value.
    pub value: Value,
    /// The OR of the flags of every operation.
    pub flags: FpSts,
}

/// What is wrong with an expression.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ExprErrorKind {
    /// The expression is empty.
    #[error("empty expression")]
    Empty,
    /// A character that starts no token.
    #[error("unexpected character '{0}'")]
    UnexpectedChar(char),
    /// A token where another was expected.
    #[error("expected {expected}, found {found}")]
    Expected {
        /// What the grammar wanted.
        expected: &'static str,
        /// What was there.
        found: String,
    },
    /// A function name that does not exist.
    #[error("unknown function '{0}'")]
    UnknownFunction(String),
    /// A name used without parentheses that is not `inf` or `nan`.
    #[error("unknown name '{0}' (functions need parentheses; literals are numbers, inf, nan or typed like f16:0x3c00)")]
    UnknownName(String),
    /// A function called with the wrong number of arguments.
    #[error("'{name}' takes {expected} argument(s), got {found}")]
    Arity {
        /// The function.
        name: &'static str,
        /// Its number of arguments.
        expected: usize,
        /// The number passed.
        found: usize,
    },
    /// A malformed literal.
    #[error("invalid literal '{text}': {reason}")]
    Literal {
        /// The literal as written.
        text: String,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// Operands of the wrong type.
    #[error("'{op}' {problem}")]
    Type {
        /// The operator or function.
        op: &'static str,
        /// What is wrong, naming the types.
        problem: String,
    },
    /// Parentheses nested too deeply.
    #[error("expression nested deeper than {0} levels")]
    TooDeep(usize),
}

/// A malformed expression and the (1-based, character) column where the problem is.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("column {column}: {kind}")]
pub struct ExprError {
    /// 1-based column, in characters.
    pub column: usize,
    /// What is wrong.
    pub kind: ExprErrorKind,
}

/// Calculator settings: the `ipusim fp` flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CalcOptions {
    /// The type of decimal literals (`F16` or `F32`).
    pub dtype: DType,
    /// Stochastic rounding of FP16 results.
    pub sr: bool,
    /// FP16 overflow gives NaN (with INV) instead of ±65504.
    pub nanoo: bool,
    /// The seed of the stochastic-rounding stream (tile 0, worker 0).
    pub seed: u64,
}

impl Default for CalcOptions {
    fn default() -> Self {
        CalcOptions {
            dtype: DType::F16,
            sr: false,
            nanoo: false,
            seed: 0,
        }
    }
}

/// Evaluates expressions one after another, with one stochastic-rounding stream for all.
#[derive(Debug)]
pub struct Calculator {
    options: CalcOptions,
    rng: SrRng,
    program: Vec<parse::Instr>,
    stack: Vec<Value>,
}

impl Calculator {
    /// A calculator with `options`.
    pub fn new(options: CalcOptions) -> Calculator {
        Calculator {
            options,
            rng: SrRng::new(options.seed, 0, 0),
            program: Vec::new(),
            stack: Vec::new(),
        }
    }

    /// Parses and evaluates `expr`. A malformed expression takes no draws.
    pub fn eval(&mut self, expr: &str) -> Result<Outcome, ExprError> {
        parse::compile(expr, &self.options, &mut self.program)?;
        Ok(eval::run(
            &self.program,
            &self.options,
            &mut self.rng,
            &mut self.stack,
        ))
    }
}

#[cfg(test)]
mod tests;

//! Integer arithmetic of the `I32` and `U8` element types (the IPU's integer vertices are
//! not part of the floating-point model; these are ipusim's documented choices, shared by the
//! reference interpreter and the engine's codelets): arithmetic wraps (two's complement for
//! `i32`, modulo 256 for `u8`); division truncates toward zero, and division by zero gives 0
//! and raises DIV0; `abs` wraps (`|i32::MIN| = i32::MIN`); `relu` is `max(x, 0)`.

use super::flags::FpSts;
use super::ops::{ArithOp, CompareOp};

/// Wrapping integer arithmetic of one integer element type.
pub trait IntArith: Copy + Ord + Default {
    /// `a op b` and the flags it raised (DIV0 for a division by zero).
    fn arith(op: ArithOp, a: Self, b: Self) -> (Self, FpSts);
    /// `-a`, wrapping.
    fn neg(a: Self) -> Self;
    /// `|a|`, wrapping.
    fn abs(a: Self) -> Self;
    /// `max(a, 0)`.
    fn relu(a: Self) -> Self {
        a.max(Self::default())
    }
    /// The comparison `a op b` (integers never raise flags).
    fn compare(op: CompareOp, a: Self, b: Self) -> bool {
        op.holds(a, b)
    }
}

/// [`IntArith`] for an integer type; `$abs` is its absolute value.
macro_rules! int_arith {
    ($t:ty, $abs:expr) => {
        impl IntArith for $t {
            #[inline]
            fn arith(op: ArithOp, a: $t, b: $t) -> ($t, FpSts) {
                let v = match op {
                    ArithOp::Add => a.wrapping_add(b),
                    ArithOp::Sub => a.wrapping_sub(b),
                    ArithOp::Mul => a.wrapping_mul(b),
                    ArithOp::Div if b == 0 => return (0, FpSts::DIV0),
                    ArithOp::Div => a.wrapping_div(b),
                    ArithOp::Min => a.min(b),
                    ArithOp::Max => a.max(b),
                };
                (v, FpSts::empty())
            }
            #[inline]
            fn neg(a: $t) -> $t {
                a.wrapping_neg()
            }
            #[inline]
            fn abs(a: $t) -> $t {
                $abs(a)
            }
        }
    };
}
int_arith!(i32, i32::wrapping_abs);
int_arith!(u8, |a: u8| a);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_and_division_by_zero() {
        assert_eq!(
            i32::arith(ArithOp::Add, i32::MAX, 1),
            (i32::MIN, FpSts::empty())
        );
        assert_eq!(u8::arith(ArithOp::Sub, 0, 1), (255, FpSts::empty()));
        assert_eq!(i32::arith(ArithOp::Div, 7, 0), (0, FpSts::DIV0));
        assert_eq!(i32::arith(ArithOp::Div, -7, 2), (-3, FpSts::empty()));
        assert_eq!(i32::abs(i32::MIN), i32::MIN);
        assert_eq!(i32::relu(-4), 0);
        assert!(u8::compare(CompareOp::Gt, 3, 2));
    }
}

//! Saturating cycle arithmetic for the PopLibs formulas of [`super::conv`] and
//! [`super::conv_reduce`]: a figure whose `+`, `-` and `×` saturate, so that the formulas
//! read as written and a wrapped figure never appears.

use crate::target::Target;
use std::ops::{Add, Mul, Sub};

/// A cycle figure whose `+`, `-` and `×` saturate (`-` at 0, the others at `u64::MAX`), so
/// the PopLibs formulas read as written without a wrapped figure ever appearing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(super) struct Cy(pub(super) u64);

impl Cy {
    pub(super) fn div_ceil(self, d: u64) -> Cy {
        Cy(self.0.div_ceil(d.max(1)))
    }
    pub(super) fn div(self, d: u64) -> Cy {
        Cy(self.0 / d.max(1))
    }
}

macro_rules! saturating_ops {
    ($($trait:ident $method:ident $op:ident;)*) => {$(
        impl $trait<Cy> for Cy {
            type Output = Cy;
            fn $method(self, rhs: Cy) -> Cy {
                Cy(self.0.$op(rhs.0))
            }
        }
        impl $trait<u64> for Cy {
            type Output = Cy;
            fn $method(self, rhs: u64) -> Cy {
                Cy(self.0.$op(rhs))
            }
        }
        impl $trait<Cy> for u64 {
            type Output = Cy;
            fn $method(self, rhs: Cy) -> Cy {
                Cy(self.$op(rhs.0))
            }
        }
    )*};
}

saturating_ops! {
    Add add saturating_add;
    Sub sub saturating_sub;
    Mul mul saturating_mul;
}

pub(super) fn cy(v: u32) -> Cy {
    Cy(v as u64)
}

pub(super) fn flag(b: bool) -> u64 {
    b as u64
}

/// The worker contexts of a tile (at least 1).
pub(super) fn workers(target: &Target) -> u64 {
    target.worker_contexts.max(1) as u64
}

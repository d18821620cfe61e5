//! Slice kernels for the simulator's hot paths: bulk f32↔f16 conversion ([`convert`]),
//! AMP-style dot products and matrix products ([`amp`]), element-wise operations
//! ([`map`]) and the un-grouping transpose of operand blocks ([`transpose`], which moves
//! values and computes none). They compute exactly what the scalar operations of
//! [`super::fp16`], [`super::fp32`] and [`super::cast`] compute, element by element and
//! draw by draw, without per-element allocation or dynamic dispatch, and return the OR of
//! the flags raised.

pub mod amp;
pub mod convert;
mod lanes;
pub mod map;
pub mod transpose;

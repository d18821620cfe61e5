//! Element types and static shapes of tensors.
//!
//! Every tensor in an ipusim graph has a [`DType`] and a static [`Shape`]; together they form
//! its [`TensorType`]. Broadcasting follows NumPy's rules (trailing dimensions aligned, size-1
//! dimensions stretched), which is what TensorFlow and PopTorch users expect.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DType {
    /// IEEE binary16 (the IPU's `half`).
    F16,
    /// IEEE binary32 (the IPU's `float`).
    F32,
    /// 32-bit signed integer.
    I32,
    /// 8-bit unsigned integer (8-bit I/O of images).
    U8,
    /// Boolean, stored as one byte.
    Bool,
}

impl DType {
    /// All element types, in declaration order.
    pub const ALL: [DType; 5] = [DType::F16, DType::F32, DType::I32, DType::U8, DType::Bool];

    /// Bytes per element in tile memory and on the host link.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::U8 | DType::Bool => 1,
        }
    }

    /// True for the floating-point types.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::F32)
    }

    /// True for the integer types (not Bool).
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::U8)
    }

    /// The lower-case name used in messages and reports (`f16`, `f32`, `i32`, `u8`, `bool`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::U8 => "u8",
            DType::Bool => "bool",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A static shape: the size of each dimension, outermost first. The empty shape is a scalar.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Shape(pub Vec<usize>);

impl Shape {
    /// A shape from its dimensions.
    pub fn new(dims: impl Into<Vec<usize>>) -> Shape {
        Shape(dims.into())
    }

    /// The rank-0 (scalar) shape.
    pub fn scalar() -> Shape {
        Shape(Vec::new())
    }

    /// The dimensions.
    pub fn dims(&self) -> &[usize] {
        &self.0
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// Number of elements (1 for a scalar). Saturates instead of overflowing, so absurd
    /// shapes are reported by validation rather than wrapping around.
    pub fn num_elements(&self) -> usize {
        self.0.iter().fold(1usize, |acc, &d| acc.saturating_mul(d))
    }

    /// Row-major strides in elements.
    pub fn strides(&self) -> Vec<usize> {
        let mut strides = vec![1usize; self.0.len()];
        for i in (0..self.0.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1].saturating_mul(self.0[i + 1]);
        }
        strides
    }

    /// The NumPy broadcast of two shapes, or `None` when they are incompatible.
    pub fn broadcast(&self, other: &Shape) -> Option<Shape> {
        let rank = self.rank().max(other.rank());
        let mut out = vec![0usize; rank];
        for (i, slot) in out.iter_mut().enumerate() {
            let a = dim_from_end(&self.0, rank - 1 - i);
            let b = dim_from_end(&other.0, rank - 1 - i);
            *slot = match (a, b) {
                (x, y) if x == y => x,
                (1, y) => y,
                (x, 1) => x,
                _ => return None,
            };
        }
        Some(Shape(out))
    }

    /// True when `self` can be broadcast to `target` (NumPy rules, one direction).
    pub fn broadcasts_to(&self, target: &Shape) -> bool {
        if self.rank() > target.rank() {
            return false;
        }
        (0..self.rank()).all(|i| {
            let a = dim_from_end(&self.0, i);
            a == 1 || a == dim_from_end(&target.0, i)
        })
    }
}

fn dim_from_end(dims: &[usize], i: usize) -> usize {
    if i < dims.len() {
        dims[dims.len() - 1 - i]
    } else {
        1
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

impl From<Vec<usize>> for Shape {
    fn from(v: Vec<usize>) -> Shape {
        Shape(v)
    }
}

impl From<&[usize]> for Shape {
    fn from(v: &[usize]) -> Shape {
        Shape(v.to_vec())
    }
}

impl<const N: usize> From<[usize; N]> for Shape {
    fn from(v: [usize; N]) -> Shape {
        Shape(v.to_vec())
    }
}

/// The type of a tensor: element type and shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// Static shape.
    pub shape: Shape,
}

impl TensorType {
    /// A tensor type.
    pub fn new(dtype: DType, shape: impl Into<Shape>) -> TensorType {
        TensorType {
            dtype,
            shape: shape.into(),
        }
    }

    /// Number of elements.
    pub fn num_elements(&self) -> usize {
        self.shape.num_elements()
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> usize {
        self.num_elements().saturating_mul(self.dtype.size_bytes())
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_follows_numpy() {
        let a = Shape::new([4, 1, 3]);
        let b = Shape::new([5, 1]);
        assert_eq!(a.broadcast(&b), Some(Shape::new([4, 5, 3])));
        assert_eq!(Shape::new([2, 3]).broadcast(&Shape::new([3, 2])), None);
        assert_eq!(
            Shape::scalar().broadcast(&Shape::new([7])),
            Some(Shape::new([7]))
        );
        assert!(Shape::new([3]).broadcasts_to(&Shape::new([2, 3])));
        assert!(!Shape::new([2, 3]).broadcasts_to(&Shape::new([3])));
    }

    #[test]
    fn strides_and_sizes() {
        let s = Shape::new([2, 3, 4]);
        assert_eq!(s.strides(), vec![12, 4, 1]);
        assert_eq!(s.num_elements(), 24);
        assert_eq!(Shape::scalar().num_elements(), 1);
        assert_eq!(TensorType::new(DType::F16, [8, 8]).size_bytes(), 128);
        assert_eq!(
            format!("{}", TensorType::new(DType::U8, [2, 64])),
            "u8[2, 64]"
        );
    }
}

//! Host tensor values: a dtype, a static shape and row-major elements.
//!
//! [`Tensor`] is what crosses the host/device boundary of the simulator (infeed data,
//! outfeed entries, variable contents) and what the reference interpreter computes with.
//! Elements are stored in their IPU format (`half::f16` for FP16) — except in the
//! interpreter's exact mode, where floating-point tensors of either dtype hold `f64` values
//! ([`Data::F64`]) so that finite differences are not limited by FP32.

use half::f16;
use ipusim_ir::{DType, Shape, TensorType};
use thiserror::Error;

/// Row-major elements of a tensor.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    /// IEEE binary16 values.
    F16(Vec<f16>),
    /// IEEE binary32 values.
    F32(Vec<f32>),
    /// Exact-mode values of an F16 or F32 tensor.
    F64(Vec<f64>),
    /// 32-bit signed integers.
    I32(Vec<i32>),
    /// Bytes.
    U8(Vec<u8>),
    /// Booleans.
    Bool(Vec<bool>),
}

impl Data {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Data::F16(v) => v.len(),
            Data::F32(v) => v.len(),
            Data::F64(v) => v.len(),
            Data::I32(v) => v.len(),
            Data::U8(v) => v.len(),
            Data::Bool(v) => v.len(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The storage's name, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Data::F16(_) => "f16",
            Data::F32(_) => "f32",
            Data::F64(_) => "f64",
            Data::I32(_) => "i32",
            Data::U8(_) => "u8",
            Data::Bool(_) => "bool",
        }
    }

    /// True when this storage can hold a tensor of `dtype` (F64 holds either float type).
    pub fn holds(&self, dtype: DType) -> bool {
        matches!(
            (self, dtype),
            (Data::F16(_), DType::F16)
                | (Data::F32(_), DType::F32)
                | (Data::F64(_), DType::F16 | DType::F32)
                | (Data::I32(_), DType::I32)
                | (Data::U8(_), DType::U8)
                | (Data::Bool(_), DType::Bool)
        )
    }
}

/// A tensor whose data does not fit its type.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum TensorError {
    /// The storage kind cannot hold the dtype.
    #[error("{kind} data cannot hold a tensor of dtype {dtype}")]
    Kind { kind: &'static str, dtype: DType },
    /// The element count differs from the shape's.
    #[error("shape {shape} holds {expected} elements, got {found}")]
    Count {
        shape: Shape,
        expected: usize,
        found: usize,
    },
}

/// A host tensor: type and row-major data, always consistent.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    dtype: DType,
    shape: Shape,
    data: Data,
}

impl Tensor {
    /// A tensor of `dtype` and `shape` over `data`; fails when they do not fit.
    pub fn new(dtype: DType, shape: impl Into<Shape>, data: Data) -> Result<Tensor, TensorError> {
        let shape = shape.into();
        if !data.holds(dtype) {
            return Err(TensorError::Kind {
                kind: data.kind(),
                dtype,
            });
        }
        if data.len() != shape.num_elements() {
            return Err(TensorError::Count {
                expected: shape.num_elements(),
                found: data.len(),
                shape,
            });
        }
        Ok(Tensor { dtype, shape, data })
    }

    /// An F32 tensor.
    pub fn f32(shape: impl Into<Shape>, v: Vec<f32>) -> Result<Tensor, TensorError> {
        Tensor::new(DType::F32, shape, Data::F32(v))
    }

    /// An F16 tensor.
    pub fn f16(shape: impl Into<Shape>, v: Vec<f16>) -> Result<Tensor, TensorError> {
        Tensor::new(DType::F16, shape, Data::F16(v))
    }

    /// An I32 tensor.
    pub fn i32(shape: impl Into<Shape>, v: Vec<i32>) -> Result<Tensor, TensorError> {
        Tensor::new(DType::I32, shape, Data::I32(v))
    }

    /// A U8 tensor.
    pub fn u8(shape: impl Into<Shape>, v: Vec<u8>) -> Result<Tensor, TensorError> {
        Tensor::new(DType::U8, shape, Data::U8(v))
    }

    /// A Bool tensor.
    pub fn bool(shape: impl Into<Shape>, v: Vec<bool>) -> Result<Tensor, TensorError> {
        Tensor::new(DType::Bool, shape, Data::Bool(v))
    }

    /// The all-zero tensor of a type, in its IPU storage format.
    pub fn zeros(ty: &TensorType) -> Tensor {
        let n = ty.num_elements();
        let data = match ty.dtype {
            DType::F16 => Data::F16(vec![f16::ZERO; n]),
            DType::F32 => Data::F32(vec![0.0; n]),
            DType::I32 => Data::I32(vec![0; n]),
            DType::U8 => Data::U8(vec![0; n]),
            DType::Bool => Data::Bool(vec![false; n]),
        };
        Tensor {
            dtype: ty.dtype,
            shape: ty.shape.clone(),
            data,
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The tensor type.
    pub fn ty(&self) -> TensorType {
        TensorType::new(self.dtype, self.shape.clone())
    }

    /// The elements.
    pub fn data(&self) -> &Data {
        &self.data
    }

    /// Consumes the tensor, returning its elements.
    pub fn into_data(self) -> Data {
        self.data
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// True when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Every element as `f64` (exact for every storage kind; Bool is 0 or 1).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match &self.data {
            Data::F16(v) => v.iter().map(|x| f64::from(x.to_f32())).collect(),
            Data::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Data::F64(v) => v.clone(),
            Data::I32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Data::U8(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Data::Bool(v) => v.iter().map(|&x| f64::from(u8::from(x))).collect(),
        }
    }

    /// The F32 elements, if stored as F32.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            Data::F32(v) => Some(v),
            _ => None,
        }
    }

    /// The F16 elements, if stored as F16.
    pub fn as_f16(&self) -> Option<&[f16]> {
        match &self.data {
            Data::F16(v) => Some(v),
            _ => None,
        }
    }

    /// The I32 elements, if stored as I32.
    pub fn as_i32(&self) -> Option<&[i32]> {
        match &self.data {
            Data::I32(v) => Some(v),
            _ => None,
        }
    }

    /// The elements as the IPU stores them: row-major, little-endian, FP16 as its bit
    /// pattern, Bool as one byte 0/1 — the bytes of a host stream and of tile memory. Exact-
    /// mode (`F64`) data is rounded once to nearest even into the dtype first.
    pub fn to_bytes(&self) -> Vec<u8> {
        match &self.data {
            Data::F16(v) => v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
            Data::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::U8(v) => v.clone(),
            Data::Bool(v) => v.iter().map(|&b| u8::from(b)).collect(),
            Data::F64(v) => match self.dtype {
                DType::F16 => v
                    .iter()
                    .flat_map(|&x| {
                        crate::numerics::Rounding::nearest(false)
                            .round_f16(x, crate::numerics::Tail::Exact)
                            .0
                            .to_bits()
                            .to_le_bytes()
                    })
                    .collect(),
                _ => v
                    .iter()
                    .flat_map(|&x| crate::numerics::round::round_f32(x).0.to_le_bytes())
                    .collect(),
            },
        }
    }

    /// The tensor of `dtype` and `shape` whose IPU bytes are `bytes` (see
    /// [`Tensor::to_bytes`]); a Bool byte is true when non-zero.
    pub fn from_bytes(
        dtype: DType,
        shape: impl Into<Shape>,
        bytes: &[u8],
    ) -> Result<Tensor, TensorError> {
        let shape = shape.into();
        let expected = shape.num_elements().saturating_mul(dtype.size_bytes());
        if bytes.len() != expected {
            return Err(TensorError::Count {
                expected: shape.num_elements(),
                found: bytes.len() / dtype.size_bytes(),
                shape,
            });
        }
        let data = match dtype {
            DType::F16 => Data::F16(
                bytes
                    .chunks_exact(2)
                    .map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]])))
                    .collect(),
            ),
            DType::F32 => Data::F32(
                bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            ),
            DType::I32 => Data::I32(
                bytes
                    .chunks_exact(4)
                    .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            ),
            DType::U8 => Data::U8(bytes.to_vec()),
            DType::Bool => Data::Bool(bytes.iter().map(|&b| b != 0).collect()),
        };
        Tensor::new(dtype, shape, data)
    }

    /// The exact-mode elements, if stored as F64.
    pub fn as_f64(&self) -> Option<&[f64]> {
        match &self.data {
            Data::F64(v) => Some(v),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_check_kind_and_count() {
        assert!(Tensor::f32([2, 2], vec![1.0; 4]).is_ok());
        assert_eq!(
            Tensor::f32([2, 2], vec![1.0; 3]).unwrap_err().to_string(),
            "shape [2, 2] holds 4 elements, got 3"
        );
        assert!(matches!(
            Tensor::new(DType::I32, [1], Data::F32(vec![0.0])),
            Err(TensorError::Kind { .. })
        ));
        assert!(Tensor::new(DType::F16, [1], Data::F64(vec![0.5])).is_ok());
        let z = Tensor::zeros(&TensorType::new(DType::Bool, [3]));
        assert_eq!(z.to_f64_vec(), vec![0.0; 3]);
    }

    #[test]
    fn bytes_round_trip() {
        let t = Tensor::f16([2], vec![f16::from_f32(1.5), f16::from_f32(-2.0)]).unwrap();
        assert_eq!(t.to_bytes(), vec![0x00, 0x3e, 0x00, 0xc0]);
        assert_eq!(
            Tensor::from_bytes(DType::F16, [2], &t.to_bytes()).unwrap(),
            t
        );
        let b = Tensor::bool([3], vec![true, false, true]).unwrap();
        assert_eq!(
            Tensor::from_bytes(DType::Bool, [3], &b.to_bytes()).unwrap(),
            b
        );
        assert!(Tensor::from_bytes(DType::I32, [2], &[0; 7]).is_err());
        let x = Tensor::new(DType::F16, [1], Data::F64(vec![0.1])).unwrap();
        assert_eq!(
            x.to_bytes(),
            f16::from_f32(0.1).to_bits().to_le_bytes().to_vec()
        );
    }
}

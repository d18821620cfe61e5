//! Tensor values of a model: initializers and `Constant` attributes decoded from a
//! `TensorProto` (its typed field, `raw_data`, or an external data file) into
//! [`ConstTensor`]s, and written back by the model writer ([`crate::write`]).
//!
//! Every decode checks the data against the shape before it allocates: a shape whose element
//! count overflows, a `raw_data` or typed field of the wrong length, an external file that
//! is missing or shorter than the tensor — each is an error naming the tensor, never a
//! panic or an allocation the data does not back.

use crate::proto::{data_type as dt, TensorProto, DATA_LOCATION_EXTERNAL};
use half::f16;
use std::path::Path;

/// A tensor of known values: its ONNX element type, shape and values (row-major, as `f64`,
/// which holds every FLOAT, FLOAT16, integer of up to 2^53 and BOOL exactly).
#[derive(Clone, Debug, PartialEq)]
pub struct ConstTensor {
    /// The ONNX data type (`proto::data_type`).
    pub elem: i32,
    /// The dimensions.
    pub dims: Vec<usize>,
    /// The values.
    pub values: Vec<f64>,
}

impl ConstTensor {
    /// A rank-1 INT64 tensor (shapes, axes, indices).
    pub fn ints(values: &[i64]) -> ConstTensor {
        ConstTensor {
            elem: dt::INT64,
            dims: vec![values.len()],
            values: values.iter().map(|&v| v as f64).collect(),
        }
    }

    /// The values as integers (truncated toward zero; for shape-like tensors).
    pub fn as_ints(&self) -> Vec<i64> {
        self.values.iter().map(|&v| v as i64).collect()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// Bytes per element of the types the importer reads, `None` for the others.
pub fn element_size(elem: i32) -> Option<usize> {
    Some(match elem {
        dt::FLOAT | dt::INT32 | dt::UINT32 => 4,
        dt::DOUBLE | dt::INT64 | dt::UINT64 => 8,
        dt::FLOAT16 | dt::INT16 | dt::UINT16 | dt::BFLOAT16 => 2,
        dt::INT8 | dt::UINT8 | dt::BOOL => 1,
        _ => return None,
    })
}

/// The dimensions of a tensor as sizes, and its element count, or why they are unusable.
pub fn dims_of(dims: &[i64]) -> Result<(Vec<usize>, usize), String> {
    let mut out = Vec::with_capacity(dims.len());
    let mut n: usize = 1;
    for (i, &d) in dims.iter().enumerate() {
        let d = usize::try_from(d).map_err(|_| format!("dimension {i} is negative ({d})"))?;
        n = n
            .checked_mul(d)
            .filter(|&n| n <= MAX_ELEMENTS)
            .ok_or_else(|| format!("shape {dims:?} has more than 2^40 elements"))?;
        out.push(d);
    }
    Ok((out, n))
}

/// The most elements a tensor of a model may have (2^40: far beyond any IPU's memory; the
/// bound keeps element counts from overflowing).
pub const MAX_ELEMENTS: usize = 1 << 40;

/// Decodes a tensor's values. `dir` is the model file's directory, against which external
/// data locations resolve.
pub fn decode(t: &TensorProto, dir: &Path) -> Result<ConstTensor, String> {
    if t.segment.is_some() {
        return Err("segmented tensors are not supported".into());
    }
    let elem = t.data_type;
    let size = element_size(elem)
        .ok_or_else(|| format!("element type {} is not supported", dt::name(elem)))?;
    let (dims, n) = dims_of(&t.dims)?;
    let values = if t.data_location == DATA_LOCATION_EXTERNAL || !t.external_data.is_empty() {
        let bytes = read_external(t, dir, n * size)?;
        from_raw(elem, &bytes)
    } else if !t.raw_data.is_empty() || n == 0 {
        if t.raw_data.len() != n * size {
            return Err(format!(
                "raw_data holds {} bytes; shape {:?} of {} needs {}",
                t.raw_data.len(),
                dims,
                dt::name(elem),
                n * size
            ));
        }
        from_raw(elem, &t.raw_data)
    } else {
        let (field, values): (&str, Vec<f64>) = match elem {
            dt::FLOAT => (
                "float_data",
                t.float_data.iter().map(|&v| v as f64).collect(),
            ),
            dt::DOUBLE => ("double_data", t.double_data.clone()),
            dt::INT64 => (
                "int64_data",
                t.int64_data.iter().map(|&v| v as f64).collect(),
            ),
            dt::UINT32 | dt::UINT64 => (
                "uint64_data",
                t.uint64_data.iter().map(|&v| v as f64).collect(),
            ),
            dt::FLOAT16 => (
                "int32_data",
                t.int32_data
                    .iter()
                    .map(|&v| f16::from_bits(v as u16).to_f64())
                    .collect(),
            ),
            dt::BFLOAT16 => (
                "int32_data",
                t.int32_data
                    .iter()
                    .map(|&v| f32::from_bits((v as u32 & 0xffff) << 16) as f64)
                    .collect(),
            ),
            _ => (
                "int32_data",
                t.int32_data.iter().map(|&v| v as f64).collect(),
            ),
        };
        if values.len() != n {
            return Err(format!(
                "{field} holds {} values; shape {:?} needs {n}",
                values.len(),
                dims
            ));
        }
        values
    };
    Ok(ConstTensor { elem, dims, values })
}

/// Little-endian fixed-width elements to values.
fn from_raw(elem: i32, bytes: &[u8]) -> Vec<f64> {
    fn each<const N: usize>(bytes: &[u8], f: impl Fn([u8; N]) -> f64) -> Vec<f64> {
        bytes
            .chunks_exact(N)
            .map(|c| f(c.try_into().expect("chunks_exact gives N bytes")))
            .collect()
    }
    match elem {
        dt::FLOAT => each(bytes, |b| f32::from_le_bytes(b) as f64),
        dt::DOUBLE => each(bytes, f64::from_le_bytes),
        dt::FLOAT16 => each(bytes, |b| f16::from_le_bytes(b).to_f64()),
        dt::BFLOAT16 => each(bytes, |b: [u8; 2]| {
            f32::from_bits((u16::from_le_bytes(b) as u32) << 16) as f64
        }),
        dt::INT64 => each(bytes, |b| i64::from_le_bytes(b) as f64),
        dt::UINT64 => each(bytes, |b| u64::from_le_bytes(b) as f64),
        dt::INT32 => each(bytes, |b| i32::from_le_bytes(b) as f64),
        dt::UINT32 => each(bytes, |b| u32::from_le_bytes(b) as f64),
        dt::INT16 => each(bytes, |b| i16::from_le_bytes(b) as f64),
        dt::UINT16 => each(bytes, |b| u16::from_le_bytes(b) as f64),
        dt::INT8 => each(bytes, |b: [u8; 1]| b[0] as i8 as f64),
        dt::UINT8 => each(bytes, |b: [u8; 1]| b[0] as f64),
        _ => each(bytes, |b: [u8; 1]| f64::from(u8::from(b[0] != 0))),
    }
}

/// Reads `need` bytes of a tensor's external data (`location`, `offset`, `length`),
/// resolving the location against `dir`.
fn read_external(t: &TensorProto, dir: &Path, need: usize) -> Result<Vec<u8>, String> {
    let (mut location, mut offset, mut length) = (None, 0u64, None);
    for e in &t.external_data {
        let number = |what: &str| {
            e.value
                .parse::<u64>()
                .map_err(|_| format!("external_data {what} '{}' is not a number", e.value))
        };
        match e.key.as_str() {
            "location" => location = Some(e.value.as_str()),
            "offset" => offset = number("offset")?,
            "length" => length = Some(number("length")?),
            _ => {}
        }
    }
    let location = location.ok_or("external data without a 'location'")?;
    if let Some(length) = length {
        if length != need as u64 {
            return Err(format!(
                "external data length {length} disagrees with the shape, which needs {need} bytes"
            ));
        }
    }
    ipusim_ir::text::input::read_beside(
        dir,
        location,
        offset,
        need as u64,
        "external data file",
        "model",
    )
}

/// A FLOAT, INT64 or INT32 tensor as a `TensorProto` with `raw_data` (for the writer).
pub fn encode(name: &str, t: &ConstTensor) -> TensorProto {
    let raw_data = match t.elem {
        dt::INT64 => t
            .values
            .iter()
            .flat_map(|&v| (v as i64).to_le_bytes())
            .collect(),
        dt::INT32 => t
            .values
            .iter()
            .flat_map(|&v| (v as i32).to_le_bytes())
            .collect(),
        dt::FLOAT16 => t
            .values
            .iter()
            .flat_map(|&v| f16::from_f64(v).to_le_bytes())
            .collect(),
        _ => t
            .values
            .iter()
            .flat_map(|&v| (v as f32).to_le_bytes())
            .collect(),
    };
    TensorProto {
        dims: t.dims.iter().map(|&d| d as i64).collect(),
        data_type: t.elem,
        name: name.to_string(),
        raw_data,
        ..TensorProto::default()
    }
}

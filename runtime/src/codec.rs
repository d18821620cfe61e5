//! Host values ↔ stream bytes: the one place where numbers from files, generators and
//! checkpoints become the bytes a `StreamCopy` moves, and back.
//!
//! The byte layout is the engine's ([`ipusim_sim::host`]): little-endian elements in
//! row-major order, FP16 as its bit pattern, Bool as one byte 0/1.
//!
//! Conversions round **once, to nearest even**, with the numerics core:
//! - decimal text (CSV fields, checkpoint values) goes straight from the decimal to the
//!   dtype ([`decimal_to_f16`], [`decimal_to_f32`]), never through an `f64` that could
//!   double-round;
//! - an `f64` (generators) is rounded once from its exact value ([`Rounding::round_f16`],
//!   [`round_f32`]).
//!
//! A value that does not fit is an error, never a silent saturation: a finite value beyond
//! the float format's range, a non-integral or out-of-range integer (`u8` holds `0..=255`),
//! a Bool that is not `0`/`1`/`true`/`false`. Infinities and NaN written as `inf`, `-inf`,
//! `nan` are accepted for float streams.

use ipusim_ir::DType;
use ipusim_sim::numerics::decimal::{decimal_to_f16, decimal_to_f32};
use ipusim_sim::numerics::round::round_f32;
use ipusim_sim::numerics::{Rounding, Tail};
use ipusim_sim::tensor::{Data, Tensor};
use thiserror::Error;

/// A value that cannot be converted to a dtype.
#[derive(Clone, Debug, PartialEq, Error)]
#[error("{value} {reason}")]
pub struct ValueError {
    /// The value as written (quoted text) or printed.
    pub value: String,
    /// Why it does not fit, e.g. "does not fit u8 (integers 0..=255)".
    pub reason: String,
}

impl ValueError {
    fn new(value: impl Into<String>, reason: impl Into<String>) -> ValueError {
        ValueError {
            value: value.into(),
            reason: reason.into(),
        }
    }
}

/// The range of an integer dtype, for messages and checks.
fn int_range(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::U8 => (0.0, 255.0),
        _ => (f64::from(i32::MIN), f64::from(i32::MAX)),
    }
}

fn does_not_fit(dtype: DType) -> String {
    match dtype {
        DType::F16 => "overflows f16 (largest finite value 65504)".into(),
        DType::F32 => "overflows f32 (largest finite value 3.4028235e38)".into(),
        DType::U8 => "does not fit u8 (integers 0..=255)".into(),
        DType::I32 => "does not fit i32 (integers -2147483648..=2147483647)".into(),
        DType::Bool => "is not a bool (0, 1, true or false)".into(),
    }
}

/// Appends the bytes of one element given as decimal text (a CSV field) in `dtype`.
pub fn push_text(dtype: DType, text: &str, out: &mut Vec<u8>) -> Result<(), ValueError> {
    let t = text.trim();
    let quoted = || format!("'{}'", ipusim_ir::text::input::clip(t));
    let special = match t.to_ascii_lowercase().as_str() {
        "nan" => Some(f64::NAN),
        "inf" | "+inf" | "infinity" => Some(f64::INFINITY),
        "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
        _ => None,
    };
    if let (Some(v), true) = (special, dtype.is_float()) {
        return push_f64(dtype, v, out).map_err(|e| e.requote(quoted()));
    }
    match dtype {
        DType::F16 => match decimal_to_f16(t, false) {
            Some((h, flags)) if flags.is_empty() => {
                out.extend_from_slice(&h.to_bits().to_le_bytes());
                Ok(())
            }
            Some(_) => Err(ValueError::new(quoted(), does_not_fit(dtype))),
            None => Err(ValueError::new(quoted(), "is not a number")),
        },
        DType::F32 => match decimal_to_f32(t) {
            Some((x, flags)) if flags.is_empty() => {
                out.extend_from_slice(&x.to_le_bytes());
                Ok(())
            }
            Some(_) => Err(ValueError::new(quoted(), does_not_fit(dtype))),
            None => Err(ValueError::new(quoted(), "is not a number")),
        },
        DType::Bool => match t.to_ascii_lowercase().as_str() {
            "0" | "false" => {
                out.push(0);
                Ok(())
            }
            "1" | "true" => {
                out.push(1);
                Ok(())
            }
            _ => Err(ValueError::new(quoted(), does_not_fit(dtype))),
        },
        DType::I32 | DType::U8 => {
            let v: f64 = match t.parse() {
                Ok(v) if special.is_none() => v,
                _ => return Err(ValueError::new(quoted(), "is not a number")),
            };
            push_f64(dtype, v, out).map_err(|e| e.requote(quoted()))
        }
    }
}

impl ValueError {
    fn requote(mut self, value: String) -> ValueError {
        self.value = value;
        self
    }
}

/// Appends the bytes of one element given as an exact `f64` (a generated value) in `dtype`,
/// rounded once to nearest even for the float types.
pub fn push_f64(dtype: DType, v: f64, out: &mut Vec<u8>) -> Result<(), ValueError> {
    match dtype {
        DType::F16 => {
            let (h, flags) = Rounding::nearest(false).round_f16(v, Tail::Exact);
            if v.is_finite() && !flags.is_empty() {
                return Err(ValueError::new(v.to_string(), does_not_fit(dtype)));
            }
            out.extend_from_slice(&h.to_bits().to_le_bytes());
        }
        DType::F32 => {
            let (x, flags) = round_f32(v);
            if v.is_finite() && !flags.is_empty() {
                return Err(ValueError::new(v.to_string(), does_not_fit(dtype)));
            }
            out.extend_from_slice(&x.to_le_bytes());
        }
        DType::I32 | DType::U8 => {
            let (lo, hi) = int_range(dtype);
            if v.fract() != 0.0 || !(lo..=hi).contains(&v) {
                return Err(ValueError::new(v.to_string(), does_not_fit(dtype)));
            }
            if dtype == DType::U8 {
                out.push(v as u8);
            } else {
                out.extend_from_slice(&(v as i32).to_le_bytes());
            }
        }
        DType::Bool => {
            if v != 0.0 && v != 1.0 {
                return Err(ValueError::new(v.to_string(), does_not_fit(dtype)));
            }
            out.push(v as u8);
        }
    }
    Ok(())
}

/// The stream bytes of a host tensor ([`Tensor::to_bytes`]); exact-mode `f64` data is
/// rounded once to the tensor's dtype and must fit it (an error, never a silent saturation).
/// The inverse is [`Tensor::from_bytes`].
pub fn tensor_to_bytes(t: &Tensor) -> Result<Vec<u8>, ValueError> {
    match t.data() {
        Data::F64(v) => {
            let mut out = Vec::with_capacity(t.len() * t.dtype().size_bytes());
            for &x in v {
                push_f64(t.dtype(), x, &mut out)?;
            }
            Ok(out)
        }
        _ => Ok(t.to_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(dtype: DType, t: &str) -> Result<Vec<u8>, ValueError> {
        let mut out = Vec::new();
        push_text(dtype, t, &mut out).map(|_| out)
    }

    #[test]
    fn text_is_rounded_once_from_the_decimal() {
        // numerics.md §3.1: f16(0.0004) = 0x0e8e, f16(0.0001) = 0x068e.
        assert_eq!(text(DType::F16, "0.0004").unwrap(), 0x0e8eu16.to_le_bytes());
        assert_eq!(
            text(DType::F16, " 0.0001 ").unwrap(),
            0x068eu16.to_le_bytes()
        );
        // Just above the midpoint 1 + 2^-11: an f64 detour would tie to even (0x3c00).
        assert_eq!(
            text(DType::F16, "1.000488281250000000001").unwrap(),
            0x3c01u16.to_le_bytes()
        );
        assert_eq!(text(DType::F32, "0.1").unwrap(), 0.1f32.to_le_bytes());
        assert_eq!(text(DType::F16, "-inf").unwrap(), 0xfc00u16.to_le_bytes());
        assert_eq!(text(DType::U8, "255").unwrap(), vec![255]);
        assert_eq!(text(DType::I32, "-7").unwrap(), (-7i32).to_le_bytes());
        assert_eq!(text(DType::Bool, "true").unwrap(), vec![1]);
    }

    #[test]
    fn values_that_do_not_fit_are_errors() {
        let e = text(DType::U8, "256").unwrap_err();
        assert_eq!(e.to_string(), "'256' does not fit u8 (integers 0..=255)");
        assert!(text(DType::U8, "-1").is_err());
        assert!(text(DType::U8, "1.5").is_err());
        assert_eq!(
            text(DType::F16, "70000").unwrap_err().to_string(),
            "'70000' overflows f16 (largest finite value 65504)"
        );
        assert_eq!(
            text(DType::F32, "abc").unwrap_err().to_string(),
            "'abc' is not a number"
        );
        assert!(text(DType::I32, "nan").is_err());
        assert!(text(DType::Bool, "2").is_err());
        let mut out = Vec::new();
        assert!(
            push_f64(DType::F16, 65519.0, &mut out).is_ok(),
            "rounds to 65504"
        );
        assert!(
            push_f64(DType::F16, 65520.0, &mut out).is_err(),
            "rounds to inf"
        );
    }

    #[test]
    fn exact_mode_tensors_must_fit() {
        use half::f16;
        let t = Tensor::f16([2], vec![f16::from_bits(0x1000), f16::from_bits(0x7bff)]).unwrap();
        assert_eq!(tensor_to_bytes(&t).unwrap(), vec![0x00, 0x10, 0xff, 0x7b]);
        let x = Tensor::new(DType::F16, [2], Data::F64(vec![2f64.powi(-11), 65504.0])).unwrap();
        assert_eq!(tensor_to_bytes(&x).unwrap(), vec![0x00, 0x10, 0xff, 0x7b]);
        let big = Tensor::new(DType::F16, [1], Data::F64(vec![1e6])).unwrap();
        assert!(tensor_to_bytes(&big).is_err(), "no silent saturation");
    }
}

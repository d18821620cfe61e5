//! Host values in JSON: how outfeed entries and checkpoint values are written and read.
//!
//! A tensor is written as nested arrays by its shape (a scalar is a bare number). Every
//! element is written exactly: an FP16 or FP32 value as the shortest decimal that reads back
//! to the same `f64` — which is the same value, so `0.00048828125` (2^-11) is printed in
//! full and reading it back gives the same bits. JSON has no NaN or infinities, so they are
//! written as the strings `"NaN"`, `"inf"` and `"-inf"` (and read back from them).

use serde::ser::{Serialize, SerializeSeq, Serializer};
use serde_json::Value;
use thiserror::Error;

/// One element as JSON: a number, or `"NaN"`, `"inf"`, `"-inf"`.
pub fn number(v: f64) -> Value {
    serde_json::to_value(Element(v)).unwrap_or(Value::Null)
}

/// Row-major `values` of `shape` as nested arrays (a scalar is one number).
pub fn nested(values: &[f64], shape: &[usize]) -> Value {
    serde_json::to_value(Nested { values, shape }).unwrap_or(Value::Null)
}

/// One element, serialised as [`number`] gives it: the one place the element encoding is
/// decided.
#[derive(Clone, Copy, Debug)]
pub struct Element(pub f64);

impl Serialize for Element {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if v.is_nan() {
            s.serialize_str("NaN")
        } else if v.is_infinite() {
            s.serialize_str(if v > 0.0 { "inf" } else { "-inf" })
        } else if v.fract() == 0.0 && v.abs() < 9.0e15 && !(v == 0.0 && v.is_sign_negative()) {
            // Integral values print without a trailing `.0` (labels, counts, u8 pixels); not
            // -0, which an integer cannot hold (it is written `-0.0`).
            s.serialize_i64(v as i64)
        } else {
            s.serialize_f64(v)
        }
    }
}

/// Row-major `values` of `shape` serialised as the nested arrays of [`nested`], written
/// straight to a serializer: a large outfeed goes to its JSON text without a tree of
/// [`Value`]s beside it (one `Value` per element is several times the values' own bytes).
/// Values missing for the shape are written as `null`.
#[derive(Clone, Copy, Debug)]
pub struct Nested<'a> {
    /// The elements, row-major.
    pub values: &'a [f64],
    /// Their shape (empty for a scalar).
    pub shape: &'a [usize],
}

impl Serialize for Nested<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.shape.split_first() {
            None => match self.values.first() {
                Some(&v) => Element(v).serialize(s),
                None => s.serialize_unit(),
            },
            Some((&n, rest)) => {
                let inner: usize = rest.iter().product();
                let mut seq = s.serialize_seq(Some(n))?;
                for i in 0..n {
                    let values = (i.checked_mul(inner))
                        .and_then(|a| self.values.get(a..a.checked_add(inner)?))
                        .unwrap_or_default();
                    seq.serialize_element(&Nested {
                        values,
                        shape: rest,
                    })?;
                }
                seq.end()
            }
        }
    }
}

/// The decimal text of one JSON element (a number or a non-finite string), for exact
/// conversion by [`crate::codec::push_text`]; `None` for anything else.
pub fn element_text(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) if matches!(s.as_str(), "NaN" | "nan" | "inf" | "-inf") => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Where nested arrays differ from a shape: the index path to the first difference
/// (outermost first) and what was found there.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{}{found}", index.iter().map(|i| format!("[{i}]: ")).collect::<String>())]
pub struct NestingError {
    /// The indices leading to the fault, outermost first.
    pub index: Vec<usize>,
    /// What is there instead.
    pub found: Nesting,
}

/// What [`flatten`] found where the shape says otherwise.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Nesting {
    /// An array where the shape has a scalar.
    #[error("an array where the shape has a scalar")]
    ArrayForScalar,
    /// An array of the wrong length.
    #[error("{found} elements where the shape has {expected}")]
    Length {
        /// The array's length.
        found: usize,
        /// The dimension.
        expected: usize,
    },
    /// A scalar where the shape has a dimension.
    #[error("a scalar where the shape has {expected} elements")]
    ScalarForArray {
        /// The dimension.
        expected: usize,
    },
}

/// The elements of nested arrays in row-major order, checking the nesting against `shape`;
/// the error says where the nesting differs.
pub fn flatten<'a>(
    v: &'a Value,
    shape: &[usize],
    out: &mut Vec<&'a Value>,
) -> Result<(), NestingError> {
    let fault = |found| NestingError {
        index: Vec::new(),
        found,
    };
    match shape.split_first() {
        None => {
            if v.is_array() {
                return Err(fault(Nesting::ArrayForScalar));
            }
            out.push(v);
            Ok(())
        }
        Some((&n, rest)) => match v.as_array() {
            Some(items) if items.len() == n => {
                for (i, item) in items.iter().enumerate() {
                    flatten(item, rest, out).map_err(|mut e| {
                        e.index.insert(0, i);
                        e
                    })?;
                }
                Ok(())
            }
            Some(items) => Err(fault(Nesting::Length {
                found: items.len(),
                expected: n,
            })),
            None => Err(fault(Nesting::ScalarForArray { expected: n })),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn exact_numbers_and_non_finite_strings() {
        assert_eq!(number(2f64.powi(-11)).to_string(), "0.00048828125");
        assert_eq!(number(65504.0).to_string(), "65504");
        assert_eq!(number(f64::NAN), json!("NaN"));
        assert_eq!(number(f64::NEG_INFINITY), json!("-inf"));
        assert_eq!(number(-0.0).to_string(), "-0.0");
        assert_eq!(number(0.0).to_string(), "0");
        assert_eq!(
            nested(&[1.0, 2.0, 3.0, 4.5, 5.0, 6.0], &[2, 3]),
            json!([[1, 2, 3], [4.5, 5, 6]])
        );
        assert_eq!(nested(&[0.25], &[]), json!(0.25));
    }

    #[test]
    fn flatten_checks_the_shape() {
        let v = json!([[1, 2], [3, "inf"]]);
        let mut out = Vec::new();
        flatten(&v, &[2, 2], &mut out).unwrap();
        let texts: Vec<_> = out.iter().map(|v| element_text(v).unwrap()).collect();
        assert_eq!(texts, ["1", "2", "3", "inf"]);
        let mut out = Vec::new();
        assert_eq!(
            flatten(&v, &[2, 3], &mut out).unwrap_err().to_string(),
            "[0]: 2 elements where the shape has 3"
        );
    }
}

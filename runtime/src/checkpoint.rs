//! Checkpoints: every variable of a session (weights and optimizer state) in one JSON file,
//! so training resumes where it stopped and trained weights can be used elsewhere.
//!
//! ```json
//! {
//!   "format": "ipusim-variables",
//!   "version": 1,
//!   "program": "mlp_digits",
//!   "precision": "16.32",
//!   "variables": [
//!     {"name": "w1", "dtype": "f32", "shape": [64, 32], "values": [[0.125, ...], ...]},
//!     ...
//!   ]
//! }
//! ```
//!
//! Values are nested by shape and written exactly ([`crate::json`]): reading a checkpoint
//! back gives bit-identical variables. Written atomically ([`crate::atomic`]).
//!
//! Loading validates before anything is changed: the file parses (errors give line and
//! column), every entry's values fit its own dtype and shape, and against the session's
//! variables every name exists with the same dtype and shape (a 16.32 checkpoint has FP32
//! weights; a 16.16 program wants FP16 ones — an error naming both). A session variable the
//! checkpoint lacks is an error (it would silently keep its initial value). A checkpoint
//! variable the session lacks is an error too, except when it is training state (gradient
//! accumulators, momentum, Adam moments) loaded by an inference session, which has none.

use crate::atomic::write_atomically_with;
use crate::codec::push_text;
use crate::json::{element_text, flatten, Nested};
use ipusim_ir::text::input::read_text;
use ipusim_ir::{DType, Shape, TensorType};
use ipusim_sim::tensor::Tensor;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use thiserror::Error;

/// The `format` field of a checkpoint.
pub const FORMAT: &str = "ipusim-variables";
/// The `version` field written.
pub const VERSION: u64 = 1;

/// A checkpoint fault; every variant names the file.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum CheckpointError {
    /// Not readable or not a checkpoint.
    #[error("{file}: error: {message}")]
    File {
        /// The checkpoint file.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// A fault of one variable of the file, or of the file against the session.
    #[error("{file}: error: variable '{name}': {message}")]
    Variable {
        /// The checkpoint file.
        file: String,
        /// The variable.
        name: String,
        /// What is wrong.
        message: String,
    },
}

/// Variables by name, with the program and precision they came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    /// The program's name.
    pub program: String,
    /// The precision policy, if any.
    pub precision: Option<String>,
    /// The variables, in the session's order.
    pub variables: Vec<(String, Tensor)>,
}

/// Whether a variable is training state an inference session does not have.
pub fn is_training_state(name: &str) -> bool {
    name.ends_with("/grad_accum")
        || name.ends_with("/momentum")
        || name.ends_with("/adam_m")
        || name.ends_with("/adam_v")
        || name.starts_with("adam/")
}

/// Largest checkpoint file read (bytes): 16 GiB of JSON, some 800 million values (ResNet-50
/// with its momentum writes 1.15 GB). Reading holds the text and one variable's values as
/// a tree of JSON values at a time.
pub const MAX_CHECKPOINT_BYTES: u64 = 16 << 30;

/// The most bytes a checkpoint of variables `types` can take: 256 bytes per element (a
/// value written in full takes at most 26 characters with its separator; a checkpoint may
/// hold an optimizer's state beside the weights, up to three times their elements, and
/// nesting brackets) and 4 KiB per variable, plus 1 MiB; our bound, so that a session does
/// not read gigabytes of something that is not its checkpoint.
pub fn checkpoint_limit(types: &[(String, TensorType)]) -> u64 {
    types
        .iter()
        .map(|(_, t)| {
            (t.num_elements() as u64)
                .saturating_mul(256)
                .saturating_add(4 << 10)
        })
        .fold(1 << 20, u64::saturating_add)
}

/// The document, written straight to a serializer (a checkpoint of a large model holds tens
/// of millions of values: no tree of `Value`s beside them). Keys in alphabetical order.
impl Serialize for Checkpoint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(5))?;
        m.serialize_entry("format", FORMAT)?;
        m.serialize_entry("precision", &self.precision)?;
        m.serialize_entry("program", &self.program)?;
        m.serialize_entry("variables", &Variables(&self.variables))?;
        m.serialize_entry("version", &VERSION)?;
        m.end()
    }
}

/// The variables of a checkpoint, in order.
struct Variables<'a>(&'a [(String, Tensor)]);

impl Serialize for Variables<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|(name, t)| Variable(name, t)))
    }
}

/// One variable of a checkpoint: `{"dtype", "name", "shape", "values"}`.
struct Variable<'a>(&'a str, &'a Tensor);

impl Serialize for Variable<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (name, t) = (self.0, self.1);
        let shape = t.shape().dims();
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("dtype", t.dtype().name())?;
        m.serialize_entry("name", name)?;
        m.serialize_entry("shape", shape)?;
        let values = t.to_f64_vec();
        m.serialize_entry(
            "values",
            &Nested {
                values: &values,
                shape,
            },
        )?;
        m.end()
    }
}

impl Checkpoint {
    /// The JSON document (what [`Checkpoint`]'s `Serialize` writes).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    /// Writes the file's text (the document and a newline) to `w`, value by value.
    pub fn write_to(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        serde_json::to_writer(&mut *w, self)?;
        w.write_all(b"\n")
    }

    /// Writes the checkpoint to `path`, whole or not at all (straight to the file: no text
    /// of the whole document first).
    pub fn save(&self, path: &Path) -> Result<(), CheckpointError> {
        write_atomically_with(path, |w| self.write_to(w)).map_err(|e| CheckpointError::File {
            file: path.display().to_string(),
            message: format!("cannot write the file: {}", e.source),
        })
    }

    /// Reads and checks a checkpoint file.
    pub fn load(path: &Path) -> Result<Checkpoint, CheckpointError> {
        Checkpoint::load_within(path, MAX_CHECKPOINT_BYTES)
    }

    /// [`Checkpoint::load`] reading at most `limit` bytes (a session reads at most what a
    /// checkpoint of its variables can take, [`checkpoint_limit`]).
    pub fn load_within(path: &Path, limit: u64) -> Result<Checkpoint, CheckpointError> {
        let file = path.display().to_string();
        let text = read_text(path, limit.min(MAX_CHECKPOINT_BYTES), "checkpoint").map_err(|e| {
            CheckpointError::File {
                file: file.clone(),
                message: e.to_string(),
            }
        })?;
        Checkpoint::parse(&text, &file)
    }

    /// [`Checkpoint::load`] on the text of a file named `file`.
    pub fn parse(text: &str, file: &str) -> Result<Checkpoint, CheckpointError> {
        let fail = |message: String| CheckpointError::File {
            file: file.to_string(),
            message,
        };
        // The document is checked whole, then read a variable at a time: only one
        // variable's values are ever a tree of `Value`s (the rest stay text).
        let raw: &RawValue = serde_json::from_str(text).map_err(|e| {
            fail(format!(
                "line {}, column {}: not valid JSON: {e}",
                e.line(),
                e.column()
            ))
        })?;
        let doc: BTreeMap<String, &RawValue> = serde_json::from_str(raw.get()).unwrap_or_default();
        let field = |key: &str| -> Option<Value> {
            doc.get(key)
                .and_then(|r| serde_json::from_str(r.get()).ok())
        };
        if field("format").as_ref().and_then(Value::as_str) != Some(FORMAT) {
            return Err(fail(format!(
                "not an ipusim checkpoint (expected \"format\": \"{FORMAT}\")"
            )));
        }
        match field("version").as_ref().and_then(Value::as_u64) {
            Some(VERSION) => {}
            v => {
                return Err(fail(format!(
                    "checkpoint version {} is not supported (this ipusim reads version {VERSION})",
                    v.map_or("missing".into(), |v| v.to_string())
                )))
            }
        }
        let entries: Vec<&RawValue> = (doc.get("variables"))
            .and_then(|r| serde_json::from_str(r.get()).ok())
            .ok_or_else(|| fail("\"variables\" must be an array".into()))?;
        let mut variables = Vec::with_capacity(entries.len());
        let mut seen = BTreeMap::new();
        for (i, raw) in entries.iter().enumerate() {
            // Its syntax was checked with the document's; what is left is a number out of
            // range.
            let entry: Value = serde_json::from_str(raw.get())
                .map_err(|e| fail(format!("variables[{i}]: not valid JSON: {e}")))?;
            let name = entry
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| fail(format!("variables[{i}] has no \"name\"")))?;
            let var = |message: String| CheckpointError::Variable {
                file: file.to_string(),
                name: name.to_string(),
                message,
            };
            if seen.insert(name.to_string(), i).is_some() {
                return Err(var("appears twice".into()));
            }
            let t = parse_tensor(&entry).map_err(var)?;
            variables.push((name.to_string(), t));
        }
        Ok(Checkpoint {
            program: (field("program").as_ref())
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            precision: (field("precision").as_ref())
                .and_then(Value::as_str)
                .map(str::to_string),
            variables,
        })
    }

    /// The checkpoint's tensors for a session whose variables are `expected`, in that order;
    /// `inference` allows (and skips) training state the session does not have.
    pub fn matching(
        &self,
        file: &str,
        expected: &[(String, TensorType)],
        inference: bool,
    ) -> Result<Vec<(String, Tensor)>, CheckpointError> {
        let by_name: BTreeMap<&str, &Tensor> = self
            .variables
            .iter()
            .map(|(n, t)| (n.as_str(), t))
            .collect();
        let var = |name: &str, message: String| CheckpointError::Variable {
            file: file.to_string(),
            name: name.to_string(),
            message,
        };
        let precision = |p: &Option<String>| p.clone().unwrap_or_else(|| "none".into());
        let mut out = Vec::with_capacity(expected.len());
        for (name, ty) in expected {
            let t = by_name.get(name.as_str()).ok_or_else(|| {
                var(
                    name,
                    format!(
                        "the program has this variable ({ty}) but the checkpoint (program '{}') \
                         does not",
                        self.program
                    ),
                )
            })?;
            if t.ty() != *ty {
                return Err(var(
                    name,
                    format!(
                        "is {} in the checkpoint (precision {}) but {ty} in this session",
                        t.ty(),
                        precision(&self.precision)
                    ),
                ));
            }
            out.push((name.clone(), (*t).clone()));
        }
        for (name, _) in &self.variables {
            let known = expected.iter().any(|(n, _)| n == name);
            let skipped = inference && is_training_state(name);
            if !known && !skipped {
                return Err(var(
                    name,
                    "is not a variable of this program (was the checkpoint written by another \
                     program?)"
                        .into(),
                ));
            }
        }
        Ok(out)
    }
}

/// Appends a JSON number that the parser read as exactly an FP16 or FP32 value (what
/// checkpoints hold), without reading its text again. The parser rounds the decimal
/// correctly to f64; when that is a value of the narrower type, it is also the decimal's
/// correct rounding there (the narrower type's neighbours are much farther away than half an
/// f64 unit), finite, so the exact decimal reading would give the same bits without a flag.
/// Anything else (other types, other values, strings) is left to that reading.
fn push_exact(dtype: DType, v: &Value, out: &mut Vec<u8>) -> bool {
    let Some(x) = v.as_f64() else { return false };
    match dtype {
        DType::F16 => {
            let h = half::f16::from_f64(x);
            let exact = h.to_f64() == x;
            if exact {
                out.extend_from_slice(&h.to_bits().to_le_bytes());
            }
            exact
        }
        DType::F32 => {
            let f = x as f32;
            let exact = f64::from(f) == x && f.is_finite();
            if exact {
                out.extend_from_slice(&f.to_le_bytes());
            }
            exact
        }
        _ => false,
    }
}

fn parse_tensor(entry: &Value) -> Result<Tensor, String> {
    let dtype_name = entry
        .get("dtype")
        .and_then(Value::as_str)
        .ok_or("has no \"dtype\"")?;
    let dtype = DType::ALL
        .into_iter()
        .find(|d| d.name() == dtype_name.to_ascii_lowercase())
        .ok_or_else(|| {
            format!(
                "unknown dtype '{}' (expected f16, f32, i32, u8 or bool)",
                ipusim_ir::text::input::clip(dtype_name)
            )
        })?;
    let shape: Vec<usize> = entry
        .get("shape")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().map(|d| d.as_u64().map(|d| d as usize)).collect())
        .ok_or("\"shape\" must be an array of non-negative integers")?;
    let values = entry.get("values").ok_or("has no \"values\"")?;
    let mut elements = Vec::new();
    flatten(values, &shape, &mut elements).map_err(|e| {
        format!(
            "\"values\"{}{e} (the entry declares {})",
            if e.index.is_empty() { ": " } else { "" },
            TensorType::new(dtype, shape.clone())
        )
    })?;
    let mut bytes = Vec::with_capacity(elements.len() * dtype.size_bytes());
    for (i, v) in elements.iter().enumerate() {
        if push_exact(dtype, v, &mut bytes) {
            continue;
        }
        let text = element_text(v).ok_or_else(|| {
            format!(
                "value {i} ({}) is not a number",
                ipusim_ir::text::input::clip(&v.to_string())
            )
        })?;
        push_text(dtype, &text, &mut bytes).map_err(|e| format!("value {i}: {e}"))?;
    }
    Tensor::from_bytes(dtype, Shape::from(shape), &bytes).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::number;
    use half::f16;

    fn sample() -> Checkpoint {
        Checkpoint {
            program: "p".into(),
            precision: Some("16.32".into()),
            variables: vec![
                (
                    "w".into(),
                    Tensor::f32([2, 2], vec![0.1, -2.5, f32::INFINITY, 1e-40]).unwrap(),
                ),
                (
                    "h".into(),
                    Tensor::f16(
                        [3],
                        vec![
                            f16::from_bits(0x1000),
                            f16::from_bits(0x7e00),
                            f16::NEG_ZERO,
                        ],
                    )
                    .unwrap(),
                ),
                (
                    "w/momentum".into(),
                    Tensor::f32([3], vec![0.5, -0.0, 0.0]).unwrap(),
                ),
            ],
        }
    }

    #[test]
    fn round_trips_bit_exactly() {
        let c = sample();
        let text = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::to_string(&c.to_json()).unwrap(), text);
        let back = Checkpoint::parse(&text, "c.json").unwrap();
        // Negative zeros keep their sign.
        let m = back.variables[2].1.as_f32().unwrap();
        assert_eq!((m[1].to_bits(), m[2].to_bits()), (0x8000_0000, 0));
        assert_eq!(back.variables[1].1.as_f16().unwrap()[2].to_bits(), 0x8000);
        assert_eq!(back.variables[2], c.variables[2]);
        assert_eq!(back.variables[0], c.variables[0]);
        let h = back.variables[1].1.as_f16().unwrap();
        assert_eq!((h[0].to_bits(), h[1].is_nan()), (0x1000, true));
        assert_eq!(back.precision.as_deref(), Some("16.32"));
    }

    #[test]
    fn numbers_read_as_exact_values_equal_the_exact_decimal_reading() {
        let mut texts: Vec<String> = [
            "0.1",
            "1.00000000000000000001",
            "0.99999999999999999999",
            "65504",
            "65519.99",
            "65520",
            "-65520",
            "-0.0",
            "-0",
            "0",
            "5.960464477539063e-8",
            "2.98e-8",
            "2.9802322387695312e-8",
            "3.4028235e38",
            "3.4028236e38",
            "1e-46",
            "1e-45",
            "1.401298464324817e-45",
            "0.00006103515625",
            "9007199254740993",
            "123456789012345678901234567890",
            "-7",
            "1e400",
            // Just above the midpoints after 1 (FP16, then FP32): the parser's f64 is the
            // midpoint itself, a value of neither type, so they are read as before.
            "1.000488281250000000001",
            "1.0000000596046447753906250001",
        ]
        .map(String::from)
        .to_vec();
        // Every 97th FP16 value and nearby FP32 values, as the writer prints them.
        for bits in (0..=u16::MAX).step_by(97) {
            let h = f16::from_bits(bits).to_f64();
            if h.is_finite() {
                texts.push(number(h).to_string());
                texts.push(number(h * (1.0 + 2f64.powi(-23))).to_string());
            }
        }
        for text in &texts {
            let Ok(v) = serde_json::from_str::<Value>(text) else {
                continue; // out of the parser's range: read as text
            };
            for dtype in [DType::F16, DType::F32] {
                let (mut fast, mut exact) = (Vec::new(), Vec::new());
                if push_exact(dtype, &v, &mut fast) {
                    let read = push_text(dtype, &element_text(&v).unwrap(), &mut exact);
                    assert_eq!((read.is_ok(), &fast), (true, &exact), "{text} as {dtype:?}");
                }
            }
        }
    }

    #[test]
    fn validation_names_file_and_variable() {
        let c = sample();
        let want = vec![
            ("w".to_string(), TensorType::new(DType::F16, [2, 2])),
            ("h".to_string(), TensorType::new(DType::F16, [3])),
        ];
        let e = c.matching("c.json", &want, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "c.json: error: variable 'w': is f32[2, 2] in the checkpoint (precision 16.32) but \
             f16[2, 2] in this session"
        );
        let want = vec![
            ("w".to_string(), TensorType::new(DType::F32, [2, 2])),
            ("h".to_string(), TensorType::new(DType::F16, [3])),
        ];
        let e = c.matching("c.json", &want, false).unwrap_err();
        assert!(
            e.to_string().contains("'w/momentum': is not a variable"),
            "{e}"
        );
        assert_eq!(c.matching("c.json", &want, true).unwrap().len(), 2);
        let mut more = want.clone();
        more.push(("b".into(), TensorType::new(DType::F32, [3])));
        let e = c.matching("c.json", &more, true).unwrap_err();
        assert!(
            e.to_string()
                .contains("variable 'b': the program has this variable"),
            "{e}"
        );
    }

    #[test]
    fn bad_files_are_clear_errors() {
        // A number beyond f64 passes the document's syntax check and is caught with its
        // variable's index.
        let doc = r#"{"format": "ipusim-variables", "version": 1, "variables": [
            {"name": "x", "dtype": "f32", "shape": [1], "values": [1e400]}]}"#;
        let e = Checkpoint::parse(doc, "c.json").unwrap_err().to_string();
        assert!(e.starts_with("c.json: error: "), "{e}");
        assert!(
            e.contains("variables[0]: not valid JSON: number out of range"),
            "{e}"
        );
        let e = Checkpoint::parse("{\"format\": ", "c.json").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("c.json: error: line 1, column 11: not valid JSON"),
            "{e}"
        );
        let e = Checkpoint::parse("{}", "c.json").unwrap_err();
        assert!(e.to_string().contains("not an ipusim checkpoint"), "{e}");
        let doc = r#"{"format": "ipusim-variables", "version": 1, "variables": [
            {"name": "x", "dtype": "u8", "shape": [2], "values": [1, 300]}]}"#;
        let e = Checkpoint::parse(doc, "c.json").unwrap_err();
        assert_eq!(
            e.to_string(),
            "c.json: error: variable 'x': value 1: '300' does not fit u8 (integers 0..=255)"
        );
        let doc = r#"{"format": "ipusim-variables", "version": 1, "variables": [
            {"name": "x", "dtype": "f32", "shape": [2, 2], "values": [[1, 2], [3]]}]}"#;
        let e = Checkpoint::parse(doc, "c.json").unwrap_err();
        assert!(
            e.to_string()
                .contains("\"values\"[1]: 1 elements where the shape has 2"),
            "{e}"
        );
        let doc = r#"{"format": "ipusim-variables", "version": 1, "variables": [
            {"name": "x", "dtype": "f32", "shape": [3], "values": [1, 2]}]}"#;
        let e = Checkpoint::parse(doc, "c.json").unwrap_err();
        assert!(
            e.to_string().contains(
                "\"values\": 2 elements where the shape has 3 (the entry declares f32[3])"
            ),
            "{e}"
        );
        let e = Checkpoint::load(Path::new("/no/such/ckpt.json")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("/no/such/ckpt.json: error: cannot read"),
            "{e}"
        );
    }
}

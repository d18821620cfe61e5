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

use crate::atomic::write_atomically;
use crate::codec::push_text;
use crate::json::{element_text, flatten, nested};
use ipusim_ir::text::input::read_text;
use ipusim_ir::{DType, Shape, TensorType};
use ipusim_sim::tensor::Tensor;
use serde_json::{json, Value};
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

/// Largest checkpoint file read (bytes): 1 GiB of JSON, some 50 million values.
pub const MAX_CHECKPOINT_BYTES: u64 = 1 << 30;

impl Checkpoint {
    /// The JSON document.
    pub fn to_json(&self) -> Value {
        let vars: Vec<Value> = self
            .variables
            .iter()
            .map(|(name, t)| {
                json!({
                    "name": name,
                    "dtype": t.dtype().name(),
                    "shape": t.shape().dims(),
                    "values": nested(&t.to_f64_vec(), t.shape().dims()),
                })
            })
            .collect();
        json!({
            "format": FORMAT,
            "version": VERSION,
            "program": self.program,
            "precision": self.precision,
            "variables": vars,
        })
    }

    /// Writes the checkpoint to `path`, whole or not at all.
    pub fn save(&self, path: &Path) -> Result<(), CheckpointError> {
        let text = serde_json::to_string(&self.to_json()).map_err(|e| CheckpointError::File {
            file: path.display().to_string(),
            message: e.to_string(),
        })?;
        write_atomically(path, (text + "\n").as_bytes()).map_err(|e| CheckpointError::File {
            file: path.display().to_string(),
            message: format!("cannot write the file: {}", e.source),
        })
    }

    /// Reads and checks a checkpoint file.
    pub fn load(path: &Path) -> Result<Checkpoint, CheckpointError> {
        let file = path.display().to_string();
        let text = read_text(path, MAX_CHECKPOINT_BYTES, "checkpoint").map_err(|e| {
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
        let doc: Value = serde_json::from_str(text).map_err(|e| {
            fail(format!(
                "line {}, column {}: not valid JSON: {e}",
                e.line(),
                e.column()
            ))
        })?;
        if doc.get("format").and_then(Value::as_str) != Some(FORMAT) {
            return Err(fail(format!(
                "not an ipusim checkpoint (expected \"format\": \"{FORMAT}\")"
            )));
        }
        match doc.get("version").and_then(Value::as_u64) {
            Some(VERSION) => {}
            v => {
                return Err(fail(format!(
                    "checkpoint version {} is not supported (this ipusim reads version {VERSION})",
                    v.map_or("missing".into(), |v| v.to_string())
                )))
            }
        }
        let entries = doc
            .get("variables")
            .and_then(Value::as_array)
            .ok_or_else(|| fail("\"variables\" must be an array".into()))?;
        let mut variables = Vec::with_capacity(entries.len());
        let mut seen = BTreeMap::new();
        for (i, entry) in entries.iter().enumerate() {
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
            let t = parse_tensor(entry).map_err(var)?;
            variables.push((name.to_string(), t));
        }
        Ok(Checkpoint {
            program: doc
                .get("program")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            precision: doc
                .get("precision")
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
            "\"values\"{e} (the variable is {})",
            TensorType::new(dtype, shape.clone())
        )
    })?;
    let mut bytes = Vec::with_capacity(elements.len() * dtype.size_bytes());
    for (i, v) in elements.iter().enumerate() {
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
                    Tensor::f16([2], vec![f16::from_bits(0x1000), f16::from_bits(0x7e00)]).unwrap(),
                ),
                ("w/momentum".into(), Tensor::f32([1], vec![0.5]).unwrap()),
            ],
        }
    }

    #[test]
    fn round_trips_bit_exactly() {
        let c = sample();
        let text = serde_json::to_string(&c.to_json()).unwrap();
        let back = Checkpoint::parse(&text, "c.json").unwrap();
        assert_eq!(back.variables[0], c.variables[0]);
        let h = back.variables[1].1.as_f16().unwrap();
        assert_eq!((h[0].to_bits(), h[1].is_nan()), (0x1000, true));
        assert_eq!(back.precision.as_deref(), Some("16.32"));
    }

    #[test]
    fn validation_names_file_and_variable() {
        let c = sample();
        let want = vec![
            ("w".to_string(), TensorType::new(DType::F16, [2, 2])),
            ("h".to_string(), TensorType::new(DType::F16, [2])),
        ];
        let e = c.matching("c.json", &want, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "c.json: error: variable 'w': is f32[2, 2] in the checkpoint (precision 16.32) but \
             f16[2, 2] in this session"
        );
        let want = vec![
            ("w".to_string(), TensorType::new(DType::F32, [2, 2])),
            ("h".to_string(), TensorType::new(DType::F16, [2])),
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
        let e = Checkpoint::load(Path::new("/no/such/ckpt.json")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("/no/such/ckpt.json: error: cannot read"),
            "{e}"
        );
    }
}

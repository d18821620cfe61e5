//! A node's attributes, decoded once and looked up by name with ONNX's defaults.

use crate::proto::{attribute_type as at, NodeProto};
use crate::tensor::{decode, ConstTensor};
use std::path::Path;

/// One attribute's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Float(f64),
    Int(i64),
    Str(String),
    Tensor(ConstTensor),
    Floats(Vec<f64>),
    Ints(Vec<i64>),
    /// A kind the importer does not read (graphs, string lists, ...), by its type number.
    Other(i32),
}

/// The attributes of one node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attrs {
    list: Vec<(String, Value)>,
}

impl Attrs {
    /// Decodes a node's attributes; a tensor attribute's data is checked like an
    /// initializer's.
    pub fn of(node: &NodeProto, dir: &Path) -> Result<Attrs, String> {
        let mut list = Vec::with_capacity(node.attribute.len());
        for a in &node.attribute {
            if !a.ref_attr_name.is_empty() {
                return Err(format!(
                    "attribute '{}' refers to a function's attribute, which only functions may do",
                    a.name
                ));
            }
            let v = match a.r#type {
                at::FLOAT => Value::Float(decimal(a.f)),
                at::INT => Value::Int(a.i),
                at::STRING => Value::Str(String::from_utf8_lossy(&a.s).into_owned()),
                at::TENSOR => {
                    let t = a
                        .t
                        .as_ref()
                        .ok_or_else(|| format!("tensor attribute '{}' has no tensor", a.name))?;
                    Value::Tensor(
                        decode(t, dir).map_err(|e| format!("attribute '{}': {e}", a.name))?,
                    )
                }
                at::FLOATS => Value::Floats(a.floats.iter().map(|&f| decimal(f)).collect()),
                at::INTS => Value::Ints(a.ints.clone()),
                other => Value::Other(other),
            };
            list.push((a.name.clone(), v));
        }
        Ok(Attrs { list })
    }

    fn get(&self, name: &str) -> Option<&Value> {
        self.list.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// The names present.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.list.iter().map(|(n, _)| n.as_str())
    }

    /// An integer attribute, or `default`.
    pub fn int(&self, name: &str, default: i64) -> i64 {
        match self.get(name) {
            Some(Value::Int(i)) => *i,
            _ => default,
        }
    }

    /// A float attribute, or `default`.
    pub fn float(&self, name: &str, default: f64) -> f64 {
        match self.get(name) {
            Some(Value::Float(f)) => *f,
            _ => default,
        }
    }

    /// A string attribute, or `default`.
    pub fn string<'a>(&'a self, name: &str, default: &'a str) -> &'a str {
        match self.get(name) {
            Some(Value::Str(s)) => s,
            _ => default,
        }
    }

    /// An integer-list attribute.
    pub fn ints(&self, name: &str) -> Option<Vec<i64>> {
        match self.get(name) {
            Some(Value::Ints(v)) => Some(v.clone()),
            _ => None,
        }
    }

    /// A float-list attribute.
    pub fn floats(&self, name: &str) -> Option<Vec<f64>> {
        match self.get(name) {
            Some(Value::Floats(v)) => Some(v.clone()),
            _ => None,
        }
    }

    /// A tensor attribute.
    pub fn tensor(&self, name: &str) -> Option<&ConstTensor> {
        match self.get(name) {
            Some(Value::Tensor(t)) => Some(t),
            _ => None,
        }
    }

    /// The first attribute not in `known`, if any.
    pub fn unknown(&self, known: &[&str]) -> Option<&str> {
        self.names().find(|n| !known.contains(n))
    }
}

/// A float attribute as the decimal its writer meant: the shortest decimal that reads back
/// as the same `f32`, as `f64` (an epsilon of `1e-5` stored as the FP32 `9.99999974e-6` is
/// `1e-5` again). ONNX stores float attributes in FP32; the IR keeps attributes in `f64`.
pub fn decimal(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(x as f64)
}

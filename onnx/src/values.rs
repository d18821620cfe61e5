//! The importer's state: the IR graph under construction, the ONNX values bound so far
//! ([`Val`]: a node, a known tensor, or an output that is not produced), the known tensors
//! and the nodes made of them in each layout, and the helpers every converter uses.

use crate::proto::data_type as dt;
use crate::tensor::ConstTensor;
use ipusim_ir::{DType, Graph, Init, Literal, NodeId, Op, Shape};
use std::collections::HashMap;
use std::path::Path;

/// A value of the ONNX graph as the importer holds it.
#[derive(Clone, Debug)]
pub enum Val {
    /// A node of the IR graph.
    Node(NodeId),
    /// A known tensor ([`Importer::consts`]), made a node when an op needs one.
    Const(usize),
    /// An output the importer does not produce (a Dropout mask, pooling indices, ...): the
    /// reason, for the error if something reads it.
    Unavailable(String),
}

/// How a known tensor is laid out as a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// As in the file.
    Natural,
    /// A 2-D tensor transposed (a `Gemm` operand with `transA`/`transB`).
    Transposed,
    /// The same elements in another shape (a `Conv` bias as `[O, 1, 1]`).
    Dims(Vec<usize>),
}

/// A known tensor and the nodes made of it.
pub struct Const {
    pub t: ConstTensor,
    /// Its name in the model.
    pub name: String,
    /// A trainable initializer (never folded away).
    pub trainable: bool,
    /// An initializer (a variable when it must be state).
    pub initializer: bool,
    pub made: Vec<(Layout, NodeId)>,
}

/// The conversion state.
pub struct Importer<'a> {
    pub dir: &'a Path,
    pub opset: i64,
    pub g: Graph,
    pub consts: Vec<Const>,
    pub vals: HashMap<String, Val>,
    /// Reshapes the importer made: the node reshaped (so that chains collapse).
    pub reshaped: HashMap<NodeId, NodeId>,
}

/// The IR dtype of an ONNX element type: FLOAT and DOUBLE are F32, the integers I32.
pub fn ir_dtype(elem: i32) -> Result<DType, String> {
    Ok(match elem {
        dt::FLOAT | dt::DOUBLE => DType::F32,
        dt::FLOAT16 => DType::F16,
        dt::INT64 | dt::INT32 | dt::INT16 | dt::INT8 | dt::UINT16 => DType::I32,
        dt::UINT8 => DType::U8,
        dt::BOOL => DType::Bool,
        other => return Err(format!("element type {} is not supported", dt::name(other))),
    })
}

impl Importer<'_> {
    /// Adds an IR node named `name` (made unique).
    pub fn add(&mut self, name: &str, op: Op, inputs: &[NodeId]) -> Result<NodeId, String> {
        let mut unique = name.to_string();
        let mut k = 1;
        while self.g.find(&unique).is_some() {
            k += 1;
            unique = format!("{name}_{k}");
        }
        self.g
            .add_node(unique, op, inputs)
            .map_err(|e| e.to_string())
    }

    pub fn bind_const(
        &mut self,
        name: &str,
        t: ConstTensor,
        trainable: bool,
        initializer: bool,
    ) -> Result<(), String> {
        if self.vals.contains_key(name) {
            return Err(format!("the name '{name}' is defined twice"));
        }
        self.consts.push(Const {
            t,
            name: name.to_string(),
            trainable,
            initializer,
            made: Vec::new(),
        });
        self.vals
            .insert(name.to_string(), Val::Const(self.consts.len() - 1));
        Ok(())
    }

    /// The value named `name`, read by node `reader` (an index into the file's nodes).
    pub fn val(
        &self,
        name: &str,
        producers: &HashMap<&str, usize>,
        reader: usize,
    ) -> Result<Val, String> {
        match self.vals.get(name) {
            Some(Val::Unavailable(why)) => Err(why.clone()),
            Some(v) => Ok(v.clone()),
            None => match producers.get(name) {
                Some(&p) if p >= reader || reader == usize::MAX => Err(format!(
                    "value '{name}' is read before node {p} produces it: the graph has a cycle or is not in topological order"
                )),
                _ => Err(format!(
                    "value '{name}' is never produced (it is not a graph input, an initializer or a node's output)"
                )),
            },
        }
    }

    /// The known tensor of a value, if it is one.
    pub fn known(&self, v: &Val) -> Option<&ConstTensor> {
        match v {
            Val::Const(i) => Some(&self.consts[*i].t),
            _ => None,
        }
    }

    /// The IR type of a value.
    pub fn dims(&self, v: &Val) -> Vec<usize> {
        match v {
            Val::Node(id) => self.g.node(*id).ty.shape.dims().to_vec(),
            Val::Const(i) => self.consts[*i].t.dims.clone(),
            Val::Unavailable(_) => Vec::new(),
        }
    }

    /// A value as a node in `layout`; a known tensor becomes a variable (a trainable
    /// initializer, or `state`) or a constant, once per layout.
    pub fn node_of(&mut self, v: &Val, layout: Layout, state: bool) -> Result<NodeId, String> {
        let i = match v {
            Val::Node(id) if layout == Layout::Natural => return Ok(*id),
            Val::Node(id) => return self.relayout(*id, &layout, "relayout"),
            Val::Unavailable(why) => return Err(why.clone()),
            Val::Const(i) => *i,
        };
        if let Some(&(_, id)) = self.consts[i].made.iter().find(|(l, _)| *l == layout) {
            return Ok(id);
        }
        let c = &self.consts[i];
        let variable = c.trainable || (state && c.initializer);
        if variable && !c.made.is_empty() {
            // One variable per initializer: other layouts are ops on it.
            let first = c.made[0].1;
            let id = self.relayout(first, &layout, &format!("{}/relayout", c.name))?;
            self.consts[i].made.push((layout, id));
            return Ok(id);
        }
        let t = match &layout {
            Layout::Natural => c.t.clone(),
            Layout::Transposed if c.t.dims.len() == 2 => crate::fold::transpose(&c.t, &[1, 0]),
            Layout::Transposed => {
                return Err(format!("'{}' is not 2-D and cannot be transposed", c.name))
            }
            Layout::Dims(d) => ConstTensor {
                dims: d.clone(),
                ..c.t.clone()
            },
        };
        let dtype = ir_dtype(t.elem).map_err(|e| format!("'{}': {e}", c.name))?;
        if dtype == DType::I32 {
            if let Some(v) = t
                .values
                .iter()
                .find(|v| !(f64::from(i32::MIN)..=f64::from(i32::MAX)).contains(v))
            {
                return Err(format!(
                    "'{}' holds {v}, which does not fit the IR's 32-bit integers",
                    c.name
                ));
            }
        }
        let shape = Shape::from(t.dims.clone());
        let op = if variable {
            Op::Variable {
                dtype,
                shape,
                init: Init::Values(t.values),
            }
        } else {
            Op::Constant {
                dtype,
                shape,
                value: Literal::Values(t.values),
            }
        };
        let name = c.name.clone();
        let id = self.add(&name, op, &[])?;
        self.consts[i].made.push((layout, id));
        Ok(id)
    }

    fn relayout(&mut self, id: NodeId, layout: &Layout, name: &str) -> Result<NodeId, String> {
        match layout {
            Layout::Natural => Ok(id),
            Layout::Transposed => self.add(name, Op::Transpose { perm: vec![1, 0] }, &[id]),
            Layout::Dims(d) => self.reshape(name, &Val::Node(id), d),
        }
    }

    /// `v` reshaped to `dims`; a reshape of a reshape the importer made reshapes the
    /// original, and a reshape to the original's shape is the original.
    pub fn reshape(&mut self, name: &str, v: &Val, dims: &[usize]) -> Result<NodeId, String> {
        let mut id = self.node_of(v, Layout::Natural, false)?;
        if let Some(&src) = self.reshaped.get(&id) {
            id = src;
        }
        if self.g.node(id).ty.shape.dims() == dims {
            return Ok(id);
        }
        let out = self.add(
            name,
            Op::Reshape {
                shape: Shape::from(dims.to_vec()),
            },
            &[id],
        )?;
        self.reshaped.insert(out, id);
        Ok(out)
    }
}

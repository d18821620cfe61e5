//! Writing models: a small builder for ONNX graphs in code, and [`export`], which writes an
//! IR program's forward graph as an ONNX model the way PyTorch's exporter would (scoped node
//! names, `Gemm` with `transB` for dense layers, `GlobalAveragePool` then `Flatten`, batch
//! norm's momentum in ONNX's sense).
//!
//! The tests make every ONNX file they read with this module (no Python, no network); users
//! get `ipusim export` to hand a zoo model to other ONNX tools.

use crate::proto::{
    attribute_type as at, data_type as dt, tensor_shape_proto, type_proto, AttributeProto,
    GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto,
    TypeProto, ValueInfoProto,
};
use crate::tensor::{encode, ConstTensor};
use ipusim_ir::{DType, Graph, Init, NodeId, Op, Program, TensorType};
use std::collections::{HashMap, HashSet};

/// An integer attribute.
pub fn attr_int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: at::INT,
        i: v,
        ..Default::default()
    }
}

/// An integer-list attribute.
pub fn attr_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: at::INTS,
        ints: v.to_vec(),
        ..Default::default()
    }
}

/// A float attribute.
pub fn attr_float(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: at::FLOAT,
        f: v,
        ..Default::default()
    }
}

/// A string attribute.
pub fn attr_string(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: at::STRING,
        s: v.as_bytes().to_vec(),
        ..Default::default()
    }
}

/// A tensor attribute.
pub fn attr_tensor(name: &str, t: &ConstTensor) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: at::TENSOR,
        t: Some(encode("", t)),
        ..Default::default()
    }
}

/// A node.
pub fn node(
    op_type: &str,
    name: &str,
    inputs: &[&str],
    outputs: &[&str],
    attrs: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: name.into(),
        op_type: op_type.into(),
        attribute: attrs,
        ..Default::default()
    }
}

/// A tensor value's name and type; `None` dimensions are symbolic (named `batch_size`).
pub fn value_info(name: &str, elem: i32, dims: &[Option<usize>]) -> ValueInfoProto {
    use tensor_shape_proto::{dimension::Value as D, Dimension};
    let dim = dims
        .iter()
        .map(|d| Dimension {
            value: Some(match d {
                Some(v) => D::DimValue(*v as i64),
                None => D::DimParam("batch_size".into()),
            }),
            denotation: String::new(),
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: elem,
                shape: Some(TensorShapeProto { dim }),
            })),
            denotation: String::new(),
        }),
        doc_string: String::new(),
    }
}

/// The dimensions of a graph input or output, the first as the symbol `batch_size` when
/// `symbolic_batch`.
fn io_dims(dims: &[usize], symbolic_batch: bool) -> Vec<Option<usize>> {
    dims.iter()
        .enumerate()
        .map(|(i, &d)| (!(symbolic_batch && i == 0)).then_some(d))
        .collect()
}

/// A model of `graph` at `opset` of the standard domain.
pub fn model(graph: GraphProto, opset: i64) -> ModelProto {
    ModelProto {
        ir_version: 8,
        producer_name: "ipusim".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        graph: Some(graph),
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opset,
        }],
        ..Default::default()
    }
}

/// The model's bytes.
pub fn to_bytes(model: &ModelProto) -> Vec<u8> {
    prost::Message::encode_to_vec(model)
}

/// The ONNX element type of an IR dtype.
pub fn onnx_type(d: DType) -> i32 {
    match d {
        DType::F16 => dt::FLOAT16,
        DType::F32 => dt::FLOAT,
        DType::I32 => dt::INT32,
        DType::U8 => dt::UINT8,
        DType::Bool => dt::BOOL,
    }
}

/// PyTorch's scoped name of a node of module path `path` (`layer1.0.conv1` →
/// `/layer1/layer1.0/conv1/Conv`); the importer reads it back as `layer1.0.conv1/Conv`.
fn torch_name(path: &str, op_type: &str) -> String {
    let mut scopes: Vec<String> = Vec::new();
    for part in path.split('.') {
        match scopes.last_mut() {
            Some(last) if part.chars().all(|c| c.is_ascii_digit()) => {
                let merged = format!("{last}.{part}");
                scopes.push(merged);
            }
            _ => scopes.push(part.to_string()),
        }
    }
    // `layer1.0` replaces `layer1` only as the scope of its block's children: keep both,
    // as PyTorch does (`/layer1/layer1.0/...`).
    format!("/{}/{op_type}", scopes.join("/"))
}

/// Gives a variable's initial values from its name, type and initialiser.
pub type Values<'a> = dyn FnMut(&str, &TensorType, &Init) -> Result<Vec<f64>, String> + 'a;

/// Exports the forward graph of `program` as an ONNX model (opset 13). The outputs are the
/// loss's logits (for a training program) and what the outfeeds carry, the loss excepted;
/// nodes nothing of that depends on (labels, the loss) are left out. `values` gives each
/// variable's initial values (the simulator's materialisation, for a bit-exact round
/// trip). `symbolic_batch` writes the inputs' first dimension as `batch_size`.
pub fn export(
    program: &Program,
    values: &mut Values<'_>,
    symbolic_batch: bool,
) -> Result<ModelProto, String> {
    let g = &program.graph;
    let loss = program.training.as_ref().and_then(|t| g.find(&t.loss));
    let mut outputs: Vec<NodeId> = Vec::new();
    if let Some(l) = loss {
        outputs.push(g.node(l).inputs[0]);
    }
    for (_, n) in g.nodes() {
        if let Op::Outfeed { .. } = n.op {
            if Some(n.inputs[0]) != loss && !outputs.contains(&n.inputs[0]) {
                outputs.push(n.inputs[0]);
            }
        }
    }
    let mut live = HashSet::new();
    let mut stack = outputs.clone();
    while let Some(id) = stack.pop() {
        if live.insert(id) {
            stack.extend(g.node(id).inputs.iter().copied());
        }
    }
    let mut ex = Exporter {
        g,
        out: GraphProto {
            name: program.name.clone(),
            ..Default::default()
        },
        names: HashMap::new(),
        fused: HashSet::new(),
    };
    for id in g.program_order() {
        if live.contains(&id) && !ex.fused.contains(&id) {
            ex.node(id, &live, values, symbolic_batch)?;
        }
    }
    for &o in &outputs {
        let n = g.node(o);
        let dims = io_dims(n.ty.shape.dims(), symbolic_batch);
        ex.out
            .output
            .push(value_info(&ex.names[&o], onnx_type(n.ty.dtype), &dims));
    }
    Ok(model(ex.out, 13))
}

struct Exporter<'a> {
    g: &'a Graph,
    out: GraphProto,
    names: HashMap<NodeId, String>,
    /// Nodes written as part of an earlier one (a `MatMul` in its `Gemm`).
    fused: HashSet<NodeId>,
}

impl Exporter<'_> {
    fn emit(
        &mut self,
        id: NodeId,
        op_type: &str,
        inputs: &[String],
        attrs: Vec<AttributeProto>,
    ) -> String {
        let name = torch_name(&self.g.node(id).name, op_type);
        let output = format!("{name}_output_0");
        let ins: Vec<&str> = inputs.iter().map(String::as_str).collect();
        self.out
            .node
            .push(node(op_type, &name, &ins, &[&output], attrs));
        self.names.insert(id, output.clone());
        output
    }

    fn node(
        &mut self,
        id: NodeId,
        live: &HashSet<NodeId>,
        values: &mut Values<'_>,
        symbolic_batch: bool,
    ) -> Result<(), String> {
        let g = self.g;
        let n = g.node(id);
        let ins: Vec<String> = n
            .inputs
            .iter()
            .map(|i| self.names.get(i).cloned().unwrap_or_default())
            .collect();
        let ints = |v: &[usize]| v.iter().map(|&x| x as i64).collect::<Vec<_>>();
        let pads = |p: &[usize]| if p.is_empty() { vec![0; 4] } else { ints(p) };
        match &n.op {
            Op::Input { dtype, shape, .. } => {
                let dims = io_dims(shape.dims(), symbolic_batch);
                self.out
                    .input
                    .push(value_info(&n.name, onnx_type(*dtype), &dims));
                self.names.insert(id, n.name.clone());
            }
            Op::Variable { .. } | Op::Constant { .. } => {
                let v = match &n.op {
                    Op::Constant {
                        value: ipusim_ir::Literal::Values(v),
                        ..
                    } => v.clone(),
                    Op::Constant {
                        value: ipusim_ir::Literal::Splat(v),
                        ..
                    } => vec![*v; n.ty.num_elements()],
                    Op::Variable { init, .. } => values(&n.name, &n.ty, init)?,
                    _ => unreachable!("matched above"),
                };
                let t = ConstTensor {
                    elem: onnx_type(n.ty.dtype),
                    dims: n.ty.shape.dims().to_vec(),
                    values: v,
                };
                // A dense layer's weight is written as PyTorch holds it, [out, in], for
                // `Gemm(transB = 1)`.
                let gemm = g.consumers(id).iter().any(|&c| self.is_gemm(c, live));
                let t = if gemm {
                    crate::fold::transpose(&t, &[1, 0])
                } else {
                    t
                };
                self.out.initializer.push(encode(&n.name, &t));
                self.names.insert(id, n.name.clone());
            }
            Op::Conv2d {
                stride,
                padding,
                dilation,
                groups,
            } => {
                let d = if dilation.is_empty() {
                    vec![1, 1]
                } else {
                    ints(dilation)
                };
                let k = g.node(n.inputs[1]).ty.shape.dims()[2..].to_vec();
                let attrs = vec![
                    attr_ints("dilations", &d),
                    attr_int("group", *groups as i64),
                    attr_ints("kernel_shape", &ints(&k)),
                    attr_ints("pads", &pads(padding)),
                    attr_ints(
                        "strides",
                        &if stride.is_empty() {
                            vec![1, 1]
                        } else {
                            ints(stride)
                        },
                    ),
                ];
                self.emit(id, "Conv", &ins, attrs);
            }
            Op::BatchNorm { epsilon, momentum } => {
                let attrs = vec![
                    attr_float("epsilon", *epsilon as f32),
                    attr_float("momentum", (1.0 - *momentum) as f32),
                ];
                self.emit(id, "BatchNormalization", &ins, attrs);
            }
            Op::MaxPool2d {
                kernel,
                stride,
                padding,
            }
            | Op::AvgPool2d {
                kernel,
                stride,
                padding,
                ..
            } => {
                let s = if stride.is_empty() {
                    ints(kernel)
                } else {
                    ints(stride)
                };
                let mut attrs = vec![
                    attr_ints("kernel_shape", &ints(kernel)),
                    attr_ints("pads", &pads(padding)),
                    attr_ints("strides", &s),
                ];
                let op_type = if let Op::AvgPool2d {
                    count_include_pad, ..
                } = n.op
                {
                    attrs.push(attr_int("count_include_pad", i64::from(count_include_pad)));
                    "AveragePool"
                } else {
                    "MaxPool"
                };
                self.emit(id, op_type, &ins, attrs);
            }
            Op::GlobalAvgPool => {
                let pooled = self.emit(id, "GlobalAveragePool", &ins, vec![]);
                let name = torch_name(&n.name, "Flatten").replace("/Flatten", "/flatten/Flatten");
                let output = format!("{name}_output_0");
                self.out.node.push(node(
                    "Flatten",
                    &name,
                    &[&pooled],
                    &[&output],
                    vec![attr_int("axis", 1)],
                ));
                self.names.insert(id, output);
            }
            Op::MatMul if self.gemm_bias(id, live).is_some() => {
                let add = self.gemm_bias(id, live).expect("checked");
                let b = g
                    .node(add)
                    .inputs
                    .iter()
                    .copied()
                    .find(|&i| i != id)
                    .expect("an Add has two inputs");
                self.fused.insert(add);
                let bias = self
                    .names
                    .get(&b)
                    .cloned()
                    .ok_or("the bias is not written before its Gemm")?;
                let out = self.emit(
                    add,
                    "Gemm",
                    &[ins[0].clone(), ins[1].clone(), bias],
                    vec![
                        attr_float("alpha", 1.0),
                        attr_float("beta", 1.0),
                        attr_int("transB", 1),
                    ],
                );
                self.names.insert(id, out);
            }
            op => {
                let (op_type, attrs) = match op {
                    Op::Relu => ("Relu", vec![]),
                    Op::Sigmoid => ("Sigmoid", vec![]),
                    Op::Tanh => ("Tanh", vec![]),
                    Op::Add => ("Add", vec![]),
                    Op::Sub => ("Sub", vec![]),
                    Op::Mul => ("Mul", vec![]),
                    Op::Div => ("Div", vec![]),
                    Op::MatMul => ("MatMul", vec![]),
                    Op::Softmax { axis } => ("Softmax", vec![attr_int("axis", *axis as i64)]),
                    Op::LogSoftmax { axis } => ("LogSoftmax", vec![attr_int("axis", *axis as i64)]),
                    Op::Transpose { perm } => ("Transpose", vec![attr_ints("perm", &ints(perm))]),
                    Op::Flatten { axis } => ("Flatten", vec![attr_int("axis", *axis as i64)]),
                    Op::Reshape { shape } => {
                        let spec = format!("{}/shape", n.name);
                        self.out
                            .initializer
                            .push(encode(&spec, &ConstTensor::ints(&ints(shape.dims()))));
                        let out = self.emit(id, "Reshape", &[ins[0].clone(), spec], vec![]);
                        let _ = out;
                        return Ok(());
                    }
                    other => {
                        return Err(format!(
                            "node '{}': op {} has no ONNX export",
                            n.name,
                            other.name()
                        ))
                    }
                };
                self.emit(id, op_type, &ins, attrs);
            }
        }
        Ok(())
    }

    /// A `MatMul` of a 2-D variable whose only reader adds a 1-D variable: a dense layer,
    /// written as one `Gemm`.
    fn gemm_bias(&self, id: NodeId, live: &HashSet<NodeId>) -> Option<NodeId> {
        let g = self.g;
        let n = g.node(id);
        let w = g.node(*n.inputs.get(1)?);
        if !matches!(n.op, Op::MatMul)
            || !matches!(w.op, Op::Variable { .. })
            || w.ty.shape.rank() != 2
            || n.ty.shape.rank() != 2
        {
            return None;
        }
        let readers: Vec<NodeId> = g
            .consumers(id)
            .into_iter()
            .filter(|c| live.contains(c))
            .collect();
        let [add] = readers[..] else { return None };
        let a = g.node(add);
        let bias = a.inputs.iter().copied().find(|&i| i != id)?;
        let b = g.node(bias);
        (matches!(a.op, Op::Add)
            && a.inputs[0] == id
            && matches!(b.op, Op::Variable { .. })
            && b.ty.shape.rank() == 1)
            .then_some(add)
    }

    fn is_gemm(&self, reader: NodeId, live: &HashSet<NodeId>) -> bool {
        self.gemm_bias(reader, live).is_some()
    }
}

/// A `TensorProto` holding `values` (for tests writing initializers by hand).
pub fn initializer(name: &str, elem: i32, dims: &[usize], values: &[f64]) -> TensorProto {
    encode(
        name,
        &ConstTensor {
            elem,
            dims: dims.to_vec(),
            values: values.to_vec(),
        },
    )
}

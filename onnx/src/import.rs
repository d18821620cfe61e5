//! The importer: an ONNX `ModelProto` to an [`ipusim_ir::Program`].
//!
//! - Graph inputs (those that are not initializers) become `Input` nodes and infeed streams
//!   of the same name, with synthetic data sources; symbolic dimensions are bound by
//!   [`Options::input_shapes`] (`--input-shape name=1x3x224x224`).
//! - Initializers become variables holding their values ([`ipusim_ir::Init::Values`]) —
//!   trainable unless frozen ([`Weights`]) — or constants; integer ones are constants.
//!   Batch-norm running statistics are always variables (the state the training step
//!   updates).
//! - Nodes are converted one by one, in the file's order (ONNX requires a topological
//!   order): the shape computations exporters emit are folded to constants ([`crate::fold`]),
//!   everything else becomes IR ops ([`crate::ops`]).
//! - Graph outputs become outfeeds; with a [`Training`] spec one output is the logits of a
//!   softmax cross-entropy loss against a labels stream, as PopART's `TrainingSession`
//!   builds a loss over a model's output.
//! - Nodes no output depends on are dropped.

use crate::attr::Attrs;
use crate::error::ImportError;
use crate::fold::{fold, FOLDED};
use crate::proto::{data_type as dt, type_proto, ModelProto, NodeProto, ValueInfoProto};
use crate::tensor::{decode, ConstTensor};
use crate::values::{ir_dtype, Importer, Layout, Val};
use ipusim_ir::{
    DType, DataSource, Graph, InfeedSpec, LossReduction, NodeId, Op, Optimizer, Precision, Program,
    Shape, TrainingSpec,
};
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// The oldest and newest versions of the standard operator set the importer reads.
pub const OPSETS: std::ops::RangeInclusive<i64> = 11..=18;

/// The op types the importer converts (some only on constant inputs; see
/// `docs/onnx.md`).
pub const SUPPORTED: &[&str] = &[
    "Abs",
    "Add",
    "AveragePool",
    "BatchNormalization",
    "Cast",
    "Clip",
    "Concat",
    "Constant",
    "ConstantOfShape",
    "Conv",
    "Div",
    "Dropout",
    "Exp",
    "Flatten",
    "Gather",
    "Gemm",
    "GlobalAveragePool",
    "Identity",
    "Log",
    "LogSoftmax",
    "MatMul",
    "MaxPool",
    "Mul",
    "Neg",
    "Pad",
    "ReduceMean",
    "Relu",
    "Reshape",
    "Shape",
    "Sigmoid",
    "Slice",
    "Softmax",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Tanh",
    "Transpose",
    "Unsqueeze",
];

/// Which initializers become trainable variables.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Weights {
    /// Every floating-point initializer (the default).
    #[default]
    Trainable,
    /// None: every initializer is a constant (`--frozen`).
    Frozen,
    /// Only these (`--trainable a,b`); the others are constants.
    Only(Vec<String>),
}

/// A training step built over the model (`--training`).
#[derive(Clone, Debug, PartialEq)]
pub struct Training {
    /// The output that holds the logits; `None`: the model's only output.
    pub output: Option<String>,
    /// The labels stream (I32, one label per sample).
    pub labels: String,
    /// The optimizer.
    pub optimizer: Optimizer,
    /// The loss scaling factor.
    pub loss_scaling: f64,
    /// The precision policy.
    pub precision: Precision,
}

impl Default for Training {
    /// The model zoo's defaults (`ipusim model`): momentum SGD (0.01, 0.9), loss scaling 128,
    /// 16.16.
    fn default() -> Training {
        Training {
            output: None,
            labels: "labels".into(),
            optimizer: Optimizer::Momentum {
                learning_rate: 0.01,
                momentum: 0.9,
            },
            loss_scaling: 128.0,
            precision: Precision::P16_16,
        }
    }
}

/// Import options.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    /// The program's name; default the graph's, else the file's stem.
    pub name: Option<String>,
    /// Shapes of inputs by name, binding their symbolic dimensions.
    pub input_shapes: Vec<(String, Vec<usize>)>,
    /// Which initializers are trainable.
    pub weights: Weights,
    /// A training step over an output, if wanted.
    pub training: Option<Training>,
}

/// The largest model file read (2 GiB: protocol buffers' own limit on a message).
pub const MAX_MODEL_BYTES: u64 = 2 << 30;

/// Reads and decodes a model file.
pub fn read_model(path: &Path) -> Result<ModelProto, ImportError> {
    let file = path.display().to_string();
    let size = std::fs::metadata(path)
        .map_err(|e| ImportError::file(&file, format!("cannot read the model: {e}")))?
        .len();
    if size > MAX_MODEL_BYTES {
        return Err(ImportError::file(
            &file,
            format!("the model is {size} bytes; ONNX files hold at most 2 GiB (larger models keep their weights in external data files)"),
        ));
    }
    let bytes = std::fs::read(path)
        .map_err(|e| ImportError::file(&file, format!("cannot read the model: {e}")))?;
    decode_model(&bytes, &file)
}

/// Decodes a model's bytes; `file` names it in errors.
pub fn decode_model(bytes: &[u8], file: &str) -> Result<ModelProto, ImportError> {
    use prost::Message;
    let model = ModelProto::decode(bytes).map_err(|e| {
        ImportError::file(
            file,
            format!("not an ONNX model (the protocol-buffers decoder says: {e})"),
        )
    })?;
    if model.graph.is_none() {
        return Err(ImportError::file(
            file,
            "the model has no graph (is this an ONNX file?)",
        ));
    }
    Ok(model)
}

/// The model's version of the standard operator set, checked against [`OPSETS`]; another
/// domain's operator set is an error when a node uses it.
pub fn opset(model: &ModelProto, file: &str) -> Result<i64, ImportError> {
    let standard = model
        .opset_import
        .iter()
        .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version);
    match standard {
        None if model.ir_version < 3 => Ok(*OPSETS.start()),
        None => Err(ImportError::file(file, "the model imports no version of the standard operator set (opset_import has no entry for domain \"\")")),
        Some(v) if OPSETS.contains(&v) => Ok(v),
        Some(v) => Err(ImportError::file(
            file,
            format!(
                "opset {v} of the standard domain is not supported (supported: {} to {})",
                OPSETS.start(),
                OPSETS.end()
            ),
        )),
    }
}

/// Reads and imports a model file.
pub fn load(path: &Path, options: &Options) -> Result<Program, ImportError> {
    let model = read_model(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    import(&model, &path.display().to_string(), dir, &stem, options)
}

/// One op type's count in a model and whether the importer converts it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpCount {
    /// The op type (with its domain when not the standard one).
    pub op_type: String,
    /// Nodes of that type.
    pub count: usize,
    /// True when the importer converts it.
    pub supported: bool,
}

/// Every op type of a model with its count, in order of first use (`ipusim import --check`).
pub fn coverage(model: &ModelProto) -> Vec<OpCount> {
    let mut out: Vec<OpCount> = Vec::new();
    for n in model.graph.iter().flat_map(|g| &g.node) {
        let standard = n.domain.is_empty() || n.domain == "ai.onnx";
        let op_type = if standard {
            n.op_type.clone()
        } else {
            format!("{}::{}", n.domain, n.op_type)
        };
        match out.iter_mut().find(|c| c.op_type == op_type) {
            Some(c) => c.count += 1,
            None => out.push(OpCount {
                supported: standard && SUPPORTED.contains(&n.op_type.as_str()),
                op_type,
                count: 1,
            }),
        }
    }
    out
}

/// Imports a decoded model; `file` names it in errors, `dir` resolves external data, `stem`
/// is the default program name.
pub fn import(
    model: &ModelProto,
    file: &str,
    dir: &Path,
    stem: &str,
    options: &Options,
) -> Result<Program, ImportError> {
    let opset = opset(model, file)?;
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| ImportError::file(file, "the model has no graph"))?;
    if let Some(s) = graph.sparse_initializer.first() {
        let name = s.values.as_ref().map(|v| v.name.as_str()).unwrap_or("");
        return Err(ImportError::at(
            file,
            format!("sparse initializer '{name}'"),
            "sparse initializers are not supported",
        ));
    }
    let mut im = Importer {
        dir,
        opset,
        g: Graph::with_capacity(graph.node.len() * 2, graph.node.len() * 3),
        consts: Vec::new(),
        vals: HashMap::new(),
        reshaped: HashMap::new(),
    };
    // Initializers.
    for t in &graph.initializer {
        let at = || format!("initializer '{}'", t.name);
        if t.name.is_empty() {
            return Err(ImportError::at(file, "an initializer", "it has no name"));
        }
        let value = decode(t, dir).map_err(|e| ImportError::at(file, at(), e))?;
        let float = matches!(
            value.elem,
            dt::FLOAT | dt::FLOAT16 | dt::DOUBLE | dt::BFLOAT16
        );
        let trainable = float
            && match &options.weights {
                Weights::Trainable => true,
                Weights::Frozen => false,
                Weights::Only(names) => names.contains(&t.name),
            };
        im.bind_const(&t.name, value, trainable, true)
            .map_err(|e| ImportError::at(file, at(), e))?;
    }
    if let Weights::Only(names) = &options.weights {
        if let Some(n) = names
            .iter()
            .find(|n| !graph.initializer.iter().any(|t| &t.name == *n))
        {
            return Err(ImportError::file(
                file,
                format!("--trainable names '{n}', which is not an initializer of the model"),
            ));
        }
    }
    // Inputs.
    let mut infeeds = Vec::new();
    for (name, _) in &options.input_shapes {
        if !graph.input.iter().any(|i| &i.name == name) {
            return Err(ImportError::file(
                file,
                format!(
                    "--input-shape names '{name}', which is not an input of the model (its inputs: {})",
                    graph.input.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
    for info in &graph.input {
        if im.vals.contains_key(&info.name) {
            continue; // an initializer listed as an input (IR version < 4 style)
        }
        let (dtype, dims) = input_type(info, &options.input_shapes)
            .map_err(|e| ImportError::at(file, format!("input '{}'", info.name), e))?;
        let op = Op::Input {
            stream: info.name.clone(),
            dtype,
            shape: Shape::from(dims),
        };
        let id = im
            .add(&info.name, op, &[])
            .map_err(|e| ImportError::at(file, format!("input '{}'", info.name), e))?;
        im.vals.insert(info.name.clone(), Val::Node(id));
        infeeds.push((info.name.clone(), dtype));
    }
    // Nodes.
    let producers: HashMap<&str, usize> = graph
        .node
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.output.iter().map(move |o| (o.as_str(), i)))
        .collect();
    for (index, node) in graph.node.iter().enumerate() {
        let name = node_name(node, index);
        let at = format!("node '{name}' ({})", node.op_type);
        im.node(node, &name, index, &producers)
            .map_err(|e| ImportError::at(file, at, e))?;
    }
    // Outputs.
    let logits =
        match &options.training {
            None => None,
            Some(t) => Some(match &t.output {
                Some(o) => o.clone(),
                None if graph.output.len() == 1 => graph.output[0].name.clone(),
                None => {
                    return Err(ImportError::file(
                        file,
                        format!(
                        "the model has {} outputs; name the logits with --loss-output (one of: {})",
                        graph.output.len(),
                        graph.output.iter().map(|o| o.name.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                    ))
                }
            }),
        };
    if let Some(l) = &logits {
        if !graph.output.iter().any(|o| &o.name == l) {
            return Err(ImportError::file(
                file,
                format!("--loss-output '{l}' is not an output of the model"),
            ));
        }
    }
    let mut sinks = Vec::new();
    for out in &graph.output {
        let at = format!("output '{}'", out.name);
        let v = im
            .val(&out.name, &producers, usize::MAX)
            .map_err(|e| ImportError::at(file, &at, e))?;
        let id = im
            .node_of(&v, Layout::Natural, false)
            .map_err(|e| ImportError::at(file, &at, e))?;
        if logits.as_deref() == Some(&out.name) {
            continue;
        }
        let sink = im
            .add(
                &format!("{}_out", out.name),
                Op::Outfeed {
                    stream: out.name.clone(),
                },
                &[id],
            )
            .map_err(|e| ImportError::at(file, &at, e))?;
        sinks.push(sink);
    }
    let mut training = None;
    if let (Some(t), Some(l)) = (&options.training, &logits) {
        let at = format!("output '{l}'");
        let v = im
            .val(l, &producers, usize::MAX)
            .map_err(|e| ImportError::at(file, &at, e))?;
        let x = im
            .node_of(&v, Layout::Natural, false)
            .map_err(|e| ImportError::at(file, &at, e))?;
        let ty = im.g.node(x).ty.clone();
        if ty.shape.rank() != 2 || !ty.dtype.is_float() {
            return Err(ImportError::at(
                file,
                at,
                format!("the loss needs logits [batch, classes] of a float type, got {ty}"),
            ));
        }
        let dims = ty.shape.dims().to_vec();
        let labels = Op::Input {
            stream: t.labels.clone(),
            dtype: DType::I32,
            shape: Shape::from([dims[0]]),
        };
        let ids = (|| -> Result<(NodeId, NodeId), String> {
            let labels = im.add(&t.labels, labels, &[])?;
            let loss = im.add(
                "loss",
                Op::SparseSoftmaxCrossEntropy {
                    reduction: LossReduction::Mean,
                },
                &[x, labels],
            )?;
            Ok((labels, loss))
        })()
        .map_err(|e| ImportError::at(file, at, e))?;
        let loss_name = im.g.node(ids.1).name.clone();
        let sink = im
            .add(
                "loss_out",
                Op::Outfeed {
                    stream: "loss".into(),
                },
                &[ids.1],
            )
            .map_err(|e| ImportError::file(file, e))?;
        sinks.push(sink);
        infeeds.push((t.labels.clone(), DType::I32));
        training = Some((
            TrainingSpec {
                loss: loss_name,
                optimizer: t.optimizer.clone(),
                loss_scaling: t.loss_scaling,
                precision: t.precision,
                gradient_accumulation: 1,
                accumulation_dtype: None,
                stable_norm: false,
            },
            dims[1],
        ));
    }
    if sinks.is_empty() {
        return Err(ImportError::file(file, "the model has no outputs"));
    }
    let name = options
        .name
        .clone()
        .or_else(|| Some(graph.name.clone()).filter(|n| !n.is_empty()))
        .unwrap_or_else(|| stem.to_string());
    let mut program = Program::new(
        name,
        live_part(&im.g, &sinks).map_err(|e| ImportError::file(file, e))?,
    );
    program.description = format!(
        "Imported from {} (producer {} {}, opset {opset}).",
        Path::new(file)
            .file_name()
            .map(|f| f.to_string_lossy())
            .unwrap_or_default(),
        if model.producer_name.is_empty() {
            "unknown"
        } else {
            &model.producer_name
        },
        model.producer_version
    );
    let classes = training.as_ref().map(|t| t.1);
    let live: HashSet<&str> = program
        .graph
        .nodes()
        .filter_map(|(_, n)| match &n.op {
            Op::Input { stream, .. } => Some(stream.as_str()),
            _ => None,
        })
        .collect();
    let mut seed = 0;
    let mut sources = Vec::new();
    for (stream, dtype) in infeeds {
        if !live.contains(stream.as_str()) {
            continue; // an input no output depends on
        }
        seed += 1;
        let source = match dtype {
            DType::F16 | DType::F32 => DataSource::Uniform {
                low: -1.0,
                high: 1.0,
                seed,
            },
            DType::I32 if classes.is_some() => DataSource::Uniform {
                low: 0.0,
                high: classes.unwrap_or(1) as f64,
                seed,
            },
            DType::U8 => DataSource::Uniform {
                low: 0.0,
                high: 256.0,
                seed,
            },
            DType::I32 | DType::Bool => DataSource::Constant(0.0),
        };
        sources.push(InfeedSpec { stream, source });
    }
    program.infeeds = sources;
    program.training = training.map(|t| t.0);
    ipusim_ir::validate::validate_program(&program)
        .map_err(|e| ImportError::file(file, format!("the imported program is not valid: {e}")))?;
    Ok(program)
}

/// The IR name of an ONNX node: its name, or its first output's, with PyTorch's scope path
/// (`/layer1/layer1.0/conv1/Conv`) written as the module path (`layer1.0.conv1/Conv`) so that
/// split points and memory proportions name modules as PopTorch users do.
pub fn node_name(node: &NodeProto, index: usize) -> String {
    let raw = if !node.name.is_empty() {
        node.name.as_str()
    } else if let Some(o) = node.output.first().filter(|o| !o.is_empty()) {
        o.as_str()
    } else {
        return format!("{}_{index}", node.op_type);
    };
    let Some(rest) = raw.strip_prefix('/') else {
        return raw.to_string();
    };
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    let Some((last, scopes)) = parts.split_last() else {
        return raw.to_string();
    };
    // A scope that extends the previous one (`layer1` then `layer1.0`, `downsample` then
    // `downsample.0`) replaces it: PyTorch names a container's child `container.index`.
    let mut components: Vec<&str> = Vec::new();
    for s in scopes {
        match components.last_mut() {
            Some(c) if s.len() > c.len() && s.starts_with(*c) && s.as_bytes()[c.len()] == b'.' => {
                *c = s
            }
            _ => components.push(s),
        }
    }
    let path = components.join(".");
    if path.is_empty() {
        last.to_string()
    } else {
        format!("{path}/{last}")
    }
}

/// An input's dtype and shape, its symbolic dimensions bound by `shapes`.
fn input_type(
    info: &ValueInfoProto,
    shapes: &[(String, Vec<usize>)],
) -> Result<(DType, Vec<usize>), String> {
    let Some(type_proto::Value::TensorType(t)) =
        info.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return Err("only tensor inputs are supported (this one has no tensor type)".into());
    };
    let dtype = ir_dtype(t.elem_type)?;
    let given = shapes.iter().find(|(n, _)| n == &info.name).map(|(_, s)| s);
    let Some(shape) = &t.shape else {
        return given.cloned().map(|g| (dtype, g)).ok_or_else(|| {
            format!(
                "the input has no shape; give it with --input-shape {}=DxDx...",
                info.name
            )
        });
    };
    if let Some(g) = given {
        if g.len() != shape.dim.len() {
            return Err(format!(
                "--input-shape gives {} dimensions; the input has {}",
                g.len(),
                shape.dim.len()
            ));
        }
    }
    use crate::proto::tensor_shape_proto::dimension::Value as D;
    shape
        .dim
        .iter()
        .enumerate()
        .map(|(i, d)| match (&d.value, given.map(|g| g[i])) {
            (Some(D::DimValue(v)), g) => {
                let v = usize::try_from(*v)
                    .ok()
                    .filter(|&v| v > 0)
                    .ok_or_else(|| format!("dimension {i} is {v}"))?;
                match g {
                    Some(g) if g != v => Err(format!(
                        "--input-shape gives dimension {i} as {g}; the model fixes it at {v}"
                    )),
                    _ => Ok(v),
                }
            }
            (_, Some(g)) if g > 0 => Ok(g),
            (p, _) => {
                let sym = match p {
                    Some(D::DimParam(s)) => format!(" ('{s}')"),
                    _ => String::new(),
                };
                Err(format!(
                    "dimension {i} is symbolic{sym}; bind it with --input-shape {}=DxDx...",
                    info.name
                ))
            }
        })
        .collect::<Result<Vec<_>, _>>()
        .map(|dims| (dtype, dims))
}

impl Importer<'_> {
    /// Converts one node: folds it when its inputs are known, else converts it to IR ops.
    fn node(
        &mut self,
        node: &NodeProto,
        name: &str,
        index: usize,
        producers: &HashMap<&str, usize>,
    ) -> Result<(), String> {
        let standard = node.domain.is_empty() || node.domain == "ai.onnx";
        if !standard || !SUPPORTED.contains(&node.op_type.as_str()) {
            let domain = if standard {
                String::new()
            } else {
                format!(" of domain '{}'", node.domain)
            };
            return Err(format!(
                "op type '{}'{domain} (opset {}) is not supported; supported: {}",
                node.op_type,
                self.opset,
                SUPPORTED.join(", ")
            ));
        }
        for o in &node.output {
            if !o.is_empty() && self.vals.contains_key(o) {
                return Err(format!(
                    "output '{o}' is already defined (ONNX values are assigned once)"
                ));
            }
        }
        let attrs = Attrs::of(node, self.dir)?;
        let mut inputs = Vec::with_capacity(node.input.len());
        for i in &node.input {
            inputs.push(if i.is_empty() {
                None
            } else {
                Some(self.val(i, producers, index)?)
            });
        }
        let op = node.op_type.as_str();
        // Folding.
        let folded = if op == "Shape" {
            let x = inputs
                .first()
                .cloned()
                .flatten()
                .ok_or("input 0 is missing")?;
            let dims: Vec<i64> = self.dims(&x).iter().map(|&d| d as i64).collect();
            let r = dims.len() as i64;
            let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
            let (s, e) = (clamp(attrs.int("start", 0)), clamp(attrs.int("end", r)));
            Some(ConstTensor::ints(&dims[s..e.max(s)]))
        } else if op == "Constant" {
            Some(constant(&attrs)?)
        } else if FOLDED.contains(&op)
            && inputs
                .iter()
                .flatten()
                .all(|v| matches!(v, Val::Const(i) if !self.consts[*i].trainable))
        {
            let known: Vec<Option<&ConstTensor>> = inputs
                .iter()
                .map(|v| v.as_ref().and_then(|v| self.known(v)))
                .collect();
            fold(op, self.opset, &attrs, &known)?
        } else {
            None
        };
        if let Some(t) = folded {
            let out = node
                .output
                .first()
                .filter(|o| !o.is_empty())
                .ok_or("the node has no output")?;
            return self.bind_const(out, t, false, false);
        }
        let outputs = crate::ops::convert(self, op, name, &attrs, &inputs)?;
        for (k, o) in node.output.iter().enumerate() {
            if o.is_empty() {
                continue;
            }
            let v = outputs.get(k).cloned().unwrap_or_else(|| {
                Val::Unavailable(format!(
                    "output {k} ('{o}') of node '{name}' ({op}) is not supported"
                ))
            });
            self.vals.insert(o.clone(), v);
        }
        Ok(())
    }
}

/// A `Constant` node's value.
fn constant(attrs: &Attrs) -> Result<ConstTensor, String> {
    if let Some(t) = attrs.tensor("value") {
        return Ok(t.clone());
    }
    let f = attrs.float("value_float", f64::NAN);
    if !f.is_nan() || attrs.names().any(|n| n == "value_float") {
        return Ok(ConstTensor {
            elem: dt::FLOAT,
            dims: vec![],
            values: vec![f],
        });
    }
    if let Some(v) = attrs.floats("value_floats") {
        return Ok(ConstTensor {
            elem: dt::FLOAT,
            dims: vec![v.len()],
            values: v,
        });
    }
    if attrs.names().any(|n| n == "value_int") {
        return Ok(ConstTensor {
            elem: dt::INT64,
            dims: vec![],
            values: vec![attrs.int("value_int", 0) as f64],
        });
    }
    if let Some(v) = attrs.ints("value_ints") {
        return Ok(ConstTensor::ints(&v));
    }
    Err("a Constant needs one of the attributes value, value_float(s) or value_int(s)".into())
}

/// The nodes the sinks depend on, in their order, as a new graph.
fn live_part(g: &Graph, sinks: &[NodeId]) -> Result<Graph, String> {
    let mut live = HashSet::new();
    let mut stack = sinks.to_vec();
    while let Some(id) = stack.pop() {
        if live.insert(id) {
            stack.extend(g.node(id).inputs.iter().copied());
        }
    }
    let mut out = Graph::with_capacity(live.len(), live.len() * 2);
    let mut map = HashMap::with_capacity(live.len());
    for id in g.program_order() {
        if !live.contains(&id) {
            continue;
        }
        let n = g.node(id);
        let inputs: Vec<NodeId> = n.inputs.iter().map(|i| map[i]).collect();
        let new = out
            .add_node(n.name.clone(), n.op.clone(), &inputs)
            .map_err(|e| e.to_string())?;
        map.insert(id, new);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: &str) -> String {
        node_name(
            &NodeProto {
                name: name.into(),
                ..Default::default()
            },
            0,
        )
    }

    #[test]
    fn pytorch_scopes_become_module_paths() {
        assert_eq!(named("/layer1/layer1.0/conv1/Conv"), "layer1.0.conv1/Conv");
        assert_eq!(
            named("/layer2/layer2.0/downsample/downsample.0/Conv"),
            "layer2.0.downsample.0/Conv"
        );
        assert_eq!(named("/fc/Gemm"), "fc/Gemm");
        assert_eq!(named("/Relu"), "Relu");
        assert_eq!(named("conv_1"), "conv_1");
        let unnamed = NodeProto {
            output: vec!["y".into()],
            ..Default::default()
        };
        assert_eq!(node_name(&unnamed, 3), "y");
    }
}

//! Op converters: one ONNX node (inputs already resolved to [`Val`]s) to IR ops, with
//! ONNX's attribute defaults and the IR's layouts (NCHW activations, OIHW weights, padding
//! `[top, left, bottom, right]` — the same as ONNX's `pads` order for 2-D).
//!
//! Each converter checks the attributes it reads and rejects the ones it would silently
//! misread (`ceil_mode`, dilated pooling, non-constant shapes, non-zero pad values, ...),
//! naming the attribute.

use crate::attr::{decimal, Attrs};
use crate::shape;
use crate::values::{ir_dtype, Importer, Layout, Val};
use ipusim_ir::{NodeId, Op};

/// Converts `op` (a name of `SUPPORTED` that did not fold) into IR nodes;
/// returns the node's outputs.
pub(crate) fn convert(
    im: &mut Importer,
    op: &str,
    name: &str,
    attrs: &Attrs,
    inputs: &[Option<Val>],
) -> Result<Vec<Val>, String> {
    let known = known_attrs(op);
    if let Some(a) = attrs.unknown(known) {
        return Err(format!(
            "attribute '{a}' is not supported (the importer reads: {})",
            known.join(", ")
        ));
    }
    let input = |i: usize| -> Result<Val, String> {
        inputs
            .get(i)
            .cloned()
            .flatten()
            .ok_or_else(|| format!("input {i} is missing"))
    };
    let node = |im: &mut Importer, i: usize| -> Result<NodeId, String> {
        let v = input(i)?;
        im.node_of(&v, Layout::Natural, false)
    };
    let one = |id: NodeId| Ok(vec![Val::Node(id)]);
    match op {
        "Relu" | "Sigmoid" | "Tanh" | "Exp" | "Log" | "Sqrt" | "Neg" | "Abs" => {
            let ir = match op {
                "Relu" => Op::Relu,
                "Sigmoid" => Op::Sigmoid,
                "Tanh" => Op::Tanh,
                "Exp" => Op::Exp,
                "Log" => Op::Log,
                "Sqrt" => Op::Sqrt,
                "Neg" => Op::Neg,
                _ => Op::Abs,
            };
            let x = node(im, 0)?;
            one(im.add(name, ir, &[x])?)
        }
        "Identity" => Ok(vec![input(0)?]),
        "Dropout" => {
            if let Some(t) = inputs.get(2).cloned().flatten() {
                match im.known(&t) {
                    Some(t) if t.values.iter().all(|&v| v == 0.0) => {}
                    _ => return Err("Dropout in training mode is not supported (only inference, where it passes its input through)".into()),
                }
            }
            let mask = Val::Unavailable(format!("the mask output of Dropout '{name}' is not supported"));
            Ok(vec![input(0)?, mask])
        }
        "Add" | "Sub" | "Mul" | "Div" => {
            let ir = match op {
                "Add" => Op::Add,
                "Sub" => Op::Sub,
                "Mul" => Op::Mul,
                _ => Op::Div,
            };
            let (a, b) = (node(im, 0)?, node(im, 1)?);
            one(im.add(name, ir, &[a, b])?)
        }
        "MatMul" => {
            let (a, b) = (input(0)?, input(1)?);
            for (k, v) in [&a, &b].into_iter().enumerate() {
                if im.dims(v).len() < 2 {
                    return Err(format!("input {k} has rank {}; MatMul of vectors (rank 1) is not supported", im.dims(v).len()));
                }
            }
            let (a, b) = (node(im, 0)?, node(im, 1)?);
            one(im.add(name, Op::MatMul, &[a, b])?)
        }
        "Gemm" => gemm(im, name, attrs, inputs),
        "Conv" => conv(im, name, attrs, inputs),
        "BatchNormalization" => {
            // `training_mode` needs no attribute of its own: the IR's BatchNorm uses the
            // batch's statistics in a training step and the running ones otherwise.
            let epsilon = attrs.float("epsilon", 1e-5);
            // ONNX: running = momentum · running + (1 − momentum) · batch; the IR (PyTorch)
            // weighs the batch by its momentum.
            let momentum = decimal((1.0 - attrs.float("momentum", 0.9)) as f32);
            let x = node(im, 0)?;
            let mut ids = vec![x];
            for i in 1..5 {
                let v = input(i)?;
                ids.push(im.node_of(&v, Layout::Natural, i >= 3)?);
            }
            let y = im.add(name, Op::BatchNorm { epsilon, momentum }, &ids)?;
            let why = format!("the running-statistics outputs of BatchNormalization '{name}' are not supported (the IR updates the running statistics in place)");
            Ok(vec![Val::Node(y), Val::Unavailable(why.clone()), Val::Unavailable(why)])
        }
        "MaxPool" | "AveragePool" => pool(im, op, name, attrs, inputs),
        "GlobalAveragePool" => {
            let x = input(0)?;
            let dims = im.dims(&x);
            if dims.len() != 4 {
                return Err(format!("only 4-D inputs [N, C, H, W] are supported, got rank {}", dims.len()));
            }
            let x = node(im, 0)?;
            let p = im.add(name, Op::GlobalAvgPool, &[x])?;
            let r = im.reshape(&format!("{name}/keep_dims"), &Val::Node(p), &[dims[0], dims[1], 1, 1])?;
            one(r)
        }
        "Flatten" => {
            let x = input(0)?;
            let dims = im.dims(&x);
            let a = attrs.int("axis", 1);
            let a = if a == dims.len() as i64 { dims.len() } else { shape::axis(a, dims.len())? };
            let target = [dims[..a].iter().product(), dims[a..].iter().product()];
            one(im.reshape(name, &x, &target)?)
        }
        "Reshape" => {
            let x = input(0)?;
            let spec = constant_ints(im, inputs, 1, "shape")?;
            let target = shape::reshape(&im.dims(&x), &spec, attrs.int("allowzero", 0) != 0)?;
            one(im.reshape(name, &x, &target)?)
        }
        "Squeeze" | "Unsqueeze" => {
            let x = input(0)?;
            let list = if im.opset >= 13 {
                if inputs.get(1).cloned().flatten().is_some() {
                    constant_ints(im, inputs, 1, "axes")?
                } else {
                    Vec::new()
                }
            } else {
                attrs.ints("axes").unwrap_or_default()
            };
            let dims = im.dims(&x);
            let target = if op == "Squeeze" {
                shape::squeeze(&dims, &list)?
            } else {
                shape::unsqueeze(&dims, &list)?
            };
            one(im.reshape(name, &x, &target)?)
        }
        "Transpose" => {
            let x = input(0)?;
            let rank = im.dims(&x).len();
            let perm = match attrs.ints("perm") {
                Some(p) => shape::axes(&p, rank)?,
                None => (0..rank).rev().collect(),
            };
            if perm.len() != rank {
                return Err(format!("perm {perm:?} does not fit rank {rank}"));
            }
            if perm.iter().enumerate().all(|(i, &p)| i == p) {
                return Ok(vec![x]);
            }
            let x = node(im, 0)?;
            one(im.add(name, Op::Transpose { perm }, &[x])?)
        }
        "Concat" => {
            let first = input(0)?;
            let axis = shape::axis(attrs.int("axis", 0), im.dims(&first).len())?;
            let ids = (0..inputs.len()).map(|i| node(im, i)).collect::<Result<Vec<_>, _>>()?;
            one(im.add(name, Op::Concat { axis }, &ids)?)
        }
        "Slice" => {
            let x = input(0)?;
            let starts = constant_ints(im, inputs, 1, "starts")?;
            let ends = constant_ints(im, inputs, 2, "ends")?;
            let axes = optional_ints(im, inputs, 3, "axes")?;
            let steps = optional_ints(im, inputs, 4, "steps")?;
            let (begin, end) = shape::slice(&im.dims(&x), &starts, &ends, axes.as_deref(), steps.as_deref())?;
            let x = node(im, 0)?;
            one(im.add(name, Op::Slice { begin, end }, &[x])?)
        }
        "Softmax" | "LogSoftmax" => {
            let x = input(0)?;
            let dims = im.dims(&x);
            let rank = dims.len();
            let make = |axis| if op == "Softmax" { Op::Softmax { axis } } else { Op::LogSoftmax { axis } };
            if im.opset >= 13 {
                let axis = shape::axis(attrs.int("axis", -1), rank)?;
                let x = node(im, 0)?;
                return one(im.add(name, make(axis), &[x])?);
            }
            // Before opset 13 the input is flattened to 2-D at `axis` (default 1).
            let axis = shape::axis(attrs.int("axis", 1), rank)?;
            if axis == rank - 1 {
                let x = node(im, 0)?;
                return one(im.add(name, make(axis), &[x])?);
            }
            let flat = [dims[..axis].iter().product(), dims[axis..].iter().product()];
            let f = im.reshape(&format!("{name}/flatten"), &x, &flat)?;
            let s = im.add(&format!("{name}/2d"), make(1), &[f])?;
            one(im.reshape(name, &Val::Node(s), &dims)?)
        }
        "Clip" => {
            let bound = |im: &Importer, i: usize, what: &str, default: f64| -> Result<f64, String> {
                match inputs.get(i).cloned().flatten() {
                    None => Ok(default),
                    Some(v) => match im.known(&v) {
                        Some(t) if t.len() == 1 => Ok(t.values[0]),
                        _ => Err(format!("the {what} input must be a constant scalar")),
                    },
                }
            };
            let min = bound(im, 1, "min", f64::NEG_INFINITY)?;
            let max = bound(im, 2, "max", f64::INFINITY)?;
            let x = node(im, 0)?;
            if min == 0.0 && max == f64::INFINITY {
                return one(im.add(name, Op::Relu, &[x])?);
            }
            one(im.add(name, Op::Clip { min, max }, &[x])?)
        }
        "ReduceMean" => {
            let x = input(0)?;
            let rank = im.dims(&x).len();
            let list = if im.opset >= 18 {
                optional_ints(im, inputs, 1, "axes")?
            } else {
                attrs.ints("axes")
            };
            let mut axes = match list {
                Some(l) if !l.is_empty() => shape::axes(&l, rank)?,
                _ if attrs.int("noop_with_empty_axes", 0) != 0 => return Ok(vec![x]),
                _ => (0..rank).collect(),
            };
            axes.sort_unstable();
            let keep_dims = attrs.int("keepdims", 1) != 0;
            let x = node(im, 0)?;
            one(im.add(name, Op::ReduceMean { axes, keep_dims }, &[x])?)
        }
        "Pad" => {
            let mode = attrs.string("mode", "constant");
            if mode != "constant" {
                return Err(format!("mode '{mode}' is not supported (only 'constant' with value 0)"));
            }
            let x = input(0)?;
            let rank = im.dims(&x).len();
            let pads = constant_ints(im, inputs, 1, "pads")?;
            if let Some(v) = inputs.get(2).cloned().flatten() {
                match im.known(&v) {
                    Some(t) if t.values.iter().all(|&v| v == 0.0) => {}
                    _ => return Err("only a constant_value of 0 is supported (the IR pads with zeros)".into()),
                }
            }
            let axes = match optional_ints(im, inputs, 3, "axes")? {
                Some(a) => shape::axes(&a, rank)?,
                None => (0..rank).collect(),
            };
            if pads.len() != 2 * axes.len() {
                return Err(format!("pads has {} entries; {} axes need {}", pads.len(), axes.len(), 2 * axes.len()));
            }
            if let Some(p) = pads.iter().find(|&&p| p < 0) {
                return Err(format!("negative pads ({p}) are not supported"));
            }
            let (mut before, mut after) = (vec![0; rank], vec![0; rank]);
            for (k, &a) in axes.iter().enumerate() {
                before[a] = pads[k] as usize;
                after[a] = pads[k + axes.len()] as usize;
            }
            let x = node(im, 0)?;
            one(im.add(name, Op::Pad { before, after }, &[x])?)
        }
        "Cast" => {
            let to = ir_dtype(attrs.int("to", 0) as i32)?;
            let x = node(im, 0)?;
            if im.g.node(x).ty.dtype == to {
                return one(x);
            }
            one(im.add(name, Op::Cast { dtype: to }, &[x])?)
        }
        "Gather" | "ConstantOfShape" => Err(format!(
            "{op} is supported only on constant inputs (the shape computations exporters emit); here an input is computed at run time"
        )),
        other => Err(format!("op type '{other}' has no converter")),
    }
}

/// Input `i`, or `missing` as the error.
fn required(inputs: &[Option<Val>], i: usize, missing: &str) -> Result<Val, String> {
    inputs
        .get(i)
        .cloned()
        .flatten()
        .ok_or_else(|| missing.to_string())
}

/// The attributes each converter reads.
fn known_attrs(op: &str) -> &'static [&'static str] {
    match op {
        "Conv" => &[
            "auto_pad",
            "dilations",
            "group",
            "kernel_shape",
            "pads",
            "strides",
        ],
        "MaxPool" => &[
            "auto_pad",
            "ceil_mode",
            "dilations",
            "kernel_shape",
            "pads",
            "storage_order",
            "strides",
        ],
        "AveragePool" => &[
            "auto_pad",
            "ceil_mode",
            "count_include_pad",
            "dilations",
            "kernel_shape",
            "pads",
            "strides",
        ],
        "BatchNormalization" => &["epsilon", "momentum", "training_mode", "spatial"],
        "Gemm" => &["alpha", "beta", "transA", "transB"],
        "Flatten" | "Concat" | "Softmax" | "LogSoftmax" => &["axis"],
        "Reshape" => &["allowzero"],
        "Squeeze" | "Unsqueeze" => &["axes"],
        "Transpose" => &["perm"],
        "ReduceMean" => &["axes", "keepdims", "noop_with_empty_axes"],
        "Pad" => &["mode"],
        "Cast" => &["to", "saturate"],
        "Dropout" => &["seed", "ratio"],
        "Slice" | "Gather" => &["axis"],
        "ConstantOfShape" => &["value"],
        _ => &[],
    }
}

/// Input `i` as constant integers (a shape, axes, pads, ...).
fn constant_ints(
    im: &Importer,
    inputs: &[Option<Val>],
    i: usize,
    what: &str,
) -> Result<Vec<i64>, String> {
    optional_ints(im, inputs, i, what)?
        .ok_or_else(|| format!("the {what} input (input {i}) is missing"))
}

/// Input `i` as constant integers, `None` when absent.
fn optional_ints(
    im: &Importer,
    inputs: &[Option<Val>],
    i: usize,
    what: &str,
) -> Result<Option<Vec<i64>>, String> {
    match inputs.get(i).cloned().flatten() {
        None => Ok(None),
        Some(v) => im.known(&v).map(|t| Some(t.as_ints())).ok_or_else(|| {
            format!("the {what} input (input {i}) is computed at run time; the IR's shapes are static, so it must be a constant")
        }),
    }
}

/// `[h, w]` from a two-entry attribute, or `default`.
fn pair(attrs: &Attrs, name: &str, default: usize) -> Result<[usize; 2], String> {
    match attrs.ints(name) {
        None => Ok([default; 2]),
        Some(v) if v.len() == 2 && v.iter().all(|&x| x >= 1) => Ok([v[0] as usize, v[1] as usize]),
        Some(v) => Err(format!(
            "{name} {v:?} must be two positive numbers (only 2-D windows are supported)"
        )),
    }
}

/// `[top, left, bottom, right]` from `pads`/`auto_pad` for an input of `size` `[H, W]`.
fn padding(
    attrs: &Attrs,
    size: [usize; 2],
    kernel: [usize; 2],
    stride: [usize; 2],
    dilation: [usize; 2],
) -> Result<[usize; 4], String> {
    match attrs.string("auto_pad", "NOTSET") {
        "NOTSET" => match attrs.ints("pads") {
            None => Ok([0; 4]),
            Some(p) if p.len() == 4 && p.iter().all(|&x| x >= 0) => {
                Ok([p[0] as usize, p[1] as usize, p[2] as usize, p[3] as usize])
            }
            Some(p) => Err(format!("pads {p:?} must be four non-negative numbers")),
        },
        "VALID" => Ok([0; 4]),
        mode @ ("SAME_UPPER" | "SAME_LOWER") => {
            let mut out = [0; 4];
            for d in 0..2 {
                let want = size[d].div_ceil(stride[d]);
                let span = (kernel[d] - 1) * dilation[d] + 1;
                let total = ((want - 1) * stride[d] + span).saturating_sub(size[d]);
                let (small, big) = (total / 2, total - total / 2);
                let (begin, end) = if mode == "SAME_UPPER" {
                    (small, big)
                } else {
                    (big, small)
                };
                out[d] = begin;
                out[d + 2] = end;
            }
            Ok(out)
        }
        other => Err(format!(
            "auto_pad '{other}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID"
        )),
    }
}

fn conv(
    im: &mut Importer,
    name: &str,
    attrs: &Attrs,
    inputs: &[Option<Val>],
) -> Result<Vec<Val>, String> {
    let x = required(inputs, 0, "input 0 is missing")?;
    let w = required(inputs, 1, "the weight input is missing")?;
    let (xd, wd) = (im.dims(&x), im.dims(&w));
    if xd.len() != 4 || wd.len() != 4 {
        return Err(format!(
            "only 2-D convolutions (4-D input and weight) are supported, got an input of rank {} and a weight of rank {}",
            xd.len(),
            wd.len()
        ));
    }
    let kernel = [wd[2], wd[3]];
    if let Some(k) = attrs.ints("kernel_shape") {
        if k != [wd[2] as i64, wd[3] as i64] {
            return Err(format!(
                "kernel_shape {k:?} disagrees with the weight's {kernel:?}"
            ));
        }
    }
    let stride = pair(attrs, "strides", 1)?;
    let dilation = pair(attrs, "dilations", 1)?;
    let groups = usize::try_from(attrs.int("group", 1))
        .ok()
        .filter(|&g| g >= 1)
        .ok_or("group must be at least 1")?;
    let pad = padding(attrs, [xd[2], xd[3]], kernel, stride, dilation)?;
    let op = Op::Conv2d {
        stride: stride.to_vec(),
        padding: if pad == [0; 4] { vec![] } else { pad.to_vec() },
        dilation: if dilation == [1, 1] {
            vec![]
        } else {
            dilation.to_vec()
        },
        groups,
    };
    let xi = im.node_of(&x, Layout::Natural, false)?;
    let wi = im.node_of(&w, Layout::Natural, false)?;
    let Some(b) = inputs.get(2).cloned().flatten() else {
        return Ok(vec![Val::Node(im.add(name, op, &[xi, wi])?)]);
    };
    let c = im.add(&format!("{name}/conv"), op, &[xi, wi])?;
    let bd = im.dims(&b);
    if bd != [wd[0]] {
        return Err(format!(
            "the bias has shape {bd:?}; the {} output channels need [{}]",
            wd[0], wd[0]
        ));
    }
    let bi = im.node_of(&b, Layout::Dims(vec![wd[0], 1, 1]), false)?;
    Ok(vec![Val::Node(im.add(name, Op::Add, &[c, bi])?)])
}

fn pool(
    im: &mut Importer,
    op: &str,
    name: &str,
    attrs: &Attrs,
    inputs: &[Option<Val>],
) -> Result<Vec<Val>, String> {
    let x = required(inputs, 0, "input 0 is missing")?;
    let xd = im.dims(&x);
    if xd.len() != 4 {
        return Err(format!(
            "only 2-D pooling (4-D inputs) is supported, got rank {}",
            xd.len()
        ));
    }
    let kernel = match attrs.ints("kernel_shape") {
        Some(k) if k.len() == 2 && k.iter().all(|&v| v >= 1) => [k[0] as usize, k[1] as usize],
        Some(k) => return Err(format!("kernel_shape {k:?} must be two positive numbers")),
        None => return Err("kernel_shape is required".into()),
    };
    let stride = pair(attrs, "strides", 1)?;
    if pair(attrs, "dilations", 1)? != [1, 1] {
        return Err("dilated pooling is not supported".into());
    }
    let pad = padding(attrs, [xd[2], xd[3]], kernel, stride, [1, 1])?;
    if attrs.int("ceil_mode", 0) != 0 {
        for d in 0..2 {
            let span = (xd[2 + d] + pad[d] + pad[d + 2]).saturating_sub(kernel[d]);
            if span % stride[d] != 0 {
                return Err("ceil_mode 1 is not supported where it changes the output size".into());
            }
        }
    }
    let padding = if pad == [0; 4] { vec![] } else { pad.to_vec() };
    let ir = if op == "MaxPool" {
        Op::MaxPool2d {
            kernel: kernel.to_vec(),
            stride: stride.to_vec(),
            padding,
        }
    } else {
        Op::AvgPool2d {
            kernel: kernel.to_vec(),
            stride: stride.to_vec(),
            padding,
            count_include_pad: attrs.int("count_include_pad", 0) != 0,
        }
    };
    let xi = im.node_of(&x, Layout::Natural, false)?;
    let y = im.add(name, ir, &[xi])?;
    let why = Val::Unavailable(format!(
        "the indices output of MaxPool '{name}' is not supported"
    ));
    Ok(vec![Val::Node(y), why])
}

fn gemm(
    im: &mut Importer,
    name: &str,
    attrs: &Attrs,
    inputs: &[Option<Val>],
) -> Result<Vec<Val>, String> {
    let a = required(inputs, 0, "input 0 is missing")?;
    let b = required(inputs, 1, "input 1 is missing")?;
    for (k, v) in [&a, &b].into_iter().enumerate() {
        if im.dims(v).len() != 2 {
            return Err(format!(
                "input {k} has rank {}; Gemm takes 2-D operands",
                im.dims(v).len()
            ));
        }
    }
    let layout = |t: i64| {
        if t != 0 {
            Layout::Transposed
        } else {
            Layout::Natural
        }
    };
    let ai = im.node_of(&a, layout(attrs.int("transA", 0)), false)?;
    let bi = im.node_of(&b, layout(attrs.int("transB", 0)), false)?;
    let (alpha, beta) = (attrs.float("alpha", 1.0), attrs.float("beta", 1.0));
    let c = inputs.get(2).cloned().flatten();
    let last = c.is_none() && alpha == 1.0;
    let mut y = im.add(
        if last {
            name.to_string()
        } else {
            format!("{name}/matmul")
        }
        .as_str(),
        Op::MatMul,
        &[ai, bi],
    )?;
    let dtype = im.g.node(y).ty.dtype;
    let scalar = |im: &mut Importer, what: &str, v: f64| {
        im.add(
            &format!("{name}/{what}"),
            Op::Constant {
                dtype,
                shape: ipusim_ir::Shape::from([] as [usize; 0]),
                value: ipusim_ir::Literal::Splat(v),
            },
            &[],
        )
    };
    if alpha != 1.0 {
        let s = scalar(im, "alpha", alpha)?;
        let n = if c.is_none() {
            name.to_string()
        } else {
            format!("{name}/scaled")
        };
        y = im.add(&n, Op::Mul, &[y, s])?;
    }
    if let Some(c) = c {
        let mut ci = im.node_of(&c, Layout::Natural, false)?;
        if beta != 1.0 {
            let s = scalar(im, "beta", beta)?;
            ci = im.add(&format!("{name}/bias_scaled"), Op::Mul, &[ci, s])?;
        }
        y = im.add(name, Op::Add, &[y, ci])?;
    }
    Ok(vec![Val::Node(y)])
}

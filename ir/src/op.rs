//! The operations of the graph IR.
//!
//! [`Op`] is a flat Rust enum (not trait objects), so that the text format can name every op
//! directly (`Add`, `MatMul`, `Softmax(axis: 1)`, ...), the compiler and the interpreter can
//! match exhaustively, and adding an op is a compile error everywhere it must be handled.
//! Every node produces exactly one tensor; sinks (`Outfeed`, `Assign`) pass their input's type
//! through. Attributes are plain data; shapes and dtypes are inferred in [`crate::infer`].

use crate::dtype::{DType, Shape};
use serde::{Deserialize, Serialize};

/// How a variable is initialised. Values are materialised by the simulator (the IR holds no
/// values); the same initialiser and seed always give the same values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum Init {
    /// All zeros.
    Zeros,
    /// Every element set to the constant.
    Constant(f64),
    /// Uniform in `[low, high)` from the seeded stream.
    Uniform { low: f64, high: f64, seed: u64 },
    /// Normal with the given mean and standard deviation from the seeded stream.
    Normal { mean: f64, std: f64, seed: u64 },
    /// Glorot (Xavier) uniform: `U(-l, l)`, `l = sqrt(6 / (fan_in + fan_out))`, with the fans
    /// taken from the last two dimensions (rank 1: both equal the length).
    GlorotUniform { seed: u64 },
    /// One value per element, row-major (rounded RNE to the dtype when materialised): the
    /// trained weights of an imported model (`ipusim import`).
    Values(Vec<f64>),
    /// The values in a weights file beside the program (`path` relative to the program file):
    /// one element per value from byte `offset`, row-major, little-endian in `encoding`.
    /// Only the text format holds this: loading a program reads the file into [`Init::Values`]
    /// (`ipusim import -o model.ron` writes `model.weights.bin` so that a large model's program
    /// stays readable).
    File {
        path: String,
        offset: u64,
        encoding: Encoding,
    },
}

/// How a weights file stores its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Encoding {
    /// IEEE binary32, 4 bytes per value (every value exactly an `f32`).
    F32,
    /// IEEE binary64, 8 bytes per value.
    F64,
}

impl Encoding {
    /// Bytes per value.
    pub fn size(self) -> usize {
        match self {
            Encoding::F32 => 4,
            Encoding::F64 => 8,
        }
    }
}

/// The value of a constant tensor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Literal {
    /// Every element equal to this value.
    Splat(f64),
    /// One value per element, row-major (rounded RNE to the dtype when materialised).
    Values(Vec<f64>),
}

/// How a loss over a batch is reduced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum LossReduction {
    /// Mean over the batch (TensorFlow's default).
    #[default]
    Mean,
    /// Sum over the batch.
    Sum,
}

/// The element-wise activations that have a fused gradient op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Activation {
    Relu,
    Sigmoid,
    Tanh,
    Gelu,
}

/// An operation. See each variant for its inputs (in order) and attributes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum Op {
    /// A host-to-device stream (infeed): one micro-batch per step. No inputs.
    Input {
        stream: String,
        dtype: DType,
        shape: Shape,
    },
    /// A persistent, trainable or state tensor. No inputs.
    Variable {
        dtype: DType,
        shape: Shape,
        init: Init,
    },
    /// A constant tensor. No inputs.
    Constant {
        dtype: DType,
        shape: Shape,
        value: Literal,
    },

    /// `(a[..., m, k], b[..., k, n]) -> [..., m, n]`; 2-D or batched (batch dims broadcast).
    MatMul,

    /// Element-wise `a + b` with broadcasting.
    Add,
    /// Element-wise `a - b` with broadcasting.
    Sub,
    /// Element-wise `a * b` with broadcasting.
    Mul,
    /// Element-wise `a / b` with broadcasting.
    Div,
    /// Element-wise maximum with broadcasting.
    Max,
    /// Element-wise minimum with broadcasting.
    Min,
    /// `a + scale * b` (`b` broadcast to `a`'s shape): PopLibs' scaledAdd, used by optimizers
    /// and gradient accumulation.
    ScaledAdd { scale: f64 },

    /// Element-wise `a == b` -> Bool, with broadcasting.
    Equal,
    /// Element-wise `a > b` -> Bool, with broadcasting.
    Greater,
    /// Element-wise `a < b` -> Bool, with broadcasting.
    Less,
    /// `(cond: Bool, a, b) -> cond ? a : b`, with broadcasting.
    Select,

    /// `-x`.
    Neg,
    /// `|x|`.
    Abs,
    /// `e^x`.
    Exp,
    /// Natural logarithm.
    Log,
    /// Square root.
    Sqrt,
    /// `max(x, 0)`.
    Relu,
    /// `min(max(x, min), max)`, with `min` and `max` rounded to `x`'s type (ONNX `Clip`;
    /// `Clip(min: 0, max: 6)` is ReLU6). A composite op: [`crate::decompose`] rewrites it
    /// into `Max` and `Min` with scalar constants before autodiff and lowering.
    Clip { min: f64, max: f64 },
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// Hyperbolic tangent.
    Tanh,
    /// GELU, tanh approximation (as PopLibs implements it).
    Gelu,
    /// `(x, dy) -> dy * f'(x)`: the fused gradient of an activation (PopLibs'
    /// NonLinearityGrad), from the forward input `x`. Autodiff passes ReLU's forward output
    /// as `x` (`f'(relu(x)) = f'(x)` exactly: both are `x > 0`).
    ActivationGrad { activation: Activation },

    /// Softmax along `axis`.
    Softmax { axis: usize },
    /// Log-softmax along `axis`.
    LogSoftmax { axis: usize },
    /// `(logits[n, c], labels: I32[n]) -> loss[]`: softmax cross-entropy with integer labels.
    SparseSoftmaxCrossEntropy {
        #[serde(default)]
        reduction: LossReduction,
    },
    /// `(indices: I32[...]) -> [..., depth]` of `dtype`: 1 at the index, 0 elsewhere
    /// (out-of-range indices give an all-zero row).
    OneHot { depth: usize, dtype: DType },

    /// Sum over `axes`.
    ReduceSum {
        axes: Vec<usize>,
        #[serde(default)]
        keep_dims: bool,
    },
    /// Mean over `axes`.
    ReduceMean {
        axes: Vec<usize>,
        #[serde(default)]
        keep_dims: bool,
    },
    /// Maximum over `axes`.
    ReduceMax {
        axes: Vec<usize>,
        #[serde(default)]
        keep_dims: bool,
    },
    /// Index of the maximum along `axis` (first on ties) -> I32, axis removed.
    ArgMax { axis: usize },

    /// Same elements, new shape (same element count).
    Reshape { shape: Shape },
    /// Permute dimensions: output dim `i` is input dim `perm[i]`.
    Transpose { perm: Vec<usize> },
    /// Broadcast to `shape` (NumPy rules).
    Broadcast { shape: Shape },
    /// The sub-tensor `[begin, end)` in every dimension.
    Slice { begin: Vec<usize>, end: Vec<usize> },
    /// Zero padding: `before[i]` and `after[i]` elements around dimension `i`.
    Pad {
        before: Vec<usize>,
        after: Vec<usize>,
    },
    /// Concatenate all inputs (at least one) along `axis`.
    Concat { axis: usize },
    /// Convert to `dtype` (float->int truncates toward zero, as TensorFlow's cast does).
    Cast { dtype: DType },
    /// One replica's shard of the mean of its input over `replicas` replicas (a cross-replica
    /// reduce-scatter, popops' `replicatedReduceScatter`): the input's `n` elements in
    /// row-major order, zero-padded to `replicas × k` with `k = ceil(n / replicas)`, are
    /// averaged element-wise over the replicas (summed in replica order, then scaled, as the
    /// `CrossReplica` all-reduce does), and replica `r` keeps elements `[r k, (r + 1) k)`: a
    /// 1-D float tensor of `k` elements. Replicated tensor sharding (`ir::sharding`) makes
    /// it; with one replica it is the flattened input.
    ReplicatedReduceScatter { replicas: u32 },
    /// The concatenation, in replica order, of every replica's 1-D input of `k` elements,
    /// truncated to `shape`'s `n` elements and reshaped to `shape`, where `k = ceil(n /
    /// replicas)` (a cross-replica all-gather, popops' `replicatedAllGather`). Made by
    /// replicated tensor sharding; with one replica it is the input reshaped.
    ReplicatedAllGather { replicas: u32, shape: Shape },

    /// `(x[N, C, H, W], w[O, C/groups, KH, KW]) -> [N, O, OH, OW]`: a 2-D convolution
    /// (cross-correlation, as PyTorch's and ONNX's `Conv`). `stride` and `dilation` are
    /// `[height, width]` (default `[1, 1]`), `padding` `[top, left, bottom, right]` (default
    /// none), `groups` splits the channels (default 1; `groups = C` is depthwise). Bias is a
    /// separate `Add`. See [`crate::conv`].
    Conv2d {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        stride: Vec<usize>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        padding: Vec<usize>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        dilation: Vec<usize>,
        #[serde(default = "one", skip_serializing_if = "is_one")]
        groups: usize,
    },
    /// `(dy[N, O, OH, OW], w) -> dx[N, C, H, W]`: the input gradient of the `Conv2d` with
    /// these attributes over an input of spatial size `input_size` `[H, W]`.
    Conv2dInputGrad {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        stride: Vec<usize>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        padding: Vec<usize>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        dilation: Vec<usize>,
        #[serde(default = "one", skip_serializing_if = "is_one")]
        groups: usize,
        input_size: Vec<usize>,
    },
    /// `(x[N, C, H, W], dy[N, O, OH, OW]) -> dw[O, C/groups, KH, KW]`: the weight gradient of
    /// the `Conv2d` with these attributes and kernel `kernel_size` `[KH, KW]`.
    Conv2dWeightGrad {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        stride: Vec<usize>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        padding: Vec<usize>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        dilation: Vec<usize>,
        #[serde(default = "one", skip_serializing_if = "is_one")]
        groups: usize,
        kernel_size: Vec<usize>,
    },
    /// Max pooling of `x[N, C, H, W]` over `kernel` `[height, width]` windows; `stride`
    /// defaults to the kernel, `padding` `[top, left, bottom, right]` to none (padded
    /// positions never win).
    MaxPool2d {
        kernel: Vec<usize>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        stride: Vec<usize>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        padding: Vec<usize>,
    },
    /// `(x, dy) -> dx`: the gradient of `MaxPool2d` with these attributes; each window's
    /// `dy` goes to every element of the window equal to the window's maximum.
    MaxPool2dGrad {
        kernel: Vec<usize>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        stride: Vec<usize>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        padding: Vec<usize>,
    },
    /// Average pooling (composite): the window's sum divided by its size
    /// (`count_include_pad`, the default, as PyTorch) or by the number of input elements in
    /// it.
    AvgPool2d {
        kernel: Vec<usize>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        stride: Vec<usize>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        padding: Vec<usize>,
        #[serde(default = "yes", skip_serializing_if = "is_true")]
        count_include_pad: bool,
    },
    /// `x[N, C, H, W] -> [N, C]`: the mean over the spatial field (composite).
    GlobalAvgPool,
    /// `x -> [d0·…·d(axis−1), d(axis)·…]` (composite; `axis` defaults to 1, as ONNX's).
    Flatten {
        #[serde(default = "one", skip_serializing_if = "is_one")]
        axis: usize,
    },
    /// `(x[N, C, ...], scale[C], shift[C], running_mean[C], running_var[C]) -> y` (composite):
    /// batch normalisation. A training step normalises with the batch's statistics and
    /// updates the running statistics (two `Variable`s) with `momentum`, as PyTorch does; an
    /// inference run normalises with the running statistics. Statistics are computed in FP32
    /// under every precision policy (see [`crate::decompose`]).
    BatchNorm {
        #[serde(default = "default_epsilon")]
        epsilon: f64,
        #[serde(default = "default_momentum")]
        momentum: f64,
    },
    /// `(x[N, C, ...], scale[C], shift[C]) -> y` (composite): group normalisation over
    /// `groups` groups of channels, statistics in FP32.
    GroupNorm {
        groups: usize,
        #[serde(default = "default_epsilon")]
        epsilon: f64,
    },

    /// A device-to-host stream (outfeed) named `stream`; passes its input through.
    Outfeed { stream: String },
    /// `(variable, value)`: the variable takes `value` at the end of the node's phase. The
    /// first input must be a `Variable` node; the value's type must equal the variable's.
    Assign,
}

fn one() -> usize {
    1
}

fn is_one(v: &usize) -> bool {
    *v == 1
}

fn yes() -> bool {
    true
}

fn is_true(v: &bool) -> bool {
    *v
}

/// PyTorch's default epsilon of its normalisations.
fn default_epsilon() -> f64 {
    1e-5
}

/// PyTorch's default momentum of `BatchNorm2d`'s running statistics.
fn default_momentum() -> f64 {
    0.1
}

/// How many inputs an op takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    /// Exactly this many.
    Exact(usize),
    /// At least this many.
    AtLeast(usize),
}

impl Arity {
    /// True when `n` inputs are acceptable.
    pub fn accepts(self, n: usize) -> bool {
        match self {
            Arity::Exact(k) => n == k,
            Arity::AtLeast(k) => n >= k,
        }
    }
}

impl std::fmt::Display for Arity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Arity::Exact(k) => write!(f, "{k}"),
            Arity::AtLeast(k) => write!(f, "at least {k}"),
        }
    }
}

impl Op {
    /// The names of all ops, as written in the text format.
    pub const NAMES: &'static [&'static str] = &[
        "Input",
        "Variable",
        "Constant",
        "MatMul",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Max",
        "Min",
        "ScaledAdd",
        "Equal",
        "Greater",
        "Less",
        "Select",
        "Neg",
        "Abs",
        "Exp",
        "Log",
        "Sqrt",
        "Relu",
        "Clip",
        "Sigmoid",
        "Tanh",
        "Gelu",
        "ActivationGrad",
        "Softmax",
        "LogSoftmax",
        "SparseSoftmaxCrossEntropy",
        "OneHot",
        "ReduceSum",
        "ReduceMean",
        "ReduceMax",
        "ArgMax",
        "Reshape",
        "Transpose",
        "Broadcast",
        "Slice",
        "Pad",
        "Concat",
        "Cast",
        "ReplicatedReduceScatter",
        "ReplicatedAllGather",
        "Conv2d",
        "Conv2dInputGrad",
        "Conv2dWeightGrad",
        "MaxPool2d",
        "MaxPool2dGrad",
        "AvgPool2d",
        "GlobalAvgPool",
        "Flatten",
        "BatchNorm",
        "GroupNorm",
        "Outfeed",
        "Assign",
    ];

    /// The op's name, as written in the text format.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input { .. } => "Input",
            Op::Variable { .. } => "Variable",
            Op::Constant { .. } => "Constant",
            Op::MatMul => "MatMul",
            Op::Add => "Add",
            Op::Sub => "Sub",
            Op::Mul => "Mul",
            Op::Div => "Div",
            Op::Max => "Max",
            Op::Min => "Min",
            Op::ScaledAdd { .. } => "ScaledAdd",
            Op::Equal => "Equal",
            Op::Greater => "Greater",
            Op::Less => "Less",
            Op::Select => "Select",
            Op::Neg => "Neg",
            Op::Abs => "Abs",
            Op::Exp => "Exp",
            Op::Log => "Log",
            Op::Sqrt => "Sqrt",
            Op::Relu => "Relu",
            Op::Clip { .. } => "Clip",
            Op::Sigmoid => "Sigmoid",
            Op::Tanh => "Tanh",
            Op::Gelu => "Gelu",
            Op::ActivationGrad { .. } => "ActivationGrad",
            Op::Softmax { .. } => "Softmax",
            Op::LogSoftmax { .. } => "LogSoftmax",
            Op::SparseSoftmaxCrossEntropy { .. } => "SparseSoftmaxCrossEntropy",
            Op::OneHot { .. } => "OneHot",
            Op::ReduceSum { .. } => "ReduceSum",
            Op::ReduceMean { .. } => "ReduceMean",
            Op::ReduceMax { .. } => "ReduceMax",
            Op::ArgMax { .. } => "ArgMax",
            Op::Reshape { .. } => "Reshape",
            Op::Transpose { .. } => "Transpose",
            Op::Broadcast { .. } => "Broadcast",
            Op::Slice { .. } => "Slice",
            Op::Pad { .. } => "Pad",
            Op::Concat { .. } => "Concat",
            Op::Cast { .. } => "Cast",
            Op::ReplicatedReduceScatter { .. } => "ReplicatedReduceScatter",
            Op::ReplicatedAllGather { .. } => "ReplicatedAllGather",
            Op::Conv2d { .. } => "Conv2d",
            Op::Conv2dInputGrad { .. } => "Conv2dInputGrad",
            Op::Conv2dWeightGrad { .. } => "Conv2dWeightGrad",
            Op::MaxPool2d { .. } => "MaxPool2d",
            Op::MaxPool2dGrad { .. } => "MaxPool2dGrad",
            Op::AvgPool2d { .. } => "AvgPool2d",
            Op::GlobalAvgPool => "GlobalAvgPool",
            Op::Flatten { .. } => "Flatten",
            Op::BatchNorm { .. } => "BatchNorm",
            Op::GroupNorm { .. } => "GroupNorm",
            Op::Outfeed { .. } => "Outfeed",
            Op::Assign => "Assign",
        }
    }

    /// How many inputs the op takes.
    pub fn arity(&self) -> Arity {
        match self {
            Op::Input { .. } | Op::Variable { .. } | Op::Constant { .. } => Arity::Exact(0),
            Op::Select => Arity::Exact(3),
            Op::Concat { .. } => Arity::AtLeast(1),
            Op::SparseSoftmaxCrossEntropy { .. }
            | Op::Assign
            | Op::Conv2d { .. }
            | Op::Conv2dInputGrad { .. }
            | Op::Conv2dWeightGrad { .. }
            | Op::MaxPool2dGrad { .. } => Arity::Exact(2),
            Op::BatchNorm { .. } => Arity::Exact(5),
            Op::GroupNorm { .. } => Arity::Exact(3),
            op if op.shared_dtype_from() == Some(0) => Arity::Exact(2),
            _ => Arity::Exact(1),
        }
    }

    /// The first of the inputs that must all have one dtype: every input of a binary op, a
    /// matmul, `ScaledAdd`, `ActivationGrad` and `Concat`; `Select`'s two values after its
    /// condition. `None` where the inputs' dtypes are independent.
    pub fn shared_dtype_from(&self) -> Option<usize> {
        match self {
            Op::Select => Some(1),
            Op::MatMul
            | Op::ScaledAdd { .. }
            | Op::ActivationGrad { .. }
            | Op::Concat { .. }
            | Op::Conv2d { .. }
            | Op::Conv2dInputGrad { .. }
            | Op::Conv2dWeightGrad { .. }
            | Op::MaxPool2dGrad { .. } => Some(0),
            op if op.binary().is_some() => Some(0),
            _ => None,
        }
    }

    /// The element-wise unary op this is, if any.
    pub fn unary(&self) -> Option<UnaryOp> {
        Some(match self {
            Op::Neg => UnaryOp::Neg,
            Op::Abs => UnaryOp::Abs,
            Op::Exp => UnaryOp::Exp,
            Op::Log => UnaryOp::Log,
            Op::Sqrt => UnaryOp::Sqrt,
            Op::Relu => UnaryOp::Relu,
            Op::Sigmoid => UnaryOp::Sigmoid,
            Op::Tanh => UnaryOp::Tanh,
            Op::Gelu => UnaryOp::Gelu,
            _ => return None,
        })
    }

    /// The element-wise binary op this is, if any (arithmetic and comparisons).
    pub fn binary(&self) -> Option<BinaryOp> {
        Some(match self {
            Op::Add => BinaryOp::Add,
            Op::Sub => BinaryOp::Sub,
            Op::Mul => BinaryOp::Mul,
            Op::Div => BinaryOp::Div,
            Op::Max => BinaryOp::Max,
            Op::Min => BinaryOp::Min,
            Op::Equal => BinaryOp::Equal,
            Op::Greater => BinaryOp::Greater,
            Op::Less => BinaryOp::Less,
            _ => return None,
        })
    }

    /// True for ops with no inputs that define a tensor (Input, Variable, Constant).
    pub fn is_source(&self) -> bool {
        matches!(
            self,
            Op::Input { .. } | Op::Variable { .. } | Op::Constant { .. }
        )
    }

    /// True for the cross-replica collectives (their value depends on the other replicas).
    pub fn is_collective(&self) -> bool {
        matches!(
            self,
            Op::ReplicatedReduceScatter { .. } | Op::ReplicatedAllGather { .. }
        )
    }

    /// True for ops whose effect is outside the dataflow (Outfeed, Assign).
    pub fn is_sink(&self) -> bool {
        matches!(self, Op::Outfeed { .. } | Op::Assign)
    }
}

/// Element-wise unary operations (a view of the unary [`Op`] variants).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnaryOp {
    Neg,
    Abs,
    Exp,
    Log,
    Sqrt,
    Relu,
    Sigmoid,
    Tanh,
    Gelu,
}

/// Element-wise binary operations (a view of the binary [`Op`] variants).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    Equal,
    Greater,
    Less,
}

impl BinaryOp {
    /// True for the comparisons, whose result is Bool.
    pub fn is_comparison(self) -> bool {
        matches!(self, BinaryOp::Equal | BinaryOp::Greater | BinaryOp::Less)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_table_is_complete_and_unique() {
        let mut names: Vec<&str> = Op::NAMES.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Op::NAMES.len());
        assert!(Op::NAMES.contains(&Op::Assign.name()));
        assert!(Op::NAMES.contains(&Op::ArgMax { axis: 0 }.name()));
    }
}

//! A program: the forward graph a user writes, its host streams and data sources, the
//! device-iteration count, and an optional training spec.
//!
//! This is what a `.ron` program file describes (see `docs/program-format.md`). The training
//! transform turns a program with a [`TrainingSpec`] into one training-step graph.

use crate::dtype::DType;
use crate::error::UnknownValue;
use crate::graph::Graph;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A precision policy `<compute>.<weights>`, as in Graphcore's examples (seed 003): inputs and
/// compute in the first type, weights and their updates in the second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Precision {
    /// FP16 compute, FP16 weights (stochastic rounding recommended).
    P16_16,
    /// FP16 compute, FP32 master weights cast to FP16 for compute.
    #[default]
    P16_32,
    /// FP32 everywhere.
    P32_32,
}

impl Precision {
    /// All policies.
    pub const ALL: [Precision; 3] = [Precision::P16_16, Precision::P16_32, Precision::P32_32];

    /// The dtype of inputs, activations and compute.
    pub fn compute(self) -> DType {
        match self {
            Precision::P16_16 | Precision::P16_32 => DType::F16,
            Precision::P32_32 => DType::F32,
        }
    }

    /// The dtype of weights and their updates.
    pub fn weights(self) -> DType {
        match self {
            Precision::P16_16 => DType::F16,
            Precision::P16_32 | Precision::P32_32 => DType::F32,
        }
    }

    /// The policy's name: `16.16`, `16.32` or `32.32`.
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::P16_16 => "16.16",
            Precision::P16_32 => "16.32",
            Precision::P32_32 => "32.32",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Precision {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Precision, UnknownValue> {
        match s {
            "16.16" => Ok(Precision::P16_16),
            "16.32" => Ok(Precision::P16_32),
            "32.32" => Ok(Precision::P32_32),
            _ => Err(UnknownValue {
                what: "precision",
                value: s.to_string(),
                expected: "16.16, 16.32 or 32.32",
            }),
        }
    }
}

impl Serialize for Precision {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Precision {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Precision, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The optimizer of a training step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum Optimizer {
    /// `w -= lr * g`.
    Sgd { learning_rate: f64 },
    /// `v = momentum * v + g; w -= lr * v` (TensorFlow's MomentumOptimizer).
    Momentum { learning_rate: f64, momentum: f64 },
    /// Adam (Kingma & Ba) with bias correction.
    Adam {
        learning_rate: f64,
        #[serde(default = "default_beta1")]
        beta1: f64,
        #[serde(default = "default_beta2")]
        beta2: f64,
        #[serde(default = "default_epsilon")]
        epsilon: f64,
    },
    /// AdamW (Loshchilov & Hutter) in PyTorch's `torch.optim.AdamW` form, which PopTorch's
    /// `poptorch.optim.AdamW` matches (the hands-on day's optimizer): decoupled weight decay
    /// `w *= 1 - lr * weight_decay`, then `w -= lr / (1 - beta1^t) * m / (sqrt(v) /
    /// sqrt(1 - beta2^t) + epsilon)`, with PopTorch's dtype options.
    AdamW {
        learning_rate: f64,
        #[serde(default = "default_beta1")]
        beta1: f64,
        #[serde(default = "default_beta2")]
        beta2: f64,
        #[serde(default = "default_adamw_epsilon")]
        epsilon: f64,
        #[serde(default = "default_weight_decay")]
        weight_decay: f64,
        /// The gradient accumulators' dtype (PopTorch's `accum_type`), unless the training
        /// spec's `accumulation_dtype` says otherwise; default the weight dtype.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        accum_type: Option<DType>,
        /// The dtype of `m` (PopTorch's `first_order_momentum_accum_type`); default the
        /// weight dtype.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        first_order_momentum_accum_type: Option<DType>,
        /// The dtype of `v` (PopTorch's `second_order_momentum_accum_type`); default the
        /// weight dtype.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        second_order_momentum_accum_type: Option<DType>,
    },
}

impl Optimizer {
    /// `sgd`, `momentum` or `adam`.
    pub fn name(&self) -> &'static str {
        match self {
            Optimizer::Sgd { .. } => "sgd",
            Optimizer::Momentum { .. } => "momentum",
            Optimizer::Adam { .. } => "adam",
            Optimizer::AdamW { .. } => "adamw",
        }
    }

    /// The learning rate.
    pub fn learning_rate(&self) -> f64 {
        match *self {
            Optimizer::Sgd { learning_rate }
            | Optimizer::Momentum { learning_rate, .. }
            | Optimizer::Adam { learning_rate, .. }
            | Optimizer::AdamW { learning_rate, .. } => learning_rate,
        }
    }

    /// The hyperparameters by field name, `learning_rate` first, then in declaration order.
    pub fn hyperparameters(&self) -> Vec<(&'static str, f64)> {
        match *self {
            Optimizer::Sgd { learning_rate } => vec![("learning_rate", learning_rate)],
            Optimizer::Momentum {
                learning_rate,
                momentum,
            } => vec![("learning_rate", learning_rate), ("momentum", momentum)],
            Optimizer::Adam {
                learning_rate,
                beta1,
                beta2,
                epsilon,
            } => vec![
                ("learning_rate", learning_rate),
                ("beta1", beta1),
                ("beta2", beta2),
                ("epsilon", epsilon),
            ],
            Optimizer::AdamW {
                learning_rate,
                beta1,
                beta2,
                epsilon,
                weight_decay,
                ..
            } => vec![
                ("learning_rate", learning_rate),
                ("beta1", beta1),
                ("beta2", beta2),
                ("epsilon", epsilon),
                ("weight_decay", weight_decay),
            ],
        }
    }

    /// The gradient accumulators' dtype the optimizer asks for (AdamW's `accum_type`).
    pub fn accum_type(&self) -> Option<DType> {
        match *self {
            Optimizer::AdamW { accum_type, .. } => accum_type,
            _ => None,
        }
    }
}

/// torch.optim.AdamW's default epsilon.
fn default_adamw_epsilon() -> f64 {
    1e-8
}
/// torch.optim.AdamW's default weight decay.
fn default_weight_decay() -> f64 {
    0.01
}
fn default_beta1() -> f64 {
    0.9
}
fn default_beta2() -> f64 {
    0.999
}
fn default_epsilon() -> f64 {
    1e-7
}

/// What turns a forward graph into a training step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingSpec {
    /// Name of the scalar loss node.
    pub loss: String,
    /// The optimizer.
    pub optimizer: Optimizer,
    /// Static loss scaling factor (1.0 = none): the loss is multiplied by it before the
    /// backward pass and the gradients divided by it before the update.
    #[serde(default = "one")]
    pub loss_scaling: f64,
    /// The precision policy.
    #[serde(default)]
    pub precision: Precision,
    /// Micro-batches per weight update.
    #[serde(default = "one_u32")]
    pub gradient_accumulation: u32,
    /// Dtype of the gradient accumulators (default: the weights' dtype).
    #[serde(default)]
    pub accumulation_dtype: Option<DType>,
    /// Batch norm's batch statistics in two passes, the mean and then the squared deviations
    /// from it (PopTorch's `opts.Precision.enableStableNorm(True)`, PopLibs' `stableAlgo`),
    /// instead of PopLibs' default single sweep (`E[x²] − E[x]²`); see [`crate::norm`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stable_norm: bool,
}

fn one() -> f64 {
    1.0
}
fn one_u32() -> u32 {
    1
}

/// Which columns of a CSV file feed a stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Columns {
    /// Columns `[start, end)` by position.
    Range(usize, usize),
    /// Columns by header name, in this order.
    Names(Vec<String>),
}

/// Where an infeed's data comes from on the host.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum DataSource {
    /// Rows of a CSV file (path relative to the program file); each row gives one sample
    /// (the stream's shape without its leading batch dimension). Wraps around at the end.
    Csv {
        path: String,
        columns: Columns,
        #[serde(default = "yes")]
        header: bool,
    },
    /// Every element equal to the value.
    Constant(f64),
    /// Seeded uniform values in `[low, high)`.
    Uniform { low: f64, high: f64, seed: u64 },
    /// `start, start + step, ...` over the elements of successive micro-batches.
    Sequence { start: f64, step: f64 },
}

fn yes() -> bool {
    true
}

/// The host-side source of one infeed stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InfeedSpec {
    /// The stream name (an `Input` node's `stream`).
    pub stream: String,
    /// The data source.
    pub source: DataSource,
}

/// How an outfeed's entries are returned to the host (TF `IPUOutfeedMode`, PopTorch
/// `OutputMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum OutfeedMode {
    /// Every entry.
    #[default]
    All,
    /// Only the last entry.
    Last,
    /// The element-wise sum of all entries.
    Sum,
    /// Every N-th entry (entries N, 2N, ...).
    Every(u32),
}

impl fmt::Display for OutfeedMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutfeedMode::All => f.write_str("all"),
            OutfeedMode::Last => f.write_str("last"),
            OutfeedMode::Sum => f.write_str("sum"),
            OutfeedMode::Every(n) => write!(f, "every:{n}"),
        }
    }
}

impl FromStr for OutfeedMode {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<OutfeedMode, UnknownValue> {
        match s {
            "all" => Ok(OutfeedMode::All),
            "last" => Ok(OutfeedMode::Last),
            "sum" => Ok(OutfeedMode::Sum),
            _ => match s.strip_prefix("every:").map(str::parse::<u32>) {
                Some(Ok(n)) if n > 0 => Ok(OutfeedMode::Every(n)),
                _ => Err(UnknownValue {
                    what: "outfeed mode",
                    value: s.to_string(),
                    expected: "all, last, sum or every:N with N > 0",
                }),
            },
        }
    }
}

impl Serialize for OutfeedMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for OutfeedMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<OutfeedMode, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The default host-side mode of one outfeed stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutfeedSpec {
    /// The stream name (an `Outfeed` node's `stream`).
    pub stream: String,
    /// How entries are returned.
    pub mode: OutfeedMode,
}

/// A program: forward graph, streams, loop count and optional training.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    /// The program's name (used in reports).
    pub name: String,
    /// What the program shows (free text).
    pub description: String,
    /// The forward graph.
    pub graph: Graph,
    /// Training, if the program trains.
    pub training: Option<TrainingSpec>,
    /// Host data sources of infeeds.
    pub infeeds: Vec<InfeedSpec>,
    /// Default modes of outfeeds (streams not listed use `all`).
    pub outfeeds: Vec<OutfeedSpec>,
    /// Loop iterations per device run (`loops.repeat` count / PopTorch `deviceIterations`).
    pub device_iterations: u32,
    /// The fraction of each tile's memory the planners of matmuls and convolutions may use
    /// for an op's operands and temporaries (PopLibs' `availableMemoryProportion`); `None`:
    /// the compiler's default (0.6).
    pub available_memory_proportion: Option<f64>,
    /// Per-op proportions by node name, overriding the program's (as
    /// `poptorch.set_available_memory` sets one layer's); an op's backward passes (nodes named
    /// `bwd/NAME/...`) take its entry.
    pub memory_proportions: std::collections::BTreeMap<String, f64>,
    /// The pipeline: split points, schedule and the IPU of each stage; `None`: one IPU.
    pub pipeline: Option<crate::pipeline::PipelineSpec>,
    /// Recompute the forward activations the backward pass reads from checkpoints instead of
    /// keeping them (TF-IPU guide §6.6); pipeline stages are implicit checkpoints.
    pub recompute: bool,
    /// Explicit recomputation checkpoints: forward nodes whose values are kept.
    pub recompute_checkpoints: Vec<String>,
    /// Replicas of the program (PopTorch's `replicationFactor`): data-parallel copies whose
    /// gradients are averaged before each weight update.
    pub replication_factor: u32,
    /// Optimizer state in streaming memory (the TF-IPU guide §6.8): loaded before the weight
    /// update and stored after it, off the tiles the rest of the time.
    pub offload_optimizer_state: bool,
    /// Replicated tensor sharding of the optimizer state (the TF-IPU guide §6.9, TF's
    /// `replicated_optimizer_state_sharding`): each replica holds and updates one shard of it
    /// ([`crate::sharding`]). No effect with one replica.
    pub replicated_optimizer_state_sharding: bool,
}

impl Program {
    /// Everything but the graph (an empty one in its place), for transforms that rebuild
    /// the graph without holding a large one twice.
    pub fn clone_without_graph(&self) -> Program {
        Program {
            name: self.name.clone(),
            description: self.description.clone(),
            graph: Graph::new(),
            training: self.training.clone(),
            infeeds: self.infeeds.clone(),
            outfeeds: self.outfeeds.clone(),
            device_iterations: self.device_iterations,
            available_memory_proportion: self.available_memory_proportion,
            memory_proportions: self.memory_proportions.clone(),
            pipeline: self.pipeline.clone(),
            recompute: self.recompute,
            recompute_checkpoints: self.recompute_checkpoints.clone(),
            replication_factor: self.replication_factor,
            offload_optimizer_state: self.offload_optimizer_state,
            replicated_optimizer_state_sharding: self.replicated_optimizer_state_sharding,
        }
    }

    /// A program around a graph, with no training, no feed sources and one iteration.
    pub fn new(name: impl Into<String>, graph: Graph) -> Program {
        Program {
            name: name.into(),
            description: String::new(),
            graph,
            training: None,
            infeeds: Vec::new(),
            outfeeds: Vec::new(),
            device_iterations: 1,
            available_memory_proportion: None,
            memory_proportions: std::collections::BTreeMap::new(),
            pipeline: None,
            recompute: false,
            recompute_checkpoints: Vec::new(),
            replication_factor: 1,
            offload_optimizer_state: false,
            replicated_optimizer_state_sharding: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precision_and_modes_parse() {
        for p in Precision::ALL {
            assert_eq!(p.as_str().parse::<Precision>(), Ok(p));
        }
        assert!("16.8".parse::<Precision>().is_err());
        assert_eq!(Precision::P16_32.compute(), DType::F16);
        assert_eq!(Precision::P16_32.weights(), DType::F32);
        for m in ["all", "last", "sum", "every:3"] {
            assert_eq!(m.parse::<OutfeedMode>().unwrap().to_string(), m);
        }
        assert!("every:0".parse::<OutfeedMode>().is_err());
        assert!("some".parse::<OutfeedMode>().is_err());
    }
}

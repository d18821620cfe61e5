//! Options of one compilation: the PopLibs-style planning knobs (`partialsType`,
//! `availableMemoryProportion`) and the loop structure of the training step.

use crate::error::CompileError;
use ipusim_ir::{DType, UnknownValue};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The accumulation type of matmul partials and sum reductions of half data (PopLibs
/// `partialsType`). Ignored when smaller than the data type (float data accumulates in
/// float), as in PopLibs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PartialsType {
    /// FP32 partials (PopLibs' default).
    #[default]
    Float,
    /// FP16 partials: faster AMP on Mk2, rounded at every partial write.
    Half,
}

impl PartialsType {
    /// The accumulation dtype for data of `dtype` (floats never accumulate in half).
    pub fn accumulator_for(self, dtype: DType) -> DType {
        match (self, dtype) {
            (PartialsType::Half, DType::F16) => DType::F16,
            (_, DType::F16 | DType::F32) => DType::F32,
            (_, other) => other,
        }
    }

    /// `float` or `half`, as PopLibs spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            PartialsType::Float => "float",
            PartialsType::Half => "half",
        }
    }
}

impl fmt::Display for PartialsType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PartialsType {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<PartialsType, UnknownValue> {
        match s {
            "float" => Ok(PartialsType::Float),
            "half" => Ok(PartialsType::Half),
            _ => Err(UnknownValue {
                what: "partials type",
                value: s.to_string(),
                expected: "float or half",
            }),
        }
    }
}

/// Options of `ipusim_compiler::compile`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompileOptions {
    /// Matmul and reduction partials type.
    pub partials_type: PartialsType,
    /// Fraction of each tile's memory the matmul planner may use for temporaries (PopLibs
    /// `availableMemoryProportion`, default 0.6).
    pub available_memory_proportion: f64,
    /// Micro-batches per weight update: the Step phase repeats this many times before the
    /// Update phase runs.
    pub gradient_accumulation: u32,
    /// Training steps per device run: the outer `Repeat` count.
    pub device_iterations: u32,
    /// Run the verifier between passes.
    pub verify: bool,
    /// Per-op proportions by IR node name, overriding `available_memory_proportion` for that
    /// node and its backward passes (nodes named `bwd/NAME/...`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub memory_proportions: std::collections::BTreeMap<String, f64>,
    /// Optimizer state (variables only the weight update reads and writes) in streaming
    /// memory: `TensorKind::RemoteVariable`, loaded before the update and stored after it
    /// (the TF-IPU guide §6.8).
    #[serde(default)]
    pub offload_optimizer_state: bool,
    /// Fuse chains of element-wise ops into one vertex per tile, as PopLibs' map
    /// expressions with `enableGenerateCodelet` (its default) do; off, every op is its own
    /// compute set and every intermediate a tensor the debugger can print.
    #[serde(default = "yes")]
    pub elementwise_fusion: bool,
    /// With one micro-batch per weight update on one IPU (one replica, no pipeline, the
    /// optimizer state on chip), each variable's update runs as soon as its gradient and the
    /// step's last read of the variable allow, so gradients do not wait for the end of the
    /// step (PopART's `delayVarUpdates = false`; a memory-minimising scheduler's choice).
    /// Off (the default, PopART's `delayVarUpdates = true`), every update runs after the
    /// whole step (the Update phase). The values are the same either way.
    #[serde(default)]
    pub early_weight_update: bool,
}

fn yes() -> bool {
    true
}

impl Default for CompileOptions {
    fn default() -> CompileOptions {
        CompileOptions {
            partials_type: PartialsType::Float,
            available_memory_proportion: 0.6,
            gradient_accumulation: 1,
            device_iterations: 1,
            verify: true,
            memory_proportions: std::collections::BTreeMap::new(),
            offload_optimizer_state: false,
            elementwise_fusion: true,
            early_weight_update: false,
        }
    }
}

impl CompileOptions {
    /// The memory proportion of the IR node named `name`: its own entry, else the entry of
    /// the forward op whose backward pass it is (`bwd/NAME/...`), else the global one.
    pub fn memory_proportion(&self, name: &str) -> f64 {
        if let Some(&p) = self.memory_proportions.get(name) {
            return p;
        }
        let forward = name
            .strip_prefix("bwd/")
            .and_then(|rest| rest.rsplit_once('/'))
            .map(|(op, _)| op);
        forward
            .and_then(|op| self.memory_proportions.get(op))
            .copied()
            .unwrap_or(self.available_memory_proportion)
    }

    /// Checks the ranges of every option.
    pub fn validate(&self) -> Result<(), CompileError> {
        let p = self.available_memory_proportion;
        if !(p > 0.0 && p <= 1.0) {
            return Err(CompileError::Option {
                option: "available_memory_proportion",
                message: format!("{p} is not in (0, 1]"),
            });
        }
        if let Some((name, p)) = self
            .memory_proportions
            .iter()
            .find(|(_, &p)| !(p > 0.0 && p <= 1.0))
        {
            return Err(CompileError::Option {
                option: "memory_proportions",
                message: format!("'{name}': {p} is not in (0, 1]"),
            });
        }
        if self.gradient_accumulation == 0 {
            return Err(CompileError::Option {
                option: "gradient_accumulation",
                message: "must be at least 1".into(),
            });
        }
        if self.device_iterations == 0 {
            return Err(CompileError::Option {
                option: "device_iterations",
                message: "must be at least 1".into(),
            });
        }
        Ok(())
    }
}

//! A summary of a validated program: ops, parameters, streams, training and lint findings, as
//! `ipusim check` prints it (text) and serialises it (`--json`).
//!
//! Dtypes and byte counts are those under the precision policy ([`crate::effective`]): a
//! stream written `F32` in a 16.32 program travels as FP16, which is what the host link and a
//! PopVision trace would show. The JSON field names are a public contract.

use crate::dtype::DType;
use crate::effective::effective_dtypes;
use crate::lint::{lint_program, LintWarning};
use crate::op::Op;
use crate::program::{Columns, DataSource, OutfeedMode, Program};
use serde::Serialize;
use std::collections::BTreeMap;

/// Everything `ipusim check` reports about a valid program.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProgramSummary {
    /// Program name.
    pub name: String,
    /// Program description.
    pub description: String,
    /// Number of nodes.
    pub nodes: usize,
    /// Node count by op name, in name order.
    pub ops: BTreeMap<String, usize>,
    /// The variables.
    pub parameters: Parameters,
    /// Host-to-device streams.
    pub infeeds: Vec<InfeedSummary>,
    /// Device-to-host streams.
    pub outfeeds: Vec<OutfeedSummary>,
    /// Loop iterations per device run.
    pub device_iterations: u32,
    /// Micro-batches per device run: device iterations x gradient accumulation.
    pub micro_batches_per_run: u64,
    /// Host-to-device bytes per run over all infeeds.
    pub infeed_bytes_per_run: u64,
    /// Device-to-host bytes per run over all outfeeds, before the outfeed modes reduce them.
    pub outfeed_bytes_per_run: u64,
    /// The training spec, if any.
    pub training: Option<TrainingSummary>,
    /// Lint findings.
    pub warnings: Vec<LintWarning>,
}

/// Variables: how many, how large.
#[derive(Clone, Debug, PartialEq, Default, Serialize)]
pub struct Parameters {
    /// Number of variables.
    pub count: usize,
    /// Total elements.
    pub elements: u64,
    /// Total bytes in their stored dtypes.
    pub bytes: u64,
    /// The same totals by stored dtype (`f16`, `f32`, ...).
    pub by_dtype: BTreeMap<String, DTypeTotal>,
    /// Elements of the variables that are state rather than trainable parameters: written by
    /// an `Assign` or kept as a batch norm's running statistics (not counted in a model's
    /// parameter count, as PyTorch keeps them as buffers).
    pub state_elements: u64,
}

/// Totals of the variables of one dtype.
#[derive(Clone, Debug, PartialEq, Default, Serialize)]
pub struct DTypeTotal {
    pub count: usize,
    pub elements: u64,
    pub bytes: u64,
}

/// What every stream has: its name, node, dtypes and shape (the first fields of an
/// infeed's and an outfeed's JSON object).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StreamLink {
    /// Stream name.
    pub stream: String,
    /// The `Input` or `Outfeed` node.
    pub node: String,
    /// Dtype on the host link (under the precision policy).
    #[serde(serialize_with = "dtype_name")]
    pub dtype: DType,
    /// Dtype as written.
    #[serde(serialize_with = "dtype_name")]
    pub written_dtype: DType,
    /// Shape of one micro-batch (infeed) or entry (outfeed).
    pub shape: Vec<usize>,
}

/// One infeed stream.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InfeedSummary {
    /// Name, node, dtypes, shape.
    #[serde(flatten)]
    pub link: StreamLink,
    /// Bytes per micro-batch.
    pub bytes_per_micro_batch: u64,
    /// Where the data comes from (`none` when the program gives no source).
    pub source: String,
}

/// One outfeed stream.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OutfeedSummary {
    /// Name, node, dtypes, shape.
    #[serde(flatten)]
    pub link: StreamLink,
    /// Bytes per entry.
    pub bytes_per_entry: u64,
    /// The outfeed mode (`all`, `last`, `sum`, `every:N`).
    pub mode: String,
}

/// The training spec in a few fields.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TrainingSummary {
    /// Loss node.
    pub loss: String,
    /// `sgd`, `momentum` or `adam`.
    pub optimizer: String,
    /// The optimizer's hyperparameters by name.
    pub hyperparameters: BTreeMap<String, f64>,
    /// Precision policy (`16.16`, `16.32`, `32.32`).
    pub precision: String,
    /// Compute dtype of the policy.
    #[serde(serialize_with = "dtype_name")]
    pub compute_dtype: DType,
    /// Weight dtype of the policy.
    #[serde(serialize_with = "dtype_name")]
    pub weight_dtype: DType,
    /// Static loss scaling factor.
    pub loss_scaling: f64,
    /// Micro-batches per weight update.
    pub gradient_accumulation: u32,
    /// Dtype of the gradient accumulators.
    #[serde(serialize_with = "dtype_name")]
    pub accumulation_dtype: DType,
    /// Batch norm's batch statistics in two passes (the spec's `stable_norm`).
    pub stable_norm: bool,
}

/// Dtypes serialise by their lower-case names (`f16`), as in messages and reports.
fn dtype_name<S: serde::Serializer>(d: &DType, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(d.name())
}

/// Summarises a program; call it on a validated program.
pub fn summarize(program: &Program) -> ProgramSummary {
    let g = &program.graph;
    let eff = effective_dtypes(program);
    let dtype_of = |id| eff.get(&id).copied();
    let mut ops: BTreeMap<String, usize> = BTreeMap::new();
    let mut parameters = Parameters::default();
    let state: std::collections::BTreeSet<crate::graph::NodeId> = g
        .nodes()
        .flat_map(|(_, n)| match n.op {
            Op::Assign => n.inputs.first().copied().into_iter().collect::<Vec<_>>(),
            Op::BatchNorm { .. } => n.inputs.get(3..5).unwrap_or(&[]).to_vec(),
            _ => Vec::new(),
        })
        .collect();
    let mut infeeds = Vec::new();
    let mut outfeeds = Vec::new();
    for (id, node) in g.nodes() {
        *ops.entry(node.op.name().to_string()).or_default() += 1;
        let dtype = dtype_of(id).unwrap_or(node.ty.dtype);
        let elements = node.ty.num_elements() as u64;
        let bytes = elements.saturating_mul(dtype.size_bytes() as u64);
        let link = |stream: &str| StreamLink {
            stream: stream.to_string(),
            node: node.name.clone(),
            dtype,
            written_dtype: node.ty.dtype,
            shape: node.ty.shape.dims().to_vec(),
        };
        match &node.op {
            Op::Variable { .. } => {
                parameters.count += 1;
                parameters.elements += elements;
                if state.contains(&id) {
                    parameters.state_elements += elements;
                }
                parameters.bytes += bytes;
                let t = parameters.by_dtype.entry(dtype.to_string()).or_default();
                t.count += 1;
                t.elements += elements;
                t.bytes += bytes;
            }
            Op::Input { stream, .. } => infeeds.push(InfeedSummary {
                link: link(stream),
                bytes_per_micro_batch: bytes,
                source: program
                    .infeeds
                    .iter()
                    .find(|s| &s.stream == stream)
                    .map_or_else(|| "none".to_string(), |s| describe_source(&s.source)),
            }),
            Op::Outfeed { stream } => outfeeds.push(OutfeedSummary {
                link: link(stream),
                bytes_per_entry: bytes,
                mode: program
                    .outfeeds
                    .iter()
                    .find(|s| &s.stream == stream)
                    .map_or(OutfeedMode::All, |s| s.mode)
                    .to_string(),
            }),
            _ => {}
        }
    }
    let accumulation = program
        .training
        .as_ref()
        .map_or(1, |t| t.gradient_accumulation);
    let micro_batches_per_run = u64::from(program.device_iterations) * u64::from(accumulation);
    let infeed_bytes_per_run = infeeds
        .iter()
        .map(|s| {
            s.bytes_per_micro_batch
                .saturating_mul(micro_batches_per_run)
        })
        .sum();
    let outfeed_bytes_per_run = outfeeds
        .iter()
        .map(|s| s.bytes_per_entry.saturating_mul(micro_batches_per_run))
        .sum();
    let training = program.training.as_ref().map(|t| TrainingSummary {
        loss: t.loss.clone(),
        optimizer: t.optimizer.name().to_string(),
        hyperparameters: t
            .optimizer
            .hyperparameters()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        precision: t.precision.to_string(),
        compute_dtype: t.precision.compute(),
        weight_dtype: t.precision.weights(),
        loss_scaling: t.loss_scaling,
        gradient_accumulation: t.gradient_accumulation,
        accumulation_dtype: t.accumulation_dtype.unwrap_or(t.precision.weights()),
        stable_norm: t.stable_norm,
    });
    ProgramSummary {
        name: program.name.clone(),
        description: program.description.clone(),
        nodes: g.len(),
        ops,
        parameters,
        infeeds,
        outfeeds,
        device_iterations: program.device_iterations,
        micro_batches_per_run,
        infeed_bytes_per_run,
        outfeed_bytes_per_run,
        training,
        warnings: lint_program(program),
    }
}

/// A one-line description of a data source.
pub fn describe_source(source: &DataSource) -> String {
    match source {
        DataSource::Csv {
            path,
            columns,
            header,
        } => {
            let cols = match columns {
                Columns::Range(a, b) => format!("columns {a}..{b}"),
                Columns::Names(names) => format!("columns {}", names.join(", ")),
            };
            let header = if *header { "" } else { ", no header" };
            format!("csv {path} ({cols}{header})")
        }
        DataSource::Constant(v) => format!("constant {v}"),
        DataSource::Uniform { low, high, seed } => {
            format!("uniform [{low}, {high}) seed {seed}")
        }
        DataSource::Sequence { start, step } => format!("sequence from {start} step {step}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op_tour::op_tour;

    #[test]
    fn tour_summary_counts_streams_and_parameters() {
        let p = op_tour().unwrap();
        let s = summarize(&p);
        assert_eq!(s.nodes, p.graph.len());
        assert_eq!(s.ops.len(), Op::NAMES.len() - crate::op_tour::CNN_OPS.len());
        // 16.16: every F32 variable is stored in FP16. w[3,5] + bias[5] + gain[5] + denom[5] + steps[].
        assert_eq!(s.parameters.count, 5);
        assert_eq!(s.parameters.elements, 15 + 5 + 5 + 5 + 1);
        assert_eq!(s.parameters.bytes, 31 * 2);
        assert_eq!(s.parameters.by_dtype["f16"].count, 5);
        let x = s.infeeds.iter().find(|i| i.link.stream == "x").unwrap();
        assert_eq!(
            (x.link.dtype, x.link.written_dtype),
            (DType::F16, DType::F32)
        );
        assert_eq!(x.bytes_per_micro_batch, 4 * 3 * 2);
        assert_eq!(x.source, "csv tour.csv (columns 0..3, no header)");
        // 3 device iterations x 4 micro-batches per update.
        assert_eq!(s.micro_batches_per_run, 12);
        let per_micro_batch: u64 = s.infeeds.iter().map(|i| i.bytes_per_micro_batch).sum();
        assert_eq!(s.infeed_bytes_per_run, per_micro_batch * 12);
        let loss = s.outfeeds.iter().find(|o| o.link.stream == "loss").unwrap();
        assert_eq!((loss.link.dtype, loss.mode.as_str()), (DType::F32, "all"));
        let t = s.training.unwrap();
        assert_eq!(t.optimizer, "adam");
        assert_eq!(t.accumulation_dtype, DType::F32);
    }
}

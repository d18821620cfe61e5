//! The program-level invariants 12-15 of [`super`]: device iterations, the training spec,
//! infeeds and outfeeds. Faults are [`IrError::Field`] errors naming the field's path in the
//! text format.

use super::field;
use crate::error::IrError;
use crate::graph::{Graph, Node, Phase};
use crate::op::Op;
use crate::program::{Columns, DataSource, OutfeedMode, Program, TrainingSpec};
use std::collections::{HashMap, HashSet};

/// Checks invariants 12-15 (the graph is already valid).
pub(super) fn check_program(program: &Program) -> Result<(), IrError> {
    if program.device_iterations == 0 {
        return Err(field("device_iterations", "must be at least 1, got 0"));
    }
    if let Some(spec) = &program.training {
        check_training(&program.graph, spec)?;
        if program
            .device_iterations
            .checked_mul(spec.gradient_accumulation)
            .is_none()
        {
            return Err(field(
                "device_iterations",
                format!(
                    "{} device iterations x {} accumulated micro-batches overflow the micro-batch count of a run",
                    program.device_iterations, spec.gradient_accumulation
                ),
            ));
        }
    }
    check_infeeds(program)?;
    check_outfeeds(program)?;
    check_policy_values(program)?;
    Ok(())
}

/// Invariant 6 again under the precision policy: a constant or variable written `F32` takes
/// the policy's dtype (`16.16` stores a variable and computes a constant in `f16`), so its
/// values must fit that dtype too — what the engine would refuse when it materialises them.
fn check_policy_values(program: &Program) -> Result<(), IrError> {
    let Some(spec) = &program.training else {
        return Ok(());
    };
    let dtypes = crate::effective::effective_dtypes(program);
    for (id, node) in program.graph.nodes() {
        if !matches!(node.op, Op::Constant { .. } | Op::Variable { .. }) {
            continue;
        }
        match dtypes.get(&id) {
            Some(&dtype) if dtype != node.ty.dtype => {
                let why = format!(
                    " (written {}, {dtype} under the precision policy {})",
                    node.ty.dtype, spec.precision
                );
                super::check_initial_values(&node.name, &node.op, dtype, &why)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Invariant 13.
fn check_training(graph: &Graph, spec: &TrainingSpec) -> Result<(), IrError> {
    let Some(id) = graph.find(&spec.loss) else {
        return Err(field(
            "training.loss",
            format!("no node is named '{}'", spec.loss),
        ));
    };
    let loss = graph.node(id);
    if loss.ty.shape.rank() != 0 || !loss.ty.dtype.is_float() {
        return Err(field(
            "training.loss",
            format!(
                "the loss '{}' must be a floating-point scalar, but has type {}",
                spec.loss, loss.ty
            ),
        ));
    }
    if loss.phase != Phase::Step {
        return Err(field(
            "training.loss",
            format!("the loss '{}' must run in the Step phase", spec.loss),
        ));
    }
    let positive = |path: &str, v: f64| {
        if v.is_finite() && v > 0.0 {
            Ok(())
        } else {
            Err(field(path, format!("must be finite and > 0, got {v}")))
        }
    };
    let unit = |path: &str, v: f64| {
        if v.is_finite() && (0.0..1.0).contains(&v) {
            Ok(())
        } else {
            Err(field(path, format!("must be in [0, 1), got {v}")))
        }
    };
    // AdamW's weight decay may be 0 (Adam's update), as `torch.optim.AdamW` allows.
    let non_negative = |path: &str, v: f64| {
        if v.is_finite() && v >= 0.0 {
            Ok(())
        } else {
            Err(field(path, format!("must be finite and >= 0, got {v}")))
        }
    };
    for (name, value) in spec.optimizer.hyperparameters() {
        let path = format!("training.optimizer.{name}");
        match name {
            "momentum" | "beta1" | "beta2" => unit(&path, value)?,
            "weight_decay" => non_negative(&path, value)?,
            _ => positive(&path, value)?,
        }
    }
    positive("training.loss_scaling", spec.loss_scaling)?;
    if spec.gradient_accumulation == 0 {
        return Err(field(
            "training.gradient_accumulation",
            "must be at least 1, got 0",
        ));
    }
    if let Some(d) = spec.accumulation_dtype {
        if !d.is_float() {
            return Err(field(
                "training.accumulation_dtype",
                format!("gradient accumulators must be f16 or f32, got {d}"),
            ));
        }
    }
    Ok(())
}

/// The `Input` node of each infeed stream.
fn input_streams(graph: &Graph) -> HashMap<&str, &Node> {
    graph
        .nodes()
        .filter_map(|(_, n)| match &n.op {
            Op::Input { stream, .. } => Some((stream.as_str(), n)),
            _ => None,
        })
        .collect()
}

/// Invariant 14.
fn check_infeeds(program: &Program) -> Result<(), IrError> {
    let inputs = input_streams(&program.graph);
    let mut specified: HashSet<&str> = HashSet::new();
    for (i, spec) in program.infeeds.iter().enumerate() {
        let at = |f: &str| format!("infeeds[{i}].{f}");
        let Some(node) = inputs.get(spec.stream.as_str()) else {
            let mut known: Vec<&str> = inputs.keys().copied().collect();
            known.sort_unstable();
            return Err(field(
                at("stream"),
                format!(
                    "no Input node reads a stream named '{}' (input streams: {})",
                    spec.stream,
                    list_or_none(&known)
                ),
            ));
        };
        if !specified.insert(spec.stream.as_str()) {
            return Err(field(
                at("stream"),
                format!("stream '{}' already has an infeed source", spec.stream),
            ));
        }
        let finite = |name: &str, v: f64| {
            if v.is_finite() {
                Ok(())
            } else {
                Err(field(
                    at(&format!("source.{name}")),
                    format!("must be finite, got {v}"),
                ))
            }
        };
        match &spec.source {
            DataSource::Csv { path, columns, .. } => {
                if path.is_empty() {
                    return Err(field(at("source.path"), "the CSV path must not be empty"));
                }
                check_columns(&at("source.columns"), &spec.stream, node, columns)?;
            }
            DataSource::Constant(v) => {
                if !v.is_finite() {
                    return Err(field(at("source"), format!("must be finite, got {v}")));
                }
            }
            DataSource::Uniform { low, high, .. } => {
                finite("low", *low)?;
                finite("high", *high)?;
                if low >= high {
                    return Err(field(
                        at("source.high"),
                        format!("uniform source needs low < high, got [{low}, {high})"),
                    ));
                }
            }
            DataSource::Sequence { start, step } => {
                finite("start", *start)?;
                finite("step", *step)?;
            }
        }
    }
    Ok(())
}

fn check_columns(path: &str, stream: &str, node: &Node, columns: &Columns) -> Result<(), IrError> {
    let dims = node.ty.shape.dims();
    let Some((_, sample)) = dims.split_first() else {
        return Err(field(
            path,
            format!(
                "stream '{stream}' has scalar type {}; a CSV source needs a leading batch dimension",
                node.ty
            ),
        ));
    };
    let per_sample: usize = sample.iter().product();
    let (given, what) = match columns {
        Columns::Range(start, end) => {
            if start >= end {
                return Err(field(path, format!("column range {start}..{end} is empty")));
            }
            (end - start, format!("columns {start}..{end}"))
        }
        Columns::Names(names) => {
            let mut seen = HashSet::new();
            if let Some(dup) = names.iter().find(|n| !seen.insert(n.as_str())) {
                return Err(field(path, format!("column '{dup}' is selected twice")));
            }
            if let Some(_empty) = names.iter().find(|n| n.is_empty()) {
                return Err(field(path, "column names must not be empty"));
            }
            (names.len(), format!("{} named columns", names.len()))
        }
    };
    if given != per_sample {
        return Err(field(
            path,
            format!(
                "{what} give {given} values per row, but one sample of stream '{stream}' ({}, batch dimension {}) has {per_sample} elements",
                node.ty, dims[0]
            ),
        ));
    }
    Ok(())
}

/// Invariant 15.
fn check_outfeeds(program: &Program) -> Result<(), IrError> {
    let mut streams: Vec<&str> = program
        .graph
        .nodes()
        .filter_map(|(_, n)| match &n.op {
            Op::Outfeed { stream } => Some(stream.as_str()),
            _ => None,
        })
        .collect();
    streams.sort_unstable();
    let mut specified: HashSet<&str> = HashSet::new();
    for (i, spec) in program.outfeeds.iter().enumerate() {
        if streams.binary_search(&spec.stream.as_str()).is_err() {
            return Err(field(
                format!("outfeeds[{i}].stream"),
                format!(
                    "no Outfeed node writes a stream named '{}' (outfeed streams: {})",
                    spec.stream,
                    list_or_none(&streams)
                ),
            ));
        }
        if !specified.insert(spec.stream.as_str()) {
            return Err(field(
                format!("outfeeds[{i}].stream"),
                format!("stream '{}' already has an outfeed mode", spec.stream),
            ));
        }
        if spec.mode == OutfeedMode::Every(0) {
            return Err(field(format!("outfeeds[{i}].mode"), "every:N needs N >= 1"));
        }
    }
    Ok(())
}

fn list_or_none(names: &[&str]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::models::{mlp, MlpSpec};
    use crate::program::{InfeedSpec, Optimizer, OutfeedSpec};
    use crate::validate::validate_program;

    fn small() -> Program {
        mlp(&MlpSpec {
            seed: 1,
            ..MlpSpec::new(4, &[6, 5, 3])
        })
        .unwrap()
    }

    fn sgd(loss: &str) -> TrainingSpec {
        TrainingSpec {
            loss: loss.into(),
            optimizer: Optimizer::Sgd { learning_rate: 0.1 },
            loss_scaling: 1.0,
            precision: Default::default(),
            gradient_accumulation: 1,
            accumulation_dtype: None,
            stable_norm: false,
        }
    }

    fn field_of(e: IrError) -> String {
        match e {
            IrError::Field { field, .. } => field,
            other => panic!("expected a field error, got {other}"),
        }
    }

    #[test]
    fn generated_programs_are_valid() {
        let mut p = small();
        p.training = Some(sgd("loss"));
        validate_program(&p).unwrap();
    }

    #[test]
    fn training_spec_ranges() {
        let mut p = small();
        for (spec, path) in [
            (sgd("nope"), "training.loss"),
            (sgd("dense1/matmul"), "training.loss"),
            (
                TrainingSpec {
                    optimizer: Optimizer::Sgd {
                        learning_rate: f64::NAN,
                    },
                    ..sgd("loss")
                },
                "training.optimizer.learning_rate",
            ),
            (
                TrainingSpec {
                    optimizer: Optimizer::Momentum {
                        learning_rate: 0.1,
                        momentum: 1.0,
                    },
                    ..sgd("loss")
                },
                "training.optimizer.momentum",
            ),
            (
                TrainingSpec {
                    optimizer: Optimizer::Adam {
                        learning_rate: 0.1,
                        beta1: 0.9,
                        beta2: 0.999,
                        epsilon: 0.0,
                    },
                    ..sgd("loss")
                },
                "training.optimizer.epsilon",
            ),
            (
                TrainingSpec {
                    loss_scaling: f64::INFINITY,
                    ..sgd("loss")
                },
                "training.loss_scaling",
            ),
            (
                TrainingSpec {
                    gradient_accumulation: 0,
                    ..sgd("loss")
                },
                "training.gradient_accumulation",
            ),
            (
                TrainingSpec {
                    accumulation_dtype: Some(DType::I32),
                    ..sgd("loss")
                },
                "training.accumulation_dtype",
            ),
        ] {
            p.training = Some(spec);
            assert_eq!(field_of(validate_program(&p).unwrap_err()), path);
        }
        p.training = Some(TrainingSpec {
            gradient_accumulation: 1 << 16,
            ..sgd("loss")
        });
        p.device_iterations = 1 << 16;
        assert_eq!(
            field_of(validate_program(&p).unwrap_err()),
            "device_iterations"
        );
        p.training = None;
        validate_program(&p).unwrap();
        p.device_iterations = 0;
        assert_eq!(
            field_of(validate_program(&p).unwrap_err()),
            "device_iterations"
        );
    }

    #[test]
    fn feeds_name_streams_and_match_sample_sizes() {
        let csv = |columns| DataSource::Csv {
            path: "d.csv".into(),
            columns,
            header: true,
        };
        let mut p = small();
        p.infeeds = vec![
            InfeedSpec {
                stream: "features".into(),
                source: csv(Columns::Range(0, 6)),
            },
            InfeedSpec {
                stream: "labels".into(),
                source: csv(Columns::Names(vec!["y".into()])),
            },
        ];
        p.outfeeds = vec![OutfeedSpec {
            stream: "loss".into(),
            mode: OutfeedMode::Every(2),
        }];
        validate_program(&p).unwrap();

        let mut q = p.clone();
        q.infeeds[0].source = csv(Columns::Range(0, 5));
        let e = validate_program(&q).unwrap_err();
        assert!(e.to_string().contains("give 5 values per row"), "{e}");
        assert_eq!(field_of(e), "infeeds[0].source.columns");

        let mut q = p.clone();
        q.infeeds[1].stream = "features".into();
        assert_eq!(
            field_of(validate_program(&q).unwrap_err()),
            "infeeds[1].stream"
        );

        let mut q = p.clone();
        q.infeeds[1].stream = "labelz".into();
        let e = validate_program(&q).unwrap_err();
        assert!(
            e.to_string().contains("input streams: features, labels"),
            "{e}"
        );

        let mut q = p.clone();
        q.outfeeds[0].stream = "features".into();
        assert_eq!(
            field_of(validate_program(&q).unwrap_err()),
            "outfeeds[0].stream"
        );

        let mut q = p.clone();
        q.outfeeds[0].mode = OutfeedMode::Every(0);
        assert_eq!(
            field_of(validate_program(&q).unwrap_err()),
            "outfeeds[0].mode"
        );

        let mut q = p;
        q.infeeds[0].source = DataSource::Uniform {
            low: 1.0,
            high: 0.0,
            seed: 3,
        };
        assert_eq!(
            field_of(validate_program(&q).unwrap_err()),
            "infeeds[0].source.high"
        );
    }
}

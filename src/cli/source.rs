//! Opening what a command is given: a RON program, or an ONNX model imported on the fly
//! (`ipusim compile model.onnx`), with the import options every such command shares.

use clap::Args;
use ipusim_ir::text::load_program;
use ipusim_ir::{DType, Optimizer, Precision, Program};
use ipusim_onnx::{Options, Training, Weights};
use std::path::Path;

/// How an ONNX model is imported (ignored for RON programs).
#[derive(Args, Debug, Clone, Default)]
pub struct ImportArgs {
    /// The shape of an ONNX input, binding its symbolic dimensions (repeatable):
    /// `--input-shape input=1x3x224x224`.
    #[arg(long = "input-shape", value_name = "NAME=DxDx...", value_parser = parse_input_shape)]
    pub input_shapes: Vec<(String, Vec<usize>)>,
    /// Build a training step over the ONNX model: a softmax cross-entropy loss over its
    /// output (`--loss-output`) against a labels stream, as PopART's TrainingSession.
    #[arg(long)]
    pub training: bool,
    /// The ONNX output that holds the logits (default: the model's only output).
    #[arg(long, value_name = "NAME")]
    pub loss_output: Option<String>,
    /// The labels stream of `--training` (I32, one label per sample).
    #[arg(long, value_name = "NAME", default_value = "labels")]
    pub labels: String,
    /// The optimizer of `--training`: `momentum` (SGD with momentum 0.9, lr 0.01, loss
    /// scaling 128, as `ipusim model`), `sgd` (without momentum) or `adamw` (the hands-on
    /// day's).
    #[arg(long, default_value = "momentum", value_parser = ["momentum", "sgd", "adamw"])]
    pub optimizer: String,
    /// The loss scaling of `--training`, replacing the optimizer's default (128 for
    /// `momentum`, 1000 for `adamw`).
    #[arg(long, value_name = "F")]
    pub loss_scaling: Option<f64>,
    /// Import every ONNX initializer as a constant (nothing trains).
    #[arg(long, conflicts_with = "trainable")]
    pub frozen: bool,
    /// Train only these ONNX initializers; the others are constants.
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub trainable: Option<Vec<String>>,
}

impl ImportArgs {
    /// The importer's options; `precision` is the training spec's (default 16.16).
    pub fn options(&self, precision: Option<Precision>) -> Options {
        let weights = match (&self.trainable, self.frozen) {
            (Some(names), _) => Weights::Only(names.clone()),
            (None, true) => Weights::Frozen,
            (None, false) => Weights::Trainable,
        };
        let training = self.training.then(|| {
            let base = Training::default();
            let (optimizer, loss_scaling) =
                optimizer(&self.optimizer, (base.optimizer.clone(), base.loss_scaling));
            Training {
                output: self.loss_output.clone(),
                labels: self.labels.clone(),
                optimizer,
                loss_scaling: self.loss_scaling.unwrap_or(loss_scaling),
                precision: precision.unwrap_or(base.precision),
            }
        });
        Options {
            name: None,
            input_shapes: self.input_shapes.clone(),
            weights,
            training,
        }
    }
}

/// The optimizer and loss scaling named by `--optimizer`: `adamw` is the seed's (hands-on
/// day 3) optimizer and loss scaling; anything else keeps `default`.
pub(super) fn optimizer(name: &str, default: (Optimizer, f64)) -> (Optimizer, f64) {
    match name {
        "adamw" => (
            Optimizer::AdamW {
                learning_rate: 0.001,
                beta1: 0.9,
                beta2: 0.999,
                epsilon: 1e-8,
                weight_decay: 0.01,
                accum_type: Some(DType::F16),
                first_order_momentum_accum_type: Some(DType::F16),
                second_order_momentum_accum_type: Some(DType::F32),
            },
            1000.0,
        ),
        // Graphcore's CNN training default (`--optimiser SGD`, no momentum), at the zoo's
        // learning rate.
        "sgd" => (
            Optimizer::Sgd {
                learning_rate: 0.01,
            },
            default.1,
        ),
        _ => default,
    }
}

/// True for a path ending in `.onnx` (any case).
pub fn is_onnx(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
}

/// Loads a RON program, or imports an ONNX model; the error is the message to print.
pub fn load(
    path: &Path,
    import: &ImportArgs,
    precision: Option<Precision>,
) -> Result<Program, String> {
    if is_onnx(path) {
        ipusim_onnx::load(path, &import.options(precision)).map_err(|e| e.to_string())
    } else {
        load_program(path).map_err(|e| e.to_string())
    }
}

/// `NAME=DxDx...`.
pub fn parse_input_shape(s: &str) -> Result<(String, Vec<usize>), String> {
    let (name, dims) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("'{s}' is not NAME=DxDx... (e.g. input=1x3x224x224)"))?;
    let dims = dims
        .split(['x', 'X'])
        .map(|d| d.trim().parse::<usize>().ok().filter(|&d| d > 0))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| format!("'{dims}' is not a shape of positive sizes such as 1x3x224x224"))?;
    if name.is_empty() {
        return Err(format!("'{s}' names no input"));
    }
    Ok((name.to_string(), dims))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_shapes_parse() {
        assert_eq!(
            parse_input_shape("x=1x3x224x224").unwrap(),
            ("x".to_string(), vec![1, 3, 224, 224])
        );
        assert!(parse_input_shape("x=1x0").is_err());
        assert!(parse_input_shape("x").is_err());
        assert!(parse_input_shape("=2").is_err());
    }
}

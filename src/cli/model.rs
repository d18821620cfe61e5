//! `ipusim model`: the model zoo. `ipusim model list` shows the models; `ipusim model NAME`
//! writes a generated program (`ipusim_ir::resnet`) as RON, to stdout or `-o FILE`.

use super::compile::parse_precision;
use super::output::{write_stdout, OutputPlan};
use super::{EXIT_ERROR, EXIT_OK};
use clap::Args;
use ipusim_ir::resnet::{resnet, trainable_parameters, Model, Norm, MODELS};
use ipusim_ir::text::to_ron;
use ipusim_ir::Precision;
use std::path::PathBuf;

/// Arguments of `ipusim model`.
#[derive(Args, Debug)]
pub struct ModelArgs {
    /// A model name (`resnet50`, `resnet20`, ...), or `list`.
    pub name: String,
    /// Samples per micro-batch.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Image height and width (default: 224 for ImageNet models, 32 for CIFAR ones).
    #[arg(long = "image-size")]
    pub image_size: Option<usize>,
    /// Image channels.
    #[arg(long, default_value_t = 3)]
    pub channels: usize,
    /// Classes (default: 1000 for ImageNet models, 10 for CIFAR ones).
    #[arg(long)]
    pub classes: Option<usize>,
    /// Normalisation layers: batch or group.
    #[arg(long, default_value = "batch", value_parser = ["batch", "group"])]
    pub norm: String,
    /// Groups of each group norm (with `--norm group`).
    #[arg(long, default_value_t = 32)]
    pub groups: usize,
    /// The training spec's precision policy: 16.16, 16.32 or 32.32.
    #[arg(long, value_parser = parse_precision, default_value = "16.16")]
    pub precision: Precision,
    /// The training spec's optimizer: `momentum` (SGD with momentum 0.9, lr 0.01, loss
    /// scaling 128), `sgd` (the same without momentum: the CNN README's default optimiser)
    /// or `adamw` (the hands-on day's `poptorch.optim.AdamW(lr=0.001,
    /// loss_scaling=1000, accum_type=float16, first_order_momentum_accum_type=float16,
    /// second_order_momentum_accum_type=float32)`, PyTorch's weight decay 0.01, epsilon 1e-8).
    #[arg(long, default_value = "momentum", value_parser = ["momentum", "sgd", "adamw"])]
    pub optimizer: String,
    /// Write the program here instead of stdout.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
}

/// Runs `ipusim model`; returns the exit code.
pub fn run(args: &ModelArgs) -> i32 {
    match execute(args) {
        Ok(()) => EXIT_OK,
        Err(message) => {
            super::output::write_stderr(&format!("{message}\n"));
            EXIT_ERROR
        }
    }
}

fn execute(args: &ModelArgs) -> Result<(), String> {
    if args.name == "list" {
        return write_stdout(&list()?);
    }
    let model = Model::named(&args.name).ok_or_else(|| {
        let names: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
        let near = names
            .iter()
            .min_by_key(|n| (distance(n, &args.name), number_gap(n, &args.name)))
            .copied()
            .unwrap_or("resnet50");
        format!(
            "error: no model '{}' (did you mean '{near}'? `ipusim model list` shows them: {})",
            ipusim_ir::text::input::clip(&args.name),
            names.join(", ")
        )
    })?;
    let plan = OutputPlan::check([("-o", args.output.as_deref())])?;
    let mut spec = model.default_spec();
    spec.batch = args.batch;
    spec.channels = args.channels;
    spec.precision = args.precision;
    if let Some(s) = args.image_size {
        spec.image_size = s;
    }
    if let Some(c) = args.classes {
        spec.classes = c;
    }
    if args.norm == "group" {
        spec.norm = Norm::Group(args.groups);
    }
    let mut program = resnet(&spec).map_err(|e| {
        format!("error: {e} (check --batch, --image-size, --classes, --channels, --groups)")
    })?;
    if let Some(t) = program.training.as_mut() {
        (t.optimizer, t.loss_scaling) =
            super::source::optimizer(&args.optimizer, (t.optimizer.clone(), t.loss_scaling));
    }
    let text = to_ron(&program);
    match &args.output {
        Some(_) => plan.commit(&[("-o", text.as_bytes())], None),
        None => write_stdout(&text),
    }
}

/// The table of models with their default parameter counts.
fn list() -> Result<String, String> {
    let mut s = format!(
        "{:<10} {:<9} {:<11} {:<13} {:>14}\n",
        "model", "style", "blocks", "per stage", "parameters"
    );
    for m in MODELS {
        let p = resnet(&m.default_spec()).map_err(|e| format!("error: {e}"))?;
        let n = trainable_parameters(&p).map_err(|e| format!("error: {e}"))?;
        s += &format!(
            "{:<10} {:<9} {:<11} {:<13} {:>14}\n",
            m.name,
            if m.imagenet { "ImageNet" } else { "CIFAR" },
            if m.bottleneck { "bottleneck" } else { "basic" },
            m.blocks
                .iter()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .join("-"),
            ipusim_compiler::report::group(n)
        );
    }
    Ok(s)
}

/// How far apart the depths in two names are (ties of the edit distance go to the nearer
/// depth: `resnet51` suggests `resnet50`).
fn number_gap(a: &str, b: &str) -> u64 {
    let depth = |s: &str| {
        s.trim_start_matches(|c: char| !c.is_ascii_digit())
            .parse::<u64>()
            .ok()
    };
    match (depth(a), depth(b)) {
        (Some(x), Some(y)) => x.abs_diff(y),
        _ => u64::MAX,
    }
}

/// Edit distance, for the suggestion of a mistyped name.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().take(64).collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, &cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

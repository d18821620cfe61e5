//! `ipusim compile PROGRAM [--target mk2|mk1|FILE] [--precision 16.16|16.32|32.32]
//! [--partials float|half] [--json] [-o REPORT] [--html FILE] [--execution-trace]
//! [--dump ir|tiles|program]`: compile a program's training step for a target and print its
//! static cycle report. `--html` also writes the report as a page; it and
//! `--execution-trace` add the `execution` section (the static walk of one run).
//!
//! The program is loaded and validated (`ipusim_ir::text::load_program`), then built by the
//! pipeline every command shares (`ipusim_compiler::build`): its training step, with the
//! precision override, compiled with the step's loops. The report is the readable text (units in every header) or,
//! with `--json`, the JSON contract of [`ipusim_compiler::CompileReport`]; it goes to stdout,
//! or to `REPORT` with `-o` (written whole or not at all). `--dump` prints a stage (repeatable)
//! to stdout, or to stderr when stdout carries the JSON report.
//!
//! Exit codes: 0 when the program fits in memory, 2 when it does not (the full report is
//! still printed or written), 1 for any other error (one message on stderr).

use super::output::{write_stdout, OutputPlan};
use super::{warn, EXIT_ERROR, EXIT_OK};
use clap::{Args, ValueEnum};
use ipusim_compiler::build::{self, compile_step, step_graph, BuildOptions};
use ipusim_compiler::{dump, CompileError, PartialsType, Target};
use ipusim_ir::text::input::read_text;
use ipusim_ir::Precision;
use std::path::PathBuf;

/// Exit code when the program does not fit in tile memory (the report is still produced).
pub const EXIT_OOM: i32 = 2;

/// A stage `--dump` can print.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Stage {
    /// The training-step graph as compiled.
    Ir,
    /// Every tensor's tile mapping and the bytes of every tile.
    Tiles,
    /// The program tree with compute sets and exchanges.
    Program,
}

/// The program and how to build it: what `compile`, `step` and the other commands that
/// compile a program share.
#[derive(Args, Debug)]
pub struct BuildArgs {
    /// The program file (RON, see docs/program-format.md), or an ONNX model (`.onnx`).
    pub program: PathBuf,
    /// How an ONNX model is imported.
    #[command(flatten)]
    pub import: super::source::ImportArgs,
    /// The chip: `mk2`, `mk1`, or a target RON file (a preset `base` with overridden fields).
    #[arg(long, default_value = "mk2")]
    pub target: String,
    /// Precision policy, overriding the program's: 16.16, 16.32 or 32.32.
    #[arg(long, value_parser = parse_precision)]
    pub precision: Option<Precision>,
    /// Matmul and reduction partials type: float or half.
    #[arg(long, default_value = "float", value_parser = parse_partials)]
    pub partials: PartialsType,
    /// The fraction of each tile's memory the matmul and convolution planners may use for an
    /// op (PopLibs' availableMemoryProportion), in (0, 1], overriding the program's.
    #[arg(long, value_name = "P", value_parser = parse_proportion)]
    pub available_memory_proportion: Option<f64>,
    /// Micro-batches per weight update, overriding the training spec's
    /// gradient_accumulation.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub gradient_accumulation: Option<u32>,
    /// Loop iterations per device run (PopTorch's deviceIterations), overriding the
    /// program's device_iterations.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub device_iterations: Option<u32>,
    /// Pipeline split points, comma-separated, overriding the program's: each names the node
    /// (or module path, e.g. layer3.8) that begins the next stage; stage i runs on IPU i.
    #[arg(long, value_name = "NODE,...", value_delimiter = ',')]
    pub pipeline_splits: Option<Vec<String>>,
    /// How the pipeline's stages share time, overriding the program's (the CNN README's
    /// flag): Sequential (one stage at a time), Grouped (the IPUs on different micro-batches
    /// at once, forward then backward in each tick) or Interleaved (each IPU alternates between
    /// a forward and a backward tick: a smaller stash, more cycles).
    #[arg(long, value_name = "SCHEDULE", value_parser = parse_schedule)]
    pub pipeline_schedule: Option<ipusim_ir::pipeline::Schedule>,
    /// IPUs in the system (default: as many as the pipeline's stages need).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub ipus: Option<u32>,
    /// Recompute the forward activations the backward pass reads from checkpoints (pipeline
    /// stages and the program's recompute_checkpoints) instead of keeping them.
    #[arg(long)]
    pub recompute: bool,
    /// Samples per micro-batch: every infeed's leading dimension, overriding the program's.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: Option<u32>,
    /// Replicas of the program (PopTorch's replicationFactor), each on its own IPUs, with
    /// their gradients all-reduced before each weight update; replacing the program's
    /// replication_factor. `run` simulates every replica (the debugger, `step`, one program
    /// instance only).
    #[arg(long, value_name = "R", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub replicas: Option<u32>,
    /// Image infeeds (float [N, 3, H, W] inputs) cross the host link as u8 and are cast and
    /// normalised (ImageNet statistics) on the first IPU.
    #[arg(long)]
    pub eight_bit_io: bool,
    /// Batch norm's batch statistics in two passes, the mean and then the squared deviations
    /// from it (PopTorch's opts.Precision.enableStableNorm(True)), instead of PopLibs'
    /// default single sweep; as the training spec's stable_norm.
    #[arg(long)]
    pub stable_norm: bool,
    /// Keep the optimizer state in streaming memory (the TF-IPU guide §6.8): loaded before
    /// each weight update and stored after it, besides the program's
    /// offload_optimizer_state.
    #[arg(long)]
    pub offload_optimizer_state: bool,
    /// Shard the optimizer state over the replicas (replicated tensor sharding, the TF-IPU
    /// guide §6.9): each replica keeps and updates 1/R of every state tensor, gradients are
    /// reduce-scattered and the updates all-gathered; besides the program's
    /// replicated_optimizer_state_sharding. No effect with one replica.
    #[arg(long)]
    pub replicated_optimizer_state_sharding: bool,
    /// Compute every element-wise op in its own compute set, storing every intermediate
    /// value (for printing it in `step`); by default chains of element-wise ops are fused
    /// into one vertex per tile, as PopLibs' generated map-expression codelets
    /// (`enableGenerateCodelet`) are.
    #[arg(long)]
    pub no_elementwise_fusion: bool,
    /// With one micro-batch per weight update on one IPU (one replica, no pipeline, the
    /// optimizer state on chip), run each variable's update as soon as its gradient exists
    /// and the step has read the variable for the last time, freeing the gradient there
    /// (PopART's `delayVarUpdates = false`). By default every update runs after the whole
    /// step, every gradient held until then, as PopART's default `delayVarUpdates = true`
    /// schedules it. The values are the same either way; the peak of temporaries is not.
    #[arg(long)]
    pub early_weight_update: bool,
}

/// Arguments of `ipusim compile`.
#[derive(Args, Debug)]
pub struct CompileArgs {
    /// Program, target, precision, partials.
    #[command(flatten)]
    pub build: BuildArgs,
    /// Print the JSON report instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// Write the report to this file instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "REPORT")]
    pub output: Option<PathBuf>,
    /// Also write the report as a self-contained HTML page (PopVision's views) to this file.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Add the execution trace of one run (PopVision's Execution Trace, from the static
    /// cycles) to the report as its `execution` section; `--html` adds it too.
    #[arg(long)]
    pub execution_trace: bool,
    /// Print a compilation stage (repeatable).
    #[arg(long, value_enum)]
    pub dump: Vec<Stage>,
}

/// Largest target file read (bytes): a target is a few dozen figures.
const MAX_TARGET_BYTES: u64 = 1 << 20;

/// The target `--target` names: a preset, or a target RON file. The error is rendered whole
/// (`FILE:LINE:COL: error: ...`); a name that is neither a preset nor an existing file says
/// both, so a mistyped preset is not reported as a missing file only.
pub fn target_from_arg(spec: &str) -> Result<Target, String> {
    if let Some(t) = Target::preset(spec) {
        return Ok(t);
    }
    let path = std::path::Path::new(spec);
    if !path.exists() {
        return Err(format!(
            "error: --target {spec}: unknown target preset or missing file (the presets are \
             mk2 and mk1; a target file is RON: (base: \"mk2\", tiles: 4), see the README)"
        ));
    }
    let text = read_text(path, MAX_TARGET_BYTES, "target file")
        .map_err(|e| format!("{spec}: error: {e}"))?;
    Target::parse(&text, spec).map_err(|e| match e {
        CompileError::TargetFile {
            path,
            line,
            column,
            message,
        } if line > 0 => format!("{path}:{line}:{column}: error: {message}"),
        CompileError::TargetFile { path, message, .. } => format!("{path}: error: {message}"),
        other => format!("error: {other}"),
    })
}

impl BuildArgs {
    /// The program: the RON file, or the ONNX model imported with `--input-shape`,
    /// `--training`, ... (its training spec at `--precision`).
    pub fn load(&self) -> Result<ipusim_ir::Program, String> {
        super::source::load(&self.program, &self.import, self.precision)
    }

    /// The build options these arguments name (`--target` read as a preset or a file); the
    /// error is rendered whole.
    pub fn build_options(&self) -> Result<BuildOptions, String> {
        Ok(BuildOptions {
            target: target_from_arg(&self.target)?,
            precision: self.precision,
            partials: self.partials,
            available_memory_proportion: self.available_memory_proportion,
            gradient_accumulation: self.gradient_accumulation,
            device_iterations: self.device_iterations,
            pipeline_splits: self.pipeline_splits.clone(),
            pipeline_schedule: self.pipeline_schedule,
            ipus: self.ipus,
            recompute: self.recompute,
            eight_bit_io: self.eight_bit_io,
            stable_norm: self.stable_norm,
            offload_optimizer_state: self.offload_optimizer_state,
            elementwise_fusion: !self.no_elementwise_fusion,
            early_weight_update: self.early_weight_update,
            replicated_optimizer_state_sharding: self.replicated_optimizer_state_sharding,
            replicas: self.replicas,
            batch: self.batch,
            ..BuildOptions::default()
        })
    }
}

/// Parses `--pipeline-schedule`.
fn parse_schedule(s: &str) -> Result<ipusim_ir::pipeline::Schedule, String> {
    s.parse()
        .map_err(|e: ipusim_ir::UnknownValue| e.to_string())
}

/// Parses `--precision`.
pub fn parse_precision(s: &str) -> Result<Precision, String> {
    s.parse()
        .map_err(|e: ipusim_ir::UnknownValue| e.to_string())
}

/// Parses `--available-memory-proportion`: a number in (0, 1].
fn parse_proportion(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 1.0 => Ok(p),
        _ => Err(format!("{s:.40} is not a number in (0, 1]")),
    }
}

/// Parses `--partials`.
fn parse_partials(s: &str) -> Result<PartialsType, String> {
    s.parse()
        .map_err(|e: ipusim_ir::UnknownValue| e.to_string())
}

/// Runs `ipusim compile`; returns the exit code.
pub fn run(args: &CompileArgs) -> i32 {
    match compile_program(args) {
        Ok(code) => code,
        Err(message) => {
            warn(&format!("{message}\n"));
            EXIT_ERROR
        }
    }
}

fn compile_program(args: &CompileArgs) -> Result<i32, String> {
    let plan = OutputPlan::check([
        ("-o", args.output.as_deref()),
        ("--html", args.html.as_deref()),
    ])?;
    let program = args.build.load()?;
    let file = args.build.program.display();
    let options = args.build.build_options()?;
    let step = step_graph(&program, &options).map_err(|e| format!("{file}: error: {e}"))?;
    // Dumps share stdout with the text report; they go to stderr when stdout is JSON.
    let dumps_to_stderr = args.json && args.output.is_none();
    let print_dump = |text: &str| {
        if dumps_to_stderr {
            warn(text);
            Ok(())
        } else {
            write_stdout(text)
        }
    };
    if args.dump.contains(&Stage::Ir) {
        print_dump(&dump::ir(&step.graph))?;
    }
    // The command ends with the process: the executable (millions of vertices on a large
    // model) is left to the process's exit rather than freed piece by piece, as compilers do
    // with their final data.
    let exe = match compile_step(&step, &options) {
        Ok(exe) => std::mem::ManuallyDrop::new(exe),
        // A value larger than an IPU's memory: out of memory, found before any plan.
        Err(e) if e.is_out_of_memory() => {
            warn(&format!("{file}: error: {e}\n"));
            return Ok(EXIT_OOM);
        }
        Err(e) => return Err(format!("{file}: error: {e}")),
    };
    if args.dump.contains(&Stage::Tiles) {
        print_dump(&dump::tiles(&exe))?;
    }
    if args.dump.contains(&Stage::Program) {
        print_dump(&dump::program(&exe))?;
    }
    if exe.estimate.saturated() {
        return Err(saturated(&file.to_string()));
    }
    let mut report = build::report(&program.name, &step, &exe);
    if args.execution_trace || args.html.is_some() {
        report.execution = Some(ipusim_compiler::timeline::estimate(&exe));
    }
    let text = if args.json {
        serde_json::to_string_pretty(&report).map_err(|e| format!("error: {e}"))? + "\n"
    } else {
        report.to_text()
    };
    let html = match &args.html {
        Some(_) => {
            let value = serde_json::to_value(&report).map_err(|e| format!("error: {e}"))?;
            let name = args.build.program.display().to_string();
            ipusim_runtime::report::html::html(&[(name, value)])
        }
        None => String::new(),
    };
    let mut files: Vec<(&str, &[u8])> = Vec::new();
    if args.output.is_some() {
        files.push(("-o", text.as_bytes()));
    }
    if args.html.is_some() {
        files.push(("--html", html.as_bytes()));
    }
    plan.commit(
        &files,
        if args.output.is_none() {
            Some(&text)
        } else {
            None
        },
    )?;
    if exe.memory.oom {
        warn(&format!(
            "{file}: out of memory on {} of {} tiles (max tile {} bytes, capacity {} bytes)\n",
            exe.memory.oom_tiles.len(),
            exe.num_tiles(),
            exe.memory.max_tile_bytes,
            exe.memory.bytes_per_tile_capacity
        ));
        return Ok(EXIT_OOM);
    }
    Ok(EXIT_OK)
}

/// The error of a report whose figures passed `u64::MAX` (the arithmetic saturates rather
/// than wrap; a saturated figure is a bound, not a count, so no report is printed).
pub(crate) fn saturated(file: &str) -> String {
    format!(
        "{file}: error: a cycle or byte figure exceeds {} (2^64 - 1): the program's loops \
         times its steps' costs are too large to count; lower device_iterations, \
         gradient_accumulation or the target's figures",
        u64::MAX
    )
}

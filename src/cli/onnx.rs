//! `ipusim import` and `ipusim export`: ONNX models to RON programs and back.
//!
//! `ipusim import MODEL.onnx [-o FILE]` writes the imported program, the values of its large
//! variables in `FILE-STEM.weights.bin` beside it (`--inline-weights`, or stdout: inline); `--check` lists every op type of the model with its count and whether it is
//! supported, and exits 1 naming the first node of each unsupported type, before any
//! conversion. `ipusim export PROGRAM.ron -o MODEL.onnx` writes a program's forward graph
//! with its initial weights (the simulator's materialisation) as an ONNX model.

use super::compile::parse_precision;
use super::output::{write_stdout, OutputPlan};
use super::source::ImportArgs;
use super::{EXIT_ERROR, EXIT_OK};
use clap::Args;
use ipusim_ir::text::{load_program, to_ron, to_ron_with_weights};
use ipusim_ir::Precision;
use std::path::PathBuf;

/// Arguments of `ipusim import`.
#[derive(Args, Debug)]
pub struct ImportCmdArgs {
    /// The ONNX model.
    pub model: PathBuf,
    /// List the model's op types with their counts and support, then stop (exit 1 if any
    /// is unsupported).
    #[arg(long)]
    pub check: bool,
    /// How to import.
    #[command(flatten)]
    pub import: ImportArgs,
    /// The training spec's precision policy with `--training`: 16.16, 16.32 or 32.32.
    #[arg(long, value_parser = parse_precision)]
    pub precision: Option<Precision>,
    /// Write the program here instead of stdout; the values of its large variables go to
    /// `STEM.weights.bin` beside it (unless `--inline-weights`).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Write every weight inside the program (always so on stdout).
    #[arg(long)]
    pub inline_weights: bool,
}

/// Arguments of `ipusim export`.
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The program (RON).
    pub program: PathBuf,
    /// The ONNX file to write.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Write the inputs' first dimension as the symbol `batch_size`.
    #[arg(long)]
    pub symbolic_batch: bool,
}

fn finish(r: Result<i32, String>) -> i32 {
    match r {
        Ok(code) => code,
        Err(message) => {
            super::output::write_stderr(&format!("{message}\n"));
            EXIT_ERROR
        }
    }
}

/// Runs `ipusim import`; returns the exit code.
pub fn run_import(args: &ImportCmdArgs) -> i32 {
    finish(import(args))
}

/// Runs `ipusim export`; returns the exit code.
pub fn run_export(args: &ExportArgs) -> i32 {
    finish(export(args))
}

fn import(args: &ImportCmdArgs) -> Result<i32, String> {
    let file = args.model.display().to_string();
    if args.check {
        let model = ipusim_onnx::read_model(&args.model).map_err(|e| e.to_string())?;
        let opset = ipusim_onnx::import::opset(&model, &file).map_err(|e| e.to_string())?;
        let ops = ipusim_onnx::coverage(&model);
        let mut text = format!("{file}: opset {opset}, {} op types\n", ops.len());
        text += &format!("{:<28} {:>7}  supported\n", "op type", "nodes");
        for c in &ops {
            text += &format!(
                "{:<28} {:>7}  {}\n",
                c.op_type,
                c.count,
                if c.supported { "yes" } else { "NO" }
            );
        }
        let missing: Vec<_> = ops.iter().filter(|c| !c.supported).collect();
        text += &format!(
            "{} of {} op types supported\n",
            ops.len() - missing.len(),
            ops.len()
        );
        write_stdout(&text)?;
        if missing.is_empty() {
            return Ok(EXIT_OK);
        }
        let nodes = model
            .graph
            .as_ref()
            .map(|g| g.node.as_slice())
            .unwrap_or(&[]);
        for c in missing {
            if let Some((i, n)) = nodes.iter().enumerate().find(|(_, n)| {
                let standard = n.domain.is_empty() || n.domain == "ai.onnx";
                (if standard {
                    n.op_type.clone()
                } else {
                    format!("{}::{}", n.domain, n.op_type)
                }) == c.op_type
            }) {
                super::output::write_stderr(&format!(
                    "{file}: error: node '{}' ({}): op type '{}' (opset {opset}) is not supported; supported: {}\n",
                    ipusim_onnx::import::node_name(n, i),
                    n.op_type,
                    c.op_type,
                    ipusim_onnx::SUPPORTED.join(", ")
                ));
            }
        }
        return Ok(EXIT_ERROR);
    }
    let weights = match &args.output {
        Some(out) if !args.inline_weights => {
            let stem = out.file_stem().map(|s| s.to_string_lossy().into_owned());
            Some(out.with_file_name(format!("{}.weights.bin", stem.unwrap_or_default())))
        }
        _ => None,
    };
    let plan = OutputPlan::check([
        ("-o", args.output.as_deref()),
        ("-o (weights)", weights.as_deref()),
    ])?;
    let program = ipusim_onnx::load(&args.model, &args.import.options(args.precision))
        .map_err(|e| e.to_string())?;
    let (text, bytes) = match &weights {
        Some(w) => {
            let name = w.file_name().map(|n| n.to_string_lossy().into_owned());
            to_ron_with_weights(&program, &name.unwrap_or_default())
        }
        None => (to_ron(&program), Vec::new()),
    };
    let limit = ipusim_ir::text::input::MAX_PROGRAM_BYTES;
    if text.len() as u64 > limit {
        return Err(format!(
            "{file}: error: the program is {} MiB, more than the {} MiB a program file may hold; write its weights beside it (drop --inline-weights) or compile the .onnx file directly",
            text.len() >> 20,
            limit >> 20
        ));
    }
    match &args.output {
        Some(_) if weights.is_some() => {
            plan.commit(&[("-o", text.as_bytes()), ("-o (weights)", &bytes)], None)?
        }
        Some(_) => plan.commit(&[("-o", text.as_bytes())], None)?,
        None => write_stdout(&text)?,
    }
    Ok(EXIT_OK)
}

fn export(args: &ExportArgs) -> Result<i32, String> {
    let plan = OutputPlan::check([("-o", Some(args.output.as_path()))])?;
    let program = load_program(&args.program).map_err(|e| e.to_string())?;
    let mut values = |name: &str, ty: &ipusim_ir::TensorType, init: &ipusim_ir::Init| {
        ipusim_sim::init::variable_tensor(init, ty)
            .map(|t| t.to_f64_vec())
            .map_err(|e| format!("variable '{name}': {e}"))
    };
    let model = ipusim_onnx::write::export(&program, &mut values, args.symbolic_batch)
        .map_err(|e| format!("{}: error: {e}", args.program.display()))?;
    plan.commit(&[("-o", &ipusim_onnx::write::to_bytes(&model))], None)?;
    Ok(EXIT_OK)
}

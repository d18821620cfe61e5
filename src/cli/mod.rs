//! The `ipusim` command line: one module per subcommand, dispatched from [`main`].
//!
//! Every subcommand returns its process exit code; errors are printed as one clear
//! message on stderr and never as a panic.

use clap::{Parser, Subcommand};

pub mod check;
pub mod compile;
pub mod fp;
pub mod model;
pub mod onnx;
pub mod output;
pub mod plot;
pub mod report;
pub mod run;
mod run_output;
pub mod sim_options;
pub mod source;
pub mod step;

/// Exit code for success.
pub const EXIT_OK: i32 = 0;
/// Exit code for any error (bad input, bad flags, I/O).
pub const EXIT_ERROR: i32 = 1;

#[derive(Parser, Debug)]
#[command(
    name = "ipusim",
    version,
    about = "An open, fast, cycle-accounting simulator of the Graphcore IPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Validate a program file and print a summary: ops, parameters, streams, training,
    /// numerical lint warnings.
    Check(check::CheckArgs),
    /// Compile a program's training step for a target (mk2, mk1 or a target file) and print
    /// its static cycle report; exit 2 when it does not fit in tile memory.
    Compile(compile::CompileArgs),
    /// Evaluate FP16/FP32 expressions with IPU arithmetic (rounding, overflow, flags).
    Fp(fp::FpArgs),
    /// Compile a program and step through it in the simulator: breakpoints on compute sets,
    /// tiles, flags and cycles; inspect tensors, tile memory, $FP_STS (commands on stdin).
    Step(step::StepArgs),
    /// Compile a program and run it in the simulator: outfeeds, loss curve, cycle report;
    /// exit 2 when it does not fit in tile memory, 3 when a floating-point exception traps.
    Run(run::RunArgs),
    /// Work with reports: `ipusim report diff A.json B.json` compares two side by side.
    Report(report::ReportArgs),
    /// The model zoo: `ipusim model list`, or `ipusim model resnet50 [--batch N] ... [-o FILE]`
    /// writes a generated program (CIFAR ResNet-8..56, torchvision ResNet-18..152).
    Model(model::ModelArgs),
    /// Import an ONNX model as a program (`-o FILE`), or list its op types and their support
    /// (`--check`). `compile`, `check`, `run` and `step` also take `.onnx` files directly.
    Import(onnx::ImportCmdArgs),
    /// Export a program's forward graph and initial weights as an ONNX model.
    Export(onnx::ExportArgs),
}

/// Parses the process arguments, runs the subcommand and returns the exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_ERROR } else { EXIT_OK };
            // `--help` and `--version` go to stdout: a failed write is an error there too.
            match e.print() {
                Err(io) if !e.use_stderr() && io.kind() != std::io::ErrorKind::BrokenPipe => {
                    output::write_stderr(&format!("{}\n", output::stdout_error(&io)));
                    return EXIT_ERROR;
                }
                _ => {}
            }
            return code;
        }
    };
    match cli.command {
        Command::Check(args) => check::run(&args),
        Command::Compile(args) => compile::run(&args),
        Command::Fp(args) => fp::run(args),
        Command::Step(args) => step::run(&args),
        Command::Run(args) => run::run(&args),
        Command::Report(args) => report::run(&args),
        Command::Model(args) => model::run(&args),
        Command::Import(args) => onnx::run_import(&args),
        Command::Export(args) => onnx::run_export(&args),
    }
}

/// Writes a message to stderr (see [`output::write_stderr`]).
pub(crate) fn warn(text: &str) {
    output::write_stderr(text);
}

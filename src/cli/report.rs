//! `ipusim report diff A.json B.json [--json] [--top N]`: compare two reports (compile or
//! run reports, as written by `ipusim compile --json` and `ipusim run --json`) side by side,
//! with the delta and the relative change of every figure (PopVision's "Compare two
//! reports").
//!
//! Exit codes: 0, or 1 when a file cannot be read or is not a report.

use super::output::write_stdout;
use super::{warn, EXIT_ERROR, EXIT_OK};
use clap::{Args, Subcommand};
use ipusim_runtime::report::diff;
use std::path::PathBuf;

/// Arguments of `ipusim report`.
#[derive(Args, Debug)]
pub struct ReportArgs {
    #[command(subcommand)]
    pub command: ReportCommand,
}

/// `ipusim report` subcommands.
#[derive(Subcommand, Debug)]
pub enum ReportCommand {
    /// Compare two JSON reports side by side.
    Diff(DiffArgs),
}

/// Arguments of `ipusim report diff`.
#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The first report (A).
    pub a: PathBuf,
    /// The second report (B); deltas are B - A.
    pub b: PathBuf,
    /// Print the comparison as JSON.
    #[arg(long)]
    pub json: bool,
    /// Compute sets (and other changed fields) to list.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
}

/// Runs `ipusim report`; returns the exit code.
pub fn run(args: &ReportArgs) -> i32 {
    match &args.command {
        ReportCommand::Diff(d) => match run_diff(d) {
            Ok(()) => EXIT_OK,
            Err(message) => {
                warn(&format!("{message}\n"));
                EXIT_ERROR
            }
        },
    }
}

fn run_diff(args: &DiffArgs) -> Result<(), String> {
    let a = diff::load(&args.a).map_err(|e| e.to_string())?;
    let b = diff::load(&args.b).map_err(|e| e.to_string())?;
    let (an, bn) = (args.a.display().to_string(), args.b.display().to_string());
    let d = diff::diff(&an, &a, &bn, &b);
    let text = if args.json {
        serde_json::to_string_pretty(&d).map_err(|e| format!("error: {e}"))? + "\n"
    } else {
        d.to_text(args.top)
    };
    write_stdout(&text)
}

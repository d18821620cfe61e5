//! `ipusim report html REPORT.json [OTHER.json] [-o FILE]`: the report as one self-contained
//! HTML page ([`ipusim_runtime::report::html`]).
//!
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
    /// Write a JSON report (compile or run) as one self-contained HTML page with PopVision's
    /// views: Summary, Memory (tile map), Liveness, Operations, and Compare given two.
    Html(HtmlArgs),
}

/// Arguments of `ipusim report html`.
#[derive(Args, Debug)]
pub struct HtmlArgs {
    /// The report (JSON of `ipusim compile --json` or `ipusim run --json`).
    pub report: PathBuf,
    /// A second report: adds the Compare view (deltas are this one minus the first).
    pub compare: Option<PathBuf>,
    /// The HTML file to write (default: the report's path with the extension `.html`).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
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
    let result = match &args.command {
        ReportCommand::Diff(d) => run_diff(d),
        ReportCommand::Html(h) => run_html(h),
    };
    match result {
        Ok(()) => EXIT_OK,
        Err(message) => {
            warn(&format!("{message}\n"));
            EXIT_ERROR
        }
    }
}

fn run_html(args: &HtmlArgs) -> Result<(), String> {
    let out = args
        .output
        .clone()
        .unwrap_or_else(|| args.report.with_extension("html"));
    let plan = super::output::OutputPlan::check([("-o", Some(out.as_path()))])?;
    let mut reports = Vec::new();
    for path in std::iter::once(&args.report).chain(args.compare.as_ref()) {
        let v = diff::load(path).map_err(|e| e.to_string())?;
        reports.push((path.display().to_string(), v));
    }
    let page = ipusim_runtime::report::html::html(&reports);
    plan.commit(&[("-o", page.as_bytes())], None)
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

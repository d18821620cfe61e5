//! `ipusim report plot REPORT.json [--memory FILE] [--compute-sets FILE] [--top N]`: charts
//! as SVG ([`super::plot`]).
//!
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
    /// Charts of a JSON report as SVG: bytes per tile (`--memory`) and the costliest
    /// compute sets' cycles (`--compute-sets`).
    Plot(PlotArgs),
}

/// Arguments of `ipusim report plot`.
#[derive(Args, Debug)]
pub struct PlotArgs {
    /// The report (JSON of `ipusim compile --json` or `ipusim run --json`).
    pub report: PathBuf,
    /// Write the bytes of every tile, against the capacity, to this SVG file.
    #[arg(long, value_name = "FILE")]
    pub memory: Option<PathBuf>,
    /// Write the costliest compute sets' cycles to this SVG file.
    #[arg(long, value_name = "FILE")]
    pub compute_sets: Option<PathBuf>,
    /// Compute sets to draw.
    #[arg(long, default_value_t = 30)]
    pub top: usize,
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
        ReportCommand::Plot(p) => run_plot(p),
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

fn run_plot(args: &PlotArgs) -> Result<(), String> {
    if args.memory.is_none() && args.compute_sets.is_none() {
        return Err(
            "error: ipusim report plot: give --memory FILE, --compute-sets FILE or both".into(),
        );
    }
    let plan = super::output::OutputPlan::check([
        ("--memory", args.memory.as_deref()),
        ("--compute-sets", args.compute_sets.as_deref()),
    ])?;
    let v = diff::load(&args.report).map_err(|e| e.to_string())?;
    let file = args.report.display().to_string();
    let program = v["program"].as_str().unwrap_or("").to_string();
    let mut files: Vec<(&str, String)> = Vec::new();
    if args.memory.is_some() {
        let tiles: Vec<u64> = v["memory"]["tiles"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(serde_json::Value::as_u64)
            .collect();
        let cap = v["memory"]["bytes_per_tile_capacity"].as_u64().unwrap_or(0);
        let title = format!("{program}: bytes per tile (capacity {cap})");
        let svg = super::plot::memory_svg(&title, &tiles, cap)
            .map_err(|e| format!("{file}: error: {e}"))?;
        files.push(("--memory", svg));
    }
    if args.compute_sets.is_some() {
        let mut sets: Vec<(String, u64)> = v["compute_sets"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or("").to_string(),
                    c["cycles"].as_u64().unwrap_or(0),
                )
            })
            .collect();
        sets.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        sets.truncate(args.top.max(1));
        let title = format!(
            "{program}: the {} costliest compute sets (cycles per run)",
            sets.len()
        );
        let svg = super::plot::compute_sets_svg(&title, &sets)
            .map_err(|e| format!("{file}: error: {e}"))?;
        files.push(("--compute-sets", svg));
    }
    let refs: Vec<(&str, &[u8])> = files.iter().map(|(f, s)| (*f, s.as_bytes())).collect();
    plan.commit(&refs, None)
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

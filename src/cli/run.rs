//! `ipusim run PROGRAM [--target …] [--precision …] [--steps N] [--seed N]
//! [--sr off|on|replica-identical] [--nanoo] [--fp-exceptions inv,div0,oflo]
//! [--infeed NAME=FILE] [--outfeed-mode NAME=all|last|sum|every:N] [--inference]
//! [--save-variables FILE] [--load-variables FILE] [--json] [--trace FILE]
//! [--chrome-trace FILE] [--html FILE] [--execution-trace] [--plot FILE]`: compile a
//! program and run it in the simulator. `--html` and `--execution-trace` add the first run's
//! recorded execution trace to the report (`execution`).
//!
//! # Steps and runs
//!
//! One **run** is one device call: the program's loop of `device_iterations` iterations, each
//! a step of `gradient_accumulation` micro-batches (a weight update when training). Without
//! `--steps` the program runs once. `--steps N`:
//! - training (and programs without a training spec): N loop iterations (weight updates),
//!   executed as `N / device_iterations` runs. N must be a multiple of `device_iterations`
//!   (a run is the unit the device executes); otherwise it is an error that names the
//!   nearest multiples.
//! - `--inference`: N micro-batches, executed as one run of N iterations. Without `--steps`,
//!   an inference run is one pass over the data of the file-backed infeeds (each row once).
//!
//! # Output
//!
//! Without `--json`: the outfeeds (values, or a summary of long streams), the loss curve of
//! a training program (its loss outfeed, with the `accuracy` outfeed beside it), and the
//! run report (the cycle report of one run, then what the runs executed and the host I/O).
//! With `--json`: one object `{"outfeeds": {NAME: [entry, ...]}, "flags": {"OFLO": bool,
//! "DIV0": bool, "INV": bool}, "report": {...}}`, where each stream's entries are what its
//! mode kept in each run, concatenated over the runs (an entry is nested arrays by shape;
//! NaN and infinities are the strings "NaN", "inf", "-inf"), and the report is the compile
//! report's contract plus `runs` and `stream_bytes` (see `ipusim_runtime::report`). `-o FILE`
//! writes that output to a file instead of stdout. A progress bar is drawn on stderr when it
//! is a terminal and the run has many steps.
//!
//! # Files
//!
//! `--save-variables`, `--trace` (the engine's events, JSON), `--chrome-trace` (Perfetto) and
//! `-o` are checked before the program is loaded (their directories exist and are writable,
//! no two name the same file), and written all or none after the last run, only when every
//! run succeeded: no file is left claiming to be complete when a run failed, and a bad trace
//! path never costs the run's report (see [`super::output`]).
//!
//! # Exit codes
//!
//! 0 ok; 1 any error (one message naming the file and line, stream, or variable);
//! 2 out of memory (the report of zero runs is still printed or written); 3 a
//! floating-point exception trapped (the state dump on stderr).

use super::compile::{BuildArgs, EXIT_OOM};
use super::output::{Content, OutputPlan};
use super::sim_options::{split_pair, FeedArgs, SimArgs};
use super::{run_output, warn, EXIT_ERROR, EXIT_OK};
use clap::Args;
use ipusim_compiler::report::group;
use ipusim_ir::{OutfeedMode, UnknownValue};
use ipusim_runtime::chrome::{to_chrome_json, TraceIpus};
use ipusim_runtime::session::{flags_of, Session};
use ipusim_runtime::{RuntimeError, SessionOptions};
use ipusim_sim::engine::EngineError;
use ipusim_sim::trace::Trace;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Exit code when a floating-point exception trapped.
pub const EXIT_FP_EXCEPTION: i32 = 3;

/// Runs with at least this many steps get a progress bar (on a terminal).
const PROGRESS_MIN_STEPS: u64 = 50;

/// Arguments of `ipusim run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Program, target, precision, partials.
    #[command(flatten)]
    pub build: BuildArgs,
    /// Steps to run: loop iterations (weight updates), a multiple of the program's
    /// device_iterations; with --inference, micro-batches in one run.
    #[arg(long, value_name = "N")]
    pub steps: Option<u64>,
    /// Seed, stochastic rounding, NaN on overflow, exceptions that stop the run (exit 3),
    /// host threads.
    #[command(flatten)]
    pub sim: SimArgs,
    /// Files replacing infeed sources.
    #[command(flatten)]
    pub feeds: FeedArgs,
    /// Collect an outfeed stream in another mode: all, last, sum or every:N (repeatable).
    #[arg(long = "outfeed-mode", value_name = "NAME=MODE", value_parser = parse_outfeed_mode)]
    pub outfeed_modes: Vec<(String, OutfeedMode)>,
    /// Run only the forward graph (no training step, no variable updates), reading each
    /// data row once.
    #[arg(long)]
    pub inference: bool,
    /// Write every variable to this JSON file after the last run.
    #[arg(long, value_name = "FILE")]
    pub save_variables: Option<PathBuf>,
    /// Restore the variables from this JSON file before the first run.
    #[arg(long, value_name = "FILE")]
    pub load_variables: Option<PathBuf>,
    /// Print one JSON object: outfeeds, flags and the run report.
    #[arg(long)]
    pub json: bool,
    /// Write the output (text or JSON) to this file instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Write the engine's trace events (JSON) to this file.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Write a Chrome trace-event file (open it in Perfetto) to this file.
    #[arg(long, value_name = "FILE")]
    pub chrome_trace: Option<PathBuf>,
    /// Also write the run's report as a self-contained HTML page (PopVision's views).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Add the execution trace of the first run (PopVision's Execution Trace, recorded by
    /// the simulator) to the report as its `execution` section; `--html` adds it too.
    #[arg(long)]
    pub execution_trace: bool,
    /// Write the loss curve (every loss entry the run kept) as an SVG chart.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Micro-batches the host holds ready per infeed.
    #[arg(long, default_value_t = ipusim_runtime::host::DEFAULT_PREFETCH_DEPTH,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub prefetch_depth: u32,
}

fn parse_outfeed_mode(s: &str) -> Result<(String, OutfeedMode), String> {
    let (name, mode) = split_pair(s, "MODE")?;
    Ok((name, mode.parse().map_err(|e: UnknownValue| e.to_string())?))
}

/// Why `ipusim run` failed: the session, or writing its output.
#[derive(Debug, Error)]
enum RunFailure {
    /// The session failed (program, options, feeds, engine).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// An output cannot be written (the message names the file and the flag).
    #[error("{0}")]
    Output(String),
    /// The program or model cannot be loaded (the message names the file and the fault).
    #[error("{0}")]
    Load(String),
    /// The command line asks for something that does not fit (the message names the flag).
    #[error("{0}")]
    Usage(String),
}

/// Runs `ipusim run`; returns the exit code.
pub fn run(args: &RunArgs) -> i32 {
    match execute(args) {
        Ok(code) => code,
        Err(e) => {
            let code = match &e {
                RunFailure::Runtime(RuntimeError::Engine(EngineError::FpException(_))) => {
                    EXIT_FP_EXCEPTION
                }
                _ => EXIT_ERROR,
            };
            let prefix = match &e {
                _ if code == EXIT_FP_EXCEPTION => format!(
                    "{}: floating-point exception trapped (the run stopped):\n",
                    args.build.program.display()
                ),
                // The engine's messages name the tensor or tile; say which program.
                RunFailure::Runtime(RuntimeError::Engine(_)) => {
                    format!("{}: error: ", args.build.program.display())
                }
                _ => String::new(),
            };
            warn(&format!("{prefix}{e}\n"));
            code
        }
    }
}

fn options(args: &RunArgs) -> Result<SessionOptions, RunFailure> {
    if args.steps == Some(0) {
        return Err(usage("--steps must be at least 1".into()));
    }
    let mut options = args
        .sim
        .session_options(&args.build, &args.feeds)
        .map_err(RunFailure::Usage)?;
    options.streams.prefetch_depth = args.prefetch_depth;
    for (name, mode) in &args.outfeed_modes {
        let modes = &mut options.streams.outfeed_modes;
        if modes.insert(name.clone(), *mode).is_some() {
            return Err(usage(format!("--outfeed-mode {name}=... is given twice")));
        }
    }
    if args.inference {
        options = options.inference();
        if let Some(n) = args.steps {
            options.build.device_iterations = Some(
                u32::try_from(n)
                    .map_err(|_| usage(format!("--steps {n} is too large for one run")))?,
            );
        }
    }
    options.record_trace = args.trace.is_some() || args.chrome_trace.is_some() || execution(args);
    Ok(options)
}

/// Whether the report gets the first run's execution trace.
fn execution(args: &RunArgs) -> bool {
    args.execution_trace || args.html.is_some()
}

/// A command-line fault, printed as `error: MESSAGE`.
fn usage(message: String) -> RunFailure {
    RunFailure::Usage(format!("error: {message}"))
}

/// The number of runs `--steps` asks for.
fn runs_for(steps: Option<u64>, inference: bool, per_run: u64) -> Result<u64, RunFailure> {
    match steps {
        None => Ok(1),
        Some(0) => Err(usage("--steps must be at least 1".into())),
        Some(_) if inference => Ok(1),
        Some(n) if n % per_run == 0 => Ok(n / per_run),
        Some(n) => {
            let below = n / per_run * per_run;
            // The multiple above may be past u64::MAX: then only the one below is offered.
            let hint = match (below, below.checked_add(per_run)) {
                (0, Some(above)) => format!("--steps {above}"),
                (_, Some(above)) => format!("--steps {below} or --steps {above}"),
                (_, None) => format!("--steps {below}"),
            };
            Err(usage(format!(
                "--steps {n} is not a multiple of the program's device_iterations ({per_run}): a \
                 run executes {per_run} steps on the device; use {hint}"
            )))
        }
    }
}

fn execute(args: &RunArgs) -> Result<i32, RunFailure> {
    let plan = OutputPlan::check([
        ("-o", args.output.as_deref()),
        ("--save-variables", args.save_variables.as_deref()),
        ("--trace", args.trace.as_deref()),
        ("--chrome-trace", args.chrome_trace.as_deref()),
        ("--html", args.html.as_deref()),
        ("--plot", args.plot.as_deref()),
    ])
    .map_err(RunFailure::Output)?;
    let file = args.build.program.display().to_string();
    let program = args.build.load().map_err(RunFailure::Load)?;
    let loss_stream = run_output::loss_stream(&program);
    if args.plot.is_some() && (loss_stream.is_none() || args.inference) {
        return Err(usage(format!(
            "{file}: --plot draws the training loss, and this run has none (a training spec whose loss goes to an outfeed, run without --inference)"
        )));
    }
    let options = options(args)?;
    let base = args.build.program.parent().unwrap_or(Path::new(""));
    let mut session = match Session::new(&program, base, options) {
        Ok(s) => s,
        Err(RuntimeError::OutOfMemory(report)) => {
            let out = run_output::Collected::default();
            let write_json = |w: &mut dyn Write| {
                run_output::write_json(w, &out, flags_of(Default::default()), &report)
            };
            let text = (!args.json).then(|| report.to_text());
            let main = text_or(&text, &write_json);
            let html = match args.html {
                Some(_) => Some(html_page(&file, &report)?),
                None => None,
            };
            let files = (html.iter())
                .map(|h| ("--html", Content::Bytes(h.as_bytes())))
                .collect();
            write_output(args, &plan, files, main)?;
            warn(&format!("{}\n", RuntimeError::OutOfMemory(report)));
            return Ok(EXIT_OOM);
        }
        // A value larger than an IPU's memory: out of memory, found before any plan (no
        // report to write).
        Err(e) if e.is_out_of_memory() => {
            warn(&format!("{e}\n"));
            return Ok(EXIT_OOM);
        }
        Err(e) => return Err(e.into()),
    };
    if session.compile_report().total_cycles == u64::MAX {
        return Err(RunFailure::Output(super::compile::saturated(&file)));
    }
    if let Some(path) = &args.load_variables {
        session.load_variables(path)?;
    }
    let runs = runs_for(args.steps, args.inference, session.steps_per_run())?;
    check_outfeed_memory(&session, runs, MAX_OUTFEED_HOST_BYTES).map_err(RunFailure::Output)?;
    let total_steps = runs * session.steps_per_run();
    let bar = progress_bar(total_steps);
    let mut collected = run_output::Collected::default();
    let mut trace = Trace::default();
    for _ in 0..runs {
        if let Some(bar) = &bar {
            let bar = bar.clone();
            let per_run = session.steps_per_run();
            session.set_progress(Some(Box::new(move |p| {
                let done = (p.run - 1) * per_run + p.done * per_run / p.total.max(1);
                bar.set_position(done);
            })));
        }
        let out = session.run();
        if let Ok(out) = &out {
            collected.add(&out.outfeeds);
        }
        if args.trace.is_some() || args.chrome_trace.is_some() {
            trace.events.extend(session.take_trace().events);
        } else if execution(args) {
            // Only the first run's events are kept for the execution trace.
            let events = session.take_trace().events;
            if trace.events.is_empty() {
                trace.events = events;
            }
        }
        if let Err(e) = out {
            if let Some(bar) = &bar {
                bar.abandon();
            }
            return Err(e.into());
        }
    }
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let mut report = session.report();
    for w in &report.warnings {
        warn(&format!("{file}: warning: {w}\n"));
    }
    if execution(args) {
        let ipus = TraceIpus::of(session.executable());
        let tiles = session.executable().target.tiles;
        report.compile.execution = ipusim_runtime::timeline::of_first_run(&trace, &ipus, tiles);
    }
    if report.executed.total_cycles == u64::MAX {
        return Err(RunFailure::Output(super::compile::saturated(&file)));
    }
    let mut files: Vec<(&str, String)> = Vec::new();
    // The variables, the trace and the JSON document are written straight to their files
    // (a checkpoint of a large model is gigabytes of text).
    let checkpoint = args.save_variables.is_some().then(|| session.checkpoint());
    let save = |w: &mut dyn Write| match &checkpoint {
        Some(c) => c.write_to(w),
        None => Ok(()),
    };
    let write_trace = |w: &mut dyn Write| -> std::io::Result<()> {
        serde_json::to_writer(&mut *w, &trace)?;
        Ok(())
    };
    let mut streamed: Vec<(&str, Content)> = Vec::new();
    if checkpoint.is_some() {
        streamed.push(("--save-variables", Content::Writer(&save)));
    }
    if args.trace.is_some() {
        streamed.push(("--trace", Content::Writer(&write_trace)));
    }
    if args.chrome_trace.is_some() {
        let c = session.compile_report();
        let ipus = TraceIpus::of(session.executable());
        let text = to_chrome_json(&trace, &c.program, &c.target.name, c.target.clock_hz, &ipus);
        files.push(("--chrome-trace", text));
    }
    if args.html.is_some() {
        files.push(("--html", html_page(&file, &report)?));
    }
    if args.plot.is_some() {
        let losses: Vec<f64> = loss_stream
            .as_ref()
            .and_then(|l| collected.streams.get(l))
            .map(|s| s.rows.iter().filter_map(|r| r.first().copied()).collect())
            .unwrap_or_default();
        let precision = report.compile.precision.map_or("none", |p| p.as_str());
        let title = format!("{}: training loss ({precision})", program.name);
        let svg = super::plot::loss_svg(&title, &losses)
            .map_err(|e| RunFailure::Output(format!("{file}: error: {e}")))?;
        files.push(("--plot", svg));
    }
    let write_json =
        |w: &mut dyn Write| run_output::write_json(w, &collected, report.flags, &report);
    let text =
        (!args.json).then(|| run_output::text(&file, &program, &session, &collected, &report));
    let main = text_or(&text, &write_json);
    streamed.extend(
        files
            .iter()
            .map(|(f, t)| (*f, Content::Bytes(t.as_bytes()))),
    );
    write_output(args, &plan, streamed, main)?;
    Ok(EXIT_OK)
}

/// The HTML page of a run report.
fn html_page(file: &str, report: &ipusim_runtime::report::RunReport) -> Result<String, RunFailure> {
    let value = serde_json::to_value(report)
        .map_err(|e| RunFailure::Output(format!("error: cannot serialise the report: {e}")))?;
    Ok(ipusim_runtime::report::html::html(&[(
        file.to_string(),
        value,
    )]))
}

/// Most host memory the outfeed values `ipusim run` keeps may take: 4 GiB. A kept value is
/// held as an `f64` (8 bytes) until the output is written.
pub const MAX_OUTFEED_HOST_BYTES: u64 = 4 << 30;

/// Refuses, before the first run, outfeeds whose kept values over `runs` runs would take more
/// than `limit` bytes of host memory; the error shows the arithmetic of each stream.
fn check_outfeed_memory(session: &Session, runs: u64, limit: u64) -> Result<(), String> {
    let report = session.report();
    let mut total: u64 = 0;
    let mut lines = Vec::new();
    for o in &report.outfeeds {
        let (Some(stream), Ok(mode)) = (
            session.outfeeds().iter().find(|s| s.name == o.stream),
            o.mode.parse::<OutfeedMode>(),
        ) else {
            continue;
        };
        let sent = session
            .io_model()
            .stream(&o.stream)
            .map_or(0, |t| t.copies_per_run);
        let kept = ipusim_runtime::outfeed::kept_per_run(mode, sent).saturating_mul(runs);
        let elements = stream.elements() as u64;
        let bytes = kept.saturating_mul(elements).saturating_mul(8);
        total = total.saturating_add(bytes);
        lines.push((
            bytes,
            format!(
                "  outfeed '{}' ({mode}): {} entr{} kept x {} elements x 8 bytes = {} bytes",
                o.stream,
                group(kept),
                if kept == 1 { "y" } else { "ies" },
                group(elements),
                group(bytes)
            ),
        ));
    }
    if total <= limit {
        return Ok(());
    }
    lines.sort_by_key(|l| std::cmp::Reverse(l.0));
    let detail: Vec<String> = lines.into_iter().take(8).map(|(_, l)| l).collect();
    Err(format!(
        "{}: error: the outfeeds would keep {} bytes of values on the host over {} run{}, more \
         than the limit of {} bytes:\n{}\nkeep less with --outfeed-mode NAME=last, sum or \
         every:N, or run fewer --steps",
        session.name(),
        group(total),
        group(runs),
        if runs == 1 { "" } else { "s" },
        group(limit),
        detail.join("\n")
    ))
}

/// The main output: the text when there is one, else the `--json` document's writer.
fn text_or<'a>(
    text: &'a Option<String>,
    json: &'a dyn Fn(&mut dyn Write) -> std::io::Result<()>,
) -> Content<'a> {
    match text {
        Some(text) => Content::Bytes(text.as_bytes()),
        None => Content::Writer(json),
    }
}

/// Writes the output files and the output (to `-o`, or stdout), all or none.
fn write_output<'a>(
    args: &RunArgs,
    plan: &OutputPlan,
    mut files: Vec<(&'a str, Content<'a>)>,
    main: Content<'a>,
) -> Result<(), RunFailure> {
    let stdout = match &args.output {
        Some(_) => {
            files.push(("-o", main));
            None
        }
        None => Some(main),
    };
    plan.commit_contents(&files, stdout)
        .map_err(RunFailure::Output)
}

fn progress_bar(steps: u64) -> Option<indicatif::ProgressBar> {
    if steps < PROGRESS_MIN_STEPS || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(steps);
    let style = indicatif::ProgressStyle::with_template(
        "{prefix} [{bar:40}] {pos}/{len} steps, {elapsed} elapsed, ETA {eta}",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix("running");
    Some(bar)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_must_fill_whole_runs() {
        assert_eq!(runs_for(None, false, 10).unwrap(), 1);
        assert_eq!(runs_for(Some(30), false, 10).unwrap(), 3);
        assert_eq!(runs_for(Some(7), true, 10).unwrap(), 1);
        let e = runs_for(Some(25), false, 10).unwrap_err();
        assert_eq!(
            e.to_string(),
            "error: --steps 25 is not a multiple of the program's device_iterations (10): a run \
             executes 10 steps on the device; use --steps 20 or --steps 30"
        );
        assert!(runs_for(Some(5), false, 10)
            .unwrap_err()
            .to_string()
            .ends_with("use --steps 10"));
        // The multiple above u64::MAX is not offered (it would wrap to 0).
        let m = runs_for(Some(u64::MAX), false, 2).unwrap_err().to_string();
        assert!(m.ends_with(&format!("use --steps {}", u64::MAX - 1)), "{m}");
        assert!(runs_for(Some(0), false, 10).is_err());
    }

    #[test]
    fn outfeed_modes_parse() {
        assert_eq!(
            parse_outfeed_mode("loss=every:5").unwrap(),
            ("loss".to_string(), OutfeedMode::Every(5))
        );
        assert!(parse_outfeed_mode("loss=often").is_err());
    }
}

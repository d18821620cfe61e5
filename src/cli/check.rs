//! `ipusim check PROGRAM [--json]`: validate a program file and summarise it.
//!
//! Validating means parsing and checking the program, then building its step graph (the
//! training transform, the precision policy and the pipeline's placement, as `compile`
//! does before lowering), so that a program `check` accepts fails `compile` only for what
//! the lowering and the memory plan find.
//!
//! Prints the program's ops, parameters (variables, elements and bytes by dtype), streams
//! (dtype, shape and bytes per micro-batch of each infeed, per entry of each outfeed, host I/O
//! per device run), the training spec and the numerical lint's findings, all with the dtypes
//! of the precision policy. A CSV data file that does not exist (relative to the program
//! file) is reported as a `missing-data-file` warning: the program is valid, its data is not
//! there yet.
//!
//! Exit code 0 when the program is valid (warnings allowed); 1 with the rendered error
//! (`file:line:col: error: ...`) on stderr otherwise. With `--json`, stdout is one JSON object:
//! `{"valid": true, "file": ..., "summary": {...}}` (the fields of
//! [`ipusim_ir::summary::ProgramSummary`]) or `{"valid": false, "file": ..., "error": {"file",
//! "line", "column", "kind", "message", "rendered"}}`.

use super::output::write_stdout;
use super::{warn, EXIT_ERROR, EXIT_OK};
use clap::Args;
use ipusim_compiler::build::{step_graph, BuildOptions};
use ipusim_ir::lint::{LintLevel, LintWarning};
use ipusim_ir::program::DataSource;
use ipusim_ir::summary::{summarize, ProgramSummary, StreamLink};
use ipusim_ir::text::{load_program, ProgramError};
use ipusim_ir::Program;
use serde_json::json;
use std::path::{Path, PathBuf};

/// Arguments of `ipusim check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The program file (RON, see docs/program-format.md), or an ONNX model (`.onnx`).
    pub program: PathBuf,
    /// How an ONNX model is imported.
    #[command(flatten)]
    pub import: super::source::ImportArgs,
    /// Print the summary (or the error) as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Runs `ipusim check`; returns the exit code.
pub fn run(args: &CheckArgs) -> i32 {
    let file = args.program.display().to_string();
    let loaded = if super::source::is_onnx(&args.program) {
        ipusim_onnx::load(&args.program, &args.import.options(None))
            .map_err(|e| (None, e.to_string()))
    } else {
        load_program(&args.program).map_err(|e| {
            let message = e.to_string();
            (Some(e), message)
        })
    };
    // What `compile` would refuse before lowering — the training transform, the precision
    // policy, the pipeline's placement — is refused here too.
    let loaded = loaded.and_then(
        |program| match step_graph(&program, &BuildOptions::default()) {
            Ok(_) => Ok(program),
            Err(e) => Err((None, format!("{file}: error: {e}"))),
        },
    );
    match loaded {
        Ok(program) => {
            let mut summary = summarize(&program);
            summary
                .warnings
                .extend(missing_data_files(&program, &args.program));
            let out = if args.json {
                let value = json!({ "valid": true, "file": file, "summary": summary });
                serde_json::to_string_pretty(&value).unwrap_or_default() + "\n"
            } else {
                render(&file, &summary)
            };
            match write_stdout(&out) {
                Ok(()) => EXIT_OK,
                Err(message) => {
                    warn(&format!("{message}\n"));
                    EXIT_ERROR
                }
            }
        }
        Err((e, message)) => {
            if args.json {
                let value = match &e {
                    Some(e) => error_json(&file, e),
                    None => json!({
                        "valid": false,
                        "file": file,
                        "error": {"file": file, "message": message, "rendered": message},
                    }),
                };
                let out = serde_json::to_string_pretty(&value).unwrap_or_default();
                if let Err(m) = write_stdout(&(out + "\n")) {
                    warn(&format!("{m}\n"));
                }
            }
            warn(&format!("{message}\n"));
            EXIT_ERROR
        }
    }
}

fn error_json(file: &str, e: &ProgramError) -> serde_json::Value {
    json!({
        "valid": false,
        "file": file,
        "error": {
            "file": e.file(),
            "line": e.line(),
            "column": e.column(),
            "kind": format!("{:?}", e.kind()),
            "message": e.message(),
            "rendered": e.to_string(),
        }
    })
}

/// A warning for every CSV source whose file does not exist next to the program.
fn missing_data_files(program: &Program, program_path: &Path) -> Vec<LintWarning> {
    let dir = program_path.parent().unwrap_or(Path::new(""));
    program
        .infeeds
        .iter()
        .filter_map(|spec| match &spec.source {
            DataSource::Csv { path, .. } if !dir.join(path).is_file() => Some(LintWarning {
                node: None,
                code: "missing-data-file",
                message: format!(
                    "infeed '{}': CSV file '{path}' not found (looked for {})",
                    spec.stream,
                    dir.join(path).display()
                ),
                level: LintLevel::Warning,
            }),
            _ => None,
        })
        .collect()
}

/// `1234567` as `1,234,567`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Formats rows as left-aligned columns (numbers right-aligned), two spaces apart, indented.
fn table(header: &[&str], rows: &[Vec<String>], numeric: &[bool]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::from("  ");
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            let last = i + 1 == cells.len();
            let pad = w.saturating_sub(cell.chars().count());
            if numeric.get(i).copied().unwrap_or(false) {
                s.push_str(&" ".repeat(pad));
                s.push_str(cell);
            } else {
                s.push_str(cell);
                if !last {
                    s.push_str(&" ".repeat(pad));
                }
            }
            if !last {
                s.push_str("  ");
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", grouped(n), if n == 1 { one } else { many })
}

/// A stream's row of [`stream_section`]: the dtype on the link (and as written where the
/// precision policy changed it), the shape, `bytes` and the `last` column.
fn stream_row(link: &StreamLink, bytes: u64, last: &str) -> Vec<String> {
    let dtype = if link.dtype == link.written_dtype {
        link.dtype.to_string()
    } else {
        format!("{} ({} as written)", link.dtype, link.written_dtype)
    };
    vec![
        link.stream.clone(),
        dtype,
        format!("{:?}", link.shape),
        grouped(bytes),
        last.to_string(),
    ]
}

/// A titled table of streams: name, dtype, shape, bytes and one more column.
fn stream_section(title: &str, last: &str, rows: &[Vec<String>]) -> String {
    let mut out = format!("\n{title}:\n");
    if rows.is_empty() {
        out += "  none\n";
    } else {
        out += &table(
            &["stream", "dtype", "shape", "bytes", last],
            rows,
            &[false, false, false, true, false],
        );
    }
    out
}

/// The text report.
fn render(file: &str, s: &ProgramSummary) -> String {
    let mut out = format!("program: {} ({file})\n", s.name);
    if !s.description.is_empty() {
        out += &format!("  {}\n", s.description);
    }

    out += &format!("\nnodes: {}\n", s.nodes);
    let ops: Vec<String> = s.ops.iter().map(|(op, n)| format!("{op} {n}")).collect();
    out += &format!("  {}\n", ops.join(", "));

    let p = &s.parameters;
    out += &format!(
        "\nparameters: {}, {}, {} bytes\n",
        plural(p.count as u64, "variable", "variables"),
        plural(p.elements, "element", "elements"),
        grouped(p.bytes)
    );
    if p.state_elements > 0 {
        out += &format!(
            "  trainable {} elements, state {} elements (running statistics and assigned variables)\n",
            grouped(p.elements.saturating_sub(p.state_elements)),
            grouped(p.state_elements)
        );
    }
    if !p.by_dtype.is_empty() {
        let rows: Vec<Vec<String>> = p
            .by_dtype
            .iter()
            .map(|(d, t)| {
                vec![
                    d.clone(),
                    grouped(t.count as u64),
                    grouped(t.elements),
                    grouped(t.bytes),
                ]
            })
            .collect();
        out += &table(
            &["dtype", "variables", "elements", "bytes"],
            &rows,
            &[false, true, true, true],
        );
    }

    let infeeds: Vec<Vec<String>> = s
        .infeeds
        .iter()
        .map(|i| stream_row(&i.link, i.bytes_per_micro_batch, &i.source))
        .collect();
    out += &stream_section("infeeds (bytes per micro-batch)", "source", &infeeds);
    let outfeeds: Vec<Vec<String>> = s
        .outfeeds
        .iter()
        .map(|o| stream_row(&o.link, o.bytes_per_entry, &o.mode))
        .collect();
    out += &stream_section("outfeeds (bytes per entry)", "mode", &outfeeds);
    let accumulation = s.training.as_ref().map_or(1, |t| t.gradient_accumulation);
    out += &format!(
        "\nper device run: {} x {} = {}; host link {} bytes in, {} bytes out (before outfeed modes)\n",
        plural(u64::from(s.device_iterations), "device iteration", "device iterations"),
        plural(u64::from(accumulation), "micro-batch per update", "micro-batches per update"),
        plural(s.micro_batches_per_run, "micro-batch", "micro-batches"),
        grouped(s.infeed_bytes_per_run),
        grouped(s.outfeed_bytes_per_run)
    );

    match &s.training {
        None => out += "\ntraining: none (the graph runs as written)\n",
        Some(t) => {
            let hyper: Vec<String> = t
                .hyperparameters
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            out += &format!(
                "\ntraining: loss '{}', {} ({})\n  precision {} (compute {}, weights {}), loss scaling {}, gradient accumulation {} (accumulators {})\n",
                t.loss,
                t.optimizer,
                hyper.join(", "),
                t.precision,
                t.compute_dtype,
                t.weight_dtype,
                t.loss_scaling,
                t.gradient_accumulation,
                t.accumulation_dtype
            );
            if t.stable_norm {
                out += "  batch norm statistics in two passes (stable_norm)\n";
            }
        }
    }

    let warnings = s
        .warnings
        .iter()
        .filter(|w| w.level == LintLevel::Warning)
        .count() as u64;
    let infos = s.warnings.len() as u64 - warnings;
    out += &format!(
        "\nlint: {}, {}\n",
        plural(warnings, "warning", "warnings"),
        plural(infos, "info", "infos")
    );
    for w in &s.warnings {
        out += &format!("  {w}\n");
    }
    out += &format!("\nok: '{}' is valid\n", s.name);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(1234567), "1,234,567");
    }

    #[test]
    fn tables_align() {
        let t = table(
            &["a", "n"],
            &[
                vec!["xyz".into(), "1".into()],
                vec!["b".into(), "1,000".into()],
            ],
            &[false, true],
        );
        assert_eq!(t, "  a        n\n  xyz      1\n  b    1,000\n");
    }
}

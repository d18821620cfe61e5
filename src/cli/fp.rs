//! `ipusim fp`: a calculator for IPU arithmetic (FP16/FP32, round to nearest even or
//! stochastic, saturation or NaN on overflow, `$FP_STS` flags).
//!
//! ```text
//! ipusim fp [--dtype f16|f32] [--sr] [--seed N] [--nanoo] [--json] [EXPR | -]
//! ```
//!
//! With an expression: prints its value, bit pattern and flags (one JSON object with
//! `--json`); a malformed expression prints an error naming the column and exits 1.
//!
//! With `-` (or no expression): reads one expression per line from stdin and prints one
//! line per expression, the stochastic-rounding stream continuing from line to line. Blank
//! lines are skipped. A malformed line prints an error line instead — with `--json` the
//! object `{"line": N, "column": C, "error": "..."}` — and the run goes on; the exit code is
//! 1 if any line was malformed (or unreadable), else 0. Output is written in order to
//! stdout, buffered; a closed pipe ends the run quietly.

use std::io::{self, BufRead, BufWriter, Write};

use clap::{Args, ValueEnum};
use ipusim_ir::DType;
use ipusim_sim::numerics::expr::{
    write_error_json, write_human, write_json, CalcOptions, Calculator, ExprError,
};

use super::output::{stdout_error, write_stderr, write_stdout};
use super::{EXIT_ERROR, EXIT_OK};

/// The type of decimal literals and arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Dtype {
    /// IEEE binary16.
    F16,
    /// IEEE binary32.
    F32,
}

/// Arguments of `ipusim fp`.
#[derive(Args, Debug)]
pub struct FpArgs {
    /// Type of decimal literals and of the arithmetic.
    #[arg(long, value_enum, default_value = "f16")]
    pub dtype: Dtype,
    /// Round FP16 results stochastically (the IPU's ESR).
    #[arg(long)]
    pub sr: bool,
    /// Seed of the stochastic-rounding stream.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// FP16 overflow gives NaN (and INV) instead of saturating to ±65504.
    #[arg(long)]
    pub nanoo: bool,
    /// Print one JSON object per expression.
    #[arg(long)]
    pub json: bool,
    /// The expression, e.g. "0.0004 + 0.25 - 0.25", or '-' to read one per line from stdin.
    #[arg(allow_hyphen_values = true)]
    pub expr: Option<String>,
}

/// Runs `ipusim fp` and returns the exit code.
pub fn run(args: FpArgs) -> i32 {
    let options = CalcOptions {
        dtype: match args.dtype {
            Dtype::F16 => DType::F16,
            Dtype::F32 => DType::F32,
        },
        sr: args.sr,
        nanoo: args.nanoo,
        seed: args.seed,
    };
    let mut calc = Calculator::new(options);
    match args.expr.as_deref() {
        None | Some("-") => {
            let stdin = io::stdin();
            let stdout = io::stdout();
            let input = io::BufReader::with_capacity(1 << 16, stdin.lock());
            let output = BufWriter::with_capacity(1 << 16, stdout.lock());
            match run_lines(&mut calc, args.json, input, output) {
                Ok(true) => EXIT_OK,
                Ok(false) => EXIT_ERROR,
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => EXIT_OK,
                Err(e) => {
                    write_stderr(&format!("{}\n", stdout_error(&e)));
                    EXIT_ERROR
                }
            }
        }
        Some(expr) => run_one(&mut calc, args.json, expr),
    }
}

fn run_one(calc: &mut Calculator, json: bool, expr: &str) -> i32 {
    match calc.eval(expr) {
        Ok(outcome) => {
            let mut line = String::new();
            if json {
                write_json(&outcome, &mut line);
            } else {
                write_human(&outcome, &mut line);
            }
            line.push('\n');
            match write_stdout(&line) {
                Ok(()) => EXIT_OK,
                Err(message) => {
                    write_stderr(&format!("{message}\n"));
                    EXIT_ERROR
                }
            }
        }
        Err(e) => {
            write_stderr(&format!("error: {e}\n{}\n", caret(expr, &e)));
            EXIT_ERROR
        }
    }
}

/// The expression with a caret under the column of `e`.
fn caret(expr: &str, e: &ExprError) -> String {
    format!("  {expr}\n  {}^", " ".repeat(e.column.saturating_sub(1)))
}

/// Evaluates every line of `input`, writing one line per expression to `output`.
/// Returns whether every line was well formed.
pub fn run_lines(
    calc: &mut Calculator,
    json: bool,
    mut input: impl BufRead,
    mut output: impl Write,
) -> io::Result<bool> {
    let mut raw = Vec::with_capacity(256);
    let mut text = String::with_capacity(256);
    let mut all_ok = true;
    let mut line_no = 0usize;
    loop {
        raw.clear();
        if input.read_until(b'\n', &mut raw)? == 0 {
            break;
        }
        line_no += 1;
        let line = match std::str::from_utf8(&raw) {
            Ok(s) => s.trim_end_matches(['\n', '\r']),
            Err(e) => {
                all_ok = false;
                let column = String::from_utf8_lossy(&raw[..e.valid_up_to()])
                    .chars()
                    .count()
                    + 1;
                if json {
                    writeln!(output, "{{\"line\": {line_no}, \"column\": {column}, \"error\": \"invalid UTF-8\"}}")?;
                } else {
                    writeln!(
                        output,
                        "line {line_no}: error: column {column}: invalid UTF-8"
                    )?;
                }
                continue;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        text.clear();
        match calc.eval(line) {
            Ok(outcome) if json => write_json(&outcome, &mut text),
            Ok(outcome) => write_human(&outcome, &mut text),
            Err(e) => {
                all_ok = false;
                if json {
                    write_error_json(line_no, &e, &mut text);
                } else {
                    text.push_str(&format!("line {line_no}: error: {e}"));
                }
            }
        }
        text.push('\n');
        output.write_all(text.as_bytes())?;
    }
    output.flush()?;
    Ok(all_ok)
}

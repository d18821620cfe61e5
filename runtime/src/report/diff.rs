//! `ipusim report diff A.json B.json`: two reports side by side — PopVision's "Compare two
//! reports" — with the delta and the relative change of every figure.
//!
//! Works on any two JSON reports of ipusim (compile reports, run reports, or one of each:
//! fields only one side has show as `-`). Reports are compared by field path: objects by key
//! (`memory.categories.variables`), arrays of named objects by name
//! (`compute_sets[dense1/matmul]`, `host_io.streams[features]`), other arrays by index. The
//! text shows the headline figures in a fixed order, then the compute sets with the largest
//! changes of cycles, then every other field that differs.

use ipusim_compiler::report::group;
use ipusim_ir::text::input::{read_text, ReadError};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;
use thiserror::Error;

/// The headline figures, in the order the text shows them.
const HEADLINE: &[&str] = &[
    "total_cycles",
    "seconds",
    "categories.OnTileExecute",
    "categories.DoExchange",
    "categories.Sync",
    "categories.StreamCopy",
    "tile_balance",
    "used_tiles",
    "vertices",
    "exchange_bytes",
    "memory.max_tile_bytes",
    "memory.total_bytes",
    "memory.always_live_bytes",
    "memory.peak_live_bytes",
    "memory.categories.variables",
    "memory.categories.constants",
    "memory.categories.vertex_state",
    "memory.categories.code",
    "memory.categories.exchange_buffers",
    "memory.categories.temporaries",
    "memory.categories.control_code",
    "memory.categories.vertex_code",
    "memory.categories.internal_exchange_code",
    "memory.categories.global_exchange_code",
    "stream_bytes_host_to_device",
    "stream_bytes_device_to_host",
    "stream_bytes.rx",
    "stream_bytes.tx",
    "gradient_accumulation",
    "device_iterations",
    "batch.micro_batch",
    "batch.replicas",
    "batch.global_batch",
    "batch.samples_per_run",
    "runs",
    "steps",
    "micro_batches",
    "executed.total_cycles",
    "executed.seconds",
];

/// The fields that name an element of an array of objects, in order of preference.
const KEYS: &[&str] = &["name", "stream", "tile", "ipu"];

/// What the header says about each report.
const IDENTITY: &[&str] = &["program", "target.name", "precision", "partials", "mode"];

/// One compared figure.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FieldDiff {
    /// The field path.
    pub field: String,
    /// A's value (a number, string or bool), if A has the field.
    pub a: Option<Value>,
    /// B's value, if B has the field.
    pub b: Option<Value>,
    /// `b − a` for numbers on both sides.
    pub delta: Option<f64>,
    /// `100 × (b − a) / a` when `a ≠ 0`.
    pub percent: Option<f64>,
}

/// Two reports compared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReportDiff {
    /// A's file.
    pub a: String,
    /// B's file.
    pub b: String,
    /// The headline figures (present in at least one report).
    pub headline: Vec<FieldDiff>,
    /// Compute sets' cycles, largest absolute change first.
    pub compute_sets: Vec<FieldDiff>,
    /// Every other field whose values differ, by path.
    pub other: Vec<FieldDiff>,
    /// `program`, `target.name`, ... of each side.
    pub identity: Vec<FieldDiff>,
}

/// Largest report file read (bytes): 256 MiB (a report of a run with its outfeeds).
pub const MAX_REPORT_BYTES: u64 = 256 << 20;

/// A report file that cannot be compared; every variant names the file.
#[derive(Debug, Error)]
pub enum ReportFileError {
    /// The file cannot be read.
    #[error("{file}: error: {source}")]
    Read {
        /// The report file.
        file: String,
        /// Why.
        source: ReadError,
    },
    /// The text is not JSON.
    #[error("{file}:{line}:{column}: error: not valid JSON: {source}")]
    Json {
        /// The report file.
        file: String,
        /// The line of the fault.
        line: usize,
        /// The column of the fault.
        column: usize,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// JSON, but not a report.
    #[error(
        "{file}: error: not an ipusim report (no \"total_cycles\"; write one with \
         `ipusim compile --json` or `ipusim run --json`)"
    )]
    NotAReport {
        /// The report file.
        file: String,
    },
    /// A report whose `total_cycles` is not a cycle count.
    #[error("{file}: error: \"total_cycles\" is {found}, not a cycle count (an integer from 0 to 2^64 - 1)")]
    BadTotalCycles {
        /// The report file.
        file: String,
        /// The value found, as JSON.
        found: String,
    },
}

/// Reads a report file: JSON with a `total_cycles` field.
pub fn load(path: &Path) -> Result<Value, ReportFileError> {
    let file = path.display().to_string();
    let text =
        read_text(path, MAX_REPORT_BYTES, "report").map_err(|source| ReportFileError::Read {
            file: file.clone(),
            source,
        })?;
    parse(&text, &file)
}

/// [`load`] on the text of a report file named `file`.
pub fn parse(text: &str, file: &str) -> Result<Value, ReportFileError> {
    let v: Value = serde_json::from_str(text).map_err(|source| ReportFileError::Json {
        file: file.to_string(),
        line: source.line(),
        column: source.column(),
        source,
    })?;
    // `ipusim run --json` wraps the report with the outfeeds.
    let v = match v.get("report") {
        Some(r) if v.get("total_cycles").is_none() => r.clone(),
        _ => v,
    };
    match v.get("total_cycles") {
        None => {
            return Err(ReportFileError::NotAReport {
                file: file.to_string(),
            })
        }
        Some(c) if c.as_u64().is_none() => {
            return Err(ReportFileError::BadTotalCycles {
                file: file.to_string(),
                found: c.to_string(),
            })
        }
        Some(_) => {}
    }
    Ok(v)
}

/// Compares report `a` (from file `a_name`) with `b`.
pub fn diff(a_name: &str, a: &Value, b_name: &str, b: &Value) -> ReportDiff {
    let (fa, fb) = (flatten(a), flatten(b));
    let field = |path: &str| compare(path, fa.get(path), fb.get(path));
    let headline = HEADLINE
        .iter()
        .filter(|p| fa.contains_key(**p) || fb.contains_key(**p))
        .map(|p| field(p))
        .collect();
    let identity = IDENTITY.iter().map(|p| field(p)).collect();
    let mut compute_sets: Vec<FieldDiff> = fa
        .keys()
        .chain(fb.keys())
        .filter(|k| k.starts_with("compute_sets[") && k.ends_with("].cycles"))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|k| field(k))
        .collect();
    compute_sets.sort_by(|x, y| {
        // A compute set on one side only changes by all of its cycles.
        let mag = |d: &FieldDiff| match d.delta {
            Some(delta) => delta.abs(),
            None => [&d.a, &d.b]
                .iter()
                .filter_map(|v| v.as_ref().and_then(Value::as_f64))
                .sum(),
        };
        mag(y)
            .total_cmp(&mag(x))
            .then_with(|| x.field.cmp(&y.field))
    });
    // Shown above, or not comparable between two reports: the fullest tiles are listed by
    // tile (another compile has other fullest tiles), a keyed element's key leaf repeats
    // its key, and the per-tile bytes, per-step liveness and the execution trace's steps
    // are series (the HTML report draws them), not figures.
    let shown = |k: &str| {
        HEADLINE.contains(&k)
            || IDENTITY.contains(&k)
            || k.starts_with("compute_sets[")
            || k.starts_with("memory.worst_tiles[")
            || k.starts_with("memory.oom_tiles[")
            || k.starts_with("memory.tiles[")
            || k.starts_with("memory.liveness[")
            || k.starts_with("program_tree.")
            || (k.starts_with("execution.") && k.contains(".slices["))
            || KEYS.iter().any(|key| k.ends_with(&format!("].{key}")))
    };
    let other = fa
        .keys()
        .chain(fb.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| !shown(k) && fa.get(*k) != fb.get(*k))
        .map(|k| field(k))
        .collect();
    ReportDiff {
        a: a_name.to_string(),
        b: b_name.to_string(),
        headline,
        compute_sets,
        other,
        identity,
    }
}

fn compare(path: &str, a: Option<&Value>, b: Option<&Value>) -> FieldDiff {
    let (x, y) = (a.and_then(Value::as_f64), b.and_then(Value::as_f64));
    let delta = x.zip(y).map(|(x, y)| y - x);
    let percent = x
        .zip(delta)
        .and_then(|(x, d)| (x != 0.0).then_some(100.0 * d / x));
    FieldDiff {
        field: path.to_string(),
        a: a.cloned(),
        b: b.cloned(),
        delta,
        percent,
    }
}

/// Scalar leaves of a report by path.
fn flatten(v: &Value) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    walk(v, String::new(), &mut out);
    out
}

fn walk(v: &Value, path: String, out: &mut BTreeMap<String, Value>) {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                walk(x, join(k), out);
            }
        }
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                let key = KEYS
                    .iter()
                    .find_map(|k| x.get(*k))
                    .map(|k| match k {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .unwrap_or_else(|| i.to_string());
                walk(x, format!("{path}[{key}]"), out);
            }
        }
        _ => {
            out.insert(path, v.clone());
        }
    }
}

fn show(v: &Option<Value>) -> String {
    match v {
        None => "-".into(),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(u) => group(u),
            None => {
                let f = n.as_f64().unwrap_or(f64::NAN);
                if f.fract() == 0.0 && f.abs() < 1e15 {
                    format!("{f:.0}")
                } else {
                    format!("{f:.4}")
                }
            }
        },
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// `b − a` exactly, when both are integers (cycle and byte counts beyond 2^53 are not exact
/// in `f64`).
fn exact_delta(d: &FieldDiff) -> Option<i128> {
    let int = |v: &Option<Value>| -> Option<i128> {
        match v.as_ref()? {
            Value::Number(n) => n
                .as_u64()
                .map(i128::from)
                .or_else(|| n.as_i64().map(i128::from)),
            _ => None,
        }
    };
    Some(int(&d.b)? - int(&d.a)?)
}

fn show_delta(d: &FieldDiff) -> (String, String) {
    let delta = match (d.delta, exact_delta(d)) {
        (None, _) => "-".into(),
        (Some(_), Some(x)) => {
            let sign = match x.signum() {
                1 => "+",
                -1 => "-",
                _ => "",
            };
            let abs = x.unsigned_abs();
            let digits = u64::try_from(abs).map_or_else(|_| abs.to_string(), group);
            format!("{sign}{digits}")
        }
        (Some(x), None) if x.fract() == 0.0 && x.abs() < 1e15 => {
            let sign = if x > 0.0 {
                "+"
            } else if x < 0.0 {
                "-"
            } else {
                ""
            };
            format!("{sign}{}", group(x.abs() as u64))
        }
        (Some(x), None) => format!("{x:+.4}"),
    };
    let pct = match (d.percent, d.delta) {
        (Some(p), _) => format!("{p:+.2}%"),
        (None, Some(x)) if x != 0.0 => "new".into(),
        _ => "-".into(),
    };
    (delta, pct)
}

impl ReportDiff {
    /// The side-by-side text.
    pub fn to_text(&self, top: usize) -> String {
        let mut s = String::new();
        let ident = |pick: fn(&FieldDiff) -> &Option<Value>| {
            self.identity
                .iter()
                .filter_map(|d| pick(d).as_ref().map(|v| show(&Some(v.clone()))))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(s, "ipusim report diff");
        let _ = writeln!(s, "  A: {} ({})", self.a, ident(|d| &d.a));
        let _ = writeln!(s, "  B: {} ({})\n", self.b, ident(|d| &d.b));
        let row = |s: &mut String, d: &FieldDiff, width: usize| {
            let (delta, pct) = show_delta(d);
            let _ = writeln!(
                s,
                "{:<width$} {:>16} {:>16} {:>16} {:>10}",
                d.field,
                show(&d.a),
                show(&d.b),
                delta,
                pct
            );
        };
        let header = |s: &mut String, title: &str, width: usize| {
            let _ = writeln!(
                s,
                "{:<width$} {:>16} {:>16} {:>16} {:>10}",
                title, "A", "B", "delta (B-A)", "change"
            );
        };
        let width = |rows: &mut dyn Iterator<Item = usize>| rows.max().unwrap_or(0).clamp(24, 64);
        let w = width(&mut self.headline.iter().map(|d| d.field.len()));
        header(&mut s, "field", w);
        for d in &self.headline {
            row(&mut s, d, w);
        }
        if !self.compute_sets.is_empty() {
            let _ = writeln!(
                s,
                "\nCompute sets: cycles per run (top {} of {} by change)",
                top.min(self.compute_sets.len()),
                self.compute_sets.len()
            );
            let sets: Vec<FieldDiff> = self
                .compute_sets
                .iter()
                .take(top)
                .map(|d| FieldDiff {
                    field: d
                        .field
                        .trim_start_matches("compute_sets[")
                        .trim_end_matches("].cycles")
                        .to_string(),
                    ..d.clone()
                })
                .collect();
            let w = width(&mut sets.iter().map(|d| d.field.len()));
            header(&mut s, "compute set", w);
            for d in &sets {
                row(&mut s, d, w);
            }
        }
        if !self.other.is_empty() {
            let _ = writeln!(s, "\nOther fields that differ ({})", self.other.len());
            let w = width(&mut self.other.iter().take(top).map(|d| d.field.len()));
            header(&mut s, "field", w);
            for d in self.other.iter().take(top) {
                row(&mut s, d, w);
            }
            if self.other.len() > top {
                let _ = writeln!(s, "... {} more (see --json)", self.other.len() - top);
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn report(cycles: u64, cs: u64, precision: &str) -> Value {
        json!({
            "program": "p", "precision": precision, "target": {"name": "mk2"},
            "total_cycles": cycles,
            "categories": {"OnTileExecute": cycles / 2, "DoExchange": cycles / 2, "Sync": 0, "StreamCopy": 0},
            "compute_sets": [{"name": "mm", "cycles": cs}, {"name": "add", "cycles": 10}],
            "memory": {"oom": false, "worst_tiles": [{"tile": 3, "bytes": 100}]},
            "tile_balance": 0.5
        })
    }

    #[test]
    fn deltas_and_percentages() {
        let d = diff(
            "a.json",
            &report(1000, 600, "32.32"),
            "b.json",
            &report(800, 300, "16.16"),
        );
        let total = &d.headline[0];
        assert_eq!(total.field, "total_cycles");
        assert_eq!((total.delta, total.percent), (Some(-200.0), Some(-20.0)));
        assert_eq!(d.compute_sets[0].field, "compute_sets[mm].cycles");
        assert_eq!(d.compute_sets[0].delta, Some(-300.0));
        assert!(d.other.is_empty(), "{:?}", d.other);
        let text = d.to_text(20);
        assert!(text.contains("A: a.json (p, mk2, 32.32)"), "{text}");
        assert!(
            text.lines().any(|l| l.starts_with("total_cycles")
                && l.contains("1,000")
                && l.contains("800")
                && l.contains("-200")
                && l.ends_with("-20.00%")),
            "{text}"
        );
        assert!(text.contains("mm "), "{text}");
    }

    /// Counts beyond 2^53 differ exactly (f64 would round the difference).
    #[test]
    fn integer_deltas_are_exact() {
        let cases = [
            (1 << 60, (1 << 60) + 1, " +1 "),
            (9_007_199_254_740_993, 7, " -9,007,199,254,740,986 "),
        ];
        for (a, b, delta) in cases {
            let d = diff("a", &report(a, 6, "16.16"), "b", &report(b, 6, "16.16"));
            let text = d.to_text(20);
            let total = text.lines().find(|l| l.starts_with("total_cycles"));
            assert!(total.is_some_and(|l| l.contains(delta)), "{text}");
        }
    }

    /// A `total_cycles` that is there but not a count is named as such.
    #[test]
    fn a_total_that_is_not_a_count_is_named() {
        for (found, shown) in [("\"lots\"", "\"lots\""), ("-5", "-5"), ("1e308", "1e+308")] {
            let e = parse(&format!("{{\"total_cycles\": {found}}}"), "r.json").unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "r.json: error: \"total_cycles\" is {shown}, not a cycle count (an integer \
                     from 0 to 2^64 - 1)"
                )
            );
        }
        let e = parse("{\"cycles\": 5}", "r.json").unwrap_err();
        assert!(e.to_string().contains("no \"total_cycles\""), "{e}");
    }

    #[test]
    fn fields_on_one_side_show_a_dash() {
        let mut b = report(1000, 600, "32.32");
        b["runs"] = json!(3);
        b["memory"]["worst_tiles"][0]["bytes"] = json!(120);
        b["host_io"] = json!({"streams": [{"name": "x", "bytes_per_run": 10}]});
        let mut a = report(1000, 600, "32.32");
        a["host_io"] = json!({"streams": [{"name": "x", "bytes_per_run": 8}]});
        let d = diff("a", &a, "b", &b);
        let runs = d.headline.iter().find(|f| f.field == "runs").unwrap();
        assert_eq!((runs.a.clone(), runs.delta), (None, None));
        assert_eq!(d.other.len(), 1, "{:?}", d.other);
        assert_eq!(d.other[0].field, "host_io.streams[x].bytes_per_run");
        assert_eq!(d.other[0].percent, Some(25.0));
    }

    #[test]
    fn the_execution_traces_steps_are_a_series_and_its_totals_figures() {
        let trace = |idle: u64, start: u64| {
            json!({"source": "estimate", "total_cycles": 100, "ipus": [{"ipu": 0,
                "idle_cycles": idle,
                "slices": [{"kind": "Execute", "name": "mm", "start": start, "cycles": 5}]}]})
        };
        let (mut a, mut b) = (report(100, 60, "16.16"), report(100, 60, "16.16"));
        a["execution"] = trace(10, 0);
        b["execution"] = trace(12, 7);
        let d = diff("a", &a, "b", &b);
        let fields: Vec<&str> = d.other.iter().map(|f| f.field.as_str()).collect();
        assert_eq!(fields, ["execution.ipus[0].idle_cycles"]);
    }
}

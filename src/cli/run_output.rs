//! What `ipusim run` prints: the outfeeds collected over the runs, the loss curve of a
//! training program, and the run report — as text, or as the JSON contract
//! `{"outfeeds": {...}, "flags": {...}, "report": {...}}`.

use ipusim_compiler::report::group;
use ipusim_ir::{Op, OutfeedMode, Program};
use ipusim_runtime::json::Nested;
use ipusim_runtime::report::{Flags, RunReport};
use ipusim_runtime::session::Session;
use ipusim_runtime::{OutfeedData, StreamType};
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;

/// Longest stream (elements over all entries) printed in full.
const PRINT_ELEMENTS: usize = 64;
/// Most entries printed in full.
const PRINT_ENTRIES: usize = 8;
/// Rows of the loss curve.
const CURVE_ROWS: usize = 15;
/// Width of the loss curve's bars.
const BAR: usize = 30;
/// Widest name column: longer names are printed whole, unaligned (a format width must stay
/// within `u16::MAX`, and no terminal is wider than this anyway).
const MAX_NAME_COLUMN: usize = 64;

/// One outfeed's kept entries over all runs.
#[derive(Clone, Debug)]
pub struct StreamRows {
    /// The stream.
    pub stream: StreamType,
    /// Its mode.
    pub mode: OutfeedMode,
    /// Kept entries (row-major values), run after run.
    pub rows: Vec<Vec<f64>>,
    /// Entries the device sent.
    pub received: u64,
}

/// The outfeeds of every run, by stream.
#[derive(Clone, Debug, Default)]
pub struct Collected {
    /// By stream name.
    pub streams: BTreeMap<String, StreamRows>,
}

impl Collected {
    /// Appends one run's outfeed data.
    pub fn add(&mut self, run: &BTreeMap<String, OutfeedData>) {
        for (name, data) in run {
            let e = self
                .streams
                .entry(name.clone())
                .or_insert_with(|| StreamRows {
                    stream: data.stream.clone(),
                    mode: data.mode,
                    rows: Vec::new(),
                    received: 0,
                });
            e.rows.extend(data.rows());
            e.received += data.received;
        }
    }
}

/// The `--json` document.
pub fn write_json(
    w: &mut dyn Write,
    collected: &Collected,
    flags: Flags,
    report: &RunReport,
) -> std::io::Result<()> {
    let doc = Doc {
        flags: serde_json::to_value(flags).unwrap_or_default(),
        outfeeds: Outfeeds(collected),
        report: serde_json::to_value(report).unwrap_or_default(),
    };
    serde_json::to_writer_pretty(&mut *w, &doc)?;
    w.write_all(b"\n")
}

/// The JSON document of `ipusim run --json`, its keys in alphabetical order.
#[derive(Serialize)]
struct Doc<'a> {
    flags: Value,
    outfeeds: Outfeeds<'a>,
    report: Value,
}

/// Every stream's kept entries, by stream name, each entry nested by the stream's shape.
struct Outfeeds<'a>(&'a Collected);

impl Serialize for Outfeeds<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.streams.len()))?;
        for (name, st) in &self.0.streams {
            let shape = st.stream.shape.dims();
            let entries: Vec<Nested> = (st.rows.iter())
                .map(|values| Nested { values, shape })
                .collect();
            map.serialize_entry(name, &entries)?;
        }
        map.end()
    }
}

/// The stream that outfeeds the training loss, if any.
pub fn loss_stream(program: &Program) -> Option<String> {
    let loss = program.graph.find(&program.training.as_ref()?.loss)?;
    program.graph.nodes().find_map(|(_, n)| match &n.op {
        Op::Outfeed { stream } if n.inputs.first() == Some(&loss) => Some(stream.clone()),
        _ => None,
    })
}

fn fmt_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        // Exact: f16 and f32 values print in full (0.00048828125 = 2^-11).
        format!("{v}")
    }
}

fn fmt_row(row: &[f64]) -> String {
    let items: Vec<String> = row.iter().map(|&v| fmt_value(v)).collect();
    if row.len() == 1 {
        items[0].clone()
    } else {
        format!("[{}]", items.join(", "))
    }
}

/// Minimum, maximum and mean of the finite values, and how many are not finite, in one pass
/// over `values` (no copy: an outfeed kept over many runs can hold gigabytes).
fn stats<'a>(values: impl IntoIterator<Item = &'a f64>) -> String {
    let (mut n, mut finite, mut sum) = (0usize, 0usize, 0f64);
    let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
    for &v in values {
        n += 1;
        if v.is_finite() {
            finite += 1;
            sum += v;
            min = min.min(v);
            max = max.max(v);
        }
    }
    if finite == 0 {
        return format!("{n} values, none finite");
    }
    if min == max && finite == n {
        return format!("every element {}", fmt_value(min));
    }
    let mean = sum / finite as f64;
    format!(
        "min {}, max {}, mean {:.6}{}",
        fmt_value(min),
        fmt_value(max),
        mean,
        if finite < n {
            format!(" ({} not finite)", n - finite)
        } else {
            String::new()
        }
    )
}

fn outfeeds_text(s: &mut String, collected: &Collected) {
    let _ = writeln!(s, "Outfeeds (kept by each stream's mode, all runs)");
    let width = collected
        .streams
        .keys()
        .map(String::len)
        .max()
        .unwrap_or(0)
        .clamp(6, MAX_NAME_COLUMN);
    for (name, st) in &collected.streams {
        let ty = st.stream.tensor_type().to_string();
        let head = format!("  {name:<width$}  {ty:<12} {:<8}", st.mode.to_string());
        let elements: usize = st.rows.iter().map(Vec::len).sum();
        let n = st.rows.len();
        if n == 0 {
            let _ = writeln!(s, "{head} no entries kept ({} sent)", st.received);
        } else if elements <= PRINT_ELEMENTS && n <= PRINT_ENTRIES {
            let rows: Vec<String> = st.rows.iter().map(|r| fmt_row(r)).collect();
            let _ = writeln!(s, "{head} {}", rows.join(", "));
        } else if st.stream.elements() == 1 {
            let v: Vec<f64> = st.rows.iter().map(|r| r[0]).collect();
            let _ = writeln!(
                s,
                "{head} {n} entries: first {}, last {}; {}",
                fmt_value(v[0]),
                fmt_value(v[n - 1]),
                stats(&v)
            );
        } else {
            let last = st.rows.last().map(Vec::as_slice).unwrap_or_default();
            let _ = writeln!(
                s,
                "{head} {n} entr{} of {ty}: {}; last entry: {}",
                if n == 1 { "y" } else { "ies" },
                stats(st.rows.iter().flatten()),
                stats(last)
            );
        }
    }
}

fn loss_curve(s: &mut String, loss: &StreamRows, accuracy: Option<&StreamRows>) {
    let values: Vec<f64> = loss
        .rows
        .iter()
        .filter_map(|r| r.first().copied())
        .collect();
    if values.len() < 2 {
        return;
    }
    let acc: Option<Vec<f64>> = accuracy
        .map(|a| a.rows.iter().filter_map(|r| r.first().copied()).collect())
        .filter(|a: &Vec<f64>| a.len() == values.len());
    let per = values.len().div_ceil(CURVE_ROWS);
    let buckets: Vec<(usize, usize, f64, Option<f64>)> = (0..values.len())
        .step_by(per)
        .map(|start| {
            let end = (start + per).min(values.len());
            let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
            (
                start + 1,
                end,
                mean(&values[start..end]),
                acc.as_ref().map(|a| mean(&a[start..end])),
            )
        })
        .collect();
    let top = buckets
        .iter()
        .map(|b| b.2)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let _ = writeln!(
        s,
        "\nLoss curve (outfeed '{}', mean per {per} entr{}{})",
        loss.stream.name,
        if per == 1 { "y" } else { "ies" },
        if acc.is_some() {
            ", with the outfeed 'accuracy'"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "  {:>13} {:>10}{}",
        "entries",
        "loss",
        if acc.is_some() { "   accuracy" } else { "" }
    );
    for (a, b, l, acc) in buckets {
        let bar = if top > 0.0 && l.is_finite() {
            "#".repeat(((l / top) * BAR as f64).round() as usize)
        } else {
            String::new()
        };
        let acc = acc.map_or(String::new(), |v| format!(" {v:>10.4}"));
        let _ = writeln!(s, "  {:>13} {l:>10.4}{acc}  {bar}", format!("{a}-{b}"));
    }
}

/// The text output.
pub fn text(
    file: &str,
    program: &Program,
    session: &Session,
    collected: &Collected,
    report: &RunReport,
) -> String {
    let mut s = String::new();
    let c = &report.compile;
    let _ = writeln!(
        s,
        "ipusim run: {} ({file}) on {}, precision {}, {}: {} run{} x {} steps = {} micro-batches\n",
        c.program,
        c.target.name,
        c.precision_name(),
        report.mode,
        report.runs,
        if report.runs == 1 { "" } else { "s" },
        session.steps_per_run(),
        group(report.micro_batches)
    );
    outfeeds_text(&mut s, collected);
    let loss = loss_stream(program).and_then(|l| collected.streams.get(&l));
    if let (Some(loss), "training") = (loss, report.mode.as_str()) {
        loss_curve(&mut s, loss, collected.streams.get("accuracy"));
    }
    let _ = writeln!(s);
    s + &report.to_text()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipusim_ir::DType;

    fn rows(name: &str, shape: Vec<usize>, mode: OutfeedMode, rows: Vec<Vec<f64>>) -> StreamRows {
        StreamRows {
            stream: StreamType::new(name, DType::F32, shape),
            mode,
            received: rows.len() as u64,
            rows,
        }
    }

    #[test]
    fn outfeeds_print_values_or_summaries() {
        let mut c = Collected::default();
        c.streams.insert(
            "back".into(),
            rows(
                "back",
                vec![2],
                OutfeedMode::Last,
                vec![vec![2f64.powi(-11), 0.0]],
            ),
        );
        c.streams.insert(
            "d1".into(),
            rows("d1", vec![800], OutfeedMode::All, vec![vec![2.0; 800]; 10]),
        );
        c.streams.insert(
            "p".into(),
            rows("p", vec![], OutfeedMode::All, vec![vec![f64::NAN]]),
        );
        let mut s = String::new();
        outfeeds_text(&mut s, &c);
        assert!(s.contains("[0.00048828125, 0]"), "{s}");
        assert!(s.contains("10 entries of f32[800]: every element 2"), "{s}");
        assert!(s.contains("NaN"), "{s}");
    }

    #[test]
    fn summaries_span_every_entry_and_count_what_is_not_finite() {
        let mut c = Collected::default();
        let mut last = vec![3.0; 38];
        last.extend([f64::NAN, f64::INFINITY]);
        let entries = vec![vec![1.0; 40], vec![-1.0; 40], last];
        c.streams
            .insert("y".into(), rows("y", vec![40], OutfeedMode::All, entries));
        let mut s = String::new();
        outfeeds_text(&mut s, &c);
        // 40 ones, 40 minus ones and 38 threes: 114 / 118 finite values.
        assert!(
            s.contains("3 entries of f32[40]: min -1, max 3, mean 0.966102 (2 not finite)"),
            "{s}"
        );
        assert!(
            s.contains("last entry: min 3, max 3, mean 3.000000 (2 not finite)"),
            "{s}"
        );
        assert_eq!(
            stats(&[f64::NAN, f64::NEG_INFINITY]),
            "2 values, none finite"
        );
        assert_eq!(stats(&[0.5, 0.5]), "every element 0.5");
    }

    #[test]
    fn loss_curve_buckets_entries() {
        let loss = rows(
            "loss",
            vec![],
            OutfeedMode::All,
            (0..30).map(|i| vec![3.0 - 0.1 * i as f64]).collect(),
        );
        let mut s = String::new();
        loss_curve(&mut s, &loss, None);
        assert!(s.contains("mean per 2 entries"), "{s}");
        assert!(s.contains("1-2     2.9500"), "{s}");
        assert_eq!(s.trim_start().lines().count(), 2 + 15, "{s}");
    }
}

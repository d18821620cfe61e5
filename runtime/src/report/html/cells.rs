//! The building blocks of the HTML report's views: escaping, reading a figure of the JSON
//! report by its dotted path, and the table cells that carry a figure with its `data-field`
//! and exact `data-value` (what the browser test checks against the JSON).

use serde_json::Value;

/// HTML-escaped text.
pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The value at a dotted path; numeric parts index arrays (`ipus.0.free_bytes`).
pub(super) fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.')
        .fold(v, |v, k| match (v, k.parse::<usize>()) {
            (Value::Array(a), Ok(i)) => a.get(i).unwrap_or(&Value::Null),
            _ => &v[k],
        })
}

pub(super) fn text(v: &Value, path: &str) -> String {
    match at(v, path) {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

pub(super) fn u(v: &Value, path: &str) -> u64 {
    at(v, path).as_u64().unwrap_or(0)
}

/// `1234567` as `1,234,567`.
pub(super) fn group(n: u64) -> String {
    let d = n.to_string();
    let mut out = String::new();
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A table cell holding the figure at `path` of `v` (`data-field`, exact `data-value`).
pub(super) fn cell(v: &Value, path: &str, field: &str) -> String {
    let x = at(v, path);
    let shown = match x {
        Value::Number(n) if n.is_u64() => group(n.as_u64().unwrap_or(0)),
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            if x.abs() < 1.0 {
                format!("{x:.6}")
            } else {
                format!("{x:.4}")
            }
        }
        Value::String(s) => esc(s),
        Value::Bool(b) => b.to_string(),
        _ => "—".into(),
    };
    let raw = match x {
        Value::String(s) => esc(s),
        other => esc(&other.to_string()),
    };
    format!("<td data-field=\"{field}\" data-value=\"{raw}\">{shown}</td>")
}

pub(super) fn row(label: &str, v: &Value, path: &str) -> String {
    format!(
        "<tr><th class=\"name\">{label}</th>{}</tr>\n",
        cell(v, path, path)
    )
}

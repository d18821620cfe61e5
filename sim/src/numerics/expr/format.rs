//! Printing calculator results: one human-readable line, or one JSON object
//! `{"value": …, "bits": "0x…", "flags": […]}` — the `ipusim fp --json` contract.
//!
//! Values print exactly: an FP16 or FP32 value is an `f64` value, printed as the shortest
//! decimal that parses back to that `f64` (so `json.loads` and `float()` recover the exact
//! value). NaN and infinities print as the strings `"nan"`, `"inf"`, `"-inf"`; zeros as
//! `0.0`/`-0.0` (keeping the sign through JSON readers that turn `-0` into an integer).

use std::fmt::Write;

use super::{ExprError, Outcome, Value};
use crate::numerics::flags::FpSts;

/// A float's exact value, as JSON would carry it (`quote`: put NaN/inf in quotes).
fn write_float(out: &mut String, x: f64, quote: bool) {
    let q = if quote { "\"" } else { "" };
    let _ = if x.is_nan() {
        write!(out, "{q}nan{q}")
    } else if x.is_infinite() {
        write!(out, "{q}{}inf{q}", if x < 0.0 { "-" } else { "" })
    } else if x == 0.0 {
        write!(out, "{}0.0", if x.is_sign_negative() { "-" } else { "" })
    } else if (1e-5..1e16).contains(&x.abs()) {
        write!(out, "{x}")
    } else {
        write!(out, "{x:e}")
    };
}

fn write_value(out: &mut String, v: Value, quote: bool) {
    let _ = match v {
        Value::F16(x) => {
            write_float(out, x.to_f64(), quote);
            Ok(())
        }
        Value::F32(x) => {
            write_float(out, f64::from(x), quote);
            Ok(())
        }
        Value::I32(x) => write!(out, "{x}"),
        Value::U8(x) => write!(out, "{x}"),
        Value::Bool(x) => write!(out, "{x}"),
    };
}

fn write_bits(out: &mut String, v: Value) {
    let _ = match v {
        Value::F16(_) => write!(out, "0x{:04x}", v.bits()),
        Value::F32(_) | Value::I32(_) => write!(out, "0x{:08x}", v.bits()),
        Value::U8(_) => write!(out, "0x{:02x}", v.bits()),
        Value::Bool(_) => write!(out, "0x{:x}", v.bits()),
    };
}

/// Appends `{"value": …, "bits": "0x…", "flags": [...]}` (no newline).
pub fn write_json(outcome: &Outcome, out: &mut String) {
    out.push_str("{\"value\": ");
    write_value(out, outcome.value, true);
    out.push_str(", \"bits\": \"");
    write_bits(out, outcome.value);
    out.push_str("\", \"flags\": [");
    for (i, name) in outcome.flags.names().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push('"');
        out.push_str(name);
        out.push('"');
    }
    out.push_str("]}");
}

/// Appends `value  type:bits  flags: NAMES` (or `flags: none`; no newline).
pub fn write_human(outcome: &Outcome, out: &mut String) {
    write_value(out, outcome.value, false);
    out.push_str("  ");
    out.push_str(outcome.value.ty().name());
    out.push(':');
    write_bits(out, outcome.value);
    out.push_str("  flags: ");
    if outcome.flags == FpSts::empty() {
        out.push_str("none");
    }
    for (i, name) in outcome.flags.names().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(name);
    }
}

/// Appends `{"line": N, "column": C, "error": "…"}` for a malformed expression on `line`
/// (1-based; no newline).
pub fn write_error_json(line: usize, error: &ExprError, out: &mut String) {
    let _ = write!(
        out,
        "{{\"line\": {line}, \"column\": {}, \"error\": \"",
        error.column
    );
    let message = error.kind.to_string();
    for c in message.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push_str("\"}");
}

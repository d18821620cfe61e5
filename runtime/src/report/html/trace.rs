//! The Execution Trace view: the report's `execution` section (one run's steps per IPU, see
//! `ipusim_exe::timeline`) drawn as PopVision draws its BSP trace — per IPU a lane of the
//! program steps in time coloured by kind (compute, exchange, sync, stream copy), and under
//! it one row per group of tiles shaded by how busy those tiles were computing — with the
//! figures in tables: cycles per IPU by kind and idle, and each IPU's longest steps.
//!
//! The picture is binned into [`COLUMNS`] columns of equal cycles; adjacent cells of one
//! shade are drawn as one rectangle, so the SVG stays small whatever the step count.

use super::cells::{at, cell, esc, group, row, u};
use serde_json::Value;
use std::fmt::Write;

/// Columns of the picture (its width in pixels). Our choice.
const COLUMNS: usize = 800;
/// Height of the steps lane and of one tile-group row, in pixels. Our choice.
const LANE_PX: usize = 14;
const ROW_PX: usize = 5;
/// Costliest steps listed per IPU. Our choice.
const LONGEST: usize = 12;

/// The step kinds, their colours and their cycle field in `execution.ipus[i]`.
const KINDS: [(&str, &str, &str); 4] = [
    ("Execute", "#2a5db0", "execute_cycles"),
    ("Exchange", "#e08a1e", "exchange_cycles"),
    ("Sync", "#8c8c8c", "sync_cycles"),
    ("StreamCopy", "#2f9a48", "stream_copy_cycles"),
];

/// The view's HTML.
pub(in crate::report::html) fn view(r: &Value) -> String {
    let e = &r["execution"];
    if !e.is_object() {
        return "<p>This report has no execution trace. <code>ipusim compile --html</code> and \
                <code>ipusim run --html</code> add one (or <code>--execution-trace</code> with \
                <code>--json</code>): the static walk of one run on <code>compile</code>, the \
                simulator's recorded first run on <code>run</code>.</p>\n"
            .into();
    }
    let mut s = String::from("<table>\n");
    for (label, path) in [
        ("source", "execution.source"),
        ("cycles of the run", "execution.total_cycles"),
        ("program steps of the run", "execution.steps"),
        ("steps shown", "execution.shown_steps"),
        ("cycles shown", "execution.shown_cycles"),
        ("tiles per IPU", "execution.tiles_per_ipu"),
        ("tile groups (rows)", "execution.tile_groups"),
    ] {
        s += &row(label, r, path);
    }
    s += "</table>\n";
    let (shown, steps) = (u(r, "execution.shown_steps"), u(r, "execution.steps"));
    if shown < steps {
        let _ = writeln!(
            s,
            "<p>The first {} of the run's {} steps are shown ({} of {} cycles).</p>",
            group(shown),
            group(steps),
            group(u(r, "execution.shown_cycles")),
            group(u(r, "execution.total_cycles"))
        );
    }
    s += "<p>Legend: ";
    for (kind, colour, _) in KINDS {
        let _ = write!(
            s,
            "<span class=\"bar\" style=\"width:1em;background:{colour}\"></span> {kind} &nbsp; "
        );
    }
    s += "white: idle (waiting for another IPU or for a step not on this IPU). Under each \
          lane, one row per group of tiles: the darker, the larger the share of its tiles' \
          cycles spent computing.</p>\n";
    s += "<h3>Cycles per IPU</h3>\n<table><tr><th>IPU</th>";
    for (kind, _, _) in KINDS {
        let _ = write!(s, "<th>{kind}</th>");
    }
    s += "<th>idle</th></tr>\n";
    let ipus = e["ipus"].as_array().map_or(&[][..], Vec::as_slice);
    for i in 0..ipus.len() {
        s += "<tr>";
        let path = format!("execution.ipus.{i}.ipu");
        s += &cell(r, &path, &path);
        for f in KINDS
            .iter()
            .map(|k| k.2)
            .chain(std::iter::once("idle_cycles"))
        {
            let path = format!("execution.ipus.{i}.{f}");
            s += &cell(r, &path, &path);
        }
        s += "</tr>\n";
    }
    s += "</table>\n";
    let span = u(r, "execution.shown_cycles");
    let groups = u(r, "execution.tile_groups").max(1) as usize;
    for (i, lane) in ipus.iter().enumerate() {
        let _ = writeln!(s, "<h3>IPU {}</h3>", u(lane, "ipu"));
        s += &picture(lane, i, span, groups);
        s += &longest(r, lane, i);
    }
    s
}

/// Cycles per column and kind, and computing tile-cycles per column and tile group (as a
/// fraction of the group's tiles), of one IPU's slices.
struct Binned {
    kinds: Vec<[f64; 4]>,
    busy: Vec<Vec<f64>>,
    width: f64,
}

fn bin(lane: &Value, span: u64, groups: usize) -> Binned {
    let width = span as f64 / COLUMNS as f64;
    let mut b = Binned {
        kinds: vec![[0.0; 4]; COLUMNS],
        busy: vec![vec![0.0; COLUMNS]; groups],
        width,
    };
    for sl in lane["slices"].as_array().into_iter().flatten() {
        let kind = KINDS
            .iter()
            .position(|k| sl["kind"].as_str() == Some(k.0))
            .unwrap_or(3);
        let s0 = u(sl, "start") as f64;
        let s1 = s0 + u(sl, "cycles") as f64;
        let busy: Vec<f64> = sl["busy"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|x| x.as_f64().unwrap_or(0.0) / 1000.0)
            .collect();
        let c0 = ((s0 / width) as usize).min(COLUMNS);
        let c1 = ((s1 / width).ceil() as usize).min(COLUMNS);
        for c in c0..c1 {
            let lo = s0.max(c as f64 * width);
            let hi = s1.min((c + 1) as f64 * width);
            if hi <= lo {
                continue;
            }
            b.kinds[c][kind] += hi - lo;
            for (g, f) in busy.iter().enumerate().take(groups) {
                b.busy[g][c] += (hi - lo) * f;
            }
        }
    }
    b
}

/// A shade: a colour and an opacity in tenths (0: nothing drawn).
type Shade = (&'static str, u8);

fn tenths(fraction: f64) -> u8 {
    if fraction <= 0.0 {
        0
    } else {
        ((fraction * 10.0).round() as u8).clamp(1, 10)
    }
}

/// Draws `cells` (one shade per column) in the row at `y` of height `h`: a rectangle per
/// run of equal cells, the rectangles of one shade in one `<path>`, so the page stays small
/// (a trace of thousands of short steps changes shade at almost every column).
fn strip(s: &mut String, cells: &[Shade], y: usize, h: usize) {
    let mut paths: Vec<(Shade, String)> = Vec::new();
    let mut c = 0;
    while c < cells.len() {
        let shade = cells[c];
        let mut end = c + 1;
        while end < cells.len() && cells[end] == shade {
            end += 1;
        }
        if shade.1 > 0 {
            let at = match paths.iter().position(|(sh, _)| *sh == shade) {
                Some(i) => i,
                None => {
                    paths.push((shade, String::new()));
                    paths.len() - 1
                }
            };
            let w = end - c;
            let _ = write!(paths[at].1, "M{c} {y}h{w}v{h}h-{w}z");
        }
        c = end;
    }
    for ((colour, tenths), d) in paths {
        let _ = writeln!(
            s,
            "<path d=\"{d}\" fill=\"{colour}\" fill-opacity=\"{:.1}\"/>",
            f64::from(tenths) / 10.0
        );
    }
}

fn picture(lane: &Value, index: usize, span: u64, groups: usize) -> String {
    if span == 0 {
        return "<p>No steps.</p>\n".into();
    }
    let b = bin(lane, span, groups);
    let height = LANE_PX + 2 + groups * ROW_PX + 16;
    let mut s = format!(
        "<svg class=\"bsp\" id=\"bsp-{index}\" data-columns=\"{COLUMNS}\" data-groups=\"{groups}\" width=\"{COLUMNS}\" height=\"{height}\" xmlns=\"http://www.w3.org/2000/svg\">\n<title>IPU {}: cycles 0–{} in {COLUMNS} columns of {} cycles; top: the steps; below: {groups} groups of tiles</title>\n",
        u(lane, "ipu"),
        group(span),
        group(span.div_ceil(COLUMNS as u64))
    );
    // The steps lane: each column in the colour of the kind that took most of it.
    let lane_cells: Vec<Shade> = b
        .kinds
        .iter()
        .map(|k| {
            let (i, most) = k
                .iter()
                .enumerate()
                .fold((0, 0.0), |m, (i, &v)| if v > m.1 { (i, v) } else { m });
            let used: f64 = k.iter().sum();
            (
                KINDS[i].1,
                if most > 0.0 {
                    tenths(used / b.width)
                } else {
                    0
                },
            )
        })
        .collect();
    strip(&mut s, &lane_cells, 0, LANE_PX);
    // The tile groups: computing share, or the other kind that took most of the column.
    for (g, busy) in b.busy.iter().enumerate() {
        let cells: Vec<Shade> = (0..COLUMNS)
            .map(|c| {
                let compute = busy[c] / b.width;
                let k = &b.kinds[c];
                let (i, other) =
                    (1..4).fold((1, 0.0), |m, i| if k[i] > m.1 { (i, k[i]) } else { m });
                let other = other / b.width;
                if compute > 0.0 && compute >= other {
                    (KINDS[0].1, tenths(compute))
                } else {
                    (KINDS[i].1, tenths(other))
                }
            })
            .collect();
        let y = LANE_PX + 2 + g * ROW_PX;
        strip(&mut s, &cells, y, ROW_PX);
    }
    // The cycle axis.
    let y = height - 3;
    for t in 0..=4u64 {
        let x = (t as usize * COLUMNS / 4).min(COLUMNS - 1);
        let anchor = match t {
            0 => "start",
            4 => "end",
            _ => "middle",
        };
        let _ = writeln!(
            s,
            "<text x=\"{x}\" y=\"{y}\" font-size=\"10\" text-anchor=\"{anchor}\">{}</text>",
            group(span * t / 4)
        );
    }
    s + "</svg>\n"
}

/// The IPU's costliest steps over the span shown: each compute set, exchange, sync or
/// stream once (a loop repeats them), with how often it ran, its first run's figures and
/// its total cycles, by total cycles.
fn longest(r: &Value, lane: &Value, i: usize) -> String {
    let slices = lane["slices"].as_array().map_or(&[][..], Vec::as_slice);
    // (first index, times, total cycles) per (kind, name), in order of first appearance.
    let mut seen: std::collections::HashMap<(&str, &str), usize> = Default::default();
    let mut steps: Vec<(usize, u64, u64)> = Vec::new();
    for (k, sl) in slices.iter().enumerate() {
        let key = (
            sl["kind"].as_str().unwrap_or(""),
            sl["name"].as_str().unwrap_or(""),
        );
        let at = *seen.entry(key).or_insert_with(|| {
            steps.push((k, 0, 0));
            steps.len() - 1
        });
        steps[at].1 += 1;
        steps[at].2 = steps[at].2.saturating_add(u(sl, "cycles"));
    }
    steps.sort_by_key(|&(k, _, total)| (std::cmp::Reverse(total), k));
    steps.truncate(LONGEST);
    let mut s = String::from(
        "<table><tr><th>first step</th><th class=\"name\">kind</th><th class=\"name\">name</th><th>start cycle</th><th>cycles</th><th>tiles</th><th>times</th><th>total cycles</th></tr>\n",
    );
    for (k, times, total) in steps {
        let p = format!("execution.ipus.{i}.slices.{k}");
        let tiles = if at(r, &format!("{p}.tiles")).is_null() {
            "<td>—</td>".to_string()
        } else {
            cell(r, &format!("{p}.tiles"), &format!("{p}.tiles"))
        };
        let _ = writeln!(
            s,
            "<tr><td>{k}</td><td class=\"name\">{}</td><td class=\"name\">{}</td>{}{}{tiles}<td>{}</td><td>{}</td></tr>",
            esc(slices[k]["kind"].as_str().unwrap_or("")),
            esc(slices[k]["name"].as_str().unwrap_or("")),
            cell(r, &format!("{p}.start"), &format!("{p}.start")),
            cell(r, &format!("{p}.cycles"), &format!("{p}.cycles")),
            group(times),
            group(total),
        );
    }
    s + "</table>\n"
}

//! The HTML report: one self-contained file (inline CSS, SVG and a few lines of script; no
//! network) with PopVision Graph Analyser's views of a compile or run report —
//!
//! - **Summary**: program, target, precision, total cycles and time, the cycle categories,
//!   the batch arithmetic, and per IPU the tile balance, StreamCopy Rx/Tx and memory used
//!   and free;
//! - **Memory**: totals, the categories, a map of every tile coloured by its bytes (tiles over
//!   capacity in red), the fullest tiles, their largest tensors and what is live at their
//!   temporaries' top;
//! - **Liveness**: bytes live at each program step against the always-live bytes;
//! - **Operations**: cycles per layer (compute sets grouped by the node they lower), the
//!   costliest compute sets, and every convolution pass with its vertex, partition, cycles,
//!   FLOPs and achieved fraction of the AMP peak;
//! - **Program Tree**: the executable's steps, nested, with each compute set's and
//!   exchange's cycles;
//! - **Execution Trace**: one run's steps per IPU in time (BSP: compute, exchange, sync,
//!   stream copy) with each tile group's busy share, from the report's `execution` section
//!   ([`trace`]);
//! - **Compare**, given two reports: the headline figures side by side with their deltas.
//!
//! It reads the JSON of `ipusim compile --json` or `ipusim run --json` (a run's `report`), so
//! its figures are the JSON's: every figure a test or a script may check is in an element
//! with `data-field="PATH"` and its exact value in `data-value`.

use cells::{at, cell, esc, group, row, text, u};
use serde_json::Value;
use std::fmt::Write;

mod cells;
mod trace;

/// The HTML page of `reports` (`(name, report)`; a second report adds the Compare view).
pub fn html(reports: &[(String, Value)]) -> String {
    let Some((name, r)) = reports.first() else {
        return page("ipusim report", "<p>No report.</p>", &[]);
    };
    let mut views: Vec<(&str, String)> = vec![
        ("Summary", summary(name, r)),
        ("Memory", memory(r)),
        ("Liveness", liveness(r)),
        ("Operations", operations(r)),
        ("Program Tree", program_tree(r)),
        ("Execution Trace", trace::view(r)),
    ];
    if let Some((other, b)) = reports.get(1) {
        views.push(("Compare", compare(name, r, other, b)));
    }
    let title = format!("ipusim report: {}", text(r, "program"));
    page(&title, "", &views)
}

fn page(title: &str, body: &str, views: &[(&str, String)]) -> String {
    let mut s = String::with_capacity(1 << 16);
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n<style>{CSS}</style></head><body>\n<h1>{}</h1>\n<nav>",
        esc(title),
        esc(title)
    );
    for (i, (v, _)) in views.iter().enumerate() {
        let _ = write!(
            s,
            "<button data-view=\"{}\"{}>{v}</button>",
            slug(v),
            if i == 0 { " class=\"on\"" } else { "" }
        );
    }
    s += "</nav>\n";
    s += body;
    for (i, (v, content)) in views.iter().enumerate() {
        let _ = write!(
            s,
            "<section id=\"{}\" class=\"view\"{}>\n<h2>{v}</h2>\n{content}</section>\n",
            slug(v),
            if i == 0 { "" } else { " hidden" }
        );
    }
    s += "<script>";
    s += SCRIPT;
    s += "</script>\n</body></html>\n";
    s
}

const CSS: &str = "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}h1{font-size:1.3em}\
nav button{font:inherit;margin-right:.3em;padding:.3em .8em;border:1px solid #888;background:#f4f4f4;cursor:pointer}\
nav button.on{background:#2a5db0;color:#fff}table{border-collapse:collapse;margin:.6em 0}\
td,th{border:1px solid #ccc;padding:.2em .6em;text-align:right}th{background:#eee}\
td.name,th.name{text-align:left;font-family:monospace}.bar{display:inline-block;height:.8em;background:#2a5db0}\
.oom{color:#b00;font-weight:bold}svg{border:1px solid #ccc;background:#fff}\
.tree{font-family:monospace}.tree details,.tree div{margin-left:1.2em}.tree summary{cursor:pointer}";

const SCRIPT: &str = "function show(id){document.querySelectorAll('nav button').forEach(function(x){x.classList.toggle('on',x.dataset.view===id)});\
document.querySelectorAll('section.view').forEach(function(v){v.hidden=v.id!==id});}\
document.querySelectorAll('nav button').forEach(function(b){b.addEventListener('click',function(){show(b.dataset.view);history.replaceState(null,'','#'+b.dataset.view);});});\
if(location.hash&&document.getElementById(location.hash.slice(1))){show(location.hash.slice(1));window.scrollTo(0,0);}";

/// A view's id: its name in lower case, spaces as hyphens (`program-tree`).
fn slug(view: &str) -> String {
    view.to_lowercase().replace(' ', "-")
}

fn summary(name: &str, r: &Value) -> String {
    let mut s = format!("<p>Report <code>{}</code>.</p>\n<table>\n", esc(name));
    for (label, path) in [
        ("program", "program"),
        ("target", "target.name"),
        ("tiles per IPU", "target.tiles"),
        ("precision", "precision"),
        ("total cycles", "total_cycles"),
        ("seconds at the target clock", "seconds"),
        ("tile balance", "tile_balance"),
        ("vertices", "vertices"),
        ("gradient accumulation", "gradient_accumulation"),
        ("device iterations", "device_iterations"),
        ("global batch", "batch.global_batch"),
        ("samples per run", "batch.samples_per_run"),
    ] {
        s += &row(label, r, path);
    }
    s += "</table>\n<h3>Cycles by category</h3>\n<table><tr><th class=\"name\">category</th><th>cycles</th><th>share</th></tr>\n";
    let total = u(r, "total_cycles").max(1) as f64;
    if let Some(cats) = r["categories"].as_object() {
        for (k, v) in cats {
            let c = v.as_u64().unwrap_or(0);
            let pct = 100.0 * c as f64 / total;
            let _ = writeln!(
                s,
                "<tr><td class=\"name\">{}</td>{}<td><span class=\"bar\" style=\"width:{:.0}px\"></span> {pct:.1}%</td></tr>",
                esc(k),
                cell(r, &format!("categories.{k}"), &format!("categories.{k}")),
                pct * 2.0
            );
        }
    }
    s += "</table>\n<h3>IPUs</h3>\n<table><tr><th>IPU</th><th>used tiles</th><th>tile balance</th><th>StreamCopy Rx (bytes)</th><th>StreamCopy Tx (bytes)</th><th>memory used</th><th>memory free</th><th>max tile</th><th>OOM tiles</th><th>execute cycles</th><th>exchange cycles</th></tr>\n";
    for (i, _) in r["ipus"].as_array().into_iter().flatten().enumerate() {
        s += "<tr>";
        for f in [
            "ipu",
            "used_tiles",
            "tile_balance",
            "stream_bytes_host_to_device",
            "stream_bytes_device_to_host",
            "memory_bytes",
            "free_bytes",
            "max_tile_bytes",
            "oom_tiles",
            "execute_cycles",
            "exchange_cycles",
        ] {
            let path = format!("ipus.{i}.{f}");
            s += &cell(r, &path, &path);
        }
        s += "</tr>\n";
    }
    s + "</table>\n"
}

fn memory(r: &Value) -> String {
    let m = &r["memory"];
    let mut s = String::from("<table>\n");
    for (label, path) in [
        (
            "bytes per tile (capacity)",
            "memory.bytes_per_tile_capacity",
        ),
        ("fullest tile (bytes)", "memory.max_tile_bytes"),
        ("total (bytes)", "memory.total_bytes"),
        ("always live (bytes)", "memory.always_live_bytes"),
        ("peak live (bytes)", "memory.peak_live_bytes"),
        ("out of memory", "memory.oom"),
    ] {
        s += &row(label, r, path);
    }
    s += "</table>\n";
    if m["oom"].as_bool() == Some(true) {
        let n = m["oom_tiles"].as_array().map_or(0, Vec::len);
        let _ = writeln!(s, "<p class=\"oom\">Out of memory on {n} tiles.</p>");
    }
    s += "<h3>Categories</h3>\n<table><tr><th class=\"name\">category</th><th>bytes</th></tr>\n";
    if let Some(cats) = m["categories"].as_object() {
        for k in cats.keys() {
            let path = format!("memory.categories.{k}");
            let _ = writeln!(
                s,
                "<tr><td class=\"name\">{}</td>{}</tr>",
                esc(k),
                cell(r, &path, &path)
            );
        }
    }
    s += "</table>\n<h3>Tile map</h3>\n";
    s += &tile_map(m);
    s += "<h3>Fullest tiles</h3>\n<table><tr><th>tile</th><th>bytes</th><th class=\"name\">largest tensors</th><th class=\"name\">temporaries' top at step</th><th>live there (bytes)</th><th class=\"name\">largest live there</th></tr>\n";
    for (i, w) in m["worst_tiles"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let list = |v: &Value| -> String {
            v.as_array()
                .into_iter()
                .flatten()
                .map(|t| format!("{} ({} B)", esc(&text(t, "name")), group(u(t, "bytes"))))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let p = &w["peak"];
        let peak = if p.is_object() {
            format!(
                "<td class=\"name\">{} ({})</td>{}<td class=\"name\">{}</td>",
                u(p, "step"),
                esc(&text(p, "name")),
                cell(
                    r,
                    &format!("memory.worst_tiles.{i}.peak.live_bytes"),
                    &format!("memory.worst_tiles.{i}.peak.live_bytes")
                ),
                list(&p["live"])
            )
        } else {
            "<td></td><td></td><td></td>".to_string()
        };
        let _ = writeln!(
            s,
            "<tr>{}{}<td class=\"name\">{}</td>{}</tr>",
            cell(
                r,
                &format!("memory.worst_tiles.{i}.tile"),
                &format!("memory.worst_tiles.{i}.tile")
            ),
            cell(
                r,
                &format!("memory.worst_tiles.{i}.bytes"),
                &format!("memory.worst_tiles.{i}.bytes")
            ),
            list(&w["largest"]),
            peak
        );
    }
    s + "</table>\n"
}

/// Every tile as a cell of a grid, coloured from white (empty) to blue (full), red over
/// capacity; hovering names the tile and its bytes.
fn tile_map(m: &Value) -> String {
    let tiles: Vec<u64> = m["tiles"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .collect();
    if tiles.is_empty() {
        return "<p>This report has no per-tile memory (written by an older ipusim).</p>\n".into();
    }
    let cap = m["bytes_per_tile_capacity"].as_u64().unwrap_or(1).max(1);
    let real = tiles.iter().copied().max().unwrap_or(0);
    let fullest = real.clamp(1, cap);
    let cols = 64usize;
    let rows = tiles.len().div_ceil(cols);
    let px = 9usize;
    let mut s = format!(
        "<p>Colour: a tile's bytes against the fullest tile's ({} bytes, {:.1}% of the {} bytes of a tile); red: over capacity. Hover a tile for its bytes.</p>\n",
        group(real),
        100.0 * real as f64 / cap as f64,
        group(cap)
    );
    let _ = writeln!(
        s,
        "<svg id=\"tile-map\" data-tiles=\"{}\" width=\"{}\" height=\"{}\" xmlns=\"http://www.w3.org/2000/svg\">",
        tiles.len(),
        cols * px,
        rows * px
    );
    for (i, &b) in tiles.iter().enumerate() {
        let fill = if b > cap {
            "#d00000".to_string()
        } else {
            let f = b as f64 / fullest as f64;
            let c = (255.0 * (1.0 - f)) as u8;
            format!("rgb({c},{},255)", (255.0 * (1.0 - 0.6 * f)) as u8)
        };
        let _ = writeln!(
            s,
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{fill}\"><title>tile {i}: {} bytes</title></rect>",
            (i % cols) * px,
            (i / cols) * px,
            px - 1,
            px - 1,
            group(b)
        );
    }
    s + "</svg>\n"
}

fn liveness(r: &Value) -> String {
    let live: Vec<u64> = r["memory"]["liveness"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .collect();
    if live.is_empty() {
        return "<p>This report has no liveness (written by an older ipusim).</p>\n".into();
    }
    let always = u(r, "memory.always_live_bytes");
    let peak = live.iter().copied().max().unwrap_or(0);
    let top = ((peak + always) as f64 * 1.05).max(1.0);
    let (w, h) = (900.0, 300.0);
    let x = |i: usize| 40.0 + (w - 50.0) * i as f64 / (live.len().max(2) - 1) as f64;
    let y = |b: u64| h - 20.0 - (h - 40.0) * b as f64 / top;
    let points: Vec<String> = live
        .iter()
        .enumerate()
        .map(|(i, &b)| format!("{:.1},{:.1}", x(i), y(b + always)))
        .collect();
    let mut s = format!(
        "<p>Bytes live at each of {} program steps: the always-live bytes (dashed) plus those live at the step (peak of these <span data-field=\"memory.peak_live_bytes\" data-value=\"{peak}\">{}</span> bytes); always-live bytes: {}.</p>\n",
        live.len(),
        group(peak),
        group(always)
    );
    let _ = writeln!(
        s,
        "<svg id=\"liveness\" data-steps=\"{}\" width=\"{w}\" height=\"{h}\" xmlns=\"http://www.w3.org/2000/svg\">\
<polyline fill=\"none\" stroke=\"#2a5db0\" stroke-width=\"1.5\" points=\"{}\"/>\
<line x1=\"40\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#b00\" stroke-dasharray=\"4\"><title>always live: {} bytes</title></line>\
<text x=\"4\" y=\"14\" font-size=\"11\">{} B</text><text x=\"4\" y=\"{}\" font-size=\"11\">0</text>\
<text x=\"{}\" y=\"{}\" font-size=\"11\">program step</text></svg>",
        live.len(),
        points.join(" "),
        w - 10.0,
        y(always),
        y(always),
        group(always),
        group(top as u64),
        h - 22.0,
        w / 2.0,
        h - 4.0
    );
    s
}

fn operations(r: &Value) -> String {
    let sets: Vec<&Value> = r["compute_sets"].as_array().into_iter().flatten().collect();
    // Layers: compute sets grouped by the node they lower (the name before the last `/`
    // part a lowering adds), in order of cycles.
    let mut layers: Vec<(String, u64, usize)> = Vec::new();
    for c in &sets {
        let name = text(c, "name");
        let layer = name.split('/').next().unwrap_or("").to_string();
        let layer = if layer == "bwd" || layer == "update" || layer == "recompute" {
            name.splitn(3, '/').take(2).collect::<Vec<_>>().join("/")
        } else {
            layer
        };
        match layers.iter_mut().find(|l| l.0 == layer) {
            Some(l) => {
                l.1 += u(c, "cycles");
                l.2 += 1;
            }
            None => layers.push((layer, u(c, "cycles"), 1)),
        }
    }
    layers.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let total = u(r, "total_cycles").max(1) as f64;
    let mut s = format!(
        "<p>{} compute sets; {} convolution FLOPs per step.</p>\n<h3>Layers by cycles (top 40)</h3>\n<table><tr><th class=\"name\">layer</th><th>compute sets</th><th>cycles</th><th>share</th></tr>\n",
        sets.len(),
        group(u(r, "convolution_flops"))
    );
    for (name, cycles, n) in layers.iter().take(40) {
        let _ = writeln!(
            s,
            "<tr><td class=\"name\">{}</td><td>{n}</td><td>{}</td><td>{:.1}%</td></tr>",
            esc(name),
            group(*cycles),
            100.0 * *cycles as f64 / total
        );
    }
    s += "</table>\n<h3>Costliest compute sets (top 40)</h3>\n<table><tr><th class=\"name\">compute set</th><th>cycles</th><th>tiles</th><th>executions</th></tr>\n";
    let mut order: Vec<usize> = (0..sets.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(u(sets[i], "cycles")));
    for &i in order.iter().take(40) {
        let p = |f: &str| format!("compute_sets.{i}.{f}");
        let _ = writeln!(
            s,
            "<tr><td class=\"name\">{}</td>{}{}{}</tr>",
            esc(&text(sets[i], "name")),
            cell(r, &p("cycles"), &p("cycles")),
            cell(r, &p("tiles_used"), &p("tiles_used")),
            cell(r, &p("executions"), &p("executions"))
        );
    }
    s += "</table>\n<h3>Convolutions</h3>\n<table><tr><th class=\"name\">layer</th><th class=\"name\">pass</th><th class=\"name\">vertex</th><th class=\"name\">partition</th><th>tiles</th><th>cycles</th><th>FLOPs</th><th>of AMP peak</th></tr>\n";
    for (i, c) in r["convolutions"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let p = |f: &str| format!("convolutions.{i}.{f}");
        let _ = writeln!(
            s,
            "<tr><td class=\"name\">{}</td><td class=\"name\">{}</td><td class=\"name\">{}</td><td class=\"name\">{}</td>{}{}{}<td>{:.1}%</td></tr>",
            esc(&text(c, "name")),
            esc(&text(c, "pass")),
            esc(&text(c, "vertex")),
            esc(&match c["serial_split"].as_u64() {
                Some(k) if k > 1 => format!("{} in {k} serial phases", c["partition"]),
                _ => c["partition"].to_string(),
            }),
            cell(r, &p("tiles"), &p("tiles")),
            cell(r, &p("cycles"), &p("cycles")),
            cell(r, &p("flops"), &p("flops")),
            100.0 * c["amp_fraction"].as_f64().unwrap_or(0.0)
        );
    }
    s + "</table>\n"
}

fn program_tree(r: &Value) -> String {
    let t = &r["program_tree"];
    if t.is_null() {
        return "<p>This report has no program tree (written by an older ipusim).</p>\n".into();
    }
    let mut s = String::from(
        "<p>The program's steps as they run: sequences, repeats with their iteration counts, compute sets and exchanges with their cycles per execution, stream copies and syncs. Click a line to open or close it.</p>\n<div class=\"tree\">\n",
    );
    tree_node(&mut s, t, "program_tree", 0);
    s + "</div>\n"
}

fn tree_node(s: &mut String, v: &Value, path: &str, depth: usize) {
    let kind = text(v, "kind");
    let children = v["children"].as_array().map_or(&[][..], Vec::as_slice);
    let mut label = match kind.as_str() {
        "Repeat" => format!("Repeat ×{}", group(u(v, "count"))),
        "Sequence" if children.len() == 1 => "Sequence (1 step)".to_string(),
        "Sequence" => format!("Sequence ({} steps)", children.len()),
        _ => format!("{} <b>{}</b>", esc(&kind), esc(&text(v, "name"))),
    };
    if u(v, "cycles") > 0 {
        let _ = write!(
            label,
            ": <span data-field=\"{path}.cycles\" data-value=\"{}\">{}</span> cycles",
            u(v, "cycles"),
            group(u(v, "cycles"))
        );
    }
    if children.is_empty() {
        let _ = writeln!(s, "<div>{label}</div>");
        return;
    }
    let _ = writeln!(
        s,
        "<details{}><summary>{label}</summary>",
        if depth < 4 { " open" } else { "" }
    );
    for (i, c) in children.iter().enumerate() {
        tree_node(s, c, &format!("{path}.children.{i}"), depth + 1);
    }
    s.push_str("</details>\n");
}

fn compare(an: &str, a: &Value, bn: &str, b: &Value) -> String {
    let mut s = format!(
        "<table><tr><th class=\"name\">figure</th><th class=\"name\">A: {}</th><th class=\"name\">B: {}</th><th>B − A</th><th>change</th></tr>\n",
        esc(an),
        esc(bn)
    );
    for path in [
        "total_cycles",
        "categories.OnTileExecute",
        "categories.DoExchange",
        "categories.Sync",
        "categories.StreamCopy",
        "memory.total_bytes",
        "memory.max_tile_bytes",
        "memory.peak_live_bytes",
        "vertices",
        "exchange_bytes",
        "stream_bytes_host_to_device",
        "stream_bytes_device_to_host",
        "batch.global_batch",
    ] {
        let (x, y) = (at(a, path).as_f64(), at(b, path).as_f64());
        let (delta, change) = match (x, y) {
            (Some(x), Some(y)) => (
                format!("{:+}", y - x),
                if x != 0.0 {
                    format!("{:+.1}%", 100.0 * (y - x) / x)
                } else {
                    "—".into()
                },
            ),
            _ => ("—".into(), "—".into()),
        };
        let _ = writeln!(
            s,
            "<tr><th class=\"name\">{path}</th>{}{}<td>{delta}</td><td>{change}</td></tr>",
            cell(a, path, &format!("a.{path}")),
            cell(b, path, &format!("b.{path}"))
        );
    }
    s + "</table>\n"
}

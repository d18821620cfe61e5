//! The readable run report: the compile report (the static cycle report of one run), then
//! what the runs executed and the host I/O, with units in every header.

use super::{human_bytes, RunReport};
use ipusim_compiler::report::group;
use std::fmt::Write;

pub(super) fn render(r: &RunReport) -> String {
    let mut s = r.compile.to_text();
    let c = &r.compile;
    let _ = writeln!(s, "\nRuns");
    let per_step = if c.gradient_accumulation > 1 {
        format!(" of {} micro-batches", c.gradient_accumulation)
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "{} run{} ({}): {} step{}{per_step}, {} micro-batches; seed {}, SR {}, nanoo {}, \
         exceptions {}",
        r.runs,
        plural(r.runs),
        r.mode,
        r.steps,
        plural(r.steps),
        r.micro_batches,
        r.seed,
        r.fp.sr,
        if r.fp.nanoo { "on" } else { "off" },
        if r.fp.exceptions.is_empty() {
            "none".to_string()
        } else {
            r.fp.exceptions.join(",")
        }
    );
    let e = &r.executed;
    let clock = c.target.clock_hz as f64;
    let static_total = c.total_cycles.saturating_mul(r.runs);
    let agreement = if e.total_cycles == static_total {
        "equal to the static estimate".to_string()
    } else {
        format!("static estimate {} cycles", group(static_total))
    };
    let _ = writeln!(
        s,
        "Executed: {} cycles ({:.3} ms at {:.3} GHz), {agreement}; host time {:.2} s",
        group(e.total_cycles),
        e.seconds * 1e3,
        clock / 1e9,
        r.wall_seconds
    );
    let total = e.total_cycles.max(1) as f64;
    let _ = writeln!(
        s,
        "{:<16} {:>18} {:>9}",
        "Category", "cycles (all runs)", "share (%)"
    );
    let k = &e.categories;
    for (name, v) in [
        ("OnTileExecute", k.on_tile_execute),
        ("DoExchange", k.do_exchange),
        ("Sync", k.sync),
        ("StreamCopy", k.stream_copy),
    ] {
        let _ = writeln!(
            s,
            "{:<16} {:>18} {:>9.2}",
            name,
            group(v),
            100.0 * v as f64 / total
        );
    }
    let raised: Vec<&str> = [
        ("OFLO", r.flags.oflo),
        ("DIV0", r.flags.div0),
        ("INV", r.flags.inv),
    ]
    .into_iter()
    .filter(|(_, on)| *on)
    .map(|(n, _)| n)
    .collect();
    let _ = writeln!(
        s,
        "Flags raised: {}",
        if raised.is_empty() {
            "none".to_string()
        } else {
            raised.join(", ")
        }
    );
    let io = &r.host_io;
    let _ = writeln!(
        s,
        "\nHost I/O per run (StreamCopy Rx/Tx; prefetch depth {}, host link {:.1} GB/s)",
        io.prefetch_depth,
        io.host_link_bytes_per_second as f64 / 1e9
    );
    let _ = writeln!(s, "{:<4} {:>16} {:>16}", "IPU", "Rx", "Tx");
    for ipu in &io.ipus {
        let _ = writeln!(
            s,
            "{:<4} {:>16} {:>16}",
            ipu.ipu,
            human_bytes(ipu.rx),
            human_bytes(ipu.tx)
        );
    }
    let _ = writeln!(
        s,
        "{:<20} {:<3} {:<18} {:>14} {:>11} {:>14} {:>14}",
        "stream", "dir", "type", "bytes/copy", "copies/run", "bytes/run", "cycles/run"
    );
    for st in &io.streams {
        let shape = st
            .shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            s,
            "{:<20} {:<3} {:<18} {:>14} {:>11} {:>14} {:>14}",
            st.name,
            st.direction,
            format!("{}[{shape}]", st.dtype),
            group(st.bytes_per_micro_batch),
            st.copies_per_run,
            group(st.bytes_per_run),
            group(st.cycles_per_run)
        );
    }
    for f in &r.infeeds {
        let _ = writeln!(s, "infeed {:<20} from {}", f.stream, f.source);
    }
    for o in &r.outfeeds {
        let _ = writeln!(
            s,
            "outfeed {:<19} mode {}, {} entries sent",
            o.stream, o.mode, o.entries
        );
    }
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    s
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

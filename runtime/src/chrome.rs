//! Export of an engine trace to the Chrome trace-event format (JSON), which Perfetto
//! (ui.perfetto.dev) and `chrome://tracing` open.
//!
//! Layout: one process per IPU (`IPU 0 (mk2)`, `IPU 1 (mk2)`, ...), and in each one track
//! (thread) per PopVision category — `OnTileExecute`, `DoExchange`, `Sync`, `StreamCopy` —
//! plus a `Program` track on top with the runs and the `Repeat` iterations as nested slices.
//! Every program step the engine executed is one complete slice (`"ph": "X"`) on its
//! category's track of its IPU ([`TraceIpus`]: a compute set on the IPUs of its tiles, an
//! exchange on the IPUs it writes to, a stream on the IPU of its buffer; a sync on every IPU),
//! named after its compute set, exchange or stream, from its start cycle for its cycles; its
//! arguments give the cycles, tiles, bytes. Flags raised and a trapped exception are instant
//! events on the `OnTileExecute` track of the tile's IPU.
//!
//! Time: the trace format counts microseconds; a cycle is `1e6 / clock_hz` µs at the
//! target's tile clock (mk2: 1.325 GHz, so 1,325 cycles = 1 µs). Fractional microseconds are
//! kept, so slices of a few cycles keep their order and length.

use crate::atomic::{write_atomically, WriteError};
use ipusim_compiler::executable::Executable;
use ipusim_compiler::executable::StreamDirection;
use ipusim_sim::trace::{Control, Event, Trace};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;

/// Where the traced executable's steps run: the IPUs each exchange writes to and the IPU of
/// each stream's buffer. The default puts everything on IPU 0 (one IPU).
#[derive(Clone, Debug, Default)]
pub struct TraceIpus {
    /// IPUs in the system (at least 1).
    pub ipus: u32,
    /// The IPUs each exchange writes to, by exchange id.
    pub exchanges: Vec<Vec<u32>>,
    /// The IPU of each stream, by name.
    pub streams: HashMap<String, u32>,
}

impl TraceIpus {
    /// The placement of `exe`'s steps.
    pub fn of(exe: &Executable) -> TraceIpus {
        TraceIpus {
            ipus: exe.system.ipus.max(1),
            exchanges: exe.exchanges.iter().map(|ex| ex.dst_ipus()).collect(),
            streams: exe
                .streams
                .iter()
                .map(|s| (s.name.clone(), exe.tensor_ipu(s.tensor)))
                .collect(),
        }
    }

    /// The IPUs exchange `id` writes to (IPU 0 for an exchange with no copies or not
    /// known).
    pub fn exchange_ipus(&self, id: u32) -> &[u32] {
        const IPU_0: &[u32] = &[0];
        self.exchanges
            .get(id as usize)
            .filter(|v| !v.is_empty())
            .map_or(IPU_0, |v| &v[..])
    }

    /// The IPU of stream `name` (IPU 0 when not known).
    pub fn stream_ipu(&self, name: &str) -> u32 {
        self.streams.get(name).copied().unwrap_or(0)
    }
}

/// The tracks of one IPU, as trace-event thread ids.
const PROGRAM: u32 = 0;
const TRACKS: [(u32, &str); 5] = [
    (PROGRAM, "Program"),
    (1, "OnTileExecute"),
    (2, "DoExchange"),
    (3, "Sync"),
    (4, "StreamCopy"),
];

/// Converts `trace` (recorded on `target_name` at `clock_hz`, its steps on `ipus`) to
/// trace-event JSON text.
pub fn to_chrome_json(
    trace: &Trace,
    program: &str,
    target_name: &str,
    clock_hz: u64,
    ipus: &TraceIpus,
) -> String {
    let us = |cycle: u64| cycle as f64 * 1e6 / clock_hz.max(1) as f64;
    let every: Vec<u32> = (0..ipus.ipus.max(1)).collect();
    // The runs and loops: on IPU 0's Program track.
    let pid = 0u32;
    // Events are written one by one: a trace of a long run has millions of them.
    let mut out = String::with_capacity(64 + 160 * trace.events.len());
    out.push_str("{\"traceEvents\":[");
    let mut first = true;
    let mut push = |v: Value| {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(&v.to_string());
    };
    for &pid in &every {
        push(json!({
            "name": "process_name", "ph": "M", "pid": pid, "tid": 0,
            "args": {"name": format!("IPU {pid} ({target_name})")}
        }));
        for (tid, name) in TRACKS {
            push(json!({
                "name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}
            }));
            push(json!({
                "name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                "args": {"sort_index": tid}
            }));
        }
    }
    let slice = |pid: u32, tid: u32, name: &str, cycle: u64, cycles: u64, args: &Value| {
        json!({
            "name": name, "cat": TRACKS[tid as usize].1, "ph": "X", "pid": pid, "tid": tid,
            "ts": us(cycle), "dur": us(cycles), "args": args
        })
    };
    let instant = |pid: u32, tid: u32, name: String, cycle: u64, args: Value| {
        json!({
            "name": name, "ph": "i", "s": "t", "pid": pid, "tid": tid, "ts": us(cycle),
            "args": args
        })
    };
    let control = |program: &Control| match program {
        Control::Repeat { iteration, count } => format!("repeat {iteration}/{count}"),
        Control::If { taken } => format!("if ({})", if *taken { "then" } else { "else" }),
    };
    for e in &trace.events {
        match e {
            Event::RunStarted { run, cycle } => push(json!({
                "name": format!("run {run}"), "ph": "B", "pid": pid, "tid": PROGRAM, "ts": us(*cycle)
            })),
            Event::RunFinished { run, cycle, cycles } => push(json!({
                "name": format!("run {run}"), "ph": "E", "pid": pid, "tid": PROGRAM, "ts": us(*cycle),
                "args": {"cycles": cycles.total, "OnTileExecute": cycles.on_tile_execute,
                         "DoExchange": cycles.do_exchange, "Sync": cycles.sync,
                         "StreamCopy": cycles.stream_copy}
            })),
            Event::Entered { program, cycle, .. } => push(json!({
                "name": control(program), "ph": "B", "pid": pid, "tid": PROGRAM, "ts": us(*cycle)
            })),
            Event::Left { program, cycle, .. } => push(json!({
                "name": control(program), "ph": "E", "pid": pid, "tid": PROGRAM, "ts": us(*cycle)
            })),
            Event::ComputeSet {
                name,
                cycle,
                cycles,
                tiles,
                ..
            } => {
                let args = json!({"cycles": cycles, "tiles": tiles.len()});
                // A compute set's tiles are in tile order, so each IPU's tiles are together.
                let mut last = None;
                for p in tiles.iter().map(|t| t.tile.ipu()) {
                    if last != Some(p) {
                        push(slice(p, 1, name, *cycle, *cycles, &args));
                        last = Some(p);
                    }
                }
            }
            Event::Exchange {
                id,
                name,
                cycle,
                cycles,
                bytes,
                copies,
                ..
            } => {
                let args = json!({"cycles": cycles, "bytes": bytes, "copies": copies});
                for &p in ipus.exchange_ipus(*id) {
                    push(slice(p, 2, name, *cycle, *cycles, &args));
                }
            }
            Event::Sync { cycle, cycles, ipu } => {
                let args = json!({ "cycles": cycles });
                let own = ipu.map(|i| vec![i]);
                for &p in own.as_ref().unwrap_or(&every) {
                    push(slice(p, 3, "sync", *cycle, *cycles, &args));
                }
            }
            Event::StreamCopy {
                stream,
                direction,
                bytes,
                cycle,
                cycles,
                ..
            } => {
                let dir = match direction {
                    StreamDirection::HostToDevice => "host to device",
                    StreamDirection::DeviceToHost => "device to host",
                };
                let p = ipus.stream_ipu(stream);
                push(slice(
                    p,
                    4,
                    stream,
                    *cycle,
                    *cycles,
                    &json!({"cycles": cycles, "bytes": bytes, "direction": dir}),
                ))
            }
            Event::FlagsRaised {
                compute_set,
                tile,
                flags,
                cycle,
            } => push(instant(
                tile.ipu(),
                1,
                format!("{} raised", flag_list(*flags)),
                *cycle,
                json!({"compute set": compute_set, "tile": tile}),
            )),
            Event::FpException {
                compute_set,
                tile,
                vertex,
                flags,
                cycle,
            } => push(instant(
                tile.ipu(),
                1,
                format!("floating-point exception ({})", flag_list(*flags)),
                *cycle,
                json!({"compute set": compute_set, "tile": tile, "vertex": vertex}),
            )),
        }
    }
    let other = json!({"program": program, "target": target_name, "clock_hz": clock_hz});
    out.push_str(&format!(
        "],\"displayTimeUnit\":\"ns\",\"otherData\":{other}}}"
    ));
    out
}

fn flag_list(flags: ipusim_sim::numerics::FpSts) -> String {
    flags.names().collect::<Vec<_>>().join("|")
}

/// Writes the Chrome trace of `trace` to `path`, whole or not at all.
pub fn write_chrome_trace(
    path: &Path,
    trace: &Trace,
    program: &str,
    target_name: &str,
    clock_hz: u64,
    ipus: &TraceIpus,
) -> Result<(), WriteError> {
    let text = to_chrome_json(trace, program, target_name, clock_hz, ipus);
    write_atomically(path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipusim_exe::system::TileId;
    use ipusim_sim::engine::CategoryCycles;
    use ipusim_sim::numerics::FpSts;
    use ipusim_sim::trace::TileCycle;

    #[test]
    fn tracks_slices_and_time() {
        let trace = Trace {
            events: vec![
                Event::RunStarted { run: 1, cycle: 0 },
                Event::Entered {
                    node: 1,
                    program: Control::Repeat {
                        iteration: 1,
                        count: 2,
                    },
                    cycle: 0,
                },
                Event::ComputeSet {
                    step: Some(0),
                    id: 0,
                    name: "mm".into(),
                    cycle: 0,
                    cycles: 1325,
                    tiles: vec![TileCycle {
                        tile: TileId::default(),
                        cycles: 1325,
                    }],
                },
                Event::FlagsRaised {
                    compute_set: "mm".into(),
                    tile: TileId::default(),
                    flags: FpSts::OFLO,
                    cycle: 0,
                },
                Event::StreamCopy {
                    step: Some(1),
                    stream: "loss".into(),
                    direction: StreamDirection::DeviceToHost,
                    bytes: 4,
                    cycle: 1325,
                    cycles: 2650,
                },
                Event::Left {
                    node: 1,
                    program: Control::Repeat {
                        iteration: 1,
                        count: 2,
                    },
                    cycle: 3975,
                },
                Event::RunFinished {
                    run: 1,
                    cycle: 3975,
                    cycles: CategoryCycles::default(),
                },
            ],
        };
        let doc: Value = serde_json::from_str(&to_chrome_json(
            &trace,
            "p",
            "mk2",
            1_325_000_000,
            &TraceIpus::default(),
        ))
        .unwrap();
        let ev = doc["traceEvents"].as_array().unwrap();
        let process = &ev[0];
        assert_eq!(process["args"]["name"], "IPU 0 (mk2)");
        let names: Vec<&str> = ev
            .iter()
            .filter(|e| e["name"] == "thread_name")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "Program",
                "OnTileExecute",
                "DoExchange",
                "Sync",
                "StreamCopy"
            ]
        );
        let mm = ev.iter().find(|e| e["name"] == "mm").unwrap();
        // 1,325 cycles at 1.325 GHz = 1 µs.
        assert_eq!(
            (mm["ph"].clone(), mm["tid"].clone()),
            ("X".into(), 1.into())
        );
        assert_eq!(
            (mm["ts"].as_f64(), mm["dur"].as_f64()),
            (Some(0.0), Some(1.0))
        );
        let copy = ev.iter().find(|e| e["name"] == "loss").unwrap();
        assert_eq!(
            (copy["tid"].clone(), copy["ts"].as_f64()),
            (4.into(), Some(1.0))
        );
        assert_eq!(copy["args"]["direction"], "device to host");
        let flags = ev.iter().find(|e| e["ph"] == "i").unwrap();
        assert_eq!(flags["name"], "OFLO raised");
        let begins = ev.iter().filter(|e| e["ph"] == "B").count();
        let ends = ev.iter().filter(|e| e["ph"] == "E").count();
        assert_eq!(
            (begins, ends),
            (2, 2),
            "runs and iterations nest on the Program track"
        );
    }
}

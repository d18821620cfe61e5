//! Execution traces: typed events the engine records as it runs (when asked to), their
//! serde form, and [`summary`] — a compact, human-readable view meant for snapshot tests
//! (`ipusim_runtime::launch::snapshot_trace` launches a program file and summarises its trace).
//!
//! Events are recorded only when `EngineOptions::record_trace` is set; otherwise nothing is
//! allocated. A trace is deterministic: the same executable, seed and options give the same
//! events whatever the host thread count. Every leaf event (compute set, exchange, sync,
//! stream copy) carries its start `cycle` (the device clock) and its `cycles`: the step is
//! entered at `cycle` and left at `cycle + cycles`. Control nodes (a `Repeat` iteration, an
//! `If` branch) are [`Event::Entered`] and [`Event::Left`].
//!

use crate::category::CategoryCycles;
use crate::numerics::FpSts;
use ipusim_exe::executable::StreamDirection;
use ipusim_exe::system::TileId;
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// One tile's cycles in a compute set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TileCycle {
    /// The tile.
    pub tile: TileId,
    /// Its cycles.
    pub cycles: u64,
}

/// A control node of the program tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Control {
    /// One iteration (1-based) of a `Repeat` of `count`.
    Repeat {
        /// The iteration.
        iteration: u32,
        /// The repeat count.
        count: u32,
    },
    /// The branch an `If` took.
    If {
        /// True for `then`.
        taken: bool,
    },
}

/// One trace event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A program run started.
    RunStarted {
        /// The run's number.
        run: u64,
        /// Device cycle.
        cycle: u64,
    },
    /// A program run finished.
    RunFinished {
        /// The run's number.
        run: u64,
        /// Device cycle.
        cycle: u64,
        /// Cycles of the run by category.
        cycles: CategoryCycles,
    },
    /// A control node was entered (a `Repeat` iteration begins, an `If` picked a branch).
    Entered {
        /// Program-tree node (pre-order index).
        node: u32,
        /// What was entered.
        program: Control,
        /// Device cycle.
        cycle: u64,
    },
    /// A control node was left.
    Left {
        /// Program-tree node.
        node: u32,
        /// What was left.
        program: Control,
        /// Device cycle.
        cycle: u64,
    },
    /// A compute set ran.
    ComputeSet {
        /// Index in `Executable::steps`.
        step: Option<u32>,
        /// Compute-set id.
        id: u32,
        /// Its name.
        name: String,
        /// Start cycle.
        cycle: u64,
        /// Its cycles (the slowest tile).
        cycles: u64,
        /// Cycles of every tile with work.
        tiles: Vec<TileCycle>,
    },
    /// An exchange ran.
    Exchange {
        /// Index in `Executable::steps`.
        step: Option<u32>,
        /// Exchange id.
        id: u32,
        /// Its name.
        name: String,
        /// Start cycle.
        cycle: u64,
        /// Its cycles.
        cycles: u64,
        /// Bytes moved (every destination counted).
        bytes: u64,
        /// Copies.
        copies: u32,
    },
    /// All tiles synced.
    Sync {
        /// Start cycle.
        cycle: u64,
        /// Its cycles.
        cycles: u64,
        /// The IPU it syncs, inside a pipeline tick (where each IPU syncs its own tiles);
        /// absent elsewhere.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ipu: Option<u32>,
    },
    /// A host stream copy ran.
    StreamCopy {
        /// Index in `Executable::steps`.
        step: Option<u32>,
        /// The stream.
        stream: String,
        /// Direction.
        direction: StreamDirection,
        /// Bytes moved.
        bytes: u64,
        /// Start cycle.
        cycle: u64,
        /// Its cycles.
        cycles: u64,
    },
    /// Vertices on a tile raised `$FP_STS` flags in a compute set.
    FlagsRaised {
        /// The compute set.
        compute_set: String,
        /// The tile.
        tile: TileId,
        /// The flags raised there (OR over its vertices).
        flags: FpSts,
        /// Start cycle of the compute set.
        cycle: u64,
    },
    /// A floating-point exception trapped; the run stopped.
    FpException {
        /// The compute set.
        compute_set: String,
        /// The tile.
        tile: TileId,
        /// The vertex on the tile.
        vertex: usize,
        /// The flags that trapped.
        flags: FpSts,
        /// The cycle of the fault.
        cycle: u64,
    },
}

/// The events recorded since the trace was last taken.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    /// Events in order.
    pub events: Vec<Event>,
}

/// A compact view of a trace for snapshot tests: one line per step, nested under repeat
/// iterations, consecutive identical iterations folded into one line, no absolute cycle
/// stamps (so that a change in one step does not ripple through every later line), plus
/// the cycles of the runs by category.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceSummary {
    /// Runs in the trace.
    pub runs: u64,
    /// Cycles of all runs, by category.
    pub cycles: CategoryCycles,
    /// The lines.
    pub lines: Vec<String>,
}

/// An open repeat iteration while summarising.
struct Open {
    node: u32,
    iteration: u32,
    count: u32,
    lines: Vec<String>,
    /// The last iteration's lines and the range of iterations that matched them.
    previous: Option<(Vec<String>, u32, u32)>,
    /// Lines of the repeat so far.
    done: Vec<String>,
}

fn flush_folded(open: &mut Open) {
    if let Some((_, first, last)) = open.previous.take() {
        if last > first {
            open.done.push(format!(
                "  iterations {}-{last} of {}: as iteration {first}",
                first + 1,
                open.count
            ));
        }
    }
}

/// `1 tile`, `2 tiles`, `3 copies`.
fn plural(n: usize, word: &str) -> String {
    match (n, word.strip_suffix('y')) {
        (1, _) => format!("1 {word}"),
        (_, Some(stem)) => format!("{n} {stem}ies"),
        _ => format!("{n} {word}s"),
    }
}

/// Summarises `trace` (see [`TraceSummary`]).
pub fn summary(trace: &Trace) -> TraceSummary {
    let mut out = TraceSummary::default();
    let mut top: Vec<String> = Vec::new();
    let mut stack: Vec<Open> = Vec::new();
    let push = |stack: &mut Vec<Open>, top: &mut Vec<String>, line: String| match stack.last_mut() {
        Some(o) => o.lines.push(line),
        None => top.push(line),
    };
    for e in &trace.events {
        match e {
            Event::RunStarted { run, .. } => {
                out.runs += 1;
                push(&mut stack, &mut top, format!("run {run}"));
            }
            Event::RunFinished { cycles, .. } => {
                out.cycles.total += cycles.total;
                out.cycles.on_tile_execute += cycles.on_tile_execute;
                out.cycles.do_exchange += cycles.do_exchange;
                out.cycles.sync += cycles.sync;
                out.cycles.stream_copy += cycles.stream_copy;
                push(
                    &mut stack,
                    &mut top,
                    format!("run finished: {} cycles", cycles.total),
                );
            }
            Event::Entered {
                node,
                program: Control::Repeat { iteration, count },
                ..
            } => {
                let continuing = stack
                    .last()
                    .is_some_and(|o| o.node == *node && o.iteration + 1 == *iteration);
                if continuing {
                    if let Some(o) = stack.last_mut() {
                        o.iteration = *iteration;
                    }
                } else {
                    stack.push(Open {
                        node: *node,
                        iteration: *iteration,
                        count: *count,
                        lines: Vec::new(),
                        previous: None,
                        done: vec![format!("repeat {count} (node {node})")],
                    });
                }
            }
            Event::Left {
                program: Control::Repeat { iteration, count },
                ..
            } => {
                let Some(mut o) = stack.pop() else { continue };
                let lines = std::mem::take(&mut o.lines);
                match &mut o.previous {
                    Some((prev, _, last)) if *prev == lines => *last = *iteration,
                    _ => {
                        flush_folded(&mut o);
                        o.done.push(format!("  iteration {iteration}/{count}"));
                        o.done.extend(lines.iter().map(|l| format!("    {l}")));
                        o.previous = Some((lines, *iteration, *iteration));
                    }
                }
                if iteration == count {
                    flush_folded(&mut o);
                    let done = std::mem::take(&mut o.done);
                    for l in done {
                        push(&mut stack, &mut top, l);
                    }
                } else {
                    stack.push(o);
                }
            }
            Event::Entered {
                node,
                program: Control::If { taken },
                ..
            } => {
                push(
                    &mut stack,
                    &mut top,
                    format!("if (node {node}): {}", if *taken { "then" } else { "else" }),
                );
            }
            Event::Left { .. } => {}
            Event::ComputeSet {
                name,
                cycles,
                tiles,
                ..
            } => {
                let slowest = tiles
                    .iter()
                    .max_by_key(|t| (t.cycles, std::cmp::Reverse(t.tile)));
                let mut line = format!(
                    "compute set '{name}': {}, {cycles} cycles",
                    plural(tiles.len(), "tile")
                );
                if let Some(t) = slowest {
                    let _ = write!(line, " (slowest tile {})", t.tile);
                }
                push(&mut stack, &mut top, line);
            }
            Event::Exchange {
                name,
                cycles,
                bytes,
                copies,
                ..
            } => {
                let copies = plural(*copies as usize, "copy");
                push(
                    &mut stack,
                    &mut top,
                    format!("exchange '{name}': {bytes} B in {copies}, {cycles} cycles"),
                );
            }
            Event::Sync { cycles, .. } => {
                push(&mut stack, &mut top, format!("sync: {cycles} cycles"))
            }
            Event::StreamCopy {
                stream,
                direction,
                bytes,
                cycles,
                ..
            } => {
                let dir = match direction {
                    StreamDirection::HostToDevice => "host -> device",
                    StreamDirection::DeviceToHost => "device -> host",
                };
                push(
                    &mut stack,
                    &mut top,
                    format!("stream copy '{stream}' ({dir}): {bytes} B, {cycles} cycles"),
                );
            }
            Event::FlagsRaised {
                compute_set,
                tile,
                flags,
                ..
            } => {
                let names: Vec<&str> = flags.names().collect();
                push(
                    &mut stack,
                    &mut top,
                    format!(
                        "  flags {} on tile {tile} in '{compute_set}'",
                        names.join("|")
                    ),
                );
            }
            Event::FpException {
                compute_set,
                tile,
                vertex,
                flags,
                cycle,
            } => {
                let names: Vec<&str> = flags.names().collect();
                push(
                    &mut stack,
                    &mut top,
                    format!("FP EXCEPTION {} on tile {tile}, vertex {vertex} of '{compute_set}' at cycle {cycle}", names.join("|")),
                );
            }
        }
    }
    // Repeats left open (a run that stopped): their lines so far.
    while let Some(mut o) = stack.pop() {
        flush_folded(&mut o);
        let mut lines = std::mem::take(&mut o.done);
        lines.push(format!("  iteration {}/{} (stopped)", o.iteration, o.count));
        lines.extend(o.lines.iter().map(|l| format!("    {l}")));
        for l in lines {
            push(&mut stack, &mut top, l);
        }
    }
    out.lines = top;
    out
}

//! The execution trace (PopVision's Execution Trace) of a recorded run: the engine's events
//! of the first run in a [`Trace`] fed to the same [`TimelineBuilder`] the static walk uses,
//! so a run's trace and the compile-time estimate compare step for step.

use crate::chrome::TraceIpus;
use ipusim_exe::timeline::{ExecutionTrace, TimelineBuilder};
use ipusim_exe::TileId;
use ipusim_sim::trace::{Event, Trace};

/// The execution trace of the first run recorded in `trace` (source `run`), on a system
/// placed as `ipus` with `tiles_per_ipu` tiles per IPU; cycles count from the run's start.
/// `None` when the trace holds no run.
pub fn of_first_run(trace: &Trace, ipus: &TraceIpus, tiles_per_ipu: u32) -> Option<ExecutionTrace> {
    let mut events = trace.events.iter();
    let (run, origin) = events.find_map(|e| match e {
        Event::RunStarted { run, cycle } => Some((*run, *cycle)),
        _ => None,
    })?;
    let mut b = TimelineBuilder::new("run", ipus.ipus, tiles_per_ipu);
    let mut end = origin;
    for e in events {
        match e {
            Event::RunFinished { run: r, cycle, .. } if *r == run => {
                end = *cycle;
                break;
            }
            Event::ComputeSet {
                name,
                cycle,
                cycles,
                tiles,
                ..
            } => {
                let tiles: Vec<(TileId, u64)> = tiles.iter().map(|t| (t.tile, t.cycles)).collect();
                b.execute(name, cycle - origin, *cycles, &tiles);
            }
            Event::Exchange {
                id,
                name,
                cycle,
                cycles,
                ..
            } => {
                b.exchange(name, cycle - origin, *cycles, ipus.exchange_ipus(*id));
            }
            Event::Sync { cycle, cycles, ipu } => {
                b.set_scope(*ipu);
                b.sync(cycle - origin, *cycles);
                b.set_scope(None);
            }
            Event::StreamCopy {
                stream,
                cycle,
                cycles,
                ..
            } => {
                b.stream_copy(stream, cycle - origin, *cycles, ipus.stream_ipu(stream));
            }
            _ => {}
        }
    }
    Some(b.finish(end - origin))
}

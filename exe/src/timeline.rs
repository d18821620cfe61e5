//! The execution trace of one program run as PopVision's Execution Trace shows it: per IPU,
//! the program steps in time (compute, exchange, sync, stream copy), and for each compute set
//! how busy each group of tiles was (the BSP view per tile).
//!
//! [`TimelineBuilder`] takes the steps in the order they ran, with their start cycle and
//! cycles; two sources feed it and give the same trace for a program whose cycles do not
//! depend on its data:
//!
//! - [`estimate`]: the static walk of the executable's program (source `estimate`), which is
//!   what `ipusim compile` has, as Poplar's IPUModel profiles from estimates;
//! - the runtime, from the engine's recorded events of a run (source `run`).
//!
//! A trace keeps at most [`MAX_STEPS`] steps (the first ones) so that its size is bounded
//! whatever the program's loop counts; `steps` and `total_cycles` count the whole run.
//!
//! On each IPU a step lasts its own cycles: a compute set's slowest tile *on that IPU*, so
//! an IPU with less work than another in the same compute set shows the difference as
//! waiting until the next step begins (the pipeline imbalance a user looks for). Exchanges,
//! inter-IPU copies and stream copies appear on the IPUs they write to; a sync on every IPU.

use crate::cycles::{cross_replica_cycles, remote_copy_cycles, stream_copy_cycles, sync_cycles};
use crate::executable::{Executable, Program};
use crate::system::TileId;
use serde::{Deserialize, Serialize};

/// Steps kept in a trace (the first ones of the run). Our choice: enough for a training
/// step of a ResNet-50 (about 3,000 steps) while a trace stays a few hundred kB of JSON.
pub const MAX_STEPS: u64 = 5_000;

/// Rows of the per-tile BSP view of one IPU: its tiles in this many groups of consecutive
/// tiles (fewer when the IPU has fewer tiles). Our choice, for a legible picture.
pub const TILE_GROUPS: u32 = 32;

/// The execution trace of one run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionTrace {
    /// `estimate` (the static walk of the compiled program) or `run` (recorded by the
    /// simulator).
    pub source: String,
    /// Cycles of the whole run.
    pub total_cycles: u64,
    /// Program steps of the whole run.
    pub steps: u64,
    /// Steps kept in `ipus[*].slices` (the first ones, at most [`MAX_STEPS`]).
    pub shown_steps: u64,
    /// The cycle at which the last kept step ends.
    pub shown_cycles: u64,
    /// Tiles of each IPU.
    pub tiles_per_ipu: u32,
    /// Rows of the per-tile view: tile `t` of an IPU is in group `t × tile_groups /
    /// tiles_per_ipu`.
    pub tile_groups: u32,
    /// Per IPU.
    pub ipus: Vec<IpuTimeline>,
}

/// The steps of one IPU.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpuTimeline {
    /// The IPU.
    pub ipu: u32,
    /// Cycles of its compute steps among the kept steps.
    pub execute_cycles: u64,
    /// Cycles of its exchanges and inter-IPU copies among the kept steps.
    pub exchange_cycles: u64,
    /// Cycles of its syncs among the kept steps.
    pub sync_cycles: u64,
    /// Cycles of its host stream copies among the kept steps.
    pub stream_copy_cycles: u64,
    /// Cycles of the kept span (`shown_cycles`) in which it does none of these: it waits
    /// for another IPU, or for a step that does not involve it.
    pub idle_cycles: u64,
    /// Its steps in order.
    pub slices: Vec<TimelineSlice>,
}

/// One step on one IPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineSlice {
    /// `Execute`, `Exchange`, `Sync` or `StreamCopy`.
    pub kind: String,
    /// The compute set, exchange or stream.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Start cycle (from the start of the run).
    pub start: u64,
    /// Its cycles on this IPU.
    pub cycles: u64,
    /// Tiles of this IPU with work in the compute set.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tiles: u32,
    /// Per tile group, the permille of the group's tile-cycles over the step that its tiles
    /// compute (1000: every tile of the group busy for the whole step); groups past the
    /// last one listed have no work. Compute sets only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub busy: Vec<u16>,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// Builds an [`ExecutionTrace`] from the steps of a run, in order.
#[derive(Debug)]
pub struct TimelineBuilder {
    trace: ExecutionTrace,
    /// The IPU whose work is being recorded, while the IPUs of a pipeline tick run their
    /// parts at the same time: its syncs are its own.
    scope: Option<u32>,
}

impl TimelineBuilder {
    /// A trace from `source` of a system of `ipus` IPUs of `tiles_per_ipu` tiles each.
    pub fn new(source: &str, ipus: u32, tiles_per_ipu: u32) -> TimelineBuilder {
        TimelineBuilder {
            trace: ExecutionTrace {
                source: source.to_string(),
                total_cycles: 0,
                steps: 0,
                shown_steps: 0,
                shown_cycles: 0,
                tiles_per_ipu,
                tile_groups: TILE_GROUPS.min(tiles_per_ipu.max(1)),
                ipus: (0..ipus.max(1))
                    .map(|ipu| IpuTimeline {
                        ipu,
                        ..IpuTimeline::default()
                    })
                    .collect(),
            },
            scope: None,
        }
    }

    /// Records the steps that follow as one IPU's own (`Some`: a pipeline tick's part on
    /// that IPU, whose syncs are its own) or the whole system's (`None`).
    pub fn set_scope(&mut self, ipu: Option<u32>) {
        self.scope = ipu;
    }

    /// Counts one step; true when it is kept.
    fn keep(&mut self, start: u64, cycles: u64) -> bool {
        self.trace.steps += 1;
        self.trace.total_cycles = self.trace.total_cycles.max(start.saturating_add(cycles));
        if self.trace.shown_steps >= MAX_STEPS {
            return false;
        }
        self.trace.shown_steps += 1;
        self.trace.shown_cycles = self.trace.shown_cycles.max(start.saturating_add(cycles));
        true
    }

    fn push(&mut self, ipu: u32, slice: TimelineSlice) {
        let Some(lane) = self.trace.ipus.get_mut(ipu as usize) else {
            return;
        };
        let total = match slice.kind.as_str() {
            "Execute" => &mut lane.execute_cycles,
            "Exchange" => &mut lane.exchange_cycles,
            "Sync" => &mut lane.sync_cycles,
            _ => &mut lane.stream_copy_cycles,
        };
        *total = total.saturating_add(slice.cycles);
        lane.slices.push(slice);
    }

    /// A compute set `name` from `start` for `cycles` (its slowest tile), with the cycles of
    /// every tile with work (`tiles` in tile order, as compute sets keep them).
    pub fn execute(&mut self, name: &str, start: u64, cycles: u64, tiles: &[(TileId, u64)]) {
        if !self.keep(start, cycles) {
            return;
        }
        let per = self.trace.tiles_per_ipu.max(1) as u64;
        let groups = self.trace.tile_groups.max(1) as u64;
        for on_ipu in tiles.chunk_by(|a, b| a.0.ipu() == b.0.ipu()) {
            let ipu = on_ipu[0].0.ipu();
            let slowest = on_ipu.iter().map(|t| t.1).max().unwrap_or(0);
            let mut sums = vec![0u128; groups as usize];
            for &(tile, c) in on_ipu {
                let g = (tile.tile() as u64 * groups / per).min(groups - 1) as usize;
                sums[g] += c as u128;
            }
            let mut busy: Vec<u16> = sums
                .iter()
                .enumerate()
                .map(|(g, &sum)| {
                    // Tiles in group g: those t with floor(t × groups / per) == g.
                    let first = (g as u64 * per).div_ceil(groups);
                    let end = ((g as u64 + 1) * per).div_ceil(groups);
                    let den = (end - first) as u128 * slowest as u128;
                    (sum * 1000 + den / 2)
                        .checked_div(den)
                        .map_or(0, |p| p.min(1000) as u16)
                })
                .collect();
            while busy.last() == Some(&0) {
                busy.pop();
            }
            self.push(
                ipu,
                TimelineSlice {
                    kind: "Execute".into(),
                    name: name.to_string(),
                    start,
                    cycles: slowest,
                    tiles: on_ipu.len() as u32,
                    busy,
                },
            );
        }
    }

    /// An exchange or inter-IPU copy `name` writing to `ipus`.
    pub fn exchange(&mut self, name: &str, start: u64, cycles: u64, ipus: &[u32]) {
        if !self.keep(start, cycles) {
            return;
        }
        for &ipu in ipus {
            self.push(ipu, Self::slice("Exchange", name, start, cycles));
        }
    }

    /// A sync of every IPU (of the scoped IPU only, inside a pipeline tick).
    pub fn sync(&mut self, start: u64, cycles: u64) {
        if !self.keep(start, cycles) {
            return;
        }
        let ipus: Vec<u32> = match self.scope {
            Some(ipu) => vec![ipu],
            None => (0..self.trace.ipus.len() as u32).collect(),
        };
        for ipu in ipus {
            self.push(ipu, Self::slice("Sync", "", start, cycles));
        }
    }

    /// A host stream copy of stream `name`, on `ipu`.
    pub fn stream_copy(&mut self, name: &str, start: u64, cycles: u64, ipu: u32) {
        if !self.keep(start, cycles) {
            return;
        }
        self.push(ipu, Self::slice("StreamCopy", name, start, cycles));
    }

    /// A step that no lane shows (a cross-replica collective, which the engine does not
    /// trace either): it advances time only.
    pub fn gap(&mut self, start: u64, cycles: u64) {
        self.trace.total_cycles = self.trace.total_cycles.max(start.saturating_add(cycles));
    }

    fn slice(kind: &str, name: &str, start: u64, cycles: u64) -> TimelineSlice {
        TimelineSlice {
            kind: kind.into(),
            name: name.to_string(),
            start,
            cycles,
            tiles: 0,
            busy: Vec::new(),
        }
    }

    /// The trace of a run that ended at cycle `end` (from its start).
    pub fn finish(mut self, end: u64) -> ExecutionTrace {
        self.trace.total_cycles = self.trace.total_cycles.max(end);
        let span = self.trace.shown_cycles;
        for lane in &mut self.trace.ipus {
            let used = lane
                .execute_cycles
                .saturating_add(lane.exchange_cycles)
                .saturating_add(lane.sync_cycles)
                .saturating_add(lane.stream_copy_cycles);
            lane.idle_cycles = span.saturating_sub(used);
        }
        self.trace
    }
}

/// The execution trace of one run of `exe` from its static cycles: the program walked in
/// order, every `Repeat` iteration in turn, as the simulator executes it. An `If` (which the
/// lowering does not produce) is charged a sync and its slower branch, as the static
/// estimate charges it.
pub fn estimate(exe: &Executable) -> ExecutionTrace {
    let mut b = TimelineBuilder::new("estimate", exe.system.ipus.max(1), exe.target.tiles);
    let mut cycle = 0u64;
    walk(exe, &exe.program, &mut b, &mut cycle);
    b.finish(cycle)
}

fn walk(exe: &Executable, p: &Program, b: &mut TimelineBuilder, cycle: &mut u64) {
    match p {
        Program::Sequence(children) => {
            for c in children {
                walk(exe, c, b, cycle);
            }
        }
        Program::Repeat { count, body } => {
            for done in 0..u64::from(*count) {
                if b.trace.shown_steps >= MAX_STEPS {
                    // Past the kept steps only the counts matter: the remaining iterations
                    // times one iteration's steps and cycles.
                    let (steps, cycles) = steps_and_cycles(exe, body);
                    let left = u64::from(*count) - done;
                    b.trace.steps = b.trace.steps.saturating_add(steps.saturating_mul(left));
                    *cycle = cycle.saturating_add(cycles.saturating_mul(left));
                    break;
                }
                walk(exe, body, b, cycle);
            }
        }
        Program::Execute(id) => {
            let cs = exe.compute_set(*id);
            let tiles: Vec<(TileId, u64)> = cs.tiles.iter().map(|t| (t.tile, t.cycles)).collect();
            b.execute(&cs.name, *cycle, cs.cycles, &tiles);
            *cycle = cycle.saturating_add(cs.cycles);
        }
        Program::Exchange(id) | Program::IpuCopy(id) => {
            let ex = exe.exchange(*id);
            b.exchange(&ex.name, *cycle, ex.cycles, &ex.dst_ipus());
            *cycle = cycle.saturating_add(ex.cycles);
        }
        Program::StreamCopy { stream, .. } => {
            let s = &exe.streams[stream.0 as usize];
            let c = stream_copy_cycles(&exe.target, s.bytes_per_micro_batch);
            b.stream_copy(&s.name, *cycle, c, exe.tensor_ipu(s.tensor));
            *cycle = cycle.saturating_add(c);
        }
        Program::Sync(scope) => {
            let c = exe.system.sync_cycles(&exe.target, *scope);
            b.sync(*cycle, c);
            *cycle = cycle.saturating_add(c);
        }
        Program::CrossReplica { op, tensor, dst } => {
            let c = cross_replica_cycles(exe, *op, *tensor, *dst);
            b.gap(*cycle, c);
            *cycle = cycle.saturating_add(c);
        }
        Program::RemoteCopy { tensor, store } => {
            let t = exe.tensor(*tensor);
            let c = remote_copy_cycles(&exe.target, t.size_bytes());
            let what = if *store { "store" } else { "load" };
            b.stream_copy(
                &format!("{}/{what}", t.name),
                *cycle,
                c,
                exe.tensor_ipu(*tensor),
            );
            *cycle = cycle.saturating_add(c);
        }
        Program::If {
            then, otherwise, ..
        } => {
            let c = sync_cycles(&exe.target);
            b.sync(*cycle, c);
            *cycle = cycle.saturating_add(c);
            walk(exe, slower(exe, then, otherwise), b, cycle);
        }
        Program::Pipeline(pl) => {
            for t in 0..pl.ticks() {
                let tick = pl.tick(t);
                let start = *cycle;
                let mut end = start;
                for (ipu, parts) in &tick.ipus {
                    b.set_scope(Some(*ipu));
                    let mut c = start;
                    for &p in parts {
                        walk(exe, pl.part(p), b, &mut c);
                    }
                    end = end.max(c);
                }
                b.set_scope(None);
                *cycle = end;
                for &s in &tick.sends {
                    walk(exe, &pl.segments[s].send, b, cycle);
                }
            }
        }
    }
}

/// The branch of an `If` the trace follows: the slower one (the first on a tie).
fn slower<'a>(exe: &Executable, then: &'a Program, otherwise: &'a Program) -> &'a Program {
    if steps_and_cycles(exe, then).1 >= steps_and_cycles(exe, otherwise).1 {
        then
    } else {
        otherwise
    }
}

/// The steps [`walk`] records for `p` and the cycles it advances, without recording them.
fn steps_and_cycles(exe: &Executable, p: &Program) -> (u64, u64) {
    match p {
        Program::Sequence(children) => children.iter().fold((0u64, 0u64), |(s, c), x| {
            let (xs, xc) = steps_and_cycles(exe, x);
            (s.saturating_add(xs), c.saturating_add(xc))
        }),
        Program::Repeat { count, body } => {
            let (s, c) = steps_and_cycles(exe, body);
            let n = u64::from(*count);
            (s.saturating_mul(n), c.saturating_mul(n))
        }
        Program::Execute(id) => (1, exe.compute_set(*id).cycles),
        Program::Exchange(id) | Program::IpuCopy(id) => (1, exe.exchange(*id).cycles),
        Program::StreamCopy { stream, .. } => {
            let s = &exe.streams[stream.0 as usize];
            (1, stream_copy_cycles(&exe.target, s.bytes_per_micro_batch))
        }
        Program::Sync(scope) => (1, exe.system.sync_cycles(&exe.target, *scope)),
        Program::CrossReplica { op, tensor, dst } => {
            (0, cross_replica_cycles(exe, *op, *tensor, *dst))
        }
        Program::RemoteCopy { tensor, .. } => (
            1,
            remote_copy_cycles(&exe.target, exe.tensor(*tensor).size_bytes()),
        ),
        Program::Pipeline(pl) => {
            let (mut steps, mut cycles) = (0u64, 0u64);
            for t in 0..pl.ticks() {
                let tick = pl.tick(t);
                let mut busiest = 0u64;
                for (_, parts) in &tick.ipus {
                    let mut c = 0u64;
                    for &p in parts {
                        let (ps, pc) = steps_and_cycles(exe, pl.part(p));
                        steps = steps.saturating_add(ps);
                        c = c.saturating_add(pc);
                    }
                    busiest = busiest.max(c);
                }
                cycles = cycles.saturating_add(busiest);
                for &s in &tick.sends {
                    let (ss, sc) = steps_and_cycles(exe, &pl.segments[s].send);
                    steps = steps.saturating_add(ss);
                    cycles = cycles.saturating_add(sc);
                }
            }
            (steps, cycles)
        }
        Program::If {
            then, otherwise, ..
        } => {
            let (s, c) = steps_and_cycles(exe, slower(exe, then, otherwise));
            (
                s.saturating_add(1),
                c.saturating_add(sync_cycles(&exe.target)),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tile(ipu: u32, t: u32) -> TileId {
        TileId::checked(ipu, t).unwrap()
    }

    #[test]
    fn a_compute_set_is_split_by_ipu_and_its_tile_groups_shaded() {
        // 64 tiles per IPU in 32 groups of 2.
        let mut b = TimelineBuilder::new("estimate", 2, 64);
        let tiles = [
            (tile(0, 0), 100),
            (tile(0, 1), 50),
            (tile(0, 5), 100),
            (tile(1, 0), 40),
        ];
        b.execute("cs", 0, 100, &tiles);
        b.sync(100, 10);
        let t = b.finish(110);
        assert_eq!((t.tile_groups, t.steps, t.shown_cycles), (32, 2, 110));
        let (a, c) = (&t.ipus[0], &t.ipus[1]);
        // IPU 0: group 0 = tiles 0 and 1 (150 of 200 tile-cycles), group 2 = tile 5 alone
        // of its pair; trailing idle groups are left out.
        assert_eq!(a.slices[0].busy, vec![750, 0, 500]);
        assert_eq!((a.slices[0].cycles, a.slices[0].tiles), (100, 3));
        // IPU 1 lasts its own slowest tile and waits for the rest of the step.
        assert_eq!(c.slices[0].busy, vec![500]);
        assert_eq!(
            (c.execute_cycles, c.sync_cycles, c.idle_cycles),
            (40, 10, 60)
        );
        assert_eq!((a.execute_cycles, a.idle_cycles), (100, 0));
    }

    #[test]
    fn only_the_first_steps_are_kept_and_the_run_is_counted_whole() {
        let mut b = TimelineBuilder::new("run", 1, 4);
        for i in 0..MAX_STEPS + 10 {
            b.stream_copy("s", i * 3, 3, 0);
        }
        let t = b.finish((MAX_STEPS + 10) * 3);
        assert_eq!(t.steps, MAX_STEPS + 10);
        assert_eq!(t.shown_steps, MAX_STEPS);
        assert_eq!(t.ipus[0].slices.len() as u64, MAX_STEPS);
        assert_eq!(t.shown_cycles, MAX_STEPS * 3);
        assert_eq!(t.total_cycles, (MAX_STEPS + 10) * 3);
        assert_eq!(t.ipus[0].idle_cycles, 0);
        // Fewer tiles than groups: one group per tile.
        assert_eq!(t.tile_groups, 4);
    }
}

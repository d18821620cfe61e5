//! The stepping debugger: the engine's resumable machine driven step by step, with
//! breakpoints and inspection. It adds no second executor: stepping is
//! [`Engine::settle`]/[`Engine::step`] in a loop that stops on a count or a breakpoint.
//!
//! - **Stepping** ([`StepBy`]): one program step (a compute set, an exchange, a sync or a
//!   stream copy), through the next compute set, or one BSP superstep (up to the next sync).
//!   Stepping past the end of a run finishes it; stepping again starts the next run (state
//!   persists, as on the device).
//! - **Breakpoints** ([`Breakpoint`]): before a compute set whose name matches a pattern
//!   (exact, or a glob with `*` and `?`); before a step in which a tile takes part; after a
//!   step that raised a flag of a set; after the step during which the device clock reaches
//!   a cycle. Continuing from a breakpoint first executes the step it stopped before.
//! - **Inspection** ([`inspect`]): a tensor by IR node name (gathered from its tiles,
//!   printed in its dtype with its shape), a tile's memory (the plan's categories, its
//!   tensors, what is live now), the flags per tile, the position in the program tree.
//! - **The prompt** ([`repl`]): `ipusim step`'s command language over these.

pub mod inspect;
pub mod repl;

use crate::engine::{
    Engine, EngineError, FpExceptionDump, Leaf, NextStep, RunSummary, Settled, StepReport, Stepped,
};
use crate::host::HostIo;
use crate::numerics::FpSts;
use ipusim_exe::system::TileId;
use std::fmt;

/// A breakpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Breakpoint {
    /// Before a compute set whose name matches the pattern (`*` any run, `?` one character;
    /// without wildcards, the exact name).
    ComputeSet(String),
    /// Before a program step in which the tile takes part (its compute-set work, an
    /// exchange copy to or from it, a stream copy landing on or leaving it).
    Tile(TileId),
    /// Before a program step with work on the IPU (a pipeline stage's compute sets, the
    /// copies into or out of it, its streams).
    Ipu(u32),
    /// After a step that raised any of these flags on some tile.
    Flags(FpSts),
    /// After the step during which the device cycle counter reaches this cycle.
    Cycle(u64),
}

impl fmt::Display for Breakpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Breakpoint::ComputeSet(p) => write!(f, "compute set '{p}'"),
            Breakpoint::Tile(t) => write!(f, "tile {t}"),
            Breakpoint::Ipu(i) => write!(f, "ipu {i}"),
            Breakpoint::Flags(flags) => {
                let names: Vec<&str> = flags.names().collect();
                write!(f, "flag {}", names.join("|"))
            }
            Breakpoint::Cycle(c) => write!(f, "cycle {c}"),
        }
    }
}

/// How far a step command goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepBy {
    /// One program step.
    ProgramStep,
    /// Up to and including the next compute set.
    ComputeSet,
    /// One BSP superstep: up to (not including) the next sync.
    Superstep,
}

/// Why the debugger stopped.
#[derive(Clone, Debug, PartialEq)]
pub enum Stop {
    /// The steps asked for were done; the last one's report.
    Stepped(StepReport),
    /// A breakpoint was hit: before `next` (compute set, tile) or after `after` (flags,
    /// cycle).
    Breakpoint {
        /// The breakpoint's number.
        id: u32,
        /// The breakpoint.
        breakpoint: Breakpoint,
        /// The step executed last (post-step breakpoints).
        after: Option<StepReport>,
        /// The step about to run (pre-step breakpoints).
        before: Option<NextStep>,
    },
    /// The run finished.
    Finished(Box<RunSummary>),
    /// A floating-point exception trapped; the run stopped at the faulting step.
    Exception(Box<FpExceptionDump>),
}

/// The debugger over an engine and the host of its streams.
pub struct Debugger<H: HostIo> {
    engine: Engine,
    host: H,
    breakpoints: Vec<(u32, Breakpoint)>,
    next_id: u32,
}

/// Whether `text` matches the glob `pattern` (`*`: any run, `?`: one character).
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < t.len() {
        if i < p.len() && (p[i] == '?' || p[i] == t[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

impl<H: HostIo> Debugger<H> {
    /// A debugger over `engine` (before or between runs) with `host` for its streams.
    pub fn new(engine: Engine, host: H) -> Debugger<H> {
        Debugger {
            engine,
            host,
            breakpoints: Vec::new(),
            next_id: 1,
        }
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The host.
    pub fn host(&self) -> &H {
        &self.host
    }

    /// Adds a breakpoint; returns its number.
    pub fn add_breakpoint(&mut self, b: Breakpoint) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        self.breakpoints.push((id, b));
        id
    }

    /// Deletes breakpoint `id` (all when `None`); returns how many were deleted.
    pub fn delete_breakpoint(&mut self, id: Option<u32>) -> usize {
        let before = self.breakpoints.len();
        self.breakpoints
            .retain(|(i, _)| id.is_some_and(|id| id != *i));
        before - self.breakpoints.len()
    }

    /// The breakpoints with their numbers.
    pub fn breakpoints(&self) -> &[(u32, Breakpoint)] {
        &self.breakpoints
    }

    /// The next program step (settling the cursor; finishing the run when none is left).
    pub fn next_step(&mut self) -> Result<Settled, EngineError> {
        self.engine.settle()
    }

    /// Executes `count` units of `by`, or until a breakpoint, the end of the run or an
    /// exception.
    pub fn step(&mut self, by: StepBy, count: u32) -> Result<Stop, EngineError> {
        self.advance(Some((by, count.max(1))))
    }

    /// Runs until a breakpoint, the end of the run or an exception.
    pub fn cont(&mut self) -> Result<Stop, EngineError> {
        self.advance(None)
    }

    fn advance(&mut self, limit: Option<(StepBy, u32)>) -> Result<Stop, EngineError> {
        let mut remaining = limit.map_or(u32::MAX, |(_, n)| n);
        let mut last: Option<StepReport> = None;
        let mut first = true;
        loop {
            let next = match self.engine.settle()? {
                Settled::Finished(summary) => return Ok(Stop::Finished(summary)),
                Settled::Step(next) => next,
            };
            if !first {
                if let Some((id, b)) = self.before_hit(&next) {
                    return Ok(Stop::Breakpoint {
                        id,
                        breakpoint: b,
                        after: None,
                        before: Some(next),
                    });
                }
                if let (Some((StepBy::Superstep, _)), Leaf::Sync, Some(r)) =
                    (limit, next.leaf, last)
                {
                    remaining -= 1;
                    if remaining == 0 {
                        return Ok(Stop::Stepped(r));
                    }
                }
            }
            first = false;
            let report = match self.engine.step(&mut self.host) {
                Ok(Stepped::Step(r)) => r,
                Ok(Stepped::Finished(summary)) => return Ok(Stop::Finished(summary)),
                Err(EngineError::FpException(dump)) => return Ok(Stop::Exception(dump)),
                Err(e) => return Err(e),
            };
            last = Some(report);
            if let Some((id, b)) = self.after_hit(&report) {
                return Ok(Stop::Breakpoint {
                    id,
                    breakpoint: b,
                    after: Some(report),
                    before: None,
                });
            }
            let counts = match limit {
                Some((StepBy::ProgramStep, _)) => true,
                Some((StepBy::ComputeSet, _)) => matches!(report.next.leaf, Leaf::Execute { .. }),
                _ => false,
            };
            if counts {
                remaining -= 1;
                if remaining == 0 {
                    return Ok(Stop::Stepped(report));
                }
            }
        }
    }

    /// The first breakpoint that stops before `next`.
    fn before_hit(&self, next: &NextStep) -> Option<(u32, Breakpoint)> {
        let exe = self.engine.executable();
        self.breakpoints
            .iter()
            .find(|(_, b)| match (b, next.leaf) {
                (Breakpoint::ComputeSet(p), Leaf::Execute { compute_set }) => {
                    glob_match(p, &exe.compute_set(compute_set).name)
                }
                (Breakpoint::Tile(t), leaf) => inspect::step_touches_tile(exe, leaf, *t),
                (Breakpoint::Ipu(i), leaf) => inspect::step_touches_ipu(exe, leaf, *i),
                _ => false,
            })
            .cloned()
    }

    /// The first breakpoint that stops after `report`.
    fn after_hit(&self, report: &StepReport) -> Option<(u32, Breakpoint)> {
        self.breakpoints
            .iter()
            .find(|(_, b)| match b {
                Breakpoint::Flags(mask) => report.flags.intersects(*mask),
                Breakpoint::Cycle(c) => report.cycle < *c && *c <= report.cycle + report.cycles,
                _ => false,
            })
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("dense1/matmul", "dense1/matmul"));
        assert!(!glob_match("dense1/matmul", "dense1/matmul/partials"));
        assert!(glob_match("dense*", "dense1/matmul/partials"));
        assert!(glob_match("*partials", "dense1/matmul/partials"));
        assert!(glob_match("d?nse*/m*", "dense1/matmul"));
        assert!(!glob_match("?", ""));
        assert!(glob_match("*", ""));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
    }
}

//! The pipeline part of the compile report: the schedule of a pipelined program
//! (`Program::Pipeline`) as a user of PopTorch's pipelining reads it — every segment's IPU,
//! cycles per micro-batch and stash, the cycles of each tick, the share of the ramp-up and
//! ramp-down, and the timeline of stages × micro-batches as text.

use crate::executable::{Executable, Pipeline, Program};
use ipusim_exe::cycles::{pipeline_tick_cycles, program_cycles};
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// Steady-state ticks the text timeline shows after the ramp-up and before the ramp-down of
/// a long pass (our choice: enough to see the pattern repeat, short enough for a terminal).
const STEADY_SHOWN: u32 = 3;

fn one() -> u32 {
    1
}

/// One segment (a stage's forward or backward part) of the pipeline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentReport {
    /// `stage 0 forward`, ...
    pub name: String,
    /// Its IPU.
    pub ipu: u32,
    /// The tick in which micro-batch 0 runs it.
    pub offset: u32,
    /// Cycles of its work for one micro-batch.
    pub cycles: u64,
    /// Its stash slots (micro-batches in flight whose values it keeps; 0: no stash).
    pub stash_slots: u32,
    /// Bytes of its stash slots over its IPU's tiles.
    pub stash_bytes: u64,
}

/// The pipeline of a program (one pass of its micro-batches).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PipelineReport {
    /// The schedule: `Grouped` or `Interleaved`.
    pub schedule: String,
    /// Ticks between a segment's consecutive micro-batches: 1 (`Grouped`) or 2
    /// (`Interleaved`, where an IPU alternates between its forward and backward segments).
    #[serde(default = "one")]
    pub ticks_per_micro_batch: u32,
    /// Stages.
    pub stages: u32,
    /// Micro-batches per pass (the gradient accumulation count).
    pub micro_batches: u32,
    /// Ticks per pass: the micro-batches plus the ramp.
    pub ticks: u32,
    /// Cycles of each tick.
    pub tick_cycles: Vec<u64>,
    /// Cycles of the ticks before every segment has started or after one has finished its
    /// micro-batches (ramp-up and ramp-down).
    pub ramp_cycles: u64,
    /// Cycles of the ticks in which every segment is running its micro-batches.
    pub steady_cycles: u64,
    /// Bytes of every stash slot.
    pub stash_bytes: u64,
    /// The segments, in program order.
    pub segments: Vec<SegmentReport>,
}

impl PipelineReport {
    /// The report of the (first) pipeline of `exe`, if it has one.
    pub fn of(exe: &Executable) -> Option<PipelineReport> {
        let pl = find(&exe.program)?;
        let tick_cycles = pipeline_tick_cycles(exe, pl);
        // A steady tick lies within every segment's run of micro-batches.
        let full = |t: u32| {
            pl.segments
                .iter()
                .all(|s| t >= s.offset && t - s.offset < pl.span())
        };
        let (mut ramp, mut steady) = (0u64, 0u64);
        for (t, &c) in tick_cycles.iter().enumerate() {
            if full(t as u32) {
                steady += c;
            } else {
                ramp += c;
            }
        }
        let segments: Vec<SegmentReport> = pl
            .segments
            .iter()
            .map(|s| {
                let mut slots: Vec<crate::executable::TensorId> = Vec::new();
                for p in &s.save {
                    if let Program::Exchange(id) = p {
                        slots.extend(exe.exchange(*id).copies.iter().map(|c| c.dst_tensor));
                    }
                }
                slots.sort_unstable();
                slots.dedup();
                SegmentReport {
                    name: s.name.clone(),
                    ipu: s.ipu,
                    offset: s.offset,
                    cycles: program_cycles(exe, &s.body),
                    stash_slots: s.save.len() as u32,
                    stash_bytes: slots.iter().map(|&t| exe.tensor(t).size_bytes()).sum(),
                }
            })
            .collect();
        let mut stages: Vec<u32> = segments.iter().map(|s| s.ipu).collect();
        stages.sort_unstable();
        stages.dedup();
        Some(PipelineReport {
            schedule: pl.schedule.to_string(),
            ticks_per_micro_batch: pl.stride(),
            stages: stages.len() as u32,
            micro_batches: pl.micro_batches,
            ticks: pl.ticks(),
            tick_cycles,
            ramp_cycles: ramp,
            steady_cycles: steady,
            stash_bytes: segments.iter().map(|s| s.stash_bytes).sum(),
            segments,
        })
    }

    /// The report as text: the summary line, then per segment its figures and its row of
    /// the timeline (the micro-batch it runs in each tick, `.` when it has none; a long
    /// pass's middle as `…`), then the cycles of each tick (a run of equal ticks as one
    /// entry, `cycles x count`).
    pub fn text(&self, group: fn(u64) -> String) -> String {
        let total = self.ramp_cycles + self.steady_cycles;
        let mut s = format!(
            "\nPipeline ({}): {} stages, {} micro-batches in {} ticks; ramp-up and ramp-down {} \
             cycles ({:.1}%), steady state {} cycles; stash {} bytes\n",
            self.schedule,
            self.stages,
            self.micro_batches,
            self.ticks,
            group(self.ramp_cycles),
            100.0 * self.ramp_cycles as f64 / total.max(1) as f64,
            group(self.steady_cycles),
            group(self.stash_bytes),
        );
        let _ = writeln!(
            s,
            "{:<22} {:>4} {:>15} {:>6} {:>13}  micro-batch per tick",
            "segment", "IPU", "cycles (each)", "slots", "stash (bytes)"
        );
        let width = self
            .micro_batches
            .saturating_sub(1)
            .to_string()
            .len()
            .max(1);
        let columns = self.timeline_columns();
        for seg in &self.segments {
            let row: Vec<String> = columns
                .iter()
                .map(|c| match c.map(|t| self.micro_batch(seg, t)) {
                    None => format!("{:>width$}", "…"),
                    Some(Some(m)) => format!("{m:>width$}"),
                    Some(None) => format!("{:>width$}", "."),
                })
                .collect();
            let _ = writeln!(
                s,
                "{:<22} {:>4} {:>15} {:>6} {:>13}  {}",
                seg.name,
                seg.ipu,
                group(seg.cycles),
                seg.stash_slots,
                group(seg.stash_bytes),
                row.join(" ")
            );
        }
        // Equal neighbouring ticks (the steady state) as one entry with a count.
        let mut ticks: Vec<String> = Vec::new();
        let mut i = 0;
        while i < self.tick_cycles.len() {
            let c = self.tick_cycles[i];
            let run = self.tick_cycles[i..]
                .iter()
                .take_while(|&&d| d == c)
                .count();
            ticks.push(match run {
                1 => group(c),
                n => format!("{} x {n}", group(c)),
            });
            i += run;
        }
        let _ = writeln!(s, "tick cycles: {}", ticks.join(", "));
        s
    }

    /// The micro-batch `seg` runs in tick `t`, if any (`Pipeline::micro_batch`).
    fn micro_batch(&self, seg: &SegmentReport, t: u32) -> Option<u32> {
        let d = t.checked_sub(seg.offset)?;
        let k = self.ticks_per_micro_batch.max(1);
        (d % k == 0 && d / k < self.micro_batches).then_some(d / k)
    }

    /// The ticks the text timeline shows, `None` standing for the ticks it leaves out: every
    /// tick of a short pass; of a long one the ramp-up, the ramp-down and
    /// the steady ticks of [`STEADY_SHOWN`] micro-batches after and before them.
    fn timeline_columns(&self) -> Vec<Option<u32>> {
        let span = match self.micro_batches {
            0 => 0,
            m => (m - 1) * self.ticks_per_micro_batch + 1,
        };
        let ramp = self.ticks.saturating_sub(span);
        let lead = ramp + STEADY_SHOWN * self.ticks_per_micro_batch;
        if self.ticks <= 2 * lead + 1 {
            return (0..self.ticks).map(Some).collect();
        }
        (0..lead)
            .map(Some)
            .chain(std::iter::once(None))
            .chain((self.ticks - lead..self.ticks).map(Some))
            .collect()
    }
}

/// The first pipeline in `p`.
fn find(p: &Program) -> Option<&Pipeline> {
    match p {
        Program::Pipeline(pl) => Some(pl),
        Program::Sequence(c) => c.iter().find_map(find),
        Program::Repeat { body, .. } => find(body),
        Program::If {
            then, otherwise, ..
        } => find(then).or_else(|| find(otherwise)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two stages (Grouped offsets 0, 1, 1, 2) over `m` micro-batches, every segment 10
    /// cycles: ramp ticks of 10 and 20 cycles, steady ticks of 30.
    fn two_stages(m: u32) -> PipelineReport {
        let seg = |name: &str, ipu, offset| SegmentReport {
            name: name.into(),
            ipu,
            offset,
            cycles: 10,
            stash_slots: 0,
            stash_bytes: 0,
        };
        let ticks = m + 2;
        let tick_cycles: Vec<u64> = (0..ticks)
            .map(|t| match t {
                0 => 10,
                t if t == ticks - 1 => 10,
                _ => 30,
            })
            .collect();
        PipelineReport {
            schedule: "Grouped".into(),
            ticks_per_micro_batch: 1,
            stages: 2,
            micro_batches: m,
            ticks,
            ramp_cycles: 20,
            steady_cycles: tick_cycles.iter().sum::<u64>() - 20,
            tick_cycles,
            stash_bytes: 0,
            segments: vec![
                seg("stage 0 forward", 0, 0),
                seg("stage 1 forward", 1, 1),
                seg("stage 1 backward", 1, 1),
                seg("stage 0 backward", 0, 2),
            ],
        }
    }

    /// The timeline part of `segment`'s line (after its 66 columns of figures).
    fn row<'a>(text: &'a str, segment: &str) -> &'a str {
        let line = text.lines().find(|l| l.starts_with(segment)).unwrap();
        &line[66..]
    }

    #[test]
    fn a_short_pass_shows_every_tick() {
        let text = two_stages(4).text(|c| c.to_string());
        assert_eq!(row(&text, "stage 0 backward"), ". . 0 1 2 3");
        assert!(text.contains("tick cycles: 10, 30 x 4, 10\n"), "{text}");
    }

    #[test]
    fn a_long_pass_leaves_out_the_middle_of_its_steady_state() {
        let text = two_stages(100).text(|c| c.to_string());
        // The ramp (2 ticks) and 3 steady ticks at each end, the middle left out.
        assert_eq!(
            row(&text, "stage 0 forward"),
            " 0  1  2  3  4  … 97 98 99  .  ."
        );
        assert_eq!(
            row(&text, "stage 0 backward"),
            " .  .  0  1  2  … 95 96 97 98 99"
        );
        assert!(text.contains("tick cycles: 10, 30 x 100, 10\n"), "{text}");
    }
}

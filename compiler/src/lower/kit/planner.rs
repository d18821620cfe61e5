//! The matmul planner: PopLibs treats a matmul as a 1-D convolution and searches a partition
//! of its groups, rows (batch), reduction (input channels) and columns (output channels)
//! over tiles (ipu-hardware.md §5.3). So do we, minimising estimated cycles — input
//! exchange, AMP compute, the cross-tile reduction of partials when the reduction is split,
//! and the syncs — within the temporary-memory budget `available_memory_proportion ×
//! bytes_per_tile`. When even the smallest partition does not fit, the output rows are
//! computed in serial chunks that reuse the same temporary memory (PopLibs' serial split);
//! when nothing fits at all, the plan with the least memory is returned (the memory plan
//! then reports the tiles out of memory).
//!
//! Costs use the same estimators as the cycle report, so the planner cannot disagree with
//! the report about which plan is faster. A tiny matmul stays on one tile: spreading it adds
//! exchange and reduction supersteps that cost more than the compute saved.

use crate::codelets::MatrixLayout;
use crate::cycles::vertex::{amp_block_cycles, reduce_block_cycles};
use crate::target::Target;
use ipusim_exe::cycles::conv_reduce::multi_stage_reduce_plan;
use ipusim_ir::DType;

/// The problem: `g` independent `m × k × n` matmuls.
#[derive(Clone, Debug)]
pub(crate) struct Problem {
    pub g: u64,
    pub m: u64,
    pub k: u64,
    pub n: u64,
    pub input: DType,
    pub partials: DType,
    pub output: DType,
    pub a_layout: MatrixLayout,
    pub b_layout: MatrixLayout,
}

/// A partition of a [`Problem`] over tiles.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Plan {
    /// Serial chunks of the rows (each chunk uses the same tiles and temporary memory).
    pub serial: u64,
    /// Splits of groups, rows (per chunk), reduction and columns.
    pub sg: u64,
    pub sm: u64,
    pub sk: u64,
    pub sn: u64,
    /// Block sizes: groups, rows, reduction, columns per tile.
    pub bg: u64,
    pub bm: u64,
    pub bk: u64,
    pub bn: u64,
    /// First tile (blocks take consecutive tiles from here, wrapping).
    pub start_tile: u32,
    /// Estimated cycles.
    pub cycles: u64,
    /// Estimated temporary bytes on the busiest tile.
    pub temp_bytes: u64,
    /// True when `temp_bytes` is within the budget.
    pub fits: bool,
    /// True for the one-tile plan on the tile that already holds the inputs.
    pub home: bool,
}

impl Plan {
    /// Tiles used by one chunk.
    pub fn tiles(&self) -> u64 {
        self.sg * self.sm * self.sk * self.sn
    }

    /// The tile of block `(gi, mi, ni, ki)`.
    pub fn tile(&self, target: &Target, gi: u64, mi: u64, ni: u64, ki: u64) -> u32 {
        let i = ((gi * self.sm + mi) * self.sn + ni) * self.sk + ki;
        ((self.start_tile as u64 + i) % target.tiles as u64) as u32
    }
}

/// Candidate split counts of `units` grains: a geometric ladder, normalised so that each
/// candidate gives distinct block sizes.
fn candidates(units: u64, max: u64) -> Vec<u64> {
    const LADDER: [u64; 36] = [
        1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128,
        160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 1024, 1472,
    ];
    let units = units.max(1);
    let mut out: Vec<u64> = LADDER
        .iter()
        .copied()
        .chain([units, max])
        .filter(|&s| s >= 1 && s <= units.min(max))
        .map(|s| units.div_ceil(units.div_ceil(s)))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Memory in buckets of 25% (logarithmic).
fn bucket(bytes: u64) -> u64 {
    ((bytes.max(1) as f64).ln() / 1.25f64.ln()) as u64
}

/// Inputs of the cost of one plan.
struct Costing<'a> {
    target: &'a Target,
    p: &'a Problem,
    budget: u64,
}

impl Costing<'_> {
    /// Cycles and temporary bytes of one chunk with blocks `bg × bm × bk × bn` and `sk`
    /// reduction splits; `remote` overrides the exchanged input bytes and messages (a
    /// one-tile plan where the inputs already are).
    fn chunk(
        &self,
        bg: u64,
        bm: u64,
        bk: u64,
        bn: u64,
        sk: u64,
        remote: Option<(u64, u64)>,
    ) -> (u64, u64) {
        let t = self.target;
        let p = self.p;
        let es = p.input.size_bytes() as u64;
        let ps = p.partials.size_bytes() as u64;
        let os = p.output.size_bytes() as u64;
        let bpc = t.exchange_bytes_per_cycle.max(1) as u64;
        let msg = t.exchange_message_cycles as u64;
        let sync = t.sync_cycles as u64;
        let lat = t.exchange_latency_cycles as u64;
        let staged = es * bg * (bm * bk + bk * bn);
        let rows_a = if p.a_layout == MatrixLayout::RowMajor {
            bm
        } else {
            bk
        };
        let rows_b = if p.b_layout == MatrixLayout::RowMajor {
            bk
        } else {
            bn
        };
        let (bytes, msgs) = remote.unwrap_or((staged, bg * (rows_a + rows_b)));
        let mut cycles = sync;
        if bytes > 0 {
            cycles += lat + bytes.div_ceil(bpc) + msgs * msg;
        }
        cycles += bg * amp_block_cycles(t, p.input, p.partials, bm, bk, bn);
        let e = bg * bm * bn;
        let mut temp = staged;
        if sk > 1 {
            // Each stage of the sum (`multi_stage_reduce_plan`): a reducing tile receives
            // its chunk of each other partial of its section and sums them.
            let mut depth = sk;
            // PopLibs' default `enableMultiStageReduce`.
            let stages = multi_stage_reduce_plan(u32::try_from(sk).unwrap_or(u32::MAX), true);
            for d in stages.into_iter().map(u64::from).chain([1]) {
                let sources = depth.div_ceil(d);
                let chunk = e.div_ceil((sk / d).max(1));
                let recv = ps * chunk * (sources - 1);
                cycles += sync + lat + recv.div_ceil(bpc) + sources * msg;
                cycles += reduce_block_cycles(t, p.partials, p.partials, sources, chunk);
                depth = d;
            }
            let chunk = e.div_ceil(sk);
            temp += ps * e + ps * chunk * sk + os * chunk;
        } else {
            temp += os * e;
        }
        (cycles, temp)
    }
}

/// Where the inputs already are, for the one-tile candidate: the tile holding most of them,
/// and the bytes and messages (rows) that would still have to reach it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Home {
    pub tile: u32,
    pub remote_bytes: u64,
    pub remote_rows: u64,
}

/// Plans `p` on `target`, with the one-tile candidate at `home` if given.
pub(crate) fn plan(target: &Target, proportion: f64, p: &Problem, home: Option<Home>) -> Plan {
    let budget = (proportion * target.bytes_per_tile as f64) as u64;
    let c = Costing { target, p, budget };
    let tiles = target.tiles as u64;
    let ig = target.amp(p.input, p.partials).input_channels as u64;
    let og = target.amp(p.input, p.partials).output_channels as u64;
    let (units_k, units_n) = (p.k.div_ceil(ig), p.n.div_ceil(og));
    let mut best: Option<Plan> = None;
    let mut consider = |cand: Plan| {
        let better = match &best {
            None => true,
            Some(b) => match (cand.fits, b.fits) {
                (true, false) => true,
                (false, true) => false,
                (true, true) => {
                    (cand.cycles, cand.tiles(), cand.temp_bytes)
                        < (b.cycles, b.tiles(), b.temp_bytes)
                }
                // Nothing fits: the least memory, but among plans within 25% of each other in
                // memory the fastest (an operand too large for the chip must not turn the
                // plan into dozens of serial chunks for a few bytes).
                (false, false) => {
                    (bucket(cand.temp_bytes), cand.cycles) < (bucket(b.temp_bytes), b.cycles)
                }
            },
        };
        if better {
            best = Some(cand);
        }
    };
    // Everything on one tile, at `start`, with `remote` (bytes, rows) still to exchange.
    let one_tile = |start: u32, remote: Option<(u64, u64)>, home: bool| {
        let (cycles, temp) = c.chunk(p.g, p.m, p.k, p.n, 1, remote);
        Plan {
            serial: 1,
            sg: 1,
            sm: 1,
            sk: 1,
            sn: 1,
            bg: p.g,
            bm: p.m,
            bk: p.k,
            bn: p.n,
            start_tile: start,
            cycles,
            temp_bytes: temp,
            fits: temp <= c.budget,
            home,
        }
    };
    if let Some(h) = home {
        consider(one_tile(
            h.tile,
            Some((h.remote_bytes, h.remote_rows)),
            true,
        ));
    }
    let mut serial = 1u64;
    let mut last_min_temp = u64::MAX;
    loop {
        let mc = p.m.div_ceil(serial);
        let mut any_fit = false;
        let mut min_temp = u64::MAX;
        for sg in candidates(p.g, tiles) {
            let bg = p.g.div_ceil(sg);
            for sm in candidates(mc, tiles / sg) {
                let bm = mc.div_ceil(sm);
                for sn in candidates(units_n, tiles / (sg * sm)) {
                    let bn = (units_n.div_ceil(sn) * og).min(p.n);
                    for sk in candidates(units_k, tiles / (sg * sm * sn)) {
                        let bk = (units_k.div_ceil(sk) * ig).min(p.k);
                        let (cycles, temp) = c.chunk(bg, bm, bk, bn, sk, None);
                        let fits = temp <= c.budget;
                        any_fit |= fits;
                        min_temp = min_temp.min(temp);
                        consider(Plan {
                            serial,
                            sg,
                            sm,
                            sk,
                            sn,
                            bg,
                            bm,
                            bk,
                            bn,
                            start_tile: 0,
                            cycles: cycles * serial,
                            temp_bytes: temp,
                            fits,
                            home: false,
                        });
                    }
                }
            }
        }
        // More serial chunks only help while they shrink the temporary memory (they split
        // the rows: A and the output, not B).
        if any_fit || serial >= p.m || serial >= 64 || min_temp as f64 >= 0.9 * last_min_temp as f64
        {
            break;
        }
        last_min_temp = min_temp;
        serial *= 2;
    }
    best.unwrap_or_else(|| one_tile(0, None, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(m: u64, k: u64, n: u64, dtype: DType) -> Problem {
        Problem {
            g: 1,
            m,
            k,
            n,
            input: dtype,
            partials: DType::F32,
            output: dtype,
            a_layout: MatrixLayout::RowMajor,
            b_layout: MatrixLayout::RowMajor,
        }
    }

    #[test]
    fn tiny_matmul_stays_on_its_home_tile() {
        let t = Target::mk2();
        let plan = plan(
            &t,
            crate::options::CompileOptions::default().available_memory_proportion,
            &problem(4, 4, 4, DType::F32),
            Some(Home {
                tile: 17,
                remote_bytes: 0,
                remote_rows: 0,
            }),
        );
        assert_eq!(plan.tiles(), 1);
        assert_eq!(plan.start_tile, 17);
    }

    #[test]
    fn large_matmul_uses_the_chip_within_budget() {
        let t = Target::mk2();
        let plan = plan(
            &t,
            crate::options::CompileOptions::default().available_memory_proportion,
            &problem(1024, 1024, 1024, DType::F16),
            None,
        );
        assert!(plan.tiles() > 1000, "{plan:?}");
        assert!(plan.fits, "{plan:?}");
        let candidates = candidates(1000, 1472);
        assert!(candidates.contains(&1) && candidates.contains(&1000));
    }

    #[test]
    fn memory_pressure_chooses_a_serial_split() {
        let t = Target::mk2();
        let plan = plan(
            &t,
            crate::options::CompileOptions::default().available_memory_proportion,
            &problem(4096, 4096, 4096, DType::F16),
            None,
        );
        assert!(plan.fits, "{plan:?}");
        assert!(plan.serial > 1, "{plan:?}");
    }
}

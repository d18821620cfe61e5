//! Cycle accounting: the functions the simulator calls while executing, and the static
//! estimate (the program tree walked with repeat counts multiplied).
//!
//! The simulator must charge, for each program step it executes:
//! - `Execute(cs)`: [`compute_set_cycles`] (category OnTileExecute); per tile
//!   [`tile_work_cycles`];
//! - `Exchange(ex)`: [`exchange_cycles`] (DoExchange); per tile [`exchange_tile_cycles`];
//! - `Sync`: [`sync_cycles`] (Sync);
//! - `StreamCopy`: [`stream_copy_cycles`] of the stream's bytes per micro-batch (StreamCopy);
//! - `If`: [`sync_cycles`] to broadcast the condition (Sync), then the branch taken.
//!
//! With these, a program without data-dependent control flow executes exactly
//! [`CycleEstimate::total_cycles`] cycles.
//!
//! Every figure is computed with saturating arithmetic: a figure that would pass `u64::MAX`
//! stays there (and so does every sum it enters), so a report never shows a wrapped figure;
//! [`CycleEstimate::saturated`] tells the front ends, which refuse such a report.

use crate::codelets::estimate::group_cycles;
use crate::executable::{ComputeSet, Exchange, Executable, Program, TileWork};
use crate::target::Target;
use serde::{Deserialize, Serialize};

/// Cycles of one tile in a compute set: its vertex groups run one after the other.
pub fn tile_work_cycles(target: &Target, work: &TileWork) -> u64 {
    work.groups
        .iter()
        .map(|g| group_cycles(target, g).total)
        .fold(0, u64::saturating_add)
}

/// Cycles of a compute set: the slowest tile (all tiles start together after a sync).
pub fn compute_set_cycles(target: &Target, cs: &ComputeSet) -> u64 {
    cs.tiles
        .iter()
        .map(|t| tile_work_cycles(target, t))
        .max()
        .unwrap_or(0)
}

/// Exchange cycles of each tile that takes part, sorted by tile.
///
/// A copy costs its sender `ceil(bytes / exchange_bytes_per_cycle) + exchange_message_cycles`
/// once, however many remote destinations receive it (the exchange broadcasts), and each
/// remote destination the same to receive it; an on-tile destination costs
/// `ceil(bytes / memcpy_bytes_per_cycle) + exchange_message_cycles` on that tile. A tile's
/// cycles are `max(send, receive) + on-tile copies` (it sends and receives concurrently).
pub fn exchange_tile_cycles(target: &Target, ex: &Exchange) -> Vec<(u32, u64)> {
    let bpc = target.exchange_bytes_per_cycle.max(1) as u64;
    let mbpc = target.memcpy_bytes_per_cycle.max(1) as u64;
    let msg = target.exchange_message_cycles as u64;
    // (send, receive, local) per tile.
    let mut per: Vec<[u64; 3]> = vec![[0; 3]; target.tiles as usize];
    let mut touched: Vec<u32> = Vec::new();
    let mut add = |tile: u32, k: usize, v: u64| {
        if let Some(e) = per.get_mut(tile as usize) {
            if *e == [0; 3] {
                touched.push(tile);
            }
            e[k] = e[k].saturating_add(v);
        }
    };
    for c in &ex.copies {
        let bytes = c.bytes as u64;
        let xfer = bytes.div_ceil(bpc) + msg;
        let mut remote = false;
        for d in &c.dsts {
            if d.tile == c.src_tile {
                add(d.tile, 2, bytes.div_ceil(mbpc) + msg);
            } else {
                remote = true;
                add(d.tile, 1, xfer);
            }
        }
        if remote {
            add(c.src_tile, 0, xfer);
        }
    }
    touched.sort_unstable();
    touched
        .into_iter()
        .map(|t| {
            let [s, r, l] = per[t as usize];
            (t, s.max(r).saturating_add(l))
        })
        .collect()
}

/// Cycles of an exchange: the fixed latency plus the busiest tile (0 for no copies).
pub fn exchange_cycles(target: &Target, ex: &Exchange) -> u64 {
    if ex.copies.is_empty() {
        return 0;
    }
    let busiest = exchange_tile_cycles(target, ex)
        .into_iter()
        .map(|(_, c)| c)
        .max()
        .unwrap_or(0);
    (target.exchange_latency_cycles as u64).saturating_add(busiest)
}

/// Cycles of one internal sync.
pub fn sync_cycles(target: &Target) -> u64 {
    target.sync_cycles as u64
}

/// Cycles of one stream copy of `bytes`: the host round trip plus the transfer.
pub fn stream_copy_cycles(target: &Target, bytes: u64) -> u64 {
    (target.stream_copy_latency_cycles as u64).saturating_add(target.host_transfer_cycles(bytes))
}

/// Cycles of one compute set over the whole program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComputeSetCycles {
    /// Compute-set name.
    pub name: String,
    /// Cycles of one execution.
    pub cycles_per_execution: u64,
    /// Executions per program run (repeat counts multiplied).
    pub executions: u64,
    /// `cycles_per_execution × executions`.
    pub cycles: u64,
    /// Tiles with vertices.
    pub tiles_used: u32,
}

/// Cycles of one exchange over the whole program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExchangeCycles {
    /// Exchange name.
    pub name: String,
    /// Cycles of one execution.
    pub cycles_per_execution: u64,
    /// Executions per program run.
    pub executions: u64,
    /// `cycles_per_execution × executions`.
    pub cycles: u64,
    /// Bytes moved per execution (remote and on-tile destinations).
    pub bytes: u64,
}

/// The static cycle estimate of one program run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CycleEstimate {
    /// Sum of the four categories.
    pub total_cycles: u64,
    /// Compute phases.
    pub on_tile_execute: u64,
    /// Exchange phases.
    pub do_exchange: u64,
    /// Syncs.
    pub sync: u64,
    /// Host stream copies.
    pub stream_copy: u64,
    /// Per compute set, in id order.
    pub compute_sets: Vec<ComputeSetCycles>,
    /// Per exchange, in id order.
    pub exchanges: Vec<ExchangeCycles>,
    /// Bytes moved over host streams per run: host to device.
    pub stream_bytes_in: u64,
    /// Bytes moved over host streams per run: device to host.
    pub stream_bytes_out: u64,
    /// Tile balance: `Σ_cs executions × Σ_tiles cycles(cs, tile)` divided by
    /// `used_tiles × on_tile_execute`, where `used_tiles` are the tiles with vertices in at
    /// least one compute set. It is the mean, over used tiles, of the fraction of
    /// OnTileExecute time the tile computes; 1.0 means every used tile is busy for the whole
    /// of every compute phase (0.0 when nothing computes).
    pub tile_balance: f64,
    /// Tiles with vertices in at least one compute set.
    pub used_tiles: u32,
}

impl CycleEstimate {
    /// Whether a figure reached `u64::MAX` (a sum or product saturated): the figures are
    /// then bounds, not counts.
    pub fn saturated(&self) -> bool {
        [
            self.total_cycles,
            self.stream_bytes_in,
            self.stream_bytes_out,
        ]
        .contains(&u64::MAX)
    }
}

#[derive(Default, Clone, Copy)]
struct Totals {
    execute: u64,
    exchange: u64,
    sync: u64,
    stream: u64,
}

impl Totals {
    fn total(&self) -> u64 {
        self.execute
            .saturating_add(self.exchange)
            .saturating_add(self.sync)
            .saturating_add(self.stream)
    }
}

/// Walks the program of `exe` (whose compute sets and exchanges already carry their cycles)
/// and builds the static estimate.
pub fn estimate(exe: &Executable) -> CycleEstimate {
    let mut cs_exec = vec![0u64; exe.compute_sets.len()];
    let mut ex_exec = vec![0u64; exe.exchanges.len()];
    let mut bytes = (0u64, 0u64);
    let totals = walk(exe, &exe.program, 1, &mut cs_exec, &mut ex_exec, &mut bytes);
    let compute_sets: Vec<ComputeSetCycles> = exe
        .compute_sets
        .iter()
        .zip(&cs_exec)
        .map(|(cs, &n)| ComputeSetCycles {
            name: cs.name.clone(),
            cycles_per_execution: cs.cycles,
            executions: n,
            cycles: cs.cycles.saturating_mul(n),
            tiles_used: cs.tiles.len() as u32,
        })
        .collect();
    let exchanges = exe
        .exchanges
        .iter()
        .zip(&ex_exec)
        .map(|(ex, &n)| ExchangeCycles {
            name: ex.name.clone(),
            cycles_per_execution: ex.cycles,
            executions: n,
            cycles: ex.cycles.saturating_mul(n),
            bytes: ex.total_bytes(),
        })
        .collect();
    let mut used = vec![false; exe.target.tiles as usize];
    let mut busy: u128 = 0;
    for (cs, &n) in exe.compute_sets.iter().zip(&cs_exec) {
        for t in &cs.tiles {
            if let Some(u) = used.get_mut(t.tile as usize) {
                *u = true;
            }
            busy += t.cycles as u128 * n as u128;
        }
    }
    let used_tiles = used.iter().filter(|&&u| u).count() as u32;
    let denominator = used_tiles as u128 * totals.execute as u128;
    let tile_balance = if denominator == 0 {
        0.0
    } else {
        busy as f64 / denominator as f64
    };
    CycleEstimate {
        total_cycles: totals.total(),
        on_tile_execute: totals.execute,
        do_exchange: totals.exchange,
        sync: totals.sync,
        stream_copy: totals.stream,
        compute_sets,
        exchanges,
        stream_bytes_in: bytes.0,
        stream_bytes_out: bytes.1,
        tile_balance,
        used_tiles,
    }
}

fn walk(
    exe: &Executable,
    p: &Program,
    times: u64,
    cs_exec: &mut [u64],
    ex_exec: &mut [u64],
    bytes: &mut (u64, u64),
) -> Totals {
    let mut t = Totals::default();
    match p {
        Program::Sequence(children) => {
            for c in children {
                let s = walk(exe, c, times, cs_exec, ex_exec, bytes);
                t.execute = t.execute.saturating_add(s.execute);
                t.exchange = t.exchange.saturating_add(s.exchange);
                t.sync = t.sync.saturating_add(s.sync);
                t.stream = t.stream.saturating_add(s.stream);
            }
        }
        Program::Execute(id) => {
            cs_exec[id.0 as usize] = cs_exec[id.0 as usize].saturating_add(times);
            t.execute = exe.compute_set(*id).cycles.saturating_mul(times);
        }
        Program::Exchange(id) => {
            ex_exec[id.0 as usize] = ex_exec[id.0 as usize].saturating_add(times);
            t.exchange = exe.exchange(*id).cycles.saturating_mul(times);
        }
        Program::Repeat { count, body } => {
            t = walk(
                exe,
                body,
                times.saturating_mul(*count as u64),
                cs_exec,
                ex_exec,
                bytes,
            );
        }
        Program::StreamCopy {
            stream, direction, ..
        } => {
            let b = exe.streams[stream.0 as usize].bytes_per_micro_batch;
            match direction {
                crate::executable::StreamDirection::HostToDevice => {
                    bytes.0 = bytes.0.saturating_add(b.saturating_mul(times))
                }
                crate::executable::StreamDirection::DeviceToHost => {
                    bytes.1 = bytes.1.saturating_add(b.saturating_mul(times))
                }
            }
            t.stream = stream_copy_cycles(&exe.target, b).saturating_mul(times);
        }
        Program::Sync => t.sync = sync_cycles(&exe.target).saturating_mul(times),
        Program::If {
            then, otherwise, ..
        } => {
            let a = walk(exe, then, times, cs_exec, ex_exec, bytes);
            let b = walk(exe, otherwise, times, cs_exec, ex_exec, bytes);
            t = if a.total() >= b.total() { a } else { b };
            t.sync = t
                .sync
                .saturating_add(sync_cycles(&exe.target).saturating_mul(times));
        }
    }
    t
}

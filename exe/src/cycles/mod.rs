//! Cycle accounting: the functions the simulator calls while executing, and the static
//! estimate (the program tree walked with repeat counts multiplied).
//!
//! The simulator must charge, for each program step it executes:
//! - `Execute(cs)`: [`compute_set_cycles`] (category OnTileExecute); per tile
//!   [`tile_work_cycles`];
//! - `Exchange(ex)`: [`exchange_cycles`] (DoExchange); per tile [`exchange_tile_cycles`];
//! - `Sync(scope)`: [`System::sync_cycles`] of its scope (Sync; an internal sync is
//!   [`sync_cycles`]);
//! - `IpuCopy(ex)`: [`ipu_copy_cycles`] (DoExchange);
//! - `CrossReplica`: [`cross_replica_cycles`] (DoExchange; 0 with one replica);
//! - `StreamCopy`: [`stream_copy_cycles`] of the stream's bytes per micro-batch (StreamCopy);
//! - `If`: [`sync_cycles`] to broadcast the condition (Sync), then the branch taken.
//!
//! With these, a program without data-dependent control flow executes exactly
//! [`CycleEstimate::total_cycles`] cycles.
//!
//! Every figure is computed with saturating arithmetic: a figure that would pass `u64::MAX`
//! stays there (and so does every sum it enters), so a report never shows a wrapped figure;
//! [`CycleEstimate::saturated`] tells the front ends, which refuse such a report.

pub mod conv;
mod conv_amp;
mod conv_mac;
pub mod conv_reduce;
mod saturating;
pub mod vertex;
pub mod window;

pub use crate::estimate::{ComputeSetCycles, CycleEstimate, ExchangeCycles, IpuCycles};
use crate::executable::{
    CollectiveOp, ComputeSet, Exchange, Executable, Program, TensorId, TileWork, VertexGroup,
};
use crate::system::{System, TileId};
use crate::target::Target;
use rayon::prelude::*;
use vertex::group_total;

/// Cycles of one tile in a compute set ([`groups_cycles`] of its groups).
pub fn tile_work_cycles(target: &Target, work: &TileWork) -> u64 {
    groups_cycles(target, &work.groups)
}

/// Cycles of a tile's vertex `groups` in a compute set: they run one after the other, but
/// for the reduction groups whose vertices each have a worker of their own
/// ([`vertex::shares_workers`]): those are worker vertices that Poplar runs side by side on
/// the tile's worker contexts, so their workers' cycles add up per worker and the tile pays
/// for its busiest worker once (`worker_contexts × max`, as one group does), plus each
/// group's supervisor cycles.
pub fn groups_cycles(target: &Target, groups: &[VertexGroup]) -> u64 {
    let nw = target.worker_contexts.max(1) as usize;
    let mut shared = smallvec::SmallVec::<[u64; 8]>::from_elem(0, nw);
    let (mut sequential, mut supervisors, mut any) = (0u64, 0u64, false);
    for g in groups {
        if vertex::shares_workers(g) {
            supervisors =
                supervisors.saturating_add(vertex::add_worker_cycles(target, g, &mut shared));
            any = true;
        } else {
            sequential = sequential.saturating_add(group_total(target, g));
        }
    }
    if !any {
        return sequential;
    }
    let busiest = shared.iter().copied().max().unwrap_or(0);
    sequential
        .saturating_add(supervisors)
        .saturating_add((nw as u64).saturating_mul(busiest))
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
pub fn exchange_tile_cycles(target: &Target, ex: &Exchange) -> Vec<(TileId, u64)> {
    let bpc = target.exchange_bytes_per_cycle.max(1) as u64;
    let mbpc = target.memcpy_bytes_per_cycle.max(1) as u64;
    let msg = target.exchange_message_cycles as u64;
    // (send, receive, local) per tile. An exchange stays on one IPU (the verifier checks it;
    // inter-IPU copies are `Program::IpuCopy`), so a tile's number on its IPU indexes it.
    let mut per: Vec<[u64; 3]> = vec![[0; 3]; target.tiles as usize];
    let mut touched: Vec<TileId> = Vec::new();
    let mut add = |tile: TileId, k: usize, v: u64| {
        if let Some(e) = per.get_mut(tile.tile() as usize) {
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
            let [s, r, l] = per[t.tile() as usize];
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

/// Cycles of a cross-replica collective `op` reading `tensor` (writing `dst`, if any): a ring
/// all-reduce of `tensor`'s bytes ([`System::all_reduce_cycles`]); half the ring
/// ([`System::reduce_scatter_cycles`]) for a reduce-scatter of `tensor` or an all-gather
/// into `dst` (the whole tensor's bytes).
pub fn cross_replica_cycles(
    exe: &Executable,
    op: CollectiveOp,
    tensor: TensorId,
    dst: Option<TensorId>,
) -> u64 {
    let bytes = |t: TensorId| exe.tensors.get(t.0 as usize).map_or(0, |t| t.size_bytes());
    match op {
        CollectiveOp::AllReduceSum | CollectiveOp::AllReduceMean => {
            exe.system.all_reduce_cycles(&exe.target, bytes(tensor))
        }
        CollectiveOp::ReduceScatterMean => {
            exe.system.reduce_scatter_cycles(&exe.target, bytes(tensor))
        }
        CollectiveOp::AllGather => exe
            .system
            .reduce_scatter_cycles(&exe.target, dst.map_or(0, bytes)),
    }
}

/// Cycles of an inter-IPU copy ([`Program::IpuCopy`]): the busiest IPU-Link direction, i.e.
/// the most bytes any one (source IPU, destination IPU) pair moves, at one link's rate plus
/// its latency ([`System::link_copy_cycles`]); broadcast destinations on one IPU take the
/// bytes once. 0 for no copies.
pub fn ipu_copy_cycles(target: &Target, system: &System, ex: &Exchange) -> u64 {
    let mut pairs: Vec<((u32, u32), u64)> = Vec::new();
    for c in &ex.copies {
        let mut ipus: Vec<u32> = c.dsts.iter().map(|d| d.tile.ipu()).collect();
        ipus.sort_unstable();
        ipus.dedup();
        for ipu in ipus.into_iter().filter(|&i| i != c.src_tile.ipu()) {
            let key = (c.src_tile.ipu(), ipu);
            match pairs.iter_mut().find(|(k, _)| *k == key) {
                Some((_, b)) => *b = b.saturating_add(c.bytes as u64),
                None => pairs.push((key, c.bytes as u64)),
            }
        }
    }
    match pairs.iter().map(|&(_, b)| b).max() {
        Some(bytes) => system.link_copy_cycles(target, bytes),
        None => 0,
    }
}

/// Cycles of one internal sync.
pub fn sync_cycles(target: &Target) -> u64 {
    target.sync_cycles as u64
}

/// Cycles of a remote-buffer copy ([`Program::RemoteCopy`]) of `bytes`: streaming memory is
/// reached over the chip's host link (our choice: no separate figure for an IPU-M2000's
/// streaming memory was found), so it costs as a stream copy of as many bytes.
pub fn remote_copy_cycles(target: &Target, bytes: u64) -> u64 {
    stream_copy_cycles(target, bytes)
}

/// Cycles of one stream copy of `bytes`: the host round trip plus the transfer.
pub fn stream_copy_cycles(target: &Target, bytes: u64) -> u64 {
    (target.stream_copy_latency_cycles as u64).saturating_add(target.host_transfer_cycles(bytes))
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
    let mut counts = Counts {
        cs: vec![0u64; exe.compute_sets.len()],
        ex: vec![0u64; exe.exchanges.len()],
        st: vec![0u64; exe.streams.len()],
        cross_replica: Vec::new(),
    };
    let totals = walk(exe, &exe.program, 1, &mut counts);
    let Counts {
        cs: cs_exec,
        ex: ex_exec,
        st: st_exec,
        cross_replica,
    } = counts;
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
    // Each exchange's bytes and destination IPUs, found on the host's cores (each walks
    // every copy's destinations: tens of millions on a large CNN).
    let walked: Vec<(u64, Vec<u32>)> = exe
        .exchanges
        .par_iter()
        .map(|ex| (ex.total_bytes(), ex.dst_ipus()))
        .collect();
    let exchanges = exe
        .exchanges
        .iter()
        .zip(&ex_exec)
        .zip(&walked)
        .map(|((ex, &n), (bytes, _))| ExchangeCycles {
            name: ex.name.clone(),
            cycles_per_execution: ex.cycles,
            executions: n,
            cycles: ex.cycles.saturating_mul(n),
            bytes: *bytes,
        })
        .collect();
    // Busy tile-cycles and used tiles, over the system and per IPU.
    let nipus = exe.system.ipus.max(1) as usize;
    let mut used = vec![false; exe.num_tiles()];
    let mut busy: u128 = 0;
    let mut ipu_busy = vec![0u128; nipus];
    let mut ipu_execute = vec![0u64; nipus];
    let mut ipu_exchange = vec![0u64; nipus];
    for (cs, &n) in exe.compute_sets.iter().zip(&cs_exec) {
        // The slowest tile of each IPU (tiles are sorted by IPU, then tile).
        for on_ipu in cs.tiles.chunk_by(|a, b| a.tile.ipu() == b.tile.ipu()) {
            let slowest = on_ipu.iter().map(|t| t.cycles).max().unwrap_or(0);
            if let Some(x) = ipu_execute.get_mut(on_ipu[0].tile.ipu() as usize) {
                *x = x.saturating_add(slowest.saturating_mul(n));
            }
        }
        for t in &cs.tiles {
            if let Some(u) = used.get_mut(exe.tile_index(t.tile)) {
                *u = true;
            }
            let b = t.cycles as u128 * n as u128;
            busy = busy.saturating_add(b);
            if let Some(x) = ipu_busy.get_mut(t.tile.ipu() as usize) {
                *x = x.saturating_add(b);
            }
        }
    }
    for ((ex, &n), (_, ipus)) in exe.exchanges.iter().zip(&ex_exec).zip(&walked) {
        for &ipu in ipus {
            if let Some(x) = ipu_exchange.get_mut(ipu as usize) {
                *x = x.saturating_add(ex.cycles.saturating_mul(n));
            }
        }
    }
    // A collective runs over the links of the IPU holding its tensor.
    for &(op, tensor, dst, times) in &cross_replica {
        if let Some(x) = ipu_exchange.get_mut(exe.tensor_ipu(tensor) as usize) {
            let c = cross_replica_cycles(exe, op, tensor, dst);
            *x = x.saturating_add(c.saturating_mul(times));
        }
    }
    let balance = |busy: u128, used_tiles: u32| {
        let denominator = used_tiles as u128 * totals.execute as u128;
        if denominator == 0 {
            0.0
        } else {
            busy as f64 / denominator as f64
        }
    };
    let used_tiles = used.iter().filter(|&&u| u).count() as u32;
    let tile_balance = balance(busy, used_tiles);
    let per_ipu = exe.target.tiles.max(1) as usize;
    let mut ipus: Vec<IpuCycles> = (0..nipus)
        .map(|ipu| {
            let used_tiles = used
                .iter()
                .skip(ipu * per_ipu)
                .take(per_ipu)
                .filter(|&&u| u)
                .count() as u32;
            IpuCycles {
                ipu: ipu as u32,
                used_tiles,
                tile_balance: balance(ipu_busy[ipu], used_tiles),
                stream_bytes_in: 0,
                stream_bytes_out: 0,
                execute_cycles: ipu_execute[ipu],
                exchange_cycles: ipu_exchange[ipu],
            }
        })
        .collect();
    let mut bytes = (0u64, 0u64);
    for (s, &n) in exe.streams.iter().zip(&st_exec) {
        let b = s.bytes_per_micro_batch.saturating_mul(n);
        // A stream lands on (or leaves from) the IPU that holds its tensor.
        let row = ipus.get_mut(exe.tensor_ipu(s.tensor) as usize);
        match s.direction {
            crate::executable::StreamDirection::HostToDevice => {
                bytes.0 = bytes.0.saturating_add(b);
                if let Some(r) = row {
                    r.stream_bytes_in = r.stream_bytes_in.saturating_add(b);
                }
            }
            crate::executable::StreamDirection::DeviceToHost => {
                bytes.1 = bytes.1.saturating_add(b);
                if let Some(r) = row {
                    r.stream_bytes_out = r.stream_bytes_out.saturating_add(b);
                }
            }
        }
    }
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
        ipus,
    }
}

/// How many times the walk met each compute set, exchange and stream copy, and each
/// cross-replica collective (its op, tensor and destination) with its count.
struct Counts {
    cs: Vec<u64>,
    ex: Vec<u64>,
    st: Vec<u64>,
    cross_replica: Vec<(CollectiveOp, TensorId, Option<TensorId>, u64)>,
}

/// The static cycles of one run of each part of a pipeline.
struct PartCycles {
    body: Vec<Totals>,
    send: Vec<Totals>,
    restore: Vec<Vec<Totals>>,
    save: Vec<Vec<Totals>>,
}

impl PartCycles {
    fn of(exe: &Executable, pl: &crate::executable::Pipeline, like: &Counts) -> PartCycles {
        let mut scratch = Counts {
            cs: vec![0; like.cs.len()],
            ex: vec![0; like.ex.len()],
            st: vec![0; like.st.len()],
            cross_replica: Vec::new(),
        };
        let mut once = |p: &Program| walk(exe, p, 1, &mut scratch);
        let segs = &pl.segments;
        PartCycles {
            body: segs.iter().map(|s| once(&s.body)).collect(),
            send: segs.iter().map(|s| once(&s.send)).collect(),
            restore: segs
                .iter()
                .map(|s| s.restore.iter().map(&mut once).collect())
                .collect(),
            save: segs
                .iter()
                .map(|s| s.save.iter().map(&mut once).collect())
                .collect(),
        }
    }

    fn part(&self, p: crate::executable::SegmentPart) -> Totals {
        use crate::executable::SegmentPart as P;
        match p {
            P::Restore { segment, slot } => self.restore[segment][slot],
            P::Body { segment } => self.body[segment],
            P::Save { segment, slot } => self.save[segment][slot],
        }
    }

    /// A tick: its busiest IPU's parts (the first of the busiest in IPU order), then the
    /// sends of the segments that ran.
    fn tick(&self, tick: &crate::executable::Tick) -> Totals {
        let mut busiest = Totals::default();
        for (_, parts) in &tick.ipus {
            let sum = parts
                .iter()
                .fold(Totals::default(), |a, &p| add(a, self.part(p)));
            if sum.total() > busiest.total() {
                busiest = sum;
            }
        }
        tick.sends
            .iter()
            .fold(busiest, |a, &s| add(a, self.send[s]))
    }
}

/// The static cycles of one run of program `p` of `exe`.
pub fn program_cycles(exe: &Executable, p: &Program) -> u64 {
    let mut n = Counts {
        cs: vec![0; exe.compute_sets.len()],
        ex: vec![0; exe.exchanges.len()],
        st: vec![0; exe.streams.len()],
        cross_replica: Vec::new(),
    };
    walk(exe, p, 1, &mut n).total()
}

/// The cycles of each tick of a pipeline of `exe` (the static estimate's).
pub fn pipeline_tick_cycles(exe: &Executable, pl: &crate::executable::Pipeline) -> Vec<u64> {
    let like = Counts {
        cs: vec![0; exe.compute_sets.len()],
        ex: vec![0; exe.exchanges.len()],
        st: vec![0; exe.streams.len()],
        cross_replica: Vec::new(),
    };
    let pc = PartCycles::of(exe, pl, &like);
    (0..pl.ticks())
        .map(|t| pc.tick(&pl.tick(t)).total())
        .collect()
}

/// The cycles of a pipeline ([`crate::executable::Pipeline`]): per tick, its busiest IPU's
/// parts (their categories) and then the sends; every part counted as often as it runs.
fn walk_pipeline(
    exe: &Executable,
    pl: &crate::executable::Pipeline,
    times: u64,
    n: &mut Counts,
) -> Totals {
    use crate::executable::SegmentPart;
    let pc = PartCycles::of(exe, pl, n);
    let mut runs: std::collections::BTreeMap<(usize, u8, usize), u64> = Default::default();
    let mut t = Totals::default();
    for tick in 0..pl.ticks() {
        let plan = pl.tick(tick);
        t = add(t, pc.tick(&plan));
        for &p in plan.ipus.iter().flat_map(|(_, parts)| parts) {
            let key = match p {
                SegmentPart::Restore { segment, slot } => (segment, 0, slot),
                SegmentPart::Body { segment } => (segment, 1, 0),
                SegmentPart::Save { segment, slot } => (segment, 2, slot),
            };
            *runs.entry(key).or_default() += 1;
        }
        for &s in &plan.sends {
            *runs.entry((s, 3, 0)).or_default() += 1;
        }
    }
    // Count every part's executions.
    let segs = &pl.segments;
    for (&(s, kind, slot), &r) in &runs {
        let p = match kind {
            0 => &segs[s].restore[slot],
            1 => &segs[s].body,
            2 => &segs[s].save[slot],
            _ => &segs[s].send,
        };
        walk(exe, p, times.saturating_mul(r), n);
    }
    Totals {
        execute: t.execute.saturating_mul(times),
        exchange: t.exchange.saturating_mul(times),
        sync: t.sync.saturating_mul(times),
        stream: t.stream.saturating_mul(times),
    }
}

fn add(a: Totals, b: Totals) -> Totals {
    Totals {
        execute: a.execute.saturating_add(b.execute),
        exchange: a.exchange.saturating_add(b.exchange),
        sync: a.sync.saturating_add(b.sync),
        stream: a.stream.saturating_add(b.stream),
    }
}

fn walk(exe: &Executable, p: &Program, times: u64, n: &mut Counts) -> Totals {
    let mut t = Totals::default();
    match p {
        Program::Sequence(children) => {
            for c in children {
                let s = walk(exe, c, times, n);
                t.execute = t.execute.saturating_add(s.execute);
                t.exchange = t.exchange.saturating_add(s.exchange);
                t.sync = t.sync.saturating_add(s.sync);
                t.stream = t.stream.saturating_add(s.stream);
            }
        }
        Program::Execute(id) => {
            n.cs[id.0 as usize] = n.cs[id.0 as usize].saturating_add(times);
            t.execute = exe.compute_set(*id).cycles.saturating_mul(times);
        }
        Program::Exchange(id) | Program::IpuCopy(id) => {
            n.ex[id.0 as usize] = n.ex[id.0 as usize].saturating_add(times);
            t.exchange = exe.exchange(*id).cycles.saturating_mul(times);
        }
        Program::Repeat { count, body } => {
            t = walk(exe, body, times.saturating_mul(*count as u64), n);
        }
        Program::StreamCopy { stream, .. } => {
            let b = exe.streams[stream.0 as usize].bytes_per_micro_batch;
            n.st[stream.0 as usize] = n.st[stream.0 as usize].saturating_add(times);
            t.stream = stream_copy_cycles(&exe.target, b).saturating_mul(times);
        }
        Program::Sync(scope) => {
            t.sync = exe
                .system
                .sync_cycles(&exe.target, *scope)
                .saturating_mul(times)
        }
        Program::CrossReplica { op, tensor, dst } => {
            n.cross_replica.push((*op, *tensor, *dst, times));
            t.exchange = cross_replica_cycles(exe, *op, *tensor, *dst).saturating_mul(times);
        }
        Program::RemoteCopy { tensor, .. } => {
            let bytes = exe.tensor(*tensor).size_bytes();
            t.stream = remote_copy_cycles(&exe.target, bytes).saturating_mul(times);
        }
        Program::Pipeline(pl) => t = walk_pipeline(exe, pl, times, n),
        Program::If {
            then, otherwise, ..
        } => {
            let a = walk(exe, then, times, n);
            let b = walk(exe, otherwise, times, n);
            t = if a.total() >= b.total() { a } else { b };
            t.sync = t
                .sync
                .saturating_add(sync_cycles(&exe.target).saturating_mul(times));
        }
    }
    t
}

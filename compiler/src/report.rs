//! The compile report: the public JSON contract of `ipusim compile --json` (field names are
//! a contract: extend, never rename) and its readable text form. Its per-layer convolution
//! rows are `conv_report`'s, its pipeline and collectives parts `pipeline_report`'s and
//! `collectives_report`'s.

pub use crate::conv_report::ConvLayerReport;
use crate::executable::Executable;
pub use crate::program_tree::ProgramNode;
use ipusim_exe::system::TileId;
use ipusim_ir::Precision;
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// The target as reported.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetReport {
    pub name: String,
    pub tiles: u32,
    pub bytes_per_tile: u64,
    pub clock_hz: u64,
}

/// Cycles per PopVision category; they sum to `total_cycles`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Categories {
    #[serde(rename = "OnTileExecute")]
    pub on_tile_execute: u64,
    #[serde(rename = "DoExchange")]
    pub do_exchange: u64,
    #[serde(rename = "Sync")]
    pub sync: u64,
    #[serde(rename = "StreamCopy")]
    pub stream_copy: u64,
}

/// One compute set: `cycles` over the whole run (`cycles_per_execution × executions`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComputeSetReport {
    pub name: String,
    pub cycles: u64,
    pub tiles_used: u32,
    pub executions: u64,
    pub cycles_per_execution: u64,
}

/// Bytes by category over all tiles.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryCategories {
    pub variables: u64,
    pub constants: u64,
    pub vertex_state: u64,
    pub code: u64,
    pub exchange_buffers: u64,
    pub temporaries: u64,
    /// The parts of `code`, PopVision's code types.
    #[serde(default)]
    pub control_code: u64,
    #[serde(default)]
    pub vertex_code: u64,
    #[serde(default)]
    pub internal_exchange_code: u64,
    #[serde(default)]
    pub global_exchange_code: u64,
}

/// The memory part of the report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryReport {
    pub bytes_per_tile_capacity: u64,
    pub max_tile_bytes: u64,
    pub total_bytes: u64,
    pub oom: bool,
    pub oom_tiles: Vec<TileId>,
    pub categories: MemoryCategories,
    pub worst_tiles: Vec<crate::memory::WorstTile>,
    pub always_live_bytes: u64,
    pub peak_live_bytes: u64,
    /// Bytes of every tile of every IPU, in tile order (the HTML report's tile map).
    #[serde(default)]
    pub tiles: Vec<u64>,
    /// Bytes live at each program step (the HTML report's liveness view).
    #[serde(default)]
    pub liveness: Vec<u64>,
}

/// `precision` as the JSON contract spells it: the policy (`"16.32"`) or `"none"`.
mod policy {
    use ipusim_ir::Precision;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(p: &Option<Precision>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(p.map_or("none", |p| p.as_str()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Precision>, D::Error> {
        let s = String::deserialize(d)?;
        if s == "none" {
            return Ok(None);
        }
        s.parse().map(Some).map_err(serde::de::Error::custom)
    }
}

/// One IPU's row of the summary, as PopVision shows it per IPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IpuReport {
    /// The IPU.
    pub ipu: u32,
    /// Its tiles.
    pub tiles: u32,
    /// Its tiles with vertices.
    pub used_tiles: u32,
    /// Tile balance over its used tiles (see `tile_balance`).
    pub tile_balance: f64,
    /// StreamCopy Rx: bytes from the host per run.
    pub stream_bytes_host_to_device: u64,
    /// StreamCopy Tx: bytes to the host per run.
    pub stream_bytes_device_to_host: u64,
    /// Bytes over its tiles.
    pub memory_bytes: u64,
    /// Its fullest tile's bytes.
    pub max_tile_bytes: u64,
    /// Its tiles over capacity.
    pub oom_tiles: u32,
    /// Bytes left over its tiles (capacity minus use, over the tiles not full; PopVision's
    /// "free").
    #[serde(default)]
    pub free_bytes: u64,
    /// Cycles of its compute sets per run (each compute set's slowest tile on this IPU).
    #[serde(default)]
    pub execute_cycles: u64,
    /// Cycles of the exchanges into its tiles per run (inter-IPU copies and its tensors'
    /// cross-replica all-reduces included).
    #[serde(default)]
    pub exchange_cycles: u64,
}

/// `ipusim compile --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompileReport {
    pub program: String,
    pub target: TargetReport,
    /// The precision policy the step graph was built under; `None` for a program without
    /// one (serialised as `"none"`, the JSON contract's spelling).
    #[serde(with = "policy")]
    pub precision: Option<Precision>,
    pub total_cycles: u64,
    pub categories: Categories,
    pub compute_sets: Vec<ComputeSetReport>,
    /// See [`crate::cycles::CycleEstimate::tile_balance`].
    pub tile_balance: f64,
    pub memory: MemoryReport,
    /// `total_cycles / clock_hz`.
    pub seconds: f64,
    pub partials: String,
    pub gradient_accumulation: u32,
    pub device_iterations: u32,
    pub used_tiles: u32,
    pub vertices: u64,
    pub exchange_bytes: u64,
    pub stream_bytes_host_to_device: u64,
    pub stream_bytes_device_to_host: u64,
    /// Per IPU of the system (one row with one IPU).
    #[serde(default)]
    pub ipus: Vec<IpuReport>,
    /// One row per convolution and pooling compute set (absent for programs without
    /// them): what a CNN user reads per layer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub convolutions: Vec<ConvLayerReport>,
    /// FLOPs of all convolutions per micro-batch (2 per multiply-accumulate; absent without
    /// them).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub convolution_flops: u64,
    /// The batch arithmetic (absent for a program without infeeds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchReport>,
    /// The program tree (PopVision's Program Tree): the executable's steps as nested
    /// sequences and repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_tree: Option<ProgramNode>,
    /// The pipeline of a pipelined schedule (absent otherwise): its segments, stashes, the
    /// cycles of each tick, the ramp's share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<crate::pipeline_report::PipelineReport>,
    /// The cross-replica collectives (absent with one replica).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collectives: Option<crate::collectives_report::CollectivesReport>,
    /// The execution trace of one run (PopVision's Execution Trace): present when asked
    /// for (`--html`, `--execution-trace`), from the static walk on `compile` and from the
    /// recorded run on `run`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<ipusim_exe::timeline::ExecutionTrace>,
}

/// How many samples one weight update and one run see: micro-batch × replicas × gradient
/// accumulation × device iterations, as PopTorch counts them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchReport {
    /// Samples per micro-batch: the leading dimension of the first infeed.
    pub micro_batch: u64,
    /// Replicas of the model, each with its own micro-batches.
    pub replicas: u32,
    /// Micro-batches per weight update.
    pub gradient_accumulation: u32,
    /// Weight updates (loop iterations) per run.
    pub device_iterations: u32,
    /// Samples per weight update: micro_batch × replicas × gradient_accumulation.
    pub global_batch: u64,
    /// Samples per run: global_batch × device_iterations.
    pub samples_per_run: u64,
}

impl BatchReport {
    /// The batch arithmetic of `exe`, or `None` without an infeed.
    fn of(exe: &Executable) -> Option<BatchReport> {
        use crate::executable::StreamDirection;
        let first = exe
            .streams
            .iter()
            .find(|s| s.direction == StreamDirection::HostToDevice)?;
        let micro_batch = first.shape.dims().first().copied().unwrap_or(1) as u64;
        let (replicas, ga, di) = (
            exe.system.replicas.max(1),
            exe.options.gradient_accumulation,
            exe.options.device_iterations,
        );
        let global_batch = micro_batch
            .saturating_mul(replicas as u64)
            .saturating_mul(ga as u64);
        Some(BatchReport {
            micro_batch,
            replicas,
            gradient_accumulation: ga,
            device_iterations: di,
            global_batch,
            samples_per_run: global_batch.saturating_mul(di as u64),
        })
    }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The per-IPU rows of `exe`.
fn ipu_rows(exe: &Executable) -> Vec<IpuReport> {
    let cap = exe.memory.bytes_per_tile_capacity;
    // (memory, max tile, OOM tiles, bytes held up to capacity) per IPU number, in one pass
    // over the tiles (a pass per IPU was quadratic in the IPUs).
    let ipus = exe.estimate.ipus.iter().map(|c| c.ipu as usize + 1).max();
    let mut per = vec![(0u64, 0u64, 0u32, 0u64); ipus.unwrap_or(0)];
    for t in &exe.memory.tiles {
        if let Some(p) = per.get_mut(t.tile.ipu() as usize) {
            p.0 += t.total;
            p.1 = p.1.max(t.total);
            p.2 += u32::from(t.total > cap);
            p.3 = p.3.saturating_add(t.total.min(cap));
        }
    }
    exe.estimate
        .ipus
        .iter()
        .map(|c| {
            let (memory_bytes, max_tile_bytes, oom_tiles, held) =
                per.get(c.ipu as usize).copied().unwrap_or_default();
            // Tiles without a row in the plan hold nothing.
            let free_bytes = cap
                .saturating_mul(exe.target.tiles as u64)
                .saturating_sub(held);
            IpuReport {
                ipu: c.ipu,
                tiles: exe.target.tiles,
                used_tiles: c.used_tiles,
                tile_balance: c.tile_balance,
                stream_bytes_host_to_device: c.stream_bytes_in,
                stream_bytes_device_to_host: c.stream_bytes_out,
                memory_bytes,
                max_tile_bytes,
                oom_tiles,
                free_bytes,
                execute_cycles: c.execute_cycles,
                exchange_cycles: c.exchange_cycles,
            }
        })
        .collect()
}

impl CompileReport {
    /// The tiles of the whole system (every IPU's; the target's tiles before the report had
    /// per-IPU rows), the whole an out-of-memory count is out of.
    pub fn system_tiles(&self) -> u64 {
        if self.ipus.is_empty() {
            u64::from(self.target.tiles)
        } else {
            self.ipus.iter().map(|i| u64::from(i.tiles)).sum()
        }
    }

    /// The report of `exe`, compiled from `program` with precision policy `precision`.
    pub fn new(program: &str, precision: Option<Precision>, exe: &Executable) -> CompileReport {
        let e = &exe.estimate;
        let m = &exe.memory;
        let mut cats = MemoryCategories::default();
        for t in &m.tiles {
            cats.variables += t.variables;
            cats.constants += t.constants;
            cats.vertex_state += t.vertex_state;
            cats.code += t.code;
            cats.exchange_buffers += t.exchange_buffers;
            cats.temporaries += t.temporaries;
            cats.control_code += t.control_code;
            cats.vertex_code += t.vertex_code;
            cats.internal_exchange_code += t.internal_exchange_code;
            cats.global_exchange_code += t.global_exchange_code;
        }
        CompileReport {
            program: program.to_string(),
            target: TargetReport {
                name: exe.target.name.clone(),
                tiles: exe.target.tiles,
                bytes_per_tile: exe.target.bytes_per_tile as u64,
                clock_hz: exe.target.clock_hz,
            },
            precision,
            total_cycles: e.total_cycles,
            categories: Categories {
                on_tile_execute: e.on_tile_execute,
                do_exchange: e.do_exchange,
                sync: e.sync,
                stream_copy: e.stream_copy,
            },
            compute_sets: e
                .compute_sets
                .iter()
                .map(|c| ComputeSetReport {
                    name: c.name.clone(),
                    cycles: c.cycles,
                    tiles_used: c.tiles_used,
                    executions: c.executions,
                    cycles_per_execution: c.cycles_per_execution,
                })
                .collect(),
            tile_balance: e.tile_balance,
            memory: MemoryReport {
                bytes_per_tile_capacity: m.bytes_per_tile_capacity,
                max_tile_bytes: m.max_tile_bytes,
                total_bytes: m.total_bytes,
                oom: m.oom,
                oom_tiles: m.oom_tiles.clone(),
                categories: cats,
                worst_tiles: m.worst_tiles.clone(),
                always_live_bytes: m.always_live_bytes,
                peak_live_bytes: m.liveness.iter().copied().max().unwrap_or(0),
                tiles: m.tiles.iter().map(|t| t.total).collect(),
                liveness: m.liveness.clone(),
            },
            seconds: e.total_cycles as f64 / exe.target.clock_hz as f64,
            partials: exe.options.partials_type.to_string(),
            gradient_accumulation: exe.options.gradient_accumulation,
            device_iterations: exe.options.device_iterations,
            used_tiles: e.used_tiles,
            vertices: exe.num_vertices() as u64,
            exchange_bytes: e
                .exchanges
                .iter()
                .map(|x| x.bytes.saturating_mul(x.executions))
                .fold(0, u64::saturating_add),
            stream_bytes_host_to_device: e.stream_bytes_in,
            stream_bytes_device_to_host: e.stream_bytes_out,
            ipus: ipu_rows(exe),
            convolutions: crate::conv_report::conv_rows(exe),
            convolution_flops: 0,
            batch: BatchReport::of(exe),
            program_tree: Some(ProgramNode::of(exe, &exe.program)),
            pipeline: crate::pipeline_report::PipelineReport::of(exe),
            collectives: crate::collectives_report::CollectivesReport::of(exe),
            execution: None,
        }
        .with_flop_total()
    }

    fn with_flop_total(mut self) -> CompileReport {
        self.convolution_flops = self
            .convolutions
            .iter()
            .map(|c| c.flops)
            .fold(0, u64::saturating_add);
        self
    }

    /// The precision policy's name, or `none`.
    pub fn precision_name(&self) -> &'static str {
        self.precision.map_or("none", |p| p.as_str())
    }

    /// The readable report (units in every header).
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let t = &self.target;
        let _ = writeln!(
            s,
            "ipusim compile: {} on {} ({} tiles x {} KiB, {:.3} GHz), precision {}, partials {}",
            self.program,
            t.name,
            t.tiles,
            t.bytes_per_tile / 1024,
            t.clock_hz as f64 / 1e9,
            self.precision_name(),
            self.partials
        );
        let _ = writeln!(
            s,
            "gradient accumulation {}, device iterations {}, {} vertices on {} tiles",
            self.gradient_accumulation, self.device_iterations, self.vertices, self.used_tiles
        );
        if let Some(b) = &self.batch {
            let _ = writeln!(
                s,
                "batch: micro-batch {} x replicas {} x gradient accumulation {} = {} samples per \
                 weight update; x device iterations {} = {} samples per run",
                b.micro_batch,
                b.replicas,
                b.gradient_accumulation,
                group(b.global_batch),
                b.device_iterations,
                group(b.samples_per_run)
            );
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Total: {} cycles ({:.3} ms at {:.3} GHz)\n",
            group(self.total_cycles),
            self.seconds * 1e3,
            t.clock_hz as f64 / 1e9
        );
        let total = self.total_cycles.max(1) as f64;
        let _ = writeln!(s, "{:<16} {:>16} {:>9}", "Category", "cycles", "share (%)");
        let c = &self.categories;
        for (name, v) in [
            ("OnTileExecute", c.on_tile_execute),
            ("DoExchange", c.do_exchange),
            ("Sync", c.sync),
            ("StreamCopy", c.stream_copy),
        ] {
            let _ = writeln!(
                s,
                "{:<16} {:>16} {:>9.2}",
                name,
                group(v),
                100.0 * v as f64 / total
            );
        }
        let _ = writeln!(
            s,
            "\nTile balance: {:.3} (mean busy fraction of OnTileExecute over {} used tiles)",
            self.tile_balance, self.used_tiles
        );
        let _ = writeln!(
            s,
            "Exchange: {} bytes moved; host streams: {} bytes in, {} bytes out\n",
            group(self.exchange_bytes),
            group(self.stream_bytes_host_to_device),
            group(self.stream_bytes_device_to_host)
        );
        let replicas = self.batch.as_ref().map_or(1, |b| b.replicas);
        if replicas > 1 {
            let _ = writeln!(
                s,
                "Replicas: the rows are one replica's IPUs; {replicas} replicas use {} IPUs, each replica its own \
                 streams; the collectives are in DoExchange and their IPU's exchange cycles",
                self.ipus.len() as u64 * u64::from(replicas)
            );
            if let Some(c) = &self.collectives {
                let _ = writeln!(s, "{}", c.line(group));
            }
        }
        let _ = writeln!(
            s,
            "{:<5} {:>10} {:>12} {:>16} {:>16} {:>16} {:>16} {:>16} {:>9} {:>16} {:>16}",
            "IPU",
            "used tiles",
            "tile balance",
            "Rx (bytes/run)",
            "Tx (bytes/run)",
            "memory (bytes)",
            "free (bytes)",
            "max tile (bytes)",
            "OOM tiles",
            "execute (cycles)",
            "exchange (cycles)"
        );
        for r in &self.ipus {
            let _ = writeln!(
                s,
                "{:<5} {:>10} {:>12.3} {:>16} {:>16} {:>16} {:>16} {:>16} {:>9} {:>16} {:>16}",
                r.ipu,
                r.used_tiles,
                r.tile_balance,
                group(r.stream_bytes_host_to_device),
                group(r.stream_bytes_device_to_host),
                group(r.memory_bytes),
                group(r.free_bytes),
                group(r.max_tile_bytes),
                r.oom_tiles,
                group(r.execute_cycles),
                group(r.exchange_cycles)
            );
        }
        if let Some(p) = &self.pipeline {
            s += &p.text(group);
        }
        let _ = writeln!(s);
        let mut sets: Vec<&ComputeSetReport> = self.compute_sets.iter().collect();
        sets.sort_by_key(|c| std::cmp::Reverse(c.cycles));
        let _ = writeln!(
            s,
            "Compute sets (top {} of {} by cycles)",
            sets.len().min(20),
            sets.len()
        );
        let _ = writeln!(
            s,
            "{:<48} {:>14} {:>10} {:>14} {:>10}",
            "name", "cycles (total)", "executions", "cycles (each)", "tiles"
        );
        for cs in sets.iter().take(20) {
            let _ = writeln!(
                s,
                "{:<48} {:>14} {:>10} {:>14} {:>10}",
                truncate(&cs.name, 48),
                group(cs.cycles),
                cs.executions,
                group(cs.cycles_per_execution),
                cs.tiles_used
            );
        }
        if !self.convolutions.is_empty() {
            let _ = writeln!(
                s,
                "\nConvolutions and pools ({} layer passes, {} FLOPs per micro-batch; cycles and FLOPs per execution)",
                self.convolutions.len(),
                group(self.convolution_flops)
            );
            let _ = writeln!(
                s,
                "{:<36} {:<11} {:<24} {:>17} {:>9} {:>6} {:>12} {:>15} {:>6}",
                "name",
                "pass",
                "vertex",
                "partition gxnxcxrxw",
                "reduction",
                "tiles",
                "cycles",
                "FLOPs",
                "AMP %"
            );
            for c in &self.convolutions {
                let [g, n, ch, r] = c.partition;
                let w = c.column_split;
                let _ = writeln!(
                    s,
                    "{:<36} {:<11} {:<24} {:>17} {:>9} {:>6} {:>12} {:>15} {:>6.1}",
                    truncate(&c.name, 36),
                    c.pass,
                    c.vertex,
                    match c.serial_split {
                        1 => format!("{g}x{n}x{ch}x{r}x{w}"),
                        k => format!("{g}x{n}x{ch}x{r}x{w} s{k}"),
                    },
                    c.reduction_split,
                    c.tiles,
                    group(c.cycles),
                    group(c.flops),
                    100.0 * c.amp_fraction
                );
            }
            if self.convolutions.iter().any(|c| c.serial_split > 1) {
                let _ = writeln!(
                    s,
                    "(sN: the pass ran in N serial phases over its output channels, each partitioned as shown; its cycles are all of them)"
                );
            }
        }
        let m = &self.memory;
        let _ = writeln!(
            s,
            "\nMemory (bytes): capacity {} per tile, max tile {} ({:.1}%), total {}, always live {}, peak live temporaries {}",
            group(m.bytes_per_tile_capacity),
            group(m.max_tile_bytes),
            100.0 * m.max_tile_bytes as f64 / m.bytes_per_tile_capacity.max(1) as f64,
            group(m.total_bytes),
            group(m.always_live_bytes),
            group(m.peak_live_bytes)
        );
        let k = &m.categories;
        let _ = writeln!(s, "{:<20} {:>16}", "category", "bytes (all tiles)");
        for (name, v) in [
            ("variables", k.variables),
            ("constants", k.constants),
            ("vertex state", k.vertex_state),
            ("code", k.code),
            ("  control code", k.control_code),
            ("  vertex code", k.vertex_code),
            ("  internal exchange", k.internal_exchange_code),
            ("  global exchange", k.global_exchange_code),
            ("exchange buffers", k.exchange_buffers),
            ("temporaries", k.temporaries),
        ] {
            let _ = writeln!(s, "{:<20} {:>16}", name, group(v));
        }
        if m.oom {
            let _ = writeln!(
                s,
                "\nOUT OF MEMORY on {} tile(s): {}",
                m.oom_tiles.len(),
                m.oom_tiles
                    .iter()
                    .take(16)
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
                    + if m.oom_tiles.len() > 16 { ", ..." } else { "" }
            );
        } else {
            let _ = writeln!(s, "\nFits in memory.");
        }
        let _ = writeln!(s, "Fullest tiles (bytes; largest tensors in bytes):");
        for w in &m.worst_tiles {
            let largest = tensor_list(&w.largest);
            let _ = writeln!(
                s,
                "  tile {:>5}: {:>12}  {}",
                w.tile,
                group(w.bytes),
                largest
            );
            let c = &w.categories;
            if c.total > 0 {
                let _ = writeln!(
                    s,
                    "{:>22}variables {}, constants {}, exchange buffers {}, temporaries {}, \
                     vertex state {}, code {} (control {}, vertex {}, internal exchange {}, \
                     global exchange {})",
                    "",
                    group(c.variables),
                    group(c.constants),
                    group(c.exchange_buffers),
                    group(c.temporaries),
                    group(c.vertex_state),
                    group(c.code),
                    group(c.control_code),
                    group(c.vertex_code),
                    group(c.internal_exchange_code),
                    group(c.global_exchange_code)
                );
            }
            if let Some(p) = &w.peak {
                let live = tensor_list(&p.live);
                let _ = writeln!(
                    s,
                    "{:>22}temporaries at their top from step {} ({}): {} live: {}",
                    "",
                    p.step,
                    truncate(&p.name, 48),
                    group(p.live_bytes),
                    live
                );
            }
        }
        s
    }
}

/// Tensors with their bytes on a tile, as the fullest tiles' lines list them.
fn tensor_list(tensors: &[crate::memory::TensorBytes]) -> String {
    tensors
        .iter()
        .map(|b| format!("{} {}", b.name, group(b.bytes)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let tail: String = s
            .chars()
            .rev()
            .take(n - 3)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("...{tail}")
    }
}

/// `1234567` as `1,234,567`.
pub fn group(v: u64) -> String {
    let d = v.to_string();
    let mut out = String::with_capacity(d.len() + d.len() / 3);
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

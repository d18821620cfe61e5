//! The host I/O model of a compiled program: per stream and per run, how many `StreamCopy`s,
//! how many bytes and how many cycles; Rx (host to device) and Tx (device to host) per IPU,
//! as PopVision's Execution Trace summary shows them ("StreamCopy (Rx/Tx)").
//!
//! Bytes per stream per run = bytes per micro-batch × `StreamCopy` executions per run, where
//! the executions are the program tree's repeat counts multiplied — `device_iterations ×
//! gradient_accumulation` for an infeed of the training step. So Rx is elements × dtype
//! bytes × micro-batches: the seed's 64×3×64×64 FP16 images × 3 micro-batches = 4.5 MiB, and
//! half that with 8-bit input (reference/user-features.md §5).
//!
//! Cycles of a copy come from the compiler's cycle model
//! ([`ipusim_compiler::cycles::stream_copy_cycles`]: the fixed host round trip plus bytes
//! over the target's host link), exactly what the engine charges. The prefetch depth does not
//! change them (the simulator has no host wait); it sets the host memory each infeed's buffer
//! holds (`prefetch_depth` × bytes per micro-batch).

use crate::stream::StreamType;
use ipusim_compiler::cycles::stream_copy_cycles;
use ipusim_compiler::executable::{Executable, Program, StreamDirection};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One stream's traffic per run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamTraffic {
    /// Stream name.
    pub name: String,
    /// `rx` (infeed: host to device) or `tx` (outfeed: device to host).
    pub direction: String,
    /// Element type on the link.
    pub dtype: String,
    /// Shape of one micro-batch (entry).
    pub shape: Vec<usize>,
    /// Bytes of one `StreamCopy`.
    pub bytes_per_micro_batch: u64,
    /// `StreamCopy` executions per run.
    pub copies_per_run: u64,
    /// `bytes_per_micro_batch × copies_per_run`.
    pub bytes_per_run: u64,
    /// StreamCopy cycles per run.
    pub cycles_per_run: u64,
    /// Host memory of the infeed's prefetch buffer (0 for outfeeds).
    pub host_buffer_bytes: u64,
}

/// Rx and Tx of one IPU per run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpuTraffic {
    /// IPU index.
    pub ipu: u32,
    /// Bytes received from the host per run.
    pub rx: u64,
    /// Bytes sent to the host per run.
    pub tx: u64,
}

/// The host I/O of one run of a program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostIoModel {
    /// Per stream, infeeds first, each group by name.
    pub streams: Vec<StreamTraffic>,
    /// Per IPU (one IPU per target today).
    pub ipus: Vec<IpuTraffic>,
    /// Host-to-device bytes per run.
    pub rx_bytes_per_run: u64,
    /// Device-to-host bytes per run.
    pub tx_bytes_per_run: u64,
    /// StreamCopy cycles per run.
    pub stream_copy_cycles_per_run: u64,
    /// Micro-batches the host holds ready per infeed.
    pub prefetch_depth: u32,
    /// The target's host link bandwidth.
    pub host_link_bytes_per_second: u64,
}

impl HostIoModel {
    /// The model of `exe` with a host prefetch depth.
    pub fn new(exe: &Executable, prefetch_depth: u32) -> HostIoModel {
        let mut copies = vec![0u64; exe.streams.len()];
        count_copies(&exe.program, 1, &mut copies);
        let mut streams: Vec<StreamTraffic> = exe
            .streams
            .iter()
            .zip(&copies)
            .map(|(s, &n)| {
                let rx = s.direction == StreamDirection::HostToDevice;
                StreamTraffic {
                    name: s.name.clone(),
                    direction: if rx { "rx" } else { "tx" }.into(),
                    dtype: s.dtype.name().into(),
                    shape: s.shape.dims().to_vec(),
                    bytes_per_micro_batch: s.bytes_per_micro_batch,
                    copies_per_run: n,
                    bytes_per_run: s.bytes_per_micro_batch.saturating_mul(n),
                    cycles_per_run: stream_copy_cycles(&exe.target, s.bytes_per_micro_batch)
                        .saturating_mul(n),
                    host_buffer_bytes: if rx {
                        s.bytes_per_micro_batch
                            .saturating_mul(u64::from(prefetch_depth))
                    } else {
                        0
                    },
                }
            })
            .collect();
        streams.sort_by(|a, b| (&a.direction, &a.name).cmp(&(&b.direction, &b.name)));
        let sum = |dir: &str| -> u64 {
            streams
                .iter()
                .filter(|s| s.direction == dir)
                .map(|s| s.bytes_per_run)
                .fold(0, u64::saturating_add)
        };
        let (rx, tx) = (sum("rx"), sum("tx"));
        HostIoModel {
            stream_copy_cycles_per_run: streams
                .iter()
                .map(|s| s.cycles_per_run)
                .fold(0, u64::saturating_add),
            streams,
            ipus: vec![IpuTraffic { ipu: 0, rx, tx }],
            rx_bytes_per_run: rx,
            tx_bytes_per_run: tx,
            prefetch_depth,
            host_link_bytes_per_second: exe.target.host_link_bytes_per_second,
        }
    }

    /// Micro-batches each infeed must supply per run.
    pub fn infeed_needs(&self) -> BTreeMap<String, u64> {
        self.streams
            .iter()
            .filter(|s| s.direction == "rx")
            .map(|s| (s.name.clone(), s.copies_per_run))
            .collect()
    }

    /// The traffic of one stream.
    pub fn stream(&self, name: &str) -> Option<&StreamTraffic> {
        self.streams.iter().find(|s| s.name == name)
    }
}

/// The stream types of `exe`'s infeeds and outfeeds.
pub fn stream_types(exe: &Executable) -> (Vec<StreamType>, Vec<StreamType>) {
    let (ins, outs): (Vec<_>, Vec<_>) = exe
        .streams
        .iter()
        .partition(|s| s.direction == StreamDirection::HostToDevice);
    (
        ins.into_iter().map(StreamType::of).collect(),
        outs.into_iter().map(StreamType::of).collect(),
    )
}

fn count_copies(p: &Program, times: u64, copies: &mut [u64]) {
    match p {
        Program::Sequence(children) => children.iter().for_each(|c| count_copies(c, times, copies)),
        Program::Repeat { count, body } => {
            count_copies(body, times.saturating_mul(u64::from(*count)), copies)
        }
        Program::StreamCopy { stream, .. } => {
            if let Some(c) = copies.get_mut(stream.0 as usize) {
                *c = c.saturating_add(times);
            }
        }
        // Every segment runs once per micro-batch (a stash slot for every `n`-th of them).
        Program::Pipeline(pl) => {
            let mb = u64::from(pl.micro_batches);
            let slot_runs = |n: usize, slot: usize| (mb + (n - slot) as u64 - 1) / n as u64;
            for s in &pl.segments {
                count_copies(&s.body, times.saturating_mul(mb), copies);
                count_copies(&s.send, times.saturating_mul(mb), copies);
                for (slot, p) in s.restore.iter().enumerate() {
                    let runs = slot_runs(s.restore.len(), slot);
                    count_copies(p, times.saturating_mul(runs), copies);
                }
                for (slot, p) in s.save.iter().enumerate() {
                    let runs = slot_runs(s.save.len(), slot);
                    count_copies(p, times.saturating_mul(runs), copies);
                }
            }
        }
        Program::If {
            then, otherwise, ..
        } => {
            // Data-dependent: count the branch with more copies of each stream.
            let mut a = vec![0u64; copies.len()];
            let mut b = vec![0u64; copies.len()];
            count_copies(then, times, &mut a);
            count_copies(otherwise, times, &mut b);
            for (c, (x, y)) in copies.iter_mut().zip(a.into_iter().zip(b)) {
                *c += x.max(y);
            }
        }
        Program::Execute(_)
        | Program::Exchange(_)
        | Program::IpuCopy(_)
        | Program::CrossReplica { .. }
        | Program::RemoteCopy { .. }
        | Program::Sync(_) => {}
    }
}

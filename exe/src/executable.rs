//! The compiled program: the contract between the compiler and the simulator.
//!
//! An [`Executable`] says everything the simulator needs to run a graph with exact values,
//! without re-planning anything:
//!
//! - **Tensors** ([`Tensor`]): every value that lives in tile memory, with its dtype, shape
//!   (row-major) and its [`TileSlice`]s. A tensor's elements on one tile are stored
//!   contiguously in that tile's memory, in ascending element order, starting at the slice's
//!   byte `offset`; each [`Interval`] also carries its own byte offset. The simulator keeps
//!   real bytes per tile at those offsets. Temporaries whose lifetimes do not overlap share
//!   bytes (liveness in [`crate::memory`]); variables and constants never share.
//! - **Values** ([`NodeValue`]): which tensor holds each IR node's value (a `Reshape` shares
//!   its input's tensor with another shape; an in-place update shares its variable's).
//! - **Compute sets** ([`ComputeSet`]): per used tile, groups of vertices of one codelet
//!   (one PopLibs MultiVertex each). Every operand of a vertex lives on the vertex's tile.
//! - **Exchanges** ([`Exchange`]): exact byte copies between tile memories; all sources of
//!   one exchange are read before any destination is written.
//! - **Program** ([`Program`]): the control tree, with the training step inside
//!   `Repeat(device_iterations)`, the Step phase inside `Repeat(gradient_accumulation)`
//!   followed by the Update phase.
//! - **Initial values** ([`InitialValue`]): the initialiser of every variable and the literal of
//!   every constant, so that an executable runs without its graph (a Poplar executable
//!   carries its constant data too).
//! - **Host streams**, the **memory plan** and the **static cycle estimate**.
//!
//! The codelet semantics every vertex follows are in [`crate::codelets`]; the cycle functions
//! the simulator calls while executing are in [`crate::cycles`].

pub use crate::ids::{ComputeSetId, ExchangeId, StreamId, TensorId};
pub use crate::system::{SyncScope, TileId};

use crate::codelets::{Codelet, VertexParams};
use crate::estimate::CycleEstimate;
use crate::memory::MemoryPlan;
use crate::options::CompileOptions;
use crate::system::System;
use crate::target::Target;
use ipusim_ir::pipeline::Schedule;
use ipusim_ir::{DType, Init, Literal, NodeId, Shape};
use serde::{Deserialize, Serialize};

/// Version of the serialised format; bumped on any incompatible change.
pub const FORMAT_VERSION: u32 = 4;

/// A compiled program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Executable {
    /// [`FORMAT_VERSION`].
    pub format_version: u32,
    /// The chip it was compiled for (every IPU of the system is one of these).
    pub target: Target,
    /// The system of IPUs: how many, their links and host links.
    pub system: System,
    /// The options it was compiled with.
    pub options: CompileOptions,
    /// All tensors in tile memory.
    pub tensors: Vec<Tensor>,
    /// Where each lowered IR node's value lives.
    pub values: Vec<NodeValue>,
    /// All compute sets.
    pub compute_sets: Vec<ComputeSet>,
    /// All exchanges.
    pub exchanges: Vec<Exchange>,
    /// Host streams (infeeds and outfeeds).
    pub streams: Vec<HostStream>,
    /// The initial contents of every `Variable` and `Constant` tensor, in tensor order.
    pub initial_values: Vec<InitialValue>,
    /// The control program.
    pub program: Program,
    /// The leaves of the program in program order (a `Repeat` body listed once); liveness
    /// and the memory plan are expressed over these step indices.
    pub steps: Vec<ProgramStep>,
    /// Bytes per tile by category, liveness, the out-of-memory verdict.
    pub memory: MemoryPlan,
    /// The static cycle estimate (the program tree walked with repeat counts multiplied).
    pub estimate: CycleEstimate,
}

/// What a tensor is for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TensorKind {
    /// A `Variable` node: always live; the simulator materialises its `Init` from `node`.
    Variable,
    /// A `Constant` node: always live; the simulator materialises its `Literal` from `node`.
    Constant,
    /// A `Variable` node held in streaming memory (an off-chip remote buffer) between its
    /// uses: optimizer state offloaded (the TF-IPU guide §6.8). Its tile copy is a
    /// temporary, loaded by a [`Program::RemoteCopy`] before the weight update reads it and
    /// stored by one after the update writes it; the simulator materialises its `Init` in the
    /// remote buffer.
    RemoteVariable,
    /// The landing buffer of an infeed stream: written by `StreamCopy` each micro-batch.
    StreamBuffer {
        /// The stream.
        stream: StreamId,
    },
    /// The value of an IR op.
    Activation,
    /// Copies of another tensor's elements gathered onto the tiles of one op (1-D; its
    /// layout per tile is given by the op's vertices). `source` names the gathered tensor.
    Staging {
        /// The tensor whose elements it holds.
        source: TensorId,
    },
    /// Partial results of a matmul or reduction, in the accumulation type (1-D).
    Partials,
}

/// What a `Variable` or `Constant` tensor holds before the first run. The simulator
/// materialises it with `ipusim_sim::init` (the same values the reference interpreter starts
/// from).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InitialValue {
    /// The tensor.
    pub tensor: TensorId,
    /// Its initialiser or literal.
    pub source: SourceValue,
}

/// The IR's description of a source tensor's value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SourceValue {
    /// A variable's initialiser.
    Init(Init),
    /// A constant's literal.
    Literal(Literal),
}

/// A tensor in tile memory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tensor {
    /// Its name: the IR node's name, or `<node>/<role>` for compiler tensors.
    pub name: String,
    /// The IR node it belongs to.
    pub node: Option<NodeId>,
    /// What it is for.
    pub kind: TensorKind,
    /// Element type.
    pub dtype: DType,
    /// Shape (row-major element order); 1-D for staging and partials.
    pub shape: Shape,
    /// Where its elements live, one slice per tile, sorted by tile.
    pub slices: Vec<TileSlice>,
}

impl Tensor {
    /// Number of elements.
    pub fn num_elements(&self) -> u64 {
        self.shape.num_elements() as u64
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.num_elements() * self.dtype.size_bytes() as u64
    }

    /// The IPU the tensor lives on (all its slices are on one IPU), `None` before it is
    /// mapped.
    pub fn ipu(&self) -> Option<u32> {
        self.slices.first().map(|s| s.tile.ipu())
    }

    /// The slice on `tile`, if any.
    pub fn slice_on(&self, tile: TileId) -> Option<&TileSlice> {
        self.slices
            .binary_search_by_key(&tile, |s| s.tile)
            .ok()
            .map(|i| &self.slices[i])
    }
}

/// A tensor's elements on one tile, stored contiguously from `offset` in ascending element
/// order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TileSlice {
    /// The tile.
    pub tile: TileId,
    /// Byte offset of the first element in the tile's memory.
    pub offset: u32,
    /// Element ranges, ascending and disjoint.
    pub intervals: Vec<Interval>,
}

impl TileSlice {
    /// Number of elements on this tile.
    pub fn num_elements(&self) -> u64 {
        self.intervals.iter().map(|i| i.end - i.begin).sum()
    }
}

/// A range `[begin, end)` of a tensor's row-major elements, stored at byte `offset` of the
/// tile's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interval {
    /// First element.
    pub begin: u64,
    /// One past the last element.
    pub end: u64,
    /// Byte offset of element `begin` in the tile's memory.
    pub offset: u32,
}

/// Where an IR node's value lives.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeValue {
    /// The node.
    pub node: NodeId,
    /// The node's name.
    pub name: String,
    /// The tensor holding its elements (row-major in `shape`), or `None` when the value was
    /// folded into its consumers (a transpose read directly by a matmul).
    pub tensor: Option<TensorId>,
    /// Its element type.
    pub dtype: DType,
    /// Its shape.
    pub shape: Shape,
    /// The channel group its tensor holds it in ([`crate::layout`]): 1 (row-major in
    /// `shape`), or `g` > 1, the tensor's shape then being [`crate::layout::storage_dims`] of
    /// `shape`.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub group: u32,
}

fn one() -> u32 {
    1
}

fn is_one(g: &u32) -> bool {
    *g == 1
}

/// A contiguous region of one tensor on the vertex's tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operand {
    /// The tensor (its dtype is the element type).
    pub tensor: TensorId,
    /// Byte offset of the first element in the tile's memory.
    pub offset: u32,
    /// Number of elements.
    pub len: u32,
}

/// A vertex's operands, held inline (a vertex has two to four; millions of vertices would
/// otherwise each hold a heap allocation).
pub type Operands = smallvec::SmallVec<[Operand; 4]>;

/// One vertex: an instance of its group's codelet on one worker context.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Vertex {
    /// Worker context `0..target.worker_contexts`; the simulator derives the worker's
    /// stochastic-rounding stream from (tile, worker).
    pub worker: u8,
    /// Operands in the codelet's documented order.
    pub operands: Operands,
    /// Scalar parameters.
    pub params: VertexParams,
}

/// The vertices of one codelet instance on one tile (one PopLibs MultiVertex): the
/// supervisor starts them together; the group takes supervisor cycles + 6 x the slowest
/// worker's cycles.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VertexGroup {
    /// The codelet and its type parameters.
    pub codelet: Codelet,
    /// Its vertices.
    pub vertices: Vec<Vertex>,
}

/// The work of one compute set on one tile: groups run one after the other.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TileWork {
    /// The tile.
    pub tile: TileId,
    /// Vertex groups in execution order.
    pub groups: Vec<VertexGroup>,
    /// Cycles of this tile in the compute set (from [`crate::cycles::tile_work_cycles`]).
    pub cycles: u64,
}

impl TileWork {
    /// The work of one vertex group of `codelet` on `tile` (cycles not yet estimated).
    pub fn one_group(tile: TileId, codelet: Codelet, vertices: Vec<Vertex>) -> TileWork {
        TileWork {
            tile,
            groups: vec![VertexGroup { codelet, vertices }],
            cycles: 0,
        }
    }
}

/// A compute set: vertices on tiles that run in one BSP compute phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComputeSet {
    /// Name derived from the IR node (e.g. `dense1/matmul/partials`).
    pub name: String,
    /// The IR node it implements.
    pub node: Option<NodeId>,
    /// Work per used tile, sorted by tile.
    pub tiles: Vec<TileWork>,
    /// Cycles of the compute set: the slowest tile.
    pub cycles: u64,
}

/// One destination of a [`ByteCopy`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyDst {
    /// Destination tile (may equal the source tile: an on-tile memcpy).
    pub tile: TileId,
    /// Byte offset in the destination tile's memory.
    pub offset: u32,
}

/// An exact byte copy from one tile to one or more destinations (a broadcast).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ByteCopy {
    /// Source tile.
    pub src_tile: TileId,
    /// Byte offset in the source tile's memory.
    pub src_offset: u32,
    /// Bytes copied.
    pub bytes: u32,
    /// The tensor read.
    pub src_tensor: TensorId,
    /// The tensor written (on every destination).
    pub dst_tensor: TensorId,
    /// Destinations.
    pub dsts: CopyDsts,
}

/// A copy's destinations, the first held inline: most copies have one, and a large graph
/// has millions of copies, which would otherwise each hold a heap allocation.
pub type CopyDsts = smallvec::SmallVec<[CopyDst; 1]>;

/// An exchange phase: copies between tiles, all sources read before any destination is
/// written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// Name derived from the IR node (e.g. `dense1/matmul/in`).
    pub name: String,
    /// The IR node it serves.
    pub node: Option<NodeId>,
    /// The copies.
    pub copies: Vec<ByteCopy>,
    /// Cycles of the exchange (from [`crate::cycles::exchange_cycles`]).
    pub cycles: u64,
}

impl Exchange {
    /// True when some copy's destination is on another IPU than its source: an inter-IPU
    /// copy, run by [`Program::IpuCopy`].
    pub fn crosses_ipus(&self) -> bool {
        self.copies
            .iter()
            .any(|c| c.dsts.iter().any(|d| d.tile.ipu() != c.src_tile.ipu()))
    }

    /// The IPUs the exchange writes to, ascending.
    pub fn dst_ipus(&self) -> Vec<u32> {
        let mut ipus: Vec<u32> = self
            .copies
            .iter()
            .flat_map(|c| c.dsts.iter().map(|d| d.tile.ipu()))
            .collect();
        ipus.sort_unstable();
        ipus.dedup();
        ipus
    }

    /// Bytes received over the exchange fabric (remote destinations) plus on-tile copies.
    pub fn total_bytes(&self) -> u64 {
        self.copies
            .iter()
            .map(|c| c.bytes as u64 * c.dsts.len() as u64)
            .sum()
    }
}

/// Direction of a host stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StreamDirection {
    /// Infeed: host to device.
    HostToDevice,
    /// Outfeed: device to host.
    DeviceToHost,
}

/// A host stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostStream {
    /// The stream name (the `Input` or `Outfeed` node's `stream`).
    pub name: String,
    /// Direction.
    pub direction: StreamDirection,
    /// Element type.
    pub dtype: DType,
    /// Shape of one micro-batch's entry.
    pub shape: Shape,
    /// Bytes transferred per micro-batch (per execution of its `StreamCopy`).
    pub bytes_per_micro_batch: u64,
    /// The IR node (`Input` or `Outfeed`).
    pub node: NodeId,
    /// The tensor written (infeed) or read (outfeed).
    pub tensor: TensorId,
}

/// The control program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Program {
    /// Children in order.
    Sequence(Vec<Program>),
    /// Run a compute set.
    Execute(ComputeSetId),
    /// Run an exchange.
    Exchange(ExchangeId),
    /// Run `body` `count` times.
    Repeat { count: u32, body: Box<Program> },
    /// Move one micro-batch of a stream between the host and `tensor`.
    StreamCopy {
        stream: StreamId,
        direction: StreamDirection,
        tensor: TensorId,
    },
    /// Sync of all tiles of one IPU ([`SyncScope::Internal`]) or of every IPU of the system
    /// ([`SyncScope::External`]).
    Sync(SyncScope),
    /// Moves a [`TensorKind::RemoteVariable`] between its remote buffer and its tiles: a load
    /// (`store` false) before its reads, a store after its writes. Charged as a stream copy
    /// of its bytes ([`crate::cycles::remote_copy_cycles`]).
    RemoteCopy { tensor: TensorId, store: bool },
    /// An inter-IPU copy: the exchange's copies move bytes between tiles of different IPUs
    /// over the IPU-Links (all sources are read before any destination is written): a value
    /// crossing into another pipeline stage's IPU.
    IpuCopy(ExchangeId),
    /// A collective across the replicas of the program (in replica order). Without `dst`,
    /// in place: every replica's `tensor` becomes `op` of all replicas' `tensor` (an
    /// all-reduce). With `dst`, `tensor` is read and `dst` written: a reduce-scatter (each
    /// replica's shard of the reduced `tensor`) or an all-gather (every replica's `tensor`
    /// concatenated), the elements in row-major order ([`CollectiveOp`]). With one replica
    /// it leaves the tensor as it is (copies it to `dst`).
    CrossReplica {
        op: CollectiveOp,
        tensor: TensorId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dst: Option<TensorId>,
    },
    /// Micro-batches through the stages of a pipeline, the IPUs working on different
    /// micro-batches at once ([`Pipeline`]).
    Pipeline(Box<Pipeline>),
    /// Run `then` if the first element of `condition` (Bool, on one tile) is non-zero, else
    /// `otherwise`. Not produced by the current lowering (the IR has no control flow); the
    /// static estimate charges a sync plus the slower branch.
    If {
        condition: TensorId,
        then: Box<Program>,
        otherwise: Box<Program>,
    },
}

/// A pipeline ([`Program::Pipeline`]): PopTorch's pipelined execution (the TF-IPU training
/// guide §6.5), where the stages of a model on different IPUs work on different
/// micro-batches at once.
///
/// Micro-batch `m` (`0..micro_batches`) runs segment `s` in tick `s.offset + m·k`, where `k`
/// is the schedule's ticks per micro-batch ([`Pipeline::stride`]: 1 for `Grouped`, where
/// every IPU runs its forward and its backward segment in each tick; 2 for `Interleaved`,
/// where an IPU alternates between a forward tick and a backward one); there are
/// `k·(micro_batches − 1) + max offset + 1` ticks ([`Pipeline::ticks`], [`Pipeline::tick`]). In a tick,
/// every IPU runs its due segments at the same time as the other IPUs, each segment as
/// `restore[m % restore.len()]` (the stash pop of micro-batch `m`, when it has a stash),
/// `body`, `save[m % save.len()]` (its stash push); an IPU runs its segments in the order
/// they are listed, and the tick's compute lasts as long as its busiest IPU. Then the
/// `send`s (inter-IPU copies, each after an external sync) of the segments that ran, in the
/// order listed: what one stage sends in a tick, the next stage reads in the next.
///
/// The pipeline's leaves, in program order, are each segment's restores, body, saves and
/// send, segment by segment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pipeline {
    /// The schedule (`Grouped` or `Interleaved`; absent in older files: `Grouped`).
    #[serde(default = "grouped")]
    pub schedule: Schedule,
    /// Micro-batches (the gradient accumulation count).
    pub micro_batches: u32,
    /// The segments.
    pub segments: Vec<Segment>,
}

/// One stage's forward or backward part on its IPU ([`Pipeline`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    /// Its name (`stage 0 forward`).
    pub name: String,
    /// The IPU it runs on.
    pub ipu: u32,
    /// The tick in which micro-batch 0 runs it.
    pub offset: u32,
    /// Stash pops, one per stash slot (empty: no stash).
    pub restore: Vec<Program>,
    /// The segment's work for one micro-batch.
    pub body: Program,
    /// Stash pushes, one per stash slot (empty: no stash).
    pub save: Vec<Program>,
    /// Its inter-IPU copies, run at the end of a tick in which it ran.
    pub send: Program,
}

/// One part of a segment in a tick ([`Pipeline::tick`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentPart {
    /// `restore[slot]` of segment `segment`.
    Restore { segment: usize, slot: usize },
    /// The body of segment `segment`.
    Body { segment: usize },
    /// `save[slot]` of segment `segment`.
    Save { segment: usize, slot: usize },
}

/// What runs in one tick of a [`Pipeline`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tick {
    /// Per IPU (ascending), its parts in order.
    pub ipus: Vec<(u32, Vec<SegmentPart>)>,
    /// The segments whose sends run after the compute, in order.
    pub sends: Vec<usize>,
}

fn grouped() -> Schedule {
    Schedule::Grouped
}

impl Pipeline {
    /// Ticks between a segment's runs of consecutive micro-batches: 2 for `Interleaved`
    /// (an IPU's forward and backward segments take turns), 1 otherwise.
    pub fn stride(&self) -> u32 {
        match self.schedule {
            Schedule::Interleaved => 2,
            Schedule::Grouped | Schedule::Sequential => 1,
        }
    }

    /// Ticks from a segment's first micro-batch to its last, both included.
    pub fn span(&self) -> u32 {
        match self.micro_batches {
            0 => 0,
            m => (m - 1).saturating_mul(self.stride()).saturating_add(1),
        }
    }

    /// Ticks of the pipeline: a segment's span plus the largest offset (none without
    /// micro-batches).
    pub fn ticks(&self) -> u32 {
        if self.micro_batches == 0 {
            return 0;
        }
        let depth = self.segments.iter().map(|s| s.offset).max().unwrap_or(0);
        self.span().saturating_add(depth)
    }

    /// The micro-batch segment `s` runs in tick `t`, if any.
    pub fn micro_batch(&self, s: &Segment, t: u32) -> Option<u32> {
        let d = t.checked_sub(s.offset)?;
        let k = self.stride();
        (d % k == 0 && d / k < self.micro_batches).then_some(d / k)
    }

    /// What runs in tick `t`.
    pub fn tick(&self, t: u32) -> Tick {
        let mut tick = Tick::default();
        for (i, s) in self.segments.iter().enumerate() {
            let Some(m) = self.micro_batch(s, t) else {
                continue;
            };
            let mut parts = Vec::with_capacity(3);
            if !s.restore.is_empty() {
                parts.push(SegmentPart::Restore {
                    segment: i,
                    slot: m as usize % s.restore.len(),
                });
            }
            parts.push(SegmentPart::Body { segment: i });
            if !s.save.is_empty() {
                parts.push(SegmentPart::Save {
                    segment: i,
                    slot: m as usize % s.save.len(),
                });
            }
            match tick.ipus.iter_mut().find(|(ipu, _)| *ipu == s.ipu) {
                Some((_, p)) => p.extend(parts),
                None => tick.ipus.push((s.ipu, parts)),
            }
            if !matches!(&s.send, Program::Sequence(c) if c.is_empty()) {
                tick.sends.push(i);
            }
        }
        tick.ipus.sort_by_key(|(ipu, _)| *ipu);
        tick
    }

    /// The program of a part.
    pub fn part(&self, p: SegmentPart) -> &Program {
        match p {
            SegmentPart::Restore { segment, slot } => &self.segments[segment].restore[slot],
            SegmentPart::Body { segment } => &self.segments[segment].body,
            SegmentPart::Save { segment, slot } => &self.segments[segment].save[slot],
        }
    }

    /// The pipeline's subprograms in program order (restores, body, saves and send of each
    /// segment).
    pub fn children(&self) -> impl Iterator<Item = &Program> {
        self.segments.iter().flat_map(|s| {
            s.restore
                .iter()
                .chain(std::iter::once(&s.body))
                .chain(s.save.iter())
                .chain(std::iter::once(&s.send))
        })
    }
}

/// The operation of a [`Program::CrossReplica`] collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CollectiveOp {
    /// Element-wise sum over replicas (gradients of data-parallel training).
    AllReduceSum,
    /// Element-wise mean over replicas.
    AllReduceMean,
    /// Replica `r`'s `dst` (`k` elements) is elements `[r k, (r + 1) k)` of the element-wise
    /// mean over replicas of `tensor`, zero-padded to `R k` elements (replicated tensor
    /// sharding's gradient reduction).
    ReduceScatterMean,
    /// Every replica's `dst` is the first `dst`-size elements of the replicas' `tensor`s
    /// concatenated in replica order (the sharded update's result broadcast back).
    AllGather,
}

/// What a program step (a leaf of the program tree) does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StepKind {
    /// `Execute`.
    Execute(ComputeSetId),
    /// `Exchange`.
    Exchange(ExchangeId),
    /// `StreamCopy`.
    StreamCopy(StreamId),
    /// `IpuCopy`.
    IpuCopy(ExchangeId),
    /// `CrossReplica` of a tensor, in place.
    CrossReplica(TensorId),
    /// `CrossReplica` from tensor `src` into tensor `dst`.
    CrossReplicaTo { src: TensorId, dst: TensorId },
    /// `RemoteCopy` of a tensor (a load, or a store).
    RemoteCopy { tensor: TensorId, store: bool },
}

impl StepKind {
    /// The step of a `CrossReplica` of `tensor` (into `dst`, if any).
    pub fn cross_replica(tensor: TensorId, dst: Option<TensorId>) -> StepKind {
        match dst {
            None => StepKind::CrossReplica(tensor),
            Some(dst) => StepKind::CrossReplicaTo { src: tensor, dst },
        }
    }
}

/// One leaf of the program in program order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgramStep {
    /// What it runs.
    pub kind: StepKind,
    /// Its name (the compute set's, exchange's or stream's).
    pub name: String,
}

impl Program {
    /// The program steps of the tree in program order: its leaves (syncs aside), a
    /// `Repeat` body and each pipeline segment's parts listed once.
    pub fn leaves(&self) -> Vec<StepKind> {
        let mut out = Vec::new();
        self.visit_leaves(&mut |p| match p {
            Program::Execute(c) => out.push(StepKind::Execute(*c)),
            Program::Exchange(e) => out.push(StepKind::Exchange(*e)),
            Program::IpuCopy(e) => out.push(StepKind::IpuCopy(*e)),
            Program::StreamCopy { stream, .. } => out.push(StepKind::StreamCopy(*stream)),
            Program::CrossReplica { tensor, dst, .. } => {
                out.push(StepKind::cross_replica(*tensor, *dst))
            }
            Program::RemoteCopy { tensor, store } => out.push(StepKind::RemoteCopy {
                tensor: *tensor,
                store: *store,
            }),
            _ => {}
        });
        out
    }

    /// Every cross-replica collective of the tree in program order: its op, the tensor it
    /// reads and its destination (`None`: in place).
    pub fn collectives(&self) -> Vec<(CollectiveOp, TensorId, Option<TensorId>)> {
        let mut out = Vec::new();
        self.visit_leaves(&mut |p| {
            if let Program::CrossReplica { op, tensor, dst } = p {
                out.push((*op, *tensor, *dst));
            }
        });
        out
    }

    /// Calls `f` on every leaf of the tree (syncs included) in program order, a `Repeat`
    /// body and each pipeline segment's parts once.
    fn visit_leaves(&self, f: &mut impl FnMut(&Program)) {
        match self {
            Program::Sequence(c) => c.iter().for_each(|x| x.visit_leaves(f)),
            Program::Repeat { body, .. } => body.visit_leaves(f),
            Program::Pipeline(pl) => pl.children().for_each(|x| x.visit_leaves(f)),
            Program::If {
                then, otherwise, ..
            } => {
                then.visit_leaves(f);
                otherwise.visit_leaves(f);
            }
            leaf => f(leaf),
        }
    }
}

impl Executable {
    /// The IPU tensor `id` lives on (0 for an unmapped or unknown tensor).
    pub fn tensor_ipu(&self, id: TensorId) -> u32 {
        self.tensors
            .get(id.0 as usize)
            .and_then(Tensor::ipu)
            .unwrap_or(0)
    }

    /// The tensor with this id.
    pub fn tensor(&self, id: TensorId) -> &Tensor {
        &self.tensors[id.0 as usize]
    }

    /// The compute set with this id.
    pub fn compute_set(&self, id: ComputeSetId) -> &ComputeSet {
        &self.compute_sets[id.0 as usize]
    }

    /// The exchange with this id.
    pub fn exchange(&self, id: ExchangeId) -> &Exchange {
        &self.exchanges[id.0 as usize]
    }

    /// The value of the IR node named `name`.
    pub fn value(&self, name: &str) -> Option<&NodeValue> {
        self.values.iter().find(|v| v.name == name)
    }

    /// The tensor named `name`.
    pub fn tensor_by_name(&self, name: &str) -> Option<(TensorId, &Tensor)> {
        self.tensors
            .iter()
            .enumerate()
            .find(|(_, t)| t.name == name)
            .map(|(i, t)| (TensorId(i as u32), t))
    }

    /// Tiles of the whole system (every IPU's), the length of per-tile tables.
    pub fn num_tiles(&self) -> usize {
        self.target.tiles as usize * self.system.ipus as usize
    }

    /// The index of `tile` in per-tile tables of the whole system.
    pub fn tile_index(&self, tile: TileId) -> usize {
        tile.dense(self.target.tiles)
    }

    /// Total number of vertices.
    pub fn num_vertices(&self) -> usize {
        self.compute_sets
            .iter()
            .flat_map(|cs| &cs.tiles)
            .flat_map(|t| &t.groups)
            .map(|g| g.vertices.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(name: &str, ipu: u32, offset: u32, slots: usize) -> Segment {
        let empty = || Program::Sequence(Vec::new());
        Segment {
            name: name.into(),
            ipu,
            offset,
            restore: vec![empty(); slots],
            body: Program::Execute(ComputeSetId(0)),
            save: vec![empty(); slots],
            send: Program::Sequence(vec![Program::IpuCopy(ExchangeId(0))]),
        }
    }

    #[test]
    fn a_two_stage_pipeline_ramps_up_and_down_and_rotates_its_stash() {
        // Grouped, 2 stages: F0 at m, F1 and B1 at m + 1, B0 at m + 2 (3 stash slots).
        let pl = Pipeline {
            schedule: Schedule::Grouped,
            micro_batches: 4,
            segments: vec![
                segment("f0", 0, 0, 3),
                segment("f1", 1, 1, 0),
                segment("b1", 1, 1, 0),
                segment("b0", 0, 2, 0),
            ],
        };
        assert_eq!(pl.ticks(), 6);
        // Tick 0: stage 0's forward alone, saving micro-batch 0 in slot 0.
        let t0 = pl.tick(0);
        assert_eq!(
            t0.ipus,
            vec![(
                0,
                vec![
                    SegmentPart::Restore {
                        segment: 0,
                        slot: 0
                    },
                    SegmentPart::Body { segment: 0 },
                    SegmentPart::Save {
                        segment: 0,
                        slot: 0
                    }
                ]
            )]
        );
        assert_eq!(t0.sends, vec![0]);
        // Tick 3: every segment; stage 0 saves micro-batch 3 in slot 0 again.
        let t3 = pl.tick(3);
        assert_eq!(t3.ipus.len(), 2);
        assert_eq!(t3.ipus[0].1.len(), 4);
        assert!(t3.ipus[0].1.contains(&SegmentPart::Save {
            segment: 0,
            slot: 0
        }));
        assert_eq!(t3.sends, vec![0, 1, 2, 3]);
        // The last tick: stage 0's backward of the last micro-batch only.
        let t5 = pl.tick(5);
        assert_eq!(t5.ipus, vec![(0, vec![SegmentPart::Body { segment: 3 }])]);
        assert_eq!(pl.tick(6), Tick::default());
        // Leaves in program order: each segment's restores, body, saves and send.
        assert_eq!(pl.children().count(), (3 + 1 + 3 + 1) + 3 * 2);
    }

    #[test]
    fn an_interleaved_pipeline_alternates_forward_and_backward_ticks() {
        // Interleaved, 2 stages: F0 at 2m, F1 at 2m + 1, B1 at 2m + 2, B0 at 2m + 3 (2 stash
        // slots): each IPU alternates, never running two segments in one tick.
        let pl = Pipeline {
            schedule: Schedule::Interleaved,
            micro_batches: 3,
            segments: vec![
                segment("f0", 0, 0, 2),
                segment("f1", 1, 1, 0),
                segment("b1", 1, 2, 0),
                segment("b0", 0, 3, 0),
            ],
        };
        assert_eq!((pl.stride(), pl.span(), pl.ticks()), (2, 5, 8));
        let runs: Vec<Vec<(usize, u32)>> = (0..pl.ticks())
            .map(|t| {
                pl.segments
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| pl.micro_batch(s, t).map(|m| (i, m)))
                    .collect()
            })
            .collect();
        assert_eq!(
            runs,
            vec![
                vec![(0, 0)],
                vec![(1, 0)],
                vec![(0, 1), (2, 0)],
                vec![(1, 1), (3, 0)],
                vec![(0, 2), (2, 1)],
                vec![(1, 2), (3, 1)],
                vec![(2, 2)],
                vec![(3, 2)],
            ]
        );
        // Every IPU runs at most one segment per tick; stage 0 saves micro-batch 2 in slot 0.
        for t in 0..pl.ticks() {
            assert!(pl.tick(t).ipus.iter().all(|(_, parts)| parts
                .iter()
                .filter(|p| matches!(p, SegmentPart::Body { .. }))
                .count()
                == 1));
        }
        assert!(pl.tick(4).ipus[0].1.contains(&SegmentPart::Save {
            segment: 0,
            slot: 0
        }));
    }
}

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
//! - **Program** ([`Program`], in [`crate::program`]): the control tree, with the training
//!   step inside `Repeat(device_iterations)`, the Step phase inside
//!   `Repeat(gradient_accumulation)` followed by the Update phase.
//! - **Initial values** ([`InitialValue`]): the initialiser of every variable and the literal of
//!   every constant, so that an executable runs without its graph (a Poplar executable
//!   carries its constant data too).
//! - **Host streams**, the **memory plan** and the **static cycle estimate**.
//!
//! The codelet semantics every vertex follows are in [`crate::codelets`]; the cycle functions
//! the simulator calls while executing are in [`crate::cycles`].

pub use crate::ids::{ComputeSetId, ExchangeId, StreamId, TensorId};
pub use crate::program::{
    CollectiveOp, Pipeline, Program, ProgramStep, Segment, SegmentPart, StepKind, StreamDirection,
    Tick,
};
pub use crate::system::{SyncScope, TileId};

use crate::codelets::{Codelet, VertexParams};
use crate::estimate::CycleEstimate;
use crate::memory::MemoryPlan;
use crate::options::CompileOptions;
use crate::packed_vec::PackedVec;
use crate::system::System;
use crate::target::Target;
use ipusim_ir::{DType, Init, Literal, NodeId, Shape};
use serde::{Deserialize, Serialize};

/// Version of the serialised format; bumped on any incompatible change.
pub const FORMAT_VERSION: u32 = 6;

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

impl TensorKind {
    /// Whether a tensor of this kind holds its bytes for the whole program (variables,
    /// constants and infeed landing buffers): the memory plan never shares them, and the
    /// other kinds are temporaries live from their first step to their last.
    pub fn always_live(&self) -> bool {
        matches!(
            self,
            TensorKind::Variable | TensorKind::Constant | TensorKind::StreamBuffer { .. }
        )
    }
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
        crate::slices::find_tile(&self.slices, tile, |s| s.tile).map(|i| &self.slices[i])
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
    pub intervals: Intervals,
}

/// A slice's intervals, the first held inline: most slices have one, and a large graph has
/// millions of slices, which would otherwise each hold a heap allocation.
pub type Intervals = smallvec::SmallVec<[Interval; 1]>;

impl TileSlice {
    /// Number of elements on this tile.
    pub fn num_elements(&self) -> u64 {
        self.intervals.iter().map(|i| u64::from(i.len)).sum()
    }
}

/// A range `[begin, begin + len)` of a tensor's row-major elements, stored at byte `offset`
/// of the tile's memory.
///
/// Its length is 32-bit, as its byte offset is: a range longer than that is held as several
/// intervals ([`Interval::pieces`]), and none fits a tile anyway (tile addresses are 32-bit).
/// Sixteen bytes where a 64-bit end took twenty-four: a large CNN has millions of them. Files
/// keep the `begin`, `end`, `offset` fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "IntervalFields", into = "IntervalFields")]
pub struct Interval {
    /// First element.
    pub begin: u64,
    /// Number of elements.
    pub len: u32,
    /// Byte offset of element `begin` in the tile's memory.
    pub offset: u32,
}

impl Interval {
    /// The interval `[begin, end)` at byte `offset`.
    ///
    /// # Panics
    ///
    /// If `end < begin` or the range holds more than `u32::MAX` elements (split it with
    /// [`Interval::pieces`]).
    pub fn new(begin: u64, end: u64, offset: u32) -> Interval {
        let len = end
            .checked_sub(begin)
            .and_then(|n| u32::try_from(n).ok())
            .expect("an interval holds at most u32::MAX elements");
        Interval { begin, len, offset }
    }

    /// One past the last element.
    pub fn end(&self) -> u64 {
        self.begin + u64::from(self.len)
    }

    /// The intervals holding `[begin, end)`, stored from byte `offset` on in elements of
    /// `es` bytes: one unless the range is longer than `u32::MAX` elements. Offsets past
    /// 32 bits wrap; the memory plan places slices anew, and refuses one that passes them.
    pub fn pieces(begin: u64, end: u64, offset: u64, es: u64) -> impl Iterator<Item = Interval> {
        let step = u64::from(u32::MAX);
        (begin..end).step_by(step as usize).map(move |b| {
            let e = end.min(b.saturating_add(step));
            Interval::new(
                b,
                e,
                offset.wrapping_add((b - begin).wrapping_mul(es)) as u32,
            )
        })
    }
}

/// An interval as files hold it.
#[derive(Clone, Copy, Serialize, Deserialize)]
struct IntervalFields {
    begin: u64,
    end: u64,
    offset: u32,
}

impl From<Interval> for IntervalFields {
    fn from(i: Interval) -> Self {
        IntervalFields {
            begin: i.begin,
            end: i.end(),
            offset: i.offset,
        }
    }
}

impl TryFrom<IntervalFields> for Interval {
    type Error = String;
    fn try_from(f: IntervalFields) -> Result<Self, String> {
        match f.end.checked_sub(f.begin).map(u32::try_from) {
            Some(Ok(len)) => Ok(Interval {
                begin: f.begin,
                len,
                offset: f.offset,
            }),
            _ => Err(format!(
                "interval [{}, {}): the end must be at or after the begin and within 2^32 - 1 elements of it",
                f.begin, f.end
            )),
        }
    }
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
    /// The node whose fused vertices compute this value without storing it (element-wise
    /// fusion); then `tensor` is `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fused_into: Option<String>,
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

/// A vertex's operands, four held inline (93% of the hands-on day's vertices have at most
/// four; millions of vertices would otherwise each hold a heap allocation), in 52 bytes
/// ([`crate::packed_vec`]).
pub type Operands = PackedVec<Operand, 4>;

/// One vertex: an instance of its group's codelet on one worker context, or split among
/// them all ([`crate::workers`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Vertex {
    /// Worker context `0..target.worker_contexts`, or [`crate::workers::ALL_WORKERS`] for a
    /// vertex its workers split among them ([`crate::workers::can_split`]); the simulator derives a worker's
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

/// The work of one compute set on one tile: groups run one after the other, but for the
/// reduction groups of worker vertices, which share the tile's workers
/// ([`crate::cycles::groups_cycles`]).
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

/// A copy's destinations, one held inline (83% of the hands-on day's 10.7 million copies
/// have one), in 12 bytes, so that a copy takes 32 ([`crate::packed_vec`]).
pub type CopyDsts = PackedVec<CopyDst, 1>;

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
    use super::{ByteCopy, Interval, TileSlice};

    /// The sizes a large graph's millions of copies, vertices and slices take (see
    /// [`crate::packed_vec`] and [`Interval`]).
    #[test]
    fn a_copy_takes_32_bytes_a_vertex_104_a_slice_32_and_an_interval_16() {
        use std::mem::size_of;
        assert_eq!(size_of::<ByteCopy>(), 32);
        assert_eq!(size_of::<super::Vertex>(), 104);
        assert_eq!(size_of::<TileSlice>(), 32);
        assert_eq!(size_of::<Interval>(), 16);
    }

    #[test]
    fn a_range_past_32_bits_of_elements_is_held_in_pieces_that_continue_one_another() {
        let max = u64::from(u32::MAX);
        let (begin, end) = (5, 5 + 2 * max + 7);
        let pieces: Vec<Interval> = Interval::pieces(begin, end, 64, 2).collect();
        assert_eq!(pieces.len(), 3);
        assert_eq!(pieces[0].begin, begin);
        assert_eq!(pieces[2].end(), end);
        for w in pieces.windows(2) {
            assert_eq!(w[0].end(), w[1].begin);
        }
        assert_eq!(pieces[2].len, 7);
        // Byte offsets follow the elements, wrapping past 32 bits (the plan places them anew).
        assert_eq!(pieces[1].offset, (64 + 2 * max) as u32);
        let one: Vec<Interval> = Interval::pieces(3, 10, 8, 4).collect();
        assert_eq!(one, vec![Interval::new(3, 10, 8)]);
        assert_eq!(Interval::pieces(3, 3, 0, 4).count(), 0);
    }

    #[test]
    fn files_keep_the_end_and_one_out_of_range_is_refused_with_its_bounds() {
        let iv = Interval::new(10, 20, 96);
        let text = ron::to_string(&iv).unwrap();
        assert_eq!(text, "(begin:10,end:20,offset:96)");
        assert_eq!(ron::from_str::<Interval>(&text).unwrap(), iv);
        for bad in [
            "(begin:20,end:10,offset:0)",
            "(begin:0,end:4294967296,offset:0)",
        ] {
            let e = ron::from_str::<Interval>(bad).unwrap_err().to_string();
            assert!(e.contains("interval [") && e.contains("2^32 - 1"), "{e}");
        }
    }
}

//! The lowering context: what lowering has built so far (tensors and their mappings, node
//! values, compute sets, exchanges, streams, program steps and their tensor usage) behind
//! typed accessors, and the generic ways to add to it — place a tensor, emit a BSP
//! superstep, copy a stream. The op families ([`super::ops`]) and the building blocks
//! ([`super::kit`]) work through these accessors; only the driver ([`super`]) finishes the
//! context into a [`Lowered`].
//!
//! It imports no op family: the one op-specific question it asks — which layout does the
//! consumer of a variable want — goes through the [`Hooks`] the driver gives it.
//!
//! Its multi-IPU methods (stages and pipeline segments, copies onto another IPU, the
//! replicas' all-reduce, remote buffers) are in [`ipus`]; holding supersteps back to emit
//! several lowerings' interleaved is in [`lanes`]; the exchanges' copies are in [`copies`],
//! built, with the compute sets' cycle estimates, on the side thread of [`side`]; the
//! tensors' usage over the steps, once they are final, in [`usage`].

pub(crate) mod copies;
mod ipus;
mod lanes;
mod side;
#[cfg(test)]
mod tests;
mod usage;

use super::kit::mapping::{self, Index, Mapping};
use super::kit::planner::Plan;
use crate::error::CompileError;
use crate::executable::{
    ComputeSet, ComputeSetId, Exchange, ExchangeId, HostStream, NodeValue, Program, ProgramStep,
    StepKind, StreamDirection, StreamId, Tensor, TensorId, TensorKind, TileWork,
};
use crate::options::CompileOptions;
use crate::target::Target;
use copies::Copies;
use ipusim_exe::memory::Usage;
use ipusim_exe::system::{SyncScope, TileId};
use ipusim_ir::pipeline::Placement;
use ipusim_ir::{DType, Graph, NodeId, Op, Shape};
use side::{Job, SideWorker};
use std::any::Any;
use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

/// Where a node's value is: a tensor, possibly seen with its last two dimensions swapped
/// (a `Transpose` that is folded into its consumers until one needs it materialised), or
/// holding a feature map with its channels grouped (`group` > 1: the tensor's shape is the
/// value's storage shape, `ipusim_exe::layout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Value {
    pub tensor: TensorId,
    pub transposed: bool,
    pub group: u32,
}

/// Which part of a pipeline an emitted program node belongs to (a pipelined schedule's
/// segments: `crate::lower::pipeline`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// The work of segment `s`.
    Body(u32),
    /// An inter-IPU copy of a value segment `s` produced (with its external sync).
    Send(u32),
}

/// Everything lowering produces, before the memory plan assigns byte offsets. Operand and
/// copy offsets are still relative to their tensor's slice on the tile.
pub(crate) struct Lowered {
    pub tensors: Vec<Tensor>,
    pub values: Vec<NodeValue>,
    pub compute_sets: Vec<ComputeSet>,
    pub exchanges: Vec<Exchange>,
    pub streams: Vec<HostStream>,
    pub program: Program,
    pub steps: Vec<ProgramStep>,
    pub usage: Vec<Usage>,
}

/// The op-specific questions the context asks through the driver (so that it imports no
/// op family).
#[derive(Clone, Copy)]
pub(crate) struct Hooks {
    /// The layout the op of node `consumer` wants for its input `which`, if it has one (the
    /// matmul's operand layouts, PopLibs' createMatMulInputLHS/RHS).
    pub operand_layout: fn(&mut Lowerer, NodeId, usize) -> Option<Mapping>,
}

/// The lowering context.
pub(crate) struct Lowerer<'a> {
    g: &'a Graph,
    target: &'a Target,
    options: &'a CompileOptions,
    hooks: Hooks,
    placement: &'a Placement,
    /// The IPU the node being lowered runs on: new tensors and vertices go there.
    ipu: u32,
    /// Copies of tensors made on other IPUs in the phase being lowered: (tensor, IPU) -> copy.
    ipu_copies: HashMap<(TensorId, u32), TensorId>,
    tensors: Vec<Tensor>,
    index: Vec<OnceCell<Arc<Index>>>,
    /// The tensors whose index is built ([`Lowerer::forget_indexes`]).
    indexed: RefCell<Vec<TensorId>>,
    values: HashMap<NodeId, Value>,
    compute_sets: Vec<ComputeSet>,
    exchanges: Vec<Exchange>,
    /// The thread building the exchanges' recorded copies and estimating the compute sets'
    /// cycles ([`side`]), started with the first job.
    side: Option<SideWorker>,
    streams: Vec<HostStream>,
    steps: Vec<ProgramStep>,
    usage: Vec<Usage>,
    body: Vec<Program>,
    /// The part of each entry of `body` (kept only when the program is pipelined).
    parts: Vec<Part>,
    /// Each node's pipeline segment (indexed by node id); empty when not pipelined.
    node_segment: Vec<u32>,
    /// The segment of the node being lowered.
    segment: u32,
    /// Values read on another IPU than their own, with the reading segment (pipelined
    /// programs only).
    crossings: Vec<(NodeId, u32)>,
    next_start: u32,
    /// First tiles promised to nodes not lowered yet (a convolution whose weights were laid
    /// out by its plan before it was lowered).
    pinned_start: HashMap<NodeId, u32>,
    /// Forward convolutions whose weights were laid out in their input-gradient pass's
    /// blocks: the chunk of input channels they read them in.
    weight_chunks: HashMap<NodeId, u32>,
    /// Value nodes computed in place into a variable: value node -> variable node.
    inplace: HashMap<NodeId, NodeId>,
    /// Matmul plans chosen so far, with the (A, B) transposed-ness they were made for.
    plans: HashMap<NodeId, (Plan, (bool, bool))>,
    /// Row-major copies of channel-grouped values, made for consumers that read row-major.
    row_major: HashMap<NodeId, TensorId>,
    /// The grouped tensor each row-major copy was made from.
    copy_of: HashMap<TensorId, TensorId>,
    /// Offloaded variables loaded in the phase being lowered, to store at its end.
    remote: Vec<TensorId>,
    /// Element-wise fusion: the group each root node computes.
    fused: HashMap<NodeId, FusedGroup>,
    /// Element-wise fusion: the root each interior node is computed by.
    fused_into: HashMap<NodeId, NodeId>,
    /// Sum reductions reading a widening cast (and its square) themselves.
    reduce_inputs: HashMap<NodeId, ReduceInput>,
    /// Independent lowerings whose supersteps are being interleaved ([`Lowerer::begin_lanes`]).
    lanes: Option<lanes::Lanes>,
    /// Results of pure planning functions by a key naming all they depend on
    /// ([`Lowerer::memoized`]).
    memo: RefCell<HashMap<String, Rc<dyn Any>>>,
}

/// What a sum reduction reads instead of its IR input (planned by `super::absorb`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReduceInput {
    /// The node read: the F16 input of the absorbed cast, or the F32 value squared.
    pub source: NodeId,
    /// Whether the reduction sums the squares of the values read.
    pub square: bool,
    /// The absorbed nodes: the cast, and the square when there is one.
    pub members: [Option<NodeId>; 2],
}

/// A chain of element-wise nodes one fused vertex per tile computes (the planner is
/// `super::fusion`): its root's value is stored, the other members' are not.
#[derive(Clone, Debug)]
pub(crate) struct FusedGroup {
    /// The leaf inputs, in operand order (folded broadcasts replaced by their inputs).
    pub leaves: Vec<NodeId>,
    /// The members in step order (the root last).
    pub members: Vec<NodeId>,
    /// The fused codelet.
    pub codelet: crate::codelets::Codelet,
}

impl<'a> Lowerer<'a> {
    /// An empty context for `g` on `target`.
    pub fn new(
        g: &'a Graph,
        target: &'a Target,
        options: &'a CompileOptions,
        hooks: Hooks,
        placement: &'a Placement,
    ) -> Lowerer<'a> {
        Lowerer {
            g,
            target,
            options,
            hooks,
            placement,
            ipu: 0,
            ipu_copies: HashMap::new(),
            tensors: Vec::new(),
            index: Vec::new(),
            indexed: RefCell::new(Vec::new()),
            values: HashMap::new(),
            compute_sets: Vec::new(),
            exchanges: Vec::new(),
            side: None,
            streams: Vec::new(),
            steps: Vec::new(),
            usage: Vec::new(),
            body: Vec::new(),
            parts: Vec::new(),
            node_segment: Vec::new(),
            segment: 0,
            crossings: Vec::new(),
            next_start: 0,
            pinned_start: HashMap::new(),
            weight_chunks: HashMap::new(),
            inplace: HashMap::new(),
            plans: HashMap::new(),
            row_major: HashMap::new(),
            copy_of: HashMap::new(),
            remote: Vec::new(),
            fused: HashMap::new(),
            fused_into: HashMap::new(),
            reduce_inputs: HashMap::new(),
            lanes: None,
            memo: RefCell::new(HashMap::new()),
        }
    }

    /// The result of the pure planning function `compute` for `key`, computed once per
    /// lowering: `key` must name everything `compute` reads besides the target and the
    /// options (a convolution plan of the same problem, tiles and memory budget is the same
    /// plan; ResNet101's 23 equal `layer3` blocks are planned once per pass).
    pub fn memoized<T: Clone + 'static>(&self, key: String, compute: impl FnOnce() -> T) -> T {
        let hit = self
            .memo
            .borrow()
            .get(&key)
            .and_then(|v| v.downcast_ref::<T>().cloned());
        if let Some(v) = hit {
            return v;
        }
        let v = compute();
        self.memo.borrow_mut().insert(key, Rc::new(v.clone()));
        v
    }

    /// The graph being lowered.
    pub fn graph(&self) -> &'a Graph {
        self.g
    }

    /// The chip.
    pub fn target(&self) -> &'a Target {
        self.target
    }

    /// The compile options.
    pub fn options(&self) -> &'a CompileOptions {
        self.options
    }

    /// The tensor with id `t`.
    pub fn tensor(&self, t: TensorId) -> &Tensor {
        &self.tensors[t.0 as usize]
    }

    /// The element index of tensor `t` (its intervals in element order, with their
    /// slice-relative positions), built from its slices when it is asked for (the first
    /// time, and again after [`Lowerer::forget_indexes`]):
    /// most tensors a compile creates (staging areas, partials read on their own tiles)
    /// never are, and a large graph's indexes would hold a segment per interval of every
    /// tensor (ResNet-50: 5.6 M, 211 MB).
    pub fn index(&self, t: TensorId) -> &Index {
        self.indexed_arc(t)
    }

    /// [`Lowerer::index`], shared (for copies built on another thread).
    pub fn shared_index(&self, t: TensorId) -> Arc<Index> {
        Arc::clone(self.indexed_arc(t))
    }

    fn indexed_arc(&self, t: TensorId) -> &Arc<Index> {
        let cell = &self.index[t.0 as usize];
        if let Some(index) = cell.get() {
            return index;
        }
        self.indexed.borrow_mut().push(t);
        cell.get_or_init(|| Arc::new(mapping::slices_index(&self.tensors[t.0 as usize])))
    }

    /// Drops the element indexes built so far; they are built again from the slices when
    /// asked for. Called between nodes, so that a compile holds the indexes of the node
    /// being lowered rather than of every tensor it has made (ResNet-50 b1 then builds
    /// 7.7 M segments in all where it held 5.6 M at once, and its peak host memory falls by
    /// 0.1 GB).
    pub fn forget_indexes(&mut self) {
        for t in self.indexed.get_mut().drain(..) {
            self.index[t.0 as usize] = OnceCell::new();
        }
    }

    /// True when node `id` has a value already.
    pub fn has_value(&self, id: NodeId) -> bool {
        self.values.contains_key(&id)
    }

    /// The variable node `value` is computed in place into, if any.
    pub fn inplace_target(&self, value: NodeId) -> Option<NodeId> {
        self.inplace.get(&value).copied()
    }

    /// True when variable `var` takes a new value in place (some op writes it).
    pub fn is_written_in_place(&self, var: NodeId) -> bool {
        self.inplace.values().any(|&v| v == var)
    }

    /// Records that node `value` is computed in place into variable `var`.
    pub fn set_inplace(&mut self, value: NodeId, var: NodeId) {
        self.inplace.insert(value, var);
    }

    /// Records the fused groups, by root.
    pub fn set_fused(&mut self, groups: HashMap<NodeId, FusedGroup>) {
        self.fused_into = groups
            .iter()
            .flat_map(|(&root, g)| {
                g.members
                    .iter()
                    .filter(move |&&m| m != root)
                    .map(move |&m| (m, root))
            })
            .collect();
        self.fused = groups;
    }

    /// Records the sum reductions that read their input's widening cast (and its square)
    /// themselves: the absorbed nodes are computed by the reduction, as fused members are.
    pub fn set_reduce_inputs(&mut self, inputs: HashMap<NodeId, ReduceInput>) {
        for (&r, input) in &inputs {
            for m in input.members.iter().flatten() {
                self.fused_into.insert(*m, r);
            }
        }
        self.reduce_inputs = inputs;
    }

    /// What sum reduction `id` reads instead of its IR input, if it absorbed it.
    pub fn reduce_input(&self, id: NodeId) -> Option<ReduceInput> {
        self.reduce_inputs.get(&id).copied()
    }

    /// The fused group node `id` is the root of, if any.
    pub fn fused(&self, id: NodeId) -> Option<&FusedGroup> {
        self.fused.get(&id)
    }

    /// The root whose fused vertices compute interior node `id`, if any.
    pub fn fused_into(&self, id: NodeId) -> Option<NodeId> {
        self.fused_into.get(&id).copied()
    }

    /// The matmul plan chosen for node `id`, with the (A, B) transposed-ness it was made for.
    pub fn plan(&self, id: NodeId) -> Option<&(Plan, (bool, bool))> {
        self.plans.get(&id)
    }

    /// Records the matmul plan of node `id`.
    pub fn set_plan(&mut self, id: NodeId, plan: Plan, transposed: (bool, bool)) {
        self.plans.insert(id, (plan, transposed));
    }

    /// Records that node `id`'s value is `value` (possibly a folded transpose).
    pub fn set_view(&mut self, id: NodeId, value: Value) {
        self.values.insert(id, value);
    }

    /// The program nodes emitted since the last call (the body of the phase being lowered).
    /// Copies made onto other IPUs in that body are not reused after it (the next phase may
    /// see new values).
    pub fn take_body(&mut self) -> Vec<Program> {
        self.ipu_copies.clear();
        std::mem::take(&mut self.body)
    }

    /// Compute set `id` (its tiles once [`Lowerer::settle`] has run).
    pub fn compute_set(&self, id: ComputeSetId) -> &ComputeSet {
        &self.compute_sets[id.0 as usize]
    }

    /// Exchange `id` (its copies once [`Lowerer::settle`] has run).
    pub fn exchange(&self, id: ExchangeId) -> &Exchange {
        &self.exchanges[id.0 as usize]
    }

    /// Tile `tile` of the IPU being lowered for.
    pub fn tile_id(&self, tile: u32) -> TileId {
        TileId::new(self.ipu, tile)
    }

    /// Declares the stream of node `id` (its value is tensor `t`) and copies it now.
    pub fn add_stream(
        &mut self,
        id: NodeId,
        name: String,
        direction: StreamDirection,
        t: TensorId,
    ) {
        self.host_stream(id, name, direction, t)
    }

    /// The id the next declared stream gets.
    pub fn next_stream_id(&self) -> StreamId {
        StreamId(self.streams.len() as u32)
    }

    /// Finishes lowering: the context's tables with the program and the nodes' values.
    pub fn into_lowered(mut self, program: Program, values: Vec<NodeValue>) -> Lowered {
        self.settle();
        Lowered {
            tensors: self.tensors,
            values,
            compute_sets: self.compute_sets,
            exchanges: self.exchanges,
            streams: self.streams,
            program,
            steps: self.steps,
            usage: self.usage,
        }
    }

    /// The `NodeValue` of every lowered node among `nodes`, in their order.
    pub fn node_values(&self, nodes: impl Iterator<Item = NodeId>) -> Vec<NodeValue> {
        nodes
            .filter_map(|id| {
                let n = self.g.node(id);
                if let Some(root) = self.fused_into(id) {
                    return Some(NodeValue {
                        node: id,
                        name: n.name.clone(),
                        tensor: None,
                        dtype: n.ty.dtype,
                        shape: n.ty.shape.clone(),
                        group: 1,
                        fused_into: Some(self.g.node(root).name.clone()),
                    });
                }
                let v = self.values.get(&id)?;
                let tensor = (!v.transposed).then_some(v.tensor);
                Some(NodeValue {
                    node: id,
                    name: n.name.clone(),
                    tensor,
                    dtype: n.ty.dtype,
                    shape: n.ty.shape.clone(),
                    group: v.group.max(1),
                    fused_into: None,
                })
            })
            .collect()
    }

    /// The node's value, placing a Variable or Constant on first use, on the IPU being
    /// lowered for: a value that lives on another IPU is copied here over the IPU-Links first
    /// (once per phase).
    pub fn value(&mut self, id: NodeId) -> Result<Value, CompileError> {
        if self.is_unplaced(id) {
            self.place_source(id, None)?;
        }
        let v = self.value_of(id)?;
        if self.tensor_ipu(v.tensor) == self.ipu {
            return Ok(v);
        }
        if !self.node_segment.is_empty() {
            self.crossings.push((id, self.segment));
        }
        Ok(Value {
            tensor: self.copy_to_ipu(id, v.tensor),
            ..v
        })
    }

    /// Creates the tensor of a Variable or Constant in the layout of the matmul that will read
    /// it (PopLibs' createMatMulInputLHS/RHS), else in `fallback`, else linearly.
    pub fn place_source(
        &mut self,
        id: NodeId,
        fallback: Option<Mapping>,
    ) -> Result<TensorId, CompileError> {
        let node = self.g.node(id);
        let kind = match node.op {
            Op::Variable { .. }
                if self.options.offload_optimizer_state && self.is_update_state(id) =>
            {
                TensorKind::RemoteVariable
            }
            Op::Variable { .. } => TensorKind::Variable,
            _ => TensorKind::Constant,
        };
        // A source lives on the IPU of its stage, wherever it is first read from.
        let here = std::mem::replace(&mut self.ipu, self.placement.ipu_of(id));
        let ty = node.ty.clone();
        let n = ty.num_elements() as u64;
        let m = match (self.layout_hint(id, 0), fallback) {
            (Some(m), _) | (None, Some(m)) => m,
            (None, None) => self.fresh_mapping(n, ty.dtype),
        };
        let remote = kind == TensorKind::RemoteVariable;
        let t = self.new_tensor(node.name.clone(), Some(id), kind, ty.dtype, ty.shape, m);
        self.set_value(id, t);
        if remote {
            // Loaded from its remote buffer before the update that reads it first.
            self.remote_copy(t, false);
            self.remote.push(t);
        }
        self.ipu = here;
        Ok(t)
    }

    /// The layout the first matmul reading `id`'s elements (through casts, unary ops,
    /// reshapes, folded transposes, or as the first input of an element-wise op) wants.
    pub fn layout_hint(&mut self, id: NodeId, depth: u32) -> Option<Mapping> {
        if depth > 8 {
            return None;
        }
        let n = self.g.node(id).ty.num_elements();
        for c in self.g.consumers(id) {
            let cn = self.g.node(c);
            let same = cn.ty.num_elements() == n && cn.inputs.first() == Some(&id);
            // The consumer's op family may want this operand in a layout of its own.
            let which = cn.inputs.iter().position(|&i| i == id).unwrap_or(0);
            if let Some(m) = (self.hooks.operand_layout)(self, c, which) {
                return Some(m);
            }
            // Else follow the value through ops whose output keeps its input's layout.
            let follow = match &cn.op {
                Op::Cast { .. } | Op::Reshape { .. } => true,
                op if is_swap_last(op) => true,
                op if op.unary().is_some() => true,
                op if op.binary().is_some_and(|b| !b.is_comparison()) => same,
                Op::ScaledAdd { .. } | Op::ActivationGrad { .. } => same,
                _ => false,
            };
            if follow && !self.values.contains_key(&c) {
                if let Some(m) = self.layout_hint(c, depth + 1) {
                    return Some(m);
                }
            }
        }
        None
    }

    /// Records that node `id`'s value is tensor `t` (not transposed, row-major).
    pub fn set_value(&mut self, id: NodeId, t: TensorId) {
        self.set_grouped(id, t, 1);
    }

    /// Records that node `id`'s value is tensor `t` holding it with its channels grouped by
    /// `group` (1: row-major; the tensor's shape is the storage shape).
    pub fn set_grouped(&mut self, id: NodeId, t: TensorId, group: u32) {
        self.values.insert(
            id,
            Value {
                tensor: t,
                transposed: false,
                group: group.max(1),
            },
        );
    }

    /// The row-major copy of node `id`'s channel-grouped value, once made.
    pub fn row_major_copy(&self, id: NodeId) -> Option<TensorId> {
        self.row_major.get(&id).copied()
    }

    /// Records the row-major copy `t` of node `id`'s channel-grouped value. The value's own
    /// tensor stays live wherever the copy is used, so that the node's value (what a
    /// debugger shows) is valid for as long as it is read.
    pub fn set_row_major_copy(&mut self, id: NodeId, t: TensorId) {
        self.row_major.insert(id, t);
        if let Some(v) = self.values.get(&id) {
            self.copy_of.insert(t, v.tensor);
        }
    }

    /// The node's value as lowered so far.
    pub fn value_of(&self, id: NodeId) -> Result<Value, CompileError> {
        self.values.get(&id).copied().ok_or_else(|| {
            let n = self.g.node(id);
            CompileError::Unsupported {
                node: n.name.clone(),
                op: n.op.name(),
                reason: "its value was not lowered before a consumer needed it".into(),
            }
        })
    }

    /// True for a Variable or Constant whose tensor is not created yet (they are placed when
    /// first read, in the layout their reader wants).
    pub fn is_unplaced(&self, id: NodeId) -> bool {
        !self.values.contains_key(&id)
            && matches!(
                self.g.node(id).op,
                Op::Variable { .. } | Op::Constant { .. }
            )
    }

    /// The node's name and op name, for errors.
    pub fn unsupported(&self, id: NodeId, reason: impl Into<String>) -> CompileError {
        let n = self.g.node(id);
        CompileError::Unsupported {
            node: n.name.clone(),
            op: n.op.name(),
            reason: reason.into(),
        }
    }

    /// A fresh linear mapping of `n` elements over the number of tiles the cost model picks.
    pub fn fresh_mapping(&mut self, n: u64, dtype: DType) -> Mapping {
        let tiles = mapping::choose_tiles(self.target, n, dtype);
        self.mapping_over(n, dtype, tiles)
    }

    /// A linear mapping over `tiles` tiles, starting where the last partial mapping ended so
    /// that small tensors spread over the chip.
    pub fn mapping_over(&mut self, n: u64, dtype: DType, tiles: u32) -> Mapping {
        let start = if tiles >= self.target.tiles {
            0
        } else {
            self.next_start
        };
        let m = mapping::linear(self.target, n, dtype, tiles, start);
        if tiles < self.target.tiles {
            self.next_start = (start + m.tiles.len() as u32) % self.target.tiles;
        }
        m
    }

    /// Slice-relative element position of element `flat` of `t` on the tile holding it.
    pub fn position(&self, t: TensorId, flat: u64) -> u64 {
        let index = self.index(t);
        mapping::locate(index, flat).map_or(0, |i| index[i].pos + (flat - index[i].begin))
    }

    /// The first element index of `t`'s slice on `tile` (staging and partials tensors have
    /// one interval per tile).
    pub fn slice_begin(&self, t: TensorId, tile: u32) -> u64 {
        self.tensors[t.0 as usize]
            .slice_on(TileId::new(self.tensor_ipu(t), tile))
            .and_then(|s| s.intervals.first())
            .map_or(0, |i| i.begin)
    }

    /// The tile the next rotating placement starts at.
    pub fn peek_start(&self) -> u32 {
        self.next_start
    }

    /// Promises node `id`'s blocks the first tile `start`, where an operand was laid out for
    /// them before `id` is lowered (see [`Lowerer::start_for`]).
    pub fn pin_start(&mut self, id: NodeId, start: u32) {
        self.pinned_start.entry(id).or_insert(start);
    }

    /// Records that forward convolution `id` reads its weights in chunks of `chunk` input
    /// channels (they were laid out for its input-gradient pass).
    pub fn set_weight_chunk(&mut self, id: NodeId, chunk: u32) {
        self.weight_chunks.insert(id, chunk);
    }

    /// The chunk of input channels forward convolution `id` reads its weights in (0:
    /// row-major).
    pub fn weight_chunk(&self, id: NodeId) -> u32 {
        self.weight_chunks.get(&id).copied().unwrap_or(0)
    }

    /// The first tile of node `id`'s `tiles` consecutive tiles: the one promised to it
    /// when an operand was laid out for it, else the next by rotation over the chip (which
    /// advances either way).
    pub fn start_for(&mut self, id: NodeId, tiles: u32) -> u32 {
        let next = self.rotate_start(tiles);
        self.pinned_start.remove(&id).unwrap_or(next)
    }

    /// The first tile for a block of `tiles` consecutive tiles, rotating over the chip.
    pub fn rotate_start(&mut self, tiles: u32) -> u32 {
        let start = self.next_start;
        self.next_start = (start + tiles) % self.target.tiles;
        start
    }

    /// Creates a tensor with a mapping; interval offsets are relative to the slice for now.
    pub fn new_tensor(
        &mut self,
        name: String,
        node: Option<NodeId>,
        kind: TensorKind,
        dtype: DType,
        shape: Shape,
        mapping: Mapping,
    ) -> TensorId {
        let id = TensorId(self.tensors.len() as u32);
        self.index.push(OnceCell::new());
        self.tensors.push(Tensor {
            name,
            node,
            kind,
            slices: mapping::tile_slices(&mapping, dtype, self.ipu),
            dtype,
            shape,
        });
        self.usage.push(Usage::default());
        id
    }

    /// Replaces the shape and mapping of a tensor (staging tensors grow while lowering).
    pub fn set_mapping(&mut self, id: TensorId, shape: Shape, mapping: Mapping) {
        let t = &mut self.tensors[id.0 as usize];
        t.shape = shape;
        t.slices = mapping::tile_slices(&mapping, t.dtype, self.ipu);
        self.index[id.0 as usize] = OnceCell::new();
    }

    /// Declares the stream of node `id` (its value is tensor `t`) and copies it now.
    fn host_stream(&mut self, id: NodeId, name: String, direction: StreamDirection, t: TensorId) {
        let ty = self.g.node(id).ty.clone();
        let sid = StreamId(self.streams.len() as u32);
        self.streams.push(HostStream {
            name: name.clone(),
            direction,
            dtype: ty.dtype,
            bytes_per_micro_batch: ty.size_bytes() as u64,
            shape: ty.shape,
            node: id,
            tensor: t,
        });
        self.set_value(id, t);
        self.stream_copy(sid, direction, t, name);
    }

    fn stream_copy(
        &mut self,
        stream: StreamId,
        direction: StreamDirection,
        t: TensorId,
        name: String,
    ) {
        let copy = Program::StreamCopy {
            stream,
            direction,
            tensor: t,
        };
        self.push_step(StepKind::StreamCopy(stream), name, copy);
    }

    /// Appends a program step and its program node.
    fn push_step(&mut self, kind: StepKind, name: String, program: Program) {
        self.steps.push(ProgramStep { kind, name });
        self.push_body(program, Part::Body(self.segment));
    }

    /// Emits one BSP superstep: `Sync`, the exchange of `copies` (if any), then the compute
    /// set of `tiles` (if any vertices; the groups of entries of one tile run one after the
    /// other, in the order given).
    pub fn superstep(
        &mut self,
        name: &str,
        node: Option<NodeId>,
        copies: impl Into<Copies>,
        mut tiles: Vec<TileWork>,
    ) {
        let copies = copies.into();
        tiles.retain(|t| !t.groups.is_empty());
        let exchange = !copies.is_empty();
        if !exchange && tiles.is_empty() {
            return;
        }
        if let Some(lanes) = &mut self.lanes {
            lanes.hold(name, node, copies, tiles);
            return;
        }
        self.push_body(Program::Sync(SyncScope::Internal), Part::Body(self.segment));
        if exchange {
            let id = ExchangeId(self.exchanges.len() as u32);
            let ex_name = format!("{name}/exchange");
            self.exchanges.push(Exchange {
                name: ex_name.clone(),
                node,
                copies: Vec::new(),
                cycles: 0,
            });
            self.build_copies(id, copies);
            self.push_step(StepKind::Exchange(id), ex_name, Program::Exchange(id));
        }
        if !tiles.is_empty() {
            merge_tiles(&mut tiles);
            let id = ComputeSetId(self.compute_sets.len() as u32);
            self.compute_sets.push(ComputeSet {
                name: name.to_string(),
                node,
                tiles: Vec::new(),
                cycles: 0,
            });
            self.on_side_thread(Job::Cycles(id.0, tiles));
            self.push_step(
                StepKind::Execute(id),
                name.to_string(),
                Program::Execute(id),
            );
        }
    }
}

/// True for a `Transpose` that swaps the last two dimensions only (folded into matmuls).
pub fn is_swap_last(op: &Op) -> bool {
    match op {
        Op::Transpose { perm } => {
            let r = perm.len();
            r >= 2
                && perm[r - 1] == r - 2
                && perm[r - 2] == r - 1
                && perm[..r - 2].iter().enumerate().all(|(i, &p)| i == p)
        }
        _ => false,
    }
}

/// Appends `x` to `list` unless it is among the last four listed: a compute set's vertices
/// and an exchange's requests name the same few tensors over and over, and the lists they
/// fill are sorted and deduplicated after, so a repeat left out changes nothing.
pub(crate) fn push_new<T: PartialEq>(list: &mut Vec<T>, x: T) {
    if !list[list.len().saturating_sub(4)..].contains(&x) {
        list.push(x);
    }
}

/// Sorts work entries by tile and merges the entries of one tile (their groups run one after
/// the other, in the order given). Each merged list is allocated at its size: a reduction
/// gives a tile one entry per block, dozens on a tile of a large CNN's batch norm, and the
/// lists live as long as the executable (growing them by doubling left a third of the
/// hands-on day's tile works and a tenth of its groups as unused capacity).
fn merge_tiles(tiles: &mut Vec<TileWork>) {
    if tiles.windows(2).all(|w| w[0].tile < w[1].tile) {
        return;
    }
    tiles.sort_by_key(|t| t.tile);
    let distinct = 1 + tiles.windows(2).filter(|w| w[0].tile != w[1].tile).count();
    let mut out: Vec<TileWork> = Vec::with_capacity(distinct);
    for run in tiles.chunk_by_mut(|a, b| a.tile == b.tile) {
        if let [one] = run {
            out.push(TileWork {
                tile: one.tile,
                groups: std::mem::take(&mut one.groups),
                cycles: one.cycles,
            });
            continue;
        }
        let mut groups = Vec::with_capacity(run.iter().map(|t| t.groups.len()).sum());
        for t in run.iter_mut() {
            groups.append(&mut t.groups);
        }
        out.push(TileWork {
            tile: run[0].tile,
            groups,
            cycles: run[0].cycles,
        });
    }
    *tiles = out;
}

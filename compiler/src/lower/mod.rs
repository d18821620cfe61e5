//! Lowering of a graph to tensors on tiles, vertices, compute sets, exchanges and the program
//! tree. The `Lowerer` owns the state; each op family lowers in its own module.
//!
//! Schedule: the Step-phase nodes in topological order, then the Update-phase nodes. Each
//! phase body starts with the host-to-device stream copies of its `Input`s and ends with its
//! `Assign`s (variables take their new values at the end of the phase). An `Assign` whose
//! value is an element-wise op reading the variable itself, computed after every other read of
//! the variable in that phase, is done in place: the op writes straight into the variable
//! (PopLibs' `scaledAddTo`). Each op becomes one or more BSP supersteps: `Sync`, an optional `Exchange`
//! that gathers its operands onto the tiles that need them, and an `Execute`.
//! Dead nodes (that reach no `Outfeed` or `Assign`) are not lowered.

pub(crate) mod elementwise;
pub(crate) mod mapping;
pub(crate) mod matmul;
pub(crate) mod planner;
pub(crate) mod rearrange;
pub mod reduce;
pub(crate) mod rows;
pub(crate) mod stage;

use crate::error::CompileError;
use crate::executable::{
    ByteCopy, ComputeSet, ComputeSetId, Exchange, ExchangeId, HostStream, Interval, NodeValue,
    Program, ProgramStep, StepKind, StreamDirection, StreamId, Tensor, TensorId, TensorKind,
    TileSlice, TileWork,
};
use crate::options::CompileOptions;
use crate::target::Target;
use ipusim_exe::memory::Usage;
use ipusim_exe::system::{SyncScope, TileId};
use ipusim_ir::{DType, Graph, NodeId, Op, Phase, Shape};
use mapping::{Index, Mapping};
use std::collections::HashMap;

/// Where a node's value is: a tensor, possibly seen with its last two dimensions swapped
/// (a `Transpose` that is folded into its consumers until one needs it materialised).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Value {
    pub tensor: TensorId,
    pub transposed: bool,
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

/// The lowering state.
pub(crate) struct Lowerer<'a> {
    pub g: &'a Graph,
    pub target: &'a Target,
    pub options: &'a CompileOptions,
    pub tensors: Vec<Tensor>,
    pub index: Vec<Index>,
    pub values: HashMap<NodeId, Value>,
    pub compute_sets: Vec<ComputeSet>,
    pub exchanges: Vec<Exchange>,
    pub streams: Vec<HostStream>,
    pub steps: Vec<ProgramStep>,
    pub usage: Vec<Usage>,
    body: Vec<Program>,
    next_start: u32,
    /// Value nodes computed in place into a variable: value node -> variable node.
    pub inplace: HashMap<NodeId, NodeId>,
    /// Matmul plans chosen so far, with the (A, B) transposed-ness they were made for.
    pub plans: HashMap<NodeId, (planner::Plan, (bool, bool))>,
}

/// Lowers `g` for `target`.
pub(crate) fn lower(
    g: &Graph,
    target: &Target,
    options: &CompileOptions,
) -> Result<Lowered, CompileError> {
    let order = schedule(g)?;
    let live = live_nodes(g);
    check_phases(g, &order, &live)?;
    let mut lw = Lowerer {
        g,
        target,
        options,
        tensors: Vec::new(),
        index: Vec::new(),
        values: HashMap::new(),
        compute_sets: Vec::new(),
        exchanges: Vec::new(),
        streams: Vec::new(),
        steps: Vec::new(),
        usage: Vec::new(),
        body: Vec::new(),
        next_start: 0,
        inplace: HashMap::new(),
        plans: HashMap::new(),
    };
    lw.plan_inplace(&order, &live);
    let mut phases = Vec::new();
    for phase in [Phase::Step, Phase::Update] {
        lw.body = Vec::new();
        let nodes: Vec<NodeId> = order
            .iter()
            .copied()
            .filter(|&id| g.node(id).phase == phase && live[id.as_usize()])
            .collect();
        for &id in &nodes {
            if let Op::Input { .. } = g.node(id).op {
                lw.lower_input(id)?;
            }
        }
        let mut assigns = Vec::new();
        for &id in &nodes {
            let node = g.node(id);
            match &node.op {
                Op::Input { .. } | Op::Variable { .. } | Op::Constant { .. } => {}
                Op::Assign => assigns.push(id),
                _ => lw.lower_node(id)?,
            }
        }
        lw.lower_assigns(phase, &assigns)?;
        phases.push(std::mem::take(&mut lw.body));
    }
    // Variables no op read still hold model state: place them too.
    for &id in &order {
        if matches!(g.node(id).op, Op::Variable { .. }) {
            lw.value(id)?;
        }
    }
    let update = phases.pop().unwrap_or_default();
    let step = phases.pop().unwrap_or_default();
    let mut iteration = vec![Program::Repeat {
        count: options.gradient_accumulation,
        body: Box::new(Program::Sequence(step)),
    }];
    if !update.is_empty() {
        iteration.push(Program::Sequence(update));
    }
    let program = Program::Sequence(vec![Program::Repeat {
        count: options.device_iterations,
        body: Box::new(Program::Sequence(iteration)),
    }]);
    let values = lw.node_values(&order, &live);
    Ok(Lowered {
        tensors: lw.tensors,
        values,
        compute_sets: lw.compute_sets,
        exchanges: lw.exchanges,
        streams: lw.streams,
        program,
        steps: lw.steps,
        usage: lw.usage,
    })
}

/// Node ids in a topological order: ascending ids when that is one (graphs built by adding
/// inputs first), else petgraph's order.
fn schedule(g: &Graph) -> Result<Vec<NodeId>, CompileError> {
    let ids: Vec<NodeId> = g.ids().collect();
    if ids
        .iter()
        .all(|&id| g.node(id).inputs.iter().all(|&i| i < id))
    {
        Ok(ids)
    } else {
        Ok(g.topo_order()?)
    }
}

/// Nodes whose value reaches an `Outfeed` or `Assign` (indexed by id).
fn live_nodes(g: &Graph) -> Vec<bool> {
    let n = g.ids().map(|i| i.as_usize() + 1).max().unwrap_or(0);
    let mut live = vec![false; n];
    let mut stack: Vec<NodeId> = g.ids().filter(|&i| g.node(i).op.is_sink()).collect();
    while let Some(id) = stack.pop() {
        if std::mem::replace(&mut live[id.as_usize()], true) {
            continue;
        }
        stack.extend(g.node(id).inputs.iter().copied());
    }
    // Infeeds are consumed from the host whether or not their values are used.
    for id in g.ids() {
        if matches!(g.node(id).op, Op::Input { .. }) {
            live[id.as_usize()] = true;
        }
    }
    live
}

fn phase_name(p: Phase) -> &'static str {
    match p {
        Phase::Step => "Step",
        Phase::Update => "Update",
    }
}

/// Step nodes may read Update values only through Variables; one Assign per variable and
/// phase.
fn check_phases(g: &Graph, order: &[NodeId], live: &[bool]) -> Result<(), CompileError> {
    let mut assigned: HashMap<(NodeId, Phase), NodeId> = HashMap::new();
    for &id in order {
        let node = g.node(id);
        if !live[id.as_usize()] {
            continue;
        }
        if node.phase == Phase::Step {
            for &i in &node.inputs {
                let input = g.node(i);
                if input.phase == Phase::Update && !input.op.is_source() {
                    return Err(CompileError::PhaseOrder {
                        node: node.name.clone(),
                        input: input.name.clone(),
                    });
                }
            }
        }
        if let Op::Assign = node.op {
            let var = node.inputs[0];
            if !matches!(g.node(var).op, Op::Variable { .. }) {
                return Err(CompileError::Unsupported {
                    node: node.name.clone(),
                    op: "Assign",
                    reason: format!("'{}' is not a Variable", g.node(var).name),
                });
            }
            if let Some(first) = assigned.insert((var, node.phase), id) {
                return Err(CompileError::DuplicateAssign {
                    variable: g.node(var).name.clone(),
                    phase: phase_name(node.phase),
                    first: g.node(first).name.clone(),
                    second: node.name.clone(),
                });
            }
        }
    }
    Ok(())
}

impl<'a> Lowerer<'a> {
    /// Decides which Assigns are done in place (see the module docs).
    fn plan_inplace(&mut self, order: &[NodeId], live: &[bool]) {
        let pos: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        for &a in order {
            let node = self.g.node(a);
            if !matches!(node.op, Op::Assign) || !live[a.as_usize()] {
                continue;
            }
            let (var, value) = (node.inputs[0], node.inputs[1]);
            let v = self.g.node(value);
            let elementwise = v.op.unary().is_some()
                || v.op.binary().is_some_and(|b| !b.is_comparison())
                || matches!(
                    v.op,
                    Op::ScaledAdd { .. } | Op::ActivationGrad { .. } | Op::Select
                );
            // The variable is read element for element (same type as the value), so the op
            // may write over it: each output element is written after its inputs are read.
            if !elementwise
                || v.phase != node.phase
                || !v.inputs.contains(&var)
                || v.ty != self.g.node(var).ty
                || self.inplace.contains_key(&value)
            {
                continue;
            }
            // Readers of the variable in other phases see the assigned value either way
            // (earlier phases run before, later phases after the end of this phase); readers
            // in this phase must all run before the value is computed.
            let vp = pos[&value];
            let others_first = self
                .g
                .consumers(var)
                .into_iter()
                .filter(|&c| c != value && c != a && live[c.as_usize()])
                .filter(|&c| self.g.node(c).phase == node.phase)
                .all(|c| pos[&c] < vp);
            if others_first {
                self.inplace.insert(value, var);
            }
        }
    }

    fn lower_node(&mut self, id: NodeId) -> Result<(), CompileError> {
        let node = self.g.node(id);
        match &node.op {
            Op::MatMul => matmul::lower(self, id),
            Op::Add
            | Op::Sub
            | Op::Mul
            | Op::Div
            | Op::Max
            | Op::Min
            | Op::Equal
            | Op::Greater
            | Op::Less
            | Op::ScaledAdd { .. }
            | Op::Select
            | Op::Neg
            | Op::Abs
            | Op::Exp
            | Op::Log
            | Op::Sqrt
            | Op::Relu
            | Op::Sigmoid
            | Op::Tanh
            | Op::Gelu
            | Op::ActivationGrad { .. }
            | Op::OneHot { .. } => elementwise::lower(self, id),
            Op::Cast { dtype } => {
                if self.g.node(node.inputs[0]).ty.dtype == *dtype {
                    self.alias(id, node.inputs[0])
                } else {
                    elementwise::lower(self, id)
                }
            }
            Op::Softmax { .. } | Op::LogSoftmax { .. } | Op::SparseSoftmaxCrossEntropy { .. } => {
                rows::lower(self, id)
            }
            Op::ReduceSum { .. }
            | Op::ReduceMean { .. }
            | Op::ReduceMax { .. }
            | Op::ArgMax { .. } => reduce::lower(self, id),
            Op::Reshape { .. } => self.alias(id, node.inputs[0]),
            Op::Transpose { .. } => {
                if is_swap_last(&node.op) {
                    let input = self.value(node.inputs[0])?;
                    self.values.insert(
                        id,
                        Value {
                            tensor: input.tensor,
                            transposed: !input.transposed,
                        },
                    );
                    Ok(())
                } else {
                    rearrange::lower(self, id)
                }
            }
            Op::Broadcast { .. } | Op::Slice { .. } | Op::Pad { .. } | Op::Concat { .. } => {
                rearrange::lower(self, id)
            }
            Op::Outfeed { stream } => self.lower_outfeed(id, stream.clone()),
            Op::Input { .. } | Op::Variable { .. } | Op::Constant { .. } | Op::Assign => Ok(()),
        }
    }

    /// The node's value, seen without transposition (materialising a folded transpose).
    pub fn materialized(&mut self, id: NodeId) -> Result<TensorId, CompileError> {
        let v = self.value(id)?;
        if !v.transposed {
            return Ok(v.tensor);
        }
        let t = rearrange::materialize_transpose(self, id, v.tensor)?;
        self.set_value(id, t);
        Ok(t)
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

    /// The node's value, placing a Variable or Constant on first use.
    pub fn value(&mut self, id: NodeId) -> Result<Value, CompileError> {
        if self.is_unplaced(id) {
            self.place_source(id, None)?;
        }
        self.value_of(id)
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
            Op::Variable { .. } => TensorKind::Variable,
            _ => TensorKind::Constant,
        };
        let ty = node.ty.clone();
        let n = ty.num_elements() as u64;
        let m = match (self.layout_hint(id, 0), fallback) {
            (Some(m), _) | (None, Some(m)) => m,
            (None, None) => self.fresh_mapping(n, ty.dtype),
        };
        let t = self.new_tensor(node.name.clone(), Some(id), kind, ty.dtype, ty.shape, m);
        self.set_value(id, t);
        Ok(t)
    }

    /// The layout the first matmul reading `id`'s elements (through casts, unary ops,
    /// reshapes, folded transposes, or as the first input of an element-wise op) wants.
    fn layout_hint(&mut self, id: NodeId, depth: u32) -> Option<Mapping> {
        if depth > 8 {
            return None;
        }
        let n = self.g.node(id).ty.num_elements();
        for c in self.g.consumers(id) {
            let cn = self.g.node(c);
            let same = cn.ty.num_elements() == n && cn.inputs.first() == Some(&id);
            let follow = match &cn.op {
                Op::MatMul => {
                    let which = if cn.inputs[0] == id { 0 } else { 1 };
                    if let Some(m) = matmul::operand_mapping(self, c, which) {
                        return Some(m);
                    }
                    false
                }
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

    /// Records that node `id`'s value is tensor `t` (not transposed).
    pub fn set_value(&mut self, id: NodeId, t: TensorId) {
        self.values.insert(
            id,
            Value {
                tensor: t,
                transposed: false,
            },
        );
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

    fn alias(&mut self, id: NodeId, input: NodeId) -> Result<(), CompileError> {
        let t = self.materialized(input)?;
        self.set_value(id, t);
        Ok(())
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
        let index = &self.index[t.0 as usize];
        mapping::locate(index, flat).map_or(0, |i| index[i].pos + (flat - index[i].begin))
    }

    /// The first element index of `t`'s slice on `tile` (staging and partials tensors have
    /// one interval per tile).
    pub fn slice_begin(&self, t: TensorId, tile: u32) -> u64 {
        self.tensors[t.0 as usize]
            .slice_on(TileId::on_first_ipu(tile))
            .and_then(|s| s.intervals.first())
            .map_or(0, |i| i.begin)
    }

    /// The tile the next rotating placement starts at.
    pub fn peek_start(&self) -> u32 {
        self.next_start
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
        self.index.push(mapping::build_index(&mapping));
        self.tensors.push(Tensor {
            name,
            node,
            kind,
            slices: build_slices(&mapping, dtype),
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
        t.slices = build_slices(&mapping, t.dtype);
        self.index[id.0 as usize] = mapping::build_index(&mapping);
    }

    fn lower_input(&mut self, id: NodeId) -> Result<(), CompileError> {
        let node = self.g.node(id);
        let Op::Input { stream, .. } = &node.op else {
            return Ok(());
        };
        let ty = node.ty.clone();
        let sid = StreamId(self.streams.len() as u32);
        let m = match self.layout_hint(id, 0) {
            Some(m) => m,
            None => self.fresh_mapping(ty.num_elements() as u64, ty.dtype),
        };
        let kind = TensorKind::StreamBuffer { stream: sid };
        let t = self.new_tensor(node.name.clone(), Some(id), kind, ty.dtype, ty.shape, m);
        self.host_stream(id, stream.clone(), StreamDirection::HostToDevice, t);
        Ok(())
    }

    fn lower_outfeed(&mut self, id: NodeId, stream: String) -> Result<(), CompileError> {
        let t = self.materialized(self.g.node(id).inputs[0])?;
        self.host_stream(id, stream, StreamDirection::DeviceToHost, t);
        Ok(())
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
        let step = self.steps.len() as u32;
        self.touch(t, step);
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
        self.body.push(program);
    }

    fn touch(&mut self, t: TensorId, step: u32) {
        let u = &mut self.usage[t.0 as usize];
        u.first = Some(u.first.map_or(step, |f| f.min(step)));
        u.last = Some(u.last.map_or(step, |l| l.max(step)));
    }

    /// Emits one BSP superstep: `Sync`, the exchange of `copies` (if any), then the compute
    /// set of `tiles` (if any vertices; the groups of entries of one tile run one after the
    /// other, in the order given).
    pub fn superstep(
        &mut self,
        name: &str,
        node: Option<NodeId>,
        copies: Vec<ByteCopy>,
        mut tiles: Vec<TileWork>,
    ) {
        tiles.retain(|t| !t.groups.is_empty());
        if copies.is_empty() && tiles.is_empty() {
            return;
        }
        self.body.push(Program::Sync(SyncScope::Internal));
        if !copies.is_empty() {
            let step = self.steps.len() as u32;
            for c in &copies {
                self.touch(c.src_tensor, step);
                self.touch(c.dst_tensor, step);
            }
            let id = ExchangeId(self.exchanges.len() as u32);
            let ex_name = format!("{name}/exchange");
            self.exchanges.push(Exchange {
                name: ex_name.clone(),
                node,
                copies,
                cycles: 0,
            });
            self.push_step(StepKind::Exchange(id), ex_name, Program::Exchange(id));
        }
        if !tiles.is_empty() {
            merge_tiles(&mut tiles);
            let step = self.steps.len() as u32;
            let mut touched: Vec<TensorId> = tiles
                .iter()
                .flat_map(|t| &t.groups)
                .flat_map(|g| &g.vertices)
                .flat_map(|v| v.operands.iter().map(|o| o.tensor))
                .collect();
            touched.sort_unstable();
            touched.dedup();
            for t in touched {
                self.touch(t, step);
            }
            let id = ComputeSetId(self.compute_sets.len() as u32);
            self.compute_sets.push(ComputeSet {
                name: name.to_string(),
                node,
                tiles,
                cycles: 0,
            });
            self.push_step(
                StepKind::Execute(id),
                name.to_string(),
                Program::Execute(id),
            );
        }
    }

    /// The `NodeValue` of every lowered node, in schedule order.
    fn node_values(&self, order: &[NodeId], live: &[bool]) -> Vec<NodeValue> {
        order
            .iter()
            .filter(|&&id| live[id.as_usize()] || matches!(self.g.node(id).op, Op::Variable { .. }))
            .filter_map(|&id| {
                let n = self.g.node(id);
                let v = self.values.get(&id)?;
                let tensor = (!v.transposed).then_some(v.tensor);
                Some(NodeValue {
                    node: id,
                    name: n.name.clone(),
                    tensor,
                    dtype: n.ty.dtype,
                    shape: n.ty.shape.clone(),
                })
            })
            .collect()
    }

    /// Lowers the Assigns of a phase: in-place ones are done; Splat constants become `Fill`
    /// vertices on the variable's tiles; the others copy the value into the variable.
    fn lower_assigns(&mut self, phase: Phase, assigns: &[NodeId]) -> Result<(), CompileError> {
        let mut eb = stage::ExchangeBuilder::default();
        let mut fills: Vec<(TensorId, f64)> = Vec::new();
        for &a in assigns {
            let node = self.g.node(a);
            let (var, value) = (node.inputs[0], node.inputs[1]);
            let var_t = self.value(var)?.tensor;
            self.set_value(a, var_t);
            if self.inplace.get(&value) == Some(&var) {
                continue;
            }
            if let Op::Constant {
                value: ipusim_ir::Literal::Splat(s),
                ..
            } = &self.g.node(value).op
            {
                fills.push((var_t, *s));
                continue;
            }
            let val_t = self.materialized(value)?;
            if val_t == var_t {
                continue;
            }
            let var_map = self.tensors[var_t.0 as usize].slices.clone();
            for slice in &var_map {
                let mut pos = 0u64;
                for iv in &slice.intervals {
                    eb.copy_elems(
                        self,
                        val_t,
                        iv.begin,
                        iv.end - iv.begin,
                        var_t,
                        slice.tile.tile(),
                        pos,
                    );
                    pos += iv.end - iv.begin;
                }
            }
        }
        let tiles = elementwise::fill_work(self, &fills);
        let name = match phase {
            Phase::Step => "step/assign",
            Phase::Update => "update/assign",
        };
        self.superstep(name, None, eb.finish(), tiles);
        Ok(())
    }
}

/// Slices of a mapping with interval offsets relative to the slice start.
fn build_slices(mapping: &Mapping, dtype: DType) -> Vec<TileSlice> {
    let es = dtype.size_bytes() as u64;
    mapping
        .tiles
        .iter()
        .map(|(tile, iv)| {
            let mut pos = 0u64;
            let intervals = iv
                .iter()
                .map(|&(b, e)| {
                    let offset = (pos * es) as u32;
                    pos += e - b;
                    Interval {
                        begin: b,
                        end: e,
                        offset,
                    }
                })
                .collect();
            TileSlice {
                tile: TileId::on_first_ipu(*tile),
                offset: 0,
                intervals,
            }
        })
        .collect()
}

/// True for a `Transpose` that swaps the last two dimensions only (folded into matmuls).
pub(crate) fn is_swap_last(op: &Op) -> bool {
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

/// Sorts work entries by tile and merges the entries of one tile (their groups run one after
/// the other, in the order given).
fn merge_tiles(tiles: &mut Vec<TileWork>) {
    tiles.sort_by_key(|t| t.tile);
    let mut out: Vec<TileWork> = Vec::with_capacity(tiles.len());
    for t in tiles.drain(..) {
        match out.last_mut() {
            Some(last) if last.tile == t.tile => last.groups.extend(t.groups),
            _ => out.push(t),
        }
    }
    *tiles = out;
}

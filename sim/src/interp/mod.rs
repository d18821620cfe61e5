//! The reference interpreter: evaluates an [`ipusim_ir::Graph`] op by op on the host with the
//! numerics core. It is the oracle every differential test of the compiled, tiled execution
//! compares against, so its semantics are written down here and in `interp/float.rs` (the
//! evaluation order of every reduction).
//!
//! # Step semantics
//!
//! - **Validation.** Construction runs `ipusim_ir::validate_graph` (an invalid graph is an
//!   [`InterpError::Ir`]), so evaluation never panics on a graph it accepted.
//! - **State.** Variables hold tensors that persist across steps, initialised by
//!   [`crate::init`] (the same values the BSP engine starts from). Constants are materialised
//!   once, by the same module. Reading a `Variable` node reads its current state.
//! - **Phases.** [`Interpreter::micro_batch`] evaluates the [`Phase::Step`] nodes in
//!   topological order (ascending ids among ready nodes) with one micro-batch of infeeds;
//!   [`Interpreter::update`] evaluates the [`Phase::Update`] nodes; [`Interpreter::step`]
//!   runs one micro-batch per entry (the gradient-accumulation count) and then the update.
//!   Update nodes may read Step nodes: they see the values of the last micro-batch (how a
//!   training step without accumulation reads its gradients).
//! - **Assignments** take effect at the end of their phase: every `Variable` read within a
//!   phase sees the state from the phase's start. A variable may be assigned at most once
//!   per phase. An `Assign` node's own value is the assigned value.
//! - **Streams.** Every `Input` node's stream must be fed each micro-batch with a tensor of
//!   exactly its type; `Outfeed` nodes produce one entry per evaluation, returned by stream
//!   name.
//! - **Flags.** Every op's raised `$FP_STS` bits are ORed into [`Interpreter::flags`] (and
//!   recorded per node, [`Interpreter::node_flags`]). When a raised flag's exception is
//!   enabled in the [`FpConfig`], execution stops with [`InterpError::FpException`] naming
//!   the node; the phase's assignments are then not applied.
//! - **Rounding.** FP32 results are rounded to nearest even; FP16 results with the config's
//!   rounding: stochastic rounding (any `esr` other than `Off`: the interpreter is one
//!   replica) draws from the `SrRng` stream of (run seed, tile 0, worker 0), one draw per
//!   FP16 rounding in evaluation order, so a run is reproducible from its seed.
//!
//! # Exact mode
//!
//! [`Interpreter::new_exact`] evaluates the same graph with every floating-point tensor held
//! as `f64` and no rounding to FP16/FP32 (constants and initial values are the rounded
//! values of their dtypes, converted exactly). Same code path, generic element type: it is
//! the reference for finite-difference checks of gradients, not a model of the IPU.

mod conv;
mod error;
mod eval;
mod float;
mod layout;
mod real;

pub use error::{flag_names, InterpError};

use crate::init;
use crate::numerics::{FpConfig, FpSts};
use crate::tensor::{Data, Tensor};
use ipusim_ir::{Graph, NodeId, Op, Phase};
use real::Cx;
use std::collections::{BTreeMap, HashMap};

/// Tensors by stream name (infeeds of one micro-batch, or the outfeed entries it produced).
pub type Streams = BTreeMap<String, Tensor>;

/// The reference interpreter of one graph, with its variable state.
#[derive(Debug)]
pub struct Interpreter {
    graph: Graph,
    config: FpConfig,
    cx: Cx,
    step_order: Vec<NodeId>,
    update_order: Vec<NodeId>,
    streams: BTreeMap<String, NodeId>,
    state: HashMap<NodeId, Tensor>,
    constants: HashMap<NodeId, Tensor>,
    values: HashMap<NodeId, Tensor>,
    flags: FpSts,
    node_flags: HashMap<NodeId, FpSts>,
}

impl Interpreter {
    /// An interpreter of `graph` with IPU numerics under `config`; `seed` seeds stochastic
    /// rounding. Variables and constants are materialised here.
    pub fn new(graph: &Graph, config: FpConfig, seed: u64) -> Result<Interpreter, InterpError> {
        Interpreter::build(graph, config, seed, false)
    }

    /// An interpreter of `graph` in exact mode (`f64` float tensors; see the module docs).
    pub fn new_exact(graph: &Graph, seed: u64) -> Result<Interpreter, InterpError> {
        Interpreter::build(graph, FpConfig::default(), seed, true)
    }

    fn build(
        graph: &Graph,
        config: FpConfig,
        seed: u64,
        exact: bool,
    ) -> Result<Interpreter, InterpError> {
        let order = graph.topo_order()?;
        let streams = check_graph(graph, &order)?;
        let mut state = HashMap::new();
        let mut constants = HashMap::new();
        for &id in &order {
            let n = graph.node(id);
            let value = match &n.op {
                Op::Variable { init, .. } => init::variable_tensor(init, &n.ty),
                Op::Constant { value, .. } => init::constant_tensor(value, &n.ty),
                _ => continue,
            };
            let value = value.map_err(|source| InterpError::Init {
                node: n.name.clone(),
                source,
            })?;
            let value = if exact { to_exact(value) } else { value };
            if matches!(n.op, Op::Variable { .. }) {
                state.insert(id, value);
            } else {
                constants.insert(id, value);
            }
        }
        let phase_nodes = |phase: Phase| -> Vec<NodeId> {
            order
                .iter()
                .copied()
                .filter(|&id| {
                    let n = graph.node(id);
                    n.phase == phase && !matches!(n.op, Op::Variable { .. } | Op::Constant { .. })
                })
                .collect()
        };
        Ok(Interpreter {
            step_order: phase_nodes(Phase::Step),
            update_order: phase_nodes(Phase::Update),
            graph: graph.clone(),
            config,
            cx: Cx::new(&config, seed, exact),
            streams,
            state,
            constants,
            values: HashMap::new(),
            flags: FpSts::empty(),
            node_flags: HashMap::new(),
        })
    }

    /// True in exact mode.
    pub fn is_exact(&self) -> bool {
        self.cx.exact
    }

    /// The graph being interpreted.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The infeed streams the graph reads, with their Input nodes' types.
    pub fn infeeds(&self) -> impl Iterator<Item = (&str, &ipusim_ir::TensorType)> + '_ {
        self.streams
            .iter()
            .map(|(s, &id)| (s.as_str(), &self.graph.node(id).ty))
    }

    /// Runs the Step phase on one micro-batch of infeeds; returns its outfeed entries.
    pub fn micro_batch(&mut self, infeeds: &Streams) -> Result<Streams, InterpError> {
        for stream in infeeds.keys() {
            if !self.streams.contains_key(stream) {
                let known: Vec<&str> = self.streams.keys().map(String::as_str).collect();
                return Err(InterpError::UnknownInfeed {
                    stream: stream.clone(),
                    known: known.join(", "),
                });
            }
        }
        let order = std::mem::take(&mut self.step_order);
        let result = self.run_phase(&order, Some(infeeds));
        self.step_order = order;
        result
    }

    /// Runs the Update phase (once per weight update); returns its outfeed entries.
    pub fn update(&mut self) -> Result<Streams, InterpError> {
        let order = std::mem::take(&mut self.update_order);
        let result = self.run_phase(&order, None);
        self.update_order = order;
        result
    }

    /// One training step: the Step phase once per micro-batch (the gradient-accumulation
    /// count is `micro_batches.len()`), then the Update phase. Returns the outfeed entries
    /// of each micro-batch; Update-phase outfeeds are added to the last one.
    pub fn step(&mut self, micro_batches: &[Streams]) -> Result<Vec<Streams>, InterpError> {
        if micro_batches.is_empty() {
            return Err(InterpError::NoMicroBatches);
        }
        let mut out = Vec::with_capacity(micro_batches.len());
        for feeds in micro_batches {
            out.push(self.micro_batch(feeds)?);
        }
        let updates = self.update()?;
        if let Some(last) = out.last_mut() {
            last.extend(updates);
        }
        Ok(out)
    }

    /// The current value of the variable named `name`.
    pub fn variable(&self, name: &str) -> Option<&Tensor> {
        self.state.get(&self.graph.find(name)?)
    }

    /// All variables with their current values, by name.
    pub fn variables(&self) -> BTreeMap<&str, &Tensor> {
        self.state
            .iter()
            .map(|(id, t)| (self.graph.node(*id).name.as_str(), t))
            .collect()
    }

    /// Overwrites the variable named `name` (exact mode converts float values to `f64`).
    pub fn set_variable(&mut self, name: &str, value: Tensor) -> Result<(), InterpError> {
        let id = self
            .graph
            .find(name)
            .filter(|id| self.state.contains_key(id))
            .ok_or_else(|| InterpError::UnknownVariable(name.to_string()))?;
        let expected = &self.graph.node(id).ty;
        if value.dtype() != expected.dtype || value.shape() != &expected.shape {
            return Err(InterpError::VariableType {
                name: name.to_string(),
                expected: expected.clone(),
                found: value.ty(),
            });
        }
        let value = if self.cx.exact {
            to_exact(value)
        } else {
            value
        };
        self.state.insert(id, value);
        Ok(())
    }

    /// The last value of the node named `name`: a variable's current state, a constant, or
    /// the value computed by the last evaluation of its phase.
    pub fn value(&self, name: &str) -> Option<&Tensor> {
        self.value_of(self.graph.find(name)?)
    }

    /// [`Interpreter::value`] by id.
    pub fn value_of(&self, id: NodeId) -> Option<&Tensor> {
        self.state
            .get(&id)
            .or_else(|| self.constants.get(&id))
            .or_else(|| self.values.get(&id))
    }

    /// The OR of every flag raised since construction (or the last [`Interpreter::clear_flags`]).
    pub fn flags(&self) -> FpSts {
        self.flags
    }

    /// The flags the node named `name` raised, ORed over its evaluations.
    pub fn node_flags(&self, name: &str) -> FpSts {
        self.graph
            .find(name)
            .and_then(|id| self.node_flags.get(&id).copied())
            .unwrap_or_default()
    }

    /// Clears the accumulated flags.
    pub fn clear_flags(&mut self) {
        self.flags = FpSts::empty();
        self.node_flags.clear();
    }

    fn run_phase(
        &mut self,
        order: &[NodeId],
        feeds: Option<&Streams>,
    ) -> Result<Streams, InterpError> {
        let mut pending: Vec<(NodeId, Tensor)> = Vec::new();
        let mut outfeeds = Streams::new();
        for &id in order {
            let node = self.graph.node(id);
            let tensor = if let Op::Input { stream, .. } = &node.op {
                let t = feeds.and_then(|f| f.get(stream)).ok_or_else(|| {
                    InterpError::MissingInfeed {
                        stream: stream.clone(),
                        node: node.name.clone(),
                    }
                })?;
                check_infeed(stream, t, &node.ty, self.cx.exact)?
            } else {
                let inputs = node
                    .inputs
                    .iter()
                    .map(|&i| lookup(&self.graph, &self.state, &self.constants, &self.values, i))
                    .collect::<Result<Vec<&Tensor>, InterpError>>()?;
                let (result, flags) = eval_op(node, &inputs, &mut self.cx);
                self.flags |= flags;
                *self.node_flags.entry(id).or_default() |= flags;
                let trapped = self.config.trapping(flags);
                if !trapped.is_empty() {
                    return Err(InterpError::FpException {
                        node: node.name.clone(),
                        op: node.op.name(),
                        flags: trapped,
                    });
                }
                result?
            };
            match &node.op {
                Op::Assign => pending.push((node.inputs[0], tensor.clone())),
                Op::Outfeed { stream } => {
                    outfeeds.insert(stream.clone(), tensor.clone());
                }
                _ => {}
            }
            self.values.insert(id, tensor);
        }
        self.state.extend(pending);
        Ok(outfeeds)
    }
}

/// Evaluates `node` on `inputs`; returns the value (or why it failed) and the flags raised.
fn eval_op(
    node: &ipusim_ir::Node,
    inputs: &[&Tensor],
    cx: &mut Cx,
) -> (Result<Tensor, InterpError>, FpSts) {
    let data = eval::eval(&node.op, inputs, &node.ty, cx);
    let flags = cx.take_flags();
    let eval_error = |message: String| InterpError::Eval {
        node: node.name.clone(),
        op: node.op.name(),
        message,
    };
    let result = data
        .map_err(|f| {
            eval_error(match f {
                eval::EvalFault::Numerics(e) => e.to_string(),
                eval::EvalFault::Storage(s) => s,
            })
        })
        .and_then(|data| {
            Tensor::new(node.ty.dtype, node.ty.shape.clone(), data)
                .map_err(|e| eval_error(format!("internal error: {e}")))
        });
    (result, flags)
}

/// Evaluates the op of node `id` of `graph` on the given input values (in the node's input
/// order) with IPU numerics under `config` — FP16 results rounded to nearest even, or
/// stochastically from the stream of (`seed`, tile 0, worker 0) — and returns its value and
/// the `$FP_STS` flags it raised (exceptions are reported in the flags, not trapped). The
/// per-op reference of the differential tests. Sources (`Input`, `Variable`, `Constant`)
/// have no op to evaluate.
pub fn evaluate_node(
    graph: &Graph,
    id: NodeId,
    inputs: &[&Tensor],
    config: FpConfig,
    seed: u64,
) -> Result<(Tensor, FpSts), InterpError> {
    let node = graph.node(id);
    if node.op.is_source() {
        return Err(InterpError::Graph(format!(
            "node '{}' is a source ({}): it has no op to evaluate",
            node.name,
            node.op.name()
        )));
    }
    if inputs.len() != node.inputs.len() {
        return Err(InterpError::Graph(format!(
            "node '{}' has {} inputs, {} values were given",
            node.name,
            node.inputs.len(),
            inputs.len()
        )));
    }
    for (&i, t) in node.inputs.iter().zip(inputs) {
        let ty = &graph.node(i).ty;
        if t.dtype() != ty.dtype || t.shape() != &ty.shape {
            return Err(InterpError::Graph(format!(
                "input '{}' of node '{}' is {}, the value given is {}",
                graph.node(i).name,
                node.name,
                ty,
                t.ty()
            )));
        }
    }
    let mut cx = Cx::new(&config, seed, false);
    let (result, flags) = eval_op(node, inputs, &mut cx);
    Ok((result?, flags))
}

/// The value an input `id` reads.
fn lookup<'a>(
    graph: &Graph,
    state: &'a HashMap<NodeId, Tensor>,
    constants: &'a HashMap<NodeId, Tensor>,
    values: &'a HashMap<NodeId, Tensor>,
    id: NodeId,
) -> Result<&'a Tensor, InterpError> {
    state
        .get(&id)
        .or_else(|| constants.get(&id))
        .or_else(|| values.get(&id))
        .ok_or_else(|| {
            InterpError::Graph(format!(
                "node '{}' is read before it was evaluated (run a micro-batch before the update)",
                graph.node(id).name
            ))
        })
}

/// An infeed tensor checked against its Input node's type (exact mode: converted to f64).
fn check_infeed(
    stream: &str,
    t: &Tensor,
    ty: &ipusim_ir::TensorType,
    exact: bool,
) -> Result<Tensor, InterpError> {
    if t.dtype() != ty.dtype || t.shape() != &ty.shape {
        return Err(InterpError::InfeedType {
            stream: stream.to_string(),
            expected: ty.clone(),
            found: t.ty(),
        });
    }
    Ok(if exact {
        to_exact(t.clone())
    } else {
        t.clone()
    })
}

/// A float tensor with f64 storage (others unchanged).
fn to_exact(t: Tensor) -> Tensor {
    if !t.dtype().is_float() || matches!(t.data(), Data::F64(_)) {
        return t;
    }
    let values = t.to_f64_vec();
    Tensor::new(t.dtype(), t.shape().clone(), Data::F64(values)).unwrap_or(t)
}

/// Validates the graph (`ipusim_ir::validate_graph`: consistent types, unique streams, Step
/// nodes never read Update nodes, one assignment per variable and phase, ...) and returns its
/// infeed streams.
fn check_graph(graph: &Graph, order: &[NodeId]) -> Result<BTreeMap<String, NodeId>, InterpError> {
    ipusim_ir::validate_graph(graph)?;
    Ok(order
        .iter()
        .filter_map(|&id| match &graph.node(id).op {
            Op::Input { stream, .. } => Some((stream.clone(), id)),
            _ => None,
        })
        .collect())
}

#[cfg(test)]
mod tests;

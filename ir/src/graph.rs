//! The graph: typed op nodes in a petgraph `StableDiGraph`, behind [`NodeId`] newtypes.
//!
//! Invariants held by construction: node names are unique; a node's inputs exist before it
//! is added (so the graph is acyclic); every node's type is inferred from its inputs when it
//! is added. [`crate::validate`] re-checks these and the program-level invariants.
//! Each node carries a [`Phase`]: the training transform puts the optimizer's weight update in
//! [`Phase::Update`], which runs once per gradient-accumulation cycle.

use crate::dtype::TensorType;
use crate::error::{IrError, Operand};
use crate::infer::{infer, InferFault};
use crate::op::Op;
use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::Direction;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;

/// Identifies a node of one [`Graph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeId(pub u32);

impl NodeId {
    fn index(self) -> NodeIndex<u32> {
        NodeIndex::new(self.0 as usize)
    }

    /// The id as an index (dense for graphs without removals).
    pub fn as_usize(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// When a node runs within a training step.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord, Serialize, Deserialize,
)]
pub enum Phase {
    /// Every micro-batch: forward, backward, gradient accumulation, outfeeds.
    #[default]
    Step,
    /// Once per weight update (after the gradient-accumulation micro-batches).
    Update,
}

/// A node: a named op applied to inputs, with its inferred output type.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Unique name (scoped names such as `fwd/dense1/matmul` are conventional).
    pub name: String,
    /// The operation.
    pub op: Op,
    /// Input nodes, in the op's input order.
    pub inputs: Vec<NodeId>,
    /// Inferred output type.
    pub ty: TensorType,
    /// When the node runs.
    pub phase: Phase,
}

/// A typed dataflow graph.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    g: StableDiGraph<Node, u32, u32>,
    by_name: HashMap<String, NodeId>,
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// An empty graph with room for `nodes` nodes and `edges` edges (a reader that knows the
    /// size avoids the doubling peaks of growing).
    pub fn with_capacity(nodes: usize, edges: usize) -> Graph {
        Graph {
            g: StableDiGraph::with_capacity(nodes, edges),
            by_name: HashMap::with_capacity(nodes),
        }
    }

    /// Adds a node in [`Phase::Step`]; see [`Graph::add_node_in`].
    pub fn add_node(
        &mut self,
        name: impl Into<String>,
        op: Op,
        inputs: &[NodeId],
    ) -> Result<NodeId, IrError> {
        self.add_node_in(Phase::Step, name, op, inputs)
    }

    /// Adds a node after inferring its type; fails (and adds nothing) when the name is taken,
    /// an input does not exist, or the op does not accept its inputs.
    pub fn add_node_in(
        &mut self,
        phase: Phase,
        name: impl Into<String>,
        op: Op,
        inputs: &[NodeId],
    ) -> Result<NodeId, IrError> {
        let name = name.into();
        if self.by_name.contains_key(&name) {
            return Err(IrError::DuplicateName(name));
        }
        for &i in inputs {
            if self.g.node_weight(i.index()).is_none() {
                return Err(IrError::UnknownInput {
                    node: name,
                    input: i.to_string(),
                });
            }
        }
        let ty = self.infer_node(&name, &op, inputs)?;
        let id = NodeId(
            self.g
                .add_node(Node {
                    name: name.clone(),
                    op,
                    inputs: inputs.to_vec(),
                    ty,
                    phase,
                })
                .index() as u32,
        );
        for (slot, &i) in inputs.iter().enumerate() {
            self.g.add_edge(i.index(), id.index(), slot as u32);
        }
        self.by_name.insert(name, id);
        Ok(id)
    }

    /// Infers the type `op` would have on `inputs`, with errors naming `name`.
    pub fn infer_node(
        &self,
        name: &str,
        op: &Op,
        inputs: &[NodeId],
    ) -> Result<TensorType, IrError> {
        let types: Vec<&TensorType> = inputs.iter().map(|&i| &self.node(i).ty).collect();
        infer(op, &types).map_err(|fault| self.fault_to_error(name, op, inputs, fault))
    }

    fn fault_to_error(&self, name: &str, op: &Op, inputs: &[NodeId], fault: InferFault) -> IrError {
        let node = name.to_string();
        let op_name = op.name();
        let operand = |index: usize| {
            let n = self.node(inputs[index]);
            Box::new(Operand {
                index,
                name: n.name.clone(),
                ty: n.ty.clone(),
            })
        };
        match fault {
            InferFault::Arity { expected, found } => IrError::Arity {
                node,
                op: op_name,
                expected,
                found,
            },
            InferFault::DTypeMismatch { a, b } => IrError::DTypeMismatch {
                node,
                op: op_name,
                a: operand(a),
                b: operand(b),
            },
            InferFault::BadDType { input, expected } => IrError::BadDType {
                node,
                op: op_name,
                input: operand(input),
                expected,
            },
            InferFault::ShapeMismatch { a, b, why } => IrError::ShapeMismatch {
                node,
                op: op_name,
                a: operand(a),
                b: operand(b),
                why,
            },
            InferFault::Invalid(message) => IrError::Invalid {
                node,
                op: op_name,
                message,
            },
        }
    }

    /// The node with this id. Panics on an id from another graph (a programming error, not
    /// reachable from user input: ids only come from this graph's own methods).
    pub fn node(&self, id: NodeId) -> &Node {
        &self.g[id.index()]
    }

    /// The node with this id, if it exists.
    pub fn get(&self, id: NodeId) -> Option<&Node> {
        self.g.node_weight(id.index())
    }

    /// The id of the node with this name.
    pub fn find(&self, name: &str) -> Option<NodeId> {
        self.by_name.get(name).copied()
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.g.node_count()
    }

    /// True when the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.g.node_count() == 0
    }

    /// All node ids in ascending order (insertion order for graphs without removals, which is
    /// a topological order because inputs are added before their consumers).
    pub fn ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.g.node_indices().map(|i| NodeId(i.index() as u32))
    }

    /// All nodes with their ids, in ascending id order.
    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, &Node)> + '_ {
        self.g
            .node_indices()
            .map(move |i| (NodeId(i.index() as u32), &self.g[i]))
    }

    /// The nodes that read `id`'s output, each once, in ascending id order.
    pub fn consumers(&self, id: NodeId) -> Vec<NodeId> {
        let mut out: Vec<NodeId> = self
            .g
            .neighbors_directed(id.index(), Direction::Outgoing)
            .map(|i| NodeId(i.index() as u32))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// A topological order of all nodes (inputs before consumers), or the cycle found.
    pub fn topo_order(&self) -> Result<Vec<NodeId>, IrError> {
        petgraph::algo::toposort(&self.g, None)
            .map(|v| v.into_iter().map(|i| NodeId(i.index() as u32)).collect())
            .map_err(|cycle| IrError::Cycle(vec![self.g[cycle.node_id()].name.clone()]))
    }

    /// The nodes in program order: ascending ids when that is a topological order (graphs
    /// built inputs first, as the program reader, the builders and the transforms build them),
    /// else a topological order.
    pub fn program_order(&self) -> Vec<NodeId> {
        let ids: Vec<NodeId> = self.ids().collect();
        if ids
            .iter()
            .all(|&id| self.node(id).inputs.iter().all(|&i| i < id))
        {
            return ids;
        }
        self.topo_order().unwrap_or(ids)
    }

    /// Moves a node to another phase.
    pub fn set_phase(&mut self, id: NodeId, phase: Phase) {
        if let Some(n) = self.g.node_weight_mut(id.index()) {
            n.phase = phase;
        }
    }

    /// The underlying petgraph graph (edges carry the input slot), for graph algorithms.
    pub fn petgraph(&self) -> &StableDiGraph<Node, u32, u32> {
        &self.g
    }

    /// Raw mutable access that bypasses every invariant, so validator tests can build the
    /// broken graphs that [`Graph::add_node`] refuses to build.
    #[cfg(test)]
    pub(crate) fn raw_parts_mut(
        &mut self,
    ) -> (
        &mut StableDiGraph<Node, u32, u32>,
        &mut HashMap<String, NodeId>,
    ) {
        (&mut self.g, &mut self.by_name)
    }
}

/// Two graphs are equal when they have the same nodes by name: same op, phase, type, and
/// inputs (by name, in order). Ids and insertion order do not matter.
impl PartialEq for Graph {
    fn eq(&self, other: &Graph) -> bool {
        if self.len() != other.len() {
            return false;
        }
        self.nodes().all(|(_, n)| {
            let Some(m) = other.find(&n.name).map(|id| other.node(id)) else {
                return false;
            };
            n.op == m.op
                && n.phase == m.phase
                && n.ty == m.ty
                && n.inputs.len() == m.inputs.len()
                && n.inputs
                    .iter()
                    .zip(&m.inputs)
                    .all(|(&a, &b)| self.node(a).name == other.node(b).name)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::{DType, Shape};
    use crate::op::{Init, Op};

    fn input(g: &mut Graph, name: &str, d: DType, s: &[usize]) -> NodeId {
        g.add_node(
            name,
            Op::Input {
                stream: name.into(),
                dtype: d,
                shape: Shape::new(s.to_vec()),
            },
            &[],
        )
        .unwrap()
    }

    #[test]
    fn add_infers_and_names_mismatches() {
        let mut g = Graph::new();
        let a = input(&mut g, "a", DType::F16, &[4]);
        let b = input(&mut g, "b", DType::F32, &[4]);
        let err = g.add_node("y", Op::Add, &[a, b]).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("node 'y' (Add)"), "{msg}");
        assert!(msg.contains("input 1 'b' has type f32[4]"), "{msg}");
        assert!(msg.contains("type f16[4] of input 0 'a'"), "{msg}");
        assert_eq!(g.len(), 2, "a failed add leaves the graph unchanged");
        assert!(matches!(
            g.add_node("a", Op::Neg, &[a]),
            Err(IrError::DuplicateName(_))
        ));
    }

    #[test]
    fn consumers_topo_and_equality() {
        let mut g = Graph::new();
        let x = input(&mut g, "x", DType::F32, &[2, 3]);
        let w = g
            .add_node(
                "w",
                Op::Variable {
                    dtype: DType::F32,
                    shape: Shape::new([3, 4]),
                    init: Init::Zeros,
                },
                &[],
            )
            .unwrap();
        let y = g.add_node("y", Op::MatMul, &[x, w]).unwrap();
        assert_eq!(g.node(y).ty, TensorType::new(DType::F32, [2, 4]));
        assert_eq!(g.consumers(x), vec![y]);
        let order = g.topo_order().unwrap();
        let pos = |n: NodeId| order.iter().position(|&m| m == n).unwrap();
        assert!(pos(x) < pos(y) && pos(w) < pos(y));
        assert_eq!(g.clone(), g);
    }
}

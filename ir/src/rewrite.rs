//! Copying a graph node by node into a new graph, for the passes that rewrite one (the
//! precision policy, dropping training for inference).
//!
//! A [`Rewrite`] walks the source graph in topological order; the pass adds each node's
//! replacement to the destination and records two mappings per source node: its *definition*
//! (the node that replaced it) and its *use* (what its consumers read — usually the
//! definition, but a pass may interpose a node, such as the cast of an FP32 master weight).
//! Fresh names are unique in both graphs, so a node added by the pass never takes the name of
//! a source node that has not been copied yet.

use crate::error::IrError;
use crate::graph::{Graph, NodeId, Phase};
use crate::op::Op;
use std::collections::HashMap;

/// A graph being rebuilt from a source graph.
pub(crate) struct Rewrite<'a> {
    /// The graph being rewritten.
    pub src: &'a Graph,
    /// The graph being built.
    pub dst: Graph,
    def: HashMap<NodeId, NodeId>,
    uses: HashMap<NodeId, NodeId>,
}

impl<'a> Rewrite<'a> {
    /// Starts rebuilding `src` into an empty graph.
    pub fn new(src: &'a Graph) -> Rewrite<'a> {
        Rewrite {
            src,
            dst: Graph::new(),
            def: HashMap::new(),
            uses: HashMap::new(),
        }
    }

    /// The source nodes in topological order (inputs before consumers).
    pub fn order(&self) -> Result<Vec<NodeId>, IrError> {
        self.src.topo_order()
    }

    /// Records that source node `old` is replaced by `new` (both its definition and its use).
    pub fn set(&mut self, old: NodeId, new: NodeId) {
        self.def.insert(old, new);
        self.uses.insert(old, new);
    }

    /// Makes consumers of source node `old` read `new` instead of its definition.
    pub fn set_use(&mut self, old: NodeId, new: NodeId) {
        self.uses.insert(old, new);
    }

    /// The replacement of source node `old`.
    pub fn def(&self, old: NodeId) -> Result<NodeId, IrError> {
        self.def
            .get(&old)
            .copied()
            .ok_or_else(|| self.unmapped(old))
    }

    /// What consumers of source node `old` read.
    pub fn use_of(&self, old: NodeId) -> Result<NodeId, IrError> {
        self.uses
            .get(&old)
            .copied()
            .ok_or_else(|| self.unmapped(old))
    }

    /// What source node `old`'s inputs map to, in order.
    pub fn inputs_of(&self, old: NodeId) -> Result<Vec<NodeId>, IrError> {
        self.src
            .node(old)
            .inputs
            .iter()
            .map(|&i| self.use_of(i))
            .collect()
    }

    fn unmapped(&self, old: NodeId) -> IrError {
        let name = self
            .src
            .get(old)
            .map_or_else(|| old.to_string(), |n| n.name.clone());
        IrError::Program(format!(
            "graph rewrite: node '{name}' is read before it was rewritten"
        ))
    }

    /// A name derived from `base` that no node of the source or destination graph has.
    pub fn fresh_name(&self, base: &str) -> String {
        let free = |n: &str| self.src.find(n).is_none() && self.dst.find(n).is_none();
        if free(base) {
            return base.to_string();
        }
        (1..)
            .map(|i| format!("{base}_{i}"))
            .find(|n| free(n))
            .unwrap_or_else(|| base.to_string())
    }

    /// Adds a node the pass introduces, under a fresh name derived from `base`.
    pub fn add_new(
        &mut self,
        phase: Phase,
        base: &str,
        op: Op,
        inputs: &[NodeId],
    ) -> Result<NodeId, IrError> {
        let name = self.fresh_name(base);
        self.dst.add_node_in(phase, name, op, inputs)
    }
}

/// Adds the primitive nodes that replace one composite node `name` in `phase`: parts are
/// named `<name>/<part>` (fresh), the last node takes `name` itself.
pub(crate) struct Emitter<'r, 'a> {
    /// The rewrite being built.
    pub rw: &'r mut Rewrite<'a>,
    /// The composite node's phase.
    pub phase: Phase,
    /// The composite node's name.
    pub name: String,
}

impl Emitter<'_, '_> {
    /// A part `<name>/<part>`.
    pub fn node(&mut self, part: &str, op: Op, inputs: &[NodeId]) -> Result<NodeId, IrError> {
        let base = format!("{}/{part}", self.name);
        self.rw.add_new(self.phase, &base, op, inputs)
    }

    /// The last node, under the composite node's own name.
    pub fn last(&mut self, op: Op, inputs: &[NodeId]) -> Result<NodeId, IrError> {
        self.rw
            .dst
            .add_node_in(self.phase, self.name.clone(), op, inputs)
    }

    /// The type of a node of the graph being built.
    pub fn ty(&self, id: NodeId) -> &crate::dtype::TensorType {
        &self.rw.dst.node(id).ty
    }

    /// A constant of `dtype` and `shape`, every element `value`.
    pub fn splat(
        &mut self,
        part: &str,
        dtype: crate::dtype::DType,
        shape: crate::dtype::Shape,
        value: f64,
    ) -> Result<NodeId, IrError> {
        let op = Op::Constant {
            dtype,
            shape,
            value: crate::op::Literal::Splat(value),
        };
        self.node(part, op, &[])
    }

    /// `x` as `dtype` (no node when it already is).
    pub fn cast(
        &mut self,
        part: &str,
        x: NodeId,
        dtype: crate::dtype::DType,
    ) -> Result<NodeId, IrError> {
        if self.ty(x).dtype == dtype {
            return Ok(x);
        }
        self.node(part, Op::Cast { dtype }, &[x])
    }

    /// `x` reshaped to `dims` (no node when it already has them).
    pub fn reshape(&mut self, part: &str, x: NodeId, dims: Vec<usize>) -> Result<NodeId, IrError> {
        if self.ty(x).shape.dims() == dims.as_slice() {
            return Ok(x);
        }
        let op = Op::Reshape {
            shape: crate::dtype::Shape(dims),
        };
        self.node(part, op, &[x])
    }
}

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

//! The program document as written: serde types that mirror the file layout (nodes by name,
//! in any order), and the conversions between a document and a [`Program`].
//!
//! Reading resolves input names, orders the nodes topologically (ties in file order), adds
//! them to a [`Graph`] (which infers every type) and validates the program; each fault is
//! reported at the line where the user wrote the node or field. Writing orders the nodes
//! topologically (ties by node id), so the text of a program is stable.

use super::error::{did_you_mean, ErrorKind, ProgramError};
use super::locate::SourceMap;
use crate::graph::{Graph, NodeId, Phase};
use crate::op::Op;
use crate::pipeline::PipelineSpec;
use crate::program::{InfeedSpec, OutfeedSpec, Program, TrainingSpec};
use crate::validate::{control_character, find_cycle, validate_program};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

/// The top-level `Program(...)` value of a program file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename = "Program", deny_unknown_fields)]
pub(crate) struct ProgramDoc {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default = "one")]
    pub device_iterations: u32,
    pub nodes: Vec<NodeDoc>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub infeeds: Vec<InfeedSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outfeeds: Vec<OutfeedSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training: Option<TrainingSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_memory_proportion: Option<f64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub memory_proportions: BTreeMap<String, f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<PipelineSpec>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub recompute: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recompute_checkpoints: Vec<String>,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub replication_factor: u32,
    #[serde(default, skip_serializing_if = "is_false")]
    pub offload_optimizer_state: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub replicated_optimizer_state_sharding: bool,
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn one() -> u32 {
    1
}

/// One node as written: `(name: "y", op: Add, inputs: ["a", "b"], phase: Update)`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename = "Node", deny_unknown_fields)]
pub(crate) struct NodeDoc {
    pub name: String,
    pub op: Op,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "compact_strings"
    )]
    pub inputs: Vec<String>,
    #[serde(default, skip_serializing_if = "is_step")]
    pub phase: Phase,
    /// The IPU this node and the nodes after it run on (TensorFlow's `ipu.scopes.ipu_shard`,
    /// PopTorch's `ipu_id`), read as split points ([`ipu_attributes`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipu: Option<u32>,
}

/// A list of strings without spare capacity: a node has one or two inputs, and a list grown
/// by pushes holds four (96 bytes) — a large program's inputs would take twice its text.
fn compact_strings<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let mut v = <Vec<String> as Deserialize>::deserialize(d)?;
    v.shrink_to_fit();
    Ok(v)
}

fn is_step(p: &Phase) -> bool {
    *p == Phase::Step
}

/// Builds and validates the program a document describes.
pub(crate) fn build(mut doc: ProgramDoc, map: &SourceMap) -> Result<Program, ProgramError> {
    ipu_attributes(&mut doc, map)?;
    let n = doc.nodes.len();
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(n);
    for (i, node) in doc.nodes.iter().enumerate() {
        let path = format!("nodes[{i}].name");
        if node.name.is_empty() {
            return Err(map.at(&path, ErrorKind::Invalid, "node names must not be empty"));
        }
        if let Some(fault) = control_character("node name", &node.name) {
            return Err(map.at(&path, ErrorKind::Invalid, fault));
        }
        if let Some(&first) = index.get(node.name.as_str()) {
            return Err(map
                .at(
                    &path,
                    ErrorKind::DuplicateName,
                    format!("duplicate node name '{}'", node.name),
                )
                .note(format!(
                    "'{}' is first defined at line {}",
                    node.name,
                    map.line_of(&format!("nodes[{first}].name"))
                )));
        }
        index.insert(&node.name, i);
    }
    check_proportions(&doc, &index, map)?;
    check_pipeline(&doc, map)?;
    if doc.replication_factor == 0 || doc.replication_factor > crate::pipeline::MAX_IPUS {
        return Err(map.at(
            "replication_factor",
            ErrorKind::Invalid,
            format!(
                "replication_factor {} is not in 1..={}",
                doc.replication_factor,
                crate::pipeline::MAX_IPUS
            ),
        ));
    }
    if let Some((k, name)) = doc
        .recompute_checkpoints
        .iter()
        .enumerate()
        .find(|(_, name)| !index.contains_key(name.as_str()))
    {
        let short: String = name.chars().take(80).collect();
        return Err(no_such_node(
            &doc,
            map,
            &format!("recompute_checkpoints[{k}]"),
            name,
            format!("recompute_checkpoints: no node is named '{short}'"),
        ));
    }

    // Resolve input names to document indices.
    let mut inputs: Vec<Vec<usize>> = Vec::with_capacity(n);
    for (i, node) in doc.nodes.iter().enumerate() {
        let mut resolved = Vec::with_capacity(node.inputs.len());
        for (k, name) in node.inputs.iter().enumerate() {
            let Some(&j) = index.get(name.as_str()) else {
                let mut e = map.at(
                    &format!("nodes[{i}].inputs[{k}]"),
                    ErrorKind::MissingInput,
                    format!(
                        "node '{}' ({}): missing input '{name}': no node has that name",
                        node.name,
                        node.op.name()
                    ),
                );
                if let Some(s) = did_you_mean(name, doc.nodes.iter().map(|n| n.name.as_str())) {
                    e = e.help(format!("did you mean '{s}'?"));
                }
                return Err(e);
            };
            resolved.push(j);
        }
        inputs.push(resolved);
    }

    drop(index);
    // The names are resolved: free them (and the spare capacity of the node list) before
    // the graph is built, so a large program is not held twice.
    for node in &mut doc.nodes {
        node.inputs = Vec::new();
    }
    doc.nodes.shrink_to_fit();

    let order = topo_order(&inputs).map_err(|cycle| cycle_error(&doc, &inputs, &cycle, map))?;

    let mut ids: Vec<Option<NodeId>> = vec![None; n];
    let mut graph = Graph::with_capacity(n, inputs.iter().map(Vec::len).sum());
    let mut add = |i: usize, node: NodeDoc| -> Result<(), ProgramError> {
        // Each node's inputs are read once: free them as the graph grows.
        let input_ids: Vec<NodeId> = std::mem::take(&mut inputs[i])
            .iter()
            .filter_map(|&j| ids[j])
            .collect();
        let id = graph
            .add_node_in(node.phase, node.name, node.op, &input_ids)
            .map_err(|e| map.ir_error(&e, true))?;
        ids[i] = Some(id);
        Ok(())
    };
    let mut nodes = doc.nodes;
    if order.iter().enumerate().all(|(k, &i)| k == i) {
        // Written in dependency order (the usual case): take the nodes from the list as
        // the graph grows, returning the list's memory as it empties, so a large program
        // is never held twice.
        nodes.reverse();
        let mut i = 0;
        while let Some(node) = nodes.pop() {
            add(i, node)?;
            i += 1;
            if nodes.len().is_multiple_of(1 << 14) {
                nodes.shrink_to_fit();
            }
        }
    } else {
        let mut slots: Vec<Option<NodeDoc>> = nodes.into_iter().map(Some).collect();
        for i in order {
            if let Some(node) = slots[i].take() {
                add(i, node)?;
            }
        }
    }
    drop((ids, inputs));

    let program = Program {
        name: doc.name,
        description: doc.description,
        graph,
        training: doc.training,
        infeeds: doc.infeeds,
        outfeeds: doc.outfeeds,
        device_iterations: doc.device_iterations,
        available_memory_proportion: doc.available_memory_proportion,
        memory_proportions: doc.memory_proportions,
        pipeline: doc.pipeline,
        recompute: doc.recompute,
        recompute_checkpoints: doc.recompute_checkpoints,
        replication_factor: doc.replication_factor,
        offload_optimizer_state: doc.offload_optimizer_state,
        replicated_optimizer_state_sharding: doc.replicated_optimizer_state_sharding,
    };
    validate_program(&program).map_err(|e| map.ir_error(&e, false))?;
    Ok(program)
}

/// A memory proportion is in (0, 1], and a per-op entry names a node.
fn check_proportions(
    doc: &ProgramDoc,
    index: &HashMap<&str, usize>,
    map: &SourceMap,
) -> Result<(), ProgramError> {
    let in_range = |p: f64| p > 0.0 && p <= 1.0;
    if let Some(p) = doc.available_memory_proportion {
        if !in_range(p) {
            return Err(map.at(
                "available_memory_proportion",
                ErrorKind::Invalid,
                format!("available_memory_proportion {p} is not in (0, 1]"),
            ));
        }
    }
    for (name, &p) in &doc.memory_proportions {
        let short: String = name.chars().take(80).collect();
        if !index.contains_key(name.as_str()) {
            return Err(no_such_node(
                doc,
                map,
                "memory_proportions",
                name,
                format!("memory_proportions: no node is named '{short}'"),
            ));
        }
        if !in_range(p) {
            return Err(map.at(
                "memory_proportions",
                ErrorKind::Invalid,
                format!("memory_proportions: '{short}': {p} is not in (0, 1]"),
            ));
        }
    }
    Ok(())
}

/// The error at `path` that `name` names no node, with the nearest node name as help.
fn no_such_node(
    doc: &ProgramDoc,
    map: &SourceMap,
    path: &str,
    name: &str,
    message: String,
) -> ProgramError {
    let e = map.at(path, ErrorKind::MissingInput, message);
    match did_you_mean(name, doc.nodes.iter().map(|n| n.name.as_str())) {
        Some(s) => e.help(format!("did you mean '{s}'?")),
        None => e,
    }
}

/// Every split point names a node or a module path, once; `ipus` gives one IPU per stage.
/// (Their order is checked on the graph, where the program's order is known.)
/// Nodes' `ipu: N` attributes as the program's pipeline, as PopTorch's `ipu_id` places
/// blocks: the nodes before the first attribute are on IPU 0; a node that names an IPU other
/// than its stage's begins a new stage on that IPU (a split point), unless its stage has no
/// operation yet (only sources, which sit with their first reader anyway), whose IPU it then
/// sets; the nodes without the attribute stay on the stage before them. A program places its
/// nodes one way: with `ipu` attributes or with a `pipeline` field.
fn ipu_attributes(doc: &mut ProgramDoc, map: &SourceMap) -> Result<(), ProgramError> {
    let Some(first) = doc.nodes.iter().position(|n| n.ipu.is_some()) else {
        return Ok(());
    };
    if doc.pipeline.is_some() {
        return Err(map.at(
            &format!("nodes[{first}].ipu"),
            ErrorKind::Invalid,
            format!(
                "node '{}' has ipu: {}, and the program has a pipeline field: place the nodes \
                 one way, with ipu attributes or with pipeline splits",
                doc.nodes[first].name,
                doc.nodes[first].ipu.unwrap_or(0)
            ),
        ));
    }
    let mut splits = Vec::new();
    let mut ipus: Vec<u32> = vec![0];
    let mut operations = 0usize;
    for (i, node) in doc.nodes.iter().enumerate() {
        if let Some(ipu) = node.ipu {
            if ipu >= crate::pipeline::MAX_IPUS {
                return Err(map.at(
                    &format!("nodes[{i}].ipu"),
                    ErrorKind::Invalid,
                    format!(
                        "node '{}': ipu {ipu} is beyond the largest system ({} IPUs)",
                        node.name,
                        crate::pipeline::MAX_IPUS
                    ),
                ));
            }
            let current = ipus.len() - 1;
            if ipu != ipus[current] {
                if operations == 0 {
                    ipus[current] = ipu;
                } else {
                    splits.push(node.name.clone());
                    ipus.push(ipu);
                    operations = 0;
                }
            }
        }
        if !matches!(
            node.op,
            Op::Input { .. } | Op::Variable { .. } | Op::Constant { .. }
        ) {
            operations += 1;
        }
    }
    if ipus != [0] {
        doc.pipeline = Some(PipelineSpec {
            splits,
            schedule: Default::default(),
            ipus,
        });
    }
    Ok(())
}

fn check_pipeline(doc: &ProgramDoc, map: &SourceMap) -> Result<(), ProgramError> {
    let Some(p) = &doc.pipeline else {
        return Ok(());
    };
    for (k, split) in p.splits.iter().enumerate() {
        let short: String = split.chars().take(80).collect();
        let path = format!("pipeline.splits[{k}]");
        if !doc
            .nodes
            .iter()
            .any(|n| crate::pipeline::begins_with(&n.name, split))
        {
            let unknown = crate::pipeline::PlacementError::UnknownSplit {
                option: "pipeline.splits",
                split: short,
            };
            return Err(no_such_node(doc, map, &path, split, unknown.to_string()));
        }
        if p.splits[..k].contains(split) {
            return Err(map.at(
                &path,
                ErrorKind::Invalid,
                format!("pipeline.splits: split point '{short}' is listed twice"),
            ));
        }
    }
    let stages = p.splits.len() + 1;
    if !p.ipus.is_empty() && p.ipus.len() != stages {
        let wrong = crate::pipeline::PlacementError::MappingLength {
            given: p.ipus.len(),
            stages,
            splits: p.splits.len(),
        };
        return Err(map.at("pipeline.ipus", ErrorKind::Invalid, wrong.to_string()));
    }
    if let Some(&ipu) = p.ipus.iter().find(|&&i| i >= crate::pipeline::MAX_IPUS) {
        return Err(map.at(
            "pipeline.ipus",
            ErrorKind::Invalid,
            format!(
                "pipeline.ipus: IPU {ipu} is beyond the largest system ({} IPUs)",
                crate::pipeline::MAX_IPUS
            ),
        ));
    }
    Ok(())
}

/// Kahn's algorithm over document indices, smallest index first among the ready nodes; the
/// cycle found when some nodes are never ready.
fn topo_order(inputs: &[Vec<usize>]) -> Result<Vec<usize>, Vec<usize>> {
    let n = inputs.len();
    let mut pending: Vec<usize> = inputs.iter().map(Vec::len).collect();
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, ins) in inputs.iter().enumerate() {
        for &j in ins {
            consumers[j].push(i);
        }
    }
    let mut ready: BinaryHeap<Reverse<usize>> =
        (0..n).filter(|&i| pending[i] == 0).map(Reverse).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(Reverse(i)) = ready.pop() {
        order.push(i);
        for &c in &consumers[i] {
            pending[c] -= 1;
            if pending[c] == 0 {
                ready.push(Reverse(c));
            }
        }
    }
    if order.len() == n {
        Ok(order)
    } else {
        Err(find_cycle(inputs).unwrap_or_default())
    }
}

fn cycle_error(
    doc: &ProgramDoc,
    inputs: &[Vec<usize>],
    cycle: &[usize],
    map: &SourceMap,
) -> ProgramError {
    let name = |i: usize| doc.nodes.get(i).map_or("?", |n| n.name.as_str());
    let names: Vec<String> = cycle.iter().map(|&i| format!("'{}'", name(i))).collect();
    // Point at the first node's input that closes the cycle.
    let (first, last) = match cycle {
        [first, .., last, _] => (*first, *last),
        [first, _] => (*first, *first),
        _ => (0, 0),
    };
    let slot = inputs
        .get(first)
        .and_then(|ins| ins.iter().position(|&j| j == last))
        .unwrap_or(0);
    let mut e = map.at(
        &format!("nodes[{first}].inputs[{slot}]"),
        ErrorKind::Cycle,
        format!("nodes form a cycle: {}", names.join(" -> ")),
    );
    // Every node's line in one reading of the source.
    let readers: Vec<usize> = cycle.iter().skip(1).copied().collect();
    let lines = map.name_lines(&readers);
    for (pair, line) in cycle.windows(2).zip(lines) {
        e = e.note(format!(
            "line {line}: '{}' reads '{}'",
            name(pair[1]),
            name(pair[0])
        ));
    }
    e
}

/// The document of a program: nodes in a stable topological order.
pub(crate) fn from_program(program: &Program) -> ProgramDoc {
    let g = &program.graph;
    let nodes = stable_order(g)
        .into_iter()
        .map(|id| {
            let node = g.node(id);
            NodeDoc {
                name: node.name.clone(),
                op: node.op.clone(),
                inputs: node
                    .inputs
                    .iter()
                    .map(|&i| g.get(i).map_or_else(String::new, |n| n.name.clone()))
                    .collect(),
                phase: node.phase,
                ipu: None,
            }
        })
        .collect();
    ProgramDoc {
        name: program.name.clone(),
        description: program.description.clone(),
        device_iterations: program.device_iterations,
        nodes,
        infeeds: program.infeeds.clone(),
        outfeeds: program.outfeeds.clone(),
        training: program.training.clone(),
        available_memory_proportion: program.available_memory_proportion,
        memory_proportions: program.memory_proportions.clone(),
        pipeline: program.pipeline.clone(),
        recompute: program.recompute,
        recompute_checkpoints: program.recompute_checkpoints.clone(),
        replication_factor: program.replication_factor,
        offload_optimizer_state: program.offload_optimizer_state,
        replicated_optimizer_state_sharding: program.replicated_optimizer_state_sharding,
    }
}

/// Node ids in topological order, smallest id first among the ready nodes (plain id order,
/// for a graph that is not acyclic).
fn stable_order(g: &Graph) -> Vec<NodeId> {
    let ids: Vec<NodeId> = g.ids().collect();
    let pos: HashMap<NodeId, usize> = ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
    let inputs: Vec<Vec<usize>> = ids
        .iter()
        .map(|&id| {
            g.node(id)
                .inputs
                .iter()
                .filter_map(|i| pos.get(i).copied())
                .collect()
        })
        .collect();
    match topo_order(&inputs) {
        Ok(order) => order.into_iter().map(|i| ids[i]).collect(),
        Err(_) => ids,
    }
}

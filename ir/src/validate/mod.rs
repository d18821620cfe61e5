//! The validator: the written invariants of a [`Graph`] and a [`Program`].
//!
//! Everything downstream (the training transform, the compiler, the reference interpreter, the
//! runtime) may assume these invariants once [`validate_program`] (or [`validate_graph`] for a
//! bare graph) has returned `Ok`: **a validated program never makes ipusim panic**. The text
//! parser runs [`validate_program`] on every program it reads; code that builds or transforms
//! graphs should run it between passes, as cranelift runs its verifier.
//!
//! # Graph invariants ([`validate_graph`])
//!
//! 1. Every input of every node exists, and the graph's edges are exactly the nodes' input
//!    lists (one edge per input slot, labelled with the slot).
//! 2. Node names are non-empty, free of control characters and unique, and looking a node up
//!    by name finds it.
//! 3. The graph is acyclic.
//! 4. Every node's stored type equals the type re-inferred from its op and its inputs' stored
//!    types (so arity, dtypes and shapes are consistent everywhere).
//! 5. No tensor has a zero-sized dimension (empty tensors are not supported: an `ArgMax`, a
//!    `ReduceMax` or a softmax over nothing has no value), and none has more than
//!    [`crate::infer::MAX_ELEMENTS`] elements.
//! 6. Numeric attributes are usable: `ScaledAdd`'s scale is finite; variable initialisers have
//!    finite parameters, `Uniform` has `low < high`, `Normal` has `std >= 0`; the random
//!    initialisers (`Uniform`, `Normal`, `GlorotUniform`) initialise float variables, and
//!    `GlorotUniform` a variable of rank >= 1 (its fans come from the shape); a `OneHot` depth
//!    fits a `u32` (the compiler's index type). Every value a
//!    constant or a variable starts from is representable in its dtype: an integer in range
//!    for `i32` and `u8`, a finite value that does not overflow `f16` (|v| < 65520, the
//!    round-to-nearest overflow threshold) or `f32`; a `Uniform` initialiser's bounds and a
//!    `Normal` initialiser's `|mean| + 8.58 std` (the largest Box-Muller radius of 53-bit
//!    uniforms, `sqrt(-2 ln 2^-53)` = 8.57) do not overflow a float dtype.
//! 7. Stream names are non-empty and free of control characters; `Input` stream names are
//!    unique among inputs, `Outfeed` stream names among outfeeds; no name is both an input
//!    and an outfeed stream.
//! 8. `Input` nodes run in [`Phase::Step`] (an infeed delivers one micro-batch per step).
//! 9. `Assign`'s first input is a `Variable` node, and each variable is assigned at most once
//!    per phase.
//! 10. A [`Phase::Step`] node never reads a [`Phase::Update`] node (the update runs after the
//!     micro-batches of a step, so its values do not exist yet).
//!
//! # Program invariants ([`validate_program`])
//!
//! 11. The graph satisfies invariants 1-10.
//! 12. `device_iterations >= 1`, and `device_iterations x gradient_accumulation` (the
//!     micro-batches of one device run) fits in a `u32`.
//! 13. A training spec, if any: `loss` names an existing scalar floating-point node in the
//!     step phase; learning rate finite and > 0; momentum, `beta1` and `beta2` finite and in
//!     `[0, 1)`; Adam's epsilon finite and > 0; `loss_scaling` finite and > 0;
//!     `gradient_accumulation >= 1`; `accumulation_dtype`, if given, is a float type.
//! 14. Every infeed spec names an existing `Input` stream, and each stream has at most one
//!     spec. A CSV source has a non-empty path, its stream has a leading batch dimension, and
//!     its column selection gives exactly as many columns as one sample has elements (the
//!     stream's shape without the batch dimension), without repeating a column name. Constant,
//!     uniform and sequence sources have finite parameters, uniform with `low < high`.
//! 15. Every outfeed spec names an existing `Outfeed` stream, each stream has at most one
//!     spec, and an `every:N` mode has `N >= 1`.
//!
//! Program-level faults are [`IrError::Field`] errors naming the field by its path in the text
//! format, so the text layer can point at the line that holds it.

mod program;

use crate::dtype::DType;
use crate::error::IrError;
use crate::graph::{Graph, Node, NodeId, Phase};
use crate::infer::MAX_ELEMENTS;
use crate::op::{Init, Literal, Op};
use crate::program::Program;
use petgraph::visit::{EdgeRef, IntoEdgeReferences};
use std::collections::{HashMap, HashSet};

/// Checks invariants 1-10 of the module documentation.
pub fn validate_graph(graph: &Graph) -> Result<(), IrError> {
    check_edges(graph)?;
    check_names(graph)?;
    check_acyclic(graph)?;
    for (_, node) in graph.nodes() {
        let inferred = graph.infer_node(&node.name, &node.op, &node.inputs)?;
        if inferred != node.ty {
            return Err(invalid(
                &node.name,
                &node.op,
                format!(
                    "stored type {} differs from the type {inferred} inferred from its inputs",
                    node.ty
                ),
            ));
        }
        check_size(&node.name, &node.op, node)?;
        check_attributes(&node.name, &node.op)?;
    }
    check_streams(graph)?;
    check_phases_and_assigns(graph)?;
    Ok(())
}

/// Checks invariants 1-15 of the module documentation.
pub fn validate_program(program: &Program) -> Result<(), IrError> {
    validate_graph(&program.graph)?;
    self::program::check_program(program)
}

fn field(path: impl Into<String>, message: impl Into<String>) -> IrError {
    IrError::Field {
        field: path.into(),
        message: message.into(),
    }
}

/// The fault of a name (`what`, e.g. "stream name") holding a control character, if it
/// holds one: names are printed in reports and on terminals.
pub(crate) fn control_character(what: &str, name: &str) -> Option<String> {
    let c = name.chars().find(|c| c.is_control())?;
    Some(format!(
        "{what} {name:?} holds the control character {c:?} (names are printed in reports and \
         on terminals)"
    ))
}

fn invalid(node: &str, op: &Op, message: String) -> IrError {
    IrError::Invalid {
        node: node.to_string(),
        op: op.name(),
        message,
    }
}

/// Invariant 1.
fn check_edges(graph: &Graph) -> Result<(), IrError> {
    for (_, node) in graph.nodes() {
        if let Some(missing) = node.inputs.iter().find(|&&i| graph.get(i).is_none()) {
            return Err(IrError::UnknownInput {
                node: node.name.clone(),
                input: missing.to_string(),
            });
        }
    }
    let g = graph.petgraph();
    let mut edges_into: HashMap<NodeId, usize> = HashMap::new();
    for e in g.edge_references() {
        let (src, dst) = (
            NodeId(e.source().index() as u32),
            NodeId(e.target().index() as u32),
        );
        let node = graph.node(dst);
        if node.inputs.get(*e.weight() as usize) != Some(&src) {
            return Err(invalid(
                &node.name,
                &node.op,
                format!(
                    "graph edge from '{}' into slot {} does not match the node's inputs",
                    graph.node(src).name,
                    e.weight()
                ),
            ));
        }
        *edges_into.entry(dst).or_default() += 1;
    }
    for (id, node) in graph.nodes() {
        let n = edges_into.get(&id).copied().unwrap_or(0);
        if n != node.inputs.len() {
            return Err(invalid(
                &node.name,
                &node.op,
                format!("node has {} inputs but {n} graph edges", node.inputs.len()),
            ));
        }
    }
    Ok(())
}

/// Invariant 2.
fn check_names(graph: &Graph) -> Result<(), IrError> {
    let mut seen = HashSet::new();
    for (id, node) in graph.nodes() {
        if node.name.is_empty() {
            return Err(invalid(
                "",
                &node.op,
                format!("node {id} has an empty name"),
            ));
        }
        if let Some(fault) = control_character(&format!("node {id}'s name"), &node.name) {
            return Err(invalid("", &node.op, fault));
        }
        if !seen.insert(node.name.as_str()) || graph.find(&node.name) != Some(id) {
            return Err(IrError::DuplicateName(node.name.clone()));
        }
    }
    Ok(())
}

/// Invariant 3.
fn check_acyclic(graph: &Graph) -> Result<(), IrError> {
    // Positions by node id (ids are dense indices): no per-node vectors, so validating a
    // large graph costs a few bytes per node.
    let ids: Vec<NodeId> = graph.ids().collect();
    let slots = ids.iter().map(|id| id.0 as usize + 1).max().unwrap_or(0);
    let mut position = vec![u32::MAX; slots];
    for (i, id) in ids.iter().enumerate() {
        position[id.0 as usize] = i as u32;
    }
    let input = |node: usize, k: usize| {
        let id = graph.node(ids[node]).inputs.get(k)?;
        Some(match position.get(id.0 as usize) {
            Some(&p) if p != u32::MAX => p as usize,
            _ => usize::MAX,
        })
    };
    match find_cycle_in(ids.len(), input) {
        Some(cycle) => Err(IrError::Cycle(
            cycle
                .iter()
                .map(|&i| graph.node(ids[i]).name.clone())
                .collect(),
        )),
        None => Ok(()),
    }
}

/// A cycle of the graph whose node `i` reads the nodes `inputs[i]`, if there is one: the nodes
/// in data-flow order (each feeds the next), starting at the lowest index, the first repeated
/// at the end.
pub(crate) fn find_cycle(inputs: &[Vec<usize>]) -> Option<Vec<usize>> {
    find_cycle_in(inputs.len(), |node, k| inputs[node].get(k).copied())
}

/// [`find_cycle`] over `n` nodes whose `k`-th input `input(node, k)` gives (`None` past the
/// last; an index `>= n` is skipped).
fn find_cycle_in(n: usize, input: impl Fn(usize, usize) -> Option<usize>) -> Option<Vec<usize>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnStack,
        Done,
    }
    let mut mark = vec![Mark::New; n];
    for root in 0..n {
        if mark[root] != Mark::New {
            continue;
        }
        // Iterative depth-first search along input edges: (node, next input to visit).
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        mark[root] = Mark::OnStack;
        while let Some(top) = stack.last_mut() {
            let (node, next) = *top;
            let Some(child) = input(node, next) else {
                mark[node] = Mark::Done;
                stack.pop();
                continue;
            };
            top.1 += 1;
            match mark.get(child).copied() {
                Some(Mark::New) => {
                    mark[child] = Mark::OnStack;
                    stack.push((child, 0));
                }
                Some(Mark::OnStack) => {
                    // The stack from `child` to the top reads backwards along the data flow.
                    let start = stack.iter().position(|&(n, _)| n == child).unwrap_or(0);
                    let mut cycle: Vec<usize> = stack[start..].iter().map(|&(n, _)| n).collect();
                    cycle.reverse();
                    // Start at the lowest index (the first in file or id order).
                    let first = (0..cycle.len()).min_by_key(|&i| cycle[i]).unwrap_or(0);
                    cycle.rotate_left(first);
                    cycle.push(cycle[0]);
                    return Some(cycle);
                }
                _ => {}
            }
        }
    }
    None
}

/// Invariant 5.
fn check_size(name: &str, op: &Op, node: &Node) -> Result<(), IrError> {
    let dims = node.ty.shape.dims();
    if let Some(axis) = dims.iter().position(|&d| d == 0) {
        return Err(invalid(
            name,
            op,
            format!(
                "tensor {} has a zero-sized dimension {axis} (empty tensors are not supported)",
                node.ty
            ),
        ));
    }
    let mut n: u128 = 1;
    for &d in dims {
        n = n.saturating_mul(d as u128);
    }
    if n > MAX_ELEMENTS as u128 {
        return Err(invalid(
            name,
            op,
            format!("tensor {} has more than 2^40 elements", node.ty),
        ));
    }
    Ok(())
}

/// Smallest magnitude that rounds (to nearest even) past `f16`'s largest finite value 65504.
const F16_OVERFLOW: f64 = 65520.0;
/// Smallest magnitude that rounds past `f32::MAX` (`2^128 - 2^103`, half an ulp above it).
const F32_OVERFLOW: f64 = 340_282_356_779_733_661_637_539_395_458_142_568_448.0;
/// Largest radius `sqrt(-2 ln(1 - u))` of the Box-Muller transform on 53-bit uniforms, rounded
/// up (`sqrt(-2 ln 2^-53)` = 8.5717...).
const NORMAL_MAX_RADIUS: f64 = 8.58;

/// Why `v` cannot be stored in `dtype`, if it cannot (what the engine's materialisation of
/// initial values would refuse).
pub(crate) fn unrepresentable(v: f64, dtype: DType) -> Option<String> {
    let fits = match dtype {
        DType::F16 => !v.is_finite() || v.abs() < F16_OVERFLOW,
        DType::F32 => !v.is_finite() || v.abs() < F32_OVERFLOW,
        DType::I32 => v.fract() == 0.0 && (f64::from(i32::MIN)..=f64::from(i32::MAX)).contains(&v),
        DType::U8 => v.fract() == 0.0 && (0.0..=255.0).contains(&v),
        DType::Bool => true,
    };
    match (fits, dtype.is_float()) {
        (true, _) => None,
        (false, true) => Some(format!("value {v} overflows {dtype}")),
        (false, false) => Some(format!("value {v} is not representable in {dtype}")),
    }
}

/// The values a constant or a variable starts from fit `dtype` (its written dtype, or the one
/// the precision policy gives it); `why` says which, for the message.
pub(super) fn check_initial_values(
    name: &str,
    op: &Op,
    dtype: DType,
    why: &str,
) -> Result<(), IrError> {
    let bad = |message: String| Err(invalid(name, op, message));
    if let Op::Constant { value, .. } = op {
        let values: &[f64] = match value {
            Literal::Splat(v) => std::slice::from_ref(v),
            Literal::Values(v) => v,
        };
        if let Some((i, m)) = values
            .iter()
            .enumerate()
            .find_map(|(i, &v)| unrepresentable(v, dtype).map(|m| (i, m)))
        {
            let at = match value {
                Literal::Splat(_) => String::new(),
                Literal::Values(_) => format!(" (element {i})"),
            };
            return bad(format!("constant {m}{at}{why}"));
        }
    }
    if let Op::Variable {
        init: Init::Values(values),
        ..
    } = op
    {
        if let Some((i, m)) = values
            .iter()
            .enumerate()
            .find_map(|(i, &v)| unrepresentable(v, dtype).map(|m| (i, m)))
        {
            return bad(format!("initial value {m} (element {i}){why}"));
        }
    }
    if let Op::Variable { init, .. } = op {
        let limits: &[(&str, f64)] = match init {
            Init::Constant(v) => &[("initial value", *v)],
            Init::Uniform { low, high, .. } => &[("uniform low", *low), ("uniform high", *high)],
            Init::Normal { mean, std, .. } => &[(
                "normal |mean| + 8.58 std",
                mean.abs() + NORMAL_MAX_RADIUS * std.abs(),
            )],
            Init::Zeros | Init::GlorotUniform { .. } | Init::Values(_) | Init::File { .. } => &[],
        };
        // Random initialisers on non-float variables are reported by `check_attributes`.
        let random = !matches!(init, Init::Constant(_));
        if !random || dtype.is_float() {
            for (what, v) in limits {
                if let Some(m) = unrepresentable(*v, dtype).filter(|_| v.is_finite()) {
                    return bad(format!("{what}: {m}{why}"));
                }
            }
        }
    }
    Ok(())
}

/// Invariant 6.
fn check_attributes(name: &str, op: &Op) -> Result<(), IrError> {
    let bad = |message: String| Err(invalid(name, op, message));
    if let Op::Constant { dtype, .. } | Op::Variable { dtype, .. } = op {
        check_initial_values(name, op, *dtype, "")?;
    }
    match op {
        Op::OneHot { depth, .. } if u32::try_from(*depth).is_err() => bad(format!(
            "depth {depth} exceeds {} (the largest depth the compiler lowers)",
            u32::MAX
        )),
        Op::ScaledAdd { scale } if !scale.is_finite() => {
            bad(format!("scale must be finite, got {scale}"))
        }
        Op::Variable { init, dtype, shape } => match *init {
            Init::Uniform { .. } | Init::Normal { .. } | Init::GlorotUniform { .. }
                if !dtype.is_float() =>
            {
                bad(format!("a random initialiser needs a float variable, not {dtype}"))
            }
            Init::GlorotUniform { .. } if shape.rank() == 0 => bad(
                "GlorotUniform needs a variable of rank >= 1 (its fans come from the shape)"
                    .to_string(),
            ),
            Init::File { ref path, .. } => bad(format!(
                "the weights file '{path}' was not read (File initialisers are read when a program file is loaded)"
            )),
            Init::Constant(v) if !v.is_finite() => {
                bad(format!("initial value must be finite, got {v}"))
            }
            Init::Uniform { low, high, .. }
                if !(low.is_finite() && high.is_finite() && low < high) =>
            {
                bad(format!(
                    "uniform initialiser needs finite low < high, got [{low}, {high})"
                ))
            }
            Init::Normal { mean, std, .. }
                if !(mean.is_finite() && std.is_finite() && std >= 0.0) =>
            {
                bad(format!(
                    "normal initialiser needs a finite mean and a finite std >= 0, got mean {mean}, std {std}"
                ))
            }
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

/// Invariants 7 and 8.
fn check_streams(graph: &Graph) -> Result<(), IrError> {
    let mut inputs: HashMap<&str, &str> = HashMap::new();
    let mut outfeeds: HashMap<&str, &str> = HashMap::new();
    for (_, node) in graph.nodes() {
        let (stream, mine, other) = match &node.op {
            Op::Input { stream, .. } => (stream, &mut inputs, &outfeeds),
            Op::Outfeed { stream } => (stream, &mut outfeeds, &inputs),
            _ => continue,
        };
        if stream.is_empty() {
            return Err(invalid(
                &node.name,
                &node.op,
                "stream name must not be empty".into(),
            ));
        }
        if let Some(fault) = control_character("stream name", stream) {
            return Err(invalid(&node.name, &node.op, fault));
        }
        if let Some(first) = mine
            .get(stream.as_str())
            .or_else(|| other.get(stream.as_str()))
        {
            return Err(IrError::DuplicateStream {
                stream: stream.clone(),
                first: first.to_string(),
                second: node.name.clone(),
            });
        }
        mine.insert(stream, &node.name);
        if matches!(node.op, Op::Input { .. }) && node.phase != Phase::Step {
            return Err(invalid(
                &node.name,
                &node.op,
                "an Input runs in the Step phase (one micro-batch per step)".into(),
            ));
        }
    }
    Ok(())
}

/// Invariants 9 and 10.
fn check_phases_and_assigns(graph: &Graph) -> Result<(), IrError> {
    let mut assigned: HashMap<(NodeId, Phase), &str> = HashMap::new();
    for (_, node) in graph.nodes() {
        if node.phase == Phase::Step {
            if let Some(&late) = node
                .inputs
                .iter()
                .find(|&&i| graph.node(i).phase == Phase::Update)
            {
                return Err(invalid(
                    &node.name,
                    &node.op,
                    format!(
                        "a Step-phase node cannot read '{}', which runs in the Update phase",
                        graph.node(late).name
                    ),
                ));
            }
        }
        if !matches!(node.op, Op::Assign) {
            continue;
        }
        let Some(&var) = node.inputs.first() else {
            continue; // arity is checked by re-inference
        };
        let target = graph.node(var);
        if !matches!(target.op, Op::Variable { .. }) {
            return Err(invalid(
                &node.name,
                &node.op,
                format!(
                    "the first input '{}' is a {}, not a Variable",
                    target.name,
                    target.op.name()
                ),
            ));
        }
        if let Some(first) = assigned.insert((var, node.phase), &node.name) {
            return Err(invalid(
                &node.name,
                &node.op,
                format!(
                    "variable '{}' is already assigned by '{first}' in the {:?} phase",
                    target.name, node.phase
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::GraphBuilder;
    use crate::dtype::{DType, Shape, TensorType};
    use petgraph::stable_graph::NodeIndex;

    #[test]
    fn type_drift_cycles_and_duplicate_names_are_caught() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [2]).unwrap();
        let y = b.relu(x).unwrap();
        let z = b.relu(y).unwrap();
        let clean = b.finish();

        let mut g = clean.clone();
        g.raw_parts_mut().0[NodeIndex::new(y.as_usize())].ty = TensorType::new(DType::F16, [2]);
        let msg = validate_graph(&g).unwrap_err().to_string();
        assert!(msg.contains("stored type f16[2]"), "{msg}");

        let mut g = clean.clone();
        {
            let (raw, _) = g.raw_parts_mut();
            raw[NodeIndex::new(y.as_usize())].inputs = vec![z];
            let old = raw.find_edge(NodeIndex::new(x.as_usize()), NodeIndex::new(y.as_usize()));
            raw.remove_edge(old.unwrap());
            raw.add_edge(
                NodeIndex::new(z.as_usize()),
                NodeIndex::new(y.as_usize()),
                0,
            );
        }
        assert_eq!(
            validate_graph(&g),
            Err(IrError::Cycle(vec![
                "relu".into(),
                "relu_1".into(),
                "relu".into()
            ]))
        );

        let mut g = clean.clone();
        g.raw_parts_mut().0[NodeIndex::new(z.as_usize())].name = "relu".into();
        assert_eq!(
            validate_graph(&g),
            Err(IrError::DuplicateName("relu".into()))
        );

        let mut g = clean;
        g.raw_parts_mut().0[NodeIndex::new(z.as_usize())].inputs = vec![NodeId(99)];
        assert!(matches!(
            validate_graph(&g),
            Err(IrError::UnknownInput { .. })
        ));
    }

    #[test]
    fn find_cycle_reports_data_flow_order() {
        // 0 reads 2, 2 reads 1, 1 reads 0: data flows 0 -> 1 -> 2 -> 0.
        let inputs = vec![vec![2], vec![0], vec![1], vec![]];
        assert_eq!(find_cycle(&inputs), Some(vec![0, 1, 2, 0]));
        assert_eq!(find_cycle(&[vec![], vec![0], vec![0, 1]]), None);
        assert_eq!(find_cycle(&[vec![0]]), Some(vec![0, 0]));
    }

    #[test]
    fn streams_must_be_unique_in_both_directions() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [2]).unwrap();
        b.op("out", Op::Outfeed { stream: "x".into() }, &[x])
            .unwrap();
        assert_eq!(
            validate_graph(&b.finish()),
            Err(IrError::DuplicateStream {
                stream: "x".into(),
                first: "x".into(),
                second: "out".into()
            })
        );
        let mut b = GraphBuilder::new();
        b.input("x", DType::F32, [2]).unwrap();
        b.named(
            "x2",
            Op::Input {
                stream: "x".into(),
                dtype: DType::F32,
                shape: Shape::new([2]),
            },
            &[],
        )
        .unwrap();
        assert!(matches!(
            validate_graph(&b.finish()),
            Err(IrError::DuplicateStream { .. })
        ));
    }

    #[test]
    fn assigns_phases_and_empty_tensors() {
        let mut b = GraphBuilder::new();
        let v = b.variable("v", DType::F32, [2], Init::Zeros).unwrap();
        let x = b.input("x", DType::F32, [2]).unwrap();
        b.assign(v, x).unwrap();
        validate_graph(b.graph()).unwrap();
        b.assign(v, x).unwrap();
        let msg = validate_graph(b.graph()).unwrap_err().to_string();
        assert!(msg.contains("already assigned by 'assign'"), "{msg}");

        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [2]).unwrap();
        let y = b.relu(x).unwrap();
        b.assign(y, x).unwrap();
        let msg = validate_graph(b.graph()).unwrap_err().to_string();
        assert!(msg.contains("'relu' is a Relu, not a Variable"), "{msg}");

        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [2]).unwrap();
        b.set_phase(Phase::Update);
        let u = b.relu(x).unwrap();
        b.set_phase(Phase::Step);
        b.relu(u).unwrap();
        let msg = validate_graph(b.graph()).unwrap_err().to_string();
        assert!(msg.contains("cannot read 'relu'"), "{msg}");

        let mut b = GraphBuilder::new();
        b.input("x", DType::F32, [4, 0]).unwrap();
        let msg = validate_graph(b.graph()).unwrap_err().to_string();
        assert!(msg.contains("zero-sized dimension 1"), "{msg}");

        for (dtype, shape, init) in [
            (
                DType::F32,
                vec![2],
                Init::Uniform {
                    low: 1.0,
                    high: 1.0,
                    seed: 0,
                },
            ),
            (
                DType::F32,
                vec![2],
                Init::Normal {
                    mean: 0.0,
                    std: -1.0,
                    seed: 0,
                },
            ),
            (DType::F32, vec![], Init::GlorotUniform { seed: 0 }),
            (DType::I32, vec![2], Init::GlorotUniform { seed: 0 }),
            (DType::F32, vec![2], Init::Constant(f64::INFINITY)),
        ] {
            let mut b = GraphBuilder::new();
            b.variable("w", dtype, shape, init).unwrap();
            assert!(validate_graph(b.graph()).is_err());
        }
    }
}

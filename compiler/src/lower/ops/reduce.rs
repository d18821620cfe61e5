//! `ReduceSum`, `ReduceMean`, `ReduceMax` and `ArgMax`: the reduction of
//! [`crate::lower::kit::reduction`] over the reduced axes, in its documented order.

use crate::error::CompileError;
use crate::executable::TensorKind;
use crate::lower::core::Lowerer;
use crate::lower::kit::fill::fill_work;
use crate::lower::kit::permute;
use crate::lower::kit::reduction::{reduce, Kind, Spec};
use crate::lower::kit::rows::argmax_rows;
use ipusim_ir::{NodeId, Op, Shape};
use std::collections::{BTreeMap, HashMap};

/// The sum reductions of a phase lowered together, as PopLibs' `reduceMany` reduces a batch
/// norm's statistics (and its gradients' sums) in the same compute sets ([`batches`]).
pub(crate) struct Batches {
    /// Each batch of two or more, by the member lowered last (its trigger), all members in
    /// schedule order.
    pub by_trigger: HashMap<NodeId, Vec<NodeId>>,
    /// Every sum reduction's group: the reductions it may share compute sets with, in
    /// schedule order.
    group_of: HashMap<NodeId, usize>,
    groups: Vec<Vec<NodeId>>,
}

impl Batches {
    /// The members of `id`'s group scheduled after it.
    pub fn later(&self, id: NodeId) -> &[NodeId] {
        let Some(&g) = self.group_of.get(&id) else {
            return &[];
        };
        let members = &self.groups[g];
        let at = members
            .iter()
            .position(|&m| m == id)
            .map_or(members.len(), |i| i + 1);
        &members[at..]
    }
}

/// The batches of the sum reductions of `nodes` (the live nodes of a phase, in schedule
/// order). A group holds the sum reductions of one composite op (the same parent name: a
/// batch norm's `mean` and `power`) over the same axes of the same input shape (not of a
/// variable updated in place), on the same IPU and pipeline segment. A member waits for
/// the later ones only while no node before the batch's trigger reads it (so nothing it
/// feeds, and no later member, needs it sooner), and a group is split into as few batches
/// as that allows.
pub(crate) fn batches(lw: &Lowerer, nodes: &[NodeId]) -> Batches {
    let g = lw.graph();
    let position: HashMap<NodeId, usize> = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    // The first position at which a node of the phase reads `r`.
    let first_read = |r: NodeId| {
        g.consumers(r)
            .into_iter()
            .filter_map(|c| position.get(&c).copied())
            .min()
            .unwrap_or(usize::MAX)
    };
    let mut by_key: BTreeMap<_, Vec<NodeId>> = BTreeMap::new();
    for &r in nodes {
        if let Some(k) = key(lw, r) {
            by_key.entry(k).or_default().push(r);
        }
    }
    let groups: Vec<Vec<NodeId>> = by_key.into_values().collect();
    let group_of = groups
        .iter()
        .enumerate()
        .flat_map(|(i, m)| m.iter().map(move |&r| (r, i)))
        .collect();
    // Fewest batches (the points stabbing the intervals `[position, first read)`): take the
    // earliest first read among the members left; every member scheduled before it can
    // wait for the last of them, which lowers them all. (A member is read after its own
    // position, so the member read first is in the batch.)
    let mut by_trigger = HashMap::new();
    for members in &groups {
        let mut left = members.clone();
        while !left.is_empty() {
            let deadline = left
                .iter()
                .map(|&r| first_read(r))
                .min()
                .unwrap_or(usize::MAX);
            let (batch, rest): (Vec<NodeId>, Vec<NodeId>) =
                left.iter().partition(|&&r| position[&r] < deadline);
            if batch.len() > 1 {
                by_trigger.insert(batch[batch.len() - 1], batch);
            }
            left = rest;
        }
    }
    Batches {
        by_trigger,
        group_of,
        groups,
    }
}

/// The node sum reduction `r` reads: its input, or the source of the cast it absorbed.
fn read_node(lw: &Lowerer, r: NodeId) -> NodeId {
    lw.reduce_input(r)
        .map_or(lw.graph().node(r).inputs[0], |a| a.source)
}

/// What reductions share a group by: the parent name, the axes, the input shape, the IPU
/// and the pipeline segment (`None`: not a sum reduction, or one of a variable updated in
/// place, whose readers keep their place before the update).
#[allow(clippy::type_complexity)]
fn key(lw: &Lowerer, r: NodeId) -> Option<(String, Vec<usize>, Vec<usize>, u32, u32)> {
    let g = lw.graph();
    let n = g.node(r);
    let axes = match &n.op {
        Op::ReduceSum { axes, .. } | Op::ReduceMean { axes, .. } => axes.clone(),
        _ => return None,
    };
    let input = read_node(lw, r);
    if lw.is_written_in_place(input) {
        return None;
    }
    let parent = n.name.rsplit_once('/')?.0.to_string();
    let dims = g.node(input).ty.shape.dims().to_vec();
    Some((parent, axes, dims, lw.ipu_of(r), lw.segment_of(r)))
}

/// Lowers the reductions `members` together (a batch, or one reduction) with those of
/// `later` (the rest of the group, after the trigger) whose inputs are lowered already (so
/// they do not depend on the batch): the `i`-th superstep of each is one superstep
/// ([`Lowerer::begin_lanes`]). Members lowered already (with an earlier batch) are skipped.
pub(crate) fn lower_batch(
    lw: &mut Lowerer,
    members: &[NodeId],
    later: &[NodeId],
) -> Result<(), CompileError> {
    let ready = |r: NodeId| {
        let input = read_node(lw, r);
        lw.value_of(input).is_ok() || lw.is_unplaced(input)
    };
    let members: Vec<NodeId> = members
        .iter()
        .copied()
        .chain(later.iter().copied().filter(|&r| ready(r)))
        .filter(|&r| lw.value_of(r).is_err())
        .collect();
    if let [one] = members[..] {
        return lower(lw, one);
    }
    lw.begin_lanes(members.len());
    let lowered = (|| {
        for (i, &r) in members.iter().enumerate() {
            if i > 0 {
                lw.next_lane();
            }
            lw.set_ipu_of(r);
            lower(lw, r)?;
        }
        Ok(())
    })();
    lw.end_lanes();
    lowered
}

/// Lowers a reduction node.
pub(crate) fn lower(lw: &mut Lowerer, id: NodeId) -> Result<(), CompileError> {
    let node = lw.graph().node(id);
    let (kind, axes, mean) = match &node.op {
        Op::ReduceSum { axes, .. } => (Kind::Sum, axes.clone(), false),
        Op::ReduceMean { axes, .. } => (Kind::Sum, axes.clone(), true),
        Op::ReduceMax { axes, .. } => (Kind::Max, axes.clone(), false),
        Op::ArgMax { axis } => (Kind::ArgMax, vec![*axis], false),
        _ => return Err(lw.unsupported(id, "not a reduction")),
    };
    let name = node.name.clone();
    let out_ty = node.ty.clone();
    // A sum of a widening cast (or of its square) reads the cast's F16 input itself
    // (`lower::absorb`), accumulating in the F32 the cast would give.
    let absorbed = lw.reduce_input(id);
    let x = absorbed.map_or(node.inputs[0], |a| a.source);
    let mut kind = match absorbed {
        Some(a) if a.square => Kind::SumSquares,
        _ => kind,
    };
    let in_dtype = lw.graph().node(x).ty.dtype;
    let x_dims = lw.graph().node(x).ty.shape.dims().to_vec();
    // A channel-grouped feature map (storage `[C/g, N, S…, g]`) is reduced in its storage
    // order when that keeps the order of the dimensions that remain: the channels are
    // reduced, or the batch and every spatial axis are (a normalisation's statistics), or
    // the batch is one image and every spatial axis is reduced (a global pool). A global
    // pool of several images is reduced in storage order too, its `[C/g, N, g]` result then
    // permuted to `[N, C]` (an exchange of the pooled values, not of the map); any other
    // reduction reads the map's row-major copy.
    let (stored, group) = permute::grouped(lw, x)?;
    let spatial_reduced = (2..x_dims.len()).all(|d| axes.contains(&d));
    let reorder = group > 1
        && spatial_reduced
        && !axes.contains(&0)
        && !axes.contains(&1)
        && x_dims.first().is_some_and(|&n| n > 1)
        && kind != Kind::ArgMax;
    let keeps_order = axes.contains(&1)
        || (spatial_reduced && (axes.contains(&0) || x_dims.first() == Some(&1)))
        || reorder;
    let (input, group) = if group > 1 && keeps_order && kind != Kind::ArgMax {
        (stored, group)
    } else {
        (permute::materialized(lw, x)?, 1)
    };
    // (size, reduced) of the dimensions larger than one, in storage order.
    let storage: Vec<(usize, bool)> = if group > 1 {
        let mut v = vec![(x_dims[1] / group as usize, axes.contains(&1))];
        v.push((x_dims[0], axes.contains(&0)));
        v.extend((2..x_dims.len()).map(|d| (x_dims[d], axes.contains(&d))));
        v.push((group as usize, axes.contains(&1)));
        v
    } else {
        x_dims
            .iter()
            .enumerate()
            .map(|(i, &d)| (d, axes.contains(&i)))
            .collect()
    };
    let mut dims: Vec<(u64, bool)> = storage
        .into_iter()
        .filter(|&(d, _)| d != 1)
        .map(|(d, r)| (d as u64, r))
        .collect();
    let r_total: u64 = dims.iter().filter(|d| d.1).map(|d| d.0).product();
    // Nothing to reduce: the value is the input, except ArgMax of a size-1 axis (0). An
    // empty reduction gives the identity: 0 for a sum, NaN for a mean (0/0), -inf for a max.
    let fill = if r_total == 0 {
        Some(match (kind, mean) {
            (Kind::Sum | Kind::SumSquares, false) | (Kind::ArgMax, _) => 0.0,
            (Kind::Sum | Kind::SumSquares, true) => f64::NAN,
            (Kind::Max, _) => f64::NEG_INFINITY,
        })
    } else if dims.iter().all(|d| !d.1) {
        (kind == Kind::ArgMax || in_dtype != out_ty.dtype).then_some(0.0)
    } else {
        None
    };
    if let Some(value) = fill {
        let m = lw.fresh_mapping(out_ty.num_elements() as u64, out_ty.dtype);
        let kind = TensorKind::Activation;
        let t = lw.new_tensor(name.clone(), Some(id), kind, out_ty.dtype, out_ty.shape, m);
        let tiles = fill_work(lw, &[(t, value)]);
        lw.superstep(&name, Some(id), Vec::new(), tiles);
        lw.set_value(id, t);
        return Ok(());
    }
    if dims.iter().all(|d| !d.1) {
        let input = permute::materialized(lw, x)?;
        lw.set_value(id, input);
        return Ok(());
    }
    let acc = match kind {
        _ if absorbed.is_some() => out_ty.dtype,
        Kind::Sum => lw.options().partials_type.accumulator_for(in_dtype),
        _ => in_dtype,
    };
    let mut current = input;
    let mut pass = 0;
    // The innermost run of reduced dimensions first; when the only other reduced dimensions
    // lead (nothing kept ahead of them), as a normalisation's statistics over the batch and
    // the spatial axes, in the same pass, as PopLibs reduces them in one.
    while let Some(last) = dims.iter().rposition(|d| d.1) {
        let mut first = last;
        while first > 0 && dims[first - 1].1 {
            first -= 1;
        }
        let mut kept_from = first;
        while kept_from > 0 && !dims[kept_from - 1].1 {
            kept_from -= 1;
        }
        // (`first` starts a maximal reduced run, so a kept dimension precedes it.)
        let leading =
            kind != Kind::ArgMax && kept_from > 0 && dims[..kept_from].iter().all(|d| d.1);
        let outer: u64 = if leading {
            dims[..kept_from].iter().map(|d| d.0).product()
        } else {
            1
        };
        let p: u64 = dims[..first].iter().map(|d| d.0).product();
        let r: u64 = dims[first..=last].iter().map(|d| d.0).product();
        let q: u64 = dims[last + 1..].iter().map(|d| d.0).product();
        dims.drain(first..=last);
        if leading {
            dims.drain(..kept_from);
        }
        let is_final = !dims.iter().any(|d| d.1);
        let (out_dtype, shape, scale, tname) = if is_final {
            let scale = if mean { 1.0 / r_total as f64 } else { 1.0 };
            if reorder {
                let flat = Shape::new([out_ty.num_elements()]);
                (out_ty.dtype, flat, scale, format!("{name}/grouped"))
            } else {
                (out_ty.dtype, out_ty.shape.clone(), scale, name.clone())
            }
        } else {
            pass += 1;
            (
                acc,
                Shape::new([(p / outer * q) as usize]),
                1.0,
                format!("{name}/pass{pass}"),
            )
        };
        let spec = Spec {
            node: id,
            name: tname,
            p,
            outer,
            r,
            q,
            kind,
            input: lw.tensor(current).dtype,
            acc,
            output: out_dtype,
            scale,
            shape,
        };
        current = if kind == Kind::ArgMax && q == 1 {
            argmax_rows(lw, &spec, current)
        } else {
            reduce(lw, &spec, current)
        };
        // Only the first pass squares.
        if kind == Kind::SumSquares {
            kind = Kind::Sum;
        }
    }
    if reorder {
        let g = group as usize;
        let grouped = Shape::new([x_dims[1] / g, x_dims[0], g]);
        current = permute::permute(lw, id, &name, current, &grouped, &[1, 0, 2]);
    }
    lw.set_value(id, current);
    Ok(())
}

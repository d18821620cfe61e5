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

/// Lowers sum reduction `id` together with its partners among `pending` (the live nodes of
/// the phase after it, in schedule order), as PopLibs' `reduceMany` reduces a batch norm's
/// statistics (and their gradients' sums) in the same compute sets: the `i`-th superstep of
/// each is one superstep ([`Lowerer::begin_lanes`]). The partners are the other sum
/// reductions of the same composite op (the same parent name: a batch norm's `mean` and
/// `power`), over the same axes of the same input shape, on the same IPU and pipeline
/// segment, whose inputs are lowered already (so they do not depend on `id`). Returns the
/// partners lowered.
pub(crate) fn lower_with_partners(
    lw: &mut Lowerer,
    id: NodeId,
    pending: &[NodeId],
) -> Result<Vec<NodeId>, CompileError> {
    let partners = partners(lw, id, pending);
    if partners.is_empty() {
        lower(lw, id)?;
        return Ok(partners);
    }
    lw.begin_lanes();
    let lowered = (|| {
        lower(lw, id)?;
        for &p in &partners {
            lw.next_lane();
            lw.set_ipu_of(p);
            lower(lw, p)?;
        }
        Ok(())
    })();
    lw.end_lanes();
    lw.set_ipu_of(id);
    lowered.map(|()| partners)
}

/// The partners of sum reduction `id` among `pending` (see [`lower_with_partners`]).
fn partners(lw: &Lowerer, id: NodeId, pending: &[NodeId]) -> Vec<NodeId> {
    let g = lw.graph();
    let key = |r: NodeId| {
        let n = g.node(r);
        let axes = match &n.op {
            Op::ReduceSum { axes, .. } | Op::ReduceMean { axes, .. } => axes.clone(),
            _ => return None,
        };
        let input = lw.reduce_input(r).map_or(n.inputs[0], |a| a.source);
        let parent = n.name.rsplit_once('/')?.0.to_string();
        let dims = g.node(input).ty.shape.dims().to_vec();
        Some((parent, axes, dims, lw.ipu_of(r), lw.segment_of(r)))
    };
    let Some(mine) = key(id) else {
        return Vec::new();
    };
    let ready = |r: NodeId| {
        let input = lw.reduce_input(r).map_or(g.node(r).inputs[0], |a| a.source);
        lw.value_of(input).is_ok() || lw.is_unplaced(input)
    };
    pending
        .iter()
        .copied()
        .filter(|&r| r != id && key(r).as_ref() == Some(&mine) && ready(r))
        .collect()
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
    // A channel-grouped feature map is reduced in its storage order when that keeps the
    // order of the dimensions that remain: the channels are reduced, or every spatial axis
    // is (a normalisation's statistics); otherwise its row-major copy is.
    let (stored, group) = permute::grouped(lw, x)?;
    let keeps_order = axes.contains(&1) || (2..x_dims.len()).all(|d| axes.contains(&d));
    let (input, group) = if group > 1 && keeps_order && kind != Kind::ArgMax {
        (stored, group)
    } else {
        (permute::materialized(lw, x)?, 1)
    };
    // (size, reduced) of the dimensions larger than one, in storage order.
    let storage: Vec<(usize, bool)> = if group > 1 {
        let mut v = vec![(x_dims[0], axes.contains(&0))];
        v.push((x_dims[1] / group as usize, axes.contains(&1)));
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
            (out_ty.dtype, out_ty.shape.clone(), scale, name.clone())
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
    lw.set_value(id, current);
    Ok(())
}

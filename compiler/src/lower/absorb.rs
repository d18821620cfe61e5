//! What a sum reduction reads through: a widening cast of its input, and the square of one.
//!
//! PopLibs reduces an FP16 tensor into an FP32 result directly (`popops::reduce` with an
//! output type, the partials accumulated in FP32) and squares the elements as it sums them
//! (`Operation::SQUARE_ADD`): a batch norm's statistics are one such pass over the
//! activations each (lib/poplin/Norms.cpp, `normStatisticsImpl`). The IR spells them as
//! `ReduceSum`/`ReduceMean` of `Cast(x, F32)` or of an F32 `Mul(c, c)` (`c` such a cast, or
//! any F32 value); here the reduction absorbs those nodes, so that no full-size FP32 copy or
//! square of the activations is stored.
//!
//! The values are unchanged: a cast from F16 to F32 is exact, the square of an F16 value
//! is exact in F32 (22 significant bits at most, within F32's range), the square of an F32
//! value is the RNE product `Mul` computes, and the reduction sums in the same F32 order as
//! it would the stored tensor (`Reduce`'s `SquareAdd`).

use super::core::{Lowerer, ReduceInput};
use ipusim_ir::{DType, NodeId, Op};
use std::collections::HashMap;

/// The absorbed inputs of the live sum reductions of `order`, by reduction.
pub(crate) fn plan(lw: &Lowerer, order: &[NodeId], live: &[bool]) -> HashMap<NodeId, ReduceInput> {
    let g = lw.graph();
    let is_live = |id: NodeId| live.get(id.as_usize()).copied().unwrap_or(false);
    // Each live node's live consumers, counting every use.
    let mut uses: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
    for &id in order.iter().filter(|&&id| is_live(id)) {
        for &i in &g.node(id).inputs {
            uses.entry(i).or_default().push(id);
        }
    }
    let only_user = |i: NodeId, user: NodeId, n: usize| {
        uses.get(&i)
            .is_some_and(|u| u.len() == n && u.iter().all(|&c| c == user))
    };
    let same_place = |a: NodeId, b: NodeId| {
        g.node(a).phase == g.node(b).phase
            && lw.ipu_of(a) == lw.ipu_of(b)
            && lw.segment_of(a) == lw.segment_of(b)
    };
    // A widening cast of an F16 node, read only by `user` (`n` times).
    let widening = |c: NodeId, user: NodeId, n: usize| {
        let cn = g.node(c);
        (matches!(cn.op, Op::Cast { dtype: DType::F32 })
            && g.node(cn.inputs[0]).ty.dtype == DType::F16
            && only_user(c, user, n)
            && same_place(c, user))
        .then(|| cn.inputs[0])
    };
    let mut out = HashMap::new();
    for &r in order.iter().filter(|&&id| is_live(id)) {
        let rn = g.node(r);
        let axes = match &rn.op {
            Op::ReduceSum { axes, .. } | Op::ReduceMean { axes, .. } => axes,
            _ => continue,
        };
        let x = rn.inputs[0];
        let dims = g.node(x).ty.shape.dims();
        // Something is summed (an empty or size-1 reduction is a fill or a copy).
        if axes
            .iter()
            .map(|&a| dims.get(a).copied().unwrap_or(1))
            .product::<usize>()
            < 2
        {
            continue;
        }
        let xn = g.node(x);
        let found = match xn.op {
            Op::Cast { .. } => widening(x, r, 1).map(|source| ReduceInput {
                source,
                square: false,
                members: [Some(x), None],
            }),
            // An F32 square (of a widening cast, or of any F32 value).
            Op::Mul
                if xn.inputs[0] == xn.inputs[1]
                    && xn.ty.dtype == DType::F32
                    && only_user(x, r, 1)
                    && same_place(x, r) =>
            {
                let c = xn.inputs[0];
                Some(match widening(c, x, 2) {
                    Some(source) => ReduceInput {
                        source,
                        square: true,
                        members: [Some(c), Some(x)],
                    },
                    None => ReduceInput {
                        source: c,
                        square: true,
                        members: [Some(x), None],
                    },
                })
            }
            _ => None,
        };
        if let Some(f) = found {
            out.insert(r, f);
        }
    }
    out
}

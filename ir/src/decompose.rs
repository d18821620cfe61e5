//! The decomposition pass: composite ops rewritten into primitive ones, as Poplar's libraries
//! build them from smaller pieces, before autodiff, the precision policy and lowering. A
//! composite op then needs an inference rule and a rule here, and nothing else: no codelet,
//! no autodiff rule (its primitives carry the gradient), no interpreter evaluation, no
//! lowering.
//!
//! Each rule replaces a node by primitive nodes in the same phase; the last of them takes the
//! composite node's name (so outfeeds, split points and reports still name it), the others
//! are named `<node>/<part>`. A graph without composite ops is returned as it is, node for
//! node.
//!
//! | composite | primitives |
//! |---|---|
//! | `Clip { min, max }` | `Min(Max(x, Constant(min)), Constant(max))`, scalar constants of `x`'s type |

use crate::error::IrError;
use crate::graph::{Graph, NodeId, Phase};
use crate::op::{Literal, Op};
use crate::rewrite::Rewrite;

/// True for an op that [`decompose`] rewrites.
pub fn is_composite(op: &Op) -> bool {
    matches!(op, Op::Clip { .. })
}

/// `graph` with every composite op rewritten into primitive ops.
pub fn decompose(graph: &Graph) -> Result<Graph, IrError> {
    if !graph.nodes().any(|(_, n)| is_composite(&n.op)) {
        return Ok(graph.clone());
    }
    let mut rw = Rewrite::new(graph);
    for old in rw.order()? {
        let n = graph.node(old);
        let inputs = n
            .inputs
            .iter()
            .map(|&i| rw.use_of(i))
            .collect::<Result<Vec<_>, _>>()?;
        let id = match &n.op {
            Op::Clip { min, max } => clip(&mut rw, n.phase, &n.name, inputs[0], *min, *max)?,
            op => rw
                .dst
                .add_node_in(n.phase, n.name.clone(), op.clone(), &inputs)?,
        };
        rw.set(old, id);
    }
    Ok(rw.dst)
}

/// A scalar constant of `x`'s type.
fn scalar(
    rw: &mut Rewrite<'_>,
    phase: Phase,
    name: &str,
    x: NodeId,
    value: f64,
) -> Result<NodeId, IrError> {
    let dtype = rw.dst.node(x).ty.dtype;
    rw.add_new(
        phase,
        name,
        Op::Constant {
            dtype,
            shape: crate::dtype::Shape::scalar(),
            value: Literal::Splat(value),
        },
        &[],
    )
}

/// `Clip`: `Min(Max(x, min), max)`. `Max` and `Min` are IEEE 754-2019 `maximum` and
/// `minimum`, so a NaN input stays NaN (and raises INV), as ONNX's `Clip` keeps it.
fn clip(
    rw: &mut Rewrite<'_>,
    phase: Phase,
    name: &str,
    x: NodeId,
    min: f64,
    max: f64,
) -> Result<NodeId, IrError> {
    let lo = scalar(rw, phase, &format!("{name}/min"), x, min)?;
    let hi = scalar(rw, phase, &format!("{name}/max"), x, max)?;
    let floor = rw.add_new(phase, &format!("{name}/at_least_min"), Op::Max, &[x, lo])?;
    rw.dst
        .add_node_in(phase, name.to_string(), Op::Min, &[floor, hi])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, GraphBuilder, Init};

    #[test]
    fn clip_becomes_max_then_min_under_its_own_name() {
        let mut b = GraphBuilder::new();
        let x = b.variable("x", DType::F16, [4], Init::Zeros).unwrap();
        let c = b
            .op("relu6", Op::Clip { min: 0.0, max: 6.0 }, &[x])
            .unwrap();
        b.outfeed("y", c).unwrap();
        let g = decompose(&b.finish()).unwrap();
        assert!(!g.nodes().any(|(_, n)| is_composite(&n.op)));
        let relu6 = g.node(g.find("relu6").unwrap());
        assert!(matches!(relu6.op, Op::Min));
        assert_eq!(relu6.ty.dtype, DType::F16);
        let floor = g.node(relu6.inputs[0]);
        assert!(matches!(floor.op, Op::Max));
        let hi = g.node(relu6.inputs[1]);
        assert!(matches!(
            hi.op,
            Op::Constant { dtype: DType::F16, value: Literal::Splat(v), .. } if v == 6.0
        ));
    }

    #[test]
    fn graphs_without_composites_come_back_node_for_node() {
        let mut b = GraphBuilder::new();
        let x = b.variable("x", DType::F32, [2], Init::Zeros).unwrap();
        let r = b.op("r", Op::Relu, &[x]).unwrap();
        b.outfeed("y", r).unwrap();
        let g = b.finish();
        let d = decompose(&g).unwrap();
        assert_eq!(format!("{g:?}"), format!("{d:?}"));
    }

    #[test]
    fn a_clip_with_min_above_max_is_refused_by_inference() {
        let mut b = GraphBuilder::new();
        let x = b.variable("x", DType::F32, [2], Init::Zeros).unwrap();
        let e = b
            .op("c", Op::Clip { min: 1.0, max: 0.0 }, &[x])
            .unwrap_err();
        assert!(e.to_string().contains("min <= max"), "{e}");
    }
}

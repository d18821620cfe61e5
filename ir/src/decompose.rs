//! The decomposition pass: composite ops rewritten into primitive ones, as Poplar's libraries
//! build them from smaller pieces, before autodiff, the precision policy and lowering. A
//! composite op then needs an inference rule and a rule here, and nothing else: no codelet,
//! no autodiff rule (its primitives carry the gradient, unless it has a backward pass of its
//! own, below), no interpreter evaluation, no lowering.
//!
//! Each rule replaces a node by primitive nodes in the same phase; the last of them takes the
//! composite node's name (so outfeeds, split points and reports still name it), the others
//! are named `<node>/<part>`. A graph without composite ops is returned as it is, node for
//! node.
//!
//! | composite | primitives |
//! |---|---|
//! | `Clip { min, max }` | `Min(Max(x, Constant(min)), Constant(max))`, scalar constants of `x`'s type |
//! | `AvgPool2d` | a depthwise `Conv2d` with a window of ones, times `1/count` ([`crate::conv`]) |
//! | `GlobalAvgPool` | `ReduceMean` over axes 2 and 3 |
//! | `Flatten { axis }` | `Reshape` |
//! | `BatchNorm`, `GroupNorm` | FP32 statistics, whitening and the affine map; batch norm's running statistics updated by `Assign`s in a training step ([`crate::norm`]) |
//!
//! A composite's primitives carry its gradient, except where Poplar's libraries give it a
//! backward pass of its own: a training batch norm's ([`crate::norm::grad`]), returned by
//! [`decompose_with_rules`] for autodiff to use in place of its primitives' rules.
//!
//! The pass runs after the precision policy, so the FP32 of the statistics is a real FP32,
//! not the policy's "float". Batch norm needs to know whether the graph is a training step
//! ([`Statistics::Batch`]) or an inference run ([`Statistics::Running`]).

use crate::autodiff::{Composite, GradientRules};
use crate::dtype::Shape;
use crate::error::IrError;
use crate::graph::{Graph, NodeId};
use crate::op::Op;
use crate::rewrite::{Emitter, Rewrite};

pub use crate::norm::Statistics;

/// True for an op that [`decompose`] rewrites.
pub fn is_composite(op: &Op) -> bool {
    matches!(
        op,
        Op::Clip { .. }
            | Op::AvgPool2d { .. }
            | Op::GlobalAvgPool
            | Op::Flatten { .. }
            | Op::BatchNorm { .. }
            | Op::GroupNorm { .. }
    )
}

/// `graph` with every composite op rewritten into primitive ops; batch norms use
/// `statistics`.
pub fn decompose(graph: &Graph, statistics: Statistics) -> Result<Graph, IrError> {
    Ok(decompose_with_rules(graph, statistics)?.0)
}

/// [`decompose`], with the gradient rules of the composites that have a backward pass of
/// their own (a training batch norm's, [`crate::norm::grad`]), for
/// [`crate::autodiff::gradients_with`].
pub fn decompose_with_rules(
    graph: &Graph,
    statistics: Statistics,
) -> Result<(Graph, GradientRules), IrError> {
    let mut rules = GradientRules::default();
    if !graph.nodes().any(|(_, n)| is_composite(&n.op)) {
        return Ok((graph.clone(), rules));
    }
    let mut rw = Rewrite::new(graph);
    for old in rw.order()? {
        let n = graph.node(old);
        let inputs = n
            .inputs
            .iter()
            .map(|&i| rw.use_of(i))
            .collect::<Result<Vec<_>, _>>()?;
        if !is_composite(&n.op) {
            let id = rw
                .dst
                .add_node_in(n.phase, n.name.clone(), n.op.clone(), &inputs)?;
            rw.set(old, id);
            continue;
        }
        let mut e = Emitter {
            rw: &mut rw,
            phase: n.phase,
            name: n.name.clone(),
        };
        let id = match &n.op {
            Op::Clip { min, max } => clip(&mut e, inputs[0], *min, *max)?,
            op @ Op::AvgPool2d { .. } => crate::conv::decompose::avg_pool(&mut e, inputs[0], op)?,
            Op::GlobalAvgPool => crate::conv::decompose::global_avg_pool(&mut e, inputs[0])?,
            Op::Flatten { axis } => crate::conv::decompose::flatten(&mut e, inputs[0], *axis)?,
            Op::BatchNorm { epsilon, momentum } => {
                let (out, parts) = crate::norm::decompose::batch_norm(
                    &mut e, &inputs, *epsilon, *momentum, statistics,
                )?;
                if let Some(parts) = parts {
                    rules.insert(out, Composite::Norm(parts));
                }
                out
            }
            Op::GroupNorm { groups, epsilon } => {
                let stable = matches!(statistics, Statistics::Batch { stable: true });
                let (out, parts) =
                    crate::norm::decompose::group_norm(&mut e, &inputs, *groups, *epsilon, stable)?;
                rules.insert(out, Composite::Norm(parts));
                out
            }
            op => e.last(op.clone(), &inputs)?,
        };
        rw.set(old, id);
    }
    Ok((rw.dst, rules))
}

/// `Clip`: `Min(Max(x, min), max)`. `Max` and `Min` are IEEE 754-2019 `maximum` and
/// `minimum`, so a NaN input stays NaN (and raises INV), as ONNX's `Clip` keeps it.
fn clip(e: &mut Emitter<'_, '_>, x: NodeId, min: f64, max: f64) -> Result<NodeId, IrError> {
    let dtype = e.ty(x).dtype;
    let lo = e.splat("min", dtype, Shape::scalar(), min)?;
    let hi = e.splat("max", dtype, Shape::scalar(), max)?;
    let floor = e.node("at_least_min", Op::Max, &[x, lo])?;
    e.last(Op::Min, &[floor, hi])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::Literal;
    use crate::{DType, GraphBuilder, Init};

    #[test]
    fn clip_becomes_max_then_min_under_its_own_name() {
        let mut b = GraphBuilder::new();
        let x = b.variable("x", DType::F16, [4], Init::Zeros).unwrap();
        let c = b
            .op("relu6", Op::Clip { min: 0.0, max: 6.0 }, &[x])
            .unwrap();
        b.outfeed("y", c).unwrap();
        let g = decompose(&b.finish(), Statistics::Batch { stable: false }).unwrap();
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
    fn group_norm_statistics_sweep_once_unless_stable_and_never_reshape_the_activations() {
        let build = |stable| {
            let mut b = GraphBuilder::new();
            let x = b
                .variable("x", DType::F16, [2, 8, 3, 3], Init::Zeros)
                .unwrap();
            let s = b.variable("s", DType::F16, [8], Init::Zeros).unwrap();
            let t = b.variable("t", DType::F16, [8], Init::Zeros).unwrap();
            let op = Op::GroupNorm {
                groups: 4,
                epsilon: 1e-5,
            };
            let y = b.op("gn", op, &[x, s, t]).unwrap();
            b.outfeed("y", y).unwrap();
            decompose(&b.finish(), Statistics::Batch { stable }).unwrap()
        };
        for stable in [false, true] {
            let g = build(stable);
            let has = |part: &str| g.find(&format!("gn/{part}")).is_some();
            // One sweep: `E[x]` and `E[x²]` of the activations; two passes: the FP32
            // deviations from the mean.
            assert_eq!(has("power"), !stable, "stable {stable}");
            assert_eq!(has("deviation"), stable, "stable {stable}");
            // Only the [N, C, 1, 1] statistics are reshaped (and broadcast back).
            for (_, n) in g.nodes() {
                if matches!(n.op, Op::Reshape { .. }) {
                    let input = g.node(n.inputs[0]);
                    assert!(
                        input.ty.num_elements() <= 2 * 8,
                        "{} reshapes {:?}",
                        n.name,
                        input.ty.shape
                    );
                }
            }
            // The statistics are FP32.
            let mean = g.node(g.find("gn/mean").unwrap());
            assert_eq!(mean.ty.dtype, DType::F32);
            assert_eq!(mean.ty.shape.dims(), [2, 4, 1]);
        }
    }

    #[test]
    fn graphs_without_composites_come_back_node_for_node() {
        let mut b = GraphBuilder::new();
        let x = b.variable("x", DType::F32, [2], Init::Zeros).unwrap();
        let r = b.op("r", Op::Relu, &[x]).unwrap();
        b.outfeed("y", r).unwrap();
        let g = b.finish();
        let d = decompose(&g, Statistics::Batch { stable: false }).unwrap();
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

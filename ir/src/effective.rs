//! The dtypes a program's nodes take under its precision policy, as a read-only view.
//!
//! The rule (documented in `docs/program-format.md`, "The precision rule"): a float tensor
//! written `F32` means "float, controlled by the precision policy". With a training spec of
//! policy `C.W` (compute type `C`, weight type `W`):
//! - `Input`, `Constant`, and `Cast`/`OneHot` to `F32` produce `C`;
//! - a `Variable` written `F32` is stored in `W` and read by its consumers in `C` (the
//!   training transform inserts the casts, as a TensorFlow custom getter does in seed 000);
//! - `SparseSoftmaxCrossEntropy` computes in FP32 (its logits are cast up when needed);
//! - every other node takes the dtype inference gives it from its inputs' policy dtypes;
//! - anything written `F16` (or a non-float type) is never changed.
//!
//! Without a training spec the program runs exactly as written. The training transform does
//! the rewriting; this view lets the lint and the `check` summary reason about the dtypes the
//! compiled program will have without running it.

use crate::dtype::{DType, TensorType};
use crate::graph::{Graph, NodeId};
use crate::infer::infer;
use crate::op::Op;
use crate::program::Program;
use std::collections::HashMap;

/// The dtype of every node's output under the program's precision policy; for a `Variable`,
/// the dtype it is stored in.
pub fn effective_dtypes(program: &Program) -> HashMap<NodeId, DType> {
    let graph = &program.graph;
    let Some(spec) = &program.training else {
        return graph.nodes().map(|(id, n)| (id, n.ty.dtype)).collect();
    };
    let (compute, weights) = (spec.precision.compute(), spec.precision.weights());
    let policy = |d: DType| if d == DType::F32 { compute } else { d };
    let order: Vec<NodeId> = graph.topo_order().unwrap_or_else(|_| graph.ids().collect());
    let mut out: HashMap<NodeId, DType> = HashMap::with_capacity(graph.len());
    for id in order {
        let node = graph.node(id);
        let written = node.ty.dtype;
        let dtype = match &node.op {
            Op::Input { .. } | Op::Constant { .. } | Op::Cast { .. } | Op::OneHot { .. } => {
                policy(written)
            }
            Op::Variable { .. } if written == DType::F32 => weights,
            Op::Variable { .. } => written,
            Op::SparseSoftmaxCrossEntropy { .. } => DType::F32,
            op => {
                let types: Vec<TensorType> = node
                    .inputs
                    .iter()
                    .map(|&i| TensorType {
                        dtype: read_dtype(graph, &out, i, compute),
                        shape: graph.node(i).ty.shape.clone(),
                    })
                    .collect();
                let refs: Vec<&TensorType> = types.iter().collect();
                infer(op, &refs).map_or_else(|_| policy(written), |t| t.dtype)
            }
        };
        out.insert(id, dtype);
    }
    out
}

/// The dtype consumers read node `id` in: a variable written `F32` is cast to the compute
/// type for compute.
fn read_dtype(graph: &Graph, eff: &HashMap<NodeId, DType>, id: NodeId, compute: DType) -> DType {
    let node = graph.node(id);
    match node.op {
        Op::Variable { .. } if node.ty.dtype == DType::F32 => compute,
        _ => eff.get(&id).copied().unwrap_or(node.ty.dtype),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{mlp, MlpSpec};
    use crate::program::{Optimizer, Precision, TrainingSpec};

    fn trained(precision: Precision) -> Program {
        let mut p = mlp(&MlpSpec {
            batch: 4,
            widths: vec![8, 4, 3],
            activation: Op::Relu,
            input_dtype: DType::U8,
            input_scale: 0.5,
            seed: 0,
        })
        .unwrap();
        p.training = Some(TrainingSpec {
            loss: "loss".into(),
            optimizer: Optimizer::Sgd { learning_rate: 0.1 },
            loss_scaling: 1.0,
            precision,
            gradient_accumulation: 1,
            accumulation_dtype: None,
        });
        p
    }

    fn dtype_of(p: &Program, eff: &HashMap<NodeId, DType>, name: &str) -> DType {
        eff[&p.graph.find(name).unwrap()]
    }

    #[test]
    fn policies_map_float_tensors() {
        for (precision, compute, weights) in [
            (Precision::P16_16, DType::F16, DType::F16),
            (Precision::P16_32, DType::F16, DType::F32),
            (Precision::P32_32, DType::F32, DType::F32),
        ] {
            let p = trained(precision);
            let eff = effective_dtypes(&p);
            assert_eq!(dtype_of(&p, &eff, "features"), DType::U8);
            assert_eq!(dtype_of(&p, &eff, "cast"), compute);
            assert_eq!(dtype_of(&p, &eff, "dense1/weights"), weights);
            assert_eq!(dtype_of(&p, &eff, "dense1/matmul"), compute);
            assert_eq!(dtype_of(&p, &eff, "dense2/add"), compute);
            assert_eq!(dtype_of(&p, &eff, "loss"), DType::F32, "{precision}");
            assert_eq!(dtype_of(&p, &eff, "argmax"), DType::I32);
        }
        let mut p = trained(Precision::P16_16);
        p.training = None;
        let eff = effective_dtypes(&p);
        assert_eq!(
            dtype_of(&p, &eff, "dense1/matmul"),
            DType::F32,
            "as written"
        );
    }
}

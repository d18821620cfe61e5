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
//! the rewriting ([`crate::precision::apply`], which owns the rule); this view applies the same
//! pass and reads the dtypes back by node name, so the lint and the `check` summary reason
//! about exactly the dtypes the compiled program will have, without running it.

use crate::dtype::DType;
use crate::graph::NodeId;
use crate::precision;
use crate::program::Program;
use std::collections::HashMap;

/// The dtype of every node's output under the program's precision policy; for a `Variable`,
/// the dtype it is stored in. A graph the policy cannot be applied to (only an invalid one)
/// keeps its written dtypes.
pub fn effective_dtypes(program: &Program) -> HashMap<NodeId, DType> {
    let graph = &program.graph;
    let mapped = program
        .training
        .as_ref()
        .and_then(|spec| precision::apply(graph, spec.precision).ok());
    graph
        .nodes()
        .map(|(id, n)| {
            let dtype = mapped
                .as_ref()
                .and_then(|m| m.find(&n.name).map(|i| m.node(i).ty.dtype))
                .unwrap_or(n.ty.dtype);
            (id, dtype)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{mlp, MlpSpec};
    use crate::program::{Optimizer, Precision, TrainingSpec};

    fn trained(precision: Precision) -> Program {
        let mut p = mlp(&MlpSpec {
            input_dtype: DType::U8,
            input_scale: 0.5,
            ..MlpSpec::new(4, &[8, 4, 3])
        })
        .unwrap();
        p.training = Some(TrainingSpec {
            loss: "loss".into(),
            optimizer: Optimizer::Sgd { learning_rate: 0.1 },
            loss_scaling: 1.0,
            precision,
            gradient_accumulation: 1,
            accumulation_dtype: None,
            stable_norm: false,
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

//! Generators for common models, as forward-graph programs ready for the training transform.
//!
//! [`mlp`] builds a multi-layer perceptron classifier: `Input` streams for features and
//! labels, dense layers (`MatMul` + bias `Add` + activation), a softmax cross-entropy loss,
//! and outfeeds of the loss and the batch accuracy. Float tensors are written in `F32`; the
//! precision policy of the training transform maps them to the compute and weight types.

use crate::builder::GraphBuilder;
use crate::dtype::DType;
use crate::error::IrError;
use crate::op::{Init, LossReduction, Op};
use crate::program::Program;

/// The shape of an MLP classifier.
#[derive(Clone, Debug, PartialEq)]
pub struct MlpSpec {
    /// Samples per micro-batch.
    pub batch: usize,
    /// Layer widths: input features first, number of classes last (at least two entries).
    pub widths: Vec<usize>,
    /// Hidden-layer activation (`Op::Relu`, `Op::Tanh`, `Op::Sigmoid`, `Op::Gelu`).
    pub activation: Op,
    /// Dtype of the feature stream (`U8` for 8-bit image I/O, normalised on the device).
    pub input_dtype: DType,
    /// Multiplier applied to the features after the cast to float (e.g. 1/16 for 0..16 pixels).
    pub input_scale: f64,
    /// Seed of the weight initialisers.
    pub seed: u64,
}

impl MlpSpec {
    /// A ReLU MLP of `widths` on `batch` samples of f32 features, unscaled, seed 0 (change
    /// any field with struct update syntax).
    pub fn new(batch: usize, widths: &[usize]) -> MlpSpec {
        MlpSpec {
            batch,
            widths: widths.to_vec(),
            activation: Op::Relu,
            input_dtype: DType::F32,
            input_scale: 1.0,
            seed: 0,
        }
    }
}

/// Names of the streams an [`mlp`] program uses.
pub mod streams {
    /// Feature infeed.
    pub const FEATURES: &str = "features";
    /// Label infeed (i32 class indices).
    pub const LABELS: &str = "labels";
    /// Loss outfeed.
    pub const LOSS: &str = "loss";
    /// Accuracy outfeed (fraction of the batch classified correctly).
    pub const ACCURACY: &str = "accuracy";
}

/// Builds an MLP classifier program (no training spec; add one to train it).
pub fn mlp(spec: &MlpSpec) -> Result<Program, IrError> {
    if spec.widths.len() < 2 || spec.widths.contains(&0) || spec.batch == 0 {
        return Err(IrError::Program(format!(
            "an MLP needs a positive batch and at least two positive widths, got batch {} and widths {:?}",
            spec.batch, spec.widths
        )));
    }
    let mut b = GraphBuilder::new();
    let n = spec.batch;
    let x = b.input(streams::FEATURES, spec.input_dtype, [n, spec.widths[0]])?;
    let labels = b.input(streams::LABELS, DType::I32, [n])?;
    let mut h = if spec.input_dtype == DType::F32 {
        x
    } else {
        b.cast(x, DType::F32)?
    };
    if spec.input_scale != 1.0 {
        let s = b.scalar("input_scale", DType::F32, spec.input_scale)?;
        h = b.mul(h, s)?;
    }
    let layers = spec.widths.len() - 1;
    for l in 0..layers {
        let (fan_in, fan_out) = (spec.widths[l], spec.widths[l + 1]);
        b.push_scope(format!("dense{}", l + 1));
        let w = b.variable(
            "weights",
            DType::F32,
            [fan_in, fan_out],
            Init::GlorotUniform {
                seed: spec.seed.wrapping_add(l as u64),
            },
        )?;
        let bias = b.variable("bias", DType::F32, [fan_out], Init::Zeros)?;
        let mm = b.matmul(h, w)?;
        h = b.add(mm, bias)?;
        if l + 1 < layers {
            h = b.unary(spec.activation.clone(), h)?;
        }
        b.pop_scope();
    }
    let logits = h;
    let loss = b.sparse_softmax_cross_entropy(logits, labels, LossReduction::Mean)?;
    b.outfeed(streams::LOSS, loss)?;
    let pred = b.argmax(logits, 1)?;
    let correct = b.equal(pred, labels)?;
    let correct_f = b.cast(correct, DType::F32)?;
    let acc = b.reduce_mean(correct_f, &[0], false)?;
    b.outfeed(streams::ACCURACY, acc)?;
    let mut p = Program::new("mlp", b.finish());
    p.description = format!("MLP classifier {:?}, batch {}", spec.widths, spec.batch);
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlp_has_expected_structure() {
        let p = mlp(&MlpSpec {
            input_dtype: DType::U8,
            input_scale: 1.0 / 16.0,
            seed: 7,
            ..MlpSpec::new(16, &[64, 32, 10])
        })
        .unwrap();
        let g = &p.graph;
        let loss = g.find("loss").unwrap();
        assert_eq!(g.node(loss).ty.shape.rank(), 0);
        assert!(g.find("dense2/weights").is_some());
        assert_eq!(
            g.nodes()
                .filter(|(_, n)| matches!(n.op, Op::MatMul))
                .count(),
            2
        );
        assert!(mlp(&MlpSpec::new(1, &[3])).is_err());
    }
}

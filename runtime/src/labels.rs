//! Labels outside their loss's classes: counted as they are fed, and reported.
//!
//! `SparseSoftmaxCrossEntropy` and `OneHot` take an `i32` label per sample; one outside
//! `[0, classes)` gives an all-zero one-hot row, so the sample adds nothing to the loss or
//! the gradient, without a flag, as PopLibs' one-hot encoding does (the reference
//! interpreter and the engine both follow it). That is the device's behaviour and stays so;
//! but a data file with labels counted from 1, or a model with one class too few, trains on
//! silently wrong data. The host therefore checks every label fed to a stream that such an
//! op reads ([`label_streams`]) and the run report carries a warning per stream that had
//! any ([`LabelCheck::warning`]), naming the stream, the op, the classes, how many were out
//! and the first of them, with its file and line when its feed can tell
//! ([`crate::feeds::Feed::locate`]).

use ipusim_compiler::report::group;
use ipusim_ir::{DType, Graph, NodeId, Op};
use serde::{Deserialize, Serialize};

/// The labels of one infeed stream: what reads them, and what was found in those fed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelCheck {
    /// The infeed stream.
    pub stream: String,
    /// The node that reads them as labels (`SparseSoftmaxCrossEntropy`) or indices
    /// (`OneHot`).
    pub reader: String,
    /// Valid labels are `0..classes`.
    pub classes: u64,
    /// Labels fed so far.
    pub fed: u64,
    /// Of them, outside `0..classes`.
    pub outside: u64,
    /// The first outside: (the feed's micro-batch, 0-based; the sample in it; the label).
    pub first: Option<(u64, u64, i64)>,
    /// Where the first came from (`file:line`), when its source can tell.
    pub first_at: Option<String>,
}

impl LabelCheck {
    /// Counts the labels of one micro-batch (`bytes`: little-endian `i32`s), the feed's
    /// `micro_batch`-th; `locate` tells where a sample of it came from.
    pub fn check(
        &mut self,
        bytes: &[u8],
        micro_batch: u64,
        locate: impl Fn(usize) -> Option<String>,
    ) {
        for (sample, b) in bytes.chunks_exact(4).enumerate() {
            let label = i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            self.fed += 1;
            if !(0..self.classes as i64).contains(&label) {
                self.outside += 1;
                if self.first.is_none() {
                    self.first = Some((micro_batch, sample as u64, label));
                    self.first_at = locate(sample);
                }
            }
        }
    }

    /// The warning of a stream with labels outside its classes, if it had any.
    pub fn warning(&self) -> Option<String> {
        let (micro_batch, sample, label) = self.first?;
        let at = (self.first_at.as_ref()).map_or(String::new(), |a| format!(", {a}"));
        Some(format!(
            "infeed '{}': {} of {} labels fed are outside [0, {}), the classes of '{}' (the \
             first: {label}, sample {sample} of micro-batch {micro_batch}{at}); each gives an \
             all-zero one-hot row, so its sample adds nothing to the loss or the gradient, as \
             on the IPU",
            self.stream,
            group(self.outside),
            group(self.fed),
            self.classes,
            self.reader
        ))
    }
}

/// The infeed streams `graph` reads as labels: each `i32` `Input` read (directly or through
/// reshapes) as a `SparseSoftmaxCrossEntropy`'s labels or a `OneHot`'s indices, with the
/// classes (the logits' last dimension, the one-hot depth). A stream read by several such
/// ops takes the fewest classes.
pub fn label_streams(graph: &Graph) -> Vec<LabelCheck> {
    let mut found: Vec<LabelCheck> = Vec::new();
    for (_, n) in graph.nodes() {
        let (labels, classes) = match &n.op {
            Op::SparseSoftmaxCrossEntropy { .. } => {
                let (Some(&logits), Some(&labels)) = (n.inputs.first(), n.inputs.get(1)) else {
                    continue;
                };
                let dims = graph.node(logits).ty.shape.dims();
                let Some(&classes) = dims.last() else {
                    continue;
                };
                (labels, classes as u64)
            }
            Op::OneHot { depth, .. } => {
                let Some(&indices) = n.inputs.first() else {
                    continue;
                };
                (indices, *depth as u64)
            }
            _ => continue,
        };
        let Some(stream) = input_stream(graph, labels) else {
            continue;
        };
        match found.iter_mut().find(|c| c.stream == stream) {
            Some(c) if c.classes <= classes => {}
            Some(c) => {
                c.classes = classes;
                c.reader = n.name.clone();
            }
            None => found.push(LabelCheck {
                stream,
                reader: n.name.clone(),
                classes,
                fed: 0,
                outside: 0,
                first: None,
                first_at: None,
            }),
        }
    }
    found.sort_by(|a, b| a.stream.cmp(&b.stream));
    found
}

/// The stream of the `i32` `Input` that `id` is, or reshapes.
fn input_stream(graph: &Graph, mut id: NodeId) -> Option<String> {
    loop {
        let n = graph.node(id);
        if n.ty.dtype != DType::I32 {
            return None;
        }
        match &n.op {
            Op::Input { stream, .. } => return Some(stream.clone()),
            Op::Reshape { .. } => id = *n.inputs.first()?,
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipusim_ir::{GraphBuilder, LossReduction};

    #[test]
    fn finds_the_label_streams_of_a_loss_and_a_one_hot() {
        let mut b = GraphBuilder::new();
        let x = b.input("images", DType::F32, [4, 3]).unwrap();
        let y = b.input("labels", DType::I32, [4]).unwrap();
        let z = b.input("other", DType::I32, [2, 2]).unwrap();
        let flat = b.reshape(z, [4]).unwrap();
        b.sparse_softmax_cross_entropy(x, y, LossReduction::Mean)
            .unwrap();
        let one_hot = Op::OneHot {
            depth: 7,
            dtype: DType::F32,
        };
        b.op("one_hot", one_hot, &[flat]).unwrap();
        let found = label_streams(&b.finish());
        let got: Vec<(&str, u64)> = found
            .iter()
            .map(|c| (c.stream.as_str(), c.classes))
            .collect();
        assert_eq!(got, [("labels", 3), ("other", 7)]);
    }

    #[test]
    fn counts_labels_outside_the_classes_and_names_the_first() {
        let mut c = LabelCheck {
            stream: "labels".into(),
            reader: "loss".into(),
            classes: 10,
            fed: 0,
            outside: 0,
            first: None,
            first_at: None,
        };
        let bytes = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let at = |s: usize| Some(format!("f.csv:{}", 10 + s));
        c.check(&bytes(&[0, 9, 3, 1]), 0, at);
        assert_eq!(c.warning(), None);
        c.check(&bytes(&[2, 10, -1, 9]), 1, at);
        c.check(&bytes(&[-100, 0, 0, 0]), 2, at);
        assert_eq!((c.fed, c.outside, c.first), (12, 3, Some((1, 1, 10))));
        assert_eq!(c.first_at.as_deref(), Some("f.csv:11"));
        let w = c.warning().unwrap();
        assert!(w.contains("'labels': 3 of 12 labels"), "{w}");
        assert!(w.contains("[0, 10)") && w.contains("'loss'"), "{w}");
        assert!(
            w.contains("first: 10, sample 1 of micro-batch 1, f.csv:11)"),
            "{w}"
        );
    }
}

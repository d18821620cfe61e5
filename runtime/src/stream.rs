//! The host's view of one stream: its name, element type and the shape of one micro-batch,
//! and how a micro-batch splits into samples (rows of a data file).
//!
//! Every feed and outfeed collector is bound to a [`StreamType`]; it is built from the
//! compiler's [`HostStream`] so that the host always agrees with the device on the bytes of a
//! micro-batch (the dtype after the precision policy).

use ipusim_compiler::executable::{HostStream, StreamDirection};
use ipusim_ir::{DType, Graph, Op, Shape, TensorType};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A host stream's type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamType {
    /// The stream name (the `Input` or `Outfeed` node's `stream`).
    pub name: String,
    /// Element type on the device (after the precision policy).
    pub dtype: DType,
    /// Shape of one micro-batch (infeed) or one entry (outfeed).
    pub shape: Shape,
}

impl StreamType {
    /// A stream type.
    pub fn new(name: impl Into<String>, dtype: DType, shape: impl Into<Shape>) -> StreamType {
        StreamType {
            name: name.into(),
            dtype,
            shape: shape.into(),
        }
    }

    /// The type of a compiled stream.
    pub fn of(stream: &HostStream) -> StreamType {
        StreamType::new(stream.name.clone(), stream.dtype, stream.shape.clone())
    }

    /// The tensor type of one micro-batch.
    pub fn tensor_type(&self) -> TensorType {
        TensorType::new(self.dtype, self.shape.clone())
    }

    /// Elements of one micro-batch.
    pub fn elements(&self) -> usize {
        self.shape.num_elements()
    }

    /// Bytes of one micro-batch: elements × dtype bytes.
    pub fn bytes(&self) -> usize {
        self.elements() * self.dtype.size_bytes()
    }

    /// Samples (data-file rows) per micro-batch: the leading dimension, 1 for a scalar.
    pub fn samples(&self) -> usize {
        self.shape.dims().first().copied().unwrap_or(1)
    }

    /// Elements of one sample: the shape without its leading (batch) dimension.
    pub fn sample_elements(&self) -> usize {
        self.shape.dims().iter().skip(1).product()
    }
}

impl fmt::Display for StreamType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "'{}' ({})", self.name, self.tensor_type())
    }
}

/// Whether a compiled stream is an infeed.
pub fn is_infeed(stream: &HostStream) -> bool {
    stream.direction == StreamDirection::HostToDevice
}

/// The streams of a step graph: infeeds (`Input` nodes) and outfeeds (`Outfeed` nodes),
/// each sorted by name.
pub fn graph_streams(graph: &Graph) -> (Vec<StreamType>, Vec<StreamType>) {
    let mut ins = Vec::new();
    let mut outs = Vec::new();
    for (_, n) in graph.nodes() {
        match &n.op {
            Op::Input { stream, .. } => ins.push(StreamType::new(
                stream.clone(),
                n.ty.dtype,
                n.ty.shape.clone(),
            )),
            Op::Outfeed { stream } => outs.push(StreamType::new(
                stream.clone(),
                n.ty.dtype,
                n.ty.shape.clone(),
            )),
            _ => {}
        }
    }
    ins.sort_by(|a, b| a.name.cmp(&b.name));
    outs.sort_by(|a, b| a.name.cmp(&b.name));
    (ins, outs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_split_the_leading_dimension() {
        let s = StreamType::new("features", DType::U8, [16, 64]);
        assert_eq!(
            (s.samples(), s.sample_elements(), s.bytes()),
            (16, 64, 1024)
        );
        let l = StreamType::new("labels", DType::I32, [16]);
        assert_eq!((l.samples(), l.sample_elements(), l.bytes()), (16, 1, 64));
        let scalar = StreamType::new("lr", DType::F16, Vec::<usize>::new());
        assert_eq!((scalar.samples(), scalar.sample_elements()), (1, 1));
    }
}

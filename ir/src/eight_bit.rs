//! Eight-bit image I/O (`--eight-bit-io`, the hands-on day's flag and Graphcore's CNN
//! examples'): image infeeds cross the host link as `u8`, a quarter of FP32's bytes and half of
//! FP16's, and are cast and normalised on the device.
//!
//! Every floating-point `Input` of rank 4 with 3 channels (NCHW images) becomes a `U8` input
//! of the same name and stream, followed by `NAME/u8_cast` (a `Cast` to the input's dtype),
//! `NAME/u8_centred` (minus the per-channel mean) and `NAME/u8_normalised` (times the inverse
//! per-channel standard deviation), which its readers read instead. The statistics are
//! torchvision's ImageNet mean and standard deviation, applied to the cast `u8` values as the
//! seed's `ModelWithNormalization` applies `transforms.Normalize(**IMAGENET_STATISTICS)` to
//! `img.half()`. The new nodes take their infeed's pipeline stage: the first IPU.
//!
//! A converted stream's host data are bytes: a `Uniform` source (the zoo's synthetic images,
//! in normalised units) becomes uniform pixels, `Uniform(low: 0, high: 256)` with its seed;
//! other sources must give values in 0..=255, which the runtime checks.

use crate::dtype::{DType, Shape};
use crate::error::IrError;
use crate::op::{Literal, Op};
use crate::program::{DataSource, Program};
use crate::rewrite::Rewrite;

/// torchvision's ImageNet channel means (`IMAGENET_STATISTICS["mean"]`).
const MEAN: [f64; 3] = [0.485, 0.456, 0.406];
/// torchvision's ImageNet channel standard deviations (`IMAGENET_STATISTICS["std"]`).
const STD: [f64; 3] = [0.229, 0.224, 0.225];

/// True for an infeed eight-bit I/O applies to: a float NCHW image with 3 channels.
fn is_image(op: &Op) -> bool {
    match op {
        Op::Input { dtype, shape, .. } => {
            dtype.is_float() && shape.rank() == 4 && shape.dims()[1] == 3
        }
        _ => false,
    }
}

/// `program` with its image infeeds read as `u8` and normalised on the device; an error
/// when it has no image infeed.
pub fn eight_bit_io(program: &Program) -> Result<Program, IrError> {
    let g = &program.graph;
    if !g.nodes().any(|(_, n)| is_image(&n.op)) {
        return Err(IrError::Program(
            "--eight-bit-io: the program has no image infeed (a floating-point Input of shape \
             [N, 3, H, W]) to read as u8"
                .into(),
        ));
    }
    let mut rw = Rewrite::new(g);
    for id in g.program_order() {
        let node = g.node(id);
        let inputs = rw.inputs_of(id)?;
        let nid = match &node.op {
            Op::Input {
                stream,
                dtype,
                shape,
            } if is_image(&node.op) => {
                let name = &node.name;
                let raw = rw.dst.add_node_in(
                    node.phase,
                    name.clone(),
                    Op::Input {
                        stream: stream.clone(),
                        dtype: DType::U8,
                        shape: shape.clone(),
                    },
                    &[],
                )?;
                let cast = rw.dst.add_node_in(
                    node.phase,
                    format!("{name}/u8_cast"),
                    Op::Cast { dtype: *dtype },
                    &[raw],
                )?;
                let per_channel = |values: [f64; 3]| Op::Constant {
                    dtype: *dtype,
                    shape: Shape::new([1, 3, 1, 1]),
                    value: Literal::Values(values.to_vec()),
                };
                let mean = rw.dst.add_node_in(
                    node.phase,
                    format!("{name}/u8_mean"),
                    per_channel(MEAN),
                    &[],
                )?;
                let inv_std = rw.dst.add_node_in(
                    node.phase,
                    format!("{name}/u8_inv_std"),
                    per_channel(STD.map(|s| 1.0 / s)),
                    &[],
                )?;
                let centred = rw.dst.add_node_in(
                    node.phase,
                    format!("{name}/u8_centred"),
                    Op::Sub,
                    &[cast, mean],
                )?;
                rw.dst.add_node_in(
                    node.phase,
                    format!("{name}/u8_normalised"),
                    Op::Mul,
                    &[centred, inv_std],
                )?
            }
            op => rw
                .dst
                .add_node_in(node.phase, node.name.clone(), op.clone(), &inputs)?,
        };
        rw.set(id, nid);
    }
    let mut p = program.clone_without_graph();
    let streams: Vec<&str> = g
        .nodes()
        .filter(|(_, n)| is_image(&n.op))
        .filter_map(|(_, n)| match &n.op {
            Op::Input { stream, .. } => Some(stream.as_str()),
            _ => None,
        })
        .collect();
    for feed in &mut p.infeeds {
        if let DataSource::Uniform { seed, .. } = feed.source {
            if streams.contains(&feed.stream.as_str()) {
                feed.source = DataSource::Uniform {
                    low: 0.0,
                    high: 256.0,
                    seed,
                };
            }
        }
    }
    p.graph = rw.dst;
    Ok(p)
}

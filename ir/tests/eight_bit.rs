//! Eight-bit image I/O (`ipusim_ir::eight_bit`): the image infeed becomes u8, its readers read
//! the cast and normalised value, of the original type.

use ipusim_ir::eight_bit::eight_bit_io;
use ipusim_ir::resnet::{resnet, Model};
use ipusim_ir::{DType, DataSource, Op};

#[test]
fn the_image_crosses_as_u8_and_is_normalised_on_the_device() {
    let mut spec = Model::named("resnet8").unwrap().default_spec();
    (spec.batch, spec.image_size) = (2, 8);
    let p = resnet(&spec).unwrap();
    let q = eight_bit_io(&p).unwrap();
    let (_, input) = q
        .graph
        .nodes()
        .find(|(_, n)| matches!(n.op, Op::Input { .. }) && n.ty.shape.rank() == 4)
        .unwrap();
    assert_eq!(input.ty.dtype, DType::U8);
    let original = p.graph.node(p.graph.find(&input.name).unwrap());
    let norm = q.graph.node(
        q.graph
            .find(&format!("{}/u8_normalised", input.name))
            .unwrap(),
    );
    assert_eq!(norm.ty, original.ty);
    // The first convolution reads the normalised image.
    let conv = q.graph.node(q.graph.find("conv1").unwrap());
    assert!(conv.inputs.contains(&q.graph.find(&norm.name).unwrap()));
    // Synthetic uniform images become uniform bytes.
    let feed = q.infeeds.iter().find(|f| f.stream == "image").unwrap();
    assert!(
        matches!(feed.source, DataSource::Uniform { low, high, .. } if low == 0.0 && high == 256.0)
    );
}

//! Tests of the lowering context: the element index it builds from a tensor's slices.

use super::*;
use crate::executable::TensorKind;

/// The index built from a tensor's slices is the index of the mapping they were built
/// from: every interval at its tile and slice-relative position, in element order.
#[test]
fn the_index_of_the_slices_is_the_index_of_the_mapping() {
    let m = Mapping::from_pieces(vec![
        (3, 0, 4),
        (5, 4, 8),
        (3, 8, 12),
        (9, 12, 30),
        (5, 30, 31),
        (3, 40, 44),
    ]);
    for dtype in [DType::F16, DType::F32, DType::U8] {
        let t = Tensor {
            name: "t".into(),
            node: None,
            kind: TensorKind::Activation,
            slices: mapping::tile_slices(&m, dtype, 1),
            dtype,
            shape: Shape::new(vec![44]),
        };
        let (a, b) = (mapping::slices_index(&t), mapping::build_index(&m));
        assert_eq!(&*a, &*b, "{dtype}");
        assert_eq!(mapping::locate(&a, 41), mapping::locate(&b, 41));
    }
}

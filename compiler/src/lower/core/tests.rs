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

/// A compute set's work entries merged by tile: one entry per tile in tile order, each
/// holding its groups in the order given, its list (and the entries' list) no longer than
/// what it holds.
#[test]
fn work_entries_merge_by_tile_in_order_at_their_size() {
    use crate::codelets::Codelet;
    use crate::executable::{Vertex, VertexGroup};
    let fill = |value: u64| VertexGroup {
        codelet: Codelet::Fill { dtype: DType::F32 },
        vertices: vec![Vertex {
            worker: 0,
            operands: Default::default(),
            params: crate::codelets::VertexParams::Fill {
                value: value as f64,
            },
        }],
    };
    let entry = |tile: u32, values: &[u64]| TileWork {
        tile: TileId::new(0, tile),
        groups: values.iter().map(|&v| fill(v)).collect(),
        cycles: 0,
    };
    let value = |g: &VertexGroup| match g.vertices[0].params {
        crate::codelets::VertexParams::Fill { value } => value as u64,
        _ => unreachable!(),
    };
    let mut tiles = vec![
        entry(7, &[0]),
        entry(2, &[1, 2]),
        entry(7, &[3]),
        entry(5, &[4]),
        entry(2, &[5]),
        entry(7, &[6, 7]),
    ];
    merge_tiles(&mut tiles);
    let got: Vec<(u32, Vec<u64>)> = tiles
        .iter()
        .map(|t| (t.tile.tile(), t.groups.iter().map(value).collect()))
        .collect();
    assert_eq!(
        got,
        [(2, vec![1, 2, 5]), (5, vec![4]), (7, vec![0, 3, 6, 7])]
    );
    assert_eq!(tiles.capacity(), 3);
    assert!(tiles.iter().all(|t| t.groups.capacity() == t.groups.len()));
    // Entries already one per tile in order stay as they are.
    let before = tiles.clone();
    merge_tiles(&mut tiles);
    assert_eq!(tiles, before);
}

//! Tests of [`super`] (`elementwise.rs`).

use super::*;

/// How an input of shape `input` is read for a row-major output of shape `out`.
fn read_of(input: &Shape, out: &Shape) -> Read {
    read_in(&storage_strides(input.dims(), out.dims(), 1))
}

#[test]
fn per_channel_inputs_read_a_grouped_output_through_its_channel_order() {
    // mean [1, 32, 1, 1] over [2, 32, 3, 3] grouped by 16: storage [2, 2, 3, 3, 16]
    // ([C/g, N, H, W, g]) reads channel (cg·16 + gi), broadcast over batch and space.
    match read_in(&storage_strides(&[1, 32, 1, 1], &[2, 32, 3, 3], 16)) {
        Read::Broadcast { dims, strides } => {
            assert_eq!(dims, vec![2, 18, 16]);
            assert_eq!(strides, vec![16, 0, 1]);
        }
        Read::Aligned => panic!("expected broadcast"),
    }
    // A row-major map of the output's shape is read permuted.
    match read_in(&storage_strides(&[2, 32, 3, 3], &[2, 32, 3, 3], 16)) {
        Read::Broadcast { dims, strides } => {
            assert_eq!(dims, vec![2, 2, 9, 16]);
            assert_eq!(strides, vec![16 * 9, 32 * 9, 1, 9]);
        }
        Read::Aligned => panic!("expected a permuted read"),
    }
    // One element per plane of one image: the grouped order is the row-major one; of
    // several images it is not (the batch lies inside a channel group).
    assert!(matches!(
        read_in(&storage_strides(&[1, 32, 1, 1], &[1, 32, 1, 1], 16)),
        Read::Aligned
    ));
    assert!(matches!(
        read_in(&storage_strides(&[2, 32, 1, 1], &[2, 32, 1, 1], 16)),
        Read::Broadcast { .. }
    ));
}

#[test]
fn a_grouped_input_is_read_in_its_own_storage_order() {
    // Per image and channel [2, 32, 1, 1], and a [1, 32, 1, 3] input, under [2, 32, 3, 3],
    // all grouped by 16: every output storage position reads the input's storage
    // element of the same (n, c, s).
    let out = [2usize, 32, 3, 3];
    let lo = ipusim_exe::layout::Grouped {
        batch: 2,
        channels: 32,
        spatial: 9,
        group: 16,
    };
    for input in [[2usize, 32, 1, 1], [1, 32, 1, 3], [2, 32, 3, 3]] {
        let li = ipusim_exe::layout::Grouped {
            batch: input[0] as u64,
            channels: 32,
            spatial: (input[2] * input[3]) as u64,
            group: 16,
        };
        let (dims, strides) = match read_in(&grouped_strides(&input, &out, 16)) {
            Read::Broadcast { dims, strides } => (dims, strides),
            Read::Aligned => (vec![2 * 32 * 9], vec![1]),
        };
        let acc = BroadcastAccess::new(&dims, &strides, 0, 0);
        for n in 0..2u64 {
            for c in 0..32u64 {
                for s in 0..9u64 {
                    let (h, w) = (s / 3, s % 3);
                    let ni = if input[0] == 1 { 0 } else { n };
                    let si =
                        if input[2] == 1 { 0 } else { h * 3 } + if input[3] == 1 { 0 } else { w };
                    let want = li.index(ni, c, si);
                    assert_eq!(
                        acc.index(lo.index(n, c, s)),
                        want,
                        "{input:?} at {n},{c},{s}"
                    );
                }
            }
        }
    }
    // A per-image-and-channel input of several images is read through a grouped copy.
    assert!(per_image_channel(&[2, 32, 1, 1], &out, 16));
    assert!(!per_image_channel(&[1, 32, 1, 1], &out, 16));
    assert!(!per_image_channel(&out, &out, 16));
    assert!(!per_image_channel(&[2, 32, 1, 1], &out, 1));
}

#[test]
fn broadcast_patterns_merge_and_bound() {
    // bias [4] over [3, 4]: inner broadcast.
    match read_of(&Shape::new([4]), &Shape::new([3, 4])) {
        Read::Broadcast { dims, strides } => {
            assert_eq!((dims.clone(), strides.clone()), (vec![3, 4], vec![0, 1]));
            assert_eq!(pattern_range(&dims, &strides, 5, 7), (1, 2));
            assert_eq!(pattern_range(&dims, &strides, 3, 9), (0, 3));
        }
        Read::Aligned => panic!("expected broadcast"),
    }
    // [3, 1] over [3, 4]: outer broadcast.
    match read_of(&Shape::new([3, 1]), &Shape::new([3, 4])) {
        Read::Broadcast { dims, strides } => {
            assert_eq!(strides, vec![1, 0]);
            assert_eq!(pattern_range(&dims, &strides, 5, 9), (1, 2));
        }
        Read::Aligned => panic!("expected broadcast"),
    }
    // Scalar.
    match read_of(&Shape::scalar(), &Shape::new([3, 4])) {
        Read::Broadcast { dims, strides } => {
            assert_eq!((dims, strides), (vec![12], vec![0]));
        }
        Read::Aligned => panic!("expected broadcast"),
    }
    assert!(matches!(
        read_of(&Shape::new([1, 6]), &Shape::new([6])),
        Read::Aligned
    ));
}

/// The input index a tile position reads through `lp`.
fn local_index(lp: &LocalPattern, p: u64) -> u64 {
    let acc = BroadcastAccess::new(&lp.dims, &lp.strides, 0, 0);
    lp.origin + acc.index(p)
}

#[test]
fn a_tile_of_channel_groups_reads_per_channel_inputs_through_one_pattern() {
    // mean [1, 32, 1, 1] over [2, 32, 3, 3] grouped by 8: storage [4, 2, 3, 3, 8].
    let (dims, strides) = match read_in(&storage_strides(&[1, 32, 1, 1], &[2, 32, 3, 3], 8)) {
        Read::Broadcast { dims, strides } => (dims, strides),
        Read::Aligned => panic!("expected broadcast"),
    };
    let acc = BroadcastAccess::new(&dims, &strides, 0, 0);
    // A tile holding rows 1..3 of channel groups 1 and 2 of both batch elements.
    let plane = 9 * 8;
    let ranges: Vec<(u64, u64)> = [(0u64, 1u64), (1, 1), (0, 2), (1, 2)]
        .iter()
        .map(|&(n, cg)| ((cg * 2 + n) * plane + 3 * 8, 6 * 8))
        .collect();
    let lp = tile_pattern(&dims, &strides, &ranges).expect("one pattern");
    let mut p = 0;
    for &(b, l) in &ranges {
        for o in 0..l {
            assert_eq!(local_index(&lp, p), acc.index(b + o), "position {p}");
            p += 1;
        }
    }
    // Intervals whose boxes differ have no common pattern.
    assert!(tile_pattern(&dims, &strides, &[(0, 16), (2 * plane, 8)]).is_none());
}

#[test]
fn a_scalar_is_read_through_one_pattern_over_any_intervals() {
    // An optimizer's scalar over a weight whose tile holds runs of unequal lengths at
    // irregular places (AdamW's `beta1` over a convolution's weights): one pattern, every
    // position reading element 0, so one vertex the workers split covers the tile.
    let ranges = [(3u64, 5u64), (20, 2), (100, 7)];
    let lp = tile_pattern(&[36_864], &[0], &ranges).expect("one pattern");
    assert_eq!(lp.dims.iter().product::<u64>(), 14);
    assert!((0..14).all(|p| local_index(&lp, p) == 0));
    // A vector broadcast over the same intervals still has none (their boxes differ).
    assert!(tile_pattern(&[36, 1_024], &[1, 0], &ranges).is_none());
}

#[test]
fn pattern_range_matches_brute_force() {
    let dims = [3u64, 2, 5];
    let strides = [0u64, 5, 1];
    let acc = BroadcastAccess::new(&dims, &strides, 0, 0);
    for s in 0..30 {
        for e in s + 1..=30 {
            let idx: Vec<u64> = (s..e).map(|g| acc.index(g)).collect();
            let want = (*idx.iter().min().unwrap(), *idx.iter().max().unwrap());
            assert_eq!(pattern_range(&dims, &strides, s, e), want, "{s}..{e}");
        }
    }
}

/// The former coordinate walk of [`interval_pattern`] (every coordinate stored, then each
/// dimension tested from the innermost), against which the allocation-free one is held.
fn interval_pattern_by_coordinates(
    dims: &[u64],
    strides: &[u64],
    b: u64,
    l: u64,
) -> Option<LocalPattern> {
    let n = dims.len();
    let mut coords = vec![0u64; n];
    let mut rem = b;
    for d in (0..n).rev() {
        let size = dims[d].max(1);
        coords[d] = rem % size;
        rem /= size;
    }
    let origin: u64 = coords.iter().zip(strides).map(|(c, s)| c * s).sum();
    let mut inner = 1u64;
    for k in (0..n).rev() {
        let aligned = coords[k + 1..].iter().all(|&c| c == 0);
        if aligned && inner > 0 && l.is_multiple_of(inner) && coords[k] + l / inner <= dims[k] {
            let mut d = vec![l / inner];
            let mut s = vec![strides[k]];
            d.extend_from_slice(&dims[k + 1..]);
            s.extend_from_slice(&strides[k + 1..]);
            return Some(LocalPattern {
                dims: d,
                strides: s,
                origin,
            });
        }
        inner *= dims[k].max(1);
    }
    None
}

#[test]
fn interval_boxes_are_the_coordinate_walks_patterns() {
    // Every interval of a few broadcasts (a channel vector over NCHW, a row, a scalar plane,
    // size-1 dimensions), and whether each pair of them shares a pattern.
    let cases: [(&[u64], &[u64]); 4] = [
        (&[2, 3, 2, 2], &[0, 1, 0, 0]),
        (&[3, 4], &[4, 1]),
        (&[2, 1, 3], &[0, 0, 1]),
        (&[1, 2, 1, 2], &[0, 2, 0, 1]),
    ];
    let mut boxes = 0;
    for (dims, strides) in cases {
        let total: u64 = dims.iter().product();
        let all: Vec<(u64, u64)> = (0..total)
            .flat_map(|b| (1..=total - b).map(move |l| (b, l)))
            .collect();
        for &(b, l) in &all {
            let want = interval_pattern_by_coordinates(dims, strides, b, l);
            assert_eq!(
                interval_pattern(dims, strides, b, l),
                want,
                "{dims:?} [{b}, +{l})"
            );
            let Some(first) = want else { continue };
            boxes += 1;
            for &(b2, l2) in &all {
                let same = interval_pattern_by_coordinates(dims, strides, b2, l2)
                    .is_some_and(|p| (&p.dims, &p.strides) == (&first.dims, &first.strides));
                let got = interval_box(dims, strides, b2, l2)
                    .is_some_and(|(k, run, _)| first.is_box(dims, strides, (k, run)));
                assert_eq!(got, same, "{dims:?} [{b}, +{l}) against [{b2}, +{l2})");
            }
        }
    }
    assert!(boxes > 50, "{boxes}");
}

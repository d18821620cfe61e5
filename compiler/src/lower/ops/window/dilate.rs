//! PopLibs' `dilatePostConv` transform for the input gradient of a strided convolution: in
//! a spatial dimension where the forward kernel is one element wide and unpadded, every
//! input position the stride skips gets a zero gradient, so the pass is planned and run on
//! the undilated field (the forward's output size, stride 1) and its result is then dilated
//! into the gradient, the skipped positions filled with zeros.
//!
//! PopLibs: `getDilatePostConvDims` and `canDeferDilation` (`lib/poplin/ConvPlan.cpp`,
//! `ConvModel.cpp`) defer an input dilation when the transformed kernel size is 1 and the
//! input is unpadded; `Convolution.cpp` then copies a dilated, padded view of the result into
//! a new variable mapped like the result's nearest element (`dilateWithNearestNeighbour`).
//! Without it, a 1x1 stride-2 convolution's input gradient (every ResNet downsample) holds,
//! sums and reduces partials over four times the positions that can be non-zero.

use crate::codelets::{WindowGeometry, WindowPass};
use crate::executable::TensorId;
use crate::lower::core::Lowerer;
use crate::lower::kit::mapping::{self, Mapping};
use crate::lower::kit::permute::{emit_mapped, strides, Map};
use ipusim_exe::layout::storage_dims;
use ipusim_ir::{NodeId, Shape};

use super::block::Kind;

/// The geometry a pass is planned on: an input gradient's field undilated in every spatial
/// dimension whose dilation can be deferred (a kernel one element wide, no padding, a stride
/// above 1), where its output `h` or `w` becomes the forward's output size at stride 1.
pub(super) fn planned_geometry(kind: Kind, mut g: WindowGeometry) -> WindowGeometry {
    if kind != Kind::Conv(WindowPass::InputGrad) {
        return g;
    }
    if g.kh == 1 && g.stride[0] > 1 && g.padding[0] == 0 && g.padding[2] == 0 {
        g.h = g.oh;
        g.stride[0] = 1;
    }
    if g.kw == 1 && g.stride[1] > 1 && g.padding[1] == 0 && g.padding[3] == 0 {
        g.w = g.ow;
        g.stride[1] = 1;
    }
    g
}

/// Node `id`'s gradient of logical `full` dims `[N, C, H, W]` from `undilated`, the pass's
/// result on the undilated field, both held grouped by `group`: element `(n, c, h, w)` is
/// `undilated[n, c, h / sh, w / sw]` where `h` and `w` are multiples of the deferred strides
/// `[sh, sw]` (1 where nothing was deferred) inside the undilated field, else zero. Each
/// element goes to the tile of the undilated element at or before it (PopLibs'
/// nearest-neighbour mapping), so the copy (step `NAME/dilate`) is a memcpy on every tile and
/// the zeros are `Fill` vertices.
pub(super) fn dilated(
    lw: &mut Lowerer,
    id: NodeId,
    name: &str,
    undilated: TensorId,
    (group, full): (u32, &[usize]),
    stride: [u32; 2],
) -> TensorId {
    let in_dims: Vec<u64> = lw
        .tensor(undilated)
        .shape
        .dims()
        .iter()
        .map(|&d| d as u64)
        .collect();
    let out_dims = storage_dims(full, group);
    let dims: Vec<u64> = out_dims.iter().map(|&d| d as u64).collect();
    // The spatial axes of the storage are 2 and 3, grouped (`[C/g, N, H, W, g]`) or not.
    let mut factors = vec![1u64; dims.len()];
    factors[2] = u64::from(stride[0]);
    factors[3] = u64::from(stride[1]);
    let map = Map::Dilate {
        factors: factors.clone(),
        in_strides: strides(&in_dims),
        in_dims: in_dims.clone(),
    };
    let mapping = nearest_mapping(lw, undilated, &dims, &factors, &in_dims);
    let step = format!("{name}/dilate");
    let shape = Shape::new(out_dims);
    emit_mapped(lw, id, (name, &step), &[undilated], (&shape, &map), mapping)
}

/// The mapping of the dilated tensor of storage `dims`: each row (all but the last storage
/// dimension) on the tiles of the undilated row at or before it, element by element.
fn nearest_mapping(
    lw: &Lowerer,
    undilated: TensorId,
    dims: &[u64],
    factors: &[u64],
    in_dims: &[u64],
) -> Mapping {
    let index = mapping::slices_index(lw.tensor(undilated));
    let in_strides = strides(in_dims);
    let last = dims.len() - 1;
    let row_len = dims[last];
    let rows: u64 = dims[..last].iter().product();
    let mut pieces: Vec<(u32, u64, u64)> = Vec::new();
    let mut coords = vec![0u64; last];
    for row in 0..rows {
        let mut r = row;
        for d in (0..last).rev() {
            coords[d] = r % dims[d];
            r /= dims[d];
        }
        let base: u64 = (0..last)
            .map(|i| (coords[i] / factors[i]).min(in_dims[i] - 1) * in_strides[i])
            .sum();
        let mut push = |tile: u32, at: u64, len: u64| match pieces.last_mut() {
            Some(p) if p.0 == tile && p.2 == at => p.2 = at + len,
            _ => pieces.push((tile, at, at + len)),
        };
        if factors[last] == 1 && row_len <= in_dims[last] {
            // The undilated row's run (a channel group, the last dimension of a grouped
            // map), segment by segment.
            let mut col = 0;
            while col < row_len {
                let seg = mapping::locate(&index, base + col).map(|s| index[s]);
                let len = seg.map_or(1, |s| (s.end - (base + col)).min(row_len - col));
                push(seg.map_or(0, |s| s.tile), row * row_len + col, len);
                col += len;
            }
        } else {
            for col in 0..row_len {
                let src = base + (col / factors[last]).min(in_dims[last] - 1);
                let tile = mapping::locate(&index, src).map_or(0, |s| index[s].tile);
                push(tile, row * row_len + col, 1);
            }
        }
    }
    Mapping::from_pieces(pieces)
}

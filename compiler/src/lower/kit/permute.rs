//! Data-movement ops: `Transpose` (other than a folded swap of the last two dims),
//! `Broadcast`, `Slice`, `Pad`, `Concat`, the materialisation of a folded transpose, and the
//! dilation of a convolution's result (`lower::ops::window`'s deferred dilation).
//!
//! The output is mapped linearly (the dilation: as its caller maps it); its elements are
//! copied from wherever the inputs live by one exchange (on-tile sources become memcpys),
//! walking each output row and merging consecutive source elements into one copy. `Pad`'s
//! and the dilation's zeros are written by `Fill` vertices.

use crate::codelets::{Codelet, VertexParams};
use crate::error::CompileError;
use crate::executable::{Operand, Operands, TensorId, TensorKind, TileWork, Vertex};
use crate::lower::core::{Lowerer, Value};
use crate::lower::kit::mapping::{worker_slices, Mapping};
use crate::lower::kit::stage::ExchangeBuilder;
use ipusim_ir::{NodeId, Shape};

/// Where one run of an output row comes from.
enum Piece {
    /// `len` elements of input `input` from `begin`, `stride` apart (0: one repeated element).
    Copy {
        input: usize,
        begin: u64,
        stride: u64,
        len: u64,
    },
    /// `len` zeros.
    Zero { len: u64 },
}

/// The index map of one data-movement op, in terms of output coordinates.
pub(crate) enum Map {
    /// Output dim `i` is input dim `perm[i]`.
    Permute {
        perm: Vec<usize>,
        in_strides: Vec<u64>,
    },
    Slice {
        begin: Vec<u64>,
        in_strides: Vec<u64>,
    },
    Pad {
        before: Vec<u64>,
        in_dims: Vec<u64>,
        in_strides: Vec<u64>,
    },
    Concat {
        axis: usize,
        offsets: Vec<u64>,
        in_strides: Vec<Vec<u64>>,
    },
    Broadcast {
        in_dims: Vec<u64>,
        in_strides: Vec<u64>,
    },
    /// Output element `c` is input element `c / factors` where every coordinate is a
    /// multiple of its factor inside `in_dims`, else zero (a dilation with zeros, padded at
    /// the end).
    Dilate {
        factors: Vec<u64>,
        in_dims: Vec<u64>,
        in_strides: Vec<u64>,
    },
}

pub(crate) fn strides(dims: &[u64]) -> Vec<u64> {
    let mut s = vec![1u64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

impl Map {
    /// The pieces of output row `c[..last]` for columns `[c0, c1)`.
    fn row(&self, c: &[u64], c0: u64, c1: u64, out: &mut Vec<Piece>) {
        let last = c.len() - 1;
        let len = c1 - c0;
        match self {
            Map::Permute { perm, in_strides } => {
                let base: u64 = (0..last).map(|i| c[i] * in_strides[perm[i]]).sum();
                let stride = in_strides[perm[last]];
                out.push(Piece::Copy {
                    input: 0,
                    begin: base + c0 * stride,
                    stride,
                    len,
                });
            }
            Map::Slice { begin, in_strides } => {
                let base: u64 = (0..last).map(|i| (c[i] + begin[i]) * in_strides[i]).sum();
                out.push(Piece::Copy {
                    input: 0,
                    begin: base + begin[last] + c0,
                    stride: 1,
                    len,
                });
            }
            Map::Pad {
                before,
                in_dims,
                in_strides,
            } => {
                let mut base = 0;
                for i in 0..last {
                    if c[i] < before[i] || c[i] >= before[i] + in_dims[i] {
                        out.push(Piece::Zero { len });
                        return;
                    }
                    base += (c[i] - before[i]) * in_strides[i];
                }
                let (lo, hi) = (before[last], before[last] + in_dims[last]);
                let (a, b) = (c0.clamp(lo, hi), c1.clamp(lo, hi));
                if a > c0 {
                    out.push(Piece::Zero { len: a - c0 });
                }
                if b > a {
                    out.push(Piece::Copy {
                        input: 0,
                        begin: base + a - lo,
                        stride: 1,
                        len: b - a,
                    });
                }
                if c1 > b.max(a) {
                    out.push(Piece::Zero { len: c1 - b.max(a) });
                }
            }
            Map::Concat {
                axis,
                offsets,
                in_strides,
            } => {
                let which = |x: u64| offsets.partition_point(|&o| o <= x) - 1;
                let flat = |k: usize, coords: &[u64], col: u64| -> u64 {
                    let mut f = 0;
                    for i in 0..last {
                        let ci = if i == *axis {
                            coords[i] - offsets[k]
                        } else {
                            coords[i]
                        };
                        f += ci * in_strides[k][i];
                    }
                    f + col
                };
                if *axis == last {
                    let mut at = c0;
                    while at < c1 {
                        let k = which(at);
                        let end = c1.min(offsets[k + 1]);
                        out.push(Piece::Copy {
                            input: k,
                            begin: flat(k, c, at - offsets[k]),
                            stride: 1,
                            len: end - at,
                        });
                        at = end;
                    }
                } else {
                    let k = which(c[*axis]);
                    out.push(Piece::Copy {
                        input: k,
                        begin: flat(k, c, c0),
                        stride: 1,
                        len,
                    });
                }
            }
            Map::Dilate {
                factors,
                in_dims,
                in_strides,
            } => {
                let mut base = 0;
                for i in 0..last {
                    let (q, r) = (c[i] / factors[i], c[i] % factors[i]);
                    if r != 0 || q >= in_dims[i] {
                        out.push(Piece::Zero { len });
                        return;
                    }
                    base += q * in_strides[i];
                }
                let f = factors[last];
                for col in c0..c1 {
                    let hit = col % f == 0 && col / f < in_dims[last];
                    match (out.last_mut(), hit) {
                        (Some(Piece::Zero { len }), false) => *len += 1,
                        (
                            Some(Piece::Copy {
                                begin, stride, len, ..
                            }),
                            true,
                        ) if f == 1 && *stride == 1 && *begin + *len == base + col => *len += 1,
                        (_, false) => out.push(Piece::Zero { len: 1 }),
                        (_, true) => out.push(Piece::Copy {
                            input: 0,
                            begin: base + col / f,
                            stride: 1,
                            len: 1,
                        }),
                    }
                }
            }
            Map::Broadcast {
                in_dims,
                in_strides,
            } => {
                let off = c.len() - in_dims.len();
                let mut base = 0;
                for (i, &d) in in_dims.iter().enumerate() {
                    if i + off < last && d != 1 {
                        base += c[i + off] * in_strides[i];
                    }
                }
                let stride = match in_dims.last() {
                    Some(&d) if d != 1 && in_dims.len() + off > last => 1,
                    _ => 0,
                };
                out.push(Piece::Copy {
                    input: 0,
                    begin: base + c0 * stride,
                    stride,
                    len,
                });
            }
        }
    }
}

/// Node `id`'s value, row-major and without transposition: a folded transpose is
/// materialised now (and becomes the node's value); a channel-grouped value is read through
/// its row-major copy ([`row_major`]).
pub(crate) fn materialized(lw: &mut Lowerer, id: NodeId) -> Result<TensorId, CompileError> {
    let v = lw.value(id)?;
    if v.group > 1 {
        return Ok(row_major(lw, id, v.tensor, v.group));
    }
    if !v.transposed {
        return Ok(v.tensor);
    }
    let t = materialize_transpose(lw, id, v.tensor)?;
    lw.set_value(id, t);
    Ok(t)
}

/// Node `id`'s value and the channel group its tensor holds it in (1: row-major), for a
/// consumer that reads feature maps in any group: a folded transpose is materialised.
pub(crate) fn grouped(lw: &mut Lowerer, id: NodeId) -> Result<(TensorId, u32), CompileError> {
    let v = lw.value(id)?;
    if v.group > 1 {
        return Ok((v.tensor, v.group));
    }
    Ok((materialized(lw, id)?, 1))
}

/// Node `id`'s value as a consumer that folds transposes reads it (a matmul): a
/// channel-grouped value is read through its row-major copy.
pub(crate) fn row_major_view(lw: &mut Lowerer, id: NodeId) -> Result<Value, CompileError> {
    let v = lw.value(id)?;
    if v.group <= 1 {
        return Ok(v);
    }
    Ok(Value {
        tensor: row_major(lw, id, v.tensor, v.group),
        transposed: false,
        group: 1,
    })
}

/// The row-major copy of node `id`'s value `stored`, held with its channels grouped by
/// `group`: made once by a permuting exchange (the storage `[C/g, N, S…, g]` read as
/// `[N, C/g, g, S…]`), as PopLibs rearranges a tensor for a consumer that wants another
/// layout; a value of one image with one element per channel plane is stored in row-major
/// order already and is its own copy.
fn row_major(lw: &mut Lowerer, id: NodeId, stored: TensorId, group: u32) -> TensorId {
    if let Some(t) = lw.row_major_copy(id) {
        return t;
    }
    let shape = lw.graph().node(id).ty.shape.clone();
    let spatial: usize = shape.dims().iter().skip(2).product();
    if spatial <= 1 && shape.dims().first().is_none_or(|&n| n <= 1) {
        return stored;
    }
    let storage = Shape::new(ipusim_exe::layout::storage_dims(shape.dims(), group));
    let r = storage.rank();
    let mut perm: Vec<usize> = vec![1, 0, r - 1];
    perm.extend(2..r - 1);
    let name = format!("{}/row_major", lw.graph().node(id).name);
    let t = permute(lw, id, &name, stored, &storage, &perm);
    lw.set_row_major_copy(id, t);
    t
}

/// A copy of node `id`'s value (logical `[N, C, S…]`, `C` a multiple of `group`) held
/// grouped by `group` (storage `[C/g, N, S…, g]`, [`ipusim_exe::layout`]): made by a
/// permuting exchange from its row-major value (`[N, C/g, g, S…]`), for a consumer that
/// reads it in a grouped feature map's order.
pub(crate) fn regrouped(
    lw: &mut Lowerer,
    id: NodeId,
    group: u32,
) -> Result<TensorId, CompileError> {
    let t = materialized(lw, id)?;
    let dims = lw.graph().node(id).ty.shape.dims().to_vec();
    let g = group.max(1) as usize;
    let spatial: usize = dims.iter().skip(2).product();
    let src = Shape::new([dims[0], dims[1] / g, g, spatial]);
    let name = format!("{}/grouped", lw.graph().node(id).name);
    Ok(permute(lw, id, &name, t, &src, &[1, 0, 3, 2]))
}

/// Node `id` takes `input`'s elements as they are (a reshape, a cast to the same type).
pub(crate) fn alias(lw: &mut Lowerer, id: NodeId, input: NodeId) -> Result<(), CompileError> {
    let t = materialized(lw, input)?;
    lw.set_value(id, t);
    Ok(())
}

pub(crate) fn materialize_transpose(
    lw: &mut Lowerer,
    id: NodeId,
    stored: TensorId,
) -> Result<TensorId, CompileError> {
    let shape = lw.graph().node(id).ty.shape.clone();
    let mut dims: Vec<usize> = shape.dims().to_vec();
    let r = dims.len();
    dims.swap(r - 1, r - 2);
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 1, r - 2);
    let name = lw.graph().node(id).name.clone();
    Ok(permute(lw, id, &name, stored, &Shape::new(dims), &perm))
}

/// A permuted copy of `src` (of shape `src_shape`): output dim `i` is input dim `perm[i]`.
pub(crate) fn permute(
    lw: &mut Lowerer,
    id: NodeId,
    name: &str,
    src: TensorId,
    src_shape: &Shape,
    perm: &[usize],
) -> TensorId {
    let in_dims: Vec<u64> = src_shape.dims().iter().map(|&d| d as u64).collect();
    let out_shape = Shape::new(
        perm.iter()
            .map(|&p| src_shape.dims()[p])
            .collect::<Vec<_>>(),
    );
    let map = Map::Permute {
        perm: perm.to_vec(),
        in_strides: strides(&in_dims),
    };
    emit(lw, id, name, &[src], &out_shape, &map)
}

/// Creates the output, mapped linearly, copies its elements by exchange and fills zeros.
pub(crate) fn emit(
    lw: &mut Lowerer,
    id: NodeId,
    name: &str,
    inputs: &[TensorId],
    shape: &Shape,
    map: &Map,
) -> TensorId {
    let dtype = lw.tensor(inputs[0]).dtype;
    let m = lw.fresh_mapping(shape.num_elements() as u64, dtype);
    emit_mapped(lw, id, (name, name), inputs, (shape, map), m)
}

/// [`emit`] with the output (named `name`) mapped by `m`, in a step named `step`.
pub(crate) fn emit_mapped(
    lw: &mut Lowerer,
    id: NodeId,
    (name, step): (&str, &str),
    inputs: &[TensorId],
    (shape, map): (&Shape, &Map),
    m: Mapping,
) -> TensorId {
    let dtype = lw.tensor(inputs[0]).dtype;
    let out = lw.new_tensor(
        name.to_string(),
        Some(id),
        TensorKind::Activation,
        dtype,
        shape.clone(),
        m,
    );
    let dims: Vec<u64> = if shape.rank() == 0 {
        vec![1]
    } else {
        shape.dims().iter().map(|&d| d as u64).collect()
    };
    let row_len = *dims.last().unwrap_or(&1);
    let mut eb = ExchangeBuilder::default();
    let mut zeros: Vec<(u32, u64, u64)> = Vec::new();
    let mut pieces = Vec::new();
    let mut coords = vec![0u64; dims.len()];
    if shape.rank() == 0 {
        // A scalar: every op here maps element 0 to element 0.
        for slice in lw.tensor(out).slices.clone() {
            eb.copy_elems(lw, inputs[0], 0, 1, out, slice.tile.tile(), 0);
        }
        lw.superstep(step, Some(id), eb.finish(), Vec::new());
        return out;
    }
    for slice in lw.tensor(out).slices.clone() {
        let mut pos = 0u64;
        for iv in &slice.intervals {
            let mut at = iv.begin;
            while at < iv.end() {
                let (row, col) = (at / row_len.max(1), at % row_len.max(1));
                let end = iv.end().min((row + 1) * row_len);
                let mut r = row;
                for d in (0..dims.len().saturating_sub(1)).rev() {
                    coords[d] = r % dims[d];
                    r /= dims[d];
                }
                pieces.clear();
                map.row(&coords, col, col + (end - at), &mut pieces);
                let mut dst = pos;
                for p in &pieces {
                    match *p {
                        Piece::Zero { len } => {
                            zeros.push((slice.tile.tile(), dst, len));
                            dst += len;
                        }
                        Piece::Copy {
                            input,
                            begin,
                            stride,
                            len,
                        } => {
                            if stride == 1 {
                                eb.copy_elems(
                                    lw,
                                    inputs[input],
                                    begin,
                                    len,
                                    out,
                                    slice.tile.tile(),
                                    dst,
                                );
                            } else {
                                for j in 0..len {
                                    eb.copy_elems(
                                        lw,
                                        inputs[input],
                                        begin + j * stride,
                                        1,
                                        out,
                                        slice.tile.tile(),
                                        dst + j,
                                    );
                                }
                            }
                            dst += len;
                        }
                    }
                }
                pos += end - at;
                at = end;
            }
        }
    }
    let tiles = zero_work(lw, out, &zeros);
    lw.superstep(step, Some(id), eb.finish(), tiles);
    out
}

/// `Fill` vertices writing zeros over `(tile, position, len)` runs of `out`.
fn zero_work(lw: &Lowerer, out: TensorId, zeros: &[(u32, u64, u64)]) -> Vec<TileWork> {
    let dtype = lw.tensor(out).dtype;
    let es = dtype.size_bytes() as u64;
    let nw = lw.target().worker_contexts as u64;
    let mut tiles: Vec<TileWork> = Vec::new();
    let mut runs: Vec<(u32, u64, u64)> = Vec::new();
    for &(t, p, l) in zeros {
        match runs.last_mut() {
            Some(r) if r.0 == t && r.1 + r.2 == p => r.2 += l,
            _ => runs.push((t, p, l)),
        }
    }
    for (k, &(tile, p, len)) in runs.iter().enumerate() {
        let vertices = worker_slices(
            len,
            lw.target().vector_width(dtype),
            lw.target().worker_contexts,
        )
        .into_iter()
        .enumerate()
        .map(|(w, (a, b))| Vertex {
            worker: ((w as u64 + k as u64) % nw) as u8,
            operands: Operands::from_iter([Operand {
                tensor: out,
                offset: ((p + a) * es) as u32,
                len: (b - a) as u32,
            }]),
            params: VertexParams::Fill { value: 0.0 },
        })
        .collect();
        match tiles.last_mut() {
            Some(t) if t.tile == lw.tile_id(tile) => t.groups[0].vertices.extend(vertices),
            _ => tiles.push(TileWork::one_group(
                lw.tile_id(tile),
                Codelet::Fill { dtype },
                vertices,
            )),
        }
    }
    tiles
}

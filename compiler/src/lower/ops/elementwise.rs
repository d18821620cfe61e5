//! Element-wise ops (unary, binary with NumPy broadcasting, ScaledAdd, Select, Cast,
//! ActivationGrad, OneHot) and fills.
//!
//! The output takes the tile mapping of the first input of the output's shape (PopLibs maps
//! element-wise outputs like their input, so chains of element-wise ops need no exchange);
//! with none, a fresh linear mapping. Aligned inputs are read in place when mapped like the
//! output, else staged; a broadcast input is staged once per tile (just the range of its
//! elements the tile's outputs read) and read through a [`BroadcastAccess`]. A tile's
//! outputs are one vertex that its workers split among them in whole vectors
//! ([`ipusim_exe::workers`], PopLibs' MultiVertex), or, where a broadcast input is indexed
//! by positions that jump between the tile's intervals (and for `OneHot`), a vertex per
//! worker slice and interval.

use crate::codelets::{
    Access, Accesses, BroadcastAccess, BroadcastPattern, Codelet, MapParams, VertexParams,
};
use crate::error::CompileError;
use crate::executable::{Operand, Operands, TensorId, TensorKind, TileWork, Vertex};
use crate::lower::core::Lowerer;
use crate::lower::kit::mapping::Mapping;
use crate::lower::kit::permute;
use crate::lower::kit::stage::{ExchangeBuilder, Staging};
use ipusim_exe::layout::storage_dims;
use ipusim_exe::workers::{self, worker_slices};
use ipusim_ir::{NodeId, Op, Shape};
use std::sync::Arc;

/// How one input of an element-wise op is read, before staging.
enum Read {
    Aligned,
    Broadcast { dims: Vec<u64>, strides: Vec<u64> },
}

/// The codelet of element-wise node `id` alone, with its scale (`ScaledAdd`; else 1).
pub(crate) fn codelet_of(lw: &Lowerer, id: NodeId) -> Result<(Codelet, f64), CompileError> {
    let node = lw.graph().node(id);
    let out_ty = &node.ty;
    let in_ty = |i: usize| &lw.graph().node(node.inputs[i]).ty;
    let mut scale = 1.0;
    let codelet = match &node.op {
        Op::ScaledAdd { scale: s } => {
            scale = *s;
            Codelet::ScaledAdd {
                dtype: out_ty.dtype,
            }
        }
        Op::Select => Codelet::Select {
            dtype: out_ty.dtype,
        },
        Op::Cast { dtype } => Codelet::Cast {
            from: in_ty(0).dtype,
            to: *dtype,
        },
        Op::ActivationGrad { activation } => Codelet::ActivationGrad {
            activation: *activation,
            dtype: out_ty.dtype,
        },
        Op::OneHot { depth, dtype } => Codelet::OneHot {
            dtype: *dtype,
            depth: u32::try_from(*depth).map_err(|_| lw.unsupported(id, "depth exceeds 2^32"))?,
        },
        op => {
            if let Some(u) = op.unary() {
                Codelet::Unary {
                    op: u,
                    dtype: out_ty.dtype,
                }
            } else if let Some(b) = op.binary() {
                Codelet::Binary {
                    op: b,
                    dtype: in_ty(0).dtype,
                }
            } else {
                return Err(lw.unsupported(id, "not an element-wise op"));
            }
        }
    };
    Ok((codelet, scale))
}

/// Lowers the element-wise node `id` (or, when it is a fused root, its whole group).
pub(crate) fn lower(lw: &mut Lowerer, id: NodeId) -> Result<(), CompileError> {
    let node = lw.graph().node(id);
    // A cast to the type it already has is its input.
    if let Op::Cast { dtype } = node.op {
        if lw.graph().node(node.inputs[0]).ty.dtype == dtype {
            return permute::alias(lw, id, node.inputs[0]);
        }
    }
    let out_ty = node.ty.clone();
    // A fused root computes its whole group from the group's leaves.
    let (codelet, inputs, scale) = match lw.fused(id) {
        Some(group) => (group.codelet.clone(), group.leaves.clone(), 1.0),
        None => {
            let (codelet, scale) = codelet_of(lw, id)?;
            // A folded broadcast is read through its input.
            let inputs: Vec<NodeId> = node
                .inputs
                .iter()
                .map(|&i| super::folded_broadcast(lw.graph(), i).unwrap_or(i))
                .collect();
            (codelet, inputs, scale)
        }
    };
    let n_out = out_ty.num_elements() as u64;
    // The output is held like the first input of its shape that is a channel-grouped
    // feature map (no exchange along a chain of element-wise ops on convolution outputs);
    // an in-place update of a variable is row-major.
    let out_group = if lw.inplace_target(id).is_some() || is_onehot(&codelet) {
        1
    } else {
        let mut g = 1;
        for &i in &inputs {
            if lw.graph().node(i).ty.shape == out_ty.shape && !lw.is_unplaced(i) {
                let v = lw.value(i)?;
                if v.group > 1 {
                    g = v.group;
                    break;
                }
            }
        }
        g
    };
    let out_dims = storage_dims(out_ty.shape.dims(), out_group);
    // A variable or constant read here for the first time is laid out like an aligned input
    // that already has a row-major layout (when no matmul wants it otherwise): no exchange.
    let placed = inputs
        .iter()
        .find(|&&i| lw.graph().node(i).ty.shape == out_ty.shape && !lw.is_unplaced(i))
        .copied();
    let sibling = match placed {
        Some(i) if out_group == 1 => {
            let t = permute::materialized(lw, i)?;
            Some(mapping_of(lw, t))
        }
        _ => None,
    };
    for &i in &inputs {
        if lw.is_unplaced(i) {
            let aligned = lw.graph().node(i).ty.shape == out_ty.shape;
            let fallback = aligned.then(|| sibling.clone()).flatten();
            lw.place_source(i, fallback)?;
        }
    }
    // Each input as it is stored, and how the output's storage order reads it.
    let mut tensors = Vec::with_capacity(inputs.len());
    let mut reads = Vec::with_capacity(inputs.len());
    for &i in &inputs {
        let shape = lw.graph().node(i).ty.shape.clone();
        let (t, g) = permute::grouped(lw, i)?;
        let same_rank = shape.rank() == out_ty.shape.rank();
        let (t, g) = if g > 1 && (g != out_group || !same_rank) {
            (permute::materialized(lw, i)?, 1)
        } else if g <= 1 && per_image_channel(shape.dims(), out_ty.shape.dims(), out_group) {
            (permute::regrouped(lw, i, out_group)?, out_group)
        } else {
            (t, g)
        };
        reads.push(if g > 1 && shape == out_ty.shape {
            Read::Aligned
        } else if g > 1 {
            read_in(&grouped_strides(shape.dims(), out_ty.shape.dims(), g))
        } else {
            read_in(&storage_strides(
                shape.dims(),
                out_ty.shape.dims(),
                out_group,
            ))
        });
        tensors.push(t);
    }
    if let Codelet::OneHot { depth, .. } = codelet {
        reads = vec![Read::Broadcast {
            dims: vec![n_out / (depth as u64).max(1), depth as u64],
            strides: vec![1, 0],
        }];
    }
    // The output: the variable itself for an in-place update, else a new tensor mapped like
    // the first aligned input.
    let out = match lw.inplace_target(id).as_ref() {
        Some(var) => lw.value_of(*var)?.tensor,
        None => {
            let source = reads
                .iter()
                .zip(&tensors)
                .find(|(r, _)| matches!(r, Read::Aligned))
                .map(|(_, &t)| t);
            let mapping = match source {
                Some(t) => mapping_of(lw, t),
                None => lw.fresh_mapping(n_out, out_ty.dtype),
            };
            lw.new_tensor(
                node.name.clone(),
                Some(id),
                TensorKind::Activation,
                out_ty.dtype,
                Shape::new(out_dims),
                mapping,
            )
        }
    };
    let name = node.name.clone();
    let mut eb = ExchangeBuilder::default();
    let mut stagings: Vec<Staging> = tensors
        .iter()
        .enumerate()
        .map(|(k, &t)| Staging::new(t, format!("{name}/in{k}"), Some(id)))
        .collect();
    let is_onehot = is_onehot(&codelet);
    let needs_positions = is_onehot || reads.iter().any(|r| matches!(r, Read::Broadcast { .. }));
    let out_dtype = lw.tensor(out).dtype;
    let out_es = out_dtype.size_bytes() as u64;
    let vw = lw.target().vector_width(out_dtype);
    let nw = lw.target().worker_contexts;
    let slices = lw.tensor(out).slices.clone();
    // Each broadcast read's pattern over the output positions, shared by the vertices
    // that read through it.
    let global: Vec<Option<SharedPattern>> = reads
        .iter()
        .map(|r| match r {
            Read::Aligned => None,
            Read::Broadcast { dims, strides } => Some(SharedPattern {
                pattern: Arc::new(BroadcastPattern {
                    dims: dims.as_slice().into(),
                    strides: strides.as_slice().into(),
                }),
                local: None,
            }),
        })
        .collect();
    let mut tiles = Vec::with_capacity(slices.len());
    for slice in &slices {
        let tile = slice.tile.tile();
        let ranges: Vec<(u64, u64)> = slice
            .intervals
            .iter()
            .map(|iv| (iv.begin, u64::from(iv.len)))
            .collect();
        let n_t: u64 = ranges.iter().map(|r| r.1).sum();
        // A tile whose intervals each read a broadcast input through one box of its pattern,
        // the boxes' origins stepping regularly (a matmul output split by columns; a grouped
        // feature map's channel groups and batch elements), reads it through one pattern
        // over the tile's positions: no vertex splits at its intervals.
        let block: Option<Vec<Option<LocalPattern>>> =
            if needs_positions && !is_onehot && ranges.len() > 1 {
                reads
                    .iter()
                    .map(|r| match r {
                        Read::Aligned => Some(None),
                        Read::Broadcast { dims, strides } => {
                            tile_pattern(dims, strides, &ranges).map(Some)
                        }
                    })
                    .collect()
            } else {
                None
            };
        // How each input is read on this tile: through the tile's own pattern, the op's, or
        // aligned.
        let local: Option<Vec<Option<SharedPattern>>> = block.as_ref().map(|b| {
            b.iter()
                .zip(&global)
                .map(|(lp, g)| match lp {
                    Some(lp) => Some(SharedPattern {
                        pattern: Arc::new(BroadcastPattern {
                            dims: lp.dims.as_slice().into(),
                            strides: lp.strides.as_slice().into(),
                        }),
                        local: Some(lp.origin),
                    }),
                    None => g.clone(),
                })
                .collect()
        });
        let patterns: &[Option<SharedPattern>] = local.as_deref().unwrap_or(&global);
        // Tile-level operands and, for broadcast inputs, the staged input range.
        let mut tile_ops: Vec<(Operand, u64)> = Vec::with_capacity(reads.len());
        for (k, read) in reads.iter().enumerate() {
            match read {
                Read::Aligned => {
                    let op = stagings[k].operand(lw, &mut eb, tile, &ranges);
                    tile_ops.push((op, 0));
                }
                Read::Broadcast { dims, strides } => {
                    let (lo, hi) = match block.as_ref().and_then(|b| b[k].as_ref()) {
                        Some(lp) => {
                            let (a, b) = pattern_range(&lp.dims, &lp.strides, 0, n_t);
                            (lp.origin + a, lp.origin + b)
                        }
                        None => ranges
                            .iter()
                            .map(|&(b, l)| pattern_range(dims, strides, b, b + l))
                            .fold((u64::MAX, 0), |a, r| (a.0.min(r.0), a.1.max(r.1))),
                    };
                    let op = stagings[k].operand(lw, &mut eb, tile, &[(lo, hi + 1 - lo)]);
                    tile_ops.push((op, lo));
                }
            }
        }
        // Vertex pieces: one vertex the workers split among them (PopLibs' MultiVertex)
        // where the tile's elements are one run of positions; else worker slices, cut at
        // interval boundaries when positions matter.
        let cut_intervals = needs_positions && block.is_none();
        let mut cuts: Vec<(u64, u64, u8)> = Vec::new();
        let split = !is_onehot && (!cut_intervals || ranges.len() == 1);
        if split && n_t > 0 {
            cuts.push((0, n_t, workers::ALL_WORKERS));
        }
        let per_worker = if split {
            Vec::new()
        } else {
            worker_slices(n_t, vw, nw)
        };
        for (w, (a, b)) in per_worker.into_iter().enumerate() {
            if !cut_intervals {
                cuts.push((a, b, w as u8));
                continue;
            }
            let mut pos = 0;
            for &(_, l) in &ranges {
                let (s, e) = (pos.max(a), (pos + l).min(b));
                if s < e {
                    cuts.push((s, e, w as u8));
                }
                pos += l;
            }
        }
        let mut vertices = Vec::with_capacity(cuts.len());
        for (p0, p1, worker) in cuts {
            let len = p1 - p0;
            let out_begin = cut_intervals.then(|| global_index(&ranges, p0));
            let mut operands = Operands::new();
            let mut access = Accesses::new();
            for (k, pattern) in patterns.iter().enumerate() {
                let (op, lo) = tile_ops[k];
                let es = lw.tensor(op.tensor).dtype.size_bytes() as u64;
                match pattern {
                    None => {
                        operands.push(Operand {
                            tensor: op.tensor,
                            offset: op.offset + (p0 * es) as u32,
                            len: len as u32,
                        });
                        access.push(Access::Aligned);
                    }
                    Some(SharedPattern { pattern, local }) => {
                        // Where the pattern is evaluated, and the input index of its 0.
                        let (start, origin) = match *local {
                            Some(origin) => (p0, origin),
                            None => (out_begin.unwrap_or(0), 0),
                        };
                        let (vlo, vhi) =
                            pattern_range(&pattern.dims, &pattern.strides, start, start + len);
                        operands.push(Operand {
                            tensor: op.tensor,
                            offset: op.offset + ((origin + vlo - lo) * es) as u32,
                            len: (vhi + 1 - vlo) as u32,
                        });
                        access.push(Access::Broadcast(Box::new(BroadcastAccess {
                            pattern: pattern.clone(),
                            start,
                            base: vlo,
                        })));
                    }
                }
            }
            operands.push(Operand {
                tensor: out,
                offset: (p0 * out_es) as u32,
                len: len as u32,
            });
            vertices.push(Vertex {
                worker,
                operands,
                params: VertexParams::Map(MapParams {
                    out_begin,
                    inputs: access,
                    scale,
                }),
            });
        }
        tiles.push(TileWork::one_group(
            lw.tile_id(tile),
            codelet.clone(),
            vertices,
        ));
    }
    for s in stagings {
        s.finish(lw);
    }
    lw.superstep(&name, Some(id), eb.finish(), tiles);
    lw.set_grouped(id, out, out_group);
    Ok(())
}

fn is_onehot(c: &Codelet) -> bool {
    matches!(c, Codelet::OneHot { .. })
}

/// For each dimension of the output's storage order (`out` logical dims held grouped by
/// `group`, [`storage_dims`]), its size and the element stride of a row-major input of
/// logical dims `input` (NumPy-broadcast to `out`; 0 along a broadcast dimension).
fn storage_strides(input: &[usize], out: &[usize], group: u32) -> Vec<(u64, u64)> {
    let rank = out.len();
    // The input's strides over the output's logical dims.
    let mut st = vec![0u64; rank];
    let mut acc = 1u64;
    for d in (0..rank).rev() {
        let k = (d + input.len()).checked_sub(rank);
        if let Some(k) = k {
            let size = input[k] as u64;
            if size == out[d] as u64 && size != 1 {
                st[d] = acc;
            }
            acc *= size.max(1);
        }
    }
    let dims = storage_dims(out, group);
    if dims.len() == rank {
        return out.iter().map(|&d| d as u64).zip(st).collect();
    }
    // [C/g, N, S…, g]: the channel's stride splits into g·stride (groups) and stride.
    let g = u64::from(group);
    let mut v = vec![(dims[0] as u64, st[1] * g), (dims[1] as u64, st[0])];
    v.extend((2..rank).map(|d| (out[d] as u64, st[d])));
    v.push((g, st[1]));
    v
}

/// Whether a row-major input of logical `input` dims, broadcast over a feature map of `out`
/// dims held grouped by `group`, has a value per image and channel (`[N, C, 1…]` under
/// `[N, C, S…]`, several images): read in the map's storage order, each of its values is a
/// piece of `group` elements, so it is read through a grouped copy instead
/// ([`permute::regrouped`]), whose pieces for a run of the map are one region.
fn per_image_channel(input: &[usize], out: &[usize], group: u32) -> bool {
    group > 1
        && input.len() == out.len()
        && input != out
        && out.first().is_some_and(|&n| n > 1)
        && input[..2] == out[..2]
        && ipusim_exe::layout::can_group(out, group)
}

/// For each dimension of the output's storage order (`out` logical dims held grouped by
/// `group`), its size and the element stride of an input of logical dims `input` (of the
/// same rank, each dimension the output's or 1) held grouped by `group` too (storage
/// `[C/g, N, S…, g]`; 0 along a broadcast dimension).
fn grouped_strides(input: &[usize], out: &[usize], group: u32) -> Vec<(u64, u64)> {
    let g = u64::from(group);
    let (n_in, c_in) = (input[0] as u64, input[1] as u64);
    let along = |size: u64, full: usize, stride: u64| {
        if size == full as u64 && size != 1 {
            stride
        } else {
            0
        }
    };
    // The input's element strides along its spatial dims (`g` elements per position).
    let mut spatial = vec![0u64; input.len().saturating_sub(2)];
    let mut acc = 1u64;
    for d in (2..input.len()).rev() {
        spatial[d - 2] = along(input[d] as u64, out[d], acc * g);
        acc *= input[d] as u64;
    }
    let mut v = vec![
        (out[1] as u64 / g, along(c_in, out[1], n_in * acc * g)),
        (out[0] as u64, along(n_in, out[0], acc * g)),
    ];
    v.extend((2..out.len()).map(|d| (out[d] as u64, spatial[d - 2])));
    v.push((g, if c_in == out[1] as u64 { 1 } else { 0 }));
    v
}

/// How an input is read whose element stride along each output dimension (in the output's
/// storage order) is given: aligned when it is the output's own order, else through a
/// broadcast pattern (dims merged where they read consecutively or are both broadcast).
fn read_in(dims_strides: &[(u64, u64)]) -> Read {
    let mut dims: Vec<u64> = Vec::new();
    let mut st: Vec<u64> = Vec::new();
    for &(size, s) in dims_strides {
        if size == 1 {
            continue;
        }
        if let (Some(pd), Some(ps)) = (dims.last_mut(), st.last_mut()) {
            if (*ps == 0 && s == 0) || (s != 0 && *ps == s * size) {
                *pd *= size;
                *ps = s;
                continue;
            }
        }
        dims.push(size);
        st.push(s);
    }
    if st.iter().all(|&s| s != 0) && dims.len() <= 1 && st.first().is_none_or(|&s| s == 1) {
        return Read::Aligned;
    }
    if dims.is_empty() {
        dims.push(1);
        st.push(0);
    }
    Read::Broadcast { dims, strides: st }
}

/// A broadcast read's pattern as the vertices hold it (shared), and the input index of
/// its position 0 when it is a tile's own pattern (`None`: the op's, evaluated at output
/// positions).
#[derive(Clone)]
struct SharedPattern {
    pattern: Arc<BroadcastPattern>,
    local: Option<u64>,
}

/// A broadcast input's pattern over a tile's own element positions (its slice's intervals
/// one after the other): output position `p` of the tile reads input index
/// `origin + Σ coord_d(p) · strides[d]`, `coord` in `dims`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct LocalPattern {
    dims: Vec<u64>,
    strides: Vec<u64>,
    origin: u64,
}

/// The pattern of the global broadcast `(dims, strides)` over the interval `[b, b + l)`
/// when the interval is a box of it: whole inner dimensions under a run of one dimension.
fn interval_pattern(dims: &[u64], strides: &[u64], b: u64, l: u64) -> Option<LocalPattern> {
    let (k, run, origin) = interval_box(dims, strides, b, l)?;
    let mut d = vec![run];
    let mut s = vec![strides[k]];
    d.extend_from_slice(&dims[k + 1..]);
    s.extend_from_slice(&strides[k + 1..]);
    Some(LocalPattern {
        dims: d,
        strides: s,
        origin,
    })
}

/// [`interval_pattern`] without building it: the dimension `k` of the run, its length and
/// the interval's origin (the pattern is `[run] ++ dims[k + 1..]` with strides
/// `[strides[k]] ++ strides[k + 1..]`). Called for every interval of every tile of an
/// element-wise op's broadcast operands, it allocates nothing.
fn interval_box(dims: &[u64], strides: &[u64], b: u64, l: u64) -> Option<(usize, u64, u64)> {
    let n = dims.len();
    // The interval's first element's coordinates, innermost first: its origin, then the
    // innermost dimension whose run holds the interval with every inner coordinate zero.
    let mut origin = 0u64;
    let mut rem = b;
    for d in (0..n).rev() {
        let size = dims[d].max(1);
        origin += (rem % size) * strides[d];
        rem /= size;
    }
    let (mut inner, mut rem, mut aligned) = (1u64, b, true);
    for k in (0..n).rev() {
        let size = dims[k].max(1);
        let coord = rem % size;
        rem /= size;
        if aligned && inner > 0 && l.is_multiple_of(inner) && coord + l / inner <= dims[k] {
            return Some((k, l / inner, origin));
        }
        aligned &= coord == 0;
        inner *= size;
    }
    None
}

impl LocalPattern {
    /// Whether this is the pattern [`interval_box`] describes by `(k, run)` over
    /// `(dims, strides)`.
    fn is_box(&self, dims: &[u64], strides: &[u64], (k, run): (usize, u64)) -> bool {
        self.dims.first() == Some(&run)
            && self.strides.first() == Some(&strides[k])
            && self.dims[1..] == dims[k + 1..]
            && self.strides[1..] == strides[k + 1..]
    }
}

/// The pattern of the global broadcast `(dims, strides)` over a tile's positions, when its
/// intervals (`ranges`, in slice order) all have one box pattern whose origins step
/// regularly (one or two levels: `origin_i = o_0 + (i mod P)·s1 + (i div P)·s2`): one
/// vertex per worker then reads the tile's whole slice, as PopLibs' 2-D broadcast vertices
/// (`BroadcastVectorInner2D`) read many regions.
fn tile_pattern(dims: &[u64], strides: &[u64], ranges: &[(u64, u64)]) -> Option<LocalPattern> {
    // A scalar read (every stride 0) reads its one element at every position, however the
    // tile's intervals fall.
    if strides.iter().all(|&s| s == 0) {
        return Some(LocalPattern {
            dims: vec![ranges.iter().map(|r| r.1).sum()],
            strides: vec![0],
            origin: 0,
        });
    }
    let first = interval_pattern(dims, strides, ranges.first()?.0, ranges.first()?.1)?;
    let mut origins = Vec::with_capacity(ranges.len());
    for &(b, l) in ranges {
        let (k, run, origin) = interval_box(dims, strides, b, l)?;
        if !first.is_box(dims, strides, (k, run)) {
            return None;
        }
        origins.push(origin);
    }
    let k = origins.len();
    if k == 1 {
        return Some(first);
    }
    let step = |i: usize| origins[i].checked_sub(origins[i - 1]);
    let s1 = step(1)?;
    let period = (1..k).find(|&i| step(i) != Some(s1)).unwrap_or(k);
    let s2 = if period < k {
        origins[period].checked_sub(origins[0])?
    } else {
        0
    };
    if !k.is_multiple_of(period) {
        return None;
    }
    let fits = (0..k)
        .all(|i| origins[i] == origins[0] + (i % period) as u64 * s1 + (i / period) as u64 * s2);
    if !fits {
        return None;
    }
    let (mut d, mut s) = (vec![(k / period) as u64, period as u64], vec![s2, s1]);
    d.extend_from_slice(&first.dims);
    s.extend_from_slice(&first.strides);
    Some(LocalPattern {
        dims: d,
        strides: s,
        origin: origins[0],
    })
}

/// The mapping of an existing tensor.
pub(crate) fn mapping_of(lw: &Lowerer, t: TensorId) -> Mapping {
    Mapping {
        tiles: lw
            .tensor(t)
            .slices
            .iter()
            .map(|s| {
                (
                    s.tile.tile(),
                    s.intervals.iter().map(|i| (i.begin, i.end())).collect(),
                )
            })
            .collect(),
    }
}

/// The global element index at memory position `pos` of a tile slice with `ranges`.
fn global_index(ranges: &[(u64, u64)], pos: u64) -> u64 {
    let mut at = 0;
    for &(b, l) in ranges {
        if pos < at + l {
            return b + (pos - at);
        }
        at += l;
    }
    ranges.last().map_or(0, |r| r.0 + r.1)
}

/// The smallest and largest input index read by global outputs `[s, e)` (`e > s`).
pub(crate) fn pattern_range(dims: &[u64], strides: &[u64], s: u64, e: u64) -> (u64, u64) {
    if dims.is_empty() || e <= s {
        return (0, 0);
    }
    let inner: u64 = dims[1..].iter().product::<u64>().max(1);
    let st = strides[0];
    let (c0, c1) = (s / inner, (e - 1) / inner);
    let rest = (&dims[1..], &strides[1..]);
    if c0 == c1 {
        let (a, b) = pattern_range(rest.0, rest.1, s - c0 * inner, e - c0 * inner);
        return (a + c0 * st, b + c0 * st);
    }
    let full_max: u64 = rest
        .0
        .iter()
        .zip(rest.1)
        .map(|(&d, &s)| (d.max(1) - 1) * s)
        .sum();
    let (a1, b1) = if s == c0 * inner {
        (0, full_max)
    } else {
        pattern_range(rest.0, rest.1, s - c0 * inner, inner)
    };
    let (a2, b2) = if e == (c1 + 1) * inner {
        (0, full_max)
    } else {
        pattern_range(rest.0, rest.1, 0, e - c1 * inner)
    };
    let mut lo = (a1 + c0 * st).min(a2 + c1 * st);
    let mut hi = (b1 + c0 * st).max(b2 + c1 * st);
    if c1 > c0 + 1 {
        lo = lo.min((c0 + 1) * st);
        hi = hi.max((c1 - 1) * st + full_max);
    }
    (lo, hi)
}

#[cfg(test)]
#[path = "elementwise_tests.rs"]
mod tests;

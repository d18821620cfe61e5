//! Row-wise ops along the last axis: `Softmax`, `LogSoftmax`, `SparseSoftmaxCrossEntropy`,
//! and `ArgMax` over the last axis.
//!
//! Each row is owned by the tile holding its first element; a tile's rows are read in place
//! when they already sit there contiguously, else gathered by an exchange. A softmax along
//! another axis is lowered as a transpose to the last axis, the row softmax, and the
//! transpose back. The cross-entropy's per-row losses (f32) are then summed by the
//! reduction of [`super::reduce`] (its documented order), scaled by `1/n` for the mean.
//! Softmax rows too long for one worker are split over tiles by [`super::split_rows`],
//! whose per-row sums and losses are row ops of this module.

use crate::codelets::{BlockParams, Codelet, VertexParams};
use crate::executable::{Operand, Operands, TensorId, TensorKind, TileWork, Vertex};
use crate::lower::core::Lowerer;
use crate::lower::kit::mapping::{worker_slices, Mapping};
use crate::lower::kit::reduction::Spec;
use crate::lower::kit::stage::{ExchangeBuilder, Staging};
use ipusim_ir::{DType, NodeId, Shape};

/// Rows `[p0, p1)` owned by `tile`.
struct Rows {
    tile: u32,
    p0: u64,
    p1: u64,
}

/// The rows of a `[p, r]` view of `input`, each owned by the tile of its first element.
fn own_rows(lw: &Lowerer, input: TensorId, p: u64, r: u64) -> Vec<Rows> {
    let mut owned: Vec<(u32, u64)> = Vec::new();
    for s in lw.index(input).iter() {
        let first = s.begin.div_ceil(r.max(1));
        let end = if r == 0 { 0 } else { s.end.div_ceil(r) };
        for row in first..end.min(p) {
            owned.push((s.tile, row));
        }
    }
    owned.sort_unstable_by_key(|&(_, row)| row);
    let mut rows: Vec<Rows> = Vec::new();
    for (tile, row) in owned {
        match rows.last_mut() {
            Some(last) if last.tile == tile && last.p1 == row => last.p1 = row + 1,
            _ => rows.push(Rows {
                tile,
                p0: row,
                p1: row + 1,
            }),
        }
    }
    rows
}

/// Row vertices over `nrows` rows of `r` elements: rows split over the workers.
fn row_vertices(
    lw: &Lowerer,
    xin: Operand,
    per_row: &[Operand],
    (out, out_pos, out_per_row): (TensorId, u64, u64),
    nrows: u64,
    r: u64,
) -> Vec<Vertex> {
    let ies = lw.tensor(xin.tensor).dtype.size_bytes() as u64;
    let oes = lw.tensor(out).dtype.size_bytes() as u64;
    worker_slices(nrows, 1, lw.target().worker_contexts)
        .into_iter()
        .enumerate()
        .map(|(w, (a, b))| {
            let mut operands = Operands::from_iter([Operand {
                tensor: xin.tensor,
                offset: xin.offset + (a * r * ies) as u32,
                len: ((b - a) * r) as u32,
            }]);
            for o in per_row {
                let es = lw.tensor(o.tensor).dtype.size_bytes() as u64;
                operands.push(Operand {
                    tensor: o.tensor,
                    offset: o.offset + (a * es) as u32,
                    len: (b - a) as u32,
                });
            }
            operands.push(Operand {
                tensor: out,
                offset: ((out_pos + a * out_per_row) * oes) as u32,
                len: ((b - a) * out_per_row) as u32,
            });
            Vertex {
                worker: w as u8,
                operands,
                params: VertexParams::Block(BlockParams::new((b - a) as u32, r as u32, 1, (0, 1))),
            }
        })
        .collect()
}

/// One row op: `codelet` over the `p` rows of `r` elements of `input` (and one element per
/// row of each `per_row` tensor: labels, statistics), writing `out.3` outputs per row into
/// a new tensor of kind, dtype and shape `out.0..3`.
pub(crate) struct RowOp<'a> {
    pub node: NodeId,
    pub name: &'a str,
    pub input: TensorId,
    /// Each with the suffix of its staging tensor's name.
    pub per_row: Vec<(TensorId, &'static str)>,
    pub p: u64,
    pub r: u64,
    pub codelet: Codelet,
    pub out: (TensorKind, DType, Shape, u64),
}

/// Lowers a row op on the rows' owners; returns the output tensor.
pub(crate) fn row_op(lw: &mut Lowerer, op: RowOp) -> TensorId {
    let (r, per_row) = (op.r, op.out.3);
    let rows = own_rows(lw, op.input, op.p, r);
    let pieces = rows
        .iter()
        .map(|x| (x.tile, x.p0 * per_row, x.p1 * per_row))
        .collect();
    let (kind, dtype, shape, _) = op.out;
    let out = lw.new_tensor(
        op.name.to_string(),
        Some(op.node),
        kind,
        dtype,
        shape,
        Mapping::from_pieces(pieces),
    );
    let mut eb = ExchangeBuilder::default();
    let mut sx = Staging::new(op.input, format!("{}/in", op.name), Some(op.node));
    let mut sl: Vec<Staging> = op
        .per_row
        .iter()
        .map(|&(t, what)| Staging::new(t, format!("{}/{what}", op.name), Some(op.node)))
        .collect();
    let mut tiles = Vec::new();
    for x in &rows {
        let xin = sx.operand(lw, &mut eb, x.tile, &[(x.p0 * r, (x.p1 - x.p0) * r)]);
        let lin: Vec<Operand> = sl
            .iter_mut()
            .map(|s| s.operand(lw, &mut eb, x.tile, &[(x.p0, x.p1 - x.p0)]))
            .collect();
        let out_pos = lw.position(out, x.p0 * per_row);
        let vertices = row_vertices(lw, xin, &lin, (out, out_pos, per_row), x.p1 - x.p0, r);
        tiles.push(TileWork::one_group(
            lw.tile_id(x.tile),
            op.codelet.clone(),
            vertices,
        ));
    }
    sx.finish(lw);
    for s in sl {
        s.finish(lw);
    }
    lw.superstep(op.name, Some(op.node), eb.finish(), tiles);
    out
}

/// ArgMax over the last axis (`spec.q == 1`): rows gathered on their owners.
pub(crate) fn argmax_rows(lw: &mut Lowerer, spec: &Spec, input: TensorId) -> TensorId {
    row_op(
        lw,
        RowOp {
            node: spec.node,
            name: &spec.name,
            input,
            per_row: Vec::new(),
            p: spec.p,
            r: spec.r,
            codelet: Codelet::ArgMax { dtype: spec.input },
            out: (TensorKind::Activation, DType::I32, spec.shape.clone(), 1),
        },
    )
}

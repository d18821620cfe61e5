//! Softmax, log-softmax and cross-entropy rows of [`SPLIT_ROW`] elements or more, split over
//! the tiles and workers that hold them, where [`super::rows`] gives a whole row to one
//! worker (a ResNet's 1,000 classes at batch 1: one worker of one tile for the whole row).
//!
//! The stages compute exactly what the one-vertex row codelets compute — the same
//! operations, roundings and sum order (`ipusim_exe::codelets::SoftmaxStage`) — so values
//! and flags do not depend on the split:
//!
//! 1. each row's maximum `m`, a `Reduce` Max by the cross-tile reduction of
//!    [`super::reduction`] (IEEE `maximum` gives the same bits in any order);
//! 2. `e_i = exp32(x_i − m)` where each element is (`SoftmaxExp`), a tile's pieces of rows
//!    split over its workers;
//! 3. each row's sum `s`, its `e` gathered on the tile of the row's first element and summed
//!    sequentially in ascending order by a `Reduce` Sum ([`super::rows::row_op`]): the
//!    one-vertex softmax's order;
//! 4. the output where each element is, `round(e_i / s)` (`SoftmaxDiv`) or
//!    `round(x_i − m − ln s)` (`LogSoftmaxSub`); for a cross-entropy, each row's loss on the
//!    tile of its first element (`CrossEntropyLoss`).
//!
//! PopLibs computes a softmax the same way, as reductions and element-wise maps over the
//! tensor's own tile mapping (popnn `NonLinearity.cpp`, `softmaxImpl`: `popops::reduce` with
//! `MAX`, a subtraction and `exp`, `popops::reduce` with `ADD`, a division), not as one
//! vertex per row.

use crate::codelets::{BlockParams, Codelet, ReduceOp, SoftmaxStage, VertexParams};
use crate::executable::{Operand, Operands, TensorId, TensorKind, TileWork, Vertex};
use crate::lower::core::Lowerer;
use crate::lower::kit::mapping::{worker_slices, Mapping};
use crate::lower::kit::reduction::{self as reduce, Kind, Spec};
use crate::lower::kit::rows::{row_op, RowOp};
use crate::lower::kit::stage::{ExchangeBuilder, Staging};
use ipusim_ir::{DType, NodeId, Shape};
use std::collections::BTreeMap;

/// The shortest row split over tiles and workers (our choice: from 256 elements the work a
/// split takes off the row's worker, at least 10 cycles per element of the one-vertex
/// softmax's 11, outweighs the three more supersteps' syncs and exchanges).
pub(crate) const SPLIT_ROW: u64 = 256;

/// A piece of one row on one worker of the tile holding it: elements `[begin, begin + len)`
/// of the flat `[p, r]` input.
struct Piece {
    tile: u32,
    worker: u8,
    row: u64,
    begin: u64,
    len: u64,
}

/// The split row op's operands: `input` seen as `p` rows of `r` elements.
pub(crate) struct SplitRows<'a> {
    pub node: NodeId,
    pub name: &'a str,
    pub input: TensorId,
    pub p: u64,
    pub r: u64,
}

impl SplitRows<'_> {
    /// Softmax (or log-softmax when `log`) of the rows, an activation of `shape` mapped as
    /// the input is.
    pub(crate) fn softmax(&self, lw: &mut Lowerer, log: bool, shape: &Shape) -> TensorId {
        let dtype = lw.tensor(self.input).dtype;
        let (pieces, m, e, s) = self.internals(lw);
        let out = lw.new_tensor(
            self.name.to_string(),
            Some(self.node),
            TensorKind::Activation,
            dtype,
            shape.clone(),
            self.mapping(lw),
        );
        let (stage, elements, per_row) = if log {
            (
                SoftmaxStage::LogSub,
                self.input,
                vec![(m, "max"), (s, "sum")],
            )
        } else {
            (SoftmaxStage::Div, e, vec![(s, "sum")])
        };
        let codelet = Codelet::SoftmaxStage { stage, dtype };
        let name = format!("{}/out", self.name);
        self.stage(lw, &name, &pieces, codelet, elements, &per_row, out);
        out
    }

    /// Each row's cross-entropy against `labels` (one i32 per row), f32 partials of `p`
    /// elements on the rows' first tiles.
    pub(crate) fn cross_entropy(&self, lw: &mut Lowerer, labels: TensorId) -> TensorId {
        let dtype = lw.tensor(self.input).dtype;
        let (_, m, _, s) = self.internals(lw);
        row_op(
            lw,
            RowOp {
                node: self.node,
                name: &format!("{}/loss", self.name),
                input: self.input,
                per_row: vec![(labels, "labels"), (m, "max"), (s, "sum")],
                p: self.p,
                r: self.r,
                codelet: Codelet::SoftmaxStage {
                    stage: SoftmaxStage::Loss,
                    dtype,
                },
                out: (
                    TensorKind::Partials,
                    DType::F32,
                    Shape::new([self.p as usize]),
                    1,
                ),
            },
        )
    }

    /// Stages 1–3: the pieces of rows, the maxima `m`, `exp(x − m)` and the sums.
    fn internals(&self, lw: &mut Lowerer) -> (Vec<Piece>, TensorId, TensorId, TensorId) {
        let pieces = self.pieces(lw);
        let m = self.maxima(lw);
        let e = self.exp(lw, &pieces, m);
        let s = self.sums(lw, e);
        (pieces, m, e, s)
    }

    /// The input's mapping (the tiles and element ranges it has).
    fn mapping(&self, lw: &Lowerer) -> Mapping {
        Mapping::from_pieces(
            lw.index(self.input)
                .iter()
                .map(|s| (s.tile, s.begin, s.end))
                .collect(),
        )
    }

    /// Every tile's elements of the input in order, split over its workers as evenly as
    /// whole elements allow, and cut where a row ends.
    fn pieces(&self, lw: &Lowerer) -> Vec<Piece> {
        let r = self.r.max(1);
        let mut by_tile: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
        for s in lw.index(self.input).iter() {
            by_tile.entry(s.tile).or_default().push((s.begin, s.end));
        }
        let workers = lw.target().worker_contexts;
        let mut out = Vec::new();
        for (tile, segs) in by_tile {
            let n: u64 = segs.iter().map(|&(b, e)| e - b).sum();
            let slices = worker_slices(n, 1, workers);
            let (mut w, mut at) = (0usize, 0u64);
            for (b, e) in segs {
                let mut i = b;
                while i < e {
                    while w + 1 < slices.len() && at >= slices[w].1 {
                        w += 1;
                    }
                    let row = i / r;
                    let end = e.min((row + 1) * r).min(i + (slices[w].1 - at));
                    out.push(Piece {
                        tile,
                        worker: w as u8,
                        row,
                        begin: i,
                        len: end - i,
                    });
                    at += end - i;
                    i = end;
                }
            }
        }
        out
    }

    /// Stage 1: the rows' maxima, in the input's type.
    fn maxima(&self, lw: &mut Lowerer) -> TensorId {
        let dtype = lw.tensor(self.input).dtype;
        let spec = Spec {
            node: self.node,
            name: format!("{}/max", self.name),
            p: self.p,
            outer: 1,
            r: self.r,
            q: 1,
            kind: Kind::Max,
            input: dtype,
            acc: dtype,
            output: dtype,
            scale: 1.0,
            shape: Shape::new([self.p as usize]),
        };
        reduce::reduce(lw, &spec, self.input)
    }

    /// Stage 2: `exp(x − m)` in f32, mapped as the input is.
    fn exp(&self, lw: &mut Lowerer, pieces: &[Piece], m: TensorId) -> TensorId {
        let dtype = lw.tensor(self.input).dtype;
        let name = format!("{}/exp", self.name);
        let e = lw.new_tensor(
            name.clone(),
            Some(self.node),
            TensorKind::Partials,
            DType::F32,
            Shape::new([(self.p * self.r) as usize]),
            self.mapping(lw),
        );
        let codelet = Codelet::SoftmaxStage {
            stage: SoftmaxStage::Exp,
            dtype,
        };
        self.stage(lw, &name, pieces, codelet, self.input, &[(m, "max")], e);
        e
    }

    /// Stage 3: each row's sum of `e`, sequential in ascending order on the tile of its
    /// first element.
    fn sums(&self, lw: &mut Lowerer, e: TensorId) -> TensorId {
        row_op(
            lw,
            RowOp {
                node: self.node,
                name: &format!("{}/sum", self.name),
                input: e,
                per_row: Vec::new(),
                p: self.p,
                r: self.r,
                codelet: Codelet::Reduce {
                    op: ReduceOp::Sum,
                    input: DType::F32,
                    acc: DType::F32,
                    output: DType::F32,
                },
                out: (
                    TensorKind::Partials,
                    DType::F32,
                    Shape::new([self.p as usize]),
                    1,
                ),
            },
        )
    }

    /// One superstep of `codelet` over the pieces: operands the piece's elements of
    /// `elements` (in place: it is mapped as the input is), the piece's row of each
    /// `per_row` tensor (staged once per tile and run of rows), and the piece's elements of
    /// `out`.
    #[allow(clippy::too_many_arguments)]
    fn stage(
        &self,
        lw: &mut Lowerer,
        name: &str,
        pieces: &[Piece],
        codelet: Codelet,
        elements: TensorId,
        per_row: &[(TensorId, &str)],
        out: TensorId,
    ) {
        let mut eb = ExchangeBuilder::default();
        let mut staged: Vec<Staging> = per_row
            .iter()
            .map(|&(t, what)| Staging::new(t, format!("{name}/{what}"), Some(self.node)))
            .collect();
        let (es, os) = (
            lw.tensor(elements).dtype.size_bytes() as u64,
            lw.tensor(out).dtype.size_bytes() as u64,
        );
        let mut tiles = Vec::new();
        for on_tile in pieces.chunk_by(|a, b| a.tile == b.tile) {
            let tile = on_tile[0].tile;
            // The tile's rows, in runs of consecutive rows, each run's row operands staged
            // once: (first row, rows, one operand per `per_row` tensor).
            let mut rows: Vec<u64> = on_tile.iter().map(|x| x.row).collect();
            rows.sort_unstable();
            rows.dedup();
            let mut runs: Vec<(u64, u64, Vec<Operand>)> = Vec::new();
            for run in rows.chunk_by(|a, b| a + 1 == *b) {
                let (first, n) = (run[0], run.len() as u64);
                let ops = staged
                    .iter_mut()
                    .map(|s| s.operand(lw, &mut eb, tile, &[(first, n)]))
                    .collect();
                runs.push((first, n, ops));
            }
            let vertices = on_tile
                .iter()
                .map(|x| {
                    let (first, _, ops) = runs
                        .iter()
                        .find(|(f, n, _)| (*f..f + n).contains(&x.row))
                        .expect("every piece's row is in a run");
                    let mut operands = Operands::from_iter([Operand {
                        tensor: elements,
                        offset: (lw.position(elements, x.begin) * es) as u32,
                        len: x.len as u32,
                    }]);
                    for o in ops {
                        let rs = lw.tensor(o.tensor).dtype.size_bytes() as u64;
                        operands.push(Operand {
                            tensor: o.tensor,
                            offset: o.offset + ((x.row - first) * rs) as u32,
                            len: 1,
                        });
                    }
                    operands.push(Operand {
                        tensor: out,
                        offset: (lw.position(out, x.begin) * os) as u32,
                        len: x.len as u32,
                    });
                    Vertex {
                        worker: x.worker,
                        operands,
                        params: VertexParams::Block(BlockParams::new(1, x.len as u32, 1, (0, 1))),
                    }
                })
                .collect();
            tiles.push(TileWork::one_group(
                lw.tile_id(tile),
                codelet.clone(),
                vertices,
            ));
        }
        for s in staged {
            s.finish(lw);
        }
        lw.superstep(name, Some(self.node), eb.finish(), tiles);
    }
}

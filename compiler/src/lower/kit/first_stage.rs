//! A reduction pass's description ([`Spec`]) and its first stage on each tile: the tile's
//! blocks of input rows shared between its workers as PopLibs shares them ([`share`]), the
//! order of their sums as [`super::reduction`] documents it.

use crate::codelets::{Codelet, ReduceOp};
use crate::executable::{TensorId, TileWork, VertexGroup};
use crate::lower::core::Lowerer;
use crate::lower::kit::block::{block_len, block_vertex, block_vertices};
use crate::lower::kit::share;
use crate::lower::kit::stage::TileScratch;
use ipusim_ir::{DType, NodeId, Shape};

/// What is reduced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Sum,
    /// The sum of the squares of the input (the first pass's local sums square each element;
    /// the later stages add the partial sums).
    SumSquares,
    Max,
    ArgMax,
}

impl Kind {
    /// What the stages after the first do with its partials, which are in the accumulation
    /// type and squared already: a sum of squares adds them.
    pub(crate) fn of_partials(self) -> Kind {
        match self {
            Kind::SumSquares => Kind::Sum,
            k => k,
        }
    }
}

/// One `[P, R, Q]` reduction pass. When `outer > 1`, `P` is `outer × (P / outer)` and its
/// first factor is reduced too: the pass sums the elements `(o, k, r, q)` of every `o` and
/// `r` into output `(k, q)` (a reduction over two separated runs of axes, the outer one
/// leading, as a batch norm's statistics over the `N` and the spatial axes of `[N, C, H, W]`).
#[derive(Clone)]
pub(crate) struct Spec {
    pub node: NodeId,
    pub name: String,
    pub p: u64,
    pub outer: u64,
    pub r: u64,
    pub q: u64,
    pub kind: Kind,
    pub input: DType,
    pub acc: DType,
    pub output: DType,
    pub scale: f64,
    pub shape: Shape,
}

/// A stage-1 local reduction block: `groups × count × width` input elements at slice
/// position `pos` of the input on `tile`, repeated for `outer` consecutive outer indices
/// `stride` elements apart, producing `groups × width` outputs from `o_begin`.
pub(crate) struct LocalBlock {
    pub tile: u32,
    pub pos: u64,
    pub groups: u64,
    pub count: u64,
    pub width: u64,
    pub outer: u64,
    pub stride: u64,
    pub o_begin: u64,
    pub key: u64,
}

impl LocalBlock {
    /// The elements its vertex reads ([`block_len`]).
    fn len(&self) -> u64 {
        block_len(
            (self.groups, self.count, self.width),
            (self.outer, self.stride),
        )
    }

    /// Takes `next` in as a further repeat when it is the next outer index's block of the
    /// same outputs on the same tile, at the same stride (PopLibs' strided reduce sums such
    /// repeats with its outer strides: a batch norm's statistics over the images a tile
    /// holds). `r` is the rows per outer index.
    pub(crate) fn absorb(&mut self, next: &LocalBlock, r: u64) -> bool {
        let size = self.groups * self.count * self.width;
        let stride = if self.outer == 1 {
            next.pos.saturating_sub(self.pos)
        } else {
            self.stride
        };
        let fits = self.tile == next.tile
            && (self.groups, self.count, self.width, self.o_begin)
                == (next.groups, next.count, next.width, next.o_begin)
            && next.key == self.key + self.outer * r
            && stride >= size
            && next.pos == self.pos + self.outer * stride
            && u32::try_from(stride).is_ok();
        if fits {
            self.stride = stride;
            self.outer += 1;
        }
        fits
    }
}

pub(crate) fn codelet(spec: &Spec, output: DType) -> Codelet {
    kind_codelet(spec.kind, (spec.input, spec.acc, output))
}

/// The codelet reducing by `kind` from `input` in `acc` into `output`.
fn kind_codelet(kind: Kind, (input, acc, output): (DType, DType, DType)) -> Codelet {
    let op = match kind {
        Kind::Sum => ReduceOp::Sum,
        Kind::SumSquares => ReduceOp::SquareAdd,
        Kind::Max => ReduceOp::Max,
        Kind::ArgMax => return Codelet::ArgMax { dtype: input },
    };
    Codelet::Reduce {
        op,
        input,
        acc,
        output,
    }
}

/// A scratch tensor of the pass in the accumulation type, named `{pass}/{stage}`.
pub(crate) fn scratch(lw: &mut Lowerer, spec: &Spec, stage: &str) -> TileScratch {
    TileScratch::new(
        lw,
        format!("{}/{stage}", spec.name),
        Some(spec.node),
        spec.acc,
    )
}

/// Stage-1 work: the compute set of the tiles' first-stage vertices and, when a tile cut a
/// reduction by rows, the second compute set that sums the cut pieces' partials (PopLibs'
/// `Reduce_Second_Stage`).
pub(crate) struct LocalWork {
    first: Vec<TileWork>,
    second: Vec<TileWork>,
}

impl LocalWork {
    /// Emits the compute set `name` and, if any tile needs it, `{name}/second`.
    /// (Among lanes, a pass without a second stage holds a gap in its place.)
    pub(crate) fn emit(self, lw: &mut Lowerer, name: &str, node: NodeId) {
        lw.superstep(name, Some(node), Vec::new(), self.first);
        if self.second.is_empty() {
            lw.lane_gap();
        } else {
            lw.superstep(
                &format!("{name}/second"),
                Some(node),
                Vec::new(),
                self.second,
            );
        }
    }
}

/// Stage-1 work: `Reduce` vertices reading each block from `input` and writing its
/// `groups × width` results in `output` at the tensor and position `dst` gives it, the
/// blocks of one tile in one work entry (a tile of a batch norm's statistics holds dozens of
/// blocks), shared between the tile's workers as PopLibs shares them ([`share`]): the
/// blocks divided by columns into pieces, then either each piece whole on the worker
/// [`share::distribute`] gives it (as many pieces as workers or more) or each on a worker of
/// its own, the costliest cut by rows into runs summed on the free workers and added up in a
/// second compute set. A tile of blocks of several groups (whole rows of consecutive kept
/// indices) is not divided by columns: with fewer blocks than workers each block is a group
/// of its own split among the workers, as is every block of an `ArgMax`.
pub(crate) fn local_work(
    lw: &mut Lowerer,
    spec: &Spec,
    input: TensorId,
    blocks: &[LocalBlock],
    (output, scale): (DType, f64),
    mut dst: impl FnMut(&mut Lowerer, &LocalBlock) -> (TensorId, u64),
) -> LocalWork {
    let nw = lw.reduction_workers();
    let add = matches!(spec.kind, Kind::Sum | Kind::SumSquares);
    let vw = lw.target().vector_width(output);
    let mut second_partials: Option<TileScratch> = None;
    let mut work = LocalWork {
        first: Vec::new(),
        second: Vec::new(),
    };
    for run in blocks.chunk_by(|a, b| a.tile == b.tile) {
        let tile = run[0].tile;
        let outs: Vec<(TensorId, u64)> = run.iter().map(|b| dst(lw, b)).collect();
        let grouped = run.iter().any(|b| b.groups > 1);
        if spec.kind == Kind::ArgMax || (grouped && run.len() < nw) {
            let groups = run
                .iter()
                .zip(&outs)
                .map(|(b, &at)| VertexGroup {
                    codelet: codelet(spec, output),
                    vertices: block_vertices(
                        lw,
                        (input, b.pos),
                        at,
                        (b.groups, b.count, b.width),
                        (b.outer, b.stride),
                        scale,
                    ),
                })
                .collect();
            work.first.push(TileWork {
                tile: lw.tile_id(tile),
                groups,
                cycles: 0,
            });
            continue;
        }
        // Pieces `(block, first column, end column)`: whole blocks of several groups, else
        // PopLibs' division by columns in grains of twice the input's vector width for an
        // add, once for a max (`findGrainSizeForOp`).
        let pieces: Vec<(usize, u64, u64)> = if grouped {
            run.iter()
                .enumerate()
                .map(|(i, b)| (i, 0, b.width))
                .collect()
        } else {
            let widths: Vec<u64> = run.iter().map(|b| b.width).collect();
            let grain = lw.target().vector_width(spec.input) * if add { 2 } else { 1 };
            share::divide_columns(&widths, grain, nw)
        };
        let costs: Vec<u64> = pieces
            .iter()
            .map(|&(i, a, e)| {
                let b = &run[i];
                let outputs = b.groups * (e - a);
                share::rough_cycles(b.outer * b.count * outputs, outputs, output, vw, add)
            })
            .collect();
        // The vertex of columns `[a, e)` of block `i` on `worker`, writing at `to`.
        let whole = |lw: &Lowerer, worker: usize, (i, a, e): (usize, u64, u64), to| {
            let b: &LocalBlock = &run[i];
            let (t, pos) = to;
            block_vertex(
                lw,
                worker as u8,
                (input, b.pos, b.len()),
                (t, pos + a),
                (b.groups, b.count, b.width),
                (b.outer, b.stride),
                (a, e),
                scale,
            )
        };
        if pieces.len() >= nw {
            let workers = share::distribute(&costs, nw);
            let vertices = pieces
                .iter()
                .zip(workers)
                .map(|(&p, w)| whole(lw, w, p, outs[p.0]))
                .collect();
            work.first.push(TileWork::one_group(
                lw.tile_id(tile),
                codelet(spec, output),
                vertices,
            ));
            continue;
        }
        // The two-stage path: each piece's runs of rows, in grains of the input's vector
        // width for a single column (`splitRowsToWorkers`). A block repeated over outer
        // indices is not cut (our simplification: PopLibs would cut its rows across the
        // repeats; the CNNs' channel-grouped layouts never leave such a block on a tile of
        // few pieces): it counts as one row, which PopLibs' rule cannot split.
        let rows: Vec<u64> = pieces
            .iter()
            .map(|&(i, ..)| if run[i].outer > 1 { 1 } else { run[i].count })
            .collect();
        let splits = share::two_stage_splits(&costs, &rows, nw);
        let in_vw = lw.target().vector_width(spec.input);
        let cuts: Vec<Vec<u64>> = pieces
            .iter()
            .zip(&splits)
            .map(|(&(i, a, e), &s)| {
                let grain = if e - a == 1 { in_vw } else { 1 };
                share::split_rows(run[i].count, s, grain)
            })
            .collect();
        // Each vector at its final length (the vertices of millions of tiles).
        let cut_pieces = cuts.iter().filter(|c| c.len() > 1);
        let (n_sums, n_runs) = (cut_pieces.clone().count(), cut_pieces.map(Vec::len).sum());
        let mut singles = Vec::with_capacity(pieces.len() - n_sums + n_runs);
        let mut worker = 0;
        for (&p, cut) in pieces.iter().zip(&cuts) {
            if cut.len() == 1 {
                singles.push(whole(lw, worker, p, outs[p.0]));
                worker += 1;
            }
        }
        let mut runs = Vec::with_capacity(n_runs);
        let mut sums = Vec::with_capacity(n_sums);
        for (&(i, a, e), cut) in pieces.iter().zip(&cuts) {
            if cut.len() == 1 {
                continue;
            }
            let b = &run[i];
            let cols = e - a;
            let partials = second_partials.get_or_insert_with(|| scratch(lw, spec, "second"));
            let at = partials.alloc(tile, cut.len() as u64 * cols);
            let mut first_row = 0;
            for (k, &count) in cut.iter().enumerate() {
                let to = (partials.tensor, at + k as u64 * cols);
                let pos = b.pos + first_row * b.width;
                runs.push(block_vertex(
                    lw,
                    worker as u8,
                    (input, pos, count * b.width),
                    to,
                    (1, count, b.width),
                    (1, 0),
                    (a, e),
                    1.0,
                ));
                worker += 1;
                first_row += count;
            }
            let (t, pos) = outs[i];
            sums.push(block_vertex(
                lw,
                (sums.len() % nw) as u8,
                (partials.tensor, at, cut.len() as u64 * cols),
                (t, pos + a),
                (1, cut.len() as u64, cols),
                (1, 0),
                (0, cols),
                scale,
            ));
        }
        let mut groups = Vec::new();
        if output == spec.acc {
            singles.append(&mut runs);
        }
        for (vertices, out_type) in [(singles, output), (runs, spec.acc)] {
            if !vertices.is_empty() {
                groups.push(VertexGroup {
                    codelet: codelet(spec, out_type),
                    vertices,
                });
            }
        }
        work.first.push(TileWork {
            tile: lw.tile_id(tile),
            groups,
            cycles: 0,
        });
        if !sums.is_empty() {
            // The second stage reads the runs' partials, as the later stages do.
            let sum = kind_codelet(spec.kind.of_partials(), (spec.acc, spec.acc, output));
            work.second
                .push(TileWork::one_group(lw.tile_id(tile), sum, sums));
        }
    }
    if let Some(partials) = second_partials {
        partials.finish(lw);
    }
    work
}

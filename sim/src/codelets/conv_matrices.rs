//! The two matrices of a `Conv` vertex's product, gathered from its operand blocks widened
//! to f32 ([`super::window`]): `a` (rows: the vertex's output units) and `b` (columns: the
//! output positions), both in the pass's reduction order, which is the reference
//! interpreter's (`interp/conv.rs`). A padded or unreached position is an exact zero.
//!
//! For `Forward` and `InputGrad`, `a` is the weights' and does not depend on the batch
//! element, so it is gathered once for every output channel of the block
//! ([`forward_weights`], [`input_grad_weights`]) and a run of units reads its rows; `b`
//! is gathered per batch element ([`feature_map_inputs`]). `WeightGrad`
//! gathers both per vertex ([`weight_grad`]).
//!
//! When every kernel column of a `Forward` or `InputGrad` block reads consecutive input
//! columns (stride and dilation 1 along the width), `b` need not be gathered at all: the
//! block's feature map rows, copied once with zero columns on both sides ([`Padded`]), hold
//! each row of `b` over an output row as a slice, and the product reads those slices. An
//! FP16 block whose rows need no zero columns is laid out straight from its channel-grouped
//! bytes, widened on the way ([`MapSource::Grouped`]), without widening it first.

use super::window_layout::BlockLayout;
use crate::numerics::kernels::transpose;
use ipusim_exe::codelets::{WindowParams, WindowPass};

fn len(r: (u32, u32)) -> usize {
    r.1.saturating_sub(r.0) as usize
}

/// The input rows and columns a block's kernel taps read, for the block's pass: for each
/// kernel row and output row of the block, the input row (`rows[kh][oh − first]`); for each
/// kernel column and output column of the block, the column relative to the block's first
/// held column (`cols[kw][ow]`); `None`: padding (or a column the block does not hold). For
/// `Forward` and `InputGrad`, each kernel column's run of consecutive columns
/// ([`contiguous`]). They depend on the block alone, so the block's vertices share them.
#[derive(Debug, Default)]
pub(super) struct Taps {
    rows: Vec<Option<u32>>,
    /// Output rows of the block per kernel row of `rows`.
    out_rows: usize,
    cols: Vec<Option<u32>>,
    runs: Vec<Option<(usize, usize, usize)>>,
    /// `WeightGrad`: `cols` as `[ow][kw]`, and for each output column the first of its
    /// columns when they are consecutive and all held.
    by_out: Vec<Option<u32>>,
    starts: Vec<Option<usize>>,
}

impl Taps {
    /// The taps of block `p` in `pass`.
    pub(super) fn fill(&mut self, pass: WindowPass, p: &WindowParams) {
        let g = &p.geometry;
        let first = p.in_cols.0;
        self.out_rows = len(p.out_rows);
        let row = |o, k| match pass {
            WindowPass::InputGrad => g.output_row(o, k),
            _ => g.input_row(o, k),
        };
        let col = |o, k| match pass {
            WindowPass::InputGrad => g.output_col(o, k),
            _ => g.input_col(o, k),
        };
        self.rows.clear();
        self.rows.extend(
            (0..g.kh)
                .flat_map(|k| (p.out_rows.0..p.out_rows.1).map(move |o| (k, o)))
                .map(|(k, o)| row(o, k)),
        );
        self.cols.clear();
        self.cols.extend(
            (0..g.kw)
                .flat_map(|k| (p.out_cols.0..p.out_cols.1).map(move |o| (k, o)))
                .map(|(k, o)| col(o, k).and_then(|c| c.checked_sub(first))),
        );
        self.runs.clear();
        self.by_out.clear();
        self.starts.clear();
        let (ow, kw) = (len(p.out_cols), g.kw as usize);
        if pass != WindowPass::WeightGrad {
            self.runs
                .extend((0..kw).map(|k| contiguous(&self.cols[k * ow..(k + 1) * ow])));
        } else {
            let cols = &self.cols;
            self.by_out
                .extend((0..ow).flat_map(|o| (0..kw).map(move |k| cols[k * ow + o])));
            self.starts
                .extend(self.by_out.chunks_exact(kw.max(1)).map(|taps| {
                    let first = taps.first().copied().flatten()?;
                    (taps.iter().enumerate())
                        .all(|(j, c)| *c == Some(first + j as u32))
                        .then_some(first as usize)
                }));
        }
    }
}

/// The run of `cols` (input columns per output position, `None` for padding) that reads
/// consecutive input columns: `(first position, end position, first column)`, when every
/// position outside it is padding.
fn contiguous(cols: &[Option<u32>]) -> Option<(usize, usize, usize)> {
    let lo = cols.iter().position(Option::is_some)?;
    let hi = cols.iter().rposition(Option::is_some)? + 1;
    let first = cols[lo]? as usize;
    cols[lo..hi]
        .iter()
        .enumerate()
        .all(|(j, c)| *c == Some((first + j) as u32))
        .then_some((lo, hi, first))
}

/// `dst[j] = src[cols[j]]` (0 for padding), as one copy when the columns are a run.
fn gather_row(
    dst: &mut [f32],
    src: &[f32],
    cols: &[Option<u32>],
    run: Option<(usize, usize, usize)>,
) {
    match run {
        Some((lo, hi, first)) => {
            dst[..lo].fill(0.0);
            dst[lo..hi].copy_from_slice(&src[first..first + (hi - lo)]);
            dst[hi..].fill(0.0);
        }
        None => {
            for (d, col) in dst.iter_mut().zip(cols) {
                *d = col.map_or(0.0, |cc| src[cc as usize]);
            }
        }
    }
}

/// The reduction length of a `Forward` or `InputGrad` block's product: its part of the
/// reduction's channels times the taps of the kernel (`kwp` columns wide).
pub(super) fn reduction(p: &WindowParams, kwp: u32) -> usize {
    p.geometry.kh as usize * kwp as usize * len(p.in_channels)
}

/// `Forward`'s `a` for every output channel `o` of the block: `a[o][(kh, kw, c)] =
/// w[o][c][kh][kw]` over the padded width `kwp` (zero weights past the kernel's `kw`).
pub(super) fn forward_weights(p: &WindowParams, kwp: u32, w: &[f32], a: &mut [f32]) {
    let g = &p.geometry;
    // The block's part of the input channels (the reduction).
    let cg = len(p.in_channels);
    let (kh, kw, kwp) = (g.kh as usize, g.kw as usize, kwp as usize);
    let k = kh * kwp * cg;
    let taps = kh * kw;
    // Without padding columns, each output channel's row of `a` is the transpose of its
    // weights' `cg × taps` matrix, a run of channels at a time (a weight chunk's channels
    // are consecutive rows of its `[o][c][kh][kw]`; unchunked weights are one run).
    let transposed = |o: usize, row: &mut [f32]| -> bool {
        let mut c = 0;
        while c < cg {
            let at = p.forward_weight_at(o, c);
            let run = p.weight_chunk_rest(c).min(cg - c).max(1);
            let Some(src) = w.get(at..at + run * taps) else {
                return false;
            };
            transpose::columns_to_planes(src, taps, row, cg, c);
            c += run;
        }
        true
    };
    if kwp == kw && k > 0 {
        let mut rows = a.chunks_exact_mut(k).enumerate();
        if rows.all(|(o, row)| transposed(o, row)) {
            return;
        }
    }
    for (o, row) in a.chunks_exact_mut(k.max(1)).enumerate() {
        let mut slots = row.chunks_exact_mut(cg.max(1));
        for khi in 0..kh {
            for kwi in 0..kwp {
                let Some(slots) = slots.next() else { return };
                if kwi >= kw {
                    slots.fill(0.0);
                    continue;
                }
                let tap = khi * kw + kwi;
                if p.weight_chunk == 0 {
                    for (c, slot) in slots.iter_mut().enumerate() {
                        *slot = w[(o * cg + c) * taps + tap];
                    }
                } else {
                    // A chunk's channels are consecutive rows of its `[o][c][kh][kw]`.
                    let mut c = 0;
                    while c < slots.len() {
                        let at = p.forward_weight_at(o, c) + tap;
                        let run = p.weight_chunk_rest(c).min(slots.len() - c).max(1);
                        for (i, slot) in slots[c..c + run].iter_mut().enumerate() {
                            *slot = w[at + i * taps];
                        }
                        c += run;
                    }
                }
            }
        }
    }
}

/// `InputGrad`'s `a` for every input channel `c` of the block (its output):
/// `a[c][(kh, kw, o)] = w[o][c][kh][kw]`.
pub(super) fn input_grad_weights(p: &WindowParams, w: &[f32], a: &mut [f32]) {
    let g = &p.geometry;
    // The block's part of the output channels (the reduction).
    let og = len(p.in_channels);
    let cb = p.out_channel_count() as usize;
    let taps = (g.kh * g.kw) as usize;
    let k = taps * og;
    // `w` is the `og × (cb · taps)` matrix of rows `o`, and `a` its transpose.
    let cols = cb * taps;
    if w.len() >= og * cols && a.len() >= og * cols {
        transpose::columns_to_planes(&w[..og * cols], cols, a, og, 0);
        return;
    }
    for (c, row) in a.chunks_exact_mut(k.max(1)).enumerate() {
        for (pos, slots) in row.chunks_exact_mut(og.max(1)).enumerate() {
            for (o, slot) in slots.iter_mut().enumerate() {
                *slot = w[(o * cb + c) * taps + pos];
            }
        }
    }
}

/// `Forward`'s and `InputGrad`'s `b` for batch element `n`, from the feature map `x` of
/// operand 0 (`x`; `dy` for `InputGrad`): `b[(kh, kw, c)][(row, col)]`, `c` the block's
/// part of the reduction (input channels; output channels), `(row, col)` the block's output
/// positions (`(oh, ow)`; `(h, w)`). Kernel columns `kw..kwp` (`Forward` only) are padding:
/// zero inputs.
pub(super) fn feature_map_inputs(
    (p, taps): (&WindowParams, &Taps),
    kwp: u32,
    n: u32,
    x: &[f32],
    b: &mut [f32],
) {
    let g = &p.geometry;
    let red = len(p.in_channels);
    let (kh, kw, kwp) = (g.kh as usize, g.kw as usize, kwp as usize);
    // Rows of the block's feature map, its held width and the output's width.
    let (in_rows, width, ow) = (len(p.in_rows), len(p.in_cols), len(p.out_cols));
    let (row_of, col_of) = (&taps.rows, &taps.cols);
    let nl = (n - p.batch.0) as usize;
    let mut i = 0;
    for khi in 0..kh {
        for kwi in 0..kwp {
            if kwi >= kw {
                let pad = red * len(p.out_rows) * ow;
                b[i..i + pad].fill(0.0);
                i += pad;
                continue;
            }
            let (cols, run) = (&col_of[kwi * ow..(kwi + 1) * ow], taps.runs[kwi]);
            for c in 0..red {
                let base = (nl * red + c) * in_rows;
                for row in p.out_rows.0..p.out_rows.1 {
                    let dst = &mut b[i..i + ow];
                    i += ow;
                    match row_of[khi * taps.out_rows + (row - p.out_rows.0) as usize] {
                        Some(r) => {
                            let src = &x[(base + (r - p.in_rows.0) as usize) * width..][..width];
                            gather_row(dst, src, cols, run);
                        }
                        None => dst.fill(0.0),
                    }
                }
            }
        }
    }
}

/// The position-major `a` of a `Forward` or `InputGrad` block for batch element `nl`
/// ([`super::conv_positions`]): row `(row, col)` (the block's output positions in order)
/// holds, for each kernel tap `(kh, kw)` in order, the `C` channels of the reduction at the
/// input position the tap reads — a run of the position-major feature map `xd`
/// (`[n][row][col][c]` over the rows and columns the block holds) — or zeros where it reads
/// padding: `a[(row, col)][(kh, kw, c)]`, the transpose of [`feature_map_inputs`]' `b`.
/// Returns false when a tap reads a row or column the block does not hold.
pub(super) fn position_major_inputs(
    (p, taps): (&WindowParams, &Taps),
    nl: usize,
    xd: &[f32],
    a: &mut [f32],
) -> bool {
    let g = &p.geometry;
    let c = len(p.in_channels);
    let (kh, kw) = (g.kh as usize, g.kw as usize);
    let (in_rows, width, ow) = (len(p.in_rows), len(p.in_cols), len(p.out_cols));
    let image = nl * in_rows * width;
    let mut runs = a.chunks_exact_mut(c.max(1));
    for r in 0..len(p.out_rows) {
        for q in 0..ow {
            for khi in 0..kh {
                let row = taps.rows[khi * taps.out_rows + r]
                    .map(|row| row.checked_sub(p.in_rows.0).map(|x| x as usize));
                for kwi in 0..kw {
                    let Some(dst) = runs.next() else {
                        return false;
                    };
                    match (row, taps.cols[kwi * ow + q]) {
                        (Some(Some(row)), Some(col)) if row < in_rows && (col as usize) < width => {
                            let at = (image + row * width + col as usize) * c;
                            let Some(src) = xd.get(at..at + c) else {
                                return false;
                            };
                            dst.copy_from_slice(src);
                        }
                        (Some(Some(_)), Some(_)) | (Some(None), _) => return false,
                        _ => dst.fill(0.0),
                    }
                }
            }
        }
    }
    true
}

/// `WeightGrad`: `a[o][(n, oh, ow)]` from `dy`, `b[(n, oh, ow)][(c, kh, kw)]` from `x`.
pub(super) fn weight_grad(
    (p, taps): (&WindowParams, &Taps),
    u0: u32,
    rows: usize,
    (x, dy): (&[f32], &[f32]),
    a: &mut [f32],
    b: Option<&mut [f32]>,
) {
    let g = &p.geometry;
    let ob = p.out_channel_count() as usize;
    let cb = len(p.in_channels);
    let (out_rows, ow) = (len(p.out_rows), len(p.out_cols));
    let nb = len(p.batch);
    let k = nb * out_rows * ow;
    let plane = out_rows * ow;
    for r in 0..rows {
        let o = u0 as usize + r;
        for n in 0..nb {
            a[r * k + n * plane..][..plane].copy_from_slice(&dy[(n * ob + o) * plane..][..plane]);
        }
    }
    let Some(b) = b else { return };
    let (in_rows, w) = (len(p.in_rows), len(p.in_cols));
    let (kh, kw) = (g.kh as usize, g.kw as usize);
    // Per output row: the input row each `(c, kh)` reads (`None`: padding).
    let mut src: Vec<Option<&[f32]>> = Vec::with_capacity(cb * kh);
    let row_len = cb * kh * kw;
    let mut i = 0;
    for n in 0..nb {
        for ohi in p.out_rows.0 as usize..p.out_rows.1 as usize {
            src.clear();
            src.extend(
                (0..cb)
                    .flat_map(|c| (0..kh).map(move |khi| (c, khi)))
                    .map(|(c, khi)| {
                        let at = khi * taps.out_rows + ohi - p.out_rows.0 as usize;
                        taps.rows[at].map(|r| {
                            let plane = (n * cb + c) * in_rows;
                            &x[(plane + (r - p.in_rows.0) as usize) * w..][..w]
                        })
                    }),
            );
            let dst = &mut b[i..i + ow * row_len];
            i += ow * row_len;
            // The kernel widths ResNets use, as constants: a column's taps are then moves.
            match kw {
                1 => output_row_taps(1, taps, &src, dst),
                3 => output_row_taps(3, taps, &src, dst),
                _ => output_row_taps(kw, taps, &src, dst),
            }
        }
    }
}

/// `WeightGrad`'s `b` rows of one output row: for each output column, each `(c, kh)` input
/// row's `kw` taps (`src`: those rows, `None` for padding), a copy of `kw` consecutive
/// elements when the column's taps are consecutive and held.
#[inline(always)]
fn output_row_taps(kw: usize, taps: &Taps, src: &[Option<&[f32]>], dst: &mut [f32]) {
    let kw = kw.max(1);
    if src.is_empty() {
        return;
    }
    for ((out, cols), start) in dst
        .chunks_exact_mut(src.len() * kw)
        .zip(taps.by_out.chunks_exact(kw))
        .zip(&taps.starts)
    {
        for (d, row) in out.chunks_exact_mut(kw).zip(src) {
            match (row, start) {
                (Some(r), Some(s0)) => d.copy_from_slice(&r[*s0..*s0 + kw]),
                (Some(r), None) => {
                    for (v, cc) in d.iter_mut().zip(cols) {
                        *v = cc.map_or(0.0, |cc| r[cc as usize]);
                    }
                }
                (None, _) => d.fill(0.0),
            }
        }
    }
}

/// Where [`Padded::fill`] takes a block's feature map from: widened to f32 in NCHW block
/// order, or its FP16 bytes in their channel-grouped layout, widened on the way.
#[derive(Clone, Copy)]
pub(super) enum MapSource<'a> {
    Planar(&'a [f32]),
    Grouped(&'a [half::f16], BlockLayout),
}

/// A `Forward` or `InputGrad` block's feature map (widened, `[n][c][row][col]`) with zero
/// columns on both sides of every row, so that each kernel tap's inputs over an output row
/// are a run of one padded row: `b`'s rows without gathering them ([`Padded::rows`]).
///
/// Where each kernel row's taps read consecutive input rows (or padding) over the block's
/// output rows, the map also has zero rows above and below, and each tap's inputs over
/// *all* output rows are one run of the map ([`Padded::span`]): output row `o`'s column `j`
/// at `o · width + j` of the run, the columns from `ow` to `width` of each row and the run's
/// last up to a multiple of 8 reading neighbours, padding or the zeros after the map —
/// columns a product computes and drops, so that its rows are long whole vector blocks.
#[derive(Debug, Default)]
pub(super) struct Padded {
    /// Per batch element: a run of zeros (the inputs of taps on padding), its padded rows
    /// `[c][row]`, then zeros (what the span's last columns read past the last row).
    x: Vec<f32>,
    /// Padded row length.
    width: usize,
    /// Elements per batch element.
    per_n: usize,
    /// Where each row of `b` starts in a batch element's part of `x`, per output row of the
    /// block then `(kh, kw, c)`: the same for every batch element.
    rows: Vec<usize>,
    /// Rows of `b` per output row.
    k: usize,
    /// Where each tap's run over all output rows starts (`(kh, kw, c)`), when the rows are
    /// not whole vector blocks and the kernel rows allow.
    span: Vec<usize>,
    /// The length of those runs (0: no span).
    span_len: usize,
    /// Whether the rows are whole vector blocks, read an output row at a time ([`Self::rows`]).
    per_row: bool,
}

/// Elements after the map's rows: what a span's last columns, up to a multiple of 8, read.
const SPAN_SLACK: usize = 8;

/// Per kernel row of `taps` over the `out_rows` output rows of a block of `in_rows` input
/// rows (from `in0`): the input row output row 0 reads, counting from the block's first
/// (negative: above it), when every output row `o` reads that row `+ o` or padding outside
/// the block; `None` when a kernel row reads only padding. `Err` when the rows are not a
/// run (a stride along the height; a dilation only moves each kernel row's run).
fn row_runs(taps: &Taps, in0: u32, in_rows: usize) -> Result<Vec<Option<isize>>, ()> {
    let out_rows = taps.out_rows;
    (taps.rows.chunks(out_rows.max(1)))
        .map(|rows| {
            let first = rows
                .iter()
                .enumerate()
                .find_map(|(o, r)| r.map(|r| (r - in0) as isize - o as isize));
            let Some(d) = first else {
                return Ok(None);
            };
            for (o, r) in rows.iter().enumerate() {
                let at = d + o as isize;
                let held = at >= 0 && (at as usize) < in_rows;
                match r {
                    Some(r) if (*r - in0) as isize == at => {}
                    None if !held => {}
                    _ => return Err(()),
                }
            }
            Ok(Some(d))
        })
        .collect()
}

impl Padded {
    /// Lays out block `p`'s feature map `x` for its `taps` and kernel width `kwp`; false
    /// when some kernel column reads other than a run of consecutive input columns with
    /// padding around it (a stride or a dilation along the width), and for an FP16 block
    /// taken straight from its channel-grouped layout ([`MapSource::Grouped`]) when its rows
    /// need zero columns beside them or the block is not whole.
    pub(super) fn fill(
        &mut self,
        (p, taps): (&WindowParams, &Taps),
        kwp: u32,
        x: MapSource,
    ) -> bool {
        let g = &p.geometry;
        let (ow, width, kw) = (len(p.out_cols), len(p.in_cols), g.kw as usize);
        // Zero columns needed on the left and right of the held ones.
        let (mut left, mut right) = (0usize, 0usize);
        let mut runs = Vec::with_capacity(kw);
        for k in 0..kw {
            let cols = &taps.cols[k * ow..(k + 1) * ow];
            let Some((lo, hi, first)) = taps.runs[k] else {
                if cols.iter().any(Option::is_some) {
                    return false;
                }
                runs.push(None);
                continue;
            };
            // Padding before the run must be columns before the first held one, and after
            // it columns after the last.
            if (lo > 0 && first > 0) || (hi < ow && first + (hi - lo) < width) {
                return false;
            }
            left = left.max(lo.saturating_sub(first));
            right = right.max((first + ow).saturating_sub(lo + width));
            runs.push(Some((lo, first)));
        }
        // Per kernel column: the padded column output column 0 reads.
        let offs: Vec<Option<usize>> = runs
            .iter()
            .map(|r| r.map(|(lo, first)| left + first - lo))
            .collect();
        let (red, in_rows, out_rows) = (len(p.in_channels), len(p.in_rows), len(p.out_rows));
        self.width = left + width + right;
        // Rows of whole vector blocks are read an output row at a time, others over spans,
        // for which the map has zero rows above and below the held ones.
        let per_row = ow.is_multiple_of(8);
        self.per_row = per_row;
        let row_runs = (!per_row)
            .then(|| row_runs(taps, p.in_rows.0, in_rows).ok())
            .flatten();
        let (mut top, mut bottom) = (0usize, 0usize);
        for &d in row_runs.iter().flatten().flatten() {
            top = top.max((-d).max(0) as usize);
            let below = (d + out_rows as isize).max(0) as usize;
            bottom = bottom.max(below.saturating_sub(in_rows));
        }
        let height = top + in_rows + bottom;
        self.span_len = match row_runs {
            Some(_) if out_rows > 0 => ((out_rows - 1) * self.width + ow).next_multiple_of(8),
            _ => 0,
        };
        let zeros = ow.max(self.span_len);
        let slack = if self.span_len > 0 { SPAN_SLACK } else { 0 };
        self.per_n = zeros + red * height * self.width + slack;
        let size = len(p.batch) * self.per_n;
        let x = match x {
            MapSource::Planar(x) => {
                self.x.clear();
                self.x.resize(size, 0.0);
                x
            }
            MapSource::Grouped(src, layout) => {
                // Each plane's rows are consecutive in the map when no zero columns lie
                // beside them: the block un-groups straight into it, and only the rest of
                // the map is zeroed (the planes' rows are written whole).
                self.x.resize(size, 0.0);
                let at = (zeros + top * self.width).min(size);
                let (plane, rows) = (height * self.width, in_rows * self.width);
                if left + right > 0
                    || !layout.ungroup_widen_strided(src, &mut self.x[at..], (self.per_n, plane))
                {
                    return false;
                }
                for part in self.x.chunks_exact_mut(self.per_n) {
                    part[..at].fill(0.0);
                    for c in 0..red {
                        let end = zeros + c * plane + top * self.width + rows;
                        let next = zeros + (c + 1) * plane + top * self.width;
                        part[end..next.min(self.per_n)].fill(0.0);
                    }
                    let tail = zeros + red * plane;
                    part[tail..].fill(0.0);
                }
                &[]
            }
        };
        if width > 0 && self.per_n > 0 && !x.is_empty() {
            for (part, src) in self
                .x
                .chunks_exact_mut(self.per_n)
                .zip(x.chunks(red * in_rows * width))
            {
                let planes = &mut part[zeros..zeros + red * height * self.width];
                for (plane, src) in planes
                    .chunks_exact_mut(height * self.width)
                    .zip(src.chunks_exact(in_rows * width))
                {
                    for (dst, src) in plane[top * self.width..]
                        .chunks_exact_mut(self.width)
                        .zip(src.chunks_exact(width))
                    {
                        dst[left..left + width].copy_from_slice(src);
                    }
                }
            }
        }
        // Where input row `r` (from the block's first, `top` rows of zeros above it) of
        // channel `c` starts.
        let row_at = |c: usize, r: usize| zeros + (c * height + top + r) * self.width;
        self.k = g.kh as usize * kwp as usize * red;
        self.rows.clear();
        for o in (0..out_rows).filter(|_| per_row) {
            for khi in 0..g.kh as usize {
                let row = taps.rows[khi * taps.out_rows + o].map(|r| (r - p.in_rows.0) as usize);
                for kwi in 0..kwp as usize {
                    let off = offs.get(kwi).copied().flatten();
                    for c in 0..red {
                        self.rows.push(match (row, off) {
                            (Some(r), Some(off)) => row_at(c, r) + off,
                            _ => 0,
                        });
                    }
                }
            }
        }
        self.span.clear();
        if let Some(row_runs) = row_runs.filter(|_| self.span_len > 0) {
            for d in row_runs {
                for kwi in 0..kwp as usize {
                    let off = offs.get(kwi).copied().flatten();
                    for c in 0..red {
                        self.span.push(match (d, off) {
                            // `top + d ≥ 0` by the choice of `top`.
                            (Some(d), Some(off)) => {
                                zeros
                                    + (c * height) * self.width
                                    + ((top as isize + d) as usize) * self.width
                                    + off
                            }
                            _ => 0,
                        });
                    }
                }
            }
        }
        true
    }

    /// Whether a product can read `b` from the map: an output row at a time (rows of whole
    /// vector blocks) or over the spans (the others, when the kernel rows read runs).
    pub(super) fn readable(&self) -> bool {
        self.per_row || self.span_len > 0
    }

    /// Whether every element of the feature map is finite.
    pub(super) fn finite(&self) -> bool {
        crate::numerics::kernels::amp::finite(&self.x)
    }

    /// Batch element `n`'s part of the padded feature map, which [`Self::rows`] indexes.
    pub(super) fn base(&self, p: &WindowParams, n: u32) -> &[f32] {
        let nl = (n - p.batch.0) as usize;
        &self.x[nl * self.per_n..(nl + 1) * self.per_n]
    }

    /// Where in a batch element's [`Self::base`] the rows of `b` (in [`feature_map_inputs`]'
    /// order, `(kh, kw, c)`) over output row `ohl` of the block (relative to its first)
    /// start: each the `ow` inputs of that tap, in a padded row or the zeros. Only for rows
    /// of whole vector blocks (`ow` a multiple of 8; empty otherwise).
    pub(super) fn rows(&self, ohl: usize) -> &[usize] {
        &self.rows[ohl * self.k..(ohl + 1) * self.k]
    }

    /// Where in a batch element's [`Self::base`] each row of `b` (`(kh, kw, c)`) over all the
    /// block's output rows starts, and the length of those runs — output row `o`'s column
    /// `j` at `o · width + j`, every other column dropped — for rows that are not whole
    /// vector blocks; `None` for those that are, and when the kernel rows do not read runs
    /// of input rows.
    pub(super) fn span(&self) -> Option<(&[usize], usize, usize)> {
        (self.span_len > 0).then_some((&self.span[..], self.span_len, self.width))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipusim_exe::codelets::WindowGeometry;

    /// A `Forward` block of convolution `g` (one group): output columns `cols`, every output
    /// row, and the input columns those read.
    fn block(g: WindowGeometry, cols: (u32, u32)) -> WindowParams {
        let read: Vec<u32> = (cols.0..cols.1)
            .flat_map(|o| (0..g.kw).filter_map(move |k| g.input_col(o, k)))
            .collect();
        let in_cols = (
            read.iter().copied().min().unwrap_or(0),
            read.iter().copied().max().map_or(0, |m| m + 1),
        );
        WindowParams {
            geometry: g,
            group: 0,
            batch: (0, g.n),
            out_channels: (0, g.o),
            in_channels: (0, g.c),
            out_rows: (0, g.oh),
            in_rows: (0, g.h),
            aux_rows: (0, 0),
            out_cols: cols,
            in_cols,
            units: (0, g.n * g.o),
            input_channels: g.c,
            in_group: 1,
            aux_group: 1,
            out_group: 1,
            weight_chunk: 0,
        }
    }

    fn geometry(
        c: u32,
        (h, w): (u32, u32),
        (kh, kw): (u32, u32),
        padding: [u32; 4],
    ) -> WindowGeometry {
        let oh = h + padding[0] + padding[2] + 1 - kh;
        let ow = w + padding[1] + padding[3] + 1 - kw;
        WindowGeometry {
            n: 2,
            c,
            h,
            w,
            o: 3,
            kh,
            kw,
            stride: [1, 1],
            padding,
            dilation: [1, 1],
            groups: 1,
            oh,
            ow,
        }
    }

    /// Where the padded feature map stands for `b`, its rows are `b`'s rows element for
    /// element: every batch element, output row and tap, with padding on either side, a
    /// padded kernel width, and blocks of part of the columns; and so are its spans'
    /// output rows, which stay inside the map.
    #[test]
    fn padded_rows_are_the_gathered_rows() {
        let cases = [
            (geometry(2, (4, 8), (3, 3), [1, 1, 1, 1]), (0, 8), 3),
            (geometry(3, (3, 10), (3, 3), [1, 1, 1, 1]), (0, 5), 4),
            (geometry(3, (3, 10), (3, 3), [1, 1, 1, 1]), (5, 10), 3),
            (geometry(1, (5, 12), (5, 5), [2, 0, 2, 4]), (2, 10), 5),
            (geometry(4, (2, 6), (1, 1), [0, 0, 0, 0]), (0, 6), 1),
            // Taller kernels than the map, and padding above only.
            (geometry(2, (2, 7), (3, 3), [2, 1, 0, 1]), (0, 7), 3),
            (geometry(1, (6, 7), (7, 7), [3, 3, 3, 3]), (0, 7), 7),
            // A dilation along the height: each kernel row's own run of rows.
            (
                WindowGeometry {
                    dilation: [2, 1],
                    oh: 4,
                    ..geometry(2, (6, 7), (3, 3), [1, 1, 1, 1])
                },
                (0, 7),
                3,
            ),
        ];
        for (g, cols, kwp) in cases {
            let p = block(g, cols);
            let mut taps = Taps::default();
            taps.fill(WindowPass::Forward, &p);
            let x: Vec<f32> = (0..g.n * g.c * len(p.in_rows) as u32 * len(p.in_cols) as u32)
                .map(|v| v as f32 + 1.0)
                .collect();
            let mut padded = Padded::default();
            assert!(
                padded.fill((&p, &taps), kwp, MapSource::Planar(&x)),
                "{g:?} {cols:?}"
            );
            let k = reduction(&p, kwp);
            let (oh, ow) = (len(p.out_rows), len(p.out_cols));
            let mut b = vec![0f32; k * oh * ow];
            // Stride 1 along the height: rows that are not whole vector blocks have spans.
            let per_row = ow.is_multiple_of(8);
            let spans = padded.span();
            assert_eq!(spans.is_none(), per_row, "{g:?} {cols:?}");
            if let Some((span, span_len, width)) = spans {
                assert_eq!(span.len(), k);
                assert!(span_len.is_multiple_of(8) && span_len >= (oh - 1) * width + ow);
            }
            for n in 0..g.n {
                feature_map_inputs((&p, &taps), kwp, n, &x, &mut b);
                let base = padded.base(&p, n);
                for ohl in 0..oh {
                    for kk in 0..k {
                        let want = &b[(kk * oh + ohl) * ow..][..ow];
                        let (at, what) = match spans {
                            None => (padded.rows(ohl)[kk], "row"),
                            Some((span, span_len, width)) => {
                                assert!(span[kk] + span_len <= base.len());
                                (span[kk] + ohl * width, "span")
                            }
                        };
                        assert_eq!(
                            &base[at..at + ow],
                            want,
                            "{what}: {cols:?} n {n} row {ohl} tap {kk}"
                        );
                    }
                }
            }
        }
    }

    /// Kernel rows that do not read runs of input rows (a stride along the height) give no
    /// span: with rows that are not whole vector blocks, the map cannot stand for `b`.
    #[test]
    fn strided_rows_have_no_span() {
        let g = WindowGeometry {
            stride: [2, 1],
            oh: 3,
            ..geometry(2, (6, 7), (3, 3), [1, 1, 1, 1])
        };
        let p = block(g, (0, 7));
        let mut taps = Taps::default();
        taps.fill(WindowPass::Forward, &p);
        let x = vec![1f32; (g.n * g.c * g.h * g.w) as usize];
        let mut padded = Padded::default();
        assert!(padded.fill((&p, &taps), 3, MapSource::Planar(&x)));
        assert!(padded.span().is_none());
        assert!(!padded.readable());
    }

    /// Kernel columns whose taps are not a run of held columns with padding around it fall
    /// back to the gathered `b`: padding before a run that does not start at the first held
    /// column, or after one that does not end at the last, and taps that skip columns.
    #[test]
    fn other_taps_are_not_padded() {
        let p = block(geometry(1, (1, 8), (1, 1), [0, 0, 0, 0]), (0, 4));
        let x = vec![1f32; 8];
        for cols in [
            vec![None, Some(3), Some(4), Some(5)],
            vec![Some(0), Some(1), None, None],
            vec![Some(0), Some(2), Some(4), Some(6)],
        ] {
            let taps = Taps {
                rows: vec![Some(0)],
                out_rows: 1,
                runs: vec![contiguous(&cols)],
                cols,
                ..Taps::default()
            };
            assert!(
                !Padded::default().fill((&p, &taps), 1, MapSource::Planar(&x)),
                "{:?}",
                taps.cols
            );
        }
    }

    /// A map laid out from an FP16 block's channel-grouped bytes equals the one laid out
    /// from the block widened and un-grouped: rows with spans and rows of whole vector
    /// blocks, zero rows above and below (padding along the height only), two images, groups
    /// of 4 and 8; blocks needing zero columns beside their rows, and group 1 (stored NCHW),
    /// are declined.
    #[test]
    fn grouped_fp16_maps_equal_the_widened_ones() {
        use half::f16;
        let cases = [
            (geometry(8, (4, 8), (1, 1), [0; 4]), 8, true),
            (geometry(16, (3, 7), (1, 1), [0; 4]), 8, true),
            (geometry(8, (5, 6), (3, 1), [1, 0, 1, 0]), 4, true),
            (geometry(16, (5, 6), (3, 1), [1, 0, 1, 0]), 8, true),
            (geometry(8, (4, 8), (3, 3), [1, 1, 1, 1]), 8, false),
            (geometry(4, (4, 8), (1, 1), [0; 4]), 1, false),
        ];
        for (g, group, laid) in cases {
            let p = block(g, (0, g.ow));
            let mut taps = Taps::default();
            taps.fill(WindowPass::Forward, &p);
            let plane = u64::from(g.h * g.w);
            let layout = BlockLayout::new(group, u64::from(g.n), u64::from(g.c), plane);
            let stored: Vec<f16> = (0..g.n * g.c * g.h * g.w)
                .map(|v| f16::from_f32(v as f32 * 0.25 - 3.0))
                .collect();
            let mut wide = vec![0f32; stored.len()];
            if group > 1 {
                assert!(layout.ungroup_widen(&stored, &mut wide));
            }
            let mut want = Padded::default();
            assert!(want.fill((&p, &taps), 1, MapSource::Planar(&wide)));
            // A map reused from a larger block: every position not written is zeroed.
            let mut got = Padded {
                x: vec![f32::NAN; 4 * want.x.len()],
                ..Padded::default()
            };
            let source = MapSource::Grouped(&stored, layout);
            assert_eq!(
                got.fill((&p, &taps), 1, source),
                laid,
                "{g:?} group {group}"
            );
            if laid {
                assert_eq!(
                    format!("{got:?}"),
                    format!("{want:?}"),
                    "{g:?} group {group}"
                );
            }
        }
    }
}

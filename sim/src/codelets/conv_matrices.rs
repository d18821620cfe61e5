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

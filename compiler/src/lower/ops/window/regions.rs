//! The element ranges a convolution or pooling block reads or writes in its operands'
//! layouts, described as [`Region`]s: [`Region::ranges`] makes the `(begin, len)` runs
//! (touching ones merged) that the lowering stages and exchanges, [`Region::count`] counts
//! them without making them. The planner weighs every candidate block by its number of
//! exchange regions (the hands-on ResNet101's 70 distinct problems weigh about 414,000
//! blocks) and had spent most of its time making runs only to count them.
//!
//! A region's runs all have one length and start at fixed distances from each other (a
//! row, a plane, a channel group or an output channel on), and consecutive runs merge when
//! the distance from one's start to the next's equals that length (the merged run ends
//! where the last run merged into it ends), so the count is the runs less the merges,
//! found per kind of step in closed form.

use crate::codelets::WindowGeometry;

/// `(begin, len)` element ranges of a tensor.
pub(super) type Ranges = Vec<(u64, u64)>;

/// The length of a half-open range (0 when it is empty).
pub(super) fn span(r: (u32, u32)) -> u32 {
    r.1.saturating_sub(r.0)
}

/// The runs of one operand or output of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Region {
    /// [`plane_rect`]'s runs: rows and columns `rect` of the planes `(n, channel)` for `n`
    /// and `channel` in `planes` of a feature map of `dims` (`n`, channels, rows,
    /// columns) held grouped by `group`.
    Plane {
        planes: ((u32, u32), (u32, u32)),
        rect: ((u32, u32), (u32, u32)),
        dims: (u32, u32, u32, u32),
        group: u32,
    },
    /// The OIHW weights `[o, c, :, :]` for `o` in `outs` (absolute) and `c` in `ins`
    /// (within the group), of a kernel of `kernel` elements and `per_group` input channels
    /// per group: row-major when `chunk` is 0, else chunk by chunk of `chunk` input
    /// channels, each chunk's rows `[o][c..end][kh][kw]` (`WindowParams::weight_chunk`).
    Weights {
        kernel: u64,
        per_group: u64,
        outs: (u32, u32),
        ins: (u32, u32),
        chunk: u32,
    },
    /// Nothing (a pool's absent second operand).
    Empty,
}

impl Region {
    /// The weights of output channels `outs` over input channels `ins` of `g`'s kernel, in
    /// chunks of `chunk` input channels (0: row-major).
    pub fn weights(g: &WindowGeometry, outs: (u32, u32), ins: (u32, u32), chunk: u32) -> Region {
        Region::Weights {
            kernel: u64::from(g.kh) * u64::from(g.kw),
            per_group: u64::from(g.c_per_group()),
            outs,
            ins,
            chunk,
        }
    }

    /// The region's runs, in order, touching ones merged.
    pub fn ranges(&self) -> Ranges {
        match *self {
            Region::Plane {
                planes,
                rect,
                dims,
                group,
            } => plane_rect(planes, rect, dims, group),
            Region::Weights {
                kernel,
                per_group,
                outs,
                ins,
                chunk,
            } => weight_ranges(kernel, per_group, outs, ins, chunk),
            Region::Empty => Vec::new(),
        }
    }

    /// `self.ranges().len()`, in time independent of the number of runs for a plane (and
    /// of the output channels for weights).
    pub fn count(&self) -> u64 {
        match *self {
            Region::Plane {
                planes,
                rect,
                dims,
                group,
            } => plane_rect_count(planes, rect, dims, group),
            Region::Weights {
                kernel,
                per_group,
                outs,
                ins,
                chunk,
            } => weight_count(kernel, per_group, outs, ins, chunk),
            Region::Empty => 0,
        }
    }
}

/// A list's capacity for `counted` runs of at most `pushed`.
fn capacity(counted: u64, pushed: u64) -> usize {
    usize::try_from(counted.min(pushed)).unwrap_or(0)
}

/// Appends the range `(b, l)` to `out`, merged into the last one when it continues it.
fn push_merged(out: &mut Ranges, b: u64, l: u64) {
    match out.last_mut() {
        Some(last) if last.0 + last.1 == b => last.1 += l,
        _ => out.push((b, l)),
    }
}

/// Rows `rows` and columns `cols` of the planes `(n, channel)` for `n` in `batch`,
/// `channel` in `channels` (absolute channel indices, on whole groups of `group`) of a
/// feature map of `n_all` batch elements, `chans` channels, `h` rows and `w` columns held
/// grouped by `group` (`[C/g, N, H, W, g]`; row-major NCHW for a group of 1), in storage
/// order: one run of `rows × w × group` elements per channel group and batch element when
/// the columns are all of them (the batch elements of a group merge when the rows are all of
/// them too), else one run of `cols × group` per row.
pub(super) fn plane_rect(
    (batch, channels): ((u32, u32), (u32, u32)),
    (rows, cols): ((u32, u32), (u32, u32)),
    (n_all, chans, h, w): (u32, u32, u32, u32),
    group: u32,
) -> Ranges {
    let g = u64::from(group.max(1));
    let (h64, w64) = (u64::from(h), u64::from(w));
    let groups = u64::from(chans) / g;
    let whole = cols.0 == 0 && cols.1 >= w;
    let (n0, n1) = (u64::from(batch.0), u64::from(batch.1));
    let (cg0, cg1) = (u64::from(channels.0) / g, u64::from(channels.1).div_ceil(g));
    // Touching runs merged as they come, into a list of the size counted in closed form
    // (never more than the runs pushed).
    let pushed = n1.saturating_sub(n0)
        * cg1.saturating_sub(cg0)
        * if whole { 1 } else { u64::from(span(rows)) };
    let runs = plane_rect_count((batch, channels), (rows, cols), (n_all, chans, h, w), group);
    let mut out: Ranges = Vec::with_capacity(capacity(runs, pushed));
    // The runs of the plane whose first row is storage row `plane`.
    let mut push = |plane: u64| {
        if whole {
            push_merged(
                &mut out,
                (plane + u64::from(rows.0)) * w64 * g,
                u64::from(span(rows)) * w64 * g,
            );
            return;
        }
        for r in rows.0..rows.1 {
            push_merged(
                &mut out,
                ((plane + u64::from(r)) * w64 + u64::from(cols.0)) * g,
                u64::from(span(cols)) * g,
            );
        }
    };
    if g > 1 {
        for cg in cg0..cg1 {
            for n in n0..n1 {
                push((cg * u64::from(n_all) + n) * h64);
            }
        }
    } else {
        for n in n0..n1 {
            for c in cg0..cg1 {
                push((n * groups + c) * h64);
            }
        }
    }
    out
}

/// `plane_rect(..).len()` in closed form. The planes are visited as `(o·m + i)·h` storage
/// rows, `o` outer and `i` inner (channel groups and batch elements when grouped, batch
/// elements and channels when not); each holds `per_plane` runs of `len` elements, a row
/// (`w·g` elements) apart within the plane. From a plane's last run to the next plane's
/// first the distance is `(Δ·h − last_row)·w·g` for `Δ` planes on (1 within `o`,
/// `m − span(i) + 1` from one `o` to the next).
fn plane_rect_count(
    (batch, channels): ((u32, u32), (u32, u32)),
    (rows, cols): ((u32, u32), (u32, u32)),
    (n_all, chans, h, w): (u32, u32, u32, u32),
    group: u32,
) -> u64 {
    let g = i128::from(group.max(1));
    let (h, wide) = (i128::from(h), i128::from(w));
    let whole = cols.0 == 0 && cols.1 >= w;
    let batch = (i128::from(batch.0), i128::from(batch.1));
    let chan_groups = (
        i128::from(channels.0) / g,
        (i128::from(channels.1) + g - 1) / g,
    );
    let (outer, inner, m) = if g > 1 {
        (chan_groups, batch, i128::from(n_all))
    } else {
        (batch, chan_groups, i128::from(chans) / g)
    };
    let (no, ni) = ((outer.1 - outer.0).max(0), (inner.1 - inner.0).max(0));
    let rows = i128::from(span(rows));
    let (per_plane, len) = if whole {
        (1, rows * wide * g)
    } else {
        (rows, i128::from(span(cols)) * g)
    };
    let runs = no * ni * per_plane;
    if runs == 0 {
        return 0;
    }
    let last_row = per_plane - 1;
    let to_plane = |planes: i128| (planes * h - last_row) * wide * g;
    let merges = |distance: i128, pairs: i128| if distance == len { pairs } else { 0 };
    let merged = merges(wide * g, no * ni * (per_plane - 1))
        + merges(to_plane(1), no * (ni - 1))
        + merges(to_plane(m - ni + 1), no - 1);
    (runs - merged) as u64
}

/// [`Region::Weights`]' runs.
fn weight_ranges(kernel: u64, cg: u64, outs: (u32, u32), ins: (u32, u32), chunk: u32) -> Ranges {
    let n_chunks = if chunk == 0 {
        1
    } else {
        chunks(ins, chunk).count() as u64
    };
    let pushed = u64::from(span(outs)) * n_chunks;
    let counted = weight_count(kernel, cg, outs, ins, chunk);
    let mut out: Ranges = Vec::with_capacity(capacity(counted, pushed));
    if chunk == 0 {
        for o in outs.0..outs.1 {
            push_merged(
                &mut out,
                (u64::from(o) * cg + u64::from(ins.0)) * kernel,
                u64::from(span(ins)) * kernel,
            );
        }
        return out;
    }
    // Chunk by chunk, each chunk's rows `[o][c..end][kh][kw]`, touching ones merged.
    for (c, end) in chunks(ins, chunk) {
        let len = u64::from(end - c) * kernel;
        for o in outs.0..outs.1 {
            push_merged(&mut out, (u64::from(o) * cg + u64::from(c)) * kernel, len);
        }
    }
    out
}

/// The weight chunks `[c, end)` of `ins`: cut at the multiples of `chunk` (not 0).
fn chunks(ins: (u32, u32), chunk: u32) -> impl Iterator<Item = (u32, u32)> {
    let next = move |c: u32| (c, ins.1.min((c / chunk + 1) * chunk));
    std::iter::successors((ins.0 < ins.1).then(|| next(ins.0)), move |&(_, end)| {
        (end < ins.1).then(|| next(end))
    })
}

/// `weight_ranges(..).len()`: per chunk (one when row-major), one run per output channel,
/// an output channel (`cg·kernel` elements) apart, less the merges, and the chunk's first
/// run merging with the previous chunk's last when it starts where that one ends.
fn weight_count(kernel: u64, cg: u64, outs: (u32, u32), ins: (u32, u32), chunk: u32) -> u64 {
    let (kernel, cg) = (i128::from(kernel), i128::from(cg));
    let no = i128::from(span(outs));
    if no == 0 {
        return 0;
    }
    let chunk_runs = |len: i128| if cg * kernel == len { 1 } else { no };
    if chunk == 0 {
        return chunk_runs(i128::from(span(ins)) * kernel) as u64;
    }
    let mut count = 0;
    let mut prev_end = None;
    for (c, end) in chunks(ins, chunk) {
        let len = i128::from(end - c) * kernel;
        let first = (i128::from(outs.0) * cg + i128::from(c)) * kernel;
        count += chunk_runs(len) - i128::from(prev_end == Some(first));
        prev_end = Some((i128::from(outs.1 - 1) * cg + i128::from(c)) * kernel + len);
    }
    count as u64
}

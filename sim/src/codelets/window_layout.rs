//! The channel-grouped layout of a window vertex's operand blocks (PopLibs' `createInput`
//! layout, [`ipusim_exe::layout`]): where an element of plane `(n, c)` sits in a block, and
//! the un-grouping of a whole block into NCHW order once it is widened to f32.

use crate::numerics::kernels::{convert, transpose};
use ipusim_exe::layout;

/// The channel-grouped layout of an operand block: `batch × channels` planes of `plane`
/// elements, the channels in groups of `group` held innermost and the batch inside a group
/// ([`ipusim_exe::layout`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockLayout(layout::Grouped);

/// Column `gi` of the `count × G` row-major matrix `wide` to `planes[gi · plane + s0 ..]`
/// for every `gi`: eight rows at a time, so each column's part is one store of eight
/// values, and the rest one by one (groups of 2 and 4; multiples of 8 are the
/// [`transpose`] kernel's).
fn columns<const G: usize>(wide: &[f32], planes: &mut [f32], plane: usize, s0: usize) {
    let mut rows = wide.chunks_exact(8 * G);
    let mut s = s0;
    for block in rows.by_ref() {
        for gi in 0..G {
            let column: [f32; 8] = std::array::from_fn(|j| block[j * G + gi]);
            planes[gi * plane + s..][..8].copy_from_slice(&column);
        }
        s += 8;
    }
    for (j, row) in rows.remainder().chunks_exact(G).enumerate() {
        for (gi, &v) in row.iter().enumerate() {
            planes[gi * plane + s + j] = v;
        }
    }
}

impl BlockLayout {
    /// Row-major planes (group 1).
    pub(crate) const PLAIN: BlockLayout = BlockLayout(layout::Grouped {
        batch: 1,
        channels: 1,
        spatial: 1,
        group: 1,
    });

    pub(crate) fn new(group: u32, batch: u64, channels: u64, plane: u64) -> BlockLayout {
        BlockLayout(layout::Grouped {
            batch: batch.max(1),
            channels: channels.max(1),
            spatial: plane.max(1),
            group: u64::from(group.max(1)),
        })
    }

    pub(crate) fn group(&self) -> u64 {
        self.0.group
    }

    /// The block position of element `s` of plane `(n, c)` (block-relative).
    pub(crate) fn at(&self, n: u64, c: u64, s: u64) -> usize {
        self.0.index(n, c, s) as usize
    }

    /// Where plane `(n, c)` lies: its element `s` is at `base + s · step` (the layout's
    /// index is linear in the plane position), so a walk over a plane divides once.
    pub(crate) fn plane_at(&self, n: u64, c: u64) -> (usize, usize) {
        (self.at(n, c, 0), self.0.group.max(1) as usize)
    }

    /// (group, plane, channels, batch, channel groups) as host sizes.
    fn sizes(&self) -> (usize, usize, usize, usize, usize) {
        let l = &self.0;
        let (g, channels) = (l.group as usize, l.channels as usize);
        let groups = (channels / g).max(1);
        (g, l.spatial as usize, channels, l.batch as usize, groups)
    }

    /// `dst[logical(i)] = src[i]` for every storage position `i` (positions whose logical
    /// index falls outside `dst` are dropped): a whole block as [`BlockLayout::whole`]
    /// transposes it, any other walked in the storage order `[C/g, N, S, g]` in nested
    /// loops, without a division per element.
    pub(crate) fn ungroup(&self, src: &[f32], dst: &mut [f32]) {
        if self.whole(src, dst, |part, out| out.copy_from_slice(part)) {
            return;
        }
        let (g, plane, channels, batch, groups) = self.sizes();
        let mut i = 0;
        'all: for cg in 0..groups {
            for n in 0..batch {
                for s in 0..plane {
                    for gi in 0..g {
                        let Some(&v) = src.get(i) else {
                            break 'all;
                        };
                        i += 1;
                        if let Some(slot) = dst.get_mut((n * channels + cg * g + gi) * plane + s) {
                            *slot = v;
                        }
                    }
                }
            }
        }
    }

    /// [`BlockLayout::ungroup`] of an FP16 block, widened on the way (exact), for a whole
    /// block ([`BlockLayout::whole`]). Returns false, writing nothing, for any other block
    /// (the caller widens it and un-groups it).
    pub(crate) fn ungroup_widen(&self, src: &[half::f16], dst: &mut [f32]) -> bool {
        self.whole(src, dst, convert::widen)
    }

    /// [`BlockLayout::ungroup_widen`] into planes laid out apart: plane `(n, c)` of the
    /// block starts at `dst[n · n_stride + c · c_stride]` (its positions consecutive), as in a
    /// convolution's padded feature map ([`super::conv_matrices::Padded`]), whose planes
    /// have rows of zeros between them. `c_stride` at least the plane, `n_stride` at least
    /// the image's planes. Returns false, writing nothing, for a block that is not whole,
    /// planes that do not fit in `dst`, and group 1 (a block of group 1 is stored in NCHW
    /// block order, not by this layout's index).
    pub(crate) fn ungroup_widen_strided(
        &self,
        src: &[half::f16],
        dst: &mut [f32],
        (n_stride, c_stride): (usize, usize),
    ) -> bool {
        let (_, plane, channels, batch, _) = self.sizes();
        let end = (batch.saturating_sub(1) * n_stride)
            .saturating_add(channels.saturating_sub(1) * c_stride)
            .saturating_add(plane);
        self.group() > 1
            && c_stride >= plane
            && n_stride >= channels * c_stride
            && dst.len() >= end
            && self.whole_strided(src, dst, (n_stride, c_stride), convert::widen)
    }

    /// An FP16 block widened (exactly) into position-major order: element `s` of plane
    /// `(n, c)` to `dst[(n · plane + s) · channels + c]`. Each (group, image) part of the
    /// block is a `plane × g` row-major matrix whose rows are runs of `dst`'s rows, so
    /// nothing is transposed ([`convert::widen_rows`]). Returns false, writing nothing, for
    /// a block that is not whole (as [`BlockLayout::ungroup_widen`]), for a `dst` of another
    /// length and for group 1 (stored NCHW).
    pub(crate) fn widen_position_major(&self, src: &[half::f16], dst: &mut [f32]) -> bool {
        let (g, plane, channels, batch, groups) = self.sizes();
        let whole = g >= 2 && channels == groups * g && src.len() == channels * batch * plane;
        if !(whole && dst.len() == src.len()) {
            return false;
        }
        for (b, block) in src.chunks_exact(plane * g).enumerate() {
            let (cg, n) = (b / batch, b % batch);
            convert::widen_rows(
                block,
                g,
                &mut dst[n * plane * channels + cg * g..],
                channels,
            );
        }
        true
    }

    /// The position-major rows of image `n` (`src[s · ld + c]`: position `s`, block channel
    /// `c`) for the channels `c0..c1`, each to its place in the block `dst`: per channel
    /// group, one run of its lanes in range per position. Returns false, writing nothing,
    /// when a row or a place is outside `src` or `dst`, or `c0..c1` outside the channels.
    pub(crate) fn place_position_major(
        &self,
        (src, ld): (&[f32], usize),
        n: usize,
        (c0, c1): (usize, usize),
        dst: &mut [f32],
    ) -> bool {
        let (g, plane, channels, batch, _) = self.sizes();
        if n >= batch || c0 > c1 || c1 > channels || ld < c1 || src.len() < (plane - 1) * ld + c1 {
            return false;
        }
        // The last group's part ends the furthest into the block.
        let last = c1.saturating_sub(1) / g * g;
        if c0 < c1 && self.at(n as u64, last as u64, 0) + plane * g > dst.len() {
            return false;
        }
        let mut c = c0;
        while c < c1 {
            let (lo, hi) = (c % g, (c1 - c + c % g).min(g));
            let (base, _) = self.plane_at(n as u64, (c - lo) as u64);
            let part = &mut dst[base..base + plane * g];
            // Whole groups of 8 (ResNet's): each run one 32-byte move, not a copy call.
            if lo == 0 && hi == 8 && g == 8 {
                for (s, out) in part.chunks_exact_mut(8).enumerate() {
                    let run: &[f32; 8] = src[s * ld + c..][..8].try_into().unwrap_or(&[0.0; 8]);
                    out.copy_from_slice(run);
                }
            } else {
                for (s, out) in part.chunks_exact_mut(g).enumerate() {
                    out[lo..hi].copy_from_slice(&src[s * ld + c..][..hi - lo]);
                }
            }
            c += hi - lo;
        }
        true
    }

    /// Un-groups a whole block — whole channel groups, every position present — into `dst`:
    /// each (group, image) block is a `plane × g` matrix stored row-major, taken a run of
    /// positions at a time into a small f32 buffer by `load` and transposed from there into
    /// `g` planes of the image, so the block is read once and each f32 written once.
    /// Returns false, writing nothing, for any other block.
    fn whole<T>(&self, src: &[T], dst: &mut [f32], load: impl Fn(&[T], &mut [f32])) -> bool {
        let (_, plane, channels, _, _) = self.sizes();
        src.len() == dst.len() && self.whole_strided(src, dst, (channels * plane, plane), load)
    }

    /// [`BlockLayout::whole`] with plane `(n, c)` at `dst[n · n_stride + c · c_stride ..]`
    /// (the caller checks that every plane fits).
    fn whole_strided<T>(
        &self,
        src: &[T],
        dst: &mut [f32],
        (n_stride, c_stride): (usize, usize),
        load: impl Fn(&[T], &mut [f32]),
    ) -> bool {
        const BUFFER: usize = 1024;
        let (g, plane, channels, batch, groups) = self.sizes();
        if g > BUFFER || channels != groups * g || src.len() != groups * batch * plane * g {
            return false;
        }
        let run = BUFFER / g;
        let mut wide = [0f32; BUFFER];
        for (b, block) in src.chunks_exact(plane * g).enumerate() {
            let (cg, n) = (b / batch, b % batch);
            let base = n * n_stride + cg * g * c_stride;
            let planes = &mut dst[base..base + (g - 1) * c_stride + plane];
            for (r, part) in block.chunks(run * g).enumerate() {
                let wide = &mut wide[..part.len()];
                load(part, wide);
                let s0 = r * run;
                match g {
                    2 => columns::<2>(wide, planes, c_stride, s0),
                    4 => columns::<4>(wide, planes, c_stride, s0),
                    _ => transpose::columns_to_planes(wide, g, planes, c_stride, s0),
                }
            }
        }
        true
    }

    /// The logical (NCHW block) index of storage position `i`.
    #[cfg(test)]
    fn logical(&self, i: usize) -> usize {
        let l = &self.0;
        let (g, i) = (l.group, i as u64);
        let gi = i % g;
        let rest = i / g;
        let s = rest % l.spatial;
        let rest = rest / l.spatial;
        let (cg, n) = (rest / l.batch, rest % l.batch);
        ((n * l.channels + cg * g + gi) * l.spatial + s) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::BlockLayout;

    /// The un-grouping puts every storage position where `logical` says, for whole and
    /// partial blocks.
    #[test]
    fn ungroup_follows_the_logical_index() {
        for (group, batch, channels, plane, len) in [
            (4, 2, 8, 6, 2 * 8 * 6),
            (8, 3, 16, 1, 3 * 16),
            (4, 2, 8, 5, 2 * 4 * 5 + 7),
            (2, 1, 2, 9, 2 * 9),
            (2, 3, 4, 2, 3 * 4 * 2),
            // Whole blocks of every group the transpose has a width for (and one it has
            // not), planes longer than a run of the buffer and not a multiple of eight.
            (4, 2, 8, 37, 2 * 8 * 37),
            (8, 2, 16, 130, 2 * 16 * 130),
            (16, 2, 32, 200, 2 * 32 * 200),
            (16, 1, 16, 64, 16 * 64),
            (32, 1, 64, 20, 64 * 20),
        ] {
            let layout = BlockLayout::new(group, batch, channels, plane);
            let src: Vec<f32> = (0..len).map(|i| i as f32).collect();
            let mut want = vec![-1.0; len];
            for (i, &v) in src.iter().enumerate() {
                if let Some(slot) = want.get_mut(layout.logical(i)) {
                    *slot = v;
                }
            }
            let mut got = vec![-1.0; len];
            layout.ungroup(&src, &mut got);
            assert_eq!(
                got, want,
                "group {group}, batch {batch}, channels {channels}, plane {plane}"
            );
        }
    }

    /// A plane's base and step give every element's position.
    #[test]
    fn plane_at_is_the_index_of_every_element() {
        for (group, batch, channels, plane) in [(4, 2, 8, 6), (1, 3, 5, 7), (16, 1, 32, 9)] {
            let layout = BlockLayout::new(group, batch, channels, plane);
            for n in 0..batch {
                for c in 0..channels {
                    let (base, step) = layout.plane_at(n, c);
                    for s in 0..plane {
                        assert_eq!(base + s as usize * step, layout.at(n, c, s));
                    }
                }
            }
        }
    }

    /// Widening and un-grouping in one pass equals widening then un-grouping, and declines
    /// partial blocks.
    #[test]
    fn ungroup_widen_equals_widen_then_ungroup() {
        use half::f16;
        for (group, batch, channels, plane) in
            [(4, 2, 8, 6), (8, 3, 16, 1), (16, 2, 32, 200), (2, 1, 2, 9)]
        {
            let layout = BlockLayout::new(group, batch, channels, plane);
            let len = (batch * channels * plane) as usize;
            let src: Vec<f16> = (0..len)
                .map(|i| f16::from_f32(i as f32 * 0.5 - 7.0))
                .collect();
            let wide: Vec<f32> = src.iter().map(|h| h.to_f32()).collect();
            let mut want = vec![0.0; len];
            layout.ungroup(&wide, &mut want);
            let mut got = vec![-1.0; len];
            assert!(layout.ungroup_widen(&src, &mut got));
            assert_eq!(
                got, want,
                "group {group}, batch {batch}, channels {channels}, plane {plane}"
            );
        }
        let partial = BlockLayout::new(4, 2, 8, 5);
        let mut out = vec![-1.0; 47];
        assert!(!partial.ungroup_widen(&[f16::ONE; 47], &mut out));
        assert!(out.iter().all(|&x| x == -1.0));
    }
}

//! Channel-grouped layouts of feature maps.
//!
//! PopLibs creates a convolution's activations with their channels in groups held innermost
//! and the batch inside the channel groups (`createInput`, `lib/poplin/Convolution.cpp`: a
//! `[C/g][N][H][W][g]` variable, ignoring conv groups and serial splits, seen as NCHW
//! through a dim-shuffle), so that a tile's block of `g` channels over the batch and a run
//! of rows is one contiguous region: the exchange moves few large regions, and the AMP reads
//! `g` input channels per load. ipusim stores a feature map the same way: a value of logical
//! shape `[N, C, S…]` (rank ≥ 3, the channel axis 1, spatial axes after it) grouped by `g` is
//! held in a tensor of *storage* shape `[C/g, N, S…, g]`, row-major. Logical element
//! `(n, c, s…)` is storage element `(c / g, n, s…, c mod g)`. A group of 1 is the plain
//! row-major (NCHW) layout.
//!
//! The compiler decides the group of each value (its producer's choice, [`channel_group`]);
//! the simulator applies [`ungroup`] when it shows a value in its logical order.

/// Whether a value of logical `dims` can be held grouped by `g`: rank at least 3 and `g`
/// dividing the channels (axis 1).
pub fn can_group(dims: &[usize], g: u32) -> bool {
    g >= 1 && dims.len() >= 3 && dims[1].is_multiple_of(g as usize)
}

/// The storage dimensions of a value of logical `dims` grouped by `g`: `[C/g, N, S…, g]`
/// (`dims` themselves when `g` is 1 or cannot group them).
pub fn storage_dims(dims: &[usize], g: u32) -> Vec<usize> {
    if g <= 1 || !can_group(dims, g) {
        return dims.to_vec();
    }
    let g = g as usize;
    let mut out = Vec::with_capacity(dims.len() + 1);
    out.push(dims[1] / g);
    out.push(dims[0]);
    out.extend_from_slice(&dims[2..]);
    out.push(g);
    out
}

/// The group the compiler gives a feature map of `channels` channels written by a vertex
/// that produces `preferred` channels per pass: the largest power of two up to `preferred`
/// that divides them (1 when none does). A convolution passes its AMP's output channels
/// (conv units), as PopLibs groups a convolution's output by its `outChansPerGroup`
/// (ipu-hardware.md §5.3, §8); a value keeps its group through element-wise ops and casts.
pub fn channel_group(channels: usize, preferred: u32) -> u32 {
    let mut g = 1u32;
    while g * 2 <= preferred.max(1) && channels.is_multiple_of(g as usize * 2) {
        g *= 2;
    }
    g
}

/// The extents of a (block of a) feature map held grouped: `batch × channels` planes of
/// `spatial` elements, the channels in groups of `group`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grouped {
    /// Batch elements.
    pub batch: u64,
    /// Channels (a multiple of `group`).
    pub channels: u64,
    /// Elements of a channel plane.
    pub spatial: u64,
    /// Channels per group, held innermost.
    pub group: u64,
}

impl Grouped {
    /// The storage index of logical element `(n, c, s)`: `((c/g · N + n) · S + s) · g + c mod g`,
    /// and the row-major `(n · C + c) · S + s` for a group of 1 (or 0).
    pub fn index(&self, n: u64, c: u64, s: u64) -> u64 {
        let g = self.group;
        if g <= 1 {
            return (n * self.channels + c) * self.spatial + s;
        }
        ((c / g * self.batch + n) * self.spatial + s) * g + c % g
    }
}

/// The elements of a value stored grouped by `g` (`storage`, `es` bytes each, logical
/// `dims`), in logical row-major order.
pub fn ungroup(storage: &[u8], es: usize, dims: &[usize], g: u32) -> Vec<u8> {
    if g <= 1 || !can_group(dims, g) {
        return storage.to_vec();
    }
    let layout = Grouped {
        batch: dims[0] as u64,
        channels: dims[1] as u64,
        spatial: dims[2..].iter().map(|&d| d as u64).product(),
        group: u64::from(g),
    };
    let mut out = vec![0u8; storage.len()];
    let mut at = 0usize;
    for ni in 0..layout.batch {
        for ci in 0..layout.channels {
            for s in 0..layout.spatial {
                let from = layout.index(ni, ci, s) as usize * es;
                if let (Some(dst), Some(src)) =
                    (out.get_mut(at..at + es), storage.get(from..from + es))
                {
                    dst.copy_from_slice(src);
                }
                at += es;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_dims_split_the_channels_and_hold_the_group_innermost() {
        assert_eq!(storage_dims(&[2, 32, 5, 7], 16), vec![2, 2, 5, 7, 16]);
        assert_eq!(storage_dims(&[3, 32, 5, 7], 8), vec![4, 3, 5, 7, 8]);
        assert_eq!(storage_dims(&[2, 3, 5, 7], 16), vec![2, 3, 5, 7]);
        assert_eq!(storage_dims(&[2, 32], 16), vec![2, 32]);
        assert_eq!(storage_dims(&[2, 32, 5, 7], 1), vec![2, 32, 5, 7]);
        assert_eq!(channel_group(64, 16), 16);
        assert_eq!(channel_group(64, 8), 8);
        assert_eq!(channel_group(24, 16), 8);
        assert_eq!(channel_group(3, 16), 1);
    }

    #[test]
    fn the_batch_lies_inside_a_channel_group() {
        // Logical [2, 4, 3] grouped by 2: storage [2, 2, 3, 2] = [C/g, N, S, g].
        let l = Grouped {
            batch: 2,
            channels: 4,
            spatial: 3,
            group: 2,
        };
        // Channels 0 and 1 of both images come first, image 0 before image 1.
        assert_eq!(l.index(0, 0, 0), 0);
        assert_eq!(l.index(0, 1, 0), 1);
        assert_eq!(l.index(0, 0, 2), 4);
        assert_eq!(l.index(1, 0, 0), 6);
        assert_eq!(l.index(1, 1, 2), 11);
        assert_eq!(l.index(0, 2, 0), 12);
        assert_eq!(l.index(1, 3, 2), 23);
        // A group of 1 is row-major NCHW.
        let plain = Grouped { group: 1, ..l };
        assert_eq!(plain.index(0, 1, 0), 3);
        assert_eq!(plain.index(1, 0, 0), 12);
    }

    #[test]
    fn ungroup_inverts_the_storage_index() {
        let dims = [2usize, 4, 3];
        let l = Grouped {
            batch: 2,
            channels: 4,
            spatial: 3,
            group: 2,
        };
        let n = 24u64;
        let mut storage = vec![0u8; n as usize];
        for ni in 0..2 {
            for ci in 0..4 {
                for s in 0..3 {
                    let logical = (ni * 4 + ci) * 3 + s;
                    storage[l.index(ni, ci, s) as usize] = logical as u8;
                }
            }
        }
        let out = ungroup(&storage, 1, &dims, 2);
        assert_eq!(out, (0..n as u8).collect::<Vec<u8>>());
        // Every storage index is hit once.
        let mut seen = storage.clone();
        seen.sort_unstable();
        assert_eq!(seen, (0..n as u8).collect::<Vec<u8>>());
    }
}

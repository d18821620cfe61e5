//! The parameters of a block vertex (`Reduce`, `ArgMax`, `Softmax`, `SoftmaxCrossEntropy`:
//! the `# Block codelets` section of [`crate::codelets`]) and the addressing of its rows.

use serde::{Deserialize, Serialize};

/// Parameters of a block vertex (see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockParams {
    /// Groups in the input block.
    pub groups: u32,
    /// Rows per group (the reduced / softmax dimension).
    pub count: u32,
    /// Row width of the input block.
    pub width: u32,
    /// First column handled.
    pub col_begin: u32,
    /// Columns handled.
    pub cols: u32,
    /// Scale applied to `Reduce` results (1 otherwise).
    pub scale: f64,
    /// Repeats of the block summed into the same outputs (a `Reduce`'s outer strides,
    /// PopLibs' `numOuterStrides` of the strided reduce: lib/popops/codelets/
    /// ReduceCodelets.hpp `computeStridedReduce`); 1 for none. Row `j` of a group is
    /// repeat `j / count`, row `j % count`.
    #[serde(default = "one")]
    pub outer: u32,
    /// Elements from the start of one repeat to the start of the next (0 with one repeat).
    #[serde(default)]
    pub outer_stride: u32,
}

impl BlockParams {
    /// A block of `groups × count × width` elements, handling columns
    /// `[col_begin, col_begin + cols)`, without repeats.
    pub fn new(groups: u32, count: u32, width: u32, (col_begin, cols): (u32, u32)) -> Self {
        BlockParams {
            groups,
            count,
            width,
            col_begin,
            cols,
            scale: 1.0,
            outer: 1,
            outer_stride: 0,
        }
    }

    /// Rows summed into each output: `outer × count`.
    pub fn rows(&self) -> u64 {
        u64::from(self.outer.max(1)) * u64::from(self.count)
    }

    /// Elements from the block's start to each row of group 0, in summation order (repeat
    /// by repeat, row by row): `rows()` offsets, with no division per row (the simulator
    /// walks them in its inner loops).
    pub fn row_offsets(&self) -> impl Iterator<Item = usize> {
        let (stride, width) = (self.outer_stride as usize, self.width as usize);
        let count = self.count as usize;
        (0..self.outer.max(1) as usize)
            .flat_map(move |o| (0..count).map(move |i| o * stride + i * width))
    }

    /// [`BlockParams::row_offsets`] as runs of up to `max` consecutive rows of one repeat:
    /// `(offset of the run's first row, rows)`, its rows `width` elements apart.
    pub fn row_runs(&self, max: usize) -> impl Iterator<Item = (usize, usize)> {
        let (stride, width) = (self.outer_stride as usize, self.width as usize);
        let (count, max) = (self.count as usize, max.max(1));
        (0..self.outer.max(1) as usize).flat_map(move |o| {
            (0..count)
                .step_by(max)
                .map(move |i| (o * stride + i * width, max.min(count - i)))
        })
    }

    /// Elements the block spans: `(outer − 1) × outer_stride + groups × count × width`.
    pub fn span(&self) -> u64 {
        u64::from(self.outer.max(1) - 1) * u64::from(self.outer_stride)
            + u64::from(self.groups) * u64::from(self.count) * u64::from(self.width)
    }
}

fn one() -> u32 {
    1
}

#[cfg(test)]
mod tests {
    use super::BlockParams;

    /// The runs' rows, each `width` after the one before, are `row_offsets` in order, no run
    /// longer than asked or crossing a repeat.
    #[test]
    fn row_runs_are_the_row_offsets_in_order() {
        for (count, width, outer, stride) in [(7, 16, 1, 0), (10, 4, 3, 64), (1, 8, 2, 8)] {
            let p = BlockParams {
                outer,
                outer_stride: stride,
                ..BlockParams::new(1, count, width, (0, width))
            };
            let want: Vec<usize> = p.row_offsets().collect();
            for max in [0, 1, 3, 4, 100] {
                let mut got = Vec::new();
                for (first, rows) in p.row_runs(max) {
                    assert!((1..=max.max(1)).contains(&rows) && rows <= count as usize);
                    got.extend((0..rows).map(|r| first + r * width as usize));
                }
                assert_eq!(got, want, "count {count} outer {outer} max {max}");
            }
        }
    }
}

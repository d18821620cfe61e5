//! The transpose of a row-major f32 matrix into planes: the un-grouping of a
//! channel-grouped operand block (`codelets::window_layout`), whose `positions × g`
//! matrices become `g` planes, and a convolution's weight matrices
//! (`codelets::conv_matrices`). Eight rows by eight columns at a time with AVX's
//! unpack-and-shuffle transpose where the CPU has it (24 shuffles for 64 values instead of
//! 64 single-element gathers); the values are moved, never computed.

/// Column `c` of the `rows × g` row-major matrix `m` (`rows = m.len() / g`) to
/// `planes[c · plane + s0 ..][..rows]`, for every `c < g` (nothing when `g` is 0); `planes`
/// must hold every column's destination. Whole groups of 8 columns go through registers,
/// the columns past the last group one value at a time.
pub fn columns_to_planes(m: &[f32], g: usize, planes: &mut [f32], plane: usize, s0: usize) {
    if g == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx") {
            // SAFETY: the CPU supports AVX, the only feature `columns_avx` was compiled for.
            return unsafe { x86::columns_avx(m, g, planes, plane, s0) };
        }
    }
    columns_scalar(m, g, planes, plane, s0, 0);
}

/// [`columns_to_planes`] one value at a time, from row `first` on.
fn columns_scalar(m: &[f32], g: usize, planes: &mut [f32], plane: usize, s0: usize, first: usize) {
    for (j, row) in m.chunks_exact(g).enumerate().skip(first) {
        for (c, &v) in row.iter().enumerate() {
            planes[c * plane + s0 + j] = v;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// [`super::columns_to_planes`]: each block of 8 rows × 8 columns loaded as 8 row
    /// vectors, transposed in registers, stored as 8 column vectors; the columns past the
    /// last whole 8 and the last rows (fewer than 8) one value at a time.
    #[target_feature(enable = "avx")]
    pub(super) unsafe fn columns_avx(
        m: &[f32],
        g: usize,
        planes: &mut [f32],
        plane: usize,
        s0: usize,
    ) {
        let rows = m.len() / g;
        let blocks = rows / 8;
        let full = g - g % 8;
        for b in 0..blocks {
            let block = &m[b * 8 * g..(b + 1) * 8 * g];
            for c0 in (0..full).step_by(8) {
                let row = |j: usize| &block[j * g + c0..j * g + c0 + 8];
                let columns = transpose8([
                    load(row(0)),
                    load(row(1)),
                    load(row(2)),
                    load(row(3)),
                    load(row(4)),
                    load(row(5)),
                    load(row(6)),
                    load(row(7)),
                ]);
                for (c, v) in columns.into_iter().enumerate() {
                    let at = (c0 + c) * plane + s0 + b * 8;
                    store(&mut planes[at..at + 8], v);
                }
            }
            for (j, row) in block.chunks_exact(g).enumerate() {
                for (c, &v) in row.iter().enumerate().skip(full) {
                    planes[c * plane + s0 + b * 8 + j] = v;
                }
            }
        }
        super::columns_scalar(m, g, planes, plane, s0, blocks * 8);
    }

    /// The 8 values of `x` (8 long).
    #[inline]
    #[target_feature(enable = "avx")]
    fn load(x: &[f32]) -> __m256 {
        assert!(x.len() == 8);
        // SAFETY: `x` holds 8 f32 (32 bytes); the load is unaligned-tolerant.
        unsafe { _mm256_loadu_ps(x.as_ptr()) }
    }

    /// `v` into `x` (8 long).
    #[inline]
    #[target_feature(enable = "avx")]
    fn store(x: &mut [f32], v: __m256) {
        assert!(x.len() == 8);
        // SAFETY: `x` holds 8 f32 (32 bytes); the store is unaligned-tolerant.
        unsafe { _mm256_storeu_ps(x.as_mut_ptr(), v) }
    }

    /// The transpose of the 8 × 8 matrix whose rows are `r`: element `j` of result `c` is
    /// element `c` of row `j`.
    #[inline]
    #[target_feature(enable = "avx")]
    fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        // 0x44: elements 0, 1 of each operand; 0xEE: elements 2, 3 (per 128-bit lane).
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        // 0x20: the low 128-bit lanes of both operands; 0x31: the high ones.
        [
            _mm256_permute2f128_ps::<0x20>(u0, u4),
            _mm256_permute2f128_ps::<0x20>(u1, u5),
            _mm256_permute2f128_ps::<0x20>(u2, u6),
            _mm256_permute2f128_ps::<0x20>(u3, u7),
            _mm256_permute2f128_ps::<0x31>(u0, u4),
            _mm256_permute2f128_ps::<0x31>(u1, u5),
            _mm256_permute2f128_ps::<0x31>(u2, u6),
            _mm256_permute2f128_ps::<0x31>(u3, u7),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value lands in its column's plane, for row counts around the 8-row blocks,
    /// widths of one to four 8-column blocks and widths with columns past them (1, 3, 9,
    /// 12), an offset into the planes, and planes longer than the rows (the positions not
    /// written keep their values).
    #[test]
    fn columns_land_in_their_planes() {
        for g in [8, 16, 24, 32, 1, 3, 9, 12] {
            for rows in [0, 1, 7, 8, 9, 15, 16, 17, 40, 63] {
                for s0 in [0, 3] {
                    let plane = rows + s0 + 5;
                    let m: Vec<f32> = (0..rows * g).map(|i| i as f32 + 0.5).collect();
                    let mut want = vec![-1.0f32; g * plane];
                    for j in 0..rows {
                        for c in 0..g {
                            want[c * plane + s0 + j] = m[j * g + c];
                        }
                    }
                    let mut got = vec![-1.0f32; g * plane];
                    columns_to_planes(&m, g, &mut got, plane, s0);
                    assert_eq!(got, want, "g {g}, rows {rows}, s0 {s0}");
                    let mut scalar = vec![-1.0f32; g * plane];
                    columns_scalar(&m, g, &mut scalar, plane, s0, 0);
                    assert_eq!(scalar, want, "scalar: g {g}, rows {rows}, s0 {s0}");
                }
            }
        }
    }
}

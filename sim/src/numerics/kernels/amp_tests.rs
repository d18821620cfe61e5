//! Tests of [`super`] (`amp.rs`): kept beside it, in their own file.
use super::*;
use crate::numerics::rng::SrRng;

fn h(x: f32) -> f16 {
    f16::from_f32(x)
}

#[test]
fn numerics_3_1_dot_vector() {
    let a: Vec<f16> = [2048.0, 1.0, 1.0, 1.0, 1.0].map(h).to_vec();
    let ones = vec![h(1.0); 5];
    let f16p = |chunk| {
        amp_dot_f16_partials(&a, &ones, f16::ZERO, chunk, &mut Rounding::nearest(false)).unwrap()
    };
    let f32p = |chunk| amp_dot_f32_partials(&a, &ones, 0.0, chunk).unwrap();
    assert_eq!(f16p(1), (h(2048.0), FpSts::empty()));
    assert_eq!(f32p(1), (2052.0, FpSts::empty()));
    assert_eq!(f16p(AMP_CHUNK), (h(2052.0), FpSts::empty()));
    assert_eq!(f32p(AMP_CHUNK), (2052.0, FpSts::empty()));
    let a32: Vec<f32> = a.iter().map(|x| x.to_f32()).collect();
    assert_eq!(
        dot_f32(&a32, &[1.0; 5], 0.0, 1).unwrap(),
        (2052.0, FpSts::empty())
    );
}

/// Deterministic pseudo-random FP16 operands of moderate size.
fn operands(len: usize, seed: u32) -> Vec<f16> {
    let mut rng = SrRng::new(u64::from(seed), 0, 0);
    (0..len)
        .map(|_| h(((rng.next_u32() >> 8) as f32 / 8388608.0 - 1.0) * 8.0))
        .collect()
}

#[test]
fn fast_path_equals_reference_values_flags_and_draws() {
    // Every row and column block of the kernels: 4 rows at a time and a last block of 1,
    // 2 or 3 rows (9, 6 and 7 rows; 1, 2 and 3 alone); 32 + 16 + 8 + 3 columns, and for a
    // single row 64 + 32 + 16 + 8 + 3.
    for shape in [
        MatMulShape { m: 5, k: 37, n: 19 },
        MatMulShape { m: 9, k: 40, n: 59 },
        MatMulShape { m: 6, k: 21, n: 59 },
        MatMulShape {
            m: 7,
            k: 33,
            n: 123,
        },
        MatMulShape {
            m: 1,
            k: 37,
            n: 123,
        },
        MatMulShape { m: 2, k: 18, n: 70 },
        MatMulShape { m: 3, k: 16, n: 64 },
    ] {
        fast_path_equals_reference(shape);
    }
}

/// The AVX-512 kernel's blocks (8 rows of one vector of columns, 6 of two, 4 of three, the
/// rows left in blocks of 4, 2 and 1; groups of 48 columns, the last of one to three
/// vectors with the last masked) and, on every CPU, the generic kernel called directly equal
/// the reference: FP16 operands, and FP32 operands whose fused multiply-adds round (full
/// mantissas), from partials that are not zero.
#[test]
fn fp32_partials_kernels_equal_the_reference() {
    for (m, k, n) in [
        (19, 37, 24),
        (8, 16, 32),
        (15, 40, 13),
        (23, 9, 1),
        (11, 64, 16),
        (25, 33, 40),
        (13, 20, 96),
        (7, 17, 100),
        (1, 18, 49),
        (9, 21, 8),
        (10, 12, 88),
        (17, 11, 5),
    ] {
        let shape = MatMulShape { m, k, n };
        fast_path_equals_reference(shape);
        let mut rng = SrRng::new(9, 0, 0);
        let mut full = |len: usize| -> Vec<f32> {
            (0..len)
                .map(|_| f32::from_bits(0x3c00_0000 | (rng.next_u32() & 0x83ff_ffff)))
                .collect()
        };
        let (a, b) = (full(m * k), full(k * n));
        let init = full(m * n);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for chunk in [1, 5, 16] {
            let (mut fast, mut generic, mut slow) = (init.clone(), init.clone(), init.clone());
            let ff = matmul_f32(shape, &a, &b, &mut fast, chunk).unwrap();
            f32_partials(&a, &b, &mut generic, k, n, chunk);
            let fs = reference(
                shape,
                &a,
                &b,
                Partials::F32(&mut slow),
                chunk,
                0..m,
                FpSts::empty(),
            )
            .0;
            assert_eq!(
                (bits(&fast), ff),
                (bits(&slow), fs),
                "{shape:?} chunk {chunk}"
            );
            assert_eq!(
                bits(&generic),
                bits(&slow),
                "generic {shape:?} chunk {chunk}"
            );
        }
    }
}

fn fast_path_equals_reference(shape: MatMulShape) {
    let a = operands(shape.m * shape.k, 1);
    let b = operands(shape.k * shape.n, 2);
    let (a32, b32) = (widen(&a), widen(&b));
    for chunk in [1, 3, 16, 64] {
        let init: Vec<f32> = (0..shape.m * shape.n).map(|i| i as f32 * 0.25).collect();
        let mut fast = init.clone();
        let mut slow = init.clone();
        let ff = amp_matmul_f32_partials(shape, &a, &b, &mut fast, chunk).unwrap();
        let fs = reference(
            shape,
            &a32,
            &b32,
            Partials::F32(&mut slow),
            chunk,
            0..shape.m,
            FpSts::empty(),
        )
        .0;
        assert_eq!((fast, ff), (slow, fs));
        for (sr, nanoo) in [(false, false), (true, false), (true, true)] {
            // Every seventh partial starts near the top of the range, so that rows mix
            // lanes that overflow (scalar core) with ordinary ones.
            let init16: Vec<f16> = init
                .iter()
                .enumerate()
                .map(|(i, x)| h(if i % 7 == 0 { 65000.0 } else { *x }))
                .collect();
            let (mut fast, mut slow) = (init16.clone(), init16);
            let mut rf = SrRng::new(7, 0, 0);
            let mut rs = rf.clone();
            let ff = amp_matmul_f16_partials(
                shape,
                &a,
                &b,
                &mut fast,
                chunk,
                &mut Rounding::new(sr, nanoo, &mut rf),
            )
            .unwrap();
            let fs = reference(
                shape,
                &a32,
                &b32,
                Partials::F16(&mut slow, &mut Rounding::new(sr, nanoo, &mut rs)),
                chunk,
                0..shape.m,
                FpSts::empty(),
            )
            .0;
            assert_eq!(
                fast.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                slow.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            );
            assert_eq!((ff, rf), (fs, rs));
        }
    }
}

/// A product of FP16 operands from zero partials, whose outputs are not checked
/// ([`Known::half_operands`]), does not read its output either: NaNs there give the values
/// of zeroed partials, for every block shape of the kernels (rows 1 to 9, columns 1 to 59).
#[test]
fn zero_partials_are_not_read() {
    for (m, n) in [(1, 59), (2, 17), (3, 40), (9, 59), (6, 33), (7, 1)] {
        let shape = MatMulShape { m, k: 37, n };
        let a = widen(&operands(m * shape.k, 5));
        let b = widen(&operands(shape.k * n, 6));
        let known = Known {
            zero_partials: true,
            b_finite: Some(true),
            a_finite: Some(true),
            half_operands: true,
        };
        for chunk in [1, 16] {
            let (mut told, mut zeroed) = (vec![f32::NAN; m * n], vec![0f32; m * n]);
            let ft = matmul_f32_known(shape, &a, &b, &mut told, chunk, known).unwrap();
            let fz = matmul_f32(shape, &a, &b, &mut zeroed, chunk).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                (bits(&told), ft),
                (bits(&zeroed), fz),
                "{m}x{n}, chunk {chunk}"
            );
            let (mut told, mut zeroed) = (vec![f16::NAN; m * n], vec![f16::ZERO; m * n]);
            let mut rt = SrRng::new(3, 0, 0);
            let mut rz = rt.clone();
            let ft = amp_matmul_f16_partials_widened(
                shape,
                &a,
                &b,
                &mut told,
                chunk,
                &mut Rounding::new(true, false, &mut rt),
                known,
            )
            .unwrap();
            let fz = amp_matmul_f16_partials_widened(
                shape,
                &a,
                &b,
                &mut zeroed,
                chunk,
                &mut Rounding::new(true, false, &mut rz),
                Known::default(),
            )
            .unwrap();
            let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                (bits(&told), ft),
                (bits(&zeroed), fz),
                "{m}x{n}, chunk {chunk}"
            );
        }
    }
}

/// Products from zero partials with `b`'s finiteness given equal the products that check
/// both from zeroed partials — values, flags and random draws, also where rows overflow
/// (redone from zero) and where `b` holds an infinity or a NaN (the reference path) — with
/// NaNs in the output they were told starts from zero.
#[test]
fn known_operands_change_nothing() {
    let shape = MatMulShape { m: 9, k: 40, n: 59 };
    let mut a32 = widen(&operands(shape.m * shape.k, 3));
    let mut b32 = widen(&operands(shape.k * shape.n, 4));
    // One large element in rows 2 and 7 of `a`: some of their FP32 products overflow,
    // the others stay finite, so a row redone from anything but zero would differ.
    for i in [2, 7] {
        a32[i * shape.k] = 3e38;
    }
    let zeros = vec![0f32; shape.m * shape.n];
    for poison in [None, Some(f32::INFINITY), Some(f32::NAN)] {
        if let Some(x) = poison {
            b32[5 * shape.n + 11] = x;
        }
        let known = Known {
            zero_partials: true,
            b_finite: Some(finite(&b32)),
            ..Known::default()
        };
        assert_eq!(known.b_finite, Some(poison.is_none()));
        for chunk in [1, 16] {
            // A product from zero partials does not read its output: NaNs there change
            // nothing.
            let (mut told, mut checked) = (vec![f32::NAN; zeros.len()], zeros.clone());
            let ft = matmul_f32_known(shape, &a32, &b32, &mut told, chunk, known).unwrap();
            let fc = matmul_f32(shape, &a32, &b32, &mut checked, chunk).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!((bits(&told), ft), (bits(&checked), fc));
            assert!(ft.contains(FpSts::OFLO));
            for (sr, nanoo) in [(false, false), (true, true)] {
                let (mut told, mut checked) =
                    (vec![f16::NAN; zeros.len()], vec![f16::ZERO; zeros.len()]);
                let mut rt = SrRng::new(9, 0, 0);
                let mut rc = rt.clone();
                let ft = amp_matmul_f16_partials_widened(
                    shape,
                    &a32,
                    &b32,
                    &mut told,
                    chunk,
                    &mut Rounding::new(sr, nanoo, &mut rt),
                    known,
                )
                .unwrap();
                let fc = amp_matmul_f16_partials_widened(
                    shape,
                    &a32,
                    &b32,
                    &mut checked,
                    chunk,
                    &mut Rounding::new(sr, nanoo, &mut rc),
                    Known::default(),
                )
                .unwrap();
                let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!((bits(&told), ft, rt), (bits(&checked), fc, rc));
            }
        }
    }
}

#[test]
fn f32_partials_flags() {
    // Overflow of FP32 inputs is detected on the fast path's row check.
    let (v, f) = dot_f32(&[3e38, 3e38], &[1.0, 1.0], 0.0, 1).unwrap();
    assert_eq!((v, f), (f32::INFINITY, FpSts::OFLO));
    let (v, f) = dot_f32(&[f32::INFINITY, 1.0], &[0.0, 1.0], 0.0, 16).unwrap();
    assert!(v.is_nan());
    assert_eq!(f, FpSts::INV);
    let (v, f) =
        amp_dot_f32_partials(&[f16::INFINITY, h(1.0)], &[h(1.0), h(1.0)], 0.0, 16).unwrap();
    assert_eq!((v, f), (f32::INFINITY, FpSts::empty()));
}

#[test]
fn f16_partials_overflow_policy() {
    let a = vec![h(60000.0); 2];
    let b = vec![h(1.0); 2];
    let sat = amp_dot_f16_partials(&a, &b, f16::ZERO, 1, &mut Rounding::nearest(false)).unwrap();
    assert_eq!(sat, (f16::MAX, FpSts::OFLO));
    let (v, f) = amp_dot_f16_partials(&a, &b, f16::ZERO, 1, &mut Rounding::nearest(true)).unwrap();
    assert!(v.is_nan());
    assert_eq!(f, FpSts::OFLO | FpSts::INV);
}

#[test]
fn shape_errors() {
    let shape = MatMulShape { m: 2, k: 3, n: 4 };
    let err = matmul_f32(shape, &[0.0; 6], &[0.0; 11], &mut [0.0; 8], 16);
    assert_eq!(
        err,
        Err(NumericsError::Length {
            kernel: "matmul_f32",
            operand: "b",
            expected: 12,
            found: 11
        })
    );
    let err = matmul_f32(shape, &[0.0; 6], &[0.0; 12], &mut [0.0; 8], 0);
    assert_eq!(
        err,
        Err(NumericsError::ZeroChunk {
            kernel: "matmul_f32"
        })
    );
}

/// The FP32-partials kernel reading `b`'s rows through a table (rows anywhere in another
/// buffer, `out`'s rows `ldo` apart) gives the dense kernel's bits: the same operations in
/// the same order, for row counts around the register block, column counts with and
/// without vector tails, and several chunks. Bad lengths are errors.
#[test]
fn rows_through_a_table_equal_the_dense_product() {
    // With AVX-512: one row over blocks of 8 vectors, then 4 and fewer (150, 100 columns);
    // two and three rows over blocks of up to 4 vectors; more rows in groups of up to 3
    // vectors. The generic kernel, called directly, on every CPU.
    let shapes = [
        (1, 7, 8),
        (4, 19, 16),
        (5, 33, 24),
        (3, 9, 40),
        (9, 20, 3),
        (1, 12, 150),
        (1, 9, 100),
        (2, 17, 70),
        (3, 21, 64),
        (6, 10, 50),
    ];
    for (m, k, n) in shapes {
        for chunk in [1, 4, 16] {
            let wide = |v: Vec<f16>| -> Vec<f32> { v.iter().map(|x| x.to_f32()).collect() };
            let a = wide(operands(m * k, 1));
            let b = wide(operands(k * n, 2));
            let mut dense = wide(operands(m * n, 3));
            let start = dense.clone();
            let known = Known::default();
            matmul_f32_known(MatMulShape { m, k, n }, &a, &b, &mut dense, chunk, known).unwrap();
            // `b`'s rows scattered in reverse order through a larger buffer, 3 apart.
            let stride = n + 3;
            let mut base = vec![f32::NAN; k * stride + 5];
            let rows: Vec<usize> = (0..k).map(|kk| (k - 1 - kk) * stride + 2).collect();
            for (kk, &at) in rows.iter().enumerate() {
                base[at..at + n].copy_from_slice(&b[kk * n..(kk + 1) * n]);
            }
            let ldo = n + 2;
            let mut out = vec![-1.0f32; (m - 1) * ldo + n];
            for i in 0..m {
                out[i * ldo..i * ldo + n].copy_from_slice(&start[i * n..(i + 1) * n]);
            }
            let mut generic = out.clone();
            assert!(
                matmul_f32_rows(&a, (&base, &rows), (&mut out, ldo), n, (chunk, false)).unwrap()
            );
            f32_partials_rows(&a, &base, &rows, &mut generic, (ldo, m, n), chunk);
            for out in [&out, &generic] {
                for i in 0..m {
                    let (got, want) = (&out[i * ldo..i * ldo + n], &dense[i * n..(i + 1) * n]);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(got),
                        bits(want),
                        "m {m} k {k} n {n} chunk {chunk} row {i}"
                    );
                    if i + 1 < m {
                        assert!(out[i * ldo + n..(i + 1) * ldo].iter().all(|&x| x == -1.0));
                    }
                }
            }
        }
    }
    let (a, base) = (vec![1f32; 4], vec![1f32; 8]);
    let mut out = vec![0f32; 8];
    assert!(matmul_f32_rows(&a, (&base, &[0, 4]), (&mut out, 4), 4, (0, false)).is_err());
    assert!(matmul_f32_rows(&a, (&base, &[0, 5]), (&mut out, 4), 4, (1, false)).is_err());
    assert!(matmul_f32_rows(&a, (&base, &[0, 4]), (&mut out, 3), 4, (1, false)).is_err());
    assert!(matmul_f32_rows(&a, (&base, &[0, 4]), (&mut out[..5], 4), 4, (1, false)).is_err());
    // An overflow is reported, not hidden.
    let big = vec![3e38f32; 4];
    assert!(!matmul_f32_rows(&big, (&big, &[0, 0]), (&mut out, 4), 4, (1, false)).unwrap());
}

/// Claiming FP16 operands (and `a`'s finiteness) changes nothing but the checks skipped:
/// the same bits with and without the claim, from operands up to the largest FP16 value in
/// magnitude, for the dense kernel and the row-table one.
#[test]
fn half_operands_claim_changes_no_value() {
    let shape = MatMulShape { m: 7, k: 70, n: 43 };
    let big = |len, seed| {
        let mut rng = SrRng::new(seed, 1, 0);
        (0..len)
            .map(|i| match i % 5 {
                0 => 65504.0,
                1 => -65504.0,
                _ => ((rng.next_u32() >> 8) as f32 / 8388608.0 - 1.0) * 60000.0,
            })
            .map(|x| h(x).to_f32())
            .collect::<Vec<f32>>()
    };
    let (a, b) = (big(shape.m * shape.k, 5), big(shape.k * shape.n, 6));
    let claim = Known {
        zero_partials: true,
        b_finite: Some(true),
        a_finite: Some(true),
        half_operands: true,
    };
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for chunk in [1, 16] {
        let zeros = vec![0f32; shape.m * shape.n];
        let (mut told, mut checked) = (zeros.clone(), zeros.clone());
        let ft = matmul_f32_known(shape, &a, &b, &mut told, chunk, claim).unwrap();
        let fc = matmul_f32(shape, &a, &b, &mut checked, chunk).unwrap();
        assert_eq!((bits(&told), ft), (bits(&checked), fc));
        assert!(told.iter().all(|x| x.is_finite()));
        let rows: Vec<usize> = (0..shape.k).map(|kk| kk * shape.n).collect();
        // The claim includes zero partials: the output is not read.
        let mut out = vec![f32::NAN; zeros.len()];
        let ok = matmul_f32_rows(&a, (&b, &rows), (&mut out, shape.n), shape.n, (chunk, true));
        assert!(ok.unwrap());
        assert_eq!(bits(&out), bits(&checked));
    }
}

/// The bound of `fp16_sums_stay_finite` at its limit: `2²²` products of the largest FP16
/// values, all of one sign, sum to a finite FP32 partial (about `2⁵⁴`) with either chunk.
#[test]
fn largest_fp16_sums_stay_finite_at_the_limit() {
    let k = 1usize << 22;
    assert!(fp16_sums_stay_finite(k) && !fp16_sums_stay_finite(k + 1));
    let a = vec![65504f32; k];
    let b = vec![65504f32; k];
    for chunk in [1, 16] {
        let mut out = [0f32; 1];
        let shape = MatMulShape { m: 1, k, n: 1 };
        let f = matmul_f32(shape, &a, &b, &mut out, chunk).unwrap();
        assert_eq!(f, FpSts::empty());
        let exact = k as f64 * 65504f64 * 65504f64;
        assert!(out[0].is_finite() && (f64::from(out[0]) - exact).abs() < exact * 0.3);
    }
}

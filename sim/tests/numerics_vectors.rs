//! The round-to-nearest test vectors of `reference/numerics.md` §3.1 and the bit-level
//! f32→f16 table of §3.4, through the public API. (The stochastic columns of §3.2/§3.4 are
//! checked statistically in `numerics_sr_stats.rs`.)

use half::f16;
use ipusim_sim::numerics::decimal::decimal_to_f16;
use ipusim_sim::numerics::kernels::amp::{amp_dot_f16_partials, amp_dot_f32_partials};
use ipusim_sim::numerics::{cast, fp16, fp32, FpSts, Rounding, Tail, AMP_CHUNK};

fn lit(text: &str) -> f16 {
    decimal_to_f16(text, false).expect("literal").0
}

fn rne() -> Rounding<'static> {
    Rounding::nearest(false)
}

#[test]
fn swamping_and_the_tutorial_table() {
    let r = &mut rne();
    assert_eq!(lit("0.0004").to_bits(), 0x0e8e);
    assert_eq!(lit("0.0004").to_f64(), 0.000_400_066_375_732_421_9);
    let quarter = lit("0.25");
    let s = fp16::add(lit("0.0004"), quarter, r).0;
    assert_eq!(s.to_f64(), 0.250_488_281_25);
    // 0.0004 + 0.25 − 0.25 = 2^-11 exactly (the tutorial's "0.0004833" is a typo).
    assert_eq!(fp16::sub(s, quarter, r).0.to_bits(), 0x1000);
    for (x, want) in [
        ("0.2", 0.199_951_171_875),
        ("0.02", 0.020_019_531_25),
        ("0.002", 0.001_953_125),
        ("0.0002", 0.000_244_140_625),
        ("0.0001", 0.0),
    ] {
        let s = fp16::add(lit(x), quarter, r).0;
        assert_eq!(
            fp16::sub(s, quarter, r).0.to_f64(),
            want,
            "{x} + 0.25 - 0.25"
        );
    }
}

#[test]
fn repeated_increments_stagnate() {
    let r = &mut rne();
    let inc = lit("0.0001");
    assert_eq!(
        (inc.to_bits(), inc.to_f64()),
        (0x068e, 0.000_100_016_593_933_105_47)
    );
    let mut s = f16::ZERO;
    let mut stalled_at = None;
    for k in 1..=10_000 {
        let next = fp16::add(s, inc, r).0;
        if next == s && stalled_at.is_none() {
            stalled_at = Some(k);
        }
        s = next;
    }
    assert_eq!((s.to_bits(), stalled_at), (0x3400, Some(2182)));
    // Accumulated in f32 and rounded once: 1.0001659 → 1.0.
    let mut acc = 0f32;
    for _ in 0..10_000 {
        acc = fp32::add(acc, inc.to_f32()).0;
    }
    assert!((f64::from(acc) - 1.000_165_9).abs() < 1e-5);
    assert_eq!(cast::f32_to_f16(acc, r).0.to_bits(), 0x3c00);
    assert_eq!(10_000.0 * inc.to_f64(), 1.000_165_939_331_054_7);
}

#[test]
fn harmonic_series_stagnates_at_513() {
    let r = &mut rne();
    let one = f16::ONE;
    let mut s = f16::ZERO;
    let mut n = 1u16;
    loop {
        let (nn, _) = cast::i32_to_f16(i32::from(n), r);
        let term = fp16::div(one, nn, r).0;
        let next = fp16::add(s, term, r).0;
        if next == s {
            break;
        }
        s = next;
        n += 1;
    }
    assert_eq!((n, s.to_bits(), s.to_f64()), (513, 0x4716, 7.085_937_5));
}

#[test]
fn overflow_ties_and_underflow() {
    let r = &mut rne();
    let max = f16::MAX;
    assert_eq!(fp16::add(max, lit("15"), r), (max, FpSts::empty()));
    // 65520 is a tie that IEEE rounds to 2^16 = inf; the IPU saturates (nanoo off).
    assert_eq!(fp16::add(max, lit("16"), r), (max, FpSts::OFLO));
    let (v, f) = fp16::add(max, lit("16"), &mut Rounding::nearest(true));
    assert_eq!((v.to_bits(), f), (0x7e00, FpSts::OFLO | FpSts::INV));
    let ten_k = lit("10000");
    assert_eq!(fp16::mul(ten_k, ten_k, r), (max, FpSts::OFLO));
    assert_eq!(fp16::mul(lit("60000"), lit("60000"), r), (max, FpSts::OFLO));
    let (v, f) = fp16::mul(ten_k, ten_k, &mut Rounding::nearest(true));
    assert_eq!((v.to_bits(), f), (0x7e00, FpSts::OFLO | FpSts::INV));
    assert_eq!(fp32::mul(1e30, 1e30), (f32::INFINITY, FpSts::OFLO));
    // Ties to even.
    let (n2048, n2050) = (lit("2048"), f16::from_bits(0x6801));
    assert_eq!(fp16::add(n2048, f16::ONE, r).0, n2048);
    assert_eq!(fp16::add(n2050, f16::ONE, r).0.to_f64(), 2052.0);
    assert_eq!(fp16::add(f16::ONE, f16::from_bits(0x1000), r).0, f16::ONE);
    assert_eq!(
        fp16::add(
            f16::ONE,
            fp16::mul(lit("3"), f16::from_bits(0x1000), r).0,
            r
        )
        .0
        .to_f64(),
        1.001_953_125
    );
    // Underflow: 2^-25 → 0 (tie to even), 2^-25·(1 + ε) → 2^-24, 3·2^-26 → 2^-24.
    for (x, want) in [
        (2f32.powi(-25), 0),
        (f32::from_bits(0x3300_0001), 1),
        (3.0 * 2f32.powi(-26), 1),
    ] {
        assert_eq!(
            cast::f32_to_f16(x, r),
            (f16::from_bits(want), FpSts::empty())
        );
    }
    // DIV0: FP16 10000/0 is NaN on the hardware (numerics.md §2.3).
    let (v, f) = fp16::div(ten_k, f16::ZERO, r);
    assert_eq!((v.to_bits(), f), (0x7e00, FpSts::DIV0));
    // NaN → int32 is −2147483648 with INV.
    assert_eq!(cast::f16_to_i32(f16::NAN), (i32::MIN, FpSts::INV));
}

#[test]
fn dot_product_separates_partials_types() {
    let a: Vec<f16> = [2048.0, 1.0, 1.0, 1.0, 1.0]
        .into_iter()
        .map(f16::from_f32)
        .collect();
    let ones = vec![f16::ONE; 5];
    // Chunk 1 (a partial write after every product): FP16 partials 2048, FP32 2052.
    let (v, _) = amp_dot_f16_partials(&a, &ones, f16::ZERO, 1, &mut rne()).unwrap();
    assert_eq!(v.to_f64(), 2048.0);
    assert_eq!(amp_dot_f32_partials(&a, &ones, 0.0, 1).unwrap().0, 2052.0);
    // Chunk 16: the five products are summed in f32 first, and 2052 is an FP16 value.
    let (v, _) = amp_dot_f16_partials(&a, &ones, f16::ZERO, AMP_CHUNK, &mut rne()).unwrap();
    assert_eq!(v.to_f64(), 2052.0);
    assert_eq!(
        amp_dot_f32_partials(&a, &ones, 0.0, AMP_CHUNK).unwrap().0,
        2052.0
    );
}

#[test]
fn exact_values_are_rounded_once() {
    // half::f16::from_f64(1 + 2^-11 + 2^-40) gives 0x3c00 (lost sticky bit); correct: 0x3c01.
    let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
    assert_eq!(rne().round_f16(x, Tail::Exact).0.to_bits(), 0x3c01);
}

#[test]
fn f32_to_f16_bit_table() {
    // numerics.md §3.4: (f32 bits, RNE f16 bits with nanoo off, with nanoo on).
    let table: [(u32, u16, u16, FpSts, FpSts); 16] = [
        (0x3f80_0000, 0x3c00, 0x3c00, FpSts::empty(), FpSts::empty()),
        (0x3f80_1000, 0x3c00, 0x3c00, FpSts::empty(), FpSts::empty()),
        (0x3f80_3000, 0x3c02, 0x3c02, FpSts::empty(), FpSts::empty()),
        (0x3f80_1001, 0x3c01, 0x3c01, FpSts::empty(), FpSts::empty()),
        (0x3f80_0800, 0x3c00, 0x3c00, FpSts::empty(), FpSts::empty()),
        (0x477f_e000, 0x7bff, 0x7bff, FpSts::empty(), FpSts::empty()),
        (0x477f_efff, 0x7bff, 0x7bff, FpSts::empty(), FpSts::empty()),
        (
            0x477f_f000,
            0x7bff,
            0x7e00,
            FpSts::OFLO,
            FpSts::OFLO.union(FpSts::INV),
        ),
        (0x3380_0000, 0x0001, 0x0001, FpSts::empty(), FpSts::empty()),
        (0x3300_0000, 0x0000, 0x0000, FpSts::empty(), FpSts::empty()),
        (0x3300_0001, 0x0001, 0x0001, FpSts::empty(), FpSts::empty()),
        (0x3340_0000, 0x0001, 0x0001, FpSts::empty(), FpSts::empty()),
        (0x387f_e000, 0x0400, 0x0400, FpSts::empty(), FpSts::empty()),
        (0x7fc0_0000, 0x7e00, 0x7e00, FpSts::INV, FpSts::INV),
        (0xff80_0000, 0xfc00, 0xfc00, FpSts::empty(), FpSts::empty()),
        (0x8000_0000, 0x8000, 0x8000, FpSts::empty(), FpSts::empty()),
    ];
    for (bits, sat, nan, sat_flags, nan_flags) in table {
        let x = f32::from_bits(bits);
        let (v, f) = cast::f32_to_f16(x, &mut Rounding::nearest(false));
        assert_eq!((v.to_bits(), f), (sat, sat_flags), "0x{bits:08x}");
        let (v, f) = cast::f32_to_f16(x, &mut Rounding::nearest(true));
        assert_eq!((v.to_bits(), f), (nan, nan_flags), "0x{bits:08x} nanoo");
    }
}

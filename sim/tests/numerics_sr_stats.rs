//! Statistical tests of stochastic rounding (numerics.md §3.2–3.4), with bounds derived
//! from the distribution each test samples — never tuned to pass.
//!
//! ## The binomial bound
//!
//! Rounding a value whose exact round-up probability is `p` in `n` independent trials
//! gives `K ~ Binomial(n, p)` round-ups: mean `np`, standard deviation
//! `σ = sqrt(np(1−p))`. Each test requires `|K − np| ≤ 5σ + 1` (the `+ 1` absorbs the
//! integer grid). When `np` is large, `K` is close to normal and a correct implementation
//! fails with probability `2·Φ(−5) ≈ 5.7e-7`. When `np` is small (the `1 + 2^-24` test:
//! `np ≈ 61`), Bernstein's inequality bounds the tails without a normal approximation:
//! `P(K − np ≥ t) ≤ exp(−t² / (2(np(1−p) + t/3)))` and
//! `P(np − K ≥ t) ≤ exp(−t² / (2np(1−p)))`; with `t = 5σ ≈ 39` these are `≤ 3.5e-5` and
//! `≤ 4e-6`. The seeds are fixed, so every run is reproducible; the bounds say how rarely a
//! *correct* rounder would fail for a random seed, and the tests below fail a rounder that
//! is wrong by more than a few σ — e.g. one that forms `1 + 2^-24` in f32 (0 round-ups),
//! or one whose probabilities are off by 1%.
//!
//! ## The sum-mean test
//!
//! The error of a sequential SR sum, `E_n = Σ e_k`, is a martingale: `E[e_k | past] = 0`
//! and `Var(e_k | past) = p_k(1−p_k)·ulp_k²` (numerics.md §3.3 [S30][S32]). So over `N`
//! independent runs the mean of the sums estimates the *exact* sum `s = 10000·f16(0.0001)`
//! with standard error `sd/√N`, and the mean squared error `E[E_n²]` equals
//! `E[Σ_k p_k(1−p_k)·ulp_k²]`, which each run can compute along its own path.

mod common;

use common::{trials, Gen};
use half::f16;
use ipusim_sim::numerics::{cast, fp16, FpSts, Rounding, SrRng, Tail};

/// Asserts `|k − np| ≤ 5σ + 1` for `k` round-ups out of `n` with probability `p`.
fn assert_binomial(what: &str, k: usize, n: usize, p: f64) {
    let (mean, sd) = (n as f64 * p, (n as f64 * p * (1.0 - p)).sqrt());
    let dev = (k as f64 - mean).abs();
    assert!(
        dev <= 5.0 * sd + 1.0,
        "{what}: {k} round-ups in {n}, expected {mean:.1} ± 5·{sd:.2}"
    );
}

/// Rounds the exact value `x` (an f32 value) to FP16 `n` times, checking that only the two
/// neighbours `lo`, `hi` (bits, after the overflow policy) appear; returns the count of `hi`.
fn count_ups(x: f32, lo: u16, hi: u16, n: usize, nanoo: bool, seed: u64) -> usize {
    let mut rng = SrRng::new(seed, 0, 0);
    let mut r = Rounding::stochastic(&mut rng, nanoo);
    let mut ups = 0;
    for _ in 0..n {
        let (v, _) = cast::f32_to_f16(x, &mut r);
        let b = v.to_bits();
        assert!(
            b == lo || b == hi,
            "{x:e} rounded to 0x{b:04x}, not 0x{lo:04x} or 0x{hi:04x}"
        );
        ups += usize::from(b == hi && hi != lo);
    }
    ups
}

#[test]
fn f32_to_f16_round_up_frequencies() {
    let n = trials(400_000);
    // (f32 bits, lower neighbour, upper neighbour, exact P(up)) — numerics.md §3.2, §3.4.
    let cases: [(u32, u16, u16, f64); 9] = [
        (0x3f80_0800, 0x3c00, 0x3c01, 0.25),                 // 1 + 2^-12
        (0x3f80_1000, 0x3c00, 0x3c01, 0.5),                  // 1 + 2^-11 (tie)
        (0x3f80_1800, 0x3c00, 0x3c01, 0.75),                 // 1 + 3·2^-12
        (0x3f80_3000, 0x3c01, 0x3c02, 0.5),                  // 1 + 3·2^-11 (tie)
        (0x3f80_1001, 0x3c00, 0x3c01, 0.5 + 2f64.powi(-13)), // sticky bit
        (0x3300_0000, 0x0000, 0x0001, 0.5),                  // 2^-25, subnormal
        (0x3300_0001, 0x0000, 0x0001, 0.5 + 2f64.powi(-24)), // 2^-25·(1 + 2^-23)
        (0x3340_0000, 0x0000, 0x0001, 0.75),                 // 3·2^-26
        (0x387f_e000, 0x03ff, 0x0400, 0.5),                  // subnormal → normal boundary
    ];
    for (i, (bits, lo, hi, p)) in cases.into_iter().enumerate() {
        let k = count_ups(f32::from_bits(bits), lo, hi, n, false, i as u64);
        assert_binomial(&format!("0x{bits:08x}"), k, n, p);
    }
}

#[test]
fn near_overflow_rounds_up_into_the_overflow_policy() {
    // 65519.996 (0x477fefff) lies between 65504 and 65536 (beyond the range):
    // P(up) = (65519.996 − 65504)/32 = 0.5 − 2^-13. Up means overflow: with nanoo off the
    // value saturates to 65504 and OFLO is raised; with nanoo on it is NaN with OFLO|INV.
    let n = trials(400_000);
    let p = 0.5 - 2f64.powi(-13);
    for nanoo in [false, true] {
        let mut rng = SrRng::new(77, 1, 1);
        let mut r = Rounding::stochastic(&mut rng, nanoo);
        let mut oflo = 0;
        for _ in 0..n {
            let (v, f) = cast::f32_to_f16(f32::from_bits(0x477f_efff), &mut r);
            if f.is_empty() {
                assert_eq!(v.to_bits(), 0x7bff);
            } else if nanoo {
                assert_eq!((v.to_bits(), f), (0x7e00, FpSts::OFLO | FpSts::INV));
                oflo += 1;
            } else {
                assert_eq!((v.to_bits(), f), (0x7bff, FpSts::OFLO));
                oflo += 1;
            }
        }
        assert_binomial("65519.996", oflo, n, p);
    }
    // 65504 itself never moves, so never overflows.
    assert_eq!(
        count_ups(65504.0, 0x7bff, 0x7bff, trials(100_000), true, 3),
        0
    );
}

#[test]
fn fp16_arithmetic_round_up_frequencies() {
    let h = |bits: u16| f16::from_bits(bits);
    // (a, op, b, lower, upper, exact P(up))
    type Case = (
        f16,
        fn(f16, f16, &mut Rounding) -> (f16, FpSts),
        f16,
        u16,
        u16,
        f64,
        usize,
    );
    let one = h(0x3c00);
    let cases: [Case; 4] = [
        // 1 + f16(1e-3): f16(1e-3) = 0x1419; the sum 1.0010004 lies 25/1024 of a gap above 1.
        (
            one,
            fp16::add,
            h(0x1419),
            0x3c01,
            0x3c02,
            25.0 / 1024.0,
            trials(200_000),
        ),
        // 1 + 2^-24 (both FP16): P(up) = 2^-14, ≈ 61 per million. Formed in f32 first it
        // would be a tie rounded to 1.0 and never round up (numerics.md §3.2 bias trap).
        (
            one,
            fp16::add,
            h(0x0001),
            0x3c00,
            0x3c01,
            2f64.powi(-14),
            trials(1_000_000),
        ),
        // A subnormal product: 2^-12 · (1 + 2^-10)·2^-12 = 2^-24 + 2^-34: P(up) = 2^-10.
        (
            h(0x0c00),
            fp16::mul,
            h(0x0c01),
            0x0001,
            0x0002,
            2f64.powi(-10),
            trials(400_000),
        ),
        // 1/3 = (1365 + 1/3)·2^-12: between 0x3555 = 1365·2^-12 and 0x3556, P(up) = 1/3
        // (truncated to 32 bits: low by less than 2^-32).
        (
            one,
            fp16::div,
            h(0x4200),
            0x3555,
            0x3556,
            1.0 / 3.0,
            trials(200_000),
        ),
    ];
    for (i, (a, op, b, lo, hi, p, n)) in cases.into_iter().enumerate() {
        let mut rng = SrRng::new(1000 + i as u64, 0, 0);
        let mut r = Rounding::stochastic(&mut rng, false);
        let mut ups = 0;
        for _ in 0..n {
            let (v, f) = op(a, b, &mut r);
            assert!(f.is_empty());
            let bits = v.to_bits();
            assert!(bits == lo || bits == hi, "case {i}: 0x{bits:04x}");
            ups += usize::from(bits == hi);
        }
        assert_binomial(&format!("case {i}"), ups, n, p);
        if p == 2f64.powi(-14) {
            assert!(
                ups > 0,
                "1 + 2^-24 never rounded up: double rounding through f32"
            );
        }
    }
}

#[test]
fn representable_values_never_move() {
    let mut rng = SrRng::new(8, 0, 0);
    let mut r = Rounding::stochastic(&mut rng, true);
    let zero = f16::ZERO;
    let one = f16::ONE;
    for bits in 0..=u16::MAX {
        let x = f16::from_bits(bits);
        if x.is_nan() {
            continue;
        }
        for _ in 0..4 {
            assert_eq!(cast::f32_to_f16(x.to_f32(), &mut r), (x, FpSts::empty()));
            assert_eq!(fp16::mul(x, one, &mut r).0.to_bits(), bits);
            let (v, _) = fp16::add(x, zero, &mut r);
            // x + (+0) is x, except that −0 + +0 = +0.
            assert_eq!(v.to_bits(), if bits == 0x8000 { 0 } else { bits });
        }
    }
    // Exactly representable results of inexact-looking operations do not move either.
    for _ in 0..1000 {
        assert_eq!(
            r.round_f16(0.375, Tail::Exact),
            (f16::from_f32(0.375), FpSts::empty())
        );
        assert_eq!(
            fp16::div(f16::from_f32(3.0), f16::from_f32(8.0), &mut r).0,
            f16::from_f32(0.375)
        );
    }
}

#[test]
fn outputs_are_only_ever_the_two_neighbours() {
    // Random f32 values across the whole FP16 range (subnormal to near overflow).
    let mut gen = Gen::new(21);
    let mut rng = SrRng::new(21, 0, 0);
    let mut r = Rounding::stochastic(&mut rng, false);
    for _ in 0..trials(1_000_000) {
        let bits = (gen.u32() % (0x4780_0000 - 0x3300_0000)) + 0x3300_0000;
        let x = f32::from_bits(bits | (gen.u32() & 0x8000_0000));
        let (v, _) = cast::f32_to_f16(x, &mut r);
        // The neighbours, from `half`'s correct nearest rounding and one step either way.
        let near = f16::from_f32(x);
        let (a, b) = if near.to_f32().abs() <= x.abs() {
            (near.to_bits(), near.to_bits() + 1)
        } else {
            (near.to_bits() - 1, near.to_bits())
        };
        let b = if b & 0x7fff >= 0x7c00 {
            (b & 0x8000) | 0x7bff
        } else {
            b
        };
        let got = v.to_bits();
        assert!(
            got == a || got == b,
            "{x:e}: 0x{got:04x} not 0x{a:04x}/0x{b:04x}"
        );
        if near.to_f32() == x {
            assert_eq!(got, near.to_bits());
        }
    }
}

#[test]
fn sum_of_ten_thousand_increments_has_the_exact_mean() {
    let inc = f16::from_bits(0x068e); // f16(0.0001) = 0.000100016594
    let steps = 10_000;
    let exact = steps as f64 * inc.to_f64(); // 1.0001659393310547

    // Round to nearest stalls at 0.25 (numerics.md §3.1).
    let mut r = Rounding::nearest(false);
    let mut s = f16::ZERO;
    for _ in 0..steps {
        s = fp16::add(s, inc, &mut r).0;
    }
    assert_eq!(s.to_bits(), 0x3400);

    let runs = trials(4000);
    let mut rng = SrRng::new(2024, 0, 0);
    let (mut sum, mut sum_sq_err, mut sum_sq_err2, mut sum_var) = (0.0, 0.0, 0.0, 0.0);
    for _ in 0..runs {
        let mut r = Rounding::stochastic(&mut rng, false);
        let mut s = f16::ZERO;
        let mut path_var = 0.0; // Σ p_k(1 − p_k)·ulp_k² along this run
        for _ in 0..steps {
            let x = s.to_f64() + inc.to_f64(); // the exact sum, in [2^-14, 2)
            let gap = 2f64.powi(x.log2().floor() as i32 - 10); // the FP16 spacing at x
            let p = (x / gap).fract();
            path_var += p * (1.0 - p) * gap * gap;
            s = fp16::add(s, inc, &mut r).0;
        }
        let err = s.to_f64() - exact;
        sum += s.to_f64();
        sum_sq_err += err * err;
        sum_sq_err2 += err.powi(4);
        sum_var += path_var;
    }
    let n = runs as f64;
    let mean = sum / n;
    let mse = sum_sq_err / n;
    let sd = mse.sqrt();
    // Mean: unbiased for the exact sum, within 5 standard errors.
    assert!(
        (mean - exact).abs() <= 5.0 * sd / n.sqrt(),
        "mean {mean} vs {exact} (sd {sd})"
    );
    assert!(
        (mean - 1.0002).abs() < 0.005 && sd > 0.005 && sd < 0.03,
        "mean {mean}, sd {sd}"
    );
    // Variance: E[err²] = E[Σ p(1−p) ulp²], within 5 standard errors of the estimate.
    let expected_mse = sum_var / n;
    let se_mse = ((sum_sq_err2 / n - mse * mse) / n).sqrt();
    assert!(
        (mse - expected_mse).abs() <= 5.0 * se_mse,
        "E[err²] {mse:e} vs {expected_mse:e} ± {se_mse:e}"
    );
}

#[test]
fn same_seed_same_results() {
    let run = |seed| {
        let mut rng = SrRng::new(seed, 3, 2);
        let mut r = Rounding::stochastic(&mut rng, false);
        (0..1000)
            .map(|i| fp16::add(f16::ONE, f16::from_bits(i), &mut r).0.to_bits())
            .collect::<Vec<_>>()
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
}

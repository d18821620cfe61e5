//! Differential tests of the FP16 and FP32 binary operations against an independent oracle:
//! `rustc_apfloat` (the Rust port of LLVM's APFloat: IEEE 754 arithmetic in software, with
//! status flags), with the IPU's rules applied on top of its IEEE result:
//!
//! - a NaN operand or an IEEE invalid operation → canonical NaN and INV;
//! - IEEE overflow → FP16: ±65504 with OFLO (`nanoo` off) or NaN with OFLO|INV (`nanoo`
//!   on); FP32: ±inf with OFLO;
//! - finite non-zero / 0 → FP16: NaN with DIV0; FP32: ±inf with DIV0.
//!
//! At least a million random operand pairs per format, covering normal, subnormal, zero,
//! infinite and NaN operands (see `common::Gen`), every pair through add, sub, mul and div,
//! under both overflow policies; zero mismatches in bits or flags. Stochastic rounding is
//! checked against the same oracle's directed roundings: the result is always the
//! round-down or the round-up of the exact value, and exact results never move.

mod common;

use common::{trials, Gen};
use half::f16;
use ipusim_sim::numerics::{fp16, fp32, ArithOp, FpSts, Rounding, SrRng};
use rustc_apfloat::ieee::{Half, Single};
use rustc_apfloat::{Float, Round, Status, StatusAnd};

const OPS: [ArithOp; 4] = [ArithOp::Add, ArithOp::Sub, ArithOp::Mul, ArithOp::Div];

fn apply<F: Float>(op: ArithOp, x: F, y: F, round: Round) -> StatusAnd<F> {
    match op {
        ArithOp::Add => x.add_r(y, round),
        ArithOp::Sub => x.sub_r(y, round),
        ArithOp::Mul => x.mul_r(y, round),
        _ => x.div_r(y, round),
    }
}

/// The IPU result of an FP16 operation, from APFloat's IEEE result rounded with `round`.
fn expect_f16(op: ArithOp, a: u16, b: u16, nanoo: bool, round: Round) -> (u16, FpSts) {
    let (x, y) = (Half::from_bits(a.into()), Half::from_bits(b.into()));
    let StatusAnd { status, value } = apply(op, x, y, round);
    if op == ArithOp::Div && y.is_zero() && x.is_finite() && !x.is_zero() {
        assert!(status.contains(Status::DIV_BY_ZERO));
        return (0x7e00, FpSts::DIV0);
    }
    if x.is_nan() || y.is_nan() || status.contains(Status::INVALID_OP) {
        return (0x7e00, FpSts::INV);
    }
    // Directed roundings overflow to ±max instead of ±inf; either way the finite result
    // lies beyond 65504 only if the exact value does.
    let bits = value.to_bits() as u16;
    if status.contains(Status::OVERFLOW)
        || (bits & 0x7fff == 0x7c00 && x.is_finite() && y.is_finite())
    {
        return if nanoo {
            (0x7e00, FpSts::OFLO | FpSts::INV)
        } else {
            ((bits & 0x8000) | 0x7bff, FpSts::OFLO)
        };
    }
    (bits, FpSts::empty())
}

fn expect_f32(op: ArithOp, a: u32, b: u32) -> (u32, FpSts) {
    let (x, y) = (Single::from_bits(a.into()), Single::from_bits(b.into()));
    let StatusAnd { status, value } = apply(op, x, y, Round::NearestTiesToEven);
    if x.is_nan() || y.is_nan() || status.contains(Status::INVALID_OP) {
        return (0x7fc0_0000, FpSts::INV);
    }
    let mut flags = FpSts::empty();
    if status.contains(Status::DIV_BY_ZERO) {
        flags |= FpSts::DIV0;
    }
    if status.contains(Status::OVERFLOW) {
        flags |= FpSts::OFLO;
    }
    (value.to_bits() as u32, flags)
}

#[test]
fn fp16_binary_ops_match_apfloat_on_a_million_pairs() {
    let mut gen = Gen::new(16);
    let (mut checked, mut classes) = (0usize, [0usize; 5]);
    for _ in 0..trials(1_000_000) {
        let (a, b) = gen.f16_pair();
        for v in [a, b] {
            let class = match v & 0x7fff {
                0 => 0,
                1..=0x3ff => 1,
                0x7c00 => 3,
                0x7c01.. => 4,
                _ => 2,
            };
            classes[class] += 1;
        }
        for nanoo in [false, true] {
            let mut r = Rounding::nearest(nanoo);
            for op in OPS {
                let (v, f) = fp16::binary(op, f16::from_bits(a), f16::from_bits(b), &mut r);
                let want = expect_f16(op, a, b, nanoo, Round::NearestTiesToEven);
                assert_eq!(
                    (v.to_bits(), f),
                    want,
                    "{:?}(0x{a:04x}, 0x{b:04x}) nanoo={nanoo}",
                    op
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, trials(1_000_000) * 8);
    // Every class was exercised on a sizeable share of the operands.
    assert!(
        classes.iter().all(|&c| c > trials(1_000_000) / 50),
        "{classes:?}"
    );
}

#[test]
fn fp32_binary_ops_match_apfloat_on_a_million_pairs() {
    let mut gen = Gen::new(32);
    let mut flagged = [0usize; 3];
    for _ in 0..trials(1_000_000) {
        let (a, b) = gen.f32_pair();
        for op in OPS {
            let (v, f) = fp32::binary(op, f32::from_bits(a), f32::from_bits(b));
            let want = expect_f32(op, a, b);
            assert_eq!((v.to_bits(), f), want, "{:?}(0x{a:08x}, 0x{b:08x})", op);
            for (i, flag) in [FpSts::INV, FpSts::DIV0, FpSts::OFLO]
                .into_iter()
                .enumerate()
            {
                flagged[i] += usize::from(f.contains(flag));
            }
        }
    }
    assert!(flagged.iter().all(|&c| c > 1000), "{flagged:?}");
}

#[test]
fn fp16_stochastic_results_are_a_directed_rounding_of_the_exact_value() {
    let mut gen = Gen::new(99);
    let mut rng = SrRng::new(5, 6, 7);
    let mut moved = 0usize;
    for _ in 0..trials(300_000) {
        let (a, b) = gen.f16_pair();
        for nanoo in [false, true] {
            let mut r = Rounding::stochastic(&mut rng, nanoo);
            for op in OPS {
                let got = fp16::binary(op, f16::from_bits(a), f16::from_bits(b), &mut r);
                let got = (got.0.to_bits(), got.1);
                let down = expect_f16(op, a, b, nanoo, Round::TowardNegative);
                let up = expect_f16(op, a, b, nanoo, Round::TowardPositive);
                assert!(
                    got == down || got == up,
                    "{op:?}(0x{a:04x}, 0x{b:04x}): {got:?} not in {{{down:?}, {up:?}}}"
                );
                let near = expect_f16(op, a, b, nanoo, Round::NearestTiesToEven);
                moved += usize::from(got != near);
            }
        }
    }
    // Stochastic rounding does move inexact results away from the nearest value.
    assert!(moved > trials(300_000) / 10, "{moved}");
}

#[test]
fn decimal_literals_match_apfloat_string_conversion() {
    use ipusim_sim::numerics::decimal::{decimal_to_f16, decimal_to_f32};
    let mut gen = Gen::new(10);
    let mut texts = Vec::new();
    // Every FP16 midpoint written exactly, and nudged up and down in the 25th digit.
    for bits in (0u16..0x7c00).step_by(3).chain([0x7bff]) {
        let lo = f16::from_bits(bits).to_f64();
        // The last gap ends at 2^16: its midpoint 65520 is the overflow threshold.
        let hi = if bits == 0x7bff {
            65536.0
        } else {
            f16::from_bits(bits + 1).to_f64()
        };
        let mid = format!("{:.30e}", (lo + hi) / 2.0);
        let (mant, exp) = mid.split_once('e').expect("exponent form");
        texts.push(mid.clone());
        texts.push(format!("{mant}0000001e{exp}"));
        let digits: String = mant.chars().filter(|c| *c != '.').collect();
        if let Ok(n) = digits.parse::<u128>() {
            let below = format!("{}e{}", n - 1, exp.parse::<i64>().unwrap() - 30);
            texts.push(below);
        }
    }
    for _ in 0..trials(100_000) {
        let digits = 1 + gen.below(25);
        let mut s: String = (0..digits)
            .map(|_| char::from(b'0' + gen.below(10) as u8))
            .collect();
        s.insert(1 + gen.below(digits) as usize, '.');
        texts.push(format!("{s}e{}", gen.below(20) as i32 - 12));
    }
    for text in &texts {
        let want = Half::from_str_r(text, Round::NearestTiesToEven).expect("apfloat parses it");
        let (v, f) = decimal_to_f16(text, false).expect("decimal");
        let want_bits = want.value.to_bits() as u16;
        if want.status.contains(Status::OVERFLOW) {
            assert_eq!((v.to_bits(), f), (0x7bff, FpSts::OFLO), "{text}");
        } else {
            assert_eq!((v.to_bits(), f), (want_bits, FpSts::empty()), "{text}");
        }
        let want = Single::from_str_r(text, Round::NearestTiesToEven).expect("apfloat parses it");
        let (v, _) = decimal_to_f32(text).expect("decimal");
        assert_eq!(v.to_bits(), want.value.to_bits() as u32, "{text}");
    }
}

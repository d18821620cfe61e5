//! Exhaustive tests over all 65,536 FP16 bit patterns for every unary operation and every
//! cast from FP16, and dense sweeps for the casts into FP16, each against an independent
//! computation:
//!
//! - `sqrt`: `half::f16::from_f32(f32::sqrt(x))` — a correctly rounded f32 square root
//!   rounded to FP16 is correctly rounded, because 24 ≥ 2·11 + 2 (numerics.md §1.1 [S4]);
//! - `exp`, `log`, `tanh`, `sigmoid`, `gelu`: the `f64` value rounded to FP16 by
//!   `rustc_apfloat`'s IEEE conversion (an independent rounder) plus the IPU overflow rule;
//! - casts: `half`'s exact widening, `rustc_apfloat`'s conversions to integers (toward zero)
//!   and between formats.

mod common;

use common::{trials, Gen};
use half::f16;
use half::slice::HalfFloatSliceExt;
use ipusim_sim::numerics::cast;
use ipusim_sim::numerics::kernels::convert::f32_to_f16_slice;
use ipusim_sim::numerics::{fp16, fp32, FpSts, Rounding, UnaryOp};
use rustc_apfloat::ieee::{Double, Half, Single};
use rustc_apfloat::{Float, FloatConvert, Round, Status, StatusAnd};

fn all_f16() -> impl Iterator<Item = f16> {
    (0..=u16::MAX).map(f16::from_bits)
}

/// APFloat's nearest-even rounding of the `f64` value `x` to FP16, with the IPU rules.
fn apfloat_f16(x: f64, nanoo: bool) -> (u16, FpSts) {
    if x.is_nan() {
        return (0x7e00, FpSts::INV);
    }
    let mut loses_info = false;
    let StatusAnd { status, value }: StatusAnd<Half> =
        Double::from_bits(x.to_bits().into()).convert_r(Round::NearestTiesToEven, &mut loses_info);
    if status.contains(Status::OVERFLOW) {
        return if nanoo {
            (0x7e00, FpSts::OFLO | FpSts::INV)
        } else {
            (if x < 0.0 { 0xfbff } else { 0x7bff }, FpSts::OFLO)
        };
    }
    (value.to_bits() as u16, FpSts::empty())
}

#[test]
fn exact_unary_ops_on_every_fp16_value() {
    for x in all_f16() {
        let b = x.to_bits();
        let nan = x.is_nan();
        let expect = |v: u16| {
            if nan {
                (0x7e00, FpSts::INV)
            } else {
                (v, FpSts::empty())
            }
        };
        let bits = |(v, f): (f16, FpSts)| (v.to_bits(), f);
        assert_eq!(bits(fp16::neg(x)), expect(b ^ 0x8000));
        assert_eq!(bits(fp16::abs(x)), expect(b & 0x7fff));
        let relu = if b & 0x8000 == 0 && b != 0 { b } else { 0 };
        assert_eq!(bits(fp16::relu(x)), expect(relu), "relu 0x{b:04x}");
    }
}

#[test]
fn sqrt_on_every_fp16_value() {
    let mut r = Rounding::nearest(false);
    for x in all_f16() {
        let (v, f) = fp16::sqrt(x, &mut r);
        let want = if x.is_nan() || x.to_f32() < 0.0 {
            (0x7e00, FpSts::INV)
        } else {
            (f16::from_f32(x.to_f32().sqrt()).to_bits(), FpSts::empty())
        };
        assert_eq!((v.to_bits(), f), want, "sqrt 0x{:04x}", x.to_bits());
    }
}

#[test]
fn elementary_functions_on_every_fp16_value() {
    let ops = [
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Gelu,
    ];
    for nanoo in [false, true] {
        let mut r = Rounding::nearest(nanoo);
        let mut overflowed = 0;
        for x in all_f16() {
            let w = x.to_f64();
            for op in ops {
                let (v, f) = fp16::unary(op, x, &mut r);
                let (y, extra) = match op {
                    UnaryOp::Exp => (w.exp(), FpSts::empty()),
                    UnaryOp::Log if w == 0.0 => (f64::NEG_INFINITY, FpSts::DIV0),
                    UnaryOp::Log if w < 0.0 => (f64::NAN, FpSts::empty()),
                    UnaryOp::Log => (w.ln(), FpSts::empty()),
                    UnaryOp::Tanh => (w.tanh(), FpSts::empty()),
                    UnaryOp::Sigmoid => (1.0 / (1.0 + (-w).exp()), FpSts::empty()),
                    _ => {
                        let u = (2.0 / std::f64::consts::PI).sqrt() * (w + 0.044715 * w.powi(3));
                        (0.5 * w * (1.0 + u.tanh()), FpSts::empty())
                    }
                };
                // A finite argument with a result beyond f64 (exp(1000)) still overflows.
                let y = if y.is_infinite() && w.is_finite() && extra.is_empty() {
                    f64::MAX.copysign(y)
                } else {
                    y
                };
                let (want, flags) = apfloat_f16(y, nanoo);
                let flags = flags
                    | extra
                    | if x.is_nan() {
                        FpSts::INV
                    } else {
                        FpSts::empty()
                    };
                if op == UnaryOp::Gelu && w < -3.0 {
                    // The textbook formula cancels for negative inputs (1 + tanh(u) → 0);
                    // ipusim evaluates it stably. Check the sign and the size instead.
                    assert!(
                        v.to_f64() <= 0.0 && v.to_f64() > -0.01,
                        "gelu 0x{:04x}: {v}",
                        x.to_bits()
                    );
                    continue;
                }
                assert_eq!(
                    (v.to_bits(), f),
                    (want, flags),
                    "{op:?} 0x{:04x} nanoo={nanoo}",
                    x.to_bits()
                );
                overflowed += usize::from(f.contains(FpSts::OFLO));
            }
        }
        // exp overflows FP16 for x > ln(65520) ≈ 11.09: 0x498c..0x7bff.
        assert_eq!(overflowed, 0x7bff - 0x498c + 1);
    }
}

#[test]
fn casts_from_every_fp16_value() {
    for x in all_f16() {
        let b = x.to_bits();
        // f16 → f32: exact.
        let (v, f) = cast::f16_to_f32(x);
        if x.is_nan() {
            assert_eq!((v.to_bits(), f), (0x7fc0_0000, FpSts::INV));
        } else {
            assert_eq!((v.to_bits(), f), (x.to_f32().to_bits(), FpSts::empty()));
        }
        // f16 → i32: toward zero, against APFloat.
        let mut exact = false;
        let want = Half::from_bits(b.into()).to_i128_r(32, Round::TowardZero, &mut exact);
        let (v, f) = cast::f16_to_i32(x);
        if x.is_nan() {
            assert_eq!((v, f), (i32::MIN, FpSts::INV));
        } else if want.status.contains(Status::INVALID_OP) {
            assert!(x.is_infinite());
            assert_eq!(
                (v, f),
                (
                    if b & 0x8000 != 0 { i32::MIN } else { i32::MAX },
                    FpSts::INV
                )
            );
        } else {
            assert_eq!(
                (i128::from(v), f),
                (want.value, FpSts::empty()),
                "0x{b:04x}"
            );
        }
        // f16 → f32 → f16 is the identity, under both roundings and policies.
        for nanoo in [false, true] {
            let (v, f) = cast::f32_to_f16(x.to_f32(), &mut Rounding::nearest(nanoo));
            let want = if x.is_nan() {
                (0x7e00, FpSts::INV)
            } else {
                (b, FpSts::empty())
            };
            assert_eq!((v.to_bits(), f), want);
        }
    }
}

/// APFloat's f32 → f16 conversion with the IPU rules.
fn apfloat_f32_to_f16(bits: u32, nanoo: bool) -> (u16, FpSts) {
    let x = f32::from_bits(bits);
    if x.is_nan() {
        return (0x7e00, FpSts::INV);
    }
    apfloat_f16(f64::from(x), nanoo)
}

#[test]
fn f32_to_f16_sweep_scalar_and_slice() {
    // Every 127th f32 bit pattern (33.8M values in release), plus every FP16 midpoint and
    // its f32 neighbours (the ties and near-ties).
    let stride = if cfg!(debug_assertions) { 12_7001 } else { 127 };
    let mut inputs: Vec<u32> = (0..=u32::MAX).step_by(stride).collect();
    for h in 0u32..0x7c00 {
        let lo = f16::from_bits(h as u16).to_f32();
        let hi = if h == 0x7bff {
            65536.0
        } else {
            f16::from_bits(h as u16 + 1).to_f32()
        };
        let mid = ((f64::from(lo) + f64::from(hi)) / 2.0) as f32; // exact in f32
        for m in [mid.to_bits() - 1, mid.to_bits(), mid.to_bits() + 1] {
            inputs.push(m);
            inputs.push(m | 0x8000_0000);
        }
    }
    for nanoo in [false, true] {
        let src: Vec<f32> = inputs.iter().map(|&b| f32::from_bits(b)).collect();
        let mut dst = vec![f16::ZERO; src.len()];
        let slice_flags = f32_to_f16_slice(&src, &mut dst, &mut Rounding::nearest(nanoo)).unwrap();
        let mut all = FpSts::empty();
        let mut r = Rounding::nearest(nanoo);
        for (&bits, h) in inputs.iter().zip(&dst) {
            let want = apfloat_f32_to_f16(bits, nanoo);
            let (v, f) = cast::f32_to_f16(f32::from_bits(bits), &mut r);
            assert_eq!((v.to_bits(), f), want, "0x{bits:08x} nanoo={nanoo}");
            assert_eq!(h.to_bits(), want.0, "slice 0x{bits:08x}");
            all |= f;
        }
        assert_eq!(slice_flags, all);
    }
    // And the slice kernel agrees with `half` wherever no IPU rule applies.
    let finite: Vec<f32> = inputs
        .iter()
        .map(|&b| f32::from_bits(b))
        .filter(|x| x.abs() < 65520.0)
        .collect();
    let mut ours = vec![f16::ZERO; finite.len()];
    let mut theirs = vec![f16::ZERO; finite.len()];
    f32_to_f16_slice(&finite, &mut ours, &mut Rounding::nearest(false)).unwrap();
    theirs.convert_from_f32_slice(&finite);
    assert!(ours
        .iter()
        .zip(&theirs)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
}

#[test]
fn integer_casts_into_floats() {
    let mut r = Rounding::nearest(false);
    let mut gen = Gen::new(3);
    let sweep = (-70_000..=70_000)
        .chain((0..trials(200_000)).map(|_| gen.u32() as i32))
        .chain([i32::MIN, i32::MAX]);
    for i in sweep {
        let want = Half::from_i128_r(i.into(), Round::NearestTiesToEven);
        let (v, f) = cast::i32_to_f16(i, &mut r);
        if want.status.contains(Status::OVERFLOW) {
            assert_eq!(
                (v.to_bits(), f),
                (if i < 0 { 0xfbff } else { 0x7bff }, FpSts::OFLO),
                "{i}"
            );
        } else {
            assert_eq!(
                (v.to_bits(), f),
                (want.value.to_bits() as u16, FpSts::empty()),
                "{i}"
            );
        }
        let want = Single::from_i128_r(i.into(), Round::NearestTiesToEven).value;
        assert_eq!(
            cast::i32_to_f32(i),
            (f32::from_bits(want.to_bits() as u32), FpSts::empty())
        );
    }
    for u in 0..=u8::MAX {
        assert_eq!(cast::u8_to_f16(u).0.to_f64(), f64::from(u));
        assert_eq!(cast::u8_to_f32(u).0, f32::from(u));
    }
}

#[test]
fn fp32_unary_ops_on_a_sweep() {
    let stride = if cfg!(debug_assertions) {
        1_000_003
    } else {
        20_011
    };
    for bits in (0..=u32::MAX).step_by(stride) {
        let x = f32::from_bits(bits);
        let w = f64::from(x);
        let nan = x.is_nan();
        // sqrt is IEEE; exp/log/tanh via f64 then one IEEE rounding (APFloat).
        let (v, f) = fp32::sqrt(x);
        if nan || x < 0.0 {
            assert_eq!((v.to_bits(), f), (0x7fc0_0000, FpSts::INV));
        } else {
            assert_eq!((v.to_bits(), f), (x.sqrt().to_bits(), FpSts::empty()));
        }
        for (op, y) in [(UnaryOp::Exp, w.exp()), (UnaryOp::Tanh, w.tanh())] {
            let y = if y.is_infinite() && w.is_finite() {
                f64::MAX.copysign(y)
            } else {
                y
            };
            let (v, f) = fp32::unary(op, x);
            if nan {
                assert_eq!((v.to_bits(), f), (0x7fc0_0000, FpSts::INV));
                continue;
            }
            let mut li = false;
            let want: StatusAnd<Single> =
                Double::from_bits(y.to_bits().into()).convert_r(Round::NearestTiesToEven, &mut li);
            let flags = if want.status.contains(Status::OVERFLOW) {
                FpSts::OFLO
            } else {
                FpSts::empty()
            };
            assert_eq!(
                (v.to_bits(), f),
                (want.value.to_bits() as u32, flags),
                "{op:?} 0x{bits:08x}"
            );
        }
        let (v, f) = cast::f32_to_i32(x);
        let mut exact = false;
        let want = Single::from_bits(bits.into()).to_i128_r(32, Round::TowardZero, &mut exact);
        if nan {
            assert_eq!((v, f), (i32::MIN, FpSts::INV));
        } else if want.status.contains(Status::INVALID_OP) {
            assert_eq!(
                (v, f),
                (if x < 0.0 { i32::MIN } else { i32::MAX }, FpSts::INV)
            );
        } else {
            assert_eq!((i128::from(v), f), (want.value, FpSts::empty()));
        }
    }
}

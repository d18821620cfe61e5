//! Correctly rounded conversion of decimal literals to FP16 and FP32 (nearest even), for
//! the calculator and for constants in programs.
//!
//! FP32: Rust's `str::parse::<f32>` is correctly rounded from the decimal string.
//!
//! FP16: there is no direct parser, and "parse to `f64`, then round to FP16" can
//! double-round. It goes wrong in exactly one situation: every FP16 midpoint is an `f64`
//! number and rounding to `f64` is monotone, so the `f64` value `v` lies on the same side of
//! every FP16 midpoint as the decimal `d` does, or *on* the midpoint. Only when `v` is
//! exactly an FP16 midpoint while `d` is not (e.g. `1.000488281250000000001`, within half
//! an `f64` ulp of the midpoint `1 + 2^-11`) is the tie-break wrong. In that case this module
//! compares `d` with `v` exactly — `v` is a 12-bit integer times `2^E` with `E >= -25`, so
//! its decimal expansion `N·10^E` (`N = M·5^-E < 2^71`) is computed exactly in `u128` and
//! compared digit by digit with the literal — and rounds the midpoint in the direction of
//! `d` ([`Tail`]). The result is the correctly rounded FP16 value of the decimal.
//!
//! A literal beyond the format's range overflows like any other result: FP16 saturates to
//! ±65504 (or NaN with `nanoo`) with OFLO; FP32 gives ±inf with OFLO.

use std::cmp::Ordering;

use half::f16;

use super::flags::FpSts;
use super::round::{Rounding, Tail};

/// A syntactically valid decimal literal `[+-]? (d+ (. d*)? | . d+) ([eE] [+-]? d+)?`.
#[derive(Clone, Copy, Debug)]
struct Decimal<'a> {
    text: &'a str,
    negative: bool,
    int_digits: &'a str,
    frac_digits: &'a str,
    exponent: i64,
}

impl<'a> Decimal<'a> {
    fn parse(text: &'a str) -> Option<Decimal<'a>> {
        let (negative, body) = match text.as_bytes().first()? {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let (mantissa, exp_text) = match body.find(['e', 'E']) {
            Some(i) => (&body[..i], Some(&body[i + 1..])),
            None => (body, None),
        };
        let (int_digits, frac_digits) = match mantissa.find('.') {
            Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
            None => (mantissa, ""),
        };
        let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if int_digits.is_empty() && frac_digits.is_empty()
            || !all_digits(int_digits)
            || !all_digits(frac_digits)
        {
            return None;
        }
        let exponent = match exp_text {
            None => 0,
            Some(e) => {
                let (neg, digits) = match e.as_bytes().first()? {
                    b'-' => (true, &e[1..]),
                    b'+' => (false, &e[1..]),
                    _ => (false, e),
                };
                if digits.is_empty() || !all_digits(digits) {
                    return None;
                }
                // Saturate: beyond 10^±10^12 every literal is 0 or overflows anyway.
                let mag = digits.bytes().fold(0i64, |acc, b| {
                    (acc * 10 + i64::from(b - b'0')).min(1_000_000_000_000)
                });
                if neg {
                    -mag
                } else {
                    mag
                }
            }
        };
        Some(Decimal {
            text,
            negative,
            int_digits,
            frac_digits,
            exponent,
        })
    }

    /// The significant digits (no leading or trailing zeros) and the decimal exponent of
    /// the last one: |d| = digits · 10^exp. `None` digits for zero.
    fn normalized(&self) -> (impl Iterator<Item = u8> + Clone + 'a, usize, i64) {
        let all = self.int_digits.bytes().chain(self.frac_digits.bytes());
        let total = self.int_digits.len() + self.frac_digits.len();
        let leading = all.clone().take_while(|&b| b == b'0').count();
        let trailing = self
            .frac_digits
            .bytes()
            .rev()
            .chain(self.int_digits.bytes().rev())
            .take_while(|&b| b == b'0')
            .count();
        let count = total.saturating_sub(leading + trailing);
        let exp = self.exponent - self.frac_digits.len() as i64 + trailing as i64;
        (all.skip(leading).take(count), count, exp)
    }

    /// Compares |d| with the positive `f64` value `v` exactly, when `v = N·10^e` with `N`
    /// fitting in `u128` (true for FP16 midpoints); `None` otherwise.
    fn cmp_magnitude(&self, v: f64) -> Option<Ordering> {
        let (digits, count, exp) = self.normalized();
        let (n, e) = exact_decimal(v)?;
        let n_text = n.to_string();
        let n_trimmed = n_text.trim_end_matches('0');
        let n_exp = e + (n_text.len() - n_trimmed.len()) as i64;
        if count == 0 {
            return Some(Ordering::Less); // d = 0 < v
        }
        // Compare the positions of the leading digits, then the digit strings.
        let lead_d = exp + count as i64;
        let lead_v = n_exp + n_trimmed.len() as i64;
        Some(
            lead_d
                .cmp(&lead_v)
                .then_with(|| digits.cmp(n_trimmed.bytes())),
        )
    }
}

/// `v > 0` as `N · 10^e` with integer `N`, if `N` fits in `u128`.
fn exact_decimal(v: f64) -> Option<(u128, i64)> {
    let bits = v.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i64;
    let (mut mant, mut e2) = if biased == 0 {
        (bits & ((1 << 52) - 1), -1074)
    } else {
        ((bits & ((1 << 52) - 1)) | (1 << 52), biased - 1075)
    };
    if mant == 0 {
        return None;
    }
    let tz = mant.trailing_zeros();
    mant >>= tz;
    e2 += i64::from(tz);
    if e2 >= 0 {
        let n = u128::from(mant).checked_shl(u32::try_from(e2).ok()?)?;
        (n >> e2 == u128::from(mant)).then_some((n, 0))
    } else {
        let five = 5u128.checked_pow(u32::try_from(-e2).ok()?)?;
        Some((u128::from(mant).checked_mul(five)?, e2))
    }
}

/// Whether `v` (finite, > 0, < 2^16) is exactly halfway between two FP16 neighbours.
fn is_f16_midpoint(v: f64) -> bool {
    let e = (((v.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(-14);
    let t = v * f64::from_bits(((1023 + 10 - e) as u64) << 52);
    t - t.floor() == 0.5
}

/// The decimal literal `text`, correctly rounded to nearest even in FP16, with the FP16
/// overflow policy (`nanoo`). `None` if `text` is not a decimal literal.
pub fn decimal_to_f16(text: &str, nanoo: bool) -> Option<(f16, FpSts)> {
    let d = Decimal::parse(text)?;
    let v: f64 = d.text.parse().ok()?;
    let policy = Rounding::nearest(nanoo);
    if v.is_infinite() {
        return Some(policy.overflow_f16(d.negative));
    }
    let mag = v.abs();
    let mut tail = Tail::Exact;
    if mag > 0.0 && mag < 65536.0 && is_f16_midpoint(mag) {
        tail = match d.cmp_magnitude(mag) {
            Some(Ordering::Greater) => Tail::Above,
            Some(Ordering::Less) => Tail::Below,
            _ => Tail::Exact,
        };
        if d.negative {
            tail = match tail {
                Tail::Above => Tail::Below,
                Tail::Below => Tail::Above,
                Tail::Exact => Tail::Exact,
            };
        }
    }
    Some(policy.round_f16_with(v, tail, None))
}

/// The decimal literal `text`, correctly rounded to nearest even in FP32; a finite literal
/// beyond the range gives ±inf with OFLO. `None` if `text` is not a decimal literal.
pub fn decimal_to_f32(text: &str) -> Option<(f32, FpSts)> {
    let d = Decimal::parse(text)?;
    let v: f32 = d.text.parse().ok()?;
    let flags = if v.is_infinite() {
        FpSts::OFLO
    } else {
        FpSts::empty()
    };
    Some((v, flags))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits16(text: &str) -> u16 {
        decimal_to_f16(text, false).unwrap().0.to_bits()
    }

    #[test]
    fn syntax() {
        for ok in [
            "1", "1.", ".5", "0.0004", "1e5", "1E-5", "+2.5e+3", "-0", "007.700",
        ] {
            assert!(Decimal::parse(ok).is_some(), "{ok}");
        }
        for bad in [
            "", ".", "e5", "1e", "1e+", "1.2.3", "0x10", "inf", "nan", "1_0", "--1", " 1",
        ] {
            assert!(Decimal::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn numerics_3_1_literals() {
        assert_eq!(bits16("0.0004"), 0x0e8e);
        assert_eq!(bits16("0.0001"), 0x068e);
        assert_eq!(bits16("1e-3"), 0x1419);
        assert_eq!(bits16("65504"), 0x7bff);
        assert_eq!(bits16("65519"), 0x7bff);
        assert_eq!(
            decimal_to_f16("65520", false),
            Some((f16::MAX, FpSts::OFLO))
        );
        assert_eq!(
            decimal_to_f16("1e400", false),
            Some((f16::MAX, FpSts::OFLO))
        );
        assert_eq!(
            decimal_to_f16("-1e400", true).unwrap().1,
            FpSts::OFLO | FpSts::INV
        );
        assert_eq!(bits16("1e-400"), 0);
        assert_eq!(bits16("-0"), 0x8000);
    }

    #[test]
    fn midpoints_are_decided_by_the_decimal_not_the_f64() {
        // 1 + 2^-11 = 1.00048828125 is the midpoint between 0x3c00 and 0x3c01.
        assert_eq!(bits16("1.00048828125"), 0x3c00);
        assert_eq!(bits16("1.000488281250000000000000001"), 0x3c01);
        assert_eq!(bits16("1.000488281249999999999999999"), 0x3c00);
        // Both parse to the same f64, the midpoint itself:
        assert_eq!(
            "1.000488281250000000000000001".parse::<f64>(),
            Ok(1.00048828125)
        );
        // 1 + 3·2^-11 ties up to even; just below it goes down.
        assert_eq!(bits16("1.00146484375"), 0x3c02);
        assert_eq!(bits16("1.00146484374999999999999999"), 0x3c01);
        assert_eq!(bits16("-1.000488281250000000000000001"), 0xbc01);
        // 2^-25 (the smallest midpoint) and the overflow midpoint 65520.
        assert_eq!(bits16("2.98023223876953125e-8"), 0x0000);
        assert_eq!(bits16("2.980232238769531250000001e-8"), 0x0001);
        assert_eq!(bits16("65519.99999999999999999"), 0x7bff);
        assert_eq!(
            decimal_to_f16("65520.00000000000000001", false).unwrap().1,
            FpSts::OFLO
        );
        // Same midpoint written with an exponent and leading zeros.
        assert_eq!(bits16("0001000488281250000000000000001e-27"), 0x3c01);
        assert_eq!(bits16("100048828125.000e-11"), 0x3c00);
    }

    #[test]
    fn f32_literals() {
        assert_eq!(
            decimal_to_f32("0.1"),
            Some((f32::from_bits(0x3dcc_cccd), FpSts::empty()))
        );
        assert_eq!(decimal_to_f32("1e39"), Some((f32::INFINITY, FpSts::OFLO)));
        assert_eq!(
            decimal_to_f32("1.00000005960464477539062500001"),
            Some((f32::from_bits(0x3f80_0001), FpSts::empty()))
        );
        assert_eq!(decimal_to_f32("x"), None);
    }
}

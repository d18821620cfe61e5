//! Printing element values the way a user reads them: the shortest decimal that reads back
//! to the same value *in its own format* (`0.1` for the FP16 value nearest 0.1, not
//! `0.0999755859375`), with the bit pattern where it matters (exception dumps).
//!
//! FP32 uses Rust's shortest round-trip printing of `f32`; FP16 prints integers exactly
//! (so the saturation value reads `65504`, not numpy's `65500`) and other values with 1 to
//! 5 significant digits (5 always suffice for binary16), the first that the numerics core's
//! correctly rounded decimal parser maps back to the same bits without overflowing.

use crate::numerics::decimal::decimal_to_f16;
use half::f16;
use ipusim_ir::DType;

/// The shortest decimal of `x` that reads back to `x` as FP16.
pub fn f16_short(x: f16) -> String {
    let v = x.to_f64();
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if v < 0.0 { "-inf".into() } else { "inf".into() };
    }
    if v == 0.0 {
        return if x.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // Integers (every FP16 value from 2048 up, 65504 included) print exactly.
    if v.fract() == 0.0 {
        return format!("{v}");
    }
    for digits in 1..=5 {
        let text = format!("{:.*e}", digits - 1, v);
        if decimal_to_f16(&text, false)
            .is_some_and(|(y, f)| y.to_bits() == x.to_bits() && f.is_empty())
        {
            return plain(&text);
        }
    }
    plain(&format!("{v:e}"))
}

/// The shortest decimal of `x` that reads back to `x` as FP32.
pub fn f32_short(x: f32) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf".into() } else { "inf".into() };
    }
    let a = x.abs();
    if a != 0.0 && !(1e-5..1e16).contains(&a) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// A scientific-notation string `d.ddde±x` in plain notation when the exponent is modest.
fn plain(sci: &str) -> String {
    let Some((mantissa, exp)) = sci.split_once('e') else {
        return sci.to_string();
    };
    let Ok(exp) = exp.parse::<i32>() else {
        return sci.to_string();
    };
    if !(-5..16).contains(&exp) {
        return sci.to_string();
    }
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let point = 1 + exp; // digits before the decimal point
    let body = if point <= 0 {
        format!("0.{}{}", "0".repeat((-point) as usize), digits)
    } else if point as usize >= digits.len() {
        format!("{}{}", digits, "0".repeat(point as usize - digits.len()))
    } else {
        format!(
            "{}.{}",
            &digits[..point as usize],
            &digits[point as usize..]
        )
    };
    if negative {
        format!("-{body}")
    } else {
        body
    }
}

/// One element of `dtype` stored in `bytes` (little-endian), as a decimal.
pub fn element(dtype: DType, bytes: &[u8]) -> String {
    match dtype {
        DType::F16 => f16_short(f16::from_bits(u16::from_le_bytes([bytes[0], bytes[1]]))),
        DType::F32 => f32_short(f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
        DType::I32 => i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]).to_string(),
        DType::U8 => bytes[0].to_string(),
        DType::Bool => (bytes[0] != 0).to_string(),
    }
}

/// One element with its type and bit pattern, e.g. `10000 (f16 0x70e2)`.
pub fn element_with_bits(dtype: DType, bytes: &[u8]) -> String {
    let value = element(dtype, bytes);
    match dtype {
        DType::F16 => format!(
            "{value} (f16 0x{:04x})",
            u16::from_le_bytes([bytes[0], bytes[1]])
        ),
        DType::F32 => format!(
            "{value} (f32 0x{:08x})",
            u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
        ),
        _ => format!("{value} ({dtype})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortest_decimals_read_back() {
        assert_eq!(f16_short(f16::from_f32(0.1)), "0.1");
        assert_eq!(f16_short(f16::from_f32(65504.0)), "65504");
        assert_eq!(f16_short(f16::from_f32(-65504.0)), "-65504");
        assert_eq!(f16_short(f16::from_f32(2048.0)), "2048");
        assert_eq!(f16_short(f16::from_f32(-2.5)), "-2.5");
        assert_eq!(f16_short(f16::from_f32(1.0 / 3.0)), "0.3333");
        assert_eq!(f16_short(f16::from_bits(1)), "6e-8");
        assert_eq!(f16_short(f16::from_bits(0x8000)), "-0");
        assert_eq!(f16_short(f16::NAN), "nan");
        assert_eq!(f32_short(0.1), "0.1");
        assert_eq!(f32_short(1e30), "1e30");
        assert_eq!(
            element_with_bits(DType::F16, &0x70e2u16.to_le_bytes()),
            "10000 (f16 0x70e2)"
        );
        for bits in 0..0x7c00u16 {
            let x = f16::from_bits(bits);
            let text = f16_short(x);
            let (y, _) = decimal_to_f16(&text, false).unwrap();
            assert_eq!(y.to_bits(), bits, "{text}");
        }
    }
}

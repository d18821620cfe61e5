//! Calculator tests: numerics.md §3.1 vectors through expressions, typing, errors, output.

use super::*;

fn calc(dtype: DType, sr: bool, nanoo: bool) -> Calculator {
    Calculator::new(CalcOptions {
        dtype,
        sr,
        nanoo,
        seed: 0,
    })
}

fn f16_bits(expr: &str) -> (u16, FpSts) {
    let o = calc(DType::F16, false, false).eval(expr).unwrap();
    match o.value {
        Value::F16(v) => (v.to_bits(), o.flags),
        other => panic!("{expr}: {other:?}"),
    }
}

fn json(c: &mut Calculator, expr: &str) -> String {
    let mut s = String::new();
    write_json(&c.eval(expr).unwrap(), &mut s);
    s
}

#[test]
fn numerics_3_1_expressions() {
    assert_eq!(f16_bits("0.0004"), (0x0e8e, FpSts::empty()));
    assert_eq!(f16_bits("0.0004 + 0.25 - 0.25"), (0x1000, FpSts::empty()));
    assert_eq!(f16_bits("0.0001 + 0.25 - 0.25"), (0x0000, FpSts::empty()));
    assert_eq!(f16_bits("0.0001"), (0x068e, FpSts::empty()));
    assert_eq!(f16_bits("10000 * 10000"), (0x7bff, FpSts::OFLO));
    assert_eq!(f16_bits("65504 + 15"), (0x7bff, FpSts::empty()));
    assert_eq!(f16_bits("65504 + 16"), (0x7bff, FpSts::OFLO));
    assert_eq!(f16_bits("2048 + 1"), (0x6800, FpSts::empty()));
    // Ties to even at 2^11 (spacing 2): 2050 + 1 goes up to 2052; the literal 2049 is
    // itself a tie and rounds to 2048. The exact sum 2049 + 1 = 2050 is representable.
    assert_eq!(
        f16_bits("f16:0x6801 + 1").0,
        f16::from_f32(2052.0).to_bits()
    );
    assert_eq!(f16_bits("2049").0, 0x6800);
    let o = calc(DType::F32, false, false)
        .eval("cast_f16(2049 + 1)")
        .unwrap();
    assert_eq!(o.value, Value::F16(f16::from_f32(2050.0)));
    assert_eq!(f16_bits("1 + f16:0x1000"), (0x3c00, FpSts::empty()));
    assert_eq!(f16_bits("1 + 3*f16:0x1000"), (0x3c02, FpSts::empty()));
    assert_eq!(f16_bits("10000 / 0"), (0x7e00, FpSts::DIV0));
    let o = calc(DType::F16, false, true).eval("10000 * 10000").unwrap();
    assert_eq!(
        (o.value.bits(), o.flags),
        (0x7e00, FpSts::OFLO | FpSts::INV)
    );
    for (expr, want) in [
        ("0.2 + 0.25 - 0.25", 0.199_951_171_875),
        ("0.02 + 0.25 - 0.25", 0.020_019_531_25),
        ("0.002 + 0.25 - 0.25", 0.001_953_125),
        ("0.0002 + 0.25 - 0.25", 0.000_244_140_625),
    ] {
        assert_eq!(f64::from(f16::from_bits(f16_bits(expr).0)), want, "{expr}");
    }
}

#[test]
fn left_to_right_and_precedence() {
    // (0.25 + 0.0004) - 0.25 differs from 0.25 + (0.0004 - 0.25).
    assert_eq!(f16_bits("0.25 + 0.0004 - 0.25").0, 0x1000);
    assert_eq!(f16_bits("0.25 + (0.0004 - 0.25)").0, 0x0e00); // 3·2^-13
    assert_eq!(f16_bits("2 + 3 * 4").0, f16::from_f32(14.0).to_bits());
    assert_eq!(f16_bits("-(2 - 3) * -4").0, f16::from_f32(-4.0).to_bits());
    assert_eq!(f16_bits("--2").0, 0x4000);
}

#[test]
fn functions_types_and_casts() {
    assert_eq!(f16_bits("sqrt(2)").0, 0x3da8);
    assert_eq!(f16_bits("max(min(1, 2), -3)").0, 0x3c00);
    assert_eq!(f16_bits("log(0)"), (0xfc00, FpSts::DIV0));
    assert_eq!(
        f16_bits("cast_f16(cast_f32(1.5) * cast_f32(3))").0,
        f16::from_f32(4.5).to_bits()
    );
    assert_eq!(f16_bits("cast_f16(i32:-70000)"), (0xfbff, FpSts::OFLO));
    assert_eq!(
        f16_bits("cast_f16(u8:255)").0,
        f16::from_f32(255.0).to_bits()
    );
    let mut c = calc(DType::F16, false, false);
    assert_eq!(
        c.eval("cast_i32(nan)").unwrap(),
        Outcome {
            value: Value::I32(i32::MIN),
            flags: FpSts::INV
        }
    );
    assert_eq!(
        c.eval("lt(1, nan)").unwrap(),
        Outcome {
            value: Value::Bool(false),
            flags: FpSts::INV
        }
    );
    assert_eq!(
        c.eval("cast_f32(f16:0x3c01)").unwrap().value,
        Value::F32(1.0 + 2f32.powi(-10))
    );
    // 1 + 2^-24 in FP32 is a tie that goes to even.
    let mut c32 = calc(DType::F32, false, false);
    assert_eq!(
        c32.eval("1 + 5.9604644775390625e-8").unwrap().value,
        Value::F32(1.0)
    );
    assert_eq!(c32.eval("1e30 * 1e30").unwrap().flags, FpSts::OFLO);
    assert_eq!(
        c32.eval("1 / 0").unwrap(),
        Outcome {
            value: Value::F32(f32::INFINITY),
            flags: FpSts::DIV0
        }
    );
}

#[test]
fn errors_name_the_column() {
    let mut c = calc(DType::F16, false, false);
    let err = |c: &mut Calculator, e: &str| c.eval(e).unwrap_err();
    assert_eq!(err(&mut c, "").kind, ExprErrorKind::Empty);
    assert_eq!(
        err(&mut c, "1 + ").to_string(),
        "column 5: expected a number, a function call or '(', found the end of the expression"
    );
    assert_eq!(
        err(&mut c, "sqr(2)").to_string(),
        "column 1: unknown function 'sqr'"
    );
    assert_eq!(err(&mut c, "1 + 2)").column, 6);
    assert_eq!(
        err(&mut c, "(1 + 2").to_string(),
        "column 7: expected ')', found the end of the expression"
    );
    assert_eq!(
        err(&mut c, "2 $ 3").kind,
        ExprErrorKind::UnexpectedChar('$')
    );
    assert_eq!(err(&mut c, "1.2.3").column, 1);
    assert_eq!(
        err(&mut c, "min(1)").to_string(),
        "column 1: 'min' takes 2 argument(s), got 1"
    );
    assert_eq!(err(&mut c, "1 + cast_f32(2)").column, 3);
    assert!(err(&mut c, "1 + cast_f32(2)")
        .to_string()
        .contains("got f16 and f32"));
    assert_eq!(err(&mut c, "f16:0x12345").column, 1);
    assert_eq!(err(&mut c, "u8:256").column, 1);
    assert_eq!(
        err(&mut c, "x").kind,
        ExprErrorKind::UnknownName("x".into())
    );
    assert_eq!(
        err(&mut c, "é + 1").kind,
        ExprErrorKind::UnexpectedChar('é')
    );
    assert_eq!(err(&mut c, "1 + é").column, 5);
    let deep = "(".repeat(1000) + "1" + &")".repeat(1000);
    assert_eq!(
        err(&mut c, &deep).kind,
        ExprErrorKind::TooDeep(parse::MAX_DEPTH)
    );
    assert_eq!(
        err(&mut c, &"-".repeat(1000)).kind,
        ExprErrorKind::TooDeep(parse::MAX_DEPTH)
    );
}

#[test]
fn malformed_expressions_take_no_draws() {
    let mut a = calc(DType::F16, true, false);
    let mut b = calc(DType::F16, true, false);
    assert!(a.eval("1 + f16:0x0001 + )").is_err());
    assert_eq!(json(&mut a, "1 + 0.0004"), json(&mut b, "1 + 0.0004"));
}

#[test]
fn output_formats() {
    let mut c = calc(DType::F16, false, false);
    assert_eq!(
        json(&mut c, "0.0004 + 0.25 - 0.25"),
        r#"{"value": 0.00048828125, "bits": "0x1000", "flags": []}"#
    );
    assert_eq!(
        json(&mut c, "10000 * 10000"),
        r#"{"value": 65504, "bits": "0x7bff", "flags": ["OFLO"]}"#
    );
    assert_eq!(
        json(&mut c, "f16:0x0001"),
        r#"{"value": 5.960464477539063e-8, "bits": "0x0001", "flags": []}"#
    );
    assert_eq!(
        json(&mut c, "-0"),
        r#"{"value": -0.0, "bits": "0x8000", "flags": []}"#
    );
    assert_eq!(
        json(&mut c, "0/0"),
        r#"{"value": "nan", "bits": "0x7e00", "flags": ["INV"]}"#
    );
    assert_eq!(
        json(&mut c, "-inf"),
        r#"{"value": "-inf", "bits": "0xfc00", "flags": []}"#
    );
    assert_eq!(
        json(&mut c, "eq(1, 1)"),
        r#"{"value": true, "bits": "0x1", "flags": []}"#
    );
    let mut c32 = calc(DType::F32, false, false);
    assert_eq!(
        json(&mut c32, "0.1"),
        r#"{"value": 0.10000000149011612, "bits": "0x3dcccccd", "flags": []}"#
    );
    let mut s = String::new();
    write_human(&c.eval("10000 * 10000").unwrap(), &mut s);
    assert_eq!(s, "65504  f16:0x7bff  flags: OFLO");
    s.clear();
    write_error_json(3, &c.eval("1 + \"").unwrap_err(), &mut s);
    assert_eq!(
        s,
        r#"{"line": 3, "column": 5, "error": "unexpected character '\"'"}"#
    );
}

#[test]
fn printed_values_round_trip_exactly() {
    let mut c = calc(DType::F16, false, false);
    for bits in (0..=u16::MAX).step_by(7) {
        let o = c.eval(&format!("f16:0x{bits:04x}")).unwrap();
        let mut s = String::new();
        write_json(&o, &mut s);
        let value = s
            .split("\"value\": ")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap();
        let h = f16::from_bits(bits);
        if h.is_nan() {
            assert_eq!(value, "\"nan\"");
        } else if h.is_infinite() {
            assert_eq!(value.trim_matches('"').parse::<f64>().unwrap(), h.to_f64());
        } else {
            let back: f64 = value.parse().unwrap();
            assert_eq!(back.to_bits(), h.to_f64().to_bits(), "{s}");
        }
    }
}

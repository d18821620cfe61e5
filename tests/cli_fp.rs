//! `ipusim fp` through the binary: output formats, exit codes, errors with columns, and
//! stdin mode (one line per expression, errors as objects, the SR stream continuing).

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn ipusim(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ipusim"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ipusim");
    let input = stdin.unwrap_or("").to_owned();
    let mut pipe = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || pipe.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("wait");
    writer.join().expect("writer thread").expect("write stdin");
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("utf-8")
}

#[test]
fn one_expression_human_and_json() {
    let out = ipusim(&["fp", "0.0004 + 0.25 - 0.25"], None);
    assert_eq!(
        (out.status.code(), stdout(&out).as_str()),
        (Some(0), "0.00048828125  f16:0x1000  flags: none\n")
    );
    let out = ipusim(&["fp", "--json", "10000 * 10000"], None);
    assert_eq!(
        stdout(&out),
        "{\"value\": 65504, \"bits\": \"0x7bff\", \"flags\": [\"OFLO\"]}\n"
    );
    let out = ipusim(&["fp", "--json", "--nanoo", "10000 * 10000"], None);
    assert_eq!(
        stdout(&out),
        "{\"value\": \"nan\", \"bits\": \"0x7e00\", \"flags\": [\"INV\", \"OFLO\"]}\n"
    );
    let out = ipusim(
        &[
            "fp",
            "--dtype",
            "f32",
            "--json",
            "1 + 5.9604644775390625e-8",
        ],
        None,
    );
    assert_eq!(
        stdout(&out),
        "{\"value\": 1, \"bits\": \"0x3f800000\", \"flags\": []}\n"
    );
    // A leading minus is an expression, not a flag.
    let out = ipusim(&["fp", "-1 + f16:0x3c00"], None);
    assert_eq!(stdout(&out), "0.0  f16:0x0000  flags: none\n");
}

#[test]
fn malformed_expression_names_the_column_and_fails() {
    let out = ipusim(&["fp", "1 + sqr(2)"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).expect("utf-8");
    insta::assert_snapshot!(err, @r"
    error: column 5: unknown function 'sqr'
      1 + sqr(2)
          ^
    ");
    let out = ipusim(&["fp", "--dtype", "f64", "1"], None);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn stdin_lines_with_errors_go_on() {
    let input = "1 + 1\n\n(2\n0/0\r\nf16:0x7bff * 2\n";
    let out = ipusim(&["fp", "--json", "-"], Some(input));
    assert_eq!(
        out.status.code(),
        Some(1),
        "a malformed line makes the run fail"
    );
    insta::assert_snapshot!(stdout(&out), @r#"
    {"value": 2, "bits": "0x4000", "flags": []}
    {"line": 3, "column": 3, "error": "expected ')', found the end of the expression"}
    {"value": "nan", "bits": "0x7e00", "flags": ["INV"]}
    {"value": 65504, "bits": "0x7bff", "flags": ["OFLO"]}
    "#);
    let out = ipusim(&["fp", "-"], Some("2 * 3\n"));
    assert_eq!(
        (out.status.code(), stdout(&out).as_str()),
        (Some(0), "6  f16:0x4600  flags: none\n")
    );
    let out = ipusim(&["fp"], Some("2 +\n"));
    assert_eq!(stdout(&out), "line 1: error: column 4: expected a number, a function call or '(', found the end of the expression\n");
}

#[test]
fn the_sr_stream_continues_across_lines_and_is_seeded() {
    // 1 + 2^-24 rounds up with probability 2^-14; over 200,000 lines the count is
    // Binomial(200000, 2^-14): mean 12.2, sd 3.5 — at least one, and not more than 5 sd up.
    let lines = "1 + f16:0x0001\n".repeat(200_000);
    let out = ipusim(&["fp", "--sr", "--json", "--seed", "7", "-"], Some(&lines));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 200_000);
    let ups = text.matches("0x3c01").count();
    assert!((1..=30).contains(&ups), "{ups}");
    // Same seed: the same lines; another seed: a different stream.
    let again = ipusim(&["fp", "--sr", "--json", "--seed", "7", "-"], Some(&lines));
    assert_eq!(stdout(&again), text);
    let other = ipusim(&["fp", "--sr", "--json", "--seed", "8", "-"], Some(&lines));
    assert_ne!(stdout(&other), text);
    // Without --sr nothing moves.
    let rne = ipusim(&["fp", "--json", "-"], Some(&lines));
    assert_eq!(stdout(&rne).matches("0x3c01").count(), 0);
}

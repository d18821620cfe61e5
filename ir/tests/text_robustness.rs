//! The parser never panics and always points inside the file: every prefix of the worked
//! example, the example with any one line removed, and the example with any one character
//! replaced parse to a program or to an error whose position is in the file.

use ipusim_ir::text::{parse_program, ProgramError};

fn example() -> String {
    let doc = include_str!("../../docs/program-format.md");
    let body = &doc[doc.find("```ron example").unwrap()..];
    let body = &body[body.find('\n').unwrap() + 1..];
    body[..body.find("```").unwrap()].to_string()
}

fn check_position(src: &str, e: &ProgramError) {
    let lines = src.lines().count().max(1);
    assert!(e.line() >= 1 && e.line() <= lines + 1, "{e}");
    assert!(e.column() >= 1, "{e}");
    let rendered = e.to_string();
    assert!(rendered.starts_with("t.ron:"), "{rendered}");
}

#[test]
fn every_prefix() {
    let src = example();
    let mut cut = 0;
    for (i, _) in src.char_indices() {
        let prefix = &src[..i];
        if let Err(e) = parse_program(prefix, "t.ron") {
            check_position(prefix, &e);
            cut += 1;
        }
    }
    assert!(cut > src.len() / 2, "most prefixes are incomplete programs");
}

#[test]
fn every_line_removed() {
    let src = example();
    let lines: Vec<&str> = src.lines().collect();
    for skip in 0..lines.len() {
        let text: Vec<&str> = lines
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != skip)
            .map(|(_, l)| *l)
            .collect();
        let text = text.join("\n");
        if let Err(e) = parse_program(&text, "t.ron") {
            check_position(&text, &e);
        }
    }
}

#[test]
fn every_character_replaced() {
    let src = example();
    let chars: Vec<char> = src.chars().collect();
    for i in (0..chars.len()).step_by(4) {
        for replacement in ['"', '(', ']', '9', 'x', ','] {
            let mut c = chars.clone();
            c[i] = replacement;
            let text: String = c.into_iter().collect();
            if let Err(e) = parse_program(&text, "t.ron") {
                check_position(&text, &e);
            }
        }
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    for open in [
        "[",
        "(",
        "Program(name: \"p\", nodes: [(name: \"x\", op: Reshape(shape: [",
    ] {
        let text = open.repeat(100_000);
        let e = parse_program(&text, "t.ron").unwrap_err();
        check_position(&text, &e);
    }
}

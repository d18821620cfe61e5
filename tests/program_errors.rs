//! Rendered errors of the broken programs in `tests/programs/broken/`: one insta snapshot per
//! file, each showing the file, line and column, the source line with carets, and the fault.

use ipusim::ir::text::{parse_program, ErrorKind};
use std::path::Path;

fn render(name: &str) -> (ErrorKind, String) {
    let rel = format!("tests/programs/broken/{name}.ron");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(&rel);
    let source = std::fs::read_to_string(&path).unwrap();
    let err = parse_program(&source, &rel).expect_err("a broken program must not parse");
    (err.kind(), format!("kind: {:?}\n{err}\n", err.kind()))
}

/// Every broken program, with the kind of fault it must report.
const CASES: &[(&str, ErrorKind)] = &[
    ("bad_attribute", ErrorKind::Syntax),
    ("bad_axis", ErrorKind::Shape),
    ("bad_learning_rate", ErrorKind::Invalid),
    ("bad_precision", ErrorKind::Syntax),
    ("bad_shape", ErrorKind::Shape),
    ("bad_stable_norm", ErrorKind::Syntax),
    ("conv_groups", ErrorKind::Shape),
    ("conv_kernel_too_large", ErrorKind::Shape),
    ("csv_columns", ErrorKind::Invalid),
    ("cycle", ErrorKind::Cycle),
    ("duplicate_name", ErrorKind::DuplicateName),
    ("duplicate_stream", ErrorKind::DuplicateStream),
    ("missing_input", ErrorKind::MissingInput),
    ("norm_empty_group", ErrorKind::Shape),
    ("pool_stride_zero", ErrorKind::Shape),
    ("syntax_error", ErrorKind::Syntax),
    ("type_mismatch", ErrorKind::Type),
    ("unknown_dtype", ErrorKind::UnknownDType),
    ("unknown_field", ErrorKind::Syntax),
    ("unknown_op", ErrorKind::UnknownOp),
];

#[test]
fn every_broken_program_has_a_case() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/broken");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".ron").map(str::to_string)
        })
        .collect();
    files.sort();
    let cases: Vec<String> = CASES.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(files, cases);
}

#[test]
fn rendered_errors() {
    for &(name, kind) in CASES {
        let (found, rendered) = render(name);
        assert_eq!(found, kind, "{rendered}");
        assert!(
            rendered.contains(&format!("tests/programs/broken/{name}.ron:")),
            "{rendered}"
        );
        insta::assert_snapshot!(name, rendered);
    }
}

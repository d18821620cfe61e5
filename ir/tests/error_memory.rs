//! Locating an error in a large program costs memory in proportion to the program, not many
//! times over: the heap's peak while parsing a program of 20,000 nodes with one error near its
//! end stays under 10 times the source's size, for each way of being wrong, as it does for
//! the valid program. (The locator once built a span of every token and a tree of every value:
//! about 45 times the source, where the valid program takes about 9.)
//!
//! The heap is measured by a counting allocator (`tests/common/counting_alloc.rs`), so the
//! figures are exact and do not depend on the machine; this file holds one test so that no
//! other test allocates meanwhile.

use ipusim_ir::text::parse_program;
#[path = "../../tests/common/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::{peak_of, Counting};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const NODES: usize = 20_000;

/// A chain of `NODES` Relu nodes; `fault` rewrites node `NODES - 10` (its name, its op text
/// and its inputs' text) to make the program wrong.
fn chain(fault: impl Fn(&mut String, &mut String, &mut String)) -> String {
    let mut s = String::from(
        "Program(\n    name: \"chain\",\n    nodes: [\n        \
         (name: \"n0\", op: Input(stream: \"x\", dtype: F32, shape: [4])),\n        \
         (name: \"i\", op: Input(stream: \"i\", dtype: I32, shape: [4])),\n",
    );
    for k in 1..NODES {
        let (mut name, mut op, mut inputs) = (
            format!("n{k}"),
            "Relu".to_string(),
            format!("\"n{}\"", k - 1),
        );
        if k == NODES - 10 {
            fault(&mut name, &mut op, &mut inputs);
        }
        s.push_str(&format!(
            "        (name: \"{name}\", op: {op}, inputs: [{inputs}]),\n"
        ));
    }
    s.push_str(&format!(
        "        (name: \"out\", op: Outfeed(stream: \"y\"), inputs: [\"n{}\"]),\n    ],\n    \
         infeeds: [(stream: \"x\", source: Constant(1.0)), (stream: \"i\", source: Constant(1.0))],\n)\n",
        NODES - 1
    ));
    s
}

/// The heap's peak above its level before, while parsing `src`; and the error's first line.
fn peak_while_parsing(src: &str) -> (usize, String) {
    let (peak, result) = peak_of(|| parse_program(src, "big.ron"));
    let first = match &result {
        Ok(_) => "ok".to_string(),
        Err(e) => e.to_string().lines().next().unwrap_or("").to_string(),
    };
    drop(result);
    (peak, first)
}

#[test]
fn locating_an_error_in_a_large_program_takes_less_than_ten_times_its_size() {
    type Fault = fn(&mut String, &mut String, &mut String);
    let line = NODES - 10 + 5;
    let cases: [(&str, Fault, String); 6] = [
        ("valid", |_, _, _| {}, "ok".to_string()),
        (
            "unknown op",
            |_, op, _| *op = "Relux".into(),
            format!("big.ron:{line}:30: error: unknown op 'Relux'"),
        ),
        (
            "missing input",
            |_, _, inputs| *inputs = "\"nope\"".into(),
            format!("big.ron:{line}:45: error: node 'n19990' (Relu): missing input 'nope'"),
        ),
        (
            "type mismatch",
            |_, op, inputs| {
                *op = "Add".into();
                inputs.push_str(", \"i\"");
            },
            format!("big.ron:{line}:54: error: node 'n19990' (Add): input 1 'i' has type i32[4]"),
        ),
        (
            "duplicate name",
            |name, _, _| *name = "n5".into(),
            format!("big.ron:{line}:16: error: duplicate node name 'n5'"),
        ),
        (
            "value of the wrong form",
            |_, op, inputs| {
                *op = "Input(stream: \"q\", dtype: F32, shape: [4, \"x\"])".into();
                inputs.clear();
            },
            format!("big.ron:{line}:72: error: expected integer, found `\"x\"`"),
        ),
    ];
    for (what, fault, message) in cases {
        let src = chain(fault);
        let (peak, first) = peak_while_parsing(&src);
        assert!(first.starts_with(&message), "{what}: {first}");
        eprintln!(
            "{what}: peak {peak} bytes, {:.2} x {} bytes",
            peak as f64 / src.len() as f64,
            src.len()
        );
        let ratio = peak as f64 / src.len() as f64;
        assert!(
            ratio < 10.0,
            "{what}: the heap peaked at {peak} bytes, {ratio:.1} times the source's {} bytes",
            src.len()
        );
    }
}

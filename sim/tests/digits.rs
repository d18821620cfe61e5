//! The worked example of `docs/program-format.md` (an MLP on the UCI 8x8 digits, 16.32 with
//! loss scaling 128 and gradient accumulation 2) goes through the whole structural pipeline —
//! parse, `training::prepare` — and the reference interpreter trains it on the real data of
//! `programs/data/digits_train.csv`, in its own policy and with the other two as overrides.

use ipusim_ir::text::parse_program;
use ipusim_ir::training::prepare;
use ipusim_ir::{Precision, Program};
use ipusim_sim::init::tensor_from_f64;
use ipusim_sim::interp::{Interpreter, Streams};
use ipusim_sim::numerics::{FpConfig, StochasticRounding};

fn example() -> Program {
    let doc = include_str!("../../docs/program-format.md");
    let start = doc.find("```ron example").expect("worked example");
    let body = &doc[start..];
    let body = &body[body.find('\n').unwrap_or(0) + 1..];
    let text = &body[..body.find("```").unwrap_or(body.len())];
    parse_program(text, "docs/program-format.md").unwrap_or_else(|e| panic!("{e}"))
}

/// `(pixels, label)` rows of the digits file.
fn digits() -> Vec<(Vec<f64>, f64)> {
    let csv = include_str!("../../programs/data/digits_train.csv");
    csv.lines()
        .skip(1)
        .map(|line| {
            let v: Vec<f64> = line.split(',').map(|x| x.parse().unwrap()).collect();
            (v[..64].to_vec(), v[64])
        })
        .collect()
}

/// Trains `steps` steps; returns the mean loss of the first and of the last `window` steps.
fn train(precision: Precision, config: FpConfig, steps: usize, window: usize) -> (f64, f64) {
    let program = example();
    let step = prepare(&program, Some(precision), false).unwrap();
    assert_eq!(step.gradient_accumulation, 2);
    let mut it = Interpreter::new(&step.graph, config, 1).unwrap();
    let types: Vec<_> = it
        .infeeds()
        .map(|(s, t)| (s.to_string(), t.clone()))
        .collect();
    let data = digits();
    let batch = 16;
    let mut next = 0;
    let mut micro_batch = || -> Streams {
        let rows: Vec<&(Vec<f64>, f64)> =
            (0..batch).map(|i| &data[(next + i) % data.len()]).collect();
        next += batch;
        types
            .iter()
            .map(|(s, ty)| {
                let v: Vec<f64> = if s == "labels" {
                    rows.iter().map(|r| r.1).collect()
                } else {
                    rows.iter().flat_map(|r| r.0.iter().copied()).collect()
                };
                (s.clone(), tensor_from_f64(ty, &v).unwrap())
            })
            .collect()
    };
    let mut losses = Vec::new();
    for _ in 0..steps {
        let mbs = [micro_batch(), micro_batch()];
        for out in it.step(&mbs).unwrap() {
            losses.push(out["loss"].to_f64_vec()[0]);
        }
    }
    let w = 2 * window;
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    (mean(&losses[..w]), mean(&losses[losses.len() - w..]))
}

#[test]
fn the_documented_program_trains_on_digits_in_every_policy() {
    let sr = FpConfig {
        esr: StochasticRounding::On,
        ..FpConfig::default()
    };
    for (precision, config) in [
        (Precision::P16_32, FpConfig::default()),
        (Precision::P32_32, FpConfig::default()),
        (Precision::P16_16, sr),
    ] {
        let (first, last) = train(precision, config, 40, 5);
        // Chance is ln 10 = 2.30; 80 micro-batches of 16 images learn most of the digits.
        assert!(
            last < 0.5 * first,
            "{precision}: loss {first:.3} -> {last:.3}"
        );
    }
}

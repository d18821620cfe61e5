//! Unit tests of the reference interpreter: values of matmul, softmax and loss, FP16
//! swamping and stochastic rounding, phase-ordered assignments, overflow flags and traps,
//! exact mode, integer ops and casts, and the errors bad feeds and graphs raise.

use super::*;
use crate::numerics::StochasticRounding;
use half::f16;
use ipusim_ir::{DType, GraphBuilder, Init, LossReduction, Shape};

fn feeds(items: Vec<(&str, Tensor)>) -> Streams {
    items.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

#[test]
fn matmul_softmax_and_loss_values() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [2, 2]).unwrap();
    let w = b
        .constant("w", DType::F32, [2, 3], vec![1.0, 0.0, -1.0, 2.0, 1.0, 0.5])
        .unwrap();
    let y = b.matmul(x, w).unwrap();
    let labels = b.input("labels", DType::I32, [2]).unwrap();
    let p = b.softmax(y, 1).unwrap();
    b.outfeed("p", p).unwrap();
    let loss = b
        .sparse_softmax_cross_entropy(y, labels, LossReduction::Mean)
        .unwrap();
    b.outfeed("loss", loss).unwrap();
    let g = b.finish();
    let mut it = Interpreter::new(&g, FpConfig::default(), 0).unwrap();
    let out = it
        .micro_batch(&feeds(vec![
            ("x", Tensor::f32([2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap()),
            ("labels", Tensor::i32([2], vec![0, 2]).unwrap()),
        ]))
        .unwrap();
    assert_eq!(
        it.value("matmul").unwrap().as_f32().unwrap(),
        &[5.0, 2.0, 0.0, 11.0, 4.0, -1.0]
    );
    let p = out["p"].to_f64_vec();
    assert!((p[0] + p[1] + p[2] - 1.0).abs() < 1e-6);
    // Reference loss in f64.
    let row = |z: [f64; 3], l: usize| {
        let m = z.iter().cloned().fold(f64::MIN, f64::max);
        let s: f64 = z.iter().map(|v| (v - m).exp()).sum();
        s.ln() - (z[l] - m)
    };
    let want = (row([5.0, 2.0, 0.0], 0) + row([11.0, 4.0, -1.0], 2)) / 2.0;
    let got = out["loss"].to_f64_vec()[0];
    assert!((got - want).abs() < 1e-6 * want.abs(), "{got} vs {want}");
    assert!(it.flags().is_empty());
}

/// Seed 000: adding 0.0001 to an FP16 accumulator 10,000 times gives 0.25 with round to
/// nearest (swamping) and about 1 with stochastic rounding.
fn swamping(esr: StochasticRounding) -> Vec<f64> {
    let mut b = GraphBuilder::new();
    let acc = b.variable("acc", DType::F16, [20], Init::Zeros).unwrap();
    let c = b.scalar("small", DType::F16, 0.0001).unwrap();
    let next = b.add(acc, c).unwrap();
    b.assign(acc, next).unwrap();
    let g = b.finish();
    let config = FpConfig {
        esr,
        ..FpConfig::default()
    };
    let mut it = Interpreter::new(&g, config, 42).unwrap();
    let none = Streams::new();
    for _ in 0..10_000 {
        it.micro_batch(&none).unwrap();
    }
    it.variable("acc").unwrap().to_f64_vec()
}

#[test]
fn fp16_swamping_and_stochastic_rounding() {
    assert!(swamping(StochasticRounding::Off).iter().all(|&v| v == 0.25));
    let sr = swamping(StochasticRounding::On);
    // The exact sum is 10^4 * f16(0.0001) = 10^4 * 1.0001659393310547e-4. Each SR rounding
    // has variance <= ulp^2 / 4 with ulp <= 2^-10 below 1.0 (2^-9 just above), so one
    // accumulator has sd <= sqrt(1e4) * 2^-10 = 0.098 (a loose bound), the mean of 20 has
    // sd <= 0.022: 5-sigma bounds below.
    let exact = 1e4 * 1.000_165_939_331_054_7e-4;
    let mean = sr.iter().sum::<f64>() / 20.0;
    assert!((mean - exact).abs() < 0.11, "{mean}");
    assert!(sr.iter().all(|v| (v - exact).abs() < 0.49), "{sr:?}");
    assert_eq!(sr, swamping(StochasticRounding::On), "same seed, same bits");
}

#[test]
fn assignments_take_effect_at_the_end_of_their_phase() {
    // Step: acc := acc + x (and outfeed the acc read in that phase); Update: w := w + acc,
    // acc := 0. Update reads acc after the Step assignments.
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, []).unwrap();
    let acc = b.variable("acc", DType::F32, [], Init::Zeros).unwrap();
    let w = b
        .variable("w", DType::F32, [], Init::Constant(10.0))
        .unwrap();
    let sum = b.add(acc, x).unwrap();
    b.assign(acc, sum).unwrap();
    b.outfeed("seen", acc).unwrap();
    b.set_phase(Phase::Update);
    let nw = b.add(w, acc).unwrap();
    b.assign(w, nw).unwrap();
    let zero = b.scalar("zero", DType::F32, 0.0).unwrap();
    b.assign(acc, zero).unwrap();
    b.outfeed("x_last", x).unwrap();
    let g = b.finish();
    let mut it = Interpreter::new(&g, FpConfig::default(), 0).unwrap();
    let mb = |v: f32| feeds(vec![("x", Tensor::f32([], vec![v]).unwrap())]);
    let out = it.step(&[mb(1.0), mb(2.0), mb(4.0)]).unwrap();
    let seen: Vec<f64> = out.iter().map(|o| o["seen"].to_f64_vec()[0]).collect();
    assert_eq!(seen, vec![0.0, 1.0, 3.0]);
    assert_eq!(
        out[2]["x_last"].to_f64_vec(),
        vec![4.0],
        "Update reads the last micro-batch"
    );
    assert_eq!(it.variable("w").unwrap().to_f64_vec(), vec![17.0]);
    assert_eq!(it.variable("acc").unwrap().to_f64_vec(), vec![0.0]);
}

#[test]
fn fp16_overflow_flags_and_traps() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F16, [2]).unwrap();
    let y = b.add(x, x).unwrap();
    b.outfeed("y", y).unwrap();
    let g = b.finish();
    let big = feeds(vec![(
        "x",
        Tensor::f16([2], vec![f16::from_f32(60000.0), f16::ONE]).unwrap(),
    )]);

    let mut it = Interpreter::new(&g, FpConfig::default(), 0).unwrap();
    let out = it.micro_batch(&big).unwrap();
    assert_eq!(
        out["y"].to_f64_vec(),
        vec![65504.0, 2.0],
        "saturates without nanoo"
    );
    assert_eq!(it.flags(), FpSts::OFLO);
    assert_eq!(it.node_flags("add"), FpSts::OFLO);

    let nanoo = FpConfig {
        nanoo: true,
        ..FpConfig::default()
    };
    let mut it = Interpreter::new(&g, nanoo, 0).unwrap();
    let out = it.micro_batch(&big).unwrap();
    assert!(out["y"].to_f64_vec()[0].is_nan());
    assert_eq!(it.flags(), FpSts::OFLO | FpSts::INV);

    let trap = FpConfig {
        oflo: true,
        ..FpConfig::default()
    };
    let mut it = Interpreter::new(&g, trap, 0).unwrap();
    let err = it.micro_batch(&big).unwrap_err().to_string();
    assert!(err.contains("node 'add' (Add): OFLO raised"), "{err}");
}

#[test]
fn bad_feeds_and_graphs_are_named() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [2]).unwrap();
    b.outfeed("y", x).unwrap();
    let g = b.finish();
    let mut it = Interpreter::new(&g, FpConfig::default(), 0).unwrap();
    let err = it.micro_batch(&Streams::new()).unwrap_err().to_string();
    assert_eq!(err, "missing infeed for stream 'x' (node 'x')");
    let wrong = feeds(vec![("x", Tensor::f32([3], vec![0.0; 3]).unwrap())]);
    let err = it.micro_batch(&wrong).unwrap_err().to_string();
    assert_eq!(err, "infeed 'x': expected f32[2], got f32[3]");
    let extra = feeds(vec![
        ("x", Tensor::f32([2], vec![0.0; 2]).unwrap()),
        ("z", Tensor::f32([2], vec![0.0; 2]).unwrap()),
    ]);
    let err = it.micro_batch(&extra).unwrap_err().to_string();
    assert!(err.contains("unknown infeed stream 'z'"), "{err}");
    assert!(matches!(it.step(&[]), Err(InterpError::NoMicroBatches)));
    let err = it
        .set_variable("x", Tensor::f32([2], vec![0.0; 2]).unwrap())
        .unwrap_err();
    assert_eq!(err.to_string(), "no variable named 'x'");

    let mut b = GraphBuilder::new();
    let v = b.variable("v", DType::F32, [], Init::Zeros).unwrap();
    let one = b.scalar("one", DType::F32, 1.0).unwrap();
    b.assign(v, one).unwrap();
    b.assign(v, one).unwrap();
    let err = Interpreter::new(&b.finish(), FpConfig::default(), 0)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("variable 'v' is already assigned by 'assign' in the Step phase"),
        "{err}"
    );

    let mut b = GraphBuilder::new();
    b.set_phase(Phase::Update);
    let c = b.scalar("c", DType::F32, 1.0).unwrap();
    let u = b.unary(Op::Neg, c).unwrap();
    b.set_phase(Phase::Step);
    b.unary(Op::Neg, u).unwrap();
    let err = Interpreter::new(&b.finish(), FpConfig::default(), 0)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("node 'neg_1' (Neg): a Step-phase node cannot read 'neg'"),
        "{err}"
    );

    let mut b = GraphBuilder::new();
    b.splat("huge", DType::F16, [2], 1e6).unwrap();
    let err = Interpreter::new(&b.finish(), FpConfig::default(), 0)
        .unwrap_err()
        .to_string();
    // The validator refuses the literal before the interpreter materialises it.
    assert_eq!(
        err,
        "node 'huge' (Constant): constant value 1000000 overflows f16"
    );
}

#[test]
fn exact_mode_keeps_f64_and_casts_ints() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F16, [3]).unwrap();
    let third = b.scalar("third", DType::F16, 3.0).unwrap();
    let q = b.div(x, third).unwrap();
    let i = b.cast(q, DType::I32).unwrap();
    let back = b.cast(i, DType::F32).unwrap();
    b.outfeed("q", q).unwrap();
    b.outfeed("back", back).unwrap();
    let g = b.finish();
    let mut it = Interpreter::new_exact(&g, 0).unwrap();
    let xs = vec![f16::from_f32(1.0), f16::from_f32(7.0), f16::from_f32(-7.0)];
    let out = it
        .micro_batch(&feeds(vec![("x", Tensor::f16([3], xs).unwrap())]))
        .unwrap();
    assert_eq!(
        out["q"].as_f64().unwrap(),
        &[1.0 / 3.0, 7.0 / 3.0, -7.0 / 3.0]
    );
    assert_eq!(out["back"].as_f64().unwrap(), &[0.0, 2.0, -2.0]);
    assert_eq!(out["q"].dtype(), DType::F16, "the graph's dtype is kept");
    assert!(it.is_exact());
    assert_eq!(
        it.graph()
            .node(it.graph().find("outfeed_back").unwrap())
            .ty
            .shape,
        Shape::new([3])
    );
}

#[test]
fn integer_ops_and_casts() {
    let mut b = GraphBuilder::new();
    let a = b.input("a", DType::I32, [4]).unwrap();
    let d = b.input("d", DType::I32, [4]).unwrap();
    let q = b.div(a, d).unwrap();
    b.outfeed("q", q).unwrap();
    let big = b.scalar("big", DType::I32, f64::from(i32::MAX)).unwrap();
    let wrapped = b.add(a, big).unwrap();
    b.outfeed("wrapped", wrapped).unwrap();
    let gt = b.op("gt", Op::Greater, &[a, d]).unwrap();
    b.outfeed("gt", gt).unwrap();
    let f = b.input("f", DType::F32, [4]).unwrap();
    let u = b.cast(f, DType::U8).unwrap();
    b.outfeed("u8", u).unwrap();
    let flags = b.cast(f, DType::Bool).unwrap();
    b.outfeed("bool", flags).unwrap();
    let h = b.cast(a, DType::F16).unwrap();
    b.outfeed("f16", h).unwrap();
    let g = b.finish();
    let mut it = Interpreter::new(&g, FpConfig::default(), 0).unwrap();
    let out = it
        .micro_batch(&feeds(vec![
            ("a", Tensor::i32([4], vec![7, -7, 1, 2049]).unwrap()),
            ("d", Tensor::i32([4], vec![2, 2, 0, 1]).unwrap()),
            ("f", Tensor::f32([4], vec![-1.5, 3.9, 300.0, 0.0]).unwrap()),
        ]))
        .unwrap();
    assert_eq!(
        out["q"].as_i32().unwrap(),
        &[3, -3, 0, 2049],
        "truncating division"
    );
    assert_eq!(
        it.node_flags("div"),
        FpSts::DIV0,
        "integer division by zero"
    );
    assert_eq!(
        out["wrapped"].as_i32().unwrap()[0],
        i32::MIN + 6,
        "wrapping"
    );
    assert_eq!(out["gt"].to_f64_vec(), vec![1.0, 0.0, 1.0, 1.0]);
    assert_eq!(
        out["u8"].to_f64_vec(),
        vec![0.0, 3.0, 255.0, 0.0],
        "saturating"
    );
    assert_eq!(it.node_flags("cast"), FpSts::INV, "out of range for u8");
    assert_eq!(out["bool"].to_f64_vec(), vec![1.0, 1.0, 1.0, 0.0]);
    assert_eq!(
        out["f16"].to_f64_vec()[3],
        2048.0,
        "2049 rounds to even in FP16"
    );
}

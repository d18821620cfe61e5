//! Differential tests of the BSP engine against the reference interpreter, on every program
//! in `programs/` and `tests/programs/sim/`.
//!
//! The engine runs each program step by step. When the first program step of an IR node is
//! about to run, the values of the node's inputs are read from tile memory; after its last
//! step, its value. The interpreter then evaluates the node's op on those same inputs
//! (`interp::evaluate_node`) and the two values must agree:
//!
//! - **bit for bit** (values and `$FP_STS` flags) for every op whose order of evaluation the
//!   contracts fix completely: element-wise ops in FP16 and FP32 (RNE), casts, softmax, max
//!   reductions (IEEE `maximum` is associative), argmax, data movement;
//! - **within a derived bound** where the tiled execution sums in another order than the
//!   interpreter's sequential one — `MatMul` (AMP passes per tile, cross-tile reduction of
//!   partials), `ReduceSum`/`ReduceMean` (up to three levels of sequential sums), the batch
//!   sum of `SparseSoftmaxCrossEntropy`. Any order of summing `n` terms in a type of unit
//!   roundoff `u` is within `γ(n)·Σ|t_i|` of the exact sum, `γ(n) = n·u/(1 − n·u)` (Higham,
//!   *Accuracy and Stability of Numerical Algorithms*, §3.1; the compiler documents the
//!   first-order form `(n − 1)·u·Σ|x|`, and `n` rather than `n − 1` also covers FP32 products
//!   rounded before they are added). Both results are within that of the exact sum, both are
//!   then scaled by the same `s` (a mean's `1/n` rounded to f32) and rounded once to the
//!   output type, so `|engine − interp| ≤ s·(B_engine + B_interp) + ulp_out(max)`.
//!
//! Whole runs are also compared: the interpreter runs the program on the infeeds the engine
//! consumed; programs made only of bit-identical ops must give bit-identical outfeeds.

mod common;

use common::programs;
use ipusim_compiler::executable::StepKind;
use ipusim_compiler::Target;
use ipusim_ir::{Graph, LossReduction, NodeId, Op, Phase};
use ipusim_sim::engine::{EngineOptions, Settled, Stepped};
use ipusim_sim::feeds::ProgramHost;
use ipusim_sim::host::{HostError, HostIo};
use ipusim_sim::interp::{evaluate_node, Interpreter, Streams};
use ipusim_sim::numerics::{FpConfig, FpSts};
use ipusim_sim::tensor::Tensor;
use ipusim_sim::Engine;
use std::collections::{BTreeMap, HashMap};

/// A host that records every infeed micro-batch it hands out.
struct Recording {
    inner: ProgramHost,
    infeeds: Vec<(String, Tensor)>,
}

impl HostIo for Recording {
    fn infeed(
        &mut self,
        stream: &ipusim_compiler::executable::HostStream,
        dst: &mut [u8],
    ) -> Result<(), HostError> {
        let t = self.inner.next_batch(stream)?;
        dst.copy_from_slice(&t.to_bytes());
        self.infeeds.push((stream.name.clone(), t));
        Ok(())
    }
    fn outfeed(
        &mut self,
        stream: &ipusim_compiler::executable::HostStream,
        src: &[u8],
    ) -> Result<(), HostError> {
        self.inner.outfeed(stream, src)
    }
}

/// Unit roundoff of an accumulation type.
fn unit_roundoff(f16_acc: bool) -> f64 {
    if f16_acc {
        2f64.powi(-11)
    } else {
        2f64.powi(-24)
    }
}

/// `γ(n) = n·u / (1 − n·u)`.
fn gamma(n: usize, u: f64) -> f64 {
    let nu = n as f64 * u;
    if nu >= 1.0 {
        f64::INFINITY
    } else {
        nu / (1.0 - nu)
    }
}

/// The spacing of the output format at magnitude `m`.
fn ulp(m: f64, f16_out: bool) -> f64 {
    let e = if m > 0.0 {
        m.log2().floor() as i32
    } else {
        -200
    };
    if f16_out {
        2f64.powi(e.max(-14) - 10)
    } else {
        2f64.powi(e.max(-126) - 23)
    }
}

/// Row-major strides.
fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// `Σ|x_i|` over the reduced axes, per output element (kept dims in order).
fn abs_sums(x: &Tensor, axes: &[usize]) -> Vec<f64> {
    let dims = x.shape().dims().to_vec();
    let kept: Vec<usize> = (0..dims.len()).filter(|d| !axes.contains(d)).collect();
    let out_dims: Vec<usize> = kept.iter().map(|&d| dims[d]).collect();
    let out_strides = strides(&out_dims);
    let n_out: usize = out_dims.iter().product();
    let mut sums = vec![0f64; n_out.max(1)];
    let st = strides(&dims);
    for (i, v) in x.to_f64_vec().into_iter().enumerate() {
        let o: usize = kept
            .iter()
            .zip(&out_strides)
            .map(|(&d, &s)| (i / st[d]) % dims[d] * s)
            .sum();
        sums[o] += v.abs();
    }
    sums
}

/// `Σ_κ |a_κ|·|b_κ|` per output of a (batched, broadcast) matmul, and `k`.
fn matmul_abs(a: &Tensor, b: &Tensor, out_dims: &[usize]) -> (Vec<f64>, usize) {
    let (ad, bd) = (a.shape().dims(), b.shape().dims());
    let (m, k, n) = (ad[ad.len() - 2], ad[ad.len() - 1], bd[bd.len() - 1]);
    let batch = &out_dims[..out_dims.len() - 2];
    let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
    let index = |own: &[usize], idx: &[usize]| -> usize {
        // Broadcast batch index into an operand's own batch dims (aligned right).
        let lead = idx.len() - own.len();
        let st = strides(own);
        own.iter()
            .enumerate()
            .map(|(d, &size)| if size == 1 { 0 } else { idx[lead + d] * st[d] })
            .sum()
    };
    let nb: usize = batch.iter().product();
    let bst = strides(batch);
    let mut out = Vec::with_capacity(nb * m * n);
    for bi in 0..nb.max(1) {
        let idx: Vec<usize> = batch
            .iter()
            .zip(&bst)
            .map(|(&d, &s)| (bi / s) % d)
            .collect();
        let ia = index(&ad[..ad.len() - 2], &idx);
        let ib = index(&bd[..bd.len() - 2], &idx);
        for r in 0..m {
            for c in 0..n {
                let s: f64 = (0..k)
                    .map(|kk| (av[(ia * m + r) * k + kk] * bv[(ib * k + kk) * n + c]).abs())
                    .sum();
                out.push(s);
            }
        }
    }
    (out, k)
}

/// Per-row cross-entropy losses in f64 (0 for labels out of range), their count.
fn ce_rows(logits: &Tensor, labels: &Tensor) -> Vec<f64> {
    let d = logits.shape().dims();
    let (rows, classes) = (d[0], d[1]);
    let x = logits.to_f64_vec();
    let l = labels.to_f64_vec();
    (0..rows)
        .map(|r| {
            let row = &x[r * classes..(r + 1) * classes];
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = row.iter().map(|v| (v - m).exp()).sum::<f64>().ln() + m;
            let label = l[r];
            if label >= 0.0 && (label as usize) < classes {
                lse - row[label as usize]
            } else {
                0.0
            }
        })
        .collect()
}

/// How a node's engine value must relate to the interpreter's.
enum Verdict {
    Identical,
    /// Per-element bound on `|engine − interp|` before the output rounding, and whether the
    /// output is FP16.
    Bounded(Vec<f64>, bool),
}

fn verdict(graph: &Graph, id: NodeId, inputs: &[Tensor], f16_partials: bool) -> Verdict {
    let node = graph.node(id);
    let f16_out = node.ty.dtype == ipusim_ir::DType::F16;
    let half_acc = f16_partials && graph.node(node.inputs[0]).ty.dtype == ipusim_ir::DType::F16;
    // Engine and interpreter accumulation roundoffs (the interpreter always uses f32).
    let (ue, ui) = (unit_roundoff(half_acc), unit_roundoff(false));
    let f32s = |x: f64| x as f32 as f64;
    match &node.op {
        Op::MatMul => {
            let (sums, k) = matmul_abs(&inputs[0], &inputs[1], node.ty.shape.dims());
            let g = gamma(k, ue) + gamma(k, ui);
            Verdict::Bounded(sums.into_iter().map(|s| g * s).collect(), f16_out)
        }
        Op::ReduceSum { axes, .. } | Op::ReduceMean { axes, .. } => {
            let dims = inputs[0].shape().dims();
            let n: usize = axes.iter().map(|&a| dims[a]).product();
            let s = if matches!(node.op, Op::ReduceMean { .. }) {
                f32s(1.0 / n as f64)
            } else {
                1.0
            };
            let g = gamma(n, ue) + gamma(n, ui);
            Verdict::Bounded(
                abs_sums(&inputs[0], axes)
                    .into_iter()
                    .map(|x| s * g * x)
                    .collect(),
                f16_out,
            )
        }
        Op::SparseSoftmaxCrossEntropy { reduction } => {
            let rows = ce_rows(&inputs[0], &inputs[1]);
            let n = rows.len();
            // Per-row losses are computed identically by both; they are summed in f32.
            let total: f64 = rows.iter().map(|r| r.abs()).sum::<f64>() * (1.0 + 1e-3) + 1e-6;
            let s = if *reduction == LossReduction::Mean {
                f32s(1.0 / n as f64)
            } else {
                1.0
            };
            Verdict::Bounded(
                vec![s * 2.0 * gamma(n, unit_roundoff(false)) * total],
                f16_out,
            )
        }
        Op::Conv2d { .. } | Op::Conv2dInputGrad { .. } | Op::Conv2dWeightGrad { .. } => {
            // The engine's FP32 AMP passes are 8 channels, the interpreter's 16: another
            // order of the same sums (`interp/conv.rs`), bounded as a matmul's.
            let (sums, k) = conv_abs(&node.op, &inputs[0], &inputs[1], node.ty.shape.dims());
            let g = gamma(k, ue) + gamma(k, ui);
            Verdict::Bounded(sums.into_iter().map(|s| g * s).collect(), f16_out)
        }
        _ => Verdict::Identical,
    }
}

/// `Σ|a·b|` over the reduction of every output element of a convolution pass, and the
/// reduction length (direct loops over the geometry, independent of the kernels).
fn conv_abs(op: &Op, a: &Tensor, b: &Tensor, out: &[usize]) -> (Vec<f64>, usize) {
    use ipusim_ir::conv::Window;
    let window = Window::of(op).unwrap().unwrap();
    let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
    let (ad, bd) = (a.shape().dims().to_vec(), b.shape().dims().to_vec());
    let (x, w) = match op {
        Op::Conv2d { .. } => (ad.clone(), bd.clone()),
        Op::Conv2dInputGrad { .. } => (out.to_vec(), bd.clone()),
        _ => (ad.clone(), out.to_vec()),
    };
    let g = window.geometry(&x, &w).unwrap();
    let (cg, og) = (g.c_per_group(), g.o_per_group());
    let xi = |n: usize, c: usize, r: usize, col: usize| ((n * g.c + c) * g.h + r) * g.w + col;
    let yi = |n: usize, o: usize, r: usize, col: usize| ((n * g.o + o) * g.oh + r) * g.ow + col;
    let wi = |o: usize, c: usize, kh: usize, kw: usize| ((o * cg + c) * g.kh + kh) * g.kw + kw;
    let mut sums = vec![0f64; out.iter().product()];
    // Every (n, o, oh, ow, c, kh, kw) term of the forward sum, attributed to its output.
    for n in 0..g.n {
        for o in 0..g.o {
            let grp = o / og;
            for oh in 0..g.oh {
                for ow in 0..g.ow {
                    for c in 0..cg {
                        for kh in 0..g.kh {
                            for kw in 0..g.kw {
                                let (Some(r), Some(col)) =
                                    (g.input_row(oh, kh), g.input_col(ow, kw))
                                else {
                                    continue;
                                };
                                let ci = grp * cg + c;
                                match op {
                                    Op::Conv2d { .. } => {
                                        sums[yi(n, o, oh, ow)] +=
                                            (av[xi(n, ci, r, col)] * bv[wi(o, c, kh, kw)]).abs()
                                    }
                                    Op::Conv2dInputGrad { .. } => {
                                        sums[xi(n, ci, r, col)] +=
                                            (av[yi(n, o, oh, ow)] * bv[wi(o, c, kh, kw)]).abs()
                                    }
                                    _ => {
                                        sums[wi(o, c, kh, kw)] +=
                                            (av[xi(n, ci, r, col)] * bv[yi(n, o, oh, ow)]).abs()
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    let k = match op {
        Op::Conv2d { .. } => cg * g.kh * g.kw,
        Op::Conv2dInputGrad { .. } => og * g.kh * g.kw,
        _ => g.n * g.oh * g.ow,
    };
    (sums, k)
}

/// Compares the engine's and the interpreter's values of a node; `Err` describes the first
/// disagreement.
fn compare(
    what: &str,
    v: &Verdict,
    engine: &Tensor,
    interp: &Tensor,
    fe: FpSts,
    fi: FpSts,
) -> Result<(), String> {
    if engine.dtype() != interp.dtype() || engine.shape() != interp.shape() {
        return Err(format!(
            "{what}: engine {} vs interpreter {}",
            engine.ty(),
            interp.ty()
        ));
    }
    match v {
        Verdict::Identical => {
            if engine.to_bytes() != interp.to_bytes() {
                let (e, i) = (engine.to_f64_vec(), interp.to_f64_vec());
                let j = (0..e.len())
                    .find(|&j| e[j].to_bits() != i[j].to_bits())
                    .unwrap_or(0);
                return Err(format!(
                    "{what}: element {j}: engine {} vs interpreter {} (must be bit-identical)",
                    e[j], i[j]
                ));
            }
            if fe != fi {
                return Err(format!("{what}: engine flags {fe:?} vs interpreter {fi:?}"));
            }
        }
        Verdict::Bounded(bounds, f16_out) => {
            let (e, i) = (engine.to_f64_vec(), interp.to_f64_vec());
            for j in 0..e.len() {
                if e[j].is_nan() || i[j].is_nan() {
                    if e[j].is_nan() != i[j].is_nan() {
                        return Err(format!(
                            "{what}: element {j}: engine {} vs interpreter {}",
                            e[j], i[j]
                        ));
                    }
                    continue;
                }
                if e[j] == i[j] {
                    continue;
                }
                let bound =
                    bounds[j.min(bounds.len() - 1)] + ulp(e[j].abs().max(i[j].abs()), *f16_out);
                if (e[j] - i[j]).abs() > bound {
                    return Err(format!(
                        "{what}: element {j}: engine {} vs interpreter {}: |difference| {} > bound {bound}",
                        e[j],
                        i[j],
                        (e[j] - i[j]).abs()
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The value of node `id` as the engine holds it now (a folded transpose: evaluated from its
/// input's value).
fn value_of(engine: &Engine, graph: &Graph, id: NodeId) -> Tensor {
    let node = graph.node(id);
    if let Some(t) = engine.read_tensor(&node.name) {
        return t;
    }
    let inputs: Vec<Tensor> = node
        .inputs
        .iter()
        .map(|&i| value_of(engine, graph, i))
        .collect();
    let refs: Vec<&Tensor> = inputs.iter().collect();
    evaluate_node(graph, id, &refs, FpConfig::default(), 0)
        .unwrap_or_else(|e| {
            panic!(
                "node '{}' has no value in the engine and cannot be evaluated: {e}",
                node.name
            )
        })
        .0
}

/// Statistics of one program's differential run.
#[derive(Default, Debug)]
struct Report {
    identical: usize,
    bounded: usize,
    failures: Vec<String>,
}

/// Runs `path` on the engine node by node against the interpreter, then whole.
fn run_program(path: &std::path::Path, target: &Target, f16_partials: bool) -> Option<Report> {
    run_program_in(path, target, f16_partials, None)
}

/// [`run_program`] with a precision policy override.
fn run_program_in(
    path: &std::path::Path,
    target: &Target,
    f16_partials: bool,
    precision: Option<ipusim_ir::Precision>,
) -> Option<Report> {
    let partials = if f16_partials {
        ipusim_compiler::PartialsType::Half
    } else {
        ipusim_compiler::PartialsType::Float
    };
    let launched =
        programs::try_launch_in(path, target, EngineOptions::default(), partials, precision)?;
    let exe = launched.executable.clone();
    let graph = launched.graph.clone();
    let mut engine = launched.engine;
    let mut host = Recording {
        inner: launched.host,
        infeeds: Vec::new(),
    };
    // The first and last program step of every node.
    let mut span: HashMap<NodeId, (u32, u32)> = HashMap::new();
    let mut node_of_step: Vec<Option<NodeId>> = Vec::new();
    for (k, s) in exe.steps.iter().enumerate() {
        let node = match s.kind {
            StepKind::Execute(cs) => exe.compute_set(cs).node,
            StepKind::Exchange(ex) | StepKind::IpuCopy(ex) => exe.exchange(ex).node,
            StepKind::StreamCopy(st) => Some(exe.streams[st.0 as usize].node),
            StepKind::CrossReplica(t) => exe.tensor(t).node,
            StepKind::CrossReplicaTo { dst, .. } => exe.tensor(dst).node,
            // A remote-buffer copy moves a variable's value; no node computes there.
            StepKind::RemoteCopy { .. } => None,
        };
        node_of_step.push(node);
        if let Some(n) = node {
            let e = span.entry(n).or_insert((k as u32, k as u32));
            e.1 = k as u32;
        }
    }
    let mut report = Report::default();
    let mut inputs: HashMap<NodeId, Vec<Tensor>> = HashMap::new();
    let mut flags: HashMap<NodeId, FpSts> = HashMap::new();
    loop {
        let next = match engine.settle().unwrap() {
            Settled::Finished(_) => break,
            Settled::Step(next) => next,
        };
        let node = next.step.and_then(|k| node_of_step[k as usize]);
        if let (Some(n), Some(k)) = (node, next.step) {
            if span[&n].0 == k && !graph.node(n).op.is_source() {
                let vals = graph
                    .node(n)
                    .inputs
                    .iter()
                    .map(|&i| value_of(&engine, &graph, i))
                    .collect();
                inputs.insert(n, vals);
                flags.insert(n, FpSts::empty());
            }
        }
        let Stepped::Step(done) = engine.step(&mut host).unwrap() else {
            unreachable!()
        };
        let (Some(n), Some(k)) = (node, next.step) else {
            continue;
        };
        if let Some(f) = flags.get_mut(&n) {
            *f |= done.flags;
        }
        if span[&n].1 != k {
            continue;
        }
        let Some(vals) = inputs.remove(&n) else {
            continue;
        };
        let what = format!(
            "{}: node '{}' ({})",
            programs::name(path),
            graph.node(n).name,
            graph.node(n).op.name()
        );
        let refs: Vec<&Tensor> = vals.iter().collect();
        let (interp, fi) = evaluate_node(&graph, n, &refs, FpConfig::default(), 0).unwrap();
        let engine_value = engine
            .read_tensor(&graph.node(n).name)
            .unwrap_or_else(|| panic!("{what}: no engine value"));
        let v = verdict(&graph, n, &vals, f16_partials);
        match v {
            Verdict::Identical => report.identical += 1,
            Verdict::Bounded(..) => report.bounded += 1,
        }
        if let Err(e) = compare(&what, &v, &engine_value, &interp, flags[&n], fi) {
            report.failures.push(e);
        }
    }
    // Whole run: the interpreter on the infeeds the engine consumed.
    let bit_exact = !graph.ids().any(|id| {
        matches!(
            graph.node(id).op,
            Op::MatMul
                | Op::ReduceSum { .. }
                | Op::ReduceMean { .. }
                | Op::SparseSoftmaxCrossEntropy { .. }
        )
    });
    if !f16_partials {
        let mut interp = Interpreter::new(&graph, FpConfig::default(), 0).unwrap();
        let streams: usize = graph
            .ids()
            .filter(|&i| matches!(graph.node(i).op, Op::Input { .. }))
            .count();
        let mut batches: Vec<Streams> = Vec::new();
        let mut per_stream: BTreeMap<String, usize> = BTreeMap::new();
        for (s, t) in &host.infeeds {
            let k = per_stream.entry(s.clone()).or_default();
            if batches.len() <= *k {
                batches.push(Streams::new());
            }
            batches[*k].insert(s.clone(), t.clone());
            *k += 1;
        }
        if streams == 0 {
            batches = vec![
                Streams::new();
                (exe.options.device_iterations * exe.options.gradient_accumulation)
                    as usize
            ];
        }
        let ga = exe.options.gradient_accumulation as usize;
        let mut outfeeds: BTreeMap<String, Vec<Tensor>> = BTreeMap::new();
        let has_update = graph.ids().any(|i| graph.node(i).phase == Phase::Update);
        for step in batches.chunks(ga) {
            let out = if has_update || ga > 1 {
                interp.step(step).unwrap()
            } else {
                vec![interp.micro_batch(&step[0]).unwrap()]
            };
            for mb in out {
                for (s, t) in mb {
                    outfeeds.entry(s).or_default().push(t);
                }
            }
        }
        for (s, entries) in &outfeeds {
            let got = &host.inner.outfeeds[s];
            assert_eq!(
                got.len(),
                entries.len(),
                "{}: outfeed '{s}' entries",
                programs::name(path)
            );
            if bit_exact {
                for (k, (g, w)) in got.iter().zip(entries).enumerate() {
                    if g.to_bytes() != w.to_bytes() {
                        report.failures.push(format!(
                            "{}: outfeed '{s}' entry {k} differs from the interpreter's",
                            programs::name(path)
                        ));
                    }
                }
            }
        }
    }
    Some(report)
}

#[test]
fn every_program_agrees_with_the_interpreter_node_by_node() {
    let all = programs::all();
    assert!(all.len() >= 5, "programs found: {all:?}");
    let mut failures = Vec::new();
    for path in &all {
        let mut checked = false;
        for tiles in [16, 64, 1472] {
            let Some(r) = run_program(path, &programs::mk2(tiles), false) else {
                continue;
            };
            println!(
                "{} on {tiles} tiles: {} bit-identical nodes, {} within bounds",
                programs::name(path),
                r.identical,
                r.bounded
            );
            assert!(
                r.identical + r.bounded > 0,
                "{}: nothing compared",
                path.display()
            );
            failures.extend(r.failures);
            checked = true;
            if tiles == 64 {
                break;
            }
        }
        assert!(checked, "{} fits no target", path.display());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn half_partials_agree_within_the_half_bound() {
    let mut failures = Vec::new();
    for name in ["matmul", "train_mlp"] {
        let r = run_program(&programs::sim_program(name), &programs::mk2(16), true).unwrap();
        failures.extend(r.failures);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_op_agrees_in_every_precision() {
    let mut failures = Vec::new();
    for name in ["op_tour", "train_mlp", "cnn_tour"] {
        for precision in ipusim_ir::Precision::ALL {
            let r = run_program_in(
                &programs::sim_program(name),
                &programs::mk2(16),
                false,
                Some(precision),
            )
            .unwrap();
            println!(
                "{name} in {precision}: {} bit-identical nodes, {} within bounds",
                r.identical, r.bounded
            );
            failures.extend(r.failures);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

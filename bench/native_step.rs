//! A native f32 training step: a step graph (`ipusim_compiler::build::step_graph`, the graph
//! the simulator compiles) executed node by node in plain f32 on one host thread, the
//! baseline the CNN benchmark holds the simulator against.
//!
//! Every node computes what its op says (`ipusim_ir::Op`), with buffers planned once and
//! reused every step, as a static-graph framework runs: convolutions as im2col (skipped for
//! 1×1 stride-1 unpadded ones, whose input already is the matrix) and `matrixmultiply`'s
//! optimised sgemm, the weight gradient reusing its forward pass's im2col matrix; the
//! input gradient as sgemm and col2im; matmuls as sgemm; element-wise ops with NumPy
//! broadcasting, reductions and pooling as loops over contiguous runs the compiler
//! vectorises. `Reshape`, `Flatten`, float `Cast`s and `Outfeed` are views of their input
//! (a native f32 step has no casts), and an `Assign` swaps the new value's buffer with the
//! variable's at the end of its phase (an in-place update) unless a later node reads it.
//! Labels are held as f32 class indices. Values are those of the op in f32, not the IPU's
//! roundings: `tests/native_step.rs` holds the step's loss and updated variables to the
//! reference interpreter's 32.32 step on the same inputs.
//!
//! Ops a ResNet's step does not have (grouped convolutions, `Select`, …) are refused when
//! the step is planned.

use ipusim::ir::{conv, Activation, Graph, LossReduction, NodeId, Op, Phase};
use ipusim::sim::init;
use std::collections::HashMap;

#[path = "native_ops.rs"]
mod ops;

use ops::{run, Binary, Exec, Kernel, Loop, Pool, Reduce};
pub use ops::{Conv, Unsupported};

/// An `Assign` at the end of its phase: (the variable's buffer, the value's buffer, whether
/// the two are swapped rather than the value copied).
type Assignment = (usize, usize, bool);

/// The native step of one graph.
pub struct NativeStep {
    /// Buffers: one per node that computes, plus scratch (im2col matrices).
    bufs: Vec<Vec<f32>>,
    /// Each phase's executions, then its assignments.
    phases: Vec<(Vec<Exec>, Vec<Assignment>)>,
    /// The buffer of each outfeed's value, by stream.
    outfeeds: Vec<(String, usize)>,
    /// The buffer of each variable, by name.
    variables: Vec<(String, usize)>,
    /// Each infeed's buffer, by stream.
    infeeds: Vec<(String, usize)>,
    /// Each variable's initial value (`NativeStep::reset`).
    initial: Vec<Vec<f32>>,
    macs: u64,
}

impl NativeStep {
    /// Plans `graph` (a step graph), with every variable and constant at its initial value
    /// and every infeed zero.
    pub fn new(graph: &Graph) -> Result<NativeStep, Unsupported> {
        let mut bufs: Vec<Vec<f32>> = Vec::new();
        let mut buf_of: HashMap<NodeId, usize> = HashMap::new();
        let mut outfeeds = Vec::new();
        let mut variables = Vec::new();
        let mut infeeds = Vec::new();
        let mut macs = 0u64;
        // Forward convolutions' im2col matrices, by (input buffer, geometry), for the weight
        // gradients that read the same input.
        let mut cols_of: Vec<(usize, Conv, usize)> = Vec::new();
        let order = graph.program_order();
        let mut phases = Vec::new();
        // The last phase that reads each buffer.
        let mut last_read: HashMap<usize, usize> = HashMap::new();
        for (pi, phase) in [Phase::Step, Phase::Update].into_iter().enumerate() {
            let mut execs = Vec::new();
            let mut assigns = Vec::new();
            for &id in &order {
                let node = graph.node(id);
                if node.phase != phase {
                    continue;
                }
                let dims = node.ty.shape.dims().to_vec();
                let len = node.ty.shape.num_elements();
                let inputs: Vec<usize> = node.inputs.iter().map(|i| buf_of[i]).collect();
                let in_dims = |i: usize| graph.node(node.inputs[i]).ty.shape.dims().to_vec();
                for &b in &inputs {
                    last_read.insert(b, pi);
                }
                let fresh = |bufs: &mut Vec<Vec<f32>>, v: Vec<f32>| {
                    bufs.push(v);
                    bufs.len() - 1
                };
                let kernel = match &node.op {
                    Op::Input { stream, .. } => {
                        let b = fresh(&mut bufs, vec![0.0; len]);
                        buf_of.insert(id, b);
                        infeeds.push((stream.clone(), b));
                        continue;
                    }
                    Op::Variable { .. } | Op::Constant { .. } => {
                        // The simulator's initial values (`ipusim_sim::init`), in f32.
                        let t = match &node.op {
                            Op::Variable { init, .. } => init::variable_tensor(init, &node.ty),
                            Op::Constant { value, .. } => init::constant_tensor(value, &node.ty),
                            _ => unreachable!("a variable or constant"),
                        };
                        let t = t.map_err(|e| Unsupported(format!("{}: {e}", node.name)))?;
                        let v = t.to_f64_vec().into_iter().map(|x| x as f32).collect();
                        let b = fresh(&mut bufs, v);
                        buf_of.insert(id, b);
                        if matches!(node.op, Op::Variable { .. }) {
                            variables.push((node.name.clone(), b));
                        }
                        continue;
                    }
                    Op::Reshape { .. } | Op::Flatten { .. } | Op::Cast { .. } => {
                        buf_of.insert(id, inputs[0]);
                        continue;
                    }
                    Op::Outfeed { stream } => {
                        buf_of.insert(id, inputs[0]);
                        outfeeds.push((stream.clone(), inputs[0]));
                        continue;
                    }
                    Op::Assign => {
                        assigns.push((inputs[0], inputs[1], true));
                        buf_of.insert(id, inputs[1]);
                        continue;
                    }
                    Op::ScaledAdd { scale } => Kernel::Binary(
                        Binary::ScaledAdd(*scale as f32),
                        Loop::new(&dims, &in_dims(0), &in_dims(1)),
                    ),
                    op if op.binary().is_some_and(|b| !b.is_comparison()) => Kernel::Binary(
                        Binary::Arith(op.binary().expect("a binary op")),
                        Loop::new(&dims, &in_dims(0), &in_dims(1)),
                    ),
                    op if op.unary().is_some() => Kernel::Unary(op.unary().expect("a unary op")),
                    Op::ActivationGrad {
                        activation: Activation::Relu,
                    } => Kernel::ReluGrad,
                    Op::ReduceSum { axes, .. }
                    | Op::ReduceMean { axes, .. }
                    | Op::ReduceMax { axes, .. } => {
                        let a = in_dims(0);
                        let kept: Vec<usize> = (0..a.len())
                            .map(|i| if axes.contains(&i) { 1 } else { a[i] })
                            .collect();
                        let count = axes.iter().map(|&i| a[i]).product();
                        let op = match node.op {
                            Op::ReduceSum { .. } => Reduce::Sum,
                            Op::ReduceMean { .. } => Reduce::Mean,
                            _ => Reduce::Max,
                        };
                        Kernel::Reduce(op, Loop::new(&a, &a, &kept), count)
                    }
                    Op::Broadcast { .. } => Kernel::Broadcast(Loop::new(&dims, &in_dims(0), &dims)),
                    Op::Transpose { perm } => Kernel::Transpose(in_dims(0), perm.clone()),
                    Op::MatMul => {
                        let (a, b) = (in_dims(0), in_dims(1));
                        if a.len() != 2 || b.len() != 2 {
                            return Err(Unsupported(format!(
                                "{}: a batched matmul {a:?} x {b:?}",
                                node.name
                            )));
                        }
                        macs += (a[0] * a[1] * b[1]) as u64;
                        Kernel::MatMul {
                            m: a[0],
                            k: a[1],
                            n: b[1],
                        }
                    }
                    Op::Softmax { axis } if *axis + 1 == dims.len() => Kernel::Softmax {
                        rows: len / dims[*axis],
                        cols: dims[*axis],
                    },
                    Op::SparseSoftmaxCrossEntropy { reduction } => {
                        let a = in_dims(0);
                        Kernel::CrossEntropy {
                            rows: a[0],
                            cols: a[1],
                            mean: *reduction == LossReduction::Mean,
                        }
                    }
                    Op::OneHot { depth, .. } => Kernel::OneHot { depth: *depth },
                    Op::Conv2d { .. } => {
                        let conv = Conv::new(&node.op, &in_dims(0), &in_dims(1))?;
                        macs += conv.0.macs();
                        let cols = (!conv.is_pointwise()).then(|| {
                            let (ck, p) = conv.matrix();
                            let b = fresh(&mut bufs, vec![0.0; conv.0.n * ck * p]);
                            cols_of.push((inputs[0], conv, b));
                            b
                        });
                        Kernel::Conv { conv, cols }
                    }
                    Op::Conv2dInputGrad { input_size, .. } => {
                        let (dy, w) = (in_dims(0), in_dims(1));
                        let x = [dy[0], w[1], input_size[0], input_size[1]];
                        let conv = Conv::new(&node.op, &x, &w)?;
                        macs += conv.0.macs();
                        let (ck, p) = conv.matrix();
                        let scratch = fresh(&mut bufs, vec![0.0; ck * p]);
                        Kernel::ConvInputGrad { conv, scratch }
                    }
                    Op::Conv2dWeightGrad { kernel_size, .. } => {
                        let (x, dy) = (in_dims(0), in_dims(1));
                        let w = [dy[1], x[1], kernel_size[0], kernel_size[1]];
                        let conv = Conv::new(&node.op, &x, &w)?;
                        macs += conv.0.macs();
                        let shared = cols_of
                            .iter()
                            .find(|(input, c, _)| *input == inputs[0] && *c == conv)
                            .map(|&(_, _, b)| b);
                        let cols = match shared {
                            Some(b) => Some(b),
                            None if conv.is_pointwise() => None,
                            None => {
                                let (ck, p) = conv.matrix();
                                Some(fresh(&mut bufs, vec![0.0; conv.0.n * ck * p]))
                            }
                        };
                        let own = shared.is_none() && cols.is_some();
                        Kernel::ConvWeightGrad { conv, cols, own }
                    }
                    Op::MaxPool2d { .. } | Op::MaxPool2dGrad { .. } => {
                        let x = in_dims(0);
                        let g = conv::Pool::of(&node.op)
                            .expect("a pooling op")
                            .and_then(|pool| pool.geometry(&x).map(|g| (pool, g)))
                            .map_err(|e| Unsupported(format!("{}: {e:?}", node.name)))?;
                        let (window, g) = g;
                        let pool = Pool {
                            x: [g.n, g.c, g.h, g.w],
                            kernel: window.kernel,
                            stride: window.stride,
                            padding: window.padding,
                            out: [g.oh, g.ow],
                        };
                        if matches!(node.op, Op::MaxPool2d { .. }) {
                            Kernel::MaxPool(pool)
                        } else {
                            Kernel::MaxPoolGrad(pool)
                        }
                    }
                    op => {
                        return Err(Unsupported(format!(
                            "{}: {op:?} has no native kernel",
                            node.name
                        )))
                    }
                };
                let out = fresh(&mut bufs, vec![0.0; len]);
                buf_of.insert(id, out);
                let is_product = matches!(
                    kernel,
                    Kernel::Conv { .. }
                        | Kernel::ConvInputGrad { .. }
                        | Kernel::ConvWeightGrad { .. }
                        | Kernel::MatMul { .. }
                );
                execs.push(Exec {
                    kernel,
                    inputs,
                    out,
                    is_product,
                });
            }
            phases.push((execs, assigns));
        }
        // An assignment swaps buffers only when the value is computed every step and
        // nothing reads it after its phase.
        let computed: std::collections::HashSet<usize> = phases
            .iter()
            .flat_map(|(execs, _)| execs.iter().map(|e| e.out))
            .collect();
        for (pi, (_, assigns)) in phases.iter_mut().enumerate() {
            for a in assigns.iter_mut() {
                let read_later = last_read.get(&a.1).is_some_and(|&p| p > pi);
                a.2 = !read_later && computed.contains(&a.1);
            }
        }
        let initial = variables.iter().map(|&(_, b)| bufs[b].clone()).collect();
        Ok(NativeStep {
            initial,
            bufs,
            phases,
            outfeeds,
            variables,
            infeeds,
            macs,
        })
    }

    /// Multiply-accumulates of the step's convolutions and matmuls.
    pub fn macs(&self) -> u64 {
        self.macs
    }

    /// Fills infeed `stream` (row-major values; labels as class indices).
    pub fn set_infeed(&mut self, stream: &str, values: &[f32]) {
        let b = self
            .infeeds
            .iter()
            .find(|(s, _)| s == stream)
            .unwrap_or_else(|| panic!("no infeed '{stream}'"))
            .1;
        self.bufs[b].copy_from_slice(values);
    }

    /// Fills every infeed with deterministic values: `labels`-like streams (named with
    /// "label") with class indices below `classes`, the others in [-1, 1).
    pub fn synthetic_infeeds(&mut self, classes: usize) {
        for (stream, b) in self.infeeds.clone() {
            let v = &mut self.bufs[b];
            for (i, x) in v.iter_mut().enumerate() {
                *x = if stream.contains("label") {
                    (i * 7 % classes) as f32
                } else {
                    ((i * 7919 + 13) % 997) as f32 / 498.5 - 1.0
                };
            }
        }
    }

    /// The value of outfeed `stream` after the last step.
    pub fn outfeed(&self, stream: &str) -> Option<&[f32]> {
        let b = self.outfeeds.iter().find(|(s, _)| s == stream)?.1;
        Some(&self.bufs[b])
    }

    /// The value of variable `name`.
    pub fn variable(&self, name: &str) -> Option<&[f32]> {
        let b = self.variables.iter().find(|(s, _)| s == name)?.1;
        Some(&self.bufs[b])
    }

    /// Restores every variable's initial value, so that the next step is a first step
    /// again. (Steps on one synthetic batch drive the loss to 0 within a few steps and the
    /// gradients into f32 subnormals, which x86 cores compute tens of times slower.)
    pub fn reset(&mut self) {
        for (&(_, b), v) in self.variables.iter().zip(&self.initial) {
            self.bufs[b].copy_from_slice(v);
        }
    }

    /// One step; returns the host seconds spent in convolutions and matmuls.
    pub fn step(&mut self) -> f64 {
        let mut product_secs = 0.0;
        for p in 0..self.phases.len() {
            for e in 0..self.phases[p].0.len() {
                let is_product = self.phases[p].0[e].is_product;
                let t = is_product.then(std::time::Instant::now);
                let exec = &self.phases[p].0[e];
                let mut out = std::mem::take(&mut self.bufs[exec.out]);
                run(exec, &mut self.bufs, &mut out);
                self.bufs[exec.out] = out;
                if let Some(t) = t {
                    product_secs += t.elapsed().as_secs_f64();
                }
            }
            for a in 0..self.phases[p].1.len() {
                let (var, value, swap) = self.phases[p].1[a];
                if swap {
                    self.bufs.swap(var, value);
                } else {
                    let v = std::mem::take(&mut self.bufs[value]);
                    self.bufs[var].copy_from_slice(&v);
                    self.bufs[value] = v;
                }
            }
        }
        product_secs
    }
}

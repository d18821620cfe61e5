//! The training transform: a forward program and its [`TrainingSpec`] become ONE
//! training-step graph, and [`prepare`] is the single entry point the CLI and the runtime use
//! to get the graph they compile or run.
//!
//! # The training-step graph
//!
//! 1. **Precision policy** ([`crate::precision::apply`]) on the forward graph.
//! 2. **Backward pass** ([`crate::autodiff::gradients_with`], with the gradient rules of the
//!    composites that have their own, [`crate::decompose::decompose_with_rules`]) of the
//!    loss w.r.t. every trainable variable the loss depends on ([`trainable_variables`]),
//!    seeded with the constant `bwd/loss_scaling` = the static loss-scaling factor in the
//!    loss dtype. Seeding with the factor is multiplying the loss by it (seed 000,
//!    "Underflowing gradients and loss scaling") without changing the loss the outfeeds
//!    report. Backward tensors have their forward tensors' dtypes, so 16.16 and 16.32
//!    gradients are scaled FP16 values during backprop; in 16.32 the gradient of a master
//!    weight becomes FP32 at the cast.
//! 3. **Gradient accumulation** over `N = gradient_accumulation` micro-batches. With `N > 1`
//!    every trained variable `w` gets an accumulator Variable `<w>/grad_accum` (Zeros, dtype
//!    `accumulation_dtype`, default the weight dtype); the Step phase adds the micro-batch
//!    gradient (`bwd/<w>/grad_accum/add`, cast to the accumulator dtype first if needed) and
//!    assigns it (`bwd/<w>/grad_accum/assign`); the Update phase reads the accumulator, uses
//!    the **mean** over the micro-batches (PopTorch's default reduction,
//!    `ReductionType.Mean`; the division is folded into the unscale) and resets it to zero
//!    (`update/<w>/grad_accum_reset`). With `N = 1` there are no accumulators and the Update
//!    phase reads the Step-phase gradients directly.
//! 4. **Unscale** (`update/<w>/unscale`): the gradient is divided by `N × loss_scaling` (one
//!    rounding; exact for powers of two) in the wider of the gradient's and the weight's
//!    dtype — FP32 when the weights are FP32, so a 16.32 step unscales in FP32 (seed 000,
//!    "Numerical concerns with loss scaling") while a 16.16 step unscales in FP16 — then cast
//!    to the weight dtype.
//! 5. **Optimizer** in the weight dtype, in [`Phase::Update`]; see `training/optimizer.rs` for the
//!    update rules, state variables (`<w>/momentum`, `<w>/adam_m`, `<w>/adam_v`, and Adam's
//!    shared `adam/beta1_power`, `adam/beta2_power`) and node names. Each new value is
//!    written by an `Assign` named `update/<w>/assign` (`…/<state>_assign` for state).
//!
//! Step-phase nodes run once per micro-batch, Update-phase nodes once per weight update, and
//! an `Assign` takes effect at the end of its phase.

mod optimizer;

use crate::autodiff;
use crate::builder::GraphBuilder;
use crate::decompose::{decompose, decompose_with_rules, Statistics};
use crate::dtype::DType;
use crate::error::IrError;
use crate::graph::{Graph, NodeId, Phase};
use crate::op::{Init, Op};
use crate::precision;
use crate::program::{Precision, Program, TrainingSpec};
use crate::rewrite::Rewrite;
use std::collections::HashSet;

/// Largest finite FP16 value (IEEE 754 binary16).
const F16_MAX: f64 = 65504.0;

/// The graph to compile or run for one step of a program, with what the host loop needs.
#[derive(Clone, Debug, PartialEq)]
pub struct StepGraph {
    /// The step graph: Step-phase nodes run every micro-batch, Update-phase nodes once per
    /// `gradient_accumulation` micro-batches.
    pub graph: Graph,
    /// Micro-batches per weight update (1 for inference and forward-only programs).
    pub gradient_accumulation: u32,
    /// Loop iterations per device run (the program's `device_iterations`).
    pub device_iterations: u32,
    /// The precision policy applied, if any.
    pub precision: Option<Precision>,
    /// The program's `available_memory_proportion`.
    pub available_memory_proportion: Option<f64>,
    /// The program's per-op memory proportions, by node name.
    pub memory_proportions: std::collections::BTreeMap<String, f64>,
    /// The program's `offload_optimizer_state`.
    pub offload_optimizer_state: bool,
    /// The optimizer-state variables sharded over the replicas (replicated tensor sharding,
    /// [`crate::sharding`]; set by the compiler's `build::step_graph`), with their whole
    /// shapes.
    pub sharded: Vec<ShardedVariable>,
    /// Where each node runs (one IPU unless the program or the build options place stages;
    /// set by the compiler's `build::step_graph`).
    pub placement: crate::pipeline::Placement,
}

/// An optimizer-state variable sharded over the replicas (`crate::sharding`): its name and
/// its whole shape (each replica holds a `[ceil(n / R)]` shard of it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardedVariable {
    /// The variable's name.
    pub name: String,
    /// The whole tensor's shape.
    pub shape: crate::dtype::Shape,
}

/// The step graph of `program`:
/// - with a training spec and `!inference`: the training step ([`training_step`]), with the
///   spec's precision replaced by `precision_override` when given;
/// - otherwise the forward graph, with the precision policy applied when one is given by
///   `precision_override` or else by the program's training spec (none: the graph as
///   written). `inference` also drops every `Assign` (readers of an `Assign` read its value),
///   so nothing is updated; outfeeds are kept.
pub fn prepare(
    program: &Program,
    precision_override: Option<Precision>,
    inference: bool,
) -> Result<StepGraph, IrError> {
    prepare_with(program, precision_override, None, inference)
}

/// [`prepare`], with the training spec's gradient accumulation replaced by
/// `accumulation_override` when given (`--gradient-accumulation`; no effect without training).
pub fn prepare_with(
    program: &Program,
    precision_override: Option<Precision>,
    accumulation_override: Option<u32>,
    inference: bool,
) -> Result<StepGraph, IrError> {
    let device_iterations = program.device_iterations;
    if let (Some(spec), false) = (&program.training, inference) {
        let mut spec = spec.clone();
        if let Some(p) = precision_override {
            spec.precision = p;
        }
        if let Some(n) = accumulation_override {
            spec.gradient_accumulation = n;
        }
        return Ok(StepGraph {
            graph: training_step(program, &spec)?,
            gradient_accumulation: spec.gradient_accumulation,
            device_iterations,
            precision: Some(spec.precision),
            available_memory_proportion: program.available_memory_proportion,
            memory_proportions: program.memory_proportions.clone(),
            offload_optimizer_state: program.offload_optimizer_state,
            sharded: Vec::new(),
            placement: Default::default(),
        });
    }
    let precision = precision_override.or(program.training.as_ref().map(|t| t.precision));
    // An inference run or a forward program normalises with the running statistics.
    let graph = match precision {
        Some(p) => precision::apply(&program.graph, p)?,
        None => program.graph.clone(),
    };
    let mut graph = decompose(&graph, Statistics::Running)?;
    if inference {
        graph = without_assigns(&graph)?;
    }
    Ok(StepGraph {
        graph,
        gradient_accumulation: 1,
        device_iterations,
        precision,
        available_memory_proportion: program.available_memory_proportion,
        memory_proportions: program.memory_proportions.clone(),
        offload_optimizer_state: program.offload_optimizer_state,
        sharded: Vec::new(),
        placement: Default::default(),
    })
}

/// The trainable variables of a graph, in id order: floating-point `Variable`s that no
/// `Assign` of the graph writes (an assigned variable is state, such as a running statistic).
pub fn trainable_variables(graph: &Graph) -> Vec<NodeId> {
    let assigned: HashSet<NodeId> = graph
        .nodes()
        .filter(|(_, n)| matches!(n.op, Op::Assign))
        .filter_map(|(_, n)| n.inputs.first().copied())
        .collect();
    graph
        .nodes()
        .filter(|(id, n)| {
            matches!(n.op, Op::Variable { .. }) && n.ty.dtype.is_float() && !assigned.contains(id)
        })
        .map(|(id, _)| id)
        .collect()
}

/// One training-step graph for `program` under `spec` (see the module docs).
pub fn training_step(program: &Program, spec: &TrainingSpec) -> Result<Graph, IrError> {
    check_spec(spec)?;
    let (forward, rules) = decompose_with_rules(
        &precision::apply(&program.graph, spec.precision)?,
        Statistics::Batch {
            stable: spec.stable_norm,
        },
    )?;
    let loss = forward.find(&spec.loss).ok_or_else(|| {
        IrError::Program(format!(
            "training spec: loss node '{}' is not in the graph",
            spec.loss
        ))
    })?;
    let loss_ty = forward.node(loss).ty.clone();
    if !loss_ty.dtype.is_float() || loss_ty.shape.rank() != 0 {
        return Err(IrError::Program(format!(
            "training spec: loss '{}' has type {loss_ty}, expected a floating-point scalar",
            spec.loss
        )));
    }
    check_fits(spec.loss_scaling, loss_ty.dtype, "loss_scaling")?;
    let vars = trainable_variables(&forward);
    let mut b = GraphBuilder::from_graph(forward);
    let seed = b.scalar("bwd/loss_scaling", loss_ty.dtype, spec.loss_scaling)?;
    let grads = autodiff::gradients_with(&mut b, loss, seed, &vars, &rules)?;
    if grads.iter().all(Option::is_none) {
        return Err(IrError::Program(format!(
            "training spec: loss '{}' depends on no trainable variable",
            spec.loss
        )));
    }

    let n = spec.gradient_accumulation;
    let mut opt = optimizer::Updater::new(&mut b, &spec.optimizer)?;
    for (&var, grad) in vars.iter().zip(grads) {
        let Some(grad) = grad else { continue };
        let v = b.graph().node(var).clone();
        let weight_dtype = v.ty.dtype;
        let source = if n > 1 {
            let dtype = spec
                .accumulation_dtype
                .or(spec.optimizer.accum_type())
                .unwrap_or(weight_dtype);
            accumulate(&mut b, var, &v.name, grad, dtype)?
        } else {
            grad
        };
        b.set_phase(Phase::Update);
        b.push_scope("update");
        b.push_scope(v.name.clone());
        let result = unscale(
            &mut b,
            source,
            weight_dtype,
            f64::from(n) * spec.loss_scaling,
        )
        .and_then(|g| opt.update(&mut b, var, &v.name, g))
        .and_then(|()| {
            if n > 1 {
                let dtype = b.graph().node(source).ty.dtype;
                let zero = b.splat("grad_accum_zero", dtype, v.ty.shape.clone(), 0.0)?;
                b.op("grad_accum_reset", Op::Assign, &[source, zero])?;
            }
            Ok(())
        });
        b.pop_scope();
        b.pop_scope();
        b.set_phase(Phase::Step);
        result?;
    }
    opt.finish(&mut b)?;
    Ok(b.finish())
}

fn check_spec(spec: &TrainingSpec) -> Result<(), IrError> {
    let bad = |what: String| Err(IrError::Program(format!("training spec: {what}")));
    if !(spec.loss_scaling.is_finite() && spec.loss_scaling > 0.0) {
        return bad(format!(
            "loss_scaling must be a positive finite number, got {}",
            spec.loss_scaling
        ));
    }
    if spec.gradient_accumulation == 0 {
        return bad("gradient_accumulation must be at least 1, got 0".into());
    }
    if let Some(d) = spec.accumulation_dtype.or(spec.optimizer.accum_type()) {
        if !d.is_float() {
            return bad(format!("accumulation_dtype must be f16 or f32, got {d}"));
        }
    }
    optimizer::check(&spec.optimizer).or_else(bad)
}

/// Fails when `value` overflows `dtype` (only FP16 can overflow for sane values).
fn check_fits(value: f64, dtype: DType, what: &str) -> Result<(), IrError> {
    if dtype == DType::F16 && value.abs() > F16_MAX {
        return Err(IrError::Program(format!(
            "training spec: {what} = {value} overflows f16 (largest finite value {F16_MAX})"
        )));
    }
    Ok(())
}

/// Adds the Step-phase accumulation of `grad` into a new `<var>/grad_accum` Variable of
/// `dtype`; returns the accumulator.
fn accumulate(
    b: &mut GraphBuilder,
    var: NodeId,
    var_name: &str,
    grad: NodeId,
    dtype: DType,
) -> Result<NodeId, IrError> {
    let shape = b.graph().node(var).ty.shape.clone();
    let acc = b.named(
        &format!("{var_name}/grad_accum"),
        Op::Variable {
            dtype,
            shape,
            init: Init::Zeros,
        },
        &[],
    )?;
    b.push_scope("bwd");
    b.push_scope(format!("{var_name}/grad_accum"));
    let result = (|| {
        let g = cast_if(b, grad, dtype, "cast")?;
        let sum = b.op("add", Op::Add, &[acc, g])?;
        b.op("assign", Op::Assign, &[acc, sum])
    })();
    b.pop_scope();
    b.pop_scope();
    result.map(|_| acc)
}

/// `x` cast to `dtype` (no node when it already has it).
fn cast_if(b: &mut GraphBuilder, x: NodeId, dtype: DType, base: &str) -> Result<NodeId, IrError> {
    if b.graph().node(x).ty.dtype == dtype {
        return Ok(x);
    }
    b.op(base, Op::Cast { dtype }, &[x])
}

/// `g / divisor` computed in the wider of `g`'s dtype and `weight_dtype`, then cast to
/// `weight_dtype`.
fn unscale(
    b: &mut GraphBuilder,
    g: NodeId,
    weight_dtype: DType,
    divisor: f64,
) -> Result<NodeId, IrError> {
    let from = b.graph().node(g).ty.dtype;
    let wide = if from == DType::F32 || weight_dtype == DType::F32 {
        DType::F32
    } else {
        DType::F16
    };
    let g = cast_if(b, g, wide, "grad_cast")?;
    let g = if divisor == 1.0 {
        g
    } else {
        check_fits(divisor, wide, "gradient_accumulation x loss_scaling")?;
        let d = b.scalar("unscale_divisor", wide, divisor)?;
        b.op("unscale", Op::Div, &[g, d])?
    };
    cast_if(b, g, weight_dtype, "grad_weight_dtype")
}

/// The graph without its `Assign` nodes; a reader of an `Assign` reads the assigned value.
fn without_assigns(graph: &Graph) -> Result<Graph, IrError> {
    let mut rw = Rewrite::new(graph);
    for old in rw.order()? {
        let n = graph.node(old);
        if matches!(n.op, Op::Assign) {
            let value = rw.use_of(n.inputs[1])?;
            rw.set(old, value);
            continue;
        }
        let inputs = n
            .inputs
            .iter()
            .map(|&i| rw.use_of(i))
            .collect::<Result<Vec<_>, _>>()?;
        let id = rw
            .dst
            .add_node_in(n.phase, n.name.clone(), n.op.clone(), &inputs)?;
        rw.set(old, id);
    }
    Ok(rw.dst)
}

#[cfg(test)]
mod tests;

//! From a program to its executable: the one pipeline every front end shares (`ipusim
//! compile`, `ipusim run`, `ipusim step`, the runtime's sessions, the simulator's launcher),
//! so a program compiles the same way, with the same loops and the same error words,
//! whichever way it is run.
//!
//! Two stages, each usable alone (`ipusim compile --dump ir` prints the first one's graph
//! before the second runs; a session connects its streams between them):
//! 1. [`step_graph`]: `ipusim_ir::training::prepare` — the training step, or the forward
//!    graph (inference, or a program without a training spec), with the precision override;
//! 2. [`compile_step`]: [`crate::compile`] with the step's loops (gradient accumulation,
//!    device iterations, each at least 1; the device iterations can be overridden) and the
//!    partials type.
//!
//! [`build`] runs both. Errors say which stage failed; the caller names the file or program.

use crate::compile_placed;
use crate::error::CompileError;
use crate::executable::Executable;
use crate::options::{CompileOptions, PartialsType};
use crate::report::CompileReport;
use crate::target::Target;
use ipusim_ir::batch::with_batch;
use ipusim_ir::eight_bit::eight_bit_io;
use ipusim_ir::pipeline::{place, Origin, PipelineSpec, PlacementError, Schedule};
use ipusim_ir::recompute;
use ipusim_ir::sharding::shard_optimizer_state;
use ipusim_ir::training::{prepare_with, StepGraph};
use ipusim_ir::{IrError, Precision, Program};
use thiserror::Error;

/// How to build a program.
#[derive(Clone, Debug, PartialEq)]
pub struct BuildOptions {
    /// The chip.
    pub target: Target,
    /// Replaces the program's precision policy.
    pub precision: Option<Precision>,
    /// Matmul and reduction partials type.
    pub partials: PartialsType,
    /// The forward graph only: no training step, no variable updates.
    pub inference: bool,
    /// Replaces the program's `device_iterations` (loop iterations per run).
    pub device_iterations: Option<u32>,
    /// Replaces the program's `available_memory_proportion` (its per-op entries stay).
    pub available_memory_proportion: Option<f64>,
    /// Replaces the training spec's `gradient_accumulation` (micro-batches per update).
    pub gradient_accumulation: Option<u32>,
    /// Replaces the program's pipeline split points (`--pipeline-splits`); stage `i` then runs
    /// on IPU `i` unless the program's `pipeline.ipus` has one entry per new stage.
    pub pipeline_splits: Option<Vec<String>>,
    /// Replaces the program's pipeline schedule (`--pipeline-schedule`).
    pub pipeline_schedule: Option<Schedule>,
    /// IPUs in the system (`--ipus`); default: as many as the stages' IPUs need.
    pub ipus: Option<u32>,
    /// Recompute forward activations in the backward pass (`--recompute`), besides the
    /// program's `recompute`.
    pub recompute: bool,
    /// Samples per micro-batch (`--batch`): every infeed's leading dimension
    /// (`ipusim_ir::batch`).
    pub batch: Option<u32>,
    /// Optimizer state in streaming memory (`--offload-optimizer-state`), besides the
    /// program's `offload_optimizer_state`.
    pub offload_optimizer_state: bool,
    /// Fuse chains of element-wise ops (`CompileOptions::elementwise_fusion`; on unless
    /// `--no-elementwise-fusion`).
    pub elementwise_fusion: bool,
    /// Each weight update right after its gradient where it can be
    /// (`--early-weight-update`, `CompileOptions::early_weight_update`).
    pub early_weight_update: bool,
    /// Replicas (`--replicas`), replacing the program's `replication_factor`.
    pub replicas: Option<u32>,
    /// Shard the optimizer state over the replicas (`--replicated-optimizer-state-sharding`,
    /// `ipusim_ir::sharding`), besides the program's `replicated_optimizer_state_sharding`.
    pub replicated_optimizer_state_sharding: bool,
    /// Image infeeds cross the host link as u8 and are cast and normalised on the device
    /// (`--eight-bit-io`, `ipusim_ir::eight_bit`).
    pub eight_bit_io: bool,
    /// Batch norm's batch statistics in two passes (`--stable-norm`, PopTorch's
    /// `enableStableNorm(True)`), besides the training spec's `stable_norm`.
    pub stable_norm: bool,
}

impl Default for BuildOptions {
    fn default() -> BuildOptions {
        BuildOptions {
            target: Target::mk2(),
            precision: None,
            partials: PartialsType::default(),
            inference: false,
            device_iterations: None,
            available_memory_proportion: None,
            gradient_accumulation: None,
            pipeline_splits: None,
            pipeline_schedule: None,
            offload_optimizer_state: false,
            elementwise_fusion: true,
            early_weight_update: false,
            ipus: None,
            recompute: false,
            eight_bit_io: false,
            stable_norm: false,
            replicas: None,
            replicated_optimizer_state_sharding: false,
            batch: None,
        }
    }
}

/// Why a program could not be built; the caller prefixes the file or program
/// (`FILE: error: cannot compile for target 'mk2': ...`).
#[derive(Clone, Debug, PartialEq, Error)]
pub enum BuildError {
    /// The step graph could not be built (the training transform or the precision policy).
    #[error("cannot build the step graph: {0}")]
    Step(IrError),
    /// The stages could not be placed on IPUs.
    #[error("cannot place the pipeline: {0}")]
    Placement(PlacementError),
    /// The compiler failed.
    #[error("cannot compile for target '{target}': {source}")]
    Compile {
        /// The target's name.
        target: String,
        /// Why.
        source: CompileError,
    },
}

impl BuildError {
    /// Whether the compiler found the program cannot fit in tile memory
    /// ([`CompileError::is_out_of_memory`]).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, BuildError::Compile { source, .. } if source.is_out_of_memory())
    }
}

/// A built program.
#[derive(Clone, Debug)]
pub struct Built {
    /// The step graph that was compiled.
    pub step: StepGraph,
    /// The executable.
    pub executable: Executable,
}

/// The program as the device sees it: with `--batch N`, every infeed's leading dimension
/// `N` (`ipusim_ir::batch`); with `--eight-bit-io`, its image infeeds read as u8 and
/// normalised on the device, and their synthetic sources giving bytes
/// (`ipusim_ir::eight_bit`); else the program itself. A front end that feeds the program's
/// streams feeds this program's, and builds it with [`BuildOptions::of_source`].
pub fn source_program<'p>(
    program: &'p Program,
    options: &BuildOptions,
) -> Result<std::borrow::Cow<'p, Program>, BuildError> {
    use std::borrow::Cow;
    let mut p = Cow::Borrowed(program);
    if let Some(n) = options.batch {
        p = Cow::Owned(with_batch(&p, n as usize).map_err(BuildError::Step)?);
    }
    if options.eight_bit_io {
        p = Cow::Owned(eight_bit_io(&p).map_err(BuildError::Step)?);
    }
    if options.stable_norm && p.training.as_ref().is_some_and(|t| !t.stable_norm) {
        let mut q = p.into_owned();
        if let Some(t) = q.training.as_mut() {
            t.stable_norm = true;
        }
        p = Cow::Owned(q);
    }
    Ok(p)
}

impl BuildOptions {
    /// These options without the ones [`source_program`] has applied (to build its result).
    pub fn of_source(&self) -> BuildOptions {
        BuildOptions {
            batch: None,
            eight_bit_io: false,
            stable_norm: false,
            ..self.clone()
        }
    }
}

/// Stage 1: the step graph of `program`, with its placement over IPUs.
pub fn step_graph(program: &Program, options: &BuildOptions) -> Result<StepGraph, BuildError> {
    if options.gradient_accumulation == Some(0) {
        return Err(BuildError::Step(IrError::Program(
            "--gradient-accumulation 0: at least 1 micro-batch per weight update".into(),
        )));
    }
    let program = &*source_program(program, options)?;
    let mut step = prepare_with(
        program,
        options.precision,
        options.gradient_accumulation,
        options.inference,
    )
    .map_err(BuildError::Step)?;
    let (spec, origin) = pipeline_spec(program, options);
    step.placement = place(&step.graph, &program.graph, &spec, options.ipus, origin)
        .map_err(BuildError::Placement)?;
    if (program.recompute || options.recompute) && is_training(program, options) {
        let keep =
            recompute::checkpoints(&step.graph, &step.placement, &program.recompute_checkpoints)
                .map_err(|name| {
                    BuildError::Step(IrError::Program(format!(
                        "recompute_checkpoints: no node is named '{name}'"
                    )))
                })?;
        step.graph = recompute::recompute(&step.graph, &keep, &step.placement)
            .map_err(BuildError::Step)?
            .0;
        step.placement = place(&step.graph, &program.graph, &spec, options.ipus, origin)
            .map_err(BuildError::Placement)?;
    }
    let replicas = options.replicas.unwrap_or(program.replication_factor);
    let total = step.placement.ipus.checked_mul(replicas);
    if replicas == 0 || total.is_none_or(|n| n > ipusim_ir::pipeline::MAX_IPUS) {
        return Err(BuildError::Placement(PlacementError::BadReplicas {
            replicas,
            ipus: step.placement.ipus,
            max: ipusim_ir::pipeline::MAX_IPUS,
        }));
    }
    step.placement.replicas = replicas;
    let sharding =
        options.replicated_optimizer_state_sharding || program.replicated_optimizer_state_sharding;
    if sharding && replicas > 1 && is_training(program, options) {
        let (graph, sharded) =
            shard_optimizer_state(&step.graph, replicas).map_err(BuildError::Step)?;
        if !sharded.is_empty() {
            step.graph = graph;
            step.sharded = sharded;
            step.placement = place(&step.graph, &program.graph, &spec, options.ipus, origin)
                .map_err(BuildError::Placement)?;
            step.placement.replicas = replicas;
        }
    }
    let option = if options.gradient_accumulation.is_some() {
        "--gradient-accumulation"
    } else {
        "training.gradient_accumulation"
    };
    check_schedule(&step, spec.schedule, is_training(program, options), option)
        .map_err(BuildError::Placement)?;
    Ok(step)
}

/// The pipeline to place: the program's, with `--pipeline-splits` replacing its split points
/// (its stage IPUs still apply when they fit the new stages) and `--pipeline-schedule` its
/// schedule, and where it came from.
fn pipeline_spec(program: &Program, options: &BuildOptions) -> (PipelineSpec, Origin) {
    let mut written = program.pipeline.clone().unwrap_or_default();
    if let Some(s) = options.pipeline_schedule {
        written.schedule = s;
    }
    match &options.pipeline_splits {
        Some(splits) => {
            let ipus = if written.ipus.len() == splits.len() + 1 {
                written.ipus
            } else {
                Vec::new()
            };
            let spec = PipelineSpec {
                splits: splits.clone(),
                schedule: written.schedule,
                ipus,
            };
            (spec, Origin::CommandLine)
        }
        None => (written, Origin::Program),
    }
}

/// An overlapping schedule (`Grouped`, `Interleaved`: `lower::pipeline`) needs a pipeline
/// deep enough for its stages.
fn check_schedule(
    step: &StepGraph,
    schedule: Schedule,
    training: bool,
    option: &'static str,
) -> Result<(), PlacementError> {
    let stages = step.placement.stages();
    if stages <= 1 || schedule == Schedule::Sequential {
        return Ok(());
    }
    if step.placement.shares_an_ipu() {
        return Err(PlacementError::SharedIpu {
            ipus: step.placement.stage_ipus.clone(),
            schedule,
            stages,
        });
    }
    // PopTorch: with pipelining, gradient accumulation "must be >= number of pipeline
    // stages (forward and backward)" (reference/user-features.md §2.1). S stages make
    // 2 S - 1 such stages in training (our reading: the last stage's forward and backward
    // passes run back to back, as PopART counts them); S in inference.
    let needed = if training { 2 * stages - 1 } else { stages };
    if step.gradient_accumulation < needed {
        return Err(PlacementError::TooShallow {
            option,
            depth: step.gradient_accumulation,
            schedule,
            stages,
            needed,
        });
    }
    Ok(())
}

/// True when the step graph is a training step (a training spec, not `--inference`).
fn is_training(program: &Program, options: &BuildOptions) -> bool {
    program.training.is_some() && !options.inference
}

/// The compile options of a step graph: its loops (or `options.device_iterations`), each at
/// least 1, and the partials type.
pub fn compile_options(step: &StepGraph, options: &BuildOptions) -> CompileOptions {
    CompileOptions {
        partials_type: options.partials,
        gradient_accumulation: step.gradient_accumulation.max(1),
        device_iterations: options
            .device_iterations
            .unwrap_or(step.device_iterations)
            .max(1),
        available_memory_proportion: options
            .available_memory_proportion
            .or(step.available_memory_proportion)
            .unwrap_or(CompileOptions::default().available_memory_proportion),
        memory_proportions: step.memory_proportions.clone(),
        offload_optimizer_state: options.offload_optimizer_state || step.offload_optimizer_state,
        elementwise_fusion: options.elementwise_fusion,
        early_weight_update: options.early_weight_update,
        ..CompileOptions::default()
    }
}

/// Stage 2: the executable of a step graph.
pub fn compile_step(step: &StepGraph, options: &BuildOptions) -> Result<Executable, BuildError> {
    compile_placed(
        &step.graph,
        &options.target,
        &compile_options(step, options),
        &step.placement,
    )
    .map_err(|source| BuildError::Compile {
        target: options.target.name.clone(),
        source,
    })
}

/// Both stages.
pub fn build(program: &Program, options: &BuildOptions) -> Result<Built, BuildError> {
    let step = step_graph(program, options)?;
    let executable = compile_step(&step, options)?;
    Ok(Built { step, executable })
}

/// The compile report of a step graph's executable, under the program's name, with the
/// precision policy the step graph applied (if any).
pub fn report(program: &str, step: &StepGraph, executable: &Executable) -> CompileReport {
    CompileReport::new(program, step.precision, executable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipusim_ir::models::{mlp, MlpSpec};
    use ipusim_ir::{Optimizer, TrainingSpec};

    fn trained(gradient_accumulation: u32, loss: &str) -> Program {
        let mut p = mlp(&MlpSpec::new(4, &[6, 5, 3])).unwrap();
        p.device_iterations = 3;
        p.training = Some(TrainingSpec {
            loss: loss.into(),
            optimizer: Optimizer::Sgd { learning_rate: 0.1 },
            loss_scaling: 1.0,
            precision: Precision::P16_32,
            gradient_accumulation,
            accumulation_dtype: None,
            stable_norm: false,
        });
        p
    }

    #[test]
    fn the_step_loops_and_the_overrides_reach_the_executable() {
        let p = trained(2, "loss");
        let built = build(&p, &BuildOptions::default()).unwrap();
        let o = &built.executable.options;
        assert_eq!((o.gradient_accumulation, o.device_iterations), (2, 3));
        assert_eq!(built.step.precision, Some(Precision::P16_32));
        let report = report(&p.name, &built.step, &built.executable);
        assert_eq!(report.precision, Some(Precision::P16_32));
        let options = BuildOptions {
            device_iterations: Some(5),
            precision: Some(Precision::P32_32),
            ..BuildOptions::default()
        };
        let built = build(&p, &options).unwrap();
        assert_eq!(built.executable.options.device_iterations, 5);
        assert_eq!(built.step.precision, Some(Precision::P32_32));
        // Inference: the forward graph, one micro-batch per iteration.
        let options = BuildOptions {
            inference: true,
            ..BuildOptions::default()
        };
        let built = build(&p, &options).unwrap();
        assert_eq!(built.executable.options.gradient_accumulation, 1);
        assert!(
            built.step.graph.len()
                < build(&p, &BuildOptions::default())
                    .unwrap()
                    .step
                    .graph
                    .len()
        );
    }

    #[test]
    fn errors_say_which_stage_failed() {
        let e = build(&trained(1, "no_such_node"), &BuildOptions::default()).unwrap_err();
        assert!(matches!(e, BuildError::Step(_)), "{e:?}");
        assert!(
            e.to_string().starts_with("cannot build the step graph: "),
            "{e}"
        );
    }
}

//! ipusim-compiler: lowers an IR graph (one training step) to an [`Executable`] for a
//! [`Target`] IPU: tensors mapped to tiles, vertices of registered codelets grouped in compute
//! sets, exchanges between supersteps, the program tree with the device-iteration and
//! gradient-accumulation loops, a memory plan, and a static cycle estimate. It knows nothing
//! of tensor values: the simulator executes the executable with exact values and charges
//! cycles with the same estimators ([`cycles`]).
//!
//! [`mod@build`] is the pipeline from a program to its executable that every front end shares.
//!
//! Passes: [`lower`] (tile mapping, planners, vertices, exchanges, program), the verifier,
//! [`memory`] (liveness and byte offsets), the verifier again, [`cycles`] (per compute set,
//! exchange, and the whole program).

pub mod build;
pub mod collectives_report;
pub mod conv_report;
pub mod dump;
pub mod lower;
pub mod memory;
pub mod pipeline_report;
pub mod program_tree;
pub mod report;
pub mod summary;
#[cfg(test)]
mod test_numbers;

// The executable contract, re-exported under the paths this crate has always had.
pub use ipusim_exe::{
    codelets, cycles, error, estimate, executable, options, target, timeline, vertex_state,
};

pub use build::{build, BuildError, BuildOptions, Built};
pub use codelets::{Codelet, VertexParams};
pub use cycles::CycleEstimate;
pub use error::CompileError;
pub use executable::Executable;
pub use ipusim_exe::memory::MemoryPlan;
pub use options::{CompileOptions, PartialsType};
pub use report::CompileReport;
pub use target::Target;

use executable::{InitialValue, SourceValue, TensorId, TensorKind, FORMAT_VERSION};
use ipusim_exe::system::System;
use ipusim_exe::verify;
use ipusim_ir::pipeline::Placement;
use ipusim_ir::{Graph, Op};
use rayon::prelude::*;

/// Compiles `graph` for one IPU of `target`. Out of memory is not an error: see
/// [`MemoryPlan::oom`].
pub fn compile(
    graph: &Graph,
    target: &Target,
    options: &CompileOptions,
) -> Result<Executable, CompileError> {
    compile_placed(graph, target, options, &Placement::single())
}

/// Compiles `graph` for a system of `placement.ipus` IPUs of `target`, each node on the IPU
/// of its stage; values crossing IPUs move by `IpuCopy` after an external sync.
pub fn compile_placed(
    graph: &Graph,
    target: &Target,
    options: &CompileOptions,
    placement: &Placement,
) -> Result<Executable, CompileError> {
    target.validate()?;
    options.validate()?;
    let system = System::replicated(target, placement.ipus, placement.replicas);
    system.validate()?;
    system.check_tiles(target)?;
    let low = lower::lower(graph, target, options, placement)?;
    let initial_values = initial_values(graph, &low.tensors);
    let mut exe = Executable {
        format_version: FORMAT_VERSION,
        target: target.clone(),
        system,
        options: options.clone(),
        tensors: low.tensors,
        values: low.values,
        compute_sets: low.compute_sets,
        exchanges: low.exchanges,
        streams: low.streams,
        initial_values,
        program: low.program,
        steps: low.steps,
        memory: MemoryPlan::default(),
        estimate: CycleEstimate::default(),
    };
    if options.verify {
        verify::lowered(&exe)?;
    }
    exe.memory = memory::plan(
        target,
        &exe.system,
        &mut exe.tensors,
        &low.usage,
        &exe.compute_sets,
        &exe.exchanges,
        &exe.steps,
    )?;
    memory::resolve_offsets(&exe.tensors, &mut exe.compute_sets, &mut exe.exchanges)?;
    // The compute sets' cycles were estimated as they were lowered (on the lowering's side
    // thread); each exchange's depend on it alone: estimated on the host's cores.
    let system = &exe.system;
    exe.exchanges.par_iter_mut().for_each(|ex| {
        ex.cycles = if ex.crosses_ipus() {
            cycles::ipu_copy_cycles(target, system, ex)
        } else {
            cycles::exchange_cycles(target, ex)
        };
    });
    if options.verify {
        verify::planned(&exe, &low.usage)?;
        // The mapping, operands and copies were checked after lowering, and the offset
        // resolution kept every operand and copy inside its slice.
        let errors = verify::executable_resolved(&exe);
        if !errors.is_empty() {
            return Err(CompileError::Invalid(errors));
        }
    }
    exe.estimate = cycles::estimate(&exe);
    Ok(exe)
}

/// The initialiser or literal of every Variable and Constant tensor, from its IR node.
fn initial_values(graph: &Graph, tensors: &[executable::Tensor]) -> Vec<InitialValue> {
    tensors
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let source = match (&t.kind, &graph.node(t.node?).op) {
                (TensorKind::Variable | TensorKind::RemoteVariable, Op::Variable { init, .. }) => {
                    SourceValue::Init(init.clone())
                }
                (TensorKind::Constant, Op::Constant { value, .. }) => {
                    SourceValue::Literal(value.clone())
                }
                _ => return None,
            };
            Some(InitialValue {
                tensor: TensorId(i as u32),
                source,
            })
        })
        .collect()
}

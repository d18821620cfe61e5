//! From a program file to a ready engine: load and validate the program, build its step
//! graph (the training transform, with a precision override), compile it for a target, and
//! build an [`Engine`] with a [`ProgramHost`] over the program's data sources. What
//! `ipusim step` and [`crate::trace::snapshot_trace`] share.

use crate::engine::{Engine, EngineError, EngineOptions};
use crate::feeds::ProgramHost;
use ipusim_compiler::{compile, CompileOptions, Executable, PartialsType, Target};
use ipusim_ir::text::load_program;
use ipusim_ir::training::prepare;
use ipusim_ir::{Graph, Precision, Program};
use std::path::Path;
use std::sync::Arc;
use thiserror::Error;

/// How to launch a program.
#[derive(Clone, Debug)]
pub struct LaunchOptions {
    /// The chip.
    pub target: Target,
    /// Precision policy override.
    pub precision: Option<Precision>,
    /// Matmul and reduction partials type.
    pub partials: PartialsType,
    /// Engine options.
    pub engine: EngineOptions,
}

/// A launched program.
#[derive(Debug)]
pub struct Launched {
    /// The program as loaded.
    pub program: Program,
    /// Its step graph (what was compiled).
    pub graph: Graph,
    /// The executable.
    pub executable: Arc<Executable>,
    /// The engine, before its first run.
    pub engine: Engine,
    /// The host side of its streams.
    pub host: ProgramHost,
}

/// Why a program could not be launched; every message names the file.
#[derive(Debug, Error)]
pub enum LaunchError {
    /// The program file could not be read or parsed (the message has file, line, column).
    #[error("{0}")]
    Load(String),
    /// The training transform failed.
    #[error("{file}: error: cannot build the training step: {message}")]
    Prepare {
        /// The file.
        file: String,
        /// Why.
        message: String,
    },
    /// The compiler failed.
    #[error("{file}: error: cannot compile for target '{target}': {message}")]
    Compile {
        /// The file.
        file: String,
        /// The target's name.
        target: String,
        /// Why.
        message: String,
    },
    /// The engine could not be built (out of memory, ...).
    #[error("{file}: error: {source}")]
    Build {
        /// The file.
        file: String,
        /// Why.
        source: EngineError,
    },
    /// The engine failed while running.
    #[error("{0}")]
    Engine(EngineError),
}

/// The compile options of a step graph: its accumulation and device-iteration loops, the
/// partials type.
pub fn compile_options(
    step: &ipusim_ir::training::StepGraph,
    partials: PartialsType,
) -> CompileOptions {
    CompileOptions {
        partials_type: partials,
        gradient_accumulation: step.gradient_accumulation.max(1),
        device_iterations: step.device_iterations.max(1),
        ..CompileOptions::default()
    }
}

/// Loads, compiles and builds the engine of the program at `path`.
pub fn launch(path: &Path, options: &LaunchOptions) -> Result<Launched, LaunchError> {
    let file = path.display().to_string();
    let program = load_program(path).map_err(|e| LaunchError::Load(e.to_string()))?;
    let step = prepare(&program, options.precision, false).map_err(|e| LaunchError::Prepare {
        file: file.clone(),
        message: e.to_string(),
    })?;
    let exe = compile(
        &step.graph,
        &options.target,
        &compile_options(&step, options.partials),
    )
    .map_err(|e| LaunchError::Compile {
        file: file.clone(),
        target: options.target.name.clone(),
        message: e.to_string(),
    })?;
    let executable = Arc::new(exe);
    let engine = Engine::new(Arc::clone(&executable), options.engine)
        .map_err(|source| LaunchError::Build { file, source })?;
    let host = ProgramHost::new(&program);
    Ok(Launched {
        program,
        graph: step.graph,
        executable,
        engine,
        host,
    })
}

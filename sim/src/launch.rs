//! From a program file to a ready engine, for the simulator on its own (trace snapshots,
//! the simulator's tests and benches): load and validate the program, build it with the
//! pipeline every front end shares ([`mod@ipusim_compiler::build`]), and load it into an
//! [`Engine`] with a [`ProgramHost`] over the program's data sources. The runtime's
//! `Session` is the same with real data files (`ipusim run`, `ipusim step`).

use crate::engine::{Engine, EngineError, EngineOptions};
use crate::feeds::ProgramHost;
use ipusim_compiler::build::{build, BuildError, BuildOptions};
use ipusim_compiler::{Executable, PartialsType, Target};
use ipusim_ir::text::load_program;
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
    /// The step graph could not be built or compiled.
    #[error("{file}: error: {source}")]
    Compile {
        /// The file.
        file: String,
        /// Why.
        source: Box<BuildError>,
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

/// Loads, compiles and builds the engine of the program at `path`.
pub fn launch(path: &Path, options: &LaunchOptions) -> Result<Launched, LaunchError> {
    let file = path.display().to_string();
    let program = load_program(path).map_err(|e| LaunchError::Load(e.to_string()))?;
    let build_options = BuildOptions {
        target: options.target.clone(),
        precision: options.precision,
        partials: options.partials,
        ..BuildOptions::default()
    };
    let built = build(&program, &build_options).map_err(|e| LaunchError::Compile {
        file: file.clone(),
        source: Box::new(e),
    })?;
    let executable = Arc::new(built.executable);
    let engine = Engine::new(Arc::clone(&executable), options.engine)
        .map_err(|source| LaunchError::Build { file, source })?;
    let host = ProgramHost::new(&program);
    Ok(Launched {
        program,
        graph: built.step.graph,
        executable,
        engine,
        host,
    })
}

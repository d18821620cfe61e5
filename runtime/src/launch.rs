//! From a program file to a ready engine with the program's own data sources, for the
//! simulator on its own (trace snapshots, the simulator's tests and benches): load and
//! validate the program, build it with the pipeline every front end shares
//! ([`mod@ipusim_compiler::build`]), and load it into an [`Engine`] with a [`ProgramHost`]
//! over the program's data sources. A [`crate::Session`] is the same with real data files
//! and outfeed collectors (`ipusim run`, `ipusim step`).
//!
//! # Snapshot-testing a program's trace
//!
//! ```no_run
//! use ipusim_runtime::launch::{snapshot_trace, SnapshotOptions};
//!
//! let mut options = SnapshotOptions::default(); // an Mk2 of 16 tiles
//! options.build.target.tiles = 8;
//! let summary = snapshot_trace("programs/feeds_repeat.ron", &options).unwrap();
//! // insta::assert_yaml_snapshot!(summary);
//! ```

use ipusim_compiler::build::{build, BuildError, BuildOptions};
use ipusim_compiler::{Executable, Target};
use ipusim_ir::text::load_program;
use ipusim_ir::text::ProgramError;
use ipusim_ir::{Graph, Program};
use ipusim_sim::engine::{Engine, EngineError, EngineOptions};
use ipusim_sim::feeds::ProgramHost;
use ipusim_sim::numerics::FpConfig;
use ipusim_sim::trace::{summary, TraceSummary};
use std::path::Path;
use std::sync::Arc;
use thiserror::Error;

/// How to launch a program: how it is built, and the engine's options.
#[derive(Clone, Debug, Default)]
pub struct LaunchOptions {
    /// Target, precision, partials, inference, device iterations.
    pub build: BuildOptions,
    /// Floating-point behaviour, seed, threads, trace recording.
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
    Load(ProgramError),
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
    let program = load_program(path).map_err(LaunchError::Load)?;
    let built = build(&program, &options.build).map_err(|e| LaunchError::Compile {
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

/// Options of [`snapshot_trace`].
#[derive(Clone, Debug)]
pub struct SnapshotOptions {
    /// How the program is built (default target: an Mk2 of 16 tiles, small enough to read).
    pub build: BuildOptions,
    /// Floating-point behaviour.
    pub fp: FpConfig,
    /// Program seed (stochastic rounding).
    pub seed: u64,
    /// Device runs to trace.
    pub runs: u32,
}

impl Default for SnapshotOptions {
    fn default() -> SnapshotOptions {
        let mut target = Target::mk2();
        target.name = "mk2-16".into();
        target.tiles = 16;
        SnapshotOptions {
            build: BuildOptions {
                target,
                ..BuildOptions::default()
            },
            fp: FpConfig::default(),
            seed: 0,
            runs: 1,
        }
    }
}

/// Loads the program at `path`, compiles it, runs it `runs` times with its own data
/// sources (see [`ipusim_sim::feeds`]) and returns the [`summary`] of its trace. A run that
/// stops on a floating-point exception ends the trace with the exception (not an error), so
/// traps can be snapshot too.
pub fn snapshot_trace(
    path: impl AsRef<Path>,
    options: &SnapshotOptions,
) -> Result<TraceSummary, LaunchError> {
    let mut launched = launch(
        path.as_ref(),
        &LaunchOptions {
            build: options.build.clone(),
            engine: EngineOptions {
                fp: options.fp,
                seed: options.seed,
                threads: None,
                record_trace: true,
            },
        },
    )?;
    for _ in 0..options.runs {
        match launched.engine.run(&mut launched.host) {
            Ok(_) => {}
            Err(EngineError::FpException(_)) => break,
            Err(e) => return Err(LaunchError::Engine(e)),
        }
    }
    Ok(summary(&launched.engine.take_trace()))
}

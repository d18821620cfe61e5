//! Errors of the runtime: each names what is at fault — the program file, the stream, the
//! data file and line, the checkpoint and variable, the node or tile.

use crate::checkpoint::CheckpointError;
use crate::feeds::FeedError;
use ipusim_compiler::build::BuildError;
use ipusim_sim::host::HostError;
use thiserror::Error;

impl RuntimeError {
    /// A build error of `program`, naming it.
    pub fn build(program: &ipusim_ir::Program, e: BuildError) -> RuntimeError {
        RuntimeError::Build {
            program: program.name.clone(),
            source: Box::new(e),
        }
    }
}

/// A fault of a session.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// The program cannot be loaded, turned into a step graph or compiled (the message
    /// names the file and line, or the program).
    #[error("{0}")]
    Program(String),
    /// The program's step graph could not be built or compiled.
    #[error("{program}: error: {source}")]
    Build {
        /// The program's name.
        program: String,
        /// Why.
        source: Box<BuildError>,
    },
    /// The program does not fit in tile memory; the report (of zero runs) says where.
    #[error(
        "{}: error: out of memory on {} of {} tiles (max tile {} bytes, capacity {} bytes)",
        .0.compile.program,
        .0.compile.memory.oom_tiles.len(),
        .0.compile.target.tiles,
        .0.compile.memory.max_tile_bytes,
        .0.compile.memory.bytes_per_tile_capacity
    )]
    OutOfMemory(Box<crate::report::RunReport>),
    /// The engine stopped: a trapped floating-point exception (the state dump), or a fault.
    #[error("{0}")]
    Engine(#[from] ipusim_sim::engine::EngineError),
    /// A stream is not connected, or an option names a stream that does not exist.
    #[error("error: {0}")]
    Stream(String),
    /// An infeed source fault.
    #[error(transparent)]
    Feed(#[from] FeedError),
    /// A fault on the host side of a stream copy during a run.
    #[error("error: {0}")]
    Host(#[from] HostError),
    /// A checkpoint fault.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// Options that do not fit the program (`--steps` not a multiple of the run length, ...).
    #[error("error: {0}")]
    Options(String),
    /// The reference interpreter stopped.
    #[error("error: {0}")]
    Reference(#[from] ipusim_sim::interp::InterpError),
}

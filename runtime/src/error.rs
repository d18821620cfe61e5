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

    /// Whether the program does not fit in tile memory: a memory plan that does not fit
    /// ([`RuntimeError::OutOfMemory`]), or a value the compiler found too large for an IPU
    /// before planning ([`BuildError::is_out_of_memory`]).
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            RuntimeError::OutOfMemory(_) => true,
            RuntimeError::Build { source, .. } => source.is_out_of_memory(),
            _ => false,
        }
    }
}

/// A fault of a session.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// The program file cannot be read, parsed or validated (the error names the file and
    /// line).
    #[error(transparent)]
    Program(#[from] ipusim_ir::text::ProgramError),
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
        .0.compile.system_tiles(),
        .0.compile.memory.max_tile_bytes,
        .0.compile.memory.bytes_per_tile_capacity
    )]
    OutOfMemory(Box<crate::report::RunReport>),
    /// The engine stopped: a trapped floating-point exception (the state dump), or a fault.
    #[error("{0}")]
    Engine(#[from] ipusim_sim::engine::EngineError),
    /// A stream is not connected, does not exist, or carries data of the wrong shape.
    #[error("error: {0}")]
    Stream(#[from] StreamError),
    /// An infeed source fault.
    #[error(transparent)]
    Feed(#[from] FeedError),
    /// A fault on the host side of a stream copy during a run.
    #[error("error: {0}")]
    Host(#[from] HostError),
    /// A checkpoint fault.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The replicas of a run left lockstep (a fault of the simulator, reported with the
    /// collective where it happened).
    #[error("error: replicas: {0}")]
    Replicas(String),
    /// Options that do not fit the program (a stream option naming no stream, ...).
    #[error("error: {0}")]
    Options(#[from] OptionsError),
    /// The reference interpreter stopped.
    #[error("error: {0}")]
    Reference(#[from] ipusim_sim::interp::InterpError),
}

/// A fault of a stream of a session.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum StreamError {
    /// A run needs an infeed that has no data source.
    #[error(
        "infeed {stream} has no data source: add an `infeeds` entry to the program, pass \
         --infeed {name}=FILE, or connect a feed to the session"
    )]
    Unconnected {
        /// The stream as printed (name, dtype and shape).
        stream: String,
        /// Its name.
        name: String,
    },
    /// A library call names a stream the program does not have.
    #[error("the program has no {kind} stream '{name}' (its {kind}s: {available})")]
    Unknown {
        /// "infeed" or "outfeed".
        kind: &'static str,
        /// The name asked for.
        name: String,
        /// The program's streams of that kind, comma-separated.
        available: String,
    },
    /// A micro-batch of an infeed that does not make a tensor of the stream's type.
    #[error("infeed {stream}: malformed micro-batch")]
    Malformed {
        /// The stream as printed (name, dtype and shape).
        stream: String,
    },
    /// A value of an outfeed that does not convert to the stream's dtype.
    #[error("outfeed '{name}': {source}")]
    Value {
        /// The stream.
        name: String,
        /// Why.
        source: crate::codec::ValueError,
    },
}

/// Options of a session that do not fit its program.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum OptionsError {
    /// The stepping debugger steps one replica.
    #[error(
        "--replicas {replicas}: `ipusim step` steps one replica; `ipusim run` runs all {replicas} \
         (and `ipusim compile` reports what they cost)"
    )]
    Replicas {
        /// The replicas asked for.
        replicas: u32,
    },
    /// Replicas share a pass over the data: each takes every R-th micro-batch.
    #[error(
        "--replicas {replicas}: the {micro_batches} micro-batches of infeed '{stream}' do not \
         divide among {replicas} replicas (each takes every {replicas}th micro-batch of one \
         pass over the data)"
    )]
    ReplicasData {
        /// The replicas.
        replicas: u32,
        /// The stream that paces the pass.
        stream: String,
        /// Its micro-batches.
        micro_batches: u64,
    },
    /// A per-stream option names a stream the program does not have.
    #[error(
        "{flag} {name}=...: the program has no {kind} stream '{name}' (its {kind}s: {available})"
    )]
    UnknownStream {
        /// The option, as the CLI spells it (`--infeed`, `--outfeed-mode`).
        flag: &'static str,
        /// "infeed" or "outfeed".
        kind: &'static str,
        /// The name given.
        name: String,
        /// The program's streams of that kind, comma-separated.
        available: String,
    },
}

//! How a session runs a program: how it is built (the compiler's [`BuildOptions`], nested:
//! target, precision, partials, training or inference, run length), the floating-point
//! configuration and seed, host threads, and how its streams are connected.

use crate::connect::StreamOptions;
use crate::feeds::EndOfData;
use ipusim_compiler::BuildOptions;
use ipusim_sim::numerics::FpConfig;

/// Options of a [`crate::Session`] (and of a [`crate::ReferenceSession`], which ignores the
/// target, partials, threads and trace).
#[derive(Clone, Debug, Default)]
pub struct SessionOptions {
    /// How the program is built: target, precision override, partials, inference (the
    /// forward graph only; infeeds then read their files once, [`EndOfData::Stop`]), device
    /// iterations override.
    pub build: BuildOptions,
    /// Floating-point behaviour (exceptions, stochastic rounding, NaN on overflow).
    pub fp: FpConfig,
    /// Seed of stochastic rounding.
    pub seed: u64,
    /// Host threads of the engine (`None`: all cores). Results never depend on it.
    pub threads: Option<usize>,
    /// How streams are connected.
    pub streams: StreamOptions,
    /// Record the engine's trace events.
    pub record_trace: bool,
}

impl SessionOptions {
    /// Options for inference (`inference`, files read once).
    pub fn inference(mut self) -> SessionOptions {
        self.build.inference = true;
        self.streams.end_of_data = EndOfData::Stop;
        self
    }
}

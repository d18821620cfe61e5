//! How a session runs a program: the target and compile options, the precision policy,
//! training or inference, the floating-point configuration and seed, the run length, and
//! how its streams are connected.

use crate::connect::StreamOptions;
use crate::feeds::EndOfData;
use ipusim_compiler::{BuildOptions, PartialsType, Target};
use ipusim_ir::Precision;
use ipusim_sim::numerics::FpConfig;

/// Options of a [`crate::Session`] (and of a [`crate::ReferenceSession`], which ignores the
/// target, partials, threads and trace).
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// The chip.
    pub target: Target,
    /// Matmul and reduction partials type.
    pub partials: PartialsType,
    /// Replaces the program's precision policy.
    pub precision: Option<Precision>,
    /// Run the forward graph only: no training step, no variable updates. Infeeds read their
    /// files once ([`EndOfData::Stop`]).
    pub inference: bool,
    /// Floating-point behaviour (exceptions, stochastic rounding, NaN on overflow).
    pub fp: FpConfig,
    /// Seed of stochastic rounding.
    pub seed: u64,
    /// Host threads of the engine (`None`: all cores). Results never depend on it.
    pub threads: Option<usize>,
    /// Replaces the program's `device_iterations` (loop iterations per run).
    pub device_iterations: Option<u32>,
    /// How streams are connected.
    pub streams: StreamOptions,
    /// Record the engine's trace events.
    pub record_trace: bool,
}

impl Default for SessionOptions {
    fn default() -> SessionOptions {
        SessionOptions {
            target: Target::mk2(),
            partials: PartialsType::default(),
            precision: None,
            inference: false,
            fp: FpConfig::default(),
            seed: 0,
            threads: None,
            device_iterations: None,
            streams: StreamOptions::default(),
            record_trace: false,
        }
    }
}

impl SessionOptions {
    /// How the program is built: target, precision, partials, inference, device iterations.
    pub fn build_options(&self) -> BuildOptions {
        BuildOptions {
            target: self.target.clone(),
            precision: self.precision,
            partials: self.partials,
            inference: self.inference,
            device_iterations: self.device_iterations,
        }
    }

    /// Options for inference (`inference`, files read once).
    pub fn inference(mut self) -> SessionOptions {
        self.inference = true;
        self.streams.end_of_data = EndOfData::Stop;
        self
    }
}

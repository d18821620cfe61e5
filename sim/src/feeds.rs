//! Generated infeed data, and a host for programs the simulator runs on its own.
//!
//! - [`Generator`]: the values of a program's generator data sources (`Constant`,
//!   `Uniform`, `Sequence`). It is the one implementation of them: the runtime's generator
//!   feeds (`ipusim run`, `ipusim step`) wrap it, and so does [`ProgramHost`], so every host
//!   draws the same numbers.
//! - [`ProgramHost`]: the host of trace snapshots ([`crate::trace::snapshot_trace`]), the
//!   simulator's tests and benches, which run without the runtime's data loaders and must
//!   stay deterministic without data files: each infeed from its generator, or from
//!   synthetic data where the program's source is a CSV file (read only by the runtime) or
//!   missing; every outfeed entry kept.
//!
//! | source | element `k` of the stream (counting over successive micro-batches) |
//! |---|---|
//! | `Constant(v)` | `v` |
//! | `Uniform { low, high, seed }` | `low + (high − low)·u`, `u = (next_u64 >> 11)·2^-53` uniform in `[0, 1)` from the PCG32 stream `SrRng::new(seed, INIT_TILE, FEED_WORKER)` (as `init`'s uniform, which draws on worker 0, so a feed and a variable with the same seed differ); `floor` of it for integer and Bool streams (`Uniform(low: 0, high: 2)` gives fair Bools) |
//! | `Sequence { start, step }` | `start + step·k` |
//!
//! Generated values are exact `f64`s; each host converts them once to the stream's dtype
//! (floats rounded to nearest even; a value that does not fit is an error naming the stream,
//! never a silent saturation).
//!
//! [`ProgramHost`]'s synthetic data of micro-batch `b`, element `i`: floats uniform in
//! `[-1, 1)` from the stream `SrRng::new(h, INIT_TILE, 2)` with `h` the FNV-1a hash of the
//! stream name; `I32` `(b + i) mod 10` (valid class labels for up to 10 classes); `U8`
//! `(3b + 7i) mod 17` (the 0–16 pixels of the digits data); `Bool` `(b + i) mod 2`.

use crate::host::{HostError, HostIo};
use crate::init::{self, unit, INIT_TILE};
use crate::numerics::SrRng;
use crate::tensor::Tensor;
use ipusim_exe::executable::HostStream;
use ipusim_ir::{DType, DataSource, Program, TensorType};
use std::collections::BTreeMap;
use thiserror::Error;

/// The worker index of the generators' random streams on the initialisers' tile.
pub const FEED_WORKER: u32 = 1;

/// The worker index of [`ProgramHost`]'s synthetic data streams.
const SYNTHETIC_WORKER: u32 = 2;

/// The values of a generator data source, continuing across micro-batches.
#[derive(Clone, Debug)]
pub enum Generator {
    /// Every element one value.
    Constant(f64),
    /// Seeded uniform values in `[low, high)`.
    Uniform {
        /// Lower bound (inclusive).
        low: f64,
        /// Upper bound (exclusive).
        high: f64,
        /// The seed.
        seed: u64,
        /// The stream drawn from.
        rng: SrRng,
    },
    /// `start + step·k` for the `k`-th element.
    Sequence {
        /// The first value.
        start: f64,
        /// The increment.
        step: f64,
        /// The index of the next element.
        next: u64,
    },
}

/// Parameters of a generator that cannot give values.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum GeneratorError {
    /// A uniform source whose range is empty or not finite.
    #[error("a uniform source needs finite low < high, got [{low}, {high})")]
    UniformRange {
        /// The lower bound.
        low: f64,
        /// The upper bound.
        high: f64,
    },
}

impl Generator {
    /// The generator of a data source; `None` for a CSV file.
    pub fn of(source: &DataSource) -> Option<Generator> {
        Some(match *source {
            DataSource::Constant(v) => Generator::Constant(v),
            DataSource::Uniform { low, high, seed } => Generator::Uniform {
                low,
                high,
                seed,
                rng: SrRng::new(seed, INIT_TILE, FEED_WORKER),
            },
            DataSource::Sequence { start, step } => Generator::Sequence {
                start,
                step,
                next: 0,
            },
            DataSource::Csv { .. } => return None,
        })
    }

    /// Checks the parameters: a uniform source needs finite `low < high`.
    pub fn check(&self) -> Result<(), GeneratorError> {
        match *self {
            Generator::Uniform { low, high, .. }
                if !(low.is_finite() && high.is_finite() && low < high) =>
            {
                Err(GeneratorError::UniformRange { low, high })
            }
            _ => Ok(()),
        }
    }

    /// Appends the next `n` values for a stream of `dtype` to `out`.
    pub fn next_values(&mut self, dtype: DType, n: usize, out: &mut Vec<f64>) {
        match self {
            Generator::Constant(v) => out.resize(out.len() + n, *v),
            Generator::Uniform { low, high, rng, .. } => out.extend((0..n).map(|_| {
                let v = *low + (*high - *low) * unit(rng);
                if dtype.is_float() {
                    v
                } else {
                    v.floor()
                }
            })),
            Generator::Sequence { start, step, next } => {
                out.extend((*next..*next + n as u64).map(|k| *start + k as f64 * *step));
                *next += n as u64;
            }
        }
    }

    /// What it generates, in words (`uniform [-1, 1) seed 5`).
    pub fn describe(&self) -> String {
        match self {
            Generator::Constant(v) => format!("constant {v}"),
            Generator::Uniform {
                low, high, seed, ..
            } => format!("uniform [{low}, {high}) seed {seed}"),
            Generator::Sequence { start, step, .. } => format!("sequence from {start} by {step}"),
        }
    }
}

/// Synthetic data of one stream (the module docs give the values): the data of
/// [`ProgramHost`] where a program has no generator, and of `ipusim run --synthetic-data`.
#[derive(Clone, Debug)]
pub struct Synthetic {
    rng: SrRng,
}

impl Synthetic {
    /// The synthetic data of the stream named `stream`.
    pub fn new(stream: &str) -> Synthetic {
        let h = stream.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        Synthetic {
            rng: SrRng::new(h, INIT_TILE, SYNTHETIC_WORKER),
        }
    }

    /// Appends the `n` values of micro-batch `batch` for a stream of `dtype` to `out`.
    pub fn next_values(&mut self, dtype: DType, n: usize, batch: u64, out: &mut Vec<f64>) {
        let rng = &mut self.rng;
        out.extend((0..n as u64).map(|i| match dtype {
            DType::F16 | DType::F32 => 2.0 * unit(rng) - 1.0,
            DType::I32 => ((batch + i) % 10) as f64,
            DType::U8 => ((3 * batch + 7 * i) % 17) as f64,
            DType::Bool => ((batch + i) % 2) as f64,
        }))
    }
}

/// Where one infeed's values come from.
#[derive(Clone, Debug)]
enum Source {
    Generated(Generator),
    Synthetic {
        data: Synthetic,
        reason: &'static str,
    },
}

impl Source {
    fn synthetic(stream: &str, reason: &'static str) -> Source {
        Source::Synthetic {
            data: Synthetic::new(stream),
            reason,
        }
    }
}

const NO_SOURCE: &str = "synthetic (no source in the program)";

/// Infeeds from a program's generators (or synthetic data), outfeeds collected.
#[derive(Clone, Debug, Default)]
pub struct ProgramHost {
    sources: BTreeMap<String, Source>,
    batches: BTreeMap<String, u64>,
    /// Every outfeed entry received, per stream, in order.
    pub outfeeds: BTreeMap<String, Vec<Tensor>>,
}

impl ProgramHost {
    /// The host of `program`'s infeed sources.
    pub fn new(program: &Program) -> ProgramHost {
        let sources = program
            .infeeds
            .iter()
            .map(|spec| {
                let source = match Generator::of(&spec.source) {
                    Some(g) => Source::Generated(g),
                    None => Source::synthetic(
                        &spec.stream,
                        "synthetic (the CSV source is read by the runtime)",
                    ),
                };
                (spec.stream.clone(), source)
            })
            .collect();
        ProgramHost {
            sources,
            ..ProgramHost::default()
        }
    }

    /// What feeds `stream`, in words.
    pub fn describe(&self, stream: &str) -> String {
        match self.sources.get(stream) {
            Some(Source::Generated(g)) => g.describe(),
            Some(Source::Synthetic { reason, .. }) => reason.to_string(),
            None => NO_SOURCE.to_string(),
        }
    }

    /// The next micro-batch of `stream` as a tensor.
    pub fn next_batch(&mut self, stream: &HostStream) -> Result<Tensor, HostError> {
        let n = stream.shape.num_elements();
        let b = self.batches.entry(stream.name.clone()).or_default();
        let batch = *b;
        *b += 1;
        let source = self
            .sources
            .entry(stream.name.clone())
            .or_insert_with(|| Source::synthetic(&stream.name, NO_SOURCE));
        let error = |message: String| HostError::Stream {
            stream: stream.name.clone(),
            message: format!("micro-batch {batch}: {message}"),
        };
        let mut values = Vec::with_capacity(n);
        match source {
            Source::Generated(g) => {
                g.check().map_err(|e| error(e.to_string()))?;
                g.next_values(stream.dtype, n, &mut values);
            }
            Source::Synthetic { data, .. } => data.next_values(stream.dtype, n, batch, &mut values),
        }
        let ty = TensorType::new(stream.dtype, stream.shape.clone());
        init::tensor_from_f64(&ty, &values).map_err(|e| error(e.to_string()))
    }
}

impl HostIo for ProgramHost {
    fn infeed(&mut self, stream: &HostStream, dst: &mut [u8]) -> Result<(), HostError> {
        let bytes = self.next_batch(stream)?.to_bytes();
        if bytes.len() != dst.len() {
            return Err(HostError::Stream {
                stream: stream.name.clone(),
                message: format!(
                    "a micro-batch has {} bytes, the stream needs {}",
                    bytes.len(),
                    dst.len()
                ),
            });
        }
        dst.copy_from_slice(&bytes);
        Ok(())
    }

    fn outfeed(&mut self, stream: &HostStream, src: &[u8]) -> Result<(), HostError> {
        let t = Tensor::from_bytes(stream.dtype, stream.shape.clone(), src).map_err(|e| {
            HostError::Stream {
                stream: stream.name.clone(),
                message: e.to_string(),
            }
        })?;
        self.outfeeds
            .entry(stream.name.clone())
            .or_default()
            .push(t);
        Ok(())
    }
}

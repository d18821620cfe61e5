//! Host data for programs run by the simulator on its own (`ipusim step`, trace snapshots,
//! tests), without the runtime's data loaders: [`ProgramHost`] feeds each infeed from the
//! program's data source when the simulator can produce it itself, else from deterministic
//! synthetic data, and keeps every outfeed entry.
//!
//! | source | data |
//! |---|---|
//! | `Constant(v)` | every element `v` |
//! | `Uniform { low, high, seed }` | `low + (high − low)·u`, `u` uniform in `[0, 1)` from the PCG32 stream `SrRng::new(seed, INIT_TILE, 1)` (53 random bits per value, as `init`'s uniform), continuing across micro-batches |
//! | `Sequence { start, step }` | `start + step·k` for the `k`-th element over successive micro-batches |
//! | `Csv`, or no source | synthetic (CSV files are read by the runtime, `ipusim run`) |
//!
//! Synthetic data of micro-batch `b`, element `i`: floats uniform in `[-1, 1)` from the
//! stream `SrRng::new(h, INIT_TILE, 2)` with `h` the FNV-1a hash of the stream name; `I32`
//! `(b + i) mod 10` (valid class labels for up to 10 classes); `U8` `(3b + 7i) mod 17` (the
//! 0–16 pixels of the digits data); `Bool` `(b + i) mod 2`.
//!
//! Values are converted to the stream's dtype as constants are: floats rounded once to
//! nearest even (a value beyond the dtype's range is an error naming the stream), integers
//! rounded down and saturated, Bool `v ≠ 0`.

use crate::host::{HostError, HostIo};
use crate::init::{self, unit, INIT_TILE};
use crate::numerics::SrRng;
use crate::tensor::Tensor;
use ipusim_compiler::executable::HostStream;
use ipusim_ir::{DType, DataSource, Program, TensorType};
use std::collections::BTreeMap;

/// Where one infeed's values come from.
#[derive(Clone, Debug)]
enum Source {
    Constant(f64),
    Uniform { low: f64, high: f64, rng: SrRng },
    Sequence { start: f64, step: f64, next: u64 },
    Synthetic { rng: SrRng, reason: &'static str },
}

/// Infeeds from a program's data sources (or synthetic data), outfeeds collected.
#[derive(Clone, Debug, Default)]
pub struct ProgramHost {
    sources: BTreeMap<String, Source>,
    batches: BTreeMap<String, u64>,
    /// Every outfeed entry received, per stream, in order.
    pub outfeeds: BTreeMap<String, Vec<Tensor>>,
}

/// FNV-1a of a name (the seed of a stream's synthetic data).
fn fnv1a(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl ProgramHost {
    /// The host of `program`'s infeed sources.
    pub fn new(program: &Program) -> ProgramHost {
        let mut sources = BTreeMap::new();
        for spec in &program.infeeds {
            let source = match &spec.source {
                DataSource::Constant(v) => Source::Constant(*v),
                DataSource::Uniform { low, high, seed } => Source::Uniform {
                    low: *low,
                    high: *high,
                    rng: SrRng::new(*seed, INIT_TILE, 1),
                },
                DataSource::Sequence { start, step } => Source::Sequence {
                    start: *start,
                    step: *step,
                    next: 0,
                },
                DataSource::Csv { .. } => Source::Synthetic {
                    rng: SrRng::new(fnv1a(&spec.stream), INIT_TILE, 2),
                    reason: "synthetic (the CSV source is read by `ipusim run`)",
                },
            };
            sources.insert(spec.stream.clone(), source);
        }
        ProgramHost {
            sources,
            ..ProgramHost::default()
        }
    }

    /// What feeds `stream`, in words.
    pub fn describe(&self, stream: &str) -> String {
        match self.sources.get(stream) {
            Some(Source::Constant(v)) => format!("constant {v}"),
            Some(Source::Uniform { low, high, .. }) => format!("uniform in [{low}, {high})"),
            Some(Source::Sequence { start, step, .. }) => {
                format!("sequence from {start} by {step}")
            }
            Some(Source::Synthetic { reason, .. }) => reason.to_string(),
            None => "synthetic (no source in the program)".to_string(),
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
            .or_insert_with(|| Source::Synthetic {
                rng: SrRng::new(fnv1a(&stream.name), INIT_TILE, 2),
                reason: "synthetic (no source in the program)",
            });
        let values: Vec<f64> = match source {
            Source::Constant(v) => vec![*v; n],
            Source::Uniform { low, high, rng } => {
                (0..n).map(|_| *low + (*high - *low) * unit(rng)).collect()
            }
            Source::Sequence { start, step, next } => (0..n)
                .map(|_| {
                    let v = *start + *step * *next as f64;
                    *next += 1;
                    v
                })
                .collect(),
            Source::Synthetic { rng, .. } => (0..n as u64)
                .map(|i| match stream.dtype {
                    DType::F16 | DType::F32 => 2.0 * unit(rng) - 1.0,
                    DType::I32 => ((batch + i) % 10) as f64,
                    DType::U8 => ((3 * batch + 7 * i) % 17) as f64,
                    DType::Bool => ((batch + i) % 2) as f64,
                })
                .collect(),
        };
        let values: Vec<f64> = match stream.dtype {
            DType::I32 => values
                .into_iter()
                .map(|v| v.floor().clamp(f64::from(i32::MIN), f64::from(i32::MAX)))
                .collect(),
            DType::U8 => values
                .into_iter()
                .map(|v| v.floor().clamp(0.0, 255.0))
                .collect(),
            DType::Bool => values
                .into_iter()
                .map(|v| f64::from(u8::from(v != 0.0)))
                .collect(),
            _ => values,
        };
        let ty = TensorType::new(stream.dtype, stream.shape.clone());
        init::tensor_from_f64(&ty, &values).map_err(|e| HostError::Stream {
            stream: stream.name.clone(),
            message: format!("micro-batch {batch}: {e}"),
        })
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

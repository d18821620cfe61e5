//! Synthetic infeeds: a constant, seeded uniform values, an arithmetic sequence. None of them
//! ends.
//!
//! Values are computed in `f64` and converted once to the stream's dtype ([`push_f64`]):
//! floats round to nearest even; integer and Bool streams take `floor(v)` of uniform draws
//! (`Uniform(low: 0, high: 2)` gives fair Bools, `Uniform(low: 0, high: 256)` any `u8`) and
//! the exact values of constants and sequences, which must then fit (`u8` `0..=255`, Bool
//! `0`/`1`): a sequence that leaves the range is an error at the micro-batch where it does.
//!
//! Uniform draws come from the numerics core's PCG32 stream `SrRng::new(seed, INIT_TILE, 1)`
//! (53 random bits per value, `u = (next_u64 >> 11) · 2^-53`, `v = low + (high − low) · u`,
//! continuing across micro-batches): the construction of the random initialisers on worker 1
//! of their tile (the initialisers use worker 0, so a feed and a variable with the same seed
//! do not draw the same numbers), and the same stream the simulator's own program host
//! (`ipusim step`) draws from, so both see the same data.

use super::{check_len, value_error, Feed, FeedError};
use crate::codec::push_f64;
use crate::stream::StreamType;
use ipusim_sim::init::INIT_TILE;
use ipusim_sim::numerics::SrRng;
use rand_core::RngCore;

/// The worker index of infeed generators' random streams on the initialisers' tile.
pub const FEED_WORKER: u32 = 1;

/// Every element equal to one value.
#[derive(Clone, Debug)]
pub struct ConstantFeed {
    value: f64,
    batch: Vec<u8>,
    delivered: u64,
}

impl ConstantFeed {
    /// The constant `value` for `stream` (an error if it does not fit the dtype).
    pub fn new(value: f64, stream: &StreamType) -> Result<ConstantFeed, FeedError> {
        let mut one = Vec::new();
        push_f64(stream.dtype, value, &mut one).map_err(|e| value_error(stream, 0, e))?;
        Ok(ConstantFeed {
            value,
            batch: one.repeat(stream.elements()),
            delivered: 0,
        })
    }
}

impl Feed for ConstantFeed {
    fn fill(&mut self, stream: &StreamType, dst: &mut [u8]) -> Result<(), FeedError> {
        check_len(stream, self.delivered, dst)?;
        if self.batch.len() != dst.len() {
            // Bound to another stream type: rebuild for this one.
            *self = ConstantFeed::new(self.value, stream)?;
        }
        dst.copy_from_slice(&self.batch);
        self.delivered += 1;
        Ok(())
    }

    fn remaining(&self, _: &StreamType) -> Option<u64> {
        None
    }

    fn describe(&self) -> String {
        format!("constant {}", self.value)
    }
}

/// Seeded uniform values in `[low, high)`.
#[derive(Clone, Debug)]
pub struct UniformFeed {
    low: f64,
    high: f64,
    seed: u64,
    rng: SrRng,
    delivered: u64,
    scratch: Vec<u8>,
}

impl UniformFeed {
    /// Uniform values in `[low, high)` from `seed` (`low < high`, both finite).
    pub fn new(
        low: f64,
        high: f64,
        seed: u64,
        stream: &StreamType,
    ) -> Result<UniformFeed, FeedError> {
        if !(low.is_finite() && high.is_finite() && low < high) {
            return Err(FeedError::Value {
                stream: stream.name.clone(),
                micro_batch: 0,
                message: format!("a uniform source needs finite low < high, got [{low}, {high})"),
            });
        }
        Ok(UniformFeed {
            low,
            high,
            seed,
            rng: SrRng::new(seed, INIT_TILE, FEED_WORKER),
            delivered: 0,
            scratch: Vec::new(),
        })
    }
}

impl Feed for UniformFeed {
    fn fill(&mut self, stream: &StreamType, dst: &mut [u8]) -> Result<(), FeedError> {
        check_len(stream, self.delivered, dst)?;
        self.scratch.clear();
        for _ in 0..stream.elements() {
            let u = (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
            let mut v = self.low + (self.high - self.low) * u;
            if !stream.dtype.is_float() {
                v = v.floor();
            }
            push_f64(stream.dtype, v, &mut self.scratch)
                .map_err(|e| value_error(stream, self.delivered, e))?;
        }
        dst.copy_from_slice(&self.scratch);
        self.delivered += 1;
        Ok(())
    }

    fn remaining(&self, _: &StreamType) -> Option<u64> {
        None
    }

    fn describe(&self) -> String {
        format!("uniform [{}, {}) seed {}", self.low, self.high, self.seed)
    }
}

/// `start, start + step, start + 2·step, ...` over the elements of successive micro-batches
/// (element `k` is `start + k·step`, computed in `f64`).
#[derive(Clone, Debug)]
pub struct SequenceFeed {
    start: f64,
    step: f64,
    next: u64,
    delivered: u64,
    scratch: Vec<u8>,
}

impl SequenceFeed {
    /// The sequence from `start` by `step`.
    pub fn new(start: f64, step: f64) -> SequenceFeed {
        SequenceFeed {
            start,
            step,
            next: 0,
            delivered: 0,
            scratch: Vec::new(),
        }
    }
}

impl Feed for SequenceFeed {
    fn fill(&mut self, stream: &StreamType, dst: &mut [u8]) -> Result<(), FeedError> {
        check_len(stream, self.delivered, dst)?;
        self.scratch.clear();
        for k in self.next..self.next + stream.elements() as u64 {
            let v = self.start + k as f64 * self.step;
            push_f64(stream.dtype, v, &mut self.scratch)
                .map_err(|e| value_error(stream, self.delivered, e))?;
        }
        dst.copy_from_slice(&self.scratch);
        self.next += stream.elements() as u64;
        self.delivered += 1;
        Ok(())
    }

    fn remaining(&self, _: &StreamType) -> Option<u64> {
        None
    }

    fn describe(&self) -> String {
        format!("sequence from {} by {}", self.start, self.step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipusim_ir::DType;

    fn values(feed: &mut dyn Feed, s: &StreamType) -> Vec<f64> {
        let mut buf = vec![0u8; s.bytes()];
        feed.fill(s, &mut buf).unwrap();
        ipusim_sim::tensor::Tensor::from_bytes(s.dtype, s.shape.clone(), &buf)
            .unwrap()
            .to_f64_vec()
    }

    #[test]
    fn constant_and_sequence() {
        let s = StreamType::new("x", DType::F16, [3]);
        let mut c = ConstantFeed::new(0.1, &s).unwrap();
        let v = values(&mut c, &s);
        assert_eq!(v, vec![f64::from(half::f16::from_f32(0.1).to_f32()); 3]);
        let u8s = StreamType::new("u", DType::U8, [2]);
        assert!(ConstantFeed::new(300.0, &u8s).is_err());
        let mut q = SequenceFeed::new(250.0, 2.0);
        assert_eq!(values(&mut q, &u8s), vec![250.0, 252.0]);
        let mut buf = vec![0u8; 2];
        let e = q.fill(&u8s, &mut buf).unwrap_err();
        assert_eq!(
            e.to_string(),
            "infeed 'u', micro-batch 1: value 256 does not fit u8 (integers 0..=255) (the stream is u8[2])"
        );
    }

    #[test]
    fn uniform_is_seeded_and_in_range() {
        let s = StreamType::new("x", DType::F32, [1000]);
        let a = values(&mut UniformFeed::new(-1.0, 1.0, 7, &s).unwrap(), &s);
        let b = values(&mut UniformFeed::new(-1.0, 1.0, 7, &s).unwrap(), &s);
        assert_eq!(a, b);
        assert!(a.iter().all(|v| (-1.0..=1.0).contains(v)));
        let mean = a.iter().sum::<f64>() / a.len() as f64;
        // Uniform on [-1, 1): sd 1/sqrt(3); the mean of 1000 draws within 5 sd of 0.
        assert!(mean.abs() < 5.0 / 3f64.sqrt() / 1000f64.sqrt(), "{mean}");
        let bools = StreamType::new("b", DType::Bool, [1000]);
        let v = values(&mut UniformFeed::new(0.0, 2.0, 1, &bools).unwrap(), &bools);
        let ones = v.iter().filter(|&&x| x == 1.0).count() as f64;
        // Binomial(1000, 1/2): sd 15.8.
        assert!((ones - 500.0).abs() < 5.0 * 15.82, "{ones}");
        assert!(UniformFeed::new(1.0, 1.0, 0, &s).is_err());
    }

    #[test]
    fn uniform_draws_what_the_simulators_program_host_draws() {
        use ipusim_compiler::executable::{HostStream, StreamDirection, TensorId};
        use ipusim_ir::{DataSource, InfeedSpec, NodeId, Program};
        let s = StreamType::new("x", DType::F32, [64]);
        let mut program = Program::new("p", ipusim_ir::Graph::default());
        program.infeeds.push(InfeedSpec {
            stream: "x".into(),
            source: DataSource::Uniform {
                low: -2.0,
                high: 3.0,
                seed: 11,
            },
        });
        let mut sim = ipusim_sim::feeds::ProgramHost::new(&program);
        let hs = HostStream {
            name: "x".into(),
            direction: StreamDirection::HostToDevice,
            dtype: DType::F32,
            shape: s.shape.clone(),
            bytes_per_micro_batch: s.bytes() as u64,
            node: NodeId(0),
            tensor: TensorId(0),
        };
        let mut ours = UniformFeed::new(-2.0, 3.0, 11, &s).unwrap();
        for _ in 0..2 {
            let theirs = sim.next_batch(&hs).unwrap().to_f64_vec();
            assert_eq!(values(&mut ours, &s), theirs);
        }
    }
}

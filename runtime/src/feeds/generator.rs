//! Generator infeeds: a program's `Constant`, `Uniform` and `Sequence` sources, which never
//! end. The values are the simulator's [`Generator`]'s (one implementation for every host:
//! `ipusim run`, `ipusim step` and the simulator's own [`ipusim_sim::feeds::ProgramHost`]
//! draw the same numbers); this feed converts each once to the stream's dtype
//! ([`push_f64`]): floats round to nearest even; integer and Bool streams take the exact
//! values of constants and sequences, which must then fit (`u8` `0..=255`, Bool `0`/`1`):
//! a constant that does not fit is an error when the feed is opened, a sequence that
//! leaves the range an error at the micro-batch where it does.

use super::{check_len, value_error, Feed, FeedError};
use crate::codec::push_f64;
use crate::stream::StreamType;
use ipusim_ir::DataSource;
use ipusim_sim::feeds::{Generator, Synthetic};

/// Micro-batches of a generator's values.
#[derive(Clone, Debug)]
pub struct GeneratorFeed {
    generator: Generator,
    delivered: u64,
    values: Vec<f64>,
    scratch: Vec<u8>,
}

impl GeneratorFeed {
    /// A feed of `generator`'s values for `stream` (an error if its parameters are invalid,
    /// or if it is a constant that does not fit the stream's dtype).
    pub fn new(generator: Generator, stream: &StreamType) -> Result<GeneratorFeed, FeedError> {
        generator.check().map_err(|e| FeedError::Value {
            stream: stream.name.clone(),
            micro_batch: 0,
            message: e.to_string(),
        })?;
        if let Generator::Constant(v) = generator {
            push_f64(stream.dtype, v, &mut Vec::new()).map_err(|e| value_error(stream, 0, e))?;
        }
        Ok(GeneratorFeed {
            generator,
            delivered: 0,
            values: Vec::new(),
            scratch: Vec::new(),
        })
    }

    /// The feed of a program's generator source for `stream` (a CSV source is an error:
    /// it is a [`super::CsvFeed`]).
    pub fn of(source: &DataSource, stream: &StreamType) -> Result<GeneratorFeed, FeedError> {
        match Generator::of(source) {
            Some(generator) => GeneratorFeed::new(generator, stream),
            None => Err(FeedError::Value {
                stream: stream.name.clone(),
                micro_batch: 0,
                message: "a CSV source is not a generator".into(),
            }),
        }
    }
}

impl Feed for GeneratorFeed {
    fn fill(&mut self, stream: &StreamType, dst: &mut [u8]) -> Result<(), FeedError> {
        check_len(stream, self.delivered, dst)?;
        self.values.clear();
        self.generator
            .next_values(stream.dtype, stream.elements(), &mut self.values);
        self.scratch.clear();
        for &v in &self.values {
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
        self.generator.describe()
    }
}

/// Synthetic micro-batches of the right shape and dtype for any stream (`ipusim run
/// --synthetic-data`, the flag of Graphcore's CNN examples): the simulator's [`Synthetic`]
/// data — floats uniform in `[-1, 1)`, `I32` labels `0..10`, `U8` pixels `0..=16`, Bools
/// alternating. The host still copies every micro-batch to the device, so the StreamCopy
/// cycles are those of real data (Graphcore's synthetic mode also skips the host transfer;
/// ipusim keeps it, so the report stays the one of the real run).
#[derive(Clone, Debug)]
pub struct SyntheticFeed {
    data: Synthetic,
    delivered: u64,
    values: Vec<f64>,
    scratch: Vec<u8>,
}

impl SyntheticFeed {
    /// Synthetic data for `stream`.
    pub fn new(stream: &StreamType) -> SyntheticFeed {
        SyntheticFeed {
            data: Synthetic::new(&stream.name),
            delivered: 0,
            values: Vec::new(),
            scratch: Vec::new(),
        }
    }
}

impl Feed for SyntheticFeed {
    fn fill(&mut self, stream: &StreamType, dst: &mut [u8]) -> Result<(), FeedError> {
        check_len(stream, self.delivered, dst)?;
        self.values.clear();
        self.data.next_values(
            stream.dtype,
            stream.elements(),
            self.delivered,
            &mut self.values,
        );
        self.scratch.clear();
        for &v in &self.values {
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
        "synthetic data (--synthetic-data)".into()
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

    fn feed(source: DataSource, s: &StreamType) -> Result<GeneratorFeed, FeedError> {
        GeneratorFeed::of(&source, s)
    }

    fn uniform(low: f64, high: f64, seed: u64) -> DataSource {
        DataSource::Uniform { low, high, seed }
    }

    #[test]
    fn constant_and_sequence() {
        let s = StreamType::new("x", DType::F16, [3]);
        let mut c = feed(DataSource::Constant(0.1), &s).unwrap();
        let v = values(&mut c, &s);
        assert_eq!(v, vec![f64::from(half::f16::from_f32(0.1).to_f32()); 3]);
        let u8s = StreamType::new("u", DType::U8, [2]);
        assert!(feed(DataSource::Constant(300.0), &u8s).is_err());
        let sequence = DataSource::Sequence {
            start: 250.0,
            step: 2.0,
        };
        let mut q = feed(sequence, &u8s).unwrap();
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
        let a = values(&mut feed(uniform(-1.0, 1.0, 7), &s).unwrap(), &s);
        let b = values(&mut feed(uniform(-1.0, 1.0, 7), &s).unwrap(), &s);
        assert_eq!(a, b);
        assert!(a.iter().all(|v| (-1.0..=1.0).contains(v)));
        let mean = a.iter().sum::<f64>() / a.len() as f64;
        // Uniform on [-1, 1): sd 1/sqrt(3); the mean of 1000 draws within 5 sd of 0.
        assert!(mean.abs() < 5.0 / 3f64.sqrt() / 1000f64.sqrt(), "{mean}");
        let bools = StreamType::new("b", DType::Bool, [1000]);
        let v = values(&mut feed(uniform(0.0, 2.0, 1), &bools).unwrap(), &bools);
        let ones = v.iter().filter(|&&x| x == 1.0).count() as f64;
        // Binomial(1000, 1/2): sd 15.8.
        assert!((ones - 500.0).abs() < 5.0 * 15.82, "{ones}");
        assert!(feed(uniform(1.0, 1.0, 0), &s).is_err());
    }
}

//! Outfeed collectors: what the host keeps of the entries an outfeed stream sends during
//! one device run, per mode (TensorFlow `IPUOutfeedMode`, PopTorch `OutputMode`):
//!
//! | mode | kept per run |
//! |---|---|
//! | `all` | every entry, in order |
//! | `last` | the last entry |
//! | `every:N` | entries N, 2N, 3N, ... of the run (1-based; a run of fewer than N entries keeps none) |
//! | `sum` | the element-wise sum of every entry |
//!
//! `sum` is computed **on the host, in `f64`, in entry order**, whatever the stream's dtype:
//! exact for FP16, integer and Bool entries (their values and sums fit `f64`'s 53 bits for
//! any realistic run), and for FP32 entries a sum with one `f64` rounding per addition —
//! far finer than the FP32 values themselves. So a sum never overflows or loses the small
//! entries the way an on-device FP16 accumulator would. Each run starts a new sum; the
//! count of entries summed is kept, so a mean is `sum / entries`.
//!
//! Every entry still crosses the host link (the device sends each `StreamCopy`), so Tx
//! bytes do not depend on the mode.

use crate::stream::StreamType;
use ipusim_ir::OutfeedMode;
use ipusim_sim::tensor::Tensor;

/// What one outfeed returned for one run.
#[derive(Clone, Debug, PartialEq)]
pub struct OutfeedData {
    /// The stream.
    pub stream: StreamType,
    /// The mode it was collected in.
    pub mode: OutfeedMode,
    /// Entries the device sent during the run.
    pub received: u64,
    /// What was kept.
    pub values: OutfeedValues,
}

/// The kept values of an outfeed.
#[derive(Clone, Debug, PartialEq)]
pub enum OutfeedValues {
    /// `all`, `last`, `every:N`: the kept entries, in order.
    Entries(Vec<Tensor>),
    /// `sum`: the element-wise `f64` sum of all entries (row-major, the stream's shape).
    Sum(Vec<f64>),
}

impl OutfeedData {
    /// The kept entries as `f64` rows (one per entry; the sum is one row).
    pub fn rows(&self) -> Vec<Vec<f64>> {
        match &self.values {
            OutfeedValues::Entries(e) => e.iter().map(Tensor::to_f64_vec).collect(),
            OutfeedValues::Sum(s) => vec![s.clone()],
        }
    }

    /// The first element of every kept row (the value of a scalar stream).
    pub fn scalars(&self) -> Vec<f64> {
        self.rows()
            .into_iter()
            .filter_map(|r| r.first().copied())
            .collect()
    }
}

/// Entries `mode` keeps of a run in which the device sends `sent` entries (a sum is one).
pub fn kept_per_run(mode: OutfeedMode, sent: u64) -> u64 {
    match mode {
        OutfeedMode::All => sent,
        OutfeedMode::Last | OutfeedMode::Sum => sent.min(1),
        OutfeedMode::Every(n) => sent / u64::from(n.max(1)),
    }
}

/// Collects one outfeed stream's entries during a run.
#[derive(Clone, Debug)]
pub struct OutfeedCollector {
    stream: StreamType,
    mode: OutfeedMode,
    received: u64,
    entries: Vec<Tensor>,
    /// The running sum of `sum` mode, allocated by the first entry (a collector costs no
    /// memory in proportion to its stream until the device sends something).
    sum: Vec<f64>,
}

impl OutfeedCollector {
    /// A collector of `stream` in `mode`.
    pub fn new(stream: StreamType, mode: OutfeedMode) -> OutfeedCollector {
        OutfeedCollector {
            sum: Vec::new(),
            stream,
            mode,
            received: 0,
            entries: Vec::new(),
        }
    }

    /// The stream.
    pub fn stream(&self) -> &StreamType {
        &self.stream
    }

    /// The mode.
    pub fn mode(&self) -> OutfeedMode {
        self.mode
    }

    /// Changes the mode (between runs).
    pub fn set_mode(&mut self, mode: OutfeedMode) {
        self.mode = mode;
    }

    /// Receives one entry's bytes; `None` when they are not one entry of the stream.
    pub fn receive(&mut self, bytes: &[u8]) -> Option<()> {
        let t = Tensor::from_bytes(self.stream.dtype, self.stream.shape.clone(), bytes).ok()?;
        self.received += 1;
        match self.mode {
            OutfeedMode::All => self.entries.push(t),
            OutfeedMode::Last => {
                self.entries.clear();
                self.entries.push(t);
            }
            OutfeedMode::Every(n) => {
                if self.received.is_multiple_of(u64::from(n.max(1))) {
                    self.entries.push(t);
                }
            }
            OutfeedMode::Sum => {
                if self.sum.is_empty() {
                    self.sum = vec![0.0; self.stream.elements()];
                }
                for (s, v) in self.sum.iter_mut().zip(t.to_f64_vec()) {
                    *s += v;
                }
            }
        }
        Some(())
    }

    /// What was kept during the run, and a fresh start for the next run.
    pub fn finish_run(&mut self) -> OutfeedData {
        let values = match self.mode {
            OutfeedMode::Sum => {
                let mut sum = std::mem::take(&mut self.sum);
                // A run that sent nothing sums to zeros.
                sum.resize(self.stream.elements(), 0.0);
                OutfeedValues::Sum(sum)
            }
            _ => OutfeedValues::Entries(std::mem::take(&mut self.entries)),
        };
        let data = OutfeedData {
            stream: self.stream.clone(),
            mode: self.mode,
            received: self.received,
            values,
        };
        self.received = 0;
        data
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;
    use ipusim_ir::DType;

    fn run(mode: OutfeedMode, entries: &[f32]) -> OutfeedData {
        let mut c = OutfeedCollector::new(StreamType::new("loss", DType::F32, [1]), mode);
        for e in entries {
            c.receive(&e.to_le_bytes()).unwrap();
        }
        c.finish_run()
    }

    #[test]
    fn kept_entries_follow_the_mode() {
        assert_eq!(kept_per_run(OutfeedMode::All, 7), 7);
        assert_eq!(kept_per_run(OutfeedMode::Last, 7), 1);
        assert_eq!(kept_per_run(OutfeedMode::Sum, 0), 0);
        assert_eq!(kept_per_run(OutfeedMode::Every(3), 7), 2);
    }

    #[test]
    fn a_collector_allocates_nothing_before_its_first_entry() {
        let huge = StreamType::new("h", DType::F32, [1usize << 40]);
        let mut c = OutfeedCollector::new(huge, OutfeedMode::Sum);
        assert_eq!(c.sum.capacity(), 0);
        c.set_mode(OutfeedMode::All);
        assert!(matches!(c.finish_run().values, OutfeedValues::Entries(e) if e.is_empty()));
    }

    #[test]
    fn modes_keep_what_they_say() {
        let e = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0];
        assert_eq!(
            run(OutfeedMode::All, &e).scalars(),
            e.map(f64::from).to_vec()
        );
        assert_eq!(run(OutfeedMode::Last, &e).scalars(), vec![7.0]);
        assert_eq!(run(OutfeedMode::Every(3), &e).scalars(), vec![3.0, 6.0]);
        assert_eq!(run(OutfeedMode::Every(8), &e).scalars(), Vec::<f64>::new());
        assert_eq!(run(OutfeedMode::Sum, &e).scalars(), vec![28.0]);
        assert_eq!(run(OutfeedMode::Sum, &e).received, 7);
    }

    #[test]
    fn sum_is_in_f64_and_each_run_starts_afresh() {
        // 10,000 FP16 entries of f16(0.0001): an FP16 accumulator stalls at 0.25
        // (numerics.md §3.1); the host's f64 sum is the exact 1.0001659393310547.
        let s = StreamType::new("x", DType::F16, Vec::<usize>::new());
        let mut c = OutfeedCollector::new(s, OutfeedMode::Sum);
        let bits = f16::from_bits(0x068e).to_bits().to_le_bytes();
        for _ in 0..10_000 {
            c.receive(&bits).unwrap();
        }
        assert_eq!(c.finish_run().scalars(), vec![1.0001659393310547]);
        c.receive(&bits).unwrap();
        let second = c.finish_run();
        assert_eq!((second.received, second.scalars().len()), (1, 1));
        assert!(c.receive(&[0u8; 3]).is_none(), "not one entry");
    }
}

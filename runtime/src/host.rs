//! The host end of a session's streams: the [`HostIo`] the engine calls at every
//! `StreamCopy`, over the session's feeds and outfeed collectors.
//!
//! - **Infeeds.** Each infeed stream has a [`Feed`] and a prefetch buffer: like Poplar's
//!   datastream buffer (TensorFlow `IPUInfeedQueue(prefetch_depth=…)`, default 3), the host
//!   holds up to `prefetch_depth` micro-batches ready, refilling after each `StreamCopy`
//!   takes one, but never reading beyond what the current run needs (so a file read once,
//!   in inference, is not read past the run's last micro-batch). A fault of a source is
//!   therefore found up to `prefetch_depth` micro-batches before the device would consume
//!   the data, as with a real prefetching loader. Micro-batches prefetched and not consumed
//!   by the end of a run are fed first in the next run, so no data is skipped.
//! - **Labels.** A stream an op reads as labels has a [`LabelCheck`], kept across its feeds, which
//!   counts every label fed outside the op's classes ([`crate::labels`]).
//! - **Outfeeds.** Each outfeed stream has an [`OutfeedCollector`] in its mode.
//! - **Accounting.** Bytes and copies per stream in the current run: the Rx/Tx the run
//!   report shows.

use crate::feeds::{Feed, FeedError};
use crate::labels::LabelCheck;
use crate::outfeed::{OutfeedCollector, OutfeedData};
use crate::stream::StreamType;
use ipusim_compiler::executable::HostStream;
use ipusim_sim::host::{HostError, HostIo};
use std::collections::{BTreeMap, VecDeque};

/// TensorFlow's default infeed prefetch depth (`IPUInfeedQueue`, "currently defaults to 3";
/// reference/user-features.md §1.1).
pub const DEFAULT_PREFETCH_DEPTH: u32 = 3;

/// A callback run after every stream copy, with the stream's name.
pub type CopyHook = Box<dyn FnMut(&str) + Send>;

/// Bytes and copies of one stream in one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamCount {
    /// `StreamCopy` executions.
    pub copies: u64,
    /// Bytes moved.
    pub bytes: u64,
}

struct InfeedPort {
    stream: StreamType,
    feed: Box<dyn Feed>,
    ready: VecDeque<Vec<u8>>,
    /// Micro-batches the run still needs that are not in `ready`.
    to_read: u64,
    count: StreamCount,
    /// Micro-batches read from the feed so far.
    read: u64,
}

impl InfeedPort {
    /// Reads micro-batches until `depth` are ready or the run needs no more, each one's
    /// labels counted by `labels` when the stream is read as labels.
    fn top_up(
        &mut self,
        depth: usize,
        mut labels: Option<&mut LabelCheck>,
    ) -> Result<(), FeedError> {
        while self.ready.len() < depth && self.to_read > 0 {
            let mut buf = vec![0u8; self.stream.bytes()];
            self.feed.fill(&self.stream, &mut buf)?;
            if let Some(check) = labels.as_deref_mut() {
                check.check(&buf, self.read, |sample| self.feed.locate(sample));
            }
            self.read += 1;
            self.ready.push_back(buf);
            self.to_read -= 1;
        }
        Ok(())
    }
}

/// The session's host: feeds, collectors and per-run byte counts.
pub struct SessionHost {
    infeeds: BTreeMap<String, InfeedPort>,
    outfeeds: BTreeMap<String, OutfeedCollector>,
    out_counts: BTreeMap<String, StreamCount>,
    prefetch_depth: u32,
    /// Called with the stream name after every stream copy (progress reporting).
    on_copy: Option<CopyHook>,
    /// The label checks of the streams read as labels, by name, over every feed each had.
    labels: BTreeMap<String, LabelCheck>,
}

impl std::fmt::Debug for SessionHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionHost")
            .field("infeeds", &self.infeeds.keys().collect::<Vec<_>>())
            .field("outfeeds", &self.outfeeds.keys().collect::<Vec<_>>())
            .field("prefetch_depth", &self.prefetch_depth)
            .finish()
    }
}

impl SessionHost {
    /// A host with no streams; `prefetch_depth` ≥ 1.
    pub fn new(prefetch_depth: u32) -> SessionHost {
        SessionHost {
            infeeds: BTreeMap::new(),
            outfeeds: BTreeMap::new(),
            out_counts: BTreeMap::new(),
            prefetch_depth: prefetch_depth.max(1),
            on_copy: None,
            labels: BTreeMap::new(),
        }
    }

    /// Checks the labels fed to `check.stream` from now on, whichever feed is connected
    /// ([`crate::labels`]).
    pub fn watch_labels(&mut self, check: LabelCheck) {
        self.labels.insert(check.stream.clone(), check);
    }

    /// The label checks so far, by stream name (counts over every feed the stream had).
    pub fn label_checks(&self) -> impl Iterator<Item = &LabelCheck> {
        self.labels.values()
    }

    /// Connects (or replaces) the feed of an infeed stream. Prefetched data of a replaced
    /// feed is dropped; its labels' check goes on counting.
    pub fn connect_infeed(&mut self, stream: StreamType, feed: Box<dyn Feed>) {
        self.infeeds.insert(
            stream.name.clone(),
            InfeedPort {
                stream,
                feed,
                ready: VecDeque::new(),
                to_read: 0,
                count: StreamCount::default(),
                read: 0,
            },
        );
    }

    /// Connects an outfeed stream's collector.
    pub fn connect_outfeed(&mut self, collector: OutfeedCollector) {
        self.outfeeds
            .insert(collector.stream().name.clone(), collector);
    }

    /// The collector of an outfeed stream.
    pub fn outfeed_mut(&mut self, stream: &str) -> Option<&mut OutfeedCollector> {
        self.outfeeds.get_mut(stream)
    }

    /// Whether an infeed stream has a feed.
    pub fn has_infeed(&self, stream: &str) -> bool {
        self.infeeds.contains_key(stream)
    }

    /// The description of an infeed's source.
    pub fn describe_infeed(&self, stream: &str) -> Option<String> {
        self.infeeds.get(stream).map(|p| p.feed.describe())
    }

    /// Sets a callback run after every stream copy, with the stream's name.
    pub fn on_copy(&mut self, f: Option<CopyHook>) {
        self.on_copy = f;
    }

    /// Whole micro-batches an infeed has left (buffered and in its source), if its source
    /// ends.
    pub fn remaining(&self, stream: &str) -> Option<u64> {
        let port = self.infeeds.get(stream)?;
        let left = port.feed.remaining(&port.stream)?;
        Some(left + port.ready.len() as u64)
    }

    /// The mode of an outfeed stream.
    pub fn outfeed_mode(&self, stream: &str) -> Option<ipusim_ir::OutfeedMode> {
        self.outfeeds.get(stream).map(OutfeedCollector::mode)
    }

    /// Prepares a run that needs `needs[stream]` micro-batches of each infeed: checks that
    /// every source has that much left (an error before the run starts otherwise) and
    /// prefetches.
    pub fn begin_run(&mut self, needs: &BTreeMap<String, u64>) -> Result<(), FeedError> {
        for (name, port) in &mut self.infeeds {
            let need = needs.get(name).copied().unwrap_or(0);
            let buffered = port.ready.len() as u64;
            if let Some(left) = port.feed.remaining(&port.stream) {
                if left + buffered < need {
                    return Err(FeedError::Shorter {
                        stream: name.clone(),
                        message: format!(
                            "{} has {} micro-batch{} of {} left, the run needs {need}",
                            port.feed.describe(),
                            left + buffered,
                            if left + buffered == 1 { "" } else { "es" },
                            port.stream.tensor_type()
                        ),
                    });
                }
            }
            port.to_read = need.saturating_sub(buffered);
            port.count = StreamCount::default();
            port.top_up(self.prefetch_depth as usize, self.labels.get_mut(name))?;
        }
        for c in self.out_counts.values_mut() {
            *c = StreamCount::default();
        }
        Ok(())
    }

    /// Ends a run: the outfeed data of every stream, and the counts of every stream.
    pub fn finish_run(&mut self) -> BTreeMap<String, OutfeedData> {
        self.outfeeds
            .iter_mut()
            .map(|(n, c)| (n.clone(), c.finish_run()))
            .collect()
    }

    /// Bytes and copies of every stream in the current run, by name.
    pub fn counts(&self) -> BTreeMap<String, StreamCount> {
        let mut out: BTreeMap<String, StreamCount> = self
            .infeeds
            .iter()
            .map(|(n, p)| (n.clone(), p.count))
            .collect();
        out.extend(self.out_counts.iter().map(|(n, c)| (n.clone(), *c)));
        out
    }
}

fn stream_error(stream: &str, message: String) -> HostError {
    HostError::Stream {
        stream: stream.to_string(),
        message,
    }
}

impl SessionHost {
    /// Fills `dst` with the next micro-batch of the infeed `stream` (what a `StreamCopy` to
    /// the device asks for).
    pub fn next_infeed(&mut self, stream: &str, dst: &mut [u8]) -> Result<(), HostError> {
        let depth = self.prefetch_depth as usize;
        let port = self.infeeds.get_mut(stream).ok_or_else(|| {
            stream_error(stream, "no data source is connected to this infeed".into())
        })?;
        if port.ready.is_empty() {
            // The run asks for more than `begin_run` was told: read on demand.
            port.to_read += 1;
            port.top_up(1, self.labels.get_mut(stream))
                .map_err(|e| stream_error(stream, e.to_string()))?;
        }
        let batch = port.ready.pop_front().unwrap_or_default();
        if batch.len() != dst.len() {
            return Err(stream_error(
                stream,
                format!(
                    "the device asks for {} bytes, a micro-batch of {} has {}",
                    dst.len(),
                    port.stream.tensor_type(),
                    batch.len()
                ),
            ));
        }
        dst.copy_from_slice(&batch);
        port.count.copies += 1;
        port.count.bytes += dst.len() as u64;
        port.top_up(depth, self.labels.get_mut(stream))
            .map_err(|e| stream_error(stream, e.to_string()))?;
        if let Some(f) = self.on_copy.as_mut() {
            f(stream);
        }
        Ok(())
    }

    /// Receives one entry of the outfeed `stream` (what a `StreamCopy` to the host sends).
    pub fn receive_outfeed(&mut self, stream: &str, src: &[u8]) -> Result<(), HostError> {
        let c = self.outfeeds.get_mut(stream).ok_or_else(|| {
            stream_error(stream, "no collector is connected to this outfeed".into())
        })?;
        c.receive(src).ok_or_else(|| {
            stream_error(
                stream,
                format!(
                    "an entry of {} bytes is not one entry of {}",
                    src.len(),
                    c.stream().tensor_type()
                ),
            )
        })?;
        let count = self.out_counts.entry(stream.to_string()).or_default();
        count.copies += 1;
        count.bytes += src.len() as u64;
        if let Some(f) = self.on_copy.as_mut() {
            f(stream);
        }
        Ok(())
    }
}

impl HostIo for SessionHost {
    fn infeed(&mut self, stream: &HostStream, dst: &mut [u8]) -> Result<(), HostError> {
        self.next_infeed(&stream.name, dst)
    }

    fn outfeed(&mut self, stream: &HostStream, src: &[u8]) -> Result<(), HostError> {
        self.receive_outfeed(&stream.name, src)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feeds::{CsvFeed, EndOfData, GeneratorFeed};
    use ipusim_compiler::executable::{StreamDirection, TensorId};
    use ipusim_ir::{DType, DataSource, NodeId, OutfeedMode};

    fn host_stream(s: &StreamType, direction: StreamDirection) -> HostStream {
        HostStream {
            name: s.name.clone(),
            direction,
            dtype: s.dtype,
            shape: s.shape.clone(),
            bytes_per_micro_batch: s.bytes() as u64,
            node: NodeId(0),
            tensor: TensorId(0),
        }
    }

    #[test]
    fn feeds_prefetch_within_the_run_and_count_bytes() {
        let s = StreamType::new("x", DType::F32, [2]);
        let csv = CsvFeed::column("v\n1\n2\n3\n4\n5\n6\n", &s, EndOfData::Stop);
        let mut host = SessionHost::new(3);
        host.connect_infeed(s.clone(), Box::new(csv));
        let hs = host_stream(&s, StreamDirection::HostToDevice);
        let needs = BTreeMap::from([("x".to_string(), 2)]);
        host.begin_run(&needs).unwrap();
        let mut buf = [0u8; 8];
        host.infeed(&hs, &mut buf).unwrap();
        host.infeed(&hs, &mut buf).unwrap();
        assert_eq!(buf[4..], 4.0f32.to_le_bytes());
        assert_eq!(
            host.counts()["x"],
            StreamCount {
                copies: 2,
                bytes: 16
            }
        );
        // One micro-batch is left; a run of 2 fails before it starts.
        let e = host.begin_run(&needs).unwrap_err();
        assert_eq!(
            e.to_string(),
            "infeed 'x' is shorter than the run needs: d.csv, columns 0..1 has 1 micro-batch of \
             f32[2] left, the run needs 2"
        );
    }

    #[test]
    fn outfeeds_collect_and_unknown_streams_are_errors() {
        let s = StreamType::new("y", DType::I32, Vec::<usize>::new());
        let mut host = SessionHost::new(1);
        host.connect_outfeed(OutfeedCollector::new(s.clone(), OutfeedMode::Sum));
        let n = StreamType::new("n", DType::I32, Vec::<usize>::new());
        let counter = DataSource::Sequence {
            start: 0.0,
            step: 1.0,
        };
        host.connect_infeed(
            n.clone(),
            Box::new(GeneratorFeed::of(&counter, &n).unwrap()),
        );
        host.begin_run(&BTreeMap::new()).unwrap();
        let out = host_stream(&s, StreamDirection::DeviceToHost);
        for v in [3i32, 4] {
            host.outfeed(&out, &v.to_le_bytes()).unwrap();
        }
        let data = host.finish_run();
        assert_eq!(data["y"].scalars(), vec![7.0]);
        assert_eq!(host.counts()["y"].bytes, 8);
        let other = StreamType::new("z", DType::I32, Vec::<usize>::new());
        let e = host
            .outfeed(&host_stream(&other, StreamDirection::DeviceToHost), &[0; 4])
            .unwrap_err();
        assert!(e.to_string().contains("no collector"), "{e}");
        // Reading on demand beyond what begin_run was told still works for endless feeds.
        let mut buf = [0u8; 4];
        host.infeed(&host_stream(&n, StreamDirection::HostToDevice), &mut buf)
            .unwrap();
        assert_eq!(buf, 0i32.to_le_bytes());
    }
}

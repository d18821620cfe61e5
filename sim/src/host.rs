//! The host side of stream copies, as the engine sees it.
//!
//! A `StreamCopy` step of the program asks the host for one micro-batch of an infeed, or
//! hands it one entry of an outfeed. The runtime implements [`HostIo`] over real data
//! sources (CSV files, generators, iterators) and outfeed collectors; tests use
//! [`QueueHost`]. Bytes are exactly what the tile memory holds: little-endian elements in
//! row-major order, f16 as its bit pattern, bool as one byte 0/1.

use ipusim_exe::executable::HostStream;
use std::collections::{BTreeMap, VecDeque};
use thiserror::Error;

/// A failure on the host side of a stream copy.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum HostError {
    /// The infeed has no more data.
    #[error("infeed '{stream}' is exhausted after {delivered} micro-batches")]
    Exhausted {
        /// The stream.
        stream: String,
        /// Micro-batches delivered before it ran out.
        delivered: u64,
    },
    /// Any other fault of a stream (unknown stream, bad data at a file and line, ...).
    #[error("stream '{stream}': {message}")]
    Stream {
        /// The stream.
        stream: String,
        /// What went wrong, naming the file and line where there is one.
        message: String,
    },
}

/// The host end of the IPU's streams.
pub trait HostIo {
    /// Fills `dst` (exactly `stream.bytes_per_micro_batch` bytes) with the next micro-batch
    /// of the infeed `stream`.
    fn infeed(&mut self, stream: &HostStream, dst: &mut [u8]) -> Result<(), HostError>;

    /// Receives one entry (`stream.bytes_per_micro_batch` bytes) of the outfeed `stream`.
    fn outfeed(&mut self, stream: &HostStream, src: &[u8]) -> Result<(), HostError>;
}

/// An in-memory host: queued infeed micro-batches and every outfeed entry received, by
/// stream name. For tests and for embedding ipusim in other programs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueHost {
    /// Micro-batches waiting to be fed, per infeed stream, in order.
    pub infeeds: BTreeMap<String, VecDeque<Vec<u8>>>,
    /// Entries received, per outfeed stream, in order.
    pub outfeeds: BTreeMap<String, Vec<Vec<u8>>>,
    delivered: BTreeMap<String, u64>,
}

impl QueueHost {
    /// An empty host.
    pub fn new() -> QueueHost {
        QueueHost::default()
    }

    /// Queues one micro-batch of bytes for the infeed `stream`.
    pub fn push_infeed(&mut self, stream: &str, bytes: Vec<u8>) {
        self.infeeds
            .entry(stream.to_string())
            .or_default()
            .push_back(bytes);
    }
}

impl HostIo for QueueHost {
    fn infeed(&mut self, stream: &HostStream, dst: &mut [u8]) -> Result<(), HostError> {
        let delivered = self.delivered.entry(stream.name.clone()).or_default();
        let batch = self
            .infeeds
            .get_mut(&stream.name)
            .and_then(VecDeque::pop_front)
            .ok_or_else(|| HostError::Exhausted {
                stream: stream.name.clone(),
                delivered: *delivered,
            })?;
        if batch.len() != dst.len() {
            return Err(HostError::Stream {
                stream: stream.name.clone(),
                message: format!(
                    "micro-batch {} has {} bytes, the stream needs {}",
                    *delivered,
                    batch.len(),
                    dst.len()
                ),
            });
        }
        dst.copy_from_slice(&batch);
        *delivered += 1;
        Ok(())
    }

    fn outfeed(&mut self, stream: &HostStream, src: &[u8]) -> Result<(), HostError> {
        self.outfeeds
            .entry(stream.name.clone())
            .or_default()
            .push(src.to_vec());
        Ok(())
    }
}

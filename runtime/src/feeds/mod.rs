//! Infeed data sources on the host: what fills the bytes of each micro-batch of a stream.
//!
//! A [`Feed`] produces micro-batches in a stream's device dtype, one per `StreamCopy`. The
//! sources:
//! - [`CsvFeed`]: rows of a CSV file, one sample per row (`csv`);
//! - [`GeneratorFeed`]: the generator sources `Constant`, `Uniform`, `Sequence`
//!   (`generator`), the simulator's [`ipusim_sim::feeds::Generator`]'s values;
//! - [`IteratorFeed`]: any Rust iterator of host tensors, for library users (`iter`).
//!
//! [`open_source`] builds the feed a program's `infeeds` entry names. Every value is
//! converted once, correctly rounded, by [`crate::codec`]; a value that does not fit the
//! stream's dtype is an error naming the file, line and column (or the micro-batch).
//!
//! # The end of the data
//!
//! A file is read in order. What happens at its end is the feed's [`EndOfData`]:
//! - [`EndOfData::Wrap`] (training): reading continues from the first row — one pass over
//!   the file is an epoch. A micro-batch never holds the same row twice, so a file with fewer
//!   rows than one micro-batch needs is an error when the feed is opened.
//! - [`EndOfData::Stop`] (inference): every row is read at most once; a run that needs more
//!   micro-batches than the file has left fails before it starts ("shorter than the run
//!   needs", [`Feed::remaining`]). Rows left over after the last whole micro-batch are never
//!   fed (TensorFlow's `drop_remainder=True`).

mod csv;
mod generator;
mod iter;

pub use csv::CsvFeed;
pub use generator::{GeneratorFeed, SyntheticFeed};
pub use iter::IteratorFeed;

use crate::codec::ValueError;
use crate::stream::StreamType;
use ipusim_ir::DataSource;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// What a file-backed feed does at the end of its data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EndOfData {
    /// Start again from the first row (epochs); the training default.
    #[default]
    Wrap,
    /// Every row at most once; needing more is an error. The inference default.
    Stop,
}

/// A fault of an infeed source.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum FeedError {
    /// A file cannot be read.
    #[error("{file}: error: cannot read the data file: {message}")]
    Io {
        /// The file as named (relative to the program, or as given on the command line).
        file: String,
        /// The operating system's message.
        message: String,
    },
    /// A fault at a line of a data file (malformed row, wrong column count, a value that
    /// does not fit the stream's dtype).
    #[error("{file}:{line}: error: {message}")]
    Line {
        /// The file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A data file that does not suit the stream as a whole (column selection, too few rows).
    #[error("{file}: error: {message}")]
    File {
        /// The file.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// The source has no more data than the run needs.
    #[error("infeed '{stream}' is shorter than the run needs: {message}")]
    Shorter {
        /// The stream.
        stream: String,
        /// What it has and what the run needs.
        message: String,
    },
    /// A generated or iterated value or tensor that does not fit the stream.
    #[error("infeed '{stream}', micro-batch {micro_batch}: {message}")]
    Value {
        /// The stream.
        stream: String,
        /// 0-based micro-batch index of the feed.
        micro_batch: u64,
        /// What is wrong.
        message: String,
    },
}

/// A source of micro-batches for one infeed stream.
pub trait Feed: Send {
    /// Writes the next micro-batch of `stream` into `dst` (exactly `stream.bytes()` bytes).
    fn fill(&mut self, stream: &StreamType, dst: &mut [u8]) -> Result<(), FeedError>;

    /// Whole micro-batches left before the source ends; `None` when it does not end (a
    /// generator, a wrapping file) or cannot tell (an iterator).
    fn remaining(&self, stream: &StreamType) -> Option<u64>;

    /// Where the data comes from, for reports (`data/digits_train.csv, columns 0..64`).
    fn describe(&self) -> String;

    /// Where sample `sample` of the micro-batch last filled came from (`file:line`), when
    /// the source can tell.
    fn locate(&self, _sample: usize) -> Option<String> {
        None
    }
}

/// The feed of a program's `infeeds` entry for `stream`. A CSV path is relative to
/// `base_dir` (the program file's directory).
pub fn open_source(
    source: &DataSource,
    base_dir: &Path,
    stream: &StreamType,
    end: EndOfData,
) -> Result<Box<dyn Feed>, FeedError> {
    Ok(match source {
        DataSource::Csv {
            path,
            columns,
            header,
        } => {
            let full = resolve(base_dir, Path::new(path));
            Box::new(CsvFeed::open(&full, columns, *header, stream, end)?)
        }
        generator => Box::new(GeneratorFeed::of(generator, stream)?),
    })
}

/// `path` relative to `base_dir` unless absolute (or `base_dir` is empty).
pub fn resolve(base_dir: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() || base_dir.as_os_str().is_empty() {
        path.to_path_buf()
    } else {
        base_dir.join(path)
    }
}

/// A [`FeedError::Value`] from a conversion fault.
pub(crate) fn value_error(stream: &StreamType, micro_batch: u64, e: ValueError) -> FeedError {
    FeedError::Value {
        stream: stream.name.clone(),
        micro_batch,
        message: format!("value {e} (the stream is {})", stream.tensor_type()),
    }
}

/// Checks that `dst` has the size of one micro-batch of `stream`.
pub(crate) fn check_len(
    stream: &StreamType,
    micro_batch: u64,
    dst: &[u8],
) -> Result<(), FeedError> {
    if dst.len() == stream.bytes() {
        Ok(())
    } else {
        Err(FeedError::Value {
            stream: stream.name.clone(),
            micro_batch,
            message: format!(
                "the device asks for {} bytes, a micro-batch of {} has {}",
                dst.len(),
                stream.tensor_type(),
                stream.bytes()
            ),
        })
    }
}

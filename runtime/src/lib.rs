//! ipusim-runtime: the host side of ipusim — what a user's program needs around the device.
//!
//! - [`feeds`]: infeed sources (CSV files, generators, Rust iterators) producing micro-batches
//!   in the stream's device dtype, converted once and correctly rounded by [`codec`];
//! - [`outfeed`]: collectors per outfeed mode (`all`, `last`, `sum`, `every:N`);
//! - [`host`]: the [`ipusim_sim::host::HostIo`] the engine calls at every `StreamCopy`, with
//!   prefetching and per-stream byte counts;
//! - [`io_model`]: bytes and cycles per stream per run, Rx/Tx per IPU;
//! - [`checkpoint`]: variables saved to and restored from JSON, written atomically
//!   ([`atomic`]);
//! - [`connect`]: a program's streams connected to their sources and collectors;
//! - [`mod@reference`]: a program run on the reference interpreter with the same host;
//! - [`session`]: a program compiled and run on the BSP engine, run after run;
//! - [`mod@launch`]: a program file launched on the engine with its own data sources, for the
//!   simulator on its own, and trace snapshots of it;
//! - [`chrome`]: engine traces exported to the Chrome trace-event format (Perfetto);
//! - [`timeline`]: the execution trace (PopVision's Execution Trace) of a recorded run;
//! - [`report`]: the run report (the compile report's contract plus what the runs measured),
//!   its text form, and the comparison of two reports.

pub mod atomic;
pub mod checkpoint;
pub mod chrome;
pub mod codec;
pub mod connect;
pub mod error;
pub mod feeds;
pub mod host;
pub mod io_model;
pub mod json;
pub mod labels;
pub mod launch;
pub mod options;
pub mod outfeed;
pub mod reference;
pub mod report;
pub mod session;
pub mod stream;
pub mod timeline;

pub use checkpoint::{Checkpoint, CheckpointError};
pub use connect::StreamOptions;
pub use error::{OptionsError, RuntimeError, StreamError};
pub use feeds::{EndOfData, Feed, FeedError};
pub use host::SessionHost;
pub use io_model::HostIoModel;
pub use options::SessionOptions;
pub use outfeed::{OutfeedCollector, OutfeedData, OutfeedValues};
pub use reference::ReferenceSession;
pub use report::RunReport;
pub use session::{RunOutput, Session};
pub use stream::StreamType;

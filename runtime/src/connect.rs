//! Connecting a program's streams on the host: each infeed to its source (the program's
//! `infeeds` entry, or a file given in its place) and each outfeed to a collector in its
//! mode (the program's `outfeeds` entry, or a mode given in its place).
//!
//! A file replacing a stream's source (`--infeed NAME=FILE`) keeps the columns and header
//! setting of the program's CSV source, so a held-out file of the same layout drops in; a
//! file replacing a generator (or feeding a stream without a source) is read with a header
//! line and all of its columns. Options naming a stream the program does not have are
//! errors that list the streams it has.

use crate::error::{OptionsError, RuntimeError, StreamError};
use crate::feeds::{open_source, EndOfData, Feed, SyntheticFeed};
use crate::host::SessionHost;
use crate::outfeed::OutfeedCollector;
use crate::stream::StreamType;
use ipusim_ir::{Columns, DataSource, OutfeedMode, Program};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How a session's streams are connected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamOptions {
    /// Files replacing infeed sources, by stream.
    pub infeed_files: BTreeMap<String, PathBuf>,
    /// Modes replacing the program's outfeed modes, by stream.
    pub outfeed_modes: BTreeMap<String, OutfeedMode>,
    /// What file-backed feeds do at the end of their data.
    pub end_of_data: EndOfData,
    /// Micro-batches the host holds ready per infeed (≥ 1).
    pub prefetch_depth: u32,
    /// Feed every infeed with synthetic data of its shape and dtype
    /// ([`crate::feeds::SyntheticFeed`]) instead of the program's sources.
    pub synthetic_data: bool,
}

impl Default for StreamOptions {
    fn default() -> StreamOptions {
        StreamOptions {
            infeed_files: BTreeMap::new(),
            outfeed_modes: BTreeMap::new(),
            end_of_data: EndOfData::Wrap,
            prefetch_depth: crate::host::DEFAULT_PREFETCH_DEPTH,
            synthetic_data: false,
        }
    }
}

fn names(streams: &[StreamType]) -> String {
    if streams.is_empty() {
        "none".into()
    } else {
        streams
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The host of a program whose compiled streams are `infeeds` and `outfeeds`; CSV paths of
/// the program are relative to `base_dir`, files in `options` to the working directory.
/// Infeeds without any source are left unconnected (a library user connects them with
/// [`SessionHost::connect_infeed`]; [`check_connected`] reports them).
pub fn connect(
    program: &Program,
    base_dir: &Path,
    infeeds: &[StreamType],
    outfeeds: &[StreamType],
    options: &StreamOptions,
) -> Result<SessionHost, RuntimeError> {
    for name in options.infeed_files.keys() {
        if !infeeds.iter().any(|s| &s.name == name) {
            return Err(OptionsError::UnknownStream {
                flag: "--infeed",
                kind: "infeed",
                name: name.clone(),
                available: names(infeeds),
            }
            .into());
        }
    }
    for name in options.outfeed_modes.keys() {
        if !outfeeds.iter().any(|s| &s.name == name) {
            return Err(OptionsError::UnknownStream {
                flag: "--outfeed-mode",
                kind: "outfeed",
                name: name.clone(),
                available: names(outfeeds),
            }
            .into());
        }
    }
    let mut host = SessionHost::new(options.prefetch_depth);
    for stream in infeeds {
        let spec = program.infeeds.iter().find(|f| f.stream == stream.name);
        if options.synthetic_data {
            host.connect_infeed(stream.clone(), Box::new(SyntheticFeed::new(stream)));
            continue;
        }
        let feed: Box<dyn Feed> = match (options.infeed_files.get(&stream.name), spec) {
            (Some(file), spec) => {
                let (columns, header) = match spec.map(|s| &s.source) {
                    Some(DataSource::Csv {
                        columns, header, ..
                    }) => (columns.clone(), *header),
                    _ => (Columns::Range(0, stream.sample_elements().max(1)), true),
                };
                let source = DataSource::Csv {
                    path: file.display().to_string(),
                    columns,
                    header,
                };
                open_source(&source, Path::new(""), stream, options.end_of_data)?
            }
            (None, Some(spec)) => open_source(&spec.source, base_dir, stream, options.end_of_data)?,
            (None, None) => continue,
        };
        host.connect_infeed(stream.clone(), feed);
    }
    for stream in outfeeds {
        let mode = options
            .outfeed_modes
            .get(&stream.name)
            .copied()
            .or_else(|| {
                program
                    .outfeeds
                    .iter()
                    .find(|o| o.stream == stream.name)
                    .map(|o| o.mode)
            })
            .unwrap_or_default();
        host.connect_outfeed(OutfeedCollector::new(stream.clone(), mode));
    }
    Ok(host)
}

/// Checks that every infeed has a source before a run.
pub fn check_connected(host: &SessionHost, infeeds: &[StreamType]) -> Result<(), RuntimeError> {
    match infeeds.iter().find(|s| !host.has_infeed(&s.name)) {
        Some(s) => Err(StreamError::Unconnected {
            stream: s.to_string(),
            name: s.name.clone(),
        }
        .into()),
        None => Ok(()),
    }
}

//! CSV files as infeeds: each row is one sample of a stream (its shape without the leading
//! batch dimension, row-major), so a micro-batch of shape `[16, 64]` is 16 rows of 64
//! selected columns.
//!
//! The file is read once, streamed through the `csv` crate, when the feed is opened: every
//! row is checked and converted to stream bytes then (the host memory it takes is the
//! samples' bytes, in the stream's dtype, not the file's text), so every fault is found
//! before the device runs and is reported with its file and line: a row with another number
//! of fields than the header (or the first row), a field that is not UTF-8, a quoted field
//! that runs past the end of its line (an unterminated quote), a value that is not a number
//! or does not fit the stream's dtype (`300` for a `u8` stream), a column selection that does
//! not exist or does not give exactly one sample's elements, a file with too few rows (see
//! [`super::EndOfData`]), a line longer than [`MAX_LINE_BYTES`] (what `/dev/zero` would be).
//!
//! The dialect (RFC 4180 as the `csv` crate reads it): comma-separated fields, optional
//! double quotes around a field (`""` is a quote inside one; fields do not span lines), `\n`
//! or `\r\n` line ends, a UTF-8 byte-order mark at the start ignored, blank lines skipped,
//! surrounding spaces of a field ignored.

use super::{check_len, EndOfData, Feed, FeedError};
use crate::codec::push_text;
use crate::stream::StreamType;
use ipusim_ir::Columns;
use std::io::Read;
use std::path::Path;

/// Longest line of a CSV file read (bytes): 16 MiB, some million values.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// The reader under the CSV parser: it fails once a line grows past `max` bytes (so a file
/// without line ends, a device, is an error instead of one unbounded record), and it notes
/// where lines end so a record's byte offset maps to its line (the `csv` crate does not count
/// the blank lines it skips). Only line ends not yet passed by a record are kept: one read
/// buffer's worth.
struct Lines<R> {
    inner: R,
    /// Bytes read so far.
    offset: u64,
    /// Bytes since the last line end.
    line: usize,
    max: usize,
    /// Offsets of line ends not yet passed by a record, and how many were passed.
    ends: std::cell::RefCell<(std::collections::VecDeque<u64>, usize)>,
}

impl<R> Lines<R> {
    fn new(inner: R, max: usize) -> Lines<R> {
        Lines {
            inner,
            offset: 0,
            line: 0,
            max,
            ends: Default::default(),
        }
    }

    /// The 1-based line of the byte at `offset` (offsets asked for never decrease).
    fn line_of(&self, offset: u64) -> usize {
        let mut ends = self.ends.borrow_mut();
        let (queue, passed) = &mut *ends;
        while queue.front().is_some_and(|&e| e < offset) {
            queue.pop_front();
            *passed += 1;
        }
        *passed + 1
    }
}

impl<R: Read> Read for Lines<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut ends = self.ends.borrow_mut();
        for (k, &b) in buf[..n].iter().enumerate() {
            if b == b'\n' {
                ends.0.push_back(self.offset + k as u64);
                self.line = 0;
            } else {
                self.line += 1;
                if self.line > self.max {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("a line is longer than {} bytes", self.max),
                    ));
                }
            }
        }
        self.offset += n as u64;
        Ok(n)
    }
}

/// Rows of a CSV file converted to one stream's bytes, read in order.
#[derive(Clone, Debug)]
pub struct CsvFeed {
    file: String,
    columns: String,
    stream: StreamType,
    /// The samples' bytes, row after row.
    samples: Vec<u8>,
    /// 1-based line number of each row.
    lines: Vec<usize>,
    sample_bytes: usize,
    end: EndOfData,
    next_row: usize,
    epoch: u64,
    delivered: u64,
    /// The row the micro-batch last filled began at.
    last_start: usize,
}

impl CsvFeed {
    /// Reads the CSV file `path` for `stream`: the `columns` of each row (after the header
    /// line when `header`) form one sample.
    pub fn open(
        path: &Path,
        columns: &Columns,
        header: bool,
        stream: &StreamType,
        end: EndOfData,
    ) -> Result<CsvFeed, FeedError> {
        let file = path.display().to_string();
        let f = std::fs::File::open(path).map_err(|e| FeedError::Io {
            file: file.clone(),
            message: e.to_string(),
        })?;
        CsvFeed::read(f, &file, columns, header, stream, end)
    }

    /// The feed of the one column of `text` (a header, then a value per row), for tests.
    #[cfg(test)]
    pub(crate) fn column(text: &str, stream: &StreamType, end: EndOfData) -> CsvFeed {
        CsvFeed::parse(text, "d.csv", &Columns::Range(0, 1), true, stream, end)
            .expect("a valid one-column CSV")
    }

    /// [`CsvFeed::open`] on the text of a file named `file` (for messages).
    pub fn parse(
        text: &str,
        file: &str,
        columns: &Columns,
        header: bool,
        stream: &StreamType,
        end: EndOfData,
    ) -> Result<CsvFeed, FeedError> {
        CsvFeed::read(text.as_bytes(), file, columns, header, stream, end)
    }

    /// [`CsvFeed::open`] on a reader of a file named `file`.
    fn read(
        reader: impl Read,
        file: &str,
        columns: &Columns,
        header: bool,
        stream: &StreamType,
        end: EndOfData,
    ) -> Result<CsvFeed, FeedError> {
        let at = |line: usize, message: String| FeedError::Line {
            file: file.to_string(),
            line,
            message,
        };
        let mut rows = Records {
            reader: ::csv::ReaderBuilder::new()
                .has_headers(false)
                .flexible(true)
                .from_reader(Lines::new(reader, MAX_LINE_BYTES)),
            record: ::csv::StringRecord::new(),
            file,
        };
        let mut names: Option<Vec<String>> = None;
        let mut width: Option<(usize, usize)> = None; // (fields, line that set it)
        if header {
            match rows.next_row()? {
                Some((line, fields)) => {
                    width = Some((fields.len(), line));
                    names = Some(fields.iter().map(|f| f.trim().to_string()).collect());
                }
                None => {
                    return Err(FeedError::File {
                        file: file.to_string(),
                        message: "the file is empty (expected a header line)".into(),
                    })
                }
            }
        }
        let wanted = stream.sample_elements().max(1);
        let sample_bytes = wanted * stream.dtype.size_bytes();
        let mut selection: Option<Vec<usize>> = None;
        let mut samples = Vec::new();
        let mut lines = Vec::new();
        while let Some((line, fields)) = rows.next_row()? {
            match width {
                Some((w, origin)) if w != fields.len() => {
                    let what = if names.is_some() {
                        format!("the header (line {origin}) has {w}")
                    } else {
                        format!("line {origin} has {w}")
                    };
                    return Err(at(
                        line,
                        format!(
                            "the row has {} field{}, {what}",
                            fields.len(),
                            plural(fields.len())
                        ),
                    ));
                }
                Some(_) => {}
                None => width = Some((fields.len(), line)),
            }
            let sel = match &selection {
                Some(s) => s,
                None => selection.insert(select(
                    file,
                    columns,
                    names.as_deref(),
                    fields.len(),
                    wanted,
                    stream,
                )?),
            };
            for &c in sel.iter() {
                push_text(stream.dtype, fields[c], &mut samples).map_err(|e| {
                    let column = match &names {
                        Some(n) => format!("column {} '{}'", c + 1, n[c]),
                        None => format!("column {}", c + 1),
                    };
                    at(
                        line,
                        format!(
                            "{column}: value {e} (stream '{}' is {})",
                            stream.name,
                            stream.tensor_type()
                        ),
                    )
                })?;
            }
            lines.push(line);
        }
        if selection.is_none() {
            // No data rows: still check the columns against the header.
            select(
                file,
                columns,
                names.as_deref(),
                width.map_or(0, |w| w.0),
                wanted,
                stream,
            )?;
        }
        let feed = CsvFeed {
            file: file.to_string(),
            columns: describe_columns(columns),
            stream: stream.clone(),
            samples,
            lines,
            sample_bytes,
            end,
            next_row: 0,
            epoch: 0,
            delivered: 0,
            last_start: 0,
        };
        if feed.rows() < stream.samples() {
            return Err(FeedError::File {
                file: file.to_string(),
                message: format!(
                    "{} data row{}, but one micro-batch of stream '{}' ({}) needs {} \
                     (a micro-batch never holds a row twice)",
                    feed.rows(),
                    plural(feed.rows()),
                    stream.name,
                    stream.tensor_type(),
                    stream.samples()
                ),
            });
        }
        Ok(feed)
    }

    /// Data rows in the file.
    pub fn rows(&self) -> usize {
        self.lines.len()
    }

    /// The 1-based line number of data row `row`.
    pub fn line_of(&self, row: usize) -> Option<usize> {
        self.lines.get(row).copied()
    }

    /// Completed passes over the file and the next row to read.
    pub fn position(&self) -> (u64, usize) {
        (self.epoch, self.next_row)
    }
}

impl Feed for CsvFeed {
    fn fill(&mut self, stream: &StreamType, dst: &mut [u8]) -> Result<(), FeedError> {
        check_len(stream, self.delivered, dst)?;
        if stream.samples() * self.sample_bytes != dst.len() {
            return Err(FeedError::Value {
                stream: stream.name.clone(),
                micro_batch: self.delivered,
                message: format!(
                    "{} was read for {}, the device asks for {}",
                    self.file, self.stream, stream
                ),
            });
        }
        let n = stream.samples();
        if self.end == EndOfData::Stop && self.next_row + n > self.rows() {
            return Err(FeedError::Shorter {
                stream: stream.name.clone(),
                message: format!(
                    "{} has {} data rows (each read once), micro-batch {} needs rows {}..{}",
                    self.file,
                    self.rows(),
                    self.delivered,
                    self.next_row + 1,
                    self.next_row + n
                ),
            });
        }
        self.last_start = if self.next_row == self.rows() {
            0
        } else {
            self.next_row
        };
        for chunk in dst.chunks_exact_mut(self.sample_bytes) {
            if self.next_row == self.rows() {
                self.next_row = 0;
                self.epoch += 1;
            }
            let at = self.next_row * self.sample_bytes;
            chunk.copy_from_slice(&self.samples[at..at + self.sample_bytes]);
            self.next_row += 1;
        }
        self.delivered += 1;
        Ok(())
    }

    fn remaining(&self, stream: &StreamType) -> Option<u64> {
        match self.end {
            EndOfData::Wrap => None,
            EndOfData::Stop => Some(((self.rows() - self.next_row) / stream.samples()) as u64),
        }
    }

    fn describe(&self) -> String {
        format!("{}, {}", self.file, self.columns)
    }

    fn locate(&self, sample: usize) -> Option<String> {
        let row = (self.last_start + sample) % self.rows().max(1);
        Some(format!("{}:{}", self.file, self.line_of(row)?))
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn describe_columns(columns: &Columns) -> String {
    match columns {
        Columns::Range(a, b) => format!("columns {a}..{b}"),
        Columns::Names(n) if n.len() <= 4 => format!("columns {}", n.join(", ")),
        Columns::Names(n) => format!("{} named columns", n.len()),
    }
}

/// The 0-based field indices `columns` selects from rows of `fields` fields.
fn select(
    file: &str,
    columns: &Columns,
    names: Option<&[String]>,
    fields: usize,
    wanted: usize,
    stream: &StreamType,
) -> Result<Vec<usize>, FeedError> {
    let fail = |message: String| FeedError::File {
        file: file.to_string(),
        message,
    };
    let sel: Vec<usize> = match columns {
        Columns::Range(a, b) => {
            if *b > fields {
                return Err(fail(format!(
                    "columns Range({a}, {b}) of stream '{}' need {b} columns, the rows have {fields}",
                    stream.name
                )));
            }
            (*a..*b).collect()
        }
        Columns::Names(want) => {
            let Some(names) = names else {
                return Err(fail(format!(
                    "stream '{}' selects columns by name, but the file is read without a header \
                     (header: false)",
                    stream.name
                )));
            };
            want.iter()
                .map(|w| {
                    names
                        .iter()
                        .position(|n| n == w)
                        .ok_or_else(|| FeedError::Line {
                            file: file.to_string(),
                            line: 1,
                            message: format!(
                                "stream '{}' selects column '{w}', which the header does not have \
                                 (it has {})",
                                stream.name,
                                summarize_names(names)
                            ),
                        })
                })
                .collect::<Result<_, _>>()?
        }
    };
    if sel.len() != wanted {
        return Err(fail(format!(
            "stream '{}' ({}) needs {wanted} value{} per row (its shape without the batch \
             dimension), the selected columns give {}",
            stream.name,
            stream.tensor_type(),
            plural(wanted),
            sel.len()
        )));
    }
    Ok(sel)
}

fn summarize_names(names: &[String]) -> String {
    if names.len() <= 8 {
        names.join(", ")
    } else {
        format!(
            "{} columns: {}, ..., {}",
            names.len(),
            names[..4].join(", "),
            names[names.len() - 2..].join(", ")
        )
    }
}

/// The records of a CSV file: blank lines skipped, faults named by file and line.
struct Records<'f, R> {
    reader: ::csv::Reader<Lines<R>>,
    record: ::csv::StringRecord,
    file: &'f str,
}

impl<R: Read> Records<'_, R> {
    /// The line of the record just read: the line its end is on (a record's start, as the
    /// `csv` crate reports it, is that of the blank lines skipped before it; records do not
    /// span lines).
    fn line(&self) -> usize {
        let end = self.reader.position().byte();
        self.reader.get_ref().line_of(end.saturating_sub(1))
    }

    /// The next non-blank record and the line it starts on.
    fn next_row(&mut self) -> Result<Option<(usize, Vec<&str>)>, FeedError> {
        loop {
            let more = self.reader.read_record(&mut self.record).map_err(|e| {
                let line = self.line();
                match e.kind() {
                    ::csv::ErrorKind::Io(io) => FeedError::Io {
                        file: self.file.to_string(),
                        message: io.to_string(),
                    },
                    ::csv::ErrorKind::Utf8 { err, .. } => FeedError::Line {
                        file: self.file.to_string(),
                        line,
                        message: format!("field {} is not UTF-8 text", err.field() + 1),
                    },
                    _ => FeedError::Line {
                        file: self.file.to_string(),
                        line,
                        message: e.to_string(),
                    },
                }
            })?;
            if !more {
                return Ok(None);
            }
            let line = self.line();
            if self.record.len() == 1 && self.record[0].trim().is_empty() {
                continue;
            }
            if let Some(i) = self.record.iter().position(|f| f.contains(['\n', '\r'])) {
                return Err(FeedError::Line {
                    file: self.file.to_string(),
                    line,
                    message: format!(
                        "field {} has an unterminated quote (it runs past the end of its line)",
                        i + 1
                    ),
                });
            }
            return Ok(Some((line, self.record.iter().collect())));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipusim_ir::DType;

    fn stream(dtype: DType, shape: &[usize]) -> StreamType {
        StreamType::new("x", dtype, shape.to_vec())
    }

    fn parse(text: &str, columns: Columns, s: &StreamType) -> Result<CsvFeed, FeedError> {
        CsvFeed::parse(text, "d.csv", &columns, true, s, EndOfData::Wrap)
    }

    #[test]
    fn quotes_byte_order_marks_and_line_ends() {
        let s = stream(DType::F32, &[1, 3]);
        let text = "\u{feff}a,b,c\r\n\"1\", 2 ,\"3\"\r\n\r\n4,5,6";
        let mut f = parse(
            text,
            Columns::Names(vec!["a".into(), "b".into(), "c".into()]),
            &s,
        )
        .unwrap();
        assert_eq!(f.rows(), 2);
        assert_eq!(
            f.line_of(1),
            Some(4),
            "CRLF lines counted, the blank one skipped"
        );
        let mut buf = vec![0u8; 12];
        f.fill(&s, &mut buf).unwrap();
        assert_eq!(buf[..4], 1f32.to_le_bytes());
        assert_eq!(buf[8..], 3f32.to_le_bytes());
        let e = parse(
            "a\n\"say \"\"hi\"\"\"\n",
            Columns::Range(0, 1),
            &stream(DType::F32, &[1, 1]),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("d.csv:2: error: column 1 'a': value 'say \"hi\"' is not a number"),
            "{e}"
        );
    }

    #[test]
    fn lines_without_an_end_are_refused() {
        let s = stream(DType::U8, &[1, 1]);
        let e = CsvFeed::read(
            std::io::repeat(b'1'),
            "zero.csv",
            &Columns::Range(0, 1),
            false,
            &s,
            EndOfData::Wrap,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "zero.csv: error: cannot read the data file: a line is longer than 16777216 bytes"
        );
        let e = CsvFeed::read(
            &b"a\n1\n\xff\n"[..],
            "u.csv",
            &Columns::Range(0, 1),
            true,
            &s,
            EndOfData::Wrap,
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "u.csv:3: error: field 1 is not UTF-8 text");
    }

    #[test]
    fn rows_become_samples_and_wrap() {
        let text = "a,b,label\n1,2,0\n3,4,1\n\n5,6,2\n";
        let s = stream(DType::U8, &[2, 2]);
        let mut f = parse(text, Columns::Range(0, 2), &s).unwrap();
        assert_eq!(f.rows(), 3);
        assert_eq!(f.line_of(2), Some(5), "blank lines skipped, lines counted");
        let mut buf = vec![0u8; 4];
        f.fill(&s, &mut buf).unwrap();
        assert_eq!(buf, [1, 2, 3, 4]);
        f.fill(&s, &mut buf).unwrap();
        assert_eq!(buf, [5, 6, 1, 2], "wraps around: a new epoch");
        assert_eq!(f.position(), (1, 1));
        let at = |s| f.locate(s).unwrap();
        assert!(
            at(0).ends_with(":5") && at(1).ends_with(":2"),
            "{} {}",
            at(0),
            at(1)
        );
        assert_eq!(f.remaining(&s), None);
        let l = stream(DType::I32, &[3]);
        let mut f = parse(text, Columns::Names(vec!["label".into()]), &l).unwrap();
        let mut buf = vec![0u8; 12];
        f.fill(&l, &mut buf).unwrap();
        assert_eq!(buf[4..8], 1i32.to_le_bytes());
    }

    #[test]
    fn stop_mode_reports_a_short_file() {
        let s = stream(DType::F32, &[2]);
        let mut f = CsvFeed::column("v\n1\n2\n3\n", &s, EndOfData::Stop);
        assert_eq!(f.remaining(&s), Some(1), "the third row is dropped");
        let mut buf = vec![0u8; 8];
        f.fill(&s, &mut buf).unwrap();
        let e = f.fill(&s, &mut buf).unwrap_err();
        assert_eq!(
            e.to_string(),
            "infeed 'x' is shorter than the run needs: d.csv has 3 data rows (each read once), \
             micro-batch 1 needs rows 3..4"
        );
    }

    #[test]
    fn faults_name_file_line_and_column() {
        let s = stream(DType::U8, &[1, 2]);
        let e = parse("a,b\n1,2\n3,300\n", Columns::Range(0, 2), &s).unwrap_err();
        assert_eq!(
            e.to_string(),
            "d.csv:3: error: column 2 'b': value '300' does not fit u8 (integers 0..=255) \
             (stream 'x' is u8[1, 2])"
        );
        let e = parse("a,b\n1,2\n3\n", Columns::Range(0, 2), &s).unwrap_err();
        assert_eq!(
            e.to_string(),
            "d.csv:3: error: the row has 1 field, the header (line 1) has 2"
        );
        let e = parse("a,b\n1,x\n", Columns::Range(0, 2), &s).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("d.csv:2: error: column 2 'b': value 'x' is not a number"));
        let e = parse("a,b\n1,\"2\n", Columns::Range(0, 2), &s).unwrap_err();
        assert_eq!(
            e.to_string(),
            "d.csv:2: error: field 2 has an unterminated quote (it runs past the end of its line)"
        );
        let e = parse("a,b\n1,2\n", Columns::Range(0, 3), &s).unwrap_err();
        assert!(
            e.to_string().contains("need 3 columns, the rows have 2"),
            "{e}"
        );
        let e = parse("a,b\n1,2\n", Columns::Range(0, 1), &s).unwrap_err();
        assert!(e.to_string().contains("needs 2 values per row"), "{e}");
        let e = parse(
            "a,b\n1,2\n",
            Columns::Names(vec!["c".into(), "a".into()]),
            &s,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "d.csv:1: error: stream 'x' selects column 'c', which the header does not have (it has a, b)"
        );
        let big = stream(DType::U8, &[4, 2]);
        let e = parse("a,b\n1,2\n", Columns::Range(0, 2), &big).unwrap_err();
        assert!(
            e.to_string().contains("1 data row, but one micro-batch"),
            "{e}"
        );
        let e = CsvFeed::open(
            Path::new("/no/such/file.csv"),
            &Columns::Range(0, 2),
            true,
            &s,
            EndOfData::Wrap,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("/no/such/file.csv: error: cannot read"),
            "{e}"
        );
    }
}

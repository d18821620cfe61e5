//! CSV files as infeeds: each row is one sample of a stream (its shape without the leading
//! batch dimension, row-major), so a micro-batch of shape `[16, 64]` is 16 rows of 64
//! selected columns.
//!
//! The whole file is read, checked and converted to stream bytes when the feed is opened,
//! so every fault is found before the device runs and is reported with its file and line:
//! a row with another number of fields than the header (or the first row), a malformed
//! field (an unterminated quote), a value that is not a number or does not fit the stream's
//! dtype (`300` for a `u8` stream), a column selection that does not exist or does not give
//! exactly one sample's elements, a file with too few rows (see [`super::EndOfData`]).
//!
//! The dialect: comma-separated fields, optional double quotes around a field (`""` is a
//! quote inside one; fields do not span lines), `\n` or `\r\n` line ends, blank lines
//! skipped, surrounding spaces of a field ignored.

use super::{check_len, EndOfData, Feed, FeedError};
use crate::codec::push_text;
use crate::stream::StreamType;
use ipusim_ir::Columns;
use std::path::Path;

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
        let text = std::fs::read_to_string(path).map_err(|e| FeedError::Io {
            file: file.clone(),
            message: e.to_string(),
        })?;
        CsvFeed::parse(&text, &file, columns, header, stream, end)
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
        let at = |line: usize, message: String| FeedError::Line {
            file: file.to_string(),
            line,
            message,
        };
        let mut records = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l))
            .filter(|(_, l)| !l.trim().is_empty());
        let mut names: Option<Vec<String>> = None;
        let mut width: Option<(usize, usize)> = None; // (fields, line that set it)
        if header {
            match records.next() {
                Some((line, l)) => {
                    let fields = split_fields(l).map_err(|m| at(line, m))?;
                    width = Some((fields.len(), line));
                    names = Some(fields.into_iter().map(|f| f.trim().to_string()).collect());
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
        for (line, l) in records {
            let fields = split_fields(l).map_err(|m| at(line, m))?;
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
                push_text(stream.dtype, &fields[c], &mut samples).map_err(|e| {
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

/// The fields of one CSV line.
fn split_fields(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut chars = line.trim_end_matches('\r').chars().peekable();
    loop {
        let mut field = String::new();
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => {
                        return Err(format!(
                            "field {} has an unterminated quote",
                            fields.len() + 1
                        ))
                    }
                }
            }
            while chars.peek() == Some(&' ') {
                chars.next();
            }
            match chars.peek() {
                None | Some(',') => {}
                Some(c) => {
                    return Err(format!(
                        "field {}: unexpected '{c}' after a quoted value",
                        fields.len() + 1
                    ))
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                field.push(c);
                chars.next();
            }
        }
        fields.push(field);
        match chars.next() {
            Some(',') => continue,
            _ => break,
        }
    }
    Ok(fields)
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
    fn fields_and_quotes() {
        assert_eq!(split_fields("1, 2 ,3").unwrap(), vec!["1", "2 ", "3"]);
        assert_eq!(
            split_fields("\"a,b\",\"say \"\"hi\"\"\",").unwrap(),
            vec!["a,b", "say \"hi\"", ""]
        );
        assert!(split_fields("\"open").is_err());
        assert!(split_fields("\"a\"b").is_err());
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
            "d.csv:2: error: field 2 has an unterminated quote"
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

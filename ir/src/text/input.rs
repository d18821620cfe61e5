//! Reading an input file whole, with a size limit: the one way ipusim reads the program,
//! checkpoint and report files a user names; [`read_beside`] reads a byte range of a data file
//! beside a program or model (weights, ONNX external data).
//!
//! A file is read through a bounded reader, so a file larger than its limit (or a FIFO or
//! device that never ends, such as `/dev/zero`) is refused after reading at most one byte past
//! the limit, never by allocating its size; a directory is refused by name; the text must be
//! UTF-8 (the error names the line of the first bad byte). A UTF-8 byte-order mark at the
//! start is dropped, as editors on Windows write one.

use std::io::Read;
use std::path::Path;
use thiserror::Error;

/// Why a file could not be read as text. The message is a sentence without the file name (the
/// caller adds it, with its own prefix); `what` is the kind of file ("program", "report", ...).
#[derive(Debug, Error)]
pub enum ReadError {
    /// The path names a directory.
    #[error("cannot read the {what}: it is a directory")]
    Directory {
        /// The kind of file.
        what: String,
    },
    /// The operating system refused to open or read it.
    #[error("cannot read the {what}: {source}")]
    Io {
        /// The kind of file.
        what: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// The file (or stream) is longer than the limit.
    #[error("the {what} is larger than {limit} bytes, the most ipusim reads")]
    TooLarge {
        /// The kind of file.
        what: String,
        /// The limit in bytes.
        limit: u64,
    },
    /// A byte sequence is not UTF-8.
    #[error("the {what} is not UTF-8 text (line {line}, byte {byte} is not valid UTF-8)")]
    NotUtf8 {
        /// The kind of file.
        what: String,
        /// The 1-based line of the first bad byte.
        line: usize,
        /// The 0-based offset of the first bad byte.
        byte: usize,
    },
}

/// Largest program file read (bytes): 256 MiB, some 2.5 million nodes of the text format.
pub const MAX_PROGRAM_BYTES: u64 = 256 << 20;

/// The UTF-8 byte-order mark.
const BOM: &str = "\u{feff}";

/// Reads the file at `path` (a `what` such as "program" for messages) as UTF-8 text of at most
/// `limit` bytes. The error's message is a sentence without the file name (the caller adds it).
pub fn read_text(path: &Path, limit: u64, what: &str) -> Result<String, ReadError> {
    let what = || what.to_string();
    if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        return Err(ReadError::Directory { what: what() });
    }
    let io = |source| ReadError::Io {
        what: what(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    // A regular file's size is known: read it into one allocation of that size.
    let size = file
        .metadata()
        .ok()
        .filter(|m| m.is_file())
        .map_or(0, |m| m.len().min(limit));
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0).saturating_add(1));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge {
            what: what(),
            limit,
        });
    }
    match String::from_utf8(bytes) {
        Ok(text) => Ok(strip_bom(text)),
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            let line = 1 + e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count();
            Err(ReadError::NotUtf8 {
                what: what(),
                line,
                byte: at,
            })
        }
    }
}

/// Most characters of a user's value quoted whole in an error message.
pub const MAX_QUOTED_CHARS: usize = 64;

/// `text` as quoted in an error message: whole when short, otherwise its first
/// [`MAX_QUOTED_CHARS`] characters and how long it is (a 10 MB field is not echoed whole).
pub fn clip(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED_CHARS) {
        None => text.to_string(),
        Some((end, _)) => format!("{}... ({} bytes)", &text[..end], text.len()),
    }
}

/// `text` without a leading byte-order mark.
pub fn strip_bom(text: String) -> String {
    match text.strip_prefix(BOM) {
        Some(rest) => rest.to_string(),
        None => text,
    }
}

/// Reads `need` bytes from byte `offset` of the file `rel`, a path inside `dir` (relative,
/// without `..`): the data files beside a program (weights) or a model (ONNX external data).
/// `what` names the kind of file and `owner` what it sits beside, for the messages. The file's
/// size is checked before anything is allocated.
pub fn read_beside(
    dir: &Path,
    rel: &str,
    offset: u64,
    need: u64,
    what: &str,
    owner: &str,
) -> Result<Vec<u8>, String> {
    let r = Path::new(rel);
    if r.is_absolute() || r.components().any(|c| c == std::path::Component::ParentDir) {
        return Err(format!(
            "{what} '{rel}' must be a path inside the {owner}'s directory"
        ));
    }
    let path = dir.join(r);
    let mut file = std::fs::File::open(&path)
        .map_err(|e| format!("cannot open {what} {}: {e}", path.display()))?;
    let size = file
        .metadata()
        .map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?
        .len();
    if offset.saturating_add(need) > size {
        return Err(format!(
            "{what} {} holds {size} bytes; {need} are needed from offset {offset}",
            path.display()
        ));
    }
    let mut bytes = vec![0u8; need as usize];
    use std::io::{Seek, SeekFrom};
    file.seek(SeekFrom::Start(offset))
        .and_then(|_| file.read_exact(&mut bytes))
        .map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_clipped() {
        assert_eq!(clip("abc"), "abc");
        let long = "é".repeat(1000);
        assert_eq!(clip(&long), format!("{}... (2000 bytes)", "é".repeat(64)));
    }

    #[test]
    fn limits_directories_and_encodings() {
        let dir = std::env::temp_dir().join(format!("ipusim-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("p.ron");
        std::fs::write(&f, "\u{feff}Program()").unwrap();
        assert_eq!(read_text(&f, 100, "program").unwrap(), "Program()");
        assert_eq!(
            read_text(&f, 4, "program").unwrap_err().to_string(),
            "the program is larger than 4 bytes, the most ipusim reads"
        );
        std::fs::write(&f, b"a\nb\xff").unwrap();
        assert!(read_text(&f, 100, "program")
            .unwrap_err()
            .to_string()
            .contains("line 2, byte 3"));
        assert!(read_text(&dir, 100, "program")
            .unwrap_err()
            .to_string()
            .contains("it is a directory"));
        if Path::new("/dev/zero").exists() {
            assert!(read_text(Path::new("/dev/zero"), 1000, "report")
                .unwrap_err()
                .to_string()
                .contains("larger than 1000 bytes"));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

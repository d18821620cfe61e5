//! Writing output files whole or not at all.
//!
//! Checkpoints, reports and traces are written to a temporary file in the destination's
//! directory, flushed to disk, and renamed over the destination — a rename within one
//! directory is atomic on POSIX file systems. A crash or an error half-way leaves at most
//! the temporary file (removed on error), never a truncated file under the real name that
//! claims to be complete; an existing file is replaced only by a complete new one.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// A file that could not be written (the temporary file is removed; the destination is as it
/// was).
#[derive(Debug, Error)]
#[error("{}: error: cannot write the file: {source}", path.display())]
pub struct WriteError {
    /// The destination.
    pub path: PathBuf,
    /// The system's error.
    pub source: std::io::Error,
}

/// Writes `bytes` to `path` atomically; the error names the file.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    write_atomically_with(path, |w| w.write_all(bytes))
}

/// Writes what `write` writes (through a buffer) to `path` atomically: a large document goes
/// to its file without being held whole first. An error of `write` is the file's error.
pub fn write_atomically_with(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), WriteError> {
    let tmp = temp_path(path);
    let result = (|| -> std::io::Result<()> {
        let mut f = BufWriter::new(std::fs::File::create(&tmp)?);
        write(&mut f)?;
        let f = f.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        WriteError {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// `dir/.name.ipusim-tmp.PID` next to `path`.
fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    path.with_file_name(format!(".{name}.ipusim-tmp.{}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_whole_files_and_leaves_nothing_on_error() {
        let dir = std::env::temp_dir().join(format!("ipusim-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("out.json");
        write_atomically(&p, b"{}").unwrap();
        write_atomically(&p, b"{\"a\": 1}").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "{\"a\": 1}");
        let bad = dir.join("no/such/dir/out.json");
        let e = write_atomically(&bad, b"x").unwrap_err().to_string();
        assert!(
            e.contains("no/such/dir/out.json: error: cannot write"),
            "{e}"
        );
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 1, "only out.json");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

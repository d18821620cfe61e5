//! The one writer of the command line: stdout, output files and special files.
//!
//! Every command writes through this module, so every write error is reported (a full disk,
//! `> /dev/full`, a directory that vanished) with the file it concerns, and the command exits
//! 1. The only error that ends a command quietly is a closed pipe on stdout (`ipusim ... |
//! head`), which is what a reader closing the pipe asks for.
//!
//! - **Checked before any work** ([`OutputPlan::check`]): every output path given on the
//!   command line is checked before the program is loaded or run: its directory exists, it
//!   is not a directory itself, it can be written, and no two outputs name the same file.
//!   A run that would fail at its last step because of a mistyped `--trace` directory fails
//!   at its first instead.
//! - **All or none** ([`OutputPlan::commit`]): the outputs of a command are staged as
//!   temporary files next to their destinations, then stdout is written, then every staged
//!   file is renamed over its destination (a rename within one directory is atomic). If any
//!   stage fails, the staged files are removed and no destination changes.
//! - **Special files** are written through, never replaced: a symlink's target is written
//!   (a dangling link's target is created), and a FIFO, a character device or a socket is
//!   opened and written in place (it cannot be staged, so it is written after every regular
//!   file has been staged).

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};

/// Most symlinks followed when resolving an output path (as the kernel's `ELOOP` limit).
const MAX_SYMLINKS: usize = 40;

/// What an output path leads to once its symlinks are followed.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// A regular file, or nothing yet: written through a staged temporary file.
    Regular,
    /// A FIFO, device or socket: written in place.
    Special,
}

/// What an output holds: bytes made beforehand, or a writer of them, called once with the
/// destination (a large JSON document goes to its file without being a string first).
pub enum Content<'a> {
    /// The bytes.
    Bytes(&'a [u8]),
    /// Writes the bytes to the destination it is given.
    Writer(&'a dyn Fn(&mut dyn Write) -> std::io::Result<()>),
}

impl Content<'_> {
    fn write_to(&self, w: &mut dyn Write) -> std::io::Result<()> {
        match self {
            Content::Bytes(b) => w.write_all(b),
            Content::Writer(f) => f(w),
        }
    }
}

/// One output of a command: the flag that named it, the path as given, and where the bytes
/// go after symlinks.
#[derive(Clone, Debug)]
struct Output {
    flag: String,
    path: PathBuf,
    resolved: PathBuf,
    kind: Kind,
}

/// The outputs of a command, checked before it does any work and written all or none.
#[derive(Clone, Debug, Default)]
pub struct OutputPlan {
    outputs: Vec<Output>,
}

/// Writes `text` to stdout. A closed pipe is not an error (the reader asked for no more);
/// any other failure is, naming stdout.
pub fn write_stdout(text: &str) -> Result<(), String> {
    write_stdout_content(&Content::Bytes(text.as_bytes()))
}

/// [`write_stdout`] of a [`Content`].
fn write_stdout_content(content: &Content) -> Result<(), String> {
    let mut out = BufWriter::new(std::io::stdout().lock());
    match content.write_to(&mut out).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(stdout_error(&e)),
    }
}

/// The message of a failed write to stdout.
pub fn stdout_error(e: &std::io::Error) -> String {
    format!("error: cannot write to stdout: {e}")
}

/// Writes `text` to stderr; there is nowhere left to report a failure, so it is ignored.
pub fn write_stderr(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

/// Follows the symlinks of `path` (relative targets against the link's directory).
fn resolve(path: &Path) -> Result<PathBuf, String> {
    let mut p = path.to_path_buf();
    for _ in 0..MAX_SYMLINKS {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&p)
                    .map_err(|e| format!("{}: error: cannot read the link: {e}", p.display()))?;
                p = match p.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target,
                };
            }
            _ => return Ok(p),
        }
    }
    Err(format!(
        "{}: error: too many levels of symbolic links",
        path.display()
    ))
}

/// The directory a file at `path` lives in (`.` for a bare name).
fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `dir/.name.ipusim-tmp.PID.N` next to `path`.
fn temp_path(path: &Path, n: usize) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    path.with_file_name(format!(".{name}.ipusim-tmp.{}.{n}", std::process::id()))
}

/// Checks that `path` can take an output: what it is, and that its directory is writable.
fn check_one(flag: &str, path: &Path) -> Result<Output, String> {
    let shown = path.display();
    if path.as_os_str().is_empty() {
        return Err(format!("error: {flag}: the file name is empty"));
    }
    let resolved = resolve(path)?;
    let kind = match std::fs::metadata(&resolved) {
        Ok(m) if m.is_dir() => {
            return Err(format!(
                "{shown}: error: {flag} names a directory, not a file"
            ))
        }
        Ok(m) if m.is_file() => {
            if m.permissions().readonly() {
                return Err(format!("{shown}: error: {flag}: the file is read-only"));
            }
            Kind::Regular
        }
        Ok(_) => Kind::Special,
        Err(e) if e.kind() == ErrorKind::NotFound => Kind::Regular,
        Err(e) => return Err(format!("{shown}: error: {flag}: cannot use the file: {e}")),
    };
    if kind == Kind::Regular {
        let dir = parent_dir(&resolved);
        match std::fs::metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(format!(
                    "{shown}: error: {flag}: {} is not a directory",
                    dir.display()
                ))
            }
            Err(e) => {
                return Err(format!(
                    "{shown}: error: {flag}: the directory {} does not exist or cannot be \
                     read ({e})",
                    dir.display()
                ))
            }
        }
        // The one sure test of writability (permissions, read-only mounts, ACLs): create a
        // file there, and remove it.
        let probe = temp_path(&resolved, usize::MAX);
        match OpenOptions::new().write(true).create_new(true).open(&probe) {
            Ok(f) => {
                drop(f);
                let _ = std::fs::remove_file(&probe);
            }
            Err(e) => {
                return Err(format!(
                    "{shown}: error: {flag}: cannot write in the directory {}: {e}",
                    dir.display()
                ))
            }
        }
    }
    Ok(Output {
        flag: flag.to_string(),
        path: path.to_path_buf(),
        resolved,
        kind,
    })
}

/// The absolute form of a resolved output path, for telling whether two outputs collide.
fn identity(resolved: &Path) -> PathBuf {
    let dir = std::fs::canonicalize(parent_dir(resolved)).unwrap_or_else(|_| parent_dir(resolved));
    match resolved.file_name() {
        Some(name) => dir.join(name),
        None => dir,
    }
}

impl OutputPlan {
    /// Checks every `(flag, path)` output before any work: see the module docs.
    pub fn check<'a>(
        outputs: impl IntoIterator<Item = (&'a str, Option<&'a Path>)>,
    ) -> Result<OutputPlan, String> {
        let mut plan = OutputPlan::default();
        for (flag, path) in outputs {
            let Some(path) = path else { continue };
            let out = check_one(flag, path)?;
            if out.kind == Kind::Regular {
                let id = identity(&out.resolved);
                if let Some(other) = plan
                    .outputs
                    .iter()
                    .find(|o| o.kind == Kind::Regular && identity(&o.resolved) == id)
                {
                    return Err(format!(
                        "{}: error: {} and {} name the same file",
                        path.display(),
                        other.flag,
                        flag
                    ));
                }
            }
            plan.outputs.push(out);
        }
        Ok(plan)
    }

    /// Writes `files` (`(flag, bytes)`, each flag one checked by [`OutputPlan::check`]) and
    /// then `stdout`, all or none: see the module docs. Flags without bytes are not written.
    pub fn commit(&self, files: &[(&str, &[u8])], stdout: Option<&str>) -> Result<(), String> {
        let files: Vec<(&str, Content)> = (files.iter())
            .map(|&(flag, bytes)| (flag, Content::Bytes(bytes)))
            .collect();
        self.commit_contents(&files, stdout.map(|t| Content::Bytes(t.as_bytes())))
    }

    /// [`OutputPlan::commit`] of [`Content`]s: a writer is called once, with the staged
    /// file, the special file or stdout (buffered), as bytes would be written there.
    pub fn commit_contents(
        &self,
        files: &[(&str, Content)],
        stdout: Option<Content>,
    ) -> Result<(), String> {
        let mut staged: Vec<(PathBuf, &Output)> = Vec::new();
        let cleanup = |staged: &[(PathBuf, &Output)]| {
            for (tmp, _) in staged {
                let _ = std::fs::remove_file(tmp);
            }
        };
        let lookup = |flag: &str| self.outputs.iter().find(|o| o.flag == flag);
        // 1. Stage every regular file.
        for (n, (flag, bytes)) in files.iter().enumerate() {
            let Some(out) = lookup(flag) else { continue };
            if out.kind != Kind::Regular {
                continue;
            }
            let tmp = temp_path(&out.resolved, n);
            let written = (|| {
                let mut f = BufWriter::new(File::create(&tmp)?);
                bytes.write_to(&mut f)?;
                f.into_inner().map_err(|e| e.into_error())?.sync_all()
            })();
            if let Err(e) = written {
                let _ = std::fs::remove_file(&tmp);
                cleanup(&staged);
                return Err(format!(
                    "{}: error: cannot write the file ({}): {e}",
                    out.path.display(),
                    out.flag
                ));
            }
            staged.push((tmp, out));
        }
        // 2. Special files, written in place.
        for (flag, bytes) in files {
            let Some(out) = lookup(flag) else { continue };
            if out.kind != Kind::Special {
                continue;
            }
            let written = (OpenOptions::new().write(true).open(&out.resolved)).and_then(|f| {
                let mut f = BufWriter::new(f);
                bytes.write_to(&mut f).and_then(|_| f.flush())
            });
            if let Err(e) = written {
                cleanup(&staged);
                return Err(format!(
                    "{}: error: cannot write ({}): {e}",
                    out.path.display(),
                    out.flag
                ));
            }
        }
        // 3. Stdout.
        if let Some(content) = stdout {
            if let Err(e) = write_stdout_content(&content) {
                cleanup(&staged);
                return Err(e);
            }
        }
        // 4. Every staged file under its name.
        for (i, (tmp, out)) in staged.iter().enumerate() {
            if let Err(e) = std::fs::rename(tmp, &out.resolved) {
                cleanup(&staged[i..]);
                return Err(format!(
                    "{}: error: cannot write the file ({}): {e}",
                    out.path.display(),
                    out.flag
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ipusim-output-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn missing_directories_and_collisions_are_refused_before_work() {
        let dir = scratch("check");
        let bad = dir.join("no/such/t.json");
        let e = OutputPlan::check([("--trace", Some(bad.as_path()))]).unwrap_err();
        assert!(e.contains("--trace: the directory"), "{e}");
        assert!(e.contains("does not exist"), "{e}");
        let e = OutputPlan::check([("-o", Some(dir.as_path()))]).unwrap_err();
        assert!(e.contains("-o names a directory"), "{e}");
        let a = dir.join("a.json");
        let e = OutputPlan::check([("-o", Some(a.as_path())), ("--trace", Some(a.as_path()))])
            .unwrap_err();
        assert!(e.contains("-o and --trace name the same file"), "{e}");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "nothing left");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn symlinks_are_written_through() {
        let dir = scratch("link");
        let target = dir.join("real.json");
        std::fs::write(&target, "old").unwrap();
        let link = dir.join("link.json");
        std::os::unix::fs::symlink("real.json", &link).unwrap();
        let plan = OutputPlan::check([("-o", Some(link.as_path()))]).unwrap();
        plan.commit(&[("-o", b"new")], None).unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            2,
            "no temporary left"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_special_file_leaves_no_regular_file() {
        let dir = scratch("full");
        let a = dir.join("a.json");
        let full = Path::new("/dev/full");
        if !full.exists() {
            return;
        }
        let plan = OutputPlan::check([("-o", Some(a.as_path())), ("--trace", Some(full))]).unwrap();
        let e = plan
            .commit(&[("-o", b"a"), ("--trace", b"t")], None)
            .unwrap_err();
        assert!(
            e.starts_with("/dev/full: error: cannot write (--trace)"),
            "{e}"
        );
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "all or none");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn writers_write_their_files_and_a_failed_writer_changes_nothing() {
        let dir = scratch("writer");
        let (a, b) = (dir.join("a.json"), dir.join("b.json"));
        std::fs::write(&b, "old").unwrap();
        let plan =
            OutputPlan::check([("-o", Some(a.as_path())), ("--trace", Some(b.as_path()))]).unwrap();
        let good = |w: &mut dyn Write| w.write_all(b"streamed");
        let files = [
            ("-o", Content::Writer(&good)),
            ("--trace", Content::Bytes(b"new")),
        ];
        plan.commit_contents(&files, None).unwrap();
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "streamed");
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "new");
        // A writer failing half-way: neither destination changes, no temporary is left.
        let bad = |w: &mut dyn Write| {
            w.write_all(b"half")?;
            Err(std::io::Error::other("the serialiser failed"))
        };
        let files = [
            ("--trace", Content::Bytes(b"newer")),
            ("-o", Content::Writer(&bad)),
        ];
        let e = plan.commit_contents(&files, None).unwrap_err();
        assert!(
            e.ends_with("cannot write the file (-o): the serialiser failed"),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "streamed");
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "new");
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            2,
            "no temporary left"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

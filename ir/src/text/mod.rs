//! The text format of programs: RON that a person writes by hand (`docs/program-format.md`).
//!
//! ```text
//! Program(
//!     name: "tiny",
//!     nodes: [
//!         (name: "x", op: Input(stream: "x", dtype: F32, shape: [4, 8])),
//!         (name: "y", op: Relu, inputs: ["x"]),
//!         (name: "out", op: Outfeed(stream: "y"), inputs: ["y"]),
//!     ],
//! )
//! ```
//!
//! Nodes name their inputs and may appear in any order. [`parse_program`] reads a program,
//! builds its graph (inferring every type) and validates it ([`crate::validate`]); every fault
//! is a [`ProgramError`] with the file, line and column where the user wrote the faulty node
//! or field. [`to_ron`] writes a program back, stably, so that it re-parses to an equal
//! program.
//!
//! Modules: [`outline`] finds the spans of the document's values, `doc` holds the serde
//! types of the file and converts them, `locate` maps faults to spans, [`error`] renders them,
//! `weights` reads and writes the weights files of large variables.

mod doc;
pub mod error;
pub mod input;
mod lexer;
mod locate;
pub mod outline;
mod weights;

pub use weights::INLINE_MAX;

pub use error::{ErrorKind, ProgramError};

use crate::error::IrError;
use crate::program::Program;
use locate::SourceMap;
use ron::extensions::Extensions;
use std::path::Path;

/// The `ron` options of the format: `Some(...)` may be omitted around optional values.
fn options() -> ron::Options {
    ron::Options::default().with_default_extension(Extensions::IMPLICIT_SOME)
}

/// Parses and validates a program; `file` names the source in errors.
pub fn parse_program(source: &str, file: &str) -> Result<Program, ProgramError> {
    // A byte-order mark is not part of the text (editors do not count it as a column).
    let source = source.strip_prefix('\u{feff}').unwrap_or(source);
    let map = SourceMap::new(file, source);
    let mut doc: doc::ProgramDoc = options().from_str(source).map_err(|e| map.ron_error(&e))?;
    let base = Path::new(file).parent().unwrap_or(Path::new(""));
    weights::read(&mut doc, base, &map)?;
    doc::build(doc, &map)
}

/// Reads, parses and validates a program file. A file that cannot be read is a
/// [`ProgramError`] of kind [`ErrorKind::Io`] naming the file; so is one larger than
/// [`input::MAX_PROGRAM_BYTES`] or not UTF-8.
pub fn load_program(path: &Path) -> Result<Program, ProgramError> {
    let file = path.display().to_string();
    let source = input::read_text(path, input::MAX_PROGRAM_BYTES, "program")
        .map_err(|e| ProgramError::whole_file(&file, ErrorKind::Io, e.to_string()))?;
    parse_program(&source, &file)
}

/// The program as text: `Program(...)` with one node per line in a stable topological order,
/// fields at their defaults omitted. Re-parses to an equal program.
pub fn to_ron(program: &Program) -> String {
    render(doc::from_program(program))
}

/// The program as text with the values of its large variables (more than [`INLINE_MAX`]) in
/// a weights file named `weights` beside it (`init: File(path: ..., offset: ..., encoding:
/// ...)`), and that file's bytes. Reading the text back from a file next to the weights gives
/// an equal program.
pub fn to_ron_with_weights(program: &Program, weights: &str) -> (String, Vec<u8>) {
    let mut doc = doc::from_program(program);
    let bytes = weights::split(&mut doc, weights);
    (render(doc), bytes)
}

fn render(doc: doc::ProgramDoc) -> String {
    let config = ron::ser::PrettyConfig::new()
        .depth_limit(2)
        .indentor("    ".to_string());
    match ron::ser::to_string_pretty(&doc, config) {
        Ok(body) => format!("Program{body}\n"),
        // Serialising these plain data types cannot fail; say so in RON if it ever does.
        Err(e) => format!("// error: cannot write the program as RON: {e}\n"),
    }
}

/// Renders an IR error about a program parsed from `source` at the node or field it names
/// (for checks made after parsing, such as a CSV file that does not exist).
pub fn error_in_source(source: &str, file: &str, err: &IrError) -> ProgramError {
    SourceMap::new(file, source).ir_error(err, false)
}

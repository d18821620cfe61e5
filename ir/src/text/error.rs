//! [`ProgramError`]: an error in a program file, with its file, line and column, rendered for
//! humans the way rustc and naga render theirs: the position, the message, the offending
//! source line with a caret under the fault, and notes.

use super::outline::Span;
use std::fmt;

/// What kind of fault a [`ProgramError`] reports (for tools and tests that react to it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The file could not be read.
    Io,
    /// RON syntax, or a value of the wrong form (unknown or missing field, bad attribute type).
    Syntax,
    /// An op name that is not in [`crate::Op::NAMES`].
    UnknownOp,
    /// A dtype name that is not one of `F16`, `F32`, `I32`, `U8`, `Bool`.
    UnknownDType,
    /// A node input that names no node.
    MissingInput,
    /// Two nodes with one name.
    DuplicateName,
    /// Two streams with one name.
    DuplicateStream,
    /// Nodes that read each other in a cycle.
    Cycle,
    /// Inputs of the wrong dtype for their op.
    Type,
    /// Shapes that do not fit, bad shape attributes, or a wrong number of inputs.
    Shape,
    /// Any other broken invariant of the validator (phases, assigns, training spec, feeds).
    Invalid,
}

/// An error in a program file.
///
/// It carries the file, the 1-based line and column (the column counts characters; both are
/// 0 when the error concerns the whole file, e.g. it could not be read), the kind of fault and
/// a one-line message. `Display` renders `file:line:col: error: message`, then the source line
/// with carets under the fault, then any `note:`/`help:` lines. The details are boxed so that
/// `Result<Program, ProgramError>` stays small.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramError(Box<Details>);

#[derive(Clone, Debug, PartialEq, Eq)]
struct Details {
    file: String,
    line: usize,
    column: usize,
    kind: ErrorKind,
    message: String,
    source_line: Option<String>,
    width: usize,
    notes: Vec<String>,
}

impl ProgramError {
    /// An error about the whole file (no position).
    pub fn whole_file(file: &str, kind: ErrorKind, message: impl Into<String>) -> ProgramError {
        ProgramError(Box::new(Details {
            file: file.to_string(),
            line: 0,
            column: 0,
            kind,
            message: message.into(),
            source_line: None,
            width: 1,
            notes: Vec::new(),
        }))
    }

    /// An error at `line:column` (1-based) of `source`, underlining `width` characters (clamped
    /// to the rest of the line).
    pub fn at(
        file: &str,
        source: &str,
        line: usize,
        column: usize,
        width: usize,
        kind: ErrorKind,
        message: impl Into<String>,
    ) -> ProgramError {
        let line = line.max(1);
        let column = column.max(1);
        let text = source
            .lines()
            .nth(line - 1)
            .map(|l| l.trim_end().to_string());
        let room = text
            .as_ref()
            .map_or(1, |t| t.chars().count().saturating_sub(column - 1).max(1));
        ProgramError(Box::new(Details {
            file: file.to_string(),
            line,
            column,
            kind,
            message: message.into(),
            source_line: text,
            width: width.clamp(1, room),
            notes: Vec::new(),
        }))
    }

    /// An error at `span` of `source` (spans that continue on later lines underline to the
    /// end of the first line).
    pub(crate) fn at_span(
        file: &str,
        source: &str,
        span: Span,
        kind: ErrorKind,
        message: impl Into<String>,
    ) -> ProgramError {
        let width = if span.end.line == span.start.line {
            span.end.col.saturating_sub(span.start.col)
        } else {
            usize::MAX
        };
        ProgramError::at(
            file,
            source,
            span.start.line,
            span.start.col,
            width,
            kind,
            message,
        )
    }

    /// Adds a `note:` line.
    pub fn note(mut self, note: impl fmt::Display) -> ProgramError {
        self.0.notes.push(format!("note: {note}"));
        self
    }

    /// Adds a `help:` line.
    pub fn help(mut self, help: impl fmt::Display) -> ProgramError {
        self.0.notes.push(format!("help: {help}"));
        self
    }

    /// The file, as given to the parser.
    pub fn file(&self) -> &str {
        &self.0.file
    }

    /// 1-based line (0: the error concerns the whole file).
    pub fn line(&self) -> usize {
        self.0.line
    }

    /// 1-based column, in characters (0: the error concerns the whole file).
    pub fn column(&self) -> usize {
        self.0.column
    }

    /// What kind of fault this is.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// The message: one line, without position or notes.
    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// The text of the offending source line, when there is one.
    pub fn source_line(&self) -> Option<&str> {
        self.0.source_line.as_deref()
    }

    /// How many characters are underlined from the column (at least 1).
    pub fn width(&self) -> usize {
        self.0.width
    }

    /// The `note:` and `help:` lines.
    pub fn notes(&self) -> &[String] {
        &self.0.notes
    }
}

impl fmt::Display for ProgramError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.0;
        if d.line == 0 {
            write!(f, "{}: error: {}", d.file, d.message)?;
        } else {
            write!(
                f,
                "{}:{}:{}: error: {}",
                d.file, d.line, d.column, d.message
            )?;
        }
        let gutter = " ".repeat(d.line.max(1).to_string().len());
        if let Some(text) = &d.source_line {
            let (text, column, width) = excerpt(text, d.column, d.width);
            // Keep tabs in the caret line so the carets line up under the fault.
            let pad: String = text
                .chars()
                .take(column - 1)
                .map(|c| if c == '\t' { '\t' } else { ' ' })
                .collect();
            write!(f, "\n{gutter} |\n{} | {text}", d.line)?;
            write!(f, "\n{gutter} | {pad}{}", "^".repeat(width))?;
        }
        for note in &d.notes {
            write!(f, "\n{gutter} = {note}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ProgramError {}

/// The characters of a source line shown around a fault: our choice, a terminal line's worth.
const EXCERPT_CHARS: usize = 120;

/// The part of source line `text` shown for a fault at 1-based `column` underlined for
/// `width` characters: the whole line when it is short, else [`EXCERPT_CHARS`] characters
/// from a little before the column, cut ends marked with `…` (a program written on one
/// line of megabytes would otherwise be echoed whole). Returns the excerpt and the column
/// and width within it.
fn excerpt(text: &str, column: usize, width: usize) -> (String, usize, usize) {
    let chars = text.chars().count();
    if chars <= EXCERPT_CHARS {
        return (text.to_string(), column.max(1), width);
    }
    let start = column
        .saturating_sub(1 + EXCERPT_CHARS / 4)
        .min(chars - EXCERPT_CHARS);
    let mut shown: String = text.chars().skip(start).take(EXCERPT_CHARS).collect();
    let mut column = column.max(1) - start;
    if start > 0 {
        shown.insert(0, '…');
        column += 1;
    }
    if start + EXCERPT_CHARS < chars {
        shown.push('…');
    }
    let width = width.min((EXCERPT_CHARS + 2).saturating_sub(column)).max(1);
    (shown, column, width)
}

/// The candidate closest to `word` by edit distance, if it is close enough to be a typo.
pub(crate) fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(&word.to_lowercase(), &c.to_lowercase()), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_position_line_and_carets() {
        let src = "a\n\tfoo: Bar,\n";
        let e = ProgramError::at("p.ron", src, 2, 7, 3, ErrorKind::Syntax, "bad").help("try `Baz`");
        assert_eq!(
            e.to_string(),
            "p.ron:2:7: error: bad\n  |\n2 | \tfoo: Bar,\n  | \t     ^^^\n  = help: try `Baz`"
        );
        let e = ProgramError::at("p.ron", src, 2, 7, 99, ErrorKind::Syntax, "x");
        assert_eq!(e.width(), 4, "clamped to the rest of the line");
        let e = ProgramError::whole_file("p.ron", ErrorKind::Io, "cannot read");
        assert_eq!(e.to_string(), "p.ron: error: cannot read");
        let e = ProgramError::at("p.ron", "", 9, 9, 1, ErrorKind::Syntax, "eof");
        assert_eq!(e.to_string(), "p.ron:9:9: error: eof");
    }

    /// A fault on a line longer than a terminal's shows the part of the line around it, the
    /// carets under the same characters; a short line is shown whole.
    #[test]
    fn a_long_line_is_shown_around_the_fault() {
        let line = format!("{}Bad{}", "a".repeat(5000), "b".repeat(5000));
        let e = ProgramError::at("p.ron", &line, 1, 5001, 3, ErrorKind::Syntax, "unknown op");
        let text = e.to_string();
        assert!(text.len() < 400, "{} bytes", text.len());
        let lines: Vec<&str> = text.lines().collect();
        let (shown, carets) = (lines[2], lines[3]);
        assert!(
            shown.starts_with("1 | …a") && shown.ends_with("b…"),
            "{shown}"
        );
        // The caret line is ASCII: its byte offset is the column, in characters.
        let at = carets.find('^').unwrap();
        let under: String = shown.chars().skip(at).take(3).collect();
        assert_eq!(under, "Bad");
        assert_eq!(carets.matches('^').count(), 3);
        // At the line's end and past it, no cut at the end.
        for column in [10_003, 10_004] {
            let e = ProgramError::at("p.ron", &line, 1, column, 1, ErrorKind::Syntax, "x");
            let text = e.to_string();
            assert!(text.lines().nth(2).unwrap().ends_with('b'), "{text}");
        }
    }

    #[test]
    fn suggestions() {
        assert_eq!(did_you_mean("Softmx", ["Softmax", "Sub"]), Some("Softmax"));
        assert_eq!(did_you_mean("f16", ["F16", "F32"]), Some("F16"));
        assert_eq!(did_you_mean("Conv2d", ["Add", "Sub"]), None);
    }
}

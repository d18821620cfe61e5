//! Maps faults back to the source: `ron` errors by their spans, IR errors by the node or field
//! they name, through the [`outline`](super::outline) of the document.

use super::error::{did_you_mean, ErrorKind, ProgramError};
use super::outline::{
    innermost, is_blank, node_index, node_name, node_name_lines, parse_path, span_of, Innermost,
    Span,
};
use crate::dtype::DType;
use crate::error::IrError;
use crate::op::Op;
use std::cell::RefCell;

/// A program's source, to locate its faults in.
///
/// Nothing is built ahead: a valid program (the common case, and the large one) never pays
/// for locating, and each lookup reads the source through the [`outline`](super::outline)
/// queries, in memory that does not grow with the document (a program of 400,000 nodes with
/// one error is located in a few kilobytes, not in a tree of every value).
pub(crate) struct SourceMap<'a> {
    file: &'a str,
    src: &'a str,
    /// The last position looked up by [`SourceMap::innermost`] (a `ron` error asks twice).
    last_innermost: RefCell<Option<((usize, usize), Innermost)>>,
}

impl<'a> SourceMap<'a> {
    pub(crate) fn new(file: &'a str, src: &'a str) -> SourceMap<'a> {
        SourceMap {
            file,
            src,
            last_innermost: RefCell::new(None),
        }
    }

    /// The span of the deepest item along `path` (the whole document if nothing matches).
    fn span(&self, path: &str) -> Span {
        span_of(self.src, &parse_path(path))
    }

    /// An error at the item a field path names.
    pub(crate) fn at(
        &self,
        path: &str,
        kind: ErrorKind,
        message: impl Into<String>,
    ) -> ProgramError {
        ProgramError::at_span(self.file, self.src, self.span(path), kind, message)
    }

    /// The line of the item a field path names.
    pub(crate) fn line_of(&self, path: &str) -> usize {
        self.span(path).start.line
    }

    /// The line of `nodes[i].name` for each `i` of `indices`, reading the source once (a
    /// cycle names every node on it).
    pub(crate) fn name_lines(&self, indices: &[usize]) -> Vec<usize> {
        let mut wanted = indices.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        let found = node_name_lines(self.src, &wanted);
        indices
            .iter()
            .map(|&i| match found.binary_search_by_key(&i, |&(j, _)| j) {
                Ok(k) => found[k].1,
                // Not an item of a node list: the path's deepest match, as `line_of` says.
                Err(_) => self.line_of(&format!("nodes[{i}].name")),
            })
            .collect()
    }

    /// The path of node `node` (the first item of the node list with that name), followed by
    /// `sub`; empty when no node has that name.
    fn node_path(&self, node: &str, sub: &str) -> String {
        match node_index(self.src, node) {
            Some(i) if sub.is_empty() => format!("nodes[{i}]"),
            Some(i) => format!("nodes[{i}].{sub}"),
            None => String::new(),
        }
    }

    /// The source error for an IR error; `inference` says it came from type inference while
    /// building the graph (so `Invalid` is a bad shape or attribute, not a broken invariant).
    pub(crate) fn ir_error(&self, err: &IrError, inference: bool) -> ProgramError {
        let message = err.to_string();
        let (path, kind) = match err {
            IrError::DTypeMismatch { node, b, .. } => (
                self.node_path(node, &format!("inputs[{}]", b.index)),
                ErrorKind::Type,
            ),
            IrError::BadDType { node, input, .. } => (
                self.node_path(node, &format!("inputs[{}]", input.index)),
                ErrorKind::Type,
            ),
            IrError::ShapeMismatch { node, b, .. } => (
                self.node_path(node, &format!("inputs[{}]", b.index)),
                ErrorKind::Shape,
            ),
            IrError::Arity { node, .. } => (self.node_path(node, "inputs"), ErrorKind::Shape),
            IrError::Invalid { node, .. } => (
                self.node_path(node, "op"),
                if inference {
                    ErrorKind::Shape
                } else {
                    ErrorKind::Invalid
                },
            ),
            IrError::DuplicateName(name) => {
                (self.node_path(name, "name"), ErrorKind::DuplicateName)
            }
            IrError::UnknownInput { node, .. } => {
                (self.node_path(node, "inputs"), ErrorKind::MissingInput)
            }
            IrError::DuplicateStream { second, .. } => (
                self.node_path(second, "op.stream"),
                ErrorKind::DuplicateStream,
            ),
            IrError::Cycle(names) => (
                names
                    .first()
                    .map(|n| self.node_path(n, "name"))
                    .unwrap_or_default(),
                ErrorKind::Cycle,
            ),
            IrError::Field { field, .. } => (field.clone(), ErrorKind::Invalid),
            IrError::Program(_) => (String::new(), ErrorKind::Invalid),
        };
        let mut e = self.at(&path, kind, message);
        if let IrError::DuplicateStream { first, .. } = err {
            e = e.note(format!(
                "the stream is first used by '{first}' at line {}",
                self.line_of(&self.node_path(first, "op.stream"))
            ));
        }
        if let IrError::DTypeMismatch { a, b, .. } = err {
            e = e.help(format!(
                "cast one input explicitly, e.g. (name: \"{}_{}\", op: Cast(dtype: {:?}), inputs: [\"{}\"])",
                b.name, a.ty.dtype, a.ty.dtype, b.name
            ));
        }
        e
    }

    /// The op name that ends just before `line:col` (1-based), with its column.
    fn op_before(&self, line: usize, col: usize) -> Option<(usize, &'static str)> {
        let text = self.src.lines().nth(line.checked_sub(1)?)?;
        let before: Vec<char> = text.chars().take(col.saturating_sub(1)).collect();
        let end = before.len()
            - before
                .iter()
                .rev()
                .take_while(|c| c.is_whitespace())
                .count();
        let ident_len = before[..end]
            .iter()
            .rev()
            .take_while(|c| c.is_alphanumeric() || **c == '_')
            .count();
        let ident: String = before[end - ident_len..end].iter().collect();
        let op = Op::NAMES.iter().find(|&&n| n == ident)?;
        Some((end - ident_len + 1, op))
    }

    /// True when nothing but whitespace and comments follows `line:col` (1-based).
    fn rest_is_blank(&self, line: usize, col: usize) -> bool {
        let mut offset = 0;
        for (i, l) in self.src.split_inclusive('\n').enumerate() {
            if i + 1 == line {
                offset += l
                    .char_indices()
                    .nth(col.saturating_sub(1))
                    .map_or(l.len(), |(o, _)| o);
                break;
            }
            offset += l.len();
        }
        is_blank(self.src.get(offset..).unwrap_or(""))
    }

    /// The innermost item whose span contains `line:col`, with its path (e.g.
    /// `nodes[1].op.axis`; `Some(x)` wrappers add no segment).
    fn innermost(&self, line: usize, col: usize) -> Innermost {
        let mut last = self.last_innermost.borrow_mut();
        match &*last {
            Some((at, found)) if *at == (line, col) => found.clone(),
            _ => {
                let found = innermost(self.src, line, col);
                *last = Some(((line, col), found.clone()));
                found
            }
        }
    }

    /// The path of the innermost field whose value contains `line:col`, naming the node when
    /// it is inside one: `nodes[1].op.axis (node 'probs')`.
    fn path_at(&self, line: usize, col: usize) -> Option<String> {
        let path = self.innermost(line, col).path;
        if path.is_empty() {
            return None;
        }
        // Name the node when the path is inside one (and it is the first of that name).
        let node = path.strip_prefix("nodes[").and_then(|rest| {
            let i: usize = rest.split(']').next()?.parse().ok()?;
            let name = node_name(self.src, i)?;
            (node_index(self.src, &name) == Some(i)).then_some(name)
        });
        Some(match node {
            Some(n) => format!("{path} (node '{n}')"),
            None => path,
        })
    }

    /// The source error for a `ron` parse or deserialization error.
    pub(crate) fn ron_error(&self, err: &ron::error::SpannedError) -> ProgramError {
        use ron::error::Error as E;
        let mut start = err.span.start;
        // ron's spans start before the whitespace that precedes the faulty token: skip it.
        if let Some(line) = self.src.lines().nth(start.line.saturating_sub(1)) {
            let blanks = line
                .chars()
                .skip(start.col.saturating_sub(1))
                .take_while(|c| c.is_whitespace())
                .count();
            if start.col + blanks <= line.chars().count() {
                start.col += blanks;
            }
        }
        let mut width = if err.span.end.line == start.line {
            err.span.end.col.saturating_sub(start.col)
        } else {
            1
        };
        // A value of the wrong form: underline the whole value and quote it.
        let mut found = String::new();
        if !matches!(
            err.code,
            E::ExpectedComma | E::NoSuchStructField { .. } | E::Eof | E::ExpectedStructLike
        ) {
            let item = self.innermost(start.line, start.col);
            let span = item.span;
            if item.atom && span.start.line == span.end.line {
                start.col = span.start.col;
                width = span.end.col.saturating_sub(span.start.col);
                if let Some(text) = self.src.get(span.start.offset..span.end.offset) {
                    found = format!(", found `{text}`");
                }
            }
        }
        let at = |kind, message: String| {
            ProgramError::at(
                self.file, self.src, start.line, start.col, width, kind, message,
            )
        };
        let e = match &err.code {
            E::NoSuchEnumVariant {
                expected,
                found,
                outer,
            } => {
                let what = outer.as_deref().unwrap_or("");
                let (kind, noun) = if *expected == Op::NAMES || what == "Op" {
                    (ErrorKind::UnknownOp, "op".to_string())
                } else if what == "DType" {
                    (ErrorKind::UnknownDType, "dtype".to_string())
                } else if what.is_empty() {
                    (ErrorKind::Syntax, "variant".to_string())
                } else {
                    (ErrorKind::Syntax, format!("{what} variant"))
                };
                let mut e = at(kind, format!("unknown {noun} '{found}'"));
                if let Some(s) = did_you_mean(found, expected.iter().copied()) {
                    e = e.help(format!("did you mean '{s}'?"));
                }
                let names = if kind == ErrorKind::UnknownDType {
                    DType::ALL
                        .iter()
                        .map(|d| format!("{d:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                } else {
                    expected.join(", ")
                };
                e.note(format!("the valid {noun}s are: {names}"))
            }
            E::NoSuchStructField {
                expected,
                found,
                outer,
            } => {
                let mut e = at(
                    ErrorKind::Syntax,
                    format!("unknown field '{found}'{}", in_outer(outer)),
                );
                if let Some(s) = did_you_mean(found, expected.iter().copied()) {
                    e = e.help(format!("did you mean '{s}'?"));
                }
                e.note(format!("the fields are: {}", expected.join(", ")))
            }
            E::MissingStructField { field, outer } => at(
                ErrorKind::Syntax,
                format!("missing field '{field}'{}", in_outer(outer)),
            ),
            E::DuplicateStructField { field, outer } => at(
                ErrorKind::Syntax,
                format!("field '{field}' is given twice{}", in_outer(outer)),
            ),
            E::InvalidValueForType { expected, found } => at(
                ErrorKind::Syntax,
                format!("expected {expected}, found {found}"),
            ),
            E::ExpectedComma => {
                let mut e = at(ErrorKind::Syntax, "expected `,`".to_string());
                let first_on_line = self
                    .src
                    .lines()
                    .nth(start.line.saturating_sub(1))
                    .map(|l| l.chars().take_while(|c| c.is_whitespace()).count() + 1);
                if first_on_line == Some(start.col) && start.line > 1 {
                    e = e.help(format!(
                        "items are separated by commas: is one missing at the end of line {}?",
                        start.line - 1
                    ));
                }
                e
            }
            E::ExpectedStructLike => match self.op_before(start.line, start.col) {
                // `op: Name` for an op with attributes: point at the name.
                Some((col, op)) => ProgramError::at(
                    self.file,
                    self.src,
                    start.line,
                    col,
                    op.len(),
                    ErrorKind::Syntax,
                    format!("op '{op}' has attributes and needs parentheses"),
                )
                .help(format!(
                    "write `{op}()` for its default attributes, or give them: see docs/program-format.md"
                )),
                None => at(ErrorKind::Syntax, lower_first(&err.code.to_string())),
            },
            _ if is_blank(self.src) => at(
                ErrorKind::Syntax,
                "the file is empty (expected `Program(...)`)".to_string(),
            ),
            _ if self.rest_is_blank(start.line, start.col) => at(
                ErrorKind::Syntax,
                "unexpected end of file (is a closing `)` or `]` missing?)".to_string(),
            ),
            E::ExpectedInteger
            | E::ExpectedFloat
            | E::ExpectedString
            | E::ExpectedBoolean
            | E::ExpectedArray
            | E::IntegerOutOfBounds => at(
                ErrorKind::Syntax,
                format!("{}{found}", lower_first(&err.code.to_string())),
            ),
            other => at(ErrorKind::Syntax, lower_first(&other.to_string())),
        };
        // Say which field was being read when a value has the wrong form.
        let path = self.path_at(start.line, start.col);
        match (&err.code, path) {
            (
                E::ExpectedComma
                | E::NoSuchStructField { .. }
                | E::NoSuchEnumVariant { .. }
                | E::Eof,
                _,
            )
            | (_, None) => e,
            (_, Some(path)) => e.note(format!("while reading {path}")),
        }
    }
}

fn in_outer(outer: &Option<String>) -> String {
    outer
        .as_deref()
        .map(|o| format!(" in {o}"))
        .unwrap_or_default()
}

fn lower_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

//! A span outline of a RON document: where every struct, field, tuple, list and value starts
//! and ends, by line and column.
//!
//! `ron` reports positions for syntax errors but gives deserialized values no spans, while the
//! semantic errors of a program (a missing input, a type mismatch, a bad learning rate) must
//! point at the line the user wrote. This module reads the source's tokens (`text::lexer`:
//! strings, raw strings, char literals, line and nested block comments) and builds a tree of
//! spans that can be looked up by a field path such as `nodes[3].inputs[1]` or
//! `training.optimizer.learning_rate`.
//!
//! The whole tree ([`outline`]) takes several times the source's size, too much for a program
//! of hundreds of thousands of nodes whose one error is being located. So the lookups an error
//! needs are also queries of their own ([`span_of`], [`innermost`], [`node_index`],
//! [`node_name`], [`node_name_lines`]): they read the token stream once (the lexer yields one
//! token at a time, never a token list), keep only the items along the path or around the
//! position asked for, and stop reading once the answer cannot change. Their memory does not
//! grow with the document, and they answer exactly as the tree would (a test holds them to
//! it).
//!
//! The outline is built only for documents `ron` has accepted, but it never fails and never
//! panics on any input: unexpected tokens end the current group.

use super::lexer::{Lexer, Tok, Token};
pub use super::lexer::{Pos, Span};

/// A value of the outline.
#[derive(Clone, Debug, Default)]
pub enum Value {
    /// `Name?(key: value, ...)`.
    Struct {
        name: Option<String>,
        fields: Vec<Field>,
    },
    /// `Name?(value, ...)`, including `Some(x)` and `()`.
    Tuple {
        name: Option<String>,
        items: Vec<Item>,
    },
    /// `[value, ...]`.
    List(Vec<Item>),
    /// `{key: value, ...}`; keys are kept as items.
    Map(Vec<(Item, Item)>),
    /// A scalar, string or identifier.
    #[default]
    Atom,
}

/// A value with its span.
#[derive(Clone, Debug, Default)]
pub struct Item {
    pub span: Span,
    pub value: Value,
}

/// A named field of a struct.
#[derive(Clone, Debug)]
pub struct Field {
    pub key: String,
    pub key_span: Span,
    pub value: Item,
}

/// One step of a field path.
#[derive(Clone, Debug, PartialEq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// Splits `a.b[2].c` into its segments; malformed indices are kept as keys (and then simply
/// not found).
pub fn parse_path(path: &str) -> Vec<Seg> {
    let mut segs = Vec::new();
    for part in path.split('.') {
        let mut rest = part;
        if let Some(open) = rest.find('[') {
            if open > 0 {
                segs.push(Seg::Key(rest[..open].to_string()));
            }
            rest = &rest[open..];
            while let Some(stripped) = rest.strip_prefix('[') {
                let close = stripped.find(']').unwrap_or(stripped.len());
                match stripped[..close].parse() {
                    Ok(i) => segs.push(Seg::Index(i)),
                    Err(_) => segs.push(Seg::Key(stripped[..close].to_string())),
                }
                rest = stripped.get(close + 1..).unwrap_or("");
            }
        } else if !rest.is_empty() {
            segs.push(Seg::Key(rest.to_string()));
        }
    }
    segs
}

impl Item {
    /// The deepest item along `path` and how many segments were matched. `Some(x)` wrappers
    /// are looked through when a field is asked for.
    pub fn resolve(&self, path: &[Seg]) -> (&Item, usize) {
        let mut item = self;
        let mut matched = 0;
        for seg in path {
            match step(item, seg) {
                Some(next) => {
                    item = next;
                    matched += 1;
                }
                None => break,
            }
        }
        (item, matched)
    }
}

fn step<'a>(item: &'a Item, seg: &Seg) -> Option<&'a Item> {
    match (&item.value, seg) {
        (Value::Struct { fields, .. }, Seg::Key(k)) => {
            fields.iter().find(|f| &f.key == k).map(|f| &f.value)
        }
        (Value::Tuple { name, items }, Seg::Key(_)) if name.as_deref() == Some("Some") => {
            items.first().and_then(|inner| step(inner, seg))
        }
        (Value::Tuple { items, .. } | Value::List(items), Seg::Index(i)) => items.get(*i),
        _ => None,
    }
}

/// The outline of the document's top-level value (an empty atom for an empty document).
///
/// It holds a span for every value of the document (several times the size of the source):
/// to locate one fault, the queries below ([`span_of`], [`innermost`], [`node_index`],
/// [`node_name`], [`node_name_lines`]) read the same tokens but keep only what they are
/// asked for.
pub fn outline(src: &str) -> Item {
    Parser::new(src, NodeQuery::None).root(Focus::All)
}

/// True when the source holds nothing but whitespace and comments.
pub fn is_blank(src: &str) -> bool {
    Lexer::new(src).next().is_none()
}

/// The span of the deepest item along `path`: `outline(src).resolve(path).0.span`, in memory
/// that does not grow with the document.
pub fn span_of(src: &str, path: &[Seg]) -> Span {
    let mut p = Parser::new(src, NodeQuery::None);
    let root = p.root(Focus::Path {
        segs: path,
        matched: 0,
        nodes: false,
    });
    p.found.map_or(root.span, |(_, span)| span)
}

/// The innermost item whose span contains a position, found by [`innermost`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Innermost {
    /// Its field path from the root (`nodes[1].op.axis`; `Some(x)` wrappers add no segment;
    /// empty for the root).
    pub path: String,
    pub span: Span,
    /// True when it is an atom (a scalar, string or identifier).
    pub atom: bool,
}

/// The innermost item whose span contains `line:col` (1-based), descending from the root
/// through structs, tuples and lists (not maps); the root when no child contains it.
pub fn innermost(src: &str, line: usize, col: usize) -> Innermost {
    let mut p = Parser::new(src, NodeQuery::None);
    let root = p.root(Focus::At { line, col });
    match p.chain.first() {
        Some((_, span, atom)) => Innermost {
            path: p
                .chain
                .iter()
                .rev()
                .map(|(seg, ..)| seg.as_str())
                .collect::<String>()
                .trim_start_matches('.')
                .to_string(),
            span: *span,
            atom: *atom,
        },
        None => Innermost {
            path: String::new(),
            span: root.span,
            atom: matches!(root.value, Value::Atom),
        },
    }
}

/// The document index of the first item of the `nodes` list whose `name` field is the
/// string `name`.
pub fn node_index(src: &str, name: &str) -> Option<usize> {
    match nodes_query(src, NodeQuery::Find(name, None)) {
        NodeQuery::Find(_, found) => found,
        _ => None,
    }
}

/// The `name` string of item `i` of the `nodes` list.
pub fn node_name(src: &str, i: usize) -> Option<String> {
    match nodes_query(src, NodeQuery::NameOf(i, None)) {
        NodeQuery::NameOf(_, found) => found,
        _ => None,
    }
}

/// The line of `nodes[i].name` for each `i` of `indices` (ascending, no repeats), in one
/// pass: `(i, line)` for the items found (the item's own line when it has no name).
pub fn node_name_lines(src: &str, indices: &[usize]) -> Vec<(usize, usize)> {
    match nodes_query(src, NodeQuery::Lines(indices, Vec::new())) {
        NodeQuery::Lines(_, lines) => lines,
        _ => Vec::new(),
    }
}

/// Runs a question about the `nodes` list; returns it answered.
fn nodes_query<'n>(src: &str, query: NodeQuery<'n>) -> NodeQuery<'n> {
    let path = [Seg::Key("nodes".to_string())];
    let mut p = Parser::new(src, query);
    p.root(Focus::Path {
        segs: &path,
        matched: 0,
        nodes: true,
    });
    p.nodes
}

/// The value of the string literal at `span` of `src`, if it is one.
pub fn string_at(src: &str, span: Span) -> Option<String> {
    let text = src.get(span.start.offset..span.end.offset)?;
    ron::from_str::<String>(text).ok()
}

/// Nesting deeper than this is outlined as an atom: ron refuses documents nested deeper than
/// its recursion limit (128), and this keeps the recursion well inside a 2 MiB thread stack.
const MAX_DEPTH: usize = 160;

/// What a parse keeps of the values it reads. Every focus consumes the same tokens the same
/// way, so the spans it reports are those of the whole outline.
#[derive(Clone, Copy, Debug)]
enum Focus<'q> {
    /// Everything: the whole outline.
    All,
    /// Nothing inside the value (its span only).
    Skip,
    /// The items along a field path, as [`Item::resolve`] follows it: `matched` segments led
    /// here, `segs` are the rest. Each item a segment leads to is recorded in `found`. With
    /// `nodes`, the item the whole path leads to is read as the node list ([`Focus::Nodes`]).
    Path {
        segs: &'q [Seg],
        matched: usize,
        nodes: bool,
    },
    /// The items whose spans contain `line:col`: each is recorded in `chain`.
    At { line: usize, col: usize },
    /// The node list: each item's name is read for the [`NodeQuery`].
    Nodes,
    /// One node: the span of its first `name` field (looked through `Some`) goes to `name`.
    NodeName,
}

/// A question about the names of the `nodes` list, with its answer.
enum NodeQuery<'q> {
    None,
    /// The index of the first node with this name.
    Find(&'q str, Option<usize>),
    /// The name of the node at this index.
    NameOf(usize, Option<String>),
    /// The line of the name of each node at these indices (ascending).
    Lines(&'q [usize], Vec<(usize, usize)>),
}

/// The kind of group whose items are being read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Group {
    List,
    Tuple { some: bool },
}

/// A recursive-descent reader of the token stream, with two tokens of lookahead: the
/// document is never held as tokens, and only what the [`Focus`] asks for is kept.
struct Parser<'a, 'n> {
    src: &'a str,
    lexer: Lexer<'a>,
    ahead: std::collections::VecDeque<Token<'a>>,
    /// The end of the last token consumed.
    last_end: Pos,
    /// The question is answered: the rest of the document reads as its end.
    done: bool,
    /// [`Focus::Path`]: the deepest item reached (segments matched, span).
    found: Option<(usize, Span)>,
    /// [`Focus::At`]: the items containing the position, deepest first: (path segment, span,
    /// is an atom).
    chain: Vec<(String, Span, bool)>,
    /// [`Focus::NodeName`]: the span of the name read.
    name: Option<Span>,
    nodes: NodeQuery<'n>,
}

impl<'a, 'n> Parser<'a, 'n> {
    fn new(src: &'a str, nodes: NodeQuery<'n>) -> Parser<'a, 'n> {
        Parser {
            src,
            lexer: Lexer::new(src),
            ahead: std::collections::VecDeque::with_capacity(2),
            last_end: Pos::default(),
            done: false,
            found: None,
            chain: Vec::new(),
            name: None,
            nodes,
        }
    }

    /// The top-level value.
    fn root<'q>(&mut self, focus: Focus<'q>) -> Item {
        self.skip_attributes();
        self.value(0, focus).unwrap_or_default()
    }

    fn peek(&mut self) -> Option<Token<'a>> {
        self.peek_at(0)
    }

    fn peek_at(&mut self, ahead: usize) -> Option<Token<'a>> {
        if self.done {
            return None;
        }
        while self.ahead.len() <= ahead {
            self.ahead.push_back(self.lexer.next()?);
        }
        self.ahead.get(ahead).copied()
    }

    fn peek_tok(&mut self, ahead: usize) -> Option<Tok<'a>> {
        self.peek_at(ahead).map(|t| t.tok)
    }

    fn is_punct(&mut self, ahead: usize, c: char) -> bool {
        self.peek_tok(ahead) == Some(Tok::Punct(c))
    }

    /// Consumes the next token.
    fn bump(&mut self) -> Option<Token<'a>> {
        self.peek()?;
        let t = self.ahead.pop_front()?;
        self.last_end = t.span.end;
        Some(t)
    }

    /// Skips `#![enable(...)]` attributes.
    fn skip_attributes(&mut self) {
        while self.is_punct(0, '#') {
            while let Some(t) = self.bump() {
                if t.tok == Tok::Punct(']') {
                    break;
                }
            }
        }
    }

    fn value<'q>(&mut self, depth: usize, focus: Focus<'q>) -> Option<Item> {
        let first = self.peek()?;
        let start = first.span.start;
        if depth >= MAX_DEPTH {
            // Too deep to outline (and far deeper than ron accepts): one atom.
            self.bump();
            let close = match first.tok {
                Tok::Punct('(') => Some(')'),
                Tok::Punct('[') => Some(']'),
                Tok::Punct('{') => Some('}'),
                _ => None,
            };
            if let Some(close) = close {
                self.skip_balanced(close);
            }
            return Some(Item {
                span: Span {
                    start,
                    end: self.last_end,
                },
                value: Value::Atom,
            });
        }
        // A path that led to its end with `nodes`: this is the node list.
        let focus = match focus {
            Focus::Path {
                segs: [],
                nodes: true,
                ..
            } => Focus::Nodes,
            f => f,
        };
        match first.tok {
            Tok::Ident(name) => {
                self.bump();
                if self.is_punct(0, '(') {
                    let mut item = self.group(depth, Some(name), focus)?;
                    item.span.start = start;
                    Some(item)
                } else {
                    Some(Item {
                        span: first.span,
                        value: Value::Atom,
                    })
                }
            }
            Tok::Punct('(') => self.group(depth, None, focus),
            Tok::Punct('[') => {
                self.bump();
                let items = self.items(depth, ']', focus, Group::List);
                Some(Item {
                    span: Span {
                        start,
                        end: self.last_end,
                    },
                    value: Value::List(items),
                })
            }
            Tok::Punct('{') => {
                self.bump();
                // Paths and positions do not look inside maps.
                let inner = match focus {
                    Focus::All => Focus::All,
                    _ => Focus::Skip,
                };
                let mut pairs = Vec::new();
                while !self.is_punct(0, '}') && self.peek().is_some() {
                    let Some(k) = self.value(depth + 1, inner) else {
                        break;
                    };
                    if !self.is_punct(0, ':') {
                        break;
                    }
                    self.bump();
                    let Some(v) = self.value(depth + 1, inner) else {
                        break;
                    };
                    if let Focus::All = inner {
                        pairs.push((k, v));
                    }
                    if self.is_punct(0, ',') {
                        self.bump();
                    }
                }
                if self.is_punct(0, '}') {
                    self.bump();
                }
                Some(Item {
                    span: Span {
                        start,
                        end: self.last_end,
                    },
                    value: Value::Map(pairs),
                })
            }
            Tok::Punct('-') | Tok::Punct('+') => {
                // A signed number: the sign and the number form one atom.
                self.bump();
                let end = match self.peek() {
                    Some(t) if !matches!(t.tok, Tok::Punct(_)) => {
                        self.bump();
                        t.span.end
                    }
                    _ => first.span.end,
                };
                Some(Item {
                    span: Span { start, end },
                    value: Value::Atom,
                })
            }
            Tok::Punct(_) => None,
            Tok::Str | Tok::Atom => {
                self.bump();
                Some(Item {
                    span: first.span,
                    value: Value::Atom,
                })
            }
        }
    }

    /// A parenthesised group at the current `(`: a struct when it starts with `key:`.
    fn group<'q>(&mut self, depth: usize, name: Option<&str>, focus: Focus<'q>) -> Option<Item> {
        let start = self.bump()?.span.start;
        let is_struct = matches!(self.peek_tok(0), Some(Tok::Ident(_))) && self.is_punct(1, ':');
        let value = if is_struct {
            let mut fields = Vec::new();
            // The first field of a key is the one a path follows.
            let mut taken = false;
            while let Some(Tok::Ident(key)) = self.peek_tok(0) {
                if !self.is_punct(1, ':') {
                    break;
                }
                let key_span = self.bump()?.span;
                self.bump();
                let (inner, followed) = self.field_focus(focus, key, &mut taken);
                let Some(value) = self.value(depth + 1, inner) else {
                    break;
                };
                self.after_field(focus, key, followed, &value);
                if let Focus::All = focus {
                    fields.push(Field {
                        key: key.to_string(),
                        key_span,
                        value,
                    });
                }
                if self.is_punct(0, ',') {
                    self.bump();
                }
            }
            self.skip_balanced(')');
            Value::Struct {
                name: name.map(str::to_string),
                fields,
            }
        } else {
            let some = name == Some("Some");
            Value::Tuple {
                name: name.map(str::to_string),
                items: self.items(depth, ')', focus, Group::Tuple { some }),
            }
        };
        Some(Item {
            span: Span {
                start,
                end: self.last_end,
            },
            value,
        })
    }

    /// The focus for the value of field `key` of a struct read with `focus`, and whether it is
    /// the field the focus follows.
    fn field_focus<'q>(&self, focus: Focus<'q>, key: &str, taken: &mut bool) -> (Focus<'q>, bool) {
        match focus {
            Focus::All => (Focus::All, false),
            Focus::At { .. } => (focus, false),
            Focus::Path {
                segs,
                matched,
                nodes,
            } if !*taken && matches!(segs.first(), Some(Seg::Key(k)) if k == key) => {
                *taken = true;
                let inner = Focus::Path {
                    segs: &segs[1..],
                    matched: matched + 1,
                    nodes,
                };
                (inner, true)
            }
            Focus::NodeName if !*taken && key == "name" => {
                *taken = true;
                (Focus::Skip, true)
            }
            _ => (Focus::Skip, false),
        }
    }

    /// Records what `focus` asks of the value just read for field `key`.
    fn after_field<'q>(&mut self, focus: Focus<'q>, key: &str, followed: bool, value: &Item) {
        match focus {
            Focus::Path { matched, .. } if followed => self.reached(matched + 1, value.span),
            Focus::NodeName if followed => self.name = Some(value.span),
            Focus::At { line, col } if contains(value.span, line, col) => {
                let atom = matches!(value.value, Value::Atom);
                self.chain.push((format!(".{key}"), value.span, atom));
                self.done = true;
            }
            _ => {}
        }
    }

    /// Comma-separated values up to and including `close`.
    fn items<'q>(
        &mut self,
        depth: usize,
        close: char,
        focus: Focus<'q>,
        group: Group,
    ) -> Vec<Item> {
        let mut items = Vec::new();
        let mut i = 0;
        while !self.is_punct(0, close) && self.peek().is_some() {
            let inner = self.item_focus(focus, group, i);
            let Some(v) = self.value(depth + 1, inner) else {
                break;
            };
            self.after_item(focus, group, i, &v);
            if let Focus::All = focus {
                items.push(v);
            }
            i += 1;
            if self.is_punct(0, ',') {
                self.bump();
            }
        }
        self.skip_balanced(close);
        items
    }

    /// The focus for item `i` of a group read with `focus`.
    fn item_focus<'q>(&mut self, focus: Focus<'q>, group: Group, i: usize) -> Focus<'q> {
        let some_inner = group == Group::Tuple { some: true } && i == 0;
        match focus {
            Focus::All => Focus::All,
            Focus::At { .. } => focus,
            // `Some(x)` is looked through when a field is asked for.
            Focus::Path {
                segs: [Seg::Key(_), ..],
                ..
            } if some_inner => focus,
            Focus::Path {
                segs: [Seg::Index(j), rest @ ..],
                matched,
                nodes,
            } if *j == i => Focus::Path {
                segs: rest,
                matched: matched + 1,
                nodes,
            },
            Focus::Nodes if group == Group::List => {
                self.name = None;
                Focus::NodeName
            }
            Focus::NodeName if some_inner => Focus::NodeName,
            _ => Focus::Skip,
        }
    }

    /// Records what `focus` asks of item `i` just read.
    fn after_item<'q>(&mut self, focus: Focus<'q>, group: Group, i: usize, item: &Item) {
        match focus {
            Focus::Path {
                segs: [Seg::Index(j), ..],
                matched,
                ..
            } if *j == i => self.reached(matched + 1, item.span),
            Focus::At { line, col } if contains(item.span, line, col) => {
                let seg = match group {
                    Group::Tuple { some: true } => String::new(),
                    _ => format!("[{i}]"),
                };
                let atom = matches!(item.value, Value::Atom);
                self.chain.push((seg, item.span, atom));
                self.done = true;
            }
            Focus::Nodes if group == Group::List => {
                let name = self.name.take();
                self.node_read(i, name, item.span);
            }
            _ => {}
        }
    }

    /// A path reached an item after `matched` segments: nothing later in the document can
    /// change where it leads.
    fn reached(&mut self, matched: usize, span: Span) {
        if !matches!(self.found, Some((m, _)) if m >= matched) {
            self.found = Some((matched, span));
        }
        self.done = true;
    }

    /// Node `i` of the node list (spanning `span`) was read, its name at `name`.
    fn node_read(&mut self, i: usize, name: Option<Span>, span: Span) {
        let src = self.src;
        let text = || name.and_then(|s| string_at(src, s));
        match &mut self.nodes {
            NodeQuery::None => {}
            NodeQuery::Find(wanted, found) => {
                if text().as_deref() == Some(*wanted) {
                    *found = Some(i);
                    self.done = true;
                }
            }
            NodeQuery::NameOf(j, found) => {
                if i == *j {
                    *found = text();
                    self.done = true;
                }
            }
            NodeQuery::Lines(wanted, lines) => {
                if wanted.binary_search(&i).is_ok() {
                    lines.push((i, name.unwrap_or(span).start.line));
                    if lines.len() == wanted.len() {
                        self.done = true;
                    }
                }
            }
        }
    }

    /// Skips tokens up to and including the `close` that ends the current group.
    fn skip_balanced(&mut self, close: char) {
        let mut depth = 0usize;
        while let Some(t) = self.peek() {
            match t.tok {
                Tok::Punct('(' | '[' | '{') => depth += 1,
                Tok::Punct(c @ (')' | ']' | '}')) => {
                    if depth == 0 {
                        if c == close {
                            self.bump();
                        }
                        // Unbalanced: leave the closer for an outer group.
                        return;
                    }
                    depth -= 1;
                }
                _ => {}
            }
            self.bump();
        }
    }
}

/// True when `span` contains `line:col`.
fn contains(span: Span, line: usize, col: usize) -> bool {
    (span.start.line, span.start.col) <= (line, col) && (line, col) < (span.end.line, span.end.col)
}

#[cfg(test)]
#[path = "outline_tests.rs"]
mod tests;

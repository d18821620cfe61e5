//! A span outline of a RON document: where every struct, field, tuple, list and value starts
//! and ends, by line and column.
//!
//! `ron` reports positions for syntax errors but gives deserialized values no spans, while the
//! semantic errors of a program (a missing input, a type mismatch, a bad learning rate) must
//! point at the line the user wrote. This module lexes the source (strings, raw strings, char
//! literals, line and nested block comments) and builds a tree of spans that can be looked up
//! by a field path such as `nodes[3].inputs[1]` or `training.optimizer.learning_rate`.
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

/// A position in the source: 1-based line and column (in characters), and the byte offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Pos {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, counted in characters.
    pub col: usize,
    /// Byte offset into the source.
    pub offset: usize,
}

/// A range of source text: `start` inclusive, `end` exclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Span {
    pub start: Pos,
    pub end: Pos,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Tok<'a> {
    Ident(&'a str),
    /// A string literal (normal or raw).
    Str,
    /// Numbers, chars, byte strings: any other atom.
    Atom,
    Punct(char),
}

#[derive(Clone, Copy, Debug)]
struct Token<'a> {
    tok: Tok<'a>,
    span: Span,
}

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

/// A cursor over the source (no copy of it: a large document is not held again as chars).
struct Lexer<'a> {
    src: &'a str,
    /// Byte offset of the next char.
    i: usize,
    /// The char before it.
    prev: Option<char>,
    line: usize,
    col: usize,
}

impl<'a> Lexer<'a> {
    fn new(src: &'a str) -> Lexer<'a> {
        Lexer {
            src,
            i: 0,
            prev: None,
            line: 1,
            col: 1,
        }
    }
}

/// The source's tokens, one at a time, whitespace and comments skipped.
impl<'a> Iterator for Lexer<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        let lx = self;
        loop {
            let c = lx.peek(0)?;
            let start = lx.pos();
            let tok = match c {
                c if c.is_whitespace() => {
                    lx.bump();
                    continue;
                }
                '/' if lx.peek(1) == Some('/') => {
                    while lx.peek(0).is_some_and(|c| c != '\n') {
                        lx.bump();
                    }
                    continue;
                }
                '/' if lx.peek(1) == Some('*') => {
                    lx.block_comment();
                    continue;
                }
                '"' => {
                    lx.string();
                    Tok::Str
                }
                'r' if matches!(lx.peek(1), Some('"' | '#')) => {
                    lx.bump();
                    lx.raw_string();
                    Tok::Str
                }
                'b' if lx.peek(1) == Some('"') => {
                    lx.bump();
                    lx.string();
                    Tok::Atom
                }
                'b' if lx.peek(1) == Some('\'') => {
                    lx.bump();
                    lx.char_literal();
                    Tok::Atom
                }
                '\'' => {
                    lx.char_literal();
                    Tok::Atom
                }
                c if c.is_alphabetic() || c == '_' => {
                    while lx.peek(0).is_some_and(|c| c.is_alphanumeric() || c == '_') {
                        lx.bump();
                    }
                    let mut ident = &lx.src[start.offset..lx.i];
                    // Raw identifiers `r#name`.
                    if ident == "r" && lx.peek(0) == Some('#') {
                        lx.bump();
                        let from = lx.i;
                        while lx
                            .peek(0)
                            .is_some_and(|c| c.is_alphanumeric() || "_.-+".contains(c))
                        {
                            lx.bump();
                        }
                        ident = &lx.src[from..lx.i];
                    }
                    Tok::Ident(ident)
                }
                c if c.is_ascii_digit()
                    || c == '.' && lx.peek(1).is_some_and(|d| d.is_ascii_digit()) =>
                {
                    while lx.peek(0).is_some_and(|c| {
                        c.is_alphanumeric()
                            || c == '_'
                            || c == '.'
                            || ((c == '-' || c == '+') && lx.prev_is_exponent())
                    }) {
                        lx.bump();
                    }
                    Tok::Atom
                }
                c => {
                    lx.bump();
                    Tok::Punct(c)
                }
            };
            return Some(Token {
                tok,
                span: Span {
                    start,
                    end: lx.pos(),
                },
            });
        }
    }
}

impl Lexer<'_> {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.src.get(self.i..)?.chars().nth(ahead)
    }

    fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            col: self.col,
            offset: self.i,
        }
    }

    fn bump(&mut self) {
        if let Some(c) = self.peek(0) {
            self.i += c.len_utf8();
            self.prev = Some(c);
            if c == '\n' {
                self.line += 1;
                self.col = 1;
            } else {
                self.col += 1;
            }
        }
    }

    fn prev_is_exponent(&self) -> bool {
        matches!(self.prev, Some('e' | 'E'))
    }

    fn block_comment(&mut self) {
        let mut depth = 0usize;
        while let Some(c) = self.peek(0) {
            if c == '/' && self.peek(1) == Some('*') {
                depth += 1;
                self.bump();
                self.bump();
            } else if c == '*' && self.peek(1) == Some('/') {
                self.bump();
                self.bump();
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return;
                }
            } else {
                self.bump();
            }
        }
    }

    /// A `"..."` string with backslash escapes, from its opening quote.
    fn string(&mut self) {
        self.bump();
        while let Some(c) = self.peek(0) {
            self.bump();
            match c {
                '\\' => self.bump(),
                '"' => return,
                _ => {}
            }
        }
    }

    /// A raw string `#*"..."#*`, from after the `r`.
    fn raw_string(&mut self) {
        let mut hashes = 0;
        while self.peek(0) == Some('#') {
            hashes += 1;
            self.bump();
        }
        if self.peek(0) != Some('"') {
            return;
        }
        self.bump();
        while let Some(c) = self.peek(0) {
            self.bump();
            if c == '"' && (0..hashes).all(|k| self.peek(k) == Some('#')) {
                for _ in 0..hashes {
                    self.bump();
                }
                return;
            }
        }
    }

    /// A `'c'` literal with an optional escape, from its opening quote.
    fn char_literal(&mut self) {
        self.bump();
        while let Some(c) = self.peek(0) {
            self.bump();
            match c {
                '\\' => self.bump(),
                '\'' | '\n' => return,
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r##"#![enable(implicit_some)]
// a comment with "quotes" and (parens
Program(
    name: "a \"quoted\" (name",
    /* nested /* block */ comment ) */
    nodes: [
        (name: "x", op: Input(stream: "x", dtype: F16, shape: [8, 2])),
        (name: "y", op: Add, inputs: ["x", r#"x"#]),
    ],
    training: Some((loss: "y", optimizer: Sgd(learning_rate: -1.5e-3), map: {"k": 'c'})),
)
"##;

    fn at(path: &str) -> (Pos, usize) {
        let root = outline(DOC);
        let segs = parse_path(path);
        let (item, matched) = root.resolve(&segs);
        assert_eq!(
            matched,
            segs.len(),
            "{path} resolved only {matched} segments"
        );
        (item.span.start, item.span.end.col - item.span.start.col)
    }

    #[test]
    fn finds_fields_through_lists_and_options() {
        let (p, w) = at("nodes[1].inputs[1]");
        assert_eq!((p.line, p.col, w), (8, 44, 6));
        let (p, w) = at("nodes[0].op.shape");
        assert_eq!((p.line, p.col, w), (7, 63, 6));
        let (p, w) = at("training.optimizer.learning_rate");
        assert_eq!((p.line, p.col, w), (10, 62, 7));
        assert_eq!(&DOC[p.offset..p.offset + 7], "-1.5e-3");
        assert_eq!(at("nodes[1].op").1, 3);
    }

    #[test]
    fn unresolved_paths_stop_at_the_deepest_match() {
        let root = outline(DOC);
        let (item, matched) = root.resolve(&parse_path("nodes[1].phase"));
        assert_eq!(matched, 2);
        assert_eq!(item.span.start.line, 8);
        assert_eq!(
            parse_path("infeeds[2].source.columns"),
            vec![
                Seg::Key("infeeds".into()),
                Seg::Index(2),
                Seg::Key("source".into()),
                Seg::Key("columns".into())
            ]
        );
    }

    #[test]
    fn never_panics_on_garbage() {
        for src in [
            "",
            "(",
            ")",
            "[(]",
            "\"",
            "r#\"",
            "'",
            "/*",
            "a: (b: [c, {d",
            "#![",
            "-",
        ] {
            let _ = outline(src);
        }
    }

    /// Every item of the tree with its path (children of maps are not on any path).
    fn items_of(item: &Item, path: &mut Vec<Seg>, out: &mut Vec<(Vec<Seg>, Span)>) {
        out.push((path.clone(), item.span));
        match &item.value {
            Value::Struct { fields, .. } => {
                for f in fields {
                    path.push(Seg::Key(f.key.clone()));
                    items_of(&f.value, path, out);
                    path.pop();
                }
            }
            Value::Tuple { items, .. } | Value::List(items) => {
                for (i, v) in items.iter().enumerate() {
                    path.push(Seg::Index(i));
                    items_of(v, path, out);
                    path.pop();
                }
            }
            _ => {}
        }
    }

    /// The innermost item containing `line:col`, walked down the whole tree.
    fn innermost_in_tree(root: &Item, line: usize, col: usize) -> Innermost {
        let mut path = String::new();
        let mut item = root;
        'descend: loop {
            let children: Vec<(String, &Item)> = match &item.value {
                Value::Struct { fields, .. } => fields
                    .iter()
                    .map(|f| (format!(".{}", f.key), &f.value))
                    .collect(),
                Value::Tuple { items, .. } | Value::List(items) => items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (format!("[{i}]"), v))
                    .collect(),
                _ => Vec::new(),
            };
            for (seg, child) in children {
                if contains(child.span, line, col) {
                    if !matches!(&item.value, Value::Tuple { name: Some(n), .. } if n == "Some") {
                        path.push_str(&seg);
                    }
                    item = child;
                    continue 'descend;
                }
            }
            break;
        }
        Innermost {
            path: path.trim_start_matches('.').to_string(),
            span: item.span,
            atom: matches!(item.value, Value::Atom),
        }
    }

    /// The queries answer what the whole tree answers: every item's path and paths that
    /// stop short, every position, every node name.
    fn queries_agree_with_the_tree(src: &str, every_position: bool) {
        let root = outline(src);
        let mut items = Vec::new();
        items_of(&root, &mut Vec::new(), &mut items);
        for (path, _) in &items {
            // (A repeated key leads to its first field.)
            let want = root.resolve(path).0.span;
            assert_eq!(span_of(src, path), want, "{path:?} in {src:?}");
            for extra in [
                Seg::Key("zz".into()),
                Seg::Key("name".into()),
                Seg::Index(9),
            ] {
                let mut longer = path.clone();
                longer.push(extra);
                let want = root.resolve(&longer).0.span;
                assert_eq!(span_of(src, &longer), want, "{longer:?} in {src:?}");
            }
        }
        let mut positions: Vec<(usize, usize)> = Vec::new();
        if every_position {
            for (l, text) in src.split('\n').enumerate() {
                for c in 0..=text.chars().count() + 1 {
                    positions.push((l + 1, c + 1));
                }
            }
        } else {
            positions.extend(items.iter().map(|(_, s)| (s.start.line, s.start.col)));
            positions.extend(items.iter().map(|(_, s)| (s.end.line, s.end.col)));
        }
        positions.push((0, 0));
        for (line, col) in positions {
            let want = innermost_in_tree(&root, line, col);
            assert_eq!(innermost(src, line, col), want, "{line}:{col} in {src:?}");
        }
        // The node names, as the locator indexed them from the tree.
        let mut first: std::collections::HashMap<String, usize> = Default::default();
        let mut names: Vec<Option<String>> = Vec::new();
        let (list, matched) = root.resolve(&parse_path("nodes"));
        if let (1, Value::List(nodes)) = (matched, &list.value) {
            for (i, node) in nodes.iter().enumerate() {
                let (name, m) = node.resolve(&parse_path("name"));
                let text = (m == 1).then(|| string_at(src, name.span)).flatten();
                if let Some(t) = &text {
                    first.entry(t.clone()).or_insert(i);
                }
                names.push(text);
            }
        }
        for (i, name) in names.iter().enumerate() {
            assert_eq!(node_name(src, i), *name, "nodes[{i}] in {src:?}");
            if let Some(n) = name {
                assert_eq!(node_index(src, n), first.get(n).copied(), "{n} in {src:?}");
            }
        }
        assert_eq!(node_name(src, names.len()), None);
        assert_eq!(node_index(src, "no such node"), None);
        let all: Vec<usize> = (0..names.len() + 2).collect();
        for (i, line) in node_name_lines(src, &all) {
            let want = root.resolve(&parse_path(&format!("nodes[{i}].name"))).0;
            assert_eq!(line, want.span.start.line, "nodes[{i}].name in {src:?}");
        }
        assert!(node_name_lines(src, &all).len() <= names.len());
    }

    #[test]
    fn queries_answer_as_the_whole_outline_does() {
        queries_agree_with_the_tree(DOC, true);
        let dup = "Program(nodes: [(name: \"a\"), Some((name: \"b\")), (name: \"a\"), (op: X), \
                   (name: r#\"b\"#)], nodes: [(name: \"z\")], x: {\"k\": (name: \"q\")})";
        queries_agree_with_the_tree(dup, true);
        // Every prefix of a document: groups cut short anywhere.
        let mut cut = 0;
        while cut <= DOC.len() {
            queries_agree_with_the_tree(&DOC[..cut], false);
            cut += DOC[cut..].chars().next().map_or(1, char::len_utf8);
        }
        for src in [
            "",
            "(",
            ")",
            "[(]",
            "a: (b: [c, {d",
            "#![",
            "-",
            "Some(Some((a: 1)))",
        ] {
            queries_agree_with_the_tree(src, true);
        }
    }

    #[test]
    fn queries_answer_as_the_whole_outline_does_on_every_test_program() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut dirs = vec![root.join("programs")];
        for d in ["check", "run", "sim", "broken", "oom", "targets"] {
            dirs.push(root.join("tests/programs").join(d));
        }
        let mut seen = 0;
        for dir in dirs {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let Ok(src) = std::fs::read_to_string(e.path()) else {
                    continue;
                };
                queries_agree_with_the_tree(&src, true);
                seen += 1;
            }
        }
        assert!(seen > 20, "{seen} programs read");
    }

    #[test]
    fn a_query_reads_no_further_than_its_answer() {
        // The node named is early: the garbage after it is never read (the answer is the
        // same either way, and reading stops there).
        let src = "Program(nodes: [(name: \"a\", inputs: [\"b\"]), (name: \"b\")], rest: [";
        assert_eq!(node_index(src, "a"), Some(0));
        let span = span_of(src, &parse_path("nodes[0].inputs[0]"));
        assert_eq!(&src[span.start.offset..span.end.offset], "\"b\"");
        let mut p = Parser::new(src, NodeQuery::None);
        let path = parse_path("nodes[0].name");
        p.root(Focus::Path {
            segs: &path,
            matched: 0,
            nodes: false,
        });
        assert!(p.done && p.last_end.offset < src.find("(name: \"b\")").unwrap());
    }
}

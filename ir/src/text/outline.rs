//! A span outline of a RON document: where every struct, field, tuple, list and value starts
//! and ends, by line and column.
//!
//! `ron` reports positions for syntax errors but gives deserialized values no spans, while the
//! semantic errors of a program (a missing input, a type mismatch, a bad learning rate) must
//! point at the line the user wrote. This module lexes the source (strings, raw strings, char
//! literals, line and nested block comments) and builds a tree of spans that can be looked up
//! by a field path such as `nodes[3].inputs[1]` or `training.optimizer.learning_rate`.
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

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// A string literal (normal or raw).
    Str,
    /// Numbers, chars, byte strings: any other atom.
    Atom,
    Punct(char),
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
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
pub fn outline(src: &str) -> Item {
    let tokens = lex(src);
    let mut p = Parser { tokens, at: 0 };
    p.skip_attributes();
    p.value(0).unwrap_or_default()
}

/// True when the source holds nothing but whitespace and comments.
pub fn is_blank(src: &str) -> bool {
    lex(src).is_empty()
}

/// Nesting deeper than this is outlined as an atom: ron refuses documents nested deeper than
/// its recursion limit (128), and this keeps the recursion well inside a 2 MiB thread stack.
const MAX_DEPTH: usize = 160;

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn peek_tok(&self, ahead: usize) -> Option<&Tok> {
        self.tokens.get(self.at + ahead).map(|t| &t.tok)
    }

    fn is_punct(&self, ahead: usize, c: char) -> bool {
        self.peek_tok(ahead) == Some(&Tok::Punct(c))
    }

    /// Skips `#![enable(...)]` attributes.
    fn skip_attributes(&mut self) {
        while self.is_punct(0, '#') {
            while let Some(tok) = self.peek_tok(0).cloned() {
                self.at += 1;
                if tok == Tok::Punct(']') {
                    break;
                }
            }
        }
    }

    fn value(&mut self, depth: usize) -> Option<Item> {
        let first = self.peek()?.clone();
        let start = first.span.start;
        if depth >= MAX_DEPTH {
            // Too deep to outline (and far deeper than ron accepts): one atom.
            self.at += 1;
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
                    end: self.span_from(self.at.saturating_sub(1)).end,
                },
                value: Value::Atom,
            });
        }
        match first.tok {
            Tok::Ident(name) => {
                self.at += 1;
                if self.is_punct(0, '(') {
                    let mut item = self.group(depth, Some(name))?;
                    item.span.start = start;
                    Some(item)
                } else {
                    Some(Item {
                        span: first.span,
                        value: Value::Atom,
                    })
                }
            }
            Tok::Punct('(') => self.group(depth, None),
            Tok::Punct('[') => {
                let open = self.at;
                self.at += 1;
                let items = self.items(depth, ']');
                Some(Item {
                    span: self.span_from(open),
                    value: Value::List(items),
                })
            }
            Tok::Punct('{') => {
                let open = self.at;
                self.at += 1;
                let mut pairs = Vec::new();
                while !self.is_punct(0, '}') && self.peek().is_some() {
                    let Some(k) = self.value(depth + 1) else {
                        break;
                    };
                    if !self.is_punct(0, ':') {
                        break;
                    }
                    self.at += 1;
                    let Some(v) = self.value(depth + 1) else {
                        break;
                    };
                    pairs.push((k, v));
                    if self.is_punct(0, ',') {
                        self.at += 1;
                    }
                }
                self.at += usize::from(self.is_punct(0, '}'));
                Some(Item {
                    span: self.span_from(open),
                    value: Value::Map(pairs),
                })
            }
            Tok::Punct('-') | Tok::Punct('+') => {
                // A signed number: the sign and the number form one atom.
                self.at += 1;
                let end = match self.peek().cloned() {
                    Some(t) if !matches!(t.tok, Tok::Punct(_)) => {
                        self.at += 1;
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
                self.at += 1;
                Some(Item {
                    span: first.span,
                    value: Value::Atom,
                })
            }
        }
    }

    /// A parenthesised group at the current `(`: a struct when it starts with `key:`.
    fn group(&mut self, depth: usize, name: Option<String>) -> Option<Item> {
        let open = self.at;
        self.at += 1;
        let is_struct = matches!(self.peek_tok(0), Some(Tok::Ident(_))) && self.is_punct(1, ':');
        let value = if is_struct {
            let mut fields = Vec::new();
            while let Some(Tok::Ident(key)) = self.peek_tok(0).cloned() {
                if !self.is_punct(1, ':') {
                    break;
                }
                let key_span = self.tokens[self.at].span;
                self.at += 2;
                let Some(value) = self.value(depth + 1) else {
                    break;
                };
                fields.push(Field {
                    key,
                    key_span,
                    value,
                });
                if self.is_punct(0, ',') {
                    self.at += 1;
                }
            }
            self.skip_balanced(')');
            Value::Struct { name, fields }
        } else {
            Value::Tuple {
                name,
                items: self.items(depth, ')'),
            }
        };
        Some(Item {
            span: self.span_from(open),
            value,
        })
    }

    /// Comma-separated values up to and including `close`.
    fn items(&mut self, depth: usize, close: char) -> Vec<Item> {
        let mut items = Vec::new();
        while !self.is_punct(0, close) && self.peek().is_some() {
            let Some(v) = self.value(depth + 1) else {
                break;
            };
            items.push(v);
            if self.is_punct(0, ',') {
                self.at += 1;
            }
        }
        self.skip_balanced(close);
        items
    }

    /// Skips tokens up to and including the `close` that ends the current group.
    fn skip_balanced(&mut self, close: char) {
        let mut depth = 0usize;
        while let Some(t) = self.peek() {
            let tok = t.tok.clone();
            self.at += 1;
            match tok {
                Tok::Punct('(' | '[' | '{') => depth += 1,
                Tok::Punct(c @ (')' | ']' | '}')) => {
                    if depth == 0 {
                        if c != close {
                            // Unbalanced: leave the closer for an outer group.
                            self.at -= 1;
                        }
                        return;
                    }
                    depth -= 1;
                }
                _ => {}
            }
        }
    }

    /// The span from the token at `open` to the last token consumed.
    fn span_from(&self, open: usize) -> Span {
        let start = self
            .tokens
            .get(open)
            .map(|t| t.span.start)
            .unwrap_or_default();
        let end = self
            .tokens
            .get(self.at.saturating_sub(1))
            .map(|t| t.span.end)
            .unwrap_or(start);
        Span { start, end }
    }
}

/// Splits the source into tokens, skipping whitespace and comments.
fn lex(src: &str) -> Vec<Token> {
    let mut lx = Lexer {
        src,
        i: 0,
        prev: None,
        line: 1,
        col: 1,
    };
    let mut out = Vec::new();
    while let Some(c) = lx.peek(0) {
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
                let mut s = String::new();
                while let Some(c) = lx.peek(0).filter(|&c| c.is_alphanumeric() || c == '_') {
                    s.push(c);
                    lx.bump();
                }
                // Raw identifiers `r#name`.
                if s == "r" && lx.peek(0) == Some('#') {
                    lx.bump();
                    s.clear();
                    while let Some(c) = lx
                        .peek(0)
                        .filter(|&c| c.is_alphanumeric() || "_.-+".contains(c))
                    {
                        s.push(c);
                        lx.bump();
                    }
                }
                Tok::Ident(s)
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
        out.push(Token {
            tok,
            span: Span {
                start,
                end: lx.pos(),
            },
        });
    }
    out
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
}

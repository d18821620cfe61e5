//! The lexer of the RON outline ([`super::outline`]): the source's tokens one at a time, with
//! their spans, whitespace and comments (line and nested block) skipped, strings, raw
//! strings and char literals read whole. It holds no copy of the source.

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
pub(super) enum Tok<'a> {
    Ident(&'a str),
    /// A string literal (normal or raw).
    Str,
    /// Numbers, chars, byte strings: any other atom.
    Atom,
    Punct(char),
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Token<'a> {
    pub(super) tok: Tok<'a>,
    pub(super) span: Span,
}

/// A cursor over the source (no copy of it: a large document is not held again as chars).
pub(super) struct Lexer<'a> {
    src: &'a str,
    /// Byte offset of the next char.
    i: usize,
    /// The char before it.
    prev: Option<char>,
    line: usize,
    col: usize,
}

impl<'a> Lexer<'a> {
    pub(super) fn new(src: &'a str) -> Lexer<'a> {
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

//! Lexing, parsing and type checking of calculator expressions into a postfix program.

use super::{CalcOptions, ExprError, ExprErrorKind, Value};
use crate::numerics::decimal::{decimal_to_f16, decimal_to_f32};
use crate::numerics::flags::FpSts;
use crate::numerics::ops::{unary_from_name, unary_name, ArithOp, CompareOp, UnaryOp};
use crate::numerics::round::{F16_NAN, F32_NAN};
use half::f16;
use ipusim_ir::DType;

/// Deepest nesting of parentheses and unary signs accepted (bounds the parser's recursion).
pub(crate) const MAX_DEPTH: usize = 200;

/// One step of a postfix program. Operand types were checked when it was compiled.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Instr {
    /// Push a literal; its rounding raised these flags.
    Push(Value, FpSts),
    /// Apply a unary operation to the top value.
    Unary(UnaryOp),
    /// Apply a binary operation to the two top values.
    Binary(ArithOp),
    /// Compare the two top values.
    Compare(CompareOp),
    /// Convert the top value.
    Cast(DType),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Tok<'s> {
    Num(&'s str),
    Name(&'s str),
    /// `f16:0x3c00`: the type name and the payload after the colon.
    Typed(&'s str, &'s str),
    Plus,
    Minus,
    Star,
    Slash,
    LParen,
    RParen,
    Comma,
    End,
}

/// What a function name denotes.
#[derive(Clone, Copy)]
enum Function {
    Unary(UnaryOp),
    Binary(ArithOp),
    Compare(CompareOp),
    Cast(DType),
}

impl Function {
    fn lookup(name: &str) -> Option<(Function, &'static str)> {
        if let Some(op) = unary_from_name(name) {
            return Some((Function::Unary(op), unary_name(op)));
        }
        if let Some(op @ (ArithOp::Min | ArithOp::Max)) = ArithOp::from_name(name) {
            return Some((Function::Binary(op), op.name()));
        }
        if let Some(op) = CompareOp::from_name(name) {
            return Some((Function::Compare(op), op.name()));
        }
        match name {
            "cast_f16" => Some((Function::Cast(DType::F16), "cast_f16")),
            "cast_f32" => Some((Function::Cast(DType::F32), "cast_f32")),
            "cast_i32" => Some((Function::Cast(DType::I32), "cast_i32")),
            _ => None,
        }
    }

    fn arity(self) -> usize {
        match self {
            Function::Unary(_) | Function::Cast(_) => 1,
            Function::Binary(_) | Function::Compare(_) => 2,
        }
    }
}

struct Parser<'s, 'p> {
    src: &'s str,
    pos: usize,
    tok: Tok<'s>,
    start: usize,
    options: &'p CalcOptions,
    program: &'p mut Vec<Instr>,
    depth: usize,
}

/// Compiles `src` into `program` (cleared first).
pub(crate) fn compile(
    src: &str,
    options: &CalcOptions,
    program: &mut Vec<Instr>,
) -> Result<(), ExprError> {
    program.clear();
    let mut p = Parser {
        src,
        pos: 0,
        tok: Tok::End,
        start: 0,
        options,
        program,
        depth: 0,
    };
    p.advance()?;
    if p.tok == Tok::End {
        return Err(p.error_at(p.start, ExprErrorKind::Empty));
    }
    p.expr()?;
    if p.tok != Tok::End {
        return Err(p.expected("an operator or the end of the expression"));
    }
    Ok(())
}

fn is_float(t: DType) -> bool {
    matches!(t, DType::F16 | DType::F32)
}

impl<'s> Parser<'s, '_> {
    fn column(&self, offset: usize) -> usize {
        self.src[..offset].chars().count() + 1
    }

    fn error_at(&self, offset: usize, kind: ExprErrorKind) -> ExprError {
        ExprError {
            column: self.column(offset),
            kind,
        }
    }

    fn expected(&self, expected: &'static str) -> ExprError {
        let found = match self.tok {
            Tok::End => "the end of the expression".to_string(),
            _ => format!("'{}'", self.src[self.start..self.pos].trim_end()),
        };
        self.error_at(self.start, ExprErrorKind::Expected { expected, found })
    }

    /// Lexes the next token into `self.tok`.
    fn advance(&mut self) -> Result<(), ExprError> {
        let bytes = self.src.as_bytes();
        while self.pos < bytes.len() && bytes[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
        self.start = self.pos;
        let Some(&c) = bytes.get(self.pos) else {
            self.tok = Tok::End;
            return Ok(());
        };
        let word = |from: usize| {
            let mut end = from;
            while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
                end += 1;
            }
            end
        };
        self.tok = match c {
            b'+' | b'-' | b'*' | b'/' | b'(' | b')' | b',' => {
                self.pos += 1;
                match c {
                    b'+' => Tok::Plus,
                    b'-' => Tok::Minus,
                    b'*' => Tok::Star,
                    b'/' => Tok::Slash,
                    b'(' => Tok::LParen,
                    b')' => Tok::RParen,
                    _ => Tok::Comma,
                }
            }
            b'0'..=b'9' | b'.' => {
                let mut end = self.pos;
                while end < bytes.len() && (bytes[end].is_ascii_digit() || bytes[end] == b'.') {
                    end += 1;
                }
                if end < bytes.len() && matches!(bytes[end], b'e' | b'E') {
                    let sign = usize::from(matches!(bytes.get(end + 1), Some(b'+' | b'-')));
                    if bytes.get(end + 1 + sign).is_some_and(u8::is_ascii_digit) {
                        end += 1 + sign;
                        while end < bytes.len() && bytes[end].is_ascii_digit() {
                            end += 1;
                        }
                    }
                }
                // Letters glued to a number ("2x", "1e") make it malformed, not two tokens.
                let end = word(end);
                self.pos = end;
                Tok::Num(&self.src[self.start..end])
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let end = word(self.pos);
                let name = &self.src[self.start..end];
                if bytes.get(end) == Some(&b':') && matches!(name, "f16" | "f32" | "i32" | "u8") {
                    let from = end + 1 + usize::from(bytes.get(end + 1) == Some(&b'-'));
                    self.pos = word(from);
                    Tok::Typed(name, &self.src[end + 1..self.pos])
                } else {
                    self.pos = end;
                    Tok::Name(name)
                }
            }
            _ => {
                let ch = self.src[self.pos..].chars().next().unwrap_or('\u{fffd}');
                return Err(self.error_at(self.pos, ExprErrorKind::UnexpectedChar(ch)));
            }
        };
        Ok(())
    }

    fn nest(&mut self) -> Result<(), ExprError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error_at(self.start, ExprErrorKind::TooDeep(MAX_DEPTH)));
        }
        Ok(())
    }

    fn same_float(
        &self,
        op: &'static str,
        offset: usize,
        a: DType,
        b: DType,
    ) -> Result<DType, ExprError> {
        if a == b && is_float(a) {
            return Ok(a);
        }
        let mut problem = format!(
            "needs two operands of the same float type (f16 or f32), got {} and {}",
            a.name(),
            b.name()
        );
        if is_float(a) && is_float(b) {
            problem.push_str("; convert one with cast_f16 or cast_f32");
        }
        Err(self.error_at(offset, ExprErrorKind::Type { op, problem }))
    }

    fn expr(&mut self) -> Result<DType, ExprError> {
        self.left_assoc(
            Self::term,
            [
                (Tok::Plus, ArithOp::Add, "+"),
                (Tok::Minus, ArithOp::Sub, "-"),
            ],
        )
    }

    fn term(&mut self) -> Result<DType, ExprError> {
        self.left_assoc(
            Self::unary,
            [
                (Tok::Star, ArithOp::Mul, "*"),
                (Tok::Slash, ArithOp::Div, "/"),
            ],
        )
    }

    /// `operand (op operand)*` for the two operators `ops` of one precedence level, left
    /// associative: each operation is emitted after both its operands.
    fn left_assoc(
        &mut self,
        operand: fn(&mut Self) -> Result<DType, ExprError>,
        ops: [(Tok<'static>, ArithOp, &'static str); 2],
    ) -> Result<DType, ExprError> {
        let mut t = operand(self)?;
        while let Some(&(_, op, name)) = ops.iter().find(|(tok, _, _)| *tok == self.tok) {
            let at = self.start;
            self.advance()?;
            let rhs = operand(self)?;
            t = self.same_float(name, at, t, rhs)?;
            self.program.push(Instr::Binary(op));
        }
        Ok(t)
    }

    fn unary(&mut self) -> Result<DType, ExprError> {
        match self.tok {
            Tok::Minus | Tok::Plus => {
                let minus = self.tok == Tok::Minus;
                let at = self.start;
                self.nest()?;
                self.advance()?;
                let t = self.unary()?;
                self.depth -= 1;
                if minus {
                    if !is_float(t) {
                        let problem =
                            format!("(negation) needs an f16 or f32 operand, got {}", t.name());
                        return Err(self.error_at(at, ExprErrorKind::Type { op: "-", problem }));
                    }
                    self.program.push(Instr::Unary(UnaryOp::Neg));
                }
                Ok(t)
            }
            _ => self.primary(),
        }
    }

    fn primary(&mut self) -> Result<DType, ExprError> {
        let at = self.start;
        match self.tok {
            Tok::Num(text) => {
                let (value, flags) = match self.options.dtype {
                    DType::F32 => decimal_to_f32(text).map(|(v, f)| (Value::F32(v), f)),
                    _ => decimal_to_f16(text, self.options.nanoo).map(|(v, f)| (Value::F16(v), f)),
                }
                .ok_or_else(|| {
                    let kind = ExprErrorKind::Literal {
                        text: text.to_string(),
                        reason: "not a decimal number",
                    };
                    self.error_at(at, kind)
                })?;
                self.program.push(Instr::Push(value, flags));
                self.advance()?;
                Ok(value.ty())
            }
            Tok::Typed(ty, payload) => {
                let value = typed_literal(ty, payload).map_err(|reason| {
                    let kind = ExprErrorKind::Literal {
                        text: format!("{ty}:{payload}"),
                        reason,
                    };
                    self.error_at(at, kind)
                })?;
                self.program.push(Instr::Push(value, FpSts::empty()));
                self.advance()?;
                Ok(value.ty())
            }
            Tok::Name(name) => {
                self.advance()?;
                if self.tok == Tok::LParen {
                    return self.call(name, at);
                }
                let value = match (name, self.options.dtype) {
                    ("inf", DType::F32) => Value::F32(f32::INFINITY),
                    ("inf", _) => Value::F16(f16::INFINITY),
                    ("nan", DType::F32) => Value::F32(F32_NAN),
                    ("nan", _) => Value::F16(F16_NAN),
                    _ => {
                        return Err(self.error_at(at, ExprErrorKind::UnknownName(name.to_string())))
                    }
                };
                self.program.push(Instr::Push(value, FpSts::empty()));
                Ok(value.ty())
            }
            Tok::LParen => {
                self.nest()?;
                self.advance()?;
                let t = self.expr()?;
                if self.tok != Tok::RParen {
                    return Err(self.expected("')'"));
                }
                self.depth -= 1;
                self.advance()?;
                Ok(t)
            }
            _ => Err(self.expected("a number, a function call or '('")),
        }
    }

    /// Parses the arguments of `name(` (the current token is `(`) and emits the call.
    fn call(&mut self, name: &'s str, at: usize) -> Result<DType, ExprError> {
        let (function, fname) = Function::lookup(name)
            .ok_or_else(|| self.error_at(at, ExprErrorKind::UnknownFunction(name.to_string())))?;
        self.nest()?;
        self.advance()?;
        let mut types = [DType::Bool; 2];
        let mut count = 0;
        if self.tok != Tok::RParen {
            loop {
                let t = self.expr()?;
                if count < types.len() {
                    types[count] = t;
                }
                count += 1;
                match self.tok {
                    Tok::Comma => self.advance()?,
                    Tok::RParen => break,
                    _ => return Err(self.expected("',' or ')'")),
                }
            }
        }
        self.depth -= 1;
        self.advance()?;
        if count != function.arity() {
            let kind = ExprErrorKind::Arity {
                name: fname,
                expected: function.arity(),
                found: count,
            };
            return Err(self.error_at(at, kind));
        }
        let type_error = |what: &str, t: DType| {
            let problem = format!("needs {what}, got {}", t.name());
            self.error_at(at, ExprErrorKind::Type { op: fname, problem })
        };
        let (instr, result) = match function {
            Function::Unary(op) if is_float(types[0]) => (Instr::Unary(op), types[0]),
            Function::Unary(_) => return Err(type_error("an f16 or f32 operand", types[0])),
            Function::Binary(op) => (
                Instr::Binary(op),
                self.same_float(fname, at, types[0], types[1])?,
            ),
            Function::Compare(op) => {
                self.same_float(fname, at, types[0], types[1])?;
                (Instr::Compare(op), DType::Bool)
            }
            Function::Cast(_) if types[0] == DType::Bool => {
                return Err(type_error("a number", types[0]));
            }
            Function::Cast(to) => (Instr::Cast(to), to),
        };
        self.program.push(instr);
        Ok(result)
    }
}

/// The value of a typed literal `ty:payload`, or why it is invalid.
fn typed_literal(ty: &str, payload: &str) -> Result<Value, &'static str> {
    let hex = |max_digits: usize| -> Result<u32, &'static str> {
        let digits = payload
            .strip_prefix("0x")
            .or_else(|| payload.strip_prefix("0X"))
            .ok_or("expected a bit pattern like f16:0x3c00 or f32:0x3f800000")?;
        if digits.is_empty()
            || digits.len() > max_digits
            || !digits.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(if max_digits == 4 {
                "an f16 bit pattern has 1 to 4 hex digits"
            } else {
                "an f32 bit pattern has 1 to 8 hex digits"
            });
        }
        u32::from_str_radix(digits, 16).map_err(|_| "invalid hex digits")
    };
    match ty {
        "f16" => Ok(Value::F16(f16::from_bits(hex(4)? as u16))),
        "f32" => Ok(Value::F32(f32::from_bits(hex(8)?))),
        "i32" => payload
            .parse()
            .map(Value::I32)
            .map_err(|_| "expected an integer in the i32 range"),
        _ => payload
            .parse()
            .map(Value::U8)
            .map_err(|_| "expected an integer from 0 to 255"),
    }
}

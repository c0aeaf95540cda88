//! τ²'s `calculate` tool:
//!
//! ```text
//! if not all(char in "0123456789+-*/(). " for char in expression): raise ValueError(...)
//! return str(round(float(eval(expression, {"__builtins__": None}, {})), 2))
//! ```
//!
//! With that alphabet `eval` still reaches a surprising part of Python: big
//! ints (`2**100`), `//` and `**`, `...` (Ellipsis), `()` (the empty
//! tuple), calls (`2(3)`, `2(*())`), complex numbers (`(-8)**0.5`) and the
//! CPython 3.11 parser's syntax-error messages. This module reproduces
//! them: a tokenizer with CPython's number rules, a recursive-descent parser
//! that fetches tokens in the same order as CPython's PEG parser (which
//! decides whether a tokenizer error or a parser error wins), a second
//! "error pass" with the `invalid_*` rules that apply to this alphabet, and
//! an evaluator with CPython's numeric semantics.

use num_bigint::BigInt;
use num_traits::{Signed, Zero};

use super::bigint::{self, true_div};
use super::ops::round_f64;
use super::repr::float_repr;
use super::{PyErr, PyResult};

/// Characters `calculate` accepts.
pub const ALPHABET: &str = "0123456789+-*/(). ";

/// Largest intermediate integer (in bits) the emulation computes; CPython
/// would go on (slowly, in memory) where this returns an error.
const MAX_INT_BITS: u64 = 1 << 22;

/// Limits that keep the emulation's recursion bounded (CPython has its own
/// parser and compiler recursion limits in the same region).
const MAX_DEPTH: usize = 500;
const MAX_TOKENS: usize = 5000;
const TOO_DEEP: &str = "expression too deeply nested to emulate";

/// Runs `calculate(expression)` on a string expression.
pub fn calculate(expression: &str) -> PyResult<String> {
    if !expression.chars().all(|c| ALPHABET.contains(c)) {
        return Err(PyErr::value("Invalid characters in expression"));
    }
    // `eval` strips leading spaces and tabs from string input.
    let src = expression.trim_start_matches([' ', '\t']);
    let expr = parse(src)?;
    let v = eval(&expr)?;
    let f = to_float(&v)?;
    Ok(float_repr(round_f64(f, 2)))
}

// ---------------------------------------------------------------- tokens

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Int(String),
    Float(String),
    Op(&'static str),
    Ellipsis,
    Dot,
    LPar,
    RPar,
    /// End of input at paren level 0 (NEWLINE + ENDMARKER).
    End,
    /// A tokenizer error, raised when the parser fetches this token.
    Error(String),
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    /// Paren level after the token (CPython's `token->level`).
    level: usize,
}

const LEADING_ZEROS: &str = "leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers";

fn tokenize(src: &str) -> Vec<Token> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut level = 0usize;
    let push = |out: &mut Vec<Token>, tok: Tok, level: usize| out.push(Token { tok, level });
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' => i += 1,
            b'(' => {
                if level >= 200 {
                    push(
                        &mut out,
                        Tok::Error("too many nested parentheses".into()),
                        level,
                    );
                    return out;
                }
                level += 1;
                push(&mut out, Tok::LPar, level);
                i += 1;
            }
            b')' => {
                if level == 0 {
                    push(&mut out, Tok::Error("unmatched ')'".into()), level);
                    return out;
                }
                level -= 1;
                push(&mut out, Tok::RPar, level);
                i += 1;
            }
            b'+' | b'-' => {
                push(&mut out, Tok::Op(if c == b'+' { "+" } else { "-" }), level);
                i += 1;
            }
            b'*' | b'/' => {
                let double = b.get(i + 1) == Some(&c);
                let op = match (c, double) {
                    (b'*', true) => "**",
                    (b'*', false) => "*",
                    (_, true) => "//",
                    _ => "/",
                };
                push(&mut out, Tok::Op(op), level);
                i += if double { 2 } else { 1 };
            }
            b'.' => {
                if b.get(i + 1).is_some_and(u8::is_ascii_digit) {
                    let start = i;
                    i += 1;
                    while i < b.len() && b[i].is_ascii_digit() {
                        i += 1;
                    }
                    push(&mut out, Tok::Float(src[start..i].into()), level);
                } else if b.get(i + 1) == Some(&b'.') && b.get(i + 2) == Some(&b'.') {
                    push(&mut out, Tok::Ellipsis, level);
                    i += 3;
                } else {
                    push(&mut out, Tok::Dot, level);
                    i += 1;
                }
            }
            _ => {
                // A number: CPython's tok_get for decimal literals.
                let start = i;
                if c == b'0' {
                    while i < b.len() && b[i] == b'0' {
                        i += 1;
                    }
                    let mut nonzero = false;
                    if i < b.len() && b[i].is_ascii_digit() {
                        nonzero = true;
                        while i < b.len() && b[i].is_ascii_digit() {
                            i += 1;
                        }
                    }
                    if b.get(i) == Some(&b'.') {
                        i += 1;
                        while i < b.len() && b[i].is_ascii_digit() {
                            i += 1;
                        }
                        push(&mut out, Tok::Float(src[start..i].into()), level);
                    } else if nonzero {
                        push(&mut out, Tok::Error(LEADING_ZEROS.into()), level);
                        return out;
                    } else {
                        push(&mut out, Tok::Int(src[start..i].into()), level);
                    }
                } else {
                    while i < b.len() && b[i].is_ascii_digit() {
                        i += 1;
                    }
                    if b.get(i) == Some(&b'.') {
                        i += 1;
                        while i < b.len() && b[i].is_ascii_digit() {
                            i += 1;
                        }
                        push(&mut out, Tok::Float(src[start..i].into()), level);
                    } else {
                        push(&mut out, Tok::Int(src[start..i].into()), level);
                    }
                }
            }
        }
    }
    if level > 0 {
        push(&mut out, Tok::Error("'(' was never closed".into()), level);
    } else {
        push(&mut out, Tok::End, 0);
    }
    out
}

// ---------------------------------------------------------------- parser

#[derive(Clone, Debug)]
enum Expr {
    Int(BigInt),
    Float(f64),
    Ellipsis,
    EmptyTuple,
    Unary(&'static str, Box<Expr>),
    Bin(&'static str, Box<Expr>, Box<Expr>),
    Call(Box<Expr>, Option<Box<Arg>>),
}

#[derive(Clone, Debug)]
enum Arg {
    Pos(Expr),
    Star(Expr),
    DoubleStar(Expr),
}

/// Why a parse attempt stopped.
#[derive(Clone)]
enum Stop {
    /// The alternative does not match (PEG failure, backtrack).
    Fail,
    /// An exception was raised (tokenizer error or a pass-2 `invalid_*`
    /// rule), which aborts the whole parse.
    Raise(String),
}

type PResult<T> = Result<T, Stop>;

struct Parser<'a> {
    toks: &'a [Token],
    pos: usize,
    /// Second pass: the `invalid_*` rules are active.
    errors_pass: bool,
    /// Packrat memo of `sum` by start position: pass 2 parses every
    /// expression twice (once for the juxtaposition check), which would be
    /// exponential in the nesting depth without it.
    memo: std::collections::HashMap<usize, (Result<Expr, Stop>, usize)>,
    /// Recursion depth of `factor` (unary chains).
    depth: usize,
}

impl<'a> Parser<'a> {
    fn new(toks: &'a [Token], errors_pass: bool) -> Self {
        Self {
            toks,
            pos: 0,
            errors_pass,
            memo: Default::default(),
            depth: 0,
        }
    }
}

impl Parser<'_> {
    /// Fetches the token at the cursor; fetching a tokenizer error raises it.
    fn peek(&mut self) -> PResult<&Tok> {
        let t = &self.toks[self.pos.min(self.toks.len() - 1)].tok;
        if let Tok::Error(msg) = t {
            return Err(Stop::Raise(msg.clone()));
        }
        Ok(t)
    }

    fn eat(&mut self, want: &Tok) -> PResult<bool> {
        if self.peek()? == want {
            self.pos += 1;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    fn eat_op(&mut self, op: &str) -> PResult<bool> {
        if matches!(self.peek()?, Tok::Op(o) if *o == op) {
            self.pos += 1;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Runs `f`, rewinding the cursor when it fails.
    fn attempt<T>(&mut self, f: impl FnOnce(&mut Self) -> PResult<T>) -> PResult<Option<T>> {
        let mark = self.pos;
        match f(self) {
            Ok(v) => Ok(Some(v)),
            Err(Stop::Fail) => {
                self.pos = mark;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// `eval_input: expressions NEWLINE* ENDMARKER`
    fn eval_input(&mut self) -> PResult<Expr> {
        let e = self.expression()?;
        if *self.peek()? == Tok::End {
            Ok(e)
        } else {
            Err(Stop::Fail)
        }
    }

    /// `expression`, with pass 2's `invalid_expression` first: two
    /// juxtaposed expressions inside brackets are "Perhaps you forgot a
    /// comma?".
    fn expression(&mut self) -> PResult<Expr> {
        if self.errors_pass {
            let mark = self.pos;
            let juxtaposed = self.attempt(|p| {
                p.sum()?;
                let mut inner = Parser::new(p.toks, false);
                inner.pos = p.pos;
                inner.sum()?;
                Ok(inner.pos)
            })?;
            self.pos = mark;
            if let Some(end) = juxtaposed
                && self.toks[end - 1].level > 0
            {
                return Err(Stop::Raise(
                    "invalid syntax. Perhaps you forgot a comma?".into(),
                ));
            }
        }
        self.sum()
    }

    fn sum(&mut self) -> PResult<Expr> {
        let start = self.pos;
        if let Some((r, end)) = self.memo.get(&start) {
            self.pos = *end;
            return r.clone();
        }
        let r = self.sum_uncached();
        self.memo.insert(start, (r.clone(), self.pos));
        r
    }

    fn sum_uncached(&mut self) -> PResult<Expr> {
        let mut left = self.term()?;
        loop {
            let op = match self.peek()? {
                Tok::Op("+") => "+",
                Tok::Op("-") => "-",
                _ => return Ok(left),
            };
            let mark = self.pos;
            self.pos += 1;
            match self.attempt(Self::term)? {
                Some(right) => left = Expr::Bin(op, Box::new(left), Box::new(right)),
                None => {
                    self.pos = mark;
                    return Ok(left);
                }
            }
        }
    }

    fn term(&mut self) -> PResult<Expr> {
        let mut left = self.factor()?;
        loop {
            let op = match self.peek()? {
                Tok::Op("*") => "*",
                Tok::Op("/") => "/",
                Tok::Op("//") => "//",
                _ => return Ok(left),
            };
            let mark = self.pos;
            self.pos += 1;
            match self.attempt(Self::factor)? {
                Some(right) => left = Expr::Bin(op, Box::new(left), Box::new(right)),
                None => {
                    self.pos = mark;
                    return Ok(left);
                }
            }
        }
    }

    fn factor(&mut self) -> PResult<Expr> {
        if self.depth > MAX_DEPTH {
            return Err(Stop::Raise(TOO_DEEP.into()));
        }
        for op in ["+", "-"] {
            if self.eat_op(op)? {
                self.depth += 1;
                let inner = self.factor();
                self.depth -= 1;
                return Ok(Expr::Unary(op, Box::new(inner?)));
            }
        }
        self.power()
    }

    fn power(&mut self) -> PResult<Expr> {
        let base = self.primary()?;
        if self.eat_op("**")? {
            match self.attempt(Self::factor)? {
                Some(exp) => return Ok(Expr::Bin("**", Box::new(base), Box::new(exp))),
                None => {
                    self.pos -= 1;
                    return Ok(base);
                }
            }
        }
        Ok(base)
    }

    fn primary(&mut self) -> PResult<Expr> {
        let mut e = self.atom()?;
        loop {
            match self.peek()? {
                Tok::LPar => {
                    let mark = self.pos;
                    self.pos += 1;
                    match self.attempt(Self::call_args)? {
                        Some(arg) => e = Expr::Call(Box::new(e), arg.map(Box::new)),
                        None => {
                            self.pos = mark;
                            return Ok(e);
                        }
                    }
                }
                Tok::Dot => {
                    // `primary '.' NAME`: there are no names in the alphabet,
                    // but the parser still fetches the token after the dot.
                    self.pos += 1;
                    self.peek()?;
                    self.pos -= 1;
                    return Ok(e);
                }
                _ => return Ok(e),
            }
        }
    }

    /// After `primary '('`: `[arguments] ')'`.
    fn call_args(&mut self) -> PResult<Option<Arg>> {
        if self.eat(&Tok::RPar)? {
            return Ok(None);
        }
        let arg = if self.eat_op("**")? {
            Arg::DoubleStar(self.expression()?)
        } else if self.eat_op("*")? {
            Arg::Star(self.expression()?)
        } else {
            Arg::Pos(self.expression()?)
        };
        if self.eat(&Tok::RPar)? {
            Ok(Some(arg))
        } else {
            Err(Stop::Fail)
        }
    }

    fn atom(&mut self) -> PResult<Expr> {
        let t = self.peek()?.clone();
        match t {
            Tok::Int(s) => {
                self.pos += 1;
                Ok(Expr::Int(bigint::from_decimal(&s)))
            }
            Tok::Float(s) => {
                self.pos += 1;
                Ok(Expr::Float(s.parse().unwrap_or(f64::NAN)))
            }
            Tok::Ellipsis => {
                self.pos += 1;
                Ok(Expr::Ellipsis)
            }
            Tok::LPar => {
                let mark = self.pos;
                self.pos += 1;
                // tuple: '(' [star_named_expression ',' ...] ')' — without
                // commas only `()` can match, but the first alternative
                // still parses a starred or plain expression.
                let starred = self.attempt(|p| {
                    if p.eat_op("*")? {
                        p.sum()?;
                    } else {
                        p.expression()?;
                    }
                    Err::<(), _>(Stop::Fail)
                });
                starred?;
                self.pos = mark + 1;
                if self.eat(&Tok::RPar)? {
                    return Ok(Expr::EmptyTuple);
                }
                // group: '(' named_expression ')'
                if let Some(e) = self.attempt(|p| {
                    let e = p.expression()?;
                    if p.eat(&Tok::RPar)? {
                        Ok(e)
                    } else {
                        Err(Stop::Fail)
                    }
                })? {
                    return Ok(e);
                }
                if self.errors_pass {
                    // invalid_group
                    self.pos = mark + 1;
                    if self.eat_op("*")?
                        && self.attempt(|p| p.expression())?.is_some()
                        && self.eat(&Tok::RPar)?
                    {
                        return Err(Stop::Raise("cannot use starred expression here".into()));
                    }
                    self.pos = mark + 1;
                    if self.eat_op("**")?
                        && self.attempt(|p| p.expression())?.is_some()
                        && self.eat(&Tok::RPar)?
                    {
                        return Err(Stop::Raise(
                            "cannot use double starred expression here".into(),
                        ));
                    }
                }
                self.pos = mark;
                Err(Stop::Fail)
            }
            _ => Err(Stop::Fail),
        }
    }
}

fn syntax_error(msg: &str, line: u32) -> PyErr {
    PyErr::other("SyntaxError", format!("{msg} (<string>, line {line})"))
}

/// Parses like CPython's `_PyPegen_run_parser` in eval mode.
fn parse(src: &str) -> PyResult<Expr> {
    let toks = tokenize(src);
    let first_error = toks.iter().find_map(|t| match &t.tok {
        Tok::Error(m) if m != "'(' was never closed" => Some(m.clone()),
        _ => None,
    });
    if toks.len() > MAX_TOKENS {
        return Err(PyErr::internal(TOO_DEEP));
    }
    let mut p1 = Parser::new(&toks, false);
    match p1.eval_input() {
        Ok(e) => return Ok(e),
        Err(Stop::Raise(msg)) if msg == TOO_DEEP => return Err(PyErr::internal(TOO_DEEP)),
        Err(Stop::Raise(msg)) => return Err(syntax_error(&msg, 1)),
        Err(Stop::Fail) => {}
    }
    let line = if src.is_empty() { 0 } else { 1 };
    let mut p2 = Parser::new(&toks, true);
    let msg = match p2.eval_input() {
        Err(Stop::Raise(msg))
            if toks
                .iter()
                .any(|t| matches!(&t.tok, Tok::Error(m) if *m == msg)) =>
        {
            msg
        }
        // A pass-2 rule or a generic error: tokenizing the rest of the
        // source may still find a tokenizer error, which takes precedence.
        Err(Stop::Raise(msg)) => first_error.unwrap_or(msg),
        _ => first_error.unwrap_or_else(|| "invalid syntax".into()),
    };
    Err(syntax_error(&msg, line))
}

// ---------------------------------------------------------------- values

#[derive(Clone, Debug)]
enum V {
    Int(BigInt),
    Float(f64),
    Complex(f64, f64),
    Tuple,
    Ellipsis,
}

impl V {
    fn type_name(&self) -> &'static str {
        match self {
            V::Int(_) => "int",
            V::Float(_) => "float",
            V::Complex(..) => "complex",
            V::Tuple => "tuple",
            V::Ellipsis => "ellipsis",
        }
    }

    /// `str(v)`.
    fn to_str(&self) -> String {
        match self {
            V::Int(i) => bigint::to_decimal(i),
            V::Float(f) => float_repr(*f),
            V::Complex(re, im) => complex_repr(*re, *im),
            V::Tuple => "()".into(),
            V::Ellipsis => "Ellipsis".into(),
        }
    }
}

fn complex_repr(re: f64, im: f64) -> String {
    let fmt = |x: f64| {
        let s = float_repr(x);
        s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
    };
    if re == 0.0 && re.is_sign_positive() {
        format!("{}j", fmt(im))
    } else {
        let sign = if im.is_sign_negative() || im.is_nan() && im.is_sign_negative() {
            ""
        } else {
            "+"
        };
        format!("({}{sign}{}j)", fmt(re), fmt(im))
    }
}

fn int_to_f64(i: &BigInt) -> PyResult<f64> {
    bigint::to_f64(i)
        .map_err(|_| PyErr::other("OverflowError", "int too large to convert to float"))
}

fn unsupported(op: &str, a: &V, b: &V) -> PyErr {
    let op = if op == "**" { "** or pow()" } else { op };
    PyErr::type_error(format!(
        "unsupported operand type(s) for {op}: '{}' and '{}'",
        a.type_name(),
        b.type_name()
    ))
}

fn eval(e: &Expr) -> PyResult<V> {
    match e {
        Expr::Int(i) => Ok(V::Int(i.clone())),
        Expr::Float(f) => Ok(V::Float(*f)),
        Expr::Ellipsis => Ok(V::Ellipsis),
        Expr::EmptyTuple => Ok(V::Tuple),
        Expr::Unary(op, inner) => {
            let v = eval(inner)?;
            match (v, *op) {
                (V::Int(i), "-") => Ok(V::Int(-i)),
                (V::Float(f), "-") => Ok(V::Float(-f)),
                (V::Complex(re, im), "-") => Ok(V::Complex(-re, -im)),
                (v @ (V::Int(_) | V::Float(_) | V::Complex(..)), _) => Ok(v),
                (v, op) => Err(PyErr::type_error(format!(
                    "bad operand type for unary {op}: '{}'",
                    v.type_name()
                ))),
            }
        }
        Expr::Bin(op, l, r) => {
            let a = eval(l)?;
            let b = eval(r)?;
            binop(op, a, b)
        }
        Expr::Call(callee, arg) => {
            let f = eval(callee)?;
            match arg.as_deref() {
                None => {}
                Some(Arg::Pos(x)) => {
                    eval(x)?;
                }
                Some(Arg::Star(x)) => {
                    let v = eval(x)?;
                    if !matches!(v, V::Tuple) {
                        return Err(PyErr::type_error(format!(
                            "{} argument after * must be an iterable, not {}",
                            f.to_str(),
                            v.type_name()
                        )));
                    }
                }
                Some(Arg::DoubleStar(x)) => {
                    let v = eval(x)?;
                    return Err(PyErr::type_error(format!(
                        "{} argument after ** must be a mapping, not {}",
                        f.to_str(),
                        v.type_name()
                    )));
                }
            }
            Err(PyErr::type_error(format!(
                "'{}' object is not callable",
                f.type_name()
            )))
        }
    }
}

fn binop(op: &str, a: V, b: V) -> PyResult<V> {
    use V::*;
    match (&a, &b) {
        (Int(x), Int(y)) => match op {
            "+" => Ok(Int(x + y)),
            "-" => Ok(Int(x - y)),
            "*" => Ok(Int(x * y)),
            "/" => {
                if y.is_zero() {
                    return Err(PyErr::other("ZeroDivisionError", "division by zero"));
                }
                true_div(x, y).map(Float).map_err(|_| {
                    PyErr::other(
                        "OverflowError",
                        "integer division result too large for a float",
                    )
                })
            }
            "//" => bigint::floor_div(x, y).map(Int).ok_or_else(|| {
                PyErr::other("ZeroDivisionError", "integer division or modulo by zero")
            }),
            _ => {
                if y.is_negative() {
                    float_pow(int_to_f64(x)?, int_to_f64(y)?)
                } else {
                    bigint::pow(x, y, MAX_INT_BITS)
                        .map(Int)
                        .ok_or_else(|| PyErr::internal("integer power too large to emulate"))
                }
            }
        },
        (Int(_) | Float(_), Int(_) | Float(_)) => {
            let x = as_f64(&a)?;
            let y = as_f64(&b)?;
            match op {
                "+" => Ok(Float(x + y)),
                "-" => Ok(Float(x - y)),
                "*" => Ok(Float(x * y)),
                "/" => {
                    if y == 0.0 {
                        Err(PyErr::other("ZeroDivisionError", "float division by zero"))
                    } else {
                        Ok(Float(x / y))
                    }
                }
                "//" => float_floordiv(x, y).map(Float),
                _ => float_pow(x, y),
            }
        }
        (Int(_) | Float(_) | Complex(..), Int(_) | Float(_) | Complex(..)) => {
            let (ar, ai) = as_complex(&a)?;
            let (br, bi) = as_complex(&b)?;
            match op {
                "+" => Ok(Complex(ar + br, ai + bi)),
                "-" => Ok(Complex(ar - br, ai - bi)),
                "*" => Ok(Complex(ar * br - ai * bi, ar * bi + ai * br)),
                "/" => complex_div(ar, ai, br, bi),
                "**" => complex_pow(ar, ai, br, bi),
                _ => Err(unsupported(op, &a, &b)),
            }
        }
        (Tuple, Tuple) if op == "+" => Ok(Tuple),
        (Tuple, Int(_)) | (Int(_), Tuple) if op == "*" => Ok(Tuple),
        (Tuple, _) | (_, Tuple)
            if op == "*"
                && matches!(
                    (&a, &b),
                    (Tuple, Float(_) | Complex(..) | Ellipsis | Tuple)
                        | (Float(_) | Complex(..) | Ellipsis, Tuple)
                ) =>
        {
            let other = if matches!(a, Tuple) { &b } else { &a };
            if matches!(other, Tuple) {
                return Err(unsupported(op, &a, &b));
            }
            Err(PyErr::type_error(format!(
                "can't multiply sequence by non-int of type '{}'",
                other.type_name()
            )))
        }
        (Tuple, _) if op == "+" => Err(PyErr::type_error(format!(
            "can only concatenate tuple (not \"{}\") to tuple",
            b.type_name()
        ))),
        _ => Err(unsupported(op, &a, &b)),
    }
}

fn as_f64(v: &V) -> PyResult<f64> {
    match v {
        V::Int(i) => int_to_f64(i),
        V::Float(f) => Ok(*f),
        _ => Err(PyErr::internal("not a real number")),
    }
}

fn as_complex(v: &V) -> PyResult<(f64, f64)> {
    match v {
        V::Complex(re, im) => Ok((*re, *im)),
        other => Ok((as_f64(other)?, 0.0)),
    }
}

/// CPython's `float_floor_div` (via `float_divmod`).
fn float_floordiv(vx: f64, wx: f64) -> PyResult<f64> {
    if wx == 0.0 {
        return Err(PyErr::other(
            "ZeroDivisionError",
            "float floor division by zero",
        ));
    }
    let mut m = vx % wx;
    let mut div = (vx - m) / wx;
    if m != 0.0 {
        if (wx < 0.0) != (m < 0.0) {
            m += wx;
            div -= 1.0;
        }
    } else {
        m = 0.0f64.copysign(wx);
    }
    let _ = m;
    if div != 0.0 {
        let mut floordiv = div.floor();
        if div - floordiv > 0.5 {
            floordiv += 1.0;
        }
        Ok(floordiv)
    } else {
        Ok(0.0f64.copysign(vx / wx))
    }
}

fn is_odd_integer(x: f64) -> bool {
    x.is_finite() && x.fract() == 0.0 && (x % 2.0).abs() == 1.0
}

/// CPython's `float_pow`.
fn float_pow(iv: f64, iw: f64) -> PyResult<V> {
    if iw == 0.0 {
        return Ok(V::Float(1.0));
    }
    if iv.is_nan() {
        return Ok(V::Float(iv));
    }
    if iw.is_nan() {
        return Ok(V::Float(if iv == 1.0 { 1.0 } else { iw }));
    }
    if iw.is_infinite() {
        let a = iv.abs();
        return Ok(V::Float(if a == 1.0 {
            1.0
        } else if (iw > 0.0) == (a > 1.0) {
            iw.abs()
        } else {
            0.0
        }));
    }
    if iv.is_infinite() {
        let odd = is_odd_integer(iw);
        return Ok(V::Float(if iw > 0.0 {
            if odd { iv } else { iv.abs() }
        } else if odd {
            0.0f64.copysign(iv)
        } else {
            0.0
        }));
    }
    if iv == 0.0 {
        let odd = is_odd_integer(iw);
        if iw < 0.0 {
            return Err(PyErr::other(
                "ZeroDivisionError",
                "0.0 cannot be raised to a negative power",
            ));
        }
        return Ok(V::Float(if odd { iv } else { 0.0 }));
    }
    let mut base = iv;
    let mut negate = false;
    if iv < 0.0 {
        if iw != iw.floor() {
            return complex_pow(iv, 0.0, iw, 0.0);
        }
        base = -iv;
        negate = is_odd_integer(iw);
    }
    if base == 1.0 {
        return Ok(V::Float(if negate { -1.0 } else { 1.0 }));
    }
    let mut ix = base.powf(iw);
    if ix.is_infinite() {
        return Err(PyErr::other(
            "OverflowError",
            "(34, 'Numerical result out of range')",
        ));
    }
    if negate {
        ix = -ix;
    }
    Ok(V::Float(ix))
}

fn complex_div(ar: f64, ai: f64, br: f64, bi: f64) -> PyResult<V> {
    if br == 0.0 && bi == 0.0 {
        return Err(PyErr::other(
            "ZeroDivisionError",
            "complex division by zero",
        ));
    }
    // CPython's _Py_c_quot (Smith's algorithm).
    let (abs_br, abs_bi) = (br.abs(), bi.abs());
    if abs_br >= abs_bi {
        let ratio = bi / br;
        let denom = br + bi * ratio;
        Ok(V::Complex(
            (ar + ai * ratio) / denom,
            (ai - ar * ratio) / denom,
        ))
    } else {
        let ratio = br / bi;
        let denom = br * ratio + bi;
        Ok(V::Complex(
            (ar * ratio + ai) / denom,
            (ai * ratio - ar) / denom,
        ))
    }
}

/// CPython's `_Py_c_pow` (the exponent is never an exact small integer
/// here for the cases that reach it from `float_pow`).
fn complex_pow(ar: f64, ai: f64, br: f64, bi: f64) -> PyResult<V> {
    if br == 0.0 && bi == 0.0 {
        return Ok(V::Complex(1.0, 0.0));
    }
    if ar == 0.0 && ai == 0.0 {
        if bi != 0.0 || br < 0.0 {
            return Err(PyErr::other(
                "ZeroDivisionError",
                "0.0 to a negative or complex power",
            ));
        }
        return Ok(V::Complex(0.0, 0.0));
    }
    let vabs = ar.hypot(ai);
    let mut len = vabs.powf(br);
    let at = ai.atan2(ar);
    let mut phase = at * br;
    if bi != 0.0 {
        len /= (at * bi).exp();
        phase += bi * vabs.ln();
    }
    Ok(V::Complex(len * phase.cos(), len * phase.sin()))
}

fn to_float(v: &V) -> PyResult<f64> {
    match v {
        V::Int(i) => int_to_f64(i),
        V::Float(f) => Ok(*f),
        other => Err(PyErr::type_error(format!(
            "float() argument must be a string or a real number, not '{}'",
            other.type_name()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(e: &str) -> String {
        match calculate(e) {
            Ok(s) => s,
            Err(e) => e.msg,
        }
    }

    #[test]
    fn matches_cpython_results() {
        let cases = [
            ("2+2", "4.0"),
            ("1/3", "0.33"),
            ("-2**2", "-4.0"),
            ("2**-1", "0.5"),
            ("-7//2", "-4.0"),
            ("-7.5//2", "-4.0"),
            ("99999999999999999999*99999999999999999999", "1e+40"),
            ("2**1100/2**1000", "1.2676506002282294e+30"),
            ("2.675", "2.67"),
            ("1/0", "division by zero"),
            ("1.0/0", "float division by zero"),
            ("1//0", "integer division or modulo by zero"),
            ("1.0//0", "float floor division by zero"),
            ("0**-1", "0.0 cannot be raised to a negative power"),
            ("10**400", "int too large to convert to float"),
            ("10.0**400", "(34, 'Numerical result out of range')"),
            (
                "(-8)**0.5",
                "float() argument must be a string or a real number, not 'complex'",
            ),
            (
                "(-8)**0.5//2",
                "unsupported operand type(s) for //: 'complex' and 'int'",
            ),
            ("(-8)**0.5/0", "complex division by zero"),
            (
                "()",
                "float() argument must be a string or a real number, not 'tuple'",
            ),
            (
                "() - ()",
                "unsupported operand type(s) for -: 'tuple' and 'tuple'",
            ),
            (
                "...",
                "float() argument must be a string or a real number, not 'ellipsis'",
            ),
            ("2(*2)", "2 argument after * must be an iterable, not int"),
            (
                "2(**())",
                "2 argument after ** must be a mapping, not tuple",
            ),
            ("(1)(2)", "'int' object is not callable"),
            ("abc", "Invalid characters in expression"),
        ];
        for (e, want) in cases {
            assert_eq!(run(e), want, "{e}");
        }
    }

    #[test]
    fn syntax_errors_match_cpython_311() {
        let cases = [
            ("", "invalid syntax (<string>, line 0)"),
            ("  ", "invalid syntax (<string>, line 0)"),
            ("(", "'(' was never closed (<string>, line 1)"),
            (")", "unmatched ')' (<string>, line 1)"),
            ("2 3", "invalid syntax (<string>, line 1)"),
            ("2 +", "invalid syntax (<string>, line 1)"),
            (
                "007",
                "leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers (<string>, line 1)",
            ),
            ("(1 2", "'(' was never closed (<string>, line 1)"),
            (
                "(1 2)",
                "invalid syntax. Perhaps you forgot a comma? (<string>, line 1)",
            ),
            (
                "1 (2 3)",
                "invalid syntax. Perhaps you forgot a comma? (<string>, line 1)",
            ),
            (
                "(1 2 07)",
                "leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers (<string>, line 1)",
            ),
            (
                "2 3 07",
                "leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers (<string>, line 1)",
            ),
            (
                "(*2)",
                "cannot use starred expression here (<string>, line 1)",
            ),
            (
                "(**2)",
                "cannot use double starred expression here (<string>, line 1)",
            ),
            ("*2", "invalid syntax (<string>, line 1)"),
            ("1..", "invalid syntax (<string>, line 1)"),
            ("5..5", "invalid syntax (<string>, line 1)"),
            (
                "(1.2.3)",
                "invalid syntax. Perhaps you forgot a comma? (<string>, line 1)",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(run(e), want, "{e:?}");
        }
    }
}

//! `calculate`'s parser: CPython 3.11's PEG parser in eval mode, reduced to
//! the rules this alphabet reaches, fetching tokens in the same order (which
//! decides whether a tokenizer error or a parser error wins), with the
//! second "error pass" and its `invalid_*` rules.
//!
//! Chains are kept flat — `a + b - c` is one [`Expr::Chain`], `-a ** -b **
//! c` one [`Expr::Power`], `f(x)(y)` one [`Expr::Calls`] — so the only
//! recursion, here and in the evaluator, is per bracket level (at most 200,
//! the tokenizer's limit), and that recursion grows its stack on the heap
//! when needed ([`stacker`]): no input can overflow the host's stack.
//!
//! Two CPython limits are reproduced because they answer instantly:
//!
//! * the parser's stack (`MAXSTACK` = 6000 rule levels) raises
//!   `MemoryError`; the levels each construct costs, in each pass, were
//!   measured on CPython 3.11 (see [`level`]);
//! * a decimal literal of more than 4300 digits is a `SyntaxError`
//!   (`sys.int_info.default_max_str_digits`).

use std::collections::HashMap;
use std::rc::Rc;

use super::super::PyErr;
use super::budget::Meter;
use super::lex::{Tok, Token, tokenize};

/// A sub-expression (shared: the memo hands out the same parse twice).
pub(super) type P = Rc<Expr>;

/// The expression tree (CPython's AST, with chains flattened).
#[derive(Debug)]
pub(super) enum Expr {
    /// Decimal digits, converted when evaluated.
    Int(Rc<str>),
    Float(f64),
    Ellipsis,
    EmptyTuple,
    /// `e0 op1 e1 op2 e2 ...`, left-associative: a sum (`+ -`) of terms or
    /// a term (`* / //`) of factors.
    Chain(P, Vec<(&'static str, P)>),
    /// `u1 (p1 ** u2 (p2 ** ... un pn))`: each segment's unary operators
    /// (outermost first) and primary; `**` is right-associative.
    Power(Vec<(Vec<&'static str>, P)>),
    /// `callee(a1)(a2)...`; `None` is an empty argument list.
    Calls(P, Vec<Option<Arg>>),
}

/// A call's single argument (no commas in the alphabet).
#[derive(Debug)]
pub(super) enum Arg {
    Pos(P),
    Star(P),
    DoubleStar(P),
}

/// CPython's parser-stack model: `MAXSTACK` and the rule levels, per pass
/// (`[first, second]`: the second pass's `invalid_*` rules sit deeper).
/// Measured on CPython 3.11.7: the longest `-`/`**` chains that still
/// parse inside 0–200 brackets of each kind fit `BASE + GROUP·groups +
/// CALL·calls + UNARY·unary + POWER·powers < MAX_STACK` exactly.
pub(super) mod level {
    /// `p->level` that raises `MemoryError`.
    pub const MAX_STACK: u32 = 6000;
    /// Levels from `eval_input` down to the first atom.
    pub const BASE: [u32; 2] = [24, 27];
    /// A parenthesized group (`atom` → `group` → ... → `atom`).
    pub const GROUP: [u32; 2] = [28, 30];
    /// A call's argument list (`primary` → `args` → ... → `atom`).
    pub const CALL: [u32; 2] = [24, 25];
    /// A unary `+`/`-` (`factor` → `factor`).
    pub const UNARY: u32 = 1;
    /// A `**` exponent (`power` → `factor` → `power`).
    pub const POWER: u32 = 2;
}

/// CPython's `sys.int_info.default_max_str_digits`.
pub(super) const INT_MAX_STR_DIGITS: usize = 4300;

/// Units charged per token fetch (a memo lookup, a clone of an `Rc`).
const FETCH_COST: u64 = 2;

/// Stack left below which a bracket level moves to a new stack segment,
/// and the size of that segment. One level takes a few KiB in a debug
/// build.
const RED_ZONE: usize = 64 * 1024;
const STACK_SEGMENT: usize = 1024 * 1024;

/// Runs `f` on a fresh heap-allocated stack segment if the current stack
/// is nearly used up.
pub(super) fn grow<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(RED_ZONE, STACK_SEGMENT, f)
}

/// Why a parse attempt stopped.
#[derive(Clone, Debug)]
enum Stop {
    /// The alternative does not match (PEG failure, backtrack).
    Fail,
    /// A `SyntaxError` was raised (tokenizer error, digit limit or a pass-2
    /// `invalid_*` rule), which aborts the whole parse.
    Raise(String),
    /// Another exception (parser stack exhausted, work budget spent).
    Abort(PyErr),
}

type PResult<T> = Result<T, Stop>;

struct Parser<'a, 'm> {
    toks: &'a [Token],
    pos: usize,
    /// Second pass: the `invalid_*` rules are active.
    errors_pass: bool,
    /// Packrat memo of `sum` by start position, one per pass (pass 2's
    /// juxtaposition check parses with the pass-1 grammar and shares its
    /// memo): backtracking re-parses each bracket's contents, which would
    /// be exponential in the nesting depth without it.
    memo: [HashMap<usize, (PResult<P>, usize)>; 2],
    /// CPython's `p->level` at the cursor (see [`level`]).
    level: u32,
    meter: &'m mut Meter,
}

impl Parser<'_, '_> {
    /// Fetches the token at the cursor; fetching a tokenizer error raises it.
    fn peek(&mut self) -> PResult<&Tok> {
        self.meter.charge(FETCH_COST).map_err(Stop::Abort)?;
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

    /// Descends `levels` rule levels; CPython raises `MemoryError` (with
    /// an empty message) when its parser stack runs out.
    fn descend(&mut self, levels: u32) -> PResult<()> {
        self.level += levels;
        if self.level >= level::MAX_STACK {
            return Err(Stop::Abort(PyErr::other("MemoryError", "")));
        }
        Ok(())
    }

    /// Runs `f` one bracket deeper: `levels` more rule levels, on a grown
    /// stack if needed; the level is restored afterwards.
    fn nested<T>(&mut self, levels: u32, f: impl FnOnce(&mut Self) -> PResult<T>) -> PResult<T> {
        let saved = self.level;
        let r = self.descend(levels).and_then(|()| grow(|| f(self)));
        self.level = saved;
        r
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
    fn eval_input(&mut self) -> PResult<P> {
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
    fn expression(&mut self) -> PResult<P> {
        if self.errors_pass {
            let mark = self.pos;
            let juxtaposed = self.attempt(|p| {
                p.sum()?;
                p.errors_pass = false;
                let second = p.sum();
                p.errors_pass = true;
                second?;
                Ok(p.pos)
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

    fn sum(&mut self) -> PResult<P> {
        let start = self.pos;
        let pass = usize::from(self.errors_pass);
        if let Some((r, end)) = self.memo[pass].get(&start) {
            self.pos = *end;
            return r.clone();
        }
        let r = self.chain(&["+", "-"], Self::term);
        self.memo[pass].insert(start, (r.clone(), self.pos));
        r
    }

    fn term(&mut self) -> PResult<P> {
        self.chain(&["*", "/", "//"], Self::factor)
    }

    /// `operand (op operand)*`, left-associative; an operator not followed
    /// by an operand is left for the caller.
    fn chain(&mut self, ops: &[&'static str], operand: fn(&mut Self) -> PResult<P>) -> PResult<P> {
        let first = operand(self)?;
        let mut rest = Vec::new();
        loop {
            let op = match self.peek()? {
                Tok::Op(o) if ops.contains(o) => *o,
                _ => break,
            };
            let mark = self.pos;
            self.pos += 1;
            match self.attempt(operand)? {
                Some(right) => rest.push((op, right)),
                None => {
                    self.pos = mark;
                    break;
                }
            }
        }
        Ok(if rest.is_empty() {
            first
        } else {
            Rc::new(Expr::Chain(first, rest))
        })
    }

    /// `factor: ('+' | '-') factor | power` and `power: primary '**'
    /// factor | primary`, as one loop over `**` segments.
    fn factor(&mut self) -> PResult<P> {
        let saved = self.level;
        let r = self.power_chain();
        self.level = saved;
        r
    }

    fn power_chain(&mut self) -> PResult<P> {
        let mut segments: Vec<(Vec<&'static str>, P)> = Vec::new();
        loop {
            let start = self.pos;
            let mut unary = Vec::new();
            loop {
                let op = match self.peek()? {
                    Tok::Op("+") => "+",
                    Tok::Op("-") => "-",
                    _ => break,
                };
                self.pos += 1;
                unary.push(op);
                self.descend(level::UNARY)?;
            }
            match self.primary() {
                Ok(p) => segments.push((unary, p)),
                Err(Stop::Fail) if !segments.is_empty() => {
                    // The exponent is not a factor: the last power is just
                    // its primary, and the `**` is left for the caller.
                    self.pos = start - 1;
                    break;
                }
                Err(e) => return Err(e),
            }
            if !self.eat_op("**")? {
                break;
            }
            self.descend(level::POWER)?;
        }
        if segments.len() == 1 && segments[0].0.is_empty() {
            return Ok(segments.swap_remove(0).1);
        }
        Ok(Rc::new(Expr::Power(segments)))
    }

    fn primary(&mut self) -> PResult<P> {
        let callee = self.atom()?;
        let mut calls = Vec::new();
        loop {
            match self.peek()? {
                Tok::LPar => {
                    let mark = self.pos;
                    self.pos += 1;
                    let levels = level::CALL[usize::from(self.errors_pass)];
                    let args = self.nested(levels, |p| p.attempt(Self::call_args))?;
                    match args {
                        Some(arg) => calls.push(arg),
                        None => {
                            self.pos = mark;
                            break;
                        }
                    }
                }
                Tok::Dot => {
                    // `primary '.' NAME`: there are no names in the alphabet,
                    // but the parser still fetches the token after the dot.
                    self.pos += 1;
                    self.peek()?;
                    self.pos -= 1;
                    break;
                }
                _ => break,
            }
        }
        Ok(if calls.is_empty() {
            callee
        } else {
            Rc::new(Expr::Calls(callee, calls))
        })
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

    fn atom(&mut self) -> PResult<P> {
        let e = match self.peek()? {
            Tok::Int(digits) => {
                // CPython converts the literal as the parser consumes it;
                // an all-zero literal is never "too long".
                if digits.len() > INT_MAX_STR_DIGITS && !digits.starts_with('0') {
                    return Err(Stop::Raise(format!(
                        "Exceeds the limit ({INT_MAX_STR_DIGITS} digits) for integer string \
                         conversion: value has {} digits; use sys.set_int_max_str_digits() to \
                         increase the limit - Consider hexadecimal for huge integer literals to \
                         avoid decimal conversion limits.",
                        digits.len()
                    )));
                }
                Expr::Int(digits.clone())
            }
            Tok::Float(f) => Expr::Float(*f),
            Tok::Ellipsis => Expr::Ellipsis,
            Tok::LPar => {
                let mark = self.pos;
                self.pos += 1;
                let levels = level::GROUP[usize::from(self.errors_pass)];
                return self.nested(levels, |p| p.group(mark));
            }
            _ => return Err(Stop::Fail),
        };
        self.pos += 1;
        Ok(Rc::new(e))
    }

    /// After an atom's `(` (at `mark`): a tuple, a group, or in pass 2 the
    /// `invalid_group` errors.
    fn group(&mut self, mark: usize) -> PResult<P> {
        // tuple: '(' [star_named_expression ',' ...] ')' — without
        // commas only `()` can match, but the first alternative
        // still parses a starred or plain expression.
        self.attempt(|p| {
            if p.eat_op("*")? {
                p.sum()?;
            } else {
                p.expression()?;
            }
            Err::<(), _>(Stop::Fail)
        })?;
        self.pos = mark + 1;
        if self.eat(&Tok::RPar)? {
            return Ok(Rc::new(Expr::EmptyTuple));
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
}

fn syntax_error(msg: &str, line: u32) -> PyErr {
    PyErr::other("SyntaxError", format!("{msg} (<string>, line {line})"))
}

/// Parses like CPython's `_PyPegen_run_parser` in eval mode.
pub(super) fn parse(src: &str, meter: &mut Meter) -> Result<P, PyErr> {
    let toks = tokenize(src);
    meter.charge(toks.len() as u64)?;
    let is_token_error = |msg: &str| {
        toks.iter()
            .any(|t| matches!(&t.tok, Tok::Error(m) if m == msg))
    };
    // After a parser error CPython tokenizes the rest of the source, and a
    // tokenizer error found there wins — except an unclosed bracket, which
    // counts only when opened on an earlier line (there is one line).
    let first_error = toks.iter().find_map(|t| match &t.tok {
        Tok::Error(m) if m != "'(' was never closed" => Some(m.clone()),
        _ => None,
    });
    let mut p = Parser {
        toks: &toks,
        pos: 0,
        errors_pass: false,
        memo: Default::default(),
        level: level::BASE[0],
        meter,
    };
    match p.eval_input() {
        Ok(e) => return Ok(e),
        Err(Stop::Abort(e)) => return Err(e),
        Err(Stop::Raise(msg)) if is_token_error(&msg) => return Err(syntax_error(&msg, 1)),
        // The digit limit: CPython's second pass does nothing once the
        // first one raised, but the rest of the source is still tokenized.
        Err(Stop::Raise(msg)) => return Err(syntax_error(&first_error.unwrap_or(msg), 1)),
        Err(Stop::Fail) => {}
    }
    let line = if src.is_empty() { 0 } else { 1 };
    p.errors_pass = true;
    p.pos = 0;
    p.level = level::BASE[1];
    let msg = match p.eval_input() {
        Err(Stop::Abort(e)) => return Err(e),
        Err(Stop::Raise(msg)) if is_token_error(&msg) => msg,
        // A pass-2 rule or a generic error: tokenizing the rest of the
        // source may still find a tokenizer error, which takes precedence.
        Err(Stop::Raise(msg)) => first_error.unwrap_or(msg),
        _ => first_error.unwrap_or_else(|| "invalid syntax".into()),
    };
    Err(syntax_error(&msg, line))
}

/// The depth of CPython's AST for `e` (nodes on the longest root-to-leaf
/// path), which its compiler limits (see `calculate`'s recursion check).
pub(super) fn ast_depth(e: &Expr) -> u64 {
    match e {
        Expr::Int(_) | Expr::Float(_) | Expr::Ellipsis | Expr::EmptyTuple => 1,
        // ((e0 op e1) op e2) ...: e0 is under k BinOps, e_i under k - i + 1.
        Expr::Chain(first, rest) => {
            let k = rest.len() as u64;
            let mut d = k + grow(|| ast_depth(first));
            for (i, (_, e)) in rest.iter().enumerate() {
                d = d.max(k - i as u64 + grow(|| ast_depth(e)));
            }
            d
        }
        // u1(p1 ** u2(p2 ** ...)), built from the innermost segment out.
        Expr::Power(segments) => {
            let mut inner = 0;
            for (i, (unary, p)) in segments.iter().enumerate().rev() {
                let own = grow(|| ast_depth(p));
                let here = if i + 1 == segments.len() {
                    own
                } else {
                    1 + own.max(inner)
                };
                inner = unary.len() as u64 + here;
            }
            inner
        }
        // Call(Call(callee, a1), a2): the callee under m Calls.
        Expr::Calls(callee, calls) => {
            let m = calls.len() as u64;
            let mut d = m + grow(|| ast_depth(callee));
            for (j, arg) in calls.iter().enumerate() {
                let arg_depth = match arg {
                    None => 0,
                    Some(Arg::Pos(x) | Arg::DoubleStar(x)) => grow(|| ast_depth(x)),
                    // Starred(x) is a node of its own.
                    Some(Arg::Star(x)) => 1 + grow(|| ast_depth(x)),
                };
                d = d.max(m - j as u64 + arg_depth);
            }
            d
        }
    }
}

//! `calculate`'s tokenizer: CPython 3.11's `tok_get` restricted to the
//! alphabet `0123456789+-*/(). `, including its errors (which the parser
//! raises only when it fetches the offending token).

use std::rc::Rc;

/// CPython's `MAXLEVEL`: the tokenizer refuses a 201st open bracket.
const MAX_PAREN_LEVEL: usize = 200;

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Tok {
    /// Decimal digits (cheap to clone: the parser may fetch a token twice).
    Int(Rc<str>),
    Float(f64),
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
pub(super) struct Token {
    pub tok: Tok,
    /// Paren level after the token (CPython's `token->level`).
    pub level: usize,
}

const LEADING_ZEROS: &str = "leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers";

/// Tokenizes `src`; the list ends with `End` or with the first error.
pub(super) fn tokenize(src: &str) -> Vec<Token> {
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
                if level >= MAX_PAREN_LEVEL {
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
                    push(&mut out, float(&src[start..i]), level);
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
                        push(&mut out, float(&src[start..i]), level);
                    } else if nonzero {
                        push(&mut out, Tok::Error(LEADING_ZEROS.into()), level);
                        return out;
                    } else {
                        push(&mut out, Tok::Int(Rc::from(&src[start..i])), level);
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
                        push(&mut out, float(&src[start..i]), level);
                    } else {
                        push(&mut out, Tok::Int(Rc::from(&src[start..i])), level);
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

/// A float literal's value (Rust's parser is correctly rounded, like
/// CPython's `PyOS_string_to_double`, and accepts `1.` and `.5`).
fn float(text: &str) -> Tok {
    Tok::Float(text.parse().unwrap_or(f64::NAN))
}

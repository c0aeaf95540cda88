//! A reader for the few Python constructs τ²'s tool and data-model modules
//! are made of: classes, decorated methods whose signatures span several
//! lines, docstrings, annotated class attributes and module-level aliases,
//! and the small expressions inside them (names, subscripts, calls, `|`,
//! literals).
//!
//! It is not a Python parser. It tokenizes the whole file (so strings,
//! comments and bracketed line continuations are never misread), groups the
//! tokens into logical lines and indentation blocks, and keeps each
//! expression as tokens until someone asks for it: only what the tool specs
//! actually reference gets parsed, so an exotic construct elsewhere in the
//! file costs nothing, while one that *is* referenced and not understood is
//! a [`ToolSourceError`] naming the file, line and construct, never a guess.

use std::borrow::Cow;

use super::docstring::DocstringError;
use super::schema::SchemaError;

/// Why the tool specs could not be derived from the package's Python
/// sources.
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}: {}{problem}", tool.as_deref().map(|t| format!("tool `{t}`: ")).unwrap_or_default())]
pub struct ToolSourceError {
    /// The source file, as named in the wheel (`tau2/domains/.../tools.py`).
    pub file: String,
    /// 1-based line of the construct.
    pub line: usize,
    /// The tool being derived, when the problem belongs to one.
    pub tool: Option<String>,
    /// What went wrong.
    pub problem: SpecProblem,
}

/// What [`ToolSourceError`] could not do.
#[derive(Debug, thiserror::Error)]
pub enum SpecProblem {
    /// The file could not be tokenized or a statement has an unexpected shape.
    #[error("cannot parse: {0}")]
    Syntax(String),
    /// An expression (annotation, decorator, default) this reader does not
    /// understand.
    #[error("cannot read `{text}`: {reason}")]
    Expression {
        /// The expression as written.
        text: String,
        /// Why it was refused (boxed: it nests).
        reason: Box<SchemaError>,
    },
    /// A type annotation with no JSON-schema rule here.
    #[error("cannot derive a JSON schema for `{annotation}`: {reason}")]
    Annotation {
        /// The annotation as written.
        annotation: String,
        /// Why it was refused (boxed: it nests).
        reason: Box<SchemaError>,
    },
    /// A docstring the Google-style reading cannot handle like the reference.
    #[error("docstring: {0}")]
    Docstring(DocstringError),
    /// A construct that would change the schema in ways not modelled here.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The Python toolkit and the native one disagree (tool set, parameters
    /// or category), so the wheel is not the version the emulation follows.
    #[error("does not match the native toolkit: {0}")]
    Toolkit(String),
}

/// Why an expression kept as tokens (see [`Src`]) could not be read: the
/// constructs outside the small expression language this reader knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// A token where none was expected (after a complete expression, or an
    /// operator that starts none).
    #[error("unexpected `{0}`")]
    Unexpected(String),
    /// A required operator (`,`, `)`, ...) is missing.
    #[error("expected `{op}`, found `{found}`")]
    Expected {
        /// The operator that was required.
        op: String,
        /// The token found instead.
        found: String,
    },
    /// The tokens ended where an operator was required.
    #[error("expected `{0}` at the end")]
    ExpectedAtEnd(String),
    /// The tokens ended where an expression was required.
    #[error("expected an expression")]
    MissingExpression,
    /// `.` not followed by a name.
    #[error("expected a name after `.`")]
    MissingAttribute,
    /// `.name` after something that is not a (dotted) name.
    #[error("attribute of a non-name")]
    AttributeOfNonName,
    /// `f(a=1, b)`.
    #[error("positional argument after a keyword argument")]
    PositionalAfterKeyword,
    /// An expression starting with a keyword (`lambda`, `not`, ...).
    #[error("`{0}` expressions are not supported")]
    Keyword(String),
    /// `-` before something that is not an integer.
    #[error("unary minus on a non-integer")]
    UnaryMinus,
    /// A number that is not a plain decimal integer (as written).
    #[error("number `{0}` is not a plain decimal integer")]
    Number(String),
    /// A string token without quotes (as written).
    #[error("not a string literal: {0}")]
    StringToken(String),
    /// A docstring statement whose value is not a string.
    #[error("not a string literal")]
    NotAString,
    /// `b"..."`.
    #[error("bytes literals are not supported")]
    Bytes,
    /// `f"..."`.
    #[error("f-strings are not supported")]
    FString,
    /// A `\x`, `\u` or `\U` escape without its hex digits (the escape
    /// letter and the digits found).
    #[error("bad escape \\{0}")]
    BadEscape(String),
    /// An octal escape beyond the Unicode range.
    #[error("bad octal escape")]
    BadOctalEscape,
    /// `\N{...}`.
    #[error("\\N{{...}} escapes are not supported")]
    NamedEscape,
}

impl ToolSourceError {
    pub(crate) fn new(file: &str, line: usize, problem: SpecProblem) -> Self {
        ToolSourceError {
            file: file.to_string(),
            line,
            tool: None,
            problem,
        }
    }

    /// Attributes the error to `tool` unless it already names one.
    pub(crate) fn in_tool(mut self, tool: &str) -> Self {
        self.tool.get_or_insert_with(|| tool.to_string());
        self
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokKind {
    Name,
    Number,
    Str,
    Op,
}

/// One token; `text` is its exact source text (a string keeps its prefix
/// and quotes).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tok<'a> {
    pub(crate) kind: TokKind,
    pub(crate) text: &'a str,
    pub(crate) line: usize,
    start: usize,
    end: usize,
}

impl Tok<'_> {
    fn is_op(&self, op: &str) -> bool {
        self.kind == TokKind::Op && self.text == op
    }

    fn is_name(&self, name: &str) -> bool {
        self.kind == TokKind::Name && self.text == name
    }
}

/// A logical line: the tokens of one statement (bracketed continuations and
/// backslash continuations joined) and the column of its first token.
#[derive(Clone, Debug)]
struct Line<'a> {
    indent: usize,
    toks: Vec<Tok<'a>>,
}

/// Python's universal newlines: the reference reads sources with `\r\n` and
/// `\r` turned into `\n`, which docstring texts then contain.
pub(crate) fn normalize_newlines(src: &str) -> Cow<'_, str> {
    if src.contains('\r') {
        Cow::Owned(src.replace("\r\n", "\n").replace('\r', "\n"))
    } else {
        Cow::Borrowed(src)
    }
}

/// Multi-character operators, longest first, so `->` or `**` is one token.
const OPS: [&str; 20] = [
    "...", "**=", "//=", ">>=", "<<=", "->", "**", "//", "==", "!=", "<=", ">=", ":=", "+=", "-=",
    "*=", "/=", "|=", "<<", ">>",
];
const SINGLE_OPS: &[u8] = b"()[]{}:,.;@=+-*/%<>&|^~!";

/// Column of the text before a line's first token (tabs to multiples of 8,
/// as the Python tokenizer counts them).
fn column(prefix: &str) -> usize {
    prefix.chars().fold(0, |col, c| match c {
        '\t' => (col / 8 + 1) * 8,
        '\x0c' => 0,
        _ => col + 1,
    })
}

fn lex(src: &str) -> Result<Vec<Line<'_>>, (usize, String)> {
    let b = src.as_bytes();
    let mut lines = Vec::new();
    let mut cur: Vec<Tok> = Vec::new();
    let (mut i, mut line, mut depth, mut line_start) = (0, 1, 0usize, 0);
    let mut cur_indent = 0;
    // After `;` the next statement shares the line, and its indentation.
    let mut inherited: Option<usize> = None;
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' | b'\t' | b'\x0c' => i += 1,
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'\\' if b.get(i + 1) == Some(&b'\n') => {
                i += 2;
                line += 1;
                line_start = i;
            }
            b'\n' => {
                i += 1;
                line += 1;
                line_start = i;
                inherited = None;
                if depth == 0 && !cur.is_empty() {
                    lines.push(Line {
                        indent: cur_indent,
                        toks: std::mem::take(&mut cur),
                    });
                }
            }
            _ => {
                let (start, tok_line) = (i, line);
                let kind = if let Some(quote_at) = string_start(b, i) {
                    i = scan_string(b, quote_at, &mut line)
                        .ok_or_else(|| (tok_line, "unterminated string literal".to_string()))?;
                    TokKind::Str
                } else if c == b'_' || c.is_ascii_alphabetic() || c >= 0x80 {
                    let rest = &src[i..];
                    let first = rest.chars().next().unwrap_or(' ');
                    if !(first == '_' || first.is_alphabetic()) {
                        return Err((line, format!("unexpected character {first:?}")));
                    }
                    i += rest
                        .find(|ch: char| !(ch == '_' || ch.is_alphanumeric()))
                        .unwrap_or(rest.len());
                    TokKind::Name
                } else if c.is_ascii_digit()
                    || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
                {
                    i += 1;
                    while i < b.len() {
                        let d = b[i];
                        let exponent_sign = (d == b'+' || d == b'-')
                            && matches!(b[i - 1], b'e' | b'E')
                            && !src[start..i].starts_with("0x")
                            && !src[start..i].starts_with("0X");
                        if d.is_ascii_alphanumeric() || d == b'_' || d == b'.' || exponent_sign {
                            i += 1;
                        } else {
                            break;
                        }
                    }
                    TokKind::Number
                } else if let Some(op) = OPS.iter().find(|op| src[i..].starts_with(**op)) {
                    i += op.len();
                    TokKind::Op
                } else if SINGLE_OPS.contains(&c) {
                    match c {
                        b'(' | b'[' | b'{' => depth += 1,
                        b')' | b']' | b'}' => {
                            depth = depth
                                .checked_sub(1)
                                .ok_or_else(|| (line, format!("unmatched `{}`", c as char)))?;
                        }
                        _ => {}
                    }
                    i += 1;
                    TokKind::Op
                } else {
                    let ch = src[i..].chars().next().unwrap_or(' ');
                    return Err((line, format!("unexpected character {ch:?}")));
                };
                let tok = Tok {
                    kind,
                    text: &src[start..i],
                    line: tok_line,
                    start,
                    end: i,
                };
                if depth == 0 && tok.is_op(";") {
                    if !cur.is_empty() {
                        lines.push(Line {
                            indent: cur_indent,
                            toks: std::mem::take(&mut cur),
                        });
                    }
                    inherited = Some(cur_indent);
                    continue;
                }
                if cur.is_empty() {
                    cur_indent = inherited.unwrap_or_else(|| column(&src[line_start..start]));
                }
                cur.push(tok);
            }
        }
    }
    if depth > 0 {
        return Err((line, "unclosed bracket at end of file".into()));
    }
    if !cur.is_empty() {
        lines.push(Line {
            indent: cur_indent,
            toks: cur,
        });
    }
    Ok(lines)
}

/// If a string literal (with an optional `r`/`b`/`u`/`f` prefix) starts at
/// `i`, the index of its opening quote.
fn string_start(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i;
    while j < b.len() && j - i < 2 && b"rRbBuUfF".contains(&b[j]) {
        j += 1;
    }
    matches!(b.get(j), Some(b'\'' | b'"')).then_some(j)
}

/// The index just past the string literal whose opening quote is at `q`.
fn scan_string(b: &[u8], q: usize, line: &mut usize) -> Option<usize> {
    let quote = b[q];
    let triple = b.get(q + 1) == Some(&quote) && b.get(q + 2) == Some(&quote);
    let mut k = q + if triple { 3 } else { 1 };
    loop {
        match *b.get(k)? {
            b'\\' => {
                if b.get(k + 1) == Some(&b'\n') {
                    *line += 1;
                }
                k += 2;
            }
            b'\n' => {
                if !triple {
                    return None;
                }
                *line += 1;
                k += 1;
            }
            c if c == quote => {
                if !triple {
                    return Some(k + 1);
                }
                if b.get(k + 1) == Some(&quote) && b.get(k + 2) == Some(&quote) {
                    return Some(k + 3);
                }
                k += 1;
            }
            _ => k += 1,
        }
    }
}

/// A statement with the statements indented under it.
struct Node<'a> {
    line: Line<'a>,
    children: Vec<Node<'a>>,
}

fn tree<'a>(lines: &[Line<'a>], i: &mut usize, parent_indent: Option<usize>) -> Vec<Node<'a>> {
    let mut out = Vec::new();
    while let Some(l) = lines.get(*i) {
        if parent_indent.is_some_and(|p| l.indent <= p) {
            break;
        }
        *i += 1;
        let children = tree(lines, i, Some(l.indent));
        out.push(Node {
            line: l.clone(),
            children,
        });
    }
    out
}

/// An expression kept as tokens until asked for.
#[derive(Clone, Debug)]
pub(crate) struct Src<'a> {
    pub(crate) line: usize,
    toks: Vec<Tok<'a>>,
    full: &'a str,
}

impl<'a> Src<'a> {
    fn new(full: &'a str, line: usize, toks: &[Tok<'a>]) -> Self {
        Src {
            line: toks.first().map_or(line, |t| t.line),
            toks: toks.to_vec(),
            full,
        }
    }

    /// The source text, whitespace runs collapsed (for messages).
    pub(crate) fn text(&self) -> String {
        match (self.toks.first(), self.toks.last()) {
            (Some(a), Some(z)) => self.full[a.start..z.end]
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
            _ => String::new(),
        }
    }

    /// Parses the tokens as one expression.
    pub(crate) fn expr(&self) -> Result<Expr, ExprError> {
        let mut p = ExprParser {
            toks: &self.toks,
            i: 0,
        };
        let e = p.union()?;
        match p.toks.get(p.i) {
            None => Ok(e),
            Some(t) => Err(ExprError::Unexpected(t.text.to_string())),
        }
    }

    /// The value of a string-literal statement (implicitly concatenated
    /// pieces joined), as `__doc__` holds it.
    pub(crate) fn string(&self) -> Result<String, ExprError> {
        match self.expr()? {
            Expr::Str(s) => Ok(s),
            _ => Err(ExprError::NotAString),
        }
    }
}

fn is_string_statement(toks: &[Tok]) -> bool {
    !toks.is_empty() && toks.iter().all(|t| t.kind == TokKind::Str)
}

/// A method: decorators, parameter list and docstring.
#[derive(Debug)]
pub(crate) struct Method<'a> {
    pub(crate) name: &'a str,
    pub(crate) line: usize,
    pub(crate) decorators: Vec<Src<'a>>,
    params: Src<'a>,
    pub(crate) doc: Option<Src<'a>>,
}

/// One parameter of a `def`.
#[derive(Debug)]
pub(crate) struct Param<'a> {
    pub(crate) name: &'a str,
    pub(crate) line: usize,
    pub(crate) annotation: Option<Src<'a>>,
    pub(crate) default: Option<Src<'a>>,
}

impl<'a> Method<'a> {
    /// The parameters, in order. Star, double-star and `/` markers are
    /// refused: the specs are built from plain named parameters only.
    pub(crate) fn params(&self) -> Result<Vec<Param<'a>>, (usize, String)> {
        let mut out = Vec::new();
        for part in split_top(&self.params.toks, ",") {
            let Some(first) = part.first() else {
                continue; // the trailing comma
            };
            if first.kind != TokKind::Name {
                return Err((
                    first.line,
                    format!(
                        "parameter `{}` is not a plain named parameter",
                        Src::new(self.params.full, first.line, part).text()
                    ),
                ));
            }
            let eq = find_top(part, "=");
            let (head, default) = match eq {
                Some(k) => (
                    &part[..k],
                    Some(Src::new(self.params.full, first.line, &part[k + 1..])),
                ),
                None => (part, None),
            };
            let annotation = match head.get(1) {
                None => None,
                Some(t) if t.is_op(":") && head.len() > 2 => {
                    Some(Src::new(self.params.full, first.line, &head[2..]))
                }
                Some(_) => {
                    return Err((
                        first.line,
                        format!(
                            "parameter `{}` has an unexpected shape",
                            Src::new(self.params.full, first.line, part).text()
                        ),
                    ));
                }
            };
            out.push(Param {
                name: first.text,
                line: first.line,
                annotation,
                default,
            });
        }
        Ok(out)
    }
}

/// `name: annotation [= value]` in a class body.
#[derive(Debug)]
pub(crate) struct FieldDecl<'a> {
    pub(crate) name: &'a str,
    pub(crate) line: usize,
    pub(crate) annotation: Src<'a>,
    pub(crate) value: Option<Src<'a>>,
}

/// A class: header, docstring, annotated attributes, methods, and whatever
/// else its body holds (kept as line and text so a user of the class can
/// refuse it).
#[derive(Debug)]
pub(crate) struct Class<'a> {
    pub(crate) name: &'a str,
    pub(crate) line: usize,
    pub(crate) bases: Vec<Src<'a>>,
    pub(crate) keywords: Vec<(&'a str, Src<'a>)>,
    pub(crate) doc: Option<Src<'a>>,
    pub(crate) fields: Vec<FieldDecl<'a>>,
    pub(crate) methods: Vec<Method<'a>>,
    /// `NAME = value` statements: enum members, `model_config`.
    pub(crate) assigns: Vec<Assign<'a>>,
    pub(crate) others: Vec<(usize, String)>,
}

/// A module-level `NAME = value` (or `NAME: T = value`).
#[derive(Debug)]
pub(crate) struct Assign<'a> {
    pub(crate) name: &'a str,
    pub(crate) value: Src<'a>,
}

/// The classes and module-level assignments of one file; every other
/// top-level statement (imports, functions, `if __name__ ...`) is skipped.
#[derive(Debug)]
pub(crate) struct Module<'a> {
    pub(crate) file: String,
    pub(crate) classes: Vec<Class<'a>>,
    pub(crate) assigns: Vec<Assign<'a>>,
}

impl<'a> Module<'a> {
    /// Reads `src` (newlines already normalized, see [`normalize_newlines`]).
    pub(crate) fn parse(file: &str, src: &'a str) -> Result<Self, ToolSourceError> {
        let syntax =
            |line: usize, msg: String| ToolSourceError::new(file, line, SpecProblem::Syntax(msg));
        let lines = lex(src).map_err(|(line, msg)| syntax(line, msg))?;
        let nodes = tree(&lines, &mut 0, None);
        let mut module = Module {
            file: file.to_string(),
            classes: Vec::new(),
            assigns: Vec::new(),
        };
        for node in &nodes {
            let t = &node.line.toks;
            if t[0].is_name("class") {
                module
                    .classes
                    .push(parse_class(src, node).map_err(|(line, msg)| syntax(line, msg))?);
            } else if t[0].kind == TokKind::Name && t.len() > 2 {
                // `NAME = value` or `NAME: T = value`; a bare annotation
                // binds nothing.
                let value_at = if t[1].is_op("=") {
                    Some(2)
                } else if t[1].is_op(":") {
                    find_top(t, "=").map(|k| k + 1)
                } else {
                    None
                };
                if let Some(k) = value_at {
                    module.assigns.push(Assign {
                        name: t[0].text,
                        value: Src::new(src, t[0].line, &t[k..]),
                    });
                }
            }
        }
        Ok(module)
    }

    pub(crate) fn class(&self, name: &str) -> Option<&Class<'a>> {
        self.classes.iter().find(|c| c.name == name)
    }

    pub(crate) fn assign(&self, name: &str) -> Option<&Assign<'a>> {
        // The last binding wins, as it does when the module runs.
        self.assigns.iter().rev().find(|a| a.name == name)
    }
}

/// Index of the first `op` outside brackets.
fn find_top(toks: &[Tok], op: &str) -> Option<usize> {
    let mut depth = 0i32;
    for (k, t) in toks.iter().enumerate() {
        if t.kind == TokKind::Op {
            match t.text {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => depth -= 1,
                _ if depth == 0 && t.text == op => return Some(k),
                _ => {}
            }
        }
    }
    None
}

/// Splits at every `sep` outside brackets.
fn split_top<'t, 'a>(toks: &'t [Tok<'a>], sep: &str) -> Vec<&'t [Tok<'a>]> {
    let mut out = Vec::new();
    let mut rest = toks;
    while let Some(k) = find_top(rest, sep) {
        out.push(&rest[..k]);
        rest = &rest[k + 1..];
    }
    out.push(rest);
    out
}

/// Index of the bracket closing the one opened at `open`.
fn matching(toks: &[Tok], open: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (k, t) in toks.iter().enumerate().skip(open) {
        match t.text {
            "(" | "[" | "{" if t.kind == TokKind::Op => depth += 1,
            ")" | "]" | "}" if t.kind == TokKind::Op => {
                depth -= 1;
                if depth == 0 {
                    return Some(k);
                }
            }
            _ => {}
        }
    }
    None
}

/// A compound statement's body: a suite on the header line (`class X: pass`)
/// comes first, then the indented block.
fn body<'n, 'a>(inline: &[Tok<'a>], node: &'n Node<'a>) -> Vec<(Line<'a>, &'n [Node<'a>])> {
    let mut out = Vec::new();
    if !inline.is_empty() {
        out.push((
            Line {
                indent: node.line.indent + 1,
                toks: inline.to_vec(),
            },
            &[][..],
        ));
    }
    out.extend(
        node.children
            .iter()
            .map(|c| (c.line.clone(), c.children.as_slice())),
    );
    out
}

fn parse_class<'a>(full: &'a str, node: &Node<'a>) -> Result<Class<'a>, (usize, String)> {
    let t = &node.line.toks;
    let line = t[0].line;
    let name = t
        .get(1)
        .filter(|n| n.kind == TokKind::Name)
        .ok_or((line, "`class` without a name".to_string()))?;
    let mut k = 2;
    let (mut bases, mut keywords) = (Vec::new(), Vec::new());
    if t.get(k).is_some_and(|x| x.is_op("(")) {
        let close = matching(t, k).ok_or((line, "unclosed class bases".to_string()))?;
        for part in split_top(&t[k + 1..close], ",") {
            if part.is_empty() {
                continue;
            }
            if part.len() > 2 && part[0].kind == TokKind::Name && part[1].is_op("=") {
                keywords.push((part[0].text, Src::new(full, line, &part[2..])));
            } else {
                bases.push(Src::new(full, line, part));
            }
        }
        k = close + 1;
    }
    if !t.get(k).is_some_and(|x| x.is_op(":")) {
        return Err((line, format!("class `{}`: expected `:`", name.text)));
    }
    let mut class = Class {
        name: name.text,
        line,
        bases,
        keywords,
        doc: None,
        fields: Vec::new(),
        methods: Vec::new(),
        assigns: Vec::new(),
        others: Vec::new(),
    };
    let mut decorators: Vec<Src> = Vec::new();
    for (idx, (stmt, children)) in body(&t[k + 1..], node).into_iter().enumerate() {
        let s = &stmt.toks;
        let sline = s[0].line;
        if idx == 0 && is_string_statement(s) {
            class.doc = Some(Src::new(full, sline, s));
            continue;
        }
        if s[0].is_op("@") {
            decorators.push(Src::new(full, sline, &s[1..]));
            continue;
        }
        let def_at = if s[0].is_name("def") {
            Some(0)
        } else if s[0].is_name("async") && s.get(1).is_some_and(|x| x.is_name("def")) {
            Some(1)
        } else {
            None
        };
        if let Some(d) = def_at {
            let method = parse_def(full, &s[d..], std::mem::take(&mut decorators), children)?;
            class.methods.push(method);
            continue;
        }
        if !decorators.is_empty() {
            decorators.clear();
            class
                .others
                .push((sline, "a decorated statement that is not a method".into()));
        }
        if s.len() == 1 && (s[0].is_name("pass") || s[0].is_op("...")) {
            continue;
        }
        if is_string_statement(s) {
            // A string after an attribute documents it for tools, not for
            // pydantic's default schema.
            continue;
        }
        if s[0].kind == TokKind::Name && s.len() > 2 && s[1].is_op(":") {
            let eq = find_top(s, "=");
            let ann_end = eq.unwrap_or(s.len());
            if ann_end <= 2 {
                return Err((
                    sline,
                    format!("attribute `{}` has no annotation", s[0].text),
                ));
            }
            class.fields.push(FieldDecl {
                name: s[0].text,
                line: sline,
                annotation: Src::new(full, sline, &s[2..ann_end]),
                value: eq.map(|e| Src::new(full, sline, &s[e + 1..])),
            });
            continue;
        }
        if s[0].kind == TokKind::Name && s.len() > 2 && s[1].is_op("=") {
            class.assigns.push(Assign {
                name: s[0].text,
                value: Src::new(full, sline, &s[2..]),
            });
            continue;
        }
        class
            .others
            .push((sline, format!("`{}`", Src::new(full, sline, s).text())));
    }
    if !decorators.is_empty() {
        class
            .others
            .push((line, "a decorator with nothing after it".into()));
    }
    Ok(class)
}

/// `def NAME(params) [-> ret]: [suite]`, `t` starting at `def`.
fn parse_def<'a>(
    full: &'a str,
    t: &[Tok<'a>],
    decorators: Vec<Src<'a>>,
    children: &[Node<'a>],
) -> Result<Method<'a>, (usize, String)> {
    let line = t[0].line;
    let name = t
        .get(1)
        .filter(|n| n.kind == TokKind::Name)
        .ok_or((line, "`def` without a name".to_string()))?;
    if !t.get(2).is_some_and(|x| x.is_op("(")) {
        return Err((line, format!("def `{}`: expected `(`", name.text)));
    }
    let close =
        matching(t, 2).ok_or((line, format!("def `{}`: unclosed parameters", name.text)))?;
    let colon = find_top(&t[close + 1..], ":")
        .map(|c| c + close + 1)
        .ok_or((line, format!("def `{}`: expected `:`", name.text)))?;
    let inline = &t[colon + 1..];
    // The docstring is the body's first statement, if it is a string.
    let first: Option<Vec<Tok<'a>>> = if inline.is_empty() {
        children.first().map(|c| c.line.toks.clone())
    } else {
        Some(split_top(inline, ";")[0].to_vec())
    };
    let doc = first
        .filter(|f| is_string_statement(f))
        .map(|f| Src::new(full, f[0].line, &f));
    Ok(Method {
        name: name.text,
        line,
        decorators,
        params: Src::new(full, line, &t[3..close]),
        doc,
    })
}

/// The expressions the reader understands.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Expr {
    /// A name or dotted name (`str`, `ToolType.WRITE`).
    Name(String),
    /// A string literal, escapes decoded, adjacent literals joined.
    Str(String),
    /// An integer literal.
    Int(i64),
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// `...`.
    Ellipsis,
    /// `base[args]`.
    Subscript(Box<Expr>, Vec<Expr>),
    /// `func(args, key=value)`.
    Call(Box<Expr>, Vec<Expr>, Vec<(String, Expr)>),
    /// `a | b`.
    Or(Box<Expr>, Box<Expr>),
}

/// Keywords that start expressions this reader does not evaluate.
const KEYWORDS: &[&str] = &[
    "lambda", "not", "and", "or", "if", "else", "for", "in", "is", "await", "yield", "def",
    "class", "return", "import", "from", "with", "async", "del", "global", "nonlocal", "assert",
    "pass", "raise", "try", "except", "finally", "while", "break", "continue",
];

struct ExprParser<'t, 'a> {
    toks: &'t [Tok<'a>],
    i: usize,
}

impl ExprParser<'_, '_> {
    fn peek_op(&self, op: &str) -> bool {
        self.toks.get(self.i).is_some_and(|t| t.is_op(op))
    }

    fn expect(&mut self, op: &str) -> Result<(), ExprError> {
        if self.peek_op(op) {
            self.i += 1;
            Ok(())
        } else {
            Err(match self.toks.get(self.i) {
                Some(t) => ExprError::Expected {
                    op: op.to_string(),
                    found: t.text.to_string(),
                },
                None => ExprError::ExpectedAtEnd(op.to_string()),
            })
        }
    }

    fn union(&mut self) -> Result<Expr, ExprError> {
        let mut e = self.postfix()?;
        while self.peek_op("|") {
            self.i += 1;
            let rhs = self.postfix()?;
            e = Expr::Or(Box::new(e), Box::new(rhs));
        }
        Ok(e)
    }

    fn postfix(&mut self) -> Result<Expr, ExprError> {
        let mut e = self.atom()?;
        loop {
            if self.peek_op(".") {
                self.i += 1;
                let attr = self
                    .toks
                    .get(self.i)
                    .filter(|t| t.kind == TokKind::Name)
                    .ok_or(ExprError::MissingAttribute)?;
                self.i += 1;
                e = match e {
                    Expr::Name(n) => Expr::Name(format!("{n}.{}", attr.text)),
                    _ => return Err(ExprError::AttributeOfNonName),
                };
            } else if self.peek_op("[") {
                self.i += 1;
                let mut items = Vec::new();
                while !self.peek_op("]") {
                    items.push(self.union()?);
                    if !self.peek_op("]") {
                        self.expect(",")?;
                    }
                }
                self.i += 1;
                e = Expr::Subscript(Box::new(e), items);
            } else if self.peek_op("(") {
                self.i += 1;
                let (mut args, mut kwargs) = (Vec::new(), Vec::new());
                while !self.peek_op(")") {
                    let is_kw = self
                        .toks
                        .get(self.i)
                        .is_some_and(|t| t.kind == TokKind::Name)
                        && self.toks.get(self.i + 1).is_some_and(|t| t.is_op("="));
                    if is_kw {
                        let key = self.toks[self.i].text.to_string();
                        self.i += 2;
                        kwargs.push((key, self.union()?));
                    } else if kwargs.is_empty() {
                        args.push(self.union()?);
                    } else {
                        return Err(ExprError::PositionalAfterKeyword);
                    }
                    if !self.peek_op(")") {
                        self.expect(",")?;
                    }
                }
                self.i += 1;
                e = Expr::Call(Box::new(e), args, kwargs);
            } else {
                return Ok(e);
            }
        }
    }

    fn atom(&mut self) -> Result<Expr, ExprError> {
        let t = *self.toks.get(self.i).ok_or(ExprError::MissingExpression)?;
        self.i += 1;
        match t.kind {
            TokKind::Name => match t.text {
                "None" => Ok(Expr::None),
                "True" => Ok(Expr::Bool(true)),
                "False" => Ok(Expr::Bool(false)),
                k if KEYWORDS.contains(&k) => Err(ExprError::Keyword(k.to_string())),
                n => Ok(Expr::Name(n.to_string())),
            },
            TokKind::Number => parse_int(t.text).map(Expr::Int),
            TokKind::Str => {
                let mut s = decode_string(t.text)?;
                while let Some(next) = self.toks.get(self.i).filter(|n| n.kind == TokKind::Str) {
                    s.push_str(&decode_string(next.text)?);
                    self.i += 1;
                }
                Ok(Expr::Str(s))
            }
            TokKind::Op => match t.text {
                "..." => Ok(Expr::Ellipsis),
                "-" => match self.atom()? {
                    Expr::Int(n) => Ok(Expr::Int(-n)),
                    _ => Err(ExprError::UnaryMinus),
                },
                "(" => {
                    let e = self.union()?;
                    self.expect(")")?;
                    Ok(e)
                }
                op => Err(ExprError::Unexpected(op.to_string())),
            },
        }
    }
}

fn parse_int(text: &str) -> Result<i64, ExprError> {
    let digits: String = text.chars().filter(|&c| c != '_').collect();
    if digits.len() > 1 && digits.starts_with('0') {
        return Err(ExprError::Number(text.to_string()));
    }
    digits
        .parse()
        .map_err(|_| ExprError::Number(text.to_string()))
}

/// The value of a string literal token (prefix and quotes included).
fn decode_string(lit: &str) -> Result<String, ExprError> {
    let q = lit
        .find(['\'', '"'])
        .ok_or_else(|| ExprError::StringToken(lit.to_string()))?;
    let prefix = lit[..q].to_ascii_lowercase();
    if prefix.contains('b') {
        return Err(ExprError::Bytes);
    }
    if prefix.contains('f') {
        return Err(ExprError::FString);
    }
    let body = &lit[q..];
    let quote = &body[..1];
    let triple = body.len() >= 6 && body.starts_with(&quote.repeat(3));
    let inner = if triple {
        &body[3..body.len() - 3]
    } else {
        &body[1..body.len() - 1]
    };
    if prefix.contains('r') {
        Ok(inner.to_string())
    } else {
        unescape(inner)
    }
}

fn unescape(s: &str) -> Result<String, ExprError> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        let mut hex = |n: usize| -> Result<char, ExprError> {
            let digits: String = (0..n).filter_map(|_| chars.next()).collect();
            u32::from_str_radix(&digits, 16)
                .ok()
                .filter(|_| digits.len() == n)
                .and_then(char::from_u32)
                .ok_or_else(|| ExprError::BadEscape(format!("{e}{digits}")))
        };
        match e {
            '\n' => {}
            '\\' | '\'' | '"' => out.push(e),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'f' => out.push('\x0c'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\x0b'),
            'x' => out.push(hex(2)?),
            'u' => out.push(hex(4)?),
            'U' => out.push(hex(8)?),
            '0'..='7' => {
                let mut v = e.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match chars.peek().and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            v = v * 8 + d;
                            chars.next();
                        }
                        None => break,
                    }
                }
                out.push(char::from_u32(v).ok_or(ExprError::BadOctalEscape)?);
            }
            'N' => return Err(ExprError::NamedEscape),
            // Python keeps an unknown escape as written.
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    Ok(out)
}

/// `str.isspace()` for the characters docstrings can hold: Rust's
/// whitespace plus the ASCII separators Python also counts.
pub(crate) fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

/// `str.expandtabs()` (tab size 8; columns restart after `\n` or `\r`).
fn expandtabs(s: &str) -> Cow<'_, str> {
    if !s.contains('\t') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    let mut col = 0;
    for c in s.chars() {
        match c {
            '\t' => {
                let n = 8 - col % 8;
                out.extend(std::iter::repeat_n(' ', n));
                col += n;
            }
            '\n' | '\r' => {
                out.push(c);
                col = 0;
            }
            _ => {
                out.push(c);
                col += 1;
            }
        }
    }
    Cow::Owned(out)
}

/// `inspect.cleandoc` as of Python 3.11, which the reference ran: expand
/// tabs, strip the first line's leading whitespace, remove the common
/// indentation of the others, drop leading and trailing empty lines.
pub(crate) fn cleandoc(doc: &str) -> String {
    let expanded = expandtabs(doc);
    let lines: Vec<&str> = expanded.split('\n').collect();
    let margin = lines
        .iter()
        .skip(1)
        .filter_map(|l| {
            let content = l.trim_start_matches(py_space);
            (!content.is_empty()).then(|| l.chars().count() - content.chars().count())
        })
        .min();
    let mut out: Vec<&str> = Vec::with_capacity(lines.len());
    for (k, l) in lines.iter().enumerate() {
        out.push(if k == 0 {
            l.trim_start_matches(py_space)
        } else if let Some(m) = margin {
            l.char_indices().nth(m).map_or("", |(at, _)| &l[at..])
        } else {
            l
        });
    }
    while out.last().is_some_and(|l| l.is_empty()) {
        out.pop();
    }
    let lead = out.iter().take_while(|l| l.is_empty()).count();
    out[lead..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(src: &str) -> Module<'_> {
        Module::parse("t.py", src).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn signatures_spanning_lines_and_helpers() {
        let src = r#"
import os  # a comment with "quotes
class Kit(Base):  # trailing comment
    """Kit doc."""

    x: int = 3

    def _helper(self, a):
        return {"a": [1, 2,
                      3]}

    @deco(Kind.B)
    def tool(
        self,
        first: str,   # why
        second: Optional[List[str]] = None,
    ) -> Dict[str, int]:
        '''Summary.

        Args:
            first: one.
        '''
        s = "a;b"; t = 'c'
        return s
"#;
        let m = module(src);
        assert_eq!(m.classes.len(), 1);
        let c = &m.classes[0];
        assert_eq!((c.name, c.line), ("Kit", 3));
        assert_eq!(c.bases[0].expr().unwrap(), Expr::Name("Base".into()));
        assert_eq!(c.doc.as_ref().unwrap().string().unwrap(), "Kit doc.");
        assert_eq!(c.fields.len(), 1);
        assert_eq!(c.methods.len(), 2);
        let helper = &c.methods[0];
        assert!(helper.decorators.is_empty() && helper.doc.is_none());
        let tool = &c.methods[1];
        assert_eq!((tool.name, tool.line), ("tool", 13));
        assert_eq!(tool.decorators[0].text(), "deco(Kind.B)");
        let params = tool.params().unwrap();
        let names: Vec<_> = params.iter().map(|p| p.name).collect();
        assert_eq!(names, ["self", "first", "second"]);
        assert_eq!(params[2].line, 16);
        assert_eq!(
            params[2].annotation.as_ref().unwrap().expr().unwrap(),
            Expr::Subscript(
                Box::new(Expr::Name("Optional".into())),
                vec![Expr::Subscript(
                    Box::new(Expr::Name("List".into())),
                    vec![Expr::Name("str".into())]
                )]
            )
        );
        assert_eq!(
            params[2].default.as_ref().unwrap().expr().unwrap(),
            Expr::None
        );
        let doc = tool.doc.as_ref().unwrap().string().unwrap();
        assert!(doc.starts_with("Summary.\n\n        Args:"), "{doc:?}");
    }

    #[test]
    fn module_level_aliases_and_one_line_bodies() {
        let m = module(
            "A = Literal[\n  'x',\n  \"y\",\n]\nB: TypeAlias = int | None\nclass E(Exception): pass\nif __name__ == '__main__':\n    A = 1\n",
        );
        assert_eq!(
            m.assign("A").unwrap().value.expr().unwrap(),
            Expr::Subscript(
                Box::new(Expr::Name("Literal".into())),
                vec![Expr::Str("x".into()), Expr::Str("y".into())]
            )
        );
        assert_eq!(m.assign("B").unwrap().value.text(), "int | None");
        let e = m.class("E").unwrap();
        assert!(e.fields.is_empty() && e.others.is_empty() && e.assigns.is_empty());
    }

    #[test]
    fn expressions() {
        let m = module(
            "X = Field(None, description=\"a \" 'b\\'s'\n  r'\\d')\nY = -3\nZ = lambda: 1\nW = f'{x}'\n",
        );
        assert_eq!(
            m.assign("X").unwrap().value.expr().unwrap(),
            Expr::Call(
                Box::new(Expr::Name("Field".into())),
                vec![Expr::None],
                vec![("description".into(), Expr::Str("a b's\\d".into()))]
            )
        );
        assert_eq!(m.assign("Y").unwrap().value.expr().unwrap(), Expr::Int(-3));
        assert_eq!(
            m.assign("Z").unwrap().value.expr(),
            Err(ExprError::Keyword("lambda".into()))
        );
        assert_eq!(
            m.assign("W").unwrap().value.expr().unwrap_err().to_string(),
            "f-strings are not supported"
        );
    }

    #[test]
    fn syntax_errors_are_typed_and_located() {
        let err = Module::parse("bad.py", "x = (1,\ny = 2\n").unwrap_err();
        assert!(matches!(err.problem, SpecProblem::Syntax(_)), "{err}");
        let err = Module::parse("bad.py", "x = 1\ny = 'open\n").unwrap_err();
        assert_eq!((err.file.as_str(), err.line), ("bad.py", 2));
        assert!(
            err.to_string().starts_with("bad.py:2: cannot parse"),
            "{err}"
        );
    }

    #[test]
    fn star_parameters_are_refused() {
        let m = module("class K:\n    def f(self, *args, **kw):\n        pass\n");
        assert!(m.classes[0].methods[0].params().is_err());
    }

    #[test]
    fn cleandoc_matches_python() {
        assert_eq!(
            cleandoc("\n    Title.\n     - indented\n\n    Args:\n        a: x\n    "),
            "Title.\n - indented\n\nArgs:\n    a: x"
        );
        assert_eq!(cleandoc("  One line.  "), "One line.  ");
        assert_eq!(cleandoc("A\n\tB\n        C"), "A\nB\nC");
        assert_eq!(cleandoc(""), "");
    }

    #[test]
    fn newlines_are_normalized() {
        assert_eq!(normalize_newlines("a\r\nb\rc"), "a\nb\nc");
    }
}

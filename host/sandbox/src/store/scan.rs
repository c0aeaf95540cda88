//! The source scan before an untrusted build: refuse the Rust constructs
//! that make the compiler read something outside the crate's own source —
//! files anywhere on the host or the build's environment — so a candidate
//! can never smuggle a secret, the gold answers or an API key into a
//! component. Defence in depth: the build jail ([`ecdysis_sys::jail`]) makes such
//! files and variables invisible anyway; the scan names the problem and
//! refuses before any compiler runs.
//!
//! Refused (outside comments and string literals, after a small Rust
//! lexer, so `r#include_str!`, `core::include_str!` and odd spacing are
//! found too):
//!
//! - the built-ins `include!`, `include_str!`, `include_bytes!`, `env!`,
//!   `option_env!`, and these names anywhere a rename (`use … as`) or a
//!   macro argument (`m!(include_str)` for a `$m!(…)` inside) could invoke
//!   them: `include_str`/`include_bytes`/`option_env` everywhere, `include`
//!   and `env` in `use` items and in the input of macros other than the
//!   standard formatting and assertion ones;
//! - wit-bindgen's `generate!`, which reads the WIT files its `path` names;
//! - attributes `#[path = …]` (also inside `cfg_attr`), `#[link(…)]`
//!   (native libraries) and `debugger_visualizer` (embeds a file);
//! - symbolic links anywhere in the crate, and `.rs` files that are not
//!   UTF-8 (they cannot be checked).
//!
//! `concat!`, `file!`, `line!` and friends read nothing. Build scripts,
//! `Cargo.toml`, `.cargo/` and the lock file cannot be changed by a coder
//! (only `src/` may change, and a candidate's build takes them from its
//! incumbent); procedural macros come only from the locked dependencies.
//!
//! A user's own crate may use these constructs (a skill text kept in a
//! `.md` file and pulled in with `include_str!`): what the incumbent's
//! source has is *allowed* — the same tokens in the same file — and a
//! candidate may keep it, but add or change none.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use ecdysis_sys::fsutil::{EntryKind, PathError, walk_crate};

/// Built-in macros that read files or the build environment.
const BUILTIN_READERS: [&str; 5] = [
    "include",
    "include_str",
    "include_bytes",
    "env",
    "option_env",
];

/// Names of [`BUILTIN_READERS`] too unusual to be anything else: refused
/// wherever they appear.
const RARE_READER_NAMES: [&str; 3] = ["include_str", "include_bytes", "option_env"];

/// Standard macros that never invoke an identifier of their input as a
/// macro: `format!("{}", env)` is no way to call `env!`.
const PLAIN_STD_MACROS: [&str; 20] = [
    "format",
    "format_args",
    "print",
    "println",
    "eprint",
    "eprintln",
    "write",
    "writeln",
    "panic",
    "assert",
    "assert_eq",
    "assert_ne",
    "debug_assert",
    "debug_assert_eq",
    "debug_assert_ne",
    "vec",
    "matches",
    "unreachable",
    "todo",
    "unimplemented",
];

/// Macros of a harness's dependencies that read files named in their input
/// (wit-bindgen's `generate!` with `path: …`).
const DEPENDENCY_READERS: [&str; 1] = ["generate"];

/// One construct that reaches outside the crate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// The file, relative to the crate root (`src/tables.rs`).
    pub file: String,
    /// Its line (1-based; 0 for a whole file).
    pub line: u32,
    /// What it is (`include_str!`, `#[path]`, `symlink`, …).
    pub construct: String,
    /// Why it is refused.
    pub why: String,
    /// The occurrence's tokens, one space apart: what an allowed occurrence
    /// of the reference must equal.
    pub tokens: String,
}

/// The constructs of a candidate that its reference does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(findings))]
pub struct Refusal {
    /// Every refused occurrence, in file order.
    pub findings: Vec<Finding>,
}

fn render(findings: &[Finding]) -> String {
    let items: Vec<String> = findings
        .iter()
        .map(|f| {
            let mut tokens: String = f.tokens.chars().take(80).collect();
            if tokens.len() < f.tokens.len() {
                tokens.push('…');
            }
            let at = if f.line > 0 {
                format!("{}:{}", f.file, f.line)
            } else {
                f.file.clone()
            };
            format!("{at}: {} `{tokens}` ({})", f.construct, f.why)
        })
        .collect();
    format!("the source reaches outside the crate: {}", items.join("; "))
}

/// Every finding of the crate at `dir` (its `.rs` and `.py` files and links, per
/// [`walk_crate`]).
pub fn scan_crate(dir: &Path) -> Result<Vec<Finding>, PathError> {
    let mut files = Vec::new();
    let mut findings = Vec::new();
    for entry in walk_crate(dir)? {
        match &entry.kind {
            EntryKind::Link(target) => findings.push(link_finding(&entry.rel, target)),
            EntryKind::File if entry.rel.ends_with(".rs") || entry.rel.ends_with(".py") => {
                let path = dir.join(&entry.rel);
                let bytes = std::fs::read(&path).map_err(|e| PathError::new("read", &path, e))?;
                files.push((entry.rel.clone(), bytes));
            }
            _ => {}
        }
    }
    for (rel, bytes) in &files {
        findings.extend(scan_file(rel, bytes));
    }
    Ok(findings)
}

/// A finding for a symbolic link.
pub fn link_finding(rel: &str, target: &Path) -> Finding {
    Finding {
        file: rel.to_string(),
        line: 0,
        construct: "symlink".into(),
        why: "a symbolic link can point anywhere on the host".into(),
        tokens: format!("-> {}", target.display()),
    }
}

/// The findings of one `.rs` or `.py` file's bytes.
pub fn scan_file(rel: &str, bytes: &[u8]) -> Vec<Finding> {
    match std::str::from_utf8(bytes) {
        Ok(text) if rel.ends_with(".py") => super::scan_python::scan_python(rel, text),
        Ok(text) => scan_source(rel, text),
        Err(_) => vec![Finding {
            file: rel.to_string(),
            line: 0,
            construct: "non-UTF-8 source".into(),
            why: "it cannot be checked".into(),
            tokens: String::new(),
        }],
    }
}

/// The candidate's findings that `allowed` (the reference's findings) does
/// not cover: each allowed occurrence excuses one candidate occurrence with
/// the same file and tokens.
pub fn refuse_new(candidate: Vec<Finding>, allowed: &[Finding]) -> Result<(), Refusal> {
    let mut budget: BTreeMap<(String, String), usize> = BTreeMap::new();
    for f in allowed {
        *budget
            .entry((f.file.clone(), f.tokens.clone()))
            .or_default() += 1;
    }
    let mut refused = Vec::new();
    for f in candidate {
        let excused = match budget.get_mut(&(f.file.clone(), f.tokens.clone())) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        };
        if !excused {
            refused.push(f);
        }
    }
    if refused.is_empty() {
        Ok(())
    } else {
        Err(Refusal { findings: refused })
    }
}

// ---------------------------------------------------------------------------
// A small Rust lexer: enough to tell code from comments and literals and to
// see identifiers, punctuation and delimited groups.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ident,
    Punct,
    Literal,
    Lifetime,
    Open,
    Close,
}

#[derive(Debug, Clone)]
struct Tok {
    kind: Kind,
    text: String,
    line: u32,
}

impl Tok {
    fn is_punct(&self, c: &str) -> bool {
        self.kind == Kind::Punct && self.text == c
    }

    fn is_ident(&self, s: &str) -> bool {
        self.kind == Kind::Ident && self.text == s
    }
}

fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn is_ident_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

struct Lexer {
    cs: Vec<char>,
    i: usize,
    line: u32,
    out: Vec<Tok>,
}

impl Lexer {
    fn peek(&self, k: usize) -> Option<char> {
        self.cs.get(self.i + k).copied()
    }

    /// Advance one character, counting lines.
    fn bump(&mut self) {
        if self.peek(0) == Some('\n') {
            self.line += 1;
        }
        self.i += 1;
    }

    fn push(&mut self, kind: Kind, start: usize, line: u32) {
        let end = self.i.min(self.cs.len());
        let text: String = self.cs[start..end].iter().collect();
        self.out.push(Tok { kind, text, line });
    }

    /// A quoted string from the opening `"` (escapes honoured).
    fn string(&mut self) {
        self.bump();
        while let Some(c) = self.peek(0) {
            match c {
                '\\' => {
                    self.bump();
                    self.bump();
                }
                '"' => {
                    self.bump();
                    return;
                }
                _ => self.bump(),
            }
        }
    }

    /// A raw string from its first `#` or `"`.
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

    /// After a `'`: a char literal (`'a'`, `'\n'`, `'\u{1F600}'`) or a
    /// lifetime / label (`'a`, `'static`).
    fn quote(&mut self, start: usize, line: u32) {
        self.bump();
        if self.peek(0) == Some('\\') {
            self.bump();
            self.bump();
            while let Some(c) = self.peek(0) {
                self.bump();
                if c == '\'' {
                    break;
                }
            }
            self.push(Kind::Literal, start, line);
        } else if self.peek(1) == Some('\'') {
            self.bump();
            self.bump();
            self.push(Kind::Literal, start, line);
        } else {
            while self.peek(0).is_some_and(is_ident_char) {
                self.bump();
            }
            self.push(Kind::Lifetime, start, line);
        }
    }

    fn run(mut self) -> Vec<Tok> {
        while let Some(c) = self.peek(0) {
            let (start, line) = (self.i, self.line);
            match c {
                c if c.is_whitespace() => self.bump(),
                '/' if self.peek(1) == Some('/') => {
                    while self.peek(0).is_some_and(|c| c != '\n') {
                        self.bump();
                    }
                }
                '/' if self.peek(1) == Some('*') => {
                    let mut depth = 0u32;
                    while self.peek(0).is_some() {
                        if self.peek(0) == Some('/') && self.peek(1) == Some('*') {
                            depth += 1;
                            self.bump();
                            self.bump();
                        } else if self.peek(0) == Some('*') && self.peek(1) == Some('/') {
                            depth -= 1;
                            self.bump();
                            self.bump();
                            if depth == 0 {
                                break;
                            }
                        } else {
                            self.bump();
                        }
                    }
                }
                '"' => {
                    self.string();
                    self.push(Kind::Literal, start, line);
                }
                '\'' => self.quote(start, line),
                c if c.is_ascii_digit() => {
                    while let Some(c) = self.peek(0) {
                        if is_ident_char(c)
                            || (c == '.' && self.peek(1).is_some_and(|d| d.is_ascii_digit()))
                        {
                            self.bump();
                        } else {
                            break;
                        }
                    }
                    self.push(Kind::Literal, start, line);
                }
                c if is_ident_start(c) => {
                    while self.peek(0).is_some_and(is_ident_char) {
                        self.bump();
                    }
                    let word: String = self.cs[start..self.i].iter().collect();
                    let next = self.peek(0);
                    match (word.as_str(), next) {
                        ("b" | "c", Some('"')) => {
                            self.string();
                            self.push(Kind::Literal, start, line);
                        }
                        ("b", Some('\'')) => {
                            self.quote(self.i, line);
                            // Re-label the char literal as starting at `b`.
                            if let Some(t) = self.out.last_mut() {
                                t.text.insert(0, 'b');
                            }
                        }
                        ("r" | "br" | "cr", Some('"')) => {
                            self.raw_string();
                            self.push(Kind::Literal, start, line);
                        }
                        ("r" | "br" | "cr", Some('#'))
                            if {
                                let mut k = 0;
                                while self.peek(k) == Some('#') {
                                    k += 1;
                                }
                                self.peek(k) == Some('"')
                            } =>
                        {
                            self.raw_string();
                            self.push(Kind::Literal, start, line);
                        }
                        ("r", Some('#')) if self.peek(1).is_some_and(is_ident_start) => {
                            // A raw identifier: `r#include_str` is `include_str`.
                            self.bump();
                            let name_start = self.i;
                            while self.peek(0).is_some_and(is_ident_char) {
                                self.bump();
                            }
                            let name: String = self.cs[name_start..self.i].iter().collect();
                            self.out.push(Tok {
                                kind: Kind::Ident,
                                text: name,
                                line,
                            });
                        }
                        _ => self.out.push(Tok {
                            kind: Kind::Ident,
                            text: word,
                            line,
                        }),
                    }
                }
                '(' | '[' | '{' => {
                    self.bump();
                    self.push(Kind::Open, start, line);
                }
                ')' | ']' | '}' => {
                    self.bump();
                    self.push(Kind::Close, start, line);
                }
                _ => {
                    self.bump();
                    self.push(Kind::Punct, start, line);
                }
            }
        }
        self.out
    }
}

fn lex(src: &str) -> Vec<Tok> {
    Lexer {
        cs: src.chars().collect(),
        i: 0,
        line: 1,
        out: Vec::new(),
    }
    .run()
}

/// The index just past the group opening at `open` (or the end).
fn group_end(toks: &[Tok], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, t) in toks.iter().enumerate().skip(open) {
        match t.kind {
            Kind::Open => depth += 1,
            Kind::Close => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return k + 1;
                }
            }
            _ => {}
        }
    }
    toks.len()
}

fn join(toks: &[Tok]) -> String {
    toks.iter()
        .map(|t| t.text.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The findings of one source file's text.
pub fn scan_source(rel: &str, src: &str) -> Vec<Finding> {
    let toks = lex(src);
    let n = toks.len();
    // Which tokens sit in a `use` item or in a macro invocation's input.
    let mut in_use = vec![false; n];
    let mut in_macro_input = vec![false; n];
    let mut using = false;
    for (k, t) in toks.iter().enumerate() {
        if t.is_ident("use") {
            using = true;
        }
        in_use[k] = using;
        if t.is_punct(";") {
            using = false;
        }
        if t.kind == Kind::Ident
            && !PLAIN_STD_MACROS.contains(&t.text.as_str())
            && toks.get(k + 1).is_some_and(|b| b.is_punct("!"))
            && toks.get(k + 2).is_some_and(|g| g.kind == Kind::Open)
        {
            let end = group_end(&toks, k + 2);
            for flag in &mut in_macro_input[k + 3..end.saturating_sub(1).max(k + 3)] {
                *flag = true;
            }
        }
    }
    let mut out = Vec::new();
    let mut finding = |line: u32, construct: String, why: &str, tokens: String| {
        out.push(Finding {
            file: rel.to_string(),
            line,
            construct,
            why: why.to_string(),
            tokens,
        });
    };
    let mut k = 0;
    while k < n {
        let t = &toks[k];
        if t.kind == Kind::Ident {
            let name = t.text.as_str();
            let bang = toks.get(k + 1).is_some_and(|b| b.is_punct("!"));
            let builtin = BUILTIN_READERS.contains(&name);
            if bang && (builtin || DEPENDENCY_READERS.contains(&name)) {
                let end = match toks.get(k + 2) {
                    Some(g) if g.kind == Kind::Open => group_end(&toks, k + 2),
                    _ => k + 2,
                };
                let why = match name {
                    "include" => "compiles a file from any path",
                    "include_str" | "include_bytes" => "reads a file at build time",
                    "env" | "option_env" => "reads the build's environment (API keys)",
                    _ => "reads the files its `path` names at build time",
                };
                finding(t.line, format!("{name}!"), why, join(&toks[k..end]));
            } else if builtin
                && !bang
                && (RARE_READER_NAMES.contains(&name) || in_use[k] || in_macro_input[k])
            {
                let end = (k + 2).min(n);
                finding(
                    t.line,
                    format!("`{name}`"),
                    "names a built-in that reads files or the environment (a rename or a macro argument can invoke it)",
                    join(&toks[k.saturating_sub(1)..end]),
                );
            }
        }
        // Attributes: `#[…]` and `#![…]`.
        if t.is_punct("#") {
            let open = if toks.get(k + 1).is_some_and(|b| b.is_punct("!")) {
                k + 2
            } else {
                k + 1
            };
            if toks
                .get(open)
                .is_some_and(|g| g.kind == Kind::Open && g.text == "[")
            {
                let end = group_end(&toks, open);
                let attr = &toks[open..end];
                let what = attr.iter().enumerate().find_map(|(j, a)| {
                    let next = attr.get(j + 1);
                    if a.is_ident("path") && next.is_some_and(|b| b.is_punct("=")) {
                        Some(("#[path]", "loads a module from any path"))
                    } else if a.is_ident("link")
                        && next.is_some_and(|b| b.kind == Kind::Open && b.text == "(")
                    {
                        Some(("#[link]", "links a native library from the host"))
                    } else if a.is_ident("debugger_visualizer") {
                        Some(("#[debugger_visualizer]", "embeds a file in the binary"))
                    } else {
                        None
                    }
                });
                if let Some((construct, why)) = what {
                    finding(t.line, construct.to_string(), why, join(&toks[k..end]));
                }
            }
        }
        k += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn constructs(src: &str) -> Vec<String> {
        scan_source("src/x.rs", src)
            .into_iter()
            .map(|f| f.construct)
            .collect()
    }

    #[test]
    fn every_way_to_reach_outside_is_found() {
        let cases: &[(&str, &str)] = &[
            (
                r#"const S: &str = include_str!("/etc/hostname");"#,
                "include_str!",
            ),
            (
                r#"const S: &[u8] = core::include_bytes! ("/x");"#,
                "include_bytes!",
            ),
            ("include!(\"/abs/file.rs\");", "include!"),
            (r#"const K: &str = env!("SOME_API_KEY");"#, "env!"),
            (
                r#"const K: Option<&str> = option_env!("K");"#,
                "option_env!",
            ),
            (r#"const S: &str = r#include_str!("/x");"#, "include_str!"),
            (
                "const S: &str = ::std::include_str\n  !\n(\"/x\");",
                "include_str!",
            ),
            ("#[path = \"/abs/file.rs\"]\nmod m;", "#[path]"),
            ("#[cfg_attr(all(), path = \"/abs.rs\")]\nmod m;", "#[path]"),
            (
                "#![debugger_visualizer(gdb_script_file = \"/x.py\")]",
                "#[debugger_visualizer]",
            ),
            ("#[link(name = \"x\")] extern \"C\" {}", "#[link]"),
            ("use core::include_str as inc;", "`include_str`"),
            ("use std::{env as e};", "`env`"),
            ("use core::include as inc;", "`include`"),
            ("m!(include);", "`include`"),
            ("m!(x, env);", "`env`"),
            ("macro_rules! include_str { () => {} }", "`include_str`"),
            ("wit_bindgen::generate!({ path: \"/etc\" });", "generate!"),
            ("#[doc = include_str!(\"/x\")]\nfn f() {}", "include_str!"),
        ];
        for (src, want) in cases {
            let got = constructs(src);
            assert!(got.contains(&want.to_string()), "{src:?}: {got:?}");
        }
    }

    #[test]
    fn comments_strings_and_ordinary_names_are_not_findings() {
        let clean = r####"
            //! Uses include_str!("x") in a comment only.
            /* a block /* nested include!("y") */ env!("Z") */
            const A: &str = "include_str!(\"/etc/hostname\") and env!(\"KEY\")";
            const B: &str = r#"include!("/x") "quoted" "#;
            const C: &[u8] = br##"env!("K")"##;
            const D: char = '"';
            const E: u8 = b'\'';
            fn f<'a>(env: &'a str, include: bool) -> &'a str { let _ = include; env }
            fn g(path: &str) -> String { let env = path; format!("{env}") }
            #[derive(Debug)] #[doc = "path = x"] struct S { path: u8 }
            const F: char = '\u{1F600}';
            fn h() { std::env::var("X").ok(); concat!("/etc", "/hostname"); }
            fn i(env: &str) -> String { format!("{}", env) + &vec![env].concat() }
        "####;
        assert_eq!(constructs(clean), Vec::<String>::new());
    }

    #[test]
    fn findings_carry_line_and_tokens() {
        let f = &scan_source(
            "src/t.rs",
            "\n\nconst S: &str = include_str!( \"/etc/hostname\" );",
        )[0];
        assert_eq!(f.line, 3);
        assert_eq!(f.tokens, "include_str ! ( \"/etc/hostname\" )");
        let refusal = Refusal {
            findings: vec![f.clone()],
        };
        let text = refusal.to_string();
        assert!(text.contains("src/t.rs:3: include_str!"), "{text}");
        assert!(text.contains("reads a file at build time"), "{text}");
    }

    #[test]
    fn what_the_reference_has_may_stay_but_nothing_new() {
        let reference = scan_source("src/a.rs", "const S: &str = include_str!(\"skill.md\");");
        let same = scan_source(
            "src/a.rs",
            "// edited\nconst S: &str = include_str!(\"skill.md\");",
        );
        assert!(refuse_new(same, &reference).is_ok());
        let twice = scan_source(
            "src/a.rs",
            "const S: &str = include_str!(\"skill.md\");\nconst T: &str = include_str!(\"skill.md\");",
        );
        assert_eq!(refuse_new(twice, &reference).unwrap_err().findings.len(), 1);
        let changed = scan_source("src/a.rs", "const S: &str = include_str!(\"/etc/passwd\");");
        assert!(refuse_new(changed, &reference).is_err());
        let moved = scan_source("src/b.rs", "const S: &str = include_str!(\"skill.md\");");
        assert!(refuse_new(moved, &reference).is_err());
    }
}

#[cfg(test)]
mod real_sources {
    use super::*;

    /// The starting harness and the guests are real code: the scan flags
    /// nothing in them but what they really do (the template's own test
    /// reads `CARGO_MANIFEST_DIR`; the guests' `generate!` names `../wit`).
    #[test]
    fn the_repositorys_guests_have_only_their_real_findings() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let found: Vec<(String, String)> =
            ["harness-template", "guests/direct", "guests/read-only"]
                .iter()
                .flat_map(|c| scan_crate(&root.join(c)).unwrap())
                .map(|f| (f.file, f.tokens))
                .collect();
        assert_eq!(
            found,
            [
                (
                    "src/component.rs",
                    "generate ! ( { world : \"harness\" , path : \"../wit\" , } )"
                ),
                ("src/text.rs", "env ! ( \"CARGO_MANIFEST_DIR\" )"),
                (
                    "src/lib.rs",
                    "generate ! ( { world : \"harness\" , path : \"../../wit\" , } )"
                ),
                (
                    "src/lib.rs",
                    "generate ! ( { world : \"harness\" , path : \"../../wit\" , } )"
                ),
            ]
            .map(|(a, b)| (a.to_string(), b.to_string()))
        );
    }
}

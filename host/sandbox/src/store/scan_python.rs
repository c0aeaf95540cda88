//! The scan of a Python harness's source before an untrusted build.
//!
//! `componentize-py` runs a module's top-level code at build time, and at
//! run time the virtual WASI answers any file or socket with a refusal; the
//! jail hides the host either way. The scan names what a candidate added
//! that could only be an attempt to reach outside the harness: names that
//! open files, run code from text, load other code, or reach the process,
//! the network or native libraries. It reads code with strings and
//! comments removed, so a skill text that mentions `open(` is fine; what the
//! reference already has may stay (see [`super::scan::refuse_new`]).

use super::scan::Finding;

/// Names a Python harness has no use for, with why each is refused.
const REACHING_NAMES: [(&str, &str); 15] = [
    ("open", "opens a file"),
    ("exec", "runs code from text"),
    ("eval", "runs code from text"),
    ("compile", "runs code from text"),
    ("__import__", "loads a module by name"),
    ("importlib", "loads a module by name"),
    ("subprocess", "starts processes"),
    ("socket", "opens network connections"),
    ("ctypes", "loads native code"),
    ("pathlib", "reads the filesystem"),
    ("shutil", "reads the filesystem"),
    ("environ", "reads the build's environment"),
    ("getenv", "reads the build's environment"),
    ("system", "starts processes"),
    ("popen", "starts processes"),
];

/// The findings of one Python file.
pub fn scan_python(rel: &str, src: &str) -> Vec<Finding> {
    let code = strip_strings_and_comments(src);
    let mut findings = Vec::new();
    for (index, line) in code.lines().enumerate() {
        for word in identifiers(line) {
            if let Some((name, why)) = REACHING_NAMES.iter().find(|(n, _)| *n == word) {
                findings.push(Finding {
                    file: rel.to_string(),
                    line: index as u32 + 1,
                    construct: format!("`{name}`"),
                    why: (*why).to_string(),
                    tokens: line.split_whitespace().collect::<Vec<_>>().join(" "),
                });
            }
        }
    }
    findings
}

fn identifiers(line: &str) -> impl Iterator<Item = &str> {
    line.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

/// `src` with the contents of string literals (all quote styles, with
/// prefixes and escapes) and comments blanked, line breaks kept so line
/// numbers stay right.
fn strip_strings_and_comments(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == '"' || c == '\'' {
            let triple = i + 2 < chars.len() && chars[i + 1] == c && chars[i + 2] == c;
            let quote_len = if triple { 3 } else { 1 };
            out.push_str("\"\"");
            i += quote_len;
            while i < chars.len() {
                if chars[i] == '\\' {
                    i += 2;
                    continue;
                }
                if chars[i] == '\n' {
                    out.push('\n');
                    if !triple {
                        i += 1;
                        break;
                    }
                }
                if chars[i] == c
                    && (!triple || (i + 2 < chars.len() && chars[i + 1] == c && chars[i + 2] == c))
                {
                    i += quote_len;
                    break;
                }
                i += 1;
            }
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn constructs(src: &str) -> Vec<String> {
        scan_python("hooks.py", src)
            .into_iter()
            .map(|f| format!("{}:{}", f.line, f.construct))
            .collect()
    }

    #[test]
    fn reaching_names_in_code_are_found_with_their_line() {
        assert_eq!(
            constructs("import json\nx = open('/etc/passwd').read()\nimport subprocess as sp\n"),
            ["2:`open`", "3:`subprocess`"]
        );
        assert_eq!(
            constructs("f = getattr(__builtins__, 'ev' + 'al')\nos.environ['K']"),
            ["2:`environ`"]
        );
        assert_eq!(
            constructs("from importlib import import_module"),
            ["1:`importlib`"]
        );
    }

    #[test]
    fn strings_and_comments_are_not_code() {
        assert!(constructs("HINT = 'never open( a file'  # or eval it\n").is_empty());
        assert!(constructs("T = \"\"\"\nsubprocess\nsocket\n\"\"\"\nx = 1\n").is_empty());
        assert!(constructs("s = 'it\\'s exec'\n").is_empty());
        // The line after a multi-line string keeps its number.
        assert_eq!(constructs("T = '''a\nb'''\neval(T)\n"), ["3:`eval`"]);
    }

    #[test]
    fn names_that_merely_contain_a_reaching_name_pass() {
        assert!(constructs("reopen = 1\nsystem_prompt = 2\nevaluate()\n").is_empty());
    }
}

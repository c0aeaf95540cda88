//! Google-style docstrings, read the way τ²'s `Tool.parse_data` reads them
//! (the `docstring_parser` package in auto mode; for these docstrings its
//! Google reading is the one that wins).
//!
//! Only two things reach the model: the description (first line, then a
//! blank line, then the rest of the text before the first section title)
//! and each `Args:` entry's text. The rules below are the ones that decide
//! those texts, including the reference's quirks: the long description is
//! always separated from the first line by exactly one blank line whatever
//! the source had, and a continuation line of an entry is kept on its own
//! line after its common indentation is removed. Docstrings on which the
//! reference would have switched to another style (a failed Google reading,
//! or ReST/Epydoc/Numpydoc markers that could win) are refused rather than
//! guessed.

use super::pysource::{cleandoc, py_space};

/// Why a docstring is refused: the reference could read it differently
/// from the Google-style rules below.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocstringError {
    /// A line starting with `:` or `@` (the line, cleaned).
    #[error(
        "line `{0}` looks like ReST/Epydoc markup, which could change how the reference reads this docstring"
    )]
    Markup(String),
    /// A line of dashes.
    #[error(
        "a `---` underline (Numpydoc section) could change how the reference reads this docstring"
    )]
    Underline,
    /// A section (its title) whose first line is blank or missing.
    #[error("section `{0}:` is empty or starts with a blank line")]
    EmptySection(&'static str),
    /// An entry of a section without the `:` that ends its name.
    #[error("section `{section}:` entry `{entry}` has no colon")]
    NoColon {
        /// The section's title.
        section: &'static str,
        /// The entry as written.
        entry: String,
    },
    /// A parameter entry `name (type): ...`.
    #[error(
        "section `{section}:` entry `{entry}` declares a type, which this reader does not handle"
    )]
    TypedEntry {
        /// The section's title.
        section: &'static str,
        /// The entry's text before its colon.
        entry: String,
    },
}

/// What a docstring contributes to a tool spec.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Docstring {
    /// The first line of the description.
    pub(crate) short: Option<String>,
    /// The rest of the description, trimmed.
    pub(crate) long: Option<String>,
    /// `(name, text)` of every parameter entry, in order.
    pub(crate) params: Vec<(String, String)>,
}

impl Docstring {
    /// `Tool._get_description`: the short description, followed by a blank
    /// line and the long one when there is one; the tool's name when the
    /// docstring has no description.
    pub(crate) fn description(&self, tool: &str) -> String {
        match (&self.short, &self.long) {
            (None, _) => tool.to_string(),
            (Some(s), None) => s.clone(),
            (Some(s), Some(l)) => format!("{s}\n\n{l}"),
        }
    }

    /// The text of parameter `name` (a later entry overrides an earlier one,
    /// as the reference's dict does).
    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d.as_str())
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Section {
    /// Entries `name: text`, kept as parameters (`Attributes` counts too:
    /// the reference's `params` includes them).
    Params,
    /// Entries `Type: text` (`Raises`), which must have a colon.
    Entries,
    /// One block (`Returns`, `Examples`): nothing that reaches the spec.
    Block,
}

const TITLES: &[(&str, Section)] = &[
    ("Arguments", Section::Params),
    ("Args", Section::Params),
    ("Parameters", Section::Params),
    ("Params", Section::Params),
    ("Attributes", Section::Params),
    ("Raises", Section::Entries),
    ("Exceptions", Section::Entries),
    ("Except", Section::Entries),
    ("Example", Section::Block),
    ("Examples", Section::Block),
    ("Returns", Section::Block),
    ("Yields", Section::Block),
];

/// The section a line opens: a known title, a colon, optional spaces, at
/// column 0 of the cleaned docstring.
fn title_of(line: &str) -> Option<(&'static str, Section)> {
    let bare = line.trim_end_matches([' ', '\t', '\r', '\x0c', '\x0b']);
    let name = bare.strip_suffix(':')?;
    TITLES.iter().copied().find(|(t, _)| *t == name)
}

/// Reads a docstring's raw value (`__doc__`).
pub(crate) fn parse(raw: &str) -> Result<Docstring, DocstringError> {
    let text = cleandoc(raw);
    for line in text.split('\n') {
        if line.starts_with(':') || line.starts_with('@') {
            return Err(DocstringError::Markup(line.to_string()));
        }
        if line.len() >= 3 && line.chars().all(|c| c == '-') {
            return Err(DocstringError::Underline);
        }
    }
    // Byte offsets of (title line start, title line end, section).
    let mut titles = Vec::new();
    let mut at = 0;
    for line in text.split('\n') {
        if let Some((name, section)) = title_of(line) {
            titles.push((at, at + line.len(), name, section));
        }
        at += line.len() + 1;
    }
    let mut doc = Docstring::default();
    let desc = &text[..titles.first().map_or(text.len(), |t| t.0)];
    match desc.split_once('\n') {
        None => doc.short = (!desc.is_empty()).then(|| desc.to_string()),
        Some((first, rest)) => {
            doc.short = (!first.is_empty()).then(|| first.to_string());
            let rest = rest.trim_matches(py_space);
            doc.long = (!rest.is_empty()).then(|| rest.to_string());
        }
    }
    // A repeated title replaces the earlier section's text, in its place.
    let mut chunks: Vec<(&str, Section, &str)> = Vec::new();
    for (k, &(_, end, name, section)) in titles.iter().enumerate() {
        let stop = titles.get(k + 1).map_or(text.len(), |t| t.0);
        let mut chunk = &text[end..stop];
        // A line back at column 0 ends the section.
        if let Some(cut) = chunk
            .char_indices()
            .find(|&(i, c)| {
                c == '\n' && chunk[i + 1..].chars().next().is_some_and(|n| !py_space(n))
            })
            .map(|(i, _)| i)
        {
            chunk = &chunk[..cut];
        }
        let chunk = chunk.trim_matches('\n');
        match chunks.iter_mut().find(|(n, _, _)| *n == name) {
            Some(slot) => slot.2 = chunk,
            None => chunks.push((name, section, chunk)),
        }
    }
    for (name, section, chunk) in chunks {
        if section == Section::Block {
            continue;
        }
        for entry in entries(name, chunk)? {
            let (before, after) = entry
                .split_once(':')
                .ok_or_else(|| DocstringError::NoColon {
                    section: name,
                    entry: entry.to_string(),
                })?;
            if section == Section::Params {
                if before.contains('(') {
                    return Err(DocstringError::TypedEntry {
                        section: name,
                        entry: before.to_string(),
                    });
                }
                doc.params.push((before.to_string(), entry_text(after)));
            }
        }
    }
    Ok(doc)
}

/// Splits section `name` into entries: each starts on a line indented
/// exactly like the section's first line; deeper lines continue the entry.
fn entries<'c>(name: &'static str, chunk: &'c str) -> Result<Vec<&'c str>, DocstringError> {
    let first = chunk.split('\n').next().unwrap_or("");
    let indent_len = first.len() - first.trim_start_matches(py_space).len();
    let indent = &first[..indent_len];
    if first.trim_matches(py_space).is_empty() {
        return Err(DocstringError::EmptySection(name));
    }
    let mut starts = Vec::new();
    let mut at = 0;
    for line in chunk.split('\n') {
        let opens = line
            .strip_prefix(indent)
            .and_then(|r| r.chars().next())
            .is_some_and(|c| !py_space(c));
        if opens {
            starts.push(at);
        }
        at += line.len() + 1;
    }
    Ok(starts
        .iter()
        .enumerate()
        .map(|(k, &s)| {
            let end = starts.get(k + 1).map_or(chunk.len(), |&n| n);
            chunk[s + indent_len..end].trim_matches('\n')
        })
        .collect())
}

/// An entry's text after its colon: one leading space dropped, continuation
/// lines cleaned like a docstring of their own and kept on their lines.
fn entry_text(after: &str) -> String {
    let text = after.strip_prefix(' ').unwrap_or(after);
    match text.split_once('\n') {
        None => text.to_string(),
        Some((first, rest)) => format!("{first}\n{}", cleandoc(rest))
            .trim_matches('\n')
            .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_long_description_and_args() {
        let d = parse(
            "Open the hatch. Only when\n        the light is green.\n        Never twice.\n\n        Args:\n            door: Which door, such as 'A'.\n            code: The access code,\n                  four digits\n                  long.\n            note:\n                On the next line.\n\n        Returns:\n            str: whatever.\n\n        Raises:\n            KeyError: If the door is unknown.\n        ",
        )
        .unwrap();
        assert_eq!(
            d.description("hatch"),
            "Open the hatch. Only when\n\nthe light is green.\nNever twice."
        );
        assert_eq!(d.param("door"), Some("Which door, such as 'A'."));
        assert_eq!(
            d.param("code"),
            Some("The access code,\nfour digits\nlong.")
        );
        assert_eq!(d.param("note"), Some("On the next line."));
        assert_eq!(d.param("missing"), None);
    }

    #[test]
    fn descriptions_without_long_part_or_without_text() {
        let d = parse("\n    Just one line.\n\n    Returns:\n        Something.\n    ").unwrap();
        assert_eq!(d.description("x"), "Just one line.");
        assert!(d.params.is_empty());
        assert_eq!(
            parse("\n    Args:\n        a: b\n    ")
                .unwrap()
                .description("named"),
            "named"
        );
        // On the opening line, the entries dedent to column 0 and end the
        // section at once: the reference's Google reading fails there.
        assert!(parse("Args:\n    a: b").is_err());
        assert_eq!(parse("").unwrap().description("named"), "named");
        // `Returns` inside a sentence is not a title.
        let d = parse("Returns a list.\n\nReturns:\n    A list.").unwrap();
        assert_eq!(d.description("x"), "Returns a list.");
    }

    #[test]
    fn a_column_zero_line_ends_a_section() {
        let d = parse("S.\n\nArgs:\n    a: first\nTrailing prose.\n    b: not an arg").unwrap();
        assert_eq!(d.params, vec![("a".to_string(), "first".to_string())]);
    }

    #[test]
    fn docstrings_the_reference_would_read_differently_are_refused() {
        assert_eq!(
            parse("S.\n\nArgs:\n    a has no colon")
                .unwrap_err()
                .to_string(),
            "section `Args:` entry `a has no colon` has no colon"
        );
        assert!(parse("S.\n\nRaises:\n    ValueError").is_err());
        assert!(parse("S.\n\nArgs:\n    a (int): typed").is_err());
        assert!(parse("S.\n\n:param a: rest style").is_err());
        assert!(parse("S.\n\nParameters\n----------\na : int").is_err());
        assert!(parse("S.\n\nArgs:\nReturns:\n    x").is_err());
    }
}

//! The offline rule coder: implements spec items that carry a machine
//! readable [`RuleEdit`] by editing the harness's data-driven rule tables
//! (`src/tables.rs` of `harness-template`). Each edit becomes one entry
//! appended at the end of its table (`TOOL_HINTS`, `TOOL_ALIASES`,
//! `ID_PREFIXES`, `NUMERIC_ARGS`), in the table's own struct syntax, unless
//! an entry with the same key is already there; the repeat threshold is a
//! field of `REGULATION` and has its value replaced. Changes with no rule
//! (prose only) are left to an LLM coder.

use std::path::Path;

use super::heuristic::TABLES_FILE;
use super::spec::{ChangeSpec, RuleEdit};
use crate::fsutil::{PathError, atomic_write};

/// Escape a string for a Rust string literal.
fn lit(s: &str) -> String {
    format!("{s:?}")
}

/// The table an edit goes to, the text that marks an existing entry with
/// the same key, and the entry to append.
fn render(edit: &RuleEdit, domain: &str) -> (&'static str, String, String) {
    let d = lit(domain);
    match edit {
        RuleEdit::ToolHint { tool, hint } => (
            "TOOL_HINTS",
            format!("tool: {}, hint: {}", lit(tool), lit(hint)),
            format!(
                "    ToolHint {{ domain: {d}, tool: {}, hint: {} }},",
                lit(tool),
                lit(hint)
            ),
        ),
        RuleEdit::ToolAlias { alias, tool } => (
            "TOOL_ALIASES",
            format!("alias: {}", lit(alias)),
            format!(
                "    ToolAlias {{ domain: {d}, alias: {}, tool: {} }},",
                lit(alias),
                lit(tool)
            ),
        ),
        RuleEdit::HashPrefixedArg { arg } => (
            "ID_PREFIXES",
            format!("arg: {}", lit(arg)),
            format!(
                "    IdPrefix {{ domain: {d}, arg: {}, prefix: \"#\" }},",
                lit(arg)
            ),
        ),
        RuleEdit::NumericArg { arg } => (
            "NUMERIC_ARGS",
            format!("arg: {}", lit(arg)),
            format!("    NumericArg {{ domain: {d}, arg: {} }},", lit(arg)),
        ),
        RuleEdit::RepeatThreshold { count } => ("REGULATION", String::new(), count.to_string()),
    }
}

/// The byte range of the body of `pub static NAME: ... = &[ ... ];` (from
/// after `&[` to the matching `]`), skipping brackets inside strings.
fn table_body(text: &str, name: &str) -> Option<(usize, usize)> {
    let decl = text.find(&format!("pub static {name}:"))?;
    let open = decl + text[decl..].find("= &[")? + 4;
    let (mut depth, mut in_str, mut escaped) = (1usize, false, false);
    for (i, c) in text[open..].char_indices() {
        if in_str {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth == 0 {
                    return Some((open, open + i));
                }
            }
            _ => {}
        }
    }
    None
}

/// Apply one edit to the text of `tables.rs` for `domain` (the short name,
/// e.g. `retail`); `Ok(false)` when an entry with the same key was there.
pub fn apply_to_text(text: &mut String, edit: &RuleEdit, domain: &str) -> Result<bool, String> {
    let (table, key, entry) = render(edit, domain);
    if let RuleEdit::RepeatThreshold { .. } = edit {
        let decl = text
            .find("pub static REGULATION:")
            .ok_or_else(|| format!("{TABLES_FILE} has no REGULATION"))?;
        let field = decl
            + text[decl..]
                .find("repeat_annotate:")
                .ok_or_else(|| "REGULATION has no repeat_annotate".to_string())?;
        let value_start = field + "repeat_annotate:".len();
        let value_end = value_start
            + text[value_start..]
                .find(',')
                .ok_or_else(|| "repeat_annotate has no value".to_string())?;
        let new = format!(" {entry}");
        if text[value_start..value_end] == new {
            return Ok(false);
        }
        text.replace_range(value_start..value_end, &new);
        return Ok(true);
    }
    let (start, end) =
        table_body(text, table).ok_or_else(|| format!("{TABLES_FILE} has no table {table}"))?;
    let body = &text[start..end];
    if body.contains(&key)
        && (body.contains(&format!("domain: {}", lit(domain))) || body.contains("domain: \"*\""))
    {
        return Ok(false);
    }
    // Insert on its own line before the closing bracket.
    let trimmed_end = start + body.trim_end().len();
    let needs_comma = !text[start..trimmed_end].trim_end().ends_with(',')
        && !text[start..trimmed_end].trim().is_empty();
    let mut insert = String::new();
    if needs_comma {
        insert.push(',');
    }
    insert.push('\n');
    insert.push_str(&entry);
    insert.push('\n');
    text.replace_range(trimmed_end..end, &insert);
    Ok(true)
}

/// The rule tables the rule coder writes to, emptied: the template's rule
/// engine with no rules, a starting point for evolution experiments.
pub fn blank_tables(text: &mut String) -> Result<(), String> {
    for table in ["TOOL_HINTS", "TOOL_ALIASES", "ID_PREFIXES", "NUMERIC_ARGS"] {
        let (start, end) =
            table_body(text, table).ok_or_else(|| format!("{TABLES_FILE} has no table {table}"))?;
        text.replace_range(start..end, "");
    }
    Ok(())
}

/// A rule coder failure.
#[derive(Debug, thiserror::Error)]
pub enum RuleCoderError {
    /// `tables.rs` could not be read or written.
    #[error(transparent)]
    Io(#[from] PathError),
    /// `tables.rs` lacks a table or field an edit needs (named in the message).
    #[error("{0}")]
    Table(String),
}

impl From<RuleCoderError> for super::train::TrainError {
    fn from(e: RuleCoderError) -> Self {
        match e {
            RuleCoderError::Io(p) => super::train::TrainError::Io(p),
            RuleCoderError::Table(m) => super::train::TrainError::Io(PathError::new(
                "edit",
                Path::new(TABLES_FILE),
                std::io::Error::other(m),
            )),
        }
    }
}

/// Apply every rule of `spec` to `<crate>/src/tables.rs` for `domain` (the
/// short name, e.g. `retail`); returns how many entries changed.
pub fn apply(crate_dir: &Path, spec: &ChangeSpec, domain: &str) -> Result<usize, RuleCoderError> {
    let path = crate_dir.join(TABLES_FILE);
    let mut text = std::fs::read_to_string(&path).map_err(|e| PathError::new("read", &path, e))?;
    let mut changed = 0;
    for c in &spec.proposed_changes {
        if let Some(rule) = &c.rule {
            changed +=
                usize::from(apply_to_text(&mut text, rule, domain).map_err(RuleCoderError::Table)?);
        }
    }
    atomic_write(&path, text.as_bytes()).map_err(|e| PathError::new("write", &path, e))?;
    Ok(changed)
}

/// A unified diff between two source trees (empty when equal), by `git
/// diff --no-index`, which every machine here has.
pub fn diff(before: &Path, after: &Path) -> String {
    std::process::Command::new("git")
        .args(["diff", "--no-index", "--no-color", "--"])
        .arg(before)
        .arg(after)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLES: &str = r##"
pub static TOOL_ALIASES: &[ToolAlias] = &[
    // ----- retail
    ToolAlias { domain: "retail", alias: "get_order_info", tool: "get_order_details" },
];
pub static ID_PREFIXES: &[IdPrefix] = &[IdPrefix {
    domain: "retail",
    arg: "order_id",
    prefix: "#",
}];
pub static NUMERIC_ARGS: &[NumericArg] = &[];
pub static REGULATION: Regulation = Regulation {
    repeat_annotate: 2,
    repeat_stop: 6,
};
"##;

    #[test]
    fn appends_entries_once_in_the_table_syntax() {
        let mut t = TABLES.to_string();
        let alias = RuleEdit::ToolAlias {
            alias: "cancel_order".into(),
            tool: "cancel_pending_order".into(),
        };
        assert_eq!(apply_to_text(&mut t, &alias, "retail"), Ok(true));
        assert_eq!(
            apply_to_text(&mut t, &alias, "retail"),
            Ok(false),
            "no duplicate"
        );
        assert!(t.contains("    ToolAlias { domain: \"retail\", alias: \"cancel_order\", tool: \"cancel_pending_order\" },\n];"), "{t}");
        let existing = RuleEdit::ToolAlias {
            alias: "get_order_info".into(),
            tool: "get_order_details".into(),
        };
        assert_eq!(apply_to_text(&mut t, &existing, "retail"), Ok(false));
        // A table written on one line gets a comma before the new entry.
        let hash = RuleEdit::HashPrefixedArg {
            arg: "exchange_id".into(),
        };
        assert_eq!(apply_to_text(&mut t, &hash, "retail"), Ok(true));
        assert!(!t.contains("}],"));
        assert!(t.contains("prefix: \"#\",\n},\n    IdPrefix { domain: \"retail\", arg: \"exchange_id\", prefix: \"#\" },\n];"), "{t}");
        let num = RuleEdit::NumericArg {
            arg: "amount".into(),
        };
        assert_eq!(apply_to_text(&mut t, &num, "retail"), Ok(true));
        assert!(
            t.contains("&[\n    NumericArg { domain: \"retail\", arg: \"amount\" },\n];"),
            "{t}"
        );
    }

    #[test]
    fn replaces_the_repeat_threshold() {
        let mut t = TABLES.to_string();
        let edit = RuleEdit::RepeatThreshold { count: 1 };
        assert_eq!(apply_to_text(&mut t, &edit, "retail"), Ok(true));
        assert!(t.contains("repeat_annotate: 1,\n    repeat_stop: 6"), "{t}");
        assert_eq!(apply_to_text(&mut t, &edit, "retail"), Ok(false));
    }

    #[test]
    fn a_missing_table_is_an_error() {
        let mut t = "pub const X: &[&str] = &[];".to_string();
        assert!(
            apply_to_text(&mut t, &RuleEdit::NumericArg { arg: "x".into() }, "retail").is_err()
        );
    }
}

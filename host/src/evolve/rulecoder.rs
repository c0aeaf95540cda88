//! The offline rule coder: implements spec items that carry a machine
//! readable [`RuleEdit`] by editing the harness's data-driven rule tables
//! (`src/tables.rs`). Each table ends with a marker comment
//! `// @evolve:<kind>`; a new entry is inserted just before its marker, in
//! the table's own syntax, unless the same entry is already there. A scalar
//! knob carries its marker on its own line and has its value replaced.
//! Changes with no rule (prose only) are left to an LLM coder.

use std::path::Path;

use super::heuristic::TABLES_FILE;
use super::spec::{ChangeSpec, RuleEdit};
use crate::fsutil::{PathError, atomic_write};

/// Escape a string for a Rust string literal.
fn lit(s: &str) -> String {
    format!("{s:?}")
}

/// The marker and the rendered entry of an edit.
fn render(edit: &RuleEdit) -> (&'static str, String) {
    match edit {
        RuleEdit::ToolHint { tool, hint } => (
            "tool_hint",
            format!("    ({}, {}),", lit(tool), lit(hint)),
        ),
        RuleEdit::ToolAlias { alias, tool } => (
            "tool_alias",
            format!("    ({}, {}),", lit(alias), lit(tool)),
        ),
        RuleEdit::HashPrefixedArg { arg } => ("hash_prefixed_arg", format!("    {},", lit(arg))),
        RuleEdit::NumericArg { arg } => ("numeric_arg", format!("    {},", lit(arg))),
        RuleEdit::RepeatThreshold { count } => ("repeat_threshold", count.to_string()),
    }
}

/// Apply one edit to the text of `tables.rs`; `Ok(false)` when it was
/// already there.
pub fn apply_to_text(text: &mut String, edit: &RuleEdit) -> Result<bool, String> {
    let (kind, entry) = render(edit);
    let marker = format!("// @evolve:{kind}");
    let Some(pos) = text.find(&marker) else {
        return Err(format!("{TABLES_FILE} has no `{marker}` marker"));
    };
    if let RuleEdit::RepeatThreshold { .. } = edit {
        // `pub const NAME: u32 = N; // @evolve:repeat_threshold`
        let line_start = text[..pos].rfind('\n').map(|i| i + 1).unwrap_or(0);
        let line = &text[line_start..pos];
        let (Some(eq), Some(semi)) = (line.find('='), line.rfind(';')) else {
            return Err(format!("the `{marker}` line is not `const X: u32 = N;`"));
        };
        let new_line = format!("{}= {entry}{}", &line[..eq], &line[semi..]);
        if new_line == line {
            return Ok(false);
        }
        text.replace_range(line_start..pos, &new_line);
        return Ok(true);
    }
    let table_start = text[..pos].rfind("&[").unwrap_or(0);
    if text[table_start..pos].contains(entry.trim()) {
        return Ok(false);
    }
    let line_start = text[..pos].rfind('\n').map(|i| i + 1).unwrap_or(0);
    text.insert_str(line_start, &format!("{entry}\n"));
    Ok(true)
}

/// A rule coder failure.
#[derive(Debug, thiserror::Error)]
pub enum RuleCoderError {
    #[error(transparent)]
    Io(#[from] PathError),
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

/// Apply every rule of `spec` to `<crate>/src/tables.rs`; returns how many
/// entries changed.
pub fn apply(crate_dir: &Path, spec: &ChangeSpec) -> Result<usize, RuleCoderError> {
    let path = crate_dir.join(TABLES_FILE);
    let mut text =
        std::fs::read_to_string(&path).map_err(|e| PathError::new("read", &path, e))?;
    let mut changed = 0;
    for c in &spec.proposed_changes {
        if let Some(rule) = &c.rule {
            changed += usize::from(apply_to_text(&mut text, rule).map_err(RuleCoderError::Table)?);
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

    const TABLES: &str = r#"
pub const TOOL_ALIASES: &[(&str, &str)] = &[
    ("get_order_info", "get_order_details"),
    // @evolve:tool_alias
];
pub const HASH_ARGS: &[&str] = &[
    // @evolve:hash_prefixed_arg
];
pub const REPEAT_ANNOTATE_AFTER: u32 = 2; // @evolve:repeat_threshold
"#;

    #[test]
    fn inserts_before_markers_once() {
        let mut t = TABLES.to_string();
        let alias = RuleEdit::ToolAlias {
            alias: "cancel_order".into(),
            tool: "cancel_pending_order".into(),
        };
        assert_eq!(apply_to_text(&mut t, &alias), Ok(true));
        assert_eq!(apply_to_text(&mut t, &alias), Ok(false), "no duplicate");
        assert!(t.contains("    (\"cancel_order\", \"cancel_pending_order\"),\n    // @evolve:tool_alias"));
        let hash = RuleEdit::HashPrefixedArg { arg: "order_id".into() };
        assert_eq!(apply_to_text(&mut t, &hash), Ok(true));
        assert!(t.contains("&[\n    \"order_id\",\n    // @evolve:hash_prefixed_arg"));
        let existing = RuleEdit::ToolAlias {
            alias: "get_order_info".into(),
            tool: "get_order_details".into(),
        };
        assert_eq!(apply_to_text(&mut t, &existing), Ok(false));
    }

    #[test]
    fn replaces_a_scalar_knob() {
        let mut t = TABLES.to_string();
        assert_eq!(
            apply_to_text(&mut t, &RuleEdit::RepeatThreshold { count: 1 }),
            Ok(true)
        );
        assert!(t.contains("pub const REPEAT_ANNOTATE_AFTER: u32 = 1; // @evolve:repeat_threshold"));
        assert_eq!(
            apply_to_text(&mut t, &RuleEdit::RepeatThreshold { count: 1 }),
            Ok(false)
        );
    }

    #[test]
    fn a_missing_marker_is_an_error() {
        let mut t = "pub const X: &[&str] = &[];".to_string();
        assert!(apply_to_text(&mut t, &RuleEdit::NumericArg { arg: "x".into() }).is_err());
    }
}

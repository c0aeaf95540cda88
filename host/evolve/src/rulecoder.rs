//! The offline rule coder: implements spec items that carry a machine
//! readable [`RuleEdit`] by editing the harness's data-driven rule tables
//! (`src/tables.rs` of `harness-template`). Each edit becomes one entry
//! appended at the end of its table (`PROMPT_RULES`, `TOOL_HINTS`,
//! `TOOL_ALIASES`, `ID_PREFIXES`, `NUMERIC_ARGS`, `SKILLS`), in the table's
//! own struct syntax, unless an entry with the same key is already there;
//! error advice goes *first* in `ERROR_ADVICE` (its first match wins);
//! thresholds are fields of `REGULATION` and have their value replaced.
//! Changes with no rule (prose only) are left to an LLM coder, or to the
//! table coder ([`super::coder::tables`]), which asks a model for these
//! same edits.

use std::path::Path;

use super::heuristic::TABLES_FILE;
use super::spec::{ChangeSpec, RuleEdit};
use ecdysis_sys::fsutil::{PathError, atomic_write};

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
        RuleEdit::Regulation { value, .. } => ("REGULATION", String::new(), value.to_string()),
        RuleEdit::PromptRule { text } => (
            "PROMPT_RULES",
            format!("text: {}", lit(text)),
            format!("    PromptRule {{ domain: {d}, text: {} }},", lit(text)),
        ),
        RuleEdit::ErrorAdvice { contains, advice } => (
            "ERROR_ADVICE",
            format!("contains: {}", lit(&contains.to_lowercase())),
            format!(
                "    ErrorAdvice {{ contains: {}, advice: {} }},",
                lit(&contains.to_lowercase()),
                lit(advice)
            ),
        ),
        RuleEdit::Skill {
            title,
            text,
            keywords,
        } => (
            "SKILLS",
            format!("title: {}", lit(title)),
            format!(
                "    Skill {{ domain: {d}, title: {}, text: {}, keywords: {} }},",
                lit(title),
                lit(text),
                lit(&keywords.join(" ").to_lowercase())
            ),
        ),
    }
}

/// The byte range of the struct literal `Name { ... },` in `body` (offsets
/// into `text`, from `start`) that contains `needle`, trailing comma
/// included; strings skipped when matching braces.
fn entry_around(
    text: &str,
    start: usize,
    end: usize,
    needle: &str,
    name: &str,
) -> Option<(usize, usize)> {
    let at = start + text[start..end].find(needle)?;
    let open = start + text[start..at].rfind(&format!("{name} {{"))?;
    // Matched from the literal's own opening brace (depth 0 before it).
    let brace = open + text[open..end].find('{')?;
    let mut close = closing(&text[..end], brace + 1, '{', '}')? + 1;
    if text[close..].starts_with(',') {
        close += 1;
    }
    Some((open, close))
}

/// The offset of the `close` bracket that matches an `open` one just
/// before `from`, skipping brackets inside string literals.
fn closing(text: &str, from: usize, open: char, close: char) -> Option<usize> {
    let (mut depth, mut in_str, mut escaped) = (1usize, false, false);
    for (i, c) in text[from..].char_indices() {
        if in_str {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        if c == '"' {
            in_str = true;
        } else if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return Some(from + i);
            }
        }
    }
    None
}

/// The byte range of the body of `pub static NAME: ... = &[ ... ];` (from
/// after `&[` to the matching `]`), skipping brackets inside strings.
fn table_body(text: &str, name: &str) -> Option<(usize, usize)> {
    let decl = text.find(&format!("pub static {name}:"))?;
    let open = decl + text[decl..].find("= &[")? + 4;
    Some((open, closing(text, open, '[', ']')?))
}

/// Apply one edit to the text of `tables.rs` for `domain` (the short name,
/// e.g. `retail`); `Ok(false)` when an entry with the same key was there.
pub fn apply_to_text(
    text: &mut String,
    edit: &RuleEdit,
    domain: &str,
) -> Result<bool, TablesShape> {
    let (table, key, entry) = render(edit, domain);
    let field = match edit {
        RuleEdit::RepeatThreshold { .. } => Some("repeat_annotate"),
        RuleEdit::Regulation { field, .. } => Some(field.as_str()),
        _ => None,
    };
    if let Some(field) = field {
        return set_regulation(text, field, &entry);
    }
    if let RuleEdit::ErrorAdvice { .. } = edit {
        return put_error_advice(text, &key, &entry);
    }
    let (start, end) = table_body(text, table).ok_or(TablesShape::NoTable(table))?;
    if let RuleEdit::Skill { .. } = edit {
        // A skill with the same title (in this domain) is edited in place.
        let mut from = start;
        while let Some((a, b)) = entry_around(text, from, end, &key, "Skill") {
            let old = &text[a..b];
            if old.contains(&format!("domain: {}", lit(domain))) {
                let new = entry.trim_start().to_string();
                if old.split_whitespace().eq(new.split_whitespace()) {
                    return Ok(false);
                }
                text.replace_range(a..b, &new);
                return Ok(true);
            }
            from = b;
        }
    }
    let body = &text[start..end];
    if !matches!(edit, RuleEdit::Skill { .. })
        && body.contains(&key)
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

/// Replace the value of `field` in `REGULATION` with `value`.
fn set_regulation(text: &mut String, field: &str, value: &str) -> Result<bool, TablesShape> {
    let decl = text
        .find("pub static REGULATION:")
        .ok_or(TablesShape::NoTable("REGULATION"))?;
    let name = format!("{field}:");
    let at = decl
        + text[decl..]
            .find(&name)
            .ok_or_else(|| TablesShape::NoField(field.to_string()))?;
    let value_start = at + name.len();
    let value_end = value_start
        + text[value_start..]
            .find(',')
            .ok_or_else(|| TablesShape::NoValue(field.to_string()))?;
    let new = format!(" {value}");
    if text[value_start..value_end] == new {
        return Ok(false);
    }
    text.replace_range(value_start..value_end, &new);
    Ok(true)
}

/// Error advice is matched first to last: a new entry goes first, so it
/// wins over the general advice; an entry for the same text is replaced.
fn put_error_advice(text: &mut String, key: &str, entry: &str) -> Result<bool, TablesShape> {
    let (start, end) =
        table_body(text, "ERROR_ADVICE").ok_or(TablesShape::NoTable("ERROR_ADVICE"))?;
    let new = entry.trim_start().to_string();
    if let Some((a, b)) = entry_around(text, start, end, key, "ErrorAdvice") {
        if text[a..b].split_whitespace().eq(new.split_whitespace()) {
            return Ok(false);
        }
        text.replace_range(a..b, &new);
        return Ok(true);
    }
    text.insert_str(start, &format!("\n{entry}"));
    Ok(true)
}

/// The entries of the rule tables that apply to `domain` (its own and the
/// `"*"` ones; every error advice, which has no domain), each written as
/// the JSON edit that would add it (`{"kind": "prompt_rule", "text": …}`):
/// what a coder needs to see to add to them without repeating them, in the
/// very shape it answers in (a small model copies the shape it is shown).
pub fn domain_entries(text: &str, domain: &str) -> String {
    // (table, struct, kind, title, fields kept as (Rust field, JSON key))
    type Table = (
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static [(&'static str, &'static str)],
    );
    const TABLES: [Table; 5] = [
        (
            "PROMPT_RULES",
            "PromptRule",
            "prompt_rule",
            "system-prompt rules",
            &[("text", "text")],
        ),
        (
            "TOOL_HINTS",
            "ToolHint",
            "tool_hint",
            "tool description hints",
            &[("tool", "tool"), ("hint", "hint")],
        ),
        (
            "SKILLS",
            "Skill",
            "skill",
            "skills",
            &[
                ("title", "title"),
                ("text", "text"),
                ("keywords", "keywords"),
            ],
        ),
        (
            "ERROR_ADVICE",
            "ErrorAdvice",
            "error_advice",
            "error advice (the first match wins)",
            &[("contains", "contains"), ("advice", "advice")],
        ),
        (
            "TOOL_ALIASES",
            "ToolAlias",
            "tool_alias",
            "tool aliases",
            &[("alias", "alias"), ("tool", "tool")],
        ),
    ];
    let own = format!("domain: {}", lit(domain));
    let mut out = String::new();
    for (table, name, kind, title, fields) in TABLES {
        let Some((start, end)) = table_body(text, table) else {
            continue;
        };
        let mut entries = Vec::new();
        let mut from = start;
        let marker = format!("{name} {{");
        while let Some(rel) = text[from..end].find(&marker) {
            let open = from + rel;
            let Some(close) = closing(&text[..end], open + marker.len(), '{', '}') else {
                break;
            };
            let entry = &text[open + marker.len()..close];
            if table == "ERROR_ADVICE" || entry.contains(&own) || entry.contains("domain: \"*\"") {
                let values = struct_fields(entry);
                let mut edit = serde_json::Map::new();
                edit.insert("kind".into(), kind.into());
                for (field, key) in fields {
                    let Some(v) = values.iter().find(|(f, _)| f == field).map(|(_, v)| v) else {
                        continue;
                    };
                    let value = if *key == "keywords" {
                        serde_json::Value::from(v.split_whitespace().collect::<Vec<_>>())
                    } else {
                        serde_json::Value::from(v.as_str())
                    };
                    edit.insert((*key).into(), value);
                }
                entries.push(serde_json::Value::Object(edit).to_string());
            }
            from = close + 1;
        }
        out += &format!("## {title} ({kind})\n");
        if entries.is_empty() {
            out += "(none)\n";
        }
        for e in entries {
            out += &format!("- {e}\n");
        }
        out += "\n";
    }
    if let Some(at) = text.find("pub static REGULATION:")
        && let Some(open) = text[at..].find('{')
        && let Some(close) = closing(text, at + open + 1, '{', '}')
    {
        out += "## regulation thresholds (regulation)\n";
        for (field, value) in struct_fields(&text[at + open + 1..close]) {
            if crate::spec::RegulationField::ALL
                .iter()
                .any(|f| f.as_str() == field)
            {
                out += &format!(
                    "- {}\n",
                    serde_json::json!({"kind": "regulation", "field": field, "value": value.parse::<u64>().unwrap_or(0)})
                );
            }
        }
        out += "\n";
    }
    out
}

/// The `name: value` fields of a struct literal's body, string literals
/// unescaped (as Rust reads them), other values as written.
fn struct_fields(body: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = body.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if !(c.is_ascii_alphabetic() || c == '_') {
            continue;
        }
        let mut end = i + c.len_utf8();
        while let Some(&(j, d)) = chars.peek() {
            if d.is_ascii_alphanumeric() || d == '_' {
                end = j + d.len_utf8();
                chars.next();
            } else {
                break;
            }
        }
        let name = body[i..end].to_string();
        while chars.peek().is_some_and(|(_, d)| d.is_whitespace()) {
            chars.next();
        }
        if chars.peek().map(|(_, d)| *d) != Some(':') {
            continue;
        }
        chars.next();
        while chars.peek().is_some_and(|(_, d)| d.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        match chars.peek().map(|(_, d)| *d) {
            Some('"') => {
                chars.next();
                while let Some((_, d)) = chars.next() {
                    match d {
                        '\\' => match chars.next().map(|(_, e)| e) {
                            Some('n') => value.push('\n'),
                            Some('t') => value.push('\t'),
                            Some(e) => value.push(e),
                            None => break,
                        },
                        '"' => break,
                        d => value.push(d),
                    }
                }
            }
            _ => {
                while let Some(&(_, d)) = chars.peek() {
                    if d == ',' || d == '}' {
                        break;
                    }
                    value.push(d);
                    chars.next();
                }
                value = value.trim().to_string();
            }
        }
        out.push((name, value));
    }
    out
}

/// The rule tables the rule coder writes to, emptied: the template's rule
/// engine with no rules, a starting point for evolution experiments.
pub fn blank_tables(text: &mut String) -> Result<(), TablesShape> {
    for table in ["TOOL_HINTS", "TOOL_ALIASES", "ID_PREFIXES", "NUMERIC_ARGS"] {
        let (start, end) = table_body(text, table).ok_or(TablesShape::NoTable(table))?;
        text.replace_range(start..end, "");
    }
    Ok(())
}

/// What `tables.rs` lacks for an edit: the harness source was changed by
/// hand (or by an earlier coder) into a shape the rule coder cannot edit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TablesShape {
    /// No `pub static NAME: ... = &[...]` (or no `REGULATION`).
    #[error("{TABLES_FILE} has no table {0}")]
    NoTable(&'static str),
    /// `REGULATION` has no such field.
    #[error("REGULATION has no {0}")]
    NoField(String),
    /// The field is not followed by a value and a comma.
    #[error("{0} has no value")]
    NoValue(String),
}

/// A rule coder failure.
#[derive(Debug, thiserror::Error)]
pub enum RuleCoderError {
    /// `tables.rs` could not be read or written.
    #[error(transparent)]
    Io(#[from] PathError),
    /// `tables.rs` lacks a table or field an edit needs.
    #[error(transparent)]
    Table(#[from] TablesShape),
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

/// The spec's skills as rule edits.
pub fn skill_edits(spec: &ChangeSpec) -> Vec<RuleEdit> {
    spec.skills
        .iter()
        .map(|s| RuleEdit::Skill {
            title: s.title.clone(),
            text: s.text.clone(),
            keywords: s.keywords.clone(),
        })
        .collect()
}

/// Apply every rule of `spec` (its changes' rules and its skills) to
/// `<crate>/src/tables.rs` for `domain` (the short name, e.g. `retail`);
/// returns how many entries changed.
pub fn apply(crate_dir: &Path, spec: &ChangeSpec, domain: &str) -> Result<usize, RuleCoderError> {
    let rules: Vec<RuleEdit> = spec
        .proposed_changes
        .iter()
        .filter_map(|c| c.rule.clone())
        .chain(skill_edits(spec))
        .collect();
    apply_rules(crate_dir, &rules, domain)
}

/// Apply `rules` to `<crate>/src/tables.rs` for `domain`; returns how many
/// entries changed.
pub fn apply_rules(
    crate_dir: &Path,
    rules: &[RuleEdit],
    domain: &str,
) -> Result<usize, RuleCoderError> {
    let path = crate_dir.join(TABLES_FILE);
    let mut text = std::fs::read_to_string(&path).map_err(|e| PathError::new("read", &path, e))?;
    let mut changed = 0;
    for rule in rules {
        changed += usize::from(apply_to_text(&mut text, rule, domain)?);
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
    use crate::spec::RegulationField;

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
    fn skills_are_added_then_edited_in_place_by_title() {
        let mut t = format!(
            "{TABLES}pub static SKILLS: &[Skill] = &[\n    Skill {{\n        domain: \"retail\",\n        title: \"Cancel a pending order\",\n        text: \"old {{text}}\",\n        keywords: \"cancel\",\n    }},\n    Skill {{ domain: \"airline\", title: \"Book\", text: \"b\", keywords: \"book\" }},\n];\n"
        );
        let add = RuleEdit::Skill {
            title: "Return items".into(),
            text: "1. Look up the order. 2. Confirm.".into(),
            keywords: vec!["Return".into(), "refund".into()],
        };
        assert_eq!(apply_to_text(&mut t, &add, "retail"), Ok(true));
        assert!(t.contains("    Skill { domain: \"retail\", title: \"Return items\", text: \"1. Look up the order. 2. Confirm.\", keywords: \"return refund\" },\n];"), "{t}");
        assert_eq!(
            apply_to_text(&mut t, &add, "retail"),
            Ok(false),
            "the same skill again"
        );
        let edit = RuleEdit::Skill {
            title: "Cancel a pending order".into(),
            text: "new".into(),
            keywords: vec!["cancel".into()],
        };
        assert_eq!(apply_to_text(&mut t, &edit, "retail"), Ok(true));
        assert!(!t.contains("old {text}"), "{t}");
        assert_eq!(t.matches("Cancel a pending order").count(), 1, "{t}");
        assert!(
            t.contains("Skill { domain: \"airline\", title: \"Book\""),
            "{t}"
        );
        // The same title in another domain is another skill.
        let other = RuleEdit::Skill {
            title: "Book".into(),
            text: "retail booking".into(),
            keywords: vec![],
        };
        assert_eq!(apply_to_text(&mut t, &other, "retail"), Ok(true));
        assert_eq!(t.matches("title: \"Book\"").count(), 2, "{t}");
    }

    const CONTRACT: &str = r##"
pub static PROMPT_RULES: &[PromptRule] = &[
    PromptRule {
        domain: "dbbench",
        text: "Run SQL only through execute_sql.",
    },
    PromptRule { domain: "retail", text: "Keep the #." },
];
pub static TOOL_HINTS: &[ToolHint] = &[];
pub static SKILLS: &[Skill] = &[];
pub static TOOL_ALIASES: &[ToolAlias] = &[
    ToolAlias { domain: "dbbench", alias: "sql", tool: "execute_sql" },
    ToolAlias { domain: "*", alias: "calculator", tool: "calculate" },
];
pub static ERROR_ADVICE: &[ErrorAdvice] = &[
    // ----- MySQL (dbbench)
    ErrorAdvice {
        contains: "1064 (42000)",
        advice: "not valid MySQL.",
    },
    ErrorAdvice { contains: "", advice: "change the arguments." },
];
pub static REGULATION: Regulation = Regulation {
    repeat_annotate: 2,
    repeat_stop: 6,
    error_streak: 3,
    stall_turns: 10,
};
"##;

    #[test]
    fn prompt_rules_advice_and_thresholds_are_table_edits() {
        let mut t = CONTRACT.to_string();
        let rule = RuleEdit::PromptRule {
            text: "Quote \"values\" compared with TEXT columns.".into(),
        };
        assert_eq!(apply_to_text(&mut t, &rule, "dbbench"), Ok(true));
        assert_eq!(apply_to_text(&mut t, &rule, "dbbench"), Ok(false));
        assert!(t.contains(
            "    PromptRule { domain: \"dbbench\", text: \"Quote \\\"values\\\" compared with TEXT columns.\" },\n];"
        ), "{t}");
        // Advice goes first, so it wins over the general entries...
        let advice = RuleEdit::ErrorAdvice {
            contains: "1054 (42S22)".into(),
            advice: "DESCRIBE the table.".into(),
        };
        assert_eq!(apply_to_text(&mut t, &advice, "dbbench"), Ok(true));
        let at = |needle: &str| t.find(needle).unwrap();
        assert!(at("1054 (42s22)") < at("1064 (42000)"), "{t}");
        assert!(at("1054 (42s22)") > at("pub static ERROR_ADVICE"), "{t}");
        assert_eq!(apply_to_text(&mut t, &advice, "dbbench"), Ok(false));
        // ...and the same error text gets its advice replaced in place.
        let again = RuleEdit::ErrorAdvice {
            contains: "1064 (42000)".into(),
            advice: "use backticks.".into(),
        };
        assert_eq!(apply_to_text(&mut t, &again, "dbbench"), Ok(true));
        assert_eq!(t.matches("1064 (42000)").count(), 1, "{t}");
        assert!(
            t.contains("use backticks.") && !t.contains("not valid MySQL."),
            "{t}"
        );
        let streak = RuleEdit::Regulation {
            field: RegulationField::ErrorStreak,
            value: 2,
        };
        assert_eq!(apply_to_text(&mut t, &streak, "dbbench"), Ok(true));
        assert!(t.contains("error_streak: 2,\n    stall_turns: 10"), "{t}");
        assert_eq!(apply_to_text(&mut t, &streak, "dbbench"), Ok(false));
        let missing = RuleEdit::Regulation {
            field: RegulationField::LowErrorsLeft,
            value: 1,
        };
        assert_eq!(
            apply_to_text(&mut t, &missing, "dbbench"),
            Err(TablesShape::NoField("low_errors_left".into()))
        );
    }

    #[test]
    fn a_domains_entries_are_listed_with_the_shared_ones() {
        let listed = domain_entries(CONTRACT, "dbbench");
        for want in [
            r#"- {"kind":"prompt_rule","text":"Run SQL only through execute_sql."}"#,
            r#"- {"kind":"tool_alias","alias":"calculator","tool":"calculate"}"#,
            r#"- {"kind":"error_advice","contains":"1064 (42000)","advice":"not valid MySQL."}"#,
            r#"- {"kind":"regulation","field":"error_streak","value":3}"#,
            "## tool description hints (tool_hint)\n(none)",
        ] {
            assert!(listed.contains(want), "{want} not in:\n{listed}");
        }
        assert!(
            !listed.contains("Keep the #."),
            "another domain's rule: {listed}"
        );
        // Every listed entry is an edit the coder's reader accepts.
        for line in listed.lines().filter_map(|l| l.strip_prefix("- ")) {
            serde_json::from_str::<RuleEdit>(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        }
    }

    #[test]
    fn a_missing_table_is_an_error() {
        let mut t = "pub const X: &[&str] = &[];".to_string();
        assert!(
            apply_to_text(&mut t, &RuleEdit::NumericArg { arg: "x".into() }, "retail").is_err()
        );
    }
}

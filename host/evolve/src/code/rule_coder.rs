//! The offline rule coder: implements spec items that carry a machine
//! readable [`RuleEdit`] by editing the harness's data-driven rule tables
//! (`src/tables.rs` of `harness-template`). Each edit becomes one entry
//! appended at the end of its table (`PROMPT_RULES`, `TOOL_HINTS`,
//! `TOOL_ALIASES`, `ID_PREFIXES`, `NUMERIC_ARGS`, `SKILLS`), in the table's
//! own struct syntax, unless an entry with the same key is already there;
//! error advice goes *first* in `ERROR_ADVICE` (its first match wins);
//! thresholds are fields of `REGULATION` and have their value replaced. The
//! realization primitives (`FINISH_HOLDS`, `FINISH_AFTER_ERRORS`,
//! `NAME_REPAIRS`, empty in the template) get an entry appended, or their
//! entry for the same key (tool; tool, argument and `before`) in the domain
//! rewritten, as skills are by title.
//! Changes with no rule (prose only) are left to an LLM coder, or to the
//! table coder ([`crate::code::tables`]), which asks a model for these
//! same edits. [`RuleCoder`] is this coder behind the [`Coder`] trait.

use std::path::Path;
use std::time::Duration;

use crate::code::{
    Coder, CoderError, CoderFuture, CoderOutcome, CoderTask, Snapshot, TABLES_FILE, src_diff,
};
use crate::diagnose::change_spec::{ChangeSpec, RuleEdit};
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
        RuleEdit::HoldFinish {
            tool,
            argument,
            exempt,
            feedback,
        } => (
            "FINISH_HOLDS",
            format!("tool: {}", lit(tool)),
            format!(
                "    FinishHold {{ domain: {d}, tool: {}, argument: {}, exempt: &[{}], feedback: {} }},",
                lit(tool),
                lit(argument),
                exempt.iter().map(|e| lit(e)).collect::<Vec<_>>().join(", "),
                lit(feedback)
            ),
        ),
        RuleEdit::RefuseFinishAfterError { tool, feedback } => (
            "FINISH_AFTER_ERRORS",
            format!("tool: {}", lit(tool)),
            format!(
                "    FinishAfterError {{ domain: {d}, tool: {}, feedback: {} }},",
                lit(tool),
                lit(feedback)
            ),
        ),
        RuleEdit::RepairNames {
            tool,
            argument,
            before,
            after,
            separator,
            quote,
            bare,
        } => (
            "NAME_REPAIRS",
            format!(
                "tool: {}, argument: {}, before: {}",
                lit(tool),
                lit(argument),
                lit(before)
            ),
            format!(
                "    NameRepair {{ domain: {d}, tool: {}, argument: {}, before: {}, after: {}, separator: {}, quote: {}, bare: {} }},",
                lit(tool),
                lit(argument),
                lit(before),
                lit(after),
                lit(separator),
                lit(quote),
                lit(bare)
            ),
        ),
    }
}

/// The struct of the tables whose entries an edit rewrites by key (in its
/// domain) instead of only appending.
fn keyed_struct(edit: &RuleEdit) -> Option<&'static str> {
    match edit {
        RuleEdit::Skill { .. } => Some("Skill"),
        RuleEdit::HoldFinish { .. } => Some("FinishHold"),
        RuleEdit::RefuseFinishAfterError { .. } => Some("FinishAfterError"),
        RuleEdit::RepairNames { .. } => Some("NameRepair"),
        _ => None,
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
    if let Some(name) = keyed_struct(edit) {
        // An entry with the same key (in this domain) is edited in place.
        let mut from = start;
        while let Some((a, b)) = entry_around(text, from, end, &key, name) {
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
    if keyed_struct(edit).is_none()
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
    const TABLES: [Table; 8] = [
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
        (
            "FINISH_HOLDS",
            "FinishHold",
            "hold_finish",
            "finishing calls held until the reply's results are read",
            &[
                ("tool", "tool"),
                ("argument", "argument"),
                ("exempt", "exempt"),
                ("feedback", "feedback"),
            ],
        ),
        (
            "FINISH_AFTER_ERRORS",
            "FinishAfterError",
            "refuse_finish_after_error",
            "finishing calls refused right after a failed call",
            &[("tool", "tool"), ("feedback", "feedback")],
        ),
        (
            "NAME_REPAIRS",
            "NameRepair",
            "repair_names",
            "names the task states, repaired in arguments",
            &[
                ("tool", "tool"),
                ("argument", "argument"),
                ("before", "before"),
                ("after", "after"),
                ("separator", "separator"),
                ("quote", "quote"),
                ("bare", "bare"),
            ],
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
                    } else if *key == "exempt" {
                        serde_json::Value::from(
                            v.split(LIST_SEPARATOR)
                                .filter(|e| !e.is_empty())
                                .collect::<Vec<_>>(),
                        )
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
            if crate::diagnose::change_spec::RegulationField::ALL
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

/// What joins the strings of a list field (`exempt: &["A", "B"]`) in
/// [`struct_fields`]'s value: a character no table text holds.
const LIST_SEPARATOR: char = '\u{1f}';

/// The `name: value` fields of a struct literal's body, string literals
/// unescaped (as Rust reads them), a list of string literals as its strings
/// joined by [`LIST_SEPARATOR`], other values as written.
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
                read_string(&mut chars, &mut value);
            }
            Some('&') => {
                // A list of string literals, up to its closing bracket.
                let mut items: Vec<String> = Vec::new();
                while let Some((_, d)) = chars.next() {
                    match d {
                        '"' => {
                            let mut item = String::new();
                            read_string(&mut chars, &mut item);
                            items.push(item);
                        }
                        ']' => break,
                        _ => {}
                    }
                }
                value = items.join(&LIST_SEPARATOR.to_string());
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

/// Reads a string literal's text after its opening quote, unescaped, up to
/// and including its closing quote.
fn read_string(chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>, value: &mut String) {
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
    /// A file of edits is not the JSON it should be.
    #[error("{file}: not a list of rule edits: {reason}")]
    Edits {
        /// The file.
        file: String,
        /// The parser's message.
        reason: String,
    },
}

impl From<RuleCoderError> for crate::train::TrainError {
    fn from(e: RuleCoderError) -> Self {
        match e {
            RuleCoderError::Io(p) => crate::train::TrainError::Io(p),
            RuleCoderError::Table(m) => crate::train::TrainError::Io(PathError::new(
                "edit",
                Path::new(TABLES_FILE),
                std::io::Error::other(m),
            )),
            RuleCoderError::Edits { file, reason } => crate::train::TrainError::Io(PathError::new(
                "parse",
                Path::new(&file),
                std::io::Error::other(reason),
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

/// Rule edits a person chose for one domain, as in
/// `scripts/hand-configured/*.json`: `{"domain": short name, "notes": [why,
/// …], "edits": [rule edit, …]}`. Applied like a coder's edits, they make
/// the hand-configured baseline that training's own edits are measured
/// against.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct HandConfigured {
    /// The short domain name the edits are for (`dbbench`).
    pub domain: String,
    /// Why each edit is there, for the reader.
    #[serde(default)]
    pub notes: Vec<String>,
    /// The edits.
    pub edits: Vec<RuleEdit>,
}

impl HandConfigured {
    /// Read a file of hand-configured edits.
    pub fn read(path: &Path) -> Result<HandConfigured, RuleCoderError> {
        let text = std::fs::read_to_string(path).map_err(|e| PathError::new("read", path, e))?;
        serde_json::from_str(&text).map_err(|e| RuleCoderError::Edits {
            file: path.display().to_string(),
            reason: e.to_string(),
        })
    }

    /// Apply the edits to `<crate>/src/tables.rs`; how many entries changed.
    pub fn apply(&self, crate_dir: &Path) -> Result<usize, RuleCoderError> {
        apply_rules(crate_dir, &self.edits, &self.domain)
    }
}

/// The rule coder as a [`Coder`]: [`apply`] on the staging crate, for the
/// domain of the task's [`crate::code::CoderContext`]. It reads no prose
/// ([`Coder::reads_prose`]), so a spec whose changes carry no rule leaves
/// the tables as they were: an outcome with no changed file, not an error.
#[derive(Debug, Clone, Default)]
pub struct RuleCoder {
    /// Waited before each edit: offline experiments model an LLM coder's
    /// time with it (`--coder-latency-ms`).
    latency: Duration,
}

impl RuleCoder {
    /// A rule coder that waits `latency` before each edit.
    pub fn new(latency: Duration) -> Self {
        RuleCoder { latency }
    }
}

impl Coder for RuleCoder {
    fn name(&self) -> &str {
        "rules"
    }

    fn reads_prose(&self) -> bool {
        false
    }

    fn implement<'a>(&'a self, task: &'a CoderTask, staging: &'a Path) -> CoderFuture<'a> {
        Box::pin(async move {
            if !self.latency.is_zero() {
                tokio::time::sleep(self.latency).await;
            }
            let domain = task
                .context
                .as_ref()
                .map(|c| c.domain.as_str())
                .ok_or(CoderError::NoDomain)?;
            let before = Snapshot::take(staging)?;
            let n = apply(staging, &task.spec, domain).map_err(CoderError::RuleTables)?;
            let (diff, _) = src_diff(&before, &Snapshot::take(staging)?);
            Ok(CoderOutcome {
                diff,
                changed_files: if n > 0 {
                    vec![TABLES_FILE.into()]
                } else {
                    vec![]
                },
                attempts: 1,
                build_ok: false,
                log: format!("{n} table entr(ies) changed"),
            })
        })
    }
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
    use crate::diagnose::change_spec::RegulationField;

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

    /// The primitives' tables as the template declares them: empty.
    const PRIMITIVES: &str = r##"
pub static FINISH_HOLDS: &[FinishHold] = &[];

pub static FINISH_AFTER_ERRORS: &[FinishAfterError] = &[];

pub static NAME_REPAIRS: &[NameRepair] = &[];
"##;

    fn hold(exempt: &[&str]) -> RuleEdit {
        RuleEdit::HoldFinish {
            tool: "commit_final_answer".into(),
            argument: "query".into(),
            exempt: exempt.iter().map(|e| e.to_string()).collect(),
            feedback: String::new(),
        }
    }

    fn headers(quote: &str) -> RuleEdit {
        RuleEdit::RepairNames {
            tool: "execute_sql".into(),
            argument: "query".into(),
            before: "the headers of this table are ".into(),
            after: ".\n".into(),
            separator: ",".into(),
            quote: quote.into(),
            bare: "_$".into(),
        }
    }

    #[test]
    fn primitive_edits_fill_their_empty_tables_and_are_rewritten_by_key() {
        let mut t = PRIMITIVES.to_string();
        assert_eq!(
            apply_to_text(&mut t, &hold(&["INSERT"]), "dbbench"),
            Ok(true)
        );
        assert!(t.contains("pub static FINISH_HOLDS: &[FinishHold] = &[\n    FinishHold { domain: \"dbbench\", tool: \"commit_final_answer\", argument: \"query\", exempt: &[\"INSERT\"], feedback: \"\" },\n];"), "{t}");
        assert_eq!(
            apply_to_text(&mut t, &hold(&["INSERT"]), "dbbench"),
            Ok(false),
            "the same entry again"
        );
        // The same tool's hold gets its exemptions rewritten in place; in
        // another domain it is another entry.
        assert_eq!(
            apply_to_text(&mut t, &hold(&["INSERT", "UPDATE"]), "dbbench"),
            Ok(true)
        );
        assert!(t.contains("exempt: &[\"INSERT\", \"UPDATE\"]"), "{t}");
        assert_eq!(t.matches("FinishHold {").count(), 1, "{t}");
        assert_eq!(apply_to_text(&mut t, &hold(&[]), "airline"), Ok(true));
        assert!(t.contains("domain: \"airline\", tool: \"commit_final_answer\", argument: \"query\", exempt: &[]"), "{t}");
        assert_eq!(t.matches("FinishHold {").count(), 2, "{t}");
        let refuse = RuleEdit::RefuseFinishAfterError {
            tool: "commit_final_answer".into(),
            feedback: "Read the \"error\" first.".into(),
        };
        assert_eq!(apply_to_text(&mut t, &refuse, "dbbench"), Ok(true));
        assert!(t.contains("    FinishAfterError { domain: \"dbbench\", tool: \"commit_final_answer\", feedback: \"Read the \\\"error\\\" first.\" },\n];"), "{t}");
        assert_eq!(apply_to_text(&mut t, &refuse, "dbbench"), Ok(false));
        // Names: keyed by tool, argument and where the names are read.
        assert_eq!(apply_to_text(&mut t, &headers("`"), "dbbench"), Ok(true));
        assert!(t.contains("    NameRepair { domain: \"dbbench\", tool: \"execute_sql\", argument: \"query\", before: \"the headers of this table are \", after: \".\\n\", separator: \",\", quote: \"`\", bare: \"_$\" },\n];"), "{t}");
        assert_eq!(apply_to_text(&mut t, &headers("\""), "dbbench"), Ok(true));
        assert!(t.contains("quote: \"\\\"\""), "{t}");
        assert_eq!(t.matches("NameRepair {").count(), 1, "{t}");
        // What is written is listed back to a coder as the edits it is.
        let listed = domain_entries(&t, "dbbench");
        for want in [
            r#"- {"kind":"hold_finish","tool":"commit_final_answer","argument":"query","exempt":["INSERT","UPDATE"],"feedback":""}"#,
            r#"- {"kind":"refuse_finish_after_error","tool":"commit_final_answer","feedback":"Read the \"error\" first."}"#,
            r#"- {"kind":"repair_names","tool":"execute_sql","argument":"query","before":"the headers of this table are ","after":".\n","separator":",","quote":"\"","bare":"_$"}"#,
        ] {
            assert!(listed.contains(want), "{want} not in:\n{listed}");
        }
        for line in listed.lines().filter_map(|l| l.strip_prefix("- ")) {
            serde_json::from_str::<RuleEdit>(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        }
        assert!(
            domain_entries(PRIMITIVES, "dbbench").contains("(hold_finish)\n(none)"),
            "an empty table is listed as empty"
        );
    }

    /// A copy of harness-template beside a copy of `wit/` (the crate binds
    /// `../wit`), in a temporary directory.
    fn template_copy() -> (tempfile::TempDir, std::path::PathBuf) {
        fn copy(from: &Path, to: &Path) {
            std::fs::create_dir_all(to).unwrap();
            for entry in std::fs::read_dir(from).unwrap().flatten() {
                let name = entry.file_name();
                if name == "target" || name.to_string_lossy().starts_with('.') {
                    continue;
                }
                let (src, dst) = (entry.path(), to.join(&name));
                if src.is_dir() {
                    copy(&src, &dst);
                } else {
                    std::fs::copy(&src, &dst).unwrap();
                }
            }
        }
        let root = ecdysis_testkit::repo_root();
        let dir = tempfile::tempdir().unwrap();
        let crate_dir = dir.path().join("harness");
        copy(&root.join("harness-template"), &crate_dir);
        copy(&root.join("wit"), &dir.path().join("wit"));
        (dir, crate_dir)
    }

    /// Build a crate as a coder's candidate is built (the wasm component,
    /// in the warm target directory harness builds share); the errors when
    /// it does not build.
    fn build(crate_dir: &Path) -> Result<(), String> {
        let target = std::env::var_os(ecdysis_sandbox::store::TARGET_DIR_ENV)
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| ecdysis_testkit::repo_root().join("target/tmp/evolve-llm-harness"));
        let check = crate::code::check_build(
            crate_dir,
            Some(&target),
            &ecdysis_sandbox::store::Trust::Own,
        )
        .map_err(|e| e.to_string())?;
        if check.ok { Ok(()) } else { Err(check.errors) }
    }

    #[test]
    fn every_primitive_renders_into_a_template_that_builds() {
        let (_dir, crate_dir) = template_copy();
        let tables = crate_dir.join(TABLES_FILE);
        let before = std::fs::read_to_string(&tables).unwrap();
        let feedback = "Read the results above, then call {tool} again.";
        let dbbench = [
            hold(&["INSERT", "UPDATE", "DELETE"]),
            RuleEdit::RefuseFinishAfterError {
                tool: "commit_final_answer".into(),
                feedback: feedback.into(),
            },
            headers("`"),
        ];
        assert_eq!(apply_rules(&crate_dir, &dbbench, "dbbench").unwrap(), 3);
        // Other domains, texts with quotes, escapes and braces.
        let os = [RuleEdit::RepairNames {
            tool: "bash_action".into(),
            argument: "script".into(),
            before: "\"".into(),
            after: "\"".into(),
            separator: String::new(),
            quote: "'".into(),
            bare: "_./-+".into(),
        }];
        assert_eq!(apply_rules(&crate_dir, &os, "os").unwrap(), 1);
        let airline = [
            RuleEdit::HoldFinish {
                tool: "transfer_to_human_agents".into(),
                argument: String::new(),
                exempt: vec![],
                feedback: "Read what {calls} said \\ before {tool}.".into(),
            },
            RuleEdit::RefuseFinishAfterError {
                tool: "transfer_to_human_agents".into(),
                feedback: String::new(),
            },
        ];
        assert_eq!(apply_rules(&crate_dir, &airline, "airline").unwrap(), 2);
        let after = std::fs::read_to_string(&tables).unwrap();
        assert_ne!(before, after);
        for table in ["FINISH_HOLDS", "FINISH_AFTER_ERRORS", "NAME_REPAIRS"] {
            let (start, end) = table_body(&after, table).unwrap();
            assert!(!after[start..end].trim().is_empty(), "{table} stayed empty");
        }
        build(&crate_dir).unwrap_or_else(|e| panic!("the rendered tables do not build:\n{e}"));
    }

    /// The rule coder behind [`Coder`] writes what [`apply`] writes, names
    /// the tables file only when an entry changed, and needs the domain.
    #[tokio::test]
    async fn the_rule_coder_as_a_coder_applies_the_spec_rules() {
        let (_dir, crate_dir) = template_copy();
        let spec = ChangeSpec {
            failure_patterns: vec![],
            proposed_changes: vec![crate::diagnose::change_spec::ProposedChange {
                layer: crate::diagnose::change_spec::Layer::Realize,
                file: TABLES_FILE.into(),
                description: "alias".into(),
                rationale: "an unknown tool name".into(),
                evidence_tasks: vec![],
                rule: Some(RuleEdit::ToolAlias {
                    alias: "fetch_the_order".into(),
                    tool: "get_order_details".into(),
                }),
                instance_specific: false,
            }],
            skills: vec![],
            implementation_notes: String::new(),
        };
        let coder = RuleCoder::default();
        assert_eq!(coder.name(), "rules");
        assert!(!coder.reads_prose());
        let task = CoderTask::new(spec.clone());
        assert!(matches!(
            coder.implement(&task, &crate_dir).await,
            Err(CoderError::NoDomain)
        ));
        let task = task.with_context("retail", vec![]);
        let first = coder.implement(&task, &crate_dir).await.unwrap();
        assert_eq!(first.changed_files, vec![TABLES_FILE.to_string()]);
        assert_eq!(first.log, "1 table entr(ies) changed");
        assert!(first.diff.contains("fetch_the_order"), "{}", first.diff);
        // The entry is there now: nothing to write is an outcome, not an error.
        let again = coder.implement(&task, &crate_dir).await.unwrap();
        assert!(again.changed_files.is_empty());
        assert_eq!(again.log, "0 table entr(ies) changed");
        assert_eq!(apply(&crate_dir, &spec, "retail").unwrap(), 0);
    }

    #[test]
    fn the_dbbench_hand_configured_baseline_renders_and_builds() {
        let file = ecdysis_testkit::repo_root().join("scripts/hand-configured/tables-dbbench.json");
        let hand = HandConfigured::read(&file).unwrap();
        assert_eq!(hand.domain, "dbbench");
        // What the diagnosis calls for: the same-reply commit held except
        // after writes, the commit after an error refused, names repaired.
        assert!(hand.edits.iter().any(|e| matches!(e,
            RuleEdit::HoldFinish { tool, exempt, .. }
                if tool == "commit_final_answer" && ["INSERT", "UPDATE", "DELETE"].iter().all(|w| exempt.iter().any(|x| x == w)))));
        assert!(hand.edits.iter().any(|e| matches!(e,
            RuleEdit::RefuseFinishAfterError { tool, .. } if tool == "commit_final_answer")));
        assert!(hand.edits.iter().any(|e| matches!(e,
            RuleEdit::RepairNames { tool, before, .. }
                if tool == "execute_sql" && before == "The name of this table is ")));
        let (_dir, crate_dir) = template_copy();
        assert_eq!(hand.apply(&crate_dir).unwrap(), hand.edits.len());
        assert_eq!(
            hand.apply(&crate_dir).unwrap(),
            0,
            "applied twice, nothing new"
        );
        build(&crate_dir).unwrap_or_else(|e| panic!("the baseline does not build:\n{e}"));
        // A file that is not edits names itself.
        let bad = crate_dir.join("bad.json");
        std::fs::write(
            &bad,
            r#"{"domain": "dbbench", "edits": [{"kind": "nope"}]}"#,
        )
        .unwrap();
        let err = HandConfigured::read(&bad).unwrap_err().to_string();
        assert!(err.contains("bad.json"), "{err}");
    }

    #[test]
    fn a_missing_table_is_an_error() {
        let mut t = "pub const X: &[&str] = &[];".to_string();
        assert!(
            apply_to_text(&mut t, &RuleEdit::NumericArg { arg: "x".into() }, "retail").is_err()
        );
    }
}

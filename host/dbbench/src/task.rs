//! DBBench tasks: read from `data/dbbench/{standard,dev}.jsonl`, split,
//! and turned into the original's opening prompt.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::sql::TableSpec;
use ecdysis_env::EnvError;
use ecdysis_pyemu::{Val, repr};

/// The data files, relative to the data folder.
pub const FILES: &[(&str, &str)] = &[("standard", "standard.jsonl"), ("dev", "dev.jsonl")];

/// Environment variable naming the DBBench data folder.
pub const DATA_ENV_VAR: &str = "ECDYSIS_DBBENCH_DATA";

/// The seed of the train/test split of `standard` (see [`split_standard`]).
pub const SPLIT_SEED: u64 = 0;

/// Task types whose score is the table hash.
pub const MODIFYING: &[&str] = &["INSERT", "DELETE", "UPDATE"];

/// One DBBench task.
#[derive(Clone, Debug)]
pub struct Task {
    /// `standard-17`, `dev-3`: file and 0-based line.
    pub id: String,
    /// `standard` or `dev`.
    pub file: &'static str,
    /// `type[0]`: `other`, `counting`, ..., `INSERT`, `UPDATE`.
    pub kind: String,
    /// The opening user message, as the original builds it.
    pub prompt: String,
    /// The task's table(s).
    pub tables: Vec<TableSpec>,
    /// The answer list (SELECT-class) or the gold statement (INSERT/UPDATE).
    pub label: Value,
    /// The table hash after the gold statement, as the client printed it.
    pub answer_md5: Option<String>,
    /// The gold SQL: `sql.query` for SELECT-class tasks (often SQLite
    /// dialect), the label's statement for INSERT/UPDATE.
    pub gold_sql: Option<String>,
    /// `source`: wikisql, wikitq, hybridqa, fetaqa, sqa.
    pub source: String,
}

impl Task {
    /// Why MySQL refuses to create this task's table, by its identifier
    /// rules (an empty name, or one ending in a space, error 1166/1103):
    /// the original then ends the task as a task error (0) before the
    /// agent acts. Only `dev-5` (an empty column name) in the data.
    pub fn setup_error(&self) -> Option<String> {
        for t in &self.tables {
            if t.name.is_empty() || t.name.ends_with(' ') {
                return Some(format!("1103 (42000): Incorrect table name '{}'", t.name));
            }
            if let Some(c) = t.columns.iter().find(|c| c.is_empty() || c.ends_with(' ')) {
                return Some(format!("1166 (42000): Incorrect column name '{c}'"));
            }
        }
        None
    }

    /// Whether the score is the table hash.
    pub fn is_modifying(&self) -> bool {
        MODIFYING.contains(&self.kind.as_str())
    }
}

fn format_err(file: &str, line: usize, reason: impl std::fmt::Display) -> EnvError {
    EnvError::Format {
        file: format!("data/dbbench/{file}, line {}", line + 1),
        reason: reason.to_string(),
    }
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

/// The original's user prompt.
fn prompt(entry: &Value) -> String {
    let mut p = String::new();
    if let Some(e) = text(entry, "evidence").filter(|e| !e.is_empty()) {
        p.push_str(&format!("Evidence about the question: {e}\n"));
    }
    if let Some(d) = text(entry, "add_description").filter(|d| !d.is_empty()) {
        p.push_str(&format!(
            "Additional table information about the question: {d}\n"
        ));
    }
    p.push_str(&format!(
        "Question: {}\n",
        text(entry, "description").unwrap_or_default()
    ));
    p
}

fn table(v: &Value) -> Option<TableSpec> {
    let info = v.get("table_info")?;
    Some(TableSpec {
        name: v.get("table_name")?.as_str()?.to_string(),
        columns: info
            .get("columns")?
            .as_array()?
            .iter()
            .map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
            .collect::<Option<_>>()?,
        // `str(cell)` for every cell.
        rows: info
            .get("rows")?
            .as_array()?
            .iter()
            .map(|r| {
                r.as_array().map(|cells| {
                    cells
                        .iter()
                        .map(|c| repr::to_str(&Val::from_json(c)))
                        .collect()
                })
            })
            .collect::<Option<_>>()?,
    })
}

/// Parses one data file.
pub fn parse(file: &'static str, text_: &str) -> Result<Vec<Task>, EnvError> {
    let mut tasks = Vec::new();
    for (i, line) in text_.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let entry: Value = serde_json::from_str(line).map_err(|e| format_err(file, i, e))?;
        let kind = entry
            .get("type")
            .and_then(|t| t.get(0))
            .and_then(Value::as_str)
            .ok_or_else(|| format_err(file, i, "no `type` list"))?
            .to_string();
        let tables = match entry.get("table") {
            Some(Value::Array(ts)) => ts.iter().map(table).collect::<Option<Vec<_>>>(),
            Some(t) => table(t).map(|t| vec![t]),
            None => None,
        }
        .ok_or_else(|| format_err(file, i, "malformed `table`"))?;
        let label = entry.get("label").cloned().unwrap_or(Value::Null);
        let modifying = MODIFYING.contains(&kind.as_str());
        let answer_md5 = text(&entry, "answer_md5");
        if modifying && answer_md5.is_none() {
            return Err(format_err(
                file,
                i,
                "an INSERT/UPDATE task without `answer_md5`",
            ));
        }
        let gold_sql = if modifying {
            label.get(0).and_then(Value::as_str).map(str::to_string)
        } else {
            entry
                .get("sql")
                .and_then(|s| s.get("query"))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        tasks.push(Task {
            id: format!("{file}-{i}"),
            file,
            kind,
            prompt: prompt(&entry),
            tables,
            label,
            answer_md5,
            gold_sql,
            source: text(&entry, "source").unwrap_or_default(),
        });
    }
    Ok(tasks)
}

/// The DBBench data folder: `flag`, else `$ECDYSIS_DBBENCH_DATA`, else
/// `data/dbbench` in the current directory or a parent, else the copy in
/// this source tree.
pub fn locate(flag: Option<&Path>) -> Result<PathBuf, EnvError> {
    let holds = |p: &Path| FILES.iter().all(|(_, f)| p.join(f).is_file());
    if let Some(p) = flag.map(Path::to_path_buf).or_else(|| {
        std::env::var_os(DATA_ENV_VAR)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }) {
        return if holds(&p) {
            Ok(p)
        } else {
            Err(EnvError::Format {
                file: p.display().to_string(),
                reason: format!(
                    "not a DBBench data folder (needs {})",
                    FILES
                        .iter()
                        .map(|(_, f)| *f)
                        .collect::<Vec<_>>()
                        .join(" and ")
                ),
            })
        };
    }
    let mut looked = Vec::new();
    let starts = std::env::current_dir()
        .into_iter()
        .chain([PathBuf::from(env!("CARGO_MANIFEST_DIR"))]);
    for start in starts {
        for dir in start.ancestors() {
            let candidate = dir.join("data/dbbench");
            if holds(&candidate) {
                return Ok(candidate);
            }
        }
        looked.push(format!(
            "data/dbbench in {} and its parents",
            start.display()
        ));
    }
    Err(EnvError::Format {
        file: "data/dbbench".into(),
        reason: format!(
            "DBBench data not found (looked for {} in: {}); set ${DATA_ENV_VAR}",
            FILES.iter().map(|(_, f)| *f).collect::<Vec<_>>().join(", "),
            looked.join("; ")
        ),
    })
}

/// Loads every task of both files.
pub fn load(dir: &Path) -> Result<Vec<Task>, EnvError> {
    let mut all = Vec::new();
    for (name, file) in FILES {
        let path = dir.join(file);
        let text_ =
            std::fs::read_to_string(&path).map_err(|source| EnvError::Io { path, source })?;
        all.extend(parse(name, &text_)?);
    }
    Ok(all)
}

/// The seeded train/test split of `standard` for evolution: within each
/// task type, tasks are ordered by `blake3("dbbench-split/<seed>/<id>")`
/// and the first half (rounded down) goes to `train`, the rest to `test`
/// (148/152 for the 300 tasks: each type with an odd count gives its extra
/// task to `test`; every type on both sides).
pub fn split_standard(tasks: &[Task], seed: u64) -> (Vec<String>, Vec<String>) {
    ecdysis_env::seeded_halves(
        tasks
            .iter()
            .filter(|t| t.file == "standard")
            .map(|t| (t.kind.as_str(), t.id.as_str())),
        "dbbench-split",
        seed,
    )
}

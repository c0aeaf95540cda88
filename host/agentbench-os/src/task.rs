//! OS-interaction tasks: read from `data/agentbench-os/data/<group>/*.json`
//! and `data/dev.json`, their scripts resolved from `scripts/<group>/`, and
//! split.
//!
//! A task file holds a JSON list of tasks (or one task). A script is a
//! string of bash, `{"code": ..., "language"?: ...}` or `{"file": ...,
//! "language"?: ...}` (a path under the group's script folder). The
//! evaluation is either `match` (the stripped answer equals a string) or
//! `check`: scripts run in order after the episode, a `null` entry standing
//! for the task's `example` script, each given the answer and the stdout of
//! the ones before it; all must exit 0. When both are given, `match` wins,
//! as upstream's loader decides.

use std::path::{Path, PathBuf};

use serde_json::Value;

use ecdysis_env::EnvError;

/// Environment variable naming the data folder.
pub const DATA_ENV_VAR: &str = "ECDYSIS_AGENTBENCH_OS_DATA";

/// The standard groups (`std-001` … `std-007`), in upstream's order.
pub const GROUPS: [u8; 7] = [1, 2, 3, 4, 5, 6, 7];

/// The seed of the train/test split of the standard tasks.
pub const SPLIT_SEED: u64 = 0;

/// The language a script is run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Language {
    /// `bash -c <code> -- <params...>`: `$1` is the first parameter.
    Bash,
    /// `python3 -c <code> <params...>`: `argv[1]` is the first parameter.
    Python,
}

/// A script of a task (init, start, example or check).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Script {
    /// How it runs.
    pub language: Language,
    /// Its text.
    pub code: String,
}

/// How an episode's answer is judged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judge {
    /// The answer (stripped when `strip`) equals `answer`.
    Match {
        /// The expected answer.
        answer: String,
        /// Strip the agent's answer first (upstream: always, for the data's
        /// plain-string form).
        strip: bool,
    },
    /// Every script exits 0; `None` entries run the example script.
    Check {
        /// The scripts, in order.
        steps: Vec<Option<Script>>,
        /// The task's reference solution (also what the gold replay runs).
        example: Option<Script>,
    },
}

/// One OS-interaction task.
#[derive(Clone, Debug)]
pub struct Task {
    /// `std-004-Q30-00003`, `dev-00010`: upstream's sample name (group,
    /// file stem, index in the file).
    pub id: String,
    /// `std-001` … `std-007`, or `dev`.
    pub group: String,
    /// What the agent is asked.
    pub description: String,
    /// Scripts run before the episode, each as its own process (as root,
    /// in `/root`); a failing one ends the task before the agent acts.
    pub init: Vec<Script>,
    /// Typed into the agent's shell before its first command (its effects
    /// on directory, variables and user persist).
    pub start: Option<Script>,
    /// How the answer is judged.
    pub judge: Judge,
    /// The reference solution when the task has one (the `example`
    /// script; match tasks may carry one too).
    pub example: Option<Script>,
    /// Upstream's labels (not used in scoring).
    pub labels: Vec<String>,
}

fn format_err(file: &str, what: impl std::fmt::Display) -> EnvError {
    EnvError::Format {
        file: file.to_string(),
        reason: what.to_string(),
    }
}

fn language(v: &Value, file: &str) -> Result<Language, EnvError> {
    match v.get("language").and_then(Value::as_str).unwrap_or("bash") {
        "bash" => Ok(Language::Bash),
        "python" => Ok(Language::Python),
        other => Err(format_err(
            file,
            format!("script language `{other}` (only bash and python are run)"),
        )),
    }
}

/// Reads one script entry; `scripts` is the group's script folder.
fn script(v: &Value, scripts: &Path, file: &str) -> Result<Script, EnvError> {
    match v {
        Value::String(code) => Ok(Script {
            language: Language::Bash,
            code: code.clone(),
        }),
        Value::Object(o) => {
            let language = language(v, file)?;
            if let Some(code) = o.get("code").and_then(Value::as_str) {
                return Ok(Script {
                    language,
                    code: code.to_string(),
                });
            }
            let rel = o
                .get("file")
                .and_then(Value::as_str)
                .ok_or_else(|| format_err(file, format!("a script without code or file: {v}")))?;
            if Path::new(rel)
                .components()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
            {
                return Err(format_err(
                    file,
                    format!("script path `{rel}` leaves its folder"),
                ));
            }
            let path = scripts.join(rel);
            let code =
                std::fs::read_to_string(&path).map_err(|source| EnvError::Io { path, source })?;
            Ok(Script { language, code })
        }
        other => Err(format_err(file, format!("not a script: {other}"))),
    }
}

/// `x` or `[x, ...]` as a list.
fn listed(v: &Value) -> Vec<&Value> {
    match v {
        Value::Array(items) => items.iter().collect(),
        one => vec![one],
    }
}

/// Parses one task object.
fn parse_task(
    v: &Value,
    id: String,
    group: &str,
    scripts: &Path,
    file: &str,
) -> Result<Task, EnvError> {
    let here = format!("{file} ({id})");
    let description = v
        .get("description")
        .and_then(Value::as_str)
        .ok_or_else(|| format_err(&here, "no `description`"))?
        .to_string();
    // Upstream reads `create.init` only from an object; a list-valued
    // `create` (one task of group 5 has one) means no init.
    let init = match v
        .get("create")
        .and_then(Value::as_object)
        .and_then(|c| c.get("init"))
    {
        Some(init) => listed(init)
            .into_iter()
            .map(|s| script(s, scripts, &here))
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    let start = v
        .get("start")
        .map(|s| script(s, scripts, &here))
        .transpose()?;
    let evaluation = v
        .get("evaluation")
        .ok_or_else(|| format_err(&here, "no `evaluation`"))?;
    let example = evaluation
        .get("example")
        .map(|s| script(s, scripts, &here))
        .transpose()?;
    let judge = if let Some(m) = evaluation.get("match") {
        match m {
            Value::String(answer) => Judge::Match {
                answer: answer.clone(),
                strip: true,
            },
            Value::Object(o) => Judge::Match {
                answer: o
                    .get("answer")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format_err(&here, "`match` without `answer`"))?
                    .to_string(),
                strip: o.get("strip").and_then(Value::as_bool).unwrap_or(true),
            },
            other => return Err(format_err(&here, format!("unsupported `match`: {other}"))),
        }
    } else if let Some(check) = evaluation.get("check") {
        let steps: Vec<Option<Script>> = listed(check)
            .into_iter()
            .map(|s| match s {
                Value::Null => Ok(None),
                s => script(s, scripts, &here).map(Some),
            })
            .collect::<Result<_, _>>()?;
        if steps.iter().any(Option::is_none) && example.is_none() {
            return Err(format_err(
                &here,
                "a `null` check step but no `example` script",
            ));
        }
        Judge::Check {
            steps,
            example: example.clone(),
        }
    } else {
        return Err(format_err(
            &here,
            "`evaluation` has neither `match` nor `check`",
        ));
    };
    let labels = v
        .get("labels")
        .and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    Ok(Task {
        id,
        group: group.to_string(),
        description,
        init,
        start,
        judge,
        example,
        labels,
    })
}

/// Parses one task file of `group` (its text), naming the tasks
/// `<prefix><stem>-<index>`.
fn parse_file(
    text: &str,
    rel: &str,
    prefix: &str,
    group: &str,
    scripts: &Path,
) -> Result<Vec<Task>, EnvError> {
    let v: Value = serde_json::from_str(text).map_err(|e| format_err(rel, e))?;
    let stem = Path::new(rel)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    listed(&v)
        .into_iter()
        .enumerate()
        .map(|(i, t)| parse_task(t, format!("{prefix}{stem}-{i:05}"), group, scripts, rel))
        .collect()
}

/// The data folder: `flag`, else `$ECDYSIS_AGENTBENCH_OS_DATA`, else
/// `data/agentbench-os` in the current directory or a parent, else the copy
/// in this source tree.
pub fn locate(flag: Option<&Path>) -> Result<PathBuf, EnvError> {
    let holds = |p: &Path| p.join("data/1").is_dir() && p.join("scripts").is_dir();
    if let Some(p) = flag.map(Path::to_path_buf).or_else(|| {
        std::env::var_os(DATA_ENV_VAR)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }) {
        return if holds(&p) {
            Ok(p)
        } else {
            Err(format_err(
                &p.display().to_string(),
                "not an OS-interaction data folder (needs data/1 … data/7 and scripts/)",
            ))
        };
    }
    let starts = std::env::current_dir()
        .into_iter()
        .chain([PathBuf::from(env!("CARGO_MANIFEST_DIR"))]);
    let mut looked = Vec::new();
    for start in starts {
        if let Some(found) = start
            .ancestors()
            .map(|d| d.join("data/agentbench-os"))
            .find(|c| holds(c))
        {
            return Ok(found);
        }
        looked.push(start.display().to_string());
    }
    Err(format_err(
        "data/agentbench-os",
        format!(
            "OS-interaction data not found in {} or their parents; set ${DATA_ENV_VAR}",
            looked.join(", ")
        ),
    ))
}

/// Loads the standard tasks (groups 1–7, files in name order) and the dev
/// set.
pub fn load(dir: &Path) -> Result<Vec<Task>, EnvError> {
    let mut all = Vec::new();
    for g in GROUPS {
        let folder = dir.join(format!("data/{g}"));
        let mut files: Vec<PathBuf> = std::fs::read_dir(&folder)
            .map_err(|source| EnvError::Io {
                path: folder.clone(),
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        // Upstream takes glob order (the file system's); name order is
        // reproducible.
        files.sort();
        let group = format!("std-{g:03}");
        let scripts = dir.join(format!("scripts/{g}"));
        for path in files {
            let text = std::fs::read_to_string(&path).map_err(|source| EnvError::Io {
                path: path.clone(),
                source,
            })?;
            let rel = path
                .strip_prefix(dir)
                .unwrap_or(&path)
                .display()
                .to_string();
            all.extend(parse_file(
                &text,
                &rel,
                &format!("{group}-"),
                &group,
                &scripts,
            )?);
        }
    }
    let dev = dir.join("data/dev.json");
    if dev.is_file() {
        let text = std::fs::read_to_string(&dev).map_err(|source| EnvError::Io {
            path: dev.clone(),
            source,
        })?;
        // No prefix: the file's stem makes the ids `dev-<index>`.
        all.extend(parse_file(
            &text,
            "data/dev.json",
            "",
            "dev",
            &dir.join("scripts/dev"),
        )?);
    }
    Ok(all)
}

/// The seeded train/test split of the standard tasks: within each group,
/// tasks are ordered by `blake3("os-split/<seed>/<id>")` and the first half
/// (rounded down) goes to `train`, the rest to `test`.
pub fn split_standard(tasks: &[Task], seed: u64) -> (Vec<String>, Vec<String>) {
    ecdysis_env::seeded_halves(
        tasks
            .iter()
            .filter(|t| t.group.starts_with("std-"))
            .map(|t| (t.group.as_str(), t.id.as_str())),
        "os-split",
        seed,
    )
}

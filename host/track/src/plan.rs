//! What a directory holds, as MLflow runs: a pure function of its files.

use std::path::{Path, PathBuf};

use serde_json::Value;

use ecdysis_report::load::{DirKind, ExperimentData, detect};

use crate::TrackError;

/// Longest parameter value sent (MLflow servers before 2.x refuse longer
/// ones); the whole config also goes as the `config.json` artifact.
pub const PARAM_VALUE_MAX: usize = 500;

/// One MLflow run to mirror.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedRun {
    /// Stable within the directory: `run`, `training`, `experiment`,
    /// `method:<name>`.
    pub key: String,
    /// The MLflow run name.
    pub name: String,
    /// The key of the parent run (an experiment's methods).
    pub parent: Option<String>,
    /// The configuration, flattened (`limits.deadline.secs`).
    pub params: Vec<(String, String)>,
    /// Kind, harness, lineage, simulated/real label.
    pub tags: Vec<(String, String)>,
    /// `(key, value, step)`: per round with the round as step, the
    /// summary's numbers at step 0.
    pub metrics: Vec<(String, f64, i64)>,
    /// `(name in the run's artifacts, file)`.
    pub artifacts: Vec<(String, PathBuf)>,
    /// The directory's command has finished (its summary is written).
    pub finished: bool,
}

/// Every run of a directory, parents first.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The runs.
    pub runs: Vec<PlannedRun>,
}

/// The plan of `dir`.
pub fn plan(dir: &Path) -> Result<Plan, TrackError> {
    let name = dir
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| dir.display().to_string());
    let runs = match detect(dir)? {
        DirKind::Run => vec![run_dir(dir, "run", &name, None)?],
        DirKind::Training => vec![training_dir(dir, "training", &name, None)?],
        DirKind::Experiment => {
            let data = ExperimentData::load(dir)?;
            let file = read(&dir.join("experiment.json"))?;
            let mut parent = PlannedRun {
                key: "experiment".into(),
                name: name.clone(),
                parent: None,
                params: file.as_ref().map(params_of).unwrap_or_default(),
                tags: vec![
                    ("ecdysis.kind".into(), "experiment".into()),
                    ("ecdysis.simulated".into(), data.simulated().to_string()),
                ],
                metrics: Vec::new(),
                artifacts: existing(dir, &["report.html", "experiment.json"]),
                finished: file.is_some(),
            };
            if data.simulated() {
                parent.tags.push(simulated_note());
            }
            let mut runs = vec![parent];
            for (method, t) in &data.methods {
                runs.push(training_dir(
                    &t.dir,
                    &format!("method:{method}"),
                    &format!("{name}/{method}"),
                    Some("experiment".into()),
                )?);
            }
            runs
        }
    };
    Ok(Plan { runs })
}

fn simulated_note() -> (String, String) {
    (
        "ecdysis.note".into(),
        "simulated agent — not a benchmark result".into(),
    )
}

fn read(path: &Path) -> Result<Option<Value>, TrackError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| TrackError::State {
                path: path.to_path_buf(),
                reason: format!("not JSON: {e}"),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(TrackError::State {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }),
    }
}

fn existing(dir: &Path, names: &[&str]) -> Vec<(String, PathBuf)> {
    names
        .iter()
        .map(|n| (n.to_string(), dir.join(n)))
        .filter(|(_, p)| p.is_file())
        .collect()
}

/// Whether any `agent_model` in the config names a `sim:` testbed model.
fn simulated(config: &Value) -> bool {
    match config {
        Value::Object(m) => m.iter().any(|(k, v)| {
            (k == "agent_model" && v.as_str().is_some_and(|s| s.starts_with("sim:")))
                || simulated(v)
        }),
        Value::Array(items) => items.iter().any(simulated),
        _ => false,
    }
}

fn run_dir(
    dir: &Path,
    key: &str,
    name: &str,
    parent: Option<String>,
) -> Result<PlannedRun, TrackError> {
    let config = read(&dir.join("config.json"))?.unwrap_or(Value::Null);
    let summary = read(&dir.join("summary.json"))?;
    let sim = simulated(&config);
    let mut tags = vec![
        ("ecdysis.kind".to_string(), "run".to_string()),
        ("ecdysis.simulated".into(), sim.to_string()),
        (
            "ecdysis.harness".into(),
            config["harness"].as_str().unwrap_or("none").to_string(),
        ),
    ];
    for k in ["domain", "split", "agent_model"] {
        if let Some(v) = config[k].as_str() {
            tags.push((format!("ecdysis.{k}"), v.to_string()));
        }
    }
    if sim {
        tags.push(simulated_note());
    }
    let mut metrics = Vec::new();
    if let Some(s) = &summary {
        numeric_leaves(&s["metrics"], "", &["per_task"], &mut |k, v| {
            metrics.push((k, v, 0))
        });
        if let Some(w) = s["wall_seconds"].as_f64() {
            metrics.push(("wall_seconds".into(), w, 0));
        }
    }
    Ok(PlannedRun {
        key: key.into(),
        name: name.into(),
        parent,
        params: params_of(&config),
        tags,
        metrics,
        artifacts: existing(dir, &["report.html", "config.json", "summary.json"]),
        finished: summary.is_some(),
    })
}

fn training_dir(
    dir: &Path,
    key: &str,
    name: &str,
    parent: Option<String>,
) -> Result<PlannedRun, TrackError> {
    let config = read(&dir.join("config.json"))?.unwrap_or(Value::Null);
    let summary = read(&dir.join("summary.json"))?;
    let rounds: Vec<Value> = match std::fs::read_to_string(dir.join("rounds.jsonl")) {
        // A torn last line (a round being written) is left for next time.
        Ok(text) => text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect(),
        Err(_) => Vec::new(),
    };
    let sim = simulated(&config) || summary.as_ref().is_some_and(|s| s["simulated"] == true);
    let read_hash = |f: &str| {
        std::fs::read_to_string(dir.join(f))
            .ok()
            .map(|t| t.trim().to_string())
    };
    let mut tags = vec![
        ("ecdysis.kind".to_string(), "training".to_string()),
        ("ecdysis.simulated".into(), sim.to_string()),
    ];
    if let Some(m) = config["method"].as_str() {
        tags.push(("ecdysis.method".into(), m.into()));
    }
    if let Some(h) = read_hash("initial") {
        tags.push(("ecdysis.initial".into(), h));
    }
    if let Some(h) = read_hash("incumbent") {
        tags.push(("ecdysis.harness".into(), h));
    }
    let accepted: Vec<(i64, String)> = rounds
        .iter()
        .filter(|r| r["accepted"] == true)
        .filter_map(|r| Some((r["round"].as_i64()?, r["candidate"].as_str()?.to_string())))
        .collect();
    tags.push((
        "ecdysis.lineage".into(),
        std::iter::once(read_hash("initial").unwrap_or_default())
            .chain(accepted.iter().map(|(_, h)| h.clone()))
            .map(|h| h.chars().take(12).collect::<String>())
            .collect::<Vec<_>>()
            .join(" > "),
    ));
    if sim {
        tags.push(simulated_note());
    }
    let mut metrics = Vec::new();
    for r in &rounds {
        let step = r["round"].as_i64().unwrap_or(0);
        numeric_leaves(r, "round.", &["spec", "round"], &mut |k, v| {
            metrics.push((k, v, step))
        });
    }
    if let Some(s) = &summary {
        numeric_leaves(
            s,
            "",
            &["rounds", "selection", "layer_selection"],
            &mut |k, v| metrics.push((k, v, 0)),
        );
    }
    let mut artifacts = existing(dir, &["report.html", "config.json", "summary.json"]);
    for (round, hash) in &accepted {
        let c = dir.join("candidates").join(hash);
        for f in ["diff.patch", "spec.json"] {
            if c.join(f).is_file() {
                artifacts.push((
                    format!(
                        "candidates/round-{round}-{}/{f}",
                        &hash[..hash.len().min(12)]
                    ),
                    c.join(f),
                ));
            }
        }
    }
    Ok(PlannedRun {
        key: key.into(),
        name: name.into(),
        parent,
        params: params_of(&config),
        tags,
        metrics,
        artifacts,
        finished: summary.is_some(),
    })
}

/// Every scalar leaf of `config` as a parameter (`a.b.c`); a list as its
/// JSON text, cut to [`PARAM_VALUE_MAX`].
pub fn params_of(config: &Value) -> Vec<(String, String)> {
    fn walk(v: &Value, key: String, out: &mut Vec<(String, String)>) {
        let value = match v {
            Value::Object(m) => {
                for (k, x) in m {
                    let sub = if key.is_empty() {
                        k.clone()
                    } else {
                        format!("{key}.{k}")
                    };
                    walk(x, sub, out);
                }
                return;
            }
            Value::Null => return,
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let value = if value.chars().count() > PARAM_VALUE_MAX {
            let cut: String = value.chars().take(PARAM_VALUE_MAX - 1).collect();
            format!("{cut}…")
        } else {
            value
        };
        out.push((key, value));
    }
    let mut out = Vec::new();
    walk(config, String::new(), &mut out);
    out
}

/// Every finite number (and boolean, as 0/1) under `v`, keyed by its path
/// after `prefix`; `skip` names top-level keys left out. A list of `[k,
/// value]` pairs (pass^k by k) is keyed by `k`; other lists are left out.
pub fn numeric_leaves(v: &Value, prefix: &str, skip: &[&str], out: &mut dyn FnMut(String, f64)) {
    fn walk(v: &Value, key: &str, out: &mut dyn FnMut(String, f64)) {
        match v {
            Value::Number(n) => {
                if let Some(x) = n.as_f64().filter(|x| x.is_finite()) {
                    out(key.to_string(), x);
                }
            }
            Value::Bool(b) => out(key.to_string(), f64::from(u8::from(*b))),
            Value::Object(m) => {
                for (k, x) in m {
                    walk(x, &join(key, k), out);
                }
            }
            Value::Array(items) => {
                for item in items {
                    if let Some([k, x]) = item.as_array().map(Vec::as_slice)
                        && let Some(k) = k.as_i64()
                    {
                        walk(x, &join(key, &k.to_string()), out);
                    }
                }
            }
            _ => {}
        }
    }
    fn join(key: &str, k: &str) -> String {
        if key.is_empty() || key.ends_with('.') {
            format!("{key}{k}")
        } else {
            format!("{key}.{k}")
        }
    }
    if let Value::Object(m) = v {
        for (k, x) in m {
            if !skip.contains(&k.as_str()) {
                walk(x, &join(prefix, k), out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn configs_flatten_into_params_and_numbers_into_metrics() {
        let p = params_of(
            &json!({"split": "test", "limits": {"fuel": 5, "deadline": {"secs": 2}}, "tasks": ["a", "b"], "x": null}),
        );
        assert_eq!(
            p,
            vec![
                ("split".to_string(), "test".to_string()),
                ("limits.fuel".into(), "5".into()),
                ("limits.deadline.secs".into(), "2".into()),
                ("tasks".into(), "[\"a\",\"b\"]".into()),
            ]
        );
        let long = params_of(&json!({"tasks": vec!["task"; 200]}));
        assert_eq!(long[0].1.chars().count(), PARAM_VALUE_MAX);
        let mut m = Vec::new();
        numeric_leaves(
            &json!({"accuracy": 0.5, "ok": true, "name": "x", "per_task": [1],
                    "pass_hat_k": [[1, {"estimate": 0.5}], [2, {"estimate": 0.25}]]}),
            "round.",
            &["per_task"],
            &mut |k, v| m.push((k, v)),
        );
        assert_eq!(
            m,
            vec![
                ("round.accuracy".to_string(), 0.5),
                ("round.ok".into(), 1.0),
                ("round.pass_hat_k.1.estimate".into(), 0.5),
                ("round.pass_hat_k.2.estimate".into(), 0.25),
            ]
        );
    }

    #[test]
    fn a_sim_model_anywhere_in_the_config_labels_the_run() {
        assert!(simulated(&json!({"train": {"agent_model": "sim:mixed"}})));
        assert!(!simulated(&json!({"agent_model": "qwen2.5-coder"})));
    }
}

//! Cross-runtime conformance vectors: every hook call of real episodes, with
//! its input, the env-view calls it made and their answers, and its output,
//! so another runtime (Python, JavaScript) can replay the calls against the
//! same component and prove it answers byte for byte like the Rust host.
//!
//! `ecdysis-host vectors --harness H --run DIR --out vectors.jsonl` re-runs
//! the configuration of a run directory (`config.json`) with a recorder on
//! the harness, one episode at a time. With a `sim:` agent and the scripted
//! user the re-run is deterministic, so when `H` is the run's own harness
//! the command also checks that every re-run episode reproduces the
//! recorded trajectory and says which do not.
//!
//! # File format (`ecdysis-hook-vectors/1`)
//! JSON lines, every line canonical JSON (see `sandbox::recorder`: keys in
//! the order below, compact, UTF-8).
//!
//! The first line is a header:
//! `{"format","world","harness","domain","run","agent_model","user_model","seed","episodes","records","reproduced","note"}`
//! (`reproduced`: `true`/`false` when the trajectories were compared, else
//! `null`; `note` says the agent is simulated).
//!
//! Every other line is one hook call, in call order, episode after episode:
//! `{"episode":N,"task":"id","trial":K,"seq":S,"hook":"contract","input":…,"view_calls":[{"name","arguments","answer"}],"output":…}`
//! - `seq` counts the episode's hook calls from 0 (the constructor);
//! - `input` is the hook's argument (`episode-info` for the constructor);
//! - `view_calls` lists the env-view calls in order, `answer` being the
//!   `result<string, view-error>` the guest received (arguments over the
//!   env view's 64 KiB cap, refused unread, are recorded as
//!   `<N bytes, over the cap of 65536>`);
//! - `output` is `{"tag":"ok","val":<answer>}` (`null` for the constructor)
//!   or `{"tag":"err","val":{"kind":…[,"violation":…]}}`.
//!
//! A replaying runtime starts a fresh episode at each constructor line,
//! answers env-view calls from `view_calls`, builds the same line from its
//! own output and compares the bytes. A hook line is conformant when the
//! replayed line equals the recorded one exactly.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use crate::agent::{EpisodeRecord, EpisodeSetup, run_episode};
use crate::eval::participants::{AgentSide, Participants, StandardParticipants, UserSide};
use crate::eval::{RunConfig, episode_seed, rundir};
use ecdysis_env::Domain;
use ecdysis_model::{SamplingArgs, SimProfile};
use ecdysis_sandbox::sandbox::{HookRecorder, LoadedHarness, RecordedHook, WORLD_VERSION};
use ecdysis_sandbox::store::ComponentHash;
use ecdysis_sys::fsutil::{PathError, atomic_write};

/// The `format` of the header line; bumped when the file format changes.
pub const VECTORS_FORMAT: &str = "ecdysis-hook-vectors/1";

/// Why vectors could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum VectorsError {
    /// A file could not be read or written.
    #[error(transparent)]
    Io(#[from] PathError),
    /// The run directory's trajectories could not be read.
    #[error(transparent)]
    RunDir(#[from] rundir::RunDirError),
    /// The domain failed (an unknown task, its evaluator).
    #[error(transparent)]
    Env(#[from] ecdysis_env::EnvError),
    /// An episode's agent or user could not be built.
    #[error(transparent)]
    Participants(#[from] crate::eval::ParticipantsError),
    /// The run's `config.json` does not parse as a run configuration.
    #[error("{path} is not a run configuration: {reason}")]
    BadConfig {
        /// The `config.json` read.
        path: PathBuf,
        /// The parse error.
        reason: String,
    },
    /// The run's agent is not a known `sim:` profile, or its user is not the
    /// scripted one: an offline re-run could not reproduce it.
    #[error(
        "the run's {role} is `{model}`: vectors re-run the configuration offline, which needs a `sim:` agent and the `scripted` user (re-running an endpoint would call it, and its answers would differ)"
    )]
    NotReplayable {
        /// `agent` or `user simulator`.
        role: &'static str,
        /// The model the run used for it.
        model: String,
    },
    /// A requested task is not among the run's tasks.
    #[error("task `{0}` is not part of the run")]
    UnknownTask(String),
}

/// A run directory's configuration and finished episodes.
pub struct RecordedRun {
    /// The run directory.
    pub dir: PathBuf,
    /// Its `config.json`: what the vectors re-run.
    pub config: RunConfig,
    /// Its finished episodes, to compare the re-run with.
    pub episodes: Vec<EpisodeRecord>,
}

impl RecordedRun {
    /// Read a run directory's configuration and trajectories.
    pub fn open(dir: &Path) -> Result<Self, VectorsError> {
        let path = dir.join(rundir::CONFIG_FILE);
        let bytes = std::fs::read(&path).map_err(|e| PathError::new("read", &path, e))?;
        let config: RunConfig =
            serde_json::from_slice(&bytes).map_err(|e| VectorsError::BadConfig {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        let episodes = rundir::read_trajectories(&dir.join(rundir::TRAJECTORIES_FILE), false)?;
        Ok(RecordedRun {
            dir: dir.to_path_buf(),
            config,
            episodes,
        })
    }
}

/// What `record` found.
#[derive(Debug, Clone, Default)]
pub struct VectorsReport {
    /// Episodes re-run.
    pub episodes: usize,
    /// Hook calls recorded (lines after the header).
    pub records: usize,
    /// Whether the re-run was compared with the recorded trajectories (only
    /// when the harness is the run's own).
    pub compared: bool,
    /// Episodes whose re-run matched the recorded trajectory.
    pub reproduced: usize,
    /// `(task, trial, what differed first)` for the others (including
    /// episodes the run directory does not hold).
    pub diverged: Vec<(String, u32, String)>,
}

/// Collects one episode's hook calls.
#[derive(Default)]
struct Tape(Mutex<Vec<RecordedHook>>);

impl HookRecorder for Tape {
    fn record(&self, call: RecordedHook) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(call);
    }
}

fn obj(fields: Vec<(&str, Value)>) -> Value {
    let mut m = Map::new();
    for (k, v) in fields {
        m.insert(k.to_string(), v);
    }
    Value::Object(m)
}

/// One vector line for a hook call.
fn record_line(episode: usize, task: &str, trial: u32, seq: usize, call: &RecordedHook) -> Value {
    let view_calls = call
        .view_calls
        .iter()
        .map(|v| {
            obj(vec![
                ("name", Value::from(v.name.as_str())),
                ("arguments", Value::from(v.arguments.as_str())),
                ("answer", v.answer.clone()),
            ])
        })
        .collect();
    obj(vec![
        ("episode", Value::from(episode)),
        ("task", Value::from(task)),
        ("trial", Value::from(trial)),
        ("seq", Value::from(seq)),
        ("hook", Value::from(call.hook)),
        ("input", call.input.clone()),
        ("view_calls", Value::Array(view_calls)),
        ("output", call.output.clone()),
    ])
}

/// The parts of an episode that must reproduce: the transcript, the end,
/// and each hook's decision (not timings or fuel, which depend on the
/// machine and the engine build).
fn comparable(r: &EpisodeRecord) -> Value {
    let hooks: Vec<Value> = r
        .hooks
        .iter()
        .map(|h| {
            obj(vec![
                ("step", Value::from(h.step)),
                ("hook", Value::from(h.hook.as_str())),
                ("decision", h.decision.clone()),
                ("intervened", Value::from(h.intervened)),
                (
                    "error",
                    h.error
                        .as_ref()
                        .map(|e| Value::from(e.kind.as_str()))
                        .unwrap_or(Value::Null),
                ),
            ])
        })
        .collect();
    obj(vec![
        ("end", Value::from(r.end.as_str())),
        (
            "end_detail",
            r.end_detail
                .as_deref()
                .map(Value::from)
                .unwrap_or(Value::Null),
        ),
        ("steps", Value::from(r.steps)),
        ("tool_errors", Value::from(r.tool_errors)),
        (
            "transcript",
            serde_json::to_value(&r.transcript).unwrap_or(Value::Null),
        ),
        ("hooks", Value::Array(hooks)),
    ])
}

/// The first difference between a recorded and a re-run episode, if any.
pub fn first_difference(recorded: &EpisodeRecord, rerun: &EpisodeRecord) -> Option<String> {
    let (a, b) = (comparable(recorded), comparable(rerun));
    if a == b {
        return None;
    }
    let (ta, tb) = (&a["transcript"], &b["transcript"]);
    if ta != tb {
        let (xa, xb) = (
            ta.as_array().cloned().unwrap_or_default(),
            tb.as_array().cloned().unwrap_or_default(),
        );
        let i = xa
            .iter()
            .zip(&xb)
            .position(|(x, y)| x != y)
            .unwrap_or(xa.len().min(xb.len()));
        let show = |v: Option<&Value>| {
            v.map(|v| shortened(&v.to_string()))
                .unwrap_or_else(|| "(none)".into())
        };
        let mut found = format!(
            "transcript entry {i}: recorded {} / re-run {}",
            show(xa.get(i)),
            show(xb.get(i))
        );
        // A re-run cut short (a hook's deadline on a loaded machine, a
        // trap) differs first by a missing entry: its end says why.
        let end = |r: &EpisodeRecord| match &r.end_detail {
            Some(detail) => format!("{} ({})", r.end.as_str(), shortened(detail)),
            None => r.end.as_str().to_string(),
        };
        let (end_a, end_b) = (end(recorded), end(rerun));
        if end_a != end_b {
            found.push_str(&format!("; ended: recorded {end_a} / re-run {end_b}"));
        }
        return Some(found);
    }
    let diff = rundir::json_diff(&a, &b);
    Some(diff.first().cloned().unwrap_or_default().trim().to_string())
}

/// `text` cut to a readable length for a divergence message (a system
/// prompt entry runs to kilobytes), with how much was left out.
fn shortened(text: &str) -> String {
    const SHOWN: usize = 240;
    ecdysis_sys::text::clip_with(text, SHOWN, &format!("… ({} bytes in all)", text.len()))
}

/// Re-run `run`'s configuration with `harness` (blake3 `harness_hash`) on
/// `tasks` (all of the run's when empty), recording every hook call, and
/// write the vectors to `out`. `progress` hears one line per episode.
pub async fn record(
    run: &RecordedRun,
    domain: Arc<dyn Domain>,
    harness: &LoadedHarness,
    harness_hash: &ComponentHash,
    tasks: &[String],
    out: &Path,
    mut progress: impl FnMut(&str),
) -> Result<VectorsReport, VectorsError> {
    let config = &run.config;
    let profile = if config.agent_model.is_simulated() {
        SimProfile::parse(config.agent_model.as_str()).map_err(|_| VectorsError::NotReplayable {
            role: "agent",
            model: config.agent_model.to_string(),
        })?
    } else {
        return Err(VectorsError::NotReplayable {
            role: "agent",
            model: config.agent_model.to_string(),
        });
    };
    if config.user_model != "scripted" {
        return Err(VectorsError::NotReplayable {
            role: "user simulator",
            model: config.user_model.clone(),
        });
    }
    for t in tasks {
        if !config.tasks.contains(t) {
            return Err(VectorsError::UnknownTask(t.clone()));
        }
    }
    let participants = StandardParticipants {
        agent: AgentSide::Sim(profile),
        user: UserSide::Scripted,
        hub: None,
        sim_latency: std::time::Duration::ZERO,
        base_prompt: domain.system_prompt(),
        device_tools: crate::eval::participants::device_tools(&*domain),
    };
    let compared = config.harness.as_ref() == Some(harness_hash);
    let recorded: BTreeMap<(String, u32), &EpisodeRecord> = run
        .episodes
        .iter()
        .map(|r| ((r.task_id.clone(), r.trial), r))
        .collect();
    let mut report = VectorsReport {
        compared,
        ..VectorsReport::default()
    };
    let mut lines: Vec<String> = Vec::new();
    let selected: Vec<&String> = config
        .tasks
        .iter()
        .filter(|t| tasks.is_empty() || tasks.contains(t))
        .collect();
    for task_id in selected {
        for trial in 0..config.settings.trials {
            let (view, oracle) = domain.task(task_id)?;
            let seed = episode_seed(config.settings.seed, task_id, trial);
            let (agent, user) = participants.build(&view, &oracle, trial, seed)?;
            drop(oracle);
            let tape = Arc::new(Tape::default());
            let setup = EpisodeSetup {
                domain: domain.clone(),
                task: view,
                trial,
                seed,
                agent,
                user,
                harness: Some(harness.with_recorder(tape.clone())),
                policy: config.settings.policy,
                layers: config.settings.layers,
                max_steps: config.settings.max_steps,
                max_errors: config.settings.max_errors,
                max_request_tokens: config.settings.max_request_tokens,
                sampling: SamplingArgs {
                    seed: config.settings.sampling.seed.or(Some(seed)),
                    ..config.settings.sampling.clone()
                },
            };
            let rerun = run_episode(setup).await;
            let calls = std::mem::take(&mut *tape.0.lock().unwrap_or_else(|p| p.into_inner()));
            let episode = report.episodes;
            for (seq, call) in calls.iter().enumerate() {
                lines.push(record_line(episode, task_id, trial, seq, call).to_string());
            }
            report.records += calls.len();
            report.episodes += 1;
            let verdict = if compared {
                match recorded.get(&(task_id.clone(), trial)) {
                    None => {
                        report.diverged.push((
                            task_id.clone(),
                            trial,
                            "the run directory holds no such episode".into(),
                        ));
                        "not in the run directory"
                    }
                    Some(r) => match first_difference(r, &rerun) {
                        None => {
                            report.reproduced += 1;
                            "reproduced"
                        }
                        Some(d) => {
                            report.diverged.push((task_id.clone(), trial, d));
                            "DIVERGED from the recorded trajectory"
                        }
                    },
                }
            } else {
                "recorded"
            };
            progress(&format!(
                "task {task_id} trial {trial}: {} hook calls, {verdict}",
                calls.len()
            ));
        }
    }
    let header = obj(vec![
        ("format", Value::from(VECTORS_FORMAT)),
        ("world", Value::from(WORLD_VERSION)),
        ("harness", Value::from(harness_hash.as_str())),
        ("domain", Value::from(config.settings.domain.as_str())),
        ("run", Value::from(run.dir.display().to_string())),
        ("agent_model", Value::from(config.agent_model.as_str())),
        ("user_model", Value::from(config.user_model.as_str())),
        ("seed", Value::from(config.settings.seed)),
        ("episodes", Value::from(report.episodes)),
        ("records", Value::from(report.records)),
        (
            "reproduced",
            if compared {
                Value::from(report.diverged.is_empty())
            } else {
                Value::Null
            },
        ),
        (
            "note",
            Value::from("simulated agent — not a benchmark result"),
        ),
    ]);
    let mut text = header.to_string();
    text.push('\n');
    for l in &lines {
        text.push_str(l);
        text.push('\n');
    }
    atomic_write(out, text.as_bytes()).map_err(|e| PathError::new("write", out, e))?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(transcript: Value, end: &str, end_detail: Option<&str>) -> EpisodeRecord {
        let usage = serde_json::json!({"calls": 0, "cache_hits": 0, "prompt_tokens": 0,
            "completion_tokens": 0, "cached_prompt_tokens": 0});
        let mut r = serde_json::json!({
            "task_id": "5", "trial": 0, "domain": "tau2/retail", "seed": 1, "end": end,
            "steps": 3, "tool_errors": 0, "transcript": transcript, "hooks": [],
            "agent_usage": usage, "user_usage": usage, "wall_ms": 10,
        });
        if let Some(d) = end_detail {
            r["end_detail"] = Value::from(d);
        }
        serde_json::from_value(r).expect("a record")
    }

    #[test]
    fn a_rerun_cut_short_names_both_ends_and_shortens_long_entries() {
        let prompt = "p".repeat(5_000);
        let recorded = record(
            serde_json::json!([{"kind": "system", "text": prompt}]),
            "user_stop",
            None,
        );
        let rerun = record(
            serde_json::json!([]),
            "harness_error",
            Some("contract: deadline exceeded"),
        );
        let found = first_difference(&recorded, &rerun).expect("they differ");
        assert!(
            found.starts_with("transcript entry 0: recorded {"),
            "{found}"
        );
        assert!(found.contains("bytes in all) / re-run (none)"), "{found}");
        assert!(found.len() < 600, "{} bytes: {found}", found.len());
        assert!(
            found.ends_with(
                "; ended: recorded user_stop / re-run harness_error (contract: deadline exceeded)"
            ),
            "{found}"
        );
    }

    #[test]
    fn equal_ends_are_not_repeated_and_equal_records_do_not_differ() {
        let a = record(
            serde_json::json!([{"kind": "system", "text": "a"}]),
            "user_stop",
            None,
        );
        let b = record(
            serde_json::json!([{"kind": "system", "text": "b"}]),
            "user_stop",
            None,
        );
        let found = first_difference(&a, &b).expect("they differ");
        assert!(!found.contains("ended:"), "{found}");
        assert!(
            found.contains(r#""text":"a""#) && found.contains(r#""text":"b""#),
            "{found}"
        );
        assert_eq!(first_difference(&a, &a.clone()), None);
    }
}

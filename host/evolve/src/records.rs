//! Failure records: what evolution may know about an episode.
//!
//! Built from a trajectory and its score, **scrubbed of every oracle
//! field**: no gold actions, no user instructions, no communicate strings,
//! no NL assertions, no testbed ground truth. Only what the agent saw (tool
//! calls, results, messages), the harness's interventions, the end reason
//! and which reward components failed (as booleans) survive. Every prompt
//! and coder input is rendered from these records, never from raw
//! trajectories, which is what the oracle-leak test relies on.

use serde::{Deserialize, Serialize};

use ecdysis_runner::agent::{CallSource, EndReason, Entry, EpisodeRecord};

/// Longest text kept of one argument list or result.
const CLIP: usize = 240;

pub(crate) fn clip(s: &str, n: usize) -> String {
    let flat = s.replace('\n', " ");
    if flat.chars().count() <= n {
        flat
    } else {
        format!("{}…", flat.chars().take(n).collect::<String>())
    }
}

/// One tool call as the failure record keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolStep {
    /// The tool name.
    pub name: String,
    /// Arguments as run, as JSON text (clipped).
    pub arguments: String,
    /// The tool's answer or the harness's block feedback (clipped).
    pub result: String,
    /// The tool answered with an error.
    pub error: bool,
    /// The harness blocked the call.
    pub blocked: bool,
    /// Where the call came from (the model, rewritten, rescued or forced).
    pub source: CallSource,
}

/// What one episode tells evolution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailureRecord {
    /// The task of the episode.
    pub task_id: String,
    /// Which repetition of the task (0-based).
    pub trial: u32,
    /// The episode's reward in [0, 1].
    pub reward: f64,
    /// Whether the task was solved.
    pub success: bool,
    /// The final database matched (None when the task does not check it).
    pub db_ok: Option<bool>,
    /// Everything that had to be said was said.
    pub communicate_ok: Option<bool>,
    /// How the episode ended.
    pub end: EndReason,
    /// Every tool call of the episode, in order.
    pub steps: Vec<ToolStep>,
    /// Agent messages without structured calls (clipped): where calls
    /// written as text show up.
    pub agent_texts: Vec<String>,
    /// Harness interventions as `hook:decision`.
    pub interventions: Vec<String>,
}

impl FailureRecord {
    /// Scrub one finished episode into a record.
    pub fn from_episode(r: &EpisodeRecord) -> FailureRecord {
        let ev = r.evaluation.as_ref();
        let flag = |k: &str| ev.and_then(|e| e.get(k)).and_then(|v| v.as_bool());
        let steps = r
            .transcript
            .iter()
            .filter_map(|e| match e {
                Entry::Tool {
                    name,
                    arguments,
                    content,
                    error,
                    blocked,
                    source,
                    ..
                } => Some(ToolStep {
                    name: name.clone(),
                    arguments: clip(arguments, CLIP),
                    result: clip(content, CLIP),
                    error: *error,
                    blocked: *blocked,
                    source: *source,
                }),
                _ => None,
            })
            .collect();
        let agent_texts = r
            .transcript
            .iter()
            .filter_map(|e| match e {
                Entry::Agent {
                    step,
                    text: Some(t),
                    tool_calls,
                    ..
                } if tool_calls.is_empty() && *step > 0 => Some(clip(t, CLIP)),
                _ => None,
            })
            .collect();
        let interventions = r
            .hooks
            .iter()
            .filter(|h| h.intervened || h.error.is_some())
            .map(|h| match &h.error {
                Some(e) => format!("{}:failed:{}", h.hook, e.kind),
                None => format!("{}:{}", h.hook, decision_kind(&h.decision)),
            })
            .collect();
        FailureRecord {
            task_id: r.task_id.clone(),
            trial: r.trial,
            reward: r.reward,
            success: r.success,
            db_ok: flag("db_match"),
            communicate_ok: flag("communicate_ok"),
            end: r.end,
            steps,
            agent_texts,
            interventions,
        }
    }

    /// A compact excerpt for prompts.
    pub fn excerpt(&self) -> String {
        let mut out = format!(
            "task {} trial {}: reward {:.2}, ended {}{}{}\n",
            self.task_id,
            self.trial,
            self.reward,
            self.end.as_str(),
            match self.db_ok {
                Some(false) => ", final database wrong",
                _ => "",
            },
            match self.communicate_ok {
                Some(false) => ", required information not said",
                _ => "",
            }
        );
        for s in &self.steps {
            let mark = if s.blocked {
                "BLOCKED"
            } else if s.error {
                "ERROR"
            } else {
                "ok"
            };
            out += &format!("  {}({}) -> {mark}: {}\n", s.name, s.arguments, s.result);
        }
        for t in &self.agent_texts {
            out += &format!("  agent said: {t}\n");
        }
        if !self.interventions.is_empty() {
            out += &format!("  harness: {}\n", self.interventions.join(", "));
        }
        out
    }
}

/// The variant name of a hook decision as recorded (`block`, `execute`...).
fn decision_kind(d: &serde_json::Value) -> String {
    match d {
        serde_json::Value::String(s) => s.to_lowercase(),
        serde_json::Value::Object(m) => m
            .keys()
            .next()
            .map(|k| k.to_lowercase())
            .unwrap_or_default(),
        _ => "other".into(),
    }
}

/// Records of every episode with reward below `lambda`.
pub fn failures(records: &[EpisodeRecord], lambda: f64) -> Vec<FailureRecord> {
    records
        .iter()
        .filter(|r| r.reward < lambda)
        .map(FailureRecord::from_episode)
        .collect()
}

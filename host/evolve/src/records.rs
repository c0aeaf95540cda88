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
    /// Every env assertion on the final state held (τ² telecom; None
    /// elsewhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_ok: Option<bool>,
    /// How the episode ended.
    pub end: EndReason,
    /// Every tool call of the agent (and the harness), in order.
    pub steps: Vec<ToolStep>,
    /// The user's calls on their own device (τ² telecom), in order: not
    /// the agent's, and no harness saw them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_steps: Vec<ToolStep>,
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
        let basis: Vec<&str> = ev
            .and_then(|e| e.get("reward_basis"))
            .and_then(|b| b.as_array())
            .map(|b| b.iter().filter_map(|x| x.as_str()).collect())
            .unwrap_or_default();
        // Where the final state is judged by assertions, the database match
        // is a diagnostic: the record says what the reward was made of.
        let by_assertions = basis.contains(&"ENV_ASSERTION") && !basis.contains(&"DB");
        let (steps, device_steps): (Vec<ToolStep>, Vec<ToolStep>) = r
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
            .partition(|s| s.source != CallSource::User);
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
            db_ok: if by_assertions {
                None
            } else {
                flag("db_match")
            },
            communicate_ok: flag("communicate_ok"),
            env_ok: by_assertions.then(|| flag("env_assertion_ok").unwrap_or(true)),
            end: r.end,
            steps,
            device_steps,
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
        if self.env_ok == Some(false) {
            out += "  the checks on the final state (the user's device, the line) failed\n";
        }
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
        for s in &self.device_steps {
            let mark = if s.error { "ERROR" } else { "ok" };
            out += &format!(
                "  the user, on their device: {}({}) -> {mark}: {}\n",
                s.name, s.arguments, s.result
            );
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, error: bool, source: CallSource) -> Entry {
        Entry::Tool {
            step: 1,
            call_id: name.into(),
            name: name.into(),
            arguments: "{}".into(),
            proposed: None,
            content: if error { "Error: no" } else { "ok" }.into(),
            error,
            blocked: false,
            source,
        }
    }

    /// A telecom episode: the user's device calls are kept apart from the
    /// agent's (no heuristic may read them as the agent's), and the failed
    /// component is the assertions, not the diagnostic database match.
    #[test]
    fn device_steps_and_assertion_failures_are_told_apart() {
        let mut r = EpisodeRecord::bare("t", 0, 0.0);
        r.transcript = vec![
            tool("get_customer_by_phone", false, CallSource::Model),
            tool("toggle_data", true, CallSource::User),
            tool("toggle_data", true, CallSource::User),
            tool("enable_roaming", false, CallSource::Model),
        ];
        r.evaluation = Some(serde_json::json!({
            "reward": 0.0, "db_match": false, "env_assertion_ok": false,
            "reward_basis": ["ENV_ASSERTION"]
        }));
        let f = FailureRecord::from_episode(&r);
        let names = |s: &[ToolStep]| s.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&f.steps), ["get_customer_by_phone", "enable_roaming"]);
        assert_eq!(names(&f.device_steps), ["toggle_data", "toggle_data"]);
        assert_eq!((f.db_ok, f.env_ok), (None, Some(false)));
        let sig = crate::aggregate::Signature::of(&f);
        assert_eq!(sig.failed, ["env_assertion"]);
        assert_eq!(
            sig.first_failure, None,
            "the user's failing calls are not the agent's"
        );
        assert!(!sig.repeated_failing_call);
        let text = f.excerpt();
        assert!(
            text.contains("the user, on their device: toggle_data"),
            "{text}"
        );
        assert!(!text.contains("final database wrong"), "{text}");
        // Positive control: a retail failure still reads its database.
        let mut retail = EpisodeRecord::bare("r", 0, 0.0);
        retail.evaluation = Some(serde_json::json!({
            "reward": 0.0, "db_match": false, "reward_basis": ["DB", "COMMUNICATE"]
        }));
        let f = FailureRecord::from_episode(&retail);
        assert_eq!((f.db_ok, f.env_ok), (Some(false), None));
        assert!(f.excerpt().contains("final database wrong"));
    }
}

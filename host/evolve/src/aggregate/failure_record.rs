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

/// `s` on one line, cut to `n` characters.
pub(crate) fn clip(s: &str, n: usize) -> String {
    ecdysis_sys::text::clip(&s.replace('\n', " "), n)
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
    /// The agent reply the call came from (1-based; a forced call counts
    /// with the reply it followed). Calls of one reply ran before the model
    /// saw any of their results.
    #[serde(default)]
    pub reply: u32,
    /// The call is one of the domain's finishing tools (it ends the
    /// episode: DBBench's commit, OS's answer, τ²'s transfer).
    #[serde(default)]
    pub finishes: bool,
    /// The class of the result, read from the whole answer before it was
    /// clipped, with the domain's codes kept ([`crate::aggregate::mechanism::result_class`]).
    #[serde(default)]
    pub class: String,
}

/// One note of the regulation layer (`annotate` or `inject`), as the
/// record keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegulateNote {
    /// The note: one line of regulation's text (clipped).
    pub text: String,
    /// The reply it was shown after (0: before the first).
    pub reply: u32,
    /// The calls it was attached to that failed or were refused (indices
    /// into the record's `steps`): calls whose results it annotated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_calls: Vec<usize>,
}

/// What one episode tells evolution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailureRecord {
    /// The task of the episode.
    pub task_id: String,
    /// The domain's name (`agentbench/dbbench`, `tau2/retail`, ...).
    #[serde(default)]
    pub domain: String,
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
    /// The answer, check or final table was right (DBBench, OS; None
    /// where the reward is made of database and communication checks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_ok: Option<bool>,
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
    /// The reply (1-based) each of `agent_texts` came from.
    #[serde(default)]
    pub text_replies: Vec<u32>,
    /// Agent replies in the episode.
    #[serde(default)]
    pub replies: u32,
    /// Replies (1-based) whose text carried a tool call written as text,
    /// read from the whole text: whether the harness rescued it shows in
    /// the calls' `source`.
    #[serde(default)]
    pub text_call_replies: Vec<u32>,
    /// What the regulation layer told the model, each distinct note once
    /// (the reply of its first showing, the failed calls of every one):
    /// whether it spoke about this failure is part of the label
    /// ([`crate::aggregate::mechanism::regulate_advised`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regulate_notes: Vec<RegulateNote>,
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
        // Benchmarks judged by an answer or a check (DBBench, OS) report a
        // database match that decides nothing: the record says the answer
        // failed instead.
        let by_answer = !basis.is_empty()
            && !basis
                .iter()
                .any(|b| matches!(*b, "DB" | "ENV_ASSERTION" | "COMMUNICATE"));
        let finishing = crate::aggregate::mechanism::finishing_tools(&r.domain);
        let mut reply = 0u32;
        let mut steps = Vec::new();
        let mut device_steps = Vec::new();
        let mut agent_texts = Vec::new();
        let mut text_call_replies = Vec::new();
        let mut text_replies = Vec::new();
        let mut regulate_notes: Vec<RegulateNote> = Vec::new();
        // The failed or refused calls of the latest tool-results step (its
        // step number, indices into `steps`): what a note at that step
        // annotates.
        let mut failed_at: (u32, Vec<usize>) = (0, Vec::new());
        for e in &r.transcript {
            match e {
                Entry::Agent {
                    step,
                    text,
                    tool_calls,
                    ..
                } if *step > 0 => {
                    reply += 1;
                    if let Some(t) = text {
                        if crate::aggregate::looks_like_text_call(t) {
                            text_call_replies.push(reply);
                        }
                        if tool_calls.is_empty() {
                            agent_texts.push(clip(t, CLIP));
                            text_replies.push(reply);
                        }
                    }
                }
                Entry::Tool {
                    step: at,
                    name,
                    arguments,
                    content,
                    error,
                    blocked,
                    source,
                    ..
                } => {
                    let step = ToolStep {
                        name: name.clone(),
                        arguments: clip(arguments, CLIP),
                        result: clip(content, CLIP),
                        error: *error,
                        blocked: *blocked,
                        source: *source,
                        reply,
                        finishes: finishing.contains(&name.as_str()) && !*blocked,
                        class: crate::aggregate::mechanism::result_class(
                            &r.domain, content, *error, *blocked,
                        ),
                    };
                    if *source == CallSource::User {
                        device_steps.push(step);
                    } else {
                        if failed_at.0 != *at {
                            failed_at = (*at, Vec::new());
                        }
                        if *error || *blocked {
                            failed_at.1.push(steps.len());
                        }
                        steps.push(step);
                    }
                }
                Entry::Harness { step, hook, text } if hook == "regulate" => {
                    let failed = if failed_at.0 == *step {
                        failed_at.1.clone()
                    } else {
                        Vec::new()
                    };
                    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
                        let line = clip(line, CLIP);
                        match regulate_notes.iter_mut().find(|n| n.text == line) {
                            Some(n) => {
                                for i in &failed {
                                    if !n.failed_calls.contains(i) {
                                        n.failed_calls.push(*i);
                                    }
                                }
                            }
                            None => regulate_notes.push(RegulateNote {
                                text: line,
                                reply,
                                failed_calls: failed.clone(),
                            }),
                        }
                    }
                }
                _ => {}
            }
        }
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
            domain: r.domain.clone(),
            trial: r.trial,
            reward: r.reward,
            success: r.success,
            db_ok: if by_assertions || by_answer {
                None
            } else {
                flag("db_match")
            },
            answer_ok: by_answer.then_some(r.success),
            communicate_ok: flag("communicate_ok"),
            env_ok: by_assertions.then(|| flag("env_assertion_ok").unwrap_or(true)),
            end: r.end,
            steps,
            device_steps,
            agent_texts,
            interventions,
            replies: reply,
            text_replies,
            text_call_replies,
            regulate_notes,
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
        if self.answer_ok == Some(false) {
            out += "  the answer (or the final state it was checked by) was wrong\n";
        }
        // Reply by reply: calls of one reply ran before the model saw any
        // of their results, which is what the mechanism reads. A text the
        // harness turned into calls is shown by its calls; identical lines
        // of consecutive replies are shown once with their count.
        let mut lines: Vec<(u32, String)> = Vec::new();
        for (i, t) in self.agent_texts.iter().enumerate() {
            let reply = self.text_replies.get(i).copied().unwrap_or(0);
            let rescued = self.steps.iter().any(|s| s.reply == reply && reply > 0);
            if !rescued {
                lines.push((reply, format!("said: {t}")));
            }
        }
        let mut at = 0;
        while at < self.steps.len() {
            let reply = self.steps[at].reply;
            let n = self.steps[at..]
                .iter()
                .take_while(|s| s.reply == reply)
                .count();
            let calls: Vec<String> = self.steps[at..at + n]
                .iter()
                .enumerate()
                .map(|(k, s)| {
                    let mark = if s.blocked {
                        "BLOCKED".to_string()
                    } else if s.error {
                        format!(
                            "ERROR ({})",
                            crate::aggregate::mechanism::class_of(s).trim_start_matches("error ")
                        )
                    } else {
                        "ok".into()
                    };
                    let finishing = match (s.finishes, k > 0) {
                        (true, true) => " [finishes, same reply]",
                        (true, false) => " [finishes]",
                        _ => "",
                    };
                    format!(
                        "{}({}){finishing} -> {mark}: {}",
                        s.name, s.arguments, s.result
                    )
                })
                .collect();
            let written = if self.text_call_replies.contains(&reply) {
                "calls written as text: "
            } else {
                ""
            };
            lines.push((reply, format!("{written}{}", calls.join("; "))));
            at += n;
        }
        for s in &self.device_steps {
            let mark = if s.error { "ERROR" } else { "ok" };
            lines.push((
                s.reply,
                format!(
                    "the user, on their device: {}({}) -> {mark}: {}",
                    s.name, s.arguments, s.result
                ),
            ));
        }
        // Replies in order (within a reply: text, calls, the user's device).
        lines.sort_by_key(|(reply, _)| *reply);
        let mut i = 0;
        while i < lines.len() {
            let (first, text) = &lines[i];
            // Lines of one reply are never merged with each other.
            let mut same = 1;
            while lines
                .get(i + same)
                .is_some_and(|(r, t)| t == text && *r > lines[i + same - 1].0)
            {
                same += 1;
            }
            let last = lines[i + same - 1].0;
            let which = match (same, *first) {
                (1, 0) => "agent".to_string(),
                (1, r) => format!("reply {r}"),
                (k, _) => format!("replies {first}–{last} ({k} times)"),
            };
            out += &format!("  {which}: {text}\n");
            i += same;
        }
        if !self.interventions.is_empty() {
            let mut counts: Vec<(&str, usize)> = Vec::new();
            for i in &self.interventions {
                match counts.iter_mut().find(|(name, _)| name == i) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((i, 1)),
                }
            }
            let list: Vec<String> = counts
                .iter()
                .map(|(i, n)| {
                    if *n == 1 {
                        i.to_string()
                    } else {
                        format!("{i} ×{n}")
                    }
                })
                .collect();
            out += &format!("  harness: {}\n", list.join(", "));
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
            crate::aggregate::first_failure(&f),
            None,
            "the user's failing calls are not the agent's"
        );
        assert!(!crate::aggregate::repeated_failing_call(&f));
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

    fn agent(step: u32, text: Option<&str>) -> Entry {
        Entry::Agent {
            step,
            text: text.map(str::to_string),
            tool_calls: vec![],
            testbed: None,
            withheld: None,
        }
    }

    fn sql(step: u32, name: &str, content: &str, error: bool) -> Entry {
        Entry::Tool {
            step,
            call_id: format!("{step}-{name}"),
            name: name.into(),
            arguments: "{}".into(),
            proposed: None,
            content: content.into(),
            error,
            blocked: false,
            source: CallSource::Realized,
        }
    }

    /// Calls keep their reply and whether they finish; the excerpt reads
    /// reply by reply, shows a text the harness turned into calls by its
    /// calls, and writes a line repeated over consecutive replies once.
    #[test]
    fn calls_keep_their_reply_and_the_excerpt_reads_reply_by_reply() {
        let call_text = "{\"name\": \"execute_sql\", \"arguments\": {\"query\": \"SELECT 1\"}}";
        let mut r = EpisodeRecord::bare("t", 0, 0.0);
        r.domain = "agentbench/dbbench".into();
        r.transcript = vec![
            agent(1, Some("I will think.")),
            agent(2, Some("I will think.")),
            agent(3, Some(call_text)),
            sql(
                4,
                "execute_sql",
                "1146 (42S02): Table 'd.t' doesn't exist",
                true,
            ),
            agent(5, Some(call_text)),
            sql(6, "execute_sql", "[('1',)]", false),
            sql(6, "commit_final_answer", "Final answer committed.", false),
        ];
        let f = FailureRecord::from_episode(&r);
        let replies: Vec<(u32, bool)> = f.steps.iter().map(|s| (s.reply, s.finishes)).collect();
        assert_eq!(replies, [(3, false), (4, false), (4, true)]);
        assert_eq!(f.replies, 4);
        assert_eq!(f.text_call_replies, [3, 4]);
        assert_eq!(f.steps[0].class, "error mysql 1146");
        let text = f.excerpt();
        assert!(
            text.contains("  replies 1–2 (2 times): said: I will think.\n"),
            "{text}"
        );
        assert!(
            !text.contains("said: {"),
            "a rescued text shows as its calls: {text}"
        );
        assert!(
            text.contains(
                "  reply 3: calls written as text: execute_sql({}) -> ERROR (mysql 1146)"
            ),
            "{text}"
        );
        assert!(
            text.contains("commit_final_answer({}) [finishes, same reply] -> ok"),
            "{text}"
        );
        assert_eq!(
            crate::aggregate::Signature::of(&f).finish,
            crate::aggregate::mechanism::Finish::SameReply
        );
    }

    /// Regulation's notes are kept one line each, once, with the failed
    /// calls whose results they annotated: what the label reads to tell
    /// advice about a failure from a generic warning.
    #[test]
    fn regulate_notes_keep_the_failed_calls_they_annotate() {
        let harness = |step: u32, hook: &str, text: &str| Entry::Harness {
            step,
            hook: hook.into(),
            text: text.into(),
        };
        let mut r = EpisodeRecord::bare("t", 0, 0.0);
        r.domain = "agentbench/dbbench".into();
        r.transcript = vec![
            harness(0, "skills", "Answer a question from the table."),
            agent(1, None),
            sql(2, "execute_sql", "[('1',)]", false),
            sql(2, "execute_sql", "1064 (42000): syntax", true),
            harness(
                2,
                "regulate",
                "`execute_sql` failed.\nOnly 2 turn(s) remain.",
            ),
            agent(3, Some("done")),
            harness(4, "regulate", "You sent the same message as before."),
            agent(5, Some("done")),
            harness(6, "regulate", "You sent the same message as before."),
            agent(7, None),
            sql(8, "execute_sql", "1064 (42000): syntax", true),
            harness(8, "regulate", "`execute_sql` failed."),
        ];
        let f = FailureRecord::from_episode(&r);
        let notes: Vec<(&str, u32, Vec<usize>)> = f
            .regulate_notes
            .iter()
            .map(|n| (n.text.as_str(), n.reply, n.failed_calls.clone()))
            .collect();
        assert_eq!(
            notes,
            [
                ("`execute_sql` failed.", 1, vec![1, 2]),
                ("Only 2 turn(s) remain.", 1, vec![1]),
                ("You sent the same message as before.", 2, vec![]),
            ]
        );
        // Records written before notes were kept still read.
        let old: FailureRecord = serde_json::from_value({
            let mut v = serde_json::to_value(&f).unwrap();
            v.as_object_mut().unwrap().remove("regulate_notes");
            v
        })
        .unwrap();
        assert!(old.regulate_notes.is_empty());
    }
}

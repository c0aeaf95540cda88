//! What an episode leaves behind: the trajectory evolution reads later.

use serde::{Deserialize, Serialize};

use super::session::HookRecord;
use ecdysis_model::Usage;

/// Why an episode ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The agent ended the conversation (`###STOP###` or a transfer).
    AgentStop,
    /// The user simulator ended it (`###STOP###`, `###TRANSFER###`,
    /// `###OUT-OF-SCOPE###`).
    UserStop,
    /// The step cap was reached.
    MaxSteps,
    /// The tool-error cap was reached.
    TooManyErrors,
    /// A hook failed under `fail-closed`.
    HarnessError,
    /// The harness's regulation hook stopped the episode.
    HarnessStop,
    /// The model (agent or user) failed with a non-retryable error.
    ModelError,
    /// An endpoint stayed unreachable after retries: the episode is
    /// requeued, never scored.
    InfrastructureError,
    /// The next agent request was over the request cap and was not sent.
    RequestTooLarge,
    /// A spending budget would have been crossed by the next request; it
    /// was not sent.
    BudgetExhausted,
}

impl EndReason {
    /// The snake_case name, as written in trajectories and summaries.
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::AgentStop => "agent_stop",
            EndReason::UserStop => "user_stop",
            EndReason::MaxSteps => "max_steps",
            EndReason::TooManyErrors => "too_many_errors",
            EndReason::HarnessError => "harness_error",
            EndReason::HarnessStop => "harness_stop",
            EndReason::ModelError => "model_error",
            EndReason::InfrastructureError => "infrastructure_error",
            EndReason::RequestTooLarge => "request_too_large",
            EndReason::BudgetExhausted => "budget_exhausted",
        }
    }

    /// The environment's notion, for evaluation (only stops earn reward).
    pub fn termination(self) -> ecdysis_env::Termination {
        use ecdysis_env::Termination as T;
        match self {
            EndReason::AgentStop => T::AgentStop,
            EndReason::UserStop => T::UserStop,
            EndReason::MaxSteps => T::MaxSteps,
            EndReason::TooManyErrors => T::TooManyErrors,
            EndReason::HarnessError | EndReason::HarnessStop => T::JudgeStop,
            EndReason::ModelError
            | EndReason::InfrastructureError
            | EndReason::RequestTooLarge
            | EndReason::BudgetExhausted => T::AgentError,
        }
    }
}

/// Where an executed call came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallSource {
    /// A structured call of the model, run as proposed.
    Model,
    /// A structured call of the model, rewritten by the harness (`execute`).
    Rewritten,
    /// Rescued by the harness from the model's text (`realize`).
    Realized,
    /// Forced by the harness (`force-call`).
    Forced,
    /// Made by the user (simulator) on their own device, in a dual-control
    /// domain (τ² telecom). Neither the agent nor the harness saw it: its
    /// result went to the user alone.
    User,
}

/// Why an agent message's text never reached the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Withheld {
    /// `realize` turned the text into structured calls.
    Realized,
    /// `realize` blocked the text and showed the model feedback instead.
    Blocked,
}

/// One entry of the transcript, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// The system prompt the model saw (after the contract and skills).
    System {
        /// The full system prompt.
        text: String,
    },
    /// An agent message: text and/or structured calls, as the model wrote it.
    Agent {
        /// Step at which the model produced this message.
        step: u32,
        /// The message text (`None` for a calls-only turn).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// The structured tool calls, as proposed.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ecdysis_model::ToolCall>,
        /// Testbed ground truth (simulated models only): quirks that fired.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        testbed: Option<ecdysis_model::TestbedNote>,
        /// The harness kept this message's text from the user (turned it
        /// into calls, or held it back with feedback): it was never said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        withheld: Option<Withheld>,
    },
    /// A user (simulator) message.
    User {
        /// Step at which the user spoke.
        step: u32,
        /// What the user said.
        text: String,
    },
    /// A tool call and its result.
    Tool {
        /// Step at which the call ran.
        step: u32,
        /// The id the result is filed under in the conversation.
        call_id: String,
        /// Tool name (after the harness).
        name: String,
        /// Arguments as run (after the harness), as JSON text.
        arguments: String,
        /// The call the model proposed, when the harness changed it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        proposed: Option<ecdysis_model::ToolCall>,
        /// The tool's answer, as the model sees it (or the harness's feedback
        /// when blocked).
        content: String,
        /// True when the tool answered with an error (it counts toward the
        /// tool-error cap).
        error: bool,
        /// The harness blocked the call; `content` is its feedback.
        blocked: bool,
        /// Where the call came from (the model, rewritten, rescued or forced).
        source: CallSource,
    },
    /// A note from the harness shown to the model (skills, injected
    /// recovery messages, feedback on text, annotations).
    Harness {
        /// Step at which the note was shown.
        step: u32,
        /// The hook that produced it (`skills`, `realize`, `regulate`).
        hook: String,
        /// The note as shown to the model.
        text: String,
    },
}

/// Token usage of one role in an episode.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoleUsage {
    /// Model calls answered, including those from the response cache (for
    /// the user side: every turn asked for, its tokens left to the ledger).
    pub calls: u64,
    /// Of `calls`, how many were replayed from the response cache.
    pub cache_hits: u64,
    /// Prompt tokens the endpoint reported, summed over the calls.
    pub prompt_tokens: u64,
    /// Completion tokens the endpoint reported, summed over the calls.
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, those served from the endpoint's prefix cache.
    pub cached_prompt_tokens: u64,
}

impl RoleUsage {
    /// Count one model call with its reported usage (`None` when the endpoint
    /// reported none); `cached` is true when the response came from the
    /// response cache.
    pub fn add(&mut self, usage: Option<&Usage>, cached: bool) {
        self.calls += 1;
        if cached {
            self.cache_hits += 1;
        }
        if let Some(u) = usage {
            self.prompt_tokens += u.prompt_tokens;
            self.completion_tokens += u.completion_tokens;
            self.cached_prompt_tokens += u.cached_prompt_tokens;
        }
    }
}

/// A finished episode: one line of `trajectories.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EpisodeRecord {
    /// The task this episode ran.
    pub task_id: String,
    /// Which repetition of the task (0-based).
    pub trial: u32,
    /// The domain's name (`airline`, `retail`, `dbbench`, ...).
    pub domain: String,
    /// The seed the episode's models were given.
    pub seed: u64,
    /// How the episode ended.
    pub end: EndReason,
    /// Details of the end (the error, the harness's stop reason...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_detail: Option<String>,
    /// Steps taken (message hops: agent responses, tool-result batches, user
    /// messages).
    pub steps: u32,
    /// Tool calls that answered with an error.
    pub tool_errors: u32,
    /// Everything that was said and run, in order.
    pub transcript: Vec<Entry>,
    /// Every hook call, with fuel and time.
    pub hooks: Vec<HookRecord>,
    /// Token usage of the agent under test.
    pub agent_usage: RoleUsage,
    /// The user simulator's turns (an LLM user's tokens are counted in the
    /// run's usage ledger, not here).
    pub user_usage: RoleUsage,
    /// Wall time of the whole episode, in milliseconds.
    pub wall_ms: u64,
    /// Part of `wall_ms` spent waiting for the agent and user models; the
    /// rest is the host's own work (harness, environment, bookkeeping).
    #[serde(default)]
    pub model_wait_ms: f64,
    /// Filled by the runner (the loop never sees the oracle).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluation: Option<serde_json::Value>,
    /// The task's reward in [0, 1], set by the runner's scoring (0 until
    /// scored).
    #[serde(default)]
    pub reward: f64,
    /// Whether the environment judged the task solved (set with `reward`).
    #[serde(default)]
    pub success: bool,
}

/// An [`EpisodeRecord`] read without its transcript and evaluation detail:
/// what run summaries need ([`crate::eval::metrics::compute`]). Those two
/// are most of a record's bytes, and serde skips fields a struct does not
/// name without building them, so reading an outline is a fraction of a
/// full parse.
#[derive(Deserialize)]
struct Outline {
    task_id: String,
    trial: u32,
    domain: String,
    seed: u64,
    end: EndReason,
    #[serde(default)]
    end_detail: Option<String>,
    steps: u32,
    tool_errors: u32,
    hooks: Vec<HookRecord>,
    agent_usage: RoleUsage,
    user_usage: RoleUsage,
    wall_ms: u64,
    #[serde(default)]
    model_wait_ms: f64,
    #[serde(default)]
    reward: f64,
    #[serde(default)]
    success: bool,
}

impl EpisodeRecord {
    /// Parse a record's JSON, leaving out its `transcript` (empty) and
    /// `evaluation` (`None`): for summaries of many stored records.
    pub fn outline_from_json(text: &str) -> Result<EpisodeRecord, serde_json::Error> {
        let o: Outline = serde_json::from_str(text)?;
        Ok(EpisodeRecord {
            task_id: o.task_id,
            trial: o.trial,
            domain: o.domain,
            seed: o.seed,
            end: o.end,
            end_detail: o.end_detail,
            steps: o.steps,
            tool_errors: o.tool_errors,
            transcript: Vec::new(),
            hooks: o.hooks,
            agent_usage: o.agent_usage,
            user_usage: o.user_usage,
            wall_ms: o.wall_ms,
            model_wait_ms: o.model_wait_ms,
            evaluation: None,
            reward: o.reward,
            success: o.success,
        })
    }
}

impl EpisodeRecord {
    /// A finished episode (`agent_stop`, one step, domain `retail`) with
    /// nothing in it but its identity and reward, for tests and tools to
    /// fill in further.
    pub fn bare(task_id: &str, trial: u32, reward: f64) -> EpisodeRecord {
        EpisodeRecord {
            task_id: task_id.into(),
            trial,
            domain: "retail".into(),
            seed: 0,
            end: EndReason::AgentStop,
            end_detail: None,
            steps: 1,
            tool_errors: 0,
            transcript: Vec::new(),
            hooks: Vec::new(),
            agent_usage: RoleUsage::default(),
            user_usage: RoleUsage::default(),
            wall_ms: 0,
            model_wait_ms: 0.0,
            evaluation: None,
            reward,
            success: reward >= 1.0,
        }
    }
}

impl EpisodeRecord {
    /// Hook calls whose answer changed something.
    pub fn interventions(&self) -> impl Iterator<Item = &HookRecord> {
        self.hooks
            .iter()
            .filter(|h| h.intervened || h.error.is_some())
    }

    /// The tool calls that ran (not blocked), the agent's and the user's in
    /// order, for evaluation.
    pub fn executed_calls(&self) -> Vec<ecdysis_env::ToolCall> {
        self.transcript
            .iter()
            .filter_map(|e| match e {
                Entry::Tool {
                    name,
                    arguments,
                    blocked: false,
                    source,
                    ..
                } => Some(ecdysis_env::ToolCall {
                    requestor: if *source == CallSource::User {
                        ecdysis_env::Requestor::User
                    } else {
                        ecdysis_env::Requestor::Assistant
                    },
                    ..super::boundary::env_call(name, arguments)
                }),
                _ => None,
            })
            .collect()
    }

    /// The system prompt the agent was shown (the transcript's system
    /// entry: the contract's prompt and any skills), if the episode got
    /// that far.
    pub fn system_prompt(&self) -> Option<&str> {
        self.transcript.iter().find_map(|e| match e {
            Entry::System { text } => Some(text.as_str()),
            _ => None,
        })
    }

    /// Every text the agent said, for evaluation (τ²'s COMMUNICATE check
    /// reads them all). The text of a message that also carries tool calls
    /// counts, as in τ²'s evaluator, which reads every assistant message's
    /// content; text the harness kept from the user (realized into calls or
    /// held back) does not: nobody was told it.
    pub fn agent_texts(&self) -> Vec<String> {
        self.transcript
            .iter()
            .filter_map(|e| match e {
                Entry::Agent {
                    text: Some(t),
                    withheld: None,
                    ..
                } => Some(t.clone()),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ecdysis_model::ToolCall;

    #[test]
    fn an_outline_is_the_record_without_its_transcript_and_evaluation() {
        let mut full = EpisodeRecord::bare("7", 2, 0.5);
        full.end_detail = Some("stopped".into());
        full.transcript = vec![
            Entry::System {
                text: "policy ".repeat(500),
            },
            agent(1, "hello", 2, None),
        ];
        full.evaluation = Some(serde_json::json!({"db_match": false, "nested": [1, {"a": "}"}]}));
        full.hooks = vec![crate::agent::HookRecord {
            step: 1,
            hook: "realize".into(),
            decision: serde_json::json!({"block": "no"}),
            intervened: true,
            fuel: 1234,
            micros: 56,
            added_bytes: 0,
            error: None,
            logs: vec!["line".into()],
        }];
        full.agent_usage.calls = 3;
        full.user_usage.cache_hits = 1;
        full.wall_ms = 99;
        full.model_wait_ms = 12.5;
        let text = serde_json::to_string(&full).unwrap();
        let outline = EpisodeRecord::outline_from_json(&text).unwrap();
        assert!(outline.transcript.is_empty() && outline.evaluation.is_none());
        let mut expected = full.clone();
        expected.transcript.clear();
        expected.evaluation = None;
        assert_eq!(
            serde_json::to_value(&outline).unwrap(),
            serde_json::to_value(&expected).unwrap()
        );
        // What summaries are computed from is the same.
        assert_eq!(
            serde_json::to_value(crate::eval::metrics::compute(&[outline])).unwrap(),
            serde_json::to_value(crate::eval::metrics::compute(&[full])).unwrap()
        );
        assert!(EpisodeRecord::outline_from_json("{\"task_id\": 1}").is_err());
    }

    fn agent(step: u32, text: &str, calls: usize, withheld: Option<Withheld>) -> Entry {
        Entry::Agent {
            step,
            text: Some(text.into()),
            tool_calls: (0..calls)
                .map(|i| ToolCall::new(format!("c{i}"), "calculate", "{}"))
                .collect(),
            testbed: None,
            withheld,
        }
    }

    #[test]
    fn text_beside_tool_calls_counts_and_withheld_text_does_not() {
        let mut r = EpisodeRecord::bare("68", 0, 0.0);
        r.transcript = vec![
            agent(0, "Hi! How can I help you today?", 0, None),
            // τ²'s evaluator reads the content of every assistant message,
            // tool calls or not (retail task 68's total said with a call).
            agent(3, "Your order total was 829.43 dollars", 1, None),
            agent(5, "{\"name\": \"calculate\"}", 0, Some(Withheld::Realized)),
            agent(7, "the refund is 10 dollars", 0, Some(Withheld::Blocked)),
            agent(9, "Anything else?", 0, None),
        ];
        assert_eq!(
            r.agent_texts(),
            vec![
                "Hi! How can I help you today?",
                "Your order total was 829.43 dollars",
                "Anything else?"
            ]
        );
    }
}

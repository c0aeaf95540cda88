//! What an episode leaves behind: the trajectory evolution reads later.

use serde::{Deserialize, Serialize};

use super::session::HookRecord;
use crate::model::Usage;

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
        }
    }

    /// The environment's notion, for evaluation (only stops earn reward).
    pub fn termination(self) -> crate::env::Termination {
        use crate::env::Termination as T;
        match self {
            EndReason::AgentStop => T::AgentStop,
            EndReason::UserStop => T::UserStop,
            EndReason::MaxSteps => T::MaxSteps,
            EndReason::TooManyErrors => T::TooManyErrors,
            EndReason::HarnessError | EndReason::HarnessStop => T::JudgeStop,
            EndReason::ModelError | EndReason::InfrastructureError => T::AgentError,
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
        tool_calls: Vec<crate::model::ToolCall>,
        /// Testbed ground truth (simulated models only): quirks that fired.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        testbed: Option<crate::model::TestbedNote>,
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
        proposed: Option<crate::model::ToolCall>,
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

#[cfg(test)]
impl EpisodeRecord {
    /// A finished episode with nothing in it but its identity and reward,
    /// for unit tests to fill in further.
    pub(crate) fn bare(task_id: &str, trial: u32, reward: f64) -> EpisodeRecord {
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

    /// The tool calls that ran (not blocked), for evaluation.
    pub fn executed_calls(&self) -> Vec<crate::env::ToolCall> {
        self.transcript
            .iter()
            .filter_map(|e| match e {
                Entry::Tool {
                    name,
                    arguments,
                    blocked: false,
                    ..
                } => Some(super::boundary::env_call(name, arguments)),
                _ => None,
            })
            .collect()
    }

    /// Every text the agent said to the user, for evaluation.
    pub fn agent_texts(&self) -> Vec<String> {
        self.transcript
            .iter()
            .filter_map(|e| match e {
                Entry::Agent {
                    text: Some(t),
                    tool_calls,
                    ..
                } if tool_calls.is_empty() => Some(t.clone()),
                _ => None,
            })
            .collect()
    }
}

//! The harness side of an episode: runs hooks off the async runtime, applies
//! the failure policy and records every call.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use ecdysis_sandbox::sandbox::{
    ActionDecision, AgentAction, ContractInput, ContractOutput, EpisodeInfo, FailurePolicy,
    Guidance, HarnessEpisode, Hooked, Layer, LayerSet, LoadedHarness, ReadOnlyEnv, Regulation,
    SandboxError, StepReport, TaskView, ToolSpec,
};

/// One hook call as the trajectory records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookRecord {
    /// Episode step at which the hook ran.
    pub step: u32,
    /// `constructor`, `contract`, `skills`, `realize` or `regulate`.
    pub hook: String,
    /// The decision (the hook's answer), or the neutral answer used after a
    /// fail-open failure. A `contract` decision's system prompt is recorded
    /// as its length only (see [`slim_contract_decision`]).
    pub decision: serde_json::Value,
    /// Whether the decision changed anything (not the neutral answer).
    pub intervened: bool,
    /// Fuel the call burnt, also when it failed (all of `fuel_per_hook`
    /// when it ran out): what the tenant's daily fuel is charged.
    pub fuel: u64,
    /// Wall time of the call, in microseconds (0 when it failed).
    pub micros: u64,
    /// Bytes of text the answer put in front of the model (the sandbox's
    /// `added` count; 0 for a neutral or failed answer).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub added_bytes: u64,
    /// The typed failure, if the hook failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<HookFailure>,
    /// Lines the harness logged during the call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A failed hook call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookFailure {
    /// The [`SandboxError`] kind (`out_of_fuel`, `deadline`, `trap`, ...).
    pub kind: String,
    /// The error's message.
    pub message: String,
    /// The policy that was applied: `fail-open` or `fail-closed`.
    pub policy: FailurePolicy,
}

/// The outcome of a hook for the loop.
#[derive(Debug)]
pub enum HookOutcome<T> {
    /// Use this value (the hook's answer, or the neutral one under fail-open).
    Use(T),
    /// The hook failed under fail-closed: end the episode as `harness_error`.
    End(String),
    /// The host could not run the harness at all (its instance pool is
    /// full): end the episode as an infrastructure error.
    Unavailable(String),
}

/// A harness instance for one episode, or none (the Direct baseline).
pub struct HarnessSession {
    episode: Option<HarnessEpisode>,
    policy: FailurePolicy,
    layers: LayerSet,
    records: Vec<HookRecord>,
    active: bool,
    place: CallPlace,
}

/// Where the agent loop runs a synchronous call (a hook, a tool call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallPlace {
    /// On the current thread, an async worker: for calls that never wait
    /// (an in-memory environment, and hooks over it). A hook is bounded by
    /// its fuel and deadline, so it holds the worker for at most that long;
    /// the guest's WASI I/O never blocks (`sandbox::sync_io`).
    Inline,
    /// On Tokio's blocking pool: for calls that may wait on a server
    /// (DBBench's SQL), which must not stall the runtime's workers.
    BlockingPool,
}

impl CallPlace {
    /// The place for calls into `env` and hooks that view it.
    pub fn for_env(env: &dyn ecdysis_env::Environment) -> Self {
        if env.calls_may_block() {
            CallPlace::BlockingPool
        } else {
            CallPlace::Inline
        }
    }

    /// Runs `f` here; `Err` is a task that panicked or was cancelled on
    /// the blocking pool (an inline call's panic propagates, as any other
    /// code of the loop's).
    pub async fn run<R, F>(self, f: F) -> Result<R, tokio::task::JoinError>
    where
        R: Send + 'static,
        F: FnOnce() -> R + Send + 'static,
    {
        match self {
            CallPlace::Inline => Ok(f()),
            CallPlace::BlockingPool => tokio::task::spawn_blocking(f).await,
        }
    }
}

/// The recorded form of a `contract` decision: its system prompt is left
/// out (the transcript's system entry starts with it, followed by any
/// skills) and its length in characters put in its place as
/// `system_prompt_chars`. The prompt is the largest text of an episode (7 KiB
/// for τ² retail); recording it twice made a pass-through harness's record
/// half again as large, and serialising, writing and freeing it was a share
/// of the runner's host CPU (`bench --runner`).
pub fn slim_contract_decision(decision: serde_json::Value) -> serde_json::Value {
    let serde_json::Value::Object(mut fields) = decision else {
        return decision;
    };
    if let Some(serde_json::Value::String(prompt)) = fields.remove("system_prompt") {
        let mut slim = serde_json::Map::with_capacity(fields.len() + 1);
        slim.insert(
            "system_prompt_chars".into(),
            serde_json::Value::from(prompt.chars().count()),
        );
        slim.extend(fields);
        return serde_json::Value::Object(slim);
    }
    serde_json::Value::Object(fields)
}

fn summarize<T: Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

impl HarnessSession {
    /// No harness: every hook answers neutrally and nothing is recorded.
    pub fn none() -> Self {
        HarnessSession {
            episode: None,
            policy: FailurePolicy::FailClosed,
            layers: LayerSet::NONE,
            records: Vec::new(),
            active: false,
            place: CallPlace::BlockingPool,
        }
    }

    /// Instantiate `harness` for an episode, with only `layers`' hooks
    /// called. A constructor failure follows the policy like any hook:
    /// fail-open continues without a harness.
    pub async fn start(
        harness: &LoadedHarness,
        info: EpisodeInfo,
        tools: Vec<ToolSpec>,
        env: Box<dyn ReadOnlyEnv>,
        policy: FailurePolicy,
        layers: LayerSet,
        place: CallPlace,
    ) -> (Self, HookOutcome<()>) {
        let harness = harness.clone();
        let started = place
            .run(move || {
                harness
                    .start_episode_metered(&info, &tools, env)
                    .map(|ep| (ep.constructor_fuel(), ep))
            })
            .await
            .unwrap_or_else(|e| Err((SandboxError::Engine(format!("hook task failed: {e}")), 0)));
        let mut session = HarnessSession {
            episode: None,
            policy,
            layers,
            records: Vec::new(),
            active: true,
            place,
        };
        match started {
            Ok((fuel, ep)) => {
                session.episode = Some(ep);
                session.records.push(HookRecord {
                    step: 0,
                    hook: "constructor".into(),
                    decision: serde_json::Value::Null,
                    intervened: false,
                    fuel,
                    micros: 0,
                    added_bytes: 0,
                    error: None,
                    logs: vec![],
                });
                (session, HookOutcome::Use(()))
            }
            // A full instance pool is the host's capacity, not the
            // harness's fault: the episode never started, so the caller ends
            // it as an infrastructure error (requeued, never scored).
            Err((SandboxError::PoolExhausted { detail }, _)) => {
                session.active = false;
                (session, HookOutcome::Unavailable(detail))
            }
            Err((e, fuel)) => {
                let outcome = session.failed(0, "constructor", e, fuel, serde_json::Value::Null);
                let outcome = match outcome {
                    HookOutcome::Use(_) => HookOutcome::Use(()),
                    HookOutcome::End(m) => HookOutcome::End(m),
                    HookOutcome::Unavailable(m) => HookOutcome::Unavailable(m),
                };
                (session, outcome)
            }
        }
    }

    /// True when a harness is attached (even if it has failed since).
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// Every hook call so far.
    pub fn records(&self) -> &[HookRecord] {
        &self.records
    }

    /// Every hook call of the episode, taken for its
    /// [`EpisodeRecord`](super::record::EpisodeRecord).
    pub fn into_records(self) -> Vec<HookRecord> {
        self.records
    }

    /// Record a failed hook and apply the failure policy: the one place
    /// it is applied. Under fail-open the neutral answer is used (and
    /// recorded as the decision); under fail-closed nothing was decided
    /// (a null decision) and the episode ends.
    fn failed<T: Serialize>(
        &mut self,
        step: u32,
        hook: &str,
        error: SandboxError,
        fuel: u64,
        neutral: T,
    ) -> HookOutcome<T> {
        let message = error.to_string();
        let decision = match self.policy {
            FailurePolicy::FailOpen => summarize(&neutral),
            FailurePolicy::FailClosed => serde_json::Value::Null,
        };
        self.records.push(HookRecord {
            step,
            hook: hook.to_string(),
            decision,
            intervened: false,
            fuel,
            micros: 0,
            added_bytes: 0,
            error: Some(HookFailure {
                kind: error.kind().to_string(),
                message: message.clone(),
                policy: self.policy,
            }),
            logs: vec![],
        });
        match self.policy {
            FailurePolicy::FailOpen => HookOutcome::Use(neutral),
            FailurePolicy::FailClosed => HookOutcome::End(message),
        }
    }

    /// Run one hook where the session's [`CallPlace`] says, then apply the
    /// policy and record it. A switched-off layer's hook is not called and
    /// leaves no record: its neutral answer is used.
    async fn run<T, F>(
        &mut self,
        step: u32,
        hook: &'static str,
        call: F,
        neutral: T,
        is_neutral: impl FnOnce(&T) -> bool,
    ) -> HookOutcome<T>
    where
        T: Serialize + Send + 'static,
        F: FnOnce(&mut HarnessEpisode) -> Result<Hooked<T>, SandboxError> + Send + 'static,
    {
        if Layer::of_hook(hook).is_some_and(|l| !self.layers.contains(l)) {
            return HookOutcome::Use(neutral);
        }
        let Some(mut ep) = self.episode.take() else {
            if !self.active {
                return HookOutcome::Use(neutral);
            }
            // Attached but poisoned by an earlier fail-open failure.
            return self.failed(step, hook, SandboxError::Poisoned, 0, neutral);
        };
        let joined = self
            .place
            .run(move || {
                let r = call(&mut ep);
                (ep, r)
            })
            .await;
        let (ep, result) = match joined {
            Ok(pair) => pair,
            Err(e) => {
                return self.failed(
                    step,
                    hook,
                    SandboxError::Engine(format!("hook task failed: {e}")),
                    0,
                    neutral,
                );
            }
        };
        let h = match result {
            Ok(h) => h,
            // The instance is poisoned: it is not put back.
            Err(error) => {
                let fuel = ep.last_call_fuel();
                return self.failed(step, hook, error, fuel, neutral);
            }
        };
        self.episode = Some(ep);
        let intervened = !is_neutral(&h.value);
        self.records.push(HookRecord {
            step,
            hook: hook.to_string(),
            decision: summarize(&h.value),
            intervened,
            fuel: h.fuel,
            micros: duration_micros(h.elapsed),
            added_bytes: h.added_bytes,
            error: None,
            logs: h
                .logs
                .iter()
                .map(|l| format!("{}: {}", l.level, l.message))
                .collect(),
        });
        HookOutcome::Use(h.value)
    }

    /// The `contract` hook, once at the start: rewrite the system prompt and
    /// tool descriptions. Neutral answer: the prompt unchanged, no
    /// descriptions.
    pub async fn contract(&mut self, input: ContractInput) -> HookOutcome<ContractOutput> {
        let neutral = ContractOutput {
            system_prompt: input.system_prompt.clone(),
            tool_descriptions: vec![],
        };
        let original = input.system_prompt.clone();
        let outcome = self
            .run(
                0,
                "contract",
                move |ep| ep.contract(&input),
                neutral,
                move |o| o.system_prompt == original && o.tool_descriptions.is_empty(),
            )
            .await;
        if let Some(record) = self.records.last_mut().filter(|r| r.hook == "contract") {
            record.decision = slim_contract_decision(std::mem::take(&mut record.decision));
        }
        outcome
    }

    /// The `skills` hook, once after the user's first message: guidance that
    /// joins the system prompt. Neutral answer: no guidance.
    pub async fn skills(&mut self, step: u32, view: TaskView) -> HookOutcome<Vec<Guidance>> {
        self.run(
            step,
            "skills",
            move |ep| ep.skills(&view),
            vec![],
            Vec::is_empty,
        )
        .await
    }

    /// The `realize` hook: decide on an agent action (a tool call before it
    /// runs, or a message without calls): proceed, execute another call,
    /// block, or realize text as calls. Neutral answer: proceed.
    pub async fn realize(&mut self, step: u32, action: AgentAction) -> HookOutcome<ActionDecision> {
        self.run(
            step,
            "realize",
            move |ep| ep.realize(&action),
            ActionDecision::Proceed,
            |d| *d == ActionDecision::Proceed,
        )
        .await
    }

    /// The `regulate` hook, after every step: continue, annotate, inject a
    /// note, force a call or stop. Neutral answer: continue.
    pub async fn regulate(&mut self, report: StepReport) -> HookOutcome<Regulation> {
        let step = report.step;
        self.run(
            step,
            "regulate",
            move |ep| ep.regulate(&report),
            Regulation::Continue,
            |r| *r == Regulation::Continue,
        )
        .await
    }
}

fn duration_micros(d: Duration) -> u64 {
    d.as_micros().min(u128::from(u64::MAX)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contract_decision_is_recorded_without_its_prompt_but_with_its_length() {
        let decision = serde_json::json!({
            "system_prompt": "héllo",
            "tool_descriptions": [{"name": "t", "description": "d"}],
        });
        let slim = slim_contract_decision(decision);
        assert_eq!(
            slim,
            serde_json::json!({
                "system_prompt_chars": 5,
                "tool_descriptions": [{"name": "t", "description": "d"}],
            })
        );
        // Anything else (a failed hook's null, another shape) is kept as is.
        assert_eq!(
            slim_contract_decision(serde_json::Value::Null),
            serde_json::Value::Null
        );
        let other = serde_json::json!({"tool_descriptions": []});
        assert_eq!(slim_contract_decision(other.clone()), other);
    }
}

//! The environment contract every benchmark implements: what a domain is
//! ([`Domain`]: policy, tool specs, tasks and splits, fresh environments,
//! evaluation), one episode's mutable state ([`Environment`]), tool calls
//! and their results, trajectories and evaluations, and the helpers a
//! benchmark's own crate shares (seeded splits, gold replays, the
//! do-nothing floor).
//!
//! The benchmarks live in crates of their own beside this one
//! (`ecdysis-tau2`, `ecdysis-dbbench`, `ecdysis-agentbench-os`), each
//! knowing nothing of the others, and `ecdysis-domains` opens one by name
//! (a [`DomainOpener`] the binary hands to the layers between).
//! This crate depends on no benchmark and no layer above it: a new
//! benchmark implements [`Domain`] and [`TaskOracle`] in its own crate and
//! adds one line to the registry.
//!
//! A task comes in two halves. [`VisibleTask`] is what the agent (and the
//! harness, and any diagnosis prompt) may see. [`Oracle`] is opaque to
//! everyone but the benchmark that made it: it holds the user scenario,
//! gold actions and evaluation criteria (the benchmark's own
//! [`TaskOracle`] type, read back with [`Oracle::task`]) — for the
//! evaluator ([`Domain::evaluate`]) and for the user simulator
//! ([`Oracle::user_system_prompt`]).
//!
//! Library entry points for the CLI (`env call`, `env gold`, `tasks`) are
//! [`run_calls`], [`replay_gold`], [`list_tasks`] and [`do_nothing_floor`].

mod error;
mod options;
mod scenario;

use std::any::Any;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use error::EnvError;
pub use options::{DomainOpener, DomainOptions, SqlMode, UnknownSqlMode};
pub use scenario::{
    EMPTY_OBSERVATION, FROM_LAST_OUTPUT, GoldPlan, OBSERVATION_PREFIX, UserScript, printed_in,
};

/// Default cap on message hops per episode (τ²'s `DEFAULT_MAX_STEPS`).
pub const DEFAULT_MAX_STEPS: u32 = 200;

/// Default cap on tool errors per episode, cumulative (τ²'s
/// `DEFAULT_MAX_ERRORS`).
pub const DEFAULT_MAX_ERRORS: u32 = 10;

/// A tool as the model sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Function name, e.g. `get_order_details`.
    pub name: String,
    /// Description shown to the model.
    pub description: String,
    /// JSON Schema of the arguments object (OpenAI `parameters`). Shared:
    /// every episode hands the same schemas to the model.
    pub parameters: Arc<serde_json::Value>,
    /// Whether calling the tool can change the environment's state.
    pub mutates: bool,
    /// `parameters` as JSON text, made once (the WIT world carries the
    /// schema as text, to every episode's `contract` and `episode` calls).
    #[serde(skip)]
    parameters_text: std::sync::OnceLock<Arc<str>>,
}

impl ToolSpec {
    /// A tool from its parts.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: serde_json::Value,
        mutates: bool,
    ) -> Self {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters: Arc::new(parameters),
            mutates,
            parameters_text: std::sync::OnceLock::new(),
        }
    }

    /// `parameters` as compact JSON text, serialised on first use.
    pub fn parameters_text(&self) -> &str {
        self.parameters_text
            .get_or_init(|| Arc::from(self.parameters.to_string()))
    }

    /// The OpenAI function-calling form:
    /// `{"type": "function", "function": {name, description, parameters}}`.
    pub fn openai_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        })
    }
}

/// Who makes a tool call (τ²'s `ToolCall.requestor`): the agent, or, in a
/// dual-control domain (τ² telecom), the user on their own device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Requestor {
    /// The agent under test.
    #[default]
    Assistant,
    /// The user (simulator), through the domain's user tools.
    User,
}

impl Requestor {
    /// Whether this is the agent (the default, left out of records).
    pub fn is_assistant(&self) -> bool {
        *self == Requestor::Assistant
    }
}

/// A tool call: a name, a JSON arguments object, and who made it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Tool name.
    pub name: String,
    /// Arguments (a JSON object; anything else is an error result).
    #[serde(default = "empty_object")]
    pub arguments: serde_json::Value,
    /// Who called: the agent unless the record says `user`.
    #[serde(default, skip_serializing_if = "Requestor::is_assistant")]
    pub requestor: Requestor,
}

impl ToolCall {
    /// A call by the agent.
    pub fn agent(name: impl Into<String>, arguments: serde_json::Value) -> Self {
        ToolCall {
            name: name.into(),
            arguments,
            requestor: Requestor::Assistant,
        }
    }
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

/// The result of a tool call, exactly as the model sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolOutput {
    /// The text the model reads: the tool's result, or `Error: ...`.
    pub content: String,
    /// Whether the call failed (counts toward the episode's error cap).
    pub error: bool,
}

/// One episode's environment state.
pub trait Environment: Send + Sync {
    /// Domain name, e.g. `tau2/retail`.
    fn domain(&self) -> &str;

    /// Tool specs, in the reference's order.
    fn tools(&self) -> &[ToolSpec];

    /// Runs a tool call and returns what the model would see. Never
    /// panics: unknown tools and bad arguments are error results.
    fn call(&mut self, name: &str, arguments: &serde_json::Value) -> ToolOutput;

    /// The user's tools in a dual-control domain (τ² telecom's phone);
    /// empty elsewhere. Only the user simulator calls them: the agent's
    /// tool list and a harness's view never include them.
    fn user_tools(&self) -> &[ToolSpec] {
        &[]
    }

    /// Runs a tool call made by the user (simulator) on their side of the
    /// state. The default, for domains without user tools, is an error
    /// result naming the tool.
    fn call_user(&mut self, name: &str, arguments: &serde_json::Value) -> ToolOutput {
        let _ = arguments;
        ToolOutput {
            content: format!(
                "Error: {} has no user tools (`{name}` was called by the user)",
                self.domain()
            ),
            error: true,
        }
    }

    /// Runs a call as its requestor says: [`Environment::call`] for the
    /// agent, [`Environment::call_user`] for the user.
    fn call_as(&mut self, call: &ToolCall) -> ToolOutput {
        match call.requestor {
            Requestor::Assistant => self.call(&call.name, &call.arguments),
            Requestor::User => self.call_user(&call.name, &call.arguments),
        }
    }

    /// Hex digest of the current state, comparable with the reference's
    /// (`sha256` of `json.dumps(db.model_dump(), sort_keys=True)` for τ²).
    fn state_hash(&self) -> String;

    /// Whether a call (or a harness's read-only view of the state) may
    /// wait on something outside the process, such as a database server.
    /// When it cannot, the agent loop runs calls and hooks on the async
    /// runtime's own threads instead of handing each to the blocking pool
    /// (two thread switches per call). The safe default is `true`.
    fn calls_may_block(&self) -> bool {
        true
    }

    /// The state the episode ended in, for [`Domain::evaluate_final`]:
    /// scoring from it skips replaying the episode's calls on a fresh
    /// state. `None` (the default) when the domain cannot hand it over, and
    /// scoring replays.
    fn into_final_state(self: Box<Self>) -> Option<FinalState> {
        None
    }
}

/// An episode's final environment state, opaque outside the domain that
/// made it (see [`Environment::into_final_state`]).
pub struct FinalState(Box<dyn std::any::Any + Send>);

impl FinalState {
    /// Wraps a domain's own state type.
    pub fn new<T: std::any::Any + Send>(state: T) -> Self {
        FinalState(Box::new(state))
    }

    /// The state, if it is a `T`.
    pub fn downcast<T: std::any::Any>(self) -> Option<T> {
        self.0.downcast::<T>().ok().map(|b| *b)
    }
}

impl std::fmt::Debug for FinalState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FinalState")
    }
}

/// What the agent may see of a task.
///
/// In τ² the agent speaks first with a fixed greeting
/// ([`VisibleTask::agent_greeting`]) and the user's first message comes from
/// the user simulator, so `first_user_message` is `None` for τ² tasks; it is
/// there for domains whose tasks open with a fixed user message.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VisibleTask {
    /// Task id, unique within the domain.
    pub id: String,
    /// Domain name, e.g. `tau2/airline`.
    pub domain: String,
    /// The domain policy (part of the agent's system prompt).
    #[serde(skip)]
    pub policy: Arc<str>,
    /// The user's opening message, when the task fixes one.
    pub first_user_message: Option<String>,
    /// The agent's fixed opening message.
    pub agent_greeting: &'static str,
}

/// What a benchmark keeps in a task's hidden half: its own task type
/// (τ²'s criteria, a DBBench task...) answers for the user simulator and
/// the testbed agents; the benchmark's evaluator reads it back whole with
/// [`Oracle::task`]. A trait, not an enum of every benchmark, so this
/// crate names none of them.
pub trait TaskOracle: Any + Send + Sync {
    /// The task's natural-language assertions, for an optional LLM judge
    /// (none by default).
    fn nl_assertions(&self) -> Vec<String> {
        Vec::new()
    }

    /// The task's user scenario as text (persona and instructions),
    /// without any simulation guidelines; empty with no user in the loop.
    fn user_scenario(&self) -> String {
        String::new()
    }

    /// The task's structured user instructions for the offline scripted
    /// user; only the task id with no user in the loop.
    fn user_script(&self, task_id: &str) -> UserScript {
        UserScript {
            task_id: task_id.to_string(),
            ..Default::default()
        }
    }

    /// **Testbed only.** The gold agent actions a `sim:` agent follows and
    /// the strings it must say.
    fn gold_steps(&self) -> (Vec<ToolCall>, Vec<String>);
}

/// The hidden half of a task. Opaque outside the benchmark that made it:
/// it can be passed around but not read, except for the user simulator's
/// prompt (its `Debug` output shows only the task id).
#[derive(Clone)]
pub struct Oracle {
    domain: String,
    task_id: String,
    user_system_prompt: Arc<str>,
    inner: Arc<dyn TaskOracle>,
}

impl std::fmt::Debug for Oracle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oracle")
            .field("domain", &self.domain)
            .field("task_id", &self.task_id)
            .finish_non_exhaustive()
    }
}

impl Oracle {
    /// A task's hidden half, made by its benchmark.
    pub fn new(
        domain: impl Into<String>,
        task_id: impl Into<String>,
        user_system_prompt: Arc<str>,
        task: Arc<dyn TaskOracle>,
    ) -> Oracle {
        Oracle {
            domain: domain.into(),
            task_id: task_id.into(),
            user_system_prompt,
            inner: task,
        }
    }

    /// The benchmark's own task type, if this oracle holds a `T` made for
    /// the domain `domain` (a benchmark's evaluator reads its task back).
    pub fn task<T: TaskOracle>(&self, domain: &str) -> Option<&T> {
        if self.domain != domain {
            return None;
        }
        let any: &dyn Any = self.inner.as_ref();
        any.downcast_ref::<T>()
    }

    /// The benchmark's own task type as [`Oracle::task`] reads it, or the
    /// error a domain returns for an oracle that is not its own.
    pub fn task_for<T: TaskOracle>(&self, domain: &str) -> Result<&T, EnvError> {
        self.task::<T>(domain)
            .ok_or_else(|| EnvError::OracleMismatch {
                task: self.task_id.clone(),
                oracle_domain: self.domain.clone(),
                domain: domain.to_string(),
            })
    }

    /// The task this oracle belongs to.
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// The domain this oracle belongs to.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The user simulator's system prompt: τ²'s simulation guidelines
    /// followed by the task's scenario in `<scenario>` tags. For the user
    /// simulator only.
    pub fn user_system_prompt(&self) -> &str {
        &self.user_system_prompt
    }

    /// The task's natural-language assertions, for an optional LLM judge
    /// (τ² does not score them for airline and retail).
    pub fn nl_assertions(&self) -> Vec<String> {
        self.inner.nl_assertions()
    }

    /// The task's user scenario as text (persona and instructions), without
    /// any simulation guidelines: for a user simulator that brings its own.
    pub fn user_scenario(&self) -> String {
        self.inner.user_scenario()
    }

    /// The task's structured user instructions, for the offline scripted
    /// user.
    pub fn user_script(&self) -> UserScript {
        self.inner.user_script(&self.task_id)
    }

    /// **Testbed only.** The gold plan a `sim:` agent follows: the task's
    /// gold agent actions and the strings the agent must say. A run driven
    /// by it is a testbed run, never a benchmark result.
    pub fn gold_plan(&self) -> GoldPlan {
        let (actions, communicate) = self.inner.gold_steps();
        GoldPlan {
            task_id: self.task_id.clone(),
            domain: self.domain.clone(),
            actions,
            communicate,
        }
    }
}

/// Why an episode ended (τ²'s `TerminationReason`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Termination {
    /// The agent ended the conversation.
    #[default]
    AgentStop,
    /// The user (simulator) ended the conversation.
    UserStop,
    /// The step cap was reached.
    MaxSteps,
    /// The tool-error cap was reached.
    TooManyErrors,
    /// The agent failed (e.g. an API error).
    AgentError,
    /// The user simulator failed.
    UserError,
    /// Stopped by an external judge (e.g. a stuck loop).
    JudgeStop,
}

impl Termination {
    /// Whether the episode ended normally (only then can it earn reward).
    pub fn is_stop(self) -> bool {
        matches!(self, Termination::AgentStop | Termination::UserStop)
    }
}

/// What the evaluator needs from an episode.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Trajectory {
    /// The tool calls that ran, in order (calls blocked before execution
    /// are not part of it; calls that returned an error are).
    pub tool_calls: Vec<ToolCall>,
    /// The text of every assistant message, in order (the greeting
    /// included; the COMMUNICATE check searches them all).
    pub assistant_texts: Vec<String>,
    /// How the episode ended.
    pub termination: Termination,
}

/// A `communicate_info` check.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CommunicateCheck {
    /// The string that had to be said.
    pub info: String,
    /// Whether an assistant message contained it.
    pub met: bool,
}

/// A gold-action check (diagnostic).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ActionCheck {
    /// `action_id` of the gold action.
    pub action_id: String,
    /// Tool name of the gold action.
    pub name: String,
    /// Whether some call matched it (name and compared arguments).
    pub matched: bool,
}

/// The result of evaluating an episode.
///
/// It is derived from the oracle (gold action names, communicate strings):
/// keep it away from the agent and the harness.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Evaluation {
    /// The reward: product of the reward-basis checks, 0 unless the episode
    /// ended by agent or user stop.
    pub reward: f64,
    /// `|reward - 1| <= 1e-6`.
    pub success: bool,
    /// The episode did not end by agent or user stop (reward forced to 0;
    /// the checks are still reported).
    pub premature: bool,
    /// DB check: replaying the calls yields the gold database.
    pub db_match: bool,
    /// Hash of the database after the episode, when it is free: the gold
    /// hash when the states match. Empty (and left out of the record) when
    /// they differ, where [`Evaluation::db_diff`] says how; `env call`
    /// prints the hash of any state. (τ²'s hash is one sequential sha256
    /// over the whole sorted dump, so a changed entity means rehashing
    /// every collection after it: about a third of the host's scoring CPU
    /// for a hash nothing reads.)
    #[serde(skip_serializing_if = "String::is_empty")]
    pub final_db_hash: String,
    /// When the states differ: the entities that differ from gold, as
    /// `collection/key` (at most [`DB_DIFF_LIMIT`], in the database's
    /// order), with `collection` alone for a collection whose key set
    /// differs. Empty when they match.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub db_diff: Vec<String>,
    /// Hash of the database after replaying the gold actions.
    pub gold_db_hash: String,
    /// COMMUNICATE check.
    pub communicate_ok: bool,
    /// Per-string COMMUNICATE results.
    pub communicate_checks: Vec<CommunicateCheck>,
    /// ACTION check (diagnostic, not part of the reward here).
    pub action_ok: bool,
    /// Per-action results.
    pub action_checks: Vec<ActionCheck>,
    /// The task's reward basis, e.g. `["DB", "COMMUNICATE"]`.
    pub reward_basis: Vec<String>,
    /// ENV_ASSERTION check (τ² telecom): every assertion met.
    #[serde(skip_serializing_if = "is_true")]
    pub env_assertion_ok: bool,
    /// Per-assertion results, in the task's order (empty for domains
    /// without env assertions).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env_assertion_checks: Vec<AssertionCheck>,
}

fn is_true(b: &bool) -> bool {
    *b
}

/// An `env_assertions` check: a function of the agent's or the user's
/// toolkit run on the final state, and whether it returned the asserted
/// value.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AssertionCheck {
    /// Whose toolkit: `assistant` or `user`.
    pub env_type: Requestor,
    /// The function.
    pub func_name: String,
    /// Whether it returned the asserted value.
    pub met: bool,
    /// Why it could not be evaluated (the function raised), if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Most entities an [`Evaluation::db_diff`] lists.
pub const DB_DIFF_LIMIT: usize = 20;

/// How an episode of a domain runs: what the agent loop needs to know
/// beyond tools and tasks. The default is τ²'s protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Protocol {
    /// A user simulator answers every agent message without tool calls
    /// (τ²: the agent greets first and `###STOP###` ends the episode).
    /// Without one, the task's first user message opens the episode and
    /// `no_call_reply` answers a message without tool calls.
    pub user_simulator: bool,
    /// The fixed reply to an agent message without tool calls when there
    /// is no user simulator.
    pub no_call_reply: Option<String>,
    /// The tools whose executed call ends the episode (an agent stop).
    pub final_tools: Vec<String>,
    /// Cap on agent turns (model responses), besides the step cap.
    pub max_agent_turns: Option<u32>,
    /// Whether tool errors count toward the run's error cap.
    pub tool_errors_capped: bool,
    /// Only the first tool call of a response runs (AgentBench OS); the
    /// others are dropped from the conversation unanswered.
    pub first_call_only: bool,
}

impl Default for Protocol {
    fn default() -> Self {
        Protocol {
            user_simulator: true,
            no_call_reply: None,
            final_tools: Vec::new(),
            max_agent_turns: None,
            tool_errors_capped: true,
            first_call_only: false,
        }
    }
}

/// A loaded benchmark domain.
pub trait Domain: Send + Sync {
    /// Domain name, e.g. `tau2/retail`.
    fn name(&self) -> &str;

    /// The domain policy text.
    fn policy(&self) -> &str;

    /// The agent's system prompt as the reference builds it from the
    /// policy.
    fn system_prompt(&self) -> String;

    /// Tool specs, in the reference's order.
    fn tools(&self) -> &[ToolSpec];

    /// The user's tool specs in a dual-control domain (τ² telecom), in the
    /// reference's order; empty elsewhere. For the user simulator only.
    fn user_tools(&self) -> &[ToolSpec] {
        &[]
    }

    /// Split names (e.g. `base`, `train`, `test`).
    fn splits(&self) -> Vec<String>;

    /// The tasks of a split (all tasks for `None`), visible half only.
    fn tasks(&self, split: Option<&str>) -> Result<Vec<VisibleTask>, EnvError>;

    /// One task: its visible half and its oracle.
    fn task(&self, id: &str) -> Result<(VisibleTask, Oracle), EnvError>;

    /// A fresh environment on the pristine state (cheap: copy-on-write).
    fn new_env(&self) -> Box<dyn Environment>;

    /// A fresh environment for one task's episode. Domains whose state
    /// depends on the task (DBBench's table) override it; it can fail when
    /// the state lives in a server.
    fn new_env_for(&self, task: &VisibleTask) -> Result<Box<dyn Environment>, EnvError> {
        let _ = task;
        Ok(self.new_env())
    }

    /// How an episode runs (default: τ²'s protocol).
    fn protocol(&self) -> Protocol {
        Protocol::default()
    }

    /// Evaluates an episode against a task's oracle.
    fn evaluate(&self, oracle: &Oracle, run: &Trajectory) -> Result<Evaluation, EnvError>;

    /// Evaluates an episode given the state it ended in, which equals the
    /// state replaying its calls on a fresh environment gives (tools are
    /// deterministic functions of state and arguments, and a harness's
    /// view of the state cannot call a mutating tool). The default ignores
    /// the state and replays.
    fn evaluate_final(
        &self,
        oracle: &Oracle,
        run: &Trajectory,
        final_state: Option<FinalState>,
    ) -> Result<Evaluation, EnvError> {
        let _ = final_state;
        self.evaluate(oracle, run)
    }

    /// The ideal episode of a task: its gold actions as tool calls, one
    /// assistant message per `communicate_info` string, ended by the agent.
    fn gold_trajectory(&self, oracle: &Oracle) -> Result<Trajectory, EnvError>;
}

/// A seeded train/test split: within each group, the ids are ordered by
/// `blake3("<salt>/<seed>/<id>")` and the first half (rounded down) goes to
/// `train`, the rest to `test`, so every group with two or more tasks is on
/// both sides. `items` are `(group, id)` pairs.
pub fn seeded_halves<'a>(
    items: impl IntoIterator<Item = (&'a str, &'a str)>,
    salt: &str,
    seed: u64,
) -> (Vec<String>, Vec<String>) {
    let mut by_group: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for (group, id) in items {
        by_group.entry(group).or_default().push(id);
    }
    let mut train = Vec::new();
    let mut test = Vec::new();
    for (_, mut ids) in by_group {
        ids.sort_by_key(|id| *blake3::hash(format!("{salt}/{seed}/{id}").as_bytes()).as_bytes());
        let half = ids.len() / 2;
        for (i, id) in ids.iter().enumerate() {
            if i < half { &mut train } else { &mut test }.push(id.to_string());
        }
    }
    (train, test)
}

/// The visible tasks of `split` (all for `None`) from a domain's task list
/// and its split table (DBBench, OS interaction); an unknown split names
/// the known ones.
pub fn tasks_in_split<T>(
    domain: &str,
    tasks: &[Arc<T>],
    splits: &std::collections::BTreeMap<String, Vec<String>>,
    split: Option<&str>,
    id: impl Fn(&T) -> &str,
    view: impl Fn(&T) -> VisibleTask,
) -> Result<Vec<VisibleTask>, EnvError> {
    let Some(s) = split else {
        return Ok(tasks.iter().map(|t| view(t)).collect());
    };
    let ids = splits.get(s).ok_or_else(|| EnvError::UnknownSplit {
        domain: domain.into(),
        split: s.into(),
        known: splits.keys().cloned().collect(),
    })?;
    Ok(tasks
        .iter()
        .filter(|t| ids.iter().any(|i| i == id(t)))
        .map(|t| view(t))
        .collect())
}

/// Output of [`run_calls`].
#[derive(Clone, Debug, Serialize)]
pub struct CallsReport {
    /// One result per call, in order.
    pub outputs: Vec<ToolOutput>,
    /// State hash after the last call.
    pub final_db_hash: String,
}

/// `env call`: runs `calls` in order on a fresh environment.
pub fn run_calls(domain: &dyn Domain, calls: &[ToolCall]) -> CallsReport {
    let mut env = domain.new_env();
    let outputs = calls.iter().map(|c| env.call_as(c)).collect();
    CallsReport {
        outputs,
        final_db_hash: env.state_hash(),
    }
}

/// Parses the `env call` input: a JSON array of `{"name": ..., "arguments":
/// {...}}` objects.
pub fn parse_calls(text: &str) -> Result<Vec<ToolCall>, EnvError> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| EnvError::BadCall {
        index: 0,
        reason: format!("not JSON: {e}"),
    })?;
    let items = v.as_array().ok_or(EnvError::BadCall {
        index: 0,
        reason: "expected a JSON array".into(),
    })?;
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let name = item
                .get("name")
                .and_then(serde_json::Value::as_str)
                .ok_or_else(|| EnvError::BadCall {
                    index,
                    reason: "missing string field `name`".into(),
                })?;
            let requestor = match item.get("requestor") {
                None => Requestor::Assistant,
                Some(r) => serde_json::from_value(r.clone()).map_err(|_| EnvError::BadCall {
                    index,
                    reason: format!("`requestor` must be \"assistant\" or \"user\", not {r}"),
                })?,
            };
            Ok(ToolCall {
                name: name.to_string(),
                arguments: item.get("arguments").cloned().unwrap_or_else(empty_object),
                requestor,
            })
        })
        .collect()
}

/// One line of [`replay_gold`].
#[derive(Clone, Debug, Serialize)]
pub struct GoldRecord {
    /// Task id.
    pub task_id: String,
    /// State hash after the gold actions.
    pub final_db_hash: String,
    /// Reward of the gold trajectory.
    pub reward: f64,
}

/// `env gold`: replays every task's gold actions and evaluates the gold
/// trajectory.
pub fn replay_gold(domain: &dyn Domain) -> Result<Vec<GoldRecord>, EnvError> {
    domain
        .tasks(None)?
        .iter()
        .map(|t| {
            let (_, oracle) = domain.task(&t.id)?;
            let run = domain.gold_trajectory(&oracle)?;
            let ev = domain.evaluate(&oracle, &run)?;
            // A gold trajectory that misses its own gold state (the
            // evaluation leaves the hash out then) still reports its hash.
            let final_db_hash = if ev.final_db_hash.is_empty() {
                run_calls(domain, &run.tool_calls).final_db_hash
            } else {
                ev.final_db_hash
            };
            Ok(GoldRecord {
                task_id: t.id.clone(),
                final_db_hash,
                reward: ev.reward,
            })
        })
        .collect()
}

/// `tasks`: the visible half of a split's tasks.
pub fn list_tasks(domain: &dyn Domain, split: Option<&str>) -> Result<Vec<VisibleTask>, EnvError> {
    domain.tasks(split)
}

/// Output of [`do_nothing_floor`].
#[derive(Clone, Debug, Serialize)]
pub struct Floor {
    /// Tasks an agent that does nothing (no calls, no messages, then stops)
    /// solves.
    pub solved: Vec<String>,
    /// Number of tasks.
    pub total: usize,
}

/// The do-nothing floor of a domain (airline 19/50, retail 7/114).
pub fn do_nothing_floor(domain: &dyn Domain) -> Result<Floor, EnvError> {
    let tasks = domain.tasks(None)?;
    let mut solved = Vec::new();
    for t in &tasks {
        let (_, oracle) = domain.task(&t.id)?;
        if domain.evaluate(&oracle, &Trajectory::default())?.success {
            solved.push(t.id.clone());
        }
    }
    Ok(Floor {
        solved,
        total: tasks.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Plain(&'static str);
    impl TaskOracle for Plain {
        fn gold_steps(&self) -> (Vec<ToolCall>, Vec<String>) {
            (
                vec![ToolCall::agent(self.0, empty_object())],
                vec!["said".into()],
            )
        }
    }

    struct Other;
    impl TaskOracle for Other {
        fn gold_steps(&self) -> (Vec<ToolCall>, Vec<String>) {
            (Vec::new(), Vec::new())
        }
    }

    /// A benchmark reads back only its own task type, and only from an
    /// oracle made for its domain: another domain's oracle is refused
    /// with both domains named.
    #[test]
    fn an_oracle_opens_only_to_its_own_benchmark() {
        let oracle = Oracle::new("a/x", "t1", Arc::from("prompt"), Arc::new(Plain("go")));
        assert_eq!(oracle.task::<Plain>("a/x").map(|p| p.0), Some("go"));
        assert!(oracle.task::<Other>("a/x").is_none());
        assert!(oracle.task::<Plain>("b/y").is_none());
        let err = oracle.task_for::<Plain>("b/y").unwrap_err();
        assert_eq!(
            err.to_string(),
            "the oracle of task t1 (a/x) cannot be evaluated by domain b/y"
        );
        let plan = oracle.gold_plan();
        assert_eq!((plan.task_id.as_str(), plan.domain.as_str()), ("t1", "a/x"));
        assert_eq!(plan.actions[0].name, "go");
        assert_eq!(plan.communicate, ["said"]);
        // The defaults: no user in the loop.
        assert_eq!(oracle.user_script().task_id, "t1");
        assert!(oracle.user_scenario().is_empty() && oracle.nl_assertions().is_empty());
    }

    /// A benchmark's own error reads as the benchmark words it and comes
    /// back typed.
    #[test]
    fn a_benchmark_error_keeps_its_words_and_its_type() {
        let io = std::io::Error::other("server gone");
        let err = EnvError::benchmark(io);
        assert_eq!(err.to_string(), "server gone");
        assert!(err.benchmark_error::<std::io::Error>().is_some());
        assert!(err.benchmark_error::<std::fmt::Error>().is_none());
        let plain = EnvError::BadCall {
            index: 0,
            reason: "r".into(),
        };
        assert!(plain.benchmark_error::<std::io::Error>().is_none());
    }

    /// Every group with two or more tasks lands on both sides, and the
    /// same seed gives the same halves.
    #[test]
    fn seeded_halves_split_every_group_and_repeat() {
        let items = [
            ("g", "1"),
            ("g", "2"),
            ("g", "3"),
            ("h", "4"),
            ("h", "5"),
            ("i", "6"),
        ];
        let (train, test) = seeded_halves(items, "salt", 7);
        assert_eq!(train.len() + test.len(), 6);
        assert_eq!(train.len(), 2, "{train:?}");
        assert_eq!(seeded_halves(items, "salt", 7), (train, test));
    }
}

//! τ² telecom as a [`Domain`]: tasks whose episodes start from a set-up
//! state, two toolkits (the agent's on the carrier's systems, the user's on
//! their phone), and τ²'s evaluation for the domain (`evaluate_simulation`
//! with `EvaluationType.ALL`): the episode's calls of both parties replayed
//! in order, the task's env assertions run on the result, the ACTION check
//! where the reward basis names it, and the DB check reported.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use super::{EnvCall, NAME, Requestor, TelecomState, TelecomTask, agent, phone};
use crate::data::DataSource;
use crate::eval::call_matches;
use crate::task::RewardType;
use crate::{GREETING, agent_system_prompt};
use ecdysis_env::{
    ActionCheck, AssertionCheck, CommunicateCheck, Domain, EnvError, Environment, Evaluation,
    FinalState, Oracle, TaskOracle, Termination, ToolCall, ToolOutput, ToolSpec, Trajectory,
    UserScript, VisibleTask,
};

/// A task's starting point and gold outcome, computed on first use and
/// shared by every episode and evaluation of the task.
struct Start {
    /// The pristine state with the task's set-up actions run.
    state: TelecomState,
    /// Both DB hashes after the gold actions (τ²'s gold environment).
    gold_hashes: OnceLock<(String, String)>,
}

struct Entry {
    view: VisibleTask,
    task: Arc<TelecomTask>,
    user_prompt: OnceLock<Arc<str>>,
}

struct Shared {
    policy: Arc<str>,
    specs: Vec<ToolSpec>,
    user_specs: Vec<ToolSpec>,
    tasks: Vec<Entry>,
    index: HashMap<String, usize>,
    splits: BTreeMap<String, Vec<String>>,
    pristine: TelecomState,
    /// τ²'s user-simulator guidelines for a user with tools.
    guidelines: String,
    starts: Mutex<HashMap<String, Arc<Start>>>,
}

/// The loaded telecom domain. Cloning is cheap.
#[derive(Clone)]
pub struct TelecomDomain {
    shared: Arc<Shared>,
}

impl TelecomDomain {
    /// Loads both databases, the policy, the 2,285 tasks and their sets,
    /// and both parties' tool specs (derived from the package's sources).
    /// A task whose reward basis this emulation does not score
    /// (`NL_ASSERTION`) is refused, so a changed data set fails loudly.
    pub fn load(data: &DataSource) -> Result<Self, EnvError> {
        let pristine = TelecomState::load(data)?;
        let policy: Arc<str> = Arc::from(super::policy(data)?);
        let tasks = super::load_tasks(data)?;
        if let Some(t) = tasks
            .iter()
            .find(|t| t.reward_basis.contains(&RewardType::NlAssertion))
        {
            return Err(EnvError::Format {
                file: "domains/telecom/tasks.json".into(),
                reason: format!(
                    "task {} is scored by NL_ASSERTION, which needs an LLM judge",
                    t.id
                ),
            });
        }
        let tasks: Vec<Entry> = tasks
            .into_iter()
            .map(|t| Entry {
                view: VisibleTask {
                    id: t.id.clone(),
                    domain: NAME.to_string(),
                    policy: policy.clone(),
                    first_user_message: None,
                    agent_greeting: GREETING,
                },
                task: Arc::new(t),
                user_prompt: OnceLock::new(),
            })
            .collect();
        let index = tasks
            .iter()
            .enumerate()
            .map(|(k, e)| (e.view.id.clone(), k))
            .collect();
        Ok(TelecomDomain {
            shared: Arc::new(Shared {
                specs: super::tool_specs(data, Requestor::Assistant)?,
                user_specs: super::tool_specs(data, Requestor::User)?,
                splits: super::splits(data)?,
                guidelines: data.read_text("user_simulator/simulation_guidelines_tools.md")?,
                policy,
                tasks,
                index,
                pristine,
                starts: Mutex::new(HashMap::new()),
            }),
        })
    }

    fn entry(&self, id: &str) -> Result<&Entry, EnvError> {
        self.shared
            .index
            .get(id)
            .map(|&k| &self.shared.tasks[k])
            .ok_or_else(|| EnvError::UnknownTask {
                domain: NAME.to_string(),
                task: id.to_string(),
            })
    }

    fn task_of<'a>(&self, oracle: &'a Oracle) -> Result<&'a TelecomTask, EnvError> {
        oracle.task_for::<TelecomTask>(NAME)
    }

    /// The task's starting state, set up once per process.
    fn start(&self, task: &TelecomTask) -> Result<Arc<Start>, EnvError> {
        let lock = || self.shared.starts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = lock().get(&task.id) {
            return Ok(s.clone());
        }
        // Set up outside the lock; two threads racing on one task compute
        // the same state.
        let state = TelecomState::for_task(&self.shared.pristine, task).map_err(|e| {
            EnvError::TaskSetup {
                domain: NAME.to_string(),
                task: task.id.clone(),
                reason: format!("{}: {}", e.kind, e.msg),
            }
        })?;
        let start = Arc::new(Start {
            state,
            gold_hashes: OnceLock::new(),
        });
        Ok(lock().entry(task.id.clone()).or_insert(start).clone())
    }

    /// The pristine state (both databases, before any task's set-up).
    pub fn pristine(&self) -> &TelecomState {
        &self.shared.pristine
    }

    /// The user simulator's system prompt for a task, as τ²'s
    /// `UserSimulator.system_prompt` builds it for a user with tools.
    fn user_prompt(&self, e: &Entry) -> Arc<str> {
        e.user_prompt
            .get_or_init(|| {
                Arc::from(crate::user_system_prompt(
                    &self.shared.guidelines,
                    &e.task.user_scenario,
                ))
            })
            .clone()
    }
}

/// τ²'s gold environment: the gold actions of both parties run on the
/// starting state through `make_tool_call` (no synchronisation between
/// them, a raising action skipped), and both hashes taken.
fn gold_hashes(start: &TelecomState, task: &TelecomTask) -> (String, String) {
    let mut st = start.clone();
    for a in &task.actions {
        let args = serde_json::Value::Object(a.arguments.clone());
        // τ² logs a failing gold action and goes on.
        let _ = match a.requestor {
            Requestor::Assistant => agent::TOOLKIT.call_tool(&mut st, &a.name, &args),
            Requestor::User => phone::TOOLKIT.call_tool(&mut st, &a.name, &args),
        };
    }
    (st.db_hash(), st.user_db_hash())
}

/// `run_env_assertion(..., raise_assertion_error=False)` on the final
/// state. A function that raises is reported, and counts as not met (τ²'s
/// evaluator would stop with the exception).
fn assertion_check(st: &mut TelecomState, a: &EnvCall) -> AssertionCheck {
    let (met, error) = match st.check(a) {
        Ok(met) => (met, None),
        Err(e) => (false, Some(format!("{}: {}", e.kind, e.msg))),
    };
    AssertionCheck {
        env_type: a.env_type,
        func_name: a.func_name.clone(),
        met,
        error,
    }
}

impl Domain for TelecomDomain {
    fn name(&self) -> &str {
        NAME
    }

    fn policy(&self) -> &str {
        &self.shared.policy
    }

    fn system_prompt(&self) -> String {
        agent_system_prompt(&self.shared.policy)
    }

    fn tools(&self) -> &[ToolSpec] {
        &self.shared.specs
    }

    fn user_tools(&self) -> &[ToolSpec] {
        &self.shared.user_specs
    }

    fn splits(&self) -> Vec<String> {
        self.shared.splits.keys().cloned().collect()
    }

    fn tasks(&self, split: Option<&str>) -> Result<Vec<VisibleTask>, EnvError> {
        crate::tasks_of_split(
            NAME,
            self.shared.tasks.iter().map(|e| e.view.clone()),
            &self.shared.splits,
            split,
        )
    }

    fn task(&self, id: &str) -> Result<(VisibleTask, Oracle), EnvError> {
        let e = self.entry(id)?;
        Ok((
            e.view.clone(),
            Oracle::new(NAME, id, self.user_prompt(e), e.task.clone()),
        ))
    }

    /// The pristine state, before any task's set-up (`env call`).
    fn new_env(&self) -> Box<dyn Environment> {
        Box::new(TelecomEnv {
            shared: self.shared.clone(),
            state: self.shared.pristine.clone(),
        })
    }

    /// The task's starting state: its set-up actions already run.
    fn new_env_for(&self, task: &VisibleTask) -> Result<Box<dyn Environment>, EnvError> {
        let start = self.start(&self.entry(&task.id)?.task)?;
        Ok(Box::new(TelecomEnv {
            shared: self.shared.clone(),
            state: start.state.clone(),
        }))
    }

    fn evaluate(&self, oracle: &Oracle, run: &Trajectory) -> Result<Evaluation, EnvError> {
        self.evaluate_final(oracle, run, None)
    }

    fn evaluate_final(
        &self,
        oracle: &Oracle,
        run: &Trajectory,
        final_state: Option<FinalState>,
    ) -> Result<Evaluation, EnvError> {
        let task = self.task_of(oracle)?;
        let start = self.start(task)?;
        let finished = run.termination.is_stop();
        // τ²'s predicted environment: the set-up state with every call of
        // the episode replayed in order (`get_response`, which syncs).
        let mut predicted = final_state
            .and_then(FinalState::downcast::<TelecomState>)
            .unwrap_or_else(|| {
                let mut st = start.state.clone();
                for c in &run.tool_calls {
                    st.call(c.requestor, &c.name, &c.arguments);
                }
                st
            });
        // `set_state` ends with a sync (each replayed call has synced
        // already, so this changes nothing unless a call raised midway).
        if let Err(e) = predicted.sync() {
            tracing::warn!(task = %task.id, "sync after the replay raised: {}", e.msg);
        }
        let gold = start
            .gold_hashes
            .get_or_init(|| gold_hashes(&start.state, task))
            .clone();
        let predicted_hashes = (predicted.db_hash(), predicted.user_db_hash());
        let db_match = predicted_hashes == gold;
        // Assertions run after the hashes: each syncs the state, as in τ².
        let env_assertion_checks: Vec<AssertionCheck> = task
            .assertions
            .iter()
            .map(|a| assertion_check(&mut predicted, a))
            .collect();
        let env_assertion_ok = env_assertion_checks.iter().all(|c| c.met);
        let action_checks: Vec<ActionCheck> = task
            .actions
            .iter()
            .map(|a| ActionCheck {
                action_id: a.action_id.clone(),
                name: a.name.clone(),
                matched: run
                    .tool_calls
                    .iter()
                    .any(|c| call_matches(&a.name, &a.arguments, a.compare_args.as_deref(), c)),
            })
            .collect();
        let action_ok = action_checks.iter().all(|c| c.matched);
        let communicate_checks: Vec<CommunicateCheck> = task
            .communicate_info
            .iter()
            .map(|info| CommunicateCheck {
                info: info.clone(),
                met: crate::eval::communicated(info, &run.assistant_texts),
            })
            .collect();
        let communicate_ok = communicate_checks.iter().all(|c| c.met);
        let passed = task.reward_basis.iter().all(|b| match b {
            RewardType::Db => db_match,
            RewardType::EnvAssertion => env_assertion_ok,
            RewardType::Action => action_ok,
            RewardType::Communicate => communicate_ok,
            // Refused when the domain loads.
            RewardType::NlAssertion => false,
        });
        let reward = if finished && passed { 1.0 } else { 0.0 };
        Ok(Evaluation {
            reward,
            success: reward == 1.0,
            premature: !finished,
            db_match,
            // Both parties' hashes, as `state_hash` writes them.
            final_db_hash: format!("{}:{}", predicted_hashes.0, predicted_hashes.1),
            db_diff: Vec::new(),
            gold_db_hash: format!("{}:{}", gold.0, gold.1),
            communicate_ok,
            communicate_checks,
            action_ok,
            action_checks,
            reward_basis: task
                .reward_basis
                .iter()
                .map(|b| b.as_str().to_string())
                .collect(),
            env_assertion_ok,
            env_assertion_checks,
        })
    }

    /// The gold actions of both parties in order, ended by the agent.
    fn gold_trajectory(&self, oracle: &Oracle) -> Result<Trajectory, EnvError> {
        let task = self.task_of(oracle)?;
        Ok(Trajectory {
            tool_calls: task.actions.iter().map(|a| a.call()).collect(),
            assistant_texts: task.communicate_info.clone(),
            termination: Termination::AgentStop,
        })
    }
}

/// One telecom episode: both parties' state.
pub struct TelecomEnv {
    shared: Arc<Shared>,
    state: TelecomState,
}

impl TelecomEnv {
    /// The current state of both sides.
    pub fn state(&self) -> &TelecomState {
        &self.state
    }
}

impl Environment for TelecomEnv {
    fn domain(&self) -> &str {
        NAME
    }

    fn tools(&self) -> &[ToolSpec] {
        &self.shared.specs
    }

    /// The agent's tools only: a user tool's name is an unknown tool here,
    /// so neither the agent nor a harness's view reaches the phone.
    fn call(&mut self, name: &str, arguments: &serde_json::Value) -> ToolOutput {
        self.state.call(Requestor::Assistant, name, arguments)
    }

    fn user_tools(&self) -> &[ToolSpec] {
        &self.shared.user_specs
    }

    fn call_user(&mut self, name: &str, arguments: &serde_json::Value) -> ToolOutput {
        self.state.call(Requestor::User, name, arguments)
    }

    /// The agent side's hash and the user side's, joined by `:`.
    fn state_hash(&self) -> String {
        format!("{}:{}", self.state.db_hash(), self.state.user_db_hash())
    }

    /// In memory: a call never waits.
    fn calls_may_block(&self) -> bool {
        false
    }

    fn into_final_state(self: Box<Self>) -> Option<FinalState> {
        Some(FinalState::new(self.state))
    }
}

impl TaskOracle for TelecomTask {
    fn user_scenario(&self) -> String {
        self.user_scenario.to_string()
    }

    fn user_script(&self, task_id: &str) -> UserScript {
        UserScript {
            device_actions: self
                .actions
                .iter()
                .filter(|a| a.requestor == Requestor::User)
                .map(|a| a.call())
                .collect(),
            ..crate::task::script_from_scenario(task_id, &self.user_scenario)
        }
    }

    /// Both parties' actions, in order: a testbed agent asks the user for
    /// theirs.
    fn gold_steps(&self) -> (Vec<ToolCall>, Vec<String>) {
        (
            self.actions.iter().map(|a| a.call()).collect(),
            self.communicate_info.clone(),
        )
    }
}

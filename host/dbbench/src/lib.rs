//! AgentBench's DBBench (`agentbench/dbbench`): SQL tasks against a real
//! MariaDB configured like MySQL 8, scored exactly as the original.
//!
//! The protocol is the original's function-calling one: the system prompt
//! and the task's opening user message, then up to 15 agent turns with two
//! tools, `execute_sql(query)` and `commit_final_answer(answers)`; the first
//! executed `commit_final_answer` ends the episode. A turn without a tool
//! call gets a fixed user reply. There is no user simulator.
//!
//! Each episode gets its own schema, loaded the original's way (every
//! column `TEXT`, cells inserted as `str(cell)`), reached as its own user
//! ([`sql`]). Results are printed as the original's Python client prints
//! them ([`render`]). Scoring ([`Domain::evaluate`]): SELECT-class tasks by
//! the ported result processor ([`checker`]) on the committed answer;
//! INSERT/UPDATE tasks by the original's table hash after replaying the
//! episode's `execute_sql` calls on a fresh schema.
//!
//! The only crate that builds the MySQL client. It implements
//! `ecdysis-env`'s contract and depends on no other benchmark and on no
//! layer above the environment.

pub mod checker;
mod error;
pub mod mysql8;
pub mod render;
pub mod server;
pub mod sql;
pub mod task;

/// No user in the loop: the oracle only answers for the testbed agents.
impl TaskOracle for Task {
    fn gold_steps(&self) -> (Vec<ToolCall>, Vec<String>) {
        let actions = testbed_steps(self)
            .into_iter()
            .map(|(name, arguments)| ToolCall::agent(name, Value::Object(arguments)))
            .collect();
        (actions, Vec::new())
    }
}

impl From<DbError> for EnvError {
    fn from(e: DbError) -> EnvError {
        EnvError::benchmark(e)
    }
}

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use serde_json::{Value, json};

pub use error::DbError;
pub use sql::{Limits, SqlService, Target};
pub use task::Task;

use ecdysis_env::{
    Domain, EnvError, Environment, Evaluation, Oracle, Protocol, TaskOracle, Termination, ToolCall,
    ToolOutput, ToolSpec, Trajectory, VisibleTask,
};
use sql::EpisodeDb;

/// The domain's name.
pub const NAME: &str = "agentbench/dbbench";

/// The tool that runs SQL.
pub const EXECUTE_SQL: &str = "execute_sql";

/// The tool that ends the episode.
pub const COMMIT: &str = "commit_final_answer";

/// The original's cap on agent turns (`max_round` of `dbbench-std`).
pub const MAX_ROUNDS: u32 = 15;

/// What the original says to a turn without a tool call.
pub const NO_CALL_REPLY: &str = "Internal error: No tool calls found despite finish reason.";

/// What the original answers an unknown tool.
pub const INVALID_FUNCTION: &str = "Invalid function call. Please call a tool instead.";

/// What the original answers arguments that are not JSON.
pub const BAD_ARGUMENTS: &str = "Error: Failed to parse tool call. Tool call format is incorrect.";

/// The original's system prompt, verbatim (the agent reads it).
pub const SYSTEM_PROMPT: &str = "I will ask you a question, then you should help me operate a MySQL database with SQL to answer the question.
You have to explain the problem and your solution to me and write down your thoughts.
After thinking and explaining thoroughly, every round you can choose to operate or to answer with the two specific tools provided.
If you should execute a SQL query, use the `execute_sql` function, Your SQL should be in one line.
Every time you can only execute one SQL statement. I will only execute the statement in the first SQL code block. Every time you write a SQL, I will execute it for you and give you the output.
If you are done operating, and you want to commit your final answer, then use the `commit_final_answer` function.
DO NOT use this tool unless you are sure about your answer. I expect an accurate and correct answer.
Your answer should be accurate. Your answer must be exactly the same as the correct answer.
If the question is about modifying the database, then after done operation, your answer field can be anything.
If your response cannot match any pattern I mentioned earlier, you will be judged as FAIL immediately.
You should always use the tools provided to submit your answer. Be careful not to write it in the content field.
Your input will be raw MySQL response, you have to deal with it by yourself.";

/// The original's two tools (its task configuration), in its order.
pub fn tool_specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            EXECUTE_SQL,
            "Executes a given SQL statement on the database and returns the result.",
            json!({
                "type": "object",
                "properties": {"query": {"type": "string", "description": "The SQL query to be executed."}},
                "required": ["query"],
                "additionalProperties": false,
            }),
            // A statement can change the schema: the harness's read-only
            // view refuses it.
            true,
        ),
        ToolSpec::new(
            COMMIT,
            "Commits the final answer after all operations are completed.",
            json!({
                "type": "object",
                "properties": {"answers": {"type": "array", "items": {"type": "string"}, "description": "The list of final answers to commit."}},
                "required": ["answers"],
                "additionalProperties": false,
            }),
            true,
        ),
    ]
}

/// How to open the domain.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The data folder (default: see [`task::locate`]).
    pub data: Option<PathBuf>,
    /// An existing server (`--mysql-url`); default: a private server.
    pub mysql_url: Option<String>,
    /// Where the private server's directory goes (default:
    /// `.ecdysis/mariadb` of the nearest `.ecdysis` folder).
    pub server_root: Option<PathBuf>,
    /// Episode session limits.
    pub limits: Limits,
}

/// `.ecdysis/mariadb` in the nearest folder (from the current directory
/// up) that has an `.ecdysis` folder, else in the current directory.
pub fn default_server_root() -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    cwd.ancestors()
        .map(|d| d.join(".ecdysis"))
        .find(|d| d.is_dir())
        .unwrap_or_else(|| cwd.join(".ecdysis"))
        .join("mariadb")
}

struct Shared {
    tasks: Vec<Arc<Task>>,
    splits: BTreeMap<String, Vec<String>>,
    specs: Vec<ToolSpec>,
    options: Options,
    service: OnceLock<Result<Arc<SqlService>, DbError>>,
}

/// The loaded domain. Cloning is cheap.
#[derive(Clone)]
pub struct DbbenchDomain {
    shared: Arc<Shared>,
}

/// Loads the domain and connects to (or starts) its server.
pub fn open(options: Options) -> Result<DbbenchDomain, EnvError> {
    let d = DbbenchDomain::load(options)?;
    d.service()?;
    Ok(d)
}

impl DbbenchDomain {
    /// Loads tasks and splits; the server is reached on first use.
    pub fn load(options: Options) -> Result<Self, EnvError> {
        let dir = task::locate(options.data.as_deref())?;
        let tasks: Vec<Arc<Task>> = task::load(&dir)?.into_iter().map(Arc::new).collect();
        let mut splits: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for t in &tasks {
            splits
                .entry(t.file.to_string())
                .or_default()
                .push(t.id.clone());
        }
        let owned: Vec<Task> = tasks.iter().map(|t| (**t).clone()).collect();
        let (train, test) = task::split_standard(&owned, task::SPLIT_SEED);
        splits.insert("train".into(), train);
        splits.insert("test".into(), test);
        Ok(DbbenchDomain {
            shared: Arc::new(Shared {
                tasks,
                splits,
                specs: tool_specs(),
                options,
                service: OnceLock::new(),
            }),
        })
    }

    /// The SQL service, started (or connected) on first use.
    pub fn service(&self) -> Result<Arc<SqlService>, EnvError> {
        Ok(self.sql_service()?)
    }

    /// [`Self::service`], failing as the database layer does.
    fn sql_service(&self) -> Result<Arc<SqlService>, DbError> {
        let o = &self.shared.options;
        self.shared
            .service
            .get_or_init(|| match &o.mysql_url {
                Some(url) => SqlService::start(Target::Url(url.clone()), o.limits).map(Arc::new),
                None => {
                    let root = o.server_root.clone().unwrap_or_else(default_server_root);
                    SqlService::private(&root, o.limits)
                }
            })
            .clone()
    }

    fn find(&self, id: &str) -> Result<&Arc<Task>, EnvError> {
        self.shared
            .tasks
            .iter()
            .find(|t| t.id == id)
            .ok_or_else(|| EnvError::UnknownTask {
                domain: NAME.into(),
                task: id.into(),
            })
    }

    fn task_of<'a>(&self, oracle: &'a Oracle) -> Result<&'a Task, EnvError> {
        oracle.task_for::<Task>(NAME)
    }

    /// Every task (for tests and reports).
    pub fn all_tasks(&self) -> &[Arc<Task>] {
        &self.shared.tasks
    }

    /// A fresh schema for `task`.
    pub fn episode_db(&self, task: &Task) -> Result<EpisodeDb, EnvError> {
        Ok(self.open_episode_db(task)?)
    }

    /// [`Self::episode_db`], failing as the database layer does.
    fn open_episode_db(&self, task: &Task) -> Result<EpisodeDb, DbError> {
        EpisodeDb::open(
            self.sql_service()?,
            &task.id,
            &task.tables,
            self.shared.options.limits,
        )
    }

    fn view(&self, t: &Task) -> VisibleTask {
        VisibleTask {
            id: t.id.clone(),
            domain: NAME.into(),
            policy: Arc::from(SYSTEM_PROMPT),
            first_user_message: Some(t.prompt.clone()),
            agent_greeting: "",
        }
    }

    /// The answer of the first `commit_final_answer` among `calls`, as the
    /// original reads it (`list(arguments.values())[0]`); `None` when there
    /// is no commit or its arguments have no value.
    pub fn committed_answer(calls: &[ToolCall]) -> Option<Option<Value>> {
        let c = calls.iter().find(|c| c.name == COMMIT)?;
        Some(
            c.arguments
                .as_object()
                .and_then(|m| m.values().next().cloned()),
        )
    }
}

/// Why a call's arguments have no first value, in the original's words
/// (the agent reads them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum ArgumentError {
    /// An empty object: `list(...)[0]` raises `IndexError`.
    #[error("list index out of range")]
    Empty,
    /// Arguments that were not JSON (the agent loop passes them as a
    /// string).
    #[error("{BAD_ARGUMENTS}")]
    NotJson,
    /// A JSON value other than an object (its Python type name).
    #[error("'{0}' object has no attribute 'values'")]
    NotAnObject(&'static str),
}

/// The first argument value, as `list(arguments.values())[0]` reads it.
fn first_argument(arguments: &Value) -> Result<&Value, ArgumentError> {
    match arguments {
        Value::Object(m) => m.values().next().ok_or(ArgumentError::Empty),
        // The agent loop passes arguments that are not JSON as a string.
        Value::String(_) => Err(ArgumentError::NotJson),
        other => Err(ArgumentError::NotAnObject(py_type(other))),
    }
}

fn py_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

impl Domain for DbbenchDomain {
    fn name(&self) -> &str {
        NAME
    }

    fn policy(&self) -> &str {
        SYSTEM_PROMPT
    }

    fn system_prompt(&self) -> String {
        SYSTEM_PROMPT.into()
    }

    fn tools(&self) -> &[ToolSpec] {
        &self.shared.specs
    }

    fn splits(&self) -> Vec<String> {
        self.shared.splits.keys().cloned().collect()
    }

    fn tasks(&self, split: Option<&str>) -> Result<Vec<VisibleTask>, EnvError> {
        let s = &self.shared;
        ecdysis_env::tasks_in_split(
            NAME,
            &s.tasks,
            &s.splits,
            split,
            |t| &t.id,
            |t| self.view(t),
        )
    }

    fn task(&self, id: &str) -> Result<(VisibleTask, Oracle), EnvError> {
        let t = self.find(id)?;
        Ok((
            self.view(t),
            Oracle::new(NAME, t.id.clone(), Arc::from(""), t.clone()),
        ))
    }

    fn protocol(&self) -> Protocol {
        Protocol {
            user_simulator: false,
            no_call_reply: Some(NO_CALL_REPLY.into()),
            final_tools: vec![COMMIT.into()],
            max_agent_turns: Some(MAX_ROUNDS),
            tool_errors_capped: false,
            // Upstream's DBBench runs every call of a response.
            first_call_only: false,
        }
    }

    fn new_env(&self) -> Box<dyn Environment> {
        Box::new(DbbenchEnv {
            domain: self.clone(),
            task: None,
            db: OnceLock::new(),
        })
    }

    fn new_env_for(&self, task: &VisibleTask) -> Result<Box<dyn Environment>, EnvError> {
        let t = self.find(&task.id)?.clone();
        let cell = OnceLock::new();
        match EpisodeDb::open(
            self.service()?,
            &t.id,
            &t.tables,
            self.shared.options.limits,
        ) {
            Ok(db) => {
                let _ = cell.set(Ok(db));
            }
            // The task cannot be set up (as in the original, whose episode
            // ends before the agent acts): every call says so, and the
            // evaluation scores 0.
            Err(e @ DbError::TaskSetup(_)) => {
                let _ = cell.set(Err(e));
            }
            Err(e) => return Err(e.into()),
        }
        Ok(Box::new(DbbenchEnv {
            domain: self.clone(),
            task: Some(t),
            db: cell,
        }))
    }

    fn evaluate(&self, oracle: &Oracle, run: &Trajectory) -> Result<Evaluation, EnvError> {
        let t = self.task_of(oracle)?;
        let commit_at = run.tool_calls.iter().position(|c| c.name == COMMIT);
        let committed = commit_at.is_some();
        let answer =
            commit_at.and_then(|i| first_argument(&run.tool_calls[i].arguments).ok().cloned());
        let mut ev = Evaluation {
            reward: 0.0,
            success: false,
            premature: !committed || !run.termination.is_stop(),
            db_match: false,
            final_db_hash: String::new(),
            db_diff: Vec::new(),
            gold_db_hash: String::new(),
            communicate_ok: true,
            communicate_checks: Vec::new(),
            action_ok: committed,
            action_checks: Vec::new(),
            reward_basis: vec![
                if t.is_modifying() {
                    "TABLE_HASH"
                } else {
                    "ANSWER"
                }
                .into(),
            ],
            env_assertion_ok: true,
            env_assertion_checks: Vec::new(),
        };
        // The original scores only at the commit; a commit whose arguments
        // have no value is a task error (0).
        let correct = match (&answer, t.is_modifying()) {
            (None, _) => false,
            _ if t.setup_error().is_some() => false,
            (Some(_), true) => {
                let db = self.episode_db(t)?;
                for c in &run.tool_calls[..commit_at.unwrap_or(0)] {
                    if c.name == EXECUTE_SQL
                        && let Ok(Value::String(sql)) = first_argument(&c.arguments)
                    {
                        db.execute(sql);
                    }
                }
                let hash = db.tables_hash(&t.tables);
                let gold = t.answer_md5.clone().unwrap_or_default();
                ev.final_db_hash = hash.clone();
                ev.gold_db_hash = checker::extract_hash(&gold);
                let ok = checker::compare(
                    checker::Input::Text(&hash),
                    checker::Input::Text(&gold),
                    &t.kind,
                );
                ev.db_match = ok;
                ok
            }
            (Some(a), false) => checker::compare(
                checker::Input::Json(a),
                checker::Input::Json(&t.label),
                &t.kind,
            ),
        };
        if correct && !ev.premature {
            ev.reward = 1.0;
            ev.success = true;
        }
        Ok(ev)
    }

    fn gold_trajectory(&self, oracle: &Oracle) -> Result<Trajectory, EnvError> {
        let t = self.task_of(oracle)?;
        let mut calls = Vec::new();
        if let Some(sql) = &t.gold_sql {
            calls.push(ToolCall::agent(EXECUTE_SQL, json!({"query": sql})));
        }
        calls.push(ToolCall::agent(COMMIT, json!({"answers": t.label})));
        Ok(Trajectory {
            tool_calls: calls,
            assistant_texts: Vec::new(),
            termination: Termination::AgentStop,
        })
    }
}

/// The oracle's gold plan for a `sim:` testbed agent: the gold SQL, then
/// the commit of the label.
pub(crate) fn testbed_steps(t: &Task) -> Vec<(String, serde_json::Map<String, Value>)> {
    let mut steps = Vec::new();
    if let Some(sql) = &t.gold_sql {
        let mut m = serde_json::Map::new();
        m.insert("query".into(), Value::String(sql.clone()));
        steps.push((EXECUTE_SQL.to_string(), m));
    }
    let mut m = serde_json::Map::new();
    m.insert("answers".into(), t.label.clone());
    steps.push((COMMIT.to_string(), m));
    steps
}

/// One DBBench episode: its schema (made on first use for an environment
/// that was not given a task).
pub struct DbbenchEnv {
    domain: DbbenchDomain,
    task: Option<Arc<Task>>,
    db: OnceLock<Result<EpisodeDb, DbError>>,
}

impl DbbenchEnv {
    fn db(&self) -> Result<&EpisodeDb, &DbError> {
        self.db
            .get_or_init(|| {
                let empty = Task {
                    id: String::new(),
                    file: "standard",
                    kind: String::new(),
                    prompt: String::new(),
                    tables: Vec::new(),
                    label: Value::Null,
                    answer_md5: None,
                    gold_sql: None,
                    source: String::new(),
                };
                let t = self.task.as_deref().unwrap_or(&empty);
                self.domain.open_episode_db(t)
            })
            .as_ref()
    }
}

fn output(content: impl Into<String>, error: bool) -> ToolOutput {
    ToolOutput {
        content: content.into(),
        error,
    }
}

impl Environment for DbbenchEnv {
    fn domain(&self) -> &str {
        NAME
    }

    fn tools(&self) -> &[ToolSpec] {
        &self.domain.shared.specs
    }

    fn call(&mut self, name: &str, arguments: &Value) -> ToolOutput {
        match name {
            EXECUTE_SQL => {
                let query = match first_argument(arguments) {
                    Ok(q) => q,
                    Err(ArgumentError::NotJson) => return output(BAD_ARGUMENTS, true),
                    Err(e) => return output(format!("Error executing query: {e}"), true),
                };
                let sql = match query {
                    Value::String(s) => s.as_str(),
                    // The client returns an empty result for None.
                    Value::Null => return output("[]", false),
                    other => {
                        return output(
                            format!("'{}' object has no attribute 'encode'", py_type(other)),
                            true,
                        );
                    }
                };
                let db = match self.db() {
                    Ok(db) => db,
                    Err(e) => return output(format!("Error executing query: {e}"), true),
                };
                let out = db.execute(sql);
                if out.printed.is_empty() {
                    return output("No response from database.", out.error);
                }
                output(out.printed, out.error)
            }
            COMMIT => match first_argument(arguments) {
                Ok(_) => output("Final answer committed.", false),
                Err(ArgumentError::NotJson) => output(BAD_ARGUMENTS, true),
                Err(e) => output(format!("Error: {e}"), true),
            },
            _ => output(INVALID_FUNCTION, true),
        }
    }

    fn state_hash(&self) -> String {
        match (&self.task, self.db()) {
            (Some(t), Ok(db)) => db.tables_hash(&t.tables),
            _ => String::new(),
        }
    }
}

/// Shared with tests: a service for this test process, or `None` (with a
/// SKIPPED line) when MariaDB is not installed and `$CI` is unset.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// The domain every test of this process shares (one server).
    pub fn domain() -> Option<DbbenchDomain> {
        static DOMAIN: OnceLock<Option<DbbenchDomain>> = OnceLock::new();
        DOMAIN
            .get_or_init(|| {
                if !server::server_available() {
                    assert!(
                        std::env::var_os("CI").is_none(),
                        "CI is set but mariadbd is not installed (.ci/run installs mariadb-server)"
                    );
                    eprintln!(
                        "SKIPPED: mariadbd is not installed (apt-get install mariadb-server)"
                    );
                    return None;
                }
                let d = DbbenchDomain::load(Options {
                    limits: Limits {
                        statement_timeout: std::time::Duration::from_secs(2),
                        ..Limits::default()
                    },
                    ..Options::default()
                })
                .expect("DBBench data");
                d.service().expect("private MariaDB server");
                Some(d)
            })
            .clone()
    }

    /// The first task of `standard.jsonl`.
    pub fn first_task(d: &DbbenchDomain) -> Arc<Task> {
        d.all_tasks()[0].clone()
    }
}

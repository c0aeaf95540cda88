//! τ² telecom: the dual-control domain. The agent works on the carrier's
//! database (`TelecomTools`), the user on their own phone
//! (`TelecomUserTools`), and after every call the two are synchronised as
//! τ²'s `TelecomEnvironment.sync_tools` does (a line's status and roaming
//! reach the phone, a paid payment request reaches the bill).
//!
//! This module holds the state and the toolkits; outputs, errors and both
//! DB hashes follow the reference byte for byte (checked against
//! `tests/conformance/vectors/telecom_*`).

pub mod agent;
mod domain;
pub mod models;
pub mod phone;

pub use domain::{TelecomDomain, TelecomEnv};

use ecdysis_pyemu::call::{self, Signature};
use ecdysis_pyemu::{Dict, PyErr, PyResult, Val, json, ops};

use super::db::Db;
use super::tools::Kind;
use crate::data::DataSource;
use ecdysis_env::{EnvError, ToolOutput};

pub use ecdysis_env::Requestor;

/// The domain's name.
pub const NAME: &str = "tau2/telecom";

/// A call of any toolkit method by name (τ²'s `EnvFunctionCall`, and an
/// `EnvAssertion` with the value it must return).
#[derive(Clone, Debug, serde::Deserialize)]
pub struct EnvCall {
    /// Which toolkit: the agent's (`assistant`) or the user's.
    pub env_type: Requestor,
    /// Method name.
    pub func_name: String,
    /// Keyword arguments.
    #[serde(default)]
    pub arguments: serde_json::Map<String, serde_json::Value>,
    /// For an assertion: the value the method must return.
    #[serde(default)]
    pub assert_value: Option<bool>,
}

/// A gold action of a task: a tool call and who makes it.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct GoldAction {
    /// `action_id`.
    #[serde(default)]
    pub action_id: String,
    /// Who calls the tool.
    pub requestor: Requestor,
    /// Tool name.
    pub name: String,
    /// Arguments.
    #[serde(default)]
    pub arguments: serde_json::Map<String, serde_json::Value>,
    /// Arguments the ACTION check compares (`None`: all of the call's).
    #[serde(default)]
    pub compare_args: Option<Vec<String>>,
}

impl GoldAction {
    /// The action as the call that performs it.
    pub fn call(&self) -> ecdysis_env::ToolCall {
        ecdysis_env::ToolCall {
            name: self.name.clone(),
            arguments: serde_json::Value::Object(self.arguments.clone()),
            requestor: self.requestor,
        }
    }
}

/// What of a telecom task the environment needs: its set-up and how it is
/// judged.
#[derive(Clone, Debug)]
pub struct TelecomTask {
    /// Task id.
    pub id: String,
    /// `initial_state.initialization_actions`, run in order on a fresh
    /// state.
    pub init: Vec<EnvCall>,
    /// `evaluation_criteria.actions`.
    pub actions: Vec<GoldAction>,
    /// `evaluation_criteria.env_assertions`.
    pub assertions: Vec<EnvCall>,
    /// `evaluation_criteria.reward_basis` (`ENV_ASSERTION`, `ACTION`).
    pub reward_basis: Vec<super::task::RewardType>,
    /// `evaluation_criteria.communicate_info` (no telecom task has any).
    pub communicate_info: Vec<String>,
    /// The user simulator's scenario.
    pub user_scenario: super::task::UserScenario,
}

#[derive(serde::Deserialize)]
struct RawTask {
    id: String,
    user_scenario: super::task::UserScenario,
    #[serde(default)]
    initial_state: Option<RawInitial>,
    evaluation_criteria: RawCriteria,
}

#[derive(serde::Deserialize)]
struct RawInitial {
    #[serde(default)]
    initialization_actions: Option<Vec<EnvCall>>,
}

#[derive(serde::Deserialize)]
struct RawCriteria {
    #[serde(default)]
    actions: Option<Vec<GoldAction>>,
    #[serde(default)]
    env_assertions: Option<Vec<EnvCall>>,
    #[serde(default)]
    communicate_info: Option<Vec<String>>,
    #[serde(default)]
    reward_basis: Vec<super::task::RewardType>,
}

/// The agent's policy as `get_environment()` builds it (the default
/// "manual" variant, not solo): the main policy and the tech-support
/// manual, each in its tag.
pub fn policy(data: &DataSource) -> Result<String, EnvError> {
    let main = data.read_text("domains/telecom/main_policy.md")?;
    let manual = data.read_text("domains/telecom/tech_support_manual.md")?;
    Ok(format!(
        "<main_policy>\n{main}\n</main_policy>\n<tech_support_policy>\n{manual}\n</tech_support_policy>"
    ))
}

/// `split_tasks.json`: the named task sets (`base`, `train`, `test`,
/// `small`, `full`) as task ids.
pub fn splits(
    data: &DataSource,
) -> Result<std::collections::BTreeMap<String, Vec<String>>, EnvError> {
    let rel = "domains/telecom/split_tasks.json";
    serde_json::from_slice(&data.read(rel)?).map_err(|e| EnvError::Format {
        file: rel.to_string(),
        reason: e.to_string(),
    })
}

/// The tool specs of one party, derived from the package's own sources
/// as for the other domains: the agent's from `tools.py` and
/// `data_model.py`, the user's from `user_tools.py` and
/// `user_data_model.py`.
pub fn tool_specs(
    data: &DataSource,
    party: Requestor,
) -> Result<Vec<ecdysis_env::ToolSpec>, EnvError> {
    let (tools_file, models_file, kit) = match party {
        Requestor::Assistant => (
            "domains/telecom/tools.py",
            "domains/telecom/data_model.py",
            &agent::TOOLKIT,
        ),
        Requestor::User => (
            "domains/telecom/user_tools.py",
            "domains/telecom/user_data_model.py",
            &phone::TOOLKIT,
        ),
    };
    let tools_py = data.read_package_text(tools_file)?;
    let models_py = data.read_package_text(models_file)?;
    // Telecom's models derive from `BaseModelNoExtra`, defined there.
    let support_file = "utils/pydantic_utils.py";
    let support_py = data.read_package_text(support_file)?;
    Ok(super::schema::tool_specs(
        super::schema::Source {
            file: &format!("tau2/{tools_file}"),
            text: &tools_py,
        },
        super::schema::Source {
            file: &format!("tau2/{models_file}"),
            text: &models_py,
        },
        &[super::schema::Source {
            file: &format!("tau2/{support_file}"),
            text: &support_py,
        }],
        &super::schema::NativeTools::from(kit),
    )?)
}

/// Reads `tasks.json` (all 2,285 tasks, in file order).
pub fn load_tasks(data: &DataSource) -> Result<Vec<TelecomTask>, EnvError> {
    let rel = "domains/telecom/tasks.json";
    let raw: Vec<RawTask> =
        serde_json::from_slice(&data.read(rel)?).map_err(|e| EnvError::Format {
            file: rel.to_string(),
            reason: e.to_string(),
        })?;
    Ok(raw
        .into_iter()
        .map(|t| TelecomTask {
            id: t.id,
            init: t
                .initial_state
                .and_then(|i| i.initialization_actions)
                .unwrap_or_default(),
            actions: t.evaluation_criteria.actions.unwrap_or_default(),
            assertions: t.evaluation_criteria.env_assertions.unwrap_or_default(),
            reward_basis: t.evaluation_criteria.reward_basis,
            communicate_info: t.evaluation_criteria.communicate_info.unwrap_or_default(),
            user_scenario: t.user_scenario,
        })
        .collect())
}

/// One episode's telecom state: the carrier's database and the user's.
#[derive(Clone, Debug)]
pub struct TelecomState {
    /// The agent's side (`TelecomDB`).
    pub db: Db,
    /// The user's side (`TelecomUserDB`).
    pub user: Db,
    /// New draft bills made so far: the n-th gets an id derived from n
    /// (τ² draws it from `uuid4`, so a rerun there is not reproducible).
    pub(crate) bills_made: u32,
    /// Whether the phone's VPN details are the toolkit's shared default
    /// object (`default_vpn_details`, a class attribute in τ²)...
    pub(crate) vpn_details_shared: bool,
    /// ...and whether `break_vpn` has degraded that object, so every later
    /// connection of the episode gets poor performance, as in τ².
    pub(crate) vpn_default_poor: bool,
}

fn toml_to_json(file: &str, text: &str) -> Result<serde_json::Value, EnvError> {
    let value: toml::Value = toml::from_str(text).map_err(|e| EnvError::Format {
        file: file.to_string(),
        reason: e.to_string(),
    })?;
    serde_json::to_value(value).map_err(|e| EnvError::Format {
        file: file.to_string(),
        reason: e.to_string(),
    })
}

fn load_db(
    data: &DataSource,
    file: &str,
    model: &'static ecdysis_pyemu::pydantic::Model,
) -> Result<Db, EnvError> {
    let rel = format!("domains/telecom/{file}");
    let json = toml_to_json(&rel, &data.read_text(&rel)?)?;
    let db = Db::load(model, &json).map_err(|e| EnvError::Format {
        file: rel.clone(),
        reason: e.to_string(),
    })?;
    Ok(db)
}

impl TelecomState {
    /// The pristine state: `db.toml` and `user_db.toml` validated as
    /// `TelecomDB.load` and `TelecomUserDB.load` do.
    pub fn load(data: &DataSource) -> Result<Self, EnvError> {
        Ok(TelecomState {
            db: load_db(data, "db.toml", &models::TELECOM_DB)?,
            user: load_db(data, "user_db.toml", &models::TELECOM_USER_DB)?,
            bills_made: 0,
            vpn_details_shared: false,
            vpn_default_poor: false,
        })
    }

    /// `get_db_hash()`: the agent side's hash.
    pub fn db_hash(&self) -> String {
        self.db.hash()
    }

    /// `get_user_db_hash()`: the user side's hash.
    pub fn user_db_hash(&self) -> String {
        self.user.hash()
    }

    /// `Environment.get_response`: runs a tool of `requestor`'s toolkit
    /// and synchronises the two sides; any exception becomes the result
    /// `Error: <str(exc)>`.
    pub fn call(
        &mut self,
        requestor: Requestor,
        name: &str,
        arguments: &serde_json::Value,
    ) -> ToolOutput {
        let result = match requestor {
            Requestor::Assistant => agent::TOOLKIT.call_tool(self, name, arguments),
            Requestor::User => phone::TOOLKIT.call_tool(self, name, arguments),
        }
        .and_then(|out| {
            self.sync()?;
            Ok(out)
        });
        match result {
            Ok(content) => ToolOutput {
                content,
                error: false,
            },
            Err(e) => super::tools::error_output(name, e),
        }
    }

    /// `Environment.run_env_function_call`: any function of either
    /// toolkit, tools or not (task set-up and assertions), then
    /// synchronisation. Returns the function's Python value.
    pub fn run_function(
        &mut self,
        env_type: Requestor,
        name: &str,
        arguments: &serde_json::Value,
    ) -> PyResult<Val> {
        let v = match env_type {
            Requestor::Assistant => agent::TOOLKIT.call_function(self, name, arguments)?,
            Requestor::User => phone::TOOLKIT.call_function(self, name, arguments)?,
        };
        self.sync()?;
        Ok(v)
    }

    /// A task's starting state: the pristine one with the task's
    /// initialization actions run (`Environment.set_state`).
    pub fn for_task(pristine: &TelecomState, task: &TelecomTask) -> PyResult<Self> {
        let mut st = pristine.clone();
        for c in &task.init {
            st.run_function(
                c.env_type,
                &c.func_name,
                &serde_json::Value::Object(c.arguments.clone()),
            )?;
        }
        st.sync()?;
        Ok(st)
    }

    /// `Environment.run_env_assertion(..., raise_assertion_error=False)`:
    /// whether the method returned the asserted value. A method that
    /// raises, or returns something other than a bool, is an error.
    pub fn check(&mut self, assertion: &EnvCall) -> PyResult<bool> {
        let v = self.run_function(
            assertion.env_type,
            &assertion.func_name,
            &serde_json::Value::Object(assertion.arguments.clone()),
        )?;
        match v {
            Val::Bool(b) => Ok(b == assertion.assert_value.unwrap_or(true)),
            other => Err(PyErr::value(format!(
                "Function {} returned <class '{}'> instead of bool",
                assertion.func_name,
                other.type_name()
            ))),
        }
    }

    /// `getattr(toolkit, name)(**arguments)` alone, without the
    /// synchronisation `run_function` adds (how a caller holding the
    /// toolkit calls a method).
    pub fn call_method(
        &mut self,
        env_type: Requestor,
        name: &str,
        arguments: &serde_json::Value,
    ) -> PyResult<Val> {
        match env_type {
            Requestor::Assistant => agent::TOOLKIT.call_function(self, name, arguments),
            Requestor::User => phone::TOOLKIT.call_function(self, name, arguments),
        }
    }

    /// `TelecomEnvironment.sync_tools`.
    pub fn sync(&mut self) -> PyResult<()> {
        agent::sync_tools(self)
    }
}

/// What a function returns, kept apart as τ²'s `Environment.to_json_str`
/// tells results apart: a model is dumped as is, while a plain dict's
/// values are processed (`int`, `float` and `bool` become their `str()`,
/// a date its ISO text).
#[derive(Clone, Debug)]
pub enum Ret {
    /// A `str`, shown as is.
    Str(String),
    /// A model instance.
    Model(Val),
    /// A list of model instances.
    Models(Vec<Val>),
    /// A plain dict, in insertion order.
    Dict(Vec<(&'static str, Ret)>),
    /// An `int`, `float` or `bool`.
    Scalar(Val),
    /// A `date` (held as its ISO text).
    Date(String),
    /// `None`.
    None,
}

impl Ret {
    /// A `str` result.
    pub fn text(s: impl Into<String>) -> Self {
        Ret::Str(s.into())
    }

    /// The value `json.dumps` receives from `_process`.
    fn processed(&self) -> Val {
        match self {
            Ret::Str(s) | Ret::Date(s) => Val::str(s),
            Ret::Model(v) => v.clone(),
            Ret::Models(items) => Val::list(items.clone()),
            Ret::Dict(entries) => Val::dict(Dict::from_pairs(
                entries.iter().map(|(k, v)| (*k, v.processed())),
            )),
            Ret::Scalar(v) => Val::str(&ops::s(v)),
            Ret::None => Val::None,
        }
    }

    /// `Environment.to_json_str(resp)`: a `str` as is, anything else
    /// `json.dumps(_process(resp), default=str)`.
    pub fn render(&self) -> String {
        match self {
            Ret::Str(s) => s.clone(),
            other => json::dumps(&other.processed()),
        }
    }

    /// The Python value itself (what `run_env_function_call` returns).
    pub fn value(&self) -> Val {
        match self {
            Ret::Str(s) | Ret::Date(s) => Val::str(s),
            Ret::Model(v) | Ret::Scalar(v) => v.clone(),
            Ret::Models(items) => Val::list(items.clone()),
            Ret::Dict(entries) => Val::dict(Dict::from_pairs(
                entries.iter().map(|(k, v)| (*k, v.value())),
            )),
            Ret::None => Val::None,
        }
    }
}

/// A default argument value.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    /// `None`.
    None,
    /// An `int`.
    Int(i64),
}

/// A method of a toolkit: a tool (`@is_tool`) or a plain function the task
/// set-up and assertions call through `run_env_function_call`.
pub struct Func {
    /// Method name.
    pub name: &'static str,
    /// Parameter names after `self`.
    pub params: &'static [&'static str],
    /// Defaults of the trailing parameters.
    pub defaults: &'static [Arg],
    /// `Some` for a tool (its τ² category), `None` for a plain method.
    pub tool: Option<Kind>,
    /// The body; arguments in parameter order.
    pub run: fn(&mut TelecomState, &[Val]) -> PyResult<Ret>,
}

impl Func {
    /// A tool (`@is_tool(kind)`), all parameters required.
    pub const fn tool(
        name: &'static str,
        params: &'static [&'static str],
        kind: Kind,
        run: fn(&mut TelecomState, &[Val]) -> PyResult<Ret>,
    ) -> Func {
        Func {
            name,
            params,
            defaults: &[],
            tool: Some(kind),
            run,
        }
    }

    /// A plain method, with defaults for its trailing parameters.
    pub const fn method(
        name: &'static str,
        params: &'static [&'static str],
        defaults: &'static [Arg],
        run: fn(&mut TelecomState, &[Val]) -> PyResult<Ret>,
    ) -> Func {
        Func {
            name,
            params,
            defaults,
            tool: None,
            run,
        }
    }
}

/// A toolkit class.
pub struct Kit {
    /// `TelecomTools` or `TelecomUserTools`.
    pub class: &'static str,
    /// Its methods; the tools in `ToolKitBase.tools` order.
    pub funcs: &'static [Func],
}

impl Kit {
    /// The tools, in the reference's order.
    pub fn tools(&self) -> impl Iterator<Item = &Func> {
        self.funcs.iter().filter(|f| f.tool.is_some())
    }

    fn bind(&self, f: &Func, kwargs: &[(&str, Val)]) -> PyResult<Vec<Val>> {
        let defaults: Vec<Val> = f
            .defaults
            .iter()
            .map(|d| match d {
                Arg::None => Val::None,
                Arg::Int(i) => Val::Int(i128::from(*i)),
            })
            .collect();
        call::bind_with_defaults(
            &Signature {
                class: self.class,
                name: f.name,
                params: f.params,
            },
            &defaults,
            kwargs,
        )
    }

    /// `ToolKitBase.use_tool(name, **arguments)`, rendered.
    pub fn call_tool(
        &self,
        st: &mut TelecomState,
        name: &str,
        arguments: &serde_json::Value,
    ) -> PyResult<String> {
        let kwargs = super::tools::keyword_arguments(arguments)?;
        call::check_dispatch(&kwargs)?;
        let Some(f) = self.tools().find(|f| f.name == name) else {
            return Err(PyErr::value(format!("Tool '{name}' not found.")));
        };
        let bound = self.bind(f, &kwargs)?;
        Ok((f.run)(st, &bound)?.render())
    }

    /// `getattr(toolkit, name)(**arguments)` for any method.
    pub fn call_function(
        &self,
        st: &mut TelecomState,
        name: &str,
        arguments: &serde_json::Value,
    ) -> PyResult<Val> {
        let Some(f) = self.funcs.iter().find(|f| f.name == name) else {
            return Err(PyErr::other(
                "AttributeError",
                format!("'{}' object has no attribute '{name}'", self.class),
            ));
        };
        let kwargs: Vec<(&str, Val)> = arguments
            .as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.as_str(), Val::from_json(v)))
                    .collect()
            })
            .unwrap_or_default();
        let bound = self.bind(f, &kwargs)?;
        Ok((f.run)(st, &bound)?.value())
    }
}

//! What to run, as a library value: [`RunSpec`] (domain, split, tasks,
//! trials, participants, limits, seed) and [`ModelServices`] (the response
//! cache and the price table every metered model shares).
//!
//! `run`, `train`, `experiment`, `bench --runner` and the evaluation service
//! all build a `RunSpec` and ask it for the stored [`RunConfig`] and the
//! episode [`Participants`](super::Participants); the CLI only parses flags
//! into one. Checks that a library caller could otherwise skip (an unknown
//! task, zero trials, limits no hook can run under, an unknown `sim:`
//! profile) live here.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ecdysis_env::{DEFAULT_MAX_ERRORS, DEFAULT_MAX_STEPS, Domain, EnvError};
use ecdysis_model::{
    CachePolicy, ModelError, ModelFlags, ModelHub, ModelId, ModelRole, PriceTable, PriceTableError,
    ResponseCache, SamplingArgs, SimProfile, UsageLedger,
};
use ecdysis_sandbox::sandbox::{FailurePolicy, LayerSet, Limits, LimitsError, WORLD_VERSION};
use ecdysis_sandbox::store::ComponentHash;

use super::RunConfig;
use super::participants::{AgentSide, StandardParticipants, UserSide};

/// The user-simulator model name of the offline, deterministic user.
pub const SCRIPTED_USER: &str = "scripted";

/// A run specification that cannot work, naming the offending input.
#[derive(Debug, thiserror::Error)]
pub enum RunSpecError {
    /// `trials` is 0.
    #[error("trials must be at least 1")]
    NoTrials,
    /// `max_steps` is 0: no episode could take a step.
    #[error("max_steps must be at least 1")]
    NoSteps,
    /// A requested task id is not in the chosen split.
    #[error("task `{task}` is not in {domain} split {split}")]
    UnknownTask {
        /// The requested id.
        task: String,
        /// The domain searched.
        domain: String,
        /// The split searched (`all` for every task).
        split: String,
    },
    /// No tasks were requested and the split has none.
    #[error("no tasks to run: {domain} split {split} is empty")]
    NoTasks {
        /// The domain whose split is empty.
        domain: String,
        /// The split (`all` for every task).
        split: String,
    },
    /// The agent model is missing or names an unknown `sim:` profile.
    #[error("agent model `{model}`: {reason}")]
    Agent {
        /// The agent model as given.
        model: String,
        /// What is wrong with it (for a `sim:` profile, with the list of
        /// known ones).
        reason: String,
    },
    /// The user model's endpoint settings do not resolve.
    #[error("user model `{model}`: {reason}")]
    User {
        /// The user model as given.
        model: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A sandbox limit no hook could run under (zero fuel or deadline,
    /// memory outside one page to 4 GiB, ...), named by its field.
    #[error(transparent)]
    Limits(#[from] LimitsError),
    /// The domain could not list its tasks.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// The `--prices` table could not be read or parsed.
    #[error("price table {path}: {source}")]
    Prices {
        /// The price table file.
        path: PathBuf,
        /// Why it was refused.
        source: PriceTableError,
    },
    /// The agent's endpoint settings do not resolve (bad extra arguments
    /// or timeout), or a model's HTTP client could not be built.
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// What to run: everything that determines an evaluation's results, plus
/// the simulated latency of a `sim:` agent (which changes timing only).
/// Serializable: a worker process (`--isolate process`, the evaluation
/// service) receives it as JSON and builds the same participants.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunSpec {
    /// Benchmark domain, e.g. `tau2/retail`.
    pub domain: String,
    /// Task split (`None`: every task).
    pub split: Option<String>,
    /// Only these task ids, in this order (empty: the split's tasks).
    pub tasks: Vec<String>,
    /// Trials per task.
    pub trials: u32,
    /// The agent: `model` is an endpoint's model name or `sim:<profile>`.
    pub agent: ModelFlags,
    /// The agent's sampling parameters.
    pub sampling: SamplingArgs,
    /// The user simulator: `model` is [`SCRIPTED_USER`] or an endpoint's
    /// model name; endpoint fields left unset are the agent's.
    pub user: ModelFlags,
    /// Added latency per call of a `sim:` agent (models an endpoint
    /// offline; never part of the results).
    pub sim_latency: Duration,
    /// Sandbox limits of every hook call.
    pub limits: Limits,
    /// What a failing hook does.
    pub policy: FailurePolicy,
    /// The harness's layers that run (`--layers`; all by default).
    pub layers: LayerSet,
    /// Step cap per episode (message hops).
    pub max_steps: u32,
    /// Tool-error cap per episode.
    pub max_errors: u32,
    /// Largest agent request, in estimated prompt tokens: a request over it
    /// is not sent and the episode ends as `request_too_large` (`None`: no
    /// cap; the CLI defaults it to the endpoint's context when it reports
    /// one).
    pub max_request_tokens: Option<u64>,
    /// Run seed; every episode's seed derives from it, the task and the
    /// trial.
    pub seed: u64,
}

impl Default for RunSpec {
    /// The offline defaults of `run`: τ² retail's test split, one trial,
    /// the `sim:mixed` testbed agent and the scripted user.
    fn default() -> Self {
        RunSpec {
            domain: "tau2/retail".into(),
            split: Some("test".into()),
            tasks: vec![],
            trials: 1,
            agent: ModelFlags {
                model: Some("sim:mixed".into()),
                ..ModelFlags::default()
            },
            sampling: SamplingArgs::default(),
            user: ModelFlags {
                model: Some(SCRIPTED_USER.into()),
                ..ModelFlags::default()
            },
            sim_latency: Duration::ZERO,
            limits: Limits::default(),
            policy: FailurePolicy::FailClosed,
            layers: LayerSet::ALL,
            max_steps: DEFAULT_MAX_STEPS,
            max_errors: DEFAULT_MAX_ERRORS,
            max_request_tokens: None,
            seed: 0,
        }
    }
}

impl RunSpec {
    /// The agent's model name (`sim:<profile>` for a testbed agent).
    pub fn agent_model(&self) -> ModelId {
        ModelId::new(self.agent.model.as_deref().unwrap_or_default())
    }

    /// The user simulator's model name.
    pub fn user_model(&self) -> &str {
        self.user.model.as_deref().unwrap_or(SCRIPTED_USER)
    }

    /// Whether the agent is a simulated testbed model: its numbers are
    /// never benchmark results and every output must say so.
    pub fn is_simulated(&self) -> bool {
        self.agent_model().is_simulated()
    }

    /// The split's name for messages (`all` for every task).
    pub fn split_label(&self) -> &str {
        self.split.as_deref().unwrap_or("all")
    }

    /// Checks that need no domain: trials, steps, limits, the agent model.
    pub fn validate(&self) -> Result<(), RunSpecError> {
        if self.trials == 0 {
            return Err(RunSpecError::NoTrials);
        }
        if self.max_steps == 0 {
            return Err(RunSpecError::NoSteps);
        }
        self.limits.validate()?;
        let model = self.agent_model();
        if model.as_str().is_empty() {
            return Err(RunSpecError::Agent {
                model: model.to_string(),
                reason: "no agent model given".into(),
            });
        }
        if model.is_simulated() {
            SimProfile::parse(model.as_str()).map_err(|e| RunSpecError::Agent {
                model: model.to_string(),
                reason: format!("{e}\n{}", SimProfile::help_text()),
            })?;
        }
        Ok(())
    }

    /// The task ids to run: the given ones (each checked against the split,
    /// duplicates dropped, order kept) or every task of the split.
    pub fn task_ids(&self, domain: &dyn Domain) -> Result<Vec<String>, RunSpecError> {
        let visible = domain.tasks(self.split.as_deref())?;
        if self.tasks.is_empty() {
            if visible.is_empty() {
                return Err(RunSpecError::NoTasks {
                    domain: self.domain.clone(),
                    split: self.split_label().into(),
                });
            }
            return Ok(visible.into_iter().map(|t| t.id).collect());
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut ids = Vec::new();
        for t in &self.tasks {
            if !visible.iter().any(|v| &v.id == t) {
                return Err(RunSpecError::UnknownTask {
                    task: t.clone(),
                    domain: self.domain.clone(),
                    split: self.split_label().into(),
                });
            }
            if seen.insert(t) {
                ids.push(t.clone());
            }
        }
        Ok(ids)
    }

    /// The stored configuration of a run of `harness` (a component hash, or
    /// `None` for Direct) on `tasks`.
    pub fn config(&self, harness: Option<ComponentHash>, tasks: Vec<String>) -> RunConfig {
        RunConfig {
            world: WORLD_VERSION.to_string(),
            harness,
            domain: self.domain.clone(),
            split: self.split.clone(),
            tasks,
            trials: self.trials,
            agent_model: self.agent_model(),
            agent_base_url: self.agent.base_url.clone(),
            user_model: self.user_model().to_string(),
            user_base_url: self.user.base_url.clone(),
            seed: self.seed,
            max_steps: self.max_steps,
            max_errors: self.max_errors,
            max_request_tokens: self.max_request_tokens,
            policy: self.policy,
            layers: self.layers,
            limits: self.limits.clone(),
            sampling: self.sampling.clone(),
        }
    }

    /// The agent and user of every episode, metered and cached through
    /// `hub`: the one participants builder of the crate.
    pub fn participants(
        &self,
        hub: &ModelHub,
        domain: &dyn Domain,
    ) -> Result<Arc<StandardParticipants>, RunSpecError> {
        self.validate()?;
        let model = self.agent_model();
        let agent = if model.is_simulated() {
            AgentSide::Sim(
                SimProfile::parse(model.as_str()).map_err(|e| RunSpecError::Agent {
                    model: model.to_string(),
                    reason: e.to_string(),
                })?,
            )
        } else {
            let config = self.agent.clone().resolve(None)?;
            AgentSide::Model(hub.http_model(ModelRole::Agent, config)?)
        };
        let user = if self.user_model() == SCRIPTED_USER {
            UserSide::Scripted
        } else {
            let config = self
                .user
                .clone()
                .or(&self.agent)
                .resolve(None)
                .map_err(|e| RunSpecError::User {
                    model: self.user_model().into(),
                    reason: e.to_string(),
                })?;
            UserSide::Model(hub.http_model(ModelRole::User, config)?)
        };
        Ok(Arc::new(StandardParticipants {
            agent,
            user,
            hub: Some(hub.clone()),
            sim_latency: self.sim_latency,
            base_prompt: domain.system_prompt(),
        }))
    }
}

/// The model services of one process: the response cache and the price
/// table of its usage ledger.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelServices {
    /// Whether responses are read from and written to the cache.
    pub cache: CachePolicy,
    /// The cache directory.
    pub cache_dir: PathBuf,
    /// A JSON price table merged over the embedded one.
    pub prices: Option<PathBuf>,
}

impl Default for ModelServices {
    fn default() -> Self {
        ModelServices {
            cache: CachePolicy::ReadWrite,
            cache_dir: PathBuf::from(".ecdysis/cache"),
            prices: None,
        }
    }
}

impl ModelServices {
    /// A hub with a fresh ledger (the embedded price table plus `prices`),
    /// the cache and the endpoint limiter.
    pub fn hub(&self) -> Result<ModelHub, RunSpecError> {
        let mut table = PriceTable::embedded_default();
        if let Some(p) = &self.prices {
            table = table.merged(PriceTable::load(p).map_err(|source| RunSpecError::Prices {
                path: p.clone(),
                source,
            })?);
        }
        let ledger = Arc::new(UsageLedger::new(table));
        let cache = Arc::new(ResponseCache::new(&self.cache_dir, self.cache));
        Ok(ModelHub::new(ledger, cache))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_specs_are_refused_with_the_input_named() {
        let ok = RunSpec::default();
        assert!(ok.validate().is_ok());
        let zero_trials = RunSpec {
            trials: 0,
            ..RunSpec::default()
        };
        assert!(matches!(
            zero_trials.validate(),
            Err(RunSpecError::NoTrials)
        ));
        let bad_profile = RunSpec {
            agent: ModelFlags {
                model: Some("sim:nonesuch".into()),
                ..ModelFlags::default()
            },
            ..RunSpec::default()
        };
        let err = bad_profile.validate().unwrap_err().to_string();
        assert!(err.contains("sim:nonesuch"), "{err}");
        let no_fuel = RunSpec {
            limits: Limits {
                fuel_per_hook: 0,
                ..Limits::default()
            },
            ..RunSpec::default()
        };
        assert!(matches!(no_fuel.validate(), Err(RunSpecError::Limits(_))));
    }

    #[test]
    fn the_config_records_what_determines_results() {
        let spec = RunSpec {
            seed: 7,
            ..RunSpec::default()
        };
        let hash = ComponentHash::of(b"a harness");
        let c = spec.config(Some(hash.clone()), vec!["1".into()]);
        assert_eq!(
            (c.agent_model.as_str(), c.user_model.as_str(), c.seed),
            ("sim:mixed", SCRIPTED_USER, 7)
        );
        assert_eq!(c.harness, Some(hash));
        assert!(spec.is_simulated());
    }
}

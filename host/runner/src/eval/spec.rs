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

use super::participants::{AgentSide, StandardParticipants, UserSide};
use super::{RunConfig, RunSettings};

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
    /// Domain, split, trials, seed, caps, limits, policy, layers, sampling.
    #[serde(flatten)]
    pub settings: RunSettings,
    /// Only these task ids, in this order (empty: the split's tasks).
    pub tasks: Vec<String>,
    /// The agent: `model` is an endpoint's model name or `sim:<profile>`.
    pub agent: ModelFlags,
    /// The user simulator: `model` is [`SCRIPTED_USER`] or an endpoint's
    /// model name; endpoint fields left unset are the agent's.
    pub user: ModelFlags,
    /// Added latency per call of a `sim:` agent (models an endpoint
    /// offline; never part of the results).
    pub sim_latency: Duration,
}

impl Default for RunSpec {
    /// The offline defaults of `run`: τ² retail's test split, one trial,
    /// the `sim:mixed` testbed agent and the scripted user.
    fn default() -> Self {
        RunSpec {
            settings: RunSettings {
                domain: "tau2/retail".into(),
                split: Some("test".into()),
                trials: 1,
                seed: 0,
                max_steps: DEFAULT_MAX_STEPS,
                max_errors: DEFAULT_MAX_ERRORS,
                max_request_tokens: None,
                policy: FailurePolicy::FailClosed,
                layers: LayerSet::ALL,
                limits: Limits::default(),
                sampling: SamplingArgs::default(),
            },
            tasks: vec![],
            agent: ModelFlags {
                model: Some("sim:mixed".into()),
                ..ModelFlags::default()
            },
            user: ModelFlags {
                model: Some(SCRIPTED_USER.into()),
                ..ModelFlags::default()
            },
            sim_latency: Duration::ZERO,
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
        self.settings.split.as_deref().unwrap_or("all")
    }

    /// Checks that need no domain: trials, steps, limits, the agent model.
    pub fn validate(&self) -> Result<(), RunSpecError> {
        if self.settings.trials == 0 {
            return Err(RunSpecError::NoTrials);
        }
        if self.settings.max_steps == 0 {
            return Err(RunSpecError::NoSteps);
        }
        self.settings.limits.validate()?;
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
        let visible = domain.tasks(self.settings.split.as_deref())?;
        if self.tasks.is_empty() {
            if visible.is_empty() {
                return Err(RunSpecError::NoTasks {
                    domain: self.settings.domain.clone(),
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
                    domain: self.settings.domain.clone(),
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
            settings: self.settings.clone(),
            tasks,
            agent_model: self.agent_model(),
            agent_base_url: self.agent.base_url.clone(),
            user_model: self.user_model().to_string(),
            user_base_url: self.user.base_url.clone(),
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
            device_tools: crate::eval::participants::device_tools(domain),
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
        let mut zero_trials = RunSpec::default();
        zero_trials.settings.trials = 0;
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
        let mut no_fuel = RunSpec::default();
        no_fuel.settings.limits.fuel_per_hook = 0;
        assert!(matches!(no_fuel.validate(), Err(RunSpecError::Limits(_))));
    }

    #[test]
    fn the_config_records_what_determines_results() {
        let mut spec = RunSpec::default();
        spec.settings.seed = 7;
        let hash = ComponentHash::of(b"a harness");
        let c = spec.config(Some(hash.clone()), vec!["1".into()]);
        assert_eq!(
            (
                c.agent_model.as_str(),
                c.user_model.as_str(),
                c.settings.seed
            ),
            ("sim:mixed", SCRIPTED_USER, 7)
        );
        assert_eq!(c.harness, Some(hash));
        assert!(spec.is_simulated());
    }

    #[test]
    fn the_stored_config_keeps_flat_fields_and_reads_earlier_files() {
        let mut spec = RunSpec::default();
        spec.settings.seed = 3;
        spec.settings.max_request_tokens = Some(4096);
        let config = spec.config(None, vec!["5".into()]);
        let json = serde_json::to_value(&config).unwrap();
        let object = json.as_object().unwrap();
        assert!(!object.contains_key("settings"), "{json}");
        for key in [
            "domain",
            "split",
            "trials",
            "seed",
            "max_steps",
            "limits",
            "sampling",
        ] {
            assert!(object.contains_key(key), "{key} missing from {json}");
        }
        assert_eq!(json["max_request_tokens"], 4096);
        assert!(
            !object.contains_key("layers"),
            "all layers are left out: {json}"
        );
        assert_eq!(serde_json::from_value::<RunConfig>(json).unwrap(), config);
        // A config.json written before the shared settings existed, in its
        // field order, reads back as the same configuration.
        let earlier = r#"{"world": "ecdysis:harness/harness@0.1.0", "harness": null,
            "domain": "tau2/retail", "split": "test", "tasks": ["5"], "trials": 1,
            "agent_model": "sim:mixed", "agent_base_url": null, "user_model": "scripted",
            "user_base_url": null, "seed": 3, "max_steps": 200, "max_errors": 10,
            "max_request_tokens": 4096, "policy": "fail-closed",
            "limits": LIMITS, "sampling": SAMPLING}"#
            .replace(
                "LIMITS",
                &serde_json::to_string(&Limits::default()).unwrap(),
            )
            .replace(
                "SAMPLING",
                &serde_json::to_string(&SamplingArgs::default()).unwrap(),
            );
        let read: RunConfig = serde_json::from_str(&earlier).unwrap();
        assert_eq!(read, config);
        let mut other = config.clone();
        other.settings.max_steps = 7;
        assert_ne!(read, other, "a changed setting must not compare equal");
    }
}

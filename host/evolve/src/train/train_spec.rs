//! What to train, as a library value: [`TrainSpec`] (the method, the
//! budgets, the evaluation [`RunSpec`] and the roles), and [`run`], which
//! wires the process's one sandbox, the participants and the roles and
//! runs [`super::train`]. `train` and `experiment` on the command line both
//! parse their flags into a `TrainSpec`; nothing else builds a context.

use ecdysis_sys::progress::{PROGRESS, SECURITY};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{
    CoderId, GateMeasure, RolesConfig, TrainConfig, TrainContext, TrainError, TrainPlan,
    TrainSummary,
};
use crate::code::CoderNetwork;
use crate::diagnose::fdcr::PromptLayout;
use crate::diagnose::roles::{RoleError, RoleSpec};
use crate::diagnose::token_budget::ContextSource;
use ecdysis_env::Domain;
use ecdysis_runner::eval::{ModelServices, RunSettings, RunSpec, RunSpecError};
use ecdysis_sandbox::sandbox::Sandbox;
use ecdysis_sandbox::store::{ComponentStore, Containment};

/// A training run's specification.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainSpec {
    /// What the run does (shared with the run's [`TrainConfig`] record).
    pub plan: TrainPlan,
    /// The harness source crate to start from (copied, never edited).
    pub source: PathBuf,
    /// The training evaluations (its `split` is the training split).
    pub eval: RunSpec,
    /// Who diagnoses and who edits.
    pub roles: RoleSpec,
    /// Cargo target dir shared by candidate builds (default
    /// `<store>/cargo-target`).
    pub cargo_target: Option<PathBuf>,
    /// Episodes at once.
    pub concurrency: usize,
    /// Only these held-out task ids (empty: the whole held-out split).
    pub test_tasks: Vec<String>,
    /// What the power lines are stated for.
    pub power: crate::gate::power::PowerAsk,
    /// Run every evaluation's episodes in these worker processes
    /// (`--isolate process`); `None`: in this process.
    pub workers: Option<ecdysis_runner::isolate::Workers>,
}

impl Default for TrainSpec {
    /// The offline defaults of `train`: Ecdysis from `harness-template` on
    /// τ² retail's training split with the `sim:clumsy` testbed agent.
    fn default() -> Self {
        TrainSpec {
            plan: TrainPlan::default(),
            source: PathBuf::from(super::defaults::SOURCE),
            eval: RunSpec {
                settings: RunSettings {
                    split: Some(super::defaults::TRAIN_SPLIT.into()),
                    ..RunSpec::default().settings
                },
                agent: ecdysis_model::ModelFlags {
                    model: Some(super::defaults::AGENT.into()),
                    ..Default::default()
                },
                ..RunSpec::default()
            },
            roles: RoleSpec::default(),
            cargo_target: None,
            concurrency: 8,
            test_tasks: vec![],
            power: Default::default(),
            workers: None,
        }
    }
}

/// A training specification that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum TrainSpecError {
    /// The evaluation part of the spec is impossible (see [`RunSpecError`]).
    #[error(transparent)]
    Eval(#[from] RunSpecError),
    /// The diagnoser and coder roles cannot work together, or a role's model
    /// cannot be built.
    #[error(transparent)]
    Roles(#[from] RoleError),
    /// There are no training tasks (why).
    #[error("no training tasks: {0}")]
    NoTasks(String),
    /// `--budget-tasks` is 0.
    #[error("the task budget must be at least 1")]
    NoBudget,
    /// `--test-trials` is 0.
    #[error("test trials must be at least 1")]
    NoTestTrials,
    /// `--max-usd` is not a positive, finite number of dollars.
    #[error("the dollar budget must be a positive number of dollars, got {0}")]
    BadUsd(f64),
    /// The harness source directory cannot be resolved.
    #[error("the harness source {path}: {reason}")]
    Source {
        /// The source directory as given.
        path: PathBuf,
        /// Why it cannot be used (e.g. it does not exist).
        reason: String,
    },
    /// Training itself failed.
    #[error(transparent)]
    Train(#[from] TrainError),
}

/// Train as `spec` says, into `out`, with the components in `store`, every
/// episode instantiated from `sandbox` (the process's one engine; make it
/// with [`Sandbox::pooled`] for `spec.concurrency` episodes).
pub async fn run(
    spec: &TrainSpec,
    store: &ComponentStore,
    domain: Arc<dyn Domain>,
    services: &ModelServices,
    sandbox: &Sandbox,
    out: &Path,
) -> Result<TrainSummary, TrainSpecError> {
    spec.eval.validate()?;
    if spec.plan.select.is_some_and(|s| s.budget == 0) {
        return Err(TrainSpecError::NoBudget);
    }
    if spec.plan.test_trials == 0 {
        return Err(TrainSpecError::NoTestTrials);
    }
    if let Some(m) = spec.plan.max_usd
        && !(m.is_finite() && m > 0.0)
    {
        return Err(TrainSpecError::BadUsd(m));
    }
    let train_tasks = spec.eval.task_ids(&*domain)?;
    let test_tasks = match &spec.plan.test_split {
        Some(s) => {
            let held_out = RunSpec {
                settings: RunSettings {
                    split: Some(s.clone()),
                    ..spec.eval.settings.clone()
                },
                tasks: spec.test_tasks.clone(),
                ..spec.eval.clone()
            };
            held_out.task_ids(&*domain)?
        }
        None => vec![],
    };
    let source = std::fs::canonicalize(&spec.source).map_err(|e| TrainSpecError::Source {
        path: spec.source.clone(),
        reason: e.to_string(),
    })?;
    let hub = services.hub()?;
    let target = spec
        .cargo_target
        .clone()
        .unwrap_or_else(|| store.root().join("cargo-target"));
    // The roles' prompt layout: the flag's, else the one the run recorded
    // (per-turn for a run recorded before the option, so a resume asks the
    // requests it asked), else shared-prefix for a new run.
    let layout = match spec.roles.layout {
        Some(l) => l,
        None => super::dir::recorded_layout(out)?.unwrap_or(PromptLayout::SharedPrefix),
    };
    let roles = RoleSpec {
        layout: Some(layout),
        ..spec.roles.clone()
    };
    let roles_config = if spec.roles.any_model() {
        let (budget, source) = spec.roles.resolve_budget().await;
        tracing::info!(
            target: PROGRESS,
            "roles: context budget {} tokens ({}), {} reserved per reply",
            budget.context_tokens,
            match &source {
                ContextSource::Flag => "--roles-context-tokens".to_string(),
                ContextSource::Endpoint(url) => format!("reported by {url}"),
                ContextSource::Default => "the default: the endpoint reports none".to_string(),
            },
            budget.reply_tokens
        );
        RolesConfig {
            sampling: spec.roles.sampling.clone(),
            budget: Some(budget),
            context_source: Some(source),
            // Recorded only where roles deliberate.
            prompt_layout: if spec.roles.any_fdcr() {
                layout
            } else {
                PromptLayout::PerTurn
            },
        }
    } else {
        RolesConfig::default()
    };
    let (diagnoser, coder) = roles.build(
        spec.plan.method,
        &hub,
        &target,
        roles_config.budget.unwrap_or_default(),
        spec.plan.allow_unjailed_builds,
        std::time::Duration::from_millis(spec.plan.coder_latency_ms),
    )?;
    let coder_network = spec.roles.coder_network()?;
    match &coder_network {
        Some(CoderNetwork::Host) => tracing::warn!(
            target: SECURITY,
            "WARNING: the external coder shares the host's network (--coder-network host): \
             it can reach every local service and host"
        ),
        Some(net) => tracing::info!(target: PROGRESS, "external coder network: {net}"),
        _ => {}
    }
    let train = spec.eval.config(None, train_tasks);
    let gate_measure = GateMeasure::for_run(&train, services.cache.reads(), None);
    let config = TrainConfig {
        plan: spec.plan.clone(),
        train,
        test_tasks,
        diagnoser: diagnoser.describe(),
        coder: CoderId::from(coder.name()),
        gate_measure,
        roles: roles_config,
        coder_network,
    };
    // Fresh draws for a gate that re-measures: the same models, the
    // response cache bypassed (with the cache off, the run's own serve).
    let fresh = if config.gate_measure.remeasure && services.cache.reads() {
        let fresh_hub = hub.without_cache();
        Some(spec.eval.participants(&fresh_hub, &*domain)?
            as Arc<dyn ecdysis_runner::eval::Participants>)
    } else {
        None
    };
    let cx = TrainContext {
        store: store.clone(),
        participants: spec.eval.participants(&hub, &*domain)?,
        domain,
        // One sandbox for the whole run (one engine, one pool, one epoch
        // thread): every evaluation, check and screen instantiates from it.
        sandbox: sandbox.clone(),
        concurrency: spec.concurrency,
        power: spec.power,
        cargo_target: target,
        diagnoser,
        coder,
        ledger: hub.ledger().clone(),
        loaded: Mutex::new(Default::default()),
        fresh,
        containment: Containment {
            allow_unjailed: spec.plan.allow_unjailed_builds,
            ..Containment::default()
        },
        isolation: spec.workers.as_ref().map(|w| {
            (
                w.pool.clone(),
                ecdysis_runner::isolate::EpisodeJob {
                    spec: spec.eval.clone(),
                    harness: None,
                    store: std::path::absolute(store.root())
                        .unwrap_or_else(|_| store.root().to_path_buf()),
                    native_cache: store
                        .native_cache()
                        .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.to_path_buf())),
                    source: w.source.clone(),
                    services: services.clone(),
                    prices: None,
                },
            )
        }),
    };
    Ok(super::train(config, &source, out, cx).await?)
}

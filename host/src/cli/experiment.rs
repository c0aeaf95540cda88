//! `experiment`: the three evolution methods side by side, from the flags
//! into the library's [`ExperimentSpec`].

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use ecdysis_host::eval::{ModelServices, RunSpec};
use ecdysis_host::evolve::experiment::{self, ExperimentSpec};
use ecdysis_host::evolve::train::TrainSpec;
use ecdysis_host::model::ModelFlags;
use ecdysis_host::store::ComponentStore;

use super::env::DataArgs;
use super::train::{RoleArgs, role_error};

/// Flags of `experiment`.
#[derive(Args)]
pub struct ExperimentArgs {
    /// The harness source every method starts from.
    #[arg(long, default_value = "harness-template")]
    pub source: PathBuf,
    /// Start from the source's rule engine with empty rule tables.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub start_blank: bool,
    /// Benchmark domain.
    #[arg(long, default_value = "tau2/retail")]
    pub domain: String,
    /// The simulated agent profile trained on.
    #[arg(long, default_value = "sim:clumsy")]
    pub agent_model: String,
    /// Profiles the final harness is also tested on (cross-model transfer).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "sim:mixed,sim:careless,sim:texter"
    )]
    pub transfer: Vec<String>,
    /// Rounds per method.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Only these training task ids (default: the whole training split).
    #[arg(long, value_delimiter = ',')]
    pub tasks: Vec<String>,
    /// Simulated latency of one coder call, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub coder_latency_ms: u64,
    /// Trials per task.
    #[arg(long, default_value_t = 1)]
    pub trials: u32,
    /// Episodes at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Experiment directory (one training run per method inside).
    #[arg(long, default_value = "runs/experiment")]
    pub out: PathBuf,
    /// Cargo target dir shared by candidate builds.
    #[arg(long)]
    pub cargo_target_dir: Option<PathBuf>,
    /// Trials per held-out task at the end of each method's training.
    #[arg(long, default_value_t = 3)]
    pub test_trials: u32,
    /// Only these held-out task ids (default: the whole test split).
    #[arg(long, value_delimiter = ',')]
    pub test_tasks: Vec<String>,
    /// Response cache policy of the role models: read-write, read-only or off.
    #[arg(long, default_value = "read-write")]
    pub cache: String,
    /// Response cache directory.
    #[arg(long, default_value = ".ecdysis/cache")]
    pub cache_dir: PathBuf,
    /// The evolution roles: without them, Ecdysis and Ecdysis without FDCR
    /// run the same heuristic code and share one row. With --fdcr-model,
    /// Ecdysis deliberates; with --coder-model every method's coder is
    /// that model.
    #[command(flatten)]
    pub roles: RoleArgs,
    /// Build candidates without a jail where bubblewrap cannot make one
    /// (see `train --help`); recorded in each run's config.json.
    #[arg(long)]
    pub allow_unjailed_builds: bool,
}

/// `experiment`: every method from the same start, then the comparison.
pub async fn experiment(
    args: ExperimentArgs,
    store: &ComponentStore,
    data: &DataArgs,
) -> Result<()> {
    let defaults = TrainSpec::default();
    let roles = args.roles.spec(None, None)?;
    roles
        .validate(ecdysis_host::evolve::train::Method::Ecdysis)
        .map_err(role_error)?;
    if args.test_trials == 0 {
        anyhow::bail!("--test-trials must be at least 1");
    }
    let services = ModelServices {
        cache: args
            .cache
            .parse()
            .map_err(|e| anyhow::anyhow!("--cache: {e}"))?,
        cache_dir: args.cache_dir.clone(),
        prices: None,
    };
    let spec = ExperimentSpec {
        train: TrainSpec {
            source: args.source,
            rounds: args.rounds,
            // Every method gets every round: the comparison is per round.
            plateau: args.rounds,
            start_blank: args.start_blank,
            coder_latency_ms: args.coder_latency_ms,
            cargo_target: args.cargo_target_dir,
            concurrency: args.concurrency,
            test_trials: args.test_trials,
            test_tasks: args.test_tasks,
            roles,
            allow_unjailed_builds: args.allow_unjailed_builds,
            eval: RunSpec {
                domain: args.domain,
                tasks: args.tasks,
                trials: args.trials,
                agent: ModelFlags {
                    model: Some(args.agent_model),
                    ..ModelFlags::default()
                },
                ..defaults.eval.clone()
            },
            ..defaults
        },
        transfer: args.transfer,
        out: args.out,
    };
    let domain = data.open(&spec.train.eval.domain)?;
    let report = experiment::run(&spec, store, domain, &services).await?;
    print!("{}", report.render());
    Ok(())
}

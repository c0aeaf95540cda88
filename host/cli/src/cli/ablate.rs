//! `ablate`: a harness with each layer switched off in turn, compared with
//! the full harness pair by pair, and the subset the data favours.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;

use ecdysis_evolve::ablate::{self, Ablation, Evaluated};
use ecdysis_model::ModelId;
use ecdysis_runner::eval::{self, ProgressDisplay, RunOptions, rundir};
use ecdysis_sandbox::sandbox::{LayerSet, Sandbox};
use ecdysis_sandbox::store::{ComponentHash, ComponentStore};

use super::env::DataArgs;
use super::eval_args::EvalArgs;
use super::harness_arg::HarnessArg;

/// Flags of `ablate`.
#[derive(Args)]
pub struct AblateArgs {
    /// The harness: a guest crate directory (built now), a .wasm file, a
    /// stored hash or an exported harness directory.
    #[arg(long, default_value = "harness-template")]
    pub harness: HarnessArg,
    /// Task split: layers are chosen on training tasks and judged on
    /// held-out ones (`all` for every task).
    #[arg(long, default_value = "train")]
    pub split: String,
    /// Result directory: one run directory per variant and ablation.json
    /// (default runs/ablate-<domain>-<split>-<harness>-<agent>). Re-running
    /// resumes every variant.
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub eval: EvalArgs,
}

/// `ablation.json`: what was ablated, on what, and the result.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct AblationFile {
    /// The harness's component hash.
    pub harness: ComponentHash,
    /// Benchmark domain.
    pub domain: String,
    /// The split (`all` for every task).
    pub split: String,
    /// The agent model.
    pub agent_model: ModelId,
    /// Tasks × trials of every variant.
    pub tasks: usize,
    /// Trials per task.
    pub trials: u32,
    /// Set when the agent is simulated: never a benchmark result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The variants and the chosen layers.
    pub ablation: Ablation,
}

/// Run the ablation, write `ablation.json`, return it.
pub async fn ablate(
    args: AblateArgs,
    store: &ComponentStore,
    data: &DataArgs,
    quiet: bool,
) -> Result<AblationFile> {
    if args.eval.layers.is_some() {
        bail!("--layers does not apply to `ablate`: it switches the layers off itself");
    }
    let Some(named) = args.harness.component() else {
        bail!("`ablate` needs a harness: Direct has no layers to switch off");
    };
    let split = (args.split != "all").then(|| args.split.clone());
    let mut spec = args
        .eval
        .spec(split, ecdysis_evolve::train::defaults::AGENT)?;
    let concurrency = args.eval.run_concurrency();
    EvalArgs::lift_endpoint_limit(&mut spec, concurrency);
    let spec = args.eval.with_endpoint_cap(spec).await;
    let domain = data.open(&spec.settings.domain)?;
    let source = match super::export::exported(named)? {
        Some((wasm, _)) => wasm.to_string_lossy().into_owned(),
        None => named.to_string(),
    };
    let manifest = store
        .obtain(&source, quiet)
        .with_context(|| format!("loading harness `{}`", args.harness))?;
    let sandbox = Sandbox::pooled(spec.settings.limits.clone(), concurrency.most())?;
    let (loaded, _) = store.load(&sandbox, &manifest.hash)?;
    let hash = manifest.hash.clone();
    let tasks = spec.task_ids(&*domain)?.len();
    let out = args.out.clone().unwrap_or_else(|| {
        let run = super::run::default_out(
            &spec.settings.domain,
            spec.split_label(),
            Some(&hash),
            &spec.agent_model(),
        );
        let name = run.file_name().map(|n| n.to_string_lossy().into_owned());
        PathBuf::from("runs").join(format!("ablate-{}", name.unwrap_or_default()))
    });
    if !quiet {
        eprintln!(
            "ablating {} on {} {} ({tasks} tasks x {} trial(s)): the full harness, each layer off, then the chosen subset, into {}",
            manifest.hash.short(),
            spec.settings.domain,
            spec.split_label(),
            spec.settings.trials,
            out.display()
        );
        if spec.is_simulated() {
            eprintln!("{}", eval::SIMULATED_LABEL);
        }
    }
    let services = args.eval.services()?;
    let hub = services.hub()?;
    let evaluate = async |layers: LayerSet| -> Result<Evaluated> {
        let dir = out.join(ablate::variant_name(layers));
        if !quiet {
            eprintln!("variant {} ({layers})", ablate::variant_name(layers));
        }
        let options = RunOptions {
            out: dir.clone(),
            concurrency: concurrency.most(),
            adaptive: EvalArgs::adaptive(concurrency, &hub),
            force_new: false,
            progress: ProgressDisplay::Lines,
            max_requeues: args.eval.max_requeues,
        };
        let mut variant = spec.clone();
        variant.settings.layers = layers;
        let harness = Some((hash.clone(), loaded.clone()));
        let summary = super::run::execute(
            &args.eval,
            &variant,
            harness,
            domain.clone(),
            (store, data),
            &hub,
            options,
        )
        .await?;
        let episodes = rundir::read_trajectories(&dir.join(rundir::TRAJECTORIES_FILE), false)?;
        Ok(Evaluated {
            per_task: summary.metrics.per_task,
            episodes,
            dir,
        })
    };
    let ablation = ablate::ablate(evaluate, spec.settings.seed)
        .await
        .map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let file = AblationFile {
        harness: hash,
        domain: spec.settings.domain.clone(),
        split: spec.split_label().to_string(),
        agent_model: spec.agent_model(),
        tasks,
        trials: spec.settings.trials,
        label: spec
            .is_simulated()
            .then(|| eval::SIMULATED_LABEL.to_string()),
        ablation,
    };
    rundir::write_json(&out.join("ablation.json"), &file)?;
    Ok(file)
}

impl AblationFile {
    /// The header and table.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Some(l) = &self.label {
            out += &format!("note: {l}\n");
        }
        out += &format!(
            "layer ablation of {} on {} {} ({} tasks x {} trial(s)), agent {}\n",
            self.harness.short(),
            self.domain,
            self.split,
            self.tasks,
            self.trials,
            self.agent_model
        );
        out + &self.ablation.render()
    }
}

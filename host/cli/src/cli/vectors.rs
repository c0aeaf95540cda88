//! `vectors`: record conformance vectors from a run's episodes.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;

use ecdysis_runner::vectors::{self, RecordedRun};
use ecdysis_sandbox::sandbox::Sandbox;
use ecdysis_sandbox::store::{ComponentHash, ComponentStore};

use super::env::DataArgs;
use super::harness_arg::HarnessArg;

/// Flags of `vectors`.
#[derive(Args)]
pub struct VectorsArgs {
    /// The run directory whose configuration is re-run (`run --out`, or a
    /// training run's `evals/<hash>-<split>/`). Its agent must be a `sim:`
    /// agent and its user the scripted one, so the re-run is deterministic.
    #[arg(long)]
    pub run: PathBuf,
    /// The harness to record (hash, .wasm or crate directory). Default: the
    /// run's own harness, in which case the re-run is also checked against
    /// the recorded trajectories.
    #[arg(long)]
    pub harness: Option<String>,
    /// Only these tasks of the run (comma-separated), to keep the file small.
    #[arg(long, value_delimiter = ',')]
    pub tasks: Vec<String>,
    /// The vector file to write (JSON lines, `ecdysis-hook-vectors/1`).
    #[arg(long)]
    pub out: PathBuf,
    /// Write the vectors and exit 0 even when a re-run episode does not
    /// reproduce its recorded trajectory (it is still reported).
    #[arg(long)]
    pub allow_divergence: bool,
}

pub async fn vectors(
    args: VectorsArgs,
    store: &ComponentStore,
    data: &DataArgs,
    quiet: bool,
) -> Result<()> {
    let run = RecordedRun::open(&args.run)
        .with_context(|| format!("reading run directory {}", args.run.display()))?;
    let spec = match (&args.harness, &run.config.harness) {
        (Some(h), _) => h.clone(),
        (None, Some(h)) => h.to_string(),
        (None, None) => bail!(
            "{} is a Direct run (no harness): pass --harness to record one on its tasks",
            args.run.display()
        ),
    };
    let manifest = store
        .obtain(&spec, quiet)
        .with_context(|| format!("loading harness `{spec}`"))?;
    let sandbox = Sandbox::new(run.config.settings.limits.clone())?;
    let (harness, _) = store.load(&sandbox, &manifest.hash)?;
    let domain = data.open(&run.config.settings.domain)?;
    let report = vectors::record(
        &run,
        domain,
        &harness,
        &manifest.hash,
        &args.tasks,
        &args.out,
        |line| {
            if !quiet {
                eprintln!("{line}");
            }
        },
    )
    .await?;
    if !quiet {
        eprintln!(
            "wrote {} hook calls of {} episodes to {} (simulated agent — not a benchmark result)",
            report.records,
            report.episodes,
            args.out.display()
        );
    }
    if !report.compared {
        eprintln!(
            "note: harness {} is not the run's own ({}), so the re-run was not compared with the recorded trajectories",
            manifest.hash.short(),
            run.config
                .harness
                .as_ref()
                .map_or(HarnessArg::DIRECT, ComponentHash::as_str)
        );
    } else if report.diverged.is_empty() {
        if !quiet {
            eprintln!(
                "the re-run reproduced all {} recorded trajectories",
                report.reproduced
            );
        }
    } else {
        eprintln!(
            "warning: {} of {} re-run episodes did not reproduce the recorded trajectory:",
            report.diverged.len(),
            report.episodes
        );
        for (task, trial, what) in &report.diverged {
            eprintln!("  task {task} trial {trial}: {what}");
        }
        if !args.allow_divergence {
            bail!(
                "the re-run diverged from the run directory (vectors written anyway; --allow-divergence accepts this)"
            );
        }
    }
    println!("{}", args.out.display());
    Ok(())
}

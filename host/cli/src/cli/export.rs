//! `export`: write a stored harness with its manifest for other runtimes.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;

use ecdysis_host::sandbox::{FailurePolicy, Limits, Sandbox};
use ecdysis_host::store::{ComponentHash, ComponentStore, ExportOptions, read_training_run};

use super::limits::LimitArgs;

/// Flags of `export`.
#[derive(Args)]
pub struct ExportArgs {
    /// The harness: a stored hash (or unique prefix), a .wasm file or a
    /// guest crate directory. Default with --train-run: the run's incumbent.
    pub harness: Option<String>,
    /// Output directory: harness.wasm and harness.json are written there.
    #[arg(long)]
    pub out: PathBuf,
    /// Also write an OCI image layout of the component here (Wasm OCI
    /// artifact media types), ready for `oras cp --from-oci-layout`,
    /// `skopeo copy oci:DIR ...` or `crane push`.
    #[arg(long)]
    pub oci: Option<PathBuf>,
    /// Reference name of the image inside the OCI layout (default: the
    /// short hash).
    #[arg(long, requires = "oci")]
    pub oci_tag: Option<String>,
    /// A training run directory (`ecdysis-host train --out`): its limits,
    /// failure policy and scores for this harness go into harness.json.
    #[arg(long)]
    pub train_run: Option<PathBuf>,
    /// Failure policy recorded for runtimes (default: the training run's,
    /// else fail-closed).
    #[arg(long)]
    pub policy: Option<FailurePolicy>,
    /// Limits recorded for runtimes; without --train-run unset flags keep
    /// the host defaults. With --train-run the run's limits apply and these
    /// flags are refused (the point is the limits it was trained under).
    #[command(flatten)]
    pub limits: LimitArgs,
}

pub fn export(args: ExportArgs, store: &ComponentStore, quiet: bool) -> Result<()> {
    let spec = match (&args.harness, &args.train_run) {
        (Some(h), _) => h.clone(),
        (None, Some(run)) => {
            let path = run.join("incumbent");
            std::fs::read_to_string(&path)
                .with_context(|| format!("reading the run's incumbent from {}", path.display()))?
                .trim()
                .to_string()
        }
        (None, None) => {
            bail!("name a harness to export, or give --train-run to export its incumbent")
        }
    };
    let manifest = store
        .obtain(&spec, quiet)
        .with_context(|| format!("loading harness `{spec}`"))?;
    let limit_flags_set = args.limits.fuel.is_some()
        || args.limits.deadline_ms.is_some()
        || args.limits.memory_mib.is_some();
    let (training, limits, policy) = match &args.train_run {
        Some(run) => {
            if limit_flags_set {
                bail!(
                    "--fuel/--deadline-ms/--memory-mib cannot be combined with --train-run: the export records the limits the harness was trained under"
                );
            }
            let (facts, limits, policy) = read_training_run(run, &manifest.hash)?;
            (Some(facts), limits, args.policy.unwrap_or(policy))
        }
        None => (None, args.limits.limits()?, args.policy.unwrap_or_default()),
    };
    let sandbox = Sandbox::new(Limits::default())?;
    let opts = ExportOptions {
        out: args.out.clone(),
        oci: args.oci.clone(),
        oci_tag: args.oci_tag.clone(),
        limits,
        policy,
        training,
    };
    let hash: &ComponentHash = &manifest.hash;
    let outcome = store
        .export(&sandbox, hash, &opts)
        .with_context(|| format!("exporting {}", hash.short()))?;
    if !quiet {
        eprintln!(
            "exported {} ({} bytes, {}; lineage of {}) to {}",
            hash.short(),
            outcome.export.size,
            outcome.export.world,
            outcome.export.lineage.len(),
            args.out.display()
        );
        if let Some(t) = &outcome.export.training {
            let score = |s: Option<f64>| {
                s.map(|x| format!("{x:.3}"))
                    .unwrap_or_else(|| "unknown".into())
            };
            eprintln!(
                "training: {} of {} ({}, {}): train {} test {}{}",
                t.role,
                t.run,
                t.method,
                t.agent_model,
                score(t.train_score),
                score(t.test_score),
                t.note
                    .as_deref()
                    .map(|n| format!(" — {n}"))
                    .unwrap_or_default()
            );
        }
        if let (Some(dir), Some(d)) = (&args.oci, &outcome.oci_manifest_digest) {
            eprintln!("OCI layout in {} (manifest {d})", dir.display());
        }
    }
    println!("{}", outcome.json_path.display());
    Ok(())
}

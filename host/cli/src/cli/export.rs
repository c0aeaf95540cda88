//! `export`: write a stored harness with its manifest for other runtimes.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;

use ecdysis_sandbox::sandbox::{FailurePolicy, LayerSet, Limits, Sandbox};
use ecdysis_sandbox::store::{
    ComponentHash, ComponentStore, ExportOptions, HarnessExport, read_training_run,
};

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
    /// The layers runtimes call, comma-separated (contract, skills,
    /// realize, regulate) or `all` (default: the layers the training run
    /// selected for its incumbent, else all).
    #[arg(long)]
    pub layers: Option<LayerSet>,
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
            let path = ecdysis_runner::eval::rundir::TrainLayout::new(run).incumbent();
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
    let (training, limits, policy, layers) = match &args.train_run {
        Some(run) => {
            if limit_flags_set {
                bail!(
                    "--fuel/--deadline-ms/--memory-mib cannot be combined with --train-run: the export records the limits the harness was trained under"
                );
            }
            let t = read_training_run(run, &manifest.hash)?;
            (
                Some(t.facts),
                t.limits,
                args.policy.unwrap_or(t.policy),
                args.layers.unwrap_or(t.layers),
            )
        }
        None => (
            None,
            args.limits.limits()?,
            args.policy.unwrap_or_default(),
            args.layers.unwrap_or_default(),
        ),
    };
    let sandbox = Sandbox::new(Limits::default())?;
    let opts = ExportOptions {
        out: args.out.clone(),
        oci: args.oci.clone(),
        oci_tag: args.oci_tag.clone(),
        limits,
        policy,
        layers,
        training,
    };
    let hash: &ComponentHash = &manifest.hash;
    let outcome = store
        .export(&sandbox, hash, &opts)
        .with_context(|| format!("exporting {}", hash.short()))?;
    if !quiet {
        eprintln!(
            "exported {} ({} bytes, {}; lineage of {}; layers {}) to {}",
            hash.short(),
            outcome.export.size,
            outcome.export.world,
            outcome.export.lineage.len(),
            outcome.export.layers,
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

/// An exported harness named on the command line: a directory holding
/// `harness.wasm` and `harness.json` (what `export --out` writes), or a
/// `.wasm` file with a `harness.json` beside it. Returns the component's
/// path and the manifest, checked against the bytes (the same check the
/// Python and JavaScript runtimes make); `None` for anything else (a
/// crate directory, a stored hash, a bare .wasm).
pub fn exported(spec: &str) -> Result<Option<(PathBuf, HarnessExport)>> {
    let path = std::path::Path::new(spec);
    let (wasm, json) = if path.is_dir() && path.join("harness.json").is_file() {
        (path.join("harness.wasm"), path.join("harness.json"))
    } else if path.is_file() && path.extension().is_some_and(|e| e == "wasm") {
        match path.parent().map(|d| d.join("harness.json")) {
            Some(j) if j.is_file() => (path.to_path_buf(), j),
            _ => return Ok(None),
        }
    } else {
        return Ok(None);
    };
    let text = std::fs::read(&json).with_context(|| format!("reading {}", json.display()))?;
    let manifest: HarnessExport = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not an exported harness's manifest", json.display()))?;
    let bytes = std::fs::read(&wasm).with_context(|| format!("reading {}", wasm.display()))?;
    let hash = ComponentHash::of(&bytes);
    if hash != manifest.hash {
        bail!(
            "{} hashes to blake3 {hash}, but {} says {}",
            wasm.display(),
            json.display(),
            manifest.hash
        );
    }
    Ok(Some((wasm, manifest)))
}

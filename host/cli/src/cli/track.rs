//! `--mlflow` at the end of `run`, `train` and `experiment`, and
//! `mlflow sync`: result directories mirrored into MLflow.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::{Args, Subcommand};

use ecdysis_track::{SyncOptions, SyncReport};

/// Where results are tracked.
#[derive(Args, Clone, Debug, Default)]
pub struct TrackArgs {
    /// At the end, mirror the result directory into this MLflow tracking
    /// server (`http://host:5000`): the config as parameters, the numbers
    /// of every round and of the summary as metrics, harness hash, lineage
    /// and simulated/real label as tags, the report and accepted
    /// candidates' diffs as artifacts. A server that is down or slow never
    /// fails the command: what was not sent is kept in `mlflow.json` and
    /// `ecdysis-host mlflow sync DIR` sends it later, each item once.
    #[arg(long, env = "MLFLOW_TRACKING_URI", value_name = "URI")]
    pub mlflow: Option<String>,
    /// The MLflow experiment the runs go into.
    #[arg(
        long,
        env = "MLFLOW_EXPERIMENT_NAME",
        default_value = "ecdysis",
        value_name = "NAME"
    )]
    pub mlflow_experiment: String,
    /// While `train` or `experiment` runs, also send what its finished
    /// rounds added every this many seconds, so MLflow shows a training as
    /// it goes (0: only at the end).
    #[arg(long, default_value_t = 30.0, value_name = "SECS")]
    pub mlflow_interval_secs: f64,
}

impl TrackArgs {
    fn options(&self) -> SyncOptions {
        SyncOptions {
            uri: self.mlflow.clone(),
            experiment: self.mlflow_experiment.clone(),
            ..SyncOptions::default()
        }
    }
}

#[derive(Subcommand)]
pub enum MlflowCommand {
    /// Send what an MLflow server lacks of result directories (run,
    /// training or experiment), each item once: after a run whose server
    /// was down, or to track a directory made without --mlflow. Exits 1
    /// when something is still not sent.
    Sync {
        /// The result directories.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Default: the server each directory was sent to before.
        #[command(flatten)]
        track: TrackArgs,
    },
}

/// One line saying what a sync did (and how to finish it).
fn describe(dir: &Path, r: &SyncReport) -> String {
    let runs: Vec<String> = r.runs.iter().map(|(n, id)| format!("{n} = {id}")).collect();
    let mut line = format!(
        "mlflow: {} item(s) sent to {} (runs: {})",
        r.sent,
        r.uri,
        if runs.is_empty() {
            "none".into()
        } else {
            runs.join(", ")
        }
    );
    if r.pending > 0 {
        line.push_str(&format!(
            "; {} item(s) not sent{}: kept in {}, send them with `ecdysis-host mlflow sync {}`",
            r.pending,
            r.error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default(),
            dir.join(ecdysis_track::STATE_FILE).display(),
            dir.display()
        ));
    }
    if !r.refused.is_empty() {
        line.push_str(&format!(
            "; {} item(s) refused by the server: {}",
            r.refused.len(),
            r.refused.join("; ")
        ));
    }
    line
}

/// The sync of a directory while its command runs (see
/// [`TrackArgs::mlflow_interval_secs`]). Each item is sent once, so a sync
/// sends only what the rounds since the last one added; what one could
/// not send is left to the next, and the sync at the end reports it.
pub struct LiveSync {
    task: Option<(
        tokio::task::JoinHandle<()>,
        std::sync::Arc<tokio::sync::Notify>,
    )>,
}

impl LiveSync {
    /// Start syncing `dir` on `rt` every interval, if tracking was asked for.
    pub fn start(rt: &tokio::runtime::Runtime, args: &TrackArgs, dir: &Path) -> LiveSync {
        let secs = args.mlflow_interval_secs;
        if args.mlflow.is_none() || !(secs.is_finite() && secs > 0.0) {
            return LiveSync { task: None };
        }
        let interval = std::time::Duration::from_secs_f64(secs.max(0.1));
        let stop = std::sync::Arc::new(tokio::sync::Notify::new());
        let (options, dir, stopped) = (args.options(), dir.to_path_buf(), stop.clone());
        let task = rt.spawn(async move {
            loop {
                tokio::select! {
                    _ = stopped.notified() => break,
                    _ = tokio::time::sleep(interval) => {}
                }
                // Nothing to send before the command has written its config.
                if !dir.join("config.json").is_file() {
                    continue;
                }
                match ecdysis_track::sync(&dir, &options).await {
                    Ok(r) if r.sent > 0 => eprintln!("{}", describe(&dir, &r)),
                    Ok(_) => {}
                    Err(e) => tracing::debug!(error = %e, "mlflow: live sync failed; the sync at the end retries"),
                }
            }
        });
        LiveSync {
            task: Some((task, stop)),
        }
    }

    /// Stop syncing (after the sync in flight, if any).
    pub async fn finish(self) {
        if let Some((task, stop)) = self.task {
            stop.notify_one();
            let _ = task.await;
        }
    }
}

/// Sync `dir` if tracking was asked for; never an error (a warning says
/// what happened).
pub async fn track_at_end(args: &TrackArgs, dir: &Path) {
    if args.mlflow.is_none() {
        return;
    }
    match ecdysis_track::sync(dir, &args.options()).await {
        Ok(r) => eprintln!("{}", describe(dir, &r)),
        Err(e) => eprintln!("mlflow: not tracked: {e}"),
    }
}

/// `mlflow sync`: true when everything was sent.
pub async fn mlflow_command(cmd: MlflowCommand) -> Result<bool> {
    let MlflowCommand::Sync { dirs, track } = cmd;
    let mut complete = true;
    for dir in &dirs {
        let r = ecdysis_track::sync(dir, &track.options())
            .await
            .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
        complete &= r.pending == 0 && r.error.is_none();
        eprintln!("{}", describe(dir, &r));
    }
    Ok(complete)
}

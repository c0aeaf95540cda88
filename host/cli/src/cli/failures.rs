//! `failures`: the failure groups of result directories.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use ecdysis_host::report::failures::{self, FailureFilter};

#[derive(Args)]
pub struct FailuresArgs {
    /// Run, training or experiment directories; every run directory under
    /// them is read (an episode found in several counts once).
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// An episode fails when its reward is below this.
    #[arg(long, default_value_t = 1.0)]
    pub lambda: f64,
    /// Only runs of the harness whose hash starts with this (`none`: runs
    /// without a harness).
    #[arg(long)]
    pub harness: Option<String>,
    /// Print the groups as JSON (every failure record included) instead of
    /// text.
    #[arg(long)]
    pub json: bool,
}

/// Prints the groups; `false` when a line or file could not be read (the
/// groups of everything else are still printed, the problems go to
/// stderr).
pub fn failures_command(args: FailuresArgs) -> Result<bool> {
    let filter = FailureFilter {
        harness: args.harness,
    };
    let view = failures::collect(&args.dirs, args.lambda, &filter)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&view)?);
    } else {
        print!("{}", failures::render_text(&view));
    }
    for p in &view.problems {
        eprintln!("error: {p} (skipped)");
    }
    Ok(view.problems.is_empty())
}

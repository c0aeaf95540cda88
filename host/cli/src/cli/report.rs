//! `report`: one self-contained HTML page for result directories.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;

use ecdysis_report::{self as report, ReportOptions};

#[derive(Args)]
pub struct ReportArgs {
    /// Run, training or experiment directories (several: compared side by
    /// side, then each shown in full).
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// Where to write the page (default <first dir>/report.html).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Open the page with xdg-open when there is one (else print its path).
    #[arg(long)]
    pub open: bool,
    /// Bootstrap resamples for the 95% intervals (100 to 1,000,000: fewer
    /// cannot place the 2.5th and 97.5th percentiles).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(100..=1_000_000))]
    pub bootstrap: u32,
    /// Seed of the bootstrap.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Serve the report of directories still being written, and keep it
    /// current: the page reloads itself when a directory changes (new
    /// episodes, rounds, a summary) and shows progress and an estimate of
    /// the time left. For a run, a training or an experiment; Ctrl-C ends.
    #[arg(long, conflicts_with_all = ["out", "open"])]
    pub watch: bool,
    /// Where --watch listens.
    #[arg(long, default_value = "127.0.0.1:8765", requires = "watch")]
    pub addr: std::net::SocketAddr,
}

/// Write the report of `dirs` to `out` (default `<first dir>/report.html`)
/// and return its path.
pub fn write_report(dirs: &[PathBuf], out: Option<&Path>, opts: &ReportOptions) -> Result<PathBuf> {
    let out = out
        .map(Path::to_path_buf)
        .unwrap_or_else(|| dirs[0].join("report.html"));
    let bytes = report::write(dirs, opts, &out)
        .with_context(|| format!("making the report {}", out.display()))?;
    eprintln!("report: {} ({:.1} MB)", out.display(), bytes as f64 / 1e6);
    Ok(out)
}

pub fn report_command(args: ReportArgs) -> Result<()> {
    let opts = ReportOptions {
        bootstrap_samples: args.bootstrap as usize,
        seed: args.seed,
        ..ReportOptions::default()
    };
    if args.watch {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("starting the runtime")?;
        return rt.block_on(super::watch::watch(args.dirs, opts, args.addr));
    }
    let out = write_report(&args.dirs, args.out.as_deref(), &opts)?;
    if args.open && open_in_browser(&out) {
        return Ok(());
    }
    println!("{}", out.display());
    Ok(())
}

/// `xdg-open` the page; false when there is none or it failed.
fn open_in_browser(path: &Path) -> bool {
    std::process::Command::new("xdg-open")
        .arg(path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

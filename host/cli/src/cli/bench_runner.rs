//! `bench --runner`: the runner's own share of an evaluation, measured
//! `--repeat` times in one process, optionally checked against (or
//! recorded into) a baseline file of the host's work over the waiting floor.

use std::process::ExitCode;

use anyhow::{Context, Result};

use ecdysis_runner::bench;
use ecdysis_runner::bench::baseline::{
    BaselineEntry, BaselineOptions, RunnerBaseline, median_ratio, this_profile,
};
use ecdysis_sandbox::sandbox::{Limits, Sandbox};
use ecdysis_sandbox::store::ComponentStore;

use super::bench::BenchArgs;
use super::env::DataArgs;

/// Runs the runner bench the flags ask for; a failed check is the exit
/// status, after the numbers are printed.
pub fn runner(
    args: &BenchArgs,
    store: &ComponentStore,
    data: &DataArgs,
    runtime: tokio::runtime::Runtime,
) -> Result<ExitCode> {
    let opts = bench::runner::RunnerBenchOptions {
        latency: std::time::Duration::from_millis(args.latency_ms),
        concurrency: args.concurrency,
        trials: args.trials,
        ..Default::default()
    };
    let harness_name = args.harness.to_string();
    // Read before measuring: a missing or damaged baseline is reported
    // before a minute of measurement, not after.
    let baseline = match &args.check {
        Some(path) => Some(RunnerBaseline::read(path)?),
        None => None,
    };
    let options = BaselineOptions::of(&opts);
    if let (Some(path), Some(baseline)) = (&args.check, &baseline) {
        baseline.check(path, &harness_name, &options, Some(0.0))?;
    }
    let domain = data.open(&opts.domain)?;
    let loaded = match args.harness.component() {
        None => None,
        Some(named) => {
            let manifest = store.obtain(named, true)?;
            let sandbox = Sandbox::pooled(Limits::default(), args.concurrency)?;
            let (loaded, _) = store.load(&sandbox, &manifest.hash)?;
            Some((manifest.hash, loaded))
        }
    };
    let mut reports = Vec::new();
    for i in 0..args.repeat {
        let report = runtime
            .block_on(bench::runner::run(&opts, loaded.clone(), domain.clone()))
            .with_context(|| format!("runner bench, run {} of {}", i + 1, args.repeat))?;
        if args.repeat > 1 && !args.json {
            println!("{}", repetition_line(i + 1, args.repeat, &report));
        }
        reports.push(report);
    }
    let ratio = median_ratio(&reports);
    // The run whose ratio is the median (the first run without a floor):
    // its full numbers are the ones printed.
    let shown = reports
        .iter()
        .min_by(|a, b| {
            let distance = |r: &bench::runner::RunnerBenchReport| {
                (r.outside_hooks_over_floor().unwrap_or(0.0) - ratio.unwrap_or(0.0)).abs()
            };
            distance(a).total_cmp(&distance(b))
        })
        .expect("at least one repetition");
    let check = match (&args.check, &baseline) {
        (Some(path), Some(baseline)) => {
            Some(baseline.check(path, &harness_name, &options, ratio)?)
        }
        _ => None,
    };
    let value = serde_json::json!({
        "harness": harness_name,
        "profile": this_profile(),
        "options": options,
        "runs": reports,
        "outside_hooks_over_floor": ratio,
        "check": check.as_ref().map(|c| serde_json::json!({
            "measured": c.measured, "recorded": c.recorded, "limit": c.limit,
            "recorded_commit": c.recorded_commit, "passed": c.passed(),
        })),
    });
    super::bench::print_report(args.json, &value, || {
        let mut text = shown.render(&opts, &harness_name);
        if let Some(ratio) = ratio {
            text += &format!(
                "host work outside hooks = {ratio:.2}x the waiting floor ({} of {} run(s); goal <= 5x)\n",
                if args.repeat > 1 { "median" } else { "one" },
                args.repeat
            );
        }
        if let Some(check) = &check {
            text += &check.render();
            text.push('\n');
        }
        text
    })?;
    if let Some(path) = &args.record {
        let ratio = ratio.with_context(|| {
            format!(
                "no waiting floor was measured, so there is nothing to record in {}",
                path.display()
            )
        })?;
        RunnerBaseline::read_or_empty(path)?.record(
            path,
            BaselineEntry {
                harness: harness_name.clone(),
                profile: this_profile().into(),
                options,
                outside_hooks_over_floor: ratio,
                tolerance: args.tolerance,
                commit: args.record_commit.clone().unwrap_or_default(),
                recorded: ecdysis_sys::fsutil::now_rfc3339(),
            },
        )?;
        eprintln!(
            "recorded {ratio:.2}x for {harness_name} ({} build) in {}",
            this_profile(),
            path.display()
        );
    }
    Ok(match check {
        Some(c) if !c.passed() => ExitCode::FAILURE,
        _ => ExitCode::SUCCESS,
    })
}

/// One repetition's numbers on one line.
fn repetition_line(i: u32, n: u32, r: &bench::runner::RunnerBenchReport) -> String {
    let us = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    format!(
        "run {i}/{n}: host CPU {} µs/episode, {:.0} in hooks, waiting floor {} µs/episode, outside hooks = {}x the floor, wall {:.3} s",
        us(r.cpu_us_per_episode()),
        r.hook_us_per_episode(),
        us(r.floor_us_per_episode()),
        r.outside_hooks_over_floor()
            .map_or("-".to_string(), |v| format!("{v:.2}")),
        r.wall_seconds
    )
}

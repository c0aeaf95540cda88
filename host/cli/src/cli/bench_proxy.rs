//! `bench --proxy`: what `ecdysis-host proxy` adds to a request. The
//! measuring code is `ecdysis_proxy::bench`; this loads the harnesses as
//! `proxy --harness` does, and prints.

use anyhow::{Result, bail};

use ecdysis_proxy::bench::{BenchHarness, ProxyBenchOptions};
use ecdysis_sandbox::sandbox::Limits;
use ecdysis_sandbox::store::ComponentStore;

use super::bench::BenchArgs;

/// `--proxy`: the proxy with each `--proxy-harness` against a direct call
/// to the same scripted upstream, and LiteLLM's proxy with `--litellm`.
pub fn proxy(
    args: &BenchArgs,
    store: &ComponentStore,
    quiet: bool,
    runtime: tokio::runtime::Runtime,
) -> Result<()> {
    let mut harnesses = Vec::new();
    for named in &args.proxy_harness {
        let (manifest, harness) =
            super::proxy::load_harness(named, store, Limits::default(), quiet)?;
        harnesses.push(BenchHarness {
            name: format!("{named} {}", manifest.hash.short()),
            harness,
        });
    }
    let opts = ProxyBenchOptions {
        rounds: args.rounds,
        conversations: args.conversations,
        concurrency: args.concurrency,
        throughput_conversations: args.throughput_conversations,
        litellm: args.litellm.clone(),
        ..ProxyBenchOptions::default()
    };
    if !quiet {
        eprintln!(
            "proxy bench: {} rounds of {} conversations one at a time and {} at concurrency {} per side{}...",
            opts.rounds,
            opts.conversations,
            opts.throughput_conversations,
            opts.concurrency,
            if opts.litellm.is_some() {
                ", LiteLLM started first"
            } else {
                ""
            }
        );
    }
    let report = runtime.block_on(ecdysis_proxy::bench::run(&harnesses, &opts))?;
    super::bench::print_report(args.json, &report, || report.render())?;
    if !report.all_succeeded() {
        bail!("some requests failed (above); the numbers do not time the same work");
    }
    Ok(())
}

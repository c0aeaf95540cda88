//! The starting harness's cost per episode, as fuel: a regression check that
//! no load can make flaky. Fuel counts the guest's WebAssembly instructions,
//! so one build of the template on the same seeded `sim:` episodes burns the
//! same fuel on any machine; the bound (`tests/runner-bench/template-fuel.json`)
//! leaves room for another compiler's code. A change like lowering a copy
//! of the whole policy before each search (most of the telecom contract
//! hook's 1.76 M fuel before `293004f`) fails it.

use crate::support;

use std::collections::BTreeMap;
use std::process::Command;

use ecdysis_runner::eval::rundir::read_trajectories;

#[derive(serde::Deserialize)]
struct Bounds {
    tolerance: f64,
    commit: String,
    fuel_per_episode: BTreeMap<String, f64>,
}

/// Fuel per episode of `harness` (a crate directory) on `domain`'s test
/// split, one trial, with the default `sim:mixed` agent.
fn fuel_per_episode(store: &std::path::Path, harness: &std::path::Path, domain: &str) -> f64 {
    let out_dir = store.with_file_name(domain.replace('/', "-"));
    let out = Command::new(support::host_bin())
        .current_dir(support::repo_root())
        .arg("--quiet")
        .arg("--store")
        .arg(store)
        .args(["run", "--domain", domain, "--trials", "1", "--harness"])
        .arg(harness)
        .arg("--out")
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "run on {domain}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records = read_trajectories(&out_dir.join("trajectories.jsonl"), false).unwrap();
    assert!(records.len() >= 20, "{domain}: {} episodes", records.len());
    let fuel: u64 = records
        .iter()
        .flat_map(|r| r.hooks.iter().map(|h| h.fuel))
        .sum();
    fuel as f64 / records.len() as f64
}

#[test]
fn the_templates_fuel_per_episode_stays_within_its_recorded_bound() {
    let root = support::repo_root();
    let bounds: Bounds = serde_json::from_slice(
        &std::fs::read(root.join("tests/runner-bench/template-fuel.json")).unwrap(),
    )
    .unwrap();
    assert!(bounds.tolerance >= 1.0 && bounds.fuel_per_episode.len() == 3);
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let mut over = Vec::new();
    for (domain, recorded) in &bounds.fuel_per_episode {
        let measured = fuel_per_episode(&store, &root.join("harness-template"), domain);
        eprintln!("{domain}: {measured:.0} fuel per episode (recorded {recorded:.0})");
        // A bound that no longer bounds anything is as wrong as a regression.
        assert!(
            measured > recorded / 3.0,
            "{domain}: {measured:.0} fuel per episode, under a third of the recorded {recorded:.0}: record the new figures"
        );
        if measured > recorded * bounds.tolerance {
            over.push(format!(
                "{domain}: {measured:.0} fuel per episode, recorded {recorded:.0} at {} (limit {:.0})",
                bounds.commit,
                recorded * bounds.tolerance
            ));
        }
    }
    assert!(
        over.is_empty(),
        "the starting harness got more expensive per episode; if that is intended, record the new figures in tests/runner-bench/template-fuel.json:\n{}",
        over.join("\n")
    );
}

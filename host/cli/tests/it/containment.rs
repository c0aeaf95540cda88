//! Containment: a harness cannot crash or stall the host, or make it do
//! unbounded work. Every attack is run through the CLI in a child process
//! whose wall time and peak memory are measured, and is followed by a
//! positive control (a good harness works right after).

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::{Measured, host_bin, repo_root, run_measured};

/// Peak RSS allowed for a `run` of one episode, in KiB: the host with both
/// τ² domains' data loaded stays far below it.
const RSS_BOUND_KIB: u64 = 600 * 1024;

/// `run` of one retail episode with `harness` (a .wasm file), into `out`.
fn run_one(store: &Path, harness: &Path, out: &Path, extra: &[&str]) -> Measured {
    let mut cmd = std::process::Command::new(host_bin());
    cmd.current_dir(repo_root())
        .args(["--quiet", "--store"])
        .arg(store)
        .args(["run", "--harness"])
        .arg(harness)
        .args([
            "--domain",
            "tau2/retail",
            "--split",
            "test",
            "--tasks",
            "5",
            "--agent-model",
            "sim:oracle",
            "--concurrency",
            "1",
            "--cache",
            "off",
            "--out",
        ])
        .arg(out)
        .args(extra);
    run_measured(&mut cmd)
}

fn only_episode(out: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(out.join("trajectories.jsonl")).expect("a trajectory");
    let mut lines = text.lines();
    let first = serde_json::from_str(lines.next().expect("one episode")).unwrap();
    assert!(lines.next().is_none(), "exactly one episode");
    first
}

/// The hostile guest with one attack, or (`None`) the pass-through Direct
/// harness, the positive control of a whole episode.
fn wasm(dir: &Path, feature: Option<&str>) -> std::path::PathBuf {
    let path = dir.join(format!("{}.wasm", feature.unwrap_or("direct")));
    let bytes = match feature {
        Some(f) => support::guest("guests/hostile", Some(f)),
        None => support::guest("guests/direct", None),
    };
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn a_harness_forcing_a_call_after_every_step_ends_at_max_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let hostile = wasm(tmp.path(), Some("force-call-forever"));
    let m = run_one(
        &store,
        &hostile,
        &tmp.path().join("hostile"),
        &["--max-steps", "80"],
    );
    assert!(m.status.success(), "{}", m.stderr);
    let ep = only_episode(&tmp.path().join("hostile"));
    // Once a stack overflow that aborted the whole process; now every forced
    // call is a counted step and the episode ends at the cap.
    assert_eq!(ep["end"], "max_steps", "{}", ep["end_detail"]);
    assert_eq!(ep["steps"], 80);
    let forced = ep["transcript"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["source"] == "forced")
        .count();
    assert!(forced >= 50, "{forced} forced calls");
    assert!(m.wall < Duration::from_secs(60), "{:?}", m.wall);
    assert!(m.max_rss_kib < RSS_BOUND_KIB, "{} KiB", m.max_rss_kib);

    // Positive control: the same crate without the attack, same store.
    let good = wasm(tmp.path(), None);
    let m = run_one(&store, &good, &tmp.path().join("good"), &[]);
    assert!(m.status.success(), "{}", m.stderr);
    let ep = only_episode(&tmp.path().join("good"));
    assert!(
        ep["end"] == "agent_stop" || ep["end"] == "user_stop",
        "{}",
        ep["end"]
    );
}

#[test]
fn attacker_sized_host_work_through_the_env_view_is_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let hostile = wasm(tmp.path(), Some("calc-bomb"));
    // 64 calls of a 1.2 MB expression per realize: each is refused at the
    // env view's argument cap before any parsing.
    let m = run_one(&store, &hostile, &tmp.path().join("hostile"), &[]);
    assert!(m.status.success(), "{}", m.stderr);
    let ep = only_episode(&tmp.path().join("hostile"));
    let blocked: Vec<&serde_json::Value> = ep["transcript"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["blocked"] == true)
        .collect();
    assert!(!blocked.is_empty(), "realize answered");
    assert!(
        blocked[0]["content"]
            .as_str()
            .unwrap()
            .contains("over the env view's cap"),
        "{}",
        blocked[0]["content"]
    );
    // Every realize hook finished well inside its 2 s deadline.
    for h in ep["hooks"].as_array().unwrap() {
        assert!(h["error"].is_null(), "{h}");
        assert!(h["micros"].as_u64().unwrap() < 2_000_000, "{h}");
    }
    assert!(m.wall < Duration::from_secs(60), "{:?}", m.wall);
    assert!(m.max_rss_kib < RSS_BOUND_KIB, "{} KiB", m.max_rss_kib);

    let good = wasm(tmp.path(), None);
    let m = run_one(&store, &good, &tmp.path().join("good"), &[]);
    assert!(m.status.success(), "{}", m.stderr);
    assert_ne!(
        only_episode(&tmp.path().join("good"))["end"],
        "harness_error"
    );
}

#[test]
fn guidance_aliasing_one_huge_string_is_refused_with_bounded_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let hostile = wasm(tmp.path(), Some("guidance-alias-bomb"));
    // 4096 blocks aliasing one 8 MiB string would be 32 GiB if lifted
    // naively: `check` must fail the skills hook with a typed error.
    let mut cmd = std::process::Command::new(host_bin());
    cmd.current_dir(repo_root())
        .args(["--store"])
        .arg(&store)
        .args(["check", "--json"])
        .arg(&hostile);
    let m = run_measured(&mut cmd);
    assert!(!m.status.success(), "the check must fail");
    let report: serde_json::Value = serde_json::from_str(&m.stdout).expect("a JSON report");
    let skills = report["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["hook"] == "skills")
        .expect("a skills probe");
    let kind = skills["error_kind"].as_str().unwrap_or_default();
    assert!(
        ["trap", "contract_violation", "memory_limit"].contains(&kind),
        "{skills}"
    );
    assert!(m.wall < Duration::from_secs(60), "{:?}", m.wall);
    assert!(m.max_rss_kib < RSS_BOUND_KIB, "{} KiB", m.max_rss_kib);

    let good = wasm(tmp.path(), None);
    let mut cmd = std::process::Command::new(host_bin());
    cmd.current_dir(repo_root())
        .args(["--store"])
        .arg(&store)
        .args(["check"])
        .arg(&good);
    let m = run_measured(&mut cmd);
    assert!(m.status.success(), "{}{}", m.stdout, m.stderr);
}

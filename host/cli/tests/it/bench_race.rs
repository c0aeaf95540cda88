//! `bench --race`: the racing gate replayed on a run recorded with
//! `--gate-race off` decides and saves what an actual `--gate-race on` run
//! of the same configuration and seeds did; a run without what the replay
//! needs is an error naming the file; a decision that differs fails loudly.

use crate::support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use ecdysis_runner::eval::rundir::read_trajectories;
use serde_json::Value;

/// A coder that adds a prompt rule for a domain no task has: the candidate
/// builds to new bytes, and the agent sees nothing new, so it can at best
/// tie with the incumbent.
fn inert_coder(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let script = dir.join("inert-coder.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\nset -e\nsed -i 's|^pub static PROMPT_RULES: &\\[PromptRule\\] = &\\[|&\\n    \
         PromptRule { domain: \"no-such-domain\", text: \"never shown\" },|' src/tables.rs\n",
    )
    .unwrap();
    script
}

/// One round of `ecdysis-nofdcr` with `sim:clumsy`, two episodes at once.
fn train(tmp: &Path, race: &str) -> PathBuf {
    let coder_dir = tmp.join("coder");
    let command = format!("sh {}", inert_coder(&coder_dir).display());
    // Each run alone in a directory, as an experiment's methods are.
    let out = tmp.join(race).join("train");
    let o = support::train_command(
        tmp,
        &[
            "--method",
            "ecdysis-nofdcr",
            "--rounds",
            "1",
            "--concurrency",
            "2",
            "--coder-command",
            &command,
            "--coder-rw",
            coder_dir.to_str().unwrap(),
            "--gate-race",
            race,
            "--out",
        ],
    )
    .arg(&out)
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

fn bench(args: &[&str], dirs: &[&Path]) -> std::process::Output {
    let mut c = std::process::Command::new(support::host_bin());
    c.current_dir(support::repo_root())
        .args(["--quiet", "bench"])
        .args(args);
    for d in dirs {
        c.arg("--race").arg(d);
    }
    c.output().unwrap()
}

fn first_round(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("rounds.jsonl")).unwrap();
    serde_json::from_str(text.lines().next().expect("one round")).unwrap()
}

fn candidate_episodes(dir: &Path, cand: &str) -> Vec<ecdysis_runner::agent::EpisodeRecord> {
    let path = dir
        .join("evals")
        .join(format!("{}-train", &cand[..16]))
        .join("trajectories.jsonl");
    read_trajectories(&path, false).unwrap()
}

#[test]
fn the_replayed_race_decides_and_saves_as_a_raced_run_did() {
    let tmp = tempfile::tempdir().unwrap();
    let full_dir = train(tmp.path(), "off");
    let raced_dir = train(tmp.path(), "on");
    let raced = first_round(&raced_dir);
    let cand = raced["candidate"].as_str().expect("a candidate was built");
    assert_eq!(first_round(&full_dir)["candidate"], cand, "the same edit");
    let episodes = &raced["gate_episodes"];
    let (run, needed) = (
        episodes["run"].as_u64().unwrap(),
        episodes["needed"].as_u64().unwrap(),
    );
    assert!(run < needed, "the fixture's race saved nothing: {raced}");

    let o = bench(&["--race-concurrency", "2", "--json"], &[&full_dir]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let gate = &report["runs"][0]["gates"][0];
    assert_eq!(report["runs"][0]["gates"].as_array().unwrap().len(), 1);
    assert_eq!(gate["raced_accepted"], raced["accepted"], "{gate}");
    assert_eq!(gate["full_accepted"], raced["accepted"], "{gate}");
    assert_eq!(gate["run"], run, "{gate}");
    assert_eq!(gate["needed"], needed, "{gate}");
    assert_eq!(gate["decided_after"], episodes["decided_after"], "{gate}");
    // The calls saved are those of the full run's episodes of the tasks
    // the raced run never evaluated.
    let ran: BTreeSet<String> = candidate_episodes(&raced_dir, cand)
        .into_iter()
        .map(|e| e.task_id)
        .collect();
    let all = candidate_episodes(&full_dir, cand);
    let saved: u64 = all
        .iter()
        .filter(|e| !ran.contains(&e.task_id))
        .map(|e| e.agent_usage.calls)
        .sum();
    assert!(saved > 0);
    assert_eq!(gate["calls_saved"], saved, "{gate}");
    let method = &report["methods"]["ecdysis-nofdcr"];
    assert_eq!(method["identical"], 1, "{method}");
    assert_eq!(method["simulated"], true, "{method}");

    // The text report labels the simulated agent and names the method.
    let o = bench(&["--race-concurrency", "2"], &[&tmp.path().join("off")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("sim:clumsy (simulated)"), "{text}");
    assert!(!text.contains("MISMATCH"), "{text}");

    // A raced run lacks the episodes not needed: an error naming the
    // candidate's file, not a replay of what it did not run.
    let o = bench(&[], &[&raced_dir]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("{}-train/trajectories.jsonl", &cand[..16]))
            && err.contains("--gate-race off"),
        "{err}"
    );

    // A recorded decision the episodes do not support is a mismatch.
    let rounds = full_dir.join("rounds.jsonl");
    let text = std::fs::read_to_string(&rounds).unwrap();
    std::fs::write(
        &rounds,
        text.replacen("\"accepted\":false", "\"accepted\":true", 1),
    )
    .unwrap();
    let o = bench(&[], &[&full_dir]);
    assert!(!o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("MISMATCH") && out.contains("round 1"), "{out}");
}

#[test]
fn a_directory_without_a_run_is_an_error_naming_what_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let o = bench(&[], &[tmp.path()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("is not a training run") && err.contains("config.json"),
        "{err}"
    );
    // A run whose config is not a training run's.
    let run = tmp.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("config.json"), "{}").unwrap();
    std::fs::write(run.join("rounds.jsonl"), "").unwrap();
    let o = bench(&[], &[&run]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("parsing {}", run.join("config.json").display())),
        "{err}"
    );
}

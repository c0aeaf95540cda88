//! The training protocol end to end, through the `ecdysis-host train` CLI:
//! the held-out test of the initial and the final harness (and Direct) with
//! their own trials, pass^k and intervals; the simulated-agent label; a gate
//! that re-measures the incumbent in the same round when the agent is
//! stochastic (a mock endpoint whose every answer differs) and reuses its
//! stored score when it is deterministic; a round with no failure makes no
//! diagnosis and no coder call; an edit that builds to known bytes ends the
//! round and overwrites nothing; a raced gate stops early with the full
//! gate's decision.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ecdysis_runner::eval::SIMULATED_LABEL;
use ecdysis_runner::eval::rundir::read_trajectories;
use ecdysis_testkit::mock::{MockReply, MockServer};
use serde_json::Value;

/// `train` with explicit flags only (the shared helper's defaults would
/// clash with the ones tested here). Candidates share one cargo target.
fn train(dir: &Path, args: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(support::host_bin());
    c.current_dir(support::repo_root())
        .args(["--store"])
        .arg(dir.join("store"))
        .arg("train")
        .args(["--cargo-target-dir"])
        .arg(support::repo_root().join("target/evolve-candidates"))
        .args(args);
    c
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(
        &std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn rounds(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("rounds.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn interval_ok(v: &Value) {
    let (e, lo, hi) = (
        v["estimate"].as_f64().unwrap(),
        v["low"].as_f64().unwrap(),
        v["high"].as_f64().unwrap(),
    );
    assert!(
        lo <= e && e <= hi && (0.0..=1.0).contains(&lo) && hi <= 1.0,
        "{v}"
    );
}

#[test]
fn initial_and_final_are_tested_on_the_held_out_split_with_their_own_trials() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("train");
    let o = train(
        tmp.path(),
        &[
            "--method",
            "ecdysis-nofdcr",
            "--start-blank",
            "--rounds",
            "1",
            "--tasks",
            "0,1,2,3,4,6,7,8",
            "--agent-model",
            "sim:clumsy",
            "--test-tasks",
            "5,9,12",
            "--test-trials",
            "2",
            "--test-direct",
            "--out",
        ],
    )
    .arg(&out)
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let s = json(&out.join("summary.json"));
    // The label, printed and stored.
    assert_eq!(s["label"], SIMULATED_LABEL);
    assert!(stdout.contains(SIMULATED_LABEL), "{stdout}");
    assert!(stderr.contains(SIMULATED_LABEL), "{stderr}");
    assert_eq!(s["rounds"].as_array().unwrap().len(), 1);
    assert_eq!(s["accepted"], 1, "the clumsy profile gets a fix: {s}");
    let t = &s["test"];
    assert_eq!(t["split"], "test");
    assert_eq!(t["initial"]["harness"], s["initial"], "{t}");
    assert_eq!(t["final"]["harness"], s["incumbent"], "{t}");
    assert_ne!(t["initial"]["harness"], t["final"]["harness"]);
    assert_eq!(t["direct"]["harness"], "direct");
    for which in ["initial", "final", "direct"] {
        let x = &t[which];
        assert_eq!(x["trials"], 2, "{which}: {x}");
        assert_eq!(x["tasks"], 3, "{which}: {x}");
        assert_eq!(x["episodes"], 6, "{which}: {x}");
        interval_ok(&x["intervals"]["accuracy"]);
        let pk = x["intervals"]["pass_hat_k"].as_array().unwrap();
        assert_eq!(pk.len(), 2, "pass^1 and pass^2: {x}");
        for p in pk {
            interval_ok(&p[1]);
        }
        // Each evaluation has its own result directory with two trials.
        let dir = out.join(x["dir"].as_str().unwrap());
        let records = read_trajectories(&dir.join("trajectories.jsonl"), false).unwrap();
        assert_eq!(records.len(), 6, "{}", dir.display());
        assert!(records.iter().any(|r| r.trial == 1));
    }
    assert_eq!(
        s["test_score"], t["final"]["intervals"]["accuracy"]["estimate"],
        "test_score is the final incumbent's"
    );
    // Printed: both harnesses, with intervals and pass^k.
    assert!(stdout.contains("initial  accuracy"), "{stdout}");
    assert!(stdout.contains("final    accuracy"), "{stdout}");
    assert!(stdout.contains("direct   accuracy"), "{stdout}");
    assert!(stdout.contains("pass^2"), "{stdout}");
    // A simulated agent is deterministic: the incumbent's stored score is
    // reused, and config.json says why.
    let config = json(&out.join("config.json"));
    assert_eq!(config["gate_measure"]["remeasure"], false, "{config}");
    assert_eq!(config["test_trials"], 2);
    let r = &rounds(&out)[0];
    assert_eq!(r["incumbent_measure"], "reused", "{r}");
    assert_eq!(r["candidate_measure"], "reused", "{r}");
}

#[test]
fn a_round_without_failures_calls_neither_the_roles_nor_the_coder() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("train");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(MockServer::start()).unwrap();
    server.set_fallback(MockReply::text("a role or coder reply"));
    let base = server.base_url();
    // The oracle profile follows the gold plan: nothing fails.
    let o = train(
        tmp.path(),
        &[
            "--method",
            "ecdysis",
            "--rounds",
            "2",
            "--plateau",
            "5",
            "--tasks",
            "0,1,2",
            "--agent-model",
            "sim:oracle",
            "--test-split",
            "none",
            "--fdcr-model",
            "m-roles",
            "--coder-model",
            "m-coder",
            "--roles-base-url",
            &base,
            "--roles-api-key-env",
            "",
            "--cache",
            "off",
            "--out",
        ],
    )
    .arg(&out)
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rs = rounds(&out);
    assert_eq!(rs.len(), 2);
    for r in &rs {
        assert_eq!(r["failures"], 0, "{r}");
        assert_eq!(r["coder_calls"], 0, "{r}");
        assert!(
            r["decision"]
                .as_str()
                .unwrap()
                .starts_with("nothing to fix"),
            "{r}"
        );
        assert!(r["candidate"].is_null(), "{r}");
    }
    let chats = server
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .count();
    assert_eq!(chats, 0, "no FDCR and no coder request");
    assert!(!out.join("rounds/1/transcript.json").exists());
}

/// A stochastic agent behind a mock endpoint: every answer is a new draw
/// (its text carries a counter), and whether the agent says the magic
/// words decides the outcome of the episodes where nothing needs doing.
fn stochastic_agent(
    counter: Arc<AtomicU64>,
) -> impl Fn(&ecdysis_testkit::mock::MockRequest) -> MockReply {
    move |_req| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        MockReply::text(&format!("Thank you, goodbye (draw {n}). ###STOP###"))
    }
}

/// An external coder that appends a comment to `src/tables.rs`: the source
/// changes, the component's bytes do not.
fn comment_coder(dir: &Path) -> PathBuf {
    let script = dir.join("coder.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\nset -e\nprintf '\\n// reviewed by the coder\\n' >> src/tables.rs\n",
    )
    .unwrap();
    script
}

#[test]
fn a_stochastic_agent_gets_the_incumbent_re_measured_each_round_and_known_bytes_end_the_round() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("train");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(MockServer::start()).unwrap();
    let draws = Arc::new(AtomicU64::new(0));
    server.set_handler(stochastic_agent(draws.clone()));
    let base = server.base_url();
    let script = comment_coder(tmp.path());
    let command = format!("sh {}", script.display());
    // The jailed coder reads its script from the test's directory.
    let tmp_s = tmp.path().to_string_lossy().into_owned();
    // A cache of this test's own: the stored evaluation must be this run's.
    let cache = tmp.path().join("cache");
    let args = |rounds: &'static str| -> Vec<String> {
        [
            "--method",
            "ecdysis-nofdcr",
            "--rounds",
            rounds,
            "--plateau",
            "5",
            "--tasks",
            "0,1,2",
            "--agent-model",
            "m-agent",
            "--agent-base-url",
            &base,
            "--agent-api-key-env",
            "",
            "--temperature",
            "0.7",
            "--test-split",
            "none",
            "--coder-command",
            &command,
            "--coder-ro",
            &tmp_s,
            "--cache-dir",
            cache.to_str().unwrap(),
            "--out",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let run = |rounds: &'static str| {
        let a = args(rounds);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let o = train(tmp.path(), &a).arg(&out).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    run("2");
    let config = json(&out.join("config.json"));
    assert_eq!(config["gate_measure"]["remeasure"], true, "{config}");
    assert!(
        config["gate_measure"]["reason"]
            .as_str()
            .unwrap()
            .contains("temperature 0.7"),
        "{config}"
    );
    assert_eq!(config["train"]["sampling"]["temperature"], 0.7);
    // The temperature is on the wire of every agent request (the others
    // are the probe for the endpoint's context window).
    for r in server
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
    {
        assert_eq!(r.json().unwrap()["temperature"], 0.7);
    }
    let rs = rounds(&out);
    assert_eq!(rs.len(), 2);
    let initial = std::fs::read_to_string(out.join("initial")).unwrap();
    let initial = initial.trim();
    let stored = out.join("evals").join(format!("{}-train", &initial[..16]));
    let stored_texts = agent_texts(&stored);
    for (i, r) in rs.iter().enumerate() {
        let n = i + 1;
        assert_eq!(r["incumbent_measure"], "fresh", "{r}");
        assert_eq!(r["incumbent"], initial, "nothing can be accepted: {r}");
        // Measured in this round, on the same tasks, trials and seeds, with
        // the response cache bypassed: new draws, not the stored episodes.
        let fresh = out
            .join("evals")
            .join(format!("{}-train-round{n}", &initial[..16]));
        let texts = agent_texts(&fresh);
        assert_eq!(
            seeds(&fresh),
            seeds(&stored),
            "same tasks, trials and seeds"
        );
        assert!(
            texts.iter().all(|t| !stored_texts.contains(t)),
            "round {n} replayed stored answers"
        );
    }
    // Round 1: the comment-only edit builds to the incumbent's own bytes.
    assert_eq!(
        rs[0]["decision"], "no change: the edit builds to the incumbent's bytes",
        "{}",
        rs[0]
    );
    assert!(rs[0]["candidate"].is_null());
    assert_eq!(rs[0]["coder_calls"], 1);
    // The incumbent's own directory holds only what the start wrote.
    let own = out.join("candidates").join(initial);
    for f in [
        "spec.json",
        "diff.patch",
        "transcript.json",
        "manifest.json",
    ] {
        assert!(
            !own.join(f).exists(),
            "{f} written over the incumbent's files"
        );
    }
    let summary = json(&out.join("summary.json"));
    assert_eq!(
        summary["final_train_score"], rs[1]["incumbent_score"],
        "the final score is the latest measurement, not another draw"
    );
    assert!(
        summary["label"].is_null(),
        "a model endpoint is not simulated"
    );
}

fn agent_texts(dir: &Path) -> Vec<String> {
    read_trajectories(&dir.join("trajectories.jsonl"), false)
        .unwrap()
        .iter()
        .flat_map(|r| r.agent_texts())
        .filter(|t| t.contains("draw"))
        .collect()
}

fn seeds(dir: &Path) -> Vec<(String, u32, u64)> {
    let mut v: Vec<_> = read_trajectories(&dir.join("trajectories.jsonl"), false)
        .unwrap()
        .iter()
        .map(|r| (r.task_id.clone(), r.trial, r.seed))
        .collect();
    v.sort();
    v
}

/// An external coder that makes the same byte-changing, behaviour-neutral
/// edit every time (a prompt rule for a domain that does not exist) and
/// stamps its source with the run's number in a comment: two runs give two
/// different sources that build to the same bytes.
fn same_bytes_coder(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let script = dir.join("same-bytes-coder.sh");
    let counter = dir.join("coder-runs");
    let body = r#"#!/bin/sh
set -e
n=$(cat 'COUNTER' 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" > 'COUNTER'
sed -i "s|^pub static PROMPT_RULES: &\[PromptRule\] = &\[|&\n    // coder run $n\n    PromptRule { domain: \"no-such-domain\", text: \"never shown\" },|" src/tables.rs
"#;
    std::fs::write(&script, body.replace("COUNTER", counter.to_str().unwrap())).unwrap();
    script
}

/// `ecdysis-nofdcr` from a blank start with `sim:clumsy` on tasks where it
/// fails some (0, 3 and 4) and an external `command` writing in `coder_rw`,
/// plus `extra`, into `out`.
fn clumsy_same_bytes(
    tmp: &Path,
    command: &str,
    coder_rw: &str,
    extra: &[&str],
    out: &Path,
) -> std::process::Output {
    train(
        tmp,
        &[
            "--method",
            "ecdysis-nofdcr",
            "--start-blank",
            "--tasks",
            "0,1,2,3,4,6",
            "--agent-model",
            "sim:clumsy",
            "--test-split",
            "none",
            "--coder-command",
            command,
            "--coder-rw",
            coder_rw,
        ],
    )
    .args(extra)
    .arg("--out")
    .arg(out)
    .output()
    .unwrap()
}

/// An edit that builds to the bytes of a candidate already judged ends the
/// round without touching that candidate's files (it used to overwrite the
/// candidate's source, spec, transcript and diff with the new round's).
#[test]
fn an_edit_that_builds_to_a_judged_candidates_bytes_leaves_its_files_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("train");
    // The jailed coder reads its script and keeps its counter here.
    let coder_dir = tmp.path().join("coder");
    let command = format!("sh {}", same_bytes_coder(&coder_dir).display());
    let coder_s = coder_dir.to_string_lossy().into_owned();
    // sim:clumsy fails tasks 0, 3 and 4 of these from a blank start: each
    // round calls the coder. Its edit changes nothing the agent sees, so
    // the candidate ties the incumbent and is rejected; round 2's edit
    // builds to that candidate's bytes.
    let run = || {
        clumsy_same_bytes(
            tmp.path(),
            &command,
            &coder_s,
            &["--rounds", "2", "--plateau", "5"],
            &out,
        )
    };
    let o = run();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rs = rounds(&out);
    assert_eq!(rs.len(), 2, "{rs:?}");
    let first = rs[0]["candidate"]
        .as_str()
        .expect("round 1 built a candidate");
    assert_eq!(rs[0]["accepted"], false, "{}", rs[0]);
    assert_eq!(rs[1]["coder_calls"], 1, "{}", rs[1]);
    assert!(rs[1]["candidate"].is_null(), "{}", rs[1]);
    let decision = rs[1]["decision"].as_str().unwrap();
    assert!(
        decision.starts_with("no change: the edit builds to the bytes of candidate")
            && decision.contains(&first[..12]),
        "{decision}"
    );
    // The candidate's files are round 1's: its source has run 1's stamp.
    let cand = out.join("candidates").join(first);
    let tables = std::fs::read_to_string(cand.join("source/src/tables.rs")).unwrap();
    assert!(tables.contains("// coder run 1"), "round 1's source");
    assert!(
        !tables.contains("// coder run 2"),
        "overwritten by round 2's source"
    );
    let diff = std::fs::read_to_string(cand.join("diff.patch")).unwrap();
    assert!(
        diff.contains("coder run 1") && !diff.contains("coder run 2"),
        "{diff}"
    );
    assert_eq!(
        std::fs::read_to_string(coder_dir.join("coder-runs"))
            .unwrap()
            .trim(),
        "2",
        "the coder ran in both rounds"
    );

    // A kill during round 1's gate leaves the candidate's files and no
    // record of the round: resumed, the round's edit builds to those bytes
    // again, and the candidate is judged, not taken for judged.
    std::fs::write(out.join("rounds.jsonl"), "").unwrap();
    let o = run();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rs = rounds(&out);
    assert_eq!(rs.len(), 2, "{rs:?}");
    assert_eq!(rs[0]["candidate"], first, "{}", rs[0]);
    let decision = rs[0]["decision"].as_str().unwrap();
    assert!(decision.starts_with("rejected"), "{decision}");
    let decision = rs[1]["decision"].as_str().unwrap();
    assert!(decision.contains("already judged"), "{decision}");
}

/// The racing gate stops a candidate that can no longer win, with the
/// full gate's decision and fewer episodes; `--gate-race off` evaluates
/// every task and is recorded in the run's config.
#[test]
fn a_raced_gate_stops_early_with_the_full_gates_decision() {
    let tmp = tempfile::tempdir().unwrap();
    let coder_dir = tmp.path().join("coder");
    let command = format!("sh {}", same_bytes_coder(&coder_dir).display());
    let coder_s = coder_dir.to_string_lossy().into_owned();
    // sim:clumsy fails tasks 0, 3 and 4 of these from a blank start and
    // solves the others; the coder's edit changes nothing the agent sees,
    // so the candidate can at best tie. One episode at a time: batches of
    // one task.
    let run = |race: &str| -> (PathBuf, Value) {
        let out = tmp.path().join(format!("train-{race}"));
        let o = clumsy_same_bytes(
            tmp.path(),
            &command,
            &coder_s,
            &["--rounds", "1", "--concurrency", "1", "--gate-race", race],
            &out,
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(json(&out.join("config.json"))["gate_race"], race);
        let r = rounds(&out).remove(0);
        (out, r)
    };
    let (raced_dir, raced) = run("on");
    let (full_dir, full) = run("off");
    for r in [&raced, &full] {
        assert_eq!(r["accepted"], false, "{r}");
        assert_eq!(r["incumbent_score"], 0.5, "{r}");
        assert_eq!(r["gate_episodes"]["needed"], 6, "{r}");
    }
    assert_eq!(raced["candidate"], full["candidate"], "the same edit");
    // The failing tasks first: once the candidate failed them too it could
    // only tie, and the solved tasks were not needed.
    assert_eq!(raced["gate_episodes"]["raced"], true, "{raced}");
    assert_eq!(raced["gate_episodes"]["run"], 3, "{raced}");
    assert_eq!(raced["gate_episodes"]["not_needed"], 3, "{raced}");
    let decision = raced["decision"].as_str().unwrap();
    assert!(
        decision.starts_with("rejected: at most 0.5000")
            && decision.contains("decided after 3 of 6 episodes, 3 not needed"),
        "{decision}"
    );
    assert_eq!(full["gate_episodes"]["raced"], false, "{full}");
    assert_eq!(full["gate_episodes"]["run"], 6, "{full}");
    assert_eq!(full["gate_episodes"]["not_needed"], 0, "{full}");
    assert_eq!(full["decision"], "rejected: 0.5000 does not beat 0.5000");
    // The candidate's result directories hold what was run: no failure
    // stands in for an episode not run.
    let cand = raced["candidate"].as_str().unwrap();
    let episodes = |dir: &Path| {
        read_trajectories(
            &dir.join("evals")
                .join(format!("{}-train", &cand[..16]))
                .join("trajectories.jsonl"),
            false,
        )
        .unwrap()
    };
    let mut tasks: Vec<String> = episodes(&raced_dir)
        .into_iter()
        .map(|r| r.task_id)
        .collect();
    tasks.sort();
    assert_eq!(tasks, ["0", "3", "4"]);
    assert_eq!(episodes(&full_dir).len(), 6);
}

fn experiment(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(support::host_bin())
        .current_dir(support::repo_root())
        .args(["--store"])
        .arg(dir.join("store"))
        .arg("experiment")
        .args(["--cargo-target-dir"])
        .arg(support::repo_root().join("target/evolve-candidates"))
        .args([
            "--rounds",
            "1",
            "--tasks",
            "0,1,3,4",
            "--test-tasks",
            "5,9",
            "--test-trials",
            "1",
            "--transfer",
            "sim:mixed",
            "--coder-latency-ms",
            "0",
        ])
        .args(args)
        .output()
        .unwrap()
}

/// Accommodation measured without the testbed's labels: every accepted
/// candidate of every method and its parent are evaluated with the other
/// agent models on the training tasks; the label follows from the gains
/// (recomputed here from the evaluations' own summaries), and is set
/// beside the testbed's ground truth with the agreement.
#[test]
fn experiment_measures_accommodation_by_transfer_and_compares_it_with_the_ground_truth() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("exp");
    let o = std::process::Command::new(support::host_bin())
        .current_dir(support::repo_root())
        .args(["--store"])
        .arg(tmp.path().join("store"))
        .arg("experiment")
        .args(["--cargo-target-dir"])
        .arg(support::repo_root().join("target/evolve-candidates"))
        .args([
            "--rounds",
            "2",
            "--tasks",
            "0,1,3,4,6,7,8,10",
            "--test-tasks",
            "5,9",
            "--test-trials",
            "1",
            "--transfer",
            "sim:mixed,sim:texter",
            "--coder-latency-ms",
            "0",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let file = json(&out.join("experiment.json"));
    let mut judged = 0;
    for m in file["methods"].as_array().unwrap() {
        let dir = out.join(m["method"].as_str().unwrap());
        let acc = &m["measured_accommodation"];
        assert_eq!(
            acc["models"],
            serde_json::json!(["sim:mixed", "sim:texter"]),
            "{m}"
        );
        let changes = acc["changes"].as_array().unwrap();
        assert_eq!(changes.len() as u64, m["accepted"].as_u64().unwrap(), "{m}");
        for c in changes {
            let gains = c["other_gains"].as_array().unwrap();
            assert_eq!(gains.len(), 2);
            let round = c["round"].as_u64().unwrap() as usize;
            let rec = &json(&dir.join("summary.json"))["rounds"][round - 1];
            let parent = rec["incumbent"].as_str().unwrap();
            let child = c["candidate"].as_str().unwrap();
            // The tasks the change cites; an agent that solved all of them
            // under the parent has no room to gain there and does not vote.
            let mut evidence: Vec<String> = rec["spec"]["proposed_changes"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|c| c["evidence_tasks"].as_array().unwrap().clone())
                .map(|t| t.as_str().unwrap().to_string())
                .collect();
            if evidence.is_empty() {
                evidence = ["0", "1", "3", "4", "6", "7", "8", "10"]
                    .map(String::from)
                    .to_vec();
            }
            let no_headroom: Vec<&str> = c["no_headroom"]
                .as_array()
                .map(|a| a.iter().map(|m| m.as_str().unwrap()).collect())
                .unwrap_or_default();
            let (mut sum, mut voters) = (0.0, 0);
            for g in gains {
                let name = g[0].as_str().unwrap();
                let model = name.replace(':', "-");
                let run = |h: &str| dir.join(format!("accommodation/{}-{model}", &h[..12]));
                let score = |h: &str| {
                    json(&run(h).join("summary.json"))["metrics"]["accuracy"]
                        .as_f64()
                        .unwrap()
                };
                let gain = score(child) - score(parent);
                assert!((g[1].as_f64().unwrap() - gain).abs() < 1e-12, "{c}");
                // Each of these evaluations is announced on stderr (a real
                // model's take an hour).
                for (role, h) in [("parent", parent), ("candidate", child)] {
                    let line = format!(
                        "accommodation: round {round} {role} {} with {name} on 8 training task(s)",
                        &h[..12]
                    );
                    assert!(stderr.contains(&line), "no `{line}` in {stderr}");
                }
                let on_evidence: Vec<bool> =
                    read_trajectories(&run(parent).join("trajectories.jsonl"), false)
                        .unwrap()
                        .into_iter()
                        .filter(|r| evidence.contains(&r.task_id))
                        .map(|r| r.success)
                        .collect();
                let saturated = !on_evidence.is_empty() && on_evidence.iter().all(|&s| s);
                assert_eq!(no_headroom.contains(&name), saturated, "{name}: {c}");
                if !saturated {
                    sum += gain;
                    voters += 1;
                }
            }
            let train_gain = c["train_gain"].as_f64().unwrap();
            assert!(train_gain > 0.0, "an accepted candidate gained: {c}");
            let expected = if voters == 0 {
                Value::Null
            } else {
                Value::Bool(sum / voters as f64 <= 0.0)
            };
            assert_eq!(c["accommodation"], expected, "{c}");
            assert!(
                c["ground_truth"].is_boolean(),
                "simulated: a ground truth {c}"
            );
            judged += 1;
        }
    }
    assert!(judged > 0, "no accepted candidate to judge: {stdout}");
    assert!(stdout.contains("measured accommodation of"), "{stdout}");
    assert!(stdout.contains("agreement"), "{stdout}");
}

/// `experiment` labels its simulated numbers, printed and stored; offline
/// it shows Ecdysis and Ecdysis-without-FDCR as one row (they run the same
/// heuristic code) and puts the simulated coder latency beside the ratio;
/// with role models the three methods are three rows and the ratio is
/// beside the real coder calls' time.
#[test]
fn experiment_labels_simulated_results_and_merges_the_methods_only_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("offline");
    let o = experiment(tmp.path(), &["--out", out.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        stdout.starts_with(&format!("note: {SIMULATED_LABEL}")),
        "{stdout}"
    );
    assert!(stdout.contains("diagnoser heuristic"), "{stdout}");
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("self-evolution") || l.starts_with("ecdysis"))
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    assert!(rows[1].starts_with("ecdysis = ecdysis-nofdcr "), "{stdout}");
    assert!(stdout.contains(&format!("({})", ecdysis_evolve::experiment::SAME_CODE_NOTE)));
    assert!(
        stdout.contains("with a simulated coder latency of 0 ms per coder call"),
        "{stdout}"
    );
    let file = json(&out.join("experiment.json"));
    assert_eq!(file["label"], SIMULATED_LABEL);
    assert_eq!(file["methods"].as_array().unwrap().len(), 2);
    // The paper's two untrained baselines come first, printed and stored.
    let baseline_rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("(baseline)"))
        .collect();
    assert_eq!(baseline_rows.len(), 2, "{stdout}");
    assert!(
        baseline_rows[0].starts_with("direct (baseline)"),
        "{stdout}"
    );
    assert!(
        baseline_rows[1].starts_with("human-augmented (baseline)"),
        "{stdout}"
    );
    let baselines = file["baselines"].as_array().unwrap();
    assert_eq!(baselines.len(), 2, "{file}");
    let (direct, human) = (&baselines[0], &baselines[1]);
    assert_eq!(direct["harness"], "direct");
    // Direct's training score is its own run over the training tasks.
    let direct_train = json(&out.join("baselines/evals/direct-train/summary.json"));
    assert_eq!(direct_train["metrics"]["tasks"], 4, "{direct_train}");
    assert_eq!(direct["train"], direct_train["metrics"]["accuracy"]);
    // Human-Augmented is the source as written, not the methods' blanked
    // start, and both baselines were tested on the held-out tasks.
    let initial = json(&out.join("self-evolution/summary.json"))["initial"].clone();
    assert_ne!(human["harness"], initial, "{file}");
    assert_eq!(
        json(&out.join("baselines/summary.json"))["initial"],
        human["harness"]
    );
    for b in [direct, human] {
        assert_eq!(b["test"]["tasks"], 2, "{b}");
        assert!(b["test"]["intervals"]["pass_hat_k"].is_array(), "{b}");
    }
    assert!(!out.join("ecdysis-nofdcr").exists(), "not trained twice");
    // Each method's own training summary carries the label too.
    for m in ["self-evolution", "ecdysis"] {
        assert_eq!(
            json(&out.join(m).join("summary.json"))["label"],
            SIMULATED_LABEL
        );
    }

    // With role models (a mock endpoint whose replies are no spec and no
    // edit): three runs, three rows, FDCR only in Ecdysis's.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(MockServer::start()).unwrap();
    server.set_fallback(MockReply::text("I have no concrete change to propose."));
    let base = server.base_url();
    let out = tmp.path().join("roles");
    let o = experiment(
        tmp.path(),
        &[
            "--fdcr-model",
            "m-roles",
            "--coder-model",
            "m-coder",
            "--fdcr-rounds",
            "1",
            "--coder-max-feedback",
            "0",
            "--roles-base-url",
            &base,
            "--roles-api-key-env",
            "",
            "--roles-context-tokens",
            "8192",
            "--cache",
            "off",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        stdout.starts_with(&format!("note: {SIMULATED_LABEL}")),
        "{stdout}"
    );
    assert!(stdout.contains("diagnoser fdcr"), "{stdout}");
    assert!(!stdout.contains(" = "), "{stdout}");
    for m in ["self-evolution", "ecdysis-nofdcr", "ecdysis"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.split_whitespace().next() == Some(m)),
            "{m} row: {stdout}"
        );
        let config = json(&out.join(m).join("config.json"));
        let diagnoser = config["diagnoser"].as_str().unwrap();
        let expected = if m == "ecdysis" { "fdcr" } else { "heuristic" };
        assert!(diagnoser.starts_with(expected), "{m}: {diagnoser}");
    }
    assert!(stdout.contains("with real coder calls"), "{stdout}");
    // Only Ecdysis's run held a discussion; every run called the coder.
    for m in ["self-evolution", "ecdysis-nofdcr", "ecdysis"] {
        let t = json(&out.join(m).join("rounds/1/transcript.json"));
        let discussed = !t["discussions"].as_array().unwrap().is_empty();
        assert_eq!(discussed, m == "ecdysis", "{m}: {t}");
        assert!(
            !t["coder_runs"].as_array().unwrap().is_empty() || m == "ecdysis",
            "{m}: {t}"
        );
    }
}

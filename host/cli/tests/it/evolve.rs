//! Evolution offline: the oracle never reaches a prompt or a coder input,
//! and the offline methods improve a simulated profile's training score.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use ecdysis_evolve::aggregate;
use ecdysis_evolve::aggregate::failure_record::{FailureRecord, failures};
use ecdysis_evolve::code::rule_coder;
use ecdysis_evolve::diagnose::fdcr::{
    EvidenceLimits, FdcrConfig, FdcrInput, HarnessFocus, Roles, deliberate, describe_harness,
    evidence_section, failure_excerpts, harness_section, render_evidence,
};
use ecdysis_evolve::diagnose::heuristic::{ToolFacts, diagnose};
use ecdysis_model::{ChatModel, EndpointLimiter, HttpChatModel, ModelConfig, RetryPolicy};
use ecdysis_runner::agent::{Entry, EpisodeRecord};
use ecdysis_runner::eval::rundir::read_trajectories;
use ecdysis_testkit::mock::{MockReply, MockServer};

const MARKERS: [&str; 5] = [
    "ORACLE_MARKER_COMMUNICATE_7f3a",
    "ORACLE_MARKER_GOLD_ACTION_91bc",
    "ORACLE_MARKER_NL_ASSERTION_52de",
    "ORACLE_MARKER_USER_INSTRUCTION_0a4f",
    "ORACLE_MARKER_TESTBED_c6e1",
];

fn run_episodes(dir: &std::path::Path) -> Vec<EpisodeRecord> {
    let out = std::process::Command::new(support::host_bin())
        .current_dir(support::repo_root())
        .args(["--quiet", "--store"])
        .arg(dir.join("store"))
        .args([
            "run",
            "--harness",
            "none",
            "--split",
            "train",
            "--tasks",
            "0,1,2,3,4,6,7,8",
            "--agent-model",
            "sim:clumsy",
            "--seed",
            "3",
            "--out",
        ])
        .arg(dir.join("run"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    read_trajectories(&dir.join("run/trajectories.jsonl"), false).unwrap()
}

/// Plant a marker in every oracle-derived field a trajectory carries: the
/// evaluation (communicate strings, gold action names, NL assertions), what
/// the user simulator said from its instructions, and the testbed's ground
/// truth.
fn plant(records: &mut [EpisodeRecord]) {
    for r in records {
        let ev = r.evaluation.get_or_insert_with(|| serde_json::json!({}));
        ev["communicate_checks"] = serde_json::json!([{"info": MARKERS[0], "met": false}]);
        ev["action_checks"] =
            serde_json::json!([{"action_id": MARKERS[1], "name": MARKERS[1], "matched": false}]);
        ev["nl_assertions"] = serde_json::json!([MARKERS[2]]);
        for e in &mut r.transcript {
            match e {
                Entry::User { text, .. } => text.push_str(MARKERS[3]),
                Entry::Agent {
                    testbed: Some(note),
                    ..
                } => note.model = MARKERS[4].to_string(),
                _ => {}
            }
        }
    }
}

fn assert_clean(what: &str, text: &str) {
    for m in MARKERS {
        assert!(!text.contains(m), "{what} leaks oracle marker {m}");
    }
}

fn mock_model(server: &MockServer) -> Arc<dyn ChatModel> {
    let mut config = ModelConfig::new("role-model", server.base_url());
    config.api_key_env = None;
    config.request_timeout = Duration::from_secs(20);
    config.retry = RetryPolicy {
        max_retries: 0,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(10),
        max_retry_after: Duration::from_secs(1),
    };
    Arc::new(HttpChatModel::new(config, &EndpointLimiter::new()).unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn oracle_markers_never_reach_a_prompt_or_coder_input() {
    let tmp = tempfile::tempdir().unwrap();
    let mut records = run_episodes(tmp.path());
    plant(&mut records);
    // The planting worked: the markers are in the raw trajectories.
    let raw = serde_json::to_string(&records).unwrap();
    for m in MARKERS {
        assert!(raw.contains(m), "marker {m} was planted");
    }

    let fails = failures(&records, 1.0);
    assert!(!fails.is_empty(), "sim:clumsy fails some tasks");
    let successes: Vec<FailureRecord> = records
        .iter()
        .filter(|r| r.success)
        .map(FailureRecord::from_episode)
        .collect();
    assert_clean("failure records", &serde_json::to_string(&fails).unwrap());
    let groups = aggregate::aggregate(&fails);
    let evidence = render_evidence(&groups, &successes, &EvidenceLimits::default());
    assert_clean("evidence", &evidence);

    // The staging crate the coder sees: a copy with a rule table.
    let staging = tmp.path().join("staging");
    std::fs::create_dir_all(staging.join("src")).unwrap();
    std::fs::write(staging.join("Cargo.toml"), "[package]\nname = \"h\"\n").unwrap();
    std::fs::write(
        staging.join("src/tables.rs"),
        concat!(
            "pub static TOOL_HINTS: &[ToolHint] = &[];\n",
            "pub static TOOL_ALIASES: &[ToolAlias] = &[];\n",
            "pub static ID_PREFIXES: &[IdPrefix] = &[];\n",
            "pub static NUMERIC_ARGS: &[NumericArg] = &[];\n",
            "pub static REGULATION: Regulation = Regulation {\n    repeat_annotate: 2,\n};\n",
        ),
    )
    .unwrap();
    let harness = describe_harness(&staging).unwrap();
    assert_clean("harness description", &harness);
    let focused = harness_section(&staging, &HarnessFocus::of_failures(&fails)).unwrap();
    assert_clean("harness excerpts", &focused.full());
    assert_clean("harness excerpts (budgeted)", &focused.within(400));
    // What the coders read besides the spec.
    assert_clean("coder notes", &failure_excerpts(&groups, None));
    assert_clean(
        "budgeted evidence",
        &evidence_section(&groups, &successes, &EvidenceLimits::default()).within(800),
    );

    // The FDCR roles, over real HTTP: every request body is checked.
    let server = MockServer::start().await.unwrap();
    for _ in 0..6 {
        server.push(MockReply::text("Agreed: normalise the ids."));
    }
    server.push(MockReply::text(
        r#"{"failure_patterns": [{"name": "p", "description": "d", "evidence_tasks": ["0"]}], "proposed_changes": [{"layer": "realize", "file": "src/tables.rs", "description": "x", "rationale": "y", "evidence_tasks": ["0"]}], "skills": [], "implementation_notes": ""}"#,
    ));
    let outcome = deliberate(
        &Roles::uniform(mock_model(&server)),
        &FdcrInput::new(evidence.clone(), harness.clone()),
        &FdcrConfig::default(),
    )
    .await;
    assert!(outcome.spec.is_some(), "{outcome:?}");
    let sent = server.requests();
    // Seven role calls, and the budget's request to the endpoint's tokenizer
    // (this one has none): every body is checked, the tokenizer's too.
    assert_eq!(sent.len(), 8);
    assert_eq!(sent[0].path, "/tokenize");
    for r in &sent {
        assert_clean("an FDCR request", &String::from_utf8_lossy(&r.body));
    }

    // The offline path: heuristic spec and the rule coder's edit.
    let facts = ToolFacts {
        tools: vec![
            ("get_order_details".into(), false),
            ("get_user_details".into(), false),
            ("find_user_id_by_name_zip".into(), false),
            ("find_user_id_by_email".into(), false),
            ("cancel_pending_order".into(), true),
            ("exchange_delivered_order_items".into(), true),
            ("return_delivered_order_items".into(), true),
            ("modify_pending_order_items".into(), true),
        ],
    };
    let spec = diagnose(&groups, &successes, &facts)
        .expect("sim:clumsy's interface slips give the heuristic something to fix");
    assert_clean("spec", &serde_json::to_string(&spec).unwrap());
    assert!(rule_coder::apply(&staging, &spec, "retail").unwrap() > 0);
    assert_clean(
        "coder output",
        &std::fs::read_to_string(staging.join("src/tables.rs")).unwrap(),
    );
}

fn train_cmd(dir: &std::path::Path, extra: &[&str]) -> std::process::Command {
    support::train_command(dir, extra)
}

fn summary(dir: &std::path::Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn offline_evolution_improves_a_clumsy_profile_and_records_every_decision() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("train");
    let o = train_cmd(
        tmp.path(),
        &["--method", "ecdysis-nofdcr", "--rounds", "2", "--out"],
    )
    .arg(&out)
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = summary(&out);
    let (before, after) = (
        s["initial_train_score"].as_f64().unwrap(),
        s["final_train_score"].as_f64().unwrap(),
    );
    assert!(after > before, "training score {before} -> {after}");
    assert!(s["accepted"].as_u64().unwrap() >= 1);
    let incumbent = std::fs::read_to_string(out.join("incumbent")).unwrap();
    assert_eq!(incumbent.trim(), s["incumbent"].as_str().unwrap());
    let cand = out.join("candidates").join(incumbent.trim());
    let diff = std::fs::read_to_string(cand.join("diff.patch")).unwrap();
    assert!(
        diff.contains("src/tables.rs"),
        "the rule coder edited the tables: {diff}"
    );
    for f in ["manifest.json", "spec.json", "train_summary.json"] {
        assert!(cand.join(f).is_file(), "{f} recorded");
    }
    let rounds = std::fs::read_to_string(out.join("rounds.jsonl")).unwrap();
    assert_eq!(
        rounds.lines().count() as u64,
        s["rounds"].as_array().unwrap().len() as u64
    );
}

#[test]
fn self_evolution_makes_one_coder_call_per_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("train");
    let o = train_cmd(
        tmp.path(),
        &["--method", "self-evolution", "--rounds", "1", "--out"],
    )
    .arg(&out)
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = summary(&out);
    let r = &s["rounds"][0];
    // Every failure record gets its own diagnosis; those with a visible
    // interface cause each cost a coder call (at least two here).
    assert!(r["coder_calls"].as_u64().unwrap() >= 2, "{r}");
    assert!(r["coder_calls"].as_u64().unwrap() <= r["failures"].as_u64().unwrap());
}

#[test]
fn a_killed_training_run_resumes_without_losing_accepted_candidates() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("train");
    let args = [
        "--method",
        "ecdysis",
        "--rounds",
        "3",
        "--plateau",
        "5",
        "--out",
    ];
    let mut child = train_cmd(tmp.path(), &args)
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let rounds_path = out.join("rounds.jsonl");
    let start = std::time::Instant::now();
    while std::fs::read_to_string(&rounds_path)
        .map(|s| s.lines().count())
        .unwrap_or(0)
        < 1
    {
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "no round finished"
        );
        assert!(child.try_wait().unwrap().is_none(), "ended before the kill");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let first: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&rounds_path)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();

    let o = train_cmd(tmp.path(), &args).arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = summary(&out);
    let rounds = s["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 3);
    assert_eq!(rounds[0], first, "the finished round is kept as it was");
    // On these tasks the blank start's first round is accepted (the
    // testbed is deterministic), so the kill falls after an acceptance.
    assert_eq!(first["accepted"], true, "{first}");
    // The accepted candidate survived the kill: the resumed rounds start
    // from it, it keeps its source, and nothing scores below it.
    let cand = first["candidate"].as_str().unwrap();
    assert!(out.join("candidates").join(cand).join("source").is_dir());
    assert_eq!(rounds[1]["incumbent"], cand, "round 2 starts from it");
    assert!(s["final_train_score"].as_f64() >= first["candidate_score"].as_f64());
    // No finished episode was paid twice: each evaluation holds one line per
    // (task, trial).
    for dir in std::fs::read_dir(out.join("evals")).unwrap() {
        let log = dir.unwrap().path().join("trajectories.jsonl");
        let n = std::fs::read_to_string(&log).unwrap().lines().count();
        assert_eq!(n, 8, "{}", log.display());
    }
}

/// `train` works unchanged on AgentBench DBBench (a private MariaDB per
/// process): a random draw of four training tasks, one round, the held-out
/// test of initial and final on two tasks; every score is labelled
/// simulated. SKIPPED without MariaDB, unless `$CI` is set.
#[test]
fn train_runs_on_dbbench_unchanged() {
    if !support::dbbench_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(support::host_bin())
        .current_dir(support::repo_root())
        .args(["--store"])
        .arg(dir.path().join("store"))
        .args([
            "train",
            "--domain",
            "agentbench/dbbench",
            "--rounds",
            "1",
            "--agent-model",
            "sim:clumsy",
            "--budget-tasks",
            "4",
            "--select-train",
            "random",
            "--test-tasks",
            "standard-1,standard-3",
            "--test-trials",
            "1",
            "--cargo-target-dir",
        ])
        .arg(support::repo_root().join("target/evolve-candidates"))
        .arg("--out")
        .arg(dir.path().join("run"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("simulated agent — not a benchmark result"),
        "{stdout}"
    );
    let s = summary(&dir.path().join("run"));
    assert_eq!(s["simulated"], true);
    assert_eq!(s["rounds"].as_array().unwrap().len(), 1);
    let picked = s["selection"]["tasks"].as_array().unwrap();
    assert_eq!(picked.len(), 4, "{s}");
    assert!(
        picked
            .iter()
            .all(|t| t.as_str().unwrap().starts_with("standard-")),
        "training tasks come from DBBench's train split: {picked:?}"
    );
}

/// Selection on τ² retail's whole training split with `sim:clumsy` (no
/// round): a failure mechanism that recurs in the pool keeps two tasks
/// (so the chosen tasks' failures recur for aggregation to find), each
/// mechanism at most two; `recurring` starts the same way and then covers
/// each detail of a recurring mechanism.
#[test]
fn recurring_selection_keeps_recurring_signatures_recurring() {
    let dir = tempfile::tempdir().unwrap();
    let select = |strategy: &str| -> Vec<(String, String)> {
        let out = std::process::Command::new(support::host_bin())
            .current_dir(support::repo_root())
            .args(["--quiet", "--store"])
            .arg(dir.path().join("store"))
            .args([
                "train",
                "--rounds",
                "0",
                "--agent-model",
                "sim:clumsy",
                "--select-train",
                strategy,
                "--budget-tasks",
                "6",
                "--test-split",
                "none",
                "--cargo-target-dir",
            ])
            .arg(support::repo_root().join("target/evolve-candidates"))
            .arg("--out")
            .arg(dir.path().join(strategy))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let file = dir.path().join(strategy).join("selection.json");
        let s: serde_json::Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
        assert_eq!(s["strategy"], strategy);
        s["picked"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let field = |k: &str| p[k].as_str().unwrap().to_string();
                (field("task"), field("reason"))
            })
            .collect()
    };
    let mechanisms = |picked: &[(String, String)]| -> Vec<String> {
        picked
            .iter()
            .filter(|(_, r)| r.starts_with("failure mechanism"))
            .map(|(_, r)| r.clone())
            .collect()
    };
    let recurring = select("recurring");
    let failure_aware = select("failure-aware");
    assert_eq!(recurring.len(), 6);
    let fa = mechanisms(&failure_aware);
    assert!(fa.len() >= 2, "{failure_aware:?}");
    assert_eq!(
        fa[0], fa[1],
        "a recurring mechanism keeps two tasks: {failure_aware:?}"
    );
    assert_ne!(failure_aware[0].0, failure_aware[1].0);
    for reason in &fa {
        assert!(
            fa.iter().filter(|r| *r == reason).count() <= 2,
            "{failure_aware:?}"
        );
    }
    let rc = mechanisms(&recurring);
    assert_eq!(rc[..2], fa[..2], "recurring starts as failure-aware does");
    for reason in &rc {
        assert!(
            reason.contains(", last result") || fa.contains(reason),
            "a mechanism's share or a detail: {reason}"
        );
    }
}

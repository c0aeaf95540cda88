//! Evolution offline: the oracle never reaches a prompt or a coder input,
//! and the offline methods improve a simulated profile's training score.

mod support;

use std::sync::Arc;
use std::time::Duration;

use ecdysis_host::agent::{Entry, EpisodeRecord};
use ecdysis_host::eval::rundir::read_trajectories;
use ecdysis_host::evolve::fdcr::{
    EvidenceLimits, FdcrConfig, FdcrInput, Roles, deliberate, describe_harness, render_evidence,
};
use ecdysis_host::evolve::heuristic::{ToolFacts, diagnose};
use ecdysis_host::evolve::records::{FailureRecord, failures};
use ecdysis_host::evolve::{aggregate, rulecoder};
use ecdysis_host::model::mock::{MockReply, MockServer};
use ecdysis_host::model::{ChatModel, EndpointLimiter, HttpChatModel, ModelConfig, RetryPolicy};

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
        &FdcrInput {
            evidence: evidence.clone(),
            harness: harness.clone(),
        },
        &FdcrConfig::default(),
    )
    .await;
    assert!(outcome.spec.is_some(), "{outcome:?}");
    let sent = server.requests();
    assert_eq!(sent.len(), 7);
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
    assert!(rulecoder::apply(&staging, &spec, "retail").unwrap() > 0);
    assert_clean(
        "coder output",
        &std::fs::read_to_string(staging.join("src/tables.rs")).unwrap(),
    );
}

//! `ecdysis-host failures` on real episodes: the first real-model DBBench
//! experiment's Human-Augmented pool, rebuilt by replaying its recorded
//! replies (docs/src/results/data/real-dbbench/cache.tar.gz) with the
//! starting harness, whose primitives are off, so every request hits.

use std::path::Path;
use std::process::Command;

use crate::support;
use ecdysis_testkit::mock::{MockReply, MockServer};

const POOL: &str = "standard-0,standard-10,standard-22,standard-24,standard-34,standard-48,standard-63,standard-64,standard-65,standard-78,standard-93,standard-96,standard-104,standard-108,standard-116,standard-121,standard-124,standard-127,standard-140,standard-161,standard-166,standard-195,standard-196,standard-197,standard-203,standard-205,standard-207,standard-211,standard-213,standard-231,standard-232,standard-234,standard-280,standard-285,standard-289,standard-299";

fn host(store: &Path) -> Command {
    let mut c = Command::new(support::host_bin());
    c.current_dir(support::repo_root())
        .arg("--store")
        .arg(store);
    // The starting harness builds where the other tests' harness builds go.
    if std::env::var_os("ECDYSIS_CARGO_TARGET_DIR").is_none() {
        c.env(
            "ECDYSIS_CARGO_TARGET_DIR",
            support::repo_root().join("target/evolve-candidates"),
        );
    }
    c
}

/// The mechanism key puts the first experiment's same-reply commits in one
/// recurring group (13 of the pool's 31 failures, on 13 tasks), where the
/// old signature split the pool into singletons; the other mechanisms
/// match the counts read from the episodes by hand (issue #51): a commit
/// right after a failed query 8, no commit before the turn limit 8 (5 with
/// queries, 3 without any call), a commit with no query 2. SKIPPED without
/// MariaDB, unless `$CI` is set.
#[test]
fn the_first_experiments_same_reply_commits_are_one_recurring_group() {
    if !support::dbbench_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let snapshot = support::repo_root().join("docs/src/results/data/real-dbbench/cache.tar.gz");
    let tar = Command::new("tar")
        .arg("-xzf")
        .arg(&snapshot)
        .arg("-C")
        .arg(&cache)
        .status()
        .unwrap();
    assert!(tar.success());
    let run = dir.path().join("pool");
    let out = host(&dir.path().join("store"))
        .args([
            "run",
            "--domain",
            "agentbench/dbbench",
            "--split",
            "train",
            "--harness",
            "harness-template",
            "--agent-model",
            "qwen2.5-coder-1.5b-instruct",
            // Nothing listens there: every reply must come from the cache.
            "--agent-base-url",
            "http://127.0.0.1:8080/v1",
            "--agent-api-key-env",
            "",
            "--temperature",
            "0",
            "--max-tokens",
            "384",
            "--cache",
            "read-only",
            "--tasks",
            POOL,
        ])
        .arg("--cache-dir")
        .arg(&cache)
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("cache hit rate 100.0%"), "{stdout}");
    // The recorded replies carry llama-server's count of prompt tokens it
    // served from its prefix cache.
    assert!(
        stdout.contains("the endpoint's prefix cache served 9"),
        "{stdout}"
    );

    let out = host(&dir.path().join("store"))
        .args(["failures", "--json"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(view["episodes"], 36);
    assert_eq!(view["failures"], 31);
    let tasks_of = |finish: &str| -> usize {
        view["groups"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["signature"]["finish"] == finish)
            .map(|g| g["tasks"].as_array().unwrap().len())
            .sum()
    };
    assert_eq!(tasks_of("same_reply"), 13);
    assert_eq!(tasks_of("after_error"), 8);
    assert_eq!(tasks_of("never") + tasks_of("no_calls"), 8);
    assert_eq!(tasks_of("without_calls"), 2);
    let first = &view["groups"][0];
    assert_eq!(first["signature"]["finish"], "same_reply", "{first}");
    assert_eq!(first["recurring"], true);
    assert_eq!(first["label"]["layer"], "realize");
    // Its details keep MySQL's codes apart.
    let details: Vec<&str> = first["details"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["detail"].as_str())
        .collect();
    assert!(
        details.contains(&"last result error mysql 1064"),
        "{details:?}"
    );

    the_llm_labeler_agrees_on_the_same_reply_commits(dir.path(), &run);

    // The text view: the group heading and an excerpt reply by reply.
    let out = host(&dir.path().join("store"))
        .arg("failures")
        .arg(&run)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "R1 agent_stop | finishing call in the same reply as other calls, before their results were seen"
        ),
        "{text}"
    );
    assert!(text.contains("[finishes, same reply]"), "{text}");

    // A truncated trajectories file: the line is named, the rest shown.
    let trajectories = run.join("trajectories.jsonl");
    let bytes = std::fs::read(&trajectories).unwrap();
    std::fs::write(&trajectories, &bytes[..bytes.len() - 100]).unwrap();
    let out = host(&dir.path().join("store"))
        .arg("failures")
        .arg(&run)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("trajectories.jsonl line 36"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("35 episode(s)"));
    // Not a result directory.
    let out = host(&dir.path().join("store"))
        .arg("failures")
        .arg(&cache)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not a result directory"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The optional LLM labeler on the pool's run `run` (store and labeler
/// cache under `dir`): one schema-constrained call per failure, its labels
/// beside the key's, agreement counted against each failure's own key
/// label.
fn the_llm_labeler_agrees_on_the_same_reply_commits(dir: &Path, run: &Path) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = rt.block_on(MockServer::start()).unwrap();
    server.set_handler(|req| {
        let body = req.json().unwrap_or_default();
        let excerpt = body["messages"][1]["content"]
            .as_str()
            .unwrap_or("")
            .to_string();
        MockReply::text(if excerpt.contains("[finishes, same reply]") {
            r#"{"label": "realize: rule missing"}"#
        } else {
            "I cannot tell."
        })
    });
    let out = host(&dir.join("store"))
        .args([
            "failures",
            "--json",
            "--labeler-model",
            "judge",
            "--labeler-structured",
        ])
        .args(["--labeler-api-key-env", "", "--labeler-base-url"])
        .arg(server.base_url())
        .arg("--cache-dir")
        .arg(dir.join("labeler-cache"))
        .arg(run)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let labelled: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let llm = &labelled["llm"];
    assert_eq!(server.request_count(), 31, "one call per failure");
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.json().unwrap()["response_format"]["type"] == "json_schema")
    );
    // The model named a label for the same-reply commits only (13), all of
    // which the key labels realize: rule missing; the rest are errors.
    assert_eq!(llm["labelled"], 13, "{llm}");
    assert_eq!(llm["agree"], 13, "{llm}");
    assert_eq!(llm["errors"].as_array().unwrap().len(), 31 - 13);
    drop(server);
}

//! Syncing against a fake MLflow server (the real one is tested through the
//! binary by `scripts/mlflow-test.sh`): batches that fail are sent again and
//! every item arrives once, a hanging server costs at most the deadline, a
//! lost state file finds the run again, a refused item is set aside.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ecdysis_testkit::mock::{MockReply, MockRequest, MockServer};
use ecdysis_track::{STATE_FILE, SyncOptions, SyncState, sync};
use serde_json::{Value, json};

/// A run directory as `run` writes it (what tracking reads of it).
fn run_dir(root: &Path) -> std::path::PathBuf {
    let dir = root.join("run-a");
    std::fs::create_dir_all(&dir).unwrap();
    let config = json!({
        "domain": "agentbench/os", "split": "std-003", "harness": "ab12",
        "agent_model": "sim:mixed", "seed": 0, "limits": {"fuel": 5},
        "tasks": ["t1", "t2"],
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::write(dir.join("trajectories.jsonl"), "").unwrap();
    let summary = json!({
        "metrics": {"accuracy": 0.5, "episodes": 2, "pass_hat_k": {"1": 0.5},
                    "per_task": [{"task_id": "t1"}]},
        "wall_seconds": 1.5,
    });
    std::fs::write(dir.join("summary.json"), summary.to_string()).unwrap();
    std::fs::write(dir.join("report.html"), "<html>report</html>").unwrap();
    dir
}

/// What the fake server holds.
#[derive(Default)]
struct Held {
    runs_created: usize,
    params: Vec<(String, String)>,
    tags: Vec<(String, String)>,
    /// (key, value, step)
    metrics: Vec<(String, f64, i64)>,
    artifacts: Vec<String>,
    finished: usize,
    /// Answer log-batch with 503 while set.
    down: bool,
    /// Refuse params with this key (400).
    refuse_param: Option<String>,
    /// Runs keep their artifacts in a store the server does not serve.
    file_artifacts: bool,
}

fn fake(held: Arc<Mutex<Held>>) -> impl Fn(&MockRequest) -> MockReply + Send + Sync + 'static {
    move |req: &MockRequest| {
        let mut h = held.lock().unwrap();
        let body = req.json().unwrap_or(Value::Null);
        let path = req.path.split('?').next().unwrap_or("");
        match (req.method.as_str(), path) {
            ("GET", "/api/2.0/mlflow/experiments/get-by-name") => {
                MockReply::json(200, json!({"experiment": {"experiment_id": "7"}}))
            }
            ("POST", "/api/2.0/mlflow/runs/search") => {
                let runs = if h.runs_created > 0 {
                    json!([{"info": {"run_id": "r1", "artifact_uri": "mlflow-artifacts:/7/r1/artifacts"}}])
                } else {
                    json!([])
                };
                MockReply::json(200, json!({ "runs": runs }))
            }
            ("POST", "/api/2.0/mlflow/runs/create") => {
                h.runs_created += 1;
                let store = if h.file_artifacts {
                    "file:///srv/mlruns/7/r1/artifacts"
                } else {
                    "mlflow-artifacts:/7/r1/artifacts"
                };
                MockReply::json(
                    200,
                    json!({"run": {"info": {"run_id": "r1", "artifact_uri": store}}}),
                )
            }
            ("POST", "/api/2.0/mlflow/runs/log-batch") => {
                if h.down {
                    return MockReply::error(503, "down");
                }
                let pairs = |k: &str| -> Vec<(String, String)> {
                    body[k]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .map(|p| {
                                    (
                                        p["key"].as_str().unwrap_or("").to_string(),
                                        p["value"].as_str().unwrap_or("").to_string(),
                                    )
                                })
                                .collect()
                        })
                        .unwrap_or_default()
                };
                let params = pairs("params");
                if let Some(bad) = &h.refuse_param
                    && params.iter().any(|(k, _)| k == bad)
                {
                    return MockReply::error(400, "INVALID_PARAMETER_VALUE: changed param");
                }
                h.params.extend(params);
                h.tags.extend(pairs("tags"));
                for m in body["metrics"].as_array().cloned().unwrap_or_default() {
                    h.metrics.push((
                        m["key"].as_str().unwrap_or("").into(),
                        m["value"].as_f64().unwrap_or(f64::NAN),
                        m["step"].as_i64().unwrap_or(0),
                    ));
                }
                MockReply::json(200, json!({}))
            }
            ("GET", "/api/2.0/mlflow/metrics/get-history") => {
                let all: Vec<Value> = h
                    .metrics
                    .iter()
                    .map(|(k, v, s)| json!({"key": k, "value": v, "step": s, "timestamp": 1}))
                    .collect();
                MockReply::json(200, json!({ "metrics": all }))
            }
            ("POST", "/api/2.0/mlflow/runs/update") => {
                h.finished += 1;
                MockReply::json(200, json!({}))
            }
            ("PUT", p) if p.starts_with("/api/2.0/mlflow-artifacts/artifacts/7/r1/artifacts/") => {
                h.artifacts
                    .push(p.rsplit('/').next().unwrap_or("").to_string());
                MockReply::json(200, json!({}))
            }
            _ => MockReply::error(404, "no such endpoint"),
        }
    }
}

/// The mock's root URL (its `base_url` is an OpenAI-style `/v1`).
fn base(server: &MockServer) -> String {
    format!("http://{}", server.addr())
}

fn options(uri: &str) -> SyncOptions {
    SyncOptions {
        uri: Some(uri.to_string()),
        request_timeout: Duration::from_secs(2),
        deadline: Duration::from_secs(10),
        ..SyncOptions::default()
    }
}

fn assert_each_once(h: &Held) {
    let mut keys: Vec<(String, i64)> = h.metrics.iter().map(|(k, _, s)| (k.clone(), *s)).collect();
    let n = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), n, "a metric arrived twice: {:?}", h.metrics);
    let mut params: Vec<&String> = h.params.iter().map(|(k, _)| k).collect();
    let n = params.len();
    params.sort();
    params.dedup();
    assert_eq!(params.len(), n, "a param arrived twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_batch_is_sent_again_and_every_item_arrives_once() {
    let root = tempfile::tempdir().unwrap();
    let dir = run_dir(root.path());
    let held = Arc::new(Mutex::new(Held::default()));
    let server = MockServer::start().await.unwrap();
    server.set_handler(fake(held.clone()));
    held.lock().unwrap().down = true;
    let first = sync(&dir, &options(&base(&server))).await.unwrap();
    assert!(
        first.error.as_deref().is_some_and(|e| e.contains("503")),
        "{first:?}"
    );
    assert!(first.pending > 0, "{first:?}");
    let state = SyncState::load(&dir).unwrap().expect("state kept");
    assert_eq!(state.pending, first.pending);
    assert!(!state.runs["run"].in_flight.is_empty(), "{state:?}");
    held.lock().unwrap().down = false;
    let second = sync(&dir, &options(&base(&server))).await.unwrap();
    assert_eq!(
        (second.pending, second.error.clone()),
        (0, None),
        "{second:?}"
    );
    {
        let h = held.lock().unwrap();
        assert_each_once(&h);
        assert_eq!(h.runs_created, 1);
        assert_eq!(h.finished, 1);
        assert!(
            h.metrics
                .iter()
                .any(|(k, v, s)| k == "accuracy" && *v == 0.5 && *s == 0)
        );
        assert!(h.metrics.iter().any(|(k, _, _)| k == "pass_hat_k.1"));
        assert!(!h.metrics.iter().any(|(k, _, _)| k.starts_with("per_task")));
        assert!(h.params.contains(&("limits.fuel".into(), "5".into())));
        assert!(
            h.tags
                .contains(&("ecdysis.simulated".into(), "true".into()))
        );
        let mut artifacts = h.artifacts.clone();
        artifacts.sort();
        assert_eq!(artifacts, ["config.json", "report.html", "summary.json"]);
    }
    // Nothing is left: a third sync sends nothing.
    let third = sync(&dir, &options(&base(&server))).await.unwrap();
    assert_eq!((third.sent, third.pending), (0, 0), "{third:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_server_costs_at_most_the_deadline_and_loses_nothing() {
    let root = tempfile::tempdir().unwrap();
    let dir = run_dir(root.path());
    let server = MockServer::start().await.unwrap();
    server.set_fallback(MockReply::json(200, json!({})).with_delay(Duration::from_secs(30)));
    let opts = SyncOptions {
        deadline: Duration::from_millis(1500),
        request_timeout: Duration::from_millis(500),
        ..options(&base(&server))
    };
    let t = Instant::now();
    let r = sync(&dir, &opts).await.unwrap();
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    assert!(r.error.is_some() && r.pending > 0, "{r:?}");
    assert_eq!(SyncState::load(&dir).unwrap().unwrap().pending, r.pending);
    // Positive control: the same directory to a server that answers.
    let held = Arc::new(Mutex::new(Held::default()));
    let good = MockServer::start().await.unwrap();
    good.set_handler(fake(held.clone()));
    let r = sync(&dir, &options(&base(&good))).await.unwrap();
    assert_eq!((r.pending, r.error.clone()), (0, None), "{r:?}");
    assert_each_once(&held.lock().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_state_file_finds_the_run_and_resends_no_metric() {
    let root = tempfile::tempdir().unwrap();
    let dir = run_dir(root.path());
    let held = Arc::new(Mutex::new(Held::default()));
    let server = MockServer::start().await.unwrap();
    server.set_handler(fake(held.clone()));
    sync(&dir, &options(&base(&server))).await.unwrap();
    let metrics = held.lock().unwrap().metrics.len();
    std::fs::remove_file(dir.join(STATE_FILE)).unwrap();
    let r = sync(&dir, &options(&base(&server))).await.unwrap();
    assert_eq!((r.pending, r.error.clone()), (0, None), "{r:?}");
    let h = held.lock().unwrap();
    assert_eq!(h.runs_created, 1, "the run was found, not made again");
    assert_eq!(h.metrics.len(), metrics, "no metric sent twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_item_is_set_aside_and_the_rest_is_sent() {
    let root = tempfile::tempdir().unwrap();
    let dir = run_dir(root.path());
    let held = Arc::new(Mutex::new(Held {
        refuse_param: Some("split".into()),
        ..Held::default()
    }));
    let server = MockServer::start().await.unwrap();
    server.set_handler(fake(held.clone()));
    let r = sync(&dir, &options(&base(&server))).await.unwrap();
    assert_eq!(r.refused.len(), 1, "{r:?}");
    assert!(r.refused[0].contains("INVALID_PARAMETER_VALUE"), "{r:?}");
    assert_eq!(r.pending, 0, "{r:?}");
    assert!(
        held.lock()
            .unwrap()
            .params
            .iter()
            .any(|(k, _)| k == "domain")
    );
    // Not retried.
    let again = sync(&dir, &options(&base(&server))).await.unwrap();
    assert_eq!(again.sent, 0, "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_clear_error() {
    let root = tempfile::tempdir().unwrap();
    let dir = run_dir(root.path());
    std::fs::write(dir.join(STATE_FILE), "{not json").unwrap();
    let e = sync(&dir, &options("http://127.0.0.1:9"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains(STATE_FILE), "{e}");
    std::fs::remove_file(dir.join(STATE_FILE)).unwrap();
    let e = sync(&dir, &options("file:///tmp/mlruns"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("file:///tmp/mlruns"), "{e}");
    let e = sync(root.path(), &options("http://127.0.0.1:9"))
        .await
        .unwrap_err();
    assert!(!e.to_string().is_empty());
    // No URI given and never synced.
    let e = sync(&dir, &SyncOptions::default()).await.unwrap_err();
    assert!(e.to_string().contains("never synced"), "{e}");
}

/// A training directory: the numbers of each round at its step, the
/// summary's at step 0, lineage and incumbent as tags, and each accepted
/// candidate's diff and spec as artifacts (a rejected one's are not).
#[test]
fn a_training_is_planned_round_by_round_with_its_lineage() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("train-a");
    let (init, good, bad) = ("1".repeat(64), "2".repeat(64), "3".repeat(64));
    std::fs::create_dir_all(&dir).unwrap();
    let config = json!({"method": "ecdysis", "rounds": 2, "train": {"agent_model": "sim:clumsy"}});
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::write(dir.join("initial"), &init).unwrap();
    std::fs::write(dir.join("incumbent"), &good).unwrap();
    let rounds = [
        json!({"round": 1, "incumbent": init, "incumbent_score": 0.5, "candidate": good,
               "candidate_score": 0.7, "accepted": true, "seconds": {"diagnosis": 1.5},
               "spec": {"failure_patterns": [{"name": "x"}]}}),
        json!({"round": 2, "incumbent": good, "incumbent_score": 0.7, "candidate": bad,
               "candidate_score": 0.6, "accepted": false}),
    ];
    let lines: Vec<String> = rounds.iter().map(Value::to_string).collect();
    std::fs::write(dir.join("rounds.jsonl"), lines.join("\n") + "\n").unwrap();
    for h in [&good, &bad] {
        let c = dir.join("candidates").join(h);
        std::fs::create_dir_all(&c).unwrap();
        std::fs::write(c.join("diff.patch"), "+ rule").unwrap();
        std::fs::write(c.join("spec.json"), "{}").unwrap();
    }
    let plan = ecdysis_track::plan(&dir).unwrap();
    assert_eq!(plan.runs.len(), 1);
    let run = &plan.runs[0];
    assert!(!run.finished, "no summary yet");
    assert!(
        run.metrics
            .contains(&("round.candidate_score".into(), 0.7, 1))
    );
    assert!(run.metrics.contains(&("round.accepted".into(), 0.0, 2)));
    assert!(
        run.metrics
            .contains(&("round.seconds.diagnosis".into(), 1.5, 1))
    );
    assert!(!run.metrics.iter().any(|(k, _, _)| k.contains("spec")));
    let tags: std::collections::BTreeMap<_, _> = run.tags.iter().cloned().collect();
    assert_eq!(
        tags["ecdysis.lineage"],
        format!("{} > {}", &init[..12], &good[..12])
    );
    assert_eq!(tags["ecdysis.harness"], good);
    assert_eq!(tags["ecdysis.simulated"], "true");
    let names: Vec<&str> = run.artifacts.iter().map(|(n, _)| n.as_str()).collect();
    assert!(
        names.contains(&format!("candidates/round-1-{}/diff.patch", &good[..12]).as_str()),
        "{names:?}"
    );
    assert!(!names.iter().any(|n| n.contains(&bad[..12])), "{names:?}");
    assert!(
        run.params
            .contains(&("train.agent_model".into(), "sim:clumsy".into()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_a_server_does_not_serve_are_reported_and_the_rest_is_sent() {
    let root = tempfile::tempdir().unwrap();
    let dir = run_dir(root.path());
    let held = Arc::new(Mutex::new(Held {
        file_artifacts: true,
        ..Held::default()
    }));
    let server = MockServer::start().await.unwrap();
    server.set_handler(fake(held.clone()));
    let r = sync(&dir, &options(&base(&server))).await.unwrap();
    assert_eq!((r.pending, r.error.clone()), (0, None), "{r:?}");
    assert_eq!(r.refused.len(), 3, "{r:?}");
    assert!(r.refused[0].contains("--serve-artifacts"), "{r:?}");
    let h = held.lock().unwrap();
    assert!(h.artifacts.is_empty());
    assert_eq!(h.finished, 1);
    assert!(h.metrics.iter().any(|(k, _, _)| k == "accuracy"));
}

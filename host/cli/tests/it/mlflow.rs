//! `--mlflow` and `mlflow sync` through the binary. A server that is down
//! never fails a run and loses nothing (always run); against a real
//! `mlflow server` (PyPI `mlflow`, started here on loopback with a SQLite
//! store) when `ECDYSIS_MLFLOW` names its `mlflow` command, as
//! `scripts/mlflow-test.sh` does: what arrives, and a resume after the
//! server was down sends each item exactly once.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support;

fn host(store: &Path, args: &[&str]) -> Output {
    Command::new(support::host_bin())
        .current_dir(support::repo_root())
        .arg("--store")
        .arg(store)
        .args(args)
        .output()
        .expect("ecdysis-host runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn small_run(store: &Path, out: &Path, uri: &str) -> Output {
    host(
        store,
        &[
            "--quiet",
            "run",
            "--domain",
            "tau2/retail",
            "--split",
            "train",
            "--tasks",
            "0,1,2",
            "--agent-model",
            "sim:mixed",
            "--harness",
            "none",
            "--out",
            out.to_str().unwrap(),
            "--mlflow",
            uri,
        ],
    )
}

#[test]
fn a_server_that_is_down_never_fails_a_run_and_what_was_not_sent_is_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let uri = format!("http://127.0.0.1:{}", closed_port());
    let t = Instant::now();
    let o = small_run(tmp.path(), &out, &uri);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    let err = text(&o.stderr);
    assert!(
        err.contains("not sent") && err.contains("mlflow sync"),
        "{err}"
    );
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("mlflow.json")).unwrap()).unwrap();
    assert!(state["pending"].as_u64().unwrap() > 0, "{state}");
    assert_eq!(state["tracking_uri"], uri.as_str());
    // The results themselves are complete.
    assert!(out.join("summary.json").is_file());
    // `mlflow sync` says it is still not sent, with status 1.
    let o = host(tmp.path(), &["mlflow", "sync", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    // A `file:` store is refused by name, not silently ignored.
    let o = host(
        tmp.path(),
        &[
            "mlflow",
            "sync",
            out.to_str().unwrap(),
            "--mlflow",
            "file:///tmp/mlruns",
        ],
    );
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("file:///tmp/mlruns"),
        "{}",
        text(&o.stderr)
    );
}

/// A real tracking server on loopback, stopped when dropped.
struct Server {
    child: Child,
    uri: String,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        // The server runs uvicorn and job consumers as children: the whole
        // process group goes.
        // SAFETY: kill on the process group this test started.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

fn start_server(mlflow: &Path, port: u16, dir: tempfile::TempDir) -> Server {
    let db = format!("sqlite:///{}", dir.path().join("mlflow.db").display());
    let child = Command::new(mlflow)
        .args(["server", "--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--backend-store-uri", &db, "--artifacts-destination"])
        .arg(dir.path().join("artifacts"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("mlflow server starts");
    let uri = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(90);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "mlflow server did not listen");
        std::thread::sleep(Duration::from_millis(300));
    }
    Server {
        child,
        uri,
        _dir: dir,
    }
}

fn get(uri: &str, path: &str) -> serde_json::Value {
    let o = Command::new("curl")
        .args(["-sf", &format!("{uri}{path}")])
        .output()
        .expect("curl");
    assert!(o.status.success(), "GET {path}");
    serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null)
}

fn run_id(dir: &Path, key: &str) -> String {
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("mlflow.json")).unwrap()).unwrap();
    state["runs"][key]["run_id"].as_str().unwrap().to_string()
}

fn mlflow_bin() -> Option<PathBuf> {
    match std::env::var_os("ECDYSIS_MLFLOW") {
        Some(p) => Some(PathBuf::from(p)),
        None => {
            eprintln!(
                "SKIPPED: set ECDYSIS_MLFLOW to an `mlflow` command (scripts/mlflow-test.sh installs one and runs this)"
            );
            None
        }
    }
}

#[test]
fn a_real_server_gets_runs_and_trainings_and_a_resume_sends_each_item_once() {
    let Some(mlflow) = mlflow_bin() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let port = closed_port();
    // Down first: the run finishes, its items are kept.
    let out = tmp.path().join("run");
    let uri = format!("http://127.0.0.1:{port}");
    let o = small_run(tmp.path(), &out, &uri);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("not sent"), "{}", text(&o.stderr));
    // Up: `mlflow sync` sends them, to the server the directory names.
    let server = start_server(&mlflow, port, tempfile::tempdir().unwrap());
    let o = host(tmp.path(), &["mlflow", "sync", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let id = run_id(&out, "run");
    let run = get(
        &server.uri,
        &format!("/api/2.0/mlflow/runs/get?run_id={id}"),
    );
    assert_eq!(run["run"]["info"]["status"], "FINISHED", "{run}");
    let data = &run["run"]["data"];
    let find = |list: &str, key: &str| {
        data[list]
            .as_array()
            .and_then(|a| a.iter().find(|p| p["key"] == key).cloned())
            .unwrap_or(serde_json::Value::Null)
    };
    assert_eq!(find("params", "domain")["value"], "tau2/retail");
    assert_eq!(find("tags", "ecdysis.simulated")["value"], "true");
    assert!(find("metrics", "accuracy")["value"].is_number(), "{data}");
    // Sent again, and the server down in between: nothing twice.
    let o = host(tmp.path(), &["mlflow", "sync", out.to_str().unwrap()]);
    assert!(o.status.success());
    assert!(
        text(&o.stderr).contains("0 item(s) sent"),
        "{}",
        text(&o.stderr)
    );
    let history = get(
        &server.uri,
        &format!("/api/2.0/mlflow/metrics/get-history?run_id={id}&metric_key=accuracy"),
    );
    assert_eq!(
        history["metrics"].as_array().map(Vec::len),
        Some(1),
        "{history}"
    );
    // The report is an artifact.
    let o = Command::new("curl")
        .args([
            "-sf",
            &format!(
                "{}/api/2.0/mlflow-artifacts/artifacts/1/{id}/artifacts/report.html",
                server.uri
            ),
        ])
        .output()
        .unwrap();
    assert!(text(&o.stdout).contains("<html"), "report artifact");

    // A one-round training: per-round metrics, lineage, the accepted
    // candidate's diff.
    let train_out = tmp.path().join("train");
    let mut cmd = support::train_command(
        tmp.path(),
        &[
            "--rounds",
            "1",
            "--out",
            train_out.to_str().unwrap(),
            "--mlflow",
            &server.uri,
        ],
    );
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let id = run_id(&train_out, "training");
    let run = get(
        &server.uri,
        &format!("/api/2.0/mlflow/runs/get?run_id={id}"),
    );
    let tags = run["run"]["data"]["tags"].to_string();
    assert!(tags.contains("ecdysis.lineage"), "{tags}");
    let history = get(
        &server.uri,
        &format!(
            "/api/2.0/mlflow/metrics/get-history?run_id={id}&metric_key=round.incumbent_score"
        ),
    );
    assert_eq!(history["metrics"][0]["step"], 1, "{history}");
    let rounds = std::fs::read_to_string(train_out.join("rounds.jsonl")).unwrap();
    if rounds.contains("\"accepted\":true") {
        let listed = get(
            &server.uri,
            &format!("/api/2.0/mlflow/artifacts/list?run_id={id}&path=candidates"),
        );
        assert!(listed.to_string().contains("round-1-"), "{listed}");
    }

    // While a training runs, its finished rounds reach MLflow before it
    // ends. A coder that takes 3 s (and changes nothing) keeps each round
    // open long enough for the syncs between rounds to be seen.
    let live_out = tmp.path().join("live");
    let mut child = support::train_command(
        tmp.path(),
        &[
            "--method",
            "ecdysis-nofdcr",
            "--coder-command",
            "sleep 3",
            "--rounds",
            "3",
            "--plateau",
            "5",
            "--out",
            live_out.to_str().unwrap(),
            "--mlflow",
            &server.uri,
            "--mlflow-interval-secs",
            "0.2",
        ],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    let mut seen_while_running = false;
    loop {
        let running = child.try_wait().unwrap().is_none();
        let id = std::fs::read(live_out.join(ecdysis_track::STATE_FILE))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["runs"]["training"]["run_id"].as_str().map(String::from));
        if let (true, Some(id)) = (running, id) {
            let history = get(
                &server.uri,
                &format!(
                    "/api/2.0/mlflow/metrics/get-history?run_id={id}&metric_key=round.incumbent_score"
                ),
            );
            if history["metrics"].as_array().is_some_and(|m| !m.is_empty())
                && !live_out.join("summary.json").exists()
            {
                seen_while_running = true;
            }
        }
        if !running {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(child.wait().unwrap().success());
    assert!(
        seen_while_running,
        "no round reached MLflow while the training ran"
    );
    let id = run_id(&live_out, "training");
    let history = get(
        &server.uri,
        &format!(
            "/api/2.0/mlflow/metrics/get-history?run_id={id}&metric_key=round.incumbent_score"
        ),
    );
    let steps: Vec<i64> = history["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["step"].as_i64())
        .collect();
    assert_eq!(
        steps.len(),
        3,
        "each round once, the live syncs and the last one together: {history}"
    );
}

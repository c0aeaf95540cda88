//! `ecdysis-host proxy` as a process: the starting harness between a client
//! and the scripted upstream, over loopback HTTP. The proxy's behaviour in
//! depth is tested in its crate (`cargo test -p ecdysis-proxy`); this checks
//! the command: its flags, the address it prints, a tool-call round trip.

use std::io::{BufRead, BufReader};
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

#[tokio::test]
async fn the_proxy_command_serves_a_tool_call_round_trip_through_the_harness() {
    let tmp = tempfile::tempdir().unwrap();
    let wasm = tmp.path().join("template.wasm");
    std::fs::write(&wasm, support::guest("harness-template", None)).unwrap();
    let mock = MockServer::start().await.unwrap();
    let mut child = Command::new(support::host_bin())
        .current_dir(support::repo_root())
        .arg("--store")
        .arg(tmp.path().join("store"))
        .arg("proxy")
        .arg("--harness")
        .arg(&wasm)
        .args(["--upstream", &mock.base_url(), "--listen", "127.0.0.1:0"])
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

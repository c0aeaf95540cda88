//! The proxy over real HTTP on loopback, with the testkit's scripted
//! OpenAI server as its upstream and the starting harness
//! (`harness-template`) between them.

mod grants;

use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};

use ecdysis_model::ToolCall;
use ecdysis_proxy::{CONVERSATION_HEADER, Proxy, ProxySettings};
use ecdysis_sandbox::sandbox::{Limits, LoadedHarness, Sandbox};
use ecdysis_testkit::mock::{MockReply, MockServer};

fn template() -> LoadedHarness {
    static LOADED: OnceLock<LoadedHarness> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let bytes = ecdysis_testkit::guests::guest("harness-template", None);
            let sandbox = Sandbox::pooled(Limits::default(), 8).expect("sandbox");
            ecdysis_testkit::guests::load(&sandbox, &bytes)
        })
        .clone()
}

/// The hostile guest built with `feature`.
fn hostile(feature: &str) -> LoadedHarness {
    let bytes = ecdysis_testkit::guests::guest("guests/hostile", Some(feature));
    let sandbox = Sandbox::pooled(Limits::default(), 2).expect("sandbox");
    ecdysis_testkit::guests::load(&sandbox, &bytes)
}

/// The hostile guest whose regulation forces a `calculate` call after
/// every step.
fn forcing() -> LoadedHarness {
    static LOADED: OnceLock<LoadedHarness> = OnceLock::new();
    LOADED.get_or_init(|| hostile("force-call-forever")).clone()
}

/// A proxy running the starting harness on `127.0.0.1:0`: its base URL.
async fn start(settings: ProxySettings) -> (String, Proxy, tokio::sync::oneshot::Sender<()>) {
    start_with(template(), settings).await
}

async fn start_with(
    harness: LoadedHarness,
    settings: ProxySettings,
) -> (String, Proxy, tokio::sync::oneshot::Sender<()>) {
    let any_port = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let (addr, proxy, stop) = start_on(any_port, harness, settings).await;
    (format!("http://{addr}/v1"), proxy, stop)
}

fn tools() -> Value {
    json!([
        {"type": "function", "function": {
            "name": "get_order_details",
            "description": "Get the status and details of an order.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}
        }},
        {"type": "function", "function": {
            "name": "cancel_order",
            "description": "Cancel a pending order.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}, "reason": {"type": "string"}}, "required": ["order_id", "reason"]}
        }}
    ])
}

fn opening() -> Vec<Value> {
    vec![
        json!({"role": "system", "content": "You are a helpful customer service agent. Use the tools to look orders up."}),
        json!({"role": "user", "content": "Where is my order #W1234567?"}),
    ]
}

fn request(messages: &[Value]) -> Value {
    json!({"model": "mock-model", "messages": messages, "tools": tools(), "temperature": 0})
}

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

async fn post(base: &str, body: &Value) -> (u16, Value, Option<String>) {
    let response = reqwest::Client::new()
        .post(format!("{base}/chat/completions"))
        .json(body)
        .send()
        .await
        .expect("the proxy answers");
    let status = response.status().as_u16();
    let conversation = response
        .headers()
        .get(CONVERSATION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let text = response.text().await.expect("body");
    let value = serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text));
    (status, value, conversation)
}

fn upstream_bodies(mock: &MockServer) -> Vec<Value> {
    mock.requests()
        .iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .map(|r| r.json().expect("the proxy sends JSON"))
        .collect()
}

#[tokio::test]
async fn a_tool_call_round_trip_goes_through_the_harness_and_stays_warm() {
    let mock = MockServer::start().await.expect("mock");
    mock.push(MockReply::tool_calls(
        None,
        &[call(
            "call_1",
            "get_order_details",
            r##"{"order_id":"#W1234567"}"##,
        )],
    ));
    mock.push(MockReply::text("Your order #W1234567 has shipped."));
    let (base, proxy, _stop) = start(ProxySettings::new(mock.base_url())).await;

    let mut messages = opening();
    let (status, reply, conversation) = post(&base, &request(&messages)).await;
    assert_eq!(status, 200, "{reply}");
    let message = &reply["choices"][0]["message"];
    assert_eq!(reply["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(message["tool_calls"][0]["id"], "call_1");
    assert_eq!(
        message["tool_calls"][0]["function"]["name"],
        "get_order_details"
    );
    assert_eq!(reply["usage"]["prompt_tokens"], 10);

    // The upstream read the contract's system prompt: the client's, with
    // the starting harness's tool-use rules; the client never sees them.
    let first = &upstream_bodies(&mock)[0];
    assert_eq!(first["messages"][0]["role"], "system");
    let prompt = first["messages"][0]["content"].as_str().unwrap();
    assert!(prompt.starts_with("You are a helpful customer service agent."));
    assert!(
        prompt.contains("Tool-use rules (runtime harness)"),
        "{prompt}"
    );
    assert!(!reply.to_string().contains("runtime harness"));
    assert_eq!(first["messages"][1], messages[1]);
    assert!(first.get("stream").is_none());
    assert_eq!(first["temperature"], 0);

    messages.push(message.clone());
    messages.push(
        json!({"role": "tool", "tool_call_id": "call_1", "content": "{\"status\": \"delivered\"}"}),
    );
    let (status, reply, again) = post(&base, &request(&messages)).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        reply["choices"][0]["message"]["content"],
        "Your order #W1234567 has shipped."
    );
    assert_eq!(again, conversation);
    let second = &upstream_bodies(&mock)[1];
    assert_eq!(second["messages"][2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(second["messages"][3]["tool_call_id"], "call_1");

    let record = proxy.record(&conversation.unwrap()).expect("recorded");
    assert_eq!(record.requests, 2);
    // Only the first request built the episode: the second found it warm.
    assert_eq!(record.replays, 1);
    assert!(record.retries.is_empty());
    assert!(record.hooks.iter().any(|h| h.hook == "realize"));
}

#[tokio::test]
async fn a_blocked_call_is_asked_again_upstream_and_never_reaches_the_client() {
    let mock = MockServer::start().await.expect("mock");
    mock.push(MockReply::tool_calls(
        None,
        &[call(
            "call_1",
            "teleport_parcel",
            r##"{"order_id":"#W1234567"}"##,
        )],
    ));
    mock.push(MockReply::tool_calls(
        None,
        &[call(
            "call_2",
            "get_order_details",
            r##"{"order_id":"#W1234567"}"##,
        )],
    ));
    let (base, proxy, _stop) = start(ProxySettings::new(mock.base_url())).await;
    let (status, reply, conversation) = post(&base, &request(&opening())).await;
    assert_eq!(status, 200, "{reply}");
    let calls = reply["choices"][0]["message"]["tool_calls"]
        .as_array()
        .unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["function"]["name"], "get_order_details");

    let bodies = upstream_bodies(&mock);
    assert_eq!(bodies.len(), 2);
    // The retry: the refused reply, then the harness's feedback as its
    // result, naming the real tools.
    let retried = bodies[1]["messages"].as_array().unwrap();
    let n = retried.len();
    assert_eq!(
        retried[n - 2]["tool_calls"][0]["function"]["name"],
        "teleport_parcel"
    );
    assert_eq!(retried[n - 1]["role"], "tool");
    assert_eq!(retried[n - 1]["tool_call_id"], "call_1");
    let feedback = retried[n - 1]["content"].as_str().unwrap();
    assert!(feedback.contains("get_order_details"), "{feedback}");

    let conversation = conversation.unwrap();
    let record = proxy.record(&conversation).expect("recorded");
    assert_eq!(record.retries.len(), 1);
    assert_eq!(record.retries[0].0, 1);
    assert_eq!(record.exhausted, 0);
    // Both upstream completions are counted, the refused one too.
    assert_eq!(
        (
            record.upstream_requests,
            record.prompt_tokens,
            record.completion_tokens
        ),
        (2, 20, 10)
    );
    // The record over HTTP.
    let seen: Value = reqwest::get(format!(
        "{}/ecdysis/conversations/{conversation}",
        base.trim_end_matches("/v1")
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(seen["retries"][0][0], 1);
    assert_eq!(
        seen["retries"][0][1]["feedback"].as_array().unwrap().len(),
        1
    );
    assert_eq!(seen["upstream_requests"], 2);
    let missing = reqwest::get(format!(
        "{}/ecdysis/conversations/nope",
        base.trim_end_matches("/v1")
    ))
    .await
    .unwrap();
    assert_eq!(missing.status(), 404);
}

#[tokio::test]
async fn retries_are_bounded_and_the_turn_ends_without_a_call() {
    let mock = MockServer::start().await.expect("mock");
    mock.set_fallback(MockReply::tool_calls(
        None,
        &[call("call_x", "teleport_parcel", "{}")],
    ));
    let mut settings = ProxySettings::new(mock.base_url());
    settings.max_retries = 2;
    let (base, proxy, _stop) = start(settings).await;
    let (status, reply, conversation) = post(&base, &request(&opening())).await;
    assert_eq!(status, 200, "{reply}");
    assert!(reply["choices"][0]["message"].get("tool_calls").is_none());
    assert_eq!(reply["choices"][0]["finish_reason"], "stop");
    assert_eq!(upstream_bodies(&mock).len(), 3);
    let record = proxy.record(&conversation.unwrap()).unwrap();
    assert_eq!(record.retries.len(), 3);
    assert_eq!(record.exhausted, 1);
}

#[tokio::test]
async fn a_call_written_as_text_is_returned_as_a_structured_call() {
    let mock = MockServer::start().await.expect("mock");
    mock.push(MockReply::text(
        "```json\n{\"name\": \"get_order_details\", \"arguments\": {\"order_id\": \"#W1234567\"}}\n```",
    ));
    let (base, _proxy, _stop) = start(ProxySettings::new(mock.base_url())).await;
    let (status, reply, _) = post(&base, &request(&opening())).await;
    assert_eq!(status, 200, "{reply}");
    let message = &reply["choices"][0]["message"];
    assert_eq!(message["content"], Value::Null);
    assert_eq!(
        message["tool_calls"][0]["function"]["name"],
        "get_order_details"
    );
    let arguments: Value = serde_json::from_str(
        message["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(arguments, json!({"order_id": "#W1234567"}));
    assert_eq!(reply["choices"][0]["finish_reason"], "tool_calls");
}

/// The events of an SSE body, `[DONE]` excluded (asserted last).
fn events(body: &str) -> Vec<Value> {
    let data: Vec<&str> = body
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| e.strip_prefix("data: ").expect("a data line"))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"));
    data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).expect("JSON event"))
        .collect()
}

#[tokio::test]
async fn streaming_delivers_the_realized_reply_as_events() {
    let mock = MockServer::start().await.expect("mock");
    let (base, _proxy, _stop) = start(ProxySettings::new(mock.base_url())).await;
    let text = "I'll look it up.";
    let calls = [call(
        "call_1",
        "get_order_details",
        r##"{"order_id":"#W1234567"}"##,
    )];
    mock.push(MockReply::tool_calls(Some(text), &calls));
    mock.push(MockReply::tool_calls(Some(text), &calls));

    let plain = request(&opening());
    let (_, whole, _) = post(&base, &plain).await;
    let mut streamed = plain.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let response = reqwest::Client::new()
        .post(format!("{base}/chat/completions"))
        .header(CONVERSATION_HEADER, "streamed")
        .json(&streamed)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let events = events(&response.text().await.unwrap());
    // The upstream was asked without streaming both times.
    assert!(
        upstream_bodies(&mock)
            .iter()
            .all(|b| b.get("stream").is_none())
    );

    let mut content = String::new();
    let mut calls_seen = Vec::new();
    let mut finish = Value::Null;
    let mut usage = Value::Null;
    for e in &events {
        assert_eq!(e["object"], "chat.completion.chunk");
        if let Some(u) = e.get("usage") {
            usage = u.clone();
        }
        let Some(choice) = e["choices"].get(0) else {
            continue;
        };
        if let Some(t) = choice["delta"]["content"].as_str() {
            content.push_str(t);
        }
        for c in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let mut c = c.clone();
            c.as_object_mut().unwrap().remove("index");
            calls_seen.push(c);
        }
        if !choice["finish_reason"].is_null() {
            finish = choice["finish_reason"].clone();
        }
    }
    let message = &whole["choices"][0]["message"];
    assert_eq!(content, message["content"].as_str().unwrap());
    assert_eq!(Value::Array(calls_seen), message["tool_calls"]);
    assert_eq!(finish, whole["choices"][0]["finish_reason"]);
    assert_eq!(usage, whole["usage"]);
}

/// Turn one of a conversation (with a blocked reply retried first when
/// `blocked`), then turn two on one proxy, then turn two again on a fresh
/// one: the upstream must read the same bytes both times.
async fn continue_after_restart(blocked: bool) {
    let mock = MockServer::start().await.expect("mock");
    if blocked {
        mock.push(MockReply::tool_calls(
            None,
            &[call("call_1", "teleport_parcel", "{}")],
        ));
    }
    mock.push(MockReply::tool_calls(
        None,
        &[call(
            "call_2",
            "get_order_details",
            r##"{"order_id":"#W1234567"}"##,
        )],
    ));
    let (base, proxy, stop) = start(ProxySettings::new(mock.base_url())).await;
    let mut messages = opening();
    let (status, reply, conversation) = post(&base, &request(&messages)).await;
    assert_eq!(status, 200, "{reply}");
    messages.push(reply["choices"][0]["message"].clone());
    messages.push(
        json!({"role": "tool", "tool_call_id": "call_2", "content": "Error: order not found"}),
    );
    mock.push(MockReply::text("I could not find it."));
    let (status, _, _) = post(&base, &request(&messages)).await;
    assert_eq!(status, 200);
    let before = mock.requests().last().unwrap().body.clone();
    let record = proxy.record(conversation.as_deref().unwrap()).unwrap();
    // A neutral turn leaves the episode warm; a retried one does not (a
    // replay could not repeat its hook calls), so turn two replays.
    assert_eq!(record.replays, if blocked { 2 } else { 1 });
    assert_eq!(record.retries.len(), usize::from(blocked));
    let _ = stop.send(());

    // A new proxy process (nothing warm, no records) gets the same
    // continuing request.
    let (base, proxy, _stop) = start(ProxySettings::new(mock.base_url())).await;
    mock.push(MockReply::text("I could not find it."));
    let (status, _, again) = post(&base, &request(&messages)).await;
    assert_eq!(status, 200);
    assert_eq!(again, conversation);
    let after = mock.requests().last().unwrap().body.clone();
    assert_eq!(
        String::from_utf8_lossy(&before),
        String::from_utf8_lossy(&after)
    );
    let record = proxy.record(&again.unwrap()).unwrap();
    assert_eq!((record.requests, record.replays), (1, 1));
}

#[tokio::test]
async fn a_conversation_continued_after_a_restart_sends_the_same_bytes_upstream() {
    continue_after_restart(false).await;
}

#[tokio::test]
async fn a_retried_turn_is_not_replayed_after_a_restart() {
    continue_after_restart(true).await;
}

#[tokio::test]
async fn bad_input_gets_openai_style_errors_naming_the_field() {
    let mock = MockServer::start().await.expect("mock");
    let mut settings = ProxySettings::new(mock.base_url());
    settings.max_request_bytes = 4096;
    let (base, _proxy, _stop) = start(settings).await;
    let client = reqwest::Client::new();
    let url = format!("{base}/chat/completions");

    let r = client.post(&url).body("{not json").send().await.unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["param"].is_null());
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not JSON")
    );

    let mut bad = request(&opening());
    bad["messages"][1]["role"] = json!("narrator");
    let (status, body, _) = post(&base, &bad).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "messages[1].role");

    let mut bad = request(&opening());
    bad["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "tool", "tool_call_id": "call_never", "content": "x"}));
    let (status, body, _) = post(&base, &bad).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "messages[2].tool_call_id");

    let mut big = request(&opening());
    big["messages"][1]["content"] = json!("x".repeat(5000));
    let (status, body, _) = post(&base, &big).await;
    assert_eq!(status, 413);
    assert_eq!(body["error"]["type"], "request_too_large");
    assert_eq!(mock.request_count(), 0, "nothing bad reaches the upstream");
}

#[tokio::test]
async fn a_down_slow_or_garbled_upstream_is_a_typed_bad_gateway() {
    // Down: a port that was bound and released.
    let down = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let (base, _p1, _s1) = start(ProxySettings::new(format!("http://{down}/v1"))).await;
    let (status, body, _) = post(&base, &request(&opening())).await;
    assert_eq!(status, 502);
    assert_eq!(body["error"]["type"], "upstream_unreachable");

    let mock = MockServer::start().await.expect("mock");
    let mut settings = ProxySettings::new(mock.base_url());
    settings.upstream_timeout = Duration::from_millis(300);
    let (base, _p2, _s2) = start(settings).await;
    mock.push(MockReply::text("late").with_delay(Duration::from_secs(3)));
    let (status, body, _) = post(&base, &request(&opening())).await;
    assert_eq!(status, 504);
    assert_eq!(body["error"]["type"], "upstream_timeout");

    mock.push(MockReply::raw(200, "<html>not a completion</html>"));
    let (status, body, _) = post(&base, &request(&opening())).await;
    assert_eq!(status, 502);
    assert_eq!(body["error"]["type"], "upstream_invalid");

    mock.push(MockReply::json(200, json!({"choices": []})));
    let (status, body, _) = post(&base, &request(&opening())).await;
    assert_eq!(status, 502);
    assert_eq!(body["error"]["type"], "upstream_invalid");

    // An upstream's own error is the client's to see, as it was sent.
    mock.push(MockReply::error(401, "bad key"));
    let (status, body, _) = post(&base, &request(&opening())).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["message"], "bad key");

    // And the conversation still works afterwards.
    mock.push(MockReply::text("fine"));
    let (status, body, _) = post(&base, &request(&opening())).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "fine");
}

#[tokio::test]
async fn models_are_forwarded() {
    let mock = MockServer::start().await.expect("mock");
    mock.push(MockReply::json(
        200,
        json!({"object": "list", "data": [{"id": "mock-model", "object": "model"}]}),
    ));
    let mut settings = ProxySettings::new(mock.base_url());
    settings.upstream_api_key = Some("sk-upstream".into());
    let (base, _proxy, _stop) = start(settings).await;
    let r = reqwest::Client::new()
        .get(format!("{base}/models"))
        .bearer_auth("sk-client")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["data"][0]["id"], "mock-model");
    let seen = &mock.requests()[0];
    assert_eq!(seen.path, "/v1/models");
    // The upstream's key, never the client's.
    assert_eq!(seen.header("authorization"), Some("Bearer sk-upstream"));
}

#[tokio::test]
async fn a_regulation_note_reaches_only_the_upstream_and_is_rederived_after_a_restart() {
    let mock = MockServer::start().await.expect("mock");
    let lookup = r##"{"order_id":"#W1234567"}"##;
    mock.push(MockReply::tool_calls(
        None,
        &[call("call_1", "get_order_details", lookup)],
    ));
    mock.push(MockReply::tool_calls(
        None,
        &[call("call_2", "get_order_details", lookup)],
    ));
    mock.push(MockReply::text("Sorry, I cannot find it."));
    let (base, _proxy, stop) = start(ProxySettings::new(mock.base_url())).await;
    let mut messages = opening();
    for id in ["call_1", "call_2"] {
        let (status, reply, _) = post(&base, &request(&messages)).await;
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply["choices"][0]["message"]["tool_calls"][0]["id"], id);
        messages.push(reply["choices"][0]["message"].clone());
        messages
            .push(json!({"role": "tool", "tool_call_id": id, "content": "Error: order not found"}));
    }
    let (status, reply, _) = post(&base, &request(&messages)).await;
    assert_eq!(status, 200, "{reply}");
    assert!(!reply.to_string().contains("[Runtime harness note]"));
    // The identical call failed twice: the starting harness's regulation
    // appends a note to the second failure, which the upstream reads and
    // the client's history never holds.
    let bodies = upstream_bodies(&mock);
    let last = bodies[2]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["tool_call_id"], "call_2");
    let content = last["content"].as_str().unwrap();
    assert!(
        content.starts_with("Error: order not found\n\n[Runtime harness note] "),
        "{content}"
    );
    // Not on the first failure.
    let first_result = &bodies[1]["messages"].as_array().unwrap().last().unwrap()["content"];
    assert_eq!(first_result, "Error: order not found");
    let before = mock.requests().last().unwrap().body.clone();
    let _ = stop.send(());

    let (base, _proxy, _stop) = start(ProxySettings::new(mock.base_url())).await;
    mock.push(MockReply::text("Sorry, I cannot find it."));
    let (status, _, _) = post(&base, &request(&messages)).await;
    assert_eq!(status, 200);
    let after = mock.requests().last().unwrap().body.clone();
    assert_eq!(
        String::from_utf8_lossy(&before),
        String::from_utf8_lossy(&after)
    );
}

#[tokio::test]
async fn a_forced_call_is_the_next_reply_without_asking_the_upstream() {
    let mock = MockServer::start().await.expect("mock");
    mock.push(MockReply::tool_calls(
        None,
        &[call(
            "call_1",
            "get_order_details",
            r##"{"order_id":"#W1234567"}"##,
        )],
    ));
    let mut with_calculate = request(&opening());
    let tools = json!([tools()[0].clone(), {"type": "function", "function": {
        "name": "calculate", "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}
    }}]);
    with_calculate["tools"] = tools.clone();
    let (base, proxy, _stop) = start_with(forcing(), ProxySettings::new(mock.base_url())).await;
    let (status, reply, conversation) = post(&base, &with_calculate).await;
    assert_eq!(status, 200, "{reply}");
    let mut messages = opening();
    messages.push(reply["choices"][0]["message"].clone());
    messages.push(
        json!({"role": "tool", "tool_call_id": "call_1", "content": "{\"status\": \"pending\"}"}),
    );
    for step in 2..=3 {
        let body = json!({"model": "mock-model", "messages": messages, "tools": tools});
        let (status, reply, _) = post(&base, &body).await;
        assert_eq!(status, 200, "{reply}");
        let forced = &reply["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(forced["function"]["name"], "calculate");
        assert_eq!(forced["function"]["arguments"], r#"{"expression":"1+1"}"#);
        assert_eq!(forced["id"], format!("forced_{step}"));
        messages.push(reply["choices"][0]["message"].clone());
        messages.push(
            json!({"role": "tool", "tool_call_id": format!("forced_{step}"), "content": "2"}),
        );
    }
    // Only the first turn asked the upstream, and the forced turns kept
    // the episode warm.
    assert_eq!(mock.request_count(), 1);
    let record = proxy.record(conversation.as_deref().unwrap()).unwrap();
    assert_eq!((record.requests, record.replays), (3, 1));

    // A fresh proxy replays the history to the same decision.
    let (base, _proxy, _stop) = start_with(forcing(), ProxySettings::new(mock.base_url())).await;
    let body = json!({"model": "mock-model", "messages": messages, "tools": tools});
    let (status, reply, _) = post(&base, &body).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        reply["choices"][0]["message"]["tool_calls"][0]["id"],
        "forced_4"
    );
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test]
async fn a_failing_hook_follows_the_policy_and_the_proxy_keeps_serving() {
    let mock = MockServer::start().await.expect("mock");
    let panicking = hostile("panic");
    let lookup = r##"{"order_id":"#W1234567"}"##;
    mock.set_fallback(MockReply::tool_calls(
        None,
        &[call("call_1", "get_order_details", lookup)],
    ));

    let (base, _proxy, _stop) =
        start_with(panicking.clone(), ProxySettings::new(mock.base_url())).await;
    let (status, body, _) = post(&base, &request(&opening())).await;
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["error"]["type"], "harness_error");
    // Served again, and another conversation too: each request is its own
    // episode, and the failure poisoned only that one.
    let (status, _, _) = post(&base, &request(&opening())).await;
    assert_eq!(status, 500);
    let mut other = opening();
    other[1]["content"] = json!("Cancel order #W7654321.");
    let (status, _, _) = post(&base, &request(&other)).await;
    assert_eq!(status, 500);

    let mut settings = ProxySettings::new(mock.base_url());
    settings.policy = ecdysis_sandbox::sandbox::FailurePolicy::FailOpen;
    let (base, _proxy, _stop) = start_with(panicking, settings).await;
    let (status, body, _) = post(&base, &request(&opening())).await;
    assert_eq!(status, 200, "{body}");
    // Fail-open: the upstream's reply goes through as it was.
    let forwarded = &body["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(forwarded["id"], "call_1");
    assert_eq!(forwarded["function"]["arguments"], lookup);
}

#[tokio::test]
async fn requests_over_the_concurrency_limit_are_refused_not_queued() {
    let mock = MockServer::start().await.expect("mock");
    mock.push(MockReply::text("slow").with_delay(Duration::from_millis(1500)));
    mock.set_fallback(MockReply::text("fast"));
    let mut settings = ProxySettings::new(mock.base_url());
    settings.max_conversations = 1;
    let (base, _proxy, _stop) = start(settings).await;
    let slow = {
        let base = base.clone();
        tokio::spawn(async move { post(&base, &request(&opening())).await })
    };
    // Wait until the slow request holds the only slot (the upstream has it).
    while mock.request_count() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut other = opening();
    other[1]["content"] = json!("Another question.");
    let (status, body, _) = post(&base, &request(&other)).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["type"], "proxy_busy");
    let (status, body, _) = slow.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, _, _) = post(&base, &request(&other)).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn identical_histories_are_identical_states_and_new_tools_are_a_new_episode() {
    let mock = MockServer::start().await.expect("mock");
    let lookup = r##"{"order_id":"#W1234567"}"##;
    mock.set_fallback(MockReply::tool_calls(
        None,
        &[call("call_1", "get_order_details", lookup)],
    ));
    let (base, proxy, _stop) = start(ProxySettings::new(mock.base_url())).await;
    let client = reqwest::Client::new();
    let mut messages = opening();
    messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "get_order_details", "arguments": lookup}}]}));
    messages.push(
        json!({"role": "tool", "tool_call_id": "call_0", "content": "Error: order not found"}),
    );
    let mut replies = Vec::new();
    for name in ["first", "second"] {
        let r = client
            .post(format!("{base}/chat/completions"))
            .header(CONVERSATION_HEADER, name)
            .json(&request(&messages))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()[CONVERSATION_HEADER], name);
        replies.push(r.json::<Value>().await.unwrap());
    }
    assert_eq!(replies[0], replies[1]);
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body, requests[1].body);
    for name in ["first", "second"] {
        assert_eq!(proxy.record(name).unwrap().replays, 1);
    }

    // The conversation continued with another tool set: not the warm
    // episode, which saw the old tools, but a replay with the new ones.
    messages.push(replies[0]["choices"][0]["message"].clone());
    messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "{}"}));
    let mut fewer = request(&messages);
    fewer["tools"] = json!([tools()[0].clone()]);
    let r = client
        .post(format!("{base}/chat/completions"))
        .header(CONVERSATION_HEADER, "first")
        .json(&fewer)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(proxy.record("first").unwrap().replays, 2);
    let sent = mock.requests().last().unwrap().json().unwrap();
    assert_eq!(sent["tools"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn with_client_keys_only_a_known_key_is_served() {
    let mock = MockServer::start().await.expect("mock");
    mock.set_fallback(MockReply::text("hello"));
    let mut settings = ProxySettings::new(mock.base_url());
    settings.api_keys = Some(vec!["sk-client-1".into()]);
    let (base, _proxy, _stop) = start(settings).await;
    let client = reqwest::Client::new();
    let send = |key: Option<&str>| {
        let mut r = client
            .post(format!("{base}/chat/completions"))
            .json(&request(&opening()));
        if let Some(k) = key {
            r = r.bearer_auth(k);
        }
        r.send()
    };
    for key in [None, Some("sk-other")] {
        let r = send(key).await.unwrap();
        assert_eq!(r.status(), 401);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["type"], "invalid_api_key");
    }
    let r = client.get(format!("{base}/models")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(mock.request_count(), 0);
    let r = send(Some("sk-client-1")).await.unwrap();
    assert_eq!(r.status(), 200);
    // The client's key stays with the proxy.
    assert_eq!(mock.requests()[0].header("authorization"), None);
}

#[tokio::test]
async fn a_plain_reply_keeps_the_upstreams_finish_reason() {
    let mock = MockServer::start().await.expect("mock");
    let mut cut = ecdysis_testkit::mock::completion_body(
        Some("The answer is"),
        &[],
        "length",
        ecdysis_model::Usage {
            prompt_tokens: 10,
            completion_tokens: 5,
            cached_prompt_tokens: 0,
        },
    );
    cut["created"] = json!(1_700_000_000);
    mock.push(MockReply::json(200, cut));
    let (base, _proxy, _stop) = start(ProxySettings::new(mock.base_url())).await;
    let (status, reply, _) = post(&base, &request(&opening())).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["choices"][0]["finish_reason"], "length");
    assert_eq!(reply["choices"][0]["message"]["content"], "The answer is");
    assert_eq!(reply["created"], 1_700_000_000);
    assert_eq!(reply["id"], "chatcmpl-mock");
}

#[tokio::test]
async fn a_reply_with_one_blocked_call_is_asked_again_as_a_whole() {
    let mock = MockServer::start().await.expect("mock");
    let lookup = r##"{"order_id":"#W1234567"}"##;
    mock.push(MockReply::tool_calls(
        None,
        &[
            call("call_1", "teleport_parcel", "{}"),
            call("call_2", "get_order_details", lookup),
        ],
    ));
    mock.push(MockReply::tool_calls(
        None,
        &[call("call_3", "get_order_details", lookup)],
    ));
    let (base, _proxy, _stop) = start(ProxySettings::new(mock.base_url())).await;
    let (status, reply, _) = post(&base, &request(&opening())).await;
    assert_eq!(status, 200, "{reply}");
    let calls = reply["choices"][0]["message"]["tool_calls"]
        .as_array()
        .unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["id"], "call_3");
    // The upstream read an answer to each call of the refused reply: the
    // feedback for the blocked one, "not run" for the other.
    let retried = upstream_bodies(&mock)[1]["messages"]
        .as_array()
        .unwrap()
        .clone();
    let n = retried.len();
    assert_eq!(retried[n - 3]["tool_calls"].as_array().unwrap().len(), 2);
    assert_eq!(retried[n - 2]["tool_call_id"], "call_1");
    assert!(
        retried[n - 2]["content"]
            .as_str()
            .unwrap()
            .contains("no tool named")
    );
    assert_eq!(retried[n - 1]["tool_call_id"], "call_2");
    assert!(
        retried[n - 1]["content"]
            .as_str()
            .unwrap()
            .contains("Not run")
    );
}

#[tokio::test]
async fn a_blocked_text_reply_is_asked_again_with_the_feedback_as_a_note() {
    let mock = MockServer::start().await.expect("mock");
    let written = "```json\n{\"name\": \"teleport_parcel\", \"arguments\": {}}\n```";
    mock.push(MockReply::text(written));
    mock.push(MockReply::text("Let me check that order for you."));
    let (base, proxy, _stop) = start(ProxySettings::new(mock.base_url())).await;
    let (status, reply, conversation) = post(&base, &request(&opening())).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        reply["choices"][0]["message"]["content"],
        "Let me check that order for you."
    );
    let retried = upstream_bodies(&mock)[1]["messages"]
        .as_array()
        .unwrap()
        .clone();
    let n = retried.len();
    assert_eq!(retried[n - 2]["role"], "assistant");
    assert_eq!(retried[n - 2]["content"], written);
    assert_eq!(retried[n - 1]["role"], "system");
    let note = retried[n - 1]["content"].as_str().unwrap();
    assert!(note.starts_with("[Runtime harness note] "), "{note}");
    assert!(note.contains("get_order_details"), "{note}");
    let record = proxy.record(&conversation.unwrap()).unwrap();
    assert_eq!(record.retries.len(), 1);
}

/// Whether the proxy closes `stream` (rather than leaving it open) before
/// the test's own patience runs out.
async fn closed_by_the_proxy(stream: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 256];
    loop {
        match tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test]
async fn slow_heads_and_connections_over_the_cap_are_closed() {
    use tokio::io::AsyncWriteExt;
    let mock = MockServer::start().await.expect("mock");
    mock.set_fallback(MockReply::text("hello"));
    let mut settings = ProxySettings::new(mock.base_url());
    settings.header_timeout = Duration::from_millis(300);
    let (base, _proxy, _stop) = start(settings).await;
    let addr = base
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_string();
    let mut trickle = tokio::net::TcpStream::connect(&addr).await.unwrap();
    trickle
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    assert!(closed_by_the_proxy(&mut trickle).await);

    let mut settings = ProxySettings::new(mock.base_url());
    settings.max_connections = 1;
    let (base, _proxy, _stop) = start(settings).await;
    let addr = base
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_string();
    let idle = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut second = tokio::net::TcpStream::connect(&addr).await.unwrap();
    assert!(closed_by_the_proxy(&mut second).await);
    drop(idle);
    // Once the idle connection is gone, requests are served again.
    let mut served = false;
    for _ in 0..100 {
        let sent = reqwest::Client::new()
            .post(format!("{base}/chat/completions"))
            .json(&request(&opening()))
            .send()
            .await;
        if sent.is_ok_and(|r| r.status() == 200) {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(served);
}

#[tokio::test]
async fn a_rewritten_call_reaches_the_client_rewritten_and_the_next_request_replays() {
    let mock = MockServer::start().await.expect("mock");
    // The arguments object double-encoded as a JSON string.
    let encoded = serde_json::to_string(r##"{"order_id":"#W1234567"}"##).unwrap();
    mock.push(MockReply::tool_calls(
        None,
        &[call("call_1", "get_order_details", &encoded)],
    ));
    mock.push(MockReply::text("It has shipped."));
    let (base, proxy, _stop) = start(ProxySettings::new(mock.base_url())).await;
    let mut messages = opening();
    let (status, reply, conversation) = post(&base, &request(&messages)).await;
    assert_eq!(status, 200, "{reply}");
    let sent = &reply["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(sent["id"], "call_1");
    let arguments: Value =
        serde_json::from_str(sent["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"order_id": "#W1234567"}));
    messages.push(reply["choices"][0]["message"].clone());
    messages.push(
        json!({"role": "tool", "tool_call_id": "call_1", "content": "{\"status\": \"shipped\"}"}),
    );
    let (status, _, _) = post(&base, &request(&messages)).await;
    assert_eq!(status, 200);
    // The live episode realized the encoded call; a replay of the client's
    // history sees the decoded one. Not the same hook calls: not kept warm.
    let record = proxy.record(&conversation.unwrap()).unwrap();
    assert_eq!((record.requests, record.replays), (2, 2));
}

/// The scripted upstream of the SDK tests: models, a blocked call then the
/// call that is returned, a call written as text, a final answer.
fn sdk_script(mock: &MockServer, with_last_turn: bool) {
    let lookup = r##"{"order_id":"#W1234567"}"##;
    mock.push(MockReply::json(
        200,
        json!({"object": "list", "data": [{"id": "mock-model", "object": "model", "created": 0, "owned_by": "test"}]}),
    ));
    mock.push(MockReply::tool_calls(
        None,
        &[call("call_1", "teleport_parcel", "{}")],
    ));
    mock.push(MockReply::tool_calls(
        None,
        &[call("call_2", "get_order_details", lookup)],
    ));
    mock.push(MockReply::text(
        "```json\n{\"name\": \"get_order_details\", \"arguments\": {\"order_id\": \"#W1234567\"}}\n```",
    ));
    if with_last_turn {
        mock.push(MockReply::text("I could not find that order."));
    }
}

/// Run an SDK client script against a proxy in front of [`sdk_script`]'s
/// upstream and check what the SDK received (the scripts print the same
/// JSON). With `restart`, the client pauses before its last turn while the
/// proxy is replaced by a fresh one on the same address (nothing warm, no
/// records), so the last turn is served by a replay. Returns the body the
/// upstream received for the last turn.
async fn sdk_conversation(
    program: String,
    script: &str,
    env: Option<(&'static str, String)>,
    restart: bool,
) -> Vec<u8> {
    use std::io::{BufRead, Write};
    let mock = MockServer::start().await.expect("mock");
    sdk_script(&mock, !restart);
    // The fresh proxy's upstream holds the last turn's reply: had the old
    // proxy served that turn (over a kept-alive connection, say), it would
    // have found none and the client would fail.
    let last_turn = MockServer::start().await.expect("mock");
    last_turn.push(MockReply::text("I could not find that order."));
    // The first proxy runs on a runtime of its own, so that replacing it
    // ends its connections too, as a process's exit would (a graceful stop
    // would keep serving the client's kept-alive connection).
    let (base, stop) = start_in_own_runtime(ProxySettings::new(mock.base_url()));
    let script = format!("{}/tests/sdk/{script}", env!("CARGO_MANIFEST_DIR"));
    let mut command = std::process::Command::new(program);
    command
        .arg(script)
        .arg(&base)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some((k, v)) = env {
        command.env(k, v);
    }
    if restart {
        command.env("ECDYSIS_SDK_PAUSE", "1");
    }
    // The client blocks; the proxy and the mock run on the test's runtime.
    let mut child = command.spawn().expect("the client runs");
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut _replacement = None;
    if restart {
        let (line, stderr_back) = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            stderr.read_line(&mut line).expect("the client's stderr");
            (line, stderr)
        })
        .await
        .unwrap();
        stderr = stderr_back;
        assert_eq!(line.trim(), "paused", "the client said: {line}");
        tokio::task::spawn_blocking(stop).await.unwrap();
        let addr: std::net::SocketAddr = base
            .trim_start_matches("http://")
            .trim_end_matches("/v1")
            .parse()
            .unwrap();
        _replacement =
            Some(start_on(addr, template(), ProxySettings::new(last_turn.base_url())).await);
        child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    }
    let out = tokio::task::spawn_blocking(move || {
        let out = child.wait_with_output().expect("the client ends");
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
        (out, rest)
    })
    .await
    .unwrap();
    let (out, err) = out;
    assert!(
        out.status.success(),
        "{err}\n(upstream requests: {} before, {} on the fresh proxy's)",
        mock.request_count(),
        last_turn.request_count()
    );
    let seen: Value = serde_json::from_slice(&out.stdout).expect("the script prints JSON");
    assert_eq!(seen["models"], json!(["mock-model"]));
    assert_eq!(seen["first"]["finish_reason"], "tool_calls");
    assert_eq!(
        seen["first"]["call"],
        json!(["call_2", "get_order_details", {"order_id": "#W1234567"}])
    );
    assert_eq!(seen["second"]["finish_reason"], "tool_calls");
    assert_eq!(
        seen["second"]["calls"],
        json!([["realized_2_1", "get_order_details", {"order_id": "#W1234567"}]])
    );
    assert_eq!(seen["second"]["usage"], 15);
    assert_eq!(seen["third"]["finish_reason"], "stop");
    assert_eq!(seen["third"]["content"], "I could not find that order.");
    // models, two tries of the first turn, one each of the others; the
    // last on the fresh proxy's upstream after a restart.
    let upstream = if restart { &last_turn } else { &mock };
    assert_eq!(mock.request_count() + last_turn.request_count(), 5);
    assert_eq!(last_turn.request_count(), usize::from(restart));
    assert!(
        mock.requests()
            .iter()
            .chain(&last_turn.requests())
            .all(|r| r.header("authorization").is_none())
    );
    // The same lookup failed twice: the starting harness's regulation
    // appends a note that the upstream reads and the SDK never receives.
    let last = upstream.requests().last().unwrap().body.clone();
    let bodies = upstream_bodies(upstream);
    let final_result = bodies.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        final_result.starts_with("Error: order not found\n\n[Runtime harness note] "),
        "{final_result}"
    );
    assert!(
        !seen.to_string().contains("[Runtime harness note]"),
        "{seen}"
    );
    last
}

/// Both SDK runs of one client: straight through, and with the proxy
/// replaced before the last turn; the upstream reads the same bytes.
async fn sdk_conversation_and_restart(
    program: String,
    script: &str,
    env: Option<(&'static str, String)>,
) {
    let straight = sdk_conversation(program.clone(), script, env.clone(), false).await;
    let replayed = sdk_conversation(program, script, env, true).await;
    assert_eq!(
        String::from_utf8_lossy(&straight),
        String::from_utf8_lossy(&replayed)
    );
}

/// A proxy running the starting harness on a runtime of its own: its base
/// URL, and what stops it (the runtime and every connection with it).
fn start_in_own_runtime(settings: ProxySettings) -> (String, impl FnOnce() + Send + 'static) {
    let (base_tx, base_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let (base, _proxy, _stop) = runtime.block_on(start(settings));
        base_tx.send(base).expect("the test waits");
        let _ = stop_rx.recv();
        runtime.shutdown_timeout(Duration::from_secs(5));
    });
    let base = base_rx.recv().expect("the proxy starts");
    let stop = move || {
        let _ = stop_tx.send(());
        thread.join().expect("the proxy's runtime ends");
    };
    (base, stop)
}

/// A proxy running `harness` on `addr`: the address it listens on.
async fn start_on(
    addr: std::net::SocketAddr,
    harness: LoadedHarness,
    settings: ProxySettings,
) -> (
    std::net::SocketAddr,
    Proxy,
    tokio::sync::oneshot::Sender<()>,
) {
    let proxy = Proxy::new(harness, settings).expect("proxy");
    let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = proxy.clone();
    tokio::spawn(async move {
        let _ = serving
            .serve(listener, async move {
                let _ = stopped.await;
            })
            .await;
    });
    (addr, proxy, stop)
}

/// The repository's root (two levels above this crate).
fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `var` when it is set, else `default` under the repository's root; the
/// test fails, naming `install`, when `needed` (a path under it, or it
/// itself when empty) is absent.
fn installed(var: &str, default: &str, needed: &str, install: &str) -> String {
    let path = std::env::var(var)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| repo_root().join(default));
    let check = if needed.is_empty() {
        path.clone()
    } else {
        path.join(needed)
    };
    assert!(
        check.exists(),
        "{} is missing: install it with `{install}` (or name another in {var})",
        check.display()
    );
    path.to_string_lossy().into_owned()
}

/// The `openai` Python SDK (pinned 1.109.1) as the client, from the venv
/// `scripts/python-tools.sh` makes (CI runs it), or the Python named in
/// ECDYSIS_OPENAI_PYTHON.
#[tokio::test]
async fn sdk_openai_python_client_through_the_proxy() {
    let python = installed(
        "ECDYSIS_OPENAI_PYTHON",
        ".ecdysis/python-tools/bin/python",
        "",
        "bash scripts/python-tools.sh",
    );
    let probe = std::process::Command::new(&python)
        .args(["-c", "import openai; print(openai.__version__)"])
        .output()
        .expect("the Python runs");
    assert!(
        probe.status.success(),
        "{python} has no openai package: install it with `bash scripts/python-tools.sh`"
    );
    sdk_conversation_and_restart(python, "openai_client.py", None).await;
}

/// The `openai` npm package (pinned 4.104.0 in tests/sdk/package-lock.json)
/// as the client, on Node, from the node_modules `runtimes/prepare.sh`
/// installs beside the script (CI runs it), or the one named in
/// ECDYSIS_OPENAI_NODE_MODULES.
#[tokio::test]
async fn sdk_openai_node_client_through_the_proxy() {
    let modules = installed(
        "ECDYSIS_OPENAI_NODE_MODULES",
        "host/proxy/tests/sdk/node_modules",
        "openai",
        "bash runtimes/prepare.sh (or npm ci in host/proxy/tests/sdk)",
    );
    sdk_conversation_and_restart(
        "node".into(),
        "openai_client.mjs",
        Some(("NODE_PATH", modules)),
    )
    .await;
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// Prints the latency the proxy adds (the starting harness, the scripted
/// upstream on loopback, one request at a time, a debug build unless run
/// with --release): a new conversation each request (the episode started,
/// contract and skills run); one long conversation continued turn by turn
/// (warm); and the same conversation with every call id edited by the
/// client, so each request replays the whole history. Asserts nothing about
/// time. `cargo test -p ecdysis-proxy --test it bench_ -- --ignored
/// --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it with --ignored --nocapture"]
async fn bench_latency_added_by_the_proxy() {
    let turns = 300;
    let mock = MockServer::start().await.expect("mock");
    let lookup = r##"{"order_id":"#W1234567"}"##;
    let counter = std::sync::atomic::AtomicUsize::new(0);
    mock.set_handler(move |_| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        MockReply::tool_calls(
            None,
            &[call(&format!("call_{n}"), "get_order_details", lookup)],
        )
    });
    let (base, proxy, _stop) = start(ProxySettings::new(mock.base_url())).await;
    let client = reqwest::Client::new();
    let timed = async |url: &str, body: &Value| {
        let started = std::time::Instant::now();
        let r = client.post(url).json(body).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        (started.elapsed(), v)
    };
    let direct_url = format!("{}/chat/completions", mock.base_url());
    let proxy_url = format!("{base}/chat/completions");
    let (mut direct, mut cold) = (Vec::new(), Vec::new());
    for i in 0..turns {
        let mut messages = opening();
        messages[1]["content"] = json!(format!("Where is my order #W{i:07}?"));
        direct.push(timed(&direct_url, &request(&messages)).await.0);
        cold.push(timed(&proxy_url, &request(&messages)).await.0);
    }
    let continued = |edit: bool, name: &'static str| {
        let timed = &timed;
        let proxy_url = proxy_url.clone();
        let direct_url = direct_url.clone();
        async move {
            let mut messages = opening();
            messages[1]["content"] = json!(name);
            let mut took = Vec::new();
            for i in 0..turns {
                // The same body straight to the upstream first: what the
                // proxy adds is the difference.
                let (alone, _) = timed(&direct_url, &request(&messages)).await;
                let (t, reply) = timed(&proxy_url, &request(&messages)).await;
                took.push(t.saturating_sub(alone));
                let mut message = reply["choices"][0]["message"].clone();
                if edit {
                    message["tool_calls"][0]["id"] = json!(format!("edited_{i}"));
                }
                let id = message["tool_calls"][0]["id"].clone();
                messages.push(message);
                messages.push(json!({"role": "tool", "tool_call_id": id, "content": "{\"status\": \"pending\"}"}));
            }
            took
        }
    };
    let mut warm = continued(false, "warm").await;
    let mut replayed = continued(true, "replayed").await;
    let id = |name: &str| {
        let mut m = opening();
        m[1]["content"] = json!(name);
        ecdysis_proxy::request::ChatRequest::parse(request(&m).to_string().as_bytes())
            .unwrap()
            .conversation_id(None)
    };
    assert_eq!(proxy.record(&id("warm")).unwrap().replays, 1);
    assert_eq!(proxy.record(&id("replayed")).unwrap().replays, turns);
    let p50 = |xs: &[Duration]| percentile(xs, 0.5);
    direct.sort();
    cold.sort();
    warm.sort();
    replayed.sort();
    for (name, xs) in [
        ("direct to the upstream, a new conversation each", &direct),
        ("through the proxy, a new conversation each", &cold),
    ] {
        println!(
            "{name}: p50 {:?} p99 {:?} ({} requests)",
            p50(xs),
            percentile(xs, 0.99),
            xs.len()
        );
    }
    println!(
        "added, a new conversation each: p50 {:?}",
        p50(&cold).saturating_sub(p50(&direct))
    );
    for (name, xs) in [
        ("added, one conversation (warm)", &warm),
        (
            "added, one conversation (every request replayed)",
            &replayed,
        ),
    ] {
        println!(
            "{name}, each request against the same body sent direct: p50 {:?} p99 {:?} ({turns} turns)",
            p50(xs),
            percentile(xs, 0.99),
        );
    }
}

#[tokio::test]
async fn warm_episodes_give_their_instances_back_when_the_pool_runs_dry() {
    let mock = MockServer::start().await.expect("mock");
    mock.set_fallback(MockReply::text("hello"));
    // A pool for one episode at a time (a few slots), and more warm
    // episodes allowed than it has.
    let bytes = ecdysis_testkit::guests::guest("harness-template", None);
    let sandbox = Sandbox::pooled(Limits::default(), 1).expect("sandbox");
    let small = ecdysis_testkit::guests::load(&sandbox, &bytes);
    let (base, proxy, _stop) = start_with(small, ProxySettings::new(mock.base_url())).await;
    let mut ids = Vec::new();
    for i in 0..40 {
        let mut messages = opening();
        messages[1]["content"] = json!(format!("Question {i}"));
        let (status, body, id) = post(&base, &request(&messages)).await;
        assert_eq!(status, 200, "{body}");
        ids.push(id.unwrap());
    }
    // The first conversation's episode went back to the pool: continuing it
    // replays.
    let mut messages = opening();
    messages[1]["content"] = json!("Question 0");
    messages.push(json!({"role": "assistant", "content": "hello"}));
    messages.push(json!({"role": "user", "content": "Thanks."}));
    let (status, _, _) = post(&base, &request(&messages)).await;
    assert_eq!(status, 200);
    assert_eq!(proxy.record(&ids[0]).unwrap().replays, 2);
}

#[tokio::test]
async fn a_stop_is_a_final_message_without_the_upstream() {
    let mock = MockServer::start().await.expect("mock");
    let (base, proxy, _stop) = start(ProxySettings::new(mock.base_url())).await;
    let lookup = r##"{"order_id":"#W1234567"}"##;
    // The same call failing again and again: the starting harness ends
    // the episode once it is clearly stuck.
    let mut messages = opening();
    for i in 0..6 {
        let id = format!("call_{i}");
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "get_order_details", "arguments": lookup}}]}));
        messages
            .push(json!({"role": "tool", "tool_call_id": id, "content": "Error: order not found"}));
    }
    let (status, reply, conversation) = post(&base, &request(&messages)).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["choices"][0]["finish_reason"], "stop");
    let reason = reply["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(reason.contains("get_order_details"), "{reason}");
    assert!(reply["choices"][0]["message"].get("tool_calls").is_none());
    assert_eq!(mock.request_count(), 0);
    // Every later request of the conversation gets the same answer.
    messages.push(reply["choices"][0]["message"].clone());
    messages.push(json!({"role": "user", "content": "Please try again."}));
    let (status, again, _) = post(&base, &request(&messages)).await;
    assert_eq!(status, 200);
    assert_eq!(again["choices"][0]["message"]["content"], reason);
    assert_eq!(mock.request_count(), 0);
    let record = proxy.record(&conversation.unwrap()).unwrap();
    assert!(record.hooks.is_empty(), "no live hook call");
}

#[tokio::test]
async fn records_are_appended_per_conversation_and_outlive_the_proxy() {
    let mock = MockServer::start().await.expect("mock");
    let lookup = r##"{"order_id":"#W1234567"}"##;
    mock.push(MockReply::tool_calls(
        None,
        &[call("call_1", "teleport_parcel", "{}")],
    ));
    mock.push(MockReply::tool_calls(
        None,
        &[call("call_2", "get_order_details", lookup)],
    ));
    mock.set_fallback(MockReply::text("It has shipped."));
    let dir = tempfile::tempdir().unwrap();
    let settings = || {
        let mut s = ProxySettings::new(mock.base_url());
        s.records_dir = Some(dir.path().join("records"));
        s
    };
    let (base, _proxy, stop) = start(settings()).await;
    let mut messages = opening();
    let (status, reply, conversation) = post(&base, &request(&messages)).await;
    assert_eq!(status, 200, "{reply}");
    let _ = stop.send(());
    let conversation = conversation.unwrap();
    messages.push(reply["choices"][0]["message"].clone());
    messages.push(json!({"role": "tool", "tool_call_id": "call_2", "content": "{}"}));
    let (base, _proxy, _stop) = start(settings()).await;
    let (status, _, _) = post(&base, &request(&messages)).await;
    assert_eq!(status, 200);

    let file = dir
        .path()
        .join("records")
        .join(format!("{conversation}.jsonl"));
    let lines: Vec<Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "one line per request, across the restart");
    assert_eq!(lines[0]["conversation"], conversation.as_str());
    assert_eq!(lines[0]["retries"].as_array().unwrap().len(), 1);
    assert_eq!(lines[0]["upstream_requests"], 2);
    assert!(
        lines[0]["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["hook"] == "realize")
    );
    assert_eq!(lines[1]["replayed"], true);
    assert_eq!(lines[1]["retries"].as_array().unwrap().len(), 0);

    // A client's id that is not a plain name never names a path.
    let r = reqwest::Client::new()
        .post(format!("{base}/chat/completions"))
        .header(CONVERSATION_HEADER, "../escape")
        .json(&request(&opening()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(!dir.path().join("escape.jsonl").exists());
    let records = ecdysis_proxy::records::read_dir(&dir.path().join("records")).unwrap();
    assert_eq!(records.manifest.domain, ecdysis_proxy::DEFAULT_DOMAIN);
    assert_eq!(records.conversations.len(), 2);
    let first = records
        .conversations
        .iter()
        .find(|c| c.id == conversation)
        .expect("the first conversation read back");
    assert_eq!(first.requests.len(), 2);
    assert_eq!(first.requests[0].retries.len(), 1);
    assert!(
        records
            .conversations
            .iter()
            .any(|c| c.id == "../escape" && !c.file.ends_with("escape.jsonl"))
    );
}

/// A short `bench --proxy` run (no LiteLLM): every request of every side
/// answered, the counts the options ask for, and a finite, positive time
/// added by the proxy's hop and harness.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_bench_answers_every_request_and_counts_them() {
    use ecdysis_proxy::bench::{self, BenchHarness, LitellmStatus, ProxyBenchOptions};
    let opts = ProxyBenchOptions {
        rounds: 2,
        conversations: 5,
        concurrency: 4,
        throughput_conversations: 6,
        warmup: 1,
        ..ProxyBenchOptions::default()
    };
    let harnesses = [BenchHarness {
        name: "harness-template".into(),
        harness: template(),
    }];
    let report = bench::run(&harnesses, &opts).await.expect("the bench runs");
    let text = report.render();
    assert!(report.all_succeeded(), "{text}");
    assert_eq!(report.sides.len(), 2, "{text}");
    for side in &report.sides {
        // Two requests a conversation, every round.
        assert_eq!(side.requests, 2 * 5 * 2, "{text}");
        assert_eq!(side.throughput_requests, 2 * 6 * 2, "{text}");
        assert!(side.p50_us.is_finite() && side.p50_us > 0.0, "{text}");
        assert!(side.p99_us >= side.p50_us, "{text}");
        assert!(side.requests_per_second > 0.0, "{text}");
    }
    let direct = report.side(bench::DIRECT).expect("the direct side");
    assert!(direct.added_p50_us.is_none());
    let proxy = report
        .side("proxy (harness-template)")
        .expect("the proxy's side");
    let added = proxy.added_p50_us.expect("the proxy adds time");
    assert!(added.is_finite() && added > 0.0, "{text}");
    assert!(proxy.added_p99_us.is_some_and(f64::is_finite), "{text}");
    // One upstream request per client request: the harness refused none
    // of the scripted replies (warm-up: one conversation per side).
    assert_eq!(
        report.upstream_requests,
        2 * (2 + 2 * 2 * (5 + 6)),
        "{text}"
    );
    assert!(matches!(report.litellm, LitellmStatus::NotMeasured { .. }));
    assert!(text.contains("LiteLLM not measured"), "{text}");
    assert!(report.load_before.is_some() && report.load_after.is_some());
}

/// A `--litellm` that is not LiteLLM's proxy is a typed error naming it:
/// one that cannot start, and one that exits at once.
#[tokio::test]
async fn the_proxy_bench_says_when_the_litellm_executable_does_not_work() {
    use ecdysis_proxy::bench::{self, BenchHarness, ProxyBenchError, ProxyBenchOptions};
    let harnesses = [BenchHarness {
        name: "harness-template".into(),
        harness: template(),
    }];
    let missing = std::path::PathBuf::from("/nonexistent/bin/litellm");
    let opts = ProxyBenchOptions {
        litellm: Some(missing.clone()),
        ..ProxyBenchOptions::default()
    };
    let err = bench::run(&harnesses, &opts)
        .await
        .expect_err("no such file");
    assert!(
        matches!(&err, ProxyBenchError::LitellmSpawn { path, .. } if *path == missing),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("/nonexistent/bin/litellm"),
        "{err}"
    );

    // `false` starts and exits before it answers anything.
    let exits = ["/bin/false", "/usr/bin/false"]
        .map(std::path::PathBuf::from)
        .into_iter()
        .find(|p| p.exists())
        .expect("a `false` executable");
    let opts = ProxyBenchOptions {
        litellm: Some(exits.clone()),
        ..ProxyBenchOptions::default()
    };
    let err = bench::run(&harnesses, &opts).await.expect_err("it exits");
    match &err {
        ProxyBenchError::LitellmNotReady { path, reason, .. } => {
            assert_eq!(*path, exits);
            assert!(reason.contains("exited"), "{err}");
        }
        other => panic!("{other:?}"),
    }
}

/// A conversation whose reply carries a tool call (so `realize` runs, where
/// the hostile guests attack) or only text (so it never does).
fn attacker_or_bystander(mock: &MockServer) {
    mock.set_handler(|request: &ecdysis_testkit::mock::MockRequest| {
        let body = request.json().unwrap_or_default().to_string();
        if body.contains("ATTACK") {
            MockReply::tool_calls(
                None,
                &[call(
                    "call_1",
                    "get_order_details",
                    r##"{"order_id":"#W1234567"}"##,
                )],
            )
        } else {
            MockReply::text("We open at nine.")
        }
    });
}

fn conversation_saying(text: &str) -> Value {
    let mut messages = opening();
    messages[1]["content"] = json!(text);
    request(&messages)
}

/// Hostile harnesses behind the proxy — a fuel bomb, a memory bomb and an
/// 8 MiB decision in `realize`, a call forced after every step in
/// `regulate` — cost the attacking conversation a typed error (or, for the
/// forced call, one bounded answer), in bounded time; a second client,
/// whose conversation the attack never reaches, is answered while the
/// attacks run at the latency it has alone (within a bound generous for a
/// loaded machine), and the proxy keeps serving both after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_harnesses_cost_only_their_conversation_and_a_second_client_keeps_its_latency() {
    use std::time::Instant;
    let rss_before = resident_mib();
    for feature in ["infinite-loop", "memory-bomb", "huge-output"] {
        let mock = MockServer::start().await.expect("mock");
        attacker_or_bystander(&mock);
        let (base, _proxy, _stop) = start_with(
            hostile(&format!("{feature},spare-text")),
            ProxySettings::new(mock.base_url()),
        )
        .await;
        let bystander = conversation_saying("When do you open?");
        let mut alone = Duration::ZERO;
        for _ in 0..3 {
            let started = Instant::now();
            let (status, body, _) = post(&base, &bystander).await;
            assert_eq!(status, 200, "{feature}: {body}");
            alone = alone.max(started.elapsed());
        }

        // Two attackers, each sending its attack again as soon as it is
        // answered, for as long as the bystander's turns below take.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let attackers: Vec<_> = (0..2)
            .map(|i| {
                let (base, stop) = (base.clone(), stop.clone());
                let body = conversation_saying(&format!("ATTACK {i}: where is #W1234567?"));
                tokio::spawn(async move {
                    let mut answered = Vec::new();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let started = Instant::now();
                        let (status, body, _) = post(&base, &body).await;
                        answered.push((status, body, started.elapsed()));
                    }
                    answered
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut during = Vec::new();
        let window = Instant::now();
        while during.len() < 3 || window.elapsed() < Duration::from_millis(1500) {
            let started = Instant::now();
            let (status, body, _) =
                tokio::time::timeout(Duration::from_secs(10), post(&base, &bystander))
                    .await
                    .unwrap_or_else(|_| {
                        panic!("{feature}: the bystander waited 10 s during the attack")
                    });
            assert_eq!(
                status, 200,
                "{feature}: the bystander during the attack: {body}"
            );
            assert_eq!(body["choices"][0]["message"]["content"], "We open at nine.");
            during.push(started.elapsed());
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut attacks = 0;
        for attacker in attackers {
            let answered = attacker.await.expect("attacker task");
            // Each attacker kept attacking through the bystander's window.
            assert!(
                answered.len() >= 2,
                "{feature}: {} attack(s)",
                answered.len()
            );
            for (status, body, took) in answered {
                assert_eq!(status, 500, "{feature}: {body}");
                assert_eq!(body["error"]["type"], "harness_error", "{feature}: {body}");
                assert!(
                    took < Duration::from_secs(30),
                    "{feature}: an attack took {took:?}"
                );
                attacks += 1;
            }
        }
        let worst = during.iter().max().copied().unwrap_or_default();
        let bound = alone * 20 + Duration::from_secs(1);
        assert!(
            worst < bound,
            "{feature}: the bystander took {worst:?} during the attack, {alone:?} alone"
        );
        // Still serving, both kinds.
        let (status, _, _) = post(&base, &bystander).await;
        assert_eq!(status, 200, "{feature}: after the attack");
        let (status, body, _) = post(&base, &conversation_saying("ATTACK again")).await;
        assert_eq!(
            (status, &body["error"]["type"]),
            (500, &json!("harness_error"))
        );
        eprintln!(
            "{feature}: bystander alone <= {alone:?}, during the attack <= {worst:?} ({} turns beside {attacks} attacks)",
            during.len()
        );
    }

    // The attacks' memory is given back (or bounded by the sandbox's
    // per-instance limit in the pools), not kept per attack.
    let rss_after = resident_mib();
    eprintln!("resident memory {rss_before} MiB before the attacks, {rss_after} MiB after");
    assert!(
        rss_after < rss_before + 512,
        "resident memory grew from {rss_before} to {rss_after} MiB"
    );

    // The forced call after every step: each answer is the one forced call,
    // without the upstream, and a bystander is unaffected (its reply has no
    // step to regulate before it returns).
    let mock = MockServer::start().await.expect("mock");
    attacker_or_bystander(&mock);
    let (base, _proxy, _stop) = start_with(forcing(), ProxySettings::new(mock.base_url())).await;
    let (status, body, _) = post(&base, &conversation_saying("When do you open?")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "We open at nine.");
}

/// This process's resident memory, in MiB (VmRSS).
fn resident_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        / 1024
}

//! What the operator grants the proxy: a usage ledger with prices and a
//! spending limit, and an environment mirror for the harness's env view.

use std::sync::Arc;

use serde_json::{Value, json};

use ecdysis_model::{PriceTable, Usage};
use ecdysis_proxy::{EnvGrant, ProxySettings};
use ecdysis_testkit::mock::{MockReply, MockServer};

use super::{call, opening, post, request, start, upstream_bodies};

/// `mock-model` at $1 per thousand prompt tokens and $2 per thousand
/// completion tokens, $0.50 per thousand cached ones.
fn prices() -> PriceTable {
    PriceTable::from_json_str(
        r#"{"models": {"mock-model": {"prompt_per_mtok": 1000, "completion_per_mtok": 2000, "cached_prompt_per_mtok": 500}}}"#,
    )
    .unwrap()
}

fn usage(prompt: u64, completion: u64, cached: u64) -> Usage {
    Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        cached_prompt_tokens: cached,
    }
}

async fn get(base: &str, path: &str) -> Value {
    reqwest::get(format!("{}{path}", base.trim_end_matches("/v1")))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[tokio::test]
async fn every_upstream_call_is_priced_recorded_and_outlives_the_process() {
    let tmp = tempfile::tempdir().unwrap();
    let records = tmp.path().join("records");
    let mock = MockServer::start().await.unwrap();
    mock.push(
        MockReply::tool_calls(
            None,
            &[call("c1", "get_order_details", r##"{"order_id":"#W1"}"##)],
        )
        .with_usage(usage(1000, 100, 400)),
    );
    mock.push(MockReply::text("It has shipped.").with_usage(usage(2000, 50, 1500)));
    let mut settings = ProxySettings::new(mock.base_url());
    settings.prices = prices();
    settings.records_dir = Some(records.clone());
    let (base, proxy, stop) = start(settings).await;

    let mut messages = opening();
    let (status, reply, conversation) = post(&base, &request(&messages)).await;
    assert_eq!(status, 200, "{reply}");
    messages.push(reply["choices"][0]["message"].clone());
    messages.push(
        json!({"role": "tool", "tool_call_id": "c1", "content": "{\"status\": \"delivered\"}"}),
    );
    let (status, reply, _) = post(&base, &request(&messages)).await;
    assert_eq!(status, 200, "{reply}");

    // 600 fresh + 400 cached prompt tokens, 100 completion; then 500 +
    // 1500 and 50.
    let first = (600.0 * 1000.0 + 400.0 * 500.0 + 100.0 * 2000.0) / 1e6;
    let second = (500.0 * 1000.0 + 1500.0 * 500.0 + 50.0 * 2000.0) / 1e6;
    let record = proxy.record(conversation.as_deref().unwrap()).unwrap();
    assert!(close(record.usd, first + second), "{}", record.usd);
    assert_eq!(record.cached_prompt_tokens, 1900);
    let usage = get(&base, "/ecdysis/usage").await;
    assert_eq!(usage["summary"]["total"]["fresh_calls"], 2, "{usage}");
    assert!(close(
        usage["summary"]["total"]["usd"].as_f64().unwrap(),
        first + second
    ));
    assert_eq!(usage["max_usd"], Value::Null);
    drop(stop);

    // The records hold each request's cost and the ledger's calls.
    let read = ecdysis_proxy::records::read_dir(&records).unwrap();
    assert_eq!(read.conversations.len(), 1, "the ledger is no conversation");
    let costs: Vec<Option<f64>> = read.conversations[0]
        .requests
        .iter()
        .map(|r| r.usd)
        .collect();
    assert_eq!(costs.len(), 2);
    assert!(close(costs[0].unwrap(), first) && close(costs[1].unwrap(), second));
    assert_eq!(read.calls.len(), 2);
    assert!(close(read.ledger().total.usd, first + second));

    // A new process on the same records counts what the first spent: a
    // limit below it refuses the next request before it is sent.
    let mut settings = ProxySettings::new(mock.base_url());
    settings.prices = prices();
    settings.records_dir = Some(records.clone());
    settings.max_usd = Some(first + second + 0.01);
    let (base, _proxy, _stop) = start(settings).await;
    let sent_before = upstream_bodies(&mock).len();
    let (status, reply, _) = post(&base, &request(&messages)).await;
    assert_eq!(status, 429, "{reply}");
    assert_eq!(reply["error"]["type"], "insufficient_quota", "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--max-usd"),
        "{reply}"
    );
    assert_eq!(upstream_bodies(&mock).len(), sent_before, "nothing sent");
    // The refusal is in the ledger, as a failed call that cost nothing.
    let ledger = ecdysis_proxy::records::read_dir(&records).unwrap().ledger();
    assert_eq!(
        (ledger.total.fresh_calls, ledger.total.failed_calls),
        (2, 1)
    );
}

#[tokio::test]
async fn under_a_limit_unpriced_models_are_refused_and_affordable_calls_served() {
    let mock = MockServer::start().await.unwrap();
    mock.push(MockReply::text("Hello.").with_usage(usage(100, 10, 0)));
    let mut settings = ProxySettings::new(mock.base_url());
    settings.prices = prices();
    settings.max_usd = Some(50.0);
    let (base, _proxy, _stop) = start(settings).await;

    let mut other = request(&opening());
    other["model"] = json!("other-model");
    let (status, reply, _) = post(&base, &other).await;
    assert_eq!(status, 400, "{reply}");
    assert_eq!(reply["error"]["type"], "model_not_priced");
    assert_eq!(reply["error"]["param"], "model");
    assert!(upstream_bodies(&mock).is_empty());

    // The positive control: a priced model within the limit is served.
    let (status, reply, _) = post(&base, &request(&opening())).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["choices"][0]["message"]["content"], "Hello.");
}

/// The retail tools the mirror tests use, as a client declares them: the
/// suite's order lookup and retail's own cancel.
fn retail_tools() -> Value {
    let lookup = super::tools()[0].clone();
    assert_eq!(lookup["function"]["name"], "get_order_details");
    json!([
        lookup,
        {"type": "function", "function": {
            "name": "cancel_pending_order",
            "description": "Cancel a pending order.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}, "reason": {"type": "string"}}, "required": ["order_id", "reason"]}
        }}
    ])
}

fn retail() -> Arc<dyn ecdysis_env::Domain> {
    ecdysis_domains::open_with_options("tau2/retail", &Default::default())
        .expect("the τ² data (fetched by the README's set-up command)")
}

/// What τ² retail answers `name(arguments)` on its pristine state.
fn answer(domain: &Arc<dyn ecdysis_env::Domain>, name: &str, arguments: Value) -> String {
    domain.new_env().call(name, &arguments).content
}

/// A delivered order of τ² retail's database.
const DELIVERED: &str = "#W4817420";

/// A conversation where the client cancels a delivered order: the client
/// runs the call and sends the result `cancel_result`; the text of the
/// note the upstream then reads after it, if any, and the record's
/// divergence.
async fn cancel_a_delivered_order(
    mirror: bool,
    lookup_result: Option<&str>,
) -> (Option<String>, Option<String>) {
    let domain = retail();
    let mock = MockServer::start().await.unwrap();
    let lookup = call(
        "c1",
        "get_order_details",
        &json!({"order_id": DELIVERED}).to_string(),
    );
    let cancel = call(
        "c2",
        "cancel_pending_order",
        &json!({"order_id": DELIVERED, "reason": "no longer needed"}).to_string(),
    );
    mock.push(MockReply::tool_calls(None, std::slice::from_ref(&lookup)));
    mock.push(MockReply::tool_calls(None, std::slice::from_ref(&cancel)));
    mock.push(MockReply::text("Done."));
    let mut settings = ProxySettings::new(mock.base_url());
    settings.domain = "tau2/retail".into();
    settings.env_mirror = mirror.then(|| EnvGrant(Arc::clone(&domain)));
    let (base, proxy, _stop) = start(settings).await;

    let body = |messages: &[Value]| json!({"model": "mock-model", "messages": messages, "tools": retail_tools()});
    let mut messages = vec![
        json!({"role": "system", "content": "You are a retail agent."}),
        json!({"role": "user", "content": format!("Please cancel my order {DELIVERED}.")}),
    ];
    let (status, reply, conversation) = post(&base, &body(&messages)).await;
    assert_eq!(status, 200, "{reply}");
    messages.push(reply["choices"][0]["message"].clone());
    let looked_up = answer(&domain, "get_order_details", json!({"order_id": DELIVERED}));
    messages.push(json!({"role": "tool", "tool_call_id": "c1", "content": lookup_result.unwrap_or(&looked_up)}));
    let (status, reply, _) = post(&base, &body(&messages)).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        reply["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "cancel_pending_order",
        "the cancel reaches the client: the API rejects it itself"
    );
    messages.push(reply["choices"][0]["message"].clone());
    let rejected = answer(
        &domain,
        "cancel_pending_order",
        json!({"order_id": DELIVERED, "reason": "no longer needed"}),
    );
    assert!(rejected.starts_with("Error"), "{rejected}");
    messages.push(json!({"role": "tool", "tool_call_id": "c2", "content": rejected}));
    let (status, reply, _) = post(&base, &body(&messages)).await;
    assert_eq!(status, 200, "{reply}");

    let last = upstream_bodies(&mock).pop().unwrap();
    let note = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .find(|c| c.contains("[Runtime harness note]") && c.contains("delivered"))
        .map(str::to_string);
    let diverged = proxy
        .record(conversation.as_deref().unwrap())
        .unwrap()
        .mirror_diverged;
    (note, diverged)
}

#[tokio::test]
async fn a_granted_environment_lets_a_gate_read_facts_and_none_stays_neutral() {
    // With the mirror, the status gate reads the order (delivered) and
    // explains why the cancel failed, after the client's error result.
    let (note, diverged) = cancel_a_delivered_order(true, None).await;
    assert_eq!(diverged, None);
    let note = note.expect("the gate's explanation reaches the upstream");
    assert!(note.contains(DELIVERED), "{note}");
    // Without an environment the same gate cannot read the order.
    let (note, _) = cancel_a_delivered_order(false, None).await;
    assert_eq!(note, None);
}

#[tokio::test]
async fn a_mirror_the_client_contradicts_is_detached_and_says_where() {
    // The client's environment says something the mirror does not: the
    // mirror is detached from that message on, and the gate, which now
    // reads nothing, stays neutral.
    let (note, diverged) = cancel_a_delivered_order(
        true,
        Some(r##"{"order_id": "#W4817420", "status": "pending"}"##),
    )
    .await;
    let diverged = diverged.expect("the divergence is recorded");
    assert!(diverged.contains("messages[3]"), "{diverged}");
    assert!(diverged.contains("get_order_details"), "{diverged}");
    assert_eq!(note, None);
}

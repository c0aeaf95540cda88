//! The OpenAI-compatible client against the in-process mock server, over
//! real HTTP on 127.0.0.1: tool calls, retries (429 + Retry-After, 5xx,
//! timeouts), typed errors, the response cache and its policies, usage and
//! cost accounting, and the per-endpoint concurrency limit.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ecdysis_model::mock::{MockReply, MockServer};
use ecdysis_model::{
    CachePolicy, ChatMessage, ChatModel, ChatRequest, EndpointLimiter, ErrorClass, FunctionTool,
    HttpChatModel, ModelConfig, ModelError, ModelHub, ModelRole, PriceTable, ResponseCache,
    RetryPolicy, SamplingArgs, ToolCall, ToolChoice, Usage, UsageLedger,
};
use serde_json::json;

/// A scratch directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "ecdysis-model-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// Short timeouts and backoffs so failure paths run in milliseconds.
fn config(server: &MockServer, model: &str) -> ModelConfig {
    let mut config = ModelConfig::new(model, server.base_url());
    config.api_key_env = None;
    config.connect_timeout = Duration::from_secs(2);
    config.request_timeout = Duration::from_secs(5);
    config.retry = RetryPolicy {
        max_retries: 3,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(40),
        max_retry_after: Duration::from_secs(5),
    };
    config
}

fn http(config: ModelConfig) -> HttpChatModel {
    HttpChatModel::new(config, &EndpointLimiter::new()).expect("valid config")
}

fn hub(cache: ResponseCache) -> ModelHub {
    ModelHub::new(
        Arc::new(UsageLedger::new(PriceTable::embedded_default())),
        Arc::new(cache),
    )
}

fn request(text: &str) -> ChatRequest {
    ChatRequest::new(vec![
        ChatMessage::system("You are a retail agent."),
        ChatMessage::user(text),
    ])
    .with_sampling(SamplingArgs {
        temperature: Some(0.0),
        ..SamplingArgs::default()
    })
}

#[tokio::test]
async fn tool_calls_are_parsed_and_the_request_is_openai_shaped() {
    let server = MockServer::start().await.unwrap();
    let text = "Looking it up.\n```json\n{\"name\": \"get_order\"}\n```";
    server.push(
        MockReply::tool_calls(
            Some(text),
            &[
                ToolCall::new("call_a", "get_order", r##"{"order_id": "#W1"}"##),
                // Invalid JSON arguments must reach the harness verbatim.
                ToolCall::new("call_b", "refund", "{order_id: W1"),
            ],
        )
        .with_usage(Usage {
            prompt_tokens: 120,
            completion_tokens: 30,
            cached_prompt_tokens: 64,
        }),
    );
    let mut config = config(&server, "test-model");
    config.extra_args.insert("top_k".into(), json!(20));
    let model = http(config).with_api_key(Some("sk-test".into()));
    let tool = FunctionTool::new(
        "get_order",
        "Look up an order.",
        json!({"type": "object", "properties": {"order_id": {"type": "string"}}}),
    );
    let req = request("Where is my order?")
        .with_tools(vec![tool])
        .with_tool_choice(ToolChoice::Auto)
        .with_sampling(SamplingArgs {
            temperature: Some(0.0),
            top_p: Some(1.0),
            seed: Some(7),
            max_tokens: Some(256),
            stop: vec!["###STOP###".into()],
        })
        .with_cache_salt("never sent");

    let response = model.chat(&req).await.unwrap();
    assert_eq!(response.text(), text, "raw text kept next to tool calls");
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall::new("call_a", "get_order", r##"{"order_id": "#W1"}"##),
            ToolCall::new("call_b", "refund", "{order_id: W1"),
        ]
    );
    assert!(response.tool_calls[1].parsed_arguments().is_err());
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        response.usage,
        Some(Usage {
            prompt_tokens: 120,
            completion_tokens: 30,
            cached_prompt_tokens: 64,
        })
    );
    assert_eq!((response.cached, response.attempts), (false, 1));

    let seen = server.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert_eq!(seen[0].header("authorization"), Some("Bearer sk-test"));
    assert_eq!(seen[0].header("content-type"), Some("application/json"));
    let body = seen[0].json().expect("JSON body");
    assert_eq!(body["model"], "test-model");
    assert_eq!(
        body["messages"][1],
        json!({"role": "user", "content": "Where is my order?"})
    );
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["function"]["name"], "get_order");
    assert_eq!(body["tool_choice"], "auto");
    assert_eq!(body["seed"], 7);
    assert_eq!(body["max_tokens"], 256);
    assert_eq!(body["stop"], json!(["###STOP###"]));
    assert_eq!(body["top_k"], 20);
    assert!(body.get("cache_salt").is_none());

    // The turn goes back into the conversation in wire form.
    let echoed = serde_json::to_value(response.to_message()).unwrap();
    assert_eq!(
        echoed["tool_calls"][1]["function"]["arguments"],
        "{order_id: W1"
    );
}

#[tokio::test]
async fn rate_limit_with_retry_after_is_waited_out_then_succeeds() {
    let server = MockServer::start().await.unwrap();
    server.push(MockReply::error(429, "slow down").with_header("Retry-After", "1"));
    server.push(MockReply::text("ok"));
    // Backoff alone would wait ~10 ms; only Retry-After explains a 1 s gap.
    let model = http(config(&server, "m"));
    let start = Instant::now();
    let response = model.chat(&request("hi")).await.unwrap();
    let elapsed = start.elapsed();
    assert_eq!(response.text(), "ok");
    assert_eq!(response.attempts, 2);
    let seen = server.requests();
    assert_eq!(seen.len(), 2);
    let gap = seen[1].received_at - seen[0].received_at;
    assert!(gap >= Duration::from_millis(950), "retried after {gap:?}");
    assert!(elapsed < Duration::from_secs(4), "took {elapsed:?}");
}

#[tokio::test]
async fn server_error_then_success_is_one_fresh_call() {
    let server = MockServer::start().await.unwrap();
    server.push(MockReply::error(500, "boom"));
    server.push(MockReply::error(503, "still booting"));
    server.push(MockReply::text("ok"));
    let hub = hub(ResponseCache::disabled());
    let model = hub
        .http_model(ModelRole::Agent, config(&server, "m"))
        .unwrap();
    let response = model.chat(&request("hi")).await.unwrap();
    assert_eq!(response.text(), "ok");
    assert_eq!(response.attempts, 3);
    assert_eq!(server.request_count(), 3);
    let summary = hub.ledger().summary();
    assert_eq!(summary.total.fresh_calls, 1);
    assert_eq!(summary.total.failed_calls, 0);
    assert_eq!(summary.total.retries, 2);
}

#[tokio::test]
async fn timeouts_exhaust_retries_into_an_infrastructure_error() {
    let server = MockServer::start().await.unwrap();
    server.set_fallback(MockReply::text("too late").with_delay(Duration::from_secs(3)));
    let mut config = config(&server, "m");
    config.request_timeout = Duration::from_millis(200);
    config.retry.max_retries = 2;
    let hub = hub(ResponseCache::disabled());
    let model = hub.http_model(ModelRole::User, config).unwrap();
    let start = Instant::now();
    let error = model.chat(&request("hi")).await.unwrap_err();
    assert!(
        start.elapsed() < Duration::from_millis(2500),
        "{:?}",
        start.elapsed()
    );
    match &error {
        ModelError::RetriesExhausted { attempts, last, .. } => {
            assert_eq!(*attempts, 3);
            assert!(matches!(**last, ModelError::Timeout { .. }), "{last:?}");
        }
        other => panic!("expected RetriesExhausted, got {other:?}"),
    }
    assert!(error.is_infrastructure());
    assert_eq!(server.request_count(), 3);
    let summary = hub.ledger().summary();
    assert_eq!(summary.by_role[&ModelRole::User].infrastructure_failures, 1);
    assert_eq!(summary.by_role[&ModelRole::User].fresh_calls, 0);
}

#[tokio::test]
async fn unreachable_endpoint_is_an_infrastructure_error() {
    // Bind then drop a listener: nothing listens on that port any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = ModelConfig::new("m", format!("http://127.0.0.1:{port}/v1"));
    config.api_key_env = None;
    config.retry = RetryPolicy {
        max_retries: 1,
        initial_backoff: Duration::from_millis(5),
        ..RetryPolicy::default()
    };
    let error = http(config).chat(&request("hi")).await.unwrap_err();
    assert!(error.is_infrastructure(), "{error:?}");
    assert!(
        matches!(&error, ModelError::RetriesExhausted { last, .. } if matches!(**last, ModelError::Connection { .. })),
        "{error:?}"
    );
}

#[tokio::test]
async fn malformed_json_is_a_typed_error_and_not_retried() {
    let server = MockServer::start().await.unwrap();
    server.push(MockReply::raw(200, "{\"choices\": [{\"message\": "));
    server.set_fallback(MockReply::text("a retry would have succeeded"));
    let error = http(config(&server, "m"))
        .chat(&request("hi"))
        .await
        .unwrap_err();
    match &error {
        ModelError::MalformedResponse { body_excerpt, .. } => {
            assert!(body_excerpt.contains("choices"), "{body_excerpt}");
        }
        other => panic!("expected MalformedResponse, got {other:?}"),
    }
    assert!(error.is_infrastructure());
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn client_errors_are_typed_not_retried_and_carry_the_endpoint_message() {
    let server = MockServer::start().await.unwrap();
    server.set_fallback(MockReply::text("a retry would have succeeded"));
    let model = http(config(&server, "m"));

    server.push(MockReply::error(401, "Incorrect API key provided: sk-***"));
    let error = model.chat(&request("hi")).await.unwrap_err();
    assert!(
        matches!(&error, ModelError::Unauthorized { status: 401, message, .. } if message.contains("Incorrect API key")),
        "{error:?}"
    );
    assert_eq!(error.class(), ErrorClass::Request);
    assert!(!error.is_infrastructure());
    assert!(error.to_string().contains("Incorrect API key"));
    assert_eq!(server.request_count(), 1);

    server.push(MockReply::error(
        400,
        "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens.",
    ));
    let error = model.chat(&request("hi")).await.unwrap_err();
    assert!(
        matches!(error, ModelError::ContextLength { .. }),
        "{error:?}"
    );
    assert_eq!(error.class(), ErrorClass::Model);

    server.push(MockReply::error(404, "The model `m` does not exist"));
    let error = model.chat(&request("hi")).await.unwrap_err();
    assert!(matches!(error, ModelError::NotFound { .. }), "{error:?}");
    assert_eq!(error.message(), "The model `m` does not exist");

    server.push(MockReply::error(400, "messages[2]: invalid role"));
    let error = model.chat(&request("hi")).await.unwrap_err();
    assert!(
        matches!(&error, ModelError::BadRequest { status: 400, .. }),
        "{error:?}"
    );
    assert_eq!(server.request_count(), 4, "no retries on 4xx");
}

#[tokio::test]
async fn second_identical_request_is_a_cache_hit() {
    let server = MockServer::start().await.unwrap();
    server.set_handler(|_| {
        MockReply::tool_calls(Some("answer"), &[ToolCall::new("c1", "f", "{}")]).with_usage(Usage {
            prompt_tokens: 100,
            completion_tokens: 20,
            cached_prompt_tokens: 0,
        })
    });
    let dir = TempDir::new("cache-hit");
    let hub = hub(ResponseCache::new(dir.path(), CachePolicy::ReadWrite));
    let model = hub
        .http_model(ModelRole::Agent, config(&server, "m"))
        .unwrap();

    let first = model.chat(&request("hi")).await.unwrap();
    let second = model.chat(&request("hi")).await.unwrap();
    assert!(!first.cached);
    assert!(second.cached);
    assert_eq!(second.attempts, 0);
    assert_eq!(second.text(), first.text());
    assert_eq!(second.tool_calls, first.tool_calls);
    assert_eq!(second.usage, first.usage);
    assert_eq!(
        server.request_count(),
        1,
        "the hit never reached the server"
    );

    let agent = &hub.ledger().summary().by_role[&ModelRole::Agent];
    assert_eq!((agent.fresh_calls, agent.cache_hits), (1, 1));
    assert_eq!(agent.cache_hit_rate, 0.5);
    assert_eq!(agent.fresh_tokens.prompt_tokens, 100);
    assert_eq!(agent.cache_hit_tokens.prompt_tokens, 100);
    assert_eq!(hub.cache().stats().hits, 1);

    // One entry, at <dir>/<aa>/<64 hex>.json, no temp files left.
    let files = files_under(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    let shard = files[0]
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(name.len(), 64 + ".json".len());
    assert!(name.starts_with(&shard) && shard.len() == 2);

    // Anything that changes the request (sampling, salt) is a miss.
    let hotter = request("hi").with_sampling(SamplingArgs {
        temperature: Some(0.7),
        ..SamplingArgs::default()
    });
    assert!(!model.chat(&hotter).await.unwrap().cached);
    assert!(
        !model
            .chat(&request("hi").with_cache_salt("trial-2"))
            .await
            .unwrap()
            .cached
    );
    assert!(
        model
            .chat(&request("hi").with_cache_salt("trial-2"))
            .await
            .unwrap()
            .cached
    );
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn read_only_cache_never_writes_and_off_never_reads() {
    let server = MockServer::start().await.unwrap();
    server.set_handler(|_| MockReply::text("ok"));
    let dir = TempDir::new("cache-ro");

    let read_only = hub(ResponseCache::new(dir.path(), CachePolicy::ReadOnly));
    let model = read_only
        .http_model(ModelRole::Agent, config(&server, "m"))
        .unwrap();
    assert!(!model.chat(&request("hi")).await.unwrap().cached);
    assert!(!model.chat(&request("hi")).await.unwrap().cached);
    assert_eq!(server.request_count(), 2);
    assert!(
        files_under(dir.path()).is_empty(),
        "read-only wrote an entry"
    );
    assert_eq!(read_only.ledger().summary().total.fresh_calls, 2);

    // Fill the cache once, then read-only replays it.
    let writer = hub(ResponseCache::new(dir.path(), CachePolicy::ReadWrite));
    writer
        .http_model(ModelRole::Agent, config(&server, "m"))
        .unwrap()
        .chat(&request("hi"))
        .await
        .unwrap();
    assert_eq!(server.request_count(), 3);
    assert!(model.chat(&request("hi")).await.unwrap().cached);
    assert_eq!(server.request_count(), 3);
    assert_eq!(files_under(dir.path()).len(), 1);

    let off = hub(ResponseCache::new(dir.path(), CachePolicy::Off));
    let model = off
        .http_model(ModelRole::Agent, config(&server, "m"))
        .unwrap();
    assert!(!model.chat(&request("hi")).await.unwrap().cached);
    assert!(!model.chat(&request("other")).await.unwrap().cached);
    assert_eq!(server.request_count(), 5);
    assert_eq!(files_under(dir.path()).len(), 1, "off wrote an entry");
}

#[tokio::test]
async fn corrupt_cache_entry_is_a_miss_and_is_repaired() {
    let server = MockServer::start().await.unwrap();
    server.set_handler(|_| MockReply::text("ok"));
    let dir = TempDir::new("cache-corrupt");
    let hub = hub(ResponseCache::new(dir.path(), CachePolicy::ReadWrite));
    let model = hub
        .http_model(ModelRole::Agent, config(&server, "m"))
        .unwrap();
    model.chat(&request("hi")).await.unwrap();
    let files = files_under(dir.path());
    std::fs::write(&files[0], b"{ truncated").unwrap();
    assert!(!model.chat(&request("hi")).await.unwrap().cached);
    assert!(model.chat(&request("hi")).await.unwrap().cached);
    assert_eq!(server.request_count(), 2);
    assert_eq!(hub.cache().stats().errors, 1);
}

#[tokio::test]
async fn usage_and_cost_come_from_the_price_table_file() {
    let server = MockServer::start().await.unwrap();
    let dir = TempDir::new("prices");
    let prices = dir.path().join("prices.json");
    std::fs::write(
        &prices,
        r#"{"models": {"priced-model": {"prompt_per_mtok": 1.0,
            "completion_per_mtok": 2.0, "cached_prompt_per_mtok": 0.5}}}"#,
    )
    .unwrap();
    let table = PriceTable::embedded_default().merged(PriceTable::load(&prices).unwrap());
    let hub = ModelHub::new(
        Arc::new(UsageLedger::new(table)),
        Arc::new(ResponseCache::disabled()),
    );
    let agent = hub
        .http_model(ModelRole::Agent, config(&server, "priced-model"))
        .unwrap();
    let user = hub
        .http_model(ModelRole::User, config(&server, "free-model"))
        .unwrap();

    server.push(MockReply::text("a").with_usage(Usage {
        prompt_tokens: 1000,
        completion_tokens: 500,
        cached_prompt_tokens: 400,
    }));
    server.push(MockReply::text("b").with_usage(Usage {
        prompt_tokens: 2000,
        completion_tokens: 100,
        cached_prompt_tokens: 0,
    }));
    server.push(MockReply::text("c").with_usage(Usage {
        prompt_tokens: 70,
        completion_tokens: 7,
        cached_prompt_tokens: 0,
    }));
    agent.chat(&request("one")).await.unwrap();
    agent.chat(&request("two")).await.unwrap();
    user.chat(&request("three")).await.unwrap();

    // (600 * 1 + 400 * 0.5 + 500 * 2) / 1e6 + (2000 * 1 + 100 * 2) / 1e6
    let want = 0.0018 + 0.0022;
    let summary = hub.ledger().summary();
    let a = &summary.by_role[&ModelRole::Agent];
    assert_eq!(a.fresh_calls, 2);
    assert_eq!(a.fresh_tokens.prompt_tokens, 3000);
    assert_eq!(a.fresh_tokens.completion_tokens, 600);
    assert_eq!(a.fresh_tokens.cached_prompt_tokens, 400);
    assert!((a.usd - want).abs() < 1e-12, "{}", a.usd);
    let u = &summary.by_role[&ModelRole::User];
    assert_eq!(u.unpriced_fresh_calls, 1);
    assert_eq!(u.usd, 0.0);
    assert!((summary.total.usd - want).abs() < 1e-12);
    assert!(summary.unpriced_models.contains("free-model"));

    let calls = hub.ledger().calls();
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[0].role, ModelRole::Agent);
    assert!((calls[0].usd.unwrap() - 0.0018).abs() < 1e-12);
    assert_eq!(calls[2].usd, None);

    let json = serde_json::to_value(&summary).unwrap();
    assert_eq!(json["by_role"]["agent"]["fresh_calls"], 2);
    assert_eq!(
        json["by_model"]["free-model"]["fresh_tokens"]["prompt_tokens"],
        70
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_limit_is_shared_per_endpoint() {
    let server = MockServer::start().await.unwrap();
    server.set_handler(|_| MockReply::text("ok").with_delay(Duration::from_millis(150)));
    let hub = hub(ResponseCache::disabled());
    let mut limited = config(&server, "m");
    limited.max_concurrency = 2;
    // Two roles, two models, one endpoint: one shared limit.
    let agent = hub.http_model(ModelRole::Agent, limited.clone()).unwrap();
    let mut other = limited;
    other.model = "m2".into();
    let user = hub.http_model(ModelRole::User, other).unwrap();

    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let model = Arc::clone(if i % 2 == 0 { &agent } else { &user });
        tasks.push(tokio::spawn(async move {
            model.chat(&request(&format!("q{i}"))).await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(server.request_count(), 8);
    assert_eq!(server.max_in_flight(), 2, "limit 2, and it was reached");
    // Four waves of two 150 ms requests.
    assert!(
        start.elapsed() >= Duration::from_millis(550),
        "{:?}",
        start.elapsed()
    );
}

/// The endpoint's tokenizer counts a text: llama.cpp's answer (a token
/// list) and vLLM's (a count) both read, at the server's root; a server
/// without the endpoint gives `None`, and so does one that is down.
#[tokio::test]
async fn the_endpoints_tokenizer_counts_where_it_has_one() {
    let server = MockServer::start().await.unwrap();
    server.set_handler(|req| {
        let body = req.json().unwrap_or_default();
        let words = body["content"]
            .as_str()
            .unwrap_or("")
            .split_whitespace()
            .count();
        match req.path.as_str() {
            "/tokenize" if body["model"] == "vllm-like" => {
                MockReply::json(200, json!({"count": words, "max_model_len": 8192}))
            }
            "/tokenize" => MockReply::json(200, json!({"tokens": vec![1; words]})),
            _ => MockReply::json(404, json!({"error": "not found"})),
        }
    });
    let llama = http(config(&server, "llama-like"));
    assert_eq!(llama.count_tokens("one two three").await, Some(3));
    let vllm = http(config(&server, "vllm-like"));
    assert_eq!(vllm.count_tokens("a b c d").await, Some(4));
    let sent = server.requests();
    assert!(sent.iter().all(|r| r.path == "/tokenize"), "{sent:?}");
    assert_eq!(sent[0].json().unwrap()["content"], "one two three");

    let bare = MockServer::start().await.unwrap();
    bare.set_fallback(MockReply::json(404, json!({"error": "no such route"})));
    assert_eq!(http(config(&bare, "m")).count_tokens("x y").await, None);
    let gone = config(&bare, "m");
    drop(bare);
    assert_eq!(http(gone).count_tokens("x y").await, None);
}

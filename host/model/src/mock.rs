//! An in-process OpenAI-compatible server with scripted replies, over real
//! HTTP/1.1 on `127.0.0.1`. For tests of anything that calls a model
//! endpoint: the client's retry/timeout paths, the runner, evolution roles.
//!
//! Replies come, in order of precedence, from the FIFO script
//! ([`MockServer::push`]), the handler ([`MockServer::set_handler`]), the
//! fallback ([`MockServer::set_fallback`]), or else a 500 saying the script
//! ran out (so an unexpected extra request fails loudly). Every request is
//! recorded, and the server tracks how many it was serving at once.
//!
//! [`MockServer::set_capacity`] makes chat requests behave like a server
//! with a fixed number of slots (llama.cpp's `--parallel`, vLLM's batch):
//! a reply's delay is then its service time in a slot, requests beyond the
//! slots wait in a queue, and those beyond the queue are answered 429.
//!
//! HTTP is the service's own stack (axum on hyper). Each connection carries
//! one request and is closed after the reply (`Connection: close`), which
//! keeps a delayed reply from blocking a pooled connection another request
//! wants; [`MockServer::set_keep_alive`] keeps connections open instead, as
//! a model server does (the proxy's bench, whose upstream answers at once).
//!
//! It lives in the model crate, not in the test kit (which re-exports it),
//! because `ecdysis-host bench --proxy` runs it as its upstream.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::{ToolCall, Usage};

/// Largest request body the mock accepts.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// One scripted reply.
#[derive(Debug, Clone, PartialEq)]
pub struct MockReply {
    /// HTTP status code.
    pub status: u16,
    /// Extra response headers (e.g. `Retry-After`).
    pub headers: Vec<(String, String)>,
    /// The response body.
    pub body: MockBody,
    /// Wait this long before replying (timeouts, concurrency tests).
    pub delay: Duration,
}

/// A reply body.
#[derive(Debug, Clone, PartialEq)]
pub enum MockBody {
    /// JSON, serialized compactly.
    Json(Value),
    /// Bytes sent as they are.
    Raw(Vec<u8>),
}

impl MockReply {
    /// Any status with a JSON body.
    pub fn json(status: u16, body: Value) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: MockBody::Json(body),
            delay: Duration::ZERO,
        }
    }

    /// Any status with a raw body (e.g. malformed JSON).
    pub fn raw(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: MockBody::Raw(body.into()),
            delay: Duration::ZERO,
        }
    }

    /// A completion with assistant text, `finish_reason: "stop"` and usage
    /// 10 prompt / 5 completion tokens.
    pub fn text(content: &str) -> Self {
        Self::json(
            200,
            completion_body(
                Some(content),
                &[],
                "stop",
                Usage {
                    prompt_tokens: 10,
                    completion_tokens: 5,
                    cached_prompt_tokens: 0,
                },
            ),
        )
    }

    /// A completion with structured tool calls (and optional text).
    pub fn tool_calls(content: Option<&str>, calls: &[ToolCall]) -> Self {
        Self::json(
            200,
            completion_body(
                content,
                calls,
                "tool_calls",
                Usage {
                    prompt_tokens: 10,
                    completion_tokens: 5,
                    cached_prompt_tokens: 0,
                },
            ),
        )
    }

    /// An OpenAI-style error body `{"error": {"message", "type", "code"}}`.
    pub fn error(status: u16, message: &str) -> Self {
        Self::json(
            status,
            json!({"error": {"message": message, "type": "mock_error", "code": status}}),
        )
    }

    /// Replaces the `usage` of a JSON completion body.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        if let MockBody::Json(Value::Object(body)) = &mut self.body {
            body.insert("usage".into(), usage_json(usage));
        }
        self
    }

    /// Add a response header.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Wait `delay` before replying.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    fn body_bytes(&self) -> Vec<u8> {
        match &self.body {
            MockBody::Json(value) => value.to_string().into_bytes(),
            MockBody::Raw(bytes) => bytes.clone(),
        }
    }
}

/// The JSON of a chat completion, as an OpenAI endpoint sends it.
pub fn completion_body(
    content: Option<&str>,
    calls: &[ToolCall],
    finish_reason: &str,
    usage: Usage,
) -> Value {
    let mut message = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        message["tool_calls"] = serde_json::to_value(calls).unwrap_or(Value::Null);
    }
    json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "model": "mock-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": usage_json(usage),
    })
}

fn usage_json(usage: Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_prompt_tokens},
    })
}

/// A request the mock received.
#[derive(Debug, Clone)]
pub struct MockRequest {
    /// HTTP method (`POST`).
    pub method: String,
    /// Request path (`/v1/chat/completions`).
    pub path: String,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The raw body.
    pub body: Vec<u8>,
    /// When the request was fully read.
    pub received_at: Instant,
}

impl MockRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON, if it is.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

type Handler = Box<dyn Fn(&MockRequest) -> MockReply + Send + Sync>;

#[derive(Default)]
struct MockState {
    script: Mutex<VecDeque<MockReply>>,
    handler: Mutex<Option<Handler>>,
    fallback: Mutex<Option<MockReply>>,
    requests: Mutex<Vec<MockRequest>>,
    received: AtomicUsize,
    not_recording: AtomicBool,
    keep_alive: AtomicBool,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    capacity: Mutex<Option<Capacity>>,
    admitted: AtomicUsize,
    refused: AtomicUsize,
}

/// Slots and a bounded queue for chat requests.
#[derive(Clone)]
struct Capacity {
    slots: Arc<tokio::sync::Semaphore>,
    bound: usize,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl MockState {
    /// Count `request`, and keep it unless recording is off.
    fn record(&self, request: MockRequest) {
        self.received.fetch_add(1, Ordering::SeqCst);
        if !self.not_recording.load(Ordering::Relaxed) {
            lock(&self.requests).push(request);
        }
    }

    fn reply_for(&self, request: &MockRequest) -> MockReply {
        // The script and the fallback are chat replies: a tokenizer request
        // (`POST /tokenize`, which budgets send first) goes to the handler,
        // or is answered as an endpoint without one answers it.
        if request.path.ends_with("/tokenize") {
            return match lock(&self.handler).as_ref() {
                Some(handler) => handler(request),
                None => MockReply::error(404, "mock server: no tokenizer"),
            };
        }
        if let Some(reply) = lock(&self.script).pop_front() {
            return reply;
        }
        if let Some(handler) = lock(&self.handler).as_ref() {
            return handler(request);
        }
        lock(&self.fallback)
            .clone()
            .unwrap_or_else(|| MockReply::error(500, "mock server: script exhausted"))
    }
}

/// Decrements the in-flight count however the request ends.
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The running server; stops when dropped.
pub struct MockServer {
    addr: SocketAddr,
    state: Arc<MockState>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// What every request handler shares.
#[derive(Clone)]
struct Shared {
    state: Arc<MockState>,
    stop: watch::Receiver<bool>,
}

impl MockServer {
    /// Binds `127.0.0.1:0` and serves on the current tokio runtime.
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(MockState::default());
        let (shutdown, stop) = watch::channel(false);
        // The HTTP stack of `serve` (axum on hyper): the mock parses and
        // writes HTTP exactly as the service does, and any path answers.
        let app = axum::Router::new()
            .fallback(handle)
            .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
            .with_state(Shared {
                state: Arc::clone(&state),
                stop: stop.clone(),
            });
        let mut stopped = stop;
        // No Nagle delay on a kept-alive connection's small replies.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stopped.wait_for(|s| *s).await;
            });
            if let Err(error) = serve.await {
                tracing::debug!(%error, "mock server stopped");
            }
        });
        Ok(Self {
            addr,
            state,
            shutdown,
            task,
        })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>/v1`, to use as a model base URL.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Appends a reply to the script.
    pub fn push(&self, reply: MockReply) {
        lock(&self.state.script).push_back(reply);
    }

    /// Computes replies from requests once the script is empty.
    pub fn set_handler(&self, handler: impl Fn(&MockRequest) -> MockReply + Send + Sync + 'static) {
        *lock(&self.state.handler) = Some(Box::new(handler));
    }

    /// The reply once the script is empty and there is no handler.
    pub fn set_fallback(&self, reply: MockReply) {
        *lock(&self.state.fallback) = Some(reply);
    }

    /// Every request received so far, in arrival order (none while
    /// recording is off).
    pub fn requests(&self) -> Vec<MockRequest> {
        lock(&self.state.requests).clone()
    }

    /// Requests received so far (also those not recorded).
    pub fn request_count(&self) -> usize {
        self.state.received.load(Ordering::SeqCst)
    }

    /// Keep requests for [`MockServer::requests`] (the default), or only
    /// count them: a long benchmark's memory stays flat.
    pub fn set_recording(&self, on: bool) {
        self.state.not_recording.store(!on, Ordering::Relaxed);
    }

    /// Keep each connection open for the client's next request (HTTP/1.1
    /// keep-alive) instead of closing it after the reply.
    pub fn set_keep_alive(&self, on: bool) {
        self.state.keep_alive.store(on, Ordering::Relaxed);
    }

    /// The most requests that were being served at the same time.
    pub fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }

    /// Serve chat requests `slots` at a time, each for its reply's delay;
    /// up to `queue` more wait for a slot, and any beyond are answered 429
    /// at once (without `Retry-After`).
    pub fn set_capacity(&self, slots: usize, queue: usize) {
        *lock(&self.state.capacity) = Some(Capacity {
            slots: Arc::new(tokio::sync::Semaphore::new(slots.max(1))),
            bound: slots.max(1) + queue,
        });
    }

    /// Chat requests answered 429 because the slots and the queue were full.
    pub fn refused(&self) -> usize {
        self.state.refused.load(Ordering::SeqCst)
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        self.task.abort();
    }
}

async fn handle(
    axum::extract::State(shared): axum::extract::State<Shared>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> axum::response::Response {
    let request = MockRequest {
        method: method.to_string(),
        path: uri.path().to_owned(),
        headers: headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body.to_vec(),
        received_at: Instant::now(),
    };
    let state = &shared.state;
    let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    let guard = InFlight(&state.in_flight);
    state.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let capacity = lock(&state.capacity)
        .clone()
        .filter(|_| !request.path.ends_with("/tokenize"));
    let Some(capacity) = capacity else {
        let reply = state.reply_for(&request);
        state.record(request);
        serve_for(&reply, &shared).await;
        drop(guard);
        return response(&reply, state);
    };
    if state.admitted.fetch_add(1, Ordering::SeqCst) >= capacity.bound {
        state.admitted.fetch_sub(1, Ordering::SeqCst);
        state.refused.fetch_add(1, Ordering::SeqCst);
        state.record(request);
        drop(guard);
        return response(
            &MockReply::error(429, "mock server: every slot and queue place is taken"),
            state,
        );
    }
    let reply = state.reply_for(&request);
    state.record(request);
    {
        let _slot = capacity.slots.acquire().await;
        serve_for(&reply, &shared).await;
    }
    state.admitted.fetch_sub(1, Ordering::SeqCst);
    // A request stops counting as in flight before its reply is written:
    // the client can act on a reply (and send its next request) before this
    // task gets to run again, which would otherwise be counted as overlap.
    drop(guard);
    response(&reply, state)
}

/// Waits out the reply's delay (cut short when the server stops).
async fn serve_for(reply: &MockReply, shared: &Shared) {
    if !reply.delay.is_zero() {
        let mut stop = shared.stop.clone();
        tokio::select! {
            _ = tokio::time::sleep(reply.delay) => {}
            _ = stop.wait_for(|s| *s) => {}
        }
    }
}

/// The reply as an HTTP response. `Connection: close` unless keep-alive is
/// on: one request per connection, so a delayed reply never holds a
/// connection another request of the client's pool wants.
fn response(reply: &MockReply, state: &MockState) -> axum::response::Response {
    let status = axum::http::StatusCode::from_u16(reply.status)
        .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    let mut builder = axum::http::Response::builder()
        .status(status)
        .header("content-type", "application/json");
    if !state.keep_alive.load(Ordering::Relaxed) {
        builder = builder.header("connection", "close");
    }
    for (name, value) in &reply.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    builder
        .body(axum::body::Body::from(reply.body_bytes()))
        .unwrap_or_else(|e| {
            let mut r = axum::response::Response::new(axum::body::Body::from(e.to_string()));
            *r.status_mut() = axum::http::StatusCode::INTERNAL_SERVER_ERROR;
            r
        })
}

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
//! Each connection carries one request and is closed after the reply
//! (`Connection: close`): simple, and it keeps a delayed reply from blocking
//! a pooled connection another request wants.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use ecdysis_model::{ToolCall, Usage};

/// Largest request head / body the mock accepts.
const MAX_HEAD: usize = 64 * 1024;
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
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl MockState {
    fn reply_for(&self, request: &MockRequest) -> MockReply {
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

/// Decrements the in-flight count however the connection ends.
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

impl MockServer {
    /// Binds `127.0.0.1:0` and serves on the current tokio runtime.
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(MockState::default());
        let (shutdown, stop) = watch::channel(false);
        let task = tokio::spawn(accept_loop(listener, Arc::clone(&state), stop));
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

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<MockRequest> {
        lock(&self.state.requests).clone()
    }

    /// Requests received so far.
    pub fn request_count(&self) -> usize {
        lock(&self.state.requests).len()
    }

    /// The most requests that were being served at the same time.
    pub fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        self.task.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    state: Arc<MockState>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(serve_connection(stream, Arc::clone(&state), stop.clone()));
                }
                Err(error) => tracing::debug!(%error, "mock server accept failed"),
            },
            _ = stop.changed() => return,
        }
    }
}

async fn serve_connection(
    mut stream: TcpStream,
    state: Arc<MockState>,
    mut stop: watch::Receiver<bool>,
) {
    let request = match read_request(&mut stream).await {
        Ok(Some(request)) => request,
        Ok(None) => return,
        Err(message) => {
            let reply = MockReply::error(400, &message);
            let _ = write_reply(&mut stream, &reply).await;
            return;
        }
    };
    let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    let guard = InFlight(&state.in_flight);
    state.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let reply = state.reply_for(&request);
    lock(&state.requests).push(request);
    if !reply.delay.is_zero() {
        tokio::select! {
            _ = tokio::time::sleep(reply.delay) => {}
            _ = stop.changed() => return,
        }
    }
    // A request stops counting as in flight before its reply is written:
    // the client can act on a reply (and send its next request) before this
    // task gets to run again, which would otherwise be counted as overlap.
    drop(guard);
    // The client may have given up (timeout); that is not the mock's error.
    let _ = write_reply(&mut stream, &reply).await;
}

/// Reads one HTTP/1.1 request with a `Content-Length` body. `Ok(None)`: the
/// peer closed without sending one.
async fn read_request(stream: &mut TcpStream) -> Result<Option<MockRequest>, String> {
    let mut buffer = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(pos) = find(&buffer, b"\r\n\r\n") {
            break pos;
        }
        if buffer.len() > MAX_HEAD {
            return Err("request head too large".into());
        }
        let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return if buffer.is_empty() {
                Ok(None)
            } else {
                Err("connection closed inside the request head".into())
            };
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut start = lines.next().unwrap_or_default().split_whitespace();
    let method = start.next().unwrap_or_default().to_owned();
    let path = start.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map(|(_, v)| {
            v.parse::<usize>()
                .map_err(|_| "bad content-length".to_owned())
        })
        .transpose()?
        .unwrap_or(0);
    if length > MAX_BODY {
        return Err("request body too large".into());
    }
    let mut body = buffer[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed inside the body".into());
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(length);
    Ok(Some(MockRequest {
        method,
        path,
        headers,
        body,
        received_at: Instant::now(),
    }))
}

async fn write_reply(stream: &mut TcpStream, reply: &MockReply) -> std::io::Result<()> {
    let body = reply.body_bytes();
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reason(reply.status),
        body.len()
    );
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(&body).await?;
    stream.flush().await?;
    stream.shutdown().await
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

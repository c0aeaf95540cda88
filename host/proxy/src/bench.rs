//! `ecdysis-host bench --proxy`: what the proxy adds to a request, next to
//! a direct call to the same upstream and, when given, LiteLLM's proxy
//! forwarding to it with no harness.
//!
//! The upstream is the scripted OpenAI-compatible server of
//! [`ecdysis_model::mock`], in process, answering at once (no model): a
//! conversation's first request gets a `get_order_details` tool call, the
//! request that carries its result gets a text answer. Every side (the
//! upstream called directly, the proxy with each harness given, LiteLLM)
//! runs the same conversations from the same client, one side at a time:
//! each round measures every side in turn (A, B, A, B …), never two at
//! once. Latency is measured one request at a time; throughput with
//! [`ProxyBenchOptions::concurrency`] conversations at once. What a side
//! adds is its latency percentile minus the direct call's: the proxy's own
//! work and its extra loopback hop, not a model's.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};

use ecdysis_model::ToolCall;
use ecdysis_model::mock::{MockReply, MockRequest, MockServer};
use ecdysis_sandbox::sandbox::LoadedHarness;

use crate::{Proxy, ProxyError, ProxySettings};

/// What the proxy bench runs.
#[derive(Debug, Clone)]
pub struct ProxyBenchOptions {
    /// Rounds; each measures every side once, in turn.
    pub rounds: usize,
    /// Conversations (two requests each) per side and round for latency,
    /// one request at a time.
    pub conversations: usize,
    /// Conversations at once for throughput.
    pub concurrency: usize,
    /// Conversations per side and round for throughput.
    pub throughput_conversations: usize,
    /// Conversations per side before the first round, not counted.
    pub warmup: usize,
    /// LiteLLM's `litellm` executable (from `litellm[proxy]`); `None`: not
    /// measured.
    pub litellm: Option<PathBuf>,
    /// How long LiteLLM may take to answer its readiness check.
    pub litellm_start_timeout: Duration,
}

impl Default for ProxyBenchOptions {
    fn default() -> Self {
        ProxyBenchOptions {
            rounds: 5,
            conversations: 200,
            concurrency: 32,
            throughput_conversations: 1000,
            warmup: 20,
            litellm: None,
            litellm_start_timeout: Duration::from_secs(180),
        }
    }
}

/// A harness to put in the proxy, with the name the report gives it.
#[derive(Clone)]
pub struct BenchHarness {
    /// How the report names it (e.g. `harness-template 1a2b3c4d`).
    pub name: String,
    /// The loaded harness.
    pub harness: LoadedHarness,
}

/// Why the bench could not run.
#[derive(Debug, thiserror::Error)]
pub enum ProxyBenchError {
    /// The scripted upstream or a proxy could not listen on loopback.
    #[error("cannot listen on loopback: {0}")]
    Listen(std::io::Error),
    /// LiteLLM's configuration could not be written, or its process not
    /// watched.
    #[error("cannot run LiteLLM's proxy: {0}")]
    LitellmIo(std::io::Error),
    /// A proxy could not be built.
    #[error("cannot start the proxy: {0}")]
    Proxy(#[from] ProxyError),
    /// The bench's HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    /// The `litellm` executable could not be started.
    #[error("cannot start LiteLLM's proxy `{}`: {reason}", path.display())]
    LitellmSpawn {
        /// The executable given.
        path: PathBuf,
        /// The operating system's error.
        reason: String,
    },
    /// LiteLLM started but never answered its readiness check.
    #[error("LiteLLM's proxy `{}` did not become ready: {reason}; its last output:\n{output}", path.display())]
    LitellmNotReady {
        /// The executable given.
        path: PathBuf,
        /// It exited (with its status), or the time ran out.
        reason: String,
        /// The end of what it printed.
        output: String,
    },
    /// A side answered none of its warm-up requests: measuring it would
    /// time errors.
    #[error("{side} answered no warm-up request: {reason}")]
    SideFailed {
        /// The side.
        side: String,
        /// The first failure.
        reason: String,
    },
}

/// One side's numbers, over every round.
#[derive(Debug, Clone, Serialize)]
pub struct SideReport {
    /// `direct`, `proxy (<harness>)` or `litellm`.
    pub name: String,
    /// Latency requests sent (one at a time).
    pub requests: usize,
    /// Of them, answered 200 with the scripted reply's shape (a tool call
    /// for a conversation's first request, text for its second).
    pub succeeded: usize,
    /// Median latency, in microseconds.
    pub p50_us: f64,
    /// 99th percentile latency, in microseconds.
    pub p99_us: f64,
    /// `p50_us` minus the direct call's (`None` for the direct side).
    pub added_p50_us: Option<f64>,
    /// `p99_us` minus the direct call's.
    pub added_p99_us: Option<f64>,
    /// Throughput requests sent, at the bench's concurrency.
    pub throughput_requests: usize,
    /// Of them, answered as expected.
    pub throughput_succeeded: usize,
    /// Answered requests per second of the throughput phases' wall time.
    pub requests_per_second: f64,
    /// The first failure seen, if any.
    pub first_failure: Option<String>,
}

/// Whether LiteLLM was measured.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum LitellmStatus {
    /// Measured: the executable and its package's version.
    Measured {
        /// The executable.
        executable: PathBuf,
        /// The `litellm` package's version, as the Python beside the
        /// executable reports it.
        version: Option<String>,
    },
    /// Not measured, and why.
    NotMeasured {
        /// Why.
        reason: String,
    },
}

/// The bench's report.
#[derive(Debug, Clone, Serialize)]
pub struct ProxyBenchReport {
    /// Rounds run.
    pub rounds: usize,
    /// Latency conversations per side and round.
    pub conversations: usize,
    /// Requests per conversation.
    pub requests_per_conversation: usize,
    /// Conversations at once in the throughput phases.
    pub concurrency: usize,
    /// Throughput conversations per side and round.
    pub throughput_conversations: usize,
    /// The sides, the direct call first.
    pub sides: Vec<SideReport>,
    /// LiteLLM's side.
    pub litellm: LitellmStatus,
    /// Requests the scripted upstream answered (warm-up included).
    pub upstream_requests: usize,
    /// `/proc/loadavg`'s 1, 5 and 15 minute averages before the bench.
    pub load_before: Option<[f64; 3]>,
    /// The same after it.
    pub load_after: Option<[f64; 3]>,
}

impl ProxyBenchReport {
    /// The side named `name`.
    pub fn side(&self, name: &str) -> Option<&SideReport> {
        self.sides.iter().find(|s| s.name == name)
    }

    /// Whether every request of every side was answered as expected.
    pub fn all_succeeded(&self) -> bool {
        self.sides
            .iter()
            .all(|s| s.succeeded == s.requests && s.throughput_succeeded == s.throughput_requests)
    }

    /// The text `bench --proxy` prints.
    pub fn render(&self) -> String {
        let load = |l: &Option<[f64; 3]>| match l {
            Some([a, b, c]) => format!("{a:.2} {b:.2} {c:.2}"),
            None => "unknown".into(),
        };
        let mut out = format!(
            "proxy bench: a scripted upstream answering at once (no model): the proxy's own overhead\n\
             {} rounds, sides alternated (never two at once); latency: {} conversations x {} requests per side and round, one at a time; \
             throughput: {} conversations per side and round, {} at once\n\
             load average before {}, after {}\n\n",
            self.rounds,
            self.conversations,
            self.requests_per_conversation,
            self.throughput_conversations,
            self.concurrency,
            load(&self.load_before),
            load(&self.load_after),
        );
        out += "side                                     ok/requests       p50 us    p99 us   added p50 us  added p99 us   req/s (ok/requests)\n";
        let direct = self.sides.first();
        for s in &self.sides {
            let added = |a: Option<f64>| a.map_or_else(|| "-".to_string(), |a| format!("{a:.0}"));
            out += &format!(
                "{:<40} {:>6}/{:<6}  {:>9.0} {:>9.0}  {:>12} {:>13}   {:>7.0} ({}/{})\n",
                s.name,
                s.succeeded,
                s.requests,
                s.p50_us,
                s.p99_us,
                added(s.added_p50_us),
                added(s.added_p99_us),
                s.requests_per_second,
                s.throughput_succeeded,
                s.throughput_requests,
            );
        }
        if let Some(d) = direct {
            out += "\nratios to the direct call (latency p50, p99; throughput):\n";
            for s in self.sides.iter().skip(1) {
                out += &format!(
                    "  {:<38} {:.2}x  {:.2}x  {:.2}x\n",
                    s.name,
                    s.p50_us / d.p50_us.max(1e-9),
                    s.p99_us / d.p99_us.max(1e-9),
                    s.requests_per_second / d.requests_per_second.max(1e-9),
                );
            }
        }
        match &self.litellm {
            LitellmStatus::Measured {
                executable,
                version,
            } => {
                out += &format!(
                    "\nLiteLLM {} ({}), no harness:\n",
                    version.as_deref().unwrap_or("(version unknown)"),
                    executable.display()
                );
                if let Some(l) = self.side(LITELLM) {
                    for s in self.sides.iter().filter(|s| s.name.starts_with("proxy")) {
                        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
                            (Some(a), Some(b)) if b.abs() > 1e-9 => format!("{:.2}x", a / b),
                            _ => "-".into(),
                        };
                        out += &format!(
                            "  {:<38} adds {} of LiteLLM's p50, {} of its p99; {:.2}x its req/s\n",
                            s.name,
                            ratio(s.added_p50_us, l.added_p50_us),
                            ratio(s.added_p99_us, l.added_p99_us),
                            s.requests_per_second / l.requests_per_second.max(1e-9),
                        );
                    }
                }
            }
            LitellmStatus::NotMeasured { reason } => {
                out += &format!("\nLiteLLM not measured: {reason}\n");
            }
        }
        for s in self.sides.iter().filter(|s| s.first_failure.is_some()) {
            out += &format!(
                "{}: first failure: {}\n",
                s.name,
                s.first_failure.as_deref().unwrap_or_default()
            );
        }
        out
    }
}

/// The direct side's name.
pub const DIRECT: &str = "direct";
/// LiteLLM's side's name.
pub const LITELLM: &str = "litellm";

/// The model name every request asks for (the upstream ignores it;
/// LiteLLM routes it).
const MODEL: &str = "mock-model";

/// The scripted upstream's answer: a tool call to a conversation's first
/// request, text once the call's result is back.
fn scripted_reply(request: &MockRequest) -> MockReply {
    let last_is_tool = request
        .json()
        .and_then(|b| {
            b.get("messages")
                .and_then(Value::as_array)
                .and_then(|m| m.last().cloned())
        })
        .is_some_and(|m| m.get("role").and_then(Value::as_str) == Some("tool"));
    if last_is_tool {
        MockReply::text("Your order #W1234567 has shipped and arrives on Friday.")
    } else {
        MockReply::tool_calls(
            None,
            &[ToolCall {
                id: "call_bench_1".into(),
                name: "get_order_details".into(),
                arguments: r##"{"order_id":"#W1234567"}"##.into(),
            }],
        )
    }
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

/// One side's target.
struct Side {
    name: String,
    url: String,
}

/// Why one request of a bench conversation failed, with what the target
/// answered.
#[derive(Debug, thiserror::Error)]
enum RequestFailed {
    /// The request body could not be encoded.
    #[error("encoding the request: {0}")]
    Encode(serde_json::Error),
    /// The request could not be sent.
    #[error("request failed: {0}")]
    Send(reqwest::Error),
    /// The reply's body could not be read.
    #[error("reading the reply failed: {0}")]
    Read(reqwest::Error),
    /// The target answered an error status (the body's start).
    #[error("status {status}: {body}")]
    Status {
        /// The status.
        status: reqwest::StatusCode,
        /// Its first 300 bytes.
        body: String,
    },
    /// The reply is not JSON.
    #[error("the reply is not JSON: {0}")]
    NotJson(serde_json::Error),
    /// The reply has no message.
    #[error("the reply has no choices[0].message")]
    NoMessage,
    /// The reply's message is not the scripted shape.
    #[error("expected {expected}, got {message}")]
    Shape {
        /// `a tool call` or `text`.
        expected: &'static str,
        /// The message.
        message: Value,
    },
    /// The conversation's first request failed, so its second was not
    /// sent (the first's error).
    #[error("not sent: {0}")]
    NotSent(String),
    /// The client task running it panicked or was cancelled.
    #[error("a client task failed: {0}")]
    Task(tokio::task::JoinError),
}

/// What one request took, or why it failed.
type Timed = Result<Duration, RequestFailed>;

/// Run conversation `n` against `url`: its two requests, each timed.
async fn conversation(client: &reqwest::Client, url: &str, n: u64) -> [Timed; 2] {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a helpful customer service agent. Use the tools to look orders up."}),
        json!({"role": "user", "content": format!("Where is my order #W1234567? (conversation {n})")}),
    ];
    let first = post(client, url, &messages, true).await;
    let (t1, message) = match first {
        Ok(x) => x,
        Err(e) => {
            let second = RequestFailed::NotSent(e.to_string());
            return [Err(e), Err(second)];
        }
    };
    let ids: Vec<String> = message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["id"].as_str().map(str::to_string))
        .collect();
    messages.push(message);
    for id in ids {
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": "{\"status\": \"shipped\", \"eta\": \"Friday\"}"}));
    }
    let second = post(client, url, &messages, false).await.map(|(t, _)| t);
    [Ok(t1), second]
}

/// Post one request; its latency (to the whole body) and the reply's
/// message, checked for the scripted shape.
async fn post(
    client: &reqwest::Client,
    url: &str,
    messages: &[Value],
    expect_call: bool,
) -> Result<(Duration, Value), RequestFailed> {
    let body = serde_json::to_vec(
        &json!({"model": MODEL, "messages": messages, "tools": tools(), "temperature": 0}),
    )
    .map_err(RequestFailed::Encode)?;
    let start = Instant::now();
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(RequestFailed::Send)?;
    let status = response.status();
    let bytes = response.bytes().await.map_err(RequestFailed::Read)?;
    let took = start.elapsed();
    if !status.is_success() {
        return Err(RequestFailed::Status {
            status,
            body: String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned(),
        });
    }
    let reply: Value = serde_json::from_slice(&bytes).map_err(RequestFailed::NotJson)?;
    let message = reply
        .pointer("/choices/0/message")
        .cloned()
        .ok_or(RequestFailed::NoMessage)?;
    let has_call = message["tool_calls"]
        .as_array()
        .is_some_and(|c| !c.is_empty());
    if has_call != expect_call {
        return Err(RequestFailed::Shape {
            expected: if expect_call { "a tool call" } else { "text" },
            message,
        });
    }
    Ok((took, message))
}

#[derive(Default)]
struct Tally {
    latencies: Vec<Duration>,
    requests: usize,
    succeeded: usize,
    throughput_requests: usize,
    throughput_succeeded: usize,
    throughput_wall: Duration,
    first_failure: Option<String>,
}

impl Tally {
    fn count(&mut self, timed: Timed, latency: bool) {
        if latency {
            self.requests += 1;
        } else {
            self.throughput_requests += 1;
        }
        match timed {
            Ok(d) => {
                if latency {
                    self.succeeded += 1;
                    self.latencies.push(d);
                } else {
                    self.throughput_succeeded += 1;
                }
            }
            Err(e) => {
                self.first_failure.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

/// The `q` quantile (nearest rank) of sorted `v`, in microseconds.
fn quantile_us(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1e6
}

/// `/proc/loadavg`'s three averages.
pub fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = text.split_whitespace().map(|x| x.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// A running LiteLLM proxy, killed (its whole process group) when
/// dropped.
struct Litellm {
    child: std::process::Child,
    _dir: TempDir,
    url: String,
}

impl Drop for Litellm {
    fn drop(&mut self) {
        ecdysis_sys::process::kill_group(self.child.id());
        let _ = self.child.wait();
    }
}

/// The version of the `litellm` package beside `executable` (a venv's
/// `bin/`), asked of the venv's Python.
fn litellm_version(executable: &Path) -> Option<String> {
    let python = executable.parent()?.join("python");
    let out = std::process::Command::new(python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('litellm'))",
        ])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !version.is_empty()).then_some(version)
}

/// A scratch directory removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn free_port() -> std::io::Result<u16> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    Ok(l.local_addr()?.port())
}

/// The last `n` characters of a file.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let skip = text.chars().count().saturating_sub(n);
    text.chars().skip(skip).collect()
}

/// Start `litellm` forwarding [`MODEL`] to `upstream`, and wait until its
/// readiness check answers.
async fn start_litellm(
    path: &Path,
    upstream: &str,
    client: &reqwest::Client,
    timeout: Duration,
) -> Result<Litellm, ProxyBenchError> {
    let io = ProxyBenchError::LitellmIo;
    let port = free_port().map_err(ProxyBenchError::Listen)?;
    let dir = std::env::temp_dir().join(format!(
        "ecdysis-bench-litellm-{}-{port}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).map_err(io)?;
    let dir = TempDir(dir);
    let config = dir.0.join("config.yaml");
    // A bare forward: no database, no callbacks, no retries, and no client
    // key (the proxy's side checks none either; both listen on loopback).
    std::fs::write(
        &config,
        format!(
            "model_list:\n  - model_name: {MODEL}\n    litellm_params:\n      model: openai/{MODEL}\n      api_base: {upstream}\n      api_key: unused\n\
             litellm_settings:\n  num_retries: 0\n  telemetry: false\n  drop_params: true\n\
             general_settings:\n  dangerously_permit_weak_or_unset_master_key: true\n"
        ),
    )
    .map_err(io)?;
    let log = dir.0.join("litellm.log");
    let log_path = log.clone();
    let out = std::fs::File::create(&log).map_err(io)?;
    let err = out.try_clone().map_err(io)?;
    let spawn_error = |e: std::io::Error| ProxyBenchError::LitellmSpawn {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let mut command = std::process::Command::new(path);
    // Its own process group, so that dropping it stops whatever it started.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let child = command
        .arg("--config")
        .arg(&config)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--num_workers", "1"])
        .env("LITELLM_LOG", "ERROR")
        .env("LITELLM_TELEMETRY", "False")
        .env("NO_DOCS", "True")
        .env_remove("DATABASE_URL")
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(spawn_error)?;
    let mut litellm = Litellm {
        child,
        _dir: dir,
        url: String::new(),
    };
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + timeout;
    let not_ready = |reason: String| ProxyBenchError::LitellmNotReady {
        path: path.to_path_buf(),
        reason,
        output: tail(&log_path, 2000),
    };
    loop {
        if let Some(status) = litellm.child.try_wait().map_err(io)? {
            return Err(not_ready(format!("it exited ({status})")));
        }
        if let Ok(r) = client
            .get(format!("{base}/health/readiness"))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            && r.status().is_success()
        {
            litellm.url = format!("{base}/v1/chat/completions");
            return Ok(litellm);
        }
        if Instant::now() > deadline {
            return Err(not_ready(format!(
                "no answer on {base}/health/readiness within {} s",
                timeout.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Serve `harness` as a proxy in front of `upstream` on a loopback port.
async fn start_proxy(
    harness: LoadedHarness,
    upstream: &str,
    concurrency: usize,
) -> Result<(SocketAddr, tokio::sync::oneshot::Sender<()>), ProxyBenchError> {
    let mut settings = ProxySettings::new(upstream);
    settings.max_conversations = settings.max_conversations.max(concurrency * 2);
    settings.warm_episodes = settings.warm_episodes.max(concurrency * 4);
    let proxy = Proxy::new(harness, settings)?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(ProxyBenchError::Listen)?;
    let addr = listener.local_addr().map_err(ProxyBenchError::Listen)?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = proxy
            .serve(listener, async move {
                let _ = stopped.await;
            })
            .await;
    });
    Ok((addr, stop))
}

/// Run the bench with `harnesses` in the proxy.
pub async fn run(
    harnesses: &[BenchHarness],
    opts: &ProxyBenchOptions,
) -> Result<ProxyBenchReport, ProxyBenchError> {
    let load_before = load_average();
    let upstream = MockServer::start().await.map_err(ProxyBenchError::Listen)?;
    upstream.set_keep_alive(true);
    upstream.set_recording(false);
    upstream.set_handler(scripted_reply);
    let upstream_url = upstream.base_url();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(opts.concurrency.max(1) * 2)
        .timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| ProxyBenchError::Client(e.to_string()))?;

    let mut sides = vec![Side {
        name: DIRECT.into(),
        url: format!("{upstream_url}/chat/completions"),
    }];
    let mut stops = Vec::new();
    for h in harnesses {
        let (addr, stop) = start_proxy(h.harness.clone(), &upstream_url, opts.concurrency).await?;
        stops.push(stop);
        sides.push(Side {
            name: format!("proxy ({})", h.name),
            url: format!("http://{addr}/v1/chat/completions"),
        });
    }
    let (litellm, litellm_status) = match &opts.litellm {
        Some(path) => {
            let l = start_litellm(path, &upstream_url, &client, opts.litellm_start_timeout).await?;
            let status = LitellmStatus::Measured {
                executable: path.clone(),
                version: litellm_version(path),
            };
            sides.push(Side {
                name: LITELLM.into(),
                url: l.url.clone(),
            });
            (Some(l), status)
        }
        None => (
            None,
            LitellmStatus::NotMeasured {
                reason:
                    "no LiteLLM executable given (--litellm; scripts/litellm-proxy.sh installs one)"
                        .into(),
            },
        ),
    };

    // Conversation numbers never repeat, so no two conversations share a
    // history (the proxy would take one's warm episode for the other's).
    let next = Arc::new(AtomicUsize::new(0));
    for side in &sides {
        let mut first_error = None;
        let mut ok = 0;
        for _ in 0..opts.warmup.max(1) {
            let n = next.fetch_add(1, Ordering::Relaxed) as u64;
            for t in conversation(&client, &side.url, n).await {
                match t {
                    Ok(_) => ok += 1,
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        if ok == 0 {
            return Err(ProxyBenchError::SideFailed {
                side: side.name.clone(),
                reason: first_error.map(|e| e.to_string()).unwrap_or_default(),
            });
        }
    }

    let mut tallies: Vec<Tally> = sides.iter().map(|_| Tally::default()).collect();
    for _ in 0..opts.rounds {
        for (side, tally) in sides.iter().zip(tallies.iter_mut()) {
            for _ in 0..opts.conversations {
                let n = next.fetch_add(1, Ordering::Relaxed) as u64;
                for t in conversation(&client, &side.url, n).await {
                    tally.count(t, true);
                }
            }
        }
        for (side, tally) in sides.iter().zip(tallies.iter_mut()) {
            let left = Arc::new(AtomicUsize::new(opts.throughput_conversations));
            let start = Instant::now();
            let mut workers = tokio::task::JoinSet::new();
            for _ in 0..opts.concurrency.max(1) {
                let (client, url, left, next) = (
                    client.clone(),
                    side.url.clone(),
                    Arc::clone(&left),
                    Arc::clone(&next),
                );
                workers.spawn(async move {
                    let mut out = Vec::new();
                    while left
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(1))
                        .is_ok()
                    {
                        let n = next.fetch_add(1, Ordering::Relaxed) as u64;
                        out.extend(conversation(&client, &url, n).await);
                    }
                    out
                });
            }
            let mut results = Vec::new();
            while let Some(r) = workers.join_next().await {
                match r {
                    Ok(timed) => results.extend(timed),
                    Err(e) => results.push(Err(RequestFailed::Task(e))),
                }
            }
            tally.throughput_wall += start.elapsed();
            for t in results {
                tally.count(t, false);
            }
        }
    }
    drop(litellm);
    drop(stops);

    let mut reports: Vec<SideReport> = Vec::new();
    for (side, mut tally) in sides.into_iter().zip(tallies) {
        tally.latencies.sort_unstable();
        let p50 = quantile_us(&tally.latencies, 0.5);
        let p99 = quantile_us(&tally.latencies, 0.99);
        let direct = reports.first().map(|d| (d.p50_us, d.p99_us));
        reports.push(SideReport {
            added_p50_us: direct.map(|(d50, _)| p50 - d50),
            added_p99_us: direct.map(|(_, d99)| p99 - d99),
            name: side.name,
            requests: tally.requests,
            succeeded: tally.succeeded,
            p50_us: p50,
            p99_us: p99,
            throughput_requests: tally.throughput_requests,
            throughput_succeeded: tally.throughput_succeeded,
            requests_per_second: tally.throughput_succeeded as f64
                / tally.throughput_wall.as_secs_f64().max(1e-9),
            first_failure: tally.first_failure,
        });
    }
    Ok(ProxyBenchReport {
        rounds: opts.rounds,
        conversations: opts.conversations,
        requests_per_conversation: 2,
        concurrency: opts.concurrency,
        throughput_conversations: opts.throughput_conversations,
        sides: reports,
        litellm: litellm_status,
        upstream_requests: upstream.request_count(),
        load_before,
        load_after: load_average(),
    })
}

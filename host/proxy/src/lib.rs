//! `ecdysis-host proxy`: an OpenAI-compatible Chat Completions endpoint that
//! runs a harness between any agent and its model.
//!
//! The client talks to the proxy as to its model. For each request the
//! proxy finds the conversation's harness episode (warm, or rebuilt by
//! replaying the hooks over the request's history, see [`conversation`]),
//! sends the upstream the history as the harness shapes it (the contract's
//! system prompt and tool descriptions, skills, regulation's notes), puts
//! the upstream's reply through `realize`, and answers the client with the
//! realized reply. Blocked replies are asked again upstream, at most
//! [`ProxySettings::max_retries`] times per request.
//!
//! What replay cannot see from the client's history (the replies the proxy
//! refused and retried, within one request) is kept in the conversation's
//! [`ConversationRecord`] in memory; the upstream reads a retried exchange
//! only in the request that retried it, so a later request's upstream
//! messages are a function of its history alone, and a restarted proxy
//! sends the same bytes upstream. Notes (skills, regulation) are re-derived
//! by the replay: the harness is deterministic (no clock or randomness but
//! the host's frozen, seeded ones).
//!
//! It uses the runner's episode pieces, the sandbox, the model and the
//! contract; never training, the report, the service or the CLI.

pub mod bench;
pub mod conversation;
pub mod error;
pub mod ledger;
pub mod records;
pub mod request;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use ecdysis_runner::agent::HookRecord;
use ecdysis_sandbox::sandbox::{FailurePolicy, LoadedHarness};

use conversation::{Episode, EpisodeSettings, Retry, Turn};
pub use error::ProxyError;
use request::{ChatRequest, Msg, prefix_hashes};

/// The header a client may name its conversation with.
pub const CONVERSATION_HEADER: &str = "x-ecdysis-conversation";

/// The proxy's settings.
#[derive(Debug, Clone)]
pub struct ProxySettings {
    /// The upstream's base URL, e.g. `http://127.0.0.1:8080/v1`.
    pub upstream: String,
    /// Sent upstream as `Authorization: Bearer`, when given; the client's
    /// own `Authorization` is never forwarded.
    pub upstream_api_key: Option<String>,
    /// The episodes' domain (`--domain`).
    pub domain: String,
    /// The episodes' step limit, as the harness is told it.
    pub max_steps: u32,
    /// The episodes' tool-error limit, as the harness is told it.
    pub max_errors: u32,
    /// Largest client body, in bytes (larger: 413).
    pub max_request_bytes: usize,
    /// Requests served at once (more: 429).
    pub max_conversations: usize,
    /// Episodes kept warm (least recently used dropped first).
    pub warm_episodes: usize,
    /// Upstream tries after a blocked reply, per request.
    pub max_retries: u32,
    /// How long one upstream request may take (longer: 504).
    pub upstream_timeout: Duration,
    /// What a failed hook does.
    pub policy: FailurePolicy,
    /// How long a connection may take to send each request's head (longer:
    /// closed), so idle or trickling sockets cannot hold the proxy's
    /// descriptors.
    pub header_timeout: Duration,
    /// Connections open at once (more: closed at once).
    pub max_connections: usize,
    /// A directory where each answered request is appended, as one JSON
    /// line ([`RequestRecord`]), to its conversation's file
    /// `<conversation>.jsonl`: the records outlive the process. The proxy
    /// writes the directory's [`records::Manifest`] when it starts.
    pub records_dir: Option<std::path::PathBuf>,
    /// The harness's hash, for the records' manifest.
    pub harness: Option<String>,
    /// The keys clients must send as `Authorization: Bearer`; `None` lets
    /// every client in (the proxy listens on loopback by default).
    pub api_keys: Option<Vec<String>>,
    /// Prices of the upstream's models, by the requests' `model` (the
    /// embedded table, `sim:*` at zero, when not given).
    pub prices: ecdysis_model::PriceTable,
    /// USD the upstream calls may cost over the ledger's life (with
    /// `records_dir`, earlier processes' calls count); over it: 429
    /// `insufficient_quota`.
    pub max_usd: Option<f64>,
    /// An environment the operator granted (`--env-mirror`): each
    /// conversation's env view reads a mirror of it (see
    /// [`conversation`]); `None`: no environment is attached.
    pub env_mirror: Option<EnvGrant>,
}

/// A domain whose environment the harness's env view may read, mirrored
/// per conversation.
#[derive(Clone)]
pub struct EnvGrant(pub Arc<dyn ecdysis_env::Domain>);

impl std::fmt::Debug for EnvGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("EnvGrant").field(&self.0.name()).finish()
    }
}

impl ProxySettings {
    /// The defaults, for `upstream`.
    pub fn new(upstream: impl Into<String>) -> Self {
        ProxySettings {
            upstream: upstream.into(),
            upstream_api_key: None,
            domain: DEFAULT_DOMAIN.into(),
            max_steps: 200,
            max_errors: 50,
            max_request_bytes: 8 << 20,
            max_conversations: 64,
            warm_episodes: 256,
            max_retries: 3,
            upstream_timeout: Duration::from_secs(300),
            policy: FailurePolicy::FailClosed,
            api_keys: None,
            header_timeout: Duration::from_secs(30),
            max_connections: 1024,
            records_dir: None,
            harness: None,
            prices: ecdysis_model::PriceTable::embedded_default(),
            max_usd: None,
            env_mirror: None,
        }
    }
}

/// Hook calls a conversation's record keeps (the oldest are dropped).
pub const MAX_RECORDED_HOOKS: usize = 4096;

/// The domain of episodes without `--domain`: no benchmark's rules apply.
pub const DEFAULT_DOMAIN: &str = "proxy/generic";

/// What the proxy remembers of a conversation beyond its history.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ConversationRecord {
    /// Requests answered.
    pub requests: u64,
    /// Requests whose episode was rebuilt by replay (not warm).
    pub replays: u64,
    /// Upstream replies the harness refused and asked again about, oldest
    /// first, with the request (1-based) they belong to.
    pub retries: Vec<(u64, Retry)>,
    /// Requests that ran out of retries.
    pub exhausted: u64,
    /// Upstream completions asked for (retries included).
    pub upstream_requests: u64,
    /// Prompt tokens of those completions, as the upstream counted them.
    pub prompt_tokens: u64,
    /// Completion tokens of those completions, as the upstream counted
    /// them (the refused replies' too: the upstream charged them).
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, those the upstream served from its prefix cache.
    pub cached_prompt_tokens: u64,
    /// USD of those completions at the price table's price for their
    /// model (zero for an unpriced one: see the ledger's unpriced calls).
    pub usd: f64,
    /// With a granted environment, why its mirror was detached, once it
    /// was (as of the last request).
    pub mirror_diverged: Option<String>,
    /// The hook calls of the answered requests' live turns, the last
    /// [`MAX_RECORDED_HOOKS`] (replayed calls are not repeated here).
    pub hooks: Vec<HookRecord>,
}

/// One answered request, as `--records` writes it.
#[derive(Debug, Clone, Serialize)]
pub struct RequestRecord<'a> {
    /// The conversation's id.
    pub conversation: &'a str,
    /// The request's number in this process's record of the conversation.
    pub request: u64,
    /// Whether the episode was rebuilt by replay.
    pub replayed: bool,
    /// Replies refused and asked again about.
    pub retries: &'a [Retry],
    /// Whether the retries ran out.
    pub exhausted: bool,
    /// Upstream completions asked for.
    pub upstream_requests: u64,
    /// Their prompt tokens.
    pub prompt_tokens: u64,
    /// Their completion tokens.
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, those served from the upstream's prefix cache.
    pub cached_prompt_tokens: u64,
    /// USD of the completions at their model's price; `None` when the
    /// price table has no price for it.
    pub usd: Option<f64>,
    /// Every hook call the request made, in order: with `replayed`, first
    /// those that rebuilt the episode (the constructor, `contract`, and the
    /// replay of the history), then the live turn's.
    pub hooks: &'a [HookRecord],
    /// With a granted environment, why its mirror was detached (the
    /// message whose result it did not reproduce), once it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mirror_diverged: Option<String>,
    /// How many of `hooks` (the first ones) rebuilt the episode by replay;
    /// the rest are the request's own: regulation after the tool results
    /// the client sent back, and realize on the upstream's replies.
    pub replayed_hooks: usize,
}

/// The file name of a conversation's records: its id when that is a plain
/// name (the hash ids always are), else the id's hash, so a client's header
/// never names a path.
fn record_file(conversation: &str) -> String {
    let plain = !conversation.is_empty()
        && conversation.len() <= 128
        && conversation
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if plain {
        format!("{conversation}.jsonl")
    } else {
        format!(
            "{}.jsonl",
            &blake3::hash(conversation.as_bytes()).to_hex()[..32]
        )
    }
}

struct Warm {
    tick: u64,
    episode: Episode,
}

/// Records by conversation, each with the tick it was last used at.
type Records = HashMap<String, (u64, ConversationRecord)>;

struct Inner {
    harness: LoadedHarness,
    settings: ProxySettings,
    client: reqwest::Client,
    gate: Arc<Semaphore>,
    warm: Mutex<(u64, HashMap<[u8; 32], Warm>)>,
    records: Mutex<(u64, Records)>,
    ledger: ledger::ProxyLedger,
}

/// A proxy: cheap to clone, one per listening address.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Keep at most `cap` entries of `map`, dropping the least recently used.
fn evict<K: Clone + Eq + std::hash::Hash, V>(
    map: &mut HashMap<K, V>,
    cap: usize,
    tick: impl Fn(&V) -> u64,
) {
    while map.len() > cap {
        let Some(oldest) = map
            .iter()
            .min_by_key(|(_, v)| tick(v))
            .map(|(k, _)| k.clone())
        else {
            break;
        };
        map.remove(&oldest);
    }
}

impl Proxy {
    /// A proxy running `harness` in front of `settings.upstream`.
    pub fn new(harness: LoadedHarness, settings: ProxySettings) -> Result<Self, ProxyError> {
        let client = reqwest::Client::builder()
            .timeout(settings.upstream_timeout)
            .build()
            .map_err(|e| ProxyError::UpstreamUnreachable(e.to_string()))?;
        if let Some(dir) = &settings.records_dir {
            let manifest = records::Manifest {
                format: records::FORMAT.into(),
                harness: settings.harness.clone(),
                domain: settings.domain.clone(),
                upstream: settings.upstream.clone(),
                max_retries: settings.max_retries,
                max_usd: settings.max_usd,
                env_mirror: settings.env_mirror.as_ref().map(|g| g.0.name().to_string()),
            };
            records::write_manifest(dir, &manifest).map_err(|e| ProxyError::RecordsUnwritable {
                dir: dir.clone(),
                reason: e.to_string(),
            })?;
        }
        let ledger = ledger::ProxyLedger::open(
            settings.prices.clone(),
            settings.max_usd,
            settings.records_dir.as_deref(),
        )
        .map_err(|e| ProxyError::RecordsUnreadable(e.to_string()))?;
        Ok(Proxy {
            inner: Arc::new(Inner {
                ledger,
                harness,
                gate: Arc::new(Semaphore::new(settings.max_conversations)),
                settings,
                client,
                warm: Mutex::new((0, HashMap::new())),
                records: Mutex::new((0, HashMap::new())),
            }),
        })
    }

    /// The HTTP routes: `POST /v1/chat/completions`, `GET /v1/models`, and
    /// `GET /ecdysis/conversations/{id}` (the conversation's record).
    pub fn router(&self) -> axum::Router {
        axum::Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/models", get(models))
            .route("/ecdysis/conversations/{id}", get(record))
            .route("/ecdysis/usage", get(usage))
            .layer(axum::extract::DefaultBodyLimit::disable())
            .with_state(self.clone())
    }

    /// Serve on `listener` until `shutdown` resolves: each connection must
    /// send each request head within [`ProxySettings::header_timeout`], and
    /// beyond [`ProxySettings::max_connections`] a new one is closed at
    /// once.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let app = self.router();
        let settings = &self.inner.settings;
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(settings.header_timeout);
        let open = Arc::new(Semaphore::new(settings.max_connections));
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                () = &mut shutdown => return Ok(()),
                a = listener.accept() => a,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of descriptors, typically: retrying at once would
                    // spin on the same error while connections close.
                    tracing::warn!(%error, "proxy: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(permit) = Arc::clone(&open).try_acquire_owned() else {
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            let conn = builder.serve_connection(
                hyper_util::rt::TokioIo::new(stream),
                hyper_util::service::TowerToHyperService::new(app.clone()),
            );
            tokio::spawn(async move {
                if let Err(error) = conn.await {
                    tracing::debug!(%error, "proxy: connection ended");
                }
                drop(permit);
            });
        }
    }

    /// The usage ledger's totals over every upstream call so far (earlier
    /// processes' on the same records included).
    pub fn usage(&self) -> ecdysis_model::LedgerSummary {
        self.inner.ledger.summary()
    }

    /// The record of conversation `id`, if the proxy has one.
    pub fn record(&self, id: &str) -> Option<ConversationRecord> {
        lock(&self.inner.records).1.get(id).map(|(_, r)| r.clone())
    }

    fn update_record(&self, id: &str, f: impl FnOnce(&mut ConversationRecord)) {
        let mut guard = lock(&self.inner.records);
        let (tick, map) = &mut *guard;
        *tick += 1;
        let now = *tick;
        let entry = map.entry(id.to_string()).or_default();
        entry.0 = now;
        f(&mut entry.1);
        evict(map, self.inner.settings.warm_episodes, |(t, _)| *t);
    }

    fn take_warm(&self, hashes: &[[u8; 32]]) -> Option<Episode> {
        let mut guard = lock(&self.inner.warm);
        // The longest prefix of the history that a warm episode has seen.
        hashes
            .iter()
            .rev()
            .find_map(|h| guard.1.remove(h))
            .map(|w| w.episode)
    }

    /// A new episode for `request`. Warm episodes hold harness instances:
    /// when a pooled sandbox has none left, the least recently used warm
    /// episodes give theirs back (they can be replayed) until one starts.
    async fn start_episode(&self, request: &ChatRequest) -> Result<Episode, ProxyError> {
        let settings = &self.inner.settings;
        loop {
            let started = Episode::start(
                &self.inner.harness,
                &EpisodeSettings::from(settings),
                request,
                settings.policy,
                settings.env_mirror.as_ref().map(|g| &g.0),
            )
            .await;
            match started {
                Err(ProxyError::Unavailable(why)) => {
                    let mut guard = lock(&self.inner.warm);
                    let map = &mut guard.1;
                    let oldest = map.iter().min_by_key(|(_, w)| w.tick).map(|(k, _)| *k);
                    match oldest {
                        Some(k) => drop(map.remove(&k)),
                        None => return Err(ProxyError::Unavailable(why)),
                    }
                }
                other => return other,
            }
        }
    }

    fn keep_warm(&self, key: [u8; 32], episode: Episode) {
        let mut guard = lock(&self.inner.warm);
        let (tick, map) = &mut *guard;
        *tick += 1;
        map.insert(
            key,
            Warm {
                tick: *tick,
                episode,
            },
        );
        evict(map, self.inner.settings.warm_episodes, |w| w.tick);
    }

    /// Answer one request: the realized turn and the upstream's last reply
    /// (for its id, model and usage).
    async fn complete(
        &self,
        request: &ChatRequest,
        conversation: &str,
    ) -> Result<(Turn, Value), ProxyError> {
        let settings = &self.inner.settings;
        let tools_hash = request.tools_hash();
        let hashes = prefix_hashes(conversation, tools_hash, &request.messages);
        let (mut episode, replayed) = match self.take_warm(&hashes) {
            Some(e) => (e, false),
            None => (self.start_episode(request).await?, true),
        };
        // A warm episode's earlier calls are in earlier records; a rebuilt
        // one's are all this request's (the replay's counted apart).
        let first_new = if replayed {
            0
        } else {
            episode.hook_records().len()
        };
        episode.advance(request).await?;
        let hooks_before = episode.hook_records().len();
        let request_no = lock(&self.inner.records)
            .1
            .get(conversation)
            .map_or(0, |(_, r)| r.requests)
            + 1;
        let mut retries: Vec<Retry> = Vec::new();
        let model = request
            .body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut usage = Spent::default();
        let mut exhausted = false;
        let mut neutral_turn = true;
        let (turn, reply) = if let Some(turn) = episode.decided_turn() {
            (turn, json!({}))
        } else {
            let mut extra: Vec<Value> = Vec::new();
            loop {
                let body = self.upstream_body(&episode, request, &extra);
                let reply = self.metered_upstream(model, body).await?;
                usage.add(&reply.1);
                let reply = reply.0;
                let (text, calls) = reply_message(&reply)?;
                let (outcome, neutral) = episode.realize_reply(text.clone(), calls).await?;
                neutral_turn &= neutral;
                match outcome {
                    Ok(turn) => break (turn, reply),
                    Err(retry) if (retries.len() as u32) < settings.max_retries => {
                        extra.extend(retry.messages.iter().cloned());
                        retries.push(retry);
                    }
                    Err(retry) => {
                        // Out of tries: the reply's text, else the last
                        // feedback, ends the turn; no call is returned.
                        exhausted = true;
                        let text = text
                            .filter(|t| !t.trim().is_empty())
                            .or_else(|| retry.feedback.last().cloned());
                        retries.push(retry);
                        break (
                            Turn {
                                text,
                                calls: vec![],
                                stopped: false,
                            },
                            reply,
                        );
                    }
                }
            }
        };
        let live_hooks = episode.hook_records()[hooks_before..].to_vec();
        let mirror_diverged = episode.mirror_diverged();
        let stopped = turn.stopped;
        if let Some(dir) = &settings.records_dir {
            let line = serde_json::to_string(&RequestRecord {
                conversation,
                request: request_no,
                replayed,
                retries: &retries,
                exhausted,
                upstream_requests: usage.calls,
                prompt_tokens: usage.tokens.prompt_tokens,
                completion_tokens: usage.tokens.completion_tokens,
                cached_prompt_tokens: usage.tokens.cached_prompt_tokens,
                usd: usage.usd,
                mirror_diverged: mirror_diverged.clone(),
                hooks: &episode.hook_records()[first_new..],
                replayed_hooks: if replayed { hooks_before } else { 0 },
            })
            .unwrap_or_default();
            let path = dir.join(record_file(conversation));
            let written = tokio::task::spawn_blocking(move || append_line(&path, &line)).await;
            if let Err(error) = written.map_err(std::io::Error::other).and_then(|r| r) {
                // The client's answer does not depend on the audit file:
                // a full disk is logged, not turned into a failed request.
                tracing::warn!(%error, "proxy: the request's record was not written");
            }
        }
        self.update_record(conversation, |r| {
            r.requests = request_no;
            r.replays += u64::from(replayed);
            r.exhausted += u64::from(exhausted);
            r.upstream_requests += usage.calls;
            r.prompt_tokens += usage.tokens.prompt_tokens;
            r.completion_tokens += usage.tokens.completion_tokens;
            r.cached_prompt_tokens += usage.tokens.cached_prompt_tokens;
            r.usd += usage.usd.unwrap_or(0.0);
            r.mirror_diverged = mirror_diverged;
            r.retries
                .extend(retries.iter().cloned().map(|x| (request_no, x)));
            r.hooks.extend(live_hooks);
            let over = r.hooks.len().saturating_sub(MAX_RECORDED_HOOKS);
            r.hooks.drain(..over);
        });
        // Kept warm only when a replay of the history the client sends
        // next would make the same hook calls (see `conversation`).
        if neutral_turn && retries.is_empty() && !stopped {
            episode.absorb(&turn);
            let next = Msg::Assistant {
                text: turn.text.clone().filter(|t| !t.is_empty()),
                calls: turn.calls.clone(),
            };
            let key = request::chain(hashes.last().unwrap_or(&[0; 32]), &next);
            self.keep_warm(key, episode);
        }
        Ok((turn, reply))
    }

    /// The upstream's request body: the client's, with the messages and
    /// tools the harness shaped, and never streaming (realize needs the
    /// whole reply).
    fn upstream_body(&self, episode: &Episode, request: &ChatRequest, extra: &[Value]) -> Vec<u8> {
        // The client's fields in the client's order, the history shaped
        // (not copied first and replaced), no streaming fields.
        let mut body = serde_json::Map::with_capacity(request.body.len());
        for (k, v) in &request.body {
            let v = match k.as_str() {
                "stream" | "stream_options" => continue,
                "messages" => Value::Array(episode.upstream_messages(request, extra)),
                "tools" if !v.is_null() => episode.upstream_tools(v),
                _ => v.clone(),
            };
            body.insert(k.clone(), v);
        }
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// Ask the upstream, through the ledger: refused before it is sent
    /// when the spending limit cannot afford it, recorded (priced, or as a
    /// failure) when it ends.
    async fn metered_upstream(
        &self,
        model: &str,
        bytes: Vec<u8>,
    ) -> Result<(Value, ledger::CallCost), ProxyError> {
        let ledger = &self.inner.ledger;
        let _reservation = ledger.admit(model, &bytes)?;
        let start = std::time::Instant::now();
        match self.ask_upstream(bytes).await {
            Ok(reply) => {
                let cost = ledger.answered(model, &reply, start.elapsed());
                Ok((reply, cost))
            }
            Err(error) => {
                ledger.failed(model, &error, start.elapsed());
                Err(error)
            }
        }
    }

    async fn ask_upstream(&self, bytes: Vec<u8>) -> Result<Value, ProxyError> {
        let url = format!(
            "{}/chat/completions",
            self.inner.settings.upstream.trim_end_matches('/')
        );
        let (status, text) = self.send(self.post(&url).body(bytes)).await?;
        if !status.is_success() {
            return Err(ProxyError::UpstreamStatus {
                status: status.as_u16(),
                body: text,
            });
        }
        serde_json::from_str(&text).map_err(|e| ProxyError::UpstreamInvalid(e.to_string()))
    }

    fn post(&self, url: &str) -> reqwest::RequestBuilder {
        let builder = self
            .inner
            .client
            .post(url)
            .header(header::CONTENT_TYPE, "application/json");
        self.authorize(builder)
    }

    fn authorize(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.inner.settings.upstream_api_key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }

    async fn send(
        &self,
        builder: reqwest::RequestBuilder,
    ) -> Result<(reqwest::StatusCode, String), ProxyError> {
        let upstream_error = |e: reqwest::Error| {
            if e.is_timeout() {
                ProxyError::UpstreamTimeout
            } else {
                ProxyError::UpstreamUnreachable(e.to_string())
            }
        };
        let response = builder.send().await.map_err(upstream_error)?;
        let status = response.status();
        let text = response.text().await.map_err(upstream_error)?;
        Ok((status, text))
    }
}

/// What one request's upstream completions cost.
#[derive(Debug, Default)]
struct Spent {
    calls: u64,
    tokens: ecdysis_model::TokenCounts,
    /// `None` once a completion had no price.
    usd: Option<f64>,
}

impl Spent {
    fn add(&mut self, cost: &ledger::CallCost) {
        let priced_so_far = self.calls == 0 || self.usd.is_some();
        self.calls += 1;
        self.tokens.prompt_tokens += cost.usage.prompt_tokens;
        self.tokens.completion_tokens += cost.usage.completion_tokens;
        self.tokens.cached_prompt_tokens += cost.usage.cached_prompt_tokens;
        self.usd = match (priced_so_far, cost.usd) {
            (true, Some(usd)) => Some(self.usd.unwrap_or(0.0) + usd),
            _ => None,
        };
    }
}

pub(crate) fn append_line(path: &std::path::Path, line: &str) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    // One write per line, so concurrent requests of one conversation do
    // not interleave within a line.
    file.write_all(format!("{line}\n").as_bytes())
}

/// The text and calls of an upstream completion's first choice.
fn reply_message(reply: &Value) -> Result<(Option<String>, Vec<request::Call>), ProxyError> {
    let Some(message) = reply
        .pointer("/choices/0/message")
        .and_then(Value::as_object)
    else {
        return Err(ProxyError::UpstreamInvalid(
            "no choices[0].message object".into(),
        ));
    };
    let text = message
        .get("content")
        .and_then(Value::as_str)
        .map(str::to_string);
    let mut calls = Vec::new();
    for (k, call) in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let name = call.pointer("/function/name").and_then(Value::as_str);
        let Some(name) = name else {
            return Err(ProxyError::UpstreamInvalid(format!(
                "tool_calls[{k}] has no function name"
            )));
        };
        calls.push(request::Call {
            id: call
                .get("id")
                .and_then(Value::as_str)
                .map_or_else(|| format!("call_{k}"), str::to_string),
            name: name.to_string(),
            arguments: call
                .pointer("/function/arguments")
                .and_then(Value::as_str)
                .unwrap_or("{}")
                .to_string(),
        });
    }
    Ok((text, calls))
}

/// The client's completion: the upstream's envelope (id, model, usage)
/// around the realized message.
fn completion(turn: &Turn, reply: &Value, model: &str) -> Value {
    let mut message = json!({"role": "assistant", "content": turn.text});
    if !turn.calls.is_empty() {
        message["tool_calls"] =
            Value::Array(turn.calls.iter().map(request::Call::to_wire).collect());
    }
    // A plain reply keeps the upstream's reason (`length` says the text
    // was cut); a reply with calls, whatever made them, ends for them.
    let upstream_finish = reply
        .pointer("/choices/0/finish_reason")
        .and_then(Value::as_str)
        .filter(|f| *f != "tool_calls");
    let finish = match (turn.calls.is_empty(), upstream_finish) {
        (false, _) => "tool_calls",
        (true, Some(f)) if !turn.stopped => f,
        (true, _) => "stop",
    };
    let mut out = json!({
        "id": reply.get("id").cloned().unwrap_or_else(|| json!("chatcmpl-ecdysis")),
        "object": "chat.completion",
        "created": reply.get("created").cloned().unwrap_or_else(|| json!(0)),
        "model": reply.get("model").cloned().unwrap_or_else(|| json!(model)),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    });
    if let Some(usage) = reply.get("usage") {
        out["usage"] = usage.clone();
    }
    out
}

/// The same completion as server-sent events: the reply is complete (and
/// realized) before the first event, so the events carry it whole: a role
/// chunk, the text, one chunk per call, the finish, the usage when asked,
/// then `[DONE]`.
fn event_stream(full: &Value, include_usage: bool) -> String {
    let envelope = |choices: Value| {
        json!({
            "id": full["id"],
            "object": "chat.completion.chunk",
            "created": full["created"],
            "model": full["model"],
            "choices": choices,
        })
    };
    let message = &full["choices"][0]["message"];
    let mut chunks = vec![envelope(
        json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]),
    )];
    if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
        chunks.push(envelope(
            json!([{"index": 0, "delta": {"content": text}, "finish_reason": null}]),
        ));
    }
    for (k, call) in message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let mut call = call.clone();
        call["index"] = json!(k);
        chunks.push(envelope(
            json!([{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": null}]),
        ));
    }
    chunks.push(envelope(
        json!([{"index": 0, "delta": {}, "finish_reason": full["choices"][0]["finish_reason"]}]),
    ));
    if include_usage && let Some(usage) = full.get("usage") {
        let mut last = envelope(json!([]));
        last["usage"] = usage.clone();
        chunks.push(last);
    }
    let mut out = String::new();
    for c in chunks {
        out.push_str("data: ");
        out.push_str(&c.to_string());
        out.push_str("\n\n");
    }
    out.push_str("data: [DONE]\n\n");
    out
}

impl Proxy {
    /// Whether `headers` carry one of the client keys (always, without
    /// keys).
    fn admits(&self, headers: &HeaderMap) -> Result<(), ProxyError> {
        let Some(keys) = &self.inner.settings.api_keys else {
            return Ok(());
        };
        let sent = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        match sent {
            Some(key) if keys.iter().any(|k| k == key) => Ok(()),
            _ => Err(ProxyError::Unauthorized),
        }
    }
}

async fn chat(State(proxy): State<Proxy>, headers: HeaderMap, body: Body) -> Response {
    if let Err(e) = proxy.admits(&headers) {
        return e.into_response();
    }
    match chat_inner(&proxy, &headers, body).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn chat_inner(
    proxy: &Proxy,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ProxyError> {
    let settings = &proxy.inner.settings;
    let limit = settings.max_request_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ProxyError::TooLarge { limit });
    }
    let _permit = Arc::clone(&proxy.inner.gate)
        .try_acquire_owned()
        .map_err(|_| ProxyError::Busy {
            limit: settings.max_conversations,
        })?;
    let bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| ProxyError::TooLarge { limit })?;
    let request = ChatRequest::parse(&bytes)?;
    let explicit = headers
        .get(CONVERSATION_HEADER)
        .and_then(|v| v.to_str().ok());
    let conversation = request.conversation_id(explicit);
    let (turn, reply) = proxy.complete(&request, &conversation).await?;
    let model = request
        .body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let full = completion(&turn, &reply, model);
    let mut response = if request.stream {
        let mut r = (StatusCode::OK, event_stream(&full, request.include_usage)).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        r
    } else {
        (StatusCode::OK, axum::Json(full)).into_response()
    };
    if let Ok(v) = HeaderValue::from_str(&conversation) {
        response.headers_mut().insert(CONVERSATION_HEADER, v);
    }
    Ok(response)
}

async fn models(State(proxy): State<Proxy>, headers: HeaderMap) -> Response {
    if let Err(e) = proxy.admits(&headers) {
        return e.into_response();
    }
    let url = format!(
        "{}/models",
        proxy.inner.settings.upstream.trim_end_matches('/')
    );
    let builder = proxy.authorize(proxy.inner.client.get(url));
    match proxy.send(builder).await {
        Ok((status, text)) => {
            let status = StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut r = (status, text).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        }
        Err(e) => e.into_response(),
    }
}

async fn usage(State(proxy): State<Proxy>, headers: HeaderMap) -> Response {
    if let Err(e) = proxy.admits(&headers) {
        return e.into_response();
    }
    axum::Json(json!({
        "max_usd": proxy.inner.ledger.limit(),
        "summary": proxy.usage(),
    }))
    .into_response()
}

async fn record(
    State(proxy): State<Proxy>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(e) = proxy.admits(&headers) {
        return e.into_response();
    }
    match proxy.record(&id) {
        Some(r) => axum::Json(r).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": {"message": format!("no conversation `{id}`"), "type": "not_found", "param": null}})),
        )
            .into_response(),
    }
}

/// Bind `addr` (loopback unless the operator says otherwise) and serve
/// until `shutdown`; `on_bound` hears the bound address first.
pub async fn listen(
    proxy: Proxy,
    addr: SocketAddr,
    on_bound: impl FnOnce(SocketAddr),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    on_bound(listener.local_addr()?);
    proxy.serve(listener, shutdown).await
}

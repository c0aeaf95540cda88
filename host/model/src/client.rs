//! The HTTP implementation of [`ChatModel`] for OpenAI-compatible endpoints.

use std::collections::HashMap;
use std::error::Error as _;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;
use tokio::sync::Semaphore;
use tracing::{debug, warn};

use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::retry::retry_after_secs;
use crate::signals::CallSignals;
use crate::types::{ChatModel, ChatRequest, ChatResponse, ModelFuture};
use crate::wire::{build_body, classify_status, error_message_from_body, parse_response};

/// One semaphore per endpoint (normalized base URL), shared by every model
/// that talks to it: an endpoint's capacity is a property of the server, not
/// of the role asking. The first registration fixes the limit.
#[derive(Debug, Clone, Default)]
pub struct EndpointLimiter {
    semaphores: Arc<Mutex<HashMap<String, Limit>>>,
    signals: Arc<CallSignals>,
}

/// The limit an endpoint was registered with, and its semaphore.
type Limit = (usize, Arc<Semaphore>);

impl EndpointLimiter {
    /// A limiter with no endpoints registered yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The process-wide limiter, for callers that build models without a
    /// [`crate::ModelHub`].
    pub fn global() -> &'static EndpointLimiter {
        static GLOBAL: OnceLock<EndpointLimiter> = OnceLock::new();
        GLOBAL.get_or_init(EndpointLimiter::new)
    }

    /// The semaphore for `endpoint`, created with `limit` permits if new.
    pub fn semaphore(&self, endpoint: &str, limit: usize) -> Arc<Semaphore> {
        let mut map = self
            .semaphores
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (existing, semaphore) = map
            .entry(endpoint.to_owned())
            .or_insert_with(|| (limit, Arc::new(Semaphore::new(limit.max(1)))));
        if *existing != limit {
            warn!(
                endpoint,
                kept = *existing,
                requested = limit,
                "endpoint already has a concurrency limit; keeping the first"
            );
        }
        Arc::clone(semaphore)
    }

    /// What every attempt of the models sharing this limiter ended in (an
    /// adaptive episode limit reads it).
    pub fn signals(&self) -> &Arc<CallSignals> {
        &self.signals
    }
}

/// A [`ChatModel`] served over `/chat/completions`.
///
/// Each call holds one endpoint permit per HTTP attempt (released while
/// backing off, so a retrying call does not starve the others).
#[derive(Debug, Clone)]
pub struct HttpChatModel {
    config: ModelConfig,
    url: String,
    client: reqwest::Client,
    api_key: Option<String>,
    permits: Arc<Semaphore>,
    signals: Arc<CallSignals>,
}

impl HttpChatModel {
    /// Builds the client; the API key is read from `config.api_key_env` now.
    pub fn new(config: ModelConfig, limiter: &EndpointLimiter) -> Result<Self, ModelError> {
        config.validate()?;
        let base = config.normalized_base_url()?;
        let url = config.chat_completions_url()?;
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            .build()
            .map_err(|e| ModelError::Config(format!("cannot build HTTP client: {e}")))?;
        let permits = limiter.semaphore(&base, config.max_concurrency);
        let signals = Arc::clone(limiter.signals());
        let api_key = config.api_key();
        if api_key.is_none() {
            debug!(
                endpoint = %url,
                var = ?config.api_key_env,
                "no API key; sending no Authorization header"
            );
        }
        Ok(Self {
            config,
            url,
            client,
            api_key,
            permits,
            signals,
        })
    }

    /// Overrides the key read from the environment (`None`: send none).
    pub fn with_api_key(mut self, api_key: Option<String>) -> Self {
        self.api_key = api_key;
        self
    }

    /// How this model is reached.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The URL requests are POSTed to.
    pub fn url(&self) -> &str {
        &self.url
    }

    async fn call(&self, request: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let body = build_body(&self.config.model, request, &self.config.extra_args)
            .and_then(|value| serde_json::to_vec(&value))
            .map_err(|e| ModelError::Config(format!("cannot encode the request: {e}")))?;
        let policy = &self.config.retry;
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let result = {
                let _permit = self.permits.acquire().await.map_err(|_| {
                    ModelError::Config("endpoint concurrency limiter closed".into())
                })?;
                let started = std::time::Instant::now();
                let result = self.attempt(&body).await;
                self.signals
                    .record(started.elapsed(), result.as_ref().map(|_| ()));
                result
            };
            match result {
                Ok(mut response) => {
                    response.attempts = attempt;
                    return Ok(response);
                }
                Err(error) if error.is_retryable() && attempt <= policy.max_retries => {
                    let wait = policy.delay(attempt - 1, &error);
                    warn!(
                        endpoint = %self.url,
                        attempt,
                        wait_ms = wait.as_millis() as u64,
                        %error,
                        "model call failed; retrying"
                    );
                    tokio::time::sleep(wait).await;
                }
                Err(error) if error.is_retryable() => {
                    warn!(endpoint = %self.url, attempt, %error, "model call failed; giving up");
                    return Err(ModelError::RetriesExhausted {
                        endpoint: self.url.clone(),
                        attempts: attempt,
                        last: Box::new(error),
                    });
                }
                Err(error) => {
                    warn!(endpoint = %self.url, attempt, %error, "model call rejected");
                    return Err(error);
                }
            }
        }
    }

    /// One HTTP round trip.
    async fn attempt(&self, body: &[u8]) -> Result<ChatResponse, ModelError> {
        let mut builder = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_vec());
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key);
        }
        let response = builder.send().await.map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        let retry_after = retry_after_secs(response.headers());
        let bytes = response
            .bytes()
            .await
            .map_err(|e| self.transport_error(&e))?;
        debug!(endpoint = %self.url, status = status.as_u16(), bytes = bytes.len(), "model reply");
        if status.is_success() {
            parse_response(&self.url, &bytes)
        } else {
            Err(classify_status(
                &self.url,
                status.as_u16(),
                error_message_from_body(&bytes),
                retry_after,
            ))
        }
    }

    /// Timeouts, refused connections, resets: all retryable infrastructure.
    fn transport_error(&self, error: &reqwest::Error) -> ModelError {
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        let endpoint = self.url.clone();
        if error.is_timeout() {
            ModelError::Timeout {
                endpoint,
                message: format!(
                    "{message} (connect timeout {:?}, request timeout {:?})",
                    self.config.connect_timeout, self.config.request_timeout
                ),
            }
        } else {
            ModelError::Connection { endpoint, message }
        }
    }
}

impl ChatModel for HttpChatModel {
    fn name(&self) -> &str {
        &self.config.model
    }

    /// The exact wire body: model, messages, tools, tool_choice, sampling
    /// and extra args. The base URL is deliberately not part of it, so the
    /// same model moved to another host keeps its cache.
    fn fingerprint(&self, request: &ChatRequest) -> Value {
        build_body(&self.config.model, request, &self.config.extra_args).unwrap_or(Value::Null)
    }

    fn chat<'a>(&'a self, request: &'a ChatRequest) -> ModelFuture<'a> {
        Box::pin(self.call(request))
    }

    fn count_tokens<'a>(&'a self, text: &'a str) -> crate::CountFuture<'a> {
        Box::pin(self.tokenize(text))
    }
}

impl HttpChatModel {
    /// `POST <server root>/tokenize`: llama.cpp reads `content` and answers
    /// `tokens`; vLLM reads `model` and `prompt` and answers `count` (and
    /// `tokens`). One body carries all three so either server answers.
    async fn tokenize(&self, text: &str) -> Option<usize> {
        let root = self
            .url
            .trim_end_matches("/chat/completions")
            .trim_end_matches("/v1");
        let url = format!("{root}/tokenize");
        let body = serde_json::json!({
            "content": text,
            "prompt": text,
            "model": self.config.model,
            "add_special": false,
            "add_special_tokens": false,
        });
        let mut builder = self.client.post(&url).json(&body);
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key);
        }
        let response = builder.send().await.ok()?;
        if !response.status().is_success() {
            debug!(endpoint = %url, status = response.status().as_u16(), "no tokenizer endpoint");
            return None;
        }
        let v: Value = response.json().await.ok()?;
        v.get("count")
            .and_then(Value::as_u64)
            .map(|n| n as usize)
            .or_else(|| v.get("tokens").and_then(Value::as_array).map(Vec::len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiter_shares_per_endpoint_and_keeps_first_limit() {
        let limiter = EndpointLimiter::new();
        let a = limiter.semaphore("http://h/v1", 2);
        let b = limiter.semaphore("http://h/v1", 5);
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(b.available_permits(), 2);
        let c = limiter.semaphore("http://other/v1", 3);
        assert_eq!(c.available_permits(), 3);
    }

    #[test]
    fn rejects_invalid_config() {
        let config = ModelConfig::new("m", "not a url");
        assert!(matches!(
            HttpChatModel::new(config, &EndpointLimiter::new()),
            Err(ModelError::Config(_))
        ));
    }
}

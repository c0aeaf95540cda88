//! Cache and accounting around any [`ChatModel`].

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use tracing::warn;

use crate::cache::{CacheKey, ResponseCache};
use crate::error::ModelError;
use crate::ledger::UsageLedger;
use crate::types::{ChatModel, ChatRequest, ChatResponse, ModelFuture};

/// Wraps a model with the response cache and the usage ledger for one role.
///
/// A call first looks the request up in the cache (if one is attached and
/// its policy reads); a hit is returned with `cached: true` and recorded as a
/// hit. Otherwise the inner model is called, the outcome recorded as a fresh
/// call or a failure, and a success stored (if the policy writes). Cache I/O
/// failures are logged and never fail the call. Don't nest metered models:
/// each layer would record the call.
pub struct MeteredModel {
    inner: Arc<dyn ChatModel>,
    role: String,
    ledger: Arc<UsageLedger>,
    cache: Option<Arc<ResponseCache>>,
}

impl MeteredModel {
    /// Records into `ledger` under `role`; no cache.
    pub fn new(
        inner: Arc<dyn ChatModel>,
        role: impl Into<String>,
        ledger: Arc<UsageLedger>,
    ) -> Self {
        Self {
            inner,
            role: role.into(),
            ledger,
            cache: None,
        }
    }

    /// Attach the response cache (its policy decides reads and writes).
    pub fn with_cache(mut self, cache: Arc<ResponseCache>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// The role the calls are recorded under.
    pub fn role(&self) -> &str {
        &self.role
    }

    /// The wrapped model.
    pub fn inner(&self) -> &Arc<dyn ChatModel> {
        &self.inner
    }

    /// The cache key material: the inner model's fingerprint plus the
    /// request's cache salt (which is never sent).
    fn key_material(&self, request: &ChatRequest) -> Value {
        json!({
            "fingerprint": self.inner.fingerprint(request),
            "salt": request.cache_salt,
        })
    }

    async fn call(&self, request: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let model = self.inner.name();
        let cache = self
            .cache
            .as_ref()
            .filter(|c| c.policy().reads() || c.policy().writes());
        let keyed = cache.map(|cache| {
            let material = self.key_material(request);
            (cache, CacheKey::of(&material), material)
        });
        let start = Instant::now();
        if let Some((cache, key, _)) = &keyed
            && let Some(response) = cache.get(key).await
        {
            self.ledger
                .record_response(&self.role, model, &response, start.elapsed());
            return Ok(response);
        }
        match self.inner.chat(request).await {
            Ok(mut response) => {
                // A fresh answer even if an inner layer set the flag.
                response.cached = false;
                self.ledger
                    .record_response(&self.role, model, &response, start.elapsed());
                if let Some((cache, key, material)) = &keyed
                    && let Err(error) = cache.put(key, material, &response).await
                {
                    warn!(key = %key, %error, "cannot write the response cache");
                }
                Ok(response)
            }
            Err(error) => {
                self.ledger
                    .record_failure(&self.role, model, &error, start.elapsed());
                Err(error)
            }
        }
    }
}

impl ChatModel for MeteredModel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn fingerprint(&self, request: &ChatRequest) -> Value {
        self.inner.fingerprint(request)
    }

    fn chat<'a>(&'a self, request: &'a ChatRequest) -> ModelFuture<'a> {
        Box::pin(self.call(request))
    }
}

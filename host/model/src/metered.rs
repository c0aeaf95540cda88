//! Cache and accounting around any [`ChatModel`].

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use tracing::warn;

use crate::cache::{CacheKey, ResponseCache};
use crate::config::ModelRole;
use crate::error::ModelError;
use crate::ledger::{ModelPrice, UsageLedger};
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
    role: ModelRole,
    ledger: Arc<UsageLedger>,
    cache: Option<Arc<ResponseCache>>,
}

impl MeteredModel {
    /// Records into `ledger` under `role`; no cache.
    pub fn new(inner: Arc<dyn ChatModel>, role: ModelRole, ledger: Arc<UsageLedger>) -> Self {
        Self {
            inner,
            role,
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
    pub fn role(&self) -> ModelRole {
        self.role
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
                .record_response(self.role, model, &response, start.elapsed());
            return Ok(response);
        }
        // Spend is checked before the call is sent, not only after: the
        // estimate (prompt estimate erring high, the reply at its token
        // cap) is reserved against the ledger's limit while in flight.
        // Without a limit the reservation can refuse nothing, and at a zero
        // prompt price the prompt adds nothing to it, so then the prompt is
        // not estimated: that is a pass over the whole conversation, on
        // every step. Such a call reserves nothing, so a limit set while
        // it is in flight does not count it.
        let limit = self.ledger.spend_limit();
        let price = self.ledger.prices().price_for(model);
        let estimate = estimated_cost(limit, price, request);
        let _reservation = match self.ledger.reserve(estimate) {
            Ok(r) => r,
            Err(refused) => {
                let error = ModelError::SpendLimit {
                    spent: refused.spent,
                    reserved: refused.reserved,
                    estimate: refused.estimate,
                    limit: refused.limit,
                };
                self.ledger
                    .record_failure(self.role, model, &error, start.elapsed());
                return Err(error);
            }
        };
        match self.inner.chat(request).await {
            Ok(mut response) => {
                // A fresh answer even if an inner layer set the flag.
                response.cached = false;
                self.ledger
                    .record_response(self.role, model, &response, start.elapsed());
                if let Some((cache, key, material)) = &keyed
                    && let Err(error) = cache.put(key, material, &response).await
                {
                    warn!(key = %key, %error, "cannot write the response cache");
                }
                Ok(response)
            }
            Err(error) => {
                self.ledger
                    .record_failure(self.role, model, &error, start.elapsed());
                Err(error)
            }
        }
    }
}

/// Reply tokens assumed for a request that sets no `max_tokens` (an
/// estimate that can then fall short: the docs state the bound).
pub const UNCAPPED_REPLY_ESTIMATE: u64 = 4096;

/// Whether a call's prompt must be estimated before it is sent: only under
/// a spending limit, for a model whose prompt tokens cost something.
fn needs_prompt_estimate(limit: Option<f64>, price: Option<&ModelPrice>) -> bool {
    limit.is_some() && price.is_some_and(|p| p.prompt_per_mtok > 0.0)
}

/// What a call reserves against the spending limit: the most it is
/// expected to cost, its prompt (estimated, erring high) plus a reply at its
/// `max_tokens`, at the model's price; zero for an unpriced model or with no
/// limit to reserve against.
fn estimated_cost(limit: Option<f64>, price: Option<&ModelPrice>, request: &ChatRequest) -> f64 {
    let Some(price) = price.filter(|_| limit.is_some()) else {
        return 0.0;
    };
    let prompt_tokens = if needs_prompt_estimate(limit, Some(price)) {
        crate::tokens::estimate_request(request) as u64
    } else {
        0
    };
    price.cost(&crate::Usage {
        prompt_tokens,
        completion_tokens: request
            .sampling
            .max_tokens
            .map_or(UNCAPPED_REPLY_ESTIMATE, u64::from),
        cached_prompt_tokens: 0,
    })
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

    fn count_tokens<'a>(&'a self, text: &'a str) -> crate::CountFuture<'a> {
        self.inner.count_tokens(text)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::ledger::{PriceTable, UsageLedger};
    use crate::{ChatMessage, SamplingArgs, Usage};

    /// A priced model that answers with a fixed usage and counts its calls.
    struct Priced(AtomicU32);

    impl ChatModel for Priced {
        fn name(&self) -> &str {
            "priced"
        }
        fn chat<'a>(&'a self, _request: &'a ChatRequest) -> crate::ModelFuture<'a> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async {
                Ok(ChatResponse {
                    content: Some("ok".into()),
                    usage: Some(Usage {
                        prompt_tokens: 100,
                        completion_tokens: 10,
                        cached_prompt_tokens: 0,
                    }),
                    ..ChatResponse::default()
                })
            })
        }
    }

    #[tokio::test]
    async fn a_call_that_would_cross_the_spend_limit_is_not_sent() {
        // $0.01 per token: a call of 100 + 10 tokens costs $1.10.
        let prices = PriceTable::from_json_str(
            r#"{"models": {"priced": {"prompt_per_mtok": 10000, "completion_per_mtok": 10000}}}"#,
        )
        .unwrap();
        let ledger = Arc::new(UsageLedger::new(prices));
        ledger.set_spend_limit(Some(3.0));
        let inner = Arc::new(Priced(AtomicU32::new(0)));
        let model = MeteredModel::new(inner.clone(), ModelRole::Agent, ledger.clone());
        let request =
            ChatRequest::new(vec![ChatMessage::user("hello")]).with_sampling(SamplingArgs {
                max_tokens: Some(10),
                ..SamplingArgs::default()
            });
        let mut sent = 0;
        let err = loop {
            match model.chat(&request).await {
                Ok(_) => sent += 1,
                Err(e) => break e,
            }
            assert!(sent < 10, "never refused");
        };
        assert!(matches!(err, ModelError::SpendLimit { .. }), "{err}");
        // This endpoint counts more prompt tokens than the estimate (a
        // template's overhead on a one-word prompt), so the last call sent
        // can overshoot: by less than one call's cost.
        let spent = ledger.summary().total.usd;
        assert!(spent <= 3.0 + 1.1 + 1e-9, "{spent}");
        assert_eq!(inner.0.load(Ordering::SeqCst), sent);
        // The refusal is in the ledger, as a failed call of the agent.
        let last = ledger.calls().pop().unwrap();
        assert!(last.error.unwrap().contains("not sent"));
    }

    /// A model at `prices`, metered, and a request of a few messages.
    fn metered(prices: &str, limit: Option<f64>) -> (MeteredModel, ChatRequest) {
        let ledger = Arc::new(UsageLedger::new(PriceTable::from_json_str(prices).unwrap()));
        ledger.set_spend_limit(limit);
        let model = MeteredModel::new(
            Arc::new(Priced(AtomicU32::new(0))),
            ModelRole::Agent,
            ledger,
        );
        let request = ChatRequest::new(vec![
            ChatMessage::system("policy"),
            ChatMessage::user("hello"),
            ChatMessage::assistant("hi"),
        ]);
        (model, request)
    }

    #[tokio::test]
    async fn a_call_with_nothing_to_reserve_against_estimates_no_prompt() {
        let free = r#"{"models": {"priced": {"prompt_per_mtok": 0, "completion_per_mtok": 0}}}"#;
        let priced = r#"{"models": {"priced": {"prompt_per_mtok": 1, "completion_per_mtok": 1}}}"#;
        let replies_only =
            r#"{"models": {"priced": {"prompt_per_mtok": 0, "completion_per_mtok": 1}}}"#;
        for (prices, limit) in [
            (free, None),
            (free, Some(100.0)),
            (priced, None),
            (replies_only, Some(100.0)),
            (r#"{"models": {}}"#, Some(100.0)),
        ] {
            let (model, request) = metered(prices, limit);
            let before = crate::tokens::probe::requests();
            for _ in 0..3 {
                model.chat(&request).await.unwrap();
            }
            assert_eq!(
                crate::tokens::probe::requests(),
                before,
                "{prices} with limit {limit:?}"
            );
        }
        // The probe counts where an estimate is needed.
        let (model, request) = metered(priced, Some(100.0));
        let before = crate::tokens::probe::requests();
        model.chat(&request).await.unwrap();
        assert_eq!(crate::tokens::probe::requests(), before + 1);
    }

    #[test]
    fn only_a_limit_and_a_prompt_price_need_a_prompt_estimate() {
        let price = |prompt, completion| ModelPrice {
            prompt_per_mtok: prompt,
            completion_per_mtok: completion,
            cached_prompt_per_mtok: None,
        };
        assert!(needs_prompt_estimate(Some(1.0), Some(&price(1.0, 0.0))));
        assert!(needs_prompt_estimate(Some(0.0), Some(&price(0.5, 2.0))));
        assert!(!needs_prompt_estimate(None, Some(&price(1.0, 1.0))));
        assert!(!needs_prompt_estimate(Some(1.0), None));
        assert!(!needs_prompt_estimate(Some(1.0), Some(&price(0.0, 0.0))));
        assert!(!needs_prompt_estimate(Some(1.0), Some(&price(0.0, 3.0))));
    }

    #[test]
    fn a_skipped_prompt_estimate_leaves_the_reservation_as_it_was() {
        let request = ChatRequest::new(vec![ChatMessage::user(
            "a fairly long question ".repeat(50),
        )])
        .with_sampling(SamplingArgs {
            max_tokens: Some(100),
            ..SamplingArgs::default()
        });
        let replies_only = ModelPrice {
            prompt_per_mtok: 0.0,
            completion_per_mtok: 2.0,
            cached_prompt_per_mtok: None,
        };
        let full = |price: &ModelPrice| {
            price.cost(&Usage {
                prompt_tokens: crate::tokens::estimate_request(&request) as u64,
                completion_tokens: 100,
                cached_prompt_tokens: 0,
            })
        };
        assert_eq!(
            estimated_cost(Some(1.0), Some(&replies_only), &request),
            full(&replies_only)
        );
        assert!(estimated_cost(Some(1.0), Some(&replies_only), &request) > 0.0);
        let both = ModelPrice {
            prompt_per_mtok: 3.0,
            ..replies_only
        };
        assert_eq!(
            estimated_cost(Some(1.0), Some(&both), &request),
            full(&both)
        );
        assert_eq!(estimated_cost(Some(1.0), None, &request), 0.0);
    }
}

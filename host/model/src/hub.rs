//! The run-wide owner of the shared model services.

use std::sync::Arc;

use crate::cache::ResponseCache;
use crate::client::{EndpointLimiter, HttpChatModel};
use crate::config::{ModelConfig, ModelRole};
use crate::error::ModelError;
use crate::ledger::UsageLedger;
use crate::metered::MeteredModel;
use crate::types::ChatModel;

/// One per run: the ledger, the response cache and the endpoint limiter that
/// every role's model shares. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ModelHub {
    ledger: Arc<UsageLedger>,
    cache: Arc<ResponseCache>,
    limiter: EndpointLimiter,
}

impl ModelHub {
    /// A hub around `ledger` and `cache`, with a fresh endpoint limiter.
    pub fn new(ledger: Arc<UsageLedger>, cache: Arc<ResponseCache>) -> Self {
        Self {
            ledger,
            cache,
            limiter: EndpointLimiter::new(),
        }
    }

    /// A hub on the same ledger and endpoint limits whose models bypass the
    /// response cache: fresh draws of a stochastic model (a training gate
    /// that re-measures the incumbent).
    pub fn without_cache(&self) -> ModelHub {
        Self {
            ledger: Arc::clone(&self.ledger),
            cache: Arc::new(ResponseCache::new(
                std::path::PathBuf::new(),
                crate::CachePolicy::Off,
            )),
            limiter: self.limiter.clone(),
        }
    }

    /// The usage ledger every model of the hub records into.
    pub fn ledger(&self) -> &Arc<UsageLedger> {
        &self.ledger
    }

    /// The response cache every cached model of the hub shares.
    pub fn cache(&self) -> &Arc<ResponseCache> {
        &self.cache
    }

    /// The concurrency limiter per endpoint shared by the hub's HTTP models.
    pub fn limiter(&self) -> &EndpointLimiter {
        &self.limiter
    }

    /// The HTTP model for `config`, cached and recorded under `role`
    /// (`ModelRole::as_str()` for the standard roles).
    pub fn http_model(
        &self,
        role: ModelRole,
        config: ModelConfig,
    ) -> Result<Arc<dyn ChatModel>, ModelError> {
        let http = HttpChatModel::new(config, &self.limiter)?;
        Ok(self.metered(role, Arc::new(http), true))
    }

    /// Any model (e.g. a simulated one) recorded under `role`; `use_cache`
    /// attaches the response cache (pointless for cheap deterministic
    /// models, which would only fill the disk).
    pub fn metered(
        &self,
        role: ModelRole,
        inner: Arc<dyn ChatModel>,
        use_cache: bool,
    ) -> Arc<dyn ChatModel> {
        let mut metered = MeteredModel::new(inner, role, Arc::clone(&self.ledger));
        if use_cache {
            metered = metered.with_cache(Arc::clone(&self.cache));
        }
        Arc::new(metered)
    }
}

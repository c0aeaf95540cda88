//! Token and cost accounting, per call and per role.
//!
//! Every metered call is recorded once, as a fresh call, a cache hit or a
//! failure. Cache hits keep their original token counts (so the tokens a
//! run *used* are visible) but cost nothing; what they would have cost is
//! reported as `usd_saved_by_cache`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::config::ModelRole;
use crate::error::{ErrorClass, ModelError};
use crate::types::{ChatResponse, Usage};

/// The embedded default price table. Deliberately holds no vendor prices
/// (they change; a stale number silently misreports cost): only `sim:*`
/// (simulated models) at zero. Pass real prices with a price-table file.
const DEFAULT_PRICES: &str = include_str!("default_prices.json");

/// USD per one million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ModelPrice {
    /// USD per million fresh prompt tokens.
    pub prompt_per_mtok: f64,
    /// USD per million completion tokens.
    pub completion_per_mtok: f64,
    /// Price of prompt tokens served from the endpoint's prefix cache;
    /// defaults to `prompt_per_mtok` when the vendor gives no discount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_prompt_per_mtok: Option<f64>,
}

impl ModelPrice {
    /// USD of one call's usage. Cached prompt tokens are a subset of the
    /// prompt tokens and are billed at the cached rate instead.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cached_prompt_tokens.min(usage.prompt_tokens);
        let fresh_prompt = usage.prompt_tokens - cached;
        let cached_rate = self.cached_prompt_per_mtok.unwrap_or(self.prompt_per_mtok);
        (fresh_prompt as f64 * self.prompt_per_mtok
            + cached as f64 * cached_rate
            + usage.completion_tokens as f64 * self.completion_per_mtok)
            / 1_000_000.0
    }
}

/// Why a price table was refused.
#[derive(Debug, Error)]
pub enum PriceTableError {
    /// The file could not be read.
    #[error("cannot read price table {path}: {source}")]
    Io {
        /// The file as given.
        path: String,
        /// The read error.
        source: std::io::Error,
    },
    /// The text is not a JSON price table.
    #[error("invalid price table: {0}")]
    Parse(#[from] serde_json::Error),
    /// A price is negative, infinite or NaN.
    #[error("invalid price for `{model}`: prices must be finite and ≥ 0")]
    Invalid {
        /// The entry holding it.
        model: String,
    },
}

/// Per-model prices, keyed by the configured model name. A key ending in
/// `*` is a prefix pattern (`"sim:*"`); an exact name wins over patterns and
/// a longer pattern over a shorter one.
///
/// File format (other top-level fields, e.g. `"_comment"`, are ignored):
/// ```json
/// {"models": {"gpt-4o-mini": {"prompt_per_mtok": 0.15,
///   "completion_per_mtok": 0.6, "cached_prompt_per_mtok": 0.075}}}
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PriceTable {
    /// Prices by model name or `prefix*` pattern.
    #[serde(default)]
    pub models: BTreeMap<String, ModelPrice>,
}

impl PriceTable {
    /// The embedded table (`default_prices.json`): `sim:*` at zero only.
    pub fn embedded_default() -> Self {
        // The embedded file is checked by a unit test; an empty table is the
        // safe fallback regardless.
        Self::from_json_str(DEFAULT_PRICES).unwrap_or_default()
    }

    /// A table from its JSON text, every price checked finite and ≥ 0.
    pub fn from_json_str(json: &str) -> Result<Self, PriceTableError> {
        let table: Self = serde_json::from_str(json)?;
        for (model, price) in &table.models {
            let ok = |x: f64| x.is_finite() && x >= 0.0;
            if !ok(price.prompt_per_mtok)
                || !ok(price.completion_per_mtok)
                || !price.cached_prompt_per_mtok.is_none_or(ok)
            {
                return Err(PriceTableError::Invalid {
                    model: model.clone(),
                });
            }
        }
        Ok(table)
    }

    /// Reads a price-table file.
    pub fn load(path: &Path) -> Result<Self, PriceTableError> {
        let text = std::fs::read_to_string(path).map_err(|source| PriceTableError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_json_str(&text)
    }

    /// `self` with `other`'s entries added (replacing same-named ones), e.g.
    /// the embedded default overlaid with the operator's file.
    pub fn merged(mut self, other: PriceTable) -> Self {
        self.models.extend(other.models);
        self
    }

    /// The price of `model`: its exact entry, else the longest matching
    /// `prefix*` pattern; `None` when unpriced.
    pub fn price_for(&self, model: &str) -> Option<&ModelPrice> {
        if let Some(price) = self.models.get(model) {
            return Some(price);
        }
        self.models
            .iter()
            .filter_map(|(pattern, price)| {
                let prefix = pattern.strip_suffix('*')?;
                model.starts_with(prefix).then_some((prefix.len(), price))
            })
            .max_by_key(|(len, _)| *len)
            .map(|(_, price)| price)
    }
}

/// How a metered call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "class")]
pub enum CallOutcome {
    /// Served by the model.
    Fresh,
    /// Replayed from the response cache.
    CacheHit,
    /// The call failed, with the failure's class.
    Failed(ErrorClass),
}

/// One metered call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// Order in which calls finished, from 0.
    pub seq: u64,
    /// The role the call was made for.
    pub role: ModelRole,
    /// The configured model name (the price-table key).
    pub model: String,
    /// Fresh, cache hit or failed.
    pub outcome: CallOutcome,
    /// Zero when the endpoint reported none (see `usage_reported`).
    pub usage: Usage,
    /// Whether the endpoint reported token usage.
    pub usage_reported: bool,
    /// Cost of a fresh call (`None`: model not in the price table); what a
    /// hit *would* have cost; `None` for failures.
    pub usd: Option<f64>,
    /// HTTP attempts (1 = no retry; 0 for hits and non-HTTP models).
    pub attempts: u32,
    /// Wall time of the call (all attempts), in milliseconds.
    pub latency_ms: u64,
    /// The error message of a failed call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Token counts summed over calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCounts {
    /// Prompt tokens, summed over the calls.
    pub prompt_tokens: u64,
    /// Completion tokens, summed over the calls.
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, those served from the endpoint's prefix cache.
    pub cached_prompt_tokens: u64,
}

impl TokenCounts {
    fn add(&mut self, usage: &Usage) {
        self.prompt_tokens += usage.prompt_tokens;
        self.completion_tokens += usage.completion_tokens;
        self.cached_prompt_tokens += usage.cached_prompt_tokens;
    }
}

/// Totals over a set of calls (a role, a model, or the whole run).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageTotals {
    /// Calls served by the model.
    pub fresh_calls: u64,
    /// Calls replayed from the response cache.
    pub cache_hits: u64,
    /// Calls that failed (after retries).
    pub failed_calls: u64,
    /// Of `failed_calls`, those of class infrastructure.
    pub infrastructure_failures: u64,
    /// `cache_hits / (fresh_calls + cache_hits)`, 0 when there were none.
    pub cache_hit_rate: f64,
    /// Tokens of fresh calls (what the endpoints actually served).
    pub fresh_tokens: TokenCounts,
    /// Tokens recorded in replayed cache entries (served by no one now).
    pub cache_hit_tokens: TokenCounts,
    /// Cost of the priced fresh calls.
    pub usd: f64,
    /// What the cache hits would have cost as fresh calls.
    pub usd_saved_by_cache: f64,
    /// Fresh calls whose model has no price (their cost is not in `usd`).
    pub unpriced_fresh_calls: u64,
    /// Fresh calls whose endpoint reported no usage.
    pub fresh_calls_without_usage: u64,
    /// HTTP retries (attempts beyond the first) over fresh and failed calls.
    pub retries: u64,
}

impl UsageTotals {
    fn add(&mut self, record: &CallRecord) {
        match record.outcome {
            CallOutcome::Fresh => {
                self.fresh_calls += 1;
                self.fresh_tokens.add(&record.usage);
                match record.usd {
                    Some(usd) => self.usd += usd,
                    None => self.unpriced_fresh_calls += 1,
                }
                if !record.usage_reported {
                    self.fresh_calls_without_usage += 1;
                }
            }
            CallOutcome::CacheHit => {
                self.cache_hits += 1;
                self.cache_hit_tokens.add(&record.usage);
                self.usd_saved_by_cache += record.usd.unwrap_or(0.0);
            }
            CallOutcome::Failed(class) => {
                self.failed_calls += 1;
                if class == ErrorClass::Infrastructure {
                    self.infrastructure_failures += 1;
                }
            }
        }
        self.retries += u64::from(record.attempts.saturating_sub(1));
        let served = self.fresh_calls + self.cache_hits;
        self.cache_hit_rate = if served == 0 {
            0.0
        } else {
            self.cache_hits as f64 / served as f64
        };
    }
}

/// The ledger's summary, for results files.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LedgerSummary {
    /// Totals over every call of the run.
    pub total: UsageTotals,
    /// Per role (`agent`, `user`, ...).
    pub by_role: BTreeMap<ModelRole, UsageTotals>,
    /// Per configured model name.
    pub by_model: BTreeMap<String, UsageTotals>,
    /// Models that made fresh calls but have no price.
    pub unpriced_models: BTreeSet<String>,
}

/// The run's usage ledger; shared (`Arc`) by every metered model and safe to
/// record into from concurrent episodes.
#[derive(Debug, Default)]
pub struct UsageLedger {
    prices: PriceTable,
    calls: Mutex<Vec<CallRecord>>,
    /// The priced fresh calls' cost, summed in the calls' order as the
    /// summary sums it; kept as calls are recorded (always under the
    /// `calls` lock), so checking a call against the limit does not walk
    /// every call of a long-lived ledger (a proxy's).
    spent: Mutex<f64>,
    spend: Mutex<SpendGuard>,
}

/// The ledger's spending limit and what calls in flight have reserved.
#[derive(Debug, Default)]
struct SpendGuard {
    limit: Option<f64>,
    reserved: f64,
    /// A call has been refused: the limit cannot afford the next call.
    refused: bool,
}

/// A call's share of the spending limit while it is in flight: released
/// (the call's real cost is in the ledger by then) when dropped.
#[derive(Debug)]
pub struct SpendReservation<'a> {
    ledger: &'a UsageLedger,
    usd: f64,
}

impl Drop for SpendReservation<'_> {
    fn drop(&mut self) {
        let mut g = self.ledger.spend.lock().unwrap_or_else(|p| p.into_inner());
        g.reserved = (g.reserved - self.usd).max(0.0);
    }
}

/// A call that was not sent: its estimated cost would cross the limit.
#[derive(Debug, Clone, PartialEq)]
pub struct SpendRefused {
    /// Spent so far (every recorded call).
    pub spent: f64,
    /// Reserved by calls in flight.
    pub reserved: f64,
    /// This call's estimated cost.
    pub estimate: f64,
    /// The limit.
    pub limit: f64,
}

impl UsageLedger {
    /// An empty ledger pricing calls with `prices`.
    pub fn new(prices: PriceTable) -> Self {
        Self {
            prices,
            calls: Mutex::new(Vec::new()),
            spent: Mutex::new(0.0),
            spend: Mutex::new(SpendGuard::default()),
        }
    }

    /// Refuse calls whose estimated cost would take the total spend (every
    /// call recorded, imported ones included, plus calls in flight) past
    /// `usd`; `None` lifts the limit.
    pub fn set_spend_limit(&self, usd: Option<f64>) {
        let mut g = self.spend.lock().unwrap_or_else(|p| p.into_inner());
        g.limit = usd;
        g.refused = false;
    }

    /// The spending limit, if one is set.
    pub fn spend_limit(&self) -> Option<f64> {
        self.spend.lock().unwrap_or_else(|p| p.into_inner()).limit
    }

    /// Whether a call has been refused for the limit (the budget is spent
    /// as far as it can be: work that needs calls should stop).
    pub fn spend_refused(&self) -> bool {
        self.spend.lock().unwrap_or_else(|p| p.into_inner()).refused
    }

    /// Reserve a call's estimated cost before sending it, or refuse it when
    /// the limit would be crossed. Calls are checked and reserved under one
    /// lock, so concurrent calls cannot pass the limit together: spend can
    /// exceed it only by what calls cost beyond their estimates.
    pub fn reserve(&self, estimate: f64) -> Result<SpendReservation<'_>, SpendRefused> {
        let mut g = self.spend.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(limit) = g.limit {
            let spent = self.spent();
            if spent + g.reserved + estimate > limit {
                g.refused = true;
                return Err(SpendRefused {
                    spent,
                    reserved: g.reserved,
                    estimate,
                    limit,
                });
            }
        }
        g.reserved += estimate;
        Ok(SpendReservation {
            ledger: self,
            usd: estimate,
        })
    }

    /// Cost of the priced fresh calls so far: the summary's total `usd`,
    /// summed in the same order, without building the rest of the summary
    /// (every call checked against a limit asks).
    fn spent(&self) -> f64 {
        *self.spent.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Re-derive `spent` from `calls` (after calls were merged in front).
    fn resum(&self, calls: &[CallRecord]) {
        *self.spent.lock().unwrap_or_else(|p| p.into_inner()) = calls
            .iter()
            .filter(|r| r.outcome == CallOutcome::Fresh)
            .filter_map(|r| r.usd)
            .fold(0.0, |total, usd| total + usd);
    }

    /// Add a call just pushed to `spent`.
    fn count(&self, record: &CallRecord) {
        if record.outcome == CallOutcome::Fresh
            && let Some(usd) = record.usd
        {
            *self.spent.lock().unwrap_or_else(|p| p.into_inner()) += usd;
        }
    }

    /// The price table calls are priced with.
    pub fn prices(&self) -> &PriceTable {
        &self.prices
    }

    /// Records a response; `response.cached` decides fresh call vs hit.
    pub fn record_response(
        &self,
        role: ModelRole,
        model: &str,
        response: &ChatResponse,
        latency: Duration,
    ) -> CallRecord {
        let usage = response.usage.unwrap_or_default();
        self.push(CallRecord {
            seq: 0,
            role,
            model: model.to_owned(),
            outcome: if response.cached {
                CallOutcome::CacheHit
            } else {
                CallOutcome::Fresh
            },
            usage,
            usage_reported: response.usage.is_some(),
            usd: self.prices.price_for(model).map(|p| p.cost(&usage)),
            attempts: response.attempts,
            latency_ms: millis(latency),
            error: None,
        })
    }

    /// Records a failed call (its class, attempts and message).
    pub fn record_failure(
        &self,
        role: ModelRole,
        model: &str,
        error: &ModelError,
        latency: Duration,
    ) -> CallRecord {
        let attempts = match error {
            ModelError::RetriesExhausted { attempts, .. } => *attempts,
            _ => 1,
        };
        self.push(CallRecord {
            seq: 0,
            role,
            model: model.to_owned(),
            outcome: CallOutcome::Failed(error.class()),
            usage: Usage::default(),
            usage_reported: false,
            usd: None,
            attempts,
            latency_ms: millis(latency),
            error: Some(error.to_string()),
        })
    }

    fn push(&self, mut record: CallRecord) -> CallRecord {
        let mut calls = self.lock();
        record.seq = calls.len() as u64;
        self.count(&record);
        calls.push(record.clone());
        record
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<CallRecord>> {
        // A panic elsewhere while holding the lock leaves whole records
        // behind (push is the only mutation), so the data is still sound.
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Carry over the calls of an earlier process (a resumed run's
    /// `ledger.json`), so totals and budgets cover the whole run. They keep
    /// their order and come before any call recorded here.
    pub fn import(&self, earlier: Vec<CallRecord>) {
        let mut calls = self.lock();
        let mut merged = earlier;
        merged.append(&mut calls);
        for (i, r) in merged.iter_mut().enumerate() {
            r.seq = i as u64;
        }
        self.resum(&merged);
        *calls = merged;
    }

    /// Append calls recorded elsewhere (an episode run in a worker
    /// process), after the ones recorded here, renumbered in order.
    pub fn append(&self, later: Vec<CallRecord>) {
        let mut calls = self.lock();
        for mut r in later {
            r.seq = calls.len() as u64;
            self.count(&r);
            calls.push(r);
        }
    }

    /// Take every call recorded so far, leaving the ledger empty (a worker
    /// process hands each episode's calls to its parent).
    pub fn drain(&self) -> Vec<CallRecord> {
        let mut calls = self.lock();
        self.resum(&[]);
        std::mem::take(&mut *calls)
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<CallRecord> {
        self.lock().clone()
    }

    /// Totals over every call so far: overall, per role and per model.
    pub fn summary(&self) -> LedgerSummary {
        let calls = self.lock();
        let mut summary = LedgerSummary::default();
        for record in calls.iter() {
            summary.total.add(record);
            summary.by_role.entry(record.role).or_default().add(record);
            summary
                .by_model
                .entry(record.model.clone())
                .or_default()
                .add(record);
            if record.outcome == CallOutcome::Fresh && record.usd.is_none() {
                summary.unpriced_models.insert(record.model.clone());
            }
        }
        summary
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(prompt: u64, completion: u64, cached_prompt: u64, hit: bool) -> ChatResponse {
        ChatResponse {
            usage: Some(Usage {
                prompt_tokens: prompt,
                completion_tokens: completion,
                cached_prompt_tokens: cached_prompt,
            }),
            cached: hit,
            attempts: if hit { 0 } else { 2 },
            ..ChatResponse::default()
        }
    }

    #[test]
    fn reservations_refuse_a_call_that_would_cross_the_limit_and_are_released() {
        let ledger = UsageLedger::new(
            PriceTable::from_json_str(
                r#"{"models": {"m": {"prompt_per_mtok": 1000000, "completion_per_mtok": 1000000}}}"#,
            )
            .unwrap(),
        );
        // No limit: anything goes.
        assert!(ledger.reserve(1e9).is_ok());
        ledger.set_spend_limit(Some(10.0));
        // $3 spent (3 tokens at $1 each).
        ledger.record_response(
            ModelRole::Agent,
            "m",
            &response(2, 1, 0, false),
            Duration::ZERO,
        );
        let a = ledger.reserve(4.0).expect("3 + 4 <= 10");
        // In flight counts: 3 + 4 + 4 > 10.
        let refused = ledger.reserve(4.0).unwrap_err();
        assert_eq!(
            refused,
            SpendRefused {
                spent: 3.0,
                reserved: 4.0,
                estimate: 4.0,
                limit: 10.0
            }
        );
        drop(a);
        let b = ledger.reserve(7.0).expect("released: 3 + 7 <= 10");
        drop(b);
        // Cache hits cost nothing and do not count.
        ledger.record_response(
            ModelRole::Agent,
            "m",
            &response(5, 5, 0, true),
            Duration::ZERO,
        );
        assert!(ledger.reserve(7.0).is_ok());
        assert!(ledger.reserve(7.1).is_err());
        ledger.set_spend_limit(None);
        assert!(ledger.reserve(1e9).is_ok());
    }

    #[test]
    fn what_a_limit_is_checked_against_is_the_summary_total() {
        let ledger = UsageLedger::new(
            PriceTable::from_json_str(
                r#"{"models": {"m": {"prompt_per_mtok": 0.3, "completion_per_mtok": 0.7}}}"#,
            )
            .unwrap(),
        );
        assert_eq!(ledger.spent(), 0.0);
        for i in 0..20u64 {
            let model = if i % 5 == 0 { "unpriced" } else { "m" };
            ledger.record_response(
                ModelRole::Agent,
                model,
                &response(100 + i, 7 * i, i, i % 3 == 0),
                Duration::ZERO,
            );
        }
        ledger.record_failure(
            ModelRole::Agent,
            "m",
            &ModelError::Timeout {
                endpoint: "http://m".into(),
                message: "slow".into(),
            },
            Duration::ZERO,
        );
        let total = ledger.summary().total;
        assert!(total.cache_hits > 0 && total.unpriced_fresh_calls > 0);
        assert!(ledger.spent() > 0.0);
        assert_eq!(ledger.spent().to_bits(), total.usd.to_bits());

        // Kept through every way calls arrive or leave: imported in front,
        // appended after, drained.
        let earlier = ledger.calls();
        let later = UsageLedger::new(ledger.prices().clone());
        later.record_response(
            ModelRole::Agent,
            "m",
            &response(9, 9, 0, false),
            Duration::ZERO,
        );
        later.import(earlier.clone());
        later.append(earlier);
        assert_eq!(later.spent().to_bits(), later.summary().total.usd.to_bits());
        assert!(later.spent() > 2.0 * total.usd);
        later.drain();
        assert_eq!(later.spent(), 0.0);
    }

    #[test]
    fn embedded_table_parses_and_prices_sim_at_zero() {
        let table = PriceTable::from_json_str(DEFAULT_PRICES).unwrap();
        assert_eq!(table, PriceTable::embedded_default());
        let price = table.price_for("sim:careless").unwrap();
        assert_eq!(price.cost(&response(10, 10, 0, false).usage.unwrap()), 0.0);
        assert!(table.price_for("gpt-4o").is_none());
    }

    #[test]
    fn price_lookup_prefers_exact_then_longest_prefix() {
        let table = PriceTable::from_json_str(
            r#"{"models": {
                "qwen*": {"prompt_per_mtok": 1, "completion_per_mtok": 1},
                "qwen2.5*": {"prompt_per_mtok": 2, "completion_per_mtok": 2},
                "qwen2.5-coder": {"prompt_per_mtok": 3, "completion_per_mtok": 3}
            }, "_comment": "ignored"}"#,
        )
        .unwrap();
        assert_eq!(
            table.price_for("qwen2.5-coder").unwrap().prompt_per_mtok,
            3.0
        );
        assert_eq!(table.price_for("qwen2.5-7b").unwrap().prompt_per_mtok, 2.0);
        assert_eq!(table.price_for("qwen3").unwrap().prompt_per_mtok, 1.0);
        assert!(table.price_for("llama").is_none());
        assert!(
            PriceTable::from_json_str(
                r#"{"models": {"x": {"prompt_per_mtok": -1, "completion_per_mtok": 1}}}"#
            )
            .is_err()
        );
    }

    #[test]
    fn cost_bills_cached_prompt_tokens_at_the_cached_rate() {
        let price = ModelPrice {
            prompt_per_mtok: 1.0,
            completion_per_mtok: 2.0,
            cached_prompt_per_mtok: Some(0.5),
        };
        let usage = response(1000, 500, 400, false).usage.unwrap();
        assert!((price.cost(&usage) - 0.0018).abs() < 1e-12);
        let no_discount = ModelPrice {
            cached_prompt_per_mtok: None,
            ..price
        };
        assert!((no_discount.cost(&usage) - 0.002).abs() < 1e-12);
    }

    #[test]
    fn summary_separates_fresh_hits_and_failures_per_role() {
        let table = PriceTable::from_json_str(
            r#"{"models": {"m": {"prompt_per_mtok": 1, "completion_per_mtok": 1}}}"#,
        )
        .unwrap();
        let ledger = UsageLedger::new(table);
        let ms = Duration::from_millis(5);
        ledger.record_response(ModelRole::Agent, "m", &response(100, 10, 0, false), ms);
        ledger.record_response(ModelRole::Agent, "m", &response(100, 10, 0, true), ms);
        ledger.record_response(ModelRole::User, "free", &response(7, 3, 0, false), ms);
        let error = ModelError::RetriesExhausted {
            endpoint: "e".into(),
            attempts: 3,
            last: Box::new(ModelError::Timeout {
                endpoint: "e".into(),
                message: "t".into(),
            }),
        };
        ledger.record_failure(ModelRole::User, "free", &error, ms);
        let s = ledger.summary();
        let agent = &s.by_role[&ModelRole::Agent];
        assert_eq!((agent.fresh_calls, agent.cache_hits), (1, 1));
        assert_eq!(agent.cache_hit_rate, 0.5);
        assert_eq!(agent.fresh_tokens.prompt_tokens, 100);
        assert_eq!(agent.cache_hit_tokens.prompt_tokens, 100);
        assert!((agent.usd - 110e-6).abs() < 1e-12);
        assert!((agent.usd_saved_by_cache - 110e-6).abs() < 1e-12);
        let user = &s.by_role[&ModelRole::User];
        assert_eq!((user.fresh_calls, user.failed_calls), (1, 1));
        assert_eq!(user.infrastructure_failures, 1);
        assert_eq!(user.unpriced_fresh_calls, 1);
        assert_eq!(user.retries, 1 + 2);
        assert_eq!(s.total.fresh_calls, 2);
        assert_eq!(s.total.cache_hits, 1);
        assert!(s.unpriced_models.contains("free"));
        let calls = ledger.calls();
        assert_eq!(calls.len(), 4);
        assert_eq!(calls[3].seq, 3);
        assert_eq!(
            calls[3].outcome,
            CallOutcome::Failed(ErrorClass::Infrastructure)
        );
        // The summary is what results files store.
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["by_role"]["agent"]["cache_hits"], 1);
    }

    #[test]
    fn imported_calls_come_first_and_count_in_the_totals() {
        let table = PriceTable::from_json_str(
            r#"{"models": {"m": {"prompt_per_mtok": 1, "completion_per_mtok": 1}}}"#,
        )
        .unwrap();
        let ms = Duration::from_millis(1);
        let before = UsageLedger::new(table.clone());
        before.record_response(ModelRole::Coder, "m", &response(1000, 0, 0, false), ms);
        let now = UsageLedger::new(table);
        now.record_response(ModelRole::Analyst, "m", &response(500, 0, 0, false), ms);
        now.import(before.calls());
        let calls = now.calls();
        assert_eq!(
            calls.iter().map(|c| (c.seq, c.role)).collect::<Vec<_>>(),
            vec![(0, ModelRole::Coder), (1, ModelRole::Analyst)]
        );
        assert!((now.summary().total.usd - 1500e-6).abs() < 1e-12);
    }
}

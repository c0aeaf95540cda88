//! The proxy's usage and cost ledger: every upstream completion it asks for
//! (retries after a block included: the upstream charged them), priced by
//! the request's `model` with the price table, checked against the spending
//! limit before it is sent, and with `--records DIR` appended to
//! [`LEDGER_FILE`] there, one [`CallRecord`] a line, so the spend of every
//! earlier process on that directory counts against the limit.
//!
//! The same [`UsageLedger`] the runner and the trainer keep, so a proxy's
//! spend reads like a run's.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;

use ecdysis_model::{
    CallRecord, ChatResponse, LedgerSummary, ModelError, ModelRole, PriceTable, Usage, UsageLedger,
    classify_status, error_message_from_body, parse_usage,
};

use crate::error::ProxyError;
use crate::records::RecordsError;

/// The ledger's file in a records directory. Its name has a dot before
/// `.jsonl`, which no conversation's file has, so it can never be one.
pub const LEDGER_FILE: &str = "calls.ledger.jsonl";

/// A proxy's ledger and, with a records directory, its file.
#[derive(Debug)]
pub struct ProxyLedger {
    ledger: UsageLedger,
    file: Option<PathBuf>,
    /// Appends are serialised, so each line is written whole and in the
    /// ledger's order.
    append: Mutex<()>,
}

/// One upstream call's cost, for its request's record.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CallCost {
    /// The upstream's token counts (zero when it reported none).
    pub usage: Usage,
    /// USD at the model's price; `None` when the model has no price.
    pub usd: Option<f64>,
}

impl ProxyLedger {
    /// A ledger pricing with `prices` under `limit` (USD over the ledger's
    /// life). With `records_dir`, the calls an earlier process recorded in
    /// its [`LEDGER_FILE`] are carried over first; a line that is not a
    /// whole call record is an error naming the file and line.
    pub fn open(
        prices: PriceTable,
        limit: Option<f64>,
        records_dir: Option<&Path>,
    ) -> Result<Self, RecordsError> {
        let ledger = UsageLedger::new(prices);
        let file = records_dir.map(|d| d.join(LEDGER_FILE));
        if let Some(path) = &file {
            ledger.import(read_ledger(path)?);
        }
        ledger.set_spend_limit(limit);
        Ok(ProxyLedger {
            ledger,
            file,
            append: Mutex::new(()),
        })
    }

    /// The spending limit.
    pub fn limit(&self) -> Option<f64> {
        self.ledger.spend_limit()
    }

    /// Totals over every call so far (earlier processes' included).
    pub fn summary(&self) -> LedgerSummary {
        self.ledger.summary()
    }

    /// Reserve what an upstream request of `body` for `model` can cost, or
    /// refuse it: under a limit, a model the price table does not price
    /// cannot be held to it, and a call whose estimate (its prompt, erring
    /// high, plus a reply at its token cap) would take the spend past the
    /// limit is not sent. Without a limit nothing is estimated.
    pub fn admit(
        &self,
        model: &str,
        body: &[u8],
    ) -> Result<Option<ecdysis_model::SpendReservation<'_>>, ProxyError> {
        let Some(limit) = self.ledger.spend_limit() else {
            return Ok(None);
        };
        let Some(price) = self.ledger.prices().price_for(model).copied() else {
            return Err(ProxyError::ModelNotPriced {
                model: model.to_string(),
            });
        };
        let estimate = price.cost(&Usage {
            prompt_tokens: prompt_estimate(&price, body),
            completion_tokens: reply_cap(body),
            cached_prompt_tokens: 0,
        });
        match self.ledger.reserve(estimate) {
            Ok(r) => Ok(Some(r)),
            Err(refused) => {
                let error = ProxyError::SpendLimit {
                    spent: refused.spent,
                    estimate: refused.estimate,
                    limit,
                };
                self.failed(model, &error, Duration::ZERO);
                Err(error)
            }
        }
    }

    /// Record an upstream completion (its `usage` as the upstream counted
    /// it) and return its cost.
    pub fn answered(&self, model: &str, reply: &Value, latency: Duration) -> CallCost {
        let usage = reply.get("usage").and_then(parse_usage);
        let response = ChatResponse {
            usage,
            attempts: 1,
            ..ChatResponse::default()
        };
        let record = self
            .ledger
            .record_response(ModelRole::Agent, model, &response, latency);
        self.persist(&record);
        CallCost {
            usage: record.usage,
            usd: record.usd,
        }
    }

    /// Record an upstream request that failed (a refusal for the limit
    /// included); errors that are not the upstream's are not calls.
    pub fn failed(&self, model: &str, error: &ProxyError, latency: Duration) {
        let Some(error) = model_error(error) else {
            return;
        };
        let record = self
            .ledger
            .record_failure(ModelRole::Agent, model, &error, latency);
        self.persist(&record);
    }

    fn persist(&self, record: &CallRecord) {
        let Some(path) = &self.file else {
            return;
        };
        let _order = self.append.lock().unwrap_or_else(|p| p.into_inner());
        let written = serde_json::to_string(record)
            .map_err(std::io::Error::other)
            .and_then(|line| crate::append_line(path, &line));
        if let Err(error) = written {
            // The answer does not depend on the ledger's file: a full disk
            // is logged; the in-memory ledger still holds the call.
            tracing::warn!(%error, path = %path.display(), "proxy: the ledger's line was not written");
        }
    }
}

/// The prompt's tokens, estimated from the whole body (its JSON syntax
/// makes the estimate err high), or none at a zero prompt price.
fn prompt_estimate(price: &ecdysis_model::ModelPrice, body: &[u8]) -> u64 {
    if price.prompt_per_mtok == 0.0 {
        return 0;
    }
    ecdysis_model::tokens::estimate_tokens(&String::from_utf8_lossy(body)) as u64
}

/// The reply's token cap: the body's `max_completion_tokens` or
/// `max_tokens`, else the estimate for an uncapped reply.
fn reply_cap(body: &[u8]) -> u64 {
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(body) else {
        return ecdysis_model::UNCAPPED_REPLY_ESTIMATE;
    };
    ["max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|k| body.get(*k).and_then(Value::as_u64))
        .unwrap_or(ecdysis_model::UNCAPPED_REPLY_ESTIMATE)
}

/// An upstream failure as the model layer classes it (the ledger's
/// `failed_calls`, `infrastructure_failures`); `None` for the proxy's own
/// errors.
fn model_error(error: &ProxyError) -> Option<ModelError> {
    let endpoint = "upstream".to_string();
    Some(match error {
        ProxyError::UpstreamUnreachable(message) => ModelError::Connection {
            endpoint,
            message: message.clone(),
        },
        ProxyError::UpstreamTimeout => ModelError::Timeout {
            endpoint,
            message: "no answer within --upstream-timeout-secs".into(),
        },
        ProxyError::UpstreamInvalid(message) => ModelError::MalformedResponse {
            endpoint,
            message: message.clone(),
            body_excerpt: String::new(),
        },
        ProxyError::UpstreamStatus { status, body } => classify_status(
            &endpoint,
            *status,
            error_message_from_body(body.as_bytes()),
            None,
        ),
        ProxyError::SpendLimit {
            spent,
            estimate,
            limit,
        } => ModelError::SpendLimit {
            spent: *spent,
            reserved: 0.0,
            estimate: *estimate,
            limit: *limit,
        },
        _ => return None,
    })
}

/// The ledger's totals in one sentence: calls, tokens, dollars, and what
/// was not priced.
pub fn spend_sentence(s: &LedgerSummary) -> String {
    let t = &s.total;
    let mut out = format!(
        "{} upstream completions ({} failed), {} prompt tokens ({} served from the upstream's cache) + {} completion tokens, ${:.4}",
        t.fresh_calls,
        t.failed_calls,
        t.fresh_tokens.prompt_tokens,
        t.fresh_tokens.cached_prompt_tokens,
        t.fresh_tokens.completion_tokens,
        t.usd
    );
    if !s.unpriced_models.is_empty() {
        let names: Vec<&str> = s.unpriced_models.iter().map(String::as_str).collect();
        out += &format!(
            " ({} calls of unpriced models not counted: {}; give their prices with --prices)",
            t.unpriced_fresh_calls,
            names.join(", ")
        );
    }
    out
}

/// The calls of a ledger file (none when it does not exist).
pub fn read_ledger(path: &Path) -> Result<Vec<CallRecord>, RecordsError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(source) => {
            return Err(RecordsError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    Ok(
        crate::records::json_lines(path, &bytes, "a ledger call record")?
            .into_iter()
            .map(|(_, call)| call)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn priced() -> PriceTable {
        PriceTable::from_json_str(
            r#"{"models": {"m": {"prompt_per_mtok": 1000000, "completion_per_mtok": 2000000}}}"#,
        )
        .unwrap()
    }

    fn reply(prompt: u64, completion: u64) -> Value {
        json!({"usage": {"prompt_tokens": prompt, "completion_tokens": completion}})
    }

    #[test]
    fn calls_are_priced_and_persisted_across_processes() {
        let dir = tempfile::tempdir().unwrap();
        let first = ProxyLedger::open(priced(), None, Some(dir.path())).unwrap();
        let cost = first.answered("m", &reply(3, 2), Duration::from_millis(5));
        assert_eq!(cost.usd, Some(7.0));
        first.failed("m", &ProxyError::UpstreamTimeout, Duration::ZERO);
        // Not an upstream call: not recorded.
        first.failed("m", &ProxyError::Unauthorized, Duration::ZERO);
        let second = ProxyLedger::open(priced(), None, Some(dir.path())).unwrap();
        let s = second.summary();
        assert_eq!(s.total.fresh_calls, 1);
        assert_eq!(s.total.failed_calls, 1);
        assert_eq!(s.total.usd, 7.0);
    }

    #[test]
    fn the_limit_counts_earlier_processes_and_refuses_before_sending() {
        let dir = tempfile::tempdir().unwrap();
        let first = ProxyLedger::open(priced(), None, Some(dir.path())).unwrap();
        first.answered("m", &reply(3, 2), Duration::ZERO);
        // $7 spent; a call capped at 1 reply token with an empty body costs
        // at most its prompt estimate plus $2.
        let body = br#"{"max_tokens": 1}"#;
        let second = ProxyLedger::open(priced(), Some(100.0), Some(dir.path())).unwrap();
        assert!(second.admit("m", body).is_ok());
        let third = ProxyLedger::open(priced(), Some(8.0), Some(dir.path())).unwrap();
        match third.admit("m", body) {
            Err(ProxyError::SpendLimit { spent, limit, .. }) => {
                assert_eq!((spent, limit), (7.0, 8.0));
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert_eq!(third.summary().total.failed_calls, 1);
    }

    #[test]
    fn under_a_limit_an_unpriced_model_is_refused_and_without_one_not() {
        let open = ProxyLedger::open(priced(), None, None).unwrap();
        assert!(open.admit("other", b"{}").unwrap().is_none());
        let limited = ProxyLedger::open(priced(), Some(1.0), None).unwrap();
        match limited.admit("other", b"{}") {
            Err(ProxyError::ModelNotPriced { model }) => assert_eq!(model, "other"),
            other => panic!("expected ModelNotPriced, got {other:?}"),
        }
    }

    #[test]
    fn the_reply_cap_is_the_bodys_or_the_uncapped_estimate() {
        assert_eq!(
            reply_cap(br#"{"max_completion_tokens": 9, "max_tokens": 4}"#),
            9
        );
        assert_eq!(reply_cap(br#"{"max_tokens": 4}"#), 4);
        assert_eq!(reply_cap(b"{}"), ecdysis_model::UNCAPPED_REPLY_ESTIMATE);
    }

    #[test]
    fn a_damaged_ledger_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LEDGER_FILE), "{\"seq\": 1}\n").unwrap();
        let e = ProxyLedger::open(priced(), None, Some(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("calls.ledger.jsonl, line 1: not a ledger call record"),
            "{e}"
        );
    }
}

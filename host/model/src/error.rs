//! Typed model errors, classified so the runner knows whether to requeue an
//! episode, score it, or stop the run.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// What a failed call means for the episode that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// The endpoint or the network failed (connection refused, timeouts,
    /// 5xx/429 after every retry, a reply that is not a chat completion).
    /// Not the model's doing: requeue the episode, never score it.
    Infrastructure,
    /// The request or the configuration is wrong (credentials, unknown model
    /// or path, a body the endpoint rejects). Retrying cannot help: stop and
    /// tell the operator, don't score.
    Request,
    /// The conversation is beyond what this model can serve (context length
    /// exceeded): a genuine failure of the episode, score it.
    Model,
}

/// A failed model call. Every variant coming from an endpoint carries the
/// endpoint URL and the endpoint's own message.
#[derive(Debug, Error)]
pub enum ModelError {
    /// The request failed in transport, short of a timeout (connection
    /// refused or reset, DNS, TLS, a broken body).
    #[error("cannot reach {endpoint}: {message}")]
    Connection {
        /// The URL the request went to.
        endpoint: String,
        /// The endpoint's (or the HTTP client's) message.
        message: String,
    },

    /// The attempt ran past the connect or request timeout.
    #[error("request to {endpoint} timed out: {message}")]
    Timeout {
        /// The URL the request went to.
        endpoint: String,
        /// The endpoint's (or the HTTP client's) message.
        message: String,
    },

    /// 5xx or 408: the endpoint is temporarily unable to serve.
    #[error("{endpoint} is unavailable (HTTP {status}): {message}")]
    Unavailable {
        /// The URL the request went to.
        endpoint: String,
        /// The HTTP status.
        status: u16,
        /// The endpoint's (or the HTTP client's) message.
        message: String,
    },

    /// 429. `retry_after_secs` is the endpoint's `Retry-After`, if any.
    #[error("{endpoint} rate-limited the request (HTTP 429): {message}")]
    RateLimited {
        /// The URL the request went to.
        endpoint: String,
        /// The endpoint's (or the HTTP client's) message.
        message: String,
        /// The `Retry-After` wait the endpoint asked for, in seconds.
        retry_after_secs: Option<f64>,
    },

    /// A retryable error persisted through every attempt.
    #[error("gave up on {endpoint} after {attempts} attempt(s): {last}")]
    RetriesExhausted {
        /// The URL the request went to.
        endpoint: String,
        /// Attempts made, the first included.
        attempts: u32,
        /// The error of the last attempt.
        last: Box<ModelError>,
    },

    /// A 2xx reply that is not an OpenAI chat completion (not JSON, no
    /// `choices`, …). Not retried: a server that speaks another protocol
    /// will keep doing so.
    #[error("{endpoint} sent a reply that is not a chat completion: {message}")]
    MalformedResponse {
        /// The URL the request went to.
        endpoint: String,
        /// What is wrong with the reply.
        message: String,
        /// The start of the body, for the log.
        body_excerpt: String,
    },

    /// 401 / 403.
    #[error("{endpoint} refused the credentials (HTTP {status}): {message}")]
    Unauthorized {
        /// The URL the request went to.
        endpoint: String,
        /// The HTTP status.
        status: u16,
        /// The endpoint's (or the HTTP client's) message.
        message: String,
    },

    /// 404: wrong base URL or unknown model.
    #[error("{endpoint} has no such path or model (HTTP 404): {message}")]
    NotFound {
        /// The URL the request went to.
        endpoint: String,
        /// The endpoint's (or the HTTP client's) message.
        message: String,
    },

    /// The prompt does not fit the model's context window.
    #[error("the conversation exceeds the context window at {endpoint}: {message}")]
    ContextLength {
        /// The URL the request went to.
        endpoint: String,
        /// The endpoint's (or the HTTP client's) message.
        message: String,
    },

    /// Any other 4xx.
    #[error("{endpoint} rejected the request (HTTP {status}): {message}")]
    BadRequest {
        /// The URL the request went to.
        endpoint: String,
        /// The HTTP status.
        status: u16,
        /// The endpoint's (or the HTTP client's) message.
        message: String,
    },

    /// A model setting is invalid (no model name, bad extra arguments, an
    /// unknown cache policy or role...), named in the message.
    #[error("invalid model configuration: {0}")]
    Config(String),

    /// The call was not sent: its estimated cost would take the run's spend
    /// past its limit (`--max-usd`, a tenant's `usd_per_day`).
    #[error(
        "not sent: its estimated ${estimate:.4} would take the spend of ${spent:.4} (plus ${reserved:.4} in flight) past the limit of ${limit:.4}"
    )]
    SpendLimit {
        /// Spent so far.
        spent: f64,
        /// Reserved by calls in flight.
        reserved: f64,
        /// This call's estimated cost.
        estimate: f64,
        /// The limit.
        limit: f64,
    },

    /// For non-HTTP models (simulated ones): a failure with an explicit class.
    #[error("{message}")]
    Backend {
        /// What the failure means for the episode.
        class: ErrorClass,
        /// What went wrong.
        message: String,
    },
}

impl ModelError {
    /// What this failure means for the episode: requeue, stop, or score.
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::Connection { .. }
            | Self::Timeout { .. }
            | Self::Unavailable { .. }
            | Self::RateLimited { .. }
            | Self::RetriesExhausted { .. }
            | Self::MalformedResponse { .. } => ErrorClass::Infrastructure,
            Self::Unauthorized { .. }
            | Self::NotFound { .. }
            | Self::BadRequest { .. }
            | Self::Config(_)
            | Self::SpendLimit { .. } => ErrorClass::Request,
            Self::ContextLength { .. } => ErrorClass::Model,
            Self::Backend { class, .. } => *class,
        }
    }

    /// True when the runner should requeue rather than score.
    pub fn is_infrastructure(&self) -> bool {
        self.class() == ErrorClass::Infrastructure
    }

    /// Whether another attempt may succeed (the retry loop's test).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Connection { .. }
                | Self::Timeout { .. }
                | Self::Unavailable { .. }
                | Self::RateLimited { .. }
        )
    }

    /// The HTTP status the endpoint answered, when there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Unavailable { status, .. }
            | Self::Unauthorized { status, .. }
            | Self::BadRequest { status, .. } => Some(*status),
            Self::RateLimited { .. } => Some(429),
            Self::NotFound { .. } => Some(404),
            Self::RetriesExhausted { last, .. } => last.status(),
            _ => None,
        }
    }

    /// The endpoint's (or the transport's) own message.
    pub fn message(&self) -> &str {
        match self {
            Self::Connection { message, .. }
            | Self::Timeout { message, .. }
            | Self::Unavailable { message, .. }
            | Self::RateLimited { message, .. }
            | Self::MalformedResponse { message, .. }
            | Self::Unauthorized { message, .. }
            | Self::NotFound { message, .. }
            | Self::ContextLength { message, .. }
            | Self::BadRequest { message, .. }
            | Self::Config(message)
            | Self::Backend { message, .. } => message,
            Self::RetriesExhausted { last, .. } => last.message(),
            Self::SpendLimit { .. } => "the spending limit would be crossed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        let e = |status| ModelError::Unavailable {
            endpoint: "e".into(),
            status,
            message: "m".into(),
        };
        assert!(e(500).is_infrastructure() && e(500).is_retryable());
        let exhausted = ModelError::RetriesExhausted {
            endpoint: "e".into(),
            attempts: 3,
            last: Box::new(e(503)),
        };
        assert!(exhausted.is_infrastructure() && !exhausted.is_retryable());
        assert_eq!(exhausted.status(), Some(503));
        assert_eq!(exhausted.message(), "m");
        let auth = ModelError::Unauthorized {
            endpoint: "e".into(),
            status: 401,
            message: "bad key".into(),
        };
        assert_eq!(auth.class(), ErrorClass::Request);
        assert!(!auth.is_retryable());
        let ctx = ModelError::ContextLength {
            endpoint: "e".into(),
            message: "too long".into(),
        };
        assert_eq!(ctx.class(), ErrorClass::Model);
    }
}

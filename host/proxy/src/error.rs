//! The proxy's typed errors and their OpenAI-style answers.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Why the proxy could not answer a request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProxyError {
    /// The client's body is not a valid Chat Completions request; `param`
    /// names the field (`messages[2].tool_call_id`), when there is one.
    #[error("{message}")]
    InvalidRequest {
        /// What is wrong.
        message: String,
        /// The offending field, in the request's own terms.
        param: Option<String>,
    },
    /// The body is larger than `--max-request-bytes`.
    #[error("the request body is larger than {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The client sent no key, or one not in `--api-keys`.
    #[error("a valid API key is required (Authorization: Bearer <key>)")]
    Unauthorized,
    /// More conversations are being served than `--max-conversations`.
    #[error("the proxy is serving {limit} requests already; retry shortly")]
    Busy {
        /// The limit.
        limit: usize,
    },
    /// The upstream could not be reached (refused, reset, DNS).
    #[error("the upstream could not be reached: {0}")]
    UpstreamUnreachable(String),
    /// The upstream did not answer within `--upstream-timeout`.
    #[error("the upstream did not answer in time")]
    UpstreamTimeout,
    /// The upstream answered 2xx with something that is not a chat
    /// completion.
    #[error("the upstream's answer is not a chat completion: {0}")]
    UpstreamInvalid(String),
    /// The upstream answered with an error status; its status and body are
    /// passed on as they are (a 401 or 429 means the same to the client).
    #[error("the upstream answered {status}")]
    UpstreamStatus {
        /// The upstream's status code.
        status: u16,
        /// The upstream's body.
        body: String,
    },
    /// The harness failed under the fail-closed policy.
    #[error("the harness failed: {0}")]
    Harness(String),
    /// The host had no harness instance to spare (its pool is full).
    #[error("no harness instance is available: {0}")]
    Unavailable(String),
    /// The call was not sent: its estimated cost would take the ledger's
    /// spend past `--max-usd`.
    #[error(
        "the proxy's spending limit is reached: ${spent:.4} spent, this request could cost ${estimate:.4}, the limit is ${limit:.4} (--max-usd)"
    )]
    SpendLimit {
        /// USD spent so far (earlier processes on the records included).
        spent: f64,
        /// What the request could cost.
        estimate: f64,
        /// The limit.
        limit: f64,
    },
    /// A records directory's earlier ledger could not be read (at start,
    /// never for a request); the message names the file and line.
    #[error("{0}")]
    RecordsUnreadable(String),
    /// Under a spending limit, the request's model has no price.
    #[error(
        "the proxy has a spending limit and no price for model `{model}`; add it to the --prices table"
    )]
    ModelNotPriced {
        /// The request's `model`.
        model: String,
    },
    /// The records directory's manifest could not be written (at start,
    /// never for a request).
    #[error("cannot write the records directory {}: {reason}", dir.display())]
    RecordsUnwritable {
        /// The directory.
        dir: std::path::PathBuf,
        /// The I/O error.
        reason: String,
    },
}

impl ProxyError {
    /// A 400 naming `param`.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        ProxyError::InvalidRequest {
            message: message.into(),
            param: Some(param.into()),
        }
    }

    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::InvalidRequest { .. } => StatusCode::BAD_REQUEST,
            ProxyError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::Unauthorized => StatusCode::UNAUTHORIZED,
            ProxyError::Busy { .. } => StatusCode::TOO_MANY_REQUESTS,
            ProxyError::UpstreamUnreachable(_) | ProxyError::UpstreamInvalid(_) => {
                StatusCode::BAD_GATEWAY
            }
            ProxyError::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::UpstreamStatus { status, .. } => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY)
            }
            ProxyError::Harness(_)
            | ProxyError::RecordsUnwritable { .. }
            | ProxyError::RecordsUnreadable(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ProxyError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            // OpenAI's answer when an account's quota is spent.
            ProxyError::SpendLimit { .. } => StatusCode::TOO_MANY_REQUESTS,
            ProxyError::ModelNotPriced { .. } => StatusCode::BAD_REQUEST,
        }
    }

    /// The `type` field of the error body.
    pub fn kind(&self) -> &'static str {
        match self {
            ProxyError::InvalidRequest { .. } => "invalid_request_error",
            ProxyError::TooLarge { .. } => "request_too_large",
            ProxyError::Unauthorized => "invalid_api_key",
            ProxyError::Busy { .. } => "proxy_busy",
            ProxyError::UpstreamUnreachable(_) => "upstream_unreachable",
            ProxyError::UpstreamTimeout => "upstream_timeout",
            ProxyError::UpstreamInvalid(_) => "upstream_invalid",
            ProxyError::UpstreamStatus { .. } => "upstream_error",
            ProxyError::Harness(_) => "harness_error",
            ProxyError::Unavailable(_) => "harness_unavailable",
            ProxyError::RecordsUnwritable { .. } => "records_unwritable",
            ProxyError::RecordsUnreadable(_) => "records_unreadable",
            ProxyError::SpendLimit { .. } => "insufficient_quota",
            ProxyError::ModelNotPriced { .. } => "model_not_priced",
        }
    }

    /// The OpenAI-style body: `{"error": {"message", "type", "param"}}`.
    pub fn body(&self) -> serde_json::Value {
        let param = match self {
            ProxyError::InvalidRequest { param, .. } => param.clone(),
            ProxyError::ModelNotPriced { .. } => Some("model".into()),
            _ => None,
        };
        json!({"error": {"message": self.to_string(), "type": self.kind(), "param": param}})
    }
}

impl IntoResponse for ProxyError {
    fn into_response(self) -> Response {
        if let ProxyError::UpstreamStatus { body, .. } = &self {
            let mut response = (self.status(), body.clone()).into_response();
            response.headers_mut().insert(
                axum::http::header::CONTENT_TYPE,
                axum::http::HeaderValue::from_static("application/json"),
            );
            return response;
        }
        (self.status(), axum::Json(self.body())).into_response()
    }
}

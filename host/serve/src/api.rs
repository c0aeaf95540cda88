//! The HTTP API (axum, on the tokio runtime and the hyper 1 / tower stack
//! already in the tree through reqwest: the well-kept choice of the tokio
//! project, with typed extractors and graceful shutdown).
//!
//! Hardening: every answer — errors included — is JSON (`{"error": {"code",
//! "message", …}}`), bodies are capped (JSON bodies at `[http]
//! max_json_bytes`, uploads at the tenant's `upload_bytes` and the server's
//! `max_upload_bytes`, checked from `Content-Length` before reading),
//! requests time out (`[http] request_timeout_seconds`, except the event
//! stream and trajectory downloads), tokens are only ever compared by
//! hash and never logged, and anything a tenant does not own or was not
//! granted answers the same 404 as something that does not exist.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header, request::Parts};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::Service;
use super::audit::{self, kind};
use super::db::{DbError, now_ms};
use super::evaluations::{self, CreateError, EvaluationRequest};
use super::harnesses::{self, HarnessInfo};
use super::quota::QuotaExceeded;
use super::scheduler;
use super::staging::Staged;
use super::tenants::{self, Tenant};
use ecdysis_runner::isolate::{Outcome, Reply, Request as WorkerRequest};
use ecdysis_sandbox::store::ComponentHash;

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    quota: Option<QuotaExceeded>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            quota: None,
        }
    }

    /// The one answer for "not yours or not there".
    pub fn not_found(what: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no such {what}"),
        )
    }

    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid", message)
    }

    fn quota(q: QuotaExceeded) -> ApiError {
        ApiError {
            status: StatusCode::from_u16(q.status).unwrap_or(StatusCode::TOO_MANY_REQUESTS),
            code: "quota_exceeded",
            message: q.message(),
            quota: Some(q),
        }
    }

    fn internal(context: &str, e: impl std::fmt::Display) -> ApiError {
        // The detail goes to the server log, not to the client.
        tracing::error!("{context}: {e}");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("internal error while trying to {context}"),
        )
    }
}

impl From<DbError> for ApiError {
    fn from(e: DbError) -> ApiError {
        ApiError::internal("use the database", e)
    }
}

impl From<CreateError> for ApiError {
    fn from(e: CreateError) -> ApiError {
        match e {
            CreateError::NotFound(what) => ApiError::not_found(what),
            CreateError::Invalid(m) => ApiError::invalid(m),
            CreateError::Quota(q) => ApiError::quota(q),
            CreateError::Db(e) => e.into(),
            CreateError::Internal(m) => ApiError::internal("serve the evaluation", m),
        }
    }
}

/// The `error` object of every refusal, including those written before a
/// request reaches the router ([`super::listen`]).
pub fn error_object(code: &str, message: &str) -> serde_json::Value {
    serde_json::json!({"code": code, "message": message})
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = error_object(self.code, &self.message);
        let mut retry = None;
        if let Some(q) = &self.quota {
            error["quota"] = q.quota.into();
            error["limit"] = q.limit.into();
            error["used"] = q.used.into();
            if let Some(r) = q.retry_after {
                let secs = r.as_secs_f64().ceil().max(1.0) as u64;
                error["retry_after_seconds"] = secs.into();
                retry = Some(secs);
            }
        }
        let mut response = (
            self.status,
            axum::Json(serde_json::json!({ "error": error })),
        )
            .into_response();
        if let Some(secs) = retry {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// The authenticated tenant of a request (after its rate check).
pub struct Auth(pub Tenant);

impl FromRequestParts<Arc<Service>> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, svc: &Arc<Service>) -> ApiResult<Auth> {
        let token = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let tenant = match token {
            Some(t) if !t.is_empty() => tenants::authenticate(&svc.db, t).await?,
            _ => None,
        };
        let Some(tenant) = tenant else {
            let revoked = match token {
                Some(t) if !t.is_empty() => tenants::revoked_owner(&svc.db, t).await?,
                _ => None,
            };
            // Each kind of failure is audited from a bucket of its own (a
            // flood is summarised by the refusals it gets, not written
            // record by record): anyone can send no token or a made-up
            // one, but only a tenant's holder its revoked token, so a
            // stranger's flood never crowds out the record of a revoked
            // token in use.
            let (reason, bucket, rate, owner) = match (token, &revoked) {
                (_, Some((id, name))) => ("revoked token", *id, 1.0, Some(name.as_str())),
                (Some(_), None) => ("unknown or revoked token", -2, 5.0, None),
                (None, None) => ("no bearer token", -1, 5.0, None),
            };
            if svc.auth_audit_rate.take(bucket, rate).is_ok() {
                audit::record(
                    &svc.db,
                    kind::AUTH_FAILURE,
                    owner,
                    serde_json::json!({"reason": reason, "method": parts.method.as_str(), "path": parts.uri.path()}),
                )
                .await?;
            }
            let reason = if token.is_some() {
                "unknown or revoked token"
            } else {
                "no bearer token"
            };
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                format!("{reason}: send `Authorization: Bearer <token>`"),
            ));
        };
        let quotas = tenant.quotas(&svc.config.quotas);
        if let Err(wait) = svc
            .take_request_token(tenant.id, quotas.requests_per_second)
            .await?
        {
            let q = QuotaExceeded {
                quota: "requests_per_second",
                limit: quotas.requests_per_second,
                used: quotas.requests_per_second,
                retry_after: Some(wait),
                status: 429,
            };
            // One audit record per tenant per second at most.
            if svc.audit_rate.take(tenant.id, 0.5).is_ok() {
                evaluations::refuse(&svc.db, &tenant, &q, parts.uri.path()).await?;
            }
            return Err(ApiError::quota(q));
        }
        Ok(Auth(tenant))
    }
}

/// A JSON body (capped by the route's body limit) with errors as JSON.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Arc<Service>> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, svc: &Arc<Service>) -> ApiResult<JsonBody<T>> {
        let bytes = Bytes::from_request(req, svc).await.map_err(|_| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!(
                    "the request body is larger than {} bytes, or was cut off",
                    svc.config.http.max_json_bytes
                ),
            )
        })?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
    }
}

/// Every route.
pub fn router(svc: Arc<Service>) -> Router {
    let json_limit = DefaultBodyLimit::max(svc.config.http.max_json_bytes);
    Router::new()
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/health", get(health))
        .route("/v1/models", get(models))
        .route("/v1/usage", get(usage))
        .route(
            "/v1/harnesses",
            post(upload)
                .layer(DefaultBodyLimit::disable())
                .get(list_harnesses),
        )
        .route("/v1/harnesses/{hash}", get(get_harness))
        .route("/v1/harnesses/{hash}/grants", post(grant))
        .route("/v1/harnesses/{hash}/grants/{tenant}", delete(revoke_grant))
        .route(
            "/v1/evaluations",
            post(create_evaluation).get(list_evaluations),
        )
        .route(
            "/v1/evaluations/{id}",
            get(get_evaluation).delete(cancel_evaluation),
        )
        .route("/v1/evaluations/{id}/events", get(events))
        .route("/v1/evaluations/{id}/trajectories", get(trajectories))
        .route("/v1/evaluations/{id}/report", get(report))
        .fallback(|| async { ApiError::not_found("route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this route does not take that method",
            )
        })
        .layer(json_limit)
        .layer(middleware::from_fn_with_state(svc.clone(), harden))
        .with_state(svc)
}

/// Time limit and one log line per request (method, path, status, time;
/// never headers, so never a token).
async fn harden(State(svc): State<Arc<Service>>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let streaming = path.ends_with("/events") || path.ends_with("/trajectories");
    let response = if streaming {
        next.run(req).await
    } else {
        let limit = Duration::from_secs(svc.config.http.request_timeout_seconds);
        match tokio::time::timeout(limit, next.run(req)).await {
            Ok(r) => r,
            Err(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "timeout",
                format!("the request took longer than {} s", limit.as_secs()),
            )
            .into_response(),
        }
    };
    tracing::info!(
        target: "ecdysis::serve",
        %method, path, status = response.status().as_u16(), ms = started.elapsed().as_millis() as u64,
        "request"
    );
    response
}

async fn openapi() -> impl IntoResponse {
    axum::Json(super::openapi::document())
}

async fn health() -> impl IntoResponse {
    axum::Json(serde_json::json!({"status": "ok"}))
}

async fn models(State(svc): State<Arc<Service>>, Auth(_): Auth) -> impl IntoResponse {
    let models: Vec<serde_json::Value> = svc
        .config
        .models
        .iter()
        .map(|(name, a)| {
            serde_json::json!({
                "alias": name,
                "simulated": a.is_simulated(),
                "priced": a.prompt_per_mtok.is_some(),
            })
        })
        .collect();
    axum::Json(serde_json::json!({"models": models, "user_simulators": ["scripted"]}))
}

async fn usage(State(svc): State<Arc<Service>>, Auth(t): Auth) -> ApiResult<impl IntoResponse> {
    let mut conn = svc
        .db
        .pool()
        .acquire()
        .await
        .map_err(|e| ApiError::internal("use the database", e))?;
    let today = evaluations::daily_use(&mut conn, t.id).await?;
    let stored = harnesses::stored_bytes(&svc.db, t.id).await?;
    Ok(axum::Json(serde_json::json!({
        "tenant": t.name,
        "quotas": t.quotas(&svc.config.quotas),
        "today": today,
        "stored_bytes": stored,
    })))
}

async fn upload(
    State(svc): State<Arc<Service>>,
    Auth(t): Auth,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match receive_upload(svc, t, headers, body).await {
        Ok(r) => r.into_response(),
        Err(e) => {
            // An upload refused before its body was read leaves the rest of
            // the body on the connection: close it, so the client does not
            // send its next request down a connection the server drops.
            let refused_early = e.status == StatusCode::PAYLOAD_TOO_LARGE
                || e.status == StatusCode::REQUEST_TIMEOUT;
            let mut r = e.into_response();
            if refused_early {
                r.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            r
        }
    }
}

async fn receive_upload(
    svc: Arc<Service>,
    t: Tenant,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<impl IntoResponse> {
    let quotas = t.quotas(&svc.config.quotas);
    let cap = (quotas.upload_bytes as usize).min(svc.config.http.max_upload_bytes);
    let too_big = |size: f64| QuotaExceeded {
        quota: if quotas.upload_bytes as usize <= svc.config.http.max_upload_bytes {
            "upload_bytes"
        } else {
            "max_upload_bytes"
        },
        limit: cap as f64,
        used: size,
        retry_after: None,
        status: 413,
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if let Some(n) = declared
        && n > cap
    {
        let q = too_big(n as f64);
        evaluations::refuse(&svc.db, &t, &q, "upload").await?;
        return Err(ApiError::quota(q));
    }
    let read = tokio::time::timeout(
        Duration::from_secs(svc.config.http.request_timeout_seconds),
        axum::body::to_bytes(body, cap),
    )
    .await;
    let bytes = match read {
        Ok(Ok(b)) => b,
        Ok(Err(_)) => {
            let q = too_big((cap + 1) as f64);
            evaluations::refuse(&svc.db, &t, &q, "upload").await?;
            return Err(ApiError::quota(q));
        }
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                "the upload was not received in time",
            ));
        }
    };
    if bytes.is_empty() {
        return Err(ApiError::bad_request(
            "the body must be the component's .wasm bytes",
        ));
    }
    let info = check_and_store(&svc, &t, &bytes).await?;
    Ok((StatusCode::CREATED, axum::Json(info)))
}

/// Compile and check an upload in a worker process, then record it.
async fn check_and_store(svc: &Arc<Service>, t: &Tenant, bytes: &[u8]) -> ApiResult<HarnessInfo> {
    let hash = ComponentHash::of(bytes);
    let quotas = t.quotas(&svc.config.quotas);
    if !harnesses::owns(&svc.db, t.id, hash.as_str()).await? {
        // Early, so an upload that cannot fit is not compiled; `save`
        // decides.
        let stored = harnesses::stored_bytes(&svc.db, t.id).await?;
        let after = stored + bytes.len() as i64;
        if after > quotas.stored_bytes as i64 {
            let q = harnesses::stored_bytes_exceeded(quotas.stored_bytes, after);
            evaluations::refuse(&svc.db, t, &q, "upload").await?;
            return Err(ApiError::quota(q));
        }
    }
    // Staged for the checking worker; compiled from these bytes every time
    // (never from an artifact another tenant's upload left, never skipped
    // for bytes already stored), so an upload does the same work whether
    // or not another tenant uploaded the same bytes: same check, same
    // writes (see `harnesses::save`), same answer.
    let staged = svc
        .state
        .dir("uploads")
        .and_then(|uploads| Staged::write(uploads, bytes))
        .map_err(|e| ApiError::internal("stage the upload", e))?;
    let outcome = svc
        .check_pool
        .request(
            WorkerRequest::Check {
                path: std::path::absolute(staged.path()).unwrap_or_else(|_| staged.path()),
                limits: ecdysis_sandbox::sandbox::Limits {
                    wasi: svc.config.limits.wasi,
                    ..Default::default()
                },
                cpu_seconds: svc.check_pool.limits().cpu_per_request.as_secs(),
            },
            None,
        )
        .await;
    drop(staged);
    let report = match outcome {
        Outcome::Reply(Reply::Checked { report }) => *report,
        Outcome::Reply(Reply::Error { message, .. }) => {
            return Err(ApiError::internal("check the upload", message));
        }
        Outcome::Reply(other) => {
            return Err(ApiError::internal("check the upload", format!("{other:?}")));
        }
        Outcome::Died(death) => {
            audit::record(
                &svc.db,
                kind::WORKER_CRASH,
                Some(&t.name),
                serde_json::json!({"upload": hash.as_str(), "detail": death.describe()}),
            )
            .await?;
            return Err(ApiError::invalid(format!(
                "checking the component stopped its worker: {}",
                death.describe()
            )));
        }
    };
    if let Some(error) = &report.error {
        audit::record(
            &svc.db,
            kind::UPLOAD_REFUSED,
            Some(&t.name),
            serde_json::json!({"hash": hash.as_str(), "size": bytes.len(), "reason": error}),
        )
        .await?;
        return Err(ApiError::invalid(format!(
            "not a component this service can run: {error}"
        )));
    }
    // The database is where components live (workers and evaluations put
    // them in their machine's store on first use, `ensure_local`); the
    // upload writes nothing else, so no file write betrays whether the
    // bytes were stored before.
    match harnesses::save(&svc.db, t.id, &t.name, bytes, &report, quotas.stored_bytes).await? {
        Ok(info) => Ok(info),
        Err(q) => {
            evaluations::refuse(&svc.db, t, &q, "upload").await?;
            Err(ApiError::quota(q))
        }
    }
}

async fn list_harnesses(
    State(svc): State<Arc<Service>>,
    Auth(t): Auth,
) -> ApiResult<impl IntoResponse> {
    Ok(axum::Json(
        serde_json::json!({"harnesses": harnesses::list(&svc.db, t.id).await?}),
    ))
}

async fn get_harness(
    State(svc): State<Arc<Service>>,
    Auth(t): Auth,
    Path(hash): Path<String>,
) -> ApiResult<impl IntoResponse> {
    harnesses::visible(&svc.db, t.id, &hash)
        .await?
        .map(axum::Json)
        .ok_or_else(|| ApiError::not_found("harness"))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantRequest {
    tenant: String,
}

async fn grant(
    State(svc): State<Arc<Service>>,
    Auth(t): Auth,
    Path(hash): Path<String>,
    JsonBody(req): JsonBody<GrantRequest>,
) -> ApiResult<impl IntoResponse> {
    if !harnesses::owns(&svc.db, t.id, &hash).await? {
        return Err(ApiError::not_found("harness"));
    }
    if req.tenant == t.name {
        return Err(ApiError::invalid("a tenant cannot grant itself"));
    }
    // Answered alike whether or not the name is a tenant's: a grant must
    // not be a way to learn which names exist.
    let grantee = tenants::id_of(&svc.db, &req.tenant).await?;
    if !harnesses::grant(&svc.db, t.id, &t.name, &hash, grantee, &req.tenant).await? {
        return Err(ApiError::not_found("harness"));
    }
    Ok((
        StatusCode::CREATED,
        axum::Json(serde_json::json!({"hash": hash, "tenant": req.tenant})),
    ))
}

async fn revoke_grant(
    State(svc): State<Arc<Service>>,
    Auth(t): Auth,
    Path((hash, tenant)): Path<(String, String)>,
) -> ApiResult<impl IntoResponse> {
    let grantee = tenants::id_of(&svc.db, &tenant).await?;
    if !harnesses::revoke_grant(&svc.db, t.id, &t.name, &hash, grantee, &tenant).await? {
        return Err(ApiError::not_found("grant"));
    }
    Ok(StatusCode::NO_CONTENT)
}

async fn create_evaluation(
    State(svc): State<Arc<Service>>,
    Auth(t): Auth,
    JsonBody(req): JsonBody<EvaluationRequest>,
) -> ApiResult<impl IntoResponse> {
    let created = evaluations::create(&svc, &t, req).await?;
    Ok((StatusCode::CREATED, axum::Json(created)))
}

async fn list_evaluations(
    State(svc): State<Arc<Service>>,
    Auth(t): Auth,
) -> ApiResult<impl IntoResponse> {
    Ok(axum::Json(
        serde_json::json!({"evaluations": evaluations::list(&svc, &t).await?}),
    ))
}

async fn get_evaluation(
    State(svc): State<Arc<Service>>,
    Auth(t): Auth,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    evaluations::status(&svc, &t, &id)
        .await?
        .map(axum::Json)
        .ok_or_else(|| ApiError::not_found("evaluation"))
}

async fn cancel_evaluation(
    State(svc): State<Arc<Service>>,
    Auth(t): Auth,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    match scheduler::cancel(&svc.db, t.id, &t.name, &id).await? {
        None => Err(ApiError::not_found("evaluation")),
        Some(_) => evaluations::status(&svc, &t, &id)
            .await?
            .map(axum::Json)
            .ok_or_else(|| ApiError::not_found("evaluation")),
    }
}

/// Server-sent events: one `episode` event per finished (or cancelled)
/// episode, in completion order (`id` is the completion sequence number, so
/// a client reconnecting with `Last-Event-ID` misses nothing), then one
/// `end` event with the final status. At most `[http]
/// event_streams_per_tenant` open per tenant.
async fn events(
    State(svc): State<Arc<Service>>,
    Auth(t): Auth,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<impl IntoResponse> {
    if !evaluations::owned(&svc.db, t.id, &id).await? {
        return Err(ApiError::not_found("evaluation"));
    }
    let changes = match svc.events.subscribe(t.id, &id) {
        Ok(c) => c,
        Err(limit) => {
            let q = QuotaExceeded {
                quota: "event_streams_per_tenant",
                limit: limit as f64,
                used: limit as f64,
                retry_after: Some(Duration::from_secs(1)),
                status: 429,
            };
            if svc.audit_rate.take(t.id, 0.5).is_ok() {
                evaluations::refuse(&svc.db, &t, &q, "events").await?;
            }
            return Err(ApiError::quota(q));
        }
    };
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(0);
    struct Stream {
        svc: Arc<Service>,
        tenant: Tenant,
        id: String,
        after: i64,
        pending: std::collections::VecDeque<serde_json::Value>,
        ended: bool,
        changes: super::events::Subscription,
    }
    let start = Stream {
        changes,
        svc,
        tenant: t,
        id,
        after,
        pending: Default::default(),
        ended: false,
    };
    let stream = futures_util::stream::unfold(start, |mut s| async move {
        loop {
            if let Some(v) = s.pending.pop_front() {
                let seq = v["seq"].as_i64().unwrap_or(0);
                s.after = s.after.max(seq);
                let event = Event::default()
                    .event("episode")
                    .id(seq.to_string())
                    .json_data(&v)
                    .unwrap_or_default();
                return Some((Ok::<_, Infallible>(event), s));
            }
            if s.ended {
                return None;
            }
            match scheduler::completions(&s.svc.db, &s.id, s.after).await {
                Ok(items) if !items.is_empty() => {
                    s.pending.extend(items);
                    continue;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("event stream: {e}"),
            }
            if let Ok(Some(status)) = evaluations::status(&s.svc, &s.tenant, &s.id).await
                && status.state != evaluations::state::RUNNING
            {
                // Anything that finished between the two reads first.
                if let Ok(items) = scheduler::completions(&s.svc.db, &s.id, s.after).await
                    && !items.is_empty()
                {
                    s.pending.extend(items);
                    continue;
                }
                s.ended = true;
                let event = Event::default()
                    .event("end")
                    .json_data(&status)
                    .unwrap_or_default();
                return Some((Ok(event), s));
            }
            // Woken by the shared poller; the bound covers a poll that
            // failed.
            s.changes.changed(Duration::from_secs(5)).await;
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// The finished episodes' records as JSON lines, in episode order,
/// streamed page by page.
async fn trajectories(
    State(svc): State<Arc<Service>>,
    Auth(t): Auth,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    if !evaluations::owned(&svc.db, t.id, &id).await? {
        return Err(ApiError::not_found("evaluation"));
    }
    let stream = futures_util::stream::unfold(Some(-1i64), move |after| {
        let (svc, id) = (svc.clone(), id.clone());
        async move {
            let after = after?;
            match evaluations::records_page(&svc.db, &id, after, 200).await {
                Ok(page) if page.is_empty() => None,
                Ok(page) => {
                    let next = page.last().map(|(i, _)| *i);
                    let mut bytes = Vec::new();
                    for (_, record) in page {
                        bytes.extend(record.into_bytes());
                        bytes.push(b'\n');
                    }
                    Some((Ok::<_, std::io::Error>(Bytes::from(bytes)), next))
                }
                Err(e) => Some((Err(std::io::Error::other(e.to_string())), None)),
            }
        }
    });
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(stream),
    ))
}

async fn report(
    State(svc): State<Arc<Service>>,
    Auth(t): Auth,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    if !evaluations::owned(&svc.db, t.id, &id).await? {
        return Err(ApiError::not_found("evaluation"));
    }
    let (html, served) = evaluations::report(&svc, t.id, &id).await?;
    Ok((
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::HeaderName::from_static("x-report-cache"),
                served.header(),
            ),
        ],
        html,
    ))
}

/// Seconds since the epoch, for logs that need a coarse time.
pub fn now_secs() -> i64 {
    now_ms() / 1000
}

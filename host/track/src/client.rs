//! The few MLflow REST calls tracking needs (API 2.0): experiments by
//! name, runs created, searched by tag, logged in batches and finished,
//! and artifacts uploaded through the server's artifact proxy.

use std::time::Duration;

use serde_json::{Value, json};

/// Most metrics, params and tags in one `log-batch` (MLflow's limits are
/// 1000 metrics, 100 params, 100 tags and 1000 items in all).
pub const BATCH_METRICS: usize = 500;
/// See [`BATCH_METRICS`].
pub const BATCH_PARAMS: usize = 100;
/// See [`BATCH_METRICS`].
pub const BATCH_TAGS: usize = 100;

/// Why a call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// The server could not be reached or did not answer in time: worth
    /// retrying later.
    #[error("cannot reach the MLflow server at {url}: {reason}")]
    Unreachable {
        /// The URL called.
        url: String,
        /// The transport's error.
        reason: String,
    },
    /// The server answered with an error status.
    #[error("the MLflow server answered {status} to {url}: {body}")]
    Status {
        /// The URL called.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The start of the answer's body.
        body: String,
    },
    /// The answer is not what the API documents.
    #[error("unexpected answer from {url}: {reason}")]
    Answer {
        /// The URL called.
        url: String,
        /// What was missing.
        reason: String,
    },
}

impl ClientError {
    /// Worth retrying later (not a refusal of this very request).
    pub fn transient(&self) -> bool {
        match self {
            ClientError::Unreachable { .. } => true,
            ClientError::Status { status, .. } => *status == 429 || *status >= 500,
            ClientError::Answer { .. } => false,
        }
    }
}

/// A run as the server knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInfo {
    /// Its id.
    pub run_id: String,
    /// Where its artifacts go (`mlflow-artifacts:/…` when the server
    /// proxies them).
    pub artifact_uri: String,
}

/// A client of one tracking server.
#[derive(Clone)]
pub struct MlflowClient {
    base: String,
    http: reqwest::Client,
}

impl MlflowClient {
    /// A client of the server at `uri` (`http(s)://host:port[/prefix]`),
    /// each request bounded by `timeout`.
    pub fn new(uri: &str, timeout: Duration) -> Result<Self, crate::TrackError> {
        let base = uri.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(crate::TrackError::Uri(uri.to_string()));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .timeout(timeout)
            .build()
            .map_err(|e| crate::TrackError::Uri(format!("{uri} ({e})")))?;
        Ok(MlflowClient { base, http })
    }

    /// The server's URI.
    pub fn uri(&self) -> &str {
        &self.base
    }

    async fn send(&self, req: reqwest::RequestBuilder, url: &str) -> Result<Value, ClientError> {
        let resp = req.send().await.map_err(|e| ClientError::Unreachable {
            url: url.to_string(),
            reason: e.to_string(),
        })?;
        let status = resp.status().as_u16();
        let text = resp.text().await.map_err(|e| ClientError::Unreachable {
            url: url.to_string(),
            reason: e.to_string(),
        })?;
        if !(200..300).contains(&status) {
            return Err(ClientError::Status {
                url: url.to_string(),
                status,
                body: text.chars().take(300).collect(),
            });
        }
        if text.trim().is_empty() {
            return Ok(json!({}));
        }
        serde_json::from_str(&text).map_err(|e| ClientError::Answer {
            url: url.to_string(),
            reason: format!("not JSON ({e})"),
        })
    }

    async fn post(&self, path: &str, body: Value) -> Result<Value, ClientError> {
        let url = format!("{}/api/2.0/mlflow/{path}", self.base);
        self.send(self.http.post(&url).json(&body), &url).await
    }

    /// The id of experiment `name`, created if missing.
    pub async fn experiment_id(&self, name: &str) -> Result<String, ClientError> {
        let url = format!("{}/api/2.0/mlflow/experiments/get-by-name", self.base);
        match self
            .send(
                self.http.get(&url).query(&[("experiment_name", name)]),
                &url,
            )
            .await
        {
            Ok(v) => str_at(&v, &["experiment", "experiment_id"], &url),
            Err(ClientError::Status { status: 404, .. }) => {
                let v = self
                    .post("experiments/create", json!({ "name": name }))
                    .await?;
                str_at(&v, &["experiment_id"], "experiments/create")
            }
            Err(e) => Err(e),
        }
    }

    /// The run of `experiment_id` tagged `tag = value`, if any.
    pub async fn find_run(
        &self,
        experiment_id: &str,
        tag: &str,
        value: &str,
    ) -> Result<Option<RunInfo>, ClientError> {
        let v = self
            .post(
                "runs/search",
                json!({
                    "experiment_ids": [experiment_id],
                    "filter": format!("tags.`{tag}` = '{}'", value.replace('\'', "")),
                    "max_results": 1,
                }),
            )
            .await?;
        match v
            .get("runs")
            .and_then(Value::as_array)
            .and_then(|r| r.first())
        {
            Some(run) => run_info(run, "runs/search").map(Some),
            None => Ok(None),
        }
    }

    /// A new run.
    pub async fn create_run(
        &self,
        experiment_id: &str,
        name: &str,
        start_ms: i64,
        tags: &[(String, String)],
    ) -> Result<RunInfo, ClientError> {
        let v = self
            .post(
                "runs/create",
                json!({
                    "experiment_id": experiment_id,
                    "run_name": name,
                    "start_time": start_ms,
                    "tags": pairs(tags),
                }),
            )
            .await?;
        run_info(v.get("run").unwrap_or(&Value::Null), "runs/create")
    }

    /// Logs params, tags and metrics (`(key, value, step, timestamp ms)`)
    /// in one batch; the caller keeps each list within the batch limits.
    pub async fn log_batch(
        &self,
        run_id: &str,
        params: &[(String, String)],
        tags: &[(String, String)],
        metrics: &[(String, f64, i64, i64)],
    ) -> Result<(), ClientError> {
        let metrics: Vec<Value> = metrics
            .iter()
            .map(|(key, value, step, ts)| {
                json!({"key": key, "value": value, "step": step, "timestamp": ts})
            })
            .collect();
        self.post(
            "runs/log-batch",
            json!({
                "run_id": run_id,
                "params": pairs(params),
                "tags": pairs(tags),
                "metrics": metrics,
            }),
        )
        .await
        .map(|_| ())
    }

    /// The `(step, value)` history of one metric.
    pub async fn metric_history(
        &self,
        run_id: &str,
        key: &str,
    ) -> Result<Vec<(i64, f64)>, ClientError> {
        let url = format!("{}/api/2.0/mlflow/metrics/get-history", self.base);
        let v = self
            .send(
                self.http
                    .get(&url)
                    .query(&[("run_id", run_id), ("metric_key", key)]),
                &url,
            )
            .await?;
        Ok(v.get("metrics")
            .and_then(Value::as_array)
            .map(|ms| {
                ms.iter()
                    .filter(|m| m.get("key").is_none_or(|k| k == key))
                    .map(|m| {
                        (
                            m.get("step").and_then(Value::as_i64).unwrap_or(0),
                            m.get("value").and_then(Value::as_f64).unwrap_or(f64::NAN),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Marks the run finished.
    pub async fn finish_run(&self, run_id: &str, end_ms: i64) -> Result<(), ClientError> {
        self.post(
            "runs/update",
            json!({"run_id": run_id, "status": "FINISHED", "end_time": end_ms}),
        )
        .await
        .map(|_| ())
    }

    /// Uploads one artifact to a run whose artifacts the server proxies
    /// (`mlflow-artifacts:` URIs, `mlflow server`'s default).
    pub async fn put_artifact(
        &self,
        run: &RunInfo,
        path: &str,
        bytes: Vec<u8>,
    ) -> Result<(), ClientError> {
        let url = self.artifact_url(run, path)?;
        self.send(self.http.put(&url).body(bytes), &url)
            .await
            .map(|_| ())
    }

    fn artifact_url(&self, run: &RunInfo, path: &str) -> Result<String, ClientError> {
        let rest = run
            .artifact_uri
            .strip_prefix("mlflow-artifacts:")
            .ok_or_else(|| ClientError::Answer {
                url: self.base.clone(),
                reason: format!(
                    "the run's artifact store is `{}`, which the server does not serve over HTTP (start it with --serve-artifacts)",
                    run.artifact_uri
                ),
            })?;
        // `mlflow-artifacts:/1/<run>/artifacts` or `mlflow-artifacts://host/1/...`.
        let rest = match rest.strip_prefix("//") {
            Some(r) => r.split_once('/').map_or("", |(_, p)| p),
            None => rest.trim_start_matches('/'),
        };
        Ok(format!(
            "{}/api/2.0/mlflow-artifacts/artifacts/{rest}/{path}",
            self.base
        ))
    }
}

fn pairs(items: &[(String, String)]) -> Vec<Value> {
    items
        .iter()
        .map(|(k, v)| json!({"key": k, "value": v}))
        .collect()
}

fn str_at(v: &Value, path: &[&str], url: &str) -> Result<String, ClientError> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p).unwrap_or(&Value::Null);
    }
    cur.as_str()
        .map(str::to_string)
        .ok_or_else(|| ClientError::Answer {
            url: url.to_string(),
            reason: format!("no {}", path.join(".")),
        })
}

fn run_info(run: &Value, url: &str) -> Result<RunInfo, ClientError> {
    Ok(RunInfo {
        run_id: str_at(run, &["info", "run_id"], url)?,
        artifact_uri: str_at(run, &["info", "artifact_uri"], url)?,
    })
}

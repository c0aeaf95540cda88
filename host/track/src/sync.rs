//! Sending a directory's plan: what the state says is missing, in batches,
//! each acknowledged batch recorded before the next is sent.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::TrackError;
use crate::client::{BATCH_METRICS, BATCH_PARAMS, BATCH_TAGS, ClientError, MlflowClient, RunInfo};
use crate::plan::{PlannedRun, plan};
use crate::state::{RunState, SyncState};

/// How to sync.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    /// The server (`None`: the one the directory was synced to before).
    pub uri: Option<String>,
    /// The MLflow experiment's name.
    pub experiment: String,
    /// Each request's time limit.
    pub request_timeout: Duration,
    /// The whole sync's time limit: past it, what is left stays pending.
    pub deadline: Duration,
}

impl Default for SyncOptions {
    fn default() -> Self {
        SyncOptions {
            uri: None,
            experiment: "ecdysis".into(),
            request_timeout: Duration::from_secs(5),
            deadline: Duration::from_secs(20),
        }
    }
}

/// What a sync did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SyncReport {
    /// The server.
    pub uri: String,
    /// Items sent now.
    pub sent: usize,
    /// Items still to send (kept in the state file).
    pub pending: usize,
    /// Items the server refused (not retried), with its answer.
    pub refused: Vec<String>,
    /// Why the sync stopped early.
    pub error: Option<String>,
    /// `(MLflow run name, run id)` of every run synced.
    pub runs: Vec<(String, String)>,
}

/// One item of a planned run.
enum Item<'a> {
    Param(&'a (String, String)),
    Tag(&'a (String, String)),
    Metric(&'a (String, f64, i64)),
}

fn id(kind: &str, parts: &[&[u8]]) -> String {
    let mut h = blake3::Hasher::new();
    for p in parts {
        h.update(p);
        h.update(&[0]);
    }
    format!("{kind}:{}", &h.finalize().to_hex()[..20])
}

fn item_id(item: &Item) -> String {
    match item {
        Item::Param((k, v)) => id("p", &[k.as_bytes(), v.as_bytes()]),
        Item::Tag((k, v)) => id("t", &[k.as_bytes(), v.as_bytes()]),
        Item::Metric((k, v, step)) => id(
            "m",
            &[
                k.as_bytes(),
                &step.to_le_bytes(),
                &v.to_bits().to_le_bytes(),
            ],
        ),
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Sends what the server lacks of `dir` (see the crate's description).
/// `Err` only when the directory or its state file cannot be read or
/// written; a server that is down, slow or refusing gives a report with
/// `error` set and `pending` items kept for the next sync.
pub async fn sync(dir: &Path, opts: &SyncOptions) -> Result<SyncReport, TrackError> {
    let plan = plan(dir)?;
    let previous = SyncState::load(dir)?;
    let uri = opts
        .uri
        .clone()
        .or_else(|| previous.as_ref().map(|s| s.tracking_uri.clone()))
        .filter(|u| !u.is_empty())
        .ok_or_else(|| {
            TrackError::Uri("(none given, and the directory was never synced)".into())
        })?;
    let client = MlflowClient::new(&uri, opts.request_timeout)?;
    let mut state = match previous {
        // Another server or experiment: everything is new there.
        Some(s) if s.tracking_uri == uri && s.experiment == opts.experiment => s,
        other => SyncState {
            tracking_uri: uri.clone(),
            experiment: opts.experiment.clone(),
            key: other.map(|s| s.key).unwrap_or_else(|| dir_key(dir)),
            ..SyncState::default()
        },
    };
    let mut report = SyncReport {
        uri: uri.clone(),
        ..SyncReport::default()
    };
    let outcome = tokio::time::timeout(
        opts.deadline,
        send_all(&client, dir, &plan.runs, &mut state, &mut report),
    )
    .await;
    let error = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(Stop::Client(e))) => Some(e.to_string()),
        Ok(Err(Stop::Track(e))) => return Err(e),
        Err(_) => Some(format!(
            "the sync did not finish within {} s",
            opts.deadline.as_secs()
        )),
    };
    report.pending = pending(&plan.runs, &state);
    report.error = error.clone();
    state.pending = report.pending;
    state.last_error = error;
    state.save(dir)?;
    for r in &plan.runs {
        if let Some(s) = state.runs.get(&r.key) {
            report.runs.push((r.name.clone(), s.run_id.clone()));
            report
                .refused
                .extend(s.refused.iter().map(|(k, v)| format!("{k}: {v}")));
        }
    }
    Ok(report)
}

/// A key for `dir` that survives a lost state file: its path and config.
fn dir_key(dir: &Path) -> String {
    let path = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let config = std::fs::read(dir.join("config.json"))
        .or_else(|_| std::fs::read(dir.join("experiment.json")))
        .unwrap_or_default();
    id("dir", &[path.to_string_lossy().as_bytes(), &config])
        .trim_start_matches("dir:")
        .to_string()
}

/// Why sending stopped.
enum Stop {
    Client(ClientError),
    Track(TrackError),
}

impl From<ClientError> for Stop {
    fn from(e: ClientError) -> Self {
        Stop::Client(e)
    }
}

impl From<TrackError> for Stop {
    fn from(e: TrackError) -> Self {
        Stop::Track(e)
    }
}

/// Items of `run` not acknowledged yet (refused ones are not counted).
fn missing<'a>(run: &'a PlannedRun, st: Option<&RunState>) -> Vec<(String, Item<'a>)> {
    let items = run
        .params
        .iter()
        .map(Item::Param)
        .chain(run.tags.iter().map(Item::Tag))
        .chain(run.metrics.iter().map(Item::Metric));
    items
        .map(|i| (item_id(&i), i))
        .filter(|(id, _)| st.is_none_or(|s| !s.sent.contains(id) && !s.refused.contains_key(id)))
        .collect()
}

fn artifact_ids(run: &PlannedRun) -> Vec<(String, &str, &Path)> {
    run.artifacts
        .iter()
        .map(|(name, path)| {
            let content = std::fs::read(path).unwrap_or_default();
            (
                id("a", &[name.as_bytes(), blake3::hash(&content).as_bytes()]),
                name.as_str(),
                path.as_path(),
            )
        })
        .collect()
}

fn pending(runs: &[PlannedRun], state: &SyncState) -> usize {
    runs.iter()
        .map(|r| {
            let st = state.runs.get(&r.key);
            let artifacts = artifact_ids(r)
                .into_iter()
                .filter(|(id, _, _)| {
                    st.is_none_or(|s| !s.sent.contains(id) && !s.refused.contains_key(id))
                })
                .count();
            let finish = usize::from(r.finished && st.is_none_or(|s| !s.sent.contains("finished")));
            missing(r, st).len() + artifacts + finish
        })
        .sum()
}

/// Retries a transient failure twice, after short pauses.
async fn retried<T, F, Fut>(mut f: F) -> Result<T, ClientError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ClientError>>,
{
    let mut pause = Duration::from_millis(200);
    for _ in 0..2 {
        match f().await {
            Err(e) if e.transient() => {
                tokio::time::sleep(pause).await;
                pause *= 4;
            }
            other => return other,
        }
    }
    f().await
}

async fn send_all(
    client: &MlflowClient,
    dir: &Path,
    runs: &[PlannedRun],
    state: &mut SyncState,
    report: &mut SyncReport,
) -> Result<(), Stop> {
    let exp = match &state.experiment_id {
        Some(id) => id.clone(),
        None => {
            let id = retried(|| client.experiment_id(&state.experiment)).await?;
            state.experiment_id = Some(id.clone());
            state.save(dir)?;
            id
        }
    };
    for run in runs {
        let mut verify_all = false;
        if !state.runs.contains_key(&run.key) {
            let key = format!("{}/{}", state.key, run.key);
            let found = retried(|| client.find_run(&exp, "ecdysis.key", &key)).await?;
            // A run found without a local record: the state file was lost;
            // every metric is checked against the server before sending.
            verify_all = found.is_some();
            let info = match found {
                Some(info) => info,
                None => {
                    let mut tags = vec![("ecdysis.key".to_string(), key.clone())];
                    if let Some(p) = run.parent.as_ref().and_then(|p| state.runs.get(p)) {
                        tags.push(("mlflow.parentRunId".into(), p.run_id.clone()));
                    }
                    client.create_run(&exp, &run.name, now_ms(), &tags).await?
                }
            };
            state.runs.insert(
                run.key.clone(),
                RunState {
                    run_id: info.run_id,
                    artifact_uri: info.artifact_uri,
                    ..RunState::default()
                },
            );
            state.save(dir)?;
        }
        send_run(client, dir, run, state, verify_all, report).await?;
    }
    Ok(())
}

async fn send_run(
    client: &MlflowClient,
    dir: &Path,
    run: &PlannedRun,
    state: &mut SyncState,
    verify_all: bool,
    report: &mut SyncReport,
) -> Result<(), Stop> {
    let run_id = state.runs[&run.key].run_id.clone();
    // What an interrupted batch (or a lost state file) may have delivered.
    let in_flight = std::mem::take(&mut state.runs.get_mut(&run.key).expect("run").in_flight);
    if verify_all || !in_flight.is_empty() {
        let mut by_key: BTreeMap<&str, Vec<(String, f64, i64)>> = BTreeMap::new();
        for (id, item) in missing(run, state.runs.get(&run.key)) {
            if let Item::Metric((k, v, step)) = item
                && (verify_all || in_flight.contains(&id))
            {
                by_key.entry(k).or_default().push((id, *v, *step));
            }
        }
        for (key, items) in by_key {
            let history = retried(|| client.metric_history(&run_id, key)).await?;
            let st = state.runs.get_mut(&run.key).expect("run");
            for (id, v, step) in items {
                if history
                    .iter()
                    .any(|(s, x)| *s == step && x.to_bits() == v.to_bits())
                {
                    st.sent.insert(id);
                }
            }
        }
        state.save(dir)?;
    }
    let todo = missing(run, state.runs.get(&run.key));
    let mut params = Vec::new();
    let mut tags = Vec::new();
    let mut metrics = Vec::new();
    for (id, item) in todo {
        match item {
            Item::Param(p) => params.push((id, p)),
            Item::Tag(t) => tags.push((id, t)),
            Item::Metric(m) => metrics.push((id, m)),
        }
    }
    let ts = now_ms();
    for chunk in params.chunks(BATCH_PARAMS) {
        let items: Vec<(String, String)> = chunk.iter().map(|(_, p)| (*p).clone()).collect();
        let ids: Vec<String> = chunk.iter().map(|(i, _)| i.clone()).collect();
        batch(client, dir, state, &run.key, &ids, &items, &[], &[], report).await?;
    }
    for chunk in tags.chunks(BATCH_TAGS) {
        let items: Vec<(String, String)> = chunk.iter().map(|(_, t)| (*t).clone()).collect();
        let ids: Vec<String> = chunk.iter().map(|(i, _)| i.clone()).collect();
        batch(client, dir, state, &run.key, &ids, &[], &items, &[], report).await?;
    }
    for chunk in metrics.chunks(BATCH_METRICS) {
        let items: Vec<(String, f64, i64, i64)> = chunk
            .iter()
            .map(|(_, (k, v, s))| (k.clone(), *v, *s, ts))
            .collect();
        let ids: Vec<String> = chunk.iter().map(|(i, _)| i.clone()).collect();
        batch(client, dir, state, &run.key, &ids, &[], &[], &items, report).await?;
    }
    let info = RunInfo {
        run_id: run_id.clone(),
        artifact_uri: state.runs[&run.key].artifact_uri.clone(),
    };
    for (id, name, path) in artifact_ids(run) {
        let st = &state.runs[&run.key];
        if st.sent.contains(&id) || st.refused.contains_key(&id) {
            continue;
        }
        let bytes = std::fs::read(path).map_err(|e| TrackError::State {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let st = state.runs.get_mut(&run.key).expect("run");
        match retried(|| client.put_artifact(&info, name, bytes.clone())).await {
            Ok(()) => {
                st.sent.insert(id);
                report.sent += 1;
            }
            Err(e) if e.transient() => return Err(e.into()),
            // Not served over HTTP, say: the rest still goes.
            Err(e) => {
                st.refused.insert(id, format!("artifact {name}: {e}"));
            }
        }
        state.save(dir)?;
    }
    if run.finished && !state.runs[&run.key].sent.contains("finished") {
        retried(|| client.finish_run(&run_id, now_ms())).await?;
        state
            .runs
            .get_mut(&run.key)
            .expect("run")
            .sent
            .insert("finished".into());
        report.sent += 1;
        state.save(dir)?;
    }
    Ok(())
}

/// Sends one batch: marked in flight first, acknowledged after. A batch
/// the server refuses (not a transient failure) is sent item by item so
/// that only the refused items are set aside.
#[allow(clippy::too_many_arguments)]
async fn batch(
    client: &MlflowClient,
    dir: &Path,
    state: &mut SyncState,
    key: &str,
    ids: &[String],
    params: &[(String, String)],
    tags: &[(String, String)],
    metrics: &[(String, f64, i64, i64)],
    report: &mut SyncReport,
) -> Result<(), Stop> {
    let run_id = state.runs[key].run_id.clone();
    state.runs.get_mut(key).expect("run").in_flight = ids.iter().cloned().collect();
    state.save(dir)?;
    let result = retried(|| client.log_batch(&run_id, params, tags, metrics)).await;
    match result {
        Ok(()) => {
            let st = state.runs.get_mut(key).expect("run");
            st.sent.extend(ids.iter().cloned());
            st.in_flight.clear();
            report.sent += ids.len();
        }
        Err(e) if e.transient() => return Err(Stop::Client(e)),
        Err(_) if ids.len() > 1 => {
            state.runs.get_mut(key).expect("run").in_flight.clear();
            for (i, id) in ids.iter().enumerate() {
                let (p, t, m) = (
                    params.get(i).map(std::slice::from_ref).unwrap_or(&[]),
                    tags.get(i).map(std::slice::from_ref).unwrap_or(&[]),
                    metrics.get(i).map(std::slice::from_ref).unwrap_or(&[]),
                );
                Box::pin(batch(
                    client,
                    dir,
                    state,
                    key,
                    std::slice::from_ref(id),
                    p,
                    t,
                    m,
                    report,
                ))
                .await?;
            }
            return Ok(());
        }
        Err(e) => {
            let st = state.runs.get_mut(key).expect("run");
            st.in_flight.clear();
            st.refused.insert(ids[0].clone(), e.to_string());
        }
    }
    state.save(dir)?;
    Ok(())
}

//! `ecdysis-host serve`, driven as tenants and an operator would: the real
//! binary, over HTTP on loopback, its tenants added with `tenant add`, its
//! audit log checked with `audit verify`. SQLite (embedded) by default;
//! the multi-machine mode against a real Postgres cluster started here
//! from Debian's `postgresql` binaries (initdb/pg_ctl in a temp dir).
//!
//! Every defence has its hostile case and a positive control: another
//! tenant's harness or evaluation answers 404 while the owner's answers
//! 200; a quota refuses while a tenant without the override goes through;
//! a hostile tenant's episodes fail while the good tenant's results stay
//! identical, episode for episode, to its solo run.

use crate::support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use ecdysis_runner::isolate::TEST_FAULT_ENV;

// ---------------------------------------------------------------------------
// The service under test
// ---------------------------------------------------------------------------

/// A `serve.toml` for a test: state under `dir`, the τ² data of this
/// checkout, 2-second leases (crash tests wait for them), and `extra`.
fn config_file(dir: &Path, database: &str, extra: &str) -> PathBuf {
    let data = support::repo_root().join(".ecdysis/data");
    let text = format!(
        "state_dir = {state:?}\ndata = {data:?}\ndatabase = {database:?}\ndomains = [\"tau2/retail\"]\n{extra}\n",
        state = dir.join("state").display().to_string(),
        data = data.display().to_string(),
    );
    let text = if text.contains("[worker]") {
        text
    } else {
        format!("{text}\n[worker]\nslots = 2\nlease_seconds = 2\n")
    };
    let path = dir.join("serve.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The model aliases most tests use: a fast and a slowed simulated agent.
const MODELS: &str = "[models.sim]\nmodel = \"sim:mixed\"\n[models.slow]\nmodel = \"sim:mixed\"\nsim_latency_ms = 150\n";

/// A process of the binary that is killed when the test ends.
struct Proc(Option<Child>);

impl Proc {
    fn kill9(&mut self) {
        if let Some(mut c) = self.0.take() {
            // SAFETY: kill on our own child's pid.
            unsafe { libc::kill(c.id() as i32, libc::SIGKILL) };
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A running `ecdysis-host serve`.
struct Server {
    proc: Proc,
    url: String,
    config: PathBuf,
    log: PathBuf,
    env: Vec<(String, String)>,
}

impl Server {
    fn start(config: &Path, env: &[(&str, &str)]) -> Server {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let log = config.with_file_name(format!("serve-{}.log", support_now_ms()));
        let mut child = Command::new(support::host_bin())
            .args(["--quiet", "serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(config)
            .current_dir(config.parent().unwrap())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn serve");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().and_then(|l| l.ok()).unwrap_or_else(|| {
            panic!(
                "serve printed nothing: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
        let url = first
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_string();
        std::thread::spawn(move || for _ in lines {});
        Server {
            proc: Proc(Some(child)),
            url,
            config: config.to_path_buf(),
            log,
            env,
        }
    }

    fn kill9(&mut self) {
        self.proc.kill9();
    }

    fn restart(&mut self) -> &mut Server {
        self.kill9();
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        *self = Server::start(&self.config, &env);
        self
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn support_now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// `ecdysis-host <args> --config <config>`, expected to succeed; its stdout.
fn cli(config: &Path, args: &[&str]) -> String {
    let out = cli_output(config, args);
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn cli_output(config: &Path, args: &[&str]) -> std::process::Output {
    Command::new(support::host_bin())
        .arg("--quiet")
        .args(args)
        .arg("--config")
        .arg(config)
        .current_dir(config.parent().unwrap())
        .output()
        .unwrap()
}

/// `ecdysis-host worker` on the service's database.
fn start_worker(config: &Path, id: &str, slots: usize) -> Proc {
    let log = config.with_file_name(format!("worker-{id}.log"));
    Proc(Some(
        Command::new(support::host_bin())
            .args(["--quiet", "worker", "--id", id, "--slots"])
            .arg(slots.to_string())
            .arg("--config")
            .arg(config)
            .current_dir(config.parent().unwrap())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("spawn worker"),
    ))
}

/// A tenant: its name and token.
#[derive(Clone)]
struct Tenant {
    name: String,
    token: String,
}

fn add_tenant(config: &Path, name: &str) -> Tenant {
    let token = cli(config, &["tenant", "add", name]).trim().to_string();
    assert!(token.starts_with("ecd_"), "{token}");
    Tenant {
        name: name.into(),
        token,
    }
}

/// An HTTP answer: status, headers we look at, body.
#[derive(Debug)]
struct Answer {
    status: u16,
    retry_after: Option<String>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

struct Api {
    http: reqwest::Client,
    url: String,
}

impl Api {
    fn new(url: &str) -> Api {
        Api::from_address(url, "127.0.0.1")
    }

    /// A client whose connections come from the loopback address `from`
    /// (each address is another peer to the per-peer connection cap).
    fn from_address(url: &str, from: &str) -> Api {
        Api {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(120))
                // Below the shortest header-read timeout the tests set, so
                // a request never goes out on a connection the server is
                // closing as idle.
                .pool_idle_timeout(Duration::from_secs(1))
                .local_address(from.parse::<std::net::IpAddr>().unwrap())
                .build()
                .unwrap(),
            url: url.to_string(),
        }
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        who: Option<&Tenant>,
        body: Option<reqwest::Body>,
        content_type: &str,
    ) -> Answer {
        let mut r = self.http.request(method, format!("{}{path}", self.url));
        if let Some(t) = who {
            r = r.bearer_auth(&t.token);
        }
        if let Some(b) = body {
            r = r.header("content-type", content_type).body(b);
        }
        let resp = r.send().await.unwrap_or_else(|e| panic!("{path}: {e}"));
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string());
        Answer {
            status,
            retry_after,
            body: resp.text().await.unwrap(),
        }
    }

    async fn get(&self, path: &str, who: &Tenant) -> Answer {
        self.send(reqwest::Method::GET, path, Some(who), None, "")
            .await
    }

    async fn delete(&self, path: &str, who: &Tenant) -> Answer {
        self.send(reqwest::Method::DELETE, path, Some(who), None, "")
            .await
    }

    async fn post(&self, path: &str, who: &Tenant, body: &Value) -> Answer {
        self.send(
            reqwest::Method::POST,
            path,
            Some(who),
            Some(body.to_string().into()),
            "application/json",
        )
        .await
    }

    async fn upload(&self, who: &Tenant, bytes: &[u8]) -> Answer {
        self.send(
            reqwest::Method::POST,
            "/v1/harnesses",
            Some(who),
            Some(bytes.to_vec().into()),
            "application/wasm",
        )
        .await
    }

    /// Create an evaluation; its id.
    async fn evaluate(&self, who: &Tenant, request: Value) -> String {
        let a = self.post("/v1/evaluations", who, &request).await;
        assert_eq!(a.status, 201, "{}", a.body);
        a.json()["id"].as_str().unwrap().to_string()
    }

    /// Poll until the evaluation has left `running`; its final status.
    async fn wait(&self, who: &Tenant, id: &str) -> Value {
        let started = Instant::now();
        loop {
            let a = self.get(&format!("/v1/evaluations/{id}"), who).await;
            if a.status == 429 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            assert_eq!(a.status, 200, "{}", a.body);
            let v = a.json();
            if v["state"] != "running" {
                return v;
            }
            assert!(
                started.elapsed() < Duration::from_secs(240),
                "evaluation {id} still running: {v}"
            );
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    }

    /// Poll until `pred` holds for the evaluation's status.
    async fn wait_until(&self, who: &Tenant, id: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let started = Instant::now();
        loop {
            let v = self.get(&format!("/v1/evaluations/{id}"), who).await.json();
            if pred(&v) {
                return v;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "condition never held: {v}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn trajectories(&self, who: &Tenant, id: &str) -> Vec<Value> {
        let a = self
            .get(&format!("/v1/evaluations/{id}/trajectories"), who)
            .await;
        assert_eq!(a.status, 200, "{}", a.body);
        a.body
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn direct() -> Vec<u8> {
    support::guest("guests/direct", None)
}

fn hostile(feature: &str) -> Vec<u8> {
    support::guest("guests/hostile", Some(feature))
}

/// Records by (task, trial) without what varies from run to run (timing).
fn comparable(records: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = records
        .iter()
        .map(|r| {
            let mut v = r.clone();
            let o = v.as_object_mut().unwrap();
            o.remove("wall_ms");
            o.remove("model_wait_ms");
            for h in o["hooks"].as_array_mut().unwrap() {
                h.as_object_mut().unwrap().remove("micros");
            }
            v
        })
        .collect();
    out.sort_by_key(|r| (r["task_id"].to_string(), r["trial"].as_u64()));
    out
}

/// (task, trial) of each record, checking none repeats.
fn episode_keys(records: &[Value]) -> BTreeSet<(String, u64)> {
    let mut keys = BTreeSet::new();
    for r in records {
        let key = (
            r["task_id"].as_str().unwrap().to_string(),
            r["trial"].as_u64().unwrap(),
        );
        assert!(keys.insert(key.clone()), "episode {key:?} recorded twice");
    }
    keys
}

fn audit_kinds(config: &Path) -> Vec<Value> {
    cli(config, &["audit", "show"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn count_kind(records: &[Value], kind: &str) -> usize {
    records.iter().filter(|r| r["kind"] == kind).count()
}

fn assert_audit_verifies(config: &Path) {
    let out = cli_output(config, &["audit", "verify"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "audit verify failed: {text}");
    assert!(text.contains("the chain verifies"), "{text}");
}

fn sqlite(dir: &Path) -> String {
    format!("sqlite:{}", dir.join("state/serve.db").display())
}

/// The two databases the service runs on; the scenarios below run on both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

/// A test's database: SQLite under its directory, or a fresh database in a
/// throwaway Postgres cluster (stopped when this is dropped: declare it
/// before the server).
struct TestDb {
    url: String,
    _cluster: Option<Postgres>,
}

impl TestDb {
    /// The Postgres cluster's postmaster (None on SQLite).
    fn postmaster_pid(&self) -> Option<u32> {
        let pg = self._cluster.as_ref()?;
        let pid = std::fs::read_to_string(pg.dir.join("postmaster.pid")).ok()?;
        pid.lines().next()?.trim().parse().ok()
    }
}

fn test_db(backend: Backend, dir: &Path) -> TestDb {
    test_db_with(backend, dir, false)
}

/// `durable`: see [`Postgres::start_with`] (SQLite runs as the service
/// configures it either way).
fn test_db_with(backend: Backend, dir: &Path, durable: bool) -> TestDb {
    match backend {
        Backend::Sqlite => TestDb {
            url: sqlite(dir),
            _cluster: None,
        },
        Backend::Postgres => {
            let pg = Postgres::start_with(durable);
            TestDb {
                url: pg.database("ecdysis_serve"),
                _cluster: Some(pg),
            }
        }
    }
}

/// Two tests of one scenario: on SQLite and on a real Postgres.
macro_rules! on_both_backends {
    ($scenario:ident => $on_sqlite:ident, $on_postgres:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $on_sqlite() {
            $scenario(Backend::Sqlite).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $on_postgres() {
            $scenario(Backend::Postgres).await;
        }
    };
}

// ---------------------------------------------------------------------------
// Two tenants end to end (shared by the SQLite and Postgres runs)
// ---------------------------------------------------------------------------

async fn two_tenants(url: &str, config: &Path, a: &Tenant, b: &Tenant) {
    let api = Api::new(url);

    // The API describes itself; no token needed for the description.
    let doc = api
        .send(reqwest::Method::GET, "/v1/openapi.json", None, None, "")
        .await;
    assert_eq!(doc.status, 200);
    let doc = doc.json();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."), "{doc}");
    for path in [
        "/v1/harnesses",
        "/v1/evaluations",
        "/v1/evaluations/{id}/events",
        "/v1/harnesses/{hash}/grants",
    ] {
        assert!(
            doc["paths"][path].is_object(),
            "{path} missing from the OpenAPI document"
        );
    }

    // No token, a wrong token: 401, audited.
    let anon = api
        .send(reqwest::Method::GET, "/v1/harnesses", None, None, "")
        .await;
    assert_eq!(anon.status, 401, "{}", anon.body);
    let forged = Tenant {
        name: "nobody".into(),
        token: "ecd_forged".into(),
    };
    assert_eq!(api.get("/v1/harnesses", &forged).await.status, 401);

    // Upload: the hash, the world, inspect and check.
    let bytes = direct();
    let up = api.upload(a, &bytes).await;
    assert_eq!(up.status, 201, "{}", up.body);
    let h = up.json();
    let hash = h["hash"].as_str().unwrap().to_string();
    assert_eq!(hash, blake3::hash(&bytes).to_hex().to_string());
    assert_eq!(h["world"], "ecdysis:harness/harness@0.1.0");
    assert_eq!(h["passed"], true);
    assert_eq!(h["inspect"]["world_supported"], true);
    assert!(!h["check"]["probes"].as_array().unwrap().is_empty());
    let listed = api.get("/v1/harnesses", a).await.json();
    assert_eq!(listed["harnesses"][0]["hash"], hash.as_str());
    // Garbage is refused with a reason, not stored.
    let junk = api.upload(a, b"\0asm not really").await;
    assert_eq!(junk.status, 422, "{}", junk.body);
    assert!(
        junk.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not a component")
    );

    // An evaluation, watched live over server-sent events (tasks 10 and
    // 12 are among those doing nothing solves: the summary's floor).
    let id = api
        .evaluate(
            a,
            json!({"harness": hash, "tasks": ["0", "10", "12"], "trials": 2, "agent": "sim", "seed": 7}),
        )
        .await;
    let events = api.get(&format!("/v1/evaluations/{id}/events"), a).await;
    assert_eq!(events.status, 200);
    let episode_events = events.body.matches("event: episode").count();
    assert_eq!(episode_events, 6, "{}", events.body);
    assert!(events.body.contains("event: end"), "{}", events.body);
    let status = api.wait(a, &id).await;
    assert_eq!(status["state"], "done", "{status}");
    assert_eq!(status["progress"]["done"], 6);
    assert_eq!(status["summary"]["metrics"]["episodes"], 6);
    assert_eq!(status["note"], "simulated agent — not a benchmark result");
    assert!(status["fuel"].as_i64().unwrap() > 0);
    let records = api.trajectories(a, &id).await;
    assert_eq!(episode_keys(&records).len(), 6);
    assert_eq!(status["summary"]["config"]["harness"], hash.as_str());
    // The floor (tasks solved by doing nothing), worked out while the
    // episodes ran, is what `run` works out for the same tasks.
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(support::host_bin())
        .args(["--quiet", "--store"])
        .arg(out.path().join("store"))
        .args([
            "run",
            "--harness",
            "none",
            "--tasks",
            "0,10,12",
            "--split",
            "all",
        ])
        .args(["--agent-model", "sim:mixed", "--out"])
        .arg(out.path().join("run"))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let run_summary: Value = serde_json::from_slice(
        &std::fs::read(out.path().join("run").join("summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(status["summary"]["floor_tasks"], 3);
    // Tasks 10 and 12 are solved by doing nothing, 0 is not.
    assert_eq!(run_summary["floor_solved"], 2);
    assert_eq!(
        status["summary"]["floor_solved"],
        run_summary["floor_solved"]
    );
    assert!(
        records
            .iter()
            .all(|r| r["hooks"].as_array().is_some_and(|h| !h.is_empty()))
    );
    // A reconnecting client (Last-Event-ID) gets only what it missed.
    let resumed = api
        .http
        .get(format!("{url}/v1/evaluations/{id}/events"))
        .bearer_auth(&a.token)
        .header("last-event-id", "4")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(resumed.matches("event: episode").count(), 2, "{resumed}");
    let report = api.get(&format!("/v1/evaluations/{id}/report"), a).await;
    assert_eq!(report.status, 200);
    assert!(report.body.contains("<html"), "not HTML");

    b_gets_what_nothing_gets(&api, a, b, &hash, &id).await;

    // Dedup of identical bytes leaks nothing: b's upload of the same bytes
    // is b's own (its own time), counts in full against b's storage, and
    // still answers 404 on a's evaluation.
    let b_up = api.upload(b, &bytes).await;
    assert_eq!(b_up.status, 201, "{}", b_up.body);
    let b_h = b_up.json();
    assert_eq!(b_h["access"], "owned");
    assert_ne!(b_h["uploaded_at"], h["uploaded_at"]);
    let usage = api.get("/v1/usage", b).await.json();
    assert_eq!(usage["stored_bytes"], bytes.len());
    assert_eq!(
        api.get(&format!("/v1/evaluations/{id}"), b).await.status,
        404
    );

    grants_are_the_owners_to_give(&api, config, a, b, &hash, &id).await;

    only_model_aliases_and_capped_limits(&api, a).await;

    // The audit log holds what happened, and verifies.
    let audit = audit_kinds(config);
    for kind in [
        "tenant_added",
        "auth_failure",
        "upload",
        "upload_refused",
        "evaluation_started",
        "evaluation_finished",
        "grant",
        "grant_revoked",
    ] {
        assert!(
            count_kind(&audit, kind) > 0,
            "no {kind} record in {audit:?}"
        );
    }
    // No token in any record or log line.
    let all = serde_json::to_string(&audit).unwrap();
    assert!(!all.contains(&a.token) && !all.contains(&b.token));
    assert_audit_verifies(config);
}

/// Tenant b: every endpoint on a's things (its harness `hash`, its
/// evaluation `id`) answers exactly what it answers for things that do not
/// exist; a, the owner, gets them.
async fn b_gets_what_nothing_gets(api: &Api, a: &Tenant, b: &Tenant, hash: &str, id: &str) {
    let fake_id = "ev_000000000000000000000000";
    let fake_hash = "0".repeat(64);
    let probes: Vec<(reqwest::Method, String, String, Option<Value>)> = vec![
        (
            reqwest::Method::GET,
            format!("/v1/harnesses/{hash}"),
            format!("/v1/harnesses/{fake_hash}"),
            None,
        ),
        (
            reqwest::Method::POST,
            format!("/v1/harnesses/{hash}/grants"),
            format!("/v1/harnesses/{fake_hash}/grants"),
            Some(json!({"tenant": a.name})),
        ),
        (
            reqwest::Method::DELETE,
            format!("/v1/harnesses/{hash}/grants/{}", a.name),
            format!("/v1/harnesses/{fake_hash}/grants/{}", a.name),
            None,
        ),
        (
            reqwest::Method::GET,
            format!("/v1/evaluations/{id}"),
            format!("/v1/evaluations/{fake_id}"),
            None,
        ),
        (
            reqwest::Method::GET,
            format!("/v1/evaluations/{id}/events"),
            format!("/v1/evaluations/{fake_id}/events"),
            None,
        ),
        (
            reqwest::Method::GET,
            format!("/v1/evaluations/{id}/trajectories"),
            format!("/v1/evaluations/{fake_id}/trajectories"),
            None,
        ),
        (
            reqwest::Method::GET,
            format!("/v1/evaluations/{id}/report"),
            format!("/v1/evaluations/{fake_id}/report"),
            None,
        ),
        (
            reqwest::Method::DELETE,
            format!("/v1/evaluations/{id}"),
            format!("/v1/evaluations/{fake_id}"),
            None,
        ),
        (
            reqwest::Method::POST,
            "/v1/evaluations".into(),
            "/v1/evaluations".into(),
            Some(json!({"harness": hash, "tasks": ["0"], "agent": "sim"})),
        ),
    ];
    for (method, real, fake, body) in &probes {
        let send = |path: &str, who: &Tenant| {
            let body = body.clone().map(|b| b.to_string().into());
            let method = method.clone();
            let path = path.to_string();
            let who = who.clone();
            async move {
                api.send(method, &path, Some(&who), body, "application/json")
                    .await
            }
        };
        let theirs = send(real, b).await;
        assert_eq!(theirs.status, 404, "{method} {real} as b: {}", theirs.body);
        let nothing = if real == fake {
            // Creating with a hash that exists nowhere.
            let body = json!({"harness": fake_hash, "tasks": ["0"], "agent": "sim"});
            api.post("/v1/evaluations", b, &body).await
        } else {
            send(fake, b).await
        };
        assert_eq!(nothing.status, 404);
        assert_eq!(
            theirs.body, nothing.body,
            "{method} {real}: the answer differs from a missing one"
        );
        // Positive control: the owner gets an answer (cancel of a finished
        // evaluation and the grant to oneself aside, 2xx).
        if *method == reqwest::Method::GET {
            assert_eq!(send(real, a).await.status, 200, "{real} as its owner");
        }
    }
    assert!(
        api.get("/v1/evaluations", b).await.json()["evaluations"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert!(
        api.get("/v1/harnesses", b).await.json()["harnesses"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

/// Grants: c sees nothing of a's harness `hash`, until a grants it; the
/// grantee may not pass it on, and a's evaluation `id` stays a's.
async fn grants_are_the_owners_to_give(
    api: &Api,
    config: &Path,
    a: &Tenant,
    b: &Tenant,
    hash: &str,
    id: &str,
) {
    let c = add_tenant(config, &format!("{}-c", a.name));
    let path = format!("/v1/harnesses/{hash}");
    assert_eq!(api.get(&path, &c).await.status, 404);
    let g = api
        .post(&format!("{path}/grants"), a, &json!({"tenant": c.name}))
        .await;
    assert_eq!(g.status, 201, "{}", g.body);
    let seen = api.get(&path, &c).await;
    assert_eq!(seen.status, 200, "{}", seen.body);
    assert_eq!(seen.json()["access"], "granted");
    let c_id = api
        .evaluate(&c, json!({"harness": hash, "tasks": ["3"], "agent": "sim"}))
        .await;
    assert_eq!(api.wait(&c, &c_id).await["state"], "done");
    // The grantee may not pass it on.
    let regrant = api
        .post(&format!("{path}/grants"), &c, &json!({"tenant": b.name}))
        .await;
    assert_eq!(regrant.status, 404, "{}", regrant.body);
    // a's evaluations stay a's.
    assert_eq!(
        api.get(&format!("/v1/evaluations/{id}"), &c).await.status,
        404
    );
    let revoke = api.delete(&format!("{path}/grants/{}", c.name), a).await;
    assert_eq!(revoke.status, 204, "{}", revoke.body);
    assert_eq!(api.get(&path, &c).await.status, 404);
}

/// Model aliases only: a URL, an unknown alias or an endpoint field is
/// refused, and the caps on limits hold.
async fn only_model_aliases_and_capped_limits(api: &Api, a: &Tenant) {
    for (request, status, says) in [
        (
            json!({"tasks": ["0"], "agent": "http://127.0.0.1:9/v1"}),
            422,
            "unknown model alias",
        ),
        (
            json!({"tasks": ["0"], "agent": "sim", "user": "https://example.com/v1"}),
            422,
            "unknown model alias",
        ),
        (
            json!({"tasks": ["0"], "agent": "sim", "base_url": "http://127.0.0.1:9/v1"}),
            400,
            "unknown field",
        ),
        (
            json!({"tasks": ["0"], "agent": "sim", "limits": {"fuel_per_hook": 1u64 << 60}}),
            422,
            "fuel_per_hook",
        ),
        (
            json!({"tasks": ["0"], "agent": "sim", "domain": "tau2/airline"}),
            422,
            "not offered",
        ),
        (
            json!({"tasks": ["no-such-task"], "agent": "sim"}),
            422,
            "no-such-task",
        ),
    ] {
        let r = api.post("/v1/evaluations", a, &request).await;
        assert_eq!(r.status, status, "{request}: {}", r.body);
        assert!(r.body.contains(says), "{request}: {}", r.body);
    }
    let models = api.get("/v1/models", a).await;
    assert!(
        !models.body.contains("http"),
        "aliases only, no endpoints: {}",
        models.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_tenants_end_to_end_over_http_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path(), &sqlite(dir.path()), MODELS);
    let a = add_tenant(&config, "alice");
    let b = add_tenant(&config, "bob");
    let server = Server::start(&config, &[]);
    two_tenants(&server.url, &config, &a, &b).await;
    let log = server.log();
    assert!(
        !log.contains(&a.token) && !log.contains(&b.token),
        "a token in the log"
    );
}

/// DBBench's `sql_mode` reaches the service's workers, from the command
/// line (`--sql-mode`, here through its variable `$ECDYSIS_SQL_MODE`) and
/// from serve.toml's `sql_mode`, in `serve`'s own workers and in a remote
/// `ecdysis-host worker`'s. `standard-278`'s gold UPDATE compares a TEXT
/// column with a bare number, which MySQL 8's strict mode refuses, so
/// `sim:oracle` solves it under `lenient` and not under the default
/// `mysql8` (the control: the outcome tells the modes apart). SKIPPED
/// without MariaDB, unless `$CI` is set.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sql_mode_reaches_the_services_workers() {
    if !support::dbbench_available() {
        return;
    }
    let lenient = [("ECDYSIS_SQL_MODE", "lenient")];
    assert_eq!(
        oracle_reward_on_standard_278("", &[], false).await,
        0.0,
        "MySQL 8's strict mode by default"
    );
    assert_eq!(
        oracle_reward_on_standard_278("", &lenient, false).await,
        1.0,
        "--sql-mode lenient in serve's workers"
    );
    assert_eq!(
        oracle_reward_on_standard_278("sql_mode = \"lenient\"\n", &[], true).await,
        1.0,
        "serve.toml's sql_mode in a remote worker"
    );
}

/// `sim:oracle`'s reward on DBBench's `standard-278` in a fresh service
/// whose serve.toml starts with `top` and whose processes get `env`, run
/// by serve's own worker or (`remote`) by an `ecdysis-host worker`.
async fn oracle_reward_on_standard_278(top: &str, env: &[(&str, &str)], remote: bool) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let workers = if remote { 0 } else { 1 };
    let config = config_file(
        dir.path(),
        &sqlite(dir.path()),
        &format!(
            "{top}[models.oracle]\nmodel = \"sim:oracle\"\n[worker]\nslots = {workers}\nlease_seconds = 2\n"
        ),
    );
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "domains = [\"tau2/retail\"]",
        "domains = [\"agentbench/dbbench\"]",
    );
    std::fs::write(&config, text).unwrap();
    let t = add_tenant(&config, "alice");
    let _server = Server::start(&config, env);
    let _worker = remote.then(|| start_worker(&config, "remote", 1));
    let api = Api::new(&_server.url);
    let id = api
        .evaluate(
            &t,
            json!({"domain": "agentbench/dbbench", "tasks": ["standard-278"], "agent": "oracle"}),
        )
        .await;
    let status = api.wait(&t, &id).await;
    assert_eq!(status["state"], "done", "{status}");
    let records = api.trajectories(&t, &id).await;
    assert_eq!(records.len(), 1, "{records:?}");
    records[0]["reward"].as_f64().unwrap()
}

// ---------------------------------------------------------------------------
// Quotas
// ---------------------------------------------------------------------------

on_both_backends!(every_quota_refuses =>
    every_quota_refuses_with_its_name_and_status_on_sqlite,
    every_quota_refuses_with_its_name_and_status_on_postgres);

async fn every_quota_refuses(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(backend, dir.path());
    let config = config_file(
        dir.path(),
        &db.url,
        &format!("{MODELS}\n[worker]\nslots = 3\nlease_seconds = 2\n"),
    );
    let free = add_tenant(&config, "free");
    let t = add_tenant(&config, "tight");
    let bytes = direct();
    let size = bytes.len();
    let server = Server::start(&config, &[]);
    let api = Api::new(&server.url);
    let quota_of = |a: &Answer| {
        a.json()["error"]["quota"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };

    // upload_bytes: 413, no Retry-After (retrying will not help).
    cli(
        &config,
        &[
            "tenant",
            "set-quota",
            "tight",
            &format!("upload_bytes={}", size - 1),
        ],
    );
    let r = api.upload(&t, &bytes).await;
    assert_eq!(
        (r.status, quota_of(&r).as_str()),
        (413, "upload_bytes"),
        "{}",
        r.body
    );
    assert_eq!(r.retry_after, None);
    assert_eq!(api.upload(&free, &bytes).await.status, 201, "control");

    // stored_bytes: the second distinct component does not fit.
    cli(
        &config,
        &[
            "tenant",
            "set-quota",
            "tight",
            &format!("upload_bytes={}", 1 << 24),
            &format!("stored_bytes={}", size + 10),
        ],
    );
    assert_eq!(api.upload(&t, &bytes).await.status, 201);
    let other = support::guest("guests/read-only", None);
    let r = api.upload(&t, &other).await;
    assert_eq!(
        (r.status, quota_of(&r).as_str()),
        (413, "stored_bytes"),
        "{}",
        r.body
    );
    // Re-uploading what it has costs nothing.
    assert_eq!(api.upload(&t, &bytes).await.status, 201);

    // episodes_per_day: 429 with Retry-After (until midnight UTC).
    cli(
        &config,
        &["tenant", "set-quota", "tight", "episodes_per_day=4"],
    );
    let r = api
        .post(
            "/v1/evaluations",
            &t,
            &json!({"tasks": ["0", "1", "2", "3", "4"], "agent": "sim"}),
        )
        .await;
    assert_eq!(
        (r.status, quota_of(&r).as_str()),
        (429, "episodes_per_day"),
        "{}",
        r.body
    );
    let retry: u64 = r.retry_after.as_deref().unwrap().parse().unwrap();
    assert!((1..=86_400).contains(&retry), "{retry}");

    // concurrent_episodes: never more than one running; the status says
    // what holds the rest back.
    cli(
        &config,
        &[
            "tenant",
            "set-quota",
            "tight",
            "episodes_per_day=1000",
            "concurrent_episodes=1",
        ],
    );
    let tight_hash = api.get("/v1/harnesses", &t).await.json()["harnesses"][0]["hash"].clone();
    let id = api
        .evaluate(
            &t,
            json!({"harness": tight_hash, "tasks": ["0", "1", "2", "3"], "agent": "slow"}),
        )
        .await;
    let mut max_running = 0;
    let mut saw_waiting = false;
    loop {
        let s = api.get(&format!("/v1/evaluations/{id}"), &t).await.json();
        max_running = max_running.max(s["progress"]["running"].as_i64().unwrap());
        saw_waiting |= s["waiting_for"] == "quota concurrent_episodes";
        if s["state"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(max_running, 1);
    assert!(saw_waiting);

    // fuel_per_day: once today's fuel is spent, queued episodes wait and a
    // new evaluation is refused.
    let used_fuel = api.get("/v1/usage", &t).await.json()["today"]["fuel"]
        .as_i64()
        .unwrap();
    assert!(used_fuel > 0);
    cli(
        &config,
        &[
            "tenant",
            "set-quota",
            "tight",
            &format!("fuel_per_day={used_fuel}"),
        ],
    );
    let r = api
        .post(
            "/v1/evaluations",
            &t,
            &json!({"tasks": ["0"], "agent": "sim"}),
        )
        .await;
    assert_eq!(
        (r.status, quota_of(&r).as_str()),
        (429, "fuel_per_day"),
        "{}",
        r.body
    );
    assert!(r.retry_after.is_some());
    let ok = api
        .evaluate(&free, json!({"tasks": ["0"], "agent": "sim"}))
        .await;
    assert_eq!(api.wait(&free, &ok).await["state"], "done", "control");

    // requests_per_second: a burst past the bucket gets 429 + Retry-After.
    cli(
        &config,
        &["tenant", "set-quota", "tight", "requests_per_second=2"],
    );
    let mut refused = None;
    for _ in 0..10 {
        let r = api.get("/v1/usage", &t).await;
        if r.status == 429 {
            refused = Some(r);
            break;
        }
    }
    let r = refused.expect("a burst of 10 at 2/s must be refused");
    assert_eq!(quota_of(&r), "requests_per_second");
    assert!(r.retry_after.is_some());
    assert_eq!(api.get("/v1/usage", &free).await.status, 200, "control");

    let audit = audit_kinds(&config);
    let refusals: BTreeSet<String> = audit
        .iter()
        .filter(|r| r["kind"] == "quota_refused")
        .map(|r| {
            serde_json::from_str::<Value>(r["detail"].as_str().unwrap()).unwrap()["quota"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    for q in [
        "upload_bytes",
        "stored_bytes",
        "episodes_per_day",
        "fuel_per_day",
        "requests_per_second",
    ] {
        assert!(
            refusals.contains(q),
            "no audited refusal of {q}: {refusals:?}"
        );
    }
    assert_audit_verifies(&config);
}

// `usd_per_day` comes from the ledger: a priced alias on an endpoint of
// the operator's (a mock OpenAI server here) spends, and once today's
// spend reaches the quota the tenant's next evaluation is refused.
on_both_backends!(usd_per_day_from_the_ledger =>
    usd_per_day_is_enforced_from_the_ledger_on_sqlite,
    usd_per_day_is_enforced_from_the_ledger_on_postgres);

async fn usd_per_day_from_the_ledger(backend: Backend) {
    use ecdysis_model::Usage;
    use ecdysis_testkit::mock::{MockReply, MockServer};
    let mock = MockServer::start().await.unwrap();
    // Every reply: a final answer costing 1M prompt tokens ($1 at the
    // alias's price).
    mock.set_fallback(
        MockReply::text("I cannot help with that.").with_usage(Usage {
            prompt_tokens: 1_000_000,
            completion_tokens: 0,
            ..Usage::default()
        }),
    );
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(backend, dir.path());
    let models = format!(
        "[models.paid]\nmodel = \"paid-model\"\nbase_url = \"{}\"\nprompt_per_mtok = 1.0\ncompletion_per_mtok = 1.0\n",
        mock.base_url()
    );
    let config = config_file(dir.path(), &db.url, &models);
    let t = add_tenant(&config, "spender");
    cli(
        &config,
        &[
            "tenant",
            "set-quota",
            "spender",
            "usd_per_day=0.5",
            "concurrent_episodes=1",
        ],
    );
    let server = Server::start(&config, &[]);
    let api = Api::new(&server.url);
    let id = api
        .evaluate(
            &t,
            json!({"tasks": ["0", "1"], "agent": "paid", "limits": {"max_steps": 12}}),
        )
        .await;
    // The first episode spends $1 or more; the second then waits.
    let s = api
        .wait_until(&t, &id, |s| {
            s["progress"]["done"] == 1
                && s["waiting_for"]
                    .as_str()
                    .unwrap_or("")
                    .contains("usd_per_day")
        })
        .await;
    assert!(s["usd"].as_f64().unwrap() >= 1.0, "{s}");
    // Each call is checked before it is sent against the episode's share of
    // what is left today ($0.50 here): the episode stops after the call
    // that crossed it, so the day's overshoot is that one call ($1), not
    // every call the episode would have made.
    assert!(s["usd"].as_f64().unwrap() < 0.5 + 1.0 + 1e-9, "{s}");
    assert_eq!(mock.request_count(), 1, "the second call is not sent");
    assert_eq!(s["progress"]["queued"], 1, "{s}");
    assert!(mock.request_count() > 0);
    let r = api
        .post(
            "/v1/evaluations",
            &t,
            &json!({"tasks": ["2"], "agent": "paid"}),
        )
        .await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.json()["error"]["quota"], "usd_per_day");
    assert!(r.retry_after.is_some());
    // Every request the workers sent went to the operator's endpoint, with
    // the operator's model name.
    for req in mock.requests() {
        assert_eq!(req.json().unwrap()["model"], "paid-model");
    }
    assert_eq!(
        api.delete(&format!("/v1/evaluations/{id}"), &t)
            .await
            .status,
        200
    );
}

// ---------------------------------------------------------------------------
// Cancel
// ---------------------------------------------------------------------------

on_both_backends!(cancel_in_flight =>
    cancel_stops_in_flight_episodes_and_keeps_finished_ones_on_sqlite,
    cancel_stops_in_flight_episodes_and_keeps_finished_ones_on_postgres);

async fn cancel_in_flight(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(backend, dir.path());
    let config = config_file(dir.path(), &db.url, MODELS);
    let t = add_tenant(&config, "canceller");
    let server = Server::start(&config, &[]);
    let api = Api::new(&server.url);
    let tasks: Vec<String> = (0..12).map(|i| i.to_string()).collect();
    let id = api
        .evaluate(&t, json!({"tasks": tasks, "agent": "slow"}))
        .await;
    api.wait_until(&t, &id, |s| {
        s["progress"]["done"].as_i64().unwrap() >= 1
            && s["progress"]["running"].as_i64().unwrap() >= 1
    })
    .await;
    let c = api.delete(&format!("/v1/evaluations/{id}"), &t).await;
    assert_eq!(c.status, 200, "{}", c.body);
    assert_eq!(c.json()["state"], "cancelled");
    // In-flight episodes stop at their next heartbeat (lease/4 = 0.5 s).
    let s = api
        .wait_until(&t, &id, |s| s["progress"]["running"] == 0)
        .await;
    let done = s["progress"]["done"].as_i64().unwrap();
    assert!(done < 12, "cancel came too late to test anything: {s}");
    assert_eq!(s["progress"]["queued"], 0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = api.get(&format!("/v1/evaluations/{id}"), &t).await.json();
    assert_eq!(
        later["progress"]["done"], done,
        "episodes ran after the cancel"
    );
    assert_eq!(later["state"], "cancelled");
    assert_eq!(later["summary"]["metrics"]["episodes"], done);
    let records = api.trajectories(&t, &id).await;
    assert_eq!(records.len() as i64, done, "finished episodes are kept");
    // Cancelling twice is harmless; the log records one cancel.
    assert_eq!(
        api.delete(&format!("/v1/evaluations/{id}"), &t)
            .await
            .status,
        200
    );
    assert_eq!(count_kind(&audit_kinds(&config), "evaluation_cancelled"), 1);
}

// ---------------------------------------------------------------------------
// Isolation from a hostile tenant
// ---------------------------------------------------------------------------

// Tenant `good` runs an evaluation alone, then again while tenant `evil`
// runs hostile harnesses (an infinite loop, a memory bomb) and an episode
// that aborts its worker process, all at once. The good tenant's second
// run is identical to its first, episode for episode; the hostile
// episodes fail as harness errors and the crash is audited.
on_both_backends!(hostile_tenant_beside_a_good_one =>
    a_hostile_tenant_leaves_another_tenants_results_identical_on_sqlite,
    a_hostile_tenant_leaves_another_tenants_results_identical_on_postgres);

async fn hostile_tenant_beside_a_good_one(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(backend, dir.path());
    let config = config_file(
        dir.path(),
        &db.url,
        &format!("{MODELS}\n[worker]\nslots = 3\nlease_seconds = 2\nmemory_mib = 1024\n"),
    );
    let good = add_tenant(&config, "good");
    let evil = add_tenant(&config, "evil");
    // Task 9's episodes abort their worker process (a host bug under
    // hostile input, stood in for by the test fault); only evil runs it.
    let server = Server::start(&config, &[(TEST_FAULT_ENV, "abort@9")]);
    let api = Api::new(&server.url);
    let good_hash = api.upload(&good, &direct()).await.json()["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let mut evil_hashes = Vec::new();
    // The third inflates the model's input (40 KiB injected after every
    // step): stopped by the episode's added-text budget.
    for feature in ["infinite-loop", "memory-bomb", "inflate-inject"] {
        let up = api.upload(&evil, &hostile(feature)).await;
        assert_eq!(up.status, 201, "{feature}: {}", up.body);
        evil_hashes.push(up.json()["hash"].as_str().unwrap().to_string());
    }
    let evil_direct = api.upload(&evil, &direct()).await.json()["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let request = json!({"harness": good_hash, "tasks": ["0", "1", "2", "3"], "trials": 2, "agent": "sim", "seed": 3});

    let solo = api.evaluate(&good, request.clone()).await;
    assert_eq!(api.wait(&good, &solo).await["state"], "done");
    let solo_records = api.trajectories(&good, &solo).await;

    let mut attacks = Vec::new();
    for h in &evil_hashes {
        attacks.push(
            api.evaluate(
                &evil,
                json!({"harness": h, "tasks": ["0", "1", "2"], "agent": "sim"}),
            )
            .await,
        );
    }
    attacks.push(
        api.evaluate(
            &evil,
            json!({"harness": evil_direct, "tasks": ["9"], "agent": "sim"}),
        )
        .await,
    );
    let beside = api.evaluate(&good, request).await;
    assert_eq!(api.wait(&good, &beside).await["state"], "done");
    let beside_records = api.trajectories(&good, &beside).await;
    assert_eq!(solo_records.len(), 8);
    assert_eq!(
        comparable(&solo_records),
        comparable(&beside_records),
        "the good tenant's results changed beside the hostile one"
    );

    for id in &attacks {
        let s = api.wait(&evil, id).await;
        assert_eq!(s["state"], "done", "{s}");
        let records = api.trajectories(&evil, id).await;
        assert!(!records.is_empty());
        for r in &records {
            assert_eq!(
                r["end"], "harness_error",
                "a hostile episode ended {}: {r}",
                r["end"]
            );
        }
    }
    // The inflating tenant's evaluation records which hook crossed the
    // budget, and why.
    let inflating = api.trajectories(&evil, &attacks[2]).await;
    for r in &inflating {
        let failed: Vec<&Value> = r["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h.get("error").is_some())
            .collect();
        assert_eq!(failed.len(), 1, "{r}");
        assert_eq!(failed[0]["hook"], "regulate", "{r}");
        assert!(
            failed[0]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("over the budget of 65536"),
            "{r}"
        );
    }
    let audit = audit_kinds(&config);
    assert!(
        count_kind(&audit, "worker_crash") >= 1,
        "the aborted worker is audited"
    );
    assert_audit_verifies(&config);
}

// ---------------------------------------------------------------------------
// Crash safety
// ---------------------------------------------------------------------------

// `kill -9` of the server mid-evaluation, then of a separate `worker`
// process: after restarts every episode is scored exactly once, nothing
// finished is lost, the evaluation finishes once, and the audit chain
// verifies.
on_both_backends!(kill_9_then_restart =>
    kill_9_of_server_and_worker_then_restart_scores_each_episode_once_on_sqlite,
    kill_9_of_server_and_worker_then_restart_scores_each_episode_once_on_postgres);

async fn kill_9_then_restart(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(backend, dir.path());
    let config = config_file(dir.path(), &db.url, MODELS);
    let t = add_tenant(&config, "survivor");
    let mut server = Server::start(&config, &[]);
    let tasks: Vec<String> = (0..8).map(|i| i.to_string()).collect();
    let request = json!({"tasks": tasks, "agent": "slow"});
    let id = Api::new(&server.url).evaluate(&t, request.clone()).await;
    let before = Api::new(&server.url)
        .wait_until(&t, &id, |s| {
            s["progress"]["done"].as_i64().unwrap() >= 2
                && s["progress"]["running"].as_i64().unwrap() >= 1
        })
        .await;
    server.kill9();
    server.restart();
    let api = Api::new(&server.url);
    let s = api.wait(&t, &id).await;
    assert_eq!(s["state"], "done", "{s}");
    assert_eq!(s["progress"]["done"], 8, "{s}");
    let records = api.trajectories(&t, &id).await;
    assert_eq!(episode_keys(&records).len(), 8);
    assert!(before["progress"]["done"].as_i64().unwrap() <= 8);

    // The same with the episodes run by `ecdysis-host worker` processes
    // (the server runs none): kill -9 one mid-evaluation, start another.
    let cfg_text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("slots = 2", "slots = 0");
    std::fs::write(&config, cfg_text).unwrap();
    server.restart();
    let api = Api::new(&server.url);
    let id2 = api.evaluate(&t, request).await;
    let mut w1 = start_worker(&config, "w1", 2);
    api.wait_until(&t, &id2, |s| {
        s["progress"]["done"].as_i64().unwrap() >= 1
            && s["progress"]["running"].as_i64().unwrap() >= 1
    })
    .await;
    w1.kill9();
    let _w2 = start_worker(&config, "w2", 2);
    let s = api.wait(&t, &id2).await;
    assert_eq!(s["progress"]["done"], 8, "{s}");
    assert_eq!(episode_keys(&api.trajectories(&t, &id2).await).len(), 8);

    let audit = audit_kinds(&config);
    assert_eq!(
        count_kind(&audit, "evaluation_finished"),
        2,
        "each evaluation finishes once"
    );
    assert!(
        count_kind(&audit, "lease_expired") >= 1,
        "the dead worker's episodes were reclaimed"
    );
    assert_audit_verifies(&config);
}

// ---------------------------------------------------------------------------
// Audit tampering
// ---------------------------------------------------------------------------

/// Run `statements` on the service's database at `url`, as someone with
/// write access to it (not through the service) would.
async fn run_sql(url: &str, statements: &[&str]) {
    let db = ecdysis_serve::Db::open(url).await.unwrap();
    for sql in statements {
        sqlx::query(sql)
            .execute(db.pool())
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    db.close().await;
}

// The same tamperings on both databases: the chain lives in the `audit`
// table whichever holds it. Between cases the untouched log is put back
// from a copy of the table kept beside it (plain SQL both databases run).
on_both_backends!(audit_tamper =>
    audit_verify_detects_edited_removed_and_reordered_records_on_sqlite,
    audit_verify_detects_edited_removed_and_reordered_records_on_postgres);

async fn audit_tamper(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(backend, dir.path());
    let config = config_file(dir.path(), &db.url, MODELS);
    for name in ["t1", "t2", "t3", "t4", "t5"] {
        add_tenant(&config, name);
    }
    cli(&config, &["tenant", "revoke", "t2"]);
    assert_audit_verifies(&config);
    let head = cli(&config, &["audit", "verify"]);
    let head_hash = head
        .split_whitespace()
        .nth(4)
        .unwrap()
        .trim_end_matches(';')
        .to_string();
    assert_eq!(head_hash.len(), 64, "{head}");
    run_sql(
        &db.url,
        &["CREATE TABLE pristine_audit AS SELECT * FROM audit"],
    )
    .await;
    let restore = [
        "DELETE FROM audit",
        "INSERT INTO audit SELECT * FROM pristine_audit",
    ];
    let cases: [(&str, &[&str], &str); 4] = [
        (
            "edited",
            &["UPDATE audit SET tenant = 'mallory' WHERE seq = 2"],
            "edited",
        ),
        ("removed", &["DELETE FROM audit WHERE seq = 3"], "missing"),
        (
            "reordered",
            &[
                "UPDATE audit SET seq = -2 WHERE seq = 2",
                "UPDATE audit SET seq = 2 WHERE seq = 3",
                "UPDATE audit SET seq = 3 WHERE seq = -2",
            ],
            "does not follow",
        ),
        (
            "cut off",
            &["DELETE FROM audit WHERE seq = (SELECT MAX(seq) FROM audit)"],
            "head",
        ),
    ];
    for (what, sql, says) in cases {
        run_sql(&db.url, &restore).await;
        assert_audit_verifies(&config);
        run_sql(&db.url, sql).await;
        let out = cli_output(&config, &["audit", "verify"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{what}: verify passed: {text}");
        assert!(
            text.contains("BROKEN") && text.contains(says),
            "{what}: {text}"
        );
    }
    // A consistent rewrite of the whole chain is caught by the head the
    // operator wrote down.
    run_sql(&db.url, &restore).await;
    let out = cli_output(
        &config,
        &["audit", "verify", "--expect-head", &"f".repeat(64)],
    );
    assert!(!out.status.success());
    assert!(
        cli_output(&config, &["audit", "verify", "--expect-head", &head_hash])
            .status
            .success()
    );
}

// ---------------------------------------------------------------------------
// Fair scheduling and load
// ---------------------------------------------------------------------------

// A tenant's large job does not starve another's small one: with the
// large job queued first, the small job finishes while most of the large
// one is still queued. Prints both completion times (docs/src/performance.md).
on_both_backends!(small_job_beside_a_large_one =>
    a_small_job_is_not_starved_by_a_large_one_on_sqlite,
    a_small_job_is_not_starved_by_a_large_one_on_postgres);

async fn small_job_beside_a_large_one(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(backend, dir.path());
    let config = config_file(dir.path(), &db.url, MODELS);
    let big = add_tenant(&config, "big");
    let small = add_tenant(&config, "small");
    cli(
        &config,
        &["tenant", "set-quota", "big", "concurrent_episodes=100"],
    );
    let server = Server::start(&config, &[]);
    let api = Api::new(&server.url);
    let small_request = json!({"tasks": ["0", "1", "2", "3"], "agent": "slow"});

    let started = Instant::now();
    let alone = api.evaluate(&small, small_request.clone()).await;
    api.wait(&small, &alone).await;
    let solo = started.elapsed();

    let tasks: Vec<String> = (0..40).map(|i| i.to_string()).collect();
    let large = api
        .evaluate(&big, json!({"tasks": tasks, "trials": 2, "agent": "slow"}))
        .await;
    api.wait_until(&big, &large, |s| {
        s["progress"]["done"].as_i64().unwrap() >= 2
    })
    .await;
    let started = Instant::now();
    let id = api.evaluate(&small, small_request).await;
    let s = api.wait(&small, &id).await;
    let beside = started.elapsed();
    assert_eq!(s["progress"]["done"], 4);
    let l = api
        .get(&format!("/v1/evaluations/{large}"), &big)
        .await
        .json();
    assert!(
        l["progress"]["queued"].as_i64().unwrap() > 40,
        "the small job waited for the large one: {l}"
    );
    println!(
        "fairness ({backend:?}): small job (4 episodes, 2 slots) alone {:.2} s, beside an 80-episode job {:.2} s ({:.2}x)",
        solo.as_secs_f64(),
        beside.as_secs_f64(),
        beside.as_secs_f64() / solo.as_secs_f64()
    );
    api.delete(&format!("/v1/evaluations/{large}"), &big).await;
}

// 50 clients poll status while evaluations run: every answer is a 200;
// prints the p50/p99 latency (docs/src/performance.md). On Postgres every request
// also takes from the tenant's rate bucket row (shared by API servers).
on_both_backends!(fifty_clients_polling =>
    fifty_clients_polling_while_evaluations_run_on_sqlite,
    fifty_clients_polling_while_evaluations_run_on_postgres);

async fn fifty_clients_polling(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(backend, dir.path());
    let config = config_file(dir.path(), &db.url, MODELS);
    let t = add_tenant(&config, "poller");
    cli(
        &config,
        &["tenant", "set-quota", "poller", "requests_per_second=10000"],
    );
    let server = Server::start(&config, &[]);
    let api = std::sync::Arc::new(Api::new(&server.url));
    let tasks: Vec<String> = (0..10).map(|i| i.to_string()).collect();
    let id = api
        .evaluate(&t, json!({"tasks": tasks, "agent": "sim"}))
        .await;
    let mut clients = Vec::new();
    for _ in 0..50 {
        let (api, t, id) = (api.clone(), t.clone(), id.clone());
        clients.push(tokio::spawn(async move {
            let mut times = Vec::new();
            for _ in 0..20 {
                let started = Instant::now();
                let a = api.get(&format!("/v1/evaluations/{id}"), &t).await;
                times.push(started.elapsed());
                assert_eq!(a.status, 200, "{}", a.body);
            }
            times
        }));
    }
    let mut all = Vec::new();
    for c in clients {
        all.extend(c.await.unwrap());
    }
    all.sort();
    let p = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    println!(
        "load ({backend:?}): 50 clients x 20 status polls while an evaluation runs: p50 {:.1} ms, p99 {:.1} ms ({} requests)",
        p(0.5).as_secs_f64() * 1000.0,
        p(0.99).as_secs_f64() * 1000.0,
        all.len()
    );
    assert_eq!(all.len(), 1000);
    assert_eq!(api.wait(&t, &id).await["state"], "done");
}

// ---------------------------------------------------------------------------
// Postgres: several workers on one database
// ---------------------------------------------------------------------------

/// A throwaway Postgres cluster in a temp dir (Debian's binaries; as the
/// `postgres` user when the tests run as root, which initdb refuses).
struct Postgres {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    as_root: bool,
    _tmp: tempfile::TempDir,
}

impl Postgres {
    /// A cluster for tests: `fsync=off` (a test's cluster is thrown away).
    fn start() -> Postgres {
        Postgres::start_with(false)
    }

    /// `durable`: `fsync=on` and `synchronous_commit=on` (Postgres's
    /// defaults: every commit waits for its WAL to reach the disk), as a
    /// deployment runs and as the benchmark compares against `run`, which
    /// fsyncs every record it writes.
    fn start_with(durable: bool) -> Postgres {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .and_then(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.path().join("bin"))
                    .find(|b| b.join("initdb").exists())
            })
            .expect("Postgres is not installed: apt-get install -y postgresql (.ci/run does)");
        let tmp = tempfile::Builder::new()
            .prefix("ecdysis-pg")
            .tempdir_in("/tmp")
            .unwrap();
        let dir = tmp.path().join("cluster");
        std::fs::create_dir(&dir).unwrap();
        // SAFETY: geteuid has no preconditions.
        let as_root = unsafe { libc::geteuid() } == 0;
        if as_root {
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(tmp.path())
                .status()
                .unwrap()
                .success();
            assert!(ok);
        }
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let pg = Postgres {
            dir,
            bin,
            port,
            as_root,
            _tmp: tmp,
        };
        pg.run(
            "initdb",
            &[
                "-D",
                pg.dir.to_str().unwrap(),
                "-U",
                "ecdysis",
                "--auth=trust",
                "-E",
                "UTF8",
            ],
        );
        // `ECDYSIS_TEST_PG_OPTS`: more server options (e.g. to load
        // pg_stat_statements for the benchmark's statement profile).
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 {} -c max_connections=200 {}",
            pg.port,
            pg.dir.display(),
            if durable {
                "-c fsync=on -c synchronous_commit=on"
            } else {
                "-c fsync=off"
            },
            std::env::var("ECDYSIS_TEST_PG_OPTS").unwrap_or_default()
        );
        pg.run(
            "pg_ctl",
            &[
                "-D",
                pg.dir.to_str().unwrap(),
                "-o",
                &opts,
                "-l",
                pg.dir.join("log").to_str().unwrap(),
                "-w",
                "start",
            ],
        );
        pg
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let program = self.bin.join(tool);
        let out = if self.as_root {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&program)
                .args(args)
                .output()
        } else {
            Command::new(&program).args(args).output()
        }
        .unwrap();
        assert!(
            out.status.success(),
            "{tool} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A new database; its URL.
    fn database(&self, name: &str) -> String {
        self.run(
            "createdb",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "ecdysis",
                name,
            ],
        );
        format!("postgres://ecdysis@127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = Command::new(if self.as_root { "runuser" } else { "true" });
        let pg_ctl = self.bin.join("pg_ctl");
        let dir = self.dir.to_str().unwrap().to_string();
        let args = ["-D", dir.as_str(), "-m", "immediate", "stop"];
        let _ = if self.as_root {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(pg_ctl)
                .args(args)
                .output()
        } else {
            Command::new(pg_ctl).args(args).output()
        };
    }
}

/// The multi-machine mode: the server runs no episodes; two `ecdysis-host
/// worker` processes claim them from a shared Postgres database. The
/// two-tenant scenario passes as on SQLite, both workers serve episodes,
/// and a `kill -9` of one worker mid-evaluation loses and doubles nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_with_two_workers_end_to_end_and_a_killed_worker() {
    let pg = Postgres::start();
    let url = pg.database("ecdysis_serve");
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(
        dir.path(),
        &url,
        &format!("{MODELS}\n[worker]\nslots = 0\nlease_seconds = 2\n"),
    );
    let a = add_tenant(&config, "alice");
    let b = add_tenant(&config, "bob");
    let server = Server::start(&config, &[]);
    let _w1 = start_worker(&config, "pg-w1", 1);
    let mut w2 = start_worker(&config, "pg-w2", 1);
    two_tenants(&server.url, &config, &a, &b).await;

    let api = Api::new(&server.url);
    let tasks: Vec<String> = (0..8).map(|i| i.to_string()).collect();
    let id = api
        .evaluate(&a, json!({"tasks": tasks, "agent": "slow"}))
        .await;
    api.wait_until(&a, &id, |s| {
        s["progress"]["done"].as_i64().unwrap() >= 2
            && s["progress"]["running"].as_i64().unwrap() >= 2
    })
    .await;
    w2.kill9();
    let s = api.wait(&a, &id).await;
    assert_eq!(s["progress"]["done"], 8, "{s}");
    assert_eq!(episode_keys(&api.trajectories(&a, &id).await).len(), 8);

    // Both workers served episodes (the worker is kept on the row).
    let db = ecdysis_serve::Db::open(&url).await.unwrap();
    let workers: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT worker FROM episodes WHERE state = 'done' AND worker IS NOT NULL ORDER BY worker",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    assert_eq!(workers, vec!["pg-w1".to_string(), "pg-w2".to_string()]);
    assert_audit_verifies(&config);
}

// ---------------------------------------------------------------------------
// Workers' environment
// ---------------------------------------------------------------------------

/// `pid`'s children (from `/proc/*/stat`).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid …": the name may hold spaces and parens.
        let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
        let ppid = after.split_whitespace().nth(1).and_then(|p| p.parse().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}

/// A process's whole environment, as the kernel holds it.
fn environ(pid: u32) -> Vec<(String, String)> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap()
        .split(|b| *b == 0)
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            let (k, v) = kv.split_once('=').unwrap_or((&kv, ""));
            (k.to_string(), v.to_string())
        })
        .collect()
}

on_both_backends!(workers_get_the_allow_list_and_their_aliases_keys_only =>
    workers_get_the_allow_list_and_their_aliases_keys_only_on_sqlite,
    workers_get_the_allow_list_and_their_aliases_keys_only_on_postgres);

/// Worker processes (episode and upload-check workers) get an allow-list
/// of the server's environment plus the key variables the model aliases
/// name, nothing else: a secret set on the server never reaches the
/// process where an untrusted harness runs, while an alias's key does (it
/// arrives at the alias's endpoint as the bearer token).
async fn workers_get_the_allow_list_and_their_aliases_keys_only(backend: Backend) {
    use ecdysis_testkit::mock::{MockReply, MockServer};
    const KEY_VAR: &str = "ECDYSIS_TEST_ALIAS_KEY";
    const SECRET_VAR: &str = "ECDYSIS_TEST_SERVER_SECRET";
    let mock = MockServer::start().await.unwrap();
    mock.set_fallback(MockReply::text("I cannot help with that."));
    let dir = tempfile::tempdir().unwrap();
    let models = format!(
        "{MODELS}[models.keyed]\nmodel = \"keyed-model\"\nbase_url = \"{}\"\napi_key_env = \"{KEY_VAR}\"\n",
        mock.base_url()
    );
    let db = test_db(backend, dir.path());
    let config = config_file(dir.path(), &db.url, &models);
    let t = add_tenant(&config, "keyed");
    let server = Server::start(
        &config,
        &[
            (KEY_VAR, "alias-key-123"),
            (SECRET_VAR, "server-secret-456"),
        ],
    );
    let api = Api::new(&server.url);
    let up = api.upload(&t, &direct()).await;
    assert_eq!(up.status, 201, "{}", up.body);
    let id = api
        .evaluate(
            &t,
            json!({"harness": up.json()["hash"], "tasks": ["0"], "agent": "keyed", "limits": {"max_steps": 4}}),
        )
        .await;
    assert_eq!(api.wait(&t, &id).await["state"], "done");

    // Positive control: the alias's key reached the worker, which sent it
    // to the alias's endpoint.
    let requests = mock.requests();
    assert!(!requests.is_empty());
    for r in &requests {
        assert_eq!(r.header("authorization"), Some("Bearer alias-key-123"));
    }
    // The server has the secret (so inheriting would show) …
    let pid = server.proc.0.as_ref().unwrap().id();
    assert!(environ(pid).contains(&(SECRET_VAR.into(), "server-secret-456".into())));
    // … its workers do not: every variable they hold is allowed.
    let workers: Vec<u32> = children(pid)
        .into_iter()
        .filter(|c| {
            std::fs::read(format!("/proc/{c}/cmdline"))
                .map(|cmd| String::from_utf8_lossy(&cmd).contains("episode-worker"))
                .unwrap_or(false)
        })
        .collect();
    assert!(
        workers.len() >= 2,
        "an episode worker and a check worker: {workers:?}"
    );
    let allowed = ecdysis_serve::WORKER_ENV_ALLOW;
    let mut keyed = 0;
    for w in &workers {
        let env = environ(*w);
        for (k, _) in &env {
            assert!(
                allowed.contains(&k.as_str()) || k == KEY_VAR,
                "worker {w} got `{k}` from the server's environment"
            );
        }
        assert!(env.iter().any(|(k, _)| k == "PATH"), "PATH is passed on");
        keyed += env
            .iter()
            .filter(|(k, v)| k == KEY_VAR && v == "alias-key-123")
            .count();
    }
    // The episode worker has the key; the check worker (no model) not.
    assert_eq!(keyed, 1, "exactly the episode worker holds the alias's key");
}

// ---------------------------------------------------------------------------
// No existence leak through uploads
// ---------------------------------------------------------------------------

/// `bytes` with a custom section appended: still the same component, but
/// other bytes (another hash).
fn variant(bytes: &[u8], n: u64) -> Vec<u8> {
    let name = b"ecdysis-test-variant";
    let payload = n.to_le_bytes();
    let size = 1 + name.len() + payload.len();
    assert!(size < 128, "one-byte LEB128 sizes");
    let mut out = bytes.to_vec();
    out.push(0); // custom section
    out.push(size as u8);
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.extend_from_slice(&payload);
    out
}

fn error_code(a: &Answer) -> String {
    a.json()["error"]["code"].as_str().unwrap_or("").to_string()
}

on_both_backends!(uploading_another_tenants_bytes_does_the_same_work_as_new_bytes =>
    uploading_another_tenants_bytes_does_the_same_work_as_new_bytes_on_sqlite,
    uploading_another_tenants_bytes_does_the_same_work_as_new_bytes_on_postgres);

/// Uploading bytes another tenant stored takes the same path as new bytes:
/// they are checked in a worker every time. With a checker that cannot run,
/// an upload of another tenant's bytes fails exactly like one of new bytes
/// (a service that skipped the check for known bytes would accept it); with
/// a working checker both are accepted, each as the uploader's own.
async fn uploading_another_tenants_bytes_does_the_same_work_as_new_bytes(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(backend, dir.path());
    let config = config_file(dir.path(), &db.url, MODELS);
    let alice = add_tenant(&config, "alice");
    let bob = add_tenant(&config, "bob");
    let stored = variant(&direct(), 1);
    let fresh = variant(&direct(), 2);
    let mut server = Server::start(&config, &[]);
    let a = Api::new(&server.url).upload(&alice, &stored).await;
    assert_eq!(a.status, 201, "{}", a.body);

    // The checker cannot start (1 MiB of data segment).
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("[worker]\n", "[worker]\ncheck_memory_mib = 1\n"),
    )
    .unwrap();
    server.restart();
    let api = Api::new(&server.url);
    let dup = api.upload(&bob, &stored).await;
    let new = api.upload(&bob, &fresh).await;
    assert_ne!(
        dup.status, 201,
        "bytes already stored skipped the check: {}",
        dup.body
    );
    assert_eq!(
        (dup.status, error_code(&dup)),
        (new.status, error_code(&new)),
        "{} / {}",
        dup.body,
        new.body
    );
    assert!(
        api.get("/v1/harnesses", &bob).await.json()["harnesses"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // Control: with the checker back, both go through, as bob's own.
    std::fs::write(&config, text).unwrap();
    server.restart();
    let api = Api::new(&server.url);
    for bytes in [&stored, &fresh] {
        let r = api.upload(&bob, bytes).await;
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(r.json()["access"], "owned");
    }
    // Rewriting the component row on every upload keeps its bytes.
    let check = ecdysis_serve::Db::open(&db.url).await.unwrap();
    let hash = a.json()["hash"].as_str().unwrap().to_string();
    let bytes = ecdysis_serve::harnesses::component_bytes(&check, &hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(bytes, stored);
}

/// Triggers that log every insert and update of a `components` row into
/// `component_writes` (what the database did, whatever the service says).
async fn log_component_writes(url: &str, backend: Backend) {
    let create =
        "CREATE TABLE component_writes (n BIGINT NOT NULL, hash TEXT NOT NULL, op TEXT NOT NULL)";
    match backend {
        Backend::Sqlite => {
            let mut statements = vec![create.to_string()];
            for op in ["INSERT", "UPDATE"] {
                statements.push(format!(
                    "CREATE TRIGGER component_{op} AFTER {op} ON components BEGIN
                     INSERT INTO component_writes (n, hash, op)
                     VALUES ((SELECT COUNT(*) FROM component_writes), NEW.hash, '{op}'); END"
                ));
            }
            let statements: Vec<&str> = statements.iter().map(String::as_str).collect();
            run_sql(url, &statements).await;
        }
        Backend::Postgres => {
            run_sql(
                url,
                &[
                    create,
                    "CREATE FUNCTION note_component_write() RETURNS trigger LANGUAGE plpgsql AS $fn$
                     BEGIN
                       INSERT INTO component_writes (n, hash, op)
                       VALUES ((SELECT COUNT(*) FROM component_writes), NEW.hash, TG_OP);
                       RETURN NEW;
                     END $fn$",
                    "CREATE TRIGGER component_writes AFTER INSERT OR UPDATE ON components
                     FOR EACH ROW EXECUTE FUNCTION note_component_write()",
                ],
            )
            .await;
        }
    }
}

/// The writes `log_component_writes` saw, in order: (hash, op).
async fn component_writes(url: &str) -> Vec<(String, String)> {
    let db = ecdysis_serve::Db::open(url).await.unwrap();
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT hash, op FROM component_writes ORDER BY n")
            .fetch_all(db.pool())
            .await
            .unwrap();
    db.close().await;
    rows
}

// The component row is written again when another tenant uploads bytes
// already stored (`ON CONFLICT DO UPDATE`), so the upload does the same
// database work as one of new bytes. Seen from inside the database: a
// trigger logs each insert and update of the row. A service that skipped
// the write for known bytes (`DO NOTHING`, or a lookup first) logs no
// update for the duplicate. Control: new bytes log their insert.
on_both_backends!(duplicate_upload_rewrites_the_component =>
    another_tenants_duplicate_upload_rewrites_the_component_row_on_sqlite,
    another_tenants_duplicate_upload_rewrites_the_component_row_on_postgres);

async fn duplicate_upload_rewrites_the_component(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(backend, dir.path());
    let config = config_file(dir.path(), &db.url, MODELS);
    let alice = add_tenant(&config, "alice");
    let bob = add_tenant(&config, "bob");
    log_component_writes(&db.url, backend).await;
    let stored = variant(&direct(), 1);
    let fresh = variant(&direct(), 2);
    let server = Server::start(&config, &[]);
    let api = Api::new(&server.url);
    let hash_of = |a: &Answer| {
        assert_eq!(a.status, 201, "{}", a.body);
        a.json()["hash"].as_str().unwrap().to_string()
    };
    let stored_hash = hash_of(&api.upload(&alice, &stored).await);
    let insert = |h: &str| (h.to_string(), "INSERT".to_string());
    let update = |h: &str| (h.to_string(), "UPDATE".to_string());
    assert_eq!(component_writes(&db.url).await, vec![insert(&stored_hash)]);

    let dup = api.upload(&bob, &stored).await;
    assert_eq!(hash_of(&dup), stored_hash);
    assert_eq!(dup.json()["access"], "owned");
    assert_eq!(
        component_writes(&db.url).await,
        vec![insert(&stored_hash), update(&stored_hash)],
        "bob's upload of alice's bytes did not rewrite the component row"
    );

    let fresh_hash = hash_of(&api.upload(&bob, &fresh).await);
    assert_ne!(fresh_hash, stored_hash);
    assert_eq!(
        component_writes(&db.url).await,
        vec![
            insert(&stored_hash),
            update(&stored_hash),
            insert(&fresh_hash)
        ]
    );
    // The rewrite keeps the bytes.
    let check = ecdysis_serve::Db::open(&db.url).await.unwrap();
    let bytes = ecdysis_serve::harnesses::component_bytes(&check, &stored_hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(bytes, stored);
}

// ---------------------------------------------------------------------------
// Several API servers on one Postgres
// ---------------------------------------------------------------------------

/// Two `serve` processes on one Postgres database draw a tenant's requests
/// from one `requests_per_second` bucket: with a rate of 0.2/s (a burst of
/// one request), a request on the first server empties the bucket for the
/// second. Per-process buckets would let the second answer 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_api_servers_on_postgres_share_a_tenants_request_rate() {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(Backend::Postgres, dir.path());
    let config = config_file(
        dir.path(),
        &db.url,
        &format!("{MODELS}\n[worker]\nslots = 0\nlease_seconds = 2\n"),
    );
    let t = add_tenant(&config, "limited");
    let other = add_tenant(&config, "other");
    cli(
        &config,
        &["tenant", "set-quota", "limited", "requests_per_second=0.2"],
    );
    let first = Server::start(&config, &[]);
    let second = Server::start(&config, &[]);
    let (a, b) = (Api::new(&first.url), Api::new(&second.url));
    let started = Instant::now();
    assert_eq!(a.get("/v1/usage", &t).await.status, 200);
    let r = b.get("/v1/usage", &t).await;
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "too slow to test a 5 s refill"
    );
    assert_eq!(
        r.status, 429,
        "the second server had its own bucket: {}",
        r.body
    );
    assert_eq!(r.json()["error"]["quota"], "requests_per_second");
    let retry: u64 = r.retry_after.as_deref().unwrap().parse().unwrap();
    assert!((1..=5).contains(&retry), "{retry}");
    assert_eq!(a.get("/v1/usage", &t).await.status, 429);
    // Controls: another tenant is served by both; the bucket refills.
    assert_eq!(a.get("/v1/usage", &other).await.status, 200);
    assert_eq!(b.get("/v1/usage", &other).await.status, 200);
    tokio::time::sleep(Duration::from_secs(retry + 1)).await;
    assert_eq!(b.get("/v1/usage", &t).await.status, 200);
}

// ---------------------------------------------------------------------------
// Measurements (docs/src/performance.md): `cargo test -p ecdysis-host --test it serve:: -- --ignored --nocapture`
// ---------------------------------------------------------------------------

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// The machine's load average (1, 5, 15 min), printed beside every number.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Benchmark: episode throughput through the service against `run
/// --isolate process` on the same episodes (tasks × 4 trials, seed 1),
/// simulated agent, model latency and concurrency (4), side by side in
/// rounds that alternate which goes first. Throughput is marginal (the
/// time of the large batch minus the small one's) so that `run`'s start-up
/// (processes, domain, compilation) and the service's warm workers do not
/// decide it. Runs every (database, latency) pair in one invocation;
/// prints each round's ratio, the medians, and the load average.
///
/// `ECDYSIS_SERVE_BENCH_LATENCY_MS` (default `0,150`: ~10 ms episodes that
/// are all host, and episodes that wait on a model, as real ones do),
/// `ECDYSIS_SERVE_BENCH_BACKENDS` (default `sqlite,postgres`),
/// `ECDYSIS_SERVE_BENCH_ROUNDS` (default 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a benchmark: run with --ignored --nocapture"]
async fn bench_service_throughput_against_run() {
    let latencies: Vec<u64> = std::env::var("ECDYSIS_SERVE_BENCH_LATENCY_MS")
        .unwrap_or_else(|_| "0,150".into())
        .split(',')
        .map(|v| v.trim().parse().expect("latency in ms"))
        .collect();
    let backends: Vec<Backend> = std::env::var("ECDYSIS_SERVE_BENCH_BACKENDS")
        .unwrap_or_else(|_| "sqlite,postgres".into())
        .split(',')
        .map(|b| match b.trim() {
            "sqlite" => Backend::Sqlite,
            "postgres" => Backend::Postgres,
            other => panic!("unknown backend {other:?}"),
        })
        .collect();
    let rounds: usize = env_or("ECDYSIS_SERVE_BENCH_ROUNDS", 3);
    let load_before = load_average();
    let mut table = Vec::new();
    let modes = std::env::var("ECDYSIS_SERVE_BENCH_SERVICE").ok();
    for &backend in &backends {
        for &latency_ms in &latencies {
            // Host-bound episodes show what the long-running service's
            // per-task caches are worth; model-bound ones hardly do.
            let modes: Vec<Service> = match &modes {
                Some(list) => list
                    .split(',')
                    .map(|m| match m.trim() {
                        "fresh" => Service::Fresh,
                        "long-running" => Service::LongRunning,
                        other => panic!("unknown service mode {other:?}"),
                    })
                    .collect(),
                None if latency_ms == 0 => vec![Service::Fresh, Service::LongRunning],
                None => vec![Service::Fresh],
            };
            for mode in modes {
                let (median, min, max) =
                    throughput_against_run(backend, latency_ms, mode, rounds).await;
                table.push(format!(
                "{backend:?} at {latency_ms} ms per model call, {mode:?} service: serve/run time per episode median {:.3} (overhead {:+.1}%, min {:+.1}%, max {:+.1}%, {rounds} rounds)",
                1.0 + median,
                median * 100.0,
                min * 100.0,
                max * 100.0
            ));
            }
        }
    }
    println!(
        "service overhead (4 episodes at once, sim:mixed; simulated agent — not a benchmark result):"
    );
    for line in &table {
        println!("  {line}");
    }
    println!(
        "load average before {load_before}, after {}",
        load_average()
    );
}

/// One (database, latency) pair of the benchmark above: the median, min and
/// max overhead over `rounds`.
async fn throughput_against_run(
    backend: Backend,
    latency_ms: u64,
    mode: Service,
    rounds: usize,
) -> (f64, f64, f64) {
    const SLOTS: usize = 4;
    // Host-bound batches are large enough (~2 s of marginal work) that a
    // scheduling hiccup is a small part of the difference.
    let (small_n, large_n) = if latency_ms == 0 { (10, 110) } else { (5, 20) };
    let small: Vec<String> = (0..small_n).map(|i| i.to_string()).collect();
    let large: Vec<String> = (0..large_n).map(|i| i.to_string()).collect();
    let marginal = ((large_n - small_n) * 4) as f64;
    let dir = tempfile::tempdir().unwrap();
    // Durable commits on Postgres, as `run` fsyncs its records.
    let db = test_db_with(backend, dir.path(), true);
    let wasm = dir.path().join("direct.wasm");
    std::fs::write(&wasm, direct()).unwrap();

    // `run` directly, episodes in worker processes.
    let runs = std::cell::Cell::new(0);
    let run = |tasks: &[String]| {
        runs.set(runs.get() + 1);
        let cpu_before = children_cpu_seconds();
        let started = Instant::now();
        let out = Command::new(support::host_bin())
            .args(["--quiet", "--store"])
            .arg(dir.path().join("run-store"))
            .args(["run", "--harness"])
            .arg(&wasm)
            .args(["--tasks", &tasks.join(","), "--split", "all"])
            .args(["--trials", "4", "--agent-model", "sim:mixed", "--seed", "1"])
            .args([
                "--cache",
                "off",
                "--sim-latency-ms",
                &latency_ms.to_string(),
            ])
            .args(["--concurrency", &SLOTS.to_string(), "--isolate", "process"])
            .arg("--out")
            .arg(dir.path().join(format!("run-out-{}", runs.get())))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let secs = started.elapsed().as_secs_f64();
        (secs, children_cpu_seconds() - cpu_before)
    };

    // The same through the service: an alias with the same latency.
    let config = config_file(
        dir.path(),
        &db.url,
        &format!(
            "[models.bench]\nmodel = \"sim:mixed\"\nsim_latency_ms = {latency_ms}\n[worker]\nslots = {SLOTS}\nlease_seconds = 30\n"
        ),
    );
    let t = add_tenant(&config, "bench");
    cli(
        &config,
        &["tenant", "set-quota", "bench", "concurrent_episodes=100"],
    );
    let mut server = Server::start(&config, &[]);
    let mut api = Api::new(&server.url);
    let hash = api.upload(&t, &direct()).await.json()["hash"].clone();
    let postmaster = db.postmaster_pid();
    // Warm-up, not timed, the same on both sides: `run` compiles the
    // component into its store (the service compiled it at the upload);
    // the service's workers open the domain and load the component, as
    // each `run` does before its first episode.
    run(&small[..1]);
    serve_batch(&api, &server, &t, &hash, postmaster, &small[..1]).await;
    let profile = backend == Backend::Postgres && std::env::var_os(PG_STATS).is_some();
    if profile {
        run_sql(
            &db.url,
            &[
                "CREATE EXTENSION IF NOT EXISTS pg_stat_statements",
                "SELECT pg_stat_statements_reset()",
            ],
        )
        .await;
    }

    let mut overheads = Vec::new();
    // Marginal CPU seconds (large batch minus small), summed over rounds:
    // `run` with its workers; the server process, its workers, Postgres.
    let (mut run_cpu, mut serve_cpu_sum) = (0.0, [0.0; 3]);
    for round in 1..=rounds {
        let (mut run_t, mut serve_t) = ([0.0; 2], [0.0; 2]);
        let (mut run_c, mut serve_c) = ([0.0; 2], [[0.0; 3]; 2]);
        for (i, tasks) in [&small, &large].into_iter().enumerate() {
            if mode == Service::Fresh {
                // Like each `run`, each batch starts new worker processes
                // that have scored no task yet (and new database
                // connections), so the subtraction cancels their start-up
                // as it does `run`'s.
                server.restart();
                api = Api::new(&server.url);
            }
            if round % 2 == 1 {
                (run_t[i], run_c[i]) = run(tasks);
                (serve_t[i], serve_c[i]) =
                    serve_batch(&api, &server, &t, &hash, postmaster, tasks).await;
            } else {
                (serve_t[i], serve_c[i]) =
                    serve_batch(&api, &server, &t, &hash, postmaster, tasks).await;
                (run_t[i], run_c[i]) = run(tasks);
            }
        }
        run_cpu += run_c[1] - run_c[0];
        for k in 0..3 {
            serve_cpu_sum[k] += serve_c[1][k] - serve_c[0][k];
        }
        let run_rate = marginal / (run_t[1] - run_t[0]);
        let serve_rate = marginal / (serve_t[1] - serve_t[0]);
        let overhead = run_rate / serve_rate - 1.0;
        overheads.push(overhead);
        println!(
            "{backend:?} {latency_ms} ms {mode:?} round {round}: run {} eps {:.2} s, {} eps {:.2} s, marginal {run_rate:.2} eps/s | serve {:.2} s, {:.2} s, marginal {serve_rate:.2} eps/s | serve/run time per episode {:.3} (overhead {:+.1}%) | CPU ms per marginal episode: run {:.2}, serve {:.2} | load {}",
            small_n * 4,
            run_t[0],
            large_n * 4,
            run_t[1],
            serve_t[0],
            serve_t[1],
            1.0 + overhead,
            overhead * 100.0,
            (run_c[1] - run_c[0]) * 1000.0 / marginal,
            (0..3).map(|k| serve_c[1][k] - serve_c[0][k]).sum::<f64>() * 1000.0 / marginal,
            load_average()
        );
    }
    let per_episode = |cpu: f64| cpu * 1000.0 / (marginal * rounds as f64);
    println!(
        "{backend:?} {latency_ms} ms {mode:?} CPU per marginal episode: run {:.2} ms (itself and its workers) | serve {:.2} ms = server process {:.2} + workers {:.2} + Postgres {:.2}",
        per_episode(run_cpu),
        per_episode(serve_cpu_sum.iter().sum()),
        per_episode(serve_cpu_sum[0]),
        per_episode(serve_cpu_sum[1]),
        per_episode(serve_cpu_sum[2]),
    );
    if profile {
        print_statement_profile(&db.url, rounds * (small_n + large_n) * 4).await;
    }
    let mut sorted = overheads.clone();
    sorted.sort_by(f64::total_cmp);
    (median(overheads), sorted[0], sorted[sorted.len() - 1])
}

/// Whether the service starts each round fresh or keeps running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Service {
    /// Restarted before each batch: its worker processes start, and have
    /// scored no task yet, like `run`'s (like for like).
    Fresh,
    /// One server for every round: its worker processes keep what they
    /// computed per task (the tau2 domain's gold outcomes) across
    /// evaluations, which `run`, starting new processes, cannot.
    LongRunning,
}

/// One evaluation of `tasks` × 4 trials through the service: its wall time
/// and the CPU seconds (server process, its episode workers, Postgres) it
/// took.
async fn serve_batch(
    api: &Api,
    server: &Server,
    t: &Tenant,
    hash: &Value,
    postmaster: Option<u32>,
    tasks: &[String],
) -> (f64, [f64; 3]) {
    let server_pid = server.proc.0.as_ref().unwrap().id();
    let cpu = || {
        let workers: f64 = children(server_pid).into_iter().map(cpu_seconds).sum();
        [
            cpu_seconds(server_pid),
            workers,
            postmaster.map_or(0.0, cluster_cpu_seconds),
        ]
    };
    let episodes = tasks.len() * 4;
    let before = cpu();
    let started = Instant::now();
    let id = api
        .evaluate(
            t,
            json!({"harness": hash, "tasks": tasks, "trials": 4, "agent": "bench", "seed": 1}),
        )
        .await;
    let s = api.wait(t, &id).await;
    assert_eq!(s["state"], "done");
    assert_eq!(s["progress"]["done"], episodes, "{s}");
    let secs = started.elapsed().as_secs_f64();
    let after = cpu();
    (secs, [0, 1, 2].map(|k| after[k] - before[k]))
}

/// CPU seconds (user + system) `pid` has used itself.
fn cpu_seconds(pid: u32) -> f64 {
    proc_stat_ticks(pid, 2) as f64 / clock_ticks()
}

/// A Postgres cluster's CPU seconds: the postmaster, its live backends and
/// the ones it has reaped.
fn cluster_cpu_seconds(postmaster: u32) -> f64 {
    let live: u64 = children(postmaster)
        .into_iter()
        .map(|p| proc_stat_ticks(p, 2))
        .sum();
    (proc_stat_ticks(postmaster, 4) + live) as f64 / clock_ticks()
}

/// utime + stime (`fields` 2) or + cutime + cstime (4) from /proc/PID/stat.
fn proc_stat_ticks(pid: u32, fields: usize) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
    // After "(comm)": state is field 3, utime field 14.
    after
        .split_whitespace()
        .skip(11)
        .take(fields)
        .filter_map(|v| v.parse::<u64>().ok())
        .sum()
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as f64 }
}

/// CPU seconds of this process's children that have been waited for.
fn children_cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

/// Set (with `ECDYSIS_TEST_PG_OPTS="-c shared_preload_libraries=pg_stat_statements"`):
/// the benchmark prints where Postgres time went in its measured rounds.
const PG_STATS: &str = "ECDYSIS_SERVE_BENCH_PG_STATS";

/// Postgres's statements by total execution time, with calls and time per
/// served episode (pg_stat_statements; server-side time only, not the
/// round trips).
async fn print_statement_profile(url: &str, episodes: usize) {
    use sqlx::Row;
    let db = ecdysis_serve::Db::open(url).await.unwrap();
    let rows = sqlx::query(
        "SELECT calls, total_exec_time, rows, regexp_replace(query, '\\s+', ' ', 'g')
         FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 25",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    let (mut calls_all, mut ms_all) = (0i64, 0.0f64);
    println!(
        "Postgres statements over {episodes} served episodes (calls/episode, ms/episode, query):"
    );
    for r in &rows {
        let calls: i64 = r.get(0);
        let ms: f64 = r.get(1);
        let query: String = r.get(3);
        calls_all += calls;
        ms_all += ms;
        println!(
            "  {:6.2} {:7.3}  {}",
            calls as f64 / episodes as f64,
            ms / episodes as f64,
            query.chars().take(110).collect::<String>()
        );
    }
    println!(
        "  top 25 total: {:.2} statements and {:.3} ms of Postgres time per episode",
        calls_all as f64 / episodes as f64,
        ms_all / episodes as f64
    );
    let jit = sqlx::query(
        "SELECT CAST(COALESCE(SUM(jit_functions), 0) AS BIGINT),
                COALESCE(SUM(jit_generation_time + jit_inlining_time + jit_optimization_time + jit_emission_time), 0.0)
         FROM pg_stat_statements",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    println!(
        "  JIT: {} functions compiled, {:.1} ms",
        jit.get::<i64, _>(0),
        jit.get::<f64, _>(1)
    );
    db.close().await;
}

/// The server's memory per idle tenant: RSS before and after 2,000
/// tenants made a request each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn measure_memory_per_idle_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path(), &sqlite(dir.path()), MODELS);
    let server = Server::start(&config, &[]);
    let api = Api::new(&server.url);

    // Memory per idle tenant: 2,000 tenants that each made one request.
    let pid = server.proc.0.as_ref().unwrap().id();
    let db = ecdysis_serve::Db::open(&sqlite(dir.path())).await.unwrap();
    let mut tenants = Vec::new();
    for i in 0..2000 {
        let name = format!("idle{i}");
        let token = ecdysis_serve::tenants::add(&db, &name).await.unwrap();
        tenants.push(Tenant { name, token });
    }
    // One request first, so the connection pool and allocator are warm.
    assert_eq!(api.get("/v1/usage", &tenants[0]).await.status, 200);
    let before = rss_kib(pid);
    for t in &tenants[1..] {
        assert_eq!(api.get("/v1/usage", t).await.status, 200);
    }
    let after = rss_kib(pid);
    println!(
        "memory: server RSS {before} KiB, then {after} KiB after 1,999 more tenants made a request each: {:.2} KiB per idle tenant",
        after.saturating_sub(before) as f64 / 1999.0
    );
}

/// Benchmark: the time of an upload of bytes another tenant already stored
/// against one of bytes never seen, interleaved (new, stored, new, …; each
/// a distinct component: `direct` with a custom section), on one server.
/// Prints the medians, their ratio and the load average. Equal work (same
/// check in a worker, same writes) should give a ratio near 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a benchmark: run with --ignored --nocapture"]
async fn bench_upload_of_stored_bytes_against_new_bytes() {
    let n: u64 = env_or("ECDYSIS_SERVE_BENCH_UPLOADS", 15);
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path(), &sqlite(dir.path()), MODELS);
    let owner = add_tenant(&config, "owner");
    let prober = add_tenant(&config, "prober");
    cli(
        &config,
        &["tenant", "set-quota", "prober", "requests_per_second=1000"],
    );
    cli(
        &config,
        &["tenant", "set-quota", "owner", "requests_per_second=1000"],
    );
    let server = Server::start(&config, &[]);
    let api = Api::new(&server.url);
    let base = direct();
    // The owner stores variants 0..n; the prober uploads them (stored) and
    // variants n..2n (new).
    for i in 0..n {
        assert_eq!(api.upload(&owner, &variant(&base, i)).await.status, 201);
    }
    // Warm-up (the check workers start).
    assert_eq!(
        api.upload(&prober, &variant(&base, 10_000)).await.status,
        201
    );
    let load_before = load_average();
    let (mut stored, mut new) = (Vec::new(), Vec::new());
    for i in 0..n {
        for (times, bytes) in [
            (&mut new, variant(&base, n + i)),
            (&mut stored, variant(&base, i)),
        ] {
            let started = Instant::now();
            let r = api.upload(&prober, &bytes).await;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(r.status, 201, "{}", r.body);
        }
    }
    let (ms_stored, ms_new) = (median(stored), median(new));
    println!(
        "upload ({} KiB component, {n} of each, interleaved): bytes another tenant stored median {ms_stored:.1} ms, new bytes median {ms_new:.1} ms, ratio stored/new {:.3}; load average before {load_before}, after {}",
        base.len() / 1024,
        ms_stored / ms_new,
        load_average()
    );
}

// ---------------------------------------------------------------------------
// A broken configuration fails at start, not per request.

/// Started with a domain whose data is missing, or an endpoint alias whose
/// key variable is unset, `serve` refuses to start, naming each problem
/// (in bounded time, nothing listening); the same file with the data and
/// the key in place starts, and `--check-config` prints the resolved
/// configuration with its checks and the password of the database URL
/// redacted.
#[test]
fn serve_refuses_a_configuration_it_could_not_serve_and_checks_a_good_one() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("no-data");
    std::fs::create_dir_all(&empty).unwrap();
    let endpoint = "[models.remote]\nmodel = \"some-model\"\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key_env = \"ECDYSIS_TEST_UNSET_KEY\"\n";
    let config = config_file(
        dir.path(),
        "sqlite:serve.db",
        &format!("{MODELS}{endpoint}"),
    );
    let text = std::fs::read_to_string(&config).unwrap().replace(
        &format!(
            "data = {:?}",
            support::repo_root()
                .join(".ecdysis/data")
                .display()
                .to_string()
        ),
        &format!("data = {:?}", empty.display().to_string()),
    );
    std::fs::write(&config, text).unwrap();
    let started = std::time::Instant::now();
    let out = Command::new(support::host_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .current_dir(dir.path())
        .env_remove("ECDYSIS_TEST_UNSET_KEY")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(started.elapsed() < Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("domain tau2/retail"), "{err}");
    assert!(err.contains("not found") || err.contains("data"), "{err}");
    assert!(
        err.contains("model remote") && err.contains("ECDYSIS_TEST_UNSET_KEY"),
        "{err}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).is_empty(),
        "it must not listen"
    );

    // The positive control: data and key in place.
    let good = config_file(
        dir.path(),
        "postgres://ecdysis:secret@127.0.0.1:1/none",
        &format!("{MODELS}{endpoint}"),
    );
    let out = Command::new(support::host_bin())
        .args(["serve", "--check-config", "--config"])
        .arg(&good)
        .current_dir(dir.path())
        .env("ECDYSIS_TEST_UNSET_KEY", "k")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["database"], "postgres://ecdysis:***@127.0.0.1:1/none");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("secret"));
    assert!(
        stderr.contains("ok: domain tau2/retail: ") && stderr.contains(" tasks, an episode opens"),
        "{stderr}"
    );
    assert!(stderr.contains("ok: model remote"), "{stderr}");
}

// ---------------------------------------------------------------------------
// Workers under Slurm
// ---------------------------------------------------------------------------

/// A single-node Slurm cluster from Debian's `slurm-wlm` and `munge`,
/// started in a temp dir on free ports (as root, as CI runs), stopped when
/// dropped.
struct Slurm {
    dir: tempfile::TempDir,
    pids: Vec<u32>,
}

impl Slurm {
    /// `None` (with the reason) when Slurm is not installed; under CI,
    /// which installs it, that is an error.
    fn start() -> Option<Slurm> {
        let missing: Vec<&str> = [
            "munged",
            "slurmctld",
            "slurmd",
            "sbatch",
            "scancel",
            "sinfo",
        ]
        .into_iter()
        .filter(|b| {
            !["/usr/sbin", "/usr/bin"]
                .iter()
                .any(|d| Path::new(d).join(b).is_file())
        })
        .collect();
        if !missing.is_empty() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set but Slurm is not installed ({missing:?}); .ci/run installs slurm-wlm and munge"
            );
            eprintln!("SKIPPED: Slurm is not installed (apt-get install slurm-wlm munge)");
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("ecdysis-slurm")
            .tempdir_in("/tmp")
            .unwrap();
        let d = dir.path().to_path_buf();
        let d = d.as_path();
        for sub in ["state", "spool", "munge", "log"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        let port = || {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let host = String::from_utf8(Command::new("hostname").arg("-s").output().unwrap().stdout)
            .unwrap()
            .trim()
            .to_string();
        let key: Vec<u8> = (0..64u8)
            .map(|i| i.wrapping_mul(37).wrapping_add(11))
            .collect();
        let key_path = d.join("munge/munge.key");
        std::fs::write(&key_path, key).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d.join("munge"), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let p = |s: &str| d.join(s).display().to_string();
        let conf = format!(
            "ClusterName=ecdysis-test\nSlurmctldHost={host}\nSlurmUser=root\nSlurmdUser=root\n\
             SlurmctldPort={}\nSlurmdPort={}\nAuthType=auth/munge\nAuthInfo=socket={}\n\
             StateSaveLocation={}\nSlurmdSpoolDir={}\nSlurmctldPidFile={}\nSlurmdPidFile={}\n\
             SlurmctldLogFile={}\nSlurmdLogFile={}\nProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\nSelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\nReturnToService=2\nMpiDefault=none\nKillWait=1\n\
             NodeName={host} CPUs={} State=UNKNOWN\n\
             PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4\n",
            port(),
            port(),
            p("munge/munge.socket"),
            p("state"),
            p("spool"),
            p("slurmctld.pid"),
            p("slurmd.pid"),
            p("log/slurmctld.log"),
            p("log/slurmd.log"),
            std::thread::available_parallelism().map_or(2, |n| n.get()),
        );
        std::fs::write(d.join("slurm.conf"), conf).unwrap();
        let mut s = Slurm {
            dir,
            pids: Vec::new(),
        };
        let ok = Command::new("/usr/sbin/munged")
            .arg("--force")
            .arg(format!("--socket={}", p("munge/munge.socket")))
            .arg(format!("--key-file={}", key_path.display()))
            .arg(format!("--pid-file={}", p("munge/munged.pid")))
            .arg(format!("--log-file={}", p("log/munged.log")))
            .arg(format!("--seed-file={}", p("munge/seed")))
            .status()
            .unwrap()
            .success();
        assert!(ok, "munged did not start");
        s.remember("munge/munged.pid");
        for daemon in ["slurmctld", "slurmd"] {
            let ok = Command::new(format!("/usr/sbin/{daemon}"))
                .arg("-f")
                .arg(d.join("slurm.conf"))
                .status()
                .unwrap()
                .success();
            assert!(ok, "{daemon} did not start: {}", s.logs());
            s.remember(&format!("{daemon}.pid"));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let o = s.cmd("sinfo").args(["-h", "-o", "%t"]).output().unwrap();
            if String::from_utf8_lossy(&o.stdout).trim() == "idle" {
                return Some(s);
            }
            assert!(
                Instant::now() < deadline,
                "the Slurm node never became idle: {}",
                s.logs()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn remember(&mut self, pid_file: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(pid) = std::fs::read_to_string(self.dir.path().join(pid_file))
                .ok()
                .and_then(|t| t.trim().parse().ok())
            {
                self.pids.push(pid);
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn logs(&self) -> String {
        ["log/slurmctld.log", "log/slurmd.log", "log/munged.log"]
            .iter()
            .map(|f| std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A Slurm client command for this cluster.
    fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", self.dir.path().join("slurm.conf"));
        c
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        // Every job ends (its workers with it) before the daemons go.
        let _ = self.cmd("scancel").args(["--user", "root"]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let o = self.cmd("squeue").args(["-h", "-o", "%i"]).output();
            if o.is_ok_and(|o| o.status.success() && o.stdout.is_empty()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        for pid in self.pids.iter().rev() {
            // SAFETY: kill on the daemons this test started.
            unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
        }
    }
}

/// Workers started by Slurm (`scripts/slurm/ecdysis-worker.sbatch` as an
/// array job) claim an evaluation's episodes from the service's Postgres;
/// one array task is cancelled mid-evaluation, and every episode is still
/// scored exactly once. Each episode's row names the Slurm job and array
/// task of the worker that ran it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slurm_array_workers_score_each_episode_once_when_a_job_is_cancelled() {
    let Some(slurm) = Slurm::start() else {
        return;
    };
    let pg = Postgres::start();
    let url = pg.database("ecdysis_slurm");
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(
        dir.path(),
        &url,
        &format!("{MODELS}\n[worker]\nslots = 0\nlease_seconds = 2\n"),
    );
    let a = add_tenant(&config, "alice");
    let server = Server::start(&config, &[]);
    let script = support::repo_root().join("scripts/slurm/ecdysis-worker.sbatch");
    let o = slurm
        .cmd("sbatch")
        .args(["--parsable", "--array=0-1"])
        .arg(format!("--chdir={}", dir.path().display()))
        .arg(format!("--output={}/slurm-%A_%a.log", dir.path().display()))
        .arg(&script)
        .arg("--config")
        .arg(&config)
        .args(["--slots", "1"])
        .env("ECDYSIS_HOST", support::host_bin())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "sbatch: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let job = String::from_utf8_lossy(&o.stdout).trim().to_string();

    let api = Api::new(&server.url);
    let tasks: Vec<String> = (0..8).map(|i| i.to_string()).collect();
    let id = api
        .evaluate(&a, json!({"tasks": tasks, "agent": "slow"}))
        .await;
    api.wait_until(&a, &id, |s| {
        s["progress"]["done"].as_i64().unwrap() >= 2
            && s["progress"]["running"].as_i64().unwrap() >= 2
    })
    .await;
    let ok = slurm
        .cmd("scancel")
        .arg(format!("{job}_1"))
        .status()
        .unwrap()
        .success();
    assert!(ok, "scancel");
    let s = api.wait(&a, &id).await;
    assert_eq!(s["progress"]["done"], 8, "{s}");
    let records = api.trajectories(&a, &id).await;
    assert_eq!(records.len(), 8);
    assert_eq!(episode_keys(&records).len(), 8, "each episode once");

    let db = ecdysis_serve::Db::open(&url).await.unwrap();
    let workers: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT worker FROM episodes WHERE state = 'done' AND worker IS NOT NULL ORDER BY worker",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    assert!(
        workers
            .iter()
            .all(|w| w.starts_with(&format!("slurm-{job}_"))),
        "{workers:?}"
    );
    assert!(
        workers
            .iter()
            .any(|w| w.starts_with(&format!("slurm-{job}_0-"))),
        "{workers:?}"
    );
    assert_audit_verifies(&config);
}

/// `worker --heartbeat-file`: the liveness signal the Kubernetes
/// Deployment of the docs probes. Written at start and every 10 s.
#[test]
fn a_worker_writes_its_heartbeat_file_while_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path(), &sqlite(dir.path()), "");
    let hb = dir.path().join("heartbeat");
    let mut worker = Proc(Some(
        Command::new(support::host_bin())
            .args(["--quiet", "worker", "--id", "hb", "--heartbeat-file"])
            .arg(&hb)
            .arg("--config")
            .arg(&config)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    ));
    let deadline = Instant::now() + Duration::from_secs(30);
    let written = loop {
        if let Some(ms) = std::fs::read_to_string(&hb)
            .ok()
            .and_then(|t| t.trim().parse::<u128>().ok())
        {
            break ms;
        }
        assert!(Instant::now() < deadline, "no heartbeat file");
        std::thread::sleep(Duration::from_millis(100));
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    assert!(now.abs_diff(written) < 60_000, "{written} vs {now}");
    worker.kill9();
}

// ---------------------------------------------------------------------------
// An unfriendly tenant and a stranger (issue #52): each attack beside a
// normal tenant, whose requests must keep working within a stated bound
// ---------------------------------------------------------------------------

/// The server's process id.
fn server_pid(server: &Server) -> u32 {
    server.proc.0.as_ref().expect("server running").id()
}

/// What the server's resident memory may grow by during one attack.
const ATTACK_RSS_GROWTH_KIB: u64 = 256 << 10;

/// A normal tenant's request, answered within `bound` (the positive
/// control beside each attack).
async fn answered_within(api: &Api, who: &Tenant, path: &str, bound: Duration) -> Answer {
    let started = Instant::now();
    let a = api.get(path, who).await;
    let took = started.elapsed();
    assert!(took < bound, "{path} took {took:?} (bound {bound:?})");
    a
}

on_both_backends!(parallel_uploads_against_the_stored_bytes_quota =>
    parallel_uploads_by_one_tenant_never_exceed_its_stored_bytes_quota_on_sqlite,
    parallel_uploads_by_one_tenant_never_exceed_its_stored_bytes_quota_on_postgres);

/// Eight distinct components uploaded at once by a tenant with room for
/// three: exactly three are stored (the quota is read in the transaction
/// that commits the bytes, not only before the slow check), the rest are
/// refused as `stored_bytes`; another tenant uploads right after.
async fn parallel_uploads_against_the_stored_bytes_quota(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(backend, dir.path());
    let config = config_file(dir.path(), &db.url, MODELS);
    let racer = add_tenant(&config, "racer");
    let normal = add_tenant(&config, "normal");
    let uploads: Vec<Vec<u8>> = (0..8).map(|n| variant(&direct(), 100 + n)).collect();
    let size = uploads[0].len() as u64;
    assert!(uploads.iter().all(|u| u.len() as u64 == size));
    let quota = 3 * size + size / 2;
    cli(
        &config,
        &[
            "tenant",
            "set-quota",
            "racer",
            &format!("stored_bytes={quota}"),
        ],
    );
    let server = Server::start(&config, &[]);
    let api = std::sync::Arc::new(Api::new(&server.url));
    let rss_before = rss_kib(server_pid(&server));
    let started = Instant::now();
    let mut racing = Vec::new();
    for bytes in uploads {
        let (api, racer) = (api.clone(), racer.clone());
        racing.push(tokio::spawn(async move {
            let a = api.upload(&racer, &bytes).await;
            (bytes, a)
        }));
    }
    let mut kept = Vec::new();
    for r in racing {
        let (bytes, a) = r.await.unwrap();
        match a.status {
            201 => kept.push(bytes),
            413 => assert_eq!(a.json()["error"]["quota"], "stored_bytes", "{}", a.body),
            _ => panic!("unexpected answer {}: {}", a.status, a.body),
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "{:?}",
        started.elapsed()
    );
    let usage = api.get("/v1/usage", &racer).await.json();
    let used = usage["stored_bytes"].as_u64().unwrap();
    assert!(
        used <= quota,
        "stored {used} bytes against a quota of {quota}"
    );
    assert_eq!((kept.len(), used), (3, 3 * size), "{usage}");
    let grown = rss_kib(server_pid(&server)).saturating_sub(rss_before);
    assert!(
        grown < ATTACK_RSS_GROWTH_KIB,
        "the server grew by {grown} KiB"
    );

    // Control: another tenant's upload and the racer's re-upload of what it
    // holds go through at once.
    let started = Instant::now();
    let up = api.upload(&normal, &direct()).await;
    assert_eq!(up.status, 201, "{}", up.body);
    assert!(started.elapsed() < Duration::from_secs(30));
    let again = api.upload(&racer, &kept[0]).await;
    assert_eq!(again.status, 201, "{}", again.body);
    let usage = answered_within(&api, &normal, "/v1/usage", Duration::from_secs(5)).await;
    assert_eq!(
        usage.json()["stored_bytes"].as_u64().unwrap(),
        direct().len() as u64
    );
    assert_audit_verifies(&config);
}

/// A harness whose `realize` loops until its fuel runs out is charged all
/// of `fuel_per_hook` for each failed call, so `fuel_per_day` stops its
/// evaluation after a few episodes (it used to be charged nothing and ran
/// them all); a normal tenant's evaluation beside it is identical to its
/// solo run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn out_of_fuel_hooks_are_charged_so_fuel_per_day_stops_a_looping_harness() {
    const FUEL: u64 = 2_000_000;
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path(), &sqlite(dir.path()), MODELS);
    let looper = add_tenant(&config, "looper");
    let normal = add_tenant(&config, "normal");
    cli(
        &config,
        &[
            "tenant",
            "set-quota",
            "looper",
            "concurrent_episodes=1",
            &format!("fuel_per_day={}", 3 * FUEL),
        ],
    );
    let server = Server::start(&config, &[]);
    let api = Api::new(&server.url);
    let looping = api.upload(&looper, &hostile("infinite-loop")).await.json()["hash"].clone();
    let good = api.upload(&normal, &direct()).await.json()["hash"].clone();
    let request = json!({"harness": good, "tasks": ["0", "1", "2"], "agent": "sim", "seed": 5});
    let solo = api.evaluate(&normal, request.clone()).await;
    assert_eq!(api.wait(&normal, &solo).await["state"], "done");
    let solo_records = api.trajectories(&normal, &solo).await;

    let rss_before = rss_kib(server_pid(&server));
    let tasks: Vec<String> = (0..10).map(|i| i.to_string()).collect();
    let attack = api
        .evaluate(
            &looper,
            json!({"harness": looping, "tasks": tasks, "agent": "sim",
                   "limits": {"fuel_per_hook": FUEL, "deadline_ms": 10_000}}),
        )
        .await;
    let started = Instant::now();
    let beside = api.evaluate(&normal, request).await;
    assert_eq!(api.wait(&normal, &beside).await["state"], "done");
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "the normal tenant's evaluation took {:?}",
        started.elapsed()
    );
    assert_eq!(
        comparable(&solo_records),
        comparable(&api.trajectories(&normal, &beside).await),
        "the normal tenant's results changed beside the looping harness"
    );

    // The looping evaluation stops, held back by its daily fuel, with
    // episodes still queued.
    let held = api
        .wait_until(&looper, &attack, |s| {
            s["state"] != "running"
                || (s["progress"]["running"] == 0
                    && s["waiting_for"]
                        .as_str()
                        .is_some_and(|w| w.starts_with("quota fuel_per_day")))
        })
        .await;
    assert_eq!(held["state"], "running", "every episode ran: {held}");
    let done = held["progress"]["done"].as_u64().unwrap();
    assert!((1..10).contains(&done), "{held}");
    let fuel = api.get("/v1/usage", &looper).await.json()["today"]["fuel"]
        .as_u64()
        .unwrap();
    assert!(
        (3 * FUEL..5 * FUEL).contains(&fuel),
        "fuel charged today: {fuel}"
    );
    // Each failed call is recorded with the allowance it burnt.
    for r in api.trajectories(&looper, &attack).await {
        let failed: Vec<&Value> = r["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h["error"]["kind"] == "out_of_fuel")
            .collect();
        assert_eq!(failed.len(), 1, "{r}");
        assert_eq!(failed[0]["fuel"].as_u64(), Some(FUEL), "{r}");
    }
    let grown = rss_kib(server_pid(&server)).saturating_sub(rss_before);
    assert!(
        grown < ATTACK_RSS_GROWTH_KIB,
        "the server grew by {grown} KiB"
    );
    assert_eq!(
        api.delete(&format!("/v1/evaluations/{attack}"), &looper)
            .await
            .status,
        200
    );
    answered_within(&api, &normal, "/v1/usage", Duration::from_secs(5)).await;
}

/// A stranger's flood of unauthenticated requests with ~60 KB paths: each
/// audit record keeps a bounded path and says it was cut, the log grows by
/// a bounded amount, and the flood does not crowd out the records of a
/// made-up token and of a revoked tenant's token used right after it. A
/// normal tenant is answered meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_anonymous_long_path_flood_neither_grows_the_audit_log_nor_hides_real_failures() {
    const FLOOD: usize = 60;
    const PATH_BYTES: usize = 60_000;
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path(), &sqlite(dir.path()), MODELS);
    let normal = add_tenant(&config, "normal");
    let gone = add_tenant(&config, "gone");
    cli(&config, &["tenant", "revoke", "gone"]);
    let server = Server::start(&config, &[]);
    let api = std::sync::Arc::new(Api::new(&server.url));
    let before = audit_kinds(&config).len();
    let rss_before = rss_kib(server_pid(&server));
    let started = Instant::now();
    let mut flood = Vec::new();
    for worker in 0..4 {
        let api = api.clone();
        flood.push(tokio::spawn(async move {
            for i in (worker..FLOOD).step_by(4) {
                let path = format!("/v1/harnesses/{}{i}", "a".repeat(PATH_BYTES));
                let a = api.send(reqwest::Method::GET, &path, None, None, "").await;
                assert_eq!(a.status, 401, "{}", a.body);
            }
        }));
    }
    let during = answered_within(&api, &normal, "/v1/usage", Duration::from_secs(5)).await;
    assert_eq!(during.status, 200, "{}", during.body);
    for f in flood {
        f.await.unwrap();
    }
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    let forged = Tenant {
        name: "stranger".into(),
        token: "ecd_made_up".into(),
    };
    let unknown = api.get("/v1/usage", &forged).await;
    assert_eq!(unknown.status, 401);
    let revoked = api.get("/v1/usage", &gone).await;
    assert_eq!(
        (revoked.status, &revoked.body),
        (unknown.status, &unknown.body),
        "the answer tells a revoked token from an unknown one"
    );

    let audit = audit_kinds(&config);
    let failures: Vec<&Value> = audit[before..]
        .iter()
        .filter(|r| r["kind"] == "auth_failure")
        .collect();
    let detail =
        |r: &Value| -> Value { serde_json::from_str(r["detail"].as_str().unwrap()).unwrap() };
    let flood_records: Vec<Value> = failures
        .iter()
        .map(|r| detail(r))
        .filter(|d| d["reason"] == "no bearer token")
        .collect();
    assert!(!flood_records.is_empty());
    assert!(flood_records.len() <= FLOOD);
    let stored: usize = failures
        .iter()
        .map(|r| r["detail"].as_str().unwrap().len())
        .sum();
    assert!(
        stored <= failures.len() * 2048,
        "{} auth-failure records hold {stored} bytes of detail",
        failures.len()
    );
    for d in &flood_records {
        let path_bytes = d["truncated"]["/path"].as_u64();
        assert!(
            path_bytes.is_some_and(|n| n as usize > PATH_BYTES),
            "a cut path is not said to be cut: {d}"
        );
    }
    assert!(
        failures
            .iter()
            .any(|r| detail(r)["reason"] == "unknown or revoked token"),
        "the made-up token's refusal was crowded out"
    );
    assert!(
        failures
            .iter()
            .any(|r| r["tenant"] == "gone" && detail(r)["reason"] == "revoked token"),
        "the revoked token's refusal was crowded out: {failures:?}"
    );
    let grown = rss_kib(server_pid(&server)).saturating_sub(rss_before);
    assert!(
        grown < ATTACK_RSS_GROWTH_KIB,
        "the server grew by {grown} KiB"
    );
    assert_audit_verifies(&config);
}

/// What `state/uploads` holds.
fn staged_uploads(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir.join("state/uploads"))
        .map(|entries| entries.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

/// Uploads whose handler is dropped mid-check (the request timed out while
/// the upload waited for the one checker) leave no staged file; uploads
/// staged when the server is killed outright are swept when it starts
/// again. Nothing half-stored either way, and a normal tenant uploads
/// right after.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dropped_and_killed_uploads_leave_no_staged_file() {
    let dir = tempfile::tempdir().unwrap();
    let quick = format!(
        "{MODELS}\n[worker]\nslots = 1\nlease_seconds = 2\ncheck_slots = 1\n[http]\nrequest_timeout_seconds = 1\n"
    );
    let config = config_file(dir.path(), &sqlite(dir.path()), &quick);
    let uploader = add_tenant(&config, "uploader");
    let normal = add_tenant(&config, "normal");
    let mut server = Server::start(&config, &[]);
    let api = std::sync::Arc::new(Api::new(&server.url));
    let rss_before = rss_kib(server_pid(&server));
    let started = Instant::now();
    let mut pending = Vec::new();
    for n in 0..8 {
        let (api, uploader) = (api.clone(), uploader.clone());
        pending.push(tokio::spawn(async move {
            api.upload(&uploader, &variant(&direct(), 200 + n)).await
        }));
    }
    let mut stored = 0;
    let mut dropped = 0;
    for p in pending {
        let a = p.await.unwrap();
        match (a.status, error_code(&a).as_str()) {
            (201, _) => stored += 1,
            (503, "timeout") => dropped += 1,
            _ => panic!("unexpected answer {}: {}", a.status, a.body),
        }
    }
    assert!(
        dropped > 0,
        "no upload timed out while waiting for the checker ({stored} stored): the test did not drop a handler"
    );
    // Every handler has ended: nothing of theirs may be left staged.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !staged_uploads(dir.path()).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        staged_uploads(dir.path()),
        Vec::<PathBuf>::new(),
        "dropped uploads left staged files"
    );
    let listed = api.get("/v1/harnesses", &uploader).await.json()["harnesses"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(listed, stored, "an upload was half-stored");
    assert!(started.elapsed() < Duration::from_secs(60));
    let grown = rss_kib(server_pid(&server)).saturating_sub(rss_before);
    assert!(
        grown < ATTACK_RSS_GROWTH_KIB,
        "the server grew by {grown} KiB"
    );

    // kill -9 while uploads wait for the checker: their files stay behind
    // until the next start sweeps them.
    let mut uploading = Vec::new();
    for n in 0..4u64 {
        let (url, token) = (server.url.clone(), uploader.token.clone());
        uploading.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            for k in 0..5 {
                let _ = http
                    .post(format!("{url}/v1/harnesses"))
                    .bearer_auth(&token)
                    .body(variant(&direct(), 300 + 10 * n + k))
                    .send()
                    .await;
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while staged_uploads(dir.path()).is_empty() {
        assert!(Instant::now() < deadline, "no upload was ever staged");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    server.kill9();
    for u in uploading {
        u.abort();
    }
    let left = staged_uploads(dir.path());
    assert!(!left.is_empty(), "the kill left nothing staged to sweep");
    // The control below must not race the one-second timeout.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace(
            "request_timeout_seconds = 1
",
            "request_timeout_seconds = 30
",
        ),
    )
    .unwrap();
    server.restart();
    assert_eq!(
        staged_uploads(dir.path()),
        Vec::<PathBuf>::new(),
        "the restart did not sweep {left:?}"
    );

    // Control: both tenants upload at once after the restart.
    let api = Api::new(&server.url);
    let started = Instant::now();
    assert_eq!(api.upload(&normal, &direct()).await.status, 201);
    let again = api.upload(&uploader, &variant(&direct(), 999)).await;
    assert_eq!(again.status, 201, "{}", again.body);
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(staged_uploads(dir.path()).is_empty());
}

/// The smaller holes: an empty task list is refused naming the field (it
/// used to run the whole domain), tenant names a client would normalise
/// (`.`, `..`) or read as hidden are refused, and a grant answers alike
/// whether or not the grantee's name exists. Each beside its control.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn empty_task_lists_path_like_names_and_grant_probes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path(), &sqlite(dir.path()), MODELS);
    for bad in [".", "..", ".hidden", "_x"] {
        let out = cli_output(&config, &["tenant", "add", bad]);
        assert!(!out.status.success(), "tenant `{bad}` was added");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("starting with a letter or digit"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let owner = add_tenant(&config, "owner.1");
    let bob = add_tenant(&config, "bob");
    let listed = cli(&config, &["tenant", "list"]);
    assert!(
        !listed.contains("\"..\"") && !listed.contains("\".\""),
        "{listed}"
    );
    let server = Server::start(&config, &[]);
    let api = Api::new(&server.url);

    let empty = api
        .post(
            "/v1/evaluations",
            &owner,
            &json!({"tasks": [], "agent": "sim"}),
        )
        .await;
    assert_eq!(empty.status, 400, "{}", empty.body);
    assert!(
        empty.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tasks"),
        "{}",
        empty.body
    );
    let none = api.get("/v1/evaluations", &owner).await.json();
    assert_eq!(none["evaluations"], json!([]), "{none}");
    let one = api
        .evaluate(&owner, json!({"tasks": ["0"], "agent": "sim"}))
        .await;
    let done = api.wait(&owner, &one).await;
    assert_eq!(done["progress"]["total"], 1, "{done}");

    // A grant to a tenant and to a name no tenant has: the same answer.
    let hash = api.upload(&owner, &direct()).await.json()["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("/v1/harnesses/{hash}/grants");
    let to_bob = api.post(&path, &owner, &json!({"tenant": "bob"})).await;
    let to_nobody = api
        .post(&path, &owner, &json!({"tenant": "no-such-tenant"}))
        .await;
    assert_eq!(
        (to_bob.status, to_bob.body.replace("bob", "X")),
        (
            to_nobody.status,
            to_nobody.body.replace("no-such-tenant", "X")
        ),
        "a grant tells whether a tenant exists"
    );
    let gone = api.delete(&format!("{path}/no-such-tenant"), &owner).await;
    let never = api
        .delete(&format!("/v1/harnesses/{hash}/grants/owner.1"), &owner)
        .await;
    assert_eq!((gone.status, gone.body), (never.status, never.body));
    // Control: the real grant took effect, the other granted nothing.
    assert_eq!(
        api.get(&format!("/v1/harnesses/{hash}"), &bob).await.json()["access"],
        "granted"
    );
    assert_audit_verifies(&config);
}

/// Revoking a tenant (`tenant revoke`, another process) cancels what it
/// left queued and ends its open event stream at once, instead of running
/// its evaluation to the end; another tenant's evaluation runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn revoking_a_tenant_ends_its_streams_and_cancels_its_queued_episodes() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path(), &sqlite(dir.path()), MODELS);
    let leaving = add_tenant(&config, "leaving");
    let staying = add_tenant(&config, "staying");
    cli(
        &config,
        &["tenant", "set-quota", "leaving", "concurrent_episodes=1"],
    );
    let server = Server::start(&config, &[]);
    let api = Api::new(&server.url);
    let tasks: Vec<String> = (0..12).map(|i| i.to_string()).collect();
    let id = api
        .evaluate(&leaving, json!({"tasks": tasks, "agent": "slow"}))
        .await;
    let stream = api
        .http
        .get(format!("{}/v1/evaluations/{id}/events", server.url))
        .bearer_auth(&leaving.token)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let reading = tokio::spawn(async move {
        let body = stream.text().await.unwrap_or_default();
        (Instant::now(), body)
    });
    api.wait_until(&leaving, &id, |s| s["progress"]["running"] == 1)
        .await;

    cli(&config, &["tenant", "revoke", "leaving"]);
    let revoked = Instant::now();
    let (ended, body) = tokio::time::timeout(Duration::from_secs(10), reading)
        .await
        .expect("the revoked tenant's event stream stayed open")
        .unwrap();
    assert!(ended.duration_since(revoked) < Duration::from_secs(5));
    assert!(body.contains("event: end"), "{body}");
    let db = ecdysis_serve::Db::open(&sqlite(dir.path())).await.unwrap();
    let queued: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM episodes WHERE eval_id = $1 AND state = 'queued'")
            .bind(&id)
            .fetch_one(db.pool())
            .await
            .unwrap();
    assert_eq!(queued, 0, "the revoked tenant's episodes are still queued");
    // Its running episode is stopped, not followed by others.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ran: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM episodes WHERE eval_id = $1 AND state IN ('done', 'running')",
    )
    .bind(&id)
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert!(ran <= 2, "{ran} episodes ran after the revocation");

    // Control: the other tenant's evaluation runs to the end.
    let started = Instant::now();
    let other = api
        .evaluate(&staying, json!({"tasks": ["0", "1"], "agent": "sim"}))
        .await;
    assert_eq!(api.wait(&staying, &other).await["state"], "done");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_audit_verifies(&config);
}

/// Descriptors the process holds.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Lower a running process's soft and hard descriptor limit.
fn limit_fds(pid: u32, limit: u64) {
    let rlimit = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: prlimit on our own child, with a valid struct and no old
    // value asked for.
    let rc = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &rlimit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

/// A TCP connection to `url`'s server from the loopback address `from`
/// (the whole of 127/8 is this machine: each address is another peer).
async fn connect_from(from: &str, url: &str) -> tokio::net::TcpStream {
    let server: std::net::SocketAddr = url.strip_prefix("http://").unwrap().parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(server).await.unwrap()
}

/// Read `stream` until the server closes it or `bound` passes: whether it
/// was closed, and what it sent.
async fn closed_within(stream: &mut tokio::net::TcpStream, bound: Duration) -> (bool, Vec<u8>) {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let read = tokio::time::timeout(bound, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    (read.is_ok(), got)
}

/// Idle and trickling sockets from two strangers (no token) against a
/// server left 96 descriptors (RLIMIT_NOFILE): the connections beyond the
/// per-peer cap are refused at once, the admitted ones are closed when their head has
/// not arrived within `header_read_timeout_seconds` (trickling or not),
/// and a normal tenant from another address is answered within 2 s
/// throughout and evaluates normally after; descriptors and memory come
/// back. The refused connections answer the JSON 503 when they answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_and_trickling_sockets_neither_exhaust_descriptors_nor_block_a_normal_tenant() {
    const IDLE: usize = 150;
    const TRICKLING: usize = 50;
    // Two attacking addresses at the per-peer cap leave room under the
    // total cap for everyone else.
    const PER_IP: usize = 24;
    let dir = tempfile::tempdir().unwrap();
    let extra = format!(
        "{MODELS}[http]\nheader_read_timeout_seconds = 2\nmax_connections = 64\nmax_connections_per_ip = {PER_IP}\n"
    );
    let config = config_file(dir.path(), &sqlite(dir.path()), &extra);
    let normal = add_tenant(&config, "normal");
    let server = Server::start(&config, &[]);
    let pid = server_pid(&server);
    let api = Api::new(&server.url);
    // Warm: the database pool and the first request's allocations.
    assert_eq!(api.get("/v1/usage", &normal).await.status, 200);
    let fds_before = open_fds(pid);
    limit_fds(pid, (fds_before + 96) as u64);
    let rss_before = rss_kib(pid);
    let started = Instant::now();

    let mut idle = Vec::new();
    for _ in 0..IDLE {
        idle.push(connect_from("127.0.0.2", &server.url).await);
    }
    let mut trickling = Vec::new();
    for _ in 0..TRICKLING {
        let mut s = connect_from("127.0.0.3", &server.url).await;
        let trickle = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let head = b"GET /v1/health HTTP/1.1\r\nhost: x\r\nx-slow: ";
            if s.write_all(head).await.is_err() {
                return (true, Vec::new());
            }
            for _ in 0..40 {
                tokio::time::sleep(Duration::from_millis(250)).await;
                if s.write_all(b"a").await.is_err() {
                    break;
                }
            }
            closed_within(&mut s, Duration::from_secs(1)).await
        });
        trickling.push(trickle);
    }

    // Beside them, a normal tenant on a fresh connection of its own.
    let fresh = Api::new(&server.url);
    let during = answered_within(&fresh, &normal, "/v1/usage", Duration::from_secs(2)).await;
    assert_eq!(during.status, 200, "{}", during.body);

    // Over the per-peer cap: refused at once.
    let mut refused = 0;
    let mut answers = Vec::new();
    let checks: Vec<_> = idle
        .into_iter()
        .map(|mut s| {
            tokio::spawn(async move {
                let early = closed_within(&mut s, Duration::from_secs(1)).await;
                let late = if early.0 {
                    early.clone()
                } else {
                    closed_within(&mut s, Duration::from_secs(5)).await
                };
                (early, late)
            })
        })
        .collect();
    let mut closed_late = 0;
    for c in checks {
        let ((early, body), (late, _)) = c.await.unwrap();
        if early {
            refused += 1;
            if !body.is_empty() {
                answers.push(String::from_utf8_lossy(&body).to_string());
            }
        } else if late {
            closed_late += 1;
        }
    }
    assert!(
        refused >= IDLE - PER_IP,
        "only {refused} of {IDLE} idle connections from one peer were refused at once"
    );
    for a in &answers {
        assert!(a.starts_with("HTTP/1.1 503 "), "{a}");
        let body = a.split_once("\r\n\r\n").unwrap().1;
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "too_many_connections", "{v}");
    }
    assert_eq!(
        refused + closed_late,
        IDLE,
        "idle connections were held past the header-read timeout"
    );
    for t in trickling {
        let (closed, _) = t.await.unwrap();
        assert!(closed, "a trickling connection was held open");
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );

    // After: descriptors and memory back, a normal evaluation runs.
    let fds_after = open_fds(pid);
    assert!(
        fds_after <= fds_before + 8,
        "{fds_after} descriptors open, {fds_before} before"
    );
    let grown = rss_kib(pid).saturating_sub(rss_before);
    assert!(
        grown < ATTACK_RSS_GROWTH_KIB,
        "the server grew by {grown} KiB"
    );
    let after = answered_within(&fresh, &normal, "/v1/usage", Duration::from_secs(2)).await;
    assert_eq!(after.status, 200, "{}", after.body);
    let id = fresh
        .evaluate(&normal, json!({"tasks": ["0", "1"], "agent": "sim"}))
        .await;
    let status = fresh.wait(&normal, &id).await;
    assert_eq!(status["state"], "done", "{status}");
    assert_eq!(fresh.trajectories(&normal, &id).await.len(), 2);
}

/// Send `request` on a connection of its own and read the answer until
/// the server closes the connection: status and JSON body.
async fn raw_answer(url: &str, request: &[u8]) -> (u16, Value) {
    use tokio::io::AsyncWriteExt;
    let mut s = connect_from("127.0.0.1", url).await;
    let _ = s.write_all(request).await;
    let (closed, got) = closed_within(&mut s, Duration::from_secs(10)).await;
    assert!(closed, "the connection stayed open");
    let text = String::from_utf8_lossy(&got).to_string();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no answer: {text:?}"));
    let status = head[9..12].parse().unwrap();
    let body = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, body)
}

/// A request target longer than a URI may be and a head larger than
/// `max_head_bytes` are refused with the JSON error body of every other
/// refusal (hyper alone answers them with an empty body), read whole by
/// the client; a request right after is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn over_long_request_lines_and_heads_are_refused_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path(), &sqlite(dir.path()), MODELS);
    let normal = add_tenant(&config, "normal");
    let server = Server::start(&config, &[]);
    let api = Api::new(&server.url);
    let long_line = format!(
        "GET /v1/harnesses/{} HTTP/1.1\r\nhost: x\r\n\r\n",
        "a".repeat(70_000)
    );
    let (status, body) = raw_answer(&server.url, long_line.as_bytes()).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (414, &json!("uri_too_long")),
        "{body}"
    );
    let big_head = format!(
        "GET /v1/usage HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
        "b".repeat(100_000)
    );
    let (status, body) = raw_answer(&server.url, big_head.as_bytes()).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (431, &json!("headers_too_large")),
        "{body}"
    );
    let after = answered_within(&api, &normal, "/v1/usage", Duration::from_secs(2)).await;
    assert_eq!(after.status, 200, "{}", after.body);
}

/// Open an event stream; its response (status and, while held, the open
/// connection).
async fn open_stream(api: &Api, who: &Tenant, id: &str) -> reqwest::Response {
    api.http
        .get(format!("{}/v1/evaluations/{id}/events", api.url))
        .bearer_auth(&who.token)
        .send()
        .await
        .unwrap()
}

/// A tenant opening 40 event streams on a running evaluation gets
/// `event_streams_per_tenant` (4) of them and a JSON 429 naming that limit
/// for the rest; beside it a normal tenant's requests are answered within
/// 1 s and its own stream delivers every episode and the end; the server
/// spends at most a core-second per 10 s holding the streams, and its
/// memory stays bounded; a stream closed frees its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_event_stream_flood_is_capped_per_tenant_and_leaves_others_served() {
    const FLOOD: usize = 40;
    const CAP: usize = 4;
    let dir = tempfile::tempdir().unwrap();
    let extra = format!("{MODELS}[http]\nevent_streams_per_tenant = {CAP}\n");
    let config = config_file(dir.path(), &sqlite(dir.path()), &extra);
    let flooder = add_tenant(&config, "flooder");
    let normal = add_tenant(&config, "normal");
    cli(
        &config,
        &[
            "tenant",
            "set-quota",
            "flooder",
            "concurrent_episodes=1",
            "requests_per_second=100",
        ],
    );
    let server = Server::start(&config, &[]);
    let pid = server_pid(&server);
    let api = std::sync::Arc::new(Api::new(&server.url));
    let tasks: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    let long = api
        .evaluate(&flooder, json!({"tasks": tasks, "agent": "slow"}))
        .await;
    let rss_before = rss_kib(pid);
    let cpu_before = cpu_seconds(pid);
    let started = Instant::now();

    let opens: Vec<_> = (0..FLOOD)
        .map(|_| {
            let (api, flooder, long) = (api.clone(), flooder.clone(), long.clone());
            tokio::spawn(async move { open_stream(&api, &flooder, &long).await })
        })
        .collect();
    let mut held = Vec::new();
    let mut refusals = Vec::new();
    for o in opens {
        let r = o.await.unwrap();
        match r.status().as_u16() {
            200 => held.push(r),
            status => refusals.push((status, r.text().await.unwrap())),
        }
    }
    assert_eq!(held.len(), CAP, "{} streams opened", held.len());
    for (status, body) in &refusals {
        assert_eq!(*status, 429, "{body}");
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["quota"], "event_streams_per_tenant", "{v}");
        assert_eq!(v["error"]["limit"], CAP as f64, "{v}");
    }

    // Beside them: the normal tenant's requests and its own stream.
    let during = answered_within(&api, &normal, "/v1/usage", Duration::from_secs(1)).await;
    assert_eq!(during.status, 200, "{}", during.body);
    let id = api
        .evaluate(&normal, json!({"tasks": ["0", "1", "2"], "agent": "sim"}))
        .await;
    let own = open_stream(&api, &normal, &id).await;
    assert_eq!(own.status(), 200);
    let body = tokio::time::timeout(Duration::from_secs(60), own.text())
        .await
        .expect("the normal tenant's stream never ended")
        .unwrap();
    assert_eq!(body.matches("event: episode").count(), 3, "{body}");
    assert!(body.contains("event: end"), "{body}");
    assert_eq!(api.wait(&normal, &id).await["state"], "done");

    // Hold the streams a while: the cost of holding them is bounded.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cpu = cpu_seconds(pid) - cpu_before;
    let held_for = started.elapsed().as_secs_f64();
    assert!(
        cpu < held_for / 10.0 + 1.0,
        "{cpu:.2} CPU-s in {held_for:.1} s with {CAP} streams held"
    );
    let grown = rss_kib(pid).saturating_sub(rss_before);
    assert!(
        grown < ATTACK_RSS_GROWTH_KIB,
        "the server grew by {grown} KiB"
    );

    // A closed stream frees its place.
    drop(held.pop());
    let reopened = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let r = open_stream(&api, &flooder, &long).await;
            if r.status() == 200 {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("a closed stream's place was never freed");
    drop(reopened);
    drop(held);
    assert!(started.elapsed() < Duration::from_secs(90));
    assert_audit_verifies(&config);
}

/// A report request: status, the `x-report-cache` header (`miss` when this
/// request rendered it), and the body.
async fn fetch_report(api: &Api, who: &Tenant, id: &str) -> (u16, String, Vec<u8>) {
    let r = api
        .http
        .get(format!("{}/v1/evaluations/{id}/report", api.url))
        .bearer_auth(&who.token)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let cache = r
        .headers()
        .get("x-report-cache")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, cache, r.bytes().await.unwrap().to_vec())
}

/// `n` report requests of `id` at once: their answers.
async fn report_burst(
    api: &std::sync::Arc<Api>,
    who: &Tenant,
    id: &str,
    n: usize,
) -> Vec<(u16, String, Vec<u8>)> {
    let requests: Vec<_> = (0..n)
        .map(|_| {
            let (api, who, id) = (api.clone(), who.clone(), id.to_string());
            tokio::spawn(async move { fetch_report(&api, &who, &id).await })
        })
        .collect();
    let mut answers = Vec::new();
    for r in requests {
        answers.push(r.await.unwrap());
    }
    answers
}

/// Twenty parallel report requests of a 640-episode evaluation by one
/// tenant are served by a single render (one `miss`, the rest waiting for
/// it), every answer the same HTML; the next request and another burst are
/// answered from the cache; a normal tenant's requests are answered within
/// 2 s meanwhile and its own report and evaluation are unaffected; the
/// server's memory stays bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_reports_of_a_large_evaluation_share_one_render_and_leave_others_served() {
    const PARALLEL: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let extra = format!("{MODELS}[worker]\nslots = 4\nlease_seconds = 2\n");
    let config = config_file(dir.path(), &sqlite(dir.path()), &extra);
    let reader = add_tenant(&config, "reader");
    let normal = add_tenant(&config, "normal");
    cli(
        &config,
        &["tenant", "set-quota", "reader", "requests_per_second=100"],
    );
    let server = Server::start(&config, &[]);
    let pid = server_pid(&server);
    let api = std::sync::Arc::new(Api::new(&server.url));
    let tasks: Vec<String> = (0..40).map(|i| i.to_string()).collect();
    let large = api
        .evaluate(
            &reader,
            json!({"tasks": tasks, "trials": 16, "agent": "sim", "seed": 1}),
        )
        .await;
    let small = json!({"tasks": ["0", "1", "2"], "agent": "sim", "seed": 2});
    let solo = api.evaluate(&normal, small.clone()).await;
    assert_eq!(api.wait(&normal, &solo).await["state"], "done");
    let solo_records = api.trajectories(&normal, &solo).await;
    let large_status = api.wait(&reader, &large).await;
    assert_eq!(large_status["state"], "done", "{large_status}");
    assert_eq!(large_status["progress"]["done"], 640, "{large_status}");

    let rss_before = rss_kib(pid);
    let started = Instant::now();
    let (answers, during) = tokio::join!(
        report_burst(&api, &reader, &large, PARALLEL),
        answered_within(&api, &normal, "/v1/usage", Duration::from_secs(2)),
    );
    assert_eq!(during.status, 200, "{}", during.body);
    let misses = answers.iter().filter(|(_, c, _)| c == "miss").count();
    assert_eq!(
        misses, 1,
        "{PARALLEL} parallel requests rendered {misses} times"
    );
    let html = &answers[0].2;
    assert!(html.len() > 100_000, "a {}-byte report", html.len());
    for (status, cache, body) in &answers {
        assert_eq!(*status, 200);
        assert!(cache == "miss" || cache == "hit", "{cache:?}");
        assert!(body == html, "the answers differ");
    }

    // Cached: the next request and another burst render nothing.
    let (status, cache, body) = fetch_report(&api, &reader, &large).await;
    assert_eq!((status, cache.as_str()), (200, "hit"));
    assert!(&body == html);
    for (status, cache, _) in report_burst(&api, &reader, &large, PARALLEL).await {
        assert_eq!((status, cache.as_str()), (200, "hit"));
    }
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );

    // The normal tenant beside it: its report and a new evaluation.
    let took = Instant::now();
    let (status, cache, own) = fetch_report(&api, &normal, &solo).await;
    assert_eq!((status, cache.as_str()), (200, "miss"));
    assert!(own != *html);
    assert!(
        took.elapsed() < Duration::from_secs(5),
        "{:?}",
        took.elapsed()
    );
    let beside = api.evaluate(&normal, small).await;
    assert_eq!(api.wait(&normal, &beside).await["state"], "done");
    assert_eq!(
        comparable(&solo_records),
        comparable(&api.trajectories(&normal, &beside).await)
    );
    let grown = rss_kib(pid).saturating_sub(rss_before);
    assert!(
        grown < ATTACK_RSS_GROWTH_KIB,
        "the server grew by {grown} KiB"
    );
    assert_audit_verifies(&config);
}

// ---------------------------------------------------------------------------
// The soak: the attacks above in rounds, beside normal tenants
// ---------------------------------------------------------------------------

/// `count` task ids from 0.
fn task_ids(count: usize) -> Vec<String> {
    (0..count).map(|i| i.to_string()).collect()
}

/// A normal tenant of the soak: its client, its request and its solo run.
struct Regular {
    api: Api,
    who: Tenant,
    request: Value,
    solo: Vec<Value>,
}

impl Regular {
    async fn new(api: Api, who: Tenant, request: Value) -> Regular {
        let id = api.evaluate(&who, request.clone()).await;
        assert_eq!(api.wait(&who, &id).await["state"], "done");
        let solo = api.trajectories(&who, &id).await;
        assert!(!solo.is_empty());
        Regular {
            api,
            who,
            request,
            solo,
        }
    }

    /// A request answered within 2 s, then an evaluation identical to the
    /// solo run.
    async fn evaluate_once(&self) {
        let a = answered_within(&self.api, &self.who, "/v1/usage", Duration::from_secs(2)).await;
        assert_eq!(a.status, 200, "{}", a.body);
        let id = self.api.evaluate(&self.who, self.request.clone()).await;
        let status = self.api.wait(&self.who, &id).await;
        assert_eq!(status["state"], "done", "{status}");
        assert_eq!(
            comparable(&self.solo),
            comparable(&self.api.trajectories(&self.who, &id).await),
            "{}'s results changed under the soak",
            self.who.name
        );
    }
}

/// `n` new variants of `component` uploaded at once, numbered from
/// `first`: each stored or refused as `stored_bytes`. The tenant's stored
/// bytes after.
async fn upload_race(
    api: &std::sync::Arc<Api>,
    who: &Tenant,
    component: &[u8],
    first: u64,
    n: u64,
) -> u64 {
    let racing: Vec<_> = (first..first + n)
        .map(|k| {
            let (api, who, bytes) = (api.clone(), who.clone(), variant(component, k));
            tokio::spawn(async move { api.upload(&who, &bytes).await })
        })
        .collect();
    for r in racing {
        let a = r.await.unwrap();
        match a.status {
            201 => {}
            413 => assert_eq!(a.json()["error"]["quota"], "stored_bytes", "{}", a.body),
            _ => panic!("unexpected answer {}: {}", a.status, a.body),
        }
    }
    api.get("/v1/usage", who).await.json()["stored_bytes"]
        .as_u64()
        .unwrap()
}

/// `n` connections from `from` that send nothing, each closed by the
/// server (refused over the per-peer cap, or at the header-read timeout)
/// within `bound`.
async fn idle_sockets_are_closed(url: &str, from: &str, n: usize, bound: Duration) {
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(connect_from(from, url).await);
    }
    let waits: Vec<_> = held
        .into_iter()
        .map(|mut s| tokio::spawn(async move { closed_within(&mut s, bound).await.0 }))
        .collect();
    for w in waits {
        assert!(
            w.await.unwrap(),
            "an idle connection was held past {bound:?}"
        );
    }
}

/// `n` event streams opened at once on `id` and held for `hold`: how many
/// were admitted (the rest refused 429 naming `event_streams_per_tenant`).
async fn stream_flood(
    api: &std::sync::Arc<Api>,
    who: &Tenant,
    id: &str,
    n: usize,
    hold: Duration,
) -> usize {
    let opens: Vec<_> = (0..n)
        .map(|_| {
            let (api, who, id) = (api.clone(), who.clone(), id.to_string());
            tokio::spawn(async move { open_stream(&api, &who, &id).await })
        })
        .collect();
    let mut held = Vec::new();
    for o in opens {
        let r = o.await.unwrap();
        match r.status().as_u16() {
            200 => held.push(r),
            status => {
                let body = r.text().await.unwrap();
                assert_eq!(status, 429, "{body}");
                let v: Value = serde_json::from_str(&body).unwrap();
                assert_eq!(v["error"]["quota"], "event_streams_per_tenant", "{v}");
            }
        }
    }
    tokio::time::sleep(hold).await;
    held.len()
}

/// `n` unauthenticated requests at once, each with a ~60 KB path: each
/// refused 401.
async fn anonymous_flood(api: &std::sync::Arc<Api>, n: usize) {
    let requests: Vec<_> = (0..n)
        .map(|i| {
            let api = api.clone();
            tokio::spawn(async move {
                let path = format!("/v1/harnesses/{}{i}", "a".repeat(60_000));
                api.send(reqwest::Method::GET, &path, None, None, "").await
            })
        })
        .collect();
    for r in requests {
        let a = r.await.unwrap();
        assert_eq!(a.status, 401, "{}", a.body);
    }
}

/// What the server's resident memory may exceed its baseline by after the
/// soak (the baseline taken once every attacker's standing work is set up
/// and a report is cached).
const SOAK_RSS_SLACK_KIB: u64 = 128 << 10;
/// What the server's open descriptors may exceed their baseline by after
/// the soak (database connections the pool opened under load).
const SOAK_FD_SLACK: usize = 16;

/// Every attack above in rounds for `duration` (at least one round), beside
/// two normal tenants, on one server: each round at once, a racer uploads
/// four new components against a stored-bytes quota with room for 3.5; a
/// stranger holds 40 idle sockets from one address; a flooder opens 12
/// event streams (cap 4) on its running evaluation; a stranger sends 12
/// requests with ~60 KB paths; a reader requests the report of a
/// 160-episode evaluation 10 times at once; and each normal tenant is
/// answered within 2 s and runs an evaluation — while a harness burning
/// its fuel to the end of every hook is held back by `fuel_per_day`. At
/// the end: every normal evaluation was identical to its solo run, no
/// quota was exceeded (stored bytes; streams; fuel by at most two hooks'
/// allowance), the report was rendered at most once, memory and
/// descriptors are back within `SOAK_RSS_SLACK_KIB` and `SOAK_FD_SLACK` of
/// the baseline, and `audit verify` passes.
async fn soak(duration: Duration) {
    const FUEL: u64 = 2_000_000;
    const STREAM_CAP: usize = 4;
    const PER_IP: usize = 24;
    const ROUNDS_AT_MOST: u64 = 100_000;
    let dir = tempfile::tempdir().unwrap();
    let extra = format!(
        "{MODELS}[worker]\nslots = 4\nlease_seconds = 2\n[http]\nheader_read_timeout_seconds = 2\nmax_connections = 256\nmax_connections_per_ip = {PER_IP}\nevent_streams_per_tenant = {STREAM_CAP}\n"
    );
    let config = config_file(dir.path(), &sqlite(dir.path()), &extra);
    let [a, b, racer, looper, flooder, reader] = [
        "normal-a", "normal-b", "racer", "looper", "flooder", "reader",
    ]
    .map(|name| add_tenant(&config, name));
    let component = direct();
    let size = variant(&component, 0).len() as u64;
    let stored_quota = 3 * size + size / 2;
    set_soak_quotas(&config, stored_quota, FUEL);
    let server = Server::start(&config, &[]);
    let pid = server_pid(&server);
    let url = server.url.clone();
    // Each attacker from an address of its own: the per-peer connection
    // cap is not what keeps the normal tenants (127.0.0.1) served.
    let from = |address: &str| std::sync::Arc::new(Api::from_address(&url, address));
    let (racer_api, looper_api, flooder_api, reader_api, stranger_api) = (
        from("127.0.0.2"),
        from("127.0.0.3"),
        from("127.0.0.4"),
        from("127.0.0.5"),
        from("127.0.0.6"),
    );
    const IDLE_FROM: &str = "127.0.0.7";

    let hash = Api::new(&url).upload(&a, &component).await.json()["hash"].clone();
    let regulars = [
        Regular::new(
            Api::new(&url),
            a,
            json!({"harness": hash, "tasks": ["0", "1", "2"], "agent": "sim", "seed": 5}),
        )
        .await,
        Regular::new(
            Api::new(&url),
            b,
            json!({"tasks": ["3", "4"], "trials": 2, "agent": "sim", "seed": 6}),
        )
        .await,
    ];
    let looping = looper_api
        .upload(&looper, &hostile("infinite-loop"))
        .await
        .json()["hash"]
        .clone();
    let burning = looper_api
        .evaluate(
            &looper,
            json!({"harness": looping, "tasks": task_ids(10), "agent": "sim",
                   "limits": {"fuel_per_hook": FUEL, "deadline_ms": 10_000}}),
        )
        .await;
    let large = reader_api
        .evaluate(
            &reader,
            json!({"tasks": task_ids(20), "trials": 8, "agent": "sim", "seed": 1}),
        )
        .await;
    assert_eq!(reader_api.wait(&reader, &large).await["state"], "done");
    let html = fetch_report(&reader_api, &reader, &large).await.2;
    let streamed_request = json!({"tasks": task_ids(60), "agent": "slow"});
    let mut streamed = flooder_api
        .evaluate(&flooder, streamed_request.clone())
        .await;
    let (rss_base, fds_base) = (rss_kib(pid), open_fds(pid));

    let started = Instant::now();
    let (mut rounds, mut max_stored, mut misses) = (0u64, 0u64, 0usize);
    while rounds < ROUNDS_AT_MOST && (rounds == 0 || started.elapsed() < duration) {
        let (stored, (), admitted, (), reports, ((), ())) = tokio::join!(
            upload_race(&racer_api, &racer, &component, 1000 + 4 * rounds, 4),
            idle_sockets_are_closed(&url, IDLE_FROM, 40, Duration::from_secs(6)),
            stream_flood(
                &flooder_api,
                &flooder,
                &streamed,
                12,
                Duration::from_secs(1)
            ),
            anonymous_flood(&stranger_api, 12),
            report_burst(&reader_api, &reader, &large, 10),
            async { tokio::join!(regulars[0].evaluate_once(), regulars[1].evaluate_once()) },
        );
        max_stored = max_stored.max(stored);
        assert!(
            stored <= stored_quota,
            "round {rounds}: {stored} bytes stored"
        );
        for (status, cache, body) in &reports {
            assert_eq!(*status, 200);
            assert!(*body == html, "round {rounds}: the report changed");
            misses += usize::from(cache == "miss");
        }
        let state = flooder_api
            .get(&format!("/v1/evaluations/{streamed}"), &flooder)
            .await
            .json()["state"]
            .clone();
        if state == "running" {
            assert!(
                admitted <= STREAM_CAP,
                "round {rounds}: {admitted} streams held"
            );
        } else {
            streamed = flooder_api
                .evaluate(&flooder, streamed_request.clone())
                .await;
        }
        rounds += 1;
    }
    let soaked = started.elapsed();
    assert_eq!(misses, 0, "the cached report was rendered again");
    assert_eq!(
        max_stored,
        3 * size,
        "the racer's uploads never filled its room"
    );
    let burnt = looper_api.get("/v1/usage", &looper).await.json()["today"]["fuel"]
        .as_u64()
        .unwrap();
    assert!(burnt < 3 * FUEL + 2 * FUEL, "fuel charged today: {burnt}");
    let held = looper_api
        .get(&format!("/v1/evaluations/{burning}"), &looper)
        .await
        .json();
    assert!(
        held["progress"]["done"].as_u64().unwrap() < 10,
        "every fuel-burning episode ran: {held}"
    );
    for (api, who, id) in [
        (&looper_api, &looper, &burning),
        (&flooder_api, &flooder, &streamed),
    ] {
        assert_eq!(
            api.delete(&format!("/v1/evaluations/{id}"), who)
                .await
                .status,
            200
        );
    }

    // Back near the baseline once the last connections are gone.
    let mut fds = open_fds(pid);
    for _ in 0..40 {
        if fds <= fds_base + SOAK_FD_SLACK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        fds = open_fds(pid);
    }
    let rss = rss_kib(pid);
    eprintln!(
        "soak: {rounds} rounds in {soaked:.1?}; descriptors {fds_base} -> {fds}; RSS {rss_base} -> {rss} KiB; racer stored {max_stored}/{stored_quota} B; looper fuel {burnt}/{}",
        3 * FUEL
    );
    assert!(
        fds <= fds_base + SOAK_FD_SLACK,
        "{fds} descriptors open, {fds_base} before the soak"
    );
    assert!(
        rss.saturating_sub(rss_base) < SOAK_RSS_SLACK_KIB,
        "the server grew from {rss_base} to {rss} KiB"
    );
    let after = answered_within(
        &Api::new(&url),
        &regulars[0].who,
        "/v1/usage",
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(after.status, 200, "{}", after.body);
    assert_audit_verifies(&config);
}

/// The soak's quota overrides: the racer's stored bytes, the looper's fuel
/// (three episodes' `fuel`), one episode at a time for the looper and the
/// flooder, request rates for the flooder and the reader, and more than a
/// day's default episodes for the normal tenants.
fn set_soak_quotas(config: &Path, stored_quota: u64, fuel: u64) {
    for quota in [
        vec!["racer".to_string(), format!("stored_bytes={stored_quota}")],
        vec![
            "looper".into(),
            "concurrent_episodes=1".into(),
            format!("fuel_per_day={}", 3 * fuel),
        ],
        vec![
            "flooder".into(),
            "concurrent_episodes=1".into(),
            "requests_per_second=100".into(),
        ],
        vec!["reader".into(), "requests_per_second=100".into()],
        // The long soak's normal tenants run more than a day's default.
        vec!["normal-a".into(), "episodes_per_day=1000000".into()],
        vec!["normal-b".into(), "episodes_per_day=1000000".into()],
    ] {
        let mut args = vec!["tenant", "set-quota"];
        args.extend(quota.iter().map(String::as_str));
        cli(config, &args);
    }
}

/// The soak as CI runs it: 45 s of rounds (about a minute in all).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_short_soak_of_every_attack_beside_normal_tenants() {
    soak(Duration::from_secs(45)).await;
}

/// The long soak: `ECDYSIS_SOAK_SECONDS` (default 600) of rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the long soak: ECDYSIS_SOAK_SECONDS=600 cargo test -p ecdysis-host --test it serve::a_long_soak -- --ignored --nocapture"]
async fn a_long_soak_of_every_attack_beside_normal_tenants() {
    soak(Duration::from_secs(env_or("ECDYSIS_SOAK_SECONDS", 600))).await;
}

// ---------------------------------------------------------------------------
// Names and planted symlinks against the service's directories
// ---------------------------------------------------------------------------

/// Every file under `dir`, by path relative to it, with its bytes.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push((
                    p.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

/// No name from a request or the command line reaches outside the state
/// directory, whatever `..`, absolute path or symlink it carries: tenant
/// names that are paths are refused; harness hashes, evaluation ids and
/// grantee names with encoded `..` and absolute paths answer 404, and
/// evaluation requests naming paths as harness, domain or split are
/// refused; a server whose `uploads` directory is a symlink to another
/// directory refuses to start and sweeps nothing there; with `uploads` or
/// an evaluation's result folder replaced by such a symlink while it runs,
/// uploads and reports fail instead of writing through it. The directory
/// outside is unchanged throughout; once the links are gone the service
/// works as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn names_and_planted_symlinks_never_reach_outside_the_state_directory() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    // Named as a dead server's staged upload and as a stray: what a sweep
    // through a symlink would delete.
    std::fs::write(outside.join("4294967295-dead.wasm"), b"keep").unwrap();
    std::fs::write(outside.join("stray.wasm"), b"keep").unwrap();
    let before = tree(&outside);
    let config = config_file(dir.path(), &sqlite(dir.path()), MODELS);
    for name in ["../x", "/etc", "a/../../b", "..", "x/y"] {
        let out = cli_output(&config, &["tenant", "add", name]);
        assert!(!out.status.success(), "tenant {name:?} was added");
    }
    let normal = add_tenant(&config, "normal");

    let uploads = dir.path().join("state/uploads");
    std::fs::create_dir_all(dir.path().join("state")).unwrap();
    std::os::unix::fs::symlink(&outside, &uploads).unwrap();
    let mut child = Command::new(support::host_bin())
        .args(["--quiet", "serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut exited = None;
    for _ in 0..200 {
        exited = child.try_wait().unwrap();
        if exited.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if exited.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        exited.is_some_and(|s| !s.success()),
        "the server started on a symlinked uploads directory: {err}"
    );
    assert!(err.contains("uploads"), "{err}");
    assert_eq!(
        tree(&outside),
        before,
        "the start swept through the symlink"
    );
    std::fs::remove_file(&uploads).unwrap();

    let server = Server::start(&config, &[]);
    let api = Api::new(&server.url);
    for path in [
        "/v1/harnesses/..%2F..%2Fserve.toml",
        "/v1/harnesses/%2Fetc%2Fpasswd",
        "/v1/evaluations/..%2F..%2Fserve.toml",
        "/v1/evaluations/..%2Foutside/report",
        "/v1/evaluations/%2Fetc/trajectories",
    ] {
        let a = api.get(path, &normal).await;
        assert_eq!(a.status, 404, "{path}: {}", a.body);
    }
    let hash = api.upload(&normal, &direct()).await.json()["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let probe = api
        .delete(
            &format!("/v1/harnesses/{hash}/grants/..%2F..%2Foutside"),
            &normal,
        )
        .await;
    assert_eq!(probe.status, 404, "{}", probe.body);
    for bad in [
        json!({"harness": "../../serve.toml", "tasks": ["0"], "agent": "sim"}),
        json!({"harness": "/etc/passwd", "tasks": ["0"], "agent": "sim"}),
        json!({"domain": "../../outside", "tasks": ["0"], "agent": "sim"}),
        json!({"split": "../../../outside/stray", "agent": "sim"}),
        json!({"tasks": ["../../outside/stray"], "agent": "sim"}),
    ] {
        let a = api.post("/v1/evaluations", &normal, &bad).await;
        assert!(
            matches!(a.status, 400 | 404 | 422),
            "{bad} answered {}: {}",
            a.status,
            a.body
        );
    }

    let id = api
        .evaluate(
            &normal,
            json!({"harness": hash, "tasks": ["0", "1"], "agent": "sim"}),
        )
        .await;
    assert_eq!(api.wait(&normal, &id).await["state"], "done");
    let folder = dir.path().join("state/evaluations").join(&id);
    assert!(folder.join("summary.json").exists());
    std::fs::remove_dir_all(&folder).unwrap();
    std::os::unix::fs::symlink(&outside, &folder).unwrap();
    let report = api
        .get(&format!("/v1/evaluations/{id}/report"), &normal)
        .await;
    assert_eq!(report.status, 500, "{}", report.body);
    std::fs::remove_dir(&uploads).unwrap();
    std::os::unix::fs::symlink(&outside, &uploads).unwrap();
    let up = api.upload(&normal, &variant(&direct(), 1)).await;
    assert_eq!(up.status, 500, "{}", up.body);
    assert_eq!(
        tree(&outside),
        before,
        "a write went through a planted symlink"
    );

    std::fs::remove_file(&folder).unwrap();
    std::fs::remove_file(&uploads).unwrap();
    let report = api
        .get(&format!("/v1/evaluations/{id}/report"), &normal)
        .await;
    assert_eq!(report.status, 200, "{}", report.body);
    let up = api.upload(&normal, &variant(&direct(), 1)).await;
    assert_eq!(up.status, 201, "{}", up.body);
    assert_eq!(tree(&outside), before);
    assert_audit_verifies(&config);
}

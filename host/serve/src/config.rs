//! `serve.toml`: the operator's configuration of the evaluation service.
//! Every field has a default, so `serve` runs with no file at all.
//!
//! ```toml
//! listen = "127.0.0.1:8787"
//! database = "sqlite:.ecdysis/serve/serve.db"   # or postgres://user@host/db
//! domains = ["tau2/retail", "tau2/airline"]
//!
//! [models.mixed]                 # tenants say "agent": "mixed"
//! model = "sim:mixed"            # a simulated testbed agent, offline
//! [models.gpt]
//! model = "gpt-4o-mini"
//! base_url = "https://api.openai.com/v1"
//! api_key_env = "OPENAI_API_KEY" # the key stays in the environment
//! prompt_per_mtok = 0.15
//! completion_per_mtok = 0.6
//!
//! [quotas]                       # per tenant; `tenant set-quota` overrides
//! concurrent_episodes = 8
//! episodes_per_day = 10000
//!
//! [limits.max]                   # what a tenant may ask for
//! fuel_per_hook = 100000000
//!
//! [worker]
//! slots = 4                      # episodes at once in this process's workers
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use ecdysis_env::SqlMode;
use ecdysis_sys::ids::ModelId;

use super::quota::{QuotaError, Quotas};

/// A configuration that cannot work, naming the offending field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    /// The file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    /// The file is not valid TOML for this configuration.
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        reason: String,
    },
    #[error("serve.toml: {0}")]
    /// A value that cannot work, with the field's name.
    Invalid(String),
    #[error("serve.toml: {0}")]
    /// A `[quotas]` value that cannot work. Not a `#[source]`: the text is
    /// already in the message.
    Quota(QuotaError),
}

/// The whole file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    /// Address to listen on (plain HTTP: put TLS in a reverse proxy).
    pub listen: String,
    /// `sqlite:PATH` (default, under `state_dir`) or `postgres://…`.
    pub database: Option<String>,
    /// Where the service keeps its files: the SQLite database, result
    /// directories of finished evaluations, upload staging.
    pub state_dir: PathBuf,
    /// The component store (default `<state_dir>/store`).
    pub store: Option<PathBuf>,
    /// The τ² data (as `--data`).
    pub data: Option<PathBuf>,
    /// agentbench/dbbench's server (as `--mysql-url`).
    pub mysql_url: Option<String>,
    /// agentbench/dbbench's sessions' `sql_mode` (as `--sql-mode`;
    /// `None`: the command line's, whose default is `mysql8`), in the
    /// domains the service opens and in its workers alike.
    pub sql_mode: Option<SqlMode>,
    /// Domains tenants may evaluate on.
    pub domains: Vec<String>,
    /// Model aliases: the only models a tenant can name.
    pub models: BTreeMap<String, ModelAlias>,
    /// Default and maximum evaluation limits.
    pub limits: LimitsConfig,
    /// Default quotas of every tenant.
    pub quotas: Quotas,
    /// Worker processes of this machine.
    pub worker: WorkerConfig,
    /// Request hardening.
    pub http: HttpConfig,
}

impl Default for ServeConfig {
    fn default() -> Self {
        let mut models = BTreeMap::new();
        for profile in ["mixed", "oracle", "clumsy", "careless", "texter"] {
            models.insert(
                format!("sim-{profile}"),
                ModelAlias {
                    model: ModelId::new(format!("sim:{profile}")),
                    ..ModelAlias::default()
                },
            );
        }
        ServeConfig {
            listen: "127.0.0.1:8787".into(),
            database: None,
            state_dir: PathBuf::from(".ecdysis/serve"),
            store: None,
            data: None,
            mysql_url: None,
            sql_mode: None,
            domains: vec!["tau2/retail".into(), "tau2/airline".into()],
            models,
            limits: LimitsConfig::default(),
            quotas: Quotas::default(),
            worker: WorkerConfig::default(),
            http: HttpConfig::default(),
        }
    }
}

/// A model a tenant refers to by name. Its endpoint and key are the
/// operator's: a tenant can never make the service call a URL it chose.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelAlias {
    /// `sim:<profile>` or the endpoint's model name.
    pub model: ModelId,
    /// The OpenAI-compatible endpoint (required unless `sim:`).
    pub base_url: Option<String>,
    /// The environment variable holding the key (read by the workers; the
    /// key is never stored or shown).
    pub api_key_env: Option<String>,
    /// USD per million prompt / completion / cached prompt tokens, for the
    /// ledger and the `usd_per_day` quota.
    pub prompt_per_mtok: Option<f64>,
    /// USD per million completion tokens.
    pub completion_per_mtok: Option<f64>,
    /// USD per million cached prompt tokens.
    pub cached_prompt_per_mtok: Option<f64>,
    /// A `sim:` agent's added latency per call, in milliseconds (models an
    /// endpoint offline).
    pub sim_latency_ms: u64,
    /// Requests at once to this endpoint, per worker process.
    pub max_concurrency: Option<usize>,
    /// Seconds per request attempt.
    pub timeout_seconds: Option<f64>,
    /// Largest agent request sent to this endpoint, in estimated prompt
    /// tokens (its context window, typically); a harness whose episode would
    /// send more ends it as `request_too_large` instead.
    pub max_request_tokens: Option<u64>,
}

impl ModelAlias {
    /// Whether this is a simulated testbed agent.
    pub fn is_simulated(&self) -> bool {
        self.model.is_simulated()
    }
}

/// Limits a tenant may set per evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitValues {
    /// Fuel per hook call.
    pub fuel_per_hook: u64,
    /// Wall-clock deadline per hook call, in milliseconds.
    pub deadline_ms: u64,
    /// Guest linear memory, MiB.
    pub memory_mib: u64,
    /// Agent steps per episode.
    pub max_steps: u32,
    /// Tool errors per episode.
    pub max_errors: u32,
    /// Trials per task.
    pub trials: u32,
}

impl Default for LimitValues {
    fn default() -> Self {
        let l = ecdysis_sandbox::sandbox::Limits::default();
        LimitValues {
            fuel_per_hook: l.fuel_per_hook,
            deadline_ms: l.deadline.as_millis() as u64,
            memory_mib: (l.memory_bytes >> 20) as u64,
            max_steps: ecdysis_env::DEFAULT_MAX_STEPS,
            max_errors: ecdysis_env::DEFAULT_MAX_ERRORS,
            trials: 1,
        }
    }
}

/// `[limits.default]` and `[limits.max]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// What an evaluation gets when it does not ask.
    pub default: LimitValues,
    /// The most an evaluation may ask for.
    pub max: LimitValues,
    /// Which WASI an uploaded harness may import beyond `wasi:io` and
    /// `wasi:cli` (`[limits] wasi = "minimal"` refuses Python and JS
    /// harnesses at upload; the default `virtual` grants only frozen
    /// clocks, seeded randomness, an empty filesystem and refused sockets).
    pub wasi: ecdysis_sandbox::sandbox::WasiProfile,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let default = LimitValues::default();
        LimitsConfig {
            default,
            wasi: Default::default(),
            max: LimitValues {
                fuel_per_hook: default.fuel_per_hook * 10,
                deadline_ms: 10_000,
                memory_mib: 256,
                max_steps: 200,
                max_errors: 50,
                trials: 16,
            },
        }
    }
}

/// `[worker]`: the worker processes of this machine (`serve`'s embedded
/// worker and `ecdysis-host worker`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerConfig {
    /// Episodes at once (one worker process each); 0: this server runs no
    /// episodes (remote workers do).
    pub slots: usize,
    /// Memory per worker process, MiB (RLIMIT_DATA).
    pub memory_mib: u64,
    /// CPU seconds per episode (RLIMIT_CPU).
    pub cpu_seconds: u64,
    /// Wall-clock seconds per episode.
    pub wall_seconds: u64,
    /// Seconds a claimed episode stays claimed without a heartbeat before
    /// another worker may take it (a worker died or lost its database).
    pub lease_seconds: u64,
    /// Attempts of an episode whose worker could not serve it at all
    /// (infrastructure), before it is given up.
    pub max_attempts: u32,
    /// Upload checks: compile and check in these workers.
    pub check_slots: usize,
    /// Memory per checking worker, MiB.
    pub check_memory_mib: u64,
    /// CPU seconds per upload check.
    pub check_cpu_seconds: u64,
    /// Wall-clock seconds per upload check.
    pub check_wall_seconds: u64,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            slots: 4,
            memory_mib: 4096,
            cpu_seconds: 300,
            wall_seconds: 3600,
            lease_seconds: 30,
            max_attempts: 3,
            check_slots: 2,
            check_memory_mib: 2048,
            check_cpu_seconds: 60,
            check_wall_seconds: 120,
        }
    }
}

/// `[http]`: request hardening.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// A request (other than the event stream and trajectory downloads)
    /// must be answered within this many seconds.
    pub request_timeout_seconds: u64,
    /// Largest JSON body.
    pub max_json_bytes: usize,
    /// Largest upload the server reads at all (a tenant's `upload_bytes`
    /// quota may be lower).
    pub max_upload_bytes: usize,
    /// Episodes one evaluation may have.
    pub max_episodes_per_evaluation: u64,
    /// A connection must deliver a request's whole head (request line and
    /// headers) within this many seconds of the server starting to wait
    /// for it, including the wait between requests on a kept-alive
    /// connection; otherwise it is closed.
    pub header_read_timeout_seconds: u64,
    /// Largest request head a connection may buffer; a longer one is
    /// refused (431, or 414 for a request target over 65,534 bytes).
    pub max_head_bytes: usize,
    /// Open connections in all; more are refused (503) and closed.
    pub max_connections: usize,
    /// Open connections from one peer address (an IPv6 peer: its /64);
    /// more are refused (503) and closed. Behind a reverse proxy every
    /// connection comes from the proxy's address.
    pub max_connections_per_ip: usize,
    /// Event streams (`/v1/evaluations/{id}/events`) one tenant may have
    /// open at once; more are refused (429).
    pub event_streams_per_tenant: usize,
    /// Bytes of rendered report HTML kept in memory (`/report` renders an
    /// evaluation once per version; the least recently used are dropped
    /// first). 0 keeps none, though concurrent requests for one version
    /// still share one render.
    pub report_cache_bytes: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            request_timeout_seconds: 30,
            max_json_bytes: 64 << 10,
            max_upload_bytes: 32 << 20,
            max_episodes_per_evaluation: 100_000,
            header_read_timeout_seconds: 30,
            max_head_bytes: 80 << 10,
            max_connections: 512,
            max_connections_per_ip: 64,
            event_streams_per_tenant: 8,
            report_cache_bytes: 64 << 20,
        }
    }
}

/// The smallest `[http] max_head_bytes`: hyper's smallest read buffer.
pub const MIN_HEAD_BYTES: usize = 8 << 10;

impl ServeConfig {
    /// Read `path` (TOML), or the defaults when `None`.
    pub fn load(path: Option<&Path>) -> Result<ServeConfig, ConfigError> {
        let config = match path {
            None => ServeConfig::default(),
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                    path: p.to_path_buf(),
                    source,
                })?;
                toml::from_str(&text).map_err(|e| ConfigError::Parse {
                    path: p.to_path_buf(),
                    reason: e.to_string(),
                })?
            }
        };
        config.validate()?;
        Ok(config)
    }

    /// Refuse settings that cannot work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, alias) in &self.models {
            if !valid_name(name) {
                return Err(ConfigError::Invalid(format!(
                    "model alias `{name}`: use letters, digits, `-`, `_` and `.`"
                )));
            }
            if name == ecdysis_runner::eval::spec::SCRIPTED_USER {
                return Err(ConfigError::Invalid(format!(
                    "model alias `{name}` is reserved for the scripted user"
                )));
            }
            if alias.is_simulated() {
                ecdysis_model::SimProfile::parse(alias.model.as_str())
                    .map_err(|e| ConfigError::Invalid(format!("model alias `{name}`: {e}")))?;
            } else if alias.base_url.is_none() {
                return Err(ConfigError::Invalid(format!(
                    "model alias `{name}` ({}) needs a base_url",
                    alias.model
                )));
            }
            for (field, price) in [
                ("prompt_per_mtok", alias.prompt_per_mtok),
                ("completion_per_mtok", alias.completion_per_mtok),
                ("cached_prompt_per_mtok", alias.cached_prompt_per_mtok),
            ] {
                if price.is_some_and(|p| !(p.is_finite() && p >= 0.0)) {
                    return Err(ConfigError::Invalid(format!(
                        "model alias `{name}`: {field} must be a finite number ≥ 0"
                    )));
                }
            }
        }
        for d in &self.domains {
            if !ecdysis_domains::DOMAINS.contains(&d.as_str()) {
                return Err(ConfigError::Invalid(format!(
                    "domain `{d}` is unknown (known: {})",
                    ecdysis_domains::DOMAINS.join(", ")
                )));
            }
        }
        if self.worker.lease_seconds < 2 {
            return Err(ConfigError::Invalid(
                "worker.lease_seconds must be at least 2".into(),
            ));
        }
        if self.worker.max_attempts == 0 {
            return Err(ConfigError::Invalid(
                "worker.max_attempts must be at least 1".into(),
            ));
        }
        let h = &self.http;
        for (field, value, least) in [
            (
                "header_read_timeout_seconds",
                h.header_read_timeout_seconds as usize,
                1,
            ),
            ("max_head_bytes", h.max_head_bytes, MIN_HEAD_BYTES),
            ("max_connections", h.max_connections, 1),
            ("max_connections_per_ip", h.max_connections_per_ip, 1),
            ("event_streams_per_tenant", h.event_streams_per_tenant, 1),
        ] {
            if value < least {
                return Err(ConfigError::Invalid(format!(
                    "http.{field} must be at least {least}"
                )));
            }
        }
        self.quotas.validate().map_err(ConfigError::Quota)?;
        Ok(())
    }

    /// The database URL: the configured one, else SQLite in `state_dir`.
    pub fn database_url(&self) -> String {
        self.database
            .clone()
            .unwrap_or_else(|| format!("sqlite:{}", self.state_dir.join("serve.db").display()))
    }

    /// The component store directory.
    pub fn store_dir(&self) -> PathBuf {
        self.store
            .clone()
            .unwrap_or_else(|| self.state_dir.join("store"))
    }

    /// The price table of the aliases (the `--prices` format), keyed by
    /// each alias's model name.
    pub fn price_table(&self) -> serde_json::Value {
        let mut models = serde_json::Map::new();
        for alias in self.models.values() {
            if let (Some(p), Some(c)) = (alias.prompt_per_mtok, alias.completion_per_mtok) {
                let mut price = serde_json::json!({"prompt_per_mtok": p, "completion_per_mtok": c});
                if let Some(cached) = alias.cached_prompt_per_mtok {
                    price["cached_prompt_per_mtok"] = cached.into();
                }
                models.insert(alias.model.to_string(), price);
            }
        }
        serde_json::json!({ "models": models })
    }
}

/// Names of aliases and tenants: short, printable, no separators.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_work_and_a_file_overrides_them() {
        ServeConfig::default().validate().unwrap();
        let c: ServeConfig = toml::from_str(
            "listen = \"0.0.0.0:9000\"\n[quotas]\nconcurrent_episodes = 2\n[models.a]\nmodel = \"sim:oracle\"\n",
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.listen, "0.0.0.0:9000");
        assert_eq!(c.quotas.concurrent_episodes, 2);
        assert_eq!(c.models["a"].model.as_str(), "sim:oracle");
    }

    #[test]
    fn the_wasi_profile_is_virtual_unless_the_operator_narrows_it() {
        use ecdysis_sandbox::sandbox::WasiProfile;
        assert_eq!(ServeConfig::default().limits.wasi, WasiProfile::Virtual);
        let c: ServeConfig = toml::from_str("[limits]\nwasi = \"minimal\"\n").unwrap();
        assert_eq!(c.limits.wasi, WasiProfile::Minimal);
        let e = toml::from_str::<ServeConfig>("[limits]\nwasi = \"full\"\n").unwrap_err();
        assert!(e.to_string().contains("full"), "{e}");
    }

    #[test]
    fn unknown_fields_and_url_less_endpoints_are_refused() {
        assert!(toml::from_str::<ServeConfig>("lissen = 1").is_err());
        let c: ServeConfig = toml::from_str("[models.x]\nmodel = \"gpt\"\n").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("needs a base_url"), "{e}");
        let c: ServeConfig = toml::from_str("[http]\nmax_connections_per_ip = 0\n").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("http.max_connections_per_ip"), "{e}");
    }
}

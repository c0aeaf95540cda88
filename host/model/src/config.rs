//! Per-role model configuration and its resolution from CLI flags and the
//! environment.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::ModelError;
use crate::retry::RetryPolicy;

/// Used when neither a flag nor `OPENAI_BASE_URL` gives a base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// The environment variable that supplies the default base URL.
pub const BASE_URL_ENV: &str = "OPENAI_BASE_URL";
/// The environment variable read for the API key unless a role names another.
pub const DEFAULT_API_KEY_ENV: &str = "OPENAI_API_KEY";

/// The roles that talk to models. Each has its own [`ModelConfig`] and its
/// own line in the usage ledger; `as_str` is also the CLI flag prefix
/// (`--agent-model`, `--user-model`, `--coder-model`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelRole {
    /// The frozen task model the harness wraps.
    Agent,
    /// The τ²-style user simulator.
    User,
    /// The FDCR Analyst.
    Analyst,
    /// The FDCR Critic.
    Critic,
    /// The FDCR Engineer.
    Engineer,
    /// The FDCR Moderator.
    Moderator,
    /// The coding agent that edits harness source.
    Coder,
}

impl ModelRole {
    /// Every role (for parsing a role name).
    pub const ALL: [ModelRole; 7] = [
        Self::Agent,
        Self::User,
        Self::Analyst,
        Self::Critic,
        Self::Engineer,
        Self::Moderator,
        Self::Coder,
    ];

    /// The lowercase name: the ledger key and the CLI flag prefix.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::User => "user",
            Self::Analyst => "analyst",
            Self::Critic => "critic",
            Self::Engineer => "engineer",
            Self::Moderator => "moderator",
            Self::Coder => "coder",
        }
    }
}

impl fmt::Display for ModelRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ModelRole {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| ModelError::Config(format!("unknown model role `{s}`")))
    }
}

/// How one role reaches its model. Serializable so results files can record
/// what served each role; the API key itself is never stored, only the name
/// of the variable it is read from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// Model name sent as `model` (e.g. `gpt-4o-mini`, `qwen2.5-coder`).
    /// Also the key of the price table and part of the cache key.
    pub model: String,
    /// OpenAI-style base URL, conventionally ending in `/v1`
    /// (`http://127.0.0.1:8080/v1`). Requests go to
    /// `<base_url>/chat/completions`. A bare `http://host:port` gets `/v1`
    /// appended.
    pub base_url: String,
    /// Name of the environment variable holding the API key; `None` (or an
    /// unset variable) sends no `Authorization` header, as local servers
    /// (llama.cpp, Ollama, vLLM) expect.
    pub api_key_env: Option<String>,
    /// Extra top-level JSON fields merged into every request body (e.g.
    /// `{"top_k": 20}` or `{"chat_template_kwargs": {...}}`); they override
    /// the fields the client sets itself.
    #[serde(default)]
    pub extra_args: Map<String, Value>,
    /// TCP/TLS connect timeout.
    #[serde(with = "duration_ms")]
    pub connect_timeout: Duration,
    /// Whole-attempt timeout (send + wait + read). Requests are not
    /// streamed, so this must cover the full generation: a slow CPU server
    /// needs minutes for a long first turn.
    #[serde(with = "duration_ms")]
    pub request_timeout: Duration,
    /// How failed attempts are retried.
    pub retry: RetryPolicy,
    /// Most requests in flight at once to this base URL, across every role
    /// and model sharing it (see `EndpointLimiter`).
    pub max_concurrency: usize,
}

impl ModelConfig {
    /// A config with the defaults: key from `OPENAI_API_KEY`, 10 s connect
    /// timeout, 600 s request timeout, 5 retries, 4 requests in flight.
    pub fn new(model: impl Into<String>, base_url: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            base_url: base_url.into(),
            api_key_env: Some(DEFAULT_API_KEY_ENV.to_owned()),
            extra_args: Map::new(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(600),
            retry: RetryPolicy::default(),
            max_concurrency: 4,
        }
    }

    /// [`ModelConfig::new`] with the base URL from `OPENAI_BASE_URL`, or
    /// [`DEFAULT_BASE_URL`].
    pub fn from_env(model: impl Into<String>) -> Self {
        let base = env_nonempty(BASE_URL_ENV).unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        Self::new(model, base)
    }

    /// Sets `extra_args` from a JSON object text (the `--*-extra-args` flag).
    pub fn with_extra_args_json(mut self, json: &str) -> Result<Self, ModelError> {
        self.extra_args = parse_extra_args(json)?;
        Ok(self)
    }

    /// `sim:<profile>` names a simulated model, not an endpoint.
    pub fn is_simulated(&self) -> bool {
        ecdysis_sys::ids::ModelId::names_simulated(&self.model)
    }

    /// Checks what can be checked without a network call.
    pub fn validate(&self) -> Result<(), ModelError> {
        if self.model.trim().is_empty() {
            return Err(ModelError::Config("empty model name".into()));
        }
        if self.max_concurrency == 0 {
            return Err(ModelError::Config("max_concurrency must be ≥ 1".into()));
        }
        self.normalized_base_url().map(|_| ())
    }

    /// The base URL without a trailing `/` or `/chat/completions`, with
    /// `/v1` added to a bare host. It identifies the endpoint for the
    /// concurrency limit.
    pub fn normalized_base_url(&self) -> Result<String, ModelError> {
        let raw = self.base_url.trim();
        let Some((scheme, rest)) = raw.split_once("://") else {
            return Err(ModelError::Config(format!(
                "base URL `{raw}` has no http:// or https:// scheme"
            )));
        };
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(ModelError::Config(format!(
                "base URL `{raw}` must use http or https"
            )));
        }
        let mut rest = rest.trim_end_matches('/');
        rest = rest.strip_suffix("/chat/completions").unwrap_or(rest);
        rest = rest.trim_end_matches('/');
        if rest.is_empty() {
            return Err(ModelError::Config(format!("base URL `{raw}` has no host")));
        }
        if rest.contains('/') {
            Ok(format!("{scheme}://{rest}"))
        } else {
            Ok(format!("{scheme}://{rest}/v1"))
        }
    }

    /// The URL requests are POSTed to.
    pub fn chat_completions_url(&self) -> Result<String, ModelError> {
        Ok(format!("{}/chat/completions", self.normalized_base_url()?))
    }

    /// The API key from `api_key_env`, if that variable is set and non-empty.
    pub fn api_key(&self) -> Option<String> {
        env_nonempty(self.api_key_env.as_deref()?)
    }
}

/// One role's CLI flags, all optional; the CLI fills it from
/// `--<role>-model`, `--<role>-base-url`, `--<role>-api-key-env`,
/// `--<role>-extra-args`, … and calls [`ModelFlags::resolve`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelFlags {
    /// `--<role>-model`.
    pub model: Option<String>,
    /// `--<role>-base-url`; else `OPENAI_BASE_URL`; else [`DEFAULT_BASE_URL`].
    pub base_url: Option<String>,
    /// `--<role>-api-key-env`: the variable to read the key from; else
    /// `OPENAI_API_KEY`. An empty string means "send no key".
    pub api_key_env: Option<String>,
    /// `--<role>-extra-args`: a JSON object merged into every body.
    pub extra_args: Option<String>,
    /// `--<role>-max-concurrency`.
    pub max_concurrency: Option<usize>,
    /// `--<role>-timeout` in seconds (whole attempt).
    pub request_timeout_secs: Option<f64>,
    /// `--<role>-retries`.
    pub max_retries: Option<u32>,
}

impl ModelFlags {
    /// Fills every unset field from `fallback` (e.g. the user simulator
    /// inheriting the agent's endpoint).
    pub fn or(self, fallback: &ModelFlags) -> ModelFlags {
        ModelFlags {
            model: self.model.or_else(|| fallback.model.clone()),
            base_url: self.base_url.or_else(|| fallback.base_url.clone()),
            api_key_env: self.api_key_env.or_else(|| fallback.api_key_env.clone()),
            extra_args: self.extra_args.or_else(|| fallback.extra_args.clone()),
            max_concurrency: self.max_concurrency.or(fallback.max_concurrency),
            request_timeout_secs: self.request_timeout_secs.or(fallback.request_timeout_secs),
            max_retries: self.max_retries.or(fallback.max_retries),
        }
    }

    /// The config for these flags, with the process environment for
    /// defaults. `default_model` is used when `--<role>-model` is absent.
    pub fn resolve(&self, default_model: Option<&str>) -> Result<ModelConfig, ModelError> {
        self.resolve_with_env(default_model, &env_nonempty)
    }

    /// [`ModelFlags::resolve`] with an explicit environment lookup (tests).
    pub fn resolve_with_env(
        &self,
        default_model: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ModelConfig, ModelError> {
        let model = self
            .model
            .clone()
            .or_else(|| default_model.map(str::to_owned))
            .ok_or_else(|| ModelError::Config("no model name given".into()))?;
        let base_url = self
            .base_url
            .clone()
            .or_else(|| env(BASE_URL_ENV))
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        let mut config = ModelConfig::new(model, base_url);
        if let Some(var) = &self.api_key_env {
            config.api_key_env = Some(var.trim().to_owned()).filter(|v| !v.is_empty());
        }
        if let Some(json) = &self.extra_args {
            config.extra_args = parse_extra_args(json)?;
        }
        if let Some(n) = self.max_concurrency {
            config.max_concurrency = n;
        }
        if let Some(secs) = self.request_timeout_secs {
            config.request_timeout = Duration::try_from_secs_f64(secs)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| ModelError::Config(format!("invalid timeout {secs} s")))?;
        }
        if let Some(n) = self.max_retries {
            config.retry.max_retries = n;
        }
        if !config.is_simulated() {
            config.validate()?;
        }
        Ok(config)
    }
}

fn parse_extra_args(json: &str) -> Result<Map<String, Value>, ModelError> {
    match serde_json::from_str::<Value>(json) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ModelError::Config(
            "extra args must be a JSON object".into(),
        )),
        Err(e) => Err(ModelError::Config(format!("extra args are not JSON: {e}"))),
    }
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Durations as integer milliseconds in JSON (readable, and what the CLI's
/// numbers mean).
pub(crate) mod duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn url(base: &str) -> Result<String, ModelError> {
        ModelConfig::new("m", base).chat_completions_url()
    }

    #[test]
    fn base_url_normalization() {
        let want = "http://127.0.0.1:8080/v1/chat/completions";
        for base in [
            "http://127.0.0.1:8080",
            "http://127.0.0.1:8080/",
            "http://127.0.0.1:8080/v1",
            "http://127.0.0.1:8080/v1/",
            "http://127.0.0.1:8080/v1/chat/completions",
        ] {
            assert_eq!(url(base).unwrap(), want, "{base}");
        }
        assert_eq!(
            url("https://dashscope.example/compatible-mode/v1").unwrap(),
            "https://dashscope.example/compatible-mode/v1/chat/completions"
        );
        for bad in ["127.0.0.1:8080", "ftp://x", "http://", ""] {
            assert!(url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn flags_resolve_with_env_defaults() {
        let env = |name: &str| (name == BASE_URL_ENV).then(|| "http://env:1/v1".to_owned());
        let config = ModelFlags::default()
            .resolve_with_env(Some("m"), &env)
            .unwrap();
        assert_eq!(config.base_url, "http://env:1/v1");
        assert_eq!(config.api_key_env.as_deref(), Some(DEFAULT_API_KEY_ENV));

        let flags = ModelFlags {
            model: Some("x".into()),
            base_url: Some("http://flag:2".into()),
            api_key_env: Some(String::new()),
            extra_args: Some(r#"{"top_k": 3}"#.into()),
            max_concurrency: Some(2),
            request_timeout_secs: Some(1.5),
            max_retries: Some(0),
        };
        let config = flags.resolve_with_env(Some("m"), &env).unwrap();
        assert_eq!(config.model, "x");
        assert_eq!(config.base_url, "http://flag:2");
        assert_eq!(config.api_key_env, None);
        assert_eq!(config.extra_args["top_k"], json!(3));
        assert_eq!(config.max_concurrency, 2);
        assert_eq!(config.request_timeout, Duration::from_millis(1500));
        assert_eq!(config.retry.max_retries, 0);

        let no_env = |_: &str| None;
        assert_eq!(
            ModelFlags::default()
                .resolve_with_env(Some("m"), &no_env)
                .unwrap()
                .base_url,
            DEFAULT_BASE_URL
        );
        assert!(
            ModelFlags::default()
                .resolve_with_env(None, &no_env)
                .is_err()
        );
        let bad = ModelFlags {
            extra_args: Some("[1]".into()),
            ..ModelFlags::default()
        };
        assert!(bad.resolve_with_env(Some("m"), &no_env).is_err());
    }

    #[test]
    fn flags_inherit_and_roles_parse() {
        let agent = ModelFlags {
            model: Some("a".into()),
            base_url: Some("http://a".into()),
            ..ModelFlags::default()
        };
        let user = ModelFlags {
            model: Some("u".into()),
            ..ModelFlags::default()
        }
        .or(&agent);
        assert_eq!(user.model.as_deref(), Some("u"));
        assert_eq!(user.base_url.as_deref(), Some("http://a"));
        assert_eq!("Coder".parse::<ModelRole>().unwrap(), ModelRole::Coder);
        assert!("boss".parse::<ModelRole>().is_err());
    }

    #[test]
    fn config_serializes_without_secrets() {
        let config = ModelConfig::new("m", "http://h/v1");
        let value = serde_json::to_value(&config).unwrap();
        assert_eq!(value["request_timeout"], 600_000);
        assert_eq!(value["api_key_env"], DEFAULT_API_KEY_ENV);
        let back: ModelConfig = serde_json::from_value(value).unwrap();
        assert_eq!(back, config);
    }
}

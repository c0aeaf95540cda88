//! The evaluation flags `run` and `train` share: they parse into the
//! library's [`RunSpec`] and [`ModelServices`], nothing else.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, anyhow};
use clap::Args;

use ecdysis_model::{CachePolicy, ModelFlags, ModelHub, ModelId, SamplingArgs};
use ecdysis_runner::eval::concurrency::{AdaptiveConcurrency, AdaptiveSettings, Concurrency};
use ecdysis_runner::eval::{ModelServices, RunSettings, RunSpec};
use ecdysis_runner::isolate::Isolation;
use ecdysis_sandbox::sandbox::{FailurePolicy, LayerSet};

use super::limits::LimitArgs;

/// `--lambda`: a reward threshold in (0, 1]. Rewards lie in [0, 1], so a
/// threshold outside it (or NaN, which compares false with everything)
/// would silently count every episode or none as a failure.
pub fn parse_lambda(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if value > 0.0 && value <= 1.0 {
        Ok(value)
    } else {
        Err(format!(
            "{text} is outside (0, 1]: an episode fails when its reward (0 to 1) is below it"
        ))
    }
}

/// Episodes in flight when `--concurrency` is not given and `auto` does
/// not apply.
pub const DEFAULT_CONCURRENCY: usize = 8;

/// Who runs the episodes, under which limits, and how they are metered.
#[derive(Args, Debug, Clone)]
pub struct EvalArgs {
    /// Benchmark domain: tau2/retail, tau2/airline, tau2/telecom (the user
    /// acts on their own phone) or agentbench/dbbench.
    #[arg(long, default_value = "tau2/retail")]
    pub domain: String,
    /// Only these task ids (comma-separated), in this order.
    #[arg(long, value_delimiter = ',')]
    pub tasks: Vec<String>,
    /// Trials per task (pass^k is reported for k up to this).
    #[arg(long, default_value_t = 1)]
    pub trials: u32,
    /// The agent model: an endpoint's model name, or a simulated testbed
    /// agent `sim:<profile>` (offline; follows the gold plan with injected
    /// quirks, never a benchmark result). Profiles: sim:oracle, sim:clumsy,
    /// sim:careless, sim:mixed, sim:texter. Default: sim:mixed for `run`,
    /// sim:clumsy for `train`.
    #[arg(long)]
    pub agent_model: Option<String>,
    /// Base URL of the agent's OpenAI-compatible endpoint (default
    /// $OPENAI_BASE_URL).
    #[arg(long)]
    pub agent_base_url: Option<String>,
    /// Environment variable holding the agent endpoint's API key (default
    /// OPENAI_API_KEY; empty for none).
    #[arg(long)]
    pub agent_api_key_env: Option<String>,
    /// Extra JSON object merged into every agent request body.
    #[arg(long)]
    pub agent_extra_args: Option<String>,
    /// Sampling temperature of the agent (default: the endpoint's).
    #[arg(long)]
    pub temperature: Option<f64>,
    /// Nucleus-sampling cut-off of the agent (default: the endpoint's).
    #[arg(long)]
    pub top_p: Option<f64>,
    /// Most tokens per agent reply (default: the endpoint's; small local
    /// models may otherwise ramble to the end of their context).
    #[arg(long)]
    pub max_tokens: Option<u32>,
    /// Seconds one agent (and LLM user) request may take before it is
    /// retried (default 600; a CPU server needs minutes for a long prompt).
    #[arg(long)]
    pub agent_timeout_secs: Option<f64>,
    /// Added latency per call of a simulated (`sim:`) agent, in
    /// milliseconds: models an endpoint's response time offline.
    #[arg(long, default_value_t = 0)]
    pub sim_latency_ms: u64,
    /// The user simulator: `scripted` (offline, deterministic, driven by the
    /// task's instructions) or an endpoint's model name.
    #[arg(long, default_value = "scripted")]
    pub user_model: String,
    /// Base URL of the user simulator's endpoint (default: the agent's).
    #[arg(long)]
    pub user_base_url: Option<String>,
    /// Episodes run at once: a number, or `auto[:MAX]` to adapt them to
    /// the endpoint between 1 and MAX (default 16): the runner measures the
    /// model calls' throughput, keeps more episodes in flight while it
    /// rises and halves them on 429s, 5xx and timeouts (the moves are
    /// progress lines and summary.json's `concurrency`). Default: `auto`
    /// when `run` or `ablate` calls an endpoint from this process, else 8;
    /// `train` takes a number.
    #[arg(long, value_name = "N|auto[:MAX]")]
    pub concurrency: Option<Concurrency>,
    /// Run seed; every episode's seed derives from it, the task and the trial.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Step cap per episode (message hops).
    #[arg(long, default_value_t = ecdysis_env::DEFAULT_MAX_STEPS)]
    pub max_steps: u32,
    /// Tool-error cap per episode.
    #[arg(long, default_value_t = ecdysis_env::DEFAULT_MAX_ERRORS)]
    pub max_errors: u32,
    /// Largest agent request sent, in estimated prompt tokens (the estimate
    /// errs high): a request over it is not sent and the episode ends as
    /// `request_too_large`, so a harness cannot make one request cost more
    /// than this. Default: the context window the agent's endpoint reports
    /// (llama.cpp's /props, vLLM's /v1/models), else no cap; 0 for no cap.
    #[arg(long)]
    pub max_request_tokens: Option<u64>,
    /// What a failing hook does: fail-closed (the episode ends as
    /// harness_error) or fail-open (proceed as if it answered neutrally).
    #[arg(long, default_value = "fail-closed")]
    pub policy: FailurePolicy,
    /// The harness's layers that run: comma-separated contract, skills,
    /// realize, regulate, or `all`. A switched-off layer's hook is not
    /// called and the episode gets its neutral answer; config.json records
    /// the set. Default: all four, or those an exported harness's
    /// harness.json lists.
    #[arg(long)]
    pub layers: Option<LayerSet>,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Response cache policy: read-write, read-only or off.
    #[arg(long, default_value = "read-write")]
    pub cache: CachePolicy,
    /// Response cache directory.
    #[arg(long, default_value = ".ecdysis/cache")]
    pub cache_dir: PathBuf,
    /// A JSON price table (USD per million tokens per model) merged over the
    /// embedded one, for the cost ledger.
    #[arg(long)]
    pub prices: Option<PathBuf>,
    /// Extra attempts for an episode whose endpoint kept failing.
    #[arg(long, default_value_t = 2)]
    pub max_requeues: u32,
    #[command(flatten)]
    pub isolate: super::isolate::IsolateArgs,
}

impl EvalArgs {
    /// Whether episodes wait on a model: an endpoint agent or user, or a
    /// simulated agent given a latency. A zero-latency `sim:` run with the
    /// scripted user is bound by the host's own work instead.
    pub fn waits_on_model(&self) -> bool {
        let simulated = self
            .agent_model
            .as_deref()
            .is_none_or(ModelId::names_simulated);
        !simulated || self.sim_latency_ms > 0 || self.user_model != "scripted"
    }

    /// Whether episodes call an HTTP endpoint (a `sim:` agent with the
    /// scripted user calls none, whatever its simulated latency).
    pub fn calls_an_endpoint(&self) -> bool {
        let simulated = self
            .agent_model
            .as_deref()
            .is_none_or(ModelId::names_simulated);
        !simulated || self.user_model != "scripted"
    }

    /// The concurrency `run` uses. `auto` is the default against an
    /// endpoint because its capacity is a property of the server the host
    /// cannot know (llama.cpp with one slot, vLLM with hundreds) and the
    /// calls themselves measure it; a `sim:` agent's "endpoint" is this
    /// process, with nothing to measure, and worker processes
    /// (`--isolate process`) make their calls out of the runner's sight:
    /// both keep the fixed default, and an explicit `auto` there runs MAX.
    pub fn run_concurrency(&self) -> Concurrency {
        let measurable = self.calls_an_endpoint() && self.isolate.isolate == Isolation::InProcess;
        match self.concurrency {
            Some(Concurrency::Auto { max }) if !measurable => Concurrency::Fixed(max),
            Some(given) => given,
            None if measurable => Concurrency::Auto {
                max: ecdysis_runner::eval::concurrency::DEFAULT_MAX,
            },
            None => Concurrency::Fixed(DEFAULT_CONCURRENCY),
        }
    }

    /// The fixed concurrency of a command that does not adapt it yet
    /// (`train`): `--concurrency auto` is refused there, naming the command.
    pub fn fixed_concurrency(&self, command: &str) -> Result<usize> {
        match self.concurrency {
            None => Ok(DEFAULT_CONCURRENCY),
            Some(Concurrency::Fixed(n)) => Ok(n),
            Some(auto @ Concurrency::Auto { .. }) => Err(anyhow!(
                "--concurrency {auto}: `{command}` keeps a fixed number of episodes in flight; give a number (default {DEFAULT_CONCURRENCY})"
            )),
        }
    }

    /// The adaptive limit of `concurrency`, reading the model calls of
    /// `hub` (`None` for a fixed concurrency).
    pub fn adaptive(concurrency: Concurrency, hub: &ModelHub) -> Option<AdaptiveConcurrency> {
        concurrency.auto_max().map(|max| AdaptiveConcurrency {
            settings: AdaptiveSettings {
                max,
                ..AdaptiveSettings::default()
            },
            signals: hub.limiter().signals().clone(),
        })
    }

    /// Under `auto` concurrency the endpoints' own request limit (4 by
    /// default) rises to MAX: the adaptive limit governs instead, and would
    /// otherwise measure the host's cap rather than the server.
    pub fn lift_endpoint_limit(spec: &mut RunSpec, concurrency: Concurrency) {
        if let Some(max) = concurrency.auto_max() {
            spec.agent.max_concurrency = Some(max);
            spec.user.max_concurrency = Some(max);
        }
    }

    /// The run specification for `split`, with `default_agent` when no
    /// --agent-model was given.
    pub fn spec(&self, split: Option<String>, default_agent: &str) -> Result<RunSpec> {
        let spec = RunSpec {
            settings: RunSettings {
                domain: self.domain.clone(),
                split,
                trials: self.trials,
                seed: self.seed,
                max_steps: self.max_steps,
                max_errors: self.max_errors,
                max_request_tokens: self.max_request_tokens.filter(|n| *n > 0),
                policy: self.policy,
                layers: self.layers.unwrap_or_default(),
                limits: self.limits.limits()?,
                sampling: SamplingArgs {
                    temperature: self.temperature,
                    top_p: self.top_p,
                    max_tokens: self.max_tokens,
                    ..SamplingArgs::default()
                },
            },
            tasks: self.tasks.clone(),
            agent: ModelFlags {
                model: Some(
                    self.agent_model
                        .clone()
                        .unwrap_or_else(|| default_agent.to_string()),
                ),
                base_url: self.agent_base_url.clone(),
                api_key_env: self.agent_api_key_env.clone(),
                extra_args: self.agent_extra_args.clone(),
                request_timeout_secs: self.agent_timeout_secs,
                ..ModelFlags::default()
            },
            user: ModelFlags {
                model: Some(self.user_model.clone()),
                base_url: self.user_base_url.clone(),
                ..ModelFlags::default()
            },
            sim_latency: Duration::from_millis(self.sim_latency_ms),
        };
        spec.validate().map_err(|e| anyhow!("{e}"))?;
        Ok(spec)
    }

    /// `spec` with its request cap defaulted to the context window the
    /// agent's endpoint reports, when no `--max-request-tokens` was given
    /// (a `sim:` agent has no endpoint and no cap).
    pub async fn with_endpoint_cap(&self, mut spec: RunSpec) -> RunSpec {
        if self.max_request_tokens.is_some() || spec.is_simulated() {
            return spec;
        }
        let Ok(config) = spec.agent.resolve(None) else {
            return spec;
        };
        let key = config
            .api_key_env
            .as_deref()
            .and_then(|v| std::env::var(v).ok());
        if let Some((n, _)) = ecdysis_model::tokens::endpoint_context(
            &config.base_url,
            Some(&config.model),
            key.as_deref(),
        )
        .await
        {
            spec.settings.max_request_tokens = Some(n as u64);
        }
        spec
    }

    /// The cache and price table every model of the command shares.
    pub fn services(&self) -> Result<ModelServices> {
        Ok(ModelServices {
            cache: self.cache,
            cache_dir: self.cache_dir.clone(),
            prices: self.prices.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::EvalArgs;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        eval: EvalArgs,
    }

    fn waits(args: &[&str]) -> bool {
        let mut argv = vec!["x"];
        argv.extend_from_slice(args);
        Wrapper::parse_from(argv).eval.waits_on_model()
    }

    #[test]
    fn lambda_is_a_threshold_inside_the_reward_range() {
        assert_eq!(super::parse_lambda("1"), Ok(1.0));
        assert_eq!(super::parse_lambda(" 0.5 "), Ok(0.5));
        for bad in ["0", "-0.1", "1.5", "NaN", "inf", "-inf", "1e308", "abc", ""] {
            let err = super::parse_lambda(bad).expect_err(bad);
            assert!(err.contains(bad.trim()) || bad.is_empty(), "{bad}: {err}");
        }
    }

    fn parse(args: &[&str]) -> super::EvalArgs {
        let mut argv = vec!["x"];
        argv.extend_from_slice(args);
        Wrapper::parse_from(argv).eval
    }

    #[test]
    fn auto_is_the_default_against_an_endpoint_in_this_process_only() {
        use ecdysis_runner::eval::concurrency::{Concurrency, DEFAULT_MAX};
        let auto = Concurrency::Auto { max: DEFAULT_MAX };
        let endpoint = ["--agent-model", "qwen3-8b"];
        assert_eq!(parse(&endpoint).run_concurrency(), auto);
        assert_eq!(parse(&["--user-model", "qwen3-8b"]).run_concurrency(), auto);
        assert_eq!(parse(&[]).run_concurrency(), Concurrency::Fixed(8));
        // A sim: agent has nothing to measure: an explicit auto runs MAX.
        assert_eq!(
            parse(&["--concurrency", "auto:5"]).run_concurrency(),
            Concurrency::Fixed(5)
        );
        let isolated = [&endpoint[..], &["--isolate", "process"]].concat();
        assert_eq!(parse(&isolated).run_concurrency(), Concurrency::Fixed(8));
        let fixed = [&endpoint[..], &["--concurrency", "3"]].concat();
        assert_eq!(parse(&fixed).run_concurrency(), Concurrency::Fixed(3));
        assert_eq!(parse(&fixed).fixed_concurrency("train").unwrap(), 3);
        let err = parse(&["--concurrency", "auto"])
            .fixed_concurrency("train")
            .unwrap_err()
            .to_string();
        assert!(err.contains("auto:16") && err.contains("`train`"), "{err}");
        let refused = Wrapper::try_parse_from(["x", "--concurrency", "0"]);
        let message = refused.err().expect("0 is refused").to_string();
        assert!(message.contains("invalid concurrency `0`"), "{message}");
    }

    #[test]
    fn episodes_wait_on_a_model_unless_simulated_without_latency() {
        // The default agent is simulated and the default user scripted.
        assert!(!waits(&[]));
        assert!(!waits(&["--agent-model", "sim:oracle"]));
        assert!(waits(&[
            "--agent-model",
            "sim:mixed",
            "--sim-latency-ms",
            "200"
        ]));
        assert!(waits(&["--agent-model", "qwen3-8b"]));
        assert!(waits(&[
            "--agent-model",
            "sim:oracle",
            "--user-model",
            "qwen3-8b"
        ]));
    }
}

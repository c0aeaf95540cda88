//! Who diagnoses and who edits, as a library value: [`RoleSpec`] names the
//! FDCR role models and the coder, and builds the [`Diagnoser`] and
//! [`Coder`] of a training run. Without any model the run is offline:
//! the heuristic diagnoser and the rule coder. Combinations that cannot work
//! are refused here, before anything runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::code::network::{self, CoderNetwork, EndpointSources, NetworkChoice};
use crate::code::{
    Coder, EditorCoder, EditorConfig, ExternalCoder, ExternalConfig, RuleCoder, TableCoder,
    WholeFileCoder,
};
use crate::diagnose::fdcr::{FdcrConfig, PromptLayout, Roles};
use crate::diagnose::token_budget::{self, ContextBudget, ContextSource};
use crate::train::{Diagnoser, Method};
use ecdysis_model::{ChatModel, ModelFlags, ModelHub, ModelRole, SamplingArgs};
use ecdysis_sandbox::store::Containment;

/// The coder of a training run.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum CoderSpec {
    /// The offline rule coder (edits `src/tables.rs` from a spec's rules).
    #[default]
    Rules,
    /// The built-in editor: this model answers with search/replace edits.
    Editor {
        /// The model.
        model: String,
        /// Follow-up turns (compiler errors, edits that did not apply).
        max_feedback: u32,
    },
    /// The table coder: this model answers with a JSON list of rule-table
    /// edits, which the host writes into `src/tables.rs` (for models too
    /// weak to edit Rust).
    Tables {
        /// The model.
        model: String,
        /// Follow-up turns (unusable replies, edits that change nothing).
        max_feedback: u32,
    },
    /// The whole-file coder: this model rewrites one small hook file the
    /// host picks from the spec, answering with its whole new content.
    WholeFile {
        /// The model.
        model: String,
        /// Follow-up turns (unusable replies, compiler errors).
        max_feedback: u32,
    },
    /// An external coding agent run in the staging crate.
    External {
        /// The command template (`{prompt}`, `{prompt_file}`, `{dir}`).
        command: String,
        /// Wall-clock limit of one run, in seconds.
        timeout_secs: u64,
        /// Its environment (its API key, …): nothing else of the host's.
        env: BTreeMap<String, String>,
        /// Extra paths its jail may read (its installation).
        read_only: Vec<PathBuf>,
        /// Extra paths its jail may write (its logs).
        read_write: Vec<PathBuf>,
        /// Which network its jail gets (`--coder-network`; see
        /// [`crate::code::network`]).
        network: NetworkChoice,
        /// The only endpoints its jail may reach (`HOST:PORT` or URLs,
        /// forwarded by the egress proxy); empty: derived from the base URLs given.
        endpoints: Vec<String>,
    },
}

/// The evolution roles of a training run.
#[derive(Debug, Clone, PartialEq)]
pub struct RoleSpec {
    /// One model for all four FDCR roles.
    pub fdcr_model: Option<String>,
    /// Per-role models (each defaults to `fdcr_model`): analyst, critic,
    /// engineer, moderator.
    pub analyst_model: Option<String>,
    /// See `analyst_model`.
    pub critic_model: Option<String>,
    /// See `analyst_model`.
    pub engineer_model: Option<String>,
    /// See `analyst_model`.
    pub moderator_model: Option<String>,
    /// Analyst → Critic → Engineer rounds before the Moderator.
    pub fdcr_rounds: u32,
    /// The coder.
    pub coder: CoderSpec,
    /// The roles' endpoint (base URL, key variable, extra body arguments).
    pub endpoint: ModelFlags,
    /// The coder's endpoint where it differs (unset fields: `endpoint`'s).
    pub coder_endpoint: ModelFlags,
    /// Sampling of every role and coder request (`--roles-temperature`...).
    pub sampling: SamplingArgs,
    /// The context window every role and coder request must fit
    /// (`--roles-context-tokens`); `None`: what the endpoint reports, else
    /// [`token_budget::DEFAULT_CONTEXT_TOKENS`].
    pub context_tokens: Option<usize>,
    /// Ask the endpoint to constrain the Moderator's spec and the table
    /// coder's edits to their JSON schemas (`response_format`).
    pub structured: bool,
    /// How the FDCR prompts are laid out (`--roles-layout`); `None`: what
    /// the run directory's `config.json` records, else
    /// [`PromptLayout::SharedPrefix`] (resolved by [`crate::train::run_spec`]).
    pub layout: Option<PromptLayout>,
}

impl Default for RoleSpec {
    fn default() -> Self {
        RoleSpec {
            fdcr_model: None,
            analyst_model: None,
            critic_model: None,
            engineer_model: None,
            moderator_model: None,
            fdcr_rounds: crate::diagnose::fdcr::DEFAULT_ROUNDS,
            coder: CoderSpec::Rules,
            endpoint: ModelFlags::default(),
            coder_endpoint: ModelFlags::default(),
            sampling: SamplingArgs::default(),
            context_tokens: None,
            structured: false,
            layout: None,
        }
    }
}

/// Roles that cannot work together, or a model that cannot be reached.
#[derive(Debug, thiserror::Error)]
pub enum RoleError {
    /// FDCR role models were given for a method other than `ecdysis` (named).
    #[error("FDCR role models were given but method {0} does not deliberate (only `ecdysis` does)")]
    FdcrWithoutDeliberation(&'static str),
    /// FDCR roles with the offline rule coder, which cannot read prose specs.
    #[error(
        "FDCR specs are prose, which the offline rule coder cannot implement: add a coder model or an external coder command"
    )]
    FdcrWithoutCoder,
    /// An FDCR role (named) has neither its own model nor the shared one.
    #[error("no model for the {0}: give it its own model or an FDCR model for all roles")]
    MissingRole(ModelRole),
    /// A role's model settings do not resolve or its client cannot be built.
    #[error("the {role} model `{model}`: {reason}")]
    Model {
        /// An FDCR role or the coder.
        role: ModelRole,
        /// The model name given for the role.
        model: String,
        /// What is wrong.
        reason: String,
    },
    /// The external coder command cannot be used (the reason).
    #[error("the external coder command: {0}")]
    External(String),
    /// The external coder's network settings contradict each other or name
    /// no usable endpoint.
    #[error("the external coder's network: {0}")]
    Network(#[from] network::NetworkError),
}

impl RoleSpec {
    /// Whether any role or the coder talks to a model (then requests are
    /// budgeted).
    pub fn any_model(&self) -> bool {
        self.any_fdcr() || self.coder != CoderSpec::Rules
    }

    /// The context budget of the role and coder requests, and where its
    /// size came from: the flag, else what the roles' endpoint (and the
    /// coder's, when it has its own; the smaller) reports, else the default.
    pub async fn resolve_budget(&self) -> (ContextBudget, ContextSource) {
        let (n, source) = match self.context_tokens {
            Some(n) => (n, ContextSource::Flag),
            None => {
                let mut found: Option<(usize, String)> = None;
                let coder = self.coder_endpoint.clone().or(&self.endpoint);
                let mut endpoints = vec![];
                if self.any_fdcr() {
                    endpoints.push((self.endpoint.clone(), self.fdcr_model.clone()));
                }
                if let CoderSpec::Editor { model, .. }
                | CoderSpec::Tables { model, .. }
                | CoderSpec::WholeFile { model, .. } = &self.coder
                {
                    endpoints.push((coder, Some(model.clone())));
                }
                for (flags, model) in endpoints {
                    let flags = ModelFlags {
                        model: model.or_else(|| Some("probe".into())),
                        ..flags
                    };
                    let Ok(config) = flags.resolve(None) else {
                        continue;
                    };
                    let key = config
                        .api_key_env
                        .as_deref()
                        .and_then(|v| std::env::var(v).ok());
                    if let Some((n, url)) = token_budget::endpoint_context(
                        &config.base_url,
                        Some(&config.model),
                        key.as_deref(),
                    )
                    .await
                        && found.as_ref().is_none_or(|(m, _)| n < *m)
                    {
                        found = Some((n, url));
                    }
                }
                match found {
                    Some((n, url)) => (n, ContextSource::Endpoint(url)),
                    None => (token_budget::DEFAULT_CONTEXT_TOKENS, ContextSource::Default),
                }
            }
        };
        (ContextBudget::new(n, self.sampling.max_tokens), source)
    }

    /// The network the external coder's jail gets (`None` for the other
    /// coders, which run no process): what `--coder-network` asks for, the
    /// endpoint by default when one is known (`--coder-endpoint`, the
    /// coder's base URL or a `*_BASE_URL` variable passed to it, the roles'
    /// base URL), else none.
    pub fn coder_network(&self) -> Result<Option<CoderNetwork>, RoleError> {
        let CoderSpec::External {
            network: choice,
            endpoints,
            env,
            ..
        } = &self.coder
        else {
            return Ok(None);
        };
        let sources = EndpointSources {
            explicit: endpoints,
            coder_base_url: self.coder_endpoint.base_url.as_deref(),
            coder_env: env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect(),
            roles_base_url: self.endpoint.base_url.as_deref(),
        };
        Ok(Some(network::resolve(*choice, &sources)?))
    }

    /// Whether any FDCR role has a model.
    pub fn any_fdcr(&self) -> bool {
        self.fdcr_model.is_some() || self.per_role().iter().any(|(_, m)| m.is_some())
    }

    /// The same roles without the four deliberating ones: the coder (and
    /// its endpoint and sampling) stays.
    pub fn without_fdcr(&self) -> RoleSpec {
        RoleSpec {
            fdcr_model: None,
            analyst_model: None,
            critic_model: None,
            engineer_model: None,
            moderator_model: None,
            ..self.clone()
        }
    }

    fn per_role(&self) -> [(ModelRole, &Option<String>); 4] {
        [
            (ModelRole::Analyst, &self.analyst_model),
            (ModelRole::Critic, &self.critic_model),
            (ModelRole::Engineer, &self.engineer_model),
            (ModelRole::Moderator, &self.moderator_model),
        ]
    }

    /// Refuse combinations that cannot work, before any model is built:
    /// FDCR roles with a method that does not deliberate, FDCR without a
    /// prose-reading coder, a role without a model, a contradictory coder
    /// network.
    pub fn validate(&self, method: Method) -> Result<(), RoleError> {
        self.coder_network()?;
        if !self.any_fdcr() {
            return Ok(());
        }
        if method != Method::Ecdysis {
            return Err(RoleError::FdcrWithoutDeliberation(method.as_str()));
        }
        if self.coder == CoderSpec::Rules {
            return Err(RoleError::FdcrWithoutCoder);
        }
        for (role, m) in self.per_role() {
            if m.is_none() && self.fdcr_model.is_none() {
                return Err(RoleError::MissingRole(role));
            }
        }
        Ok(())
    }

    /// The diagnoser and coder of a run of `method`, metered through `hub`;
    /// candidate builds share the cargo target dir `target`; every role and
    /// coder request fits `budget`.; with
    /// `allow_unjailed` the coder's builds (and an external coder) run
    /// without a jail where none can be made; the rule coder waits
    /// `rule_latency` before each edit.
    pub fn build(
        &self,
        method: Method,
        hub: &ModelHub,
        target: &Path,
        budget: ContextBudget,
        allow_unjailed: bool,
        rule_latency: Duration,
    ) -> Result<(Diagnoser, Arc<dyn Coder>), RoleError> {
        let containment = Containment {
            allow_unjailed,
            ..Containment::default()
        };
        self.validate(method)?;
        let model = |role: ModelRole, name: &str| -> Result<Arc<dyn ChatModel>, RoleError> {
            let mut flags = ModelFlags {
                model: Some(name.to_string()),
                ..self.endpoint.clone()
            };
            if role == ModelRole::Coder {
                flags = self.coder_endpoint.clone().or(&flags);
                flags.model = Some(name.to_string());
            }
            let fail = |reason: String| RoleError::Model {
                role,
                model: name.to_string(),
                reason,
            };
            let config = flags.resolve(None).map_err(|e| fail(e.to_string()))?;
            hub.http_model(role, config)
                .map_err(|e| fail(e.to_string()))
        };
        // The three model coders differ only in the format they ask for;
        // only the table coder's replies are schema-constrained.
        let editor_config = |max_feedback: u32, structured: bool| EditorConfig {
            max_feedback,
            target_dir: Some(target.to_path_buf()),
            sampling: self.sampling.clone(),
            budget,
            containment: containment.clone(),
            structured,
            ..EditorConfig::default()
        };
        let coder: Arc<dyn Coder> = match &self.coder {
            CoderSpec::Rules => Arc::new(RuleCoder::new(rule_latency)),
            CoderSpec::Editor {
                model: name,
                max_feedback,
            } => {
                let config = editor_config(*max_feedback, false);
                Arc::new(EditorCoder::new(model(ModelRole::Coder, name)?, config))
            }
            CoderSpec::Tables {
                model: name,
                max_feedback,
            } => {
                let config = editor_config(*max_feedback, self.structured);
                Arc::new(TableCoder::new(model(ModelRole::Coder, name)?, config))
            }
            CoderSpec::WholeFile {
                model: name,
                max_feedback,
            } => {
                let config = editor_config(*max_feedback, false);
                Arc::new(WholeFileCoder::new(model(ModelRole::Coder, name)?, config))
            }
            CoderSpec::External {
                command,
                timeout_secs,
                env,
                read_only,
                read_write,
                ..
            } => {
                let config = ExternalConfig {
                    timeout_secs: *timeout_secs,
                    env: env.clone(),
                    read_only: read_only.clone(),
                    read_write: read_write.clone(),
                    network: self.coder_network()?.unwrap_or_default(),
                    target_dir: Some(target.to_path_buf()),
                    // An external agent runs its own model: its prompt is
                    // budgeted only when the flag says how.
                    prompt_tokens: self.context_tokens.map(|_| budget.prompt_tokens()),
                    containment: containment.clone(),
                    ..ExternalConfig::new(command.clone())
                };
                Arc::new(
                    ExternalCoder::new(config).map_err(|e| RoleError::External(e.to_string()))?,
                )
            }
        };
        if !self.any_fdcr() {
            return Ok((Diagnoser::Heuristic, coder));
        }
        let mut models = Vec::new();
        for (role, m) in self.per_role() {
            let name = m
                .as_ref()
                .or(self.fdcr_model.as_ref())
                .ok_or(RoleError::MissingRole(role))?;
            models.push(model(role, name)?);
        }
        let mut it = models.into_iter();
        let mut next = || it.next().expect("four roles");
        let roles = Roles {
            analyst: next(),
            critic: next(),
            engineer: next(),
            moderator: next(),
        };
        let config = FdcrConfig {
            rounds: self.fdcr_rounds.max(1),
            sampling: self.sampling.clone(),
            budget,
            structured: self.structured,
            layout: self.layout.unwrap_or(PromptLayout::SharedPrefix),
            ..FdcrConfig::default()
        };
        Ok((Diagnoser::Fdcr { roles, config }, coder))
    }
}

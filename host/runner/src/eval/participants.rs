//! Who sits across the table in an episode: the agent model and the user
//! simulator, built per episode. This is the one place besides the
//! evaluator where a task's oracle is handed over: the user simulator needs
//! the scenario, and a `sim:` testbed agent is an oracle by construction.

use std::sync::Arc;

use ecdysis_env::{Oracle, VisibleTask};
use ecdysis_model::{
    ChatModel, LlmUser, ModelHub, ScriptedUser, SimAgent, SimProfile, UserSimulator,
};

/// Why an episode's participants could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ParticipantsError {
    /// The agent or user of one task could not be built. (The standard
    /// participants cannot fail per episode; other [`Participants`] can.)
    #[error("cannot build the {role} for task {task}: {reason}")]
    Build {
        /// `agent` or `user`.
        role: &'static str,
        /// The task the episode was for.
        task: String,
        /// What went wrong.
        reason: String,
    },
}

/// The two sides of one episode: the agent model and the user simulator.
pub type Seats = (Arc<dyn ChatModel>, Box<dyn UserSimulator>);

/// Builds the agent and the user for each episode.
pub trait Participants: Send + Sync {
    /// The agent model and user simulator of one episode of `task`. `oracle`
    /// gives the user its scenario (and a `sim:` agent its gold plan); `trial`
    /// and `seed` make each episode's participants distinct and reproducible.
    fn build(
        &self,
        task: &VisibleTask,
        oracle: &Oracle,
        trial: u32,
        seed: u64,
    ) -> Result<Seats, ParticipantsError>;
}

/// The agent side of a run.
#[derive(Clone)]
pub enum AgentSide {
    /// A simulated testbed agent (`sim:<profile>`), built per episode from
    /// the task's gold plan and the episode seed.
    Sim(SimProfile),
    /// A real model behind an endpoint (shared by every episode).
    Model(Arc<dyn ChatModel>),
}

/// The user side of a run.
#[derive(Clone)]
pub enum UserSide {
    /// The deterministic offline user, driven by the task's structured
    /// instructions.
    Scripted,
    /// An LLM playing the user from the task's scenario.
    Model(Arc<dyn ChatModel>),
}

/// The standard participants: an agent side and a user side.
pub struct StandardParticipants {
    /// Who plays the agent.
    pub agent: AgentSide,
    /// Who plays the user.
    pub user: UserSide,
    /// Where simulated agents' calls are metered (role `agent`).
    pub hub: Option<ModelHub>,
    /// Added latency per simulated agent call, to model an endpoint's
    /// response time offline (benchmarks, kill/resume tests).
    pub sim_latency: std::time::Duration,
    /// The domain's unmodified system prompt.
    pub base_prompt: String,
    /// The domain's user tools (τ² telecom's phone), offered to an LLM
    /// user; empty where the user has none.
    pub device_tools: Vec<ecdysis_model::FunctionTool>,
}

/// A domain's user tools as an LLM user is offered them.
pub fn device_tools(domain: &dyn ecdysis_env::Domain) -> Vec<ecdysis_model::FunctionTool> {
    domain
        .user_tools()
        .iter()
        .map(|t| {
            ecdysis_model::FunctionTool::new(
                t.name.clone(),
                t.description.clone(),
                t.parameters.clone(),
            )
        })
        .collect()
}

/// A model that answers after a fixed delay: a simulated endpoint latency.
pub struct Delayed {
    inner: Arc<dyn ChatModel>,
    delay: std::time::Duration,
}

impl Delayed {
    /// `inner`, answering every call `delay` late.
    pub fn new(inner: Arc<dyn ChatModel>, delay: std::time::Duration) -> Self {
        Delayed { inner, delay }
    }
}

impl ChatModel for Delayed {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn chat<'a>(
        &'a self,
        request: &'a ecdysis_model::ChatRequest,
    ) -> ecdysis_model::ModelFuture<'a> {
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            self.inner.chat(request).await
        })
    }
}

impl Participants for StandardParticipants {
    fn build(
        &self,
        _task: &VisibleTask,
        oracle: &Oracle,
        trial: u32,
        seed: u64,
    ) -> Result<Seats, ParticipantsError> {
        let agent: Arc<dyn ChatModel> = match &self.agent {
            AgentSide::Sim(profile) => {
                // The base prompt lets the testbed agent tell the domain's own
                // policy from what a harness added to it.
                // Building it (the gold plan, the prompt copy) is the
                // simulated participant's work, metered as such.
                let mut sim: Arc<dyn ChatModel> =
                    Arc::new(ecdysis_model::sim::cpu::metered(|| {
                        SimAgent::new(profile.clone(), oracle.gold_plan().into(), seed)
                            .with_base_prompt(self.base_prompt.clone())
                    }));
                if !self.sim_latency.is_zero() {
                    sim = Arc::new(Delayed::new(sim, self.sim_latency));
                }
                match &self.hub {
                    // Simulated turns are never cached: they are free and
                    // the cache would hide the seed's effect.
                    Some(hub) => hub.metered(ecdysis_model::ModelRole::Agent, sim, false),
                    None => sim,
                }
            }
            AgentSide::Model(m) => m.clone(),
        };
        let user: Box<dyn UserSimulator> = match &self.user {
            UserSide::Scripted => Box::new(ecdysis_model::sim::cpu::metered(|| {
                ScriptedUser::new(oracle.user_script())
            })),
            UserSide::Model(m) => Box::new(
                LlmUser::new(m.clone(), oracle.user_scenario())
                    .with_device_tools(self.device_tools.clone())
                    .with_cache_salt(format!("{}/{trial}/{seed}", oracle.task_id())),
            ),
        };
        Ok((agent, user))
    }
}

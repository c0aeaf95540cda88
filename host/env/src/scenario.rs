//! What a task's hidden half offers the simulators, as plain data: the
//! structured user instructions for the offline scripted user and the gold
//! plan for a `sim:` testbed agent. Both are oracle-derived: they go to the
//! participants of an episode and nowhere else (never to a harness, a real
//! model or a diagnosis prompt). The model layer turns them into its own
//! simulator inputs, so these types depend on nothing above `env`.

use serde::{Deserialize, Serialize};

use super::ToolCall;

/// **Testbed-only, oracle-derived.** A task's structured user instructions
/// (τ² `user_scenario.instructions`), written in the second person ("You
/// are Yusuf Rossi…") as τ² states them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UserScript {
    /// The task these instructions belong to.
    pub task_id: String,
    /// Why the user contacts the agent.
    pub reason_for_call: String,
    /// What the user knows and may say when asked (identity facts...).
    #[serde(default)]
    pub known_info: Option<String>,
    /// What the user does not know.
    #[serde(default)]
    pub unknown_info: Option<String>,
    /// How the user should behave during the conversation.
    #[serde(default)]
    pub task_instructions: String,
    /// In a dual-control domain (τ² telecom): the task's gold actions the
    /// user performs on their own device, in order (`requestor: user`).
    /// The scripted user carries them out when the agent asks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_actions: Vec<ToolCall>,
}

/// **Testbed-only, oracle-derived.** A task's gold actions and the strings
/// the agent must say: what a simulated testbed agent follows. An episode
/// driven by it is a testbed run, never a benchmark result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GoldPlan {
    /// The task this plan solves.
    pub task_id: String,
    /// Domain name, e.g. `tau2/retail`.
    pub domain: String,
    /// The gold actions, in order: the agent's, and in a dual-control
    /// domain the user's (`requestor: user`), which the agent asks for.
    pub actions: Vec<ToolCall>,
    /// Strings the agent's messages must contain.
    pub communicate: Vec<String>,
}

/// **Testbed only.** In a gold plan's answer: "what the last command
/// printed, stripped", which the `sim:` agent substitutes from the latest
/// tool result ([`printed_in`]). A plan cannot know a machine's output in
/// advance (AgentBench OS's answers are read from it).
pub const FROM_LAST_OUTPUT: &str = "$ECDYSIS_LAST_OUTPUT";

/// How a command's result reads when it printed something (AgentBench
/// OS's wording, followed by the output).
pub const OBSERVATION_PREFIX: &str = "The output of the OS:\n\n";

/// How a command's result reads when it printed nothing (AgentBench OS's
/// wording).
pub const EMPTY_OBSERVATION: &str = "The output of the OS is empty.";

/// What a command printed, read back from a tool result worded as above
/// (stripped); `None` for a text that is no such observation. Here rather
/// than in the OS benchmark's crate so that the model layer's testbed agent
/// needs no benchmark.
pub fn printed_in(observation: &str) -> Option<&str> {
    if observation == EMPTY_OBSERVATION {
        return Some("");
    }
    observation.strip_prefix(OBSERVATION_PREFIX).map(str::trim)
}

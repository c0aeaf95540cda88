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
    /// The gold actions the agent takes, in order.
    pub actions: Vec<ToolCall>,
    /// Strings the agent's messages must contain.
    pub communicate: Vec<String>,
}

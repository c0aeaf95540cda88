//! The oracle-derived input of a simulated agent.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// **Testbed-only, oracle-derived.** What a simulated agent follows: a task's
/// gold actions and the strings the agent must say. It is built from the
/// hidden half of a task, so it must never reach a harness or a real model,
/// and an episode driven by it is a testbed run, never a benchmark result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TestbedPlan {
    /// The task the plan is for.
    pub task_id: String,
    /// Domain name, e.g. `tau2/retail` (selects the tool-alias table).
    pub domain: String,
    /// The gold actions, in order.
    pub steps: Vec<PlannedCall>,
    /// Strings the final assistant message must contain.
    #[serde(default)]
    pub communicate: Vec<String>,
}

/// One gold action.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlannedCall {
    /// The tool to call.
    pub name: String,
    /// Its gold arguments.
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// A step the user does on their own device (τ² telecom's
    /// `requestor: user`): the agent asks for it instead of calling it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub by_user: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl PlannedCall {
    /// A gold action; `arguments` other than a JSON object count as none.
    pub fn new(name: impl Into<String>, arguments: Value) -> Self {
        Self {
            name: name.into(),
            arguments: match arguments {
                Value::Object(map) => map,
                _ => Map::new(),
            },
            by_user: false,
        }
    }

    /// The message asking the user to do this step on their device: it
    /// names the tool (in words and as written) and its arguments.
    pub fn request_to_user(&self) -> String {
        let what = self.name.replace('_', " ");
        let name = &self.name;
        if self.arguments.is_empty() {
            format!("Please {what} (`{name}`) on your phone, and tell me what you see.")
        } else {
            format!(
                "Please {what} (`{name}`) on your phone with {}, and tell me what you see.",
                Value::Object(self.arguments.clone())
            )
        }
    }

    /// Whether the tool only reads (by its name: `get_`, `find_`, `search_`,
    /// `list_`, `calculate`, `think`). The plan carries no `mutates` flag, and
    /// τ² names its tools this way.
    pub fn is_read_only(&self) -> bool {
        is_read_only_tool(&self.name)
    }
}

impl From<ecdysis_env::GoldPlan> for TestbedPlan {
    fn from(plan: ecdysis_env::GoldPlan) -> Self {
        TestbedPlan {
            task_id: plan.task_id,
            domain: plan.domain,
            steps: plan
                .actions
                .into_iter()
                .map(|a| PlannedCall {
                    by_user: a.requestor == ecdysis_env::Requestor::User,
                    ..PlannedCall::new(a.name, a.arguments)
                })
                .collect(),
            communicate: plan.communicate,
        }
    }
}

/// See [`PlannedCall::is_read_only`].
pub fn is_read_only_tool(name: &str) -> bool {
    ["get_", "find_", "search_", "list_", "check_"]
        .iter()
        .any(|p| name.starts_with(p))
        || matches!(name, "calculate" | "think")
}

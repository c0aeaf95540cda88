//! τ² tasks, split into what the agent may see ([`VisibleTask`]) and what
//! only the evaluator and the user simulator may see ([`Criteria`], reached
//! through the opaque [`ecdysis_env::Oracle`]).

use std::sync::Arc;

use serde::Deserialize;

use ecdysis_env::{TaskOracle, ToolCall, UserScript, VisibleTask};

/// One gold action (`Action` in τ²).
#[derive(Clone, Debug, Deserialize)]
pub struct Action {
    /// `action_id`.
    pub action_id: String,
    /// Who acts (`assistant` for every airline/retail action).
    #[serde(default = "assistant")]
    pub requestor: String,
    /// Tool name.
    pub name: String,
    /// Arguments in the task file's order.
    pub arguments: serde_json::Map<String, serde_json::Value>,
    /// Arguments compared by the action check (`None`: all of the call's).
    #[serde(default)]
    pub compare_args: Option<Vec<String>>,
}

fn assistant() -> String {
    "assistant".into()
}

/// `StructuredUserInstructions`, or a plain instruction string.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Instructions {
    /// The structured form every airline/retail task uses.
    Structured {
        /// `domain`.
        domain: String,
        /// `reason_for_call`.
        reason_for_call: String,
        /// `known_info`.
        #[serde(default)]
        known_info: Option<String>,
        /// `unknown_info`.
        #[serde(default)]
        unknown_info: Option<String>,
        /// `task_instructions`.
        task_instructions: String,
    },
    /// Free text.
    Text(String),
}

/// `UserScenario`.
#[derive(Clone, Debug, Deserialize)]
pub struct UserScenario {
    /// `persona`.
    #[serde(default)]
    pub persona: Option<String>,
    /// `instructions`.
    pub instructions: Instructions,
}

/// `textwrap.indent(text, prefix)`: prefixes every line that is not
/// whitespace only.
fn indent(text: &str, prefix: &str) -> String {
    text.split_inclusive('\n')
        .map(|line| {
            if line.trim().is_empty() {
                line.to_string()
            } else {
                format!("{prefix}{line}")
            }
        })
        .collect()
}

impl std::fmt::Display for Instructions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Instructions::Text(t) => f.write_str(t),
            Instructions::Structured {
                domain,
                reason_for_call,
                known_info,
                unknown_info,
                task_instructions,
            } => {
                let mut lines = vec![
                    format!("Domain: {domain}"),
                    format!("Reason for call:\n{}", indent(reason_for_call, "\t")),
                ];
                if let Some(k) = known_info {
                    lines.push(format!("Known info:\n{}", indent(k, "\t")));
                }
                if let Some(u) = unknown_info {
                    lines.push(format!("Unknown info:\n{}", indent(u, "\t")));
                }
                lines.push(format!(
                    "Task instructions:\n{}",
                    indent(task_instructions, "\t")
                ));
                f.write_str(&lines.join("\n"))
            }
        }
    }
}

impl std::fmt::Display for UserScenario {
    /// `str(UserScenario)`, the scenario text τ² gives its user simulator.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut lines = Vec::new();
        if let Some(p) = &self.persona {
            lines.push("Persona:".to_string());
            lines.push(indent(p, "\t"));
        }
        lines.push("Instructions:".to_string());
        lines.push(indent(&self.instructions.to_string(), "\t"));
        f.write_str(&lines.join("\n"))
    }
}

/// What a task's reward is made of (`RewardType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum RewardType {
    /// Final database equals the gold one.
    #[serde(rename = "DB")]
    Db,
    /// Every gold action was called.
    #[serde(rename = "ACTION")]
    Action,
    /// Every `communicate_info` string was said.
    #[serde(rename = "COMMUNICATE")]
    Communicate,
    /// Environment assertions (not used by airline/retail).
    #[serde(rename = "ENV_ASSERTION")]
    EnvAssertion,
    /// Natural-language assertions judged by an LLM (not used here).
    #[serde(rename = "NL_ASSERTION")]
    NlAssertion,
}

impl RewardType {
    /// The name τ² writes.
    pub fn as_str(self) -> &'static str {
        match self {
            RewardType::Db => "DB",
            RewardType::Action => "ACTION",
            RewardType::Communicate => "COMMUNICATE",
            RewardType::EnvAssertion => "ENV_ASSERTION",
            RewardType::NlAssertion => "NL_ASSERTION",
        }
    }
}

fn default_basis() -> Vec<RewardType> {
    vec![RewardType::Db, RewardType::Communicate]
}

/// `EvaluationCriteria`.
#[derive(Clone, Debug, Deserialize)]
pub struct EvaluationCriteria {
    /// Gold actions.
    #[serde(default)]
    pub actions: Option<Vec<Action>>,
    /// Strings the agent must say.
    #[serde(default)]
    pub communicate_info: Option<Vec<String>>,
    /// Natural-language assertions (reported, not scored).
    #[serde(default)]
    pub nl_assertions: Option<Vec<String>>,
    /// Environment assertions; must be absent (unsupported).
    #[serde(default)]
    pub env_assertions: Option<serde_json::Value>,
    /// Reward basis (default `[DB, COMMUNICATE]`).
    #[serde(default = "default_basis")]
    pub reward_basis: Vec<RewardType>,
}

/// A task as stored in `tasks.json`.
#[derive(Clone, Debug, Deserialize)]
pub struct RawTask {
    /// Task id.
    pub id: String,
    /// `user_scenario`.
    pub user_scenario: UserScenario,
    /// `initial_state`; must be null (unsupported otherwise).
    #[serde(default)]
    pub initial_state: Option<serde_json::Value>,
    /// `evaluation_criteria`.
    #[serde(default)]
    pub evaluation_criteria: Option<EvaluationCriteria>,
}

/// The hidden part of a task: everything only the evaluator and the user
/// simulator may read.
#[derive(Debug)]
pub struct Criteria {
    /// The user simulator's scenario.
    pub user_scenario: UserScenario,
    /// Evaluation criteria (`None`: every finished episode scores 1).
    pub evaluation: Option<EvaluationCriteria>,
}

/// A loaded task: its visible and hidden halves.
#[derive(Clone, Debug)]
pub struct Task {
    /// What the agent may see.
    pub view: VisibleTask,
    /// The oracle payload.
    pub criteria: Arc<Criteria>,
    /// The user simulator's system prompt, formatted on first use and then
    /// shared by every episode of the task.
    pub user_prompt: std::sync::OnceLock<Arc<str>>,
}

/// Why a `tasks.json` cannot be used (the caller names the file).
#[derive(Debug, thiserror::Error)]
pub enum TasksError {
    /// It is not a list of tasks.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A task has an initial state.
    #[error("task {task} has an initial_state, which is not supported")]
    InitialState {
        /// The task's id.
        task: String,
    },
    /// A task has environment assertions.
    #[error("task {task} has env_assertions, which are not supported")]
    EnvAssertions {
        /// The task's id.
        task: String,
    },
    /// A task is rewarded by environment or natural-language assertions.
    #[error("task {task} has an unsupported reward basis")]
    RewardBasis {
        /// The task's id.
        task: String,
    },
}

/// Parses `tasks.json`, rejecting features these environments do not
/// implement (initial states, env/NL-assertion reward bases), so that a
/// changed data set fails loudly instead of scoring wrongly.
pub fn parse_tasks(domain: &str, policy: &Arc<str>, bytes: &[u8]) -> Result<Vec<Task>, TasksError> {
    let raw: Vec<RawTask> = serde_json::from_slice(bytes)?;
    raw.into_iter()
        .map(|t| {
            if t.initial_state.as_ref().is_some_and(|s| !s.is_null()) {
                return Err(TasksError::InitialState { task: t.id });
            }
            if let Some(c) = &t.evaluation_criteria {
                if c.env_assertions.as_ref().is_some_and(|a| !a.is_null()) {
                    return Err(TasksError::EnvAssertions { task: t.id });
                }
                if c.reward_basis
                    .iter()
                    .any(|b| matches!(b, RewardType::EnvAssertion | RewardType::NlAssertion))
                {
                    return Err(TasksError::RewardBasis { task: t.id });
                }
            }
            Ok(Task {
                view: VisibleTask {
                    id: t.id.clone(),
                    domain: domain.to_string(),
                    policy: policy.clone(),
                    first_user_message: None,
                    agent_greeting: super::GREETING,
                },
                user_prompt: std::sync::OnceLock::new(),
                criteria: Arc::new(Criteria {
                    user_scenario: t.user_scenario,
                    evaluation: t.evaluation_criteria,
                }),
            })
        })
        .collect()
}

/// The user script a scenario's instructions give (structured fields, or
/// the whole text as the reason for the call).
pub(crate) fn script_from_scenario(task_id: &str, scenario: &UserScenario) -> UserScript {
    let mut script = UserScript {
        task_id: task_id.to_string(),
        ..Default::default()
    };
    match &scenario.instructions {
        Instructions::Structured {
            reason_for_call,
            known_info,
            unknown_info,
            task_instructions,
            ..
        } => {
            script.reason_for_call = reason_for_call.clone();
            script.known_info = known_info.clone();
            script.unknown_info = unknown_info.clone();
            script.task_instructions = task_instructions.clone();
        }
        Instructions::Text(t) => script.reason_for_call = t.clone(),
    }
    script
}

impl TaskOracle for Criteria {
    fn nl_assertions(&self) -> Vec<String> {
        self.evaluation
            .as_ref()
            .and_then(|e| e.nl_assertions.clone())
            .unwrap_or_default()
    }

    fn user_scenario(&self) -> String {
        self.user_scenario.to_string()
    }

    fn user_script(&self, task_id: &str) -> UserScript {
        script_from_scenario(task_id, &self.user_scenario)
    }

    fn gold_steps(&self) -> (Vec<ToolCall>, Vec<String>) {
        let eval = self.evaluation.as_ref();
        let actions = eval
            .and_then(|e| e.actions.as_ref())
            .map(|actions| {
                actions
                    .iter()
                    .filter(|a| a.requestor == "assistant")
                    .map(|a| {
                        ToolCall::agent(
                            a.name.clone(),
                            serde_json::Value::Object(a.arguments.clone()),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let communicate = eval
            .and_then(|e| e.communicate_info.clone())
            .unwrap_or_default();
        (actions, communicate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_text_matches_python_str() {
        let s: UserScenario = serde_json::from_value(serde_json::json!({
            "persona": null,
            "instructions": {"domain": "airline", "reason_for_call": "a\n\nb", "known_info": "k",
                             "unknown_info": null, "task_instructions": "t"}
        }))
        .unwrap();
        assert_eq!(
            s.to_string(),
            "Instructions:\n\tDomain: airline\n\tReason for call:\n\t\ta\n\n\t\tb\n\tKnown info:\n\t\tk\n\tTask instructions:\n\t\tt"
        );
    }
}

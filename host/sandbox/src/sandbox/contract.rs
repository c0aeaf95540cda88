//! Contract checks the host applies to every hook answer. A harness may be
//! buggy or hostile; these checks make sure whatever it returns is something
//! the agent loop can act on safely.

use std::collections::BTreeSet;

use super::bindings::{
    ActionDecision, AgentAction, ContractOutput, Guidance, Regulation, ToolCall,
};
use super::error::Violation;

/// The tool names of an episode, for validating calls a harness creates.
#[derive(Debug, Clone, Default)]
pub struct ToolNames(BTreeSet<String>);

impl ToolNames {
    /// The set of `names`.
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        ToolNames(names.into_iter().map(str::to_string).collect())
    }

    /// Whether `name` is one of the episode's tools.
    pub fn contains(&self, name: &str) -> bool {
        self.0.contains(name)
    }
}

/// Check a call a harness wants to run: an existing tool, a non-empty id and
/// arguments that parse as a JSON object.
pub fn check_call(call: &ToolCall, tools: &ToolNames) -> Result<(), Violation> {
    if call.id.is_empty() {
        return Err(Violation::EmptyCallId);
    }
    if !tools.contains(&call.name) {
        return Err(Violation::UnknownTool {
            tool: call.name.clone(),
        });
    }
    // A call the harness writes runs in the environment after the hook has
    // returned, outside its deadline: bound its size as the env view does.
    let cap = super::MAX_TOOL_ARGUMENT_BYTES;
    if call.arguments.len() > cap {
        return Err(Violation::ArgumentsTooLarge {
            tool: call.name.clone(),
            bytes: call.arguments.len(),
            cap,
        });
    }
    match serde_json::from_str::<serde_json::Value>(&call.arguments) {
        Ok(serde_json::Value::Object(_)) => Ok(()),
        Ok(other) => Err(Violation::ArgumentsNotObject {
            tool: call.name.clone(),
            reason: format!("got {}", super::host_state::json_kind(&other)),
        }),
        Err(e) => Err(Violation::ArgumentsNotObject {
            tool: call.name.clone(),
            reason: e.to_string(),
        }),
    }
}

/// Cap on the items of any list a hook returns (guidance blocks, realized
/// calls, rewritten descriptions): a list of a million empty strings costs
/// the host even when its byte count is small.
pub const MAX_LIST_ITEMS: usize = 256;

fn check_items(items: usize) -> Result<(), Violation> {
    if items > MAX_LIST_ITEMS {
        Err(Violation::TooManyItems {
            items,
            cap: MAX_LIST_ITEMS,
        })
    } else {
        Ok(())
    }
}

fn check_size(bytes: usize, cap: usize) -> Result<(), Violation> {
    if bytes > cap {
        Err(Violation::OutputTooLarge { bytes, cap })
    } else {
        Ok(())
    }
}

fn call_bytes(c: &ToolCall) -> usize {
    c.id.len() + c.name.len() + c.arguments.len()
}

pub fn check_contract(
    out: &ContractOutput,
    tools: &ToolNames,
    cap: usize,
) -> Result<(), Violation> {
    check_items(out.tool_descriptions.len())?;
    let bytes = out.system_prompt.len()
        + out
            .tool_descriptions
            .iter()
            .map(|d| d.name.len() + d.description.len())
            .sum::<usize>();
    check_size(bytes, cap)?;
    for d in &out.tool_descriptions {
        if !tools.contains(&d.name) {
            return Err(Violation::UnknownToolDescription {
                tool: d.name.clone(),
            });
        }
    }
    Ok(())
}

pub fn check_skills(out: &[Guidance], cap: usize) -> Result<(), Violation> {
    check_items(out.len())?;
    check_size(out.iter().map(|g| g.title.len() + g.text.len()).sum(), cap)
}

pub fn check_decision(
    action: &AgentAction,
    decision: &ActionDecision,
    tools: &ToolNames,
    cap: usize,
) -> Result<(), Violation> {
    let action_kind = match action {
        AgentAction::Call(_) => "call",
        AgentAction::Text(_) => "text",
    };
    match (decision, action) {
        (ActionDecision::Proceed, _) => Ok(()),
        (ActionDecision::Block(text), _) => check_size(text.len(), cap),
        (ActionDecision::Execute(call), AgentAction::Call(_)) => {
            check_size(call_bytes(call), cap)?;
            check_call(call, tools)
        }
        (ActionDecision::Realize(calls), AgentAction::Text(_)) => {
            check_items(calls.len())?;
            check_size(calls.iter().map(call_bytes).sum(), cap)?;
            if calls.is_empty() {
                return Err(Violation::EmptyRealization);
            }
            calls.iter().try_for_each(|c| check_call(c, tools))
        }
        (ActionDecision::Execute(_), _) => Err(Violation::DecisionForWrongAction {
            decision: "execute",
            action: action_kind,
        }),
        (ActionDecision::Realize(_), _) => Err(Violation::DecisionForWrongAction {
            decision: "realize",
            action: action_kind,
        }),
    }
}

pub fn check_regulation(r: &Regulation, tools: &ToolNames, cap: usize) -> Result<(), Violation> {
    match r {
        Regulation::Continue => Ok(()),
        Regulation::Annotate(t) | Regulation::Inject(t) | Regulation::Stop(t) => {
            check_size(t.len(), cap)
        }
        Regulation::ForceCall(call) => {
            check_size(call_bytes(call), cap)?;
            check_call(call, tools)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> ToolNames {
        ToolNames::new(["get_order_details", "cancel_pending_order"])
    }

    fn call(name: &str, args: &str) -> ToolCall {
        ToolCall {
            id: "c1".into(),
            name: name.into(),
            arguments: args.into(),
        }
    }

    #[test]
    fn calls_must_name_known_tools_with_object_arguments() {
        assert_eq!(
            check_call(&call("get_order_details", "{}"), &tools()),
            Ok(())
        );
        assert!(matches!(
            check_call(&call("rm_rf", "{}"), &tools()),
            Err(Violation::UnknownTool { .. })
        ));
        assert!(matches!(
            check_call(&call("get_order_details", "[1]"), &tools()),
            Err(Violation::ArgumentsNotObject { .. })
        ));
        assert!(matches!(
            check_call(&call("get_order_details", "{not json"), &tools()),
            Err(Violation::ArgumentsNotObject { .. })
        ));
        let mut c = call("get_order_details", "{}");
        c.id.clear();
        assert_eq!(check_call(&c, &tools()), Err(Violation::EmptyCallId));
    }

    #[test]
    fn decisions_must_fit_the_action() {
        let text = AgentAction::Text("hi".into());
        let proposed = AgentAction::Call(call("get_order_details", "{}"));
        let exec = ActionDecision::Execute(call("get_order_details", "{}"));
        let realize = ActionDecision::Realize(vec![call("get_order_details", "{}")]);
        assert_eq!(check_decision(&proposed, &exec, &tools(), 1000), Ok(()));
        assert_eq!(check_decision(&text, &realize, &tools(), 1000), Ok(()));
        assert!(check_decision(&text, &exec, &tools(), 1000).is_err());
        assert!(check_decision(&proposed, &realize, &tools(), 1000).is_err());
        assert_eq!(
            check_decision(&text, &ActionDecision::Realize(vec![]), &tools(), 1000),
            Err(Violation::EmptyRealization)
        );
        assert!(matches!(
            check_decision(&text, &ActionDecision::Block("x".repeat(11)), &tools(), 10),
            Err(Violation::OutputTooLarge { bytes: 11, cap: 10 })
        ));
    }

    #[test]
    fn lists_are_capped_by_count() {
        let many = vec![
            Guidance {
                title: String::new(),
                text: String::new(),
            };
            MAX_LIST_ITEMS + 1
        ];
        assert!(matches!(
            check_skills(&many, usize::MAX),
            Err(Violation::TooManyItems { .. })
        ));
        assert_eq!(check_skills(&many[..MAX_LIST_ITEMS], usize::MAX), Ok(()));
    }

    #[test]
    fn regulation_force_call_is_checked() {
        assert!(
            check_regulation(&Regulation::ForceCall(call("nope", "{}")), &tools(), 100).is_err()
        );
        assert_eq!(
            check_regulation(&Regulation::Inject("note".into()), &tools(), 100),
            Ok(())
        );
    }
}

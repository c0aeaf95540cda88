//! Every conversion between the layers' boundary types, in one place.
//!
//! Each concept has one type per layer: the environment's
//! ([`ecdysis_env::ToolSpec`], [`ecdysis_env::ToolCall`]: JSON values), the
//! model API's ([`ecdysis_model::ToolCall`]: an id and arguments as text) and
//! the WIT world's ([`ecdysis_sandbox::sandbox::ToolSpec`], [`ecdysis_sandbox::sandbox::ToolCall`]:
//! generated from `wit/`). The agent loop is where they meet, so the
//! conversions live here instead of being hand-copied at each use.

use ecdysis_env as env;
use ecdysis_model as model;
use ecdysis_sandbox::sandbox;

/// A tool as the WIT world declares it.
pub fn wit_tool(t: &env::ToolSpec) -> sandbox::ToolSpec {
    sandbox::ToolSpec {
        name: t.name.clone(),
        description: t.description.clone(),
        parameters: t.parameters_text().to_string(),
        mutates: t.mutates,
    }
}

/// A call the model made, as the WIT world carries it.
pub fn wit_call(c: &model::ToolCall) -> sandbox::ToolCall {
    sandbox::ToolCall {
        id: c.id.clone(),
        name: c.name.clone(),
        arguments: c.arguments.clone(),
    }
}

/// A call the harness wrote (realized, rewritten or forced), as the model
/// API carries it, under the id the host assigned.
pub fn model_call(c: &sandbox::ToolCall, id: String) -> model::ToolCall {
    model::ToolCall {
        id,
        name: c.name.clone(),
        arguments: c.arguments.clone(),
    }
}

/// A domain's tools as the WIT world declares them.
pub fn wit_tools(domain: &dyn env::Domain) -> Vec<sandbox::ToolSpec> {
    domain.tools().iter().map(wit_tool).collect()
}

/// A call as the environment runs it: the arguments text parsed as JSON
/// (text that is not JSON stays a string, which the environment answers
/// with an error result, as it would any malformed call).
pub fn env_call(name: &str, arguments: &str) -> env::ToolCall {
    env::ToolCall::agent(
        name,
        serde_json::from_str(arguments)
            .unwrap_or_else(|_| serde_json::Value::String(arguments.to_string())),
    )
}

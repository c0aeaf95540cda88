//! The read-only environment view a harness may import.
//!
//! The sandbox does not know any benchmark: the agent loop hands each episode
//! a [`ReadOnlyEnv`], and the host enforces read-only-ness itself (it asks
//! whether a tool mutates *before* calling it), so a buggy adapter cannot let a
//! harness change state.

use std::collections::BTreeMap;

/// The result of a read-only tool call, as the model would see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewOutput {
    /// The text the model would see.
    pub content: String,
    /// True when the tool reported an error.
    pub error: bool,
}

/// An environment's read-only face, as one episode's harness sees it.
pub trait ReadOnlyEnv: Send {
    /// Whether the tool mutates state; `None` when no such tool exists.
    fn tool_mutates(&self, name: &str) -> Option<bool>;
    /// Run a tool the host has already checked to be read-only.
    fn call_read_only(
        &mut self,
        name: &str,
        arguments: &serde_json::Map<String, serde_json::Value>,
    ) -> ViewOutput;
}

/// A fixed table of read-only answers, for `check` and tests: each tool
/// answers the same text whatever the arguments.
#[derive(Debug, Clone, Default)]
pub struct StaticEnv {
    tools: BTreeMap<String, (bool, String)>,
}

impl StaticEnv {
    /// Declare a tool; `mutates` tools are listed but never answered.
    pub fn with_tool(mut self, name: &str, mutates: bool, answer: &str) -> Self {
        self.tools
            .insert(name.to_string(), (mutates, answer.to_string()));
        self
    }
}

impl ReadOnlyEnv for StaticEnv {
    fn tool_mutates(&self, name: &str) -> Option<bool> {
        self.tools.get(name).map(|(m, _)| *m)
    }

    fn call_read_only(
        &mut self,
        name: &str,
        _arguments: &serde_json::Map<String, serde_json::Value>,
    ) -> ViewOutput {
        match self.tools.get(name) {
            Some((_, answer)) => ViewOutput {
                content: answer.clone(),
                error: false,
            },
            None => ViewOutput {
                content: format!("Error: unknown tool {name}"),
                error: true,
            },
        }
    }
}

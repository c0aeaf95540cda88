//! The harness's read-only view of an episode's environment.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use ecdysis_env::Environment;
use ecdysis_sandbox::sandbox::{ReadOnlyEnv, ViewOutput};

/// An environment shared between whoever mutates it (the agent loop, a
/// replay) and a harness's read-only view of it.
pub type SharedEnv = Arc<Mutex<Box<dyn Environment>>>;

/// A harness's read-only view over a [`SharedEnv`]. The sandbox refuses
/// mutating tools itself, using `mutates`, before a call gets here.
pub struct SharedEnvView {
    env: SharedEnv,
    mutates: BTreeMap<String, bool>,
}

impl SharedEnvView {
    /// `tools` names every tool with whether it mutates state.
    pub fn new(env: SharedEnv, tools: impl IntoIterator<Item = (String, bool)>) -> Self {
        SharedEnvView {
            env,
            mutates: tools.into_iter().collect(),
        }
    }
}

impl ReadOnlyEnv for SharedEnvView {
    fn tool_mutates(&self, name: &str) -> Option<bool> {
        self.mutates.get(name).copied()
    }

    fn call_read_only(
        &mut self,
        name: &str,
        arguments: &serde_json::Map<String, serde_json::Value>,
    ) -> ViewOutput {
        let mut env = self.env.lock().unwrap_or_else(|p| p.into_inner());
        let out = env.call(name, &serde_json::Value::Object(arguments.clone()));
        ViewOutput {
            content: out.content,
            error: out.error,
        }
    }
}

//! Read-only access to the environment: the trait the rules use, and a
//! per-decision reader that only calls tools the contract declared
//! read-only (a mutating tool through the view would end the hook), caches
//! answers and parses JSON.

use std::collections::BTreeMap;
use std::rc::Rc;

use serde_json::Value;

use crate::types::ToolSpec;

/// The host's env view (`ecdysis:harness/env-view`), or a test double.
pub trait EnvView {
    /// Run a read-only tool: the text the model would see, or the error.
    fn read(&mut self, tool: &str, arguments: &str) -> Result<String, String>;
}

/// A view with no tools (every read fails).
pub struct NoView;

impl EnvView for NoView {
    fn read(&mut self, tool: &str, _arguments: &str) -> Result<String, String> {
        Err(format!("no view for {tool}"))
    }
}

/// The episode's tools as the contract declared them.
#[derive(Debug, Clone, Default)]
pub struct Tools {
    specs: Vec<ToolSpec>,
    /// Each tool's schema, parsed on first use: realization reads the
    /// schema of every call, and parsing it again each time was a large
    /// share of a call's fuel.
    schemas: Vec<std::cell::OnceCell<Option<Value>>>,
}

impl Tools {
    pub fn new(specs: Vec<ToolSpec>) -> Self {
        let schemas = specs.iter().map(|_| std::cell::OnceCell::new()).collect();
        Tools { specs, schemas }
    }

    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    pub fn names(&self) -> Vec<String> {
        self.specs.iter().map(|t| t.name.clone()).collect()
    }

    pub fn get(&self, name: &str) -> Option<&ToolSpec> {
        self.specs.iter().find(|t| t.name == name)
    }

    pub fn knows(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Declared and read-only: safe to call through the view.
    pub fn readable(&self, name: &str) -> bool {
        self.get(name).is_some_and(|t| !t.mutates)
    }

    pub fn mutates(&self, name: &str) -> bool {
        self.get(name).is_some_and(|t| t.mutates)
    }

    /// The JSON Schema of a tool's arguments.
    pub fn schema(&self, name: &str) -> Option<&Value> {
        let i = self.specs.iter().position(|t| t.name == name)?;
        self.schemas[i]
            .get_or_init(|| serde_json::from_str(&self.specs[i].parameters).ok())
            .as_ref()
    }
}

/// Reads for one decision: cached, restricted to read-only tools.
pub struct Reads<'a> {
    view: &'a mut dyn EnvView,
    tools: &'a Tools,
    cache: BTreeMap<(String, String), Result<String, String>>,
    /// Parsed answers: several gates of one decision read the same order
    /// or product, and parsing its JSON again cost more fuel than the read.
    /// Shared, not copied: a deep copy of a product with its variants for
    /// every gate that looked at it was most of a write call's fuel.
    parsed: BTreeMap<(String, String), Option<Rc<Value>>>,
}

impl<'a> Reads<'a> {
    pub fn new(view: &'a mut dyn EnvView, tools: &'a Tools) -> Self {
        Reads {
            view,
            tools,
            cache: BTreeMap::new(),
            parsed: BTreeMap::new(),
        }
    }

    /// The text a read-only tool answers; `None` when the tool is not a
    /// declared read-only tool or the call failed.
    pub fn text(&mut self, tool: &str, arguments: Value) -> Option<String> {
        let key = (tool.to_string(), arguments.to_string());
        self.answer(key)
    }

    /// The answer parsed as JSON.
    pub fn json(&mut self, tool: &str, arguments: Value) -> Option<Rc<Value>> {
        let key = (tool.to_string(), arguments.to_string());
        if let Some(done) = self.parsed.get(&key) {
            return done.clone();
        }
        let value = self
            .answer(key.clone())
            .and_then(|t| serde_json::from_str(&t).ok())
            .map(Rc::new);
        self.parsed.insert(key, value.clone());
        value
    }

    /// The cached answer to (tool, arguments text), read on first need.
    fn answer(&mut self, key: (String, String)) -> Option<String> {
        if !self.tools.readable(&key.0) {
            return None;
        }
        if !self.cache.contains_key(&key) {
            let answer = self.view.read(&key.0, &key.1);
            self.cache.insert(key.clone(), answer);
        }
        self.cache.get(&key).and_then(|r| r.as_ref().ok()).cloned()
    }
}

#[cfg(test)]
pub mod mock {
    //! A scripted view for unit tests: answers by (tool, arguments).

    use super::EnvView;
    use serde_json::Value;

    #[derive(Default)]
    pub struct MockView {
        answers: Vec<(String, Value, Result<String, String>)>,
        pub calls: Vec<(String, String)>,
    }

    impl MockView {
        pub fn new() -> Self {
            Self::default()
        }

        /// Answer `tool` called with exactly `args`.
        pub fn on(mut self, tool: &str, args: Value, answer: &str) -> Self {
            self.answers
                .push((tool.to_string(), args, Ok(answer.to_string())));
            self
        }

        pub fn on_json(self, tool: &str, args: Value, answer: Value) -> Self {
            self.on(tool, args, &answer.to_string())
        }

        pub fn fails(mut self, tool: &str, args: Value, error: &str) -> Self {
            self.answers
                .push((tool.to_string(), args, Err(error.to_string())));
            self
        }
    }

    impl EnvView for MockView {
        fn read(&mut self, tool: &str, arguments: &str) -> Result<String, String> {
            self.calls.push((tool.to_string(), arguments.to_string()));
            let args: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
            self.answers
                .iter()
                .find(|(t, a, _)| t == tool && *a == args)
                .map(|(_, _, r)| r.clone())
                .unwrap_or_else(|| Err(format!("Error: no mock answer for {tool} {arguments}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::mock::MockView;
    use super::*;
    use serde_json::json;

    fn tools() -> Tools {
        Tools::new(vec![ToolSpec {
            name: "get_order_details".into(),
            description: String::new(),
            parameters: "{}".into(),
            mutates: false,
        }])
    }

    #[test]
    fn one_decision_reads_and_parses_each_answer_once() {
        let args = json!({"order_id": "#W1"});
        let mut view = MockView::new()
            .on_json(
                "get_order_details",
                args.clone(),
                json!({"status": "pending"}),
            )
            .fails(
                "get_order_details",
                json!({"order_id": "#W2"}),
                "Error: not found",
            );
        let tools = tools();
        let mut reads = Reads::new(&mut view, &tools);
        let first = reads.json("get_order_details", args.clone());
        let again = reads.json("get_order_details", args.clone());
        assert_eq!(first.as_deref(), Some(&json!({"status": "pending"})));
        assert_eq!(again, first);
        assert_eq!(
            reads.text("get_order_details", args),
            Some(r#"{"status":"pending"}"#.to_string())
        );
        assert_eq!(
            reads.json("get_order_details", json!({"order_id": "#W2"})),
            None
        );
        assert_eq!(
            reads.json("get_order_details", json!({"order_id": "#W2"})),
            None
        );
        assert_eq!(
            reads.json("update_order", json!({})),
            None,
            "not a declared read"
        );
        drop(reads);
        assert_eq!(
            view.calls.len(),
            2,
            "one host read per distinct call: {:?}",
            view.calls
        );
    }
}

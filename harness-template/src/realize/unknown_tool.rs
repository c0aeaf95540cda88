//! Why: a call to a tool that does not exist can only fail; answering it
//! with the list of real tool names (and the closest one) saves the
//! environment error and tells the model the exact names to use.

use crate::text::{say, words};
use crate::view::Tools;

/// The closest real tool by shared name words, if any word is shared.
pub fn closest(name: &str, tools: &Tools) -> Option<String> {
    let parts = |s: &str| -> Vec<String> { words(&s.replace(['_', '-', '.'], " ")) };
    let wanted = parts(name);
    tools
        .names()
        .into_iter()
        .map(|t| {
            let shared = parts(&t).iter().filter(|w| wanted.contains(w)).count();
            (shared, t)
        })
        .filter(|(shared, _)| *shared > 0)
        .max_by_key(|(shared, _)| *shared)
        .map(|(_, t)| t)
}

fn values(name: &str, tools: &Tools) -> Vec<(&'static str, String)> {
    let suggestion = closest(name, tools)
        .map(|t| say("unknown_tool_suggestion", &[("tool", t)]))
        .unwrap_or_default();
    vec![
        ("name", name.to_string()),
        ("tools", tools.names().join(", ")),
        ("suggestion", suggestion),
    ]
}

/// Feedback for a structured call to an unknown tool.
pub fn feedback(name: &str, tools: &Tools) -> String {
    say("unknown_tool", &values(name, tools))
}

/// Feedback for a call written as text that names an unknown tool.
pub fn text_feedback(name: &str, tools: &Tools) -> String {
    say("text_call_unknown_tool", &values(name, tools))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ToolSpec;

    #[test]
    fn lists_the_exact_names_and_the_closest() {
        let tools = Tools::new(
            ["get_order_details", "get_user_details"]
                .iter()
                .map(|n| ToolSpec {
                    name: n.to_string(),
                    description: String::new(),
                    parameters: "{}".into(),
                    mutates: false,
                })
                .collect(),
        );
        let f = feedback("fetch_order", &tools);
        assert!(f.contains("exact tool names"), "{f}");
        assert!(f.contains("get_order_details, get_user_details"));
        assert!(f.contains("Did you mean `get_order_details`?"), "{f}");
        assert!(!feedback("zzz", &tools).contains("Did you mean"));
    }
}

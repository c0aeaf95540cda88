//! Why: models call plausible wrong names (`get_order_info`,
//! `cancel_order`); when the name is a known alias of exactly one real tool
//! (or the same name with other case/separators), running the real tool is
//! what the model meant, and an error would only cost a turn.

use crate::tables::TOOL_ALIASES;
use crate::text::{domain_matches, squash_name};
use crate::view::Tools;

/// The real tool an unknown name stands for, if unambiguous.
pub fn resolve(domain: &str, name: &str, tools: &Tools) -> Option<String> {
    if tools.knows(name) {
        return Some(name.to_string());
    }
    let trimmed = name.trim();
    let by_alias = TOOL_ALIASES
        .iter()
        .filter(|a| domain_matches(a.domain, domain) && a.alias == trimmed)
        .map(|a| a.tool)
        .find(|t| tools.knows(t));
    if let Some(real) = by_alias {
        return Some(real.to_string());
    }
    // Same letters, other case or separators: `GetOrderDetails`,
    // `functions.get_order_details`.
    let stripped = trimmed.rsplit(['.', '/', ':']).next().unwrap_or(trimmed);
    let squashed = squash_name(stripped);
    let matches: Vec<String> = tools
        .names()
        .into_iter()
        .filter(|t| squash_name(t) == squashed)
        .collect();
    if matches.len() == 1 {
        return matches.into_iter().next();
    }
    // An alias written with other case/separators.
    TOOL_ALIASES
        .iter()
        .filter(|a| domain_matches(a.domain, domain) && squash_name(a.alias) == squashed)
        .map(|a| a.tool)
        .find(|t| tools.knows(t))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ToolSpec;

    fn tools(names: &[&str]) -> Tools {
        Tools::new(
            names
                .iter()
                .map(|n| ToolSpec {
                    name: n.to_string(),
                    description: String::new(),
                    parameters: "{}".into(),
                    mutates: false,
                })
                .collect(),
        )
    }

    #[test]
    fn aliases_resolve_to_existing_tools_only() {
        let t = tools(&["get_order_details", "cancel_pending_order"]);
        assert_eq!(
            resolve("retail", "get_order_info", &t).as_deref(),
            Some("get_order_details")
        );
        assert_eq!(
            resolve("retail", "cancel_order", &t).as_deref(),
            Some("cancel_pending_order")
        );
        assert_eq!(
            resolve("retail", "GetOrderDetails", &t).as_deref(),
            Some("get_order_details")
        );
        assert_eq!(
            resolve("retail", "functions.get_order_details", &t).as_deref(),
            Some("get_order_details")
        );
        assert_eq!(
            resolve("retail", "Cancel-Order", &t).as_deref(),
            Some("cancel_pending_order")
        );
        // An alias of a tool this episode does not have, or of another domain.
        assert_eq!(resolve("retail", "get_product_info", &t), None);
        assert_eq!(resolve("airline", "cancel_order", &t), None);
        assert_eq!(resolve("retail", "delete_everything", &t), None);
    }
}

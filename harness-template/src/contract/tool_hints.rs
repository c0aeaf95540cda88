//! Why: the write tools' own descriptions omit the policy conditions that
//! agents most often violate (baggage allowance, payment limits,
//! cancellation eligibility, order status); stating them where the call is
//! made catches the mistake at the moment it would happen. Lookups get no
//! hints: hints there made agents over-scan.

use crate::tables::{TOOL_HINT_PREFIX, TOOL_HINTS};
use crate::text::domain_matches;
use crate::types::ToolSpec;

/// (tool, full new description) for every declared tool with a hint.
pub fn apply(domain: &str, tools: &[ToolSpec]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for tool in tools {
        let hints: Vec<&str> = TOOL_HINTS
            .iter()
            .filter(|h| h.tool == tool.name && domain_matches(h.domain, domain))
            .map(|h| h.hint)
            .collect();
        if hints.is_empty() {
            continue;
        }
        let description = format!(
            "{}\n\n{} {}",
            tool.description.trim_end(),
            TOOL_HINT_PREFIX,
            hints.join(" ")
        );
        out.push((tool.name.clone(), description));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, mutates: bool) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: "Original.".into(),
            parameters: "{}".into(),
            mutates,
        }
    }

    #[test]
    fn only_write_tools_with_a_hint_change() {
        let tools = [
            tool("get_order_details", false),
            tool("cancel_pending_order", true),
            tool("book_reservation", true),
        ];
        let out = apply("retail", &tools);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].0, "cancel_pending_order");
        assert!(out[0].1.starts_with("Original.\n\nPolicy check:"));
        let out = apply("airline", &tools);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, "book_reservation");
    }

    #[test]
    fn no_hint_targets_a_lookup() {
        for h in TOOL_HINTS {
            for prefix in ["get_", "find_", "search_", "list_"] {
                assert!(!h.tool.starts_with(prefix), "hint on lookup {}", h.tool);
            }
        }
    }
}

//! Why: models slip on the interface (text-written calls, invented tool
//! names, dropped `#`, quoted numbers, repeated failing calls, skipped
//! lookups) in ways the policy never mentions; stating each fix once in the
//! system prompt prevents most of them before realize has to repair them.

use crate::tables::{PROMPT_RULES, PROMPT_RULES_TITLE};
use crate::text::domain_matches;

/// The system prompt with the domain's rules appended as one block.
pub fn apply(domain: &str, system_prompt: &str) -> String {
    let rules: Vec<String> = PROMPT_RULES
        .iter()
        .filter(|r| domain_matches(r.domain, domain))
        .map(|r| format!("- {}", r.text))
        .collect();
    if rules.is_empty() {
        return system_prompt.to_string();
    }
    format!(
        "{}\n\n{}\n{}",
        system_prompt.trim_end(),
        PROMPT_RULES_TITLE,
        rules.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_appended_per_domain() {
        let retail = apply("retail", "POLICY");
        assert!(retail.starts_with("POLICY\n\n## Tool-use rules"));
        assert!(retail.contains("structured tool calls"));
        assert!(retail.contains("leading '#'"));
        assert!(!retail.contains("get_reservation_details"));
        let airline = apply("airline", "POLICY");
        assert!(airline.contains("get_reservation_details"));
        assert!(!airline.contains("leading '#'"));
    }
}

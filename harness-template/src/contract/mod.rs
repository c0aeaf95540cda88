//! Environment contract: what the model is shown before the episode.
//!
//! Rules (one per file):
//! - [`interface_rules`]: state the fixes for systematic interface slips in
//!   the system prompt, once.
//! - [`tool_hints`]: append policy checks to the descriptions of the write
//!   tools where the policy is easy to violate (never to lookups).
//! - [`clock`]: read "now" from the policy, for time-based gates.

pub mod clock;
pub mod interface_rules;
pub mod tool_hints;

use crate::types::{ContractOut, ToolSpec};

/// The contract for `domain` (short name).
pub fn apply(domain: &str, system_prompt: &str, tools: &[ToolSpec]) -> ContractOut {
    ContractOut {
        system_prompt: interface_rules::apply(domain, system_prompt),
        descriptions: tool_hints::apply(domain, tools),
    }
}

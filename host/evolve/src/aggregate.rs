//! Cross-instance aggregation: group failures by a signature and keep the
//! groups that recur across tasks as the primary evidence.
//!
//! The signature is finer than "end reason + failed reward components": it
//! adds the first failing tool with its error class, whether an identical
//! failing call was repeated, whether a call was written as text, and which
//! harness decisions fired.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::records::FailureRecord;

/// A failure signature.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Signature {
    /// The episode's end reason (`max_steps`, `agent_stop`, ...).
    pub end: String,
    /// The reward components that failed (`db`, `communicate`), in that order.
    pub failed: Vec<String>,
    /// `tool: error class` of the first failing or blocked call.
    pub first_failure: Option<String>,
    /// An identical failing call (same tool and arguments) was made twice or
    /// more.
    pub repeated_failing_call: bool,
    /// The agent wrote a tool call as text instead of a structured call.
    pub text_call: bool,
    /// The distinct harness interventions, as `hook:decision`, sorted.
    pub harness: Vec<String>,
}

impl Signature {
    /// The signature of one failure record.
    pub fn of(r: &FailureRecord) -> Signature {
        let mut failed = Vec::new();
        if r.db_ok == Some(false) {
            failed.push("db".into());
        }
        if r.communicate_ok == Some(false) {
            failed.push("communicate".into());
        }
        if r.env_ok == Some(false) {
            failed.push("env_assertion".into());
        }
        let first_failure = r
            .steps
            .iter()
            .find(|s| s.error || s.blocked)
            .map(|s| format!("{}: {}", s.name, error_class(&s.result)));
        let mut seen = BTreeSet::new();
        let repeated_failing_call = r
            .steps
            .iter()
            .filter(|s| s.error)
            .any(|s| !seen.insert((s.name.clone(), s.arguments.clone())));
        let text_call = r.agent_texts.iter().any(|t| looks_like_text_call(t));
        let harness: BTreeSet<String> = r.interventions.iter().cloned().collect();
        Signature {
            end: r.end.as_str().to_string(),
            failed,
            first_failure,
            repeated_failing_call,
            text_call,
            harness: harness.into_iter().collect(),
        }
    }

    /// The signature as one readable line (`max_steps | failed db | first
    /// failure ...`): the group's name in prompts and reports.
    pub fn key(&self) -> String {
        let mut parts = vec![self.end.clone()];
        if !self.failed.is_empty() {
            parts.push(format!("failed {}", self.failed.join("+")));
        }
        if let Some(f) = &self.first_failure {
            parts.push(format!("first failure {f}"));
        }
        if self.repeated_failing_call {
            parts.push("repeated failing call".into());
        }
        if self.text_call {
            parts.push("call written as text".into());
        }
        if !self.harness.is_empty() {
            parts.push(format!("harness {}", self.harness.join(",")));
        }
        parts.join(" | ")
    }
}

/// An error message with ids, numbers and quoted values replaced, so the
/// same failure on different tasks gets the same class.
pub fn error_class(result: &str) -> String {
    let text = result
        .trim_start_matches("[Blocked by the runtime harness]")
        .trim()
        .trim_start_matches("Error:")
        .trim();
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                for d in chars.by_ref() {
                    if d == c {
                        break;
                    }
                }
                out.push_str("<v>");
            }
            '#' | '0'..='9' => {
                while chars
                    .peek()
                    .is_some_and(|d| d.is_ascii_alphanumeric() || *d == '_')
                {
                    chars.next();
                }
                out.push_str("<n>");
            }
            _ => out.push(c.to_ascii_lowercase()),
        }
    }
    let words: Vec<&str> = out.split_whitespace().take(10).collect();
    words.join(" ")
}

/// An agent message that carries a tool call as text (a JSON object with a
/// name, or a `<tool_call>` tag).
pub fn looks_like_text_call(text: &str) -> bool {
    text.contains("<tool_call>")
        || (text.contains('{') && text.contains("\"name\"") && text.contains("\"arguments\""))
}

/// A group of failures sharing a signature.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailureGroup {
    /// What the group's failures share.
    pub signature: Signature,
    /// [`Signature::key`] of `signature`.
    pub key: String,
    /// The distinct tasks the failures come from, sorted.
    pub tasks: Vec<String>,
    /// Every failure of the group.
    pub records: Vec<FailureRecord>,
    /// Covers at least two distinct tasks: primary evidence.
    pub recurring: bool,
}

/// Group failures; recurring groups first, larger first.
pub fn aggregate(failures: &[FailureRecord]) -> Vec<FailureGroup> {
    let mut by: BTreeMap<Signature, Vec<FailureRecord>> = BTreeMap::new();
    for f in failures {
        by.entry(Signature::of(f)).or_default().push(f.clone());
    }
    let mut groups: Vec<FailureGroup> = by
        .into_iter()
        .map(|(signature, records)| {
            let tasks: BTreeSet<String> = records.iter().map(|r| r.task_id.clone()).collect();
            FailureGroup {
                key: signature.key(),
                recurring: tasks.len() >= 2,
                tasks: tasks.into_iter().collect(),
                signature,
                records,
            }
        })
        .collect();
    groups.sort_by(|a, b| {
        b.recurring
            .cmp(&a.recurring)
            .then(b.tasks.len().cmp(&a.tasks.len()))
            .then(a.key.cmp(&b.key))
    });
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_classes_ignore_ids_and_values() {
        assert_eq!(error_class("Error: Order not found"), "order not found");
        assert_eq!(
            error_class("Error: Tool 'get_order_info' not found."),
            error_class("Error: Tool 'cancel_order' not found.")
        );
        assert_eq!(
            error_class("Error: order #W123 is not pending"),
            error_class("Error: order #W999 is not pending")
        );
    }

    #[test]
    fn text_calls_are_recognised() {
        assert!(looks_like_text_call(
            "```json\n{\"name\": \"get_order_details\", \"arguments\": {}}\n```"
        ));
        assert!(!looks_like_text_call("Your order is on its way."));
    }
}

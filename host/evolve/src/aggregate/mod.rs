//! Cross-instance aggregation: group failures by their mechanism and keep
//! the groups that recur across tasks as the primary evidence.
//!
//! The key has two levels ([`crate::aggregate::mechanism`]): the mechanism (how the
//! episode ended, how its finishing call stood to the calls before it,
//! which reward components failed) and under it the detail (the class of
//! the last result, domain codes kept). Message wording, interventions,
//! calls written as text and repeats are attributes shown in the evidence,
//! never key fields: they differ task by task and would split one cause
//! into singletons.
//!
//! This is the aggregate stage of a round: an evaluation's episodes become
//! scrubbed [`failure_record`]s (what evolution may know of an episode),
//! each gets its [`mechanism`] and label (optionally a model's label too,
//! [`labeler`]), and the records are grouped here.

pub mod failure_record;
pub mod labeler;
pub mod mechanism;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use failure_record::FailureRecord;
use mechanism::{Finish, Label};

/// A failure's mechanism: the group key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Signature {
    /// The episode's end reason (`max_steps`, `agent_stop`, ...).
    pub end: String,
    /// How the finishing call stood to the calls before it.
    pub finish: Finish,
    /// The reward components that failed (`db`, `communicate`), in that order.
    pub failed: Vec<String>,
}

impl Signature {
    /// The mechanism of one failure record.
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
        if r.answer_ok == Some(false) {
            failed.push("answer".into());
        }
        Signature {
            end: r.end.as_str().to_string(),
            finish: Finish::of(r),
            failed,
        }
    }

    /// The mechanism as one readable line (`agent_stop | finished right
    /// after an error | failed db`): the group's name in prompts and
    /// reports.
    pub fn key(&self) -> String {
        let mut parts = vec![self.end.clone(), self.finish.as_str().to_string()];
        if !self.failed.is_empty() {
            parts.push(format!("failed {}", self.failed.join("+")));
        }
        parts.join(" | ")
    }
}

/// The detail of a failure under its mechanism: the class of the last
/// result it acted on (`error mysql 1064`, `ok empty`, `none`).
pub fn detail(r: &FailureRecord) -> String {
    format!("last result {}", mechanism::last_result(r))
}

/// The `tool: class` of the first failing or blocked call.
pub fn first_failure(r: &FailureRecord) -> Option<String> {
    r.steps
        .iter()
        .find(|s| s.error || s.blocked)
        .map(|s| format!("{}: {}", s.name, mechanism::class_of(s)))
}

/// An identical failing call (same tool and arguments) was made twice or
/// more.
pub fn repeated_failing_call(r: &FailureRecord) -> bool {
    let mut seen = BTreeSet::new();
    r.steps
        .iter()
        .filter(|s| s.error)
        .any(|s| !seen.insert((s.name.as_str(), s.arguments.as_str())))
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
    let mut prev = ' ';
    while let Some(c) = chars.next() {
        // A quote after a letter is an apostrophe (`doesn't`), not the
        // start of a quoted value.
        let opens_value = matches!(c, '\'' | '"') && !prev.is_alphanumeric();
        prev = c;
        match c {
            '\'' | '"' if opens_value => {
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

/// Failures of one mechanism that share a detail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DetailGroup {
    /// [`detail`] of the failures.
    pub detail: String,
    /// The distinct tasks, sorted.
    pub tasks: Vec<String>,
    /// Failing episodes with this detail.
    pub episodes: usize,
}

/// A group of failures sharing a mechanism.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailureGroup {
    /// What the group's failures share.
    pub signature: Signature,
    /// [`Signature::key`] of `signature`.
    pub key: String,
    /// Where a fix would live: the label most of the group's failures get.
    pub label: Label,
    /// Each failure's own label, in the order of `records`.
    #[serde(default)]
    pub labels: Vec<Label>,
    /// The distinct tasks the failures come from, sorted.
    pub tasks: Vec<String>,
    /// The failures by detail, larger first.
    pub details: Vec<DetailGroup>,
    /// Every failure of the group.
    pub records: Vec<FailureRecord>,
    /// Covers at least two distinct tasks: primary evidence.
    pub recurring: bool,
}

/// Group failures by mechanism; recurring groups first, larger first.
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
                label: majority_label(&signature, &records),
                labels: records
                    .iter()
                    .map(|r| Label::of(r, &signature.end, signature.finish))
                    .collect(),
                recurring: tasks.len() >= 2,
                tasks: tasks.into_iter().collect(),
                details: details(&records),
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

/// The label most of `records` get (ties: the first in label order).
fn majority_label(signature: &Signature, records: &[FailureRecord]) -> Label {
    let mut counts: BTreeMap<Label, usize> = BTreeMap::new();
    for r in records {
        *counts
            .entry(Label::of(r, &signature.end, signature.finish))
            .or_default() += 1;
    }
    let best = counts.values().copied().max().unwrap_or(0);
    counts
        .into_iter()
        .find(|(_, n)| *n == best)
        .map(|(l, _)| l)
        .unwrap_or_else(|| Label::of(&records[0], &signature.end, signature.finish))
}

fn details(records: &[FailureRecord]) -> Vec<DetailGroup> {
    let mut by: BTreeMap<String, (BTreeSet<String>, usize)> = BTreeMap::new();
    for r in records {
        let e = by.entry(detail(r)).or_default();
        e.0.insert(r.task_id.clone());
        e.1 += 1;
    }
    let mut out: Vec<DetailGroup> = by
        .into_iter()
        .map(|(detail, (tasks, episodes))| DetailGroup {
            detail,
            tasks: tasks.into_iter().collect(),
            episodes,
        })
        .collect();
    out.sort_by(|a, b| {
        b.tasks
            .len()
            .cmp(&a.tasks.len())
            .then(a.detail.cmp(&b.detail))
    });
    out
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
    fn an_apostrophe_is_not_a_quote() {
        assert_eq!(
            error_class("Table 'db.x' doesn't exist"),
            "table <v> doesn't exist"
        );
        assert_eq!(
            error_class("Table 'db.y' doesn't exist"),
            error_class("Table 'db.x' doesn't exist")
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

//! The offline diagnoser: groups → spec, by rules over the recorded error
//! texts and successful evidence, with no model. It only proposes changes
//! for interface failures it can see in the evidence (an unknown tool name,
//! an id missing its `#`, a number sent as a string, a repeated failing
//! call, a write tried before its lookup); failures without such a visible
//! cause (a wrong item, a stop one action early) get no rule, which is the
//! point: the harness should not contort itself for a model's own limits.

use std::collections::{BTreeMap, BTreeSet};

use crate::aggregate::failure_record::{FailureRecord, ToolStep};
use crate::aggregate::{FailureGroup, error_class};
use crate::code::TABLES_FILE;
use crate::diagnose::change_spec::{ChangeSpec, FailurePattern, Layer, ProposedChange, RuleEdit};

/// What the diagnoser may know about the environment: tool names and which
/// of them change state (agent-visible facts).
pub struct ToolFacts {
    /// Every tool name with whether it changes state.
    pub tools: Vec<(String, bool)>,
}

impl ToolFacts {
    fn exists(&self, name: &str) -> bool {
        self.tools.iter().any(|(n, _)| n == name)
    }

    fn mutates(&self, name: &str) -> bool {
        self.tools.iter().any(|(n, m)| n == name && *m)
    }

    /// The real tool an unknown name most plausibly means: the one sharing
    /// the most `_`-separated words, ties broken by name.
    fn closest(&self, alias: &str) -> Option<String> {
        let words: BTreeSet<&str> = alias.split('_').collect();
        self.tools
            .iter()
            .map(|(n, _)| (n.split('_').filter(|w| words.contains(w)).count(), n))
            .filter(|(score, _)| *score > 0)
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(a.1)))
            .map(|(_, n)| n.clone())
    }
}

fn quoted_name(result: &str) -> Option<String> {
    let start = result.find('\'')? + 1;
    let end = start + result[start..].find('\'')?;
    Some(result[start..end].to_string())
}

fn args_of(text: &str) -> serde_json::Map<String, serde_json::Value> {
    match serde_json::from_str(text) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => Default::default(),
    }
}

/// One finding: a rule and the tasks that support it.
struct Finding {
    pattern: String,
    description: String,
    layer: Layer,
    rule: RuleEdit,
    tasks: BTreeSet<String>,
}

/// Diagnose failure groups into a spec; `None` when no rule applies. The
/// signatures are fine-grained, so one interface slip can land in several
/// groups; the cross-task requirement is applied per finding instead: a
/// rule is kept only when failures of at least two distinct tasks support it
/// (one, when a single task failed at all).
pub fn diagnose(
    groups: &[FailureGroup],
    successes: &[FailureRecord],
    facts: &ToolFacts,
) -> Option<ChangeSpec> {
    let failing_tasks: BTreeSet<&str> = groups
        .iter()
        .flat_map(|g| g.tasks.iter().map(String::as_str))
        .collect();
    let detector = Detector {
        facts,
        successes,
        // Every record in view, to find where an id shows its true form.
        everything: groups
            .iter()
            .flat_map(|g| g.records.iter())
            .chain(successes.iter())
            .collect(),
        lookups_before: lookups_before_writes(successes, facts),
    };
    let mut findings: BTreeMap<String, Finding> = BTreeMap::new();
    for r in groups.iter().flat_map(|g| g.records.iter()) {
        for (key, f) in detector.findings(r) {
            findings
                .entry(key)
                .and_modify(|e| e.tasks.extend(f.tasks.iter().cloned()))
                .or_insert(f);
        }
    }
    let min_tasks = if failing_tasks.len() >= 2 { 2 } else { 1 };
    let kept: Vec<Finding> = findings
        .into_values()
        .filter(|f| f.tasks.len() >= min_tasks)
        .collect();
    if kept.is_empty() {
        return None;
    }
    Some(spec_of(kept))
}

/// For each write tool, how often each read tool preceded it in successful
/// episodes.
fn lookups_before_writes(
    successes: &[FailureRecord],
    facts: &ToolFacts,
) -> BTreeMap<String, BTreeMap<String, usize>> {
    let mut lookups: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for s in successes {
        for (i, step) in s.steps.iter().enumerate() {
            if !facts.mutates(&step.name) {
                continue;
            }
            for prev in &s.steps[..i] {
                if !facts.mutates(&prev.name) && !prev.error {
                    *lookups
                        .entry(step.name.clone())
                        .or_default()
                        .entry(prev.name.clone())
                        .or_default() += 1;
                }
            }
        }
    }
    lookups
}

/// What the detectors compare a failed episode against.
struct Detector<'a> {
    facts: &'a ToolFacts,
    successes: &'a [FailureRecord],
    everything: Vec<&'a FailureRecord>,
    lookups_before: BTreeMap<String, BTreeMap<String, usize>>,
}

impl Detector<'_> {
    /// Every finding one failed episode supports, keyed so that the same
    /// rule from several episodes merges.
    fn findings(&self, r: &FailureRecord) -> Vec<(String, Finding)> {
        let mut out = Vec::new();
        let mut failing_calls = BTreeMap::new();
        for (i, step) in r.steps.iter().enumerate() {
            if !(step.error || step.blocked) {
                continue;
            }
            *failing_calls
                .entry((step.name.clone(), step.arguments.clone()))
                .or_insert(0u32) += 1;
            let args = args_of(&step.arguments);
            out.extend(self.unknown_tool(step));
            out.extend(self.unhashed_ids(step, &args));
            out.extend(self.quoted_numbers(&args));
            out.extend(self.write_before_lookup(r, i));
        }
        if failing_calls.values().any(|n| *n >= 2) {
            out.push((
                "repeat".into(),
                Finding {
                    pattern: "identical failing call repeated".into(),
                    description: "the model repeats a call that just failed, unchanged".into(),
                    layer: Layer::Regulate,
                    rule: RuleEdit::RepeatThreshold { count: 1 },
                    tasks: BTreeSet::new(),
                },
            ));
        }
        for (_, f) in &mut out {
            f.tasks = BTreeSet::from([r.task_id.clone()]);
        }
        out
    }

    /// An unknown tool name: alias it to the closest real tool. The name
    /// comes from τ²'s "Tool '…' not found" or, for environments whose
    /// answer does not name it (AgentBench's "Invalid function call") and
    /// for a call the harness blocked, from the failed call itself.
    fn unknown_tool(&self, step: &ToolStep) -> Option<(String, Finding)> {
        let alias = if error_class(&step.result).starts_with("tool <v> not found") {
            quoted_name(&step.result)?
        } else if !self.facts.exists(&step.name) {
            step.name.clone()
        } else {
            return None;
        };
        if self.facts.exists(&alias) {
            return None;
        }
        let tool = self.facts.closest(&alias)?;
        Some((
            format!("alias {alias}"),
            Finding {
                pattern: "unknown tool name".into(),
                description: format!(
                    "the model calls `{alias}`, which does not exist; it means `{tool}`"
                ),
                layer: Layer::Realize,
                rule: RuleEdit::ToolAlias { alias, tool },
                tasks: BTreeSet::new(),
            },
        ))
    }

    /// An id that is known elsewhere with a leading `#`.
    fn unhashed_ids(
        &self,
        step: &ToolStep,
        args: &serde_json::Map<String, serde_json::Value>,
    ) -> Vec<(String, Finding)> {
        if !error_class(&step.result).contains("not found") {
            return vec![];
        }
        let mut out = Vec::new();
        for (name, value) in args {
            let Some(v) = value.as_str() else { continue };
            if v.starts_with('#') || v.is_empty() {
                continue;
            }
            let hashed = format!("#{v}");
            let seen = self.everything.iter().any(|s| {
                s.steps.iter().any(|t| {
                    !t.error && t.result.contains(&hashed)
                        || args_of(&t.arguments)
                            .get(name)
                            .and_then(|x| x.as_str())
                            .is_some_and(|x| x.starts_with('#'))
                }) || s.agent_texts.iter().any(|t| t.contains(&hashed))
            });
            if seen {
                out.push((
                    format!("hash {name}"),
                    Finding {
                        pattern: "id without its # prefix".into(),
                        description: format!(
                            "`{name}` is sent without the leading `#` the ids carry"
                        ),
                        layer: Layer::Realize,
                        rule: RuleEdit::HashPrefixedArg { arg: name.clone() },
                        tasks: BTreeSet::new(),
                    },
                ));
            }
        }
        out
    }

    /// A number sent as a string where other episodes send numbers.
    fn quoted_numbers(
        &self,
        args: &serde_json::Map<String, serde_json::Value>,
    ) -> Vec<(String, Finding)> {
        let mut out = Vec::new();
        for (name, value) in args {
            let Some(v) = value.as_str() else { continue };
            if v.parse::<f64>().is_err() {
                continue;
            }
            let numeric_elsewhere = self.successes.iter().any(|s| {
                s.steps.iter().any(|t| {
                    args_of(&t.arguments)
                        .get(name)
                        .is_some_and(|x| x.is_number())
                })
            });
            if numeric_elsewhere {
                out.push((
                    format!("numeric {name}"),
                    Finding {
                        pattern: "number sent as a string".into(),
                        description: format!(
                            "`{name}` is sent as a quoted string; successful calls send a number"
                        ),
                        layer: Layer::Realize,
                        rule: RuleEdit::NumericArg { arg: name.clone() },
                        tasks: BTreeSet::new(),
                    },
                ));
            }
        }
        out
    }

    /// A write tried before the lookup successful runs do first.
    fn write_before_lookup(&self, r: &FailureRecord, i: usize) -> Option<(String, Finding)> {
        let step = &r.steps[i];
        if !self.facts.mutates(&step.name) {
            return None;
        }
        let before = self.lookups_before.get(&step.name)?;
        let done: BTreeSet<&str> = r.steps[..i].iter().map(|s| s.name.as_str()).collect();
        let (read, _) = before
            .iter()
            .filter(|(n, _)| !done.contains(n.as_str()))
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))?;
        Some((
            format!("lookup {} {}", step.name, read),
            Finding {
                pattern: "write before its lookup".into(),
                description: format!(
                    "`{}` fails when called without first looking up the state with `{read}`",
                    step.name
                ),
                layer: Layer::Contract,
                rule: RuleEdit::ToolHint {
                    tool: step.name.clone(),
                    hint: format!(
                        "Before calling this tool, first look up the current state with `{read}` and check it."
                    ),
                },
                tasks: BTreeSet::new(),
            },
        ))
    }
}

/// The spec of the findings that met the cross-task requirement.
fn spec_of(kept: Vec<Finding>) -> ChangeSpec {
    let mut patterns: BTreeMap<String, FailurePattern> = BTreeMap::new();
    for f in &kept {
        let p = patterns
            .entry(f.pattern.clone())
            .or_insert_with(|| FailurePattern {
                name: f.pattern.clone(),
                description: f.description.clone(),
                evidence_tasks: vec![],
            });
        for t in &f.tasks {
            if !p.evidence_tasks.contains(t) {
                p.evidence_tasks.push(t.clone());
            }
        }
    }
    ChangeSpec {
        failure_patterns: patterns.into_values().collect(),
        proposed_changes: kept
            .into_iter()
            .map(|f| ProposedChange {
                layer: f.layer,
                file: TABLES_FILE.into(),
                rationale: format!("seen in {} task(s)", f.tasks.len()),
                description: f.description,
                evidence_tasks: f.tasks.into_iter().collect(),
                rule: Some(f.rule),
                instance_specific: false,
            })
            .collect(),
        skills: vec![],
        implementation_notes: "offline heuristic diagnosis: every change is a rule-table edit"
            .into(),
    }
}

/// A prose spec straight from the groups, for a coder that reads prose (an
/// LLM editor or an external agent) when no table rule applies: each group
/// becomes a failure pattern, and the largest groups (recurring first)
/// become changes aimed at the layer their signature points to. `None` when
/// there are no groups.
pub fn spec_from_groups(groups: &[FailureGroup]) -> Option<ChangeSpec> {
    const MAX_CHANGES: usize = 3;
    if groups.is_empty() {
        return None;
    }
    let failure_patterns = groups
        .iter()
        .map(|g| FailurePattern {
            name: g.key.clone(),
            description: format!(
                "{} failing episode(s) on {} task(s) share this signature",
                g.records.len(),
                g.tasks.len()
            ),
            evidence_tasks: g.tasks.clone(),
        })
        .collect();
    let proposed_changes = groups
        .iter()
        .take(MAX_CHANGES)
        .map(|g| {
            let any = |f: fn(&FailureRecord) -> bool| g.records.iter().any(f);
            let (layer, what) = if any(|r| !r.text_call_replies.is_empty()) {
                (
                    Layer::Realize,
                    "rescue tool calls the model writes as text into structured calls",
                )
            } else if any(crate::aggregate::repeated_failing_call) {
                (
                    Layer::Regulate,
                    "notice an identical failing call repeated and tell the model what to change",
                )
            } else if any(|r| crate::aggregate::first_failure(r).is_some()) {
                (
                    Layer::Realize,
                    "check or normalise the arguments of the first failing call before it runs, with a block message that states the fix",
                )
            } else {
                (
                    Layer::Contract,
                    "make the tool descriptions state the precondition the model missed",
                )
            };
            ProposedChange {
                layer,
                file: TABLES_FILE.into(),
                description: format!("{what} (failures: {})", g.key),
                rationale: format!(
                    "{} task(s) fail this way{}",
                    g.tasks.len(),
                    if g.recurring { ", a recurring pattern" } else { "" }
                ),
                evidence_tasks: g.tasks.clone(),
                rule: None,
                instance_specific: false,
            }
        })
        .collect();
    Some(ChangeSpec {
        failure_patterns,
        proposed_changes,
        skills: vec![],
        implementation_notes: "Written from the failure groups without a rule match: prefer a \
                               general rule in src/tables.rs over task-specific code."
            .into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::aggregate;
    use ecdysis_runner::agent::{CallSource, EndReason};

    fn failed(task: &str, name: &str, result: &str, blocked: bool) -> FailureRecord {
        FailureRecord {
            task_id: task.into(),
            trial: 0,
            reward: 0.0,
            success: false,
            db_ok: None,
            communicate_ok: None,
            env_ok: None,
            answer_ok: None,
            end: EndReason::AgentStop,
            steps: vec![ToolStep {
                name: name.into(),
                arguments: r#"{"command":"ls"}"#.into(),
                result: result.into(),
                error: !blocked,
                blocked,
                source: CallSource::Model,
                reply: 1,
                finishes: false,
                class: String::new(),
            }],
            device_steps: vec![],
            agent_texts: vec![],
            interventions: vec![],
            domain: "agentbench/os".into(),
            replies: 1,
            text_replies: vec![],
            text_call_replies: vec![],
            regulate_notes: vec![],
        }
    }

    fn os_facts() -> ToolFacts {
        ToolFacts {
            tools: ["bash_action", "answer_action", "finish_action"]
                .iter()
                .map(|n| (n.to_string(), true))
                .collect(),
        }
    }

    #[test]
    fn an_unknown_tool_the_answer_does_not_name_is_aliased_from_the_call() {
        // The environment's answer names no tool; the harness's block does
        // not either in a form the τ² rule reads.
        let failures = [
            failed(
                "std-001-00000",
                "bash_command",
                "Invalid function call. Please call a tool instead",
                false,
            ),
            failed(
                "std-002-00001",
                "bash_command",
                "[Blocked by the runtime harness] There is no tool named `bash_command`.",
                true,
            ),
        ];
        let spec = diagnose(&aggregate(&failures), &[], &os_facts()).expect("a spec");
        let rules: Vec<_> = spec
            .proposed_changes
            .iter()
            .filter_map(|c| c.rule.clone())
            .collect();
        assert!(
            rules.contains(&RuleEdit::ToolAlias {
                alias: "bash_command".into(),
                tool: "bash_action".into()
            }),
            "{rules:?}"
        );
        // A real tool failing is no alias; one task alone is not enough when
        // two failed.
        let real = [
            failed(
                "a",
                "bash_action",
                "Error: the command did not finish",
                false,
            ),
            failed(
                "b",
                "provide_answer",
                "Invalid function call. Please call a tool instead",
                false,
            ),
        ];
        let spec = diagnose(&aggregate(&real), &[], &os_facts());
        assert!(
            spec.is_none_or(|s| s
                .proposed_changes
                .iter()
                .all(|c| !matches!(c.rule, Some(RuleEdit::ToolAlias { .. })))),
            "aliases need two tasks"
        );
    }
}

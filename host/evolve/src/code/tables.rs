//! The table coder: a coder for models too weak to edit Rust. It shows the
//! model the spec, the evidence and the harness's rule-table entries for
//! the domain, and asks for the change as a short JSON list of table edits
//! ([`RuleEdit`]s: a system-prompt rule, a tool hint, a skill, error
//! advice, a tool alias, a regulation threshold, and the realization
//! primitives: hold a finishing call until its reply's results are read,
//! refuse one right after a failed call, repair names the task states in
//! a tool's argument). The host writes them into
//! `src/tables.rs` with the rule coder's exact renderer, so a reply that
//! parses always yields valid Rust; the crate is still built before the
//! candidate is taken.
//!
//! Where the endpoint enforces a response format (`structured`: OpenAI,
//! vLLM and llama.cpp take `response_format` with a JSON schema) the reply
//! is constrained to the schema, tool names included; without it the first
//! JSON object of the reply is read and checked the same way. Replies that
//! do not parse, name unknown tools or change nothing go back to the model
//! as a follow-up turn, like the editor's. A reply that repeats an earlier
//! one of the conversation shows the feedback did not move the model: at a
//! low temperature the next call would be the same request again, so the
//! calls after it sample at [`RESAMPLE_TEMPERATURE`].

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::editor::EditorConfig;
use super::{
    BuildCheck, Coder, CoderError, CoderFuture, CoderOutcome, CoderTask, Snapshot,
    check_build_async, check_crate, clip_blocks, clip_chars, fill_template, src_diff,
};
use crate::code::TABLES_FILE;
use crate::code::rule_coder;
use crate::diagnose::change_spec::{RegulationField, RuleEdit};
use crate::diagnose::token_budget::{self, Section, estimate_messages};
use ecdysis_model::{ChatMessage, ChatModel, ChatRequest, response_format_json_schema};

const SYSTEM: &str = include_str!("../prompts/tables_system.md");
const TASK: &str = include_str!("../prompts/tables_task.md");

/// Most edits one reply may carry.
pub const MAX_EDITS: usize = 3;

/// The least temperature of the calls that follow a repeated reply.
pub const RESAMPLE_TEMPERATURE: f64 = 0.7;

/// Longest text of one edit (a skill's text may be twice as long).
pub const MAX_TEXT_CHARS: usize = 400;

/// Shortest instruction text: a rule, hint or advice is a sentence, not a
/// fragment (small models answer with a copied fragment of the tables).
pub const MIN_TEXT_CHARS: usize = 20;

/// Whether `text` is an instruction a model can read: long enough, a few
/// words, not a fragment of the tables' own syntax.
fn is_instruction(text: &str) -> bool {
    let t = text.trim();
    t.chars().count() >= MIN_TEXT_CHARS
        && t.split_whitespace().count() >= 4
        && ![
            "PromptRule",
            "ToolHint",
            "ErrorAdvice",
            "ToolAlias",
            "Skill {",
            "domain:",
        ]
        .iter()
        .any(|syntax| t.contains(syntax))
}

/// The table coder.
pub struct TableCoder {
    model: Arc<dyn ChatModel>,
    config: EditorConfig,
    name: String,
}

impl TableCoder {
    /// A table coder driving `model` (named `tables:<model>` in records).
    pub fn new(model: Arc<dyn ChatModel>, config: EditorConfig) -> Self {
        let name = format!("tables:{}", model.name());
        Self {
            model,
            config,
            name,
        }
    }
}

/// A reply: the edits, and the model's one-line reason.
#[derive(Debug, Deserialize)]
struct Reply {
    #[serde(default)]
    reason: String,
    edits: Vec<RuleEdit>,
}

/// The JSON schema of a reply for a domain with these tools: the kinds a
/// model may use, tool names as enums, bounded texts and counts.
pub fn reply_schema(tools: &[String]) -> Value {
    let text = |max: usize| json!({"type": "string", "minLength": 3, "maxLength": max});
    let sentence =
        |max: usize| json!({"type": "string", "minLength": MIN_TEXT_CHARS, "maxLength": max});
    let tool = if tools.is_empty() {
        json!({"type": "string", "minLength": 1, "maxLength": 64})
    } else {
        json!({"enum": tools})
    };
    let kind = |k: &str, props: Value, required: &[&str]| {
        let mut p = props;
        p["kind"] = json!({"const": k});
        let mut req = vec!["kind"];
        req.extend_from_slice(required);
        json!({"type": "object", "properties": p, "required": req, "additionalProperties": false})
    };
    let fields: Vec<&str> = RegulationField::ALL.iter().map(|f| f.as_str()).collect();
    let mut schema = json!({
        "type": "object",
        "properties": {
            "reason": text(300),
            "edits": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_EDITS,
                "items": {"anyOf": [
                    kind("prompt_rule", json!({"text": sentence(MAX_TEXT_CHARS)}), &["text"]),
                    kind("tool_hint", json!({"tool": tool, "hint": sentence(MAX_TEXT_CHARS)}), &["tool", "hint"]),
                    kind("skill", json!({
                        "title": text(80),
                        "text": sentence(2 * MAX_TEXT_CHARS),
                        "keywords": {"type": "array", "maxItems": 12, "items": text(24)},
                    }), &["title", "text", "keywords"]),
                    kind("error_advice", json!({"contains": text(80), "advice": sentence(MAX_TEXT_CHARS)}), &["contains", "advice"]),
                    kind("tool_alias", json!({"alias": text(64), "tool": tool}), &["alias", "tool"]),
                    kind("regulation", json!({
                        "field": {"enum": fields},
                        "value": {"type": "integer", "minimum": 1, "maximum": 30},
                    }), &["field", "value"]),
                ]},
            },
        },
        "required": ["reason", "edits"],
        "additionalProperties": false,
    });
    // The realization primitives, with the same tool names.
    if let Some(kinds) = schema["properties"]["edits"]["items"]["anyOf"].as_array_mut() {
        kinds.extend(RuleEdit::primitive_schemas(&tool));
    }
    schema
}

/// Why a reply cannot be used as rule edits.
#[derive(Debug, thiserror::Error)]
pub enum UnusableReply {
    /// The text holds no JSON object.
    #[error("the reply holds no JSON object")]
    NoJson,
    /// Its first JSON object is not an edit list (the parser's error).
    #[error("not an edit list: {0}")]
    NotAnEditList(serde_json::Error),
    /// The list is empty.
    #[error("\"edits\" is empty")]
    NoEdits,
    /// More edits than a reply may make.
    #[error("{count} edits; give at most {MAX_EDITS}")]
    TooMany {
        /// How many it makes.
        count: usize,
    },
    /// Edits that cannot be applied, each named by its number (from 1):
    /// `edit N: ...`.
    #[error("{}", .0.join("; "))]
    Edits(Vec<String>),
}

/// The mechanisms the spec's failure labels name, where a label is the
/// aggregation's signature key (`agent_stop | finished right after an error
/// | failed db`): its end reason and how the episode finished. A weak coder
/// copies them into what the agent reads, where they mean nothing to it.
pub fn diagnosis_labels(spec: &crate::diagnose::change_spec::ChangeSpec) -> Vec<String> {
    spec.failure_patterns
        .iter()
        .filter_map(|p| {
            let mut parts = p.name.split(" | ").map(str::trim);
            let (end, finish) = (parts.next()?, parts.next()?);
            (!end.is_empty() && !finish.is_empty()).then(|| format!("{end} | {finish}"))
        })
        .collect()
}

/// The texts of an edit the agent model reads.
fn model_texts(e: &RuleEdit) -> Vec<&str> {
    match e {
        RuleEdit::PromptRule { text } => vec![text],
        RuleEdit::ToolHint { hint, .. } => vec![hint],
        RuleEdit::ErrorAdvice { advice, .. } => vec![advice],
        RuleEdit::Skill { title, text, .. } => vec![title, text],
        RuleEdit::HoldFinish { feedback, .. }
        | RuleEdit::RefuseFinishAfterError { feedback, .. } => {
            vec![feedback]
        }
        _ => vec![],
    }
}

/// Read a reply as edits and check them against the domain's tools: the
/// first JSON object of the text, kinds a model may use, known tools,
/// bounded texts, and no text the agent reads quoting one of the
/// diagnosis's `labels` ([`diagnosis_labels`]). The problems, when it is
/// not usable.
pub fn parse_reply(
    text: &str,
    tools: &[String],
    labels: &[String],
) -> Result<(String, Vec<RuleEdit>), UnusableReply> {
    let json =
        crate::diagnose::change_spec::first_json_object(text).ok_or(UnusableReply::NoJson)?;
    let reply: Reply = serde_json::from_str(json).map_err(UnusableReply::NotAnEditList)?;
    if reply.edits.is_empty() {
        return Err(UnusableReply::NoEdits);
    }
    if reply.edits.len() > MAX_EDITS {
        return Err(UnusableReply::TooMany {
            count: reply.edits.len(),
        });
    }
    let known = |t: &str| tools.is_empty() || tools.iter().any(|x| x == t);
    let mut problems = Vec::new();
    for (i, e) in reply.edits.iter().enumerate() {
        let n = i + 1;
        let long = |s: &str, max: usize| s.trim().chars().count() > max;
        let blank = |s: &str| s.trim().is_empty();
        let not_instruction = |s: &str| !is_instruction(s);
        match e {
            RuleEdit::PromptRule { text } if blank(text) || long(text, MAX_TEXT_CHARS) => problems
                .push(format!(
                    "edit {n}: the rule text must be 1 to {MAX_TEXT_CHARS} characters"
                )),
            RuleEdit::PromptRule { text } if not_instruction(text) => problems.push(format!(
                "edit {n}: the rule must be a sentence the agent can follow (at least {MIN_TEXT_CHARS} characters, no table syntax), not {text:?}"
            )),
            RuleEdit::ToolHint { tool, .. } if !known(tool) => {
                problems.push(format!("edit {n}: there is no tool `{tool}`"))
            }
            RuleEdit::ToolHint { hint, .. } if blank(hint) || long(hint, MAX_TEXT_CHARS) => problems
                .push(format!(
                    "edit {n}: the hint must be 1 to {MAX_TEXT_CHARS} characters"
                )),
            RuleEdit::ToolHint { hint, .. } if not_instruction(hint) => problems.push(format!(
                "edit {n}: the hint must be a sentence (at least {MIN_TEXT_CHARS} characters, no table syntax), not {hint:?}"
            )),
            RuleEdit::Skill { title, text, .. }
                if blank(title) || blank(text) || long(text, 2 * MAX_TEXT_CHARS) =>
            {
                problems.push(format!(
                    "edit {n}: a skill needs a title and a text of at most {} characters",
                    2 * MAX_TEXT_CHARS
                ))
            }
            RuleEdit::Skill { text, .. } if not_instruction(text) => problems.push(format!(
                "edit {n}: a skill's text must be steps the agent can follow, not {text:?}"
            )),
            RuleEdit::ErrorAdvice { contains, advice }
                if blank(contains) || blank(advice) || long(advice, MAX_TEXT_CHARS) =>
            {
                problems.push(format!(
                    "edit {n}: error advice needs the error text it matches and advice of at most {MAX_TEXT_CHARS} characters"
                ))
            }
            RuleEdit::ErrorAdvice { advice, .. } if not_instruction(advice) => problems.push(
                format!("edit {n}: the advice must be a sentence, not {advice:?}"),
            ),
            RuleEdit::ToolAlias { alias, tool } if !known(tool) || known(alias) && !tools.is_empty() => {
                problems.push(format!(
                    "edit {n}: an alias maps a name that is not a tool (`{alias}`) to a tool that is (`{tool}`)"
                ))
            }
            RuleEdit::Regulation { value, .. } if !(1..=30).contains(value) => {
                problems.push(format!("edit {n}: a threshold is a number from 1 to 30"))
            }
            RuleEdit::HashPrefixedArg { .. }
            | RuleEdit::NumericArg { .. }
            | RuleEdit::RepeatThreshold { .. } => problems.push(format!(
                "edit {n}: kind not offered here; use one of the kinds listed"
            )),
            RuleEdit::HoldFinish { tool, .. } | RuleEdit::RefuseFinishAfterError { tool, .. }
                if !known(tool) =>
            {
                problems.push(format!("edit {n}: there is no tool `{tool}`"))
            }
            RuleEdit::HoldFinish {
                argument, exempt, ..
            } if !exempt.is_empty() && (blank(argument) || exempt.iter().any(|e| blank(e))) => {
                problems.push(format!(
                    "edit {n}: exempt starts need the argument they start (e.g. \"query\") and no blank entry"
                ))
            }
            RuleEdit::HoldFinish { feedback, .. } | RuleEdit::RefuseFinishAfterError { feedback, .. }
                if !blank(feedback) && (not_instruction(feedback) || long(feedback, MAX_TEXT_CHARS)) =>
            {
                problems.push(format!(
                    "edit {n}: feedback is empty (the harness's own) or a sentence of at most {MAX_TEXT_CHARS} characters, not {feedback:?}"
                ))
            }
            RuleEdit::RepairNames { tool, .. } if !known(tool) => {
                problems.push(format!("edit {n}: there is no tool `{tool}`"))
            }
            RuleEdit::RepairNames {
                argument, before, quote, ..
            } if blank(argument) || blank(before) || quote.chars().count() > 2 => problems.push(format!(
                "edit {n}: repair_names needs the argument, the text just before a name in the task (`before`), and a quote of at most two characters"
            )),
            _ => {}
        }
    }
    for (i, e) in reply.edits.iter().enumerate() {
        let quoted = model_texts(e).into_iter().find_map(|t| {
            let t = t.to_lowercase();
            labels
                .iter()
                .find(|l| !l.is_empty() && t.contains(&l.to_lowercase()))
        });
        if let Some(label) = quoted {
            problems.push(format!(
                "edit {}: the text quotes the failure label `{label}`, which names the failure for you and means nothing to the agent; write the instruction the agent should follow instead",
                i + 1
            ));
        }
    }
    if problems.is_empty() {
        Ok((reply.reason, reply.edits))
    } else {
        Err(UnusableReply::Edits(problems))
    }
}

impl TableCoder {
    async fn run(&self, task: &CoderTask, staging: &Path) -> Result<CoderOutcome, CoderError> {
        check_crate(staging)?;
        let (domain, tools) = match &task.context {
            Some(c) => (c.domain.clone(), c.tools.clone()),
            None => (String::new(), vec![]),
        };
        let labels = diagnosis_labels(&task.spec);
        let before = Snapshot::take(staging)?;
        let trust = before.untrusted_edits(&self.config.containment);
        let tables = staging.join(TABLES_FILE);
        let Ok(tables_text) = std::fs::read_to_string(&tables) else {
            return Err(CoderError::NoEdits {
                last: format!("the harness has no {TABLES_FILE} to edit"),
                attempts: 0,
                log: String::new(),
            });
        };
        let opening = self.opening(task, &domain, &tools, &tables_text)?;
        let schema = self
            .config
            .structured
            .then(|| response_format_json_schema("table_edits", reply_schema(&tools)));
        let mut messages = opening.clone();
        let mut log = String::new();
        let mut last = String::new();
        let mut replies: Vec<String> = Vec::new();
        let mut resample = false;
        let max_calls = 1 + self.config.max_feedback;
        for attempt in 1..=max_calls {
            let text = match self.ask(&messages, schema.as_ref(), resample).await {
                Ok(t) => t,
                Err(source) => {
                    log += &format!("call {attempt}: model error: {source}\n");
                    before.restore()?;
                    return Err(CoderError::Model {
                        source,
                        attempts: attempt,
                        log,
                    });
                }
            };
            log += &format!(
                "call {attempt}: reply of {} chars\n{}\n",
                text.len(),
                clip_chars(&text, super::LOGGED_REPLY_CHARS)
            );
            if !resample && let Some(earlier) = replies.iter().position(|r| *r == text) {
                resample = true;
                log += &format!(
                    "call {attempt}: the same reply as call {}; the next calls sample at temperature {RESAMPLE_TEMPERATURE} or more\n",
                    earlier + 1
                );
            }
            replies.push(text.clone());
            let feedback = match parse_reply(&text, &tools, &labels) {
                Err(problem) => {
                    log += &format!("call {attempt}: not usable: {problem}\n");
                    format!(
                        "Your reply could not be used: {problem}. Nothing was changed. Reply again with one JSON object in the format described above."
                    )
                }
                Ok((reason, edits)) => {
                    log += &format!("call {attempt}: {} edit(s): {reason}\n", edits.len());
                    match rule_coder::apply_rules(staging, &edits, &domain) {
                        Ok(0) => {
                            log +=
                                &format!("call {attempt}: every edit is already in the tables\n");
                            "Every edit of your reply is already in the tables, so nothing changed. Propose a different edit that addresses the failure.".to_string()
                        }
                        Ok(n) => {
                            let build: BuildCheck = check_build_async(
                                staging,
                                self.config.target_dir.as_deref(),
                                &trust,
                            )
                            .await?;
                            if build.ok {
                                log += &format!(
                                    "call {attempt}: {n} table entr(ies) changed, build ok ({:.1} s)\n",
                                    build.seconds
                                );
                                let after = Snapshot::take(staging)?;
                                let (diff, changed_files) = src_diff(&before, &after);
                                return Ok(CoderOutcome {
                                    diff,
                                    changed_files,
                                    attempts: attempt,
                                    build_ok: true,
                                    log,
                                });
                            }
                            before.restore()?;
                            log += &format!(
                                "call {attempt}: build failed: {}\n",
                                clip_chars(&build.errors, 400)
                            );
                            format!(
                                "Your edits were written, but the harness did not build:\n{}\nNothing was kept. Reply again with different edits.",
                                clip_chars(&build.errors, 1_500)
                            )
                        }
                        Err(e) => {
                            before.restore()?;
                            log += &format!("call {attempt}: not applied: {e}\n");
                            format!("Your edits could not be applied: {e}. Reply again.")
                        }
                    }
                }
            };
            last = feedback.clone();
            messages = opening.clone();
            messages.push(ChatMessage::assistant(token_budget::clip_lines(
                &text,
                self.config.budget.reply_tokens,
                "reply",
            )));
            messages.push(ChatMessage::user(feedback));
        }
        before.restore()?;
        Err(CoderError::NoEdits {
            last: last.lines().next().unwrap_or_default().to_string(),
            attempts: max_calls,
            log,
        })
    }

    /// The system prompt and the task, fitted to the budget with room for
    /// one follow-up exchange.
    fn opening(
        &self,
        task: &CoderTask,
        domain: &str,
        tools: &[String],
        tables: &str,
    ) -> Result<Vec<ChatMessage>, CoderError> {
        let budget = self.config.budget;
        let too_small = || CoderError::ContextTooSmall {
            context: budget.context_tokens,
            reply: budget.reply_tokens,
        };
        let system = ChatMessage::system(SYSTEM.trim());
        let exchange = if self.config.max_feedback > 0 {
            budget.reply_tokens + 200 + 2 * token_budget::MESSAGE_OVERHEAD
        } else {
            0
        };
        let tools_text = if tools.is_empty() {
            "(see the tool hints above)".to_string()
        } else {
            tools.join(", ")
        };
        let fill = |spec: &str, notes: &str, entries: &str| {
            fill_template(
                TASK,
                &[
                    ("spec", spec),
                    ("notes", notes),
                    ("entries", entries),
                    ("domain", domain),
                    ("tools", &tools_text),
                ],
            )
        };
        let room = budget
            .prompt_tokens()
            .checked_sub(
                estimate_messages(std::slice::from_ref(&system))
                    + token_budget::MESSAGE_OVERHEAD
                    + exchange
                    + token_budget::estimate_tokens(&fill("", "", ""))
                    + 16,
            )
            .ok_or_else(too_small)?;
        let spec = Section::text(
            serde_json::to_string_pretty(&task.spec).unwrap_or_default(),
            "spec",
        );
        let notes_text = task.notes.clone().unwrap_or_else(|| "(none)".into());
        let notes = Section::new(move |cap| match cap {
            None => notes_text.clone(),
            Some(cap) => clip_blocks(&notes_text, cap, "evidence excerpt"),
        });
        let entries = Section::text(rule_coder::domain_entries(tables, domain), "table entries");
        let parts = token_budget::fit_sections(&[&spec, &notes, &entries], room);
        Ok(vec![
            system,
            ChatMessage::user(fill(&parts[0], &parts[1], &parts[2])),
        ])
    }

    /// One call; `resample` raises the temperature to at least
    /// [`RESAMPLE_TEMPERATURE`].
    async fn ask(
        &self,
        messages: &[ChatMessage],
        format: Option<&(String, Value)>,
        resample: bool,
    ) -> Result<String, ecdysis_model::ModelError> {
        let mut sampling = self.config.sampling.clone();
        if resample {
            let t = sampling
                .temperature
                .unwrap_or(0.0)
                .max(RESAMPLE_TEMPERATURE);
            sampling.temperature = Some(t);
        }
        if sampling.max_tokens.is_none() {
            sampling.max_tokens = Some(self.config.budget.reply_tokens as u32);
        }
        let mut request = ChatRequest::new(messages.to_vec()).with_sampling(sampling);
        request.cache_salt = self.config.cache_salt.clone();
        if let Some((key, value)) = format {
            request.extra.insert(key.clone(), value.clone());
        }
        Ok(self.model.chat(&request).await?.text().to_string())
    }
}

impl Coder for TableCoder {
    fn name(&self) -> &str {
        &self.name
    }

    fn implement<'a>(&'a self, task: &'a CoderTask, staging: &'a Path) -> CoderFuture<'a> {
        Box::pin(self.run(task, staging))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<String> {
        vec!["execute_sql".into(), "commit_final_answer".into()]
    }

    const SENTENCE: &str = "Quote every value compared with a TEXT column.";

    #[test]
    fn replies_parse_into_checked_table_edits() {
        let (reason, edits) = parse_reply(
            "Here you go:\n```json\n{\"reason\": \"r\", \"edits\": [{\"kind\": \"prompt_rule\", \"text\": \"Quote values compared with TEXT columns.\"}, {\"kind\": \"tool_alias\", \"alias\": \"run_query\", \"tool\": \"execute_sql\"}, {\"kind\": \"regulation\", \"field\": \"error_streak\", \"value\": 2}]}\n```",
            &tools(),
            &[],
        )
        .unwrap();
        assert_eq!(reason, "r");
        assert_eq!(
            edits,
            vec![
                RuleEdit::PromptRule {
                    text: "Quote values compared with TEXT columns.".into()
                },
                RuleEdit::ToolAlias {
                    alias: "run_query".into(),
                    tool: "execute_sql".into()
                },
                RuleEdit::Regulation {
                    field: RegulationField::ErrorStreak,
                    value: 2
                },
            ]
        );
    }

    #[test]
    fn unusable_replies_say_what_is_wrong() {
        let t = tools();
        let err = |s: &str| parse_reply(s, &t, &[]).unwrap_err().to_string();
        assert!(err("no json here").contains("no JSON object"));
        assert!(err("{\"edits\": []}").contains("empty"));
        assert!(
            err("{\"edits\": [{\"kind\": \"tool_hint\", \"tool\": \"drop_table\", \"hint\": \"x y z\"}]}")
                .contains("no tool `drop_table`")
        );
        assert!(
            err("{\"edits\": [{\"kind\": \"tool_alias\", \"alias\": \"execute_sql\", \"tool\": \"execute_sql\"}]}")
                .contains("alias")
        );
        assert!(
            err("{\"edits\": [{\"kind\": \"numeric_arg\", \"arg\": \"x\"}]}")
                .contains("not offered")
        );
        assert!(
            err("{\"edits\": [{\"kind\": \"regulation\", \"field\": \"stall_turns\", \"value\": 0}]}")
                .contains("1 to 30")
        );
        let long = "x".repeat(MAX_TEXT_CHARS + 1);
        assert!(
            err(&format!(
                "{{\"edits\": [{{\"kind\": \"prompt_rule\", \"text\": \"{long}\"}}]}}"
            ))
            .contains("characters")
        );
        let four =
            "{\"kind\": \"prompt_rule\", \"text\": \"Quote values compared with TEXT columns.\"}";
        assert!(
            err(&format!("{{\"edits\": [{four},{four},{four},{four}]}}")).contains("at most 3")
        );
        assert!(
            err("{\"edits\": [{\"kind\": \"rewrite_everything\"}]}").contains("not an edit list")
        );
    }

    #[test]
    fn primitive_edits_are_checked_against_the_tools() {
        let t = tools();
        let ok = |s: &str| parse_reply(s, &t, &[]).map(|(_, e)| e);
        assert_eq!(
            ok(r#"{"reason": "r", "edits": [
                {"kind": "hold_finish", "tool": "commit_final_answer", "argument": "query", "exempt": ["INSERT", "UPDATE", "DELETE"]},
                {"kind": "refuse_finish_after_error", "tool": "commit_final_answer"},
                {"kind": "repair_names", "tool": "execute_sql", "argument": "query", "before": "The name of this table is ", "after": ", and the headers", "quote": "`"}
            ]}"#)
            .unwrap(),
            vec![
                RuleEdit::HoldFinish {
                    tool: "commit_final_answer".into(),
                    argument: "query".into(),
                    exempt: vec!["INSERT".into(), "UPDATE".into(), "DELETE".into()],
                    feedback: String::new(),
                },
                RuleEdit::RefuseFinishAfterError {
                    tool: "commit_final_answer".into(),
                    feedback: String::new(),
                },
                RuleEdit::RepairNames {
                    tool: "execute_sql".into(),
                    argument: "query".into(),
                    before: "The name of this table is ".into(),
                    after: ", and the headers".into(),
                    separator: String::new(),
                    quote: "`".into(),
                    bare: String::new(),
                },
            ]
        );
        let err = |s: &str| parse_reply(s, &t, &[]).unwrap_err().to_string();
        assert!(
            err(r#"{"edits": [{"kind": "hold_finish", "tool": "submit"}]}"#)
                .contains("no tool `submit`")
        );
        assert!(
            err(r#"{"edits": [{"kind": "refuse_finish_after_error", "tool": "finish"}]}"#)
                .contains("no tool `finish`")
        );
        assert!(
            err(r#"{"edits": [{"kind": "hold_finish", "tool": "commit_final_answer", "exempt": ["INSERT"]}]}"#)
                .contains("exempt")
        );
        assert!(
            err(r#"{"edits": [{"kind": "refuse_finish_after_error", "tool": "commit_final_answer", "feedback": "no"}]}"#)
                .contains("feedback")
        );
        assert!(
            err(r#"{"edits": [{"kind": "repair_names", "tool": "execute_sql", "argument": "query", "before": "  "}]}"#)
                .contains("before")
        );
        assert!(
            err(r#"{"edits": [{"kind": "repair_names", "tool": "run", "argument": "query", "before": "x"}]}"#)
                .contains("no tool `run`")
        );
    }

    #[test]
    fn the_schema_names_the_tools_and_bounds_the_reply() {
        let s = reply_schema(&tools());
        let items = &s["properties"]["edits"]["items"]["anyOf"];
        assert_eq!(items.as_array().unwrap().len(), 9);
        assert_eq!(s["properties"]["edits"]["maxItems"], MAX_EDITS);
        let hint = items
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["properties"]["kind"]["const"] == "tool_hint")
            .unwrap();
        assert_eq!(hint["properties"]["tool"]["enum"], json!(tools()));
        // Every kind the schema offers parses as a RuleEdit.
        for k in items.as_array().unwrap() {
            let kind = k["properties"]["kind"]["const"].as_str().unwrap();
            let sample = match kind {
                "prompt_rule" => json!({"kind": kind, "text": SENTENCE}),
                "tool_hint" => json!({"kind": kind, "tool": "execute_sql", "hint": SENTENCE}),
                "skill" => json!({"kind": kind, "title": "t", "text": SENTENCE, "keywords": ["a"]}),
                "error_advice" => json!({"kind": kind, "contains": "1054", "advice": SENTENCE}),
                "tool_alias" => json!({"kind": kind, "alias": "q", "tool": "execute_sql"}),
                "regulation" => json!({"kind": kind, "field": "stall_turns", "value": 4}),
                "hold_finish" => {
                    json!({"kind": kind, "tool": "commit_final_answer", "argument": "query", "exempt": ["INSERT"], "feedback": ""})
                }
                "refuse_finish_after_error" => {
                    json!({"kind": kind, "tool": "commit_final_answer", "feedback": SENTENCE})
                }
                "repair_names" => {
                    json!({"kind": kind, "tool": "execute_sql", "argument": "query", "before": "The name of this table is ", "after": ", and", "separator": "", "quote": "`", "bare": "_"})
                }
                other => panic!("unexpected kind {other}"),
            };
            let reply = json!({"reason": "r", "edits": [sample]}).to_string();
            parse_reply(&reply, &tools(), &[]).unwrap_or_else(|e| panic!("{kind}: {e}"));
        }
    }

    /// Self-Evolution's table coder on the real DBBench experiment (round 1
    /// of the second run) wrote the heuristic's proposed change, failure
    /// label included, as a tool hint the agent then read.
    #[test]
    fn a_text_that_quotes_a_failure_label_is_refused_and_an_instruction_is_not() {
        let t = tools();
        let spec = crate::diagnose::change_spec::ChangeSpec {
            failure_patterns: vec![
                crate::diagnose::change_spec::FailurePattern {
                    name: "max_steps | no finishing call | failed answer".into(),
                    description: "d".into(),
                    evidence_tasks: vec![],
                },
                crate::diagnose::change_spec::FailurePattern {
                    name: "identical failing call repeated".into(),
                    description: "d".into(),
                    evidence_tasks: vec![],
                },
            ],
            proposed_changes: vec![],
            skills: vec![],
            implementation_notes: String::new(),
        };
        let labels = diagnosis_labels(&spec);
        assert_eq!(labels, vec!["max_steps | no finishing call".to_string()]);
        let hint = |h: &str| {
            format!(
                "{{\"reason\": \"r\", \"edits\": [{{\"kind\": \"tool_hint\", \"tool\": \"execute_sql\", \"hint\": \"{h}\"}}]}}"
            )
        };
        let copied = hint(
            "rescue tool calls the model writes as text into structured calls (failures: MAX_STEPS | no finishing call | failed answer)",
        );
        let err = parse_reply(&copied, &t, &labels).unwrap_err().to_string();
        assert!(
            err.contains("edit 1") && err.contains("max_steps | no finishing call"),
            "{err}"
        );
        // Without labels (a coder task with no aggregated failures) the same
        // text passes the other checks: the refusal is the label's.
        assert!(parse_reply(&copied, &t, &[]).is_ok());
        let instruction =
            hint("Call commit_final_answer once the rows of your last query answer the question.");
        assert!(parse_reply(&instruction, &t, &labels).is_ok());
    }
}

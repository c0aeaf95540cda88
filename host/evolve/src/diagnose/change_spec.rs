//! The structured change spec that diagnosis produces and a coder
//! implements: `{failure_patterns, proposed_changes[{layer, file, description,
//! rationale, evidence_tasks}], skills[], implementation_notes}`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// The harness layer a change targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// Tool descriptions and the system prompt.
    Contract,
    /// Procedural guidance.
    Skills,
    /// Checks, normalisations and rescues before tool calls run.
    Realize,
    /// Watching the trajectory: repeats, stalls, budgets.
    Regulate,
}

impl Layer {
    /// Every layer, in hook order.
    pub const ALL: [Layer; 4] = [
        Layer::Contract,
        Layer::Skills,
        Layer::Realize,
        Layer::Regulate,
    ];

    /// The layer's name (also the harness's directory under `src/`).
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Contract => "contract",
            Layer::Skills => "skills",
            Layer::Realize => "realize",
            Layer::Regulate => "regulate",
        }
    }
}

/// A recurring failure, as diagnosis states it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailurePattern {
    /// Short name, e.g. `order id without #`.
    pub name: String,
    /// What goes wrong, in the trajectory's own terms.
    pub description: String,
    /// Task ids that show it.
    #[serde(default)]
    pub evidence_tasks: Vec<String>,
}

/// One change to make.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProposedChange {
    /// The harness layer the change belongs to.
    pub layer: Layer,
    /// The harness source file to edit, relative to the crate (under `src/`).
    pub file: String,
    /// What to change.
    pub description: String,
    /// Why, tied to the evidence.
    pub rationale: String,
    /// Task ids whose failures motivate this change.
    #[serde(default)]
    pub evidence_tasks: Vec<String>,
    /// Machine-readable form of the change for the offline rule coder
    /// (`None` when only prose is given, as LLM diagnosers usually do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<RuleEdit>,
    /// Set by the host, never by a diagnoser: the change is backed by a
    /// single task (the paper's cross-instance criterion is not met).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub instance_specific: bool,
}

/// A change expressed as an edit of the harness's rule tables
/// (`src/tables.rs`), which the offline rule coder applies exactly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RuleEdit {
    /// Append a hint to a tool's description.
    ToolHint {
        /// The tool whose description gets the hint.
        tool: String,
        /// The sentence appended.
        hint: String,
    },
    /// Map a wrong tool name the model uses to the real tool.
    ToolAlias {
        /// The name the model wrongly uses.
        alias: String,
        /// The real tool it stands for.
        tool: String,
    },
    /// Treat an argument as an order-style id that must start with `#`.
    HashPrefixedArg {
        /// The argument name (e.g. `order_id`).
        arg: String,
    },
    /// Coerce an argument passed as a string into a number.
    NumericArg {
        /// The argument name.
        arg: String,
    },
    /// Annotate after this many identical failing calls.
    RepeatThreshold {
        /// Identical failing calls before the annotation.
        count: u32,
    },
    /// Add a rule to the system prompt's tool-use rules (environment
    /// contract).
    PromptRule {
        /// One self-contained instruction.
        text: String,
    },
    /// Advice appended to a failed call's error when its text contains
    /// `contains` (case-insensitive); checked before the existing advice,
    /// or replacing the advice for the same `contains`.
    ErrorAdvice {
        /// A substring of the error text.
        contains: String,
        /// What the agent should do instead.
        advice: String,
    },
    /// Set one threshold of the regulation layer.
    Regulation {
        /// The threshold.
        field: RegulationField,
        /// Its new value.
        value: u32,
    },
    /// Add a procedure to the skill library, or replace the one with this
    /// title.
    Skill {
        /// The procedure's title (the library's key).
        title: String,
        /// The procedure's text.
        text: String,
        /// Words that select the procedure for a task.
        #[serde(default)]
        keywords: Vec<String>,
    },
    /// Hold back a finishing call that comes in the same reply after other
    /// calls until the model has read their results (`FINISH_HOLDS`); an
    /// entry for the same tool is replaced.
    HoldFinish {
        /// The finishing tool (DBBench's `commit_final_answer`).
        tool: String,
        /// The argument of the earlier calls that `exempt` reads (empty:
        /// every earlier call holds the finishing call).
        #[serde(default)]
        argument: String,
        /// Starts of that argument that mark a write, which needs no
        /// reading and does not hold the finishing call (`INSERT`).
        #[serde(default)]
        exempt: Vec<String>,
        /// The block text (`{tool}`, `{calls}`); empty: the harness's own.
        #[serde(default)]
        feedback: String,
    },
    /// Refuse a finishing call made in the reply right after a call failed
    /// (`FINISH_AFTER_ERRORS`); an entry for the same tool is replaced.
    RefuseFinishAfterError {
        /// The finishing tool.
        tool: String,
        /// The block text (`{tool}`, `{failed}`); empty: the harness's own.
        #[serde(default)]
        feedback: String,
    },
    /// Write the names the task's opening message states (between `before`
    /// and `after`) back into a tool's string argument where the model
    /// misspelled them: left unquoted, `_` for spaces, another case, words
    /// dropped (`NAME_REPAIRS`); an entry with the same tool, argument and
    /// `before` is replaced.
    RepairNames {
        /// The tool whose argument is repaired.
        tool: String,
        /// The argument (a top-level string, e.g. `query`).
        argument: String,
        /// The text just before a name in the opening message.
        before: String,
        /// The text just after it (empty: the end of the line).
        #[serde(default)]
        after: String,
        /// Splits the text between into several names (empty: one name).
        #[serde(default)]
        separator: String,
        /// The quote put around a name that needs one (empty: none).
        #[serde(default)]
        quote: String,
        /// Characters besides letters and digits a name may hold unquoted.
        #[serde(default)]
        bare: String,
    },
}

impl RuleEdit {
    /// The JSON schemas of the three realization primitives' edits
    /// (`hold_finish`, `refuse_finish_after_error`, `repair_names`), with
    /// `tool` the schema of a tool name; texts and lists bounded.
    pub fn primitive_schemas(tool: &serde_json::Value) -> Vec<serde_json::Value> {
        use serde_json::json;
        let text =
            |min: usize, max: usize| json!({"type": "string", "minLength": min, "maxLength": max});
        let kind = |k: &str, props: serde_json::Value, required: &[&str]| {
            let mut p = props;
            p["kind"] = json!({"const": k});
            let mut req = vec!["kind"];
            req.extend_from_slice(required);
            json!({"type": "object", "properties": p, "required": req, "additionalProperties": false})
        };
        vec![
            kind(
                "hold_finish",
                json!({
                    "tool": tool,
                    "argument": text(0, 64),
                    "exempt": {"type": "array", "maxItems": 8, "items": text(1, 24)},
                    "feedback": text(0, 400),
                }),
                &["tool"],
            ),
            kind(
                "refuse_finish_after_error",
                json!({"tool": tool, "feedback": text(0, 400)}),
                &["tool"],
            ),
            kind(
                "repair_names",
                json!({
                    "tool": tool,
                    "argument": text(1, 64),
                    "before": text(1, 120),
                    "after": text(0, 120),
                    "separator": text(0, 8),
                    "quote": text(0, 2),
                    "bare": text(0, 16),
                }),
                &["tool", "argument", "before"],
            ),
        ]
    }

    /// The JSON schema of any rule edit (the optional `rule` of a proposed
    /// change), tool names as free strings.
    pub fn json_schema() -> serde_json::Value {
        use serde_json::json;
        let text = |max: usize| json!({"type": "string", "minLength": 1, "maxLength": max});
        let tool = text(64);
        let kind = |k: &str, props: serde_json::Value, required: &[&str]| {
            let mut p = props;
            p["kind"] = json!({"const": k});
            let mut req = vec!["kind"];
            req.extend_from_slice(required);
            json!({"type": "object", "properties": p, "required": req, "additionalProperties": false})
        };
        let fields: Vec<&str> = RegulationField::ALL.iter().map(|f| f.as_str()).collect();
        let mut kinds = vec![
            kind(
                "tool_hint",
                json!({"tool": tool, "hint": text(400)}),
                &["tool", "hint"],
            ),
            kind(
                "tool_alias",
                json!({"alias": text(64), "tool": tool}),
                &["alias", "tool"],
            ),
            kind("hash_prefixed_arg", json!({"arg": text(64)}), &["arg"]),
            kind("numeric_arg", json!({"arg": text(64)}), &["arg"]),
            kind(
                "repeat_threshold",
                json!({"count": {"type": "integer", "minimum": 1, "maximum": 30}}),
                &["count"],
            ),
            kind("prompt_rule", json!({"text": text(400)}), &["text"]),
            kind(
                "error_advice",
                json!({"contains": text(80), "advice": text(400)}),
                &["contains", "advice"],
            ),
            kind(
                "regulation",
                json!({
                    "field": {"enum": fields},
                    "value": {"type": "integer", "minimum": 1, "maximum": 30},
                }),
                &["field", "value"],
            ),
            kind(
                "skill",
                json!({
                    "title": text(80),
                    "text": text(800),
                    "keywords": {"type": "array", "maxItems": 12, "items": text(24)},
                }),
                &["title", "text"],
            ),
        ];
        kinds.extend(Self::primitive_schemas(&tool));
        json!({"anyOf": kinds})
    }
}

/// The integer thresholds of the regulation layer (`REGULATION` in
/// `src/tables.rs`) a rule edit may set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegulationField {
    /// Identical failing calls before an annotation.
    RepeatAnnotate,
    /// Identical failing calls in a row before the episode is stopped.
    RepeatStop,
    /// Identical successful calls in a row before an annotation.
    RepeatSuccessAnnotate,
    /// Failures of one tool in a row before an annotation.
    ErrorStreak,
    /// Agent turns without a successful call before a recovery message.
    StallTurns,
    /// Tool errors left when the agent is warned.
    LowErrorsLeft,
}

impl RegulationField {
    /// Every field, in the table's order.
    pub const ALL: [RegulationField; 6] = [
        Self::RepeatAnnotate,
        Self::RepeatStop,
        Self::RepeatSuccessAnnotate,
        Self::ErrorStreak,
        Self::StallTurns,
        Self::LowErrorsLeft,
    ];

    /// The field's name in `REGULATION`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RepeatAnnotate => "repeat_annotate",
            Self::RepeatStop => "repeat_stop",
            Self::RepeatSuccessAnnotate => "repeat_success_annotate",
            Self::ErrorStreak => "error_streak",
            Self::StallTurns => "stall_turns",
            Self::LowErrorsLeft => "low_errors_left",
        }
    }
}

/// A procedure to add to the skill library.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SkillSpec {
    /// Short title the skill is listed under.
    pub title: String,
    /// The procedure itself, as the model will read it.
    pub text: String,
    /// Words of a user's opening message that should retrieve it.
    #[serde(default)]
    pub keywords: Vec<String>,
}

/// The spec of one round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeSpec {
    /// The recurring failures diagnosed.
    pub failure_patterns: Vec<FailurePattern>,
    /// The changes that address them.
    pub proposed_changes: Vec<ProposedChange>,
    /// Procedures to add to the skill library (may be empty).
    #[serde(default)]
    pub skills: Vec<SkillSpec>,
    /// Free-form advice to the coder (may be empty).
    #[serde(default)]
    pub implementation_notes: String,
}

/// Why a spec was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangeSpecError {
    /// The text holds no JSON object, or it does not match the schema (the
    /// parser's message).
    #[error("not JSON matching the spec schema: {0}")]
    Schema(String),
    /// A proposed change names a file outside the harness crate's `src/`.
    #[error("proposed change {index} edits `{file}`, outside the harness's src/")]
    FileOutsideSrc {
        /// Position of the change in `proposed_changes` (0-based).
        index: usize,
        /// The file as the spec names it.
        file: String,
    },
    /// No proposed change and no skill.
    #[error("the spec proposes nothing: \"proposed_changes\" is empty and no skill is proposed")]
    Empty,
    /// An `evidence_tasks` entry names a task with no failure this round.
    #[error(
        "{what} cites task {task} as evidence, but no failure of this round is on it (the failing tasks are: {failing})"
    )]
    UnknownEvidence {
        /// The pattern or change that cites it.
        what: String,
        /// The cited task id.
        task: String,
        /// The round's failing tasks, comma-separated.
        failing: String,
    },
}

impl ChangeSpec {
    /// The JSON schema of a spec, for endpoints that constrain replies to
    /// one (`response_format`): with `failing`, every `evidence_tasks` entry
    /// must be one of those task ids, so a constrained reply cannot cite a
    /// task that did not fail; texts and lists are bounded, so a small
    /// model cannot ramble to its token cap inside a string.
    pub fn json_schema(failing: Option<&BTreeSet<String>>) -> serde_json::Value {
        use serde_json::json;
        let text = |max: usize| json!({"type": "string", "minLength": 1, "maxLength": max});
        let tasks = match failing {
            Some(f) if !f.is_empty() => json!({
                "type": "array", "minItems": 1, "maxItems": 8,
                "items": {"enum": f.iter().collect::<Vec<_>>()},
            }),
            _ => json!({"type": "array", "minItems": 1, "maxItems": 8, "items": text(40)}),
        };
        let object = |props: serde_json::Value, required: &[&str]| json!({"type": "object", "properties": props, "required": required, "additionalProperties": false});
        object(
            json!({
                "failure_patterns": {"type": "array", "minItems": 1, "maxItems": 3, "items": object(
                    json!({"name": text(80), "description": text(400), "evidence_tasks": tasks}),
                    &["name", "description", "evidence_tasks"],
                )},
                "proposed_changes": {"type": "array", "minItems": 1, "maxItems": 3, "items": object(
                    json!({
                        "layer": {"enum": ["contract", "skills", "realize", "regulate"]},
                        "file": text(80),
                        "description": text(400),
                        "rationale": text(300),
                        "evidence_tasks": tasks,
                        "rule": RuleEdit::json_schema(),
                    }),
                    &["layer", "file", "description", "rationale", "evidence_tasks"],
                )},
                "skills": {"type": "array", "maxItems": 2, "items": object(
                    json!({
                        "title": text(80),
                        "text": text(800),
                        "keywords": {"type": "array", "maxItems": 12, "items": text(24)},
                    }),
                    &["title", "text", "keywords"],
                )},
                "implementation_notes": {"type": "string", "maxLength": 400},
            }),
            &[
                "failure_patterns",
                "proposed_changes",
                "skills",
                "implementation_notes",
            ],
        )
    }

    /// Parse and validate a spec from model output: the first JSON object in
    /// the text (models often wrap it in prose or a code fence), checked
    /// against the schema and the rules (files under `src/`, something
    /// proposed).
    pub fn parse(text: &str) -> Result<ChangeSpec, ChangeSpecError> {
        let json = first_json_object(text)
            .ok_or_else(|| ChangeSpecError::Schema("no JSON object found in the reply".into()))?;
        let spec: ChangeSpec =
            serde_json::from_str(json).map_err(|e| ChangeSpecError::Schema(e.to_string()))?;
        spec.validate()?;
        Ok(spec)
    }

    /// Read `evidence_tasks` entries that name a group of the evidence
    /// (`A1`, `Group R2`) instead of a task as that group's tasks: the
    /// evidence labels groups, and a model citing a label means the tasks
    /// under it. Entries that are failing tasks, or no known label, stay as
    /// they are (the evidence check judges them). Returns what was read,
    /// as `label → tasks` lines.
    pub fn resolve_group_labels(
        &mut self,
        labels: &BTreeMap<String, Vec<String>>,
        failing: &BTreeSet<String>,
    ) -> Vec<String> {
        let mut read = BTreeSet::new();
        let label_of = |entry: &str| -> Option<(String, &Vec<String>)> {
            let t = entry.trim();
            if failing.contains(t) {
                return None;
            }
            let label = t.strip_prefix("Group ").unwrap_or(t).trim();
            labels.get(label).map(|tasks| (label.to_string(), tasks))
        };
        let mut resolve = |cited: &mut Vec<String>| {
            if !cited.iter().any(|e| label_of(e).is_some()) {
                return;
            }
            let mut out: Vec<String> = Vec::with_capacity(cited.len());
            for entry in cited.drain(..) {
                match label_of(&entry) {
                    Some((label, tasks)) => {
                        read.insert(format!("{label} → {}", tasks.join(", ")));
                        for task in tasks {
                            if !out.contains(task) {
                                out.push(task.clone());
                            }
                        }
                    }
                    _ => {
                        if !out.contains(&entry) {
                            out.push(entry);
                        }
                    }
                }
            }
            *cited = out;
        };
        for p in &mut self.failure_patterns {
            resolve(&mut p.evidence_tasks);
        }
        for c in &mut self.proposed_changes {
            resolve(&mut c.evidence_tasks);
        }
        read.into_iter().collect()
    }

    /// Check the evidence against the round's failures: every
    /// `evidence_tasks` entry must be a task that failed this round; a
    /// change backed by fewer than two distinct tasks is flagged
    /// [`ProposedChange::instance_specific`]. Returns how many were flagged.
    pub fn check_evidence(&mut self, failing: &BTreeSet<String>) -> Result<usize, ChangeSpecError> {
        let listed = || failing.iter().cloned().collect::<Vec<_>>().join(", ");
        let cited = self
            .failure_patterns
            .iter()
            .enumerate()
            .flat_map(|(i, p)| {
                p.evidence_tasks
                    .iter()
                    .map(move |t| (format!("failure pattern {} (\"{}\")", i + 1, p.name), t))
            })
            .chain(self.proposed_changes.iter().enumerate().flat_map(|(i, c)| {
                c.evidence_tasks
                    .iter()
                    .map(move |t| (format!("proposed change {}", i + 1), t))
            }));
        for (what, task) in cited {
            if !failing.contains(task.trim()) {
                return Err(ChangeSpecError::UnknownEvidence {
                    what,
                    task: task.clone(),
                    failing: listed(),
                });
            }
        }
        let mut flagged = 0;
        for c in &mut self.proposed_changes {
            let distinct: BTreeSet<&str> = c.evidence_tasks.iter().map(|t| t.trim()).collect();
            c.instance_specific = distinct.len() < 2;
            flagged += usize::from(c.instance_specific);
        }
        Ok(flagged)
    }

    /// Check the rules: something proposed, and every file under `src/` with no
    /// `..`.
    pub fn validate(&self) -> Result<(), ChangeSpecError> {
        if self.proposed_changes.is_empty() && self.skills.is_empty() {
            return Err(ChangeSpecError::Empty);
        }
        for (index, c) in self.proposed_changes.iter().enumerate() {
            let f = c.file.trim_start_matches("./");
            if !f.starts_with("src/") || f.contains("..") {
                return Err(ChangeSpecError::FileOutsideSrc {
                    index,
                    file: c.file.clone(),
                });
            }
        }
        Ok(())
    }
}

/// The first balanced `{...}` in `text`, skipping braces inside strings.
pub fn first_json_object(text: &str) -> Option<&str> {
    let start = text.find('{')?;
    let bytes = text.as_bytes();
    let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
    for (i, &b) in bytes.iter().enumerate().skip(start) {
        if in_str {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[start..=i]);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_labels_cited_as_evidence_are_read_as_their_tasks() {
        let failing: BTreeSet<String> = ["0", "3", "4"].iter().map(|s| s.to_string()).collect();
        let labels: BTreeMap<String, Vec<String>> = [
            ("R1".to_string(), vec!["3".to_string(), "4".to_string()]),
            ("A1".to_string(), vec!["0".to_string()]),
        ]
        .into();
        let mut spec = ChangeSpec::parse(GOOD).unwrap();
        spec.failure_patterns[0].evidence_tasks = vec!["A1".into(), "Group R1".into(), "0".into()];
        spec.proposed_changes[0].evidence_tasks = vec!["R1".into()];
        let read = spec.resolve_group_labels(&labels, &failing);
        assert_eq!(read, vec!["A1 → 0", "R1 → 3, 4"]);
        assert_eq!(spec.failure_patterns[0].evidence_tasks, vec!["0", "3", "4"]);
        assert_eq!(spec.proposed_changes[0].evidence_tasks, vec!["3", "4"]);
        assert_eq!(
            spec.check_evidence(&failing),
            Ok(0),
            "two tasks back the change"
        );
        // An unknown label or task stays, for the evidence check to refuse;
        // lists without a label are left exactly as written.
        let mut spec = ChangeSpec::parse(GOOD).unwrap();
        spec.failure_patterns[0].evidence_tasks = vec!["A7".into(), "0".into(), "0".into()];
        assert!(spec.resolve_group_labels(&labels, &failing).is_empty());
        assert_eq!(
            spec.failure_patterns[0].evidence_tasks,
            vec!["A7", "0", "0"]
        );
        assert!(matches!(
            spec.check_evidence(&failing),
            Err(ChangeSpecError::UnknownEvidence { task, .. }) if task == "A7"
        ));
    }

    #[test]
    fn evidence_must_be_a_failing_task_and_single_task_changes_are_flagged() {
        let failing: BTreeSet<String> = ["5", "9", "12"].iter().map(|s| s.to_string()).collect();
        let mut spec = ChangeSpec::parse(GOOD).unwrap();
        // GOOD's change cites task 5 only; its pattern cites 5 and 9.
        assert_eq!(spec.check_evidence(&failing), Ok(1));
        assert!(spec.proposed_changes[0].instance_specific);
        let json = serde_json::to_string(&spec).unwrap();
        assert!(json.contains("\"instance_specific\":true"), "{json}");
        spec.proposed_changes[0].evidence_tasks = vec!["5".into(), "12".into()];
        assert_eq!(spec.check_evidence(&failing), Ok(0));
        assert!(!spec.proposed_changes[0].instance_specific);
        spec.proposed_changes[0].evidence_tasks.push("7".into());
        let err = spec.check_evidence(&failing).unwrap_err();
        assert!(
            matches!(&err, ChangeSpecError::UnknownEvidence { task, .. } if task == "7"),
            "{err}"
        );
        assert!(err.to_string().contains("proposed change 1"), "{err}");
        assert!(err.to_string().contains("12, 5, 9"), "{err}");
        let mut bad_pattern = ChangeSpec::parse(GOOD).unwrap();
        bad_pattern.failure_patterns[0].evidence_tasks = vec!["99".into()];
        assert!(
            bad_pattern
                .check_evidence(&failing)
                .unwrap_err()
                .to_string()
                .contains("failure pattern 1")
        );
    }

    const GOOD: &str = r#"Here is the spec:
```json
{"failure_patterns": [{"name": "missing #", "description": "order ids lack the # {prefix}", "evidence_tasks": ["5", "9"]}],
 "proposed_changes": [{"layer": "realize", "file": "src/tables.rs", "description": "add order_id", "rationale": "two tasks", "evidence_tasks": ["5"],
   "rule": {"kind": "hash_prefixed_arg", "arg": "order_id"}}],
 "skills": [], "implementation_notes": "none"}
```"#;

    /// One edit of every kind: the match fails to compile when a kind is
    /// added without a sample here.
    fn every_kind() -> Vec<RuleEdit> {
        let all = vec![
            RuleEdit::ToolHint {
                tool: "t".into(),
                hint: "h".into(),
            },
            RuleEdit::ToolAlias {
                alias: "a".into(),
                tool: "t".into(),
            },
            RuleEdit::HashPrefixedArg { arg: "a".into() },
            RuleEdit::NumericArg { arg: "a".into() },
            RuleEdit::RepeatThreshold { count: 2 },
            RuleEdit::PromptRule { text: "x".into() },
            RuleEdit::ErrorAdvice {
                contains: "c".into(),
                advice: "a".into(),
            },
            RuleEdit::Regulation {
                field: RegulationField::StallTurns,
                value: 3,
            },
            RuleEdit::Skill {
                title: "t".into(),
                text: "x".into(),
                keywords: vec!["k".into()],
            },
            RuleEdit::HoldFinish {
                tool: "commit_final_answer".into(),
                argument: "query".into(),
                exempt: vec!["INSERT".into()],
                feedback: String::new(),
            },
            RuleEdit::RefuseFinishAfterError {
                tool: "commit_final_answer".into(),
                feedback: "Read the error first.".into(),
            },
            RuleEdit::RepairNames {
                tool: "execute_sql".into(),
                argument: "query".into(),
                before: "The name of this table is ".into(),
                after: ", and".into(),
                separator: String::new(),
                quote: "`".into(),
                bare: "_".into(),
            },
        ];
        for e in &all {
            match e {
                RuleEdit::ToolHint { .. }
                | RuleEdit::ToolAlias { .. }
                | RuleEdit::HashPrefixedArg { .. }
                | RuleEdit::NumericArg { .. }
                | RuleEdit::RepeatThreshold { .. }
                | RuleEdit::PromptRule { .. }
                | RuleEdit::ErrorAdvice { .. }
                | RuleEdit::Regulation { .. }
                | RuleEdit::Skill { .. }
                | RuleEdit::HoldFinish { .. }
                | RuleEdit::RefuseFinishAfterError { .. }
                | RuleEdit::RepairNames { .. } => {}
            }
        }
        all
    }

    #[test]
    fn the_spec_schema_names_every_rule_kind_with_its_fields() {
        let schema = ChangeSpec::json_schema(None);
        let kinds =
            schema["properties"]["proposed_changes"]["items"]["properties"]["rule"]["anyOf"]
                .as_array()
                .expect("the rule's kinds")
                .clone();
        // The rule stays optional.
        let required = &schema["properties"]["proposed_changes"]["items"]["required"];
        assert!(!required.as_array().unwrap().contains(&"rule".into()));
        let all = every_kind();
        assert_eq!(kinds.len(), all.len());
        for edit in all {
            let json = serde_json::to_value(&edit).unwrap();
            let kind = json["kind"].as_str().unwrap();
            let offered = kinds
                .iter()
                .find(|k| k["properties"]["kind"]["const"] == kind)
                .unwrap_or_else(|| panic!("{kind} not in the spec schema"));
            // Every field of the edit is a property of its schema, and what
            // the schema requires parses back.
            let props = offered["properties"].as_object().unwrap();
            for field in json.as_object().unwrap().keys() {
                assert!(props.contains_key(field), "{kind}.{field}");
            }
            let mut minimal = serde_json::Map::new();
            for field in offered["required"].as_array().unwrap() {
                let field = field.as_str().unwrap();
                minimal.insert(field.into(), json[field].clone());
            }
            let parsed: RuleEdit = serde_json::from_value(minimal.into())
                .unwrap_or_else(|e| panic!("{kind} from its required fields: {e}"));
            assert_eq!(serde_json::to_value(&parsed).unwrap()["kind"], json["kind"]);
        }
    }

    #[test]
    fn primitive_edits_read_with_their_defaults() {
        let hold: RuleEdit =
            serde_json::from_str(r#"{"kind": "hold_finish", "tool": "commit_final_answer"}"#)
                .unwrap();
        assert_eq!(
            hold,
            RuleEdit::HoldFinish {
                tool: "commit_final_answer".into(),
                argument: String::new(),
                exempt: vec![],
                feedback: String::new(),
            }
        );
        let names: RuleEdit = serde_json::from_str(
            r#"{"kind": "repair_names", "tool": "bash_action", "argument": "script", "before": "\""}"#,
        )
        .unwrap();
        assert!(
            matches!(&names, RuleEdit::RepairNames { after, quote, .. } if after.is_empty() && quote.is_empty())
        );
        assert!(
            serde_json::from_str::<RuleEdit>(r#"{"kind": "repair_names", "tool": "x"}"#).is_err(),
            "argument and before are required"
        );
    }

    #[test]
    fn parses_a_fenced_spec_with_braces_in_strings() {
        let spec = ChangeSpec::parse(GOOD).unwrap();
        assert_eq!(spec.proposed_changes[0].layer, Layer::Realize);
        assert_eq!(
            spec.proposed_changes[0].rule,
            Some(RuleEdit::HashPrefixedArg {
                arg: "order_id".into()
            })
        );
    }

    #[test]
    fn refuses_malformed_empty_and_escaping_specs() {
        assert!(matches!(
            ChangeSpec::parse("no json"),
            Err(ChangeSpecError::Schema(_))
        ));
        assert!(matches!(
            ChangeSpec::parse(r#"{"failure_patterns": 3}"#),
            Err(ChangeSpecError::Schema(_))
        ));
        assert_eq!(
            ChangeSpec::parse(r#"{"failure_patterns": [], "proposed_changes": []}"#),
            Err(ChangeSpecError::Empty)
        );
        // Skills alone are a proposal.
        assert!(
            ChangeSpec::parse(
                r#"{"failure_patterns": [], "proposed_changes": [], "skills": [{"title": "t", "text": "x"}]}"#
            )
            .is_ok()
        );
        let escaping = GOOD.replace("src/tables.rs", "../host/src/main.rs");
        assert!(matches!(
            ChangeSpec::parse(&escaping),
            Err(ChangeSpecError::FileOutsideSrc { .. })
        ));
    }
}

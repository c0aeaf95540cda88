//! The structured change spec that diagnosis produces and a coder
//! implements: `{failure_patterns, proposed_changes[{layer, file, description,
//! rationale, evidence_tasks}], skills[], implementation_notes}`.

use serde::{Deserialize, Serialize};

/// The harness layer a change targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
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
pub enum SpecError {
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
    #[error("the spec proposes nothing")]
    Empty,
}

impl ChangeSpec {
    /// Parse and validate a spec from model output: the first JSON object in
    /// the text (models often wrap it in prose or a code fence), checked
    /// against the schema and the rules (files under `src/`, something
    /// proposed).
    pub fn parse(text: &str) -> Result<ChangeSpec, SpecError> {
        let json = first_json_object(text)
            .ok_or_else(|| SpecError::Schema("no JSON object found in the reply".into()))?;
        let spec: ChangeSpec =
            serde_json::from_str(json).map_err(|e| SpecError::Schema(e.to_string()))?;
        spec.validate()?;
        Ok(spec)
    }

    /// Check the rules: something proposed, and every file under `src/` with no
    /// `..`.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.proposed_changes.is_empty() && self.skills.is_empty() {
            return Err(SpecError::Empty);
        }
        for (index, c) in self.proposed_changes.iter().enumerate() {
            let f = c.file.trim_start_matches("./");
            if !f.starts_with("src/") || f.contains("..") {
                return Err(SpecError::FileOutsideSrc {
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

    const GOOD: &str = r#"Here is the spec:
```json
{"failure_patterns": [{"name": "missing #", "description": "order ids lack the # {prefix}", "evidence_tasks": ["5", "9"]}],
 "proposed_changes": [{"layer": "realize", "file": "src/tables.rs", "description": "add order_id", "rationale": "two tasks", "evidence_tasks": ["5"],
   "rule": {"kind": "hash_prefixed_arg", "arg": "order_id"}}],
 "skills": [], "implementation_notes": "none"}
```"#;

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
            Err(SpecError::Schema(_))
        ));
        assert!(matches!(
            ChangeSpec::parse(r#"{"failure_patterns": 3}"#),
            Err(SpecError::Schema(_))
        ));
        assert_eq!(
            ChangeSpec::parse(r#"{"failure_patterns": [], "proposed_changes": []}"#),
            Err(SpecError::Empty)
        );
        let escaping = GOOD.replace("src/tables.rs", "../host/src/main.rs");
        assert!(matches!(
            ChangeSpec::parse(&escaping),
            Err(SpecError::FileOutsideSrc { .. })
        ));
    }
}

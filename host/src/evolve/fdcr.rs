//! FDCR: a structured discussion that turns aggregated failure evidence
//! into a [`ChangeSpec`].
//!
//! Four roles share one transcript. Each of K rounds (default 2) has three
//! turns: the **Analyst** proposes minimal changes for the recurring failure
//! groups; the **Critic** checks them for over-broad triggers, blocked
//! legitimate actions, breaks of the runtime contract and regressions on
//! tasks that passed; the **Engineer** records what is agreed, what is
//! disputed and what the next round must resolve. Then the **Moderator**
//! writes the spec as JSON, checked with [`ChangeSpec::parse`]; a rejected
//! spec goes back to the Moderator with the validation error (a follow-up
//! turn of the same conversation) up to `spec_retries` times. A clean run
//! makes `3K + 1` model calls.
//!
//! Every role call sends the same system prompt and starts its user message
//! with the same evidence and harness description, so endpoints with prefix
//! caching reuse them; the role's own instructions come last.
//!
//! Only the given evidence and harness description reach the prompts; the
//! caller renders evidence from scrubbed [`FailureRecord`]s (see
//! [`render_evidence`]).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::aggregate::FailureGroup;
use super::coder::{clip_chars, fill_template, list_src_files};
use super::records::FailureRecord;
use super::spec::ChangeSpec;
use crate::fsutil::PathError;
use crate::model::{ChatMessage, ChatModel, ChatRequest, SamplingArgs, Usage};

const SYSTEM: &str = include_str!("prompts/fdcr_system.md");
const CONTEXT: &str = include_str!("prompts/fdcr_context.md");
const ANALYST: &str = include_str!("prompts/analyst.md");
const CRITIC: &str = include_str!("prompts/critic.md");
const ENGINEER: &str = include_str!("prompts/engineer.md");
const MODERATOR: &str = include_str!("prompts/moderator.md");
const MODERATOR_RETRY: &str = include_str!("prompts/moderator_retry.md");

/// The models behind the four roles (any may be the same model).
#[derive(Clone)]
pub struct Roles {
    /// Proposes minimal changes for the recurring failure groups.
    pub analyst: Arc<dyn ChatModel>,
    /// Checks the proposals for over-broad triggers, blocked legitimate
    /// actions, contract breaks and regressions.
    pub critic: Arc<dyn ChatModel>,
    /// Records what is agreed, what is disputed and what the next round must
    /// resolve.
    pub engineer: Arc<dyn ChatModel>,
    /// Writes the final spec as JSON (and answers validation follow-ups).
    pub moderator: Arc<dyn ChatModel>,
}

impl Roles {
    /// One model plays every role.
    pub fn uniform(model: Arc<dyn ChatModel>) -> Self {
        Self {
            analyst: Arc::clone(&model),
            critic: Arc::clone(&model),
            engineer: Arc::clone(&model),
            moderator: model,
        }
    }

    fn model(&self, role: FdcrRole) -> &Arc<dyn ChatModel> {
        match role {
            FdcrRole::Analyst => &self.analyst,
            FdcrRole::Critic => &self.critic,
            FdcrRole::Engineer => &self.engineer,
            FdcrRole::Moderator | FdcrRole::Validation => &self.moderator,
        }
    }
}

/// Who wrote a transcript turn. `Validation` turns are the host's: why a
/// Moderator spec was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FdcrRole {
    /// The Analyst's turn.
    Analyst,
    /// The Critic's turn.
    Critic,
    /// The Engineer's turn.
    Engineer,
    /// The Moderator's turn (the spec, or a retry after a refusal).
    Moderator,
    /// The host's turn: why the Moderator's spec was refused.
    Validation,
}

impl FdcrRole {
    /// The role's snake_case name, as in `transcript.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Analyst => "analyst",
            Self::Critic => "critic",
            Self::Engineer => "engineer",
            Self::Moderator => "moderator",
            Self::Validation => "validation",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Self::Analyst => "Analyst",
            Self::Critic => "Critic",
            Self::Engineer => "Engineer",
            Self::Moderator => "Moderator",
            Self::Validation => "Validation",
        }
    }
}

/// One turn of the shared transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptTurn {
    /// Who wrote the turn.
    pub role: FdcrRole,
    /// Discussion round (1-based); the Moderator's turns carry K + 1.
    pub round: u32,
    /// The turn's text as written (for validation turns, the refusal).
    pub content: String,
    /// Tokens of the call that produced it (none for validation turns or
    /// when the endpoint reports none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// Why FDCR produced no spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FdcrFailure {
    /// A role's model call failed (after the client's own retries).
    ModelError,
    /// The Moderator's spec stayed invalid through every retry.
    MalformedSpec,
}

/// The result of one FDCR discussion (saved as `transcript.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FdcrOutcome {
    /// The validated spec, or `None` when the discussion failed (see `error`).
    pub spec: Option<ChangeSpec>,
    /// Every turn, in order.
    pub transcript: Vec<TranscriptTurn>,
    /// Why there is no spec.
    pub error: Option<String>,
    /// The kind of failure, when there is no spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FdcrFailure>,
    /// Model calls made, including failed ones.
    pub calls: u32,
}

/// Settings of a discussion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FdcrConfig {
    /// Analyst → Critic → Engineer rounds before the Moderator.
    pub rounds: u32,
    /// Follow-up turns for the Moderator after a refused spec.
    pub spec_retries: u32,
    /// Sampling parameters of every role call.
    pub sampling: SamplingArgs,
    /// Enters the response-cache key of every call.
    pub cache_salt: Option<String>,
}

impl Default for FdcrConfig {
    fn default() -> Self {
        Self {
            rounds: 2,
            spec_retries: 2,
            sampling: SamplingArgs::default(),
            cache_salt: None,
        }
    }
}

/// What the discussion works from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FdcrInput {
    /// Rendered, scrubbed evidence (e.g. [`render_evidence`]).
    pub evidence: String,
    /// A short description of the harness source (e.g. [`describe_harness`]).
    pub harness: String,
}

fn render_transcript(turns: &[TranscriptTurn]) -> String {
    if turns.is_empty() {
        return "(Nothing yet: you open the discussion.)\n".into();
    }
    turns
        .iter()
        .map(|t| {
            format!(
                "## Round {} · {}\n{}\n\n",
                t.round,
                t.role.title(),
                t.content.trim()
            )
        })
        .collect()
}

/// The user message of a role's turn.
fn turn_message(
    input: &FdcrInput,
    turns: &[TranscriptTurn],
    role: FdcrRole,
    round: u32,
    rounds: u32,
) -> String {
    let (instructions, heading) = match role {
        FdcrRole::Analyst => (
            ANALYST,
            format!("Your turn: Analyst, round {round} of {rounds}"),
        ),
        FdcrRole::Critic => (
            CRITIC,
            format!("Your turn: Critic, round {round} of {rounds}"),
        ),
        FdcrRole::Engineer => (
            ENGINEER,
            format!("Your turn: Engineer, round {round} of {rounds}"),
        ),
        FdcrRole::Moderator | FdcrRole::Validation => (
            MODERATOR,
            "Your turn: Moderator, after the last round".to_string(),
        ),
    };
    let last = if role == FdcrRole::Engineer && round == rounds {
        "This is the last round: say plainly what the Moderator should keep and what to drop."
    } else {
        ""
    };
    fill_template(
        CONTEXT,
        &[
            ("evidence", input.evidence.trim()),
            ("harness", input.harness.trim()),
            ("transcript", render_transcript(turns).trim_end()),
            ("heading", heading.as_str()),
            ("instructions", instructions.trim()),
            ("last_round", last),
        ],
    )
}

fn request(messages: Vec<ChatMessage>, config: &FdcrConfig) -> ChatRequest {
    let mut r = ChatRequest::new(messages).with_sampling(config.sampling.clone());
    r.cache_salt = config.cache_salt.clone();
    r
}

/// Run the discussion. Never fails: a model error or a spec that stays
/// malformed ends it with `spec: None`, the reason in `error`/`failure`, and
/// the transcript so far (the caller skips the round and records it).
pub async fn deliberate(roles: &Roles, input: &FdcrInput, config: &FdcrConfig) -> FdcrOutcome {
    let mut out = FdcrOutcome {
        spec: None,
        transcript: Vec::new(),
        error: None,
        failure: None,
        calls: 0,
    };
    let rounds = config.rounds.max(1);
    let system = SYSTEM.trim();
    for round in 1..=rounds {
        for role in [FdcrRole::Analyst, FdcrRole::Critic, FdcrRole::Engineer] {
            let user = turn_message(input, &out.transcript, role, round, rounds);
            let req = request(
                vec![ChatMessage::system(system), ChatMessage::user(user)],
                config,
            );
            out.calls += 1;
            match roles.model(role).chat(&req).await {
                Ok(reply) => out.transcript.push(TranscriptTurn {
                    role,
                    round,
                    content: reply.text().trim().to_string(),
                    usage: reply.usage,
                }),
                Err(e) => {
                    out.error = Some(format!(
                        "{} call failed in round {round}: {e}",
                        role.as_str()
                    ));
                    out.failure = Some(FdcrFailure::ModelError);
                    return out;
                }
            }
        }
    }
    let user = turn_message(
        input,
        &out.transcript,
        FdcrRole::Moderator,
        rounds + 1,
        rounds,
    );
    let mut messages = vec![ChatMessage::system(system), ChatMessage::user(user)];
    let mut last_error = String::new();
    for attempt in 0..=config.spec_retries {
        out.calls += 1;
        let reply = match roles
            .moderator
            .chat(&request(messages.clone(), config))
            .await
        {
            Ok(r) => r,
            Err(e) => {
                out.error = Some(format!("moderator call failed: {e}"));
                out.failure = Some(FdcrFailure::ModelError);
                return out;
            }
        };
        let text = reply.text().to_string();
        out.transcript.push(TranscriptTurn {
            role: FdcrRole::Moderator,
            round: rounds + 1,
            content: text.trim().to_string(),
            usage: reply.usage,
        });
        match ChangeSpec::parse(&text) {
            Ok(spec) => {
                out.spec = Some(spec);
                return out;
            }
            Err(e) => {
                last_error = e.to_string();
                out.transcript.push(TranscriptTurn {
                    role: FdcrRole::Validation,
                    round: rounds + 1,
                    content: format!("spec refused: {last_error}"),
                    usage: None,
                });
                if attempt < config.spec_retries {
                    messages.push(ChatMessage::assistant(text));
                    messages.push(ChatMessage::user(fill_template(
                        MODERATOR_RETRY,
                        &[("error", last_error.as_str())],
                    )));
                }
            }
        }
    }
    out.error = Some(format!(
        "the moderator's spec stayed malformed after {} attempt(s): {last_error}",
        config.spec_retries + 1
    ));
    out.failure = Some(FdcrFailure::MalformedSpec);
    out
}

// ---------------------------------------------------------------------------
// Inputs.

/// Most characters of `src/tables.rs` quoted in the harness description.
const TABLES_CLIP: usize = 48_000;

/// A short description of the harness source for the roles: the `src/`
/// files with their sizes and the current `src/tables.rs` (its tunables),
/// when there is one.
pub fn describe_harness(crate_dir: &Path) -> Result<String, PathError> {
    let mut out = format!(
        "Files of the harness crate (only files under src/ may change):\n{}",
        list_src_files(crate_dir)?
    );
    let tables = crate_dir.join("src/tables.rs");
    if tables.is_file() {
        let text =
            std::fs::read_to_string(&tables).map_err(|e| PathError::new("read", &tables, e))?;
        out += &format!(
            "\nThe current src/tables.rs (the harness's data-driven rules and tunables):\n```rust\n{}\n```\n",
            clip_chars(text.trim_end(), TABLES_CLIP)
        );
    }
    Ok(out)
}

/// How much evidence [`render_evidence`] writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EvidenceLimits {
    /// Failure excerpts per recurring group (one per distinct task first).
    pub excerpts_per_group: usize,
    /// Auxiliary (single-task) groups shown with an excerpt.
    pub auxiliary_groups: usize,
    /// Excerpts of successful episodes.
    pub success_excerpts: usize,
    /// Rough cap on the whole text, in characters.
    pub max_chars: usize,
}

impl Default for EvidenceLimits {
    fn default() -> Self {
        Self {
            excerpts_per_group: 3,
            auxiliary_groups: 6,
            success_excerpts: 4,
            max_chars: 30_000,
        }
    }
}

/// Tools of a record's failing or blocked calls.
fn failing_tools(r: &FailureRecord) -> BTreeSet<&str> {
    r.steps
        .iter()
        .filter(|s| s.error || s.blocked)
        .map(|s| s.name.as_str())
        .collect()
}

/// One excerpt per distinct task first, then more trials, up to `n`.
fn pick_excerpts(records: &[FailureRecord], n: usize) -> Vec<&FailureRecord> {
    let mut seen = BTreeSet::new();
    let mut picked: Vec<&FailureRecord> = records
        .iter()
        .filter(|r| seen.insert(&r.task_id))
        .take(n)
        .collect();
    for r in records {
        if picked.len() >= n {
            break;
        }
        if !picked.iter().any(|p| std::ptr::eq(*p, r)) {
            picked.push(r);
        }
    }
    picked
}

/// Render aggregated failure groups plus successful episodes on the same
/// tools as prompt evidence. Only scrubbed records go in: `successes` are
/// [`FailureRecord::from_episode`] of episodes that passed.
pub fn render_evidence(
    groups: &[FailureGroup],
    successes: &[FailureRecord],
    limits: &EvidenceLimits,
) -> String {
    let mut out = String::new();
    let mut omitted = 0usize;
    let mut add = |out: &mut String, text: String| {
        if out.len() + text.len() > limits.max_chars && !out.is_empty() {
            omitted += 1;
        } else {
            out.push_str(&text);
        }
    };
    let recurring: Vec<&FailureGroup> = groups.iter().filter(|g| g.recurring).collect();
    let auxiliary: Vec<&FailureGroup> = groups.iter().filter(|g| !g.recurring).collect();
    out += "## Recurring failure groups (primary evidence: each spans two or more tasks)\n\n";
    if recurring.is_empty() {
        out += "(none)\n\n";
    }
    for (i, g) in recurring.iter().enumerate() {
        add(
            &mut out,
            format!(
                "### Group R{}: {}\ntasks: {} ({} failing episode(s))\n",
                i + 1,
                g.key,
                g.tasks.join(", "),
                g.records.len()
            ),
        );
        for r in pick_excerpts(&g.records, limits.excerpts_per_group) {
            add(&mut out, r.excerpt());
        }
        out.push('\n');
    }
    out += "## Auxiliary failure groups (one task each: supporting evidence only)\n\n";
    if auxiliary.is_empty() {
        out += "(none)\n\n";
    }
    for (i, g) in auxiliary.iter().enumerate() {
        if i < limits.auxiliary_groups {
            add(
                &mut out,
                format!(
                    "### Group A{}: {}\ntask: {}\n",
                    i + 1,
                    g.key,
                    g.tasks.join(", ")
                ),
            );
            if let Some(r) = g.records.first() {
                add(&mut out, r.excerpt());
            }
            out.push('\n');
        } else {
            add(
                &mut out,
                format!(
                    "- Group A{}: {} (task {})\n",
                    i + 1,
                    g.key,
                    g.tasks.join(", ")
                ),
            );
        }
    }
    // Successes that used the tools the failures stumble on, covering as
    // many of those tools as possible, one per task.
    let tools: BTreeSet<&str> = groups
        .iter()
        .flat_map(|g| g.records.iter())
        .flat_map(failing_tools)
        .collect();
    let mut candidates: Vec<(usize, &FailureRecord)> = successes
        .iter()
        .filter(|r| r.success)
        .map(|r| {
            let used: BTreeSet<&str> = r.steps.iter().map(|s| s.name.as_str()).collect();
            (used.intersection(&tools).count(), r)
        })
        .filter(|(n, _)| *n > 0)
        .collect();
    candidates.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.task_id.cmp(&b.1.task_id)));
    let mut seen = BTreeSet::new();
    let picked: Vec<&FailureRecord> = candidates
        .into_iter()
        .map(|(_, r)| r)
        .filter(|r| seen.insert(r.task_id.clone()))
        .take(limits.success_excerpts)
        .collect();
    out += "\n## Successful episodes on the same tools (a change must not break these)\n\n";
    if picked.is_empty() {
        out += "(none recorded)\n";
    }
    for r in picked {
        add(&mut out, r.excerpt());
    }
    if omitted > 0 {
        out += &format!("\n({omitted} more excerpt(s) left out for length.)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{CallSource, EndReason};
    use crate::evolve::aggregate::aggregate;
    use crate::evolve::records::ToolStep;
    use crate::model::{ChatResponse, ModelError, ModelFuture};
    use std::sync::Mutex;

    /// A scripted in-process model that records requests.
    struct Script {
        replies: Mutex<Vec<Result<String, String>>>,
        seen: Mutex<Vec<ChatRequest>>,
    }

    impl Script {
        fn new(replies: Vec<Result<&str, &str>>) -> Arc<Self> {
            Arc::new(Self {
                replies: Mutex::new(
                    replies
                        .into_iter()
                        .rev()
                        .map(|r| r.map(String::from).map_err(String::from))
                        .collect(),
                ),
                seen: Mutex::new(Vec::new()),
            })
        }
    }

    impl ChatModel for Script {
        fn name(&self) -> &str {
            "script"
        }

        fn chat<'a>(&'a self, request: &'a ChatRequest) -> ModelFuture<'a> {
            self.seen.lock().unwrap().push(request.clone());
            let next = self
                .replies
                .lock()
                .unwrap()
                .pop()
                .expect("script exhausted");
            Box::pin(async move {
                match next {
                    Ok(text) => Ok(ChatResponse {
                        content: Some(text),
                        ..ChatResponse::default()
                    }),
                    Err(m) => Err(ModelError::Config(m)),
                }
            })
        }
    }

    const SPEC: &str = r#"{"failure_patterns": [{"name": "p", "description": "d", "evidence_tasks": ["1", "2"]}],
        "proposed_changes": [{"layer": "realize", "file": "src/tables.rs", "description": "x", "rationale": "y", "evidence_tasks": ["1", "2"]}],
        "skills": [], "implementation_notes": ""}"#;

    fn input() -> FdcrInput {
        FdcrInput {
            evidence: "EVIDENCE-MARK {{transcript}}".into(),
            harness: "HARNESS-MARK".into(),
        }
    }

    #[tokio::test]
    async fn one_round_then_a_spec() {
        let m = Script::new(vec![Ok("a1"), Ok("c1"), Ok("e1"), Ok(SPEC)]);
        let config = FdcrConfig {
            rounds: 1,
            ..FdcrConfig::default()
        };
        let out = deliberate(&Roles::uniform(m.clone()), &input(), &config).await;
        assert!(out.spec.is_some(), "{:?}", out.error);
        assert_eq!(out.calls, 4);
        let seen = m.seen.lock().unwrap();
        // The evidence's braces are not template keys.
        assert!(
            seen[0].messages[1]
                .text()
                .contains("EVIDENCE-MARK {{transcript}}")
        );
        assert!(
            seen[3].messages[1]
                .text()
                .contains("## Round 1 · Engineer\ne1")
        );
        // The Engineer of the last round is told so.
        assert!(seen[2].messages[1].text().contains("last round"));
    }

    #[tokio::test]
    async fn a_model_error_ends_the_discussion() {
        let m = Script::new(vec![Ok("a1"), Err("boom")]);
        let out = deliberate(&Roles::uniform(m), &input(), &FdcrConfig::default()).await;
        assert!(out.spec.is_none());
        assert_eq!(out.failure, Some(FdcrFailure::ModelError));
        assert!(
            out.error.as_deref().unwrap().contains("critic"),
            "{:?}",
            out.error
        );
        assert_eq!(out.calls, 2);
        assert_eq!(out.transcript.len(), 1);
    }

    fn record(task: &str, success: bool, tool: &str, error: bool) -> FailureRecord {
        FailureRecord {
            task_id: task.into(),
            trial: 0,
            reward: if success { 1.0 } else { 0.0 },
            success,
            db_ok: Some(success),
            communicate_ok: None,
            end: EndReason::AgentStop,
            steps: vec![ToolStep {
                name: tool.into(),
                arguments: "{\"order_id\":\"W1\"}".into(),
                result: if error {
                    "Error: Order not found".into()
                } else {
                    "{}".into()
                },
                error,
                blocked: false,
                source: CallSource::Model,
            }],
            agent_texts: vec![],
            interventions: vec![],
        }
    }

    #[test]
    fn evidence_has_groups_excerpts_and_successes_on_the_same_tools() {
        let failures = vec![
            record("1", false, "get_order_details", true),
            record("2", false, "get_order_details", true),
            record("3", false, "cancel_order", true),
        ];
        let groups = aggregate(&failures);
        let successes = vec![
            record("7", true, "get_order_details", false),
            record("8", true, "list_flights", false),
        ];
        let text = render_evidence(&groups, &successes, &EvidenceLimits::default());
        assert!(text.contains("Group R1"), "{text}");
        assert!(text.contains("tasks: 1, 2"), "{text}");
        assert!(text.contains("Group A1"), "{text}");
        assert!(
            text.contains("get_order_details({\"order_id\":\"W1\"}) -> ERROR"),
            "{text}"
        );
        assert!(text.contains("task 7 trial 0"), "{text}");
        assert!(!text.contains("task 8"), "{text}");
    }

    #[test]
    fn the_harness_description_lists_files_and_tables() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("Cargo.toml"), "").unwrap();
        std::fs::write(dir.path().join("src/lib.rs"), "mod tables;\n").unwrap();
        std::fs::write(
            dir.path().join("src/tables.rs"),
            "//! Tunables of the rules.\npub const REPEAT: u32 = 3;\n",
        )
        .unwrap();
        let text = describe_harness(dir.path()).unwrap();
        assert!(text.contains("- src/lib.rs (1 lines)\n"), "{text}");
        assert!(text.contains("pub const REPEAT: u32 = 3;"), "{text}");
        assert!(
            text.contains("- src/tables.rs (2 lines): Tunables of the rules.\n"),
            "{text}"
        );
        assert!(!text.contains("Cargo.toml"), "{text}");
    }
}

//! FDCR (Failure-Driven Collaborative Refinement): a structured discussion
//! that turns aggregated failure evidence into a [`ChangeSpec`].
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
//! with the evidence and harness description; the role's own instructions
//! come last. With [`PromptLayout::SharedPrefix`] (the default) the
//! evidence and description are fitted once per discussion, so every
//! request of it begins with the same bytes and endpoints with prefix
//! caching reuse them; [`PromptLayout::PerTurn`] fits them anew beside each
//! turn's discussion, as before the option (recorded response caches are
//! keyed on those requests).
//!
//! Only the given evidence and harness description reach the prompts; the
//! caller renders evidence from scrubbed [`FailureRecord`]s (see
//! [`render_evidence`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::aggregate::FailureGroup;
use crate::aggregate::failure_record::FailureRecord;
use crate::code::{fill_template, list_src_files};
use crate::diagnose::change_spec::{ChangeSpec, Layer};
use crate::diagnose::token_budget::{
    self, ContextBudget, Section, estimate_messages, estimate_tokens,
};
use ecdysis_model::{ChatMessage, ChatModel, ChatRequest, SamplingArgs, Usage};
use ecdysis_sys::fsutil::PathError;

const SYSTEM: &str = include_str!("../prompts/fdcr_system.md");
const CONTEXT: &str = include_str!("../prompts/fdcr_context.md");
const ANALYST: &str = include_str!("../prompts/analyst.md");
const CRITIC: &str = include_str!("../prompts/critic.md");
const ENGINEER: &str = include_str!("../prompts/engineer.md");
const MODERATOR: &str = include_str!("../prompts/moderator.md");
const MODERATOR_RETRY: &str = include_str!("../prompts/moderator_retry.md");

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
    /// The prompt's fixed parts alone exceed the context budget.
    ContextTooSmall,
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
    /// The roles' prompt as the host estimated it and as the endpoint's
    /// tokenizer counted it, where it offers one: the budget then fits the
    /// server's count, not the estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_measured: Option<TokenMeasure>,
}

/// One text's size as estimated and as the endpoint counted it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TokenMeasure {
    /// [`estimate_tokens`] of the text.
    pub estimated: usize,
    /// The endpoint's tokenizer's count.
    pub counted: usize,
}

impl TokenMeasure {
    /// Estimated tokens per counted token, bounded so that one odd count
    /// cannot make the budget absurd: prompt budgets multiply their room
    /// (in counted tokens) by it to fit estimates.
    pub fn scale(&self) -> f64 {
        if self.counted == 0 {
            return 1.0;
        }
        (self.estimated as f64 / self.counted as f64).clamp(0.5, 4.0)
    }
}

/// The longest sample sent to the endpoint's tokenizer.
const TOKENIZE_SAMPLE_CHARS: usize = 200_000;

/// The endpoint's count of the roles' material (evidence and harness
/// source, whole), beside the estimate; `None` without a tokenizer.
async fn measure_tokens(model: &Arc<dyn ChatModel>, input: &FdcrInput) -> Option<TokenMeasure> {
    let mut sample = input.evidence.full();
    sample += &input.harness.full();
    let sample: String = sample.chars().take(TOKENIZE_SAMPLE_CHARS).collect();
    let counted = model.count_tokens(&sample).await?;
    Some(TokenMeasure {
        estimated: estimate_tokens(&sample),
        counted,
    })
}

/// How the roles' prompts share the context between the evidence, the
/// harness's sources and the discussion (`--roles-layout`; `prompt_layout`
/// in `config.json`'s `roles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum PromptLayout {
    /// The evidence and sources fitted once per discussion, to the room its
    /// largest turn leaves beside the discussion's share; only the
    /// discussion is clipped per turn. Every request of a discussion then
    /// begins with the same system prompt, evidence and sources, which a
    /// server's prefix cache reuses. New runs use it.
    SharedPrefix,
    /// The evidence, sources and discussion fitted together for every turn,
    /// so the evidence is cut at a different place as the discussion grows
    /// (the only layout before `shared-prefix`; recorded experiments'
    /// response caches hold its requests). What a record that names no
    /// layout means.
    #[default]
    PerTurn,
}

impl PromptLayout {
    /// The word `--roles-layout` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            PromptLayout::SharedPrefix => "shared-prefix",
            PromptLayout::PerTurn => "per-turn",
        }
    }

    /// Whether this is [`PromptLayout::PerTurn`] (left out of `config.json`,
    /// which then reads as runs recorded before the option).
    pub fn is_per_turn(&self) -> bool {
        *self == PromptLayout::PerTurn
    }
}

/// Settings of a discussion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FdcrConfig {
    /// Analyst → Critic → Engineer rounds before the Moderator.
    pub rounds: u32,
    /// Follow-up turns for the Moderator after a refused spec.
    pub spec_retries: u32,
    /// Sampling parameters of every role call; without `max_tokens`, the
    /// budget's reply room is sent as `max_tokens`.
    pub sampling: SamplingArgs,
    /// Enters the response-cache key of every call.
    pub cache_salt: Option<String>,
    /// Every request (prompt estimate plus reply room) fits this.
    pub budget: ContextBudget,
    /// Ask the endpoint to constrain the Moderator's reply to the spec's
    /// JSON schema ([`ChangeSpec::json_schema`]).
    pub structured: bool,
    /// How the prompts are laid out (default [`PromptLayout::SharedPrefix`]).
    pub layout: PromptLayout,
}

/// Default [`FdcrConfig::rounds`] (`--fdcr-rounds`).
pub const DEFAULT_ROUNDS: u32 = 2;

impl Default for FdcrConfig {
    fn default() -> Self {
        Self {
            rounds: DEFAULT_ROUNDS,
            spec_retries: 2,
            sampling: SamplingArgs::default(),
            cache_salt: None,
            budget: ContextBudget::default(),
            structured: false,
            layout: PromptLayout::SharedPrefix,
        }
    }
}

/// What the discussion works from: sections rendered to fit the budget.
#[derive(Debug, Clone)]
pub struct FdcrInput {
    /// Scrubbed evidence (e.g. [`evidence_section`]).
    pub evidence: Section,
    /// The harness source the roles may read (e.g. [`harness_section`]).
    pub harness: Section,
    /// The tasks that failed this round: every `evidence_tasks` entry of
    /// the Moderator's spec must be one of them (`None`: not checked).
    pub failing_tasks: Option<BTreeSet<String>>,
    /// The evidence's group labels with their tasks ([`group_labels`]): a
    /// Moderator that cites a group's label means that group's tasks.
    pub group_labels: BTreeMap<String, Vec<String>>,
}

impl FdcrInput {
    /// Input from two sections, with no evidence check.
    pub fn new(evidence: impl Into<Section>, harness: impl Into<Section>) -> Self {
        FdcrInput {
            evidence: evidence.into(),
            harness: harness.into(),
            failing_tasks: None,
            group_labels: BTreeMap::new(),
        }
    }
}

fn render_turn(t: &TranscriptTurn) -> String {
    format!(
        "## Round {} · {}\n{}\n\n",
        t.round,
        t.role.title(),
        t.content.trim()
    )
}

/// The discussion so far within `cap` tokens: the newest turns whole, the
/// older ones clipped, the oldest left out with a line naming them.
fn render_transcript(turns: &[TranscriptTurn], cap: Option<usize>) -> String {
    if turns.is_empty() {
        return "(Nothing yet: you open the discussion.)\n".into();
    }
    let whole: String = turns.iter().map(render_turn).collect();
    let Some(cap) = cap else { return whole };
    if estimate_tokens(&whole) <= cap {
        return whole;
    }
    // Newest first: whole while they fit, then clipped to what is left
    // (at least a few lines each), then left out.
    let mut kept: Vec<String> = Vec::new();
    let mut omitted: Vec<String> = Vec::new();
    let reserve = 40; // the omission line
    let mut left = cap.saturating_sub(reserve);
    for t in turns.iter().rev() {
        let text = render_turn(t);
        let n = estimate_tokens(&text);
        if n <= left {
            left -= n;
            kept.push(text);
        } else if left >= 60 {
            let clipped = token_budget::clip_lines(&text, left, "turn");
            left = left.saturating_sub(estimate_tokens(&clipped));
            kept.push(clipped);
        } else {
            omitted.push(format!("{} round {}", t.role.title(), t.round));
        }
    }
    kept.reverse();
    omitted.reverse();
    let mut out = String::new();
    if !omitted.is_empty() {
        out += &format!(
            "(Left out for the context budget: {} earlier turn(s): {}.)\n\n",
            omitted.len(),
            omitted.join(", ")
        );
    }
    out + &kept.concat()
}

/// Heading, instructions and closing line of a role's turn.
fn turn_parts(role: FdcrRole, round: u32, rounds: u32) -> (&'static str, String, &'static str) {
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
    (instructions, heading, last)
}

fn fill_turn(
    role: FdcrRole,
    round: u32,
    rounds: u32,
    evidence: &str,
    harness: &str,
    transcript: &str,
) -> String {
    let (instructions, heading, last) = turn_parts(role, round, rounds);
    fill_template(
        CONTEXT,
        &[
            ("evidence", evidence.trim()),
            ("harness", harness.trim()),
            ("transcript", transcript.trim_end()),
            ("heading", heading.as_str()),
            ("instructions", instructions.trim()),
            ("last_round", last),
        ],
    )
}

/// The user message of a role's turn, its sections trimmed (largest
/// first) so the request, with `extra` more tokens to come in the same
/// conversation, fits `prompt` estimated tokens ([`prompt_room`]). `None`
/// when even the fixed parts do not.
fn turn_message(
    input: &FdcrInput,
    turns: &[TranscriptTurn],
    role: FdcrRole,
    round: u32,
    rounds: u32,
    prompt: usize,
    extra: usize,
) -> Option<String> {
    let fixed = estimate_messages(&[
        ChatMessage::system(SYSTEM.trim()),
        ChatMessage::user(fill_turn(role, round, rounds, "", "", "")),
    ]);
    let room = prompt.checked_sub(fixed + extra + SECTION_SLACK)?;
    let turns = turns.to_vec();
    let transcript = Section::new(move |cap| render_transcript(&turns, cap));
    let parts = token_budget::fit_sections(&[&input.evidence, &input.harness, &transcript], room);
    Some(fill_turn(
        role, round, rounds, &parts[0], &parts[1], &parts[2],
    ))
}

/// The budget's prompt room in estimated tokens: the budget counts the
/// server's tokens, so the room is converted at the measured rate `scale`
/// (estimated per counted token; 1 without a tokenizer).
fn prompt_room(config: &FdcrConfig, scale: f64) -> usize {
    (config.budget.prompt_tokens() as f64 * scale) as usize
}

/// A turn's room: the prompt in estimated tokens, what more the same
/// conversation needs, and the measured estimate-per-token rate.
#[derive(Clone, Copy)]
struct Room {
    prompt: usize,
    extra: usize,
    scale: f64,
}

/// Which turn of the discussion.
#[derive(Clone, Copy)]
struct TurnAt {
    role: FdcrRole,
    round: u32,
    rounds: u32,
}

/// A turn's message fitted to the budget as the endpoint counts it: the
/// measured rate is the evidence's and harness's, not the whole prompt's,
/// so where a tokenizer answers, the message is counted and, when over,
/// rebuilt in a room shrunk by the overshoot (a few times at most).
///
/// With `shared` parts (the shared-prefix layout) only the discussion is
/// fitted, and shrunk when the endpoint counts the message over; where
/// even no discussion would not fit its count, the turn falls back to the
/// per-turn fit (that turn's prefix differs, the budget holds).
async fn fitted_turn(
    model: &Arc<dyn ChatModel>,
    input: &FdcrInput,
    turns: &[TranscriptTurn],
    at: TurnAt,
    room: Room,
    config: &FdcrConfig,
    shared: Option<&mut SharedParts>,
) -> Option<String> {
    let Room {
        prompt,
        extra,
        scale,
    } = room;
    let limit = config
        .budget
        .prompt_tokens()
        .saturating_sub((extra as f64 / scale) as usize);
    if let Some(parts) = shared {
        let mut cap = parts.discussion_room(at, extra);
        for _ in 0..4 {
            let Some(c) = cap else { break };
            let (user, used) = parts.message(turns, at, c);
            let Some(counted) = counted_request(model, &user, scale).await else {
                return Some(user);
            };
            if counted <= limit {
                return Some(user);
            }
            // The overshoot in estimated tokens, with a margin.
            let cut = ((counted - limit) as f64 * scale * 1.05) as usize + 8;
            if cut <= used {
                cap = Some(used - cut);
                continue;
            }
            // The shared parts themselves are over the count: fit them
            // again, smaller, for this turn and the rest of the discussion.
            let smaller = (parts.prompt as f64 * limit as f64 / counted as f64 * 0.98) as usize;
            let Some(refit) = SharedParts::fit(
                input,
                at.rounds,
                smaller,
                parts.moderator_extra,
                scale,
                config.budget.reply_tokens,
            ) else {
                break;
            };
            *parts = refit;
            cap = parts.discussion_room(at, extra);
        }
    }
    let mut fit = prompt;
    for _ in 0..3 {
        let user = turn_message(input, turns, at.role, at.round, at.rounds, fit, extra)?;
        let Some(counted) = counted_request(model, &user, scale).await else {
            return Some(user);
        };
        if counted <= limit {
            return Some(user);
        }
        fit = (fit as f64 * limit as f64 / counted as f64 * 0.98) as usize;
    }
    turn_message(input, turns, at.role, at.round, at.rounds, fit, extra)
}

/// The endpoint's count of a role's request carrying `user` (with the
/// system prompt and both messages' overhead), or `None` when there is no
/// count to check against: no tokenizer, or none measured (`scale` 1, the
/// estimate standing for the count).
async fn counted_request(model: &Arc<dyn ChatModel>, user: &str, scale: f64) -> Option<usize> {
    if scale == 1.0 {
        return None;
    }
    let text = format!("{}\n{user}", SYSTEM.trim());
    let counted = model.count_tokens(&text).await?;
    Some(counted + 2 * token_budget::MESSAGE_OVERHEAD)
}

/// Tokens kept free besides the sections' caps (their joins, trimming).
const SECTION_SLACK: usize = 16;

/// The evidence and sources of a shared-prefix discussion, fitted once.
struct SharedParts {
    evidence: String,
    harness: String,
    /// Their estimated tokens together.
    size: usize,
    /// The prompt room, in estimated tokens, they were fitted to.
    prompt: usize,
    /// What the Moderator's turn keeps free for a retry.
    moderator_extra: usize,
}

impl SharedParts {
    /// Fit the evidence and sources for a whole discussion of `rounds`
    /// rounds: the room is the smallest any of its turns leaves for the
    /// three sections (`prompt` estimated tokens, the Moderator's keeping
    /// `moderator_extra` for a retry), and the discussion keeps the share
    /// [`token_budget::share`] gives it at its largest, every turn's reply at the
    /// budget's reply cap, so later turns do not cut the evidence. `None`
    /// when even the fixed parts do not fit.
    fn fit(
        input: &FdcrInput,
        rounds: u32,
        prompt: usize,
        moderator_extra: usize,
        scale: f64,
        reply_tokens: usize,
    ) -> Option<SharedParts> {
        let mut room = usize::MAX;
        let mut turns = vec![(FdcrRole::Moderator, rounds + 1, moderator_extra)];
        for round in 1..=rounds {
            for role in [FdcrRole::Analyst, FdcrRole::Critic, FdcrRole::Engineer] {
                turns.push((role, round, 0));
            }
        }
        for (role, round, extra) in turns {
            room = room.min(turn_room(role, round, rounds, prompt, extra)?);
        }
        let header = estimate_tokens(&render_turn(&TranscriptTurn {
            role: FdcrRole::Moderator,
            round: rounds + 1,
            content: String::new(),
            usage: None,
        }));
        let reply = (reply_tokens as f64 * scale).ceil() as usize;
        let discussion = 3 * rounds as usize * (reply + header);
        let sizes = [
            estimate_tokens(&input.evidence.full()),
            estimate_tokens(&input.harness.full()),
            discussion,
        ];
        let kept = token_budget::share(&sizes, room)[2];
        let parts = token_budget::fit_sections(&[&input.evidence, &input.harness], room - kept);
        let size = estimate_tokens(&parts[0]) + estimate_tokens(&parts[1]);
        let [evidence, harness]: [String; 2] = parts.try_into().ok()?;
        Some(SharedParts {
            evidence,
            harness,
            size,
            prompt,
            moderator_extra,
        })
    }

    /// The discussion's room in a turn: what the turn leaves beside the
    /// shared parts.
    fn discussion_room(&self, at: TurnAt, extra: usize) -> Option<usize> {
        turn_room(at.role, at.round, at.rounds, self.prompt, extra)?.checked_sub(self.size)
    }

    /// A turn's message with the discussion within `cap` tokens, and the
    /// discussion's estimated tokens.
    fn message(&self, turns: &[TranscriptTurn], at: TurnAt, cap: usize) -> (String, usize) {
        let turns = turns.to_vec();
        let transcript = Section::new(move |cap| render_transcript(&turns, cap));
        let discussion = token_budget::fit_sections(&[&transcript], cap);
        let user = fill_turn(
            at.role,
            at.round,
            at.rounds,
            &self.evidence,
            &self.harness,
            &discussion[0],
        );
        (user, estimate_tokens(&discussion[0]))
    }
}

/// The room a turn leaves for its three sections within `prompt`
/// estimated tokens, `extra` more to come in its conversation (as
/// [`turn_message`] computes it).
fn turn_room(
    role: FdcrRole,
    round: u32,
    rounds: u32,
    prompt: usize,
    extra: usize,
) -> Option<usize> {
    let fixed = estimate_messages(&[
        ChatMessage::system(SYSTEM.trim()),
        ChatMessage::user(fill_turn(role, round, rounds, "", "", "")),
    ]);
    prompt.checked_sub(fixed + extra + SECTION_SLACK)
}

/// A Moderator retry's message with the error (clipped).
fn retry_message(error: &str) -> String {
    fill_template(
        MODERATOR_RETRY,
        &[("error", crate::code::clip_chars(error, 600).as_str())],
    )
}

/// Room a Moderator turn keeps free for one retry: the refused reply and
/// the retry message (earlier refused attempts are not kept).
fn retry_room(config: &FdcrConfig) -> usize {
    if config.spec_retries == 0 {
        return 0;
    }
    config.budget.reply_tokens
        + 2 * token_budget::MESSAGE_OVERHEAD
        + estimate_tokens(&retry_message(&"x".repeat(600)))
}

fn request(messages: Vec<ChatMessage>, config: &FdcrConfig) -> ChatRequest {
    let mut sampling = config.sampling.clone();
    if sampling.max_tokens.is_none() {
        sampling.max_tokens = Some(config.budget.reply_tokens as u32);
    }
    let mut r = ChatRequest::new(messages).with_sampling(sampling);
    r.cache_salt = config.cache_salt.clone();
    r
}

fn too_small(out: &mut FdcrOutcome, role: FdcrRole, config: &FdcrConfig) {
    out.error = Some(format!(
        "the {} prompt does not fit a context of {} tokens with {} reserved for the reply, even with the evidence and sources left out",
        role.as_str(),
        config.budget.context_tokens,
        config.budget.reply_tokens
    ));
    out.failure = Some(FdcrFailure::ContextTooSmall);
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
        tokens_measured: None,
    };
    out.tokens_measured = measure_tokens(&roles.analyst, input).await;
    let scale = out.tokens_measured.map_or(1.0, |m| m.scale());
    let rounds = config.rounds.max(1);
    let Some((mut shared, room)) = fit_layout(roles, input, config, rounds, scale).await else {
        too_small(&mut out, FdcrRole::Moderator, config);
        return out;
    };
    if !discuss(
        roles,
        input,
        config,
        rounds,
        room,
        shared.as_mut(),
        &mut out,
    )
    .await
    {
        return out;
    }
    moderate(roles, input, config, rounds, room, shared.as_mut(), out).await
}

/// The prompt room of every turn and the estimate's scale (`extra` 0),
/// with the shared-prefix layout's evidence and sources fitted once for
/// the whole discussion (`None` in the per-turn layout); `None` when the
/// Moderator's prompt cannot fit even without them.
async fn fit_layout(
    roles: &Roles,
    input: &FdcrInput,
    config: &FdcrConfig,
    rounds: u32,
    mut scale: f64,
) -> Option<(Option<SharedParts>, Room)> {
    let mut prompt = prompt_room(config, scale);
    let system = SYSTEM.trim();
    let mut shared = match config.layout {
        PromptLayout::PerTurn => None,
        PromptLayout::SharedPrefix => Some(SharedParts::fit(
            input,
            rounds,
            prompt,
            retry_room(config),
            scale,
            config.budget.reply_tokens,
        )?),
    };
    if let Some(parts) = shared.as_mut()
        && scale != 1.0
    {
        // The rate measured on the material can be off for the prompt it
        // makes: the Moderator's turn with the fitted parts is counted, and
        // where its rate is lower the parts are fitted again at that rate,
        // so that later turns need not cut them (which would change the
        // prefix).
        let at = TurnAt {
            role: FdcrRole::Moderator,
            round: rounds + 1,
            rounds,
        };
        let (user, _) = parts.message(&[], at, parts.size);
        let text = format!("{system}\n{user}");
        if let Some(counted) = roles.analyst.count_tokens(&text).await
            && counted > 0
        {
            let rate = (estimate_tokens(&text) as f64 / counted as f64).clamp(0.5, 4.0);
            if rate < scale {
                scale = rate;
                prompt = prompt_room(config, scale);
                let extra = retry_room(config);
                let reply = config.budget.reply_tokens;
                *parts = SharedParts::fit(input, rounds, prompt, extra, scale, reply)?;
            }
        }
    }
    Some((
        shared,
        Room {
            prompt,
            extra: 0,
            scale,
        },
    ))
}

/// The rounds of the Analyst, the Critic and the Engineer, each turn
/// appended to `out`'s transcript. Whether they all spoke (otherwise `out`
/// says why not).
async fn discuss(
    roles: &Roles,
    input: &FdcrInput,
    config: &FdcrConfig,
    rounds: u32,
    room: Room,
    mut shared: Option<&mut SharedParts>,
    out: &mut FdcrOutcome,
) -> bool {
    let system = SYSTEM.trim();
    for round in 1..=rounds {
        for role in [FdcrRole::Analyst, FdcrRole::Critic, FdcrRole::Engineer] {
            let at = TurnAt {
                role,
                round,
                rounds,
            };
            let model = roles.model(role);
            let Some(user) = fitted_turn(
                model,
                input,
                &out.transcript,
                at,
                Room {
                    prompt: room.prompt,
                    extra: 0,
                    scale: room.scale,
                },
                config,
                shared.as_deref_mut(),
            )
            .await
            else {
                too_small(out, role, config);
                return false;
            };
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
                    return false;
                }
            }
        }
    }
    true
}

/// The Moderator's turn after the rounds: its spec, checked, with up to
/// `spec_retries` follow-ups naming what was refused.
async fn moderate(
    roles: &Roles,
    input: &FdcrInput,
    config: &FdcrConfig,
    rounds: u32,
    room: Room,
    shared: Option<&mut SharedParts>,
    mut out: FdcrOutcome,
) -> FdcrOutcome {
    let system = SYSTEM.trim();
    let at = TurnAt {
        role: FdcrRole::Moderator,
        round: rounds + 1,
        rounds,
    };
    let Some(user) = fitted_turn(
        &roles.moderator,
        input,
        &out.transcript,
        at,
        Room {
            prompt: room.prompt,
            extra: retry_room(config),
            scale: room.scale,
        },
        config,
        shared,
    )
    .await
    else {
        too_small(&mut out, FdcrRole::Moderator, config);
        return out;
    };
    let opening = vec![ChatMessage::system(system), ChatMessage::user(user)];
    let format = config.structured.then(|| {
        ecdysis_model::response_format_json_schema(
            "change_spec",
            ChangeSpec::json_schema(input.failing_tasks.as_ref()),
        )
    });
    let mut messages = opening.clone();
    let mut last_error = String::new();
    let mut previous_reply: Option<String> = None;
    for attempt in 0..=config.spec_retries {
        out.calls += 1;
        let mut req = request(messages.clone(), config);
        if let Some((key, value)) = &format {
            req.extra.insert(key.clone(), value.clone());
        }
        let reply = match roles.moderator.chat(&req).await {
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
        let mut read_as = vec![];
        let checked = ChangeSpec::parse(&text).and_then(|mut spec| {
            if let Some(failing) = &input.failing_tasks {
                read_as = spec.resolve_group_labels(&input.group_labels, failing);
                spec.check_evidence(failing)?;
            }
            Ok(spec)
        });
        if !read_as.is_empty() {
            out.transcript.push(TranscriptTurn {
                role: FdcrRole::Validation,
                round: rounds + 1,
                content: format!(
                    "evidence cited by group label, read as the group's tasks: {}",
                    read_as.join("; ")
                ),
                usage: None,
            });
        }
        match checked {
            Ok(spec) => {
                out.spec = Some(spec);
                return out;
            }
            Err(e) => {
                let repeated =
                    e.to_string() == last_error && previous_reply.as_deref() == Some(text.trim());
                previous_reply = Some(text.trim().to_string());
                last_error = e.to_string();
                out.transcript.push(TranscriptTurn {
                    role: FdcrRole::Validation,
                    round: rounds + 1,
                    content: format!("spec refused: {last_error}"),
                    usage: None,
                });
                if repeated {
                    // The same refused reply to the same follow-up: the
                    // next attempt would send exactly the same request.
                    out.error = Some(format!(
                        "the moderator repeated its refused spec word for word after {} attempt(s): {last_error}",
                        attempt + 1
                    ));
                    out.failure = Some(FdcrFailure::MalformedSpec);
                    return out;
                }
                if attempt < config.spec_retries {
                    // Only the latest refused reply stays in the
                    // conversation, so every retry fits the same room.
                    // A reply's estimate may exceed the tokens it took:
                    // clip it to the room kept for it.
                    messages = opening.clone();
                    messages.push(ChatMessage::assistant(token_budget::clip_lines(
                        &text,
                        config.budget.reply_tokens,
                        "reply",
                    )));
                    messages.push(ChatMessage::user(retry_message(&last_error)));
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

/// What the failures of a diagnosis unit touch: the harness layers whose
/// hook code the roles should read, and the tools involved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HarnessFocus {
    /// Layers a failure went through or could be fixed in.
    pub layers: BTreeSet<Layer>,
    /// Tools of failing, blocked or rewritten calls.
    pub tools: BTreeSet<String>,
    /// Layers whose hook acted in a failure: their entry file (`mod.rs`)
    /// is always shown, clipped rather than left out.
    pub acted: BTreeSet<Layer>,
    /// The failures' domain, by its short name (`dbbench`): the rule
    /// tables are then shown as that domain's entries only.
    pub domain: Option<String>,
}

impl HarnessFocus {
    /// The layers and tools a set of failure records touch: interventions
    /// name their hook; failing calls involve argument checks (realize) and
    /// the tool descriptions (contract); calls rescued from text, realize;
    /// runs that hit a step or error cap, regulate; a wrong outcome with no
    /// failing call, the procedures (skills) and descriptions (contract).
    pub fn of_failures<'a>(records: impl IntoIterator<Item = &'a FailureRecord>) -> HarnessFocus {
        use ecdysis_runner::agent::{CallSource, EndReason};
        let mut f = HarnessFocus::default();
        for r in records {
            if !r.domain.is_empty() {
                let short = r.domain.rsplit('/').next().unwrap_or(&r.domain);
                f.domain = Some(short.to_string());
            }
            for i in &r.interventions {
                let hook = i.split(':').next().unwrap_or_default();
                if let Some(layer) = Layer::ALL.into_iter().find(|l| l.as_str() == hook) {
                    f.layers.insert(layer);
                    // The contract and skills hooks act in every episode;
                    // what acted *on the failure* is realize or regulate.
                    if matches!(layer, Layer::Realize | Layer::Regulate) {
                        f.acted.insert(layer);
                    }
                }
            }
            let mut failed_call = false;
            for s in &r.steps {
                if s.error || s.blocked {
                    failed_call = true;
                    f.tools.insert(s.name.clone());
                    f.layers.insert(Layer::Realize);
                    if s.error {
                        f.layers.insert(Layer::Contract);
                    }
                }
                if matches!(s.source, CallSource::Realized | CallSource::Rewritten) {
                    f.tools.insert(s.name.clone());
                    f.layers.insert(Layer::Realize);
                }
            }
            if r.agent_texts
                .iter()
                .any(|t| crate::aggregate::looks_like_text_call(t))
            {
                f.layers.insert(Layer::Realize);
            }
            if matches!(r.end, EndReason::MaxSteps | EndReason::TooManyErrors) {
                f.layers.insert(Layer::Regulate);
            }
            if !failed_call && (r.db_ok == Some(false) || r.communicate_ok == Some(false)) {
                f.layers.insert(Layer::Skills);
                f.layers.insert(Layer::Contract);
            }
        }
        f
    }
}

/// The source folder of a layer in a crate laid out like `harness-template`.
pub fn layer_dir(layer: Layer) -> &'static str {
    match layer {
        Layer::Contract => "src/contract/",
        Layer::Skills => "src/skills/",
        Layer::Realize => "src/realize/",
        Layer::Regulate => "src/regulate/",
    }
}

/// The files worth quoting for `focus`, most relevant first, each with
/// whether it must be shown (clipped rather than left out): the entry file
/// (`mod.rs`) of each layer whose hook acted in the failures, then
/// `src/tables.rs` (the rules and tunables: with a known domain, that
/// domain's entries as the edits that would add them), then each touched
/// layer's other files (those naming a focus tool first, smaller first).
fn focus_files(
    tree: &crate::code::diff::Tree,
    focus: &HarnessFocus,
) -> Vec<(String, String, bool)> {
    let text = |p: &str| std::str::from_utf8(&tree[p]).ok().map(str::to_string);
    let mut out = Vec::new();
    for layer in &focus.acted {
        let entry = format!("{}mod.rs", layer_dir(*layer));
        if tree.contains_key(&entry)
            && let Some(t) = text(&entry)
        {
            out.push((entry, t, true));
        }
    }
    if tree.contains_key("src/tables.rs")
        && let Some(t) = text("src/tables.rs")
    {
        match &focus.domain {
            Some(domain) => out.push((
                format!("src/tables.rs: the entries for {domain}"),
                crate::code::rule_coder::domain_entries(&t, domain),
                true,
            )),
            None => out.push(("src/tables.rs".to_string(), t, true)),
        }
    }
    for layer in &focus.layers {
        let dir = layer_dir(*layer);
        let mut files: Vec<(usize, bool, usize, String, String)> = tree
            .iter()
            .filter(|(p, _)| p.starts_with(dir))
            .filter(|(p, _)| !out.iter().any(|(q, _, _)| q == *p))
            .filter_map(|(p, b)| {
                let t = std::str::from_utf8(b).ok()?.to_string();
                let hits = focus.tools.iter().filter(|tool| t.contains(*tool)).count();
                Some((hits, !p.ends_with("/mod.rs"), b.len(), p.clone(), t))
            })
            .collect();
        files.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        out.extend(files.into_iter().map(|(_, _, _, p, t)| (p, t, false)));
    }
    out
}

/// The harness source the roles read, within a token cap: the `src/` files
/// with their sizes, `src/tables.rs`, and the hook code of the layers
/// `focus` names; files that do not fit are named in a closing line (the
/// first, most relevant one is clipped rather than dropped).
pub fn harness_section(crate_dir: &Path, focus: &HarnessFocus) -> Result<Section, PathError> {
    let listing = format!(
        "Files of the harness crate (only files under src/ may change):\n{}",
        list_src_files(crate_dir)?
    );
    let tree = crate::code::Snapshot::take(crate_dir)?.src_tree();
    let files = focus_files(&tree, focus);
    let layers: Vec<&str> = focus
        .layers
        .iter()
        .map(|l| layer_dir(*l).trim_end_matches('/'))
        .collect();
    Ok(Section::new(move |cap| {
        render_harness(&listing, &files, &layers, cap)
    }))
}

fn fence_file(path: &str, text: &str) -> String {
    let about = if path == "src/tables.rs" {
        " (the harness's data-driven rules and tunables)"
    } else {
        ""
    };
    format!("\n### {path}{about}\n```rust\n{}\n```\n", text.trim_end())
}

fn render_harness(
    listing: &str,
    files: &[(String, String, bool)],
    layers: &[&str],
    cap: Option<usize>,
) -> String {
    let mut head = listing.to_string();
    if !layers.is_empty() {
        head += &format!(
            "\nThe failures touch these layers; their hook code follows: {}\n",
            layers.join(", ")
        );
    }
    let Some(cap) = cap else {
        return head
            + &files
                .iter()
                .map(|(p, t, _)| fence_file(p, t))
                .collect::<String>();
    };
    // The listing names every file; the files that must be shown come
    // before its tail when both do not fit.
    let listing_cap = if files.iter().any(|(_, _, must)| *must) {
        cap / 3
    } else {
        cap
    };
    let mut out = token_budget::clip_lines(&head, listing_cap, "file list");
    let mut used = estimate_tokens(&out);
    let mut hidden: Vec<&str> = Vec::new();
    // Room for the closing line: it names the files left out when that
    // takes at most a quarter of the cap, else counts them.
    let names_room = 24
        + files
            .iter()
            .map(|(p, _, _)| estimate_tokens(p) + 1)
            .sum::<usize>();
    let name_them = names_room <= cap / 4;
    let footer_room = if name_them { names_room } else { 40 };
    // Room the files that must be shown still need, so that the files
    // before them do not take it.
    let mut owed: usize = files
        .iter()
        .filter(|(_, _, must)| *must)
        .map(|(p, t, _)| estimate_tokens(&fence_file(p, t)).min(cap / 4))
        .sum();
    for (i, (p, t, must)) in files.iter().enumerate() {
        let block = fence_file(p, t);
        let n = estimate_tokens(&block);
        if *must {
            owed = owed.saturating_sub(n.min(cap / 4));
        }
        let left = cap.saturating_sub(used + footer_room + owed);
        if n <= left {
            out += &block;
            used += n;
        } else if (i == 0 || *must) && left > 200 {
            let frame = estimate_tokens(&fence_file(p, "")) + 2;
            let clipped = fence_file(p, &token_budget::clip_lines(t, left - frame, "file"));
            used += estimate_tokens(&clipped);
            out += &clipped;
        } else {
            hidden.push(p);
        }
    }
    if !hidden.is_empty() {
        out += &format!(
            "\n(Not shown for the context budget: {}.)\n",
            if name_them {
                hidden.join(", ")
            } else {
                format!("{} file(s) of the failures' layers", hidden.len())
            }
        );
    }
    out
}

/// The whole harness description for the roles with no focus: the `src/`
/// files with their sizes and the current `src/tables.rs`.
pub fn describe_harness(crate_dir: &Path) -> Result<String, PathError> {
    Ok(harness_section(crate_dir, &HarnessFocus::default())?.full())
}

/// How much evidence [`render_evidence`] writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EvidenceLimits {
    /// Failure excerpts per recurring group (one per distinct task first).
    pub excerpts_per_group: usize,
    /// Excerpts of successful episodes.
    pub success_excerpts: usize,
    /// Rough cap on the whole text, in characters.
    pub max_chars: usize,
    /// Cap on the whole text in estimated tokens (the context budget).
    pub max_tokens: Option<usize>,
}

impl Default for EvidenceLimits {
    fn default() -> Self {
        Self {
            excerpts_per_group: 3,
            success_excerpts: 4,
            max_chars: 30_000,
            max_tokens: None,
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

/// A group's label and details, and the attributes its failures share
/// that are not part of its key (calls written as text, repeated failing
/// calls, harness interventions), one line each.
fn group_facts(g: &FailureGroup) -> String {
    let mut out = format!("where a fix would live: {}\n", g.label.text());
    for d in &g.details {
        out += &format!("- {}: {} task(s)\n", d.detail, d.tasks.len());
    }
    let share = |f: &dyn Fn(&FailureRecord) -> bool| g.records.iter().filter(|r| f(r)).count();
    let n = g.records.len();
    let text_calls = share(&|r| !r.text_call_replies.is_empty());
    if text_calls > 0 {
        out += &format!("calls written as text in {text_calls} of {n} episode(s)\n");
    }
    let repeats = share(&crate::aggregate::repeated_failing_call);
    if repeats > 0 {
        out += &format!("an identical failing call repeated in {repeats} of {n}\n");
    }
    let mut fired: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &g.records {
        let distinct: BTreeSet<&str> = r.interventions.iter().map(String::as_str).collect();
        for i in distinct {
            *fired.entry(i).or_default() += 1;
        }
    }
    if !fired.is_empty() {
        let list: Vec<String> = fired.iter().map(|(i, k)| format!("{i} ({k})")).collect();
        out += &format!("harness interventions: {}\n", list.join(", "));
    }
    out
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

/// One piece of rendered evidence: kept in document order, chosen by
/// priority when the evidence must be trimmed.
struct Piece {
    /// Lower goes in first.
    priority: u8,
    text: String,
    /// What leaving it out means: `Some(group label)` for a failure
    /// excerpt, `None` for a success excerpt; headings are never counted.
    excerpt_of: Option<Option<String>>,
    /// A shorter stand-in for the piece at this index: kept only when that
    /// piece is not.
    instead_of: Option<usize>,
}

/// The label each group carries in the evidence [`render_evidence`]
/// writes (`R1`, `R2`… for recurring groups, `A1`, `A2`… for one-task
/// groups, in order), with the group's tasks.
pub fn group_labels(groups: &[FailureGroup]) -> BTreeMap<String, Vec<String>> {
    let labelled = |prefix: &'static str, recurring: bool| {
        groups
            .iter()
            .filter(move |g| g.recurring == recurring)
            .enumerate()
            .map(move |(i, g)| (format!("{prefix}{}", i + 1), g.tasks.clone()))
    };
    labelled("R", true).chain(labelled("A", false)).collect()
}

/// Render aggregated failure groups plus successful episodes on the same
/// tools as prompt evidence. Only scrubbed records go in: `successes` are
/// [`FailureRecord::from_episode`] of episodes that passed. Under a cap
/// (`max_chars`, `max_tokens`) the pieces go in by priority (each recurring
/// group's heading and first excerpt, a success on the same tools, more
/// excerpts, the auxiliary groups, more successes) and a closing line says
/// how many failure and success excerpts were left out, and of which groups.
pub fn render_evidence(
    groups: &[FailureGroup],
    successes: &[FailureRecord],
    limits: &EvidenceLimits,
) -> String {
    let mut pieces: Vec<Piece> = Vec::new();
    let push = |pieces: &mut Vec<Piece>, priority, text: String, excerpt_of| {
        pieces.push(Piece {
            priority,
            text,
            excerpt_of,
            instead_of: None,
        })
    };
    // The labels here are the ones `group_labels` gives.
    let recurring: Vec<&FailureGroup> = groups.iter().filter(|g| g.recurring).collect();
    let auxiliary: Vec<&FailureGroup> = groups.iter().filter(|g| !g.recurring).collect();
    push(
        &mut pieces,
        0,
        "## Recurring failure groups (primary evidence: each spans two or more tasks)\n\n".into(),
        None,
    );
    if recurring.is_empty() {
        push(&mut pieces, 0, "(none)\n\n".into(), None);
    }
    for (i, g) in recurring.iter().enumerate() {
        let label = format!("R{}", i + 1);
        push(
            &mut pieces,
            0,
            format!(
                "### Group {label}: {}\n{}tasks: {} ({} failing episode(s))\n",
                g.key,
                group_facts(g),
                g.tasks.join(", "),
                g.records.len()
            ),
            None,
        );
        for (k, r) in pick_excerpts(&g.records, limits.excerpts_per_group)
            .into_iter()
            .enumerate()
        {
            let priority = if k == 0 { 1 } else { 3 };
            push(
                &mut pieces,
                priority,
                r.excerpt(),
                Some(Some(label.clone())),
            );
        }
        push(&mut pieces, 0, "\n".into(), None);
    }
    push(
        &mut pieces,
        0,
        "## Auxiliary failure groups (one task each: supporting evidence only)\n\n".into(),
        None,
    );
    if auxiliary.is_empty() {
        push(&mut pieces, 0, "(none)\n\n".into(), None);
    }
    // Every single-task group gets its excerpt; the token budget, not a
    // fixed count, decides how many fit (the key alone is the fallback).
    for (i, g) in auxiliary.iter().enumerate() {
        let label = format!("A{}", i + 1);
        let mut text = format!(
            "### Group {label}: {}\n{}task: {}\n",
            g.key,
            group_facts(g),
            g.tasks.join(", ")
        );
        if let Some(r) = g.records.first() {
            text += &r.excerpt();
        }
        text.push('\n');
        push(&mut pieces, 4, text, Some(Some(label.clone())));
        pieces.push(Piece {
            priority: 6,
            text: format!("- Group {label}: {} (task {})\n", g.key, g.tasks.join(", ")),
            excerpt_of: None,
            instead_of: Some(pieces.len() - 1),
        });
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
    push(
        &mut pieces,
        0,
        "\n## Successful episodes on the same tools (a change must not break these)\n\n".into(),
        None,
    );
    if picked.is_empty() {
        push(&mut pieces, 0, "(none recorded)\n".into(), None);
    }
    for (k, r) in picked.into_iter().enumerate() {
        push(
            &mut pieces,
            if k == 0 { 2 } else { 5 },
            r.excerpt(),
            Some(None),
        );
    }
    select_pieces(&pieces, limits)
}

/// The pieces that fit the limits, by priority, in document order, with a
/// closing line for what was left out.
fn select_pieces(pieces: &[Piece], limits: &EvidenceLimits) -> String {
    let closing_room = 64;
    let max_tokens = limits.max_tokens.map(|t| t.saturating_sub(closing_room));
    let mut order: Vec<usize> = (0..pieces.len()).collect();
    order.sort_by_key(|&i| (pieces[i].priority, i));
    let mut keep = vec![false; pieces.len()];
    let (mut chars, mut tokens) = (0usize, 0usize);
    for i in order {
        let p = &pieces[i];
        if p.instead_of.is_some_and(|j| keep[j]) {
            continue;
        }
        let (c, t) = (p.text.len(), estimate_tokens(&p.text));
        let fits_chars = chars + c <= limits.max_chars || chars == 0;
        let fits_tokens = max_tokens.is_none_or(|m| tokens + t <= m);
        if fits_chars && fits_tokens {
            keep[i] = true;
            chars += c;
            tokens += t;
        }
    }
    let mut out = String::new();
    let (mut failures, mut succ) = (0usize, 0usize);
    let mut groups: Vec<&str> = Vec::new();
    for (p, kept) in pieces.iter().zip(&keep) {
        if *kept {
            out += &p.text;
            continue;
        }
        match &p.excerpt_of {
            Some(Some(label)) => {
                failures += 1;
                if !groups.contains(&label.as_str()) {
                    groups.push(label);
                }
            }
            Some(None) => succ += 1,
            None => {}
        }
    }
    if failures + succ > 0 {
        let mut parts = Vec::new();
        if failures > 0 {
            parts.push(format!(
                "{failures} failure excerpt(s) (group(s) {})",
                groups.join(", ")
            ));
        }
        if succ > 0 {
            parts.push(format!("{succ} success excerpt(s)"));
        }
        out += &format!(
            "\n(Left out to fit the context budget: {}.)\n",
            parts.join(", ")
        );
    }
    out
}

/// The evidence of `groups` as a section the budget can trim.
pub fn evidence_section(
    groups: &[FailureGroup],
    successes: &[FailureRecord],
    limits: &EvidenceLimits,
) -> Section {
    let (groups, successes, limits) = (groups.to_vec(), successes.to_vec(), limits.clone());
    Section::new(move |cap| {
        render_evidence(
            &groups,
            &successes,
            &EvidenceLimits {
                max_tokens: cap.or(limits.max_tokens),
                ..limits.clone()
            },
        )
    })
}

/// The excerpts of failures on `tasks`, each as the per-failure evidence
/// Self-Evolution's coder gets, aggregated by group (the FDCR coder's view
/// of the evidence a spec cites, and the no-FDCR coder's of every failure).
pub fn failure_excerpts(groups: &[FailureGroup], tasks: Option<&BTreeSet<String>>) -> String {
    let mut out = String::new();
    for g in groups {
        let records: Vec<&FailureRecord> = g
            .records
            .iter()
            .filter(|r| tasks.is_none_or(|t| t.contains(&r.task_id)))
            .collect();
        if records.is_empty() {
            continue;
        }
        out += &format!(
            "### {} ({}): {}\n",
            if g.recurring {
                "Recurring"
            } else {
                "Single-task"
            },
            g.tasks.join(", "),
            g.key
        );
        for r in records {
            out += &r.excerpt();
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::aggregate;
    use crate::aggregate::failure_record::ToolStep;
    use ecdysis_model::{ChatResponse, ModelError, ModelFuture};
    use ecdysis_runner::agent::{CallSource, EndReason};
    use std::sync::Mutex;

    /// A scripted in-process model that records requests.
    struct Script {
        replies: Mutex<Vec<Result<String, String>>>,
        seen: Mutex<Vec<ChatRequest>>,
        /// What the endpoint's tokenizer answers: the estimate divided by
        /// this (`None`: no tokenizer).
        tokenizer_divides_by: Option<usize>,
        /// After the first count, the estimate times this instead (a
        /// prompt whose rate differs from the measured sample's).
        later_counts_times: Option<f64>,
        counts: Mutex<u32>,
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
                tokenizer_divides_by: None,
                later_counts_times: None,
                counts: Mutex::new(0),
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

        fn count_tokens<'a>(&'a self, text: &'a str) -> ecdysis_model::CountFuture<'a> {
            let mut counts = self.counts.lock().unwrap();
            *counts += 1;
            let n = match (self.later_counts_times, *counts) {
                (Some(f), 2..) => Some((estimate_tokens(text) as f64 * f) as usize),
                _ => self.tokenizer_divides_by.map(|d| estimate_tokens(text) / d),
            };
            Box::pin(async move { n })
        }
    }

    const SPEC: &str = r#"{"failure_patterns": [{"name": "p", "description": "d", "evidence_tasks": ["1", "2"]}],
        "proposed_changes": [{"layer": "realize", "file": "src/tables.rs", "description": "x", "rationale": "y", "evidence_tasks": ["1", "2"]}],
        "skills": [], "implementation_notes": ""}"#;

    fn input() -> FdcrInput {
        FdcrInput::new("EVIDENCE-MARK {{transcript}}", "HARNESS-MARK")
    }

    /// With the endpoint's tokenizer the budget fits the server's count:
    /// where the estimate runs twice the count, a prompt that had to drop
    /// its evidence keeps it, and the measurement is recorded.
    #[tokio::test]
    async fn the_servers_count_replaces_the_estimate_in_the_budget() {
        let evidence = format!("EVIDENCE-START {} EVIDENCE-END", "word ".repeat(1500));
        let input = FdcrInput::new(evidence.clone(), "HARNESS-MARK");
        let config = FdcrConfig {
            rounds: 1,
            budget: ContextBudget::new(3000, Some(256)),
            ..FdcrConfig::default()
        };
        let replies = || vec![Ok("a1"), Ok("c1"), Ok("e1"), Ok(SPEC)];
        let estimated = Script::new(replies());
        let out = deliberate(&Roles::uniform(estimated.clone()), &input, &config).await;
        assert_eq!(out.tokens_measured, None);
        let first = estimated.seen.lock().unwrap()[0].messages[1]
            .text()
            .to_string();
        assert!(
            !first.contains("EVIDENCE-END"),
            "the evidence is clipped by the estimate"
        );

        let mut counted = Script::new(replies());
        Arc::get_mut(&mut counted).unwrap().tokenizer_divides_by = Some(2);
        let out = deliberate(&Roles::uniform(counted.clone()), &input, &config).await;
        let m = out.tokens_measured.expect("measured");
        assert_eq!(m.counted, m.estimated / 2);
        assert!((m.scale() - 2.0).abs() < 0.01, "{m:?}");
        let first = counted.seen.lock().unwrap()[0].messages[1]
            .text()
            .to_string();
        assert!(
            first.contains("EVIDENCE-END"),
            "the whole evidence fits the counted budget"
        );
    }

    /// The rate measured on the evidence can be off for the whole prompt:
    /// a message the endpoint counts over the budget is rebuilt smaller, so
    /// the reply keeps its room (the first real run's roles sent 11,996
    /// counted tokens against a prompt budget of 11,264).
    #[tokio::test]
    async fn a_turn_the_endpoint_counts_over_the_budget_is_rebuilt_smaller() {
        let evidence = format!("EVIDENCE-START {} EVIDENCE-END", "word ".repeat(4000));
        let input = FdcrInput::new(evidence, "HARNESS-MARK");
        let config = FdcrConfig {
            rounds: 1,
            budget: ContextBudget::new(2400, Some(256)),
            ..FdcrConfig::default()
        };
        let mut m = Script::new(vec![Ok("a1"), Ok("c1"), Ok("e1"), Ok(SPEC)]);
        let s = Arc::get_mut(&mut m).unwrap();
        s.tokenizer_divides_by = Some(2);
        s.later_counts_times = Some(0.8);
        let out = deliberate(&Roles::uniform(m.clone()), &input, &config).await;
        assert!(out.spec.is_some(), "{:?}", out.error);
        for req in m.seen.lock().unwrap().iter().take(3) {
            let text = format!("{}\n{}", SYSTEM.trim(), req.messages[1].text());
            let counted = (estimate_tokens(&text) as f64 * 0.8) as usize + 16;
            assert!(
                counted <= config.budget.prompt_tokens(),
                "{counted} > {}",
                config.budget.prompt_tokens()
            );
        }
    }

    /// A fixed discussion whose evidence, sources and turns are all
    /// clipped: two rounds, a refused spec and its retry.
    fn layout_case(tokenizer: bool, layout: PromptLayout) -> (FdcrInput, FdcrConfig, Arc<Script>) {
        let evidence: String = (0..240)
            .map(|i| {
                format!(
                    "evidence line {i}: task {} failed at step {} with error {}\n",
                    i % 7,
                    i % 5,
                    i * 13
                )
            })
            .collect();
        let harness: String = (0..160)
            .map(|i| {
                format!(
                    "src/rule{}.rs:{i}: pub const LIMIT_{i}: u32 = {};\n",
                    i % 4,
                    i * 3
                )
            })
            .collect();
        let reply = |who: &str, lines: usize| -> String {
            (0..lines)
                .map(|i| {
                    format!(
                        "{who} point {i}: change the rule for group R{} and keep the rest\n",
                        i % 3
                    )
                })
                .collect()
        };
        let bad = r#"{"failure_patterns": [], "proposed_changes": [{"layer": "realize", "file": "src/tables.rs", "description": "x", "rationale": "y", "evidence_tasks": ["Z9"]}], "skills": []}"#;
        let replies = [
            reply("analyst", 40),
            reply("critic", 25),
            reply("engineer", 30),
            reply("analyst2", 35),
            reply("critic2", 20),
            reply("engineer2", 28),
            bad.to_string(),
            SPEC.to_string(),
        ];
        let mut m = Script::new(replies.iter().map(|r| Ok(r.as_str())).collect());
        if tokenizer {
            let s = Arc::get_mut(&mut m).unwrap();
            s.tokenizer_divides_by = Some(2);
            s.later_counts_times = Some(0.8);
        }
        let input = FdcrInput {
            failing_tasks: Some(["1", "2"].iter().map(|s| s.to_string()).collect()),
            ..FdcrInput::new(evidence, harness)
        };
        let config = FdcrConfig {
            rounds: 2,
            spec_retries: 2,
            budget: ContextBudget::new(3000, Some(200)),
            layout,
            ..FdcrConfig::default()
        };
        (input, config, m)
    }

    /// The per-turn layout asks exactly the requests it asked before the
    /// shared-prefix layout existed (recorded experiments' response caches
    /// are keyed on them): recorded in `testdata/fdcr-per-turn-requests.jsonl`
    /// by the code of that time, without and with a tokenizer.
    #[tokio::test]
    async fn the_per_turn_layout_asks_the_requests_it_always_asked() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/testdata/fdcr-per-turn-requests.jsonl");
        let mut lines = Vec::new();
        for tokenizer in [false, true] {
            let (input, config, m) = layout_case(tokenizer, PromptLayout::PerTurn);
            let out = deliberate(&Roles::uniform(m.clone()), &input, &config).await;
            assert!(out.spec.is_some(), "{:?}", out.error);
            for req in m.seen.lock().unwrap().iter() {
                lines.push(serde_json::to_string(req).unwrap());
            }
        }
        let now = lines.join("\n") + "\n";
        if std::env::var_os("ECDYSIS_UPDATE_FDCR_REQUESTS").is_some() {
            std::fs::write(&path, &now).unwrap();
        }
        let recorded = std::fs::read_to_string(&path).unwrap();
        let recorded: Vec<&str> = recorded.lines().collect();
        assert_eq!(recorded.len(), lines.len(), "number of requests");
        for (i, (a, b)) in recorded.iter().zip(&lines).enumerate() {
            assert!(a == b, "request {i} differs:\nrecorded {a}\nnow      {b}");
        }
    }

    /// The shared-prefix layout: every request of a discussion begins with
    /// the same system prompt, evidence and sources, byte for byte (the
    /// per-turn layout's do not, on the same case), and every request still
    /// fits the budget, by the estimate and by the endpoint's count.
    #[tokio::test]
    async fn every_request_of_a_shared_prefix_discussion_shares_its_prefix() {
        let discussion = "# The discussion so far\n\n";
        for tokenizer in [false, true] {
            let (input, config, m) = layout_case(tokenizer, PromptLayout::SharedPrefix);
            let out = deliberate(&Roles::uniform(m.clone()), &input, &config).await;
            assert!(out.spec.is_some(), "{:?}", out.error);
            let seen = m.seen.lock().unwrap().clone();
            assert_eq!(
                seen.len(),
                8,
                "3 turns x 2 rounds, a refused spec, its retry"
            );
            let first = seen[0].messages[1].text();
            let prefix = &first[..first.find(discussion).expect("the layout") + discussion.len()];
            assert!(prefix.contains("evidence line 0:"), "{prefix}");
            assert!(prefix.contains("LIMIT_0"), "{prefix}");
            // The discussion only grows at the end: clipped, never the evidence.
            assert!(
                seen.iter()
                    .any(|r| r.messages[1].text().contains("Left out for the context")),
                "the case clips the discussion"
            );
            for (i, req) in seen.iter().enumerate() {
                assert_eq!(req.messages[0].text(), SYSTEM.trim(), "request {i}");
                assert!(
                    req.messages[1].text().starts_with(prefix),
                    "request {i} ({tokenizer}) does not begin with the shared prefix"
                );
                let moderator = i >= 6;
                let extra = if moderator { retry_room(&config) } else { 0 };
                let opening = &req.messages[..2];
                let estimated = estimate_messages(opening);
                if !tokenizer {
                    assert!(
                        estimated + extra <= config.budget.prompt_tokens(),
                        "request {i}: {estimated} + {extra} > {}",
                        config.budget.prompt_tokens()
                    );
                } else {
                    // The endpoint counts the estimate x 0.8 after its
                    // first count; the room is kept in its tokens.
                    let text = format!("{}\n{}", SYSTEM.trim(), req.messages[1].text());
                    let counted = (estimate_tokens(&text) as f64 * 0.8) as usize
                        + 2 * token_budget::MESSAGE_OVERHEAD;
                    let extra = (extra as f64 / 2.0) as usize;
                    assert!(
                        counted + extra <= config.budget.prompt_tokens(),
                        "request {i}: {counted} + {extra} > {}",
                        config.budget.prompt_tokens()
                    );
                }
            }
            // The retry extends the Moderator's opening.
            assert_eq!(seen[7].messages[..2], seen[6].messages[..2]);

            // The same case in the per-turn layout cuts the evidence at
            // different places.
            let (input, config, m) = layout_case(tokenizer, PromptLayout::PerTurn);
            deliberate(&Roles::uniform(m.clone()), &input, &config).await;
            let seen = m.seen.lock().unwrap();
            let head = |r: &ChatRequest| {
                let t = r.messages[1].text();
                t[..t.find(discussion).unwrap()].to_string()
            };
            assert!(
                seen.iter().any(|r| head(r) != head(&seen[0])),
                "the per-turn layout's evidence differs between turns"
            );
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

    /// A spec citing group labels, as the local 1.5B model wrote one.
    const LABELLED: &str = r#"{"failure_patterns": [{"name": "p", "description": "d", "evidence_tasks": ["A1", "A2"]}],
        "proposed_changes": [{"layer": "realize", "file": "src/tables.rs", "description": "x", "rationale": "y", "evidence_tasks": ["A1", "A2"]}],
        "skills": [], "implementation_notes": ""}"#;

    fn checked_input() -> FdcrInput {
        FdcrInput {
            failing_tasks: Some(["0", "3"].iter().map(|s| s.to_string()).collect()),
            group_labels: [
                ("A1".to_string(), vec!["0".to_string()]),
                ("A2".to_string(), vec!["3".to_string()]),
            ]
            .into(),
            ..input()
        }
    }

    #[tokio::test]
    async fn group_labels_as_evidence_are_read_as_tasks_and_recorded() {
        let m = Script::new(vec![Ok("a1"), Ok("c1"), Ok("e1"), Ok(LABELLED)]);
        let config = FdcrConfig {
            rounds: 1,
            ..FdcrConfig::default()
        };
        let out = deliberate(&Roles::uniform(m), &checked_input(), &config).await;
        let spec = out.spec.expect("the labels name failing tasks");
        assert_eq!(spec.proposed_changes[0].evidence_tasks, vec!["0", "3"]);
        assert!(!spec.proposed_changes[0].instance_specific);
        let note = out.transcript.last().unwrap();
        assert_eq!(note.role, FdcrRole::Validation);
        assert!(note.content.contains("A1 → 0; A2 → 3"), "{}", note.content);
    }

    #[tokio::test]
    async fn a_refused_spec_repeated_word_for_word_ends_the_retries() {
        let bad = r#"{"failure_patterns": [], "proposed_changes": [{"layer": "realize", "file": "src/tables.rs", "description": "x", "rationale": "y", "evidence_tasks": ["Z9"]}], "skills": []}"#;
        let m = Script::new(vec![
            Ok("a1"),
            Ok("c1"),
            Ok("e1"),
            Ok(bad),
            Ok(bad),
            Ok(SPEC),
        ]);
        let config = FdcrConfig {
            rounds: 1,
            spec_retries: 3,
            ..FdcrConfig::default()
        };
        let out = deliberate(&Roles::uniform(m.clone()), &checked_input(), &config).await;
        assert!(out.spec.is_none());
        assert_eq!(out.failure, Some(FdcrFailure::MalformedSpec));
        assert!(
            out.error
                .as_deref()
                .unwrap()
                .contains("word for word after 2 attempt(s)"),
            "{:?}",
            out.error
        );
        // Two Moderator calls: a third would have been the second's request.
        assert_eq!(out.calls, 5);
        assert_eq!(m.seen.lock().unwrap().len(), 5);

        // A changed reply gets its retry as before.
        let m = Script::new(vec![Ok("a1"), Ok("c1"), Ok("e1"), Ok(bad), Ok(LABELLED)]);
        let out = deliberate(&Roles::uniform(m), &checked_input(), &config).await;
        assert!(out.spec.is_some(), "{:?}", out.error);
        assert_eq!(out.calls, 5);
    }

    fn record(task: &str, success: bool, tool: &str, error: bool) -> FailureRecord {
        FailureRecord {
            task_id: task.into(),
            trial: 0,
            reward: if success { 1.0 } else { 0.0 },
            success,
            db_ok: Some(success),
            communicate_ok: None,
            env_ok: None,
            answer_ok: None,
            end: EndReason::AgentStop,
            device_steps: vec![],
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
                reply: 1,
                finishes: false,
                class: String::new(),
            }],
            agent_texts: vec![],
            interventions: vec![],
            domain: "tau2/retail".into(),
            replies: 1,
            text_replies: vec![],
            text_call_replies: vec![],
            regulate_notes: vec![],
        }
    }

    #[test]
    fn evidence_has_groups_excerpts_and_successes_on_the_same_tools() {
        let failures = vec![
            record("1", false, "get_order_details", true),
            record("2", false, "get_order_details", true),
            FailureRecord {
                end: EndReason::MaxSteps,
                ..record("3", false, "cancel_order", true)
            },
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

    /// On the starting harness within a small budget: the entry file of the
    /// layer whose hook acted is shown (clipped rather than left out, where
    /// the first experiment's roles got neither it nor all of the tables),
    /// and the tables as the failures' domain's entries.
    #[test]
    fn the_acting_layers_entry_and_the_domains_tables_are_always_shown() {
        let template = ecdysis_sys::fsutil::copy_crate;
        let dir = tempfile::tempdir().unwrap();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harness-template");
        template(&root, dir.path()).unwrap();
        let focus = HarnessFocus {
            layers: [Layer::Realize, Layer::Regulate, Layer::Contract].into(),
            tools: ["execute_sql".to_string()].into(),
            acted: [Layer::Realize].into(),
            domain: Some("dbbench".into()),
        };
        let text = harness_section(dir.path(), &focus).unwrap().within(5000);
        assert!(text.contains("### src/realize/mod.rs"), "{text}");
        assert!(
            text.contains("### src/tables.rs: the entries for dbbench"),
            "{text}"
        );
        assert!(text.contains("execute_sql"), "the domain's entries: {text}");
        assert!(
            !text.contains("transfer_to_human_agents"),
            "no other domain's entries"
        );
        // Without a focus the whole tables file, as before.
        let whole = describe_harness(dir.path()).unwrap();
        assert!(
            whole.contains("### src/tables.rs (the harness's data-driven rules"),
            "{}",
            &whole[..300]
        );
    }
}

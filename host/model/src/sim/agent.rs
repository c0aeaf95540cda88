//! [`SimAgent`]: a deterministic simulated agent model for the offline
//! testbed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};

use crate::sim::cues::{CueContext, Scan, states_fix};
use crate::sim::mutate;
use crate::sim::note::{CueSource, QuirkCorrected, QuirkFired, SimAction, TestbedNote};
use crate::sim::plan::TestbedPlan;
use crate::sim::profile::{Quirk, QuirkKind, SimProfile, UnknownProfile};
use crate::sim::rng::Rolls;
use crate::types::{ChatMessage, ChatModel, ChatRequest, ChatResponse, ModelFuture, ToolCall};

/// The closing question of the final message.
pub const CLOSING_QUESTION: &str = "Is there anything else I can help you with?";
/// What the agent says when asked again after its final message.
pub const GOODBYE: &str = "Thank you for contacting us. Goodbye!";

/// Whether a tool result counts as a failed call: it starts with `Error`
/// (τ²'s error results), is a MySQL error or DBBench's `Invalid function
/// call`, or starts with `[Blocked` / `Blocked` / `[harness` (a
/// harness block, e.g. the agent loop's `[Blocked by the runtime harness]
/// …`). Case-insensitive; an annotation appended to a successful result does
/// not make it a failure.
pub fn is_failed_result(text: &str) -> bool {
    let lower = text.trim_start().to_lowercase();
    [
        "error",
        "[blocked",
        "blocked",
        "[harness",
        "invalid function call",
    ]
    .iter()
    .any(|p| lower.starts_with(p))
        || is_mysql_error(&lower)
}

/// A MySQL server error as DBBench prints it: `1064 (42000): ...`.
fn is_mysql_error(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() > 12
        && b[..4].iter().all(u8::is_ascii_digit)
        && text[4..].starts_with(" (")
        && b[11] == b')'
        && b[12] == b':'
}

/// **Testbed only.** A simulated agent model (`sim:<profile>`) that follows
/// a task's gold plan ([`TestbedPlan`], oracle-derived) and injects the
/// profile's quirks, deterministically from the seed. An oracle by
/// construction: its results are testbed results, never benchmark results.
///
/// It is stateless between calls: every [`ChatModel::chat`] replays the
/// request's conversation to find where it is, so whatever the harness did
/// (rewritten tool descriptions, blocked or realized calls, annotations,
/// injected messages) is what it reacts to. Conventions it reads:
///
/// * assistant messages before the first user message (the fixed greeting)
///   are not its own;
/// * a plan step succeeded when a call of that step (by the gold name or the
///   alias it used) has a tool result (matched by `tool_call_id`) that is
///   not a failure ([`is_failed_result`]); a text-written call succeeded
///   only if the host realized it (a following assistant message, before
///   any user message, with a matching structured call, or the same message
///   carrying it);
/// * an assistant turn it cannot attribute to its own plan (e.g. a call the
///   harness forced) is foreign: if such a call succeeded with exactly a
///   later gold step's name and arguments, the plan skips past that step;
/// * fix cues are read from the tool descriptions of the request and every
///   non-assistant message except the first system message (see
///   [`cues`](crate::sim::cues) for the rules).
///
/// Behaviour per turn: one planned call as a structured call (id
/// `sim_call_<turn>`); after the last step one message with every
/// `communicate` string and [`CLOSING_QUESTION`]; afterwards [`GOODBYE`].
/// After a failed call: correct the step's systematic quirks whose fix is
/// stated (each heeded with the profile's `correction_probability`) and
/// retry; else maybe repeat the identical call once (`repeat_failing_call`);
/// else move on to the next step.
#[derive(Debug, Clone)]
pub struct SimAgent {
    profile: SimProfile,
    plan: TestbedPlan,
    seed: u64,
    name: String,
    rolls: Rolls,
    base_prompt: Option<String>,
    reading: Arc<Mutex<Reading>>,
}

/// What the agent has read so far, by text: it replays the whole
/// conversation every turn (so its decisions are a pure function of the
/// conversation), and lower-casing, splitting and parsing the same messages
/// again each turn was most of its CPU. Keyed by content, so a message a
/// harness edits is read afresh.
#[derive(Default)]
struct Reading {
    scans: HashMap<String, Arc<Scan>>,
    item_ids: HashMap<String, Arc<Vec<String>>>,
    /// The first system message's paragraphs that are not the base prompt.
    added_paragraphs: HashMap<String, Arc<Vec<Arc<Scan>>>>,
}

impl std::fmt::Debug for Reading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reading")
            .field("texts", &self.scans.len())
            .finish_non_exhaustive()
    }
}

impl Reading {
    fn scan(&mut self, text: &str) -> Arc<Scan> {
        if let Some(s) = self.scans.get(text) {
            return s.clone();
        }
        let s = Arc::new(Scan::new(text));
        self.scans.insert(text.to_string(), s.clone());
        s
    }

    fn item_ids(&mut self, text: &str) -> Arc<Vec<String>> {
        if let Some(ids) = self.item_ids.get(text) {
            return ids.clone();
        }
        let mut ids = Vec::new();
        mutate::item_ids_in(text, &mut ids);
        let ids = Arc::new(ids);
        self.item_ids.insert(text.to_string(), ids.clone());
        ids
    }

    fn added_paragraphs(&mut self, system: &str, base: &str) -> Arc<Vec<Arc<Scan>>> {
        if let Some(p) = self.added_paragraphs.get(system) {
            return p.clone();
        }
        let added: Vec<Arc<Scan>> = system
            .split("\n\n")
            .map(str::trim)
            .filter(|p| !p.is_empty() && !base.contains(p))
            .map(|p| Arc::new(Scan::new(p)))
            .collect();
        let added = Arc::new(added);
        self.added_paragraphs
            .insert(system.to_string(), added.clone());
        added
    }
}

/// The agent's plan and reading memo are the simulated participant's own
/// memory: freeing them is metered as simulated CPU (see
/// [`super::cpu`]), like its turns, so host benchmarks do not count it.
impl Drop for SimAgent {
    fn drop(&mut self) {
        let plan = std::mem::take(&mut self.plan);
        let reading = std::mem::take(&mut self.reading);
        let prompt = self.base_prompt.take();
        super::cpu::metered(move || drop((plan, reading, prompt)));
    }
}

impl SimAgent {
    /// One agent per episode. Derive `seed` per task and trial (e.g. with
    /// [`episode_seed`](crate::sim::episode_seed)) for distinct but
    /// reproducible trials.
    pub fn new(profile: SimProfile, plan: TestbedPlan, seed: u64) -> Self {
        let rolls = Rolls::new(seed, &plan.task_id);
        Self {
            name: profile.model_name(),
            profile,
            plan,
            seed,
            rolls,
            base_prompt: None,
            reading: Arc::default(),
        }
    }

    /// The domain's unmodified system prompt (`Domain::system_prompt()`,
    /// public). With it, paragraphs of the conversation's first system
    /// message that are not in it (skills guidance appended by the loop, a
    /// contract-hook rewrite) are read for fix cues; without it the first
    /// system message is never read, because τ² policies already contain
    /// generic procedure text.
    pub fn with_base_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.base_prompt = Some(prompt.into());
        self
    }

    /// From a model name `sim:<profile>` naming a built-in profile.
    pub fn from_model_name(
        model: &str,
        plan: TestbedPlan,
        seed: u64,
    ) -> Result<Self, UnknownProfile> {
        Ok(Self::new(SimProfile::parse(model)?, plan, seed))
    }

    /// The quirk profile the agent follows.
    pub fn profile(&self) -> &SimProfile {
        &self.profile
    }

    /// The gold plan it works from (oracle-derived: testbed only).
    pub fn plan(&self) -> &TestbedPlan {
        &self.plan
    }

    /// The seed its quirk draws derive from (with the task id).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The reply to `request` (what [`ChatModel::chat`] returns).
    pub fn respond(&self, request: &ChatRequest) -> ChatResponse {
        let mut turn = self.replay(request);
        if let Intent::Call { call, .. } = &mut turn.intent {
            answer_from_last_output(call, request);
        }
        let note = turn.note;
        let mut response = ChatResponse {
            model: Some(self.name.clone()),
            ..ChatResponse::default()
        };
        match turn.intent {
            Intent::Call {
                call,
                as_text: true,
                ..
            } => {
                response.content = Some(text_call(&call));
                response.finish_reason = Some("stop".into());
            }
            Intent::Call { call, .. } => {
                response.tool_calls = vec![call];
                response.finish_reason = Some("tool_calls".into());
            }
            Intent::AskUser { step } => {
                response.content = Some(self.plan.steps[step].request_to_user());
                response.finish_reason = Some("stop".into());
            }
            Intent::Final => {
                response.content = Some(self.final_text());
                response.finish_reason = Some("stop".into());
            }
            Intent::Goodbye => {
                response.content = Some(GOODBYE.into());
                response.finish_reason = Some("stop".into());
            }
        }
        response.testbed = Some(note);
        response
    }

    fn final_text(&self) -> String {
        if self.plan.communicate.is_empty() {
            format!("I have finished working on your request. {CLOSING_QUESTION}")
        } else {
            format!(
                "I have finished working on your request. Here are the details: {}. {CLOSING_QUESTION}",
                self.plan.communicate.join("; ")
            )
        }
    }

    /// Replays the conversation and decides the next turn.
    fn replay(&self, request: &ChatRequest) -> Decision {
        let messages = &request.messages;
        let mut reading = self.reading.lock().unwrap_or_else(|p| p.into_inner());
        let mut context = Context::new(request, self.base_prompt.as_deref(), &mut reading);
        let mut state = State::default();
        let start = messages
            .iter()
            .position(|m| matches!(m, ChatMessage::User { .. }))
            .unwrap_or(messages.len());
        let mut absorbed = 0;
        let mut i = start;
        while i < messages.len() {
            if !matches!(messages[i], ChatMessage::Assistant { .. }) {
                i += 1;
                continue;
            }
            context.absorb(&messages[absorbed..i], absorbed);
            absorbed = i;
            let before = state.clone();
            let decision = self.decide(&mut state, &context);
            match match_turn(&decision.intent, messages, i) {
                Some((success, next)) => {
                    state.observe(&decision.intent, success, self.plan.steps.len());
                    i = next;
                }
                None => {
                    state = before;
                    self.absorb_foreign(&mut state, messages, i);
                    i += 1;
                }
            }
        }
        context.absorb(&messages[absorbed..], absorbed);
        self.decide(&mut state, &context)
    }

    /// A turn that was not ours: a successful call that is exactly a later
    /// gold step moves the plan past it.
    fn absorb_foreign(&self, state: &mut State, messages: &[ChatMessage], i: usize) {
        let ChatMessage::Assistant { tool_calls, .. } = &messages[i] else {
            return;
        };
        for call in tool_calls {
            let ok = result_of(messages, i, call).is_some_and(|r| !is_failed_result(r));
            let Ok(Value::Object(args)) = call.parsed_arguments() else {
                continue;
            };
            if !ok {
                continue;
            }
            if let Some(q) = (state.step..self.plan.steps.len()).find(|q| {
                let gold = &self.plan.steps[*q];
                gold.name == call.name && gold.arguments == args
            }) {
                state.step = q + 1;
                state.skipped_read = None;
                state.failed = None;
            }
        }
    }

    /// The cue for `quirk` at `step`, if one is visible and the model heeds
    /// it (rolled once per quirk and step).
    fn heeded_cue(&self, quirk: Quirk, step: usize, context: &Context) -> Option<CueSource> {
        if quirk.kind() != QuirkKind::Systematic {
            return None;
        }
        let steps = &self.plan.steps;
        let (target, skipped_read) = if quirk == Quirk::SkipPrecondition {
            (
                steps.get(step + 1).map(|s| s.name.as_str()).unwrap_or(""),
                steps.get(step).map(|s| s.name.as_str()),
            )
        } else {
            (steps.get(step).map(|s| s.name.as_str()).unwrap_or(""), None)
        };
        let cx = CueContext {
            gold_name: target,
            alias: mutate::alias_for(&self.plan.domain, target),
            skipped_read,
        };
        let source = context
            .descriptions
            .get(target)
            .filter(|scan| states_fix(quirk, scan, &cx))
            .map(|_| CueSource::ToolDescription)
            .or_else(|| {
                context
                    .texts
                    .iter()
                    .find(|(_, scan)| states_fix(quirk, scan, &cx))
                    .map(|(source, _)| *source)
            })?;
        let tag = format!("heed:{quirk}");
        self.rolls
            .chance(&tag, step, self.profile.correction_probability)
            .then_some(source)
    }

    fn fires(&self, quirk: Quirk, step: usize) -> bool {
        self.rolls
            .chance(quirk.as_str(), step, self.profile.rates.get(quirk))
    }

    fn decide(&self, state: &mut State, context: &Context) -> Decision {
        let mut note = TestbedNote {
            model: self.name.clone(),
            ..TestbedNote::default()
        };
        let steps = &self.plan.steps;
        if state.finished {
            note.action = SimAction::Goodbye;
            return Decision {
                intent: Intent::Goodbye,
                note,
            };
        }
        if let Some(p) = state.failed.take() {
            let mut corrected = false;
            let active: Vec<Quirk> = state
                .steps
                .get(&p)
                .map(|s| s.active.iter().copied().collect())
                .unwrap_or_default();
            for quirk in active {
                if let Some(source) = self.heeded_cue(quirk, p, context) {
                    if let Some(s) = state.steps.get_mut(&p) {
                        s.active.remove(&quirk);
                    }
                    note.corrected.push(corrected_note(quirk, p, source, false));
                    corrected = true;
                }
            }
            if let Some(r) = state.skipped_read.filter(|r| r + 1 == p)
                && let Some(source) = self.heeded_cue(Quirk::SkipPrecondition, r, context)
            {
                state.step = r;
                state.skipped_read = None;
                note.corrected
                    .push(corrected_note(Quirk::SkipPrecondition, r, source, false));
                corrected = true;
            }
            if !corrected {
                let step_state = state.steps.entry(p).or_default();
                let mut repeat = false;
                if !step_state.repeat_decided {
                    step_state.repeat_decided = true;
                    if self.fires(Quirk::RepeatFailingCall, p) {
                        match self.heeded_cue(Quirk::RepeatFailingCall, p, context) {
                            Some(source) => note.corrected.push(corrected_note(
                                Quirk::RepeatFailingCall,
                                p,
                                source,
                                true,
                            )),
                            None => repeat = true,
                        }
                    }
                }
                if repeat {
                    note.quirks
                        .push(QuirkFired::new(Quirk::RepeatFailingCall, p));
                    return self.call_decision(state, p, note);
                }
                state.step = p + 1;
                state.skipped_read = None;
            }
        }
        loop {
            let p = state.step;
            if p >= steps.len() {
                note.action = SimAction::Final;
                return Decision {
                    intent: Intent::Final,
                    note,
                };
            }
            if steps[p].by_user {
                // The user's step: asked for in a message, never quirky
                // (the quirks are the agent's own calls).
                note.action = SimAction::AskUser;
                note.step_index = Some(p);
                return Decision {
                    intent: Intent::AskUser { step: p },
                    note,
                };
            }
            if state.skip_decided.insert(p)
                && p + 1 < steps.len()
                && !steps[p + 1].by_user
                && steps[p].is_read_only()
                && !steps[p + 1].is_read_only()
                && self.fires(Quirk::SkipPrecondition, p)
            {
                match self.heeded_cue(Quirk::SkipPrecondition, p, context) {
                    Some(source) => note.corrected.push(corrected_note(
                        Quirk::SkipPrecondition,
                        p,
                        source,
                        true,
                    )),
                    None => {
                        state.skipped_read = Some(p);
                        state.step = p + 1;
                        continue;
                    }
                }
            }
            if p + 1 == steps.len() && !state.early_decided {
                state.early_decided = true;
                if self.fires(Quirk::EarlyStop, p) {
                    note.quirks.push(QuirkFired::new(Quirk::EarlyStop, p));
                    note.action = SimAction::Final;
                    state.step = steps.len();
                    return Decision {
                        intent: Intent::Final,
                        note,
                    };
                }
            }
            if !state.steps.get(&p).is_some_and(|s| s.rolled) {
                let rolled = self.roll_step(p, context, &mut note);
                state.steps.insert(p, rolled);
            }
            return self.call_decision(state, p, note);
        }
    }

    /// Rolls the per-call quirks of step `p` on its first attempt, and fixes
    /// its arguments (model-specific quirks included) for every attempt.
    fn roll_step(&self, p: usize, context: &Context, note: &mut TestbedNote) -> StepState {
        let gold = &self.plan.steps[p];
        let alias = mutate::alias_for(&self.plan.domain, &gold.name)
            .filter(|a| !context.tool_names.contains(*a));
        let eligible = |quirk: Quirk| match quirk {
            Quirk::TextCall => true,
            Quirk::ToolAlias => alias.is_some(),
            Quirk::DropHash => mutate::has_hash_id(&gold.arguments),
            Quirk::NumbersAsStrings => mutate::has_number(&gold.arguments),
            Quirk::WrongVariant => mutate::has_item_ids(&gold.arguments),
            Quirk::Miscount => mutate::has_amount(&gold.arguments),
            Quirk::RepeatFailingCall | Quirk::SkipPrecondition | Quirk::EarlyStop => false,
        };
        let mut active = BTreeSet::new();
        for quirk in Quirk::ALL {
            if !eligible(quirk) || !self.fires(quirk, p) {
                continue;
            }
            match self.heeded_cue(quirk, p, context) {
                Some(source) => note.corrected.push(corrected_note(quirk, p, source, true)),
                None => {
                    active.insert(quirk);
                }
            }
        }
        let mut base = gold.arguments.clone();
        if active.contains(&Quirk::Miscount) {
            mutate::miscount(&mut base, self.rolls.chance("miscount:up", p, 0.5));
        }
        if active.contains(&Quirk::WrongVariant) {
            let pick = |n: usize| self.rolls.pick("wrong_variant:pick", p, n);
            mutate::wrong_variant(&mut base, &context.item_ids, &pick);
        }
        StepState {
            rolled: true,
            active,
            repeat_decided: false,
            base,
            alias: alias.map(str::to_owned),
        }
    }

    /// The call for step `p` with its currently active quirks.
    fn call_decision(&self, state: &State, p: usize, mut note: TestbedNote) -> Decision {
        let gold = &self.plan.steps[p];
        let empty = StepState::default();
        let step_state = state.steps.get(&p).unwrap_or(&empty);
        let mut args = if step_state.rolled {
            step_state.base.clone()
        } else {
            gold.arguments.clone()
        };
        let active = &step_state.active;
        if active.contains(&Quirk::DropHash) {
            mutate::drop_hash(&mut args);
        }
        if active.contains(&Quirk::NumbersAsStrings) {
            mutate::numbers_as_strings(&mut args);
        }
        let name = match (&step_state.alias, active.contains(&Quirk::ToolAlias)) {
            (Some(alias), true) => alias.clone(),
            _ => gold.name.clone(),
        };
        if let Some(r) = state.skipped_read.filter(|r| r + 1 == p) {
            note.quirks
                .push(QuirkFired::new(Quirk::SkipPrecondition, r));
        }
        for quirk in active {
            note.quirks.push(QuirkFired::new(*quirk, p));
        }
        note.action = SimAction::Call;
        note.step_index = Some(p);
        let call = ToolCall::new(
            format!("sim_call_{}", state.turns),
            name,
            Value::Object(args).to_string(),
        );
        Decision {
            intent: Intent::Call {
                step: p,
                gold_name: gold.name.clone(),
                as_text: active.contains(&Quirk::TextCall),
                call,
            },
            note,
        }
    }
}

impl ChatModel for SimAgent {
    fn name(&self) -> &str {
        &self.name
    }

    /// Includes the profile, the plan and the seed: two episodes that differ
    /// in any of them must never share a cached reply.
    fn fingerprint(&self, request: &ChatRequest) -> Value {
        json!({
            "model": self.name,
            "testbed": {
                "profile": self.profile,
                "plan": self.plan,
                "seed": self.seed,
                "base_prompt": self.base_prompt,
            },
            "request": serde_json::to_value(request).unwrap_or(Value::Null),
        })
    }

    fn chat<'a>(&'a self, request: &'a ChatRequest) -> ModelFuture<'a> {
        let response = super::cpu::metered(|| self.respond(request));
        Box::pin(async move { Ok(response) })
    }
}

fn corrected_note(quirk: Quirk, step: usize, source: CueSource, prevented: bool) -> QuirkCorrected {
    QuirkCorrected {
        name: quirk,
        kind: quirk.kind(),
        step_index: step,
        source,
        prevented,
    }
}

/// An OS-interaction plan answers with what its last command printed
/// (the plan cannot know it): the placeholder becomes the latest tool
/// result's printed text.
fn answer_from_last_output(call: &mut ToolCall, request: &ChatRequest) {
    use ecdysis_env::{FROM_LAST_OUTPUT, printed_in};
    if !call.arguments.contains(FROM_LAST_OUTPUT) {
        return;
    }
    let printed = request
        .messages
        .iter()
        .rev()
        .find_map(|m| match m {
            ChatMessage::Tool { content, .. } => printed_in(content),
            _ => None,
        })
        .unwrap_or_default();
    let quoted = serde_json::to_string(FROM_LAST_OUTPUT).unwrap_or_default();
    let with = serde_json::to_string(printed).unwrap_or_default();
    call.arguments = call.arguments.replace(&quoted, &with);
}

/// The call written as text, the way small local models do.
fn text_call(call: &ToolCall) -> String {
    let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
    let body = json!({"name": call.name, "arguments": arguments});
    let pretty = serde_json::to_string_pretty(&body).unwrap_or_else(|_| body.to_string());
    format!("```json\n{pretty}\n```")
}

/// What the conversation shows the agent, accumulated message by message.
struct Context<'b> {
    base_prompt: Option<&'b str>,
    descriptions: HashMap<String, Arc<Scan>>,
    tool_names: BTreeSet<String>,
    texts: Vec<(CueSource, Arc<Scan>)>,
    item_ids: Vec<String>,
    reading: &'b mut Reading,
}

impl<'b> Context<'b> {
    fn new(request: &ChatRequest, base_prompt: Option<&'b str>, reading: &'b mut Reading) -> Self {
        Self {
            base_prompt,
            descriptions: request
                .tools
                .iter()
                .map(|t| (t.name.clone(), reading.scan(&t.description)))
                .collect(),
            tool_names: request.tools.iter().map(|t| t.name.clone()).collect(),
            texts: Vec::new(),
            item_ids: Vec::new(),
            reading,
        }
    }

    /// Adds `messages`, which start at index `offset` of the conversation.
    fn absorb(&mut self, messages: &[ChatMessage], offset: usize) {
        for (k, message) in messages.iter().enumerate() {
            match message {
                ChatMessage::System { content } if offset + k > 0 => {
                    let scan = self.reading.scan(content);
                    self.texts.push((CueSource::Message, scan));
                }
                ChatMessage::System { content } => {
                    let Some(base) = self.base_prompt else {
                        continue;
                    };
                    for scan in self.reading.added_paragraphs(content, base).iter() {
                        self.texts.push((CueSource::SystemPrompt, scan.clone()));
                    }
                }
                ChatMessage::User { content } => {
                    let scan = self.reading.scan(content);
                    self.texts.push((CueSource::Message, scan));
                }
                ChatMessage::Tool { content, .. } => {
                    let scan = self.reading.scan(content);
                    self.texts.push((CueSource::ToolResult, scan));
                    for id in self.reading.item_ids(content).iter() {
                        if !self.item_ids.contains(id) {
                            self.item_ids.push(id.clone());
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

#[derive(Debug, Clone, Default)]
struct StepState {
    rolled: bool,
    /// Per-call quirks currently applied to this step's call.
    active: BTreeSet<Quirk>,
    repeat_decided: bool,
    /// Arguments with the model-specific quirks applied, fixed at the first
    /// attempt.
    base: Map<String, Value>,
    alias: Option<String>,
}

#[derive(Debug, Clone, Default)]
struct State {
    /// Next plan step.
    step: usize,
    steps: BTreeMap<usize, StepState>,
    skip_decided: BTreeSet<usize>,
    /// A read step skipped on the way to `step`.
    skipped_read: Option<usize>,
    early_decided: bool,
    /// The step whose last attempt failed, handled at the next decision.
    failed: Option<usize>,
    finished: bool,
    /// Own turns so far.
    turns: usize,
}

impl State {
    fn observe(&mut self, intent: &Intent, success: bool, plan_len: usize) {
        self.turns += 1;
        match intent {
            Intent::Call { step, .. } => {
                if success {
                    self.step = (step + 1).min(plan_len);
                    if self.skipped_read.is_some_and(|r| r < *step) {
                        self.skipped_read = None;
                    }
                } else {
                    self.failed = Some(*step);
                }
            }
            // The agent cannot see the device: a step it asked for is done
            // once the user has answered.
            Intent::AskUser { step } => self.step = (step + 1).min(plan_len),
            Intent::Final => self.finished = true,
            Intent::Goodbye => {}
        }
    }
}

#[derive(Debug, Clone)]
enum Intent {
    Call {
        step: usize,
        gold_name: String,
        as_text: bool,
        call: ToolCall,
    },
    /// Ask the user to do plan step `step` on their device.
    AskUser {
        step: usize,
    },
    Final,
    Goodbye,
}

struct Decision {
    intent: Intent,
    note: TestbedNote,
}

/// The result text of `call` (made at `messages[i]`), by `tool_call_id`, or
/// else the first tool message right after it.
fn result_of<'m>(messages: &'m [ChatMessage], i: usize, call: &ToolCall) -> Option<&'m str> {
    let later = &messages[i + 1..];
    later
        .iter()
        .find_map(|m| match m {
            ChatMessage::Tool {
                tool_call_id,
                content,
            } if *tool_call_id == call.id => Some(content.as_str()),
            _ => None,
        })
        .or_else(|| match later.first() {
            Some(ChatMessage::Tool { content, .. }) => Some(content.as_str()),
            _ => None,
        })
}

/// Whether `messages[i]` (an assistant message) is the turn `intent`
/// planned; if so, whether it succeeded and where the next turn starts.
fn match_turn(intent: &Intent, messages: &[ChatMessage], i: usize) -> Option<(bool, usize)> {
    let ChatMessage::Assistant { tool_calls, .. } = &messages[i] else {
        return None;
    };
    match intent {
        Intent::Call {
            gold_name,
            as_text,
            call,
            ..
        } => {
            let ours = |c: &&ToolCall| c.name == call.name || c.name == *gold_name;
            let succeeded = |at: usize, calls: &[ToolCall]| {
                calls
                    .iter()
                    .filter(ours)
                    .any(|c| result_of(messages, at, c).is_some_and(|r| !is_failed_result(r)))
            };
            if !tool_calls.is_empty() {
                if !tool_calls.iter().any(|c| ours(&c)) {
                    return None;
                }
                return Some((succeeded(i, tool_calls), i + 1));
            }
            if !as_text {
                return None;
            }
            // A text call the host may have realized as a following
            // assistant message with the structured call.
            let mut j = i + 1;
            while j < messages.len()
                && matches!(
                    messages[j],
                    ChatMessage::System { .. } | ChatMessage::Tool { .. }
                )
            {
                j += 1;
            }
            if let Some(ChatMessage::Assistant {
                tool_calls: realized,
                ..
            }) = messages.get(j)
                && realized.iter().any(|c| ours(&c))
            {
                return Some((succeeded(j, realized), j + 1));
            }
            Some((false, i + 1))
        }
        Intent::AskUser { .. } | Intent::Final | Intent::Goodbye => {
            tool_calls.is_empty().then_some((true, i + 1))
        }
    }
}

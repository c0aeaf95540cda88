//! One conversation's harness episode, as a function of the client's
//! history: [`Episode::advance`] replays the hooks over the messages it has
//! not seen, and [`Episode::upstream_messages`] is what the upstream reads.
//!
//! Replay is the definition, not a fallback: a warm episode is kept only
//! when its live hook calls were exactly those a replay of the history the
//! client will send back makes (every call of the reply went through as
//! proposed, nothing was retried), so a warm and a replayed episode are in
//! the same state.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use ecdysis_env::Domain;
use ecdysis_runner::agent::{SharedEnv, SharedEnvView};

use ecdysis_runner::agent::{CallPlace, HarnessSession, HookOutcome};
use ecdysis_sandbox::sandbox::{
    ActionDecision, AgentAction, ContractInput, EpisodeInfo, LayerSet, LoadedHarness, ReadOnlyEnv,
    Regulation, StepKind, StepReport, TaskView, ToolCall, ToolOutcome, ViewOutput,
};

use crate::ProxySettings;
use crate::error::ProxyError;
use crate::request::{Call, ChatRequest, Msg};

/// The prefix of every note the harness adds to what the upstream reads.
pub const NOTE_PREFIX: &str = "[Runtime harness note]";

/// The env view of an episode with no environment attached: every tool of
/// the request is known, and reading one says that nothing can run it.
struct NoEnvironment {
    tools: Vec<String>,
}

impl ReadOnlyEnv for NoEnvironment {
    fn tool_mutates(&self, name: &str) -> Option<bool> {
        self.tools.iter().any(|t| t == name).then_some(false)
    }

    fn call_read_only(
        &mut self,
        _name: &str,
        _arguments: &serde_json::Map<String, Value>,
    ) -> ViewOutput {
        ViewOutput {
            content: "Error: no environment is attached to this proxy; the tool's result is the client's."
                .into(),
            error: true,
        }
    }
}

fn hooked<T>(outcome: HookOutcome<T>) -> Result<T, ProxyError> {
    match outcome {
        HookOutcome::Use(v) => Ok(v),
        HookOutcome::End(m) => Err(ProxyError::Harness(m)),
        HookOutcome::Unavailable(m) => Err(ProxyError::Unavailable(m)),
    }
}

fn sandbox_call(c: &Call) -> ToolCall {
    ToolCall {
        id: c.id.clone(),
        name: c.name.clone(),
        arguments: c.arguments.clone(),
    }
}

/// Why a conversation's environment mirror was detached: the message
/// whose result the mirror did not reproduce, and how.
type Divergence = Arc<Mutex<Option<String>>>;

/// An environment the operator granted (`--env-mirror`): a fresh copy of
/// the domain's environment per conversation, on which the proxy runs every
/// call the client's history shows answered, in order, so the harness's
/// env view reads the state the client's own tools would have reached from
/// the domain's pristine state. Each answer is compared with the client's
/// result; the first that differs detaches the mirror for the rest of the
/// conversation (the client's environment is not the mirror's: another
/// starting state, another implementation), and every read after it says
/// so rather than answering from a wrong state.
struct Mirror {
    env: SharedEnv,
    diverged: Divergence,
}

/// The env view over a [`Mirror`].
struct MirrorView {
    view: SharedEnvView,
    diverged: Divergence,
}

impl ReadOnlyEnv for MirrorView {
    fn tool_mutates(&self, name: &str) -> Option<bool> {
        self.view.tool_mutates(name)
    }

    fn call_read_only(
        &mut self,
        name: &str,
        arguments: &serde_json::Map<String, Value>,
    ) -> ViewOutput {
        let diverged = self
            .diverged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match diverged {
            Some(why) => ViewOutput {
                content: format!(
                    "Error: the proxy's environment mirror was detached ({why}); no environment is attached."
                ),
                error: true,
            },
            None => self.view.call_read_only(name, arguments),
        }
    }
}

/// Whether the mirror's answer is the client's: the same text, or, when
/// both are JSON, the same value (an environment may print its JSON with
/// other spacing or key order).
fn same_result(mirror: &str, client: &str) -> bool {
    if mirror.trim() == client.trim() {
        return true;
    }
    match (
        serde_json::from_str::<Value>(mirror),
        serde_json::from_str::<Value>(client),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// A harness episode and what it has made of the history so far.
pub struct Episode {
    session: HarnessSession,
    /// The granted environment's mirror, if any.
    mirror: Option<Mirror>,
    settings: EpisodeSettings,
    /// The system prompt the upstream reads: the contract's, then skills.
    system_prompt: String,
    /// The contract's new tool descriptions.
    descriptions: BTreeMap<String, String>,
    skilled: bool,
    /// Client messages the hooks have seen.
    processed: usize,
    step: u32,
    errors: u32,
    /// The calls of the last assistant message and the results seen so far
    /// (message index, outcome).
    open_calls: Vec<Call>,
    batch: Vec<(usize, ToolOutcome)>,
    /// Notes shown after a client message, by its index.
    notes_after: BTreeMap<usize, Vec<String>>,
    /// Notes appended to a tool result, by its index.
    annotations: BTreeMap<usize, Vec<String>>,
    /// A call regulation forced: the next assistant turn.
    forced: Option<ToolCall>,
    /// Regulation ended the episode, with this reason.
    stopped: Option<String>,
}

/// The facts an episode starts from.
#[derive(Debug, Clone)]
pub struct EpisodeSettings {
    /// The episode's domain.
    pub domain: String,
    /// Steps before the harness is told the episode is over.
    pub max_steps: u32,
    /// Tool errors before the harness is told the episode is over.
    pub max_errors: u32,
}

/// What the proxy answers the client for one turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// The assistant's text.
    pub text: Option<String>,
    /// The assistant's tool calls.
    pub calls: Vec<Call>,
    /// Whether regulation ended the episode (`stop`): `text` is its reason.
    pub stopped: bool,
}

/// One upstream reply the harness refused and asked again about.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Retry {
    /// What the upstream reads of it on the next try: its reply, then the
    /// harness's answers to it.
    pub messages: Vec<Value>,
    /// The harness's feedback, one per blocked call or text.
    pub feedback: Vec<String>,
}

impl Episode {
    /// Start an episode for `request`: constructor, then the contract on its
    /// system prompt and tools.
    pub async fn start(
        harness: &LoadedHarness,
        settings: &EpisodeSettings,
        request: &ChatRequest,
        policy: ecdysis_sandbox::sandbox::FailurePolicy,
        granted: Option<&Arc<dyn Domain>>,
    ) -> Result<Self, ProxyError> {
        let info = EpisodeInfo {
            domain: settings.domain.clone(),
            max_steps: settings.max_steps,
            max_errors: settings.max_errors,
        };
        let mut tools = request.tools.clone();
        let (view, mirror): (Box<dyn ReadOnlyEnv>, Option<Mirror>) = match granted {
            None => (
                Box::new(NoEnvironment {
                    tools: request.tools.iter().map(|t| t.name.clone()).collect(),
                }),
                None,
            ),
            Some(domain) => {
                // The domain knows which of its tools change state; a tool
                // of the request it does not have is unknown to the view.
                let mutates: BTreeMap<&str, bool> = domain
                    .tools()
                    .iter()
                    .map(|t| (t.name.as_str(), t.mutates))
                    .collect();
                for t in &mut tools {
                    t.mutates = mutates.get(t.name.as_str()).copied().unwrap_or(false);
                }
                let env: SharedEnv = Arc::new(Mutex::new(domain.new_env()));
                let diverged = Divergence::default();
                let view = MirrorView {
                    view: SharedEnvView::new(
                        Arc::clone(&env),
                        mutates.iter().map(|(n, m)| (n.to_string(), *m)),
                    ),
                    diverged: Arc::clone(&diverged),
                };
                (Box::new(view), Some(Mirror { env, diverged }))
            }
        };
        // Hooks run inline: there is no environment to wait on (a mirror
        // answers from memory), and each call is bounded by its fuel and
        // deadline.
        let (mut session, started) = HarnessSession::start(
            harness,
            info,
            tools,
            view,
            policy,
            LayerSet::ALL,
            CallPlace::Inline,
        )
        .await;
        hooked(started)?;
        let contract = hooked(
            session
                .contract(ContractInput {
                    domain: settings.domain.clone(),
                    system_prompt: request.system_prompt(),
                    tools: request.tools.clone(),
                })
                .await,
        )?;
        Ok(Episode {
            session,
            mirror,
            settings: settings.clone(),
            system_prompt: contract.system_prompt,
            descriptions: contract
                .tool_descriptions
                .into_iter()
                .map(|d| (d.name, d.description))
                .collect(),
            skilled: false,
            processed: request.leading_system(),
            step: 0,
            errors: 0,
            open_calls: vec![],
            batch: vec![],
            notes_after: BTreeMap::new(),
            annotations: BTreeMap::new(),
            forced: None,
            stopped: None,
        })
    }

    /// Client messages the hooks have seen.
    pub fn processed(&self) -> usize {
        self.processed
    }

    /// With a granted environment, why its mirror was detached, if it was.
    pub fn mirror_diverged(&self) -> Option<String> {
        let mirror = self.mirror.as_ref()?;
        mirror
            .diverged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Run an answered call on the mirror, if one is attached and has not
    /// diverged; `Some(error)` is the mirror's error flag for the result.
    fn mirror_call(&self, index: usize, call: &Call, client_text: &str) -> Option<bool> {
        let mirror = self.mirror.as_ref()?;
        let mut diverged = mirror.diverged.lock().unwrap_or_else(|p| p.into_inner());
        if diverged.is_some() {
            return None;
        }
        let arguments: Value = match serde_json::from_str(&call.arguments) {
            Ok(v) => v,
            // The client ran something the mirror cannot read as a call.
            Err(_) => Value::String(call.arguments.clone()),
        };
        let out = mirror
            .env
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .call(&call.name, &arguments);
        if same_result(&out.content, client_text) {
            Some(out.error)
        } else {
            *diverged = Some(format!(
                "messages[{index}]: the client's result of `{}` is not the mirror's",
                call.name
            ));
            None
        }
    }

    /// Every hook call of the episode so far.
    pub fn hook_records(&self) -> &[ecdysis_runner::agent::HookRecord] {
        self.session.records()
    }

    /// Replay the hooks over the messages of `request` not seen yet:
    /// skills on the first user message, realize on each assistant tool
    /// call (or text), regulate after each step of tool results. Their
    /// decisions on the history are not applied to it (the client already
    /// acted on them); they move the harness's state and make the notes the
    /// upstream reads.
    pub async fn advance(&mut self, request: &ChatRequest) -> Result<(), ProxyError> {
        let messages = &request.messages;
        while self.processed < messages.len() {
            let index = self.processed;
            let message = &messages[index];
            if !matches!(message, Msg::Tool { .. }) {
                self.close_batch().await?;
            }
            match message {
                Msg::System { .. } => {}
                Msg::User { text } => {
                    if !self.skilled {
                        self.skilled = true;
                        if self.stopped.is_none() {
                            let guidance = hooked(
                                self.session
                                    .skills(
                                        self.step,
                                        TaskView {
                                            domain: self.settings.domain.clone(),
                                            first_user_message: text.clone(),
                                        },
                                    )
                                    .await,
                            )?;
                            for g in guidance {
                                self.system_prompt
                                    .push_str(&format!("\n\n## {}\n{}", g.title, g.text));
                            }
                        }
                    }
                }
                Msg::Assistant { text, calls } => {
                    self.step += 1;
                    self.open_calls = calls.clone();
                    // A forced call reached the client without realize
                    // (the live turn does the same), and a stopped episode
                    // calls no hook.
                    let forced = self.forced.take().is_some();
                    if self.stopped.is_some() || forced {
                    } else if calls.is_empty() {
                        let text = text.clone().unwrap_or_default();
                        hooked(
                            self.session
                                .realize(self.step, AgentAction::Text(text))
                                .await,
                        )?;
                    } else {
                        for call in calls {
                            hooked(
                                self.session
                                    .realize(self.step, AgentAction::Call(sandbox_call(call)))
                                    .await,
                            )?;
                        }
                    }
                }
                Msg::Tool { tool_call_id, text } => {
                    let call = self
                        .open_calls
                        .iter()
                        .find(|c| c.id == *tool_call_id)
                        .cloned()
                        .unwrap_or_else(|| Call {
                            id: tool_call_id.clone(),
                            name: String::new(),
                            arguments: "{}".into(),
                        });
                    // A mirror that reproduces the result knows whether it
                    // is an error; else the text is all there is.
                    let error = self
                        .mirror_call(index, &call, text)
                        .unwrap_or_else(|| looks_like_error(text));
                    self.batch.push((
                        index,
                        ToolOutcome {
                            call: sandbox_call(&call),
                            content: text.clone(),
                            error,
                            blocked: false,
                        },
                    ));
                }
            }
            self.processed += 1;
        }
        self.close_batch().await
    }

    /// The end of a step of tool results: regulate, and keep its notes.
    async fn close_batch(&mut self) -> Result<(), ProxyError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        if self.stopped.is_some() {
            return Ok(());
        }
        let last = batch.last().map(|(i, _)| *i).unwrap_or_default();
        self.errors += batch.iter().filter(|(_, o)| o.error).count() as u32;
        let report = StepReport {
            step: self.step,
            steps_left: self.settings.max_steps.saturating_sub(self.step),
            errors_left: self.settings.max_errors.saturating_sub(self.errors),
            kind: StepKind::ToolResults,
            text: None,
            outcomes: batch.into_iter().map(|(_, o)| o).collect(),
        };
        match hooked(self.session.regulate(report).await)? {
            Regulation::Continue => {}
            Regulation::Annotate(note) => self.annotations.entry(last).or_default().push(note),
            Regulation::Inject(note) => self.notes_after.entry(last).or_default().push(note),
            Regulation::ForceCall(call) => self.forced = Some(call),
            Regulation::Stop(reason) => self.stopped = Some(reason),
        }
        Ok(())
    }

    /// The messages the upstream reads for `request`: its system prompt
    /// replaced by the contract's with the skills, notes after the messages
    /// they follow, annotations on their tool results, then `extra` (this
    /// turn's retried replies and their feedback).
    pub fn upstream_messages(&self, request: &ChatRequest, extra: &[Value]) -> Vec<Value> {
        let raw = request.raw_messages();
        let leading = request.leading_system();
        let mut out = Vec::with_capacity(raw.len() + extra.len() + 1);
        if !self.system_prompt.is_empty() || leading > 0 {
            out.push(serde_json::json!({"role": "system", "content": self.system_prompt}));
        }
        for (i, message) in raw.iter().enumerate().skip(leading) {
            let mut message = message.clone();
            if let Some(notes) = self.annotations.get(&i) {
                let suffix: String = notes
                    .iter()
                    .map(|n| format!("\n\n{NOTE_PREFIX} {n}"))
                    .collect();
                match message.get_mut("content") {
                    Some(Value::String(s)) => s.push_str(&suffix),
                    Some(Value::Array(parts)) => {
                        parts.push(serde_json::json!({"type": "text", "text": suffix}))
                    }
                    _ => message["content"] = Value::String(suffix.trim_start().to_string()),
                }
            }
            out.push(message);
            for note in self.notes_after.get(&i).into_iter().flatten() {
                out.push(serde_json::json!({"role": "system", "content": format!("{NOTE_PREFIX} {note}")}));
            }
        }
        out.extend(extra.iter().cloned());
        out
    }

    /// The request's tools with the contract's descriptions.
    pub fn upstream_tools(&self, tools: &Value) -> Value {
        let mut tools = tools.clone();
        if let Some(list) = tools.as_array_mut() {
            for tool in list {
                let name = tool
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                if let Some(d) = name.and_then(|n| self.descriptions.get(&n))
                    && let Some(f) = tool.get_mut("function").and_then(Value::as_object_mut)
                {
                    f.insert("description".into(), Value::String(d.clone()));
                }
            }
        }
        tools
    }

    /// What regulation decided for the next turn without the upstream:
    /// the forced call or the stop, if any.
    pub fn decided_turn(&self) -> Option<Turn> {
        if let Some(reason) = &self.stopped {
            return Some(Turn {
                text: Some(reason.clone()),
                calls: vec![],
                stopped: true,
            });
        }
        self.forced.as_ref().map(|c| Turn {
            text: None,
            calls: vec![Call {
                id: format!("forced_{}", self.step + 1),
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            }],
            stopped: false,
        })
    }

    /// Realize the upstream's reply (its text and calls) at the next step.
    /// `Ok(Ok(turn))` is the turn for the client; `Ok(Err(retry))` means the
    /// harness blocked something and the upstream is to be asked again, with
    /// the retry's messages (the reply and the answers to it) appended.
    /// The flag says whether the client's history will show exactly what
    /// realize was asked about (so a replay repeats these hook calls).
    pub async fn realize_reply(
        &mut self,
        text: Option<String>,
        calls: Vec<Call>,
    ) -> Result<(Result<Turn, Retry>, bool), ProxyError> {
        let step = self.step + 1;
        let mut neutral = true;
        let (text, calls) = if calls.is_empty() {
            let said = text.clone().unwrap_or_default();
            match hooked(
                self.session
                    .realize(step, AgentAction::Text(said.clone()))
                    .await,
            )? {
                ActionDecision::Proceed | ActionDecision::Execute(_) => {
                    return Ok((
                        Ok(Turn {
                            text,
                            calls: vec![],
                            stopped: false,
                        }),
                        true,
                    ));
                }
                ActionDecision::Block(feedback) => {
                    return Ok((
                        Err(Retry {
                            messages: vec![
                                serde_json::json!({"role": "assistant", "content": said}),
                                serde_json::json!({"role": "system", "content": format!("{NOTE_PREFIX} {feedback}")}),
                            ],
                            feedback: vec![feedback],
                        }),
                        false,
                    ));
                }
                ActionDecision::Realize(rescued) => {
                    neutral = false;
                    let calls = rescued
                        .into_iter()
                        .enumerate()
                        .map(|(k, c)| Call {
                            id: format!("realized_{step}_{}", k + 1),
                            name: c.name,
                            arguments: c.arguments,
                        })
                        .collect();
                    // The text was the call: the client receives the call.
                    (None, calls)
                }
            }
        } else {
            (text, calls)
        };
        let mut realized = Vec::with_capacity(calls.len());
        let mut blocked = Vec::new();
        for call in &calls {
            match hooked(
                self.session
                    .realize(step, AgentAction::Call(sandbox_call(call)))
                    .await,
            )? {
                ActionDecision::Proceed => realized.push(Some(call.clone())),
                ActionDecision::Execute(c) => {
                    // Executing the call as proposed leaves the client's
                    // history what the upstream said: a replay sees the
                    // same call.
                    neutral &= c.name == call.name && c.arguments == call.arguments;
                    realized.push(Some(Call {
                        id: call.id.clone(),
                        name: c.name,
                        arguments: c.arguments,
                    }));
                }
                // Not a text action: the sandbox refuses `realize` for a
                // call, so this arm is never taken.
                ActionDecision::Realize(_) => realized.push(Some(call.clone())),
                ActionDecision::Block(feedback) => {
                    neutral = false;
                    realized.push(None);
                    blocked.push(feedback);
                }
            }
        }
        if blocked.is_empty() {
            let calls: Vec<Call> = realized.into_iter().flatten().collect();
            return Ok((
                Ok(Turn {
                    text,
                    calls,
                    stopped: false,
                }),
                neutral,
            ));
        }
        // A reply with a blocked call is asked again as a whole: the
        // upstream reads every call's answer (the feedback, or that the
        // call was not run) and replies anew.
        let mut feedback = Vec::new();
        let mut results = Vec::new();
        let mut blocked_iter = blocked.iter();
        for (call, kept) in calls.iter().zip(&realized) {
            let content = match kept {
                None => {
                    let f = blocked_iter.next().cloned().unwrap_or_default();
                    feedback.push(f.clone());
                    format!("{NOTE_PREFIX} {f}")
                }
                Some(_) => format!(
                    "{NOTE_PREFIX} Not run: another call of this reply was blocked. Call it again in your next reply if it is still needed."
                ),
            };
            results.push(
                serde_json::json!({"role": "tool", "tool_call_id": call.id, "content": content}),
            );
        }
        let mut messages = vec![serde_json::json!({
            "role": "assistant",
            "content": text,
            "tool_calls": calls.iter().map(Call::to_wire).collect::<Vec<_>>(),
        })];
        messages.extend(results);
        Ok((Err(Retry { messages, feedback }), false))
    }

    /// Take in the turn the client receives, as [`Episode::advance`] will
    /// read it when the client sends it back (without calling realize
    /// again: the live turn did).
    pub fn absorb(&mut self, turn: &Turn) {
        self.step += 1;
        self.forced = None;
        self.open_calls = turn.calls.clone();
        self.processed += 1;
    }
}

/// Whether a tool result reads as an error: without an environment the
/// proxy sees only text, and environments report errors as text that
/// starts with `Error`.
fn looks_like_error(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with("Error") || t.starts_with("error:")
}

/// Settings of the episode from the proxy's.
impl From<&ProxySettings> for EpisodeSettings {
    fn from(s: &ProxySettings) -> Self {
        EpisodeSettings {
            domain: s.domain.clone(),
            max_steps: s.max_steps,
            max_errors: s.max_errors,
        }
    }
}

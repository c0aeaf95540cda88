//! The episode loop: τ²'s conversation protocol with the harness hooks at
//! their lifecycle points.
//!
//! Protocol: the agent opens with a fixed greeting; the user simulator
//! answers; from then on the agent either speaks to the user or calls tools
//! (several calls in one turn run together), the environment answers, until
//! a stop. Hooks: `contract` once at the start, `skills` once after the
//! user's first message (its guidance joins the system prompt before the
//! first model call, so the prompt prefix stays byte-identical afterwards),
//! `realize` before every tool call and on every message without calls,
//! `regulate` after every step.
//!
//! Steps count message hops: each agent response, each batch of tool
//! results and each user message is one step.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use ecdysis_env::{Domain, FinalState, Protocol, VisibleTask};
use ecdysis_model::{
    self as model, ChatMessage, ChatModel, ChatRequest, FunctionTool, ModelError, SamplingArgs,
};
use ecdysis_sandbox::sandbox::{
    self, ActionDecision, AgentAction, ContractInput, EpisodeInfo, FailurePolicy, LayerSet,
    LoadedHarness, Regulation, StepKind, StepReport,
};

use super::boundary::{env_call, model_call, wit_call, wit_tools};
use super::record::{CallSource, EndReason, Entry, EpisodeRecord, RoleUsage, Withheld};
use super::session::{CallPlace, HarnessSession, HookOutcome};
use super::view::{SharedEnv, SharedEnvView};
use ecdysis_model::tokens::Conversation;
use ecdysis_model::user::{UserSimError, UserSimulator, UserTurn, Utterance};

/// The token an agent writes to end the conversation.
pub const AGENT_STOP: &str = "###STOP###";

/// Everything one episode needs. The task's oracle is deliberately absent:
/// the loop cannot reach gold data; the user side was built from it by the
/// caller and is opaque here.
pub struct EpisodeSetup {
    /// The benchmark domain: its tools, a fresh environment, the protocol.
    pub domain: Arc<dyn Domain>,
    /// What the agent may see of the task (no gold data).
    pub task: VisibleTask,
    /// Which repetition of the task this is (0-based); part of the
    /// response-cache salt.
    pub trial: u32,
    /// The episode's seed ([`crate::eval::episode_seed`]): given to the models
    /// and part of the response-cache salt.
    pub seed: u64,
    /// The model under test.
    pub agent: Arc<dyn ChatModel>,
    /// The user side of the conversation, built by the caller from the task's
    /// oracle.
    pub user: Box<dyn UserSimulator>,
    /// `None` runs the Direct baseline: same loop, no hooks.
    pub harness: Option<LoadedHarness>,
    /// What a failing hook does to the episode.
    pub policy: FailurePolicy,
    /// The harness's layers that run (the others answer neutrally).
    pub layers: LayerSet,
    /// Cap on steps (message hops); reaching it ends the episode as
    /// [`EndReason::MaxSteps`].
    pub max_steps: u32,
    /// Cap on failed tool calls, for protocols that cap them; reaching it ends
    /// the episode as [`EndReason::TooManyErrors`].
    pub max_errors: u32,
    /// Largest agent request, in estimated prompt tokens; a request over it
    /// is not sent ([`EndReason::RequestTooLarge`]).
    pub max_request_tokens: Option<u64>,
    /// Sampling arguments for every agent call.
    pub sampling: SamplingArgs,
}

/// The running state of one episode.
struct Episode {
    env: SharedEnv,
    /// Where tool calls run (hooks: the session's own copy).
    place: CallPlace,
    session: HarnessSession,
    agent: Arc<dyn ChatModel>,
    user: Box<dyn UserSimulator>,
    /// The conversation the agent model sees; it keeps its token estimate
    /// per message, so the request cap costs each message one estimate.
    messages: Conversation,
    /// The conversation as the user sees it.
    user_view: Vec<Utterance>,
    transcript: Vec<Entry>,
    tools: Arc<[FunctionTool]>,
    step: u32,
    errors: u32,
    max_steps: u32,
    max_errors: u32,
    max_request_tokens: Option<u64>,
    sampling: SamplingArgs,
    cache_salt: String,
    agent_usage: RoleUsage,
    user_usage: RoleUsage,
    next_call_id: u32,
    /// Time spent awaiting the agent and user models.
    model_wait: std::time::Duration,
    /// Notes the model sees before its next turn (injected, feedback).
    pending_notes: Vec<(String, String)>,
    /// The domain's protocol (τ²'s unless the domain says otherwise).
    protocol: Protocol,
    /// Agent responses so far (for the protocol's turn cap).
    agent_turns: u32,
}

/// How a phase of the loop ended the episode.
struct End(EndReason, Option<String>);

/// A hook's outcome for the loop: a value, or the end of the episode.
fn hooked<T>(outcome: HookOutcome<T>) -> Result<T, End> {
    match outcome {
        HookOutcome::Use(v) => Ok(v),
        HookOutcome::End(msg) => Err(End(EndReason::HarnessError, Some(msg))),
        HookOutcome::Unavailable(msg) => Err(End(EndReason::InfrastructureError, Some(msg))),
    }
}

fn model_end(e: &ModelError) -> End {
    let reason = if e.is_infrastructure() {
        EndReason::InfrastructureError
    } else if matches!(e, ModelError::SpendLimit { .. }) {
        EndReason::BudgetExhausted
    } else {
        EndReason::ModelError
    };
    End(reason, Some(e.to_string()))
}

/// Run one episode to its end. Never panics on model, harness or
/// environment misbehaviour: each becomes an end reason.
pub async fn run_episode(setup: EpisodeSetup) -> EpisodeRecord {
    run_episode_to_state(setup).await.0
}

/// [`run_episode`], also handing over the state the environment ended in
/// (when the domain can: [`ecdysis_env::Environment::into_final_state`]), so
/// scoring can read it instead of replaying the episode's calls.
pub async fn run_episode_to_state(setup: EpisodeSetup) -> (EpisodeRecord, Option<FinalState>) {
    let started = Instant::now();
    let task_id = setup.task.id.clone();
    let domain_name = setup.domain.name().to_string();
    let protocol = setup.domain.protocol();
    // A domain whose state lives in a server (DBBench) can fail to make
    // the episode's environment: that is the host's problem, not the
    // agent's, so the episode ends as an infrastructure error (requeued).
    let (env, env_error) = match setup.domain.new_env_for(&setup.task) {
        Ok(env) => (env, None),
        Err(e) => (setup.domain.new_env(), Some(e.to_string())),
    };
    let place = CallPlace::for_env(&*env);
    let env: SharedEnv = Arc::new(Mutex::new(env));
    let env_tools = setup.domain.tools();
    let info = EpisodeInfo {
        domain: domain_name.clone(),
        max_steps: setup.max_steps,
        max_errors: setup.max_errors,
    };
    let mut start_end = env_error.map(|e| End(EndReason::InfrastructureError, Some(e)));
    let session = match &setup.harness {
        _ if start_end.is_some() => HarnessSession::none(),
        None => HarnessSession::none(),
        Some(h) => {
            let view = SharedEnvView::new(
                env.clone(),
                env_tools.iter().map(|t| (t.name.clone(), t.mutates)),
            );
            let (session, outcome) = HarnessSession::start(
                h,
                info,
                wit_tools(&*setup.domain),
                Box::new(view),
                setup.policy,
                setup.layers,
                place,
            )
            .await;
            start_end = hooked(outcome).err();
            session
        }
    };
    let mut ep = Episode {
        env,
        place,
        session,
        agent: setup.agent,
        user: setup.user,
        messages: Conversation::new(),
        user_view: Vec::new(),
        transcript: Vec::new(),
        tools: Arc::from(Vec::new()),
        step: 0,
        errors: 0,
        max_steps: setup.max_steps,
        max_errors: setup.max_errors,
        max_request_tokens: setup.max_request_tokens,
        sampling: setup.sampling,
        cache_salt: format!("{task_id}/{}/{}", setup.trial, setup.seed),
        agent_usage: RoleUsage::default(),
        user_usage: RoleUsage::default(),
        next_call_id: 0,
        model_wait: std::time::Duration::ZERO,
        pending_notes: Vec::new(),
        protocol,
        agent_turns: 0,
    };
    let end = match start_end {
        Some(end) => end,
        None => ep
            .drive(&*setup.domain, env_tools, &setup.task)
            .await
            .unwrap_or_else(|end| end),
    };
    let hooks = ep.session.into_records();
    // The harness's view of the state went with its session, so the loop
    // holds the only reference left.
    let final_state = Arc::try_unwrap(ep.env)
        .ok()
        .and_then(|env| env.into_inner().ok())
        .and_then(|env| env.into_final_state());
    let record = EpisodeRecord {
        task_id,
        trial: setup.trial,
        domain: domain_name,
        seed: setup.seed,
        end: end.0,
        end_detail: end.1,
        steps: ep.step,
        tool_errors: ep.errors,
        transcript: ep.transcript,
        hooks,
        agent_usage: ep.agent_usage,
        user_usage: ep.user_usage,
        wall_ms: started.elapsed().as_millis() as u64,
        model_wait_ms: ep.model_wait.as_secs_f64() * 1000.0,
        evaluation: None,
        reward: 0.0,
        success: false,
    };
    (record, final_state)
}

impl Episode {
    /// The loop proper. `Err(End)` is how every phase stops the episode.
    // Slightly over our ~150-line habit on purpose: the hooks' lifecycle
    // points (contract, skills, realize, regulate) read in their order in
    // one place; each phase's work is already in its own method.
    async fn drive(
        &mut self,
        domain: &dyn Domain,
        env_tools: &[ecdysis_env::ToolSpec],
        task: &VisibleTask,
    ) -> Result<End, End> {
        let system_prompt = self.apply_contract(domain, env_tools).await?;

        // The agent's fixed greeting (with a user simulator), then the
        // user's opening message.
        let greeting = self
            .protocol
            .user_simulator
            .then(|| task.agent_greeting.to_string());
        if let Some(greeting) = &greeting {
            self.transcript.push(Entry::Agent {
                step: self.step,
                text: Some(greeting.clone()),
                tool_calls: vec![],
                testbed: None,
                withheld: None,
            });
            self.user_view.push(Utterance::agent(greeting.clone()));
            self.step += 1;
        }
        let first = match &task.first_user_message {
            Some(text) => UserTurn::from_text(text.clone()),
            None => self.user_turn().await?,
        };

        let system_prompt = self.inject_skills(domain, &first, system_prompt).await?;
        self.transcript.insert(
            0,
            Entry::System {
                text: system_prompt.clone(),
            },
        );
        self.messages.push(ChatMessage::system(system_prompt));
        if let Some(greeting) = greeting {
            self.messages.push(ChatMessage::assistant(greeting));
        }
        self.messages.push(ChatMessage::user(first.text.clone()));
        if first.stop.is_some() {
            return Ok(End(EndReason::UserStop, None));
        }
        self.regulate(StepKind::UserMessage, Some(first.text), vec![])
            .await?;

        loop {
            self.check_limits()?;
            self.flush_notes();
            let response = self.agent_call().await?;
            self.step += 1;
            self.agent_turns += 1;
            let mut calls = response.tool_calls.clone();
            let text = response.content.clone().filter(|t| !t.trim().is_empty());
            self.transcript.push(Entry::Agent {
                step: self.step,
                text: text.clone(),
                tool_calls: calls.clone(),
                testbed: response_testbed(&response),
                withheld: None,
            });
            self.keep_first_call(&mut calls);
            if !calls.is_empty() {
                self.messages
                    .push(ChatMessage::assistant_with_tool_calls(text, calls.clone()));
                let mut planned = Vec::new();
                for call in calls {
                    planned.push((call, CallSource::Model));
                }
                self.run_calls(planned).await?;
                self.check_turns()?;
                continue;
            }
            let text = text.unwrap_or_default();
            // A message without calls: the harness may rescue a call the
            // model wrote as text, or hold the message back with feedback.
            let step = self.step;
            let decision = hooked(
                self.session
                    .realize(step, AgentAction::Text(text.clone()))
                    .await,
            )?;
            if let ActionDecision::Realize(_) | ActionDecision::Block(_) = &decision {
                self.withhold_last_text(match decision {
                    ActionDecision::Realize(_) => Withheld::Realized,
                    _ => Withheld::Blocked,
                });
            }
            match decision {
                ActionDecision::Realize(calls) => {
                    let mut calls: Vec<model::ToolCall> = calls
                        .iter()
                        .map(|c| {
                            let id = self.fresh_id("realized");
                            model_call(c, id)
                        })
                        .collect();
                    self.keep_first_call(&mut calls);
                    // Record the message as the structured call it meant,
                    // so the conversation the model sees stays consistent.
                    self.messages
                        .push(ChatMessage::assistant_with_tool_calls(None, calls.clone()));
                    let planned = calls
                        .into_iter()
                        .map(|c| (c, CallSource::Realized))
                        .collect();
                    // Rescued calls still go through realization one by one,
                    // as the WIT contract says.
                    self.run_calls(planned).await?;
                    self.check_turns()?;
                    continue;
                }
                ActionDecision::Block(feedback) => {
                    self.messages.push(ChatMessage::assistant(text));
                    self.note("realize", feedback);
                    self.regulate(StepKind::AgentMessage, None, vec![]).await?;
                    self.check_turns()?;
                    continue;
                }
                ActionDecision::Proceed | ActionDecision::Execute(_) => {}
            }
            self.messages.push(ChatMessage::assistant(text.clone()));
            if let Some(reply) = self.protocol.no_call_reply.clone()
                && !self.protocol.user_simulator
            {
                // No user in the loop: the environment's fixed reply.
                self.regulate(StepKind::AgentMessage, Some(text), vec![])
                    .await?;
                self.check_turns()?;
                self.check_limits()?;
                self.step += 1;
                self.transcript.push(Entry::User {
                    step: self.step,
                    text: reply.clone(),
                });
                self.messages.push(ChatMessage::user(reply.clone()));
                self.regulate(StepKind::UserMessage, Some(reply), vec![])
                    .await?;
                continue;
            }
            self.user_view.push(Utterance::agent(text.clone()));
            if text.contains(AGENT_STOP) {
                return Ok(End(EndReason::AgentStop, None));
            }
            self.regulate(StepKind::AgentMessage, Some(text), vec![])
                .await?;
            self.check_limits()?;
            let reply = self.user_turn().await?;
            self.messages.push(ChatMessage::user(reply.text.clone()));
            if reply.stop.is_some() {
                return Ok(End(EndReason::UserStop, None));
            }
            self.regulate(StepKind::UserMessage, Some(reply.text), vec![])
                .await?;
        }
    }

    /// The environment contract: the harness rewrites the system prompt and
    /// the tool descriptions the model sees; returns the system prompt.
    async fn apply_contract(
        &mut self,
        domain: &dyn Domain,
        env_tools: &[ecdysis_env::ToolSpec],
    ) -> Result<String, End> {
        let contract = ContractInput {
            domain: domain.name().to_string(),
            system_prompt: domain.system_prompt(),
            tools: wit_tools(domain),
        };
        let contract = hooked(self.session.contract(contract).await)?;
        self.tools = env_tools
            .iter()
            .map(|t| {
                let description = contract
                    .tool_descriptions
                    .iter()
                    .find(|d| d.name == t.name)
                    .map(|d| d.description.clone())
                    .unwrap_or_else(|| t.description.clone());
                FunctionTool::new(t.name.clone(), description, t.parameters.clone())
            })
            .collect();
        Ok(contract.system_prompt)
    }

    /// Procedural skills, chosen from what the agent can see only (the
    /// domain and the user's first message), appended to the system prompt.
    async fn inject_skills(
        &mut self,
        domain: &dyn Domain,
        first: &UserTurn,
        mut system_prompt: String,
    ) -> Result<String, End> {
        let view = sandbox::TaskView {
            domain: domain.name().to_string(),
            first_user_message: first.text.clone(),
        };
        let step = self.step;
        let guidance = hooked(self.session.skills(step, view).await)?;
        for g in &guidance {
            system_prompt.push_str(&format!("\n\n## {}\n{}", g.title, g.text));
            self.transcript.push(Entry::Harness {
                step,
                hook: "skills".into(),
                text: format!("{}: {}", g.title, g.text),
            });
        }
        Ok(system_prompt)
    }

    /// Under a first-call-only protocol, the calls of one response after
    /// the first are not run. They leave the conversation too: a call
    /// without an answer makes the next request invalid for strict chat
    /// APIs (upstream sends it unanswered).
    fn keep_first_call(&self, calls: &mut Vec<model::ToolCall>) {
        if self.protocol.first_call_only {
            calls.truncate(1);
        }
    }

    fn check_limits(&self) -> Result<(), End> {
        if self.step >= self.max_steps {
            return Err(End(EndReason::MaxSteps, None));
        }
        if self.protocol.tool_errors_capped && self.errors >= self.max_errors {
            return Err(End(EndReason::TooManyErrors, None));
        }
        Ok(())
    }

    /// The protocol's cap on agent turns (DBBench's 15 rounds), checked
    /// after a turn has been answered.
    fn check_turns(&self) -> Result<(), End> {
        match self.protocol.max_agent_turns {
            Some(cap) if self.agent_turns >= cap => Err(End(EndReason::MaxSteps, None)),
            _ => Ok(()),
        }
    }

    /// Mark the last agent message's text as never said to the user (the
    /// COMMUNICATE check then ignores it).
    fn withhold_last_text(&mut self, why: Withheld) {
        if let Some(Entry::Agent { withheld, .. }) = self
            .transcript
            .iter_mut()
            .rev()
            .find(|e| matches!(e, Entry::Agent { .. }))
        {
            *withheld = Some(why);
        }
    }

    fn fresh_id(&mut self, prefix: &str) -> String {
        self.next_call_id += 1;
        format!("{prefix}_{}", self.next_call_id)
    }

    /// Show a harness note to the model before its next turn.
    fn note(&mut self, hook: &str, text: String) {
        self.transcript.push(Entry::Harness {
            step: self.step,
            hook: hook.to_string(),
            text: text.clone(),
        });
        self.pending_notes.push((hook.to_string(), text));
    }

    fn flush_notes(&mut self) {
        for (_, text) in self.pending_notes.drain(..) {
            // A system-role note: it is not the customer speaking, and the
            // user simulator never sees it.
            self.messages.push(ChatMessage::system(format!(
                "[Runtime harness note] {text}"
            )));
        }
    }

    async fn agent_call(&mut self) -> Result<ecdysis_model::ChatResponse, End> {
        if let Some(cap) = self.max_request_tokens {
            // Checked before sending: a request past the cap would be paid
            // for (or refused by the endpoint after queueing) anyway.
            let estimate = self.messages.estimate(&self.tools) as u64;
            if estimate > cap {
                return Err(End(
                    EndReason::RequestTooLarge,
                    Some(format!(
                        "the next agent request would carry about {estimate} tokens, over the cap of {cap}: not sent"
                    )),
                ));
            }
        }
        // The conversation goes into the request and comes back after the
        // call: copying it for every turn made each episode's copies
        // quadratic in its length.
        let request = ChatRequest::new(self.messages.lend())
            .with_tools(self.tools.clone())
            .with_sampling(self.sampling.clone())
            .with_cache_salt(self.cache_salt.clone());
        let waited = Instant::now();
        let result = self.agent.chat(&request).await;
        self.model_wait += waited.elapsed();
        self.messages.give_back(request.messages);
        match result {
            Ok(r) => {
                self.agent_usage.add(r.usage.as_ref(), r.cached);
                Ok(r)
            }
            Err(e) => Err(model_end(&e)),
        }
    }

    /// The user's next message to the agent. In a dual-control domain the
    /// user may first act on their device, any number of times: each turn
    /// of device calls is a step, and so is the batch of their results (the
    /// step cap is checked after it), and the results go to the user
    /// alone.
    async fn user_turn(&mut self) -> Result<UserTurn, End> {
        loop {
            self.step += 1;
            // Token counts of an LLM user land in the run's ledger (its
            // model is metered); here we count the turns.
            self.user_usage.add(None, false);
            let waited = Instant::now();
            let result = self.user.respond(&self.user_view).await;
            self.model_wait += waited.elapsed();
            let reply = match result {
                Ok(reply) => reply,
                Err(UserSimError::Model(e)) => return Err(model_end(&e)),
                Err(e) => {
                    return Err(End(
                        EndReason::ModelError,
                        Some(format!("user simulator: {e}")),
                    ));
                }
            };
            if reply.calls.is_empty() {
                self.transcript.push(Entry::User {
                    step: self.step,
                    text: reply.text.clone(),
                });
                self.user_view.push(Utterance::user(reply.text.clone()));
                return Ok(reply);
            }
            self.user_view
                .push(Utterance::device_calls(reply.calls.clone()));
            // As τ²: the caps are checked once the results are in, not
            // between a message to the environment and its answer.
            self.run_device_calls(reply.calls).await;
            self.check_limits()?;
        }
    }

    /// Runs the user's device calls on the user's side of the environment
    /// (one step), recording them for the evaluator and handing the
    /// results to the user. The harness does not see them: it stands
    /// between the agent and the environment, and the agent cannot see the
    /// user's device.
    async fn run_device_calls(&mut self, calls: Vec<model::ToolCall>) {
        self.step += 1;
        for call in calls {
            let env_call = env_call(&call.name, &call.arguments);
            let env = self.env.clone();
            let out = self
                .place
                .run(move || {
                    let mut env = env.lock().unwrap_or_else(|p| p.into_inner());
                    env.call_user(&env_call.name, &env_call.arguments)
                })
                .await
                .unwrap_or_else(|e| ecdysis_env::ToolOutput {
                    content: format!("Error: the environment call failed: {e}"),
                    error: true,
                });
            // τ² counts the user's failed calls toward the error cap too.
            if out.error {
                self.errors += 1;
            }
            self.transcript.push(Entry::Tool {
                step: self.step,
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
                proposed: None,
                content: out.content.clone(),
                error: out.error,
                blocked: false,
                source: CallSource::User,
            });
            self.user_view.push(Utterance::device(call.id, out.content));
        }
    }

    /// Realize each proposed call, then run the ones that survive.
    async fn run_calls(&mut self, planned: Vec<(model::ToolCall, CallSource)>) -> Result<(), End> {
        let mut decided = Vec::new();
        for (call, source) in planned {
            let step = self.step;
            let decision = hooked(
                self.session
                    .realize(step, AgentAction::Call(wit_call(&call)))
                    .await,
            )?;
            decided.push((call, source, decision));
        }
        let outcomes = self.execute(decided).await?;
        self.regulate(StepKind::ToolResults, None, outcomes).await
    }

    /// Run one step's decided calls and return their outcomes (regulation
    /// is the caller's: see [`Episode::regulate`]).
    async fn execute(
        &mut self,
        decided: Vec<(model::ToolCall, CallSource, ActionDecision)>,
    ) -> Result<Vec<sandbox::ToolOutcome>, End> {
        self.step += 1;
        let step = self.step;
        let mut outcomes = Vec::new();
        let mut finished = false;
        for (call, source, decision) in decided {
            let (ran, source, proposed, blocked_text) = match decision {
                ActionDecision::Execute(new) => {
                    let mut ran = model_call(&new, call.id.clone());
                    ran.id = call.id.clone();
                    let changed = ran != call;
                    (
                        ran,
                        if changed && source == CallSource::Model {
                            CallSource::Rewritten
                        } else {
                            source
                        },
                        changed.then(|| call.clone()),
                        None,
                    )
                }
                ActionDecision::Block(text) => (call.clone(), source, None, Some(text)),
                ActionDecision::Proceed | ActionDecision::Realize(_) => {
                    (call.clone(), source, None, None)
                }
            };
            let (content, error, blocked) = match blocked_text {
                Some(text) => (
                    format!("[Blocked by the runtime harness] {text}"),
                    false,
                    true,
                ),
                None => {
                    let call = env_call(&ran.name, &ran.arguments);
                    // A domain's call may wait on a server (DBBench's
                    // SQL): then it runs on the blocking pool, not here.
                    let env = self.env.clone();
                    let out = self
                        .place
                        .run(move || {
                            let mut env = env.lock().unwrap_or_else(|p| p.into_inner());
                            env.call(&call.name, &call.arguments)
                        })
                        .await
                        .unwrap_or_else(|e| ecdysis_env::ToolOutput {
                            content: format!("Error: the environment call failed: {e}"),
                            error: true,
                        });
                    finished = self.protocol.final_tools.contains(&ran.name);
                    (out.content, out.error, false)
                }
            };
            if error {
                self.errors += 1;
            }
            self.messages
                .push(ChatMessage::tool(ran.id.clone(), content.clone()));
            self.transcript.push(Entry::Tool {
                step,
                call_id: ran.id.clone(),
                name: ran.name.clone(),
                arguments: ran.arguments.clone(),
                proposed,
                content: content.clone(),
                error,
                blocked,
                source,
            });
            outcomes.push(sandbox::ToolOutcome {
                call: wit_call(&ran),
                content,
                error,
                blocked,
            });
            if finished {
                // The domain's final tool ran (DBBench's commit): the
                // episode ends here, later calls of the turn are not run.
                return Err(End(EndReason::AgentStop, None));
            }
        }
        Ok(outcomes)
    }

    /// Run the regulation hook after a step and act on its answer. A forced
    /// call is a step of its own: it counts against the step and error caps
    /// (checked before it runs), runs, and is regulated in turn, in a loop —
    /// never by recursion, so a harness that forces a call after every step
    /// ends at `max_steps` (or `too_many_errors`) in bounded time and stack.
    async fn regulate(
        &mut self,
        kind: StepKind,
        text: Option<String>,
        outcomes: Vec<sandbox::ToolOutcome>,
    ) -> Result<(), End> {
        let mut report = (kind, text, outcomes);
        loop {
            let Some(call) = self.regulate_once(report.0, report.1, report.2).await? else {
                return Ok(());
            };
            self.check_limits()?;
            self.flush_notes();
            let id = self.fresh_id("forced");
            let call = model_call(&call, id);
            self.messages.push(ChatMessage::assistant_with_tool_calls(
                None,
                vec![call.clone()],
            ));
            // The host already checked the call against the contract; it
            // runs as the agent's next action.
            let outcomes = self
                .execute(vec![(call, CallSource::Forced, ActionDecision::Proceed)])
                .await?;
            report = (StepKind::ToolResults, None, outcomes);
        }
    }

    /// One regulation hook call and what it asks: `Some(call)` when it
    /// forces a call, which [`Episode::regulate`] runs.
    async fn regulate_once(
        &mut self,
        kind: StepKind,
        text: Option<String>,
        outcomes: Vec<sandbox::ToolOutcome>,
    ) -> Result<Option<sandbox::ToolCall>, End> {
        let report = StepReport {
            step: self.step,
            steps_left: self.max_steps.saturating_sub(self.step),
            errors_left: self.max_errors.saturating_sub(self.errors),
            kind,
            text,
            outcomes,
        };
        let regulation = hooked(self.session.regulate(report).await)?;
        match regulation {
            Regulation::Continue => Ok(None),
            Regulation::Annotate(note) => {
                // Appended to the last tool result the model will read; with
                // no tool result yet it becomes a note.
                match self.messages.last_mut() {
                    Some(ChatMessage::Tool { content, .. }) => {
                        content.push_str(&format!("\n\n[Runtime harness note] {note}"));
                        self.transcript.push(Entry::Harness {
                            step: self.step,
                            hook: "regulate".into(),
                            text: note,
                        });
                    }
                    _ => self.note("regulate", note),
                }
                Ok(None)
            }
            Regulation::Inject(note) => {
                self.note("regulate", note);
                Ok(None)
            }
            Regulation::ForceCall(call) => Ok(Some(call)),
            Regulation::Stop(reason) => Err(End(EndReason::HarnessStop, Some(reason))),
        }
    }
}

fn response_testbed(r: &ecdysis_model::ChatResponse) -> Option<ecdysis_model::TestbedNote> {
    r.testbed.clone()
}

#[cfg(test)]
mod tests {
    use ecdysis_model::{ModelFuture, ScriptedUser, SimAgent, SimProfile};

    use super::*;

    /// The agent model, recording the whole-request estimate of each
    /// request it is sent.
    struct Recording {
        inner: SimAgent,
        estimates: Mutex<Vec<usize>>,
    }

    impl ChatModel for Recording {
        fn name(&self) -> &str {
            self.inner.name()
        }

        fn chat<'a>(&'a self, request: &'a ChatRequest) -> ModelFuture<'a> {
            let estimate = ecdysis_model::tokens::estimate_request(request);
            self.estimates
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(estimate);
            self.inner.chat(request)
        }
    }

    fn telecom() -> Arc<dyn Domain> {
        let data = ecdysis_tau2::locate(None).unwrap_or_else(|e| panic!("{e}"));
        ecdysis_domains::open("tau2/telecom", &data).unwrap_or_else(|e| panic!("{e}"))
    }

    /// An oracle episode of `task_id` under `cap`: its record and the
    /// estimates of the requests sent.
    fn episode(
        domain: &Arc<dyn Domain>,
        task_id: &str,
        cap: Option<u64>,
    ) -> (EpisodeRecord, Vec<usize>) {
        let (view, oracle) = domain.task(task_id).expect("task");
        let agent = Arc::new(Recording {
            inner: SimAgent::new(
                SimProfile::builtins().remove(0),
                oracle.gold_plan().into(),
                7,
            )
            .with_base_prompt(domain.system_prompt()),
            estimates: Mutex::new(Vec::new()),
        });
        let setup = EpisodeSetup {
            domain: domain.clone(),
            task: view,
            trial: 0,
            seed: 7,
            agent: agent.clone(),
            user: Box::new(ScriptedUser::new(oracle.user_script())),
            harness: None,
            policy: FailurePolicy::FailClosed,
            layers: LayerSet::ALL,
            max_steps: 200,
            max_errors: 10,
            max_request_tokens: cap,
            sampling: SamplingArgs::default(),
        };
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let record = rt.block_on(run_episode(setup));
        let estimates = agent
            .estimates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        (record, estimates)
    }

    #[test]
    fn the_request_cap_refuses_the_first_request_whose_whole_estimate_is_over_it() {
        let domain = telecom();
        // The first task whose conversation takes a few agent turns, so the
        // cap is checked on a conversation that grew between checks.
        let (task_id, sent) = domain
            .tasks(Some("small"))
            .expect("small")
            .into_iter()
            .find_map(|t| {
                let (record, sent) = episode(&domain, &t.id, None);
                assert_eq!(record.end, EndReason::UserStop, "{:?}", record.end_detail);
                (sent.len() >= 5).then_some((t.id, sent))
            })
            .expect("a task of five agent turns or more");
        // The conversation only grows: so does every request's estimate.
        assert!(sent.windows(2).all(|w| w[0] < w[1]), "{sent:?}");
        let k = sent.len() / 2;
        let (capped, sent_capped) = episode(&domain, &task_id, Some(sent[k] as u64 - 1));
        assert_eq!(capped.end, EndReason::RequestTooLarge);
        assert_eq!(sent_capped, sent[..k]);
        let detail = capped.end_detail.unwrap_or_default();
        assert!(
            detail.contains(&format!("about {} tokens", sent[k])),
            "{detail}"
        );
        let (at_cap, sent_at_cap) = episode(&domain, &task_id, Some(*sent.last().unwrap() as u64));
        assert_eq!(at_cap.end, EndReason::UserStop);
        assert_eq!(sent_at_cap, sent);
    }
}

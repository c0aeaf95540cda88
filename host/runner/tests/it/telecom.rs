//! τ² telecom's dual control through the episode loop: the user acts on
//! their own device, the agent only talks and uses the carrier's tools.
//! Offline participants: the `sim:oracle` testbed agent (it asks the user
//! for the user's gold actions) and the scripted user (it carries out the
//! device actions it is asked for). Testbed runs: they check the loop and
//! the scoring, not any model.

use std::sync::Arc;

use ecdysis_env::{Domain, Requestor};
use ecdysis_model::user::{Speaker, UserFuture, UserSimulator, UserTurn, Utterance};
use ecdysis_model::{ChatModel, SamplingArgs, ScriptedUser, SimAgent, SimProfile};
use ecdysis_runner::agent::{CallSource, EndReason, Entry, EpisodeRecord, EpisodeSetup};
use ecdysis_runner::eval::score_final;
use ecdysis_sandbox::sandbox::{FailurePolicy, LayerSet};

fn telecom() -> Arc<dyn Domain> {
    let data = ecdysis_tau2::locate(None).unwrap_or_else(|e| panic!("{e}"));
    ecdysis_domains::open("tau2/telecom", &data).unwrap_or_else(|e| panic!("{e}"))
}

fn setup(
    domain: &Arc<dyn Domain>,
    task_id: &str,
    agent: Arc<dyn ChatModel>,
    user: Box<dyn UserSimulator>,
) -> EpisodeSetup {
    let (view, _) = domain.task(task_id).expect("task");
    EpisodeSetup {
        domain: domain.clone(),
        task: view,
        trial: 0,
        seed: 7,
        agent,
        user,
        harness: None,
        policy: FailurePolicy::FailClosed,
        layers: LayerSet::ALL,
        max_steps: 200,
        max_errors: 10,
        max_request_tokens: None,
        sampling: SamplingArgs::default(),
    }
}

fn run(domain: &Arc<dyn Domain>, setup: EpisodeSetup) -> EpisodeRecord {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (mut record, state) = rt.block_on(ecdysis_runner::agent::run_episode_to_state(setup));
    score_final(&**domain, &mut record, state).expect("score");
    record
}

fn oracle_episode(domain: &Arc<dyn Domain>, task_id: &str) -> EpisodeRecord {
    let (_, oracle) = domain.task(task_id).expect("task");
    let profile = SimProfile::builtins().remove(0);
    assert_eq!(profile.model_name(), "sim:oracle");
    let agent: Arc<dyn ChatModel> = Arc::new(
        SimAgent::new(profile, oracle.gold_plan().into(), 7)
            .with_base_prompt(domain.system_prompt()),
    );
    let user = Box::new(ScriptedUser::new(oracle.user_script()));
    run(domain, setup(domain, task_id, agent, user))
}

#[test]
fn the_oracle_agent_and_the_scripted_user_solve_the_small_set_through_the_users_device() {
    let domain = telecom();
    let tasks = domain.tasks(Some("small")).expect("small");
    assert_eq!(tasks.len(), 20);
    let mut device_calls = 0;
    for t in &tasks {
        let record = oracle_episode(&domain, &t.id);
        assert_eq!(
            record.end,
            EndReason::UserStop,
            "{}: {:?}",
            t.id,
            record.end_detail
        );
        assert!(
            record.success,
            "{}: reward {} ({})",
            t.id,
            record.reward,
            record
                .evaluation
                .as_ref()
                .map(|e| e.to_string())
                .unwrap_or_default()
        );
        // The user's calls are recorded as theirs, in order with the
        // agent's, and nothing the agent was sent holds a device result.
        let (_, oracle) = domain.task(&t.id).expect("task");
        let wanted = oracle.user_script().device_actions.len();
        let made: Vec<_> = record
            .executed_calls()
            .into_iter()
            .filter(|c| c.requestor == Requestor::User)
            .collect();
        assert_eq!(made.len(), wanted, "{}: the user's device actions", t.id);
        device_calls += made.len();
    }
    assert!(
        device_calls > 0,
        "the small set exercises the user's device"
    );
}

/// A user that answers the greeting, then acts on the device without
/// being asked: the agent must not see the device's answer, only what the
/// user says afterwards.
struct DeviceFirst {
    turns: usize,
}

impl UserSimulator for DeviceFirst {
    fn name(&self) -> &str {
        "device-first"
    }

    fn respond<'a>(&'a mut self, conversation: &'a [Utterance]) -> UserFuture<'a> {
        self.turns += 1;
        let turn = match self.turns {
            1 => UserTurn::device(vec![ecdysis_model::ToolCall::new(
                "d1",
                "check_status_bar",
                "{}",
            )]),
            2 => {
                let last = conversation.last().expect("the device answered");
                assert_eq!(last.speaker, Speaker::Device);
                assert_eq!(last.call_id.as_deref(), Some("d1"));
                UserTurn::from_text("My phone is acting up.")
            }
            _ => UserTurn::from_text("Thanks. ###STOP###"),
        };
        Box::pin(async move { Ok(turn) })
    }
}

/// Every request the agent model receives, as text.
struct Spy {
    inner: Arc<dyn ChatModel>,
    seen: std::sync::Mutex<Vec<String>>,
}

impl ChatModel for Spy {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn chat<'a>(
        &'a self,
        request: &'a ecdysis_model::ChatRequest,
    ) -> ecdysis_model::ModelFuture<'a> {
        self.seen
            .lock()
            .unwrap()
            .push(serde_json::to_string(request).expect("request JSON"));
        self.inner.chat(request)
    }
}

#[test]
fn device_results_reach_the_user_alone_and_count_as_steps() {
    let domain = telecom();
    let id = domain.tasks(Some("small")).expect("small")[0].id.clone();
    let (_, oracle) = domain.task(&id).expect("task");
    let profile = SimProfile::builtins().remove(0);
    let spy = Arc::new(Spy {
        inner: Arc::new(SimAgent::new(profile, oracle.gold_plan().into(), 7)),
        seen: Default::default(),
    });
    let record = run(
        &domain,
        setup(
            &domain,
            &id,
            spy.clone(),
            Box::new(DeviceFirst { turns: 0 }),
        ),
    );
    let device_result = record
        .transcript
        .iter()
        .find_map(|e| match e {
            Entry::Tool {
                source: CallSource::User,
                content,
                ..
            } => Some(content.clone()),
            _ => None,
        })
        .expect("the device call is recorded");
    assert!(device_result.len() > 10, "{device_result}");
    let escaped = serde_json::to_string(&device_result).expect("JSON");
    let escaped = escaped.trim_matches('"');
    let seen = spy.seen.lock().unwrap();
    assert!(!seen.is_empty());
    for request in seen.iter() {
        assert!(
            !request.contains(escaped),
            "the device's answer reached the agent: {request:.400}"
        );
    }
    let device: Vec<&Entry> = record
        .transcript
        .iter()
        .filter(|e| {
            matches!(
                e,
                Entry::Tool {
                    source: CallSource::User,
                    ..
                }
            )
        })
        .collect();
    assert_eq!(device.len(), 1);
    let Entry::Tool { content, error, .. } = device[0] else {
        unreachable!()
    };
    assert!(!error && !content.is_empty(), "{content}");
    // The agent's first user message is what the user said, not the
    // device's answer.
    let first_user = record
        .transcript
        .iter()
        .find_map(|e| match e {
            Entry::User { text, .. } => Some(text.clone()),
            _ => None,
        })
        .expect("a user message");
    assert_eq!(first_user, "My phone is acting up.");
    // Greeting, the device turn, its results, the user's message: 4 steps
    // before the agent's first answer.
    let Entry::User { step, .. } = record
        .transcript
        .iter()
        .find(|e| matches!(e, Entry::User { .. }))
        .expect("user")
    else {
        unreachable!()
    };
    assert_eq!(*step, 4);
}

/// A user that only ever calls one device tool, never speaking.
struct DeviceForever(&'static str);

impl UserSimulator for DeviceForever {
    fn name(&self) -> &str {
        "device-forever"
    }

    fn respond<'a>(&'a mut self, _: &'a [Utterance]) -> UserFuture<'a> {
        let tool = self.0;
        Box::pin(async move {
            Ok(UserTurn::device(vec![ecdysis_model::ToolCall::new(
                "d", tool, "{}",
            )]))
        })
    }
}

/// The `sim:oracle` testbed agent for a task.
fn oracle_agent(domain: &Arc<dyn Domain>, task_id: &str) -> Arc<dyn ChatModel> {
    let (_, oracle) = domain.task(task_id).expect("task");
    Arc::new(SimAgent::new(
        SimProfile::builtins().remove(0),
        oracle.gold_plan().into(),
        7,
    ))
}

#[test]
fn a_user_that_never_stops_acting_on_the_device_ends_at_the_step_cap() {
    let domain = telecom();
    let id = domain.tasks(Some("small")).expect("small")[0].id.clone();
    let agent = oracle_agent(&domain, &id);
    let mut s = setup(
        &domain,
        &id,
        agent,
        Box::new(DeviceForever("toggle_airplane_mode")),
    );
    s.max_steps = 30;
    s.max_errors = 1000;
    let record = run(&domain, s);
    assert_eq!(record.end, EndReason::MaxSteps);
    // τ² checks the cap after the device's results: one step past it.
    assert!(record.steps <= 31, "{}", record.steps);
    assert_eq!(record.reward, 0.0);
    // Positive control right after: the same task with the scripted user.
    let record = oracle_episode(&domain, &id);
    assert!(record.success, "{:?}", record.evaluation);
}

/// A harness's read-only view covers what the agent may read: the
/// carrier's read tools. The user's device is not in it, even for a view
/// that skips the sandbox's own check.
#[test]
fn a_harness_view_cannot_read_the_users_device() {
    use ecdysis_runner::agent::{SharedEnv, SharedEnvView};
    use ecdysis_sandbox::sandbox::ReadOnlyEnv;
    let domain = telecom();
    let id = domain.tasks(Some("small")).expect("small")[0].id.clone();
    let (view, _) = domain.task(&id).expect("task");
    let env: SharedEnv = Arc::new(std::sync::Mutex::new(
        domain.new_env_for(&view).expect("env"),
    ));
    let mut harness_view = SharedEnvView::new(
        env.clone(),
        domain.tools().iter().map(|t| (t.name.clone(), t.mutates)),
    );
    for device_tool in domain.user_tools() {
        assert_eq!(
            harness_view.tool_mutates(&device_tool.name),
            None,
            "{} is not the agent's",
            device_tool.name
        );
    }
    let out = harness_view.call_read_only("check_status_bar", &serde_json::Map::new());
    assert!(out.error, "{}", out.content);
    assert_eq!(out.content, "Error: Tool 'check_status_bar' not found.");
    // Positive control: the carrier's read tool answers.
    let mut args = serde_json::Map::new();
    args.insert("phone_number".into(), "555-123-2002".into());
    let out = harness_view.call_read_only("get_customer_by_phone", &args);
    assert!(!out.error, "{}", out.content);
    assert!(out.content.contains("customer_id"), "{}", out.content);
}

/// Failed device calls count toward the error cap, as in τ².
#[test]
fn failed_device_calls_reach_the_error_cap() {
    let domain = telecom();
    let id = domain.tasks(Some("small")).expect("small")[0].id.clone();
    let agent = oracle_agent(&domain, &id);
    let mut s = setup(
        &domain,
        &id,
        agent,
        Box::new(DeviceForever("no_such_phone_tool")),
    );
    s.max_errors = 3;
    let record = run(&domain, s);
    assert_eq!(record.end, EndReason::TooManyErrors);
    assert_eq!(record.tool_errors, 3);
}

/// A stored record keeps who made each call: read back, the user's calls
/// are the user's again (worker processes and rescoring rely on it).
#[test]
fn the_users_calls_survive_a_record_round_trip() {
    let domain = telecom();
    let id = domain
        .tasks(Some("small"))
        .expect("small")
        .into_iter()
        .map(|t| t.id)
        .find(|id| {
            let (_, oracle) = domain.task(id).expect("task");
            !oracle.user_script().device_actions.is_empty()
        })
        .expect("a small task with device steps");
    let record = oracle_episode(&domain, &id);
    let text = serde_json::to_string(&record).expect("JSON");
    assert!(text.contains("\"source\":\"user\""), "{text:.300}");
    let back: EpisodeRecord = serde_json::from_str(&text).expect("read back");
    assert_eq!(back.executed_calls(), record.executed_calls());
    assert!(
        back.executed_calls()
            .iter()
            .any(|c| c.requestor == Requestor::User)
    );
}

//! AgentBench OS interaction through the episode loop: the `sim:oracle`
//! testbed agent runs each task's reference solution in the task's
//! machine and answers what it printed; the episode ends at the answer,
//! and the task's checks score it in the same machine. Testbed runs: they
//! check the loop, the protocol and the scoring, not any model.

use std::sync::Arc;

use ecdysis_agentbench_os::{self as agentbench_os, OsDomain};
use ecdysis_env::Domain;
use ecdysis_model::{ChatModel, ChatResponse, SamplingArgs, ScriptedUser, SimAgent, SimProfile};
use ecdysis_runner::agent::{CallSource, EndReason, Entry, EpisodeRecord, EpisodeSetup};
use ecdysis_runner::eval::score_final;
use ecdysis_sandbox::sandbox::{FailurePolicy, LayerSet};

fn domain() -> Arc<dyn Domain> {
    Arc::new(OsDomain::load(agentbench_os::Options::default()).unwrap_or_else(|e| panic!("{e}")))
}

fn episode(domain: &Arc<dyn Domain>, task_id: &str, agent: Arc<dyn ChatModel>) -> EpisodeRecord {
    let (view, oracle) = domain.task(task_id).expect("task");
    let setup = EpisodeSetup {
        domain: domain.clone(),
        task: view,
        trial: 0,
        seed: 7,
        agent,
        // No user in this domain: the scripted user's empty script.
        user: Box::new(ScriptedUser::new(oracle.user_script())),
        harness: None,
        policy: FailurePolicy::FailClosed,
        layers: LayerSet::ALL,
        max_steps: 200,
        max_errors: 10,
        max_request_tokens: None,
        sampling: SamplingArgs::default(),
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (mut record, state) = rt.block_on(ecdysis_runner::agent::run_episode_to_state(setup));
    score_final(&**domain, &mut record, state).expect("score");
    record
}

fn oracle(domain: &Arc<dyn Domain>, task_id: &str) -> Arc<dyn ChatModel> {
    let (_, oracle) = domain.task(task_id).expect("task");
    Arc::new(
        SimAgent::new(
            SimProfile::builtins().remove(0),
            oracle.gold_plan().into(),
            7,
        )
        .with_base_prompt(domain.system_prompt()),
    )
}

#[test]
fn the_oracle_answers_from_the_machine_and_the_check_scores_it_there() {
    let d = domain();
    // A count over files the init made, a file the agent must change
    // (the check reads the machine), a match task with a start script, and
    // an init with random data (the answer must come from the same machine).
    for id in [
        "std-004-Q19-00000",
        "std-006-new-00000",
        "std-004-Q49-00000",
        "std-001-stock-00000",
    ] {
        let record = episode(&d, id, oracle(&d, id));
        assert!(
            record.success,
            "{id}: {:?} {:?}",
            record.end, record.evaluation
        );
        assert_eq!(record.end, EndReason::AgentStop, "{id}");
        let calls: Vec<&str> = record
            .transcript
            .iter()
            .filter_map(|e| match e {
                Entry::Tool { name, source, .. } if *source == CallSource::Model => {
                    Some(name.as_str())
                }
                _ => None,
            })
            .collect();
        assert!(
            calls
                .last()
                .is_some_and(|c| *c == agentbench_os::ANSWER || *c == agentbench_os::FINISH),
            "{id}: {calls:?}"
        );
    }
}

/// A model that never calls a tool: each turn gets upstream's reply and
/// counts; the episode ends at the round limit, scored 0.
#[test]
fn a_model_without_tool_calls_ends_at_the_round_limit_with_upstreams_reply() {
    let d = domain();
    let id = "std-004-Q19-00000";
    let record = episode(&d, id, Arc::new(Chatter));
    assert_eq!(record.reward, 0.0);
    let turns = record
        .transcript
        .iter()
        .filter(|e| matches!(e, Entry::Agent { .. }))
        .count();
    assert_eq!(turns as u32, agentbench_os::MAX_ROUNDS, "{:?}", record.end);
    let replies = record
        .transcript
        .iter()
        .filter(|e| matches!(e, Entry::User { text, .. } if text == agentbench_os::NO_CALL_REPLY))
        .count();
    assert!(replies >= 7, "{replies}");
    // Positive control: the oracle on the same task.
    assert!(episode(&d, id, oracle(&d, id)).success);
}

#[test]
fn commands_read_as_upstream_words_them_and_the_machine_is_the_episodes_own() {
    let d = domain();
    let (view, _) = d.task("std-004-Q19-00000").unwrap();
    let mut env = d.new_env_for(&view).unwrap();
    let out = env.call(
        agentbench_os::BASH,
        &serde_json::json!({"script": "cat /root/matrix.txt | wc -l"}),
    );
    assert_eq!(out.content, "The output of the OS:\n\n3\r\n", "{out:?}");
    let out = env.call(agentbench_os::BASH, &serde_json::json!({"script": "true"}));
    assert_eq!(out.content, "The output of the OS is empty.");
    let out = env.call(
        agentbench_os::BASH,
        &serde_json::json!({"script": "seq 1000"}),
    );
    assert!(
        out.content
            .ends_with("\n[truncated because the output is too long]"),
        "{out:?}"
    );
    assert_eq!(
        out.content.chars().count(),
        "The output of the OS:\n\n".len() + 780 + 43
    );
    let out = env.call("rm_rf", &serde_json::json!({}));
    assert!(
        out.error && out.content == agentbench_os::INVALID_FUNCTION,
        "{out:?}"
    );
    // Another episode of the task has a fresh machine.
    let mut other = d.new_env_for(&view).unwrap();
    env.call(
        agentbench_os::BASH,
        &serde_json::json!({"script": "rm /root/matrix.txt"}),
    );
    let out = other.call(
        agentbench_os::BASH,
        &serde_json::json!({"script": "wc -l < /root/matrix.txt"}),
    );
    assert_eq!(out.content, "The output of the OS:\n\n3\r\n");
}

/// Answers every turn with text and no tool call.
struct Chatter;

impl ChatModel for Chatter {
    fn name(&self) -> &str {
        "chatter"
    }

    fn chat<'a>(&'a self, _: &'a ecdysis_model::ChatRequest) -> ecdysis_model::ModelFuture<'a> {
        Box::pin(async {
            Ok(ChatResponse {
                content: Some("I think it is 3.".into()),
                finish_reason: Some("stop".into()),
                ..ChatResponse::default()
            })
        })
    }
}

/// Sends two calls in every response: a command, then an answer.
#[derive(Default)]
struct TwoCalls {
    /// The most tool calls of one assistant message in any request.
    most_calls_seen: std::sync::Mutex<usize>,
}

impl ChatModel for TwoCalls {
    fn name(&self) -> &str {
        "two-calls"
    }

    fn chat<'a>(&'a self, req: &'a ecdysis_model::ChatRequest) -> ecdysis_model::ModelFuture<'a> {
        let most = req
            .messages
            .iter()
            .filter_map(|m| match m {
                ecdysis_model::ChatMessage::Assistant { tool_calls, .. } => Some(tool_calls.len()),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let mut seen = self.most_calls_seen.lock().unwrap();
        *seen = (*seen).max(most);
        let n = req.messages.len();
        let call = |i: usize, name: &str, args: serde_json::Value| ecdysis_model::ToolCall {
            id: format!("c{n}_{i}"),
            name: name.into(),
            arguments: args.to_string(),
        };
        let calls = vec![
            call(
                0,
                agentbench_os::BASH,
                serde_json::json!({"script": "echo x >> /root/turns"}),
            ),
            call(1, agentbench_os::ANSWER, serde_json::json!({"answer": "3"})),
        ];
        Box::pin(async move {
            Ok(ChatResponse {
                tool_calls: calls,
                finish_reason: Some("tool_calls".into()),
                ..ChatResponse::default()
            })
        })
    }
}

/// Upstream runs only the first tool call of a response: a model that
/// always sends a command and then an answer never answers, and runs its
/// command once per turn until the round limit; the conversation it is
/// sent holds only the calls that ran.
#[test]
fn only_the_first_call_of_a_response_runs() {
    let d = domain();
    let model = Arc::new(TwoCalls::default());
    let record = episode(&d, "std-004-Q19-00000", model.clone());
    let ran: Vec<&str> = record
        .transcript
        .iter()
        .filter_map(|e| match e {
            Entry::Tool { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        ran,
        vec![agentbench_os::BASH; agentbench_os::MAX_ROUNDS as usize],
        "{:?}",
        record.end
    );
    assert_eq!(record.reward, 0.0);
    assert_eq!(*model.most_calls_seen.lock().unwrap(), 1);
    // Each response still shows both calls in the transcript, as proposed.
    assert!(
        record
            .transcript
            .iter()
            .any(|e| matches!(e, Entry::Agent { tool_calls, .. } if tool_calls.len() == 2))
    );
}

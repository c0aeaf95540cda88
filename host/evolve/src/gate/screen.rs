//! The gold-free screen: re-drive the tool calls of recorded trajectories
//! through a candidate's realization hook, on a fresh environment, and
//! reject the candidate if it blocks a call that used to succeed. It can
//! only reject: passing it proves nothing about the score.

use std::sync::{Arc, Mutex};

use ecdysis_env::Domain;
use ecdysis_runner::agent::{CallSource, Entry, EpisodeRecord, SharedEnv, SharedEnvView};
use ecdysis_sandbox::sandbox::{
    ActionDecision, AgentAction, ContractInput, EpisodeInfo, LoadedHarness, ToolCall, ToolSpec,
};

/// A call the candidate would block although it succeeded before.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ScreenHit {
    /// The task of the recorded episode.
    pub task_id: String,
    /// Its trial.
    pub trial: u32,
    /// The tool of the blocked call (`constructor` or `contract` when the
    /// candidate failed before any call).
    pub tool: String,
    /// The call's arguments, as JSON text.
    pub arguments: String,
    /// The candidate's block feedback, or the hook's error.
    pub feedback: String,
}

/// Screen `candidate` against `records`; returns the calls it would wrongly
/// block (empty: pass). A hook failure counts as a hit too.
pub fn screen(
    candidate: &LoadedHarness,
    domain: &dyn Domain,
    records: &[EpisodeRecord],
) -> Vec<ScreenHit> {
    let tools: Vec<ToolSpec> = ecdysis_runner::agent::boundary::wit_tools(domain);
    let flags: Vec<(String, bool)> = tools.iter().map(|t| (t.name.clone(), t.mutates)).collect();
    let mut hits = Vec::new();
    for r in records {
        // τ²'s tasks start from their own state (telecom's set-up breaks
        // the phone), cheaply in memory; DBBench's would need a server
        // schema per record, and its screening never needed one.
        let start = domain
            .protocol()
            .user_simulator
            .then(|| domain.task(&r.task_id).ok())
            .flatten()
            .and_then(|(view, _)| domain.new_env_for(&view).ok());
        let env: SharedEnv = Arc::new(Mutex::new(start.unwrap_or_else(|| domain.new_env())));
        let info = EpisodeInfo {
            domain: domain.name().to_string(),
            max_steps: ecdysis_env::DEFAULT_MAX_STEPS,
            max_errors: ecdysis_env::DEFAULT_MAX_ERRORS,
        };
        let hit = |tool: &str, arguments: &str, feedback: String| ScreenHit {
            task_id: r.task_id.clone(),
            trial: r.trial,
            tool: tool.to_string(),
            arguments: arguments.to_string(),
            feedback,
        };
        let mut ep = match candidate.start_episode(
            &info,
            &tools,
            Box::new(SharedEnvView::new(env.clone(), flags.clone())),
        ) {
            Ok(ep) => ep,
            Err(e) => {
                hits.push(hit("constructor", "", e.to_string()));
                continue;
            }
        };
        if let Err(e) = ep.contract(&ContractInput {
            domain: domain.name().to_string(),
            system_prompt: domain.system_prompt(),
            tools: tools.clone(),
        }) {
            hits.push(hit("contract", "", e.to_string()));
            continue;
        }
        for e in &r.transcript {
            let Entry::Tool {
                call_id,
                name,
                arguments,
                error,
                blocked,
                source,
                ..
            } = e
            else {
                continue;
            };
            if *blocked {
                continue;
            }
            if *source == CallSource::User {
                // The user's own device step: it never passes a harness,
                // but the state moves as it did in the episode.
                let args = serde_json::from_str(arguments).unwrap_or(serde_json::Value::Null);
                env.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .call_user(name, &args);
                continue;
            }
            let call = ToolCall {
                id: call_id.clone(),
                name: name.clone(),
                arguments: arguments.clone(),
            };
            match ep.realize(&AgentAction::Call(call)) {
                Ok(h) => {
                    if let ActionDecision::Block(feedback) = h.value
                        && !*error
                    {
                        hits.push(hit(name, arguments, feedback));
                    }
                }
                Err(err) => {
                    hits.push(hit(name, arguments, err.to_string()));
                    break;
                }
            }
            // Keep the state moving as it did in the recorded episode.
            let args = serde_json::from_str(arguments).unwrap_or(serde_json::Value::Null);
            env.lock()
                .unwrap_or_else(|p| p.into_inner())
                .call(name, &args);
        }
    }
    hits
}

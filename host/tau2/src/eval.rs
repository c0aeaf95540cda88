//! τ²'s evaluation (`evaluate_simulation` with `EvaluationType.ALL`): the
//! reward is the product of the checks named by the task's reward basis
//! (`[DB, COMMUNICATE]` for every airline/retail task); the ACTION check is
//! computed as a diagnostic.

use ecdysis_env::{ActionCheck, CommunicateCheck, DB_DIFF_LIMIT, Evaluation, ToolCall, Trajectory};
use ecdysis_pyemu::{Val, ops};

use super::db::Db;
use super::task::{Action, Criteria, RewardType};
use super::tools::Toolkit;

/// Runs `calls` on a clone of `pristine`, ignoring their results (the
/// reference's `set_state` replay and gold-action replay).
pub fn replay<'a>(
    toolkit: &Toolkit,
    pristine: &Db,
    calls: impl IntoIterator<Item = &'a ToolCall>,
) -> Db {
    let mut db = pristine.clone();
    for c in calls {
        toolkit.call(&mut db, &c.name, &c.arguments);
    }
    db
}

/// The gold actions as tool calls. Actions requested by the user would go
/// to user tools, which these domains do not have (the reference raises
/// and ignores the error), so they are dropped.
pub fn gold_calls(actions: &[Action]) -> Vec<ToolCall> {
    actions
        .iter()
        .filter(|a| a.requestor == "assistant")
        .map(|a| {
            ToolCall::agent(
                a.name.clone(),
                serde_json::Value::Object(a.arguments.clone()),
            )
        })
        .collect()
}

/// `Action.compare_with_tool_call`.
fn action_matches(action: &Action, call: &ToolCall) -> bool {
    call_matches(
        &action.name,
        &action.arguments,
        action.compare_args.as_deref(),
        call,
    )
}

/// `Action.compare_with_tool_call` for a gold action given by its parts:
/// the same name, and equal values (Python equality) for `compare_args`,
/// or for every argument of the call when `None`. Who made the call is not
/// compared, as in τ².
pub(crate) fn call_matches(
    name: &str,
    arguments: &serde_json::Map<String, serde_json::Value>,
    compare_args: Option<&[String]>,
    call: &ToolCall,
) -> bool {
    if name != call.name {
        return false;
    }
    let empty = serde_json::Map::new();
    let call_args = call.arguments.as_object().unwrap_or(&empty);
    let keys: Vec<&str> = match compare_args {
        None => call_args.keys().map(String::as_str).collect(),
        Some(k) => k.iter().map(String::as_str).collect(),
    };
    if keys.is_empty() {
        return true;
    }
    // Values equal as JSON are equal in Python too (JSON has no NaN): the
    // usual match needs no Python values. Any other pair (`1` and `1.0`,
    // a key on one side only) is decided by Python's equality below.
    if keys.iter().all(|k| call_args.get(*k) == arguments.get(*k)) {
        return true;
    }
    let pick = |m: &serde_json::Map<String, serde_json::Value>| {
        let d = ecdysis_pyemu::Dict::from_pairs(
            m.iter()
                .filter(|(k, _)| keys.contains(&k.as_str()))
                .map(|(k, v)| (k.as_str(), Val::from_json(v))),
        );
        Val::dict(d)
    };
    ops::eq(&pick(call_args), &pick(arguments))
}

/// The COMMUNICATE check of one string: some non-empty assistant message
/// contains it, case-insensitively, once its commas are dropped.
pub(crate) fn communicated(info: &str, assistant_texts: &[String]) -> bool {
    let needle = info.to_lowercase();
    assistant_texts
        .iter()
        .filter(|t| !t.trim().is_empty())
        .any(|t| t.to_lowercase().replace(',', "").contains(&needle))
}

/// A task's gold outcome: the database after its gold actions, and that
/// database's hash. It depends on the task alone, so a domain computes it
/// once and every evaluation of the task reuses it.
pub struct Gold {
    db: Db,
    hash: String,
}

impl Gold {
    /// Replay the task's gold actions on the pristine database.
    pub fn replay(toolkit: &Toolkit, pristine: &Db, criteria: &Criteria) -> Gold {
        let actions = criteria
            .evaluation
            .as_ref()
            .and_then(|e| e.actions.as_deref())
            .unwrap_or(&[]);
        let db = replay(toolkit, pristine, &gold_calls(actions));
        let hash = db.hash();
        Gold { db, hash }
    }
}

/// Evaluates one episode against the task's gold outcome. `final_db` is
/// the state the episode ended in when the caller has it; without it the
/// episode's writes are replayed on a clone of `pristine`, which gives the
/// same state.
pub fn evaluate(
    toolkit: &Toolkit,
    pristine: &Db,
    criteria: &Criteria,
    gold: &Gold,
    run: &Trajectory,
    writes: &dyn Fn(&str) -> bool,
    final_db: Option<Db>,
) -> Evaluation {
    let finished = run.termination.is_stop();
    let Some(ev) = &criteria.evaluation else {
        return Evaluation {
            reward: if finished { 1.0 } else { 0.0 },
            success: finished,
            premature: !finished,
            db_match: true,
            final_db_hash: String::new(),
            db_diff: Vec::new(),
            gold_db_hash: String::new(),
            communicate_ok: true,
            communicate_checks: Vec::new(),
            action_ok: true,
            action_checks: Vec::new(),
            reward_basis: Vec::new(),
            env_assertion_ok: true,
            env_assertion_checks: Vec::new(),
        };
    };
    let actions = ev.actions.as_deref().unwrap_or(&[]);
    let predicted = final_db.unwrap_or_else(|| {
        replay(
            toolkit,
            pristine,
            // A user's call has no tools to reach in these domains (τ²
            // raises, and the replay ignores it).
            run.tool_calls
                .iter()
                .filter(|c| c.requestor.is_assistant() && writes(&c.name)),
        )
    });
    let db_diff = predicted.diff(&gold.db, DB_DIFF_LIMIT);
    let db_match = db_diff.is_empty();
    drop(predicted);

    let communicate_checks: Vec<CommunicateCheck> = ev
        .communicate_info
        .as_deref()
        .unwrap_or(&[])
        .iter()
        .map(|info| CommunicateCheck {
            info: info.clone(),
            met: communicated(info, &run.assistant_texts),
        })
        .collect();
    let communicate_ok = communicate_checks.iter().all(|c| c.met);

    let action_checks: Vec<ActionCheck> = actions
        .iter()
        .map(|a| ActionCheck {
            action_id: a.action_id.clone(),
            name: a.name.clone(),
            matched: run.tool_calls.iter().any(|c| action_matches(a, c)),
        })
        .collect();
    let action_ok = action_checks.iter().all(|c| c.matched);

    let mut reward = 1.0;
    for basis in &ev.reward_basis {
        let part = match basis {
            RewardType::Db => db_match,
            RewardType::Communicate => communicate_ok,
            RewardType::Action => action_ok,
            // Rejected when the tasks are loaded.
            RewardType::EnvAssertion | RewardType::NlAssertion => true,
        };
        if !part {
            reward = 0.0;
        }
    }
    if !finished {
        reward = 0.0;
    }
    Evaluation {
        reward,
        success: (reward - 1.0f64).abs() <= 1e-6,
        premature: !finished,
        db_match,
        // Equal states hash equally: a match costs no hashing at all, and a
        // mismatch is described by its diff instead.
        final_db_hash: if db_match {
            gold.hash.clone()
        } else {
            String::new()
        },
        db_diff,
        gold_db_hash: gold.hash.clone(),
        communicate_ok,
        communicate_checks,
        action_ok,
        action_checks,
        reward_basis: ev
            .reward_basis
            .iter()
            .map(|b| b.as_str().to_string())
            .collect(),
        env_assertion_ok: true,
        env_assertion_checks: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action(args: serde_json::Value, compare: Option<Vec<&str>>) -> Action {
        Action {
            action_id: "a".into(),
            requestor: "assistant".into(),
            name: "t".into(),
            arguments: args.as_object().unwrap().clone(),
            compare_args: compare.map(|c| c.into_iter().map(String::from).collect()),
        }
    }

    fn call(args: serde_json::Value) -> ToolCall {
        ToolCall::agent("t", args)
    }

    #[test]
    fn action_matching_follows_compare_with_tool_call() {
        let a = action(serde_json::json!({"x": 1, "y": "b"}), None);
        assert!(
            action_matches(&a, &call(serde_json::json!({"x": 1.0, "y": "b"}))),
            "1 == 1.0"
        );
        assert!(
            action_matches(&a, &call(serde_json::json!({"x": 1}))),
            "only the call's keys are compared"
        );
        assert!(
            action_matches(&a, &call(serde_json::json!({}))),
            "no keys: match"
        );
        assert!(
            !action_matches(&a, &call(serde_json::json!({"x": 1, "z": 0}))),
            "extra key"
        );
        let b = action(serde_json::json!({"x": 1, "y": "b"}), Some(vec!["y"]));
        assert!(action_matches(
            &b,
            &call(serde_json::json!({"x": 2, "y": "b"}))
        ));
        assert!(!action_matches(&b, &call(serde_json::json!({"x": 1}))));
        assert!(!action_matches(
            &a,
            &ToolCall::agent("u", serde_json::json!({}))
        ));
    }
}

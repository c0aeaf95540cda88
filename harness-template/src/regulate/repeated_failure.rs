//! Why: a model that repeats an identical failing call will get the same
//! failure; after the second identical failure it is told plainly not to
//! repeat it and what to change. Only a long run of identical failures
//! despite that note ends the episode (clearly stuck).

use crate::tables::{ERROR_ADVICE, REGULATION};
use crate::text::say;
use crate::types::{Outcome, Step};

#[derive(Debug, Default)]
pub struct State {
    /// (call key, failures of that exact call so far).
    failures: Vec<(String, u32)>,
    /// The last failed call and how many times in a row it failed.
    last: Option<(String, u32)>,
}

pub enum Finding {
    Nothing,
    Note(String),
    Stop(String),
}

/// The identity of each call of a step, in order ([`key`]): computed once
/// per step for every check that compares calls, since parsing the
/// arguments again per check was a large share of the hook's fuel.
pub fn keys(step: &Step) -> Vec<String> {
    step.outcomes.iter().map(key).collect()
}

/// The call's identity: name and arguments in canonical JSON form.
pub fn key(o: &Outcome) -> String {
    let args = serde_json::from_str::<serde_json::Value>(&o.call.arguments)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| o.call.arguments.clone());
    format!("{}|{}", o.call.name, args)
}

/// Advice for an error text from `tables::ERROR_ADVICE`.
pub fn advice(content: &str) -> &'static str {
    let lower = content.to_lowercase();
    ERROR_ADVICE
        .iter()
        .find(|a| lower.contains(a.contains))
        .map(|a| a.advice)
        .unwrap_or("")
}

/// `keys`: [`keys`] of `step`.
pub fn check(state: &mut State, step: &Step, keys: &[String]) -> Finding {
    let mut finding = Finding::Nothing;
    for (o, k) in step.outcomes.iter().zip(keys) {
        let k = k.clone();
        if !o.failed() {
            state.failures.retain(|(x, _)| *x != k);
            state.last = None;
            continue;
        }
        let count = match state.failures.iter_mut().find(|(x, _)| *x == k) {
            Some(entry) => {
                entry.1 += 1;
                entry.1
            }
            None => {
                state.failures.push((k.clone(), 1));
                1
            }
        };
        let in_row = match &state.last {
            Some((x, n)) if *x == k => n + 1,
            _ => 1,
        };
        state.last = Some((k, in_row));
        if in_row >= REGULATION.repeat_stop {
            return Finding::Stop(say(
                "stuck_stop",
                &[("tool", o.call.name.clone()), ("count", in_row.to_string())],
            ));
        }
        if count >= REGULATION.repeat_annotate {
            finding = Finding::Note(say(
                "repeated_failure",
                &[
                    ("tool", o.call.name.clone()),
                    ("count", count.to_string()),
                    ("advice", advice(&o.content).to_string()),
                ],
            ));
        }
    }
    finding
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`check`] with the step's keys, as `regulate` calls it.
    fn run(s: &mut State, step: &Step) -> Finding {
        check(s, step, &keys(step))
    }
    use crate::types::{Call, StepKind};

    fn failed(args: &str) -> Step {
        Step {
            step: 1,
            steps_left: 100,
            errors_left: 9,
            kind: StepKind::ToolResults,
            text: None,
            outcomes: vec![Outcome {
                call: Call::new("c", "get_order_details", args),
                content: "Error: Order not found".into(),
                error: true,
                blocked: false,
            }],
        }
    }

    #[test]
    fn second_identical_failure_is_annotated_and_a_long_run_stops() {
        let mut s = State::default();
        assert!(matches!(
            run(&mut s, &failed(r#"{"order_id":"W1"}"#)),
            Finding::Nothing
        ));
        assert!(matches!(
            run(&mut s, &failed(r#"{"order_id":"W2"}"#)),
            Finding::Nothing
        ));
        match run(&mut s, &failed(r#"{ "order_id": "W1" }"#)) {
            Finding::Note(n) => {
                assert!(
                    n.contains("failed 2 times") && n.contains("Do not repeat"),
                    "{n}"
                );
                assert!(n.contains("leading '#'"), "{n}");
            }
            _ => panic!("expected a note"),
        }
        let mut stopped = false;
        for _ in 0..REGULATION.repeat_stop {
            if matches!(
                run(&mut s, &failed(r#"{"order_id":"W1"}"#)),
                Finding::Stop(_)
            ) {
                stopped = true;
                break;
            }
        }
        assert!(stopped);
    }
}

//! Why: a model that repeats an identical call which already succeeded gets
//! the same answer again and burns steps (a real 1.5B model called
//! `transfer_to_human_agents` seven times in a row until the step limit).
//! After the identical call has succeeded the same way several times in a
//! row, it is told the result is already known and what to do instead.

use crate::tables::REGULATION;
use crate::text::say;
use crate::types::Step;

#[derive(Debug, Default)]
pub struct State {
    /// The last successful call (identity and result) and how many times in
    /// a row it came back the same.
    last: Option<(String, String, u32)>,
}

/// `keys`: [`crate::regulate::repeated_failure::keys`] of `step`.
pub fn check(state: &mut State, step: &Step, keys: &[String]) -> Option<String> {
    let mut note = None;
    for (o, k) in step.outcomes.iter().zip(keys) {
        if o.failed() {
            state.last = None;
            continue;
        }
        let k = k.clone();
        let in_row = match &state.last {
            Some((x, content, n)) if *x == k && *content == o.content => n + 1,
            _ => 1,
        };
        state.last = Some((k, o.content.clone(), in_row));
        if in_row >= REGULATION.repeat_success_annotate {
            note = Some(say(
                "repeated_success",
                &[("tool", o.call.name.clone()), ("count", in_row.to_string())],
            ));
        }
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regulate::repeated_failure::keys;

    /// [`check`] with the step's keys, as `regulate` calls it.
    fn run(s: &mut State, step: &Step) -> Option<String> {
        check(s, step, &keys(step))
    }
    use crate::types::{Call, Outcome, StepKind};

    fn step(name: &str, args: &str, content: &str, error: bool) -> Step {
        Step {
            step: 1,
            steps_left: 100,
            errors_left: 9,
            kind: StepKind::ToolResults,
            text: None,
            outcomes: vec![Outcome {
                call: Call::new("c", name, args),
                content: content.into(),
                error,
                blocked: false,
            }],
        }
    }

    #[test]
    fn only_a_run_of_identical_successes_is_annotated() {
        let mut s = State::default();
        let t = || {
            step(
                "transfer_to_human_agents",
                r#"{"summary":"x"}"#,
                "Transfer successful",
                false,
            )
        };
        for _ in 1..REGULATION.repeat_success_annotate {
            assert_eq!(run(&mut s, &t()), None);
        }
        let n = run(&mut s, &t()).expect("a note on the run");
        assert!(
            n.contains("transfer_to_human_agents") && n.contains("already"),
            "{n}"
        );
        // A different result, another call or a failure restarts the count.
        let mut s = State::default();
        for i in 0..REGULATION.repeat_success_annotate + 2 {
            let content = format!("{{\"balance\": {i}}}");
            assert_eq!(
                run(&mut s, &step("get_user_details", "{}", &content, false)),
                None
            );
        }
        let mut s = State::default();
        for _ in 0..REGULATION.repeat_success_annotate + 2 {
            assert_eq!(
                run(&mut s, &step("get_order_details", "{}", "Error: x", true)),
                None
            );
        }
    }
}

//! Why: a tool failing again and again with different arguments means the
//! model misreads it; one note per streak points back to the description,
//! the lookups and the option of telling the user.

use crate::tables::REGULATION;
use crate::text::say_in;
use crate::types::Step;

#[derive(Debug, Default)]
pub struct State {
    /// (tool, consecutive failures).
    streak: Option<(String, u32)>,
}

pub fn check(state: &mut State, step: &Step, domain: &str) -> Option<String> {
    let mut note = None;
    for o in &step.outcomes {
        let tool = o.call.name.clone();
        if !o.failed() {
            state.streak = None;
            continue;
        }
        let n = match &state.streak {
            Some((t, n)) if *t == tool => n + 1,
            _ => 1,
        };
        state.streak = Some((tool.clone(), n));
        if n == REGULATION.error_streak {
            note = Some(say_in(
                domain,
                "error_streak",
                &[("tool", tool), ("count", n.to_string())],
            ));
        }
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Call, Outcome, StepKind};

    fn outcome(name: &str, error: bool) -> Step {
        Step {
            step: 1,
            steps_left: 100,
            errors_left: 9,
            kind: StepKind::ToolResults,
            text: None,
            outcomes: vec![Outcome {
                call: Call::new("c", name, "{}"),
                content: "Error: x".into(),
                error,
                blocked: false,
            }],
        }
    }

    #[test]
    fn third_consecutive_error_on_one_tool() {
        let mut s = State::default();
        assert!(check(&mut s, &outcome("a", true), "retail").is_none());
        assert!(check(&mut s, &outcome("a", true), "retail").is_none());
        assert!(check(&mut s, &outcome("a", true), "retail").is_some());
        assert!(
            check(&mut s, &outcome("a", true), "retail").is_none(),
            "once per streak"
        );
        let mut s = State::default();
        check(&mut s, &outcome("a", true), "retail");
        check(&mut s, &outcome("a", false), "retail");
        check(&mut s, &outcome("a", true), "retail");
        assert!(check(&mut s, &outcome("a", true), "retail").is_none());
    }
}

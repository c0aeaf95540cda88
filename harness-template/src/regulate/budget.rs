//! Why: an episode cut at its step or error limit scores nothing; one
//! warning when either runs low lets the model finish (or wrap up) in time.

use crate::tables::REGULATION;
use crate::text::say;
use crate::types::Step;

#[derive(Debug, Default)]
pub struct State {
    steps_warned: bool,
    errors_warned: bool,
}

/// The step budget is low: at most the configured fraction of the steps left.
pub fn low_budget(steps_left: u32, max_steps: u32) -> bool {
    max_steps > 0 && (steps_left as f64) <= REGULATION.low_budget_fraction * max_steps as f64
}

pub fn check(state: &mut State, step: &Step, max_steps: u32, max_errors: u32) -> Vec<String> {
    let mut notes = Vec::new();
    if !state.steps_warned && low_budget(step.steps_left, max_steps) {
        state.steps_warned = true;
        notes.push(say("low_budget", &[("steps", step.steps_left.to_string())]));
    }
    if !state.errors_warned
        && step.errors_left <= REGULATION.low_errors_left
        && step.errors_left < max_errors
    {
        state.errors_warned = true;
        notes.push(say(
            "low_errors",
            &[("errors", step.errors_left.to_string())],
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::StepKind;

    fn step(steps_left: u32, errors_left: u32) -> Step {
        Step {
            step: 1,
            steps_left,
            errors_left,
            kind: StepKind::AgentMessage,
            text: None,
            outcomes: vec![],
        }
    }

    #[test]
    fn warns_once_each() {
        assert!(!low_budget(100, 200));
        assert!(low_budget(20, 200));
        assert!(!low_budget(0, 0));
        let mut s = State::default();
        assert!(check(&mut s, &step(150, 10), 200, 10).is_empty());
        assert_eq!(check(&mut s, &step(20, 2), 200, 10).len(), 2);
        assert!(check(&mut s, &step(10, 1), 200, 10).is_empty());
    }
}

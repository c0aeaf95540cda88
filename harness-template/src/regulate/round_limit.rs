//! Why: some tasks end after a fixed number of agent turns (AgentBench OS:
//! 8), and an episode cut there scores nothing even when the answer is on
//! the screen. The harness is not told the limit by the runtime, so the
//! domain's limit comes from `tables::ROUND_LIMITS`; one note when few
//! turns remain asks the model to commit what it has.

use crate::tables::ROUND_LIMITS;
use crate::text::{domain_matches, say_in};
use crate::types::{Step, StepKind};

#[derive(Debug, Default)]
pub struct State {
    /// Agent turns seen so far (tool calls and messages alike).
    turns: u32,
    warned: bool,
}

pub fn check(state: &mut State, step: &Step, domain: &str) -> Option<String> {
    if !matches!(step.kind, StepKind::ToolResults | StepKind::AgentMessage) {
        return None;
    }
    state.turns += 1;
    let limit = ROUND_LIMITS
        .iter()
        .find(|l| domain_matches(l.domain, domain))?;
    let left = limit.rounds.saturating_sub(state.turns);
    if state.warned || left == 0 || left > limit.warn_left {
        return None;
    }
    state.warned = true;
    Some(say_in(
        domain,
        "rounds_left",
        &[("rounds", left.to_string())],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(kind: StepKind) -> Step {
        Step {
            step: 1,
            steps_left: 100,
            errors_left: 9,
            kind,
            text: None,
            outcomes: vec![],
        }
    }

    #[test]
    fn warns_once_when_few_turns_remain() {
        let mut s = State::default();
        let mut notes = Vec::new();
        for i in 0..8 {
            let kind = if i % 3 == 0 {
                StepKind::AgentMessage
            } else {
                StepKind::ToolResults
            };
            notes.push(check(&mut s, &step(kind), "os"));
        }
        // After the 6th turn, 2 remain.
        assert!(notes[..5].iter().all(Option::is_none), "{notes:?}");
        let note = notes[5].as_deref().expect("a note at 2 left");
        assert!(
            note.contains("2 turn(s)") && note.contains("answer_action"),
            "{note}"
        );
        assert!(notes[6..].iter().all(Option::is_none), "{notes:?}");
    }

    #[test]
    fn other_steps_and_domains_without_a_limit_are_silent() {
        let mut s = State::default();
        for _ in 0..20 {
            assert_eq!(check(&mut s, &step(StepKind::UserMessage), "os"), None);
        }
        let mut s = State::default();
        for _ in 0..20 {
            assert_eq!(check(&mut s, &step(StepKind::ToolResults), "retail"), None);
        }
    }
}

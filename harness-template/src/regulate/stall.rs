//! Why: an agent that goes many turns without a successful tool call, or
//! sends the same message twice, is looping; one recovery message per
//! stall asks for a concrete next step instead.

use crate::tables::REGULATION;
use crate::text::{message, say};
use crate::types::{Step, StepKind};

#[derive(Debug, Default)]
pub struct State {
    turns_without_success: u32,
    warned: bool,
    last_agent_text: Option<String>,
}

pub fn check(state: &mut State, step: &Step) -> Vec<String> {
    let mut notes = Vec::new();
    match step.kind {
        StepKind::UserMessage => return notes,
        StepKind::ToolResults if step.outcomes.iter().any(|o| !o.failed()) => {
            state.turns_without_success = 0;
            state.warned = false;
            return notes;
        }
        StepKind::AgentMessage => {
            let text = step.text.as_deref().unwrap_or("").trim().to_string();
            if !text.is_empty() && state.last_agent_text.as_deref() == Some(text.as_str()) {
                notes.push(message("repeated_message").to_string());
            }
            if !text.is_empty() {
                state.last_agent_text = Some(text);
            }
        }
        _ => {}
    }
    state.turns_without_success += 1;
    if state.turns_without_success >= REGULATION.stall_turns && !state.warned {
        state.warned = true;
        notes.push(say(
            "stall",
            &[("turns", state.turns_without_success.to_string())],
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Call, Outcome};

    fn agent(text: &str) -> Step {
        Step {
            step: 1,
            steps_left: 100,
            errors_left: 9,
            kind: StepKind::AgentMessage,
            text: Some(text.into()),
            outcomes: vec![],
        }
    }

    #[test]
    fn warns_once_per_stall_and_on_a_repeated_message() {
        let mut s = State::default();
        let mut warnings = 0;
        for i in 0..(REGULATION.stall_turns * 2) {
            warnings += check(&mut s, &agent(&format!("message {i}"))).len();
        }
        assert_eq!(warnings, 1);
        let ok = Step {
            step: 1,
            steps_left: 100,
            errors_left: 9,
            kind: StepKind::ToolResults,
            text: None,
            outcomes: vec![Outcome {
                call: Call::new("c", "t", "{}"),
                content: "{}".into(),
                error: false,
                blocked: false,
            }],
        };
        assert!(check(&mut s, &ok).is_empty());
        assert!(check(&mut s, &agent("same")).is_empty());
        assert_eq!(check(&mut s, &agent("same")).len(), 1);
    }
}

//! Why: when realize knows a call will be rejected, the environment's
//! error stays visible and the explanation of what is wrong (and what to do
//! instead) is appended to it, so the model reads both at once.

use crate::types::Step;

/// Explanations for this step's failed calls (the others are dropped: the
/// prediction was wrong, nothing to explain).
pub fn take(pending: &mut Vec<(String, String)>, step: &Step) -> Vec<String> {
    let mut out = Vec::new();
    for o in &step.outcomes {
        if let Some(k) = pending.iter().position(|(id, _)| *id == o.call.id) {
            let (_, note) = pending.remove(k);
            if o.error && !out.contains(&note) {
                out.push(note);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Call, Outcome, StepKind};

    #[test]
    fn only_failed_calls_get_their_explanation() {
        let mut pending = vec![
            ("a".to_string(), "A".to_string()),
            ("b".to_string(), "B".to_string()),
        ];
        let outcome = |id: &str, error: bool| Outcome {
            call: Call::new(id, "t", "{}"),
            content: String::new(),
            error,
            blocked: false,
        };
        let step = Step {
            step: 1,
            steps_left: 9,
            errors_left: 9,
            kind: StepKind::ToolResults,
            text: None,
            outcomes: vec![outcome("a", true), outcome("b", false)],
        };
        assert_eq!(take(&mut pending, &step), vec!["A"]);
        assert!(pending.is_empty());
    }
}

//! Why: a reservation the agent changed in this conversation (e.g. a cabin
//! upgrade the user just paid for) counts as freshly booked for the 24-hour
//! cancellation rule, as τ²'s reference solutions treat it; the record ids
//! come from the agent's own successful write calls.

use serde_json::Value;

use crate::tables::RECORD_ID_ARGS;
use crate::types::Step;
use crate::view::Tools;

pub fn observe(tools: &Tools, changed: &mut Vec<String>, step: &Step) {
    for o in &step.outcomes {
        if o.failed() || !tools.mutates(&o.call.name) {
            continue;
        }
        let Ok(Value::Object(args)) = serde_json::from_str::<Value>(&o.call.arguments) else {
            continue;
        };
        for key in RECORD_ID_ARGS {
            if let Some(id) = args.get(*key).and_then(Value::as_str)
                && !changed.iter().any(|c| c == id)
            {
                changed.push(id.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Call, Outcome, StepKind, ToolSpec};

    #[test]
    fn successful_writes_only() {
        let tools = Tools::new(vec![
            ToolSpec {
                name: "update_reservation_flights".into(),
                description: String::new(),
                parameters: "{}".into(),
                mutates: true,
            },
            ToolSpec {
                name: "get_reservation_details".into(),
                description: String::new(),
                parameters: "{}".into(),
                mutates: false,
            },
        ]);
        let step = |name: &str, error: bool| Step {
            step: 1,
            steps_left: 9,
            errors_left: 9,
            kind: StepKind::ToolResults,
            text: None,
            outcomes: vec![Outcome {
                call: Call::new("c", name, r#"{"reservation_id":"R1"}"#),
                content: "{}".into(),
                error,
                blocked: false,
            }],
        };
        let mut changed = Vec::new();
        observe(
            &tools,
            &mut changed,
            &step("get_reservation_details", false),
        );
        observe(
            &tools,
            &mut changed,
            &step("update_reservation_flights", true),
        );
        assert!(changed.is_empty());
        observe(
            &tools,
            &mut changed,
            &step("update_reservation_flights", false),
        );
        assert_eq!(changed, vec!["R1"]);
    }
}

//! Why: the policy limits a conversation to the one user the agent
//! authenticated; the id comes from the agent's own successful lookup, so
//! later gates can compare orders against it.

use crate::tables::AUTH_TOOLS;
use crate::types::Step;

pub fn observe(authenticated: &mut Vec<String>, step: &Step) {
    for o in &step.outcomes {
        if o.failed() || !AUTH_TOOLS.contains(&o.call.name.as_str()) {
            continue;
        }
        let id = o.content.trim().trim_matches('"').to_string();
        let plausible = !id.is_empty() && id.len() < 80 && !id.contains(char::is_whitespace);
        if plausible && !authenticated.contains(&id) {
            authenticated.push(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Call, Outcome, StepKind};

    #[test]
    fn records_successful_lookups_only() {
        let step = |name: &str, content: &str, error: bool| Step {
            step: 1,
            steps_left: 10,
            errors_left: 10,
            kind: StepKind::ToolResults,
            text: None,
            outcomes: vec![Outcome {
                call: Call::new("c", name, "{}"),
                content: content.into(),
                error,
                blocked: false,
            }],
        };
        let mut ids = Vec::new();
        observe(
            &mut ids,
            &step("find_user_id_by_email", "yusuf_rossi_9620", false),
        );
        observe(
            &mut ids,
            &step("find_user_id_by_name_zip", "Error: User not found", true),
        );
        observe(&mut ids, &step("get_user_details", "{}", false));
        assert_eq!(ids, vec!["yusuf_rossi_9620"]);
    }
}

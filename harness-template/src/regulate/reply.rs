//! Why: realization sees one call at a time, and the finishing-call rules
//! need to know which calls share a reply and whether the previous step
//! failed. The host realizes every call of a reply before any of them runs
//! and reports the step after; so a step report ends the reply: its calls
//! are forgotten, and the tools whose calls failed in it are kept for the
//! next reply.

use crate::types::{Call, Step, StepKind};

pub fn observe(reply: &mut Vec<Call>, failed: &mut Vec<String>, step: &Step) {
    reply.clear();
    failed.clear();
    if step.kind == StepKind::ToolResults {
        failed.extend(
            step.outcomes
                .iter()
                .filter(|o| o.error)
                .map(|o| o.call.name.clone()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Outcome;

    fn outcome(name: &str, error: bool, blocked: bool) -> Outcome {
        Outcome {
            call: Call::new("c", name, "{}"),
            content: String::new(),
            error,
            blocked,
        }
    }

    fn step(kind: StepKind, outcomes: Vec<Outcome>) -> Step {
        Step {
            step: 3,
            steps_left: 10,
            errors_left: 5,
            kind,
            text: None,
            outcomes,
        }
    }

    #[test]
    fn a_step_ends_the_reply_and_keeps_its_failed_tools() {
        let mut reply = vec![Call::new("c", "execute_sql", "{}")];
        let mut failed = vec!["old".to_string()];
        let results = step(
            StepKind::ToolResults,
            vec![
                outcome("execute_sql", true, false),
                outcome("commit_final_answer", false, true),
                outcome("get_user_details", false, false),
            ],
        );
        observe(&mut reply, &mut failed, &results);
        assert!(reply.is_empty());
        // A harness block is not an environment error.
        assert_eq!(failed, ["execute_sql"]);
        // A message step between: the next reply is no longer right after.
        observe(
            &mut reply,
            &mut failed,
            &step(StepKind::AgentMessage, vec![]),
        );
        assert!(failed.is_empty());
    }
}

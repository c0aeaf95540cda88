//! Why: after a failed call (a SQL error, a failing command) models often
//! finish in their very next reply, answering from what they had hoped the
//! call would return. The finishing call of that reply is refused once,
//! with the reason; the next reply may finish, so a model that has nothing
//! better to do is not kept from ending. Rules come from
//! `tables::FINISH_AFTER_ERRORS`; which tools failed in the previous step is
//! remembered by regulation (see [`crate::regulate::reply`]).

use crate::tables::FinishAfterError;
use crate::text::{domain_matches, fill, join_list, say_in};

/// The block text when `tool` finishes right after `failed` (the tools whose
/// calls failed in the previous step, in order), else `None`.
pub fn check(
    rules: &[FinishAfterError],
    domain: &str,
    tool: &str,
    failed: &[String],
) -> Option<String> {
    let rule = rules
        .iter()
        .find(|r| r.tool == tool && domain_matches(r.domain, domain))?;
    let mut others: Vec<String> = Vec::new();
    for name in failed.iter().filter(|n| *n != tool) {
        let name = format!("`{name}`");
        if !others.contains(&name) {
            others.push(name);
        }
    }
    if others.is_empty() {
        return None;
    }
    let values = [("tool", tool.to_string()), ("failed", join_list(&others))];
    Some(if rule.feedback.is_empty() {
        say_in(domain, "finish_after_error", &values)
    } else {
        fill(rule.feedback, &values)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    static RULES: &[FinishAfterError] = &[
        FinishAfterError {
            domain: "dbbench",
            tool: "commit_final_answer",
            feedback: "",
        },
        FinishAfterError {
            domain: "os",
            tool: "answer_action",
            feedback: "",
        },
        FinishAfterError {
            domain: "os",
            tool: "finish_action",
            feedback: "",
        },
        FinishAfterError {
            domain: "*",
            tool: "transfer_to_human_agents",
            feedback: "{failed} failed; fix it before {tool}.",
        },
    ];

    fn failed(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn dbbench_refuses_a_commit_right_after_a_failed_query() {
        let text = check(
            RULES,
            "dbbench",
            "commit_final_answer",
            &failed(&["execute_sql", "execute_sql"]),
        )
        .expect("refused");
        assert!(
            text.contains("`commit_final_answer` was not run")
                && text.contains("your last `execute_sql` call failed"),
            "{text}"
        );
        // Nothing failed in the previous step: the commit runs.
        assert_eq!(check(RULES, "dbbench", "commit_final_answer", &[]), None);
        // Reads are never refused.
        assert_eq!(
            check(RULES, "dbbench", "execute_sql", &failed(&["execute_sql"])),
            None
        );
        // The commit's own failure: its retry is the fix.
        assert_eq!(
            check(
                RULES,
                "dbbench",
                "commit_final_answer",
                &failed(&["commit_final_answer"])
            ),
            None
        );
    }

    #[test]
    fn os_refuses_both_finishing_tools_after_a_failed_command() {
        for tool in ["answer_action", "finish_action"] {
            let text = check(RULES, "os", tool, &failed(&["bash_action"])).expect(tool);
            assert!(text.contains("`bash_action`"), "{text}");
            assert_eq!(check(RULES, "os", tool, &[]), None);
        }
    }

    #[test]
    fn tau2_refuses_a_transfer_with_the_rules_own_text_in_every_domain() {
        for domain in ["airline", "retail", "telecom"] {
            assert_eq!(
                check(
                    RULES,
                    domain,
                    "transfer_to_human_agents",
                    &failed(&["get_user_details", "get_order_details"])
                ),
                Some(
                    "`get_user_details` and `get_order_details` failed; fix it before transfer_to_human_agents."
                        .to_string()
                )
            );
        }
        assert_eq!(
            check(&[], "retail", "transfer_to_human_agents", &failed(&["x"])),
            None,
            "no rule, nothing refused"
        );
    }
}

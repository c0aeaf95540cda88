//! Why: models often send the finishing call (DBBench's
//! `commit_final_answer`, τ²'s `transfer_to_human_agents`) in the same
//! reply as the query meant to find the answer, so the episode ends on a
//! guess: the query's rows, or its error, are never read. The host realizes
//! every call of a reply before any runs, so a finishing call that comes
//! after another call of its reply can be held back while the others run;
//! the model sees their results and calls it again. Writes that need no
//! reading (an `INSERT` before the commit) can be exempted. Rules come from
//! `tables::FINISH_HOLDS`.

use serde_json::Value;

use crate::tables::FinishHold;
use crate::text::{domain_matches, fill, say_in};
use crate::types::Call;

/// The block text when `tool` must wait for the results of the earlier
/// calls of its reply (`reply`, in order), else `None`.
pub fn check(rules: &[FinishHold], domain: &str, tool: &str, reply: &[Call]) -> Option<String> {
    let rule = rules
        .iter()
        .find(|r| r.tool == tool && domain_matches(r.domain, domain))?;
    let mut reads: Vec<String> = Vec::new();
    for call in reply.iter().filter(|c| !exempt(rule, c)) {
        let name = format!("`{}`", call.name);
        if !reads.contains(&name) {
            reads.push(name);
        }
    }
    if reads.is_empty() {
        return None;
    }
    let values = [
        ("tool", tool.to_string()),
        ("calls", crate::text::join_list(&reads)),
    ];
    Some(if rule.feedback.is_empty() {
        say_in(domain, "finish_hold", &values)
    } else {
        fill(rule.feedback, &values)
    })
}

/// Whether an earlier call is a write the rule lets through: its
/// `argument` starts with one of the rule's prefixes.
fn exempt(rule: &FinishHold, call: &Call) -> bool {
    if rule.argument.is_empty() {
        return false;
    }
    let Ok(Value::Object(args)) = serde_json::from_str::<Value>(&call.arguments) else {
        return false;
    };
    let Some(text) = args.get(rule.argument).and_then(Value::as_str) else {
        return false;
    };
    let text = text.trim_start();
    rule.exempt.iter().any(|prefix| {
        !prefix.is_empty()
            && text
                .get(..prefix.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    static RULES: &[FinishHold] = &[
        FinishHold {
            domain: "dbbench",
            tool: "commit_final_answer",
            argument: "query",
            exempt: &["INSERT", "UPDATE", "DELETE"],
            feedback: "",
        },
        FinishHold {
            domain: "os",
            tool: "answer_action",
            argument: "",
            exempt: &[],
            feedback: "",
        },
        FinishHold {
            domain: "airline",
            tool: "transfer_to_human_agents",
            argument: "",
            exempt: &[],
            feedback: "Not yet: read what {calls} answered before {tool}.",
        },
    ];

    fn sql(query: &str) -> Call {
        Call::new(
            "c1",
            "execute_sql",
            &serde_json::json!({ "query": query }).to_string(),
        )
    }

    #[test]
    fn dbbench_holds_a_commit_after_a_query_of_its_reply() {
        let reply = [sql(
            "SELECT `Notes` FROM `Results` WHERE `Method` = 'decision'",
        )];
        let text = check(RULES, "dbbench", "commit_final_answer", &reply).expect("held");
        assert!(
            text.contains("`commit_final_answer` was not run") && text.contains("`execute_sql`"),
            "{text}"
        );
        // Two reads of one tool are named once.
        let two = [sql("SHOW TABLES"), sql("select 1")];
        let text = check(RULES, "dbbench", "commit_final_answer", &two).expect("held");
        assert_eq!(text.matches("`execute_sql`").count(), 1, "{text}");
    }

    #[test]
    fn dbbench_lets_a_commit_through_alone_or_after_writes() {
        // Alone in its reply: the results it rests on were read before.
        assert_eq!(check(RULES, "dbbench", "commit_final_answer", &[]), None);
        // After a write of the same reply (exempt, any case, leading space).
        for write in [
            "INSERT INTO `T` (`A`) VALUES ('1')",
            "  update `T` SET `A` = '2'",
            "Delete FROM `T` WHERE `A` = '3'",
        ] {
            assert_eq!(
                check(RULES, "dbbench", "commit_final_answer", &[sql(write)]),
                None,
                "{write}"
            );
        }
        // A read among writes still holds it.
        let mixed = [
            sql("INSERT INTO `T` VALUES ('1')"),
            sql("SELECT * FROM `T`"),
        ];
        assert!(check(RULES, "dbbench", "commit_final_answer", &mixed).is_some());
        // Text shorter than a prefix is not a write.
        assert!(check(RULES, "dbbench", "commit_final_answer", &[sql("IN")]).is_some());
        // Arguments that are not a JSON object count as a read.
        let broken = Call::new("c", "execute_sql", "INSERT INTO");
        assert!(check(RULES, "dbbench", "commit_final_answer", &[broken]).is_some());
    }

    #[test]
    fn other_tools_and_domains_are_untouched() {
        let reply = [sql("SELECT 1")];
        assert_eq!(check(RULES, "dbbench", "execute_sql", &reply), None);
        assert_eq!(check(RULES, "retail", "commit_final_answer", &reply), None);
        // With no rule at all (the starting harness) nothing is held.
        assert_eq!(check(&[], "dbbench", "commit_final_answer", &reply), None);
    }

    #[test]
    fn os_holds_an_answer_after_a_command_of_its_reply() {
        let bash = Call::new("c", "bash_action", r#"{"script":"ls /root | wc -l"}"#);
        let text = check(RULES, "os", "answer_action", &[bash]).expect("held");
        assert!(text.contains("`bash_action`"), "{text}");
        assert_eq!(check(RULES, "os", "answer_action", &[]), None);
        // finish_action has no rule here.
        let bash = Call::new("c", "bash_action", r#"{"script":"touch f"}"#);
        assert_eq!(check(RULES, "os", "finish_action", &[bash]), None);
    }

    #[test]
    fn tau2_holds_a_transfer_with_the_rules_own_text() {
        let lookup = Call::new(
            "c",
            "get_reservation_details",
            r#"{"reservation_id":"ABC123"}"#,
        );
        assert_eq!(
            check(RULES, "airline", "transfer_to_human_agents", &[lookup]),
            Some(
                "Not yet: read what `get_reservation_details` answered before transfer_to_human_agents."
                    .to_string()
            )
        );
        assert_eq!(
            check(RULES, "airline", "transfer_to_human_agents", &[]),
            None
        );
    }
}

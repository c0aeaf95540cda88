//! Action realization: what happens to each proposed action.
//!
//! For a call, in order: resolve the tool name ([`tool_alias`], else
//! [`unknown_tool`] blocks with the tool list), repair the arguments
//! ([`json_arguments`], [`id_prefix`], [`numeric_strings`],
//! [`text_arguments`], [`lone_argument`], [`unknown_args`]), then run the
//! policy [`gates`]. A gate *blocks* a call the environment would accept
//! although the policy forbids it; for a call the environment will reject
//! anyway it only prepares an *explanation*, which regulation appends to
//! the error (the environment's answer stays visible). For a message
//! without calls, [`rescue_text`] turns a call written as text into a
//! structured call, [`rescue_act`] an action in AgentBench's text protocol
//! (`Act: answer(12)`) into its call, and [`rescue_code`] SQL or shell code
//! written as text into the domain's call that runs it.
//!
//! Three primitives are off until their tables get entries ([`Primitives`]):
//! [`name_repair`] writes names the task states back into the arguments
//! (with the other repairs), and before the gates [`finish_hold`] holds a
//! finishing call that follows other calls of its reply, and
//! [`finish_after_error`] refuses one right after a failed call. The calls
//! of the current reply are those realized since the last step report
//! ([`crate::regulate::reply`] clears them).

pub mod finish_after_error;
pub mod finish_hold;
pub mod gates;
pub mod id_prefix;
pub mod json_arguments;
pub mod lone_argument;
pub mod name_repair;
pub mod numeric_strings;
pub mod rescue_act;
pub mod rescue_code;
pub mod rescue_text;
pub mod text_arguments;
pub mod tool_alias;
pub mod unknown_args;
pub mod unknown_tool;

use serde_json::Value;

use crate::episode::Harness;
use crate::tables::{self, FinishAfterError, FinishHold, NameRepair};
use crate::types::{Action, Call, Decision};
use crate::view::{EnvView, Reads};

/// The tables of the primitives that are off unless an entry switches them
/// on: the harness's own by default; a test gives its own to switch them on.
#[derive(Clone, Copy)]
pub struct Primitives {
    pub finish_holds: &'static [FinishHold],
    pub finish_after_errors: &'static [FinishAfterError],
    pub name_repairs: &'static [NameRepair],
}

impl Default for Primitives {
    fn default() -> Self {
        Primitives {
            finish_holds: tables::FINISH_HOLDS,
            finish_after_errors: tables::FINISH_AFTER_ERRORS,
            name_repairs: tables::NAME_REPAIRS,
        }
    }
}

impl std::fmt::Debug for Primitives {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Primitives")
            .field("finish_holds", &self.finish_holds.len())
            .field("finish_after_errors", &self.finish_after_errors.len())
            .field("name_repairs", &self.name_repairs.len())
            .finish()
    }
}

pub fn realize(h: &mut Harness, view: &mut dyn EnvView, action: Action) -> Decision {
    // Without the contract the harness knows no tools: it cannot name a
    // real one, so it stays neutral.
    if h.tools.is_empty() {
        return Decision::Proceed;
    }
    match action {
        Action::Text(text) => match rescue_text::rescue(&h.domain, &h.tools, &text) {
            rescue_text::Rescue::Calls(calls) => Decision::Realize(calls),
            rescue_text::Rescue::UnknownTool(name) => {
                Decision::Block(unknown_tool::text_feedback(&name, &h.tools))
            }
            rescue_text::Rescue::Nothing => match rescue_act::rescue(&h.domain, &h.tools, &text)
                .or_else(|| rescue_code::rescue(&h.domain, &h.tools, &text))
            {
                Some(call) => Decision::Realize(vec![call]),
                None => Decision::Proceed,
            },
        },
        Action::Call(call) => {
            let decision = realize_call(h, view, call.clone());
            h.reply.push(match &decision {
                Decision::Execute(ran) => ran.clone(),
                _ => call,
            });
            decision
        }
    }
}

fn realize_call(h: &mut Harness, view: &mut dyn EnvView, proposed: Call) -> Decision {
    let mut call = proposed.clone();
    if !h.tools.knows(&call.name) {
        match tool_alias::resolve(&h.domain, &call.name, &h.tools) {
            Some(real) => call.name = real,
            None => return Decision::Block(unknown_tool::feedback(&call.name, &h.tools)),
        }
    }
    let (mut args, mut changed) = match json_arguments::parse(&call.arguments) {
        Ok(parsed) => parsed,
        Err(e) => return Decision::Block(json_arguments::feedback(&e)),
    };
    changed |= id_prefix::apply(&h.domain, &mut args);
    let schema = h.tools.schema(&call.name);
    changed |= numeric_strings::apply(&h.domain, schema, &mut args);
    changed |= text_arguments::apply(&h.domain, &mut args);
    changed |= lone_argument::apply(schema, &mut args);
    changed |= unknown_args::apply(schema, &mut args);
    changed |= name_repair::apply(
        h.primitives.name_repairs,
        &h.domain,
        &call.name,
        &h.opening,
        &mut args,
    );
    if changed {
        call.arguments = Value::Object(args.clone()).to_string();
    }
    let finishing = finish_hold::check(h.primitives.finish_holds, &h.domain, &call.name, &h.reply)
        .or_else(|| {
            finish_after_error::check(
                h.primitives.finish_after_errors,
                &h.domain,
                &call.name,
                &h.failed,
            )
        });
    if let Some(feedback) = finishing {
        return Decision::Block(feedback);
    }
    let verdict = {
        let mut cx = gates::Cx {
            domain: &h.domain,
            reads: Reads::new(view, &h.tools),
            now: h.now_minutes,
            authenticated: &h.authenticated,
            changed: &h.changed,
        };
        gates::check(&h.domain, &call.name, &args, &mut cx)
    };
    match verdict {
        gates::Verdict::Block(message) => return Decision::Block(message),
        gates::Verdict::Explain(message) => {
            h.pending_explanations.push((call.id.clone(), message));
        }
        gates::Verdict::Pass => {}
    }
    if call != proposed {
        Decision::Execute(call)
    } else {
        Decision::Proceed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Outcome, Step, StepKind, ToolSpec};
    use crate::view::NoView;

    static HOLDS: &[FinishHold] = &[FinishHold {
        domain: "dbbench",
        tool: "commit_final_answer",
        argument: "query",
        exempt: &["INSERT", "UPDATE", "DELETE"],
        feedback: "",
    }];
    static AFTER_ERRORS: &[FinishAfterError] = &[FinishAfterError {
        domain: "dbbench",
        tool: "commit_final_answer",
        feedback: "",
    }];
    static NAMES: &[NameRepair] = &[NameRepair {
        domain: "dbbench",
        tool: "execute_sql",
        argument: "query",
        before: "The name of this table is ",
        after: ", and the headers of this table are ",
        separator: "",
        quote: "`",
        bare: "_$",
    }];

    /// A DBBench episode after its contract and skills; `on` switches the
    /// primitives on.
    fn dbbench(on: bool) -> Harness {
        let mut h = Harness::new("agentbench/dbbench", 30, 30);
        let spec = |name: &str, arg: &str| ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: format!(
                r#"{{"type":"object","properties":{{"{arg}":{{"type":"string"}}}},"required":["{arg}"]}}"#
            ),
            mutates: true,
        };
        h.contract(
            "agentbench/dbbench",
            "",
            vec![
                spec("execute_sql", "query"),
                spec("commit_final_answer", "answers"),
            ],
        );
        h.skills(
            "agentbench/dbbench",
            "Additional table information about the question: The name of this table is Olympic Medals, and the headers of this table are Nation,Gold.\nQuestion: How many golds?\n",
        );
        if on {
            h.primitives = Primitives {
                finish_holds: HOLDS,
                finish_after_errors: AFTER_ERRORS,
                name_repairs: NAMES,
            };
        }
        h
    }

    fn sql(query: &str) -> Action {
        Action::Call(Call::new(
            "q",
            "execute_sql",
            &serde_json::json!({ "query": query }).to_string(),
        ))
    }

    fn commit() -> Action {
        Action::Call(Call::new(
            "c",
            "commit_final_answer",
            r#"{"answers":["3"]}"#,
        ))
    }

    /// The step report of a reply's results: `(tool, error, blocked)`.
    fn results(h: &mut Harness, outcomes: &[(&str, bool, bool)]) {
        let outcomes = outcomes
            .iter()
            .map(|(name, error, blocked)| Outcome {
                call: Call::new("x", name, "{}"),
                content: String::new(),
                error: *error,
                blocked: *blocked,
            })
            .collect();
        h.regulate(&Step {
            step: 1,
            steps_left: 20,
            errors_left: 20,
            kind: StepKind::ToolResults,
            text: None,
            outcomes,
        });
    }

    fn blocked(d: &Decision) -> bool {
        matches!(d, Decision::Block(_))
    }

    #[test]
    fn switched_on_the_primitives_follow_the_replies_of_an_episode() {
        let mut h = dbbench(true);
        // Reply 1: a query naming the table unquoted, then the commit.
        let query = h.realize(&mut NoView, sql("SELECT Gold FROM Olympic Medals"));
        assert_eq!(
            query,
            Decision::Execute(Call::new(
                "q",
                "execute_sql",
                r#"{"query":"SELECT Gold FROM `Olympic Medals`"}"#
            ))
        );
        let held = h.realize(&mut NoView, commit());
        assert!(
            matches!(&held, Decision::Block(t) if t.contains("same reply")),
            "{held:?}"
        );
        results(
            &mut h,
            &[
                ("execute_sql", true, false),
                ("commit_final_answer", false, true),
            ],
        );
        // Reply 2: the commit alone, right after the failed query.
        let refused = h.realize(&mut NoView, commit());
        assert!(
            matches!(&refused, Decision::Block(t) if t.contains("failed")),
            "{refused:?}"
        );
        results(&mut h, &[("commit_final_answer", false, true)]);
        // Reply 3: nothing failed in the step before: it runs.
        assert_eq!(h.realize(&mut NoView, commit()), Decision::Proceed);
    }

    #[test]
    fn switched_on_a_write_and_its_commit_share_a_reply() {
        let mut h = dbbench(true);
        let insert = "INSERT INTO `Olympic Medals` (`Nation`) VALUES ('X')";
        assert_eq!(h.realize(&mut NoView, sql(insert)), Decision::Proceed);
        assert_eq!(h.realize(&mut NoView, commit()), Decision::Proceed);
        // A read after the write holds the commit again.
        results(&mut h, &[]);
        h.realize(&mut NoView, sql(insert));
        h.realize(&mut NoView, sql("SELECT * FROM `Olympic Medals`"));
        assert!(blocked(&h.realize(&mut NoView, commit())));
    }

    #[test]
    fn the_starting_harness_leaves_the_same_episode_alone() {
        let mut h = dbbench(false);
        assert_eq!(
            h.realize(&mut NoView, sql("SELECT Gold FROM Olympic Medals")),
            Decision::Proceed
        );
        assert_eq!(h.realize(&mut NoView, commit()), Decision::Proceed);
        results(&mut h, &[("execute_sql", true, false)]);
        assert_eq!(h.realize(&mut NoView, commit()), Decision::Proceed);
    }
}

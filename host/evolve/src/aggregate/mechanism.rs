//! What a failure's *mechanism* is: how the episode finished relative to
//! the calls before it, and what kind of answer it last got.
//!
//! Failures are grouped by mechanism first (so one recurring cause is one
//! group however its error messages are worded) and by detail second (the
//! class of the last result, with the domain's own codes kept: MySQL's
//! `1064` and `1146` are different details of one mechanism). Each group
//! also gets a [`Label`] from a closed set tied to the harness layers, so
//! that diagnosis starts from where a fix would live.
//!
//! The per-domain knowledge is one table, [`DOMAINS`]: a domain's
//! finishing tools and how its error answers carry codes. A domain not in
//! it gets the generic class (message text with ids and values masked).

use serde::{Deserialize, Serialize};

use crate::aggregate::failure_record::{FailureRecord, RegulateNote, ToolStep};
pub use crate::diagnose::change_spec::Layer;

/// What this module knows of one domain.
pub struct DomainPatterns {
    /// Domain names this entry covers: an exact name, or a prefix ending
    /// in `/` (`tau2/`).
    pub domain: &'static str,
    /// Tools that end the episode when they run.
    pub finishing: &'static [&'static str],
    /// The episode is judged by what its finishing call hands in (an
    /// answer, a commit): never calling it is itself the failure. `false`
    /// where the agent's closing message normally ends it (τ²), so that
    /// `never` is the usual ending there.
    pub ends_by_finishing: bool,
    /// Where it does not end by finishing: the tools that only read
    /// (names, or prefixes ending in `_`); every other tool writes.
    pub reads: &'static [&'static str],
    /// The class of an error answer, when the domain's format says more
    /// than its message text.
    pub error_code: fn(&str) -> Option<String>,
}

/// The domains whose answers and finishing tools are known.
pub static DOMAINS: &[DomainPatterns] = &[
    DomainPatterns {
        domain: "agentbench/dbbench",
        finishing: &["commit_final_answer"],
        ends_by_finishing: true,
        reads: &[],
        error_code: mysql_code,
    },
    DomainPatterns {
        domain: "agentbench/os",
        finishing: &["answer_action", "finish_action"],
        ends_by_finishing: true,
        reads: &[],
        error_code: os_error,
    },
    DomainPatterns {
        domain: "tau2/",
        finishing: &["transfer_to_human_agents"],
        ends_by_finishing: false,
        // τ²'s READ and GENERIC tools (airline, retail, telecom, mock);
        // its WRITE tools are the rest.
        reads: &[
            "get_",
            "find_",
            "list_",
            "search_",
            "check_",
            "can_",
            "calculate",
            "think",
            "run_speed_test",
            "transfer_to_human_agents",
        ],
        error_code: |_| None,
    },
];

fn patterns(domain: &str) -> Option<&'static DomainPatterns> {
    DOMAINS.iter().find(|d| {
        if d.domain.ends_with('/') {
            domain.starts_with(d.domain)
        } else {
            domain == d.domain
        }
    })
}

/// The tools that end an episode of `domain` (none for an unknown one).
pub fn finishing_tools(domain: &str) -> &'static [&'static str] {
    patterns(domain).map_or(&[], |p| p.finishing)
}

/// Whether a call of `tool` can change `domain`'s state, where the
/// episode does not end by a finishing call (`false` elsewhere and for an
/// unknown domain: there the finishing call is what counts).
pub fn writes(domain: &str, tool: &str) -> bool {
    patterns(domain).is_some_and(|p| {
        !p.ends_by_finishing
            && !p.reads.iter().any(|r| {
                if r.ends_with('_') {
                    tool.starts_with(r)
                } else {
                    tool == *r
                }
            })
    })
}

/// The identifiers a text names: runs of letters, digits and `_` at least
/// three long that hold a digit or a `_` (tool names, ids, amounts), not
/// plain words.
fn identifiers(text: &str) -> Vec<&str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|t| t.chars().count() >= 3 && t.chars().any(|c| c.is_ascii_digit() || c == '_'))
        .collect()
}

/// Whether a regulation note spoke about this failure, and so counts as
/// advice the model ignored. What the starting harness's regulation says
/// falls in two kinds. Advice with content: about the end (`rounds_left`:
/// "Only 2 turn(s) remain … call answer_action"; `low_budget`: "Only N
/// steps remain …: finish …"), and about a call that failed (realize's
/// explanation of the error appended by `gate_explanations`,
/// `repeated_failure`, `error_streak`: they name the call's tool, ids or
/// amounts). And generic watchers, which fire on the shape of any
/// trajectory and say nothing about what is undone: the same message
/// again, no successful call for N turns, the same result again, few
/// errors left. So a note counts when it names one of the domain's
/// finishing tools, speaks of the turns or steps that remain, or was
/// attached to the result of a call that failed or was refused and names
/// an identifier of that call (its tool, an argument, its answer).
pub fn advises_on(record: &FailureRecord, note: &RegulateNote) -> bool {
    let names = identifiers(&note.text);
    let finishing = finishing_tools(&record.domain);
    if names.iter().any(|n| finishing.contains(n)) {
        return true;
    }
    let lower = note.text.to_lowercase();
    if lower.contains("remain") && (lower.contains("turn") || lower.contains("step")) {
        return true;
    }
    note.failed_calls.iter().any(|&i| {
        record.steps.get(i).is_some_and(|s| {
            let call = format!("{} {} {}", s.name, s.arguments, s.result);
            let of_call = identifiers(&call);
            names.iter().any(|n| of_call.contains(n))
        })
    })
}

/// Whether the regulation layer told the model about this failure
/// ([`advises_on`]), or forced a call itself.
pub fn regulate_advised(record: &FailureRecord) -> bool {
    record.regulate_notes.iter().any(|n| advises_on(record, n))
        || record
            .interventions
            .iter()
            .any(|i| i.starts_with("regulate:force"))
}

/// A MySQL/MariaDB server error as DBBench prints it, `1064 (42000): You
/// have…`: the four-digit code is the class.
fn mysql_code(text: &str) -> Option<String> {
    let text = text.trim_start_matches("Error executing query:").trim();
    let (code, rest) = text.split_once(' ')?;
    let is_code = code.len() == 4 && code.bytes().all(|b| b.is_ascii_digit());
    (is_code && rest.starts_with('(')).then(|| format!("mysql {code}"))
}

/// An OS-interaction error: the limit a command hit, or its timeout.
fn os_error(text: &str) -> Option<String> {
    if text.contains("did not finish within") {
        Some("command timed out".into())
    } else if let Some((_, rest)) = text.split_once("the command hit ") {
        let limit: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == ' ' || *c == '-')
            .collect();
        Some(format!("command hit {}", limit.trim()))
    } else {
        None
    }
}

/// The class of one tool answer: `blocked`, `error <code or class>`, `ok
/// empty` or `ok`. Read from the whole answer, before any clipping.
pub fn result_class(domain: &str, content: &str, error: bool, blocked: bool) -> String {
    if blocked {
        return "blocked".into();
    }
    if error {
        let code = patterns(domain).and_then(|p| (p.error_code)(content));
        return format!(
            "error {}",
            code.unwrap_or_else(|| crate::aggregate::error_class(content))
        );
    }
    let t = content.trim();
    if t.is_empty() || t == "[]" || t == "The output of the OS is empty." {
        return "ok empty".into();
    }
    // A shell that ran and reported an error in its output: the call
    // succeeded, the command did not.
    if let Some(line) = t.lines().find(|l| l.trim_start().starts_with("bash: ")) {
        return format!(
            "ok with a shell error: {}",
            crate::aggregate::error_class(line)
        );
    }
    "ok".into()
}

/// How an episode's finishing call stood to the calls before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    /// In the same reply as other calls: their results were never seen.
    SameReply,
    /// In the reply right after a call that failed or was blocked.
    AfterError,
    /// After the model had read successful results.
    AfterResults,
    /// The first call of the episode: nothing was looked up.
    WithoutCalls,
    /// Calls were made, none of them finishing.
    Never,
    /// No tool call at all.
    NoCalls,
}

impl Finish {
    /// The relation of `record`'s finishing call to the calls before it.
    pub fn of(record: &FailureRecord) -> Finish {
        let steps = &record.steps;
        if steps.is_empty() {
            return Finish::NoCalls;
        }
        let Some(at) = steps.iter().position(|s| s.finishes) else {
            return Finish::Never;
        };
        let reply = steps[at].reply;
        if at == 0 {
            return Finish::WithoutCalls;
        }
        if steps[..at].iter().any(|s| s.reply == reply) {
            return Finish::SameReply;
        }
        let before = &steps[at - 1];
        if before.error || before.blocked {
            Finish::AfterError
        } else {
            Finish::AfterResults
        }
    }

    /// Its name in keys and `--json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::SameReply => {
                "finishing call in the same reply as other calls, before their results were seen"
            }
            Finish::AfterError => "finishing call right after an error",
            Finish::AfterResults => "finishing call after reading results",
            Finish::WithoutCalls => "finishing call with no call before it",
            Finish::Never => "no finishing call",
            Finish::NoCalls => "no tool call at all",
        }
    }
}

/// What is wrong with the layer's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// No rule covers the situation.
    Missing,
    /// A rule fired and made things worse (blocked or stopped wrongly).
    Wrong,
    /// A rule fired (a note, a warning) and the model went on regardless.
    Ignored,
    /// Not the harness: the environment could not run the task (its
    /// machine could not be set up, a call to it failed).
    Environment,
}

impl Fault {
    /// The fault's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Fault::Missing => "missing",
            Fault::Wrong => "wrong",
            Fault::Ignored => "ignored",
            Fault::Environment => "environment",
        }
    }

    /// The faults of a harness rule.
    pub const RULES: [Fault; 3] = [Fault::Missing, Fault::Wrong, Fault::Ignored];
}

/// A group's label: a rule missing, wrong or ignored in one layer, or the
/// environment (`layer` is then `None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Label {
    /// Where a fix would live (`None`: in no harness layer).
    pub layer: Option<Layer>,
    /// What is wrong there.
    pub fault: Fault,
}

/// Error answers that say the environment itself failed, not the call.
const ENVIRONMENT_FAILED: &[&str] = &["could not be set up", "the environment call failed"];

impl Label {
    /// The environment's label.
    pub const ENVIRONMENT: Label = Label {
        layer: None,
        fault: Fault::Environment,
    };

    /// A rule's label.
    pub fn rule(layer: Layer, fault: Fault) -> Label {
        Label {
            layer: Some(layer),
            fault,
        }
    }

    /// `realize: rule missing`, or `environment: not the harness`.
    pub fn text(self) -> String {
        match self.layer {
            Some(layer) => format!("{}: rule {}", layer.as_str(), self.fault.as_str()),
            None => "environment: not the harness".into(),
        }
    }

    /// Every label of the closed set (what an LLM labeler may answer).
    pub fn all() -> Vec<Label> {
        let mut all: Vec<Label> = Layer::ALL
            .iter()
            .flat_map(|&layer| {
                Fault::RULES
                    .iter()
                    .map(move |&fault| Label::rule(layer, fault))
            })
            .collect();
        all.push(Label::ENVIRONMENT);
        all
    }

    /// Read a label's [`Label::text`] (or `realize:missing`) back.
    pub fn parse(text: &str) -> Option<Label> {
        let (layer, fault) = text.split_once(':')?;
        if layer.trim() == "environment" {
            return Some(Label::ENVIRONMENT);
        }
        let fault = fault.trim().trim_start_matches("rule").trim();
        Label::all().into_iter().find(|l| {
            l.layer.is_some_and(|x| x.as_str() == layer.trim()) && l.fault.as_str() == fault
        })
    }

    /// The deterministic label of a failure: the layer whose rule would
    /// have stood between the model and this mechanism, and whether that
    /// layer acted in the episode and was ignored, acted wrongly (stopped
    /// it), or had no rule (missing).
    pub fn of(record: &FailureRecord, end: &str, finish: Finish) -> Label {
        let failed_env =
            |s: &ToolStep| s.error && ENVIRONMENT_FAILED.iter().any(|m| s.result.contains(m));
        if record.steps.iter().any(failed_env) {
            return Label::ENVIRONMENT;
        }
        // An answer read from output that itself reports a shell error
        // (a command mangled on its way in): a repair before the call runs.
        let acted_on_broken_output = matches!(finish, Finish::AfterResults)
            && last_result(record).starts_with("ok with a shell error");
        let advised = regulate_advised(record);
        // Where the closing message ends the episode (τ²), a turn that
        // ended right after a successful write acted last, and wrongly.
        let ended_on_write = record
            .steps
            .last()
            .is_some_and(|s| !s.error && !s.blocked && writes(&record.domain, &s.name));
        let layer = match (end, finish) {
            ("harness_stop", _) => Layer::Regulate,
            (_, Finish::SameReply | Finish::AfterError | Finish::WithoutCalls) => Layer::Realize,
            ("too_many_errors", _) => Layer::Realize,
            (_, Finish::NoCalls) if !record.text_call_replies.is_empty() => Layer::Realize,
            // Only messages until the turn ended or the limit came: the
            // work undone, as with `never` below.
            ("agent_stop" | "user_stop" | "max_steps", Finish::NoCalls) => Layer::Regulate,
            // Ended otherwise before any call (the request too large, the
            // model failing on it): what the model was given.
            (_, Finish::NoCalls) => Layer::Contract,
            // The last call was refused and the model never recovered.
            (_, Finish::Never) if record.steps.last().is_some_and(|s| s.blocked) => Layer::Realize,
            // The last act a successful write, and regulate had not told
            // the model about anything undone: a wrong act after reading
            // results, the procedure (as after `AfterResults` below).
            (_, Finish::Never) if ended_on_write && !advised => Layer::Skills,
            // Stalled to the turn limit, or ended its turn with the work
            // undone: watching the trajectory is what would catch it.
            (_, Finish::Never) => Layer::Regulate,
            _ if acted_on_broken_output => Layer::Realize,
            // Finished after reading results, and wrong: the procedure.
            _ => Layer::Skills,
        };
        // What counts as the layer having acted and been ignored: a block
        // for realize; for regulate a note about this failure or a forced
        // call ([`regulate_advised`]: a generic repeat or stall warning is
        // not advice about what was left undone). Contract and skills act
        // in nearly every episode, so that they did says nothing about
        // this failure: their fault is a missing rule.
        let fired = match layer {
            Layer::Realize => record
                .interventions
                .iter()
                .any(|i| i.starts_with("realize:block")),
            Layer::Regulate => advised,
            Layer::Contract | Layer::Skills => false,
        };
        let fault = if end == "harness_stop" {
            Fault::Wrong
        } else if fired && !(layer == Layer::Realize && finish == Finish::Never) {
            Fault::Ignored
        } else {
            Fault::Missing
        };
        Label::rule(layer, fault)
    }
}

/// The class of the last result before the episode ended: what the model
/// acted on last (for a finishing call, the last answer before it).
pub fn last_result(record: &FailureRecord) -> String {
    let before_finish = match record.steps.iter().position(|s| s.finishes) {
        Some(at) => &record.steps[..at],
        None => &record.steps[..],
    };
    match before_finish.last() {
        Some(s) => class_of(s),
        None => "none".into(),
    }
}

/// A step's class; records written before classes were kept get one from
/// their clipped text.
pub fn class_of(s: &ToolStep) -> String {
    if s.class.is_empty() {
        result_class("", &s.result, s.error, s.blocked)
    } else {
        s.class.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::failure_record::RegulateNote;
    use ecdysis_runner::agent::CallSource;

    fn step(name: &str, reply: u32, class: &str, finishes: bool) -> ToolStep {
        ToolStep {
            name: name.into(),
            arguments: "{}".into(),
            result: String::new(),
            error: class.starts_with("error"),
            blocked: class == "blocked",
            source: CallSource::Model,
            reply,
            finishes,
            class: class.into(),
        }
    }

    fn record(steps: Vec<ToolStep>) -> FailureRecord {
        FailureRecord {
            task_id: "t".into(),
            domain: "agentbench/dbbench".into(),
            trial: 0,
            reward: 0.0,
            success: false,
            db_ok: Some(false),
            communicate_ok: None,
            env_ok: None,
            answer_ok: None,
            end: ecdysis_runner::agent::EndReason::AgentStop,
            steps,
            device_steps: vec![],
            agent_texts: vec![],
            interventions: vec![],
            replies: 3,
            text_replies: vec![],
            text_call_replies: vec![],
            regulate_notes: vec![],
        }
    }

    fn note(text: &str, failed_calls: Vec<usize>) -> RegulateNote {
        RegulateNote {
            text: text.into(),
            reply: 1,
            failed_calls,
        }
    }

    /// The starting harness's generic watchers (its `repeated_message` and
    /// `stall` notes).
    const SAME_MESSAGE: &str = "You sent the same message as before. Do not repeat it: make progress with the information you have, or ask a different, specific question.";
    const STALL: &str = "No tool call has succeeded in the last 10 turns. Decide the next concrete step: ask the user for exactly the missing information, make the next tool call with structured tool calls, or tell the user what cannot be done.";
    /// Its `rounds_left:os` note.
    const ROUNDS_LEFT_OS: &str = "Only 2 turn(s) remain in this task. If the output above holds the answer, call answer_action with only the value now; if the operation is done, call finish_action.";

    #[test]
    fn mysql_errors_keep_their_codes() {
        let c = |t: &str| result_class("agentbench/dbbench", t, true, false);
        assert_eq!(
            c("1064 (42000): You have an error in your SQL syntax; check the manual"),
            "error mysql 1064"
        );
        assert_eq!(
            c("1146 (42S02): Table 'db.Manager_Changes' doesn't exist"),
            "error mysql 1146"
        );
        assert_ne!(c("1054 (42S22): Unknown column"), c("1064 (42000): x"));
        // Not a server error: the generic class, and an apostrophe inside a
        // word is not read as a quote.
        assert_eq!(
            c("Error executing query: the connection doesn't answer"),
            "error error executing query: the connection doesn't answer"
        );
        assert_eq!(
            result_class("agentbench/dbbench", "[]", false, false),
            "ok empty"
        );
        assert_eq!(
            result_class("agentbench/dbbench", "[('3',)]", false, false),
            "ok"
        );
        assert_eq!(result_class("tau2/retail", "x", true, true), "blocked");
    }

    #[test]
    fn os_errors_name_the_limit_or_the_timeout() {
        let c = |t: &str| result_class("agentbench/os", t, true, false);
        assert_eq!(
            c(
                "Error: the command did not finish within 10 s and was interrupted. The output of the OS is empty."
            ),
            "error command timed out"
        );
        assert_eq!(
            c("Error: the command hit the disk quota; every process of the machine was stopped"),
            "error command hit the disk quota"
        );
        assert_eq!(
            result_class(
                "agentbench/os",
                "The output of the OS is empty.",
                false,
                false
            ),
            "ok empty"
        );
    }

    #[test]
    fn finishing_tools_by_domain() {
        assert_eq!(
            finishing_tools("agentbench/dbbench"),
            ["commit_final_answer"]
        );
        assert_eq!(
            finishing_tools("tau2/telecom"),
            ["transfer_to_human_agents"]
        );
        assert!(finishing_tools("tau2").is_empty());
        assert!(finishing_tools("mock").is_empty());
        // Writes are told apart only where no finishing call ends the
        // episode (τ²: its WRITE tools against its READ and GENERIC ones).
        for w in ["send_certificate", "cancel_pending_order", "toggle_roaming"] {
            assert!(writes("tau2/airline", w), "{w}");
        }
        for r in [
            "get_order_details",
            "search_direct_flight",
            "check_sim_status",
            "run_speed_test",
            "calculate",
            "transfer_to_human_agents",
        ] {
            assert!(!writes("tau2/retail", r), "{r}");
        }
        assert!(!writes("agentbench/dbbench", "execute_sql"));
        assert!(!writes("mock", "create_task"));
    }

    #[test]
    fn the_finish_relation_reads_replies() {
        let same = record(vec![
            step("execute_sql", 1, "error mysql 1064", false),
            step("execute_sql", 2, "error mysql 1146", false),
            step("commit_final_answer", 2, "ok", true),
        ]);
        assert_eq!(Finish::of(&same), Finish::SameReply);
        assert_eq!(last_result(&same), "error mysql 1146");
        let after_error = record(vec![
            step("execute_sql", 1, "error mysql 1064", false),
            step("commit_final_answer", 2, "ok", true),
        ]);
        assert_eq!(Finish::of(&after_error), Finish::AfterError);
        let after_results = record(vec![
            step("execute_sql", 1, "ok", false),
            step("commit_final_answer", 2, "ok", true),
        ]);
        assert_eq!(Finish::of(&after_results), Finish::AfterResults);
        let alone = record(vec![step("commit_final_answer", 1, "ok", true)]);
        assert_eq!(Finish::of(&alone), Finish::WithoutCalls);
        assert_eq!(last_result(&alone), "none");
        let never = record(vec![step("execute_sql", 1, "ok", false)]);
        assert_eq!(Finish::of(&never), Finish::Never);
        assert_eq!(Finish::of(&record(vec![])), Finish::NoCalls);
    }

    #[test]
    fn labels_follow_the_mechanism_and_what_fired() {
        let mut same = record(vec![
            step("execute_sql", 1, "ok", false),
            step("commit_final_answer", 1, "ok", true),
        ]);
        let l = Label::of(&same, "agent_stop", Finish::SameReply);
        assert_eq!(l.text(), "realize: rule missing");
        same.interventions = vec!["realize:block".into()];
        assert_eq!(
            Label::of(&same, "agent_stop", Finish::SameReply).fault,
            Fault::Ignored
        );
        let stall = record(vec![step("execute_sql", 1, "ok", false)]);
        assert_eq!(
            Label::of(&stall, "max_steps", Finish::Never),
            Label::rule(Layer::Regulate, Fault::Missing)
        );
        assert_eq!(
            Label::of(&stall, "harness_stop", Finish::Never).text(),
            "regulate: rule wrong"
        );
        // Ended its turn with the work undone; regulate's advice ignored.
        let mut early = record(vec![step("get_order", 1, "ok", false)]);
        assert_eq!(
            Label::of(&early, "user_stop", Finish::Never),
            Label::rule(Layer::Regulate, Fault::Missing)
        );
        early.interventions = vec!["skills:guidance".into(), "regulate:inject".into()];
        early.regulate_notes = vec![note(
            "Only 3 steps remain in this conversation: finish the user's request now.",
            vec![],
        )];
        assert_eq!(
            Label::of(&early, "user_stop", Finish::Never).fault,
            Fault::Ignored
        );
        // The last call refused, never recovered: a realize rule.
        let blocked = record(vec![step("provide_answer", 1, "blocked", false)]);
        assert_eq!(
            Label::of(&blocked, "max_steps", Finish::Never).layer,
            Some(Layer::Realize)
        );
        // A wrong answer after reading results: the procedure, whatever
        // skills showed.
        let mut read = record(vec![
            step("execute_sql", 1, "ok", false),
            step("commit_final_answer", 2, "ok", true),
        ]);
        read.interventions = vec!["skills:other".into()];
        assert_eq!(
            Label::of(&read, "agent_stop", Finish::AfterResults),
            Label::rule(Layer::Skills, Fault::Missing)
        );
        // An answer copied from output that reports a shell error.
        let broken = record(vec![
            step(
                "bash_action",
                1,
                "ok with a shell error: bash: !/bin/bash: event not found",
                false,
            ),
            step("answer_action", 2, "ok", true),
        ]);
        assert_eq!(
            Label::of(&broken, "agent_stop", Finish::AfterResults).layer,
            Some(Layer::Realize)
        );
        // The environment failed: no harness layer.
        let mut setup = step("bash_action", 1, "error x", false);
        setup.result = "Error: the task's machine could not be set up: init exited 1".into();
        let env = record(vec![setup, step("answer_action", 2, "ok", true)]);
        assert_eq!(
            Label::of(&env, "agent_stop", Finish::AfterError),
            Label::ENVIRONMENT
        );
        for l in Label::all() {
            assert_eq!(Label::parse(&l.text()), Some(l));
        }
        assert_eq!(Label::all().len(), 13);
        assert_eq!(
            Label::parse("realize:missing").and_then(|l| l.layer),
            Some(Layer::Realize)
        );
        assert_eq!(Label::parse("kernel: rule missing"), None);
    }

    /// Defect 1 of the out-of-sample check: no call at all, and none
    /// written as text, is a turn ended (or a run to the limit) with the
    /// work undone, as `never` is: regulate's, ignored only when its note
    /// spoke about the end.
    #[test]
    fn no_calls_is_an_undone_turn_not_the_contract() {
        let mut early = record(vec![]);
        early.domain = "tau2/airline".into();
        assert_eq!(
            Label::of(&early, "user_stop", Finish::NoCalls),
            Label::rule(Layer::Regulate, Fault::Missing)
        );
        let mut limit = record(vec![]);
        limit.domain = "agentbench/os".into();
        limit.interventions = vec!["regulate:inject".into(); 5];
        limit.regulate_notes = vec![note(SAME_MESSAGE, vec![]), note(ROUNDS_LEFT_OS, vec![])];
        assert_eq!(
            Label::of(&limit, "max_steps", Finish::NoCalls),
            Label::rule(Layer::Regulate, Fault::Ignored)
        );
        // Controls: calls written as text are realize's; an episode that
        // ended otherwise before any call (its request too large) is the
        // contract's.
        let mut texts = record(vec![]);
        texts.text_call_replies = vec![1];
        assert_eq!(
            Label::of(&texts, "max_steps", Finish::NoCalls).layer,
            Some(Layer::Realize)
        );
        assert_eq!(
            Label::of(&record(vec![]), "request_too_large", Finish::NoCalls),
            Label::rule(Layer::Contract, Fault::Missing)
        );
    }

    /// Defect 2: in τ² the agent's closing message ends the episode, so
    /// `never` is the normal ending. A turn that ended right after a
    /// successful write acted, and wrongly: the procedure (skills), as a
    /// wrong answer after reading results is, not regulate.
    #[test]
    fn a_tau2_turn_ended_on_a_successful_write_is_the_procedure() {
        let mut wrote = record(vec![
            step("get_reservation_details", 1, "ok", false),
            step("send_certificate", 2, "ok", false),
        ]);
        wrote.domain = "tau2/airline".into();
        assert_eq!(
            Label::of(&wrote, "user_stop", Finish::Never),
            Label::rule(Layer::Skills, Fault::Missing)
        );
        // Controls. Ended after a lookup, the write still to do: regulate.
        let mut looked = record(vec![
            step("send_certificate", 1, "ok", false),
            step("get_reservation_details", 2, "ok", false),
        ]);
        looked.domain = "tau2/airline".into();
        assert_eq!(
            Label::of(&looked, "user_stop", Finish::Never),
            Label::rule(Layer::Regulate, Fault::Missing)
        );
        // Ended after a failed write: regulate.
        let mut failed = record(vec![step("book_reservation", 1, "error x", false)]);
        failed.domain = "tau2/airline".into();
        assert_eq!(
            Label::of(&failed, "user_stop", Finish::Never).layer,
            Some(Layer::Regulate)
        );
        // Regulate explained an earlier failed write, the model went on to
        // another write and stopped without redoing it: its advice ignored.
        let mut bad = step("return_delivered_order_items", 1, "error x", false);
        bad.arguments = r##"{"order_id":"#W4597054","item_ids":["3275928196"]}"##.into();
        let mut advised = record(vec![
            bad,
            step("return_delivered_order_items", 2, "ok", false),
        ]);
        advised.domain = "tau2/retail".into();
        advised.interventions = vec!["regulate:annotate".into()];
        advised.regulate_notes = vec![note(
            "Item id(s) 3275928196 are not among the items of order #W4597054.",
            vec![0],
        )];
        assert_eq!(
            Label::of(&advised, "user_stop", Finish::Never),
            Label::rule(Layer::Regulate, Fault::Ignored)
        );
        // Where a finishing call is how the episode ends (DBBench), never
        // calling it stays regulate's whatever the last call was.
        let dbbench = record(vec![step("execute_sql", 1, "ok", false)]);
        assert_eq!(
            Label::of(&dbbench, "max_steps", Finish::Never).layer,
            Some(Layer::Regulate)
        );
    }

    /// Defect 3: regulate counts as having advised about a failure only
    /// when a note spoke about it: the end (a finishing tool named, the
    /// turns or steps that remain) or the failed call it was attached to
    /// (an identifier of that call named). Generic repeat and stall
    /// warnings leave the rule missing.
    #[test]
    fn only_advice_about_the_failure_counts_as_regulate_ignored() {
        let mut stalled = record(vec![
            step("execute_sql", 1, "error mysql 1064", false),
            step("execute_sql", 2, "ok", false),
        ]);
        stalled.interventions = vec!["regulate:inject".into(); 6];
        stalled.regulate_notes = vec![note(SAME_MESSAGE, vec![]), note(STALL, vec![])];
        assert_eq!(
            Label::of(&stalled, "max_steps", Finish::Never),
            Label::rule(Layer::Regulate, Fault::Missing)
        );
        // A stall note that happened to annotate a failed call names
        // nothing of it.
        stalled.regulate_notes = vec![note(STALL, vec![0])];
        assert_eq!(
            Label::of(&stalled, "max_steps", Finish::Never).fault,
            Fault::Missing
        );
        // Controls: a note naming the finishing tool, one about the turns
        // left, one explaining the failed call it annotated.
        stalled.regulate_notes = vec![note(
            "Commit the rows you have read with commit_final_answer.",
            vec![],
        )];
        assert_eq!(
            Label::of(&stalled, "max_steps", Finish::Never).fault,
            Fault::Ignored
        );
        let mut os = record(vec![step("bash_action", 1, "ok", false)]);
        os.domain = "agentbench/os".into();
        os.interventions = vec!["regulate:inject".into()];
        os.regulate_notes = vec![note(SAME_MESSAGE, vec![]), note(ROUNDS_LEFT_OS, vec![])];
        assert_eq!(
            Label::of(&os, "max_steps", Finish::Never),
            Label::rule(Layer::Regulate, Fault::Ignored)
        );
        let mut budget = record(vec![step("get_order_details", 1, "ok", false)]);
        budget.domain = "tau2/retail".into();
        budget.regulate_notes = vec![note(
            "Only 12 steps remain in this conversation: finish the user's request now (complete the pending action or tell the user what remains).",
            vec![],
        )];
        assert_eq!(
            Label::of(&budget, "max_steps", Finish::Never).fault,
            Fault::Ignored
        );
        let mut pay = step("book_reservation", 1, "error x", false);
        pay.result =
            "Error: Payment amount does not add up, total price is 106, but paid 105".into();
        let mut explained = record(vec![pay]);
        explained.domain = "tau2/airline".into();
        explained.interventions = vec!["regulate:annotate".into()];
        explained.regulate_notes = vec![note(
            "The payments add up to $105, but the booking costs $106. The payment amounts must add up exactly to the total.",
            vec![0],
        )];
        assert_eq!(
            Label::of(&explained, "user_stop", Finish::Never),
            Label::rule(Layer::Regulate, Fault::Ignored)
        );
        // The same note not attached to the failed call's result (shown
        // before a later turn) is not counted as explaining it.
        explained.regulate_notes[0].failed_calls.clear();
        assert_eq!(
            Label::of(&explained, "user_stop", Finish::Never).fault,
            Fault::Missing
        );
    }
}

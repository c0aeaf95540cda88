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

use crate::records::{FailureRecord, ToolStep};
pub use crate::spec::Layer;

/// What this module knows of one domain.
pub struct DomainPatterns {
    /// Domain names this entry covers: an exact name, or a prefix ending
    /// in `/` (`tau2/`).
    pub domain: &'static str,
    /// Tools that end the episode when they run.
    pub finishing: &'static [&'static str],
    /// The class of an error answer, when the domain's format says more
    /// than its message text.
    pub error_code: fn(&str) -> Option<String>,
}

/// The domains whose answers and finishing tools are known.
pub static DOMAINS: &[DomainPatterns] = &[
    DomainPatterns {
        domain: "agentbench/dbbench",
        finishing: &["commit_final_answer"],
        error_code: mysql_code,
    },
    DomainPatterns {
        domain: "agentbench/os",
        finishing: &["answer_action", "finish_action"],
        error_code: os_error,
    },
    DomainPatterns {
        domain: "tau2/",
        finishing: &["transfer_to_human_agents"],
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
        let layer = match (end, finish) {
            ("harness_stop", _) => Layer::Regulate,
            (_, Finish::SameReply | Finish::AfterError | Finish::WithoutCalls) => Layer::Realize,
            ("too_many_errors", _) => Layer::Realize,
            (_, Finish::NoCalls) if !record.text_call_replies.is_empty() => Layer::Realize,
            (_, Finish::NoCalls) => Layer::Contract,
            // The last call was refused and the model never recovered.
            (_, Finish::Never) if record.steps.last().is_some_and(|s| s.blocked) => Layer::Realize,
            // Stalled to the turn limit, or ended its turn with the work
            // undone: watching the trajectory is what would catch it.
            (_, Finish::Never) => Layer::Regulate,
            _ if acted_on_broken_output => Layer::Realize,
            // Finished after reading results, and wrong: the procedure.
            _ => Layer::Skills,
        };
        // What counts as the layer having acted and been ignored: a block
        // for realize, a note or a forced call for regulate. Contract and
        // skills act in nearly every episode, so that they did says
        // nothing about this failure: their fault is a missing rule.
        let acted: &[&str] = match layer {
            Layer::Realize => &["block"],
            Layer::Regulate => &["annotate", "inject", "force"],
            Layer::Contract | Layer::Skills => &[],
        };
        let fired = record.interventions.iter().any(|i| {
            i.split_once(':').is_some_and(|(hook, decision)| {
                hook == layer.as_str() && acted.iter().any(|d| decision.starts_with(d))
            })
        });
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
        }
    }

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
        early.interventions = vec!["skills:guidance".into(), "regulate:annotate".into()];
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
        assert_eq!(
            Label::of(&record(vec![]), "max_steps", Finish::NoCalls).layer,
            Some(Layer::Contract)
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
}

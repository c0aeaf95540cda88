//! An optional recorder of hook calls: what went in, which env-view calls the
//! hook made with the answers it got, and what came out, each value in the
//! canonical JSON form of its WIT type. `ecdysis-host vectors` writes these
//! records as the conformance vectors other runtimes replay byte for byte.
//!
//! # Canonical JSON of a WIT value
//! - record: an object whose keys are the WIT field names (kebab-case), in
//!   the order the WIT file declares them;
//! - variant: `{"tag":"<case>","val":<payload>}`, or `{"tag":"<case>"}` for
//!   a case without payload; `result` is the variant of `ok` and `err`;
//! - enum: the case name as a string; `option`: `null` or the value;
//! - list: an array; string, bool, u32: JSON's own;
//! - text: compact (no spaces), UTF-8 unescaped except what JSON requires
//!   (`"`, `\` and U+0000..U+001F, with `\b \f \n \r \t` short forms and
//!   `\u00xx` in lowercase hex otherwise).
//!
//! Rust's `serde_json`, Python's `json.dumps(v, ensure_ascii=False,
//! separators=(",", ":"))` and JavaScript's `JSON.stringify` all produce
//! exactly this for the same value, which makes "byte-identical" well
//! defined.

use serde_json::{Map, Value};

use super::error::SandboxError;
use super::{
    ActionDecision, AgentAction, ContractInput, ContractOutput, EpisodeInfo, Guidance, Regulation,
    StepKind, StepReport, TaskView, ToolCall, ToolOutcome, ToolSpec, ViewError,
};

/// One env-view call a hook made, with the answer the guest received.
/// Calls the host refused with a contract violation (a mutating tool, over
/// the quota) end the hook and are not listed: the hook's error says so.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedViewCall {
    /// The tool the hook asked to read.
    pub name: String,
    /// The arguments text exactly as the guest passed it, unless it is over
    /// [`super::MAX_TOOL_ARGUMENT_BYTES`] (refused unread): then
    /// [`logged_arguments`]' marker, so a hook's 64 such calls do not keep
    /// up to 64 × the guest's memory in every runtime's log.
    pub arguments: String,
    /// `result<string, view-error>` in canonical JSON.
    pub answer: Value,
}

/// The arguments text a view call is recorded with: as passed, or for a
/// text over the env view's cap, `<N bytes, over the cap of CAP>` (the
/// Python and JS runtimes record the same).
pub fn logged_arguments(arguments: &str) -> String {
    let cap = super::MAX_TOOL_ARGUMENT_BYTES;
    if arguments.len() > cap {
        format!("<{} bytes, over the cap of {cap}>", arguments.len())
    } else {
        arguments.to_string()
    }
}

/// One hook call.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedHook {
    /// `constructor`, `contract`, `skills`, `realize` or `regulate`.
    pub hook: &'static str,
    /// The hook's argument in canonical JSON.
    pub input: Value,
    /// The env-view calls the hook made, in order.
    pub view_calls: Vec<RecordedViewCall>,
    /// `{"tag":"ok","val":<answer>}` (the constructor's answer is `null`),
    /// or `{"tag":"err","val":{"kind":…}}` with the typed error's kind (and
    /// for a contract violation, the violation's kind).
    pub output: Value,
}

/// Receives every hook call of the episodes of a harness it is attached to
/// (see `LoadedHarness::with_recorder`).
pub trait HookRecorder: Send + Sync {
    /// Take one finished hook call, right after it returns, on the thread
    /// that ran it (the episode waits for this).
    fn record(&self, call: RecordedHook);
}

fn obj<const N: usize>(fields: [(&str, Value); N]) -> Value {
    let mut m = Map::new();
    for (k, v) in fields {
        m.insert(k.to_string(), v);
    }
    Value::Object(m)
}

fn tagged(tag: &str, val: Option<Value>) -> Value {
    match val {
        Some(v) => obj([("tag", Value::from(tag)), ("val", v)]),
        None => obj([("tag", Value::from(tag))]),
    }
}

fn s(x: &str) -> Value {
    Value::from(x)
}

/// Canonical JSON of a WIT `tool-spec`.
pub fn tool_spec(t: &ToolSpec) -> Value {
    obj([
        ("name", s(&t.name)),
        ("description", s(&t.description)),
        ("parameters", s(&t.parameters)),
        ("mutates", Value::from(t.mutates)),
    ])
}

/// Canonical JSON of a WIT `tool-call`.
pub fn tool_call(c: &ToolCall) -> Value {
    obj([
        ("id", s(&c.id)),
        ("name", s(&c.name)),
        ("arguments", s(&c.arguments)),
    ])
}

/// Canonical JSON of a WIT `episode-info`.
pub fn episode_info(i: &EpisodeInfo) -> Value {
    obj([
        ("domain", s(&i.domain)),
        ("max-steps", Value::from(i.max_steps)),
        ("max-errors", Value::from(i.max_errors)),
    ])
}

/// Canonical JSON of a WIT `contract-input`.
pub fn contract_input(i: &ContractInput) -> Value {
    obj([
        ("domain", s(&i.domain)),
        ("system-prompt", s(&i.system_prompt)),
        (
            "tools",
            Value::Array(i.tools.iter().map(tool_spec).collect()),
        ),
    ])
}

/// Canonical JSON of a WIT `contract-output`.
pub fn contract_output(o: &ContractOutput) -> Value {
    let descriptions = o
        .tool_descriptions
        .iter()
        .map(|d| obj([("name", s(&d.name)), ("description", s(&d.description))]))
        .collect();
    obj([
        ("system-prompt", s(&o.system_prompt)),
        ("tool-descriptions", Value::Array(descriptions)),
    ])
}

/// Canonical JSON of a WIT `task-view`.
pub fn task_view(v: &TaskView) -> Value {
    obj([
        ("domain", s(&v.domain)),
        ("first-user-message", s(&v.first_user_message)),
    ])
}

/// Canonical JSON of a WIT `list<guidance>`.
pub fn guidance(gs: &[Guidance]) -> Value {
    Value::Array(
        gs.iter()
            .map(|g| obj([("title", s(&g.title)), ("text", s(&g.text))]))
            .collect(),
    )
}

/// Canonical JSON of a WIT `agent-action`.
pub fn agent_action(a: &AgentAction) -> Value {
    match a {
        AgentAction::Call(c) => tagged("call", Some(tool_call(c))),
        AgentAction::Text(t) => tagged("text", Some(s(t))),
    }
}

/// Canonical JSON of a WIT `action-decision`.
pub fn action_decision(d: &ActionDecision) -> Value {
    match d {
        ActionDecision::Proceed => tagged("proceed", None),
        ActionDecision::Execute(c) => tagged("execute", Some(tool_call(c))),
        ActionDecision::Block(t) => tagged("block", Some(s(t))),
        ActionDecision::Realize(cs) => tagged(
            "realize",
            Some(Value::Array(cs.iter().map(tool_call).collect())),
        ),
    }
}

fn step_kind(k: StepKind) -> Value {
    s(match k {
        StepKind::AgentMessage => "agent-message",
        StepKind::ToolResults => "tool-results",
        StepKind::UserMessage => "user-message",
    })
}

fn tool_outcome(o: &ToolOutcome) -> Value {
    obj([
        ("call", tool_call(&o.call)),
        ("content", s(&o.content)),
        ("error", Value::from(o.error)),
        ("blocked", Value::from(o.blocked)),
    ])
}

/// Canonical JSON of a WIT `step-report`.
pub fn step_report(r: &StepReport) -> Value {
    obj([
        ("step", Value::from(r.step)),
        ("steps-left", Value::from(r.steps_left)),
        ("errors-left", Value::from(r.errors_left)),
        ("kind", step_kind(r.kind)),
        ("text", r.text.as_deref().map(s).unwrap_or(Value::Null)),
        (
            "outcomes",
            Value::Array(r.outcomes.iter().map(tool_outcome).collect()),
        ),
    ])
}

/// Canonical JSON of a WIT `regulation`.
pub fn regulation(r: &Regulation) -> Value {
    match r {
        Regulation::Continue => tagged("continue", None),
        Regulation::Annotate(t) => tagged("annotate", Some(s(t))),
        Regulation::Inject(t) => tagged("inject", Some(s(t))),
        Regulation::ForceCall(c) => tagged("force-call", Some(tool_call(c))),
        Regulation::Stop(t) => tagged("stop", Some(s(t))),
    }
}

/// `result<string, view-error>`.
pub fn view_answer(r: &Result<String, ViewError>) -> Value {
    match r {
        Ok(text) => tagged("ok", Some(s(text))),
        Err(e) => {
            let (case, text) = match e {
                ViewError::UnknownTool(t) => ("unknown-tool", t),
                ViewError::MutatingTool(t) => ("mutating-tool", t),
                ViewError::InvalidArguments(t) => ("invalid-arguments", t),
                ViewError::ToolError(t) => ("tool-error", t),
            };
            tagged("err", Some(tagged(case, Some(s(text)))))
        }
    }
}

/// A hook's outcome: its answer, or its typed error's kind.
pub fn outcome<T>(result: &Result<T, SandboxError>, answer: impl FnOnce(&T) -> Value) -> Value {
    match result {
        Ok(v) => tagged("ok", Some(answer(v))),
        Err(e) => {
            let mut fields = Map::new();
            fields.insert("kind".into(), s(e.kind()));
            if let SandboxError::Contract { violation, .. } = e
                && let Ok(Value::Object(v)) = serde_json::to_value(violation)
                && let Some(kind) = v.get("kind")
            {
                fields.insert("violation".into(), kind.clone());
            }
            tagged("err", Some(Value::Object(fields)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_keeps_wit_order_and_escapes_like_python_and_js() {
        let r = StepReport {
            step: 3,
            steps_left: 7,
            errors_left: 2,
            kind: StepKind::ToolResults,
            text: None,
            outcomes: vec![ToolOutcome {
                call: ToolCall {
                    id: "c1".into(),
                    name: "get".into(),
                    arguments: "{\"a\":1}".into(),
                },
                content: "é\u{1}\n\t\u{7f}\u{2028}\"\\/".into(),
                error: false,
                blocked: true,
            }],
        };
        // The exact bytes the Python and JavaScript runtimes produce for
        // the same value (their tests assert the same string).
        assert_eq!(
            serde_json::to_string(&step_report(&r)).unwrap(),
            "{\"step\":3,\"steps-left\":7,\"errors-left\":2,\"kind\":\"tool-results\",\"text\":null,\
             \"outcomes\":[{\"call\":{\"id\":\"c1\",\"name\":\"get\",\"arguments\":\"{\\\"a\\\":1}\"},\
             \"content\":\"é\\u0001\\n\\t\u{7f}\u{2028}\\\"\\\\/\",\"error\":false,\"blocked\":true}]}"
        );
        assert_eq!(
            serde_json::to_string(&action_decision(&ActionDecision::Proceed)).unwrap(),
            r#"{"tag":"proceed"}"#
        );
        assert_eq!(
            serde_json::to_string(&view_answer(&Err(ViewError::ToolError("x".into())))).unwrap(),
            r#"{"tag":"err","val":{"tag":"tool-error","val":"x"}}"#
        );
    }

    #[test]
    fn errors_carry_their_kind_and_violation() {
        let e: Result<(), _> = Err(SandboxError::Contract {
            hook: "realize",
            violation: super::super::error::Violation::EmptyCallId,
        });
        assert_eq!(
            serde_json::to_string(&outcome(&e, |_| Value::Null)).unwrap(),
            r#"{"tag":"err","val":{"kind":"contract_violation","violation":"empty_call_id"}}"#
        );
    }
}

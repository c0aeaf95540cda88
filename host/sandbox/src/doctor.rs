//! `ecdysis-host check`: the doctor a harness author runs first. It calls
//! every hook with representative inputs, each in a fresh episode (a failed
//! call poisons its instance, and one broken hook should not hide another),
//! and reports fuel, time and any contract violation per hook.

use std::time::Duration;

use crate::sandbox::{
    AgentAction, ContractInput, EpisodeInfo, LoadedHarness, SandboxError, StaticEnv, StepKind,
    StepReport, TaskView, ToolCall, ToolOutcome, ToolSpec,
};

/// One hook call of the check.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Probe {
    /// The hook called: `constructor`, `contract`, `skills`, `realize` or
    /// `regulate`.
    pub hook: &'static str,
    /// What input the hook got.
    pub input: &'static str,
    /// The hook's answer, summarised, or `None` when it failed.
    pub answer: Option<String>,
    /// The typed failure, if any.
    pub error: Option<String>,
    /// The [`SandboxError`] kind of the failure (`trap`, `out_of_fuel`, ...),
    /// or `None` when the hook answered.
    pub error_kind: Option<&'static str>,
    /// Fuel the call burnt (0 when it failed).
    pub fuel: u64,
    /// Wall time of the call, in microseconds (0 when it failed).
    pub micros: u64,
}

/// The result of a check.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckReport {
    /// One line per probe, in call order; a probe whose episode could not
    /// start is reported as a failed `constructor` (or setup `contract`).
    pub probes: Vec<Probe>,
}

impl CheckReport {
    /// Whether every hook answered within the contract.
    pub fn passed(&self) -> bool {
        self.probes.iter().all(|p| p.error.is_none())
    }

    /// The table `check` prints: one line per probe, then the verdict.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{:<9} {:<38} {:>10} {:>9}  result\n",
            "hook", "input", "fuel", "time µs"
        );
        for p in &self.probes {
            let result = match (&p.answer, &p.error) {
                (_, Some(e)) => format!("FAIL {e}"),
                (Some(a), None) => format!("ok   {a}"),
                (None, None) => "ok".into(),
            };
            out += &format!(
                "{:<9} {:<38} {:>10} {:>9}  {}\n",
                p.hook, p.input, p.fuel, p.micros, result
            );
        }
        out += if self.passed() {
            "all hooks answered within the contract\n"
        } else {
            "some hooks failed: see FAIL lines\n"
        };
        out
    }
}

/// A small retail-like tool set: two read-only lookups and one write.
pub fn sample_tools() -> Vec<ToolSpec> {
    let obj = |props: &str| format!(r#"{{"type":"object","properties":{props},"required":[]}}"#);
    vec![
        ToolSpec {
            name: "get_order_details".into(),
            description: "Get the status and details of an order.".into(),
            parameters: obj(r#"{"order_id":{"type":"string"}}"#),
            mutates: false,
        },
        ToolSpec {
            name: "get_user_details".into(),
            description: "Get the details of a user.".into(),
            parameters: obj(r#"{"user_id":{"type":"string"}}"#),
            mutates: false,
        },
        ToolSpec {
            name: "cancel_pending_order".into(),
            description: "Cancel a pending order.".into(),
            parameters: obj(r#"{"order_id":{"type":"string"},"reason":{"type":"string"}}"#),
            mutates: true,
        },
    ]
}

fn sample_env() -> StaticEnv {
    StaticEnv::default()
        .with_tool(
            "get_order_details",
            false,
            r##"{"order_id": "#W0000001", "status": "pending"}"##,
        )
        .with_tool(
            "get_user_details",
            false,
            r##"{"user_id": "sample_user_1", "orders": ["#W0000001"]}"##,
        )
        .with_tool("cancel_pending_order", true, "")
}

fn call(name: &str, args: &str) -> ToolCall {
    ToolCall {
        id: "call_1".into(),
        name: name.into(),
        arguments: args.into(),
    }
}

enum Input {
    Contract(ContractInput),
    Skills(TaskView),
    Realize(AgentAction),
    Regulate(StepReport),
}

fn probes() -> Vec<(&'static str, &'static str, Input)> {
    let info_text = "Hi, I want to cancel my order #W0000001, I ordered it by mistake.";
    vec![
        (
            "contract",
            "retail-like policy and 3 tools",
            Input::Contract(ContractInput {
                domain: "tau2/retail".into(),
                system_prompt: "You are a customer service agent. Follow the policy.".into(),
                tools: sample_tools(),
            }),
        ),
        (
            "skills",
            "a cancellation request",
            Input::Skills(TaskView {
                domain: "tau2/retail".into(),
                first_user_message: info_text.into(),
            }),
        ),
        (
            "realize",
            "a structured read-only call",
            Input::Realize(AgentAction::Call(call(
                "get_order_details",
                r##"{"order_id":"#W0000001"}"##,
            ))),
        ),
        (
            "realize",
            "a structured write call",
            Input::Realize(AgentAction::Call(call(
                "cancel_pending_order",
                r##"{"order_id":"#W0000001","reason":"ordered by mistake"}"##,
            ))),
        ),
        (
            "realize",
            "a call written as fenced JSON text",
            Input::Realize(AgentAction::Text(
                "```json\n{\"name\": \"get_order_details\", \"arguments\": {\"order_id\": \"#W0000001\"}}\n```"
                    .into(),
            )),
        ),
        (
            "regulate",
            "a failed tool call",
            Input::Regulate(StepReport {
                step: 3,
                steps_left: 196,
                errors_left: 9,
                kind: StepKind::ToolResults,
                text: None,
                outcomes: vec![ToolOutcome {
                    call: call("get_order_details", r#"{"order_id":"W0000001"}"#),
                    content: "Error: Order not found".into(),
                    error: true,
                    blocked: false,
                }],
            }),
        ),
        (
            "regulate",
            "an agent message near the step limit",
            Input::Regulate(StepReport {
                step: 190,
                steps_left: 9,
                errors_left: 10,
                kind: StepKind::AgentMessage,
                text: Some("Could you confirm the order id?".into()),
                outcomes: vec![],
            }),
        ),
    ]
}

fn summarize<T: serde::Serialize>(v: &T) -> String {
    let s = serde_json::to_string(v).unwrap_or_default();
    if s.len() > 160 {
        let mut cut = 157;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}...", &s[..cut])
    } else {
        s
    }
}

/// Run every probe against `harness`.
pub fn check(harness: &LoadedHarness) -> CheckReport {
    let tools = sample_tools();
    let info = EpisodeInfo {
        domain: "tau2/retail".into(),
        max_steps: 200,
        max_errors: 10,
    };
    let probes = probes();
    // Every probe episode first sees the environment contract, as a real
    // episode does: harnesses that learn the tools in `contract` (e.g. to
    // rescue text-written calls by name) are then exercised on that path.
    let setup_contract = probes.iter().find_map(|(_, _, input)| match input {
        Input::Contract(i) => Some(i.clone()),
        _ => None,
    });
    let mut out = Vec::new();
    for (hook, label, input) in probes {
        let mut ep = match harness.start_episode(&info, &tools, Box::new(sample_env())) {
            Ok(ep) => ep,
            Err(e) => {
                out.push(failed("constructor", label, &e, 0, Duration::ZERO));
                continue;
            }
        };
        if let (Some(setup), false) = (&setup_contract, matches!(input, Input::Contract(_)))
            && let Err(e) = ep.contract(setup)
        {
            out.push(failed("contract", label, &e, 0, Duration::ZERO));
            continue;
        }
        let result: Result<(String, u64, Duration), SandboxError> = match &input {
            Input::Contract(i) => ep
                .contract(i)
                .map(|h| (summarize(&h.value), h.fuel, h.elapsed)),
            Input::Skills(v) => ep
                .skills(v)
                .map(|h| (summarize(&h.value), h.fuel, h.elapsed)),
            Input::Realize(a) => ep
                .realize(a)
                .map(|h| (summarize(&h.value), h.fuel, h.elapsed)),
            Input::Regulate(r) => ep
                .regulate(r)
                .map(|h| (summarize(&h.value), h.fuel, h.elapsed)),
        };
        out.push(match result {
            Ok((answer, fuel, elapsed)) => Probe {
                hook,
                input: label,
                answer: Some(answer),
                error: None,
                error_kind: None,
                fuel,
                micros: elapsed.as_micros() as u64,
            },
            Err(e) => failed(hook, label, &e, 0, Duration::ZERO),
        });
    }
    CheckReport { probes: out }
}

fn failed(
    hook: &'static str,
    input: &'static str,
    e: &SandboxError,
    fuel: u64,
    elapsed: Duration,
) -> Probe {
    Probe {
        hook,
        input,
        answer: None,
        error: Some(e.to_string()),
        error_kind: Some(e.kind()),
        fuel,
        micros: elapsed.as_micros() as u64,
    }
}

//! Tests of the simulated agents, with a tiny in-test episode driver that
//! plays the environment and (optionally) a harness.

use serde_json::{Value, json};

use super::*;
use crate::types::{ChatMessage, ChatModel, ChatRequest, ChatResponse, FunctionTool, ToolCall};
use crate::user::{ScriptedUser, Speaker, UserScript, UserStop, Utterance};

const TOOLS: &[(&str, &str)] = &[
    ("find_user_id_by_email", "Find user id by email."),
    (
        "get_order_details",
        "Get the status and details of an order.",
    ),
    (
        "get_product_details",
        "Get the inventory details of a product.",
    ),
    (
        "cancel_pending_order",
        "Cancel a pending order. The agent needs to explain the cancellation detail and ask for explicit user confirmation (yes/no) to proceed.",
    ),
    (
        "exchange_delivered_order_items",
        "Exchange items in a delivered order to new items of the same product type.",
    ),
    (
        "send_certificate",
        "Send a certificate to a user. Be careful!",
    ),
];

fn tools() -> Vec<FunctionTool> {
    TOOLS
        .iter()
        .map(|(n, d)| FunctionTool::new(*n, *d, json!({"type": "object"})))
        .collect()
}

fn plan(steps: &[(&str, Value)], communicate: &[&str]) -> TestbedPlan {
    TestbedPlan {
        task_id: "t1".into(),
        domain: "tau2/retail".into(),
        steps: steps
            .iter()
            .map(|(n, a)| PlannedCall::new(*n, a.clone()))
            .collect(),
        communicate: communicate.iter().map(|s| s.to_string()).collect(),
    }
}

fn retail_plan() -> TestbedPlan {
    plan(
        &[
            ("find_user_id_by_email", json!({"email": "a@b.c"})),
            ("get_order_details", json!({"order_id": "#W1"})),
            ("get_product_details", json!({"product_id": "p1"})),
            (
                "exchange_delivered_order_items",
                json!({"order_id": "#W1", "item_ids": ["1000000001"],
                       "new_item_ids": ["1000000002"], "payment_method_id": "gc_1"}),
            ),
        ],
        &["42", "mastercard"],
    )
}

/// The environment: strict about `#` ids, numbers and tool names.
fn execute(name: &str, args: &Value) -> Result<String, String> {
    if !TOOLS.iter().any(|(n, _)| *n == name) {
        return Err(format!("Tool '{name}' not found."));
    }
    if let Some(id) = args.get("order_id").and_then(Value::as_str)
        && !id.starts_with('#')
    {
        return Err("Order not found".into());
    }
    if args.get("amount").is_some_and(|a| !a.is_number()) {
        return Err("Input should be a valid number".into());
    }
    if args.get("order_id").and_then(Value::as_str) == Some("#W9") {
        return Err("Order is not pending".into());
    }
    Ok(match name {
        "get_product_details" => json!({"product_id": "p1", "variants": {
            "1000000001": {"item_id": "1000000001"},
            "1000000002": {"item_id": "1000000002"},
            "1000000003": {"item_id": "1000000003"}}})
        .to_string(),
        _ => json!({"ok": true}).to_string(),
    })
}

/// What the test harness does.
#[derive(Default, Clone)]
struct Harness {
    /// Replacement tool descriptions.
    descriptions: Vec<(&'static str, &'static str)>,
    /// Feedback appended to every failed tool result (an annotation).
    annotate_errors: Option<&'static str>,
    /// Block calls of this tool with this feedback, until `unblock_after`
    /// has run.
    block: Option<(&'static str, &'static str, &'static str)>,
    /// A note shown after an assistant text that holds a ```json call.
    text_note: Option<&'static str>,
    /// Realize text-written calls as structured calls.
    realize: bool,
}

struct Trace {
    responses: Vec<ChatResponse>,
    /// Calls that reached the environment, with their success.
    executed: Vec<(String, Value, bool)>,
    messages: Vec<ChatMessage>,
}

impl Trace {
    fn ok_calls(&self) -> Vec<(String, Value)> {
        self.executed
            .iter()
            .filter(|(_, _, ok)| *ok)
            .map(|(n, a, _)| (n.clone(), a.clone()))
            .collect()
    }

    fn fired(&self) -> Vec<(Quirk, usize)> {
        self.responses
            .iter()
            .flat_map(|r| r.testbed.as_ref().unwrap().quirks.clone())
            .map(|q| (q.name, q.step_index))
            .collect()
    }

    fn corrected(&self) -> Vec<QuirkCorrected> {
        self.responses
            .iter()
            .flat_map(|r| r.testbed.as_ref().unwrap().corrected.clone())
            .collect()
    }

    fn final_text(&self) -> Option<&str> {
        self.responses
            .iter()
            .find(|r| r.testbed.as_ref().unwrap().action == SimAction::Final)
            .map(|r| r.text())
    }
}

fn run(agent: &SimAgent, harness: &Harness) -> Trace {
    let mut tools = tools();
    for (name, description) in &harness.descriptions {
        tools
            .iter_mut()
            .find(|t| t.name == *name)
            .unwrap()
            .description = description.to_string();
    }
    let mut messages = vec![
        ChatMessage::system("You are a retail agent. Follow the policy."),
        ChatMessage::assistant("Hi! How can I help you today?"),
        ChatMessage::user("Hi, I need help with my order."),
    ];
    let mut trace = Trace {
        responses: Vec::new(),
        executed: Vec::new(),
        messages: Vec::new(),
    };
    let mut unblocked = false;
    let mut realized = 0;
    for _ in 0..40 {
        let request = ChatRequest::new(messages.clone()).with_tools(tools.clone());
        let response = agent.respond(&request);
        messages.push(response.to_message());
        trace.responses.push(response.clone());
        let mut calls = response.tool_calls.clone();
        if calls.is_empty() {
            let text = response.text();
            if text.contains(CLOSING_QUESTION) || text == GOODBYE {
                break;
            }
            if text.contains("```json") && harness.realize {
                // As the agent loop does: the text message is replaced by the
                // structured call it meant.
                messages.pop();
                let body = text.trim_start_matches("```json").trim_end_matches("```");
                let v: Value = serde_json::from_str(body.trim()).unwrap();
                realized += 1;
                let call = ToolCall::new(
                    format!("realized_{realized}"),
                    v["name"].as_str().unwrap(),
                    v["arguments"].to_string(),
                );
                messages.push(ChatMessage::assistant_with_tool_calls(
                    None,
                    vec![call.clone()],
                ));
                calls = vec![call];
            } else if text.contains("```json")
                && let Some(note) = harness.text_note
            {
                messages.push(ChatMessage::system(format!(
                    "[Runtime harness note] {note}"
                )));
                continue;
            } else {
                messages.push(ChatMessage::user("Okay."));
                continue;
            }
        }
        for call in calls {
            let args: Value = serde_json::from_str(&call.arguments).unwrap();
            if let Some((tool, feedback, _)) = harness.block
                && call.name == tool
                && !unblocked
            {
                messages.push(ChatMessage::tool(
                    &call.id,
                    format!("[Blocked by the runtime harness] {feedback}"),
                ));
                continue;
            }
            if let Some((_, _, until)) = harness.block
                && call.name == until
            {
                unblocked = true;
            }
            let outcome = execute(&call.name, &args);
            trace
                .executed
                .push((call.name.clone(), args, outcome.is_ok()));
            let content = match outcome {
                Ok(text) => text,
                Err(e) => match harness.annotate_errors {
                    Some(note) => format!("Error: {e}\n\n[Runtime harness note] {note}"),
                    None => format!("Error: {e}"),
                },
            };
            messages.push(ChatMessage::tool(&call.id, content));
        }
    }
    trace.messages = messages;
    trace
}

fn only(quirk: Quirk, p: f64, correction: f64) -> SimProfile {
    SimProfile::new(
        format!("only-{quirk}"),
        QuirkRates::only(quirk, p),
        correction,
    )
}

fn oracle() -> SimProfile {
    SimProfile::builtin("oracle").unwrap()
}

fn gold_calls(plan: &TestbedPlan) -> Vec<(String, Value)> {
    plan.steps
        .iter()
        .map(|s| (s.name.clone(), Value::Object(s.arguments.clone())))
        .collect()
}

#[test]
fn profiles_parse_and_list() {
    let names: Vec<String> = SimProfile::builtins()
        .iter()
        .map(|p| p.model_name())
        .collect();
    assert_eq!(
        names,
        [
            "sim:oracle",
            "sim:clumsy",
            "sim:careless",
            "sim:mixed",
            "sim:texter"
        ]
    );
    assert_eq!(SimProfile::parse("sim:clumsy").unwrap().name, "clumsy");
    assert!(
        SimProfile::parse("sim:nope")
            .unwrap_err()
            .to_string()
            .contains("sim:mixed")
    );
    assert!(SimProfile::parse("clumsy").is_err());
    let help = SimProfile::help_text();
    assert!(names.iter().all(|n| help.contains(n.as_str())));
    for profile in SimProfile::builtins() {
        let json = serde_json::to_value(&profile).unwrap();
        assert_eq!(serde_json::from_value::<SimProfile>(json).unwrap(), profile);
    }
    let oracle = oracle();
    assert!(Quirk::ALL.iter().all(|q| oracle.rates.get(*q) == 0.0));
    // The three main profiles have different mixes.
    let mass = |name: &str, kind: QuirkKind| {
        let p = SimProfile::builtin(name).unwrap();
        Quirk::ALL
            .iter()
            .filter(|q| q.kind() == kind)
            .map(|q| p.rates.get(*q))
            .sum::<f64>()
    };
    assert!(mass("clumsy", QuirkKind::Systematic) > mass("clumsy", QuirkKind::ModelSpecific) * 5.0);
    assert!(mass("careless", QuirkKind::ModelSpecific) > mass("careless", QuirkKind::Systematic));
}

#[test]
fn oracle_follows_the_plan_and_communicates() {
    let plan = retail_plan();
    let agent = SimAgent::new(oracle(), plan.clone(), 1);
    assert_eq!(agent.name(), "sim:oracle");
    let trace = run(&agent, &Harness::default());
    let executed: Vec<(String, Value)> = trace
        .executed
        .iter()
        .map(|(n, a, _)| (n.clone(), a.clone()))
        .collect();
    assert_eq!(executed, gold_calls(&plan));
    assert!(trace.executed.iter().all(|(_, _, ok)| *ok));
    let ids: Vec<&str> = trace
        .responses
        .iter()
        .flat_map(|r| r.tool_calls.iter().map(|c| c.id.as_str()))
        .collect();
    assert_eq!(
        ids,
        ["sim_call_0", "sim_call_1", "sim_call_2", "sim_call_3"]
    );
    let last = trace.final_text().unwrap();
    assert!(last.contains("42") && last.contains("mastercard"), "{last}");
    assert!(last.ends_with(CLOSING_QUESTION));
    assert_eq!(trace.responses.len(), 5);
    for r in &trace.responses {
        let note = r.testbed.as_ref().unwrap();
        assert!(note.quirks.is_empty() && note.corrected.is_empty());
        assert_eq!(note.model, "sim:oracle");
        assert_eq!(r.model.as_deref(), Some("sim:oracle"));
    }
    // Asked again after finishing: goodbye, forever.
    let mut messages = trace.messages.clone();
    messages.push(ChatMessage::user("Thanks, one more thing?"));
    let bye = agent.respond(&ChatRequest::new(messages.clone()).with_tools(tools()));
    assert_eq!(bye.text(), GOODBYE);
    assert_eq!(bye.testbed.unwrap().action, SimAction::Goodbye);
    messages.push(ChatMessage::assistant(GOODBYE));
    messages.push(ChatMessage::user("Bye?"));
    let again = agent.respond(&ChatRequest::new(messages).with_tools(tools()));
    assert_eq!(again.text(), GOODBYE);
}

#[test]
fn same_seed_same_episode_other_seed_other_episode() {
    let clumsy = SimProfile::builtin("clumsy").unwrap();
    let run_json = |seed: u64| {
        let agent = SimAgent::new(clumsy.clone(), retail_plan(), seed);
        let trace = run(&agent, &Harness::default());
        serde_json::to_string(&trace.responses).unwrap()
    };
    assert_eq!(run_json(7), run_json(7));
    let distinct: std::collections::BTreeSet<String> = (0..8).map(run_json).collect();
    assert!(distinct.len() > 1, "every seed gave the same episode");
    // The fingerprint (cache key material) includes the seed.
    let request = ChatRequest::new(vec![ChatMessage::user("hi")]);
    let a = SimAgent::new(clumsy.clone(), retail_plan(), 1);
    let b = SimAgent::new(clumsy, retail_plan(), 2);
    assert_ne!(a.fingerprint(&request), b.fingerprint(&request));
}

#[tokio::test]
async fn chat_is_respond() {
    let agent = SimAgent::new(oracle(), retail_plan(), 3);
    let request = ChatRequest::new(vec![ChatMessage::user("hi")]).with_tools(tools());
    let response = agent.chat(&request).await.unwrap();
    assert_eq!(response, agent.respond(&request));
    assert_eq!(response.tool_calls[0].name, "find_user_id_by_email");
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
}

/// Runs `plan` with only `quirk` at rate 1 and at rate 0 (no correction).
fn both_rates(quirk: Quirk, plan: &TestbedPlan) -> (Trace, Trace) {
    let on = run(
        &SimAgent::new(only(quirk, 1.0, 0.0), plan.clone(), 5),
        &Harness::default(),
    );
    let off = run(
        &SimAgent::new(only(quirk, 0.0, 0.0), plan.clone(), 5),
        &Harness::default(),
    );
    assert!(off.fired().is_empty(), "{quirk} fired at rate 0");
    assert_eq!(off.ok_calls(), gold_calls(plan), "{quirk} at rate 0");
    (on, off)
}

fn first_call(trace: &Trace) -> &ChatResponse {
    &trace.responses[0]
}

#[test]
fn text_call_fires() {
    let plan = plan(&[("get_order_details", json!({"order_id": "#W1"}))], &[]);
    let (on, _) = both_rates(Quirk::TextCall, &plan);
    let r = first_call(&on);
    assert!(r.tool_calls.is_empty());
    let text = r.text();
    assert!(
        text.starts_with("```json\n") && text.ends_with("\n```"),
        "{text}"
    );
    let body: Value =
        serde_json::from_str(text.trim_start_matches("```json").trim_end_matches("```")).unwrap();
    assert_eq!(
        body,
        json!({"name": "get_order_details", "arguments": {"order_id": "#W1"}})
    );
    assert_eq!(on.fired()[0], (Quirk::TextCall, 0));
    // Unrealized and uncorrected: the step never runs, the agent moves on.
    assert!(on.executed.is_empty());
    assert!(on.final_text().is_some());
}

#[test]
fn text_call_realized_by_the_harness_counts_as_done() {
    let plan = retail_plan();
    let agent = SimAgent::new(only(Quirk::TextCall, 1.0, 0.0), plan.clone(), 5);
    let harness = Harness {
        realize: true,
        ..Harness::default()
    };
    let trace = run(&agent, &harness);
    assert_eq!(trace.ok_calls(), gold_calls(&plan));
    assert!(trace.final_text().is_some());
    assert!(trace.corrected().is_empty());
}

#[test]
fn drop_hash_fires() {
    let plan = plan(&[("get_order_details", json!({"order_id": "#W1"}))], &[]);
    let (on, _) = both_rates(Quirk::DropHash, &plan);
    assert_eq!(on.executed[0].1, json!({"order_id": "W1"}));
    assert!(!on.executed[0].2);
    assert_eq!(on.fired()[0], (Quirk::DropHash, 0));
}

#[test]
fn numbers_as_strings_and_miscount_fire() {
    let plan = plan(
        &[("send_certificate", json!({"user_id": "u1", "amount": 100}))],
        &[],
    );
    let (on, _) = both_rates(Quirk::NumbersAsStrings, &plan);
    assert_eq!(on.executed[0].1, json!({"user_id": "u1", "amount": "100"}));
    let (on, _) = both_rates(Quirk::Miscount, &plan);
    let amount = on.executed[0].1["amount"].as_i64().unwrap();
    assert!(amount == 99 || amount == 101, "{amount}");
    assert_eq!(on.fired(), [(Quirk::Miscount, 0)]);
    assert_eq!(on.fired()[0].0.kind(), QuirkKind::ModelSpecific);
}

#[test]
fn tool_alias_fires() {
    let plan = plan(&[("get_order_details", json!({"order_id": "#W1"}))], &[]);
    let (on, _) = both_rates(Quirk::ToolAlias, &plan);
    assert_eq!(on.executed[0].0, "get_order_info");
    assert!(!on.executed[0].2);
}

#[test]
fn repeat_failing_call_fires() {
    let plan = plan(
        &[
            (
                "cancel_pending_order",
                json!({"order_id": "#W9", "reason": "no longer needed"}),
            ),
            ("get_order_details", json!({"order_id": "#W1"})),
        ],
        &[],
    );
    let on = run(
        &SimAgent::new(only(Quirk::RepeatFailingCall, 1.0, 0.0), plan.clone(), 5),
        &Harness::default(),
    );
    let names: Vec<&str> = on.executed.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "cancel_pending_order",
            "cancel_pending_order",
            "get_order_details"
        ]
    );
    assert_eq!(on.executed[0].1, on.executed[1].1);
    assert_eq!(on.fired(), [(Quirk::RepeatFailingCall, 0)]);
    let off = run(
        &SimAgent::new(only(Quirk::RepeatFailingCall, 0.0, 0.0), plan, 5),
        &Harness::default(),
    );
    assert_eq!(off.executed.len(), 2);
    assert!(off.fired().is_empty());
}

fn cancel_plan() -> TestbedPlan {
    plan(
        &[
            ("get_order_details", json!({"order_id": "#W1"})),
            (
                "cancel_pending_order",
                json!({"order_id": "#W1", "reason": "no longer needed"}),
            ),
        ],
        &[],
    )
}

#[test]
fn skip_precondition_fires() {
    let plan = cancel_plan();
    let (on, _) = both_rates(Quirk::SkipPrecondition, &plan);
    let names: Vec<&str> = on.executed.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, ["cancel_pending_order"]);
    assert_eq!(on.fired(), [(Quirk::SkipPrecondition, 0)]);
}

#[test]
fn wrong_variant_fires_with_an_id_seen_in_results() {
    let plan = retail_plan();
    let (on, _) = both_rates(Quirk::WrongVariant, &plan);
    let exchange = &on.executed[3].1;
    assert_eq!(exchange["item_ids"], json!(["1000000001"]));
    let new = exchange["new_item_ids"][0].as_str().unwrap();
    assert!(["1000000001", "1000000003"].contains(&new), "{new}");
    assert_eq!(on.fired(), [(Quirk::WrongVariant, 3)]);
}

#[test]
fn early_stop_fires() {
    let plan = retail_plan();
    let (on, _) = both_rates(Quirk::EarlyStop, &plan);
    assert_eq!(on.ok_calls(), gold_calls(&plan)[..3].to_vec());
    assert_eq!(on.fired(), [(Quirk::EarlyStop, 3)]);
    assert!(on.final_text().unwrap().contains("42"));
}

/// A systematic quirk at rate 1 under `harness`: with correction 1 the gold
/// calls all succeed and a correction is recorded; with correction 0 they
/// don't.
fn corrected_by(quirk: Quirk, plan: &TestbedPlan, harness: &Harness, prevented: bool) {
    let yes = run(
        &SimAgent::new(only(quirk, 1.0, 1.0), plan.clone(), 9),
        harness,
    );
    assert_eq!(yes.ok_calls(), gold_calls(plan), "{quirk} not corrected");
    let corrected = yes.corrected();
    assert!(
        corrected.iter().any(|c| c.name == quirk
            && c.prevented == prevented
            && c.kind == QuirkKind::Systematic),
        "{quirk}: {corrected:?}"
    );
    let no = run(
        &SimAgent::new(only(quirk, 1.0, 0.0), plan.clone(), 9),
        harness,
    );
    assert_ne!(no.ok_calls(), gold_calls(plan), "{quirk} corrected at 0");
    assert!(no.corrected().is_empty());
    assert!(no.fired().iter().any(|(q, _)| *q == quirk));
}

#[test]
fn feedback_that_states_the_fix_corrects_systematic_quirks() {
    let order = plan(&[("get_order_details", json!({"order_id": "#W1"}))], &[]);
    let cert = plan(
        &[("send_certificate", json!({"user_id": "u1", "amount": 100}))],
        &[],
    );
    // Annotations on the failed result.
    let note = |text: &'static str| Harness {
        annotate_errors: Some(text),
        ..Harness::default()
    };
    corrected_by(
        Quirk::DropHash,
        &order,
        &note("Order ids start with '#', e.g. '#W0000000'."),
        false,
    );
    corrected_by(
        Quirk::NumbersAsStrings,
        &cert,
        &note("`amount` must be a JSON number, not a string."),
        false,
    );
    corrected_by(
        Quirk::ToolAlias,
        &order,
        &note("There is no tool get_order_info: use get_order_details instead."),
        false,
    );
    // A note after a text-written call.
    let text = Harness {
        text_note: Some("Do not write calls as JSON text; use a structured tool call."),
        ..Harness::default()
    };
    corrected_by(Quirk::TextCall, &order, &text, false);
    // A block of the write that skipped its lookup.
    let block = Harness {
        block: Some((
            "cancel_pending_order",
            "Call get_order_details first, before cancelling.",
            "get_order_details",
        )),
        ..Harness::default()
    };
    corrected_by(Quirk::SkipPrecondition, &cancel_plan(), &block, false);
    let trace = run(
        &SimAgent::new(only(Quirk::SkipPrecondition, 1.0, 1.0), cancel_plan(), 9),
        &block,
    );
    let names: Vec<&str> = trace.executed.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, ["get_order_details", "cancel_pending_order"]);
}

#[test]
fn tool_description_hints_prevent_systematic_quirks() {
    let order = plan(&[("get_order_details", json!({"order_id": "#W1"}))], &[]);
    let hint = |tool: &'static str, text: &'static str| Harness {
        descriptions: vec![(tool, text)],
        ..Harness::default()
    };
    corrected_by(
        Quirk::DropHash,
        &order,
        &hint(
            "get_order_details",
            "Get an order. Order ids keep the leading '#'.",
        ),
        true,
    );
    corrected_by(
        Quirk::TextCall,
        &order,
        &hint(
            "get_order_details",
            "Get an order. Call it with a structured tool call.",
        ),
        true,
    );
    corrected_by(
        Quirk::SkipPrecondition,
        &cancel_plan(),
        &hint(
            "cancel_pending_order",
            "Cancel a pending order. Always look up the order with get_order_details first.",
        ),
        true,
    );
}

#[test]
fn repeat_is_prevented_by_a_do_not_repeat_cue() {
    let plan = plan(
        &[(
            "cancel_pending_order",
            json!({"order_id": "#W9", "reason": "no longer needed"}),
        )],
        &[],
    );
    let harness = Harness {
        annotate_errors: Some("Do not repeat a call that failed; change it or move on."),
        ..Harness::default()
    };
    let yes = run(
        &SimAgent::new(only(Quirk::RepeatFailingCall, 1.0, 1.0), plan.clone(), 9),
        &harness,
    );
    assert_eq!(yes.executed.len(), 1);
    assert!(yes.fired().is_empty());
    assert_eq!(yes.corrected()[0].name, Quirk::RepeatFailingCall);
    assert!(yes.corrected()[0].prevented);
    let no = run(
        &SimAgent::new(only(Quirk::RepeatFailingCall, 1.0, 0.0), plan, 9),
        &harness,
    );
    assert_eq!(no.executed.len(), 2);
}

#[test]
fn model_specific_quirks_are_never_corrected() {
    let cues = "Use the exact item variant the user chose, the exact amount, and never stop \
                before the last action. Order ids start with '#'. Do not repeat calls.";
    let harness = Harness {
        descriptions: vec![
            ("exchange_delivered_order_items", cues),
            ("send_certificate", cues),
        ],
        annotate_errors: Some(cues),
        ..Harness::default()
    };
    let cert = plan(
        &[
            ("get_product_details", json!({"product_id": "p1"})),
            ("send_certificate", json!({"user_id": "u1", "amount": 100})),
            (
                "exchange_delivered_order_items",
                json!({"order_id": "#W1", "item_ids": ["1000000001"],
                       "new_item_ids": ["1000000002"], "payment_method_id": "gc_1"}),
            ),
        ],
        &[],
    );
    for quirk in [Quirk::WrongVariant, Quirk::Miscount, Quirk::EarlyStop] {
        let trace = run(
            &SimAgent::new(only(quirk, 1.0, 1.0), cert.clone(), 9),
            &harness,
        );
        assert!(trace.fired().iter().any(|(q, _)| *q == quirk), "{quirk}");
        assert!(trace.corrected().is_empty(), "{quirk} corrected");
        assert_ne!(trace.ok_calls(), gold_calls(&cert), "{quirk}");
    }
}

#[test]
fn heavy_profiles_finish_and_label_everything() {
    for profile in SimProfile::builtins() {
        for seed in 0..10 {
            let agent = SimAgent::new(profile.clone(), retail_plan(), seed);
            let trace = run(&agent, &Harness::default());
            assert!(trace.final_text().is_some(), "{} seed {seed}", profile.name);
            for r in &trace.responses {
                let note = r.testbed.as_ref().unwrap();
                assert_eq!(note.model, profile.model_name());
                for q in &note.quirks {
                    assert_eq!(q.kind, q.name.kind());
                    assert!(profile.rates.get(q.name) > 0.0);
                }
            }
        }
    }
}

#[test]
fn greeting_and_forced_calls_are_not_its_own() {
    let agent = SimAgent::new(oracle(), cancel_plan(), 1);
    let mut messages = vec![
        ChatMessage::system("policy"),
        ChatMessage::assistant("Hi! How can I help you today?"),
        ChatMessage::user("Cancel #W1 please."),
    ];
    let r = agent.respond(&ChatRequest::new(messages.clone()).with_tools(tools()));
    assert_eq!(r.tool_calls[0].name, "get_order_details");
    assert_eq!(r.tool_calls[0].id, "sim_call_0");
    // The harness forced the *last* gold call instead: the plan skips past it.
    let forced = ToolCall::new(
        "h_force",
        "cancel_pending_order",
        r##"{"reason":"no longer needed","order_id":"#W1"}"##,
    );
    messages.push(ChatMessage::assistant_with_tool_calls(None, vec![forced]));
    messages.push(ChatMessage::tool("h_force", "{\"status\":\"cancelled\"}"));
    let r = agent.respond(&ChatRequest::new(messages).with_tools(tools()));
    assert!(r.tool_calls.is_empty());
    assert_eq!(r.testbed.unwrap().action, SimAction::Final);
}

#[test]
fn end_to_end_with_the_scripted_user() {
    let plan = retail_plan();
    let agent = SimAgent::new(oracle(), plan, 1);
    let user = ScriptedUser::new(UserScript {
        task_id: "t1".into(),
        reason_for_call: "You want to exchange an item.".into(),
        known_info: Some("Your email is a@b.c.".into()),
        unknown_info: None,
        task_instructions: String::new(),
        device_actions: Vec::new(),
    });
    let mut messages = vec![ChatMessage::system("policy")];
    let mut view = vec![Utterance::agent("Hi! How can I help you today?")];
    messages.push(ChatMessage::assistant("Hi! How can I help you today?"));
    let mut stop = None;
    for _ in 0..20 {
        let turn = user.reply(&view);
        view.push(Utterance::user(turn.text.clone()));
        messages.push(ChatMessage::user(turn.text));
        if turn.stop.is_some() {
            stop = turn.stop;
            break;
        }
        loop {
            let r = agent.respond(&ChatRequest::new(messages.clone()).with_tools(tools()));
            messages.push(r.to_message());
            if r.tool_calls.is_empty() {
                view.push(Utterance::agent(r.text()));
                break;
            }
            for call in &r.tool_calls {
                let args: Value = serde_json::from_str(&call.arguments).unwrap();
                let content = execute(&call.name, &args).unwrap();
                messages.push(ChatMessage::tool(&call.id, content));
            }
        }
    }
    assert_eq!(stop, Some(UserStop::Stop));
    assert_eq!(
        view.iter().filter(|u| u.speaker == Speaker::Agent).count(),
        2
    );
    assert_eq!(
        view[1].text,
        "Hi. I want to exchange an item. My email is a@b.c."
    );
}

#[test]
fn testbed_note_round_trips_and_stays_off_real_responses() {
    let plain = serde_json::to_value(ChatResponse::default()).unwrap();
    assert!(plain.get("testbed").is_none());
    let agent = SimAgent::new(SimProfile::builtin("texter").unwrap(), retail_plan(), 1);
    let r = agent.respond(&ChatRequest::new(vec![ChatMessage::user("hi")]));
    let value = serde_json::to_value(&r).unwrap();
    assert_eq!(value["testbed"]["quirks"][0]["name"], "text_call");
    assert_eq!(value["testbed"]["quirks"][0]["kind"], "systematic");
    assert_eq!(serde_json::from_value::<ChatResponse>(value).unwrap(), r);
}

#[test]
fn failed_results_follow_the_loop_conventions() {
    assert!(is_failed_result("Error: Order not found"));
    assert!(is_failed_result(
        "[Blocked by the runtime harness] look it up first"
    ));
    assert!(!is_failed_result(
        "{\"ok\": true}\n\n[Runtime harness note] calls that are blocked or fail with an error..."
    ));
    // DBBench: MySQL errors and unknown tools fail; rows do not.
    assert!(is_failed_result(
        "1146 (42S02): Table 'x.nope' doesn't exist"
    ));
    assert!(is_failed_result(
        "Invalid function call. Please call a tool instead."
    ));
    assert!(!is_failed_result("[(1146,)]"));
    assert!(!is_failed_result("1146 apples"));
}

#[test]
fn realized_text_calls_keep_both_shapes() {
    // The loop may also keep the text and append the realized call.
    let plan = cancel_plan();
    let agent = SimAgent::new(only(Quirk::TextCall, 1.0, 0.0), plan, 1);
    let mut messages = vec![ChatMessage::system("policy"), ChatMessage::user("hi")];
    let first = agent.respond(&ChatRequest::new(messages.clone()));
    messages.push(first.to_message());
    messages.push(ChatMessage::assistant_with_tool_calls(
        None,
        vec![ToolCall::new(
            "realized_1",
            "get_order_details",
            r##"{"order_id":"#W1"}"##,
        )],
    ));
    messages.push(ChatMessage::tool("realized_1", "{}"));
    let second = agent.respond(&ChatRequest::new(messages));
    assert!(second.text().contains("cancel_pending_order"));
    assert_eq!(second.testbed.unwrap().step_index, Some(1));
}

#[test]
fn guidance_in_the_system_prompt_counts_but_the_base_policy_does_not() {
    let policy = "# Retail policy\n\nOrder ids start with '#', e.g. '#W0000000'.\n\nBe kind.";
    let plan = plan(&[("get_order_details", json!({"order_id": "#W1"}))], &[]);
    let first = |agent: &SimAgent, system: &str| {
        agent.respond(
            &ChatRequest::new(vec![
                ChatMessage::system(system),
                ChatMessage::assistant("Hi! How can I help you today?"),
                ChatMessage::user("Where is my order #W1?"),
            ])
            .with_tools(tools()),
        )
    };
    let args = |r: &ChatResponse| r.tool_calls[0].parsed_arguments().unwrap();
    let profile = only(Quirk::DropHash, 1.0, 1.0);
    let with_base = SimAgent::new(profile.clone(), plan.clone(), 3).with_base_prompt(policy);
    // The policy alone (unchanged) is not harness feedback.
    let r = first(&with_base, policy);
    assert_eq!(args(&r), json!({"order_id": "W1"}));
    // Guidance the loop appended to it is.
    let guided = format!("{policy}\n\n## Order ids\nKeep the leading '#' of order ids.");
    let r = first(&with_base, &guided);
    assert_eq!(args(&r), json!({"order_id": "#W1"}));
    let corrected = &r.testbed.as_ref().unwrap().corrected;
    assert_eq!(corrected[0].source, CueSource::SystemPrompt);
    assert!(corrected[0].prevented);
    // Without a base prompt the first system message is never read.
    let without = SimAgent::new(profile, plan, 3);
    assert_eq!(args(&first(&without, &guided)), json!({"order_id": "W1"}));
}

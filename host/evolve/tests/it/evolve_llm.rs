//! The LLM-facing pieces of evolution against the in-process mock OpenAI
//! server (real HTTP on 127.0.0.1) and real builds of a staging copy of
//! harness-template: the FDCR discussion (role order, call counts, spec
//! validation and retries, the shared transcript), the built-in editor coder
//! (edits, mismatch feedback, compiler-error feedback, edits outside src/),
//! and the external-command adapter (diff collection, rejection, timeout).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ecdysis_evolve::code::{
    Coder, CoderError, CoderTask, EditorCoder, EditorConfig, ExternalCoder, ExternalConfig,
};
use ecdysis_evolve::diagnose::change_spec::ChangeSpec;
use ecdysis_evolve::diagnose::fdcr::{
    FdcrConfig, FdcrFailure, FdcrInput, FdcrOutcome, FdcrRole, Roles, deliberate,
};
use ecdysis_model::{ChatModel, EndpointLimiter, HttpChatModel, ModelConfig, RetryPolicy};
use ecdysis_testkit::mock::{MockReply, MockServer};
use serde_json::Value;

const SPEC: &str = r#"{"failure_patterns": [{"name": "order id without #", "description": "get_order_details fails with 'Order not found' when the id lacks its # prefix", "evidence_tasks": ["3", "8"]}],
 "proposed_changes": [{"layer": "realize", "file": "src/tables.rs", "description": "raise EVOLVE_ANCHOR to 2", "rationale": "two tasks fail the same way", "evidence_tasks": ["3", "8"]}],
 "skills": [], "implementation_notes": "keep it small"}"#;

use ecdysis_testkit::repo_root;

/// A model served by the mock, named `name` (its requests carry that name,
/// which tells the roles apart). No client retries: every call is visible.
fn model(server: &MockServer, name: &str) -> Arc<dyn ChatModel> {
    let mut config = ModelConfig::new(name, server.base_url());
    config.api_key_env = None;
    config.connect_timeout = Duration::from_secs(2);
    config.request_timeout = Duration::from_secs(20);
    config.retry = RetryPolicy {
        max_retries: 0,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(10),
        max_retry_after: Duration::from_secs(1),
    };
    Arc::new(HttpChatModel::new(config, &EndpointLimiter::new()).expect("valid config"))
}

/// (model, messages as (role, content)) of every chat request the mock
/// received (not the budget's tokenizer requests).
fn requests(server: &MockServer) -> Vec<(String, Vec<(String, String)>)> {
    server
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .map(|r| {
            let body = r.json().expect("JSON body");
            let messages = body["messages"]
                .as_array()
                .expect("messages")
                .iter()
                .map(|m| {
                    (
                        m["role"].as_str().unwrap_or_default().to_string(),
                        m["content"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect();
            (
                body["model"].as_str().unwrap_or_default().to_string(),
                messages,
            )
        })
        .collect()
}

fn roles(server: &MockServer) -> Roles {
    Roles {
        analyst: model(server, "m-analyst"),
        critic: model(server, "m-critic"),
        engineer: model(server, "m-engineer"),
        moderator: model(server, "m-moderator"),
    }
}

fn fdcr_input() -> FdcrInput {
    FdcrInput::new(
        "## Recurring failure groups\n### Group R1: agent_stop | first failure get_order_details: order not found\n\
                   task 3 trial 0: reward 0.00, ended agent_stop\n  get_order_details({\"order_id\":\"W12\"}) -> ERROR: Error: Order not found\n",
        "Files of the harness crate:\n- src/lib.rs (30 lines)\n- src/tables.rs (10 lines)\n",
    )
}

fn roles_of(out: &FdcrOutcome) -> Vec<FdcrRole> {
    out.transcript.iter().map(|t| t.role).collect()
}

#[tokio::test]
async fn fdcr_runs_k_rounds_in_role_order_then_a_parsed_spec() {
    let server = MockServer::start().await.unwrap();
    let turns = [
        "ANALYST-1: prefix order ids with #",
        "CRITIC-1: narrow it to get_order_details",
        "ENGINEER-1: agreed on the narrowed rule",
        "ANALYST-2: narrowed as asked",
        "CRITIC-2: accept",
        "ENGINEER-2: keep the one rule",
    ];
    for t in turns {
        server.push(MockReply::text(t));
    }
    server.push(MockReply::text(&format!("```json\n{SPEC}\n```")));
    let config = FdcrConfig::default();
    assert_eq!(config.rounds, 2);
    let out = deliberate(&roles(&server), &fdcr_input(), &config).await;

    assert_eq!(out.error, None);
    assert_eq!(out.calls, 7, "3K + 1 calls for K = 2");
    let spec = out.spec.as_ref().expect("a parsed spec");
    assert_eq!(spec, &ChangeSpec::parse(SPEC).unwrap());
    use FdcrRole::*;
    assert_eq!(
        roles_of(&out),
        vec![
            Analyst, Critic, Engineer, Analyst, Critic, Engineer, Moderator
        ]
    );
    let rounds: Vec<u32> = out.transcript.iter().map(|t| t.round).collect();
    assert_eq!(rounds, vec![1, 1, 1, 2, 2, 2, 3]);
    for (turn, text) in out.transcript.iter().zip(turns) {
        assert_eq!(turn.content, text);
    }

    let reqs = requests(&server);
    assert_eq!(reqs.len(), 7);
    let models: Vec<&str> = reqs.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(
        models,
        vec![
            "m-analyst",
            "m-critic",
            "m-engineer",
            "m-analyst",
            "m-critic",
            "m-engineer",
            "m-moderator"
        ]
    );
    let headings = [
        "Analyst, round 1 of 2",
        "Critic, round 1 of 2",
        "Engineer, round 1 of 2",
        "Analyst, round 2 of 2",
        "Critic, round 2 of 2",
        "Engineer, round 2 of 2",
        "Moderator",
    ];
    for (i, ((_, messages), heading)) in reqs.iter().zip(headings).enumerate() {
        assert_eq!(messages[0].0, "system");
        let user = &messages[1].1;
        assert!(user.contains(heading), "request {i}: {user}");
        // Every role sees the evidence and the harness description.
        assert!(
            user.contains("get_order_details({\"order_id\":\"W12\"})"),
            "request {i}"
        );
        assert!(user.contains("src/tables.rs (10 lines)"), "request {i}");
        // ...and the whole transcript before its turn, but nothing after.
        for (j, t) in turns.iter().enumerate() {
            assert_eq!(user.contains(t), j < i, "request {i}, turn {j}");
        }
    }
    // The system prompt is shared (prefix caching), the instructions differ.
    assert!(reqs.iter().all(|(_, m)| m[0].1 == reqs[0].1[0].1));
    assert!(reqs[6].1[1].1.contains("\"proposed_changes\""));

    // The outcome is what transcript.json stores.
    let json = serde_json::to_string(&out).unwrap();
    let back: FdcrOutcome = serde_json::from_str(&json).unwrap();
    assert_eq!(back, out);
    let value: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value["transcript"][0]["role"], "analyst");
}

#[tokio::test]
async fn a_malformed_moderator_reply_is_retried_with_the_error_then_accepted() {
    let server = MockServer::start().await.unwrap();
    for t in ["a", "c", "e"] {
        server.push(MockReply::text(t));
    }
    server.push(MockReply::text("I think we should prefix the ids."));
    server.push(MockReply::text(SPEC));
    let config = FdcrConfig {
        rounds: 1,
        ..FdcrConfig::default()
    };
    let out = deliberate(&roles(&server), &fdcr_input(), &config).await;
    assert!(out.spec.is_some(), "{:?}", out.error);
    assert_eq!(out.error, None);
    assert_eq!(out.calls, 5);
    use FdcrRole::*;
    assert_eq!(
        roles_of(&out),
        vec![Analyst, Critic, Engineer, Moderator, Validation, Moderator]
    );
    assert_eq!(
        out.transcript[3].content,
        "I think we should prefix the ids."
    );
    assert!(
        out.transcript[4].content.contains("no JSON object"),
        "{:?}",
        out.transcript[4]
    );

    // The retry is a follow-up turn of the moderator's conversation.
    let reqs = requests(&server);
    assert_eq!(reqs.len(), 5);
    let (m, retry) = &reqs[4];
    assert_eq!(m, "m-moderator");
    let roles: Vec<&str> = retry.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(roles, vec!["system", "user", "assistant", "user"]);
    assert_eq!(retry[2].1, "I think we should prefix the ids.");
    assert!(retry[3].1.contains("refused"), "{}", retry[3].1);
    assert!(
        retry[3].1.contains("no JSON object found"),
        "{}",
        retry[3].1
    );
}

#[tokio::test]
async fn a_spec_that_stays_malformed_yields_no_spec_and_the_error() {
    let server = MockServer::start().await.unwrap();
    for t in ["a", "c", "e"] {
        server.push(MockReply::text(t));
    }
    let escaping = SPEC.replace("src/tables.rs", "../Cargo.toml");
    let bad = [
        "no json at all".to_string(),
        escaping,
        r#"{"failure_patterns": [], "proposed_changes": []}"#.to_string(),
    ];
    for b in &bad {
        server.push(MockReply::text(b));
    }
    let config = FdcrConfig {
        rounds: 1,
        spec_retries: 2,
        ..FdcrConfig::default()
    };
    let out = deliberate(&roles(&server), &fdcr_input(), &config).await;
    assert!(out.spec.is_none());
    assert_eq!(out.failure, Some(FdcrFailure::MalformedSpec));
    let error = out.error.clone().expect("an error");
    assert!(error.contains("malformed"), "{error}");
    assert!(error.contains("proposes nothing"), "{error}");
    assert_eq!(out.calls, 6);
    // The six role calls and the budget's request to the tokenizer.
    assert_eq!(server.request_count(), 7);
    use FdcrRole::*;
    assert_eq!(
        roles_of(&out),
        vec![
            Analyst, Critic, Engineer, Moderator, Validation, Moderator, Validation, Moderator,
            Validation
        ]
    );
    // Every reply is in the transcript.
    for (turn, b) in out
        .transcript
        .iter()
        .filter(|t| t.role == Moderator)
        .zip(&bad)
    {
        assert_eq!(&turn.content, b);
    }
    assert!(
        out.transcript[6]
            .content
            .contains("outside the harness's src/")
    );
    // The last retry request carries the latest refusal only (every retry
    // fits the same context budget): the escaping spec and why it was
    // refused.
    let reqs = requests(&server);
    let last = &reqs[5].1;
    assert_eq!(last.len(), 4);
    assert_eq!(last[2].1, bad[1]);
    assert!(
        last[3].1.contains("outside the harness's src/"),
        "{}",
        last[3].1
    );
    assert!(
        !last.iter().any(|m| m.1 == bad[0]),
        "the first refusal is gone"
    );
}

#[tokio::test]
async fn a_failing_role_call_ends_fdcr_with_a_model_error() {
    let server = MockServer::start().await.unwrap();
    server.push(MockReply::text("a"));
    server.push(MockReply::error(400, "bad request from the critic"));
    let out = deliberate(&roles(&server), &fdcr_input(), &FdcrConfig::default()).await;
    assert!(out.spec.is_none());
    assert_eq!(out.failure, Some(FdcrFailure::ModelError));
    assert!(
        out.error.as_deref().unwrap_or("").contains("critic"),
        "{:?}",
        out.error
    );
    assert_eq!(out.calls, 2);
    assert_eq!(out.transcript.len(), 1);
}

// ---------------------------------------------------------------------------
// Coders on a staging copy of harness-template.

/// A staging copy of harness-template next to a copy of `wit/` (the crate
/// binds `../wit`), with an anchor constant in `src/tables.rs` for the
/// scripted edits to target.
struct Staging {
    _dir: tempfile::TempDir,
    root: PathBuf,
    crate_dir: PathBuf,
}

const ANCHOR: &str = "pub const EVOLVE_ANCHOR: u32 = 1;";

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let name = entry.file_name();
        let n = name.to_string_lossy();
        if n == "target" || n.starts_with('.') {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(&name));
        if src.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

fn staging() -> Staging {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let crate_dir = root.join("harness");
    copy_tree(&repo_root().join("harness-template"), &crate_dir);
    copy_tree(&repo_root().join("wit"), &root.join("wit"));
    let tables = crate_dir.join("src/tables.rs");
    if tables.is_file() {
        let mut text = std::fs::read_to_string(&tables).unwrap();
        text.push_str(&format!(
            "\n/// Anchor of the evolve_llm tests.\n{ANCHOR}\n"
        ));
        std::fs::write(&tables, text).unwrap();
    } else {
        std::fs::write(
            &tables,
            format!("//! Tunables.\n\n/// Anchor of the evolve_llm tests.\n{ANCHOR}\n"),
        )
        .unwrap();
        let lib = crate_dir.join("src/lib.rs");
        let mut text = std::fs::read_to_string(&lib).unwrap();
        text.push_str("\npub mod tables;\n");
        std::fs::write(&lib, text).unwrap();
    }
    Staging {
        _dir: dir,
        root,
        crate_dir,
    }
}

impl Staging {
    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.crate_dir.join(rel)).unwrap()
    }
}

/// Guest builds share one warm target directory across tests and runs (the
/// one every harness build of the test run shares, when CI names it).
fn guest_target() -> PathBuf {
    std::env::var_os(ecdysis_sandbox::store::TARGET_DIR_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("evolve-llm-harness"))
}

fn task() -> CoderTask {
    CoderTask::new(ChangeSpec::parse(SPEC).unwrap())
}

/// The editor with a context large enough to quote the whole template
/// (its src/tables.rs alone is ~17k estimated tokens).
fn editor(server: &MockServer) -> EditorCoder {
    EditorCoder::new(
        model(server, "m-coder"),
        EditorConfig {
            target_dir: Some(guest_target()),
            budget: ecdysis_evolve::diagnose::token_budget::ContextBudget::new(65_536, None),
            ..EditorConfig::default()
        },
    )
}

fn block(file: &str, search: &str, replace: &str) -> String {
    format!("FILE: {file}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n")
}

#[tokio::test]
async fn the_editor_applies_a_good_edit_builds_it_and_returns_the_diff() {
    let s = staging();
    let server = MockServer::start().await.unwrap();
    server.push(MockReply::text(&format!(
        "Raising the anchor.\n\n```\n{}```\n",
        block("src/tables.rs", ANCHOR, "pub const EVOLVE_ANCHOR: u32 = 2;")
    )));
    let out = editor(&server)
        .implement(&task(), &s.crate_dir)
        .await
        .expect("edits");
    assert!(out.build_ok, "{}", out.log);
    assert_eq!(out.attempts, 1);
    assert_eq!(out.changed_files, vec!["src/tables.rs"]);
    assert!(
        out.diff
            .contains("--- a/src/tables.rs\n+++ b/src/tables.rs\n"),
        "{}",
        out.diff
    );
    assert!(
        out.diff
            .contains(&format!("-{ANCHOR}\n+pub const EVOLVE_ANCHOR: u32 = 2;\n")),
        "{}",
        out.diff
    );
    assert!(
        s.read("src/tables.rs")
            .contains("pub const EVOLVE_ANCHOR: u32 = 2;")
    );

    // The prompt: spec, file list and contents, contract rules, the format
    // and the src/-only constraint, in one conversation of one call.
    let reqs = requests(&server);
    assert_eq!(reqs.len(), 1);
    let (m, messages) = &reqs[0];
    assert_eq!(m, "m-coder");
    assert!(
        messages[0]
            .1
            .contains("only edit files under the crate's src/"),
        "{}",
        messages[0].1
    );
    let prompt = &messages[1].1;
    for needle in [
        "raise EVOLVE_ANCHOR to 2",
        "- src/lib.rs (",
        "### src/tables.rs",
        ANCHOR,
        "wasm32-wasip2",
        "<<<<<<< SEARCH",
        "must start with `src/`",
    ] {
        assert!(prompt.contains(needle), "prompt lacks {needle:?}");
    }
}

#[tokio::test]
async fn a_search_block_that_does_not_match_is_fed_back_and_the_retry_succeeds() {
    let s = staging();
    let server = MockServer::start().await.unwrap();
    let wrong = "pub const EVOLVE_ANCHOR: u32 = 7;";
    server.push(MockReply::text(&block(
        "src/tables.rs",
        wrong,
        "pub const EVOLVE_ANCHOR: u32 = 2;",
    )));
    server.push(MockReply::text(&block(
        "src/tables.rs",
        ANCHOR,
        "pub const EVOLVE_ANCHOR: u32 = 2;",
    )));
    let out = editor(&server)
        .implement(&task(), &s.crate_dir)
        .await
        .expect("edits");
    assert!(out.build_ok, "{}", out.log);
    assert_eq!(out.attempts, 2, "{}", out.log);
    assert_eq!(out.changed_files, vec!["src/tables.rs"]);
    assert!(
        out.diff.contains("+pub const EVOLVE_ANCHOR: u32 = 2;"),
        "{}",
        out.diff
    );

    let reqs = requests(&server);
    assert_eq!(reqs.len(), 2);
    let follow = &reqs[1].1;
    let roles: Vec<&str> = follow.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(roles, vec!["system", "user", "assistant", "user"]);
    assert!(follow[2].1.contains(wrong));
    let feedback = &follow[3].1;
    assert!(feedback.contains("does not occur"), "{feedback}");
    assert!(feedback.contains("src/tables.rs"), "{feedback}");
    // The current file comes along so the next SEARCH can match it.
    assert!(feedback.contains(ANCHOR), "{feedback}");
}

#[tokio::test]
async fn an_edit_outside_src_is_rejected_and_the_originals_restored() {
    let s = staging();
    let cargo_before = s.read("Cargo.toml");
    let tables_before = s.read("src/tables.rs");
    let server = MockServer::start().await.unwrap();
    server.push(MockReply::text(&format!(
        "{}{}",
        block("src/tables.rs", ANCHOR, "pub const EVOLVE_ANCHOR: u32 = 2;"),
        block(
            "Cargo.toml",
            "[dependencies]",
            "[dependencies]\nrand = \"0.8\""
        )
    )));
    let err = editor(&server)
        .implement(&task(), &s.crate_dir)
        .await
        .unwrap_err();
    match &err {
        CoderError::OutsideSrc {
            files, attempts, ..
        } => {
            assert_eq!(files, &vec!["Cargo.toml".to_string()]);
            assert_eq!(*attempts, 1);
        }
        other => panic!("expected OutsideSrc, got {other}"),
    }
    assert!(err.to_string().contains("Cargo.toml"), "{err}");
    assert_eq!(s.read("Cargo.toml"), cargo_before);
    assert_eq!(s.read("src/tables.rs"), tables_before);
    assert_eq!(server.request_count(), 1, "a rejection is not negotiated");
}

#[tokio::test]
async fn a_compile_error_is_fed_back_and_fixed() {
    let s = staging();
    let server = MockServer::start().await.unwrap();
    let broken = "pub const EVOLVE_ANCHOR: u32 = \"two\";";
    server.push(MockReply::text(&block("src/tables.rs", ANCHOR, broken)));
    server.push(MockReply::text(&block(
        "src/tables.rs",
        broken,
        "pub const EVOLVE_ANCHOR: u32 = 2;",
    )));
    let out = editor(&server)
        .implement(&task(), &s.crate_dir)
        .await
        .expect("edits");
    assert!(out.build_ok, "{}", out.log);
    assert_eq!(out.attempts, 2, "{}", out.log);
    assert!(out.log.contains("build failed"), "{}", out.log);
    assert!(
        out.diff
            .contains(&format!("-{ANCHOR}\n+pub const EVOLVE_ANCHOR: u32 = 2;\n")),
        "{}",
        out.diff
    );

    let reqs = requests(&server);
    assert_eq!(reqs.len(), 2);
    let follow = &reqs[1].1;
    assert_eq!(follow.len(), 4);
    let feedback = &follow[3].1;
    assert!(feedback.contains("mismatched types"), "{feedback}");
    assert!(feedback.contains("src/tables.rs"), "{feedback}");
    assert!(
        feedback.contains(broken),
        "the current (broken) file is quoted: {feedback}"
    );
}

#[tokio::test]
async fn the_editor_gives_up_after_its_feedback_budget() {
    let s = staging();
    let tables_before = s.read("src/tables.rs");
    let server = MockServer::start().await.unwrap();
    server.set_fallback(MockReply::text("I am not sure what to change."));
    let coder = EditorCoder::new(
        model(&server, "m-coder"),
        EditorConfig {
            max_feedback: 2,
            ..EditorConfig::default()
        },
    );
    let err = coder.implement(&task(), &s.crate_dir).await.unwrap_err();
    assert!(
        matches!(err, CoderError::NoEdits { attempts: 3, .. }),
        "{err}"
    );
    assert_eq!(err.attempts(), 3);
    assert_eq!(server.request_count(), 3);
    assert_eq!(s.read("src/tables.rs"), tables_before);
}

fn external(command: &str) -> ExternalCoder {
    let mut config = ExternalConfig::new(command);
    config.check_build = false;
    ExternalCoder::new(config).expect("template")
}

#[tokio::test]
async fn an_external_command_edit_is_collected_as_a_diff() {
    let s = staging();
    // The jailed agent writes outside the crate only where it is allowed to.
    let seen = s.root.join("seen");
    std::fs::create_dir_all(&seen).unwrap();
    let command = "sh -c \"cp {prompt_file} ../seen/prompt-copy.md && echo {dir} > ../seen/dir.txt && \
                   sed -i 's/EVOLVE_ANCHOR: u32 = 1;/EVOLVE_ANCHOR: u32 = 5;/' src/tables.rs\"";
    let mut config = ExternalConfig::new(command);
    config.target_dir = Some(guest_target());
    config.read_write = vec![seen.clone()];
    let coder = ExternalCoder::new(config).unwrap();
    assert_eq!(coder.name(), "external:sh");
    let out = coder.implement(&task(), &s.crate_dir).await.expect("edits");
    assert_eq!(out.attempts, 1);
    assert_eq!(out.changed_files, vec!["src/tables.rs"]);
    assert!(
        out.diff
            .contains(&format!("-{ANCHOR}\n+pub const EVOLVE_ANCHOR: u32 = 5;\n")),
        "{}",
        out.diff
    );
    assert!(out.build_ok, "{}", out.log);
    assert!(s.read("src/tables.rs").contains("EVOLVE_ANCHOR: u32 = 5;"));

    let prompt = std::fs::read_to_string(seen.join("prompt-copy.md")).unwrap();
    for needle in [
        "raise EVOLVE_ANCHOR to 2",
        "### src/tables.rs",
        "wasm32-wasip2",
        "Do not touch anything outside src/",
    ] {
        assert!(prompt.contains(needle), "prompt lacks {needle:?}");
    }
    let dir = std::fs::read_to_string(seen.join("dir.txt")).unwrap();
    assert_eq!(Path::new(dir.trim()), s.crate_dir.canonicalize().unwrap());
}

#[tokio::test]
async fn an_external_command_touching_cargo_toml_is_rejected_and_restored() {
    let s = staging();
    let cargo_before = s.read("Cargo.toml");
    let tables_before = s.read("src/tables.rs");
    let coder = external(
        "sh -c \"sed -i 's/EVOLVE_ANCHOR: u32 = 1;/EVOLVE_ANCHOR: u32 = 9;/' src/tables.rs && \
         echo '# sneaky' >> Cargo.toml && echo 'fn main() {}' > build.rs\"",
    );
    let err = coder.implement(&task(), &s.crate_dir).await.unwrap_err();
    match &err {
        CoderError::OutsideSrc { files, .. } => {
            assert_eq!(
                files,
                &vec!["Cargo.toml".to_string(), "build.rs".to_string()]
            )
        }
        other => panic!("expected OutsideSrc, got {other}"),
    }
    assert_eq!(s.read("Cargo.toml"), cargo_before);
    assert_eq!(s.read("src/tables.rs"), tables_before);
    assert!(!s.crate_dir.join("build.rs").exists());
}

#[tokio::test]
async fn an_external_command_past_its_timeout_is_killed_and_undone() {
    let s = staging();
    let tables_before = s.read("src/tables.rs");
    let coder = external(
        "sh -c \"sed -i 's/EVOLVE_ANCHOR: u32 = 1;/EVOLVE_ANCHOR: u32 = 3;/' src/tables.rs; sleep 30\"",
    )
    .with_timeout(Duration::from_millis(700));
    let started = Instant::now();
    let err = coder.implement(&task(), &s.crate_dir).await.unwrap_err();
    assert!(matches!(err, CoderError::Timeout { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(s.read("src/tables.rs"), tables_before);
}

#[tokio::test]
async fn external_commands_that_fail_or_change_nothing_are_errors() {
    let s = staging();
    let tables_before = s.read("src/tables.rs");
    let err = external("sh -c \"sed -i 's/= 1;/= 4;/' src/tables.rs; echo oops >&2; exit 2\"")
        .implement(&task(), &s.crate_dir)
        .await
        .unwrap_err();
    assert!(matches!(err, CoderError::CommandFailed { .. }), "{err}");
    assert!(err.log().contains("oops"), "{}", err.log());
    assert_eq!(s.read("src/tables.rs"), tables_before);

    let err = external("true")
        .implement(&task(), &s.crate_dir)
        .await
        .unwrap_err();
    assert!(matches!(err, CoderError::NoChange { .. }), "{err}");

    let err = external("no-such-coding-agent-binary {prompt}")
        .implement(&task(), &s.crate_dir)
        .await
        .unwrap_err();
    assert!(matches!(err, CoderError::Spawn { .. }), "{err}");
}

// ---------------------------------------------------------------------------
// The table coder.

fn table_coder(server: &MockServer, structured: bool) -> ecdysis_evolve::code::TableCoder {
    ecdysis_evolve::code::TableCoder::new(
        model(server, "m-tables"),
        EditorConfig {
            target_dir: Some(guest_target()),
            structured,
            ..EditorConfig::default()
        },
    )
}

fn dbbench_task() -> CoderTask {
    task().with_context(
        "dbbench",
        vec!["execute_sql".into(), "commit_final_answer".into()],
    )
}

/// A reply that names an unknown tool goes back with the reason; the next
/// reply's edits are written into src/tables.rs in the table's syntax, the
/// crate builds, and the request carried the JSON schema with the tools.
#[tokio::test]
async fn the_table_coder_writes_checked_edits_into_the_tables_and_builds() {
    let s = staging();
    let server = MockServer::start().await.unwrap();
    server.push(MockReply::text(
        r#"{"reason": "r", "edits": [{"kind": "tool_hint", "tool": "run_query", "hint": "quote values"}]}"#,
    ));
    server.push(MockReply::text(
        r#"Sure: {"reason": "quote TEXT values", "edits": [
            {"kind": "prompt_rule", "text": "Compare TEXT columns with quoted values, e.g. WHERE `No` = '7'."},
            {"kind": "error_advice", "contains": "1305 (42000)", "advice": "that function does not exist in MySQL: use CAST, SUM, COUNT, MAX or MIN."},
            {"kind": "regulation", "field": "error_streak", "value": 2}]}"#,
    ));
    let out = table_coder(&server, true)
        .implement(&dbbench_task(), &s.crate_dir)
        .await
        .expect("edits");
    assert!(out.build_ok, "{}", out.log);
    assert_eq!(out.attempts, 2, "{}", out.log);
    assert_eq!(out.changed_files, vec!["src/tables.rs"]);
    let tables = s.read("src/tables.rs");
    assert!(
        tables.contains(r#"PromptRule { domain: "dbbench", text: "Compare TEXT columns with quoted values, e.g. WHERE `No` = '7'." },"#),
        "{}",
        out.diff
    );
    assert!(tables.contains("error_streak: 2,"), "{}", out.diff);
    // The new advice is matched before the general MySQL ones.
    let at = |n: &str| tables.find(n).unwrap();
    assert!(at("1305 (42000)") < at("1064 (42000)"));

    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    let first = reqs[0].json().unwrap();
    let schema = &first["response_format"]["json_schema"]["schema"];
    assert_eq!(first["response_format"]["type"], "json_schema");
    let kinds = schema["properties"]["edits"]["items"]["anyOf"]
        .as_array()
        .unwrap();
    let hint = kinds
        .iter()
        .find(|k| k["properties"]["kind"]["const"] == "tool_hint")
        .unwrap();
    assert_eq!(
        hint["properties"]["tool"]["enum"],
        serde_json::json!(["execute_sql", "commit_final_answer"])
    );
    let prompt = first["messages"][1]["content"].as_str().unwrap();
    for needle in [
        "raise EVOLVE_ANCHOR to 2",
        "domain `dbbench`",
        "Run SQL only through the execute_sql tool",
        "Tools of this domain: execute_sql, commit_final_answer",
    ] {
        assert!(prompt.contains(needle), "prompt lacks {needle:?}");
    }
    assert!(
        !prompt.contains("book_reservation"),
        "another domain's entries"
    );
    let feedback = reqs[1].json().unwrap()["messages"][3]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(feedback.contains("no tool `run_query`"), "{feedback}");
}

/// Without structured output no schema is sent; replies that change
/// nothing use up the turns and leave the crate as it was.
#[tokio::test]
async fn the_table_coder_gives_up_on_edits_that_change_nothing_and_restores() {
    let s = staging();
    let before = s.read("src/tables.rs");
    let server = MockServer::start().await.unwrap();
    let existing = r#"{"reason": "r", "edits": [{"kind": "tool_alias", "alias": "run_sql", "tool": "execute_sql"}]}"#;
    for _ in 0..4 {
        server.push(MockReply::text(existing));
    }
    let err = table_coder(&server, false)
        .implement(&dbbench_task(), &s.crate_dir)
        .await
        .expect_err("nothing to change");
    assert!(
        matches!(err, CoderError::NoEdits { attempts: 4, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("already in the tables"), "{err}");
    assert_eq!(s.read("src/tables.rs"), before);
    let first = server.requests()[0].json().unwrap();
    assert!(first.get("response_format").is_none());
    // The second reply repeated the first: the calls after it sample.
    let temperatures: Vec<Value> = server
        .requests()
        .iter()
        .map(|r| r.json().unwrap()["temperature"].clone())
        .collect();
    let resampled = serde_json::json!(ecdysis_evolve::code::RESAMPLE_TEMPERATURE);
    assert_eq!(
        temperatures,
        [Value::Null, Value::Null, resampled.clone(), resampled]
    );
}

/// At temperature 0 a model that repeats its reply would repeat it on every
/// follow-up (the same request): after the repeat the coder samples, and
/// the sampled reply's new edit is built into a candidate.
#[tokio::test]
async fn a_repeated_reply_is_followed_by_a_sampled_call_whose_new_edit_builds() {
    let s = staging();
    let server = MockServer::start().await.unwrap();
    let existing = r#"{"reason": "r", "edits": [{"kind": "tool_alias", "alias": "run_sql", "tool": "execute_sql"}]}"#;
    server.push(MockReply::text(existing));
    server.push(MockReply::text(existing));
    server.push(MockReply::text(
        r#"{"reason": "quote TEXT values", "edits": [{"kind": "prompt_rule", "text": "Compare TEXT columns with quoted values, e.g. WHERE `No` = '7'."}]}"#,
    ));
    let coder = ecdysis_evolve::code::TableCoder::new(
        model(&server, "m-tables"),
        EditorConfig {
            target_dir: Some(guest_target()),
            sampling: ecdysis_model::SamplingArgs {
                temperature: Some(0.0),
                ..Default::default()
            },
            ..EditorConfig::default()
        },
    );
    let out = coder
        .implement(&dbbench_task(), &s.crate_dir)
        .await
        .expect("the sampled edit");
    assert!(out.build_ok, "{}", out.log);
    assert_eq!(out.attempts, 3, "{}", out.log);
    assert!(out.log.contains("the same reply as call 1"), "{}", out.log);
    assert!(s.read("src/tables.rs").contains("Compare TEXT columns"));
    let temperatures: Vec<f64> = server
        .requests()
        .iter()
        .map(|r| r.json().unwrap()["temperature"].as_f64().unwrap())
        .collect();
    assert_eq!(
        temperatures,
        [0.0, 0.0, ecdysis_evolve::code::RESAMPLE_TEMPERATURE]
    );
}

/// With structured output the Moderator's request carries the spec's JSON
/// schema, its evidence restricted to the round's failing tasks.
#[tokio::test]
async fn a_structured_moderator_request_carries_the_spec_schema() {
    let server = MockServer::start().await.unwrap();
    for t in ["A", "C", "E"] {
        server.push(MockReply::text(t));
    }
    server.push(MockReply::text(SPEC));
    let mut input = fdcr_input();
    input.failing_tasks = Some(["3".to_string(), "8".to_string()].into_iter().collect());
    let config = FdcrConfig {
        rounds: 1,
        structured: true,
        ..FdcrConfig::default()
    };
    let out = deliberate(&roles(&server), &input, &config).await;
    assert_eq!(out.error, None);
    let reqs: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .collect();
    assert_eq!(reqs.len(), 4);
    for r in &reqs[..3] {
        assert!(r.json().unwrap().get("response_format").is_none());
    }
    let moderator = reqs[3].json().unwrap();
    let schema = &moderator["response_format"]["json_schema"]["schema"];
    let evidence = &schema["properties"]["failure_patterns"]["items"]["properties"]["evidence_tasks"]
        ["items"]["enum"];
    assert_eq!(evidence, &serde_json::json!(["3", "8"]));
    // The schema's bounds admit the spec the Moderator wrote.
    let spec: Value = serde_json::from_str(SPEC).unwrap();
    assert!(spec["proposed_changes"].as_array().unwrap().len() <= 3);
}

// ---------------------------------------------------------------------------
// The coder-success benchmark (replayed, no model).

/// Recorded replies replay through the real coders: an editor reply whose
/// SEARCH text was re-indented builds only with the tolerant matcher; a
/// table reply builds after its unusable first attempt; a reply that never
/// applies builds under no variant. The counts per variant are the report.
#[tokio::test]
async fn the_coder_bench_replays_recorded_replies_through_each_coder() {
    use ecdysis_evolve::coder_bench::{self, CaseFormat, CoderBenchOptions, CoderCase, Variant};
    let root = repo_root();
    let scratch = tempfile::tempdir().unwrap();
    let spec = ChangeSpec::parse(SPEC).unwrap();
    let template = std::fs::read_to_string(root.join("harness-template/src/tables.rs")).unwrap();
    // Two rows of the template's tables, copied without their indentation
    // (so the pair is no substring of the file).
    let lines: Vec<&str> = template.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("alias: \"run_sql\""))
        .expect("the dbbench alias row");
    let unindented = format!("{}\n{}", lines[at].trim(), lines[at + 1].trim());
    let editor_reply = format!(
        "FILE: src/tables.rs\n<<<<<<< SEARCH\n{unindented}\n=======\n{unindented}\n    ToolAlias {{ domain: \"dbbench\", alias: \"run_query\", tool: \"execute_sql\" }},\n>>>>>>> REPLACE\n"
    );
    let context = Some(ecdysis_evolve::code::CoderContext {
        domain: "dbbench".into(),
        tools: vec!["execute_sql".into(), "commit_final_answer".into()],
    });
    let case = |id: &str, format, replies: Vec<String>| CoderCase {
        id: id.into(),
        source: "test".into(),
        format,
        spec: spec.clone(),
        notes: None,
        context: context.clone(),
        replies,
    };
    let cases = vec![
        case("reindented", CaseFormat::Editor, vec![editor_reply]),
        case(
            "tables",
            CaseFormat::Tables,
            vec![
                "I think we should add a rule.".into(),
                r#"{"reason": "r", "edits": [{"kind": "prompt_rule", "text": "Quote values compared with TEXT columns."}]}"#.into(),
            ],
        ),
        case(
            "hopeless",
            CaseFormat::Editor,
            vec!["FILE: src/tables.rs\n<<<<<<< SEARCH\nnot in the file\n=======\nx\n>>>>>>> REPLACE\n".into()],
        ),
    ];
    let options = CoderBenchOptions {
        source: root.join("harness-template"),
        wit: root.join("wit"),
        target_dir: guest_target(),
        scratch: scratch.path().join("bench"),
        containment: Default::default(),
    };
    let report = coder_bench::run(&cases, &options).await.unwrap();
    let built = |id: &str, v: Variant| {
        report
            .results
            .iter()
            .find(|r| r.id == id && r.variant == v)
            .unwrap_or_else(|| panic!("{id} {v:?}"))
            .built
    };
    assert!(!built("reindented", Variant::EditorExact));
    assert!(built("reindented", Variant::EditorTolerant));
    assert!(built("tables", Variant::Tables));
    assert!(!built("hopeless", Variant::EditorExact));
    assert!(!built("hopeless", Variant::EditorTolerant));
    let tables = report.results.iter().find(|r| r.id == "tables").unwrap();
    assert_eq!((tables.calls, tables.recorded), (2, 2));
    let text = report.render();
    assert!(
        text.contains("editor (whitespace-tolerant)          2      1     50%"),
        "{text}"
    );
    assert!(
        text.contains("tables (JSON table edits)             1      1    100%"),
        "{text}"
    );
    // The source is untouched: every case ran on a copy.
    assert_eq!(
        std::fs::read_to_string(root.join("harness-template/src/tables.rs")).unwrap(),
        template
    );
}

// ---------------------------------------------------------------------------
// The whole-file coder.

/// A spec naming one small realize file, which the whole-file coder then
/// rewrites.
const WHOLE_FILE_SPEC: &str = r#"{"failure_patterns": [{"name": "one-letter id", "description": "a one-letter order id gets a # prefix", "evidence_tasks": ["3", "8"]}],
 "proposed_changes": [{"layer": "realize", "file": "src/realize/id_prefix.rs", "description": "leave ids shorter than two characters alone", "rationale": "two tasks", "evidence_tasks": ["3", "8"]}],
 "skills": [], "implementation_notes": ""}"#;

/// A reply without a block and a reply that does not compile go back to
/// the model with what is wrong (the compiler's own message); the third
/// reply's file is written over the one the host chose, builds, and is the
/// candidate. The prompt held the spec and that file whole, and asked for
/// a reply room that fits it.
#[tokio::test]
async fn the_whole_file_coder_rewrites_the_chosen_file_with_compiler_feedback() {
    let s = staging();
    let original = s.read("src/realize/id_prefix.rs");
    assert!(original.contains("bare.is_empty()"), "the template changed");
    let broken = original.replace(
        "changed |= fix(domain, key, value);",
        "changed |= fix(domain, key);",
    );
    assert_ne!(broken, original, "the template changed");
    let fixed = original.replace("bare.is_empty()", "bare.len() < 2");
    let server = MockServer::start().await.unwrap();
    server.push(MockReply::text(
        "I would change the check so short ids are left alone.",
    ));
    server.push(MockReply::text(&format!("```rust\n{broken}```\n")));
    server.push(MockReply::text(&format!(
        "Here is the whole file:\n```rust\n{fixed}```\n"
    )));
    let coder = ecdysis_evolve::code::WholeFileCoder::new(
        model(&server, "m-whole"),
        EditorConfig {
            target_dir: Some(guest_target()),
            ..EditorConfig::default()
        },
    );
    let task = CoderTask::new(ChangeSpec::parse(WHOLE_FILE_SPEC).unwrap());
    let out = coder
        .implement(&task, &s.crate_dir)
        .await
        .expect("the third reply builds");
    assert!(out.build_ok, "{}", out.log);
    assert_eq!(out.attempts, 3, "{}", out.log);
    assert_eq!(out.changed_files, vec!["src/realize/id_prefix.rs"]);
    assert_eq!(s.read("src/realize/id_prefix.rs"), fixed);
    assert!(
        out.diff.contains("+            if bare.len() < 2"),
        "{}",
        out.diff
    );

    let reqs = requests(&server);
    assert_eq!(reqs.len(), 3);
    let prompt = &reqs[0].1[1].1;
    assert!(prompt.contains("leave ids shorter than two characters alone"));
    assert!(prompt.contains("`src/realize/id_prefix.rs`"));
    assert!(prompt.contains(&original), "the file is quoted whole");
    assert!(!prompt.contains("pub mod tables"), "only the one file");
    let no_block = &reqs[1].1[3].1;
    assert!(no_block.contains("no code block"), "{no_block}");
    let compiler = &reqs[2].1[3].1;
    assert!(compiler.contains("did not build"), "{compiler}");
    assert!(compiler.contains("E0061"), "{compiler}");
    let max_tokens = server.requests()[0].json().unwrap()["max_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        max_tokens as usize >= ecdysis_evolve::diagnose::token_budget::estimate_tokens(&original),
        "reply room {max_tokens}"
    );
}

/// Several blocks and a file over the cap are refused with the reason, and
/// when the turns run out the crate is left as it was; a spec that names
/// no change gets a typed error before any call.
#[tokio::test]
async fn the_whole_file_coder_refuses_unusable_replies_and_specs_without_a_target() {
    let s = staging();
    let original = s.read("src/realize/id_prefix.rs");
    let server = MockServer::start().await.unwrap();
    server.push(MockReply::text(
        "```rust\nfn a() {}\n```\n```rust\nfn b() {}\n```",
    ));
    server.push(MockReply::text(&format!(
        "```rust\n{}\n```",
        "x".repeat(original.len() + 100)
    )));
    let shorter = ecdysis_evolve::code::WholeFileCoder::new(
        model(&server, "m-whole"),
        EditorConfig {
            target_dir: Some(guest_target()),
            max_feedback: 1,
            ..EditorConfig::default()
        },
    )
    .with_cap(300);
    let task = CoderTask::new(ChangeSpec::parse(WHOLE_FILE_SPEC).unwrap());
    let err = shorter
        .implement(&task, &s.crate_dir)
        .await
        .expect_err("the file is over a 300-byte cap");
    assert!(
        err.to_string()
            .contains("no file of src/realize/ (named by the spec: src/realize/id_prefix.rs) is at most 300 bytes"),
        "{err}"
    );
    assert_eq!(server.requests().len(), 0);

    let coder = shorter.with_cap(original.len() + 10);
    let err = coder
        .implement(&task, &s.crate_dir)
        .await
        .expect_err("no usable reply");
    assert!(
        matches!(err, CoderError::NoEdits { attempts: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("over the cap"), "{err}");
    assert!(err.log().contains("2 code blocks"), "{}", err.log());
    assert_eq!(s.read("src/realize/id_prefix.rs"), original);

    let mut empty = ChangeSpec::parse(WHOLE_FILE_SPEC).unwrap();
    empty.proposed_changes.clear();
    let err = coder
        .implement(&CoderTask::new(empty), &s.crate_dir)
        .await
        .expect_err("nothing to rewrite");
    assert!(err.to_string().contains("proposes no change"), "{err}");
    assert_eq!(err.attempts(), 0);
    assert_eq!(requests(&server).len(), 2);
}

/// A recorded whole-file conversation replays through the whole-file
/// coder, which picks the same file again; the report counts it under its
/// own format.
#[tokio::test]
async fn the_coder_bench_replays_a_whole_file_conversation() {
    use ecdysis_evolve::coder_bench::{self, CaseFormat, CoderBenchOptions, CoderCase, Variant};
    let root = repo_root();
    let scratch = tempfile::tempdir().unwrap();
    let original =
        std::fs::read_to_string(root.join("harness-template/src/realize/id_prefix.rs")).unwrap();
    let fixed = original.replace("bare.is_empty()", "bare.len() < 2");
    let case = CoderCase {
        id: "whole".into(),
        source: "test".into(),
        format: CaseFormat::WholeFile,
        spec: ChangeSpec::parse(WHOLE_FILE_SPEC).unwrap(),
        notes: None,
        context: None,
        replies: vec!["no block".into(), format!("```rust\n{fixed}```")],
    };
    let options = CoderBenchOptions {
        source: root.join("harness-template"),
        wit: root.join("wit"),
        target_dir: guest_target(),
        scratch: scratch.path().join("bench"),
        containment: Default::default(),
    };
    let report = coder_bench::run(&[case], &options).await.unwrap();
    assert_eq!(report.results.len(), 1);
    let r = &report.results[0];
    assert_eq!(r.variant, Variant::WholeFile);
    assert!(r.built, "{}", r.outcome);
    assert_eq!((r.calls, r.recorded), (2, 2));
    let text = report.render();
    let row: Vec<&str> = text
        .lines()
        .find(|l| l.starts_with("whole-file (one hook file)"))
        .expect("a row for the format")
        .split_whitespace()
        .collect();
    assert_eq!(row[4..], ["1", "1", "100%", "2.0"], "{text}");
}

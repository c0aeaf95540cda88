//! The guides' worked examples, run as they are printed, each against the
//! testkit's scripted OpenAI server: the proxy guide's agent loops on the
//! `openai` client (`examples/openai-loop/`, which the page includes) behind
//! its `ecdysis-host proxy` command, and the training guide's `train` with
//! aider as the jailed coder. The service guide's steps are run by
//! `docs_serve_example`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use ecdysis_model::ToolCall;
use ecdysis_testkit::mock::{MockReply, MockServer};

use crate::docs_commands::shell_lines;
use crate::support::{self, repo_root};

const PROXY_GUIDE: &str = "docs/src/guides/proxy.md";
const TRAINING_GUIDE: &str = "docs/src/guides/training.md";
const LOOP_DIR: &str = "examples/openai-loop";

fn page(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The one shell line of `path` that starts with `start` and holds
/// `holding`.
fn printed_command(path: &str, start: &str, holding: &str) -> String {
    let found: Vec<String> = shell_lines(&page(path))
        .into_iter()
        .map(|(_, line)| line)
        .filter(|line| line.starts_with(start) && line.contains(holding))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{path}: want one shell line starting `{start}` with `{holding}`, found {found:?}"
    );
    found.into_iter().next().unwrap()
}

/// `PATH` with `first` in front, and the binary under test as
/// `ecdysis-host`.
fn path_with(first: &[PathBuf]) -> std::ffi::OsString {
    let mut dirs: Vec<PathBuf> = first.to_vec();
    dirs.push(support::host_bin().parent().unwrap().to_path_buf());
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).unwrap()
}

/// A command line as a shell runs it, in `cwd`, with the binary under test
/// on `PATH` and the τ² data of this checkout.
fn shell(line: &str, cwd: &Path, path_first: &[PathBuf]) -> Command {
    let mut cmd = Command::new("bash");
    cmd.args(["-c", line])
        .current_dir(cwd)
        .stdin(Stdio::null())
        .env("PATH", path_with(path_first))
        .env_remove("ECDYSIS_STORE");
    if std::env::var_os("ECDYSIS_DATA").is_none() {
        cmd.env("ECDYSIS_DATA", repo_root().join(".ecdysis/data"));
    }
    cmd
}

/// `var` when set, else `default` under the repository; the test fails,
/// naming `install`, when it is absent.
fn installed(var: &str, default: &str, install: &str) -> PathBuf {
    let path = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(default));
    assert!(
        path.exists(),
        "{} is missing: install it with `{install}` (or name another in {var})",
        path.display()
    );
    path
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

// ---------------------------------------------------------------------------
// The agent loop on the `openai` client, behind the proxy
// ---------------------------------------------------------------------------

/// What the loops print against [`loop_script`]'s upstream; the page
/// shows it.
const LOOP_OUTPUT: &str = "tool: get_order_details({\"order_id\":\"#W1234567\"})\n\
                           answer: Your order #W1234567 was delivered.\n";

/// The upstream of the loops' conversation: a call of a tool that does not
/// exist, the call written as JSON text, the answer.
fn loop_script(mock: &MockServer) {
    mock.push(MockReply::tool_calls(
        None,
        &[ToolCall {
            id: "call_1".into(),
            name: "teleport_parcel".into(),
            arguments: "{}".into(),
        }],
    ));
    mock.push(MockReply::text(
        "```json\n{\"name\": \"get_order_details\", \"arguments\": {\"order_id\": \"#W1234567\"}}\n```",
    ));
    mock.push(MockReply::text("Your order #W1234567 was delivered."));
}

/// Kills the process when the test ends, pass or fail.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A directory laid out like the repository (the starting harness, the
/// WIT, a store whose cargo target is the other tests' so the harness's
/// dependencies stay built) holding a training run, `runs/train-retail`:
/// one round on two retail tasks with the simulated agent and the rule
/// coder, whose incumbent the proxy guide's export line exports, as
/// printed, to `dist/harness`. Made once per test process.
fn trained_and_exported() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        for part in ["harness-template", "wit"] {
            ecdysis_sys::fsutil::copy_crate(&repo_root().join(part), &dir.join(part)).unwrap();
        }
        let target = std::env::var_os("ECDYSIS_CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join("target/evolve-candidates"));
        std::fs::create_dir_all(&target).unwrap();
        std::fs::create_dir_all(dir.join(".ecdysis/store")).unwrap();
        std::os::unix::fs::symlink(&target, dir.join(".ecdysis/store/cargo-target")).unwrap();
        let train =
            "ecdysis-host train --tasks 0,1 --rounds 1 --test-split none --out runs/train-retail";
        let out = shell(train, &dir, &[]).output().unwrap();
        assert!(out.status.success(), "`{train}`: {}", text(&out.stderr));
        let export = printed_command(PROXY_GUIDE, "ecdysis-host export --train-run ", "");
        assert!(
            export.contains("runs/train-retail") && export.ends_with("--out dist/harness"),
            "{PROXY_GUIDE}: `{export}` is not the export this test runs"
        );
        let out = shell(&export, &dir, &[]).output().unwrap();
        assert!(out.status.success(), "`{export}`: {}", text(&out.stderr));
        let manifest: Value =
            serde_json::from_slice(&std::fs::read(dir.join("dist/harness/harness.json")).unwrap())
                .unwrap();
        assert_eq!(
            manifest["training"]["run"]
                .as_str()
                .map(|r| r.ends_with("train-retail")),
            Some(true),
            "the export names its training run: {manifest}"
        );
        dir
    })
}

/// The proxy guide's `proxy` command, as printed but with `--upstream` the
/// mock's and `--listen` on a free port, run where the guide's export line
/// wrote `dist/harness` from a training run ([`trained_and_exported`]):
/// the process and its base URL.
async fn printed_proxy(upstream: &str) -> (Running, String) {
    let dir = tokio::task::spawn_blocking(trained_and_exported)
        .await
        .unwrap();
    let printed = printed_command(
        PROXY_GUIDE,
        "ecdysis-host proxy --harness dist/harness ",
        "",
    );
    let (head, printed_upstream) = printed
        .split_once(" --upstream ")
        .unwrap_or_else(|| panic!("{PROXY_GUIDE}: `{printed}` has no --upstream"));
    let printed_upstream = printed_upstream.split_whitespace().next().unwrap();
    let line = format!(
        "{head} --upstream {upstream}{}",
        &printed[head.len() + " --upstream ".len() + printed_upstream.len()..]
    );
    let mut child = shell(&format!("exec {line} --listen 127.0.0.1:0"), dir, &[])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let running = Running(child);
    let base = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stderr).lines();
        let base = lines.find_map(|l| {
            let l = l.ok()?;
            let rest = l.strip_prefix("proxy listening on ")?;
            Some(rest.split_whitespace().next()?.to_string())
        });
        // Read on, so the proxy never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        base
    })
    .await
    .unwrap()
    .unwrap_or_else(|| panic!("`{line}` printed no address"));
    (running, base)
}

/// Run a loop program (`program`, `file` in `cwd`) with `AGENT_BASE_URL`.
async fn run_loop(program: PathBuf, file: PathBuf, cwd: PathBuf, base: String) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(&program)
            .arg(&file)
            .current_dir(&cwd)
            .env("AGENT_BASE_URL", &base)
            .env_remove("OPENAI_API_KEY")
            .env_remove("AGENT_MODEL")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", program.display()))
    })
    .await
    .unwrap()
}

/// The loop in `file` (run by `program` in `cwd`) prints the page's output
/// through the proxy, and fails at the unknown tool straight at the
/// upstream with `crash` on stderr.
async fn the_loop_as_printed(program: PathBuf, file: PathBuf, cwd: PathBuf, crash: &str) {
    let guide = page(PROXY_GUIDE);
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    let include = format!("{{{{#include ../../../{LOOP_DIR}/{name}}}}}");
    assert!(
        guide.contains(&include),
        "{PROXY_GUIDE} prints {LOOP_DIR}/{name} with `{include}`"
    );
    assert!(
        guide.contains(&format!("```text\n{LOOP_OUTPUT}```")),
        "{PROXY_GUIDE} shows what the loop prints:\n{LOOP_OUTPUT}"
    );

    let mock = MockServer::start().await.unwrap();
    loop_script(&mock);
    let (_proxy, base) = printed_proxy(&mock.base_url()).await;
    let out = run_loop(program.clone(), file.clone(), cwd.clone(), base).await;
    assert!(out.status.success(), "{name}: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        LOOP_OUTPUT,
        "{name}: {}",
        text(&out.stderr)
    );
    // The blocked call was asked again; then one request a turn.
    assert_eq!(mock.request_count(), 3);

    // The control: the same loop straight at the same upstream.
    let direct = MockServer::start().await.unwrap();
    loop_script(&direct);
    let out = run_loop(program, file, cwd, direct.base_url()).await;
    assert!(
        !out.status.success() && text(&out.stderr).contains(crash),
        "{name} without the harness: {}\n{}",
        out.status,
        text(&out.stderr)
    );
}

#[tokio::test]
async fn openai_loop_python_as_printed() {
    let python = installed(
        "ECDYSIS_OPENAI_PYTHON",
        ".ecdysis/python-tools/bin/python",
        "bash scripts/python-tools.sh",
    );
    let file = repo_root().join(LOOP_DIR).join("agent.py");
    the_loop_as_printed(
        python,
        file,
        repo_root().join(LOOP_DIR),
        "KeyError: 'teleport_parcel'",
    )
    .await;
}

#[tokio::test]
async fn openai_loop_node_as_printed() {
    let modules = installed(
        "ECDYSIS_OPENAI_NODE_MODULES",
        "host/proxy/tests/sdk/node_modules",
        "bash runtimes/prepare.sh (or npm ci in host/proxy/tests/sdk)",
    );
    // As the page says: the file in a directory where `openai` is
    // installed (the proxy SDK test's pinned 4.104.0).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agent.mjs");
    std::fs::copy(repo_root().join(LOOP_DIR).join("agent.mjs"), &file).unwrap();
    std::os::unix::fs::symlink(&modules, dir.path().join("node_modules")).unwrap();
    the_loop_as_printed("node".into(), file, dir.path().to_path_buf(), "TypeError").await;
}

// ---------------------------------------------------------------------------
// Training with aider as the coder
// ---------------------------------------------------------------------------

/// The endpoint the training guide's command names.
const PRINTED_ENDPOINT: &str = "http://gpu-box:8000/v1";
/// What the scripted aider edit adds to the system prompt.
const NEW_RULE: &str = "Before you answer about an order, look it up with a tool.";
const KEY: &str = "sk-docs-example";

/// One SEARCH/REPLACE block (aider's `diff` format) that adds [`NEW_RULE`]
/// to the starting harness's prompt rules.
fn aider_edit() -> String {
    let tables = std::fs::read_to_string(repo_root().join("harness-template/src/tables.rs"))
        .expect("harness-template/src/tables.rs");
    let anchor = "pub static PROMPT_RULES: &[PromptRule] = &[";
    assert_eq!(
        tables.matches(anchor).count(),
        1,
        "harness-template/src/tables.rs: the edit's anchor `{anchor}`"
    );
    format!(
        "src/tables.rs\n```rust\n<<<<<<< SEARCH\n{anchor}\n=======\n{anchor}\n    PromptRule {{\n        domain: \"*\",\n        text: \"{NEW_RULE}\",\n    }},\n>>>>>>> REPLACE\n```\n"
    )
}

/// Whether a chat request asks for aider's edit: its prompt asks for
/// SEARCH/REPLACE blocks.
fn asks_for_an_edit(request: &Value) -> bool {
    request["messages"].as_array().is_some_and(|messages| {
        messages.iter().any(|m| {
            m["content"]
                .as_str()
                .is_some_and(|s| s.contains("SEARCH/REPLACE"))
        })
    })
}

#[tokio::test]
async fn train_with_aider() {
    // The guide's two set-up lines: the install, run as printed (from the
    // repository's root; it is idempotent), and the PATH it exports,
    // which this test puts in front of its own.
    let install = printed_command(TRAINING_GUIDE, "bash scripts/aider.sh", "");
    assert_eq!(install, "bash scripts/aider.sh");
    let export = printed_command(TRAINING_GUIDE, "export PATH=", "OPENAI_API_KEY=");
    assert!(
        export.starts_with("export PATH=\"$PWD/.ecdysis/aider/bin:$PATH\""),
        "{TRAINING_GUIDE}: `{export}` does not put the installed aider first"
    );
    if std::env::var_os("ECDYSIS_AIDER").is_none() {
        let out = shell(&install, &repo_root(), &[]).output().unwrap();
        assert!(
            out.status.success(),
            "`{install}` failed:\n{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
    let aider = installed(
        "ECDYSIS_AIDER",
        ".ecdysis/aider/bin/aider",
        "bash scripts/aider.sh",
    );
    let printed = printed_command(
        TRAINING_GUIDE,
        "ecdysis-host train ",
        "--coder-command \"aider ",
    );
    assert!(
        printed.contains(PRINTED_ENDPOINT),
        "{TRAINING_GUIDE}: `{printed}` names no {PRINTED_ENDPOINT}"
    );
    let agent_model = printed
        .split_once("--agent-model ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("{TRAINING_GUIDE}: `{printed}` names no --agent-model"))
        .to_string();

    let mock = MockServer::start().await.unwrap();
    let edit = aider_edit();
    mock.set_handler(move |r| {
        if !r.path.ends_with("/chat/completions") {
            return MockReply::error(404, "not served here");
        }
        match r.json() {
            Some(body) if asks_for_an_edit(&body) => MockReply::text(&edit),
            _ => MockReply::text("I am sorry, I cannot help with that."),
        }
    });

    // A directory laid out like the repository: the starting harness, the
    // WIT, and a store whose cargo target is the other tests' (the
    // harness's dependencies stay built).
    let dir = tempfile::tempdir().unwrap();
    for part in ["harness-template", "wit"] {
        ecdysis_sys::fsutil::copy_crate(&repo_root().join(part), &dir.path().join(part)).unwrap();
    }
    let target = std::env::var_os("ECDYSIS_CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/evolve-candidates"));
    std::fs::create_dir_all(&target).unwrap();
    std::fs::create_dir_all(dir.path().join(".ecdysis/store")).unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join(".ecdysis/store/cargo-target")).unwrap();

    let line = printed.replace(PRINTED_ENDPOINT, &mock.base_url());
    let venv_bin = aider.parent().unwrap().to_path_buf();
    let cwd = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        shell(&line, &cwd, &[venv_bin])
            .env("OPENAI_API_KEY", KEY)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let log = format!("{}\n{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{log}");

    let run = dir.path().join("runs/train-aider");
    let rounds = std::fs::read_to_string(run.join("rounds.jsonl")).expect("rounds.jsonl");
    let round: Value = serde_json::from_str(rounds.lines().next().unwrap()).unwrap();
    let transcript: Value = serde_json::from_str(
        &std::fs::read_to_string(run.join("rounds/1/transcript.json")).unwrap(),
    )
    .unwrap();
    let coder = &transcript["coder_runs"][0];
    let candidate = round["candidate"].as_str().unwrap_or_else(|| {
        panic!(
            "no candidate: {round}\naider's run: {}\n{log}",
            coder["log"].as_str().unwrap_or("none")
        )
    });
    assert_ne!(Some(candidate), round["incumbent"].as_str());
    assert_eq!(coder["coder"], "external:aider", "{coder}");
    assert_eq!(
        coder["changed_files"],
        serde_json::json!(["src/tables.rs"]),
        "{coder}"
    );
    assert_eq!(coder["build_ok"], true, "{coder}");
    let diff = std::fs::read_to_string(run.join("candidates").join(candidate).join("diff.patch"))
        .expect("the candidate's diff.patch");
    assert!(diff.contains(NEW_RULE), "{diff}");

    let requests: Vec<(Value, Option<String>)> = mock
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .filter_map(|r| Some((r.json()?, r.header("authorization").map(String::from))))
        .collect();
    let (agents, aiders): (Vec<_>, Vec<_>) = requests
        .iter()
        .partition(|(b, _)| b["model"] == agent_model.as_str());
    assert!(
        aiders.iter().any(|(b, _)| asks_for_an_edit(b)),
        "aider never asked the endpoint for its edit\n{log}"
    );
    let bearer = format!("Bearer {KEY}");
    assert!(
        aiders
            .iter()
            .all(|(_, auth)| auth.as_deref() == Some(bearer.as_str())),
        "aider's requests carry the key passed with --coder-env"
    );
    // The candidate's episodes, and only they, tell the agent the new rule.
    let told = agents
        .iter()
        .filter(|(b, _)| {
            b["messages"][0]["content"]
                .as_str()
                .is_some_and(|s| s.contains(NEW_RULE))
        })
        .count();
    assert!(
        told > 0 && told < agents.len(),
        "{told} of {} agent requests",
        agents.len()
    );
}

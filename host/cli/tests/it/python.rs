//! Training a harness written in Python (`harness-template-py`): each
//! candidate is built with componentize-py as untrusted source (scanned,
//! then jailed), gated like a Rust one and exported as a component.

use std::path::Path;

use serde_json::Value;

use crate::support;

/// A scripted coder: its first edit makes the harness read a host file
/// (the scan must refuse it), its second adds retail tool aliases the
/// simulated agent uses (the gate must accept it).
const CODER: &str = r#"
import pathlib, sys
state = pathlib.Path(sys.argv[1]) / "round"
n = int(state.read_text()) if state.exists() else 0
state.write_text(str(n + 1))
rules = pathlib.Path("rules.py")
tables = pathlib.Path("tables.py")
if n == 0:
    rules.write_text(rules.read_text() + '\nLEAK = open("/etc/hostname").read()\n')
else:
    anchor = '    ("retail", "get_product", "get_product_details"),\n'
    extra = "".join(
        f'    ("retail", "{a}", "{t}"),\n'
        for a, t in [
            ("get_order_status", "get_order_details"),
            ("get_product_info", "get_product_details"),
            ("modify_order_items", "modify_pending_order_items"),
            ("modify_order_address", "modify_pending_order_address"),
            ("exchange_items", "exchange_delivered_order_items"),
            ("return_items", "return_delivered_order_items"),
            ("find_user_by_email", "find_user_id_by_email"),
            ("find_user_by_name_zip", "find_user_id_by_name_zip"),
        ]
    )
    tables.write_text(tables.read_text().replace(anchor, anchor + extra, 1))
"#;

/// The training tasks of both trainings: the Python harness runs its CPython
/// in the sandbox, so a whole split is minutes of CPU. With `sim:mixed` the
/// starting harness solves 0-3 and fails 96, which the retail aliases turn
/// into a solved task: a round that adds them is accepted, one that adds
/// nothing the agent uses is not.
const FIVE_TASKS: &str = "0,1,2,3,96";

/// The harness target the tests share: a training's starting harness is
/// the component already built from its source there.
fn shared_target() -> String {
    support::repo_root()
        .join("target/evolve-candidates")
        .to_string_lossy()
        .into_owned()
}

fn host(store: &Path) -> std::process::Command {
    let mut c = std::process::Command::new(support::host_bin());
    c.current_dir(support::repo_root())
        .args(["--quiet", "--store"])
        .arg(store);

    if let Ok(tool) = ecdysis_testkit::python_tool() {
        c.env("ECDYSIS_COMPONENTIZE_PY", tool);
    }
    c
}

#[test]
fn a_python_harness_trains_refusing_a_reaching_edit_then_exports_the_accepted_one() {
    if !ecdysis_testkit::python_guests_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (store, state, out) = (
        tmp.path().join("store"),
        tmp.path().join("state"),
        tmp.path().join("train"),
    );
    std::fs::create_dir_all(&state).unwrap();
    let coder = tmp.path().join("coder.py");
    std::fs::write(&coder, CODER).unwrap();
    let command = format!("/usr/bin/python3 {} {}", coder.display(), state.display());
    let m = support::run_measured(host(&store).args([
        "train",
        "--source",
        "harness-template-py",
        "--domain",
        "tau2/retail",
        "--agent-model",
        "sim:mixed",
        "--method",
        "ecdysis-nofdcr",
        "--rounds",
        "2",
        "--plateau",
        "5",
        "--test-split",
        "none",
        "--tasks",
        FIVE_TASKS,
        "--coder-command",
        &command,
        "--cargo-target-dir",
        &shared_target(),
        "--coder-ro",
        &coder.to_string_lossy(),
        "--coder-rw",
        &state.to_string_lossy(),
        "--out",
        &out.to_string_lossy(),
    ]));
    assert!(m.status.success(), "{}", m.stderr);
    let summary: Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let rounds = summary["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2, "{summary}");
    let refused = rounds[0]["decision"].as_str().unwrap();
    assert!(
        refused.contains("rules.py")
            && refused.contains("`open`")
            && rounds[0]["accepted"] == false,
        "{refused}"
    );
    assert_eq!(rounds[1]["accepted"], true, "{}", rounds[1]);
    let incumbent = summary["incumbent"].as_str().expect("an incumbent hash");

    // The accepted candidate exports as a component the host checks.
    let export = tmp.path().join("export");
    let e = host(&store)
        .args(["export", incumbent, "--out"])
        .arg(&export)
        .output()
        .unwrap();
    assert!(e.status.success(), "{}", String::from_utf8_lossy(&e.stderr));
    let c = host(&store)
        .arg("check")
        .arg(export.join("harness.wasm"))
        .output()
        .unwrap();
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stdout));
}

/// The built-in editor, with a scripted coder model, edits a Python
/// harness: it is told it edits Python modules, its `FILE: tables.py` block
/// applies, the candidate is built with componentize-py, gated and kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_in_editor_edits_a_python_harness() {
    use ecdysis_testkit::mock::{MockReply, MockServer};
    if !ecdysis_testkit::python_guests_available() {
        return;
    }
    let anchor = r#"    ("retail", "get_product", "get_product_details"),"#;
    let added = [
        ("get_order_status", "get_order_details"),
        ("get_product_info", "get_product_details"),
        ("modify_order_items", "modify_pending_order_items"),
        ("exchange_items", "exchange_delivered_order_items"),
        ("return_items", "return_delivered_order_items"),
        ("find_user_by_email", "find_user_id_by_email"),
    ]
    .iter()
    .map(|(a, t)| format!("\n    (\"retail\", \"{a}\", \"{t}\"),"))
    .collect::<String>();
    let block = format!(
        "FILE: tables.py\n<<<<<<< SEARCH\n{anchor}\n=======\n{anchor}{added}\n>>>>>>> REPLACE\n"
    );
    let server = MockServer::start().await.unwrap();
    server.set_handler(move |_| MockReply::text(&format!("Adding the aliases.\n{block}")));
    let tmp = tempfile::tempdir().unwrap();
    let (store, out) = (tmp.path().join("store"), tmp.path().join("train"));
    let mut cmd = host(&store);
    cmd.args([
        "train",
        "--source",
        "harness-template-py",
        "--domain",
        "tau2/retail",
        "--agent-model",
        "sim:mixed",
        "--method",
        "ecdysis-nofdcr",
        "--rounds",
        "1",
        "--test-split",
        "none",
        "--tasks",
        FIVE_TASKS,
        "--cache",
        "off",
        "--cargo-target-dir",
        &shared_target(),
        "--coder-model",
        "m-coder",
        "--roles-base-url",
        &server.base_url(),
        "--roles-api-key-env",
        "",
        "--out",
        &out.to_string_lossy(),
    ]);
    let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let chats: Vec<Value> = server
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .filter_map(|r| r.json())
        .collect();
    assert_eq!(chats.len(), 1, "one editor call");
    let text = chats[0].to_string();
    assert!(text.contains("careful Python engineer"), "{text}");
    assert!(
        text.contains("FILE: path/to/module.py") && !text.contains("src/lib.rs"),
        "{text}"
    );
    assert!(
        text.contains("### tables.py\\n```python"),
        "the modules are quoted: {text}"
    );
    let summary: Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let round = &summary["rounds"][0];
    assert_eq!(round["accepted"], true, "{round}");
}

/// A stand-in for componentize-py that counts its runs: it writes an empty
/// component with the run's number in a custom section, so that, like the
/// real tool, each run gives other bytes for the same source.
const COUNTING_TOOL: &str = r#"#!/usr/bin/python3
import pathlib, sys
out = pathlib.Path(sys.argv[sys.argv.index("-o") + 1])
runs = pathlib.Path(__file__).with_name("runs")
n = int(runs.read_text()) + 1 if runs.exists() else 1
runs.write_text(str(n))
name, payload = b"stand-in", f"run {n}".encode()
body = bytes([len(name)]) + name + payload
out.write_bytes(b"\0asm\x0d\x00\x01\x00" + b"\x00" + bytes([len(body)]) + body)
"#;

/// The kept builds' logic, with a stand-in tool whose runs are counted
/// (the real tool's builds are the training tests' above).
#[test]
fn the_same_python_source_builds_to_one_component_and_the_tool_runs_once() {
    use ecdysis_sandbox::store::build_python::python_builds_dir;
    use ecdysis_sandbox::store::{BuildOptions, ComponentStore};
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let tool_dir = tmp.path().join("tool/bin");
    std::fs::create_dir_all(&tool_dir).unwrap();
    let tool = tool_dir.join("componentize-py");
    std::fs::write(&tool, COUNTING_TOOL).unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let runs = || {
        std::fs::read_to_string(tool_dir.join("runs"))
            .map_or(0, |n| n.trim().parse::<u32>().unwrap())
    };
    let target = tmp.path().join("target");
    let store = ComponentStore::open(tmp.path().join("store"));
    let opts = BuildOptions {
        target_dir: Some(target.clone()),
        quiet: true,
        python_tool: Some(tool.clone()),
        ..BuildOptions::default()
    };
    let template = support::repo_root().join("harness-template-py");
    let copy = |name: &str| {
        let dir = tmp.path().join(name);
        ecdysis_sys::fsutil::copy_crate(&template, &dir).unwrap();
        dir
    };
    let (a, b) = (copy("a"), copy("b"));
    let first = store.build(&a, &opts).unwrap();
    assert!(!first.cargo_fresh, "the first build runs the tool");
    assert_eq!(runs(), 1);
    // The same source elsewhere: the component built from it, not a new
    // snapshot (the tool's output differs from run to run).
    let again = store.build(&b, &opts).unwrap();
    assert!(again.cargo_fresh, "the same source is not built again");
    assert_eq!(again.manifest.hash, first.manifest.hash);
    assert_eq!(runs(), 1, "the tool ran again for the same source");
    // An edit is a new source: built, and kept beside the first.
    let hooks = b.join("tables.py");
    let text = std::fs::read_to_string(&hooks).unwrap();
    std::fs::write(&hooks, format!("{text}\n# reviewed\n")).unwrap();
    let edited = store.build(&b, &opts).unwrap();
    assert!(!edited.cargo_fresh);
    assert_ne!(edited.manifest.hash, first.manifest.hash);
    assert_eq!(runs(), 2);
    // Kept outside the output directory a jailed build may write.
    let kept = python_builds_dir(&target);
    assert!(!kept.starts_with(target.join("python")));
    let entries = std::fs::read_dir(&kept).unwrap().count();
    assert_eq!(entries, 2, "one build per source");
    // Another tool (here: the same program, changed) is another build.
    std::fs::write(&tool, format!("{COUNTING_TOOL}# changed\n")).unwrap();
    assert!(!store.build(&a, &opts).unwrap().cargo_fresh);
    assert_eq!(runs(), 3, "a changed tool reused a build of the old one");
    // A target inside the source (which whoever edits it may write) keeps
    // nothing: the tool runs, and will run again next time.
    let inside = BuildOptions {
        target_dir: Some(a.join("target")),
        ..opts.clone()
    };
    assert!(!store.build(&a, &inside).unwrap().cargo_fresh);
    assert!(!store.build(&a, &inside).unwrap().cargo_fresh);
    assert_eq!(runs(), 5);
    assert!(!python_builds_dir(&a.join("target")).exists());
}

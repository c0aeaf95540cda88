//! The CLI as a user drives it: build, inspect, check, run, --help.

mod support;

use std::process::{Command, Output};

fn host(store: &std::path::Path, args: &[&str]) -> Output {
    Command::new(support::host_bin())
        .current_dir(support::repo_root())
        .arg("--store")
        .arg(store)
        .args(args)
        .output()
        .expect("runs ecdysis-host")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn build_inspect_check_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let out = host(&store, &["--quiet", "build", "harness-template"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let hash = text(&out.stdout).trim().to_string();
    assert_eq!(hash.len(), 64, "build prints the hash: {hash}");

    let out = host(&store, &["inspect", &hash[..10]]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains(&hash), "{shown}");
    assert!(shown.contains("ecdysis:harness/hooks@0.1.0"), "{shown}");
    assert!(shown.contains("links      ok"), "{shown}");

    let out = host(&store, &["inspect", "--json", &hash]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("inspect --json is JSON");
    assert_eq!(v["manifest"]["hash"], hash.as_str());
    assert_eq!(v["world_supported"], true);
    assert_eq!(v["manifest"]["world"], "ecdysis:harness/harness@0.1.0");
    assert!(v["link_error"].is_null(), "{v}");

    let out = host(&store, &["check", &hash]);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let table = text(&out.stdout);
    for hook in ["contract", "skills", "realize", "regulate"] {
        assert!(table.contains(hook), "{table}");
    }
    assert!(table.contains("all hooks answered within the contract"));
}

#[test]
fn check_fails_loudly_on_a_trapping_harness() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("panic.wasm");
    std::fs::write(&wasm, support::guest("guests/hostile", Some("panic"))).unwrap();
    let out = host(
        &dir.path().join("store"),
        &["check", wasm.to_str().unwrap()],
    );
    assert!(!out.status.success());
    let table = text(&out.stdout);
    assert!(table.contains("FAIL"), "{table}");
    assert!(
        table.contains("hostile guest panicked on purpose"),
        "{table}"
    );
}

#[test]
fn errors_name_the_offending_input() {
    let dir = tempfile::tempdir().unwrap();
    let out = host(
        &dir.path().join("store"),
        &["check", "missing-harness.wasm"],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("missing-harness.wasm"),
        "{}",
        text(&out.stderr)
    );

    let out_dir = dir.path().join("r");
    let out = host(
        &dir.path().join("store"),
        &[
            "run",
            "--harness",
            "x.wasm",
            "--tasks",
            "5",
            "--out",
            out_dir.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("x.wasm"),
        "{}",
        text(&out.stderr)
    );

    let out = host(
        &dir.path().join("store"),
        &["run", "--harness", "none", "--tasks", "no-such-task"],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no-such-task"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn help_explains_every_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let out = host(dir.path(), &["--help"]);
    let help = text(&out.stdout);
    for cmd in [
        "build",
        "inspect",
        "check",
        "bench",
        "run",
        "show",
        "env",
        "tasks",
        "train",
        "experiment",
    ] {
        assert!(help.contains(cmd), "{help}");
    }
    let out = host(dir.path(), &["check", "--help"]);
    assert!(text(&out.stdout).contains("--fuel"));
}

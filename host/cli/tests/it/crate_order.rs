//! The workspace's crate order, as CI checks it (`scripts/check-layers.py`,
//! run by `.ci/run`): the tree passes, and a dependency that points to a
//! crate listed later fails, naming both crates.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

fn check(metadata: &Path) -> Output {
    Command::new("python3")
        .current_dir(support::repo_root())
        .arg("scripts/check-layers.py")
        .arg(metadata)
        .output()
        .expect("python3 runs")
}

fn with_dependency(
    meta: &serde_json::Value,
    from: &str,
    to: &str,
    kind: &str,
) -> serde_json::Value {
    let mut meta = meta.clone();
    let package = meta["packages"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|p| p["name"] == from)
        .expect("package");
    let kind = if kind == "normal" {
        serde_json::Value::Null
    } else {
        kind.into()
    };
    package["dependencies"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({ "name": to, "kind": kind }));
    meta
}

#[test]
fn a_crate_using_one_listed_after_it_fails_the_check() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let o = Command::new(cargo)
        .current_dir(support::repo_root())
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("metadata.json");

    std::fs::write(&file, serde_json::to_vec(&meta).unwrap()).unwrap();
    let o = check(&file);
    assert!(
        o.status.success(),
        "the tree breaks the crate order:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // A real edge reversed (ecdysis-tau2 uses ecdysis-pyemu), and edges of
    // each other kind pointing up.
    for (from, to, kind) in [
        ("ecdysis-pyemu", "ecdysis-env", "normal"),
        ("ecdysis-sys", "ecdysis-host", "dev"),
        ("ecdysis-sandbox", "ecdysis-runner", "build"),
    ] {
        let bad = with_dependency(&meta, from, to, kind);
        std::fs::write(&file, serde_json::to_vec(&bad).unwrap()).unwrap();
        let o = check(&file);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{from} -> {to}: {stderr}");
        assert!(
            stderr.contains(&format!("{from} ("))
                && stderr.contains(&format!("{kind} dependency on {to} (")),
            "{from} -> {to}: {stderr}"
        );
    }

    // Benchmarks know nothing of each other: an edge from one to another
    // fails even where it points down the list, and the good tree still
    // passes right after.
    let bad = with_dependency(&meta, "ecdysis-dbbench", "ecdysis-tau2", "normal");
    std::fs::write(&file, serde_json::to_vec(&bad).unwrap()).unwrap();
    let o = check(&file);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("ecdysis-dbbench (host/dbbench) has a normal dependency on ecdysis-tau2")
            && stderr.contains("siblings know nothing of each other"),
        "{stderr}"
    );
    std::fs::write(&file, serde_json::to_vec(&meta).unwrap()).unwrap();
    assert!(check(&file).status.success());
}

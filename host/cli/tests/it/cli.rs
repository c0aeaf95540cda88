//! The CLI as a user drives it: build, inspect, check, run, --help.

use crate::support;

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

    let out = host(&store, &["inspect", &hash[..12]]);
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
    // The subcommand list: lines "  <name>  <one-line description>" under
    // "Commands:". Names are matched exactly (a substring such as "run"
    // also occurs in other help text).
    let listed: Vec<(String, String)> = help
        .split("Commands:")
        .nth(1)
        .expect("a Commands: section")
        .split("\n\n")
        .next()
        .unwrap()
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let (name, about) = l.split_once(char::is_whitespace)?;
            Some((name.to_string(), about.trim().to_string()))
        })
        .collect();
    let names: Vec<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
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
        "report",
    ] {
        assert!(names.contains(&cmd), "`{cmd}` is not listed: {names:?}");
        let about = &listed.iter().find(|(n, _)| n == cmd).unwrap().1;
        assert!(
            about.len() > 15,
            "`{cmd}` has no real description: {about:?}"
        );
        // And each explains itself when asked.
        let sub = host(dir.path(), &[cmd, "--help"]);
        assert!(sub.status.success(), "{cmd} --help failed");
        assert!(text(&sub.stdout).contains("Usage:"), "{cmd} --help");
    }
    let out = host(dir.path(), &["check", "--help"]);
    assert!(text(&out.stdout).contains("--fuel"));
}

/// `inspect NAME` run in `cwd`, measured; `tty` runs it under `script` so
/// its stdin is a terminal.
fn inspect_in(
    cwd: &std::path::Path,
    store: &std::path::Path,
    name: &str,
    tty: bool,
) -> support::Measured {
    let mut cmd = if tty {
        let mut c = Command::new("script");
        c.args(["-qec"])
            .arg(format!(
                "{} --store {} inspect {name}",
                support::host_bin().display(),
                store.display()
            ))
            .arg("/dev/null");
        c
    } else {
        let mut c = Command::new(support::host_bin());
        c.arg("--store").arg(store).args(["inspect", name]);
        c
    };
    cmd.current_dir(cwd);
    let m = support::run_measured(&mut cmd);
    assert!(m.wall < std::time::Duration::from_secs(60), "{:?}", m.wall);
    assert!(m.peak_rss_mib() < 256.0, "{} MiB", m.peak_rss_mib());
    m
}

#[test]
fn names_need_a_crate_or_twelve_hex_digits_except_at_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let bytes = support::guest("guests/direct", None);
    let hash = ecdysis_sandbox::store::ComponentStore::open(&store)
        .put(&bytes, Default::default())
        .unwrap()
        .hash
        .to_string();

    // A directory without a Cargo.toml is never built, whatever its name:
    // named like a stored hash it is ambiguous, otherwise not a crate.
    std::fs::create_dir_all(work.join(&hash[..12])).unwrap();
    let m = inspect_in(&work, &store, &hash[..12], false);
    assert!(!m.status.success());
    assert!(
        m.stderr.contains(&format!("`{}` names both", &hash[..12]))
            && m.stderr.contains(&format!("./{}", &hash[..12])),
        "{}",
        m.stderr
    );
    let m = inspect_in(&work, &store, &format!("./{}", &hash[..12]), false);
    assert!(!m.status.success());
    assert!(
        m.stderr.contains("is a directory without a Cargo.toml"),
        "{}",
        m.stderr
    );
    std::fs::create_dir_all(work.join("abcdef123456")).unwrap();
    let m = inspect_in(&work, &store, "abcdef123456", false);
    assert!(
        m.stderr
            .contains("abcdef123456 is a directory without a Cargo.toml"),
        "{}",
        m.stderr
    );

    // A file named like a stored hash prefix is ambiguous too; `./` picks
    // the file (positive control).
    let file = &hash[..14];
    std::fs::write(work.join(file), &bytes).unwrap();
    let m = inspect_in(&work, &store, file, false);
    assert!(m.stderr.contains("names both"), "{}", m.stderr);
    let m = inspect_in(&work, &store, &format!("./{file}"), false);
    assert!(m.status.success(), "{}", m.stderr);
    assert!(m.stdout.contains(&hash));

    // Short prefixes: 8 digits are refused in a script, accepted at a
    // terminal; 12 digits always resolve.
    let m = inspect_in(dir.path(), &store, &hash[..8], false);
    assert!(!m.status.success());
    assert!(
        m.stderr.contains(&format!(
            "hash prefix `{}` is too short: give at least 12",
            &hash[..8]
        )),
        "{}",
        m.stderr
    );
    let m = inspect_in(dir.path(), &store, &hash[..8], true);
    assert!(m.status.success(), "{}{}", m.stdout, m.stderr);
    assert!(m.stdout.contains(&hash), "{}", m.stdout);
    let m = inspect_in(dir.path(), &store, &hash[..12], false);
    assert!(m.status.success(), "{}", m.stderr);
    assert!(m.stdout.contains(&hash));
}

/// Each command's `--help` offers only the flags it uses: the data, runtime
/// and component flags belong to the commands that evaluate, never to the
/// service's bookkeeping or to `report`.
#[test]
fn help_lists_only_the_flags_a_command_uses() {
    let store = tempfile::tempdir().unwrap();
    let help = |cmd: &[&str]| {
        let mut args = cmd.to_vec();
        args.push("--help");
        let o = host(store.path(), &args);
        assert!(o.status.success(), "{cmd:?}: {}", text(&o.stderr));
        text(&o.stdout)
    };
    // `--data ` with its space: `--database` is the service's own flag.
    let offers = |page: &str, flag: &str| page.contains(&format!("{flag} "));
    let episode_flags = ["--threads", "--data", "--mysql-url", "--sql-mode"];
    for cmd in [
        &["audit", "verify"][..],
        &["tenant", "list"],
        &["report"],
        &["show"],
        &["build"],
        &["inspect"],
    ] {
        let page = help(cmd);
        for flag in episode_flags {
            assert!(!offers(&page, flag), "{cmd:?} offers {flag}:\n{page}");
        }
    }
    for cmd in [
        &["audit", "verify"][..],
        &["report"],
        &["tasks"],
        &["serve"],
    ] {
        let page = help(cmd);
        assert!(!offers(&page, "--max-component-mib"), "{cmd:?}:\n{page}");
    }
    // The positive control: the commands that evaluate offer all of them,
    // and they parse after the subcommand.
    for cmd in [
        &["run"][..],
        &["train"],
        &["experiment"],
        &["bench"],
        &["vectors"],
    ] {
        let page = help(cmd);
        for flag in episode_flags.iter().chain(&["--max-component-mib"]) {
            assert!(offers(&page, flag), "{cmd:?} lacks {flag}");
        }
    }
    for cmd in [&["env", "call"][..], &["tasks"], &["serve"], &["worker"]] {
        assert!(offers(&help(cmd), "--data"), "{cmd:?} lacks --data");
    }
    let o = host(
        store.path(),
        &[
            "tasks",
            "--domain",
            "agentbench/dbbench",
            "--sql-mode",
            "lenient",
            "--split",
            "test",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!text(&o.stdout).is_empty());
    // A flag given to a command that does not take it is a usage error
    // naming the flag, not silently ignored.
    let o = host(store.path(), &["report", "--threads", "2", "x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("--threads"), "{}", text(&o.stderr));
}

/// `env os-dependence` prints one JSON line per task of the split with its
/// class and a summary; the group count of `std-003` depends on the system.
/// An unknown split is refused by name.
#[test]
fn env_os_dependence_classifies_the_tasks_of_a_split() {
    let store = tempfile::tempdir().unwrap();
    let o = host(
        store.path(),
        &["env", "os-dependence", "--split", "std-003"],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let lines: Vec<serde_json::Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 6, "{lines:?}");
    let class = |id: &str| {
        lines
            .iter()
            .find(|l| l["task_id"] == id)
            .map(|l| l["class"].as_str().unwrap_or_default().to_string())
    };
    assert_eq!(
        class("std-003-ac-00001").as_deref(),
        Some("depends-on-system")
    );
    assert_eq!(class("std-003-ac-00002").as_deref(), Some("stable"));
    assert!(
        text(&o.stderr).contains("depends-on-system: 1: std-003-ac-00001"),
        "{}",
        text(&o.stderr)
    );
    let o = host(
        store.path(),
        &["env", "os-dependence", "--split", "std-009"],
    );
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("std-009"), "{}", text(&o.stderr));
}

/// `bench --runner --record` writes the measured multiple of the waiting
/// floor into a baseline file; `--check` passes under a generous recorded
/// ratio and fails (exit 1, a REGRESSION line) under a tiny one; an entry
/// for another harness or a damaged file is an error naming it, before
/// anything is measured.
#[test]
fn bench_runner_checks_the_host_work_against_a_recorded_baseline() {
    let store = tempfile::tempdir().unwrap();
    let baseline = store.path().join("baseline.json");
    let path = baseline.to_str().unwrap();
    let bench = |extra: &[&str]| {
        let mut args = vec![
            "bench",
            "--runner",
            "--harness",
            "none",
            "--trials",
            "1",
            "--latency-ms",
            "5",
        ];
        args.extend_from_slice(extra);
        host(store.path(), &args)
    };
    let o = bench(&["--repeat", "2", "--record", path, "--record-commit", "test"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.contains("run 1/2:") && out.contains("run 2/2:"),
        "{out}"
    );
    assert!(
        out.contains("the waiting floor (median of 2 run(s)"),
        "{out}"
    );
    let mut file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&baseline).unwrap()).unwrap();
    let entry = &file["entries"][0];
    assert_eq!(entry["harness"], "none");
    assert_eq!(entry["commit"], "test");
    assert_eq!(entry["options"]["latency_ms"], 5);
    assert!(
        entry["outside_hooks_over_floor"].as_f64().unwrap() > 0.0,
        "{entry}"
    );

    let mut with_ratio = |ratio: f64| {
        file["entries"][0]["outside_hooks_over_floor"] = ratio.into();
        std::fs::write(&baseline, file.to_string()).unwrap();
    };
    with_ratio(1e9);
    let o = bench(&["--check", path]);
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(
        text(&o.stdout).contains("regression check:"),
        "{}",
        text(&o.stdout)
    );
    with_ratio(1e-9);
    let o = bench(&["--check", path, "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["check"]["passed"], false, "{report}");
    assert_eq!(report["runs"].as_array().unwrap().len(), 1);

    // Another harness has no entry: named, nothing measured.
    let o = host(
        store.path(),
        &[
            "bench",
            "--runner",
            "--harness",
            "guests/direct",
            "--check",
            path,
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(
        err.contains("no entry for harness guests/direct") && err.contains("none ("),
        "{err}"
    );
    std::fs::write(&baseline, "{ damaged").unwrap();
    let o = bench(&["--check", path]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("baseline.json is not valid"),
        "{}",
        text(&o.stderr)
    );
}

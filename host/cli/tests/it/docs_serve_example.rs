//! The shipped `examples/serve.toml` works as the service guide uses it:
//! its values are the built-in defaults it says they are, its commented-out
//! settings still parse, every field of the configuration appears in it,
//! and the guide's command starts the service on it, which then answers a
//! health request; the guide's client steps (a tenant, an upload, an
//! evaluation, its events and summary) run on it as printed and print what
//! the guide shows.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ecdysis_serve::ServeConfig;
use ecdysis_serve::config::ModelAlias;

use crate::support::{self, repo_root};

const EXAMPLE: &str = "examples/serve.toml";
const GUIDE: &str = "docs/src/guides/service.md";

fn example_text() -> String {
    std::fs::read_to_string(repo_root().join(EXAMPLE)).expect("examples/serve.toml")
}

/// The example with every commented-out setting (`# key = value`, `#
/// [table]`) turned on; prose comments stay comments.
fn uncommented(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let setting = line
            .strip_prefix('#')
            .map(str::trim_start)
            .filter(|rest| is_setting(rest));
        out.push_str(setting.unwrap_or(line));
        out.push('\n');
    }
    out
}

/// A TOML table header or `key = value` line.
fn is_setting(line: &str) -> bool {
    if let Some(header) = line.strip_prefix('[') {
        return header.trim_end().ends_with(']') && !header.contains(' ');
    }
    line.split_once('=').is_some_and(|(key, value)| {
        let key = key.trim();
        !key.is_empty()
            && !value.trim().is_empty()
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The keys the example names, set or commented out.
fn named_keys(text: &str) -> BTreeSet<String> {
    uncommented(text)
        .lines()
        .filter(|l| !l.starts_with('[') && is_setting(l))
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim().to_string()))
        .collect()
}

/// Every field name of the configuration, nested tables' too (a model
/// alias's from its own type: the default aliases are all `sim:`).
fn field_names() -> BTreeSet<String> {
    fn walk(value: &serde_json::Value, out: &mut BTreeSet<String>, skip: &str) {
        if let serde_json::Value::Object(map) = value {
            for (k, v) in map {
                if k == skip {
                    continue;
                }
                if !v.is_object() {
                    out.insert(k.clone());
                }
                walk(v, out, skip);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(
        &serde_json::to_value(ServeConfig::default()).unwrap(),
        &mut out,
        "models",
    );
    walk(
        &serde_json::to_value(ModelAlias::default()).unwrap(),
        &mut out,
        "",
    );
    out
}

#[test]
fn the_example_serve_toml_is_the_defaults_and_names_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let example = ServeConfig::load(Some(repo_root().join(EXAMPLE).as_path()))
        .unwrap_or_else(|e| panic!("{EXAMPLE}: {e}"));
    assert_eq!(
        serde_json::to_value(&example).unwrap(),
        serde_json::to_value(ServeConfig::default()).unwrap(),
        "{EXAMPLE} says its values are the built-in defaults (host/serve/src/config.rs): make them so"
    );
    // deny_unknown_fields: a commented-out setting that was renamed or
    // removed fails here.
    let all_on = dir.path().join("all-on.toml");
    std::fs::write(&all_on, uncommented(&example_text())).unwrap();
    let on = ServeConfig::load(Some(all_on.as_path()))
        .unwrap_or_else(|e| panic!("{EXAMPLE} with its commented-out settings on: {e}"));
    assert!(on.database.is_some() && on.models.contains_key("gpt"));
    let missing: Vec<String> = field_names()
        .difference(&named_keys(&example_text()))
        .cloned()
        .collect();
    assert!(
        missing.is_empty(),
        "{EXAMPLE} does not name these fields of serve.toml: {missing:?}"
    );
}

#[test]
fn a_commented_out_setting_is_told_from_prose() {
    let text = "# a comment = prose here\n# key = 1\n# [models.x]\n# [not a table]\nkept = 2\n";
    assert_eq!(
        uncommented(text),
        "# a comment = prose here\nkey = 1\n[models.x]\n# [not a table]\nkept = 2\n"
    );
    assert_eq!(
        named_keys(text),
        BTreeSet::from(["key".to_string(), "kept".to_string()])
    );
}

/// The guide's `serve` command (its words, the comment cut) and the
/// address the guide says it prints.
fn guide_command() -> (Vec<String>, String) {
    let guide = std::fs::read_to_string(repo_root().join(GUIDE)).unwrap();
    let line = guide
        .lines()
        .find(|l| l.starts_with("ecdysis-host serve "))
        .unwrap_or_else(|| panic!("{GUIDE} shows no `ecdysis-host serve` command"));
    let (command, comment) = line.split_once('#').unwrap_or((line, ""));
    let printed = comment
        .split_once("listening on ")
        .map(|(_, rest)| rest.trim().trim_end_matches('"').to_string())
        .unwrap_or_else(|| panic!("{GUIDE}: `{line}` does not say what it prints"));
    let words = command.split_whitespace().map(String::from).collect();
    (words, printed)
}

/// The command with the binary under test, run in `cwd` with only the τ²
/// data of this checkout from the environment.
fn host(cwd: &Path, args: &[String]) -> Command {
    let mut cmd = Command::new(support::host_bin());
    cmd.args(args).current_dir(cwd).stdin(Stdio::null());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("ECDYSIS_") {
            cmd.env_remove(name);
        }
    }
    cmd.env("ECDYSIS_DATA", repo_root().join(".ecdysis/data"));
    cmd
}

/// A directory laid out as the guide assumes (the example at its path),
/// whose state the test owns.
fn checkout_like(config: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().join(config);
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(repo_root().join(config), &to)
        .unwrap_or_else(|e| panic!("the guide's --config {config}: {e}"));
    dir
}

#[test]
fn the_guides_serve_command_starts_on_the_example_and_answers_health() {
    let (words, printed) = guide_command();
    assert_eq!(words[..2], ["ecdysis-host", "serve"]);
    let config = words
        .iter()
        .position(|w| w == "--config")
        .and_then(|i| words.get(i + 1))
        .unwrap_or_else(|| panic!("{GUIDE}: `{}` names no --config", words.join(" ")));
    assert_eq!(config, EXAMPLE, "the guide starts from the shipped example");
    let dir = checkout_like(config);
    let args = &words[1..];

    // What it would listen on is what the guide says it prints, and what
    // the example names checks out (the domains open, the aliases work).
    let mut check = args.to_vec();
    check.push("--check-config".into());
    let out = host(dir.path(), &check).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "serve --check-config: {stderr}");
    let resolved: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        format!("http://{}", resolved["listen"].as_str().unwrap()),
        printed
    );
    assert!(stderr.contains("ok: domain tau2/retail"), "{stderr}");

    let (mut child, addr, log) = start(dir.path(), args);
    let answer = get(&addr, "/v1/health");
    let status = stop(&mut child, &log);
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "GET /v1/health: {answer}\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(status.success(), "{status}");
    assert!(
        dir.path().join(".ecdysis/serve/serve.db").is_file(),
        "the example's state_dir is relative to where serve runs"
    );
}

/// The guide's `serve` command (`args`, the binary's name left out) as
/// printed, but on a free port: the printed one may be taken by a service
/// of the developer's or another test run. The process, the address it
/// printed and its log.
fn start(dir: &Path, args: &[String]) -> (Child, String, PathBuf) {
    let mut run = args.to_vec();
    run.extend(["--listen".into(), "127.0.0.1:0".into()]);
    let log = dir.join("serve.log");
    let mut child = host(dir, &run)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    // Read on, so a later line cannot fail on a closed pipe.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let Some(addr) = first.trim().strip_prefix("listening on http://") else {
        let _ = child.kill();
        panic!(
            "serve printed {first:?}: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    };
    (child, addr.to_string(), log)
}

/// SIGTERM, and its exit status: a clean stop is part of what the guide's
/// operator gets.
fn stop(child: &mut Child, log: &Path) -> std::process::ExitStatus {
    // SAFETY: kill on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!(
                "serve did not stop within 30 s of SIGTERM: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The guide's shell block of the client's steps (the one that adds the
/// tenant) and the text block after it, which shows what they print.
fn guide_steps() -> (String, String) {
    let guide = std::fs::read_to_string(repo_root().join(GUIDE)).unwrap();
    let fenced = |from: usize, opening: &str| -> (usize, String) {
        let at = from
            + guide[from..]
                .find(opening)
                .unwrap_or_else(|| panic!("{GUIDE} has no block opening `{opening}`"));
        let body = &guide[at + opening.len()..];
        let end = body.find("```").expect("a closed block");
        (at, body[..end].to_string())
    };
    let (at, steps) = fenced(0, "```sh\nTOKEN=$(");
    let (_, shown) = fenced(at, "```text\n");
    (format!("TOKEN=$({steps}"), shown)
}

/// The client's steps of the guide, run as printed by bash in a directory
/// laid out like the repository, against the guide's `serve` command on
/// the example (on a free port, which the steps' `URL` is changed to):
/// they print what the guide shows.
#[test]
fn the_guides_steps_run_as_printed_against_the_example() {
    let (words, printed) = guide_command();
    let (steps, shown) = guide_steps();
    assert!(
        steps.contains(&format!("URL={printed}\n")),
        "{GUIDE}: the steps talk to the address serve prints, {printed}"
    );
    let dir = checkout_like(EXAMPLE);
    // The steps export the starting harness, as from the repository's root.
    for part in ["harness-template", "wit"] {
        ecdysis_sys::fsutil::copy_crate(&repo_root().join(part), &dir.path().join(part)).unwrap();
    }
    let (mut child, addr, log) = start(dir.path(), &words[1..]);

    let script = steps.replace(&format!("URL={printed}\n"), &format!("URL=http://{addr}\n"));
    let mut path = vec![support::host_bin().parent().unwrap().to_path_buf()];
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    // The export builds where the other tests' harness builds go.
    let target = std::env::var_os("ECDYSIS_CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/evolve-candidates"));
    let mut bash = Command::new("bash");
    bash.args(["-euo", "pipefail", "-c", &script])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .env("PATH", std::env::join_paths(path).unwrap());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("ECDYSIS_") {
            bash.env_remove(name);
        }
    }
    bash.env("ECDYSIS_DATA", repo_root().join(".ecdysis/data"))
        .env("ECDYSIS_CARGO_TARGET_DIR", target);
    let out = bash.output().unwrap();
    let status = stop(&mut child, &log);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the steps failed ({}): {stderr}\nserve's log: {}",
        out.status,
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), shown, "{stderr}");
    assert!(status.success(), "{status}");
}

/// A plain HTTP/1.1 GET: the whole answer, head and body.
fn get(addr: &str, path: &str) -> String {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

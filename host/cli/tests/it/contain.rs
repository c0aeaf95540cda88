//! Untrusted code stays contained (issue 12, the build and coder half): a
//! coder cannot put a file or a variable of the host into a candidate, a
//! candidate's build runs jailed with limits, the coder runs jailed and
//! leaves nothing running, a candidate that does not link is a rejected
//! candidate. Every hostile case asserts its typed error, a time bound and
//! a memory bound (peak RSS of a child process), and is followed by a
//! positive control in the same process.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use ecdysis_evolve::code::{Coder, CoderNetwork, CoderTask, ExternalCoder, ExternalConfig};
use ecdysis_evolve::diagnose::change_spec::ChangeSpec;
use ecdysis_sandbox::store::{
    BuildOptions, BuildProfile, ComponentStore, Containment, StoreError, Trust, source_tree_hash,
};
use ecdysis_sys::jail::JailLimits;
use serde_json::Value;

/// The variable a hostile candidate wants to read (set in the host's
/// environment by these tests).
const KEY_VAR: &str = "ECDYSIS_TEST_API_KEY";
const KEY_VALUE: &str = "ECDYSIS-KEY-VALUE-5be0c1d97a";
/// The content of the files outside the crate a hostile candidate names.
const SECRET: &str = "ECDYSIS-SECRET-CONTENT-e3a94f7c21";

const RULE_1: &str = "\"Call tools only with structured tool calls (the function-calling interface). Never write a tool call as JSON or code in your message text.\"";
const RULE_2: &str = "\"Use the exact tool names from the tool list; there are no other tools.\"";
const RULE_5: &str = "\"If a tool call fails, read the error and change the call; do not repeat an identical call that failed.\"";
const RULE_6: &str = "\"Before changing an order, look up its current status and items with get_order_details first.\"";
const RULE_7: &str = "\"Before changing a reservation, look up its current details with get_reservation_details first (and the user's profile with get_user_details for payment methods and membership).\"";

const NEW_RULE: &str = "\"Use only the tools listed.\"";

const BLANK_PREFIXES: &str = "pub static ID_PREFIXES: &[IdPrefix] = &[];";
const FILLED_PREFIXES: &str = "pub static ID_PREFIXES: &[IdPrefix] = &[IdPrefix { domain: \"retail\", arg: \"order_id\", prefix: \"#\" }];";

/// Files outside any crate that hostile candidates name, each holding the
/// secret in the form its attack needs.
struct Outside {
    dir: PathBuf,
}

impl Outside {
    fn new(root: &Path) -> Outside {
        let dir = root.join("outside");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("secret.txt"), SECRET).unwrap();
        std::fs::write(dir.join("secret_expr.rs"), format!("\"{SECRET}\"")).unwrap();
        std::fs::write(
            dir.join("leak_mod.rs"),
            format!("pub const TEXT: &str = \"{SECRET}\";\n"),
        )
        .unwrap();
        Outside { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }
}

fn stage(root: &Path, name: &str) -> PathBuf {
    support::stage_template(root, name)
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{} lacks {from}", path.display());
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

fn append(path: &Path, more: &str) {
    let mut text = std::fs::read_to_string(path).unwrap();
    text.push_str(more);
    std::fs::write(path, text).unwrap();
}

/// Plants one attack into a staging crate.
type Plant = fn(&Path, &Outside);

/// Plant every way of reading outside the crate into the staging crate at
/// `crate_dir`: each puts the secret (or the key) into a prompt rule, so a
/// successful attack carries it into the component and the agent's prompt.
fn plant_every_attack(crate_dir: &Path, outside: &Outside) {
    let tables = crate_dir.join("src/tables.rs");
    let lib = crate_dir.join("src/lib.rs");
    edit(
        &tables,
        RULE_2,
        &format!("include_str!(\"{}\")", outside.path("secret.txt")),
    );
    edit(&tables, RULE_1, &format!("env!(\"{KEY_VAR}\")"));
    edit(
        &tables,
        RULE_5,
        &format!("include!(\"{}\")", outside.path("secret_expr.rs")),
    );
    edit(&tables, RULE_6, "crate::leak_mod::TEXT");
    edit(&tables, RULE_7, "crate::leak_link::TEXT");
    append(
        &lib,
        &format!(
            "\n#[path = \"{}\"]\npub mod leak_mod;\npub mod leak_link;\n",
            outside.path("leak_mod.rs")
        ),
    );
    std::os::unix::fs::symlink(
        outside.dir.join("leak_mod.rs"),
        crate_dir.join("src/leak_link.rs"),
    )
    .unwrap();
}

// Peak RSS bounds: a child that builds only in the jail stays small (the
// jail's processes are bounded by its own limit and not counted); one that
// also builds the user's own crate unjailed counts that rustc too.

/// Candidate builds share the train tests' warm target directory.
fn target() -> PathBuf {
    support::repo_root().join("target/evolve-candidates")
}

/// Options of an untrusted build of a candidate edited from the starting
/// harness (whose own findings it may keep), made as training makes them:
/// the candidate profile, from a staging copy.
fn untrusted(containment: Containment) -> BuildOptions {
    let reference = support::repo_root().join("harness-template");
    BuildOptions {
        target_dir: Some(target()),
        quiet: true,
        trust: Trust::untrusted_from(&containment, &reference).unwrap(),
        profile: BuildProfile::Candidate,
        staged: true,
        ..BuildOptions::default()
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// Every file under `dir` (recursively) holding `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            out.extend(files_containing(&p, needle));
        } else if meta.is_file() && std::fs::read(&p).is_ok_and(|b| contains(&b, needle)) {
            out.push(p);
        }
    }
    out
}

// ---------------------------------------------------------------------------
// The build: the scan, the jail alone, the limits.

#[test]
fn outside_files_and_variables_never_reach_a_candidate_build() {
    if support::ran_bounded_in_child(
        module_path!(),
        "outside_files_and_variables_never_reach_a_candidate_build",
        &[(KEY_VAR, KEY_VALUE)],
        Duration::from_secs(420),
        768.0,
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let outside = Outside::new(tmp.path());
    let store = ComponentStore::open(tmp.path().join("store"));
    assert_eq!(std::env::var(KEY_VAR).as_deref(), Ok(KEY_VALUE));

    // The attack is real: the same source built as the user's own crate
    // (no scan, no jail) carries the file and the key into the component.
    let own = stage(tmp.path(), "own");
    plant_every_attack(&own, &outside);
    let built = store
        .build(
            &own,
            &BuildOptions {
                target_dir: Some(target()),
                quiet: true,
                profile: BuildProfile::Candidate,
                ..BuildOptions::default()
            },
        )
        .expect("an unjailed build of the attack succeeds");
    let bytes = store.read_component(&built.manifest.hash).unwrap();
    assert!(contains(&bytes, SECRET) && contains(&bytes, KEY_VALUE));

    // The scan refuses it before any compiler runs, naming each construct.
    let cand = stage(tmp.path(), "candidate");
    plant_every_attack(&cand, &outside);
    let err = store
        .build(&cand, &untrusted(Containment::default()))
        .unwrap_err();
    let StoreError::SourceRefused { refusal, .. } = &err else {
        panic!("expected SourceRefused, got {err}");
    };
    let constructs: Vec<&str> = refusal
        .findings
        .iter()
        .map(|f| f.construct.as_str())
        .collect();
    for want in ["include_str!", "env!", "include!", "#[path]", "symlink"] {
        assert!(constructs.contains(&want), "{want} not refused: {err}");
    }
    assert!(err.to_string().contains("src/tables.rs:"), "{err}");

    // With the scan off, the jail alone holds: the files are invisible and
    // the variable unset inside it, so each attack fails to build (one
    // build each: rustc stops at the first module it cannot load).
    let no_scan = Containment {
        scan: false,
        ..Containment::default()
    };
    let attacks: [(&str, Plant, String); 5] = [
        (
            "include_str",
            |c, o| {
                edit(
                    &c.join("src/tables.rs"),
                    RULE_2,
                    &format!("include_str!(\"{}\")", o.path("secret.txt")),
                )
            },
            "couldn't read".to_string(),
        ),
        (
            "env",
            |c, _| {
                edit(
                    &c.join("src/tables.rs"),
                    RULE_1,
                    &format!("env!(\"{KEY_VAR}\")"),
                )
            },
            format!("environment variable `{KEY_VAR}` not defined at compile time"),
        ),
        (
            "include",
            |c, o| {
                edit(
                    &c.join("src/tables.rs"),
                    RULE_5,
                    &format!("include!(\"{}\")", o.path("secret_expr.rs")),
                )
            },
            "couldn't read".to_string(),
        ),
        (
            "path",
            |c, o| {
                edit(&c.join("src/tables.rs"), RULE_6, "crate::leak_mod::TEXT");
                append(
                    &c.join("src/lib.rs"),
                    &format!(
                        "\n#[path = \"{}\"]\npub mod leak_mod;\n",
                        o.path("leak_mod.rs")
                    ),
                );
            },
            "couldn't read".to_string(),
        ),
        (
            "symlink",
            |c, o| {
                edit(&c.join("src/tables.rs"), RULE_7, "crate::leak_link::TEXT");
                append(&c.join("src/lib.rs"), "\npub mod leak_link;\n");
                std::os::unix::fs::symlink(o.dir.join("leak_mod.rs"), c.join("src/leak_link.rs"))
                    .unwrap();
            },
            "file not found for module `leak_link`".to_string(),
        ),
    ];
    for (name, plant, want) in &attacks {
        let cand = stage(tmp.path(), &format!("jail-only-{name}"));
        plant(&cand, &outside);
        let err = store.build(&cand, &untrusted(no_scan.clone())).unwrap_err();
        let StoreError::BuildFailed { stderr_tail, .. } = &err else {
            panic!("{name}: expected BuildFailed, got {err}");
        };
        assert!(
            stderr_tail.contains(want.as_str()),
            "{name}: {want:?} not in {stderr_tail}"
        );
        assert!(!stderr_tail.contains(SECRET) && !stderr_tail.contains(KEY_VALUE));
    }
    assert_eq!(store.list().unwrap(), vec![built.manifest.hash.clone()]);

    // Positive control, same process: a clean edit builds jailed.
    let clean = stage(tmp.path(), "clean");
    edit(&clean.join("src/tables.rs"), RULE_2, NEW_RULE);
    let ok = store
        .build(&clean, &untrusted(no_scan))
        .expect("a clean candidate builds in the jail");
    let bytes = store.read_component(&ok.manifest.hash).unwrap();
    assert!(!contains(&bytes, SECRET) && !contains(&bytes, KEY_VALUE));
}

#[test]
fn compile_time_bombs_hit_the_build_limits_then_a_clean_build_passes() {
    if support::ran_bounded_in_child(
        module_path!(),
        "compile_time_bombs_hit_the_build_limits_then_a_clean_build_passes",
        &[],
        Duration::from_secs(300),
        256.0,
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let store = ComponentStore::open(tmp.path().join("store"));
    let limited = Containment {
        limits: JailLimits {
            memory: 1 << 30,
            ..JailLimits::default()
        },
        ..Containment::default()
    };

    // Memory: a 1.5 GB static evaluated at compile time.
    let bomb = stage(tmp.path(), "memory");
    append(
        &bomb.join("src/tables.rs"),
        "\npub static BOMB: [u8; 1_500_000_000] = [7; 1_500_000_000];\n",
    );
    let started = std::time::Instant::now();
    let err = store.build(&bomb, &untrusted(limited.clone())).unwrap_err();
    match &err {
        StoreError::BuildFailed {
            status,
            stderr_tail,
            ..
        } => {
            assert_eq!(status, "out of memory", "{stderr_tail}");
            assert!(stderr_tail.contains("hit the memory limit of 1024 MiB"));
        }
        other => panic!("expected BuildFailed, got {other}"),
    }
    assert!(started.elapsed() < Duration::from_secs(120));

    // Time: constant evaluation that never ends.
    let stall = stage(tmp.path(), "stall");
    append(
        &stall.join("src/tables.rs"),
        "\n#[allow(long_running_const_eval)]\npub const STALL: u64 = { let mut i = 0u64; loop { i = i.wrapping_add(1); if i == u64::MAX { break i; } } };\n",
    );
    let started = std::time::Instant::now();
    let mut opts = untrusted(limited.clone());
    opts.timeout = Duration::from_secs(10);
    let err = store.build(&stall, &opts).unwrap_err();
    match &err {
        StoreError::BuildFailed { status, .. } => assert_eq!(status, "timed out", "{err}"),
        other => panic!("expected BuildFailed, got {other}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "{:?}",
        started.elapsed()
    );

    // Positive control: the harness builds under the same limits.
    let clean = stage(tmp.path(), "clean");
    let mut opts = untrusted(limited);
    opts.timeout = Duration::from_secs(240);
    store
        .build(&clean, &opts)
        .expect("the harness builds under 1 GiB per process");
}

// ---------------------------------------------------------------------------
// The external coder's jail.

#[tokio::test]
async fn a_jailed_coder_sees_no_secret_and_leaves_nothing_running() {
    if support::ran_bounded_in_child(
        module_path!(),
        "a_jailed_coder_sees_no_secret_and_leaves_nothing_running",
        &[(KEY_VAR, KEY_VALUE)],
        Duration::from_secs(240),
        256.0,
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let outside = Outside::new(tmp.path());
    let crate_dir = stage(tmp.path(), "staging");
    let scripts = tmp.path().join("scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    let planted = outside.dir.join("planted-by-coder.txt");
    // The shared cargo target holds the dependency artifacts candidate
    // builds link: the coder's own cargo gets only `coder/` inside it.
    let poison = target().join("poisoned-by-coder");
    let _ = std::fs::remove_file(&poison);
    // The coder tries to read the secret and the key, to write outside the
    // crate, and leaves writers behind (one in its own session); then it
    // makes a real edit.
    let script = r#"
import os, subprocess
try:
    secret = open("@SECRET@").read()
except Exception:
    secret = "unreadable"
key = os.environ.get("@KEY_VAR@", "unset")
for path in ["@PLANTED@", "@POISON@"]:
    try:
        open(path, "w").write("x")
    except Exception:
        pass
open(os.environ["CARGO_TARGET_DIR"] + "/coder-was-here", "w").write("ok")
t = open("src/tables.rs").read()
assert @RULE@ in t
t = t.replace(@RULE@, @NEW_RULE@)
t += "\n// seen: secret=%s key=%s\n" % (secret, key)
open("src/tables.rs", "w").write(t)
subprocess.Popen(["sh", "-c", "sleep 1; echo '// LATE-WRITE' >> src/lib.rs"])
subprocess.Popen(["setsid", "sh", "-c", "sleep 1; echo '// LATE-SETSID' >> src/lib.rs"])
"#
    .replace("@SECRET@", &outside.path("secret.txt"))
    .replace("@KEY_VAR@", KEY_VAR)
    .replace("@PLANTED@", &planted.to_string_lossy())
    .replace("@POISON@", &poison.to_string_lossy())
    .replace("@RULE@", &py(RULE_2))
    .replace("@NEW_RULE@", &py(NEW_RULE));
    std::fs::write(scripts.join("coder.py"), script).unwrap();
    let mut config = ExternalConfig::new(format!(
        "/usr/bin/python3 {}",
        scripts.join("coder.py").display()
    ));
    config.read_only = vec![scripts.clone()];
    config.target_dir = Some(target());
    let coder = ExternalCoder::new(config).unwrap();
    let spec = tables_spec();
    let started = std::time::Instant::now();
    let out = coder
        .implement(&CoderTask::new(spec), &crate_dir)
        .await
        .expect("the coder's edit is collected");
    assert!(started.elapsed() < Duration::from_secs(180));
    let hash = source_tree_hash(&crate_dir).unwrap();
    // Hostile: nothing of the host reached it, nothing it left runs on.
    assert!(
        out.diff.contains("seen: secret=unreadable key=unset"),
        "{}",
        out.diff
    );
    assert!(!out.diff.contains(SECRET) && !out.diff.contains(KEY_VALUE));
    assert!(!planted.exists(), "the coder wrote outside the crate");
    assert!(!poison.exists(), "the coder wrote into the shared target");
    assert!(target().join("coder/coder-was-here").is_file());
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        source_tree_hash(&crate_dir).unwrap(),
        hash,
        "the crate changed after the snapshot"
    );
    let lib = std::fs::read_to_string(crate_dir.join("src/lib.rs")).unwrap();
    assert!(!lib.contains("LATE"), "{lib}");
    // Positive control: its real edit is the diff, and it builds (jailed).
    assert_eq!(out.changed_files, vec!["src/tables.rs"]);
    assert!(
        out.diff.contains(&format!("+        text: {NEW_RULE},")),
        "{}",
        out.diff
    );
    assert!(out.build_ok, "{}", out.log);
}

// ---------------------------------------------------------------------------
// Training end to end: the host binary with a hostile external coder.

/// A coder script that runs the `n`-th of `steps` on its `n`-th call (its
/// state lives in `state/`, which the jail lets it write), after copying
/// its prompt there and trying to read the secret and the key.
fn scripted_coder(root: &Path, outside: &Outside, steps: &[&str]) -> (String, PathBuf, PathBuf) {
    let scripts = root.join("scripts");
    let state = root.join("state");
    std::fs::create_dir_all(&scripts).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let mut body = String::from(
        r#"import os, sys, shutil, subprocess
state = "@STATE@"
n = len([f for f in os.listdir(state) if f.startswith("prompt-")]) + 1
shutil.copy(sys.argv[1], "%s/prompt-%d.md" % (state, n))
try:
    secret = open("@SECRET@").read()
except Exception:
    secret = "unreadable"
key = os.environ.get("@KEY_VAR@", "unset")
open("%s/seen-%d.txt" % (state, n), "w").write("secret=%s key=%s" % (secret, key))
t = open("src/tables.rs").read()
l = open("src/lib.rs").read()
c = open("src/component.rs").read()
# Whatever it could read goes into the source: a leak if the jail failed.
t += "\n// seen: secret=%s key=%s\n" % (secret, key)
def rep(s, a, b):
    assert a in s, a
    return s.replace(a, b, 1)
"#,
    );
    for (i, step) in steps.iter().enumerate() {
        body += &format!("if n == {}:\n", i + 1);
        for line in step.lines() {
            body += &format!("    {line}\n");
        }
    }
    body += r#"open("src/tables.rs", "w").write(t)
open("src/lib.rs", "w").write(l)
open("src/component.rs", "w").write(c)
"#;
    let body = body
        .replace("@STATE@", &state.to_string_lossy())
        .replace("@SECRET@", &outside.path("secret.txt"))
        .replace("@KEY_VAR@", KEY_VAR);
    std::fs::write(scripts.join("coder.py"), body).unwrap();
    let command = format!(
        "/usr/bin/python3 {} {{prompt_file}}",
        scripts.join("coder.py").display()
    );
    (command, scripts, state)
}

/// A Python string literal of `s`.
fn py(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// `ecdysis-host train` (ecdysis-nofdcr, the external coder) for `rounds`
/// rounds, measured.
fn train_with_coder(
    root: &Path,
    command: &str,
    scripts: &Path,
    state: &Path,
    rounds: u32,
) -> support::Measured {
    train_with_coder_and(root, command, scripts, state, rounds, &[])
}

/// [`train_with_coder`] with more flags.
fn train_with_coder_and(
    root: &Path,
    command: &str,
    scripts: &Path,
    state: &Path,
    rounds: u32,
    extra: &[&str],
) -> support::Measured {
    let rounds_text = rounds.to_string();
    let out = root.join("train");
    let out = out.to_string_lossy();
    let scripts = scripts.to_string_lossy();
    let state = state.to_string_lossy();
    let mut args = vec![
        "--cache",
        "off",
        "--method",
        "ecdysis-nofdcr",
        "--rounds",
        &rounds_text,
        "--plateau",
        "20",
        "--coder-command",
        command,
        "--coder-ro",
        &scripts,
        "--coder-rw",
        &state,
        // Gated: the coder's jail reaches this endpoint only (nothing
        // listens there; the scripted coder needs no network): the
        // binary's own forwarder runs every coder of these tests.
        "--coder-endpoint",
        "http://127.0.0.1:18080/v1",
        "--out",
        &out,
    ];
    args.extend_from_slice(extra);
    let mut cmd = support::train_command(root, &args);
    cmd.env(KEY_VAR, KEY_VALUE);
    let m = support::run_measured(&mut cmd);
    eprintln!(
        "train, {rounds} round(s): {:.1} s, peak RSS {:.0} MiB",
        m.wall.as_secs_f64(),
        m.peak_rss_mib()
    );
    m
}

fn rounds_of(out: &Path) -> Vec<Value> {
    let summary: Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    summary["rounds"].as_array().unwrap().clone()
}

#[test]
fn a_coder_smuggling_files_or_keys_is_rejected_each_time_then_a_clean_edit_is_gated() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = Outside::new(tmp.path());
    let late =
        "subprocess.Popen([\"sh\", \"-c\", \"sleep 2; echo '// LATE-WRITE' >> src/lib.rs\"])";
    let steps = [
        format!(
            "t = rep(t, {}, 'include_str!(' + {} + ')')",
            py(RULE_2),
            py(&py(&outside.path("secret.txt")))
        ),
        format!("t = rep(t, {}, 'env!(\"{KEY_VAR}\")')", py(RULE_1)),
        format!(
            "t = rep(t, {}, 'include!(' + {} + ')')",
            py(RULE_5),
            py(&py(&outside.path("secret_expr.rs")))
        ),
        format!(
            "t = rep(t, {}, 'crate::leak_mod::TEXT')\nl += '\\n#[path = ' + {} + ']\\npub mod leak_mod;\\n'",
            py(RULE_6),
            py(&py(&outside.path("leak_mod.rs")))
        ),
        // The clean edit, a hidden file (recorded, not refused), and a
        // writer left behind that must not reach the candidate.
        format!(
            "t = rep(t, {}, {})\nopen('src/.notes.rs', 'w').write('// the coder\\'s notes\\n')\n{late}",
            py(BLANK_PREFIXES),
            py(FILLED_PREFIXES)
        ),
    ];
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let (command, scripts, state) = scripted_coder(tmp.path(), &outside, &steps);
    let m = train_with_coder(tmp.path(), &command, &scripts, &state, 5);
    assert!(m.status.success(), "{}", m.stderr);
    assert!(m.wall < Duration::from_secs(600), "{:?}", m.wall);
    assert!(m.peak_rss_mib() < 768.0, "{} MiB", m.peak_rss_mib());

    let out = tmp.path().join("train");
    let rounds = rounds_of(&out);
    assert_eq!(rounds.len(), 5, "{rounds:?}");
    for (r, construct) in rounds
        .iter()
        .zip(["include_str!", "env!", "include!", "#[path]"])
    {
        let decision = r["decision"].as_str().unwrap();
        assert!(
            decision.starts_with(
                "rejected: refused before building: the source reaches outside the crate:"
            ),
            "{decision}"
        );
        assert!(decision.contains(construct), "{construct}: {decision}");
        assert!(r["candidate"].is_null() && r["accepted"] == false, "{r}");
    }
    // Positive control in the same process: the clean edit is built and
    // gated as usual (it fixes a quirk of sim:clumsy: accepted).
    let last = &rounds[4];
    assert_eq!(last["accepted"], true, "{last}");
    assert!(last["candidate_score"].as_f64().is_some(), "{last}");
    let cand = out
        .join("candidates")
        .join(last["candidate"].as_str().unwrap());
    // The hidden file is part of the candidate's saved source and diff.
    assert!(cand.join("source/src/.notes.rs").is_file());
    let diff = std::fs::read_to_string(cand.join("diff.patch")).unwrap();
    assert!(diff.contains("+++ b/src/.notes.rs"), "{diff}");
    // The writer it left behind was killed before the snapshot and build.
    let lib = std::fs::read_to_string(cand.join("source/src/lib.rs")).unwrap();
    assert!(!lib.contains("LATE-WRITE"));
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        !std::fs::read_to_string(out.join("staging/src/lib.rs"))
            .unwrap()
            .contains("LATE-WRITE")
    );

    // The coder itself never saw the secret or the key...
    for n in 1..=5 {
        let seen = std::fs::read_to_string(state.join(format!("seen-{n}.txt"))).unwrap();
        assert_eq!(seen, "secret=unreadable key=unset");
    }
    // ...and neither bytes reached a component, a trajectory, a prompt, a
    // transcript or a log.
    for needle in [SECRET, KEY_VALUE] {
        for dir in [&out, &tmp.path().join("store"), &state] {
            assert_eq!(
                files_containing(dir, needle),
                Vec::<PathBuf>::new(),
                "{needle}"
            );
        }
        assert!(!m.stderr.contains(needle) && !m.stdout.contains(needle));
    }
    // The prompts were real (the check above looked at something).
    let prompt = std::fs::read_to_string(state.join("prompt-5.md")).unwrap();
    assert!(prompt.contains("### src/tables.rs"));
}

#[test]
fn a_candidate_importing_a_clock_under_the_minimal_profile_is_rejected_and_the_next_round_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = Outside::new(tmp.path());
    let steps = [
        // Under the minimal WASI profile the host grants no wasi:clocks import.
        "c = rep(c, '    fn new(info: EpisodeInfo) -> Self {\\n', '    fn new(info: EpisodeInfo) -> Self {\\n        std::hint::black_box(std::time::SystemTime::now());\\n')".to_string(),
        format!("t = rep(t, {}, {})", py(BLANK_PREFIXES), py(FILLED_PREFIXES)),
    ];
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let (command, scripts, state) = scripted_coder(tmp.path(), &outside, &steps);
    let m = train_with_coder_and(
        tmp.path(),
        &command,
        &scripts,
        &state,
        2,
        &["--wasi", "minimal"],
    );
    assert!(m.status.success(), "{}", m.stderr);
    assert!(m.wall < Duration::from_secs(600), "{:?}", m.wall);
    assert!(m.peak_rss_mib() < 768.0, "{} MiB", m.peak_rss_mib());

    let rounds = rounds_of(&tmp.path().join("train"));
    assert_eq!(rounds.len(), 2, "{rounds:?}");
    // Its network, from --coder-endpoint, is in the run's config.
    let config: Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("train/config.json")).unwrap())
            .unwrap();
    assert_eq!(config["coder_network"], "endpoint 127.0.0.1:18080");
    let first = &rounds[0];
    let decision = first["decision"].as_str().unwrap();
    assert!(decision.starts_with("rejected: cannot load:"), "{decision}");
    assert!(decision.contains("wasi:clocks"), "{decision}");
    eprintln!("{decision}");
    assert!(
        first["candidate"].is_string() && first["accepted"] == false,
        "{first}"
    );
    // Positive control: the next round builds, loads and is gated.
    let second = &rounds[1];
    assert_eq!(second["accepted"], true, "{second}");
    assert!(second["candidate_score"].as_f64().is_some(), "{second}");
}

/// A candidate whose contract grows the system prompt past the episode's
/// added-text budget (70 KB of rule text) is rejected, with the reason; the
/// next round's good edit is gated and accepted.
#[test]
fn a_candidate_that_inflates_the_models_input_is_rejected_and_the_next_round_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = Outside::new(tmp.path());
    let anchor = "pub static PROMPT_RULES: &[PromptRule] = &[\n";
    let steps = [
        format!(
            "t = rep(t, {}, {} + '    PromptRule {{ domain: \"*\", text: \"' + 'x' * 70000 + '\" }},\\n')",
            py(anchor),
            py(anchor)
        ),
        format!(
            "t = rep(t, {}, {})",
            py(BLANK_PREFIXES),
            py(FILLED_PREFIXES)
        ),
    ];
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let (command, scripts, state) = scripted_coder(tmp.path(), &outside, &steps);
    let m = train_with_coder(tmp.path(), &command, &scripts, &state, 2);
    assert!(m.status.success(), "{}", m.stderr);
    assert!(m.wall < Duration::from_secs(600), "{:?}", m.wall);
    let rounds = rounds_of(&tmp.path().join("train"));
    assert_eq!(rounds.len(), 2, "{rounds:?}");
    let first = &rounds[0];
    assert_eq!(first["accepted"], false, "{first}");
    let decision = first["decision"].as_str().unwrap();
    assert!(decision.contains("over the budget"), "{decision}");
    let second = &rounds[1];
    assert_eq!(second["accepted"], true, "{second}");
}

#[test]
fn without_a_jail_training_refuses_to_start_unless_the_operator_allows_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("train");
    let command = |extra: &[&str]| {
        let mut args = vec!["--rounds", "1", "--out", out.to_str().unwrap()];
        args.extend(extra);
        let mut cmd = support::train_command(tmp.path(), &args);
        // This process sees no bubblewrap, as on a machine without it.
        cmd.env("ECDYSIS_BWRAP", "");
        cmd
    };
    let m = support::run_measured(&mut command(&[]));
    assert!(!m.status.success());
    for needle in [
        "only in a jail",
        "bubblewrap (`bwrap`) is not installed",
        "--allow-unjailed-builds",
    ] {
        assert!(m.stderr.contains(needle), "{needle}: {}", m.stderr);
    }
    assert!(!out.exists(), "a refused run writes nothing");
    assert!(m.wall < Duration::from_secs(60), "{:?}", m.wall);
    assert!(m.peak_rss_mib() < 256.0, "{} MiB", m.peak_rss_mib());

    // Positive control: the operator accepts the risk; the run goes on
    // (scanned, offline, cleared environment, memory limit), says so, and
    // records the choice.
    let m = support::run_measured(&mut command(&["--allow-unjailed-builds"]));
    assert!(m.status.success(), "{}", m.stderr);
    assert!(
        m.stderr
            .contains("WARNING: candidate builds and external coders run WITHOUT a jail"),
        "{}",
        m.stderr
    );
    assert!(m.wall < Duration::from_secs(600), "{:?}", m.wall);
    assert!(m.peak_rss_mib() < 768.0, "{} MiB", m.peak_rss_mib());
    let config: Value =
        serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["allow_unjailed_builds"], true);
    let rounds = rounds_of(&out);
    assert!(rounds[0]["candidate"].is_string(), "{:?}", rounds[0]);
    assert!(
        rounds[0]["candidate_score"].as_f64().is_some(),
        "{:?}",
        rounds[0]
    );
}

// ---------------------------------------------------------------------------
// The built-in editor: a refused edit is fed back like a compiler error.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_editor_is_told_its_edit_was_refused_and_its_next_edit_builds() {
    use ecdysis_evolve::code::{EditorCoder, EditorConfig};
    use ecdysis_model::{EndpointLimiter, HttpChatModel, ModelConfig, RetryPolicy};
    use ecdysis_testkit::mock::{MockReply, MockServer};
    if support::ran_bounded_in_child(
        module_path!(),
        "the_editor_is_told_its_edit_was_refused_and_its_next_edit_builds",
        &[],
        Duration::from_secs(240),
        256.0,
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let outside = Outside::new(tmp.path());
    let crate_dir = stage(tmp.path(), "staging");
    let block = |search: &str, replace: &str| {
        format!(
            "FILE: src/tables.rs\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"
        )
    };
    let planted = format!("include_str!({})", py(&outside.path("secret.txt")));
    let server = MockServer::start().await.unwrap();
    server.push(MockReply::text(&block(RULE_2, &planted)));
    server.push(MockReply::text(&block(&planted, NEW_RULE)));
    let mut config = ModelConfig::new("m-coder", server.base_url());
    config.api_key_env = None;
    config.retry = RetryPolicy {
        max_retries: 0,
        ..RetryPolicy::default()
    };
    let model = std::sync::Arc::new(HttpChatModel::new(config, &EndpointLimiter::new()).unwrap());
    let coder = EditorCoder::new(
        model,
        EditorConfig {
            target_dir: Some(target()),
            ..EditorConfig::default()
        },
    );
    let spec = ChangeSpec::parse(
        r#"{"failure_patterns": [{"name": "n", "description": "d", "evidence_tasks": ["1"]}],
            "proposed_changes": [{"layer": "contract", "file": "src/tables.rs", "description": "d", "rationale": "r", "evidence_tasks": ["1"]}],
            "skills": [], "implementation_notes": ""}"#,
    )
    .unwrap();
    let out = coder
        .implement(&CoderTask::new(spec), &crate_dir)
        .await
        .expect("the second edit builds");
    // Hostile: the refusal (not the file) went back to the model.
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let body = requests[1].json().unwrap().to_string();
    assert!(
        body.contains("refused before building: the source reaches outside the crate")
            && body.contains("include_str!"),
        "{body}"
    );
    assert!(!body.contains(SECRET));
    // Positive control: the next edit is built (jailed) and is the diff.
    assert!(out.build_ok, "{}", out.log);
    assert_eq!(out.attempts, 2);
    assert!(
        out.diff.contains(&format!("+        text: {NEW_RULE},")),
        "{}",
        out.diff
    );
    assert!(!out.diff.contains("include_str"), "{}", out.diff);
}

// ---------------------------------------------------------------------------
// The external coder's network: its endpoint, nothing else.

/// A TCP server on the host's loopback answering every connection with
/// `reply`; returns its port and a counter of connections.
/// Writes `scripts/coder.py`: a coder that tries to reach its endpoint
/// (by `endpoint_host`), another local service and, with `outside`, an
/// address outside the machine, then makes its real edit (RULE_2 →
/// NEW_RULE) and appends what it reached as a comment to `src/tables.rs`
/// (`// net: endpoint=… other=…[ outside=…]`), so the diff shows it.
fn write_probe_coder(
    scripts: &Path,
    endpoint_host: &str,
    endpoint: u16,
    other: u16,
    outside: bool,
) {
    let outside = if outside {
        r#" + " outside=%s" % reach("1.1.1.1", 53)"#
    } else {
        ""
    };
    let script = r#"
import socket
def reach(host, port):
    try:
        with socket.create_connection((host, port), timeout=3) as s:
            return s.recv(100).decode().strip() or "empty"
    except Exception as e:
        return type(e).__name__
seen = "endpoint=%s other=%s" % (reach("@HOST@", @EP@), reach("127.0.0.1", @OTHER@))@OUTSIDE@
t = open("src/tables.rs").read()
assert @RULE@ in t
t = t.replace(@RULE@, @NEW_RULE@)
t += "\n// net: %s\n" % seen
open("src/tables.rs", "w").write(t)
"#
    .replace("@HOST@", endpoint_host)
    .replace("@EP@", &endpoint.to_string())
    .replace("@OTHER@", &other.to_string())
    .replace("@OUTSIDE@", outside)
    .replace("@RULE@", &py(RULE_2))
    .replace("@NEW_RULE@", &py(NEW_RULE));
    std::fs::write(scripts.join("coder.py"), script).unwrap();
}

/// A change spec asking for a realize-layer edit of `src/tables.rs`.
fn tables_spec() -> ChangeSpec {
    ChangeSpec::parse(
        r#"{"failure_patterns": [{"name": "n", "description": "d", "evidence_tasks": ["1"]}],
            "proposed_changes": [{"layer": "realize", "file": "src/tables.rs", "description": "d", "rationale": "r", "evidence_tasks": ["1"]}],
            "skills": [], "implementation_notes": ""}"#,
    )
    .unwrap()
}

fn tcp_server(reply: &'static str) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = hits.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut conn = conn;
            let _ = conn.write_all(reply.as_bytes());
        }
    });
    (port, hits)
}

#[tokio::test]
async fn a_gated_coder_reaches_its_endpoint_and_nothing_else() {
    if support::ran_bounded_in_child(
        module_path!(),
        "a_gated_coder_reaches_its_endpoint_and_nothing_else",
        &[],
        Duration::from_secs(240),
        256.0,
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let crate_dir = stage(tmp.path(), "staging");
    let scripts = tmp.path().join("scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    // The model endpoint, and another service on the host's loopback (a
    // database, another tenant's server) the coder must not reach.
    let (endpoint, endpoint_hits) = tcp_server("ENDPOINT-OK\n");
    let (other, other_hits) = tcp_server("OTHER-REACHED\n");
    write_probe_coder(&scripts, "localhost", endpoint, other, true);
    let spec = tables_spec();
    let coder = |network: CoderNetwork| {
        let mut config = ExternalConfig::new(format!(
            "/usr/bin/python3 {}",
            scripts.join("coder.py").display()
        ));
        config.read_only = vec![scripts.clone()];
        config.target_dir = Some(target());
        config.check_build = false;
        config.network = network;
        config.forwarder_program = Some(support::host_bin());
        ExternalCoder::new(config).unwrap()
    };

    // Gated: the endpoint (named by host name, as its URL does) answers;
    // the other local service and the outside are unreachable.
    let started = std::time::Instant::now();
    let out = coder(CoderNetwork::endpoints([format!("http://localhost:{endpoint}/v1")]).unwrap())
        .implement(&CoderTask::new(spec.clone()), &crate_dir)
        .await
        .expect("the gated coder's edit is collected");
    assert!(started.elapsed() < Duration::from_secs(120));
    assert!(
        out.diff
            .contains("net: endpoint=ENDPOINT-OK other=ConnectionRefusedError outside="),
        "{}",
        out.diff
    );
    assert!(!out.diff.contains("OTHER-REACHED"), "{}", out.diff);
    assert_eq!(
        other_hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the other service was reached"
    );
    assert_eq!(endpoint_hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    // Its real edit is the diff.
    assert_eq!(out.changed_files, vec!["src/tables.rs"]);
    assert!(out.diff.contains(&format!("+        text: {NEW_RULE},")));

    // Control: with the host's network (the explicit opt-in) the same
    // script does reach the other service, so the check above can fail.
    let fresh = stage(tmp.path(), "ungated");
    let out = coder(CoderNetwork::Host)
        .implement(&CoderTask::new(spec), &fresh)
        .await
        .expect("the ungated coder's edit is collected");
    assert!(
        out.diff
            .contains("net: endpoint=ENDPOINT-OK other=OTHER-REACHED"),
        "{}",
        out.diff
    );

    // Bad endpoints are refused by name before anything runs.
    let Err(err) = CoderNetwork::endpoints(["not an endpoint"]) else {
        panic!("a bad endpoint must be refused");
    };
    assert!(err.to_string().contains("`not an endpoint`"), "{err}");
}

// ---------------------------------------------------------------------------
// The external coder's network by default: nothing, or its endpoint.

#[tokio::test]
async fn an_external_coder_gets_no_network_by_default_and_its_endpoint_when_known() {
    if support::ran_bounded_in_child(
        module_path!(),
        "an_external_coder_gets_no_network_by_default_and_its_endpoint_when_known",
        &[],
        Duration::from_secs(300),
        256.0,
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let scripts = tmp.path().join("scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    let (endpoint, endpoint_hits) = tcp_server("ENDPOINT-OK\n");
    // A local service that is not its endpoint (a database, another
    // tenant's server).
    let (other, other_hits) = tcp_server("OTHER-REACHED\n");
    write_probe_coder(&scripts, "127.0.0.1", endpoint, other, false);
    let spec = tables_spec();
    let config = || {
        let mut config = ExternalConfig::new(format!(
            "/usr/bin/python3 {}",
            scripts.join("coder.py").display()
        ));
        config.read_only = vec![scripts.clone()];
        config.target_dir = Some(target());
        config.forwarder_program = Some(support::host_bin());
        config
    };

    // Hostile, the default config: no network at all.
    assert_eq!(config().network, CoderNetwork::None);
    let mut unbuilt = config();
    unbuilt.check_build = false;
    let crate_dir = stage(tmp.path(), "default");
    let started = std::time::Instant::now();
    let out = ExternalCoder::new(unbuilt)
        .unwrap()
        .implement(&CoderTask::new(spec.clone()), &crate_dir)
        .await
        .expect("the coder's edit is collected");
    assert!(started.elapsed() < Duration::from_secs(120));
    assert!(
        out.diff
            .contains("net: endpoint=ConnectionRefusedError other=ConnectionRefusedError"),
        "{}",
        out.diff
    );
    assert_eq!(other_hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(endpoint_hits.load(std::sync::atomic::Ordering::SeqCst), 0);

    // Positive control: gated to its endpoint it reaches that (only), and
    // its good edit is built (jailed) right after.
    let mut gated = config();
    gated.network = CoderNetwork::endpoints([format!("http://127.0.0.1:{endpoint}/v1")]).unwrap();
    let crate_dir = stage(tmp.path(), "gated");
    let out = ExternalCoder::new(gated)
        .unwrap()
        .implement(&CoderTask::new(spec), &crate_dir)
        .await
        .expect("the gated coder's edit is collected");
    assert!(
        out.diff
            .contains("net: endpoint=ENDPOINT-OK other=ConnectionRefusedError"),
        "{}",
        out.diff
    );
    assert_eq!(other_hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(endpoint_hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(out.build_ok, "{}", out.log);
}

#[test]
fn the_coder_network_is_recorded_and_a_contradiction_is_refused_by_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = Outside::new(tmp.path());
    let steps = [format!(
        "t = rep(t, {}, {})",
        py(BLANK_PREFIXES),
        py(FILLED_PREFIXES)
    )];
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let (command, scripts, state) = scripted_coder(tmp.path(), &outside, &steps);
    let out = tmp.path().join("train");
    let train = |extra: &[&str]| {
        let mut args = vec![
            "--cache",
            "off",
            "--method",
            "ecdysis-nofdcr",
            "--rounds",
            "1",
            "--coder-command",
            command.as_str(),
            "--coder-ro",
            scripts.to_str().unwrap(),
            "--coder-rw",
            state.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend(extra);
        support::run_measured(&mut support::train_command(tmp.path(), &args))
    };

    // Contradictions are refused before anything runs, naming the flags.
    for (extra, needles) in [
        (
            &["--coder-network", "host", "--coder-endpoint", "127.0.0.1:9"][..],
            &["--coder-endpoint 127.0.0.1:9", "--coder-network host"][..],
        ),
        (
            &["--coder-network", "endpoint"][..],
            &["--coder-network endpoint", "--coder-endpoint"][..],
        ),
        (
            &["--coder-no-network", "--coder-network", "host"][..],
            &["--coder-no-network", "--coder-network host"][..],
        ),
    ] {
        let m = train(extra);
        assert!(!m.status.success(), "{extra:?}");
        for needle in needles {
            assert!(m.stderr.contains(needle), "{needle}: {}", m.stderr);
        }
        assert!(!out.exists(), "a refused run writes nothing");
        assert!(m.wall < Duration::from_secs(60), "{:?}", m.wall);
    }

    // The default: no endpoint known (the agent is simulated), no network;
    // recorded.
    let m = train(&[]);
    assert!(m.status.success(), "{}", m.stderr);
    assert!(m.peak_rss_mib() < 768.0, "{} MiB", m.peak_rss_mib());
    let config: Value =
        serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["coder_network"], "none");
    assert_eq!(rounds_of(&out)[0]["accepted"], true);

    // Resuming with another network is refused like any other change.
    let m = train(&["--coder-network", "host"]);
    assert!(!m.status.success());
    assert!(
        m.stderr.contains("another configuration") && m.stderr.contains("coder_network"),
        "{}",
        m.stderr
    );
    assert!(
        m.stderr
            .contains("WARNING: the external coder shares the host's network"),
        "{}",
        m.stderr
    );
    // The same network resumes (nothing left to do).
    let m = train(&[]);
    assert!(m.status.success(), "{}", m.stderr);
}

// ---------------------------------------------------------------------------
// Process-count, CPU and disk limits of the jails.

/// Tight limits for the hostile jails (and their positive controls).
fn tight_limits(cpu_secs: u64) -> JailLimits {
    JailLimits {
        memory: 2 << 30,
        cpu_secs,
        file_size: 16 << 20,
        processes: 64,
        tmp_size: 16 << 20,
    }
}

#[tokio::test]
async fn a_coder_that_forks_spins_or_fills_the_disk_is_stopped_then_a_good_edit_builds() {
    use ecdysis_evolve::code::CoderError;
    if support::ran_bounded_in_child(
        module_path!(),
        "a_coder_that_forks_spins_or_fills_the_disk_is_stopped_then_a_good_edit_builds",
        &[],
        Duration::from_secs(300),
        256.0,
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let scripts = tmp.path().join("scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    let spec = tables_spec();
    let coder = |name: &str, body: &str| {
        let path = scripts.join(format!("{name}.py"));
        std::fs::write(&path, body).unwrap();
        let mut config = ExternalConfig::new(format!("/usr/bin/python3 {}", path.display()));
        config.read_only = vec![scripts.clone()];
        config.target_dir = Some(target());
        config.limits = tight_limits(3);
        config.crate_quota = 40 << 20;
        ExternalCoder::new(config).unwrap()
    };
    let hostile = [
        (
            "fork-bomb",
            // Every child holds its slot; a failed fork is retried.
            "import os, time\nwhile True:\n    try:\n        if os.fork() == 0:\n            time.sleep(60); os._exit(0)\n    except OSError:\n        time.sleep(0.01)\n",
            "the process limit (64 tasks at once)",
        ),
        (
            "spin",
            "open('src/tables.rs', 'a').write('// spun\\n')\nwhile True:\n    pass\n",
            "the CPU-time limit (3 s per process)",
        ),
        (
            "huge-file",
            // Python ignores SIGXFSZ: the write fails with EFBIG.
            "f = open('src/huge.rs', 'wb')\nfor _ in range(1000):\n    f.write(b'0' * (1 << 20))\n",
            "the file-size limit (16 MiB per file)",
        ),
        (
            "many-files",
            // Each file within the size limit, together past the quota;
            // then it waits: the quota stops it while it runs.
            "import time\nfor i in range(8):\n    open('src/f%d.rs' % i, 'wb').write(b'0' * (15 << 20))\ntime.sleep(60)\n",
            "the disk quota of the staging crate (40 MiB)",
        ),
    ];
    for (name, body, limit) in hostile {
        let crate_dir = stage(tmp.path(), name);
        let before = source_tree_hash(&crate_dir).unwrap();
        let started = std::time::Instant::now();
        let err = coder(name, body)
            .implement(&CoderTask::new(spec.clone()), &crate_dir)
            .await
            .unwrap_err();
        let elapsed = started.elapsed();
        eprintln!("{name}: {err} ({:.1} s)", elapsed.as_secs_f64());
        match &err {
            CoderError::Limit { limit: hit, .. } => {
                assert_eq!(hit.to_string(), limit, "{name}: {err}\n{}", err.log())
            }
            other => panic!("{name}: expected a limit, got {other}\n{}", other.log()),
        }
        assert!(err.to_string().contains("was stopped: it hit"), "{err}");
        assert!(elapsed < Duration::from_secs(45), "{name}: {elapsed:?}");
        // The crate is as it was (the attempt restored it).
        assert_eq!(source_tree_hash(&crate_dir).unwrap(), before, "{name}");
    }

    // Positive control, same limits, same process: a good edit, built.
    let crate_dir = stage(tmp.path(), "good");
    let good = format!(
        "t = open('src/tables.rs').read()\nopen('src/tables.rs', 'w').write(t.replace({}, {}))\n",
        py(RULE_2),
        py(NEW_RULE)
    );
    let out = coder("good", &good)
        .implement(&CoderTask::new(spec), &crate_dir)
        .await
        .expect("a good edit within the limits");
    assert!(out.build_ok, "{}", out.log);
    assert!(out.diff.contains(&format!("+        text: {NEW_RULE},")));
}

#[test]
fn build_scripts_that_fork_spin_or_fill_the_disk_hit_the_build_limits_then_a_clean_build_passes() {
    if support::ran_bounded_in_child(
        module_path!(),
        "build_scripts_that_fork_spin_or_fill_the_disk_hit_the_build_limits_then_a_clean_build_passes",
        &[],
        Duration::from_secs(600),
        256.0,
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let store = ComponentStore::open(tmp.path().join("store"));
    // Warm the shared target (its dependencies are the user's own build's
    // work, not the hostile one's): then every build below compiles only
    // the harness and its build script.
    let warm = stage(tmp.path(), "warm");
    store
        .build(&warm, &untrusted(Containment::default()))
        .expect("the harness builds");
    // rustc compiling the harness itself (the positive control) needs most
    // of 10 CPU seconds on a slow machine: the limit leaves it room, and the
    // spinning build script pays for that in wall time.
    let cpu_secs = 30;
    let limited = Containment {
        limits: tight_limits(cpu_secs),
        ..Containment::default()
    };
    // Build scripts run arbitrary code at build time (a candidate may not
    // add one: this is the jail's own line of defence).
    let hostile = [
        (
            "fork-bomb",
            "fn main() { let mut kids = Vec::new(); loop { match std::process::Command::new(\"sleep\").arg(\"60\").spawn() { Ok(k) => kids.push(k), Err(e) => panic!(\"fork {} failed: {e}\", kids.len()) } } }",
            "process limit",
        ),
        (
            "spin",
            "fn main() { let mut x = 0u64; loop { x = std::hint::black_box(x.wrapping_add(1)); } }",
            "CPU limit",
        ),
        (
            "huge-file",
            "use std::io::Write; fn main() { let out = std::env::var(\"OUT_DIR\").unwrap(); let mut f = std::fs::File::create(format!(\"{out}/huge\")).unwrap(); for _ in 0..1000 { f.write_all(&[0u8; 1 << 20]).unwrap(); } }",
            "file-size limit",
        ),
    ];
    for (name, build_rs, status) in hostile {
        let crate_dir = stage(tmp.path(), name);
        std::fs::write(crate_dir.join("build.rs"), build_rs).unwrap();
        let started = std::time::Instant::now();
        let err = store
            .build(&crate_dir, &untrusted(limited.clone()))
            .unwrap_err();
        let elapsed = started.elapsed();
        eprintln!("{name}: {err} ({:.1} s)", elapsed.as_secs_f64());
        match &err {
            StoreError::BuildFailed {
                status: s,
                stderr_tail,
                ..
            } => assert_eq!(s, status, "{name}: {stderr_tail}"),
            other => panic!("{name}: expected BuildFailed, got {other}"),
        }
        // Twice the CPU limit: the spin shares its core on a loaded machine.
        let bound = Duration::from_secs(60 + 2 * cpu_secs);
        assert!(elapsed < bound, "{name}: {elapsed:?}");
    }

    // Positive control: the harness builds under the same limits.
    let clean = stage(tmp.path(), "clean");
    store
        .build(&clean, &untrusted(limited))
        .expect("the harness builds under the tight limits");
}

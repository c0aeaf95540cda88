//! Shared helpers for the end-to-end tests: build guests once per test
//! process and hand out their bytes.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use ecdysis_host::store::{BuildOptions, ComponentStore};

/// The repository root (the host crate's parent).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host crate has a parent")
        .to_path_buf()
}

/// A store shared by the tests of one process (a temp dir).
pub fn shared_store() -> &'static ComponentStore {
    static STORE: OnceLock<(tempfile::TempDir, ComponentStore)> = OnceLock::new();
    let (_, store) = STORE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = ComponentStore::open(dir.path().join("store"))
            .with_key_file(dir.path().join("artifact.key"));
        (dir, store)
    });
    store
}

/// Build a guest crate (relative to the repo root) with an optional feature
/// and return its component bytes. Each (crate, feature) builds once per
/// process; the store's crate lock serialises builds across processes.
pub fn guest(crate_rel: &str, feature: Option<&str>) -> Vec<u8> {
    type Built = HashMap<(String, Option<String>), Vec<u8>>;
    static CACHE: OnceLock<Mutex<Built>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (crate_rel.to_string(), feature.map(str::to_string));
    let mut map = cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(bytes) = map.get(&key) {
        return bytes.clone();
    }
    let store = shared_store();
    let opts = BuildOptions {
        features: feature.map(|f| vec![f.to_string()]).unwrap_or_default(),
        quiet: true,
        ..BuildOptions::default()
    };
    let out = store
        .build(&repo_root().join(crate_rel), &opts)
        .unwrap_or_else(|e| panic!("building {crate_rel} {feature:?}: {e}"));
    let bytes = store.read_component(&out.manifest.hash).expect("stored");
    map.insert(key, bytes.clone());
    bytes
}

/// The path of the `ecdysis-host` binary built for these tests.
pub fn host_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ecdysis-host"))
}

/// `ecdysis-host train` on eight retail training tasks with `sim:clumsy`,
/// starting from the template's blank rule tables, without the held-out
/// split; `extra` adds flags. The store lives in `dir`; candidates share one
/// cargo target across test runs so they rebuild only the harness.
pub fn train_command(dir: &std::path::Path, extra: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(host_bin());
    c.current_dir(repo_root())
        .args(["--quiet", "--store"])
        .arg(dir.join("store"))
        .args([
            "train",
            "--start-blank",
            "--tasks",
            "0,1,2,3,4,6,7,8",
            "--agent-model",
            "sim:clumsy",
            "--test-split",
            "none",
            "--cargo-target-dir",
        ])
        .arg(repo_root().join("target/evolve-candidates"))
        .args(extra);
    c
}

/// A child process run to its end, with what it cost.
pub struct Measured {
    /// Its exit status.
    pub status: std::process::ExitStatus,
    /// Everything it wrote to stdout.
    pub stdout: String,
    /// Everything it wrote to stderr.
    pub stderr: String,
    /// Wall time from spawn to exit.
    pub wall: std::time::Duration,
    /// Peak resident memory of the child, in KiB (`ru_maxrss` from
    /// `wait4`, exact for this child alone).
    pub max_rss_kib: u64,
}

/// Run `cmd` to its end and measure its wall time and peak RSS: the time
/// and memory bounds of the containment tests come from here, never from
/// the test process itself.
// The child is reaped by `wait4` (which std's `Child::wait` cannot do with
// rusage), not by `Child::wait`: clippy cannot see that.
#[allow(clippy::zombie_processes)]
pub fn run_measured(cmd: &mut std::process::Command) -> Measured {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let started = std::time::Instant::now();
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the child");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for this child only; the pointers are valid locals.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert!(pid > 0, "wait4 failed");
    let wall = started.elapsed();
    Measured {
        status: std::process::ExitStatus::from_raw(status),
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
        wall,
        max_rss_kib: usage.ru_maxrss as u64,
    }
}

impl Measured {
    /// Peak resident memory in MiB. Processes in a bubblewrap jail are
    /// reaped inside their PID namespace and not counted here; their memory
    /// is bounded by the jail's own limit.
    pub fn peak_rss_mib(&self) -> f64 {
        self.max_rss_kib as f64 / 1024.0
    }
}

/// Set in a child that runs one test case alone ([`in_child`]).
const CHILD_CASE: &str = "ECDYSIS_TEST_CHILD_CASE";

/// Whether this process is the child of [`in_child`]: the test then runs
/// its case instead of spawning it.
pub fn is_child() -> bool {
    std::env::var_os(CHILD_CASE).is_some()
}

/// For a test that measures itself: in the parent process, runs test
/// `name` alone in a child ([`in_child`], with `env` added) and asserts
/// its wall time stays under `max_wall` and its peak RSS under
/// `max_rss_mib`, then answers true (the caller returns); in the child it
/// answers false (the caller runs the test's body).
pub fn ran_bounded_in_child(
    name: &str,
    env: &[(&str, &str)],
    max_wall: std::time::Duration,
    max_rss_mib: f64,
) -> bool {
    if is_child() {
        return false;
    }
    let m = in_child(name, env);
    assert!(m.wall < max_wall, "{name}: {:?}", m.wall);
    assert!(
        m.peak_rss_mib() < max_rss_mib,
        "{name}: {} MiB",
        m.peak_rss_mib()
    );
    true
}

/// Run the test `name` of this test binary alone in a child process (with
/// `env` added to its environment), so its time and peak memory are its
/// own; panics, with the child's output, unless that test ran and passed.
pub fn in_child(name: &str, env: &[(&str, &str)]) -> Measured {
    let mut cmd = std::process::Command::new(std::env::current_exe().expect("test binary"));
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_CASE, "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let m = run_measured(&mut cmd);
    eprintln!(
        "{name}: {:.1} s, peak RSS {:.0} MiB",
        m.wall.as_secs_f64(),
        m.peak_rss_mib()
    );
    assert!(
        m.status.success() && m.stdout.contains("1 passed"),
        "the child case {name} failed ({:?}):\n{}\n{}",
        m.status,
        m.stdout,
        m.stderr
    );
    m
}

//! Tests that bound their own time and memory: a child process run to its
//! end and measured (`wait4`'s rusage), and a test case re-run alone in a
//! child of its test binary.

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
    module: &str,
    name: &str,
    env: &[(&str, &str)],
    max_wall: std::time::Duration,
    max_rss_mib: f64,
) -> bool {
    if is_child() {
        // SAFETY: registers a plain function that only reads a file and
        // writes to a file descriptor, at the child's exit.
        unsafe { libc::atexit(report_own_peak) };
        return false;
    }
    let m = in_child(module, name, env);
    assert!(m.wall < max_wall, "{name}: {:?}", m.wall);
    let peak = own_peak_mib(&m).unwrap_or_else(|| m.peak_rss_mib());
    assert!(peak < max_rss_mib, "{name}: {peak} MiB");
    true
}

/// The line a measured child writes at exit with its own peak RSS.
const OWN_PEAK: &str = "ecdysis-measure-own-peak-kib:";

/// At the child's exit: its own peak RSS (`VmHWM`), to stderr. Not
/// `ru_maxrss`: Linux carries the spawning process's high-water mark into
/// the child across `exec`, so a test binary that had compiled a language
/// runtime (hundreds of MiB) would make every child it measures look that
/// large.
extern "C" fn report_own_peak() {
    use std::io::Write;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(kib) = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    {
        let _ = writeln!(std::io::stderr(), "{OWN_PEAK} {kib}");
    }
}

/// The peak a measured child reported of itself, in MiB.
fn own_peak_mib(m: &Measured) -> Option<f64> {
    m.stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(OWN_PEAK))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|kib| kib as f64 / 1024.0)
}

/// The harness's name of test `name` in the module `module_path!()` gave
/// (its first segment, the test binary's crate, is not part of it).
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, inner)) => format!("{inner}::{name}"),
        None => name.to_string(),
    }
}

/// Run the test `name` of this test binary (in `module`, from
/// `module_path!()`) alone in a child process (with `env` added to its
/// environment), so its time and peak memory are its own; panics, with the
/// child's output, unless that test ran and passed.
pub fn in_child(module: &str, name: &str, env: &[(&str, &str)]) -> Measured {
    let mut cmd = std::process::Command::new(std::env::current_exe().expect("test binary"));
    let name = test_name(module, name);
    cmd.args([name.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_CASE, "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let m = run_measured(&mut cmd);
    eprintln!(
        "{name}: {:.1} s, peak RSS {:.0} MiB (its own: {})",
        m.wall.as_secs_f64(),
        m.peak_rss_mib(),
        own_peak_mib(&m).map_or("not reported".into(), |p| format!("{p:.0} MiB"))
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

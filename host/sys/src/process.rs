//! Child processes the host runs on behalf of others (cargo for guest
//! builds, external coding agents): each in its own process group with its
//! output going to files (so a grandchild holding a pipe cannot hang us),
//! killed as a whole group on timeout *and* when it returns (nothing it
//! started in the background outlives it; a process that left the group
//! with `setsid` escapes this, which is why untrusted work also runs in a
//! jail, whose PID namespace dies with it: [`crate::jail`]), with the
//! variables a cargo-built host would leak removed from its environment.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::fsutil::PathError;

/// Variables a host built by cargo exports that would leak into a guest
/// build (or an agent's) and retarget it.
pub const CARGO_LEAKS: [&str; 4] = [
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
];

/// Whether an inherited variable would change what a guest build makes:
/// the [`CARGO_LEAKS`], the settings that change the compiled bytes
/// (`CARGO_INCREMENTAL`, any `CARGO_PROFILE_*`, `CARGO_BUILD_*` or
/// `CARGO_UNSTABLE_*`; `RUSTC_BOOTSTRAP`, which makes a stable compiler
/// behave as a nightly one, whose default symbol mangling differs), and a
/// compiler wrapper with its arguments (`RUSTC_WRAPPER`,
/// `RUSTC_WORKSPACE_WRAPPER`, `CLIPPY_ARGS`: CI lints the host's own build
/// through clippy-driver, which must not lint, or fail, a guest's). A
/// component is named by the hash of its bytes, so the same source must
/// build to the same bytes whatever the operator's shell (or CI) exports.
pub fn is_cargo_leak(name: &str) -> bool {
    CARGO_LEAKS.contains(&name)
        || name == "CARGO_INCREMENTAL"
        || name.starts_with("CARGO_PROFILE_")
        || name.starts_with("CARGO_BUILD_")
        || name.starts_with("CARGO_UNSTABLE_")
        || matches!(
            name,
            "RUSTC_BOOTSTRAP" | "RUSTC_WRAPPER" | "RUSTC_WORKSPACE_WRAPPER" | "CLIPPY_ARGS"
        )
}

/// Remove every [`is_cargo_leak`] variable of this process from a
/// command's environment.
pub fn scrub_cargo_env(cmd: &mut Command) {
    scrub_names(cmd, std::env::vars_os().map(|(k, _)| k));
}

fn scrub_names(cmd: &mut Command, names: impl IntoIterator<Item = std::ffi::OsString>) {
    for var in CARGO_LEAKS {
        cmd.env_remove(var);
    }
    for name in names {
        if name.to_str().is_some_and(is_cargo_leak) {
            cmd.env_remove(name);
        }
    }
}

/// A scratch directory under the system temp dir, removed on drop.
pub struct Scratch(PathBuf);

impl Scratch {
    /// A fresh, uniquely named directory (`tag` appears in its name).
    pub fn new(tag: &str) -> Result<Scratch, PathError> {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "ecdysis-{tag}-{}-{nanos}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| PathError::new("create", &dir, e))?;
        Ok(Scratch(dir))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A finished (or killed) process.
#[derive(Debug)]
pub struct ProcOutput {
    /// Its exit status (`None` when it was killed on timeout).
    pub status: Option<ExitStatus>,
    /// Everything it wrote to stdout.
    pub stdout: String,
    /// Everything it wrote to stderr.
    pub stderr: String,
    /// Whether the timeout killed it.
    pub timed_out: bool,
    /// Why a watch (e.g. a disk quota) killed it.
    pub stopped: Option<String>,
    /// How long it ran.
    pub elapsed: Duration,
}

impl ProcOutput {
    /// Whether it exited successfully.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
}

/// Kill a whole process group.
pub fn kill_group(pgid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Run `cmd` in its own process group, killing the whole group after
/// `timeout`, or when `cmd` exits (whatever it left running in the
/// background); output is collected from files. Blocking: call it from
/// `spawn_blocking` in async code.
pub fn run_with_timeout(cmd: Command, timeout: Duration) -> std::io::Result<ProcOutput> {
    run_watched(cmd, timeout, &mut || None)
}

/// Most bytes of a process's stdout (and of its stderr) read back: a
/// process may write gigabytes (up to its file-size limit).
pub const OUTPUT_READ_LIMIT: u64 = 32 << 20;

/// Every how many polls (of 25 ms) [`run_watched`] calls its watch.
const WATCH_EVERY: u32 = 8;

/// [`run_with_timeout`], also calling `watch` every ~200 ms while the
/// process runs: when it names a reason, the group is killed and the
/// reason is [`ProcOutput::stopped`].
pub fn run_watched(
    mut cmd: Command,
    timeout: Duration,
    watch: &mut dyn FnMut() -> Option<String>,
) -> std::io::Result<ProcOutput> {
    let scratch = Scratch::new("proc").map_err(|e| e.source)?;
    let out_path = scratch.path().join("stdout");
    let err_path = scratch.path().join("stderr");
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path)?)
        .stderr(std::fs::File::create(&err_path)?)
        .process_group(0);
    let started = Instant::now();
    let mut child = cmd.spawn()?;
    let deadline = started + timeout;
    let mut timed_out = false;
    let mut stopped = None;
    let mut polls = 0u32;
    let status = loop {
        polls = polls.wrapping_add(1);
        if polls.is_multiple_of(WATCH_EVERY)
            && let Some(why) = watch()
        {
            stopped = Some(why);
            kill_group(child.id());
            let _ = child.kill();
            break child.wait().ok();
        }
        if has_exited(child.id()) {
            // Not reaped yet, so its id (the group's) cannot be reused:
            // this reaches only what it left running in its group.
            kill_group(child.id());
            break Some(child.wait()?);
        }
        if Instant::now() >= deadline {
            timed_out = true;
            // The group id is the child's pid (process_group(0)).
            kill_group(child.id());
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(25));
    };
    let read = |p: &Path| {
        let mut s = Vec::new();
        if let Ok(f) = std::fs::File::open(p) {
            let _ = f.take(OUTPUT_READ_LIMIT).read_to_end(&mut s);
        }
        String::from_utf8_lossy(&s).into_owned()
    };
    Ok(ProcOutput {
        status,
        stdout: read(&out_path),
        stderr: read(&err_path),
        timed_out,
        stopped,
        elapsed: started.elapsed(),
    })
}

/// Whether the child `pid` has exited, without reaping it (`WNOWAIT`).
fn has_exited(pid: u32) -> bool {
    // SAFETY: waitid writes only into `info`, a zeroed siginfo_t we own.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        r == 0 && info.si_pid() != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_that_change_a_guests_bytes_are_scrubbed_and_others_kept() {
        let mut cmd = Command::new("true");
        let names = [
            "CARGO_INCREMENTAL",
            "CARGO_PROFILE_DEV_DEBUG",
            "CARGO_PROFILE_RELEASE_LTO",
            "CARGO_BUILD_JOBS",
            "RUSTFLAGS",
            "RUSTC_WORKSPACE_WRAPPER",
            "CLIPPY_ARGS",
            "RUSTC_BOOTSTRAP",
            "CARGO_UNSTABLE_BUILD_STD",
            "CARGO_HOME",
            "PATH",
        ];
        scrub_names(&mut cmd, names.iter().map(std::ffi::OsString::from));
        let removed: Vec<String> = cmd
            .get_envs()
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        for leak in &names[..9] {
            assert!(
                removed.iter().any(|r| r == leak),
                "{leak} kept: {removed:?}"
            );
        }
        // Where cargo and its registry live is not a build setting.
        assert!(!removed.iter().any(|r| r == "CARGO_HOME" || r == "PATH"));
    }

    #[test]
    fn processes_time_out_and_are_killed_with_their_children() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 30 & sleep 30"]);
        let out = run_with_timeout(cmd, Duration::from_millis(300)).unwrap();
        assert!(out.timed_out);
        assert!(out.status.is_none());
        assert!(out.elapsed < Duration::from_secs(10), "{:?}", out.elapsed);

        // What a process leaves running in the background dies with it.
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "(sleep 1; echo late > left.txt) & echo started"])
            .current_dir(dir.path());
        let out = run_with_timeout(cmd, Duration::from_secs(10)).unwrap();
        assert!(out.success() && out.stdout == "started\n");
        std::thread::sleep(Duration::from_millis(1500));
        assert!(!dir.path().join("left.txt").exists());

        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo out; echo err >&2"]);
        let out = run_with_timeout(cmd, Duration::from_secs(10)).unwrap();
        assert!(out.success());
        assert_eq!(
            (out.stdout.as_str(), out.stderr.as_str()),
            ("out\n", "err\n")
        );
    }
}

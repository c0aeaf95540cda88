//! The kernel limits of a worker process and what the parent learns when it
//! dies: `setrlimit` in the child before `exec`, `wait4` for its exit status
//! and peak resident set size.
//!
//! Memory is capped with `RLIMIT_DATA`, not `RLIMIT_AS`: wasmtime reserves
//! gigabytes of inaccessible address space for guard regions and the
//! instance pool, which `RLIMIT_AS` counts and `RLIMIT_DATA` (Linux ≥ 4.7:
//! private writable mappings, heap included) does not. So the cap bounds
//! what the worker can actually commit. A cgroup would also bound page
//! cache and kernel memory, but needs a delegated cgroup tree, which
//! containers and CI machines rarely give an unprivileged process; rlimits
//! work everywhere, so they are what we use.

use std::time::Duration;

pub use rustix::process::Resource;

/// Set an `rlimit` pair (also the jails' limits, `crate::jail`);
/// `u64::MAX` is no limit. A bare system call that allocates nothing, so it
/// may run between fork and exec.
pub fn set(resource: Resource, soft: u64, hard: u64) -> std::io::Result<()> {
    let value = |v: u64| (v != u64::MAX).then_some(v);
    let limit = rustix::process::Rlimit {
        current: value(soft),
        maximum: value(hard),
    };
    rustix::process::setrlimit(resource, limit)?;
    Ok(())
}

/// Limits applied in the child between `fork` and `exec` (only
/// async-signal-safe calls): memory, an initial CPU budget (the worker
/// moves it before each episode), no core dumps (a SIGXCPU or SIGABRT would
/// otherwise write one per crash), and SIGKILL when the parent thread that
/// spawned it ends.
pub fn apply_in_child(memory_bytes: u64, startup_cpu: Duration) -> std::io::Result<()> {
    set(Resource::Data, memory_bytes, memory_bytes)?;
    set(Resource::Core, 0, 0)?;
    set(Resource::Cpu, startup_cpu.as_secs().max(1), u64::MAX)?;
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    Ok(())
}

/// CPU seconds (user + system) this process has used.
pub fn own_cpu() -> Duration {
    // SAFETY: getrusage fills the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// In the worker: allow `budget` more CPU time from now (soft
/// `RLIMIT_CPU`; past it the kernel sends SIGXCPU, which kills the worker).
/// A long-lived worker runs many episodes, and the limit counts the whole
/// process's time, so it moves forward before each one.
pub fn allow_cpu(budget: Duration) -> std::io::Result<()> {
    let until = own_cpu() + budget;
    // Whole seconds, rounded up: the kernel checks at second granularity.
    let secs = until.as_secs() + u64::from(until.subsec_nanos() > 0);
    set(Resource::Cpu, secs, u64::MAX)
}

/// How a worker process ended, as `wait4` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// Its exit code, if it exited.
    pub code: Option<i32>,
    /// The signal that killed it, if one did.
    pub signal: Option<i32>,
    /// Its peak resident set size in KiB (`ru_maxrss`).
    pub peak_rss_kib: u64,
    /// CPU time it used, user + system.
    pub cpu: Duration,
}

/// Reap `pid`, waiting at most `grace` for it to exit by itself before it
/// is killed: a worker whose pipe closed is dying anyway.
pub fn reap(pid: i32, grace: Duration) -> Exit {
    let deadline = std::time::Instant::now() + grace;
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid out-parameter.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: wait4 on our own child with valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break;
        }
        if r < 0 {
            // Already reaped or not ours: nothing more to learn.
            return Exit {
                code: None,
                signal: None,
                peak_rss_kib: 0,
                cpu: Duration::ZERO,
            };
        }
        if std::time::Instant::now() >= deadline {
            kill(pid);
            // SAFETY: as above, blocking this time.
            unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Exit {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
        peak_rss_kib: usage.ru_maxrss.max(0) as u64,
        cpu: tv(usage.ru_utime) + tv(usage.ru_stime),
    }
}

/// SIGKILL a worker's whole process group (it leads its own group, so
/// anything it started goes too).
pub fn kill(pid: i32) {
    use rustix::process::{Pid, Signal, kill_process, kill_process_group};
    // Either may already be gone: nothing to do then.
    if let Some(pid) = Pid::from_raw(pid) {
        let _ = kill_process_group(pid, Signal::KILL);
        let _ = kill_process(pid, Signal::KILL);
    }
}

/// A signal's name, for messages.
pub fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGXCPU => "SIGXCPU".into(),
        libc::SIGABRT => "SIGABRT".into(),
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGBUS => "SIGBUS".into(),
        libc::SIGILL => "SIGILL".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGPIPE => "SIGPIPE".into(),
        libc::SIGFPE => "SIGFPE".into(),
        other => format!("signal {other}"),
    }
}

//! CPU time spent inside the simulated participants (the `sim:` agents and
//! the scripted user). They stand in for remote models, so benchmarks of
//! the host's own cost subtract it: a real endpoint's compute is not the
//! host's.

use std::sync::atomic::{AtomicU64, Ordering};

static SIMULATED_NANOS: AtomicU64 = AtomicU64::new(0);

/// This thread's CPU time, in nanoseconds (Linux `CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu_nanos() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes one `timespec` through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Run `f` (a simulated participant's turn, synchronous) and add the CPU
/// time it took on this thread to the process-wide total.
pub fn metered<T>(f: impl FnOnce() -> T) -> T {
    let before = thread_cpu_nanos();
    let out = f();
    let spent = thread_cpu_nanos().saturating_sub(before);
    SIMULATED_NANOS.fetch_add(spent, Ordering::Relaxed);
    out
}

/// CPU seconds the simulated participants have used so far in this process.
pub fn simulated_cpu_seconds() -> f64 {
    SIMULATED_NANOS.load(Ordering::Relaxed) as f64 / 1e9
}

//! CPU time spent inside the simulated participants (the `sim:` agents and
//! the scripted user). They stand in for remote models, so benchmarks of
//! the host's own cost subtract it: a real endpoint's compute is not the
//! host's.

use std::sync::atomic::{AtomicU64, Ordering};

static SIMULATED_NANOS: AtomicU64 = AtomicU64::new(0);

/// This thread's CPU time, in nanoseconds (Linux `CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu_nanos() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
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

//! Where the library's `tracing` events go: progress and security lines
//! (the targets of [`ecdysis_sys::progress`]) to stderr as plain lines, the
//! rest as logs at the level `-v`/`-q` or `ECDYSIS_LOG` choose. Two layers
//! on one registry, as cargo keeps its status lines apart from its logs.

use ecdysis_sys::progress::{PROGRESS, SECURITY, is_progress_target};
use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets, filter_fn};
use tracing_subscriber::prelude::*;

/// Install the process's subscriber. `quiet` hides progress lines (never
/// security ones); `log_level` is the default of the log layer.
pub fn init(quiet: bool, log_level: &str) {
    let lines = tracing_subscriber::fmt::layer()
        .without_time()
        .with_level(false)
        .with_target(false)
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .with_filter(
            Targets::new()
                .with_target(
                    PROGRESS,
                    if quiet {
                        LevelFilter::OFF
                    } else {
                        LevelFilter::INFO
                    },
                )
                .with_target(SECURITY, LevelFilter::WARN),
        );
    let env = EnvFilter::try_from_env("ECDYSIS_LOG").unwrap_or_else(|_| EnvFilter::new(log_level));
    // The most verbose level any layer shows. `init` bridges the `log`
    // crate at the subscriber's hint, and without one here every record of
    // wasmtime and cranelift (trace-level, per compiled function) would be
    // built and filtered: most of a language runtime's compile time.
    let hint = env
        .max_level_hint()
        .unwrap_or(LevelFilter::TRACE)
        .max(LevelFilter::INFO);
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(env)
        .with_filter(filter_fn(|m| !is_progress_target(m.target())).with_max_level_hint(hint));
    tracing_subscriber::registry().with(lines).with(logs).init();
}

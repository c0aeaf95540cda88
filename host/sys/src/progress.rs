//! How library code reports what a long job is doing: `tracing` events
//! under two targets the binary renders as plain lines. The library never
//! writes to the terminal itself, so an embedding program (the service, a
//! test, another runtime) decides where progress goes, and `--quiet` is one
//! filter in the CLI instead of a flag passed down every call.
//!
//! ```
//! tracing::info!(target: ecdysis_sys::progress::PROGRESS, "round 2 of 3: building the candidate");
//! tracing::warn!(target: ecdysis_sys::progress::SECURITY, "WARNING: running without a jail");
//! ```

/// Lines a person watching a long job reads (info level): what is being
/// evaluated, decile counts with an ETA, round outcomes, compiler output of
/// a build that was asked to show it. The CLI prints them bare and hides
/// them under `--quiet`.
pub const PROGRESS: &str = "ecdysis::progress";

/// Security downgrades the operator allowed (warn level): a coder sharing
/// the host's network, builds without a jail. The CLI prints them bare even
/// under `--quiet`, because a run that is less contained than its operator
/// may assume must say so.
pub const SECURITY: &str = "ecdysis::security";

/// Whether `target` is one of the two above (the CLI's log layer leaves
/// them to the plain-line layer).
pub fn is_progress_target(target: &str) -> bool {
    target == PROGRESS || target == SECURITY
}

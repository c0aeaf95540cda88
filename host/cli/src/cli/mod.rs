//! Subcommand implementations of the `ecdysis-host` binary.

pub mod ablate;
pub mod bench;
pub mod bench_proxy;
pub mod bench_race;
pub mod bench_runner;
pub mod env;
pub mod error_text;
pub mod eval_args;
pub mod experiment;
pub mod export;
pub mod failures;
pub mod harness_arg;
pub mod isolate;
pub mod limits;
pub mod logging;
pub mod proxy;
pub mod report;
pub mod run;
pub mod serve;
pub mod track;
pub mod train;
pub mod vectors;
pub mod watch;

/// Print one line of output; a closed pipe (`| head`) ends the process
/// quietly instead of panicking.
pub fn emit(line: impl std::fmt::Display) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{line}")
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(0);
    }
}

/// A run's progress display: nothing under `--quiet`, the bar on a
/// terminal, else lines every 10% (logs, CI, pipes), which come through
/// [`logging`]'s plain-line layer.
pub fn progress_display(quiet: bool) -> ecdysis_runner::eval::ProgressDisplay {
    use ecdysis_runner::eval::ProgressDisplay;
    use std::io::IsTerminal;
    if quiet {
        ProgressDisplay::Off
    } else if std::io::stderr().is_terminal() {
        ProgressDisplay::Bar
    } else {
        ProgressDisplay::Lines
    }
}

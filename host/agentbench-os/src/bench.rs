//! The machine bench: how long an OS-interaction machine takes to start,
//! to answer its first command (its login shell starts then) and to be
//! torn down, next to a bare bubblewrap sandbox running `true` in the same
//! run (the floor any bubblewrap sandbox pays).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ecdysis_sys::jail::Jail;

use super::machine::{Machine, MachineError, MachineLimits};

/// Medians over the machines timed.
#[derive(Clone, Debug, serde::Serialize)]
pub struct MachineBenchReport {
    /// Machines timed.
    pub machines: usize,
    /// `Machine::start`: files prepared, sandbox and supervisor up.
    pub start: Duration,
    /// The first command (`true`), its login shell started on the way.
    pub first_command: Duration,
    /// A later command (`echo`).
    pub next_command: Duration,
    /// Dropping the machine: every process killed, its files removed.
    pub teardown: Duration,
    /// `bwrap --unshare-all ... true`, spawned and waited for.
    pub bare_bwrap: Duration,
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Times `n` machines one after another, each fully torn down before the
/// next, with a bare bubblewrap `true` between them.
pub fn run(n: usize) -> Result<MachineBenchReport, MachineError> {
    let jail = Jail::get()?;
    let (mut start, mut first, mut next, mut teardown, mut bare) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n.max(1) {
        let t = Instant::now();
        let mut m = Machine::start(MachineLimits::default())?;
        start.push(t.elapsed());
        let t = Instant::now();
        m.shell("true")?;
        first.push(t.elapsed());
        let t = Instant::now();
        m.shell("echo hi")?;
        next.push(t.elapsed());
        let t = Instant::now();
        drop(m);
        teardown.push(t.elapsed());

        let t = Instant::now();
        let mut cmd = Command::new(jail.program());
        cmd.args([
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
        ]);
        ecdysis_sys::jail::bind_system_programs(&mut cmd);
        let status = cmd
            .args(["--proc", "/proc", "--dev", "/dev", "--", "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| MachineError::Supervisor(format!("bare bubblewrap: {e}")))?;
        if !status.success() {
            return Err(MachineError::Supervisor(format!(
                "bare bubblewrap exited with {status}"
            )));
        }
        bare.push(t.elapsed());
    }
    Ok(MachineBenchReport {
        machines: start.len(),
        start: median(start),
        first_command: median(first),
        next_command: median(next),
        teardown: median(teardown),
        bare_bwrap: median(bare),
    })
}

//! One episode's Linux machine: a bubblewrap sandbox with a persistent
//! login shell on a pseudo-terminal, where upstream uses a fresh Docker
//! container per sample.
//!
//! What the machine is:
//!
//! - the host's programs and libraries read-only (`/usr`, `/bin`, `/lib*`);
//! - its own writable `/etc` (a copy of the host's without its secrets:
//!   `shadow`/`gshadow` are rewritten with locked passwords, SSH host keys
//!   and private TLS keys are left out), `/root` (Debian's root dotfiles),
//!   `/home` and `/var` (a skeleton), all in one per-episode directory on
//!   the host that is removed when the machine is dropped, and a size-capped
//!   tmpfs `/tmp`;
//! - its own PID, IPC, UTS, mount and network namespaces (loopback only),
//!   a fresh `/proc` and a minimal `/dev`;
//! - the jail's limits ([`JailLimits`]): address space, CPU time and file
//!   size per process, tasks alive at once (a pids cgroup as root), set as
//!   hard limits, so `ulimit` inside cannot raise them;
//! - as root on the host, the processes inside are root with Docker's
//!   default capabilities minus raw sockets and device nodes (so `useradd`,
//!   `chown`, `su` work as in upstream's container); as another user, the
//!   machine is a user namespace mapping that user to root (files of other
//!   users cannot be made there: the tasks that need them are listed in
//!   the docs).
//!
//! Inside, a small supervisor (a bash script, the sandbox's first process)
//! runs what the host asks for: a task's init, example and check scripts,
//! each as its own `bash -c`/`python3 -c` process as root in `/root` with
//! its stdout captured (upstream's `docker exec`), and the agent's login
//! shell on a pseudo-terminal of the machine's own (util-linux `script`
//! makes it and relays it through two FIFOs the host holds: a fresh pair,
//! and a fresh terminal, for every shell). The host types each agent
//! command into that shell followed by a marker command and reads until
//! the marker comes back; a command that has not finished by the timeout
//! is interrupted (Ctrl-C), and a shell that does not come back, exited or
//! was killed is replaced by a fresh one. Killing bubblewrap kills every
//! process of the machine with its PID namespace.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::time::{Duration, Instant};

use ecdysis_sys::jail::{Jail, JailError, JailLimits, LimitGuard, apply_limits};

use super::task::{Language, Script};

/// Why a machine could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    /// No usable bubblewrap (the machines need it, there is no fallback).
    #[error("no sandbox for the OS machine: {0}")]
    NoJail(#[from] JailError),
    /// Preparing the machine's files failed.
    #[error("preparing the machine's {what}: {source}")]
    Prepare {
        /// What was being prepared.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The sandbox did not start or its supervisor stopped answering.
    #[error("the OS machine's supervisor {0}")]
    Supervisor(String),
    /// A script did not finish in time (the machine is unusable after it).
    #[error("a {what} script did not finish within {} s", .timeout.as_secs())]
    ScriptTimeout {
        /// `init`, `check`, ...
        what: String,
        /// The limit.
        timeout: Duration,
    },
}

/// Limits of one machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MachineLimits {
    /// Per-process limits and the task count.
    pub jail: JailLimits,
    /// Wall time of one agent command before it is interrupted.
    pub command_timeout: Duration,
    /// Wall time of one init, example or check script.
    pub script_timeout: Duration,
    /// Most bytes of one command's output kept (the rest is read and
    /// dropped; the model sees at most [`OUTPUT_LIMIT`] characters anyway).
    pub output_bytes: usize,
    /// Most bytes the machine's writable directories may hold on the host
    /// (`/tmp` is a tmpfs of its own size, [`JailLimits::tmp_size`]).
    pub disk: u64,
}

impl Default for MachineLimits {
    /// Upstream's 30 s per command; room for a shell, a few pipelines and
    /// a Python checker, far below what would hurt the host.
    fn default() -> Self {
        MachineLimits {
            jail: JailLimits {
                memory: 1 << 30,
                cpu_secs: 60,
                file_size: 64 << 20,
                processes: 128,
                tmp_size: 256 << 20,
            },
            command_timeout: Duration::from_secs(30),
            script_timeout: Duration::from_secs(30),
            output_bytes: 64 << 10,
            disk: 256 << 20,
        }
    }
}

/// Upstream's cut: longer outputs keep their first [`OUTPUT_KEEP`]
/// characters and get [`TRUNCATED`] appended.
pub const OUTPUT_LIMIT: usize = 800;
/// Characters kept of a cut output.
pub const OUTPUT_KEEP: usize = 780;
/// What follows a cut output.
pub const TRUNCATED: &str = "\n[truncated because the output is too long]";

/// What one script run printed and how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptRun {
    /// Exit status (128 + signal for a killed process).
    pub status: i32,
    /// Its standard output (lossy UTF-8, at most the output limit).
    pub stdout: String,
}

/// What one agent command printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandRun {
    /// The cleaned output (escape sequences removed, not yet cut).
    pub output: String,
    /// The command was interrupted at the timeout.
    pub timed_out: bool,
    /// The shell was gone afterwards (killed, or exited) and a fresh one
    /// replaced it.
    pub shell_restarted: bool,
    /// A limit of the machine the command hit; every process of the
    /// machine was then stopped (files stay) and the shell replaced.
    pub limit: Option<String>,
}

/// The capabilities processes keep inside as root: Docker's default set
/// (what upstream's container has) without `NET_RAW` and `MKNOD`.
const ROOT_CAPS: [&str; 11] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_AUDIT_WRITE",
];

/// Files of the host's `/etc` a machine never gets (secrets).
const ETC_SECRETS: [&str; 8] = [
    "shadow",
    "shadow-",
    "gshadow",
    "gshadow-",
    "ssh",
    "ssl/private",
    "sudoers.d",
    "security/opasswd",
];

/// Events (answer lines, terminal chunks) queued before their readers wait.
const EVENTS_QUEUED: usize = 256;

/// Longest supervisor answer line read.
const ANSWER_BYTES: u64 = 256;

/// Supervisor answers kept unclaimed (the rest are dropped, oldest first).
const ANSWERS_KEPT: usize = 64;

/// The signals a terminal's job control sends, given back their default
/// action in the machine (see where it starts).
const JOB_SIGNALS: [libc::c_int; 7] = [
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
];

/// How long an interrupted shell has to print its prompt again before it is
/// replaced (which loses the agent's directory and variables).
const INTERRUPT_GRACE: Duration = Duration::from_secs(2);

/// The machine's host name (upstream: the container id).
pub const HOSTNAME: &str = "ecdysis-os";

/// `PATH` of the scripts and the shell (the Ubuntu image's).
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The supervisor, the sandbox's first process. Requests come on its stdin
/// one per line, `<id> <kind>`; the job's code and NUL-separated arguments
/// are files in the read-only jobs folder; it answers `<id> <value>` on
/// its stdout (a script's exit status; for a shell, `exit <id>` when it
/// ends). A shell reads `shell-<id>.in` and writes `shell-<id>.out`, FIFOs
/// the host made.
const SUPERVISOR: &str = r#"exec 2>/dev/null
while IFS=' ' read -r id kind; do
  job=/run/ecdysis/jobs/$id
  case $kind in
    bash|python)
      args=()
      [ -s "$job/args" ] && mapfile -d '' args < "$job/args"
      code=$(cat "$job/code"; printf x); code=${code%x}
      if [ "$kind" = bash ]; then
        (cd /root && exec bash -c "$code" -- "${args[@]}") </dev/null >"/run/ecdysis/out/$id"
      else
        (cd /root && exec python3 -c "$code" "${args[@]}") </dev/null >"/run/ecdysis/out/$id"
      fi
      echo "$id $?";;
    shell)
      # Job control on for this launch only: without it an asynchronous
      # command ignores SIGINT, and so would everything the shell runs.
      set -m
      # Output first: the host takes an open input as "the output has
      # its writer".
      (cd /root && script -qfe -c 'exec bash --login --noediting' /dev/null \
        >"/run/ecdysis/out/shell-$id.out" 2>&1 <"/run/ecdysis/out/shell-$id.in"
       echo "exit $id") &
      set +m
      echo "$id started";;
    kill)
      kill -9 $(cat "$job/code")
      echo "$id $?";;
    reset)
      # Every process but this one and the namespace's first (kill is a
      # builtin: it needs no fork, whatever holds the process limit).
      kill -9 -1
      echo "$id 0";;
  esac
done
"#;

/// What the machine's readers hand the host.
enum Event {
    /// A line of the supervisor's answers.
    Answer(String),
    /// Bytes from a shell's terminal (the shell's job id).
    Output(u64, Vec<u8>),
}

/// The agent's current shell.
#[derive(Debug)]
struct Shell {
    /// The supervisor's job that started it (its `exit <job>` line says it
    /// ended).
    job: u64,
    /// The shell's PID inside the machine.
    pid: u32,
    /// What is typed into its terminal.
    input: std::fs::File,
}

/// One episode's machine. Dropping it kills everything in it and removes
/// its files.
pub struct Machine {
    limits: MachineLimits,
    /// The per-episode directory on the host (removed on drop).
    dir: tempfile::TempDir,
    bwrap: Child,
    control: ChildStdin,
    events: Receiver<Event>,
    /// Terminal bytes that arrived between commands (late output of
    /// background jobs: the next command's output starts with them).
    pending: Vec<u8>,
    /// Supervisor answers not yet asked for.
    answers: Vec<String>,
    /// Sends terminal bytes to [`Machine::events`] (one reader per shell).
    events_tx: SyncSender<Event>,
    limit_guard: LimitGuard,
    /// Forks failed at the process limit before the current command.
    process_hits: u64,
    shell: Option<Shell>,
    /// The next job's id once drawn (0: not yet).
    next_job: u64,
    /// Distinguishes this machine's end-of-command markers.
    marker: String,
    /// Markers handed out (each command waits for its own: a late marker of
    /// an interrupted command is not the next one's).
    markers: u64,
    /// Stops the disk watchdog when the machine goes.
    watchdog_stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Set by the watchdog when it stopped the machine over its quota.
    over_quota: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Machine")
            .field("dir", &self.dir.path())
            .field("shell", &self.shell)
            .finish_non_exhaustive()
    }
}

fn prepare(what: &str) -> impl FnOnce(std::io::Error) -> MachineError + '_ {
    move |source| MachineError::Prepare {
        what: what.to_string(),
        source,
    }
}

/// Copies the host's `/etc` into `to`, without [`ETC_SECRETS`] and without
/// what this process cannot read, then gives it fresh `shadow`/`gshadow`
/// files (every account locked), a host name and a hosts file.
fn make_etc(to: &Path) -> std::io::Result<()> {
    copy_tree(Path::new("/etc"), to, &|rel| {
        ETC_SECRETS.iter().any(|s| rel == Path::new(s))
    })?;
    let names = |file: &str| -> Vec<String> {
        std::fs::read_to_string(to.join(file))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(':').next())
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect()
    };
    let shadow: String = names("passwd")
        .iter()
        .map(|n| format!("{n}:*:20000:0:99999:7:::\n"))
        .collect();
    let gshadow: String = names("group")
        .iter()
        .map(|n| format!("{n}:*::\n"))
        .collect();
    write_mode(&to.join("shadow"), shadow.as_bytes(), 0o640)?;
    write_mode(&to.join("gshadow"), gshadow.as_bytes(), 0o640)?;
    write_mode(
        &to.join("hostname"),
        format!("{HOSTNAME}\n").as_bytes(),
        0o644,
    )?;
    write_mode(
        &to.join("hosts"),
        format!("127.0.0.1\tlocalhost\n127.0.1.1\t{HOSTNAME}\n::1\tlocalhost ip6-localhost ip6-loopback\n")
            .as_bytes(),
        0o644,
    )?;
    // The host's mtab is a link into its /proc; the machine's is its own.
    let _ = std::fs::remove_file(to.join("mtab"));
    std::os::unix::fs::symlink("/proc/self/mounts", to.join("mtab"))
}

/// Where the machines' directories go: `/dev/shm` where it is a writable
/// directory (a machine is ~1,200 small files, and making them on a disk
/// file system costs most of a machine's start), else the temp directory.
fn machines_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let writable = std::fs::metadata(shm)
        .map(|m| m.is_dir() && !m.permissions().readonly())
        .unwrap_or(false);
    if writable {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

fn write_mode(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::remove_file(path);
    std::fs::write(path, bytes)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Copies a tree: directories, regular files (with their modes) and
/// symlinks (as symlinks); skips what `skip` names (relative paths) and
/// what cannot be read.
fn copy_tree(from: &Path, to: &Path, skip: &dyn Fn(&Path) -> bool) -> std::io::Result<()> {
    fn walk(
        root: &Path,
        dir: &Path,
        to: &Path,
        skip: &dyn Fn(&Path) -> bool,
    ) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap_or(&path);
            if skip(rel) {
                continue;
            }
            let dest = to.join(rel);
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            let ft = meta.file_type();
            if ft.is_symlink() {
                if let Ok(target) = std::fs::read_link(&path) {
                    std::os::unix::fs::symlink(target, &dest)?;
                }
            } else if ft.is_dir() {
                std::fs::create_dir(&dest)?;
                walk(root, &path, to, skip)?;
                std::fs::set_permissions(
                    &dest,
                    std::fs::Permissions::from_mode(meta.permissions().mode()),
                )?;
            } else if ft.is_file() && meta.permissions().mode() & 0o004 == 0 {
                // Not world-readable: a secret (a key, a credential), which
                // the host may read only because it runs as root.
                continue;
            } else if ft.is_file() && std::fs::copy(&path, &dest).is_err() {
                // Unreadable to this process: not part of the machine.
                let _ = std::fs::remove_file(&dest);
            }
        }
        Ok(())
    }
    std::fs::create_dir_all(to)?;
    walk(from, from, to, skip)
}

/// `/root` as Debian's base-files makes it (upstream's image: Ubuntu's,
/// the same files), else the skeleton home.
fn make_root_home(to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    let base = Path::new("/usr/share/base-files");
    for (src, name) in [("dot.bashrc", ".bashrc"), ("dot.profile", ".profile")] {
        let from = base.join(src);
        let from = if from.is_file() {
            from
        } else {
            Path::new("/etc/skel").join(name)
        };
        if from.is_file() {
            std::fs::copy(&from, to.join(name))?;
        }
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o700))
}

/// A `/var` skeleton (the directories programs expect).
fn make_var(to: &Path) -> std::io::Result<()> {
    for d in [
        "log", "tmp", "lib", "cache", "mail", "spool", "backups", "local", "opt",
    ] {
        std::fs::create_dir_all(to.join(d))?;
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(to.join("tmp"), std::fs::Permissions::from_mode(0o1777))?;
    std::os::unix::fs::symlink("/run", to.join("run"))?;
    std::os::unix::fs::symlink("/run/lock", to.join("lock"))
}

/// A fresh episode directory on the host, laid out as the machine's
/// writable parts (`/etc`, `/root`, `/home`, `/var`, `/usr/local`, the
/// root) with the supervisor's control folders and script.
fn make_episode_dir() -> Result<tempfile::TempDir, MachineError> {
    let dir = tempfile::Builder::new()
        .prefix("ecdysis-os-")
        .tempdir_in(machines_dir())
        .map_err(prepare("episode directory"))?;
    let root = dir.path();
    make_etc(&root.join("etc")).map_err(prepare("/etc"))?;
    make_root_home(&root.join("root")).map_err(prepare("/root"))?;
    std::fs::create_dir_all(root.join("home")).map_err(prepare("/home"))?;
    make_var(&root.join("var")).map_err(prepare("/var"))?;
    for d in [
        "bin", "sbin", "lib", "include", "share", "etc", "src", "games",
    ] {
        std::fs::create_dir_all(root.join("usr/local").join(d)).map_err(prepare("/usr/local"))?;
    }
    for d in ["jobs", "out", "rootfs"] {
        std::fs::create_dir_all(root.join(d)).map_err(prepare("control folders"))?;
    }
    std::fs::write(root.join("supervisor"), SUPERVISOR).map_err(prepare("supervisor"))?;
    Ok(dir)
}

/// The bubblewrap command that runs the machine's supervisor on the
/// episode directory `root`: its namespaces, file systems, environment,
/// pipes and descriptor limit (the jail's limits are applied after).
fn machine_command(
    jail: &Jail,
    root: &Path,
    limits: &MachineLimits,
) -> Result<Command, MachineError> {
    let mut cmd = Command::new(jail.program());
    cmd.args(["--die-with-parent", "--new-session", "--clearenv"]);
    // The root first: tasks write straight into `/` (`mkdir /data`),
    // as in upstream's container; here that lands in the episode
    // directory, under the disk quota, not in bubblewrap's own tmpfs.
    cmd.arg("--bind").arg(root.join("rootfs")).arg("/");
    let as_root = rustix::process::geteuid().is_root();
    add_namespaces(&mut cmd, as_root);
    add_file_systems(&mut cmd, root, limits)?;
    for (k, v) in [
        ("PATH", PATH),
        ("HOME", "/root"),
        ("USER", "root"),
        ("LOGNAME", "root"),
        ("TERM", "xterm"),
        ("LANG", "C.UTF-8"),
        ("HOSTNAME", HOSTNAME),
    ] {
        cmd.args(["--setenv", k, v]);
    }
    cmd.arg("--");
    if as_root {
        // bubblewrap leaves the bounding set whole: a binary with file
        // capabilities (the host may have some) would get them back.
        // The bounding set is cut to the container's set first.
        let keep: Vec<String> = ROOT_CAPS
            .iter()
            .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
            .collect();
        cmd.args(["/usr/bin/setpriv", "--bounding-set"])
            .arg(format!("-all,{}", keep.join(",")))
            .arg("--");
    }
    cmd.args(["/bin/bash", "/run/ecdysis/supervisor"]);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    reset_signals_and_raise_descriptors(&mut cmd);
    Ok(cmd)
}

/// The machine's namespaces: as root on the host, every one but the user
/// namespace and Docker's capabilities ([`ROOT_CAPS`]); as another user, a
/// user namespace mapping that user to root.
fn add_namespaces(cmd: &mut Command, as_root: bool) {
    if as_root {
        // Every namespace but the user one: a user namespace would map
        // root alone, and `chown` to any other user would fail.
        cmd.args([
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
            // bubblewrap run by root keeps root's capabilities unless
            // told otherwise: none, then the container's set.
            "--cap-drop",
            "ALL",
        ]);
        for cap in ROOT_CAPS {
            cmd.args(["--cap-add", cap]);
        }
    } else {
        cmd.args(["--unshare-all", "--uid", "0", "--gid", "0"]);
    }
}

/// The machine's file systems after its root: `/usr` (the host's,
/// read-only, but for its own `/usr/local`), the episode directory's
/// `/etc`, `/root`, `/home` and `/var`, a fresh `/proc` with its writable
/// corners covered, capped tmpfs mounts, a read-only `/dev`, and the
/// supervisor's control folders.
fn add_file_systems(
    cmd: &mut Command,
    root: &Path,
    limits: &MachineLimits,
) -> Result<(), MachineError> {
    // `/usr` itself is the machine's (tasks write files straight into
    // it), its subdirectories the host's, read-only, except an empty
    // `/usr/local` of its own.
    cmd.arg("--bind").arg(root.join("usr")).arg("/usr");
    for entry in std::fs::read_dir("/usr")
        .map_err(prepare("/usr"))?
        .flatten()
    {
        let name = entry.file_name();
        if name != "local" {
            let path = entry.path();
            cmd.arg("--ro-bind").arg(&path).arg(&path);
        }
    }
    ecdysis_sys::jail::bind_system_links(cmd);
    for d in ["etc", "root", "home", "var"] {
        cmd.arg("--bind").arg(root.join(d)).arg(format!("/{d}"));
    }
    cmd.args(["--proc", "/proc"]);
    // Root of the host's user namespace could write the kernel's
    // settings through a fresh /proc: its writable corners are covered
    // with read-only binds (bubblewrap covers some, not all).
    for p in ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"] {
        if Path::new(p).exists() {
            cmd.args(["--ro-bind", p, p]);
        }
    }
    // Every writable file system is capped or counted: `--size` holds
    // for the next tmpfs only; /dev is made read-only (writes there
    // would land in memory no limit covers) with a small tmpfs for
    // /dev/shm; the root is the episode directory's `rootfs`, which
    // the disk quota counts.
    let tmp = limits.jail.tmp_size.max(1 << 20).to_string();
    cmd.args(["--dev", "/dev", "--size", &tmp, "--tmpfs", "/tmp"])
        .args([
            "--size",
            "16777216",
            "--tmpfs",
            "/run",
            "--dir",
            "/run/lock",
        ])
        .args([
            "--dir", "/opt", "--dir", "/srv", "--dir", "/mnt", "--dir", "/media",
        ])
        .arg("--ro-bind")
        .arg(root.join("jobs"))
        .arg("/run/ecdysis/jobs")
        .arg("--bind")
        .arg(root.join("out"))
        .arg("/run/ecdysis/out")
        .arg("--ro-bind")
        .arg(root.join("supervisor"))
        .arg("/run/ecdysis/supervisor")
        .args(["--remount-ro", "/dev"])
        .args(["--size", "16777216", "--tmpfs", "/dev/shm"])
        .args(["--hostname", HOSTNAME, "--chdir", "/root"]);
    Ok(())
}

/// In the child before exec: the job-control signals back to their
/// defaults, and descriptors as in upstream's container.
fn reset_signals_and_raise_descriptors(cmd: &mut Command) {
    // Descriptors as in upstream's container (Docker's default of 2^20;
    // a task writes to descriptor 123321) where the host lets the hard
    // limit go that high (root with CAP_SYS_RESOURCE), else the host's
    // hard limit.
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .maximum
        .unwrap_or(1 << 20);
    // SAFETY: between fork and exec the closure only calls signal and
    // setrlimit (both async-signal-safe); it allocates nothing.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            // A signal ignored at exec stays ignored, and a shell cannot
            // undo it: a host started in the background of a script
            // (SIGINT and SIGQUIT ignored) would hand the machine a shell
            // whose commands Ctrl-C cannot interrupt.
            for sig in JOB_SIGNALS {
                libc::signal(sig, libc::SIG_DFL);
            }
            use ecdysis_sys::rlimit::set;
            let nofile = rustix::process::Resource::Nofile;
            set(nofile, 1 << 20, 1 << 20).or_else(|_| set(nofile, hard, hard))
        });
    }
}

/// Reads the supervisor's answers, a line at a time, into `answers`.
fn spawn_answer_reader(stdout: std::process::ChildStdout, answers: SyncSender<Event>) {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            // At most a line's worth: anything longer is no answer of
            // the supervisor's (something inside wrote to its pipe).
            match (&mut reader)
                .take(ANSWER_BYTES)
                .read_until(b'\n', &mut line)
            {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let text = String::from_utf8_lossy(&line).trim_end().to_string();
            if answers.send(Event::Answer(text)).is_err() {
                break;
            }
        }
    });
}

/// Between commands nothing reads the machine, but a background job can
/// still write: a watchdog looks at the disk of `dir` every 50 ms and
/// kills the whole machine (bubblewrap, and with it its PID namespace)
/// past `hard` bytes. Returns the flag that stops it and the one it sets
/// when it killed the machine.
fn spawn_disk_watchdog(
    dir: PathBuf,
    bwrap: &Child,
    hard: u64,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    let watchdog_stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let over_quota = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (stop, over) = (watchdog_stop.clone(), over_quota.clone());
    let pid = rustix::process::Pid::from_raw(bwrap.id() as i32);
    std::thread::spawn(move || {
        use std::sync::atomic::Ordering;
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
            if !stop.load(Ordering::Relaxed) && usage_of(&dir) > hard {
                over.store(true, Ordering::Relaxed);
                if let Some(pid) = pid {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
                break;
            }
        }
    });
    (watchdog_stop, over_quota)
}

impl Machine {
    /// Starts a fresh machine (its shell starts with the first command).
    pub fn start(limits: MachineLimits) -> Result<Machine, MachineError> {
        let jail = Jail::get()?;
        let dir = make_episode_dir()?;
        let root = dir.path();
        let mut cmd = machine_command(jail, root, &limits)?;
        let guard = apply_limits(&mut cmd, &limits.jail, jail.process_limiter())?;
        let mut bwrap = cmd
            .spawn()
            .map_err(|e| MachineError::Supervisor(format!("did not start: {e}")))?;
        let control = bwrap.stdin.take().expect("piped stdin");
        let stdout = bwrap.stdout.take().expect("piped stdout");
        // Bounded: a flood from inside (a background job printing between
        // commands) blocks its writer instead of filling the host's memory.
        let (tx, events) = sync_channel(EVENTS_QUEUED);
        spawn_answer_reader(stdout, tx.clone());
        let marker = format!(
            "ECDYSIS-DONE-{}",
            &blake3::hash(root.as_os_str().as_encoded_bytes()).to_hex()[..16]
        );
        let (watchdog_stop, over_quota) =
            spawn_disk_watchdog(root.to_path_buf(), &bwrap, limits.disk.saturating_mul(2));
        Ok(Machine {
            limits,
            dir,
            bwrap,
            control,
            events,
            pending: Vec::new(),
            answers: Vec::new(),
            events_tx: tx,
            limit_guard: guard,
            process_hits: 0,
            shell: None,
            next_job: 0,
            marker,
            markers: 0,
            watchdog_stop,
            over_quota,
        })
    }

    /// The machine's limits.
    pub fn limits(&self) -> &MachineLimits {
        &self.limits
    }

    /// Takes the next event, filing it: answers into `answers`, terminal
    /// bytes into `pending`. `false` at the deadline or when the machine
    /// is gone.
    fn pump(&mut self, deadline: Instant) -> Result<bool, MachineError> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.events.recv_timeout(left) {
            Ok(Event::Answer(line)) => {
                // Only `<id> <value>` and `exit <id>` are answers.
                let first = line.split(' ').next().unwrap_or_default();
                if first == "exit" || first.parse::<u64>().is_ok() {
                    self.answers.push(line);
                    if self.answers.len() > ANSWERS_KEPT {
                        self.answers.remove(0);
                    }
                }
            }
            Ok(Event::Output(job, bytes)) => {
                if self.shell.as_ref().is_none_or(|s| s.job != job) {
                    // A replaced shell's last words.
                    return Ok(true);
                }
                self.pending.extend_from_slice(&bytes);
                // Keep the head and enough of the tail to find a marker.
                let cap = self.limits.output_bytes + self.marker.len() + 4;
                if self.pending.len() > 2 * cap {
                    let tail = self.pending.split_off(self.pending.len() - cap);
                    self.pending.truncate(self.limits.output_bytes);
                    self.pending
                        .extend_from_slice(b"\r\n[output cut by the host]\r\n");
                    self.pending.extend_from_slice(&tail);
                }
            }
            Err(RecvTimeoutError::Timeout) => return Ok(false),
            Err(RecvTimeoutError::Disconnected) => {
                return Err(MachineError::Supervisor("has exited".into()));
            }
        }
        Ok(true)
    }

    /// The answer line `<prefix> ...` if it has come, removed.
    fn take_answer(&mut self, prefix: &str) -> Option<String> {
        let at = self.answers.iter().position(|a| {
            a.strip_prefix(prefix)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
        })?;
        let line = self.answers.remove(at);
        Some(line[prefix.len()..].trim().to_string())
    }

    fn request(
        &mut self,
        kind: &str,
        code: &str,
        args: &[String],
        timeout: Duration,
    ) -> Result<(u64, Option<String>), MachineError> {
        let id = self.take_job_id();
        let job = self.dir.path().join("jobs").join(id.to_string());
        std::fs::create_dir(&job).map_err(prepare("job"))?;
        std::fs::write(job.join("code"), code).map_err(prepare("job"))?;
        let mut joined = Vec::new();
        for a in args {
            joined.extend_from_slice(a.as_bytes());
            joined.push(0);
        }
        std::fs::write(job.join("args"), joined).map_err(prepare("job"))?;
        writeln!(self.control, "{id} {kind}")
            .and_then(|()| self.control.flush())
            .map_err(|e| MachineError::Supervisor(format!("is gone ({e})")))?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(value) = self.take_answer(&id.to_string()) {
                return Ok((id, Some(value)));
            }
            if !self.pump(deadline)? {
                return Ok((id, None));
            }
        }
    }

    /// Runs a script as its own process (root, in `/root`, no terminal),
    /// its parameters as upstream passes them (`$1…`, `argv[1…]`); `what`
    /// names it in errors. A script that outlives its timeout leaves the
    /// machine unusable (the supervisor is still waiting on it).
    pub fn run_script(
        &mut self,
        what: &str,
        script: &Script,
        params: &[String],
    ) -> Result<ScriptRun, MachineError> {
        self.check_alive()?;
        let kind = match script.language {
            Language::Bash => "bash",
            Language::Python => "python",
        };
        let timeout = self.limits.script_timeout;
        let (id, answer) = self.request(kind, &script.code, params, timeout)?;
        let Some(status) = answer else {
            return Err(MachineError::ScriptTimeout {
                what: what.to_string(),
                timeout,
            });
        };
        let out = self.dir.path().join("out").join(id.to_string());
        let mut bytes = Vec::new();
        // The folder is writable inside: a link or a FIFO planted there is
        // not followed or waited on.
        use std::os::unix::fs::OpenOptionsExt;
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&out);
        if let Ok(f) = opened
            && f.metadata().is_ok_and(|m| m.is_file())
        {
            let _ = f
                .take(self.limits.output_bytes as u64)
                .read_to_end(&mut bytes);
        }
        let _ = std::fs::remove_file(&out);
        Ok(ScriptRun {
            status: status.parse().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&bytes).into_owned(),
        })
    }

    fn start_shell(&mut self) -> Result<(), MachineError> {
        let job = self.peek_job_id();
        let out_dir = self.dir.path().join("out");
        let fifo_in = out_dir.join(format!("shell-{job}.in"));
        let fifo_out = out_dir.join(format!("shell-{job}.out"));
        for f in [&fifo_in, &fifo_out] {
            // The folder is writable inside: whatever was planted under
            // the name goes (remove_file does not follow links).
            let _ = std::fs::remove_file(f);
            rustix::fs::mknodat(
                rustix::fs::CWD,
                f,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o600),
                0,
            )
            .map_err(|e| MachineError::Prepare {
                what: "the shell's FIFOs".into(),
                source: e.into(),
            })?;
        }
        let (_, answer) = self.request("shell", "", &[], Duration::from_secs(10))?;
        if answer.is_none() {
            return Err(MachineError::Supervisor("did not start a shell".into()));
        }
        // The shell opens its output first, then its input: once the input
        // can be opened, the output has its writer, and a read of it ends
        // only when the shell is gone.
        use std::os::unix::fs::OpenOptionsExt;
        let output = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo_out)
            .map_err(prepare("the shell's output"))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let input = loop {
            match std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&fifo_in)
            {
                Ok(f) => break f,
                Err(e) if e.raw_os_error() == Some(libc::ENXIO) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return Err(prepare("the shell's input")(e)),
            }
        };
        // The output is read by a thread of its own (blocking); the input
        // stays non-blocking, so typing into a shell that reads nothing
        // waits only until a deadline.
        rustix::fs::fcntl_setfl(&output, rustix::fs::OFlags::empty()).map_err(|e| {
            MachineError::Prepare {
                what: "the shell's FIFOs".into(),
                source: e.into(),
            }
        })?;
        let tx = self.events_tx.clone();
        std::thread::spawn(move || {
            let mut output = output;
            let mut buf = [0u8; 8192];
            while let Ok(n) = output.read(&mut buf) {
                if n == 0 || tx.send(Event::Output(job, buf[..n].to_vec())).is_err() {
                    break;
                }
            }
        });
        self.shell = Some(Shell { job, pid: 0, input });
        // No echo of what is typed, no prompts in the output, a terminal
        // of upstream's size, the shell's PID for the host; then the first
        // marker.
        let marker = self.next_marker();
        let setup = format!(
            " stty -echo cols 80 rows 24; PS1=''; PS2=''; PROMPT_COMMAND=''; unset HISTFILE; printf 'ECDYSIS-PID=%s\\n' $$\n printf '\\n%s\\n' '{marker}'\n",
        );
        let ceiling = self.disk_ceiling();
        self.type_text(&setup)?;
        let (said, end) = self.read_until_marker(job, &marker, Duration::from_secs(10), ceiling)?;
        let pid = String::from_utf8_lossy(&said)
            .rsplit("ECDYSIS-PID=")
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|p| p.parse().ok());
        match (end, pid) {
            (End::Marker, Some(pid)) => {
                self.pending.clear();
                if let Some(shell) = &mut self.shell {
                    shell.pid = pid;
                }
                Ok(())
            }
            _ => {
                self.kill_shell();
                Err(MachineError::Supervisor(format!(
                    "started a shell that does not answer ({end:?}; it said {:?})",
                    String::from_utf8_lossy(&said[..said.len().min(400)])
                )))
            }
        }
    }

    /// The next job's id: unpredictable from inside (a process there can
    /// write into the supervisor's answers through /proc; a guessed id must
    /// not answer a check), drawn ahead so a shell's FIFOs can carry it.
    fn peek_job_id(&mut self) -> u64 {
        if self.next_job == 0 {
            let mut bytes = [0u8; 8];
            let _ = rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty());
            // Never 0 (the "not drawn" value); the high bit keeps it long.
            self.next_job = u64::from_le_bytes(bytes) | (1 << 63);
        }
        self.next_job
    }

    fn take_job_id(&mut self) -> u64 {
        let id = self.peek_job_id();
        self.next_job = 0;
        id
    }

    fn check_alive(&self) -> Result<(), MachineError> {
        if self.stopped_over_quota() {
            return Err(MachineError::Supervisor(format!(
                "was stopped: something in it kept writing between commands, past twice its disk quota ({} MiB)",
                self.limits.disk >> 20
            )));
        }
        Ok(())
    }

    fn next_marker(&mut self) -> String {
        self.markers += 1;
        format!("{}-{}", self.marker, self.markers)
    }

    fn type_text(&mut self, text: &str) -> Result<(), MachineError> {
        let shell = self
            .shell
            .as_mut()
            .ok_or_else(|| MachineError::Supervisor("has no shell".into()))?;
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut rest = text.as_bytes();
        while !rest.is_empty() {
            match shell.input.write(rest) {
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(MachineError::Supervisor(
                            "has a shell that takes no input".into(),
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(MachineError::Supervisor(format!(
                        "lost the shell's terminal ({e})"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Reads the terminal until the marker line, the shell's exit, the
    /// timeout, or the disk past `ceiling` (taken before the command was
    /// typed: a command that writes at once must not raise its own
    /// ceiling); returns what came before (at most about the output limit)
    /// and which ended the wait.
    fn read_until_marker(
        &mut self,
        shell_job: u64,
        marker: &str,
        timeout: Duration,
        ceiling: u64,
    ) -> Result<(Vec<u8>, End), MachineError> {
        let deadline = Instant::now() + timeout;
        let needle = format!("{marker}\r\n");
        loop {
            if let Some(at) = find(&self.pending, needle.as_bytes()) {
                let rest = self.pending.split_off(at + needle.len());
                let mut seen = std::mem::replace(&mut self.pending, rest);
                seen.truncate(at);
                // The marker is printed after a newline of its own.
                if seen.ends_with(b"\r\n") {
                    seen.truncate(seen.len() - 2);
                }
                return Ok((seen, End::Marker));
            }
            if self.take_answer(&format!("exit {shell_job}")).is_some() {
                // What the shell printed before it went may still be in
                // flight; a moment for it.
                let soon = Instant::now() + Duration::from_millis(50);
                while self.pump(soon)? {}
                return Ok((std::mem::take(&mut self.pending), End::ShellExited));
            }
            // Woken at least every 100 ms to look at the disk.
            let slice = deadline.min(Instant::now() + Duration::from_millis(100));
            if !self.pump(slice)? {
                if self.disk_usage() > ceiling {
                    return Ok((std::mem::take(&mut self.pending), End::Limit));
                }
                if Instant::now() >= deadline {
                    return Ok((std::mem::take(&mut self.pending), End::Timeout));
                }
            }
        }
    }

    /// Types an agent command into the shell and returns its output. The
    /// shell keeps its state between commands (directory, variables,
    /// user). Only a broken machine is an error; a command that times out
    /// or ends its shell is reported in the [`CommandRun`], and the next
    /// command gets a working shell.
    pub fn shell(&mut self, command: &str) -> Result<CommandRun, MachineError> {
        self.check_alive()?;
        if self.shell.is_none() {
            self.start_shell()?;
        }
        let job = self.shell.as_ref().map_or(0, |s| s.job);
        // A leading space keeps the marker line out of the history.
        let marker = self.next_marker();
        let text = format!("{command}\n printf '\\n%s\\n' '{marker}'\n");
        let ceiling = self.disk_ceiling();
        if self.type_text(&text).is_err() {
            // A shell that takes no more input (its terminal full behind a
            // command that reads nothing): replaced.
            self.kill_shell();
            return Ok(CommandRun {
                output: String::new(),
                timed_out: true,
                shell_restarted: true,
                limit: None,
            });
        }
        let (out, end) =
            self.read_until_marker(job, &marker, self.limits.command_timeout, ceiling)?;
        let mut run = CommandRun {
            output: clean(&out),
            timed_out: false,
            shell_restarted: false,
            limit: None,
        };
        let hits = self.limit_guard.tripwire().hits().unwrap_or(0);
        if hits > self.process_hits {
            self.process_hits = hits;
            run.limit = Some(format!(
                "the process limit ({} tasks at once)",
                self.limits.jail.processes
            ));
        } else if end == End::Limit || self.disk_usage() > ceiling {
            run.limit = Some(format!("the disk quota ({} MiB)", self.limits.disk >> 20));
        }
        if run.limit.is_some() {
            self.reset()?;
            run.shell_restarted = true;
            self.pending.clear();
            return Ok(run);
        }
        match end {
            End::Marker | End::Limit => {}
            End::ShellExited => {
                self.shell = None;
                run.shell_restarted = true;
            }
            End::Timeout => {
                run.timed_out = true;
                // Interrupt what runs (or a half-typed construct), then
                // ask for the marker again; a shell that does not answer
                // is replaced.
                let marker = self.next_marker();
                self.type_text(&format!("\x03\n printf '\\n%s\\n' '{marker}'\n"))?;
                let (_, back) = self.read_until_marker(job, &marker, INTERRUPT_GRACE, ceiling)?;
                if back != End::Marker {
                    self.kill_shell();
                    run.shell_restarted = true;
                }
            }
        }
        self.pending.clear();
        Ok(run)
    }

    /// Stops every process of the machine (its files stay); the next
    /// command gets a fresh shell.
    fn reset(&mut self) -> Result<(), MachineError> {
        self.shell = None;
        let (_, answer) = self.request("reset", "", &[], Duration::from_secs(10))?;
        if answer.is_none() {
            return Err(MachineError::Supervisor(
                "could not stop the machine's processes".into(),
            ));
        }
        // Killed processes hold their places in the process limit until the
        // kernel reaps them; a shell started before that cannot fork.
        let tripwire = self.limit_guard.tripwire();
        let deadline = Instant::now() + Duration::from_secs(5);
        let room = u64::from(self.limits.jail.processes).saturating_sub(16);
        while tripwire.current().is_some_and(|n| n > room) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        // The killed shells' exit lines are of no interest.
        self.answers.retain(|a| !a.starts_with("exit "));
        Ok(())
    }

    fn kill_shell(&mut self) {
        if let Some(shell) = self.shell.take() {
            if shell.pid > 0 {
                let _ = self.request("kill", &shell.pid.to_string(), &[], Duration::from_secs(5));
            }
            let deadline = Instant::now() + Duration::from_secs(2);
            while self.take_answer(&format!("exit {}", shell.job)).is_none() {
                if !matches!(self.pump(deadline), Ok(true)) {
                    break;
                }
            }
        }
    }

    /// What a command may fill the disk up to: the quota, or what is
    /// already there when an earlier command left the disk past it (its
    /// files are kept). Only writing more is stopped, so the agent can
    /// still look around and delete, and a shell can start.
    fn disk_ceiling(&self) -> u64 {
        self.limits.disk.max(self.disk_usage())
    }

    /// Bytes the machine's writable directories hold on the host (its
    /// `/tmp` is a capped tmpfs and not counted).
    pub fn disk_usage(&self) -> u64 {
        usage_of(self.dir.path())
    }

    /// Whether the watchdog stopped the machine for writing past twice its
    /// disk quota between commands (every later command fails).
    pub fn stopped_over_quota(&self) -> bool {
        self.over_quota.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The per-episode directory on the host.
    pub fn host_dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

/// What ended a wait for a command's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Marker,
    ShellExited,
    Timeout,
    /// The disk quota (checked while the command runs).
    Limit,
}

/// What a directory tree costs its host: allocated bytes plus
/// [`ENTRY_BYTES`] per entry (an empty file still costs an inode; a million
/// of them are memory no block count shows). Links are not followed.
fn usage_of(p: &Path) -> u64 {
    fn walk(p: &Path, total: &mut u64) {
        let Ok(entries) = std::fs::read_dir(p) else {
            return;
        };
        for e in entries.flatten() {
            if let Ok(m) = e.metadata() {
                use std::os::unix::fs::MetadataExt;
                *total += m.blocks() * 512 + ENTRY_BYTES;
                if m.is_dir() {
                    walk(&e.path(), total);
                }
            }
        }
    }
    let mut total = 0;
    walk(p, &mut total);
    total
}

/// What one directory entry counts toward the disk quota (about an inode
/// and a dentry of a tmpfs).
const ENTRY_BYTES: u64 = 1024;

impl Drop for Machine {
    fn drop(&mut self) {
        self.watchdog_stop
            .store(true, std::sync::atomic::Ordering::Relaxed);
        // The PID namespace dies with bubblewrap's child: every process of
        // the machine with it.
        let _ = self.bwrap.kill();
        let _ = self.bwrap.wait();
        // The namespace's other processes die with its init, but the kernel
        // reaps them after `wait` returns: one may still be writing into the
        // directory while it is removed (ENOTEMPTY), which the temporary
        // directory's own drop would leave behind in silence. Retried for
        // up to a second.
        let dir = self.dir.path();
        for _ in 0..50 {
            match std::fs::remove_dir_all(dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                _ => break,
            }
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Upstream's cleaning of terminal output: escape sequences (colours,
/// cursor moves, window titles, bracketed paste) and bells removed,
/// decoded as UTF-8 (or upstream's message when it is not).
pub fn clean(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            0x1b if raw.get(i + 1) == Some(&b'[') => {
                // CSI: parameters and intermediates, then a final byte.
                i += 2;
                while i < raw.len() && !(0x40..=0x7e).contains(&raw[i]) {
                    i += 1;
                }
                i += 1;
            }
            0x1b if raw.get(i + 1) == Some(&b']') => {
                // OSC: up to BEL or ST.
                i += 2;
                while i < raw.len() && raw[i] != 0x07 && raw[i] != 0x1b {
                    i += 1;
                }
                i += if raw.get(i) == Some(&0x1b) { 2 } else { 1 };
            }
            0x1b => i += 2,
            0x07 => i += 1,
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    match String::from_utf8(out) {
        Ok(s) => s,
        Err(_) => "OS Environment output cannot be decoded as UTF-8".to_string(),
    }
}

/// Upstream's cut of what the agent reads: more than [`OUTPUT_LIMIT`]
/// characters become the first [`OUTPUT_KEEP`] and [`TRUNCATED`].
pub fn truncate(text: &str) -> String {
    if text.chars().count() > OUTPUT_LIMIT {
        let keep: String = text.chars().take(OUTPUT_KEEP).collect();
        format!("{keep}{TRUNCATED}")
    } else {
        text.to_string()
    }
}

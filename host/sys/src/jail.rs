//! Jails for untrusted work on the host: candidate builds and external
//! coding agents run under Debian's bubblewrap (`bwrap`).
//!
//! A jail ([`Jail::command`]) sees only what its [`JailSpec`] binds, at the
//! same absolute paths as on the host (so `{dir}` and error messages stay
//! valid):
//!
//! - the system's programs and libraries read-only (`/usr`, `/bin`, `/sbin`,
//!   `/lib*`, `/etc/alternatives` for `cc`), nothing else of `/etc` except
//!   `passwd`/`group` (user lookups) and, with the network, the resolver
//!   and CA files;
//! - a fresh `/proc` of its own PID namespace (no other process's
//!   environment), a minimal `/dev`, an empty tmpfs `/tmp` with `HOME` in it;
//! - the spec's read-write and read-only paths;
//! - no network (`--unshare-all`: a loopback of its own), or the host's
//!   network (`--share-net`; bubblewrap cannot limit it to one endpoint:
//!   [`crate::egress`] does, forwarding TCP into a jail without it);
//! - a cleared environment (`--clearenv`) plus the spec's variables;
//! - its own session and PID namespace: when the jailed command exits (or
//!   bwrap is killed: `--die-with-parent`) every process it left behind is
//!   killed with the namespace, including ones that called `setsid`.
//!
//! The bubblewrap program is `bwrap` on `PATH`, or the path in
//! `$ECDYSIS_BWRAP` (an empty or missing one means no jail: how the tests
//! show what happens on a machine without bubblewrap).
//!
//! Whether bubblewrap works is probed once per process ([`Jail::get`]): it
//! needs unprivileged user namespaces (or root), and it cannot mount a
//! fresh `/proc` when nested inside a jail that forbids it; then the jail is
//! unavailable (never weakened: binding the host's `/proc` would expose other
//! processes' environments).
//!
//! Every jail runs under [`JailLimits`] ([`Jail::command`] applies them):
//!
//! - memory per process (`RLIMIT_AS`), inherited by every process of the
//!   jail: cargo, rustc and the linker each get the limit;
//! - CPU time per process (`RLIMIT_CPU`: `SIGXCPU`, then `SIGKILL`);
//! - the size of every file it writes (`RLIMIT_FSIZE`: `SIGXFSZ`, or
//!   `EFBIG` for a process that ignores it), also its stdout and stderr
//!   files; its `/tmp` (and `HOME` in it) is a tmpfs capped in size;
//! - the number of tasks (processes and threads) alive at once, so a fork
//!   bomb fails its forks instead of filling the machine
//!   ([`ProcessLimiter`]). As root `RLIMIT_NPROC` does not hold (the
//!   kernel exempts uid 0, and the jail's user namespace maps to it), so a
//!   `pids` cgroup of its own (cgroup v1 or v2) counts the jail's tasks;
//!   as another user `RLIMIT_NPROC` does. Where neither can be had the jail
//!   is unavailable ([`JailError::NoProcessLimit`]): never a jail without
//!   the limit.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::rlimit::Resource;

/// `HOME` inside a jail (on its private tmpfs `/tmp`).
pub const JAIL_HOME: &str = "/tmp/home";

/// The system's programs and libraries, which every jail sees read-only
/// (symlinks are recreated as symlinks, as on merged-/usr systems).
const SYSTEM_PATHS: [&str; 7] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// `cc` (build scripts of dependencies link with it) is an alternative.
const ALTERNATIVES: &str = "/etc/alternatives";

/// Non-secret files of `/etc` every jail sees (user and group lookups).
const USER_DB: [&str; 2] = ["/etc/passwd", "/etc/group"];

/// What a process needs to reach the network: name resolution and the CA
/// certificates (only for jails with the host's network).
const NETWORK_CONFIG: [&str; 7] = [
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
];

/// Why no jail can be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JailError {
    /// No `bwrap` program (or `$ECDYSIS_BWRAP` names none).
    #[error("bubblewrap (`bwrap`) is not installed (Debian: `apt-get install bubblewrap`)")]
    NotInstalled,
    /// `bwrap` is there but cannot run a jailed `true` (no user
    /// namespaces, nested in a sandbox that forbids a fresh `/proc`).
    #[error("bubblewrap cannot make a jail on this machine: {0}")]
    Unusable(String),
    /// The number of processes in a jail cannot be limited: running as
    /// root without a writable `pids` cgroup (the reason).
    #[error("the processes of a jail cannot be counted and limited on this machine: {0}")]
    NoProcessLimit(ProcessLimitError),
}

/// Why the tasks of a jail cannot be limited (see
/// [`JailError::NoProcessLimit`]). The I/O errors are kept as their text,
/// so that [`JailError`] stays comparable and can be cached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcessLimitError {
    /// The mount table could not be read (the I/O error).
    #[error("cannot read /proc/self/mounts: {0}")]
    Mounts(String),
    /// Running as root, and no cgroup hierarchy has the `pids` controller.
    #[error(
        "running as root (RLIMIT_NPROC does not hold for root) and no `pids` cgroup is mounted"
    )]
    NoPidsCgroup,
    /// Running as root, and no `pids` cgroup could be written to (each
    /// path tried, with its error).
    #[error(
        "running as root (RLIMIT_NPROC does not hold for root) and no writable `pids` cgroup: {}",
        tried.join("; ")
    )]
    NotWritable {
        /// `path: error` of every place tried.
        tried: Vec<String>,
    },
    /// A jail's own cgroup could not be made or limited.
    #[error("{action} {}: {error}", path.display())]
    Cgroup {
        /// `create` or `write`.
        action: &'static str,
        /// The directory or file.
        path: PathBuf,
        /// The I/O error.
        error: String,
    },
    /// The path of a jail cgroup's `cgroup.procs` has a NUL byte.
    #[error("{}: {error}", path.display())]
    ProcsPath {
        /// The path.
        path: PathBuf,
        /// Where the NUL byte is.
        error: String,
    },
}

/// Resource limits of one jail (each process of it, or all of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct JailLimits {
    /// Address space of each process, bytes (`RLIMIT_AS`).
    pub memory: u64,
    /// CPU time of each process, seconds (`RLIMIT_CPU`).
    pub cpu_secs: u64,
    /// Size of each file written, bytes (`RLIMIT_FSIZE`).
    pub file_size: u64,
    /// Tasks (processes and threads) alive in the jail at once.
    pub processes: u32,
    /// Size of the jail's `/tmp` tmpfs (its `HOME` too), bytes.
    pub tmp_size: u64,
}

impl Default for JailLimits {
    /// Enough for a guest build (cargo, rustc, the linker: a few dozen
    /// tasks, well under 1 GiB per file and 10 CPU minutes per process).
    fn default() -> Self {
        JailLimits {
            memory: 4 << 30,
            cpu_secs: 900,
            file_size: 1 << 30,
            processes: 512,
            tmp_size: 1 << 30,
        }
    }
}

/// Which limit a jailed run hit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitHit {
    /// A fork or thread creation failed at the task limit.
    #[error("the process limit ({0} tasks at once)")]
    Processes(u32),
    /// A process used up its CPU time.
    #[error("the CPU-time limit ({0} s per process)")]
    Cpu(u64),
    /// A process wrote past the file-size limit.
    #[error("the file-size limit ({} MiB per file)", .0 >> 20)]
    FileSize(u64),
    /// What it wrote outgrew a quota (what, and the quota in bytes).
    #[error("the disk quota of {what} ({} MiB)", .bytes >> 20)]
    Disk {
        /// The bounded paths.
        what: String,
        /// The quota.
        bytes: u64,
    },
}

impl LimitHit {
    /// A short name for a build's status (`process limit`, …).
    pub fn status(&self) -> &'static str {
        match self {
            LimitHit::Processes(_) => "process limit",
            LimitHit::Cpu(_) => "CPU limit",
            LimitHit::FileSize(_) => "file-size limit",
            LimitHit::Disk { .. } => "disk quota",
        }
    }
}

/// What one jailed process may see and use.
#[derive(Debug, Clone, Default)]
pub struct JailSpec {
    /// Paths bound read-write (they must exist).
    pub read_write: Vec<PathBuf>,
    /// Paths bound read-only (missing ones are skipped). Binds are made
    /// from the shortest path to the longest, so a path inside another
    /// keeps its own mode (the staging crate read-write inside a read-only
    /// directory, the WIT package read-only beside it).
    pub read_only: Vec<PathBuf>,
    /// Share the host's network (otherwise: loopback only, of its own).
    pub network: bool,
    /// Without the host's network: this file as the jail's `/etc/hosts`,
    /// with the CA certificates and resolver rules beside it (for the
    /// endpoints a [`crate::egress::EgressProxy`] forwards).
    pub hosts_file: Option<PathBuf>,
    /// Capabilities kept inside the jail (bubblewrap `--cap-add`; only
    /// when running as root).
    pub caps: Vec<String>,
    /// The whole environment of the jailed process (besides `HOME`).
    pub env: Vec<(String, OsString)>,
    /// The working directory (one of the bound paths, or `/`).
    pub cwd: PathBuf,
    /// Its resource limits.
    pub limits: JailLimits,
}

/// A usable bubblewrap.
#[derive(Debug)]
pub struct Jail {
    program: PathBuf,
    version: String,
    processes: ProcessLimiter,
}

impl Jail {
    /// The machine's jail, probed once per process: bubblewrap must be
    /// installed and able to run a command in the jail every spec gets.
    pub fn get() -> Result<&'static Jail, JailError> {
        static JAIL: OnceLock<Result<Jail, JailError>> = OnceLock::new();
        JAIL.get_or_init(Jail::probe).as_ref().map_err(Clone::clone)
    }

    fn probe() -> Result<Jail, JailError> {
        let named = std::env::var_os("ECDYSIS_BWRAP").unwrap_or_else(|| "bwrap".into());
        if named.is_empty() {
            return Err(JailError::NotInstalled);
        }
        let program = find_program(&named).ok_or(JailError::NotInstalled)?;
        let version = Command::new(&program)
            .arg("--version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .ok_or(JailError::NotInstalled)?;
        let processes = ProcessLimiter::probe()?;
        let jail = Jail {
            program,
            version,
            processes,
        };
        let spec = JailSpec {
            cwd: PathBuf::from("/"),
            ..JailSpec::default()
        };
        let (mut cmd, _guard) = jail.command(&spec, OsStr::new("true"))?;
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|e| JailError::Unusable(e.to_string()))?;
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
            return Err(JailError::Unusable(if why.is_empty() {
                format!("a jailed `true` exited with {}", out.status)
            } else {
                why
            }));
        }
        Ok(jail)
    }

    /// `bwrap --version`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The bubblewrap program.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// How the number of a jail's tasks is limited here.
    pub fn process_limiter(&self) -> &ProcessLimiter {
        &self.processes
    }

    /// A command running `program` in a jail made as `spec` says, under its
    /// limits (add the program's arguments to it); keep the guard until the
    /// command has ended (it removes the jail's cgroup, and says whether
    /// the process limit was hit).
    pub fn command(
        &self,
        spec: &JailSpec,
        program: &OsStr,
    ) -> Result<(Command, LimitGuard), JailError> {
        let mut cmd = self.bwrap(spec, program);
        let guard = apply_limits(&mut cmd, &spec.limits, &self.processes)?;
        Ok((cmd, guard))
    }

    fn bwrap(&self, spec: &JailSpec, program: &OsStr) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args([
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
        ]);
        if spec.network {
            cmd.arg("--share-net");
        }
        bind_system_programs(&mut cmd);
        bind_system(&mut cmd, Path::new(ALTERNATIVES));
        for cap in &spec.caps {
            cmd.arg("--cap-add").arg(cap);
        }
        let mut etc: Vec<&str> = USER_DB.to_vec();
        if spec.network {
            etc.extend(NETWORK_CONFIG);
        } else if let Some(hosts) = &spec.hosts_file {
            etc.extend(
                NETWORK_CONFIG
                    .iter()
                    .copied()
                    .filter(|p| !["/etc/resolv.conf", "/etc/hosts"].contains(p)),
            );
            cmd.arg("--ro-bind").arg(hosts).arg("/etc/hosts");
        }
        for p in etc {
            if Path::new(p).exists() {
                cmd.arg("--ro-bind").arg(p).arg(p);
            }
        }
        cmd.args(["--proc", "/proc", "--dev", "/dev", "--size"])
            .arg(spec.limits.tmp_size.max(1 << 20).to_string())
            .args(["--tmpfs", "/tmp"]);
        cmd.args(["--dir", JAIL_HOME, "--setenv", "HOME", JAIL_HOME]);
        let mut binds: Vec<(&Path, &str)> = spec
            .read_write
            .iter()
            .map(|p| (p.as_path(), "--bind"))
            .chain(
                spec.read_only
                    .iter()
                    .filter(|p| p.exists())
                    .map(|p| (p.as_path(), "--ro-bind")),
            )
            .collect();
        binds.sort_by_key(|(p, _)| p.components().count());
        for (p, how) in binds {
            cmd.arg(how).arg(p).arg(p);
        }
        for (k, v) in &spec.env {
            cmd.arg("--setenv").arg(k).arg(v);
        }
        cmd.arg("--chdir").arg(&spec.cwd).arg("--").arg(program);
        cmd
    }
}

/// Add bubblewrap arguments that show the system's programs and libraries
/// (`/usr`, `/bin`, `/lib*`, ...) read-only, for a sandbox built outside
/// [`Jail::command`].
pub fn bind_system_programs(cmd: &mut Command) {
    for p in SYSTEM_PATHS {
        bind_system(cmd, Path::new(p));
    }
}

/// [`bind_system_programs`] without `/usr` itself: `/bin`, `/sbin` and
/// `/lib*` (links into `/usr` on merged-/usr systems), for a sandbox that
/// makes its own `/usr`.
pub fn bind_system_links(cmd: &mut Command) {
    for p in SYSTEM_PATHS.iter().filter(|p| **p != "/usr") {
        bind_system(cmd, Path::new(p));
    }
}

/// Bind a system path read-only, or recreate it when it is a symlink.
fn bind_system(cmd: &mut Command, path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            if let Ok(target) = std::fs::read_link(path) {
                cmd.arg("--symlink").arg(target).arg(path);
            }
        }
        Ok(_) => {
            cmd.arg("--ro-bind").arg(path).arg(path);
        }
        Err(_) => {}
    }
}

/// Limit every process `cmd` starts (and their children) as `limits` say:
/// address space, CPU time and file size per process, and (through
/// `processes`) the tasks alive at once. Also for untrusted work that runs
/// unjailed (allowed by the operator). Keep the guard until the command
/// has ended.
pub fn apply_limits(
    cmd: &mut Command,
    limits: &JailLimits,
    processes: &ProcessLimiter,
) -> Result<LimitGuard, JailError> {
    let cgroup = processes.cgroup(limits.processes)?;
    let join = cgroup
        .as_ref()
        .map(|c| {
            let path = c.procs_file();
            std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| {
                JailError::NoProcessLimit(ProcessLimitError::ProcsPath {
                    path,
                    error: e.to_string(),
                })
            })
        })
        .transpose()?;
    let nproc = matches!(processes, ProcessLimiter::Rlimit).then_some(limits.processes);
    // (resource, soft, hard). The CPU limit's hard limit is a little
    // higher: at the soft one the kernel sends SIGXCPU (what says which
    // limit stopped it), at the hard one SIGKILL.
    let set = [
        (Resource::As, limits.memory, limits.memory),
        (Resource::Cpu, limits.cpu_secs, limits.cpu_secs + 5),
        (Resource::Fsize, limits.file_size, limits.file_size),
    ];
    // SAFETY: between fork and exec the closure only makes system calls
    // (setrlimit, open, write, close, getpid) on memory prepared before the
    // fork; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            for (resource, soft, hard) in set {
                crate::rlimit::set(resource, soft, hard)?;
            }
            if let Some(n) = nproc {
                crate::rlimit::set(Resource::Nproc, u64::from(n), u64::from(n))?;
            }
            if let Some(path) = &join {
                // Join the jail's pids cgroup before anything forks.
                let mut digits = [0u8; 20];
                let mut pid = libc::getpid() as u64;
                let mut at = digits.len();
                loop {
                    at -= 1;
                    digits[at] = b'0' + (pid % 10) as u8;
                    pid /= 10;
                    if pid == 0 {
                        break;
                    }
                }
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let n = digits.len() - at;
                let wrote = libc::write(fd, digits[at..].as_ptr().cast(), n);
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                if wrote != n as isize {
                    return Err(err);
                }
            }
            Ok(())
        });
    }
    Ok(LimitGuard {
        cgroup,
        processes: limits.processes,
    })
}

/// How the tasks of a jail are counted and limited on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessLimiter {
    /// A `pids` cgroup per jail, created under this directory (cgroup v1's
    /// `pids` hierarchy or cgroup v2 with the `pids` controller).
    Cgroup(PathBuf),
    /// `RLIMIT_NPROC` (enforced for users other than root).
    Rlimit,
}

/// Distinguishes the cgroups of one process's jails.
static CGROUP_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl ProcessLimiter {
    /// What works here: `RLIMIT_NPROC` for a user other than root, else a
    /// writable `pids` cgroup; neither is [`JailError::NoProcessLimit`].
    pub fn probe() -> Result<ProcessLimiter, JailError> {
        if !rustix::process::geteuid().is_root() {
            return Ok(ProcessLimiter::Rlimit);
        }
        let base = pids_cgroup_base().map_err(JailError::NoProcessLimit)?;
        let limiter = ProcessLimiter::Cgroup(base.clone());
        sweep_stale(&base);
        // A leaf must take a limit and be removable.
        drop(limiter.cgroup(1)?);
        Ok(limiter)
    }

    /// A fresh cgroup limited to `max` tasks (none with `RLIMIT_NPROC`).
    fn cgroup(&self, max: u32) -> Result<Option<PidsCgroup>, JailError> {
        let ProcessLimiter::Cgroup(base) = self else {
            return Ok(None);
        };
        let fail = |action: &'static str, p: &Path, e: std::io::Error| {
            JailError::NoProcessLimit(ProcessLimitError::Cgroup {
                action,
                path: p.to_path_buf(),
                error: e.to_string(),
            })
        };
        let seq = CGROUP_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = base.join(format!("{}-{seq}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| fail("create", &dir, e))?;
        let group = PidsCgroup { dir };
        let max_file = group.dir.join("pids.max");
        std::fs::write(&max_file, max.max(1).to_string())
            .map_err(|e| fail("write", &max_file, e))?;
        Ok(Some(group))
    }
}

/// The `pids` cgroup directory jails are made in: `ecdysis-jails` inside
/// this process's own cgroup of the v1 `pids` hierarchy, else inside the
/// cgroup v2 root (where the controller can be enabled for children).
fn pids_cgroup_base() -> Result<PathBuf, ProcessLimitError> {
    let mounts = std::fs::read_to_string("/proc/self/mounts")
        .map_err(|e| ProcessLimitError::Mounts(e.to_string()))?;
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut tried = Vec::new();
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 {
            continue;
        }
        let (dir, fstype, opts) = (Path::new(f[1]), f[2], f[3]);
        let base = if fstype == "cgroup" && opts.split(',').any(|o| o == "pids") {
            // v1: `N:pids:/path` names this process's cgroup.
            let rel = own
                .lines()
                .filter_map(|l| l.split_once(':').and_then(|(_, rest)| rest.split_once(':')))
                .find(|(ctl, _)| ctl.split(',').any(|c| c == "pids"))
                .map(|(_, p)| p.trim_start_matches('/').to_string())
                .unwrap_or_default();
            dir.join(rel).join("ecdysis-jails")
        } else if fstype == "cgroup2"
            && std::fs::read_to_string(dir.join("cgroup.controllers"))
                .is_ok_and(|c| c.split_whitespace().any(|c| c == "pids"))
        {
            let root_ctl = dir.join("cgroup.subtree_control");
            let enabled = std::fs::read_to_string(&root_ctl)
                .is_ok_and(|c| c.split_whitespace().any(|c| c == "pids"));
            if !enabled && let Err(e) = std::fs::write(&root_ctl, "+pids") {
                tried.push(format!("{}: {e}", root_ctl.display()));
                continue;
            }
            let base = dir.join("ecdysis-jails");
            if let Err(e) = std::fs::create_dir_all(&base)
                .and_then(|()| std::fs::write(base.join("cgroup.subtree_control"), "+pids"))
            {
                tried.push(format!("{}: {e}", base.display()));
                continue;
            }
            base
        } else {
            continue;
        };
        match std::fs::create_dir_all(&base) {
            Ok(()) => return Ok(base),
            Err(e) => tried.push(format!("{}: {e}", base.display())),
        }
    }
    Err(if tried.is_empty() {
        ProcessLimitError::NoPidsCgroup
    } else {
        ProcessLimitError::NotWritable { tried }
    })
}

/// Remove the empty cgroups that processes which have ended left behind
/// (killed before their guards ran).
fn sweep_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// One jail's `pids` cgroup, removed (its tasks killed) when dropped.
#[derive(Debug)]
struct PidsCgroup {
    dir: PathBuf,
}

impl PidsCgroup {
    fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Whether a fork failed at the limit (`pids.events`: `max N`).
    fn limit_hit(&self) -> bool {
        events_show_max(&self.dir.join("pids.events"))
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        // The jail's PID namespace is gone with it; an unjailed command
        // (allowed by the operator) may have left tasks: kill them.
        for _ in 0..50 {
            let procs = std::fs::read_to_string(self.procs_file()).unwrap_or_default();
            let pids = procs.lines().filter_map(|l| l.trim().parse::<i32>().ok());
            for pid in pids.filter_map(rustix::process::Pid::from_raw) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        tracing::warn!(cgroup = %self.dir.display(), "could not remove a jail's cgroup");
    }
}

/// Held while a limited command runs; tells which limit it hit.
#[derive(Debug)]
pub struct LimitGuard {
    cgroup: Option<PidsCgroup>,
    processes: u32,
}

/// Tells, while a jail runs, whether it hit its process limit (a fork bomb
/// that retries its failed forks would otherwise run to its timeout).
#[derive(Debug, Clone)]
pub struct Tripwire {
    events: Option<PathBuf>,
    processes: u32,
}

impl Tripwire {
    /// The process limit, once a fork failed at it (needs a `pids`
    /// cgroup: with `RLIMIT_NPROC` nothing counts the failures).
    pub fn tripped(&self) -> Option<LimitHit> {
        let events = self.events.as_ref()?;
        events_show_max(events).then_some(LimitHit::Processes(self.processes))
    }
}

impl Tripwire {
    /// How many forks have failed at the process limit so far (a pids
    /// cgroup's `max` events; `None` without one): a long-lived jail tells
    /// a new hit from an old one by the count.
    pub fn hits(&self) -> Option<u64> {
        let text = std::fs::read_to_string(self.events.as_ref()?).ok()?;
        text.lines()
            .filter_map(|l| l.strip_prefix("max "))
            .find_map(|n| n.trim().parse().ok())
    }

    /// How many tasks the jail holds now (its pids cgroup's `pids.current`;
    /// `None` without one). Killed tasks count until the kernel has
    /// reaped them.
    pub fn current(&self) -> Option<u64> {
        let events = self.events.as_ref()?;
        std::fs::read_to_string(events.with_file_name("pids.current"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

fn events_show_max(events: &Path) -> bool {
    std::fs::read_to_string(events).is_ok_and(|t| {
        t.lines()
            .filter_map(|l| l.strip_prefix("max "))
            .any(|n| n.trim().parse::<u64>().is_ok_and(|n| n > 0))
    })
}

impl LimitGuard {
    /// A watch for [`crate::process::run_watched`].
    pub fn tripwire(&self) -> Tripwire {
        Tripwire {
            events: self.cgroup.as_ref().map(|c| c.dir.join("pids.events")),
            processes: self.processes,
        }
    }

    /// Which limit of `limits` the ended command hit, from its cgroup, its
    /// exit status (bubblewrap exits with 128 + the signal that killed the
    /// jailed program) and its stderr (cargo names the signal that killed
    /// rustc).
    pub fn hit(
        &self,
        limits: &JailLimits,
        status: Option<std::process::ExitStatus>,
        stderr: &str,
    ) -> Option<LimitHit> {
        use std::os::unix::process::ExitStatusExt;
        let signal = status.and_then(|s| {
            s.signal()
                .or_else(|| s.code().filter(|c| *c > 128).map(|c| c - 128))
        });
        if self.cgroup.as_ref().is_some_and(PidsCgroup::limit_hit) {
            return Some(LimitHit::Processes(self.processes));
        }
        // cargo writes `(signal: 24, SIGXCPU: …)` or just `(signal: 24)`.
        let named = |sig: i32, name: &str| {
            signal == Some(sig)
                || stderr.contains(name)
                || stderr.contains(&format!("(signal: {sig})"))
                || stderr.contains(&format!("(signal: {sig},"))
        };
        if named(libc::SIGXCPU, "SIGXCPU") {
            return Some(LimitHit::Cpu(limits.cpu_secs));
        }
        if named(libc::SIGXFSZ, "SIGXFSZ") || stderr.contains("File too large") {
            return Some(LimitHit::FileSize(limits.file_size));
        }
        if self.cgroup.is_none() && stderr.contains("Resource temporarily unavailable") {
            return Some(LimitHit::Processes(self.processes));
        }
        None
    }
}

/// `program` as the host would run it: itself when it names a path, else
/// the first match on `PATH`.
pub fn find_program(program: &OsStr) -> Option<PathBuf> {
    let p = Path::new(program);
    if p.components().count() > 1 {
        return p.is_file().then(|| std::path::absolute(p).ok()).flatten();
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|c| c.is_file())
}

/// The Rust toolchain as a jail sees it: which paths to bind read-only and
/// which variables to set so cargo finds the same toolchain and the
/// dependency sources the host's cargo downloaded, and nothing else of the
/// cargo home (no `credentials.toml`, no `config.toml`).
#[derive(Debug, Clone)]
pub struct Toolchain {
    /// The cargo to run (absolute).
    pub cargo: PathBuf,
    /// Paths to bind read-only: the cargo binary's directory, the rustup
    /// home, the sysroot, `$CARGO_HOME/{bin,registry,git}`.
    pub read_only: Vec<PathBuf>,
    /// `PATH`, `CARGO_HOME`, `RUSTUP_HOME`, `RUSTUP_TOOLCHAIN` (when set).
    pub env: Vec<(String, OsString)>,
}

impl Toolchain {
    /// The host's toolchain (the `CARGO` variable's cargo when set, as
    /// under `cargo test`/`cargo run`, else `cargo` on `PATH`), found once
    /// per process.
    pub fn host() -> &'static Toolchain {
        static TOOLCHAIN: OnceLock<Toolchain> = OnceLock::new();
        TOOLCHAIN.get_or_init(Toolchain::discover)
    }

    fn discover() -> Toolchain {
        let named = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let cargo = find_program(&named).unwrap_or_else(|| PathBuf::from(&named));
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let cargo_home = std::env::var_os("CARGO_HOME")
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".cargo")));
        let rustup_home = std::env::var_os("RUSTUP_HOME")
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".rustup")))
            .filter(|p| p.is_dir());
        let mut read_only = Vec::new();
        let mut path = Vec::new();
        if let Some(dir) = cargo.parent() {
            read_only.push(dir.to_path_buf());
            path.push(dir.to_path_buf());
        }
        if let Some(rh) = &rustup_home {
            read_only.push(rh.clone());
        }
        if let Some(sysroot) = Command::new("rustc")
            .args(["--print", "sysroot"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        {
            read_only.push(sysroot);
        }
        let mut env = Vec::new();
        if let Some(ch) = &cargo_home {
            for sub in ["bin", "registry", "git"] {
                read_only.push(ch.join(sub));
            }
            path.push(ch.join("bin"));
            env.push(("CARGO_HOME".to_string(), ch.clone().into_os_string()));
        }
        if let Some(rh) = &rustup_home {
            env.push(("RUSTUP_HOME".to_string(), rh.clone().into_os_string()));
        }
        for var in ["RUSTUP_TOOLCHAIN", "RUSTUP_AUTO_INSTALL"] {
            if let Some(v) = std::env::var_os(var) {
                env.push((var.to_string(), v));
            }
        }
        path.extend(["/usr/local/bin", "/usr/bin", "/bin"].map(PathBuf::from));
        let path = std::env::join_paths(&path).unwrap_or_else(|_| "/usr/bin:/bin".into());
        env.push(("PATH".to_string(), path));
        read_only.retain(|p| p.exists());
        Toolchain {
            cargo,
            read_only,
            env,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jail() -> &'static Jail {
        Jail::get().expect("bubblewrap works on the development and CI machines")
    }

    fn run(spec: &JailSpec, script: &str) -> std::process::Output {
        run_guarded(spec, script).0
    }

    fn run_guarded(spec: &JailSpec, script: &str) -> (std::process::Output, LimitGuard) {
        let (mut cmd, guard) = jail().command(spec, OsStr::new("sh")).unwrap();
        cmd.args(["-c", script]).stdin(Stdio::null());
        (cmd.output().unwrap(), guard)
    }

    #[test]
    fn a_jail_sees_only_its_binds_and_no_environment() {
        let dir = tempfile::tempdir().unwrap();
        let inside = dir.path().join("ro/inside");
        let outside = dir.path().join("ro/outside");
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::write(dir.path().join("secret.txt"), "s3cret").unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let spec = JailSpec {
            read_write: vec![inside.clone()],
            // A read-only parent does not make the read-write child read-only.
            read_only: vec![dir.path().join("ro"), outside.clone()],
            env: vec![("ONLY".into(), "this".into())],
            cwd: inside.clone(),
            ..JailSpec::default()
        };
        let script = format!(
            "cat {0} || echo unreadable; cat /etc/hostname || echo nohost; env | sort; \
             echo w > {1}/w && echo wrote-inside; echo w > {2}/w || echo outside-is-read-only",
            dir.path().join("secret.txt").display(),
            inside.display(),
            outside.display()
        );
        let out = run(&spec, &script);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout} {:?}", out.stderr);
        assert!(!stdout.contains("s3cret"), "{stdout}");
        assert!(stdout.contains("unreadable") && stdout.contains("nohost"));
        // The environment is exactly what the spec set (sh adds PWD etc.).
        assert!(stdout.contains("ONLY=this"), "{stdout}");
        // cargo runs this test with CARGO_MANIFEST_DIR etc. set: none leaks.
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        assert!(!stdout.contains("CARGO"), "{stdout}");
        assert!(stdout.contains("wrote-inside") && stdout.contains("outside-is-read-only"));
        assert_eq!(std::fs::read_to_string(inside.join("w")).unwrap(), "w\n");
    }

    #[test]
    fn a_jail_has_no_network_unless_shared() {
        // A listener on the host's loopback: unreachable from a jail with
        // its own network namespace, reachable with the host's.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let script = format!(
            "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2); print(\"connected\")' \
             2>/dev/null || echo refused"
        );
        let closed = run(
            &JailSpec {
                cwd: "/".into(),
                ..JailSpec::default()
            },
            &script,
        );
        assert_eq!(String::from_utf8_lossy(&closed.stdout).trim(), "refused");
        let shared = run(
            &JailSpec {
                cwd: "/".into(),
                network: true,
                ..JailSpec::default()
            },
            &script,
        );
        assert_eq!(String::from_utf8_lossy(&shared.stdout).trim(), "connected");
    }

    #[test]
    fn processes_left_behind_die_with_the_jail() {
        let dir = tempfile::tempdir().unwrap();
        let spec = JailSpec {
            read_write: vec![dir.path().to_path_buf()],
            cwd: dir.path().to_path_buf(),
            ..JailSpec::default()
        };
        let out = run(
            &spec,
            "(sleep 1; echo late >> left.txt) & (setsid sh -c 'sleep 1; echo late >> left.txt' &); echo done",
        );
        assert!(out.status.success());
        std::thread::sleep(std::time::Duration::from_millis(1800));
        assert!(!dir.path().join("left.txt").exists());
    }

    #[test]
    fn the_toolchain_runs_jailed_under_a_memory_limit() {
        let tc = Toolchain::host();
        let spec = JailSpec {
            read_only: tc.read_only.clone(),
            env: tc.env.clone(),
            cwd: "/".into(),
            limits: JailLimits {
                memory: 2 << 30,
                ..JailLimits::default()
            },
            ..JailSpec::default()
        };
        let (mut cmd, _guard) = jail().command(&spec, tc.cargo.as_os_str()).unwrap();
        cmd.arg("--version").stdin(Stdio::null());
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).starts_with("cargo "));
        // The limit holds: a process asking for more fails.
        let (mut cmd, _guard) = jail().command(&spec, OsStr::new("python3")).unwrap();
        cmd.args(["-c", "b = bytearray(3 << 30)"])
            .stdin(Stdio::null());
        let out = cmd.output().unwrap();
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("MemoryError"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Tight limits for the hostile cases.
    fn tight() -> JailSpec {
        JailSpec {
            cwd: "/".into(),
            limits: JailLimits {
                memory: 1 << 30,
                cpu_secs: 2,
                file_size: 8 << 20,
                processes: 32,
                tmp_size: 16 << 20,
            },
            ..JailSpec::default()
        }
    }

    #[test]
    fn a_fork_bomb_stops_at_the_process_limit() {
        let spec = tight();
        // Forks until a fork fails, holding every child.
        let started = std::time::Instant::now();
        let (out, guard) = run_guarded(
            &spec,
            "python3 -c '
import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(30); os._exit(0)
        n += 1
except OSError as e:
    print(\"stopped after\", n, e.errno)
'",
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.starts_with("stopped after"), "{stdout} {:?}", out);
        let n: u32 = stdout.split_whitespace().nth(2).unwrap().parse().unwrap();
        assert!(n < 32, "{n} forks");
        assert_eq!(
            guard.hit(&spec.limits, Some(out.status), ""),
            Some(LimitHit::Processes(32))
        );
        // The jail's children died with it (no 30 s wait).
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        drop(guard);
        // Positive control: the next jail forks freely within its limit.
        let (out, guard) = run_guarded(
            &spec,
            "for i in 1 2 3 4 5 6 7 8; do (true) & done; wait; echo ok",
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
        assert_eq!(guard.hit(&spec.limits, Some(out.status), ""), None);
    }

    #[test]
    fn a_spinning_process_stops_at_the_cpu_limit_and_a_big_file_at_the_size_limit() {
        let spec = tight();
        let started = std::time::Instant::now();
        let (out, guard) = run_guarded(&spec, "exec python3 -c 'while True: pass'");
        assert_eq!(
            guard.hit(&spec.limits, Some(out.status), ""),
            Some(LimitHit::Cpu(2)),
            "{:?}",
            out.status
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
        let dir = tempfile::tempdir().unwrap();
        let spec = JailSpec {
            read_write: vec![dir.path().to_path_buf()],
            cwd: dir.path().to_path_buf(),
            ..tight()
        };
        let (out, guard) = run_guarded(&spec, "exec head -c 100000000 /dev/zero > big");
        assert_eq!(
            guard.hit(
                &spec.limits,
                Some(out.status),
                &String::from_utf8_lossy(&out.stderr)
            ),
            Some(LimitHit::FileSize(8 << 20))
        );
        assert_eq!(
            std::fs::metadata(dir.path().join("big")).unwrap().len(),
            8 << 20
        );
        // /tmp is a tmpfs of its own size, whatever the file limit.
        let out = run(
            &spec,
            "for i in 1 2 3; do head -c 7000000 /dev/zero > /tmp/f$i || echo full; done",
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("full"),
            "{out:?}"
        );
        // Positive control: work within the limits runs.
        let (out, guard) = run_guarded(&spec, "head -c 1000000 /dev/zero > small && echo ok");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
        assert_eq!(guard.hit(&spec.limits, Some(out.status), ""), None);
    }
}

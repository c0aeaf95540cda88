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
//!   [`crate::gate`] does, forwarding TCP into a jail without it);
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
//! Memory is bounded per process with `RLIMIT_AS` ([`limit_address_space`]),
//! inherited by every process of the jail: cargo, rustc and the linker each
//! get the limit (so a build's total is at most the number of concurrent
//! jobs plus one, times the limit).

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// `HOME` inside a jail (on its private tmpfs `/tmp`).
pub const JAIL_HOME: &str = "/tmp/home";

/// System paths every jail sees read-only (symlinks are recreated as
/// symlinks, as on merged-/usr systems).
const SYSTEM_PATHS: [&str; 8] = [
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    // `cc` (build scripts of dependencies link with it) is an alternative.
    "/etc/alternatives",
];

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
    /// endpoints a [`crate::gate::Gate`] forwards).
    pub hosts_file: Option<PathBuf>,
    /// Capabilities kept inside the jail (bubblewrap `--cap-add`; only
    /// when running as root).
    pub caps: Vec<String>,
    /// The whole environment of the jailed process (besides `HOME`).
    pub env: Vec<(String, OsString)>,
    /// The working directory (one of the bound paths, or `/`).
    pub cwd: PathBuf,
}

/// A usable bubblewrap.
#[derive(Debug)]
pub struct Jail {
    program: PathBuf,
    version: String,
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
        let jail = Jail { program, version };
        let spec = JailSpec {
            cwd: PathBuf::from("/"),
            ..JailSpec::default()
        };
        let out = jail
            .command(&spec, OsStr::new("true"))
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

    /// A command running `program` in a jail made as `spec` says (add the
    /// program's arguments to it).
    pub fn command(&self, spec: &JailSpec, program: &OsStr) -> Command {
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
        for p in SYSTEM_PATHS {
            bind_system(&mut cmd, Path::new(p));
        }
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
        cmd.args(["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]);
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

/// Limit every process `cmd` starts (and their children) to `bytes` of
/// address space (`RLIMIT_AS`): an allocation past it fails, which aborts
/// rustc with "memory allocation of … failed".
pub fn limit_address_space(cmd: &mut Command, bytes: u64) {
    // SAFETY: setrlimit is async-signal-safe; the closure touches nothing
    // else between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: bytes as libc::rlim_t,
                rlim_max: bytes as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
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
        let mut cmd = jail().command(spec, OsStr::new("sh"));
        cmd.args(["-c", script]).stdin(Stdio::null());
        cmd.output().unwrap()
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
            ..JailSpec::default()
        };
        let mut cmd = jail().command(&spec, tc.cargo.as_os_str());
        cmd.arg("--version").stdin(Stdio::null());
        limit_address_space(&mut cmd, 2 << 30);
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).starts_with("cargo "));
        // The limit holds: a process asking for more fails.
        let mut cmd = jail().command(&spec, OsStr::new("python3"));
        cmd.args(["-c", "b = bytearray(3 << 30)"])
            .stdin(Stdio::null());
        limit_address_space(&mut cmd, 2 << 30);
        let out = cmd.output().unwrap();
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("MemoryError"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

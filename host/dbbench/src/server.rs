//! The private MariaDB server: Debian's `mariadbd` in its own data
//! directory under `.ecdysis/`, reachable only through a Unix socket.
//!
//! One server per process: [`PrivateServer::start`] runs
//! `mariadb-install-db` into a fresh directory named after the process id
//! and starts `mariadbd` with the MySQL 8 settings of
//! [`super::mysql8`]. Dropping the handle shuts it down and removes the
//! directory. Should the process die without dropping it, the server gets
//! SIGTERM from the kernel (`PR_SET_PDEATHSIG`), and the next start removes
//! directories of processes that no longer exist.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::error::DbError;
use super::mysql8;

/// Where binaries are looked for besides `$PATH` (Debian puts `mariadbd`
/// in `/usr/sbin`, which a non-root `$PATH` often lacks).
const EXTRA_BIN_DIRS: &[&str] = &["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"];

/// How long the server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Unix socket paths are limited to 107 bytes; a deeper directory gets its
/// socket in the temporary directory instead.
const MAX_SOCKET_PATH: usize = 100;

/// A running private server.
#[derive(Debug)]
pub struct PrivateServer {
    child: Option<Child>,
    dir: PathBuf,
    socket: PathBuf,
    version: String,
}

/// Finds an executable by name in `$PATH` and the usual system folders.
pub fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(EXTRA_BIN_DIRS.iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `mariadbd` and `mariadb-install-db`, or the typed error naming what is
/// missing.
fn binaries() -> Result<(PathBuf, PathBuf), DbError> {
    let server = find_binary("mariadbd").or_else(|| find_binary("mysqld"));
    let install = find_binary("mariadb-install-db").or_else(|| find_binary("mysql_install_db"));
    match (server, install) {
        (Some(s), Some(i)) => Ok((s, i)),
        (s, i) => Err(DbError::ServerMissing {
            missing: [
                ("mariadbd", s.is_none()),
                ("mariadb-install-db", i.is_none()),
            ]
            .iter()
            .filter(|(_, m)| *m)
            .map(|(n, _)| n.to_string())
            .collect(),
        }),
    }
}

/// Whether `mariadbd` (and its installer) can be found.
pub fn server_available() -> bool {
    binaries().is_ok()
}

fn run_quiet(cmd: &mut Command, what: &str, log: &Path) -> Result<(), DbError> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| DbError::Start(format!("running {what}: {e}")))?;
    let _ = std::fs::write(log, [&out.stdout[..], &out.stderr[..]].concat());
    if !out.status.success() {
        return Err(DbError::Start(format!(
            "{what} failed ({}); its output is in {}:\n{}",
            out.status,
            log.display(),
            tail(&String::from_utf8_lossy(&out.stderr), 15)
        )));
    }
    Ok(())
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Removes server directories left by processes that no longer exist.
fn remove_stale(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("server-")
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl PrivateServer {
    /// Installs and starts a server under `root` (e.g.
    /// `.ecdysis/mariadb`). Blocks until it accepts connections.
    ///
    /// Call it from a thread that outlives the server: the kernel sends
    /// the server SIGTERM when that thread exits.
    pub fn start(root: &Path) -> Result<PrivateServer, DbError> {
        let (mariadbd, install_db) = binaries()?;
        std::fs::create_dir_all(root)
            .map_err(|e| DbError::Start(format!("creating {}: {e}", root.display())))?;
        remove_stale(root);
        let root = root
            .canonicalize()
            .map_err(|e| DbError::Start(format!("{}: {e}", root.display())))?;
        let dir = root.join(format!("server-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let data = dir.join("data");
        std::fs::create_dir_all(&data)
            .map_err(|e| DbError::Start(format!("creating {}: {e}", data.display())))?;
        // Temporary tables in a directory of the server's own, not the
        // shared /tmp, where other servers, builds and tests write beside
        // it and the installer's bootstrap must not lose one.
        let tmp = dir.join("tmp");
        std::fs::create_dir_all(&tmp)
            .map_err(|e| DbError::Start(format!("creating {}: {e}", tmp.display())))?;
        let tmpdir_arg = format!("--tmpdir={}", tmp.display());
        let mut socket = dir.join("mysqld.sock");
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            socket =
                std::env::temp_dir().join(format!("ecdysis-mariadb-{}.sock", std::process::id()));
        }
        let _ = std::fs::remove_file(&socket);
        let user_arg = is_root().then_some("--user=root");

        let mut install = Command::new(&install_db);
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            .arg(&tmpdir_arg)
            .args(mysql8::INSTALL_ARGS)
            .args(user_arg);
        run_quiet(&mut install, "mariadb-install-db", &dir.join("install.log"))?;

        let log = dir.join("mariadbd.err");
        // INTO OUTFILE / LOAD DATA may only touch this empty folder (and
        // episode users lack the FILE privilege anyway).
        let no_files = dir.join("no-files");
        std::fs::create_dir_all(&no_files)
            .map_err(|e| DbError::Start(format!("creating {}: {e}", no_files.display())))?;
        let early = std::fs::File::create(dir.join("mariadbd.stderr"))
            .map_err(|e| DbError::Start(format!("creating the server's log: {e}")))?;
        let mut cmd = Command::new(&mariadbd);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--pid-file={}", dir.join("mariadbd.pid").display()))
            .arg(format!("--log-error={}", log.display()))
            .arg(format!("--secure-file-priv={}", no_files.display()))
            .arg(&tmpdir_arg)
            .arg("--skip-networking")
            .args(mysql8::SERVER_ARGS)
            .args(user_arg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(early);
        // SAFETY: one bare system call (prctl) between fork and exec; the
        // closure allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::TERM,
                ))?;
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| DbError::Start(format!("starting {}: {e}", mariadbd.display())))?;
        let mut server = PrivateServer {
            child: Some(child),
            dir,
            socket,
            version: String::new(),
        };
        server.wait_ready(&log)?;
        server.version = version_of(&mariadbd);
        Ok(server)
    }

    fn wait_ready(&mut self, log: &Path) -> Result<(), DbError> {
        let started = Instant::now();
        loop {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                let text = std::fs::read_to_string(log).unwrap_or_default()
                    + &std::fs::read_to_string(self.dir.join("mariadbd.stderr"))
                        .unwrap_or_default();
                return Err(DbError::Start(format!(
                    "mariadbd exited ({status}) before accepting connections; {}:\n{}",
                    log.display(),
                    tail(&text, 15)
                )));
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(DbError::Start(format!(
                    "mariadbd did not accept connections within {}s (see {})",
                    START_TIMEOUT.as_secs(),
                    log.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The socket the server listens on.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// `mariadbd --version`, for reports.
    pub fn version(&self) -> &str {
        &self.version
    }
}

fn version_of(bin: &Path) -> String {
    Command::new(bin)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = rustix::process::Pid::from_child(&child);
            // Already gone is fine: the wait below returns at once.
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() > deadline => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

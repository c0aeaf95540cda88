//! The external-command adapter: a CLI coding agent edits the staging crate
//! in place, once per round.
//!
//! The command comes from a template in the config, split like a shell would
//! split it (quotes and backslashes; no expansion, no pipes) and run without
//! a shell, so substituted text is always one argument. Placeholders:
//! `{prompt}` (the task text itself; prefer `{prompt_file}` for long
//! prompts, an argument is capped at 128 KiB on Linux), `{prompt_file}` (a
//! file holding it, outside the staging crate) and `{dir}` (the staging
//! crate's absolute path). The command runs with the staging crate as its
//! working directory, in its own process group, killed whole on timeout.
//!
//! Examples: `aider --yes --no-git --message-file {prompt_file}`,
//! `opencode run {prompt}`, `codex exec --full-auto {prompt}`, or for tests
//! `sh -c "sed -i 's/a/b/' src/tables.rs"`.
//!
//! The agent is untrusted (it may be wrong, compromised or prompt-injected)
//! and runs in a bubblewrap jail ([`ecdysis_sys::jail`]) that sees:
//!
//! - the staging crate, read-write, at its own path (`{dir}`);
//! - the prompt file's directory, read-only;
//! - the Rust toolchain and the cargo registry cache read-only (it may run
//!   `cargo build --offline`), and a target directory of its own,
//!   `coder/` inside the shared one, read-write (exported as
//!   `CARGO_TARGET_DIR`): the artifacts the candidate builds link stay out
//!   of its reach;
//! - its own installation read-only: the directory of the resolved program,
//!   or, for a program in a `bin/` directory outside `/usr` (a virtualenv,
//!   a pipx or npm prefix), that prefix; plus [`ExternalConfig::read_only`];
//! - the system's `/usr` (programs, interpreters) read-only;
//! - a fresh, empty `HOME` and `/tmp` (gone afterwards);
//! - by default no network; with [`CoderNetwork::Endpoints`] a network of
//!   its own that reaches those endpoints only (TCP forwarded by the host,
//!   [`ecdysis_sys::egress`]); the host's network only with [`CoderNetwork::Host`]
//!   (the operator's explicit `--coder-network host`), see
//!   [`super::network`];
//! - only the variables it is given: `PATH`, `HOME`, the toolchain's, and
//!   [`ExternalConfig::env`] (its API key, passed on purpose) — none of the
//!   host's other variables.
//!
//! When the command returns, the jail's PID namespace is torn down: every
//! process it left in the background is killed (also ones that called
//! `setsid`), and only then is the crate snapshotted and hashed. Where no
//! jail can be made the run is refused ([`CoderError::NoJail`]) unless the
//! operator allowed unjailed work ([`Containment::allow_unjailed`]); then it
//! runs with the same cleared environment and scratch `HOME`, and its
//! process group is killed when it returns.
//!
//! Afterwards the crate is compared with its state before the run: changes
//! outside `src/` reject the attempt (restored, [`CoderError::OutsideSrc`]);
//! a timeout or a failing exit status also restores it.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::network::CoderNetwork;
use super::{
    Coder, CoderError, CoderFuture, CoderOutcome, CoderTask, Snapshot, check_build_async,
    check_crate, clip_chars, coder_prompt, coder_system_prompt, src_diff,
};
use ecdysis_sandbox::store::Containment;
use ecdysis_sys::egress::{EgressProxy, Endpoint};
use ecdysis_sys::fsutil::PathError;
use ecdysis_sys::jail::{
    Jail, JailLimits, JailSpec, LimitGuard, LimitHit, ProcessLimiter, Toolchain, apply_limits,
    find_program,
};
use ecdysis_sys::process::{Scratch, run_watched};

const EXTERNAL_INSTRUCTIONS: &str = include_str!("../prompts/external.md");

/// Most characters of the agent's stdout / stderr kept in the log.
const OUTPUT_CLIP: usize = 6_000;

/// Settings of the external-command adapter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExternalConfig {
    /// The command template (see the module docs for placeholders).
    pub command: String,
    /// Wall-clock limit of one run, in seconds.
    pub timeout_secs: u64,
    /// Build the crate after the agent's edits to report `build_ok`.
    pub check_build: bool,
    /// Shared cargo target directory of the build check; the agent gets
    /// its `coder/` subdirectory as `CARGO_TARGET_DIR`.
    pub target_dir: Option<PathBuf>,
    /// The agent's environment besides `PATH`, `HOME` and the toolchain's
    /// variables (e.g. its API key): nothing else of the host's is passed.
    pub env: BTreeMap<String, String>,
    /// Extra paths the jailed agent may read (its installation, when the
    /// automatic guess is not enough).
    pub read_only: Vec<PathBuf>,
    /// Extra paths the jailed agent may write (e.g. a log directory).
    pub read_write: Vec<PathBuf>,
    /// The jailed agent's network: none (the default), only its model
    /// endpoints (`HOST:PORT` or `http(s)://` URLs, forwarded by the egress proxy,
    /// [`ecdysis_sys::egress`]), or the host's (an explicit, unsafe opt-in).
    pub network: CoderNetwork,
    /// The `ecdysis-host` executable that forwards inside the jail
    /// (default: the running executable).
    pub forwarder_program: Option<PathBuf>,
    /// Most characters of harness source quoted in the prompt (the agent
    /// can open the other files itself).
    pub source_budget: usize,
    /// Estimated tokens the prompt may take (the agent's model context less
    /// its reply); `None`: only `source_budget` limits it.
    #[serde(default)]
    pub prompt_tokens: Option<usize>,
    /// How the build check of its edits (untrusted source) is contained.
    pub containment: Containment,
    /// Limits of the agent's jail: memory, CPU time and file size per
    /// process, tasks at once, its `/tmp` and `HOME`.
    pub limits: JailLimits,
    /// Most bytes the staging crate may hold while and after it runs.
    pub crate_quota: u64,
    /// Most bytes its other writable directories (its cargo target,
    /// [`ExternalConfig::read_write`]) may hold.
    pub disk_quota: u64,
}

/// The agent's default limits: an agent runtime (node, python) with its
/// own cargo runs; it mostly waits for its model.
pub const CODER_LIMITS: JailLimits = JailLimits {
    memory: 16 << 30,
    cpu_secs: 1800,
    file_size: 512 << 20,
    processes: 512,
    tmp_size: 1 << 30,
};

/// Default [`ExternalConfig::crate_quota`]: a harness crate's source is a
/// few hundred KiB.
pub const CRATE_QUOTA: u64 = 64 << 20;

/// Default [`ExternalConfig::disk_quota`] (a cargo target of its own).
pub const CODER_DISK_QUOTA: u64 = 8 << 30;

/// Default [`ExternalConfig::timeout_secs`] (`--coder-timeout-secs`).
pub const DEFAULT_TIMEOUT_SECS: u64 = 1800;

impl Default for ExternalConfig {
    fn default() -> Self {
        Self {
            command: String::new(),
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            check_build: true,
            target_dir: None,
            env: BTreeMap::new(),
            read_only: Vec::new(),
            read_write: Vec::new(),
            network: CoderNetwork::None,
            forwarder_program: None,
            source_budget: 40_000,
            prompt_tokens: None,
            containment: Containment::default(),
            limits: CODER_LIMITS,
            crate_quota: CRATE_QUOTA,
            disk_quota: CODER_DISK_QUOTA,
        }
    }
}

impl ExternalConfig {
    /// A config for `command` (a template; see the module docs) with the
    /// defaults: 30 min timeout, build check on.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            ..Self::default()
        }
    }

    /// The endpoints of [`CoderNetwork::Endpoints`] (else none).
    pub fn network_endpoints(&self) -> &[Endpoint] {
        match &self.network {
            CoderNetwork::Endpoints(list) => list,
            _ => &[],
        }
    }

    /// Set the timeout, rounded down to whole seconds (at least 1).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout_secs = timeout.as_secs().max(1);
        self
    }
}

/// Runs a CLI coding agent from a command template.
#[derive(Debug)]
pub struct ExternalCoder {
    config: ExternalConfig,
    argv: Vec<String>,
    name: String,
    /// Sub-second timeouts for tests (overrides `timeout_secs`).
    timeout: Duration,
}

impl ExternalCoder {
    /// Checks the template splits into a command.
    pub fn new(config: ExternalConfig) -> Result<Self, CoderError> {
        let argv = split_command(&config.command).map_err(CoderError::Template)?;
        if config.network_endpoints().iter().any(|e| e.port < 1024)
            && !rustix::process::geteuid().is_root()
        {
            return Err(CoderError::Endpoint(
                "a port below 1024 can be forwarded only when running as root".into(),
            ));
        }
        let program = Path::new(&argv[0])
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| argv[0].clone());
        Ok(Self {
            name: format!("external:{program}"),
            timeout: Duration::from_secs(config.timeout_secs.max(1)),
            config,
            argv,
        })
    }

    /// Overrides the timeout with any duration (the config counts seconds).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The coder's settings.
    pub fn config(&self) -> &ExternalConfig {
        &self.config
    }

    async fn run(&self, task: &CoderTask, staging: &Path) -> Result<CoderOutcome, CoderError> {
        check_crate(staging)?;
        let staging = staging
            .canonicalize()
            .map_err(|e| PathError::new("resolve", staging, e))?;
        let before = Snapshot::take(&staging)?;
        let room = self.config.prompt_tokens.map(|t| {
            t.saturating_sub(crate::diagnose::token_budget::estimate_tokens(
                &coder_system_prompt(super::Language::of(&staging)),
            ))
        });
        let Some(task_text) = coder_prompt(
            task,
            &staging,
            EXTERNAL_INSTRUCTIONS,
            self.config.source_budget,
            room,
        )?
        else {
            let t = self.config.prompt_tokens.unwrap_or_default();
            return Err(CoderError::ContextTooSmall {
                context: t,
                reply: 0,
            });
        };
        let prompt = format!(
            "{}\n\n{}",
            coder_system_prompt(super::Language::of(&staging)),
            task_text
        );
        let scratch = Scratch::new("coder")?;
        let prompt_file = scratch.path().join("prompt.md");
        std::fs::write(&prompt_file, &prompt)
            .map_err(|e| PathError::new("write", &prompt_file, e))?;
        let dir = staging.to_string_lossy().into_owned();
        let prompt_file_s = prompt_file.to_string_lossy().into_owned();
        let vars = [
            ("prompt", prompt.as_str()),
            ("prompt_file", prompt_file_s.as_str()),
            ("dir", dir.as_str()),
        ];
        let argv: Vec<String> = self.argv.iter().map(|a| substitute(a, &vars)).collect();
        // The egress proxy (if any) forwards until the command has returned; the
        // guard holds the jail's cgroup until then.
        let (cmd, _proxy, guard) = self.command(&argv, &staging, scratch.path())?;
        let timeout = self.timeout;
        let quotas = self.quotas(&staging);
        let watched = quotas.clone();
        let tripwire = guard.tripwire();
        let out = tokio::task::spawn_blocking(move || {
            run_watched(cmd, timeout, &mut || {
                tripwire
                    .tripped()
                    .or_else(|| watched.exceeded())
                    .map(|h| h.to_string())
            })
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
        .map_err(|source| CoderError::Spawn {
            command: self.config.command.clone(),
            source,
        })?;
        let status = match (&out.status, out.timed_out) {
            (_, true) => "killed on timeout".to_string(),
            (Some(s), _) => s.to_string(),
            (None, _) => "unknown".to_string(),
        };
        let mut log = format!(
            "$ {}\n[{status}, {:.1} s]\n--- stdout\n{}\n--- stderr\n{}\n",
            self.config.command,
            out.elapsed.as_secs_f64(),
            clip_chars(out.stdout.trim_end(), OUTPUT_CLIP),
            clip_chars(out.stderr.trim_end(), OUTPUT_CLIP),
        );
        let restore = |log: &mut String| {
            if let Err(e) = before.restore() {
                *log += &format!("could not restore the staging crate: {e}\n");
                tracing::warn!(error = %e, "could not restore the staging crate");
            }
        };
        // A limit hit fails the attempt: while it ran (a quota), at its end
        // (its cgroup, its exit signal), or left on disk.
        let hit = quotas
            .exceeded()
            .or_else(|| guard.hit(&self.config.limits, out.status, &out.stderr));
        drop(guard);
        if let Some(limit) = hit {
            log += &format!("stopped: it hit {limit}\n");
            restore(&mut log);
            return Err(CoderError::Limit {
                command: self.config.command.clone(),
                limit,
                log,
            });
        }
        if out.timed_out {
            restore(&mut log);
            return Err(CoderError::Timeout {
                command: self.config.command.clone(),
                timeout,
                log,
            });
        }
        if !out.status.is_some_and(|s| s.success()) {
            restore(&mut log);
            return Err(CoderError::CommandFailed {
                command: self.config.command.clone(),
                status,
                log,
            });
        }
        let after = Snapshot::take(&staging)?;
        let forbidden = before.forbidden_changes(&after);
        if !forbidden.is_empty() {
            log += &format!("edits outside src/: {}\n", forbidden.join(", "));
            restore(&mut log);
            return Err(CoderError::OutsideSrc {
                files: forbidden,
                attempts: 1,
                log,
            });
        }
        let (diff, changed_files) = src_diff(&before, &after);
        if changed_files.is_empty() {
            return Err(CoderError::NoChange { attempts: 1, log });
        }
        log += &format!("changed: {}\n", changed_files.join(", "));
        let build_ok = if self.config.check_build {
            let trust = before.untrusted_edits(&self.config.containment);
            let build =
                check_build_async(&staging, self.config.target_dir.as_deref(), &trust).await?;
            if build.ok {
                log += &format!("build ok ({:.1} s)\n", build.seconds);
            } else {
                log += &format!("build failed ({:.1} s):\n{}\n", build.seconds, build.errors);
            }
            build.ok
        } else {
            false
        };
        Ok(CoderOutcome {
            diff,
            changed_files,
            attempts: 1,
            build_ok,
            log,
        })
    }
}

impl ExternalCoder {
    /// The agent's command: jailed as the module docs say, or (allowed by
    /// the operator where no jail can be made) unjailed with the same
    /// environment.
    fn command(
        &self,
        argv: &[String],
        staging: &Path,
        scratch: &Path,
    ) -> Result<(Command, Option<EgressProxy>, LimitGuard), CoderError> {
        let toolchain = Toolchain::host();
        let mut env: Vec<(String, OsString)> = toolchain.env.clone();
        let program = find_program(OsStr::new(&argv[0]));
        if program.is_none() {
            return Err(CoderError::Spawn {
                command: self.config.command.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("`{}` is not a file nor on PATH", argv[0]),
                ),
            });
        }
        let install = program.as_deref().map(installation).unwrap_or_default();
        // The program's own directory first on PATH, so its siblings (an
        // interpreter beside it) are found.
        if let (Some(dir), Some((_, path))) = (
            program.as_deref().and_then(Path::parent),
            env.iter_mut().find(|(k, _)| k == "PATH"),
        ) {
            let mut dirs = vec![dir.to_path_buf()];
            dirs.extend(std::env::split_paths(&path.clone()));
            if let Ok(joined) = std::env::join_paths(dirs) {
                *path = joined;
            }
        }
        // The agent's own cargo runs get a target directory of their own
        // (`coder/` inside the shared one): it runs arbitrary code, and
        // must not be able to swap the dependency artifacts the candidate
        // builds link.
        let agent_target = self.config.target_dir.as_ref().map(|t| t.join("coder"));
        if let Some(t) = &agent_target {
            std::fs::create_dir_all(t).map_err(|e| PathError::new("create", t, e))?;
            env.push(("CARGO_TARGET_DIR".into(), t.clone().into_os_string()));
        }
        env.extend(
            self.config
                .env
                .iter()
                .map(|(k, v)| (k.clone(), OsString::from(v))),
        );
        match Jail::get() {
            Ok(jail) => {
                let mut read_write = vec![staging.to_path_buf()];
                read_write.extend(agent_target.iter().cloned());
                for p in &self.config.read_write {
                    std::fs::create_dir_all(p).map_err(|e| PathError::new("create", p, e))?;
                    read_write.push(p.clone());
                }
                let mut read_only = vec![scratch.to_path_buf()];
                read_only.extend(toolchain.read_only.iter().cloned());
                read_only.extend(install);
                read_only.extend(self.config.read_only.iter().cloned());
                let mut spec = JailSpec {
                    read_write,
                    read_only,
                    network: self.config.network == CoderNetwork::Host,
                    env,
                    cwd: staging.to_path_buf(),
                    limits: self.config.limits,
                    ..JailSpec::default()
                };
                let run = program
                    .as_deref()
                    .map_or(OsStr::new(&argv[0]), Path::as_os_str);
                let endpoints = self.config.network_endpoints();
                if endpoints.is_empty() {
                    let (mut cmd, guard) = jail.command(&spec, run).map_err(CoderError::NoJail)?;
                    cmd.args(&argv[1..]);
                    return Ok((cmd, None, guard));
                }
                // Its own network; the proxy's forwarder (this executable,
                // read-only) runs the agent as its child.
                let proxy = EgressProxy::start(endpoints).map_err(|e| {
                    CoderError::Endpoint(format!("cannot start the egress proxy: {e}"))
                })?;
                let forwarder = match &self.config.forwarder_program {
                    Some(p) => p.clone(),
                    None => std::env::current_exe().map_err(|e| {
                        CoderError::Endpoint(format!("cannot locate this executable: {e}"))
                    })?,
                };
                spec.network = false;
                spec.read_write.push(proxy.dir().to_path_buf());
                spec.read_only.push(forwarder.clone());
                spec.hosts_file = Some(proxy.hosts_file());
                if proxy.needs_low_ports() {
                    spec.caps.push("CAP_NET_BIND_SERVICE".into());
                }
                let (mut cmd, guard) = jail
                    .command(&spec, forwarder.as_os_str())
                    .map_err(CoderError::NoJail)?;
                cmd.args(proxy.forwarder_args()).arg(run).args(&argv[1..]);
                Ok((cmd, Some(proxy), guard))
            }
            Err(reason) if self.config.containment.allow_unjailed => {
                tracing::warn!(%reason, "running the external coder WITHOUT a jail (allowed by the operator)");
                let home = scratch.join("home");
                std::fs::create_dir_all(&home).map_err(|e| PathError::new("create", &home, e))?;
                let mut cmd = Command::new(&argv[0]);
                cmd.args(&argv[1..])
                    .current_dir(staging)
                    .env_clear()
                    .envs(env)
                    .env("HOME", &home);
                let limiter = ProcessLimiter::probe().unwrap_or(ProcessLimiter::Rlimit);
                let guard = apply_limits(&mut cmd, &self.config.limits, &limiter)
                    .map_err(CoderError::NoJail)?;
                Ok((cmd, None, guard))
            }
            Err(reason) => Err(CoderError::NoJail(reason)),
        }
    }
}

impl ExternalCoder {
    /// The quotas of what the agent writes: the staging crate, and its
    /// other writable directories together.
    fn quotas(&self, staging: &Path) -> Quotas {
        let mut others: Vec<PathBuf> = self.config.read_write.clone();
        if let Some(t) = &self.config.target_dir {
            others.push(t.join("coder"));
        }
        Quotas {
            staging: staging.to_path_buf(),
            crate_quota: self.config.crate_quota,
            others,
            disk_quota: self.config.disk_quota,
        }
    }
}

/// Byte quotas of the paths a jailed agent writes, checked while it runs
/// and after.
#[derive(Debug, Clone)]
struct Quotas {
    staging: PathBuf,
    crate_quota: u64,
    others: Vec<PathBuf>,
    disk_quota: u64,
}

impl Quotas {
    /// The first quota exceeded, if any.
    fn exceeded(&self) -> Option<LimitHit> {
        if tree_bytes(&self.staging, self.crate_quota) > self.crate_quota {
            return Some(LimitHit::Disk {
                what: "the staging crate".into(),
                bytes: self.crate_quota,
            });
        }
        let mut total = 0u64;
        for p in &self.others {
            total = total.saturating_add(tree_bytes(p, self.disk_quota.saturating_sub(total)));
        }
        (total > self.disk_quota).then(|| LimitHit::Disk {
            what: "its writable directories".into(),
            bytes: self.disk_quota,
        })
    }
}

/// Bytes of the files under `path` (symlinks not followed), counting no
/// further than just past `stop`.
fn tree_bytes(path: &Path, stop: u64) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                total = total.saturating_add(meta.len());
                if total > stop {
                    return total;
                }
            }
        }
    }
    total
}

/// The configured endpoints, parsed.
/// What of a program's installation a jail must see: the prefix of a
/// program in a `bin/` directory outside the system's (a virtualenv, a
/// pipx or npm prefix: its libraries sit beside `bin/`), else its directory.
fn installation(program: &Path) -> Vec<PathBuf> {
    let real = program
        .canonicalize()
        .unwrap_or_else(|_| program.to_path_buf());
    let mut out = Vec::new();
    for p in [program, real.as_path()] {
        let Some(dir) = p.parent() else { continue };
        let prefix = dir
            .parent()
            .filter(|_| dir.file_name().is_some_and(|n| n == "bin"))
            .filter(|pre| {
                !["/", "/usr", "/usr/local"]
                    .iter()
                    .any(|s| *pre == Path::new(s))
            });
        let keep = prefix.unwrap_or(dir).to_path_buf();
        let system = ["/usr", "/bin", "/sbin", "/lib", "/lib64"]
            .iter()
            .any(|s| keep.starts_with(s));
        if !system && !out.contains(&keep) {
            out.push(keep);
        }
    }
    out
}

impl Coder for ExternalCoder {
    fn name(&self) -> &str {
        &self.name
    }

    fn implement<'a>(&'a self, task: &'a CoderTask, staging: &'a Path) -> CoderFuture<'a> {
        Box::pin(self.run(task, staging))
    }
}

/// A command line [`split_command`] cannot split, with the line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// A quote is never closed.
    #[error("unclosed {quote} in `{line}`")]
    Unclosed {
        /// `'` or `"`.
        quote: char,
        /// The command line.
        line: String,
    },
    /// The line ends with an escaping backslash.
    #[error("trailing backslash in `{line}`")]
    TrailingBackslash {
        /// The command line.
        line: String,
    },
    /// No argument at all.
    #[error("the coder command is empty")]
    Empty,
}

/// Split a command line into arguments like a POSIX shell, without any
/// expansion: whitespace separates; `'…'` is literal; `"…"` honours `\"`,
/// `\\`, `\$` and `` \` ``; a backslash outside quotes escapes the next
/// character.
pub fn split_command(line: &str) -> Result<Vec<String>, SplitError> {
    let unclosed = |quote| SplitError::Unclosed {
        quote,
        line: line.to_string(),
    };
    let mut args = Vec::new();
    let mut cur = String::new();
    let mut in_arg = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_arg {
                    args.push(std::mem::take(&mut cur));
                    in_arg = false;
                }
            }
            '\'' => {
                in_arg = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(d) => cur.push(d),
                        None => return Err(unclosed('\'')),
                    }
                }
            }
            '"' => {
                in_arg = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(d @ ('"' | '\\' | '$' | '`')) => cur.push(d),
                            Some('\n') => {}
                            Some(d) => {
                                cur.push('\\');
                                cur.push(d);
                            }
                            None => return Err(unclosed('"')),
                        },
                        Some(d) => cur.push(d),
                        None => return Err(unclosed('"')),
                    }
                }
            }
            '\\' => {
                in_arg = true;
                match chars.next() {
                    Some('\n') => {}
                    Some(d) => cur.push(d),
                    None => {
                        return Err(SplitError::TrailingBackslash {
                            line: line.to_string(),
                        });
                    }
                }
            }
            c => {
                in_arg = true;
                cur.push(c);
            }
        }
    }
    if in_arg {
        args.push(cur);
    }
    if args.is_empty() {
        return Err(SplitError::Empty);
    }
    Ok(args)
}

/// Replace `{key}` placeholders in one pass (substituted text is not
/// rescanned; unknown `{…}` stay as they are).
fn substitute(arg: &str, vars: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    'scan: while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        for (k, v) in vars {
            let key = format!("{{{k}}}");
            if rest[start..].starts_with(&key) {
                out.push_str(v);
                rest = &rest[start + key.len()..];
                continue 'scan;
            }
        }
        out.push('{');
        rest = &rest[start + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_split_like_a_shell() {
        assert_eq!(
            split_command(r#"aider --yes  --message-file {prompt_file}"#).unwrap(),
            vec!["aider", "--yes", "--message-file", "{prompt_file}"]
        );
        assert_eq!(
            split_command(r#"sh -c "sed -i 's/a/b/' src/x.rs && echo \"ok\"" a\ b ''"#).unwrap(),
            vec![
                "sh",
                "-c",
                r#"sed -i 's/a/b/' src/x.rs && echo "ok""#,
                "a b",
                ""
            ]
        );
        assert!(split_command("  ").is_err());
        assert!(split_command("sh -c 'oops").is_err());
        assert!(split_command("sh -c \"oops").is_err());
    }

    #[test]
    fn placeholders_substitute_once() {
        let vars = [
            ("prompt", "say {dir}"),
            ("dir", "/s"),
            ("prompt_file", "/t/p.md"),
        ];
        assert_eq!(substitute("{prompt}", &vars), "say {dir}");
        assert_eq!(
            substitute("--dir={dir}/x {other} {", &vars),
            "--dir=/s/x {other} {"
        );
        assert_eq!(substitute("{prompt_file}", &vars), "/t/p.md");
    }

    #[test]
    fn an_empty_template_is_refused() {
        assert!(matches!(
            ExternalCoder::new(ExternalConfig::new("")),
            Err(CoderError::Template(_))
        ));
        let c = ExternalCoder::new(ExternalConfig::new("/usr/bin/aider --yes")).unwrap();
        assert_eq!(c.name, "external:aider");
    }
}

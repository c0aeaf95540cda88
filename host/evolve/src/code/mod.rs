//! The code stage: a coder implements a [`ChangeSpec`] in a *staging copy*
//! of the harness source crate, once per round.
//!
//! Every coder is a [`Coder`]:
//!
//! - [`RuleCoder`]: offline, no model. Writes the spec's machine-readable
//!   rule edits into the harness's rule tables ([`TABLES_FILE`]).
//! - [`EditorCoder`]: the built-in editor. One conversation with the coder
//!   model: it answers with search/replace blocks, the edits are applied and
//!   the crate is built for `wasm32-wasip2`; mismatched blocks and compiler
//!   errors go back as follow-up turns, up to a limit.
//! - [`TableCoder`]: for models too weak to edit Rust, a JSON list of
//!   rule-table edits the host writes into `src/tables.rs`.
//! - [`WholeFileCoder`]: the model rewrites one small hook file the host
//!   picks from the spec, answering with its whole new content.
//! - [`ExternalCoder`]: runs a CLI coding agent (`aider`, `opencode run`,
//!   `codex exec`, …) from a command template in the staging directory, with
//!   a timeout, and collects what it changed.
//!
//! All may only change files under the staging crate's `src/`. Anything
//! else (`Cargo.toml`, `build.rs`, `.cargo/`, the lock file, symlinks) gets
//! the whole attempt rejected: the staging copy is restored to its state
//! before the call and [`CoderError::OutsideSrc`] names the files. Top-level
//! `target/` and hidden entries other than `.cargo/` (agent caches such as
//! `.aider*`) are not part of the crate's source and are not checked.
//!
//! The harness crate binds the WIT world through `path: "../wit"`, so a
//! staging copy must sit next to a copy of the repository's `wit/` folder to
//! build (e.g. `<run>/staging/harness` beside `<run>/staging/wit`).

pub mod diff;
pub mod editor;
pub mod external;
pub mod network;
pub mod rule_coder;
pub mod tables;
pub mod whole_file;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use editor::{EditBlock, EditorCoder, EditorConfig, EditsError, parse_edits};
pub use external::{ExternalCoder, ExternalConfig, SplitError, split_command};
pub use network::{CoderNetwork, NetworkChoice, NetworkError};
pub use rule_coder::RuleCoder;
pub use tables::{RESAMPLE_TEMPERATURE, TableCoder};
pub use whole_file::{DEFAULT_FILE_CAP, WholeFileCoder};

use crate::diagnose::change_spec::ChangeSpec;
use crate::diagnose::token_budget::{self, Section};
use ecdysis_model::ModelError;
use ecdysis_sandbox::store::build::cargo_build;
use ecdysis_sandbox::store::scan::{self, Finding};
use ecdysis_sandbox::store::{BuildOptions, BuildProfile, Containment, StoreError, Trust};
use ecdysis_sys::fsutil::{EntryKind, PathError, walk_crate};

const CODER_SYSTEM: &str = include_str!("../prompts/coder_system.md");
const CODER_TASK: &str = include_str!("../prompts/coder_task.md");
const CONTRACT_RULES: &str = include_str!("../prompts/contract_rules.md");
const CONTRACT_RULES_PYTHON: &str = include_str!("../prompts/contract_rules_python.md");

/// The harness's data-driven rule tables, relative to its crate: what the
/// rule coder and the table coder write, and where the heuristic diagnoser
/// says its changes go.
pub const TABLES_FILE: &str = "src/tables.rs";

/// Most characters of a model reply kept in a coder's log: whole replies,
/// so the coder benchmark can replay them ([`crate::coder_bench`]).
pub const LOGGED_REPLY_CHARS: usize = 24_000;

/// Default of the most characters of harness source quoted in a coder
/// prompt; files past it are listed by name only.
pub const SOURCE_BUDGET: usize = 60_000;

/// What a coder is asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoderTask {
    /// The change to implement.
    pub spec: ChangeSpec,
    /// Extra scrubbed context for the coder (e.g. the failure excerpt the
    /// self-evolution baseline works from). Never oracle material.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    /// The domain the harness is trained on, for coders that edit its rule
    /// tables (which key entries by the domain) and name its tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<CoderContext>,
}

/// What a coder may know of the training domain: what its agent sees too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoderContext {
    /// The domain's short name as the rule tables key it (`retail`,
    /// `dbbench`).
    pub domain: String,
    /// The domain's tool names.
    pub tools: Vec<String>,
}

impl CoderTask {
    /// A task with no extra notes.
    pub fn new(spec: ChangeSpec) -> Self {
        Self {
            spec,
            notes: None,
            context: None,
        }
    }

    /// Say which domain (short name) and tools the harness is trained on.
    pub fn with_context(mut self, domain: impl Into<String>, tools: Vec<String>) -> Self {
        self.context = Some(CoderContext {
            domain: domain.into(),
            tools,
        });
        self
    }

    /// Add scrubbed context for the coder (never oracle material).
    pub fn with_notes(mut self, notes: impl Into<String>) -> Self {
        self.notes = Some(notes.into());
        self
    }
}

/// What a coder did to the staging crate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoderOutcome {
    /// Unified diff of `src/` before → after (paths `a/src/…`, `b/src/…`;
    /// applies with `git apply` at the crate root).
    pub diff: String,
    /// Changed files relative to the crate (`src/…`), sorted.
    pub changed_files: Vec<String>,
    /// Model calls (editor) or command runs (external) it took.
    pub attempts: u32,
    /// The crate built for `wasm32-wasip2` after the last edit (false as
    /// well when the build was not checked).
    pub build_ok: bool,
    /// Human-readable account of the attempts.
    pub log: String,
}

/// Why a coder produced no usable candidate. Every variant that follows
/// edits to the staging copy leaves it restored to its state before the call,
/// except [`CoderError::Io`] (which may leave it half-edited).
#[derive(Debug, thiserror::Error)]
pub enum CoderError {
    /// The staging directory is not a crate (no `Cargo.toml` or `src/`).
    #[error("{} is not a crate: no Cargo.toml or src/", dir.display())]
    NotACrate {
        /// The staging directory.
        dir: PathBuf,
    },

    /// The coder changed files outside `src/` (the editor through a path in a
    /// block, an external command on disk); its edits were undone.
    #[error("edits outside src/ rejected and undone: {}", files.join(", "))]
    OutsideSrc {
        /// The offending paths, relative to the crate.
        files: Vec<String>,
        /// Model calls or command runs used.
        attempts: u32,
        /// Account of the attempts.
        log: String,
    },

    /// The coder model's call failed (after the client's retries).
    #[error("the coder model call failed after {attempts} call(s): {source}")]
    Model {
        /// The model error.
        #[source]
        source: ModelError,
        /// Model calls made, the failed one included.
        attempts: u32,
        /// Account of the attempts.
        log: String,
    },

    /// The editor's model produced no edit that applied and changed `src/`
    /// within its turns.
    #[error("no applicable edits after {attempts} call(s): {last}")]
    NoEdits {
        /// The first line of the last feedback given to the model (why its last
        /// reply did not work).
        last: String,
        /// Model calls made.
        attempts: u32,
        /// Account of the attempts.
        log: String,
    },

    /// The external command succeeded but `src/` is unchanged.
    #[error("the coder left src/ unchanged")]
    NoChange {
        /// Command runs used (1).
        attempts: u32,
        /// Account of the run.
        log: String,
    },

    /// The external command ran past its timeout and was killed.
    #[error("`{command}` timed out after {} s; its edits were undone", timeout.as_secs_f64())]
    Timeout {
        /// The command as configured.
        command: String,
        /// The timeout it exceeded.
        timeout: Duration,
        /// Account of the run (its clipped output).
        log: String,
    },

    /// The external command exited unsuccessfully.
    #[error("`{command}` exited with {status}; its edits were undone")]
    CommandFailed {
        /// The command as configured.
        command: String,
        /// Its exit status, as text.
        status: String,
        /// Account of the run (its clipped output).
        log: String,
    },

    /// The external command could not be started.
    #[error("cannot start `{command}`: {source}")]
    Spawn {
        /// The command as configured.
        command: String,
        /// The spawn error.
        #[source]
        source: std::io::Error,
    },

    /// The command template does not split into a command (the reason).
    #[error("bad coder command template: {0}")]
    Template(external::SplitError),

    /// The prompt's fixed parts alone exceed the context budget.
    #[error(
        "the coder prompt does not fit a context of {context} tokens with {reply} reserved for the reply, even with the sources and evidence left out"
    )]
    ContextTooSmall {
        /// The context budget, in tokens.
        context: usize,
        /// Tokens reserved for the reply.
        reply: usize,
    },
    /// An endpoint the jailed external coder should reach is not
    /// `HOST:PORT` or a URL, or a port below 1024 is asked for without
    /// root (binding it in the jail needs `CAP_NET_BIND_SERVICE`).
    #[error("coder endpoint: {0}")]
    Endpoint(String),

    /// The external coder hit a limit of its jail (processes, CPU time,
    /// file size, a disk quota); the staging crate was restored.
    #[error("the coder command `{command}` was stopped: it hit {limit}")]
    Limit {
        /// The command template.
        command: String,
        /// Which limit.
        limit: ecdysis_sys::jail::LimitHit,
        /// Its output and what happened.
        log: String,
    },

    /// No jail can be made for the external coder, and the operator did
    /// not allow running it without one.
    #[error(
        "the external coder runs only in a jail, and {0} (an operator may accept the risk: `train --allow-unjailed-builds`)"
    )]
    NoJail(ecdysis_sys::jail::JailError),

    /// The rule coder's tables could not take its edits (the harness
    /// source lacks a table or field, or the file cannot be read or
    /// written). A training run stops on it: the next round would meet the
    /// same tables.
    #[error(transparent)]
    RuleTables(rule_coder::RuleCoderError),

    /// The rule coder was given a task without the domain its tables key
    /// entries by ([`CoderTask::with_context`]).
    #[error("the rule coder needs the task's domain")]
    NoDomain,

    /// The whole-file coder found no file of the spec's to rewrite.
    #[error("no file for the whole-file coder: {0}")]
    WholeFile(whole_file::TargetError),

    /// A file of the staging crate could not be read, written or restored.
    #[error(transparent)]
    Io(#[from] PathError),
}

impl CoderError {
    /// Coder calls this attempt used (model calls or command runs), for the
    /// budget: failed attempts count too.
    pub fn attempts(&self) -> u32 {
        match self {
            Self::OutsideSrc { attempts, .. }
            | Self::Model { attempts, .. }
            | Self::NoEdits { attempts, .. }
            | Self::NoChange { attempts, .. } => *attempts,
            Self::Timeout { .. } | Self::CommandFailed { .. } | Self::Limit { .. } => 1,
            Self::NotACrate { .. }
            | Self::Spawn { .. }
            | Self::Template(_)
            | Self::Io(_)
            | Self::ContextTooSmall { .. }
            | Self::Endpoint(_)
            | Self::WholeFile(_)
            | Self::RuleTables(_)
            | Self::NoDomain
            | Self::NoJail(_) => 0,
        }
    }

    /// The account of the attempt, when there is one.
    pub fn log(&self) -> &str {
        match self {
            Self::OutsideSrc { log, .. }
            | Self::Model { log, .. }
            | Self::NoEdits { log, .. }
            | Self::NoChange { log, .. }
            | Self::Timeout { log, .. }
            | Self::Limit { log, .. }
            | Self::CommandFailed { log, .. } => log,
            _ => "",
        }
    }
}

/// The future a [`Coder`] returns (boxed, like [`ecdysis_model::ModelFuture`],
/// so coders can be held as `Arc<dyn Coder>`).
pub type CoderFuture<'a> =
    Pin<Box<dyn Future<Output = Result<CoderOutcome, CoderError>> + Send + 'a>>;

/// Implements a spec in a staging copy of the harness crate.
pub trait Coder: Send + Sync {
    /// Short name for logs and records (`editor:<model>`, `external:aider`).
    fn name(&self) -> &str;

    /// Edit the crate at `staging` (its root, holding `Cargo.toml`) to
    /// implement `task`. Only files under `staging/src/` may change.
    fn implement<'a>(&'a self, task: &'a CoderTask, staging: &'a Path) -> CoderFuture<'a>;

    /// Whether the coder implements changes written in prose (every coder
    /// that asks a model or runs an agent) or only the spec's
    /// machine-readable rule edits (the [`RuleCoder`]). A rules-only coder
    /// needs the harness's [`TABLES_FILE`], works from specs with rules
    /// only, and is handed neither the spec's skills ahead of time nor
    /// failure excerpts to read.
    fn reads_prose(&self) -> bool {
        true
    }
}

// ---------------------------------------------------------------------------
// Snapshots of the staging crate.

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    File(Vec<u8>),
    Link(PathBuf),
}

/// The crate's files at one moment (without `target/` and hidden top-level
/// entries other than `.cargo/`, as every crate walk), to detect, diff and
/// undo a coder's edits.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    root: PathBuf,
    nodes: BTreeMap<String, Node>,
    dirs: BTreeSet<String>,
    python: bool,
}

/// Whether `rel` is in the part of a harness a coder may edit: a Rust
/// crate's `src/`; a Python harness's modules (`.py` files, except its
/// `tests/`). Every other file stays the incumbent's.
pub(crate) fn in_coder_area(python: bool, rel: &str) -> bool {
    if python {
        rel.ends_with(".py") && !rel.starts_with("tests/")
    } else {
        rel.starts_with("src/")
    }
}

/// The language a harness is written in: what the coder is told it edits
/// and how its files are quoted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// A Rust crate (`Cargo.toml`, `src/`).
    Rust,
    /// A Python harness (`hooks.py`), built with componentize-py.
    Python,
}

impl Language {
    /// The language of the harness at `root`.
    pub fn of(root: &Path) -> Language {
        if ecdysis_sandbox::store::build_python::is_python_harness(root) {
            Language::Python
        } else {
            Language::Rust
        }
    }

    /// Its name, as the coder is told.
    pub fn name(self) -> &'static str {
        match self {
            Language::Rust => "Rust",
            Language::Python => "Python",
        }
    }

    /// The code-fence tag of its source files.
    pub(crate) fn fence(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::Python => "python",
        }
    }

    /// The part of the harness the coder may edit, as the coder is told.
    pub(crate) fn area(self) -> &'static str {
        match self {
            Language::Rust => "files under the crate's src/ folder",
            Language::Python => "the harness's .py modules (not its tests/)",
        }
    }
}

impl Snapshot {
    /// The crate's files now (entries per [`ecdysis_sys::fsutil::walk_crate`]).
    pub(crate) fn take(root: &Path) -> Result<Snapshot, PathError> {
        let python = ecdysis_sandbox::store::build_python::is_python_harness(root);
        let mut nodes = BTreeMap::new();
        let mut dirs = BTreeSet::new();
        for entry in walk_crate(root)? {
            match entry.kind {
                EntryKind::Dir => {
                    dirs.insert(entry.rel);
                }
                EntryKind::Link(target) => {
                    nodes.insert(entry.rel, Node::Link(target));
                }
                EntryKind::File => {
                    let path = root.join(&entry.rel);
                    let bytes =
                        std::fs::read(&path).map_err(|e| PathError::new("read", &path, e))?;
                    nodes.insert(entry.rel, Node::File(bytes));
                }
            }
        }
        Ok(Snapshot {
            root: root.to_path_buf(),
            nodes,
            dirs,
            python,
        })
    }

    /// Paths that differ from `later` (added, removed, modified), sorted.
    pub(crate) fn changes(&self, later: &Snapshot) -> Vec<String> {
        let keys: BTreeSet<&String> = self.nodes.keys().chain(later.nodes.keys()).collect();
        keys.into_iter()
            .filter(|k| self.nodes.get(*k) != later.nodes.get(*k))
            .cloned()
            .collect()
    }

    /// The regular files under `src/`.
    pub(crate) fn src_tree(&self) -> diff::Tree {
        self.nodes
            .iter()
            .filter(|(p, _)| in_coder_area(self.python, p))
            .filter_map(|(p, n)| match n {
                Node::File(b) => Some((p.clone(), b.clone())),
                Node::Link(_) => None,
            })
            .collect()
    }

    /// Put the crate back as it was: remove what is new, rewrite what
    /// changed or went missing.
    pub(crate) fn restore(&self) -> Result<(), PathError> {
        let now = Snapshot::take(&self.root)?;
        for (rel, node) in &now.nodes {
            if !self.nodes.contains_key(rel) {
                let p = self.root.join(rel);
                if std::fs::symlink_metadata(&p).is_ok() {
                    std::fs::remove_file(&p).map_err(|e| PathError::new("remove", &p, e))?;
                }
            } else if matches!(node, Node::Link(_)) && self.nodes.get(rel) != Some(node) {
                let p = self.root.join(rel);
                std::fs::remove_file(&p).map_err(|e| PathError::new("remove", &p, e))?;
            }
        }
        // New directories, deepest first (they can only hold new entries now).
        for rel in now.dirs.iter().rev() {
            if !self.dirs.contains(rel) {
                let p = self.root.join(rel);
                if p.exists() {
                    std::fs::remove_dir_all(&p).map_err(|e| PathError::new("remove", &p, e))?;
                }
            }
        }
        for rel in &self.dirs {
            let p = self.root.join(rel);
            std::fs::create_dir_all(&p).map_err(|e| PathError::new("create", &p, e))?;
        }
        for (rel, node) in &self.nodes {
            if now.nodes.get(rel) == Some(node) {
                continue;
            }
            let p = self.root.join(rel);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent).map_err(|e| PathError::new("create", parent, e))?;
            }
            match node {
                Node::File(bytes) => {
                    std::fs::write(&p, bytes).map_err(|e| PathError::new("write", &p, e))?
                }
                Node::Link(target) => {
                    let _ = std::fs::remove_file(&p);
                    std::os::unix::fs::symlink(target, &p)
                        .map_err(|e| PathError::new("link", &p, e))?
                }
            }
        }
        Ok(())
    }

    /// The scan findings of this state of the crate (see
    /// [`ecdysis_sandbox::store::scan`]).
    pub(crate) fn findings(&self) -> Vec<Finding> {
        self.nodes
            .iter()
            .flat_map(|(rel, node)| match node {
                Node::Link(target) => vec![scan::link_finding(rel, target)],
                Node::File(bytes) if rel.ends_with(".rs") || rel.ends_with(".py") => {
                    scan::scan_file(rel, bytes)
                }
                Node::File(_) => vec![],
            })
            .collect()
    }

    /// How edits made from this state are built: as untrusted source that
    /// may keep this state's findings.
    pub(crate) fn untrusted_edits(&self, containment: &Containment) -> Trust {
        Trust::Untrusted {
            containment: containment.clone(),
            allowed: self.findings(),
        }
    }

    /// Changes in `later` that a coder may not make: anything outside its
    /// area ([`in_coder_area`]) and any symlink.
    pub(crate) fn forbidden_changes(&self, later: &Snapshot) -> Vec<String> {
        self.changes(later)
            .into_iter()
            .filter(|p| {
                !in_coder_area(self.python, p)
                    || matches!(later.nodes.get(p), Some(Node::Link(_)))
                    || matches!(self.nodes.get(p), Some(Node::Link(_)))
            })
            .collect()
    }
}

/// The crate root must hold `Cargo.toml` and `src/`, or be a Python harness.
pub(crate) fn check_crate(staging: &Path) -> Result<(), CoderError> {
    if (staging.join("Cargo.toml").is_file() && staging.join("src").is_dir())
        || ecdysis_sandbox::store::build_python::is_python_harness(staging)
    {
        Ok(())
    } else {
        Err(CoderError::NotACrate {
            dir: staging.to_path_buf(),
        })
    }
}

/// The diff and changed files of `src/` between two snapshots.
pub(crate) fn src_diff(before: &Snapshot, after: &Snapshot) -> (String, Vec<String>) {
    let (a, b) = (before.src_tree(), after.src_tree());
    (diff::diff_trees(&a, &b), diff::changed_paths(&a, &b))
}

// ---------------------------------------------------------------------------
// The build check.

/// The result of building the staging crate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildCheck {
    /// Whether it compiled.
    pub ok: bool,
    /// The compiler's rendered errors (or the tail of cargo's stderr when it
    /// failed before compiling), clipped; empty on success.
    pub errors: String,
    /// Seconds the build took.
    pub seconds: f64,
}

/// Build the crate at `crate_dir` through the store's one guest-build path
/// (for a coder's edits: `trust` is untrusted, so scanned and jailed; with
/// the timeout, target-dir lock and stale-copy handling of every build),
/// keeping only whether it compiled and the errors. A scan refusal is a
/// failed build whose errors say what was refused (the editor feeds them
/// back like compiler errors). Blocking.
pub fn check_build(
    crate_dir: &Path,
    target_dir: Option<&Path>,
    trust: &Trust,
) -> Result<BuildCheck, CoderError> {
    let opts = BuildOptions {
        // Always named: a staging copy must never fall back to the
        // environment's shared target, where cargo's freshness check could
        // take its older files for another copy's build.
        target_dir: Some(target_dir.map_or_else(|| crate_dir.join("target"), Path::to_path_buf)),
        quiet: true,
        trust: trust.clone(),
        // The profile the candidate is then built with: the check warms
        // its incremental cache.
        profile: BuildProfile::Candidate,
        staged: true,
        ..BuildOptions::default()
    };
    let built = if ecdysis_sandbox::store::build_python::is_python_harness(crate_dir) {
        ecdysis_sandbox::store::build_python::python_build(crate_dir, &opts)
    } else {
        cargo_build(crate_dir, &opts)
    };
    let build = match built {
        Ok(build) => build,
        Err(StoreError::SourceRefused { refusal, .. }) => {
            return Ok(BuildCheck {
                ok: false,
                errors: format!("refused before building: {refusal}"),
                seconds: 0.0,
            });
        }
        Err(e) => {
            return Err(CoderError::Spawn {
                command: "cargo build".into(),
                source: std::io::Error::other(e.to_string()),
            });
        }
    };
    Ok(BuildCheck {
        ok: build.ok,
        errors: build.errors,
        seconds: build.seconds,
    })
}

/// [`check_build`] off the async runtime.
pub(crate) async fn check_build_async(
    crate_dir: &Path,
    target_dir: Option<&Path>,
    trust: &Trust,
) -> Result<BuildCheck, CoderError> {
    let dir = crate_dir.to_path_buf();
    let target = target_dir.map(Path::to_path_buf);
    let trust = trust.clone();
    tokio::task::spawn_blocking(move || check_build(&dir, target.as_deref(), &trust))
        .await
        .unwrap_or_else(|e| {
            Err(CoderError::Spawn {
                command: "cargo build".into(),
                source: std::io::Error::other(e.to_string()),
            })
        })
}

// ---------------------------------------------------------------------------
// Prompts.

/// Keep at most `n` characters, marking the cut.
pub(crate) fn clip_chars(s: &str, n: usize) -> String {
    ecdysis_sys::text::clip_with(s, n, "\n… [clipped]")
}

/// Replace each `{{key}}` of `template` with its value in one pass (values
/// are not rescanned, so evidence containing braces is safe).
pub(crate) fn fill_template(template: &str, vars: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) => {
                let key = after[..end].trim();
                match vars.iter().find(|(k, _)| *k == key) {
                    Some((_, v)) => out.push_str(v),
                    None => out.push_str(&rest[start..start + 2 + end + 2]),
                }
                rest = &after[end + 2..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The `src/` files of a crate with their line counts, one per line.
pub fn list_src_files(crate_dir: &Path) -> Result<String, PathError> {
    let snap = Snapshot::take(crate_dir)?;
    Ok(file_list(&snap.src_tree()))
}

fn file_list(tree: &diff::Tree) -> String {
    tree.iter()
        .map(|(p, b)| match std::str::from_utf8(b) {
            Ok(s) => {
                // The first line of the module doc says what the file is for.
                let about = s
                    .lines()
                    .map(str::trim_start)
                    .find(|l| l.starts_with("//!") && l.len() > 3)
                    .map(|l| format!(": {}", l.trim_start_matches("//!").trim()))
                    .unwrap_or_default();
                format!("- {p} ({} lines){about}\n", s.lines().count())
            }
            Err(_) => format!("- {p} (binary, {} bytes)\n", b.len()),
        })
        .collect()
}

fn fence(path: &str, text: &str) -> String {
    let lang = if path.ends_with(".rs") {
        "rust"
    } else if path.ends_with(".py") {
        "python"
    } else {
        ""
    };
    format!(
        "### {path}\n```{lang}\n{}{}```\n\n",
        text,
        if text.ends_with('\n') { "" } else { "\n" }
    )
}

/// The harness sources a coder sees, most useful first: the rule tables,
/// the files the spec names, the files of the layers its changes target,
/// then the rest from the smallest; whole while they fit `chars` characters
/// and `tokens` estimated tokens (the first file is clipped rather than
/// dropped); the others are named as not shown.
fn render_sources(
    tree: &diff::Tree,
    spec: &ChangeSpec,
    chars: usize,
    tokens: Option<usize>,
) -> String {
    fn push<'t>(p: &'t String, order: &mut Vec<&'t String>) {
        if !order.contains(&p) {
            order.push(p);
        }
    }
    let mut order: Vec<&String> = Vec::new();
    // The rule tables first: a Rust crate's, then a Python harness's (its
    // rules next, the WIT glue last).
    for first in ["src/tables.rs", "tables.py", "rules.py"] {
        if let Some((p, _)) = tree.get_key_value(first) {
            push(p, &mut order);
        }
    }
    for c in &spec.proposed_changes {
        let f = c.file.trim_start_matches("./");
        if let Some((p, _)) = tree.get_key_value(f) {
            push(p, &mut order);
        }
    }
    let mut layered: Vec<(&String, &Vec<u8>)> = tree
        .iter()
        .filter(|(p, _)| {
            spec.proposed_changes
                .iter()
                .any(|c| p.starts_with(crate::diagnose::fdcr::layer_dir(c.layer)))
        })
        .collect();
    layered.sort_by_key(|(p, b)| (b.len(), (*p).clone()));
    for (p, _) in layered {
        push(p, &mut order);
    }
    let mut rest: Vec<(&String, &Vec<u8>)> = tree.iter().collect();
    rest.sort_by_key(|(p, b)| (b.len(), (*p).clone()));
    for (p, _) in rest {
        push(p, &mut order);
    }
    // Room for the closing line: it names the files left out when that
    // takes at most a quarter of the cap, else counts them.
    let names_room = 40
        + order
            .iter()
            .map(|p| token_budget::estimate_tokens(p) + 1)
            .sum::<usize>();
    let name_them = tokens.is_none_or(|t| names_room <= t / 4);
    let footer_room = match tokens {
        None => 0,
        Some(_) if name_them => names_room,
        Some(_) => 60,
    };
    let mut out = String::new();
    let (mut used, mut used_tokens) = (0usize, 0usize);
    let mut hidden = Vec::new();
    for (i, p) in order.into_iter().enumerate() {
        let Ok(text) = std::str::from_utf8(&tree[p]) else {
            continue;
        };
        let block = fence(p, text);
        let n = token_budget::estimate_tokens(&block);
        let left = tokens.map(|t| t.saturating_sub(used_tokens + footer_room));
        let fits_tokens = left.is_none_or(|l| n <= l);
        if (used + text.len() <= chars || used == 0) && fits_tokens {
            used += text.len();
            used_tokens += n;
            out += &block;
        } else if i == 0
            && let Some(left) = left.filter(|l| *l > 300)
        {
            let frame = token_budget::estimate_tokens(&fence(p, "")) + 2;
            let block = fence(p, &token_budget::clip_lines(text, left - frame, "file"));
            used += block.len();
            used_tokens += token_budget::estimate_tokens(&block);
            out += &block;
        } else {
            hidden.push(p.as_str());
        }
    }
    if !hidden.is_empty() {
        let which = if name_them {
            hidden.join(", ")
        } else {
            format!("{} file(s) of the list above", hidden.len())
        };
        out += &format!(
            "(Not shown to fit the context budget: {which}. Open them yourself if you need them; the search/replace format needs their exact text.)\n"
        );
    }
    out
}

/// The coder's task text: spec, notes, file list, sources (up to
/// `source_budget` characters), the contract rules and the mode's
/// `instructions` (edit format or CLI guidance). With a token `room`, the
/// spec, the notes (evidence) and the sources share what the fixed parts
/// leave, largest first: `Ok(None)` when even the fixed parts do not fit.
pub fn coder_prompt(
    task: &CoderTask,
    staging: &Path,
    instructions: &str,
    source_budget: usize,
    room: Option<usize>,
) -> Result<Option<String>, CoderError> {
    check_crate(staging)?;
    let snap = Snapshot::take(staging)?;
    let tree = snap.src_tree();
    let spec = serde_json::to_string_pretty(&task.spec).unwrap_or_default();
    let notes = task.notes.clone().unwrap_or_else(|| "(none)".into());
    let files = file_list(&tree);
    let fill = |spec: &str, notes: &str, files: &str, sources: &str| {
        fill_template(
            CODER_TASK,
            &[
                ("spec", spec),
                ("notes", notes),
                ("files", files),
                ("sources", sources),
                (
                    "contract",
                    match Language::of(staging) {
                        Language::Rust => CONTRACT_RULES.trim(),
                        Language::Python => CONTRACT_RULES_PYTHON.trim(),
                    },
                ),
                ("instructions", instructions.trim()),
                ("area", Language::of(staging).area()),
            ],
        )
    };
    let Some(room) = room else {
        let sources = render_sources(&tree, &task.spec, source_budget, None);
        return Ok(Some(fill(&spec, &notes, &files, &sources)));
    };
    let fixed = token_budget::estimate_tokens(&fill("", "", "", ""));
    let Some(room) = room.checked_sub(fixed + 16) else {
        return Ok(None);
    };
    let files_section = Section::text(files, "file list");
    let spec_section = Section::text(spec, "spec");
    let notes_section = Section::new(move |cap| match cap {
        None => notes.clone(),
        Some(cap) => clip_blocks(&notes, cap, "evidence excerpt"),
    });
    let (tree2, spec2) = (tree.clone(), task.spec.clone());
    let sources_section =
        Section::new(move |cap| render_sources(&tree2, &spec2, source_budget, cap));
    let parts = token_budget::fit_sections(
        &[
            &spec_section,
            &notes_section,
            &files_section,
            &sources_section,
        ],
        room,
    );
    Ok(Some(fill(&parts[0], &parts[1], &parts[2], &parts[3])))
}

/// The blank-line separated blocks of `text` (evidence excerpts) that fit
/// `cap` tokens, in order, and a line saying how many were left out.
pub fn clip_blocks(text: &str, cap: usize, what: &str) -> String {
    if token_budget::estimate_tokens(text) <= cap {
        return text.to_string();
    }
    let blocks: Vec<&str> = text.split("\n\n").collect();
    let room = cap.saturating_sub(30);
    let mut out = String::new();
    let mut used = 0;
    let mut left_out = 0;
    for b in &blocks {
        let piece = format!("{b}\n\n");
        let n = token_budget::estimate_tokens(&piece);
        if used + n <= room {
            out += &piece;
            used += n;
        } else {
            left_out += 1;
        }
    }
    if left_out > 0 {
        out += &format!("({left_out} {what}(s) left out to fit the context budget.)\n");
    }
    out
}

/// The coder's system prompt.
pub fn coder_system_prompt(language: Language) -> String {
    fill_template(
        CODER_SYSTEM.trim(),
        &[("language", language.name()), ("area", language.area())],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_fill_once_and_keep_unknown_keys() {
        let out = fill_template(
            "a {{x}} b {{ y }} c {{unknown}} d {{",
            &[("x", "{{y}}"), ("y", "Y")],
        );
        assert_eq!(out, "a {{y}} b Y c {{unknown}} d {{");
    }

    #[test]
    fn snapshots_detect_restore_and_police_edits() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/sub")).unwrap();
        std::fs::write(root.join("Cargo.toml"), "[package]\n").unwrap();
        std::fs::write(root.join("src/lib.rs"), "pub fn a() {}\n").unwrap();
        std::fs::write(root.join("src/sub/m.rs"), "x\n").unwrap();
        std::fs::create_dir_all(root.join("target/x")).unwrap();
        let before = Snapshot::take(root).unwrap();
        assert!(!before.nodes.keys().any(|k| k.starts_with("target")));

        std::fs::write(root.join("src/lib.rs"), "pub fn b() {}\n").unwrap();
        std::fs::write(root.join("Cargo.toml"), "[package]\nbuild = 'x'\n").unwrap();
        std::fs::remove_file(root.join("src/sub/m.rs")).unwrap();
        std::fs::create_dir_all(root.join("src/new/deep")).unwrap();
        std::fs::write(root.join("src/new/deep/n.rs"), "n\n").unwrap();
        std::fs::write(root.join("build.rs"), "fn main() {}\n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("src/link.rs")).unwrap();
        std::fs::write(root.join("target/x/junk"), "j").unwrap();
        std::fs::write(root.join(".aider.chat.history.md"), "h").unwrap();
        let after = Snapshot::take(root).unwrap();
        assert_eq!(
            before.changes(&after),
            vec![
                "Cargo.toml",
                "build.rs",
                "src/lib.rs",
                "src/link.rs",
                "src/new/deep/n.rs",
                "src/sub/m.rs"
            ]
        );
        assert_eq!(
            before.forbidden_changes(&after),
            vec!["Cargo.toml", "build.rs", "src/link.rs"]
        );
        let (patch, changed) = src_diff(&before, &after);
        assert_eq!(
            changed,
            vec!["src/lib.rs", "src/new/deep/n.rs", "src/sub/m.rs"]
        );
        assert!(
            patch.contains("-pub fn a() {}\n+pub fn b() {}\n"),
            "{patch}"
        );

        before.restore().unwrap();
        let restored = Snapshot::take(root).unwrap();
        assert!(before.changes(&restored).is_empty());
        assert_eq!(before.dirs, restored.dirs);
        assert!(!root.join("src/new").exists());
        assert_eq!(
            std::fs::read_to_string(root.join("Cargo.toml")).unwrap(),
            "[package]\n"
        );
        // Untracked entries are left alone.
        assert!(root.join("target/x/junk").exists());
    }
}

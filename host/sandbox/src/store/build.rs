//! The one guest-build path: `cargo build --release --target wasm32-wasip2`
//! (or the crate's `candidate` profile, [`BuildProfile`]) of a harness crate, for `ecdysis-host build`, for `--harness <crate>`,
//! for every training candidate and for the coders' build checks.
//!
//! Who wrote the source decides how it is built ([`Trust`]):
//!
//! - [`Trust::Own`]: the user's own crate (`build`, `--harness <crate>`, the
//!   source a training run starts from) is built as is, with the user's
//!   environment and network. This build also downloads and unpacks the
//!   crate's locked dependencies into the cargo registry cache, which the
//!   untrusted builds of its descendants then use offline.
//! - [`Trust::Untrusted`]: source a coder wrote (every training candidate,
//!   the coders' build checks) is first scanned ([`super::scan`]: no
//!   construct reading outside the crate beyond what its reference already
//!   had), then built `--offline --locked` in a bubblewrap jail
//!   ([`ecdysis_sys::jail`]) that sees only the crate (read-write), the target
//!   directory (read-write), the WIT package beside it (`../wit`), the
//!   toolchain and the registry cache (read-only); no network; a cleared
//!   environment; an address-space limit per process. Where no jail can be
//!   made the build is refused ([`StoreError::NoJail`]) unless the
//!   operator allowed unjailed builds ([`Containment::allow_unjailed`]);
//!   then it still gets the scan, the cleared environment, the offline
//!   locked build and the memory limit.
//!
//! Every build: runs as a child process in its own group with a wall-clock
//! timeout (the whole group is killed); has the variables a cargo-built
//! host would leak removed; holds a lock on its target directory, so
//! builds sharing it (threads or processes) cannot swap artifacts; and,
//! with a target directory shared across copies of a crate, touches the
//! copy's sources first (cargo decides freshness by file times, so a copy
//! older than another copy's last build would otherwise pass as fresh).

use ecdysis_sys::progress::PROGRESS;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::scan::{self, Finding};
use super::{ComponentStore, Manifest, ManifestFacts, StoreError};
use crate::store::ComponentHash;
use ecdysis_sys::fsutil::{EntryKind, PathError, copy_crate, walk_crate};
use ecdysis_sys::jail::{
    Jail, JailLimits, JailSpec, LimitGuard, ProcessLimiter, Toolchain, apply_limits,
};
use ecdysis_sys::process::{Scratch, run_watched, scrub_cargo_env};

/// Longest a guest build may take by default.
pub const BUILD_TIMEOUT: Duration = Duration::from_secs(900);

/// Default address-space limit of each process of an untrusted build
/// (cargo, rustc, the linker). A harness build needs well under 1 GiB;
/// its dependencies' host builds (wit-parser, wasm-encoder) somewhat more.
pub const UNTRUSTED_BUILD_MEMORY: u64 = 4 << 30;

/// How untrusted source is contained (one policy per training run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Containment {
    /// Build without a jail where bubblewrap cannot make one (the
    /// operator's explicit `--allow-unjailed-builds`); otherwise such a
    /// build is refused.
    pub allow_unjailed: bool,
    /// Scan the source before building (defence in depth; off only in
    /// tests that show the jail alone holds).
    pub scan: bool,
    /// Limits of the build's processes: address space, CPU time and file
    /// size per process, tasks at once, `/tmp` size.
    pub limits: JailLimits,
}

impl Default for Containment {
    fn default() -> Self {
        Containment {
            allow_unjailed: false,
            scan: true,
            limits: JailLimits {
                memory: UNTRUSTED_BUILD_MEMORY,
                ..JailLimits::default()
            },
        }
    }
}

/// Who wrote the source being built (see the module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Trust {
    /// The user's own crate: built as is, with network and environment.
    #[default]
    Own,
    /// Source a coder wrote: scanned, then built offline in a jail.
    Untrusted {
        /// How it is contained.
        containment: Containment,
        /// The scan findings of its reference (the incumbent it was edited
        /// from): these may stay, nothing may be added.
        allowed: Vec<Finding>,
    },
}

impl Trust {
    /// Untrusted source edited from the crate at `reference` (whose scan
    /// findings it may keep).
    pub fn untrusted_from(containment: &Containment, reference: &Path) -> Result<Trust, PathError> {
        Ok(Trust::Untrusted {
            containment: containment.clone(),
            allowed: scan::scan_crate(reference)?,
        })
    }
}

/// The variable naming the cargo target directory of Rust harness builds
/// that name none, the way `CARGO_TARGET_DIR` does for cargo (which the
/// host scrubs from a harness build): one warm directory for every harness
/// crate instead of a cold one per crate.
pub const TARGET_DIR_ENV: &str = "ECDYSIS_CARGO_TARGET_DIR";

/// The file in a [`TARGET_DIR_ENV`] target naming the crate directory last
/// built in place into it, one per profile and artifact name
/// ([`in_place_marker_name`]).
const LAST_IN_PLACE_FILE: &str = ".ecdysis-last-in-place";

/// Most characters of compiler output kept in an error.
const ERROR_CLIP: usize = 8_000;

/// How to build a guest crate.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Cargo features to enable.
    pub features: Vec<String>,
    /// The component this one derives from (recorded in the manifest).
    pub parent: Option<ComponentHash>,
    /// Cargo target directory (default: [`TARGET_DIR_ENV`] if set, else
    /// the crate's own `target/`). Sharing one across staging copies and
    /// crates keeps dependency builds warm. A staging copy must name one:
    /// only a named directory gets the stale-copy handling.
    pub target_dir: Option<PathBuf>,
    /// Do not report cargo's diagnostics as progress events.
    pub quiet: bool,
    /// Wall-clock limit of the build.
    pub timeout: Duration,
    /// Who wrote the source.
    pub trust: Trust,
    /// Which cargo profile builds it.
    pub profile: BuildProfile,
    /// The crate is a staging copy (its directory and a `wit/` beside it
    /// are all it reads) and `target_dir` is named: it is built from a copy
    /// at one fixed path per target directory ([`staged_dir`]). rustc keys its
    /// incremental cache by the working directory, so every staging copy,
    /// of any run sharing the directory, then rebuilds incrementally from
    /// the last one instead of from scratch; the bytes do not depend on
    /// the path.
    pub staged: bool,
    /// The `componentize-py` that builds a Python harness (default: see
    /// [`super::build_python::PythonTool::find`]).
    pub python_tool: Option<PathBuf>,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            features: vec![],
            parent: None,
            target_dir: None,
            quiet: false,
            timeout: BUILD_TIMEOUT,
            trust: Trust::Own,
            profile: BuildProfile::Release,
            python_tool: None,
            staged: false,
        }
    }
}

/// The cargo profile of a guest build.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BuildProfile {
    /// `--release`: what `build` and `--harness <crate>` ship.
    #[default]
    Release,
    /// `--profile candidate` when the crate's `Cargo.toml` defines
    /// `[profile.candidate]` (the template's is the release profile without
    /// LTO, with incremental compilation and the crate itself at a low
    /// opt-level), else `--release`. Training builds every harness of a run
    /// with it: a round rebuilds only the edited crate, in about a second
    /// instead of the ten an LTO build takes, and every harness the gate
    /// compares is built alike.
    Candidate,
}

/// The profile name `candidate` builds use, as the crate must spell it.
pub const CANDIDATE_PROFILE: &str = "candidate";

impl BuildProfile {
    /// The profile cargo builds the crate whose manifest text is
    /// `manifest` with, as its directory under the target is named.
    fn dir_name(self, manifest: &str) -> &'static str {
        if self.is_candidate_of(manifest) {
            CANDIDATE_PROFILE
        } else {
            "release"
        }
    }

    /// Cargo's flags for this profile on the crate whose manifest text is
    /// `manifest`.
    fn cargo_args(self, manifest: &str) -> Vec<std::ffi::OsString> {
        if self.is_candidate_of(manifest) {
            vec!["--profile".into(), CANDIDATE_PROFILE.into()]
        } else {
            vec!["--release".into()]
        }
    }

    /// Whether this is `Candidate` and the manifest defines that profile.
    fn is_candidate_of(self, manifest: &str) -> bool {
        let header = format!("[profile.{CANDIDATE_PROFILE}]");
        self == BuildProfile::Candidate && manifest.lines().any(|l| l.trim() == header)
    }
}

/// What one cargo build produced.
#[derive(Debug, Clone)]
pub struct CargoBuild {
    /// Whether cargo succeeded.
    pub ok: bool,
    /// The component it wrote (on success).
    pub wasm: Option<PathBuf>,
    /// True when cargo found the artifact up to date and compiled nothing.
    pub fresh: bool,
    /// The compiler's rendered errors (or the tail of cargo's stderr when it
    /// failed before compiling), clipped; empty on success.
    pub errors: String,
    /// Seconds the build took.
    pub seconds: f64,
    /// Whether it ran in a jail.
    pub jailed: bool,
    /// The limit it hit, if any (an untrusted build).
    pub limit: Option<ecdysis_sys::jail::LimitHit>,
    /// The target directory's build lock, held while this value lives:
    /// until then no other build sharing the directory can replace the
    /// artifact at `wasm`.
    pub target_lock: Option<std::sync::Arc<std::fs::File>>,
}

/// The result of [`ComponentStore::build`].
#[derive(Debug, Clone)]
pub struct BuildOutcome {
    /// The stored component's manifest.
    pub manifest: Manifest,
    /// True when cargo found the artifact up to date and compiled nothing.
    pub cargo_fresh: bool,
}

/// blake3 over a crate's source (relative path, length and content of
/// every file and link target, per [`walk_crate`]): what changed between
/// two candidates, independent of build outputs.
pub fn source_tree_hash(dir: &Path) -> Result<String, PathError> {
    let mut hasher = blake3::Hasher::new();
    for entry in walk_crate(dir)? {
        let bytes = match &entry.kind {
            EntryKind::Dir => continue,
            EntryKind::File => {
                let path = dir.join(&entry.rel);
                std::fs::read(&path).map_err(|e| PathError::new("read", &path, e))?
            }
            EntryKind::Link(target) => target.to_string_lossy().as_bytes().to_vec(),
        };
        hasher.update(entry.rel.as_bytes());
        hasher.update(&[0]);
        hasher.update(&(bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
    }
    Ok(hasher.finalize().to_hex().to_string())
}

/// Set the modification time of every file under `dir` to now.
fn touch_all(dir: &Path) {
    let now = std::time::SystemTime::now();
    for entry in walk_crate(dir).unwrap_or_default() {
        if entry.kind == EntryKind::File
            && let Ok(f) = std::fs::File::options()
                .write(true)
                .open(dir.join(&entry.rel))
        {
            let _ = f.set_modified(now);
        }
    }
}

fn clip(s: &str) -> String {
    ecdysis_sys::text::clip_with(s, ERROR_CLIP, "\n… (clipped)")
}

/// Build the crate at `crate_dir` (blocking). A failed build is a
/// [`CargoBuild`] with `ok: false` and the errors; only a missing crate or
/// a cargo that cannot start is an `Err`.
pub fn cargo_build(crate_dir: &Path, opts: &BuildOptions) -> Result<CargoBuild, StoreError> {
    cargo_build_scanned(crate_dir, opts, false)
}

/// [`cargo_build`], told whether an untrusted source was scanned already
/// (by the kept-build lookup just before it).
pub(super) fn cargo_build_scanned(
    crate_dir: &Path,
    opts: &BuildOptions,
    scanned: bool,
) -> Result<CargoBuild, StoreError> {
    let manifest_path = crate_dir.join("Cargo.toml");
    if !manifest_path.is_file() {
        return Err(PathError::new(
            "find",
            &manifest_path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no Cargo.toml: not a crate"),
        )
        .into());
    }
    // Absolute, so cargo (run inside the crate) resolves every path alike.
    let crate_dir =
        &std::fs::canonicalize(crate_dir).map_err(|e| PathError::new("resolve", crate_dir, e))?;
    let named = opts.target_dir.clone().or_else(|| {
        std::env::var_os(TARGET_DIR_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    });
    let target = match &named {
        Some(t) => Some(std::path::absolute(t).map_err(|e| PathError::new("resolve", t, e))?),
        None => None,
    };
    // The staged copy's manifest is this one, byte for byte.
    let manifest_text = std::fs::read_to_string(&manifest_path)
        .map_err(|e| PathError::new("read", &manifest_path, e))?;
    let profile = opts.profile.dir_name(&manifest_text);
    // Never a copy inside the crate (a target in the crate): it would copy
    // itself and show up in the crate's source.
    let stage_at = match (&opts.target_dir, &target) {
        (Some(_), Some(target)) if opts.staged && !staged_dir(target).starts_with(crate_dir) => {
            Some(target)
        }
        _ => None,
    };
    // The one staging path is taken first, then the profile's artifacts;
    // builds of other profiles run beside (cargo, too, locks a target per
    // profile). The staging lock ends with this function, the profile's is
    // held until the caller has read the artifact (it goes with the build).
    let _staging = match stage_at {
        Some(target) => Some(lock_build(crate_dir, Some(target), "staged")?),
        None => None,
    };
    let lock = lock_build(crate_dir, target.as_deref(), profile)?;
    let staged = match stage_at {
        Some(target) => Some(stage_at_fixed_path(crate_dir, target)?),
        None => None,
    };
    // A named directory serves staging copies whose files can be older than
    // the last build's outputs (a fresh staged copy is newer than them); the
    // environment's default serves crates built in place, which cargo's own
    // freshness check is right for.
    if staged.is_none() && opts.target_dir.is_some() {
        touch_all(&crate_dir.join("src"));
    }
    // Two crates of one package name built in place into the environment's
    // shared target (copies of one harness) share the artifact's path there,
    // which cargo re-links only when it rebuilds: a crate built before the
    // other, and up to date by its own files, would be served the other's
    // file. The target remembers, per artifact name, the crate it last
    // built in place; another one is rebuilt from its own files. Crates of
    // other artifact names own other paths, so building one leaves the
    // others fresh.
    let in_place_marker = target
        .as_deref()
        .filter(|_| staged.is_none() && opts.target_dir.is_none())
        .map(|t| t.join(in_place_marker_name(profile, &manifest_text)));
    if let Some(marker) = &in_place_marker
        && std::fs::read(marker).ok().as_deref() != Some(crate_dir.as_os_str().as_encoded_bytes())
    {
        touch_all(&crate_dir.join("src"));
    }
    let build_dir = staged.as_deref().unwrap_or(crate_dir);
    let manifest_path = build_dir.join("Cargo.toml");
    let mut args = cargo_args(opts, &manifest_path, &manifest_text, target.as_deref());
    // Keeps an unjailed untrusted build's HOME alive until it ends.
    let mut _home: Option<Scratch> = None;
    let mut jailed = false;
    let (cmd, limits) = match &opts.trust {
        Trust::Own => {
            let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
            cmd.args(&args).current_dir(build_dir);
            scrub_cargo_env(&mut cmd);
            (cmd, None)
        }
        Trust::Untrusted {
            containment,
            allowed,
        } => {
            if !scanned {
                refuse_unscanned(crate_dir, containment, allowed)?;
            }
            // Offline and locked: the dependencies are the reference's, as
            // the trusted build of the user's crate fetched them.
            args.push("--offline".into());
            args.push("--locked".into());
            let contained = untrusted_command(build_dir, target.as_deref(), &args, containment)?;
            jailed = contained.jailed;
            _home = contained.home;
            (contained.cmd, Some((containment.limits, contained.guard)))
        }
    };
    let (out, hit) = run_contained(cmd, opts.timeout, limits.as_ref())?;
    let memory_limit = limits.as_ref().map(|(l, _)| l.memory);
    drop(limits);
    if !opts.quiet && !out.stderr.is_empty() {
        tracing::info!(target: PROGRESS, "{}", out.stderr.trim_end());
    }
    let mut build = CargoBuild {
        ok: out.success(),
        wasm: None,
        fresh: false,
        errors: String::new(),
        seconds: out.elapsed.as_secs_f64(),
        jailed,
        limit: None,
        target_lock: Some(std::sync::Arc::new(lock)),
    };
    let errors = read_messages(&out.stdout, opts.quiet, &mut build);
    if let Some(marker) = in_place_marker.filter(|_| build.ok) {
        // Best effort: without the record the next build of another crate
        // is merely rebuilt.
        let _ =
            ecdysis_sys::fsutil::atomic_write(&marker, crate_dir.as_os_str().as_encoded_bytes());
    }
    if !build.ok {
        explain_failure(&mut build, errors, &out, opts.timeout, memory_limit, hit);
        if let Some(staged) = &staged {
            // Name the files the caller knows: the crate, then its siblings.
            build.errors = build
                .errors
                .replace(&*staged.to_string_lossy(), &crate_dir.to_string_lossy());
            if let (Some(root), Some(parent)) = (staged.parent(), crate_dir.parent()) {
                build.errors = build
                    .errors
                    .replace(&*root.to_string_lossy(), &parent.to_string_lossy());
            }
        }
    }
    Ok(build)
}

/// The marker file naming the crate last built in place into a shared
/// target for `profile` and the artifact `manifest` builds: one per
/// artifact name, since only crates whose artifacts share a path there can
/// be served each other's file (copies of one harness). A manifest whose
/// names this cannot read shares one marker with every other such crate (a
/// needless rebuild at worst, never a wrong artifact).
fn in_place_marker_name(profile: &str, manifest: &str) -> String {
    match artifact_stem(manifest) {
        Some(stem) => format!("{LAST_IN_PLACE_FILE}-{profile}-{stem}"),
        None => format!("{LAST_IN_PLACE_FILE}-{profile}"),
    }
}

/// The file stem of the library a manifest builds: its `[lib]` name, else
/// its package name with dashes as underscores (cargo's rule).
fn artifact_stem(manifest: &str) -> Option<String> {
    match table_name(manifest, "[lib]") {
        Name::Plain(name) => Some(name.to_owned()),
        Name::Unreadable => None,
        Name::Absent => match table_name(manifest, "[package]") {
            Name::Plain(name) => Some(name.replace('-', "_")),
            Name::Absent | Name::Unreadable => None,
        },
    }
}

/// A table's `name` key, as [`table_name`] reads it.
#[derive(Debug, PartialEq)]
enum Name<'a> {
    /// Written `name = "..."`, of word characters and dashes.
    Plain(&'a str),
    /// Written some other way.
    Unreadable,
    /// Not in the table (or no such table).
    Absent,
}

/// The `name` key of the manifest's `table` (`"[package]"`, `"[lib]"`).
fn table_name<'a>(manifest: &'a str, table: &str) -> Name<'a> {
    let mut inside = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == table;
            continue;
        }
        let value = line
            .strip_prefix("name")
            .map(str::trim_start)
            .and_then(|rest| rest.strip_prefix('='));
        let (true, Some(value)) = (inside, value) else {
            continue;
        };
        let plain = value
            .trim()
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .filter(|name| {
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            });
        return plain.map_or(Name::Unreadable, Name::Plain);
    }
    Name::Absent
}

/// Where staging copies built into `target` are built
/// ([`BuildOptions::staged`]): `<target>.staged`, holding `crate/` and
/// `wit/`. Beside the target directory, never inside it: cargo records the
/// sources it finds under the target directory relative to it, so another
/// copy of the crate, built in place into the same target, would be
/// checked against this copy's files and could be taken for up to date.
pub fn staged_dir(target: &Path) -> PathBuf {
    let mut name = target.as_os_str().to_os_string();
    name.push(".staged");
    PathBuf::from(name)
}

/// Replace [`staged_dir`] with a copy of the crate (as `crate/`) and of the
/// `wit/` beside it, and return the copy's crate directory. The old copy
/// goes whole, whatever a build left in it: a link put in its place is
/// removed, never followed.
fn stage_at_fixed_path(crate_dir: &Path, target: &Path) -> Result<PathBuf, PathError> {
    let root = staged_dir(target);
    match std::fs::symlink_metadata(&root) {
        Ok(meta) if meta.is_dir() => {
            std::fs::remove_dir_all(&root).map_err(|e| PathError::new("remove", &root, e))?
        }
        Ok(_) => std::fs::remove_file(&root).map_err(|e| PathError::new("remove", &root, e))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(PathError::new("stat", &root, e)),
    }
    let staged = root.join("crate");
    copy_crate(crate_dir, &staged)?;
    if let Some(wit) = crate_dir.parent().map(|p| p.join("wit"))
        && wit.is_dir()
    {
        copy_crate(&wit, &root.join("wit"))?;
    }
    Ok(staged)
}

/// The scan before an untrusted build (when `containment` asks for it):
/// refused when the source adds a construct `allowed` does not cover.
pub(crate) fn refuse_unscanned(
    dir: &Path,
    containment: &Containment,
    allowed: &[Finding],
) -> Result<(), StoreError> {
    if containment.scan {
        scan::refuse_new(scan::scan_crate(dir)?, allowed).map_err(|refusal| {
            StoreError::SourceRefused {
                crate_dir: dir.to_path_buf(),
                refusal,
            }
        })?;
    }
    Ok(())
}

/// Run a build command to its end under its timeout and, for an untrusted
/// build, its limits: one that hit its process limit is stopped at once (a
/// fork bomb retrying its forks would run to the timeout). Returns the
/// output and the limit it hit, if any.
pub(crate) fn run_contained(
    cmd: Command,
    timeout: Duration,
    limits: Option<&(JailLimits, LimitGuard)>,
) -> Result<
    (
        ecdysis_sys::process::ProcOutput,
        Option<ecdysis_sys::jail::LimitHit>,
    ),
    StoreError,
> {
    let tripwire = limits.map(|(_, guard)| guard.tripwire());
    let out = run_watched(cmd, timeout, &mut || {
        tripwire
            .as_ref()
            .and_then(|t| t.tripped())
            .map(|h| h.to_string())
    })
    .map_err(StoreError::CargoMissing)?;
    let hit = limits.and_then(|(l, guard)| guard.hit(l, out.status, &out.stderr));
    Ok((out, hit))
}

/// Builds of one profile sharing a target dir write the same artifact
/// path: a lock held until the artifact is read keeps concurrent builders
/// (threads or processes) from swapping them; `what` names the profile (or
/// the staging path). Without an explicit target dir cargo uses the crate's
/// workspace target (shared by the guests of one workspace), and the lock
/// sits in the crate (a hidden top-level entry, which no crate walk counts
/// as source).
fn lock_build(
    crate_dir: &Path,
    target: Option<&Path>,
    what: &str,
) -> Result<std::fs::File, StoreError> {
    let lock_dir = target.unwrap_or(crate_dir);
    std::fs::create_dir_all(lock_dir).map_err(|e| PathError::new("create", lock_dir, e))?;
    let lock_path = lock_dir.join(format!(".ecdysis-build-{what}.lock"));
    let lock =
        std::fs::File::create(&lock_path).map_err(|e| PathError::new("create", &lock_path, e))?;
    lock.lock()
        .map_err(|e| PathError::new("lock", &lock_path, e))?;
    Ok(lock)
}

/// `cargo build` for the component target, with JSON messages.
fn cargo_args(
    opts: &BuildOptions,
    manifest_path: &Path,
    manifest_text: &str,
    target: Option<&Path>,
) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = vec!["build".into()];
    args.extend(opts.profile.cargo_args(manifest_text));
    args.extend(["--target".into(), "wasm32-wasip2".into()]);
    args.push("--message-format=json".into());
    args.push("--manifest-path".into());
    args.push(manifest_path.as_os_str().to_owned());
    if let Some(t) = target {
        args.push("--target-dir".into());
        args.push(t.as_os_str().to_owned());
    }
    if !opts.features.is_empty() {
        args.push("--features".into());
        args.push(opts.features.join(",").into());
    }
    args
}

/// The command of an untrusted build, and what contains it.
struct Contained {
    cmd: Command,
    guard: LimitGuard,
    jailed: bool,
    /// The scratch HOME of an unjailed build (kept until the build ends).
    home: Option<Scratch>,
}

/// The jailed cargo command for untrusted source, or, where no jail works
/// and the operator allowed it, the same limits without one.
fn untrusted_command(
    crate_dir: &Path,
    target: Option<&Path>,
    args: &[std::ffi::OsString],
    containment: &Containment,
) -> Result<Contained, StoreError> {
    let toolchain = Toolchain::host();
    let no_jail = |reason| StoreError::NoJail {
        crate_dir: crate_dir.to_path_buf(),
        reason,
    };
    match Jail::get() {
        Ok(jail) => {
            let mut read_write = vec![crate_dir.to_path_buf()];
            read_write.extend(target.map(Path::to_path_buf));
            let mut read_only = toolchain.read_only.clone();
            if let Some(parent) = crate_dir.parent() {
                read_only.push(parent.join("wit"));
            }
            let spec = JailSpec {
                read_write,
                read_only,
                network: false,
                env: toolchain.env.clone(),
                cwd: crate_dir.to_path_buf(),
                limits: containment.limits,
                ..JailSpec::default()
            };
            let (mut cmd, guard) = jail
                .command(&spec, toolchain.cargo.as_os_str())
                .map_err(no_jail)?;
            cmd.args(args);
            Ok(Contained {
                cmd,
                guard,
                jailed: true,
                home: None,
            })
        }
        Err(reason) if containment.allow_unjailed => {
            tracing::warn!(
                crate_dir = %crate_dir.display(),
                %reason,
                "building untrusted source WITHOUT a jail (allowed by the operator)"
            );
            let home = Scratch::new("build-home")?;
            let mut cmd = Command::new(&toolchain.cargo);
            cmd.args(args)
                .current_dir(crate_dir)
                .env_clear()
                .envs(toolchain.env.iter().map(|(k, v)| (k, v)))
                .env("HOME", home.path());
            // The same limits (the process count where it can be had); the
            // unjailed /tmp is the host's.
            let limiter = ProcessLimiter::probe().unwrap_or(ProcessLimiter::Rlimit);
            let guard = apply_limits(&mut cmd, &containment.limits, &limiter).map_err(no_jail)?;
            Ok(Contained {
                cmd,
                guard,
                jailed: false,
                home: Some(home),
            })
        }
        Err(reason) => Err(no_jail(reason)),
    }
}

/// Reads cargo's JSON messages into `build` (the artifact and whether it was
/// fresh), echoing compiler messages unless `quiet`; returns the rendered
/// errors.
fn read_messages(stdout: &str, quiet: bool, build: &mut CargoBuild) -> String {
    let mut errors = String::new();
    for line in stdout.lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] == "compiler-message"
            && let Some(rendered) = msg["message"]["rendered"].as_str()
        {
            if !quiet {
                tracing::info!(target: PROGRESS, "{}", rendered.trim_end());
            }
            if msg["message"]["level"] == "error" {
                errors.push_str(rendered);
            }
        }
        if msg["reason"] == "compiler-artifact"
            && let Some(files) = msg["filenames"].as_array()
        {
            for f in files.iter().filter_map(|f| f.as_str()) {
                if f.ends_with(".wasm") {
                    build.wasm = Some(PathBuf::from(f));
                    build.fresh = msg["fresh"].as_bool().unwrap_or(false);
                }
            }
        }
    }
    errors
}

/// A failed build's `errors`: the compiler's errors (or cargo's own
/// message), then why it was stopped: the timeout, the memory limit or
/// another limit it hit.
fn explain_failure(
    build: &mut CargoBuild,
    errors: String,
    out: &ecdysis_sys::process::ProcOutput,
    timeout: Duration,
    memory_limit: Option<u64>,
    hit: Option<ecdysis_sys::jail::LimitHit>,
) {
    build.errors = if errors.is_empty() {
        // Cargo failed before compiling (a bad manifest, a missing target):
        // its own message is the tail of stderr.
        let tail: Vec<&str> = out.stderr.lines().rev().take(40).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    } else {
        errors
    };
    if out.timed_out {
        build.errors.push_str(&format!(
            "\n(the build was killed after {} s)",
            timeout.as_secs()
        ));
    }
    // rustc aborts ("memory allocation of N bytes failed") or, in const
    // evaluation, reports E0080.
    if let Some(bytes) = memory_limit
        && (out.stderr.contains("memory allocation of")
            || build
                .errors
                .contains("tried to allocate more memory than available to compiler"))
    {
        build.errors.push_str(&format!(
            "\n(a build process hit the memory limit of {} MiB)",
            bytes >> 20
        ));
    }
    build.errors = clip(&build.errors);
    if let Some(hit) = &hit {
        build
            .errors
            .push_str(&format!("\n(a build process hit {hit})"));
    }
    build.limit = hit;
}

impl ComponentStore {
    /// Build the crate at `crate_dir`, hash the component and store it with
    /// its manifest.
    /// A directory with `hooks.py` and no `Cargo.toml` is a Python harness,
    /// built with `componentize-py` ([`super::build_python`]).
    pub fn build(&self, crate_dir: &Path, opts: &BuildOptions) -> Result<BuildOutcome, StoreError> {
        let python = super::build_python::is_python_harness(crate_dir);
        // Hashed once, before cargo runs (a build may rewrite Cargo.lock):
        // the kept-build key and the manifest name the same source.
        let source_hash = source_tree_hash(crate_dir)?;
        // A Rust source another store sharing the native-code directory
        // built already ([`super::kept_builds`]); an untrusted one is
        // scanned first, as its build would be.
        let (kept_key, scanned) = match (&opts.trust, python || self.native_cache().is_none()) {
            (_, true) => (None, false),
            (Trust::Own, false) => (
                super::kept_builds::build_key(crate_dir, &source_hash, opts)?,
                false,
            ),
            (
                Trust::Untrusted {
                    containment,
                    allowed,
                },
                false,
            ) => {
                refuse_unscanned(crate_dir, containment, allowed)?;
                (
                    super::kept_builds::build_key(crate_dir, &source_hash, opts)?,
                    true,
                )
            }
        };
        let facts = || build_facts(crate_dir, source_hash.clone(), opts, python);
        if let Some(key) = &kept_key
            && let Some(bytes) = self.kept_build(key)?
        {
            let manifest = self.put(&bytes, facts())?;
            return Ok(BuildOutcome {
                manifest,
                cargo_fresh: true,
            });
        }
        let build = if python {
            super::build_python::python_build(crate_dir, opts)?
        } else {
            cargo_build_scanned(crate_dir, opts, scanned)?
        };
        if !build.ok {
            return Err(StoreError::BuildFailed {
                crate_dir: crate_dir.to_path_buf(),
                status: if build.errors.contains("(the build was killed after") {
                    "timed out".into()
                } else if build.errors.contains("hit the memory limit") {
                    "out of memory".into()
                } else if let Some(hit) = &build.limit {
                    hit.status().into()
                } else {
                    "failed".into()
                },
                stderr_tail: build.errors,
            });
        }
        let path = build.wasm.ok_or_else(|| StoreError::NoArtifact {
            crate_dir: crate_dir.to_path_buf(),
        })?;
        let bytes = std::fs::read(&path).map_err(|e| PathError::new("read", &path, e))?;
        let manifest = self.put(&bytes, facts())?;
        if let Some(key) = &kept_key {
            self.keep_build(key, &bytes);
        }
        Ok(BuildOutcome {
            manifest,
            cargo_fresh: build.fresh,
        })
    }
}

/// What a build's manifest records besides the bytes.
fn build_facts(
    crate_dir: &Path,
    source_hash: String,
    opts: &BuildOptions,
    python: bool,
) -> ManifestFacts {
    ManifestFacts {
        parent: opts.parent.clone(),
        source_tree_hash: Some(source_hash),
        toolchain: if python {
            Some("componentize-py".into())
        } else {
            super::kept_builds::compiler_version()
                .and_then(|v| v.lines().next())
                .map(str::to_string)
        },
        features: opts.features.clone(),
        origin: crate_dir.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tables_name_is_read_from_that_table_only() {
        let manifest = "[workspace]\nname = \"not-this\"\n\n[package]\n# a comment\nname   =  \"harness-template\"\nversion = \"0.1.0\"\n\n[dependencies]\nname = \"nor-this\"\n";
        assert_eq!(
            table_name(manifest, "[package]"),
            Name::Plain("harness-template")
        );
        assert_eq!(table_name(manifest, "[lib]"), Name::Absent);
        assert_eq!(
            table_name("[dependencies]\nname = \"x\"\n", "[package]"),
            Name::Absent
        );
        // A name this cannot read whole (quoted oddly, a path character).
        assert_eq!(
            table_name("[package]\nname = 'single'\n", "[package]"),
            Name::Unreadable
        );
        assert_eq!(
            table_name("[package]\nname = \"../up\"\n", "[package]"),
            Name::Unreadable
        );
        assert_eq!(
            table_name("[package]\nnamespace = \"x\"\n", "[package]"),
            Name::Absent
        );
    }

    #[test]
    fn the_marker_follows_the_artifacts_name() {
        let marker = |m: &str| in_place_marker_name("release", m);
        assert_eq!(
            marker("[package]\nname = \"read-only\"\n"),
            ".ecdysis-last-in-place-release-read_only"
        );
        // Packages of other names building one library name share a path in
        // the target, so they share a marker.
        assert_eq!(
            marker("[package]\nname = \"a\"\n[lib]\nname = \"x\"\n"),
            marker("[package]\nname = \"b\"\n[lib]\nname = \"x\"\n")
        );
        assert_ne!(
            marker("[package]\nname = \"direct\"\n"),
            marker("[package]\nname = \"read-only\"\n")
        );
        assert_ne!(
            marker("[package]\nname = \"direct\"\n"),
            in_place_marker_name("candidate", "[package]\nname = \"direct\"\n")
        );
        // Unreadable names share the profile's one marker.
        assert_eq!(marker("no package here"), ".ecdysis-last-in-place-release");
        assert_eq!(
            marker("[package]\nname = \"a\"\n[lib]\nname = 'odd'\n"),
            ".ecdysis-last-in-place-release"
        );
    }
}

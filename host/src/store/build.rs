//! The one guest-build path: `cargo build --release --target wasm32-wasip2`
//! of a harness crate, for `ecdysis-host build`, for `--harness <crate>`,
//! for every training candidate and for the coders' build checks.
//!
//! Every build: runs as a child process in its own group with a wall-clock
//! timeout (the whole group is killed); has the variables a cargo-built
//! host would leak removed; holds a lock on its target directory, so
//! builds sharing it (threads or processes) cannot swap artifacts; and,
//! with a target directory shared across copies of a crate, touches the
//! copy's sources first (cargo decides freshness by file times, so a copy
//! older than another copy's last build would otherwise pass as fresh).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{ComponentStore, Manifest, ManifestFacts, StoreError};
use crate::fsutil::{EntryKind, PathError, walk_crate};
use crate::process::{run_with_timeout, scrub_cargo_env};
use crate::store::ComponentHash;

/// Longest a guest build may take by default.
pub const BUILD_TIMEOUT: Duration = Duration::from_secs(900);

/// Most characters of compiler output kept in an error.
const ERROR_CLIP: usize = 8_000;

/// How to build a guest crate.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Cargo features to enable.
    pub features: Vec<String>,
    /// The component this one derives from (recorded in the manifest).
    pub parent: Option<ComponentHash>,
    /// Cargo target directory (default: the crate's own `target/`). Sharing
    /// one across staging copies keeps dependency builds warm.
    pub target_dir: Option<PathBuf>,
    /// Do not echo cargo's diagnostics to stderr.
    pub quiet: bool,
    /// Wall-clock limit of the build.
    pub timeout: Duration,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            features: vec![],
            parent: None,
            target_dir: None,
            quiet: false,
            timeout: BUILD_TIMEOUT,
        }
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

fn rustc_version() -> Option<String> {
    let out = Command::new("rustc").arg("--version").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
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
    if s.chars().count() <= ERROR_CLIP {
        s.to_string()
    } else {
        format!(
            "{}\n… (clipped)",
            s.chars().take(ERROR_CLIP).collect::<String>()
        )
    }
}

/// Build the crate at `crate_dir` (blocking). A failed build is a
/// [`CargoBuild`] with `ok: false` and the errors; only a missing crate or
/// a cargo that cannot start is an `Err`.
pub fn cargo_build(crate_dir: &Path, opts: &BuildOptions) -> Result<CargoBuild, StoreError> {
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
    let manifest_path = crate_dir.join("Cargo.toml");
    let target = opts
        .target_dir
        .clone()
        .unwrap_or_else(|| crate_dir.join("target"));
    let target = std::path::absolute(&target).map_err(|e| PathError::new("resolve", &target, e))?;
    std::fs::create_dir_all(&target).map_err(|e| PathError::new("create", &target, e))?;
    // Builds sharing a target dir write the same artifact path: hold a lock
    // until the artifact is read, so concurrent builders cannot swap them.
    let lock_path = target.join(".ecdysis-build.lock");
    let lock =
        std::fs::File::create(&lock_path).map_err(|e| PathError::new("create", &lock_path, e))?;
    lock.lock()
        .map_err(|e| PathError::new("lock", &lock_path, e))?;
    if opts.target_dir.is_some() {
        touch_all(&crate_dir.join("src"));
    }
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.args(["build", "--release", "--target", "wasm32-wasip2"])
        .arg("--message-format=json")
        .arg("--manifest-path")
        .arg(&manifest_path)
        .arg("--target-dir")
        .arg(&target)
        .current_dir(crate_dir);
    if !opts.features.is_empty() {
        cmd.arg("--features").arg(opts.features.join(","));
    }
    scrub_cargo_env(&mut cmd);
    let out = run_with_timeout(cmd, opts.timeout).map_err(StoreError::CargoMissing)?;
    if !opts.quiet && !out.stderr.is_empty() {
        eprint!("{}", out.stderr);
    }
    let mut errors = String::new();
    let mut build = CargoBuild {
        ok: out.success(),
        wasm: None,
        fresh: false,
        errors: String::new(),
        seconds: out.elapsed.as_secs_f64(),
    };
    for line in out.stdout.lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] == "compiler-message"
            && let Some(rendered) = msg["message"]["rendered"].as_str()
        {
            if !opts.quiet {
                eprint!("{rendered}");
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
    if !build.ok {
        build.errors = if errors.is_empty() {
            // Cargo failed before compiling (a bad manifest, a missing
            // target): its own message is the tail of stderr.
            let tail: Vec<&str> = out.stderr.lines().rev().take(40).collect();
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        } else {
            errors
        };
        if out.timed_out {
            build.errors.push_str(&format!(
                "\n(the build was killed after {} s)",
                opts.timeout.as_secs()
            ));
        }
        build.errors = clip(&build.errors);
    }
    Ok(build)
}

impl ComponentStore {
    /// Build the crate at `crate_dir`, hash the component and store it with
    /// its manifest.
    pub fn build(&self, crate_dir: &Path, opts: &BuildOptions) -> Result<BuildOutcome, StoreError> {
        let build = cargo_build(crate_dir, opts)?;
        if !build.ok {
            return Err(StoreError::BuildFailed {
                crate_dir: crate_dir.to_path_buf(),
                status: if build.errors.contains("(the build was killed after") {
                    "timed out".into()
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
        let manifest = self.put(
            &bytes,
            ManifestFacts {
                parent: opts.parent.clone(),
                source_tree_hash: Some(source_tree_hash(crate_dir)?),
                toolchain: rustc_version(),
                features: opts.features.clone(),
                origin: crate_dir.display().to_string(),
            },
        )?;
        Ok(BuildOutcome {
            manifest,
            cargo_fresh: build.fresh,
        })
    }
}

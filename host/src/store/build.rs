//! `ecdysis-host build`: compile a guest crate to a component and store it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{ComponentStore, Manifest, ManifestFacts, StoreError};
use crate::fsutil::PathError;
use crate::store::ComponentHash;

/// How to build a guest crate.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// Cargo features to enable.
    pub features: Vec<String>,
    /// The component this one derives from (recorded in the manifest).
    pub parent: Option<ComponentHash>,
    /// Cargo target directory (default: the crate's own `target/`). Sharing
    /// one across staging copies keeps dependency builds warm.
    pub target_dir: Option<PathBuf>,
    /// Do not echo cargo's progress to stderr.
    pub quiet: bool,
}

/// The result of a build.
#[derive(Debug, Clone)]
pub struct BuildOutcome {
    pub manifest: Manifest,
    /// True when cargo found the artifact up to date and compiled nothing.
    pub cargo_fresh: bool,
}

/// blake3 over a crate's source files (relative path, length and content of
/// every file, sorted), skipping `target/` and hidden entries: what changed
/// between two candidates, independent of build outputs.
pub fn source_tree_hash(dir: &Path) -> Result<String, PathError> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), PathError> {
        let entries = std::fs::read_dir(dir).map_err(|e| PathError::new("list", dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| PathError::new("list", dir, e))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, out)?;
            } else {
                out.push(path.strip_prefix(root).unwrap_or(&path).to_path_buf());
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(dir, dir, &mut files)?;
    files.sort();
    let mut hasher = blake3::Hasher::new();
    for rel in files {
        let path = dir.join(&rel);
        let bytes = std::fs::read(&path).map_err(|e| PathError::new("read", &path, e))?;
        hasher.update(rel.to_string_lossy().as_bytes());
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

impl ComponentStore {
    /// Run `cargo build --target wasm32-wasip2 --release` for the crate at
    /// `crate_dir`, hash the component and store it with its manifest.
    /// Cargo's own progress goes to this process's stderr.
    pub fn build(&self, crate_dir: &Path, opts: &BuildOptions) -> Result<BuildOutcome, StoreError> {
        let manifest_path = crate_dir.join("Cargo.toml");
        if !manifest_path.is_file() {
            return Err(PathError::new(
                "find",
                &manifest_path,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no Cargo.toml: not a crate"),
            )
            .into());
        }
        // Builds of one crate with different features write the same artifact
        // path: hold a lock on the crate until its bytes are read, so
        // concurrent builders (threads or processes) cannot swap artifacts.
        let lock_path = crate_dir.join(".ecdysis-build.lock");
        let lock = std::fs::File::create(&lock_path)
            .map_err(|e| PathError::new("create", &lock_path, e))?;
        lock.lock()
            .map_err(|e| PathError::new("lock", &lock_path, e))?;
        let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        cmd.args(["build", "--release", "--target", "wasm32-wasip2"])
            .arg("--message-format=json-render-diagnostics")
            .arg("--manifest-path")
            .arg(&manifest_path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if !opts.features.is_empty() {
            cmd.arg("--features").arg(opts.features.join(","));
        }
        if let Some(dir) = &opts.target_dir {
            cmd.arg("--target-dir").arg(dir);
        }
        // A host built by cargo (tests, `cargo run`) exports variables that
        // would leak into the guest build and retarget it.
        for var in [
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_TARGET",
            "RUSTFLAGS",
            "CARGO_ENCODED_RUSTFLAGS",
        ] {
            if opts.target_dir.is_some() || var != "CARGO_TARGET_DIR" {
                cmd.env_remove(var);
            }
        }
        let mut child = cmd.spawn().map_err(StoreError::CargoMissing)?;
        let stderr = child.stderr.take().expect("piped");
        let quiet = opts.quiet;
        let err_thread = std::thread::spawn(move || {
            let mut text = String::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !quiet {
                    eprintln!("{line}");
                }
                text.push_str(&line);
                text.push('\n');
            }
            text
        });
        let mut wasm: Option<(PathBuf, bool)> = None;
        if let Some(stdout) = child.stdout.take() {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line) else {
                    continue;
                };
                if msg["reason"] != "compiler-artifact" {
                    continue;
                }
                let fresh = msg["fresh"].as_bool().unwrap_or(false);
                if let Some(files) = msg["filenames"].as_array() {
                    for f in files.iter().filter_map(|f| f.as_str()) {
                        if f.ends_with(".wasm") {
                            wasm = Some((PathBuf::from(f), fresh));
                        }
                    }
                }
            }
        }
        let status = child.wait().map_err(StoreError::CargoMissing)?;
        let stderr_text = err_thread.join().unwrap_or_default();
        if !status.success() {
            let tail: Vec<&str> = stderr_text.lines().rev().take(40).collect();
            return Err(StoreError::BuildFailed {
                crate_dir: crate_dir.to_path_buf(),
                status: status.to_string(),
                stderr_tail: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            });
        }
        let (path, cargo_fresh) = wasm.ok_or_else(|| StoreError::NoArtifact {
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
            cargo_fresh,
        })
    }
}

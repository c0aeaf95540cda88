//! The content-addressed component store.
//!
//! Every harness build is named by the blake3 hash of its component bytes:
//!
//! ```text
//! <root>/components/<hash>.wasm          the component, immutable
//! <root>/manifests/<hash>.json           world, size, parent, source tree, toolchain, time
//! <root>/precompiled/<hash>-<engine>.cwasm   native code for this engine build
//! <root>/precompiled/<hash>-<engine>.cwasm.b3 blake3 of the .cwasm, checked before loading
//! ```
//!
//! Lineage, caching and rollback are just hashes. All writes are atomic.

pub mod build;
mod export;
mod inspect;
pub mod scan;

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use wasmtime::component::Component;

use crate::fsutil::{PathError, atomic_write};
use crate::sandbox::{LoadedHarness, SUPPORTED_WORLDS, Sandbox, SandboxError, world_of};

pub use build::{
    BUILD_TIMEOUT, BuildOptions, BuildOutcome, Containment, Trust, UNTRUSTED_BUILD_MEMORY,
    source_tree_hash,
};
pub use export::{
    EXPORT_FORMAT, ExportError, ExportOptions, ExportOutcome, ExportedLimits, HarnessExport,
    LineageEntry, TrainingFacts, oci_digest, read_training_run,
};
pub use inspect::Inspection;

/// A component's blake3 hash, 64 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ComponentHash(String);

impl ComponentHash {
    pub fn of(bytes: &[u8]) -> Self {
        ComponentHash(blake3::hash(bytes).to_hex().to_string())
    }

    /// Parse a full 64-digit hex hash.
    pub fn parse(s: &str) -> Option<Self> {
        (s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| ComponentHash(s.to_ascii_lowercase()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 12 digits, for display.
    pub fn short(&self) -> &str {
        &self.0[..12]
    }
}

impl std::fmt::Display for ComponentHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the store knows about a component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The harness world the component implements, read from its exports
    /// (`ecdysis:harness/harness@X` when it exports
    /// `ecdysis:harness/hooks@X`), or `none` when it exports no hooks.
    pub world: String,
    pub hash: ComponentHash,
    pub size: u64,
    /// The incumbent this candidate was derived from, if any.
    pub parent: Option<ComponentHash>,
    /// blake3 over the guest crate's source files (None for imported files).
    pub source_tree_hash: Option<String>,
    /// `rustc --version` of the build (None for imported files).
    pub toolchain: Option<String>,
    /// Cargo features the crate was built with.
    #[serde(default)]
    pub features: Vec<String>,
    /// Where it came from: a crate directory or a file path.
    pub origin: String,
    /// RFC 3339 UTC time the store first saw it.
    pub built_at: String,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Io(#[from] PathError),
    #[error("`{0}` is neither a .wasm file nor a component hash in the store")]
    NotFound(String),
    #[error(
        "hash prefix `{prefix}` is too short: give at least {min} hex digits ({MIN_PREFIX_INTERACTIVE} are enough when typed at a terminal)"
    )]
    PrefixTooShort { prefix: String, min: usize },
    #[error(
        "`{spec}` names both {path} and the stored component {hash}: write `./{spec}` for the path, or more digits of the hash"
    )]
    AmbiguousName {
        spec: String,
        path: PathBuf,
        hash: String,
    },
    #[error("{} is a directory without a Cargo.toml: not a crate to build", dir.display())]
    NotACrate { dir: PathBuf },
    #[error("hash prefix `{prefix}` is ambiguous: {candidates:?}")]
    Ambiguous {
        prefix: String,
        candidates: Vec<String>,
    },
    #[error("stored component {hash} is corrupt: its bytes hash to {actual}")]
    Corrupt {
        hash: ComponentHash,
        actual: ComponentHash,
    },
    #[error("manifest {path} is unreadable: {reason}")]
    BadManifest { path: PathBuf, reason: String },
    #[error("cannot run cargo: {0}")]
    CargoMissing(std::io::Error),
    #[error("building {crate_dir} failed ({status}):\n{stderr_tail}")]
    BuildFailed {
        crate_dir: PathBuf,
        status: String,
        stderr_tail: String,
    },
    #[error("refused to build {crate_dir}: {refusal}")]
    SourceRefused {
        crate_dir: PathBuf,
        refusal: scan::Refusal,
    },
    #[error(
        "{crate_dir} holds untrusted source, which is built only in a jail, and {reason} (an operator may accept the risk: `train --allow-unjailed-builds`)"
    )]
    NoJail {
        crate_dir: PathBuf,
        reason: crate::jail::JailError,
    },
    #[error("cargo built {crate_dir} but produced no .wasm component (is it a cdylib?)")]
    NoArtifact { crate_dir: PathBuf },
    #[error("`{0}` is not a WebAssembly component (wrong magic or layer)")]
    NotAComponent(String),
    #[error(
        "component {hash} implements world `{world}`, which this host cannot run (it implements {supported})"
    )]
    UnsupportedWorld {
        hash: ComponentHash,
        world: String,
        supported: String,
    },
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

/// The `world` recorded for a component that exports no harness hooks.
pub const NO_WORLD: &str = "none";

/// How a component was loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadSource {
    /// Native code came from a verified precompiled artifact.
    Precompiled,
    /// Compiled now (and the artifact written for next time).
    Compiled,
    /// Compiled now because the artifact on disk failed its checksum.
    RecompiledCorrupt,
}

/// Fewest hex digits of a hash prefix (scripts, configs, any
/// non-interactive use): 48 bits, so a prefix that resolves today does not
/// turn ambiguous as the store grows.
pub const MIN_PREFIX: usize = 12;

/// Fewest hex digits of a hash prefix typed at a terminal, where a person
/// sees an ambiguity error at once.
pub const MIN_PREFIX_INTERACTIVE: usize = 6;

/// The store rooted at a directory.
#[derive(Debug, Clone)]
pub struct ComponentStore {
    root: PathBuf,
    min_prefix: usize,
}

impl ComponentStore {
    /// The store at `root`, created on first write; hash prefixes need
    /// [`MIN_PREFIX`] digits.
    pub fn open(root: impl Into<PathBuf>) -> Self {
        ComponentStore {
            root: root.into(),
            min_prefix: MIN_PREFIX,
        }
    }

    /// Accept hash prefixes of `digits` hex digits or more (the CLI passes
    /// [`MIN_PREFIX_INTERACTIVE`] when its stdin is a terminal).
    pub fn with_min_prefix(mut self, digits: usize) -> Self {
        self.min_prefix = digits.clamp(1, 64);
        self
    }

    /// `$ECDYSIS_STORE`, else `.ecdysis/store` under the current directory.
    pub fn default_root() -> PathBuf {
        std::env::var_os("ECDYSIS_STORE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(".ecdysis/store"))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn component_path(&self, hash: &ComponentHash) -> PathBuf {
        self.root.join("components").join(format!("{hash}.wasm"))
    }

    fn manifest_path(&self, hash: &ComponentHash) -> PathBuf {
        self.root.join("manifests").join(format!("{hash}.json"))
    }

    fn precompiled_path(&self, hash: &ComponentHash, sandbox: &Sandbox) -> PathBuf {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        sandbox
            .engine()
            .precompile_compatibility_hash()
            .hash(&mut h);
        self.root
            .join("precompiled")
            .join(format!("{hash}-{:016x}.cwasm", h.finish()))
    }

    /// Add component bytes with their manifest facts; returns the manifest
    /// (the existing one if the hash is already stored: first write wins, so
    /// lineage recorded at first sight is never rewritten).
    pub fn put(&self, bytes: &[u8], facts: ManifestFacts) -> Result<Manifest, StoreError> {
        if !is_component(bytes) {
            return Err(StoreError::NotAComponent(facts.origin));
        }
        let world = match world_of(bytes) {
            Ok(world) => world.unwrap_or_else(|| NO_WORLD.to_string()),
            Err(_) => return Err(StoreError::NotAComponent(facts.origin)),
        };
        let hash = ComponentHash::of(bytes);
        if let Some(existing) = self.manifest(&hash)? {
            return Ok(existing);
        }
        let path = self.component_path(&hash);
        atomic_write(&path, bytes).map_err(|e| PathError::new("write", &path, e))?;
        let manifest = Manifest {
            world,
            hash: hash.clone(),
            size: bytes.len() as u64,
            parent: facts.parent,
            source_tree_hash: facts.source_tree_hash,
            toolchain: facts.toolchain,
            features: facts.features,
            origin: facts.origin,
            built_at: crate::fsutil::now_rfc3339(),
        };
        let mpath = self.manifest_path(&hash);
        let json = serde_json::to_vec_pretty(&manifest).expect("manifest serializes");
        atomic_write(&mpath, &json).map_err(|e| PathError::new("write", &mpath, e))?;
        Ok(manifest)
    }

    /// The manifest of a stored hash, if stored.
    pub fn manifest(&self, hash: &ComponentHash) -> Result<Option<Manifest>, StoreError> {
        let path = self.manifest_path(hash);
        match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| StoreError::BadManifest {
                        path,
                        reason: e.to_string(),
                    })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(PathError::new("read", &path, e).into()),
        }
    }

    /// Every stored hash.
    pub fn list(&self) -> Result<Vec<ComponentHash>, StoreError> {
        let dir = self.root.join("components");
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(PathError::new("list", &dir, e).into()),
        };
        let mut out: Vec<_> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_suffix(".wasm").and_then(ComponentHash::parse)
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// Resolve what a user typed: a path to a `.wasm` file (added to the
    /// store), or a full or unique-prefix hash of a stored one (at least
    /// the store's minimum of digits, [`MIN_PREFIX`] by default). A name
    /// that is both an existing path and a stored hash prefix is refused as
    /// ambiguous rather than guessed.
    pub fn resolve(&self, spec: &str) -> Result<Manifest, StoreError> {
        let path = Path::new(spec);
        if path.exists() {
            self.refuse_ambiguous(spec, path)?;
        }
        if path.is_dir() {
            // Only `obtain` builds crates; a directory is never a hash here.
            return Err(StoreError::NotFound(spec.to_string()));
        }
        if path.is_file() {
            let bytes = std::fs::read(path).map_err(|e| PathError::new("read", path, e))?;
            return self.put(
                &bytes,
                ManifestFacts {
                    origin: path.display().to_string(),
                    ..ManifestFacts::default()
                },
            );
        }
        if !is_hex(spec) {
            return Err(StoreError::NotFound(spec.to_string()));
        }
        let prefix = spec.to_ascii_lowercase();
        if prefix.len() < self.min_prefix {
            return Err(StoreError::PrefixTooShort {
                prefix,
                min: self.min_prefix,
            });
        }
        let matches = self.matching(&prefix)?;
        match matches.len() {
            0 => Err(StoreError::NotFound(spec.to_string())),
            1 => self
                .manifest(&matches[0])?
                .ok_or_else(|| StoreError::NotFound(spec.to_string())),
            _ => Err(StoreError::Ambiguous {
                prefix,
                candidates: matches.iter().map(|h| h.short().to_string()).collect(),
            }),
        }
    }

    /// Stored hashes starting with `prefix` (lowercase hex).
    fn matching(&self, prefix: &str) -> Result<Vec<ComponentHash>, StoreError> {
        Ok(self
            .list()?
            .into_iter()
            .filter(|h| h.as_str().starts_with(prefix))
            .collect())
    }

    /// Refuse `spec` when it names the existing `path` and also a stored
    /// hash prefix (long enough to count as one).
    fn refuse_ambiguous(&self, spec: &str, path: &Path) -> Result<(), StoreError> {
        if is_hex(spec) && spec.len() >= self.min_prefix {
            let prefix = spec.to_ascii_lowercase();
            if let Some(hash) = self.matching(&prefix)?.first() {
                return Err(StoreError::AmbiguousName {
                    spec: spec.to_string(),
                    path: path.to_path_buf(),
                    hash: hash.short().to_string(),
                });
            }
        }
        Ok(())
    }

    /// Read a stored component's bytes, verifying they still hash to its name.
    pub fn read_component(&self, hash: &ComponentHash) -> Result<Vec<u8>, StoreError> {
        let path = self.component_path(hash);
        let bytes = std::fs::read(&path).map_err(|e| PathError::new("read", &path, e))?;
        let actual = ComponentHash::of(&bytes);
        if &actual != hash {
            return Err(StoreError::Corrupt {
                hash: hash.clone(),
                actual,
            });
        }
        Ok(bytes)
    }

    /// Load a stored component into the sandbox. Uses the precompiled
    /// artifact when its checksum verifies (no compilation); otherwise
    /// compiles, writes the artifact atomically, and says which happened.
    pub fn load(
        &self,
        sandbox: &Sandbox,
        hash: &ComponentHash,
    ) -> Result<(LoadedHarness, LoadSource), StoreError> {
        self.check_world(hash)?;
        let cwasm = self.precompiled_path(hash, sandbox);
        let sum_path = cwasm.with_extension("cwasm.b3");
        let mut source = LoadSource::Compiled;
        if let (Ok(bytes), Ok(sum)) = (std::fs::read(&cwasm), std::fs::read_to_string(&sum_path)) {
            if blake3::hash(&bytes).to_hex().as_str() == sum.trim() {
                // SAFETY: wasmtime requires that deserialized bytes were
                // produced by `precompile_component` of a compatible engine.
                // The file name carries the engine's compatibility hash, and
                // the blake3 checksum written beside it proves these are the
                // exact bytes we wrote, so a truncated or tampered artifact is
                // never executed.
                let component = unsafe { Component::deserialize(sandbox.engine(), &bytes) };
                if let Ok(component) = component {
                    return Ok((sandbox.prepare(&component)?, LoadSource::Precompiled));
                }
            }
            tracing::warn!(path = %cwasm.display(), "precompiled artifact failed verification; recompiling");
            source = LoadSource::RecompiledCorrupt;
        }
        let bytes = self.read_component(hash)?;
        let native = sandbox
            .engine()
            .precompile_component(&bytes)
            .map_err(|e| SandboxError::Compile(format!("{e:#}")))?;
        atomic_write(&cwasm, &native).map_err(|e| PathError::new("write", &cwasm, e))?;
        let sum = blake3::hash(&native).to_hex().to_string();
        atomic_write(&sum_path, sum.as_bytes())
            .map_err(|e| PathError::new("write", &sum_path, e))?;
        // SAFETY: `native` was produced just now by this engine.
        let component = unsafe { Component::deserialize(sandbox.engine(), &native) }
            .map_err(|e| SandboxError::Compile(format!("{e:#}")))?;
        Ok((sandbox.prepare(&component)?, source))
    }

    /// Refuse a component whose world this host does not implement, before
    /// any compilation, with both versions named.
    fn check_world(&self, hash: &ComponentHash) -> Result<(), StoreError> {
        let world = match self.manifest(hash)? {
            Some(m) => m.world,
            None => world_of(&self.read_component(hash)?)
                .ok()
                .flatten()
                .unwrap_or_else(|| NO_WORLD.to_string()),
        };
        if SUPPORTED_WORLDS.contains(&world.as_str()) {
            return Ok(());
        }
        Err(StoreError::UnsupportedWorld {
            hash: hash.clone(),
            world,
            supported: SUPPORTED_WORLDS.join(", "),
        })
    }

    /// Resolve a spec (file or hash) and load it.
    pub fn resolve_and_load(
        &self,
        sandbox: &Sandbox,
        spec: &str,
    ) -> Result<(Manifest, LoadedHarness, LoadSource), StoreError> {
        let manifest = self.resolve(spec)?;
        let (harness, source) = self.load(sandbox, &manifest.hash)?;
        Ok((manifest, harness, source))
    }
}

/// Facts recorded in a new manifest.
#[derive(Debug, Clone, Default)]
pub struct ManifestFacts {
    pub parent: Option<ComponentHash>,
    pub source_tree_hash: Option<String>,
    pub toolchain: Option<String>,
    pub features: Vec<String>,
    pub origin: String,
}

/// Whether `s` could be a hash prefix: hex digits only.
fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A component starts with the wasm magic and the component-model layer
/// (a core module has version 1, layer 0).
fn is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[6..8] == [0x01, 0x00]
}

impl ComponentStore {
    /// What a user may pass as `--harness`: a guest crate directory (built
    /// now, as the user's own source), a `.wasm` file (added), or a stored
    /// hash (or unique prefix, see [`ComponentStore::resolve`]). A directory
    /// is built only when it is a crate (holds a `Cargo.toml`); any other
    /// directory is an error naming it, even when its name looks like a
    /// hash prefix.
    pub fn obtain(&self, spec: &str, quiet: bool) -> Result<Manifest, StoreError> {
        let path = Path::new(spec);
        if path.is_dir() {
            self.refuse_ambiguous(spec, path)?;
            if !path.join("Cargo.toml").is_file() {
                return Err(StoreError::NotACrate {
                    dir: path.to_path_buf(),
                });
            }
            let opts = BuildOptions {
                quiet,
                ..BuildOptions::default()
            };
            return Ok(self.build(path, &opts)?.manifest);
        }
        self.resolve(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_parse_and_shorten() {
        let h = ComponentHash::of(b"abc");
        assert_eq!(ComponentHash::parse(h.as_str()), Some(h.clone()));
        assert_eq!(h.short().len(), 12);
        assert_eq!(ComponentHash::parse("xyz"), None);
    }

    #[test]
    fn core_modules_are_not_components() {
        assert!(!is_component(b"\0asm\x01\0\0\0"));
        assert!(is_component(b"\0asm\x0d\0\x01\0"));
        assert!(!is_component(b"hello"));
    }
}

//! The content-addressed component store.
//!
//! Every harness build is named by the blake3 hash of its component bytes:
//!
//! ```text
//! <root>/components/<hash>.wasm          the component, immutable
//! <root>/manifests/<hash>.json           world, size, parent, source tree, toolchain, time
//! <root>/precompiled/<hash>-<engine>.cwasm      native code for this engine build
//! <root>/precompiled/<hash>-<engine>.cwasm.mac  keyed blake3 of the .cwasm (key outside
//!                                               the store), checked before loading
//! <root>/fncache/<engine>/...            per-function compiled code, MAC'd (fncache)
//! ```
//!
//! `precompiled/` and `fncache/` (the native code) may live in another
//! directory that several stores share ([`ComponentStore::with_native_cache`]):
//! their entries are named by component hash and engine, and authenticated
//! with the machine's artifact key, so a store trusts a shared entry exactly
//! as it trusts its own.
//!
//! Components are size-capped when they enter the store; compiling and
//! trusting native code is [`artifact`]'s concern.
//!
//! Lineage, caching and rollback are just hashes. All writes are atomic.

pub mod artifact;
pub mod build;
pub mod build_python;
mod export;
pub mod fncache;
mod inspect;
pub mod kept_builds;
pub mod scan;
mod scan_python;

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use wasmtime::component::Component;

use crate::sandbox::{LoadedHarness, SUPPORTED_WORLDS, Sandbox, SandboxError, world_of};
use ecdysis_sys::fsutil::{PathError, atomic_write};

pub use artifact::{ArtifactKey, ChildCache, Compiler, DEFAULT_MAX_COMPONENT_BYTES};
pub use build::{
    BUILD_TIMEOUT, BuildOptions, BuildOutcome, BuildProfile, CANDIDATE_PROFILE, Containment,
    TARGET_DIR_ENV, Trust, UNTRUSTED_BUILD_MEMORY, source_tree_hash, staged_dir,
};
pub use export::{
    EXPORT_FORMAT, ExportError, ExportOptions, ExportOutcome, ExportedLimits, HarnessExport,
    LineageEntry, TrainedUnder, TrainingFacts, oci_digest, read_training_run,
};
pub use fncache::{CacheCounts, FunctionCache};
pub use inspect::Inspection;

/// A component's blake3 hash, 64 lowercase hex digits.
///
/// Deserialising checks the digits, so a hash read back from a run's
/// `config.json` or a round record is one this type could have made.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct ComponentHash(String);

/// A string that is not a full component hash.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a component hash (64 hex digits)")]
pub struct NotAHash(pub String);

impl TryFrom<String> for ComponentHash {
    type Error = NotAHash;
    fn try_from(s: String) -> Result<Self, NotAHash> {
        ComponentHash::parse(&s).ok_or(NotAHash(s))
    }
}

impl std::str::FromStr for ComponentHash {
    type Err = NotAHash;
    fn from_str(s: &str) -> Result<Self, NotAHash> {
        ComponentHash::parse(s).ok_or_else(|| NotAHash(s.to_string()))
    }
}

impl From<ComponentHash> for String {
    fn from(h: ComponentHash) -> String {
        h.0
    }
}

impl ComponentHash {
    /// The hash of a component's bytes.
    pub fn of(bytes: &[u8]) -> Self {
        ComponentHash(blake3::hash(bytes).to_hex().to_string())
    }

    /// Parse a full 64-digit hex hash.
    pub fn parse(s: &str) -> Option<Self> {
        (s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| ComponentHash(s.to_ascii_lowercase()))
    }

    /// The 64 hex digits.
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
    /// blake3 of the component's bytes: its name in the store.
    pub hash: ComponentHash,
    /// Size of the component, in bytes.
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

/// Why the store could not give or take a component.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A store file could not be read or written.
    #[error(transparent)]
    Io(#[from] PathError),
    /// The argument is neither an existing file nor the hash (or a prefix
    /// long enough, see [`MIN_PREFIX`]) of a stored component.
    #[error("`{0}` is neither a .wasm file nor a component hash in the store")]
    NotFound(String),
    /// A hash prefix shorter than the store accepts (see [`MIN_PREFIX`]).
    #[error(
        "hash prefix `{prefix}` is too short: give at least {min} hex digits ({MIN_PREFIX_INTERACTIVE} are enough when typed at a terminal)"
    )]
    PrefixTooShort {
        /// The prefix given (lowercased).
        prefix: String,
        /// The fewest digits accepted here.
        min: usize,
    },
    /// A name that is both an existing path and a stored hash prefix.
    #[error(
        "`{spec}` names both {path} and the stored component {hash}: write `./{spec}` for the path, or more digits of the hash"
    )]
    AmbiguousName {
        /// The name given.
        spec: String,
        /// The path it names.
        path: PathBuf,
        /// The stored component it also names (short hash).
        hash: String,
    },
    /// A directory given as a harness that is not a crate.
    #[error(
        "{} is a directory without a Cargo.toml or a hooks.py: not a Rust crate or a Python harness to build",
        dir.display()
    )]
    NotACrate {
        /// The directory.
        dir: PathBuf,
    },
    /// A hash prefix matches several stored components.
    #[error("hash prefix `{prefix}` is ambiguous: {candidates:?}")]
    Ambiguous {
        /// The prefix given (lowercased).
        prefix: String,
        /// The short hashes it matches.
        candidates: Vec<String>,
    },
    /// A stored component's bytes no longer hash to its name.
    #[error("stored component {hash} is corrupt: its bytes hash to {actual}")]
    Corrupt {
        /// The name it is stored under.
        hash: ComponentHash,
        /// What its bytes hash to now.
        actual: ComponentHash,
    },
    /// A component is larger than the store accepts.
    #[error("{origin} is {bytes} bytes, over the component size cap of {cap}")]
    TooLarge {
        /// Where it came from.
        origin: String,
        /// Its size.
        bytes: u64,
        /// The cap.
        cap: u64,
    },
    /// The artifact key file cannot be used.
    #[error("the artifact key {path} cannot be used: {reason}")]
    BadKey {
        /// The key file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A manifest file does not parse.
    #[error("manifest {path} is unreadable: {reason}")]
    BadManifest {
        /// The manifest file.
        path: PathBuf,
        /// The parse error.
        reason: String,
    },
    /// A tool a build needs is not installed.
    #[error("cannot build: {tool} is not installed: {hint}")]
    ToolMissing {
        /// The tool.
        tool: &'static str,
        /// How to install it or point at it.
        hint: String,
    },
    /// `cargo` could not be started (not installed, not on `PATH`).
    #[error("cannot run cargo: {0}")]
    CargoMissing(std::io::Error),
    /// The guest build failed or timed out.
    #[error("building {crate_dir} failed ({status}):\n{stderr_tail}")]
    BuildFailed {
        /// The guest crate.
        crate_dir: PathBuf,
        /// `failed` or `timed out`.
        status: String,
        /// The compiler's errors (or the tail of cargo's stderr), clipped.
        stderr_tail: String,
    },
    /// Untrusted source reaches outside its crate (see [`scan`]); it was
    /// not built.
    #[error("refused to build {crate_dir}: {refusal}")]
    SourceRefused {
        /// The crate.
        crate_dir: PathBuf,
        /// What was refused, where.
        refusal: scan::Refusal,
    },
    /// Untrusted source, no jail, and unjailed builds not allowed.
    #[error(
        "{crate_dir} holds untrusted source, which is built only in a jail, and {reason} (an operator may accept the risk: `train --allow-unjailed-builds`)"
    )]
    NoJail {
        /// The crate.
        crate_dir: PathBuf,
        /// Why no jail can be made.
        reason: ecdysis_sys::jail::JailError,
    },
    /// The build succeeded but produced no `.wasm` file.
    #[error("cargo built {crate_dir} but produced no .wasm component (is it a cdylib?)")]
    NoArtifact {
        /// The guest crate.
        crate_dir: PathBuf,
    },
    /// The bytes are a core module or not WebAssembly at all (named by
    /// origin).
    #[error("`{0}` is not a WebAssembly component (wrong magic or layer)")]
    NotAComponent(String),
    /// The component exports a harness world this host has no bindings for.
    #[error(
        "component {hash} implements world `{world}`, which this host cannot run (it implements {supported})"
    )]
    UnsupportedWorld {
        /// The component.
        hash: ComponentHash,
        /// The world it exports.
        world: String,
        /// The worlds this host runs, comma-separated.
        supported: String,
    },
    /// Compiling, linking or loading the component failed.
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

/// The environment variable naming a native-code directory that several
/// stores share ([`ComponentStore::with_native_cache`]; the binary's
/// `--native-cache`).
pub const NATIVE_CACHE_ENV: &str = "ECDYSIS_NATIVE_CACHE";

/// The store rooted at a directory.
#[derive(Debug, Clone)]
pub struct ComponentStore {
    root: PathBuf,
    /// Where `precompiled/` and `fncache/` live: `root`, or a directory
    /// shared by several stores.
    native_root: PathBuf,
    /// Where the artifact key lives (outside the store).
    key_path: PathBuf,
    key: std::sync::Arc<std::sync::OnceLock<ArtifactKey>>,
    compiler: Compiler,
    max_component_bytes: usize,
    min_prefix: usize,
    /// Whether compilations use the per-function cache under `fncache/`.
    fn_cache: bool,
    /// What the function cache did in this store's compilations so far.
    fn_cache_counts: std::sync::Arc<std::sync::Mutex<CacheCounts>>,
}

impl ComponentStore {
    /// The store at `root`, created on first write; artifacts are
    /// authenticated with the key at [`ArtifactKey::default_path`] and
    /// compiled in this process (see [`ComponentStore::with_compiler`]);
    /// hash prefixes need [`MIN_PREFIX`] digits.
    pub fn open(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        ComponentStore {
            native_root: root.clone(),
            root,
            key_path: ArtifactKey::default_path(),
            key: Default::default(),
            compiler: Compiler::InProcess,
            max_component_bytes: DEFAULT_MAX_COMPONENT_BYTES,
            min_prefix: MIN_PREFIX,
            fn_cache: true,
            fn_cache_counts: Default::default(),
        }
    }

    /// Keep native code (`precompiled/`, `fncache/`) under `dir` instead of
    /// the store's own directory, so stores that name the same `dir` compile
    /// a component once between them. Every store sharing it must use the
    /// same artifact key (the default key file is one per machine user): an
    /// entry another key wrote fails verification and is compiled again.
    pub fn with_native_cache(mut self, dir: impl Into<PathBuf>) -> Self {
        self.native_root = dir.into();
        self
    }

    /// The shared native-code directory, if [`Self::with_native_cache`]
    /// named one (the episode workers of a run open the store with it too).
    pub fn native_cache(&self) -> Option<&Path> {
        (self.native_root != self.root).then_some(self.native_root.as_path())
    }

    /// Compile with (the default) or without the per-function cache
    /// ([`FunctionCache`]) kept under `<root>/fncache/`.
    pub fn with_fn_cache(mut self, enabled: bool) -> Self {
        self.fn_cache = enabled;
        self
    }

    /// What the function cache did in this store's compilations so far
    /// (summed over compilations, child processes included).
    pub fn fn_cache_counts(&self) -> CacheCounts {
        *self
            .fn_cache_counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Accept hash prefixes of `digits` hex digits or more (the CLI passes
    /// [`MIN_PREFIX_INTERACTIVE`] when its stdin is a terminal).
    pub fn with_min_prefix(mut self, digits: usize) -> Self {
        self.min_prefix = digits.clamp(1, 64);
        self
    }

    /// Compile components with `compiler` (a child process for untrusted
    /// bytes).
    pub fn with_compiler(mut self, compiler: Compiler) -> Self {
        self.compiler = compiler;
        self
    }

    /// Authenticate artifacts with the key file at `path`.
    pub fn with_key_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.key_path = path.into();
        self.key = Default::default();
        self
    }

    /// Refuse components larger than `bytes`.
    pub fn with_max_component_bytes(mut self, bytes: usize) -> Self {
        self.max_component_bytes = bytes;
        self
    }

    /// The artifact key, read (or created) on first use.
    fn key(&self) -> Result<&ArtifactKey, StoreError> {
        if let Some(k) = self.key.get() {
            return Ok(k);
        }
        let key = ArtifactKey::load_or_create(&self.key_path)?;
        Ok(self.key.get_or_init(|| key))
    }

    /// `$ECDYSIS_STORE`, else `.ecdysis/store` under the current directory.
    pub fn default_root() -> PathBuf {
        std::env::var_os("ECDYSIS_STORE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(".ecdysis/store"))
    }

    /// The store's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the component `hash` is (or would be) stored:
    /// `components/<hash>.wasm`.
    pub fn component_path(&self, hash: &ComponentHash) -> PathBuf {
        self.root.join("components").join(format!("{hash}.wasm"))
    }

    fn manifest_path(&self, hash: &ComponentHash) -> PathBuf {
        self.root.join("manifests").join(format!("{hash}.json"))
    }

    fn precompiled_path(&self, hash: &ComponentHash, sandbox: &Sandbox) -> PathBuf {
        self.native_root
            .join("precompiled")
            .join(format!("{hash}-{}.cwasm", engine_tag(sandbox)))
    }

    /// The function cache directory of `sandbox`'s engine configuration.
    pub fn fn_cache_dir(&self, sandbox: &Sandbox) -> PathBuf {
        self.native_root.join("fncache").join(engine_tag(sandbox))
    }

    /// Add component bytes with their manifest facts; returns the manifest
    /// (the existing one if the hash is already stored: first write wins, so
    /// lineage recorded at first sight is never rewritten).
    pub fn put(&self, bytes: &[u8], facts: ManifestFacts) -> Result<Manifest, StoreError> {
        if bytes.len() > self.max_component_bytes {
            return Err(StoreError::TooLarge {
                origin: facts.origin,
                bytes: bytes.len() as u64,
                cap: self.max_component_bytes as u64,
            });
        }
        // Bytes already stored were checked when they came in: the parse
        // below (a whole CPython for a Python harness) is for new ones.
        let hash = ComponentHash::of(bytes);
        if let Some(existing) = self.manifest(&hash)? {
            return Ok(existing);
        }
        if !is_component(bytes) {
            return Err(StoreError::NotAComponent(facts.origin));
        }
        let world = match world_of(bytes) {
            Ok(world) => world.unwrap_or_else(|| NO_WORLD.to_string()),
            Err(_) => return Err(StoreError::NotAComponent(facts.origin)),
        };
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
            built_at: ecdysis_sys::fsutil::now_rfc3339(),
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
            // Refuse an oversized file before reading it into memory.
            let size = std::fs::metadata(path)
                .map_err(|e| PathError::new("stat", path, e))?
                .len();
            if size > self.max_component_bytes as u64 {
                return Err(StoreError::TooLarge {
                    origin: path.display().to_string(),
                    bytes: size,
                    cap: self.max_component_bytes as u64,
                });
            }
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
        let (component, source) = self.component(sandbox, hash)?;
        Ok((sandbox.prepare(&component)?, source))
    }

    /// The compiled component `hash` for `sandbox`'s engine: from its
    /// verified precompiled artifact, or compiled now by the store's
    /// [`Compiler`] (and the artifact written, with its MAC).
    pub(crate) fn component(
        &self,
        sandbox: &Sandbox,
        hash: &ComponentHash,
    ) -> Result<(Component, LoadSource), StoreError> {
        let key = self.key()?;
        let cwasm = self.precompiled_path(hash, sandbox);
        let mac_path = cwasm.with_extension("cwasm.mac");
        let mut source = LoadSource::Compiled;
        if let (Ok(bytes), Ok(mac)) = (std::fs::read(&cwasm), std::fs::read_to_string(&mac_path)) {
            if key.verifies(hash, &bytes, &mac) {
                // SAFETY: wasmtime requires that deserialized bytes were
                // produced by `precompile_component` of a compatible engine.
                // The file name carries the engine's compatibility hash, and
                // the MAC beside it, keyed with a key kept outside the store,
                // proves this host wrote these exact bytes: a truncated,
                // tampered or planted artifact is never executed.
                let component = unsafe { Component::deserialize(sandbox.engine(), &bytes) };
                if let Ok(component) = component {
                    return Ok((component, LoadSource::Precompiled));
                }
            }
            tracing::warn!(path = %cwasm.display(), "precompiled artifact failed verification; recompiling");
            source = LoadSource::RecompiledCorrupt;
        }
        let bytes = self.read_component(hash)?;
        let cache = self.fn_cache.then(|| ChildCache {
            dir: self.fn_cache_dir(sandbox),
            key_file: self.key_path.clone(),
        });
        let (native, counts) =
            self.compiler
                .compile(sandbox, &bytes, &self.root.join("tmp"), cache.as_ref())?;
        if cache.is_some() {
            tracing::debug!(
                component = %hash.short(),
                hits = counts.hits,
                misses = counts.misses,
                rejected = counts.rejected,
                "function cache"
            );
            let mut total = self
                .fn_cache_counts
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            *total = total.plus(counts);
        }
        atomic_write(&cwasm, &native).map_err(|e| PathError::new("write", &cwasm, e))?;
        atomic_write(&mac_path, key.mac(hash, &native).as_bytes())
            .map_err(|e| PathError::new("write", &mac_path, e))?;
        // SAFETY: `native` was produced just now by this host's compiler
        // (in process, or by its own binary in a child) for this engine.
        let component = unsafe { Component::deserialize(sandbox.engine(), &native) }
            .map_err(|e| SandboxError::Compile(format!("{e:#}")))?;
        Ok((component, source))
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
    /// The incumbent the component was derived from, if any.
    pub parent: Option<ComponentHash>,
    /// blake3 over the guest crate's source files (`None` for imported
    /// files).
    pub source_tree_hash: Option<String>,
    /// `rustc --version` of the build (`None` for imported files).
    pub toolchain: Option<String>,
    /// Cargo features the crate was built with.
    pub features: Vec<String>,
    /// A crate directory or a file path.
    pub origin: String,
}

/// The engine's precompile compatibility hash, short: native code (and
/// cached functions) of one engine configuration live under its tag.
fn engine_tag(sandbox: &Sandbox) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    sandbox
        .engine()
        .precompile_compatibility_hash()
        .hash(&mut h);
    format!("{:016x}", h.finish())
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
    /// is built only when it is a crate (holds a `Cargo.toml`) or a Python
    /// harness (holds `hooks.py`, see [`build_python`]); any other
    /// directory is an error naming it, even when its name looks like a
    /// hash prefix.
    pub fn obtain(&self, spec: &str, quiet: bool) -> Result<Manifest, StoreError> {
        let path = Path::new(spec);
        if path.is_dir() {
            self.refuse_ambiguous(spec, path)?;
            if !path.join("Cargo.toml").is_file() && !build_python::is_python_harness(path) {
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
    fn a_hash_read_from_a_file_is_checked_and_written_back_unchanged() {
        let h = ComponentHash::of(b"abc");
        let json = serde_json::to_string(&h).unwrap();
        assert_eq!(json, format!("\"{h}\""));
        assert_eq!(serde_json::from_str::<ComponentHash>(&json).unwrap(), h);
        // Upper-case digits are the same hash.
        let upper = format!("\"{}\"", h.as_str().to_ascii_uppercase());
        assert_eq!(serde_json::from_str::<ComponentHash>(&upper).unwrap(), h);
        for bad in ["\"direct\"", "\"\"", &format!("\"{}\"", &h.as_str()[..63])] {
            let err = serde_json::from_str::<ComponentHash>(bad).unwrap_err();
            assert!(
                err.to_string().contains("is not a component hash"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn core_modules_are_not_components() {
        assert!(!is_component(b"\0asm\x01\0\0\0"));
        assert!(is_component(b"\0asm\x0d\0\x01\0"));
        assert!(!is_component(b"hello"));
    }

    /// Unsigned LEB128, as the wasm binary format writes sizes and counts.
    fn leb(mut n: u32, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    fn section(id: u8, body: &[u8], out: &mut Vec<u8>) {
        out.push(id);
        leb(body.len() as u32, out);
        out.extend_from_slice(body);
    }

    /// A component holding one core module with a function
    /// `(func (param i32) (result i32) local.get 0 i32.const k i32.mul)` per
    /// `k` of `consts`: components that differ in exactly the functions
    /// whose constant differs.
    fn component_of(consts: &[i32]) -> Vec<u8> {
        let n = consts.len() as u32;
        let mut module = b"\0asm\x01\0\0\0".to_vec();
        // One type: (i32) -> i32.
        section(1, &[1, 0x60, 1, 0x7f, 1, 0x7f], &mut module);
        let mut funcs = Vec::new();
        leb(n, &mut funcs);
        funcs.extend(std::iter::repeat_n(0, consts.len()));
        section(3, &funcs, &mut module);
        let mut code = Vec::new();
        leb(n, &mut code);
        for &k in consts {
            // No locals; local.get 0, i32.const k (signed LEB), i32.mul, end.
            let mut body = vec![0, 0x20, 0, 0x41];
            let mut v = k as i64;
            loop {
                let byte = (v & 0x7f) as u8;
                v >>= 7;
                let done = (v == 0 && byte & 0x40 == 0) || (v == -1 && byte & 0x40 != 0);
                body.push(if done { byte } else { byte | 0x80 });
                if done {
                    break;
                }
            }
            body.extend_from_slice(&[0x6c, 0x0b]);
            leb(body.len() as u32, &mut code);
            code.extend_from_slice(&body);
        }
        section(10, &code, &mut module);
        let mut component = b"\0asm\x0d\0\x01\0".to_vec();
        // Component section 1: a core module.
        section(1, &module, &mut component);
        component
    }

    fn put(store: &ComponentStore, bytes: &[u8]) -> ComponentHash {
        store
            .put(
                bytes,
                ManifestFacts {
                    origin: "test".into(),
                    ..ManifestFacts::default()
                },
            )
            .unwrap()
            .hash
    }

    const FUNCTIONS: i32 = 40;

    /// A store with its function cache in a scratch directory (kept alive
    /// by the returned guard), and an on-demand sandbox.
    fn cached_store(name: &str) -> (ecdysis_sys::process::Scratch, ComponentStore, Sandbox) {
        let dir = ecdysis_sys::process::Scratch::new(name).unwrap();
        let store =
            ComponentStore::open(dir.path().join("store")).with_key_file(dir.path().join("key"));
        let sandbox = Sandbox::new(crate::sandbox::Limits::default()).unwrap();
        (dir, store, sandbox)
    }

    #[test]
    fn a_component_differing_in_one_function_compiles_only_that_function() {
        let (dir, store, sandbox) = cached_store("fncache-store");
        let consts: Vec<i32> = (1..=FUNCTIONS).map(|i| i * 1000 + 7).collect();
        let first = put(&store, &component_of(&consts));
        store.component(&sandbox, &first).unwrap();
        let cold = store.fn_cache_counts();
        assert_eq!(cold.hits, 0, "{cold:?}");
        assert!(cold.misses >= FUNCTIONS as u64, "{cold:?}");
        assert_eq!(cold.inserted, cold.misses, "{cold:?}");

        let mut edited = consts.clone();
        edited[17] = -5;
        let second = put(&store, &component_of(&edited));
        store.component(&sandbox, &second).unwrap();
        let warm = store.fn_cache_counts();
        let (hits, misses) = (warm.hits - cold.hits, warm.misses - cold.misses);
        assert!(hits >= FUNCTIONS as u64 - 1, "{warm:?}");
        assert_eq!(misses, 1, "only the edited function compiles: {warm:?}");
        assert_eq!(warm.rejected, 0);

        // The cached build is the build: the same native code as a store
        // without the cache compiles.
        let plain_dir = ecdysis_sys::process::Scratch::new("fncache-plain").unwrap();
        let plain = ComponentStore::open(plain_dir.path().join("store"))
            .with_key_file(dir.path().join("key"))
            .with_fn_cache(false);
        put(&plain, &component_of(&edited));
        plain.component(&sandbox, &second).unwrap();
        assert_eq!(plain.fn_cache_counts(), CacheCounts::default());
        let artifact =
            |s: &ComponentStore| std::fs::read(s.precompiled_path(&second, &sandbox)).unwrap();
        assert_eq!(artifact(&store), artifact(&plain));
    }

    #[test]
    fn a_corrupt_function_cache_entry_is_compiled_again_not_trusted() {
        let (_dir, store, sandbox) = cached_store("fncache-corrupt");
        let consts: Vec<i32> = (1..=FUNCTIONS).map(|i| i * 31 + 1).collect();
        let hash = put(&store, &component_of(&consts));
        store.component(&sandbox, &hash).unwrap();
        let cold = store.fn_cache_counts();
        // Every entry damaged a different way: a flipped byte, a truncation,
        // an empty file, garbage.
        let mut entries = Vec::new();
        for sub in std::fs::read_dir(store.fn_cache_dir(&sandbox)).unwrap() {
            for e in std::fs::read_dir(sub.unwrap().path()).unwrap() {
                entries.push(e.unwrap().path());
            }
        }
        assert_eq!(entries.len() as u64, cold.inserted);
        for (i, path) in entries.iter().enumerate() {
            let mut bytes = std::fs::read(path).unwrap();
            match i % 4 {
                0 => *bytes.last_mut().unwrap() ^= 0x40,
                1 => bytes.truncate(bytes.len() / 2),
                2 => bytes.clear(),
                _ => bytes = b"not an entry".to_vec(),
            }
            std::fs::write(path, bytes).unwrap();
        }
        // Recompiling the same component (its artifact removed) rejects
        // every entry, compiles everything again and yields the same code.
        let cwasm = store.precompiled_path(&hash, &sandbox);
        let before = std::fs::read(&cwasm).unwrap();
        std::fs::remove_file(&cwasm).unwrap();
        let (_, source) = store.component(&sandbox, &hash).unwrap();
        assert_eq!(source, LoadSource::Compiled);
        let after = store.fn_cache_counts();
        assert_eq!(after.hits, cold.hits, "{after:?}");
        assert_eq!(after.rejected, cold.inserted, "{after:?}");
        assert_eq!(std::fs::read(&cwasm).unwrap(), before);
        // The rewritten entries are good again.
        std::fs::remove_file(&cwasm).unwrap();
        store.component(&sandbox, &hash).unwrap();
        let again = store.fn_cache_counts();
        assert_eq!(again.hits - after.hits, cold.inserted, "{again:?}");
        assert_eq!(again.rejected, after.rejected);
    }

    #[test]
    fn stores_sharing_a_native_cache_compile_once_and_distrust_another_keys_entries() {
        let dir = ecdysis_sys::process::Scratch::new("native-shared").unwrap();
        let native = dir.path().join("native");
        let open = |name: &str, key: &str| {
            ComponentStore::open(dir.path().join(name))
                .with_key_file(dir.path().join(key))
                .with_native_cache(&native)
        };
        let sandbox = Sandbox::new(crate::sandbox::Limits::default()).unwrap();
        let consts: Vec<i32> = (1..=FUNCTIONS).map(|i| i * 17 + 3).collect();
        let bytes = component_of(&consts);

        let first = open("first", "key");
        assert_eq!(first.native_cache(), Some(native.as_path()));
        let hash = put(&first, &bytes);
        let (_, source) = first.component(&sandbox, &hash).unwrap();
        assert_eq!(source, LoadSource::Compiled);
        let cwasm = native
            .join("precompiled")
            .join(format!("{hash}-{}.cwasm", engine_tag(&sandbox)));
        assert!(cwasm.is_file(), "the artifact is in the shared directory");
        assert!(!first.root().join("precompiled").exists());
        assert!(!first.root().join("fncache").exists());

        // Another store with the same key: no compilation.
        let second = open("second", "key");
        put(&second, &bytes);
        let (_, source) = second.component(&sandbox, &hash).unwrap();
        assert_eq!(source, LoadSource::Precompiled);
        assert_eq!(second.fn_cache_counts(), CacheCounts::default());

        // A store with another key does not run what the first key wrote:
        // the artifact fails its check and is compiled again.
        let foreign = open("foreign", "other-key");
        put(&foreign, &bytes);
        let (_, source) = foreign.component(&sandbox, &hash).unwrap();
        assert_eq!(source, LoadSource::RecompiledCorrupt);
        assert_eq!(
            foreign.fn_cache_counts().hits,
            0,
            "no entry of the first key is used"
        );
        assert!(foreign.fn_cache_counts().rejected > 0);

        // A store without the option keeps its native code at home.
        let own =
            ComponentStore::open(dir.path().join("own")).with_key_file(dir.path().join("key"));
        assert_eq!(own.native_cache(), None);
        put(&own, &bytes);
        let (_, source) = own.component(&sandbox, &hash).unwrap();
        assert_eq!(source, LoadSource::Compiled);
        assert!(own.root().join("precompiled").is_dir());
    }
}

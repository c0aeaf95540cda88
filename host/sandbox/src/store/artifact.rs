//! Precompiled artifacts: how component bytes become native code, and why
//! the store may trust native code it finds on disk.
//!
//! Compiling is where untrusted bytes meet a large compiler: a component
//! crafted to make Cranelift slow or memory-hungry must cost a bounded child
//! process, not the host. With [`Compiler::Child`] the bytes are compiled by
//! the host binary's hidden `compile-component` subcommand under a wall
//! clock timeout, a CPU-time limit and an address-space limit; the serving
//! process only deserializes the native code that child wrote.
//!
//! Deserializing native code is `unsafe`: whoever can write the store could
//! otherwise plant code that runs with the host's rights. Every `.cwasm`
//! therefore carries a keyed blake3 MAC (`.cwasm.mac`) made with a key kept
//! *outside* the store (a 0600 file, created on first use), and an artifact
//! whose MAC does not verify under this key is recompiled, never executed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use super::StoreError;
use super::fncache::{CacheCounts, FunctionCache};
use crate::sandbox::{Limits, Sandbox, SandboxError};
use ecdysis_sys::fsutil::PathError;
use ecdysis_sys::process::run_with_timeout;
use ecdysis_sys::rlimit::{self, Resource};

/// Largest component the store accepts by default (the starting harness is
/// under 1 MiB).
pub const DEFAULT_MAX_COMPONENT_BYTES: usize = 32 << 20;

/// Wall-clock limit of one compilation by default: room for a component
/// that carries a language runtime (CPython, SpiderMonkey) on a 2-core
/// machine, whose compile times the docs' performance page has.
pub const DEFAULT_COMPILE_TIMEOUT: Duration = Duration::from_secs(600);

/// Address-space limit of a compiling child by default: Cranelift needs a
/// few hundred MiB for a large component; the engine reserves little.
pub const DEFAULT_COMPILE_MEMORY: u64 = 4 << 30;

/// The environment variable naming the artifact key file.
pub const KEY_FILE_ENV: &str = "ECDYSIS_KEY_FILE";

/// How component bytes are compiled to native code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compiler {
    /// In this process (trusted components: the library's default for its
    /// own callers).
    InProcess,
    /// In a child process of this executable (its hidden
    /// `compile-component` subcommand), under limits: what the CLI and the
    /// service use for any component they are handed.
    Child {
        /// The `ecdysis-host` executable.
        exe: PathBuf,
        /// Wall-clock limit.
        timeout: Duration,
        /// Address-space limit, in bytes.
        memory_bytes: u64,
    },
}

impl Compiler {
    /// A child-process compiler of this executable with the default limits.
    pub fn child_of_current_exe() -> std::io::Result<Compiler> {
        Ok(Compiler::Child {
            exe: std::env::current_exe()?,
            timeout: DEFAULT_COMPILE_TIMEOUT,
            memory_bytes: DEFAULT_COMPILE_MEMORY,
        })
    }

    /// Native code for `bytes`, compatible with `sandbox`'s engine, with
    /// what the function cache did (zero counts without `cache`).
    pub(crate) fn compile(
        &self,
        sandbox: &Sandbox,
        bytes: &[u8],
        scratch: &Path,
        cache: Option<&ChildCache>,
    ) -> Result<(Vec<u8>, CacheCounts), StoreError> {
        match self {
            Compiler::InProcess => match cache {
                Some(c) => {
                    let key = ArtifactKey::load_or_create(&c.key_file)?;
                    let fns = FunctionCache::open(&c.dir, &key);
                    let native = sandbox.precompile_cached(bytes, Arc::new(fns.clone()))?;
                    // Only a compile that added entries can have grown the
                    // cache past its cap. A full disk or an unreadable entry
                    // must not fail a compile that succeeded: the cap is
                    // kept next time.
                    if fns.counts().inserted > 0
                        && let Err(e) = fns.trim(super::fncache::DEFAULT_MAX_BYTES)
                    {
                        tracing::warn!(dir = %c.dir.display(), error = %e, "cannot trim the function cache");
                    }
                    Ok((native, fns.counts()))
                }
                None => sandbox
                    .engine()
                    .precompile_component(bytes)
                    .map(|native| (native, CacheCounts::default()))
                    .map_err(|e| SandboxError::Compile(format!("{e:#}")).into()),
            },
            Compiler::Child {
                exe,
                timeout,
                memory_bytes,
            } => compile_in_child(
                exe,
                sandbox.limits(),
                bytes,
                scratch,
                cache,
                *timeout,
                *memory_bytes,
            ),
        }
    }
}

/// Where a compilation keeps and finds its per-function cache entries
/// ([`FunctionCache`]), and the key file their MACs derive from: paths, so
/// a compile child opens the same cache as its parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildCache {
    /// The cache directory of the engine's configuration.
    pub dir: PathBuf,
    /// The store's artifact key file.
    pub key_file: PathBuf,
}

/// Compile `bytes` in a child process and read back its native code.
fn compile_in_child(
    exe: &Path,
    limits: &Limits,
    bytes: &[u8],
    scratch: &Path,
    cache: Option<&ChildCache>,
    timeout: Duration,
    memory_bytes: u64,
) -> Result<(Vec<u8>, CacheCounts), StoreError> {
    use std::os::unix::process::CommandExt;
    std::fs::create_dir_all(scratch).map_err(|e| PathError::new("create", scratch, e))?;
    let tag = format!("{}-{}", std::process::id(), blake3::hash(bytes).to_hex());
    let input = scratch.join(format!("{tag}.wasm"));
    let output = scratch.join(format!("{tag}.cwasm"));
    std::fs::write(&input, bytes).map_err(|e| PathError::new("write", &input, e))?;
    let mut cmd = Command::new(exe);
    cmd.arg("compile-component")
        .arg("--input")
        .arg(&input)
        .arg("--output")
        .arg(&output)
        .arg("--limits")
        .arg(serde_json::to_string(limits).expect("limits serialize"));
    if let Some(c) = cache {
        cmd.arg("--fn-cache")
            .arg(&c.dir)
            .arg("--key-file")
            .arg(&c.key_file);
    }
    let cpu_secs = timeout.as_secs().max(1);
    // SAFETY: only bare system calls (setrlimit) run between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            rlimit::set(Resource::As, memory_bytes, memory_bytes)?;
            rlimit::set(Resource::Cpu, cpu_secs, cpu_secs)?;
            Ok(())
        });
    }
    let out = run_with_timeout(cmd, timeout).map_err(|e| {
        SandboxError::Compile(format!("cannot start the compiler {}: {e}", exe.display()))
    });
    let _ = std::fs::remove_file(&input);
    let out = out?;
    let native = if out.success() {
        // The child's last stdout line is its cache counts (absent without
        // a cache).
        let counts = out
            .stdout
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_default();
        std::fs::read(&output)
            .map(|native| (native, counts))
            .map_err(|e| PathError::new("read", &output, e).into())
    } else {
        let why = if out.timed_out {
            format!("killed after {} s", timeout.as_secs())
        } else {
            let tail: Vec<&str> = out.stderr.lines().rev().take(8).collect();
            format!(
                "{} ({})",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
                out.status.map(|s| s.to_string()).unwrap_or_default()
            )
        };
        Err(StoreError::Sandbox(SandboxError::Compile(format!(
            "the compiler process failed: {why}"
        ))))
    };
    let _ = std::fs::remove_file(&output);
    native
}

/// The body of `ecdysis-host compile-component`: compile one component
/// with an engine configured by `limits` (and the function cache `cache`)
/// and write its native code; returns what the cache did, which the
/// command prints as its last stdout line for the parent.
pub fn compile_component_command(
    input: &Path,
    output: &Path,
    limits: Limits,
    cache: Option<&ChildCache>,
) -> Result<CacheCounts, StoreError> {
    let bytes = std::fs::read(input).map_err(|e| PathError::new("read", input, e))?;
    let sandbox = Sandbox::new(limits)?;
    let (native, counts) = Compiler::InProcess.compile(&sandbox, &bytes, Path::new("."), cache)?;
    ecdysis_sys::fsutil::atomic_write(output, &native)
        .map_err(|e| PathError::new("write", output, e))?;
    Ok(counts)
}

/// The key that authenticates this host's precompiled artifacts.
#[derive(Clone)]
pub struct ArtifactKey([u8; 32]);

impl std::fmt::Debug for ArtifactKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ArtifactKey(..)")
    }
}

impl ArtifactKey {
    /// `$ECDYSIS_KEY_FILE`, else `~/.config/ecdysis/artifact.key`: outside
    /// any store directory, so whoever can write a store cannot forge a MAC.
    pub fn default_path() -> PathBuf {
        if let Some(p) = std::env::var_os(KEY_FILE_ENV) {
            return PathBuf::from(p);
        }
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        home.join(".config/ecdysis/artifact.key")
    }

    /// Read the key at `path`, creating it (32 random bytes, mode 0600) on
    /// first use. A key readable or writable by others is refused.
    pub fn load_or_create(path: &Path) -> Result<ArtifactKey, StoreError> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        if !path.exists() {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| PathError::new("create", dir, e))?;
            }
            let mut key = [0u8; 32];
            std::fs::File::open("/dev/urandom")
                .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut key))
                .map_err(|e| PathError::new("read", Path::new("/dev/urandom"), e))?;
            // Written under a temporary name, then linked into place: of two
            // processes (or threads) creating it at once, one key wins for
            // both. The name is unique per process and call: two threads of
            // one process racing here once collided on a per-process name.
            static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let tmp = path.with_extension(format!(
                "tmp.{}.{}",
                std::process::id(),
                CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ));
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)
                .and_then(|mut f| std::io::Write::write_all(&mut f, &key))
                .map_err(|e| PathError::new("write", &tmp, e))?;
            let linked = std::fs::hard_link(&tmp, path);
            let _ = std::fs::remove_file(&tmp);
            if let Err(e) = linked
                && e.kind() != std::io::ErrorKind::AlreadyExists
            {
                return Err(PathError::new("create", path, e).into());
            }
        }
        let meta = std::fs::metadata(path).map_err(|e| PathError::new("stat", path, e))?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(StoreError::BadKey {
                path: path.to_path_buf(),
                reason: format!(
                    "its mode is {:o}; others may read it: chmod 600 it",
                    meta.permissions().mode() & 0o777
                ),
            });
        }
        let bytes = std::fs::read(path).map_err(|e| PathError::new("read", path, e))?;
        let key: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| StoreError::BadKey {
            path: path.to_path_buf(),
            reason: format!("it holds {} bytes, not 32", b.len()),
        })?;
        Ok(ArtifactKey(key))
    }

    /// The MAC of the artifact `bytes` of component `hash` (hex). The
    /// component hash is part of it, so a genuine artifact of another
    /// component, planted with its MAC under this hash, does not verify.
    pub fn mac(&self, hash: &super::ComponentHash, bytes: &[u8]) -> String {
        self.keyed(hash, bytes).to_hex().to_string()
    }

    /// A key for another kind of store entry, derived from this one with
    /// blake3's key derivation under `context`: a MAC made for one kind of
    /// entry never verifies as another kind.
    pub(crate) fn derive(&self, context: &str) -> [u8; 32] {
        blake3::derive_key(context, &self.0)
    }

    fn keyed(&self, hash: &super::ComponentHash, bytes: &[u8]) -> blake3::Hash {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(hash.as_str().as_bytes());
        h.update(&[0]);
        h.update(bytes);
        h.finalize()
    }

    /// Whether `mac` (hex, as stored) authenticates `bytes` as component
    /// `hash`'s artifact, compared in constant time.
    pub fn verifies(&self, hash: &super::ComponentHash, bytes: &[u8], mac: &str) -> bool {
        blake3::Hash::from_hex(mac.trim()).is_ok_and(|m| m == self.keyed(hash, bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_creating_the_key_at_once_all_get_the_one_key() {
        let dir = ecdysis_sys::process::Scratch::new("artifact-key").unwrap();
        let path = dir.path().join("keys/artifact");
        let barrier = std::sync::Barrier::new(8);
        let keys: Vec<[u8; 32]> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        ArtifactKey::load_or_create(&path).map(|k| k.derive("test"))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap().expect("every racer gets the key"))
                .collect()
        });
        assert!(keys.iter().all(|k| *k == keys[0]), "one key wins for all");
        // Positive control: a later load reads the same key, and no
        // temporary file is left beside it.
        assert_eq!(
            ArtifactKey::load_or_create(&path).unwrap().derive("test"),
            keys[0]
        );
        let names: Vec<String> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["artifact"]);
    }
}

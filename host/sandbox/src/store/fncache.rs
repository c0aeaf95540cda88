//! Cranelift's per-function incremental compilation cache, on disk in the
//! store.
//!
//! A training candidate differs from its parent in a few functions (the rule
//! coder's edit touches data and the code that reads it), yet compiling it
//! from scratch costs as much as compiling the first harness. With this
//! cache the compiling engine ([`crate::sandbox::Sandbox::precompile_cached`])
//! looks every function up by Cranelift's key (a hash of the function's body
//! and the compiler's settings) and compiles only the misses.
//!
//! ```text
//! <root>/fncache/<engine>/<2 hex>/<62 hex>   one entry: MAC (32 bytes) ‖ value
//! ```
//!
//! An entry's file name is the blake3 hash of Cranelift's key. Entries hold
//! machine code the compiled component will run, so each carries a keyed
//! blake3 MAC over key and value, with a key derived from the store's
//! [`ArtifactKey`] (kept outside the store): a planted, truncated or
//! bit-flipped entry is a miss (counted in [`CacheCounts::rejected`]), never
//! code. Entries are written under a temporary name and renamed, without
//! fsync: a torn entry after a crash is a miss too.
//!
//! The cache is bounded ([`DEFAULT_MAX_BYTES`]): a hit refreshes its
//! entry's modification time, and after each compile [`FunctionCache::trim`]
//! removes the least recently used entries once the total is over the cap.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::ArtifactKey;
use ecdysis_sys::fsutil::atomic_write_unsynced;

/// blake3 key-derivation context of the entries' MAC key.
const MAC_CONTEXT: &str = "ecdysis 2026-12 incremental-compilation cache entry MAC";

/// Length of the MAC in front of every entry.
const MAC_BYTES: usize = 32;

/// The function cache's size cap: a few hundred harness builds' worth (a
/// training round adds only the entries of the functions it changed).
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;

/// What [`FunctionCache::trim`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Trimmed {
    /// Entries removed.
    pub removed: u64,
    /// Bytes of the entries that remain.
    pub bytes: u64,
}

/// What a cache did, counted since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheCounts {
    /// Lookups answered from an entry whose MAC verified.
    pub hits: u64,
    /// Lookups with no entry.
    pub misses: u64,
    /// Lookups whose entry was there but failed verification (corrupt,
    /// truncated or not written by this host): treated as misses.
    pub rejected: u64,
    /// Entries written.
    pub inserted: u64,
    /// Entries that could not be written (the compile goes on without them).
    pub insert_failures: u64,
}

impl CacheCounts {
    /// The sum of two counts.
    pub fn plus(self, o: CacheCounts) -> CacheCounts {
        CacheCounts {
            hits: self.hits + o.hits,
            misses: self.misses + o.misses,
            rejected: self.rejected + o.rejected,
            inserted: self.inserted + o.inserted,
            insert_failures: self.insert_failures + o.insert_failures,
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    rejected: AtomicU64,
    inserted: AtomicU64,
    insert_failures: AtomicU64,
}

/// The on-disk function cache of one engine configuration.
#[derive(Clone)]
pub struct FunctionCache {
    dir: PathBuf,
    mac_key: [u8; 32],
    counters: Arc<Counters>,
}

impl std::fmt::Debug for FunctionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FunctionCache")
            .field("dir", &self.dir)
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

impl FunctionCache {
    /// The cache in `dir` (created on first insert), its entries
    /// authenticated with a key derived from `key`.
    pub fn open(dir: impl Into<PathBuf>, key: &ArtifactKey) -> Self {
        FunctionCache {
            dir: dir.into(),
            mac_key: key.derive(MAC_CONTEXT),
            counters: Arc::default(),
        }
    }

    /// The directory of the entries.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What this cache (and its clones) did so far.
    pub fn counts(&self) -> CacheCounts {
        let c = &self.counters;
        CacheCounts {
            hits: c.hits.load(Ordering::Relaxed),
            misses: c.misses.load(Ordering::Relaxed),
            rejected: c.rejected.load(Ordering::Relaxed),
            inserted: c.inserted.load(Ordering::Relaxed),
            insert_failures: c.insert_failures.load(Ordering::Relaxed),
        }
    }

    /// Where the entry of Cranelift's `key` is (or would be).
    pub fn entry_path(&self, key: &[u8]) -> PathBuf {
        let name = blake3::hash(key).to_hex();
        self.dir.join(&name[..2]).join(&name[2..])
    }

    /// Keeps the cache at most `max_bytes`: when the entries add up to more,
    /// the least recently used (oldest modification time; a hit refreshes
    /// it) are removed until they fit in three quarters of the cap, so the
    /// next few compiles do not each trim again. A removed entry is only a
    /// miss later. Files that are not entries (temporary names) are left
    /// alone.
    pub fn trim(&self, max_bytes: u64) -> std::io::Result<Trimmed> {
        let mut entries: Vec<(std::time::SystemTime, u64, PathBuf)> = Vec::new();
        let shards = match std::fs::read_dir(&self.dir) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Trimmed::default()),
            Err(e) => return Err(e),
        };
        for shard in shards {
            let shard = shard?;
            let name = shard.file_name();
            if name.len() != 2 || !shard.file_type()?.is_dir() {
                continue;
            }
            for entry in std::fs::read_dir(shard.path())? {
                let entry = entry?;
                if entry.file_name().len() != 62 {
                    continue;
                }
                let meta = entry.metadata()?;
                if meta.is_file() {
                    entries.push((meta.modified()?, meta.len(), entry.path()));
                }
            }
        }
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        let mut removed = 0;
        if total > max_bytes {
            entries.sort();
            let goal = max_bytes / 4 * 3;
            for (_, len, path) in &entries {
                if total <= goal {
                    break;
                }
                match std::fs::remove_file(path) {
                    Ok(()) => {
                        total -= len;
                        removed += 1;
                    }
                    // Another compile removed it first.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => total -= len,
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(Trimmed {
            removed,
            bytes: total,
        })
    }

    fn mac(&self, key: &[u8], value: &[u8]) -> blake3::Hash {
        let mut h = blake3::Hasher::new_keyed(&self.mac_key);
        h.update(&(key.len() as u64).to_le_bytes());
        h.update(key);
        h.update(value);
        h.finalize()
    }
}

impl wasmtime::CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        use std::io::Read;
        let path = self.entry_path(key);
        // Opened for writing too, so a hit can mark itself recently used
        // (`trim` evicts by modification time) on the same handle; a
        // read-only cache still answers.
        let file = std::fs::File::options()
            .read(true)
            .write(true)
            .open(&path)
            .or_else(|_| std::fs::File::open(&path));
        let mut bytes = Vec::new();
        let file = match file.and_then(|mut f| f.read_to_end(&mut bytes).map(|_| f)) {
            Ok(f) => f,
            Err(_) => {
                self.counters.misses.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        };
        let verified = bytes.len() >= MAC_BYTES && {
            let (mac, value) = bytes.split_at(MAC_BYTES);
            // blake3::Hash compares in constant time.
            blake3::Hash::from_bytes(mac.try_into().expect("32 bytes")) == self.mac(key, value)
        };
        if !verified {
            self.counters.rejected.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(path = %path.display(), "function cache entry failed verification; compiling the function");
            return None;
        }
        self.counters.hits.fetch_add(1, Ordering::Relaxed);
        // Best effort (fails on a read-only handle).
        let _ = file.set_modified(std::time::SystemTime::now());
        bytes.drain(..MAC_BYTES);
        Some(Cow::Owned(bytes))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let path = self.entry_path(key);
        let mut bytes = Vec::with_capacity(MAC_BYTES + value.len());
        bytes.extend_from_slice(self.mac(key, &value).as_bytes());
        bytes.extend_from_slice(&value);
        match atomic_write_unsynced(&path, &bytes) {
            Ok(()) => {
                self.counters.inserted.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(e) => {
                self.counters
                    .insert_failures
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(path = %path.display(), error = %e, "cannot write a function cache entry");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::CacheStore;

    fn key() -> ArtifactKey {
        let dir = ecdysis_sys::process::Scratch::new("fncache-key").unwrap();
        ArtifactKey::load_or_create(&dir.path().join("k")).unwrap()
    }

    #[test]
    fn entries_round_trip_and_bad_ones_are_misses() {
        let dir = ecdysis_sys::process::Scratch::new("fncache").unwrap();
        let k = key();
        let cache = FunctionCache::open(dir.path(), &k);
        assert!(cache.get(b"f1").is_none());
        assert!(cache.insert(b"f1", b"code one".to_vec()));
        assert_eq!(cache.get(b"f1").as_deref(), Some(&b"code one"[..]));
        // Another key's cache (another host) does not trust this entry.
        let other = FunctionCache::open(dir.path(), &key());
        assert!(other.get(b"f1").is_none());
        assert_eq!(other.counts().rejected, 1);
        // A flipped byte, a truncation and an entry moved under another
        // key's name are all rejected.
        let path = cache.entry_path(b"f1");
        let good = std::fs::read(&path).unwrap();
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        for bad in [flipped, good[..10].to_vec(), Vec::new()] {
            std::fs::write(&path, &bad).unwrap();
            assert!(cache.get(b"f1").is_none());
        }
        let moved = cache.entry_path(b"f2");
        std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
        std::fs::write(moved, &good).unwrap();
        assert!(cache.get(b"f2").is_none());
        assert_eq!(
            cache.counts(),
            CacheCounts {
                hits: 1,
                misses: 1,
                rejected: 4,
                inserted: 1,
                insert_failures: 0
            }
        );
    }

    #[test]
    fn trim_evicts_the_least_recently_used_entries_down_to_three_quarters() {
        use std::time::{Duration, SystemTime};
        let dir = ecdysis_sys::process::Scratch::new("fncache-trim").unwrap();
        let cache = FunctionCache::open(dir.path(), &key());
        let value = vec![7u8; 1000 - MAC_BYTES];
        let names: Vec<Vec<u8>> = (0..8).map(|i| format!("fn{i}").into_bytes()).collect();
        for (age, name) in names.iter().enumerate() {
            assert!(cache.insert(name, value.clone()));
            // fn0 is the oldest: mtimes 80 s, 70 s, ... ago.
            let when = SystemTime::now() - Duration::from_secs(80 - 10 * age as u64);
            std::fs::File::options()
                .write(true)
                .open(cache.entry_path(name))
                .unwrap()
                .set_modified(when)
                .unwrap();
        }
        // A temporary file is not an entry and stays.
        let stray = cache.entry_path(b"fn0").with_file_name("tmp.partial");
        std::fs::write(&stray, vec![0u8; 5000]).unwrap();
        // Under the cap: nothing goes.
        assert_eq!(
            cache.trim(8000).unwrap(),
            Trimmed {
                removed: 0,
                bytes: 8000
            }
        );
        // A hit makes fn1 the most recently used.
        assert!(cache.get(b"fn1").is_some());
        // Over a 6000-byte cap: down to 4500 bytes, oldest first, fn1 kept.
        let t = cache.trim(6000).unwrap();
        assert_eq!(
            t,
            Trimmed {
                removed: 4,
                bytes: 4000
            }
        );
        let left: Vec<bool> = names.iter().map(|n| cache.entry_path(n).exists()).collect();
        assert_eq!(
            left,
            [false, true, false, false, false, true, true, true],
            "fn0, fn2, fn3, fn4 were the least recently used"
        );
        assert!(stray.exists());
        // Positive control: what is left still verifies and answers.
        assert_eq!(cache.get(b"fn7").as_deref(), Some(&value[..]));
        assert!(cache.get(b"fn0").is_none());
        // An absent directory is an empty cache.
        let none = FunctionCache::open(dir.path().join("absent"), &key());
        assert_eq!(none.trim(1).unwrap(), Trimmed::default());
    }
}

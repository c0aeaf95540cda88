//! Content-addressed on-disk response cache.
//!
//! Key: blake3 of the canonical JSON (keys sorted, no whitespace) of the
//! request fingerprint — everything that determines the reply. Layout:
//! `<dir>/<first two hex chars>/<hash>.json`, each file holding the key, the
//! fingerprint (for audit) and the response. Writes go to a unique temp file
//! and are renamed into place, so concurrent writers and readers never see a
//! partial entry; two writers of one key write equivalent content and the
//! last rename wins.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tracing::{debug, warn};

use crate::error::ModelError;
use crate::types::ChatResponse;

/// Bumped when the key derivation or entry format changes, so old entries
/// simply stop matching.
const KEY_DOMAIN: &str = "ecdysis-model-cache/v1";
const ENTRY_FORMAT: u64 = 1;

/// The `--cache` flag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CachePolicy {
    /// Replay hits, store fresh responses.
    #[default]
    ReadWrite,
    /// Replay hits, never write (reproduce a run from a frozen cache).
    ReadOnly,
    /// Neither read nor write.
    Off,
}

impl CachePolicy {
    /// Whether hits are replayed.
    pub fn reads(self) -> bool {
        matches!(self, Self::ReadWrite | Self::ReadOnly)
    }

    /// Whether fresh responses are stored.
    pub fn writes(self) -> bool {
        self == Self::ReadWrite
    }

    /// The name `--cache` takes: `read-write`, `read-only` or `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadWrite => "read-write",
            Self::ReadOnly => "read-only",
            Self::Off => "off",
        }
    }
}

impl fmt::Display for CachePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CachePolicy {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "read-write" | "readwrite" | "rw" => Ok(Self::ReadWrite),
            "read-only" | "readonly" | "ro" => Ok(Self::ReadOnly),
            "off" | "none" => Ok(Self::Off),
            other => Err(ModelError::Config(format!(
                "unknown cache policy `{other}` (read-write, read-only or off)"
            ))),
        }
    }
}

/// JSON with object keys sorted at every level and no whitespace: the same
/// value always hashes the same, whatever order its maps were built in.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// A cache key: 64 hex chars of blake3.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CacheKey(String);

impl CacheKey {
    /// The key of a request fingerprint (see `ChatModel::fingerprint`).
    pub fn of(fingerprint: &Value) -> Self {
        let mut hasher = blake3::Hasher::new();
        hasher.update(KEY_DOMAIN.as_bytes());
        hasher.update(b"\n");
        hasher.update(canonical_json(fingerprint).as_bytes());
        Self(hasher.finalize().to_hex().to_string())
    }

    /// The 64 hex characters (also the entry's file name).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Counters of one cache, for the results file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheStats {
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that found no usable entry (corrupt ones included).
    pub misses: u64,
    /// Fresh responses stored.
    pub writes: u64,
    /// Entries that could not be read or written (logged, never fatal).
    pub errors: u64,
}

/// The response cache shared by every metered model of a run.
#[derive(Debug)]
pub struct ResponseCache {
    dir: PathBuf,
    policy: CachePolicy,
    hits: AtomicU64,
    misses: AtomicU64,
    writes: AtomicU64,
    errors: AtomicU64,
}

impl ResponseCache {
    /// A cache rooted at `dir` (created on first write).
    pub fn new(dir: impl Into<PathBuf>, policy: CachePolicy) -> Self {
        Self {
            dir: dir.into(),
            policy,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }

    /// A cache that never reads or writes.
    pub fn disabled() -> Self {
        Self::new(PathBuf::new(), CachePolicy::Off)
    }

    /// Whether this cache reads and writes.
    pub fn policy(&self) -> CachePolicy {
        self.policy
    }

    /// The directory entries live under.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The counters so far.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }

    /// `<dir>/<aa>/<hash>.json`.
    pub fn path_for(&self, key: &CacheKey) -> PathBuf {
        let hex = key.as_str();
        self.dir.join(&hex[..2]).join(format!("{hex}.json"))
    }

    /// The stored response for `key`, marked `cached`, if the policy reads
    /// and a valid entry exists. An unreadable entry is a miss (and is
    /// overwritten by the next fresh response under read-write).
    pub async fn get(&self, key: &CacheKey) -> Option<ChatResponse> {
        if !self.policy.reads() {
            return None;
        }
        let path = self.path_for(key);
        let bytes = match tokio::fs::read(&path).await {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            Err(e) => {
                warn!(path = %path.display(), error = %e, "cannot read cache entry");
                self.errors.fetch_add(1, Ordering::Relaxed);
                self.misses.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        };
        let entry = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .filter(|entry| {
                entry.get("format").and_then(Value::as_u64) == Some(ENTRY_FORMAT)
                    && entry.get("key").and_then(Value::as_str) == Some(key.as_str())
            });
        let response = entry
            .and_then(|mut entry| entry.get_mut("response").map(Value::take))
            .and_then(|response| serde_json::from_value::<ChatResponse>(response).ok());
        match response {
            Some(mut response) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                response.cached = true;
                response.attempts = 0;
                debug!(key = %key, "response cache hit");
                Some(response)
            }
            None => {
                warn!(path = %path.display(), "corrupt cache entry; treating as a miss");
                self.errors.fetch_add(1, Ordering::Relaxed);
                self.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Stores `response` under `key` if the policy writes. Returns whether
    /// an entry was written.
    pub async fn put(
        &self,
        key: &CacheKey,
        fingerprint: &Value,
        response: &ChatResponse,
    ) -> std::io::Result<bool> {
        if !self.policy.writes() {
            return Ok(false);
        }
        let mut stored = response.clone();
        stored.cached = false;
        let entry = json!({
            "format": ENTRY_FORMAT,
            "key": key.as_str(),
            "request": fingerprint,
            "response": stored,
        });
        let bytes = serde_json::to_vec(&entry).map_err(std::io::Error::other)?;
        let result = self.write_atomically(&self.path_for(key), &bytes).await;
        match &result {
            Ok(()) => {
                self.writes.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        result.map(|()| true)
    }

    /// The crate's one atomic write (temp file, fsync, rename), off the
    /// async runtime.
    async fn write_atomically(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let (path, bytes) = (path.to_path_buf(), bytes.to_vec());
        tokio::task::spawn_blocking(move || ecdysis_sys::fsutil::atomic_write(&path, &bytes))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let a: Value =
            serde_json::from_str(r#"{"b": 1, "a": {"y": [1, {"d": 2, "c": 3}], "x": "s"}}"#)
                .unwrap();
        let b: Value =
            serde_json::from_str(r#"{"a": {"x": "s", "y": [1, {"c": 3, "d": 2}]}, "b": 1}"#)
                .unwrap();
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"x":"s","y":[1,{"c":3,"d":2}]},"b":1}"#
        );
        assert_eq!(CacheKey::of(&a), CacheKey::of(&b));
        let c: Value =
            serde_json::from_str(r#"{"a": {"x": "s", "y": [{"c": 3, "d": 2}, 1]}, "b": 1}"#)
                .unwrap();
        assert_ne!(CacheKey::of(&a), CacheKey::of(&c));
        assert_eq!(CacheKey::of(&a).as_str().len(), 64);
    }

    #[test]
    fn policy_parses_from_flag_text() {
        assert_eq!(
            "read-write".parse::<CachePolicy>().unwrap(),
            CachePolicy::ReadWrite
        );
        assert_eq!(
            "READ-ONLY".parse::<CachePolicy>().unwrap(),
            CachePolicy::ReadOnly
        );
        assert_eq!("off".parse::<CachePolicy>().unwrap(), CachePolicy::Off);
        assert!("sometimes".parse::<CachePolicy>().is_err());
        for p in [
            CachePolicy::ReadWrite,
            CachePolicy::ReadOnly,
            CachePolicy::Off,
        ] {
            assert_eq!(p.to_string().parse::<CachePolicy>().unwrap(), p);
        }
        assert!(!CachePolicy::ReadOnly.writes() && CachePolicy::ReadOnly.reads());
        assert!(!CachePolicy::Off.reads());
    }
}

//! Rust harness builds kept by what they were built from, in a native-code
//! directory that several stores share ([`ComponentStore::with_native_cache`]):
//! a store that builds a source another store already built (the starting
//! harness of every training run, the same scripted edit in two runs) takes
//! the component from there instead of compiling it again.
//!
//! The host's invariant makes this sound: a component is named by its
//! bytes, and the same source builds to the same bytes whatever the
//! operator's shell exports ([`ecdysis_sys::process::is_cargo_leak`]). The
//! key therefore covers what a build still reads besides the crate: the
//! WIT package beside it, the compiler, the profile and features, cargo's
//! configuration files and the variables it honours that are not scrubbed,
//! and who wrote the source (an untrusted source is scanned before it is
//! looked up, and never served a trusted build's component). A crate is
//! kept when its dependencies are pinned: by its own `Cargo.lock`, or as a
//! member of a workspace whose root holds one (the repository's guests),
//! keyed then with the root's manifest and lock file and the WIT package
//! beside the root, and only when neither manifest names a `path` (another
//! crate's source would then be read unkeyed). Any other crate resolves
//! its dependencies anew each time and is never kept. (The user's own
//! crate builds with the user's environment: a build script that reads
//! other variables makes bytes this key does not see, and such a crate
//! must not be built with a shared directory.)
//! Entries are authenticated with the machine's artifact key,
//! like the native code beside them: an entry planted by anyone without
//! the key is ignored and the source compiled.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::build::{BuildOptions, Trust, source_tree_hash};
use super::{ComponentStore, StoreError};
use ecdysis_sys::fsutil::{PathError, atomic_write};

/// Components kept at once (the least recently used go first).
pub const KEPT_BUILDS: usize = 64;

/// The directory of kept builds under a shared native-code directory.
pub fn kept_builds_dir(native_cache: &Path) -> PathBuf {
    native_cache.join("builds")
}

/// What a Rust build's bytes depend on, as a hex blake3; `None` when the
/// build cannot be keyed (no `Cargo.lock`, no compiler answering).
pub(super) fn build_key(
    crate_dir: &Path,
    source_hash: &str,
    opts: &BuildOptions,
) -> Result<Option<String>, PathError> {
    let Some(pinned) = pinned_by(crate_dir) else {
        return Ok(None);
    };
    let Some(compiler) = compiler_version() else {
        return Ok(None);
    };
    let mut hasher = blake3::Hasher::new();
    let mut field = |name: &str, value: &[u8]| {
        hasher.update(name.as_bytes());
        hasher.update(&[0]);
        hasher.update(&(value.len() as u64).to_le_bytes());
        hasher.update(value);
    };
    field("kind", b"ecdysis rust build 1");
    field("source", source_hash.as_bytes());
    field("wit", wit_beside(crate_dir)?.as_bytes());
    if let Pinned::Workspace(root) = &pinned {
        for file in ["Cargo.toml", "Cargo.lock"] {
            let path = root.join(file);
            let text = std::fs::read(&path).map_err(|e| PathError::new("read", &path, e))?;
            field(&format!("workspace {file}"), &text);
        }
        field("workspace wit", wit_beside(root)?.as_bytes());
    }
    field("compiler", compiler.as_bytes());
    field("profile", format!("{:?}", opts.profile).as_bytes());
    let mut features = opts.features.clone();
    features.sort();
    field("features", features.join("\0").as_bytes());
    // An untrusted source is keyed with its whole policy (limits, network,
    // the findings it may keep): a build that failed under one policy is
    // never served another's success.
    let trust = match &opts.trust {
        Trust::Own => "own".to_string(),
        Trust::Untrusted {
            containment,
            allowed,
        } => format!("untrusted {containment:?} {allowed:?}"),
    };
    field("trust", trust.as_bytes());
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| {
            matches!(k.as_str(), "RUSTC" | "RUSTUP_TOOLCHAIN" | "CARGO_HOME")
                || (k.starts_with("CARGO_TARGET_") && k != "CARGO_TARGET_DIR")
        })
        .collect();
    vars.sort();
    for (k, v) in &vars {
        field(k, v.as_bytes());
    }
    for config in cargo_configs(crate_dir) {
        if let Ok(text) = std::fs::read(&config) {
            field(&config.display().to_string(), &text);
        }
    }
    Ok(Some(hasher.finalize().to_hex().to_string()))
}

/// The source hash of the `wit/` beside `dir`, empty without one.
fn wit_beside(dir: &Path) -> Result<String, PathError> {
    match dir.parent().map(|p| p.join("wit")).filter(|w| w.is_dir()) {
        Some(wit) => source_tree_hash(&wit),
        None => Ok(String::new()),
    }
}

/// Where a crate's dependencies are pinned.
enum Pinned {
    /// Its own `Cargo.lock`.
    Own,
    /// The `Cargo.lock` of the workspace rooted here.
    Workspace(PathBuf),
}

/// The crate's own lock file, else the nearest enclosing workspace root
/// with one, when neither manifest names a `path`; `None` otherwise.
fn pinned_by(crate_dir: &Path) -> Option<Pinned> {
    if crate_dir.join("Cargo.lock").is_file() {
        return Some(Pinned::Own);
    }
    let names_a_path = |manifest: &Path| {
        std::fs::read_to_string(manifest).map_or(true, |text| manifest_names_a_path(&text))
    };
    if names_a_path(&crate_dir.join("Cargo.toml")) {
        return None;
    }
    let root = crate_dir.ancestors().skip(1).find(|dir| {
        std::fs::read_to_string(dir.join("Cargo.toml"))
            .is_ok_and(|text| text.lines().any(|l| l.trim() == "[workspace]"))
    })?;
    (root.join("Cargo.lock").is_file() && !names_a_path(&root.join("Cargo.toml")))
        .then(|| Pinned::Workspace(root.to_path_buf()))
}

/// Whether a manifest has a `path` key anywhere (a dependency, a patch, a
/// target's file): read textually, erring towards yes.
fn manifest_names_a_path(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.split('#').next().unwrap_or("");
        line.match_indices("path").any(|(at, _)| {
            let before = line[..at].chars().next_back();
            let after = line[at + "path".len()..].trim_start();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-')
                && after.starts_with('=')
        })
    })
}

/// `rustc -vV` (version, commit, host, LLVM), asked once per process; its
/// first line is the toolchain a manifest records.
pub(super) fn compiler_version() -> Option<&'static str> {
    static VERSION: OnceLock<Option<String>> = OnceLock::new();
    VERSION
        .get_or_init(|| {
            let out = std::process::Command::new("rustc")
                .arg("-vV")
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
        })
        .as_deref()
}

/// The cargo configuration files a build in `crate_dir` reads: every
/// ancestor's `.cargo/config.toml` (and the older `config`), and
/// `$CARGO_HOME`'s.
fn cargo_configs(crate_dir: &Path) -> Vec<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let dirs = crate_dir.ancestors().map(|a| a.join(".cargo")).chain(home);
    dirs.flat_map(|d| [d.join("config.toml"), d.join("config")])
        .filter(|f| f.is_file())
        .collect()
}

impl ComponentStore {
    /// The kept component of build `key`, if this store shares a
    /// native-code directory that holds one with a valid MAC (and marks it
    /// used).
    pub(super) fn kept_build(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let Some(dir) = self.native_cache().map(kept_builds_dir) else {
            return Ok(None);
        };
        let entry = dir.join(format!("{key}.wasm"));
        let (Ok(bytes), Ok(mac)) = (
            std::fs::read(&entry),
            std::fs::read_to_string(dir.join(format!("{key}.wasm.mac"))),
        ) else {
            return Ok(None);
        };
        let expected = self.build_mac(key, &bytes)?;
        if !blake3::Hash::from_hex(mac.trim()).is_ok_and(|m| m == expected) {
            tracing::warn!(entry = %entry.display(), "a kept build fails its check; building the source");
            return Ok(None);
        }
        if let Ok(f) = std::fs::File::options().write(true).open(&entry) {
            let _ = f.set_modified(std::time::SystemTime::now());
        }
        Ok(Some(bytes))
    }

    /// Keep `bytes` as the component of build `key`, and only the
    /// [`KEPT_BUILDS`] most recently used. Best effort: one that cannot be
    /// kept is built again next time.
    pub(super) fn keep_build(&self, key: &str, bytes: &[u8]) {
        let Some(dir) = self.native_cache().map(kept_builds_dir) else {
            return;
        };
        let entry = dir.join(format!("{key}.wasm"));
        let kept = self
            .build_mac(key, bytes)
            .map_err(|e| e.to_string())
            .and_then(|mac| {
                std::fs::create_dir_all(&dir)
                    .and_then(|()| {
                        atomic_write(
                            &dir.join(format!("{key}.wasm.mac")),
                            mac.to_hex().as_bytes(),
                        )
                    })
                    .and_then(|()| atomic_write(&entry, bytes))
                    .map_err(|e| e.to_string())
            });
        if let Err(e) = kept {
            tracing::debug!(entry = %entry.display(), error = %e, "could not keep a build");
            return;
        }
        keep_newest(&dir, KEPT_BUILDS, &[".mac"]);
    }

    /// The MAC of a kept build: the build key and the bytes, under a key
    /// derived from the artifact key for this kind of entry only.
    fn build_mac(&self, key: &str, bytes: &[u8]) -> Result<blake3::Hash, StoreError> {
        let derived = self.key()?.derive("ecdysis kept build 1");
        let mut h = blake3::Hasher::new_keyed(&derived);
        h.update(key.as_bytes());
        h.update(&[0]);
        h.update(bytes);
        Ok(h.finalize())
    }
}

/// Keep only the `n` most recently used `.wasm` files of `dir` (by
/// modification time, which a reuse refreshes), with each one's companion
/// files (its name plus each of `companions`). Best effort.
pub(super) fn keep_newest(dir: &Path, n: usize, companions: &[&str]) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut builds: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "wasm"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    builds.sort_by_key(|b| std::cmp::Reverse(b.0));
    for (_, old) in builds.into_iter().skip(n) {
        for suffix in companions {
            let mut companion = old.clone().into_os_string();
            companion.push(suffix);
            let _ = std::fs::remove_file(companion);
        }
        let _ = std::fs::remove_file(&old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    const MEMBER: &str = "[package]\nname = \"m\"\n[dependencies]\nwit-bindgen.workspace = true\n";
    const ROOT: &str = "[workspace]\nmembers = [\"m\"]\n[profile.release]\nlto = true\n";

    #[test]
    fn a_path_key_is_seen_wherever_a_manifest_has_one() {
        for text in [
            "[dependencies]\nx = { path = \"../x\" }",
            "[dependencies]\nx = {path=\"../x\"}",
            "[lib]\npath = \"src/other.rs\"",
            "[patch.crates-io]\nx = { version = \"1\", path = \"x\" }",
        ] {
            assert!(manifest_names_a_path(text), "{text}");
        }
        for text in [
            MEMBER,
            ROOT,
            "[dependencies]\nxpath = \"1\"\n# path = \"x\"\n",
        ] {
            assert!(!manifest_names_a_path(text), "{text}");
        }
    }

    #[test]
    fn a_workspace_member_is_pinned_by_its_roots_lock_and_keyed_by_its_manifest() {
        let dir = ecdysis_sys::process::Scratch::new("kept-key").unwrap();
        let root = dir.path().join("ws");
        let member = root.join("m");
        write(&member.join("Cargo.toml"), MEMBER);
        write(&member.join("src/lib.rs"), "");
        write(&root.join("Cargo.toml"), ROOT);
        // No lock file anywhere: never kept.
        assert!(pinned_by(&member).is_none());
        write(&root.join("Cargo.lock"), "version = 4\n");
        assert!(matches!(pinned_by(&member), Some(Pinned::Workspace(r)) if r == root));
        let opts = BuildOptions::default();
        let key = || build_key(&member, "source", &opts).unwrap();
        let first = key().expect("keyed");
        // The root's profile is what the member builds with: another key.
        write(&root.join("Cargo.toml"), &ROOT.replace("true", "false"));
        let second = key().expect("keyed");
        assert_ne!(first, second);
        // So is its lock file, and the WIT package beside the root.
        write(&root.join("Cargo.lock"), "version = 4\n# other\n");
        let third = key().expect("keyed");
        assert_ne!(second, third);
        write(&dir.path().join("wit/world.wit"), "package a:b;");
        assert_ne!(third, key().expect("keyed"));
        // A member or a root naming a path reads another crate's source.
        write(
            &member.join("Cargo.toml"),
            &format!("{MEMBER}y = {{ path = \"../y\" }}\n"),
        );
        assert!(pinned_by(&member).is_none());
        write(&member.join("Cargo.toml"), MEMBER);
        write(
            &root.join("Cargo.toml"),
            &format!("{ROOT}[patch.crates-io]\nz = {{ path = \"z\" }}\n"),
        );
        assert!(pinned_by(&member).is_none());
        // A crate with its own lock file is pinned by it.
        write(&member.join("Cargo.lock"), "version = 4\n");
        assert!(matches!(pinned_by(&member), Some(Pinned::Own)));
    }

    #[test]
    fn only_the_newest_builds_and_their_companions_are_kept() {
        let dir = ecdysis_sys::process::Scratch::new("kept-builds").unwrap();
        let base = std::time::SystemTime::now() - std::time::Duration::from_secs(100);
        for i in 0..5u64 {
            let wasm = dir.path().join(format!("{i}.wasm"));
            std::fs::write(&wasm, b"w").unwrap();
            std::fs::write(dir.path().join(format!("{i}.wasm.mac")), b"m").unwrap();
            let f = std::fs::File::options().write(true).open(&wasm).unwrap();
            f.set_modified(base + std::time::Duration::from_secs(i * 10))
                .unwrap();
        }
        std::fs::write(dir.path().join("notes.txt"), b"other").unwrap();
        keep_newest(dir.path(), 2, &[".mac"]);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["3.wasm", "3.wasm.mac", "4.wasm", "4.wasm.mac", "notes.txt"]
        );
    }
}

//! Small filesystem helpers shared by the store, the runner and evolution.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Write `bytes` to `path` atomically: a reader sees the old file or the new
/// one, never a torn write, even if the process is killed mid-way. Writes a
/// uniquely named temporary file beside the target, fsyncs it, renames it,
/// and fsyncs the directory (without that, the rename itself can be lost
/// in a crash, leaving the old file).
pub fn atomic_write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_renamed(path, bytes, true)
}

/// [`atomic_write`] without the fsync, for cache entries that authenticate
/// their own contents when read: after a crash such an entry may be empty
/// or torn, which its reader treats as a miss. Skipping the fsync matters
/// when thousands of small entries are written at once.
pub fn atomic_write_unsynced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_renamed(path, bytes, false)
}

/// Open `path` for reading only if it is a regular file (symlinks
/// followed). A result file that is a directory, a pipe or a device is an
/// error of kind `InvalidInput` instead of a read that fails late or, for a
/// pipe nobody writes to, blocks forever.
pub fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a directory, pipe or device)",
        ));
    }
    std::fs::File::open(path)
}

/// The whole of a regular file ([`open_regular`]).
pub fn read_regular(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut open_regular(path)?, &mut bytes)?;
    Ok(bytes)
}

fn write_renamed(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(
        ".{name}.tmp.{}.{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        if sync {
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)?;
        if sync {
            sync_dir(path)?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Fsync the directory holding `path`, so a rename into it is durable.
fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}

/// What an entry of a crate's source tree is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link (never followed), with its target.
    Link(PathBuf),
}

/// One entry of a crate's source tree, by its path relative to the root
/// (`/`-separated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrateEntry {
    /// The path relative to the crate root, `/`-separated.
    pub rel: String,
    /// What it is.
    pub kind: EntryKind,
}

/// Whether a top-level entry of a crate is not part of its source: the
/// build output `target/` and hidden entries (`.git`, agent caches such as
/// `.aider*`) except `.cargo/`, which changes how the crate builds.
fn outside_source(top_level_name: &str) -> bool {
    top_level_name == "target" || (top_level_name.starts_with('.') && top_level_name != ".cargo")
}

/// Every entry of the crate at `root`, sorted by path, without following
/// symlinks: the one walker that copying, hashing and snapshotting a crate
/// share, so they always agree on what the crate is. Skips the top-level
/// entries that are not source (see `outside_source`) and Python's bytecode
/// caches (`__pycache__`, written by any import) at any depth; hidden
/// entries below the top level (`src/.x.rs`) are part of the crate.
pub fn walk_crate(root: &Path) -> Result<Vec<CrateEntry>, PathError> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<CrateEntry>) -> Result<(), PathError> {
        let entries = std::fs::read_dir(dir).map_err(|e| PathError::new("list", dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| PathError::new("list", dir, e))?;
            let name = entry.file_name();
            if (dir == root && outside_source(&name.to_string_lossy())) || name == "__pycache__" {
                continue;
            }
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            let meta =
                std::fs::symlink_metadata(&path).map_err(|e| PathError::new("stat", &path, e))?;
            if meta.file_type().is_symlink() {
                let target =
                    std::fs::read_link(&path).map_err(|e| PathError::new("read", &path, e))?;
                out.push(CrateEntry {
                    rel,
                    kind: EntryKind::Link(target),
                });
            } else if meta.is_dir() {
                out.push(CrateEntry {
                    rel,
                    kind: EntryKind::Dir,
                });
                walk(root, &path, out)?;
            } else {
                out.push(CrateEntry {
                    rel,
                    kind: EntryKind::File,
                });
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(root, root, &mut out)?;
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(out)
}

/// Copy the crate at `from` to `to` (entries per [`walk_crate`]; symlinks
/// are recreated as symlinks, never followed).
pub fn copy_crate(from: &Path, to: &Path) -> Result<(), PathError> {
    std::fs::create_dir_all(to).map_err(|e| PathError::new("create", to, e))?;
    for entry in walk_crate(from)? {
        let src = from.join(&entry.rel);
        let dst = to.join(&entry.rel);
        match &entry.kind {
            EntryKind::Dir => {
                std::fs::create_dir_all(&dst).map_err(|e| PathError::new("create", &dst, e))?
            }
            EntryKind::File => {
                std::fs::copy(&src, &dst).map_err(|e| PathError::new("copy", &src, e))?;
            }
            EntryKind::Link(target) => std::os::unix::fs::symlink(target, &dst)
                .map_err(|e| PathError::new("link", &dst, e))?,
        }
    }
    Ok(())
}

/// An I/O error with the path it concerns, for messages that name the input.
#[derive(Debug, thiserror::Error)]
#[error("{action} {path}: {source}")]
pub struct PathError {
    /// What was being done (`read`, `write`, `create`, ...), first word of the
    /// message.
    pub action: &'static str,
    /// The file or directory concerned.
    pub path: PathBuf,
    /// The underlying I/O error.
    #[source]
    pub source: std::io::Error,
}

impl PathError {
    /// `action` failed on `path` with `source`.
    pub fn new(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        PathError {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Seconds since the Unix epoch as an RFC 3339 UTC timestamp (no extra
/// dependency for one format).
pub fn rfc3339_utc(unix_secs: u64) -> String {
    let days = (unix_secs / 86_400) as i64;
    let secs = unix_secs % 86_400;
    let (y, m, d) = crate::date::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

/// Now, as an RFC 3339 UTC timestamp.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339_utc(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(1_796_000_000), "2026-11-30T00:53:20Z");
    }

    #[test]
    fn the_crate_walker_skips_only_top_level_non_source() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for f in [
            "Cargo.toml",
            "src/lib.rs",
            "src/.hidden.rs",
            ".cargo/config.toml",
            ".git/HEAD",
            "target/x.wasm",
            "src/target/kept.rs",
        ] {
            let p = root.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, f).unwrap();
        }
        std::os::unix::fs::symlink("/etc/hostname", root.join("src/link.rs")).unwrap();
        let files: Vec<String> = walk_crate(root)
            .unwrap()
            .into_iter()
            .filter(|e| e.kind != EntryKind::Dir)
            .map(|e| e.rel)
            .collect();
        assert_eq!(
            files,
            [
                ".cargo/config.toml",
                "Cargo.toml",
                "src/.hidden.rs",
                "src/lib.rs",
                "src/link.rs",
                "src/target/kept.rs"
            ]
        );
        let copy = dir.path().join("copy");
        copy_crate(root, &copy).unwrap();
        assert_eq!(
            std::fs::read_to_string(copy.join("src/.hidden.rs")).unwrap(),
            "src/.hidden.rs"
        );
        // The link is copied as a link, not as the file it points to.
        assert!(
            std::fs::symlink_metadata(copy.join("src/link.rs"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert!(!copy.join("target").exists() && !copy.join(".git").exists());
    }

    #[test]
    fn atomic_write_replaces_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/x.json");
        atomic_write(&p, b"first").unwrap();
        atomic_write(&p, b"second").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second");
        let leftovers: Vec<_> = std::fs::read_dir(p.parent().unwrap())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
            .collect();
        assert!(leftovers.is_empty());
    }

    #[test]
    fn only_a_regular_file_is_opened_and_a_pipe_never_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let subdir = dir.path().join("dir");
        std::fs::create_dir(&subdir).unwrap();
        let looped = dir.path().join("loop");
        std::os::unix::fs::symlink(&looped, &looped).unwrap();
        // On another thread: a check that let the pipe through would block
        // in the read, and the test would then fail on the timeout.
        let (tx, rx) = std::sync::mpsc::channel();
        let paths = [fifo, subdir, looped];
        let probe = paths.clone();
        std::thread::spawn(move || {
            for p in &probe {
                tx.send(read_regular(p).map_err(|e| e.kind())).unwrap();
            }
        });
        for p in &paths {
            let got = rx
                .recv_timeout(std::time::Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("reading {} blocked", p.display()));
            assert!(got.is_err(), "{} was read: {got:?}", p.display());
        }
        // The positive control: a regular file, also through a symlink.
        let file = dir.path().join("f.json");
        std::fs::write(&file, b"{}").unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_regular(&file).unwrap(), b"{}");
        assert_eq!(read_regular(&link).unwrap(), b"{}");
    }
}

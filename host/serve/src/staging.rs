//! Upload staging: the bytes of an upload under check, as a file the
//! checking worker process reads (`<state_dir>/uploads`).
//!
//! A staged file lives exactly as long as its [`Staged`] guard: it is
//! removed when the handler finishes, fails, or is dropped mid-check (a
//! client that hung up, a request that timed out). What a process killed
//! outright leaves behind is removed by [`sweep`] when a server starts.
//! File names start with the staging process's id, so a server sharing the
//! directory with another live one never sweeps that one's files.

use std::path::{Path, PathBuf};

/// A staged upload, removed when dropped.
#[derive(Debug)]
pub struct Staged {
    path: PathBuf,
}

impl Staged {
    /// Write `bytes` to a new file under `dir`.
    pub fn write(dir: &Path, bytes: &[u8]) -> std::io::Result<Staged> {
        let path = dir.join(format!(
            "{}-{}.wasm",
            std::process::id(),
            super::db::random_hex(12)
        ));
        // The guard exists before the first byte is written, so a failed
        // write leaves nothing either.
        let staged = Staged { path };
        std::fs::write(&staged.path, bytes)?;
        Ok(staged)
    }

    /// The staged file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Remove what dead servers left in `dir`: every entry not named after a
/// live process. Returns how many were removed.
pub fn sweep(dir: &Path) -> std::io::Result<usize> {
    let mut removed = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let owner = name
            .to_str()
            .and_then(|n| n.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok());
        if owner.is_some_and(alive) {
            continue;
        }
        let path = entry.path();
        let gone = if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match gone {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// Whether a process `pid` exists (this one included).
fn alive(pid: u32) -> bool {
    pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_guard_removes_its_file_and_the_sweep_spares_live_owners() {
        let dir = tempfile::tempdir().unwrap();
        let staged = Staged::write(dir.path(), b"\0asm").unwrap();
        let path = staged.path().to_path_buf();
        assert!(path.exists());
        drop(staged);
        assert!(!path.exists(), "the guard left its file");

        // A live server's file stays; a dead one's, and anything not named
        // after a process, goes.
        let live = Staged::write(dir.path(), b"live").unwrap();
        std::fs::write(dir.path().join("4294967295-dead.wasm"), b"x").unwrap();
        std::fs::write(dir.path().join("stray.wasm"), b"x").unwrap();
        std::fs::create_dir(dir.path().join("stray-dir")).unwrap();
        assert_eq!(sweep(dir.path()).unwrap(), 3);
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(left, vec![live.path().to_path_buf()]);
    }
}

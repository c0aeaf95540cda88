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

use super::confined::{Confined, ConfinedError};

/// A staged upload, removed when dropped.
#[derive(Debug)]
pub struct Staged {
    dir: Confined,
    name: String,
}

impl Staged {
    /// Write `bytes` to a new file in `dir`.
    pub fn write(dir: Confined, bytes: &[u8]) -> Result<Staged, ConfinedError> {
        let name = format!("{}-{}.wasm", std::process::id(), super::db::random_hex(12));
        // The guard exists before the first byte is written, so a failed
        // write leaves nothing either.
        let staged = Staged { dir, name };
        staged.dir.create(&staged.name, bytes)?;
        Ok(staged)
    }

    /// The staged file's path, for the checking worker process.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join(&self.name)
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = self.dir.remove(&self.name);
    }
}

/// Remove what dead servers left in `dir`: every entry not named after a
/// live process. Returns how many were removed.
pub fn sweep(dir: &Confined) -> std::io::Result<usize> {
    // Listed and removed through the directory's descriptor: a symlink
    // swapped in for it later is never followed.
    let root = dir.fd_path();
    let mut removed = 0;
    for entry in std::fs::read_dir(&root)? {
        let entry = entry?;
        let name = entry.file_name();
        let owner = name
            .to_str()
            .and_then(|n| n.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok());
        if owner.is_some_and(alive) {
            continue;
        }
        let path = root.join(&name);
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
        let uploads = || Confined::open(dir.path()).unwrap();
        let staged = Staged::write(uploads(), b"\0asm").unwrap();
        let path = staged.path();
        assert!(path.exists());
        drop(staged);
        assert!(!path.exists(), "the guard left its file");

        // A live server's file stays; a dead one's, and anything not named
        // after a process, goes.
        let live = Staged::write(uploads(), b"live").unwrap();
        std::fs::write(dir.path().join("4294967295-dead.wasm"), b"x").unwrap();
        std::fs::write(dir.path().join("stray.wasm"), b"x").unwrap();
        std::fs::create_dir(dir.path().join("stray-dir")).unwrap();
        assert_eq!(sweep(&uploads()).unwrap(), 3);
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(left, vec![live.path()]);
    }

    #[test]
    fn an_uploads_directory_that_is_a_symlink_is_neither_written_nor_swept() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("4294967295-dead.wasm"), b"keep").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("uploads")).unwrap();
        let state = Confined::open(dir.path()).unwrap();
        assert!(state.dir("uploads").is_err());
        assert!(outside.path().join("4294967295-dead.wasm").exists());
    }
}

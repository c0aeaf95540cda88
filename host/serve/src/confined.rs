//! The service's directories, which no name can leave.
//!
//! Everything the service writes under `state_dir` (staged uploads, result
//! folders) goes through a [`Confined`] directory: a descriptor, not a
//! path. Each name is a single component (no `/`, `.`, `..` or NUL), and
//! the kernel resolves every step beneath the directory and refuses every
//! symlink on the way (`openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS`), so neither a name nor a symlink planted in the
//! state directory reaches outside it: a planted symlink makes the write
//! fail instead.

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};

/// A name refused or a confined operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ConfinedError {
    /// Not a single name.
    #[error("`{0}` is not a single name (no `/`, `.`, `..` or NUL)")]
    BadName(String),
    /// The operation failed (a symlink in the way: "too many levels of
    /// symbolic links").
    #[error("{what} `{name}` in {dir}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The name.
        name: String,
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A directory opened once, whose entries are reached only beneath it.
#[derive(Debug)]
pub struct Confined {
    fd: OwnedFd,
    path: PathBuf,
}

impl Confined {
    /// Open `path`, creating it. The operator configured it, so it may be
    /// anywhere, through symlinks too; only what is reached from it is
    /// confined.
    pub fn open(path: &Path) -> Result<Confined, ConfinedError> {
        let io = |what, source| ConfinedError::Io {
            what,
            name: String::new(),
            dir: path.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(path).map_err(|e| io("create", e))?;
        let fd = rustix::fs::open(
            path,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io("open", e.into()))?;
        Ok(Confined {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Where the directory was when it was opened (for messages and for
    /// processes that need a path).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory as this process reaches it through its descriptor
    /// (`/proc/self/fd/N`): wherever it is now, never a path resolved anew.
    pub fn fd_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    fn io(
        &self,
        what: &'static str,
        name: &str,
        source: impl Into<std::io::Error>,
    ) -> ConfinedError {
        ConfinedError::Io {
            what,
            name: name.to_string(),
            dir: self.path.clone(),
            source: source.into(),
        }
    }

    fn beneath(&self, name: &str, flags: OFlags, mode: Mode) -> rustix::io::Result<OwnedFd> {
        rustix::fs::openat2(
            &self.fd,
            name,
            flags | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            mode,
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
    }

    /// The subdirectory `name`, created if missing.
    pub fn dir(&self, name: &str) -> Result<Confined, ConfinedError> {
        single(name)?;
        match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(self.io("create", name, e)),
        }
        let fd = self
            .beneath(name, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty())
            .map_err(|e| self.io("open", name, e))?;
        Ok(Confined {
            fd,
            path: self.path.join(name),
        })
    }

    /// Write `bytes` to the new file `name` (it must not exist).
    pub fn create(&self, name: &str, bytes: &[u8]) -> Result<(), ConfinedError> {
        single(name)?;
        let fd = self
            .beneath(
                name,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
                Mode::from_raw_mode(0o644),
            )
            .map_err(|e| self.io("create", name, e))?;
        std::fs::File::from(fd)
            .write_all(bytes)
            .map_err(|e| self.io("write", name, e))
    }

    /// Replace the file `name` by `bytes`, durably and whole: written to a
    /// new name and renamed over it (a symlink at `name` is replaced, not
    /// followed).
    pub fn replace(&self, name: &str, bytes: &[u8]) -> Result<(), ConfinedError> {
        single(name)?;
        let tmp = format!(".{name}.{}", super::db::random_hex(8));
        let written = (|| {
            let fd = self
                .beneath(
                    &tmp,
                    OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
                    Mode::from_raw_mode(0o644),
                )
                .map_err(|e| self.io("create", &tmp, e))?;
            let mut file = std::fs::File::from(fd);
            file.write_all(bytes)
                .and_then(|()| file.sync_all())
                .map_err(|e| self.io("write", &tmp, e))?;
            rustix::fs::renameat(&self.fd, tmp.as_str(), &self.fd, name)
                .map_err(|e| self.io("rename into", name, e))
        })();
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, tmp.as_str(), AtFlags::empty());
        }
        written
    }

    /// Remove the file `name`, if it is there.
    pub fn remove(&self, name: &str) -> Result<(), ConfinedError> {
        single(name)?;
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(self.io("remove", name, e)),
        }
    }
}

/// Refuse anything but one plain name.
fn single(name: &str) -> Result<(), ConfinedError> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(ConfinedError::BadName(name.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_are_paths_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let c = Confined::open(dir.path()).unwrap();
        for name in ["", ".", "..", "../x", "a/b", "/etc/passwd", "x\0y"] {
            assert!(
                matches!(c.replace(name, b"x"), Err(ConfinedError::BadName(_))),
                "{name:?}"
            );
            assert!(
                matches!(c.dir(name), Err(ConfinedError::BadName(_))),
                "{name:?}"
            );
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_planted_symlink_is_refused_and_what_it_points_to_is_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("f"), b"keep").unwrap();
        let state = dir.path().join("state");
        let c = Confined::open(&state).unwrap();
        std::os::unix::fs::symlink(outside.path(), state.join("linked")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("f"), state.join("f")).unwrap();
        assert!(c.dir("linked").is_err());
        assert!(c.create("f", b"x").is_err());
        // Replacing swaps the link itself for a file.
        c.replace("f", b"new").unwrap();
        assert_eq!(std::fs::read(outside.path().join("f")).unwrap(), b"keep");
        assert_eq!(std::fs::read(state.join("f")).unwrap(), b"new");
        let sub = c.dir("real").unwrap();
        sub.replace("g", b"1").unwrap();
        sub.replace("g", b"2").unwrap();
        assert_eq!(std::fs::read(state.join("real/g")).unwrap(), b"2");
        assert_eq!(std::fs::read_dir(state.join("real")).unwrap().count(), 1);
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
    }
}

//! Copies of a harness source crate: the incumbent's source kept per
//! candidate, and the staging copy a coder edits.

use std::path::Path;

use crate::fsutil::PathError;

/// Copy a crate's source tree (skipping `target/` and hidden entries).
pub fn copy_crate(from: &Path, to: &Path) -> Result<(), PathError> {
    std::fs::create_dir_all(to).map_err(|e| PathError::new("create", to, e))?;
    let entries = std::fs::read_dir(from).map_err(|e| PathError::new("list", from, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| PathError::new("list", from, e))?;
        let name = entry.file_name();
        let name_s = name.to_string_lossy();
        if name_s.starts_with('.') || name_s == "target" {
            continue;
        }
        let src = entry.path();
        let dst = to.join(&name);
        if src.is_dir() {
            copy_crate(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst).map_err(|e| PathError::new("copy", &src, e))?;
        }
    }
    Ok(())
}

/// Replace `to` with a fresh copy of `from`.
pub fn fresh_copy(from: &Path, to: &Path) -> Result<(), PathError> {
    if to.exists() {
        std::fs::remove_dir_all(to).map_err(|e| PathError::new("remove", to, e))?;
    }
    copy_crate(from, to)
}

//! Copies of a harness source crate: the incumbent's source kept per
//! candidate, and the staging copy a coder edits.

use std::path::Path;

use ecdysis_sys::fsutil::PathError;

pub use ecdysis_sys::fsutil::copy_crate;

/// Replace `to` with a fresh copy of `from`.
pub fn fresh_copy(from: &Path, to: &Path) -> Result<(), PathError> {
    if to.exists() {
        std::fs::remove_dir_all(to).map_err(|e| PathError::new("remove", to, e))?;
    }
    copy_crate(from, to)
}

//! Shared helpers for the end-to-end tests: build guests once per test
//! process and hand out their bytes.

#![allow(dead_code)]

use std::path::PathBuf;

pub use ecdysis_testkit::measure::{Measured, ran_bounded_in_child, run_measured};
pub use ecdysis_testkit::{guest, repo_root, shared_store};

/// The path of the `ecdysis-host` binary built for these tests.
pub fn host_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ecdysis-host"))
}

/// `ecdysis-host train` on eight retail training tasks with `sim:clumsy`,
/// starting from the template's blank rule tables, without the held-out
/// split; `extra` adds flags. The store lives in `dir`; candidates share one
/// cargo target across test runs so they rebuild only the harness.
pub fn train_command(dir: &std::path::Path, extra: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(host_bin());
    c.current_dir(repo_root())
        .args(["--quiet", "--store"])
        .arg(dir.join("store"))
        .args([
            "train",
            "--start-blank",
            "--tasks",
            "0,1,2,3,4,6,7,8",
            "--agent-model",
            "sim:clumsy",
            "--test-split",
            "none",
            "--cargo-target-dir",
        ])
        .arg(repo_root().join("target/evolve-candidates"))
        .args(extra);
    c
}

/// A copy of harness-template at `<root>/<name>/harness` beside a copy of
/// `wit/`, as training stages it; returns the crate directory.
pub fn stage_template(root: &std::path::Path, name: &str) -> PathBuf {
    use ecdysis_sys::fsutil::copy_crate;
    let crate_dir = root.join(name).join("harness");
    copy_crate(&repo_root().join("harness-template"), &crate_dir).unwrap();
    copy_crate(&repo_root().join("wit"), &root.join(name).join("wit")).unwrap();
    crate_dir
}

/// Whether DBBench's MariaDB can be started here; without it a test is
/// skipped (it says so), unless `$CI` is set, where that is a failure.
pub fn dbbench_available() -> bool {
    if ecdysis_dbbench::server::server_available() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but mariadbd is not installed"
    );
    eprintln!("SKIPPED: mariadbd is not installed (apt-get install mariadb-server)");
    false
}

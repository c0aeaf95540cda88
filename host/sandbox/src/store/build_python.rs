//! Builds of harnesses written in Python: a directory whose `hooks.py`
//! implements the `hooks` interface (the module `componentize-py` looks for),
//! with any other modules and data beside it, and no `Cargo.toml`.
//!
//! `componentize-py` runs the module's top-level code while it snapshots the
//! interpreter, so an untrusted build is source running on the host: it goes
//! through the same [`Trust`] policy as a Rust build (scan, then a
//! bubblewrap jail with no network that sees the source read-only, an output
//! directory, the WIT package and the tool's own installation read-only).
//! The WIT package is the one this host was built with, written to a scratch
//! directory, so a harness directory needs no `../wit` beside it.

use std::path::{Path, PathBuf};
use std::process::Command;

use ecdysis_sys::fsutil::PathError;
use ecdysis_sys::jail::{Jail, JailSpec, ProcessLimiter, apply_limits, find_program};
use ecdysis_sys::process::Scratch;

use super::StoreError;
use super::build::{
    BuildOptions, CargoBuild, TARGET_DIR_ENV, Trust, refuse_unscanned, run_contained,
    source_tree_hash,
};

/// The module `componentize-py` is pointed at: it must define the exported
/// `Episode` class of the `hooks` interface.
pub const PYTHON_ENTRY: &str = "hooks.py";

/// The environment variable naming the `componentize-py` to run (else the
/// one on `PATH`).
pub const COMPONENTIZE_PY_ENV: &str = "ECDYSIS_COMPONENTIZE_PY";

/// Least address-space limit of an untrusted Python build's processes:
/// componentize-py runs its interpreter snapshot in wasmtime, which reserves
/// several GiB of address space per linear memory (guard regions) that never
/// become memory, so a limit sized for rustc would stop every build.
pub const PYTHON_BUILD_ADDRESS_SPACE: u64 = 32 << 30;

/// The `ecdysis:harness` WIT package this host implements.
pub const HARNESS_WIT: &str = include_str!("../../../../wit/harness.wit");

/// Whether `dir` holds a Python harness rather than a Rust crate.
pub fn is_python_harness(dir: &Path) -> bool {
    !dir.join("Cargo.toml").exists() && dir.join(PYTHON_ENTRY).is_file()
}

/// An installed `componentize-py`: the program and what it needs to run.
#[derive(Debug, Clone)]
pub struct PythonTool {
    /// The `componentize-py` program (absolute).
    pub exe: PathBuf,
    /// Directories a jailed build must see read-only: the program's
    /// environment (a venv's root) and the Python installation it was made
    /// from.
    pub read_only: Vec<PathBuf>,
}

impl PythonTool {
    /// `named`, else the `componentize-py` of [`COMPONENTIZE_PY_ENV`], else
    /// the one on `PATH`.
    pub fn find(named: Option<&Path>) -> Result<PythonTool, StoreError> {
        let named = named
            .map(|p| p.as_os_str().to_owned())
            .or_else(|| std::env::var_os(COMPONENTIZE_PY_ENV))
            .unwrap_or_else(|| "componentize-py".into());
        let exe = find_program(&named).ok_or_else(|| StoreError::ToolMissing {
            tool: "componentize-py",
            hint: format!(
                "a Python harness is built with componentize-py: `pip install componentize-py==0.25.1` \
                 and put it on PATH or name it in {COMPONENTIZE_PY_ENV} (looked for `{}`)",
                named.to_string_lossy()
            ),
        })?;
        let exe = std::fs::canonicalize(&exe).map_err(|e| PathError::new("resolve", &exe, e))?;
        let mut read_only = Vec::new();
        // `<env>/bin/componentize-py`: the environment is two levels up.
        if let Some(env) = exe.parent().and_then(Path::parent) {
            read_only.push(env.to_path_buf());
            if let Ok(cfg) = std::fs::read_to_string(env.join("pyvenv.cfg")) {
                read_only.extend(venv_base(&cfg));
            }
        }
        Ok(PythonTool { exe, read_only })
    }
}

/// The Python installation a venv was made from (`home = <prefix>/bin` in
/// its `pyvenv.cfg`), resolved through links.
fn venv_base(cfg: &str) -> Option<PathBuf> {
    let home = cfg.lines().find_map(|l| {
        let (key, value) = l.split_once('=')?;
        (key.trim() == "home").then(|| PathBuf::from(value.trim()))
    })?;
    let home = std::fs::canonicalize(&home).unwrap_or(home);
    home.parent().map(Path::to_path_buf)
}

/// How many components of distinct sources a target directory keeps for
/// [`python_build`] to reuse (each holds a whole CPython).
pub const KEPT_PYTHON_BUILDS: usize = 8;

/// Where [`python_build`] keeps what it built, by source: beside the
/// output directory an untrusted build may write, never inside it.
pub fn python_builds_dir(target: &Path) -> PathBuf {
    target.join("python-builds")
}

/// What a Python build's output depends on: the harness directory's source
/// (as [`source_tree_hash`] reads it), the WIT package, and the tool (its
/// program's path, size and modification time: an upgrade rewrites it).
fn build_key(dir: &Path, tool: &PythonTool) -> Result<String, PathError> {
    let meta = std::fs::metadata(&tool.exe).map_err(|e| PathError::new("stat", &tool.exe, e))?;
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"ecdysis python build 1\0");
    hasher.update(source_tree_hash(dir)?.as_bytes());
    hasher.update(HARNESS_WIT.as_bytes());
    hasher.update(tool.exe.as_os_str().as_encoded_bytes());
    hasher.update(&meta.len().to_le_bytes());
    hasher.update(&modified.to_le_bytes());
    Ok(hasher.finalize().to_hex().to_string())
}

/// Keep `built` as the build of `key`, and only the
/// [`KEPT_PYTHON_BUILDS`] most recently used builds. Best effort: a build
/// that cannot be kept is built again next time.
fn keep_build(kept: &Path, key: &str, built: &Path) {
    let entry = kept.join(format!("{key}.wasm"));
    let keep = std::fs::create_dir_all(kept)
        .and_then(|()| std::fs::read(built))
        .and_then(|bytes| ecdysis_sys::fsutil::atomic_write(&entry, &bytes));
    if let Err(e) = keep {
        tracing::debug!(entry = %entry.display(), error = %e, "could not keep a Python build");
        return;
    }
    super::kept_builds::keep_newest(kept, KEPT_PYTHON_BUILDS, &[]);
}

/// The kept build of `key`, copied to `out` (and marked used), if there is
/// one.
fn reuse_build(kept: &Path, key: &str, out: &Path) -> bool {
    let entry = kept.join(format!("{key}.wasm"));
    if std::fs::copy(&entry, out).is_err() {
        return false;
    }
    if let Ok(f) = std::fs::File::options().write(true).open(&entry) {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
    true
}

/// Build the Python harness at `dir` into `<target>/python/harness.wasm`
/// (blocking). Like [`super::build::cargo_build`], a failed build is a
/// [`CargoBuild`] with `ok: false` and the tool's errors. The target is
/// `opts.target_dir`, else `$ECDYSIS_CARGO_TARGET_DIR`, else `dir/target`.
///
/// componentize-py's output differs from run to run for the same source,
/// so a named target directory keeps what it built by source
/// ([`python_builds_dir`]): building the same source again (the starting
/// harness in every run, a coder's check build and the round's build of
/// the same edit) gives the same component at once, as cargo's freshness
/// check does for a Rust harness. The scan still runs first. The
/// directory is trusted like the rest of the target: as much as the
/// candidates built into it.
pub fn python_build(dir: &Path, opts: &BuildOptions) -> Result<CargoBuild, StoreError> {
    let dir = &std::fs::canonicalize(dir).map_err(|e| PathError::new("resolve", dir, e))?;
    let tool = PythonTool::find(opts.python_tool.as_deref())?;
    let named = opts.target_dir.clone().or_else(|| {
        std::env::var_os(TARGET_DIR_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    });
    let target = match &named {
        Some(t) => std::path::absolute(t).map_err(|e| PathError::new("resolve", t, e))?,
        None => dir.join("target"),
    };
    let out_dir = target.join("python");
    std::fs::create_dir_all(&out_dir).map_err(|e| PathError::new("create", &out_dir, e))?;
    // Builds sharing the target write the same output: one at a time, until
    // the caller has read it (the lock goes with the build). Outside the
    // output directory, which a jailed build may write.
    let lock_path = target.join(".ecdysis-python-build.lock");
    let lock =
        std::fs::File::create(&lock_path).map_err(|e| PathError::new("create", &lock_path, e))?;
    lock.lock()
        .map_err(|e| PathError::new("lock", &lock_path, e))?;
    let out = out_dir.join("harness.wasm");
    let _ = std::fs::remove_file(&out);
    if let Trust::Untrusted {
        containment,
        allowed,
    } = &opts.trust
    {
        refuse_unscanned(dir, containment, allowed)?;
    }
    // Not in a target inside the source, which whoever edits the source
    // may write.
    let kept = (!target.starts_with(dir)).then(|| python_builds_dir(&target));
    let key = match &kept {
        Some(_) => Some(build_key(dir, &tool)?),
        None => None,
    };
    if let (Some(kept), Some(key)) = (&kept, &key)
        && reuse_build(kept, key, &out)
    {
        return Ok(CargoBuild {
            ok: true,
            wasm: Some(out),
            fresh: true,
            errors: String::new(),
            seconds: 0.0,
            jailed: false,
            limit: None,
            target_lock: Some(std::sync::Arc::new(lock)),
        });
    }
    let wit = Scratch::new("harness-wit")?;
    let wit_file = wit.path().join("harness.wit");
    std::fs::write(&wit_file, HARNESS_WIT).map_err(|e| PathError::new("write", &wit_file, e))?;
    let args: Vec<std::ffi::OsString> = vec![
        "-d".into(),
        wit.path().into(),
        "-w".into(),
        "harness".into(),
        "componentize".into(),
        "hooks".into(),
        "-p".into(),
        dir.into(),
        "-o".into(),
        out.clone().into(),
    ];
    let mut jailed = false;
    let mut _home = None;
    let (cmd, limits) = match &opts.trust {
        Trust::Own => {
            let mut cmd = Command::new(&tool.exe);
            cmd.args(&args).current_dir(dir);
            (cmd, None)
        }
        Trust::Untrusted { containment, .. } => {
            let mut limits = containment.limits;
            limits.memory = limits.memory.max(PYTHON_BUILD_ADDRESS_SPACE);
            let home = Scratch::new("build-home")?;
            let env = vec![
                ("PATH".to_string(), "/usr/bin:/bin".into()),
                ("HOME".to_string(), home.path().as_os_str().to_owned()),
            ];
            let (cmd, guard) = match Jail::get() {
                Ok(jail) => {
                    jailed = true;
                    let mut read_only = tool.read_only.clone();
                    read_only.push(dir.clone());
                    read_only.push(wit.path().to_path_buf());
                    let spec = JailSpec {
                        read_write: vec![out_dir.clone(), home.path().to_path_buf()],
                        read_only,
                        network: false,
                        env,
                        cwd: dir.clone(),
                        limits,
                        ..JailSpec::default()
                    };
                    let (mut cmd, guard) =
                        jail.command(&spec, tool.exe.as_os_str())
                            .map_err(|reason| StoreError::NoJail {
                                crate_dir: dir.clone(),
                                reason,
                            })?;
                    cmd.args(&args);
                    (cmd, guard)
                }
                Err(reason) if containment.allow_unjailed => {
                    tracing::warn!(dir = %dir.display(), %reason,
                        "building untrusted Python WITHOUT a jail (allowed by the operator)");
                    let mut cmd = Command::new(&tool.exe);
                    cmd.args(&args).current_dir(dir).env_clear().envs(env);
                    let limiter = ProcessLimiter::probe().unwrap_or(ProcessLimiter::Rlimit);
                    let guard = apply_limits(&mut cmd, &limits, &limiter).map_err(|reason| {
                        StoreError::NoJail {
                            crate_dir: dir.clone(),
                            reason,
                        }
                    })?;
                    (cmd, guard)
                }
                Err(reason) => {
                    return Err(StoreError::NoJail {
                        crate_dir: dir.clone(),
                        reason,
                    });
                }
            };
            _home = Some(home);
            (cmd, Some((limits, guard)))
        }
    };
    let (run, hit) = run_contained(cmd, opts.timeout, limits.as_ref())?;
    let ok = run.success() && out.is_file();
    if let (true, Some(kept), Some(key)) = (ok, &kept, &key) {
        keep_build(kept, key, &out);
    }
    let mut errors = String::new();
    if !ok {
        errors = python_errors(&run.stdout, &run.stderr);
        if run.timed_out {
            errors.push_str(&format!(
                "\n(the build was killed after {} s)",
                opts.timeout.as_secs()
            ));
        }
        if let Some(hit) = &hit {
            errors.push_str(&format!("\n(a build process hit {hit})"));
        }
    }
    Ok(CargoBuild {
        ok,
        wasm: ok.then_some(out),
        fresh: false,
        errors,
        seconds: run.elapsed.as_secs_f64(),
        jailed,
        limit: hit,
        target_lock: Some(std::sync::Arc::new(lock)),
    })
}

/// What a failed `componentize-py` said: the Python traceback's last lines
/// (the error itself), without the Rust backtrace it prints after them.
fn python_errors(stdout: &str, stderr: &str) -> String {
    let text = format!("{stdout}\n{stderr}");
    let kept: Vec<&str> = text
        .lines()
        .take_while(|l| !l.starts_with("Stack backtrace:"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    let tail = kept.len().saturating_sub(40);
    kept[tail..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_builds_are_the_most_recently_used_and_a_reused_one_is_marked() {
        let dir = tempfile::tempdir().unwrap();
        let kept = dir.path().join("kept");
        std::fs::create_dir_all(&kept).unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for i in 0..KEPT_PYTHON_BUILDS + 2 {
            let path = kept.join(format!("k{i}.wasm"));
            std::fs::write(&path, [i as u8]).unwrap();
            let f = std::fs::File::options().write(true).open(&path).unwrap();
            f.set_modified(old + std::time::Duration::from_secs(i as u64))
                .unwrap();
        }
        // Reusing the oldest makes it the most recent.
        let out = dir.path().join("out.wasm");
        assert!(reuse_build(&kept, "k0", &out));
        assert_eq!(std::fs::read(&out).unwrap(), [0]);
        assert!(!reuse_build(&kept, "missing", &out));
        let built = dir.path().join("built.wasm");
        std::fs::write(&built, b"new").unwrap();
        keep_build(&kept, "new", &built);
        let mut left: Vec<String> = std::fs::read_dir(&kept)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left.len(), KEPT_PYTHON_BUILDS);
        assert_eq!(std::fs::read(kept.join("new.wasm")).unwrap(), b"new");
        // The three oldest went (k1, k2, k3), the reused k0 stayed.
        for gone in ["k1.wasm", "k2.wasm", "k3.wasm"] {
            assert!(!left.contains(&gone.to_string()), "{gone} kept: {left:?}");
        }
        assert!(left.contains(&"k0.wasm".to_string()), "{left:?}");
    }

    #[test]
    fn a_python_harness_is_a_hooks_module_without_a_cargo_manifest() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_python_harness(dir.path()));
        std::fs::write(dir.path().join(PYTHON_ENTRY), "").unwrap();
        assert!(is_python_harness(dir.path()));
        std::fs::write(dir.path().join("Cargo.toml"), "").unwrap();
        assert!(!is_python_harness(dir.path()));
    }

    #[test]
    fn the_venv_base_is_the_parent_of_its_home() {
        assert_eq!(
            venv_base("home = /opt/py/bin\ninclude-system-site-packages = false\n"),
            Some(PathBuf::from("/opt/py"))
        );
        assert_eq!(venv_base("version = 3.11\n"), None);
    }

    #[test]
    fn errors_keep_the_traceback_and_drop_the_rust_backtrace() {
        let e = python_errors(
            "",
            "Traceback (most recent call last):\nNameError: name 'x' is not defined\n\nStack backtrace:\n  0: foo\n",
        );
        assert!(e.ends_with("NameError: name 'x' is not defined"), "{e}");
        assert!(!e.contains("foo"));
    }

    #[test]
    fn the_embedded_wit_is_the_harness_package() {
        assert!(HARNESS_WIT.contains("package ecdysis:harness@0.1.0;"));
    }
}

//! Guest components for tests: built once per test process (the store's
//! crate lock serialises builds across processes) into a store in a
//! temporary directory.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use ecdysis_sandbox::sandbox::{LoadedHarness, Sandbox};
use ecdysis_sandbox::store::{BuildOptions, ComponentStore, ManifestFacts, NATIVE_CACHE_ENV};

/// The repository root (two levels above each crate under `host/`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the testkit crate sits at host/testkit")
        .to_path_buf()
}

/// A store shared by the tests of one process (a temp dir). Its native
/// code lives in [`NATIVE_CACHE_ENV`]'s directory when that is set (under
/// the machine's artifact key, as the host processes naming it keep
/// theirs), else in the store, under a key of its own.
pub fn shared_store() -> &'static ComponentStore {
    static STORE: OnceLock<(tempfile::TempDir, ComponentStore)> = OnceLock::new();
    let (_, store) = STORE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = ComponentStore::open(dir.path().join("store"));
        let store = match std::env::var_os(NATIVE_CACHE_ENV).filter(|v| !v.is_empty()) {
            Some(native) => store.with_native_cache(native),
            None => store.with_key_file(dir.path().join("artifact.key")),
        };
        (dir, store)
    });
    store
}

/// Load `bytes` into `sandbox` through the [`shared_store`], so their native
/// code comes from its caches: a component compiled before is read back,
/// and a new one compiles only the functions no earlier one had (most of a
/// CPython-based harness's functions are every other one's).
pub fn load(sandbox: &Sandbox, bytes: &[u8]) -> LoadedHarness {
    let store = shared_store();
    let origin = "a test's component";
    let hash = store
        .put(
            bytes,
            ManifestFacts {
                origin: origin.into(),
                ..ManifestFacts::default()
            },
        )
        .unwrap_or_else(|e| panic!("storing {origin}: {e}"))
        .hash;
    let (loaded, _) = store
        .load(sandbox, &hash)
        .unwrap_or_else(|e| panic!("loading {}: {e}", hash.short()));
    loaded
}

/// Build a guest crate (relative to the repo root) with an optional feature
/// and return its component bytes. Each (crate, feature) builds once per
/// process.
pub fn guest(crate_rel: &str, feature: Option<&str>) -> Vec<u8> {
    type Built = HashMap<(String, Option<String>), Vec<u8>>;
    static CACHE: OnceLock<Mutex<Built>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (crate_rel.to_string(), feature.map(str::to_string));
    let mut map = cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(bytes) = map.get(&key) {
        return bytes.clone();
    }
    let store = shared_store();
    let opts = BuildOptions {
        features: feature.map(|f| vec![f.to_string()]).unwrap_or_default(),
        quiet: true,
        python_tool: python_tool().ok(),
        ..BuildOptions::default()
    };
    let out = store
        .build(&repo_root().join(crate_rel), &opts)
        .unwrap_or_else(|e| panic!("building {crate_rel} {feature:?}: {e}"));
    let bytes = store.read_component(&out.manifest.hash).expect("stored");
    map.insert(key, bytes.clone());
    bytes
}

/// Where `.ci/run` (and `scripts/python-tools.sh`) install componentize-py
/// and pytest, relative to the repository root.
pub const PYTHON_TOOLS: &str = ".ecdysis/python-tools";

/// No componentize-py: neither the repository's (the path looked at) nor
/// one on `PATH`.
#[derive(Debug, thiserror::Error)]
#[error(
    "componentize-py is neither in {} nor on PATH (install it with scripts/python-tools.sh)",
    .looked.display()
)]
pub struct NoPythonTool {
    /// The repository's componentize-py, which is not there.
    pub looked: PathBuf,
}

/// The componentize-py that builds the Python guests: the repository's
/// [`PYTHON_TOOLS`] one, else one on `PATH`; the error says why there is
/// none. Tests of Python guests skip with that reason, except under CI
/// (`CI` set), where a missing tool fails them.
pub fn python_tool() -> Result<PathBuf, NoPythonTool> {
    let local = repo_root().join(PYTHON_TOOLS).join("bin/componentize-py");
    if local.is_file() {
        return Ok(local);
    }
    ecdysis_sys::jail::find_program(std::ffi::OsStr::new("componentize-py"))
        .ok_or(NoPythonTool { looked: local })
}

/// Whether a test of Python guests can run; prints why not, and panics
/// instead under CI.
pub fn python_guests_available() -> bool {
    match python_tool() {
        Ok(_) => true,
        Err(why) if std::env::var_os("CI").is_some() => panic!("required under CI: {why}"),
        Err(why) => {
            eprintln!("skipped: {why}");
            false
        }
    }
}

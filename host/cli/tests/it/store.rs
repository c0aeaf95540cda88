//! The content-addressed store: stable hashes, no rebuilds, verified
//! precompiled artifacts, clear errors.

use crate::support;

use ecdysis_sandbox::sandbox::{Limits, Sandbox};
use ecdysis_sandbox::store::{BuildOptions, ComponentStore, LoadSource, ManifestFacts, StoreError};

/// A store in a temp dir, its artifact key beside it (outside the store).
fn temp_store() -> (tempfile::TempDir, ComponentStore) {
    let dir = tempfile::tempdir().unwrap();
    let store =
        ComponentStore::open(dir.path().join("store")).with_key_file(dir.path().join("key"));
    (dir, store)
}

/// The precompiled artifact and its MAC of `hash` in `store`.
fn artifact_files(store: &ComponentStore, hash: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = store.root().join("precompiled");
    let cwasm = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.extension().is_some_and(|x| x == "cwasm")
                && p.file_name().unwrap().to_string_lossy().starts_with(hash)
        })
        .expect("artifact written");
    let mac = cwasm.with_extension("cwasm.mac");
    (cwasm, mac)
}

fn quiet() -> BuildOptions {
    BuildOptions {
        quiet: true,
        ..BuildOptions::default()
    }
}

#[test]
fn building_twice_gives_the_same_hash_without_rebuilding() {
    let (_d, store) = temp_store();
    let crate_dir = support::repo_root().join("guests/direct");
    let first = store.build(&crate_dir, &quiet()).unwrap();
    // Another crate built in place in between (as other tests do beside
    // this one into the shared target of ECDYSIS_CARGO_TARGET_DIR) owns
    // other artifact paths and leaves this one fresh.
    let other = store
        .build(&support::repo_root().join("guests/read-only"), &quiet())
        .unwrap();
    assert_ne!(other.manifest.hash, first.manifest.hash);
    let second = store.build(&crate_dir, &quiet()).unwrap();
    assert_eq!(first.manifest.hash, second.manifest.hash);
    assert!(
        second.cargo_fresh,
        "cargo must find the second build up to date"
    );
    // First write wins: the manifest is not rewritten.
    assert_eq!(first.manifest.built_at, second.manifest.built_at);
    let m = &second.manifest;
    assert_eq!(m.world, ecdysis_sandbox::sandbox::WORLD_VERSION);
    assert!(m.toolchain.as_deref().unwrap_or("").starts_with("rustc "));
    assert_eq!(m.source_tree_hash.as_ref().map(String::len), Some(64));
    let bytes = store.read_component(&m.hash).unwrap();
    assert_eq!(bytes.len() as u64, m.size);
    let mut both = vec![m.hash.clone(), other.manifest.hash.clone()];
    both.sort();
    assert_eq!(store.list().unwrap(), both);
}

#[test]
fn features_and_parents_are_recorded() {
    let (_d, store) = temp_store();
    let crate_dir = support::repo_root().join("guests/hostile");
    let plain = store.build(&crate_dir, &quiet()).unwrap().manifest;
    let opts = BuildOptions {
        features: vec!["panic".into()],
        parent: Some(plain.hash.clone()),
        quiet: true,
        ..BuildOptions::default()
    };
    let child = store.build(&crate_dir, &opts).unwrap().manifest;
    assert_ne!(plain.hash, child.hash);
    assert_eq!(child.parent.as_ref(), Some(&plain.hash));
    assert_eq!(child.features, vec!["panic".to_string()]);
}

#[test]
fn a_known_hash_loads_without_compiling_and_corruption_is_caught() {
    let (dir, store) = temp_store();
    let bytes = support::guest("guests/direct", None);
    let m = store
        .put(
            &bytes,
            ManifestFacts {
                origin: "test".into(),
                ..Default::default()
            },
        )
        .unwrap();
    let sandbox = Sandbox::new(Limits::default()).unwrap();
    let (_, first) = store.load(&sandbox, &m.hash).unwrap();
    assert_eq!(first, LoadSource::Compiled);
    let (_, second) = store.load(&sandbox, &m.hash).unwrap();
    assert_eq!(second, LoadSource::Precompiled);

    // Flip bytes in the middle of the precompiled artifact.
    let pre_dir = dir.path().join("store/precompiled");
    let cwasm = std::fs::read_dir(&pre_dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .expect("artifact written");
    let mut native = std::fs::read(&cwasm).unwrap();
    let mid = native.len() / 2;
    for b in &mut native[mid..mid + 64] {
        *b ^= 0xA5;
    }
    std::fs::write(&cwasm, &native).unwrap();
    let (harness, third) = store.load(&sandbox, &m.hash).unwrap();
    assert_eq!(third, LoadSource::RecompiledCorrupt);
    assert!(ecdysis_sandbox::doctor::check(&harness).passed());
    let (_, fourth) = store.load(&sandbox, &m.hash).unwrap();
    assert_eq!(
        fourth,
        LoadSource::Precompiled,
        "the artifact was rewritten"
    );

    // A tampered component is refused, not run.
    let path = store.component_path(&m.hash);
    let mut wasm = std::fs::read(&path).unwrap();
    let last = wasm.len() - 1;
    wasm[last] ^= 1;
    std::fs::write(&path, &wasm).unwrap();
    std::fs::remove_dir_all(&pre_dir).unwrap();
    assert!(matches!(
        store.load(&sandbox, &m.hash),
        Err(StoreError::Corrupt { .. })
    ));
}

#[test]
fn hashes_resolve_by_unique_prefix_and_bad_specs_are_named() {
    let (_d, store) = temp_store();
    let m = store
        .put(
            &support::guest("guests/direct", None),
            ManifestFacts {
                origin: "test".into(),
                ..Default::default()
            },
        )
        .unwrap();
    let h = m.hash.as_str();
    assert_eq!(store.resolve(&h[..12]).unwrap().hash, m.hash);
    // Fewer than 12 digits are a guess outside interactive use...
    match store.resolve(&h[..8]) {
        Err(StoreError::PrefixTooShort { prefix, min }) => {
            assert_eq!((prefix.as_str(), min), (&h[..8], 12))
        }
        other => panic!("expected PrefixTooShort, got {other:?}"),
    }
    // ...and 6 are enough at a terminal.
    let interactive = store
        .clone()
        .with_min_prefix(ecdysis_sandbox::store::MIN_PREFIX_INTERACTIVE);
    assert_eq!(interactive.resolve(&h[..6]).unwrap().hash, m.hash);
    assert!(matches!(
        interactive.resolve(&h[..5]),
        Err(StoreError::PrefixTooShort { min: 6, .. })
    ));
    // A directory is not a crate without its Cargo.toml.
    let dir = _d.path().join("not-a-crate");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    match store.obtain(dir.to_str().unwrap(), true) {
        Err(StoreError::NotACrate { dir: named }) => assert_eq!(named, dir),
        other => panic!("expected NotACrate, got {other:?}"),
    }
    assert_eq!(store.resolve(m.hash.as_str()).unwrap().hash, m.hash);
    let err = store.resolve("no-such-thing.wasm").unwrap_err();
    assert!(err.to_string().contains("no-such-thing.wasm"), "{err}");
    let err = store
        .put(
            b"\0asm\x01\0\0\0",
            ManifestFacts {
                origin: "core.wasm".into(),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(
        matches!(err, StoreError::NotAComponent(ref o) if o == "core.wasm"),
        "{err}"
    );
}

#[test]
fn a_broken_crate_reports_the_compiler_error() {
    let (dir, store) = temp_store();
    let src = support::repo_root().join("guests/direct");
    let staging = dir.path().join("broken");
    std::fs::create_dir_all(staging.join("src")).unwrap();
    let manifest = std::fs::read_to_string(src.join("Cargo.toml"))
        .unwrap()
        .replace("wit-bindgen.workspace = true", "wit-bindgen = \"0.63\"")
        .replacen("name = \"direct\"", "name = \"broken\"", 1);
    // The guests' release profile and lock file: the dependencies are then
    // the ones every guest build of the tests shares, already built.
    let guests = std::fs::read_to_string(support::repo_root().join("guests/Cargo.toml")).unwrap();
    let profile = &guests[guests
        .find("[profile.release]")
        .expect("the guests' profile")..];
    std::fs::write(
        staging.join("Cargo.toml"),
        format!("[workspace]\n{manifest}\n{profile}"),
    )
    .unwrap();
    std::fs::copy(
        support::repo_root().join("guests/Cargo.lock"),
        staging.join("Cargo.lock"),
    )
    .unwrap();
    std::fs::write(
        staging.join("src/lib.rs"),
        "pub fn f() -> u32 { \"not a number\" }",
    )
    .unwrap();
    let err = store.build(&staging, &quiet()).unwrap_err();
    match err {
        StoreError::BuildFailed { stderr_tail, .. } => {
            assert!(stderr_tail.contains("mismatched types"), "{stderr_tail}")
        }
        other => panic!("{other}"),
    }
}

/// Replace every occurrence of `from` by `to` (same length) in `bytes`.
fn patched(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut out = bytes.to_vec();
    let mut found = 0;
    let mut i = 0;
    while i + from.len() <= out.len() {
        if &out[i..i + from.len()] == from {
            out[i..i + from.len()].copy_from_slice(to);
            found += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    assert!(found > 0, "pattern not found");
    out
}

#[test]
fn the_world_is_read_from_the_component_and_an_unknown_one_is_refused() {
    let (_d, store) = temp_store();
    let sandbox = Sandbox::new(Limits::default()).unwrap();
    let direct = support::guest("guests/direct", None);
    // The same harness claiming a world version this host does not know:
    // the export name is the only thing changed (same length, still a
    // valid component).
    let future = patched(
        &direct,
        b"ecdysis:harness/hooks@0.1.0",
        b"ecdysis:harness/hooks@0.9.0",
    );
    let m = store.put(&future, ManifestFacts::default()).unwrap();
    assert_eq!(m.world, "ecdysis:harness/harness@0.9.0");
    match store.load(&sandbox, &m.hash) {
        Err(StoreError::UnsupportedWorld {
            world, supported, ..
        }) => {
            assert_eq!(world, "ecdysis:harness/harness@0.9.0");
            assert!(
                supported.contains("ecdysis:harness/harness@0.1.0"),
                "{supported}"
            );
        }
        other => panic!("expected UnsupportedWorld, got {:?}", other.map(|r| r.1)),
    }
    // An empty component exports no hooks at all.
    let empty = store
        .put(b"\0asm\x0d\0\x01\0", ManifestFacts::default())
        .unwrap();
    assert_eq!(empty.world, ecdysis_sandbox::store::NO_WORLD);
    assert!(matches!(
        store.load(&sandbox, &empty.hash),
        Err(StoreError::UnsupportedWorld { .. })
    ));
    // Positive control: the unpatched harness loads and says its world.
    let good = store.put(&direct, ManifestFacts::default()).unwrap();
    assert_eq!(good.world, ecdysis_sandbox::sandbox::WORLD_VERSION);
    let inspection = store.inspect(&sandbox, &good.hash).unwrap();
    assert!(inspection.world_supported && inspection.link_error.is_none());
    assert!(store.load(&sandbox, &good.hash).is_ok());
}

#[test]
fn a_planted_artifact_is_recompiled_never_executed() {
    let (dir, store) = temp_store();
    let sandbox = Sandbox::new(Limits::default()).unwrap();
    let good = store
        .put(
            &support::guest("guests/direct", None),
            ManifestFacts::default(),
        )
        .unwrap();
    let evil = store
        .put(
            &support::guest("guests/hostile", Some("panic")),
            ManifestFacts::default(),
        )
        .unwrap();
    store.load(&sandbox, &good.hash).unwrap();
    store.load(&sandbox, &evil.hash).unwrap();
    let (good_cwasm, good_mac) = artifact_files(&store, good.hash.as_str());
    let (evil_cwasm, evil_mac) = artifact_files(&store, evil.hash.as_str());

    // Whoever can write the store plants another component's genuine
    // artifact and MAC under the good hash: the MAC binds the hash, so it is
    // refused and the good component is recompiled.
    std::fs::copy(&evil_cwasm, &good_cwasm).unwrap();
    std::fs::copy(&evil_mac, &good_mac).unwrap();
    let (harness, source) = store.load(&sandbox, &good.hash).unwrap();
    assert_eq!(source, LoadSource::RecompiledCorrupt);
    assert!(
        ecdysis_sandbox::doctor::check(&harness).passed(),
        "the good harness runs, not the planted panicking one"
    );

    // An artifact authenticated with a key the attacker made up (the old
    // unkeyed checksum scheme is the same as knowing no key at all).
    std::fs::copy(&evil_cwasm, &good_cwasm).unwrap();
    let forged = ComponentStore::open(store.root()).with_key_file(dir.path().join("attacker.key"));
    let (_, _) = forged.load(&sandbox, &evil.hash).unwrap();
    let (_, forged_mac) = artifact_files(&forged, evil.hash.as_str());
    std::fs::write(&good_mac, std::fs::read(&forged_mac).unwrap()).unwrap();
    let (harness, source) = store.load(&sandbox, &good.hash).unwrap();
    assert_eq!(source, LoadSource::RecompiledCorrupt);
    assert!(ecdysis_sandbox::doctor::check(&harness).passed());
    // Positive control: the rewritten artifact verifies and loads as is.
    let (_, source) = store.load(&sandbox, &good.hash).unwrap();
    assert_eq!(source, LoadSource::Precompiled);
}

#[test]
fn an_artifact_key_others_can_read_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, store) = temp_store();
    let sandbox = Sandbox::new(Limits::default()).unwrap();
    let m = store
        .put(
            &support::guest("guests/direct", None),
            ManifestFacts::default(),
        )
        .unwrap();
    store.load(&sandbox, &m.hash).unwrap();
    let key = dir.path().join("key");
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600,
        "created private"
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let reopened = ComponentStore::open(store.root()).with_key_file(&key);
    match reopened.load(&sandbox, &m.hash) {
        Err(StoreError::BadKey { path, reason }) => {
            assert_eq!(path, key);
            assert!(reason.contains("chmod 600"), "{reason}");
        }
        other => panic!("expected BadKey, got {:?}", other.map(|r| r.1)),
    }
}

#[test]
fn untrusted_bytes_compile_in_a_limited_child_and_are_size_capped() {
    use ecdysis_sandbox::store::Compiler;
    use std::time::{Duration, Instant};
    let (dir, store) = temp_store();
    let sandbox = Sandbox::new(Limits::default()).unwrap();
    let bytes = support::guest("guests/direct", None);
    let m = store.put(&bytes, ManifestFacts::default()).unwrap();
    // A compiler child that may not map enough memory to compile fails
    // with a typed error, quickly, and the host is unharmed.
    let starved = store.clone().with_compiler(Compiler::Child {
        exe: support::host_bin(),
        timeout: Duration::from_secs(60),
        memory_bytes: 16 << 20,
    });
    let started = Instant::now();
    match starved.load(&sandbox, &m.hash) {
        Err(StoreError::Sandbox(e)) => {
            assert_eq!(e.kind(), "compile", "{e}");
            assert!(e.to_string().contains("compiler process failed"), "{e}");
        }
        other => panic!("expected a compile error, got {:?}", other.map(|r| r.1)),
    }
    assert!(started.elapsed() < Duration::from_secs(30));
    // Positive control: the same child with room compiles it, and the
    // harness runs.
    let child = store.clone().with_compiler(Compiler::Child {
        exe: support::host_bin(),
        timeout: Duration::from_secs(120),
        memory_bytes: 4 << 30,
    });
    let (harness, source) = child.load(&sandbox, &m.hash).unwrap();
    assert_eq!(source, LoadSource::Compiled);
    assert!(ecdysis_sandbox::doctor::check(&harness).passed());

    // Size cap: refused at the door, for bytes and for files alike.
    let small = ComponentStore::open(dir.path().join("small"))
        .with_key_file(dir.path().join("key"))
        .with_max_component_bytes(1000);
    assert!(matches!(
        small.put(&bytes, ManifestFacts::default()),
        Err(StoreError::TooLarge { cap: 1000, .. })
    ));
    let file = dir.path().join("big.wasm");
    std::fs::write(&file, &bytes).unwrap();
    match small.resolve(file.to_str().unwrap()) {
        Err(StoreError::TooLarge { origin, .. }) => assert!(origin.contains("big.wasm")),
        other => panic!("expected TooLarge, got {other:?}"),
    }
}

#[test]
fn the_compile_child_reuses_the_stores_function_cache() {
    use ecdysis_sandbox::store::Compiler;
    use std::time::Duration;
    let (dir, _) = temp_store();
    let child_store = || {
        ComponentStore::open(dir.path().join("store"))
            .with_key_file(dir.path().join("key"))
            .with_compiler(Compiler::Child {
                exe: support::host_bin(),
                timeout: Duration::from_secs(120),
                memory_bytes: 4 << 30,
            })
    };
    let sandbox = Sandbox::new(Limits::default()).unwrap();
    let bytes = support::guest("guests/direct", None);
    let first = child_store();
    let m = first.put(&bytes, ManifestFacts::default()).unwrap();
    first.load(&sandbox, &m.hash).unwrap();
    let cold = first.fn_cache_counts();
    // (Hits on a cold cache are functions with the same body as one
    // compiled earlier in the same component.)
    assert!(cold.misses > 10, "the child reported its lookups: {cold:?}");
    assert_eq!(cold.inserted, cold.misses, "{cold:?}");
    // Without its artifact, another store (another process, as far as the
    // counts go) compiles it again from the cache alone, and it runs.
    for e in std::fs::read_dir(first.root().join("precompiled")).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    let second = child_store();
    let (harness, source) = second.load(&sandbox, &m.hash).unwrap();
    assert_eq!(source, LoadSource::Compiled);
    let warm = second.fn_cache_counts();
    // A few functions miss in another process (measured: 11 of 282 for
    // this guest; their Cranelift key differs between processes, so they
    // are never wrongly shared); the guest's own code all hits.
    assert!(warm.hits > 0 && warm.misses * 10 < warm.hits, "{warm:?}");
    assert_eq!(warm.hits + warm.misses, cold.hits + cold.misses, "{warm:?}");
    assert_eq!(warm.rejected, 0);
    assert!(ecdysis_sandbox::doctor::check(&harness).passed());
}

/// `ECDYSIS_CARGO_TARGET_DIR` is where a build that names no target
/// directory goes; `--target-dir` still wins over it. (A crate without
/// dependencies, which the store takes as any component: the choice of
/// directory is the point, not a cold build of wit-bindgen.)
#[test]
fn the_environment_names_the_default_cargo_target() {
    let tmp = tempfile::tempdir().unwrap();
    let krate = tmp.path().join("plain");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    std::fs::write(
        krate.join("Cargo.toml"),
        "[package]\nname = \"plain\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
         [lib]\ncrate-type = [\"cdylib\"]\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(krate.join("src/lib.rs"), "//! Nothing to export.\n").unwrap();
    let shared = tmp.path().join("shared");
    let elsewhere = tmp.path().join("elsewhere");
    let build = |env_target: &std::path::Path, extra: &[&std::ffi::OsStr]| {
        let o = std::process::Command::new(support::host_bin())
            .arg("--quiet")
            .arg("--store")
            .arg(tmp.path().join("store"))
            .arg("build")
            .arg(&krate)
            .args(extra)
            .env("ECDYSIS_CARGO_TARGET_DIR", env_target)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let first = build(&shared, &[]);
    let built = shared.join("wasm32-wasip2/release/plain.wasm");
    assert!(
        built.is_file(),
        "the build went to the environment's directory"
    );
    assert!(
        !krate.join("target").exists(),
        "the crate's own target was used"
    );
    assert_eq!(
        first,
        blake3::hash(&std::fs::read(&built).unwrap())
            .to_hex()
            .as_str(),
        "the stored component is the environment's directory's build"
    );
    // The flag names the first directory while the environment names
    // another: the build goes where the flag says, and neither the
    // environment's directory nor the crate's own is made.
    let second = build(&elsewhere, &["--target-dir".as_ref(), shared.as_os_str()]);
    assert!(!elsewhere.exists(), "the flag lost to the environment");
    assert!(
        !krate.join("target").exists(),
        "the crate's own target was used"
    );
    assert_eq!(first, second, "the same bytes from the same target");
}

/// `ECDYSIS_NATIVE_CACHE` (`--native-cache`) keeps compiled native code out
/// of the store: a run's episode workers load from it, and a second store
/// naming it runs the same harness without compiling it again.
#[test]
fn stores_naming_one_native_cache_compile_a_harness_once() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let native = tmp.path().join("native");
    let run = |store: &str, via_flag: bool| {
        let mut c = std::process::Command::new(support::host_bin());
        c.current_dir(support::repo_root())
            .arg("--quiet")
            .arg("--store")
            .arg(tmp.path().join(store))
            .args(["run", "--harness", "guests/direct", "--split", "all"])
            .args(["--tasks", "5", "--isolate", "process", "--out"])
            .arg(tmp.path().join(format!("{store}-run")));
        if via_flag {
            c.arg("--native-cache").arg(&native);
        } else {
            c.env("ECDYSIS_NATIVE_CACHE", &native);
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let artifacts = || -> Vec<(std::path::PathBuf, u64)> {
        let mut v: Vec<_> = std::fs::read_dir(native.join("precompiled"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
            .map(|p| {
                let ino = std::fs::metadata(&p).unwrap().ino();
                (p, ino)
            })
            .collect();
        v.sort();
        v
    };
    run("first", false);
    let compiled = artifacts();
    assert_eq!(compiled.len(), 1, "{compiled:?}");
    let first = tmp.path().join("first");
    assert!(first.join("components").is_dir());
    assert!(
        !first.join("precompiled").exists(),
        "the run or its worker compiled into the store"
    );
    assert!(!first.join("fncache").exists());
    // The second store finds the artifact and compiles nothing: the file
    // is the one the first run wrote (a compile replaces it atomically).
    run("second", true);
    assert_eq!(artifacts(), compiled);
    assert!(!tmp.path().join("second/precompiled").exists());
}

/// A copy of the starting harness beside a copy of `wit/`, as training
/// stages it, with `edit` applied to its rule tables.
fn staging_copy(
    root: &std::path::Path,
    name: &str,
    edit: Option<(&str, &str)>,
) -> std::path::PathBuf {
    let crate_dir = support::stage_template(root, name);
    if let Some((from, to)) = edit {
        let tables = crate_dir.join("src/tables.rs");
        let text = std::fs::read_to_string(&tables).unwrap();
        assert!(text.contains(from), "the template's tables lack {from:?}");
        std::fs::write(&tables, text.replacen(from, to, 1)).unwrap();
    }
    crate_dir
}

/// Two copies of one harness (one package name), each built where it is
/// into the environment's shared target (`$ECDYSIS_CARGO_TARGET_DIR`, as CI
/// sets it), share the artifact's path there: going back to the first copy
/// after the second, up to date by its own files, still gives the first
/// copy's component, not the file the second build left.
#[test]
fn copies_of_one_package_built_in_place_into_one_target_keep_their_own_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let rule = "Use the exact tool names from the tool list; there are no other tools.";
    let a = staging_copy(tmp.path(), "a", None);
    let b = staging_copy(
        tmp.path(),
        "b",
        Some((rule, "Only the listed tools exist.")),
    );
    let target = support::repo_root().join("target/evolve-candidates");
    let build = |krate: &std::path::Path| {
        let o = std::process::Command::new(support::host_bin())
            .arg("--quiet")
            .arg("--store")
            .arg(tmp.path().join("store"))
            .arg("build")
            .arg(krate)
            .env("ECDYSIS_CARGO_TARGET_DIR", &target)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let first_a = build(&a);
    let first_b = build(&b);
    assert_ne!(first_a, first_b, "the copies differ");
    assert_eq!(build(&a), first_a, "the first copy's own component");
    assert_eq!(build(&b), first_b, "and the second's");
}

#[test]
fn staging_copies_build_at_one_path_of_the_target_each_from_its_own_source() {
    use ecdysis_sandbox::store::{BuildProfile, staged_dir};
    let (d, store) = temp_store();
    // The training tests' warm target: the guest dependencies are built.
    let target = support::repo_root().join("target/evolve-candidates");
    let opts = BuildOptions {
        target_dir: Some(target.clone()),
        quiet: true,
        profile: BuildProfile::Candidate,
        staged: true,
        ..BuildOptions::default()
    };
    let rule = "Use the exact tool names from the tool list; there are no other tools.";
    let a = staging_copy(d.path(), "a", None);
    let b = staging_copy(d.path(), "b", Some((rule, "Only the listed tools exist.")));
    let built_a = store.build(&a, &opts).unwrap().manifest.hash;
    let built_b = store.build(&b, &opts).unwrap().manifest.hash;
    assert_ne!(built_a, built_b, "each copy is built from its own source");
    // rustc ran in the target's fixed directory, not in the copy: what its
    // incremental cache is keyed by is the same for every copy.
    let fixed = staged_dir(&target).join("crate");
    let dep_info =
        std::fs::read_to_string(target.join("wasm32-wasip2/candidate/harness_template.d")).unwrap();
    assert!(
        dep_info.contains(&*fixed.join("src/tables.rs").to_string_lossy()),
        "{dep_info}"
    );
    assert!(!dep_info.contains(&*b.to_string_lossy()), "{dep_info}");
    // Back to the first copy: its own bytes, never the last build's.
    assert_eq!(store.build(&a, &opts).unwrap().manifest.hash, built_a);
    // The artifact is the build's until the caller drops it: the target's
    // lock goes with it, so no concurrent build can swap the file first.
    let build = ecdysis_sandbox::store::build::cargo_build(&b, &opts).unwrap();
    let lock = std::fs::File::open(target.join(".ecdysis-build-candidate.lock")).unwrap();
    assert!(
        lock.try_lock().is_err(),
        "the lock is held while the build lives"
    );
    // ... and only its profile's: a release build into the same target
    // (another copy, built where it is) runs and ends meanwhile.
    let release_copy = staging_copy(d.path(), "r", None);
    let beside = {
        let (tx, rx) = std::sync::mpsc::channel();
        let target = target.clone();
        std::thread::spawn(move || {
            let (_d, other) = temp_store();
            let release = BuildOptions {
                target_dir: Some(target),
                quiet: true,
                ..BuildOptions::default()
            };
            let built = other
                .build(&release_copy, &release)
                .map(|b| b.manifest.hash);
            tx.send(built).unwrap();
        });
        rx.recv_timeout(std::time::Duration::from_secs(300))
            .expect("a release build waited for the candidate build's lock")
    };
    beside.expect("the release copy builds");
    let bytes = std::fs::read(build.wasm.as_ref().unwrap()).unwrap();
    assert_eq!(
        ecdysis_sandbox::store::ComponentHash::of(&bytes),
        built_b,
        "the artifact is this build's"
    );
    drop(build);
    // Other tests build into this target too: the lock is free once theirs
    // end, never while a dropped build still held it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(lock.lock().map(|()| lock)).unwrap());
    let lock = rx
        .recv_timeout(std::time::Duration::from_secs(300))
        .expect("the lock is released with the build")
        .unwrap();
    drop(lock);
    // A copy built where it is into the same target is built from its own
    // files too, not taken for up to date against the staged copy's.
    let in_place = BuildOptions {
        staged: false,
        ..opts.clone()
    };
    assert_eq!(store.build(&b, &in_place).unwrap().manifest.hash, built_b);
    assert_eq!(store.build(&a, &opts).unwrap().manifest.hash, built_a);
    assert_eq!(store.build(&b, &in_place).unwrap().manifest.hash, built_b);
    // A failure names the caller's copy, not the fixed directory.
    let broken = staging_copy(d.path(), "c", Some((rule, "\" not a string")));
    match store.build(&broken, &opts) {
        Err(StoreError::BuildFailed { stderr_tail, .. }) => {
            assert!(stderr_tail.contains("src/tables.rs"), "{stderr_tail}");
            assert!(!stderr_tail.contains(".staged"), "{stderr_tail}");
        }
        other => panic!("a broken copy must fail to build: {other:?}"),
    }
    // A target inside the crate gets no staged copy: it would copy itself
    // and show up in the crate's source (a broken manifest: cargo stops
    // before compiling anything).
    let inside = staging_copy(d.path(), "f", None);
    let manifest = std::fs::read_to_string(inside.join("Cargo.toml")).unwrap();
    std::fs::write(inside.join("Cargo.toml"), format!("{manifest}\n[broken")).unwrap();
    let in_crate = BuildOptions {
        target_dir: Some(inside.join("target")),
        ..opts.clone()
    };
    assert!(matches!(
        store.build(&inside, &in_crate),
        Err(StoreError::BuildFailed { .. })
    ));
    assert!(!staged_dir(&inside.join("target")).exists());
    // Cargo names a missing path dependency by its absolute path.
    let lost = staging_copy(d.path(), "e", None);
    let manifest = std::fs::read_to_string(lost.join("Cargo.toml")).unwrap();
    let manifest = manifest.replacen(
        "[dependencies]\n",
        "[dependencies]\nnowhere = { path = \"../nowhere\" }\n",
        1,
    );
    std::fs::write(lost.join("Cargo.toml"), manifest).unwrap();
    match store.build(&lost, &opts) {
        Err(StoreError::BuildFailed { stderr_tail, .. }) => {
            let sibling = d.path().canonicalize().unwrap().join("e/nowhere");
            assert!(
                stderr_tail.contains(&*sibling.to_string_lossy()),
                "{stderr_tail}"
            );
            assert!(!stderr_tail.contains(".staged"), "{stderr_tail}");
        }
        other => panic!("a broken manifest must fail to build: {other:?}"),
    }
}

/// Stores sharing a native-code directory share Rust builds by source: the
/// second store's build of the same crate takes the first one's component
/// without running cargo (here a cargo that always fails), an edited source
/// is built again, and an entry whose bytes do not match its MAC (one
/// planted without the artifact key) is never served.
#[test]
fn stores_sharing_a_native_cache_build_a_source_once_and_refuse_a_planted_build() {
    let dir = tempfile::tempdir().unwrap();
    let crate_dir = support::stage_template(dir.path(), "t");
    let native = dir.path().join("native");
    let build = |store: &str, cargo: Option<&str>| {
        let mut c = std::process::Command::new(support::host_bin());
        c.args(["--quiet", "--store"])
            .arg(dir.path().join(store))
            .arg("build")
            .arg("--native-cache")
            .arg(&native)
            .arg("--target-dir")
            .arg(support::repo_root().join("target/evolve-candidates"))
            .arg(&crate_dir)
            .env(
                ecdysis_sandbox::store::artifact::KEY_FILE_ENV,
                dir.path().join("key"),
            );
        if let Some(cargo) = cargo {
            c.env("CARGO", cargo);
        }
        c.output().unwrap()
    };
    let first = build("a", None);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let hash = String::from_utf8(first.stdout).unwrap().trim().to_string();

    // Another store, and no working cargo: served from the kept build.
    let second = build("b", Some("/bin/false"));
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert_eq!(String::from_utf8(second.stdout).unwrap().trim(), hash);

    // Bytes swapped under a kept MAC: not served, so the failing cargo runs.
    let kept = ecdysis_sandbox::store::kept_builds::kept_builds_dir(&native);
    let entry = std::fs::read_dir(&kept)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "wasm"))
        .expect("a kept build");
    let genuine = std::fs::read(&entry).unwrap();
    let mut planted = genuine.clone();
    let last = planted.len() - 1;
    planted[last] ^= 1;
    std::fs::write(&entry, &planted).unwrap();
    let refused = build("c", Some("/bin/false"));
    assert!(!refused.status.success(), "a planted build was served");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("build") && err.contains("failed"), "{err}");

    // The genuine entry back: served again (the path above was the check).
    std::fs::write(&entry, &genuine).unwrap();
    let again = build("d", Some("/bin/false"));
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    // A shell that makes the compiler a nightly one (whose default symbol
    // mangling differs) builds the same bytes: the variable never reaches
    // cargo, which finds the crate fresh in the shared target (a fresh
    // cache, so cargo runs).
    let mut shell = std::process::Command::new(support::host_bin());
    shell
        .args(["--quiet", "--store"])
        .arg(dir.path().join("f"))
        .arg("build")
        .arg("--native-cache")
        .arg(dir.path().join("other-native"))
        .arg("--target-dir")
        .arg(support::repo_root().join("target/evolve-candidates"))
        .arg(&crate_dir)
        .env("RUSTC_BOOTSTRAP", "1")
        .env(
            ecdysis_sandbox::store::artifact::KEY_FILE_ENV,
            dir.path().join("key"),
        );
    let nightly = shell.output().unwrap();
    assert!(
        nightly.status.success(),
        "{}",
        String::from_utf8_lossy(&nightly.stderr)
    );
    assert_eq!(String::from_utf8(nightly.stdout).unwrap().trim(), hash);

    // An edited source is another key: cargo runs (and fails here).
    let lib = crate_dir.join("src/lib.rs");
    let mut text = std::fs::read_to_string(&lib).unwrap();
    text.push_str("\n// an edit\n");
    std::fs::write(&lib, text).unwrap();
    let edited = build("e", Some("/bin/false"));
    assert!(
        !edited.status.success(),
        "an edited source was served a kept build"
    );
}

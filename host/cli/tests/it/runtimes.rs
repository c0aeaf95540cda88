//! What other runtimes consume. `export`: harness.wasm + harness.json with
//! the hash, world, lineage and limits a runtime checks, training facts from
//! a training run, and an OCI image layout whose blobs match their digests
//! and use the Wasm OCI media types. `vectors`: every hook call of re-run
//! episodes, canonical, checked against the recorded trajectories.

use crate::support;

use std::path::Path;
use std::process::Command;

use ecdysis_sandbox::sandbox::{Limits, Sandbox, WORLD_VERSION};
use ecdysis_sandbox::store::{
    ComponentHash, ComponentStore, ExportOptions, HarnessExport, ManifestFacts, TrainedUnder,
    oci_digest, read_training_run,
};

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).expect("readable")).expect("JSON")
}

/// A store with `read-only` derived from `direct`: a lineage of two.
fn two_generations(dir: &Path) -> (ComponentStore, ComponentHash, ComponentHash) {
    let store = ComponentStore::open(dir.join("store"));
    let root = store
        .put(
            &support::guest("guests/direct", None),
            ManifestFacts {
                origin: "guests/direct".into(),
                ..ManifestFacts::default()
            },
        )
        .expect("stored");
    let child = store
        .put(
            &support::guest("guests/read-only", None),
            ManifestFacts {
                origin: "guests/read-only".into(),
                parent: Some(root.hash.clone()),
                ..ManifestFacts::default()
            },
        )
        .expect("stored");
    (store, root.hash, child.hash)
}

#[test]
fn export_writes_a_verifiable_manifest_and_an_oci_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, root, child) = two_generations(tmp.path());
    let sandbox = Sandbox::new(Limits::default()).unwrap();
    let limits = Limits {
        fuel_per_hook: 1234,
        ..Limits::default()
    };
    let out = tmp.path().join("out");
    let oci = tmp.path().join("oci");
    let opts = ExportOptions {
        out: out.clone(),
        oci: Some(oci.clone()),
        oci_tag: Some("v1".into()),
        limits,
        policy: Default::default(),
        layers: Default::default(),
        training: None,
    };
    let outcome = store.export(&sandbox, &child, &opts).expect("exported");

    // harness.json: the hash is the blake3 of harness.wasm, the world is the
    // host's, the lineage walks the parents, the limits are the given ones.
    let wasm = std::fs::read(out.join("harness.wasm")).unwrap();
    let manifest: HarnessExport =
        serde_json::from_slice(&std::fs::read(out.join("harness.json")).unwrap()).unwrap();
    assert_eq!(ComponentHash::of(&wasm), child);
    assert_eq!(manifest.hash, child);
    assert_eq!(manifest.world, WORLD_VERSION);
    assert_eq!(manifest.size, wasm.len() as u64);
    let lineage: Vec<_> = manifest.lineage.iter().map(|e| e.hash.clone()).collect();
    assert_eq!(lineage, vec![child.clone(), root.clone()]);
    assert_eq!(manifest.limits.fuel_per_hook, 1234);
    assert_eq!(manifest.limits.max_list_items, 256);
    assert!(manifest.training.is_none());

    // The OCI layout: index -> manifest -> config + one application/wasm
    // layer, every blob named by its sha256.
    assert_eq!(json(&oci.join("oci-layout"))["imageLayoutVersion"], "1.0.0");
    let index = json(&oci.join("index.json"));
    let entry = &index["manifests"][0];
    assert_eq!(
        entry["annotations"]["org.opencontainers.image.ref.name"],
        "v1"
    );
    let blob = |digest: &str| {
        let bytes = std::fs::read(
            oci.join("blobs/sha256")
                .join(digest.trim_start_matches("sha256:")),
        )
        .expect("blob exists");
        assert_eq!(oci_digest(&bytes), digest, "blob content matches its name");
        bytes
    };
    let digest = entry["digest"].as_str().unwrap();
    assert_eq!(Some(digest), outcome.oci_manifest_digest.as_deref());
    let image: serde_json::Value = serde_json::from_slice(&blob(digest)).unwrap();
    assert_eq!(
        image["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    assert_eq!(
        image["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    let layers = image["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    assert_eq!(layers[0]["mediaType"], "application/wasm");
    assert_eq!(blob(layers[0]["digest"].as_str().unwrap()), wasm);
    assert_eq!(layers[0]["size"], wasm.len());
    let config: serde_json::Value =
        serde_json::from_slice(&blob(image["config"]["digest"].as_str().unwrap())).unwrap();
    assert_eq!(config["architecture"], "wasm");
    assert_eq!(config["os"], "wasip2");
    assert_eq!(config["layerDigests"][0], layers[0]["digest"]);
    assert_eq!(
        config["component"]["exports"][0],
        "ecdysis:harness/hooks@0.1.0"
    );
    assert_eq!(
        image["annotations"]["dev.ecdysis.harness.blake3"],
        child.as_str()
    );

    // Exporting again gives the same digests (timestamps come from the
    // store manifest).
    let again = store.export(&sandbox, &child, &opts).unwrap();
    assert_eq!(again.oci_manifest_digest, outcome.oci_manifest_digest);
}

/// A training run directory as `train` leaves it, reduced to the fields the
/// export reads.
fn fake_train_run(dir: &Path, initial: &ComponentHash, incumbent: &ComponentHash) {
    std::fs::create_dir_all(dir).unwrap();
    let limits = Limits {
        fuel_per_hook: 777,
        ..Limits::default()
    };
    let config = serde_json::json!({
        "method": "ecdysis",
        "train": {"domain": "tau2/retail", "agent_model": "sim:clumsy", "limits": limits, "policy": "fail-open"},
        "test_tasks": ["1", "2", "3"],
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let summary = serde_json::json!({
        "initial": initial, "incumbent": incumbent,
        "initial_train_score": 0.25, "final_train_score": 0.5, "test_score": 0.4,
        "layer_selection": {"chosen": ["realize", "contract"]},
    });
    std::fs::write(dir.join("summary.json"), summary.to_string()).unwrap();
}

#[test]
fn a_training_run_supplies_limits_policy_and_scores() {
    let tmp = tempfile::tempdir().unwrap();
    let (_store, root, child) = two_generations(tmp.path());
    let run = tmp.path().join("run");
    fake_train_run(&run, &root, &child);
    let TrainedUnder {
        facts,
        limits,
        policy,
        layers,
    } = read_training_run(&run, &child).expect("incumbent");
    assert_eq!(facts.role, "incumbent");
    assert_eq!(facts.train_score, Some(0.5));
    assert_eq!(facts.test_score, Some(0.4));
    assert_eq!(facts.test_tasks, 3);
    assert_eq!(
        facts.note.as_deref(),
        Some("simulated agent — not a benchmark result")
    );
    assert_eq!(limits.fuel_per_hook, 777);
    assert_eq!(policy, ecdysis_sandbox::sandbox::FailurePolicy::FailOpen);
    // The incumbent's selected layers; any other harness runs all four.
    assert_eq!(layers.to_string(), "contract,realize");
    let t = read_training_run(&run, &root).expect("initial");
    assert_eq!(
        (t.facts.role.as_str(), t.facts.test_score),
        ("initial", None)
    );
    assert!(t.layers.is_all());
    let stranger = ComponentHash::of(b"not in the run");
    let err = read_training_run(&run, &stranger).unwrap_err().to_string();
    assert!(err.contains("neither the incumbent"), "{err}");
}

#[test]
fn the_cli_exports_a_training_runs_incumbent_and_refuses_other_limits() {
    let tmp = tempfile::tempdir().unwrap();
    let (_store, root, child) = two_generations(tmp.path());
    let run = tmp.path().join("run");
    fake_train_run(&run, &root, &child);
    std::fs::write(run.join("incumbent"), child.as_str()).unwrap();
    let out = tmp.path().join("out");
    let status = Command::new(support::host_bin())
        .arg("--quiet")
        .arg("--store")
        .arg(tmp.path().join("store"))
        .args(["export", "--train-run"])
        .arg(&run)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let m = json(&out.join("harness.json"));
    assert_eq!(m["hash"], child.as_str());
    assert_eq!(m["limits"]["fuel_per_hook"], 777);
    assert_eq!(m["failure_policy"], "fail-open");
    assert_eq!(m["training"]["test_score"], 0.4);

    let refused = Command::new(support::host_bin())
        .arg("--store")
        .arg(tmp.path().join("store"))
        .args(["export", "--fuel", "5", "--train-run"])
        .arg(&run)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("trained under"));
}

fn host(store: &Path) -> Command {
    let mut c = Command::new(support::host_bin());
    c.current_dir(support::repo_root())
        .arg("--quiet")
        .arg("--store")
        .arg(store);
    c
}

/// A two-task run of the template with `sim:mixed` and the scripted user.
fn template_run(tmp: &Path) -> std::path::PathBuf {
    let wasm = tmp.join("template.wasm");
    std::fs::write(&wasm, support::guest("harness-template", None)).unwrap();
    let run = tmp.join("run");
    let out = host(&tmp.join("store"))
        .args(["run", "--harness"])
        .arg(&wasm)
        .args(["--tasks", "5,9", "--agent-model", "sim:mixed", "--out"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    run
}

#[test]
fn vectors_record_every_hook_call_canonically_and_check_the_rerun() {
    let tmp = tempfile::tempdir().unwrap();
    let run = template_run(tmp.path());
    let file = tmp.path().join("v.jsonl");
    let out = host(&tmp.path().join("store"))
        .args(["vectors", "--run"])
        .arg(&run)
        .arg("--out")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&file).unwrap();
    let mut lines = text.lines();
    let header: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(header["format"], "ecdysis-hook-vectors/1");
    assert_eq!(header["reproduced"], true);
    assert_eq!(header["episodes"], 2);
    let mut hooks = std::collections::BTreeMap::<String, usize>::new();
    let mut expected_seq = 0;
    let mut records = 0;
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        // Canonical: parsing and re-serializing gives the same bytes.
        assert_eq!(v.to_string(), line);
        let hook = v["hook"].as_str().unwrap().to_string();
        if hook == "constructor" {
            expected_seq = 0;
            assert_eq!(v["input"]["max-steps"], 200);
        }
        assert_eq!(v["seq"], expected_seq);
        expected_seq += 1;
        assert_eq!(v["output"]["tag"], "ok", "{line}");
        *hooks.entry(hook).or_default() += 1;
        records += 1;
    }
    assert_eq!(header["records"], records);
    assert_eq!(hooks["constructor"], 2);
    assert_eq!(hooks["contract"], 2);
    assert_eq!(hooks["skills"], 2);
    assert!(hooks["realize"] > 4 && hooks["regulate"] > 4, "{hooks:?}");
    // The template reads the environment through the view on these tasks.
    assert!(
        text.contains(r#""view_calls":[{"name":"#),
        "no env-view call recorded"
    );
}

#[test]
fn vectors_report_a_rerun_that_does_not_reproduce_and_refuse_endpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let run = template_run(tmp.path());
    let store = tmp.path().join("store");
    // Tamper with one recorded trajectory: the re-run no longer matches it.
    let path = run.join("trajectories.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    first["steps"] = serde_json::json!(9999);
    let rest: Vec<&str> = text.lines().skip(1).collect();
    std::fs::write(&path, format!("{first}\n{}\n", rest.join("\n"))).unwrap();
    let file = tmp.path().join("v.jsonl");
    let out = host(&store)
        .args(["vectors", "--run"])
        .arg(&run)
        .arg("--out")
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("did not reproduce") && err.contains("steps"),
        "{err}"
    );
    let ok = host(&store)
        .args(["vectors", "--allow-divergence", "--run"])
        .arg(&run)
        .arg("--out")
        .arg(&file)
        .output()
        .unwrap();
    assert!(ok.status.success());
    let header: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(header["reproduced"], false);

    // A run against an endpoint cannot be re-run offline: refused by name.
    let cfg_path = run.join("config.json");
    let mut cfg = json(&cfg_path);
    cfg["agent_model"] = serde_json::json!("qwen2.5-7b-instruct");
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let out = host(&store)
        .args(["vectors", "--run"])
        .arg(&run)
        .arg("--out")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs a `sim:` agent"));
}

#[test]
fn vectors_record_the_argument_caps_as_other_runtimes_must_replay_them() {
    // The conformance vectors carry the host's refusal of a call whose
    // arguments are over `MAX_TOOL_ARGUMENT_BYTES` (guests/hostile
    // huge-args writes 100 kB) and of env-view arguments over it
    // (calc-bomb), so the Python and JS runtimes must refuse them alike
    // (runtimes/test.sh replays both cases in both).
    let tmp = tempfile::tempdir().unwrap();
    let run = template_run(tmp.path());
    let hostile = tmp.path().join("huge-args.wasm");
    std::fs::write(
        &hostile,
        support::guest("guests/hostile", Some("huge-args")),
    )
    .unwrap();
    let file = tmp.path().join("v.jsonl");
    let out = host(&tmp.path().join("store"))
        .args(["vectors", "--run"])
        .arg(&run)
        .arg("--harness")
        .arg(&hostile)
        .arg("--out")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&file).unwrap();
    let refused: Vec<serde_json::Value> = text
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["hook"] == "realize" && v["output"]["tag"] == "err")
        .collect();
    assert!(!refused.is_empty(), "no refused realize in {text}");
    for v in &refused {
        assert_eq!(
            v["output"]["val"],
            serde_json::json!({"kind": "contract_violation", "violation": "arguments_too_large"}),
            "{v}"
        );
        assert_eq!(v["input"]["tag"], "call", "{v}");
    }
    // calc-bomb sends 64 env-view calls of 1.2 MB per realize: each is
    // refused unread and recorded with a marker, not its 1.2 MB.
    let bomb = tmp.path().join("calc-bomb.wasm");
    std::fs::write(&bomb, support::guest("guests/hostile", Some("calc-bomb"))).unwrap();
    let bomb_file = tmp.path().join("bomb.jsonl");
    let out = host(&tmp.path().join("store"))
        .args(["vectors", "--tasks", "5", "--run"])
        .arg(&run)
        .arg("--harness")
        .arg(&bomb)
        .arg("--out")
        .arg(&bomb_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expression = vec!["9".repeat(4000); 300].join("*");
    let size = format!("{{\"expression\":\"{expression}\"}}").len();
    let text = std::fs::read_to_string(&bomb_file).unwrap();
    let realize: serde_json::Value = text
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["hook"] == "realize")
        .expect("a realize line");
    let calls = realize["view_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 64);
    for c in calls {
        assert_eq!(
            c["arguments"],
            format!("<{size} bytes, over the cap of 65536>"),
            "{c}"
        );
        assert_eq!(c["answer"]["val"]["tag"], "invalid-arguments", "{c}");
    }
    // Each line stays small (77 MB of arguments per line unmarked).
    let longest = text.lines().map(str::len).max().unwrap();
    assert!(longest < 64 << 10, "a line of {longest} bytes");

    // Positive control: the same run's own harness records no refusal.
    let own = tmp.path().join("own.jsonl");
    let out = host(&tmp.path().join("store"))
        .args(["vectors", "--run"])
        .arg(&run)
        .arg("--out")
        .arg(&own)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        !std::fs::read_to_string(&own)
            .unwrap()
            .contains("arguments_too_large")
    );
}

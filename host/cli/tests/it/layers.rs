//! Layer ablation and selection end to end: `ablate` on the template with
//! a quirky testbed agent, and `train
//! --select-layers` recording the choice, testing it held-out and carrying
//! it into `export`.

use std::path::Path;
use std::process::Command;

use super::support::{host_bin, repo_root};

fn host(store: &Path) -> Command {
    let mut c = Command::new(host_bin());
    c.current_dir(repo_root())
        .args(["--quiet", "--store"])
        .arg(store);
    c
}

fn json(path: &Path) -> serde_json::Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap()
}

/// The rule, recomputed from the recorded differences: every layer
/// without which the harness scored strictly higher is dropped.
fn rule(ablation: &serde_json::Value) -> Vec<String> {
    let dropped: Vec<&str> = ablation["layers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["without"]["vs_full"]["delta"]["estimate"]
                .as_f64()
                .unwrap()
                > 0.0
        })
        .map(|e| e["layer"].as_str().unwrap())
        .collect();
    ["contract", "skills", "realize", "regulate"]
        .into_iter()
        .filter(|l| !dropped.contains(l))
        .map(String::from)
        .collect()
}

#[test]
fn ablate_finds_the_layer_a_clumsy_agent_needs_and_resumes_to_the_same_file() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ablate");
    let run = || {
        host(&tmp.path().join("store"))
            .args([
                "ablate",
                "--harness",
                "harness-template",
                "--tasks",
                "0,1,2,3,4,6,7,8",
                "--agent-model",
                "sim:clumsy",
                "--out",
            ])
            .arg(&out)
            .output()
            .unwrap()
    };
    let o = run();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(table.starts_with("note: simulated agent"), "{table}");
    for v in [
        "without contract",
        "without skills",
        "without realize",
        "without regulate",
    ] {
        assert!(table.contains(v), "{v}: {table}");
    }
    let file = json(&out.join("ablation.json"));
    assert_eq!(file["tasks"], 8);
    let a = &file["ablation"];
    let contract = a["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["layer"] == "contract")
        .unwrap();
    // Without the contract layer sim:clumsy fails tasks the full template
    // solves (its systematic quirks are what the contract rewrites answer).
    let d = &contract["without"]["vs_full"];
    assert!(d["delta"]["estimate"].as_f64().unwrap() < 0.0, "{d}");
    assert!(d["p_worse"].as_f64().unwrap() < 0.1, "{d}");
    assert_eq!(d["tasks"], 8);
    let chosen: Vec<String> = serde_json::from_value(a["chosen"].clone()).unwrap();
    assert!(chosen.contains(&"contract".to_string()));
    assert_eq!(chosen, rule(a));
    // Each variant ran with its layers, recorded in its config.json.
    let off = json(&out.join("without-contract/config.json"));
    assert_eq!(
        off["layers"],
        serde_json::json!(["skills", "realize", "regulate"])
    );
    assert!(json(&out.join("full/config.json")).get("layers").is_none());
    // A second run resumes every variant: the same file, byte for byte.
    let before = std::fs::read(out.join("ablation.json")).unwrap();
    let o = run();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(out.join("ablation.json")).unwrap(), before);
    // Direct has no layers; --layers is the ablation's own business.
    for bad in [["--harness", "none"], ["--layers", "contract"]] {
        let o = host(&tmp.path().join("store"))
            .args(["ablate", "--tasks", "0", "--agent-model", "sim:clumsy"])
            .args(bad)
            .output()
            .unwrap();
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("ablate"), "{err}");
    }
}

/// The template with a regulation layer that stops every episode at its
/// first step (beside a copy of the WIT package, where `../wit` finds it):
/// a layer the data should drop.
fn template_with_a_harmful_regulation(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("harness");
    for (from, to) in [("harness-template", &src), ("wit", &dir.join("wit"))] {
        let o = Command::new("cp")
            .args(["-r", "--"])
            .arg(repo_root().join(from))
            .arg(to)
            .output()
            .unwrap();
        assert!(o.status.success());
    }
    let _ = std::fs::remove_dir_all(src.join("target"));
    let regulate = src.join("src/regulate/mod.rs");
    let text = std::fs::read_to_string(&regulate).unwrap();
    let head = "pub fn regulate(h: &mut Harness, step: &Step) -> Regulation {";
    assert!(text.contains(head), "the template's regulate moved");
    let patched = text.replacen(
        head,
        &format!("{head}\n    if step.step > 0 {{\n        return Regulation::Stop(\"stopping every episode\".into());\n    }}"),
        1,
    );
    std::fs::write(&regulate, patched).unwrap();
    src
}

#[test]
fn train_select_layers_records_the_choice_tests_it_and_exports_it() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let out = tmp.path().join("train");
    let source = template_with_a_harmful_regulation(tmp.path());
    let o = host(&store)
        .args([
            "train",
            "--rounds",
            "0",
            "--select-layers",
            "--tasks",
            "0,1,2,3,4,6,7,8",
            "--agent-model",
            "sim:clumsy",
            "--test-split",
            "test",
            "--test-tasks",
            "5,9,12",
            "--test-trials",
            "1",
            "--cargo-target-dir",
        ])
        .arg(repo_root().join("target/evolve-candidates"))
        .arg("--source")
        .arg(&source)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&out.join("summary.json"));
    let a = &s["layer_selection"];
    assert_eq!(a["layers"].as_array().unwrap().len(), 4, "{a}");
    let chosen: Vec<String> = serde_json::from_value(a["chosen"].clone()).unwrap();
    assert_eq!(chosen, rule(a));
    // The stopping regulation goes, the contract sim:clumsy needs stays.
    assert!(!chosen.contains(&"regulate".to_string()), "{a}");
    assert!(chosen.contains(&"contract".to_string()), "{a}");
    assert!(
        a["chosen_vs_full"]["vs_full"]["delta"]["estimate"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    // The held-out test has the chosen variant beside the full harness.
    let tested = &s["test"]["chosen_layers"];
    assert_eq!(tested["tasks"], 3, "{}", s["test"]);
    assert!(
        tested["intervals"]["accuracy"]["estimate"]
            .as_f64()
            .unwrap()
            >= s["test"]["final"]["intervals"]["accuracy"]["estimate"]
                .as_f64()
                .unwrap()
    );
    // The full variant is the incumbent's own training evaluation.
    assert_eq!(
        a["full"]["accuracy"]["estimate"].as_f64().unwrap(),
        s["final_train_score"].as_f64().unwrap()
    );
    // The report's training page shows each layer's effect and the choice.
    let page = tmp.path().join("report.html");
    let o = host(&store)
        .arg("report")
        .arg(&out)
        .arg("--out")
        .arg(&page)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    for want in [
        "Layers of the final incumbent",
        "without regulate",
        "held-out accuracy, chosen layers",
        "power: 8 tasks x 1 trial(s)",
    ] {
        assert!(html.contains(want), "{want} missing from the report");
    }
    let export = tmp.path().join("export");
    let o = host(&store)
        .args(["export", "--train-run"])
        .arg(&out)
        .arg("--out")
        .arg(&export)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let manifest = json(&export.join("harness.json"));
    assert_eq!(manifest["layers"], serde_json::json!(chosen));
    // `run` on the export honours its layers; --layers overrides them.
    let run_out = tmp.path().join("run");
    let o = host(&store)
        .args([
            "run",
            "--tasks",
            "5",
            "--agent-model",
            "sim:texter",
            "--harness",
        ])
        .arg(&export)
        .arg("--out")
        .arg(&run_out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let config = json(&run_out.join("config.json"));
    assert_eq!(config["layers"], serde_json::json!(chosen));
    let o = host(&store)
        .args([
            "run",
            "--tasks",
            "5",
            "--agent-model",
            "sim:clumsy",
            "--layers",
            "all",
        ])
        .arg("--harness")
        .arg(&export)
        .arg("--out")
        .arg(tmp.path().join("run-all"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        json(&tmp.path().join("run-all/config.json"))
            .get("layers")
            .is_none()
    );
}

/// The power line of `train`, on a `sim:` profile's own outcomes: printed,
/// recorded, and true of the gate. The statement's detectable effect, fed
/// back into fresh simulated evaluations drawn from the starting harness's
/// per-task success rates, is accepted by the gate itself about as often
/// as stated; half of it clearly less often.
#[test]
fn the_power_line_of_train_holds_for_the_gate_on_a_sim_profile() {
    use ecdysis_evolve::gate::power::gate_detection_rate;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("train");
    let o = Command::new(host_bin())
        .current_dir(repo_root())
        .arg("--store")
        .arg(tmp.path().join("store"))
        .args([
            "train",
            "--rounds",
            "0",
            "--start-blank",
            "--tasks",
            "0,1,2,3,4,6,7,8,10,11,13,14",
            "--trials",
            "3",
            "--agent-model",
            "sim:clumsy",
            "--accept",
            "paired",
            "--target-effect",
            "0.05",
            "--test-split",
            "none",
            "--cargo-target-dir",
        ])
        .arg(repo_root().join("target/evolve-candidates"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stdout.contains("power: 12 tasks x 3 trial(s)"), "{stdout}");
    assert!(stderr.contains("power: 12 tasks x 3 trial(s)"), "{stderr}");
    let s = json(&out.join("summary.json"));
    let p = &s["power"];
    assert_eq!(
        (p["tasks"].as_u64(), p["trials"].as_u64()),
        (Some(12), Some(3))
    );
    assert_eq!(p["alpha"], 0.05);
    // 12 tasks cannot detect +0.05: said, with the tasks it would take.
    assert!(
        p["warning"]
            .as_str()
            .unwrap()
            .contains("cannot detect +0.050"),
        "{p}"
    );
    let needed = p["needed"].as_array().unwrap();
    assert!(
        needed
            .iter()
            .all(|n| n["tasks"].as_u64().is_none_or(|t| t > 12)),
        "{p}"
    );
    let d = p["detectable"]
        .as_f64()
        .expect("an effect 12 tasks can detect");
    // The per-task success rates the statement was made from.
    let eval = std::fs::read_dir(out.join("evals"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|e| e.join("summary.json").is_file())
        .unwrap();
    let summary = json(&eval.join("summary.json"));
    let rates: Vec<f64> = summary["metrics"]["per_task"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["mean_reward"].as_f64().unwrap())
        .collect();
    assert_eq!(rates.len(), 12);
    let at = gate_detection_rate(&rates, 3, d, 0.05, (400, 0xC0FFEE));
    assert!(
        (at - 0.8).abs() < 0.08,
        "the gate detected +{d:.3} in {at} of runs"
    );
    let half = gate_detection_rate(&rates, 3, d / 2.0, 0.05, (400, 0xC0FFEE));
    assert!(half < 0.65, "half the effect detected in {half} of runs");
}

//! Unit tests of the report: hostile content renders as text, corrupt
//! input names its file, unfinished runs render with a note, output is
//! deterministic.

use std::path::{Path, PathBuf};

use super::*;
use ecdysis_evolve::diagnose::change_spec::{ChangeSpec, FailurePattern, Layer, ProposedChange};
use ecdysis_evolve::train::{Method, PhaseTimes, RoundRecord, TrainConfig, TrainPlan};
use ecdysis_model::{SamplingArgs, ToolCall};
use ecdysis_runner::agent::{CallSource, EndReason, Entry, EpisodeRecord, HookRecord};
use ecdysis_runner::eval::{RunConfig, RunSettings, RunSummary};
use ecdysis_sandbox::sandbox::{FailurePolicy, Limits};
use ecdysis_sandbox::store::ComponentHash;

/// Markup a hostile model or harness might write into a trajectory.
const XSS: &str = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>\"'><b>";

fn hash(digits: &str) -> ComponentHash {
    ComponentHash::parse(digits).expect("64 hex digits")
}

fn config(tasks: &[&str], agent: &str) -> RunConfig {
    RunConfig {
        world: "ecdysis:harness@0.1.0".into(),
        harness: ComponentHash::parse(&"ab".repeat(32)),
        settings: RunSettings {
            domain: "tau2/retail".into(),
            split: Some("test".into()),
            trials: 2,
            seed: 0,
            max_steps: 200,
            max_errors: 10,
            max_request_tokens: None,
            policy: FailurePolicy::FailClosed,
            layers: Default::default(),
            limits: Limits::default(),
            sampling: SamplingArgs::default(),
        },
        tasks: tasks.iter().map(|t| t.to_string()).collect(),
        agent_model: agent.into(),
        agent_base_url: None,
        user_model: "scripted".into(),
        user_base_url: None,
    }
}

/// An episode whose every free-text field carries `XSS`, with every kind
/// of harness action.
fn hostile_episode(task: &str, trial: u32) -> EpisodeRecord {
    let mut r = EpisodeRecord::bare(task, trial, 0.0);
    r.end = EndReason::HarnessStop;
    r.end_detail = Some(format!("stop: {XSS}"));
    r.transcript = vec![
        Entry::System {
            text: format!("policy {XSS}"),
        },
        Entry::Agent {
            step: 0,
            text: Some(format!("hello {XSS}")),
            tool_calls: vec![ToolCall::new(
                "c1",
                format!("tool{XSS}"),
                format!("{{\"a\":\"{XSS}\"}}"),
            )],
            testbed: None,
            withheld: None,
        },
        Entry::User {
            step: 1,
            text: format!("user says {XSS}"),
        },
        Entry::Tool {
            step: 2,
            call_id: "c1".into(),
            name: format!("get{XSS}"),
            arguments: format!("{{\"order_id\":\"#W1{XSS}\"}}"),
            proposed: Some(ToolCall::new(
                "c1",
                "get",
                format!("{{\"order_id\":\"W1{XSS}\"}}"),
            )),
            content: format!("result {XSS}"),
            error: false,
            blocked: false,
            source: CallSource::Rewritten,
        },
        Entry::Tool {
            step: 3,
            call_id: "c2".into(),
            name: "cancel".into(),
            arguments: "{}".into(),
            proposed: None,
            content: format!("[Blocked by the runtime harness] {XSS}"),
            error: false,
            blocked: true,
            source: CallSource::Model,
        },
        Entry::Tool {
            step: 3,
            call_id: "d1".into(),
            name: format!("toggle{XSS}"),
            arguments: "{}".into(),
            proposed: None,
            content: format!("device {XSS}"),
            error: false,
            blocked: false,
            source: CallSource::User,
        },
        Entry::Harness {
            step: 3,
            hook: "regulate".into(),
            text: format!("note {XSS}"),
        },
    ];
    r.hooks = vec![
        HookRecord {
            step: 3,
            hook: "regulate".into(),
            decision: serde_json::json!({ "Annotate": format!("note {XSS}") }),
            intervened: true,
            fuel: 1000,
            micros: 10,
            added_bytes: 0,
            error: None,
            logs: vec![format!("log {XSS}")],
        },
        HookRecord {
            step: 2,
            hook: format!("realize{XSS}"),
            decision: serde_json::json!("Proceed"),
            intervened: true,
            fuel: 50,
            micros: 1,
            added_bytes: 0,
            error: None,
            logs: vec![],
        },
    ];
    r.evaluation = Some(serde_json::json!({
        "reward": 0.0, "db_match": false, "communicate_ok": true,
        "communicate_checks": [{"info": XSS, "met": false}],
        "action_checks": [{"action_id": XSS, "name": XSS, "matched": false}],
        "env_assertion_checks": [{"env_type": "user", "func_name": XSS, "met": false, "error": XSS}],
        "reward_basis": [XSS]
    }));
    r
}

fn write_run(dir: &Path, cfg: &RunConfig, records: &[EpisodeRecord], summary: bool) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("config.json"), serde_json::to_vec(cfg).unwrap()).unwrap();
    let mut lines = String::new();
    for r in records {
        lines += &serde_json::to_string(r).unwrap();
        lines.push('\n');
    }
    std::fs::write(dir.join("trajectories.jsonl"), lines).unwrap();
    if summary {
        let s = RunSummary {
            config: cfg.clone(),
            metrics: ecdysis_runner::eval::metrics::compute(records),
            unfinished: vec![],
            floor_solved: 0,
            floor_tasks: cfg.tasks.len() as u64,
            wall_seconds: 1.0,
            ran_now: records.len() as u64,
            ledger: None,
            concurrency: None,
        };
        std::fs::write(dir.join("summary.json"), serde_json::to_vec(&s).unwrap()).unwrap();
    }
}

fn render_one(dir: &Path) -> Result<String, ReportError> {
    render(&[dir.to_path_buf()], &ReportOptions::default())
}

/// The page's own script tags: the error hook and the filters.
const OWN_SCRIPTS: usize = 2;

fn assert_inert(html: &str) {
    assert_eq!(
        html.matches("<script").count(),
        OWN_SCRIPTS,
        "a script tag other than the report's own"
    );
    assert!(!html.contains("<img"), "an injected element");
    assert!(!html.contains("<b>"), "an injected element");
    // The handler only ever appears inside the escaped element text.
    assert_eq!(
        html.matches("onerror=alert").count(),
        html.matches("&lt;img src=x onerror=alert").count(),
        "an injected attribute"
    );
    assert!(!html.contains("'pwned'"), "unescaped quotes");
}

#[test]
fn hostile_trajectory_text_renders_as_text_never_as_markup() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let task = format!("7{XSS}");
    let mut cfg = config(&[&task, "8"], &format!("sim:{XSS}"));
    cfg.user_model = XSS.into();
    let mut ok = EpisodeRecord::bare("8", 0, 1.0);
    ok.transcript = vec![Entry::User {
        step: 1,
        text: "fine".into(),
    }];
    write_run(&dir, &cfg, &[hostile_episode(&task, 0), ok], true);
    let html = render_one(&dir).unwrap();
    assert_inert(&html);
    // Positive control: the hostile text is on the page, as text.
    assert!(html.contains("&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;"));
    assert!(html.contains("user says &lt;script&gt;"));
    assert!(html.contains("result &lt;script&gt;"));
    // and the page's own script is there (the control for the count).
    assert!(html.contains("data-script"));
    // Every harness action is marked; the rewritten call shows its original.
    for mark in [
        "rewritten by realize",
        "blocked by realize",
        "annotation",
        "stopped by regulate",
        "original call",
    ] {
        assert!(html.contains(mark), "{mark} missing");
    }
}

#[test]
fn hostile_training_content_renders_as_text() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("train");
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = TrainConfig {
        plan: TrainPlan {
            method: Method::Ecdysis,
            rounds: 1,
            test_split: None,
            test_trials: 1,
            ..TrainPlan::default()
        },
        train: config(&["1", "2"], "sim:clumsy"),
        test_tasks: vec![],
        diagnoser: XSS.into(),
        coder: XSS.into(),
        gate_measure: Default::default(),
        roles: Default::default(),
        coder_network: None,
    };
    std::fs::write(dir.join("config.json"), serde_json::to_vec(&cfg).unwrap()).unwrap();
    let (inc, cand) = ("1".repeat(64), "2".repeat(64));
    let spec = ChangeSpec {
        failure_patterns: vec![FailurePattern {
            name: XSS.into(),
            description: XSS.into(),
            evidence_tasks: vec![XSS.into()],
        }],
        proposed_changes: vec![ProposedChange {
            layer: Layer::Realize,
            file: format!("src/{XSS}"),
            description: XSS.into(),
            rationale: XSS.into(),
            evidence_tasks: vec![],
            rule: None,
            instance_specific: true,
        }],
        skills: vec![],
        implementation_notes: XSS.into(),
    };
    let round = RoundRecord {
        round: 1,
        incumbent: hash(&inc),
        incumbent_score: 0.5,
        candidate: Some(hash(&cand)),
        candidate_score: Some(0.75),
        accepted: true,
        decision: format!("accepted {XSS}"),
        failures: 1,
        groups: 1,
        recurring_groups: 0,
        coder_calls: 1,
        spec: Some(spec.clone()),
        seconds: PhaseTimes::default(),
        p_value: Some(0.01),
        usd: 0.0,
        edit_to_episode_seconds: None,
        incumbent_measure: Some(ecdysis_evolve::train::Measure::Fresh),
        candidate_measure: Some(ecdysis_evolve::train::Measure::Fresh),
        gate_episodes: None,
    };
    std::fs::write(
        dir.join("rounds.jsonl"),
        format!("{}\n", serde_json::to_string(&round).unwrap()),
    )
    .unwrap();
    std::fs::write(dir.join("initial"), &inc).unwrap();
    std::fs::write(dir.join("incumbent"), &cand).unwrap();
    let cdir = dir.join("candidates").join(&cand);
    std::fs::create_dir_all(&cdir).unwrap();
    std::fs::write(cdir.join("spec.json"), serde_json::to_vec(&spec).unwrap()).unwrap();
    std::fs::write(
        cdir.join("diff.patch"),
        format!("--- a/src/x.rs\n+++ b/src/x.rs\n@@ -1 +1 @@\n-old\n+{XSS}\n"),
    )
    .unwrap();
    let transcript = serde_json::json!({
        "round": 1, "diagnoser": XSS, "evidence": [XSS],
        "discussions": [{"spec": null, "error": XSS, "calls": 2, "transcript": [
            {"role": "analyst", "round": 1, "content": XSS},
            {"role": "moderator", "round": 2, "content": XSS}
        ]}],
        "coder_runs": [{"coder": XSS, "ok": false, "attempts": 1, "changed_files": [XSS],
                        "build_ok": false, "error": XSS, "log": XSS}]
    });
    std::fs::create_dir_all(dir.join("rounds/1")).unwrap();
    std::fs::write(dir.join("rounds/1/transcript.json"), transcript.to_string()).unwrap();
    let html = render_one(&dir).unwrap();
    assert_inert(&html);
    assert!(
        html.contains("<span class=\"da\">+&lt;script&gt;"),
        "diff line escaped"
    );
    assert!(html.contains("In progress"), "no summary.json: a note");
    assert!(html.contains("class=\"tree lineage\""));
    assert!(
        html.contains(&format!("data-hash=\"{cand}\"")),
        "candidate in the lineage"
    );
    assert!(html.contains(SIMULATED_LABEL));
}

#[test]
fn a_damaged_trajectory_line_is_an_error_naming_the_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let cfg = config(&["1", "2"], "gpt-x");
    write_run(
        &dir,
        &cfg,
        &[
            EpisodeRecord::bare("1", 0, 1.0),
            EpisodeRecord::bare("2", 0, 0.0),
        ],
        false,
    );
    let path = dir.join("trajectories.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{{\"broken\n{text}")).unwrap();
    match render_one(&dir) {
        Err(ReportError::Corrupt { path: p, reason }) => {
            assert_eq!(p, path);
            assert!(reason.contains("line 1"), "{reason}");
            let msg = ReportError::Corrupt { path: p, reason }.to_string();
            assert!(msg.contains("trajectories.jsonl"), "{msg}");
        }
        other => panic!(
            "expected a corrupt-file error, got {:?}",
            other.map(|h| h.len())
        ),
    }
    // A corrupt config names config.json.
    std::fs::write(dir.join("config.json"), b"{not json").unwrap();
    let err = render_one(&dir).unwrap_err().to_string();
    assert!(err.contains("config.json"), "{err}");
    // A corrupt round record names rounds.jsonl and its line.
    let train = tmp.path().join("train");
    std::fs::create_dir_all(&train).unwrap();
    std::fs::write(train.join("rounds.jsonl"), "{}\n").unwrap();
    std::fs::write(train.join("config.json"), b"{}").unwrap();
    let err = render_one(&train).unwrap_err().to_string();
    assert!(err.contains("config.json"), "{err}");
}

#[test]
fn an_unfinished_run_renders_with_a_note_and_skips_a_torn_last_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let cfg = config(&["1", "2"], "gpt-x");
    write_run(&dir, &cfg, &[EpisodeRecord::bare("1", 0, 1.0)], false);
    let path = dir.join("trajectories.jsonl");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text += "{\"task_id\": \"2\", \"tri";
    std::fs::write(&path, &text).unwrap();
    let html = render_one(&dir).unwrap();
    assert!(html.contains("In progress"));
    assert!(html.contains("1 of 4 episodes"));
    // Reading never repairs: the torn line is still there.
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    // Not simulated: no label.
    assert!(!html.contains(SIMULATED_LABEL));
}

#[test]
fn a_finished_run_whose_file_lost_episodes_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let cfg = config(&["1", "2"], "gpt-x");
    let records = [
        EpisodeRecord::bare("1", 0, 1.0),
        EpisodeRecord::bare("1", 1, 1.0),
        EpisodeRecord::bare("2", 0, 0.0),
    ];
    write_run(&dir, &cfg, &records, true);
    let note = "The summary counts 3 episodes, but 2 were read";
    // The positive control: file and summary agree, no note.
    assert!(!render_one(&dir).unwrap().contains("The summary counts"));
    // The last line torn after the run finished (a copy cut short).
    let path = dir.join("trajectories.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, &text[..text.len() - 10]).unwrap();
    let html = render_one(&dir).unwrap();
    assert!(html.contains(note), "{html}");
    assert!(!html.contains("In progress"));
}

#[test]
fn output_is_deterministic_and_several_runs_are_compared() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    let cfg = config(&["1", "2", "3"], "sim:mixed");
    let eps = |rewards: [f64; 3]| -> Vec<EpisodeRecord> {
        rewards
            .iter()
            .enumerate()
            .flat_map(|(i, r)| {
                (0..2).map(move |t| EpisodeRecord::bare(&(i + 1).to_string(), t, *r))
            })
            .collect()
    };
    write_run(&a, &cfg, &eps([1.0, 0.0, 1.0]), true);
    write_run(&b, &cfg, &eps([1.0, 1.0, 0.0]), true);
    let dirs: Vec<PathBuf> = vec![a, b];
    let one = render(&dirs, &ReportOptions::default()).unwrap();
    let two = render(&dirs, &ReportOptions::default()).unwrap();
    assert_eq!(one, two);
    assert!(one.contains("Comparison of 2 directories"));
    assert!(
        one.contains("1 better with b, 1 worse"),
        "per-task differences"
    );
    assert!(one.contains(SIMULATED_LABEL));
    assert_inert(&one);
}

#[test]
fn directories_of_no_known_kind_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let err = render_one(tmp.path()).unwrap_err();
    assert!(matches!(err, ReportError::Unrecognised(_)), "{err}");
    assert!(matches!(
        render(&[], &ReportOptions::default()),
        Err(ReportError::NoDirectories)
    ));
    let missing = tmp.path().join("nope");
    assert!(matches!(
        render_one(&missing),
        Err(ReportError::NotADirectory(_))
    ));
}

#[test]
fn an_empty_diff_patch_is_recomputed_from_the_stored_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("train");
    let cfg = TrainConfig {
        plan: TrainPlan {
            method: Method::EcdysisNofdcr,
            rounds: 2,
            test_split: None,
            test_trials: 1,
            ..TrainPlan::default()
        },
        train: config(&["1"], "sim:clumsy"),
        test_tasks: vec![],
        diagnoser: "heuristic".into(),
        coder: "rules".into(),
        gate_measure: Default::default(),
        roles: Default::default(),
        coder_network: None,
    };
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), serde_json::to_vec(&cfg).unwrap()).unwrap();
    let (inc, cand) = ("1".repeat(64), "2".repeat(64));
    // Round 2 rebuilt the accepted candidate itself: its diff.patch is empty.
    let round = |n, incumbent: &str, accepted| RoundRecord {
        round: n,
        incumbent: hash(incumbent),
        incumbent_score: 0.5,
        candidate: Some(hash(&cand)),
        candidate_score: Some(0.75),
        accepted,
        decision: String::new(),
        failures: 1,
        groups: 1,
        recurring_groups: 0,
        coder_calls: 1,
        spec: None,
        seconds: PhaseTimes::default(),
        p_value: None,
        usd: 0.0,
        edit_to_episode_seconds: Some(1.5),
        incumbent_measure: None,
        candidate_measure: None,
        gate_episodes: None,
    };
    let lines = format!(
        "{}\n{}\n",
        serde_json::to_string(&round(1, &inc, true)).unwrap(),
        serde_json::to_string(&round(2, &cand, false)).unwrap()
    );
    std::fs::write(dir.join("rounds.jsonl"), lines).unwrap();
    std::fs::write(dir.join("initial"), &inc).unwrap();
    for (h, text) in [
        (&inc, "const N: u32 = 1;\n"),
        (&cand, "const N: u32 = 2;\n"),
    ] {
        let src = dir.join("candidates").join(h).join("source/src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("tables.rs"), text).unwrap();
    }
    std::fs::write(dir.join("candidates").join(&cand).join("diff.patch"), "").unwrap();
    let html = render_one(&dir).unwrap();
    assert!(html.contains("recomputed from the stored sources"), "noted");
    assert!(
        html.contains("<span class=\"da\">+const N: u32 = 2;</span>"),
        "the real change"
    );
    // The rebuilt candidate still hangs under the initial harness.
    let initial_at = html.find(&format!("data-hash=\"{inc}\"")).unwrap();
    let cand_at = html.find(&format!("data-hash=\"{cand}\"")).unwrap();
    assert!(initial_at < cand_at);
    assert!(html.contains("same build as the incumbent"));
}

#[test]
fn the_hook_table_shows_what_each_hook_added_per_episode() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let cfg = config(&["1", "2"], "sim:oracle");
    let with_added = |task: &str, bytes: u64| {
        let mut r = hostile_episode(task, 0);
        r.hooks[0].added_bytes = bytes;
        r
    };
    // 3,000 and 1,000 bytes from `regulate` over two episodes: 2,000 per
    // episode in the table, 3,000 as the largest episode.
    write_run(
        &dir,
        &cfg,
        &[with_added("1", 3000), with_added("2", 1000)],
        true,
    );
    let html = render_one(&dir).unwrap();
    assert!(html.contains("added B / episode"), "no added-text column");
    let row = html
        .split("<tr>")
        .find(|r| r.starts_with("<td><code>regulate</code>"))
        .expect("a regulate row");
    assert!(row.contains("<td class=\"n\">2000</td>"), "{row}");
    assert!(
        html.contains("at most 3000 bytes (~"),
        "the episode maximum is missing"
    );
}

//! `--concurrency auto` against an endpoint with a fixed number of slots
//! (the mock server: requests beyond the slots queue, beyond the queue get
//! 429): the limit settles near the slots, and the results equal a
//! fixed-concurrency run's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ecdysis_model::{CachePolicy, ModelFlags};
use ecdysis_runner::eval::concurrency::{AdaptiveConcurrency, AdaptiveSettings};
use ecdysis_runner::eval::{self, ModelServices, ProgressDisplay, RunOptions, RunSpec, RunSummary};
use ecdysis_testkit::mock::{MockReply, MockRequest, MockServer};

const SLOTS: usize = 3;
const QUEUE: usize = 2;
const SERVICE: Duration = Duration::from_millis(40);

/// Writes a tool call as text, then says goodbye; each reply takes
/// [`SERVICE`] in a slot.
fn agent(req: &MockRequest) -> MockReply {
    let turns = req.json().unwrap_or_default()["messages"]
        .as_array()
        .map(|m| m.iter().filter(|x| x["role"] == "assistant").count())
        .unwrap_or(0);
    let reply = if turns <= 1 {
        MockReply::text(
            "Let me look you up.\n```json\n{\"name\": \"find_user_id_by_email\", \"arguments\": {\"email\": \"nobody@example.com\"}}\n```",
        )
    } else {
        MockReply::text("I could not find your account. Goodbye.")
    };
    reply.with_delay(SERVICE)
}

async fn run(
    server: &MockServer,
    dir: &std::path::Path,
    adaptive: bool,
) -> (RunSummary, BTreeMap<(String, u32), serde_json::Value>) {
    let data = ecdysis_tau2::locate(None).unwrap_or_else(|e| panic!("{e}"));
    let domain = ecdysis_domains::open("tau2/retail", &data).unwrap();
    let mut spec = RunSpec {
        agent: ModelFlags {
            model: Some("m-agent".into()),
            base_url: Some(server.base_url()),
            api_key_env: Some(String::new()),
            max_concurrency: Some(12),
            ..ModelFlags::default()
        },
        ..RunSpec::default()
    };
    spec.settings.trials = 3;
    let hub = ModelServices {
        cache: CachePolicy::Off,
        cache_dir: dir.join("cache"),
        prices: None,
    }
    .hub()
    .unwrap();
    let options = RunOptions {
        out: dir.join("run"),
        concurrency: if adaptive { 12 } else { SLOTS },
        adaptive: adaptive.then(|| AdaptiveConcurrency {
            settings: AdaptiveSettings {
                max: 12,
                min_window: Duration::from_millis(250),
                ..AdaptiveSettings::default()
            },
            signals: Arc::clone(hub.limiter().signals()),
        }),
        force_new: false,
        progress: ProgressDisplay::Off,
        max_requeues: 2,
    };
    let summary = eval::run_spec(&spec, None, domain, &hub, options)
        .await
        .unwrap();
    let records = eval::rundir::read_trajectories(&dir.join("run/trajectories.jsonl"), false)
        .unwrap()
        .into_iter()
        .map(|r| {
            let outcome = serde_json::json!({
                "reward": r.reward,
                "end": r.end.as_str(),
                "steps": r.steps,
                "calls": r.executed_calls(),
                "texts": r.agent_texts(),
                "evaluation": r.evaluation,
            });
            ((r.task_id, r.trial), outcome)
        })
        .collect();
    (summary, records)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_concurrency_settles_near_the_slots_with_the_results_of_a_fixed_run() {
    let tmp = tempfile::tempdir().unwrap();
    let server = MockServer::start().await.unwrap();
    server.set_handler(agent);
    server.set_capacity(SLOTS, QUEUE);
    let (auto, auto_records) = run(&server, &tmp.path().join("auto"), true).await;
    let refused = server.refused();

    let report = auto
        .concurrency
        .clone()
        .expect("the adaptive limit reports");
    let moves: Vec<String> = report
        .changes
        .iter()
        .map(|c| format!("{}->{} {:?}", c.change.from, c.change.to, c.change.reason))
        .collect();
    let settled = report.most_used_limit().expect("time at some limit");
    assert!(
        settled.abs_diff(SLOTS) <= 1,
        "most time at {settled}, slots {SLOTS}: {:?}, moves {moves:?}",
        report.seconds_at
    );
    assert!(!report.changes.is_empty());
    // The limit went past slots + queue at most briefly: what was refused
    // is what the endpoint reported, and it was answered by backing off.
    assert_eq!(report.signals.rate_limited as usize, refused);
    if refused > 0 {
        assert!(
            moves.iter().any(|m| m.ends_with("Overload")),
            "{refused} refused but no back-off: {moves:?}"
        );
    }
    // The report is in summary.json.
    let stored: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("auto/run/summary.json")).unwrap())
            .unwrap();
    assert_eq!(
        stored["concurrency"]["final_limit"],
        serde_json::json!(report.final_limit)
    );

    server.set_capacity(SLOTS, QUEUE);
    let (fixed, fixed_records) = run(&server, &tmp.path().join("fixed"), false).await;
    assert!(fixed.concurrency.is_none());
    assert_eq!(auto_records.len(), 120);
    assert_eq!(auto_records, fixed_records);
    assert_eq!(auto.metrics.accuracy, fixed.metrics.accuracy);
}

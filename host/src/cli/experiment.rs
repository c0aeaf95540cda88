//! `experiment`: the three evolution methods from the same starting
//! harness on the offline testbed, side by side.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;

use ecdysis_host::agent::Entry;
use ecdysis_host::eval::rundir::read_trajectories;
use ecdysis_host::evolve::train::{Method, TrainSummary};
use ecdysis_host::model::sim::QuirkKind;
use ecdysis_host::report::{ExperimentFile, MethodRow, TransferRow};
use ecdysis_host::store::ComponentStore;

use super::env::DataArgs;
use super::train::{TrainArgs, TrainRunArgs, train};

#[derive(Args)]
pub struct ExperimentArgs {
    /// The harness source every method starts from.
    #[arg(long, default_value = "harness-template")]
    pub source: PathBuf,
    /// Start from the source's rule engine with empty rule tables.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub start_blank: bool,
    #[arg(long, default_value = "tau2/retail")]
    pub domain: String,
    /// The simulated agent profile trained on.
    #[arg(long, default_value = "sim:clumsy")]
    pub agent_model: String,
    /// Profiles the final harness is also tested on (cross-model transfer).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "sim:mixed,sim:careless,sim:texter"
    )]
    pub transfer: Vec<String>,
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Only these training task ids (default: the whole training split).
    #[arg(long, value_delimiter = ',')]
    pub tasks: Vec<String>,
    /// Simulated latency of one coder call, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub coder_latency_ms: u64,
    #[arg(long, default_value_t = 1)]
    pub trials: u32,
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Experiment directory (one training run per method inside).
    #[arg(long, default_value = "runs/experiment")]
    pub out: PathBuf,
    #[arg(long)]
    pub cargo_target_dir: Option<PathBuf>,
}

/// Accepted rule edits, and how many of them only answer model-specific
/// quirks (the accommodation rate's numerator), judged from the testbed's
/// ground truth in the evidence episodes.
fn accommodation(run: &Path, s: &TrainSummary) -> (u32, u32) {
    let (mut edits, mut accommodating) = (0, 0);
    for r in s.rounds.iter().filter(|r| r.accepted) {
        let Some(spec) = &r.spec else { continue };
        let evals = run
            .join("evals")
            .join(format!("{}-train", &r.incumbent[..16]));
        let records =
            read_trajectories(&evals.join("trajectories.jsonl"), false).unwrap_or_default();
        for change in &spec.proposed_changes {
            edits += 1;
            let mut systematic = false;
            for rec in records
                .iter()
                .filter(|x| !x.success && change.evidence_tasks.contains(&x.task_id))
            {
                for e in &rec.transcript {
                    if let Entry::Agent {
                        testbed: Some(n), ..
                    } = e
                    {
                        systematic |= n.quirks.iter().any(|q| q.kind == QuirkKind::Systematic);
                    }
                }
            }
            accommodating += u32::from(!systematic);
        }
    }
    (edits, accommodating)
}

pub async fn experiment(
    args: ExperimentArgs,
    store: &ComponentStore,
    data: &DataArgs,
) -> Result<()> {
    let mut rows = Vec::new();
    for method in [
        Method::SelfEvolution,
        Method::EcdysisNofdcr,
        Method::Ecdysis,
    ] {
        let out = args.out.join(method.as_str());
        eprintln!("experiment: training with {} ...", method.as_str());
        let s = train(
            TrainArgs {
                method,
                source: args.source.clone(),
                rounds: args.rounds,
                lambda: 1.0,
                plateau: args.rounds,
                max_coder_calls: None,
                max_episodes: None,
                train_split: "train".into(),
                test_split: "test".into(),
                start_blank: args.start_blank,
                coder_latency_ms: args.coder_latency_ms,
                cargo_target_dir: args.cargo_target_dir.clone(),
                out: Some(out.clone()),
                roles: Default::default(),
                gate: Default::default(),
                run: TrainRunArgs {
                    domain: args.domain.clone(),
                    tasks: args.tasks.clone(),
                    trials: args.trials,
                    agent_model: args.agent_model.clone(),
                    agent_base_url: None,
                    agent_api_key_env: None,
                    user_model: "scripted".into(),
                    cache: "read-write".into(),
                    cache_dir: PathBuf::from(".ecdysis/cache"),
                    prices: None,
                    limits: Default::default(),
                    concurrency: args.concurrency,
                    seed: 0,
                },
            },
            store,
            data,
            true,
        )
        .await?;
        let (edits, acc) = accommodation(&out, &s);
        rows.push((method, s, edits, acc));
    }
    println!(
        "offline testbed ({} on {} train; simulated agents, not benchmark results), coder latency {} ms",
        args.agent_model, args.domain, args.coder_latency_ms
    );
    println!(
        "{:<16} {:>9} {:>7} {:>8} {:>15} {:>6} {:>8} {:>14}",
        "method", "train s", "coder", "rounds", "train", "test", "edits", "accommodation"
    );
    for (m, s, edits, acc) in &rows {
        println!(
            "{:<16} {:>9.1} {:>7} {:>8} {:>6.3} -> {:>5.3} {:>6} {:>8} {:>13.0}%",
            m.as_str(),
            s.wall_seconds - s.seconds.test_eval,
            s.coder_calls,
            format!("{}/{}", s.accepted, s.rounds.len()),
            s.initial_train_score,
            s.final_train_score,
            s.test_score
                .map(|t| format!("{t:.3}"))
                .unwrap_or_else(|| "-".into()),
            edits,
            if *edits > 0 {
                *acc as f64 / *edits as f64 * 100.0
            } else {
                0.0
            }
        );
    }
    let wall = |m: Method| {
        rows.iter()
            .find(|r| r.0 == m)
            .map(|r| r.1.wall_seconds - r.1.seconds.test_eval)
            .unwrap_or(0.0)
    };
    println!(
        "training wall time, self-evolution / ecdysis: {:.2}x",
        wall(Method::SelfEvolution) / wall(Method::Ecdysis).max(1e-9)
    );

    // Cross-model transfer of the Ecdysis result.
    let eco = &rows.iter().find(|r| r.0 == Method::Ecdysis).expect("ran").1;
    let mut transfer = Vec::new();
    for profile in &args.transfer {
        let mut line = format!("transfer to {profile}:");
        let mut scores = Vec::new();
        for (label, hash) in [("initial", &eco.initial), ("trained", &eco.incumbent)] {
            let run_args = super::run::RunArgs {
                harness: hash.clone(),
                domain: args.domain.clone(),
                split: "test".into(),
                tasks: vec![],
                trials: args.trials,
                agent_model: profile.clone(),
                agent_base_url: None,
                agent_api_key_env: None,
                agent_extra_args: None,
                sim_latency_ms: 0,
                user_model: "scripted".into(),
                user_base_url: None,
                concurrency: args.concurrency,
                seed: 0,
                temperature: None,
                top_p: None,
                max_tokens: None,
                out: Some(
                    args.out
                        .join(format!("transfer-{}-{label}", profile.replace(':', "-"))),
                ),
                force_new: true,
                max_steps: ecdysis_host::env::DEFAULT_MAX_STEPS,
                max_errors: ecdysis_host::env::DEFAULT_MAX_ERRORS,
                policy: ecdysis_host::sandbox::FailurePolicy::FailClosed,
                limits: Default::default(),
                cache: "off".into(),
                cache_dir: PathBuf::from(".ecdysis/cache"),
                prices: None,
                max_requeues: 0,
            };
            let s = super::run::run(run_args, store, data, true).await?;
            line += &format!("  {label} {:.3}", s.metrics.accuracy);
            scores.push(s.metrics.accuracy);
        }
        println!("{line}   (test split)");
        let dir = |label: &str| format!("transfer-{}-{label}", profile.replace(':', "-"));
        transfer.push(TransferRow {
            profile: profile.clone(),
            initial_score: scores[0],
            trained_score: scores[1],
            initial_dir: dir("initial"),
            trained_dir: dir("trained"),
        });
    }
    write_experiment_file(&args, &rows, transfer)?;
    Ok(())
}

/// `experiment.json`: the table above, for `ecdysis-host report`.
fn write_experiment_file(
    args: &ExperimentArgs,
    rows: &[(Method, TrainSummary, u32, u32)],
    transfer: Vec<TransferRow>,
) -> Result<()> {
    let file = ExperimentFile {
        domain: args.domain.clone(),
        agent_model: args.agent_model.clone(),
        simulated: args.agent_model.starts_with("sim:"),
        rounds: args.rounds,
        trials: args.trials,
        coder_latency_ms: args.coder_latency_ms,
        methods: rows
            .iter()
            .map(|(m, s, edits, acc)| MethodRow {
                method: m.as_str().to_string(),
                dir: m.as_str().to_string(),
                train_seconds: s.wall_seconds - s.seconds.test_eval,
                coder_calls: s.coder_calls,
                accepted: s.accepted,
                rounds: s.rounds.len() as u32,
                initial_train_score: s.initial_train_score,
                final_train_score: s.final_train_score,
                test_score: s.test_score,
                edits: *edits,
                accommodating_edits: *acc,
                accommodation_pct: (*edits > 0).then(|| *acc as f64 / *edits as f64 * 100.0),
                usd: s.usage.total.usd,
                tokens: s.usage.total.fresh_tokens.prompt_tokens
                    + s.usage.total.fresh_tokens.completion_tokens,
            })
            .collect(),
        transfer,
    };
    let path = args.out.join(ecdysis_host::report::EXPERIMENT_FILE);
    ecdysis_host::fsutil::atomic_write(&path, &serde_json::to_vec_pretty(&file)?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

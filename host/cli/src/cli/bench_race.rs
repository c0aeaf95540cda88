//! `ecdysis-host bench --race DIR...`: the racing gate replayed over
//! recorded training runs whose gates evaluated every task. Each round's
//! candidate and incumbent episodes are read back and raced with the
//! gate's own code ([`race::replay`]: its order, batches and standing);
//! the raced decision is set beside the full gate's ([`accept::decide`])
//! and the round's recorded one, with what the race would have saved.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use ecdysis_evolve::evaluate::task_budget::Selection;
use ecdysis_evolve::gate::accept;
use ecdysis_evolve::gate::race;
use ecdysis_evolve::train::{RoundRecord, TrainConfig};
use ecdysis_runner::agent::EpisodeRecord;
use ecdysis_runner::eval::rundir::read_trajectories;
use ecdysis_runner::eval::spec::SCRIPTED_USER;
use ecdysis_sys::layout::TrainLayout;

/// One round's gate, replayed.
#[derive(Debug, Clone, Serialize)]
pub struct RoundReplay {
    /// The round number.
    pub round: u32,
    /// The candidate's hash (first 12 digits).
    pub candidate: String,
    /// What the round recorded.
    pub recorded_accepted: bool,
    /// What the full gate decides on the recorded episodes.
    pub full_accepted: bool,
    /// What the raced gate decides on them.
    pub raced_accepted: bool,
    /// What the race settled (`reject`, `accept`, or `open` to the end).
    pub settled: race::Settled,
    /// Episodes the full gate evaluates.
    pub needed: u64,
    /// Episodes the raced gate evaluates.
    pub run: u64,
    /// Episodes known when the decision became certain, if before the
    /// last batch.
    pub decided_after: Option<u64>,
    /// Model calls of the episodes the race does not run (the agent's,
    /// and an LLM user's turns).
    pub calls_saved: u64,
    /// Model calls of every episode the full gate runs.
    pub calls_needed: u64,
    /// The agent's prompt and completion tokens in the episodes not run.
    pub tokens_saved: u64,
    /// Summed wall time of the episodes not run, in seconds (episode
    /// time, not the gate's wall time: episodes run side by side).
    pub episode_seconds_saved: f64,
}

impl RoundReplay {
    /// Whether every decision agrees: recorded, full and raced.
    pub fn identical(&self) -> bool {
        self.full_accepted == self.raced_accepted && self.full_accepted == self.recorded_accepted
    }
}

/// One training run, replayed.
#[derive(Debug, Clone, Serialize)]
pub struct RunReplay {
    /// The run directory.
    pub dir: PathBuf,
    /// Its evolution method.
    pub method: String,
    /// Its acceptance rule (`strict`, or `paired` with α).
    pub rule: String,
    /// Its agent model; a `sim:` one is simulated, never a benchmark.
    pub agent_model: String,
    /// Whether the agent is simulated.
    pub simulated: bool,
    /// Distinct training tasks.
    pub tasks: usize,
    /// Trials per task.
    pub trials: u32,
    /// Rounds recorded.
    pub rounds_recorded: usize,
    /// The rounds whose candidate reached the gate's evaluation.
    pub gates: Vec<RoundReplay>,
}

/// Per method, over every run read.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MethodTotals {
    /// Runs read with at least one round.
    pub runs: usize,
    /// Whether any of them had a simulated agent.
    pub simulated: bool,
    /// Gate evaluations replayed.
    pub gates: usize,
    /// Of those, with every decision identical.
    pub identical: usize,
    /// Candidate episodes the raced gates run.
    pub run: u64,
    /// Candidate episodes the full gates run.
    pub needed: u64,
    /// Model calls saved.
    pub calls_saved: u64,
    /// Model calls of the full gates.
    pub calls_needed: u64,
    /// Agent tokens saved.
    pub tokens_saved: u64,
    /// Episode seconds saved.
    pub episode_seconds_saved: f64,
}

/// The whole replay.
#[derive(Debug, Clone, Serialize)]
pub struct RaceBench {
    /// The race's batches: episodes at once.
    pub concurrency: usize,
    /// Every run read.
    pub runs: Vec<RunReplay>,
    /// Per method.
    pub methods: BTreeMap<String, MethodTotals>,
}

impl RaceBench {
    /// Gate evaluations whose decisions differ.
    pub fn mismatches(&self) -> usize {
        self.runs
            .iter()
            .flat_map(|r| &r.gates)
            .filter(|g| !g.identical())
            .count()
    }
}

/// Replay every training run in `dirs` (a run, or a directory whose
/// subdirectories are runs, as an experiment's).
pub fn replay_dirs(dirs: &[PathBuf], concurrency: usize) -> Result<RaceBench> {
    if concurrency == 0 {
        bail!("--race-concurrency must be at least 1");
    }
    let mut runs = vec![];
    for dir in dirs {
        for run in training_runs(dir)? {
            runs.push(replay_run(&run, concurrency)?);
        }
    }
    let mut methods: BTreeMap<String, MethodTotals> = BTreeMap::new();
    // A run without rounds (an experiment's untrained baselines) is no
    // method's.
    for run in runs.iter().filter(|r| r.rounds_recorded > 0) {
        let m = methods.entry(run.method.clone()).or_default();
        m.runs += 1;
        m.simulated |= run.simulated;
        for g in &run.gates {
            m.gates += 1;
            m.identical += usize::from(g.identical());
            m.run += g.run;
            m.needed += g.needed;
            m.calls_saved += g.calls_saved;
            m.calls_needed += g.calls_needed;
            m.tokens_saved += g.tokens_saved;
            m.episode_seconds_saved += g.episode_seconds_saved;
        }
    }
    Ok(RaceBench {
        concurrency,
        runs,
        methods,
    })
}

/// `dir` itself when it is a training run, else its subdirectories that
/// are (sorted); neither is an error naming what was looked for.
fn training_runs(dir: &Path) -> Result<Vec<PathBuf>> {
    if !dir.is_dir() {
        bail!("{}: no such directory", dir.display());
    }
    if TrainLayout::is_training_run(dir) {
        return Ok(vec![dir.to_path_buf()]);
    }
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    let mut runs: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && TrainLayout::is_training_run(p))
        .collect();
    runs.sort();
    if runs.is_empty() {
        let t = TrainLayout::new(dir);
        bail!(
            "{} is not a training run ({} with {} is missing) and holds none",
            dir.display(),
            t.config().display(),
            t.rounds().display()
        );
    }
    Ok(runs)
}

/// Read a JSON file, naming it in any error.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", path.display()))
}

/// Every episode of one evaluation's result directory; a missing file is
/// an error naming it.
fn episodes(path: &Path, whose: &str) -> Result<Vec<EpisodeRecord>> {
    if !path.is_file() {
        bail!("{}: missing ({whose} episodes)", path.display());
    }
    Ok(read_trajectories(path, false)?)
}

/// The tasks and result label the run's gate used: the selection's when
/// it trained on a selected budget, else every training task.
fn training_tasks(layout: &TrainLayout, config: &TrainConfig) -> Result<(Vec<String>, String)> {
    match config.plan.select {
        None => Ok((config.train.tasks.clone(), "train".into())),
        Some(sel) => {
            let selection: Selection = read_json(&layout.selection())?;
            let label = format!("train-{}-{}", sel.strategy.as_str(), sel.budget);
            Ok((selection.tasks, label))
        }
    }
}

fn replay_run(dir: &Path, concurrency: usize) -> Result<RunReplay> {
    let layout = TrainLayout::new(dir);
    let config: TrainConfig = read_json(&layout.config())?;
    let rounds_path = layout.rounds();
    if !rounds_path.is_file() {
        bail!("{}: missing (the run's rounds)", rounds_path.display());
    }
    let rounds: Vec<RoundRecord> = ecdysis_runner::eval::rundir::read_jsonl(&rounds_path, false)?;
    let (tasks, label) = training_tasks(&layout, &config)?;
    let trials = config.train.settings.trials;
    let distinct: BTreeSet<&String> = tasks.iter().collect();
    let needed = distinct.len() as u64 * u64::from(trials);
    let llm_user = config.train.user_model != SCRIPTED_USER;
    let mut gates = vec![];
    for r in &rounds {
        // A candidate that never reached the evaluation (it did not load,
        // failed the check or the screen) has no score and no gate to race.
        let (Some(cand), Some(_)) = (&r.candidate, r.candidate_score) else {
            continue;
        };
        let label = if config.gate_measure.remeasure {
            format!("{label}-round{}", r.round)
        } else {
            label.clone()
        };
        let inc_path = layout.eval(r.incumbent.as_str(), &label).trajectories();
        let cand_path = layout.eval(cand.as_str(), &label).trajectories();
        let incumbent = episodes(&inc_path, "the incumbent's")?;
        let candidate = episodes(&cand_path, "the candidate's")?;
        let have = candidate
            .iter()
            .filter(|e| distinct.contains(&e.task_id) && e.trial < trials)
            .map(|e| (e.task_id.as_str(), e.trial))
            .collect::<BTreeSet<_>>()
            .len() as u64;
        if have < needed {
            bail!(
                "{}: {have} of the {needed} episodes the full gate evaluates in round {} \
                 (was the run recorded with --gate-race on? replay needs runs recorded \
                 with --gate-race off)",
                cand_path.display(),
                r.round
            );
        }
        gates.push(replay_round(
            r,
            config.plan.accept,
            &tasks,
            &incumbent,
            &candidate,
            (trials, concurrency),
            llm_user,
        ));
    }
    Ok(RunReplay {
        dir: dir.to_path_buf(),
        method: config.plan.method.as_str().into(),
        rule: rule_name(config.plan.accept),
        agent_model: config.train.agent_model.to_string(),
        simulated: config.train.agent_model.is_simulated(),
        tasks: distinct.len(),
        trials,
        rounds_recorded: rounds.len(),
        gates,
    })
}

fn rule_name(rule: accept::AcceptRule) -> String {
    match rule {
        accept::AcceptRule::Strict => "strict".into(),
        accept::AcceptRule::Paired { alpha } => format!("paired (alpha {alpha})"),
    }
}

fn replay_round(
    r: &RoundRecord,
    rule: accept::AcceptRule,
    tasks: &[String],
    incumbent: &[EpisodeRecord],
    candidate: &[EpisodeRecord],
    (trials, concurrency): (u32, usize),
    llm_user: bool,
) -> RoundReplay {
    let full = accept::decide(rule, incumbent, candidate).accepted;
    let raced = race::replay(rule, tasks, incumbent, candidate, trials, concurrency);
    // The race runs the first tasks of its order; the rest it saves.
    let ran: BTreeSet<String> = race::order(tasks, incumbent)
        .into_iter()
        .take(raced.tasks_run)
        .collect();
    let calls =
        |e: &EpisodeRecord| e.agent_usage.calls + if llm_user { e.user_usage.calls } else { 0 };
    let skipped: Vec<&EpisodeRecord> = candidate
        .iter()
        .filter(|e| !ran.contains(&e.task_id))
        .collect();
    RoundReplay {
        round: r.round,
        candidate: r
            .candidate
            .as_ref()
            .map(|c| c.as_str().chars().take(12).collect())
            .unwrap_or_default(),
        recorded_accepted: r.accepted,
        full_accepted: full,
        raced_accepted: raced.accepted,
        settled: raced.settled,
        needed: candidate.len() as u64,
        run: raced.run,
        decided_after: raced.decided_after,
        calls_saved: skipped.iter().map(|e| calls(e)).sum(),
        calls_needed: candidate.iter().map(calls).sum(),
        tokens_saved: skipped
            .iter()
            .map(|e| e.agent_usage.prompt_tokens + e.agent_usage.completion_tokens)
            .sum(),
        // A fold from +0: an empty f64 sum is -0.
        episode_seconds_saved: skipped.iter().fold(0.0, |s, e| s + e.wall_ms as f64 / 1e3),
    }
}

/// The report: a block per run with a line per gate, a loud line for any
/// decision that differs, and the table per method.
pub fn render(bench: &RaceBench) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    if bench.runs.iter().any(|r| r.simulated) {
        line(format!("note: {}", ecdysis_runner::eval::SIMULATED_LABEL));
    }
    line(format!(
        "racing gate replayed on recorded rounds (batches of {} episode(s) at once)",
        bench.concurrency
    ));
    for run in &bench.runs {
        line(String::new());
        line(format!(
            "{}: {}, {}, agent {}{}, {} task(s) x {} trial(s), {} round(s), {} gate evaluation(s)",
            run.dir.display(),
            run.method,
            run.rule,
            run.agent_model,
            if run.simulated { " (simulated)" } else { "" },
            run.tasks,
            run.trials,
            run.rounds_recorded,
            run.gates.len()
        ));
        for g in &run.gates {
            let verdict = |a: bool| if a { "accept" } else { "reject" };
            line(format!(
                "  round {} ({}): recorded {}, full gate {}, raced {}; {} of {} episodes, \
                 {} model call(s) and {} token(s) saved, {:.1} episode-s",
                g.round,
                g.candidate,
                verdict(g.recorded_accepted),
                verdict(g.full_accepted),
                verdict(g.raced_accepted),
                g.run,
                g.needed,
                g.calls_saved,
                g.tokens_saved,
                g.episode_seconds_saved
            ));
            if !g.identical() {
                line(format!(
                    "  !!! MISMATCH in {} round {}: recorded {}, full gate {}, raced {} !!!",
                    run.dir.display(),
                    g.round,
                    verdict(g.recorded_accepted),
                    verdict(g.full_accepted),
                    verdict(g.raced_accepted)
                ));
            }
        }
    }
    line(String::new());
    line(format!(
        "{:<16} {:>4} {:>6} {:>10} {:>16} {:>20} {:>12}",
        "method", "runs", "gates", "identical", "episodes run", "model calls saved", "tokens saved"
    ));
    for (method, m) in &bench.methods {
        let share = |a: u64, b: u64| {
            if b == 0 {
                0.0
            } else {
                100.0 * a as f64 / b as f64
            }
        };
        let identical = format!("{}/{}", m.identical, m.gates);
        let episodes = format!("{}/{} ({:.0}%)", m.run, m.needed, share(m.run, m.needed));
        let calls = format!(
            "{}/{} ({:.0}%)",
            m.calls_saved,
            m.calls_needed,
            share(m.calls_saved, m.calls_needed)
        );
        line(format!(
            "{method:<16} {:>4} {:>6} {identical:>10} {episodes:>16} {calls:>20} {:>12}{}",
            m.runs,
            m.gates,
            m.tokens_saved,
            if m.simulated { "  simulated" } else { "" }
        ));
    }
    out
}

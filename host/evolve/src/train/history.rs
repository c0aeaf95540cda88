//! The records a training run writes: one [`RoundRecord`] per round in
//! `rounds.jsonl`, a [`RoundTranscript`] per round, the [`LedgerFile`] and
//! the final [`TrainSummary`].

use serde::{Deserialize, Serialize};

use super::{CoderId, DiagnoserId, Method};
use crate::diagnose::change_spec::ChangeSpec;
use crate::diagnose::fdcr::FdcrOutcome;
use crate::evaluate::task_budget::Selection;
use ecdysis_model::{CallRecord, LedgerSummary};
use ecdysis_runner::eval::intervals::TaskIntervals;
use ecdysis_sandbox::store::ComponentHash;

/// One coder invocation, as `transcript.json` records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoderRun {
    /// Who edited.
    pub coder: CoderId,
    /// Whether the coder finished without an error.
    pub ok: bool,
    /// Model calls or command runs inside this invocation.
    pub attempts: u32,
    /// Files it changed, relative to the crate.
    pub changed_files: Vec<String>,
    /// Whether its last build check compiled.
    pub build_ok: bool,
    /// Why it failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its log (model turns, command output), clipped.
    pub log: String,
    /// What it was asked to do (the spec, the evidence it read, the
    /// domain), so its replies can be replayed ([`crate::coder_bench`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<crate::code::CoderTask>,
}

/// `rounds/<n>/transcript.json` (and the candidate's copy).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundTranscript {
    /// The round number.
    pub round: u32,
    /// Who diagnosed.
    pub diagnoser: DiagnoserId,
    /// The scrubbed evidence each diagnosed unit was shown (failure
    /// excerpts by group, and successes on the same tools).
    #[serde(default)]
    pub evidence: Vec<String>,
    /// FDCR discussions, one per diagnosed unit (empty for the heuristic).
    pub discussions: Vec<FdcrOutcome>,
    /// Every coder invocation of the round.
    pub coder_runs: Vec<CoderRun>,
}

/// `ledger.json`: every metered model call of the run (across resumes) and
/// their totals per role and model.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LedgerFile {
    /// Totals per role and model.
    pub summary: LedgerSummary,
    /// Every call.
    pub calls: Vec<CallRecord>,
}

/// One round's record in `rounds.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundRecord {
    /// The round number (from 1).
    pub round: u32,
    /// The incumbent the round started from.
    pub incumbent: ComponentHash,
    /// Its training score.
    pub incumbent_score: f64,
    /// The candidate built this round, if one was.
    pub candidate: Option<ComponentHash>,
    /// Its training score, if it reached the gate's evaluation.
    pub candidate_score: Option<f64>,
    /// Whether the candidate became the incumbent.
    pub accepted: bool,
    /// Why not accepted (or `accepted`).
    pub decision: String,
    /// Failures (episodes below λ) of the incumbent.
    pub failures: usize,
    /// Failure groups after cross-task aggregation.
    pub groups: usize,
    /// Groups seen on more than one task.
    pub recurring_groups: usize,
    /// Coder calls this round.
    pub coder_calls: u32,
    /// The (merged) change spec the coder implemented.
    pub spec: Option<ChangeSpec>,
    /// Seconds per phase.
    pub seconds: PhaseTimes,
    /// The paired test's p-value (`--accept paired`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p_value: Option<f64>,
    /// Dollars spent by every role during this round.
    #[serde(default)]
    pub usd: f64,
    /// Seconds from the coder's last edit to the candidate's first episode
    /// (incremental guest build, precompile and instantiation), when a
    /// candidate got that far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit_to_episode_seconds: Option<f64>,
    /// Where `incumbent_score` comes from: `fresh` (measured this round, on
    /// the tasks, trials and seeds the candidate gets, because the agent
    /// is not deterministic) or `reused` (its stored evaluation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incumbent_measure: Option<Measure>,
    /// Where `candidate_score` comes from (always measured this round).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_measure: Option<Measure>,
    /// The gate's episodes: needed by the full gate, run, and not needed
    /// because the decision was certain. After a raced rejection
    /// `candidate_score` is the most the candidate could have scored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_episodes: Option<crate::gate::race::GateEpisodes>,
}

/// How a score of a round was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// Measured in this round (a fresh draw of a stochastic agent; with
    /// the response cache bypassed).
    Fresh,
    /// The stored evaluation of this harness on the same tasks and trials
    /// (a deterministic agent gives the same episodes again).
    Reused,
}

impl Measure {
    /// The word `rounds.jsonl` and the printed table use.
    pub fn as_str(self) -> &'static str {
        match self {
            Measure::Fresh => "fresh",
            Measure::Reused => "reused",
        }
    }
}

/// One harness on the held-out split: accuracy and pass^k with 95%
/// bootstrap intervals over tasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestScore {
    /// The component hash, or `direct` for the Direct baseline.
    pub harness: String,
    /// Tasks evaluated.
    pub tasks: u64,
    /// Trials per task.
    pub trials: u32,
    /// Episodes scored.
    pub episodes: u64,
    /// Accuracy and pass^k (k = 1..=trials) with their intervals.
    pub intervals: TaskIntervals,
    /// The evaluation's result directory, relative to the run directory.
    pub dir: String,
}

impl TestScore {
    /// `0.433 [0.300, 0.567], pass^1 0.433 ... pass^3 0.300 [...]`.
    pub fn render(&self) -> String {
        let i = &self.intervals;
        let mut out = format!(
            "accuracy {:.3} [{:.3}, {:.3}]",
            i.accuracy.estimate, i.accuracy.low, i.accuracy.high
        );
        for (k, v) in &i.pass_hat_k {
            out += &format!(", pass^{k} {:.3} [{:.3}, {:.3}]", v.estimate, v.low, v.high);
        }
        out += &format!(" ({} tasks x {} trial(s))", self.tasks, self.trials);
        out
    }
}

/// The held-out evaluation at the end of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestReport {
    /// The held-out split.
    pub split: Option<String>,
    /// The starting harness.
    pub initial: TestScore,
    /// The final incumbent (the same numbers as `initial` when nothing was
    /// accepted).
    #[serde(rename = "final")]
    pub final_: TestScore,
    /// No harness at all, when asked (`--test-direct`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct: Option<TestScore>,
    /// The final incumbent with only the layers layer selection chose
    /// (`--select-layers`, when it dropped any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen_layers: Option<TestScore>,
    /// What the held-out comparison with the starting harness can detect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<crate::gate::power::PowerStatement>,
}

/// Seconds spent per phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseTimes {
    /// Evaluating the incumbent on the training tasks.
    pub train_eval: f64,
    /// Collecting and aggregating failures.
    pub aggregation: f64,
    /// Diagnosis (heuristic or FDCR).
    pub diagnosis: f64,
    /// The coder.
    pub coder: f64,
    /// Building the candidate.
    pub build: f64,
    /// Check, screen and the candidate's evaluation.
    pub gate: f64,
    /// The held-out evaluation at the end.
    pub test_eval: f64,
}

impl PhaseTimes {
    /// Add another's phases to these.
    pub fn add(&mut self, o: &PhaseTimes) {
        self.train_eval += o.train_eval;
        self.aggregation += o.aggregation;
        self.diagnosis += o.diagnosis;
        self.coder += o.coder;
        self.build += o.build;
        self.gate += o.gate;
        self.test_eval += o.test_eval;
    }
}

/// `summary.json` of a training run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainSummary {
    /// The evolution method.
    pub method: Method,
    /// The starting harness.
    pub initial: ComponentHash,
    /// The final incumbent.
    pub incumbent: ComponentHash,
    /// Every round's record.
    pub rounds: Vec<RoundRecord>,
    /// The starting harness's training score.
    pub initial_train_score: f64,
    /// The final incumbent's training score.
    pub final_train_score: f64,
    /// The final incumbent's held-out accuracy (also in `test`).
    pub test_score: Option<f64>,
    /// The held-out evaluation of the initial and the final harness (and
    /// Direct when asked), with `--test-trials` trials per task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<TestReport>,
    /// Rounds whose candidate was accepted.
    pub accepted: u32,
    /// Coder calls in all.
    pub coder_calls: u32,
    /// Episodes paid for by this training run (every evaluation, across
    /// resumes).
    pub episodes: u64,
    /// Seconds per phase over the run.
    pub seconds: PhaseTimes,
    /// Wall time of this invocation.
    pub wall_seconds: f64,
    /// Why the loop ended (`rounds`, `plateau`, a budget, `stop file`).
    #[serde(default)]
    pub stopped: String,
    /// The training tasks, when a budget selected them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<Selection>,
    /// The final incumbent's layer ablation (`--select-layers`): the
    /// variants, their paired differences and the chosen layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_selection: Option<crate::ablate::Ablation>,
    /// What the training tasks and trials let the gate detect, from the
    /// starting harness's evaluation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<crate::gate::power::PowerStatement>,
    /// Tokens, calls, cache hits and dollars per role and model, over the
    /// whole run (also in `ledger.json`).
    #[serde(default)]
    pub usage: LedgerSummary,
    /// Whether the agent was a `sim:` testbed model: then every score here
    /// is a simulated result, never a benchmark result.
    #[serde(default)]
    pub simulated: bool,
    /// The label every output of a simulated run carries
    /// ("simulated agent — not a benchmark result").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

impl TrainSummary {
    /// The text `train` prints: scores, rounds, why it stopped, usage.
    pub fn render(&self) -> String {
        let s = self;
        let mut out = String::new();
        if s.simulated {
            out += &format!("note: {}\n", ecdysis_runner::eval::SIMULATED_LABEL);
        }
        out += &format!(
            "method {}: train {:.3} -> {:.3}{}; {} of {} rounds accepted; {} coder calls; {} episodes; {:.1}s\n",
            s.method.as_str(),
            s.initial_train_score,
            s.final_train_score,
            s.test_score
                .map(|t| format!(", test {t:.3}"))
                .unwrap_or_default(),
            s.accepted,
            s.rounds.len(),
            s.coder_calls,
            s.episodes,
            s.wall_seconds
        );
        for r in &s.rounds {
            let measures = match (r.incumbent_measure, r.candidate_measure) {
                (Some(i), Some(c)) => {
                    format!(" [incumbent {}, candidate {}]", i.as_str(), c.as_str())
                }
                (Some(i), None) => format!(" [incumbent {}]", i.as_str()),
                _ => String::new(),
            };
            out += &format!(
                "  round {}: {} failures, {} groups ({} recurring), {} coder calls{}: {}{measures}\n",
                r.round,
                r.failures,
                r.groups,
                r.recurring_groups,
                r.coder_calls,
                r.edit_to_episode_seconds
                    .map(|s| format!(", edit to first episode {s:.1} s"))
                    .unwrap_or_default(),
                r.decision
            );
        }
        if let Some(p) = &s.power {
            out += &p.render();
        }
        if let Some(a) = &s.layer_selection {
            out += "layer ablation of the final incumbent on the training tasks:\n";
            out += &a.render();
        }
        if let Some(t) = &s.test {
            out += &format!(
                "held-out {}{}:\n  initial  {}\n  final    {}\n",
                t.split.as_deref().unwrap_or("split"),
                if s.simulated {
                    " (simulated agent — not a benchmark result)"
                } else {
                    ""
                },
                t.initial.render(),
                t.final_.render()
            );
            if let Some(d) = &t.direct {
                out += &format!("  direct   {}\n", d.render());
            }
            if let (Some(c), Some(a)) = (&t.chosen_layers, &s.layer_selection) {
                out += &format!("  chosen   {} (layers {})\n", c.render(), a.chosen);
            }
            if let Some(p) = &t.power {
                out += &format!("  held-out {}", p.render());
            }
        }
        if !s.stopped.is_empty() {
            out += &format!("stopped: {}\n", s.stopped);
        }
        if let Some(sel) = &s.selection {
            out += &format!(
                "trained on {} selected tasks ({}): {}\n",
                sel.tasks.len(),
                sel.strategy.as_str(),
                sel.tasks.join(",")
            );
        }
        out += &render_usage(&s.usage);
        out += &format!("incumbent {}\n", s.incumbent);
        out
    }
}

/// Tokens, calls and dollars per role, as the paper reports them.
pub fn render_usage(u: &LedgerSummary) -> String {
    if u.by_role.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "{:<10} {:>7} {:>7} {:>12} {:>12} {:>10}\n",
        "role", "calls", "hits", "prompt tok", "compl tok", "USD"
    );
    let rows = u.by_role.iter().map(|(r, t)| (r.as_str(), t));
    for (role, t) in rows.chain([("total", &u.total)]) {
        out += &format!(
            "{:<10} {:>7} {:>7} {:>12} {:>12} {:>10.4}\n",
            role,
            t.fresh_calls + t.failed_calls,
            t.cache_hits,
            t.fresh_tokens.prompt_tokens,
            t.fresh_tokens.completion_tokens,
            t.usd
        );
    }
    if !u.unpriced_models.is_empty() {
        out += &format!(
            "(no price for: {}; pass --prices to cost them)\n",
            u.unpriced_models
                .iter()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    out
}

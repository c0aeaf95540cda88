//! `experiment`: the three evolution methods from the same starting harness,
//! side by side, on the offline testbed (or with real role models), with
//! the accommodation rate and cross-model transfer. The result is written
//! as `experiment.json` in the experiment directory (one training run per
//! method beside it) and rendered as the comparison table.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::gate::accept;
use crate::train::{
    self, CoderId, DiagnoserId, Method, TestScore, TrainPlan, TrainSpec, TrainSpecError,
    TrainSummary,
};
use ecdysis_env::Domain;
use ecdysis_model::sim::QuirkKind;
use ecdysis_model::{ModelFlags, ModelId};
use ecdysis_runner::agent::{Entry, EpisodeRecord};
use ecdysis_runner::eval::rundir::{RunLayout, TrainLayout, read_trajectories, write_json};
use ecdysis_runner::eval::{
    self, ModelServices, ProgressDisplay, RunOptions, RunSpec, SIMULATED_LABEL,
};
use ecdysis_sandbox::sandbox::Sandbox;
use ecdysis_sandbox::store::{ComponentHash, ComponentStore};
use ecdysis_sys::progress::PROGRESS;

/// The methods of the comparison, in the order they run.
pub const METHODS: [Method; 3] = [
    Method::SelfEvolution,
    Method::EcdysisNofdcr,
    Method::Ecdysis,
];

/// The order the methods are trained in: Ecdysis first.
fn run_order() -> impl Iterator<Item = Method> {
    METHODS.into_iter().rev()
}

/// An experiment: one training spec run once per method, then the
/// Ecdysis result tested on other agent models.
#[derive(Debug, Clone)]
pub struct ExperimentSpec {
    /// The training run every method shares (its `method` is replaced).
    pub train: TrainSpec,
    /// Agent models the initial and the trained harness are also tested on
    /// (cross-model transfer), on the held-out tasks: each a model name and,
    /// when it is served elsewhere, its endpoint (else the agent's).
    pub transfer: Vec<ModelFlags>,
    /// The experiment directory (one training run per method inside).
    pub out: PathBuf,
    /// A hand-configured baseline: rule-table edits a person chose
    /// ([`crate::code::rule_coder::HandConfigured`]), applied to a copy of the
    /// starting harness and evaluated like Human-Augmented. It is the
    /// ceiling the edit vocabulary allows: training reaching it by itself
    /// is the result, and the gap says which step fell short.
    pub hand_configured: Option<PathBuf>,
}

/// One method's row of the comparison.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MethodRow {
    /// The method.
    pub method: Method,
    /// Training wall time without the held-out evaluation, in seconds.
    pub train_seconds: f64,
    /// Coder calls.
    pub coder_calls: u32,
    /// Accepted rounds.
    pub accepted: u32,
    /// Rounds run.
    pub rounds: u32,
    /// The initial harness's training score.
    pub initial_train: f64,
    /// The final incumbent's training score.
    pub final_train: f64,
    /// The final incumbent's held-out score.
    pub test: Option<f64>,
    /// The final incumbent's held-out evaluation (accuracy and pass^k with
    /// intervals), when the run had a test split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_detail: Option<TestScore>,
    /// One-sided paired sign-flip p-value of the final incumbent's held-out
    /// episodes against Human-Augmented's (the same tasks, trials and
    /// seeds): could the gain over the starting harness be chance?
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_p_vs_human: Option<f64>,
    /// `test_p_vs_human` adjusted for the methods compared with
    /// Human-Augmented (Holm's step-down method).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_p_holm: Option<f64>,
    /// Accepted rule edits.
    pub edits: u32,
    /// Accepted edits that only answer model-specific quirks, judged from
    /// the testbed's ground truth (`None` without a testbed agent).
    pub accommodating: Option<u32>,
    /// Tokens over every role.
    pub tokens: u64,
    /// Dollars over every role.
    pub usd: f64,
    /// The training run's directory.
    pub dir: PathBuf,
    /// Other methods this row stands for, because they ran the same code
    /// (offline, Ecdysis without role models is Ecdysis without FDCR).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub same_as: Vec<Method>,
    /// Who diagnosed in this method's run (`config.json`'s `diagnoser`).
    #[serde(default)]
    pub diagnoser: DiagnoserId,
    /// Seconds spent in coder calls (real, or the simulated latency).
    #[serde(default)]
    pub coder_seconds: f64,
    /// Accepted changes classified from measurements (transfer to the
    /// other agent models on the training tasks), with the agreement with
    /// the testbed's ground truth on simulated agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_accommodation: Option<MeasuredAccommodation>,
}

/// One accepted candidate judged by measurement: it counts as
/// accommodation when it raised the training agent's score but not, on
/// average, the score of the other agents that had room to gain (an edit
/// that helps one model only answers that model's habits). An agent that
/// already solved every evidence task under the parent cannot show a gain,
/// so it does not vote; with no agent left the label is undetermined.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasuredChange {
    /// The round that accepted it.
    pub round: u32,
    /// The candidate.
    pub candidate: ComponentHash,
    /// Its gain over its parent for the training agent (the gate's scores).
    pub train_gain: f64,
    /// Its gain over its parent for each other agent model, on the
    /// training tasks.
    pub other_gains: Vec<(ModelId, f64)>,
    /// The other agents that solved every evidence task of the change
    /// (the tasks its spec cites; all training tasks without a spec) under
    /// the parent: left out of the label.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub no_headroom: Vec<ModelId>,
    /// The measured label; `None` when no other agent had headroom.
    pub accommodation: Option<bool>,
    /// The testbed's label (most of its edits answer model-specific
    /// quirks), on simulated agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ground_truth: Option<bool>,
}

impl MeasuredChange {
    /// The label from the gains: `None` when every other agent is in
    /// `no_headroom`.
    pub fn label(
        train_gain: f64,
        other_gains: &[(ModelId, f64)],
        no_headroom: &[ModelId],
    ) -> Option<bool> {
        let voting: Vec<f64> = other_gains
            .iter()
            .filter(|(m, _)| !no_headroom.contains(m))
            .map(|(_, g)| *g)
            .collect();
        (!voting.is_empty())
            .then(|| train_gain > 0.0 && voting.iter().sum::<f64>() / voting.len() as f64 <= 0.0)
    }
}

/// The measured accommodation of a method's accepted changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasuredAccommodation {
    /// The other agent models measured.
    pub models: Vec<ModelId>,
    /// Every accepted candidate.
    pub changes: Vec<MeasuredChange>,
}

impl MeasuredAccommodation {
    /// Measured accommodation rate over the accepted candidates with a
    /// label (`None` without any).
    pub fn rate(&self) -> Option<f64> {
        let (accommodating, labelled) = self.counts();
        (labelled > 0).then(|| accommodating as f64 / labelled as f64)
    }

    /// Accepted candidates labelled accommodation, and those labelled at all.
    pub fn counts(&self) -> (usize, usize) {
        let labelled = self.changes.iter().filter_map(|c| c.accommodation);
        (labelled.clone().filter(|&a| a).count(), labelled.count())
    }

    /// `[[both, measured only], [truth only, neither]]` over candidates
    /// with a ground truth and a measured label.
    pub fn confusion(&self) -> [[u32; 2]; 2] {
        let mut m = [[0; 2]; 2];
        for c in &self.changes {
            if let (Some(t), Some(a)) = (c.ground_truth, c.accommodation) {
                m[usize::from(!t)][usize::from(!a)] += 1;
            }
        }
        m
    }

    /// Share of candidates with a ground truth whose labels agree.
    pub fn agreement(&self) -> Option<f64> {
        let m = self.confusion();
        let n = m[0][0] + m[0][1] + m[1][0] + m[1][1];
        (n > 0).then(|| f64::from(m[0][0] + m[1][1]) / f64::from(n))
    }
}

impl MethodRow {
    /// A method's row from its training summary, before what only the
    /// experiment judges (edits, accommodation, the rows it stands for,
    /// the diagnoser): those start empty.
    pub fn from_summary(s: &TrainSummary, dir: &Path) -> MethodRow {
        MethodRow {
            method: s.method,
            train_seconds: s.wall_seconds - s.seconds.test_eval,
            coder_calls: s.coder_calls,
            accepted: s.accepted,
            rounds: s.rounds.len() as u32,
            initial_train: s.initial_train_score,
            final_train: s.final_train_score,
            test: s.test_score,
            test_detail: s.test.as_ref().map(|t| t.final_.clone()),
            test_p_vs_human: None,
            test_p_holm: None,
            edits: 0,
            accommodating: None,
            tokens: s.usage.total.fresh_tokens.prompt_tokens
                + s.usage.total.fresh_tokens.completion_tokens,
            usd: s.usage.total.usd,
            dir: dir.to_path_buf(),
            same_as: vec![],
            diagnoser: DiagnoserId::default(),
            coder_seconds: s.seconds.coder,
            measured_accommodation: None,
        }
    }

    /// The row's name: the method, and the methods it stands for.
    pub fn name(&self) -> String {
        std::iter::once(self.method)
            .chain(self.same_as.iter().copied())
            .map(Method::as_str)
            .collect::<Vec<_>>()
            .join(" = ")
    }
}

/// The note on a row that stands for Ecdysis and Ecdysis-without-FDCR.
pub const SAME_CODE_NOTE: &str = "heuristic diagnoser; FDCR needs role models";

impl MethodRow {
    /// The accommodation rate in percent, where it can be judged.
    pub fn accommodation_percent(&self) -> Option<f64> {
        let acc = self.accommodating?;
        Some(if self.edits > 0 {
            f64::from(acc) / f64::from(self.edits) * 100.0
        } else {
            0.0
        })
    }
}

/// The initial and trained harness on another agent model.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TransferRow {
    /// The agent model.
    pub agent_model: ModelId,
    /// The initial harness's test score.
    pub initial: f64,
    /// The trained harness's test score.
    pub trained: f64,
}

/// A baseline of the paper's main table: no training, the same training
/// tasks and held-out evaluation as the methods.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BaselineRow {
    /// `direct` (no harness at all) or `human-augmented` (the source
    /// harness as written, rule tables included).
    pub name: String,
    /// `direct`, or the component hash.
    pub harness: String,
    /// Mean reward on the training tasks.
    pub train: f64,
    /// The held-out evaluation (accuracy and pass^k with intervals), when
    /// the experiment has a test split.
    pub test: Option<TestScore>,
    /// Paired p-value against Human-Augmented on the held-out episodes
    /// (one-sided: this baseline better), for Direct.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_p_vs_human: Option<f64>,
}

impl BaselineRow {
    /// The held-out accuracy.
    pub fn test_accuracy(&self) -> Option<f64> {
        self.test.as_ref().map(|t| t.intervals.accuracy.estimate)
    }
}

/// Where the baselines' evaluations are kept, inside the experiment
/// directory (a training directory of zero rounds).
pub const BASELINES_DIR: &str = "baselines";

/// The hand-configured baseline's training directory (its source beside it,
/// `hand-configured.source`).
pub const HAND_CONFIGURED_DIR: &str = "hand-configured";

/// `experiment.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExperimentReport {
    /// "simulated agent — not a benchmark result" when the agent is a
    /// `sim:` model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Who edits.
    #[serde(default)]
    pub coder: CoderId,
    /// The domain.
    pub domain: String,
    /// The agent trained on.
    pub agent_model: ModelId,
    /// Whether it is a `sim:` testbed agent (then nothing here is a
    /// benchmark result).
    pub simulated: bool,
    /// Simulated latency per coder call, in milliseconds.
    pub coder_latency_ms: u64,
    /// Who diagnosed (`heuristic` offline, else `fdcr`).
    pub diagnoser: DiagnoserId,
    /// Direct and Human-Augmented, the untrained baselines (absent in
    /// files written before they were measured).
    #[serde(default)]
    pub baselines: Vec<BaselineRow>,
    /// One row per method.
    pub methods: Vec<MethodRow>,
    /// Cross-model transfer of the Ecdysis result.
    pub transfer: Vec<TransferRow>,
    /// What the training tasks let the gate detect (every method trains on
    /// the same tasks and trials: Ecdysis's statement).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<crate::gate::power::PowerStatement>,
    /// What the held-out comparison with Human-Augmented can detect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_power: Option<crate::gate::power::PowerStatement>,
}

/// Accepted rule edits of a training run, and how many of them only answer
/// model-specific quirks (the accommodation rate's numerator), judged from
/// the testbed's ground truth in the evidence episodes.
pub fn accommodation(run: &Path, s: &TrainSummary) -> (u32, u32) {
    s.rounds
        .iter()
        .filter(|r| r.accepted)
        .map(|r| round_accommodation(run, r))
        .fold((0, 0), |(e, a), (re, ra)| (e + re, a + ra))
}

/// One accepted round's edits and how many only answer model-specific
/// quirks, from the testbed's ground truth.
fn round_accommodation(run: &Path, r: &train::RoundRecord) -> (u32, u32) {
    let Some(spec) = &r.spec else {
        return (0, 0);
    };
    let evals = TrainLayout::new(run).eval(r.incumbent.as_str(), "train");
    let records = read_trajectories(&evals.trajectories(), false).unwrap_or_default();
    let accommodating = spec
        .proposed_changes
        .iter()
        .filter(|change| {
            // Model-specific only: no systematic quirk in its evidence.
            !records
                .iter()
                .filter(|x| !x.success && change.evidence_tasks.contains(&x.task_id))
                .flat_map(|rec| &rec.transcript)
                .any(|e| match e {
                    Entry::Agent {
                        testbed: Some(n), ..
                    } => n.quirks.iter().any(|q| q.kind == QuirkKind::Systematic),
                    _ => false,
                })
        })
        .count() as u32;
    (spec.proposed_changes.len() as u32, accommodating)
}

/// Run the experiment: train with each method, then test the Ecdysis
/// result on the transfer models; writes and returns `experiment.json`.
pub async fn run(
    spec: &ExperimentSpec,
    store: &ComponentStore,
    domain: Arc<dyn Domain>,
    services: &ModelServices,
) -> Result<ExperimentReport, TrainSpecError> {
    // The process's one engine, shared by every training and transfer run.
    let sandbox = Sandbox::pooled(
        spec.train.eval.settings.limits.clone(),
        spec.train.concurrency,
    )
    .map_err(train::TrainError::from)?;
    let shared = Shared {
        store,
        domain: domain.clone(),
        services,
        sandbox: &sandbox,
    };
    let mut methods = Vec::new();
    let mut ecdysis: Option<TrainSummary> = None;
    // Without role models Ecdysis diagnoses with the heuristic, exactly as
    // Ecdysis without FDCR does: one run, one row that says so.
    let fdcr = spec.train.roles.any_fdcr();
    // With real models each run takes hours, so the runs go in the order of
    // what the comparison needs most: Ecdysis first, the transfer test, and
    // the baselines last (Human-Augmented's episodes are every method's
    // initial ones, replayed from the response cache; Direct is new work).
    // The rows keep METHODS order.
    for method in run_order() {
        if !fdcr && method == Method::EcdysisNofdcr {
            continue;
        }
        let dir = spec.out.join(method.as_str());
        tracing::info!(target: PROGRESS, "experiment: training with {} ...", method.as_str());
        // Only Ecdysis deliberates; the others keep the coder.
        let roles = if method == Method::Ecdysis {
            spec.train.roles.clone()
        } else {
            spec.train.roles.without_fdcr()
        };
        let train_spec = TrainSpec {
            plan: TrainPlan {
                method,
                ..spec.train.plan.clone()
            },
            roles,
            ..spec.train.clone()
        };
        let s =
            train::run_spec(&train_spec, store, domain.clone(), services, &sandbox, &dir).await?;
        let (edits, accommodating) = accommodation(&dir, &s);
        let mut row = MethodRow::from_summary(&s, &dir);
        row.edits = edits;
        row.accommodating = s.simulated.then_some(accommodating);
        if !fdcr && method == Method::Ecdysis {
            row.same_as = vec![Method::EcdysisNofdcr];
        }
        row.diagnoser = read_config(&dir).map(|c| c.diagnoser).unwrap_or_default();
        row.measured_accommodation = measure_accommodation(spec, &shared, &dir, &s).await?;
        if method == Method::Ecdysis {
            ecdysis = Some(s.clone());
        }
        methods.push((row, s));
    }
    let eco = ecdysis.expect("Ecdysis is one of the methods");
    let mut transfer = Vec::new();
    for model in &spec.transfer {
        let name = transfer_id(model);
        let mut scores = [0.0; 2];
        for (i, (label, hash)) in [("initial", &eco.initial), ("trained", &eco.incumbent)]
            .into_iter()
            .enumerate()
        {
            let out = spec
                .out
                .join(format!("transfer-{}-{label}", name.file_stem()));
            tracing::info!(
                target: PROGRESS,
                "experiment: transfer: the {label} harness with {name} on the held-out tasks ..."
            );
            scores[i] = transfer_score(spec, &shared, model, hash, out).await?;
        }
        transfer.push(TransferRow {
            agent_model: name,
            initial: scores[0],
            trained: scores[1],
        });
    }
    tracing::info!(target: PROGRESS, "experiment: evaluating the baselines (direct, human-augmented) ...");
    let mut baselines = baselines(spec, &shared).await?;
    // Human-Augmented's held-out episodes: every method's final harness is
    // compared with them, pair by pair.
    let human_test = baselines
        .iter()
        .find(|b| b.name == "human-augmented")
        .and_then(|b| b.test.as_ref())
        .map(|t| held_out_episodes(&spec.out.join(BASELINES_DIR), t));
    if let Some(file) = &spec.hand_configured {
        tracing::info!(target: PROGRESS, "experiment: evaluating the hand-configured baseline ({}) ...", file.display());
        baselines.push(hand_configured(spec, &shared, file, human_test.as_deref()).await?);
    }
    let mut methods: Vec<MethodRow> = methods
        .into_iter()
        .map(|(mut row, s)| {
            row.test_p_vs_human = human_test
                .as_ref()
                .zip(s.test.as_ref())
                .map(|(human, t)| paired_p(human, &held_out_episodes(&row.dir, &t.final_)));
            row
        })
        .collect();
    methods.sort_by_key(|r: &MethodRow| METHODS.iter().position(|m| *m == r.method));
    // Several methods are each compared with the same baseline: the
    // family's error rate is held by Holm's adjustment, which needs no
    // independence between the comparisons.
    let raw: Vec<f64> = methods.iter().filter_map(|r| r.test_p_vs_human).collect();
    let mut adjusted = holm(&raw).into_iter();
    for r in methods.iter_mut().filter(|r| r.test_p_vs_human.is_some()) {
        r.test_p_holm = adjusted.next();
    }
    let simulated = spec.train.eval.is_simulated();
    let report = ExperimentReport {
        label: simulated.then(|| SIMULATED_LABEL.to_string()),
        coder: methods
            .first()
            .and_then(|m| read_config(&m.dir))
            .map(|c| c.coder)
            .unwrap_or_default(),
        domain: spec.train.eval.settings.domain.clone(),
        agent_model: spec.train.eval.agent_model(),
        simulated,
        coder_latency_ms: spec.train.plan.coder_latency_ms,
        diagnoser: if spec.train.roles.any_fdcr() {
            DiagnoserId::Fdcr("fdcr".into())
        } else {
            DiagnoserId::Heuristic
        },
        baselines,
        methods,
        transfer,
        power: eco.power.clone(),
        test_power: eco.test.as_ref().and_then(|t| t.power.clone()),
    };
    write_json(&spec.out.join("experiment.json"), &report).map_err(train::TrainError::from)?;
    Ok(report)
}

/// Direct and Human-Augmented on the methods' training tasks and held-out
/// split. Human-Augmented is the source harness as written (a training run
/// of zero rounds with the rule tables kept, which also tests Direct on
/// the held-out split); Direct's training score is one more run without a
/// harness. Resumable like every run: finished evaluations are not redone.
async fn baselines(
    spec: &ExperimentSpec,
    shared: &Shared<'_>,
) -> Result<Vec<BaselineRow>, TrainSpecError> {
    let dir = spec.out.join(BASELINES_DIR);
    let s = untrained(spec, shared, &spec.train.source, true, &dir).await?;
    let direct_train = harness_score(
        spec,
        shared,
        &spec.train.eval,
        None,
        TrainLayout::new(&dir)
            .direct_eval("train")
            .root()
            .to_path_buf(),
        false,
    )
    .await?;
    let test = s.test.as_ref();
    let direct_p = test.and_then(|t| {
        let direct = t.direct.as_ref()?;
        Some(paired_p(
            &held_out_episodes(&dir, &t.initial),
            &held_out_episodes(&dir, direct),
        ))
    });
    Ok(vec![
        BaselineRow {
            name: "direct".into(),
            harness: "direct".into(),
            train: direct_train,
            test: test.and_then(|t| t.direct.clone()),
            test_p_vs_human: direct_p,
        },
        BaselineRow {
            name: "human-augmented".into(),
            harness: s.initial.to_string(),
            train: s.initial_train_score,
            test: test.map(|t| t.initial.clone()),
            test_p_vs_human: None,
        },
    ])
}

/// A training run of zero rounds of the harness at `source` (nobody
/// diagnoses or edits): its evaluation on the training tasks and the
/// held-out split, with Direct's held-out test too when `test_direct`.
async fn untrained(
    spec: &ExperimentSpec,
    shared: &Shared<'_>,
    source: &Path,
    test_direct: bool,
    dir: &Path,
) -> Result<TrainSummary, TrainSpecError> {
    let zero = TrainSpec {
        plan: TrainPlan {
            method: Method::SelfEvolution,
            rounds: 0,
            plateau: 0,
            start_blank: false,
            test_direct,
            ..spec.train.plan.clone()
        },
        roles: spec.train.roles.without_fdcr(),
        source: source.to_path_buf(),
        ..spec.train.clone()
    };
    train::run_spec(
        &zero,
        shared.store,
        shared.domain.clone(),
        shared.services,
        shared.sandbox,
        dir,
    )
    .await
}

/// Holm's step-down adjustment of `p` (same order): the k-th smallest of m
/// p-values is multiplied by m − k + 1, made monotone, capped at 1.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut out = vec![0.0; m];
    let mut running: f64 = 0.0;
    for (k, &i) in order.iter().enumerate() {
        running = running.max(((m - k) as f64 * p[i]).min(1.0));
        out[i] = running;
    }
    out
}

/// The hand-configured baseline: the edits applied to a fresh copy of the
/// starting harness (`<out>/hand-configured-source`), then a training run
/// of zero rounds on it, as Human-Augmented's, compared pair by pair with
/// Human-Augmented's held-out episodes.
async fn hand_configured(
    spec: &ExperimentSpec,
    shared: &Shared<'_>,
    file: &Path,
    human_test: Option<&[EpisodeRecord]>,
) -> Result<BaselineRow, TrainSpecError> {
    let source_error = |reason: String| TrainSpecError::Source {
        path: file.to_path_buf(),
        reason,
    };
    let hand = crate::code::rule_coder::HandConfigured::read(file)
        .map_err(|e| source_error(e.to_string()))?;
    // The copy keeps the crate's layout: `harness/` with the WIT package
    // beside it, where the crate's bindings look for it.
    let staged = spec.out.join(HAND_CONFIGURED_DIR).with_extension("source");
    let source = staged.join("harness");
    crate::staging::fresh_copy(&spec.train.source, &source)
        .map_err(|e| source_error(e.to_string()))?;
    if let Some(wit) = spec.train.source.parent().map(|p| p.join("wit"))
        && wit.is_dir()
    {
        crate::staging::fresh_copy(&wit, &staged.join("wit"))
            .map_err(|e| source_error(e.to_string()))?;
    }
    let changed = hand
        .apply(&source)
        .map_err(|e| source_error(e.to_string()))?;
    if changed == 0 {
        return Err(source_error(
            "its edits change nothing in the starting harness".into(),
        ));
    }
    let dir = spec.out.join(HAND_CONFIGURED_DIR);
    let s = untrained(spec, shared, &source, false, &dir).await?;
    let test = s.test.as_ref().map(|t| t.initial.clone());
    let p = human_test
        .zip(test.as_ref())
        .map(|(human, t)| paired_p(human, &held_out_episodes(&dir, t)));
    Ok(BaselineRow {
        name: "hand-configured".into(),
        harness: s.initial.to_string(),
        train: s.initial_train_score,
        test,
        test_p_vs_human: p,
    })
}

/// A method's training configuration, as its run directory holds it.
fn read_config(dir: &Path) -> Option<train::TrainConfig> {
    serde_json::from_slice(&std::fs::read(TrainLayout::new(dir).config()).ok()?).ok()
}

/// What every run of an experiment shares.
struct Shared<'a> {
    store: &'a ComponentStore,
    domain: Arc<dyn Domain>,
    services: &'a ModelServices,
    sandbox: &'a Sandbox,
}

/// `0.433 [0.300, 0.567]`, or the bare accuracy of files written before
/// intervals were kept, or `-`.
fn test_cell(detail: Option<&TestScore>, accuracy: Option<f64>) -> String {
    match (detail, accuracy) {
        (Some(t), _) => {
            let a = &t.intervals.accuracy;
            format!("{:.3} [{:.3}, {:.3}]", a.estimate, a.low, a.high)
        }
        (None, Some(a)) => format!("{a:.3}"),
        (None, None) => "-".into(),
    }
}

/// The held-out episodes of one test evaluation (`score.dir` is relative
/// to the run directory `run`); none when they cannot be read.
fn held_out_episodes(run: &Path, score: &TestScore) -> Vec<EpisodeRecord> {
    read_trajectories(&RunLayout::new(run.join(&score.dir)).trajectories(), false)
        .unwrap_or_default()
}

/// One-sided paired sign-flip p-value that `candidate` beats `reference`
/// over their common (task, trial) episodes, tasks as the units.
fn paired_p(reference: &[EpisodeRecord], candidate: &[EpisodeRecord]) -> f64 {
    accept::decide(
        accept::AcceptRule::Paired { alpha: 1.0 },
        reference,
        candidate,
    )
    .p_value
    .unwrap_or(1.0)
}

/// The test score of `hash` with another agent model, on the held-out
/// tasks and trials of the methods.
async fn transfer_score(
    spec: &ExperimentSpec,
    shared: &Shared<'_>,
    model: &ModelFlags,
    hash: &ComponentHash,
    out: PathBuf,
) -> Result<f64, TrainSpecError> {
    let mut run_spec = RunSpec {
        tasks: spec.train.test_tasks.clone(),
        ..with_agent(spec, model)
    };
    run_spec.settings.split = spec.train.plan.test_split.clone();
    run_spec.settings.trials = spec.train.plan.test_trials;
    harness_score(spec, shared, &run_spec, Some(hash), out, true).await
}

/// The name a transfer model's results are filed and shown under.
fn transfer_id(model: &ModelFlags) -> ModelId {
    ModelId::new(model.model.clone().unwrap_or_default())
}

/// The training evaluation's spec with another agent model (served at the
/// agent's endpoint unless it names its own).
fn with_agent(spec: &ExperimentSpec, model: &ModelFlags) -> RunSpec {
    RunSpec {
        agent: ModelFlags {
            model: model.model.clone(),
            base_url: model
                .base_url
                .clone()
                .or_else(|| spec.train.eval.agent.base_url.clone()),
            ..spec.train.eval.agent.clone()
        },
        ..spec.train.eval.clone()
    }
}

/// Every accepted candidate of a method's run (in `dir`) and its parent,
/// evaluated on the run's training tasks with each transfer model, and
/// classified ([`MeasuredChange`]); `None` without transfer models.
async fn measure_accommodation(
    spec: &ExperimentSpec,
    shared: &Shared<'_>,
    dir: &Path,
    s: &TrainSummary,
) -> Result<Option<MeasuredAccommodation>, TrainSpecError> {
    if spec.transfer.is_empty() {
        return Ok(None);
    }
    let tasks = s
        .selection
        .as_ref()
        .map(|sel| sel.tasks.clone())
        .unwrap_or_else(|| spec.train.eval.tasks.clone());
    let models: Vec<ModelId> = spec.transfer.iter().map(transfer_id).collect();
    let mut changes = Vec::new();
    for r in s.rounds.iter().filter(|r| r.accepted) {
        let (Some(candidate), Some(candidate_score)) = (&r.candidate, r.candidate_score) else {
            continue;
        };
        let evidence = evidence_tasks(r, &tasks);
        let mut other_gains = Vec::new();
        let mut no_headroom = Vec::new();
        for (model, name) in spec.transfer.iter().zip(&models) {
            let run_spec = RunSpec {
                tasks: tasks.clone(),
                ..with_agent(spec, model)
            };
            let mut score = [0.0; 2];
            for (i, h) in [&r.incumbent, candidate].into_iter().enumerate() {
                let out =
                    dir.join("accommodation")
                        .join(format!("{}-{}", h.short(), name.file_stem()));
                tracing::info!(
                    target: PROGRESS,
                    "accommodation: round {} {} {} with {name} on {} training task(s)",
                    r.round,
                    if i == 0 { "parent" } else { "candidate" },
                    h.short(),
                    tasks.len()
                );
                score[i] =
                    harness_score(spec, shared, &run_spec, Some(h), out.clone(), false).await?;
                if i == 0 && solved_all(&out, &evidence)? {
                    no_headroom.push(name.clone());
                }
            }
            other_gains.push((name.clone(), score[1] - score[0]));
        }
        let train_gain = candidate_score - r.incumbent_score;
        let (edits, accommodating) = round_accommodation(dir, r);
        changes.push(MeasuredChange {
            round: r.round,
            candidate: candidate.clone(),
            train_gain,
            accommodation: MeasuredChange::label(train_gain, &other_gains, &no_headroom),
            other_gains,
            no_headroom,
            ground_truth: (s.simulated && edits > 0).then_some(2 * accommodating > edits),
        });
    }
    Ok(Some(MeasuredAccommodation { models, changes }))
}

/// The tasks a round's change was meant to fix: those its spec cites as
/// evidence, else every training task.
fn evidence_tasks(r: &train::RoundRecord, tasks: &[String]) -> Vec<String> {
    let mut cited: Vec<String> = r
        .spec
        .iter()
        .flat_map(|s| &s.proposed_changes)
        .flat_map(|c| c.evidence_tasks.iter().cloned())
        .filter(|t| tasks.contains(t))
        .collect();
    cited.sort();
    cited.dedup();
    if cited.is_empty() {
        tasks.to_vec()
    } else {
        cited
    }
}

/// Whether every episode of `evidence` in the run at `out` succeeded (an
/// agent with nothing left to gain there).
fn solved_all(out: &Path, evidence: &[String]) -> Result<bool, TrainSpecError> {
    let records = read_trajectories(&RunLayout::new(out).trajectories(), false)
        .map_err(train::TrainError::from)?;
    let mut seen = false;
    for rec in records.iter().filter(|x| evidence.contains(&x.task_id)) {
        if !rec.success {
            return Ok(false);
        }
        seen = true;
    }
    Ok(seen)
}

/// The accuracy of `hash` (Direct when `None`) under `run_spec`, written to
/// `out` (started afresh with `force_new`, else resumed).
async fn harness_score(
    spec: &ExperimentSpec,
    shared: &Shared<'_>,
    run_spec: &RunSpec,
    hash: Option<&ComponentHash>,
    out: PathBuf,
    force_new: bool,
) -> Result<f64, TrainSpecError> {
    let harness = match hash {
        Some(hash) => {
            let (loaded, _) = shared
                .store
                .load(shared.sandbox, hash)
                .map_err(train::TrainError::from)?;
            Some((hash.clone(), loaded))
        }
        None => None,
    };
    // A simulated evaluation takes seconds; a real one can take an hour, so
    // it reports its episodes as it goes.
    let progress = if run_spec.is_simulated() {
        ProgressDisplay::Off
    } else {
        ProgressDisplay::Lines
    };
    let options = RunOptions {
        out,
        concurrency: spec.train.concurrency,
        adaptive: None,
        force_new,
        progress,
        max_requeues: 0,
    };
    let hub = shared.services.hub()?;
    let summary = eval::run_spec(run_spec, harness, shared.domain.clone(), &hub, options)
        .await
        .map_err(train::TrainError::from)?;
    Ok(summary.metrics.accuracy)
}

impl ExperimentReport {
    /// The comparison table, labelled when the agent is simulated.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Some(l) = &self.label {
            out += &format!("note: {l}\n");
        }
        out += &format!(
            "{} on {} train, diagnoser {}, coder {}\n",
            self.agent_model, self.domain, self.diagnoser, self.coder,
        );
        out += &format!(
            "{:<34} {:>9} {:>7} {:>8} {:>15} {:>22} {:>8} {:>6} {:>14}\n",
            "method",
            "train s",
            "coder",
            "rounds",
            "train",
            "test [95% CI]",
            "p vs HA",
            "edits",
            "accommodation"
        );
        // The untrained baselines first, as in the paper's main table.
        for b in &self.baselines {
            out += &format!(
                "{:<34} {:>9} {:>7} {:>8} {:>15.3} {:>22} {:>8} {:>6} {:>14}\n",
                format!("{} (baseline)", b.name),
                "-",
                "-",
                "-",
                b.train,
                test_cell(b.test.as_ref(), b.test_accuracy()),
                accept::p_cell(b.test_p_vs_human),
                "-",
                "-"
            );
        }
        for r in &self.methods {
            out += &format!(
                "{:<34} {:>9.1} {:>7} {:>8} {:>6.3} -> {:>5.3} {:>22} {:>8} {:>6} {:>14}\n",
                r.name(),
                r.train_seconds,
                r.coder_calls,
                format!("{}/{}", r.accepted, r.rounds),
                r.initial_train,
                r.final_train,
                test_cell(r.test_detail.as_ref(), r.test),
                accept::p_cell(r.test_p_vs_human),
                r.edits,
                r.accommodation_percent()
                    .map(|p| format!("{p:.0}%"))
                    .unwrap_or_else(|| "-".into())
            );
            if !r.same_as.is_empty() {
                out += &format!("  ({SAME_CODE_NOTE})\n");
            }
        }
        let holm: Vec<String> = self
            .methods
            .iter()
            .filter_map(|r| {
                Some(format!(
                    "{} {}",
                    r.name(),
                    accept::p_cell(Some(r.test_p_holm?))
                ))
            })
            .collect();
        if !holm.is_empty() {
            out += &format!(
                "p vs HA adjusted for {} comparisons (Holm): {}\n",
                holm.len(),
                holm.join(", ")
            );
        }
        let row = |m: Method| {
            self.methods
                .iter()
                .find(|r| r.method == m || r.same_as.contains(&m))
        };
        if let (Some(se), Some(eco)) = (row(Method::SelfEvolution), row(Method::Ecdysis)) {
            let calls = se.coder_calls + eco.coder_calls;
            let latency = if !self.coder.is_real() {
                format!(
                    "with a simulated coder latency of {} ms per coder call, which this ratio depends on",
                    self.coder_latency_ms
                )
            } else {
                format!(
                    "with real coder calls ({}): {:.1} s per call on average",
                    self.coder,
                    (se.coder_seconds + eco.coder_seconds) / f64::from(calls.max(1))
                )
            };
            out += &format!(
                "training wall time, self-evolution / ecdysis: {:.2}x ({latency})\n",
                se.train_seconds / eco.train_seconds.max(1e-9)
            );
        }
        for t in &self.transfer {
            out += &format!(
                "transfer to {}:  initial {:.3}  trained {:.3}   (test split)\n",
                t.agent_model, t.initial, t.trained
            );
        }
        for r in &self.methods {
            let Some(m) = &r.measured_accommodation else {
                continue;
            };
            let (accommodating, labelled) = m.counts();
            let undetermined = m.changes.len() - labelled;
            out += &format!(
                "measured accommodation of {} (transfer to {} on the training tasks): {accommodating}/{labelled} accepted candidates{}{}",
                r.name(),
                m.models
                    .iter()
                    .map(ModelId::as_str)
                    .collect::<Vec<_>>()
                    .join(", "),
                if undetermined > 0 {
                    format!(" ({undetermined} more undetermined: no other agent had headroom)")
                } else {
                    String::new()
                },
                m.rate()
                    .map(|x| format!(" ({:.1}%)", x * 100.0))
                    .unwrap_or_default()
            );
            if let Some(a) = m.agreement() {
                let c = m.confusion();
                out += &format!(
                    "; testbed ground truth {}; agreement {:.0}% (both {}, measured only {}, truth only {}, neither {})",
                    r.accommodation_percent()
                        .map(|p| format!("{p:.1}% of edits"))
                        .unwrap_or_else(|| "-".into()),
                    a * 100.0,
                    c[0][0],
                    c[0][1],
                    c[1][0],
                    c[1][1]
                );
            }
            out.push('\n');
        }
        if let Some(p) = &self.power {
            out += &format!("training {}", p.render());
        }
        if let Some(p) = &self.test_power {
            out += &format!("held-out {}", p.render());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holm_multiplies_by_rank_and_stays_monotone() {
        let adj = holm(&[0.01, 0.04, 0.03]);
        // Sorted: 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → 0.06.
        let want = [0.03, 0.06, 0.06];
        for (a, w) in adj.iter().zip(want) {
            assert!((a - w).abs() < 1e-12, "{adj:?}");
        }
        assert_eq!(holm(&[0.9, 0.8]), vec![1.0, 1.0]);
        assert!(holm(&[]).is_empty());
        // One comparison: unchanged.
        assert_eq!(holm(&[0.2]), vec![0.2]);
    }

    fn change(gains: &[(&str, f64)], no_headroom: &[&str], truth: bool) -> MeasuredChange {
        let other_gains: Vec<(ModelId, f64)> =
            gains.iter().map(|(m, g)| (ModelId::new(*m), *g)).collect();
        let no_headroom: Vec<ModelId> = no_headroom.iter().map(|m| ModelId::new(*m)).collect();
        MeasuredChange {
            round: 1,
            candidate: ComponentHash::of(b"c"),
            train_gain: 0.25,
            accommodation: MeasuredChange::label(0.25, &other_gains, &no_headroom),
            other_gains,
            no_headroom,
            ground_truth: Some(truth),
        }
    }

    #[test]
    fn agents_without_headroom_do_not_vote_and_none_left_leaves_the_label_open() {
        // b's zero gain would make this accommodation; b had nothing to gain.
        let a = change(&[("a", 0.2), ("b", -0.4)], &["b"], false);
        assert_eq!(a.accommodation, Some(false));
        assert_eq!(
            change(&[("a", 0.2), ("b", -0.4)], &[], true).accommodation,
            Some(true)
        );
        let open = change(&[("a", 0.0)], &["a"], true);
        assert_eq!(open.accommodation, None);
        let m = MeasuredAccommodation {
            models: vec!["a".into(), "b".into()],
            changes: vec![a, change(&[("a", 0.0), ("b", 0.0)], &[], true), open],
        };
        assert_eq!(m.counts(), (1, 2));
        assert_eq!(m.rate(), Some(0.5));
        // The undetermined one is outside the confusion matrix.
        assert_eq!(m.confusion(), [[1, 0], [0, 1]]);
        assert_eq!(m.agreement(), Some(1.0));
    }

    #[test]
    fn a_label_from_an_older_file_still_reads() {
        let hash = ComponentHash::of(b"c");
        let old = format!(
            r#"{{"round":1,"candidate":"{hash}","train_gain":0.1,"other_gains":[["a",0.0]],"accommodation":true}}"#
        );
        let c: MeasuredChange = serde_json::from_str(&old).unwrap();
        assert_eq!((c.accommodation, c.no_headroom.len()), (Some(true), 0));
    }
}

//! One round of evolution as a type: evaluate → aggregate → diagnose/code
//! → build → check → screen → gate → decide, with one close.
//!
//! Each phase either hands the next phase its input or ends the round with
//! a decision (`ControlFlow::Break`); [`Round::run`] closes the round the
//! same way whatever the outcome: phase times and dollars into the record,
//! the record appended to `rounds.jsonl`, the ledger saved. A kill after
//! the close loses nothing of the round; a kill before it redoes the round
//! (every evaluation resumes from its own result directory).

use std::ops::ControlFlow;
use std::path::Path;
use std::time::Instant;

use std::collections::BTreeSet;

use super::dir::{TrainDir, write_json};
use super::history::{CoderRun, Measure, PhaseTimes, RoundRecord, RoundTranscript};
use super::{CoderId, Diagnoser, Draw, Method, TrainConfig, TrainContext, TrainError, TrainTasks};
use crate::aggregate::failure_record::{self, FailureRecord};
use crate::aggregate::{self, FailureGroup};
use crate::code::rule_coder;
use crate::code::{CoderError, CoderTask, Snapshot, src_diff};
use crate::diagnose::change_spec::ChangeSpec;
use crate::diagnose::fdcr::{self, EvidenceLimits, FdcrInput, HarnessFocus};
use crate::diagnose::heuristic::{self, ToolFacts};
use crate::diagnose::token_budget::{Section, estimate_tokens};
use crate::gate::accept;
use crate::gate::race::{self, GateEpisodes, GateRace, Settled};
use crate::gate::screen;
use crate::staging;
use ecdysis_runner::agent::EpisodeRecord;
use ecdysis_sandbox::store::{ComponentHash, Containment, Manifest, StoreError, Trust};
use ecdysis_sys::fsutil::PathError;

/// A phase's result: its output, or the round's decision.
type Phase<T> = Result<ControlFlow<String, T>, TrainError>;

/// The incumbent's evaluation this round.
struct Evaluated {
    records: Vec<EpisodeRecord>,
    failures: Vec<FailureRecord>,
    successes: Vec<FailureRecord>,
    groups: Vec<FailureGroup>,
}

/// One round in progress.
pub(super) struct Round<'a> {
    cx: &'a TrainContext,
    config: &'a TrainConfig,
    dir: &'a TrainDir,
    tasks: &'a TrainTasks,
    incumbent: ComponentHash,
    record: RoundRecord,
    transcript: RoundTranscript,
    times: PhaseTimes,
    usd_before: f64,
}

impl<'a> Round<'a> {
    pub(super) fn new(
        cx: &'a TrainContext,
        config: &'a TrainConfig,
        dir: &'a TrainDir,
        tasks: &'a TrainTasks,
        n: u32,
        incumbent: ComponentHash,
    ) -> Self {
        Round {
            cx,
            config,
            dir,
            tasks,
            record: RoundRecord {
                round: n,
                incumbent: incumbent.clone(),
                incumbent_score: 0.0,
                candidate: None,
                candidate_score: None,
                accepted: false,
                decision: String::new(),
                failures: 0,
                groups: 0,
                recurring_groups: 0,
                coder_calls: 0,
                spec: None,
                seconds: PhaseTimes::default(),
                p_value: None,
                usd: 0.0,
                edit_to_episode_seconds: None,
                incumbent_measure: None,
                candidate_measure: None,
                gate_episodes: None,
            },
            transcript: RoundTranscript {
                round: n,
                diagnoser: config.diagnoser.clone(),
                evidence: vec![],
                discussions: vec![],
                coder_runs: vec![],
            },
            incumbent,
            times: PhaseTimes::default(),
            usd_before: cx.ledger.summary().total.usd,
        }
    }

    /// Run every phase, then close. `coder_calls` is the run's count so far
    /// (budgets are checked before each coder call).
    pub(super) async fn run(mut self, coder_calls: &mut u32) -> Result<RoundRecord, TrainError> {
        self.record.decision = self.decide(coder_calls).await?;
        self.close()
    }

    /// The phases in order; the first that ends the round gives its
    /// decision, else the gate's verdict does.
    async fn decide(&mut self, coder_calls: &mut u32) -> Result<String, TrainError> {
        let evaluated = self.evaluate_incumbent().await?;
        if evaluated.failures.is_empty() {
            // No diagnosis and no coder call: there is nothing to learn from.
            return Ok(format!(
                "nothing to fix: no episode below λ = {}",
                self.config.plan.lambda
            ));
        }
        let spec = match self.diagnose_and_code(&evaluated, coder_calls).await? {
            ControlFlow::Continue(spec) => spec,
            ControlFlow::Break(why) => return Ok(why),
        };
        let edited = Instant::now();
        let manifest = match self.build_candidate(&spec)? {
            ControlFlow::Continue(m) => m,
            ControlFlow::Break(why) => return Ok(why),
        };
        self.gate(&manifest.hash, &evaluated.records, edited).await
    }

    /// Evaluate the incumbent on the training tasks and group its failures
    /// across tasks.
    async fn evaluate_incumbent(&mut self) -> Result<Evaluated, TrainError> {
        let clock = Instant::now();
        let (label, draw, measure) = self.measurement();
        let (summary, records) = self
            .cx
            .evaluate_with(
                self.dir,
                &self.config.train,
                Some(&self.incumbent),
                &self.tasks.tasks,
                self.config.train.settings.split.clone(),
                &label,
                draw,
            )
            .await?;
        self.times.train_eval = clock.elapsed().as_secs_f64();
        self.record.incumbent_score = summary.metrics.accuracy;
        self.record.incumbent_measure = Some(measure);

        let clock = Instant::now();
        let lambda = self.config.plan.lambda;
        let failures = failure_record::failures(&records, lambda);
        let successes = records
            .iter()
            .filter(|r| r.reward >= lambda)
            .map(FailureRecord::from_episode)
            .collect();
        // Aggregation sees every episode of the incumbent already evaluated:
        // with a selected budget, the starting harness's episodes on the
        // rest of the pool too (a mechanism recurs across the pool even
        // where the budget kept one task of it).
        let pool = self.pool_failures(&records, lambda).await?;
        let mut evidence = failures.clone();
        evidence.extend(pool);
        let groups = aggregate::aggregate(&evidence);
        self.times.aggregation = clock.elapsed().as_secs_f64();
        self.record.failures = failures.len();
        self.record.groups = groups.len();
        self.record.recurring_groups = groups.iter().filter(|g| g.recurring).count();
        Ok(Evaluated {
            records,
            failures,
            successes,
            groups,
        })
    }

    /// What earlier rounds of this run proposed, whether the candidate
    /// built, and how the gate judged it, for the roles (empty in round 1).
    fn earlier_rounds(&self) -> Result<String, TrainError> {
        Ok(render_earlier_rounds(&self.dir.recorded_rounds()?))
    }

    /// The incumbent's failures on pool tasks outside the training tasks,
    /// when the pool was evaluated with this harness (the starting one,
    /// for failure-aware selection); empty otherwise. The pool's run is
    /// finished, so this reads it without running an episode.
    async fn pool_failures(
        &self,
        training: &[EpisodeRecord],
        lambda: f64,
    ) -> Result<Vec<FailureRecord>, TrainError> {
        let pooled = self.tasks.selection.as_ref().is_some_and(|s| {
            matches!(
                s.strategy,
                crate::evaluate::task_budget::SelectStrategy::FailureAware
                    | crate::evaluate::task_budget::SelectStrategy::Recurring
            )
        });
        if !pooled || self.dir.initial()?.as_ref() != Some(&self.incumbent) {
            return Ok(vec![]);
        }
        let (_, all) = self
            .cx
            .evaluate(
                self.dir,
                &self.config.train,
                &self.incumbent,
                &self.config.train.tasks,
                self.config.train.settings.split.clone(),
                "train-all",
            )
            .await?;
        let seen: std::collections::BTreeSet<&str> =
            training.iter().map(|r| r.task_id.as_str()).collect();
        let rest: Vec<EpisodeRecord> = all
            .into_iter()
            .filter(|r| !seen.contains(r.task_id.as_str()))
            .collect();
        Ok(failure_record::failures(&rest, lambda))
    }

    /// The result label, participants and kind of this round's
    /// measurements: with a deterministic agent the stored evaluation of
    /// the training tasks (`reused`); otherwise a fresh draw in a directory
    /// of this round, for the incumbent and the candidate alike.
    fn measurement(&self) -> (String, Draw, Measure) {
        if self.config.gate_measure.remeasure {
            (
                format!("{}-round{}", self.tasks.label, self.record.round),
                Draw::Fresh,
                Measure::Fresh,
            )
        } else {
            (self.tasks.label.clone(), Draw::Cached, Measure::Reused)
        }
    }

    /// Diagnose each unit (one per round, or one per failure for
    /// Self-Evolution) and let the coder implement it in the staging crate;
    /// the merged spec of every applied unit, or why nothing was changed.
    async fn diagnose_and_code(
        &mut self,
        ev: &Evaluated,
        coder_calls: &mut u32,
    ) -> Phase<ChangeSpec> {
        let units: Vec<Vec<FailureGroup>> = match self.config.plan.method {
            Method::SelfEvolution => ev
                .failures
                .iter()
                .map(|f| aggregate::aggregate(std::slice::from_ref(f)))
                .collect(),
            Method::EcdysisNofdcr | Method::Ecdysis => vec![ev.groups.clone()],
        };
        self.cx.say(format!(
            "round {}: {} failure(s) in {} group(s), {} recurring; {} diagnosis unit(s) for {}",
            self.record.round,
            self.record.failures,
            self.record.groups,
            self.record.recurring_groups,
            units.len(),
            self.config.diagnoser
        ));
        let staging = self.dir.staging();
        staging::fresh_copy(&self.dir.candidate(&self.incumbent).source(), &staging)?;
        let mut merged: Option<ChangeSpec> = None;
        let mut skipped: Vec<UnitSkipped> = vec![];
        for unit in &units {
            let spent = self.cx.ledger.summary().total.usd;
            if let Some(why) = super::spend_limits::reached(
                self.config,
                *coder_calls,
                self.dir.paid_episodes(),
                spent,
                self.cx.ledger.spend_refused(),
            ) {
                skipped.push(UnitSkipped::Budget(why));
                break;
            }
            let clock = Instant::now();
            let spec = self.diagnose(unit, &ev.successes, &staging).await?;
            self.times.diagnosis += clock.elapsed().as_secs_f64();
            let spec = match spec {
                Ok(spec) => spec,
                Err(why) => {
                    skipped.push(why);
                    continue;
                }
            };
            let clock = Instant::now();
            *coder_calls += 1;
            self.record.coder_calls += 1;
            let applied = self.code(&spec, unit, &staging).await?;
            self.times.coder += clock.elapsed().as_secs_f64();
            match applied {
                Ok(()) => merged = Some(merge(merged, spec)),
                Err(why) => skipped.push(why),
            }
        }
        write_json(
            &self.dir.layout().round_transcript(self.record.round),
            &self.transcript,
        )?;
        self.record.spec = merged.clone();
        Ok(match merged {
            Some(spec) => ControlFlow::Continue(spec),
            None if skipped.is_empty() => ControlFlow::Break(
                "no change proposed: no failure with a visible interface cause".into(),
            ),
            None => ControlFlow::Break(format!(
                "no change made: {}",
                skipped
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
        })
    }

    /// Diagnose one unit of failure groups into a spec. `Ok(Err(why))` when
    /// this unit yields no spec (recorded, the round goes on).
    async fn diagnose(
        &mut self,
        unit: &[FailureGroup],
        successes: &[FailureRecord],
        staging: &Path,
    ) -> Result<Result<ChangeSpec, UnitSkipped>, TrainError> {
        let failing = failing_tasks(unit);
        if let (Diagnoser::Fdcr { roles, config: fc }, Method::Ecdysis) =
            (&self.cx.diagnoser, self.config.plan.method)
        {
            let focus = HarnessFocus::of_failures(unit.iter().flat_map(|g| g.records.iter()));
            let history = self.earlier_rounds()?;
            let evidence = fdcr::evidence_section(unit, successes, &EvidenceLimits::default());
            let input = FdcrInput {
                // What earlier rounds tried goes first and whole: a round
                // that cannot see it proposes the same change again.
                evidence: Section::new(move |cap| {
                    let head = history.clone();
                    let rest = cap.map(|c| c.saturating_sub(estimate_tokens(&head)));
                    head + &rest.map_or_else(|| evidence.full(), |c| evidence.within(c))
                }),
                harness: fdcr::harness_section(staging, &focus)?,
                failing_tasks: Some(failing),
                group_labels: fdcr::group_labels(unit),
            };
            self.transcript.evidence.push(input.evidence.full());
            let outcome = fdcr::deliberate(roles, &input, fc).await;
            let spec = outcome.spec.clone();
            let error = outcome.error.clone();
            self.transcript.discussions.push(outcome);
            return Ok(spec.ok_or_else(|| {
                UnitSkipped::NoFdcrSpec(error.unwrap_or_else(|| "no reason given".into()))
            }));
        }
        self.transcript.evidence.push(fdcr::render_evidence(
            unit,
            successes,
            &EvidenceLimits::default(),
        ));
        let facts = ToolFacts {
            tools: self
                .cx
                .domain
                .tools()
                .iter()
                .map(|t| (t.name.clone(), t.mutates))
                .collect(),
        };
        let spec = heuristic::diagnose(unit, successes, &facts).or_else(|| {
            // A prose-reading coder can still work from the groups themselves.
            if self.cx.coder.reads_prose() {
                heuristic::spec_from_groups(unit)
            } else {
                None
            }
        });
        let Some(mut spec) = spec else {
            return Ok(Err(UnitSkipped::NoInterfaceCause));
        };
        // Flag single-task changes (the heuristic's evidence is the failures').
        if let Err(e) = spec.check_evidence(&failing) {
            return Ok(Err(UnitSkipped::UncitedEvidence(e)));
        }
        Ok(Ok(spec))
    }

    /// Let the coder implement `spec` in the staging crate. `Ok(Err(why))`
    /// when the coder failed (recorded, the round goes on).
    async fn code(
        &mut self,
        spec: &ChangeSpec,
        unit: &[FailureGroup],
        staging: &Path,
    ) -> Result<Result<(), UnitSkipped>, TrainError> {
        // Rule tables key entries by the short domain name (`retail`).
        let domain = &self.config.train.settings.domain;
        let short = domain.rsplit('/').next().unwrap_or(domain).to_string();
        let coder = self.cx.coder.clone();
        // The spec's skills go into the skill library exactly; a prose
        // coder is told they are there (the rule coder writes them itself).
        let skills = if spec.skills.is_empty() || !coder.reads_prose() {
            None
        } else {
            Some(rule_coder::apply_rules(
                staging,
                &rule_coder::skill_edits(spec),
                &short,
            ))
        };
        let tools = self
            .cx
            .domain
            .tools()
            .iter()
            .map(|t| t.name.clone())
            .collect();
        let task = CoderTask::new(spec.clone())
            .with_notes(self.coder_notes(spec, unit, skills.as_ref()))
            .with_context(short.clone(), tools);
        // The rule coder's task is the spec alone, which the candidate's
        // spec.json records: its runs were always recorded without one.
        let recorded = coder.reads_prose().then(|| task.clone());
        let run = match coder.implement(&task, staging).await {
            Ok(o) => CoderRun {
                coder: CoderId::from(coder.name()),
                // A prose coder errs rather than succeed without a change;
                // the rule coder may find no rule to write, which is no error.
                ok: coder.reads_prose() || !o.changed_files.is_empty(),
                attempts: o.attempts,
                changed_files: o.changed_files,
                build_ok: o.build_ok,
                error: None,
                log: o.log,
                task: recorded,
            },
            Err(CoderError::RuleTables(e)) => return Err(e.into()),
            // The skills alone are a change.
            Err(CoderError::NoChange { attempts, log }) if matches!(skills, Some(Ok(n)) if n > 0) => {
                CoderRun {
                    coder: CoderId::from(coder.name()),
                    ok: true,
                    attempts,
                    changed_files: vec![crate::code::TABLES_FILE.into()],
                    build_ok: false,
                    error: None,
                    log: format!("{log}\nthe spec's skills were applied to the skill library"),
                    task: recorded,
                }
            }
            Err(e) => {
                self.cx
                    .say(format!("round {}: coder failed: {e}", self.record.round));
                CoderRun {
                    coder: CoderId::from(coder.name()),
                    ok: false,
                    attempts: e.attempts(),
                    changed_files: vec![],
                    build_ok: false,
                    error: Some(e.to_string()),
                    log: e.log().to_string(),
                    task: recorded,
                }
            }
        };
        let failed = run.error.clone();
        self.transcript.coder_runs.push(run);
        Ok(match failed {
            Some(e) => Err(UnitSkipped::CoderFailed(e)),
            None => Ok(()),
        })
    }

    /// What the coder reads besides the spec, so the methods differ only
    /// in how they organise the evidence: under FDCR the excerpts of the
    /// failures the spec cites; without FDCR every failure's excerpt
    /// (Self-Evolution's per-failure evidence, aggregated); Self-Evolution,
    /// its one failure. The coder prompt trims them to its budget.
    fn coder_notes(
        &self,
        spec: &ChangeSpec,
        unit: &[FailureGroup],
        skills: Option<&Result<usize, rule_coder::RuleCoderError>>,
    ) -> String {
        let fdcr = matches!(self.cx.diagnoser, Diagnoser::Fdcr { .. })
            && self.config.plan.method == Method::Ecdysis;
        let (what, excerpts) = if fdcr {
            let cited: BTreeSet<String> = spec
                .failure_patterns
                .iter()
                .flat_map(|p| p.evidence_tasks.iter())
                .chain(
                    spec.proposed_changes
                        .iter()
                        .flat_map(|c| c.evidence_tasks.iter()),
                )
                .map(|t| t.trim().to_string())
                .collect();
            (
                "The failures the spec cites as evidence",
                fdcr::failure_excerpts(unit, Some(&cited)),
            )
        } else if self.config.plan.method == Method::SelfEvolution {
            ("The failure to fix", fdcr::failure_excerpts(unit, None))
        } else {
            (
                "Every failure of this round, grouped by signature",
                fdcr::failure_excerpts(unit, None),
            )
        };
        let mut notes = String::new();
        match skills {
            Some(Ok(n)) => {
                notes += &format!(
                    "The spec's {} skill(s) are already in the SKILLS table of src/tables.rs ({n} entr(ies) added or edited by the host): do not add them again.\n\n",
                    spec.skills.len()
                )
            }
            Some(Err(e)) => {
                notes += &format!(
                    "The spec's skills could not be added to a SKILLS table automatically ({e}): implement them too.\n\n"
                )
            }
            None => {}
        }
        notes += &format!("{what} (scrubbed excerpts):\n\n{excerpts}");
        notes
    }

    /// Build the staging crate into the store and keep the candidate's
    /// files (source, manifest, spec, transcript, diff against the
    /// incumbent). The build is untrusted (scanned, jailed; see
    /// [`ecdysis_sandbox::store::build`]); a candidate whose files outside
    /// `src/` differ from the incumbent's, or whose source reaches outside
    /// the crate, is rejected with the reason and never built. An edit that
    /// builds to bytes already judged (the incumbent's, or a candidate a
    /// recorded round judged) ends the round and writes nothing: that
    /// candidate's files stay as they were. The files of a candidate whose
    /// gate a kill interrupted are written anew.
    fn build_candidate(&mut self, spec: &ChangeSpec) -> Phase<Manifest> {
        let clock = Instant::now();
        let reference = self.dir.candidate(&self.incumbent).source();
        let staging = self.dir.staging();
        let built = match candidate_trust(&reference, &staging, &self.cx.containment)? {
            Err(why) => {
                self.times.build = clock.elapsed().as_secs_f64();
                return Ok(ControlFlow::Break(why.to_string()));
            }
            Ok(trust) => self.cx.build(&staging, Some(self.incumbent.clone()), trust),
        };
        self.times.build = clock.elapsed().as_secs_f64();
        let manifest = match built {
            Ok(m) => m,
            Err(TrainError::Store(StoreError::SourceRefused { refusal, .. })) => {
                return Ok(ControlFlow::Break(format!(
                    "rejected: refused before building: {refusal}"
                )));
            }
            Err(TrainError::Store(e @ StoreError::NoJail { .. })) => return Err(e.into()),
            Err(TrainError::Store(e)) => {
                return Ok(ControlFlow::Break(format!("build failed: {e}")));
            }
            Err(e) => return Err(e),
        };
        if manifest.hash == self.incumbent {
            return Ok(ControlFlow::Break(
                "no change: the edit builds to the incumbent's bytes".into(),
            ));
        }
        let cdir = self.dir.candidate(&manifest.hash);
        if self.dir.judged(&manifest.hash)? {
            return Ok(ControlFlow::Break(format!(
                "no change: the edit builds to the bytes of candidate {}, already judged (see its files)",
                manifest.hash.short()
            )));
        }
        self.record.candidate = Some(manifest.hash.clone());
        staging::fresh_copy(&staging, &cdir.source())?;
        write_json(&cdir.manifest(), &manifest)?;
        write_json(&cdir.spec(), spec)?;
        write_json(&cdir.transcript(), &self.transcript)?;
        // The diff of every file under src/ the crate walker sees (hidden
        // ones too: they are built, so they are recorded).
        let (diff, _) = src_diff(
            &Snapshot::take(&reference)?,
            &Snapshot::take(&cdir.source())?,
        );
        let patch = cdir.diff();
        ecdysis_sys::fsutil::atomic_write(&patch, diff.as_bytes())
            .map_err(|e| PathError::new("write", &patch, e))?;
        Ok(ControlFlow::Continue(manifest))
    }

    /// Check the candidate against the contract, screen it against the
    /// incumbent's successful calls, evaluate it and decide.
    async fn gate(
        &mut self,
        cand: &ComponentHash,
        incumbent_records: &[EpisodeRecord],
        edited: Instant,
    ) -> Result<String, TrainError> {
        let clock = Instant::now();
        let loaded = match self.cx.load(cand) {
            Ok(l) => l,
            // A candidate that does not link (it imports something not
            // granted) is a rejected candidate, not the end of training.
            Err(TrainError::Store(e)) => {
                self.times.gate = clock.elapsed().as_secs_f64();
                return Ok(format!("rejected: cannot load: {e}"));
            }
            Err(e) => return Err(e),
        };
        let (check, hits) = {
            let domain = self.cx.domain.clone();
            let records = incumbent_records.to_vec();
            tokio::task::spawn_blocking(move || {
                let check = ecdysis_sandbox::doctor::check(&loaded);
                let hits = screen::screen(&loaded, &*domain, &records);
                (check, hits)
            })
            .await
            .expect("gate task")
        };
        self.record.edit_to_episode_seconds = Some(edited.elapsed().as_secs_f64());
        if !check.passed() {
            self.times.gate = clock.elapsed().as_secs_f64();
            // Which hook failed and why: the round's record is where the
            // reason is read.
            let why = check
                .probes
                .iter()
                .find_map(|p| p.error.as_ref().map(|e| format!("{}: {e}", p.hook)))
                .unwrap_or_default();
            return Ok(format!("rejected: check failed: {why}"));
        }
        if let Some(hit) = hits.first() {
            self.times.gate = clock.elapsed().as_secs_f64();
            return Ok(format!(
                "rejected by the screen: blocks {}({}) which succeeded on task {}",
                hit.tool, hit.arguments, hit.task_id
            ));
        }
        let (label, draw, measure) = self.measurement();
        self.record.candidate_measure = Some(measure);
        let rejected = match self.config.plan.gate_race {
            GateRace::On => self.race(cand, incumbent_records, &label, draw).await?,
            GateRace::Off => Err(None),
        };
        let decided_after = match rejected {
            Ok(why) => {
                self.times.gate = clock.elapsed().as_secs_f64();
                return Ok(why);
            }
            Err(decided_after) => decided_after,
        };
        // Every task, resuming the race's batches: the full gate's
        // decision, and an accepted candidate's episodes are the next
        // incumbent's evaluation.
        let (summary, records) = self
            .cx
            .evaluate_with(
                self.dir,
                &self.config.train,
                Some(cand),
                &self.tasks.tasks,
                self.config.train.settings.split.clone(),
                &label,
                draw,
            )
            .await?;
        write_json(&self.dir.candidate(cand).train_summary(), &summary)?;
        self.times.gate = clock.elapsed().as_secs_f64();
        let verdict = accept::decide(self.config.plan.accept, incumbent_records, &records);
        self.record.candidate_score = Some(summary.metrics.accuracy);
        self.record.p_value = verdict.p_value;
        self.record.accepted = verdict.accepted;
        let run = records.len() as u64;
        self.record.gate_episodes = Some(GateEpisodes {
            raced: self.config.plan.gate_race == GateRace::On,
            needed: self.gate_needed(),
            run,
            not_needed: 0,
            decided_after,
        });
        Ok(verdict.reason)
    }

    /// The full gate's episodes: every training task's trials.
    fn gate_needed(&self) -> u64 {
        let tasks: BTreeSet<&String> = self.tasks.tasks.iter().collect();
        tasks.len() as u64 * u64::from(self.config.train.settings.trials)
    }

    /// Race the candidate's evaluation: batches of tasks in the race order
    /// until the rule's decision is certain. `Ok(decision)` when a
    /// rejection was settled early (the round's record filled in);
    /// `Err(decided_after)` when the full evaluation must follow, with the
    /// episodes after which an acceptance was certain, if it was before the
    /// last batch.
    async fn race(
        &mut self,
        cand: &ComponentHash,
        incumbent_records: &[EpisodeRecord],
        label: &str,
        draw: super::Draw,
    ) -> Result<Result<String, Option<u64>>, TrainError> {
        let rule = self.config.plan.accept;
        let trials = self.config.train.settings.trials;
        let mut plan = race::batches(
            race::order(&self.tasks.tasks, incumbent_records),
            trials,
            self.cx.concurrency,
        )
        .into_iter();
        let mut known: Vec<EpisodeRecord> = vec![];
        let standing = loop {
            let standing = race::standing(rule, incumbent_records, &known);
            if standing.settled != Settled::Open {
                break standing;
            }
            let Some(batch) = plan.next() else {
                return Ok(Err(None));
            };
            let part: BTreeSet<String> = batch.into_iter().collect();
            known = self
                .cx
                .evaluate_part(
                    self.dir,
                    &self.config.train,
                    cand,
                    &self.tasks.tasks,
                    &part,
                    self.config.train.settings.split.clone(),
                    label,
                    draw,
                )
                .await?;
        };
        let run = known.len() as u64;
        if standing.settled == Settled::Accept || plan.len() == 0 {
            return Ok(Err((plan.len() > 0).then_some(run)));
        }
        let needed = self.gate_needed();
        let not_needed = needed.saturating_sub(run);
        self.record.candidate_score = Some(standing.best_score);
        self.record.p_value = standing.best_p;
        self.record.accepted = false;
        self.record.gate_episodes = Some(GateEpisodes {
            raced: true,
            needed,
            run,
            not_needed,
            decided_after: Some(run),
        });
        Ok(Ok(format!(
            "{} (raced: decided after {run} of {needed} episodes, {not_needed} not needed)",
            standing.reject_reason(rule)
        )))
    }

    /// Close the round, whatever its outcome: times and dollars into the
    /// record, the record appended to `rounds.jsonl` (synced), the new
    /// incumbent recorded, the ledger saved.
    fn close(mut self) -> Result<RoundRecord, TrainError> {
        self.record.seconds = self.times;
        self.record.usd = self.cx.ledger.summary().total.usd - self.usd_before;
        self.dir.append_round(&self.record)?;
        if self.record.accepted
            && let Some(c) = &self.record.candidate
        {
            self.dir.set_incumbent(c)?;
        }
        self.dir.save_ledger(&self.cx.ledger)?;
        self.cx.say(format!(
            "round {}: {}",
            self.record.round, self.record.decision
        ));
        Ok(self.record)
    }
}

/// Why one diagnosis unit yields no change (recorded in the round's
/// outcome; the round goes on with the next unit).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
enum UnitSkipped {
    /// The spend or call budget ran out before this unit.
    #[error("budget: {0}")]
    Budget(String),
    /// The FDCR deliberation ended without a valid spec (its reason).
    #[error("FDCR produced no spec: {0}")]
    NoFdcrSpec(String),
    /// The heuristic found nothing the rule coder can fix.
    #[error("no failure with a visible interface cause for the rule coder")]
    NoInterfaceCause,
    /// The spec's evidence names none of this round's failures.
    #[error("the diagnosis cites no failure of this round: {0}")]
    UncitedEvidence(crate::diagnose::change_spec::ChangeSpecError),
    /// The coder made no usable edit (its error).
    #[error("coder failed: {0}")]
    CoderFailed(String),
}

/// A candidate whose files outside `src/` differ from the incumbent's:
/// rejected unbuilt.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("rejected: files outside src/ differ from the incumbent's: {}", .0.join(", "))]
struct OutsideSrc(Vec<String>);

/// The tasks of a unit's failures.
fn failing_tasks(unit: &[FailureGroup]) -> BTreeSet<String> {
    unit.iter().flat_map(|g| g.tasks.iter().cloned()).collect()
}

/// How a candidate in `staging`, edited from the incumbent's source at
/// `reference`, is built: as untrusted source that may keep the
/// reference's scan findings; or why it is rejected unbuilt: only `src/`
/// (of a Python harness: its `.py` modules outside `tests/`) is the
/// coder's, so every other file (`Cargo.toml`, the lock file, `build.rs`,
/// `.cargo/`) must be the incumbent's.
fn candidate_trust(
    reference: &Path,
    staging: &Path,
    containment: &Containment,
) -> Result<Result<Trust, OutsideSrc>, TrainError> {
    let before = Snapshot::take(reference)?;
    let python = ecdysis_sandbox::store::build_python::is_python_harness(reference);
    let outside: Vec<String> = before
        .changes(&Snapshot::take(staging)?)
        .into_iter()
        .filter(|p| !crate::code::in_coder_area(python, p))
        .collect();
    if !outside.is_empty() {
        return Ok(Err(OutsideSrc(outside)));
    }
    Ok(Ok(Trust::Untrusted {
        containment: containment.clone(),
        allowed: before.findings(),
    }))
}

/// Specs of several units, merged into one (Self-Evolution accumulates its
/// per-failure edits in one candidate).
fn merge(merged: Option<ChangeSpec>, spec: ChangeSpec) -> ChangeSpec {
    match merged {
        None => spec,
        Some(mut m) => {
            m.failure_patterns.extend(spec.failure_patterns);
            m.proposed_changes.extend(spec.proposed_changes);
            m.skills.extend(spec.skills);
            m
        }
    }
}

/// Earlier rounds as the roles read them: each proposed change, whether a
/// candidate was built, the gate's verdict. Empty without earlier rounds.
pub(super) fn render_earlier_rounds(rounds: &[RoundRecord]) -> String {
    if rounds.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "## Earlier rounds (do not propose a change that was already rejected unchanged)\n\n",
    );
    for r in rounds {
        out += &format!("Round {}:\n", r.round);
        match &r.spec {
            Some(spec) if !spec.proposed_changes.is_empty() => {
                for c in &spec.proposed_changes {
                    let rule = c
                        .rule
                        .as_ref()
                        .and_then(|e| serde_json::to_string(e).ok())
                        .map(|j| format!(" rule {j}"))
                        .unwrap_or_default();
                    out += &format!(
                        "- proposed ({}, {}): {}{rule}\n",
                        c.layer.as_str(),
                        c.file,
                        c.description
                    );
                }
            }
            _ => out += "- no change was proposed\n",
        }
        out += &match (&r.candidate, r.accepted) {
            (None, _) => format!("- no candidate was built: {}\n", r.decision),
            (Some(_), true) => format!("- built and accepted: {}\n", r.decision),
            (Some(_), false) => format!("- built and rejected by the gate: {}\n", r.decision),
        };
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The roles see what each earlier round proposed and what became of
    /// it, so a round does not send the same request again unchanged.
    #[test]
    fn earlier_rounds_name_each_proposal_and_its_verdict() {
        assert_eq!(render_earlier_rounds(&[]), "");
        let spec: ChangeSpec = serde_json::from_value(serde_json::json!({
            "failure_patterns": [{"name": "p", "description": "d", "evidence_tasks": ["1", "2"]}],
            "proposed_changes": [{"layer": "realize", "file": "src/tables.rs",
                "description": "hold the commit until the query's rows are read",
                "rationale": "r", "evidence_tasks": ["1", "2"]}],
            "implementation_notes": ""
        }))
        .unwrap();
        let record = |round: u32, candidate: bool, accepted: bool, spec: Option<ChangeSpec>| {
            serde_json::from_value::<RoundRecord>(serde_json::json!({
                "round": round, "incumbent": ComponentHash::of(b"i"), "incumbent_score": 0.0,
                "candidate": candidate.then(|| ComponentHash::of(b"c")),
                "candidate_score": candidate.then_some(0.0), "accepted": accepted,
                "decision": "0.0000 does not beat 0.0000", "failures": 3, "groups": 1,
                "recurring_groups": 1, "coder_calls": 1, "spec": spec,
                "seconds": PhaseTimes::default(), "usd": 0.0
            }))
            .unwrap()
        };
        let text = render_earlier_rounds(&[
            record(1, true, false, Some(spec)),
            record(2, false, false, None),
        ]);
        assert!(
            text.contains("Round 1:\n- proposed (realize, src/tables.rs): hold the commit"),
            "{text}"
        );
        assert!(
            text.contains("- built and rejected by the gate: 0.0000 does not beat 0.0000"),
            "{text}"
        );
        assert!(
            text.contains("Round 2:\n- no change was proposed\n- no candidate was built"),
            "{text}"
        );
    }

    #[test]
    fn a_candidate_changed_outside_src_is_rejected_unbuilt() {
        let dir = tempfile::tempdir().unwrap();
        let (reference, staging) = (dir.path().join("ref"), dir.path().join("staging"));
        for root in [&reference, &staging] {
            std::fs::create_dir_all(root.join("src")).unwrap();
            std::fs::write(root.join("Cargo.toml"), "[package]\n").unwrap();
            std::fs::write(root.join("src/lib.rs"), "const S: &str = env!(\"HOME\");\n").unwrap();
        }
        // Positive control: src/ changes are the coder's; the reference's
        // findings may stay.
        std::fs::write(staging.join("src/new.rs"), "pub fn f() {}\n").unwrap();
        let containment = Containment::default();
        match candidate_trust(&reference, &staging, &containment).unwrap() {
            Ok(Trust::Untrusted { allowed, .. }) => {
                assert_eq!(allowed.len(), 1);
                assert_eq!(allowed[0].construct, "env!");
            }
            other => panic!("expected an untrusted build, got {other:?}"),
        }
        // Hostile: a build script and a manifest edit that bypassed the
        // coder's own check.
        std::fs::write(staging.join("build.rs"), "fn main() {}\n").unwrap();
        std::fs::write(
            staging.join("Cargo.toml"),
            "[package]\nbuild = \"build.rs\"\n",
        )
        .unwrap();
        let why = candidate_trust(&reference, &staging, &containment)
            .unwrap()
            .unwrap_err();
        assert_eq!(why.0, ["Cargo.toml", "build.rs"]);
        assert_eq!(
            why.to_string(),
            "rejected: files outside src/ differ from the incumbent's: Cargo.toml, build.rs"
        );
    }
}

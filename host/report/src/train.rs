//! The training page: scores per round, decisions, the lineage tree with
//! each candidate's diff, failure groups, the FDCR discussion and the spec,
//! time per phase and dollars per role.

use std::collections::{BTreeMap, BTreeSet};

use super::charts::{self, Bars, Line};
use super::html::{self, duration, esc, hash, num};
use super::load::TrainData;
use super::run::{card, kv};
use super::{Page, ReportError};
use ecdysis_evolve::aggregate;
use ecdysis_evolve::aggregate::failure_record;
use ecdysis_evolve::diagnose::change_spec::ChangeSpec;
use ecdysis_evolve::train::{PhaseTimes, RoundRecord, RoundTranscript};
use ecdysis_sandbox::store::ComponentHash;

fn title(t: &TrainData) -> String {
    t.dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| t.dir.display().to_string())
}

/// The training page; `level` is the heading level of its title (2 on its
/// own, 3 inside an experiment).
pub(crate) fn section(
    page: &mut Page,
    prefix: &str,
    t: &TrainData,
    level: u8,
) -> Result<(), ReportError> {
    let sub = level + 1;
    page.heading(
        level,
        &format!("{prefix}-train"),
        &format!("Training {} ({})", title(t), t.config.plan.method.as_str()),
    );
    if t.simulated() && level == 2 && page.multi {
        page.body += &super::sim_banner(
            &[t.config.train.agent_model.to_string()]
                .into_iter()
                .collect(),
        );
    }
    meta(page, t);
    if t.summary.is_none() {
        page.body += &format!(
            "<p class=\"note\">In progress (or stopped): no <code>summary.json</code> yet; {} round{} recorded so far{}.</p>",
            t.rounds.len(),
            if t.rounds.len() == 1 { "" } else { "s" },
            if t.torn_round {
                ", one more being written"
            } else {
                ""
            }
        );
    }
    headline(page, t);
    power_and_layers(page, prefix, t, sub);
    scores(page, prefix, t, sub)?;
    rounds_table(page, prefix, t, sub);
    lineage(page, prefix, t, sub);
    round_details(page, prefix, t, sub);
    costs(page, prefix, t, sub)?;
    evaluations(page, t);
    Ok(())
}

fn meta(page: &mut Page, t: &TrainData) {
    let c = &t.config;
    let mut budgets = Vec::new();
    if let Some(m) = c.plan.max_coder_calls {
        budgets.push(format!("{m} coder calls"));
    }
    if let Some(m) = c.plan.max_episodes {
        budgets.push(format!("{m} episodes"));
    }
    if let Some(m) = c.plan.max_usd {
        budgets.push(format!("${m:.2}"));
    }
    let accept = match c.plan.accept {
        ecdysis_evolve::gate::accept::AcceptRule::Strict => {
            "strict (candidate must beat the incumbent)".to_string()
        }
        ecdysis_evolve::gate::accept::AcceptRule::Paired { alpha } => {
            format!("paired sign-flip test, α = {alpha}")
        }
    };
    let rows: Vec<(&str, String)> = vec![
        (
            "directory",
            format!("<code>{}</code>", esc(&t.dir.display().to_string())),
        ),
        ("method", esc(c.plan.method.as_str()).to_string()),
        (
            "diagnoser / coder",
            format!(
                "{} / {}",
                esc(&c.diagnoser.to_string()),
                esc(&c.coder.to_string())
            ),
        ),
        ("acceptance", esc(&accept).to_string()),
        (
            "agent / user",
            format!(
                "<code>{}</code> / <code>{}</code>",
                esc(c.train.agent_model.as_str()),
                esc(&c.train.user_model)
            ),
        ),
        (
            "training tasks",
            format!(
                "{} on {} × {} trial{}{}",
                c.train.tasks.len(),
                esc(&c.train.settings.domain),
                c.train.settings.trials,
                if c.train.settings.trials == 1 {
                    ""
                } else {
                    "s"
                },
                match &c.plan.select {
                    Some(s) => format!(
                        ", {} of them chosen {} (budget)",
                        s.budget,
                        esc(s.strategy.as_str())
                    ),
                    None => String::new(),
                }
            ),
        ),
        (
            "held-out test",
            if c.test_tasks.is_empty() {
                "none".into()
            } else {
                format!(
                    "{} tasks ({}) × {} trial{}: the initial and the final harness{}",
                    c.test_tasks.len(),
                    esc(c.plan.test_split.as_deref().unwrap_or("?")),
                    c.plan.test_trials,
                    if c.plan.test_trials == 1 { "" } else { "s" },
                    if c.plan.test_direct {
                        ", and Direct"
                    } else {
                        ""
                    }
                )
            },
        ),
        (
            "gate measurement",
            format!(
                "{}: {}",
                if c.gate_measure.remeasure {
                    "the incumbent is re-measured every round (fresh draws)"
                } else {
                    "the incumbent's stored score is reused"
                },
                esc(&c.gate_measure.reason)
            ),
        ),
        (
            "roles' sampling and context",
            match &c.roles.budget {
                None => "no role model (offline)".into(),
                Some(b) => format!(
                    "temperature {}, top-p {}, {} tokens of context ({}), {} reserved per reply",
                    c.roles
                        .sampling
                        .temperature
                        .map(|t| t.to_string())
                        .unwrap_or_else(|| "endpoint default".into()),
                    c.roles
                        .sampling
                        .top_p
                        .map(|t| t.to_string())
                        .unwrap_or_else(|| "endpoint default".into()),
                    b.context_tokens,
                    match &c.roles.context_source {
                        Some(ecdysis_evolve::diagnose::token_budget::ContextSource::Flag) => {
                            "--roles-context-tokens".to_string()
                        }
                        Some(ecdysis_evolve::diagnose::token_budget::ContextSource::Endpoint(
                            u,
                        )) => {
                            format!("reported by {}", esc(u))
                        }
                        _ => "default".to_string(),
                    },
                    b.reply_tokens
                ),
            },
        ),
        (
            "rounds",
            format!(
                "at most {}, plateau {}, failures below reward {}{}",
                c.plan.rounds,
                c.plan.plateau,
                c.plan.lambda,
                if budgets.is_empty() {
                    String::new()
                } else {
                    format!(", budgets: {}", esc(&budgets.join(", ")))
                }
            ),
        ),
    ];
    page.body += &kv(&rows);
}

/// The power lines and, after `--select-layers`, each layer's effect with
/// its interval and the chosen set.
fn power_and_layers(page: &mut Page, prefix: &str, t: &TrainData, level: u8) {
    let Some(s) = &t.summary else { return };
    let lines: Vec<String> = s
        .power
        .iter()
        .map(|p| format!("training {}", p.render()))
        .chain(
            s.test
                .as_ref()
                .and_then(|t| t.power.as_ref())
                .map(|p| format!("held-out {}", p.render())),
        )
        .collect();
    if !lines.is_empty() {
        page.body += &format!("<pre class=\"power\">{}</pre>", esc(&lines.concat()));
    }
    let Some(a) = &s.layer_selection else { return };
    page.heading(
        level,
        &format!("{prefix}-layers"),
        "Layers of the final incumbent",
    );
    let interval = |i: &ecdysis_runner::eval::intervals::Interval| {
        format!("{:.3} [{:.3}, {:.3}]", i.estimate, i.low, i.high)
    };
    let mut rows = format!(
        "<tr><td>full</td><td>{}</td><td>{}</td><td></td><td></td></tr>",
        esc(&a.full.layers.to_string()),
        interval(&a.full.accuracy)
    );
    let mut row = |name: String, c: &ecdysis_evolve::ablate::Compared| {
        let d = &c.vs_full.delta;
        rows += &format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:+.3} [{:+.3}, {:+.3}]</td><td>{}</td></tr>",
            esc(&name),
            esc(&c.score.layers.to_string()),
            interval(&c.score.accuracy),
            d.estimate,
            d.low,
            d.high,
            ecdysis_evolve::gate::accept::p_cell(Some(c.vs_full.p_two_sided())),
        );
    };
    for e in &a.layers {
        row(format!("without {}", e.layer), &e.without);
    }
    if let Some(c) = &a.chosen_vs_full {
        row("chosen".into(), c);
    }
    page.body += &format!(
        "<table><thead><tr><th>variant</th><th>layers</th><th>training accuracy [95% CI]</th><th>vs full [95% CI]</th><th>p (two-sided, paired)</th></tr></thead><tbody>{rows}</tbody></table><p>Chosen: <b>{}</b>. A layer is dropped when the harness scored strictly higher without it; the held-out test evaluates the chosen set beside the full harness.</p>",
        esc(&a.chosen.to_string())
    );
}

fn headline(page: &mut Page, t: &TrainData) {
    let mut out = String::from("<div class=\"cards\">");
    match &t.summary {
        Some(s) => {
            out += &card(
                &format!("{:.3} → {:.3}", s.initial_train_score, s.final_train_score),
                "training score, initial → final",
                "mean reward on the training tasks",
            );
            match &s.test {
                Some(t) => {
                    let a = |x: &ecdysis_evolve::train::TestScore| {
                        let i = &x.intervals.accuracy;
                        format!("{:.3} [{:.3}, {:.3}]", i.estimate, i.low, i.high)
                    };
                    out += &card(
                        &format!(
                            "{:.3} → {:.3}",
                            t.initial.intervals.accuracy.estimate,
                            t.final_.intervals.accuracy.estimate
                        ),
                        "held-out accuracy, initial → final",
                        &format!(
                            "95% intervals: {} → {}; {} trial(s) per task",
                            a(&t.initial),
                            a(&t.final_),
                            t.final_.trials
                        ),
                    );
                    if let Some(d) = &t.direct {
                        out += &card(&a(d), "held-out accuracy, Direct", "no harness");
                    }
                    if let (Some(c), Some(l)) = (&t.chosen_layers, &s.layer_selection) {
                        out += &card(
                            &a(c),
                            "held-out accuracy, chosen layers",
                            &format!("layers {}", l.chosen),
                        );
                    }
                }
                None => {
                    out += &card(
                        &num(s.test_score, 3),
                        "held-out test score",
                        "final incumbent only",
                    )
                }
            }
            out += &card(
                &format!("{}/{}", s.accepted, s.rounds.len()),
                "candidates accepted / rounds",
                &format!("stopped: {}", esc(&s.stopped)),
            );
            out += &card(&s.coder_calls.to_string(), "coder calls", "");
            out += &card(
                &s.episodes.to_string(),
                "episodes paid for",
                "every evaluation",
            );
            out += &card(
                &duration(s.wall_seconds),
                "wall time",
                &format!("test evaluation {}", duration(s.seconds.test_eval)),
            );
            out += &card(
                &format!("${:.4}", s.usage.total.usd),
                "dollars, every role",
                "",
            );
        }
        None => {
            let accepted = t.rounds.iter().filter(|r| r.accepted).count();
            out += &card(
                &format!("{accepted}/{}", t.rounds.len()),
                "candidates accepted / rounds so far",
                "",
            );
        }
    }
    out += "</div>";
    page.body += &out;
}

fn scores(page: &mut Page, prefix: &str, t: &TrainData, level: u8) -> Result<(), ReportError> {
    page.heading(level, &format!("{prefix}-scores"), "Scores per round");
    let n = t.rounds.len();
    let mut labels = vec!["initial".to_string()];
    labels.extend(t.rounds.iter().map(|r| format!("round {}", r.round)));
    labels.push("final".into());
    let initial = t
        .summary
        .as_ref()
        .map(|s| s.initial_train_score)
        .or_else(|| t.rounds.first().map(|r| r.incumbent_score));
    let mut incumbent: Vec<Option<f64>> = vec![initial];
    incumbent.extend(t.rounds.iter().map(|r| Some(r.incumbent_score)));
    incumbent.push(t.summary.as_ref().map(|s| s.final_train_score));
    let cand = |accepted: bool| -> Vec<Option<f64>> {
        let mut v = vec![None];
        v.extend(
            t.rounds
                .iter()
                .map(|r| r.candidate_score.filter(|_| r.accepted == accepted)),
        );
        v.push(None);
        v
    };
    let mut test = vec![None; n + 2];
    test[n + 1] = t.summary.as_ref().and_then(|s| s.test_score);
    let lines = vec![
        Line {
            name: "incumbent (train)".into(),
            color: charts::color(0),
            points: incumbent,
            markers_only: false,
            hollow: false,
        },
        Line {
            name: "accepted candidate (train)".into(),
            color: charts::color(4),
            points: cand(true),
            markers_only: true,
            hollow: false,
        },
        Line {
            name: "rejected candidate (train)".into(),
            color: charts::color(2),
            points: cand(false),
            markers_only: true,
            hollow: true,
        },
        Line {
            name: "final incumbent (held-out test)".into(),
            color: charts::color(1),
            points: test,
            markers_only: true,
            hollow: false,
        },
    ];
    page.body += "<div class=\"charts\">";
    page.body += &charts::rounds_chart(
        "Training score per round (mean reward)",
        &labels,
        &lines,
        "score",
        1.0,
        (620, 320),
    )?;
    page.body += "</div>";
    page.body += "<p class=\"muted\">Rounds whose candidate never reached the training evaluation (no change, build failure, check or screen rejection) have no candidate point. The held-out split is evaluated once, for the final incumbent: it never takes part in selection.</p>";
    Ok(())
}

fn short(h: &str) -> String {
    h.chars().take(12).collect()
}

fn decision_badge(r: &RoundRecord) -> String {
    if r.candidate.as_ref() == Some(&r.incumbent) {
        "<span class=\"badge\">same build as the incumbent</span>".into()
    } else if r.accepted {
        "<span class=\"badge ok\">accepted</span>".into()
    } else if r.candidate_score.is_some() {
        "<span class=\"badge bad\">rejected at the gate</span>".into()
    } else if r.candidate.is_some() {
        "<span class=\"badge bad\">rejected before scoring</span>".into()
    } else {
        "<span class=\"badge\">no candidate</span>".into()
    }
}

fn rounds_table(page: &mut Page, prefix: &str, t: &TrainData, level: u8) {
    page.heading(level, &format!("{prefix}-rounds"), "Decisions");
    if t.rounds.is_empty() {
        page.body += "<p class=\"muted\">No round recorded yet.</p>";
        return;
    }
    let mut out = String::from(
        "<table><thead><tr><th>round</th><th>incumbent</th><th class=\"n\">score</th><th>candidate</th><th class=\"n\">score</th><th title=\"fresh: measured in this round (a stochastic agent); reused: the stored evaluation (a deterministic one)\">measured</th><th>decision</th><th class=\"n\">p-value</th><th class=\"n\">failures / groups / recurring</th><th class=\"n\">coder calls</th><th class=\"n\">time</th><th class=\"n\" title=\"from the coder's edit to the candidate's first episode: build, precompile, instantiate\">edit → episode</th><th class=\"n\">USD</th></tr></thead><tbody>",
    );
    for r in &t.rounds {
        out += &format!(
            "<tr><td><a href=\"#{prefix}-round-{}\">{}</a></td><td>{}</td><td class=\"n\">{:.3}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{} {}</td><td class=\"n\">{}</td><td class=\"n\">{} / {} / {}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">${:.4}</td></tr>",
            r.round,
            r.round,
            hash(r.incumbent.as_str()),
            r.incumbent_score,
            r.candidate
                .as_ref()
                .map(|c| hash(c.as_str()))
                .unwrap_or_else(|| "—".into()),
            num(r.candidate_score, 3),
            match (r.incumbent_measure, r.candidate_measure) {
                (Some(i), Some(c)) => format!("{} / {}", i.as_str(), c.as_str()),
                (Some(i), None) => i.as_str().to_string(),
                _ => "—".into(),
            },
            decision_badge(r),
            esc(&r.decision),
            r.p_value
                .map(|p| format!("{p:.4}"))
                .unwrap_or_else(|| "—".into()),
            r.failures,
            r.groups,
            r.recurring_groups,
            r.coder_calls,
            duration(phase_total(&r.seconds)),
            r.edit_to_episode_seconds
                .map(duration)
                .unwrap_or_else(|| "—".into()),
            r.usd
        );
    }
    out += "</tbody></table>";
    page.body += &out;
}

fn phase_total(p: &PhaseTimes) -> f64 {
    p.train_eval + p.aggregation + p.diagnosis + p.coder + p.build + p.gate + p.test_eval
}

/// The lineage: the initial harness at the root, each candidate under the
/// incumbent it was derived from.
fn lineage(page: &mut Page, prefix: &str, t: &TrainData, level: u8) {
    page.heading(level, &format!("{prefix}-lineage"), "Lineage of candidates");
    // A build can come back in a later round (the coder made the same
    // edit again): a node lists every round it was a candidate in.
    let mut round_of: BTreeMap<&str, Vec<&RoundRecord>> = BTreeMap::new();
    for r in &t.rounds {
        if let Some(c) = r.candidate.as_ref().map(ComponentHash::as_str) {
            round_of.entry(c).or_default().push(r);
        }
    }
    let mut children: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut nodes: BTreeSet<String> = t.candidates.keys().cloned().collect();
    for r in &t.rounds {
        nodes.insert(r.incumbent.to_string());
        if let Some(c) = &r.candidate {
            nodes.insert(c.to_string());
        }
    }
    let mut parent_of: BTreeMap<String, String> = BTreeMap::new();
    for h in &nodes {
        if let Some(p) = super::load::parent_of(h, t.candidates.get(h), &t.rounds) {
            children.entry(p.clone()).or_default().push(h.clone());
            parent_of.insert(h.clone(), p);
        }
    }
    let roots: Vec<&String> = nodes
        .iter()
        .filter(|h| !parent_of.contains_key(*h))
        .collect();
    let fin = t.final_incumbent().map(str::to_string);
    let mut out = String::from(
        "<p class=\"muted\">Each node is a harness build named by its blake3 hash; a candidate hangs under the incumbent it was edited from. Open a node for its change spec and <code>diff.patch</code>.</p><ul class=\"tree lineage\">",
    );
    let mut seen = BTreeSet::new();
    for root in roots {
        out += &node(
            prefix,
            t,
            root,
            &children,
            &round_of,
            fin.as_deref(),
            &mut seen,
        );
    }
    out += "</ul>";
    page.body += &out;
}

fn node(
    prefix: &str,
    t: &TrainData,
    h: &str,
    children: &BTreeMap<String, Vec<String>>,
    round_of: &BTreeMap<&str, Vec<&RoundRecord>>,
    fin: Option<&str>,
    seen: &mut BTreeSet<String>,
) -> String {
    if !seen.insert(h.to_string()) {
        return String::new();
    }
    let mut badges = String::new();
    if t.initial.as_deref() == Some(h) {
        badges += "<span class=\"badge\">initial</span> ";
    }
    for r in round_of.get(h).into_iter().flatten() {
        badges += &format!(
            "<span class=\"muted\">round {}</span> {} train {} ",
            r.round,
            decision_badge(r),
            num(r.candidate_score, 3)
        );
    }
    if fin == Some(h) {
        badges += " <span class=\"badge ok\">final incumbent</span>";
    }
    let mut out = format!(
        "<li data-hash=\"{}\"><details id=\"{prefix}-cand-{}\"><summary>{} {badges}</summary>",
        esc(h),
        esc(&short(h)),
        hash(h)
    );
    let c = t.candidates.get(h);
    for r in round_of.get(h).into_iter().flatten() {
        out += &format!("<p>Round {}: {}</p>", r.round, esc(&r.decision));
    }
    if let Some(m) = c.and_then(|c| c.manifest.as_ref()) {
        out += &format!(
            "<p class=\"muted\">{} bytes, built {} with {}</p>",
            m.size,
            esc(&m.built_at),
            esc(m.toolchain.as_deref().unwrap_or("?"))
        );
    }
    if let Some(spec) = c.and_then(|c| c.spec.as_ref()) {
        out += &format!(
            "<details><summary>Change spec</summary>{}</details>",
            spec_html(spec)
        );
    }
    match c.and_then(|c| c.diff.as_deref()) {
        Some(d) if !d.trim().is_empty() => {
            let recomputed = c.is_some_and(|c| c.diff_recomputed);
            out += &format!(
                "<details open><summary>{} ({} lines)</summary>{}</details>",
                if recomputed {
                    "diff against its parent, recomputed from the stored sources (its diff.patch is empty: a later round rebuilt the same harness and rewrote it)"
                } else {
                    "diff.patch"
                },
                d.lines().count(),
                html::diff(d)
            )
        }
        Some(_) => out += "<p class=\"muted\">empty diff</p>",
        None if t.initial.as_deref() == Some(h) => {
            out += "<p class=\"muted\">the starting harness</p>"
        }
        None => out += "<p class=\"muted\">no diff.patch recorded</p>",
    }
    out += "</details>";
    if let Some(kids) = children.get(h) {
        out += "<ul>";
        for k in kids {
            out += &node(prefix, t, k, children, round_of, fin, seen);
        }
        out += "</ul>";
    }
    out + "</li>"
}

/// A change spec, structured: patterns, changes, skills, notes.
pub(crate) fn spec_html(spec: &ChangeSpec) -> String {
    let mut out = String::new();
    if !spec.failure_patterns.is_empty() {
        out += "<h4>Failure patterns</h4><ul>";
        for p in &spec.failure_patterns {
            out += &format!(
                "<li><strong>{}</strong>: {} <span class=\"muted\">(tasks {})</span></li>",
                esc(&p.name),
                esc(&p.description),
                esc(&p.evidence_tasks.join(", "))
            );
        }
        out += "</ul>";
    }
    if !spec.proposed_changes.is_empty() {
        out += "<h4>Proposed changes</h4><table><thead><tr><th>layer</th><th>file</th><th>change</th><th>rationale</th><th>evidence tasks</th><th>rule</th></tr></thead><tbody>";
        for c in &spec.proposed_changes {
            out += &format!(
                "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}{}</td><td><code>{}</code></td></tr>",
                esc(&format!("{:?}", c.layer).to_lowercase()),
                esc(&c.file),
                esc(&c.description),
                esc(&c.rationale),
                esc(&c.evidence_tasks.join(", ")),
                if c.instance_specific {
                    " <span class=\"badge bad\" title=\"backed by a single task: the cross-instance criterion is not met\">instance-specific</span>"
                } else {
                    ""
                },
                esc(&c
                    .rule
                    .as_ref()
                    .and_then(|r| serde_json::to_string(r).ok())
                    .unwrap_or_default())
            );
        }
        out += "</tbody></table>";
    }
    if !spec.skills.is_empty() {
        out += "<h4>Skills</h4><ul>";
        for s in &spec.skills {
            out += &format!(
                "<li><strong>{}</strong>: <span class=\"msg\">{}</span> <span class=\"muted\">(keywords {})</span></li>",
                esc(&s.title),
                esc(&s.text),
                esc(&s.keywords.join(", "))
            );
        }
        out += "</ul>";
    }
    if !spec.implementation_notes.trim().is_empty() {
        out += &format!(
            "<h4>Implementation notes</h4><div class=\"msg\">{}</div>",
            esc(&spec.implementation_notes)
        );
    }
    out
}

fn round_details(page: &mut Page, prefix: &str, t: &TrainData, level: u8) {
    page.heading(
        level,
        &format!("{prefix}-diagnosis"),
        "Failure groups, diagnosis and coding per round",
    );
    let label = t.train_label();
    for r in &t.rounds {
        let mut out = format!(
            "<details id=\"{prefix}-round-{}\"{}><summary><strong>Round {}</strong> · {} failures in {} groups ({} recurring) · {} {}</summary><div class=\"ep-body\">",
            r.round,
            if r.round == 1 { " open" } else { "" },
            r.round,
            r.failures,
            r.groups,
            r.recurring_groups,
            decision_badge(r),
            esc(&r.decision)
        );
        // The groups, recomputed from the incumbent's stored evaluation
        // exactly as the round computed them (evaluations are cached per
        // component hash, and aggregation is deterministic).
        match t.eval(r.incumbent.as_str(), &label) {
            Some(run) => {
                let failures = failure_record::failures(&run.records, t.config.plan.lambda);
                let groups = aggregate::aggregate(&failures);
                out += &format!(
                    "<h4>Failure groups of incumbent {}</h4><table><thead><tr><th>signature</th><th>kind</th><th>evidence tasks</th><th class=\"n\">episodes</th></tr></thead><tbody>",
                    hash(r.incumbent.as_str())
                );
                let row = |g: &aggregate::FailureGroup| {
                    format!(
                        "<tr><td><details><summary><code>{}</code></summary><pre>{}</pre></details></td><td>{}</td><td>{}</td><td class=\"n\">{}</td></tr>",
                        esc(&super::failures::shown(&g.key)),
                        esc(&g
                            .records
                            .iter()
                            .take(3)
                            .map(|f| f.excerpt())
                            .collect::<Vec<_>>()
                            .join("\n")),
                        if g.recurring {
                            "<span class=\"badge warn\">recurring</span>"
                        } else {
                            "<span class=\"badge\">single task</span>"
                        },
                        esc(&g.tasks.join(", ")),
                        g.records.len()
                    )
                };
                // Recurring groups are the primary evidence; single-task
                // ones are folded under them.
                for g in groups.iter().filter(|g| g.recurring) {
                    out += &row(g);
                }
                out += "</tbody></table>";
                let single: Vec<&aggregate::FailureGroup> =
                    groups.iter().filter(|g| !g.recurring).collect();
                if !single.is_empty() {
                    out += &format!(
                        "<details><summary>{} single-task group{} (supporting evidence only)</summary><table><tbody>",
                        single.len(),
                        if single.len() == 1 { "" } else { "s" }
                    );
                    for g in single {
                        out += &row(g);
                    }
                    out += "</tbody></table></details>";
                }
            }
            None => {
                out += "<p class=\"muted\">The incumbent's training evaluation is not in <code>evals/</code>: failure groups not shown.</p>"
            }
        }
        if let Some(spec) = &r.spec {
            out += &format!("<h4>The round's spec</h4>{}", spec_html(spec));
        }
        if let Some(tr) = t.transcripts.get(&r.round) {
            out += &transcript_html(tr);
        }
        out += "</div></details>";
        page.body += &out;
    }
}

fn transcript_html(tr: &RoundTranscript) -> String {
    let mut out = format!("<h4>Diagnosis ({})</h4>", esc(&tr.diagnoser.to_string()));
    if !tr.evidence.is_empty() {
        out += &format!(
            "<details><summary>The scrubbed evidence the diagnosis was shown ({} unit{})</summary>",
            tr.evidence.len(),
            if tr.evidence.len() == 1 { "" } else { "s" }
        );
        for (i, e) in tr.evidence.iter().enumerate().take(50) {
            out += &format!(
                "<details><summary>unit {}</summary><pre>{}</pre></details>",
                i + 1,
                esc(e)
            );
        }
        if tr.evidence.len() > 50 {
            out += &format!(
                "<p class=\"muted\">… {} more units</p>",
                tr.evidence.len() - 50
            );
        }
        out += "</details>";
    }
    if tr.discussions.is_empty() {
        out += "<p class=\"muted\">No FDCR discussion: the offline heuristic diagnoser (or the method) wrote the spec from the groups.</p>";
    }
    for (i, d) in tr.discussions.iter().enumerate() {
        out += &format!(
            "<details open><summary>FDCR discussion {} · {} turns · {} model calls{}</summary>",
            i + 1,
            d.transcript.len(),
            d.calls,
            d.error
                .as_deref()
                .map(|e| format!(" · <span class=\"badge bad\">no spec</span> {}", esc(e)))
                .unwrap_or_default()
        );
        for turn in &d.transcript {
            let role = turn.role.as_str();
            out += &format!(
                "<div class=\"turn {}\"><span class=\"who\">{} · round {}</span>{}<div class=\"msg\">{}</div></div>",
                esc(role),
                esc(role),
                turn.round,
                turn.usage
                    .as_ref()
                    .map(|u| format!(
                        " <span class=\"muted\">{} + {} tokens</span>",
                        u.prompt_tokens, u.completion_tokens
                    ))
                    .unwrap_or_default(),
                esc(&turn.content)
            );
        }
        if let Some(spec) = &d.spec {
            out += &format!("<h4>The Moderator's spec</h4>{}", spec_html(spec));
        }
        out += "</details>";
    }
    if !tr.coder_runs.is_empty() {
        out += "<h4>Coder runs</h4><table><thead><tr><th>coder</th><th>result</th><th class=\"n\">attempts</th><th>changed files</th><th>log</th></tr></thead><tbody>";
        for c in &tr.coder_runs {
            out += &format!(
                "<tr><td><code>{}</code></td><td>{}{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td></tr>",
                esc(&c.coder.to_string()),
                if c.ok {
                    "<span class=\"badge ok\">ok</span>"
                } else {
                    "<span class=\"badge bad\">failed</span>"
                },
                c.error
                    .as_deref()
                    .map(|e| format!(" {}", esc(e)))
                    .unwrap_or_default(),
                c.attempts,
                esc(&c.changed_files.join(", ")),
                if c.log.trim().is_empty() {
                    String::new()
                } else if c.log.len() < 120 && !c.log.contains('\n') {
                    esc(&c.log).to_string()
                } else {
                    format!(
                        "<details><summary>{} lines</summary><pre>{}</pre></details>",
                        c.log.lines().count(),
                        esc(&c.log)
                    )
                }
            );
        }
        out += "</tbody></table>";
    }
    out
}

fn costs(page: &mut Page, prefix: &str, t: &TrainData, level: u8) -> Result<(), ReportError> {
    page.heading(
        level,
        &format!("{prefix}-costs"),
        "Time per phase and dollars per role",
    );
    page.body += "<div class=\"charts\">";
    if !t.rounds.is_empty() {
        type Phase = (&'static str, fn(&PhaseTimes) -> f64);
        let phases: [Phase; 6] = [
            ("train eval", |p| p.train_eval),
            ("aggregation", |p| p.aggregation),
            ("diagnosis", |p| p.diagnosis),
            ("coder", |p| p.coder),
            ("build", |p| p.build),
            ("gate", |p| p.gate),
        ];
        let mut b = Bars::new(
            "Seconds per phase and round",
            t.rounds
                .iter()
                .map(|r| format!("round {}", r.round))
                .collect(),
        );
        for (j, (name, f)) in phases.iter().enumerate() {
            b = b.series(
                *name,
                charts::color(j),
                t.rounds.iter().map(|r| f(&r.seconds)).collect(),
            );
        }
        b.stacked = true;
        b.horizontal = true;
        b.decimals = 1;
        b.axis = "seconds".into();
        b.size = (620, 110 + 36 * t.rounds.len() as u32);
        page.body += &charts::bars(&b)?;
    }
    let usage = t
        .summary
        .as_ref()
        .map(|s| s.usage.clone())
        .or_else(|| t.ledger.as_ref().map(|l| l.summary.clone()));
    if let Some(u) = &usage
        && u.total.usd > 0.0
    {
        let roles: Vec<String> = u.by_role.keys().map(ToString::to_string).collect();
        let mut b = Bars::new("Dollars per role", roles.clone()).series(
            "USD",
            charts::color(4),
            u.by_role.values().map(|r| r.usd).collect(),
        );
        b.horizontal = true;
        b.decimals = 4;
        b.axis = "USD".into();
        b.size = (480, 70 + 34 * roles.len() as u32);
        page.body += &charts::bars(&b)?;
    }
    page.body += "</div>";
    if usage.as_ref().is_none_or(|u| u.total.usd == 0.0) {
        page.body += "<p class=\"muted\">No dollars spent: every model of this run was offline (a simulated agent, the scripted user, the heuristic diagnoser and the rule coder) or unpriced.</p>";
    }
    if let Some(s) = &t.summary {
        page.body += &format!(
            "<p>Totals: training evaluations {}, aggregation {}, diagnosis {}, coder {}, build {}, gate {}, held-out test {}.</p>",
            duration(s.seconds.train_eval),
            duration(s.seconds.aggregation),
            duration(s.seconds.diagnosis),
            duration(s.seconds.coder),
            duration(s.seconds.build),
            duration(s.seconds.gate),
            duration(s.seconds.test_eval)
        );
    }
    if let Some(u) = &usage {
        let mut out = String::from(
            "<table><thead><tr><th>role</th><th class=\"n\">fresh calls</th><th class=\"n\">cache hits</th><th class=\"n\">failed</th><th class=\"n\">prompt tokens</th><th class=\"n\">completion tokens</th><th class=\"n\">USD</th></tr></thead><tbody>",
        );
        let rows = u.by_role.iter().map(|(role, r)| (role.as_str(), r));
        for (role, r) in rows.chain(std::iter::once(("total", &u.total))) {
            out += &format!(
                "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">${:.4}</td></tr>",
                esc(role),
                r.fresh_calls,
                r.cache_hits,
                r.failed_calls,
                r.fresh_tokens.prompt_tokens,
                r.fresh_tokens.completion_tokens,
                r.usd
            );
        }
        out += "</tbody></table>";
        if !u.unpriced_models.is_empty() {
            out += &format!(
                "<p class=\"note\">No price for {}: their calls are not in the dollars.</p>",
                esc(&u
                    .unpriced_models
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "))
            );
        }
        page.body += &out;
    }
    Ok(())
}

fn evaluations(page: &mut Page, t: &TrainData) {
    if t.evals.is_empty() {
        return;
    }
    let mut out = String::from(
        "<details><summary>Stored evaluations (each a run directory: <code>ecdysis-host report</code> it for its trajectories)</summary><table><thead><tr><th>directory</th><th class=\"n\">episodes</th><th class=\"n\">accuracy</th><th>pass^k</th></tr></thead><tbody>",
    );
    for (name, run) in &t.evals {
        let m = run.metrics();
        out += &format!(
            "<tr><td><code>evals/{}</code></td><td class=\"n\">{}</td><td class=\"n\">{:.3}</td><td>{}</td></tr>",
            esc(name),
            m.episodes,
            m.accuracy,
            m.pass_hat_k
                .iter()
                .map(|(k, v)| format!("pass^{k} {v:.3}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    out += "</tbody></table></details>";
    page.body += &out;
}

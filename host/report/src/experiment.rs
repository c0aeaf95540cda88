//! The experiment page (`ecdysis-host experiment`): the methods side by
//! side as in the paper's main table, bars, cross-model transfer, per-task
//! differences between any two methods, then each method's training page.
//!
//! `experiment.json` is the library's [`ExperimentReport`].

use std::collections::BTreeMap;

use super::charts::{self, Bars};
use super::html::{duration, esc, hash, num};
use super::load::{ExperimentData, HeldOut, RunData, TrainData};
use super::run::kv;
use super::{Page, ReportError, compare, train};
use ecdysis_evolve::experiment::{BaselineRow, ExperimentReport, MethodRow};
use ecdysis_evolve::train::TestScore;

/// Per-task mean reward of a method's final incumbent on `label`.
fn per_task(t: &TrainData, label: &str) -> Option<BTreeMap<String, f64>> {
    let run = t.eval(t.final_incumbent()?, label)?;
    Some(task_rewards(run))
}

pub(crate) fn task_rewards(run: &RunData) -> BTreeMap<String, f64> {
    run.metrics()
        .per_task
        .into_iter()
        .map(|t| (t.task_id, t.mean_reward))
        .collect()
}

fn ecdysis_note() -> &'static str {
    ecdysis_evolve::experiment::SAME_CODE_NOTE
}

/// The methods' rows: the file's, else built from each training summary.
fn rows(e: &ExperimentData) -> Vec<(String, MethodRow)> {
    if let Some(f) = &e.file {
        return f
            .methods
            .iter()
            .map(|r| (r.method.as_str().to_string(), r.clone()))
            .collect();
    }
    e.methods
        .iter()
        .filter_map(|(name, t)| {
            let s = t.summary.as_ref()?;
            let mut row = MethodRow::from_summary(s, &t.dir);
            row.diagnoser = t.config.diagnoser.clone();
            Some((name.clone(), row))
        })
        .collect()
}

pub(crate) fn section(
    page: &mut Page,
    prefix: &str,
    e: &ExperimentData,
) -> Result<(), ReportError> {
    let name = e
        .dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    page.heading(2, &format!("{prefix}-exp"), &format!("Experiment {name}"));
    if e.simulated() && page.multi {
        let models = e
            .methods
            .iter()
            .map(|m| &m.1.config.train.agent_model)
            .chain(e.file.iter().map(|f| &f.agent_model))
            .filter(|m| m.is_simulated())
            .map(ToString::to_string)
            .collect();
        page.body += &super::sim_banner(&models);
    }
    header(page, e);
    let rows = rows(e);
    page.heading(3, &format!("{prefix}-table"), "Methods side by side");
    page.body += &table(prefix, e, &rows);
    if !rows.is_empty() {
        charts_row(page, e, &rows)?;
    }
    transfer(page, prefix, e)?;
    pairs(page, prefix, e);
    if !e.methods.is_empty() {
        page.heading(3, &format!("{prefix}-runs"), "Each method's training run");
    }
    for (name, t) in &e.methods {
        let id = format!("{prefix}-m-{}", super::html::slug(name));
        page.body += &format!("<div id=\"{}\"></div>", esc(&id));
        let summary = t
            .summary
            .as_ref()
            .map(|s| {
                format!(
                    "{:.3} → {:.3}, {} accepted, final {}",
                    s.initial_train_score,
                    s.final_train_score,
                    s.accepted,
                    hash(s.incumbent.as_str())
                )
            })
            .unwrap_or_else(|| "in progress".into());
        page.body += &format!(
            "<details class=\"method\"><summary><strong>Method {}</strong>: its training run ({summary})</summary>",
            esc(name)
        );
        train::section(page, &id, t, 3)?;
        page.body += "</details>";
    }
    Ok(())
}

/// What was compared, from `experiment.json`.
fn header(page: &mut Page, e: &ExperimentData) {
    let Some(f) = &e.file else {
        page.body += "<p class=\"note\">No <code>experiment.json</code> (an unfinished experiment, or one from before the file existed): the methods' training directories are shown as found.</p>";
        return;
    };
    let first = e.methods.first().map(|m| &m.1.config);
    page.body += &kv(&[
        (
            "directory",
            format!("<code>{}</code>", esc(&e.dir.display().to_string())),
        ),
        ("domain", esc(&f.domain).to_string()),
        (
            "agent trained on",
            format!("<code>{}</code>", esc(f.agent_model.as_str())),
        ),
        ("diagnoser", esc(&f.diagnoser.to_string()).to_string()),
        (
            "rounds × trials",
            first
                .map(|c| {
                    format!(
                        "at most {} rounds, {} trial(s) per task",
                        c.plan.rounds, c.train.settings.trials
                    )
                })
                .unwrap_or_else(|| "—".into()),
        ),
        (
            "coder latency",
            if !f.coder.is_real() {
                format!(
                    "{} ms per coder call (simulated; the wall-time ratio depends on it)",
                    f.coder_latency_ms
                )
            } else {
                format!("real calls of <code>{}</code>", esc(&f.coder.to_string()))
            },
        ),
    ]);
}

/// pass^k of a method's final incumbent on the held-out split (else, for
/// older runs, its `test` or training evaluation).
fn method_pass_k(e: &ExperimentData, name: &str) -> BTreeMap<u64, f64> {
    e.methods
        .iter()
        .find(|m| m.0 == name)
        .and_then(|(_, t)| {
            if let Some(test) = t.summary.as_ref().and_then(|s| s.test.as_ref()) {
                return Some(pass_k(&test.final_));
            }
            let label = if t.config.test_tasks.is_empty() {
                t.train_label()
            } else {
                "test".into()
            };
            t.eval(t.final_incumbent()?, &label)
                .map(|run| run.metrics().pass_hat_k)
        })
        .unwrap_or_default()
}

fn pass_k(score: &TestScore) -> BTreeMap<u64, f64> {
    score
        .intervals
        .pass_hat_k
        .iter()
        .map(|(k, i)| (*k, i.estimate))
        .collect()
}

/// pass^1 / pass^2 / ... values, one column: the header names the ks.
fn pass_k_text(pk: &BTreeMap<u64, f64>) -> String {
    if pk.is_empty() {
        return "—".into();
    }
    pk.values()
        .map(|v| format!("{v:.3}"))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// The pass^k column's header: `pass^1 / pass^2 / pass^3 (test)`.
fn pass_k_header(ks: &[u64]) -> String {
    if ks.is_empty() {
        return "pass^k (test)".into();
    }
    let names: Vec<String> = ks.iter().map(|k| format!("pass^{k}")).collect();
    format!("{} (test)", names.join(" / "))
}

/// The main table: the untrained baselines (Direct, Human-Augmented), then
/// one row per method.
fn table(prefix: &str, e: &ExperimentData, rows: &[(String, MethodRow)]) -> String {
    let base_pk: Vec<BTreeMap<u64, f64>> = baselines(e)
        .iter()
        .map(|b| b.test.as_ref().map(pass_k).unwrap_or_default())
        .collect();
    let method_pk: Vec<BTreeMap<u64, f64>> = rows
        .iter()
        .map(|(name, _)| method_pass_k(e, name))
        .collect();
    let ks: std::collections::BTreeSet<u64> = base_pk
        .iter()
        .chain(&method_pk)
        .flat_map(|pk| pk.keys().copied())
        .collect();
    // Offline (rule coder, heuristic diagnoser) no model is paid: the two
    // columns would be zeros, and the note below says so instead.
    let spent = rows.iter().any(|(_, r)| r.tokens > 0 || r.usd > 0.0);
    let mut out = format!(
        "<div class=\"scroll\"><table><thead><tr><th>method</th><th class=\"n\">train wall time</th><th class=\"n\">coder calls</th><th class=\"n\">accepted / rounds</th><th class=\"n\">train initial → final</th><th class=\"n\">test</th><th class=\"n\">{}</th><th class=\"n\">edits</th><th class=\"n\">accommodation</th><th class=\"n\">measured accommodation</th>{}</tr></thead><tbody>",
        esc(&pass_k_header(&ks.into_iter().collect::<Vec<_>>())),
        if spent {
            "<th class=\"n\">tokens</th><th class=\"n\">USD</th>"
        } else {
            ""
        }
    );
    for (b, pk) in baselines(e).iter().zip(&base_pk) {
        out += &format!(
            "<tr class=\"baseline\"><td class=\"nw\"><strong>{}</strong><br><span class=\"muted\">baseline, not trained</span></td><td class=\"n\">—</td><td class=\"n\">—</td><td class=\"n\">—</td><td class=\"n nw\">{:.3}</td><td class=\"n\">{}</td><td class=\"n nw\">{}</td><td class=\"n\">—</td><td class=\"n\">—</td><td class=\"n\">—</td>{}</tr>",
            esc(&b.name),
            b.train,
            num(b.test_accuracy(), 3),
            pass_k_text(pk),
            if spent {
                "<td class=\"n\">—</td><td class=\"n\">—</td>"
            } else {
                ""
            }
        );
    }
    for ((name, r), pk) in rows.iter().zip(&method_pk) {
        out += &format!(
            "<tr><td class=\"nw\"><a href=\"#{prefix}-m-{}\"><strong>{}</strong></a></td><td class=\"n nw\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}/{}</td><td class=\"n nw\">{:.3} → {:.3}</td><td class=\"n\">{}</td><td class=\"n nw\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>{}{}</tr>",
            esc(&super::html::slug(name)),
            if r.same_as.is_empty() {
                esc(&r.name()).to_string()
            } else {
                format!(
                    "{}</strong><br><span class=\"muted\">{}</span><strong>",
                    esc(&r.name()),
                    esc(ecdysis_note())
                )
            },
            duration(r.train_seconds),
            r.coder_calls,
            r.accepted,
            r.rounds,
            r.initial_train,
            r.final_train,
            num(r.test, 3),
            pass_k_text(pk),
            r.edits,
            match (r.accommodation_percent(), r.accommodating) {
                (Some(p), Some(a)) => format!("{p:.0}% ({a}/{})", r.edits),
                _ => "—".into(),
            },
            measured_cell(r),
            if spent {
                format!(
                    "<td class=\"n\">{}</td><td class=\"n\">${:.4}</td>",
                    r.tokens, r.usd
                )
            } else {
                String::new()
            }
        );
    }
    out += "</tbody></table></div><p class=\"muted\">";
    if !spent {
        out += "No model tokens were paid (rule coder, heuristic diagnoser): tokens and USD are not shown. ";
    }
    out += "Direct runs the agent with no harness; Human-Augmented is the source harness as written, untrained. Accommodation: accepted edits whose evidence episodes show only model-specific quirks (judged from the testbed's ground truth), i.e. edits that fit the harness to this agent rather than to the task interface. Measured accommodation: accepted candidates that raised the training agent's score but not, on average, the transfer agents' with room to gain, out of the candidates with a label (undetermined: no transfer agent had headroom), measured on any agent, real or simulated.</p>";
    out
}

/// The measured-accommodation cell of a method: `accommodating/labelled`
/// with the rate, the undetermined count and the agreement with the
/// testbed's ground truth where there is one; `data-measured` carries the
/// three counts.
fn measured_cell(r: &MethodRow) -> String {
    let Some(m) = &r.measured_accommodation else {
        return "<td class=\"n\">—</td>".into();
    };
    let (accommodating, labelled) = m.counts();
    let undetermined = m.changes.len() - labelled;
    let mut text = format!("{accommodating}/{labelled}");
    if let Some(rate) = m.rate() {
        text += &format!(" ({:.0}%)", rate * 100.0);
    }
    if undetermined > 0 {
        text += &format!(", {undetermined} undetermined");
    }
    if let Some(a) = m.agreement() {
        text += &format!(
            "<br><span class=\"muted\">agrees with the ground truth: {:.0}%</span>",
            a * 100.0
        );
    }
    format!(
        "<td class=\"n nw\" data-measured=\"{accommodating}/{labelled}/{undetermined}\">{text}</td>"
    )
}

/// The baselines of `experiment.json` (none in files from before they
/// were measured).
fn baselines(e: &ExperimentData) -> &[BaselineRow] {
    e.file.as_ref().map(|f| &f.baselines[..]).unwrap_or(&[])
}

/// Accuracy, wall time and coder calls per method, as bars.
fn charts_row(
    page: &mut Page,
    e: &ExperimentData,
    rows: &[(String, MethodRow)],
) -> Result<(), ReportError> {
    let base = baselines(e);
    let cats: Vec<String> = base
        .iter()
        .map(|b| b.name.clone())
        .chain(rows.iter().map(|r| r.0.clone()))
        .collect();
    let methods: Vec<&MethodRow> = rows.iter().map(|r| &r.1).collect();
    // A baseline is not trained: its initial and final are the same.
    let series = |f: &dyn Fn(&MethodRow) -> f64, b: &dyn Fn(&BaselineRow) -> f64| -> Vec<f64> {
        base.iter()
            .map(b)
            .chain(methods.iter().map(|r| f(r)))
            .collect()
    };
    let mut scores = Bars::new("Accuracy per method", cats)
        .series(
            "train, initial",
            charts::color(9),
            series(&|r| r.initial_train, &|b| b.train),
        )
        .series(
            "train, final",
            charts::color(0),
            series(&|r| r.final_train, &|b| b.train),
        )
        .series(
            "test, final",
            charts::color(1),
            series(&|r| r.test.unwrap_or(0.0), &|b| {
                b.test_accuracy().unwrap_or(0.0)
            }),
        );
    scores.max = Some(1.0);
    scores.axis = "mean reward".into();
    scores.size = (640, 320);
    let names: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    let mut wall = Bars::new("Training wall time per method", names.clone()).series(
        "seconds",
        charts::color(3),
        methods.iter().map(|r| r.train_seconds).collect(),
    );
    wall.horizontal = true;
    wall.decimals = 0;
    wall.axis = "seconds (without the held-out evaluation)".into();
    wall.size = (480, 70 + 40 * methods.len() as u32);
    let mut coder = Bars::new("Coder calls per method", names).series(
        "coder calls",
        charts::color(6),
        methods.iter().map(|r| f64::from(r.coder_calls)).collect(),
    );
    coder.horizontal = true;
    coder.decimals = 0;
    coder.axis = "coder calls".into();
    coder.size = (480, 70 + 40 * methods.len() as u32);
    page.body += "<div class=\"charts\">";
    page.body += &charts::bars(&scores)?;
    page.body += &charts::bars(&wall)?;
    page.body += &charts::bars(&coder)?;
    page.body += "</div>";
    Ok(())
}

/// Per-task differences on the held-out split (else training tasks)
/// between any two of the baselines and methods.
fn pairs(page: &mut Page, prefix: &str, e: &ExperimentData) {
    let mut named: Vec<(String, BTreeMap<String, f64>)> = Vec::new();
    if let Some(b) = &e.baselines {
        for (name, which) in [
            ("direct", HeldOut::Direct),
            ("human-augmented", HeldOut::Initial),
        ] {
            if let Some(run) = b.held_out(which) {
                named.push((name.into(), task_rewards(run)));
            }
        }
    }
    named.extend(e.methods.iter().filter_map(|(name, t)| {
        t.held_out(HeldOut::Final)
            .map(task_rewards)
            .or_else(|| per_task(t, "test"))
            .or_else(|| per_task(t, &t.train_label()))
            .map(|m| (name.clone(), m))
    }));
    if named.len() >= 2 {
        page.heading(
            3,
            &format!("{prefix}-pairs"),
            "Per-task differences between methods",
        );
        page.body += "<p class=\"muted\">Mean reward per task of each baseline and of each method's final incumbent (held-out split where it was evaluated). Open a pair to see the tasks where they differ.</p>";
        page.body += &compare::pairwise(&named);
    }
}

fn transfer(page: &mut Page, prefix: &str, e: &ExperimentData) -> Result<(), ReportError> {
    let rows: Vec<ecdysis_evolve::experiment::TransferRow> = e
        .file
        .as_ref()
        .map(|f: &ExperimentReport| f.transfer.clone())
        .unwrap_or_default();
    if rows.is_empty() {
        return Ok(());
    }
    page.heading(
        3,
        &format!("{prefix}-transfer"),
        "Cross-model transfer (test split)",
    );
    let mut out = String::from(
        "<table><thead><tr><th>agent</th><th class=\"n\">initial harness</th><th class=\"n\">trained harness</th><th class=\"n\">change</th></tr></thead><tbody>",
    );
    for r in &rows {
        out += &format!(
            "<tr><td><code>{}</code></td><td class=\"n\">{:.3}</td><td class=\"n\">{:.3}</td><td class=\"n\">{:+.3}</td></tr>",
            esc(r.agent_model.as_str()),
            r.initial,
            r.trained,
            r.trained - r.initial
        );
    }
    out += "</tbody></table>";
    page.body += &out;
    let mut b = Bars::new(
        "Ecdysis's trained harness with other agents",
        rows.iter().map(|r| r.agent_model.to_string()).collect(),
    )
    .series(
        "initial harness",
        charts::color(9),
        rows.iter().map(|r| r.initial).collect(),
    )
    .series(
        "trained harness",
        charts::color(4),
        rows.iter().map(|r| r.trained).collect(),
    );
    b.max = Some(1.0);
    b.axis = "mean reward".into();
    b.size = (520, 300);
    page.body += "<div class=\"charts\">";
    page.body += &charts::bars(&b)?;
    page.body += "</div>";
    Ok(())
}

//! Several directories at once: their headline numbers side by side, bars
//! with intervals, and the per-task differences between any two.

use std::collections::{BTreeMap, BTreeSet};

use super::charts::{self, Bars};
use super::experiment::task_rewards;
use super::html::{duration, esc, hash, num};
use super::stats;
use super::{Loaded, Page, ReportError};
use ecdysis_sandbox::store::ComponentHash;

fn name(l: &Loaded) -> String {
    l.dir()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| l.dir().display().to_string())
}

/// Names made unique (two `runs/x` and `other/x` directories).
fn unique_names(loaded: &[Loaded]) -> Vec<String> {
    let names: Vec<String> = loaded.iter().map(name).collect();
    names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            if names.iter().filter(|m| *m == n).count() > 1 {
                format!("{n} ({})", i + 1)
            } else {
                n.clone()
            }
        })
        .collect()
}

pub(crate) fn section(page: &mut Page, loaded: &[Loaded]) -> Result<(), ReportError> {
    page.heading(
        2,
        "compare",
        &format!("Comparison of {} directories", loaded.len()),
    );
    let names = unique_names(loaded);
    let mut out = String::from(
        "<table><thead><tr><th>directory</th><th>kind</th><th>agent</th><th>harness / method</th><th class=\"n\">score</th><th class=\"n\">95% CI</th><th>pass^k</th><th class=\"n\">held-out test</th><th class=\"n\">episodes</th><th class=\"n\">wall time</th><th class=\"n\">USD</th></tr></thead><tbody>",
    );
    // (directory, score, 95% interval)
    type Bar = (String, f64, Option<(f64, f64)>);
    let mut bars: Vec<Bar> = Vec::new();
    let mut per_task: Vec<(String, BTreeMap<String, f64>)> = Vec::new();
    for (i, (l, n)) in loaded.iter().zip(&names).enumerate() {
        let link = format!("<a href=\"#d{i}-{}\">{}</a>", section_suffix(l), esc(n));
        match l {
            Loaded::Run(r) => {
                let m = r.metrics();
                let iv =
                    stats::task_intervals(&m.per_task, page.opts.bootstrap_samples, page.opts.seed);
                bars.push((
                    n.clone(),
                    m.accuracy,
                    Some((iv.accuracy.low, iv.accuracy.high)),
                ));
                per_task.push((n.clone(), task_rewards(r)));
                out += &format!(
                    "<tr><td>{link}</td><td>run</td><td><code>{}</code></td><td>{}</td><td class=\"n\">{:.3}</td><td class=\"n\">{:.3}–{:.3}</td><td>{}</td><td class=\"n\">—</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                    esc(r.config.agent_model.as_str()),
                    r.config
                        .harness
                        .as_ref()
                        .map(ComponentHash::as_str)
                        .map(super::html::hash)
                        .unwrap_or_else(|| "Direct".into()),
                    m.accuracy,
                    iv.accuracy.low,
                    iv.accuracy.high,
                    iv.pass_hat_k
                        .iter()
                        .map(|(k, v)| format!("pass^{k} {:.3}", v.estimate))
                        .collect::<Vec<_>>()
                        .join(", "),
                    m.episodes,
                    r.summary
                        .as_ref()
                        .map(|s| duration(s.wall_seconds))
                        .unwrap_or_else(|| "in progress".into()),
                    r.summary
                        .as_ref()
                        .and_then(|s| s.ledger.as_ref())
                        .map(|l| format!("${:.4}", l.total.usd))
                        .unwrap_or_else(|| "—".into())
                );
            }
            Loaded::Training(t) => {
                let s = t.summary.as_ref();
                if let Some(s) = s {
                    bars.push((n.clone(), s.final_train_score, None));
                }
                out += &format!(
                    "<tr><td>{link}</td><td>training</td><td><code>{}</code></td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">—</td><td></td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                    esc(t.config.train.agent_model.as_str()),
                    esc(t.config.plan.method.as_str()),
                    s.map(|s| format!("{:.3} → {:.3}", s.initial_train_score, s.final_train_score))
                        .unwrap_or_else(|| "in progress".into()),
                    num(s.and_then(|s| s.test_score), 3),
                    s.map(|s| s.episodes.to_string()).unwrap_or_default(),
                    s.map(|s| duration(s.wall_seconds)).unwrap_or_default(),
                    s.map(|s| format!("${:.4}", s.usage.total.usd))
                        .unwrap_or_default()
                );
            }
            Loaded::Experiment(e) => {
                out += &format!(
                    "<tr><td>{link}</td><td>experiment</td><td><code>{}</code></td><td>{} methods</td><td></td><td></td><td></td><td></td><td></td><td></td><td></td></tr>",
                    esc(&e
                        .file
                        .as_ref()
                        .map(|f| f.agent_model.to_string())
                        .unwrap_or_default()),
                    e.methods.len()
                );
            }
            Loaded::Proxy(p) => {
                let requests: usize = p.conversations.iter().map(|c| c.requests.len()).sum();
                out += &format!(
                    "<tr><td>{link}</td><td>proxy records</td><td></td><td>{}</td><td></td><td></td><td></td><td></td><td class=\"n\">{} conversations, {requests} requests</td><td></td><td></td></tr>",
                    p.manifest.harness.as_deref().map(hash).unwrap_or_default(),
                    p.conversations.len(),
                );
            }
        }
    }
    out += "</tbody></table><p class=\"muted\">Score: accuracy (mean reward) of a run; training score initial → final of a training run.</p>";
    page.body += &out;
    if bars.len() >= 2 {
        let mut b = Bars::new(
            "Score per directory (95% bootstrap interval over tasks for runs)",
            bars.iter().map(|b| b.0.clone()).collect(),
        )
        .series(
            "score",
            charts::color(0),
            bars.iter().map(|b| b.1).collect(),
        );
        b.intervals = bars.iter().map(|b| b.2).collect();
        b.max = Some(1.0);
        b.axis = "mean reward".into();
        b.size = (160 + 120 * bars.len() as u32, 320);
        page.body += "<div class=\"charts\">";
        page.body += &charts::bars(&b)?;
        page.body += "</div>";
    }
    if per_task.len() >= 2 {
        page.heading(3, "compare-pairs", "Per-task differences");
        page.body += &pairwise(&per_task);
    }
    Ok(())
}

fn section_suffix(l: &Loaded) -> &'static str {
    match l {
        Loaded::Run(_) => "run",
        Loaded::Training(_) => "train",
        Loaded::Experiment(_) => "exp",
        Loaded::Proxy(_) => "proxy",
    }
}

/// Every pair (A, B) of per-task mean rewards: how many tasks B does
/// better, worse, the same on (over the tasks both ran), and the tasks that
/// differ, largest difference first.
pub(crate) fn pairwise(named: &[(String, BTreeMap<String, f64>)]) -> String {
    let mut out = String::new();
    for i in 0..named.len() {
        for j in i + 1..named.len() {
            let (a, am) = &named[i];
            let (b, bm) = &named[j];
            let common: BTreeSet<&String> = am.keys().filter(|k| bm.contains_key(*k)).collect();
            let mut diffs: Vec<(&String, f64, f64)> = common
                .iter()
                .map(|k| (*k, am[*k], bm[*k]))
                .filter(|(_, x, y)| (x - y).abs() > 1e-9)
                .collect();
            diffs.sort_by(|x, y| {
                (y.2 - y.1)
                    .abs()
                    .total_cmp(&(x.2 - x.1).abs())
                    .then(x.0.cmp(y.0))
            });
            let better = diffs.iter().filter(|d| d.2 > d.1).count();
            let worse = diffs.len() - better;
            let mean = |m: &BTreeMap<String, f64>| {
                common.iter().map(|k| m[*k]).sum::<f64>() / common.len().max(1) as f64
            };
            out += &format!(
                "<details class=\"pair\"><summary><strong>{}</strong> vs <strong>{}</strong>: {} tasks in common, {} better with {b_}, {} worse, {} the same (means {:.3} vs {:.3})</summary>",
                esc(a),
                esc(b),
                common.len(),
                better,
                worse,
                common.len() - diffs.len(),
                mean(am),
                mean(bm),
                b_ = esc(b)
            );
            if diffs.is_empty() {
                out += "<p class=\"muted\">No task differs.</p>";
            } else {
                out += &format!(
                    "<table><thead><tr><th>task</th><th class=\"n\">{}</th><th class=\"n\">{}</th><th class=\"n\">difference</th></tr></thead><tbody>",
                    esc(a),
                    esc(b)
                );
                for (k, x, y) in &diffs {
                    out += &format!(
                        "<tr><td><code>{}</code></td><td class=\"n\">{:.2}</td><td class=\"n\">{:.2}</td><td class=\"n\"><span class=\"badge {}\">{:+.2}</span></td></tr>",
                        esc(k),
                        x,
                        y,
                        if y > x { "ok" } else { "bad" },
                        y - x
                    );
                }
                out += "</tbody></table>";
            }
            out += "</details>";
        }
    }
    out
}

//! The run page: headline numbers with intervals, the reward grid, end
//! reasons, interventions per hook, fuel and time, tokens and dollars, then
//! the trajectory viewer.

use std::collections::BTreeMap;

use super::charts::{self, Bars};
use super::html::{duration, esc, hash, num, pct};
use super::load::RunData;
use super::stats::{self, log_bins};
use super::{Page, ReportError, trajectory};
use ecdysis_model::ModelRole;
use ecdysis_runner::agent::EpisodeRecord;
use ecdysis_sandbox::store::ComponentHash;

/// The variant name of a hook decision (`execute`, `annotate`...).
pub(crate) fn decision_kind(d: &serde_json::Value) -> String {
    match d {
        serde_json::Value::String(s) => s.to_lowercase(),
        serde_json::Value::Object(m) => m
            .keys()
            .next()
            .map(|k| k.to_lowercase())
            .unwrap_or_default(),
        serde_json::Value::Array(_) => "guidance".into(),
        _ => "other".into(),
    }
}

pub(crate) fn dir_title(run: &RunData) -> String {
    run.dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| run.dir.display().to_string())
}

/// The configuration as a key/value table.
fn meta(run: &RunData) -> String {
    let c = &run.config;
    let mut rows: Vec<(&str, String)> = vec![
        (
            "directory",
            format!("<code>{}</code>", esc(&run.dir.display().to_string())),
        ),
        (
            "harness",
            c.harness
                .as_ref()
                .map(ComponentHash::as_str)
                .map(hash)
                .unwrap_or_else(|| "none (Direct baseline)".into()),
        ),
        (
            "domain / split",
            format!(
                "{} / {}",
                esc(&c.settings.domain),
                esc(c.settings.split.as_deref().unwrap_or("all"))
            ),
        ),
        (
            "tasks × trials",
            format!("{} × {}", c.tasks.len(), c.settings.trials),
        ),
        (
            "agent",
            format!("<code>{}</code>", esc(c.agent_model.as_str())),
        ),
        (
            "user simulator",
            format!("<code>{}</code>", esc(&c.user_model)),
        ),
        (
            "seed / limits",
            format!(
                "seed {}, at most {} steps and {} tool errors, policy {}",
                c.settings.seed,
                c.settings.max_steps,
                c.settings.max_errors,
                esc(&serde_json::to_value(c.settings.policy)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default())
            ),
        ),
    ];
    if let Some(s) = &run.summary {
        rows.push((
            "wall time",
            format!(
                "{} ({} episodes run by the last invocation)",
                duration(s.wall_seconds),
                s.ran_now
            ),
        ));
    }
    kv(&rows)
}

pub(crate) fn kv(rows: &[(&str, String)]) -> String {
    let mut out = String::from("<div class=\"kv\">");
    for (k, v) in rows {
        out += &format!("<div>{}</div><div>{v}</div>", esc(k));
    }
    out + "</div>"
}

pub(crate) fn card(value: &str, label: &str, extra: &str) -> String {
    format!(
        "<div class=\"card\"><div class=\"v\">{value}</div><div class=\"l\">{}</div>{}</div>",
        esc(label),
        if extra.is_empty() {
            String::new()
        } else {
            format!("<div class=\"ci\">{extra}</div>")
        }
    )
}

pub(crate) fn ci_text(i: &stats::Interval) -> String {
    format!("95% CI {:.3}–{:.3}", i.low, i.high)
}

/// The run page.
pub(crate) fn section(page: &mut Page, prefix: &str, run: &RunData) -> Result<(), ReportError> {
    let title = format!("Run {}", dir_title(run));
    page.heading(2, &format!("{prefix}-run"), &title);
    if run.simulated() && page.multi {
        page.body +=
            &super::sim_banner(&[run.config.agent_model.to_string()].into_iter().collect());
    }
    page.body += &meta(run);
    let total = run.config.tasks.len() as u64 * u64::from(run.config.settings.trials);
    if run.summary.is_none() {
        page.body += &format!(
            "<p class=\"note\">In progress: no <code>summary.json</code> yet. {} of {} episodes are finished; the numbers below are over those only.</p>",
            run.records.len(),
            total
        );
    }
    if let Some(s) = &run.summary
        && s.metrics.episodes != run.records.len() as u64
    {
        // A finished run's file and summary disagree: a line torn or cut
        // off after the run, or lines added or removed by hand. The headline
        // is the summary's; the grid and the trajectories are the file's.
        page.body += &format!(
            "<p class=\"note\">The summary counts {} episodes, but {} were read from <code>trajectories.jsonl</code> (damaged or edited after the run finished): the headline numbers are the summary's, the grid and the trajectories the file's.</p>",
            s.metrics.episodes,
            run.records.len()
        );
    }
    let m = run.metrics();
    let iv = stats::task_intervals(&m.per_task, page.opts.bootstrap_samples, page.opts.seed);
    headline(page, run, &m, &iv)?;
    grid(page, prefix, run);
    ends_and_hooks(page, prefix, run, &m)?;
    page.heading(
        3,
        &format!("{prefix}-failures"),
        "Failure groups (by mechanism)",
    );
    // The sim label is the page's (its banner); not repeated here.
    page.body += &super::failures::render_html(&super::failures::view_of(&run.records, 1.0, false));
    distributions(page, prefix, run)?;
    usage(page, prefix, run, &m);
    trajectory::viewer(page, prefix, &run.records)?;
    Ok(())
}

fn headline(
    page: &mut Page,
    run: &RunData,
    m: &ecdysis_runner::eval::Metrics,
    iv: &stats::TaskIntervals,
) -> Result<(), ReportError> {
    let mut cards = String::from("<div class=\"cards\">");
    cards += &card(
        &num(Some(m.accuracy), 3),
        &format!("accuracy (mean reward, {} episodes)", m.episodes),
        &ci_text(&iv.accuracy),
    );
    for (k, i) in &iv.pass_hat_k {
        cards += &card(&num(Some(i.estimate), 3), &format!("pass^{k}"), &ci_text(i));
    }
    let floor = run
        .summary
        .as_ref()
        .map(|s| (s.floor_solved, s.floor_tasks));
    cards += &card(
        &floor
            .map(|(a, b)| num(Some(a as f64 / b.max(1) as f64), 3))
            .unwrap_or_else(|| "—".into()),
        "do-nothing floor",
        &floor
            .map(|(a, b)| format!("{a} of {b} tasks solved by doing nothing"))
            .unwrap_or_else(|| "known when the run finishes".into()),
    );
    let failed = run.records.iter().filter(|r| !r.success).count();
    cards += &card(
        &failed.to_string(),
        "failed episodes",
        &format!("of {}", run.records.len()),
    );
    if let Some(l) = run.summary.as_ref().and_then(|s| s.ledger.as_ref()) {
        cards += &card(
            &format!("${:.4}", l.total.usd),
            "model cost",
            "from the usage ledger",
        );
    }
    cards += "</div>";
    page.body += &cards;

    let mut cats = vec!["accuracy".to_string()];
    let mut vals = vec![iv.accuracy.estimate];
    let mut ivs = vec![Some((iv.accuracy.low, iv.accuracy.high))];
    for (k, i) in &iv.pass_hat_k {
        cats.push(format!("pass^{k}"));
        vals.push(i.estimate);
        ivs.push(Some((i.low, i.high)));
    }
    let mut b = Bars::new("Accuracy and pass^k with 95% intervals", cats).series(
        "score",
        charts::color(0),
        vals,
    );
    b.intervals = ivs;
    b.max = Some(1.0);
    b.axis = "score".into();
    if let Some((a, n)) = floor {
        b.reference = Some(("do-nothing floor".into(), a as f64 / n.max(1) as f64));
    }
    page.body += "<div class=\"charts\">";
    page.body += &charts::bars(&b)?;
    page.body += "</div>";
    Ok(())
}

/// Reward class of a cell.
fn cell_class(r: &EpisodeRecord) -> &'static str {
    if r.success {
        "r1"
    } else if r.reward > 0.0 {
        "rp"
    } else {
        "r0"
    }
}

fn grid(page: &mut Page, prefix: &str, run: &RunData) {
    page.heading(3, &format!("{prefix}-grid"), "Reward per task and trial");
    let by: BTreeMap<(&str, u32), &EpisodeRecord> = run
        .records
        .iter()
        .map(|r| ((r.task_id.as_str(), r.trial), r))
        .collect();
    let trials = run.config.settings.trials;
    let mut out = String::from(
        "<p class=\"legend\"><span class=\"r1\">success</span><span class=\"rp\">partial reward</span><span class=\"r0\">failed</span><span class=\"rn\">not run</span> One block per task, one cell per trial; each cell links to its trajectory.</p><div class=\"tgrid\">",
    );
    for task in &run.config.tasks {
        let mut cells = String::new();
        let mut rewards = Vec::new();
        for t in 0..trials {
            match by.get(&(task.as_str(), t)) {
                Some(r) => {
                    rewards.push(r.reward);
                    cells += &format!(
                        "<a class=\"cell {}\" href=\"#{}\" title=\"task {} trial {t}: reward {:.2}, {}\">{}</a>",
                        cell_class(r),
                        esc(&trajectory::episode_id(prefix, r)),
                        esc(task),
                        r.reward,
                        r.end.as_str(),
                        if r.success { "✓" } else { "✗" }
                    );
                }
                None => cells += "<span class=\"cell rn\">·</span>",
            }
        }
        let mean = if rewards.is_empty() {
            None
        } else {
            Some(rewards.iter().sum::<f64>() / rewards.len() as f64)
        };
        out += &format!(
            "<div class=\"trow\"><span class=\"task\" title=\"mean reward {}\">{}</span>{cells}</div>",
            num(mean, 2),
            esc(task)
        );
    }
    out += "</div>";
    page.body += &out;
}

fn ends_and_hooks(
    page: &mut Page,
    prefix: &str,
    run: &RunData,
    m: &ecdysis_runner::eval::Metrics,
) -> Result<(), ReportError> {
    page.heading(
        3,
        &format!("{prefix}-ends"),
        "End reasons and harness interventions",
    );
    page.body += "<div class=\"charts\">";
    let ends: Vec<(String, u64)> = m.ends.iter().map(|(k, v)| (k.clone(), *v)).collect();
    if !ends.is_empty() {
        let mut b = Bars::new(
            "Episodes by end reason",
            ends.iter().map(|e| e.0.clone()).collect(),
        )
        .series(
            "episodes",
            charts::color(0),
            ends.iter().map(|e| e.1 as f64).collect(),
        );
        b.horizontal = true;
        b.decimals = 0;
        b.axis = "episodes".into();
        b.size = (480, 110 + 34 * ends.len() as u32);
        page.body += &charts::bars(&b)?;
    }
    // Interventions by hook and decision (execute, realize, annotate...).
    let mut kinds: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for r in &run.records {
        for h in &r.hooks {
            if h.error.is_some() {
                *kinds
                    .entry(h.hook.clone())
                    .or_default()
                    .entry("failed".into())
                    .or_default() += 1;
            } else if h.intervened {
                *kinds
                    .entry(h.hook.clone())
                    .or_default()
                    .entry(if h.hook == "contract" {
                        "edit".to_string()
                    } else {
                        decision_kind(&h.decision)
                    })
                    .or_default() += 1;
            }
        }
    }
    if !kinds.is_empty() {
        let hooks: Vec<String> = kinds.keys().cloned().collect();
        let all: std::collections::BTreeSet<String> =
            kinds.values().flat_map(|k| k.keys().cloned()).collect();
        let mut b = Bars::new("Harness interventions by hook and decision", hooks.clone());
        for (j, kind) in all.iter().enumerate() {
            b = b.series(
                kind.clone(),
                charts::color(j + 1),
                hooks
                    .iter()
                    .map(|h| kinds[h].get(kind).copied().unwrap_or(0) as f64)
                    .collect(),
            );
        }
        b.stacked = true;
        b.horizontal = true;
        b.decimals = 0;
        b.axis = "hook calls that changed something".into();
        b.size = (560, 110 + 40 * hooks.len() as u32);
        page.body += &charts::bars(&b)?;
    }
    page.body += "</div>";
    if m.hooks.is_empty() {
        page.body += "<p class=\"muted\">No harness (Direct baseline): no hook ran.</p>";
        return Ok(());
    }
    let mut t = String::from(
        "<table><thead><tr><th>hook</th><th class=\"n\">calls</th><th class=\"n\">interventions</th><th class=\"n\">rate</th><th class=\"n\">failures</th><th class=\"n\">fuel / call</th><th class=\"n\">max fuel</th><th class=\"n\">µs / call</th><th class=\"n\">added B / episode</th><th>decisions</th><th>filter</th></tr></thead><tbody>",
    );
    for (hook, h) in &m.hooks {
        let decisions = kinds
            .get(hook)
            .map(|k| {
                k.iter()
                    .map(|(d, n)| format!("{}×{n}", esc(d)))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        t += &format!(
            "<tr><td><code>{}</code></td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.1}</td><td class=\"n\">{}</td><td>{decisions}</td><td>{}</td></tr>",
            esc(hook),
            h.calls,
            h.interventions,
            pct(h.interventions as f64, h.calls as f64),
            h.failures,
            h.fuel_total / h.calls.max(1),
            h.fuel_max,
            h.micros_total as f64 / h.calls.max(1) as f64,
            h.added_bytes_total / m.episodes.max(1),
            if h.interventions + h.failures > 0 {
                format!("<a href=\"?hook={}#{prefix}-traj\">episodes</a>", esc(hook))
            } else {
                String::new()
            }
        );
    }
    t += "</tbody></table>";
    t += &format!(
        "<p class=\"muted\">Text the harness added to the model's input: at most {} bytes (~{} tokens) in one episode (the sandbox's <code>max_added_bytes</code> bounds it).</p>",
        m.added_bytes_max,
        ecdysis_sandbox::sandbox::added::estimated_tokens(m.added_bytes_max)
    );
    page.body += &t;
    Ok(())
}

/// A bin's range, short: `1k–10k`.
fn si(v: f64) -> String {
    let (d, s) = if v >= 1e9 {
        (1e9, "G")
    } else if v >= 1e6 {
        (1e6, "M")
    } else if v >= 1e3 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    let x = v / d;
    if x >= 10.0 || (x - x.round()).abs() < 0.05 {
        format!("{:.0}{s}", x)
    } else {
        format!("{x:.1}{s}")
    }
}

fn distributions(page: &mut Page, prefix: &str, run: &RunData) -> Result<(), ReportError> {
    page.heading(3, &format!("{prefix}-dist"), "Fuel and time");
    page.body += "<div class=\"charts\">";
    // Fuel per hook call, log-binned, stacked by hook.
    let mut fuel: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for r in &run.records {
        for h in &r.hooks {
            if h.hook != "constructor" {
                fuel.entry(h.hook.as_str()).or_default().push(h.fuel as f64);
            }
        }
    }
    let all: Vec<f64> = fuel.values().flatten().copied().collect();
    if !all.is_empty() {
        let bins = log_bins(&all, 12);
        let cats: Vec<String> = bins.iter().map(|b| si(b.0)).collect();
        let mut b = Bars::new("Fuel per hook call (log bins, lower edge)", cats);
        for (j, (hook, vals)) in fuel.iter().enumerate() {
            let counts = bin_counts(vals, &bins);
            b = b.series(*hook, charts::color(j), counts);
        }
        b.stacked = true;
        b.decimals = 0;
        b.axis = "hook calls".into();
        b.size = (560, 300);
        page.body += &charts::bars(&b)?;
    }
    let wall: Vec<f64> = run
        .records
        .iter()
        .map(|r| r.wall_ms.max(1) as f64)
        .collect();
    if !wall.is_empty() {
        let bins = log_bins(&wall, 10);
        let cats: Vec<String> = bins.iter().map(|b| format!("{}ms", si(b.0))).collect();
        let mut b = Bars::new("Episode wall time (log bins, lower edge)", cats).series(
            "episodes",
            charts::color(3),
            bins.iter().map(|b| b.2 as f64).collect(),
        );
        b.decimals = 0;
        b.axis = "episodes".into();
        b.size = (480, 300);
        page.body += &charts::bars(&b)?;
    }
    page.body += "</div>";
    let wall_sum: f64 = run.records.iter().map(|r| r.wall_ms as f64).sum();
    let wait_sum: f64 = run.records.iter().map(|r| r.model_wait_ms).sum();
    let steps: Vec<u32> = run.records.iter().map(|r| r.steps).collect();
    page.body += &format!(
        "<p>Episode wall time in all {} ({} waiting for the models, the rest harness, environment and bookkeeping); {} steps per episode on average.</p>",
        duration(wall_sum / 1000.0),
        pct(wait_sum, wall_sum),
        num(
            (!steps.is_empty())
                .then(|| steps.iter().map(|s| f64::from(*s)).sum::<f64>() / steps.len() as f64),
            1
        )
    );
    Ok(())
}

fn bin_counts(vals: &[f64], bins: &[(f64, f64, u64)]) -> Vec<f64> {
    let mut out = vec![0.0; bins.len()];
    let n = bins.len();
    for v in vals {
        let i = bins
            .iter()
            .position(|b| *v < b.1)
            .unwrap_or(n.saturating_sub(1));
        if n > 0 {
            out[i] += 1.0;
        }
    }
    out
}

fn usage(page: &mut Page, prefix: &str, run: &RunData, m: &ecdysis_runner::eval::Metrics) {
    page.heading(3, &format!("{prefix}-usage"), "Tokens and dollars");
    let mut t = String::from(
        "<table><thead><tr><th>role</th><th class=\"n\">calls</th><th class=\"n\">cache hits</th><th class=\"n\">prompt tokens</th><th class=\"n\">completion tokens</th><th class=\"n\">USD</th></tr></thead><tbody>",
    );
    let ledger = run.summary.as_ref().and_then(|s| s.ledger.as_ref());
    let usd = |role: ModelRole| {
        ledger
            .and_then(|l| l.by_role.get(&role))
            .map(|u| format!("${:.4}", u.usd))
            .unwrap_or_else(|| "—".into())
    };
    t += &format!(
        "<tr><td>agent</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
        m.agent_calls,
        m.agent_cache_hits,
        m.agent_prompt_tokens,
        m.agent_completion_tokens,
        usd(ModelRole::Agent)
    );
    t += &format!(
        "<tr><td>user simulator</td><td class=\"n\">{}</td><td class=\"n\">—</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
        m.user_calls,
        m.user_prompt_tokens,
        m.user_completion_tokens,
        usd(ModelRole::User)
    );
    if let Some(l) = ledger {
        t += &format!(
            "<tr><th>total</th><td></td><td></td><td class=\"n\">{}</td><td class=\"n\">{}</td><th class=\"n\">${:.4}</th></tr>",
            l.total.fresh_tokens.prompt_tokens, l.total.fresh_tokens.completion_tokens, l.total.usd
        );
    }
    t += "</tbody></table>";
    page.body += &t;
    if m.agent_cached_prompt_tokens > 0 {
        page.body += &format!(
            "<p>The endpoint's prefix cache served {:.1}% of the agent's prompt tokens ({} of {}, as it reported them).</p>",
            100.0 * m.agent_cached_prompt_tokens as f64 / m.agent_prompt_tokens.max(1) as f64,
            m.agent_cached_prompt_tokens,
            m.agent_prompt_tokens
        );
    }
    if run.simulated() {
        page.body += "<p class=\"muted\">A simulated agent and the scripted user call no endpoint: no tokens, no dollars.</p>";
    }
    if let Some(l) = ledger
        && !l.unpriced_models.is_empty()
    {
        page.body += &format!(
            "<p class=\"note\">No price for {}: their calls are not in the dollars.</p>",
            esc(&l
                .unpriced_models
                .iter()
                .cloned()
                .collect::<Vec<_>>()
                .join(", "))
        );
    }
}

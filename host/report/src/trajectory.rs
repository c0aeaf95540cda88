//! The trajectory viewer: every episode's conversation in order, each
//! harness action marked (with the original call where the harness changed
//! one), the end reason and the reward breakdown; filters by failure, end
//! reason and intervening hook.
//!
//! System prompts are long and usually identical across a run's episodes:
//! each distinct one is shown once (folded) and the episodes point to it,
//! which keeps a 120-episode report a few megabytes.

use std::collections::{BTreeMap, BTreeSet};

use super::html::{clip, esc, pretty_json, slug};
use super::run::decision_kind;
use super::{Page, ReportError};
use ecdysis_runner::agent::HookRecord;
use ecdysis_runner::agent::{CallSource, EndReason, Entry, EpisodeRecord};

/// The element id of an episode.
pub(crate) fn episode_id(prefix: &str, r: &EpisodeRecord) -> String {
    format!("{prefix}-ep-{}-{}", slug(&r.task_id), r.trial)
}

/// Results longer than this are folded.
const FOLD_CHARS: usize = 600;

/// The system prompt of an episode plus the contract's tool descriptions:
/// what the model was shown before the conversation.
fn preamble(r: &EpisodeRecord) -> (String, Vec<(String, String)>) {
    let system = r.system_prompt().unwrap_or_default().to_string();
    let tools = r
        .hooks
        .iter()
        .find(|h| h.hook == "contract" && h.intervened)
        .and_then(|h| h.decision.get("tool_descriptions"))
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .map(|d| {
                    (
                        d.get("name")
                            .and_then(|v| v.as_str())
                            .unwrap_or("")
                            .to_string(),
                        d.get("description")
                            .and_then(|v| v.as_str())
                            .unwrap_or("")
                            .to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    (system, tools)
}

type Preamble = (String, Vec<(String, String)>);

pub(crate) fn viewer(
    page: &mut Page,
    prefix: &str,
    records: &[EpisodeRecord],
) -> Result<(), ReportError> {
    page.heading(
        3,
        &format!("{prefix}-traj"),
        &format!("Trajectories ({} episodes)", records.len()),
    );
    // Distinct preambles, most shared first.
    let mut counts: BTreeMap<Preamble, usize> = BTreeMap::new();
    for r in records {
        *counts.entry(preamble(r)).or_default() += 1;
    }
    let mut variants: Vec<(Preamble, usize)> = counts.into_iter().collect();
    variants.sort_by_key(|v| std::cmp::Reverse(v.1));
    let index: BTreeMap<&Preamble, usize> = variants
        .iter()
        .enumerate()
        .map(|(i, v)| (&v.0, i))
        .collect();
    let mut out = String::new();
    out +=
        "<details class=\"prompts\"><summary>What the model was shown before each conversation: ";
    out += &format!(
        "{} distinct system prompt{} (after the harness's contract edits and skills)</summary>",
        variants.len(),
        if variants.len() == 1 { "" } else { "s" }
    );
    for (i, ((system, tools), n)) in variants.iter().enumerate() {
        out += &format!(
            "<details id=\"{prefix}-sys-{i}\"><summary>System prompt {} · {} characters · {n} episode{}</summary><pre>{}</pre>",
            i + 1,
            system.chars().count(),
            if *n == 1 { "" } else { "s" },
            esc(system)
        );
        if !tools.is_empty() {
            out += &format!(
                "<p><span class=\"badge h\">contract</span> the harness rewrote {} tool description{}:</p><table><tbody>",
                tools.len(),
                if tools.len() == 1 { "" } else { "s" }
            );
            for (name, d) in tools {
                out += &format!(
                    "<tr><td><code>{}</code></td><td class=\"msg\">{}</td></tr>",
                    esc(name),
                    esc(d)
                );
            }
            out += "</tbody></table>";
        }
        out += "</details>";
    }
    out += "</details>";

    // Filters: rendered with every option; the script shows them and
    // hides episodes. Without scripting every episode stays listed.
    let ends: BTreeSet<&str> = records.iter().map(|r| r.end.as_str()).collect();
    let hooks: BTreeSet<String> = records.iter().flat_map(intervening_hooks).collect();
    out += &format!(
        "<div class=\"viewer\" id=\"{prefix}-viewer\"><form class=\"filters\" hidden onsubmit=\"return false\"><label><input type=\"checkbox\" name=\"failed\" value=\"1\"> failed only</label><label>end reason <select name=\"end\"><option value=\"\">any</option>"
    );
    for e in &ends {
        out += &format!("<option value=\"{}\">{}</option>", esc(e), esc(e));
    }
    out += "</select></label><label>harness hook that intervened <select name=\"hook\"><option value=\"\">any</option>";
    for h in &hooks {
        out += &format!("<option value=\"{}\">{}</option>", esc(h), esc(h));
    }
    out += "</select></label><button type=\"button\" class=\"expand\">expand shown</button><button type=\"button\" class=\"collapse\">collapse all</button><span class=\"count\"></span></form><noscript><p class=\"muted\">Filters need scripting; every episode is listed below.</p></noscript>";
    for r in records {
        let v = index.get(&preamble(r)).copied().unwrap_or(0);
        out += &episode(prefix, r, v);
    }
    out += "</div>";
    page.body += &out;
    Ok(())
}

/// Hooks that intervened or failed in an episode.
fn intervening_hooks(r: &EpisodeRecord) -> BTreeSet<String> {
    r.hooks
        .iter()
        .filter(|h| h.intervened || h.error.is_some())
        .map(|h| h.hook.clone())
        .collect()
}

fn reward_badge(r: &EpisodeRecord) -> String {
    let class = if r.success {
        "ok"
    } else if r.reward > 0.0 {
        "warn"
    } else {
        "bad"
    };
    format!(
        "<span class=\"badge {class}\">reward {:.2}</span>",
        r.reward
    )
}

fn episode(prefix: &str, r: &EpisodeRecord, variant: usize) -> String {
    let hooks = intervening_hooks(r);
    let interventions: BTreeMap<&str, usize> =
        r.interventions().fold(BTreeMap::new(), |mut m, h| {
            *m.entry(h.hook.as_str()).or_default() += 1;
            m
        });
    let summary_hooks = if interventions.is_empty() {
        "no intervention".to_string()
    } else {
        interventions
            .iter()
            .map(|(h, n)| format!("{}×{n}", esc(h)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut out = format!(
        "<details class=\"ep\" id=\"{}\" data-failed=\"{}\" data-end=\"{}\" data-hooks=\"{}\"><summary>{} <strong>task {}</strong> · trial {} · <span class=\"badge{}\">{}</span> · {} steps · {} tool error{} · harness: {}</summary><div class=\"ep-body\">",
        esc(&episode_id(prefix, r)),
        if r.success { 0 } else { 1 },
        esc(r.end.as_str()),
        esc(&hooks.into_iter().collect::<Vec<_>>().join(" ")),
        reward_badge(r),
        esc(&r.task_id),
        r.trial,
        if matches!(r.end, EndReason::AgentStop | EndReason::UserStop) {
            ""
        } else {
            " bad"
        },
        esc(r.end.as_str()),
        r.steps,
        r.tool_errors,
        if r.tool_errors == 1 { "" } else { "s" },
        summary_hooks
    );
    out += &format!(
        "<p class=\"muted\">seed {} · {} ms wall ({:.0} ms waiting for models) · agent {} calls, {} + {} tokens · user {} turns</p>",
        r.seed,
        r.wall_ms,
        r.model_wait_ms,
        r.agent_usage.calls,
        r.agent_usage.prompt_tokens,
        r.agent_usage.completion_tokens,
        r.user_usage.calls
    );
    out += &reward_breakdown(r);
    out += "<ol class=\"transcript\">";
    for e in &r.transcript {
        out += &entry(prefix, r, e, variant);
    }
    out += &end_entry(r);
    out += "</ol>";
    let logs: Vec<&HookRecord> = r.hooks.iter().filter(|h| !h.logs.is_empty()).collect();
    if !logs.is_empty() {
        out += "<details><summary>Harness log lines</summary><pre>";
        for h in logs {
            for l in &h.logs {
                out += &format!("step {} {}: {}\n", h.step, esc(&h.hook), esc(l));
            }
        }
        out += "</pre></details>";
    }
    out += "</div></details>\n";
    out
}

/// The stored evaluation: reward, and the DB / communicate / action
/// checks (actions are a diagnostic in τ²'s retail and airline: the
/// reward is DB × communicate).
fn reward_breakdown(r: &EpisodeRecord) -> String {
    let Some(ev) = &r.evaluation else {
        return "<p class=\"muted\">No stored evaluation.</p>".into();
    };
    let flag = |k: &str| match ev.get(k).and_then(|v| v.as_bool()) {
        Some(true) => "<span class=\"badge ok\">ok</span>".to_string(),
        Some(false) => "<span class=\"badge bad\">failed</span>".to_string(),
        None => "<span class=\"badge\">not checked</span>".to_string(),
    };
    let basis: Vec<String> = ev
        .get("reward_basis")
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(|s| esc(s).to_string()))
                .collect()
        })
        .unwrap_or_default();
    let mut out = format!(
        "<table class=\"reward\"><tbody><tr><th>reward</th><td>{:.2}{}</td></tr><tr><th>database</th><td>{}</td></tr><tr><th>communicate</th><td>{}",
        r.reward,
        if basis.is_empty() {
            String::new()
        } else {
            format!(
                " <span class=\"muted\">(basis: {})</span>",
                basis.join(" × ")
            )
        },
        flag("db_match"),
        flag("communicate_ok"),
    );
    if let Some(checks) = ev.get("communicate_checks").and_then(|v| v.as_array())
        && !checks.is_empty()
    {
        out += "<ul>";
        for c in checks {
            let met = c
                .get("met")
                .or_else(|| c.get("matched"))
                .and_then(|v| v.as_bool());
            out += &format!(
                "<li>{} {}</li>",
                if met == Some(true) { "✓" } else { "✗" },
                esc(&compact(c))
            );
        }
        out += "</ul>";
    }
    out += &format!(
        "</td></tr><tr><th>actions{}</th><td>{}",
        if basis.iter().any(|b| b == "ACTION") {
            ""
        } else {
            " <span class=\"muted\">(diagnostic)</span>"
        },
        flag("action_ok")
    );
    if let Some(checks) = ev.get("action_checks").and_then(|v| v.as_array())
        && !checks.is_empty()
    {
        out += " ";
        for c in checks {
            let matched = c.get("matched").and_then(|v| v.as_bool()) == Some(true);
            out += &format!(
                "<span class=\"badge {}\" title=\"{}\">{}</span> ",
                if matched { "ok" } else { "bad" },
                esc(c.get("action_id").and_then(|v| v.as_str()).unwrap_or("")),
                esc(c.get("name").and_then(|v| v.as_str()).unwrap_or("?"))
            );
        }
    }
    out += "</td></tr>";
    // τ² telecom: checks run on the final state of both parties.
    if let Some(checks) = ev.get("env_assertion_checks").and_then(|v| v.as_array())
        && !checks.is_empty()
    {
        out += "<tr><th>env assertions</th><td>";
        for c in checks {
            let met = c.get("met").and_then(|v| v.as_bool()) == Some(true);
            out += &format!(
                "<span class=\"badge {}\" title=\"{}\">{}</span> ",
                if met { "ok" } else { "bad" },
                esc(&compact(c)),
                esc(c.get("func_name").and_then(|v| v.as_str()).unwrap_or("?"))
            );
        }
        out += "</td></tr>";
    }
    if ev.get("premature").and_then(|v| v.as_bool()) == Some(true) {
        out += "<tr><th>note</th><td>ended prematurely: only stops earn reward</td></tr>";
    }
    out += "</tbody></table>";
    out
}

/// One line of JSON for a check object.
fn compact(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Object(m) => m
            .iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}: {s}"),
                other => format!("{k}: {other}"),
            })
            .collect::<Vec<_>>()
            .join(" · "),
        other => other.to_string(),
    }
}

fn step(n: u32) -> String {
    format!("<span class=\"step\">step {n}</span>")
}

/// The kind of a harness note: the regulate hook's decision at that step
/// (`annotate` or `inject`), `skill` or `block` (text held back).
fn note_kind(r: &EpisodeRecord, at: u32, hook: &str, text: &str) -> &'static str {
    match hook {
        "skills" => "skill injected",
        "realize" => "message held back (block)",
        "regulate" => {
            let found = r.hooks.iter().find(|h| {
                h.hook == "regulate"
                    && h.step == at
                    && h.decision
                        .as_object()
                        .is_some_and(|o| o.values().any(|v| v.as_str() == Some(text)))
            });
            match found.map(|h| decision_kind(&h.decision)).as_deref() {
                Some("annotate") => "annotation",
                Some("inject") => "injected recovery message",
                _ => "note",
            }
        }
        _ => "note",
    }
}

// Slightly over our ~150-line habit on purpose: one arm per transcript
// entry kind, each a self-contained HTML template, side by side so the
// viewer's markup is read (and escaped) in one place.
fn entry(prefix: &str, r: &EpisodeRecord, e: &Entry, variant: usize) -> String {
    match e {
        Entry::System { text } => {
            let contract = r.hooks.iter().any(|h| h.hook == "contract" && h.intervened);
            format!(
                "<li class=\"e-sys\"><span class=\"who\">system</span>{}<a href=\"#{prefix}-sys-{variant}\">system prompt {}</a> ({} characters){}</li>",
                if contract {
                    "<span class=\"badge h\">contract edited</span> "
                } else {
                    ""
                },
                variant + 1,
                text.chars().count(),
                " <span class=\"muted\">— shown once above, folded</span>"
            )
        }
        Entry::User { step: s, text } => format!(
            "<li class=\"e-user\">{}<span class=\"who\">user</span><div class=\"msg\">{}</div></li>",
            step(*s),
            esc(text)
        ),
        Entry::Agent {
            step: s,
            text,
            tool_calls,
            testbed,
            withheld,
        } => {
            let mut out = format!(
                "<li class=\"e-agent\">{}<span class=\"who\">agent</span>",
                step(*s)
            );
            if let Some(t) = text {
                out += &format!("<div class=\"msg\">{}</div>", esc(t));
            }
            if let Some(w) = withheld {
                out += &format!(
                    "<div class=\"muted\">not said to the user: {} (the COMMUNICATE check ignores it)</div>",
                    match w {
                        ecdysis_runner::agent::Withheld::Realized =>
                            "the harness realized it into calls",
                        ecdysis_runner::agent::Withheld::Blocked => "the harness held it back",
                    }
                );
            }
            for c in tool_calls {
                out += &format!(
                    "<div class=\"call\">→ calls <strong>{}</strong>({})</div>",
                    esc(&c.name),
                    esc(&clip(&c.arguments, 400))
                );
            }
            if let Some(n) = testbed
                && (!n.quirks.is_empty() || !n.corrected.is_empty())
            {
                let fired: Vec<String> = n
                    .quirks
                    .iter()
                    .map(|q| q.name.as_str().to_string())
                    .collect();
                let fixed: Vec<String> = n
                    .corrected
                    .iter()
                    .map(|q| q.name.as_str().to_string())
                    .collect();
                let mut parts = Vec::new();
                if !fired.is_empty() {
                    parts.push(format!("quirks fired: {}", fired.join(", ")));
                }
                if !fixed.is_empty() {
                    parts.push(format!(
                        "corrected by what the model was shown: {}",
                        fixed.join(", ")
                    ));
                }
                out += &format!(
                    "<div class=\"muted\">testbed ground truth — {}</div>",
                    esc(&parts.join("; "))
                );
            }
            out + "</li>"
        }
        Entry::Tool {
            step: s,
            name,
            arguments,
            proposed,
            content,
            error,
            blocked,
            source,
            ..
        } => {
            let acted = *blocked
                || proposed.is_some()
                || !matches!(source, CallSource::Model | CallSource::User);
            let mut badges = String::new();
            match source {
                CallSource::Model => {}
                CallSource::Rewritten => {
                    badges += "<span class=\"badge h\">rewritten by realize</span> "
                }
                CallSource::Realized => {
                    badges += "<span class=\"badge h\">rescued from text by realize</span> "
                }
                CallSource::Forced => {
                    badges += "<span class=\"badge h\">forced by regulate</span> "
                }
                CallSource::User => {
                    badges += "<span class=\"badge\">the user, on their device</span> "
                }
            }
            if *blocked {
                badges += "<span class=\"badge bad\">blocked by realize</span> ";
            }
            if *error {
                badges += "<span class=\"badge bad\">error</span> ";
            }
            let mut out = format!(
                "<li class=\"e-tool{}{}\">{}<span class=\"who\">tool</span>{badges}<span class=\"call\"><strong>{}</strong>({})</span>",
                if *error || *blocked { " err" } else { "" },
                if acted { " act" } else { "" },
                step(*s),
                esc(name),
                esc(&clip(arguments, 400))
            );
            if let Some(p) = proposed {
                out += &format!(
                    "<div class=\"call\">original call: <span class=\"orig\">{}({})</span></div>",
                    esc(&p.name),
                    esc(&clip(&p.arguments, 400))
                );
            } else if *source == CallSource::Realized {
                out += "<div class=\"muted\">the model wrote this call as text in its message above</div>";
            }
            let shown = pretty_json(content);
            if shown.chars().count() > FOLD_CHARS {
                out += &format!(
                    "<details><summary>result · {} characters: <code>{}</code></summary><pre>{}</pre></details>",
                    content.chars().count(),
                    esc(&clip(&content.replace('\n', " "), 100)),
                    esc(&shown)
                );
            } else {
                out += &format!("<pre>{}</pre>", esc(&shown));
            }
            out + "</li>"
        }
        Entry::Harness {
            step: s,
            hook,
            text,
        } => format!(
            "<li class=\"e-harness\">{}<span class=\"who\">harness</span><span class=\"badge h\">{} · {}</span><div class=\"msg\">{}</div></li>",
            step(*s),
            esc(hook),
            note_kind(r, *s, hook, text),
            esc(text)
        ),
    }
}

fn end_entry(r: &EpisodeRecord) -> String {
    let mut out = format!(
        "<li class=\"e-end\"><span class=\"who\">end</span><strong>{}</strong>",
        esc(r.end.as_str())
    );
    if r.end == EndReason::HarnessStop {
        out += " <span class=\"badge h\">stopped by regulate</span>";
    }
    if let Some(d) = &r.end_detail {
        out += &format!(" — <span class=\"msg\">{}</span>", esc(d));
    }
    for h in r.hooks.iter().filter(|h| h.error.is_some()) {
        if let Some(e) = &h.error {
            out += &format!(
                "<div><span class=\"badge bad\">hook failed</span> {} at step {} ({}, {}): {}</div>",
                esc(&h.hook),
                h.step,
                esc(&e.kind),
                esc(&serde_json::to_value(e.policy)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()),
                esc(&e.message)
            );
        }
    }
    out + "</li>"
}

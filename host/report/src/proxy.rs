//! A proxy's records directory (`ecdysis-host proxy --records DIR`): the
//! conversations it served, their requests, the replies the harness refused
//! and the hook calls of each live turn.

use ecdysis_proxy::records::{ConversationLog, Records};
use ecdysis_runner::agent::HookRecord;

use super::html::{clip, esc, hash, slug};
use super::{Page, ReportError};

/// `records::read_dir`, with its errors as the report's (file and line
/// named).
pub(crate) fn load(dir: &std::path::Path) -> Result<Records, ReportError> {
    use ecdysis_proxy::records::RecordsError;
    ecdysis_proxy::records::read_dir(dir).map_err(|e| match e {
        RecordsError::Corrupt { path, line, reason } => ReportError::Corrupt {
            path,
            reason: format!("line {line}: {reason}"),
        },
        RecordsError::BadManifest { path, reason } => ReportError::Corrupt { path, reason },
        RecordsError::NotRecords(dir) => ReportError::Unrecognised(dir),
        RecordsError::Io { path, source } => ReportError::Io { path, source },
    })
}

pub(crate) fn section(page: &mut Page, prefix: &str, records: &Records) {
    let name = records
        .dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    page.heading(
        2,
        &format!("{prefix}-proxy"),
        &format!("Proxy records {name}"),
    );
    let m = &records.manifest;
    page.body += &format!(
        "<p class=\"meta\">harness {} · domain <code>{}</code> · upstream <code>{}</code> · at most {} upstream tries after a block per request</p>\n",
        m.harness.as_deref().map_or_else(|| "—".to_string(), hash),
        esc(&m.domain),
        esc(&m.upstream),
        m.max_retries,
    );
    let cs = &records.conversations;
    let t = records.totals();
    page.body += &format!(
        "<p>{} conversations · {} requests ({} replayed) · {} refused replies asked again ({} requests out of tries) · {} upstream completions · {} prompt + {} completion tokens · {} hook calls (replays included), {} of them interventions</p>\n",
        t.conversations,
        t.requests,
        t.replayed,
        t.refused,
        t.exhausted,
        t.upstream,
        t.prompt_tokens,
        t.completion_tokens,
        t.hooks,
        t.interventions,
    );
    let limit = m
        .max_usd
        .map_or_else(String::new, |l| format!(" (spending limit ${l:.4})"));
    page.body += &format!(
        "<p>Ledger: {}{limit}</p>\n",
        esc(&ecdysis_proxy::ledger::spend_sentence(&records.ledger()))
    );
    page.body += "<table><thead><tr><th>conversation</th><th class=\"n\">requests</th><th class=\"n\">replayed</th><th class=\"n\">refused replies</th><th class=\"n\">upstream completions</th><th class=\"n\">tokens in / out</th><th class=\"n\">hook calls</th><th class=\"n\">interventions</th></tr></thead><tbody>";
    for c in cs {
        let n = c.counts();
        page.body += &format!(
            "<tr><td><a href=\"#{prefix}-conv-{}\"><code>{}</code></a></td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{} / {}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            slug(&c.id),
            esc(&clip(&c.id, 40)),
            n.requests,
            n.replayed,
            n.refused,
            n.upstream,
            n.prompt_tokens,
            n.completion_tokens,
            n.hooks,
            n.interventions,
        );
    }
    page.body += "</tbody></table>\n";
    page.heading(3, &format!("{prefix}-conversations"), "Conversations");
    for c in cs {
        page.body += &conversation(prefix, c);
    }
}

fn conversation(prefix: &str, c: &ConversationLog) -> String {
    let mut out = format!(
        "<details class=\"ep\" id=\"{prefix}-conv-{}\"><summary><strong><code>{}</code></strong> · {} requests · {} interventions · <code>{}</code></summary><div class=\"ep-body\">",
        slug(&c.id),
        esc(&c.id),
        c.requests.len(),
        c.counts().interventions,
        esc(&c.file.display().to_string()),
    );
    for (line, r) in c.requests.iter().enumerate() {
        out += &format!(
            "<h4>Request {} (line {}){} · {} upstream completions · {} + {} tokens{}</h4>",
            r.request,
            line + 1,
            if r.replayed {
                format!(
                    " · episode rebuilt by replay (the first {} hook calls)",
                    r.replayed_hooks
                )
            } else {
                String::new()
            },
            r.upstream_requests,
            r.prompt_tokens,
            r.completion_tokens,
            if r.exhausted { " · out of tries" } else { "" },
        );
        if !r.retries.is_empty() {
            out += "<ul>";
            for (k, retry) in r.retries.iter().enumerate() {
                out += &format!(
                    "<li>refused reply {}: {}</li>",
                    k + 1,
                    esc(&retry.feedback.join(" · "))
                );
            }
            out += "</ul>";
        }
        out += &hooks_table(&r.hooks);
    }
    out += "</div></details>\n";
    out
}

fn hooks_table(hooks: &[HookRecord]) -> String {
    if hooks.is_empty() {
        return "<p class=\"note\">No hook call in the live turn.</p>".into();
    }
    let mut out = String::from(
        "<table><thead><tr><th class=\"n\">step</th><th>hook</th><th>intervened</th><th>decision</th><th class=\"n\">fuel</th><th class=\"n\">µs</th></tr></thead><tbody>",
    );
    for h in hooks {
        let failure = h
            .error
            .as_ref()
            .map(|e| format!(" (failed, {}: {})", esc(&e.kind), esc(&e.message)))
            .unwrap_or_default();
        out += &format!(
            "<tr><td class=\"n\">{}</td><td>{}</td><td>{}</td><td><code>{}</code>{failure}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            h.step,
            esc(&h.hook),
            if h.intervened { "yes" } else { "" },
            esc(&clip(&h.decision.to_string(), 300)),
            h.fuel,
            h.micros,
        );
    }
    out += "</tbody></table>";
    out
}

//! `report --watch`: the report of directories still being written, served
//! over HTTP and kept current. Each request renders the page from the
//! directories as they are (the page stays a pure function of them); a
//! small script on the page asks for the directories' fingerprint every
//! two seconds and reloads (keeping the scroll position) when it changed.
//! A banner shows progress and an estimate of the time left, and the page's
//! title starts with it, so a background tab says how far the work got.

use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;

use ecdysis_report::{self as report, ReportOptions};

struct Watched {
    dirs: Vec<PathBuf>,
    opts: ReportOptions,
}

/// Serves until Ctrl-C.
pub async fn watch(dirs: Vec<PathBuf>, opts: ReportOptions, addr: SocketAddr) -> Result<()> {
    for d in &dirs {
        anyhow::ensure!(d.is_dir(), "{} is not a directory", d.display());
    }
    let state = Arc::new(Watched { dirs, opts });
    let app = axum::Router::new()
        .route("/", get(page))
        .route("/version", get(version))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {addr}"))?;
    eprintln!(
        "watching: http://{} (Ctrl-C ends)",
        listener.local_addr().unwrap_or(addr)
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .context("serving the report")
}

async fn version(State(w): State<Arc<Watched>>) -> Response {
    let v = fingerprint(&w.dirs);
    ([(header::CACHE_CONTROL, "no-store")], format!("{v:016x}")).into_response()
}

async fn page(State(w): State<Arc<Watched>>) -> Response {
    let w2 = w.clone();
    // Rendering reads files and computes intervals: off the async workers.
    let (v, rendered, progress) = tokio::task::spawn_blocking(move || {
        let v = fingerprint(&w2.dirs);
        let rendered = report::render(&w2.dirs, &w2.opts);
        let progress: Vec<String> = w2.dirs.iter().map(|d| progress_of(d)).collect();
        (v, rendered, progress)
    })
    .await
    .unwrap_or_else(|e| {
        (
            0,
            Err(report::ReportError::NotADirectory(e.to_string().into())),
            vec![],
        )
    });
    let banner = banner(v, &progress);
    let title = escape(&progress.join(" · "));
    let (status, body) = match rendered {
        Ok(html) => (StatusCode::OK, retitle(&inject(&html, &banner), &title)),
        // A directory caught mid-write, or not a result directory yet: say
        // so, and reload when it changes.
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "<!doctype html><html><head><title>{title}</title></head><body><p>The report cannot be drawn yet: {}</p>{banner}</body></html>",
                escape(&e.to_string())
            ),
        ),
    };
    (status, [(header::CACHE_CONTROL, "no-store")], Html(body)).into_response()
}

fn inject(html: &str, banner: &str) -> String {
    match html.rfind("</body>") {
        Some(at) => format!("{}{banner}{}", &html[..at], &html[at..]),
        None => format!("{html}{banner}"),
    }
}

/// Puts the (escaped) progress in front of the report's own title.
fn retitle(html: &str, progress: &str) -> String {
    match html.find("<title>") {
        Some(at) => {
            let at = at + "<title>".len();
            format!("{}{progress} · {}", &html[..at], &html[at..])
        }
        None => html.to_string(),
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn banner(version: u64, progress: &[String]) -> String {
    format!(
        r#"<div id="ecdysis-watch" data-version="{version:016x}" data-polls="0" style="position:fixed;bottom:0;right:0;background:#222;color:#fff;padding:4px 8px;font:12px sans-serif;z-index:9">live: {}</div>
<script>(function(){{var el=document.getElementById("ecdysis-watch");var v=el.dataset.version;
var y=sessionStorage.getItem("ecdysis-watch-scroll");if(y){{window.scrollTo(0,+y);sessionStorage.removeItem("ecdysis-watch-scroll");}}
setInterval(function(){{fetch("/version",{{cache:"no-store"}}).then(function(r){{return r.text();}}).then(function(t){{el.dataset.polls=String(+el.dataset.polls+1);if(t.trim()!==v){{sessionStorage.setItem("ecdysis-watch-scroll",String(window.scrollY));location.reload();}}}}).catch(function(){{}});}},2000);}})();</script>"#,
        escape(&progress.join(" · "))
    )
}

/// Sizes and modification times of the files a result directory grows by
/// (not the report or tracking state written beside them).
fn fingerprint(dirs: &[PathBuf]) -> u64 {
    fn walk(dir: &Path, depth: u32, h: &mut std::collections::hash_map::DefaultHasher) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if matches!(
                name.as_ref(),
                "report.html" | "mlflow.json" | "source" | "staging" | "target" | "wit"
            ) {
                continue;
            }
            let Ok(m) = e.metadata() else { continue };
            name.hash(h);
            if m.is_dir() {
                if depth > 0 {
                    walk(&e.path(), depth - 1, h);
                }
            } else {
                m.len().hash(h);
                m.modified().ok().hash(h);
            }
        }
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for d in dirs {
        walk(d, 4, &mut h);
    }
    h.finish()
}

fn read_json(path: &Path) -> Option<serde_json::Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn complete_lines(path: &Path) -> usize {
    std::fs::read(path)
        .map(|b| b.iter().filter(|c| **c == b'\n').count())
        .unwrap_or(0)
}

fn started(dir: &Path) -> Option<SystemTime> {
    std::fs::metadata(dir.join("config.json"))
        .and_then(|m| m.modified())
        .ok()
}

/// `done of planned units, elapsed, ETA` for one directory.
fn progress_of(dir: &Path) -> String {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let config = read_json(&dir.join("config.json"));
    // A training's config plans rounds; it is there before its first file.
    let planned_rounds = config.as_ref().and_then(|c| c["rounds"].as_u64());
    let (done, planned, unit) = if dir.join("rounds.jsonl").is_file()
        || dir.join("initial").is_file()
        || planned_rounds.is_some()
    {
        let rounds = planned_rounds.unwrap_or(0) as usize;
        let episodes: usize = std::fs::read_dir(dir.join("evals"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| complete_lines(&e.path().join("trajectories.jsonl")))
            .sum();
        let done = complete_lines(&dir.join("rounds.jsonl"));
        return finish(
            dir,
            &name,
            done,
            rounds,
            "rounds",
            &format!(", {episodes} episodes evaluated"),
        );
    } else if dir.join("trajectories.jsonl").is_file() {
        let c = config.unwrap_or_default();
        let planned =
            c["tasks"].as_array().map_or(0, Vec::len) * c["trials"].as_u64().unwrap_or(1) as usize;
        (
            complete_lines(&dir.join("trajectories.jsonl")),
            planned,
            "episodes",
        )
    } else {
        // An experiment: its methods' rounds.
        let mut done = 0;
        let mut planned = 0;
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.join("rounds.jsonl").is_file() || p.join("initial").is_file() {
                done += complete_lines(&p.join("rounds.jsonl"));
                planned += read_json(&p.join("config.json"))
                    .and_then(|c| c["rounds"].as_u64())
                    .unwrap_or(0) as usize;
            }
        }
        (done, planned, "rounds")
    };
    finish(dir, &name, done, planned, unit, "")
}

fn finish(dir: &Path, name: &str, done: usize, planned: usize, unit: &str, extra: &str) -> String {
    if dir.join("summary.json").is_file() || dir.join("experiment.json").is_file() {
        return format!("{name}: finished ({done} {unit}{extra})");
    }
    let elapsed = started(dir)
        .and_then(|t| t.elapsed().ok())
        .map_or(0.0, |d| d.as_secs_f64());
    let eta = if done > 0 && planned > done {
        format!(
            ", about {:.0} s left",
            elapsed / done as f64 * (planned - done) as f64
        )
    } else {
        String::new()
    };
    format!("{name}: {done} of {planned} {unit}{extra}, {elapsed:.0} s{eta}")
}
